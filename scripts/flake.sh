#!/usr/bin/env bash
# flake.sh runs the test suite N times and lists every test that failed in
# any run, with its package and in how many runs it failed. Each run's
# output is kept in flake/run-K.log (go test -v's text) and run-K.json
# (go test -json). make flake sets the variables:
#
#   N=5              runs
#   HOG=1            two busy loops beside every run, or HOG=3,5 beside runs 3 and 5 only
#   TESTFLAGS=...    make test's go test flags
#   ISRLAB_BIN=...   the binary make build wrote, as for make test
#
# Exit status: 0 when every run passed, 1 when any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${N:-5}
HOG=${HOG:-}
read -r -a flags <<<"${TESTFLAGS:--count=1 -timeout 18m}"
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
dir=flake

mkdir -p "$dir"
rm -f "$dir"/run-*.json "$dir"/run-*.log "$dir"/run-*.status
report="$dir/flakereport"
$GO build -o "$report" ./scripts/flakereport

# Job control: the hogs and each go test run are process groups of their
# own, so the traps below (which bash runs while it waits) can stop them at
# once, whatever signal ends the script.
set -m
hogs=()
tests=
stop() {
	[ -z "$tests" ] || kill -INT -- "-$tests" 2>/dev/null || true
	[ ${#hogs[@]} -gt 0 ] || return 0
	for pid in "${hogs[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
	wait "${hogs[@]}" 2>/dev/null || true
	hogs=()
}
trap stop EXIT
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM

hogged() { # hogged K: whether run K runs beside the hog
	case "$HOG" in
	"" | 0) return 1 ;;
	1) return 0 ;;
	*) [[ ",$HOG," == *",$1,"* ]] ;;
	esac
}

echo "flake: $N runs of ISRLAB_BIN=${ISRLAB_BIN:-} $GO test ${flags[*]} ${pkgs[*]}; output in $dir/"
runs=()
for k in $(seq 1 "$N"); do
	note=
	if hogged "$k"; then
		for _ in 1 2; do
			(while :; do :; done) &
			hogs+=($!)
		done
		note=" beside a CPU hog (pids ${hogs[*]})"
	fi
	echo "flake: run $k/$N$note"
	start=$SECONDS
	status="$dir/run-$k.status"
	rm -f "$status"
	{
		st=0
		$GO test -json "${flags[@]}" "${pkgs[@]}" || st=$?
		echo "$st" >"$status"
	} 2>&1 | "$report" record "$dir/run-$k" &
	tests=$(jobs -p %+)
	rec=0
	wait $! || rec=$?
	tests=
	stop
	[ "$rec" -eq 0 ] || { echo "flake: recording run $k failed" >&2; exit 255; }
	st=$(cat "$status" 2>/dev/null || echo "unknown")
	result=ok
	[ "$st" = 0 ] || result="FAIL (go test exit $st)"
	echo "flake: run $k/$N: $result in $((SECONDS - start))s$note"
	runs+=("$dir/run-$k.json")
done
"$report" summary "${runs[@]}"
