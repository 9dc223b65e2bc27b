/* rules.c - per-operator layout rules (parallel-lowering.md §2.2-§2.4).
 *
 * For an operator with a strategy (given, or the batch-parallel default of
 * §2.2 when none is given) a rule computes the device matrix and the tensor
 * map of every tensor input and output, and the operator's forward
 * communication (§3.1).  The generic tail then checks the strategy (divides
 * the shape, product at most the stage's devices), appends the repeated
 * dimension on the right (§2.2 step 4) and stores the result on n->lay.
 * Rules never report: they return -1 with a reason so that a failing default
 * strategy can fall back to replication quietly.
 */
#include <stddef.h>
#include <string.h>

#include "lower.h"

#define MAXT 16 /* tensor inputs an operator may have */

typedef struct Rule {
	int ndev;
	int64_t dev[LAYOUT_MAX_DIM + 2];
	int nt;                          /* tensor inputs */
	int opnd[MAXT];                  /* operand index of tensor input k (in tup[k] when set) */
	const Node *tup[MAXT];           /* the MakeTuple operand that holds input k, NULL: none */
	int rk[MAXT];                    /* rank */
	const int64_t *shp[MAXT];        /* global shape */
	int64_t s[MAXT][LAYOUT_MAX_DIM]; /* strategy */
	int8_t imap[MAXT][LAYOUT_MAX_DIM];
	int nout;
	int ork[MAXT];
	const int64_t *oshp[MAXT];
	int8_t omap[MAXT][LAYOUT_MAX_DIM];
	int fwd;
	uint32_t fwd_mask;
	const char *fwd_op;
	char why[256];
} Rule;

#define FAIL(...) (snprintf(r->why, sizeof r->why, __VA_ARGS__), -1)

static void fmt_strategy(char *buf, size_t len, const int64_t *s, int n);

static void ident(Rule *r, int k, int base)
{
	for (int i = 0; i < r->rk[k]; i++)
		r->imap[k][i] = (int8_t)(base - 1 - i);
}

static void out_ident(Rule *r, int k, int base)
{
	for (int i = 0; i < r->ork[k]; i++)
		r->omap[k][i] = (int8_t)(base - 1 - i);
}

static void dev_from(Rule *r, int k)
{
	r->ndev = r->rk[k];
	for (int i = 0; i < r->rk[k]; i++)
		r->dev[i] = r->s[k][i];
}

/* literal operand i or primitive attribute key */
static const Value *lit(const Node *n, uint32_t i, const char *key)
{
	if (i < n->nargs && n->args[i].kind != V_NODE && n->args[i].kind != V_EXTERN)
		return &n->args[i];
	return key ? ir_attr_get(&n->pattrs, key) : NULL;
}

static int norm_axis(int64_t a, int rank)
{
	return (int)(a < 0 ? a + rank : a);
}

/* ------------------------------------------------------------ rules */

static int r_matmul(Rule *r, const Node *n)
{
	if (r->nt != 2)
		return FAIL("expects 2 tensor inputs");
	int ra = r->rk[0], rb = r->rk[1];
	if (ra < 2 || rb < 2)
		return FAIL("inputs must have rank 2 or more");
	int batch = n->op == OP_BatchMatMul;
	if (!batch && (ra != 2 || rb != 2))
		return FAIL("MatMul inputs must be 2-D");
	int ta = ir_node_flag(n, 2, "transpose_a", "transpose_x1"), tb = ir_node_flag(n, 3, "transpose_b", "transpose_x2");
	const int64_t *sa = r->s[0], *sb = r->s[1];
	int64_t a_row = ta ? sa[ra - 1] : sa[ra - 2], a_k = ta ? sa[ra - 2] : sa[ra - 1];
	int64_t b_k = tb ? sb[rb - 1] : sb[rb - 2], b_col = tb ? sb[rb - 2] : sb[rb - 1];
	if (a_k != b_k)
		return FAIL("the reduction dimension is split %lld ways in input 1 but %lld ways in input 2",
		            (long long)a_k, (long long)b_k);
	int nb = (ra > rb ? ra : rb) - 2;
	r->ndev = 0;
	for (int i = 0; i < nb; i++) {
		int ia = i - (nb - (ra - 2)), ib = i - (nb - (rb - 2));
		int64_t xa = ia >= 0 ? sa[ia] : 1, xb = ib >= 0 ? sb[ib] : 1;
		int64_t da = ia >= 0 ? r->shp[0][ia] : 1, db = ib >= 0 ? r->shp[1][ib] : 1;
		if (xa != xb && !((xa == 1 && da == 1) || (xb == 1 && db == 1)))
			return FAIL("batch dimension %d is split %lld ways in input 1 but %lld ways in input 2", i,
			            (long long)xa, (long long)xb);
		r->dev[r->ndev++] = xa > xb ? xa : xb;
	}
	r->dev[r->ndev++] = a_row;
	r->dev[r->ndev++] = a_k;
	r->dev[r->ndev++] = b_col;
	int size = r->ndev;
	int8_t idx[LAYOUT_MAX_DIM + 2];
	for (int i = 0; i < size; i++)
		idx[i] = (int8_t)(size - 1 - i);
	/* A: idx without its last element, the last ra of them */
	for (int i = 0; i < ra; i++)
		r->imap[0][i] = idx[size - 1 - ra + i];
	if (ta) {
		int8_t t = r->imap[0][ra - 1];
		r->imap[0][ra - 1] = r->imap[0][ra - 2];
		r->imap[0][ra - 2] = t;
	}
	/* B: idx without the third-from-end element, the last rb of them */
	int8_t bidx[LAYOUT_MAX_DIM + 2];
	int nbi = 0;
	for (int i = 0; i < size; i++)
		if (i != size - 3)
			bidx[nbi++] = idx[i];
	for (int i = 0; i < rb; i++)
		r->imap[1][i] = bidx[nbi - rb + i];
	if (tb) {
		int8_t t = r->imap[1][rb - 1];
		r->imap[1][rb - 1] = r->imap[1][rb - 2];
		r->imap[1][rb - 2] = t;
	}
	/* broadcast batch dimensions of size 1 are not split */
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < r->rk[k] - 2; i++)
			if (r->shp[k][i] == 1)
				r->imap[k][i] = -1;
	for (int i = 0, j = 0; i < size; i++)
		if (i != size - 2)
			r->omap[0][j++] = idx[i];
	for (int i = 0; i < r->ork[0] - 2 && i < nb; i++)
		if (r->oshp[0][i] == 1)
			r->omap[0][i] = -1;
	if (a_k > 1) {
		r->fwd = FC_ALLREDUCE;
		r->fwd_mask = 1u << (size - 2);
		r->fwd_op = "sum";
	}
	return 0;
}

static int r_elemwise(Rule *r, const Node *n)
{
	(void)n;
	int R = 0;
	for (int k = 0; k < r->nt; k++)
		if (r->rk[k] > R)
			R = r->rk[k];
	r->ndev = R;
	for (int i = 0; i < R; i++)
		r->dev[i] = 1;
	for (int k = 0; k < r->nt; k++) {
		int pad = R - r->rk[k];
		for (int i = 0; i < r->rk[k]; i++) {
			int64_t s = r->s[k][i], d = r->dev[pad + i];
			if (s == d || s == 1)
				continue;
			if (d != 1)
				return FAIL("inputs are split differently on dimension %d (%lld and %lld ways)",
				            pad + i, (long long)d, (long long)s);
			r->dev[pad + i] = s;
		}
	}
	for (int k = 0; k < r->nt; k++) {
		int pad = R - r->rk[k];
		for (int i = 0; i < r->rk[k]; i++) {
			int64_t s = r->s[k][i], d = r->dev[pad + i];
			if (s == d)
				r->imap[k][i] = (int8_t)(R - 1 - (pad + i));
			else if (r->shp[k][i] == 1)
				r->imap[k][i] = -1;
			else
				return FAIL(
				    "input %d is not split on dimension %d, which another input splits %lld ways "
				    "(only a broadcast dimension of size 1 may differ)",
				    k + 1, i, (long long)d);
		}
	}
	out_ident(r, 0, R);
	return 0;
}

static int r_identity(Rule *r, const Node *n)
{
	(void)n;
	if (r->nt < 1)
		return FAIL("expects a tensor input");
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	for (int k = 1; k < r->nt; k++) {
		if (r->rk[k] != r->rk[0])
			return FAIL("input %d has a different rank from input 1", k + 1);
		for (int i = 0; i < r->rk[k]; i++)
			if (r->s[k][i] != r->s[0][i])
				return FAIL("input %d must be split like input 1", k + 1);
		ident(r, k, r->rk[0]);
	}
	for (int o = 0; o < r->nout; o++)
		if (r->ork[o] == r->rk[0])
			out_ident(r, o, r->rk[0]);
	return 0;
}

/* an operator that maps its input through but works along `axis`
 * (operand 1 or attribute, dflt when absent), which must stay whole */
