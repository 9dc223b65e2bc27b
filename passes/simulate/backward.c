/* backward.c - semantics of the operators of the training step that the
 * forward operator table has no family for: the gradient operators the
 * autodiff emits (training-step.md §6 and §2.1), the few forward helpers it
 * uses (Slice, BroadcastTo, SumExt, Sign, ...), and the optimizer updates
 * with their in-place writes (§3.1, §1.4).
 *
 * They are found by name (sim_named_kernel), so a kernel works whether the
 * operator table knows the primitive or not; interp.c asks before it looks
 * at the operator's family.  Operand orders are the spec's, which are
 * MindSpore's: the C++ bprop expanders in mindspore/ops/grad/grad_*_ops.cc
 * and the optimizer primitives of python/mindspore/ops/operations/nn_ops.py.
 *
 * In-place writes (Ref): an optimizer op, Assign and AssignAdd name the
 * Parameters they write as operands (§1.4).  The kernel computes the new
 * values into new tensors (tensors are never written after creation) and
 * rebinds the parameter (sim_write_ref in interp.c): later reads see the new
 * value, values read before keep the old one.
 */
#include <math.h>
#include <string.h>

#include "simint.h"

#define FAILV(...) (sim_fail(c, __VA_ARGS__), (SimValue *)NULL)
/* an operand position no operator has: sim_flag/sim_float read the attribute */
#define ATTR_ONLY 99

static SimTensor *like(Ctx *c, const SimTensor *x)
{
	return sim_tensor_new(c->r, SD_F32, x->ndim, x->shape);
}

/* operands i and j: two tensors of one shape */
static int same_pair(Ctx *c, uint32_t i, uint32_t j, SimTensor **a, SimTensor **b)
{
	*a = sim_arg_tensor(c, i);
	*b = *a ? sim_arg_tensor(c, j) : NULL;
	if (!*b)
		return -1;
	if (!sim_same_shape(*b, (*a)->ndim, (*a)->shape)) {
		char x[160], y[160];
		sim_fmt_shape(x, sizeof x, (*a)->ndim, (*a)->shape);
		sim_fmt_shape(y, sizeof y, (*b)->ndim, (*b)->shape);
		return sim_fail(c, "operands %u and %u have shapes %s and %s", i, j, x, y);
	}
	return 0;
}

/* ------------------------------------------------ activation gradients */
static double sigm(double x)
{
	return 1 / (1 + exp(-x));
}

/* d/dx of the tanh form of GeLU that interp.c computes */
static double gelu_d(double x)
{
	const double k = 0.7978845608028654, a = 0.044715;
	double t = tanh(k * (x + a * x * x * x));
	return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x);
}

/* FastGeLU(x) = x / (1 + exp(-1.702 |x|)) exp(0.851 (x - |x|)), which is
 * x sigmoid(1.702 x) on both sides of 0 */
static double fast_gelu_d(double x)
{
	double s = sigm(1.702 * x);
	return s + 1.702 * x * s * (1 - s);
}

typedef enum {
	G_RELU,
	G_RELU6,
	G_GELU,
	G_FASTGELU,
	G_SILU,
	G_SIGMOID,
	G_TANH,
	G_SOFTPLUS,
	G_SQRT,
	G_RSQRT,
	G_RECIP
} GradKind;

/* g: the incoming gradient; v: the operand the rule reads (x or y) */
static double act_grad(int kind, double g, double v)
{
	switch (kind) {
	case G_RELU: /* ReluGrad(g, y) */
		return v > 0 ? g : 0;
	case G_RELU6: /* ReLU6Grad(g, x) */
		return v > 0 && v < 6 ? g : 0;
	case G_GELU: /* GeLUGrad(g, x, y) */
		return g * gelu_d(v);
	case G_FASTGELU: /* FastGeLUGrad(g, x) */
		return g * fast_gelu_d(v);
	case G_SILU: { /* SiLUGrad(g, x) */
		double s = sigm(v);
		return g * s * (1 + v * (1 - s));
	}
	case G_SIGMOID: /* SigmoidGrad(y, g) */
		return g * v * (1 - v);
	case G_TANH: /* TanhGrad(y, g) */
		return g * (1 - v * v);
	case G_SOFTPLUS: /* SoftplusGrad(g, x) */
		return g * sigm(v);
	case G_SQRT: /* SqrtGrad(y, g) */
		return g / (2 * v);
	case G_RSQRT: /* RsqrtGrad(y, g) */
		return -0.5 * g * v * v * v;
	default: /* ReciprocalGrad(y, g) */
		return -g * v * v;
	}
}

/* an element-wise rule on (g, v), g at operand gi and v at operand vi */
static SimValue *act(Ctx *c, int kind, uint32_t gi, uint32_t vi)
{
	SimTensor *g, *v;
	if (same_pair(c, gi, vi, &g, &v) < 0)
		return NULL;
	SimTensor *o = like(c, g);
	if (!o)
		return NULL;
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)act_grad(kind, g->data[i], v->data[i]);
	return sim_val_tensor(c->r, o);
}

static SimValue *k_relu_grad(Ctx *c)
{
	return act(c, G_RELU, 0, 1);
}
static SimValue *k_relu6_grad(Ctx *c)
{
	return act(c, G_RELU6, 0, 1);
}
static SimValue *k_gelu_grad(Ctx *c)
{
	return act(c, G_GELU, 0, 1);
}
static SimValue *k_fast_gelu_grad(Ctx *c)
{
	return act(c, G_FASTGELU, 0, 1);
}
static SimValue *k_silu_grad(Ctx *c)
{
	return act(c, G_SILU, 0, 1);
}
static SimValue *k_sigmoid_grad(Ctx *c)
{
	return act(c, G_SIGMOID, 1, 0);
}
static SimValue *k_tanh_grad(Ctx *c)
{
	return act(c, G_TANH, 1, 0);
}
static SimValue *k_softplus_grad(Ctx *c)
{
	return act(c, G_SOFTPLUS, 0, 1);
}
static SimValue *k_sqrt_grad(Ctx *c)
{
	return act(c, G_SQRT, 1, 0);
}
static SimValue *k_rsqrt_grad(Ctx *c)
{
	return act(c, G_RSQRT, 1, 0);
}
static SimValue *k_reciprocal_grad(Ctx *c)
{
	return act(c, G_RECIP, 1, 0);
}

/* DropoutGrad(g, mask): the forward simulates Dropout as the identity with
 * an all-ones mask, so its gradient is g * mask (keep_prob is not applied
 * on either side) */
static SimValue *k_dropout_grad(Ctx *c)
{
	SimTensor *g, *m;
	if (same_pair(c, 0, 1, &g, &m) < 0)
		return NULL;
	SimTensor *o = like(c, g);
	if (!o)
		return NULL;
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = g->data[i] * m->data[i];
	return sim_val_tensor(c->r, o);
}

/* SigmoidCrossEntropyWithLogitsGrad(x, y, g) = (sigmoid(x) - y) g */
static SimValue *k_sigmoid_ce_grad(Ctx *c)
{
	SimTensor *x, *y, *g;
	if (same_pair(c, 0, 1, &x, &y) < 0 || same_pair(c, 0, 2, &x, &g) < 0)
		return NULL;
	SimTensor *o = like(c, x);
	if (!o)
		return NULL;
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)((sigm(x->data[i]) - y->data[i]) * g->data[i]);
	return sim_val_tensor(c->r, o);
}

static SimValue *k_sign(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	SimTensor *o = x ? sim_tensor_new(c->r, x->dtype, x->ndim, x->shape) : NULL;
	if (!o)
		return NULL;
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)((x->data[i] > 0) - (x->data[i] < 0));
	return sim_val_tensor(c->r, o);
}

/* GreaterEqual / LessEqual (the Maximum/Minimum bprops' masks) */
static SimValue *compare2(Ctx *c, int ge)
{
	SimTensor *in[2];
	int nd;
	int64_t shape[MAX_RANK], st[2][MAX_RANK], idx[MAX_RANK] = {0}, off[2] = {0};
	if (!(in[0] = sim_arg_tensor(c, 0)) || !(in[1] = sim_arg_tensor(c, 1)))
		return NULL;
	if (sim_broadcast(c, 2, in, &nd, shape, st) < 0)
		return NULL;
	SimTensor *o = sim_tensor_new(c->r, SD_BOOL, nd, shape);
	if (!o)
		return NULL;
	for (int64_t i = 0; i < o->numel; i++) {
		float x = in[0]->data[off[0]], y = in[1]->data[off[1]];
		o->data[i] = ge ? x >= y : x <= y;
		for (int d = nd - 1; d >= 0; d--) {
			off[0] += st[0][d];
			off[1] += st[1][d];
			if (++idx[d] < shape[d])
				break;
			off[0] -= st[0][d] * shape[d];
			off[1] -= st[1][d] * shape[d];
			idx[d] = 0;
		}
	}
	return sim_val_tensor(c->r, o);
}

