#!/bin/bash
# html.sh - TAP: the --html explorer page works in a real browser.
# For every ir-sample (8 devices; hybrid_mlp also with 2 pipeline stages) and
# for a generated 4096-layer transformer:
#   - sappc writes the page (the big one timed: written in seconds);
#   - the page is self-contained: no <script src>, <link>, <img> or url();
#   - headless chromium opens it at "#selftest=NAME" (explorer.js searches
#     NAME, clicks the first hit and writes what its panel shows into
#     #selftest), where NAME is the full name of an operator of the IR the
#     same run printed; the panel must show that operator, the strategy the
#     IR gives it, where it came from, and its tensors; the report tab must
#     have its table (and, with stages, the 1F1B schedule);
#   - a screenshot is taken (left in testsuite/html-shots/ for a human).
# Before that, without a browser: --html's exit statuses (over the input 2,
# unwritable 3, bad input 1 and no page) and a whole page with no temporary
# file left.  The browser checks are skipped when chromium is not installed,
# unless SAPPC_REQUIRE_BROWSER=1 (.ci/run), where a missing browser fails.
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
gen=${GEN:-$top/testsuite/gen/gen-transformer}
shots=${HTML_SHOTS:-testsuite/html-shots}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-html.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1))
	echo "not ok $n - $1"
	[ -s "$tmp/why" ] && head -20 "$tmp/why" | cut -c1-400 | sed 's/^/# /'
}

# without a browser: exit statuses, and the page written whole or not at all
sample=$top/ir-samples/sapp_mlp.ir
mkdir "$tmp/o"
cp "$sample" "$tmp/o/in.ir"
"$sappc" -n 8 -o /dev/null --html "$tmp/o/in.ir" "$tmp/o/in.ir" 2>"$tmp/why"
rc=$?
if [ "$rc" = 2 ] && cmp -s "$sample" "$tmp/o/in.ir"; then ok "--html naming the input: exit 2, input intact"
else notok "--html naming the input: exit $rc"; fi
"$sappc" -n 8 -o /dev/null --html "$tmp/nosuchdir/p.html" "$sample" 2>"$tmp/why"
rc=$?
if [ "$rc" = 3 ]; then ok "--html into a missing directory: exit 3"; else notok "--html into a missing directory: exit $rc"; fi
if [ -w /dev/full ]; then
	"$sappc" -n 8 -o /dev/null --html /dev/full "$sample" 2>"$tmp/why"
	rc=$?
	if [ "$rc" = 3 ] && grep -q 'No space left' "$tmp/why"; then ok "--html to a full disk: exit 3, the cause said"
	else notok "--html to a full disk: exit $rc"; fi
fi
printf 'this is not IR\n' >"$tmp/bad.ir"
"$sappc" -n 8 -o /dev/null --html "$tmp/o/bad.html" "$tmp/bad.ir" 2>"$tmp/why"
rc=$?
if [ "$rc" = 1 ] && [ ! -e "$tmp/o/bad.html" ]; then ok "bad input: exit 1, no page"
else notok "bad input: exit $rc, page $(ls "$tmp/o")"; fi
"$sappc" -n 8 -o /dev/null --html "$tmp/o/p.html" "$sample" 2>"$tmp/why"
rc=$?
if [ "$rc" = 0 ] && [ "$(ls -A "$tmp/o")" = "$(printf 'in.ir\np.html')" ] && head -1 "$tmp/o/p.html" | grep -q '<!DOCTYPE html>' &&
	tail -1 "$tmp/o/p.html" | grep -q '</html>'; then
	ok "--html: exit 0, one whole page and no temporary file left"
else
	ls -A "$tmp/o" >>"$tmp/why"
	notok "--html: exit $rc or a partial page"
fi

browser=${CHROMIUM:-}
for b in chromium chromium-browser; do
	[ -z "$browser" ] && command -v "$b" >/dev/null && browser=$b
done
if [ -z "$browser" ]; then
	if [ "${SAPPC_REQUIRE_BROWSER:-0}" = 1 ]; then
		notok "chromium is not installed (Debian: apt-get install chromium)"
	else
		n=$((n + 1))
		echo "ok $n - the page in a browser # SKIP chromium not installed (Debian: chromium)"
	fi
	echo "1..$n"
	[ "$fails" = 0 ]
	exit
