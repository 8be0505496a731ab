package tailorotel

// Interoperation with OpenTelemetry's own W3C baggage propagator, across a
// real net/http server: what OTel injects, the Tailor middleware reads, and
// what the Tailor client writes, OTel extracts.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"

	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
	"github.com/tailor-sched/tailor/sdk/go/tailorhttp"
)

func TestOTelPropagationAndTheTailorMiddlewareAgree(t *testing.T) {
	c := tailorctx.Context{GAT: 1732272000123456789, Deadline: 1732272000125456789, Class: 1, Fanout: 4, Hop: 2}
	// OTel side: a baggage with another member, then ours, injected by OTel's propagator.
	other, _ := baggage.NewMember("userId", "alice")
	b, _ := baggage.New(other)
	ctx := baggage.ContextWithBaggage(context.Background(), b)
	ctx, err := ContextWithTailor(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok, err := FromContext(ctx); !ok || err != nil || d.Context != c {
		t.Fatalf("round trip through OTel baggage: %+v %v %v", d, ok, err)
	}
	got := make(chan tailorctx.Context, 1)
	// A hop whose clamp leaves this 2024 GAT alone: its max age reaches back to it.
	srv := httptest.NewServer(tailorhttp.New(tailorhttp.Config{MaxAge: 1 << 62}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ := tailorctx.FromContext(r.Context())
		got <- seen
		// The reverse direction: what Tailor wrote, OTel reads.
		out := http.Header{}
		tailorhttp.WriteHeaders(out, seen.Child())
		otelCtx := propagation.Baggage{}.Extract(context.Background(), propagation.HeaderCarrier(out))
		if d, ok, err := FromContext(otelCtx); !ok || err != nil || d.Context != seen.Child() {
			t.Errorf("OTel extracted %+v %v %v from %v", d, ok, err, out)
		}
	})))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	propagation.Baggage{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	if req.Header.Get(tailorctx.Header) != "" {
		t.Fatal("only baggage should carry it here")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seen := <-got; seen != c {
		t.Fatalf("the middleware read %+v from OTel's baggage %q, want %+v", seen, req.Header.Get("baggage"), c)
	}
}

func TestABadMemberIsAnErrorNotAContext(t *testing.T) {
	m, _ := baggage.NewMemberRaw("tailor", "1.g05.c0.k1.h0")
	b, _ := baggage.New(m)
	if _, ok, err := FromBaggage(b); !ok || err != tailorctx.ErrInvalidNumber {
		t.Fatalf("%v %v", ok, err)
	}
	if _, ok, err := FromBaggage(baggage.Baggage{}); ok || err != nil {
		t.Fatalf("empty: %v %v", ok, err)
	}
}
