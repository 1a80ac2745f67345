#!/usr/bin/env bash
# overhead.sh measures what a run costs beyond its duration (wall time
# minus the workload's duration), for two isrlab binaries side by side:
# each scenario runs once with OLD, then once with NEW, ROUNDS times, so
# both see the same load. One line per run:
#
#   round scenario old|new wall-seconds duration-seconds load1
#
# Usage: scripts/overhead.sh OLD_BIN NEW_BIN [ROUNDS [SCENARIO...]]
# (an old binary: git worktree add /tmp/old REV && (cd /tmp/old && go build -o /tmp/isrlab-old ./cmd/isrlab))
set -euo pipefail
old=${1:?usage: overhead.sh OLD_BIN NEW_BIN [ROUNDS [SCENARIO...]]}
new=${2:?usage: overhead.sh OLD_BIN NEW_BIN [ROUNDS [SCENARIO...]]}
rounds=${3:-2}
shift $(($# < 3 ? $# : 3))
scenarios=("$@")
# The defaults by their old names, which binaries from before the library
# was renamed know too: follower-cut-from-leader, leader-kill,
# txn/leader-kill, consumer-crash/manual-commit, min-insync-replicas/refuses.
[ ${#scenarios[@]} -gt 0 ] || scenarios=(seed000/partition-1 leader-kill txn/leader-kill seed003/manual-commit seed000/min-isr-refuses)
results=$(mktemp -d /tmp/isrlab-overhead-XXXXXX)
trap 'rm -rf "$results"' EXIT
for round in $(seq 1 "$rounds"); do
	for sc in "${scenarios[@]}"; do
		for which in old new; do
			bin=$old
			[ "$which" = new ] && bin=$new
			start=$(date +%s.%N)
			"$bin" run "$sc" --results "$results/$which" >"$results/last.log" 2>&1 || true
			end=$(date +%s.%N)
			# "workload running for 30s with ..." (or 1m6s)
			dur=$(sed -nE 's/.*workload running for ([0-9hms.]+) .*/\1/p' "$results/last.log" | head -1)
			secs=$(python3 -c "import re,sys; d=sys.argv[1]; print(sum(float(v)*{'h':3600,'m':60,'s':1,'ms':0.001}[u] for v,u in re.findall(r'([\d.]+)(ms|h|m|s)', d)))" "$dur")
			echo "$round $sc $which $(echo "$end - $start" | bc) $secs $(cut -d' ' -f1 /proc/loadavg)"
		done
	done
done
