#!/bin/bash
# ckpt.sh - TAP: the bytes of MindSpore's checkpoint files that sappc writes.
# Each case writes a strategy checkpoint (--strategy-out FILE.ckpt) or a
# group checkpoint (--group-ckpt-out), decodes it with protoc against
# backend/node_strategy.proto, and compares the text with the golden
# testsuite/ckpt/NAME.txt (--update rewrites them; review with git diff).
# The decode fails on any byte that is not the schema's, so the test is
# also the check that MindSpore's own protobuf library would parse the file.
# Without protoc (Debian's protobuf-compiler, which ./bootstrap installs)
# every case is a TAP skip.
set -u
export LC_ALL=C
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
sappc=${SAPPC:-$top/sappc}
protoc=${PROTOC:-$(command -v protoc || true)}
update=0
[ "${1:-}" = --update ] && update=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sappc-ckpt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

# name message sample args (the output file is added)
cases=(
	"strategy_mlp_n8 ParallelStrategyMap sapp_mlp -n 8"
	"strategy_cnn_n16_rank9 ParallelStrategyMap cnn -n 16 --rank 9"
	"strategy_hybrid_pp_rank5 ParallelStrategyMap hybrid_mlp -n 8 --pipeline-stages=2 --rank 5"
	"strategy_llama_opt ParallelStrategyMap llama_layer -n 8 --rank 3 --enable-parallel-optimizer"
	"strategy_mlp_opt_k2 ParallelStrategyMap sapp_mlp -n 16 --rank 6 --enable-parallel-optimizer --optimizer-weight-shard-size=2"
	"strategy_mlp_n1 ParallelStrategyMap sapp_mlp -n 1"
	"groups_mlp_n8 ParallelGroupMap sapp_mlp -n 8"
	"groups_llama_opt ParallelGroupMap llama_layer -n 8 --rank 3 --enable-parallel-optimizer"
	"groups_mlp_opt_k2 ParallelGroupMap sapp_mlp -n 16 --rank 6 --enable-parallel-optimizer --optimizer-weight-shard-size=2"
	"groups_hybrid_pp_rank5 ParallelGroupMap hybrid_mlp -n 8 --pipeline-stages=2 --rank 5"
	"groups_mlp_n1 ParallelGroupMap sapp_mlp -n 1"
)
for c in "${cases[@]}"; do
	read -r name msg sample args <<<"$c"
	n=$((n + 1))
	if [ -z "$protoc" ]; then
		echo "ok $n # SKIP $name: protoc is not installed (apt-get install protobuf-compiler)"
		continue
	fi
	opt=--strategy-out
	[ "$msg" = ParallelGroupMap ] && opt=--group-ckpt-out
	bad=""
	# shellcheck disable=SC2086
	if ! "$sappc" $args $opt "$tmp/f.ckpt" -o /dev/null "$top/ir-samples/$sample.ir" 2>"$tmp/err"; then
		bad="sappc failed"
	elif ! "$protoc" --proto_path="$top/backend" --decode="mindspore.straspb.$msg" node_strategy.proto \
		<"$tmp/f.ckpt" >"$tmp/f.txt" 2>>"$tmp/err"; then
		bad="protoc --decode=$msg fails"
	elif [ "$update" = 1 ]; then
		cp "$tmp/f.txt" "$top/testsuite/ckpt/$name.txt"
	elif ! diff "$top/testsuite/ckpt/$name.txt" "$tmp/f.txt" >"$tmp/err"; then
		bad="decoded file differs from ckpt/$name.txt"
	fi
	if [ -z "$bad" ]; then
		echo "ok $n - $name: $sample $args"
	else
		fails=$((fails + 1))
		echo "not ok $n - $name: $bad"
		head -20 "$tmp/err" | sed 's/^/# /'
	fi
done
echo "1..$n"
[ "$fails" = 0 ]
