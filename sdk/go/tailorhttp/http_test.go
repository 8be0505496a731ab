package tailorhttp

// Real net/http servers on loopback: propagation through a chain, the edge's
// strip-and-stamp, clamping, trust boundaries, and the gate's ordering and
// shedding as a client sees them.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailor-sched/tailor/sdk/go/gate"
	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// seen is what a handler observed: its context and the raw headers it got.
type seen struct {
	ctx     tailorctx.Context
	ok      bool
	header  string
	baggage string
}

func recorder(ch chan<- seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := tailorctx.FromContext(r.Context())
		ch <- seen{c, ok, r.Header.Get(tailorctx.Header), strings.Join(r.Header.Values("baggage"), ",")}
		io.WriteString(w, "ok")
	})
}

func get(t *testing.T, url string, h http.Header) *http.Response {
	t.Helper()
	resp, err := do(url, h)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// do sends a GET with headers h and reads the body (usable off the test goroutine).
func do(url string, h http.Header) (*http.Response, error) {
	req, _ := http.NewRequest("GET", url, nil)
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

func TestAChainCarriesTheEdgeStampToTheNextHop(t *testing.T) {
	backSeen := make(chan seen, 1)
	back := httptest.NewServer(New(Config{}, recorder(backSeen)))
	defer back.Close()
	edgeSeen := make(chan seen, 1)
	client := Client()
	route := tailorctx.EdgeRoute{Class: 2, Budget: uint64(50 * time.Millisecond), HasBudget: true}
	edge := httptest.NewServer(New(Config{Edge: &route}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recorder(edgeSeen).ServeHTTP(httptest.NewRecorder(), r)
		req, _ := http.NewRequestWithContext(r.Context(), "GET", back.URL, nil)
		req.Header.Set("baggage", "userId=alice, tailor=1.g5.c0.k1.h0 ;p=1,z=9")
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		resp.Body.Close()
	})))
	defer edge.Close()

	before := wallNanos()
	// A forged context from outside: the edge must not believe it.
	resp := get(t, edge.URL, http.Header{"Tailor-Context": {"1.g5.c0.k1.h0"}, "Baggage": {"a=1"}})
	after := wallNanos()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	e, b := <-edgeSeen, <-backSeen
	if !e.ok || e.ctx.GAT < before || e.ctx.GAT > after || e.ctx.Hop != 0 || e.ctx.Class != 2 || e.ctx.Deadline != e.ctx.GAT+uint64(50*time.Millisecond) {
		t.Fatalf("edge stamp: %+v (window %d..%d)", e.ctx, before, after)
	}
	// The edge rewrote its request's own headers, so raw forwarding carries the new stamp.
	if e.header != tailorctx.Encode(e.ctx) || e.baggage != "a=1,tailor="+tailorctx.Encode(e.ctx) {
		t.Fatalf("edge headers not rewritten: %q %q", e.header, e.baggage)
	}
	want := e.ctx.Child()
	if !b.ok || b.ctx != want {
		t.Fatalf("next hop saw %+v, want %+v", b.ctx, want)
	}
	// Our member replaced the stale one in place, the others kept in order.
	if b.header != tailorctx.Encode(want) || b.baggage != "userId=alice,tailor="+tailorctx.Encode(want)+",z=9" {
		t.Fatalf("forwarded headers: %q %q", b.header, b.baggage)
	}
}

func TestAHopClampsCountsAndStampsWhatItCannotRead(t *testing.T) {
	got := make(chan seen, 1)
	m := New(Config{MaxAge: time.Second}, recorder(got))
	srv := httptest.NewServer(m)
	defer srv.Close()

	// A GAT an hour old is clamped to now - 1 s; the deadline before it is raised to it.
	now := wallNanos()
	old := tailorctx.Context{GAT: now - uint64(time.Hour), Deadline: now - uint64(time.Hour) + 5, Class: 1, Fanout: 4, Hop: 3}
	get(t, srv.URL, http.Header{"Tailor-Context": {tailorctx.Encode(old)}})
	s := <-got
	if s.ctx.GAT < now-uint64(time.Second) || s.ctx.GAT > wallNanos()-uint64(time.Second) || s.ctx.Deadline != s.ctx.GAT || s.ctx.Class != 1 || s.ctx.Fanout != 4 || s.ctx.Hop != 3 {
		t.Fatalf("clamped: %+v", s.ctx)
	}
	// From baggage alone (percent-encoded, as some propagators send it).
	fresh := tailorctx.Context{GAT: wallNanos() - 1000, Deadline: tailorctx.Never, Class: 0, Fanout: 1, Hop: 1}
	enc := strings.ReplaceAll(tailorctx.Encode(fresh), ".", "%2E")
	get(t, srv.URL, http.Header{"Baggage": {"x=1", "tailor=" + enc}})
	if s := <-got; s.ctx != fresh {
		t.Fatalf("from baggage: %+v, want %+v", s.ctx, fresh)
	}
	// Malformed: served as if it arrived now.
	before := wallNanos()
	get(t, srv.URL, http.Header{"Tailor-Context": {"1.g05.c0.k1.h0"}})
	if s := <-got; s.ctx.GAT < before || s.ctx.Hop != 0 {
		t.Fatalf("malformed: %+v", s.ctx)
	}
	// Absent.
	get(t, srv.URL, nil)
	<-got
	st := m.Stats()
	rejected := map[string]uint64{}
	for _, k := range st.Rejected() {
		rejected[k.Kind] = k.Count
	}
	clamps := map[string]uint64{}
	for _, k := range st.Clamps() {
		clamps[k.Kind] = k.Count
	}
	if st.Accepted() != 2 || st.Absent() != 1 || rejected["invalid_number"] != 1 || clamps["gat_stale"] != 1 || clamps["deadline_early"] != 1 {
		t.Fatalf("stats: accepted %d absent %d rejected %v clamps %v", st.Accepted(), st.Absent(), rejected, clamps)
	}
}