static int whole_axes(Rule *r, const Node *n, int64_t dflt, const char *what)
{
	if (r_identity(r, n) < 0)
		return -1;
	int64_t ax[LAYOUT_MAX_DIM];
	int k = value_int_list(lit(n, 1, "axis"), ax, LAYOUT_MAX_DIM);
	if (k <= 0) {
		ax[0] = dflt;
		k = 1;
	}
	for (int i = 0; i < k; i++) {
		int a = norm_axis(ax[i], r->rk[0]);
		if (a >= 0 && a < r->rk[0] && r->s[0][a] != 1)
			return FAIL("%s %d must not be split (strategy %lld)", what, a, (long long)r->s[0][a]);
	}
	return 0;
}

static int r_softmax(Rule *r, const Node *n)
{
	return whole_axes(r, n, -1, "the softmax axis");
}

static int r_biasadd(Rule *r, const Node *n)
{
	(void)n;
	if (r->nt != 2 || r->rk[1] != 1 || r->rk[0] < 2)
		return FAIL("expects an input of rank >= 2 and a 1-D bias");
	if (r->s[1][0] != r->s[0][1])
		return FAIL("the bias must be split like the channel dimension (%lld ways, not %lld)",
		            (long long)r->s[0][1], (long long)r->s[1][0]);
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	r->imap[1][0] = (int8_t)(r->rk[0] - 2);
	out_ident(r, 0, r->rk[0]);
	return 0;
}

static int reduce_axes(const Node *n, int rank, unsigned *red, int *keep)
{
	int64_t ax[LAYOUT_MAX_DIM];
	const Value *a = lit(n, 1, "axis");
	int k = a ? value_int_list(a, ax, LAYOUT_MAX_DIM) : 0;
	if (k < 0)
		k = 0;
	*red = 0;
	if (k == 0)
		*red = (1u << rank) - 1;
	for (int i = 0; i < k; i++) {
		int v = norm_axis(ax[i], rank);
		if (v < 0 || v >= rank)
			return -1;
		*red |= 1u << v;
	}
	*keep = ir_node_flag(n, 2, "keep_dims", NULL);
	return 0;
}

static int r_reduce(Rule *r, const Node *n)
{
	if (r->nt != 1)
		return FAIL("expects one tensor input");
	unsigned red;
	int keep;
	if (reduce_axes(n, r->rk[0], &red, &keep) < 0)
		return FAIL("reduction axis out of range");
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	int j = 0;
	for (int i = 0; i < r->rk[0]; i++) {
		if (red >> i & 1) {
			if (keep)
				r->omap[0][j++] = -1;
			if (r->s[0][i] > 1)
				r->fwd_mask |= 1u << i;
		} else {
			r->omap[0][j++] = r->imap[0][i];
		}
	}
	if (j != r->ork[0])
		return FAIL("the declared output rank does not match the reduction");
	if (r->fwd_mask) {
		r->fwd = n->op == OP_ReduceMean ? FC_ALLREDUCE_MEAN : FC_ALLREDUCE;
		r->fwd_op = n->op == OP_ReduceMax    ? "max"
		            : n->op == OP_ReduceMin  ? "min"
		            : n->op == OP_ReduceProd ? "prod"
		                                     : "sum";
	}
	return 0;
}

/* ArgMaxWithValue / ArgMinWithValue (MindSpore's ArgMaxWithValueInfo):
 * the index and the value along one axis (default 0); a split axis would
 * need each rank's index shifted and the winners compared across ranks, so
 * the axis stays whole, and both outputs keep the other dimensions' maps. */
static int r_argwithvalue(Rule *r, const Node *n)
{
	if (r->nt != 1 || r->nout != 2)
		return FAIL("expects one tensor input and an (index, value) pair");
	int64_t axis = 0;
	const Value *a = lit(n, 1, "axis");
	if (a)
		value_get_int(a, &axis);
	int rk = r->rk[0], ax = norm_axis(axis, rk), keep = ir_node_flag(n, 2, "keep_dims", NULL);
	if (ax < 0 || ax >= rk)
		return FAIL("axis out of range");
	if (r->s[0][ax] != 1)
		return FAIL("the axis %d must not be split", ax);
	dev_from(r, 0);
	ident(r, 0, rk);
	for (int o = 0; o < 2; o++) {
		int j = 0;
		for (int i = 0; i < rk; i++)
			if (i != ax)
				r->omap[o][j++] = r->imap[0][i];
			else if (keep)
				r->omap[o][j++] = -1;
		if (j != r->ork[o])
			return FAIL("the declared output rank does not match the axis");
	}
	return 0;
}

static int r_transpose(Rule *r, const Node *n)
{
	int64_t p[LAYOUT_MAX_DIM];
	int k = value_int_list(lit(n, 1, "perm"), p, LAYOUT_MAX_DIM);
	if (r->nt != 1 || k != r->rk[0])
		return FAIL("needs a permutation of the input's dimensions");
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	for (int i = 0; i < k; i++) {
		int a = norm_axis(p[i], k);
		if (a < 0 || a >= k)
			return FAIL("bad permutation");
		r->omap[0][i] = r->imap[0][a];
	}
	return 0;
}

static int r_flatten(Rule *r, const Node *n)
{
	(void)n;
	if (r->nt != 1 || r->rk[0] < 1)
		return FAIL("expects one tensor input");
	for (int i = 2; i < r->rk[0]; i++)
		if (r->s[0][i] != 1)
			return FAIL("only the first two dimensions may be split (dimension %d is split %lld ways)", i,
			            (long long)r->s[0][i]);
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	r->omap[0][0] = r->imap[0][0];
	if (r->ork[0] > 1)
		r->omap[0][1] = r->rk[0] > 1 ? r->imap[0][1] : -1;
	return 0;
}

/* Gather (MindSpore's GatherInfo, ops_info/gather_info.cc): the device
 * matrix is the indices' strategy followed by the params' (without its
 * first batch_dims entries, which must equal the indices' and share their
 * device dimensions); the output takes params[:axis], indices[batch_dims:],
 * params[axis+1:].  The gathered axis may be split only in the row-split
 * embedding form (axis 0, no batch_dims, §2.3 Gather), whose local
 * lookups are masked and summed by a forward AllReduce. */
static int r_gather(Rule *r, const Node *n, int *rowsplit)
{
	if (r->nt != 2)
		return FAIL("expects a table and indices");
	int64_t axis = 0, bd;
	const Value *a = lit(n, 2, "axis");
	if (a)
		value_get_int(a, &axis);
	int rt = r->rk[0], ri = r->rk[1];
	int ax = norm_axis(axis, rt);
	if (ax < 0 || ax >= rt || !ir_gather_batch_dims(n, ri, &bd) || bd > ax)
		return FAIL("bad axis or batch_dims");
	const int64_t *p = r->s[0], *q = r->s[1];
	for (int i = 0; i < bd; i++)
		if (p[i] != q[i])
			return FAIL("batch dimension %d is split %lld ways in the params but %lld in the indices", i,
			            (long long)p[i], (long long)q[i]);
	if (p[ax] != 1 && (ax != 0 || bd))
		return FAIL("the gathered axis %d may be split only when it is 0 (the row-split embedding)", ax);
	r->ndev = 0;
	for (int i = 0; i < ri; i++)
		r->dev[r->ndev++] = q[i];
	for (int i = (int)bd; i < rt; i++)
		r->dev[r->ndev++] = p[i];
	int size = r->ndev;
	for (int i = 0; i < ri; i++)
		r->imap[1][i] = (int8_t)(size - 1 - i);
	for (int i = 0; i < rt; i++)
		r->imap[0][i] = i < bd ? r->imap[1][i] : (int8_t)(size - 1 - (ri + i - (int)bd));
	int j = 0;
	for (int i = 0; i < ax; i++)
		r->omap[0][j++] = r->imap[0][i];
	for (int i = (int)bd; i < ri; i++)
		r->omap[0][j++] = r->imap[1][i];
	for (int i = ax + 1; i < rt; i++)
		r->omap[0][j++] = r->imap[0][i];
	*rowsplit = p[ax] > 1;
	if (*rowsplit) {
		r->fwd = FC_ALLREDUCE;
		r->fwd_op = "sum";
		r->fwd_mask = 1u << ri;
	}
	return 0;
}

static int r_loss(Rule *r, const Node *n)
{
	if (n->op == OP_SparseSoftmaxCrossEntropyWithLogits) {
		if (r->nt != 2 || r->rk[0] != 2 || r->rk[1] != 1)
			return FAIL("expects logits (B, C) and labels (B)");
		if (r->s[0][1] != 1)
			return FAIL("the class dimension must not be split");
		if (r->s[1][0] != r->s[0][0])
			return FAIL("labels must be split like the logits' batch dimension");
		dev_from(r, 0);
		ident(r, 0, 2);
		r->imap[1][0] = 1;
		return 0;
	}
	if (r_identity(r, n) < 0)
		return -1;
	if (r->s[0][r->rk[0] - 1] != 1)
		return FAIL("the class dimension must not be split");
	for (int o = 0; o < r->nout; o++)
		for (int i = 0; i < r->ork[o]; i++)
			r->omap[o][i] = r->imap[0][i];
	return 0;
}

