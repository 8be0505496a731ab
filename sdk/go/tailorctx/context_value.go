package tailorctx

import "context"

// contextKey is the context.Context key of a request's Context (unexported: only
// NewContext and FromContext reach it).
type contextKey struct{}

// NewContext returns parent carrying c: what the middleware and interceptors put
// in a request's context.Context, and what outgoing calls forward.
func NewContext(parent context.Context, c Context) context.Context {
	return context.WithValue(parent, contextKey{}, c)
}

// FromContext is the Context that ctx carries, if any.
func FromContext(ctx context.Context) (Context, bool) {
	c, ok := ctx.Value(contextKey{}).(Context)
	return c, ok
}
