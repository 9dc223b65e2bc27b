#!/bin/bash
# reader.sh BUILDDIR - `make bench`, the reader's section (issue 18): sappc
# against the floor, a bare flex scanner with the reader's token classes
# (testsuite/bench/floor.l, built by make with flex -Cf and -O2).  Per
# configuration, medians of BENCH_RUNS runs (default 3) of user CPU seconds:
#   floor        the bare tokenizer over the whole file (its scan alone)
#   parse+print  sappc --passes= (read, print)
#   search       the sapp pass (--time-passes, wall)
#   fwd          sappc -n DEVICES --forward-only, the forward plan: user +
#                system CPU (the kernel's zeroing of fresh pages is part of it)
#   full         sappc -n DEVICES, the default pipeline (the training step),
#                user + system CPU
#   fwd/floor, full/floor, parse/floor (parse+print user time over the floor's)
#   RSS/in       peak RSS over the input size: fwd, full and parse+print
# then how time and memory grow from one size to the next (the layers
# double: at most 2.1 wanted).  Goals: parse/floor <= 2, full/floor <= 5 and
# RSS/in <= 3 at 4096 layers, 4096 devices.
# Configurations: BENCH_READER="layers:devices ..." (default below).
set -u
build=${1:-.}
sappc=${BENCH_SAPPC:-$build/sappc} # BENCH_SAPPC: another binary (a reference build)
gen=$build/testsuite/gen/gen-transformer
floor=$build/testsuite/bench/floor
runs=${BENCH_RUNS:-3}
configs=${BENCH_READER:-"1024:4096 2048:4096 4096:4096"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-bench-reader.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
# sappc ARGS: user seconds (user + system with cpu=all) on stdout;
# --time-passes report in $tmp/err
user_time() {
	local TIMEFORMAT='%U %S'
	{ time "$sappc" "$@" --time-passes >/dev/null 2>"$tmp/err"; } 2>"$tmp/t" ||
		{ echo "sappc $* failed:" >&2; cat "$tmp/err" >&2; return 1; }
	awk -v all="${cpu:-}" '{ print all ? $1 + $2 : $1 }' "$tmp/t"
}
rss_mb() { sed -n 's/.*peak RSS: \([0-9.]*\) MB.*/\1/p' "$tmp/err"; }

echo "reader against the floor tokenizer (CPU s, medians of $runs runs; full = user + system)"
printf '%-6s %7s %6s | %6s %7s %6s %6s %6s | %6s %7s %7s | %6s %6s %6s\n' layers devices MB floor parse+pp search \
	fwd full fwd/fl full/fl pars/fl RSS/in RSS/in RSS/in
printf '%-6s %7s %6s | %6s %7s %6s %6s %6s | %6s %7s %7s | %6s %6s %6s\n' '' '' '' user user wall cpu cpu '' '' user \
	fwd full pp
prev=
for c in $configs; do
	IFS=: read -r L N <<<"$c"
	f=$tmp/t$L.ir
	"$gen" -L "$L" -o "$f"
	bytes=$(stat -c %s "$f")
	mb=$(awk -v s="$bytes" 'BEGIN { printf "%.1f", s / 1048576 }')
	fl=$(for i in $(seq "$runs"); do "$floor" "$f" | awk '{ print $2 }'; done | median)
	: >"$tmp/rpp"
	pp=$(for i in $(seq "$runs"); do user_time --passes= -q "$f" && rss_mb >>"$tmp/rpp"; done | median)
	: >"$tmp/rfwd"
	fwd=$(for i in $(seq "$runs"); do
		cpu=all user_time -q -n "$N" --forward-only "$f" || continue
		rss_mb >>"$tmp/rfwd"
	done | median)
	: >"$tmp/rfull"
	: >"$tmp/sapp"
	full=$(for i in $(seq "$runs"); do
		cpu=all user_time -q -n "$N" "$f" || continue
		rss_mb >>"$tmp/rfull"
		awk '$NF == "sapp" && $2 ~ /%$/ { print $1 }' "$tmp/err" >>"$tmp/sapp"
	done | median)
	rpp=$(median <"$tmp/rpp")
	rfull=$(median <"$tmp/rfull")
	rfwd=$(median <"$tmp/rfwd")
	inmb=$(awk -v s="$bytes" 'BEGIN { print s / 1048576 }')
	printf '%-6s %7s %6s | %6.3f %7.3f %6.3f %6.3f %6.3f | %6s %7s %7s | %6s %6s %6s\n' "$L" "$N" "$mb" "$fl" "$pp" \
		"$(median <"$tmp/sapp")" "$fwd" "$full" "$(ratio "$fwd" "$fl")" "$(ratio "$full" "$fl")" "$(ratio "$pp" "$fl")" \
		"$(ratio "$rfwd" "$inmb")" "$(ratio "$rfull" "$inmb")" "$(ratio "$rpp" "$inmb")"
	if [ -n "$prev" ]; then
		read -r pL pfull prss ppp pfwd prfwd <<<"$prev"
		printf '       growth %s -> %s layers: fwd time %sx, fwd peak RSS %sx, full time %sx, full peak RSS %sx, parse+print time %sx\n' \
			"$pL" "$L" "$(ratio "$fwd" "$pfwd")" "$(ratio "$rfwd" "$prfwd")" "$(ratio "$full" "$pfull")" \
			"$(ratio "$rfull" "$prss")" "$(ratio "$pp" "$ppp")"
	fi
	prev="$L $full $rfull $pp $fwd $rfwd"
done
