#!/usr/bin/env bash
# deps.sh installs, idempotently, what isrlab needs on a Debian or Ubuntu
# machine for what is being run: Debian packages (when missing), the Go
# modules, and a running Docker daemon. Give the groups the command needs;
# without any it installs everything the tests need (make test, make deps).
#
#   core     isrlab run/matrix/shrink on the embedded default (the netns
#            backend): util-linux (nsenter, setpriv: the rootless
#            re-exec), iproute2 (ip, tc: to look at a run's namespaces)
#   source   building isrlab from this checkout: the Go modules
#   docker   the Docker backend: docker.io, and dockerd started when root
#   ssh      the SSH backend's tests: openssh-server (the sshd they run in
#            each test host's namespace; the package's own service is not
#            started) and nftables (the nft command the backend runs on
#            its hosts); a user of the SSH backend needs neither here
#   clients  the workloads' script clients (client: librdkafka, client:
#            kafka-python; their drivers in workloads/clients/python run
#            with /usr/bin/python3): python3-confluent-kafka, python3-kafka;
#            and nodejs for client: kafkajs (whose kafkajs, not a Debian
#            package, comes from where NODE_PATH points)
#   compat   the client compatibility matrix (compat/): kcat, the clients
#            group's Python clients, node (kafkajs is not a Debian package:
#            its rows run where compat/js/node_modules has it, installed
#            by you, and skip otherwise)
#   ui       the web UI's browser test: chromium, where apt has it
#   bench    make bench: time (/usr/bin/time)
#   all      every group (the default)
#
#   scripts/deps.sh core source      # make run
#   scripts/deps.sh core             # a released binary on the netns backend
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(all)
want=()
for g in "${groups[@]}"; do
	case "$g" in
	all) want+=(core source docker ssh clients compat ui bench) ;;
	compat) want+=(compat clients) ;;
	core | source | docker | ssh | clients | ui | bench) want+=("$g") ;;
	*)
		echo "deps: no group $g (core, source, docker, ssh, clients, compat, ui, bench, all)" >&2
		exit 254
		;;
	esac
done
has() {
	local g
	for g in "${want[@]}"; do [ "$g" = "$1" ] && return 0; done
	return 1
}

pkgs=()
has core && pkgs+=(util-linux iproute2)
has docker && pkgs+=(docker.io)
has ssh && pkgs+=(openssh-server nftables)
has clients && pkgs+=(python3-confluent-kafka python3-kafka)
has compat && pkgs+=(kcat)
has bench && pkgs+=(time)
# chromium: headless, for the web UI's browser test (it skips without one).
# Optional: installed where apt has it (Debian), left out where it does not
# (Ubuntu ships it as a snap).
optional=()
has ui && optional+=(chromium)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${pkgs[@]}"; do
	installed "$p" || missing+=("$p")
done
# node for the kafkajs driver and compatibility rows: Debian's nodejs only
# where the command is missing.
if has compat || has clients; then
	command -v node >/dev/null 2>&1 || installed nodejs || missing+=(nodejs)
fi
missing_optional=()
for p in "${optional[@]}"; do
	installed "$p" || command -v "$p" >/dev/null 2>&1 || missing_optional+=("$p")
done

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 && SUDO=sudo
fi

if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
		echo "deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Packages with a service (openssh-server) must not start it: the
	# tests run their own daemons in namespaces. policy-rc.d exit 101
	# tells invoke-rc.d not to; an existing policy is left as it is.
	policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		policy=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
		$SUDO chmod 755 "$policy"
	fi
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	[ -z "$policy" ] || $SUDO rm -f "$policy"
fi

if [ ${#missing_optional[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
		echo "deps: not root, not installing ${missing_optional[*]} (the tests that need it skip)"
	else
		export DEBIAN_FRONTEND=noninteractive
		[ ${#missing[@]} -gt 0 ] || $SUDO apt-get update -qq
		for p in "${missing_optional[@]}"; do
			if apt-cache show "$p" >/dev/null 2>&1; then
				echo "deps: installing $p"
				$SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null
			else
				echo "deps: apt has no $p here; the tests that need it skip"
			fi
		done
	fi
fi

# A Docker daemon for the Docker backend; without one its tests skip.
if has docker && [ "$(id -u)" -eq 0 ] && command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
	echo "deps: starting dockerd"
	setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		sleep 0.5
	done
	docker info >/dev/null 2>&1 || echo "deps: dockerd did not start (see /var/log/dockerd.log); Docker tests will skip"
fi

# kafkajs for the compatibility matrix: isrlab installs only Debian
# packages and Go modules, and Debian has no kafkajs, so the kafkajs rows
# run only where compat/js/node_modules holds it (cd compat/js && npm ci,
# by hand) and skip otherwise, saying so.
if has compat && [ ! -d "$root/compat/js/node_modules/kafkajs" ]; then
	echo "deps: kafkajs is not in compat/js/node_modules (no Debian package; npm ci there by hand to run its rows); the kafkajs compatibility tests skip"
fi

if has source; then
	(cd "$root" && go mod download)
fi
