#!/bin/bash
# simulate.sh BUILDDIR - `make bench`, simulator section (issue 18): the time
# of `--simulate` on two samples, a large one (the LLaMA layer on 8 devices,
# whose matrix products are most of the run) and a small one.  Target: the
# LLaMA layer at least 10x faster than with the hand-written matmul kernel
# (125 s on the 2-core machine the issue was measured on).
#
# Each configuration "sample:devices:extra-flags" (SIM_BENCH_CONFIGS, the
# flags joined by commas) runs BENCH_RUNS times (default 3); a time is the
# median, as wall and as CPU (user + system; CPU above wall means more than
# one core worked).  The LLaMA layer runs --forward-only: its training step
# needs about 20 GB at 8 devices.  Figures depend on the machine, so nothing
# here fails `make`.
set -u
build=${1:-.}
sappc=$build/sappc
top=$(cd "$(dirname "$0")/../.." && pwd)
runs=${BENCH_RUNS:-3}
configs=${SIM_BENCH_CONFIGS:-"llama_layer:8:--forward-only,--simulate-max-mb=8000 sapp_mlp:8:"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-bench-sim.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

echo
echo "== --simulate (issue 18 target: llama_layer at 8 devices 10x faster than 125 s) =="
# gemm.c loads the CBLAS configure found on the first product; its name is
# in the binary whether it is loaded then or linked
blas=$(grep -ao 'lib[a-z0-9]*blas[a-z0-9]*\.so[.0-9]*' "$sappc" | head -1)
echo "matrix products: ${blas:-portable kernel (no CBLAS)}; OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset}, $(nproc) cores"
echo "ranks: on one thread per online core (--simulate-threads), matrix products on one thread each while they run"
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
printf '%-14s %7s %-38s | %8s %8s\n' sample devices flags wall_s cpu_s
for c in $configs; do
	IFS=: read -r S N F <<<"$c"
	flags=${F//,/ }
	: >"$tmp/times"
	for i in $(seq "$runs"); do
		TIMEFORMAT='%R %U %S'
		# shellcheck disable=SC2086
		{ time "$sappc" -q -n "$N" --simulate $flags "$top/ir-samples/$S.ir" -o /dev/null >"$tmp/out" 2>&1; } 2>"$tmp/t" ||
			{ echo "sappc -n $N --simulate $flags $S.ir failed:" >&2; cat "$tmp/out" >&2; exit 1; }
		awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$tmp/t" >>"$tmp/times"
	done
	wall=$(awk '{ print $1 }' "$tmp/times" | median)
	cpu=$(awk '{ print $2 }' "$tmp/times" | median)
	printf '%-14s %7s %-38s | %8.2f %8.2f\n' "$S" "$N" "${flags:--}" "$wall" "$cpu"
done
