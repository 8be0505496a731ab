// Package gate admits at most C request handlers at once, in a scheduling policy's order.
//
// It is the Go counterpart of the Rust runtime's cooperative backend
// (runtime/src/cooperative.rs): nobody is preempted (a goroutine cannot be
// stopped from outside), so a request waits until one of the C slots is free,
// and a free slot goes to the waiting request the policy runs first:
//
//   - fifo: local arrival order;
//   - orf, gfifo: oldest global arrival time (GAT) first (ORF's processor
//     sharing needs preemption, which only the kernel path gives: see package
//     kernel), arrival order among equal GATs;
//   - edf: earliest Tailor deadline first, arrival order among equal deadlines;
//   - priq: lowest class first (0 is the most stringent), arrival order within a class.
//
// The queue is bounded (Config.MaxQueue): a request that finds it full is shed
// at once. A waiting request whose context.Context ends (its caller's deadline,
// e.g. gRPC's grpc-timeout, or a client that went away) leaves the queue and is
// shed; with Config.RejectLate, a request whose Tailor deadline has passed by
// the time a slot would be its own is shed instead of served. Every shed
// request gets a *ShedError naming the reason, which the HTTP middleware turns
// into 503 with a `tailor-rejected` header and the gRPC interceptors into
// DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED.
package gate

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// Policy is the order in which waiting requests get a free slot.
type Policy uint8

const (
	// FIFO admits in local arrival order.
	FIFO Policy = iota
	// ORF admits the oldest GAT first (Oldest Request First, non-preemptive here).
	ORF
	// GFIFO admits the oldest GAT first.
	GFIFO
	// EDF admits the earliest Tailor deadline first (no deadline sorts last).
	EDF
	// PRIQ admits the lowest class first, in arrival order within a class.
	PRIQ
)

var policyNames = [...]string{FIFO: "fifo", ORF: "orf", GFIFO: "gfifo", EDF: "edf", PRIQ: "priq"}

func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy reads a policy name as the Rust runtime and `tailor agent --policy` spell it.
func ParsePolicy(name string) (Policy, error) {
	for p, n := range policyNames {
		if n == name {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("gate: policy %q: unknown; use one of fifo, orf, gfifo, edf, priq", name)
}

// key is what orders c under p: smaller runs first; ties go by arrival.
func (p Policy) key(c tailorctx.Context) uint64 {
	switch p {
	case ORF, GFIFO:
		return c.GAT
	case EDF:
		return c.Deadline
	case PRIQ:
		return uint64(c.Class)
	}
	return 0
}

// DefaultMaxQueue is the queue bound when Config.MaxQueue is 0.
const DefaultMaxQueue = 1024

// Config is a gate's policy, concurrency and queue bound.
type Config struct {
	Policy Policy
	// C is how many handlers run at once (at least 1): typically the CPUs the
	// service may use, as for the Rust cooperative backend.
	C int
	// MaxQueue is how many requests may wait at once; more are shed with
	// ReasonQueueFull. 0 means DefaultMaxQueue.
	MaxQueue int
	// RejectLate sheds (ReasonDeadline) a request whose Tailor deadline has
	// passed when it arrives or when a slot would be its own. Off by default:
	// a TailGuard deadline is a queuing deadline, and a late task is still
	// worth serving unless the service decides otherwise (docs/wire-format.md).
	RejectLate bool
}

// Why a request was shed: the value of the HTTP `tailor-rejected` header.
const (
	ReasonQueueFull = "queue_full"
	ReasonDeadline  = "deadline"
	ReasonCanceled  = "canceled"
)

// ShedError is a request the gate did not admit, and why.
type ShedError struct {
	// Reason is ReasonQueueFull, ReasonDeadline or ReasonCanceled.
	Reason string
	msg    string
}

func (e *ShedError) Error() string { return "tailor gate: " + e.msg }

// Is makes errors.Is(err, ErrQueueFull) (and the others) match by reason.
func (e *ShedError) Is(target error) bool {
	t, ok := target.(*ShedError)
	return ok && t.Reason == e.Reason
}

// Sentinels for errors.Is.
var (
	ErrQueueFull = &ShedError{Reason: ReasonQueueFull, msg: "queue full"}
	ErrDeadline  = &ShedError{Reason: ReasonDeadline, msg: "deadline passed while queued"}
	ErrCanceled  = &ShedError{Reason: ReasonCanceled, msg: "request canceled while queued"}
)

// waiter is one queued request.
type waiter struct {
	key, seq uint64
	deadline uint64
	// index in the heap; -1 once popped (admitted or shed by the dispatcher).
	index int
	// shed is set by the dispatcher (under the lock) before it closes ready.
	shed  *ShedError
	ready chan struct{}
}

type queue []*waiter

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].key != q[j].key {
		return q[i].key < q[j].key
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *queue) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *queue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}

// Gate admits at most Config.C holders of a Permit at once. Safe for concurrent use.
type Gate struct {
	cfg Config
	// now reads the clock Tailor deadlines are on (ns since the Unix epoch).
	now func() uint64

	mu      sync.Mutex
	running int
	waiting queue
	seq     uint64

	admitted, released, maxRunning   atomic.Uint64
	shedFull, shedDeadline, shedGone atomic.Uint64
}

