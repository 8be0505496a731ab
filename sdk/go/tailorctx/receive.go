package tailorctx

// Receiver is what every server-side integration (HTTP middleware, gRPC
// interceptors) does with an incoming request's carriers, per
// docs/wire-format.md: the edge strips and stamps; a hop extracts, verifies
// when it sits at a trust boundary, and clamps; anything absent, malformed or
// unverifiable is served as if it arrived now, and counted.
type Receiver struct {
	// Edge is set at the edge: every request gets Edge.Stamp(now), whatever it carried.
	Edge *EdgeRoute
	// MaxAge bounds how old a received GAT may be, ns (see Clamp). 0 means DefaultMaxAge.
	MaxAge uint64
	// Keyring, when set, makes this hop a trust boundary: only contexts signed
	// with one of its keys are accepted (Decoded.Verify); others are stripped.
	Keyring *Keyring
	// Stats counts what was received; required.
	Stats *Stats
}

// DefaultMaxAge is 10 s, above any honest RPC's lifetime (as the Rust runtime's default).
const DefaultMaxAge uint64 = 10_000_000_000

// Action says what to do with the request's own carriers after Receive.
type Action uint8

const (
	// Keep: the carriers hold what this hop trusts; leave them.
	Keep Action = iota
	// Rewrite: the edge stamped a new context; replace tailor-context and our
	// baggage member with it (BaggageWith), so raw header forwarding carries it.
	Rewrite
	// Strip: the carriers hold a context this hop does not trust (unverified at a
	// trust boundary); remove tailor-context and our baggage member (BaggageWithout).
	Strip
)

// Received is what Receive made of a request.
type Received struct {
	// Context is the request's context: stamped, or received and clamped.
	Context Context
	// Action is what to do with the request's own carriers.
	Action Action
	// Carried says the request carried a context (even one rejected or
	// stripped): only a request that carried none may take its deadline from
	// another source, such as grpc-timeout (docs/wire-format.md).
	Carried bool
}

// Receive is the context of a request arriving at now whose carriers values
// returns (see Extract), and what to do with those carriers.
func (r *Receiver) Receive(values func(name string) []string, now uint64) Received {
	if r.Edge != nil {
		return Received{Context: r.Edge.Stamp(now), Action: Rewrite, Carried: true}
	}
	d, found, err := Extract(values)
	r.Stats.Record(found, err)
	if !found || err != nil {
		return Received{Context: Stamped(now), Action: Keep, Carried: found}
	}
	c := d.Context
	if r.Keyring != nil {
		if c, err = d.Verify(r.Keyring); err != nil {
			r.Stats.RecordError(err)
			return Received{Context: Stamped(now), Action: Strip, Carried: true}
		}
	}
	maxAge := r.MaxAge
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	c, clamped := Clamp(c, now, maxAge)
	r.Stats.RecordClamp(clamped)
	return Received{Context: c, Action: Keep, Carried: true}
}
