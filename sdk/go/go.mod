module github.com/tailor-sched/tailor/sdk/go

go 1.19