static SimValue *k_greater_equal(Ctx *c)
{
	return compare2(c, 1);
}
static SimValue *k_less_equal(Ctx *c)
{
	return compare2(c, 0);
}

/* MaximumGrad(x, y, dout) -> (dx, dy), MinimumGrad likewise: dout goes to
 * x where x wins strictly, else to y (mindspore/ccsrc/plugin/device/cpu/
 * kernel/maximum_grad_cpu_kernel.cc), summed over broadcast dimensions */
static SimValue *minmax_grad(Ctx *c, int isMax)
{
	SimTensor *in[3];
	int nd;
	int64_t shape[MAX_RANK], st[3][MAX_RANK], idx[MAX_RANK] = {0}, off[3] = {0};
	for (uint32_t k = 0; k < 3; k++)
		if (!(in[k] = sim_arg_tensor(c, k)))
			return NULL;
	if (sim_broadcast(c, 3, in, &nd, shape, st) < 0)
		return NULL;
	if (!sim_same_shape(in[2], nd, shape))
		return FAILV("dout does not have the broadcast shape of x and y");
	SimTensor *dx = like(c, in[0]), *dy = dx ? like(c, in[1]) : NULL;
	if (!dy)
		return NULL;
	int64_t n = in[2]->numel;
	for (int64_t i = 0; i < n; i++) {
		float x = in[0]->data[off[0]], y = in[1]->data[off[1]];
		if (isMax ? x > y : x < y)
			dx->data[off[0]] += in[2]->data[i];
		else
			dy->data[off[1]] += in[2]->data[i];
		sim_bcast_next(nd, shape, idx, st, off, 0, 2);
	}
	return sim_tuple2(c, dx, dy);
}

static SimValue *k_maximum_grad(Ctx *c)
{
	return minmax_grad(c, 1);
}
static SimValue *k_minimum_grad(Ctx *c)
{
	return minmax_grad(c, 0);
}

/* ----------------------------------------------------- softmax family */
static int axis_operand(Ctx *c, uint32_t i, const char *key, int ndim, int *ax)
{
	int64_t v[MAX_RANK];
	int k = sim_ints(c, i, key, v, MAX_RANK);
	if (k <= 0)
		v[0] = -1;
	else if (k != 1)
		return sim_fail(c, "a softmax gradient over %d axes is not simulated", k);
	return sim_axis(c, v[0], ndim, ax);
}

/* SoftmaxBackward(g, y, dim): y (g - sum(g y)); LogSoftmaxGrad(y, g, axis):
 * g - exp(y) sum(g), both along the axis */
static SimValue *softmax_grad(Ctx *c, int logv)
{
	SimTensor *g, *y;
	int ax;
	if (same_pair(c, logv ? 1 : 0, logv ? 0 : 1, &g, &y) < 0 ||
	    axis_operand(c, 2, logv ? "axis" : "dim", g->ndim, &ax) < 0)
		return NULL;
	SimTensor *o = like(c, g);
	if (!o)
		return NULL;
	int64_t outer, inner, n = g->ndim ? g->shape[ax] : 1;
	sim_around(g, ax, &outer, &inner);
	for (int64_t a = 0; a < outer; a++)
		for (int64_t b = 0; b < inner; b++) {
			int64_t base = a * n * inner + b;
			double s = 0;
			for (int64_t j = 0; j < n; j++)
				s += logv ? g->data[base + j * inner]
				          : (double)g->data[base + j * inner] * y->data[base + j * inner];
			for (int64_t j = 0; j < n; j++) {
				int64_t i = base + j * inner;
				o->data[i] =
				    (float)(logv ? g->data[i] - exp(y->data[i]) * s : y->data[i] * (g->data[i] - s));
			}
		}
	return sim_val_tensor(c->r, o);
}

static SimValue *k_softmax_backward(Ctx *c)
{
	return softmax_grad(c, 0);
}
static SimValue *k_log_softmax_grad(Ctx *c)
{
	return softmax_grad(c, 1);
}

/* --------------------------------------------------------------- norms */
static SimValue *tuple3(Ctx *c, SimTensor *a, SimTensor *b, SimTensor *d)
{
	if (!a || !b || !d)
		return NULL;
	SimValue *t = sim_val_tuple(c->r, 3);
	t->elems[0] = sim_val_tensor(c->r, a);
	t->elems[1] = sim_val_tensor(c->r, b);
	t->elems[2] = sim_val_tensor(c->r, d);
	return t;
}

/* LayerNormGrad(x, dy, rstd, mean, gamma, begin_norm_axis,
 * begin_params_axis) -> (dx, dgamma, dbeta).  rstd and mean are the
 * LayerNorm's outputs 2 and 1 (training-step.md §6), which the simulator's
 * LayerNorm computes as 1/sqrt(var + eps) and the mean of each row. */
static SimValue *k_layer_norm_grad(Ctx *c)
{
	SimTensor *x, *dy, *rstd, *mean, *gm;
	int64_t bnv = 1, bpv = 1, rows, cols, gsz = 1;
	int bn, bp;
	if (same_pair(c, 0, 1, &x, &dy) < 0 || !(rstd = sim_arg_tensor(c, 2)) || !(mean = sim_arg_tensor(c, 3)) ||
	    !(gm = sim_arg_tensor(c, 4)))
		return NULL;
	if (sim_ints(c, 5, "begin_norm_axis", &bnv, 1) < 0)
		bnv = 1;
	if (sim_ints(c, 6, "begin_params_axis", &bpv, 1) < 0)
		bpv = 1;
	if (sim_axis(c, bnv, x->ndim, &bn) < 0 || sim_axis(c, bpv, x->ndim, &bp) < 0)
		return NULL;
	sim_around(x, bn, &rows, &cols);
	cols = x->numel / (rows ? rows : 1);
	for (int i = bp; i < x->ndim; i++)
		gsz *= x->shape[i];
	if (rstd->numel != rows || mean->numel != rows || gm->numel != gsz)
		return FAILV("mean and rstd need %lld elements and gamma %lld", (long long)rows, (long long)gsz);
	SimTensor *dx = like(c, x), *dg = dx ? like(c, gm) : NULL, *db = dg ? like(c, gm) : NULL;
	if (!db)
		return NULL;
	double *ag = xcalloc((size_t)(gsz ? gsz : 1), sizeof *ag), *ab = xcalloc((size_t)(gsz ? gsz : 1), sizeof *ab);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x->data + r * cols, *gr = dy->data + r * cols;
		double mu = mean->data[r], rs = rstd->data[r], s1 = 0, s2 = 0;
		for (int64_t j = 0; j < cols; j++) {
			int64_t gi = (r * cols + j) % gsz;
			double xh = (xr[j] - mu) * rs, gh = gr[j] * (double)gm->data[gi];
			ag[gi] += gr[j] * xh;
			ab[gi] += gr[j];
			s1 += gh;
			s2 += gh * xh;
		}
		for (int64_t j = 0; j < cols; j++) {
			int64_t gi = (r * cols + j) % gsz;
			double xh = (xr[j] - mu) * rs, gh = gr[j] * (double)gm->data[gi];
			dx->data[r * cols + j] = (float)(rs * (gh - s1 / (double)cols - xh * s2 / (double)cols));
		}
	}
	for (int64_t i = 0; i < gsz; i++) {
		dg->data[i] = (float)ag[i];
		db->data[i] = (float)ab[i];
	}
	free(ag);
	free(ab);
	return tuple3(c, dx, dg, db);
}

