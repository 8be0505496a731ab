// Package kernel registers request handlers' threads with the node's kernel
// scheduler: the table the Rust `tailor agent` serves (a file in /dev/shm;
// docs/kernel-table-protocol.md is the protocol, runtime/src/kernel the Rust
// side), so Go handlers are ordered by GAT (or deadline) together with every
// other registered thread on the node.
//
// It implements key ordering (`tailor agent --enforce priority`): a handler
// locks its goroutine to its OS thread, claims a slot, publishes its context
// as RUNNABLE and sets its own thread to the SCHED_FIFO level of its key (the
// older the GAT, the higher the level), so the kernel runs the oldest
// requests first and preempts younger ones. On return it frees the slot and
// restores its thread's policy. With no table, no running agent, an agent in
// band mode, or no CAP_SYS_NICE, handlers run unregistered (say so once in
// the log): pair the client with a gate.Gate, which orders them anyway.
package kernel

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// DefaultTable is where `tailor agent` puts its table by default.
const DefaultTable = "/dev/shm/tailor-sched"

// schedResetOnFork is how the Rust side records SCHED_FLAG_RESET_ON_FORK in a
// slot's orig_policy (the sched_setscheduler flag).
const schedResetOnFork = 0x40000000

// agentSilence: an agent whose heartbeat (at least every 20 ms) has not moved
// for this long is taken for dead, as the Rust watchdog does.
const agentSilence = time.Second

// Client registers handler threads with one table. Safe for concurrent use.
type Client struct {
	t             *table
	keyIsDeadline bool
	bucketNs      uint64
	nextSlot      atomic.Uint64
	log           *slog.Logger

	// why is set once registration is off (never on, or the agent went away).
	why    atomic.Pointer[string]
	logged atomic.Bool
	// fifoLogged: a refused SCHED_FIFO level was logged (once per client).
	fifoLogged atomic.Bool
	// The heartbeat last seen and when (monotonic ns) it moved.
	beat, beatAt atomic.Uint64
	start        time.Time

	registered, unregistered, errs atomic.Uint64
}

// Connect opens the table at path and checks that a running agent serves it
// under key ordering. The error says why not and how to fix it.
func Connect(path string) (*Client, error) {
	t, err := openTable(path)
	if err != nil {
		return nil, err
	}
	// An agent creates its table a moment before it serves it.
	for waited := time.Duration(0); atomic.LoadUint32(t.u32(offAgentState)) == AgentStarting && waited < 2*time.Second; waited += 5 * time.Millisecond {
		time.Sleep(5 * time.Millisecond)
	}
	if !t.agentAlive() {
		t.close()
		return nil, fmt.Errorf("%s: the agent (pid %d) is not running. Fix: start `tailor agent --table %s --enforce priority`",
			path, atomic.LoadUint32(t.u32(offAgentPID)), path)
	}
	if atomic.LoadUint32(t.u32(offOrdering)) != OrderByKey {
		t.close()
		return nil, fmt.Errorf("%s: the agent runs band mode, which this client does not speak (it needs the agent's admission protocol). "+
			"Fix: restart it with `tailor agent --enforce priority` (orf with --c = CPUs, gfifo or edf)", path)
	}
	c := &Client{
		t:             t,
		keyIsDeadline: atomic.LoadUint32(t.u32(offKey)) == KeyDeadline,
		bucketNs:      atomic.LoadUint64(t.u64(offBucketNs)),
		log:           slog.Default(),
		start:         time.Now(),
	}
	c.beat.Store(atomic.LoadUint64(t.u64(offHeartbeat)))
	c.beatAt.Store(c.monotonic())
	return c, nil
}

// Open is Connect that never fails: when the table cannot be used, the
// client runs handlers unregistered and logs why once (to logger, or
// slog.Default() if nil).
func Open(path string, logger *slog.Logger) *Client {
	c, err := Connect(path)
	if err != nil {
		c = &Client{}
		c.off(err.Error())
	}
	if logger != nil {
		c.log = logger
	} else if c.log == nil {
		c.log = slog.Default()
	}
	c.logOnce()
	return c
}

