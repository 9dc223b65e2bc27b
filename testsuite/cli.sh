#!/bin/bash
# cli.sh - what sappc's command line does that a golden file cannot show;
# prints TAP.  Golden cases of options live in testsuite/cli/ (run.sh);
# here: exit statuses of I/O failures (3), all-or-nothing output (every file
# option, --all-ranks, standard output, a full file system), outputs naming
# the input or each other, standard input, --time-passes, SVG.
#
#   SAPPC=path/to/sappc testsuite/cli.sh
set -u
export LC_ALL=C

top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-cli.XXXXXX")
trap 'chmod -R u+rwx "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
fails=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
notok() {
	n=$((n + 1)); fails=$((fails + 1))
	echo "not ok $n - $1"
	for f in "$tmp/out" "$tmp/err"; do [ -s "$f" ] && sed -e 's/^/# /' "$f" | head -20; done
}
# check DESC CONDITION...: ok if the command succeeds
check() {
	local d=$1
	shift
	if "$@"; then ok "$d"; else notok "$d"; fi
}
# run CMD...: runs with stdout/stderr to $tmp/out, $tmp/err; status in $rc
run() {
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
}
has() { grep -q -e "$1" "$2"; }
no_temp_left() { ! ls "$1" | grep -q '\.tmp'; }
inode() { stat -c %i "$1"; }
root=0
[ "$(id -u)" = 0 ] && root=1

# ---------------------------------------------------------------- inputs
cat >"$tmp/good.ir" <<'EOF'
# IR entry: @main
%para1_x: <Tensor[Float32], (8, 16)>
%para2_w: <Ref[Tensor[Float32]], (16, 4), ref_key=w>  :  has_default
subgraph @main() {
  %0(w) = Load(%para2_w, UMonad[U])
      : (<Ref[Tensor[Float32]], (16, 4), ref_key=w>, <UMonad, NoShape>) -> (<Tensor[Float32], (16, 4)>)
  %1(y) = MatMul(%para1_x, %0) {instance name: matmul}
      : (<Tensor[Float32], (8, 16)>, <Tensor[Float32], (16, 4)>) -> (<Tensor[Float32], (8, 4)>)
  Return(%1)
      : (<Tensor[Float32], (8, 4)>)
}
EOF
sed -e 's/MatMul(%para1_x, %0)/MatMul(%para1_x, %0/' "$tmp/good.ir" >"$tmp/bad.ir"
# more than 64 KiB: the reader's first buffer
awk 'BEGIN {
	print "# IR entry: @main"
	print "%para1_x: <Tensor[Float32], (8, 16)>"
	print "subgraph @main() {"
	print "  %0(y) = ReLU(%para1_x) {instance name: relu}"
	print "      : (<Tensor[Float32], (8, 16)>) -> (<Tensor[Float32], (8, 16)>)"
	for (i = 1; i < 3000; i++) {
		printf "  %%%d(y) = ReLU(%%%d) {instance name: relu}\n", i, i - 1
		print "      : (<Tensor[Float32], (8, 16)>) -> (<Tensor[Float32], (8, 16)>)"
	}
	print "  Return(%2999)"
	print "      : (<Tensor[Float32], (8, 16)>)"
	print "}"
}' >"$tmp/big.ir"
"$sappc" "$tmp/good.ir" >"$tmp/good.out" 2>/dev/null || echo "# sappc fails on the valid input" >&2
"$sappc" "$tmp/big.ir" >"$tmp/big.out" 2>/dev/null || echo "# sappc fails on the large input" >&2

# ---------------------------------------------------------------- options
run "$sappc" --version
check "--version: 'sappc X.Y.Z', exit 0" test "$rc" = 0 -a ! -s "$tmp/err"
check "--version format" grep -Eqx 'sappc [0-9]+\.[0-9]+\.[0-9]+' "$tmp/out"
run "$sappc" -n
check "-n without its argument: exit 2" test "$rc" = 2
check "-n without its argument: says so" has "requires an argument" "$tmp/err"
run "$sappc" -n 1 -q "$tmp/good.ir"
check "-n 1 -q on a valid input: exit 0, same IR" cmp -s "$tmp/out" "$tmp/good.out"
run "$sappc" --time-passes "$tmp/good.ir"
check "--time-passes: exit 0" test "$rc" = 0
check "--time-passes: stdout is the plain output" cmp -s "$tmp/out" "$tmp/good.out"
check "--time-passes: stderr reports verify and the total" \
	eval 'has "verify$" "$tmp/err" && has "total (passes)" "$tmp/err"'
