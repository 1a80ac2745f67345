#!/usr/bin/env bash
# install-check.sh checks that `go install
# github.com/isrlab/isrlab/cmd/isrlab@VERSION` works for the committed tree
# (HEAD), as it will for a tag: it serves HEAD as module version VERSION
# (v0.0.1-installcheck unless given) from a file proxy, installs it into a
# temporary module cache (the dependencies from the local one, so no
# network), and checks that isrlab version reports VERSION. It fails on
# what go install refuses: replace or exclude directives, a module path
# that is not the import path, files the module zip leaves out.
#
#   scripts/install-check.sh [VERSION]      (make install-check)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
v=${1:-v0.0.1-installcheck}
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
at="$tmp/proxy/github.com/isrlab/isrlab/@v"
mkdir -p "$at"
git archive --format=zip --prefix="github.com/isrlab/isrlab@$v/" -o "$at/$v.zip" HEAD
git show HEAD:go.mod >"$at/$v.mod"
printf '{"Version":"%s","Time":"%s"}\n' "$v" "$(git show -s --format=%cI HEAD)" >"$at/$v.info"
echo "$v" >"$at/list"
cache=$($GO env GOMODCACHE)
GOMODCACHE="$tmp/modcache" GOPROXY="file://$tmp/proxy,file://$cache/cache/download" \
	GOSUMDB=off GOFLAGS='' GOBIN="$tmp/bin" $GO install "github.com/isrlab/isrlab/cmd/isrlab@$v"
out=$("$tmp/bin/isrlab" version)
echo "install-check: go install github.com/isrlab/isrlab/cmd/isrlab@$v: $out"
case "$out" in
"isrlab $v "*) ;;
*)
	echo "install-check: isrlab version does not report $v" >&2
	exit 1
	;;
esac