static int r_conv(Rule *r, const Node *n)
{
	(void)n;
	if (r->nt != 2 || r->rk[0] != 4 || r->rk[1] != 4)
		return FAIL("expects 4-D input and weight");
	const int64_t *x = r->s[0], *w = r->s[1];
	if (x[2] != 1 || x[3] != 1 || w[2] != 1 || w[3] != 1)
		return FAIL("the spatial dimensions must not be split");
	if (x[1] != w[1])
		return FAIL("input channels are split %lld ways in the input but %lld in the weight", (long long)x[1],
		            (long long)w[1]);
	r->ndev = 5;
	int64_t d[5] = {x[0], x[1], x[2], x[3], w[0]};
	memcpy(r->dev, d, sizeof d);
	int8_t xm[4] = {4, 3, 2, 1}, wm[4] = {0, 3, -1, -1}, om[4] = {4, 0, 2, 1};
	memcpy(r->imap[0], xm, 4);
	memcpy(r->imap[1], wm, 4);
	memcpy(r->omap[0], om, 4);
	if (x[1] > 1) {
		r->fwd = FC_ALLREDUCE;
		r->fwd_op = "sum";
		r->fwd_mask = 1u << 1;
	}
	return 0;
}

static int r_pool(Rule *r, const Node *n)
{
	if (r->nt != 1 || r->rk[0] != 4)
		return FAIL("expects a 4-D input");
	if (r->s[0][2] != 1 || r->s[0][3] != 1)
		return FAIL("the spatial dimensions must not be split");
	return r_identity(r, n);
}

/* per-channel operand maps follow the channel (dim 1) of the input.  In
 * training the statistics are the whole batch's: with the batch (or any
 * non-channel dimension) split, the per-channel sums are AllReduced over
 * those device dimensions before the operator (MindSpore's BatchNormInfo
 * forward all-reduce group; built by redistribute.c). */
static int r_batchnorm(Rule *r, const Node *n)
{
	if (r->nt < 1 || r->rk[0] < 2)
		return FAIL("expects an input of rank >= 2");
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	for (int k = 1; k < r->nt; k++) {
		if (r->rk[k] != 1 || r->s[k][0] != r->s[0][1])
			return FAIL("input %d must be 1-D and split like the channel dimension", k + 1);
		r->imap[k][0] = (int8_t)(r->rk[0] - 2);
	}
	for (int o = 0; o < r->nout; o++) {
		if (r->ork[o] == r->rk[0])
			out_ident(r, o, r->rk[0]);
		else if (r->ork[o] == 1)
			r->omap[o][0] = (int8_t)(r->rk[0] - 2);
	}
	if (ir_node_flag(n, 5, "is_training", NULL))
		for (int i = 0; i < r->rk[0]; i++)
			if (i != 1 && r->s[0][i] > 1) {
				r->fwd = FC_BATCHSTATS;
				r->fwd_op = "sum";
				r->fwd_mask |= 1u << i;
			}
	return 0;
}

static int r_norm(Rule *r, const Node *n)
{
	if (r->nt < 1)
		return FAIL("expects an input");
	int rx = r->rk[0];
	int64_t bna = -1;
	const Value *v = ir_attr_get(&n->pattrs, "begin_norm_axis");
	if (v)
		value_get_int(v, &bna);
	int b = norm_axis(bna, rx);
	if (n->op == OP_RmsNorm || b < 0 || b >= rx)
		b = rx - 1;
	for (int i = b; i < rx; i++)
		if (r->s[0][i] != 1)
			return FAIL("the normalised dimension %d must not be split", i);
	dev_from(r, 0);
	ident(r, 0, rx);
	for (int k = 1; k < r->nt; k++) {
		int rg = r->rk[k];
		if (rg > rx)
			return FAIL("input %d has a higher rank than the input", k + 1);
		for (int i = 0; i < rg; i++) {
			int xi = rx - rg + i;
			if (r->s[k][i] != r->s[0][xi])
				return FAIL("input %d must be split like the input's trailing dimensions", k + 1);
			r->imap[k][i] = r->imap[0][xi];
		}
	}
	for (int o = 0; o < r->nout; o++) {
		if (r->ork[o] == rx)
			for (int i = 0; i < rx; i++)
				r->omap[o][i] = r->oshp[o][i] == r->shp[0][i] ? r->imap[0][i] : -1;
	}
	return 0;
}

static int r_expanddims(Rule *r, const Node *n)
{
	int64_t ax;
	if (r->nt != 1 || !value_get_int(lit(n, 1, "axis"), &ax))
		return FAIL("needs an axis");
	int a = norm_axis(ax, r->rk[0] + 1);
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	for (int i = 0, j = 0; i <= r->rk[0]; i++)
		r->omap[0][i] = i == a ? -1 : r->imap[0][j++];
	return 0;
}

static int r_squeeze(Rule *r, const Node *n)
{
	if (r->nt != 1)
		return FAIL("expects one input");
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	int64_t ax[LAYOUT_MAX_DIM];
	int k = value_int_list(lit(n, 1, "axis"), ax, LAYOUT_MAX_DIM);
	unsigned sq = 0;
	for (int i = 0; i < k; i++)
		sq |= 1u << norm_axis(ax[i], r->rk[0]);
	if (k <= 0)
		for (int i = 0; i < r->rk[0]; i++)
			if (r->shp[0][i] == 1)
				sq |= 1u << i;
	int j = 0;
	for (int i = 0; i < r->rk[0]; i++)
		if (!(sq >> i & 1) && j < r->ork[0])
			r->omap[0][j++] = r->imap[0][i];
	return j == r->ork[0] ? 0 : FAIL("cannot match the squeezed dimensions");
}

static int r_stridedslice(Rule *r, const Node *n)
{
	if (r_identity(r, n) < 0)
		return -1;
	int64_t b[LAYOUT_MAX_DIM], e[LAYOUT_MAX_DIM], st[LAYOUT_MAX_DIM];
	int kb = value_int_list(lit(n, 1, NULL), b, LAYOUT_MAX_DIM);
	int ke = value_int_list(lit(n, 2, NULL), e, LAYOUT_MAX_DIM);
	int ks = value_int_list(lit(n, 3, NULL), st, LAYOUT_MAX_DIM);
	if (kb < 0 || ke != kb || ks != kb)
		return 0;
	for (int i = 0; i < kb && i < r->rk[0]; i++) {
		int full = b[i] == 0 && (e[i] >= r->shp[0][i] || e[i] == -1) && st[i] == 1;
		if (!full && r->s[0][i] != 1)
			return FAIL("dimension %d is sliced, so it must not be split", i);
	}
	return 0;
}

static int r_concat(Rule *r, const Node *n)
{
	int64_t ax = 0;
	const Value *a = lit(n, 1, "axis");
	if (a)
		value_get_int(a, &ax);
	if (r_identity(r, n) < 0)
		return -1;
	int x = norm_axis(ax, r->rk[0]);
	if (x >= 0 && x < r->rk[0] && r->s[0][x] != 1)
		return FAIL("the concatenation axis %d must not be split", x);
	return 0;
}

static int r_split(Rule *r, const Node *n)
{
	int64_t ax = 0;
	const Value *a = lit(n, 1, "axis");
	if (a)
		value_get_int(a, &ax);
	if (r->nt != 1)
		return FAIL("expects one input");
	int x = norm_axis(ax, r->rk[0]);
	if (x >= 0 && x < r->rk[0] && r->s[0][x] != 1)
		return FAIL("the split axis %d must not be split across devices", x);
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	for (int o = 0; o < r->nout; o++)
		out_ident(r, o, r->rk[0]);
	return 0;
}

/* OneHot (MindSpore's OneHotInfo, ops_info/onehot_info.cc): the strategy
 * of the indices has the output's rank, depth included; r->s[0][rk] is the
 * depth's entry.  With axis -1 the device matrix is that strategy and the
 * output keeps the indices' map plus the depth's; an input of rank above 1
 * is split along its first dimension only.  With axis 0 (1-D indices only)
 * the output is (depth, features) and the device matrix is reversed.  A
 * split depth (1-D indices) is the redistribute pass's onehot_split(). */
static int r_onehot(Rule *r, const Node *n)
{
	if (r->nt < 1 || r->nout != 1 || r->ork[0] != r->rk[0] + 1)
		return FAIL("expects indices and an output one dimension larger");
	int ri = r->rk[0];
	const int64_t *s = r->s[0];
	int64_t axis = -1;
	const Value *a = lit(n, 4, "axis");
	if (a)
		value_get_int(a, &axis);
	if (axis != -1 && !(axis == 0 && ri == 1))
		return FAIL("axis %lld: only -1, or 0 for 1-D indices, can be split", (long long)axis);
	for (int i = 1; i <= ri && ri > 1; i++)
		if (s[i] != 1)
			return FAIL("indices of rank %d may be split along their first dimension only", ri);
	for (int k = 1; k < r->nt; k++)
		for (int i = 0; i < r->rk[k]; i++)
			r->imap[k][i] = -1;
	r->ndev = ri + 1;
	if (axis == 0) {
		r->dev[0] = s[1];
		r->dev[1] = s[0];
		r->imap[0][0] = 1;
		r->omap[0][0] = 0;
		r->omap[0][1] = 1;
		return 0;
	}
	for (int i = 0; i <= ri; i++) {
		r->dev[i] = s[i];
		r->omap[0][i] = (int8_t)(ri - i);
	}
	for (int i = 0; i < ri; i++)
		r->imap[0][i] = (int8_t)(ri - i);
	return 0;
}