if [ -r /proc/self/statm ]; then
	# wall, %, resident MB, name: the parse line and every pass line carry a resident size
	check "--time-passes: resident memory after parsing and after each pass" \
		awk '$NF == "(parse)" { p = ($2 + 0 > 0) } $NF == "verify" && $2 ~ /%$/ { v = ($3 + 0 > 0) }
		     END { exit !(p && v) }' "$tmp/err"
fi

# ---------------------------------------------------------------- writing stdout
if [ -w /dev/full ]; then
	run "$sappc" --help; cp "$tmp/out" "$tmp/help.out"
	"$sappc" --help >/dev/full 2>"$tmp/err"; rc=$?
	check "--help to a full device: exit 3" test "$rc" = 3
	"$sappc" --version >/dev/full 2>"$tmp/err"; rc=$?
	check "--version to a full device: exit 3" test "$rc" = 3
	"$sappc" "$tmp/good.ir" >/dev/full 2>"$tmp/err"; rc=$?
	check "IR to a full device: exit 3" test "$rc" = 3
	check "IR to a full device: write error reported" has "write error" "$tmp/err"
else
	for d in "--help to a full device" "--version to a full device" "IR to a full device" "IR to a full device: message"; do
		skip "$d" "no /dev/full"
	done
fi

# ---------------------------------------------------------------- -o FILE
mkdir "$tmp/o"
run "$sappc" -o "$tmp/o/out.ir" "$tmp/good.ir"
check "-o FILE: exit 0, nothing on stdout" test "$rc" = 0 -a ! -s "$tmp/out"
check "-o FILE: the file holds the IR" cmp -s "$tmp/o/out.ir" "$tmp/good.out"
check "-o FILE: no temporary file left" no_temp_left "$tmp/o"
run "$sappc" -o - "$tmp/good.ir"
check "-o -: standard output" cmp -s "$tmp/out" "$tmp/good.out"

# replacing a file renames a new one over it (a hard link keeps the old bytes)
echo "old contents" >"$tmp/o/out.ir"
ln "$tmp/o/out.ir" "$tmp/o/keep.ir"
old=$(inode "$tmp/o/out.ir")
run "$sappc" -o "$tmp/o/out.ir" "$tmp/good.ir"
check "-o over an existing file: exit 0, new contents" eval 'test "$rc" = 0 && cmp -s "$tmp/o/out.ir" "$tmp/good.out"'
check "-o over an existing file: replaced by rename, not rewritten in place" \
	eval 'test "$(inode "$tmp/o/out.ir")" != "$old" && test "$(cat "$tmp/o/keep.ir")" = "old contents"'

# a FIFO (like /dev/null) is written in place, never renamed over
mkfifo "$tmp/o/fifo"
timeout 20 cat "$tmp/o/fifo" >"$tmp/o/fifo.out" &
run "$sappc" -o "$tmp/o/fifo" "$tmp/good.ir"
wait
check "-o FIFO: exit 0, the reader gets the IR" eval 'test "$rc" = 0 && cmp -s "$tmp/o/fifo.out" "$tmp/good.out"'
check "-o FIFO: still a FIFO, no temporary file left" eval 'test -p "$tmp/o/fifo" && no_temp_left "$tmp/o"'
rm -f "$tmp/o/fifo" "$tmp/o/fifo.out"

