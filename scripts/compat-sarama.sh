#!/usr/bin/env bash
# compat-sarama.sh is `make compat-sarama`: IBM/sarama's own functional test
# suite (go test -tags functional) against a 5-broker isrlab cluster, in the
# suite's "existing environment" mode, laid out as its docker-compose.yml
# lays out Kafka: one coordinator (the ZooKeeper role), brokers 1-5, and
# toxiproxy proxies kafka1..kafka5 on 127.0.0.1:29091-29095 in front of the
# brokers, which advertise the proxy addresses. KAFKA_VERSION=3.7.0,
# default.replication.factor=2, offsets.topic.replication.factor=2.
#
# The suite stops and starts brokers with `docker compose stop|start
# kafka-N` even in that mode; a `docker` shim on PATH does it to the isrlab
# broker processes. Everything listens on loopback only and is removed on
# exit. Environment: SARAMA_VERSION (v1.61.1), TOXIPROXY_VERSION (v2.12.0),
# RUN (a go test -run filter), SARAMA_TIMEOUT (go test -timeout, 60m),
# KEEP=1 keeps the work directory (logs) after the run.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
self="$here/scripts/compat-sarama.sh"

# --- the docker shim: `docker compose [--profile p] stop|start kafka-N` ----
if [ "${1:-}" = docker-shim ]; then
	shift
	: "${SARAMA_WORK:?docker shim outside compat-sarama.sh}"
	verb= svc=
	for a in "$@"; do
		case "$a" in
		stop | start) verb=$a ;;
		kafka-[1-5]) svc=${a#kafka-} ;;
		esac
	done
	if [ -z "$verb" ] || [ -z "$svc" ]; then
		exit 0 # compose logs, down, rm, ...: nothing to do here
	fi
	exec "$self" broker "$verb" "$svc"
fi

# --- one broker: start or stop (also used by the shim) ---------------------
broker() { # broker start|stop N
	local verb=$1 n=$2 w=$SARAMA_WORK pidf="$SARAMA_WORK/b$2.pid"
	case "$verb" in
	start)
		if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then return 0; fi
		"$SARAMA_BIN" broker \
			--override "broker.id=$n" \
			--override "log.dirs=$w/b$n" \
			--override "listeners=PLAINTEXT://127.0.0.1:$((19090 + n))" \
			--override "advertised.listeners=PLAINTEXT://127.0.0.1:$((29090 + n))" \
			--override "metrics.listen=127.0.0.1:$((19190 + n))" \
			--override "coordinator.connect=http://127.0.0.1:$SARAMA_COORD_PORT" \
			--override "coordinator.session.timeout.ms=6000" \
			--override "default.replication.factor=2" \
			--override "offsets.topic.replication.factor=2" \
			--override "transaction.state.log.replication.factor=2" \
			--override "transaction.state.log.min.isr=1" \
			--override "auto.create.topics.enable=false" \
			--override "delete.topic.enable=true" \
			--override "group.initial.rebalance.delay.ms=0" \
			>>"$w/b$n.log" 2>&1 &
		echo $! >"$pidf"
		for _ in $(seq 1 200); do
			if (exec 3<>"/dev/tcp/127.0.0.1/$((19090 + n))") 2>/dev/null; then return 0; fi
			kill -0 "$(cat "$pidf")" 2>/dev/null || {
				tail -20 "$w/b$n.log" >&2
				return 1
			}
			sleep 0.1
		done
		echo "broker $n did not listen" >&2
		return 1
		;;
	stop)
		[ -f "$pidf" ] || return 0
		local pid
		pid=$(cat "$pidf")
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$pidf"
		;;
	esac
}

if [ "${1:-}" = broker ]; then
	broker "$2" "$3"
	exit $?
fi

# --- the run ---------------------------------------------------------------
SARAMA_VERSION=${SARAMA_VERSION:-v1.61.1}
TOXIPROXY_VERSION=${TOXIPROXY_VERSION:-v2.12.0}
GO=${GO:-go}
export SARAMA_BIN=${ISRLAB_BIN:-$here/bin/isrlab}
[ -x "$SARAMA_BIN" ] || { echo "build isrlab first: go build -o bin/isrlab ./cmd/isrlab" >&2; exit 2; }

