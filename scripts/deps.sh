#!/usr/bin/env bash
# deps.sh installs, idempotently, what isrlab's tests and runs need on a Debian
# machine: Debian packages (when missing), the Go modules, and a running
# Docker daemon for the Docker backend's tests (skipped where none can start).
set -euo pipefail

# kcat: a librdkafka client the tests use; docker.io: the Docker backend;
# time: /usr/bin/time for make bench; util-linux: nsenter/setpriv (rootless);
# openssh-server: the sshd the SSH backend's tests run in each test host's
# namespace (the package's own service is not started, see below);
# nftables: the nft command the SSH backend runs on its hosts;
# python3-confluent-kafka, python3-kafka: clients of the compatibility
# matrix (compat/), with kcat and kafkajs.
pkgs=(kcat docker.io time util-linux iproute2 openssh-server nftables
	python3-confluent-kafka python3-kafka)
pkgs+=("$@")
# chromium: headless, for the web UI's browser test (it skips without one).
# Optional: installed where apt has it (Debian), left out where it does not
# (Ubuntu ships it as a snap).
optional=(chromium)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${pkgs[@]}"; do
	installed "$p" || missing+=("$p")
done
# node and npm for kafkajs: Debian's nodejs and npm only where the command
# is missing (a Node.js installed otherwise brings its own npm, which
# Debian's npm package would conflict with).
for c in node:nodejs npm:npm; do
	command -v "${c%%:*}" >/dev/null 2>&1 || installed "${c#*:}" || missing+=("${c#*:}")
done
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

# A Docker daemon for the Docker backend's tests; without one they skip.
if [ "$(id -u)" -eq 0 ] && command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
	echo "deps: starting dockerd"
	setsid dockerd >/var/log/dockerd.log 2>&1 < /dev/null &
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		sleep 0.5
	done
	docker info >/dev/null 2>&1 || echo "deps: dockerd did not start (see /var/log/dockerd.log); Docker tests will skip"
fi

# kafkajs for the compatibility matrix: npm ci in compat/js when its
# node_modules is missing or older than the lock file. Without node or the
# npm registry the kafkajs row skips, saying what is missing.
js="$(dirname "$0")/../compat/js"
if command -v npm >/dev/null 2>&1; then
	if [ ! -f "$js/node_modules/.package-lock.json" ] || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
		echo "deps: npm ci in compat/js (kafkajs)"
		(cd "$js" && npm ci --no-audit --no-fund --loglevel=error) ||
			echo "deps: npm ci in compat/js failed; the kafkajs compatibility tests skip"
	fi
else
	echo "deps: no npm; the kafkajs compatibility tests skip"
fi

go mod download
