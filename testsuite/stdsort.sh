#!/bin/bash
# stdsort.sh - TAP: ir/stdsort.c sorts exactly like libstdc++'s std::stable_sort
# (testsuite/stdsort_ref.cc).  Skipped when no C++ compiler is installed.
set -u
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cc=${CC:-cc}
cxx=${CXX:-c++}
if ! command -v "$cxx" >/dev/null 2>&1; then
	echo "1..0 # SKIP no C++ compiler ($cxx)"
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-stdsort.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! "$cc" -std=c11 -O2 -I"$top/ir" -c "$top/ir/stdsort.c" -o "$tmp/stdsort.o" 2>"$tmp/err" ||
	! "$cxx" -std=c++11 -O2 "$top/testsuite/stdsort_ref.cc" "$tmp/stdsort.o" -o "$tmp/ref" 2>>"$tmp/err"; then
	echo "not ok 1 - build the reference harness"
	sed 's/^/# /' "$tmp/err" | head -20
	echo "1..1"
	exit 1
fi
"$tmp/ref"
