package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tailor-sched/tailor/sdk/go/gate"
	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
	"github.com/tailor-sched/tailor/sdk/go/tailorhttp"
)

// The same cases as the Rust `levels_fall_one_per_bucket_from_the_top_and_clamp`.
func TestLevelsFallOnePerBucketFromTheTopAndClamp(t *testing.T) {
	const q = 1000
	for _, c := range []struct {
		key, base uint64
		want      int
	}{
		{5000, 5000, TopLevel}, {4000, 5000, TopLevel}, {5999, 5000, TopLevel}, {6000, 5000, TopLevel - 1},
		{5000 + 39*q, 5000, 1}, {^uint64(0), 5000, 1},
	} {
		if got := Level(c.key, c.base, q); got != c.want {
			t.Fatalf("Level(%d, %d) = %d, want %d", c.key, c.base, got, c.want)
		}
	}
}

func TestWithoutATableHandlersRunUnregistered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-table")
	if _, err := Connect(path); !errors.Is(err, ErrNoTable) || !strings.Contains(err.Error(), "tailor agent --table") {
		t.Fatalf("absent table: %v", err)
	}
	c := Open(path, nil)
	ran := false
	c.Run(tailorctx.Stamped(1), func() { ran = true })
	if ok, why := c.Active(); !ran || ok || !strings.Contains(why, "no agent table") || c.Stats().Unregistered != 1 {
		t.Fatalf("ran %v active %v (%s) %+v", ran, ok, why, c.Stats())
	}
	// A file that is not a table is refused with the reason.
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, make([]byte, 4096), 0o600)
	if _, err := Connect(junk); err == nil || !strings.Contains(err.Error(), "bad magic") {
		t.Fatalf("junk: %v", err)
	}
	// The right magic with another version: the version is named.
	b := make([]byte, 4096)
	copy(b, "TAILORSC")
	b[offVersion] = 5
	os.WriteFile(junk, b, 0o600)
	if _, err := Connect(junk); err == nil || !strings.Contains(err.Error(), "version 5, this client speaks 8") {
		t.Fatalf("version: %v", err)
	}
}

// needAgent skips without CAP_SYS_NICE or the tailor binary, and otherwise
// returns the binary's path.
func needAgent(t *testing.T) string {
	t.Helper()
	status, _ := os.ReadFile("/proc/self/status")
	capable := false
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, _ := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			capable = caps&(1<<23) != 0
		}
	}
	if !capable {
		t.Skip("SKIP: kernel registration needs CAP_SYS_NICE (SCHED_FIFO levels); run as root or `setcap cap_sys_nice+ep` the test binary")
	}
	bin := os.Getenv("TAILOR_BIN")
	if bin == "" {
		bin, _ = filepath.Abs(filepath.Join("..", "..", "..", "target", "release", "tailor"))
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("SKIP: no tailor binary at %s: build it with `cargo build --release -p tailor-cli` (scripts/test.sh's cargo test does), or set TAILOR_BIN", bin)
	}
	return bin
}

// lockedBuffer collects the agent's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// agent is a `tailor agent` process this test started.
type agent struct {
	cmd    *exec.Cmd
	path   string
	stderr *lockedBuffer
	exited chan struct{}
}

