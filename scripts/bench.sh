#!/usr/bin/env bash
# bench.sh is `make bench`: every benchmark docs/PERFORMANCE.md quotes, with
# the same commands, side by side where there is a peer to compare with.
# BENCH_QUICK=1 runs each once (fewer iterations) for a smoke check.
# `bench.sh scale` (make bench-scale) runs only the scale set: 1,000 to
# 10,000 partitions, slow (minutes per cluster); plain `bench.sh` runs it
# last.
set -euo pipefail
cd "$(dirname "$0")/.."
export ISRLAB_BIN=${ISRLAB_BIN:-$PWD/bin/isrlab}
count=3
[ "${BENCH_QUICK:-}" = 1 ] && count=1
run() { echo; echo "\$ $*"; "$@"; }

scale() {
  echo "# scale: controller work at 1,000 and 10,000 partitions (fake brokers), Metadata, then 3-process clusters"
  uptime
  run go test ./broker/controller -run '^$' -bench ScaleFailover -benchtime 3x -count "$((count + 2))"
  run go test ./broker -run '^$' -bench '^BenchmarkMetadata$' -benchtime 2s -count "$count"
  run go test ./broker -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -count "$count" -timeout 120m
  uptime
}
if [ "${1:-}" = scale ]; then
  scale
  exit 0
fi

echo "# broker vs franz-go kfake (1 KiB random records, acks=1, 8 partitions)"
run go test ./broker -run '^$' -bench 'Produce|Consume' -benchtime 200000x -count "$count"
echo "# replication: RF 3 acks=all on 3 brokers vs RF 1 on 1 broker"
run go test ./broker -run '^$' -bench Replication -benchtime 100000x -count "$count"
echo "# leader and controller failover after SIGKILL"
run go test ./broker -run '^$' -bench 'LeaderFailover|ControllerFailover' -benchtime 1x -timeout 20m
echo "# log storage"
run go test ./broker/log -run '^$' -bench . -benchtime 2s -count "$count"
echo "# coordinator"
run go test ./broker/coord -run '^$' -bench CAS -benchtime 2s -count 2
run go test ./broker/coord -run '^$' -bench Leader -benchtime 10x
echo "# controller"
run go test ./broker/controller -run '^$' -bench 'ControllerFailover|BrokerFailover' -benchtime 20x -count 1
echo "# the rate workload: rate control on one broker, highest sustained rate into three"
run go test ./workloads -run '^$' -bench RateHeld -benchtime 1x
run go test ./workloads -run '^$' -bench RateMax -benchtime 1x -timeout 20m
echo "# checkers: 10M-line history, every anomaly, then linearizability on 100k operations"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run "$ISRLAB_BIN" check gen --ops 10000000 --partitions 10 --seed 1 --anomaly-every 1000000 --faults --out "$tmp/h10m.jsonl"
run /usr/bin/time -f "%e s wall, %U user, %S sys, %M KB maxrss" "$ISRLAB_BIN" check --linearizable=off "$tmp/h10m.jsonl" || true
run "$ISRLAB_BIN" check gen --ops 200000 --partitions 10 --seed 1 --out "$tmp/h100k.jsonl"
run /usr/bin/time -f "%e s wall, %U user, %S sys, %M KB maxrss" "$ISRLAB_BIN" check --linearizable=on "$tmp/h100k.jsonl" || true
echo "# cluster composition (root)"
run go test ./compose/netns ./compose/docker -run '^$' -bench UpDown -benchtime 5x || true
echo "# faults over SSH (root, sshd: openssh-server)"
run go test ./nemesis -run '^$' -bench SSHInjectHeal -benchtime 20x -count 2 || true
echo "# faultfs vs plain disk (root, /dev/fuse)"
run go test ./faultfs -run '^$' -bench 'Append|FsyncHeavy' -benchtime 1s -count "$count" || true
scale
