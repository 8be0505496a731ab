package tailorctx

import "math/bits"

// Clamped is what Clamp changed, in ns; all zero when nothing was.
type Clamped struct {
	// GATAhead is how far the GAT was ahead of now (it was set to now).
	GATAhead uint64
	// GATStale is how far the GAT was older than now − maxAge (it was set to that).
	GATStale uint64
	// DeadlineEarly is how far the deadline was before the clamped GAT (it was set to the GAT).
	DeadlineEarly uint64
}

// Any says whether anything was changed.
func (c Clamped) Any() bool { return c != Clamped{} }

// Clamp bounds a received context at now: the GAT is not after now and not
// before now − maxAge (saturating at 0); the deadline is not before the
// clamped GAT. Class, fanout and hop are unchanged.
func Clamp(c Context, now, maxAge uint64) (Context, Clamped) {
	var r Clamped
	oldest := uint64(0)
	if now > maxAge {
		oldest = now - maxAge
	}
	if c.GAT > now {
		r.GATAhead, c.GAT = c.GAT-now, now
	} else if c.GAT < oldest {
		r.GATStale, c.GAT = oldest-c.GAT, oldest
	}
	if c.Deadline < c.GAT {
		r.DeadlineEarly, c.Deadline = c.GAT-c.Deadline, c.GAT
	}
	return c, r
}

// EdgeRoute is what the edge knows about a route, from its configuration.
type EdgeRoute struct {
	// Class is the SLO class of requests on this route.
	Class uint8
	// Budget is the deadline after arrival, if HasBudget.
	Budget    uint64
	HasBudget bool
}

// Stamp is the context the edge stamps on a request arriving at now: GAT now,
// hop 0, fanout 1, class and deadline from the route. The edge discards any
// incoming context: it sets the tailor-context header to the new encoding and
// baggage to BaggageWith(incoming, value), which replaces any tailor member.
func (r EdgeRoute) Stamp(now uint64) Context {
	c := Stamped(now)
	c.Class = r.Class
	if r.HasBudget {
		// A finite budget never turns into "no deadline".
		d, carry := bits.Add64(now, r.Budget, 0)
		if carry != 0 || d > Never-1 {
			d = Never - 1
		}
		c.Deadline = d
	}
	return c
}
