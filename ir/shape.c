/* shape.c - shapes and abstracts as they appear on type lines (§1.7). */
#include <string.h>

#include "sappc.h"

int shape_numel(const Shape *s, int64_t *out)
{
	if (s->kind != SK_DIMS && s->kind != SK_OLD)
		return -1;
	int64_t p = 1;
	for (int i = 0; i < s->rank; i++) {
		int64_t d = s->dims[i];
		if (d < 0)
			return -1;
		if (d && p > INT64_MAX / d)
			return -1;
		p *= d;
	}
	*out = p;
	return 0;
}

int shape_equal(const Shape *a, const Shape *b)
{
	if (a->kind != b->kind || a->rank != b->rank)
		return 0;
	if (a->kind == SK_DIMS || a->kind == SK_OLD)
		return a->rank == 0 || memcmp(a->dims, b->dims, a->rank * sizeof(int64_t)) == 0;
	if (a->kind == SK_TUPLE || a->kind == SK_LIST) {
		for (int i = 0; i < a->rank; i++)
			if (!shape_equal(&a->sub[i], &b->sub[i]))
				return 0;
	}
	return 1;
}

Shape shape_dims(Arena *a, const int64_t *d, int rank)
{
	Shape s = {0};
	s.kind = SK_DIMS;
	s.rank = (uint8_t)rank;
	s.dims = rank ? arena_dup(a, d, (size_t)rank * sizeof *d) : NULL;
	return s;
}

/* The pool behind m->dims_pool: the map, and in front of it a small
 * direct-mapped cache of the arrays handed out.  A rank's graph asks for
 * the same few local shapes once per operator of every layer; the map's
 * probe (a hash of the key, a slot, an entry, the key's words) was most
 * of what a shape cost.  An entry's array is its own key. */
#define DIMS_FRONT 256
typedef struct DimsPool {
	KeyMap map; /* first: m->dims_pool points at it, graph.c frees it */
	struct {
		const int64_t *dims;
		uint32_t rank;
	} front[DIMS_FRONT];
} DimsPool;

Shape shape_shared(Module *m, const int64_t *d, int rank)
{
	if (!rank)
		return shape_dims(m->arena, d, rank);
	if (!m->dims_pool) {
		DimsPool *p = xcalloc(1, sizeof *p);
		keymap_init(&p->map, sizeof(int64_t *));
		m->dims_pool = &p->map;
	}
	DimsPool *p = (DimsPool *)m->dims_pool;
	uint64_t h = (uint64_t)rank;
	for (int i = 0; i < rank; i++)
		h = (h ^ (uint64_t)d[i]) * 0x9E3779B97F4A7C15ull;
	uint32_t j = (uint32_t)(h >> 56) & (DIMS_FRONT - 1);
	Shape s = {0};
	s.kind = SK_DIMS;
	s.rank = (uint8_t)rank;
	if (p->front[j].rank == (uint32_t)rank && memcmp(p->front[j].dims, d, (size_t)rank * sizeof *d) == 0) {
		s.dims = (int64_t *)p->front[j].dims;
		return s;
	}
	int fresh;
	int64_t **v = keymap_get(&p->map, d, (uint32_t)rank, &fresh);
	if (fresh)
		*v = arena_dup(m->arena, d, (size_t)rank * sizeof *d);
	p->front[j].dims = *v;
	p->front[j].rank = (uint32_t)rank;
	s.dims = *v;
	return s;
}

/* Every AbsExt of the run, interned: Abs.xi is its entry index + 1.  Its
 * own arena (the map's) outlives every module, so a copy of a module
 * (ir_module_clone) and the modules of --simulate share the entries. */
static KeyMap absext_map;
typedef struct AbsExtEnt {
	const AbsExt *x;
	uint32_t xi;
} AbsExtEnt;

uint32_t abs_ext_intern(Sym ref_key, uint8_t ref_colon, const Sym *extras, uint32_t nextras)
{
	int64_t kbuf[16], *key = nextras + 2 <= 16 ? kbuf : xmalloc((nextras + 2) * sizeof *key);
	key[0] = ref_key;
	key[1] = ref_colon;
	for (uint32_t i = 0; i < nextras; i++)
		key[2 + i] = extras[i];
	if (!absext_map.vsize)
		keymap_init(&absext_map, sizeof(AbsExtEnt));
	int fresh;
	AbsExtEnt *e = keymap_get(&absext_map, key, nextras + 2, &fresh);
	if (key != kbuf)
		free(key);
	if (fresh) {
		AbsExt *x = arena_alloc(absext_map.arena, sizeof *x + nextras * sizeof(Sym));
		x->ref_key = ref_key;
		x->ref_colon = ref_colon;
		x->nextras = nextras;
		if (nextras)
			memcpy(x->extras, extras, nextras * sizeof(Sym));
		e->x = x;
		e->xi = absext_map.n; /* the new entry's index + 1 */
	}
	return e->xi;
}

const AbsExt *abs_ext(const Abs *a)
{
	return a->xi ? ((const AbsExtEnt *)keymap_at(&absext_map, a->xi - 1, NULL, NULL))->x : NULL;
}

/* ref_colon is spelling, not meaning: two abstracts that differ only in it are equal */
static int absext_equal(const AbsExt *a, const AbsExt *b)
{
	static const AbsExt none;
	if (a == b)
		return 1;
	if (!a)
		a = &none;
	if (!b)
		b = &none;
	if (a->ref_key != b->ref_key || a->nextras != b->nextras)
		return 0;
	for (uint32_t i = 0; i < a->nextras; i++)
		if (a->extras[i] != b->extras[i])
			return 0;
	return 1;
}

int abs_equal(const Abs *a, const Abs *b)
{
	return a->tstr == b->tstr && a->has_value == b->has_value && shape_equal(&a->shape, &b->shape) &&
	       (a->xi == b->xi || absext_equal(abs_ext(a), abs_ext(b)));
}

Abs abs_tensor(Arena *a, Sym dtype, const int64_t *d, int rank)
{
	Abs x = {0};
	char buf[64];
	snprintf(buf, sizeof buf, "Tensor[%s]", sym_str(dtype));
	x.tstr = intern_cstr(buf);
	x.dtype = dtype;
	x.is_tensor = 1;
	x.shape = shape_dims(a, d, rank);
	return x;
}