# a failed run leaves no output file and does not clobber an existing one
run "$sappc" -o "$tmp/o/new.ir" "$tmp/bad.ir"
check "bad input with -o: exit 1" test "$rc" = 1
check "bad input with -o NEW: no file created" test ! -e "$tmp/o/new.ir"
# --strict refuses an operator sappc does not model before anything is written
run "$sappc" -n 4 --strict -o "$tmp/o/strict.ir" --report="$tmp/o/strict.txt" "$top/testsuite/sapp/not_modelled.ir"
check "--strict with an unknown operator: exit 1" test "$rc" = 1
check "--strict with an unknown operator: names it" has "'MyFusedOp' is not modelled" "$tmp/err"
check "--strict with an unknown operator: no file created" test ! -e "$tmp/o/strict.ir" -a ! -e "$tmp/o/strict.txt"
run "$sappc" -n 4 --strict -o "$tmp/o/strict.ir" "$top/ir-samples/sapp_mlp.ir"
check "--strict on a fully modelled graph: exit 0, no warning" test "$rc" = 0 -a -s "$tmp/o/strict.ir" -a ! -s "$tmp/err"
rm -f "$tmp/o/strict.ir"
cp "$tmp/o/out.ir" "$tmp/o/before"
old=$(inode "$tmp/o/out.ir")
run "$sappc" -o "$tmp/o/out.ir" "$tmp/bad.ir"
check "bad input with -o EXISTING: file untouched" \
	eval 'test "$rc" = 1 && cmp -s "$tmp/o/out.ir" "$tmp/o/before" && test "$(inode "$tmp/o/out.ir")" = "$old"'
run "$sappc" -o "$tmp/o/out.ir" --svg "$tmp/o/new.svg" --dot "$tmp/o/new.dot" "$tmp/bad.ir"
check "bad input with --svg/--dot: no picture written" test ! -e "$tmp/o/new.svg" -a ! -e "$tmp/o/new.dot"
check "failed runs leave no temporary file" no_temp_left "$tmp/o"

# -o over the input: refused before anything is read or written
cp "$tmp/good.ir" "$tmp/o/in.ir"
run "$sappc" -o "$tmp/o/../o/in.ir" "$tmp/o/in.ir"
check "-o naming the input (another spelling): exit 2, input intact" \
	eval 'test "$rc" = 2 && cmp -s "$tmp/o/in.ir" "$tmp/good.ir"'
ln -s in.ir "$tmp/o/link.ir"
run "$sappc" --svg "$tmp/o/link.ir" "$tmp/o/in.ir"
check "--svg naming the input through a symlink: exit 2, input intact" \
	eval 'test "$rc" = 2 && cmp -s "$tmp/o/in.ir" "$tmp/good.ir"'

# ---------------------------------------------------------------- I/O failures: exit 3
run "$sappc" -o "$tmp/nosuchdir/out.ir" "$tmp/good.ir"
check "-o into a missing directory: exit 3" test "$rc" = 3
check "-o into a missing directory: names the file" has "cannot create '$tmp/nosuchdir/out.ir'" "$tmp/err"
run "$sappc" -o "$tmp/good.ir/out.ir" "$tmp/good.ir"
check "-o below a regular file: exit 3" test "$rc" = 3
run "$sappc" --svg "$tmp/nosuchdir/g.svg" "$tmp/good.ir"
check "--svg into a missing directory: exit 3" test "$rc" = 3
run "$sappc" --dot "$tmp/nosuchdir/g.dot" "$tmp/good.ir"
check "--dot into a missing directory: exit 3" test "$rc" = 3
if [ "$root" = 0 ]; then
	mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
	run "$sappc" -o "$tmp/ro/out.ir" "$tmp/good.ir"
	check "-o into a read-only directory: exit 3" test "$rc" = 3 -a ! -e "$tmp/ro/out.ir"
	cp "$tmp/good.ir" "$tmp/unreadable.ir" && chmod 000 "$tmp/unreadable.ir"
	run "$sappc" "$tmp/unreadable.ir"
	check "unreadable input: exit 3" eval 'test "$rc" = 3 && has "Permission denied" "$tmp/err"'
else
	skip "-o into a read-only directory" "root ignores permissions"
	skip "unreadable input" "root ignores permissions"
fi
# a directory nobody can create files in, root included
if [ -d /proc/self ]; then
	run "$sappc" -o /proc/sappc-cli-test.ir "$tmp/good.ir"
	check "-o into /proc (unwritable even for root): exit 3" eval 'test "$rc" = 3 && has "cannot create" "$tmp/err"'
else
	skip "-o into /proc" "no /proc"
fi
run "$sappc" "$tmp/nosuch.ir"
check "missing input: exit 3" eval 'test "$rc" = 3 && has "cannot open" "$tmp/err"'
run "$sappc" "$tmp"
check "a directory as input: exit 3" eval 'test "$rc" = 3 && has "is a directory" "$tmp/err"'
if [ -r /proc/self/mem ]; then
	run "$sappc" /proc/self/mem
	check "an input that fails to read: exit 3" eval 'test "$rc" = 3 && has "cannot read" "$tmp/err"'