/* The attention operators (flash_attention_score_info.cc and
 * prompt_flash_attention_info.cc in mindspore-ai/mindspore, mindspore/ccsrc/
 * frontend/parallel/ops_info/): the query's strategy names the batch,
 * sequence (S1) and head splits at the layout's positions; every other
 * input must be split as MindSpore's expected strategies derive from them
 * (the same derivation as PrepareFlashAttentionScore, passes/sapp/
 * propagate.c): key and value never along their sequence, so no rank needs
 * another's keys and no forward communication is needed.  Device matrix
 * [batch, S1, heads]. */
static int attn_expect(const AttnInfo *ai, int role, int r, const int64_t *shp, int64_t b, int64_t q, int64_t h,
                       int64_t *want, int8_t *map)
{
	int64_t kvh = ai->kv_split ? h : 1;
	for (int i = 0; i < r; i++)
		want[i] = 1, map[i] = -1;
	/* device matrix indices: batch 2, S1 1, heads 0 */
	switch (role) {
	case AR_Q:
		want[ai->bdim] = b, want[ai->sdim] = q, want[ai->ndim] = h;
		map[ai->bdim] = 2, map[ai->sdim] = 1, map[ai->ndim] = 0;
		break;
	case AR_K:
	case AR_V:
		want[ai->bdim] = b, want[ai->ndim] = kvh;
		map[ai->bdim] = 2, map[ai->ndim] = ai->kv_split ? 0 : -1;
		break;
	case AR_MASK:
		if (r == 2) {
			want[0] = ai->mask_compressed ? 1 : q;
			map[0] = ai->mask_compressed ? -1 : 1;
		} else if (r == 4) {
			want[0] = shp[0] > 1 ? b : 1, map[0] = shp[0] > 1 ? 2 : -1;
			want[1] = shp[1] > 1 ? h : 1, map[1] = shp[1] > 1 ? 0 : -1;
			want[2] = ai->mask_compressed ? 1 : q, map[2] = ai->mask_compressed ? -1 : 1;
		}
		break;
	case AR_SHIFT:
	case AR_DROP:
		if (r != 4)
			break;
		want[0] = shp[0] > 1 ? b : 1, map[0] = shp[0] > 1 ? 2 : -1;
		want[1] = h, map[1] = 0;
		want[2] = shp[2] > 1 ? q : 1, map[2] = shp[2] > 1 ? 1 : -1;
		break;
	case AR_PREFIX:
		if (r == 1)
			want[0] = b, map[0] = 2;
		break;
	default:
		break;
	}
	for (int i = 0; i < r; i++)
		if (want[i] == 1)
			map[i] = -1;
	return 0;
}

static int r_attention(Rule *r, const Node *n)
{
	AttnInfo ai;
	char why[200];
	if (ir_attention_info(n, &ai, why, sizeof why) != 1)
		return FAIL("%s", why[0] ? why : "the query, key and value shapes are unknown");
	int kq = -1;
	for (int k = 0; k < r->nt; k++)
		if (r->opnd[k] < ATTN_MAX_OPND && ai.role[r->opnd[k]] == AR_Q)
			kq = k;
	if (kq < 0)
		return FAIL("no query operand");
	const int64_t *sq = r->s[kq];
	int64_t b = sq[ai.bdim], q = sq[ai.sdim], h = sq[ai.ndim];
	if (!ai.packed && sq[3] != 1)
		return FAIL("the head size must not be split (strategy %lld)", (long long)sq[3]);
	if (ai.heads % h)
		return FAIL("%lld heads cannot be split %lld ways", (long long)ai.heads, (long long)h);
	if (ai.kv_split && ai.kv_heads % h)
		return FAIL("%lld key/value heads cannot be split %lld ways", (long long)ai.kv_heads, (long long)h);
	if (q > 1 && ai.mask_compressed)
		return FAIL("splitting the sequence under a compressed mask (sparse_mode 2-4) needs per-rank "
		            "pre/next tokens, which are not modelled");
	r->ndev = 3;
	r->dev[0] = b, r->dev[1] = q, r->dev[2] = h;
	for (int k = 0; k < r->nt; k++) {
		int role = r->opnd[k] < ATTN_MAX_OPND ? ai.role[r->opnd[k]] : AR_NONE;
		int64_t want[LAYOUT_MAX_DIM];
		attn_expect(&ai, role, r->rk[k], r->shp[k], b, q, h, want, r->imap[k]);
		for (int i = 0; i < r->rk[k]; i++)
			if (r->s[k][i] != want[i]) {
				char a[40], e[40];
				fmt_strategy(a, sizeof a, r->s[k], r->rk[k]);
				fmt_strategy(e, sizeof e, want, r->rk[k]);
				return FAIL("operand %d is split %s, but a query split (batch %lld, sequence %lld, "
				            "heads %lld) needs %s",
				            r->opnd[k] + 1, a, (long long)b, (long long)q, (long long)h, e);
			}
	}
	for (int o = 0; o < r->nout; o++) {
		for (int i = 0; i < r->ork[o]; i++)
			r->omap[o][i] = -1;
		if (ai.nout == 4 && o < 2 && r->ork[o] == 4) {
			/* softmax_max, softmax_sum (B, N1, S1, 8) */
			r->omap[o][0] = b > 1 ? 2 : -1, r->omap[o][1] = h > 1 ? 0 : -1;
			r->omap[o][2] = q > 1 ? 1 : -1;
		} else if ((ai.nout == 1 || o == 3) && r->ork[o] == r->rk[kq]) {
			memcpy(r->omap[o], r->imap[kq], (size_t)r->rk[kq]);
		}
	}
	return 0;
}

/* The head split of a lowered attention operator: each rank runs
 * heads/h heads (MindSpore rewrites head_num the same way).  1 and the
 * counts when n has a layout, else 0. */
int lower_attention_split(const Node *n, int64_t *h, int64_t *kvh)
{
	AttnInfo ai;
	char why[8];
	const NodeLayout *l = n->lay;
	if (!l || !(l->flags & LAY_OP) || !l->nin || !l->in[0].ndev || ir_attention_info(n, &ai, why, sizeof why) != 1)
		return 0;
	const TLay *t = &l->in[0];
	int m = t->map[ai.ndim];
	*h = m < 0 ? 1 : t->dev[t->ndev - 1 - m];
	*kvh = ai.kv_split ? *h : 1;
	return 1;
}

/* RotaryPositionEmbedding(x, cos, sin, mode): element-wise over x and the
 * broadcast cos/sin, but a rotation pairs elements along the last axis,
 * which must stay whole. */
static int r_rope(Rule *r, const Node *n)
{
	for (int k = 0; k < r->nt; k++)
		if (r->rk[k] && r->s[k][r->rk[k] - 1] != 1)
			return FAIL("the rotated last axis of operand %d must not be split", r->opnd[k] + 1);
	return r_elemwise(r, n);
}

/* Swiglu(x, dim): the two halves of dim meet in one product, so dim stays
 * whole; the other dims map straight through. */
static int r_swiglu(Rule *r, const Node *n)
{
	int64_t ax = -1;
	const Value *a = lit(n, 1, "dim");
	if (a)
		value_get_int(a, &ax);
	int x = norm_axis(ax, r->rk[0]);
	if (r->nt != 1 || x < 0 || x >= r->rk[0])
		return FAIL("expects one input and a dim in range");
	if (r->s[0][x] != 1)
		return FAIL("the halved dim %d must not be split (strategy %lld)", x, (long long)r->s[0][x]);
	return r_identity(r, n);
}

/* PReLU(x, w): MindSpore's PReLUInfo (prelu_info.cc): the weight is per
 * channel (dimension 1) and is split like it, or is one shared slope. */
static int r_prelu(Rule *r, const Node *n)
{
	(void)n;
	if (r->nt != 2 || r->rk[1] != 1 || r->rk[0] < 2)
		return FAIL("expects an input of rank >= 2 and a 1-D weight");
	if (r->shp[1][0] == 1 ? r->s[1][0] != 1 : r->s[1][0] != r->s[0][1])
		return FAIL("the weight must be split like the channel dimension (%lld ways, not %lld)",
		            (long long)(r->shp[1][0] == 1 ? 1 : r->s[0][1]), (long long)r->s[1][0]);
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	r->imap[1][0] = r->shp[1][0] == 1 ? -1 : (int8_t)(r->rk[0] - 2);
	out_ident(r, 0, r->rk[0]);
	return 0;
}

/* L2Normalize (axis attribute, default 0) and CumSum/CumProd (axis operand
 * 1): the axes they work along stay whole, the others map through. */
static int r_whole_axis(Rule *r, const Node *n)
{
	return whole_axes(r, n, n->op == OP_L2Normalize ? 0 : -1, "axis");
}

/* Dense(x, w, b) = x w^T + b: the rows of x and of w split freely; the
 * shared feature axis may not be split, since each rank would add the bias
 * to its partial sum and the sum over ranks would count it that many
 * times.  Device matrix [x's leading splits..., w rows]. */
