/* kernels.c - the operators with arithmetic structure: MatMul/BatchMatMul,
 * Conv2D, MaxPool/AvgPool, reductions, ArgMax/MinWithValue, Softmax and
 * LogSoftmax, LayerNorm, RmsNorm, BatchNorm, the two softmax losses, and
 * the LLM/vision operators (attention and its gradient, rotary embedding,
 * Swiglu, PReLU, L2Normalize, CumSum/CumProd).
 *
 * All of them accumulate in double and round once to float32 on store, so
 * that a sum split across ranks (k-split MatMul + AllReduce, a split
 * reduction) lands within the comparison tolerance of the undivided sum.
 * Several take the view "outer x n x inner" of a tensor around one axis:
 * element (a, j, b) is at (a * n + j) * inner + b.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "simint.h"

#define FAILV(...) (sim_fail(c, __VA_ARGS__), (SimValue *)NULL)

void sim_around(const SimTensor *x, int ax, int64_t *outer, int64_t *inner)
{
	*outer = *inner = 1;
	for (int i = 0; i < ax; i++)
		*outer *= x->shape[i];
	for (int i = ax + 1; i < x->ndim; i++)
		*inner *= x->shape[i];
}

/* a tuple value of the n tensors ts, in order */
static SimValue *sim_tuple_of(Ctx *c, uint32_t n, SimTensor *const *ts)
{
	SimValue *t = sim_val_tuple(c->r, n);
	for (uint32_t i = 0; i < n; i++)
		t->elems[i] = sim_val_tensor(c->r, ts[i]);
	return t;
}

SimValue *sim_tuple2(Ctx *c, SimTensor *a, SimTensor *b)
{
	return sim_tuple_of(c, 2, (SimTensor *[]){a, b});
}

static int declared_tuple(const Ctx *c)
{
	return c->n->has_type_line && c->n->out.shape.kind == SK_TUPLE;
}

/* An operator with several outputs (the norms, the softmax loss) whose
 * type line declares only the first: its users see the first; the others,
 * which only a bprop reads (TupleGetItem(out, k), training-step.md §6), stay
 * on the side (RankState.aux). */
static SimValue *outputs(Ctx *c, SimValue *t)
{
	if (declared_tuple(c))
		return t;
	RankState *s = c->s;
	if (!s->aux)
		s->aux = xcalloc(s->nvals ? s->nvals : 1, sizeof *s->aux);
	s->aux[c->n->id] = t;
	return t->elems[0];
}

/* ------------------------------------------------------------- MatMul */
/* MatMul (2-D) and BatchMatMul (broadcast batch dims).  Transposes come from
 * Bool operands 2 and 3 (newest dumps) or transpose_a/transpose_x1 and
 * transpose_b/transpose_x2. */
SimValue *k_matmul(Ctx *c)
{
	SimTensor *a = sim_arg_tensor(c, 0), *b = a ? sim_arg_tensor(c, 1) : NULL;
	if (!b)
		return NULL;
	int ta = sim_flag(c, 2, "transpose_a", "transpose_x1", 0);
	int tb = sim_flag(c, 3, "transpose_b", "transpose_x2", 0);
	if (a->ndim < 2 || b->ndim < 2 || (c->n->op == OP_MatMul && (a->ndim != 2 || b->ndim != 2)))
		return FAILV("inputs of rank %d and %d: MatMul takes 2-D, BatchMatMul rank >= 2", a->ndim, b->ndim);
	int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
	int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
	int64_t m = ta ? ac : ar, k = ta ? ar : ac, k2 = tb ? bc : br, n = tb ? br : bc;
	if (k != k2)
		return FAILV("reduction dimensions differ: %lld vs %lld", (long long)k, (long long)k2);
	SimTensor ba = *a, bb = *b, *bt[2] = {&ba, &bb};
	ba.ndim -= 2;
	bb.ndim -= 2;
	int nb;
	int64_t shape[MAX_RANK], st[2][MAX_RANK];
	if (sim_broadcast(c, 2, bt, &nb, shape, st) < 0)
		return NULL;
	if (nb + 2 > MAX_RANK)
		return FAILV("output rank too large");
	shape[nb] = m;
	shape[nb + 1] = n;
	SimTensor *o = sim_tensor_new(c->r, sim_out_dtype(c->n, SD_F32), nb + 2, shape);
	if (!o)
		return NULL;
	int64_t nbatch = 1;
	for (int i = 0; i < nb; i++)
		nbatch *= shape[i];
	int64_t idx[MAX_RANK] = {0};
	for (int64_t bi = 0; bi < nbatch; bi++) {
		int64_t aoff = 0, boff = 0;
		for (int d = 0; d < nb; d++) {
			aoff += idx[d] * st[0][d];
			boff += idx[d] * st[1][d];
		}
		const float *A = a->data + aoff * ar * ac, *B = b->data + boff * br * bc;
		sim_gemm(ta, tb, m, n, k, A, ac, B, bc, NULL, o->data + bi * m * n, n);
		for (int d = nb - 1; d >= 0; d--) {
			if (++idx[d] < shape[d])
				break;
			idx[d] = 0;
		}
	}
	return sim_val_tensor(c->r, o);
}

/* ------------------------------------------------------- Conv2D, pools */
/* the (h, w) pair of an attribute written as one int, (h, w) or (1, 1, h, w) */
void sim_hw_attr(const Node *n, const char *key, int64_t dflt, int64_t *h, int64_t *w)
{
	int64_t v[8];
	const Value *a = sim_attr(n, key);
	int k = a ? value_int_list(a, v, 8) : -1;
	*h = *w = dflt;
	if (k == 1)
		*h = *w = v[0];
	else if (k >= 2) {
		*h = v[k - 2];
		*w = v[k - 1];
	}
}

static int pad_mode(const Node *n)
{
	const char *m = sim_attr_str(n, "pad_mode");
	if (!m)
		return 'v';
	if (strcasecmp(m, "same") == 0)
		return 's';
	if (strcasecmp(m, "pad") == 0)
		return 'p';
	return 'v';
}

/* output size and leading pad of one spatial dimension (TF-style "same") */
static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t dil, int mode, int64_t p0, int64_t p1, int64_t *lead)
{
	int64_t eff = dil * (k - 1) + 1;
	if (mode == 's') {
		int64_t o = (in + s - 1) / s, tot = (o - 1) * s + eff - in;
		*lead = tot > 0 ? tot / 2 : 0;
		return o;
	}
	*lead = mode == 'p' ? p0 : 0;
	int64_t span = in + (mode == 'p' ? p0 + p1 : 0);
	return span < eff ? 0 : (span - eff) / s + 1;
}

/* The geometry of a convolution or pool over an NCHW input of spatial size
 * (H, W) with a (KH, KW) window, from the node's attributes: stride (pools:
 * strides), dilation, group, pad_mode and pad (or pad_list).  The backward
 * operators carry the forward's attributes, so they share it. */
int sim_conv_geom(Ctx *c, int64_t H, int64_t W, int64_t KH, int64_t KW, int pool, SimConvGeom *g)
{
	const Node *n = c->n;
	int64_t pads[4] = {0};
	g->group = 1;
	const Value *gv = sim_attr(n, "group");
	if (!gv)
		gv = sim_attr(n, "groups");
	if (gv && !pool)
		value_get_int(gv, &g->group);
	sim_hw_attr(n, pool ? "strides" : "stride", 1, &g->sh, &g->sw);
	g->dh = g->dw = 1;
	if (!pool)
		sim_hw_attr(n, "dilation", 1, &g->dh, &g->dw);
	const Value *pv = sim_attr(n, "pad_list");
	if (!pv)
		pv = sim_attr(n, "pad");
	int np = pv && !pool ? value_int_list(pv, pads, 4) : 0;
	if (np == 1)
		pads[1] = pads[2] = pads[3] = pads[0];
	else if (np == 2) { /* (h, w) */
		pads[2] = pads[3] = pads[1];
		pads[1] = pads[0];
	}
	if (g->group <= 0 || g->sh <= 0 || g->sw <= 0 || g->dh <= 0 || g->dw <= 0 || KH <= 0 || KW <= 0)
		return sim_fail(c, "group, window, stride and dilation must be positive");
	int mode = pad_mode(n);
	g->OH = out_dim(H, KH, g->sh, g->dh, mode, pads[0], pads[1], &g->pt);
	g->OW = out_dim(W, KW, g->sw, g->dw, mode, pads[2], pads[3], &g->pl);
	return 0;
}

SimValue *k_conv2d(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *w = x ? sim_arg_tensor(c, 1) : NULL;
	if (!w)
		return NULL;
	if (x->ndim != 4 || w->ndim != 4)
		return FAILV("Conv2D takes a 4-D NCHW input and a 4-D weight");
	const char *fmt = sim_attr_str(c->n, "format");
	if (fmt && strcmp(fmt, "NCHW") != 0)
		return FAILV("format %s is not simulated (NCHW only)", fmt);
	int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
	int64_t O = w->shape[0], CG = w->shape[1], KH = w->shape[2], KW = w->shape[3];
	SimConvGeom q;
	if (sim_conv_geom(c, H, W, KH, KW, 0, &q) < 0)
		return NULL;
	int64_t g = q.group, sh = q.sh, sw = q.sw, dh = q.dh, dw = q.dw, pt = q.pt, pl = q.pl, OH = q.OH, OW = q.OW;
	if (C != CG * g || O % g)
		return FAILV("input has %lld channels, the weight expects %lld x group %lld", (long long)C,
		             (long long)CG, (long long)g);
	int64_t shape[4] = {N, O, OH, OW};
	SimTensor *o = sim_tensor_new(c->r, SD_F32, 4, shape);
	if (!o)
		return NULL;
	int64_t opg = O / g;
	for (int64_t nb = 0; nb < N; nb++)
		for (int64_t oc = 0; oc < O; oc++) {
			int64_t c0 = oc / opg * CG;
			for (int64_t oy = 0; oy < OH; oy++)
				for (int64_t ox = 0; ox < OW; ox++) {
					double s = 0;
					for (int64_t ic = 0; ic < CG; ic++)
						for (int64_t ky = 0; ky < KH; ky++) {
							int64_t iy = oy * sh - pt + ky * dh;
							if (iy < 0 || iy >= H)
								continue;
							for (int64_t kx = 0; kx < KW; kx++) {
								int64_t ix = ox * sw - pl + kx * dw;
								if (ix < 0 || ix >= W)
									continue;
								s +=
								    (double)x
								        ->data[((nb * C + c0 + ic) * H + iy) * W + ix] *
								    w->data[((oc * CG + ic) * KH + ky) * KW + kx];
							}
						}
					o->data[((nb * O + oc) * OH + oy) * OW + ox] = (float)s;
				}
		}
	return sim_val_tensor(c->r, o);
}