else
	skip "an input that fails to read" "no /proc/self/mem"
fi
run "$sappc" <"$tmp"
check "a directory as standard input: exit 3" test "$rc" = 3

# ---------------------------------------------------------------- standard input
run "$sappc" <"$tmp/good.ir"
check "no FILE: reads standard input" eval 'test "$rc" = 0 && cmp -s "$tmp/out" "$tmp/good.out"'
run "$sappc" - <"$tmp/good.ir"
check "FILE '-': reads standard input" eval 'test "$rc" = 0 && cmp -s "$tmp/out" "$tmp/good.out"'
check "the large input is larger than 64 KiB" test "$(wc -c <"$tmp/big.ir")" -gt 65536
run "$sappc" <"$tmp/big.ir"
check "more than 64 KiB from a redirected file" eval 'test "$rc" = 0 && cmp -s "$tmp/out" "$tmp/big.out"'
cat "$tmp/big.ir" | "$sappc" - >"$tmp/out" 2>"$tmp/err"
rc=$?
check "more than 64 KiB from a pipe" eval 'test "$rc" = 0 && cmp -s "$tmp/out" "$tmp/big.out"'
run "$sappc" <"$tmp/bad.ir"
check "an error on standard input is located in <stdin>" eval 'test "$rc" = 1 && has "^<stdin>:7:31: error:" "$tmp/err"'

# ---------------------------------------------------------------- SVG
run "$sappc" --svg "$tmp/o/g.svg" "$tmp/good.ir"
check "--svg: exit 0, the IR still on stdout" eval 'test "$rc" = 0 && cmp -s "$tmp/out" "$tmp/good.out"'
check "--svg: an <svg> document" has "<svg" "$tmp/o/g.svg"
check "--svg: every operator is drawn" eval 'has ">MatMul<" "$tmp/o/g.svg" && has ">Load<" "$tmp/o/g.svg"'
if command -v xmllint >/dev/null 2>&1; then
	check "--svg: well-formed XML (xmllint --noout)" xmllint --noout "$tmp/o/g.svg"
else
	skip "--svg: well-formed XML" "no xmllint"
fi
check "--svg: no temporary file left" no_temp_left "$tmp/o"

# -o onto a device or a pipe writes through it: the temporary-and-rename
# used for regular files must never replace the device itself
run "$sappc" --passes= -o /dev/null "$tmp/good.ir"
check "-o /dev/null: exit 0" test "$rc" = 0
check "-o /dev/null: /dev/null is still a character device" test -c /dev/null
# --all-ranks lowers every rank but shows a warning of the graph once
run "$sappc" -n 8 --all-ranks "$tmp/ar" "$top/ir-samples/interfered_add.ir"
check "--all-ranks: exit 0" test "$rc" = 0
check "--all-ranks: every rank written" test "$(ls "$tmp/ar" | wc -l)" = 8
check "--all-ranks: the user-strategy warning once, not per rank" \
	test "$(grep -c 'carries a user strategy' "$tmp/err")" = 1
# --all-ranks with the training step (issue 14): rank R's file is what --rank=R
# prints, forward, backward and optimizer update; --forward-only keeps the
# forward graph in every file
run "$sappc" -n 8 --all-ranks "$tmp/art" "$top/ir-samples/sapp_mlp.ir"
check "--all-ranks, training step: exit 0" test "$rc" = 0
for r in 0 3 6; do
	"$sappc" -q -n 8 --rank "$r" "$top/ir-samples/sapp_mlp.ir" >"$tmp/art$r.ir" 2>/dev/null
	check "--all-ranks, training step: rank $r as --rank=$r prints it" \
		cmp -s "$tmp/art/rank_$r/sapp_mlp_validate_0000.ir" "$tmp/art$r.ir"
	check "--all-ranks, training step: rank $r has its backward and its optimizer update" eval \
		"grep -q 'Fullname with scope: (Gradients/' '$tmp/art/rank_$r/sapp_mlp_validate_0000.ir' &&
		 grep -q '= ApplyMomentum(' '$tmp/art/rank_$r/sapp_mlp_validate_0000.ir'"
