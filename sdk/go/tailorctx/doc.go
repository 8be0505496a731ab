// Package tailorctx is the Tailor request context on the wire, for Go services.
//
// It is byte-compatible with the Rust codec in tailor-core (core/src/wire):
// both pass the shared vectors in testdata/context/vectors.json. The format,
// its grammar and the reasons behind it are in docs/wire-format.md.
//
// One text value, e.g. "1.g1732272000123456789.d1732272000125456789.c0.k4.h2",
// rides in the "tailor-context" HTTP header or gRPC metadata entry, and as the
// "tailor" member of the W3C "baggage" header, so services that only forward
// OpenTelemetry baggage carry it too. The deadline also maps to "grpc-timeout".
//
// What a service does with an incoming request:
//
//	d, ok, err := tailorctx.Extract(r.Header.Values) // or md.Get for gRPC metadata
//	stats.Record(ok, err)
//	ctx := tailorctx.Stamped(now) // absent or rejected: serve it anyway, as if it arrived now
//	if ok && err == nil {
//		var c tailorctx.Clamped
//		ctx, c = tailorctx.Clamp(d.Context, now, maxAge)
//		stats.RecordClamp(c)
//	}
//	// Outgoing calls carry tailorctx.Encode(ctx.Child()).
//
// Times are nanoseconds (uint64) on the edge's clock; nothing here reads a clock.
package tailorctx
