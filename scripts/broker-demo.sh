#!/usr/bin/env bash
# broker-demo.sh is `make broker-demo`: it starts one standalone isrlab
# broker in a temporary directory, produces and consumes records with a real
# Kafka client (kcat), prints what happened and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/isrlab}
N=${N:-5000}

work=$(mktemp -d -t isrlab-run.XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 19092)
mport=$((port + 1))
addr=127.0.0.1:$port
echo "== starting isrlab broker on $addr (data in $work)"
"$BIN" broker --override "log.dirs=$work/data" --override "listeners=PLAINTEXT://$addr" \
	--override "metrics.listen=127.0.0.1:$mport" --override log.segment.bytes=1048576 \
	>"$work/broker.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
	if kcat -b "$addr" -L -m 1 >/dev/null 2>&1; then break; fi
	kill -0 "$pid" 2>/dev/null || { cat "$work/broker.log"; exit 1; }
	sleep 0.1
done

echo "== creating topic demo (4 partitions)"
"$BIN" topics create --bootstrap-server "$addr" --topic demo --partitions 4 2>/dev/null ||
	kcat -b "$addr" -L -t demo >/dev/null

echo "== producing $N records with kcat (librdkafka), acks=all"
seq 1 "$N" | awk '{print "k" $1 ":" $1}' | kcat -P -b "$addr" -t demo -K: -X acks=all -X linger.ms=5
echo "== consuming them back with kcat"
got=$(kcat -C -b "$addr" -t demo -o beginning -e -q | sort -u | wc -l)
echo "   distinct records read: $got of $N"

echo "== metadata"
kcat -b "$addr" -L -t demo | sed 's/^/   /'

echo "== segments on disk"
find "$work/data" -name '*.log' -printf '   %P %s bytes\n' | sort

echo "== broker metrics"
curl -s "http://127.0.0.1:$mport/metrics" 2>/dev/null | grep -E '^kafka_(server|network)_(BytesInPerSec|MessagesInPerSec|RequestHandlerAvgIdlePercent|NetworkProcessorAvgIdlePercent)' | sed 's/^/   /' || true

kill -TERM "$pid"
wait "$pid" || true
pid=
if [ "$got" -ne "$N" ]; then
	echo "FAIL: read $got of $N records"
	exit 1
fi
echo "OK: every record produced was read back"
