#!/bin/bash
# bound.sh - TAP: --simulate stays within --simulate-max-mb whatever the
# device count.  Each case runs under `ulimit -v` of the limit plus a fixed
# allowance for the program itself (code, libraries, the input, one rank
# being lowered): sappc must either finish (exit 0, "simulate: ok") or refuse
# with its estimate (exit 1, "more than the N MB allowed"), never run out of
# memory (exit 3) or be killed.  Memory is only ever measured through that
# limit, never by time.  Under AddressSanitizer (which reserves terabytes of
# address space for its shadow) the cases run without the ulimit.
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
sappc=${SAPPC:-$top/sappc}
mlp=$top/ir-samples/sapp_mlp.ir
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-simbound.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
allow=64 # MB besides the simulation: sappc -n 1 --simulate runs in 25 MB of address space
# OpenBLAS (the simulator's matrix products, passes/simulate/gemm.c) maps its
# code (32 MB) and a 128 MB work buffer per thread when it loads (gemm.c
# loads it on the first product; its name is in the binary either way), and
# spins when a mapping fails: one thread, and room for that
if grep -aq libopenblas "$sappc"; then
	export OPENBLAS_NUM_THREADS=1
	allow=$((allow + 192))
fi
asan=0
grep -q __asan_init "$sappc" 2>/dev/null && asan=1
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
	sed -e 's/^/# /' "$tmp/err" | head -5
}

# bounded LABEL WANT LIMIT_MB ARGS...: WANT is ok (must finish) or refuse
bounded() {
	local label=$1 want=$2 limit=$3 rc
	shift 3
	(
		[ "$asan" = 1 ] || ulimit -v $(((limit + allow) * 1024))
		exec "$sappc" -q --simulate --simulate-max-mb="$limit" "$@"
	) >"$tmp/out" 2>"$tmp/err"
	rc=$?
	case $want:$rc in
	ok:0)
		if grep -q '^simulate: ok$' "$tmp/out"; then ok "$label: finishes within $limit MB"; else notok "$label: no verdict"; fi
		;;
	refuse:1)
		if grep -q "more than the $limit MB allowed (--simulate-max-mb)" "$tmp/err"; then
			ok "$label: refused with an estimate, within $limit MB"
		else
			notok "$label: exit 1 without the estimate"
		fi
		;;
	*) notok "$label: exit status $rc, wanted $want (3: out of memory, >128: killed)" ;;
	esac
}

bounded "sapp_mlp -n 256" ok 200 -n 256 --forward-only "$mlp"
bounded "sapp_mlp -n 256" refuse 100 -n 256 --forward-only "$mlp"
bounded "sapp_mlp -n 1024" refuse 200 -n 1024 --forward-only "$mlp"
bounded "sapp_mlp -n 65536" refuse 200 -n 65536 --forward-only "$mlp"
bounded "sapp_mlp -n 65536, default limit" refuse 2048 -n 65536 --forward-only "$mlp"
# the training step: gradients, the written parameters' new values and their log count too
bounded "sapp_mlp training step -n 64" ok 320 -n 64 "$mlp"
bounded "sapp_mlp training step -n 64" refuse 200 -n 64 "$mlp"
bounded "sapp_mlp training step -n 65536, default limit" refuse 2048 -n 65536 "$mlp"
echo "1..$n"
[ "$fails" = 0 ]
