#!/usr/bin/env bash
# image.sh builds the isrlab container image from a static binary, with no
# base image and no registry: a root filesystem of the binary, a passwd
# and group file, CA certificates where the host has them, and /tmp,
# imported as isrlab:VERSION (docker import), whose entrypoint is isrlab.
#
#   scripts/image.sh BINARY VERSION
#
# What each backend needs to run from the image (README, "Installing and
# releases"):
#   docker   the host's Docker socket, the host's PID namespace and
#            SYS_ADMIN, NET_ADMIN, SYS_PTRACE (the lab enters the nodes'
#            namespaces), results on a path that is the same inside and out
#   ssh      the cluster file and the private key mounted; no privileges
#   netns    not from a container: it creates namespaces, nftables tables
#            and FUSE mounts on the host (run the binary there)
set -euo pipefail
bin=${1:?usage: image.sh BINARY VERSION}
version=${2:?usage: image.sh BINARY VERSION}
command -v docker >/dev/null || { echo "image: no docker command (scripts/deps.sh docker)" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "image: no Docker daemon answers (scripts/deps.sh docker starts one as root)" >&2; exit 1; }
if ldd "$bin" >/dev/null 2>&1; then
	echo "image: $bin is dynamically linked; build it with CGO_ENABLED=0" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/results"
chmod 1777 "$root/tmp"
install -m 755 "$bin" "$root/usr/local/bin/isrlab"
printf 'root:x:0:0:root:/root:/usr/local/bin/isrlab\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
[ ! -f /etc/ssl/certs/ca-certificates.crt ] || cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
tar -C "$root" --owner=0 --group=0 -cf "$tmp/root.tar" .
ref="isrlab:${version#v}"
docker import \
	--change 'ENTRYPOINT ["/usr/local/bin/isrlab"]' \
	--change 'CMD ["--help"]' \
	--change 'WORKDIR /results' \
	--change "LABEL org.opencontainers.image.version=$version" \
	"$tmp/root.tar" "$ref" >/dev/null
echo "image: $ref ($(docker image inspect --format '{{.Size}}' "$ref") bytes)"
