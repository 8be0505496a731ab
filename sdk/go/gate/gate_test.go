package gate

// The ordering properties the Rust cooperative backend is held to
// (runtime/tests/cooperative.rs): never more than C inside, admission in the
// policy's order, and no request lost (each one admitted and released, or shed
// with a reason), checked over random configurations with testing/quick.

import (
	"context"
	"errors"
	"math/rand"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/quick"
	"time"

	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func mustGate(t *testing.T, cfg Config) *Gate {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// scenario is one random run: C slots held while N requests queue one at a
// time (so the local arrival order is the index order), some of which give up.
type scenario struct {
	Policy  Policy
	C       int
	Reqs    []tailorctx.Context
	Cancels []bool
}

func (scenario) Generate(r *rand.Rand, _ int) reflect.Value {
	s := scenario{Policy: Policy(r.Intn(len(policyNames))), C: 1 + r.Intn(4)}
	n := 1 + r.Intn(14)
	for i := 0; i < n; i++ {
		// Few distinct values, so ties (broken by arrival) are common.
		c := tailorctx.Context{GAT: uint64(1000 + r.Intn(6)), Deadline: uint64(5000 + r.Intn(6)), Class: uint8(r.Intn(3)), Fanout: 1}
		if r.Intn(5) == 0 {
			c.Deadline = tailorctx.Never
		}
		s.Reqs = append(s.Reqs, c)
		s.Cancels = append(s.Cancels, r.Intn(6) == 0)
	}
	return reflect.ValueOf(s)
}

// run plays the scenario and returns the order (request indices) in which the
// queued requests were admitted, checking the bound and that nothing is lost.
func (s scenario) run(t *testing.T) []int {
	g := mustGate(t, Config{Policy: s.Policy, C: s.C})
	var inside, most atomic.Int64
	enterInside := func() {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
	}
	// C holders fill every slot.
	holders := make([]chan struct{}, s.C)
	var wg sync.WaitGroup
	for i := range holders {
		holders[i] = make(chan struct{})
		p, err := g.Enter(context.Background(), tailorctx.Stamped(0))
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
		enterInside()
		wg.Add(1)
		go func(release chan struct{}) {
			defer wg.Done()
			<-release
			inside.Add(-1)
			p.Release()
		}(holders[i])
	}
	var mu sync.Mutex
	var order []int
	outcomes := make([]error, len(s.Reqs))
	cancels := make([]context.CancelFunc, len(s.Reqs))
	var done sync.WaitGroup
	for i, c := range s.Reqs {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		done.Add(1)
		go func(i int, c tailorctx.Context) {
			defer done.Done()
			p, err := g.Enter(ctx, c)
			outcomes[i] = err
			if err != nil {
				return
			}
			enterInside()
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			inside.Add(-1)
			p.Release()
		}(i, c)
		waitUntil(t, "the request to queue", func() bool { return g.Waiting() == i+1 })
	}
	canceled := 0
	for i, yes := range s.Cancels {
		if yes {
			cancels[i]()
			canceled++
		}
	}
	waitUntil(t, "canceled requests to leave the queue", func() bool { return g.Waiting() == len(s.Reqs)-canceled })
	// One slot comes free: the queue drains through it one request at a time.
	close(holders[0])
	waitUntil(t, "the queue to drain", func() bool { return g.Waiting() == 0 && g.Stats().Running == s.C-1 })
	for _, h := range holders[1:] {
		close(h)
	}
	wg.Wait()
	done.Wait()
	for i, err := range outcomes {
		switch {
		case s.Cancels[i] && !errors.Is(err, ErrCanceled):
			t.Fatalf("request %d was canceled while queued but got %v", i, err)
		case !s.Cancels[i] && err != nil:
			t.Fatalf("request %d: %v", i, err)
		}
		cancels[i]()
	}
	st := g.Stats()
	if most.Load() > int64(s.C) || st.MaxRunning > uint64(s.C) {
		t.Fatalf("C=%d but %d ran at once (stats %+v)", s.C, most.Load(), st)
	}
	if want := uint64(s.C + len(s.Reqs) - canceled); st.Admitted != want || st.Released != want || st.ShedCanceled != uint64(canceled) {
		t.Fatalf("lost requests: %+v, want %d admitted and released, %d canceled", st, want, canceled)
	}
	if st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("gate not empty at the end: %+v", st)
	}
	return order
}

// expected is the policy's order of the requests that did not give up.
func (s scenario) expected() []int {
	var want []int
	for i := range s.Reqs {
		if !s.Cancels[i] {
			want = append(want, i)
		}
	}
	sort.SliceStable(want, func(a, b int) bool {
		return s.Policy.key(s.Reqs[want[a]]) < s.Policy.key(s.Reqs[want[b]])
	})
	return want
}

func TestAdmissionFollowsThePolicyOrderAndLosesNothing(t *testing.T) {
	prop := func(s scenario) bool {
		got, want := s.run(t), s.expected()
		if len(got) != len(want) {
			t.Logf("%v C=%d: admitted %v, want %v", s.Policy, s.C, got, want)
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				t.Logf("%v C=%d: admitted %v, want %v (requests %+v)", s.Policy, s.C, got, want, s.Reqs)
				return false
			}
		}
		return true
	}
	cfg := &quick.Config{MaxCount: 60, Rand: rand.New(rand.NewSource(21))}
	if err := quick.Check(prop, cfg); err != nil {
		t.Fatal(err)
	}
}

