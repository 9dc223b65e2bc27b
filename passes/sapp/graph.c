/* graph.c - SAPP's two views of the module: the operator list and the rec
 * graph (spec sapp-search.md §1).
 *
 * Operator list: every primitive CNode that MindSpore would give an
 * OperatorInfo (compute operators; not Load/Depend/UpdateState/MakeTuple/
 * TupleGetItem/Return, communication or parameters), in module order, after
 * the VirtualDataset.  Graph inputs (entry parameters without a default) are
 * the dataset: unless the graph has an explicit _VirtualDataset node, an
 * implicit one (operator 0, no IR node) produces all of them.  Producers are
 * found by looking through Load/Depend/TupleGetItem/StopGradient.
 *
 * Rec graph (§1.2-1.7): one RecNode per operator with 4-D tensors, then the
 * eliminated operators (OPF_ELIMINATE in ops.def, unless pinned) are
 * contracted in index order: their producers are wired to their consumers,
 * Transpose/Reshape mappings compose along the contracted edges, a consumer's
 * input slot is taken over by the eliminated node's first producer and the
 * other producers become "aux" producers of that slot.
 * Deviations from MindSpore, for linear size on deep residual networks:
 *   - an edge that can never be "adjacent" (its mapping is unknown, or,
 *     towards a kept operator, the mapped shape equals none of the
 *     operator's inputs) is not materialised; such edges never add a
 *     redistribution cost (§1.7 ONLY_REDIST_WITH_SAME_SHAPE);
 *   - each input slot and aux entry carries the mapping of its own path;
 *   - aux producers stop at a join (see eliminate()).
 */
#include <string.h>

#include "sapp.h"

const char *const sapp_rectype_name[REC_COUNT_] = {
#define X(t) #t,
	SAPP_RECTYPES(X)
#undef X
};

/* ------------------------------------------------------------ operator types (§1.1) */

/* ops.def family -> rec type; the per-op exceptions follow in sapp_rectype_of */
static const uint8_t family_rectype[] = {
	[FAM_OPAQUE] = REC_UnknownType,     [FAM_STRUCT] = REC_UnknownType,
	[FAM_MATMUL] = REC_MatMul,          [FAM_BATCHMATMUL] = REC_BatchMatMul,
	[FAM_CONV] = REC_Convolution,       [FAM_POOL] = REC_Pooling,
	[FAM_BATCHNORM] = REC_BatchNorm,    [FAM_LAYERNORM] = REC_LayerNorm,
	[FAM_RMSNORM] = REC_RmsNorm,        [FAM_ELEMWISE] = REC_ElmWiseOp,
	[FAM_UNARY] = REC_ElmWiseOp,        [FAM_BIASADD] = REC_BiasAdd,
	[FAM_SOFTMAX] = REC_Softmax,        [FAM_REDUCE] = REC_Reduce,
	[FAM_RESHAPE] = REC_Reshape,        [FAM_TRANSPOSE] = REC_ElmWiseOp, /* sic, §1.1 */
	[FAM_FLATTEN] = REC_Flatten,        [FAM_GATHER] = REC_GatherV2,
	[FAM_ONEHOT] = REC_OneHot,          [FAM_STRIDEDSLICE] = REC_StridedSlice,
	[FAM_CONCAT] = REC_ElmWiseOp,       [FAM_SPLIT] = REC_ElmWiseOp,
	[FAM_CAST] = REC_Cast,              [FAM_LOSS] = REC_SoftmaxCrossEntropyWithLogits,
	[FAM_SPARSELOSS] = REC_SparseSoftmaxCrossEntropyWithLogits,
	[FAM_COMM] = REC_UnknownType,       [FAM_P2P] = REC_UnknownType,
	[FAM_VIRTUAL] = REC_Virtual,        [FAM_EXPANDDIMS] = REC_ExpandDims,
	[FAM_SQUEEZE] = REC_Squeeze,        [FAM_ARGWITHVALUE] = REC_ArgWithValue,
	/* issue 19: MindSpore's DictOpType (rec_parse_graph.h) has
	 * FlashAttentionScore, PReLU, L2Normalize (element-wise) and CumSum;
	 * it names neither the fused rotary embedding nor Swiglu, which sappc
	 * treats as the element-wise operators they are (their axis whole) */
	[FAM_ATTENTION] = REC_FlashAttentionScore, [FAM_ROPE] = REC_ElmWiseOp,
	[FAM_SWIGLU] = REC_ElmWiseOp,       [FAM_PRELU] = REC_PReLU,
	[FAM_L2NORM] = REC_ElmWiseOp,       [FAM_CUM] = REC_Cum,
	/* Tile is in the element-wise list; LpNorm's OperatorInfo is a
	 * BatchParallelInfo (kRecBatchParallel); Dense, Slice, TopK and Sort
	 * are in neither table: kRecUnknownType, kept and never cut */
	[FAM_TILE] = REC_ElmWiseOp,         [FAM_LPNORM] = REC_BatchParallel,
	[FAM_DENSE] = REC_UnknownType,      [FAM_SLICE] = REC_UnknownType,
	[FAM_SORT] = REC_UnknownType,
	/* DictOpType maps GetNext to kRecUnknownType (sapp-search.md §1);
	 * without tensor operands it is no operator of the search anyway: its
	 * outputs are the implicit VirtualDataset's inputs (sapp_build) */
	[FAM_GETNEXT] = REC_UnknownType,
	/* ScatterDiv, RandomChoiceWithMask and the MoE routing operators are
	 * not in DictOpType either (mindspore-ai/mindspore, mindspore/ccsrc/
	 * frontend/parallel/auto_parallel/rec_core/rec_parse_graph.h) */
	[FAM_SCATTER] = REC_UnknownType,    [FAM_UNSPLIT] = REC_UnknownType,
	/* nor GroupedMatmul, whose lists have no slot in the search anyway
	 * (is_strategy_op) */
	[FAM_GMM] = REC_UnknownType,
};

