#!/bin/bash
# ranks.sh - --all-ranks and --ranks=A-B; prints TAP.
#   - every rank's file of --all-ranks (the graph read and searched once, the
#     per-rank passes on a copy of it, in worker processes) is byte for byte
#     what `-n N --rank=R -o FILE` prints, over samples, device counts, the
#     training step, --forward-only and pipeline stages with micro-batches;
#   - --ranks=A-B (and --ranks=R) writes exactly ranks A to B, each file the
#     same as a full --all-ranks run's; two --ranks runs into one DIR equal
#     one --all-ranks run;
#   - a rank that fails stops the run: exit 1, no directory, no temporary;
#   - bad --ranks values are usage errors (exit 2) and write nothing (the
#     messages are goldens in testsuite/cli/usage-ranks-*).
#
#   SAPPC=path/to/sappc GEN=path/to/gen-transformer testsuite/ranks.sh
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
gen=${GEN:-$(dirname "$sappc")/testsuite/gen/gen-transformer}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-ranks.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
	[ -s "$tmp/err" ] && sed -e 's/^/# /' "$tmp/err" | head -20
}
check() {
	local d=$1
	shift
	if "$@"; then ok "$d"; else notok "$d"; fi
}

# same_as_rank DIR NAME ARGS...: every DIR/rank_R/NAME_validate_0000.ir is
# what `sappc ARGS --rank=R -o FILE` writes, and DIR holds no other rank
same_as_rank() {
	local dir=$1 name=$2 r f
	shift 2
	[ -d "$dir/rank_0" ] || return 1
	for f in "$dir"/rank_*; do
		r=${f##*/rank_}
		"$sappc" -q "$@" --rank="$r" -o "$tmp/one.ir" 2>"$tmp/err" || return 1
		cmp -s "$dir/rank_$r/${name}_validate_0000.ir" "$tmp/one.ir" || { echo "rank $r differs" >"$tmp/err"; return 1; }
	done
}

# the property: samples x device counts x pipeline configurations
samples="$top/ir-samples/sapp_mlp.ir $top/ir-samples/cnn.ir $top/ir-samples/llama_layer.ir"
if [ -x "$gen" ] && "$gen" -L 2 -o "$tmp/t2.ir" 2>/dev/null; then
	samples="$samples $tmp/t2.ir"
fi
for f in $samples; do
	name=$(basename "$f" .ir)
	for cfg in "-n 8" "-n 32 --forward-only" "-n 16 --pipeline-stages=2 --micro-batch-num=4" \
		"-n 4 --pipeline-stages=2 --micro-batch-num=2 --forward-only"; do
		rm -rf "$tmp/all"
		"$sappc" -q $cfg --all-ranks="$tmp/all" "$f" 2>"$tmp/err"
		rc=$?
		nr=$(ls "$tmp/all" 2>/dev/null | wc -l)
		check "$name $cfg: --all-ranks writes every rank" test "$rc" = 0 -a "$nr" = "$(echo "$cfg" | cut -d' ' -f2)"
		check "$name $cfg: every rank's file is what --rank=R -o prints" same_as_rank "$tmp/all" "$name" $cfg "$f"
	done
done

# --ranks: a part of the ranks, the same bytes as the full run's
mlp=$top/ir-samples/sapp_mlp.ir
cfg="-n 16 --pipeline-stages=2 --micro-batch-num=4"
"$sappc" -q $cfg --all-ranks="$tmp/full" "$mlp"
"$sappc" -q $cfg --all-ranks="$tmp/part" --ranks=5-12 "$mlp" 2>"$tmp/err"
rc=$?
check "--ranks=5-12: exit 0, exactly rank_5 to rank_12" \
	test "$rc" = 0 -a "$(ls "$tmp/part" | sort -t_ -k2n | tr '\n' ' ')" = \
	"rank_5 rank_6 rank_7 rank_8 rank_9 rank_10 rank_11 rank_12 "
same_part() {
	local f
	for f in "$tmp/part"/rank_*/*.ir; do
		cmp -s "$f" "$tmp/full/${f#$tmp/part/}" || { echo "$f differs" >"$tmp/err"; return 1; }
	done
}
check "--ranks=5-12: every file byte-identical to the full --all-ranks run's" same_part
rm -rf "$tmp/part"
"$sappc" -q $cfg --all-ranks="$tmp/part" --ranks=15 "$mlp" 2>"$tmp/err"
check "--ranks=15: only the last rank, the full run's bytes" eval \
	'test "$(ls "$tmp/part")" = rank_15 && cmp -s "$tmp/part/rank_15/sapp_mlp_validate_0000.ir" "$tmp/full/rank_15/sapp_mlp_validate_0000.ir"'
# two machines' halves (here: two runs into one DIR) merge into the full run
"$sappc" -q $cfg --all-ranks="$tmp/merged" --ranks=0-6 "$mlp" &&
	"$sappc" -q $cfg --all-ranks="$tmp/merged" --ranks=7-15 "$mlp"
check "--ranks=0-6 then --ranks=7-15 into one DIR: the same tree as one --all-ranks run" \
	diff -r "$tmp/merged" "$tmp/full"
check "--ranks into one DIR: no temporary directory left" test -z "$(ls -A "$tmp/merged" | grep -v '^rank_')"
# a graph warning is shown once by the first rank of the range
"$sappc" -n 8 --all-ranks="$tmp/w" --ranks=3-7 "$top/ir-samples/interfered_add.ir" 2>"$tmp/err"
check "--ranks=3-7: a warning of the graph once" test "$(grep -c 'carries a user strategy' "$tmp/err")" = 1

# a rank that cannot be lowered (stage 1 of 4 has no operators: ranks 4-7)
"$sappc" -n 16 --pipeline-stages=4 --micro-batch-num=4 --all-ranks="$tmp/bad" "$mlp" 2>"$tmp/err"
rc=$?
check "a failing rank: exit 1, its error shown, no directory" eval \
	'test "$rc" = 1 && grep -q "pipeline stage 1 has no operators" "$tmp/err" && test ! -e "$tmp/bad"'
check "a failing rank: no temporary directory left" test -z "$(ls "$tmp" | grep tmp)"

# bad values: exit 2 before anything is read or written
for v in 5-2 0-16 16 x 1-x -1 3- '' 1-2-3 99999999999; do
	"$sappc" -n 16 --all-ranks="$tmp/usage" --ranks="$v" "$mlp" >/dev/null 2>"$tmp/err"
	rc=$?
	check "--ranks='$v' with 16 devices: exit 2, nothing written" eval \
		'test "$rc" = 2 && grep -q -- "--ranks" "$tmp/err" && test ! -e "$tmp/usage"'
done
"$sappc" -n 16 --ranks=0-3 -o "$tmp/usage.ir" "$mlp" 2>"$tmp/err"
rc=$?
check "--ranks without --all-ranks: exit 2" eval 'test "$rc" = 2 && test ! -e "$tmp/usage.ir"'

echo "1..$n"
[ "$fails" = 0 ]
