#!/bin/bash
# threads.sh - TAP: --simulate gives the same bytes (report, diagnostics,
# exit status) whatever --simulate-threads, more threads than ranks or
# cores included (issue 18: the ranks of a round run on threads, see
# passes/simulate/exec.c).  Each case runs with 1, 2, 3 and 8 threads and
# every run is compared with the one-thread run; the cases are a training
# step, a pipeline with micro-batches (Send/Receive), a wrong plan (a
# mismatch), a fault in the backward (the ranks once raced on a name
# buffer there) and a deadlock (a Receive whose Send carries another tag).
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
sappc=${SAPPC:-$top/sappc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-simthreads.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

# same LABEL ENV ARGS...: ENV is "" or NAME=VALUE
same() {
	local label=$1 env=$2 t rc
	shift 2
	for t in 1 2 3 8; do
		# shellcheck disable=SC2086
		env $env "$sappc" --simulate-threads=$t "$@" >"$tmp/out$t" 2>"$tmp/err$t"
		echo $? >"$tmp/rc$t"
	done
	n=$((n + 1))
	for t in 2 3 8; do
		if ! cmp -s "$tmp/out1" "$tmp/out$t" || ! cmp -s "$tmp/err1" "$tmp/err$t" || ! cmp -s "$tmp/rc1" "$tmp/rc$t"; then
			fails=$((fails + 1))
			echo "not ok $n - $label: $t threads differ from 1"
			diff "$tmp/out1" "$tmp/out$t" | head -5 | sed 's/^/# /'
			diff "$tmp/err1" "$tmp/err$t" | head -5 | sed 's/^/# /'
			return
		fi
	done
	echo "ok $n - $label: exit $(cat "$tmp/rc1"), same bytes on 1, 2, 3 and 8 threads"
}

s=$top/ir-samples
same "sapp_mlp training step -n 8" "" -q -n 8 --simulate "$s/sapp_mlp.ir"
same "llama_small -n 4" "" -q -n 4 --simulate --forward-only "$top/testsuite/simulate/llama_small.ir"
same "hybrid_mlp 2 stages x 4 micro-batches" "" -q -n 8 --pipeline-stages=2 --micro-batch-num=4 \
	--enable-parallel-optimizer --optimizer=sgd --dataset-strategy=full_batch --pipeline-scheduler=gpipe --simulate "$s/hybrid_mlp.ir"
same "broken redistribution (a mismatch)" SAPPC_TEST_BREAK_REDIST=1 -q -n 4 --parallel-mode=semi_auto --simulate \
	--forward-only "$top/testsuite/simulate/broken_redist.ir"
same "dropped gradient mean (a fault in the backward)" SAPPC_TEST_DROP_GRAD_MEAN=1 -q -n 8 --gradients-mean --simulate \
	"$top/testsuite/simulate/train_drop_mean.ir"
same "wrong sr_tag (a deadlock)" SAPPC_TEST_BAD_SR_TAG=1 -q -n 8 --pipeline-stages=2 --micro-batch-num=4 \
	--enable-parallel-optimizer --optimizer=sgd --dataset-strategy=full_batch --simulate "$s/hybrid_mlp.ir"
echo "1..$n"
[ "$fails" = 0 ]