/* RmsNormGrad(dy, x, rstd, gamma) -> (dx, dgamma) */
static SimValue *k_rms_norm_grad(Ctx *c)
{
	SimTensor *dy, *x, *rstd, *gm;
	if (same_pair(c, 0, 1, &dy, &x) < 0 || !(rstd = sim_arg_tensor(c, 2)) || !(gm = sim_arg_tensor(c, 3)))
		return NULL;
	int64_t cols = gm->numel, rows = cols ? x->numel / cols : 0;
	if (!cols || rows * cols != x->numel || rstd->numel != rows)
		return FAILV("gamma has %lld elements and rstd %lld for an input of %lld", (long long)cols,
		             (long long)rstd->numel, (long long)x->numel);
	SimTensor *dx = like(c, x), *dg = dx ? like(c, gm) : NULL;
	if (!dg)
		return NULL;
	double *ag = xcalloc((size_t)cols, sizeof *ag);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x->data + r * cols, *gr = dy->data + r * cols;
		double rs = rstd->data[r], s = 0;
		for (int64_t j = 0; j < cols; j++) {
			ag[j] += gr[j] * (double)xr[j] * rs;
			s += gr[j] * (double)gm->data[j] * xr[j];
		}
		for (int64_t j = 0; j < cols; j++)
			dx->data[r * cols + j] =
			    (float)(rs * gr[j] * gm->data[j] - rs * rs * rs * xr[j] * s / (double)cols);
	}
	for (int64_t j = 0; j < cols; j++)
		dg->data[j] = (float)ag[j];
	free(ag);
	return sim_tuple2(c, dx, dg);
}

/* BatchNormGrad(g, x, scale, saved_mean, saved_var, reserve, is_training,
 * epsilon, format) -> (dx, dscale, doffset); saved_var is the variance the
 * simulator's BatchNorm returns.  Training: the batch statistics' own
 * gradient; inference: the statistics are constants. */
static SimValue *k_batch_norm_grad(Ctx *c)
{
	SimTensor *g, *x, *sc, *mu, *var;
	if (same_pair(c, 0, 1, &g, &x) < 0 || !(sc = sim_arg_tensor(c, 2)) || !(mu = sim_arg_tensor(c, 3)) ||
	    !(var = sim_arg_tensor(c, 4)))
		return NULL;
	if (x->ndim < 2)
		return FAILV("BatchNormGrad needs an input of rank >= 2");
	int64_t C = x->shape[1], outer = x->shape[0], inner = x->numel / (outer * C > 0 ? outer * C : 1);
	if (sc->numel != C || mu->numel != C || var->numel != C)
		return FAILV("scale, mean and variance need %lld elements", (long long)C);
	int train = sim_flag(c, 6, "is_training", NULL, 1);
	double eps = sim_float(c, 7, "epsilon", 1e-5), cnt = (double)(outer * inner);
	SimTensor *dx = like(c, x), *ds = dx ? like(c, sc) : NULL, *db = ds ? like(c, sc) : NULL;
	if (!db)
		return NULL;
	for (int64_t ch = 0; ch < C; ch++) {
		double rs = 1 / sqrt(var->data[ch] + eps), sg = 0, sgx = 0;
		for (int64_t a = 0; a < outer; a++)
			for (int64_t b = 0; b < inner; b++) {
				int64_t i = (a * C + ch) * inner + b;
				sg += g->data[i];
				sgx += g->data[i] * (x->data[i] - mu->data[ch]) * rs;
			}
		ds->data[ch] = (float)sgx;
		db->data[ch] = (float)sg;
		for (int64_t a = 0; a < outer; a++)
			for (int64_t b = 0; b < inner; b++) {
				int64_t i = (a * C + ch) * inner + b;
				double xh = (x->data[i] - mu->data[ch]) * rs, d = g->data[i];
				if (train)
					d -= (sg + xh * sgx) / cnt;
				dx->data[i] = (float)(sc->data[ch] * rs * d);
			}
	}
	return tuple3(c, dx, ds, db);
}

/* the channel count and the sizes around it of a BatchNorm input (NCHW) */
static int bn_dims(Ctx *c, const SimTensor *x, int64_t *C, int64_t *outer, int64_t *inner)
{
	if (x->ndim < 2) {
		sim_fail(c, "needs an input of rank >= 2");
		return -1;
	}
	*C = x->shape[1];
	*outer = x->shape[0];
	*inner = x->numel / (*outer * *C > 0 ? *outer * *C : 1);
	return 0;
}

/* operands from i on: per-channel vectors of C elements */
static int bn_channels(Ctx *c, uint32_t i, int k, int64_t C, SimTensor **v)
{
	for (int j = 0; j < k; j++) {
		if (!(v[j] = sim_arg_tensor(c, i + (uint32_t)j)))
			return -1;
		if (v[j]->numel != C) {
			sim_fail(c, "operand %u has %lld elements for %lld channels", i + (unsigned)j,
			         (long long)v[j]->numel, (long long)C);
			return -1;
		}
	}
	return 0;
}

/* BNTrainingUpdateGrad(dy, x, mean, var, epsilon) -> (sum dy*x_hat, sum
 * dy) per channel over this rank's batch (the first half of a batch-split
 * BatchNorm's bprop; autodiff.c, bp_sync_batchnorm) */
static SimValue *k_bn_update_grad(Ctx *c)
{
	SimTensor *g, *x, *v[2];
	int64_t C, outer, inner;
	if (same_pair(c, 0, 1, &g, &x) < 0 || bn_dims(c, x, &C, &outer, &inner) < 0 || bn_channels(c, 2, 2, C, v) < 0)
		return NULL;
	double eps = sim_float(c, ATTR_ONLY, "epsilon", 1e-5);
	SimTensor *ds = sim_tensor_new(c->r, SD_F32, 1, &C), *db = ds ? sim_tensor_new(c->r, SD_F32, 1, &C) : NULL;
	if (!db)
		return NULL;
	for (int64_t ch = 0; ch < C; ch++) {
		double rs = 1 / sqrt(v[1]->data[ch] + eps), sg = 0, sgx = 0;
		for (int64_t a = 0; a < outer; a++)
			for (int64_t b = 0; b < inner; b++) {
				int64_t i = (a * C + ch) * inner + b;
				sg += g->data[i];
				sgx += g->data[i] * (x->data[i] - v[0]->data[ch]) * rs;
			}
		ds->data[ch] = (float)sgx;
		db->data[ch] = (float)sg;
	}
	return sim_tuple2(c, ds, db);
}

/* BNTrainingReduceGrad(dy, x, dscale, doffset, scale, mean, var, epsilon)
 * -> dx = scale * rstd * (dy - (doffset + x_hat * dscale) / count), count
 * this rank's elements per channel: dscale and doffset are the group's
 * sums over the group size, so that is the whole batch's mean */
static SimValue *k_bn_reduce_grad(Ctx *c)
{
	SimTensor *g, *x, *v[5];
	int64_t C, outer, inner;
	if (same_pair(c, 0, 1, &g, &x) < 0 || bn_dims(c, x, &C, &outer, &inner) < 0 || bn_channels(c, 2, 5, C, v) < 0)
		return NULL;
	double eps = sim_float(c, ATTR_ONLY, "epsilon", 1e-5), cnt = (double)(outer * inner);
	SimTensor *dx = like(c, x);
	if (!dx)
		return NULL;
	for (int64_t ch = 0; ch < C; ch++) {
		double rs = 1 / sqrt(v[4]->data[ch] + eps), ds = v[0]->data[ch], db = v[1]->data[ch];
		for (int64_t a = 0; a < outer; a++)
			for (int64_t b = 0; b < inner; b++) {
				int64_t i = (a * C + ch) * inner + b;
				double xh = (x->data[i] - v[3]->data[ch]) * rs;
				dx->data[i] = (float)(v[2]->data[ch] * rs * (g->data[i] - (db + xh * ds) / cnt));
			}
	}
	return sim_val_tensor(c->r, dx);
}

/* BiasAddGrad(g, format): g summed over every axis but the channel axis
 * (1, or the last for NHWC) */
