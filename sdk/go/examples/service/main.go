// Command service is a minimal Tailor-aware Go service: the tailorhttp
// middleware (edge stamp or hop extract+clamp), an ordering gate, kernel
// registration when a `tailor agent --enforce priority` serves the node, and
// outgoing calls that forward the context. Each request burns the CPU it asks
// for (value -demand-index of the `tailor-demand-us` header, µs, else ?work_us=,
// default 1000) and, if -downstream is set, then calls the next tier. The gate
// and the kernel registration cover the CPU work only, not the wait for the
// next tier (the Rust runtime's Scheduler::spawn does the same). The reply's
// `tailor-seen-gat` header lists the GAT this tier saw, then the next tier's.
//
//	go run ./examples/service -addr 127.0.0.1:8081 -edge -budget-ms 50 -downstream http://127.0.0.1:8082/
//	go run ./examples/service -addr 127.0.0.1:8082
//	curl -s 'http://127.0.0.1:8081/?work_us=2000'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tailor-sched/tailor/sdk/go/gate"
	"github.com/tailor-sched/tailor/sdk/go/kernel"
	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
	"github.com/tailor-sched/tailor/sdk/go/tailorhttp"
)

// config is the command line.
type config struct {
	addr       string
	edge       bool
	class      uint
	budgetMs   float64
	policy     string
	c          int
	maxQueue   int
	table      string
	downstream string
	demandIdx  int
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "listen address")
	fs.BoolVar(&cfg.edge, "edge", false, "this service is the edge: strip incoming contexts and stamp new ones")
	fs.UintVar(&cfg.class, "class", 0, "edge: SLO class of the route (0 is the most stringent)")
	fs.Float64Var(&cfg.budgetMs, "budget-ms", 0, "edge: deadline after arrival, ms (0: no deadline)")
	fs.StringVar(&cfg.policy, "policy", "orf", "gate order: fifo, orf, gfifo, edf, priq")
	fs.IntVar(&cfg.c, "c", runtime.NumCPU(), "handlers running at once (0: no gate)")
	fs.IntVar(&cfg.maxQueue, "max-queue", 256, "requests waiting at most; more get 503")
	fs.StringVar(&cfg.table, "table", kernel.DefaultTable, "tailor agent table (kernel registration when an agent serves it; \"\" to disable)")
	fs.StringVar(&cfg.downstream, "downstream", "", "URL of the next tier to call per request")
	fs.IntVar(&cfg.demandIdx, "demand-index", 0, "which value of the tailor-demand-us header is this tier's CPU demand")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.class > 255 {
		return cfg, fmt.Errorf("-class %d: classes are 0-255", cfg.class)
	}
	return cfg, nil
}

// burn spins on the CPU for d of this thread's CPU time. The goroutine is locked to its thread
// (moved to another mid-burn, it would compare two threads' clocks), and the clock is read
// with a raw system call: through unix.ClockGettime every read marks the thread as in a system
// call, and the runtime's sysmon then wakes every 20 µs for as long as a burn runs.
func burn(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ts unix.Timespec
	now := func() time.Duration {
		unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_THREAD_CPUTIME_ID, uintptr(unsafe.Pointer(&ts)), 0)
		return time.Duration(ts.Nano())
	}
	for start := now(); now()-start < d; {
	}
}

// Headers of the chain convention the Rust demo uses (bench/src/loadgen.rs).
const (
	demandHeader  = "Tailor-Demand-Us"
	seenGATHeader = "Tailor-Seen-Gat"
)