fi
mkdir -p "$shots"
# chromium as root needs --no-sandbox; a profile of its own per run
run_browser() { # URL EXTRA-ARGS...
	local url=$1
	shift
	timeout 300 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
		--disable-background-networking --disable-extensions --user-data-dir="$tmp/profile" \
		--window-size=1400,900 "$@" "$url" 2>>"$tmp/browser.log"
}

# need GLOB MESSAGE: the self-test result $res matches GLOB, else not ok
need() {
	# shellcheck disable=SC2053
	[[ $res == $1 ]] && return 0
	notok "$label: $2"
	return 1
}

# page LABEL HTML IR [expect-schedule [URL-EXTRA]]: the checks above on a
# written page; the operator is the first MatMul with a strategy in IR, else
# the first operator with one.  URL-EXTRA: "&view=plan" or "&view=rank%205" (that view),
# "&zoom=K" (the screenshot zoomed out K times around the operator)
page() {
	local label=$1 html=$2 ir=$3 sched=${4:-0} extra=${5:-}
	: >"$tmp/why"
	res= full= strat= oshape=
	if grep -Eq '<script[^>]* src=|<link |<img |url\(' "$html"; then
		grep -Eo '.{20}(<script[^>]* src=|<link |<img |url\().{40}' "$html" | head -3 >"$tmp/why"
		notok "$label: the page refers to something outside itself"
		return
	fi
	local line
	line=$(grep -n -m1 '= MatMul(.*{in_strategy: ' "$ir" || grep -n -m1 '{in_strategy: ' "$ir")
	local at=${line%%:*}
	strat=$(echo "$line" | sed 's/.*{in_strategy: \(.*\)}$/\1/; s/, out_strategy: .*//')
	full=$(sed -n "$((at + 1)),$((at + 4))p" "$ir" | grep -m1 -o 'Fullname with scope: (.*)' |
		sed 's/^Fullname with scope: (\(.*\))$/\1/')
	# its output's local shape, from its type line
	oshape=$(sed -n "$((at + 1))p" "$ir" | sed -n 's/.*-> (<Tensor\[[A-Za-z0-9]*\], \(([0-9, ]*)\)>)$/\1/p')
	if [ -z "$full" ] || [ -z "$strat" ]; then
		echo "no operator with a strategy and a full name in $ir" >"$tmp/why"
		notok "$label: nothing to look for"
		return
	fi
	local q
	q=$(printf '%s' "$full" | sed 's/%/%25/g; s/ /%20/g; s/#/%23/g; s/&/%26/g')
	run_browser "file://$html#selftest=$q$extra" --dump-dom >"$tmp/dom.html"
	res=$(grep -o '<pre id="selftest">.*</pre>' "$tmp/dom.html")
	if [ -z "$res" ]; then
		tail -5 "$tmp/browser.log" >"$tmp/why"
		notok "$label: the page did not run its self-test (script error?)"
		return
	fi
	echo "$res" >"$tmp/why"
	need '*"hits":[1-9]*' "searching '$full' finds nothing" || return
	need "*\"name\":\"%* $full\"*" "the panel does not show $full" || return
	need "*\"strategy\":\"$strat*" "the panel's strategy of $full is not the IR's $strat" || return
	need '*"source":"source: '[a-z]'*' "the panel does not say where the strategy came from" || return
	need "*\"tensors\":\"input 0  (*output  $oshape*" "the panel's output shape is not the IR's $oshape" || return
	# its part of the training step, from its scope (TRAIN-CONTRACT.md)
	local ph=forward
	case $full in Gradients/*) ph=backward ;; Default/optimizer-*) ph=optimizer ;; esac
	need "*\"phase\":\"$ph\"*" "the panel does not show the phase $ph" || return
	need '*"selected":1*' "the operator is not highlighted in the graph" || return
	need '*"report_rows":[1-9][0-9]*' "the report tab has no table (its ten rows)" || return
	# a forward AllReduce of its output in the IR: the panel counts it with its bytes
	local k
	k=$(echo "$line" | sed -n 's/^[0-9]*: *%\([0-9]*\).*/\1/p')
	if grep -Eq "= AllReduce\(%$k\).*instance name: forward_op_" "$ir"; then
		need '*"comm":"*| AllReduce | forward collectives | [0-9]* | [0-9.]* [KMG]*i*B | [0-9.]*'* \
			"the panel does not show the forward AllReduce of %$k" || return
	fi
	case $extra in
	*view=*)
		local v=${extra#*view=}
		v=${v%%&*}
		v=${v//%20/ }
		need "*\"view\":\"$v\"*" "the view '$v' was not shown" || return ;;
	esac
	if [ "$sched" = 1 ]; then
		need '*"schedule_rows":[2-9]*' "no pipeline schedule" || return
	fi
	ok "$label: '$full' found, strategy $strat ($(echo "$res" | grep -o '"ms":[0-9]*' | cut -d: -f2) ms to load and test)"
	local png=$shots/$(echo "$label" | tr -c 'A-Za-z0-9_.-' _).png
	rm -f "$png"
	run_browser "file://$html#selftest=$q$extra" --screenshot="$png" >/dev/null
	if [ -s "$png" ] && [ "$(wc -c <"$png")" -gt 10000 ]; then
		ok "$label: screenshot $png"
	else
		notok "$label: no screenshot"
	fi
}

for f in "$top"/ir-samples/*.ir; do
	name=$(basename "$f" .ir)
	: >"$tmp/why"
	if ! "$sappc" -n 8 -q --forward-only "$f" -o "$tmp/$name.ir" --html "$tmp/$name.html" 2>"$tmp/why"; then
		notok "$name: sappc --html failed"
		continue
	fi
	page "$name -n 8" "$tmp/$name.html" "$tmp/$name.ir"
	# the panel's search levels are --explain's, without its prefixes
	if [ -n "$res" ] && [ -n "$full" ]; then
		"$sappc" -n 8 -q "$f" -o /dev/null --explain="$full" 2>&1 |
			sed -n 's/^sapp: explain: .*: \(level [0-9]* (cut by [0-9]*)\)$/\1/p
				s/^\(  option .*\)/\1/p; s/^\(  choice: .*\)/\1/p; s/^\(  no options: .*\)/\1/p
				s/^sapp: explain: .*: \(after [0-9]* level(s).*\)$/\1/p' >"$tmp/levels"
		exp=$(awk '{ printf "%s\\n", $0 }' "$tmp/levels")
		echo "$res" >"$tmp/why"
		case $res in
		*"\"levels\":\"$exp\""*) ok "$name -n 8: search levels as --explain prints them ($(wc -l <"$tmp/levels") lines)" ;;
		*) echo "expected: $exp" >>"$tmp/why"; notok "$name -n 8: search levels differ from --explain" ;;
		esac
	fi
	case $name in
	sapp_mlp | llama_layer)
		# the plan view: global shapes, as the graph stands after the search
		"$sappc" -n 8 -q --stop-after=sapp "$f" -o "$tmp/$name.plan.ir"
		page "$name -n 8 plan view" "$tmp/$name.html" "$tmp/$name.plan.ir" 0 "&view=plan"
		# the rank switch: rank 5's graph, lowered again, its own local shapes
		"$sappc" -n 8 -q --forward-only --rank 5 "$f" -o "$tmp/$name.5.ir"
		page "$name -n 8 rank 5" "$tmp/$name.html" "$tmp/$name.5.ir" 0 "&view=rank%205" ;;
	esac
done

# boxes opened in place: llama_layer collapsed into a few scopes, every box
# opened (the first first), none may overlap one below it
"$sappc" -n 8 -q --forward-only --max-nodes=12 "$top/ir-samples/llama_layer.ir" -o "$tmp/ll.ir" --html "$tmp/ll.html" 2>"$tmp/why"
run_browser "file://$tmp/ll.html#selftest=MatMul&open=all" --dump-dom >"$tmp/dom.html"
res=$(grep -o '<pre id="selftest">.*</pre>' "$tmp/dom.html")
echo "$res" >"$tmp/why"
case $res in
*'"opened":0,'* | '') notok "llama_layer --max-nodes=12: no box opened" ;;
*'"opened":'*',"misplaced":0,'*) ok "llama_layer --max-nodes=12: every box opened in place, none over another or off its place" ;;
*) notok "llama_layer --max-nodes=12: open boxes overlap or left their place" ;;
esac

# a box too large to draw open (over 2000 operators): found by the search,
# its box highlighted, its operators listed on a click
"$gen" -L 64 -o "$tmp/g64.ir"
if "$sappc" -n 8 -q --forward-only --max-nodes=1 "$tmp/g64.ir" -o "$tmp/g64.out.ir" --html "$tmp/g64.html" 2>"$tmp/why"; then
	page "64 layers in one box" "$tmp/g64.html" "$tmp/g64.out.ir"
	case $res in
	*'"groups":1,'*'"expanded":0'*) ok "64 layers in one box: not drawn open, the box stands for the operator" ;;
	*) notok "64 layers in one box: expected one box, not opened" ;;
	esac
else
	notok "64 layers in one box: sappc --html failed"
fi

# a training step (issue 14): the panel of a backward and of an optimizer
# operator names its phase
if "$sappc" -n 8 -q "$top/ir-samples/sapp_mlp.ir" -o "$tmp/tr.ir" --html "$tmp/tr.html" 2>"$tmp/why"; then
	for ph in backward:Gradients/ optimizer:Default/optimizer-; do
		want=${ph%%:*}
		label="sapp_mlp training step, a $want operator"
		full=$(grep -m1 -o "Fullname with scope: (${ph#*:}[^)]*)" "$tmp/tr.ir" | sed 's/^Fullname with scope: (\(.*\))$/\1/')
		if [ -z "$full" ]; then
			echo "no ${ph#*:} operator in the printed IR" >"$tmp/why"
			notok "$label: none in the IR"
			continue
		fi
		q=$(printf '%s' "$full" | sed 's/%/%25/g; s/ /%20/g; s/#/%23/g; s/&/%26/g')
		run_browser "file://$tmp/tr.html#selftest=$q" --dump-dom >"$tmp/dom.html"
		res=$(grep -o '<pre id="selftest">.*</pre>' "$tmp/dom.html")
		echo "$res" >"$tmp/why"
		need "*\"name\":\"%* $full\"*" "the panel does not show $full" &&
			need "*\"phase\":\"$want\"*" "the panel does not say $want" && ok "$label: '$full' shown as $want"
	done
else
	notok "sapp_mlp training step: sappc --html failed"
fi

# a pipeline: the per-stage schedule
if "$sappc" -n 8 -q --pipeline-stages=2 --micro-batch-num=4 "$top/ir-samples/hybrid_mlp.ir" -o "$tmp/pp.ir" \
	--html "$tmp/pp.html" 2>"$tmp/why"; then
	page "hybrid_mlp 2 stages" "$tmp/pp.html" "$tmp/pp.ir" 1
else
	notok "hybrid_mlp 2 stages: sappc --html failed"
fi

# 4096 layers: written in seconds, opens collapsed, a box opens on search
"$gen" -L 4096 -o "$tmp/big.ir"
start=$(date +%s.%N)
if "$sappc" -n 8 -q "$tmp/big.ir" -o "$tmp/big.out.ir" --html "$tmp/big.html" 2>"$tmp/why"; then
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	echo "# 4096 layers: --html written in $secs s, $(wc -c <"$tmp/big.html") bytes"
	# the bound is loose: the machine may be shared (the figure is the point)
	if awk -v s="$secs" 'BEGIN { exit !(s < 180) }'; then
		ok "4096 layers: --html written in $secs s"
	else
		notok "4096 layers: --html took $secs s"
	fi
	page "4096 layers" "$tmp/big.html" "$tmp/big.out.ir" 0 "&zoom=12"
	case $(cat "$tmp/why") in
	*'"groups":0,'*) notok "4096 layers: the overview is not collapsed" ;;
	*'"expanded":1'*) ok "4096 layers: collapsed overview, the operator's box opened in place" ;;
	*) notok "4096 layers: the operator's box did not open" ;;
	esac
else
	notok "4096 layers: sappc --html failed"
fi

echo "1..$n"
[ "$fails" = 0 ]
