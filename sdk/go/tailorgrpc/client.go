package tailorgrpc

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// ClientConfig is how outgoing calls carry the context.
type ClientConfig struct {
	// TimeoutFromDeadline gives a call made while serving a request with a
	// Tailor deadline that deadline as its gRPC deadline (grpc-go sends it as
	// grpc-timeout; an earlier deadline the caller set is kept). Off by
	// default: a TailGuard deadline is a queuing deadline, and the callee
	// cancels a call whose timeout passes (docs/wire-format.md, "grpc-timeout").
	TimeoutFromDeadline bool
}

// outgoing is ctx with the child of the context it carries in its outgoing
// metadata (tailor-context set, the tailor member of baggage replaced), and
// the gRPC deadline if configured. Calls outside a served request go out untouched.
func (cfg ClientConfig) outgoing(ctx context.Context) (context.Context, context.CancelFunc) {
	parent, ok := tailorctx.FromContext(ctx)
	if !ok {
		return ctx, func() {}
	}
	v := tailorctx.Encode(parent.Child())
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(tailorctx.Header, v)
	md.Set(tailorctx.BaggageHeader, tailorctx.BaggageWith(strings.Join(md.Get(tailorctx.BaggageHeader), ","), v))
	ctx = metadata.NewOutgoingContext(ctx, md)
	if cfg.TimeoutFromDeadline && parent.Deadline != tailorctx.Never && parent.Deadline <= 1<<63-1 {
		return context.WithDeadline(ctx, time.Unix(0, int64(parent.Deadline)))
	}
	return ctx, func() {}
}

// UnaryClient is the unary client interceptor: install it with
// grpc.WithUnaryInterceptor(tailorgrpc.UnaryClient(cfg)), and call with the
// context of the request being served.
func UnaryClient(cfg ClientConfig) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := cfg.outgoing(ctx)
		defer cancel()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClient is the stream client interceptor (grpc.WithStreamInterceptor).
func StreamClient(cfg ClientConfig) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, cancel := cfg.outgoing(ctx)
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		return &clientStream{ClientStream: cs, cancel: cancel}, nil
	}
}

// clientStream releases the deadline's timer when the stream ends (RecvMsg
// returns an error, io.EOF included, as it does once per stream).
type clientStream struct {
	grpc.ClientStream
	cancel context.CancelFunc
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
	}
	return err
}
