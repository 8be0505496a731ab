package tailorctx

import (
	"errors"
	"sync/atomic"
)

// Stats counts contexts accepted, absent, rejected (by kind) and clamped, for
// metrics. Safe for concurrent use; the zero value is ready.
type Stats struct {
	accepted, absent                  atomic.Uint64
	rejected                          [14]atomic.Uint64
	gatAhead, gatStale, deadlineEarly atomic.Uint64
}

// Record counts the outcome of Extract or DecodeBaggage.
func (s *Stats) Record(found bool, err error) {
	switch {
	case err != nil:
		s.RecordError(err)
	case found:
		s.accepted.Add(1)
	default:
		s.absent.Add(1)
	}
}

// RecordError counts one rejection, e.g. a failed Verify.
func (s *Stats) RecordError(err error) {
	var e *Error
	if errors.As(err, &e) {
		for i, k := range ErrorKinds {
			if k == e {
				s.rejected[i].Add(1)
			}
		}
	}
}

// RecordClamp counts what Clamp changed (one per clamped field).
func (s *Stats) RecordClamp(c Clamped) {
	if c.GATAhead > 0 {
		s.gatAhead.Add(1)
	}
	if c.GATStale > 0 {
		s.gatStale.Add(1)
	}
	if c.DeadlineEarly > 0 {
		s.deadlineEarly.Add(1)
	}
}

// Accepted is the number of contexts decoded.
func (s *Stats) Accepted() uint64 { return s.accepted.Load() }

// Absent is the number of requests that carried no context.
func (s *Stats) Absent() uint64 { return s.absent.Load() }

// KindCount is one metric sample: a kind (or clamped field) and its count.
type KindCount struct {
	Kind  string
	Count uint64
}

// Rejected lists every error kind with its count, zeros included, in ErrorKinds order.
func (s *Stats) Rejected() []KindCount {
	out := make([]KindCount, len(ErrorKinds))
	for i, k := range ErrorKinds {
		out[i] = KindCount{k.Kind(), s.rejected[i].Load()}
	}
	return out
}

// Clamps lists gat_ahead, gat_stale and deadline_early with their counts.
func (s *Stats) Clamps() []KindCount {
	return []KindCount{{"gat_ahead", s.gatAhead.Load()}, {"gat_stale", s.gatStale.Load()}, {"deadline_early", s.deadlineEarly.Load()}}
}
