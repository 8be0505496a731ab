module github.com/tailor-sched/tailor/sdk/go/tailorotel

go 1.26.0

require (
	github.com/tailor-sched/tailor/sdk/go v0.0.0
	go.opentelemetry.io/otel v1.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
)

// The core module lives one directory up in this repository.
replace github.com/tailor-sched/tailor/sdk/go => ../
