#!/bin/bash
# train.sh BUILDDIR - `make bench`, training-step section (issue 14): the
# cost of the whole training step (autodiff, gradient communication,
# optimizer update) against the forward-only pipeline on the same graph, in
# the same run.  Target: the training step takes at most 3x the time and 2x
# the peak memory of `--forward-only`.
#
# For each configuration "layers:devices" (TRAIN_BENCH_CONFIGS, default the
# 4096-layer generated transformer on 4096 devices) both pipelines run
# BENCH_RUNS times (default 3), alternating, each printing rank 0's graph to
# /dev/null; a time is the median of the runs, as wall and as CPU (user +
# system: on a shared VM the wall time also holds the waits for the host),
# and the ratio is taken on CPU time.  Peak RSS is the whole process's
# (GNU time %M), the largest over the runs.  Figures depend on the machine,
# so nothing here fails `make`; the last column says whether the targets hold.
set -u
build=${1:-.}
sappc=$build/sappc
gen=$build/testsuite/gen/gen-transformer
runs=${BENCH_RUNS:-3}
configs=${TRAIN_BENCH_CONFIGS:-"4096:4096"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-bench-train.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

echo
echo "== training step vs forward-only (issue 14 targets: time <= 3x, peak RSS <= 2x) =="
if ! "$sappc" --help | grep -q -- '--forward-only'; then
	echo "skipped: this sappc has no training step (no --forward-only option)"
	exit 0
fi
gtime=
for t in /usr/bin/time; do [ -x "$t" ] && "$t" -f %M true 2>/dev/null && gtime=$t; done

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# run OUT ARGS...: one run; appends "wall cpu rss_kb" to OUT
run() {
	local out=$1
	shift
	if [ -n "$gtime" ]; then
		"$gtime" -f '%e %U %S %M' -o "$tmp/t" "$sappc" "$@" -o /dev/null 2>"$tmp/err" ||
			{ echo "sappc $* failed:" >&2; cat "$tmp/err" >&2; return 1; }
		awk '{ printf "%s %.3f %s\n", $1, $2 + $3, $4 }' "$tmp/t" >>"$out"
	else # no GNU time: bash's times, the pass manager's peak RSS
		local TIMEFORMAT='%R %U %S'
		{ time "$sappc" "$@" --time-passes -o /dev/null 2>"$tmp/err"; } 2>"$tmp/t" ||
			{ echo "sappc $* failed:" >&2; cat "$tmp/err" >&2; return 1; }
		local rss
		rss=$(sed -n 's/.*peak RSS: \([0-9.]*\) MB.*/\1/p' "$tmp/err" | awk '{ printf "%d", $1 * 1024 }')
		awk -v r="$rss" '{ printf "%s %.3f %s\n", $1, $2 + $3, r }' "$tmp/t" >>"$out"
	fi
}

printf '%-7s %7s %-13s | %8s %8s | %8s\n' layers devices pipeline wall_s cpu_s RSS_MB
for c in $configs; do
	IFS=: read -r L N <<<"$c"
	f=$tmp/t$L.ir
	"$gen" -L "$L" -o "$f" || { echo "gen-transformer -L $L failed" >&2; exit 1; }
	: >"$tmp/fwd"
	: >"$tmp/train"
	for i in $(seq "$runs"); do
		run "$tmp/fwd" -q -n "$N" --forward-only "$f" || exit 1
		run "$tmp/train" -q -n "$N" "$f" || exit 1
	done
	for p in fwd train; do
		wall=$(awk '{ print $1 }' "$tmp/$p" | median)
		cpu=$(awk '{ print $2 }' "$tmp/$p" | median)
		rss=$(awk '{ print $3 }' "$tmp/$p" | sort -g | tail -1)
		eval "${p}_cpu=\$cpu ${p}_rss=\$rss"
		printf '%-7s %7s %-13s | %8.2f %8.2f | %8.1f\n' "$L" "$N" \
			"$([ $p = fwd ] && echo forward-only || echo training)" "$wall" "$cpu" "$(awk -v r="$rss" 'BEGIN { print r / 1024 }')"
	done
	# shellcheck disable=SC2154
	awk -v tc="$train_cpu" -v fc="$fwd_cpu" -v tr="$train_rss" -v fr="$fwd_rss" -v L="$L" -v N="$N" 'BEGIN {
		t = tc / fc; r = tr / fr
		printf "  ratio (%s layers, %s devices): time %.2fx (target <= 3x), peak RSS %.2fx (target <= 2x): %s\n",
			L, N, t, r, (t <= 3 && r <= 2) ? "within the targets" : "OVER a target"
	}'
done
