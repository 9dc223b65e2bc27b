#!/bin/sh
# summary.sh DIR - prints "N passed, N failed" from the automake .trs files
# under DIR (each test script counts its TAP results).
dir=${1:-.}
find "$dir" -name '*.trs' -exec cat {} + 2>/dev/null | awk '
/^:test-result: (PASS|XFAIL|SKIP)/ { p++ }
/^:test-result: (FAIL|XPASS|ERROR)/ { f++ }
END { printf "%d passed, %d failed\n", p, f }'
