module github.com/tailor-sched/tailor/sdk/go

go 1.22

require golang.org/x/sys v0.30.0