/* MaxPool / AvgPool, NCHW; the average counts only the window's elements
 * inside the input ("same" padding does not dilute it) */
SimValue *k_pool(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	if (!x)
		return NULL;
	if (x->ndim != 4)
		return FAILV("%s takes a 4-D NCHW input", sym_str(c->n->prim));
	int64_t kh, kw;
	sim_hw_attr(c->n, "kernel_size", 1, &kh, &kw);
	int isMax = c->n->op == OP_MaxPool;
	int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
	SimConvGeom q;
	if (sim_conv_geom(c, H, W, kh, kw, 1, &q) < 0)
		return NULL;
	int64_t sh = q.sh, sw = q.sw, pt = q.pt, pl = q.pl, OH = q.OH, OW = q.OW;
	int64_t shape[4] = {N, C, OH, OW};
	SimTensor *o = sim_tensor_new(c->r, x->dtype, 4, shape);
	if (!o)
		return NULL;
	for (int64_t p = 0; p < N * C; p++)
		for (int64_t oy = 0; oy < OH; oy++)
			for (int64_t ox = 0; ox < OW; ox++) {
				double acc = isMax ? -INFINITY : 0, second = -INFINITY;
				int64_t cnt = 0;
				for (int64_t ky = 0; ky < kh; ky++) {
					int64_t iy = oy * sh - pt + ky;
					for (int64_t kx = 0; kx < kw; kx++) {
						int64_t ix = ox * sw - pl + kx;
						if (iy < 0 || iy >= H || ix < 0 || ix >= W)
							continue;
						double v = x->data[(p * H + iy) * W + ix];
						if (isMax && v > acc) {
							second = acc;
							acc = v;
						} else if (isMax && v > second) {
							second = v;
						}
						acc = isMax ? acc : acc + v;
						cnt++;
					}
				}
				/* a near tie (not two exact zeros, which ReLU makes alike on
				 * every rank) */
				if (isMax && acc != 0 && isfinite(second) && sim_near(acc, second))
					c->r->near_switch++;
				o->data[(p * OH + oy) * OW + ox] = (float)(isMax ? acc : cnt ? acc / (double)cnt : 0);
			}
	return sim_val_tensor(c->r, o);
}

/* ---------------------------------------------------------- reductions */
/* the next element of a row-major walk over shape[0..nd): idx its index,
 * *off its offset by strides st (0 along a reduced axis) */
static inline void walk_next(int nd, const int64_t *shape, const int64_t *st, int64_t *idx, int64_t *off)
{
	for (int d = nd - 1; d >= 0; d--) {
		*off += st[d];
		if (++idx[d] < shape[d])
			return;
		*off -= st[d] * shape[d];
		idx[d] = 0;
	}
}

/* axis: operand 1 or attribute; absent or () = every axis.  keep_dims:
 * operand 2 or attribute. */
SimValue *k_reduce(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t ax[MAX_RANK], shape[MAX_RANK], ost[MAX_RANK];
	if (!x)
		return NULL;
	int k = sim_ints(c, 1, "axis", ax, MAX_RANK);
	int keep = sim_flag(c, 2, "keep_dims", NULL, 0);
	unsigned red = k <= 0 ? (1u << x->ndim) - 1 : 0;
	for (int i = 0; i < k; i++) {
		int a;
		if (sim_axis(c, ax[i], x->ndim, &a) < 0)
			return NULL;
		red |= 1u << a;
	}
	int nd = 0;
	int64_t full[MAX_RANK]; /* output shape with the reduced dims kept as 1 */
	for (int i = 0; i < x->ndim; i++) {
		full[i] = red >> i & 1 ? 1 : x->shape[i];
		if (!(red >> i & 1) || keep)
			shape[nd++] = full[i];
	}
	SimTensor *o = sim_tensor_new(c->r, sim_out_dtype(c->n, x->dtype), nd, shape);
	if (!o)
		return NULL;
	int op = c->n->op;
	double init = op == OP_ReduceMax ? -INFINITY : op == OP_ReduceMin ? INFINITY : op == OP_ReduceProd ? 1 : 0;
	double *acc = xmalloc((size_t)(o->numel ? o->numel : 1) * sizeof(double));
	for (int64_t i = 0; i < o->numel; i++)
		acc[i] = init;
	sim_strides(x->ndim, full, ost);
	for (int i = 0; i < x->ndim; i++)
		if (red >> i & 1)
			ost[i] = 0;
	int64_t idx[MAX_RANK] = {0}, off = 0;
	for (int64_t i = 0; i < x->numel; i++) {
		double v = x->data[i];
		switch (op) {
		case OP_ReduceMax:
			acc[off] = v > acc[off] || isnan(v) ? v : acc[off];
			break;
		case OP_ReduceMin:
			acc[off] = v < acc[off] || isnan(v) ? v : acc[off];
			break;
		case OP_ReduceProd:
			acc[off] *= v;
			break;
		default:
			acc[off] += v;
		}
		walk_next(x->ndim, x->shape, ost, idx, &off);
	}
	if (op == OP_ReduceMax || op == OP_ReduceMin) {
		/* outputs two of whose elements are the extreme to rounding: the
		 * bprop gives the gradient to the elements equal to it (a switch
		 * point, driver.c) */
		uint8_t *seen = xcalloc((size_t)(o->numel ? o->numel : 1), 1);
		for (int64_t i = 0; i < x->numel; i++) {
			if (seen[off] < 2 && sim_near(x->data[i], acc[off]) && ++seen[off] == 2)
				c->r->near_switch++;
			walk_next(x->ndim, x->shape, ost, idx, &off);
		}
		free(seen);
	}
	double cnt = o->numel ? (double)x->numel / (double)o->numel : 1;
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)(op == OP_ReduceMean ? acc[i] / cnt : acc[i]);
	free(acc);
	return sim_val_tensor(c->r, o);
}

/* ArgMaxWithValue / ArgMinWithValue -> (index, value); attrs axis, keep_dims */
SimValue *k_argwithvalue(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t axv = 0, shape[MAX_RANK], outer, inner;
	int ax, nd = 0;
	if (!x)
		return NULL;
	if (sim_ints(c, 1, "axis", &axv, 1) < 0)
		axv = 0;
	int keep = sim_flag(c, 2, "keep_dims", NULL, 0);
	if (sim_axis(c, axv, x->ndim, &ax) < 0)
		return NULL;
	for (int i = 0; i < x->ndim; i++)
		if (i != ax || keep)
			shape[nd++] = i == ax ? 1 : x->shape[i];
	sim_around(x, ax, &outer, &inner);
	int64_t n = x->shape[ax];
	SimTensor *iv = sim_tensor_new(c->r, SD_INT, nd, shape),
	          *vv = iv ? sim_tensor_new(c->r, x->dtype, nd, shape) : NULL;
	if (!vv)
		return NULL;
	int isMax = c->n->op == OP_ArgMaxWithValue;
	for (int64_t a = 0; a < outer; a++)
		for (int64_t b = 0; b < inner; b++) {
			int64_t best = 0;
			for (int64_t j = 1; j < n; j++) {
				float v = x->data[(a * n + j) * inner + b], bv = x->data[(a * n + best) * inner + b];
				if (isMax ? v > bv : v < bv)
					best = j;
			}
			/* another element equal to the extreme to rounding: a switch
			 * point (driver.c) */
			for (int64_t j = 0; j < n; j++)
				if (j != best && sim_near(x->data[(a * n + j) * inner + b], x->data[(a * n + best) * inner + b])) {
					c->r->near_switch++;
					break;
				}
			iv->data[a * inner + b] = (float)best;
			vv->data[a * inner + b] = n ? x->data[(a * n + best) * inner + b] : 0;
		}
	return sim_tuple2(c, iv, vv);
}

/* ------------------------------------------------------------- softmax */
void sim_softmax_rows(const float *x, float *y, int64_t outer, int64_t n, int64_t inner, int logv)
{
	for (int64_t a = 0; a < outer; a++)
		for (int64_t b = 0; b < inner; b++) {
			const float *xr = x + a * n * inner + b;
			float *yr = y + a * n * inner + b;
			double mx = -INFINITY, sum = 0;
			for (int64_t j = 0; j < n; j++)
				mx = xr[j * inner] > mx ? xr[j * inner] : mx;
			for (int64_t j = 0; j < n; j++)
				sum += exp(xr[j * inner] - mx);
			for (int64_t j = 0; j < n; j++)
				yr[j * inner] =
				    (float)(logv ? xr[j * inner] - mx - log(sum) : exp(xr[j * inner] - mx) / sum);
		}
}

/* the one axis (operand 1 or attribute, dflt when absent) an operator
 * works along; 0 ok */
static int one_axis(Ctx *c, const SimTensor *x, int64_t dflt, const char *what, int *a)
{
	int64_t ax[MAX_RANK];
	int k = sim_ints(c, 1, "axis", ax, MAX_RANK);
	if (k <= 0) {
		ax[0] = dflt;
		k = 1;
	}
	if (k != 1)
		return sim_fail(c, "%s over %d axes is not simulated", what, k);
	return sim_axis(c, ax[0], x->ndim, a);
}