int dtype_size(Sym dtype)
{
	const char *s = sym_str(dtype);
	static const struct {
		const char *n;
		int sz;
	} t[] = {{"Float32", 4}, {"Float16", 2}, {"BFloat16", 2}, {"Float64", 8}, {"Int32", 4},
		 {"Int64", 8},   {"Int16", 2},   {"Int8", 1},     {"UInt8", 1},   {"Bool", 1},
		 {"F32", 4},     {"F16", 2},     {"UInt32", 4},   {"UInt64", 8}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (strcmp(s, t[i].n) == 0)
			return t[i].sz;
	return 4;
}

/* ------------------------------------------------------------------ inference
 * ir_infer_shape computes the output shape of a known operator from the
 * input shapes on its type line and its literal operands / attributes.
 * Returns 1 and fills *out, 0 when the rule does not apply (unknown op,
 * non-tensor inputs), -1 with a reason in why[] when the inputs contradict
 * each other. */

static const Shape *in_shape(const Node *n, uint32_t i)
{
	const Abs *a = ir_in_abs(n, i);
	if (!a || (a->shape.kind != SK_DIMS))
		return NULL;
	return &a->shape;
}

/* literal operand i, or the attribute named key */
static const Value *operand_or_attr(const Node *n, uint32_t i, const char *key)
{
	if (i < n->nargs && n->args[i].kind != V_NODE && n->args[i].kind != V_EXTERN)
		return &n->args[i];
	if (key) {
		const Value *v = ir_attr_get(&n->pattrs, key);
		if (v)
			return v;
	}
	return NULL;
}

/* The "axis" of a Concat or Gather (operand i or attribute, 0 when absent),
 * negative counted from the end: 0 when it is out of range for rank. */
static int axis_operand(const Node *n, uint32_t i, int rank, int64_t *axis)
{
	*axis = 0;
	const Value *a = operand_or_attr(n, i, "axis");
	if (a)
		value_get_int(a, axis);
	if (*axis < 0)
		*axis += rank;
	return *axis >= 0 && *axis < rank;
}

/* Gather's batch_dims: operand 3 in the newest dumps (the argument list of
 * mindspore/ops/op_def/yaml/gather_op.yaml: input_params, input_indices,
 * axis, batch_dims), else the primitive attribute of older ones, 0 when
 * absent; negative counts from the end of the indices' rank.  0 when it is
 * out of range [0, irank]. */
int ir_gather_batch_dims(const Node *n, int irank, int64_t *bd)
{
	*bd = 0;
	const Value *v = operand_or_attr(n, 3, "batch_dims");
	if (v && !value_get_int(v, bd))
		*bd = 0;
	if (*bd < 0)
		*bd += irank;
	return *bd >= 0 && *bd <= irank;
}

int ir_node_flag(const Node *n, uint32_t i, const char *k1, const char *k2)
{
	int b = 0;
	if (i < n->nargs && n->args[i].kind == V_BOOL)
		return (int)n->args[i].u.i;
	const Value *v = ir_attr_get(&n->pattrs, k1);
	if (!v && k2)
		v = ir_attr_get(&n->pattrs, k2);
	if (v && value_truthy(v, &b))
		return b;
	return 0;
}

static int set_out(int64_t *d, int r, int64_t *out, int *orank)
{
	for (int i = 0; i < r; i++)
		out[i] = d[i];
	*orank = r;
	return 1;
}

/* memcpy of dims: rank-0 shapes have no dims array */
static void copy_dims(int64_t *dst, const int64_t *src, int n)
{
	if (n > 0)
		memcpy(dst, src, (size_t)n * sizeof(int64_t));
}

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), -1)

/* Dimensions come from the input and may be anything up to INT64_MAX:
 * arithmetic on them is checked (signed overflow is undefined behaviour). */
static int mul_ok(int64_t a, int64_t b, int64_t *r)
{
	return !__builtin_mul_overflow(a, b, r);
}

static int add_ok(int64_t a, int64_t b, int64_t *r)
{
	return !__builtin_add_overflow(a, b, r);
}

static int bcast(const Shape *a, const Shape *b, int64_t *out, int *orank, char *why, size_t whylen)
{
	int r = a->rank > b->rank ? a->rank : b->rank;
	for (int i = 0; i < r; i++) {
		int ia = i - (r - a->rank), ib = i - (r - b->rank);
		int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
		if (da == db || db == 1)
			out[i] = da;
		else if (da == 1)
			out[i] = db;
		else
			return WHY("cannot broadcast dimension %d: %lld against %lld", i, (long long)da, (long long)db);
	}
	*orank = r;
	return 1;
}

/* output size of a convolution / pooling window along one axis: 1 ok,
 * 0 when the numbers overflow (*out -1 for a dynamic input size) */
static int conv_out(int64_t in, int64_t k, int64_t stride, int64_t dil, const char *mode, int64_t pad, int64_t *out)
{
	if (stride <= 0)
		stride = 1;
	if (dil <= 0)
		dil = 1;
	if (in < 0) {
		*out = -1;
		return 1;
	}
	if (mode && (strcmp(mode, "same") == 0 || strcmp(mode, "SAME") == 0)) {
		*out = in == 0 ? 0 : (in - 1) / stride + 1;
		return 1;
	}
	int64_t eff, span;
	if (k < 1 || !mul_ok(dil, k - 1, &eff) || !add_ok(eff, 1, &eff) || !mul_ok(pad, 2, &span) ||
	    !add_ok(in, span, &span))
		return 0;
	*out = span < eff ? 0 : (span - eff) / stride + 1;
	return 1;
}

static int64_t last_int(const Value *v, int64_t dflt)
{
	int64_t a[8];
	int k = value_int_list(v, a, 8);
	return k > 0 ? a[k - 1] : dflt;
}

static const char *str_attr(const Node *n, const char *k)
{
	const Value *v = ir_attr_get(&n->pattrs, k);
	if (v && (v->kind == V_STR || v->kind == V_WORD))
		return sym_str(v->text);
	return NULL;
}

/* ------------------------------------------------------------ attention */

/* operand roles of the tensor inputs, by position in the yaml's list */
static const uint8_t fas_roles[10] = {AR_Q, AR_K, AR_V, AR_SHIFT, AR_DROP, AR_PADDING, AR_MASK, AR_PREFIX,
                                      AR_SEQLEN, AR_SEQLEN};
static const uint8_t pfa_roles[12] = {AR_Q,      AR_K,     AR_V,     AR_MASK,  AR_SEQLEN, AR_SEQLEN,
                                      AR_SHIFT,  AR_SCALE, AR_SCALE, AR_SCALE, AR_SCALE,  AR_SCALE};
static const uint8_t ifa_roles[15] = {AR_Q,     AR_K,     AR_V,     AR_MASK,  AR_SEQLEN, AR_SHIFT, AR_SCALE, AR_SCALE,
                                      AR_SCALE, AR_SCALE, AR_SCALE, AR_SCALE, AR_SCALE,  AR_PAGED, AR_PAGED};
/* FlashAttentionScoreGrad: the forward's operands with dout at 3 and the
 * forward's four outputs at 8..11 (passes/train/autodiff.c bp_flash_attention,
 * after mindspore/ops/grad/grad_nn_ops.cc) */
static const uint8_t fasg_roles[15] = {AR_Q,    AR_K,    AR_V,    AR_NONE, AR_SHIFT,  AR_DROP,   AR_PADDING, AR_MASK,
                                       AR_NONE, AR_NONE, AR_NONE, AR_NONE, AR_PREFIX, AR_SEQLEN, AR_SEQLEN};
static const char *const layout_names[ATTN_NLAYOUTS] = {"BSH", "BNSD", "SBH", "BSND"};

/* per operator: its roles, and the operands of head_num, input_layout,
 * the key/value heads, scale_value and sparse_mode (-1: none) */
static const struct AttnOp {
	const uint8_t *roles;
	uint8_t nroles;
	int8_t heads, layout, kvheads, scale, sparse;
	const char *heads_attr;
} attn_ops[] = {
	{fas_roles, 10, 10, 16, -1, 12, 17, "head_num"},
	{pfa_roles, 12, 12, 16, 17, 13, 18, "num_heads"},
	{ifa_roles, 15, 15, 16, 18, 17, -1, "num_heads"},
	{fasg_roles, 15, 15, 21, -1, 17, 22, "head_num"},
};