// off turns registration off for good, with the reason.
func (c *Client) off(why string) {
	c.why.CompareAndSwap(nil, &why)
}

func (c *Client) logOnce() {
	if why := c.why.Load(); why != nil && !c.logged.Swap(true) {
		c.log.Warn("tailor kernel registration off; handlers run unregistered (use a gate to order them)", "reason", *why)
	}
}

// Active says whether handlers are being registered; if not, why.
func (c *Client) Active() (bool, string) {
	if why := c.why.Load(); why != nil {
		return false, *why
	}
	return true, ""
}

func (c *Client) monotonic() uint64 { return uint64(time.Since(c.start)) }

// agentGone says whether the agent stopped, or its heartbeat has been still
// for agentSilence (then registration goes off, logged once).
func (c *Client) agentGone() bool {
	if atomic.LoadUint32(c.t.u32(offAgentState)) != AgentRunning {
		c.off("the agent stopped")
		return true
	}
	beat, now := atomic.LoadUint64(c.t.u64(offHeartbeat)), c.monotonic()
	if beat != c.beat.Load() {
		c.beat.Store(beat)
		c.beatAt.Store(now)
		return false
	}
	if now-c.beatAt.Load() > uint64(agentSilence) {
		c.off(fmt.Sprintf("the agent's heartbeat stopped for over %v", agentSilence))
		return true
	}
	return false
}

// Stats counts handlers run registered and unregistered, and errors (a
// SCHED_FIFO level refused, a full table).
type Stats struct {
	Registered, Unregistered, Errors uint64
}

func (c *Client) Stats() Stats {
	return Stats{c.registered.Load(), c.unregistered.Load(), c.errs.Load()}
}

// registration is one handler's slot.
type registration struct {
	slot       int
	generation uint64
	orig       *unix.SchedAttr
}

// Run runs handler on the calling goroutine's OS thread, registered under
// ctx's key for handler's duration; the thread's policy is restored and the
// slot freed when handler returns or panics. Unregistered (just handler())
// when registration is off.
func (c *Client) Run(ctx tailorctx.Context, handler func()) {
	if c.why.Load() != nil || c.agentGone() {
		c.logOnce()
		c.unregistered.Add(1)
		handler()
		return
	}
	runtime.LockOSThread()
	reg, ok := c.register(ctx)
	if !ok {
		runtime.UnlockOSThread()
		c.unregistered.Add(1)
		handler()
		return
	}
	defer func() {
		if c.leave(reg) {
			runtime.UnlockOSThread()
		}
		// Else the thread's policy could not be restored: staying locked, the
		// thread ends with this goroutine instead of serving others at its level.
	}()
	c.registered.Add(1)
	handler()
}

func (c *Client) fail(what string, err error) {
	c.errs.Add(1)
	c.log.Warn("tailor kernel registration: "+what, "err", err)
}

