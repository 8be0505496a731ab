package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The table's constants, as runtime/src/kernel/table.rs defines them
// (docs/kernel-table-protocol.md is the specification).
const (
	// Magic is "TAILORSC" read as a little-endian uint64.
	Magic uint64 = 0x4353524f4c494154
	// Version is the only table version this client speaks.
	Version uint32 = 8

	// Slot states (low 8 bits of a slot's word; the generation is above them).
	StateFree     = 0
	StateClaimed  = 1
	StateRunnable = 2
	StateBlocked  = 3

	// Slot.admitted: a key-ordering job stores SelfAdmitted.
	admittedSelf = 2

	// Header.ordering.
	OrderByBand = 0
	OrderByKey  = 1
	// Header.key.
	KeyGAT      = 0
	KeyDeadline = 1

	// TopLevel is the SCHED_FIFO level of the oldest keys; levels run 1..TopLevel.
	TopLevel = 40
	// ShiftLevel: a job whose key maps at or below it asks the agent to move base.
	ShiftLevel = 4

	// Agent states.
	AgentStarting = 0
	AgentRunning  = 1
	AgentStopped  = 2
)

// Byte offsets in the header (one 128-byte block: the Rust struct is
// #[repr(C, align(64))] and 88 bytes long).
const (
	offMagic         = 0
	offVersion       = 8
	offSlots         = 12
	offAgentPID      = 16
	offAgentState    = 20
	offHeartbeat     = 24
	offDoorbell      = 32
	offAgentSleeping = 36
	offOrdering      = 56
	offKey           = 60
	offBucketNs      = 64
	offBase          = 72
	offNewest        = 80
	// offAgentPIDNs: the inode of the agent's PID namespace (its pid names
	// nothing, or another process, from a pod's own namespace).
	offAgentPIDNs = 88
	headerSize    = 128
)

// Byte offsets in a slot (each slot is 128 bytes: 88 bytes of fields, align(64)).
const (
	offWord         = 0
	offPID          = 8
	offTID          = 12
	offGAT          = 16
	offDeadline     = 24
	offClass        = 32
	offOrigPolicy   = 36
	offOrigPriority = 40
	offAdmitted     = 44
	offAgentBusy    = 48
	offSuccessor    = 56
	// offStart: the thread's start time (clock ticks since boot, field 22 of
	// /proc/self/task/<tid>/stat), 0 = unknown: with the tid it names the thread
	// for good, so the agent never writes a later thread given the same id.
	offStart = 72
	// offPIDNs: (generation & 0xffffffff) << 32 | (PID-namespace inode & 0xffffffff),
	// the namespace pid and tid are numbered in: the host's agent translates the
	// ids of a worker in a pod with its own PID namespace.
	offPIDNs = 80
	slotSize = 128
)

// bitmapLen is the dirty bitmap's size: one bit per slot, whole 64-byte lines.
func bitmapLen(slots int) int { return (slots + 511) / 512 * 64 }

func slotsOffset(slots int) int { return headerSize + bitmapLen(slots) }

func tableLen(slots int) int { return slotsOffset(slots) + slots*slotSize }

// Level is the SCHED_FIFO level of a job with key when base maps to TopLevel:
// one level lower per whole bucketNs after base, clamped to 1..TopLevel (keys
// before base are all "oldest"). The same formula as the Rust `table::level`.
func Level(key, base, bucketNs uint64) int {
	if bucketNs == 0 {
		bucketNs = 1
	}
	var steps uint64
	if key > base {
		steps = (key - base) / bucketNs
	}
	if steps >= TopLevel-1 {
		return 1
	}
	return TopLevel - int(steps)
}

func pack(generation, state uint64) uint64 { return generation<<8 | state }

func unpack(word uint64) (generation, state uint64) { return word >> 8, word & 0xff }

// table is a mapped registration table.
type table struct {
	mem   []byte
	slots int
	path  string
}

// ErrNoTable is returned (wrapped) when no agent table exists at the path.
var ErrNoTable = errors.New("no agent table")

