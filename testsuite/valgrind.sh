#!/bin/bash
# valgrind.sh - TAP: memcheck on every sample (default pipeline, DOT and SVG
# output) reports no error and no leak of sappc's own; the suppression file
# covers only graphviz/fontconfig allocations made inside libgvc.
set -u
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
n=0
fails=0
if ! command -v valgrind >/dev/null; then
	echo "1..0 # SKIP valgrind is not installed"
	exit 0
fi
if grep -q __asan_init "$sappc" 2>/dev/null; then
	echo "1..0 # SKIP sappc is built with AddressSanitizer (it checks memory itself)"
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-vg.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
vg() { # name, expected exit status, args...
	local name=$1 want=$2
	shift 2
	n=$((n + 1))
	valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect \
		--errors-for-leak-kinds=definite,indirect --suppressions="$top/testsuite/valgrind.supp" \
		"$sappc" "$@" >/dev/null 2>"$tmp/log"
	if [ $? = "$want" ]; then
		echo "ok $n - memcheck $name"
	else
		fails=$((fails + 1))
		echo "not ok $n - memcheck $name"
		head -40 "$tmp/log" | sed 's/^/# /'
	fi
}
for f in "$top"/ir-samples/*.ir; do
	b=$(basename "$f" .ir)
	vg "$b" 0 -q -n 8 "$f"
	vg "$b (--dot, --svg)" 0 -q --passes= --dot "$tmp/o.dot" --svg "$tmp/o.svg" "$f"
done
vg "bad input (diagnostics)" 1 -q "$top/testsuite/excerpts/sapp_step_parallel_begin_and_validate-1.ir"
echo "1..$n"
[ "$fails" = 0 ]
