# A 2-layer LLaMA-style step whose every decoder layer called recompute(): all their scopes start
# `recompute_`.  The scope does not say which cell called it; the layers are the numbered children
# of the CellList under the deepest common scope, so each layer is a cell of its own: its last Add
# (the layer's output, read by the next layer) is kept (checkpoint), the rest of the layer is
# duplicated into the backward, one recompute_sub_graph per layer.
"${GEN:-$(dirname "$0")/../gen/gen-transformer}" -L 2 -b 2 -s 8 -H 32 -n 2 -f 64 -v 32 |
	sed 's|(Default/network-LlamaForCausalLM/model-LlamaModel/layers-CellList/|(recompute_Default/network-LlamaForCausalLM/model-LlamaModel/layers-CellList/|'