static SimValue *k_bias_add_grad(Ctx *c)
{
	SimTensor *g = sim_arg_tensor(c, 0);
	if (!g)
		return NULL;
	const Value *fv = c->n->nargs > 1 && c->n->args[1].kind == V_STR ? &c->n->args[1] : NULL;
	const char *fmt = fv ? sym_str(fv->text) : sim_attr_str(c->n, "format");
	if (!fmt)
		fmt = sim_attr_str(c->n, "data_format");
	int64_t fcode;
	if (!fv && sim_ints(c, 1, NULL, &fcode, 1) == 1) /* the format as its enum: NCHW 0, NHWC 1 */
		fmt = fcode == 1 ? "NHWC" : "NCHW";
	int ch = g->ndim < 2 ? 0 : fmt && strcmp(fmt, "NHWC") == 0 ? g->ndim - 1 : 1;
	if (g->ndim == 0)
		return FAILV("BiasAddGrad needs a tensor of rank >= 1");
	int64_t outer, inner, n = g->shape[ch];
	sim_around(g, ch, &outer, &inner);
	SimTensor *o = sim_tensor_new(c->r, SD_F32, 1, &n);
	if (!o)
		return NULL;
	double *acc = xcalloc((size_t)(n ? n : 1), sizeof *acc);
	for (int64_t a = 0; a < outer; a++)
		for (int64_t j = 0; j < n; j++)
			for (int64_t b = 0; b < inner; b++)
				acc[j] += g->data[(a * n + j) * inner + b];
	for (int64_t j = 0; j < n; j++)
		o->data[j] = (float)acc[j];
	free(acc);
	return sim_val_tensor(c->r, o);
}

/* ------------------------------------------------------ LLM operators */
/* RotaryPositionEmbeddingGrad(dy, cos, sin, x, mode) -> (dx, dcos, dsin),
 * the derivative of k_rope (kernels.c): with out_e = x_e cos_e +
 * sign_e x_p(e) sin_e (p(e) the partner of e in the rotation),
 *   dx_e += dy_e cos_e,  dx_p(e) += sign_e dy_e sin_e,
 *   dcos_e += dy_e x_e,  dsin_e += sign_e dy_e x_p(e)
 * dcos and dsin summed over the axes cos and sin are broadcast along. */
static SimValue *k_rope_grad(Ctx *c)
{
	SimTensor *in[3], *dy, *x; /* x, cos, sin in the forward's order */
	if (same_pair(c, 0, 3, &dy, &x) < 0 || !(in[1] = sim_arg_tensor(c, 1)) || !(in[2] = sim_arg_tensor(c, 2)))
		return NULL;
	in[0] = x;
	int nd;
	int64_t mode, shape[MAX_RANK], st[3][MAX_RANK];
	if (sim_rope_operands(c, in, 4, &mode, &nd, shape, st) < 0)
		return NULL;
	int64_t D = x->shape[nd - 1];
	SimTensor *dx = like(c, x), *dc = dx ? like(c, in[1]) : NULL, *dsn = dc ? like(c, in[2]) : NULL;
	if (!dsn)
		return NULL;
	double *ax = xcalloc((size_t)(x->numel ? x->numel : 1), sizeof *ax);
	double *acc[3] = {ax, xcalloc((size_t)(dc->numel ? dc->numel : 1), sizeof(double)),
	                  xcalloc((size_t)(dsn->numel ? dsn->numel : 1), sizeof(double))};
	const float *cs = in[1]->data, *sn = in[2]->data;
	int64_t idx[MAX_RANK] = {0}, off[3] = {0};
	for (int64_t e = 0; e < x->numel; e++) {
		int64_t i = idx[nd - 1], p;
		double sign, g = dy->data[e];
		sign = sim_rope_partner(mode, i, D, e, &p);
		ax[e] += g * cs[off[1]];
		ax[p] += sign * g * sn[off[2]];
		acc[1][off[1]] += g * x->data[e];
		acc[2][off[2]] += sign * g * x->data[p];
		sim_bcast_next(nd, shape, idx, st, off, 1, 3);
	}
	SimTensor *out[3] = {dx, dc, dsn};
	for (int k = 0; k < 3; k++) {
		for (int64_t e = 0; e < out[k]->numel; e++)
			out[k]->data[e] = (float)acc[k][e];
		free(acc[k]);
	}
	return tuple3(c, dx, dc, dsn);
}

/* SwigluGrad(dy, x, dim) -> dx, the derivative of k_swiglu (kernels.c):
 * with a, b the halves of x along dim and y = a sigmoid(a) b,
 *   da = dy b sigmoid(a) (1 + a (1 - sigmoid(a))),  db = dy a sigmoid(a) */
static SimValue *k_swiglu_grad(Ctx *c)
{
	SimTensor *dy = sim_arg_tensor(c, 0), *x = dy ? sim_arg_tensor(c, 1) : NULL;
	int64_t outer, inner, sh[MAX_RANK];
	int a;
	if (!x || sim_swiglu_halves(c, x, 2, &a, sh) < 0)
		return NULL;
	if (!sim_same_shape(dy, x->ndim, sh))
		return FAILV("dy must have the shape of Swiglu's output");
	SimTensor *dx = like(c, x);
	if (!dx)
		return NULL;
	sim_around(x, a, &outer, &inner);
	int64_t h = sh[a];
	for (int64_t i = 0; i < outer; i++)
		for (int64_t j = 0; j < h; j++)
			for (int64_t l = 0; l < inner; l++) {
				int64_t ia = (i * 2 * h + j) * inner + l, ib = (i * 2 * h + h + j) * inner + l;
				double u = x->data[ia], w = x->data[ib], g = dy->data[(i * h + j) * inner + l],
				       s = sigm(u);
				dx->data[ia] = (float)(g * w * s * (1 + u * (1 - s)));
				dx->data[ib] = (float)(g * u * s);
			}
	return sim_val_tensor(c->r, dx);
}

/* ------------------------------------------- PReLU and L2Normalize */
/* PReLUGrad(dy, x, w) -> (dx, dw), the derivatives of k_prelu (kernels.c):
 * dx = dy where x > 0, else w[channel] dy; dw[channel] = the sum of dy x
 * over the channel's elements with x <= 0 (all elements for one slope) */
static SimValue *k_prelu_grad(Ctx *c)
{
	SimTensor *g, *x, *w;
	int64_t outer, inner;
	if (same_pair(c, 0, 1, &g, &x) < 0 || !(w = sim_arg_tensor(c, 2)))
		return NULL;
	if (x->ndim < 2 || w->ndim != 1 || (w->shape[0] != 1 && w->shape[0] != x->shape[1]))
		return FAILV("PReLU weight must have one slope or one per channel");
	SimTensor *dx = like(c, x), *dw = dx ? like(c, w) : NULL;
	if (!dw)
		return NULL;
	int64_t nw = w->shape[0];
	double *acc = xcalloc((size_t)nw, sizeof *acc);
	sim_around(x, 1, &outer, &inner);
	for (int64_t e = 0; e < x->numel; e++) {
		int64_t k = nw == 1 ? 0 : e / inner % x->shape[1];
		double y = x->data[e], gi = g->data[e];
		if (y > 0) {
			dx->data[e] = (float)gi;
		} else {
			dx->data[e] = (float)(w->data[k] * gi);
			acc[k] += gi * y;
		}
	}
	for (int64_t k = 0; k < nw; k++)
		dw->data[k] = (float)acc[k];
	free(acc);
	return sim_tuple2(c, dx, dw);
}

/* L2NormalizeGrad(x, y, dy) with the forward's axis and epsilon
 * attributes, the derivative of k_l2normalize (kernels.c): with
 * n = sqrt(max(sum x^2, epsilon)) along the axis and y = x / n,
 * dx = (dy - y sum(dy y)) / n where sum x^2 > epsilon, else dy / n (n is
 * then the constant sqrt(epsilon)).  y is recomputed from x in double. */
static SimValue *k_l2normalize_grad(Ctx *c)
{
	SimTensor *x, *y, *g;
	int64_t ax[MAX_RANK], outer, inner;
	int a;
	if (same_pair(c, 0, 1, &x, &y) < 0 || same_pair(c, 0, 2, &x, &g) < 0)
		return NULL;
	int k = sim_ints(c, ATTR_ONLY, "axis", ax, MAX_RANK);
	if (k <= 0) /* the forward's default */
		ax[0] = 0, k = 1;
	if (k != 1)
		return FAILV("L2Normalize over %d axes is not simulated", k);
	if (sim_axis(c, ax[0], x->ndim, &a) < 0)
		return NULL;
	double eps = sim_float(c, ATTR_ONLY, "epsilon", 1e-4);
	SimTensor *dx = like(c, x);
	if (!dx)
		return NULL;
	sim_around(x, a, &outer, &inner);
	int64_t len = x->shape[a];
	for (int64_t i = 0; i < outer; i++)
		for (int64_t l = 0; l < inner; l++) {
			double ss = 0, dot = 0;
			for (int64_t j = 0; j < len; j++) {
				int64_t e = (i * len + j) * inner + l;
				ss += (double)x->data[e] * x->data[e];
				dot += (double)g->data[e] * x->data[e];
			}
			int live = ss > eps;
			double dn = sqrt(live ? ss : eps);
			for (int64_t j = 0; j < len; j++) {
				int64_t e = (i * len + j) * inner + l;
				double v = g->data[e] / dn;
				if (live)
					v -= x->data[e] * dot / (dn * dn * dn);
				dx->data[e] = (float)v;
			}
		}
	return sim_val_tensor(c->r, dx);
}