SimValue *k_softmax(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t outer, inner;
	int a;
	if (!x || one_axis(c, x, -1, "softmax", &a) < 0)
		return NULL;
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, x->shape);
	if (!o)
		return NULL;
	sim_around(x, a, &outer, &inner);
	sim_softmax_rows(x->data, o->data, outer, x->ndim ? x->shape[a] : 1, inner, c->n->op == OP_LogSoftmax);
	return sim_val_tensor(c->r, o);
}

/* --------------------------------------------------------------- norms */
/* shape of the saved statistics: x's shape with dims from `from` set to 1 */
static SimTensor *stat_tensor(Ctx *c, const SimTensor *x, int from)
{
	int64_t d[MAX_RANK];
	for (int i = 0; i < x->ndim; i++)
		d[i] = i < from ? x->shape[i] : 1;
	return sim_tensor_new(c->r, SD_F32, x->ndim, d);
}

/* LayerNorm(x, gamma, beta): normalise over dims [begin_norm_axis, end),
 * scale/shift by gamma/beta laid over dims [begin_params_axis, end).  The
 * axes and epsilon are operands 3-5 in newest dumps, attributes before. */
SimValue *k_layernorm(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *g = x ? sim_arg_tensor(c, 1) : NULL, *b = g ? sim_arg_tensor(c, 2) : NULL;
	int64_t bnv = 1, bpv = 1, rows, cols, gsz = 1;
	int bn, bp;
	if (!b)
		return NULL;
	if (sim_ints(c, 3, "begin_norm_axis", &bnv, 1) < 0)
		bnv = 1;
	if (sim_ints(c, 4, "begin_params_axis", &bpv, 1) < 0)
		bpv = 1;
	double eps = sim_float(c, 5, "epsilon", 1e-7);
	if (sim_axis(c, bnv, x->ndim, &bn) < 0 || sim_axis(c, bpv, x->ndim, &bp) < 0)
		return NULL;
	sim_around(x, bn, &rows, &cols);
	cols = x->numel / (rows ? rows : 1);
	for (int i = bp; i < x->ndim; i++)
		gsz *= x->shape[i];
	if (g->numel != gsz || b->numel != gsz)
		return FAILV("gamma and beta have %lld and %lld elements; dims %d.. of the input have %lld",
		             (long long)g->numel, (long long)b->numel, bp, (long long)gsz);
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, x->shape);
	SimTensor *mean = o ? stat_tensor(c, x, bn) : NULL, *rstd = mean ? stat_tensor(c, x, bn) : NULL;
	if (!rstd)
		return NULL;
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x->data + r * cols;
		double s = 0, ss = 0;
		for (int64_t j = 0; j < cols; j++)
			s += xr[j];
		double mu = cols ? s / (double)cols : 0;
		for (int64_t j = 0; j < cols; j++)
			ss += (xr[j] - mu) * (xr[j] - mu);
		double rs = 1 / sqrt((cols ? ss / (double)cols : 0) + eps);
		for (int64_t j = 0; j < cols; j++) {
			int64_t gi = (r * cols + j) % gsz;
			o->data[r * cols + j] = (float)((xr[j] - mu) * rs * g->data[gi] + b->data[gi]);
		}
		mean->data[r] = (float)mu;
		rstd->data[r] = (float)rs;
	}
	return outputs(c, sim_tuple_of(c, 3, (SimTensor *[]){o, mean, rstd}));
}

/* RmsNorm(x, gamma, epsilon): y = x / sqrt(mean(x^2) + eps) * gamma over the
 * trailing dims that gamma covers */
SimValue *k_rmsnorm(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *g = x ? sim_arg_tensor(c, 1) : NULL;
	if (!g)
		return NULL;
	double eps = sim_float(c, 2, "epsilon", 1e-6);
	int from = x->ndim - g->ndim;
	if (from < 0 || g->numel == 0)
		return FAILV("gamma has a higher rank than the input");
	for (int i = 0; i < g->ndim; i++)
		if (g->shape[i] != x->shape[from + i])
			return FAILV("gamma does not match the trailing dimensions of the input");
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, x->shape), *rstd = o ? stat_tensor(c, x, from) : NULL;
	if (!rstd)
		return NULL;
	int64_t cols = g->numel, rows = x->numel / cols;
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x->data + r * cols;
		double ss = 0;
		for (int64_t j = 0; j < cols; j++)
			ss += (double)xr[j] * xr[j];
		double rs = 1 / sqrt(ss / (double)cols + eps);
		for (int64_t j = 0; j < cols; j++)
			o->data[r * cols + j] = (float)(xr[j] * rs * g->data[j]);
		rstd->data[r] = (float)rs;
	}
	return outputs(c, sim_tuple2(c, o, rstd));
}

/* BatchNorm(x, scale, offset, mean, variance), channels on dim 1.  With
 * is_training the statistics are the batch's own (biased variance over N
 * and the spatial dims), exactly as one device computes them on its local
 * batch: a data-parallel split changes them, and the comparison says so. */
SimValue *k_batchnorm(Ctx *c)
{
	SimTensor *in[5];
	for (uint32_t i = 0; i < 5; i++)
		if (!(in[i] = sim_arg_tensor(c, i)))
			return NULL;
	SimTensor *x = in[0];
	if (x->ndim < 2)
		return FAILV("BatchNorm needs an input of rank >= 2");
	int64_t C = x->shape[1], outer = x->shape[0], inner = x->numel / (outer * C > 0 ? outer * C : 1);
	for (int i = 1; i < 5; i++)
		if (in[i]->numel != C)
			return FAILV("operand %d has %lld elements for %lld channels", i, (long long)in[i]->numel,
			             (long long)C);
	int train = sim_flag(c, 5, "is_training", NULL, 0);
	double eps = sim_float(c, 6, "epsilon", 1e-5);
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, x->shape);
	SimTensor *bm = o ? sim_tensor_new(c->r, SD_F32, 1, &C) : NULL,
	          *bv = bm ? sim_tensor_new(c->r, SD_F32, 1, &C) : NULL;
	if (!bv)
		return NULL;
	for (int64_t ch = 0; ch < C; ch++) {
		double mu = in[3]->data[ch], var = in[4]->data[ch];
		if (train) {
			double s = 0, ss = 0, cnt = (double)(outer * inner);
			for (int64_t a = 0; a < outer; a++)
				for (int64_t b = 0; b < inner; b++)
					s += x->data[(a * C + ch) * inner + b];
			mu = cnt ? s / cnt : 0;
			for (int64_t a = 0; a < outer; a++)
				for (int64_t b = 0; b < inner; b++) {
					double d = x->data[(a * C + ch) * inner + b] - mu;
					ss += d * d;
				}
			var = cnt ? ss / cnt : 0;
		}
		double rs = 1 / sqrt(var + eps);
		for (int64_t a = 0; a < outer; a++)
			for (int64_t b = 0; b < inner; b++) {
				int64_t i = (a * C + ch) * inner + b;
				o->data[i] = (float)((x->data[i] - mu) * rs * in[1]->data[ch] + in[2]->data[ch]);
			}
		bm->data[ch] = (float)mu;
		bv->data[ch] = (float)var;
	}
	SimValue *t = sim_val_tuple(c->r, 5);
	t->elems[0] = sim_val_tensor(c->r, o);
	t->elems[1] = t->elems[3] = sim_val_tensor(c->r, bm);
	t->elems[2] = t->elems[4] = sim_val_tensor(c->r, bv);
	return outputs(c, t);
}

/* -------------------------------------------------------------- losses */
/* SoftmaxCrossEntropyWithLogits(logits (B, C), labels (B, C)) -> loss (B),
 * or (loss, backprop = softmax - labels) when the type line is a tuple */
SimValue *k_loss(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *y = x ? sim_arg_tensor(c, 1) : NULL;
	if (!y)
		return NULL;
	if (x->ndim != 2 || !sim_same_shape(y, 2, x->shape))
		return FAILV("takes 2-D logits and labels of the same shape");
	int64_t B = x->shape[0], C = x->shape[1];
	SimTensor *sm = sim_tensor_new(c->r, SD_F32, 2, x->shape),
	          *loss = sm ? sim_tensor_new(c->r, SD_F32, 1, &B) : NULL;
	if (!loss)
		return NULL;
	sim_softmax_rows(x->data, sm->data, B, C, 1, 1);
	/* backprop is the derivative of the loss, softmax * sum(labels) - labels:
	 * MindSpore's kernel writes softmax - labels, the same for labels that
	 * sum to 1 per row, which the seeded inputs need not */
	for (int64_t i = 0; i < B; i++) {
		double s = 0, ysum = 0;
		for (int64_t j = 0; j < C; j++) {
			s -= (double)y->data[i * C + j] * sm->data[i * C + j];
			ysum += y->data[i * C + j];
		}
		for (int64_t j = 0; j < C; j++)
			sm->data[i * C + j] = (float)(exp(sm->data[i * C + j]) * ysum - y->data[i * C + j]);
		loss->data[i] = (float)s;
	}
	return outputs(c, sim_tuple2(c, loss, sm));
}

/* SparseSoftmaxCrossEntropyWithLogits(logits (B, C), labels (B)) -> the
 * mean loss, a scalar () */
