# --auto-pipeline on a graph planned for inference (--phase=predict): the memory model (weights,
# gradients, optimizer states, activations under recomputation) is a training one, so the note says
# the stage number is kept.
"${GEN:-$(dirname "$0")/../gen/gen-transformer}" -L 4 -b 8 -s 32 -H 64 -n 4 -f 128 -v 128