/* ------------------------------------------------------- shape gradients */
/* StridedSliceGrad(dout, shape, begin, end, strides): dout placed where
 * StridedSlice took it from, zeros elsewhere; masks are the attributes
 * begin_mask ... shrink_axis_mask, normalised as the forward does. */
static SimValue *k_strided_slice_grad(Ctx *c)
{
	SimTensor *g = sim_arg_tensor(c, 0);
	int64_t xs[MAX_RANK], start[MAX_RANK], step[MAX_RANK], cnt[MAX_RANK], oshape[MAX_RANK], st[MAX_RANK];
	int ond;
	if (!g)
		return NULL;
	int nd = sim_ints(c, 1, "shapex", xs, MAX_RANK);
	if (nd < 0)
		return FAILV("no input shape (operand 1)");
	if (sim_slice_window(c, nd, xs, 2, 5, start, step, cnt, &ond, oshape) < 0)
		return NULL;
	int64_t gnum = 1;
	for (int i = 0; i < nd; i++)
		gnum *= cnt[i];
	if (gnum != g->numel)
		return FAILV("the slice has %lld elements but dout has %lld", (long long)gnum, (long long)g->numel);
	SimTensor *o = sim_tensor_new(c->r, g->dtype, nd, xs);
	if (!o)
		return NULL;
	sim_strides(nd, xs, st);
	int64_t idx[MAX_RANK] = {0};
	for (int64_t i = 0; i < g->numel; i++) {
		int64_t off = 0;
		for (int d = 0; d < nd; d++)
			off += (start[d] + idx[d] * step[d]) * st[d];
		o->data[off] = g->data[i];
		for (int d = nd - 1; d >= 0; d--) {
			if (++idx[d] < cnt[d])
				break;
			idx[d] = 0;
		}
	}
	return sim_val_tensor(c->r, o);
}

/* Slice's block of x from operands `at` (begin) and at + 1 (size), a size
 * of -1 running to the end: 0, or -1 with the failure set */
static int slice_block(Ctx *c, const SimTensor *x, int at, int64_t *b, int64_t *sz)
{
	int kb = sim_ints(c, at, "begin", b, MAX_RANK), ks = sim_ints(c, at + 1, "size", sz, MAX_RANK);
	if (kb != x->ndim || ks != x->ndim) {
		sim_fail(c, "begin and size need %d entries", x->ndim);
		return -1;
	}
	for (int i = 0; i < x->ndim; i++) {
		if (sz[i] == -1)
			sz[i] = x->shape[i] - b[i];
		if (b[i] < 0 || sz[i] < 0 || b[i] + sz[i] > x->shape[i]) {
			sim_fail(c, "block [%lld, +%lld) outside dimension %d of size %lld", (long long)b[i],
			         (long long)sz[i], i, (long long)x->shape[i]);
			return -1;
		}
	}
	return 0;
}

/* Slice(x, begin, size): the block; a size of -1 runs to the end */
static SimValue *k_slice(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t b[MAX_RANK], sz[MAX_RANK];
	if (!x)
		return NULL;
	if (slice_block(c, x, 1, b, sz) < 0)
		return NULL;
	return sim_val_tensor(c->r, sim_extract(c->r, x, b, sz));
}

/* SliceGrad(dy, x, begin, size): dy placed where Slice(x, begin, size)
 * took it from, zeros elsewhere (the bprop of Slice in
 * mindspore/ops/grad/grad_array_ops.cc); a size of -1 runs to the end, as
 * in the forward */
static SimValue *k_slice_grad(Ctx *c)
{
	SimTensor *g = sim_arg_tensor(c, 0), *x = g ? sim_arg_tensor(c, 1) : NULL;
	int64_t b[MAX_RANK], sz[MAX_RANK], st[MAX_RANK], gst[MAX_RANK];
	if (!x)
		return NULL;
	if (slice_block(c, x, 2, b, sz) < 0)
		return NULL;
	if (!sim_same_shape(g, x->ndim, sz)) {
		char gs[160], bs[160];
		sim_fmt_shape(gs, sizeof gs, g->ndim, g->shape);
		sim_fmt_shape(bs, sizeof bs, x->ndim, sz);
		return FAILV("dy has shape %s but the block is %s", gs, bs);
	}
	SimTensor *o = like(c, x);
	if (!o)
		return NULL;
	sim_strides(x->ndim, x->shape, st);
	sim_strides(x->ndim, sz, gst);
	for (int64_t i = 0; i < g->numel; i++) {
		int64_t off = 0;
		for (int d = 0; d < x->ndim; d++)
			off += (b[d] + i / gst[d] % sz[d]) * st[d];
		o->data[off] = g->data[i];
	}
	return sim_val_tensor(c->r, o);
}

/* UnsortedSegmentSum(x, ids, num_segments): out[ids[i], ...] += x[i, ...];
 * ids outside [0, num_segments) are dropped (the Gather bprop of a
 * row-split table relies on it for other ranks' rows) */
static SimValue *k_unsorted_segment_sum(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *ids = x ? sim_arg_tensor(c, 1) : NULL;
	int64_t num, d[MAX_RANK];
	if (!ids)
		return NULL;
	if (sim_ints(c, 2, "num_segments", &num, 1) != 1 || num < 0)
		return FAILV("no num_segments");
	if (ids->ndim > x->ndim)
		return FAILV("segment ids of rank %d for data of rank %d", ids->ndim, x->ndim);
	for (int i = 0; i < ids->ndim; i++)
		if (ids->shape[i] != x->shape[i])
			return FAILV("segment ids do not match the leading dimensions of the data");
	int nd = 1 + x->ndim - ids->ndim;
	int64_t inner = 1;
	d[0] = num;
	for (int i = ids->ndim; i < x->ndim; i++)
		inner *= d[1 + i - ids->ndim] = x->shape[i];
	SimTensor *o = sim_tensor_new(c->r, SD_F32, nd, d);
	if (!o)
		return NULL;
	double *acc = xcalloc((size_t)(o->numel ? o->numel : 1), sizeof *acc);
	for (int64_t j = 0; j < ids->numel; j++) {
		int64_t s = (int64_t)ids->data[j];
		if (s < 0 || s >= num)
			continue;
		for (int64_t b = 0; b < inner; b++)
			acc[s * inner + b] += x->data[j * inner + b];
	}
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)acc[i];
	free(acc);
	return sim_val_tensor(c->r, o);
}

/* ScatterNd(indices, updates, shape): a zero tensor of shape, each row of
 * indices (its last dimension D indexes shape's first D dimensions) adding
 * its slice of updates; duplicates add up, rows out of range are dropped */
static SimValue *k_scatter_nd(Ctx *c)
{
	SimTensor *ix = sim_arg_tensor(c, 0), *u = ix ? sim_arg_tensor(c, 1) : NULL;
	int64_t d[MAX_RANK];
	if (!u)
		return NULL;
	int k = sim_ints(c, 2, "shape", d, MAX_RANK);
	if (k < 1 || ix->ndim < 1)
		return FAILV("needs indices of rank at least 1 and a shape");
	int64_t D = ix->shape[ix->ndim - 1];
	if (D < 1 || D > k)
		return FAILV("index depth %lld for a rank-%d shape", (long long)D, k);
	int64_t rows = ix->numel / D, slice = 1;
	for (int i = (int)D; i < k; i++)
		slice *= d[i];
	if (rows * slice != u->numel)
		return FAILV("%lld updates for %lld index rows of %lld elements", (long long)u->numel, (long long)rows,
		             (long long)slice);
	SimTensor *o = sim_tensor_new(c->r, u->dtype, k, d);
	if (!o)
		return NULL;
	double *acc = xcalloc((size_t)(o->numel ? o->numel : 1), sizeof *acc);
	for (int64_t r = 0; r < rows; r++) {
		int64_t off = 0, ok = 1;
		for (int64_t j = 0; j < D; j++) {
			int64_t v = (int64_t)ix->data[r * D + j];
			ok &= v >= 0 && v < d[j];
			off = off * d[j] + v;
		}
		if (!ok)
			continue;
		for (int64_t b = 0; b < slice; b++)
			acc[off * slice + b] += u->data[r * slice + b];
	}
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)acc[i];
	free(acc);
	return sim_val_tensor(c->r, o);
}

