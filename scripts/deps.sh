#!/usr/bin/env bash
# deps.sh installs, idempotently, what isrlab's tests and runs need on a Debian
# machine: Debian packages (when missing) and the Go modules.
set -euo pipefail

pkgs=(kcat)
# Extra packages may be requested by the caller: scripts/deps.sh fuse3 ...
pkgs+=("$@")

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
			echo "deps: need root to install: ${missing[*]}" >&2
			exit 1
		fi
	else
		SUDO=
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

go mod download
