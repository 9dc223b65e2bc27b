#!/bin/bash
# pipeline_property.sh - property test of micro-batched pipeline training
# (issue 15); prints TAP.
#
# For every sample that cell-path --stage rules can cut (sapp_mlp has no
# cells), on 8 devices with 2 and 4 stages, 1, 2, 4 and 8 micro-batches
# (at least as many as stages) and both schedulers:
#   - --simulate --verify-each passes: every rank agrees with the
#     micro-batched single device, and that step with the full batch's;
#   - the first rank of every stage prints its forwards and backwards in
#     the order of the schedule (1F1B: S - s forwards, then a backward and
#     a forward in turn, then the remaining backwards; GPipe: all forwards,
#     then all backwards), read from the micro labels of its operators;
#   - --all-ranks --verify-each, --strategy-out and --svg succeed.
# A micro-batch count that does not divide a batch is refused (exit 1).
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
sappc=${SAPPC:-$top/sappc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-pprop.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); echo "not ok $n - $1"
	[ -f "$tmp/err" ] && sed -e 's/^/# /' "$tmp/err" | head -20
}

# sample stages rules...
rules() {
	cat <<'EOF'
cnn 2 --stage=_backbone.conv1=0 --stage=_backbone.conv2=1
cnn 4 --stage=_backbone.conv1=0 --stage=_backbone.bn1=1 --stage=_backbone.conv2=2 --stage=_backbone.fc=3
hybrid_mlp 2
hybrid_mlp 4 --stage=_backbone.layer1=0 --stage=_backbone.relu1=1 --stage=_backbone.layer2=2 --stage=_backbone.relu2=2 --stage=_backbone.layer3=3 --stage=_loss_fn=3
interfered_add 2 --stage=_backbone.dense1=0 --stage=_backbone.dense2=1
interfered_add 4 --stage=_backbone.dense1=0 --stage=_backbone.dense2=1 --stage=_backbone.dense3=2 --stage=_loss_fn=3
llama_fa_bnsd 2 --stage=model.tok_embeddings=0 --stage=layers.0.feed_forward=1
llama_fa_bnsd 4 --stage=model.tok_embeddings=0 --stage=layers.0.attention=1 --stage=layers.0.feed_forward=2 --stage=lm_head=3
llama_fa_bsh 2 --stage=model.tok_embeddings=0 --stage=layers.0.feed_forward=1
llama_fa_bsh 4 --stage=model.tok_embeddings=0 --stage=layers.0.attention=1 --stage=layers.0.feed_forward=2 --stage=lm_head=3
EOF
}

# expected S s M SCHED: the order of stage s
expected() {
	local S=$1 s=$2 M=$3 sch=$4 out=() i w
	if [ "$sch" = gpipe ]; then
		for ((i = 0; i < M; i++)); do out+=("F$i"); done
		for ((i = 0; i < M; i++)); do out+=("B$i"); done
	else
		w=$((S - s < M ? S - s : M))
		for ((i = 0; i < w; i++)); do out+=("F$i"); done
		for ((i = w; i < M; i++)); do out+=("B$((i - w))" "F$i"); done
		for ((i = M - w; i < M; i++)); do out+=("B$i"); done
	fi
	echo "${out[*]}"
}

# the order a printed rank runs its micro-batches in: the micro label and
# phase (a backward node names its forward node) of every operator but
# the Sends, the Receives and the recomputed duplicates (they run inside
# the backward), runs merged
printed() {
	awk '/^  %/ && !/= (Send|Receive)\(/ && !/duplicated: Bool\(1\)/ && match($0, /micro: I64\([0-9]+\)/) {
		m = substr($0, RSTART + 11, RLENGTH - 12)
		s = (index($0, "forward_node_name") ? "B" : "F") m
		if (s != last) { printf "%s%s", (k++ ? " " : ""), s; last = s }
	} END { print "" }' "$1"
}

while read -r s S r; do
	f=$top/ir-samples/$s.ir
	for K in 1 2 4 8; do
		[ "$K" -gt 1 ] && [ "$K" -lt "$S" ] && continue
		for sch in 1f1b gpipe; do
			[ "$K" = 1 ] && [ "$sch" = gpipe ] && continue
			# shellcheck disable=SC2086
			set -- -q -n 8 --pipeline-stages="$S" --micro-batch-num="$K" --pipeline-scheduler="$sch" $r
			what="$s S=$S K=$K $sch"
			if "$sappc" "$@" --verify-each --simulate "$f" -o /dev/null >"$tmp/out" 2>"$tmp/err" &&
				grep -q '^simulate: ok$' "$tmp/out"; then
				ok "$what: --simulate --verify-each"
			else
				notok "$what: --simulate --verify-each"
			fi
			[ "$K" = 1 ] && continue
			bad=
			for ((st = 0; st < S; st++)); do
				if ! "$sappc" "$@" --rank=$((st * 8 / S)) "$f" -o "$tmp/r.ir" 2>"$tmp/err"; then
					bad="stage $st: sappc failed"
					break
				fi
				got=$(printed "$tmp/r.ir") want=$(expected "$S" "$st" "$K" "$sch")
				if [ "$got" != "$want" ]; then
					bad="stage $st runs '$got', expected '$want'"
					break
				fi
			done
			if [ -z "$bad" ]; then
				ok "$what: every stage runs its micro-batches in the $sch order"
			else
				echo "$bad" >"$tmp/err"
				notok "$what: every stage runs its micro-batches in the $sch order"
			fi
			[ "$K" = 4 ] || continue
			rm -rf "$tmp/all"
			if "$sappc" "$@" --verify-each --all-ranks="$tmp/all" "$f" 2>"$tmp/err" &&
				[ "$(ls "$tmp/all" | wc -l)" = 8 ] &&
				"$sappc" "$@" --rank=7 --strategy-out="$tmp/s.json" --svg="$tmp/r.svg" "$f" -o /dev/null 2>"$tmp/err" &&
				[ -s "$tmp/s.json" ] && grep -q '</svg>' "$tmp/r.svg"; then
				ok "$what: --all-ranks --verify-each, --strategy-out and --svg"
			else
				notok "$what: --all-ranks --verify-each, --strategy-out and --svg"
			fi
		done
	done
	# a micro-batch count that divides no batch: refused
	"$sappc" -q -n 8 --pipeline-stages="$S" --micro-batch-num=7 $r "$f" -o "$tmp/x.ir" 2>"$tmp/err"
	rc=$?
	if [ "$rc" = 1 ] && grep -q 'does not divide its batch dimension' "$tmp/err" && [ ! -e "$tmp/x.ir" ]; then
		ok "$s S=$S: --micro-batch-num=7 is refused"
	else
		notok "$s S=$S: --micro-batch-num=7 is refused (exit $rc)"
	fi
done < <(rules)
echo "1..$n"