/* operand i's shape: its type-line entry, else its producer's (a text
 * without type lines) */
static const Shape *attn_shape(const Node *n, uint32_t i)
{
	if (i < n->nin_types)
		return in_shape(n, i);
	if (i < n->nargs && n->args[i].kind == V_NODE && n->args[i].u.node &&
	    n->args[i].u.node->out.shape.kind == SK_DIMS)
		return &n->args[i].u.node->out.shape;
	return NULL;
}

/* the layout: an Int64 (FASInputLayoutMode) or a string, operand i or the
 * attribute input_layout; BSH when absent */
static int attn_layout(const Node *n, uint32_t i, int *layout, char *why, size_t whylen)
{
	const Value *v = operand_or_attr(n, i, "input_layout");
	int64_t x = ATTN_BSH;
	*layout = ATTN_BSH;
	if (!v || value_is_word(v, "None"))
		return 0;
	if (v->kind == V_STR || v->kind == V_WORD) {
		for (int k = 0; k < ATTN_NLAYOUTS; k++)
			if (strcmp(sym_str(v->text), layout_names[k]) == 0) {
				*layout = k;
				return 0;
			}
		return WHY("input_layout '%s' is not one of BSH, BNSD, SBH, BSND", sym_str(v->text));
	}
	if (!value_get_int(v, &x) || x < 0 || x >= ATTN_NLAYOUTS)
		return WHY("input_layout %lld is out of range (0 BSH, 1 BNSD, 2 SBH, 3 BSND; TND and the "
		           "inference-only layouts are not modelled)",
		           (long long)x);
	*layout = (int)x;
	return 0;
}

/* Positions of batch, sequence and heads per layout: mindspore-ai/mindspore
 * mindspore/ccsrc/frontend/parallel/auto_parallel/rec_core/rec_generate_strategy.cc
 * FillFlashLayoutIndexes (BSH/BSND 0,1,2; BNSD 0,2,1; SBH 1,0,2). */
int ir_attention_info(const Node *n, AttnInfo *ai, char *why, size_t whylen)
{
	memset(ai, 0, sizeof *ai);
	int fas = n->op == OP_FlashAttentionScore, grad = n->op == OP_FlashAttentionScoreGrad;
	const struct AttnOp *ao = &attn_ops[fas ? 0 : grad ? 3 : n->op == OP_PromptFlashAttention ? 1 : 2];
	const uint8_t *roles = ao->roles;
	uint32_t nroles = ao->nroles;
	uint32_t layout_opnd = (uint32_t)ao->layout;
	ai->heads_opnd = ao->heads;
	ai->heads_attr = ao->heads_attr;
	ai->kvheads_opnd = ao->kvheads;
	ai->scale_opnd = ao->scale;
	ai->sparse_opnd = ao->sparse;
	if (n->nargs <= (uint32_t)ai->heads_opnd)
		ai->heads_opnd = -1;
	for (uint32_t i = 0; i < n->nargs && i < nroles && i < ATTN_MAX_OPND; i++)
		ai->role[i] = roles[i];
	if (attn_layout(n, layout_opnd, &ai->layout, why, whylen) < 0)
		return -1;
	static const int8_t pos[ATTN_NLAYOUTS][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {0, 1, 2}};
	ai->bdim = pos[ai->layout][0];
	ai->sdim = pos[ai->layout][1];
	ai->ndim = pos[ai->layout][2];
	ai->packed = ai->layout == ATTN_BSH || ai->layout == ATTN_SBH;
	const Shape *q = attn_shape(n, 0), *k = attn_shape(n, 1), *v = attn_shape(n, 2);
	if (!q || !k || !v)
		return 0;
	int rank = ai->packed ? 3 : 4;
	if (q->rank != rank || k->rank != rank || v->rank != rank)
		return WHY("the %s layout takes rank-%d query, key and value (ranks %d, %d, %d)",
		           layout_names[ai->layout], rank, q->rank, k->rank, v->rank);
	for (int i = 0; i < rank; i++)
		if (q->dims[i] < 0 || k->dims[i] < 0 || v->dims[i] < 0)
			return 0;
	int64_t heads = 0;
	const Value *hv = operand_or_attr(n, ai->heads_opnd >= 0 ? (uint32_t)ai->heads_opnd : UINT32_MAX,
	                                  ai->heads_attr);
	if (hv && !value_get_int(hv, &heads))
		heads = 0;
	if (!ai->packed && heads == 0)
		heads = q->dims[ai->ndim];
	if (heads <= 0)
		return WHY("%s needs a positive %s", op_table[n->op].name, ai->heads_attr);
	ai->heads = heads;
	ai->batch = q->dims[ai->bdim];
	ai->s1 = q->dims[ai->sdim];
	ai->s2 = k->dims[ai->sdim];
	if (k->dims[ai->bdim] != ai->batch || v->dims[ai->bdim] != ai->batch)
		return WHY("query, key and value disagree on the batch (%lld, %lld, %lld)", (long long)ai->batch,
		           (long long)k->dims[ai->bdim], (long long)v->dims[ai->bdim]);
	if (!shape_equal(k, v))
		return WHY("key and value have different shapes");
	if (ai->packed) {
		if (q->dims[2] % heads)
			return WHY("the query hidden size %lld is not a multiple of %s %lld", (long long)q->dims[2],
			           ai->heads_attr, (long long)heads);
		ai->head_dim = q->dims[2] / heads;
		if (ai->head_dim == 0 || k->dims[2] % ai->head_dim)
			return WHY("the key hidden size %lld is not a multiple of the head size %lld",
			           (long long)k->dims[2], (long long)ai->head_dim);
		ai->kv_heads = k->dims[2] / ai->head_dim;
	} else {
		if (q->dims[ai->ndim] != heads)
			return WHY("the query has %lld heads, but %s is %lld", (long long)q->dims[ai->ndim],
			           ai->heads_attr, (long long)heads);
		ai->head_dim = q->dims[3];
		if (k->dims[3] != ai->head_dim)
			return WHY("query and key head sizes differ (%lld, %lld)", (long long)ai->head_dim,
			           (long long)k->dims[3]);
		ai->kv_heads = k->dims[ai->ndim];
	}
	if (ai->kv_heads <= 0 || heads % ai->kv_heads)
		return WHY("%lld query heads cannot be grouped over %lld key/value heads", (long long)heads,
		           (long long)ai->kv_heads);
	/* flash_attention_score_info.cc GetAttrs: q's head dim != k's * head_num */
	ai->kv_split = ai->kv_heads != 1;
	int64_t sparse = 0;
	const Value *sm = ai->sparse_opnd >= 0 ? operand_or_attr(n, (uint32_t)ai->sparse_opnd, "sparse_mode") : NULL;
	if (sm)
		value_get_int(sm, &sparse);
	ai->mask_compressed = sparse >= 2 && sparse <= 4;
	for (uint32_t i = 3; i < n->nargs && i < nroles; i++) {
		const Shape *m = attn_shape(n, i);
		if (!m || ai->role[i] != AR_MASK)
			continue;
		int ok = m->rank == 2 ? ai->mask_compressed || (m->dims[0] == ai->s1 && m->dims[1] == ai->s2)
		         : m->rank == 4 ? (m->dims[0] == 1 || m->dims[0] == ai->batch) &&
		                              (m->dims[1] == 1 || m->dims[1] == heads) && m->dims[2] == ai->s1 &&
		                              m->dims[3] == ai->s2
		                        : 0;
		if (!ok)
			return WHY("the attention mask must be (S1, S2) or (B or 1, N1 or 1, S1, S2) = (%lld, %lld, "
			           "%lld, %lld)",
			           (long long)ai->batch, (long long)heads, (long long)ai->s1, (long long)ai->s2);
	}
	/* outputs: softmax_max and softmax_sum (B, N1, S1, 8) in Float32,
	 * softmax_out, attention_out shaped like the query */
	if (fas) {
		ai->nout = 4;
		for (int o = 0; o < 2; o++) {
			int64_t d[4] = {ai->batch, heads, ai->s1, 8};
			memcpy(ai->out[o], d, sizeof d);
			ai->orank[o] = 4;
		}
		ai->orank[2] = -1;
		memcpy(ai->out[3], q->dims, (size_t)rank * sizeof(int64_t));
		ai->orank[3] = rank;
	} else if (grad) { /* dq, dk, dv */
		ai->nout = 3;
		const Shape *qkv[3] = {q, k, v};
		for (int o = 0; o < 3; o++) {
			memcpy(ai->out[o], qkv[o]->dims, (size_t)rank * sizeof(int64_t));
			ai->orank[o] = rank;
		}
	} else {
		ai->nout = 1;
		memcpy(ai->out[0], q->dims, (size_t)rank * sizeof(int64_t));
		ai->orank[0] = rank;
	}
	return 1;
}

