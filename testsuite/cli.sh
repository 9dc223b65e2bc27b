#!/bin/bash
# cli.sh - what sappc's command line does that a golden file cannot show;
# prints TAP.  Golden cases of options live in testsuite/cli/ (run.sh);
# here: exit statuses of I/O failures (3), atomic output (-o, --svg), runs
# that fail leaving files alone, standard input, --time-passes, SVG.
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
echo "1..$n"
[ "$fails" = 0 ]