int sapp_rectype_of(const Node *n)
{
	if (!n)
		return REC_Virtual;
	const OpInfo *oi = ir_opinfo(n);
	if (n->op == OP_UNKNOWN)
		return REC_UnknownType;
	if (oi->flags & OPF_ACTIVATION)
		return REC_ReLU;
	switch (n->op) {
	case OP_SigmoidCrossEntropyWithLogits:
		return REC_ReLU;
	case OP_Tile:
	case OP_Assign:
		return REC_ElmWiseOp;
	case OP_PromptFlashAttention:
	case OP_IncreFlashAttention:
		/* not in DictOpType and their OperatorInfo is neither a
		 * StandAloneInfo nor a BatchParallelInfo: kRecUnknownType */
		return REC_UnknownType;
	default:
		break;
	}
	return oi->family < sizeof family_rectype ? family_rectype[oi->family] : REC_UnknownType;
}

int sapp_dataset_param(const Node *p)
{
	return p && p->kind == NK_PARAM && !p->has_default && p->g && p->g->is_entry &&
	       p->out.shape.kind == SK_DIMS;
}

/* ------------------------------------------------------------ attribute helpers */

static const Value *operand(const Node *n, int i)
{
	return i >= 0 && (uint32_t)i < n->nargs ? &n->args[i] : NULL;
}

void sapp_attr_init(Sapp *S)
{
	static const char *const names[SA_COUNT_] = {
#define X(a) #a,
		SAPP_ATTRS(X)
#undef X
	};
	for (int i = 0; i < SA_COUNT_; i++)
		S->attr[i] = intern_cstr(names[i]);
}

/* attribute SA_* of list l, NULL if absent */
const Value *sapp_attr(const Sapp *S, const AttrList *l, int attr)
{
	return ir_attr_get_sym(l, S->attr[attr]);
}

/* an integer from operand `opnd` (literal) or primitive attribute `attr`: 1 found */
int sapp_attr_int(const Sapp *S, const Node *n, int opnd, int attr, int64_t *out)
{
	const Value *v = operand(n, opnd);
	if (v && v->kind != V_NODE && value_get_int(v, out))
		return 1;
	v = sapp_attr(S, &n->pattrs, attr);
	return v && value_get_int(v, out);
}

/* an int list (tuple, list or one int): count, or -1 if absent */
int sapp_attr_ints(const Sapp *S, const Node *n, int opnd, int attr, int64_t *out, int max)
{
	const Value *v = operand(n, opnd);
	int k = -1;
	if (v && v->kind != V_NODE)
		k = value_int_list(v, out, max);
	if (k < 0 && (v = sapp_attr(S, &n->pattrs, attr)) != NULL)
		k = value_int_list(v, out, max);
	return k;
}

int sapp_attr_bool(const Sapp *S, const Node *n, int opnd, int attr, int dflt)
{
	const Value *v = operand(n, opnd);
	int b;
	if (v && v->kind != V_NODE && value_truthy(v, &b))
		return b;
	if ((v = sapp_attr(S, &n->pattrs, attr)) != NULL && value_truthy(v, &b))
		return b;
	return dflt;
}

/* ------------------------------------------------------------ operator list */

static const Abs *arg_abs(const Node *n, uint32_t i)
{
	if (i < n->nin_types)
		return &n->in_types[i];
	if (i < n->nargs && n->args[i].kind == V_NODE && n->args[i].u.node)
		return &n->args[i].u.node->out;
	return NULL;
}

static int is_tensor_abs(const Abs *a)
{
	return a && a->shape.kind == SK_DIMS;
}

/* The node whose operands are n's tensor inputs: a Concat or an AddN reads
 * the elements of its MakeTuple, one strategy each (MindSpore's ConcatInfo
 * and AddNInfo, ops_info/concat_info.cc and addn_info.cc, take the tuple's
 * elements as their inputs). */
static const Node *input_node(const Node *n)
{
	if ((op_table[n->op].family == FAM_CONCAT || n->op == OP_AddN) && n->nargs >= 1 && n->args[0].kind == V_NODE &&
	    ir_node_is_op(n->args[0].u.node, OP_MakeTuple))
		return n->args[0].u.node;
	return n;
}

