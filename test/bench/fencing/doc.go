// Package fencing holds the benchmarks behind the "Fencing" section of docs/benchmarks.md: fenced write
// latency and throughput with the CRD's rule only (operator stopped and running) and with the admission
// webhook, each as a ratio to the same user's ConfigMap write, what a FencedResource write's own cost is
// made of (BenchmarkWritePath), the duration of
// fence-on-acquire for 1, 10 and 100 bound FencedResources, and the operator's memory and status lag with
// 1,000 FencedResources bound to 100 Leases, and what fencekit costs the control plane from 1 to 1,000
// Leases and from 100 to 10,000 FencedResources (BenchmarkControlPlaneCost, `make bench-scale`). They run on a real control plane (envtest) and only with
// -bench; `go test ./...` runs nothing here and starts no control plane.
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 30m ./test/bench/fencing/
package fencing
