#!/bin/bash
# randgraph.sh - random graphs through the whole pipeline, forward and
# training step, checked by numbers; prints TAP.
#
# For each seed, testsuite/gen/randgraph writes a random forward graph
# (MatMul, BatchMatMul, broadcasting element-wise operators, unary
# operators, Reshape, Transpose, reductions, Softmax, Split, MakeTuple +
# Concat/AddN, shared values and residuals; see randgraph.c), which must
# verify.  Then sappc lowers and simulates it (--forward-only --simulate
# --verify-each) with the search's own plan and with random valid
# strategies (randstrat) for 2, 4 and 8 devices, with the search around
# them (--interfered), and on two pipeline stages.  The seed's graph with a
# loss (randgraph SEED N loss: the sum of its outputs) goes through the same
# plans as a training step (no --forward-only: backward, gradient
# communication, the optimizer; gradients and update checked against the
# single device, the single device by central differences), with the
# Adam optimizer parallel, recomputed, with --gradients-mean and AdamW, and
# on two stages of two micro-batches (where a graph that mixes the rows of a
# batch may also end with "not the full batch's step", after the ranks
# agreed with the micro-batched single device).  Every run must either pass (exit 0,
# "simulate: ok") or refuse the input cleanly (exit 1, a
# "file:line:col: error:" diagnostic, no internal error, no sanitizer
# report); anything else fails with the seed and the command.
#
# More seeds (not in CI): RANDGRAPH_SEEDS="$(seq 100 600)" bash randgraph.sh
# (RANDGRAPH_OPS sets the operators per graph, default 16).  Failing inputs
# are kept in RANDGRAPH_KEEP (a directory) when it is set.
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
sappc=${SAPPC:-$top/sappc}
bld=$(dirname "$sappc")
rg=${RANDGRAPH:-$bld/testsuite/gen/randgraph}
rs=${RANDSTRAT:-$bld/testsuite/lower/randstrat}
seeds=${RANDGRAPH_SEEDS:-$(seq 1 40)}
nops=${RANDGRAPH_OPS:-16}
keep=${RANDGRAPH_KEEP:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-randgraph.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
refused=0
mixing=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
	[ -f "$tmp/out" ] && grep -v '^#' "$tmp/out" | sed -e 's/^/# /' | head -12
	if [ -n "$keep" ]; then
		mkdir -p "$keep" && cp "$2" "$keep/fail-$n.ir"
		echo "# kept as $keep/fail-$n.ir"
	fi
}

# check LABEL INPUT N [FLAGS...]: one simulated run (of the forward graph
# unless $step is set), judged
step=
check() {
	local label=$1 input=$2 N=$3 code
	shift 3
	local fwd=--forward-only
	[ -n "$step" ] && fwd=
	local cmd="sappc -n $N $fwd --simulate --verify-each $* $input"
	"$sappc" -n "$N" $fwd --simulate --verify-each "$@" "$input" -o /dev/null >"$tmp/out" 2>&1
	code=$?
	if grep -qiE 'internal error|sanitizer|runtime error|leak|assert' "$tmp/out"; then
		notok "$label: $cmd: exit $code, internal error or sanitizer report" "$input"
	elif [ "$code" = 0 ] && grep -q '^simulate: ok' "$tmp/out"; then
		ok "$label: N=$N $*"
	elif [ "$code" = 1 ] && grep -q "^sappc: error: simulate: the step over [0-9]* micro-batches is not the full batch's" "$tmp/out"; then
		# the ranks computed the micro-batched step exactly (checked
		# before); the graph itself mixes the rows of a batch (a Softmax
		# or a reduction over them, a product that contracts them), so
		# micro-batching changes its step
		mixing=$((mixing + 1))
		ok "$label: N=$N $* (the graph mixes the batch's rows: micro-batches change its step)"
	elif [ "$code" = 1 ] && grep -qE '^[^ ]+:[0-9]+:[0-9]+: error: ' "$tmp/out"; then
		refused=$((refused + 1))
		ok "$label: N=$N $* (refused: $(grep -m1 -oE 'error: .{0,70}' "$tmp/out"))"
	else
		notok "$label: $cmd: exit $code, not a pass nor a clean refusal" "$input"
	fi
}

# one seed's graph (randgraph SEED NOPS [loss]) through every kind of plan
plans() { # SEED LABEL GRAPH
	local seed=$1 l=$2 g=$3 N s
	check "$l search" "$g" 8
	for N in 2 4 8; do
		s="$tmp/s$seed-$N.ir"
		if ! "$rs" "$N" "$((seed * 8 + N))" "$g" >"$s" 2>"$tmp/out"; then
			notok "$l: randstrat $N $((seed * 8 + N)) failed" "$g"
			continue
		fi
		check "$l randstrat $N $((seed * 8 + N))" "$s" "$N" --parallel-mode=semi_auto
	done
	check "$l randstrat 8 $((seed * 8 + 8))" "$tmp/s$seed-8.ir" 8 --interfered
	# two pipeline stages of 2 devices: the search's plan, cut where the
	# pipeline pass puts the stage boundary
	check "$l pipeline" "$g" 4 --pipeline-stages=2
}

for seed in $seeds; do
	for kind in forward loss; do
		g="$tmp/g$seed.ir"
		rm -f "$tmp/out"
		step=
		[ "$kind" = loss ] && step=1
		if ! "$rg" "$seed" "$nops" ${step:+loss} >"$g" 2>"$tmp/out" ||
			! "$sappc" --passes=verify "$g" >/dev/null 2>"$tmp/out"; then
			notok "seed $seed: randgraph $seed $nops ${step:+loss} does not write a valid graph" "$g"
			continue
		fi
		if [ -z "$step" ]; then
			plans "$seed" "seed $seed" "$g"
		else
			# the training step: backward, gradient communication, the
			# optimizer (parallel too), checked against the single device
			# and by central differences
			plans "$seed" "seed $seed step" "$g"
			check "seed $seed step optimizer parallel" "$g" 8 --enable-parallel-optimizer --optimizer=adam
			# every operator recomputed in the backward (the scope's cell is Default)
			check "seed $seed step recompute" "$g" 8 --recompute=Default
			check "seed $seed step gradients mean" "$g" 8 --gradients-mean --optimizer=adamw
			# two stages of two micro-batches: 1F1B, the losses' sum on the
			# last stage, gradient accumulation
			check "seed $seed step micro-batches" "$g" 4 --pipeline-stages=2 --micro-batch-num=2
		fi
	done
done
echo "# $refused runs refused their input cleanly; $mixing micro-batched steps differ from the full batch's (the graph mixes a batch's rows)"
echo "1..$n"
[ "$fails" = 0 ]