static int is_strategy_op(const Node *n)
{
	if (n->dead || n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return 0;
	switch (op_table[n->op].family) {
	case FAM_STRUCT:
	case FAM_COMM:
	case FAM_P2P:
		return 0;
	default:
		break;
	}
	if (n->op == OP_Partial || n->op == OP_Switch || n->op == OP_VirtualDiv || n->op == OP_MirrorOperator)
		return 0;
	/* GroupedMatmul's x and weights come in two lists: the search has no
	 * slot for them, so it gives no strategy and the layouts pass applies
	 * the default (its rule keeps x's rows whole under a group_list) or
	 * the user's */
	if (op_table[n->op].family == FAM_GMM)
		return 0;
	const Node *src = input_node(n);
	for (uint32_t i = 0; i < src->nargs; i++)
		if (is_tensor_abs(arg_abs(src, i)))
			return 1;
	return 0;
}

/* the operator producing operand v (-1: none); *param: the parameter
 * with a value it reads, as node id + 1 (0: none) */
/* A GetNext whose outputs are all tensors of known shape: the dataset */
int sapp_getnext_node(const Node *n)
{
	if (!n || n->dead || !ir_node_is_op(n, OP_GetNext) || n->out.shape.kind != SK_TUPLE || n->out.shape.rank < 1)
		return 0;
	for (int i = 0; i < n->out.shape.rank; i++)
		if (n->out.shape.sub[i].kind != SK_DIMS || n->out.shape.sub[i].rank > MAX_RANK)
			return 0;
	return 1;
}

static int32_t producer_of(const Sapp *S, const Value *v, uint32_t *param)
{
	*param = 0;
	if (v->kind != V_NODE || !v->u.node)
		return -1;
	Node *p = ir_look_through(v->u.node);
	if (!p)
		return -1;
	if (p->kind == NK_PARAM) {
		if (p->has_default)
			*param = p->id + 1;
		return sapp_dataset_param(p) ? S->vd : -1;
	}
	if (p == S->getnext)
		return S->vd;
	return p->id < S->m->next_id ? S->op_of_node[p->id] : -1;
}

static void fill_op(Sapp *S, SappOp *X, Node *n)
{
	Arena *a = S->arena;
	X->n = n;
	X->type = (uint8_t)sapp_rectype_of(n);
	X->op = n ? n->op : UINT16_MAX;
	X->fam = (uint8_t)(n ? op_table[n->op].family : FAM_VIRTUAL);
	X->nspos = -1;
	X->user = n && n->pattrs.n &&
		  (sapp_attr(S, &n->pattrs, SA_in_strategy) || sapp_attr(S, &n->pattrs, SA_out_strategy));
	uint32_t nin = 0, total = 0;
	/* OneHot's first strategy has the rank of its output, indices plus
	 * depth (MindSpore's OneHotInfo::CheckStrategy checks it against the
	 * output shape): its slot is the output's */
	const Shape *onehot = n && X->fam == FAM_ONEHOT && n->out.shape.kind == SK_DIMS ? &n->out.shape : NULL;
	const Node *src = n ? input_node(n) : NULL;
	X->src = src;
	if (n) {
		for (uint32_t i = 0; i < src->nargs; i++) {
			const Abs *ab = arg_abs(src, i);
			if (is_tensor_abs(ab)) {
				total += onehot && !nin ? onehot->rank : ab->shape.rank;
				nin++;
			}
		}
	} else if (S->getnext) {
		const Shape *os = &S->getnext->out.shape;
		for (int i = 0; i < os->rank; i++) {
			nin++;
			total += os->sub[i].rank;
		}
	} else {
		const Graph *g = ir_entry(S->m);
		for (uint32_t i = 0; g && i < g->params.n; i++)
			if (sapp_dataset_param(g->params.a[i])) {
				nin++;
				total += g->params.a[i]->out.shape.rank;
			}
	}
	X->nin = nin;
	/* one block: s, os, dims, arg, prod, param, off, rank */
	size_t orank_max = n && n->out.shape.kind == SK_DIMS ? n->out.shape.rank : MAX_RANK;
	char *blk = arena_alloc(a, (total + orank_max) * sizeof(int64_t) + nin * sizeof(int64_t *) +
					   4 * nin * sizeof(uint32_t) + nin);
	X->s = (int64_t *)blk;
	X->os = X->s + total;
	X->dims = (const int64_t **)(X->os + orank_max);
	X->arg = (uint32_t *)(X->dims + nin);
	X->prod = (int32_t *)(X->arg + nin);
	X->param = (uint32_t *)(X->prod + nin);
	X->off = X->param + nin;
	X->rank = (uint8_t *)(X->off + nin);
	uint32_t k = 0, off = 0;
	if (n) {
		for (uint32_t i = 0; i < src->nargs; i++) {
			const Abs *ab = arg_abs(src, i);
			if (!is_tensor_abs(ab))
				continue;
			const Shape *sh = onehot && !k ? onehot : &ab->shape;
			X->arg[k] = i;
			X->rank[k] = sh->rank;
			X->dims[k] = sh->dims;
			X->off[k] = off;
			off += sh->rank;
			k++;
		}
		const Shape *os = &n->out.shape;
		if (os->kind != SK_DIMS && (os->kind == SK_TUPLE || os->kind == SK_LIST) && os->rank && os->sub &&
		    os->sub[0].kind == SK_DIMS)
			os = &os->sub[0];
		if (os->kind == SK_DIMS) {
			X->orank = os->rank;
			X->odims = os->dims;
		}
		/* LpNorm has no OperatorInfo of its own: MindSpore's fallback
		 * (OperatorInstance, mindspore-ai/mindspore, mindspore/ccsrc/
		 * frontend/parallel/step_parallel_utils.cc) makes it a
		 * BatchParallelInfo only when dimension 0 of its first input and
		 * of its output divide by the stage's devices, else a
		 * StandAloneInfo (kRecStandAlone: all ones); a scalar input or
		 * output is StandAlone too.  Decided with the configured stages,
		 * as MindSpore does when it creates the OperatorInfo. */
		if (X->type == REC_BatchParallel && X->fam == FAM_LPNORM &&
		    (!k || !X->rank[0] || X->dims[0][0] % S->stage_devices != 0 || !X->orank ||
		     X->odims[0] % S->stage_devices != 0))
			X->type = REC_StandAlone;
		if (X->type == REC_MatMul || X->type == REC_BatchMatMul) {
			X->ta = (uint8_t)(sapp_attr_bool(S, n, 2, SA_transpose_a, 0) ||
					  sapp_attr_bool(S, n, -1, SA_transpose_x1, 0));
			X->tb = (uint8_t)(sapp_attr_bool(S, n, 3, SA_transpose_b, 0) ||
					  sapp_attr_bool(S, n, -1, SA_transpose_x2, 0));
		}
	} else if (S->getnext) {
		/* X->arg[k]: the GetNext output k */
		const Shape *os = &S->getnext->out.shape;
		for (int i = 0; i < os->rank; i++, k++) {
			X->arg[k] = (uint32_t)i;
			X->rank[k] = (uint8_t)os->sub[i].rank;
			X->dims[k] = os->sub[i].dims;
			X->off[k] = off;
			off += os->sub[i].rank;
		}
		X->orank = os->sub[0].rank;
		X->odims = os->sub[0].dims;
	} else {
		const Graph *g = ir_entry(S->m);
		for (uint32_t i = 0; g && i < g->params.n; i++) {
			const Node *p = g->params.a[i];
			if (!sapp_dataset_param(p))
				continue;
			X->arg[k] = i;
			X->rank[k] = p->out.shape.rank;
			X->dims[k] = p->out.shape.dims;
			X->off[k] = off;
			off += p->out.shape.rank;
			if (k == 0) {
				X->orank = p->out.shape.rank;
				X->odims = p->out.shape.dims;
			}
			k++;
		}
	}
	if (X->orank > orank_max)
		X->os = arena_alloc(a, (X->orank + 1u) * sizeof *X->os);
	for (uint32_t i = 0; i < total; i++)
		X->s[i] = 1;
}

int sapp_build(Sapp *S)
{
	Module *m = S->m;
	sapp_attr_init(S);
	S->op_of_node = xmalloc((m->next_id + 1) * sizeof *S->op_of_node);
	for (uint32_t i = 0; i <= m->next_id; i++)
		S->op_of_node[i] = -1;
	/* the operators, an explicit VirtualDataset, and graph inputs */
	Vec(Node *) opn = {0};
	Node *explicit_vd = NULL;
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			if (i + 16 < g->nodes.n)
				sapp_prefetch_bytes(g->nodes.a[i + 16], sizeof(Node));
			if (i + 8 < g->nodes.n) {
				sapp_prefetch(g->nodes.a[i + 8]->in_types);
				sapp_prefetch(g->nodes.a[i + 8]->pattrs.a);
			}
			if (!is_strategy_op(n))
				continue;
			vec_push(&opn, n);
			if (n->op == OP_VirtualDataset && !explicit_vd)
				explicit_vd = n;
		}
	}
	int have_inputs = 0;
	const Graph *eg = ir_entry(m);
	for (uint32_t i = 0; eg && i < eg->params.n; i++)
		have_inputs |= sapp_dataset_param(eg->params.a[i]);
	/* dataset sink mode: GetNext hands out the batch, and MindSpore puts
	 * the VirtualDataset on its outputs (sapp-search.md §2) */
	S->getnext = NULL;
	for (uint32_t i = 0; eg && !have_inputs && !S->getnext && i < eg->nodes.n; i++)
		if (sapp_getnext_node(eg->nodes.a[i]))
			S->getnext = eg->nodes.a[i];
	have_inputs |= S->getnext != NULL;
	int implicit_vd = have_inputs && !explicit_vd;
	S->nops = opn.n + (uint32_t)implicit_vd;
	S->ops = arena_alloc(S->arena, (S->nops + 1) * sizeof *S->ops);
	S->vd = -1;
	uint32_t k = 0;
	if (implicit_vd) {
		S->vd = 0;
		fill_op(S, &S->ops[k++], NULL);
	}
	for (uint32_t i = 0; i < opn.n; i++) {
		Node *n = opn.a[i];
		if (i + 16 < opn.n)
			sapp_prefetch_bytes(opn.a[i + 16], sizeof(Node));
		if (i + 8 < opn.n) {
			sapp_prefetch(opn.a[i + 8]->in_types);
			sapp_prefetch(opn.a[i + 8]->pattrs.a);
		}
		if (n == explicit_vd)
			S->vd = (int32_t)k;
		S->op_of_node[n->id] = (int32_t)k;
		fill_op(S, &S->ops[k++], n);
	}
	vec_free(&opn);
	/* producers, then consumers in operator order */
	uint32_t *ncons = xcalloc(S->nops + 1, sizeof *ncons);
	for (uint32_t x = 0; x < S->nops; x++) {
		SappOp *X = &S->ops[x];
		if (x + 16 < S->nops && S->ops[x + 16].n)
			sapp_prefetch(&S->ops[x + 16].n->args);
		if (x + 8 < S->nops && S->ops[x + 8].n)
			sapp_prefetch(S->ops[x + 8].n->args);
		if (x + 4 < S->nops && S->ops[x + 4].n) /* the operand nodes */
			for (uint32_t i = 0; i < S->ops[x + 4].nin; i++) {
				const Value *v = &S->ops[x + 4].src->args[S->ops[x + 4].arg[i]];
				if (v->kind == V_NODE)
					sapp_prefetch(v->u.node);
			}
		for (uint32_t i = 0; i < X->nin; i++) {
			X->param[i] = 0;
			X->prod[i] = X->n ? producer_of(S, &X->src->args[X->arg[i]], &X->param[i]) : -1;
			if (X->prod[i] == (int32_t)x)
				X->prod[i] = -1;
			if (X->prod[i] >= 0)
				ncons[X->prod[i]]++;
		}
	}
	uint32_t total = 0;
	for (uint32_t x = 0; x < S->nops; x++)
		total += ncons[x];
	uint32_t *cop = arena_alloc(S->arena, (total + 1) * sizeof *cop);
	uint32_t *cslot = arena_alloc(S->arena, (total + 1) * sizeof *cslot);
	for (uint32_t x = 0; x < S->nops; x++) {
		S->ops[x].cons_op = cop;
		S->ops[x].cons_slot = cslot;
		cop += ncons[x];
		cslot += ncons[x];
	}
	for (uint32_t y = 0; y < S->nops; y++) {
		SappOp *Y = &S->ops[y];
		for (uint32_t i = 0; i < Y->nin; i++) {
			if (Y->prod[i] < 0)
				continue;
			SappOp *P = &S->ops[Y->prod[i]];
			P->cons_op[P->ncons] = y;
			P->cons_slot[P->ncons] = i;
			P->ncons++;
		}
	}
	free(ncons);
	return 0;
}