// startAgent runs `tailor agent` on a table of its own and waits until it serves it.
func startAgent(t *testing.T, bin, name string, args ...string) *agent {
	t.Helper()
	a := &agent{path: fmt.Sprintf("/dev/shm/tailor-gosdk-test-%d-%s", os.Getpid(), name), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	a.cmd = exec.Command(bin, append([]string{"agent", "--table", a.path}, args...)...)
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() { a.stop(t); os.Remove(a.path) })
	for start := time.Now(); ; {
		if tb, err := openTable(a.path); err == nil {
			alive := tb.agentAlive()
			tb.close()
			if alive {
				return a
			}
		}
		select {
		case <-a.exited:
			t.Fatalf("tailor agent exited: %s", a.stderr.String())
		default:
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("tailor agent not serving %s after 20 s: %s", a.path, a.stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stop sends SIGTERM to the agent (its own pid) and waits; it restores every thread.
func (a *agent) stop(t *testing.T) {
	select {
	case <-a.exited:
		return
	default:
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
		t.Errorf("tailor agent ignored SIGTERM for 10 s: %s", a.stderr.String())
	}
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// assertAllRestored: every slot of c's table is free, and no thread of this
// process kept a SCHED_FIFO level.
func assertAllRestored(t *testing.T, c *Client) {
	t.Helper()
	for i := 0; i < c.t.slots; i++ {
		if _, state := unpack(atomic.LoadUint64(c.t.u64(c.t.slot(i, offWord)))); state != StateFree {
			t.Fatalf("slot %d still in state %d", i, state)
		}
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy != 0 /* SCHED_OTHER */ {
			t.Fatalf("thread %d left at policy %d priority %d", tid, attr.Policy, attr.Priority)
		}
	}
}

// outcome is what one registered handler saw.
type outcome struct {
	start, end    time.Time
	policy, level uint32
	restored      bool
	before, after unix.SchedAttr
	_             struct{}
}

// job runs a handler registered at gat that burns cpu on the given CPU,
// setting started once it has run a little there.
func job(c *Client, gat uint64, cpu int, burn time.Duration, started *atomic.Bool) outcome {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var o outcome
	var all unix.CPUSet
	unix.SchedGetaffinity(0, &all)
	defer unix.SchedSetaffinity(0, &all)
	before, _ := unix.SchedGetAttr(0, 0)
	c.Run(tailorctx.Stamped(gat), func() {
		in, _ := unix.SchedGetAttr(0, 0)
		o.policy, o.level = in.Policy, in.Priority
		// Pinned after registering: at its level, it preempts any lower one there.
		var one unix.CPUSet
		one.Set(cpu)
		unix.SchedSetaffinity(0, &one)
		from := threadCPU()
		o.start = time.Now()
		for signalled := false; threadCPU()-from < burn; {
			if !signalled && threadCPU()-from > 5*time.Millisecond {
				if started != nil {
					started.Store(true)
				}
				signalled = true
			}
		}
		o.end = time.Now()
	})
	after, _ := unix.SchedGetAttr(0, 0)
	o.before, o.after = *before, *after
	o.restored = after.Policy == before.Policy && after.Priority == before.Priority && after.Flags == before.Flags
	return o
}

// With a real `tailor agent --enforce priority`, an older request that
// arrives while a younger one runs on the same CPU is served first (the
// kernel preempts the younger), and every thread is back to its own policy
// when its handler returns.
func TestTheKernelServesTheOlderRequestFirst(t *testing.T) {
	bin := needAgent(t)
	if runtime.NumCPU() < 2 {
		t.Skip("SKIP: needs 2 CPUs (one for the test's other goroutines while the jobs share one)")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(4, runtime.GOMAXPROCS(0))))
	n := runtime.NumCPU()
	a := startAgent(t, bin, "key", "--policy", "orf", "--c", strconv.Itoa(n), "--cpus", strconv.Itoa(n), "--enforce", "priority", "--bucket-us", "1000", "--slots", "64")
	c, err := Connect(a.path)
	if err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	unix.SchedGetaffinity(0, &set)
	cpu := -1
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			cpu = i
		}
	}

	// The first job's key is out of levels (base starts at 0): it asks the agent
	// to shift, which puts base at its key; wait for that (a readiness signal).
	origin := uint64(time.Now().UnixNano()) - uint64(time.Second)
	c.Run(tailorctx.Stamped(origin), func() {
		for start := time.Now(); atomic.LoadUint64(c.t.u64(offBase)) != origin; {
			if time.Since(start) > 10*time.Second {
				t.Errorf("the agent never shifted base to %d (base %d): %s", origin, atomic.LoadUint64(c.t.u64(offBase)), a.stderr.String())
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	if t.Failed() {
		return
	}

	// A young request (20 buckets after origin: level 20) starts first and is
	// running on `cpu` when an old one (5 buckets: level 35) arrives there. The
	// old one needs more CPU than the young one has left, so sharing the CPU
	// fairly would finish the young one first; the kernel, ordering by level,
	// runs the old one to completion first.
	race := func(c *Client, registered bool) (young, old outcome) {
		// The older request's thread waits, spinning, above every key level (as
		// the Rust runtime's I/O threads do): a fair-class thread could sit
		// behind the younger one's level on its CPU, or behind this shared
		// machine's load, instead of arriving while the younger one runs.
		var youngStarted, oldWaiting atomic.Bool
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			orig, _ := unix.SchedGetAttr(0, 0)
			defer unix.SchedSetAttr(0, orig, 0)
			above := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: TopLevel + 5, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
			if err := unix.SchedSetAttr(0, &above, 0); err != nil {
				t.Errorf("SCHED_FIFO/%d: %v", above.Priority, err)
			}
			oldWaiting.Store(true)
			for start := time.Now(); !youngStarted.Load() && time.Since(start) < 20*time.Second; {
			}
			if !registered {
				// Unregistered, the request runs at its thread's own policy: the default one.
				unix.SchedSetAttr(0, orig, 0)
			}
			old = job(c, origin+5*uint64(time.Millisecond), cpu, 150*time.Millisecond, nil)
		}()
		for !oldWaiting.Load() {
			time.Sleep(100 * time.Microsecond)
		}
		go func() {
			defer wg.Done()
			young = job(c, origin+20*uint64(time.Millisecond), cpu, 100*time.Millisecond, &youngStarted)
		}()
		wg.Wait()
		return young, old
	}
	// Side by side: the same two requests unregistered (the Linux default).
	unregistered := Open(filepath.Join(t.TempDir(), "none"), nil)
	young, old := race(unregistered, false)
	if !young.end.Before(old.end) {
		t.Fatalf("control: unregistered, the younger request (less CPU left) should finish first under fair sharing; it finished %v after", young.end.Sub(old.end))
	}
	young, old = race(c, true)
	if young.policy != unix.SCHED_FIFO || old.policy != unix.SCHED_FIFO || young.level != 20 || old.level != 35 {
		t.Fatalf("levels inside the handlers: young %d/%d, old %d/%d; want SCHED_FIFO 20 and 35", young.policy, young.level, old.policy, old.level)
	}
	if !old.end.Before(young.end) {
		t.Fatalf("the older request finished after the younger one: the kernel did not serve it first (ms from the younger one's start: younger 0..%d, older %d..%d)",
			young.end.Sub(young.start).Milliseconds(), old.start.Sub(young.start).Milliseconds(), old.end.Sub(young.start).Milliseconds())
	}
	if !young.restored || !old.restored {
		t.Fatalf("threads not restored: young %+v -> %+v, old %+v -> %+v", young.before, young.after, old.before, old.after)
	}
	// Preempted, the younger one made no progress while the older one ran: its
	// wall time is its own 100 ms of CPU plus (most of) the older one's 150 ms.
	if waited := young.end.Sub(young.start) - 100*time.Millisecond; waited < 120*time.Millisecond {
		t.Fatalf("the younger request waited only %v of the older one's 150 ms of CPU", waited)
	}
	t.Logf("registered: the older request (started second, more CPU) finished %v before the younger one, which ran %v..%v ms while the older one ran %v..%v ms",
		young.end.Sub(old.end), 0, young.end.Sub(young.start).Milliseconds(), old.start.Sub(young.start).Milliseconds(), old.end.Sub(young.start).Milliseconds())

	// A handler that panics still frees its slot and restores its thread.
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer func() {
			if r := recover(); r != "handler bug" {
				t.Errorf("recovered %v", r)
			}
			if attr, _ := unix.SchedGetAttr(0, 0); attr.Policy != 0 /* SCHED_OTHER */ {
				t.Errorf("after a panic the thread is at policy %d priority %d", attr.Policy, attr.Priority)
			}
		}()
		c.Run(tailorctx.Stamped(origin+uint64(time.Millisecond)), func() { panic("handler bug") })
	}()

	assertAllRestored(t, c)
	if st := c.Stats(); st.Registered != 4 || st.Errors != 0 {
		t.Fatalf("%+v", st)
	}

	// The agent stops: registration turns off (logged once) and handlers still run.
	a.stop(t)
	ran := false
	c.Run(tailorctx.Stamped(origin), func() { ran = true })
	if ok, why := c.Active(); !ran || ok || !strings.Contains(why, "stopped") {
		t.Fatalf("after the agent stopped: ran %v active %v (%s)", ran, ok, why)
	}
}

// An agent in band mode needs its admission protocol, which this client does not
// speak: Connect says so, and Open runs handlers unregistered.
func TestABandModeAgentIsRefusedWithTheFix(t *testing.T) {
	bin := needAgent(t)
	a := startAgent(t, bin, "band", "--policy", "orf", "--enforce", "band", "--slots", "64")
	if _, err := Connect(a.path); err == nil || !strings.Contains(err.Error(), "--enforce priority") {
		t.Fatalf("band mode: %v", err)
	}
	c := Open(a.path, nil)
	ran := false
	c.Run(tailorctx.Stamped(1), func() { ran = true })
	if ok, _ := c.Active(); ok || !ran {
		t.Fatalf("active %v ran %v", ok, ran)
	}
}

// Many concurrent requests through the HTTP middleware with a gate and kernel
// registration: every one is served, registered, and leaves its thread as it
// found it.
func TestConcurrentHTTPHandlersAllRegisterAndRestore(t *testing.T) {
	bin := needAgent(t)
	n := runtime.NumCPU()
	a := startAgent(t, bin, "http", "--policy", "orf", "--c", strconv.Itoa(n), "--cpus", strconv.Itoa(n), "--enforce", "priority", "--slots", "64")
	c, err := Connect(a.path)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := gate.New(gate.Config{Policy: gate.ORF, C: n})
	var inside atomic.Int64
	srv := httptest.NewServer(tailorhttp.New(tailorhttp.Config{Gate: g, Kernel: c}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inside.Add(1) > int64(n) {
			t.Errorf("more than %d handlers inside", n)
		}
		defer inside.Add(-1)
		attr, _ := unix.SchedGetAttr(0, 0)
		fmt.Fprintf(w, "%d", attr.Policy)
		from := threadCPU()
		for threadCPU()-from < 200*time.Microsecond {
		}
	})))
	defer srv.Close()
	const requests = 60
	var wg sync.WaitGroup
	now := uint64(time.Now().UnixNano())
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set(tailorctx.Header, tailorctx.Encode(tailorctx.Stamped(now-uint64(i)*uint64(time.Millisecond))))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != strconv.Itoa(unix.SCHED_FIFO) {
				t.Errorf("request %d: handler ran at policy %s, want SCHED_FIFO", i, body)
			}
		}(i)
	}
	wg.Wait()
	if st := c.Stats(); st.Registered != requests || st.Errors != 0 {
		t.Fatalf("%+v", st)
	}
	assertAllRestored(t, c)
}

