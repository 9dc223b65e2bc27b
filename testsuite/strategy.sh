#!/bin/bash
# strategy.sh - TAP: saved plans round-trip.  For every ir-sample (and a
# small generated transformer) under several parallel configurations:
#   sappc ARGS --strategy-out a.json          (search)
#   sappc ARGS --strategy-in a.json --strategy-out b.json
# must give a.json == b.json byte for byte, the same lowered IR as the
# search, and nothing on stderr.  The error cases of --strategy-in are
# goldens in testsuite/sapp/strategy_in_*.
# The same for MindSpore's strategy checkpoint (protobuf under every
# configuration, JSON under some): search -> a.ckpt -> --strategy-in a.ckpt
# gives b.ckpt == a.ckpt, the same lowered IR, and the same plan in sappc's
# form but for the `source` of the operators the file names, which must be
# "loaded" (the file was applied, not ignored); the protobuf decodes with
# protoc against backend/node_strategy.proto when protoc is installed.  The
# error cases and a hand-written file are goldens in testsuite/ckpt/.
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
gen=${GEN:-$top/testsuite/gen/gen-transformer}
protoc=${PROTOC:-$(command -v protoc || true)}
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

# MindSpore's forms: FORMAT SUFFIX over the configurations given
ms_round_trip() { # name file args format suffix
	local name=$1 f=$2 args=$3 fmt=$4 sfx=$5 bad="" rc
	# shellcheck disable=SC2086
	"$sappc" $args --strategy-out "$tmp/p.json" "$f" >"$tmp/a.ir" 2>"$tmp/a.err" || return 0
	# shellcheck disable=SC2086
	"$sappc" -q $args --strategy-format=$fmt --strategy-out "$tmp/a.$sfx" "$f" >/dev/null 2>&1 || return 0
	n=$((n + 1))
	# shellcheck disable=SC2086
	"$sappc" $args --strategy-in "$tmp/a.$sfx" --strategy-format=$fmt --strategy-out "$tmp/b.$sfx" "$f" \
		>"$tmp/b.ir" 2>"$tmp/err"
	rc=$?
	# shellcheck disable=SC2086
	"$sappc" -q $args --strategy-in "$tmp/a.$sfx" --strategy-out "$tmp/q.json" "$f" >/dev/null 2>>"$tmp/err"
	[ "$rc" = 0 ] || bad="exit status $rc"
	[ -z "$bad" ] && ! cmp -s "$tmp/a.err" "$tmp/err" && bad="stderr differs from the search's"
	[ -z "$bad" ] && ! cmp -s "$tmp/a.$sfx" "$tmp/b.$sfx" && bad="checkpoint differs after a round trip"
	[ -z "$bad" ] && ! cmp -s "$tmp/a.ir" "$tmp/b.ir" && { bad="lowered IR differs from the search's"; diff "$tmp/a.ir" "$tmp/b.ir" >>"$tmp/err"; }
	if [ -z "$bad" ] && ! diff <(grep -v '"source"' "$tmp/p.json") <(grep -v '"source"' "$tmp/q.json") >>"$tmp/err"; then
		bad="plan differs after a round trip"
	fi
	if [ -z "$bad" ] && [ -s "$tmp/a.$sfx" ] && grep -q '_' "$tmp/a.$sfx" && ! grep -q '"source": "loaded"' "$tmp/q.json"; then
		bad="no operator took its strategy from the file"
	fi
	if [ -z "$bad" ] && [ "$fmt" = mindspore ] && [ -n "$protoc" ] &&
		! "$protoc" --proto_path="$top/backend" --decode=mindspore.straspb.ParallelStrategyMap \
			node_strategy.proto <"$tmp/a.$sfx" >/dev/null 2>>"$tmp/err"; then
		bad="protoc --decode fails"
	fi
	if [ -z "$bad" ]; then
		echo "ok $n - $name $args: search -> $fmt -> in -> $fmt"
	else
		fails=$((fails + 1))
		echo "not ok $n - $name $args: $fmt: $bad"
		head -20 "$tmp/err" | sed 's/^/# /'
	fi
}
for f in "${inputs[@]}"; do
	name=$(basename "$f")
	for args in "${configs[@]}"; do
		ms_round_trip "$name" "$f" "$args" mindspore ckpt
	done
	for args in "-n 8" "-n 8 --pipeline-stages=2" "-n 8 --rank 5 --enable-parallel-optimizer"; do
		ms_round_trip "$name" "$f" "$args" mindspore-json json
	done
done
echo "1..$n"
[ "$fails" = 0 ]
