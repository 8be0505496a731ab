package kernel

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
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
	headerSize       = 128
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
	// offStart: the thread's start time, 0 = unknown. A claim writes 0, so the agent never
	// checks this thread against a start time an earlier job in the slot left.
	offStart = 72
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

// agentAlive says whether the agent serves the table: RUNNING and its process exists.
func (t *table) agentAlive() bool {
	if atomic.LoadUint32(t.u32(offAgentState)) != AgentRunning {
		return false
	}
	pid := int(atomic.LoadUint32(t.u32(offAgentPID)))
	return pid != 0 && unix.Kill(pid, 0) != unix.ESRCH
}

// futexWake is FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word is shared between processes.
const futexWake = 1