/* ------------------------------------------------------------ mappings (§1.7) */

RecMap sapp_map_identity(void)
{
	RecMap m = {{1, 2, 4, 8}, 0};
	return m;
}

static RecMap map_bad(void)
{
	RecMap m = {{0, 0, 0, 0}, 1};
	return m;
}

Dim4 sapp_dim4(const int64_t *d, int r)
{
	Dim4 x = {{1, 1, 1, 1}};
	if (r > 4 || r < 0)
		return x;
	for (int i = 0; i < r; i++)
		x.d[4 - r + i] = d[i];
	return x;
}

RecMap sapp_map_transpose(const int64_t *perm, int r)
{
	if (r > 4 || r < 0)
		return map_bad();
	RecMap m = sapp_map_identity();
	int pad = 4 - r, seen = 0;
	for (int i = 0; i < r; i++) {
		int64_t p = perm[i] < 0 ? perm[i] + r : perm[i];
		if (p < 0 || p >= r || (seen & (1 << p)))
			return map_bad();
		seen |= 1 << p;
		m.g[pad + i] = (uint8_t)(1u << (pad + p));
	}
	return m;
}

/* Reshape: "split" (rank in <= rank out): each output dim is carved from one
 * input dim; "merge": each output dim is the product of consecutive input
 * dims.  Returns 0 when the walk fails (then the mapping is unknown). */
