#!/usr/bin/env bash
# action-run.sh is the run step of the isrlab GitHub Action (action.yml):
# it runs a matrix, a shard of one, merges downloaded shards, or runs a
# scenario once per seed, and writes the step's outputs: code (the exit
# status), dir (the matrix or last run directory), upload (what to upload,
# without the brokers' data directories), junit and artifact. Inputs come
# in the environment: MATRIX, SCENARIO, SEEDS, DURATION, SHARD, MERGE,
# RESULTS, ARTIFACT; SHARDS_DIR holds the downloaded shards when merging.
set -uo pipefail

output() { echo "$1=$2" >>"${GITHUB_OUTPUT:-/dev/stdout}"; }
fail() {
	echo "isrlab action: $*" >&2
	output code 254
	exit 0
}

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
isrlab=$(command -v isrlab) || fail "isrlab is not on PATH"
RESULTS=${RESULTS:-isrlab-results}
ARTIFACT=${ARTIFACT:-isrlab-results}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
SEEDS=${SEEDS:-}
read -r -a seeds <<<"${SEEDS//,/ }"
dur=()
[ -z "${DURATION:-}" ] || dur=(--duration "$DURATION")
owned() { [ -z "$SUDO" ] || sudo chown -R "$(id -u):$(id -g)" "$RESULTS" || true; }

# newest LINK under the results' matrices: the matrix just run.
newest() {
	local l
	# shellcheck disable=SC2012 # ls -t: newest first; the names are isrlab's
	l=$(ls -dt "$RESULTS"/matrices/*/"$1" 2>/dev/null | head -n 1)
	[ -z "$l" ] || readlink -f "$l"
}

code=0
artifact=$ARTIFACT
if [ "${MERGE:-false}" = true ]; then
	[ -z "${MATRIX:-}${SCENARIO:-}${SHARD:-}" ] || fail "merge: 'true' runs nothing: leave matrix, scenario and shard empty"
	shopt -s nullglob
	shards=("${SHARDS_DIR:?}"/*/)
	[ ${#shards[@]} -gt 0 ] || fail "merge: no shards downloaded (artifacts $ARTIFACT-shard-*)"
	"$isrlab" matrix merge "${shards[@]}" --partial --results "$RESULTS"
	code=$?
	dir=$(newest latest)
elif [ -n "${MATRIX:-}" ]; then
	[ -z "${SCENARIO:-}" ] || fail "give matrix or scenario, not both"
	args=(matrix "$MATRIX" --results "$RESULTS" "${dur[@]}")
	case ${#seeds[@]} in
	0) ;;
	1) args+=(--seed "${seeds[0]}") ;;
	*) fail "seeds: a matrix takes one seed for every cell (its seeds: axis is in its file), got ${seeds[*]}" ;;
	esac
	link=latest
	if [ -n "${SHARD:-}" ]; then
		args+=(--shard "$SHARD")
		link="latest-shard-${SHARD%%/*}-of-${SHARD#*/}"
		artifact="$ARTIFACT-shard-${SHARD%%/*}-of-${SHARD#*/}"
	fi
	$SUDO "$isrlab" "${args[@]}"
	code=$?
	owned
	dir=$(newest "$link")
elif [ -n "${SCENARIO:-}" ]; then
	[ -z "${SHARD:-}" ] || fail "shard: only a matrix has shards"
	[ ${#seeds[@]} -gt 0 ] || seeds=(0)
	mkdir -p "$RESULTS/junit"
	for s in "${seeds[@]}"; do
		$SUDO "$isrlab" run "$SCENARIO" --results "$RESULTS" --seed "$s" "${dur[@]}"
		c=$?
		owned
		# A matrix's order of severity: could not run, not met, undecided.
		case "$code:$c" in
		255:*) ;;
		*:255 | *:254) code=$c ;;
		1:*) ;;
		*:1) code=1 ;;
		0:*) code=$c ;;
		esac
		dir=$(readlink -f "$RESULTS/latest")
		[ -f "$dir/junit.xml" ] && cp "$dir/junit.xml" "$RESULTS/junit/run-$s-$(basename "$dir").xml"
	done
else
	fail "give a matrix or a scenario (or merge: 'true')"
fi

output code "$code"
output artifact "$artifact"
if [ -n "${dir:-}" ] && [ -d "$dir" ]; then
	output dir "$dir"
	# What to upload: the matrix directory (or every run) without the
	# brokers' data directories and symbolic links.
	up="${RUNNER_TEMP:-/tmp}/isrlab-upload/$artifact"
	rm -rf "$up" && mkdir -p "$up"
	if [ -n "${SCENARIO:-}" ]; then cp -a "$RESULTS/." "$up/"; else cp -a "$dir/." "$up/"; fi
	find "$up" -path '*/nodes/*' \( -name data -o -name disk-backing \) -type d -prune -exec rm -rf {} +
	find "$up" -type l -delete
	output upload "$up"
	if [ -n "${SCENARIO:-}" ]; then output junit "$up/junit"; else output junit "$up/junit.xml"; fi
fi
echo "isrlab exit status $code"
