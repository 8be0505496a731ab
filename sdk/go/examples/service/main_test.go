package main

// The example as a user runs it: an edge tier and a hop tier on loopback; a
// request through both sees the edge's stamp one hop further at the second.

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func start(t *testing.T, args ...string) string {
	t.Helper()
	cfg, err := parseFlags(append([]string{"-addr", "127.0.0.1:0", "-table", ""}, args...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case addr := <-ready:
		return "http://" + addr
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

func TestTwoTiersCarryTheEdgeStamp(t *testing.T) {
	hop := start(t)
	edge := start(t, "-edge", "-budget-ms", "50", "-downstream", hop+"/")
	resp, err := http.Get(edge + "/?work_us=200")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if resp.StatusCode != 200 || len(lines) != 2 || !strings.HasPrefix(lines[0], "hop 1 ") || !strings.HasPrefix(lines[1], "hop 0 ") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	gat := func(l string) string { return strings.Fields(l)[3] }
	if gat(lines[0]) != gat(lines[1]) {
		t.Fatalf("GAT changed between tiers: %q", body)
	}
	m, err := http.Get(hop + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(metrics), "tailor_gate_admitted_total 1") || !strings.Contains(string(metrics), "tailor_context_accepted_total 1") {
		t.Fatalf("metrics:\n%s", metrics)
	}
	if r, _ := http.Get(edge + "/?work_us=x"); r.StatusCode != 400 {
		t.Fatalf("bad work_us: %d", r.StatusCode)
	}
}
