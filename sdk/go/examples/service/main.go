// Command service is a minimal Tailor-aware Go service: the tailorhttp
// middleware (edge stamp or hop extract+clamp), an ordering gate, kernel
// registration when a `tailor agent --enforce priority` serves the node, and
// outgoing calls that forward the context. Each request burns the CPU it asks
// for (?work_us=, default 1000) and, if -downstream is set, calls the next tier.
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
	"syscall"
	"time"

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
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "listen address")
	fs.BoolVar(&cfg.edge, "edge", false, "this service is the edge: strip incoming contexts and stamp new ones")
	fs.UintVar(&cfg.class, "class", 0, "edge: SLO class of the route (0 is the most stringent)")
	fs.Float64Var(&cfg.budgetMs, "budget-ms", 0, "edge: deadline after arrival, ms (0: no deadline)")
	fs.StringVar(&cfg.policy, "policy", "orf", "gate order: fifo, orf, gfifo, edf, priq")
	fs.IntVar(&cfg.c, "c", runtime.NumCPU(), "handlers running at once")
	fs.IntVar(&cfg.maxQueue, "max-queue", 256, "requests waiting at most; more get 503")
	fs.StringVar(&cfg.table, "table", kernel.DefaultTable, "tailor agent table (kernel registration when an agent serves it; \"\" to disable)")
	fs.StringVar(&cfg.downstream, "downstream", "", "URL of the next tier to call per request")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.class > 255 {
		return cfg, fmt.Errorf("-class %d: classes are 0-255", cfg.class)
	}
	return cfg, nil
}

// burn spins on the CPU for d of this thread's CPU time.
func burn(d time.Duration) {
	var ts unix.Timespec
	now := func() time.Duration {
		unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
	for start := now(); now()-start < d; {
	}
}

// handler burns the request's demand, calls downstream, and reports what it saw.
func handler(client *http.Client, downstream string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := tailorctx.FromContext(r.Context())
		workUs, err := strconv.ParseUint(r.URL.Query().Get("work_us"), 10, 32)
		if r.URL.Query().Get("work_us") == "" {
			workUs, err = 1000, nil
		}
		if err != nil || workUs > 10_000_000 {
			http.Error(w, "work_us: give the CPU demand in µs, 0-10000000", http.StatusBadRequest)
			return
		}
		burn(time.Duration(workUs) * time.Microsecond)
		if downstream != "" {
			req, _ := http.NewRequestWithContext(r.Context(), "GET", downstream+"?"+r.URL.RawQuery, nil)
			resp, err := client.Do(req)
			if err != nil {
				http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
				return
			}
			io.Copy(w, resp.Body)
			resp.Body.Close()
		}
		fmt.Fprintf(w, "hop %d gat %d context %s\n", c.Hop, c.GAT, tailorctx.Encode(c))
	})
}

// metrics serves the gate's and the wire's counters in Prometheus text format.
func metrics(g *gate.Gate, m *tailorhttp.Middleware, k *kernel.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st := g.Stats()
		fmt.Fprintf(w, "tailor_gate_admitted_total %d\ntailor_gate_running %d\ntailor_gate_waiting %d\n", st.Admitted, st.Running, st.Waiting)
		for _, s := range []struct {
			reason string
			n      uint64
		}{{gate.ReasonQueueFull, st.ShedQueueFull}, {gate.ReasonDeadline, st.ShedDeadline}, {gate.ReasonCanceled, st.ShedCanceled}} {
			fmt.Fprintf(w, "tailor_gate_shed_total{reason=%q} %d\n", s.reason, s.n)
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
	g, err := gate.New(gate.Config{Policy: policy, C: cfg.c, MaxQueue: cfg.maxQueue})
	if err != nil {
		return err
	}
	mw := tailorhttp.Config{Gate: g}
	if cfg.edge {
		route := tailorctx.EdgeRoute{Class: uint8(cfg.class)}
		if cfg.budgetMs > 0 {
			route.Budget, route.HasBudget = uint64(cfg.budgetMs*1e6), true
		}
		mw.Edge = &route
	}
	if k != nil {
		mw.Kernel = k
	}
	m := tailorhttp.New(mw, handler(tailorhttp.Client(), cfg.downstream))
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