// demandOf is the request's CPU demand: value idx of tailor-demand-us, else ?work_us=, else 1 ms.
func demandOf(r *http.Request, idx int) (time.Duration, error) {
	if h := r.Header.Get(demandHeader); h != "" {
		fields := strings.Split(h, ",")
		if idx >= len(fields) {
			return 0, fmt.Errorf("header %s: %q has no value for tier %d; give one µs value per tier", demandHeader, h, idx)
		}
		us, err := strconv.ParseUint(strings.TrimSpace(fields[idx]), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("header %s: %q (tier %d) is not a whole number of µs", demandHeader, fields[idx], idx)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	q := r.URL.Query().Get("work_us")
	if q == "" {
		return time.Millisecond, nil
	}
	us, err := strconv.ParseUint(q, 10, 32)
	if err != nil || us > 10_000_000 {
		return 0, errors.New("work_us: give the CPU demand in µs, 0-10000000")
	}
	return time.Duration(us) * time.Microsecond, nil
}

// handler burns the request's demand in its turn (gate, kernel), calls
// downstream, and reports what it saw.
func handler(client *http.Client, downstream string, demandIdx int, g *gate.Gate, k *kernel.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := tailorctx.FromContext(r.Context())
		demand, err := demandOf(r, demandIdx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if g != nil {
			permit, err := g.Enter(r.Context(), c)
			if err != nil {
				var shed *gate.ShedError
				if errors.As(err, &shed) {
					w.Header().Set(tailorhttp.RejectedHeader, shed.Reason)
				}
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if k != nil {
				k.Run(c, func() { burn(demand) })
			} else {
				burn(demand)
			}
			permit.Release()
		} else if k != nil {
			k.Run(c, func() { burn(demand) })
		} else {
			burn(demand)
		}
		seen := strconv.FormatUint(c.GAT, 10)
		var below []byte
		if downstream != "" {
			req, _ := http.NewRequestWithContext(r.Context(), "GET", downstream+"?"+r.URL.RawQuery, nil)
			if h := r.Header.Get(demandHeader); h != "" {
				req.Header.Set(demandHeader, h)
			}
			resp, err := client.Do(req)
			if err != nil {
				http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
				return
			}
			below, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				http.Error(w, fmt.Sprintf("downstream: status %d: %s", resp.StatusCode, below), http.StatusBadGateway)
				return
			}
			if s := resp.Header.Get(seenGATHeader); s != "" {
				seen += "," + s
			}
		}
		w.Header().Set(seenGATHeader, seen)
		w.Write(below)
		fmt.Fprintf(w, "hop %d gat %d context %s\n", c.Hop, c.GAT, tailorctx.Encode(c))
	})
}

// metrics serves the gate's and the wire's counters in Prometheus text format.
func metrics(g *gate.Gate, m *tailorhttp.Middleware, k *kernel.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if g != nil {
			st := g.Stats()
			fmt.Fprintf(w, "tailor_gate_admitted_total %d\ntailor_gate_running %d\ntailor_gate_waiting %d\n", st.Admitted, st.Running, st.Waiting)
			for _, s := range []struct {
				reason string
				n      uint64
			}{{gate.ReasonQueueFull, st.ShedQueueFull}, {gate.ReasonDeadline, st.ShedDeadline}, {gate.ReasonCanceled, st.ShedCanceled}} {
				fmt.Fprintf(w, "tailor_gate_shed_total{reason=%q} %d\n", s.reason, s.n)
			}
		}
		ws := m.Stats()
		fmt.Fprintf(w, "tailor_context_accepted_total %d\ntailor_context_absent_total %d\n", ws.Accepted(), ws.Absent())
		for _, k := range ws.Rejected() {
			fmt.Fprintf(w, "tailor_context_rejected_total{kind=%q} %d\n", k.Kind, k.Count)
		}
		for _, k := range ws.Clamps() {
			fmt.Fprintf(w, "tailor_context_clamped_total{field=%q} %d\n", k.Kind, k.Count)
		}
		if k == nil {
			return
		}
		ks := k.Stats()
		fmt.Fprintf(w, "tailor_kernel_registered_total %d\ntailor_kernel_unregistered_total %d\n", ks.Registered, ks.Unregistered)
	})
}

// run serves until ctx ends; it sends the bound address on ready once listening.
func run(ctx context.Context, cfg config, ready chan<- string) error {
	policy, err := gate.ParsePolicy(cfg.policy)
	if err != nil {
		return err
	}
	var k *kernel.Client
	if cfg.table != "" {
		k = kernel.Open(cfg.table, nil) // logs once why not, and then runs handlers unregistered
		if ok, _ := k.Active(); !ok {
			k = nil
		} else if n := runtime.NumCPU(); n > 1 && cfg.c >= n {
			// A CPU free of registered handlers for fair-class threads (docs/sdk.md).
			log.Printf("kernel registration on: -c %d lowered to %d (CPUs - 1)", cfg.c, n-1)
			cfg.c = n - 1
		}
	}
	var g *gate.Gate
	if cfg.c > 0 {
		if g, err = gate.New(gate.Config{Policy: policy, C: cfg.c, MaxQueue: cfg.maxQueue}); err != nil {
			return err
		}
	}
	// The handler takes its turn (gate, kernel) for its own work only.
	var mw tailorhttp.Config
	if cfg.edge {
		route := tailorctx.EdgeRoute{Class: uint8(cfg.class)}
		if cfg.budgetMs > 0 {
			route.Budget, route.HasBudget = uint64(cfg.budgetMs*1e6), true
		}
		mw.Edge = &route
	}
	// Keep a warm connection per concurrent call (the default keeps 2 idle per host).
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 256
	client := &http.Client{Transport: &tailorhttp.Transport{Base: base}}
	m := tailorhttp.New(mw, handler(client, cfg.downstream, cfg.demandIdx, g, k))
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics(g, m, k))
	mux.Handle("/", m)
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	ready <- lis.Addr().String()
	if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ready := make(chan string, 1)
	go func() { log.Printf("listening on %s", <-ready) }()
	if err := run(ctx, cfg, ready); err != nil {
		log.Fatal(err)
	}
}
