#!/bin/bash
# docs.sh - TAP: the documentation matches the program.
#   - both man pages are lint-clean (mandoc -T lint, or groff -ww -z);
#   - every long option sappc accepts is in --help and in sappc(1);
#   - every pass of passes.def is in --help and in sappc(1);
#   - the README's first code block holds exactly two command lines.
set -u
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
build=$(dirname "$sappc")
man1=$build/man/sappc.1
[ -f "$man1" ] || man1=$top/man/sappc.1
n=0
fails=0
t() { # description, then a command
	local d=$1
	shift
	n=$((n + 1))
	if out=$("$@" 2>&1); then echo "ok $n - $d"; else
		fails=$((fails + 1))
		echo "not ok $n - $d"
		printf '%s\n' "$out" | head -20 | sed 's/^/# /'
	fi
}
lint() {
	if command -v mandoc >/dev/null; then
		local o
		o=$(mandoc -T lint -W warning "$1" 2>&1)
		[ -z "$o" ] || { echo "$o"; return 1; }
	else
		groff -ww -z -mandoc "$1"
	fi
}
t "sappc.1 is lint-clean" lint "$man1"
t "sappc-ir.5 is lint-clean" lint "$top/man/sappc-ir.5"

help=$("$sappc" --help)
manpage=$(cat "$man1")
opts=$(sed -n 's/^[[:space:]]*{"\([a-z-]*\)", \(no\|required\|optional\)_argument.*/\1/p' "$top/sappc.c" | sort -u)
for o in $opts; do
	t "--$o is in --help" grep -q -- "--$o" <<<"$help"
	t "--$o is in sappc(1)" grep -q -- "Fl -$o" <<<"$manpage"
done
passes=$(sed -n 's/^PASS(\([a-z_]*\),.*/\1/p' "$top/passes/passes.def")
for p in $passes; do
	t "pass $p is in --help" grep -qw -- "$p" <<<"$help"
	t "pass $p is in sappc(1)" grep -q -- "^.It Cm $p\$" <<<"$manpage"
done
readme_cmds() {
	awk '/^```/ { if (inb) exit; inb = 1; next } inb' "$top/README.md" | grep -c .
}
t "README's first code block holds two command lines" test "$(readme_cmds)" = 2
echo "1..$n"
[ "$fails" = 0 ]