SimValue *k_sparseloss(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *y = x ? sim_arg_tensor(c, 1) : NULL;
	if (!y)
		return NULL;
	int grad = sim_flag(c, 2, "is_grad", NULL, 0);
	if (x->ndim != 2 || y->numel != x->shape[0])
		return FAILV("takes 2-D logits and one label per row");
	int64_t B = x->shape[0], C = x->shape[1];
	/* is_grad: the gradient of the mean loss with respect to the logits,
	 * (softmax - onehot(label)) / B (MindSpore's bprop multiplies it by
	 * dout afterwards: mindspore/ops/grad/grad_nn_ops.cc) */
	SimTensor *dx = grad ? sim_tensor_new(c->r, SD_F32, 2, x->shape) : NULL;
	if (grad && !dx)
		return NULL;
	double total = 0;
	for (int64_t i = 0; i < B; i++) {
		int64_t lab = (int64_t)y->data[i];
		if (lab < 0 || lab >= C)
			return FAILV("label %lld of row %lld is outside [0, %lld)", (long long)lab, (long long)i,
			             (long long)C);
		const float *xr = x->data + i * C;
		double mx = -INFINITY, s = 0;
		for (int64_t j = 0; j < C; j++)
			mx = xr[j] > mx ? xr[j] : mx;
		for (int64_t j = 0; j < C; j++)
			s += exp(xr[j] - mx);
		total += log(s) + mx - xr[lab];
		for (int64_t j = 0; dx && j < C; j++)
			dx->data[i * C + j] = (float)((exp(xr[j] - mx) / s - (j == lab)) / (double)B);
	}
	if (dx)
		return sim_val_tensor(c->r, dx);
	SimTensor *o = sim_tensor_new(c->r, SD_F32, 0, NULL);
	if (!o)
		return NULL;
	o->data[0] = (float)(B ? total / (double)B : 0);
	return sim_val_tensor(c->r, o);
}

/* ---------------------------------------------- LLM and vision operators */
/* an optional tensor operand: NULL when absent or None (no failure) */
static SimTensor *opt_tensor(Ctx *c, uint32_t i)
{
	if (i >= c->n->nargs || value_is_word(&c->n->args[i], "None"))
		return NULL;
	return sim_arg_tensor(c, i);
}

/* element (b, head n, position s, d) of a q/k/v tensor in layout ai */
static int64_t attn_at(const AttnInfo *ai, const SimTensor *t, int64_t b, int64_t n, int64_t s, int64_t d, int64_t hd)
{
	const int64_t *sh = t->shape;
	switch (ai->layout) {
	case ATTN_BSH:
		return (b * sh[1] + s) * sh[2] + n * hd + d;
	case ATTN_SBH:
		return (s * sh[1] + b) * sh[2] + n * hd + d;
	case ATTN_BNSD:
		return ((b * sh[1] + n) * sh[2] + s) * sh[3] + d;
	default: /* BSND */
		return ((b * sh[1] + s) * sh[2] + n) * sh[3] + d;
	}
}

/* the operands of an attention operator or its grad, read once */
typedef struct Attn {
	AttnInfo ai;
	SimTensor *q, *k, *v, *mask, *shift;
	double scale;
} Attn;

/* FlashAttentionScore / PromptFlashAttention / FlashAttentionScoreGrad:
 * q, k, v, the mask and real_shift; fails on the operands and settings the
 * simulator does not model (keep_opnd: keep_prob's operand, -1 none). */
static int attn_operands(Ctx *c, Attn *A, int keep_opnd)
{
	Node *n = c->n;
	char why[256] = "";
	memset(A, 0, sizeof *A);
	if (ir_attention_info(n, &A->ai, why, sizeof why) != 1)
		return sim_fail(c, "attention operands: %s", why[0] ? why : "shapes unknown");
	const AttnInfo *ai = &A->ai;
	if (!(A->q = sim_arg_tensor(c, 0)) || !(A->k = sim_arg_tensor(c, 1)) || !(A->v = sim_arg_tensor(c, 2)))
		return -1;
	for (uint32_t i = 3; i < n->nargs && i < ATTN_MAX_OPND; i++) {
		if (ai->role[i] == AR_NONE || value_is_word(&n->args[i], "None"))
			continue;
		if (ai->role[i] == AR_MASK)
			A->mask = opt_tensor(c, i);
		else if (ai->role[i] == AR_SHIFT)
			A->shift = opt_tensor(c, i);
		else
			return sim_fail(c,
			                "operand %u of %s (dropout, padding, prefix, sequence lengths, quantisation) is "
			                "not simulated",
			                i + 1, op_table[n->op].name);
		if (c->r->failed)
			return -1;
	}
	int64_t sparse = 0;
	if (ai->sparse_opnd >= 0)
		sim_ints(c, (uint32_t)ai->sparse_opnd, "sparse_mode", &sparse, 1);
	if (sparse > 1)
		return sim_fail(c, "sparse_mode %lld is not simulated", (long long)sparse);
	if (keep_opnd >= 0 && sim_float(c, (uint32_t)keep_opnd, "keep_prob", 1.0) != 1.0)
		return sim_fail(c, "dropout (keep_prob < 1) is not simulated");
	A->scale = sim_float(c, (uint32_t)ai->scale_opnd, "scale_value", 1.0);
	return 0;
}

/* row i of head h of batch b: sc[j] = exp(s_j - max) for the scores
 * s_j = scale (q_i k_j + real_shift), a masked score dropping out (0);
 * *mx the max (-inf when every score is masked), the sum is returned */
static double attn_row(const Attn *A, int64_t b, int64_t h, int64_t i, double *sc, double *mx)
{
	const AttnInfo *ai = &A->ai;
	const SimTensor *q = A->q, *k = A->k, *shift = A->shift, *mask = A->mask;
	int64_t S1 = ai->s1, S2 = ai->s2, D = ai->head_dim, G = ai->heads / ai->kv_heads;
	double m = -INFINITY, sum = 0;
	for (int64_t j = 0; j < S2; j++) {
		double dot = 0;
		for (int64_t d = 0; d < D; d++)
			dot +=
			    (double)q->data[attn_at(ai, q, b, h, i, d, D)] * k->data[attn_at(ai, k, b, h / G, j, d, D)];
		if (shift)
			dot += shift->data[((shift->shape[0] > 1 ? b : 0) * shift->shape[1] + h) * shift->shape[2] *
			                       shift->shape[3] +
			                   (shift->shape[2] > 1 ? i : 0) * shift->shape[3] + j];
		dot *= A->scale;
		if (mask) {
			int64_t mi = mask->ndim == 2 ? i * S2 + j
			                             : (((mask->shape[0] > 1 ? b : 0) * mask->shape[1] +
			                                 (mask->shape[1] > 1 ? h : 0)) *
			                                    S1 +
			                                i) * S2 +
			                                   j;
			if (mask->data[mi] != 0)
				dot = -INFINITY;
		}
		sc[j] = dot;
		if (dot > m)
			m = dot;
	}
	for (int64_t j = 0; j < S2; j++)
		sum += sc[j] = m == -INFINITY ? 0 : exp(sc[j] - m);
	*mx = m;
	return sum;
}

/* FlashAttentionScore / PromptFlashAttention on the rank's block:
 * y = softmax(mask(scale * (real_shift + q k^T))) v per head, the query
 * heads grouped over the key/value heads (GQA/MQA).  A nonzero mask entry
 * drops its score (MindSpore's attn_mask: 1 = discard).  softmax_max and
 * softmax_sum are each row's max and sum of exponentials, repeated over
 * their last 8 entries; softmax_out is left zero (the kernel does not
 * return it).  Dropout (keep_prob < 1) and the sparse modes that build
 * their own mask (2 and up) are not simulated. */
SimValue *k_attention(Ctx *c)
{
	Node *n = c->n;
	int fas = n->op == OP_FlashAttentionScore;
	Attn A;
	if (attn_operands(c, &A, fas ? 11 : -1) < 0)
		return NULL;
	const AttnInfo *ai = &A.ai;
	const SimTensor *q = A.q, *v = A.v;
	int64_t B = ai->batch, N = ai->heads, S1 = ai->s1, S2 = ai->s2, D = ai->head_dim, G = ai->heads / ai->kv_heads;
	SimTensor *o = sim_tensor_new(c->r, SD_F32, q->ndim, q->shape);
	int64_t st[4] = {B, N, S1, 8}, one = 1;
	SimTensor *mx = fas ? sim_tensor_new(c->r, SD_F32, 4, st) : NULL, *sm = fas ? sim_tensor_new(c->r, SD_F32, 4, st) : NULL;
	if (!o || (fas && (!mx || !sm)))
		return NULL;
	double *sc = xcalloc((size_t)(S2 ? S2 : 1), sizeof *sc);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < N; h++)
			for (int64_t i = 0; i < S1; i++) {
				double m, sum = attn_row(&A, b, h, i, sc, &m);
				for (int64_t d = 0; d < D; d++) {
					double acc = 0;
					for (int64_t j = 0; j < S2; j++)
						acc += sc[j] * v->data[attn_at(ai, v, b, h / G, j, d, D)];
					o->data[attn_at(ai, q, b, h, i, d, D)] = (float)(sum > 0 ? acc / sum : 0);
				}
				if (fas)
					for (int e = 0; e < 8; e++) {
						mx->data[((b * N + h) * S1 + i) * 8 + e] = (float)(m == -INFINITY ? 0 : m);
						sm->data[((b * N + h) * S1 + i) * 8 + e] = (float)sum;
					}
			}
	free(sc);
	if (!fas)
		return sim_val_tensor(c->r, o);
	const Shape *os = &n->out.shape;
	SimTensor *so;
	if (n->has_type_line && os->kind == SK_TUPLE && os->rank == 4 && os->sub[2].kind == SK_DIMS)
		so = sim_tensor_new(c->r, sim_out_dtype(n, SD_F32), os->sub[2].rank, os->sub[2].dims);
	else
		so = sim_tensor_new(c->r, SD_F32, 1, &one);
	if (!so)
		return NULL;
	return sim_tuple_of(c, 4, (SimTensor *[]){mx, sm, so, o});
}

