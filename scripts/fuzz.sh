#!/usr/bin/env bash
# fuzz.sh runs every Fuzz target in the module for a short time each.
# A target fails the run when it finds a crasher (go test writes the input
# under testdata/fuzz). Go's fuzzer sometimes ends a healthy run with
# "context deadline exceeded" when -fuzztime expires mid-execution on a
# loaded machine (slow targets such as FuzzRecoveryCorruption, ~150
# executions/s, hit it most); such a run is retried, at most twice.
set -euo pipefail
t=${1:-10s}
status=0
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		for attempt in 1 2 3; do
			echo "fuzz: $pkg $f ($t)"
			out=$(mktemp)
			if go test -run='^$' -fuzz="^$f\$" -fuzztime="$t" "$pkg" 2>&1 | tee "$out"; then
				rm -f "$out"
				break
			fi
			if grep -q "Failing input written to" "$out" || ! grep -q "context deadline exceeded" "$out" || [ "$attempt" = 3 ]; then
				rm -f "$out"
				status=1
				break
			fi
			rm -f "$out"
			echo "fuzz: $f stopped on the fuzzer's own deadline without a failing input; retrying"
		done
	done
done
exit $status