// openTable maps the table at path, checking magic, version and size.
func openTable(path string) (*table, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w. Fix: start the node agent first: `tailor agent --table %s --enforce priority`", path, ErrNoTable, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: stat: %w", path, err)
	}
	size := int(info.Size())
	bad := func(why string) error {
		return fmt.Errorf("%s: not a tailor agent table (%s). Fix: point at the file `tailor agent --table` created", path, why)
	}
	if size < headerSize {
		return nil, bad(fmt.Sprintf("%d bytes", size))
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	t := &table{mem: mem, path: path}
	fail := func(e error) (*table, error) {
		unix.Munmap(mem)
		return nil, e
	}
	if m := atomic.LoadUint64(t.u64(offMagic)); m != Magic {
		return fail(bad("bad magic"))
	}
	if v := atomic.LoadUint32(t.u32(offVersion)); v != Version {
		return fail(bad(fmt.Sprintf("version %d, this client speaks %d", v, Version)))
	}
	t.slots = int(atomic.LoadUint32(t.u32(offSlots)))
	if t.slots < 1 || size < tableLen(t.slots) {
		return fail(bad(fmt.Sprintf("%d bytes for %d slots", size, t.slots)))
	}
	return t, nil
}

func (t *table) close() { unix.Munmap(t.mem) }

func (t *table) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&t.mem[off])) }
func (t *table) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&t.mem[off])) }

// slot is the byte offset of slot i's field at off.
func (t *table) slot(i, off int) int { return slotsOffset(t.slots) + i*slotSize + off }

// ring tells the agent something changed: bump the doorbell, and wake the
// agent's futex if it sleeps on it.
func (t *table) ring() {
	atomic.AddUint32(t.u32(offDoorbell), 1)
	if atomic.LoadUint32(t.u32(offAgentSleeping)) != 0 {
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(t.u32(offDoorbell))), futexWake, 1, 0, 0, 0)
	}
}

// agentAlive says whether the agent serves the table: RUNNING and its process
// exists where this process shares its PID namespace; from another namespace
// (a pod), its heartbeat moving within five heartbeats (it beats every 20 ms).
func (t *table) agentAlive() bool {
	if atomic.LoadUint32(t.u32(offAgentState)) != AgentRunning {
		return false
	}
	if alive, known := t.agentAliveByPID(); known {
		return alive
	}
	beat := atomic.LoadUint64(t.u64(offHeartbeat))
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; time.Sleep(2 * time.Millisecond) {
		if atomic.LoadUint64(t.u64(offHeartbeat)) != beat {
			return true
		}
	}
	return false
}

// agentAliveByPID is whether the agent's process exists, known only when this
// process shares the agent's PID namespace.
func (t *table) agentAliveByPID() (alive, known bool) {
	ns := atomic.LoadUint64(t.u64(offAgentPIDNs))
	if own, ok := ownPIDNs(); ns == 0 || !ok || own != ns {
		return false, false
	}
	pid := int(atomic.LoadUint32(t.u32(offAgentPID)))
	return pid != 0 && unix.Kill(pid, 0) != unix.ESRCH, true
}

var ownNS struct {
	once  sync.Once
	inode uint64
	ok    bool
}

// ownPIDNs is the inode of this process's PID namespace, read once.
func ownPIDNs() (uint64, bool) {
	ownNS.once.Do(func() {
		var st unix.Stat_t
		if unix.Stat("/proc/self/ns/pid", &st) == nil {
			ownNS.inode, ownNS.ok = st.Ino, true
		}
	})
	return ownNS.inode, ownNS.ok
}

// packPIDNs is the slot's pid_ns value for job generation from namespace inode.
func packPIDNs(generation, inode uint64) uint64 {
	return (generation&0xffffffff)<<32 | inode&0xffffffff
}

// threadStarts caches each thread's start time by thread id. A thread that
// exits and whose id a new thread of this process takes would keep the old
// value: the agent then takes the new thread for a dead one and never writes
// it (the thread still orders itself and restores itself), the safe side.
var threadStarts sync.Map

// threadStart is thread tid's start time (clock ticks since boot), 0 if /proc
// does not say.
func threadStart(tid int) uint64 {
	if v, ok := threadStarts.Load(tid); ok {
		return v.(uint64)
	}
	var start uint64
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid)); err == nil {
		// The command name (field 2) may hold spaces and parentheses: count after the last ')'.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 19 {
				start, _ = strconv.ParseUint(f[19], 10, 64)
			}
		}
	}
	threadStarts.Store(tid, start)
	return start
}

// futexWake is FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word is shared between processes.
const futexWake = 1