/* FlashAttentionScoreGrad(q, k, v, dout, real_shift, drop_mask,
 * padding_mask, attn_mask, softmax_max, softmax_sum, softmax_out,
 * attention_out, prefix, actual_seq_qlen, actual_seq_kvlen, head_num,
 * keep_prob, scale_value, pre_tokens, next_tokens, inner_precise,
 * input_layout, sparse_mode) -> (dq, dk, dv), the derivative of
 * k_attention above.  The probabilities are recomputed from q and k in
 * double rather than read back from softmax_max/softmax_sum (rounded to
 * float32).  Per row, p = softmax(s), o = p v:
 *   dv_j += p_j dout,  dp_j = dout . v_j,  ds_j = p_j (dp_j - sum_l p_l dp_l),
 *   dq += scale sum_j ds_j k_j,  dk_j += scale ds_j q
 * a query head's dk and dv summed into its key/value head (GQA).  The
 * gradient of real_shift (MindSpore's fourth output, dpse) is not
 * returned: the bprop takes dq, dk, dv only (passes/train/autodiff.c). */
SimValue *k_attention_grad(Ctx *c)
{
	Attn A;
	if (attn_operands(c, &A, 16) < 0)
		return NULL;
	const AttnInfo *ai = &A.ai;
	const SimTensor *q = A.q, *k = A.k, *v = A.v, *dy = sim_arg_tensor(c, 3);
	if (!dy)
		return NULL;
	if (!sim_same_shape(dy, q->ndim, q->shape))
		return FAILV("dout must be shaped like the query");
	int64_t B = ai->batch, N = ai->heads, S1 = ai->s1, S2 = ai->s2, D = ai->head_dim, G = ai->heads / ai->kv_heads;
	SimTensor *dq = sim_tensor_new(c->r, SD_F32, q->ndim, q->shape);
	SimTensor *dk = dq ? sim_tensor_new(c->r, SD_F32, k->ndim, k->shape) : NULL;
	SimTensor *dv = dk ? sim_tensor_new(c->r, SD_F32, v->ndim, v->shape) : NULL;
	if (!dv)
		return NULL;
	size_t s2 = (size_t)(S2 ? S2 : 1), nk = (size_t)(k->numel ? k->numel : 1);
	double *p = xcalloc(s2, sizeof *p), *ds = xcalloc(s2, sizeof *ds);
	double *ak = xcalloc(nk, sizeof *ak), *av = xcalloc(nk, sizeof *av);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < N; h++)
			for (int64_t i = 0; i < S1; i++) {
				double m, sum = attn_row(&A, b, h, i, p, &m), dot = 0;
				for (int64_t j = 0; j < S2; j++) {
					p[j] = sum > 0 ? p[j] / sum : 0;
					double dp = 0;
					for (int64_t d = 0; d < D; d++) {
						double g = dy->data[attn_at(ai, q, b, h, i, d, D)];
						int64_t kv = attn_at(ai, v, b, h / G, j, d, D);
						dp += g * v->data[kv];
						av[kv] += p[j] * g;
					}
					ds[j] = dp;
					dot += p[j] * dp;
				}
				for (int64_t j = 0; j < S2; j++)
					ds[j] = p[j] * (ds[j] - dot) * A.scale;
				for (int64_t d = 0; d < D; d++) {
					int64_t qi = attn_at(ai, q, b, h, i, d, D);
					double acc = 0;
					for (int64_t j = 0; j < S2; j++) {
						int64_t kj = attn_at(ai, k, b, h / G, j, d, D);
						acc += ds[j] * k->data[kj];
						ak[kj] += ds[j] * q->data[qi];
					}
					dq->data[qi] = (float)acc;
				}
			}
	for (int64_t e = 0; e < k->numel; e++) {
		dk->data[e] = (float)ak[e];
		dv->data[e] = (float)av[e];
	}
	free(p);
	free(ds);
	free(ak);
	free(av);
	return sim_tuple_of(c, 3, (SimTensor *[]){dq, dk, dv});
}

/* RoPE's operands in[] = x, cos, sin (mode in operand mode_at): cos and
 * sin broadcast to x's shape (nd, shape, strides st), an even last axis,
 * mode 0 or 1; 0, or -1 with the failure set.  Shared by k_rope and its
 * grad (backward.c). */
int sim_rope_operands(Ctx *c, SimTensor **in, uint32_t mode_at, int64_t *mode, int *nd, int64_t *shape,
                      int64_t (*st)[MAX_RANK])
{
	const SimTensor *x = in[0];
	*mode = 0;
	sim_ints(c, mode_at, "mode", mode, 1);
	if (sim_broadcast(c, 3, in, nd, shape, st) < 0)
		return -1;
	if (*nd != x->ndim || !sim_same_shape(x, *nd, shape) || *nd < 1) {
		sim_fail(c, "cos and sin must broadcast to the input's shape");
		return -1;
	}
	int64_t D = x->shape[*nd - 1];
	if (D % 2 || (*mode != 0 && *mode != 1)) {
		sim_fail(c, "rotation needs an even last axis and mode 0 or 1 (D %lld, mode %lld)", (long long)D,
		         (long long)*mode);
		return -1;
	}
	return 0;
}

/* RotaryPositionEmbedding(x, cos, sin, mode): out = x cos + rot(x) sin with
 * cos/sin broadcast to x.  mode 0 rotates halves (rot(x) = (-x2, x1)),
 * mode 1 interleaved pairs (rot(x)_2i = -x_2i+1, rot(x)_2i+1 = x_2i). */
SimValue *k_rope(Ctx *c)
{
	SimTensor *in[3];
	for (uint32_t i = 0; i < 3; i++)
		if (!(in[i] = sim_arg_tensor(c, i)))
			return NULL;
	SimTensor *x = in[0];
	int nd;
	int64_t mode, shape[MAX_RANK], st[3][MAX_RANK];
	if (sim_rope_operands(c, in, 3, &mode, &nd, shape, st) < 0)
		return NULL;
	int64_t D = x->shape[nd - 1];
	SimTensor *o = sim_tensor_new(c->r, SD_F32, nd, shape);
	if (!o)
		return NULL;
	int64_t idx[MAX_RANK] = {0}, off[3] = {0};
	for (int64_t e = 0; e < o->numel; e++) {
		int64_t i = idx[nd - 1], p;
		double sign;
		sign = sim_rope_partner(mode, i, D, e, &p);
		o->data[e] = (float)((double)x->data[e] * in[1]->data[off[1]] + sign * x->data[p] * in[2]->data[off[2]]);
		sim_bcast_next(nd, shape, idx, st, off, 1, 3);
	}
	return sim_val_tensor(c->r, o);
}

/* Swiglu's split of x (its dim in operand `at`): the axis *a and sh, x's
 * shape with that axis halved (the output's shape); 0, or -1 with the
 * failure set.  Shared by k_swiglu and its grad (backward.c). */
int sim_swiglu_halves(Ctx *c, const SimTensor *x, int at, int *a, int64_t *sh)
{
	int64_t ax = -1;
	sim_ints(c, at, "dim", &ax, 1);
	if (sim_axis(c, ax, x->ndim, a) < 0)
		return -1;
	memcpy(sh, x->shape, sizeof x->shape);
	if (sh[*a] % 2) {
		sim_fail(c, "Swiglu of an odd dimension");
		return -1;
	}
	sh[*a] /= 2;
	return 0;
}

/* Swiglu(x, dim): a, b = the halves of x along dim; a * sigmoid(a) * b */
SimValue *k_swiglu(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t outer, inner, sh[MAX_RANK];
	int a;
	if (!x || sim_swiglu_halves(c, x, 1, &a, sh) < 0)
		return NULL;
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, sh);
	if (!o)
		return NULL;
	sim_around(x, a, &outer, &inner);
	int64_t h = sh[a];
	for (int64_t i = 0; i < outer; i++)
		for (int64_t j = 0; j < h; j++)
			for (int64_t l = 0; l < inner; l++) {
				double u = x->data[(i * 2 * h + j) * inner + l], w = x->data[(i * 2 * h + h + j) * inner + l];
				o->data[(i * h + j) * inner + l] = (float)(u / (1 + exp(-u)) * w);
			}
	return sim_val_tensor(c->r, o);
}

/* PReLU(x, w): x where positive, else w[channel] x (channel = dim 1) */
SimValue *k_prelu(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *w = x ? sim_arg_tensor(c, 1) : NULL;
	int64_t outer, inner;
	if (!w)
		return NULL;
	if (x->ndim < 2 || w->ndim != 1 || (w->shape[0] != 1 && w->shape[0] != x->shape[1]))
		return FAILV("PReLU weight must have one slope or one per channel");
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, x->shape);
	if (!o)
		return NULL;
	sim_around(x, 1, &outer, &inner);
	for (int64_t e = 0; e < x->numel; e++) {
		int64_t ch = e / inner % x->shape[1];
		double s = w->data[w->shape[0] == 1 ? 0 : ch], y = x->data[e];
		o->data[e] = (float)(y > 0 ? y : s * y);
	}
	return sim_val_tensor(c->r, o);
}

/* L2Normalize(x) over attribute axis (default 0): x / sqrt(max(sum x^2, epsilon)) */
SimValue *k_l2normalize(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t outer, inner;
	int a;
	if (!x || one_axis(c, x, 0, "L2Normalize", &a) < 0)
		return NULL;
	double eps = sim_float(c, 2, "epsilon", 1e-4);
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, x->shape);
	if (!o)
		return NULL;
	sim_around(x, a, &outer, &inner);
	int64_t len = x->shape[a];
	for (int64_t i = 0; i < outer; i++)
		for (int64_t l = 0; l < inner; l++) {
			double ss = 0;
			for (int64_t j = 0; j < len; j++) {
				double y = x->data[(i * len + j) * inner + l];
				ss += y * y;
			}
			double dn = sqrt(ss > eps ? ss : eps);
			for (int64_t j = 0; j < len; j++)
				o->data[(i * len + j) * inner + l] = (float)(x->data[(i * len + j) * inner + l] / dn);
		}
	return sim_val_tensor(c->r, o);
}