int sapp_map_reshape(const int64_t *in, int rin, const int64_t *out, int rout, RecMap *mp)
{
	*mp = map_bad();
	if (rin > 4 || rout > 4 || rin < 0 || rout < 0)
		return 0;
	Dim4 a = sapp_dim4(in, rin), b = sapp_dim4(out, rout);
	RecMap m = {{0, 0, 0, 0}, 0};
	int f = 0;
	if (rin <= rout) {
		int64_t rem = a.d[0];
		for (int t = 0; t < 4; t++) {
			if (b.d[t] == 1)
				continue;
			while (rem == 1 && f < 3)
				rem = a.d[++f];
			if (b.d[t] <= 0 || rem % b.d[t] != 0)
				return 0;
			m.g[t] = (uint8_t)(1u << f);
			rem /= b.d[t];
		}
		while (rem == 1 && f < 3)
			rem = a.d[++f];
		if (rem != 1)
			return 0;
	} else {
		for (int t = 0; t < 4; t++) {
			if (b.d[t] == 1)
				continue;
			int64_t prod = 1;
			while (prod < b.d[t] && f < 4) {
				if (a.d[f] != 1) {
					m.g[t] |= (uint8_t)(1u << f);
					prod *= a.d[f];
				}
				f++;
			}
			if (prod != b.d[t])
				return 0;
		}
		for (; f < 4; f++)
			if (a.d[f] != 1)
				return 0;
	}
	*mp = m;
	return 1;
}

int sapp_map_is_identity(const RecMap *m)
{
	return m->g[0] == 1 && m->g[1] == 2 && m->g[2] == 4 && m->g[3] == 8 && !m->bad;
}

RecMap sapp_map_compose(RecMap first, RecMap then)
{
	if (first.bad || then.bad)
		return map_bad();
	/* most contracted edges map identically */
	if (sapp_map_is_identity(&first))
		return then;
	if (sapp_map_is_identity(&then))
		return first;
	uint8_t u[16] = {0}; /* u[s] = union of first's groups over the dims in s */
	for (int k = 0; k < 4; k++)
		for (int s = 0; s < 1 << k; s++)
			u[(1 << k) + s] = (uint8_t)(u[s] | first.g[k]);
	RecMap r = {{u[then.g[0] & 15], u[then.g[1] & 15], u[then.g[2] & 15], u[then.g[3] & 15]}, 0};
	return r;
}

/* dst[i] = product of the src dims in group i; 0 if the mapping is unknown */
int sapp_map_shape(const RecMap *m, const Dim4 *src, Dim4 *dst)
{
	if (m->bad)
		return 0;
	for (int i = 0; i < 4; i++) {
		int64_t p = 1;
		for (int k = 0; k < 4; k++)
			if (m->g[i] & (1u << k))
				p *= src->d[k];
		dst->d[i] = p;
	}
	return 1;
}

/* ------------------------------------------------------------ rec graph */

/* type, shapes and own mapping; input shapes only for a kept node (an
 * eliminated one is never asked whether a tensor fits one of its inputs) */
static void rec_node_init(Sapp *S, uint32_t x, int kept)
{
	SappOp *X = &S->ops[x];
	RecNode *R = &S->rec[x];
	R->type = X->type;
	R->pinned = X->pinned;
	R->kept = (uint8_t)kept;
	uint32_t na = X->nin < (uint32_t)S->conf.max_inputs ? X->nin : (uint32_t)S->conf.max_inputs;
	R->nargs = (uint8_t)na;
	R->out = sapp_dim4(X->odims, X->orank <= 4 ? X->orank : 0);
	if (kept) {
		Dim4 ones = {{1, 1, 1, 1}};
		R->arg = arena_alloc(S->arena, (na + 2) * sizeof(Dim4));
		for (uint32_t i = 0; i < na + 2; i++)
			R->arg[i] = i < na && X->rank[i] <= 4 ? sapp_dim4(X->dims[i], X->rank[i]) : ones;
		/* MatMul and BatchMatMul operands are stored logically: A = I x K, B = K x J */
		if (R->type == REC_MatMul || R->type == REC_BatchMatMul) {
			for (int i = 0; i < 2 && i < (int)na; i++)
				if ((i == 0 ? X->ta : X->tb) && X->rank[i] >= 2) {
					int64_t t = R->arg[i].d[2];
					R->arg[i].d[2] = R->arg[i].d[3];
					R->arg[i].d[3] = t;
				}
		}
	}
	R->own = sapp_map_identity();
	if (X->op == OP_Transpose && X->nin) {
		int64_t perm[MAX_RANK];
		int r = sapp_attr_ints(S, X->n, 1, SA_perm, perm, MAX_RANK);
		R->own = r == X->rank[0] ? sapp_map_transpose(perm, r) : map_bad();
	} else if (X->op == OP_Reshape && X->nin) {
		sapp_map_reshape(X->dims[0], X->rank[0], X->odims, X->orank, &R->own);
	}
}

