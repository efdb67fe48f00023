// Package electorbench measures fencekit's elector side by side with client-go's leaderelection on the
// local control plane: graceful handover latency, crash failover, requests per minute by the leader and by
// each standby, and one process running 100 electors on 100 Leases. The numbers go into
// docs/benchmarks.md:
//
//	KUBEBUILDER_ASSETS="$(hack/control-plane.sh --path)" go test -run '^$' -bench . -benchtime 1x -timeout 30m ./test/bench/elector
//
// FENCEKIT_BENCH_WINDOW (default 60s) sets the request-rate windows and FENCEKIT_BENCH_ROUNDS (default 10)
// the handover rounds.
package electorbench
