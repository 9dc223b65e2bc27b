#!/bin/bash
# train.sh - TAP: the training step of every sample (passes/train/).
#   - every ir-samples/*.ir as a training step at 1, 2, 4, 8 and 16 devices
#     (with --interfered, with optimizer parallel, with each optimizer) passes
#     --verify-each, and every rank-0 graph holds a backward (Gradients/) and
#     one optimizer update per weight that has a gradient;
#   - the same run twice gives the same bytes (determinism);
#   - --forward-only prints exactly the graph the passes before autodiff
#     print (--stop-after=optshard);
#   - --all-ranks and --strategy-out work with the training step, and the
#     strategy file does not depend on it (the plan is the forward's).
set -u
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-train.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1))
	echo "not ok $n - $1"
	[ -f "$tmp/err" ] && head -5 "$tmp/err" | sed 's/^/# /'
}

# the number of optimizer updates and of weights that reach the loss
updates() { grep -cE '= (ApplyMomentum|SGD|Adam|PrimFunc_AdamWeightDecay|AdamWeightDecay)\(' "$1"; }

for f in "$top"/ir-samples/*.ir; do
	b=$(basename "$f")
	for N in 1 2 4 8 16; do
		for extra in "" "--enable-parallel-optimizer" "--optimizer=sgd" "--optimizer=adam --gradients-mean" \
			"--optimizer=adamw --enable-parallel-optimizer --optimizer-weight-shard-size=2" "--interfered"; do
			# the interfered sample's strategies need 8 devices
			[ "$extra" = "--interfered" ] && [ "$b" = interfered_add.ir ] && [ "$N" -lt 8 ] && continue
			label="$b -n $N $extra"
			if "$sappc" -q -n "$N" $extra --verify-each "$f" >"$tmp/a" 2>"$tmp/err" &&
				"$sappc" -q -n "$N" $extra "$f" >"$tmp/b" 2>/dev/null && cmp -s "$tmp/a" "$tmp/b" &&
				grep -q 'Fullname with scope: (Gradients/' "$tmp/a" &&
				[ "$(updates "$tmp/a")" -ge 1 ]; then
				ok "$label: verifies, deterministic, backward and updates"
			else
				notok "$label"
			fi
		done
	done
	if "$sappc" -q -n 8 --forward-only "$f" >"$tmp/fwd" 2>"$tmp/err" &&
		"$sappc" -q -n 8 --stop-after=optshard "$f" >"$tmp/stop" 2>>"$tmp/err" && cmp -s "$tmp/fwd" "$tmp/stop"; then
		ok "$b: --forward-only is the graph before autodiff"
	else
		notok "$b: --forward-only is the graph before autodiff"
	fi
	rm -rf "$tmp/ranks"
	if "$sappc" -q -n 8 --all-ranks "$tmp/ranks" --strategy-out "$tmp/plan.json" "$f" >/dev/null 2>"$tmp/err" &&
		"$sappc" -q -n 8 --forward-only --strategy-out "$tmp/plan-fwd.json" "$f" >/dev/null 2>>"$tmp/err" &&
		cmp -s "$tmp/plan.json" "$tmp/plan-fwd.json" &&
		[ "$(ls "$tmp/ranks" | wc -l)" = 8 ] &&
		grep -q 'optimizer-' "$tmp/ranks"/rank_7/*_validate_0000.ir; then
		ok "$b: --all-ranks writes training steps, --strategy-out the forward's plan"
	else
		notok "$b: --all-ranks / --strategy-out with the training step"
	fi
done

# the sapp_mlp numbers of the issue: 8 devices, rank 0
out="$tmp/mlp"
"$sappc" -n 8 "$top/ir-samples/sapp_mlp.ir" >"$out" 2>/dev/null
check() { if eval "$2"; then ok "$1"; else notok "$1"; fi; }
check "sapp_mlp -n 8: layer1.weight's gradient AllReduce over 0-2-4-6" \
	'grep -E "ApplyMomentum\(%para3_layer1.weight" "$out" | grep -q . &&
	 grep -E "grad_mirror_MirrorOperator.*group: \"4-5226697808808137312\".*group_rank_ids: \(0, 2, 4, 6\)" "$out" | grep -q .'
check "sapp_mlp -n 8: layer1.bias's gradient AllReduce over the world group" \
	'grep -E "grad_mirror_MirrorOperator.*group: \"hccl_world_group\"" "$out" | grep -q .'
check "sapp_mlp -n 8: the bprop of the forward AllReduce after the first MatMul" \
	'grep -q "instance name: gradforward_op_15773666391001111732" "$out"'
check "sapp_mlp -n 8: Momentum updates with moments.* states" \
	'[ "$(grep -c "= ApplyMomentum(%para[0-9]*_[a-z0-9.]*, %para[0-9]*_moments\." "$out")" = 6 ]'
check "sapp_mlp -n 8: returns Depend(loss, the last UpdateState)" \
	'grep -B3 "^  Return" "$out" | grep -q "= Depend("'

echo "1..$n"
[ "$fails" = 0 ]
