#!/usr/bin/env bash
# hygiene.sh fails when go.mod/go.sum are not what `go mod tidy` writes, when
# a Go file is not gofmt'd, when go vet complains, when lab depends on a
# broker package, when compose depends on nemesis, or when *Broker has 90
# methods or more. make test runs it before the tests, so CI fails on each.
# Every check runs; each failure says how to fix it, and the exit status is 1
# when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
status=0

if ! out=$($GO mod tidy -diff 2>&1); then
	echo "hygiene: go.mod/go.sum are not tidy; run 'go mod tidy' and commit the result:" >&2
	echo "$out" >&2
	status=1
fi

# go install github.com/isrlab/isrlab/cmd/isrlab@VERSION refuses a module
# whose go.mod has replace or exclude directives.
if grep -nE '^[[:space:]]*(replace|exclude)([[:space:](]|$)' go.mod >&2; then
	echo "hygiene: go.mod has replace or exclude directives (above); go install ...@VERSION would refuse the module" >&2
	status=1
fi

# gofmt -l lists the files whose formatting differs; it exits 0 either way.
if ! out=$(gofmt -l . 2>&1); then
	echo "hygiene: gofmt failed:" >&2
	echo "$out" >&2
	status=1
elif [ -n "$out" ]; then
	echo "hygiene: these files are not gofmt'd; run 'gofmt -w' on them:" >&2
	echo "$out" | sed 's/^/  /' >&2
	status=1
fi

if ! $GO vet ./...; then
	echo "hygiene: go vet failed (above)" >&2
	status=1
fi

# lab plays scenarios against any cluster through the side channel and
# kafkaconfig; importing a broker package would pull the broker (and the
# embedded etcd server) into lab.
if ! out=$($GO list -deps ./lab 2>&1); then
	echo "hygiene: go list -deps ./lab failed:" >&2
	echo "$out" >&2
	status=1
elif bad=$(echo "$out" | grep '^github.com/isrlab/isrlab/broker'); then
	echo "hygiene: lab imports broker packages; use kafkaconfig or clusterapi instead:" >&2
	echo "$bad" | sed 's/^/  /' >&2
	status=1
fi

# compose sits below the fault layer: backends take what they need from
# nemesis as functions passed in by lab and cmd (backends.FaultCleaner).
if ! out=$($GO list -deps ./compose/... 2>&1); then
	echo "hygiene: go list -deps ./compose/... failed:" >&2
	echo "$out" >&2
	status=1
elif bad=$(echo "$out" | grep '^github.com/isrlab/isrlab/nemesis'); then
	echo "hygiene: compose imports the fault layer; pass what it needs in from lab or cmd:" >&2
	echo "$bad" | sed 's/^/  /' >&2
	status=1
fi

# The broker's root package stays a composition root: replication lives in
# broker/replication, and coherent API groups are small types of their own.
maxBrokerMethods=89
n=$(cat broker/*.go | grep -cE '^func \(\w+ \*Broker\)')
if [ "$n" -gt "$maxBrokerMethods" ]; then
	echo "hygiene: *Broker has $n methods (at most $maxBrokerMethods); move a coherent group behind a small type of its own" >&2
	status=1
fi
if f=$(grep -lE '^type (fetcher|fetchers|Fetchers) ' broker/*.go); then
	echo "hygiene: the replica fetcher belongs in broker/replication, not in $f" >&2
	status=1
fi

[ "$status" -eq 0 ] && echo "hygiene: go.mod tidy and installable, gofmt clean, go vet clean, lab imports no broker package, compose no nemesis, *Broker has $n methods"
exit "$status"