static int r_dense(Rule *r, const Node *n)
{
	(void)n;
	if (r->nt < 2 || r->rk[0] < 1 || r->rk[1] != 2 || (r->nt == 3 && r->rk[2] != 1))
		return FAIL("expects an input, a 2-D weight and an optional 1-D bias");
	int rx = r->rk[0];
	if (r->s[0][rx - 1] != 1 || r->s[1][1] != 1)
		return FAIL("the reduced feature axis must not be split (the bias would be added on every rank)");
	if (r->nt == 3 && r->s[2][0] != r->s[1][0])
		return FAIL("the bias must be split like the weight's rows (%lld ways, not %lld)", (long long)r->s[1][0],
		            (long long)r->s[2][0]);
	r->ndev = rx;
	for (int i = 0; i < rx - 1; i++)
		r->dev[i] = r->s[0][i];
	r->dev[rx - 1] = r->s[1][0];
	for (int i = 0; i < rx - 1; i++)
		r->imap[0][i] = (int8_t)(rx - 1 - i);
	r->imap[0][rx - 1] = -1;
	r->imap[1][0] = 0, r->imap[1][1] = -1;
	if (r->nt == 3)
		r->imap[2][0] = 0;
	out_ident(r, 0, rx);
	return 0;
}

/* Slice(x, begin, size) (MindSpore's SliceInfo): a dimension that is cut
 * stays whole; the others map through and keep their local size. */
static int r_slice(Rule *r, const Node *n)
{
	int64_t b[LAYOUT_MAX_DIM], sz[LAYOUT_MAX_DIM];
	if (r->nt != 1)
		return FAIL("expects one tensor input");
	int rk = r->rk[0];
	if (value_int_list(lit(n, 1, "begin"), b, LAYOUT_MAX_DIM) != rk ||
	    value_int_list(lit(n, 2, "size"), sz, LAYOUT_MAX_DIM) != rk)
		return FAIL("needs literal begin and size of the input's rank");
	for (int i = 0; i < rk; i++)
		if (r->s[0][i] != 1 && (b[i] != 0 || (sz[i] != -1 && sz[i] != r->shp[0][i])))
			return FAIL("dimension %d is cut by the slice and must not be split (strategy %lld)", i,
			            (long long)r->s[0][i]);
	return r_identity(r, n);
}

/* Tile(x, multiples): a repeated dimension stays whole (a rank would repeat
 * its own block); the new leading dimensions are not split. */
static int r_tile(Rule *r, const Node *n)
{
	int64_t m[LAYOUT_MAX_DIM];
	if (r->nt != 1)
		return FAIL("expects one tensor input");
	int rk = r->rk[0], k = value_int_list(lit(n, 1, "multiples"), m, LAYOUT_MAX_DIM);
	if (k < rk || r->ork[0] != k)
		return FAIL("needs literal multiples, at least one per input dimension");
	for (int i = 0; i < rk; i++)
		if (r->s[0][i] != 1 && m[k - rk + i] != 1)
			return FAIL("dimension %d is repeated %lld times and must not be split", i, (long long)m[k - rk + i]);
	dev_from(r, 0);
	ident(r, 0, rk);
	for (int i = 0; i < k; i++)
		r->omap[0][i] = i < k - rk ? -1 : r->imap[0][i - (k - rk)];
	return 0;
}

/* TopK (the last axis) and Sort (axis, default -1): (values, indices), both
 * laid out like the input; the sorted axis stays whole. */
static int r_sort(Rule *r, const Node *n)
{
	int64_t ax = -1;
	if (n->op == OP_Sort) {
		const Value *a = lit(n, 1, "axis");
		if (a)
			value_get_int(a, &ax);
	}
	if (r->nt != 1)
		return FAIL("expects one tensor input");
	int x = norm_axis(ax, r->rk[0]);
	if (x < 0 || x >= r->rk[0])
		return FAIL("axis out of range");
	if (r->s[0][x] != 1)
		return FAIL("the sorted axis %d must not be split (strategy %lld)", x, (long long)r->s[0][x]);
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	for (int o = 0; o < r->nout; o++)
		if (r->ork[o] == r->rk[0])
			out_ident(r, o, r->rk[0]);
	return 0;
}

/* LpNorm: a reduction whose partial results do not add up as they are
 * (the norm of the norms is not a sum), but whose p-th powers do.  A split
 * reduced axis is what SAPP gives it: MindSpore has no LpNormInfo, so the
 * operator gets the BatchParallelInfo fallback and its test asserts the
 * batch split [[2, 1, 1]] of an LpNorm over axes (0, 1) on 2 devices
 * (mindspore-ai/mindspore, tests/ut/python/parallel, test
 * test_auto_parallel_sapp_batch_parallel_operator).  Such a split makes
 * each rank's norm partial: the comm pass completes it with an AllReduce
 * of the p-th powers (FC_ALLREDUCE_PNORM), so the result is the single
 * device's.  p = 0 has no such form and keeps the reduced axes whole. */
static int r_lpnorm(Rule *r, const Node *n)
{
	unsigned red;
	int keep;
	int64_t p = 2;
	if (r->nt != 1)
		return FAIL("expects one tensor input");
	if (reduce_axes(n, r->rk[0], &red, &keep) < 0)
		return FAIL("reduction axis out of range");
	const Value *pv = lit(n, 1, "p");
	if (pv && !value_get_int(pv, &p))
		return FAIL("needs an integer p");
	dev_from(r, 0);
	ident(r, 0, r->rk[0]);
	int j = 0;
	for (int i = 0; i < r->rk[0]; i++) {
		if (red >> i & 1) {
			if (r->s[0][i] != 1 && p <= 0)
				return FAIL("the reduced axis %d must not be split with p = %lld (strategy %lld)", i,
				            (long long)p, (long long)r->s[0][i]);
			if (r->s[0][i] != 1)
				r->fwd_mask |= 1u << i;
			if (keep)
				r->omap[0][j++] = -1;
		} else {
			r->omap[0][j++] = r->imap[0][i];
		}
	}
	if (j != r->ork[0])
		return FAIL("the declared output rank does not match the reduction");
	if (r->fwd_mask) {
		r->fwd = FC_ALLREDUCE_PNORM;
		r->fwd_op = "sum";
	}
	return 0;
}

/* ScatterDiv(var, indices, updates) after MindSpore's ScatterMathOpsInfo
 * (mindspore-ai/mindspore, mindspore/ccsrc/frontend/parallel/ops_info/
 * scatter_math_ops_info.cc): the indices are never split, the updates'
 * leading (indices) dimensions neither, and their trailing dimensions are
 * split like var's dimensions 1.. (a rank divides its own columns).
 * MindSpore also lets var's dimension 0 be split, by rewriting the operator
 * into a rank-dependent mask that sends out-of-block indices to a divisor
 * of 1; sappc does not emit that rewrite, so dimension 0 stays whole. */
static int r_scatter(Rule *r, const Node *n)
{
	(void)n;
	if (r->nt != 3)
		return FAIL("expects the variable, the indices and the updates");
	int rv = r->rk[0], ri = r->rk[1];
	if (rv < 1 || r->rk[2] != ri + rv - 1)
		return FAIL("the updates must have the indices' dimensions and then the variable's trailing ones");
	for (int i = 0; i < ri; i++)
		if (r->s[1][i] != 1 || r->s[2][i] != 1)
			return FAIL("the indices (and the updates' dimension %d that follows them) must not be split",
			            i);
	for (int i = 1; i < rv; i++)
		if (r->s[2][ri + i - 1] != r->s[0][i])
			return FAIL(
			    "the updates' dimension %d must be split like the variable's dimension %d (%lld ways, "
			    "not %lld)",
			    ri + i - 1, i, (long long)r->s[0][i], (long long)r->s[2][ri + i - 1]);
	if (r->s[0][0] != 1)
		return FAIL("the variable's dimension 0 must not be split (MindSpore rewrites that case with a "
		            "rank-offset mask, which sappc does not model)");
	dev_from(r, 0);
	ident(r, 0, rv);
	for (int i = 0; i < ri; i++)
		r->imap[1][i] = r->imap[2][i] = -1;
	for (int i = 1; i < rv; i++)
		r->imap[2][ri + i - 1] = r->imap[0][i];
	out_ident(r, 0, rv);
	return 0;
}

/* RandomChoiceWithMask, MoeInitRouting and MoeFinalizeRouting: MindSpore's
 * OperatorInfos for them (random_choice_with_mask_info.cc,
 * moe_init_routing_info.cc, moe_finalize_routing_info.cc in
 * mindspore/ccsrc/frontend/parallel/ops_info/) give every input and output
 * an all-unsplit tensor map, and the first and last refuse any strategy
 * that is not all ones: every rank computes the whole operator. */
static int r_unsplit(Rule *r, const Node *n)
{
	(void)n;
	for (int k = 0; k < r->nt; k++)
		for (int i = 0; i < r->rk[k]; i++) {
			if (r->s[k][i] != 1)
				return FAIL("MindSpore splits no dimension of this operator (input %d, dimension %d: "
				            "strategy %lld)",
				            k + 1, i, (long long)r->s[k][i]);
			r->imap[k][i] = -1;
		}
	r->ndev = 0;
	for (int o = 0; o < r->nout; o++)
		for (int i = 0; i < r->ork[o]; i++)
			r->omap[o][i] = -1;
	return 0;
}