done
run "$sappc" -n 8 --forward-only --all-ranks "$tmp/arf" "$top/ir-samples/sapp_mlp.ir"
check "--all-ranks --forward-only: exit 0, no backward in any rank" eval \
	"test '$rc' = 0 && test \$(ls '$tmp/arf' | wc -l) = 8 && ! grep -rq 'Gradients/' '$tmp/arf'"
# ---------------------------------------------------------------- all-or-nothing outputs
# Every output file of a run appears together at its end, or none does; the
# files it would replace keep their bytes (and inode) on every failure.
mlp=$top/ir-samples/sapp_mlp.ir
mkdir "$tmp/aon"
# seed FILE...: give each file distinct old contents
seed() { for f in "$@"; do echo "old $f" >"$f"; done; }
# untouched FILE...: each still holds what seed wrote
untouched() { for f in "$@"; do [ "$(cat "$f")" = "old $f" ] || return 1; done; }
a=$tmp/aon
all="$a/out.ir $a/plan.json $a/rep.txt $a/g.dot $a/g.svg"
seed $all
# exit 1 late in the run: --simulate finds the redistributions wrong after
# the sapp pass has chosen (and used to write) the strategies
SAPPC_TEST_BREAK_REDIST=1 run "$sappc" -n 8 --simulate --forward-only -o "$a/out.ir" --strategy-out "$a/plan.json" \
	--report="$a/rep.txt" --dot "$a/g.dot" --svg "$a/g.svg" "$mlp"
check "a run failing with exit 1 after the search: exit 1" test "$rc" = 1
check "exit 1: every existing output keeps its bytes (-o, --strategy-out, --report, --dot, --svg)" untouched $all
check "exit 1: no temporary file left" no_temp_left "$a"
# exit 3 at the last output: -o, --strategy-out, --report and --dot are done
# before --svg fails
run "$sappc" -n 8 -o "$a/out.ir" --strategy-out "$a/plan.json" --report="$a/rep.txt" --dot "$a/g.dot" \
	--svg "$a/nosuchdir/g.svg" "$mlp"
check "--svg into a missing directory after the other outputs: exit 3" test "$rc" = 3
check "exit 3: every existing output keeps its bytes" untouched $all
check "exit 3: no temporary file left" no_temp_left "$a"
run "$sappc" -n 8 --strategy-out "$a/plan.json" --dot "$a/nosuchdir/g.dot" "$mlp"
check "--dot failing: --strategy-out untouched" eval 'test "$rc" = 3 && untouched "$a/plan.json"'
# a new output is not created either
run "$sappc" -n 8 -o "$a/new.ir" --svg "$a/nosuchdir/g.svg" "$mlp"
check "exit 3: a new -o file is not created" eval 'test "$rc" = 3 && test ! -e "$a/new.ir"'
# and on success they all appear
run "$sappc" -n 8 -o "$a/out.ir" --strategy-out "$a/plan.json" --report="$a/rep.txt" --dot "$a/g.dot" \
	--svg "$a/g.svg" "$mlp"
check "success: every output written" eval 'test "$rc" = 0 && ! untouched "$a/out.ir" && ! untouched "$a/plan.json" &&
	! untouched "$a/rep.txt" && ! untouched "$a/g.dot" && has "<svg" "$a/g.svg"'
check "success: no temporary file left" no_temp_left "$a"

# two outputs naming one file, or an output naming the input: usage, exit 2,
# before the input is read (a missing input would be exit 3)
cp "$tmp/good.ir" "$a/in.ir"
seed "$a/x"
ln "$a/x" "$a/x-hard"
ln -s x "$a/x-sym"
mkdir "$a/sub"
for args in "-o $a/x --dot $a/x" "-o $a/x --svg $a/../aon/x" "--strategy-out $a/x --report=$a/x-hard" \
	"--report=$a/x --dot $a/x-sym" "-o $a/y --report=$a/y" "--dot $a/sub/../y --svg $a/y" \
	"--all-ranks=$a/y --strategy-out=$a/y"; do
	run "$sappc" $args "$a/no-such-input.ir"
	check "two outputs naming one file ($args): exit 2 before reading" \
		eval 'test "$rc" = 2 && has "name the same file" "$tmp/err" && untouched "$a/x" && test ! -e "$a/y"'
