#!/usr/bin/env bash
# action-verdict.sh is the last step of the isrlab GitHub Action
# (action.yml): it fails the job on a regression. With BASELINE, a new
# failure against it (isrlab diff); without, any cell or run that did not
# meet its expectation, was undecided or could not run (with no baseline
# every failure is new). A shard decides nothing: the merge of the shards
# does. Inputs: CODE (the run's exit status), DIR, SHARD, BASELINE.
set -uo pipefail
output() { echo "$1=$2" >>"${GITHUB_OUTPUT:-/dev/stdout}"; }
code=${CODE:-255}
output regression false

if [ "$code" = 254 ]; then
	echo "isrlab action: bad arguments (above)" >&2
	exit 1
fi
if [ -n "${SHARD:-}" ]; then
	if [ -z "${DIR:-}" ]; then
		echo "isrlab action: shard $SHARD wrote no matrix directory (exit status $code)" >&2
		exit 1
	fi
	echo "shard $SHARD: exit status $code; the merge of the shards decides"
	exit 0
fi
if [ -n "${BASELINE:-}" ]; then
	if [ -z "${DIR:-}" ]; then
		echo "isrlab action: nothing to compare with $BASELINE (exit status $code)" >&2
		exit 1
	fi
	isrlab diff "$BASELINE" "$DIR" | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
	d=${PIPESTATUS[0]}
	case $d in
	0) exit 0 ;;
	1) output regression true ;;
	esac
	exit 1
fi
if [ "$code" != 0 ]; then
	output regression true
	echo "isrlab action: exit status $code: an expectation was not met, undecided, or a run could not run" >&2
	exit 1
fi
