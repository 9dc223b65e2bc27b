# A 1-layer LLaMA-style training step with FlashAttentionScore (BSH), its attention cell recomputed:
# FlashAttentionScore is duplicated with the TupleGetItems the forward and its bprop read (those of
# the bprop keep their Gradients/... scope, as MindSpore recomputes the bprop's tuple_getitems); the
# FlashAttentionScoreGrad reads the duplicates (target_grad).
"${GEN:-$(dirname "$0")/../gen/gen-transformer}" -a fa-bsh -L 1 -b 4 -s 16 -H 64 -n 4 -f 128 -v 64