// ---- A worker in a PID namespace of its own (a pod without hostPID), registered
// with a host agent. The child is this test binary re-executed under `unshare
// --pid --fork --mount-proc`: it is pid 1 there, so ids written as it sees them
// name host threads (init, kthreadd, ...) unless the agent translates them.

const nsTableEnv = "TAILOR_GO_TEST_NS_TABLE"

// TestNamespacedWorkerChild is the worker; it does nothing as a normal test.
func TestNamespacedWorkerChild(t *testing.T) {
	path := os.Getenv(nsTableEnv)
	if path == "" {
		return
	}
	c, err := Connect(path)
	if err != nil {
		fmt.Printf("error %v\n", err)
		return
	}
	c.Run(tailorctx.Stamped(uint64(time.Now().UnixNano())), func() {
		attr, _ := unix.SchedGetAttr(0, 0)
		fmt.Printf("running %d %d %d %d\n", os.Getpid(), unix.Gettid(), attr.Policy, attr.Priority)
		// The host stops the agent meanwhile, then writes a line.
		io.ReadAll(io.LimitReader(os.Stdin, 1))
		attr, _ = unix.SchedGetAttr(0, 0)
		fmt.Printf("after %d %d\n", attr.Policy, attr.Priority)
	})
}

func hostPolicies(ids []int) map[int]string {
	out := map[int]string{}
	for _, id := range ids {
		if attr, err := unix.SchedGetAttr(id, 0); err == nil {
			out[id] = fmt.Sprintf("%d/%d", attr.Policy, attr.Priority)
		}
	}
	return out
}

