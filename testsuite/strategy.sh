#!/bin/bash
# strategy.sh - TAP: saved plans round-trip.  For every ir-sample (and a
# small generated transformer) under several parallel configurations:
#   sappc ARGS --strategy-out a.json          (search)
#   sappc ARGS --strategy-in a.json --strategy-out b.json
# must give a.json == b.json byte for byte, the same lowered IR as the
# search, and nothing on stderr.  The error cases of --strategy-in are
# goldens in testsuite/sapp/strategy_in_*.
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
gen=${GEN:-$top/testsuite/gen/gen-transformer}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-strategy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

inputs=("$top"/ir-samples/*.ir)
if [ -x "$gen" ] && "$gen" -L 4 -o "$tmp/gen4.ir" 2>/dev/null; then
	inputs+=("$tmp/gen4.ir")
fi
configs=("-n 1" "-n 8" "-n 16" "-n 6" "-n 8 --pipeline-stages=2" "-n 8 --interfered"
	"-n 8 --parallel-mode=semi_auto" "-n 8 --rank 5 --enable-parallel-optimizer")
for f in "${inputs[@]}"; do
	name=$(basename "$f")
	for args in "${configs[@]}"; do
		# shellcheck disable=SC2086
		if ! "$sappc" -q $args --strategy-out "$tmp/a.json" "$f" >"$tmp/a.ir" 2>/dev/null; then
			continue # a configuration the graph cannot take (e.g. no dimension divisible by 3)
		fi
		n=$((n + 1))
		# shellcheck disable=SC2086
		"$sappc" $args --strategy-in "$tmp/a.json" --strategy-out "$tmp/b.json" "$f" >"$tmp/b.ir" 2>"$tmp/err"
		rc=$?
		bad=""
		[ "$rc" = 0 ] || bad="exit status $rc"
		[ -z "$bad" ] && [ -s "$tmp/err" ] && bad="stderr not empty"
		[ -z "$bad" ] && ! cmp -s "$tmp/a.json" "$tmp/b.json" && { bad="plan differs after a round trip"; diff "$tmp/a.json" "$tmp/b.json" >>"$tmp/err"; }
		[ -z "$bad" ] && ! cmp -s "$tmp/a.ir" "$tmp/b.ir" && { bad="lowered IR differs from the search's"; diff "$tmp/a.ir" "$tmp/b.ir" >>"$tmp/err"; }
		if [ -z "$bad" ]; then
			echo "ok $n - $name $args: out -> in -> out"
		else
			fails=$((fails + 1))
			echo "not ok $n - $name $args: $bad"
			head -20 "$tmp/err" | sed 's/^/# /'
		fi
	done
done
echo "1..$n"
[ "$fails" = 0 ]
