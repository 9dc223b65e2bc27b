# A 2-layer LLaMA-style training step with FlashAttentionScore (BSH) and SwiGLU, every attention
# cell recomputed: two sub-graphs, FlashAttentionScore and its TupleGetItem elements duplicated
# into the backward; --simulate agrees with one device and each duplicate with its origin.
"${GEN:-$(dirname "$0")/../gen/gen-transformer}" -a fa-bsh -L 2 -b 4 -s 16 -H 64 -n 4 -f 128 -v 64
