#!/bin/bash
# cmp.sh REF_SAPPC NEW_SAPPC [BIG.ir] - the reader's speed work must not
# change a byte (issue 18): run both binaries on every sample (printed as
# read, and through the default pipeline at 8 devices), on every golden
# input of testsuite/ (the error goldens' file:line:col included), and on
# BIG.ir (default: a generated 4096-layer transformer) at 4096 devices, and
# `cmp` stdout, stderr and the exit status.  Prints one line per difference
# and "N compared, N differ"; exit 1 when something differs.
set -u
ref=$1 new=$2 big=${3:-}
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-cmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C
n=0 bad=0
one() { # dir label args...
	local dir=$1 label=$2
	shift 2
	(cd "$dir" && "$ref" "$@" >"$tmp/ref.out" 2>"$tmp/ref.err"; echo $? >"$tmp/ref.code")
	(cd "$dir" && "$new" "$@" >"$tmp/new.out" 2>"$tmp/new.err"; echo $? >"$tmp/new.code")
	n=$((n + 1))
	for k in out err code; do
		if ! cmp -s "$tmp/ref.$k" "$tmp/new.$k"; then
			echo "differs ($k): $label: $*"
			bad=$((bad + 1))
			break
		fi
	done
}
for f in "$top"/ir-samples/*.ir; do
	one "$tmp" "$(basename "$f")" --passes= "$f"
	one "$tmp" "$(basename "$f")" -n 8 "$f"
done
# every golden input with its own flags (reading only: these are the
# reader's error messages and positions)
for f in "$top"/testsuite/*/*.ir; do
	args=$(sed -n '1s/^# args: //p' "$f")
	case $args in *--simulate*|*-o\ *|*--dot*|*--svg*|*--html*|*--report*|*--all-ranks*|*--strategy-out*|*ckpt-out*) continue ;; esac
	# shellcheck disable=SC2086
	one "$(dirname "$f")" "${f#"$top"/}" $args "$(basename "$f")"
done
if [ -z "$big" ]; then
	big=$tmp/big.ir
	"$top/testsuite/gen/gen-transformer" -L 4096 -o "$big" 2>/dev/null ||
		"$(dirname "$new")/testsuite/gen/gen-transformer" -L 4096 -o "$big"
fi
one "$tmp" "4096 layers, print" --passes= "$big"
one "$tmp" "4096 layers, rank graph" -n 4096 "$big"
echo "$n compared, $bad differ"
[ "$bad" = 0 ]