/* CumSum/CumProd(x, axis, exclusive, reverse) */
SimValue *k_cum(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t ax = 0, outer, inner;
	int a;
	if (!x)
		return NULL;
	if (sim_ints(c, 1, "axis", &ax, 1) < 0)
		ax = 0;
	if (sim_axis(c, ax, x->ndim, &a) < 0)
		return NULL;
	int excl = sim_flag(c, 2, "exclusive", NULL, 0), rev = sim_flag(c, 3, "reverse", NULL, 0);
	int prod = c->n->op == OP_CumProd;
	SimTensor *o = sim_tensor_new(c->r, sim_out_dtype(c->n, x->dtype), x->ndim, x->shape);
	if (!o)
		return NULL;
	sim_around(x, a, &outer, &inner);
	int64_t len = x->ndim ? x->shape[a] : 1;
	for (int64_t i = 0; i < outer; i++)
		for (int64_t l = 0; l < inner; l++) {
			double acc = prod ? 1 : 0;
			for (int64_t t = 0; t < len; t++) {
				int64_t j = rev ? len - 1 - t : t, e = (i * len + j) * inner + l;
				double y = x->data[e];
				if (!excl)
					acc = prod ? acc * y : acc + y;
				o->data[e] = (float)acc;
				if (excl)
					acc = prod ? acc * y : acc + y;
			}
		}
	return sim_val_tensor(c->r, o);
}

/* Dense(x, w, b): x (..., K) times w (N, K) transposed, plus b (N) */
SimValue *k_dense(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *w = x ? sim_arg_tensor(c, 1) : NULL, *b = w ? opt_tensor(c, 2) : NULL;
	if (!w || c->r->failed)
		return NULL;
	int64_t K = x->ndim ? x->shape[x->ndim - 1] : 1, N = w->ndim == 2 ? w->shape[0] : 0;
	if (w->ndim != 2 || w->shape[1] != K || (b && (b->ndim != 1 || b->shape[0] != N)))
		return FAILV("Dense operands do not fit: x (..., %lld), w (N, K), b (N)", (long long)K);
	int64_t sh[MAX_RANK];
	memcpy(sh, x->shape, sizeof sh);
	sh[x->ndim - 1] = N;
	SimTensor *o = sim_tensor_new(c->r, SD_F32, x->ndim, sh);
	if (!o)
		return NULL;
	sim_gemm(0, 1, K ? x->numel / K : 0, N, K, x->data, K, w->data, K, b ? b->data : NULL, o->data, N);
	return sim_val_tensor(c->r, o);
}

/* TopK(x, k, sorted) along the last axis and Sort(x, axis, descending):
 * (values, indices); equal values keep their order (a stable sort) */
SimValue *k_sort(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t ax = -1, k = 0, outer, inner;
	int a;
	if (!x)
		return NULL;
	int topk = c->n->op == OP_TopK, desc = 1;
	if (topk) {
		if (sim_ints(c, 1, "k", &k, 1) < 0)
			return FAILV("TopK needs k");
	} else {
		sim_ints(c, 1, "axis", &ax, 1);
		desc = sim_flag(c, 2, "descending", NULL, 0);
	}
	if (sim_axis(c, ax, x->ndim, &a) < 0)
		return NULL;
	int64_t len = x->ndim ? x->shape[a] : 1;
	if (!topk)
		k = len;
	if (k < 0 || k > len)
		return FAILV("k %lld is out of range for %lld elements", (long long)k, (long long)len);
	int64_t sh[MAX_RANK];
	memcpy(sh, x->shape, sizeof sh);
	if (x->ndim)
		sh[a] = k;
	SimTensor *v = sim_tensor_new(c->r, x->dtype, x->ndim, sh), *ix = v ? sim_tensor_new(c->r, SD_INT, x->ndim, sh) : NULL;
	if (!ix)
		return NULL;
	sim_around(x, a, &outer, &inner);
	int64_t *ord = xmalloc((size_t)(len ? len : 1) * sizeof *ord);
	for (int64_t i = 0; i < outer; i++)
		for (int64_t l = 0; l < inner; l++) {
			const float *row = x->data + i * len * inner + l;
			for (int64_t j = 0; j < len; j++)
				ord[j] = j;
			/* insertion sort: stable, and rows are short in tests */
			for (int64_t j = 1; j < len; j++) {
				int64_t t = ord[j], p = j;
				while (p > 0 && (desc ? row[ord[p - 1] * inner] < row[t * inner]
				                      : row[ord[p - 1] * inner] > row[t * inner])) {
					ord[p] = ord[p - 1];
					p--;
				}
				ord[p] = t;
			}
			/* neighbours equal to rounding, up to the k-th and the next:
			 * rounding can swap them, and their gradients (driver.c) */
			for (int64_t j = 0; j + 1 < len && j < k; j++)
				c->r->near_switch += sim_near(row[ord[j] * inner], row[ord[j + 1] * inner]);
			for (int64_t j = 0; j < k; j++) {
				v->data[(i * k + j) * inner + l] = row[ord[j] * inner];
				ix->data[(i * k + j) * inner + l] = (float)ord[j];
			}
		}
	free(ord);
	return sim_tuple_of(c, 2, (SimTensor *[]){v, ix});
}

/* LpNorm(x): (sum |x|^p)^(1/p) over axis, at least epsilon */
SimValue *k_lpnorm(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t ax[MAX_RANK];
	if (!x)
		return NULL;
	int k = sim_ints(c, 99, "axis", ax, MAX_RANK);
	int keep = sim_flag(c, 99, "keep_dims", NULL, 0);
	double p = sim_float(c, 99, "p", 2), eps = sim_float(c, 99, "epsilon", 1e-12);
	unsigned red = 0;
	for (int i = 0; i < k; i++) {
		int a;
		if (sim_axis(c, ax[i], x->ndim, &a) < 0)
			return NULL;
		red |= 1u << a;
	}
	if (k <= 0)
		red = (1u << x->ndim) - 1;
	int64_t sh[MAX_RANK], full[MAX_RANK];
	int nd = 0;
	for (int i = 0; i < x->ndim; i++) {
		full[i] = red >> i & 1 ? 1 : x->shape[i];
		if (!(red >> i & 1) || keep)
			sh[nd++] = full[i];
	}
	SimTensor *o = sim_tensor_new(c->r, SD_F32, nd, sh);
	if (!o)
		return NULL;
	double *acc = xcalloc((size_t)(o->numel ? o->numel : 1), sizeof *acc);
	int64_t idx[MAX_RANK] = {0}, st[MAX_RANK];
	sim_strides(x->ndim, full, st);
	for (int64_t e = 0; e < x->numel; e++) {
		int64_t off = 0;
		for (int i = 0; i < x->ndim; i++)
			off += (red >> i & 1 ? 0 : idx[i]) * st[i];
		acc[off] += pow(fabs((double)x->data[e]), p);
		for (int i = x->ndim - 1; i >= 0; i--) {
			if (++idx[i] < x->shape[i])
				break;
			idx[i] = 0;
		}
	}
	for (int64_t i = 0; i < o->numel; i++) {
		double r = pow(acc[i], 1 / p);
		o->data[i] = (float)(r > eps ? r : eps);
	}
	free(acc);
	return sim_val_tensor(c->r, o);
}

/* ------------------------------------ ScatterDiv, RandomChoiceWithMask, MoE */
/* ScatterDiv(var, indices, updates): row indices[j] of var divided by
 * updates[j] (indices.shape + var.shape[1:]), in index order; the result
 * is written back to the Parameter var (backward.c's table names it) */
SimValue *k_scatter_div(Ctx *c)
{
	SimTensor *v = sim_arg_tensor(c, 0), *ix = v ? sim_arg_tensor(c, 1) : NULL,
	          *up = ix ? sim_arg_tensor(c, 2) : NULL;
	if (!up)
		return NULL;
	if (v->ndim < 1)
		return FAILV("ScatterDiv needs a variable of rank >= 1");
	int64_t rows = v->shape[0], row = rows ? v->numel / rows : 0;
	if (up->numel != ix->numel * row)
		return FAILV("ScatterDiv: %lld updates for %lld indices of rows of %lld elements", (long long)up->numel,
		             (long long)ix->numel, (long long)row);
	SimTensor *o = sim_tensor_new(c->r, v->dtype, v->ndim, v->shape);
	if (!o)
		return NULL;
	memcpy(o->data, v->data, (size_t)v->numel * sizeof *o->data);
	for (int64_t j = 0; j < ix->numel; j++) {
		int64_t at = (int64_t)ix->data[j];
		if (at < 0 || at >= rows)
			return FAILV("ScatterDiv index %lld is outside the variable's %lld rows", (long long)at,
			             (long long)rows);
		for (int64_t e = 0; e < row; e++)
			o->data[at * row + e] /= up->data[j * row + e];
	}
	if (sim_write_ref(c, 0, o) < 0)
		return NULL;
	return sim_val_tensor(c->r, o);
}

/* RandomChoiceWithMask(x, count, seed, seed2) -> (indices (count, rank),
 * mask (count)): up to count coordinates of x's true elements in random
 * order, the rest zero with a false mask.  The simulator draws the order
 * from a stream keyed by the run's seed, the operator's seeds and its full
 * name, so it is deterministic: the single device and every rank (which
 * hold the whole operator, MindSpore splitting nothing) draw the same
 * choice and the comparison stays exact.  It is one admissible draw, not
 * the one a device would make. */