done
for opt in --output= --report= --strategy-out= --dot= --svg=; do
	run "$sappc" "$opt$a/in.ir" "$a/in.ir"
	check "${opt%=} naming the input file: exit 2, input intact" \
		eval 'test "$rc" = 2 && has "over the input file" "$tmp/err" && cmp -s "$a/in.ir" "$tmp/good.ir"'
done
run "$sappc" --report="$a/../aon/in.ir" "$a/in.ir"
check "--report naming the input with another spelling: exit 2" test "$rc" = 2
run "$sappc" -o - --report=- --dot /dev/null --svg /dev/null "$tmp/good.ir"
check "standard output and /dev/null may be named twice" test "$rc" = 0

# --all-ranks stages the rank directories and moves them in at the end
mkdir "$a/ranks"
: >"$a/ranks/rank_3" # rank 3's directory cannot be made: the run fails half way
run "$sappc" -n 8 --all-ranks "$a/ranks" "$mlp"
check "--all-ranks failing half way: exit 3" test "$rc" = 3
check "--all-ranks failing half way: no rank_R left, the directory as it was" \
	test "$(ls -A "$a/ranks")" = rank_3
check "--all-ranks failing half way: no temporary directory left" no_temp_left "$a"
rm "$a/ranks/rank_3"
mkdir "$a/ranks/rank_0" && echo "old" >"$a/ranks/rank_0/keep"
run "$sappc" -n 8 --all-ranks "$a/ranks/" "$mlp"
check "--all-ranks into an existing directory: merged, other files kept" \
	eval 'test "$rc" = 0 && test "$(ls "$a/ranks" | wc -l)" = 8 && test -s "$a/ranks/rank_7/sapp_mlp_validate_0000.ir" &&
	test "$(cat "$a/ranks/rank_0/keep")" = old && no_temp_left "$a/ranks"'
run "$sappc" -n 8 --all-ranks "$a/ranks-new" "$a/no-such-input.ir"
check "--all-ranks with an unreadable input: no directory created" eval 'test "$rc" = 3 && test ! -e "$a/ranks-new"'

# standard output: a write error is exit 3 in every mode, and the files of
# the run are not written
if [ -w /dev/full ]; then
	for args in "" "--passes=" "--stop-after=verify" "-o -" "--report" "--report --report-format=json" \
		"--simulate --forward-only" "--explain=matmul" "--report=- -o -"; do
		"$sappc" -n 2 $args "$mlp" >/dev/full 2>"$tmp/err"; rc=$?
		check "standard output on a full device (${args:-the IR}): exit 3, said once" \
			eval 'test "$rc" = 3 && test "$(grep -c "write error on standard output" "$tmp/err")" = 1'
	done
	seed "$a/plan.json"
	"$sappc" -n 2 --simulate --forward-only --strategy-out "$a/plan.json" "$mlp" >/dev/full 2>/dev/null
	check "standard output on a full device: --strategy-out untouched" untouched "$a/plan.json"
else
	skip "standard output on a full device" "no /dev/full"
fi

# permission bits, owner and symbolic links
seed "$a/perm.ir" "$a/perm.json" "$a/perm.svg"
chmod 640 "$a/perm.ir"; chmod 600 "$a/perm.json"; chmod 604 "$a/perm.svg"
run "$sappc" -n 2 -o "$a/perm.ir" --strategy-out "$a/perm.json" --svg "$a/perm.svg" "$mlp"
check "an existing output keeps its permission bits" \
	eval 'test "$rc" = 0 && test "$(stat -c %a "$a/perm.ir" "$a/perm.json" "$a/perm.svg" | tr "\n" " ")" = "640 600 604 " &&
	! untouched "$a/perm.ir"'
(umask 027 && "$sappc" -o "$a/umask.ir" "$tmp/good.ir")
check "a new output gets the umask's bits (027: 640)" test "$(stat -c %a "$a/umask.ir")" = 640
seed "$a/target.ir"
ln -s target.ir "$a/link.ir"
run "$sappc" -o "$a/link.ir" "$tmp/good.ir"
check "-o on a symbolic link writes its target" \
	eval 'test "$rc" = 0 && test -L "$a/link.ir" && cmp -s "$a/target.ir" "$tmp/good.out"'
