# gen-transformer -a fa-bnsd writes ir-samples/llama_fa_bnsd.ir (after its 18 lines of notes) byte for
# byte, and the generated graph plans and simulates on 4 devices.
g="${GEN:-$(dirname "$0")/../gen/gen-transformer}"
flags="-L 1 -b 8 -s 64 -H 256 -n 8 -f 512 -v 1024 -a fa-bnsd"
# shellcheck disable=SC2086
cmp -s <("$g" $flags) <(tail -n +19 "$(dirname "$0")/../../ir-samples/llama_fa_bnsd.ir") && "$g" $flags