void sapp_avec_grow(Arena *a, void **p, uint32_t *cap, size_t elt, uint32_t n)
{
	uint32_t nc = *cap ? *cap * 2 : 2;
	void *q = arena_alloc(a, nc * elt);
	if (n)
		memcpy(q, *p, n * elt);
	*p = q;
	*cap = nc;
}

/* (producer, consumer) -> position in the producer's out list.  Most out
 * lists are short and are scanned; a list that grows past EDGE_SCAN gets
 * its edges indexed in a hash table (and keeps them indexed), so edge
 * lookups stay O(1) however many consumers a node collects. */
#define EDGE_SCAN 8

static uint64_t edge_key(uint32_t p, uint32_t c)
{
	return (((uint64_t)p << 32) | c) + 1;
}

static uint32_t edge_home(const EdgeSet *e, uint64_t k)
{
	uint64_t h = k * 0x9E3779B97F4A7C15ULL;
	return (uint32_t)(h >> 32) & (e->cap - 1);
}

static EdgeSlot *edge_slot(const EdgeSet *e, uint64_t k)
{
	for (uint32_t i = edge_home(e, k);; i = (i + 1) & (e->cap - 1)) {
		if (e->slot[i].key == 0)
			return NULL;
		if (e->slot[i].key == k)
			return &e->slot[i];
	}
}

static void edge_insert(EdgeSet *e, uint64_t k, uint32_t pos)
{
	uint32_t i = edge_home(e, k);
	while (e->slot[i].key != 0 && e->slot[i].key != k)
		i = (i + 1) & (e->cap - 1);
	if (e->slot[i].key == 0)
		e->live++;
	e->slot[i].key = k;
	e->slot[i].val = pos;
}

/* room for n live edges at most half full */
static void edge_reserve(EdgeSet *e, uint32_t n)
{
	uint32_t cap = 1024;
	while (cap < 2 * n + 2)
		cap *= 2;
	if (cap <= e->cap)
		return;
	EdgeSet old = *e;
	e->cap = cap;
	e->slot = xcalloc(cap, sizeof *e->slot);
	e->live = 0;
	for (uint32_t i = 0; i < old.cap; i++)
		if (old.slot[i].key)
			edge_insert(e, old.slot[i].key, old.slot[i].val);
	free(old.slot);
}

static void edge_put(EdgeSet *e, uint32_t p, uint32_t c, uint32_t pos)
{
	if ((e->live + 1) * 2 > e->cap)
		edge_reserve(e, 2 * e->live + 2);
	edge_insert(e, edge_key(p, c), pos);
}

/* linear probing without tombstones: pull later entries of the probe run
 * back into the hole */
static void edge_delete(EdgeSet *e, uint32_t p, uint32_t c)
{
	EdgeSlot *s = edge_slot(e, edge_key(p, c));
	uint32_t m = e->cap - 1, i = (uint32_t)(s - e->slot);
	e->live--;
	for (uint32_t j = (i + 1) & m;; j = (j + 1) & m) {
		if (e->slot[j].key == 0)
			break;
		uint32_t h = edge_home(e, e->slot[j].key);
		/* the entry at j may move to i when its home is not in (i, j] */
		if (((j - h) & m) >= ((j - i) & m)) {
			e->slot[i] = e->slot[j];
			i = j;
		}
	}
	e->slot[i].key = 0;
}

/* position of p -> c in p's out list, -1 if there is no such edge */
static int32_t edge_pos(const Sapp *S, uint32_t p, uint32_t c)
{
	const RecNode *P = &S->rec[p];
	if (P->hashed) {
		const EdgeSlot *i = edge_slot(&S->edges, edge_key(p, c));
		return i ? (int32_t)i->val : -1;
	}
	for (uint32_t j = 0; j < P->outs.n; j++)
		if (P->outs.a[j].to == c)
			return (int32_t)j;
	return -1;
}

static RecEdge *find_edge(const Sapp *S, uint32_t p, uint32_t c)
{
	int32_t i = edge_pos(S, p, c);
	return i < 0 ? NULL : &S->rec[p].outs.a[i];
}

static void add_edge(Sapp *S, uint32_t p, uint32_t c, RecMap map)
{
	RecNode *P = &S->rec[p];
	RecEdge e = {c, map};
	avec_push(S->arena, &P->outs, e);
	if (P->hashed) {
		edge_put(&S->edges, p, c, P->outs.n - 1);
	} else if (P->outs.n > EDGE_SCAN) {
		P->hashed = 1;
		for (uint32_t j = 0; j < P->outs.n; j++)
			edge_put(&S->edges, p, P->outs.a[j].to, j);
	}
}

/* remove p -> c; returns its mapping through *map, 0 if there was none */
static int remove_edge(Sapp *S, uint32_t p, uint32_t c, RecMap *map)
{
	int32_t pos = edge_pos(S, p, c);
	if (pos < 0)
		return 0;
	RecNode *P = &S->rec[p];
	*map = P->outs.a[pos].map;
	uint32_t last = P->outs.n - 1;
	if (P->hashed)
		edge_delete(&S->edges, p, c);
	if ((uint32_t)pos != last) {
		P->outs.a[pos] = P->outs.a[last];
		if (P->hashed)
			edge_slot(&S->edges, edge_key(p, P->outs.a[pos].to))->val = (uint32_t)pos;
	}
	P->outs.n--;
	return 1;
}