// The Rust test's fixed case: five GATs behind one holder.
func TestOrderOfTheRustCooperativeTest(t *testing.T) {
	gats := []uint64{50, 10, 40, 20, 30}
	for _, tc := range []struct {
		p    Policy
		want []uint64
	}{{GFIFO, []uint64{10, 20, 30, 40, 50}}, {ORF, []uint64{10, 20, 30, 40, 50}}, {FIFO, gats}} {
		s := scenario{Policy: tc.p, C: 1}
		for _, g := range gats {
			s.Reqs = append(s.Reqs, tailorctx.Stamped(g))
			s.Cancels = append(s.Cancels, false)
		}
		var got []uint64
		for _, i := range s.run(t) {
			got = append(got, gats[i])
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%v: %v", tc.p, got)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%v admitted GATs %v, want %v", tc.p, got, tc.want)
			}
		}
	}
}

// Under contention from many goroutines with random keys and work, at most C
// run at once and every request is admitted and released exactly once.
func TestNeverMoreThanCUnderContention(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, c := range []int{1, 3} {
		g := mustGate(t, Config{Policy: ORF, C: c})
		var inside, most atomic.Int64
		var wg sync.WaitGroup
		const n = 200
		for i := 0; i < n; i++ {
			gat := uint64(rng.Intn(1000))
			work := time.Duration(rng.Intn(200)) * time.Microsecond
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := g.Enter(context.Background(), tailorctx.Stamped(gat))
				if err != nil {
					t.Error(err)
					return
				}
				now := inside.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				time.Sleep(work)
				inside.Add(-1)
				p.Release()
			}()
		}
		wg.Wait()
		st := g.Stats()
		if most.Load() > int64(c) || st.MaxRunning > uint64(c) {
			t.Fatalf("C=%d: %d inside at once (%+v)", c, most.Load(), st)
		}
		if st.Admitted != n || st.Released != n || st.Running != 0 || st.Waiting != 0 {
			t.Fatalf("C=%d: %+v", c, st)
		}
	}
}

func TestAFullQueueShedsAtOnce(t *testing.T) {
	g := mustGate(t, Config{Policy: FIFO, C: 1, MaxQueue: 2})
	holder, _ := g.Enter(context.Background(), tailorctx.Stamped(1))
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := g.Enter(context.Background(), tailorctx.Stamped(2))
			if err != nil {
				t.Error(err)
				return
			}
			p.Release()
		}()
	}
	waitUntil(t, "two queued", func() bool { return g.Waiting() == 2 })
	_, err := g.Enter(context.Background(), tailorctx.Stamped(3))
	var shed *ShedError
	if !errors.As(err, &shed) || shed.Reason != ReasonQueueFull || !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third waiter: %v, want queue_full", err)
	}
	holder.Release()
	wg.Wait()
	if st := g.Stats(); st.ShedQueueFull != 1 || st.Admitted != 3 {
		t.Fatalf("%+v", st)
	}
}

func TestARequestWhoseDeadlinePassesInTheQueueIsShed(t *testing.T) {
	g := mustGate(t, Config{Policy: EDF, C: 1})
	holder, _ := g.Enter(context.Background(), tailorctx.Stamped(1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := g.Enter(ctx, tailorctx.Stamped(2))
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("got %v, want the deadline reason", err)
	}
	holder.Release()
	if st := g.Stats(); st.ShedDeadline != 1 || st.Waiting != 0 || st.Running != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestRejectLateShedsPastTailorDeadlinesOnArrivalAndAtAdmission(t *testing.T) {
	g := mustGate(t, Config{Policy: EDF, C: 1, RejectLate: true})
	clock := uint64(100)
	g.now = func() uint64 { return clock }
	late := tailorctx.Context{GAT: 10, Deadline: 50, Fanout: 1}
	if _, err := g.Enter(context.Background(), late); !errors.Is(err, ErrDeadline) {
		t.Fatalf("arrival past its deadline: %v", err)
	}
	holder, _ := g.Enter(context.Background(), tailorctx.Stamped(1))
	errs := make(chan error, 2)
	for _, d := range []uint64{150, tailorctx.Never} {
		c := tailorctx.Context{GAT: 20, Deadline: d, Fanout: 1}
		go func() {
			p, err := g.Enter(context.Background(), c)
			if err == nil {
				p.Release()
			}
			errs <- err
		}()
	}
	waitUntil(t, "two queued", func() bool { return g.Waiting() == 2 })
	clock = 200 // the first waiter's deadline passes while it waits
	holder.Release()
	got := []error{<-errs, <-errs}
	if !(errors.Is(got[0], ErrDeadline) && got[1] == nil || errors.Is(got[1], ErrDeadline) && got[0] == nil) {
		t.Fatalf("want one shed for its deadline and one served: %v", got)
	}
	if st := g.Stats(); st.ShedDeadline != 2 || st.Admitted != 2 || st.Running != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestBadConfigsAreRefusedWithTheFix(t *testing.T) {
	for _, cfg := range []Config{{C: 0}, {C: 1, MaxQueue: -1}, {C: 1, Policy: 99}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("%+v accepted", cfg)
		}
	}
	if _, err := ParsePolicy("lifo"); err == nil {
		t.Fatal("lifo accepted")
	}
	for _, name := range []string{"fifo", "orf", "gfifo", "edf", "priq"} {
		if p, err := ParsePolicy(name); err != nil || p.String() != name {
			t.Fatalf("%s: %v %v", name, p, err)
		}
	}
}

func BenchmarkEnterReleaseUncontended(b *testing.B) {
	g, _ := New(Config{Policy: ORF, C: 4})
	ctx := context.Background()
	c := tailorctx.Stamped(1)
	for i := 0; i < b.N; i++ {
		p, _ := g.Enter(ctx, c)
		p.Release()
	}
}
