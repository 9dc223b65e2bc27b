/* randstrat.c - give every operator of an IR file a random *valid* strategy
 * for N devices (the property test's input generator).
 *
 *   randstrat N SEED [in.ir] > out.ir   (N: devices per pipeline stage; stdin by default)
 *
 * Strategies are built valid by construction, family by family, with the
 * rules of parallel-lowering.md §2.3: every split divides its dimension and
 * the product of each input's splits divides N (so the repeat count is an
 * integer).  About one operator in eight is left without a strategy, so the
 * batch-parallel default of the lowering is exercised as well.  Existing
 * strategies are replaced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sappc.h"

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return n ? (uint32_t)((rng >> 33) % n) : 0;
}

/* a random divisor of budget that divides dim (1 allowed) */
static int64_t pick(int64_t dim, int64_t *budget)
{
	int64_t c[64];
	int n = 0;
	for (int64_t d = 1; d <= *budget && n < 64; d++)
		if (*budget % d == 0 && dim > 0 && dim % d == 0)
			c[n++] = d;
	int64_t d = n ? c[rnd((uint32_t)n)] : 1;
	if (rnd(3) == 0)
		d = 1;
	*budget /= d;
	return d;
}

#define MAXT 8
typedef struct {
	int nt, rk[MAXT], op[MAXT]; /* op: operand index */
	const int64_t *shp[MAXT];
	int64_t s[MAXT][MAX_RANK];
} St;

static int axis_of(const Node *n, uint32_t i, const char *key, int rank, int dflt)
{
	int64_t a = dflt;
	const Value *v = i < n->nargs && n->args[i].kind != V_NODE ? &n->args[i] : ir_attr_get(&n->pattrs, key);
	int64_t l[MAX_RANK];
	if (v && !value_get_int(v, &a) && value_int_list(v, l, MAX_RANK) >= 1)
		a = l[0]; /* a one-element tuple: Softmax's (I64(-1)) */
	return (int)(a < 0 ? a + rank : a);
}

static void ones(St *t)
{
	for (int k = 0; k < t->nt; k++)
		for (int i = 0; i < t->rk[k]; i++)
			t->s[k][i] = 1;
}

