package tailorgrpc

// A real grpc-go server on loopback, with a service defined by hand (no
// protoc): unary Echo and server-streaming Watch, both answering with the
// encoding of the Tailor context their handler saw.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tailor-sched/tailor/sdk/go/gate"
	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// observation is what a handler saw.
type observation struct {
	ctx     tailorctx.Context
	ok      bool
	baggage string
}

// echo is the service: each call reports what it saw on seen, then waits for
// hold (if set) to close when the request's text is "hold".
type echo struct {
	seen chan observation
	hold chan struct{}
}

func (e *echo) observe(ctx context.Context, text string) string {
	c, ok := tailorctx.FromContext(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	e.seen <- observation{c, ok, strings.Join(md.Get("baggage"), ",")}
	if text == "hold" {
		<-e.hold
	}
	return tailorctx.Encode(c)
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "tailor.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return wrapperspb.String(srv.(*echo).observe(ctx, req.(*wrapperspb.StringValue).Value)), nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/tailor.test.Echo/Echo"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			for i := 0; i < 2; i++ {
				if err := stream.SendMsg(wrapperspb.String(srv.(*echo).observe(stream.Context(), in.Value))); err != nil {
					return err
				}
			}
			return nil
		},
	}},
}

// serve starts a grpc-go server with the interceptors on a loopback port.
func serve(t *testing.T, s *Server, e *echo) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.Unary()), grpc.StreamInterceptor(s.Stream()))
	srv.RegisterService(&echoDesc, e)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func dial(t *testing.T, addr string, cfg ClientConfig) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(UnaryClient(cfg)), grpc.WithStreamInterceptor(StreamClient(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func call(ctx context.Context, conn *grpc.ClientConn, text string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, "/tailor.test.Echo/Echo", wrapperspb.String(text), out)
	return out.Value, err
}

func newEcho() *echo { return &echo{seen: make(chan observation, 16), hold: make(chan struct{})} }

func TestUnaryAndStreamCallsCarryTheChildContext(t *testing.T) {
	e := newEcho()
	conn := dial(t, serve(t, NewServer(ServerConfig{}), e), ClientConfig{})
	parent := tailorctx.Context{GAT: wallNanos() - 1000, Deadline: wallNanos() + uint64(time.Second), Class: 2, Fanout: 3, Hop: 1}
	ctx := tailorctx.NewContext(context.Background(), parent)
	ctx = metadata.AppendToOutgoingContext(ctx, "baggage", "userId=alice", "baggage", "tailor=1.g5.c0.k1.h0,z=1")

	got, err := call(ctx, conn, "hi")
	if err != nil {
		t.Fatal(err)
	}
	want := parent.Child()
	o := <-e.seen
	if !o.ok || o.ctx != want || got != tailorctx.Encode(want) {
		t.Fatalf("unary: saw %+v, want %+v", o.ctx, want)
	}
	if o.baggage != "userId=alice,tailor="+tailorctx.Encode(want)+",z=1" {
		t.Fatalf("baggage: %q", o.baggage)
	}

	stream, err := conn.NewStream(ctx, &echoDesc.Streams[0], "/tailor.test.Echo/Watch")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(wrapperspb.String("hi")); err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	n := 0
	for {
		m := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if m.Value != tailorctx.Encode(want) {
			t.Fatalf("stream saw %q, want %q", m.Value, tailorctx.Encode(want))
		}
		<-e.seen
		n++
	}
	if n != 2 {
		t.Fatalf("%d stream messages", n)
	}
}

func TestTheGRPCDeadlineBecomesTheTailorDeadlineOnlyWithoutAContext(t *testing.T) {
	e := newEcho()
	conn := dial(t, serve(t, NewServer(ServerConfig{}), e), ClientConfig{})
	// No Tailor context, a 5 s gRPC timeout: the hop takes now + 5 s as the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := wallNanos()
	if _, err := call(ctx, conn, "hi"); err != nil {
		t.Fatal(err)
	}
	after := wallNanos()
	o := <-e.seen
	if o.ctx.Deadline < before+uint64(4*time.Second) || o.ctx.Deadline > after+uint64(5*time.Second) || o.ctx.GAT < before || o.ctx.GAT > after {
		t.Fatalf("deadline from grpc-timeout: %+v (window %d..%d)", o.ctx, before, after)
	}
	// A call that carries a context keeps that context's (absent) deadline.
	parent := tailorctx.Stamped(wallNanos())
	if _, err := call(tailorctx.NewContext(ctx, parent), conn, "hi"); err != nil {
		t.Fatal(err)
	}
	if o := <-e.seen; o.ctx.Deadline != tailorctx.Never {
		t.Fatalf("carried context's deadline replaced: %+v", o.ctx)
	}
}

func TestTimeoutFromDeadlineSendsTheTailorDeadlineAsGrpcTimeout(t *testing.T) {
	e := newEcho()
	addr := serve(t, NewServer(ServerConfig{}), e)
	mapped := dial(t, addr, ClientConfig{TimeoutFromDeadline: true})
	// A request being served with a deadline 50 ms away; its callee holds the call.
	parent := tailorctx.Context{GAT: wallNanos(), Deadline: wallNanos() + uint64(50*time.Millisecond), Fanout: 1}
	start := time.Now()
	_, err := call(tailorctx.NewContext(context.Background(), parent), mapped, "hold")
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 5*time.Second {
		t.Fatalf("got %v after %v, want DEADLINE_EXCEEDED near 50 ms", err, time.Since(start))
	}
	<-e.seen
	close(e.hold)
}

func TestTheGateOrdersCallsAndShedsWithGRPCStatuses(t *testing.T) {
	g, _ := gate.New(gate.Config{Policy: gate.ORF, C: 1, MaxQueue: 4, RejectLate: true})
	e := newEcho()
	conn := dial(t, serve(t, NewServer(ServerConfig{Gate: g}), e), ClientConfig{})
	base := wallNanos() - uint64(time.Second)
	// The client interceptor sends the child: hop+1, same GAT.
	at := func(gat uint64) context.Context {
		return tailorctx.NewContext(context.Background(), tailorctx.Stamped(gat))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := call(at(base), conn, "hold"); err != nil {
			t.Error(err)
		}
	}()
	<-e.seen // the holder is inside
	gats := []uint64{base + 40, base + 10, base + 30, base + 20}
	for i, gat := range gats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := call(at(gat), conn, "hi"); err != nil {
				t.Error(err)
			}
		}()
		for g.Waiting() != i+1 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	_, err := call(at(base), conn, "hi")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "queue full") {
		t.Fatalf("full queue: %v", err)
	}
	close(e.hold)
	var order []uint64
	for range gats {
		order = append(order, (<-e.seen).ctx.GAT)
	}
	wg.Wait()
	if fmt.Sprint(order) != fmt.Sprint([]uint64{base + 10, base + 20, base + 30, base + 40}) {
		t.Fatalf("served %v", order)
	}
	// A context whose deadline has passed: shed by the server (not by the client's own timer).
	late := tailorctx.Context{GAT: wallNanos() - 2000, Deadline: wallNanos() - 1000, Fanout: 1}
	_, err = call(tailorctx.NewContext(context.Background(), late), conn, "hi")
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "tailor gate") {
		t.Fatalf("late: %v", err)
	}
	if st := g.Stats(); st.ShedQueueFull != 1 || st.ShedDeadline != 1 || st.Running != 0 || st.Admitted != 5 {
		t.Fatalf("%+v", st)
	}
	var shed *gate.ShedError
	if errors.As(err, &shed) {
		t.Fatal("a gRPC client gets a status, not the gate's error value")
	}
}