/* ---- GroupedMatmul (sappc.h: the modes it models) */

/* the element shapes of list operand i: count, or -1 when unknown */
static int gmm_list(const Node *n, uint32_t i, const Shape **el, int max)
{
	const Abs *a = ir_in_abs(n, i);
	if (!a || (a->shape.kind != SK_TUPLE && a->shape.kind != SK_LIST) || a->shape.rank > max)
		return -1;
	for (int k = 0; k < a->shape.rank; k++) {
		el[k] = &a->shape.sub[k];
		if (el[k]->kind != SK_DIMS)
			return -1;
		for (int d = 0; d < el[k]->rank; d++)
			if (el[k]->dims[d] < 0)
				return -1;
	}
	return a->shape.rank;
}

/* an optional operand left out: absent, None or an empty list */
static int gmm_absent(const Node *n, uint32_t i)
{
	if (i >= n->nargs)
		return 1;
	const Value *v = &n->args[i];
	return value_is_word(v, "None") || ((v->kind == V_TUPLE || v->kind == V_LIST) && v->n == 0);
}

static int64_t gmm_int(const Node *n, uint32_t i, const char *key, int64_t dflt)
{
	int64_t v = dflt;
	const Value *x = operand_or_attr(n, i, key);
	if (x && !value_get_int(x, &v))
		v = dflt;
	return v;
}

int ir_moe_v2_info(const Node *n, MoeV2Info *mi, char *why, size_t whylen)
{
	memset(mi, 0, sizeof *mi);
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || n->op != OP_MoeInitRoutingV2)
		return 0;
	/* operands 2.. of the newest dumps, attributes of older ones */
	mi->active = gmm_int(n, 2, "active_num", 0);
	mi->capacity = gmm_int(n, 3, "expert_capacity", 0);
	mi->experts = gmm_int(n, 4, "expert_num", 0);
	mi->drop_pad = gmm_int(n, 5, "drop_pad_mode", 0);
	mi->count_flag = gmm_int(n, 6, "expert_tokens_count_or_cumsum_flag", 0);
	mi->before_flag = ir_node_flag(n, 7, "expert_tokens_before_capacity_flag", NULL);
	if (mi->active < 0 || mi->capacity < 0 || mi->experts < 0)
		return WHY("MoeInitRoutingV2: active_num, expert_capacity and expert_num must not be negative");
	if (mi->drop_pad != 0 && mi->drop_pad != 1)
		return WHY("MoeInitRoutingV2: drop_pad_mode is %lld, not 0 or 1", (long long)mi->drop_pad);
	if (mi->count_flag < 0 || mi->count_flag > 2)
		return WHY("MoeInitRoutingV2: expert_tokens_count_or_cumsum_flag is %lld, not 0, 1 or 2",
		           (long long)mi->count_flag);
	if ((mi->drop_pad == 1 || mi->count_flag > 0) && mi->experts <= 0)
		return WHY("MoeInitRoutingV2: expert_num must be positive in the drop/pad mode or with expert token "
		           "counts");
	const Shape *x = in_shape(n, 0), *e = in_shape(n, 1);
	if (!x || !e)
		return 0;
	if (x->rank != 2 || e->rank != 2)
		return WHY("MoeInitRoutingV2 takes a 2-D x (tokens, hidden) and a 2-D expert_idx (tokens, top-k)");
	mi->n = x->dims[0], mi->h = x->dims[1], mi->k = e->dims[1];
	if (mi->n >= 0 && e->dims[0] >= 0 && e->dims[0] != mi->n)
		return WHY("MoeInitRoutingV2: x has %lld tokens but expert_idx %lld", (long long)mi->n,
		           (long long)e->dims[0]);
	if (mi->n < 0 || mi->k < 0 || mi->h < 0)
		return 0;
	int64_t nk;
	if (!mul_ok(mi->n, mi->k, &nk))
		return WHY("MoeInitRoutingV2: tokens x top-k overflows");
	if (mi->drop_pad == 1) {
		if (mi->capacity <= 0 || mi->capacity > mi->n)
			return WHY("MoeInitRoutingV2: expert_capacity %lld must be in (0, %lld] in the drop/pad mode",
			           (long long)mi->capacity, (long long)mi->n);
		mi->out[0][0] = mi->experts, mi->out[0][1] = mi->capacity, mi->out[0][2] = mi->h;
		mi->orank[0] = 3;
	} else {
		mi->out[0][0] = mi->active > 0 && mi->active < nk ? mi->active : nk;
		mi->out[0][1] = mi->h;
		mi->orank[0] = 2;
	}
	mi->out[1][0] = nk;
	mi->orank[1] = 1;
	mi->orank[2] = mi->orank[3] = -1;
	if (mi->drop_pad == 0 && mi->count_flag > 0) {
		mi->out[2][0] = mi->experts;
		mi->orank[2] = 1;
	}
	if (mi->drop_pad == 1 && mi->before_flag) {
		mi->out[3][0] = mi->experts;
		mi->orank[3] = 1;
	}
	return 1;
}