/* GroupedMatmul after MindSpore's GroupedMatmulInfo (mindspore-ai/
 * mindspore, mindspore/ccsrc/frontend/parallel/ops_info/
 * grouped_matmul_info.cc).  Tensor inputs: the x list, the weight list,
 * then group_list.  The device matrix is x's leading strategies, then K,
 * then N; x maps [lead.., K], a weight [E whole, K, N] or [K, N], the
 * output [lead.., N], and a split K is summed by a forward AllReduce as a
 * MatMul's.  MindSpore derives one layout from the first element of each
 * list, so every element must be split alike, and never splits the
 * experts' dimension or group_list.  It also lets x's rows be split when a
 * group_list is given, but group_list holds cumulative counts of the whole
 * x: a rank's block of rows would be cut at global offsets and multiplied
 * by the wrong experts, so sappc refuses that strategy.  group_type 2 (the
 * weight gradient's form) is modelled unsplit only. */
static int r_gmm(Rule *r, const Node *n)
{
	GmmInfo gi;
	char why[200] = "";
	if (ir_gmm_info(n, &gi, why, sizeof why) != 1)
		return FAIL("%s", why[0] ? why : "the shapes of x and the weights are unknown");
	if (r->nt != gi.nx + gi.nw + gi.grouped)
		return FAIL("expects %d x, %d weights%s as tensor inputs", gi.nx, gi.nw,
		            gi.grouped ? " and group_list" : "");
	int X = 0, W = gi.nx, G = gi.nx + gi.nw, rx = r->rk[X], rw = r->rk[W];
	for (int k = 1; k < gi.nx + gi.nw; k++) {
		int first = k < W ? X : W;
		if (k == W)
			continue;
		if (r->rk[k] != r->rk[first] || memcmp(r->s[k], r->s[first], (size_t)r->rk[k] * sizeof r->s[k][0]))
			return FAIL("%s %d must be split like the first (MindSpore derives one layout from it)",
			            k < W ? "x" : "weight", k < W ? k + 1 : k - W + 1);
	}
	if (gi.grouped && r->s[G][0] != 1)
		return FAIL("group_list must not be split");
	if (gi.group_type == 2) {
		for (int k = 0; k < r->nt; k++)
			for (int i = 0; i < r->rk[k]; i++)
				if (r->s[k][i] != 1)
					return FAIL(
					    "group_type 2 (groups along the shared axis) is modelled unsplit only "
					    "(input %d, dimension %d: strategy %lld)",
					    k + 1, i, (long long)r->s[k][i]);
		for (int k = 0; k < r->nt; k++)
			for (int i = 0; i < r->rk[k]; i++)
				r->imap[k][i] = -1;
		for (int o = 0; o < r->nout; o++)
			for (int i = 0; i < r->ork[o]; i++)
				r->omap[o][i] = -1;
		r->ndev = 0;
		return 0;
	}
	int64_t kx = r->s[X][rx - 1], kw = r->s[W][rw - 2];
	if (kx != kw)
		return FAIL("x's last dimension is split %lld ways but the weight's K dimension %lld ways",
		            (long long)kx, (long long)kw);
	if (rw == 3 && r->s[W][0] != 1)
		return FAIL("the weight's expert dimension must not be split (strategy %lld; MindSpore maps it whole)",
		            (long long)r->s[W][0]);
	int L = rx - 1, D = L + 2;
	if (gi.grouped)
		for (int i = 0; i < L; i++)
			if (r->s[X][i] != 1)
				return FAIL(
				    "x's dimension %d is split %lld ways, but group_list counts the rows of the whole "
				    "x: each rank would group its block by the global counts (split the weights' N "
				    "or K instead)",
				    i, (long long)r->s[X][i]);
	r->ndev = D;
	for (int i = 0; i < L; i++)
		r->dev[i] = r->s[X][i];
	r->dev[L] = kx;
	r->dev[L + 1] = r->s[W][rw - 1];
	for (int k = X; k < W; k++) {
		for (int i = 0; i < L; i++)
			r->imap[k][i] = (int8_t)(D - 1 - i);
		r->imap[k][L] = 1;
	}
	for (int k = W; k < G; k++) {
		if (rw == 3)
			r->imap[k][0] = -1;
		r->imap[k][rw - 2] = 1;
		r->imap[k][rw - 1] = 0;
	}
	if (gi.grouped)
		r->imap[G][0] = -1;
	for (int o = 0; o < r->nout; o++) {
		if (r->ork[o] != rx)
			return FAIL("output %d has rank %d, x rank %d", o + 1, r->ork[o], rx);
		for (int i = 0; i < L; i++)
			r->omap[o][i] = (int8_t)(D - 1 - i);
		r->omap[o][L] = 0;
	}
	if (kx > 1) {
		r->fwd = FC_ALLREDUCE;
		r->fwd_mask = 1u << L;
		r->fwd_op = "sum";
	}
	return 0;
}

/* ------------------------------------------------------------ driver */

static int has_rule(const Node *n)
{
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return 0;
	switch (op_table[n->op].family) {
	case FAM_MATMUL:
	case FAM_BATCHMATMUL:
	case FAM_CONV:
	case FAM_POOL:
	case FAM_BATCHNORM:
	case FAM_LAYERNORM:
	case FAM_RMSNORM:
	case FAM_ELEMWISE:
	case FAM_UNARY:
	case FAM_BIASADD:
	case FAM_SOFTMAX:
	case FAM_REDUCE:
	case FAM_TRANSPOSE:
	case FAM_FLATTEN:
	case FAM_GATHER:
	case FAM_ONEHOT:
	case FAM_STRIDEDSLICE:
	case FAM_CONCAT:
	case FAM_SPLIT:
	case FAM_CAST:
	case FAM_LOSS:
	case FAM_SPARSELOSS:
	case FAM_EXPANDDIMS:
	case FAM_SQUEEZE:
	case FAM_ARGWITHVALUE:
	case FAM_ATTENTION:
	case FAM_ROPE:
	case FAM_SWIGLU:
	case FAM_PRELU:
	case FAM_L2NORM:
	case FAM_CUM:
	case FAM_DENSE:
	case FAM_SLICE:
	case FAM_TILE:
	case FAM_SORT:
	case FAM_LPNORM:
	case FAM_SCATTER:
	case FAM_UNSPLIT:
	case FAM_GMM:
		return 1;
	default:
		return 0;
	}
}

int lower_has_rule(const Node *n)
{
	return has_rule(n);
}

/* A sparse cross-entropy loss reduced to a scalar over a split batch is
 * each rank's mean over its own samples, and no forward operator completes
 * it: data parallelism leaves the forward loss local and averages the
 * gradients instead (§3.6, mirrors and _VirtualDiv).  The device dimensions
 * of n->lay->odev that split the batch, 0 when the output is the whole
 * value. */
uint32_t lower_local_mean_dims(const Node *n)
{
	const NodeLayout *l = n->lay;
	if (!l || !(l->flags & LAY_OP) || op_table[n->op].family != FAM_SPARSELOSS || !l->nout ||
	    l->out[0].rank != 0 || !l->nin || !l->in[0].ndev || l->in[0].rank < 1 || l->in[0].map[0] < 0)
		return 0;
	int d = l->in[0].ndev - 1 - l->in[0].map[0];
	return d >= 0 && d < l->nodev && l->odev[d] > 1 ? 1u << d : 0;
}

static int run_rule(Rule *r, const Node *n, int *rowsplit)
{
	switch (op_table[n->op].family) {
	case FAM_MATMUL:
	case FAM_BATCHMATMUL:
		return r_matmul(r, n);
	case FAM_ELEMWISE:
		return n->op == OP_AddN ? r_identity(r, n) : r_elemwise(r, n);
	case FAM_UNARY:
	case FAM_CAST:
		return r_identity(r, n);
	case FAM_SOFTMAX:
		return r_softmax(r, n);
	case FAM_BIASADD:
		return r_biasadd(r, n);
	case FAM_REDUCE:
		return r_reduce(r, n);
	case FAM_TRANSPOSE:
		return r_transpose(r, n);
	case FAM_FLATTEN:
		return r_flatten(r, n);
	case FAM_GATHER:
		return r_gather(r, n, rowsplit);
	case FAM_LOSS:
	case FAM_SPARSELOSS:
		return r_loss(r, n);
	case FAM_CONV:
		return r_conv(r, n);
	case FAM_POOL:
		return r_pool(r, n);
	case FAM_BATCHNORM:
		return r_batchnorm(r, n);
	case FAM_LAYERNORM:
	case FAM_RMSNORM:
		return r_norm(r, n);
	case FAM_EXPANDDIMS:
		return r_expanddims(r, n);
	case FAM_SQUEEZE:
		return r_squeeze(r, n);
	case FAM_STRIDEDSLICE:
		return r_stridedslice(r, n);
	case FAM_CONCAT:
		return r_concat(r, n);
	case FAM_SPLIT:
		return r_split(r, n);
	case FAM_ONEHOT:
		return r_onehot(r, n);
	case FAM_ARGWITHVALUE:
		return r_argwithvalue(r, n);
	case FAM_ATTENTION:
		return r_attention(r, n);
	case FAM_ROPE:
		return r_rope(r, n);
	case FAM_SWIGLU:
		return r_swiglu(r, n);
	case FAM_PRELU:
		return r_prelu(r, n);
	case FAM_L2NORM:
	case FAM_CUM:
		return r_whole_axis(r, n);
	case FAM_DENSE:
		return r_dense(r, n);
	case FAM_SLICE:
		return r_slice(r, n);
	case FAM_TILE:
		return r_tile(r, n);
	case FAM_SORT:
		return r_sort(r, n);
	case FAM_LPNORM:
		return r_lpnorm(r, n);
	case FAM_SCATTER:
		return r_scatter(r, n);
	case FAM_UNSPLIT:
		return r_unsplit(r, n);
	case FAM_GMM:
		return r_gmm(r, n);
	default:
		return FAIL("no layout rule for this operator");
	}
}