/* BroadcastTo(x, shape): numpy broadcasting to the target; -1 keeps x's
 * dimension */
static SimValue *k_broadcast_to(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t d[MAX_RANK], st[MAX_RANK], idx[MAX_RANK] = {0};
	if (!x)
		return NULL;
	int k = sim_ints(c, 1, "shape", d, MAX_RANK);
	if (k < x->ndim)
		return FAILV("target shape has %d dimensions for a rank-%d input", k, x->ndim);
	int lead = k - x->ndim;
	int64_t s = 1;
	for (int i = k - 1; i >= 0; i--) {
		int64_t xd = i < lead ? 1 : x->shape[i - lead];
		if (d[i] == -1)
			d[i] = xd;
		if (xd != 1 && xd != d[i])
			return FAILV("dimension %d of size %lld does not broadcast to %lld", i, (long long)xd,
			             (long long)d[i]);
		st[i] = xd == 1 ? 0 : s;
		s *= xd;
	}
	SimTensor *o = sim_tensor_new(c->r, x->dtype, k, d);
	if (!o)
		return NULL;
	for (int64_t i = 0; i < o->numel; i++) {
		int64_t off = 0;
		for (int j = 0; j < k; j++)
			off += idx[j] * st[j];
		o->data[i] = x->data[off];
		for (int j = k - 1; j >= 0; j--) {
			if (++idx[j] < d[j])
				break;
			idx[j] = 0;
		}
	}
	return sim_val_tensor(c->r, o);
}

/* ScalarToTensor(x, dtype): a 0-D tensor of the scalar */
static SimValue *k_scalar_to_tensor(Ctx *c)
{
	SimValue *v = sim_arg(c, 0);
	if (!v)
		return NULL;
	if (v->kind != SV_TENSOR || v->t->numel != 1)
		return FAILV("operand 0 is not a scalar");
	SimTensor *o = sim_tensor_new(c->r, sim_out_dtype(c->n, SD_F32), 0, NULL);
	if (!o)
		return NULL;
	o->data[0] = v->t->data[0];
	return sim_val_tensor(c->r, o);
}

/* ----------------------------------------------------- conv and pools */
static int shape_operand(Ctx *c, uint32_t i, const char *key, int64_t *d)
{
	int k = sim_ints(c, i, key, d, MAX_RANK);
	if (k != 4)
		return sim_fail(c, "operand %u must be a 4-D NCHW shape", i);
	return 0;
}

/* Conv2DBackpropInput(g, w, x_shape) and Conv2DBackpropFilter(g, x,
 * w_shape): the adjoints of the convolution k_conv2d computes, on the
 * forward's attributes */
static SimValue *conv_backprop(Ctx *c, int filter)
{
	SimTensor *g = sim_arg_tensor(c, 0), *t = g ? sim_arg_tensor(c, 1) : NULL;
	int64_t ds[4];
	if (!t || shape_operand(c, 2, filter ? "filter_sizes" : "input_sizes", ds) < 0)
		return NULL;
	if (g->ndim != 4 || t->ndim != 4)
		return FAILV("takes 4-D NCHW tensors");
	const SimTensor *x = filter ? t : NULL, *w = filter ? NULL : t;
	int64_t N = filter ? x->shape[0] : ds[0], C = filter ? x->shape[1] : ds[1];
	int64_t H = filter ? x->shape[2] : ds[2], W = filter ? x->shape[3] : ds[3];
	int64_t O = filter ? ds[0] : w->shape[0], CG = filter ? ds[1] : w->shape[1];
	int64_t KH = filter ? ds[2] : w->shape[2], KW = filter ? ds[3] : w->shape[3];
	SimConvGeom q;
	if (sim_conv_geom(c, H, W, KH, KW, 0, &q) < 0)
		return NULL;
	if (C != CG * q.group || O % q.group || g->shape[0] != N || g->shape[1] != O || g->shape[2] != q.OH ||
	    g->shape[3] != q.OW)
		return FAILV("dout, the weight and the input shapes do not belong to one convolution");
	SimTensor *o = sim_tensor_new(c->r, SD_F32, 4, ds);
	if (!o)
		return NULL;
	double *acc = xcalloc((size_t)(o->numel ? o->numel : 1), sizeof *acc);
	int64_t opg = O / q.group;
	for (int64_t nb = 0; nb < N; nb++)
		for (int64_t oc = 0; oc < O; oc++) {
			int64_t c0 = oc / opg * CG;
			for (int64_t oy = 0; oy < q.OH; oy++)
				for (int64_t ox = 0; ox < q.OW; ox++) {
					double gv = g->data[((nb * O + oc) * q.OH + oy) * q.OW + ox];
					for (int64_t ic = 0; ic < CG; ic++)
						for (int64_t ky = 0; ky < KH; ky++) {
							int64_t iy = oy * q.sh - q.pt + ky * q.dh;
							if (iy < 0 || iy >= H)
								continue;
							for (int64_t kx = 0; kx < KW; kx++) {
								int64_t ix = ox * q.sw - q.pl + kx * q.dw;
								if (ix < 0 || ix >= W)
									continue;
								int64_t xi = ((nb * C + c0 + ic) * H + iy) * W + ix;
								int64_t wi = ((oc * CG + ic) * KH + ky) * KW + kx;
								if (filter)
									acc[wi] += gv * x->data[xi];
								else
									acc[xi] += gv * w->data[wi];
							}
						}
				}
		}
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)acc[i];
	free(acc);
	return sim_val_tensor(c->r, o);
}

static SimValue *k_conv_backprop_input(Ctx *c)
{
	return conv_backprop(c, 0);
}
static SimValue *k_conv_backprop_filter(Ctx *c)
{
	return conv_backprop(c, 1);
}

/* MaxPoolGrad(x, y, g): each window's gradient goes to its first maximum;
 * AvgPoolGrad(x, y, g, ...): spread evenly over the window's elements
 * inside the input (the count k_pool divides by) */
static SimValue *pool_grad(Ctx *c, int isMax)
{
	SimTensor *x = sim_arg_tensor(c, 0), *y = x ? sim_arg_tensor(c, 1) : NULL, *g = y ? sim_arg_tensor(c, 2) : NULL;
	if (!g)
		return NULL;
	if (x->ndim != 4 || !sim_same_shape(g, y->ndim, y->shape))
		return FAILV("takes a 4-D NCHW input and dout of the output's shape");
	int64_t kh, kw, N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
	sim_hw_attr(c->n, "kernel_size", 1, &kh, &kw);
	SimConvGeom q;
	if (sim_conv_geom(c, H, W, kh, kw, 1, &q) < 0)
		return NULL;
	int64_t want[4] = {N, C, q.OH, q.OW};
	if (!sim_same_shape(g, 4, want))
		return FAILV("dout does not have the pool's output shape");
	SimTensor *o = like(c, x);
	if (!o)
		return NULL;
	double *acc = xcalloc((size_t)(o->numel ? o->numel : 1), sizeof *acc);
	for (int64_t p = 0; p < N * C; p++)
		for (int64_t oy = 0; oy < q.OH; oy++)
			for (int64_t ox = 0; ox < q.OW; ox++) {
				double gv = g->data[(p * q.OH + oy) * q.OW + ox], best = -INFINITY;
				int64_t at = -1, cnt = 0;
				for (int pass = 0; pass < 2; pass++)
					for (int64_t ky = 0; ky < kh; ky++)
						for (int64_t kx = 0; kx < kw; kx++) {
							int64_t iy = oy * q.sh - q.pt + ky, ix = ox * q.sw - q.pl + kx;
							if (iy < 0 || iy >= H || ix < 0 || ix >= W)
								continue;
							int64_t i = (p * H + iy) * W + ix;
							if (pass == 0) {
								cnt++;
								if (x->data[i] > best) {
									best = x->data[i];
									at = i;
								}
							} else if (!isMax) {
								acc[i] += gv / (double)cnt;
							}
						}
				if (isMax && at >= 0)
					acc[at] += gv;
			}
	for (int64_t i = 0; i < o->numel; i++)
		o->data[i] = (float)acc[i];
	free(acc);
	return sim_val_tensor(c->r, o);
}