int ir_gmm_info(const Node *n, GmmInfo *gi, char *why, size_t whylen)
{
	memset(gi, 0, sizeof *gi);
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || op_table[n->op].family != FAM_GMM)
		return 0;
	gi->split_item = (int)gmm_int(n, 8, "split_item", 0);
	gi->group_type = (int)gmm_int(n, 9, "group_type", -1);
	if (ir_node_flag(n, 10, "transpose_a", NULL) || ir_node_flag(n, 11, "transpose_b", NULL))
		return WHY("GroupedMatmul with transposed x or weight is not modelled by sappc");
	for (uint32_t i = 2; i <= 6; i++)
		if (!gmm_absent(n, i))
			return WHY("GroupedMatmul operand %u (bias or a quantization parameter) must be None: sappc "
			           "models the product alone",
			           i + 1);
	if (gi->split_item != 0 && gi->split_item != 3)
		return WHY("GroupedMatmul split_item %d: MindSpore takes 0 (lists) or 3 (single tensors)",
		           gi->split_item);
	if (gi->group_type != -1 && gi->group_type != 0 && gi->group_type != 2)
		return WHY("GroupedMatmul group_type %d: sappc models -1 (none), 0 (rows) and 2 (the shared axis)",
		           gi->group_type);
	const Shape *gl = NULL;
	if (!gmm_absent(n, 7)) {
		if (n->args[7].kind != V_NODE && n->args[7].kind != V_EXTERN)
			return WHY("GroupedMatmul group_list must be a tensor");
		gl = in_shape(n, 7);
		if (!gl)
			return 0;
		if (gl->rank != 1)
			return WHY("GroupedMatmul group_list must be 1-D, not rank %d", gl->rank);
		gi->grouped = 1;
		gi->groups = gl->dims[0];
	}
	const Shape *x[GMM_MAX_LIST], *w[GMM_MAX_LIST];
	gi->nx = gmm_list(n, 0, x, GMM_MAX_LIST);
	gi->nw = gmm_list(n, 1, w, GMM_MAX_LIST);
	if (gi->nx < 0 || gi->nw < 0)
		return 0;
	if (gi->nx < 1 || gi->nw < 1)
		return WHY("GroupedMatmul needs at least one x and one weight");
	if (gi->group_type == -1) {
		if (gi->split_item != 0 || gi->grouped || gi->nx != gi->nw)
			return WHY("GroupedMatmul without grouping (group_type -1) takes split_item 0, no group_list "
			           "and as many x as weights (%d and %d)",
			           gi->nx, gi->nw);
		gi->nout = gi->nx;
		for (int k = 0; k < gi->nx; k++) {
			if (x[k]->rank < 2 || x[k]->rank > 6 || w[k]->rank != 2)
				return WHY(
				    "GroupedMatmul pair %d: x of rank 2 to 6 and a 2-D weight, not ranks %d and %d", k,
				    x[k]->rank, w[k]->rank);
			if (x[k]->dims[x[k]->rank - 1] != w[k]->dims[0])
				return WHY("GroupedMatmul pair %d: x has %lld columns, the weight %lld rows", k,
				           (long long)x[k]->dims[x[k]->rank - 1], (long long)w[k]->dims[0]);
			copy_dims(gi->out[k], x[k]->dims, x[k]->rank - 1);
			gi->out[k][x[k]->rank - 1] = w[k]->dims[1];
			gi->orank[k] = x[k]->rank;
		}
		return 1;
	}
	if (gi->split_item != 3 || gi->nx != 1 || !gi->grouped || x[0]->rank != 2)
		return WHY("grouped GroupedMatmul (group_type %d) takes split_item 3, one 2-D x and a group_list",
		           gi->group_type);
	int64_t M = x[0]->dims[0], K = x[0]->dims[1], E = gi->groups, N;
	if (gi->group_type == 2) {
		if (gi->nw != 1 || w[0]->rank != 2 || w[0]->dims[0] != K)
			return WHY("GroupedMatmul group_type 2 takes one (%lld, N) weight", (long long)K);
		gi->nout = 1;
		gi->out[0][0] = E;
		gi->out[0][1] = M;
		gi->out[0][2] = w[0]->dims[1];
		gi->orank[0] = 3;
		return 1;
	}
	if (gi->nw == 1 && w[0]->rank == 3) {
		gi->wstack = 1;
		if (w[0]->dims[0] != E || w[0]->dims[1] != K)
			return WHY(
			    "GroupedMatmul weight (%lld, %lld, %lld) does not fit %lld groups of x's %lld columns",
			    (long long)w[0]->dims[0], (long long)w[0]->dims[1], (long long)w[0]->dims[2], (long long)E,
			    (long long)K);
		N = w[0]->dims[2];
	} else {
		if (gi->nw != E)
			return WHY("GroupedMatmul: %d weights for a group_list of %lld groups", gi->nw, (long long)E);
		N = w[0]->dims[w[0]->rank - 1];
		for (int k = 0; k < gi->nw; k++)
			if (w[k]->rank != 2 || w[k]->dims[0] != K || w[k]->dims[1] != N)
				return WHY("GroupedMatmul weight %d must be (%lld, %lld) like the others", k,
				           (long long)K, (long long)N);
	}
	gi->nout = 1;
	gi->out[0][0] = M;
	gi->out[0][1] = N;
	gi->orank[0] = 2;
	return 1;
}

