#!/bin/bash
# train_property.sh - property test of the training step by numbers; prints TAP.
#
# Every ir-samples/ graph as a training step (backward, gradient
# communication, optimizer update), planned by the search for 1, 2, 4, 8
# and 16 devices, with and without --interfered, and with optimizer
# parallel: `sappc --simulate` must find that every rank computes its slice
# of the single-device forward values, of every weight's gradient and of
# every parameter the step writes, and that the single-device gradients are
# the central differences of the loss.  Each sample also runs with Adam and
# with --gradients-mean once.  --verify-each checks the IR after every
# pass of every rank.  A sample whose own strategies need more devices
# than N (interfered_add.ir with --interfered) is a skip, not a pass.
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
sappc=${SAPPC:-$top/sappc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-trainprop.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
	grep -E '^simulate: (first|output|gradients|after|central)' "$tmp/out" 2>/dev/null | sed -e 's/^/# /' | head -6
	grep -v '^   ' "$tmp/err" 2>/dev/null | sed -e 's/^/# /' | head -6
}

# run_case LABEL INPUT N [EXTRA FLAGS...]
run_case() {
	local label=$1 input=$2 N=$3
	shift 3
	if "$sappc" -q -n "$N" --verify-each "$@" --simulate "$input" >"$tmp/out" 2>"$tmp/err" &&
		grep -q '^simulate: ok$' "$tmp/out"; then
		if grep -q '^simulate: gradients: ' "$tmp/out" || [ "$N" = 1 ]; then
			ok "$label: N=$N $*"
		else
			notok "$label: N=$N $* (no gradient was compared: not a training step?)"
		fi
	elif grep -q 'uses [0-9]* devices, but there are only' "$tmp/err"; then
		ok "$label: N=$N $* # SKIP the sample's own strategies need more devices"
	else
		notok "$label: N=$N $*"
	fi
}

# llama_layer.ir is too large to simulate: its small variant stands in
for f in "$top"/ir-samples/*.ir "$top"/testsuite/simulate/llama_small.ir; do
	case $(basename "$f") in llama_layer.ir) continue ;; esac
	label=$(basename "$f")
	for N in 1 2 4 8 16; do
		run_case "$label" "$f" "$N"
		run_case "$label" "$f" "$N" --interfered
		[ "$N" -gt 1 ] && run_case "$label" "$f" "$N" --enable-parallel-optimizer
	done
	run_case "$label" "$f" 8 --interfered --enable-parallel-optimizer
	run_case "$label" "$f" 8 --optimizer=adam --gradients-mean
	run_case "$label" "$f" 8 --optimizer=sgd --enable-parallel-optimizer --gradients-mean
done
echo "1..$n"
[ "$fails" = 0 ]