static SimValue *k_max_pool_grad(Ctx *c)
{
	return pool_grad(c, 1);
}
static SimValue *k_avg_pool_grad(Ctx *c)
{
	return pool_grad(c, 0);
}

/* -------------------------------------------------------- optimizers */
/* a scalar operand (learning rate, momentum, beta1, ...) */
static int scalar_operand(Ctx *c, uint32_t i, double *out)
{
	SimValue *v = sim_arg(c, i);
	if (!v)
		return -1;
	if (v->kind != SV_TENSOR || v->t->numel != 1)
		return sim_fail(c, "operand %u must be a scalar", i);
	*out = v->t->data[0];
	return 0;
}

/* the current value of written operand i, shaped like the first */
static SimTensor *ref_operand(Ctx *c, uint32_t i, const SimTensor *like_t)
{
	SimTensor *t = sim_arg_tensor(c, i);
	if (t && like_t && !sim_same_shape(t, like_t->ndim, like_t->shape)) {
		char a[160], b[160];
		sim_fmt_shape(a, sizeof a, t->ndim, t->shape);
		sim_fmt_shape(b, sizeof b, like_t->ndim, like_t->shape);
		sim_fail(c, "operand %u has shape %s, the parameter %s", i, a, b);
		return NULL;
	}
	return t;
}

static SimTensor *copy_of(Ctx *c, const SimTensor *t)
{
	SimTensor *o = sim_tensor_new(c->r, t->dtype, t->ndim, t->shape);
	if (o)
		memcpy(o->data, t->data, (size_t)t->numel * sizeof(float));
	return o;
}

/* the gradient operand i of an update of weight p, with the run's
 * gradient scale applied (SimOptions.grad_scale) */
static SimTensor *grad_operand(Ctx *c, uint32_t i, const SimTensor *p)
{
	SimTensor *g = ref_operand(c, i, p);
	const SimOptions *o = &c->r->o;
	double f = g && o->grad_scale && c->n->args[0].kind == V_NODE
	               ? o->grad_scale(o->grad_scale_ctx, c->n->args[0].u.node)
	               : 1;
	if (f == 1)
		return g;
	SimTensor *s = copy_of(c, g);
	for (int64_t k = 0; s && k < s->numel; k++)
		s->data[k] = (float)(s->data[k] * f);
	return s;
}

/* ApplyMomentum(param, moment, lr, grad, momentum, U) [nn_ops.py
 * ApplyMomentum]: moment = moment * momentum + grad * gradient_scale;
 * param -= lr * moment, or lr * (grad + moment * momentum) with
 * use_nesterov.  Returns the new param. */
static SimValue *k_apply_momentum(Ctx *c)
{
	SimTensor *p = ref_operand(c, 0, NULL), *m = p ? ref_operand(c, 1, p) : NULL,
	          *g = m ? grad_operand(c, 3, p) : NULL;
	double lr, mom;
	if (!g || scalar_operand(c, 2, &lr) < 0 || scalar_operand(c, 4, &mom) < 0)
		return NULL;
	int nesterov = sim_flag(c, ATTR_ONLY, "use_nesterov", NULL, 0);
	double scale = sim_float(c, ATTR_ONLY, "gradient_scale", 1.0);
	SimTensor *np = copy_of(c, p), *nm = np ? copy_of(c, m) : NULL;
	if (!nm)
		return NULL;
	for (int64_t i = 0; i < p->numel; i++) {
		double gi = g->data[i] * scale, mi = (double)m->data[i] * mom + gi;
		nm->data[i] = (float)mi;
		np->data[i] = (float)(p->data[i] - lr * (nesterov ? gi + mi * mom : mi));
	}
	if (sim_write_ref(c, 1, nm) < 0 || sim_write_ref(c, 0, np) < 0)
		return NULL;
	return sim_val_tensor(c->r, np);
}

/* SGD(param, grad, lr, accum, momentum, stat, U), as MindSpore's CPU kernel
 * (mindspore/ccsrc/plugin/device/cpu/kernel/sgd_cpu_kernel.cc): with
 * momentum > 0 the first step (stat > 0) takes accum = grad and clears
 * stat, later steps accum = accum * momentum + (1 - dampening) * grad; the
 * step is accum (or grad + momentum * accum with nesterov). */
static SimValue *k_sgd(Ctx *c)
{
	SimTensor *p = ref_operand(c, 0, NULL), *g = p ? grad_operand(c, 1, p) : NULL,
	          *a = g ? ref_operand(c, 3, p) : NULL, *s = a ? ref_operand(c, 5, p) : NULL;
	double lr, mom;
	if (!s || scalar_operand(c, 2, &lr) < 0 || scalar_operand(c, 4, &mom) < 0)
		return NULL;
	double damp = sim_float(c, ATTR_ONLY, "dampening", 0), wd = sim_float(c, ATTR_ONLY, "weight_decay", 0);
	int nesterov = sim_flag(c, ATTR_ONLY, "nesterov", NULL, 0);
	SimTensor *np = copy_of(c, p), *na = np ? copy_of(c, a) : NULL, *ns = na ? copy_of(c, s) : NULL;
	if (!ns)
		return NULL;
	for (int64_t i = 0; i < p->numel; i++) {
		double gi = g->data[i];
		if (wd > 0)
			gi += p->data[i] * wd;
		if (mom > 0) {
			if (s->data[i] > 0) {
				na->data[i] = (float)gi;
				ns->data[i] = 0;
			} else {
				na->data[i] = (float)(a->data[i] * mom + (1 - damp) * gi);
			}
			gi = nesterov ? gi + na->data[i] * mom : na->data[i];
		}
		np->data[i] = (float)(p->data[i] - lr * gi);
	}
	if (sim_write_ref(c, 5, ns) < 0 || sim_write_ref(c, 3, na) < 0 || sim_write_ref(c, 0, np) < 0)
		return NULL;
	return sim_val_tensor(c->r, np);
}

/* Adam(param, m, v, beta1_power, beta2_power, lr, beta1, beta2, eps, grad,
 * U) [nn_ops.py Adam]: m += (g - m)(1 - beta1), v += (g^2 - v)(1 - beta2),
 * param -= lr sqrt(1 - beta2_power) / (1 - beta1_power) * m / (sqrt(v) +
 * eps), with use_nesterov m replaced by m beta1 + (1 - beta1) g. */
static SimValue *k_adam(Ctx *c)
{
	SimTensor *p = ref_operand(c, 0, NULL), *m = p ? ref_operand(c, 1, p) : NULL,
	          *v = m ? ref_operand(c, 2, p) : NULL, *g = v ? grad_operand(c, 9, p) : NULL;
	double b1p, b2p, lr, b1, b2, eps;
	if (!g || scalar_operand(c, 3, &b1p) < 0 || scalar_operand(c, 4, &b2p) < 0 || scalar_operand(c, 5, &lr) < 0 ||
	    scalar_operand(c, 6, &b1) < 0 || scalar_operand(c, 7, &b2) < 0 || scalar_operand(c, 8, &eps) < 0)
		return NULL;
	int nesterov = sim_flag(c, ATTR_ONLY, "use_nesterov", NULL, 0);
	if (b1p == 1)
		return FAILV("beta1_power is 1: the bias correction divides by zero");
	double lrt = lr * sqrt(1 - b2p) / (1 - b1p);
	SimTensor *np = copy_of(c, p), *nm = np ? copy_of(c, m) : NULL, *nv = nm ? copy_of(c, v) : NULL;
	if (!nv)
		return NULL;
	for (int64_t i = 0; i < p->numel; i++) {
		double gi = g->data[i], mi = m->data[i] + (gi - m->data[i]) * (1 - b1);
		double vi = v->data[i] + (gi * gi - v->data[i]) * (1 - b2);
		double step = nesterov ? mi * b1 + (1 - b1) * gi : mi;
		nm->data[i] = (float)mi;
		nv->data[i] = (float)vi;
		np->data[i] = (float)(p->data[i] - lrt * step / (sqrt(vi) + eps));
	}
	if (sim_write_ref(c, 2, nv) < 0 || sim_write_ref(c, 1, nm) < 0 || sim_write_ref(c, 0, np) < 0)
		return NULL;
	return sim_val_tensor(c->r, np);
}