static int gen(const Node *n, St *t, int64_t N)
{
	int64_t b = N;
	ones(t);
	switch (op_table[n->op].family) {
	case FAM_MATMUL:
	case FAM_BATCHMATMUL: {
		if (t->nt != 2)
			return -1;
		int ra = t->rk[0], rb = t->rk[1];
		if (ra < 2 || rb < 2)
			return -1;
		int ta = ir_node_flag(n, 2, "transpose_a", "transpose_x1"), tb = ir_node_flag(n, 3, "transpose_b", "transpose_x2");
		int nb = (ra > rb ? ra : rb) - 2;
		for (int i = 0; i < nb; i++) {
			int ia = i - (nb - (ra - 2)), ib = i - (nb - (rb - 2));
			int64_t da = ia >= 0 ? t->shp[0][ia] : 1, db = ib >= 0 ? t->shp[1][ib] : 1;
			if (da != db && da != 1 && db != 1)
				return -1;
			int64_t x = pick(da > db ? da : db, &b);
			if (ia >= 0 && da != 1)
				t->s[0][ia] = x;
			if (ib >= 0 && db != 1)
				t->s[1][ib] = x;
			if ((ia >= 0 && da == 1 && ib >= 0 && db == 1))
				b *= x;
		}
		int arow = ta ? ra - 1 : ra - 2, ak = ta ? ra - 2 : ra - 1;
		int bk = tb ? rb - 1 : rb - 2, bcol = tb ? rb - 2 : rb - 1;
		t->s[0][arow] = pick(t->shp[0][arow], &b);
		int64_t k = pick(t->shp[0][ak] == t->shp[1][bk] ? t->shp[0][ak] : 1, &b);
		t->s[0][ak] = t->s[1][bk] = k;
		t->s[1][bcol] = pick(t->shp[1][bcol], &b);
		return 0;
	}
	case FAM_ELEMWISE: {
		if (n->op == OP_AddN)
			goto same;
		int R = 0;
		for (int k = 0; k < t->nt; k++)
			if (t->rk[k] > R)
				R = t->rk[k];
		int64_t od[MAX_RANK], s[MAX_RANK];
		for (int i = 0; i < R; i++) {
			od[i] = 1;
			for (int k = 0; k < t->nt; k++) {
				int j = i - (R - t->rk[k]);
				if (j >= 0 && t->shp[k][j] > od[i])
					od[i] = t->shp[k][j];
			}
			s[i] = pick(od[i], &b);
		}
		for (int k = 0; k < t->nt; k++)
			for (int j = 0; j < t->rk[k]; j++) {
				int i = j + (R - t->rk[k]);
				t->s[k][j] = t->shp[k][j] == 1 ? 1 : s[i];
			}
		return 0;
	}
	case FAM_BIASADD:
		if (t->nt != 2 || t->rk[0] < 2)
			return -1;
		for (int i = 0; i < t->rk[0]; i++)
			t->s[0][i] = pick(t->shp[0][i], &b);
		t->s[1][0] = t->s[0][1];
		return 0;
	case FAM_SOFTMAX: {
		int a = axis_of(n, 1, "axis", t->rk[0], -1);
		for (int i = 0; i < t->rk[0]; i++)
			t->s[0][i] = i == a ? 1 : pick(t->shp[0][i], &b);
		return 0;
	}
	case FAM_LAYERNORM:
	case FAM_RMSNORM: {
		int rx = t->rk[0];
		int bna = n->op == OP_RmsNorm ? rx - 1 : axis_of(n, 99, "begin_norm_axis", rx, -1);
		for (int i = 0; i < rx; i++)
			t->s[0][i] = i >= bna ? 1 : pick(t->shp[0][i], &b);
		for (int k = 1; k < t->nt; k++)
			for (int i = 0; i < t->rk[k]; i++)
				t->s[k][i] = t->s[0][rx - t->rk[k] + i];
		return 0;
	}
	case FAM_FLATTEN:
		for (int i = 0; i < t->rk[0] && i < 2; i++)
			t->s[0][i] = pick(t->shp[0][i], &b);
		return 0;
	case FAM_GATHER: {
		/* batch dimensions split alike in both; the gathered axis only
		 * in the row-split embedding form (2-D table, axis 0) */
		if (t->nt != 2)
			return -1;
		int rt = t->rk[0], ri = t->rk[1];
		int64_t bd;
		int ax = axis_of(n, 2, "axis", rt, 0);
		if (!ir_gather_batch_dims(n, ri, &bd) || ax < bd || ax >= rt)
			return -1;
		for (int i = 0; i < ri; i++)
			t->s[1][i] = pick(t->shp[1][i], &b);
		for (int i = 0; i < rt; i++)
			t->s[0][i] = i < bd ? t->s[1][i] : i != ax || (!bd && ax == 0 && rt == 2) ? pick(t->shp[0][i], &b) : 1;
		return 0;
	}
	case FAM_ONEHOT: {
		/* the strategy has the output's rank; 1-D indices may split the
		 * depth too, others the first dimension only */
		const Shape *o = &n->out.shape;
		int ri = t->rk[0];
		if (ri < 1 || o->kind != SK_DIMS || o->rank != ri + 1)
			return -1;
		t->rk[0] = o->rank;
		t->shp[0] = o->dims;
		for (int i = 0; i < o->rank; i++)
			t->s[0][i] = i == 0 || ri == 1 ? pick(o->dims[i], &b) : 1;
		return 0;
	}
	case FAM_CONCAT: {
		/* one strategy for every element, whole along the axis */
		int r = t->rk[0];
		int ax = axis_of(n, 1, "axis", r, 0);
		for (int k = 1; k < t->nt; k++)
			if (t->rk[k] != r)
				return -1;
		for (int i = 0; i < r; i++) {
			int64_t x = i == ax ? 1 : pick(t->shp[0][i], &b);
			for (int k = 0; k < t->nt; k++)
				t->s[k][i] = x;
		}
		return 0;
	}
	case FAM_SPARSELOSS:
	case FAM_LOSS:
		if (t->nt != 2 || t->rk[0] != 2)
			return -1;
		t->s[0][0] = pick(t->shp[0][0], &b);
		t->s[1][0] = t->s[0][0];
		return 0;
	case FAM_ARGWITHVALUE: {
		/* the axis (default 0) stays whole */
		int ax = axis_of(n, 1, "axis", t->rk[0], 0);
		for (int i = 0; i < t->rk[0]; i++)
			t->s[0][i] = i == ax ? 1 : pick(t->shp[0][i], &b);
		return 0;
	}
	case FAM_VIRTUAL:
		/* a _VirtualDataset: any strategy per input, each within N */
		if (n->op != OP_VirtualDataset)
			return -1;
		for (int k = 0; k < t->nt; k++) {
			int64_t bk = N;
			for (int i = 0; i < t->rk[k]; i++)
				t->s[k][i] = pick(t->shp[k][i], &bk);
		}
		return 0;
	case FAM_CONV:
		if (t->nt != 2 || t->rk[0] != 4 || t->rk[1] != 4)
			return -1;
		t->s[0][0] = pick(t->shp[0][0], &b);
		t->s[0][1] = t->s[1][1] = pick(t->shp[0][1] == t->shp[1][1] ? t->shp[0][1] : 1, &b);
		t->s[1][0] = pick(t->shp[1][0], &b);
		return 0;
	case FAM_POOL:
		t->s[0][0] = pick(t->shp[0][0], &b);
		t->s[0][1] = pick(t->shp[0][1], &b);
		return 0;
	case FAM_BATCHNORM:
		t->s[0][0] = pick(t->shp[0][0], &b);
		t->s[0][1] = pick(t->shp[0][1], &b);
		for (int k = 1; k < t->nt; k++)
			t->s[k][0] = t->s[0][1];
		return 0;
	case FAM_STRIDEDSLICE:
	case FAM_SPLIT:
		return 0; /* all ones: always valid */
	case FAM_ATTENTION: {
		/* batch, sequence and heads from the query; every other operand
		 * as MindSpore's FlashAttentionScoreInfo derives it */
		AttnInfo ai;
		char why[200];
		if (ir_attention_info(n, &ai, why, sizeof why) != 1)
			return -1;
		int64_t hb = pick(ai.batch, &b), hq = ai.mask_compressed ? 1 : pick(ai.s1, &b);
		int64_t hh = pick(ai.kv_split ? ai.kv_heads : ai.heads, &b);
		if (ai.heads % hh)
			hh = 1;
		for (int k = 0; k < t->nt; k++) {
			int role = t->op[k] < ATTN_MAX_OPND ? ai.role[t->op[k]] : AR_NONE, r = t->rk[k];
			int64_t *v = t->s[k];
			const int64_t *d = t->shp[k];
			if (role == AR_Q)
				v[ai.bdim] = hb, v[ai.sdim] = hq, v[ai.ndim] = hh;
			else if (role == AR_K || role == AR_V)
				v[ai.bdim] = hb, v[ai.ndim] = ai.kv_split ? hh : 1;
			else if (role == AR_MASK && r == 2)
				v[0] = hq;
			else if (role == AR_MASK && r == 4)
				v[0] = d[0] > 1 ? hb : 1, v[1] = d[1] > 1 ? hh : 1, v[2] = hq;
			else if ((role == AR_SHIFT || role == AR_DROP) && r == 4)
				v[0] = d[0] > 1 ? hb : 1, v[1] = hh, v[2] = d[2] > 1 ? hq : 1;
			else if (role == AR_PREFIX && r == 1)
				v[0] = hb;
		}
		return 0;
	}
	case FAM_ROPE:
	case FAM_SWIGLU:
	case FAM_L2NORM:
	case FAM_CUM: {
		/* element-wise (cos/sin broadcast) with one axis whole */
		int R = t->rk[0];
		int a = n->op == OP_Swiglu ? axis_of(n, 1, "dim", R, -1)
		        : n->op == OP_L2Normalize ? axis_of(n, 99, "axis", R, 0)
		        : op_table[n->op].family == FAM_CUM ? axis_of(n, 1, "axis", R, 0)
		                                             : R - 1;
		for (int i = 0; i < R; i++)
			t->s[0][i] = i == a ? 1 : pick(t->shp[0][i], &b);
		for (int k = 1; k < t->nt; k++)
			for (int j = 0; j < t->rk[k]; j++) {
				int i = j + (R - t->rk[k]);
				t->s[k][j] = i < 0 || t->shp[k][j] == 1 ? 1 : t->s[0][i];
			}
		return 0;
	}
	case FAM_DENSE:
		if (t->nt < 2 || t->rk[1] != 2)
			return -1;
		for (int i = 0; i < t->rk[0] - 1; i++)
			t->s[0][i] = pick(t->shp[0][i], &b);
		t->s[1][0] = pick(t->shp[1][0], &b);
		if (t->nt == 3)
			t->s[2][0] = t->s[1][0];
		return 0;
	case FAM_SLICE:
	case FAM_TILE:
	case FAM_SORT:
	case FAM_LPNORM: {
		/* dimensions the operator keeps whole: cut by the slice, repeated,
		 * sorted, reduced */
		int64_t v1[MAX_RANK], v2[MAX_RANK];
		int R = t->rk[0], fam = op_table[n->op].family;
		const Value *a1 = n->nargs > 1 && n->args[1].kind != V_NODE ? &n->args[1] : NULL;
		const Value *a2 = n->nargs > 2 && n->args[2].kind != V_NODE ? &n->args[2] : NULL;
		int k1 = value_int_list(a1, v1, MAX_RANK), k2 = value_int_list(a2, v2, MAX_RANK);
		if (fam == FAM_LPNORM)
			k1 = value_int_list(ir_attr_get(&n->pattrs, "axis"), v1, MAX_RANK);
		int sa = n->op == OP_TopK ? R - 1 : axis_of(n, 1, "axis", R, -1);
		/* LpNorm's reduced axes may be cut when p > 0: the comm pass
		 * sums the partial p-th powers */
		int64_t p = 2;
		const Value *pv = fam == FAM_LPNORM ? ir_attr_get(&n->pattrs, "p") : NULL;
		if (pv)
			value_get_int(pv, &p);
		if (fam == FAM_LPNORM && p > 0)
			k1 = 0;
		for (int i = 0; i < R; i++) {
			int whole = 0;
			if (fam == FAM_SLICE)
				whole = k1 != R || k2 != R || v1[i] != 0 || (v2[i] != -1 && v2[i] != t->shp[0][i]);
			else if (fam == FAM_TILE)
				whole = k1 < R || v1[k1 - R + i] != 1;
			else if (fam == FAM_SORT)
				whole = i == sa;
			else
				for (int j = 0; j < k1; j++)
					whole |= (v1[j] < 0 ? v1[j] + R : v1[j]) == i;
			t->s[0][i] = whole ? 1 : pick(t->shp[0][i], &b);
		}
		return 0;
	}
	case FAM_SCATTER:
		/* ScatterDiv: the variable's rows and the indices whole, the
		 * updates' trailing dimensions like the variable's */
		if (t->nt != 3 || t->rk[2] != t->rk[1] + t->rk[0] - 1)
			return -1;
		for (int i = 1; i < t->rk[0]; i++)
			t->s[0][i] = t->s[2][t->rk[1] + i - 1] = pick(t->shp[0][i], &b);
		return 0;
	case FAM_UNSPLIT:
		return 0; /* RandomChoiceWithMask, MoE routing: all ones */
	case FAM_GMM: {
		/* GroupedMatmul: x's leading dimensions (whole under a group_list),
		 * K shared by x and the weights, the weights' N; every element of
		 * a list alike, the experts and group_list whole; group_type 2 all
		 * ones */
		GmmInfo gi;
		char why[8];
		if (ir_gmm_info(n, &gi, why, sizeof why) != 1 || t->nt != gi.nx + gi.nw + gi.grouped)
			return -1;
		if (gi.group_type == 2)
			return 0;
		int X = 0, W = gi.nx, rx = t->rk[X], rw = t->rk[W];
		int64_t v[MAX_RANK];
		for (int i = 0; i < rx - 1; i++)
			v[i] = gi.grouped ? 1 : pick(t->shp[X][i], &b);
		int64_t kk = pick(t->shp[X][rx - 1], &b), nn = pick(t->shp[W][rw - 1], &b);
		for (int k = 0; k < gi.nx + gi.nw; k++) {
			int r = t->rk[k], isx = k < W;
			if (r != (isx ? rx : rw))
				return -1;
			for (int i = 0; isx && i < r - 1; i++)
				if (t->shp[k][i] % v[i])
					v[i] = 1;
			if (t->shp[k][isx ? r - 1 : r - 2] % kk)
				kk = 1;
			if (!isx && t->shp[k][r - 1] % nn)
				nn = 1;
		}
		for (int k = 0; k < gi.nx + gi.nw; k++) {
			int r = t->rk[k];
			if (k < W) {
				for (int i = 0; i < r - 1; i++)
					t->s[k][i] = v[i];
				t->s[k][r - 1] = kk;
			} else {
				t->s[k][r - 2] = kk;
				t->s[k][r - 1] = nn;
			}
		}
		return 0;
	}
	case FAM_PRELU:
		if (t->nt != 2 || t->rk[0] < 2 || t->rk[1] != 1)
			return -1;
		for (int i = 0; i < t->rk[0]; i++)
			t->s[0][i] = pick(t->shp[0][i], &b);
		t->s[1][0] = t->shp[1][0] == 1 ? 1 : t->s[0][1];
		return 0;
	case FAM_REDUCE:
	case FAM_TRANSPOSE:
	case FAM_UNARY:
	case FAM_CAST:
	case FAM_EXPANDDIMS:
	case FAM_SQUEEZE:
	same:
		for (int i = 0; i < t->rk[0]; i++)
			t->s[0][i] = pick(t->shp[0][i], &b);
		for (int k = 1; k < t->nt; k++)
			for (int i = 0; i < t->rk[k]; i++)
				t->s[k][i] = t->rk[k] == t->rk[0] ? t->s[0][i] : 1;
		return 0;
	default:
		return -1;
	}
}