/* tensor input i's elements of MakeTuple operand t of n */
static int tuple_inputs(Rule *r, const Node *t)
{
	for (uint32_t i = 0; i < t->nargs && r->nt < MAXT; i++) {
		const Abs *a = ir_in_abs(t, i);
		if (!a || !a->is_tensor || a->shape.kind != SK_DIMS)
			return -1;
		r->tup[r->nt] = t;
		r->opnd[r->nt] = (int)i;
		r->rk[r->nt] = a->shape.rank;
		r->shp[r->nt] = a->shape.dims;
		r->nt++;
	}
	return 0;
}

static const Node *tuple_operand(const Node *n, uint32_t i)
{
	return i < n->nargs && n->args[i].kind == V_NODE && ir_node_is_op(n->args[i].u.node, OP_MakeTuple)
	           ? n->args[i].u.node
	           : NULL;
}

/* The tensor inputs of n: operands typed as tensors.  Concat and AddN read
 * the elements of their MakeTuple operand instead, GroupedMatmul those of
 * its x and weight lists and then its group_list (the layouts of list
 * elements live on the MakeTuple nodes). */
static int collect_inputs(Rule *r, const Node *n)
{
	r->nt = 0;
	int fam = op_table[n->op].family;
	if ((fam == FAM_CONCAT || n->op == OP_AddN) && tuple_operand(n, 0))
		return tuple_inputs(r, tuple_operand(n, 0));
	if (fam == FAM_GMM) {
		if (!tuple_operand(n, 0) || !tuple_operand(n, 1) || tuple_inputs(r, tuple_operand(n, 0)) < 0 ||
		    tuple_inputs(r, tuple_operand(n, 1)) < 0)
			return -1;
		const Abs *a = ir_in_abs(n, 7);
		if (n->nargs > 7 && n->args[7].kind == V_NODE && a && a->is_tensor && a->shape.kind == SK_DIMS &&
		    r->nt < MAXT) {
			r->opnd[r->nt] = 7;
			r->rk[r->nt] = a->shape.rank;
			r->shp[r->nt] = a->shape.dims;
			r->nt++;
		}
		return 0;
	}
	for (uint32_t i = 0; i < n->nargs && r->nt < MAXT; i++) {
		const Abs *a = ir_in_abs(n, i);
		if (!a || !a->is_tensor || a->shape.kind != SK_DIMS ||
		    (n->args[i].kind != V_NODE && n->args[i].kind != V_EXTERN)) {
			/* literal tensors (constants) take part as inputs too: a scalar
			 * needs no layout, a larger one is sliced in place (§5.4) */
			if (a && a->is_tensor && a->shape.kind == SK_DIMS && n->args[i].kind == V_CALL) {
				r->opnd[r->nt] = (int)i;
				r->rk[r->nt] = a->shape.rank;
				r->shp[r->nt] = a->shape.rank ? a->shape.dims : NULL;
				r->nt++;
			}
			continue;
		}
		r->opnd[r->nt] = (int)i;
		r->rk[r->nt] = a->shape.rank;
		r->shp[r->nt] = a->shape.dims;
		r->nt++;
	}
	return 0;
}

static void default_strategy(const LowerCtx *c, Rule *r, const Node *n)
{
	int fam = op_table[n->op].family;
	for (int k = 0; k < r->nt; k++)
		for (int i = 0; i < r->rk[k]; i++)
			r->s[k][i] = 1;
	if (fam == FAM_ONEHOT && r->nt)
		r->s[0][r->rk[0]] = 1; /* the depth's entry */
	int lead = fam == FAM_GATHER ? 1 : 0; /* the input that carries the batch */
	if (r->nt <= lead || r->rk[lead] < 1 || r->shp[lead][0] % c->per_stage)
		return;
	r->s[lead][0] = c->per_stage;
	int64_t b = r->shp[lead][0];
	for (int k = 0; k < r->nt; k++) {
		if (k == lead || r->rk[k] < 1 || r->shp[k][0] != b)
			continue;
		const Value *v = r->tup[k] ? &r->tup[k]->args[r->opnd[k]] : &n->args[r->opnd[k]];
		const Node *src = v->kind == V_NODE ? ir_look_through(v->u.node) : NULL;
		if (src && lower_is_weight(src))
			continue;
		if (fam == FAM_ELEMWISE || fam == FAM_BATCHMATMUL || fam == FAM_LOSS || fam == FAM_SPARSELOSS ||
		    fam == FAM_UNARY || fam == FAM_CONCAT)
			r->s[k][0] = c->per_stage;
	}
}

static int out_shapes(Rule *r, const Node *n)
{
	const Shape *s = &n->out.shape;
	if (s->kind == SK_DIMS) {
		r->nout = 1;
		r->ork[0] = s->rank;
		r->oshp[0] = s->dims;
		return 0;
	}
	if ((s->kind == SK_TUPLE || s->kind == SK_LIST) && s->rank <= MAXT) {
		r->nout = s->rank;
		for (int i = 0; i < s->rank; i++) {
			if (s->sub[i].kind != SK_DIMS)
				return -1;
			r->ork[i] = s->sub[i].rank;
			r->oshp[i] = s->sub[i].dims;
		}
		return 0;
	}
	return -1;
}

static void fmt_strategy(char *buf, size_t len, const int64_t *s, int n)
{
	size_t k = (size_t)snprintf(buf, len, "(");
	for (int i = 0; i < n && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)s[i]);
	if (k < len)
		snprintf(buf + k, len - k, ")");
}

static void fmt_shape(char *buf, size_t len, const int64_t *s, int n)
{
	fmt_strategy(buf, len, s, n);
}