SARAMA_WORK=$(mktemp -d -t isrlab-sarama.XXXXXX)
export SARAMA_WORK
export SARAMA_COORD_PORT=${SARAMA_COORD_PORT:-12379}
toxi_pid= coord_pid=
cleanup() {
	set +e
	for n in 1 2 3 4 5; do broker stop "$n"; done
	[ -n "$coord_pid" ] && kill -TERM "$coord_pid" 2>/dev/null && wait "$coord_pid" 2>/dev/null
	[ -n "$toxi_pid" ] && kill -TERM "$toxi_pid" 2>/dev/null && wait "$toxi_pid" 2>/dev/null
	if [ "${KEEP:-}" = 1 ]; then
		echo "== logs kept in $SARAMA_WORK"
	else
		rm -rf "$SARAMA_WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# toxiproxy-server from its Go module, pinned (cached by version).
cache=${XDG_CACHE_HOME:-$HOME/.cache}/isrlab
toxi=$cache/toxiproxy-server-$TOXIPROXY_VERSION
if [ ! -x "$toxi" ]; then
	echo "== building toxiproxy-server $TOXIPROXY_VERSION"
	mkdir -p "$cache" "$SARAMA_WORK/toxibuild"
	(cd "$SARAMA_WORK/toxibuild" && $GO mod init toxibuild >/dev/null 2>&1 &&
		GOFLAGS=-mod=mod $GO get "github.com/Shopify/toxiproxy/v2@$TOXIPROXY_VERSION" >/dev/null 2>&1 &&
		GOFLAGS=-mod=mod $GO build -o "$toxi" github.com/Shopify/toxiproxy/v2/cmd/server)
fi

# sarama's source (its functional tests and go.mod) from the module cache.
echo "== fetching sarama $SARAMA_VERSION"
src=$(cd "$SARAMA_WORK" && $GO mod download -json "github.com/IBM/sarama@$SARAMA_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "sarama $SARAMA_VERSION not found in the module cache" >&2; exit 2; }
cp -r "$src" "$SARAMA_WORK/sarama"
chmod -R u+w "$SARAMA_WORK/sarama"

echo "== coordinator on 127.0.0.1:$SARAMA_COORD_PORT, brokers on 127.0.0.1:19091-19095 (data in $SARAMA_WORK)"
"$SARAMA_BIN" coordinator --name c1 --data-dir "$SARAMA_WORK/c1" \
	--listen-client-urls "http://127.0.0.1:$SARAMA_COORD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$((SARAMA_COORD_PORT + 1))" \
	>"$SARAMA_WORK/c1.log" 2>&1 &
coord_pid=$!
for _ in $(seq 1 200); do
	grep -q . "$SARAMA_WORK/c1.log" 2>/dev/null && break
	sleep 0.1
done
for n in 1 2 3 4 5; do broker start "$n"; done

cat >"$SARAMA_WORK/toxiproxy.json" <<EOF
[
$(for n in 1 2 3 4 5; do
	sep=,
	[ "$n" = 5 ] && sep=
	echo "  {\"name\": \"kafka$n\", \"listen\": \"127.0.0.1:$((29090 + n))\", \"upstream\": \"127.0.0.1:$((19090 + n))\", \"enabled\": true}$sep"
done)
]
EOF
"$toxi" -host 127.0.0.1 -port 8474 -config "$SARAMA_WORK/toxiproxy.json" >"$SARAMA_WORK/toxiproxy.log" 2>&1 &
toxi_pid=$!
for _ in $(seq 1 100); do
	(exec 3<>/dev/tcp/127.0.0.1/8474) 2>/dev/null && break
	sleep 0.1
done

# Ready when a topic on all five brokers can be created through the
# proxies (a controller and five registered brokers); it is deleted again.
echo "== waiting for the cluster"
ready=
for _ in $(seq 1 60); do
	if "$SARAMA_BIN" topics create --bootstrap-server 127.0.0.1:29091 --timeout 5s --topic isrlab-ready \
		--partitions 1 --replication-factor 5 >/dev/null 2>&1 ||
		"$SARAMA_BIN" topics describe --bootstrap-server 127.0.0.1:29091 --timeout 5s --topic isrlab-ready >/dev/null 2>&1; then
		ready=1
		break
	fi
	sleep 1
done
[ -n "$ready" ] || { KEEP=1; echo "the cluster did not come up" >&2; exit 1; }
"$SARAMA_BIN" topics delete --bootstrap-server 127.0.0.1:29091 --topic isrlab-ready >/dev/null 2>&1 || true

mkdir -p "$SARAMA_WORK/bin"
printf '#!/bin/sh\nexec "%s" docker-shim "$@"\n' "$self" >"$SARAMA_WORK/bin/docker"
chmod +x "$SARAMA_WORK/bin/docker"

echo "== go test -tags functional (sarama $SARAMA_VERSION, KAFKA_VERSION=3.7.0)"
status=0
(cd "$SARAMA_WORK/sarama" &&
	PATH="$SARAMA_WORK/bin:$PATH" TOXIPROXY_ADDR=http://127.0.0.1:8474 KAFKA_VERSION=3.7.0 \
		$GO test -tags functional -count=1 -timeout "${SARAMA_TIMEOUT:-60m}" -v ${RUN:+-run "$RUN"} . ) \
	>"$SARAMA_WORK/suite.log" 2>&1 || status=$?

grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|PASS|FAIL|ok)' "$SARAMA_WORK/suite.log" | grep -v '^=== RUN' || true
pass=$(grep -cE '^\s*--- PASS' "$SARAMA_WORK/suite.log" || true)
fail=$(grep -cE '^\s*--- FAIL' "$SARAMA_WORK/suite.log" || true)
skip=$(grep -cE '^\s*--- SKIP' "$SARAMA_WORK/suite.log" || true)
top_pass=$(grep -cE '^--- PASS' "$SARAMA_WORK/suite.log" || true)
top_fail=$(grep -cE '^--- FAIL' "$SARAMA_WORK/suite.log" || true)
top_skip=$(grep -cE '^--- SKIP' "$SARAMA_WORK/suite.log" || true)
echo "== sarama $SARAMA_VERSION functional suite: tests $top_pass passed, $top_fail failed, $top_skip skipped (with subtests: $pass passed, $fail failed, $skip skipped); go test exit $status"
stalled=0
for n in 1 2 3 4 5; do
	v=$(curl -s "http://127.0.0.1:$((19190 + n))/metrics" 2>/dev/null | sed -n 's/^kafka_server_StalledFollowerPartitions \(.*\)$/\1/p')
	echo "   broker $n: kafka_server_StalledFollowerPartitions ${v:-unreachable}"
	case "$v" in '' | 0) ;; *) stalled=1 ;; esac
done
grep -h 'level=WARN.*\(not fetching\|idle longer\|in no replica fetcher\)' "$SARAMA_WORK"/b*.log | head -20 || true
if [ "$status" -ne 0 ]; then
	tail -50 "$SARAMA_WORK/suite.log"
	KEEP=1
	exit 1
fi
[ "$stalled" = 0 ] || { KEEP=1; echo "a broker reports stalled followers" >&2; exit 1; }