func TestAWorkerInItsOwnPIDNamespaceIsFoundAndRestoredByTheHostAgent(t *testing.T) {
	bin := needAgent(t)
	if err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").Run(); err != nil {
		t.Skipf("SKIP: `unshare --pid --fork --mount-proc` is unavailable (needs root and util-linux): %v", err)
	}
	decoys := make([]int, 64)
	for i := range decoys {
		decoys[i] = i + 1
	}
	before := hostPolicies(decoys)
	a := startAgent(t, bin, "ns", "--enforce", "priority", "--policy", "gfifo")
	child := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
		os.Args[0], "-test.run", "^TestNamespacedWorkerChild$", "-test.v")
	child.Env = append(os.Environ(), nsTableEnv+"="+a.path)
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	lines := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		var rest string
		for {
			n, err := stdout.Read(buf)
			rest += string(buf[:n])
			for {
				i := strings.IndexByte(rest, '\n')
				if i < 0 {
					break
				}
				lines <- rest[:i]
				rest = rest[i+1:]
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	want := func(prefix string) []string {
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the worker ended before printing %q", prefix)
				}
				if strings.HasPrefix(l, "error") {
					t.Fatalf("the worker: %s", l)
				}
				if strings.HasPrefix(l, prefix) {
					return strings.Fields(l)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no %q line from the worker in 30 s", prefix)
			}
		}
	}
	running := want("running")
	if running[1] != "1" || running[3] != strconv.Itoa(unix.SCHED_FIFO) {
		t.Fatalf("want pid 1 of its own namespace at SCHED_FIFO: %v", running)
	}
	// The slot says which namespace the ids are numbered in.
	tb, err := openTable(a.path)
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for i := 0; i < tb.slots; i++ {
		g, state := unpack(atomic.LoadUint64(tb.u64(tb.slot(i, offWord))))
		if state == StateFree {
			continue
		}
		live++
		ns := atomic.LoadUint64(tb.u64(tb.slot(i, offPIDNs)))
		own, _ := ownPIDNs()
		if ns>>32 != g&0xffffffff || ns&0xffffffff == own&0xffffffff || atomic.LoadUint64(tb.u64(tb.slot(i, offStart))) == 0 {
			t.Fatalf("slot %d: pid_ns %#x (generation %d, host namespace %d), start %d", i, ns, g, own, atomic.LoadUint64(tb.u64(tb.slot(i, offStart))))
		}
	}
	tb.close()
	if live != 1 {
		t.Fatalf("%d live jobs, want 1", live)
	}
	// Stopped mid-job, the agent restores the worker's thread by its host id.
	a.stop(t)
	stdin.Write([]byte("x"))
	after := want("after")
	if after[1] != strconv.Itoa(unix.SCHED_NORMAL) || after[2] != "0" {
		t.Fatalf("the host agent did not restore the pod's thread at its exit: %v (%s)", after, a.stderr.String())
	}
	child.Wait()
	if got := hostPolicies(decoys); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("host threads with the pod's ids changed: %v, before %v", got, before)
	}
}
