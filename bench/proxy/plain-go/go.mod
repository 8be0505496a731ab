module tailor.dev/bench/proxy/plain-go

go 1.22