int ir_infer_shape(const Node *n, int64_t *out, int *orank, char *why, size_t whylen)
{
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return 0;
	const OpInfo *oi = &op_table[n->op];
	const Shape *x = in_shape(n, 0);
	int64_t d[MAX_RANK];
	int r = 0;
	switch (oi->shape) {
	case SHAPE_SAME:
		if (!x)
			return 0;
		return set_out(x->dims, x->rank, out, orank);
	case SHAPE_SCALAR: {
		/* SparseSoftmaxCrossEntropyWithLogits with is_grad (its bprop)
		 * gives the gradient of the logits, not the loss */
		const Value *g = ir_attr_get(&n->pattrs, "is_grad");
		int b = 0;
		if (g && value_truthy(g, &b) && b && x)
			return set_out(x->dims, x->rank, out, orank);
		*orank = 0;
		return 1;
	}
	case SHAPE_DENSE: {
		/* Dense(x, w, b): x (..., K) times w (N, K) transposed */
		const Shape *w = in_shape(n, 1);
		if (!x || !w)
			return 0;
		if (x->rank < 1 || w->rank != 2)
			return WHY("Dense takes an input of rank >= 1 and a 2-D weight");
		if (x->dims[x->rank - 1] >= 0 && w->dims[1] >= 0 && x->dims[x->rank - 1] != w->dims[1])
			return WHY("Dense reduces %lld input features against a weight of %lld", (long long)x->dims[x->rank - 1],
			           (long long)w->dims[1]);
		copy_dims(d, x->dims, x->rank);
		d[x->rank - 1] = w->dims[0];
		return set_out(d, x->rank, out, orank);
	}
	case SHAPE_SLICE: {
		/* Slice(x, begin, size): size -1 runs to the end */
		int64_t b[MAX_RANK], sz[MAX_RANK];
		if (!x)
			return 0;
		int nb = value_int_list(operand_or_attr(n, 1, "begin"), b, MAX_RANK),
		    ns = value_int_list(operand_or_attr(n, 2, "size"), sz, MAX_RANK);
		if (nb < 0 || ns < 0)
			return 0;
		if (nb != x->rank || ns != x->rank)
			return WHY("Slice of a rank-%d input takes %d begins and sizes (%d, %d)", x->rank, x->rank, nb, ns);
		for (int i = 0; i < x->rank; i++) {
			int64_t e = sz[i] == -1 ? x->dims[i] - b[i] : sz[i];
			if (x->dims[i] >= 0 && (b[i] < 0 || e < 0 || b[i] > x->dims[i] || e > x->dims[i] - b[i]))
				return WHY("Slice [%lld, +%lld) leaves dimension %d of size %lld", (long long)b[i],
				           (long long)sz[i], i, (long long)x->dims[i]);
			d[i] = e;
		}
		return set_out(d, x->rank, out, orank);
	}
	case SHAPE_TILE: {
		/* Tile(x, multiples): x padded with leading 1s to the multiples' length */
		int64_t m[MAX_RANK];
		if (!x)
			return 0;
		int k = value_int_list(operand_or_attr(n, 1, "multiples"), m, MAX_RANK);
		if (k < 0)
			return 0;
		if (k < x->rank)
			return WHY("Tile has %d multiples for a rank-%d input", k, x->rank);
		for (int i = 0; i < k; i++) {
			int64_t xi = i < k - x->rank ? 1 : x->dims[i - (k - x->rank)];
			if (m[i] < 1)
				return WHY("Tile multiple %lld is not positive", (long long)m[i]);
			if (xi < 0)
				d[i] = -1;
			else if (!mul_ok(xi, m[i], &d[i]))
				return WHY("Tile size overflows");
		}
		return set_out(d, k, out, orank);
	}
	case SHAPE_SCATTER: {
		/* ScatterDiv(var, indices, updates): var's shape, the updates one
		 * row of var per index (indices.shape + var.shape[1:]) */
		const Shape *ix = in_shape(n, 1), *up = in_shape(n, 2);
		if (!x || !ix || !up)
			return 0;
		if (x->rank < 1 || up->rank != ix->rank + x->rank - 1)
			return WHY("%s updates of rank %d do not match indices of rank %d and an input of rank %d",
			           oi->name, up->rank, ix->rank, x->rank);
		for (int i = 0; i < up->rank; i++) {
			int64_t want = i < ix->rank ? ix->dims[i] : x->dims[i - ix->rank + 1];
			if (want >= 0 && up->dims[i] >= 0 && up->dims[i] != want)
				return WHY("%s updates dimension %d is %lld, the indices and input make it %lld",
				           oi->name, i, (long long)up->dims[i], (long long)want);
		}
		return set_out(x->dims, x->rank, out, orank);
	}
	case SHAPE_MOEFINALIZE: {
		/* MoeFinalizeRouting(expanded_x (N*K, H), x1 (N, H), x2, bias
		 * (E, H), scales (N, K), expanded_row_idx (N*K), expanded_expert_idx
		 * (N, K)) -> (N, H) */
		const Shape *x1 = in_shape(n, 1), *sc = in_shape(n, 4), *ri = in_shape(n, 5), *b = in_shape(n, 3);
		if (!x || !x1 || !sc || !ri || !b)
			return 0;
		if (x->rank != 2 || x1->rank != 2 || sc->rank != 2 || ri->rank != 1 || b->rank != 2)
			return WHY(
			    "MoeFinalizeRouting takes 2-D expanded_x, x1, bias and scales and a 1-D expanded_row_idx");
		int64_t N = x1->dims[0], H = x1->dims[1], K = sc->dims[1];
		if (N >= 0 && K >= 0 &&
		    ((x->dims[0] >= 0 && x->dims[0] != N * K) || (ri->dims[0] >= 0 && ri->dims[0] != N * K) ||
		     (sc->dims[0] >= 0 && sc->dims[0] != N)))
			return WHY("MoeFinalizeRouting: %lld tokens with top-%lld routing need %lld expanded rows",
			           (long long)N, (long long)K, (long long)(N * K));
		if (H >= 0 && ((x->dims[1] >= 0 && x->dims[1] != H) || (b->dims[1] >= 0 && b->dims[1] != H)))
			return WHY("MoeFinalizeRouting: expanded_x, x1 and bias must share the hidden size %lld",
			           (long long)H);
		return set_out(x1->dims, 2, out, orank);
	}
	case SHAPE_MOETOKENS: {
		/* MoeComputeExpertTokens(sorted_experts, num_expert): for each
		 * expert the end of its rows in the sorted list, (num_expert,) */
		int64_t e = gmm_int(n, 1, "num_expert", -1);
		if (!x)
			return 0;
		if (x->rank != 1)
			return WHY("MoeComputeExpertTokens takes a 1-D sorted_experts, not rank %d", x->rank);
		if (e <= 0)
			return WHY("MoeComputeExpertTokens needs a positive literal num_expert");
		d[0] = e;
		return set_out(d, 1, out, orank);
	}
	case SHAPE_SWIGLU: {
		/* Swiglu(x, dim): the halves of x along dim, swish(a) * b */
		if (!x)
			return 0;
		int64_t ax = -1;
		const Value *a = operand_or_attr(n, 1, "dim");
		if (a)
			value_get_int(a, &ax);
		if (ax < 0)
			ax += x->rank;
		if (ax < 0 || ax >= x->rank)
			return WHY("Swiglu dim out of range for rank %d", x->rank);
		copy_dims(d, x->dims, x->rank);
		if (d[ax] >= 0 && d[ax] % 2)
			return WHY("Swiglu splits dimension %lld of odd size %lld in halves", (long long)ax,
			           (long long)d[ax]);
		if (d[ax] > 0)
			d[ax] /= 2;
		return set_out(d, x->rank, out, orank);
	}
	case SHAPE_CONCAT: {
		/* operand 0 is the tuple of the pieces: equal but for the axis,
		 * where the sizes add up (a dynamic size makes it dynamic) */
		const Abs *t = ir_in_abs(n, 0);
		if (!t || t->shape.kind != SK_TUPLE || !t->shape.rank || t->shape.sub[0].kind != SK_DIMS)
			return 0;
		const Shape *e0 = &t->shape.sub[0];
		int64_t axis;
		if (!axis_operand(n, 1, e0->rank, &axis))
			return WHY("Concat axis out of range for rank %d", e0->rank);
		r = e0->rank;
		copy_dims(d, e0->dims, r);
		for (int k = 1; k < t->shape.rank; k++) {
			const Shape *e = &t->shape.sub[k];
			if (e->kind != SK_DIMS)
				return 0;
			if (e->rank != r)
				return WHY("Concat of a rank %d and a rank %d tensor", r, e->rank);
			for (int i = 0; i < r; i++) {
				if (i == axis) {
					if (d[i] < 0 || e->dims[i] < 0)
						d[i] = -1;
					else if (!add_ok(d[i], e->dims[i], &d[i]))
						return WHY("Concat size along axis %lld overflows", (long long)axis);
				} else if (d[i] >= 0 && e->dims[i] >= 0 && d[i] != e->dims[i]) {
					return WHY("Concat pieces differ in dimension %d: %lld against %lld", i,
					           (long long)d[i], (long long)e->dims[i]);
				}
			}
		}
		return set_out(d, r, out, orank);
	}
	case SHAPE_BROADCAST: {
		const Shape *acc = NULL;
		int64_t tmp[MAX_RANK];
		Shape cur = {0};
		for (uint32_t i = 0; i < n->nin_types; i++) {
			const Shape *s = in_shape(n, i);
			if (!s || !n->in_types[i].is_tensor)
				continue;
			if (!acc) {
				if (s->rank) /* a scalar () has no dims array: memcpy(NULL) is undefined */
					memcpy(tmp, s->dims, s->rank * sizeof(int64_t));
				cur.kind = SK_DIMS;
				cur.rank = s->rank;
				cur.dims = tmp;
				acc = &cur;
				continue;
			}
			int64_t o[MAX_RANK];
			int orr;
			if (bcast(&cur, s, o, &orr, why, whylen) < 0)
				return -1;
			copy_dims(tmp, o, orr);
			cur.rank = (uint8_t)orr;
		}
		if (!acc)
			return 0;
		return set_out(cur.dims, cur.rank, out, orank);
	}
	case SHAPE_MATMUL: {
		const Shape *b = in_shape(n, 1);
		if (!x || !b)
			return 0;
		if (x->rank != 2 || b->rank != 2)
			return WHY("MatMul takes 2-D inputs, got ranks %d and %d", x->rank, b->rank);
		int ta = ir_node_flag(n, 2, "transpose_a", "transpose_x1"), tb = ir_node_flag(n, 3, "transpose_b", "transpose_x2");
		int64_t m = ta ? x->dims[1] : x->dims[0], k1 = ta ? x->dims[0] : x->dims[1];
		int64_t k2 = tb ? b->dims[1] : b->dims[0], nn = tb ? b->dims[0] : b->dims[1];
		if (k1 != k2)
			return WHY("MatMul reduction dimensions differ: %lld vs %lld", (long long)k1, (long long)k2);
		d[0] = m;
		d[1] = nn;
		return set_out(d, 2, out, orank);
	}
	case SHAPE_BATCHMATMUL: {
		const Shape *b = in_shape(n, 1);
		if (!x || !b)
			return 0;
		if (x->rank < 2 || b->rank < 2)
			return WHY("BatchMatMul takes inputs of rank >= 2");
		int ta = ir_node_flag(n, 2, "transpose_a", "transpose_x1"), tb = ir_node_flag(n, 3, "transpose_b", "transpose_x2");
		int64_t m = ta ? x->dims[x->rank - 1] : x->dims[x->rank - 2];
		int64_t k1 = ta ? x->dims[x->rank - 2] : x->dims[x->rank - 1];
		int64_t k2 = tb ? b->dims[b->rank - 1] : b->dims[b->rank - 2];
		int64_t nn = tb ? b->dims[b->rank - 2] : b->dims[b->rank - 1];
		if (k1 != k2)
			return WHY("BatchMatMul reduction dimensions differ: %lld vs %lld", (long long)k1, (long long)k2);
		Shape ba = *x, bb = *b;
		ba.rank = (uint8_t)(x->rank - 2);
		bb.rank = (uint8_t)(b->rank - 2);
		if (bcast(&ba, &bb, d, &r, why, whylen) < 0)
			return -1;
		d[r++] = m;
		d[r++] = nn;
		return set_out(d, r, out, orank);
	}
	case SHAPE_RESHAPE: {
		const Value *t = operand_or_attr(n, 1, "shape");
		if (!x || !t)
			return 0;
		int k = value_int_list(t, d, MAX_RANK);
		if (k < 0)
			return 0;
		int64_t total, known = 1;
		if (shape_numel(x, &total) < 0)
			return 0;
		int neg = -1;
		for (int i = 0; i < k; i++) {
			if (d[i] == -1 && neg < 0)
				neg = i;
			else if (d[i] <= 0)
				return WHY("Reshape target has invalid dimension %lld", (long long)d[i]);
			else if (!mul_ok(known, d[i], &known))
				return WHY("Reshape target shape has more than 2^63 elements");
		}
		if (neg >= 0) {
			if (known == 0 || total % known)
				return WHY("Reshape cannot infer -1 dimension");
			d[neg] = total / known;
			known = total;
		}
		if (known != total)
			return WHY("Reshape changes the element count from %lld to %lld", (long long)total, (long long)known);
		return set_out(d, k, out, orank);
	}
	case SHAPE_TRANSPOSE: {
		const Value *t = operand_or_attr(n, 1, "perm");
		int64_t p[MAX_RANK];
		if (!x || !t)
			return 0;
		int k = value_int_list(t, p, MAX_RANK);
		if (k < 0)
			return 0;
		if (k != x->rank)
			return WHY("Transpose permutation has %d entries for a rank-%d input", k, x->rank);
		unsigned seen = 0;
		for (int i = 0; i < k; i++) {
			int64_t a = p[i] < 0 ? p[i] + k : p[i];
			if (a < 0 || a >= k || (seen >> a & 1))
				return WHY("Transpose permutation is not a permutation of 0..%d", k - 1);
			seen |= 1u << a;
			d[i] = x->dims[a];
		}
		return set_out(d, k, out, orank);
	}
	case SHAPE_FLATTEN: {
		if (!x)
			return 0;
		if (x->rank == 0)
			return WHY("Flatten needs an input of rank >= 1");
		int64_t p = 1;
		for (int i = 1; i < x->rank && p >= 0; i++) {
			if (x->dims[i] < 0)
				p = -1; /* a dynamic dimension makes the product dynamic */
			else if (!mul_ok(p, x->dims[i], &p))
				return WHY("Flatten output dimension overflows int64");
		}
		d[0] = x->dims[0];
		d[1] = p;
		return set_out(d, 2, out, orank);
	}
	case SHAPE_REDUCE: {
		if (!x)
			return 0;
		int64_t ax[MAX_RANK];
		int k = -1;
		const Value *a = operand_or_attr(n, 1, "axis");
		if (a)
			k = value_int_list(a, ax, MAX_RANK);
		if (k < 0 && a && a->kind != V_TUPLE && a->kind != V_LIST && a->kind != V_INT)
			k = 0;
		if (k < 0)
			k = 0;
		int keep = ir_node_flag(n, 2, "keep_dims", NULL);
		unsigned red = 0;
		if (k == 0)
			red = (1u << x->rank) - 1;
		for (int i = 0; i < k; i++) {
			int64_t v = ax[i] < 0 ? ax[i] + x->rank : ax[i];
			if (v < 0 || v >= x->rank)
				return WHY("reduction axis %lld out of range for rank %d", (long long)ax[i], x->rank);
			red |= 1u << v;
		}
		for (int i = 0; i < x->rank; i++) {
			if (red >> i & 1) {
				if (keep)
					d[r++] = 1;
			} else {
				d[r++] = x->dims[i];
			}
		}
		return set_out(d, r, out, orank);
	}
	case SHAPE_GATHER: {
		const Shape *idx = in_shape(n, 1);
		if (!x || !idx)
			return 0;
		int64_t axis;
		if (!axis_operand(n, 2, x->rank, &axis))
			return WHY("Gather axis out of range");
		/* the first batch_dims dimensions of params and indices are
		 * shared: out = params[:axis] + indices[batch_dims:] +
		 * params[axis+1:] (ops.gather) */
		int64_t bd;
		if (!ir_gather_batch_dims(n, idx->rank, &bd))
			return WHY("Gather batch_dims out of range for indices of rank %d", idx->rank);
		if (bd > axis)
			return WHY("Gather batch_dims %lld is larger than the axis %lld", (long long)bd, (long long)axis);
		for (int i = 0; i < bd; i++)
			if (x->dims[i] >= 0 && idx->dims[i] >= 0 && x->dims[i] != idx->dims[i])
				return WHY("Gather batch dimension %d is %lld in the params but %lld in the indices", i,
				           (long long)x->dims[i], (long long)idx->dims[i]);
		if (x->rank - 1 + idx->rank - bd > MAX_RANK)
			return WHY("Gather output would have rank more than %d", MAX_RANK);
		for (int i = 0; i < axis; i++)
			d[r++] = x->dims[i];
		for (int i = (int)bd; i < idx->rank && r < MAX_RANK; i++)
			d[r++] = idx->dims[i];
		for (int i = (int)axis + 1; i < x->rank && r < MAX_RANK; i++)
			d[r++] = x->dims[i];
		return set_out(d, r, out, orank);
	}
	case SHAPE_ONEHOT: {
		const Value *dep = operand_or_attr(n, 1, "depth");
		int64_t depth;
		if (!x || !dep || !value_get_int(dep, &depth))
			return 0;
		if (x->rank >= MAX_RANK)
			return WHY("OneHot output would have rank %d, more than %d", x->rank + 1, MAX_RANK);
		if (x->rank)
			memcpy(d, x->dims, x->rank * sizeof(int64_t));
		d[x->rank] = depth;
		return set_out(d, x->rank + 1, out, orank);
	}
	case SHAPE_LOSS: {
		if (!x)
			return 0;
		if (n->out.shape.kind == SK_TUPLE)
			return 0;
		if (x->rank != 2)
			return WHY("%s takes 2-D logits", oi->name);
		d[0] = x->dims[0];
		return set_out(d, 1, out, orank);
	}
	case SHAPE_CONV2D: {
		const Shape *w = in_shape(n, 1);
		if (!x || !w)
			return 0;
		if (x->rank != 4 || w->rank != 4)
			return WHY("Conv2D takes 4-D input and weight");
		int64_t group = 1;
		const Value *gv = ir_attr_get(&n->pattrs, "group");
		if (gv)
			value_get_int(gv, &group);
		if (group <= 0)
			group = 1;
		int64_t cin;
		if (!mul_ok(w->dims[1], group, &cin))
			return WHY("Conv2D weight channels times group overflows int64");
		if (x->dims[1] != cin)
			return WHY("Conv2D input has %lld channels but the weight expects %lld", (long long)x->dims[1],
				   (long long)cin);
		const char *mode = str_attr(n, "pad_mode");
		int64_t s = last_int(ir_attr_get(&n->pattrs, "stride"), 1);
		int64_t dl = last_int(ir_attr_get(&n->pattrs, "dilation"), 1);
		int64_t pad = 0;
		const Value *pv = ir_attr_get(&n->pattrs, "pad");
		if (pv && mode && strcmp(mode, "pad") == 0)
			pad = last_int(pv, 0);
		d[0] = x->dims[0];
		d[1] = w->dims[0];
		if (!conv_out(x->dims[2], w->dims[2], s, dl, mode, pad, &d[2]) ||
		    !conv_out(x->dims[3], w->dims[3], s, dl, mode, pad, &d[3]))
			return WHY("Conv2D output size overflows int64 (kernel, dilation or padding out of range)");
		return set_out(d, 4, out, orank);
	}
	case SHAPE_POOL: {
		if (!x)
			return 0;
		if (x->rank != 4)
			return WHY("%s takes a 4-D input", oi->name);
		const char *mode = str_attr(n, "pad_mode");
		int64_t k = last_int(ir_attr_get(&n->pattrs, "kernel_size"), 1);
		int64_t s = last_int(ir_attr_get(&n->pattrs, "strides"), 1);
		d[0] = x->dims[0];
		d[1] = x->dims[1];
		if (!conv_out(x->dims[2], k, s, 1, mode, 0, &d[2]) || !conv_out(x->dims[3], k, s, 1, mode, 0, &d[3]))
			return WHY("%s output size out of range (kernel_size %lld)", oi->name, (long long)k);
		return set_out(d, 4, out, orank);
	}
	case SHAPE_ALLGATHER:
	case SHAPE_REDUCESCATTER: {
		int64_t rs = 0;
		const Value *v = ir_attr_get(&n->pattrs, "rank_size");
		if (!v)
			v = ir_attr_get(&n->pattrs, "group_rank_ids");
		if (v && v->kind == V_TUPLE)
			rs = v->n;
		else if (v)
			value_get_int(v, &rs);
		if (!x || rs <= 0 || x->rank == 0)
			return 0;
		memcpy(d, x->dims, x->rank * sizeof(int64_t));
		if (d[0] < 0)
			return 0; /* dynamic */
		if (oi->shape == SHAPE_ALLGATHER) {
			if (!mul_ok(d[0], rs, &d[0]))
				return WHY("AllGather output dimension overflows int64");
		} else {
			if (d[0] % rs)
				return WHY("ReduceScatter: dimension 0 (%lld) not divisible by %lld", (long long)d[0], (long long)rs);
			d[0] /= rs;
		}
		return set_out(d, x->rank, out, orank);
	}
	case SHAPE_STRIDEDSLICE: {
		int64_t bg[MAX_RANK], en[MAX_RANK], st[MAX_RANK];
		if (!x || n->nargs < 4)
			return 0;
		int kb = value_int_list(&n->args[1], bg, MAX_RANK);
		int ke = value_int_list(&n->args[2], en, MAX_RANK);
		int ks = value_int_list(&n->args[3], st, MAX_RANK);
		if (kb < 0 || kb != ke || kb != ks || kb > x->rank)
			return 0;
		for (uint32_t i = 4; i < n->nargs; i++) {
			int64_t mk;
			if (value_get_int(&n->args[i], &mk) && mk != 0)
				return 0;
		}
		for (const char *const *mk = (const char *const[]){"begin_mask", "end_mask", "ellipsis_mask",
							      "new_axis_mask", "shrink_axis_mask", NULL};
		     *mk; mk++) {
			int64_t mv;
			const Value *v = ir_attr_get(&n->pattrs, *mk);
			if (v && value_get_int(v, &mv) && mv != 0)
				return 0;
		}
		for (int i = 0; i < x->rank; i++) {
			if (i >= kb) {
				d[i] = x->dims[i];
				continue;
			}
			int64_t n0 = x->dims[i];
			if (n0 < 0 || st[i] <= 0)
				return 0; /* dynamic, or a backward slice */
			/* begin and end clamp to [0, n0] (negative ones count from the end) */
			int64_t b0 = bg[i] < 0 ? bg[i] + n0 : bg[i];
			int64_t e0 = en[i] < 0 ? en[i] + n0 : en[i];
			b0 = b0 < 0 ? 0 : b0 > n0 ? n0 : b0;
			e0 = e0 < 0 ? 0 : e0 > n0 ? n0 : e0;
			d[i] = e0 > b0 ? (e0 - b0 - 1) / st[i] + 1 : 0;
		}
		return set_out(d, x->rank, out, orank);
	}
	case SHAPE_EXPANDDIMS: {
		const Value *a = operand_or_attr(n, 1, "axis");
		int64_t ax;
		if (!x || !a || !value_get_int(a, &ax))
			return 0;
		if (ax < 0)
			ax += x->rank + 1;
		if (ax < 0 || ax > x->rank)
			return WHY("ExpandDims axis out of range");
		if (x->rank >= MAX_RANK)
			return WHY("ExpandDims output would have rank %d, more than %d", x->rank + 1, MAX_RANK);
		for (int i = 0, j = 0; i <= x->rank; i++)
			d[i] = i == ax ? 1 : x->dims[j++];
		return set_out(d, x->rank + 1, out, orank);
	}
	default:
		return 0;
	}
}
