#!/usr/bin/env bash
# make test's go test: every package, with test/admission in two shards of its own. That package holds
# the attack-round regression tests on the real apiserver and takes longer than all the others together
# on 2 cores; its shards each start their own control plane and run beside the other packages, so that
# the suite ends when its longest shard does. Arguments are go test's flags. The shards' output follows
# the other packages'; the exit status is non-zero if any of the three failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# The shard split by test name, about half of the package's time each (measured with go test -json).
shard='^Test(Round(4|6|9|10)[A-Z]|Independent)'
admission=./test/admission/
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test "$@" -run "$shard" "$admission" >"$dir/a" 2>&1 &
a=$!
go test "$@" -skip "$shard" "$admission" >"$dir/b" 2>&1 &
b=$!
status=0
go test "$@" $(go list ./... | grep -vx "github.com/fencekit/fencekit/test/admission") || status=1
wait "$a" || status=1
echo "--- test/admission, shard ${shard}:"
cat "$dir/a"
wait "$b" || status=1
echo "--- test/admission, the other tests:"
cat "$dir/b"
exit "$status"