/* Compute and store n->lay.  1 done, 0 not an operator with a rule, -1 reported. */
int lower_infer_node(LowerCtx *c, Node *n)
{
	if (!has_rule(n) || n->dead)
		return 0;
	Rule rule; /* a few KiB: on the stack, zeroed but for the message buffer */
	memset(&rule, 0, offsetof(Rule, why));
	rule.why[0] = 0;
	Rule *r = &rule;
	const char *op = sym_str(n->prim);
	int rc = -1;
	if (collect_inputs(r, n) < 0 || out_shapes(r, n) < 0)
		return 0; /* shapes unknown: leave it to the structural rules */
	int64_t st[MAXT][LAYOUT_MAX_DIM];
	int srk[MAXT], ns = 0;
	int given = lower_strategy(n, st, srk, MAXT, &ns);
	if (given < 0) {
		diag_error_at(n->loc, "%s (%%%d): malformed in_strategy", op, n->local);
		goto out;
	}
	const Value *os = ir_attr_get(ir_node_strat(n), "out_strategy");
	if (!os)
		os = ir_attr_get(&n->pattrs, "out_strategy");
	int64_t ost[1][LAYOUT_MAX_DIM];
	int ork = 0, nos = 0, want_rs = 0;
	if (given && os && !value_is_word(os, "None")) {
		/* MatMul's out_strategy (a*k, b): the partial sums are
		 * reduce-scattered over k along the rows (§2.3, §3.1), which
		 * SAPP asks for above 32 devices (ExtraShardMatmulOnBatchDim) */
		int ok = n->op == OP_MatMul && os->kind == V_TUPLE && os->n == 1 &&
		         (ork = value_int_list(&os->u.elems[0], ost[0], LAYOUT_MAX_DIM)) == 2 && ns == 2 &&
		         srk[0] == 2 && srk[1] == 2;
		(void)nos;
		if (ok) {
			int ta = ir_node_flag(n, 2, "transpose_a", "transpose_x1"),
			    tb = ir_node_flag(n, 3, "transpose_b", "transpose_x2");
			int64_t a_row = ta ? st[0][1] : st[0][0], a_k = ta ? st[0][0] : st[0][1];
			int64_t b_col = tb ? st[1][0] : st[1][1];
			ok = a_k > 1 && ost[0][0] == a_row * a_k && ost[0][1] == b_col &&
			     r->oshp[0][0] % (a_row * a_k) == 0;
		}
		if (!ok) {
			diag_error_at(n->loc,
			              "%s (%%%d): out_strategy is supported only for MatMul, as (a*k, b) for "
			              "in_strategy ((a, k), (k, b)) (a ReduceScatter over the split reduction dimension)",
			              op, n->local);
			goto out;
		}
		want_rs = 1;
	}
	if (given) {
		/* one strategy per tensor input; scalar constants may be left out */
		int need = r->nt;
		while (need > ns && r->rk[need - 1] == 0)
			need--;
		if (ns != need && ns != r->nt) {
			diag_error_at(n->loc, "%s (%%%d): in_strategy has %d entries for %d tensor inputs", op,
			              n->local, ns, r->nt);
			goto out;
		}
		for (int k = 0; k < r->nt; k++) {
			if (k >= ns) {
				continue;
			}
			int want = r->rk[k];
			if (op_table[n->op].family == FAM_ONEHOT && k == 0 && srk[k] == want + 1)
				want = srk[k];
			if (srk[k] != want) {
				char sb[128];
				fmt_strategy(sb, sizeof sb, st[k], srk[k]);
				diag_error_at(
				    n->loc,
				    "%s (%%%d): strategy %s of input %d has %d entries, but the input has rank %d", op,
				    n->local, sb, k + 1, srk[k], r->rk[k]);
				goto out;
			}
			memcpy(r->s[k], st[k], sizeof st[k]);
			if (op_table[n->op].family == FAM_ONEHOT && k == 0 && srk[k] == r->rk[k])
				r->s[k][srk[k]] = 1; /* the indices' rank only: the depth is whole */
			int64_t prod = 1;
			for (int i = 0; i < srk[k]; i++) {
				if (st[k][i] < 1) {
					diag_error_at(n->loc, "%s (%%%d): strategy entries must be positive", op,
					              n->local);
					goto out;
				}
				prod *= st[k][i];
				if (i < r->rk[k] && r->shp[k][i] % st[k][i]) {
					char sb[128], hb[128];
					fmt_strategy(sb, sizeof sb, st[k], srk[k]);
					fmt_shape(hb, sizeof hb, r->shp[k], r->rk[k]);
					diag_error_at(n->loc,
					              "%s (%%%d): strategy %s of input %d does not divide its shape %s "
					              "(dimension %d: %lld is not divisible by %lld)",
					              op, n->local, sb, k + 1, hb, i, (long long)r->shp[k][i],
					              (long long)st[k][i]);
					goto out;
				}
			}
			if (prod > c->per_stage) {
				char sb[128];
				fmt_strategy(sb, sizeof sb, st[k], srk[k]);
				diag_error_at(
				    n->loc,
				    "%s (%%%d): strategy %s of input %d uses %lld devices, but the stage has %d", op,
				    n->local, sb, k + 1, (long long)prod, c->per_stage);
				goto out;
			}
		}
	} else {
		default_strategy(c, r, n);
	}
	int rowsplit = 0;
	Rule backup = *r;
	if (run_rule(r, n, &rowsplit) < 0) {
		if (given) {
			diag_error_at(n->loc, "%s (%%%d): invalid strategy: %s", op, n->local, r->why);
			goto out;
		}
		/* the batch-parallel default does not fit: replicate */
		*r = backup;
		for (int k = 0; k < r->nt; k++)
			for (int i = 0; i < r->rk[k]; i++)
				r->s[k][i] = 1;
		if (run_rule(r, n, &rowsplit) < 0) {
			diag_error_at(n->loc, "%s (%%%d): %s", op, n->local, r->why);
			goto out;
		}
	}
	int64_t prod = 1;
	for (int i = 0; i < r->ndev; i++)
		prod *= r->dev[i];
	if (prod > c->per_stage) {
		diag_error_at(n->loc, "%s (%%%d): the strategy needs %lld devices, but the stage has %d", op, n->local,
		              (long long)prod, c->per_stage);
		goto out;
	}
	if (c->per_stage % prod) {
		diag_error_at(n->loc,
		              "%s (%%%d): the strategy uses %lld devices, which does not divide the stage's %d (the "
		              "repeat count must be whole)",
		              op, n->local, (long long)prod, c->per_stage);
		goto out;
	}
	/* §2.2 step 4: repeated calculation on the right */
	int ndev = r->ndev;
	if (prod < c->per_stage) {
		r->dev[ndev++] = c->per_stage / prod;
		for (int k = 0; k < r->nt; k++)
			for (int i = 0; i < r->rk[k]; i++)
				if (r->imap[k][i] >= 0)
					r->imap[k][i]++;
		for (int o = 0; o < r->nout; o++)
			for (int i = 0; i < r->ork[o]; i++)
				if (r->omap[o][i] >= 0)
					r->omap[o][i]++;
	}
	int32_t dev[LAYOUT_MAX_DIM + 2];
	for (int i = 0; i < ndev; i++)
		dev[i] = (int32_t)r->dev[i];
	NodeLayout *l = lay_scratch(n->nargs, (uint32_t)r->nout);
	if (want_rs) {
		/* the MatMul's own output keeps the rows of its a-block; after the
		 * ReduceScatter over k they are split a*k ways.  On the device
		 * matrix [a, k, b(, repeat)] the row and k dimensions are adjacent,
		 * so the result's layout is [a*k, b(, repeat)] with the rows on the
		 * merged dimension: rank (i, j, ...) holds row block i*k + j, which
		 * is what a ReduceScatter over the k group in rank order gives. */
		int32_t dev2[LAYOUT_MAX_DIM + 2];
		int ndev2 = ndev - 1;
		dev2[0] = dev[0] * dev[1];
		for (int i = 1; i < ndev2; i++)
			dev2[i] = dev[i + 1];
		int8_t rsmap[2] = {(int8_t)(ndev2 - 1), r->omap[0][1]};
		r->fwd = FC_REDUCESCATTER;
		l->fwd_out = arena_alloc(c->m->arena, sizeof(TLay));
		tlay_set(c, l->fwd_out, dev2, ndev2, rsmap, r->oshp[0], 2);
	}
	l->flags = LAY_OP | (rowsplit ? LAY_REPLACED : 0);
	l->nodev = (int8_t)ndev;
	l->odev = lower_dev(c, dev, ndev);
	l->fwd = (uint8_t)r->fwd;
	l->fwd_mask = r->fwd_mask;
	l->fwd_op = r->fwd_op ? intern_cstr(r->fwd_op) : 0;
	/* each MakeTuple operand gets a layout of its own (made fresh by the
	 * first of its elements): its inputs are the elements' layouts.  A
	 * MakeTuple an earlier operator has laid out already (LAY_OP) keeps
	 * that layout, and this operator must want the same one: MindSpore
	 * stops with "has multiple users, but the TensorInfo are different"
	 * when two users of one forward MakeTuple disagree (CheckMakeTupleSplit,
	 * mindspore-ai/mindspore, frontend/parallel/step_parallel_utils.cc);
	 * laying it out for the last user silently fed the first the wrong
	 * slices. */
	for (int k = 0; k < r->nt; k++) {
		Node *t = (Node *)r->tup[k];
		if (t && (k == 0 || r->tup[k - 1] != t) && !(t->lay && (t->lay->flags & LAY_OP))) {
			t->lay = lay_new(c->m, t->nargs, t->nargs);
			t->lay->flags = LAY_OP;
			int fresh;
			*(Node **)keymap_get(&c->tuple_users, (const int64_t[]){t->id}, 1, &fresh) = n;
		}
	}
	for (int k = 0; k < r->nt; k++) {
		if (r->rk[k] == 0 && !r->shp[k])
			continue; /* literal scalar */
		Node *t = (Node *)r->tup[k];
		TLay want, *dst = t ? &want : &l->in[r->opnd[k]];
		tlay_set(c, dst, dev, ndev, r->imap[k], r->shp[k], r->rk[k]);
		if (!t)
			continue;
		int fresh;
		const Node *first = *(Node **)keymap_get(&c->tuple_users, (const int64_t[]){t->id}, 1, &fresh);
		if (first != n && !tlay_equal(&t->lay->in[r->opnd[k]], &want)) {
			diag_error_at(n->loc,
			              "%s (%%%d): its operand MakeTuple (%%%d) is also an operand of %s (%%%d), which "
			              "lays its element %d out differently; MindSpore rejects a tuple whose users disagree: "
			              "give them the same strategy for it, or give each its own MakeTuple",
			              op, n->local, t->local, first ? sym_str(first->prim) : "another operator",
			              first ? first->local : 0, r->opnd[k] + 1);
			diag_note_at(t->loc, "the MakeTuple (%%%d) is here", t->local);
			free(l);
			goto out;
		}
		t->lay->in[r->opnd[k]] = t->lay->out[r->opnd[k]] = want;
	}
	for (int o = 0; o < r->nout; o++)
		tlay_set(c, &l->out[o], dev, ndev, r->omap[o], r->oshp[o], r->ork[o]);
	/* every map must be valid on the final device matrix */
	for (int k = 0; k < (int)l->nin + (int)l->nout; k++) {
		TLay *t = k < (int)l->nin ? &l->in[k] : &l->out[k - l->nin];
		if (!t->ndev)
			continue;
		Layout x;
		tlay_to_layout(t, &x);
		if (layout_check(&x) < 0) {
			diag_error_at(n->loc, "%s (%%%d): the strategy does not divide the %s %d's shape", op, n->local,
			              k < (int)l->nin ? "operand" : "output", k < (int)l->nin ? k + 1 : k - l->nin + 1);
			free(l);
			goto out;
		}
	}
	/* shared unless a pass writes into it for this node: comm and
	 * redistribute set the substitute of an operator with forward
	 * communication, of a replaced Gather and of a Reshape */
	n->lay = lay_keep(c, l, l->fwd == FC_NONE && !(l->flags & LAY_REPLACED) && n->op != OP_Reshape);
	rc = 1;
out:
	return rc;
}
