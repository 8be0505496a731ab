// Package tailorotel reads and writes the Tailor context as the `tailor`
// member of OpenTelemetry baggage, through the OTel baggage API, for services
// whose propagation is OpenTelemetry's (the W3C baggage propagator carries it
// between services; docs/wire-format.md, "Carriers").
//
// It is a module of its own so that the core module stays free of OpenTelemetry.
package tailorotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/baggage"

	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// FromBaggage is the context in b's tailor member, if it has one (found).
// The value is decoded as the wire format says: strictly, up to 128 bytes.
// OTel has already percent-decoded it, and keeps one member per key.
func FromBaggage(b baggage.Baggage) (d tailorctx.Decoded, found bool, err error) {
	m := b.Member(tailorctx.BaggageKey)
	if m.Key() == "" {
		return tailorctx.Decoded{}, false, nil
	}
	v := m.Value()
	if len(v) > tailorctx.MaxLen {
		return tailorctx.Decoded{}, true, tailorctx.ErrTooLong
	}
	d, err = tailorctx.Decode(v)
	return d, true, err
}

// FromContext is the context in the OTel baggage of ctx (baggage.FromContext).
func FromContext(ctx context.Context) (tailorctx.Decoded, bool, error) {
	return FromBaggage(baggage.FromContext(ctx))
}

// WithTailor is b with its tailor member set to c's encoding (replacing any),
// every other member kept.
func WithTailor(b baggage.Baggage, c tailorctx.Context) (baggage.Baggage, error) {
	m, err := baggage.NewMemberRaw(tailorctx.BaggageKey, tailorctx.Encode(c))
	if err != nil {
		return b, fmt.Errorf("tailorotel: baggage member: %w", err)
	}
	return b.SetMember(m)
}

// ContextWithTailor is ctx whose OTel baggage carries c: what to call before
// an outgoing call whose propagation is OpenTelemetry's (pass the child,
// c.Child(), of the request being served).
func ContextWithTailor(ctx context.Context, c tailorctx.Context) (context.Context, error) {
	b, err := WithTailor(baggage.FromContext(ctx), c)
	if err != nil {
		return ctx, err
	}
	return baggage.ContextWithBaggage(ctx, b), nil
}
