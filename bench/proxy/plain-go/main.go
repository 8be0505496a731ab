// A plain net/http service for the proxy benchmark (docs/proxy.md): it knows nothing of
// Tailor. Each request burns the CPU it asks for (value -index of the `tailor-demand-us`
// header, µs; none without it), then waits as long as value -index of `tailor-wait-us`
// asks (µs off the CPU: a database or disk call; the limit benchmark's I/O-bound profile)
// and, with -downstream, then calls the next tier forwarding
// only what any OpenTelemetry-instrumented service forwards: the W3C `baggage` header
// (plus the benchmark's demand header). The reply body is one line per tier, this tier's
// first: `tier <index> seq <order this tier started serving it> baggage <baggage it got>`.
// With no demand header and no -downstream it answers `ok` at once (the cost benchmark's
// upstream).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const demandHeader = "tailor-demand-us"
const waitHeader = "tailor-wait-us"

// threadCPU is this OS thread's CPU time (clock_gettime(CLOCK_THREAD_CPUTIME_ID), which the
// vDSO does not serve: a real system call). Raw, without telling the Go runtime: a burn calls
// it in a loop, and through syscall.Syscall every call marked the thread as in a system call,
// so the runtime's sysmon woke every 20 µs to take its P back for as long as any burn ran
// (perf of a Go tier at ρ 0.85: half the CPU outside the burn in sysmon's usleep; 0.4–0.65 ms
// per request beyond the demand that a service computing for real would not pay).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// burn spins for d of this thread's CPU time (pinned to the thread so the clock is its own).
func burn(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	end := threadCPU() + d
	for threadCPU() < end {
	}
}

// demandOf is the -index'th value of the demand header, µs.
func demandOf(r *http.Request, index int) time.Duration {
	return valueOf(r, demandHeader, index)
}

// valueOf is the -index'th value of a comma-separated header of µs (0 if absent or bad).
func valueOf(r *http.Request, header string, index int) time.Duration {
	parts := strings.Split(r.Header.Get(header), ",")
	if index >= len(parts) {
		return 0
	}
	us, err := strconv.ParseUint(strings.TrimSpace(parts[index]), 10, 32)
	if err != nil {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	index := flag.Int("index", 0, "which value of the tailor-demand-us header is this tier's")
	downstream := flag.String("downstream", "", "URL of the next tier (through the sidecar's egress listener)")
	flag.Parse()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 10 * time.Second}}
	var seq atomic.Uint64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := seq.Add(1)
		demand := demandOf(r, *index)
		if demand == 0 && *downstream == "" && r.Header.Get(demandHeader) == "" {
			io.WriteString(w, "ok\n")
			return
		}
		burn(demand)
		if wait := valueOf(r, waitHeader, *index); wait > 0 {
			time.Sleep(wait)
		}
		line := fmt.Sprintf("tier %d seq %d baggage %s\n", *index, n, r.Header.Get("baggage"))
		if *downstream == "" {
			io.WriteString(w, line)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), "GET", *downstream, nil)
		req.Header.Set(demandHeader, r.Header.Get(demandHeader))
		if b := r.Header.Get("baggage"); b != "" {
			req.Header.Set("baggage", b)
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		below, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			w.WriteHeader(resp.StatusCode)
		}
		io.WriteString(w, line)
		w.Write(below)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("plain-go tier %d listening on %s\n", *index, ln.Addr())
	log.Fatal(http.Serve(ln, h))
}
