#!/bin/bash
# bench.sh BUILDDIR - `make bench`: speed and memory of sappc on generated
# transformer training graphs (testsuite/gen/gen-transformer).  Not part of
# make check: figures depend on the machine.  Each time is the median of
# BENCH_RUNS runs (default 3).  Columns:
#   layers ops MB devices | parse+print s, MB/s | full pipeline s | full/parse | peak RSS MB (full)
#   | full pipeline CPU s (user + system: on a shared VM the wall time also
#   holds the waits for the host, which the CPU time shows apart)
# then per configuration the median wall time of the sapp pass over the same
# runs, the sapp pass's own phase breakdown (CPU, last run), and the
# --time-passes report of the last run.
# Configurations: BENCH_CONFIGS="layers:devices[:generator flags, comma-separated] ..."
# (default below; the 6144-device runs use an FFN and vocabulary divisible by 3,
# so that the factor 3 of 6144 = 2^11 * 3 has dimensions to cut).  The MindFormers
# form of the layer (FlashAttentionScore, rotary embedding, Swiglu) is a generator
# flag: BENCH_CONFIGS="512:1024:-a,fa-bsh 512:1024:-a,fa-bnsd".
set -u
build=${1:-.}
sappc=$build/sappc
gen=$build/testsuite/gen/gen-transformer
runs=${BENCH_RUNS:-3}
configs=${BENCH_CONFIGS:-"64:8 512:1024 2048:4096 4096:1024 4096:4096 4096:6144:-f,3072,-v,30720"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
now() { date +%s.%N; }
run_timed() { # args...: prints wall seconds; stderr of the run goes to $tmp/err, CPU seconds to $tmp/cpu1
	local t0 t1 rc TIMEFORMAT='%U %S'
	t0=$(now)
	{ time "$sappc" "$@" >/dev/null 2>"$tmp/err"; } 2>"$tmp/cpu1"
	rc=$?
	t1=$(now)
	[ "$rc" = 0 ] || { echo "sappc $* failed:" >&2; cat "$tmp/err" >&2; return 1; }
	awk '{ printf "%.4f\n", $1 + $2 }' "$tmp/cpu1" >"$tmp/cpu1.s" && mv "$tmp/cpu1.s" "$tmp/cpu1"
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}

printf '%-7s %8s %7s %7s | %9s %7s | %9s %6s | %8s | %8s\n' layers ops MB devices parse+prt MB/s full full/pp RSS_MB full_cpu
for c in $configs; do
	IFS=: read -r L N gflags <<<"$c"
	f=$tmp/t$L${gflags//[,-]/}.ir
	# shellcheck disable=SC2086
	[ -f "$f" ] || "$gen" -L "$L" ${gflags//,/ } -o "$f"
	mb=$(awk -v s="$(stat -c %s "$f")" 'BEGIN { print s / 1048576 }')
	ops=$(grep -c '^  %' "$f")
	pp=$(for i in $(seq "$runs"); do run_timed --passes= -q "$f"; done | median)
	: >"$tmp/sapp"
	: >"$tmp/cpu"
	full=$(for i in $(seq "$runs"); do
		run_timed -q -n "$N" --time-passes "$f" || continue
		awk '$NF == "sapp" && $2 ~ /%$/ { print $1 }' "$tmp/err" >>"$tmp/sapp"
		cat "$tmp/cpu1" >>"$tmp/cpu"
	done | median)
	rss=$(sed -n 's/.*peak RSS: \([0-9.]*\) MB.*/\1/p' "$tmp/err")
	printf '%-7s %8s %7.1f %7s | %9.3f %7.1f | %9.3f %6.2f | %8s | %8.3f\n' "$L" "$ops" "$mb" "$N" "$pp" \
		"$(awk -v a="$mb" -v b="$pp" 'BEGIN { print a / b }')" "$full" \
		"$(awk -v a="$full" -v b="$pp" 'BEGIN { print a / b }')" "${rss:-?}" "$(median <"$tmp/cpu")"
	printf '  sapp pass: %.3f s (median of %s runs); %s\n' "$(median <"$tmp/sapp")" "$runs" \
		"$(sed -n 's/^sapp: //p' "$tmp/err")"
	echo "  passes ($L layers, $N devices, last run):" && grep -E '^ +[0-9.]+ +[0-9.]+% ' "$tmp/err" | sed 's/^/  /'
done