SimValue *k_random_choice(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t count = 256, seed = 0, seed2 = 0;
	if (!x)
		return NULL;
	sim_ints(c, 1, "count", &count, 1);
	sim_ints(c, 2, "seed", &seed, 1);
	sim_ints(c, 3, "seed2", &seed2, 1);
	if (count < 1)
		return FAILV("RandomChoiceWithMask count %lld is not positive", (long long)count);
	if (x->ndim < 1 || x->ndim > 5)
		return FAILV("RandomChoiceWithMask takes an input of rank 1 to 5, not %d", x->ndim);
	int64_t *cand = xmalloc((size_t)(x->numel ? x->numel : 1) * sizeof *cand), nc = 0;
	for (int64_t e = 0; e < x->numel; e++)
		if (x->data[e] != 0)
			cand[nc++] = e;
	char fnbuf[1024];
	const char *fn = ir_node_fullname_r(c->n, fnbuf, sizeof fnbuf);
	uint64_t key = sim_mix64(c->r->o.seed ^ std_hash_bytes(fn, strlen(fn)) ^ sim_mix64((uint64_t)seed) ^
	                         sim_mix64((uint64_t)seed2 + 1));
	for (int64_t i = nc - 1; i > 0; i--) { /* Fisher-Yates */
		int64_t j = (int64_t)(sim_mix64(key + (uint64_t)i) % (uint64_t)(i + 1)), t = cand[i];
		cand[i] = cand[j];
		cand[j] = t;
	}
	int64_t ish[2] = {count, x->ndim};
	SimTensor *ix = sim_tensor_new(c->r, SD_INT, 2, ish),
	          *mk = ix ? sim_tensor_new(c->r, SD_BOOL, 1, &count) : NULL;
	if (!mk) {
		free(cand);
		return NULL;
	}
	for (int64_t i = 0; i < count && i < nc; i++) {
		int64_t at[MAX_RANK];
		sim_unflatten(cand[i], x->ndim, x->shape, at);
		for (int d = 0; d < x->ndim; d++)
			ix->data[i * x->ndim + d] = (float)at[d];
		mk->data[i] = 1;
	}
	free(cand);
	return sim_tuple2(c, ix, mk);
}

/* MoeInitRouting(x (N, H), row_idx (N, K), expert_idx (N, K), active_num)
 * -> (expanded_x (min(N, active_num) * K, H), expanded_row_idx (N*K),
 * expanded_expert_idx (N*K)): the (n, k) slots, in row-major order, sorted
 * stably by expert; expanded_expert_idx is the sorted experts, expanded_x
 * row i is x's row (row id of slot i) mod N, and expanded_row_idx[id] is
 * where row id went, so the row ids must be a permutation of 0..N*K-1
 * (MindFormers passes k*N + n at (n, k)).  The definition is the one the
 * Ascend documentation of npu_moe_init_routing gives (a stable key-value
 * sort); the shapes are MindSpore's (moe_init_routing_info.cc). */
SimValue *k_moe_init_routing(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *ri = x ? sim_arg_tensor(c, 1) : NULL,
	          *ei = ri ? sim_arg_tensor(c, 2) : NULL;
	if (!ei)
		return NULL;
	if (x->ndim != 2 || ri->ndim != 2 || ei->ndim != 2 || ri->shape[0] != x->shape[0] ||
	    !sim_same_shape(ei, ri->ndim, ri->shape))
		return FAILV("MoeInitRouting takes x (N, H) and row_idx, expert_idx of the same (N, K)");
	int64_t N = x->shape[0], H = x->shape[1], NK = ri->numel, active = N;
	if (sim_ints(c, 3, "active_num", &active, 1) < 0 || active <= 0 || active > N)
		active = N;
	int64_t *ord = xmalloc((size_t)(NK ? NK : 1) * sizeof *ord);
	for (int64_t j = 0; j < NK; j++)
		ord[j] = j;
	for (int64_t j = 1; j < NK; j++) { /* stable insertion sort on the expert */
		int64_t t = ord[j], p = j;
		while (p > 0 && ei->data[ord[p - 1]] > ei->data[t]) {
			ord[p] = ord[p - 1];
			p--;
		}
		ord[p] = t;
	}
	int64_t xs[2] = {active * (NK / (N ? N : 1)), H};
	SimTensor *ex = sim_tensor_new(c->r, x->dtype, 2, xs), *er = ex ? sim_tensor_new(c->r, SD_INT, 1, &NK) : NULL,
	          *ee = er ? sim_tensor_new(c->r, SD_INT, 1, &NK) : NULL;
	if (!ee) {
		free(ord);
		return NULL;
	}
	for (int64_t j = 0; j < NK; j++)
		er->data[j] = -1;
	for (int64_t i = 0; i < NK; i++) {
		int64_t id = (int64_t)ri->data[ord[i]];
		if (id < 0 || id >= NK || er->data[id] >= 0) {
			free(ord);
			return FAILV("MoeInitRouting: row_idx is not a permutation of 0..%lld (value %lld)",
			             (long long)(NK - 1), (long long)id);
		}
		er->data[id] = (float)i;
		ee->data[i] = ei->data[ord[i]];
		if (i < xs[0])
			memcpy(ex->data + i * H, x->data + (id % N) * H, (size_t)H * sizeof *ex->data);
	}
	free(ord);
	return sim_tuple_of(c, 3, (SimTensor *[]){ex, er, ee});
}

/* an int32 output the operator leaves unwritten in its mode: zeros of
 * the declared shape (or of (n,) without one) */
static SimTensor *unwritten(Ctx *c, int k, int64_t n)
{
	const Shape *o = c->n->has_type_line && c->n->out.shape.kind == SK_TUPLE && c->n->out.shape.rank > k
	                     ? &c->n->out.shape.sub[k]
	                     : NULL;
	if (o && o->kind == SK_DIMS && o->rank <= MAX_RANK) {
		for (int i = 0; i < o->rank; i++)
			if (o->dims[i] < 0)
				o = NULL;
		if (o)
			return sim_tensor_new(c->r, SD_INT, o->rank, o->dims);
	}
	return sim_tensor_new(c->r, SD_INT, 1, &n);
}

/* MoeInitRoutingV2(x (N, H), expert_idx (N, K), active_num,
 * expert_capacity, expert_num, drop_pad_mode, count_or_cumsum_flag,
 * before_capacity_flag), CANN's aclnnMoeInitRoutingV2 definition: the
 * flattened expert ids (j = n*K + k) sorted stably, expanded_row_idx[j] =
 * the slot of pair j, expanded_x[slot] = x[j / K].  Dropless: slots
 * 0..N*K-1 in sorted order, expanded_x keeps the first min(active_num,
 * N*K) (all when active_num is 0), and output 2 counts each expert's pairs
 * (flag 2) or their running sum (flag 1).  Drop/pad: expert e keeps its
 * first expert_capacity pairs in slots e*C + i of an (E, C, H) expanded_x,
 * zeros elsewhere, a dropped pair's row index -1, and output 3 counts the
 * pairs before the capacity.  Outputs a mode does not write are zeros. */
SimValue *k_moe_init_routing_v2(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *ei = x ? sim_arg_tensor(c, 1) : NULL;
	if (!ei)
		return NULL;
	MoeV2Info mi;
	char why[256] = "";
	if (ir_moe_v2_info(c->n, &mi, why, sizeof why) < 0)
		return FAILV("MoeInitRoutingV2: %s", why);
	if (x->ndim != 2 || ei->ndim != 2 || ei->shape[0] != x->shape[0])
		return FAILV("MoeInitRoutingV2 takes x (N, H) and expert_idx (N, K)");
	int64_t N = x->shape[0], H = x->shape[1], K = ei->shape[1], NK = N * K, E = mi.experts, C = mi.capacity;
	int drop = mi.drop_pad == 1, counts = drop ? mi.before_flag : mi.count_flag > 0;
	for (int64_t j = 0; j < NK; j++)
		if ((drop || counts) && (ei->data[j] < 0 || ei->data[j] >= (float)E))
			return FAILV("MoeInitRoutingV2: expert id %g outside [0, %lld)", (double)ei->data[j],
			             (long long)E);
	int64_t *ord = xmalloc((size_t)(NK ? NK : 1) * sizeof *ord);
	for (int64_t j = 0; j < NK; j++)
		ord[j] = j;
	for (int64_t j = 1; j < NK; j++) { /* stable insertion sort on the expert */
		int64_t t = ord[j], p = j;
		while (p > 0 && ei->data[ord[p - 1]] > ei->data[t]) {
			ord[p] = ord[p - 1];
			p--;
		}
		ord[p] = t;
	}
	int64_t rows = mi.active > 0 && mi.active < NK ? mi.active : NK;
	int64_t xs[3] = {drop ? E : rows, drop ? C : H, H};
	int64_t ne = E > 0 ? E : 1;
	SimTensor *ex = sim_tensor_new(c->r, x->dtype, drop ? 3 : 2, xs),
	          *er = ex ? sim_tensor_new(c->r, SD_INT, 1, &NK) : NULL,
	          *tc = er ? (!drop && counts ? sim_tensor_new(c->r, SD_INT, 1, &ne) : unwritten(c, 2, ne)) : NULL,
	          *tb = tc ? (drop && counts ? sim_tensor_new(c->r, SD_INT, 1, &ne) : unwritten(c, 3, ne)) : NULL;
	if (!tb) {
		free(ord);
		return NULL;
	}
	int64_t prev = -1, rank = 0;
	for (int64_t i = 0; i < NK; i++) {
		int64_t j = ord[i], e = (int64_t)ei->data[j], slot = i;
		if (drop) {
			rank = e == prev ? rank + 1 : 0;
			prev = e;
			slot = rank < C ? e * C + rank : -1;
		}
		er->data[j] = (float)slot;
		if (slot >= 0 && (drop || slot < rows))
			memcpy(ex->data + slot * H, x->data + (j / K) * H, (size_t)H * sizeof *ex->data);
		if (counts)
			(drop ? tb : tc)->data[e] += 1;
	}
	if (!drop && mi.count_flag == 1)
		for (int64_t e = 1; e < E; e++)
			tc->data[e] += tc->data[e - 1];
	free(ord);
	return sim_tuple_of(c, 4, (SimTensor *[]){ex, er, tc, tb});
}

/* MoeComputeExpertTokens(sorted_experts, num_expert) -> (num_expert,):
 * out[e] = the end of expert e's rows in the sorted list, the number of
 * ids <= e (CANN's BinarySearch(sortedExperts, e)); counted, so an
 * unsorted input gives the same counts. */
