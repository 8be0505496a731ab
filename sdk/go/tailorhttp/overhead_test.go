package tailorhttp

// What the middleware costs per request (docs/sdk.md, "Go"): the same handler
// served bare and behind the middleware (extract + clamp + gate, no
// contention), in process, so that the difference is the middleware's alone.
//
//	go test -run '^$' -bench Overhead -benchtime 2000000x -count 5 ./tailorhttp

import (
	"net/http"
	"testing"
	"time"

	"github.com/tailor-sched/tailor/sdk/go/gate"
	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// discard is a ResponseWriter that costs nothing, so only the handler chain is measured.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func benchOverhead(b *testing.B, h http.Handler, header http.Header) {
	req, _ := http.NewRequest("GET", "http://127.0.0.1/", nil)
	req.Header = header
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.ServeHTTP(w, req)
	}
}

var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

func benchHeaders(baggage bool) http.Header {
	c := tailorctx.Context{GAT: uint64(time.Now().UnixNano()), Deadline: tailorctx.Never, Class: 1, Fanout: 4, Hop: 2}
	if baggage {
		return http.Header{"Baggage": {"userId=alice,session=42,tailor=" + tailorctx.Encode(c) + ",region=eu"}}
	}
	return http.Header{"Tailor-Context": {tailorctx.Encode(c)}}
}

func gated() http.Handler {
	g, _ := gate.New(gate.Config{Policy: gate.ORF, C: 4})
	return New(Config{Gate: g}, benchHandler)
}

func BenchmarkOverheadBare(b *testing.B) { benchOverhead(b, benchHandler, benchHeaders(false)) }
func BenchmarkOverheadMiddlewareHeader(b *testing.B) {
	benchOverhead(b, gated(), benchHeaders(false))
}
func BenchmarkOverheadMiddlewareBaggage(b *testing.B) {
	benchOverhead(b, gated(), benchHeaders(true))
}
