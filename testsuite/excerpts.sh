#!/bin/sh
# excerpts.sh SHARED_DIR - regenerates testsuite/excerpts/*.ir from the real
# dump excerpts in SHARED_DIR/spec/ir-excerpts: each file is split at its
# "# ----" lines into documents; the first (source) line and the "..." / "…"
# elision lines are dropped.  The results are committed so that the tests
# do not depend on shared/ being present.
set -e
shared=${1:-$(dirname "$0")/../../shared}
out=$(dirname "$0")/excerpts
mkdir -p "$out"
rm -f "$out"/*.ir
for f in "$shared"/spec/ir-excerpts/*.txt; do
	base=$(basename "$f" .txt)
	tail -n +2 "$f" | awk -v out="$out" -v base="$base" '
	BEGIN { n = 0; file = sprintf("%s/%s-%d.ir", out, base, n) }
	/^# ---- / { n++; file = sprintf("%s/%s-%d.ir", out, base, n); next }
	/^[ \t]*(\.\.\.|…)[ \t]*$/ { next }
	{ print > file }'
done
# drop empty documents (text before the first separator)
for f in "$out"/*.ir; do
	if ! grep -q '[^[:space:]]' "$f"; then rm -f "$f"; fi
done
ls "$out"
