#!/bin/bash
# run.sh SRCDIR HARNESS SECONDS - runs a libFuzzer harness for a bounded time
# over a corpus seeded from ir-samples/, testsuite/excerpts/, the error
# tests and the strategy checkpoints of testsuite/ckpt/ (copied, so the
# source tree is never written).  A crash or leak
# leaves its input in testsuite/fuzz/artifacts/ and fails the run: turn it
# into a regression test in testsuite/errors/.
set -u
src=$1
harness=$2
secs=${3:-60}
corpus=$(mktemp -d "${TMPDIR:-/tmp}/sappc-corpus.XXXXXX")
trap 'rm -rf "$corpus"' EXIT
for f in "$src"/ir-samples/*.ir "$src"/testsuite/excerpts/*.ir "$src"/testsuite/errors/*.ir \
	"$src"/testsuite/errors/*.bin "$src"/testsuite/*/*.ir "$src"/testsuite/ckpt/*.ckpt "$src"/testsuite/ckpt/*.ms.json; do
	[ -f "$f" ] && cp "$f" "$corpus/$(basename "$(dirname "$f")")-$(basename "$f")"
done
mkdir -p testsuite/fuzz/artifacts
"$harness" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
	-artifact_prefix=testsuite/fuzz/artifacts/ -print_final_stats=1 "$corpus" 2>&1 | tail -15
status=${PIPESTATUS[0]}
echo "fuzz: exit status $status after ${secs}s"
exit "$status"