ln -s newtarget.ir "$a/dangling.ir"
run "$sappc" --report="$a/dangling.ir" "$tmp/good.ir"
check "--report on a dangling symbolic link creates its target" \
	eval 'test "$rc" = 0 && test -L "$a/dangling.ir" && test -s "$a/newtarget.ir"'
ln -s loop1 "$a/loop2" && ln -s loop2 "$a/loop1"
run "$sappc" -o "$a/loop1" "$tmp/good.ir"
check "-o on a cycle of links: exit 3" eval 'test "$rc" = 3 && test -L "$a/loop1"'
# a link into /proc (as /dev/stdout is): the file behind it is open already,
# write it in place and never rename over the link (/dev/stdout itself is
# not used: a broken sappc run as root would replace it)
ln -s /proc/self/fd/1 "$a/stdout-link"
"$sappc" -o "$a/stdout-link" "$tmp/good.ir" >"$a/redirected" 2>"$tmp/err"; rc=$?
check "-o on a link to /proc/self/fd/1: written in place, the link kept" \
	eval 'test "$rc" = 0 && test -L "$a/stdout-link" && cmp -s "$a/redirected" "$tmp/good.out"'
"$sappc" -o "$a/stdout-link" "$tmp/good.ir" 2>"$tmp/err" | cat >"$a/piped"
check "-o on a link to /proc/self/fd/1, a pipe: written in place" cmp -s "$a/piped" "$tmp/good.out"
check "links: no temporary file left" no_temp_left "$a"

# killed: the temporaries go with the process (a closed pipe: SIGPIPE while
# the IR is written, after the search committed --strategy-out; SIGTERM
# while waiting for a FIFO's reader, --strategy-out committed)
mkdir "$tmp/sig"
"$sappc" -n 8 --strategy-out "$tmp/sig/p.json" "$tmp/big.ir" 2>/dev/null | head -c 1 >/dev/null
check "killed by SIGPIPE: no output, no temporary file" test -z "$(ls -A "$tmp/sig")"
mkfifo "$tmp/sig/fifo"
"$sappc" -n 8 --strategy-out "$tmp/sig/p.json" -o "$tmp/sig/fifo" "$mlp" 2>/dev/null &
pid=$!
for i in $(seq 100); do ls "$tmp/sig" | grep -q 'p\.json\.tmp' && break; sleep 0.1; done
kill -TERM "$pid"; wait "$pid"; rc=$?
check "killed by SIGTERM: dies of it, no output, no temporary file" \
	eval 'test "$rc" = 143 && test "$(ls -A "$tmp/sig")" = fifo'

# a full file system (a tmpfs filled up, in a private mount namespace):
# graphviz must not end the process, every output says so, nothing is left
full_fs() {
	local u=-m
	[ "$root" = 1 ] || u=-rm
	unshare $u sh -c 'mnt=$1 && mount -t tmpfs -o size=64k tmpfs "$mnt" || exit 99
		cat /dev/zero >"$mnt/.fill" 2>/dev/null
		shift; "$@" >/dev/null 2>"$0/err"; echo "rc=$?" >"$0/rc"; ls -A "$mnt" | grep -vx .fill >"$0/ls"; exit 0' \
		"$tmp" "$tmp/full" "$@"
}
mkdir "$tmp/full"
if full_fs true && [ "$(cat "$tmp/rc")" = rc=0 ]; then
	for args in "--svg $tmp/full/g.svg" "--dot $tmp/full/g.dot" "-o $tmp/full/out.ir" "--report=$tmp/full/r.txt" \
		"--strategy-out $tmp/full/p.json" "--all-ranks $tmp/full/ranks"; do
		full_fs "$sappc" -n 8 $args "$mlp"
		check "full file system (${args%%[ =]*}): exit 3, 'No space left on device', nothing left" \
			eval 'test "$(cat "$tmp/rc")" = rc=3 && has "No space left on device" "$tmp/err" && test ! -s "$tmp/ls" &&
			! has "gvwrite" "$tmp/err"'
	done
	rm -f "$tmp/rc" "$tmp/ls"
else
	skip "full file system" "cannot mount a tmpfs (no unshare or no user namespaces)"
fi

echo "1..$n"
[ "$fails" = 0 ]
