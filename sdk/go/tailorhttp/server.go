// Package tailorhttp carries the Tailor request context through net/http:
// server middleware (extract, clamp, stamp at the edge, strip what is not
// trusted, order handlers through a gate, register their threads with the
// node's kernel scheduler) and a client RoundTripper that forwards it.
package tailorhttp

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tailor-sched/tailor/sdk/go/gate"
	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// RejectedHeader names why a request was shed (503): a gate.Reason* value.
// The same header the Rust fan-out service sets on its 503s.
const RejectedHeader = "tailor-rejected"

// Registrar runs a handler with its thread registered with the node's
// scheduler: *kernel.Client (package kernel) is one.
type Registrar interface {
	Run(c tailorctx.Context, handler func())
}

// Config is how a service treats incoming requests.
type Config struct {
	// Edge is set when this service is the edge: every request gets a fresh
	// context from the route (any incoming one is stripped). Nil: a hop, which
	// trusts and clamps what it receives.
	Edge *tailorctx.EdgeRoute
	// MaxAge bounds the age of a received GAT (0: 10 s).
	MaxAge time.Duration
	// Keyring makes this hop a trust boundary: only contexts signed with one
	// of its keys are accepted, others are stripped from the request.
	Keyring *tailorctx.Keyring
	// Gate, when set, runs at most Gate.Config().C handlers at once, in its policy's order.
	Gate *gate.Gate
	// Kernel, when set, registers each handler's thread with the node's kernel
	// scheduler for the handler's duration (see package kernel).
	Kernel Registrar
	// Stats counts the contexts received; nil makes a new one (Middleware.Stats).
	Stats *tailorctx.Stats
}

// Middleware gives every request its Context (tailorctx.FromContext on the
// request's context.Context) before the handler runs.
type Middleware struct {
	receiver tailorctx.Receiver
	gate     *gate.Gate
	kernel   Registrar
	next     http.Handler
}

// Receiver is what cfg says to do with incoming contexts (Stats made if nil).
func (cfg Config) Receiver() tailorctx.Receiver {
	if cfg.Stats == nil {
		cfg.Stats = new(tailorctx.Stats)
	}
	return tailorctx.Receiver{Edge: cfg.Edge, MaxAge: uint64(cfg.MaxAge), Keyring: cfg.Keyring, Stats: cfg.Stats}
}

// New wraps next.
func New(cfg Config, next http.Handler) *Middleware {
	return &Middleware{receiver: cfg.Receiver(), gate: cfg.Gate, kernel: cfg.Kernel, next: next}
}

// Stats counts the contexts received: accepted, absent, rejected by kind, clamped.
func (m *Middleware) Stats() *tailorctx.Stats { return m.receiver.Stats }

// The canonical forms of the carriers' names, to index http.Header without
// canonicalizing (and allocating) on every request.
var (
	canonicalContext = http.CanonicalHeaderKey(tailorctx.Header)
	canonicalBaggage = http.CanonicalHeaderKey(tailorctx.BaggageHeader)
)

// headerValues is tailorctx.Extract's view of h.
func headerValues(h http.Header) func(string) []string {
	return func(name string) []string {
		switch name {
		case tailorctx.Header:
			return h[canonicalContext]
		case tailorctx.BaggageHeader:
			return h[canonicalBaggage]
		}
		return h.Values(name)
	}
}

func wallNanos() uint64 { return uint64(time.Now().UnixNano()) }

// Receive is the context of r arriving at now, with r's headers rewritten at
// the edge and stripped of an untrusted context.
func (m *Middleware) Receive(r *http.Request, now uint64) tailorctx.Context {
	got := m.receiver.Receive(headerValues(r.Header), now)
	switch got.Action {
	case tailorctx.Rewrite:
		WriteHeaders(r.Header, got.Context)
	case tailorctx.Strip:
		stripHeaders(r.Header)
	}
	return got.Context
}

func (m *Middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := m.Receive(r, wallNanos())
	r = r.WithContext(tailorctx.NewContext(r.Context(), c))
	if m.gate != nil {
		permit, err := m.gate.Enter(r.Context(), c)
		if err != nil {
			shed(w, err)
			return
		}
		defer permit.Release()
	}
	if m.kernel != nil {
		m.kernel.Run(c, func() { m.next.ServeHTTP(w, r) })
		return
	}
	m.next.ServeHTTP(w, r)
}

// shed answers a request the gate did not admit: 503 with the reason.
func shed(w http.ResponseWriter, err error) {
	reason := "unknown"
	var s *gate.ShedError
	if errors.As(err, &s) {
		reason = s.Reason
	} else {
		slog.Warn("tailorhttp: the gate refused a request for an unexpected reason", "err", err)
	}
	w.Header().Set(RejectedHeader, reason)
	http.Error(w, err.Error(), http.StatusServiceUnavailable)
}

// WriteHeaders replaces every carrier of the context in h with c's encoding:
// tailor-context is set, and the tailor member of baggage (all baggage lines
// joined into one) is replaced, other members kept in order.
func WriteHeaders(h http.Header, c tailorctx.Context) {
	v := tailorctx.Encode(c)
	h[canonicalContext] = []string{v}
	h[canonicalBaggage] = []string{tailorctx.BaggageWith(strings.Join(h[canonicalBaggage], ","), v)}
}

// stripHeaders removes tailor-context and the tailor member of baggage (the
// header too when nothing else is left).
func stripHeaders(h http.Header) {
	delete(h, canonicalContext)
	if rest := tailorctx.BaggageWithout(strings.Join(h[canonicalBaggage], ",")); rest != "" {
		h[canonicalBaggage] = []string{rest}
	} else {
		delete(h, canonicalBaggage)
	}
}
