#!/bin/bash
# ranks.sh BUILDDIR - `make bench`: --all-ranks on a generated transformer
# training graph.  The graph is read, verified and searched once, then the
# ranks are lowered in one worker process per processor (sappc.c,
# write_all_ranks).  Each figure is the median of BENCH_RUNS runs (default 3):
#   layers devices | wall s, CPU s (user + system) | wall ms per rank, CPU ms
#   per rank | workers (processors sappc uses) | cores busy (CPU / wall)
# The rank files go to a directory under TMPDIR (BENCH_RANKS_DIR to choose
# another file system: 512 ranks of the 64-layer graph are 6 GB, and writing
# them is a large part of the time).
# Configurations: BENCH_RANKS="layers:devices ..." (default 64:512).
set -u
build=${1:-.}
sappc=$build/sappc
gen=$build/testsuite/gen/gen-transformer
runs=${BENCH_RUNS:-3}
configs=${BENCH_RANKS:-"64:512"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-bench-ranks.XXXXXX")
out=$(mktemp -d "${BENCH_RANKS_DIR:-${TMPDIR:-/tmp}}/sappc-bench-ranks-out.XXXXXX")
trap 'rm -rf "$tmp" "$out"' EXIT
export LC_ALL=C

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
now() { date +%s.%N; }
procs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
workers=$((procs > 64 ? 64 : procs))

printf '%-7s %7s | %8s %8s | %9s %9s | %7s %10s\n' layers devices wall_s cpu_s wall_ms/rk cpu_ms/rk workers cores_busy
for c in $configs; do
	IFS=: read -r L N <<<"$c"
	f=$tmp/t$L.ir
	"$gen" -L "$L" -o "$f" || exit 1
	: >"$tmp/wall"
	: >"$tmp/cpu"
	for i in $(seq "$runs"); do
		rm -rf "$out/ranks"
		t0=$(now)
		{ TIMEFORMAT='%U %S'; time "$sappc" -q -n "$N" --all-ranks="$out/ranks" "$f" 2>"$tmp/err"; } 2>"$tmp/cpu1"
		rc=$?
		t1=$(now)
		[ "$rc" = 0 ] || { echo "sappc -n $N --all-ranks failed:" >&2; cat "$tmp/err" >&2; exit 1; }
		awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }' >>"$tmp/wall"
		tail -n 1 "$tmp/cpu1" | awk '{ printf "%.4f\n", $1 + $2 }' >>"$tmp/cpu"
	done
	rm -rf "$out/ranks"
	w=$(median <"$tmp/wall")
	u=$(median <"$tmp/cpu")
	printf '%-7s %7s | %8.2f %8.2f | %9.2f %9.2f | %7s %10.2f\n' "$L" "$N" "$w" "$u" \
		"$(awk -v a="$w" -v n="$N" 'BEGIN { print 1000 * a / n }')" \
		"$(awk -v a="$u" -v n="$N" 'BEGIN { print 1000 * a / n }')" "$workers" \
		"$(awk -v a="$u" -v b="$w" 'BEGIN { print a / b }')"
done