/* AdamWeightDecay(param, m, v, lr, beta1, beta2, eps, decay, grad, U), the
 * fused form of nn.AdamWeightDecay (no bias correction):
 * m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2,
 * param -= lr (m / (sqrt(v) + eps) + decay param) */
static SimValue *k_adam_weight_decay(Ctx *c)
{
	SimTensor *p = ref_operand(c, 0, NULL), *m = p ? ref_operand(c, 1, p) : NULL,
	          *v = m ? ref_operand(c, 2, p) : NULL, *g = v ? grad_operand(c, 8, p) : NULL;
	double lr, b1, b2, eps, wd;
	if (!g || scalar_operand(c, 3, &lr) < 0 || scalar_operand(c, 4, &b1) < 0 || scalar_operand(c, 5, &b2) < 0 ||
	    scalar_operand(c, 6, &eps) < 0 || scalar_operand(c, 7, &wd) < 0)
		return NULL;
	SimTensor *np = copy_of(c, p), *nm = np ? copy_of(c, m) : NULL, *nv = nm ? copy_of(c, v) : NULL;
	if (!nv)
		return NULL;
	for (int64_t i = 0; i < p->numel; i++) {
		double gi = g->data[i], mi = b1 * m->data[i] + (1 - b1) * gi, vi = b2 * v->data[i] + (1 - b2) * gi * gi;
		nm->data[i] = (float)mi;
		nv->data[i] = (float)vi;
		np->data[i] = (float)(p->data[i] - lr * (mi / (sqrt(vi) + eps) + wd * p->data[i]));
	}
	if (sim_write_ref(c, 2, nv) < 0 || sim_write_ref(c, 1, nm) < 0 || sim_write_ref(c, 0, np) < 0)
		return NULL;
	return sim_val_tensor(c->r, np);
}

/* Assign(param, value, U): param = value; AssignAdd(param, value, U):
 * param += value (value broadcast to the parameter) */
static SimValue *assign(Ctx *c, int add)
{
	SimTensor *p = ref_operand(c, 0, NULL), *v = p ? sim_arg_tensor(c, 1) : NULL;
	if (!v)
		return NULL;
	if (v->numel != p->numel && v->numel != 1)
		return FAILV("a value of %lld elements for a parameter of %lld", (long long)v->numel,
		             (long long)p->numel);
	SimTensor *np = sim_tensor_new(c->r, p->dtype, p->ndim, p->shape);
	if (!np)
		return NULL;
	for (int64_t i = 0; i < p->numel; i++) {
		double x = v->data[v->numel == 1 ? 0 : i];
		np->data[i] = (float)(add ? p->data[i] + x : x);
	}
	if (sim_write_ref(c, 0, np) < 0)
		return NULL;
	return sim_val_tensor(c->r, np);
}

static SimValue *k_assign(Ctx *c)
{
	return assign(c, 0);
}
static SimValue *k_assign_add(Ctx *c)
{
	return assign(c, 1);
}

/* ---------------------------------------------------------- the table */
typedef struct Named {
	const char *name;
	SimKernel fn;
	uint8_t nref, ref[3]; /* the operands written in place */
	int8_t grad;          /* an optimizer update: its gradient operand (training-step.md §3.1), else -1 */
} Named;

static const Named named[] = {
    {"ReluGrad", k_relu_grad, 0, {0}, -1},
    {"ReLU6Grad", k_relu6_grad, 0, {0}, -1},
    {"GeLUGrad", k_gelu_grad, 0, {0}, -1},
    {"FastGeLUGrad", k_fast_gelu_grad, 0, {0}, -1},
    {"SiLUGrad", k_silu_grad, 0, {0}, -1},
    {"SigmoidGrad", k_sigmoid_grad, 0, {0}, -1},
    {"TanhGrad", k_tanh_grad, 0, {0}, -1},
    {"SoftplusGrad", k_softplus_grad, 0, {0}, -1},
    {"SqrtGrad", k_sqrt_grad, 0, {0}, -1},
    {"RsqrtGrad", k_rsqrt_grad, 0, {0}, -1},
    {"ReciprocalGrad", k_reciprocal_grad, 0, {0}, -1},
    {"DropoutGrad", k_dropout_grad, 0, {0}, -1},
    {"SigmoidCrossEntropyWithLogitsGrad", k_sigmoid_ce_grad, 0, {0}, -1},
    {"Sign", k_sign, 0, {0}, -1},
    {"GreaterEqual", k_greater_equal, 0, {0}, -1},
    {"LessEqual", k_less_equal, 0, {0}, -1},
    {"MaximumGrad", k_maximum_grad, 0, {0}, -1},
    {"MinimumGrad", k_minimum_grad, 0, {0}, -1},
    {"SoftmaxBackward", k_softmax_backward, 0, {0}, -1},
    {"LogSoftmaxGrad", k_log_softmax_grad, 0, {0}, -1},
    {"LayerNormGrad", k_layer_norm_grad, 0, {0}, -1},
    {"RmsNormGrad", k_rms_norm_grad, 0, {0}, -1},
    {"BatchNormGrad", k_batch_norm_grad, 0, {0}, -1},
    {"BNTrainingUpdateGrad", k_bn_update_grad, 0, {0}, -1},
    {"BNTrainingReduceGrad", k_bn_reduce_grad, 0, {0}, -1},
    {"BiasAddGrad", k_bias_add_grad, 0, {0}, -1},
    {"PReLUGrad", k_prelu_grad, 0, {0}, -1},
    {"L2NormalizeGrad", k_l2normalize_grad, 0, {0}, -1},
    {"FlashAttentionScoreGrad", k_attention_grad, 0, {0}, -1},
    {"RotaryPositionEmbeddingGrad", k_rope_grad, 0, {0}, -1},
    {"SwigluGrad", k_swiglu_grad, 0, {0}, -1},
    {"StridedSliceGrad", k_strided_slice_grad, 0, {0}, -1},
    {"SliceGrad", k_slice_grad, 0, {0}, -1},
    {"Slice", k_slice, 0, {0}, -1},
    {"UnsortedSegmentSum", k_unsorted_segment_sum, 0, {0}, -1},
    {"ScatterNd", k_scatter_nd, 0, {0}, -1},
    {"SumExt", k_reduce, 0, {0}, -1},
    {"BroadcastTo", k_broadcast_to, 0, {0}, -1},
    {"ScalarToTensor", k_scalar_to_tensor, 0, {0}, -1},
    {"Conv2DBackpropInput", k_conv_backprop_input, 0, {0}, -1},
    {"Conv2DBackpropFilter", k_conv_backprop_filter, 0, {0}, -1},
    {"MaxPoolGrad", k_max_pool_grad, 0, {0}, -1},
    {"AvgPoolGrad", k_avg_pool_grad, 0, {0}, -1},
    {"ApplyMomentum", k_apply_momentum, 2, {0, 1}, 3},
    {"SGD", k_sgd, 3, {0, 3, 5}, 1},
    {"Adam", k_adam, 3, {0, 1, 2}, 9},
    {"AdamWeightDecay", k_adam_weight_decay, 3, {0, 1, 2}, 8},
    {"Assign", k_assign, 1, {0}, -1},
    {"AssignAdd", k_assign_add, 1, {0}, -1},
    {"ScatterDiv", k_scatter_div, 1, {0}, -1},
};

#define NNAMED (sizeof named / sizeof named[0])

/* the table entry of n's primitive (by text: the interning table may be
 * rebuilt between runs, so no Sym is kept across them) */
static const Named *lookup(const Node *n)
{
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || !n->prim)
		return NULL;
	const char *s = sym_str(n->prim);
	for (size_t i = 0; i < NNAMED; i++)
		if (s[0] == named[i].name[0] && strcmp(s, named[i].name) == 0)
			return &named[i];
	return NULL;
}

SimKernel sim_named_kernel(const Node *n)
{
	const Named *k = lookup(n);
	return k ? k->fn : NULL;
}

int sim_ref_operands(const Node *n, uint32_t *pos)
{
	const Named *k = lookup(n);
	if (!k)
		return 0;
	for (int i = 0; i < k->nref; i++)
		pos[i] = k->ref[i];
	return k->nref;
}

int sim_grad_operand(const Node *n)
{
	const Named *k = lookup(n);
	return k ? k->grad : -1;
}