SimValue *k_moe_compute_expert_tokens(Ctx *c)
{
	SimTensor *se = sim_arg_tensor(c, 0);
	int64_t E = 0;
	if (!se)
		return NULL;
	if (sim_ints(c, 1, "num_expert", &E, 1) < 1 || E <= 0)
		return FAILV("MoeComputeExpertTokens needs a positive num_expert");
	if (se->ndim != 1)
		return FAILV("MoeComputeExpertTokens takes a 1-D sorted_experts");
	SimTensor *o = sim_tensor_new(c->r, SD_INT, 1, &E);
	if (!o)
		return NULL;
	for (int64_t j = 0; j < se->numel; j++) {
		int64_t v = (int64_t)se->data[j];
		if (v < 0 || v >= E)
			return FAILV("MoeComputeExpertTokens: expert id %lld outside [0, %lld)", (long long)v,
			             (long long)E);
		o->data[v] += 1;
	}
	for (int64_t e = 1; e < E; e++)
		o->data[e] += o->data[e - 1];
	return sim_val_tensor(c->r, o);
}

/* MoeFinalizeRouting(expanded_x, x1, x2, bias, scales, expanded_row_idx,
 * expanded_expert_idx) -> y (N, H):
 *   y[n] = x1[n] + x2[n] + sum_k scales[n, k] * (expanded_x[row[k*N + n]]
 *          + bias[expert[n, k]])
 * (CANN's moe_finalize_routing definition); x2 and bias may be None, and
 * a row beyond expanded_x (dropped by active_num) adds nothing. */
SimValue *k_moe_finalize_routing(Ctx *c)
{
	SimTensor *ex = sim_arg_tensor(c, 0), *x1 = ex ? sim_arg_tensor(c, 1) : NULL;
	if (!x1)
		return NULL;
	SimTensor *x2 = opt_tensor(c, 2), *b = opt_tensor(c, 3), *sc = sim_arg_tensor(c, 4),
	          *ri = sc ? sim_arg_tensor(c, 5) : NULL, *ei = ri ? sim_arg_tensor(c, 6) : NULL;
	if (!ei || c->r->failed)
		return NULL;
	if (x1->ndim != 2 || ex->ndim != 2 || sc->ndim != 2 || ex->shape[1] != x1->shape[1] ||
	    sc->shape[0] != x1->shape[0])
		return FAILV("MoeFinalizeRouting takes expanded_x (M, H), x1 (N, H) and scales (N, K)");
	int64_t N = x1->shape[0], H = x1->shape[1], K = sc->shape[1], M = ex->shape[0];
	if (ri->numel != N * K || ei->numel != N * K || (x2 && x2->numel != N * H) ||
	    (b && (b->ndim != 2 || b->shape[1] != H)))
		return FAILV("MoeFinalizeRouting: operand shapes do not agree on %lld tokens, top-%lld, hidden %lld",
		             (long long)N, (long long)K, (long long)H);
	SimTensor *y = sim_tensor_new(c->r, x1->dtype, 2, x1->shape);
	if (!y)
		return NULL;
	for (int64_t n = 0; n < N; n++)
		for (int64_t h = 0; h < H; h++) {
			double acc = x1->data[n * H + h] + (x2 ? x2->data[n * H + h] : 0);
			for (int64_t k = 0; k < K; k++) {
				int64_t row = (int64_t)ri->data[k * N + n], e = (int64_t)ei->data[n * K + k];
				if (row < 0 || row >= M)
					continue;
				if (b && (e < 0 || e >= b->shape[0]))
					return FAILV("MoeFinalizeRouting: expert %lld has no bias row (%lld experts)",
					             (long long)e, (long long)b->shape[0]);
				acc += (double)sc->data[n * K + k] *
				       ((double)ex->data[row * H + h] + (b ? b->data[e * H + h] : 0));
			}
			y->data[n * H + h] = (float)acc;
		}
	return sim_val_tensor(c->r, y);
}

/* ------------------------------------------------------------ GroupedMatmul */
/* GroupedMatmul in the modes ir_gmm_info accepts (sappc.h):
 *   group_type -1: y_i = x_i w_i for each pair of the lists;
 *   group_type 0: one x (M, K) whose rows [gl[i-1], gl[i]) (gl cumulative,
 *     gl[-1] = 0) multiply weight i, one (E, K, N) or E of (K, N); rows
 *     after gl[E-1] are zero in y (M, N);
 *   group_type 2: one x (M, Kt) and one w (Kt, N): y[i] (E, M, N) is the
 *     product over the shared indices [gl[i-1], gl[i]).
 * The definitions of MindSpore's GroupedMatmul (mindspore-ai/mindspore,
 * ops/op_def/yaml: y_i = x_i weight_i per group; group_list the
 * cumulative sizes, as CANN's aclnnGroupedMatmul documents it).  A
 * group_list that decreases or overruns the grouped axis is an error. */
static SimTensor *list_elem(const SimValue *l, uint32_t k)
{
	return l && l->kind == SV_TUPLE && k < l->n && l->elems[k] && l->elems[k]->kind == SV_TENSOR ? l->elems[k]->t
	                                                                                             : NULL;
}

SimValue *k_grouped_matmul(Ctx *c)
{
	SimValue *xl = sim_arg(c, 0), *wl = xl ? sim_arg(c, 1) : NULL;
	if (!wl)
		return NULL;
	if (xl->kind != SV_TUPLE || wl->kind != SV_TUPLE || !xl->n || !wl->n || !list_elem(xl, 0) || !list_elem(wl, 0))
		return FAILV("GroupedMatmul takes lists of x and of weights");
	int64_t split = 0, gtype = -1;
	sim_ints(c, 8, "split_item", &split, 1);
	sim_ints(c, 9, "group_type", &gtype, 1);
	SimTensor *gl = opt_tensor(c, 7);
	if (c->r->failed)
		return NULL;
	if (gtype == -1) {
		if (xl->n != wl->n || gl)
			return FAILV("GroupedMatmul without grouping takes as many x as weights and no group_list");
		SimValue *t = sim_val_tuple(c->r, xl->n);
		for (uint32_t k = 0; k < xl->n; k++) {
			SimTensor *x = list_elem(xl, k), *w = list_elem(wl, k);
			if (!x || !w || x->ndim < 2 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[0])
				return FAILV("GroupedMatmul pair %u: x (.., K) and weight (K, N) do not fit", k);
			int64_t K = w->shape[0], N = w->shape[1], rows = K ? x->numel / K : 0, d[MAX_RANK];
			memcpy(d, x->shape, (size_t)x->ndim * sizeof *d);
			d[x->ndim - 1] = N;
			SimTensor *y = sim_tensor_new(c->r, x->dtype, x->ndim, d);
			if (!y)
				return NULL;
			sim_gemm(0, 0, rows, N, K, x->data, K, w->data, N, NULL, y->data, N);
			t->elems[k] = sim_val_tensor(c->r, y);
		}
		return t;
	}
	SimTensor *x = list_elem(xl, 0);
	if (!gl || gl->ndim != 1 || x->ndim != 2 || (gtype != 0 && gtype != 2))
		return FAILV("grouped GroupedMatmul takes a 2-D x, a 1-D group_list and group_type 0 or 2");
	int64_t M = x->shape[0], Kx = x->shape[1], E = gl->numel, lim = gtype == 0 ? M : Kx;
	for (int64_t i = 0; i < E; i++) {
		int64_t lo = i ? (int64_t)gl->data[i - 1] : 0, hi = (int64_t)gl->data[i];
		if (hi < lo || hi > lim)
			return FAILV(
			    "GroupedMatmul group_list[%lld] = %lld: the cumulative counts must not decrease nor "
			    "pass %lld",
			    (long long)i, (long long)hi, (long long)lim);
	}
	SimValue *t = sim_val_tuple(c->r, 1);
	if (gtype == 2) {
		SimTensor *w = list_elem(wl, 0);
		if (wl->n != 1 || !w || w->ndim != 2 || w->shape[0] != Kx)
			return FAILV("GroupedMatmul group_type 2 takes one (%lld, N) weight", (long long)Kx);
		int64_t N = w->shape[1], d[3] = {E, M, N};
		SimTensor *y = sim_tensor_new(c->r, x->dtype, 3, d);
		if (!y)
			return NULL;
		for (int64_t g = 0; g < E; g++) {
			int64_t lo = g ? (int64_t)gl->data[g - 1] : 0, hi = (int64_t)gl->data[g];
			sim_gemm(0, 0, M, N, hi - lo, x->data + lo, Kx, w->data + lo * N, N, NULL, y->data + g * M * N, N);
		}
		t->elems[0] = sim_val_tensor(c->r, y);
		return t;
	}
	SimTensor *w0 = list_elem(wl, 0);
	int stacked = wl->n == 1 && w0->ndim == 3;
	if (stacked ? w0->shape[0] != E || w0->shape[1] != Kx : wl->n != (uint32_t)E)
		return FAILV("GroupedMatmul: the weights do not fit %lld groups of %lld columns", (long long)E,
		             (long long)Kx);
	int64_t N = w0->shape[w0->ndim - 1], d[2] = {M, N};
	SimTensor *y = sim_tensor_new(c->r, x->dtype, 2, d);
	if (!y)
		return NULL;
	memset(y->data, 0, (size_t)y->numel * sizeof *y->data);
	for (int64_t g = 0; g < E; g++) {
		SimTensor *w = stacked ? w0 : list_elem(wl, (uint32_t)g);
		if (!w || (!stacked && (w->ndim != 2 || w->shape[0] != Kx || w->shape[1] != N)))
			return FAILV("GroupedMatmul weight %lld is not (%lld, %lld)", (long long)g, (long long)Kx,
			             (long long)N);
		const float *wd = stacked ? w->data + g * Kx * N : w->data;
		int64_t lo = g ? (int64_t)gl->data[g - 1] : 0, hi = (int64_t)gl->data[g];
		sim_gemm(0, 0, hi - lo, N, Kx, x->data + lo * Kx, Kx, wd, N, NULL, y->data + lo * N, N);
	}
	t->elems[0] = sim_val_tensor(c->r, y);
	return t;
}