static Value strategy_value(Arena *a, const St *t)
{
	Value tup[MAXT];
	for (int k = 0; k < t->nt; k++)
		tup[k] = *value_tuple_ints(a, t->s[k], t->rk[k], NT_BARE);
	return value_tuple_of(a, tup, (uint32_t)t->nt);
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: randstrat N SEED [in.ir] > out.ir\n");
		return 2;
	}
	int64_t N = atoll(argv[1]);
	rng = (uint64_t)atoll(argv[2]) * 2654435761u + 1;
	char *buf;
	size_t len;
	const char *path = argc == 4 ? argv[3] : "-";
	if (io_read_file(path, &buf, &len) != 0)
		return 3;
	Module *m = ir_parse(argc == 4 ? path : "<stdin>", buf, len, 0);
	if (!m)
		return 1;
	Graph *g = ir_entry(m);
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || op_table[n->op].family == FAM_RESHAPE)
			continue;
		St t = {0};
		int fam = op_table[n->op].family;
		const Node *src = n;
		if ((fam == FAM_CONCAT || n->op == OP_AddN) && n->nargs && n->args[0].kind == V_NODE &&
		    ir_node_is_op(n->args[0].u.node, OP_MakeTuple))
			src = n->args[0].u.node;
		/* GroupedMatmul: the elements of its x and weight lists, then
		 * group_list */
		const Node *srcs[3] = {src, NULL, NULL};
		uint32_t only[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
		if (fam == FAM_GMM) {
			for (uint32_t l = 0; l < 2; l++)
				srcs[l] = l < n->nargs && n->args[l].kind == V_NODE &&
				                  ir_node_is_op(n->args[l].u.node, OP_MakeTuple)
				              ? n->args[l].u.node
				              : NULL;
			if (!srcs[0] || !srcs[1])
				continue;
			srcs[2] = n;
			only[2] = 7;
		}
		for (int l = 0; l < 3 && srcs[l]; l++) {
			src = srcs[l];
			for (uint32_t k = 0; k < src->nargs && t.nt < MAXT; k++) {
				if (only[l] != UINT32_MAX && k != only[l])
					continue;
				const Abs *a = ir_in_abs(src, k);
				if (!a || !a->is_tensor || a->shape.kind != SK_DIMS)
					continue;
				if (src->args[k].kind != V_NODE && (src != n || src->args[k].kind != V_CALL))
					continue;
				t.rk[t.nt] = a->shape.rank;
				t.op[t.nt] = (int)k;
				t.shp[t.nt++] = a->shape.dims;
			}
		}
		/* the generated strategy replaces any given one (suffix or attribute) */
		AttrList st = *ir_node_strat(n);
		for (AttrList *l = &st; l; l = l == &st ? &n->pattrs : NULL)
			for (uint32_t k = 0; k < l->n; k++)
				if (strcmp(sym_str(l->a[k].key), "in_strategy") == 0) {
					memmove(&l->a[k], &l->a[k + 1], (l->n - k - 1) * sizeof *l->a);
					l->n--;
					break;
				}
		ir_node_set_strat(m, n, st);
		if (!t.nt || gen(n, &t, N) < 0 || rnd(8) == 0)
			continue;
		Value v = strategy_value(m->arena, &t);
		Value *old = ir_attr_get(&st, "in_strategy");
		if (old)
			*old = v;
		else
			ir_attr_set(m, &st, "in_strategy", v);
		ir_node_set_strat(m, n, st);
		n->has_strat = 1;
	}
	ir_print_module(stdout, m);
	ir_module_free(m);
	io_free_file(buf);
	intern_free_all();
	return ferror(stdout) ? 3 : 0;
}