// register claims a slot for the calling thread's job and takes its level
// (the key-ordering client steps of docs/kernel-table-protocol.md).
func (c *Client) register(ctx tailorctx.Context) (registration, bool) {
	t := c.t
	orig, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		c.fail("sched_getattr", err)
		return registration{}, false
	}
	n := uint64(t.slots)
	start := c.nextSlot.Add(1) - 1
	slot, generation := -1, uint64(0)
	for k := uint64(0); k < n; k++ {
		i := int((start + k) % n)
		word := t.u64(t.slot(i, offWord))
		w := atomic.LoadUint64(word)
		g, state := unpack(w)
		if state == StateFree && atomic.CompareAndSwapUint64(word, w, pack(g+1, StateClaimed)) {
			slot, generation = i, g+1
			break
		}
	}
	if slot < 0 {
		c.fail("table full", fmt.Errorf("all %d slots of %s are in use: give the agent more (`tailor agent --slots`)", n, t.path))
		return registration{}, false
	}
	origPolicy := int32(orig.Policy)
	if orig.Flags&unix.SCHED_FLAG_RESET_ON_FORK != 0 {
		origPolicy |= schedResetOnFork
	}
	tid := unix.Gettid()
	atomic.StoreUint32(t.u32(t.slot(slot, offPID)), uint32(os.Getpid()))
	atomic.StoreUint32(t.u32(t.slot(slot, offTID)), uint32(tid))
	atomic.StoreUint64(t.u64(t.slot(slot, offGAT)), ctx.GAT)
	atomic.StoreUint64(t.u64(t.slot(slot, offDeadline)), ctx.Deadline)
	atomic.StoreUint32(t.u32(t.slot(slot, offClass)), uint32(ctx.Class))
	atomic.StoreUint32(t.u32(t.slot(slot, offOrigPolicy)), uint32(origPolicy))
	atomic.StoreUint32(t.u32(t.slot(slot, offOrigPriority)), orig.Priority)
	atomic.StoreUint64(t.u64(t.slot(slot, offSuccessor)), 0)
	// With the ids as this process sees them, the namespace they are numbered in
	// and the thread's start time, the agent finds (and only ever writes) this
	// thread, also from another PID namespace.
	atomic.StoreUint64(t.u64(t.slot(slot, offStart)), threadStart(tid))
	ns, _ := ownPIDNs()
	atomic.StoreUint64(t.u64(t.slot(slot, offPIDNs)), packPIDNs(generation, ns))
	atomic.StoreUint32(t.u32(t.slot(slot, offAdmitted)), admittedSelf)
	// RUNNABLE before reading base: an agent shift that stores a new base after
	// our read finds us in its scan and rewrites our level itself.
	atomic.StoreUint64(t.u64(t.slot(slot, offWord)), pack(generation, StateRunnable))

	key := ctx.GAT
	if c.keyIsDeadline {
		key = ctx.Deadline
	}
	baseWord := t.u64(offBase)
	for {
		base := atomic.LoadUint64(baseWord)
		level := Level(key, base, c.bucketNs)
		attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: uint32(level), Flags: unix.SCHED_FLAG_RESET_ON_FORK}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			// Registered all the same (as the Rust client): the job runs at its
			// thread's policy, and the agent still sees it.
			c.errs.Add(1)
			if !c.fifoLogged.Swap(true) {
				c.log.Warn("tailor kernel registration: cannot take SCHED_FIFO; handlers run at their thread's policy. Fix: run with CAP_SYS_NICE",
					"level", level, "err", err)
			}
			break
		}
		if atomic.LoadUint64(baseWord) == base {
			// Out of levels: ask the agent to move base (a job with no deadline
			// under edf belongs at the bottom anyway).
			if level <= ShiftLevel && key != tailorctx.Never {
				fetchMax(t.u64(offNewest), key)
				t.ring()
			}
			break
		}
	}
	return registration{slot: slot, generation: generation, orig: orig}, true
}

// leave frees the slot, waits out any agent write in flight for this job (the
// write fence), then restores the thread's policy; false if that failed.
func (c *Client) leave(reg registration) bool {
	t := c.t
	atomic.StoreUint64(t.u64(t.slot(reg.slot, offWord)), pack(reg.generation, StateFree))
	busy := t.u64(t.slot(reg.slot, offAgentBusy))
	for spins := 1; atomic.LoadUint64(busy) == reg.generation; spins++ {
		// The agent (SCHED_FIFO above every job) holds the fence for one syscall.
		if spins%1000 == 0 {
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			if spins%100_000 == 0 && !t.agentAlive() {
				break
			}
		}
	}
	restore := *reg.orig
	if err := unix.SchedSetAttr(0, &restore, 0); err != nil {
		c.fail("cannot restore the thread's policy after a job", err)
		return false
	}
	return true
}

// fetchMax stores v at p if it is larger (the Rust side's fetch_max).
func fetchMax(p *uint64, v uint64) {
	for old := atomic.LoadUint64(p); v > old && !atomic.CompareAndSwapUint64(p, old, v); old = atomic.LoadUint64(p) {
	}
}

// ErrInactive is what Require returns for a client that runs handlers unregistered.
var ErrInactive = errors.New("tailor kernel registration is off")

// Require returns an error naming why registration is off, nil if it is on.
func (c *Client) Require() error {
	if ok, why := c.Active(); !ok {
		return fmt.Errorf("%w: %s", ErrInactive, why)
	}
	return nil
}