func TestATrustBoundaryStripsUnsignedContexts(t *testing.T) {
	key, err := tailorctx.NewKey("k1", []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	ring, _ := tailorctx.NewKeyring(key)
	got := make(chan seen, 1)
	srv := httptest.NewServer(New(Config{Keyring: ring}, recorder(got)))
	defer srv.Close()
	c := tailorctx.Context{GAT: wallNanos() - 500, Deadline: tailorctx.Never, Class: 3, Fanout: 1, Hop: 2}

	get(t, srv.URL, http.Header{"Tailor-Context": {tailorctx.EncodeSigned(c, key)}})
	if s := <-got; s.ctx != c {
		t.Fatalf("signed: %+v, want %+v", s.ctx, c)
	}
	before := wallNanos()
	get(t, srv.URL, http.Header{"Tailor-Context": {tailorctx.Encode(c)}, "Baggage": {"a=1,tailor=" + tailorctx.Encode(c)}})
	s := <-got
	if s.ctx.GAT < before || s.ctx.Class != 0 || s.header != "" || s.baggage != "a=1" {
		t.Fatalf("unsigned at a trust boundary must be stripped: %+v", s)
	}
}

func TestTheTransportLeavesRequestsOutsideAServedOneAlone(t *testing.T) {
	got := make(chan seen, 1)
	srv := httptest.NewServer(recorder(got))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("baggage", "a=1")
	resp, err := Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := <-got; s.header != "" || s.baggage != "a=1" {
		t.Fatalf("%+v", s)
	}
}

// Requests queue behind a holder, one at a time; the gate then serves them
// oldest GAT first, over real HTTP.
func TestTheGateOrdersHandlersByGATOverHTTP(t *testing.T) {
	g, _ := gate.New(gate.Config{Policy: gate.ORF, C: 1, MaxQueue: 5})
	release := make(chan struct{})
	var mu sync.Mutex
	var order []uint64
	srv := httptest.NewServer(New(Config{Gate: g}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := tailorctx.FromContext(r.Context())
		if r.URL.Path == "/hold" {
			<-release
			return
		}
		mu.Lock()
		order = append(order, c.GAT)
		mu.Unlock()
	})))
	defer srv.Close()
	base := wallNanos() - uint64(time.Second)
	ctxHeader := func(gat uint64) http.Header {
		return http.Header{"Tailor-Context": {tailorctx.Encode(tailorctx.Stamped(gat))}}
	}
	var wg sync.WaitGroup
	status := make(chan *http.Response, 8)
	send := func(path string, gat uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := do(srv.URL+path, ctxHeader(gat))
			if err != nil {
				t.Error(err)
				return
			}
			status <- resp
		}()
	}
	send("/hold", base)
	deadline := time.Now().Add(20 * time.Second)
	for g.Stats().Running != 1 {
		if time.Now().After(deadline) {
			t.Fatal("holder never admitted")
		}
		time.Sleep(100 * time.Microsecond)
	}
	gats := []uint64{base + 50, base + 10, base + 40, base + 20, base + 30}
	for i, gat := range gats {
		send("/", gat)
		for g.Waiting() != i+1 {
			if time.Now().After(deadline) {
				t.Fatal("request never queued")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	// The queue is full: the next request is shed at once with the reason.
	if resp := get(t, srv.URL+"/", ctxHeader(base)); resp.StatusCode != 503 || resp.Header.Get(RejectedHeader) != gate.ReasonQueueFull {
		t.Fatalf("full queue: %d %q", resp.StatusCode, resp.Header.Get(RejectedHeader))
	}
	close(release)
	wg.Wait()
	close(status)
	for resp := range status {
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	want := fmt.Sprint([]uint64{base + 10, base + 20, base + 30, base + 40, base + 50})
	if fmt.Sprint(order) != want {
		t.Fatalf("served %v, want %v", order, want)
	}
}

func TestALateRequestIsShedWith503AndTheReason(t *testing.T) {
	g, _ := gate.New(gate.Config{Policy: gate.EDF, C: 1, RejectLate: true})
	srv := httptest.NewServer(New(Config{Gate: g}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	now := wallNanos()
	late := tailorctx.Context{GAT: now - 2000, Deadline: now - 1000, Fanout: 1}
	resp := get(t, srv.URL, http.Header{"Tailor-Context": {tailorctx.Encode(late)}})
	if resp.StatusCode != 503 || resp.Header.Get(RejectedHeader) != gate.ReasonDeadline {
		t.Fatalf("late: %d %q", resp.StatusCode, resp.Header.Get(RejectedHeader))
	}
	// A client that gives up while queued frees its place: the gate ends empty.
	holdRelease := make(chan struct{})
	srv2 := httptest.NewServer(New(Config{Gate: g}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-holdRelease })))
	defer srv2.Close()
	go do(srv2.URL, nil)
	for g.Stats().Running != 1 {
		time.Sleep(100 * time.Microsecond)
	}
	// The client gives up only once its request waits in the gate (a timeout instead
	// could expire before a busy machine got the request that far).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv2.URL, nil)
		_, err := http.DefaultClient.Do(req)
		gaveUp <- err
	}()
	waitFor(t, "the second request to queue", func() bool { return g.Waiting() == 1 })
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("the queued request answered before the holder left")
	}
	waitFor(t, "the cancelled request to leave the queue", func() bool { return g.Waiting() == 0 })
	close(holdRelease)
	if st := g.Stats(); st.ShedCanceled != 1 || st.ShedDeadline != 1 {
		t.Fatalf("%+v", st)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s (a loaded machine is
// slow, never wrong).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