/* would an edge with this mapping ever count (§1.7)?  Only decidable for a
 * consumer that stays in the graph. */
static int edge_useful(const Sapp *S, const RecNode *P, const RecNode *C, const RecMap *map)
{
	if (map->bad)
		return 0;
	if (!C->kept || !S->conf.only_same_shape)
		return 1;
	Dim4 t;
	sapp_map_shape(map, &P->out, &t);
	for (uint32_t a = 0; a < C->nargs; a++)
		if (memcmp(&t, &C->arg[a], sizeof t) == 0)
			return 1;
	return 0;
}

static int aux_has(const RecNode *C, uint32_t node)
{
	for (uint32_t i = 0; i < C->aux.n; i++)
		if (C->aux.a[i].node == node)
			return 1;
	return 0;
}

static int in_has(const RecNode *C, uint32_t node)
{
	for (uint32_t i = 0; i < C->in.n; i++)
		if (C->in.a[i].node == node)
			return 1;
	return 0;
}

static void aux_remove(RecNode *C, uint32_t node)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < C->aux.n; i++)
		if (C->aux.a[i].node != node)
			C->aux.a[k++] = C->aux.a[i];
	C->aux.n = k;
}

/* c now lists node q; only an eliminated node ever reads its users
 * (when it is contracted), so a kept one keeps none.  (This called itself
 * instead of appending: endless recursion for an eliminated q.  Unreached
 * today - nodes are contracted in graph order and operands are defined
 * above their use, so q is always kept by then - but it is what the
 * comment says, and the list it appends to grows in the pass arena: no
 * pointer into it is held across the call.) */
static void add_user(Sapp *S, uint32_t q, uint32_t c)
{
	if (!S->rec[q].kept)
		avec_push(S->arena, &S->rec[q].users, c);
}

static void aux_add(Sapp *S, uint32_t c, uint32_t q, uint32_t idx, RecMap map)
{
	RecNode *C = &S->rec[c];
	if (map.bad || aux_has(C, q))
		return;
	RecAux a = {q, idx, map};
	avec_push(S->arena, &C->aux, a);
	add_user(S, q, c);
}

/* Contract eliminated node x (§1.6).  Its producers are wired to its
 * consumers, a consumer's slot that held x is taken by x's first producer
 * and x's other producers become aux producers of that slot.  x's own aux
 * producers pass on only when x has a single producer (a chain of unary or
 * shape operators); at a join (several producers, e.g. a residual Add) they
 * stop, which keeps the graph linear in a residual stream where MindSpore's
 * lists grow with the depth. */
static void eliminate(Sapp *S, uint32_t x)
{
	RecNode *nodes = S->rec, *X = &nodes[x];
	/* producers of X with the mapping of their edge to X */
	S->prods.n = 0;
	for (uint32_t i = 0; i < X->in.n; i++) {
		int dup = 0;
		for (uint32_t j = 0; j < S->prods.n; j++)
			dup |= S->prods.a[j].node == X->in.a[i].node;
		if (!dup) {
			RecAux a = {X->in.a[i].node, i, X->in.a[i].map};
			vec_push(&S->prods, a);
		}
	}
	int join = S->prods.n > 1;
	if (!join)
		for (uint32_t i = 0; i < X->aux.n; i++) {
			int dup = 0;
			for (uint32_t j = 0; j < S->prods.n; j++)
				dup |= S->prods.a[j].node == X->aux.a[i].node;
			if (!dup)
				vec_push(&S->prods, X->aux.a[i]);
		}
	/* 2: wire every producer to every consumer */
	for (uint32_t pi = 0; pi < S->prods.n; pi++) {
		uint32_t q = S->prods.a[pi].node;
		RecMap pmap;
		if (!remove_edge(S, q, x, &pmap))
			continue; /* never useful: neither are its continuations */
		RecMap through = sapp_map_compose(S->prods.a[pi].map, X->own);
		for (uint32_t j = 0; j < X->outs.n; j++) {
			uint32_t c = X->outs.a[j].to;
			if (c == q || find_edge(S, q, c))
				continue;
			RecMap m = sapp_map_compose(through, X->outs.a[j].map);
			if (edge_useful(S, &nodes[q], &nodes[c], &m))
				add_edge(S, q, c, m);
		}
	}
	/* 3: consumers take over X's slots (every node that lists X, whether or
	 * not an edge to it was worth keeping) */
	for (uint32_t j = 0; j < X->users.n; j++) {
		uint32_t c = X->users.a[j];
		RecNode *C = &nodes[c];
		if (S->stamp[c] == x + 1)
			continue;
		S->stamp[c] = x + 1;
		const RecEdge *xc = find_edge(S, x, c);
		RecMap tail = xc ? sapp_map_compose(X->own, xc->map) : (RecMap){{0, 0, 0, 0}, 1};
		for (uint32_t s = 0; s < C->in.n; s++) {
			if (C->in.a[s].node != x)
				continue;
			if (X->in.n) {
				C->in.a[s].node = X->in.a[0].node;
				C->in.a[s].map = sapp_map_compose(X->in.a[0].map, tail);
				add_user(S, X->in.a[0].node, c);
				aux_remove(C, X->in.a[0].node);
				for (uint32_t i = 1; i < S->prods.n; i++)
					aux_add(S, c, S->prods.a[i].node, s, sapp_map_compose(S->prods.a[i].map, tail));
			} else {
				memmove(&C->in.a[s], &C->in.a[s + 1], (C->in.n - s - 1) * sizeof(RecIn));
				C->in.n--;
				s--;
			}
		}
		for (uint32_t i = 0; i < C->aux.n; i++) {
			if (C->aux.a[i].node != x)
				continue;
			RecAux old = C->aux.a[i];
			RecMap t2 = sapp_map_compose(X->own, old.map);
			if (X->in.n && !in_has(C, X->in.a[0].node) && !aux_has(C, X->in.a[0].node)) {
				C->aux.a[i].node = X->in.a[0].node;
				C->aux.a[i].map = sapp_map_compose(X->in.a[0].map, t2);
				add_user(S, X->in.a[0].node, c);
			} else {
				memmove(&C->aux.a[i], &C->aux.a[i + 1], (C->aux.n - i - 1) * sizeof(RecAux));
				C->aux.n--;
				i--;
			}
			for (uint32_t k = 1; k < S->prods.n; k++)
				aux_add(S, c, S->prods.a[k].node, old.idx, sapp_map_compose(S->prods.a[k].map, t2));
		}
	}
	/* X's out edges go away with it */
	if (X->hashed)
		for (uint32_t j = 0; j < X->outs.n; j++)
			edge_delete(&S->edges, x, X->outs.a[j].to);
	X->outs.n = X->in.n = X->aux.n = X->users.n = 0;
}

