// Package tailorgrpc carries the Tailor request context through grpc-go:
// unary and stream interceptors for servers (extract, clamp, stamp at the
// edge, strip what is not trusted, map the gRPC deadline, order handlers
// through a gate, register their threads with the node's kernel scheduler)
// and for clients (forward the context of the request being served).
//
// It is a module of its own so that the core module
// (github.com/tailor-sched/tailor/sdk/go) stays free of grpc-go.
package tailorgrpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailor-sched/tailor/sdk/go/gate"
	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
	"github.com/tailor-sched/tailor/sdk/go/tailorhttp"
)

// ServerConfig is how a gRPC server treats incoming calls: the same settings
// as the HTTP middleware's. At the edge (Edge set) a call's grpc-timeout is
// not turned into a Tailor deadline: that would let a client buy urgency.
type ServerConfig = tailorhttp.Config

// Registrar runs a handler with its thread registered with the node's
// scheduler: *kernel.Client (package kernel) is one.
type Registrar = tailorhttp.Registrar

// Server makes the server interceptors of one configuration.
type Server struct {
	receiver tailorctx.Receiver
	gate     *gate.Gate
	kernel   Registrar
}

// NewServer makes the interceptors; install them with
// grpc.NewServer(grpc.UnaryInterceptor(s.Unary()), grpc.StreamInterceptor(s.Stream())).
func NewServer(cfg ServerConfig) *Server {
	return &Server{receiver: cfg.Receiver(), gate: cfg.Gate, kernel: cfg.Kernel}
}

// Stats counts the contexts received: accepted, absent, rejected by kind, clamped.
func (s *Server) Stats() *tailorctx.Stats { return s.receiver.Stats }

func wallNanos() uint64 { return uint64(time.Now().UnixNano()) }

// Receive is the context of a call arriving at now with ctx (its incoming
// metadata and gRPC deadline). A call that carried no Tailor context at a hop
// takes its deadline from the gRPC deadline (grpc-go sets ctx's deadline from
// grpc-timeout), no earlier than its GAT, as the Rust DeadlineFromTimeoutLayer does.
func (s *Server) Receive(ctx context.Context, now uint64) tailorctx.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	got := s.receiver.Receive(md.Get, now)
	c := got.Context
	if !got.Carried {
		if d, ok := ctx.Deadline(); ok {
			c.Deadline = max(uint64(max(d.UnixNano(), 0)), c.GAT)
		}
	}
	return c
}

// enter admits the call (gate) and returns the context to serve it with, or
// the gRPC status of a shed call.
func (s *Server) enter(ctx context.Context) (context.Context, tailorctx.Context, func(), error) {
	c := s.Receive(ctx, wallNanos())
	ctx = tailorctx.NewContext(ctx, c)
	if s.gate == nil {
		return ctx, c, func() {}, nil
	}
	permit, err := s.gate.Enter(ctx, c)
	if err != nil {
		return nil, c, nil, shedStatus(err)
	}
	return ctx, c, permit.Release, nil
}

// run calls handler, on a registered thread when a kernel registrar is set.
func (s *Server) run(c tailorctx.Context, handler func()) {
	if s.kernel != nil {
		s.kernel.Run(c, handler)
		return
	}
	handler()
}

// shedStatus is the gRPC status of a call the gate did not admit:
// DEADLINE_EXCEEDED for a deadline, RESOURCE_EXHAUSTED for a full queue,
// CANCELLED for a caller that left; the message names the reason.
func shedStatus(err error) error {
	var shed *gate.ShedError
	code := codes.Unavailable
	if errors.As(err, &shed) {
		switch shed.Reason {
		case gate.ReasonDeadline:
			code = codes.DeadlineExceeded
		case gate.ReasonQueueFull:
			code = codes.ResourceExhausted
		case gate.ReasonCanceled:
			code = codes.Canceled
		}
	}
	return status.Error(code, err.Error())
}

// Unary is the unary server interceptor.
func (s *Server) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		ctx, c, release, err := s.enter(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		s.run(c, func() { resp, err = handler(ctx, req) })
		return resp, err
	}
}

// Stream is the stream server interceptor: the whole stream is one request
// (admitted once, its handler on one registered thread).
func (s *Server) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx, c, release, err := s.enter(ss.Context())
		if err != nil {
			return err
		}
		defer release()
		s.run(c, func() { err = handler(srv, &serverStream{ServerStream: ss, ctx: ctx}) })
		return err
	}
}

// serverStream is ss with the context that carries the Tailor context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }
