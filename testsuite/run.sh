#!/bin/bash
# run.sh - sappc's golden-file test runner; prints TAP.
#
#   testsuite/run.sh [--update] [DIR...]
#
# Every folder of testsuite/ that holds *.ir (or *.bin / *.gen.sh) inputs is a
# group.  For an input NAME:
#   - flags come from a first line "# args: ..." (or NAME.args for binary inputs);
#     a second line "# env: NAME=VALUE ..." sets environment variables for the
#     run (test-only switches such as SAPPC_TEST_BREAK_REDIST);
#   - NAME.out  is the expected stdout (the printed IR, or what the flags print);
#   - NAME.err  is the expected stderr (paths are relative to testsuite/);
#   - NAME.dot  is the expected DOT (run adds --dot); NAME.json the expected
#     --strategy-out file (run adds --strategy-out);
#   - NAME.code holds the expected exit status (default: 1 if NAME.err exists
#     and NAME.out does not, else 0);
#   - NAME.gen.sh writes the input on stdout (large or generated inputs; flags
#     in NAME.args, and only NAME.err, NAME.out if present and the status
#     are checked, default status 1);
#   - NAME.input names an input kept elsewhere (its first line: a path from
#     the top directory, e.g. ir-samples/cnn.ir), run with NAME.args.
# Besides the groups: every ir-samples/*.ir must re-print byte for byte and
# run twice to identical bytes; every testsuite/excerpts/*.ir document must
# reach a fixed point (print, re-parse, print again: same bytes).
# --update rewrites the expectation files from the current output; review
# the result with git diff.
set -u
export LC_ALL=C

top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
update=0
dirs=()
for a in "$@"; do
	case $a in
	--update) update=1 ;;
	*) dirs+=("$a") ;;
	esac
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1))
	echo "not ok $n - $1"
	if [ -n "${2:-}" ] && [ -f "$2" ]; then sed -e 's/^/# /' "$2" | head -40; fi
}

# compare FILE_EXPECTED FILE_ACTUAL LABEL
compare() {
	if [ "$update" = 1 ]; then
		cp "$2" "$1"
		return 0
	fi
	if [ ! -f "$1" ]; then
		echo "missing expectation $1" >"$tmp/diff"
		return 1
	fi
	diff -u "$1" "$2" >"$tmp/diff" 2>&1
}

run_case() { # dir name input
	local dir=$1 name=$2 input=$3 args="" envs=""
	local base="$top/testsuite/$dir/$name"
	if [ -f "$base.args" ]; then
		args=$(cat "$base.args")
	elif [ "${input##*.}" = ir ]; then
		args=$(sed -n '1s/^# args: *//p' "$input")
		envs=$(sed -n '2s/^# env: *//p' "$input")
	fi
	local extra=()
	[ -f "$base.dot" ] && extra+=(--dot "$tmp/out.dot")
	[ -f "$base.json" ] && extra+=(--strategy-out "$tmp/out.json")
	local expcode=0
	if [ -f "$base.code" ]; then
		expcode=$(cat "$base.code")
	elif [ -f "$base.err" ] && [ ! -f "$base.out" ]; then
		expcode=1
	fi
	rm -f "$tmp/out.dot" "$tmp/out.json"
	# inputs are named relative to testsuite/ (so are the paths in NAME.err)
	local rel=${input#"$top/testsuite/"}
	case $input in "$top"/testsuite/*) ;; "$top"/*) rel="../${input#"$top/"}" ;; esac
	# shellcheck disable=SC2086
	(cd "$top/testsuite" && env $envs "$sappc" $args "${extra[@]}" "$rel") >"$tmp/stdout" 2>"$tmp/stderr"
	local code=$?
	local bad=""
	if [ "$code" != "$expcode" ] && [ "$update" = 0 ]; then
		bad="exit status $code, expected $expcode"
		cp "$tmp/stderr" "$tmp/diff"
	fi
	if [ -z "$bad" ] && { [ -f "$base.out" ] || { [ "$update" = 1 ] && [ "$code" = 0 ]; }; }; then
		compare "$base.out" "$tmp/stdout" || bad="stdout differs"
	fi
	if [ -z "$bad" ] && { [ -f "$base.err" ] || { [ "$update" = 1 ] && [ -s "$tmp/stderr" ]; }; }; then
		compare "$base.err" "$tmp/stderr" || bad="stderr differs"
	fi
	if [ -z "$bad" ] && [ -f "$base.dot" ]; then
		compare "$base.dot" "$tmp/out.dot" || bad="DOT differs"
	fi
	if [ -z "$bad" ] && [ -f "$base.json" ]; then
		compare "$base.json" "$tmp/out.json" || bad="strategy JSON differs"
	fi
	if [ -z "$bad" ] && [ "$code" = 0 ] && [ "$update" = 0 ]; then
		# determinism: the same run again gives the same bytes
		# shellcheck disable=SC2086
		(cd "$top/testsuite" && env $envs "$sappc" $args "$rel") >"$tmp/stdout2" 2>/dev/null
		cmp -s "$tmp/stdout" "$tmp/stdout2" || { bad="output not deterministic"; diff "$tmp/stdout" "$tmp/stdout2" >"$tmp/diff"; }
	fi
	# a crash is never acceptable, whatever the expectation says
	if [ -z "$bad" ] && [ "$code" -ge 128 ]; then bad="crashed (status $code)"; cp "$tmp/stderr" "$tmp/diff"; fi
	if [ -z "$bad" ]; then ok "$dir/$name"; else notok "$dir/$name: $bad" "$tmp/diff"; fi
}

run_group() { # dir (relative to testsuite)
	local d=$1 f name
	for f in "$top/testsuite/$d"/*.ir "$top/testsuite/$d"/*.bin; do
		[ -f "$f" ] || continue
		name=$(basename "$f"); name=${name%.*}
		run_case "$d" "$name" "$f"
	done
	for f in "$top/testsuite/$d"/*.input; do
		[ -f "$f" ] || continue
		name=$(basename "$f" .input)
		run_case "$d" "$name" "$top/$(head -1 "$f")"
	done
	for f in "$top/testsuite/$d"/*.gen.sh; do
		[ -f "$f" ] || continue
		name=$(basename "$f" .gen.sh)
		bash "$f" >"$tmp/$name.gen.ir" || { notok "$d/$name: generator failed"; continue; }
		run_gen_case "$d" "$name" "$tmp/$name.gen.ir"
	done
}

# generated inputs live outside the source tree: run them by absolute path
run_gen_case() {
	local dir=$1 name=$2 input=$3 args=""
	local base="$top/testsuite/$dir/$name"
	[ -f "$base.args" ] && args=$(cat "$base.args")
	local expcode=1
	[ -f "$base.code" ] && expcode=$(cat "$base.code")
	# shellcheck disable=SC2086
	"$sappc" $args "$input" >"$tmp/stdout" 2>"$tmp/stderr"
	local code=$?
	sed -i "s|$input|$name.gen.ir|g" "$tmp/stderr"
	local bad=""
	[ "$code" = "$expcode" ] || { bad="exit status $code, expected $expcode"; cp "$tmp/stderr" "$tmp/diff"; }
	[ "$code" -ge 128 ] && bad="crashed (status $code)"
	if [ -z "$bad" ] && { [ -f "$base.err" ] || [ "$update" = 1 ]; }; then
		compare "$base.err" "$tmp/stderr" || bad="stderr differs"
	fi
	if [ -z "$bad" ] && [ -f "$base.out" ]; then
		compare "$base.out" "$tmp/stdout" || bad="stdout differs"
	fi
	if [ -z "$bad" ]; then ok "$dir/$name (generated)"; else notok "$dir/$name: $bad" "$tmp/diff"; fi
}

# every sample re-prints byte for byte, deterministically
roundtrip_samples() {
	local f
	for f in "$top"/ir-samples/*.ir; do
		[ -f "$f" ] || continue
		if "$sappc" --passes= "$f" >"$tmp/rt" 2>"$tmp/diff" && cmp -s "$f" "$tmp/rt"; then
			ok "round-trip ir-samples/$(basename "$f")"
		else
			diff -u "$f" "$tmp/rt" >>"$tmp/diff" 2>&1
			notok "round-trip ir-samples/$(basename "$f")" "$tmp/diff"
		fi
		if "$sappc" --passes=verify "$f" >/dev/null 2>"$tmp/diff"; then
			ok "verify ir-samples/$(basename "$f")"
		else
			notok "verify ir-samples/$(basename "$f")" "$tmp/diff"
		fi
	done
}

# every excerpt document reaches a fixed point after one print
fixpoint_excerpts() {
	local f
	for f in "$top"/testsuite/excerpts/*.ir; do
		[ -f "$f" ] || continue
		if "$sappc" --fragment --passes= "$f" >"$tmp/p1" 2>"$tmp/diff" &&
			"$sappc" --fragment --passes= "$tmp/p1" >"$tmp/p2" 2>>"$tmp/diff" && cmp -s "$tmp/p1" "$tmp/p2"; then
			ok "fixed point excerpts/$(basename "$f")"
		else
			diff -u "$tmp/p1" "$tmp/p2" >>"$tmp/diff" 2>&1
			notok "fixed point excerpts/$(basename "$f")" "$tmp/diff"
		fi
	done
}

if [ ${#dirs[@]} -eq 0 ]; then
	for d in "$top"/testsuite/*/; do
		d=$(basename "$d")
		case $d in excerpts | unit | gen | bench | fuzz) continue ;; esac
		dirs+=("$d")
	done
	[ "$update" = 1 ] || { roundtrip_samples; fixpoint_excerpts; }
fi
for d in "${dirs[@]}"; do run_group "${d%/}"; done

echo "1..$n"
[ "$update" = 1 ] && echo "# expectations updated; review with git diff" >&2
[ "$fails" = 0 ]