// New checks cfg and makes a gate.
func New(cfg Config) (*Gate, error) {
	if cfg.C < 1 {
		return nil, fmt.Errorf("gate: C = %d: at least 1 handler must be able to run (typically the CPUs the service may use)", cfg.C)
	}
	if int(cfg.Policy) >= len(policyNames) {
		return nil, fmt.Errorf("gate: %v: unknown policy; use gate.FIFO, ORF, GFIFO, EDF or PRIQ", cfg.Policy)
	}
	if cfg.MaxQueue < 0 {
		return nil, fmt.Errorf("gate: MaxQueue = %d: give 0 for the default (%d) or a positive bound", cfg.MaxQueue, DefaultMaxQueue)
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	return &Gate{cfg: cfg, now: wallNanos}, nil
}

func wallNanos() uint64 { return uint64(time.Now().UnixNano()) }

// Config is the gate's configuration, defaults filled in.
func (g *Gate) Config() Config { return g.cfg }

// Permit is one admitted request's slot. Release it exactly once when the handler returns.
type Permit struct{ g *Gate }

// Release frees the slot and admits the next waiting request in the policy's order.
func (p Permit) Release() {
	g := p.g
	g.released.Add(1)
	g.mu.Lock()
	g.running--
	g.dispatch()
	g.mu.Unlock()
}

// late says whether a request with Tailor deadline d is to be shed now.
func (g *Gate) late(d uint64) bool {
	return g.cfg.RejectLate && d != tailorctx.Never && g.now() > d
}

// Enter waits until the request with Tailor context c may run and returns its
// permit, or sheds it (a *ShedError). ctx is the request's context: when it
// ends while the request waits, the request leaves the queue.
func (g *Gate) Enter(ctx context.Context, c tailorctx.Context) (Permit, error) {
	if g.late(c.Deadline) {
		g.shedDeadline.Add(1)
		return Permit{}, ErrDeadline
	}
	g.mu.Lock()
	if g.running < g.cfg.C && len(g.waiting) == 0 {
		g.running++
		g.noteRunning()
		g.mu.Unlock()
		g.admitted.Add(1)
		return Permit{g}, nil
	}
	if len(g.waiting) >= g.cfg.MaxQueue {
		g.mu.Unlock()
		g.shedFull.Add(1)
		return Permit{}, &ShedError{Reason: ReasonQueueFull, msg: fmt.Sprintf("queue full (%d requests waiting, MaxQueue)", g.cfg.MaxQueue)}
	}
	w := &waiter{key: g.cfg.Policy.key(c), seq: g.seq, deadline: c.Deadline, ready: make(chan struct{})}
	g.seq++
	heap.Push(&g.waiting, w)
	g.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		g.mu.Lock()
		if w.index >= 0 {
			heap.Remove(&g.waiting, w.index)
			g.mu.Unlock()
			return Permit{}, g.gone(ctx)
		}
		g.mu.Unlock()
		// Popped meanwhile: admitted (then give the slot back) or shed.
		<-w.ready
		if w.shed == nil {
			g.admitted.Add(1)
			Permit{g}.Release()
			return Permit{}, g.gone(ctx)
		}
	}
	if w.shed != nil {
		return Permit{}, w.shed
	}
	g.admitted.Add(1)
	return Permit{g}, nil
}

// gone counts and names a request whose context ended while it waited.
func (g *Gate) gone(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		g.shedDeadline.Add(1)
		return &ShedError{Reason: ReasonDeadline, msg: "the request's deadline passed while it was queued"}
	}
	g.shedGone.Add(1)
	return ErrCanceled
}

// dispatch hands free slots to waiting requests in the policy's order (lock held).
func (g *Gate) dispatch() {
	for g.running < g.cfg.C && len(g.waiting) > 0 {
		w := heap.Pop(&g.waiting).(*waiter)
		if g.late(w.deadline) {
			g.shedDeadline.Add(1)
			w.shed = ErrDeadline
			close(w.ready)
			continue
		}
		g.running++
		g.noteRunning()
		close(w.ready)
	}
}

func (g *Gate) noteRunning() {
	if r := uint64(g.running); r > g.maxRunning.Load() {
		g.maxRunning.Store(r) // under g.mu: no lost update
	}
}

// Stats is a snapshot of a gate's counters.
type Stats struct {
	// Admitted and Released count permits given and given back.
	Admitted, Released uint64
	// Running and Waiting are the requests inside and queued now.
	Running, Waiting int
	// MaxRunning is the most requests that were ever inside at once (at most C).
	MaxRunning uint64
	// Shed counts by reason.
	ShedQueueFull, ShedDeadline, ShedCanceled uint64
}

// Stats reads the counters.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	running, waiting := g.running, len(g.waiting)
	g.mu.Unlock()
	return Stats{
		Admitted: g.admitted.Load(), Released: g.released.Load(),
		Running: running, Waiting: waiting, MaxRunning: g.maxRunning.Load(),
		ShedQueueFull: g.shedFull.Load(), ShedDeadline: g.shedDeadline.Load(), ShedCanceled: g.shedGone.Load(),
	}
}

// Waiting is the number of requests queued now.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}
