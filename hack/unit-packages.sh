#!/usr/bin/env bash
# Prints the module's packages whose tests are unit tests: packages with tests whose test build reaches
# none of the helpers that build or start something outside the test process, namely test/util/testenv,
# internal/dev/devcluster and controller-runtime's envtest (kube-apiserver, etcd, kube-controller-manager),
# test/util/pgtest (PostgreSQL) and model (spin). It reads the import graph (go list -test -deps), so a
# test that moves between tiers moves between lists with it. make test-unit runs these packages.
set -euo pipefail
cd "$(dirname "$0")/.."
module=$(go list -m)
go list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... | awk -v m="$module" '
	$1 !~ /\.test$/ { next }
	{
		for (i = 2; i <= NF; i++) {
			if ($i == m "/test/util/testenv" || $i == m "/internal/dev/devcluster" || $i == m "/test/util/pgtest" || $i == m "/model" ||
				$i == "sigs.k8s.io/controller-runtime/pkg/envtest") {
				next
			}
		}
		sub(/\.test$/, "", $1)
		print $1
	}'