/* the slot's producer if an earlier slot of x does not already have it */
static int first_slot(const SappOp *X, uint32_t i)
{
	for (uint32_t j = 0; j < i; j++)
		if (X->prod[j] == X->prod[i])
			return 0;
	return 1;
}

void sapp_rec_build(Sapp *S)
{
	uint32_t nops = S->nops;
	S->rec = arena_alloc(S->arena, (nops + 1) * sizeof *S->rec);
	for (uint32_t x = 0; x < nops; x++) {
		SappOp *X = &S->ops[x];
		if (x + 8 < nops) /* the shapes live in the IR */
			sapp_prefetch(S->ops[x + 8].odims);
		int elim = X->n && (op_table[X->op].flags & OPF_ELIMINATE) && !X->pinned;
		X->elim = (uint8_t)elim;
		rec_node_init(S, x, !elim);
	}
	/* edges: one per (producer, consumer) pair, slots one per operator
	 * input.  Counted first, so that every list starts in one block at its
	 * exact size: slot s of x is useful (towards an adjacent input) or not */
	uint32_t *nusers = xcalloc(nops + 1, sizeof *nusers), *nouts = xcalloc(nops + 1, sizeof *nouts);
	uint32_t nslots = 0, nedges = 0, nuse = 0;
	for (uint32_t x = 0; x < nops; x++) {
		const SappOp *X = &S->ops[x];
		for (uint32_t i = 0; i < X->nin; i++) {
			int32_t p = X->prod[i];
			if (p < 0)
				continue;
			nslots++;
			if (!first_slot(X, i))
				continue;
			if (S->rec[p].kept == 0) {
				nusers[p]++;
				nuse++;
			}
			RecMap id = sapp_map_identity();
			if (edge_useful(S, &S->rec[p], &S->rec[x], &id)) {
				nouts[p]++;
				nedges++;
			}
		}
	}
	RecIn *ins = arena_alloc(S->arena, (nslots + 1) * sizeof *ins);
	uint32_t *users = arena_alloc(S->arena, (nuse + 1) * sizeof *users);
	RecEdge *outs = arena_alloc(S->arena, (nedges + 1) * sizeof *outs);
	for (uint32_t x = 0; x < nops; x++) {
		const SappOp *X = &S->ops[x];
		RecNode *R = &S->rec[x];
		uint32_t nin = 0;
		for (uint32_t i = 0; i < X->nin; i++)
			nin += X->prod[i] >= 0;
		R->in.a = ins;
		R->in.cap = nin;
		ins += nin;
		R->users.a = users;
		R->users.cap = nusers[x];
		users += nusers[x];
		R->outs.a = outs;
		R->outs.cap = nouts[x];
		outs += nouts[x];
	}
	free(nusers);
	free(nouts);
	for (uint32_t x = 0; x < nops; x++) {
		const SappOp *X = &S->ops[x];
		RecNode *R = &S->rec[x];
		for (uint32_t i = 0; i < X->nin; i++) {
			int32_t p = X->prod[i];
			if (p < 0)
				continue;
			RecNode *P = &S->rec[p];
			RecIn in = {(uint32_t)p, sapp_map_identity()};
			int useful = edge_useful(S, P, R, &in.map);
			if (!useful)
				in.map = map_bad();
			R->in.a[R->in.n++] = in;
			if (!first_slot(X, i))
				continue;
			if (!P->kept)
				P->users.a[P->users.n++] = x;
			if (useful)
				add_edge(S, (uint32_t)p, x, in.map);
		}
	}
	S->stamp = arena_alloc(S->arena, (nops + 1) * sizeof(uint32_t));
	S->elim_order = arena_alloc(S->arena, (nops + 1) * sizeof(uint32_t));
	S->kept = arena_alloc(S->arena, (nops + 1) * sizeof(uint32_t));
	for (uint32_t x = 0; x < nops; x++) {
		if (S->rec[x].kept) {
			S->kept[S->nkept++] = x;
			continue;
		}
		S->elim_order[S->nelim++] = x;
		eliminate(S, x);
	}
}

void sapp_free(Sapp *S)
{
	vec_free(&S->prods);
	free(S->cons);
	free(S->edges.slot);
	free(S->op_of_node);
	if (S->levels) {
		for (uint32_t x = 0; x < S->nops; x++)
			free(S->levels[x].s);
		free(S->levels);
	}
	if (S->arena)
		arena_free(S->arena);
}
