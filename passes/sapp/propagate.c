/* propagate.c - strategies for every operator after the partition (spec
 * sapp-search.md §4: GenerateStrategyV3 for training graphs,
 * GenerateStrategyV1 for inference, §4.1).
 *
 * Kept operators read their strategy off the rec graph (§4.2).  Eliminated
 * operators get one by propagation: forward from a producer (§4.3) or
 * backward from a consumer (§4.4), adapted to their type (§4.6).
 *   V3: first only when the propagated strategy uses at least `min_devices`
 *       devices (stage devices, then smaller, §4.1 step 4), then with any
 *       count, then a default; StandAlone and BatchParallel operators are
 *       set up front; a Gather sharing its table takes the strategy of the
 *       Cast/MatMul/Mul that shares it (§4.7).
 *   V1: the eliminated operators in reverse elimination order, one forward
 *       and one backward pass with any count, then the same remainder and
 *       default; every user of a weight takes the strategy of the user that
 *       splits it most (SetParamStrategy/ApplyParamStrategy, §4.7); the
 *       last operator and the VirtualDataset are left whole (§4.8).
 * Invalid entries (§4.8) are fixed last.
 *
 * The passes visit the no-strategy list from its end to its start, as
 * MindSpore does; an operator whose neighbours did not change since it was
 * last looked at would fail again, so only those with a changed neighbour
 * are visited, and at the start of a round only those that failed for want
 * of a smaller min_devices (same visiting order, same result, linear work).
 */
#include <stdlib.h>
#include <string.h>

#include "sapp.h"

typedef struct Stra {
	int n;
	int64_t v[MAX_RANK];
} Stra;

int64_t sapp_product(const int64_t *v, int n)
{
	int64_t p = 1;
	for (int i = 0; i < n; i++)
		p *= v[i];
	return p;
}

static int64_t *sin_of(SappOp *X, uint32_t i)
{
	return X->s + X->off[i];
}

static int smallest_prime(int64_t n)
{
	if (n < 2)
		return 0;
	for (int64_t q = 2; q * q <= n; q++)
		if (n % q == 0)
			return (int)q;
	return n > 65536 ? 0 : (int)n;
}

/* set input i from v: left-aligned, `fill` past the end of v */
void sapp_set_input(SappOp *X, uint32_t i, const int64_t *v, int len, int fill)
{
	int64_t *s = sin_of(X, i);
	for (int d = 0; d < X->rank[i]; d++)
		s[d] = d < len ? v[d] : fill;
}

static int first_nonscalar(const SappOp *X)
{
	for (uint32_t i = 0; i < X->nin; i++)
		if (X->rank[i] > 0)
			return (int)i;
	return -1;
}

static int all_ones(const SappOp *X)
{
	uint32_t total = X->nin ? X->off[X->nin - 1] + X->rank[X->nin - 1] : 0;
	for (uint32_t i = 0; i < total; i++)
		if (X->s[i] != 1)
			return 0;
	return 1;
}

static int op_is(const SappOp *X, int op)
{
	return X->op == op;
}

static int fam(const SappOp *X)
{
	return X->fam;
}

static void fmt_stra(const Stra *s, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "(");
	for (int i = 0; i < s->n && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)s->v[i]);
	if (k < n)
		snprintf(buf + k, n - k, ")");
}

static void input_stra(SappOp *X, uint32_t i, Stra *out)
{
	out->n = X->rank[i];
	memcpy(out->v, sin_of(X, i), (size_t)out->n * sizeof(int64_t));
}

static int norm_axis(int64_t a, int r)
{
	return (int)(a < 0 ? a + r : a);
}

/* ------------------------------------------------------------ helpers (§4.10) */

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* PrepareReshape: map a strategy across a reshape; 0 if the shapes are odd */
int sapp_prepare_reshape(const int64_t *from, int rf, const int64_t *to, int rt, const int64_t *fs, int64_t *ts)
{
	int64_t fr[MAX_RANK], tr[MAX_RANK], fsc[MAX_RANK];
	if (rf > MAX_RANK || rt > MAX_RANK)
		return 0;
	for (int t = 0; t < rt; t++)
		ts[t] = 1;
	for (int f = 0; f < rf; f++)
		if (from[f] <= 0 || fs[f] <= 0)
			return 0;
	for (int t = 0; t < rt; t++)
		if (to[t] <= 0)
			return 0;
	memcpy(fsc, fs, (size_t)rf * sizeof *fsc);
	for (int pass = 0; pass < 2; pass++) {
		memcpy(fr, from, (size_t)rf * sizeof *fr);
		memcpy(tr, to, (size_t)rt * sizeof *tr);
		int f = 0, t = 0;
		while (f < rf && t < rt) {
			if (fr[f] > tr[t]) {
				if (pass == 0) {
					if (tr[t] % fsc[f] == 0) {
						ts[t] *= fsc[f];
						fsc[f] = 1;
					}
				} else {
					int64_t g = gcd64(fsc[f], tr[t]);
					ts[t] *= g;
					fsc[f] /= g;
				}
				fr[f] /= tr[t];
				t++;
			} else if (fr[f] < tr[t]) {
				if (pass == 1) {
					ts[t] *= fsc[f];
					fsc[f] = 1;
				}
				tr[t] /= fr[f];
				f++;
			} else {
				if (pass == 1 || tr[t] % fsc[f] == 0) {
					ts[t] *= fsc[f];
					fsc[f] = 1;
				}
				f++;
				t++;
			}
		}
	}
	return 1;
}

/* GenGatherStra: dim 0 first, then the others by decreasing size; cut the
 * current dim while the device count's next prime divides it */
void sapp_gen_gather_stra(const int64_t *shape, int r, int64_t devices, int64_t *out)
{
	int ord[MAX_RANK], n = 0;
	for (int d = 0; d < r; d++)
		out[d] = 1;
	if (r <= 0)
		return;
	ord[n++] = 0;
	for (int d = 1; d < r; d++) {
		int k = n;
		while (k > 1 && shape[ord[k - 1]] < shape[d])
			k--;
		memmove(&ord[k + 1], &ord[k], (size_t)(n - k) * sizeof *ord);
		ord[k] = d;
		n++;
	}
	int64_t prod = 1;
	for (int i = 0; i < n && prod < devices; i++) {
		int d = ord[i];
		for (;;) {
			int p = smallest_prime(devices / prod);
			if (!p || prod >= devices || (shape[d] / out[d]) % p != 0)
				break;
			out[d] *= p;
			prod *= p;
		}
	}
}

/* ------------------------------------------------------------ per-type adaptation (§4.6) */

typedef struct Prop {
	Sapp *S;
	int64_t md;   /* min_devices of the current round */
	int32_t need; /* after a failed attempt: the devices its strategy used when
		       * only min_devices refused it, else 0 */
} Prop;

/* the attempt fails on min_devices alone: it succeeds once md <= p */
static int below_md(Prop *P, int64_t p)
{
	P->need = p > INT32_MAX ? INT32_MAX : (int32_t)p;
	return 0;
}

/* CheckDivisible: per input, 1 where the input dim is 1, else s[d] */
static void check_divisible(SappOp *X, const Stra *s)
{
	for (uint32_t i = 0; i < X->nin; i++) {
		int64_t *v = sin_of(X, i);
		for (int d = 0; d < X->rank[i]; d++)
			v[d] = X->dims[i][d] == 1 ? 1 : d < s->n ? s->v[d] : 1;
	}
}

static void fix_entries(SappOp *X, uint32_t i)
{
	int64_t *v = sin_of(X, i);
	for (int d = 0; d < X->rank[i]; d++)
		if (v[d] != 1 && (v[d] < 1 || v[d] > X->dims[i][d] || X->dims[i][d] % v[d] != 0))
			v[d] = 1;
}

static void check_broadcast(SappOp *X, const Stra *s)
{
	int maxr = 0, same = 1;
	for (uint32_t i = 0; i < X->nin; i++) {
		if (X->rank[i] > maxr)
			maxr = X->rank[i];
		if (i && X->rank[i] != X->rank[0])
			same = 0;
	}
	if (same) {
		check_divisible(X, s);
	} else if (s->n >= maxr) {
		for (uint32_t i = 0; i < X->nin; i++) {
			int64_t *v = sin_of(X, i);
			int pad = maxr - X->rank[i];
			for (int d = 0; d < X->rank[i]; d++)
				v[d] = X->dims[i][d] == 1 ? 1 : s->v[pad + d];
		}
	} else {
		for (uint32_t i = 0; i < X->nin; i++)
			sapp_set_input(X, i, NULL, 0, 1);
	}
	for (uint32_t i = 0; i < X->nin; i++)
		fix_entries(X, i);
}

static void data_parallel(const Sapp *S, SappOp *X)
{
	for (uint32_t i = 0; i < X->nin; i++) {
		int64_t *v = sin_of(X, i);
		for (int d = 0; d < X->rank[i]; d++)
			v[d] = 1;
		if (X->rank[i] && X->dims[i][0] % S->stage_devices == 0)
			v[0] = S->stage_devices;
	}
}

/* the axes an operator works along: list from operand/attribute, default */
static int axes_of(const Sapp *S, const SappOp *X, int opnd, int attr, int r, int dflt_all, int64_t dflt, int *mask)
{
	int64_t ax[MAX_RANK];
	int k = sapp_attr_ints(S, X->n, opnd, attr, ax, MAX_RANK);
	*mask = 0;
	if (k <= 0) {
		if (dflt_all || k == 0) {
			*mask = (1 << r) - 1;
			return r;
		}
		ax[0] = dflt;
		k = 1;
	}
	int n = 0;
	for (int i = 0; i < k; i++) {
		int a = norm_axis(ax[i], r);
		if (a >= 0 && a < r && !(*mask & (1 << a))) {
			*mask |= 1 << a;
			n++;
		}
	}
	return n;
}

static void prepare_gather(Prop *P, SappOp *X)
{
	const Sapp *S = P->S;
	if (X->nin < 2) {
		for (uint32_t i = 0; i < X->nin; i++)
			sapp_set_input(X, i, NULL, 0, 1);
		return;
	}
	int64_t axis = 0, bd = 0;
	sapp_attr_int(S, X->n, 2, SA_axis, &axis);
	sapp_attr_int(S, X->n, 3, SA_batch_dims, &bd); /* operand 3 (gather_op.yaml) or attribute */
	int pr = X->rank[0], ir = X->rank[1];
	axis = norm_axis(axis, pr);
	if (bd < 0)
		bd += ir;
	int64_t dev = S->stage_devices;
	int64_t g[MAX_RANK];
	/* shared batch dimensions: MindSpore's branch is for batch_dims > 1;
	 * with batch_dims 1 its axis-1 form below would split the batch
	 * dimension of the params but not of the indices, which GatherInfo's
	 * batch mode (ops_info/gather_info.cc, BatchImpl::CheckStrategy)
	 * refuses, so every batch_dims takes this branch here */
	if (bd >= 1 && X->orank) {
		sapp_gen_gather_stra(X->odims, X->orank, dev, g);
		for (uint32_t i = 0; i < X->nin; i++)
			sapp_set_input(X, i, g, X->rank[i] < X->orank ? X->rank[i] : X->orank, 1);
		if (axis >= 0 && axis < pr)
			sin_of(X, 0)[axis] = 1;
		return;
	}
	if (axis == 1 && pr >= 2 && X->orank) {
		sapp_gen_gather_stra(X->odims, X->orank, dev, g);
		int64_t *ps = sin_of(X, 0);
		for (int d = 0; d < pr; d++)
			ps[d] = 1;
		ps[0] = g[0];
		int64_t *is = sin_of(X, 1);
		for (int d = 0; d < ir; d++)
			is[d] = 1 + d < X->orank ? g[1 + d] : 1;
		return;
	}
	if (axis != 0) {
		for (uint32_t i = 0; i < X->nin; i++)
			sapp_set_input(X, i, NULL, 0, 1);
		return;
	}
	for (uint32_t i = 0; i < X->nin; i++)
		sapp_set_input(X, i, NULL, 0, 1);
	int64_t prod = 1;
	for (int i = (int)X->nin - 1; i >= 0; i--) {
		if (!X->rank[i])
			continue;
		int64_t *v = sin_of(X, (uint32_t)i);
		for (;;) {
			int p = smallest_prime(dev / prod);
			if (!p || prod >= dev || (X->dims[i][0] / v[0]) % p != 0)
				break;
			v[0] *= p;
			prod *= p;
		}
	}
	/* gather mode: a split table axis and split indices only combine in the
	 * "batch and axis" mode (2-D table and 2-D indices, dim 0 only, all devices) */
	int64_t *ps = sin_of(X, 0), *is = sin_of(X, 1);
	int idx_split = sapp_product(is, ir) > 1;
	if (idx_split && ps[0] > 1) {
		int batch_axis = pr == 2 && ir == 2 && ps[1] == 1 && is[1] == 1 && ps[0] * is[0] == dev;
		if (!batch_axis)
			ps[0] = 1;
	}
}

static void stridedslice(const Sapp *S, SappOp *X, const Stra *s)
{
	int r = X->rank[0];
	int64_t begin[MAX_RANK], end[MAX_RANK], strides[MAX_RANK];
	int nb = sapp_attr_ints(S, X->n, 1, SA_begin, begin, MAX_RANK);
	int ne = sapp_attr_ints(S, X->n, 2, SA_end, end, MAX_RANK);
	int ns = sapp_attr_ints(S, X->n, 3, SA_strides, strides, MAX_RANK);
	int64_t bm = 0, em = 0, nm = 0;
	sapp_attr_int(S, X->n, 4, SA_begin_mask, &bm);
	sapp_attr_int(S, X->n, 5, SA_end_mask, &em);
	sapp_attr_int(S, X->n, 7, SA_new_axis_mask, &nm);
	Stra t = {0, {0}};
	for (int i = 0; i < s->n && t.n < MAX_RANK; i++) {
		if (nm & (1 << t.n))
			t.v[t.n++] = 1;
		if (t.n < MAX_RANK)
			t.v[t.n++] = s->v[i];
	}
	int64_t *v = sin_of(X, 0);
	for (int d = 0; d < r; d++) {
		v[d] = d < t.n ? t.v[d] : 1;
		int64_t dim = X->dims[0][d];
		if (d < ns && strides[d] != 1)
			v[d] = 1;
		int64_t b = d < nb && !(bm & (1 << d)) ? begin[d] : 0;
		int64_t e = d < ne && !(em & (1 << d)) ? end[d] : dim;
		if (b < 0)
			b += dim;
		if (e < 0)
			e += dim;
		if (b != 0 || e < dim)
			v[d] = 1;
	}
	for (uint32_t i = 1; i < X->nin; i++)
		sapp_set_input(X, i, NULL, 0, 1);
}

static void batch_matmul(SappOp *X, const Stra *s)
{
	if (X->nin < 2 || s->n < 2) {
		check_divisible(X, s);
		return;
	}
	int nb = s->n - 2;
	int64_t i = s->v[s->n - 2], j = s->v[s->n - 1];
	for (uint32_t k = 0; k < 2; k++) {
		int r = X->rank[k];
		int64_t *v = sin_of(X, k);
		for (int d = 0; d < r - 2; d++) {
			int sd = nb - (r - 2) + d;
			v[d] = sd >= 0 && X->dims[k][d] != 1 ? s->v[sd] : 1;
		}
		if (r >= 2) {
			int64_t a = k == 0 ? i : 1, b = k == 0 ? 1 : j;
			int tr = k == 0 ? X->ta : X->tb;
			v[r - 2] = tr ? b : a;
			v[r - 1] = tr ? a : b;
		} else if (r == 1) {
			v[0] = 1;
		}
	}
	for (uint32_t k = 2; k < X->nin; k++)
		sapp_set_input(X, k, NULL, 0, 1);
}

/* PrepareFlashAttentionScore (mindspore-ai/mindspore, mindspore/ccsrc/
 * frontend/parallel/auto_parallel/rec_core/rec_generate_strategy.cc): read
 * the batch, sequence and head split counts off the basic strategy at the
 * layout's positions (FillFlashLayoutIndexes).  The query takes all three;
 * key and value share (batch, heads) -- heads only when their heads are
 * split with the query's (kv_split), never their sequence; the attention
 * mask takes the sequence split unless it is the compressed pattern of
 * sparse modes 2-4, batch and heads where it has them; real_shift and the
 * dropout mask follow (batch, heads, S1); prefix the batch; the padding
 * mask and the sequence lengths stay whole. */
static void flash_attention(SappOp *X, const Stra *s)
{
	AttnInfo ai;
	char why[8];
	for (uint32_t i = 0; i < X->nin; i++)
		sapp_set_input(X, i, NULL, 0, 1);
	if (ir_attention_info(X->n, &ai, why, sizeof why) != 1)
		return;
	int64_t b = ai.bdim < s->n ? s->v[ai.bdim] : 1, q = ai.sdim < s->n ? s->v[ai.sdim] : 1,
	        h = ai.ndim < s->n ? s->v[ai.ndim] : 1;
	int64_t kvh = ai.kv_split ? h : 1;
	for (uint32_t i = 0; i < X->nin; i++) {
		int64_t *v = sin_of(X, i);
		const int64_t *dm = X->dims[i];
		int r = X->rank[i];
		uint32_t opnd = X->arg[i];
		switch (opnd < ATTN_MAX_OPND ? ai.role[opnd] : AR_NONE) {
		case AR_Q:
			v[ai.bdim] = b, v[ai.sdim] = q, v[ai.ndim] = h;
			break;
		case AR_K:
		case AR_V:
			v[ai.bdim] = b, v[ai.ndim] = kvh;
			break;
		case AR_MASK:
			if (r == 2) {
				v[0] = ai.mask_compressed ? 1 : q;
			} else if (r == 4) {
				v[0] = dm[0] > 1 ? b : 1, v[1] = dm[1] > 1 ? h : 1;
				v[2] = ai.mask_compressed ? 1 : q;
			}
			break;
		case AR_SHIFT:
		case AR_DROP:
			if (r == 4) {
				v[0] = dm[0] > 1 ? b : 1, v[1] = h, v[2] = dm[2] > 1 ? q : 1;
			}
			break;
		case AR_PREFIX:
			if (r == 1)
				v[0] = b;
			break;
		default:
			break;
		}
	}
}

/* the element-wise operators that keep some axes whole (Softmax-like,
 * §4.6): s with 1 on those axes, then CheckDivisible */
static void keep_axes_whole(SappOp *X, const Stra *s, int mask)
{
	Stra t = *s;
	for (int d = 0; d < t.n && d < 31; d++)
		if (mask & (1 << d))
			t.v[d] = 1;
	check_divisible(X, &t);
}

/* GenerateStrategiesFromStrategy: every input of X from the basic strategy s */
static void adapt(Prop *P, SappOp *X, const Stra *s)
{
	const Sapp *S = P->S;
	int f = fam(X);
	int mask;
	Stra t = *s;
	if (X->type == REC_GatherV2) {
		prepare_gather(P, X);
	} else if (f == FAM_CONCAT || f == FAM_SPLIT) {
		/* ConcatInfo::CheckStrategy (ops_info/concat_info.cc): every
		 * element takes the same strategy, whole along the axis;
		 * SplitInfo::CheckStrategy (ops_info/split_info.cc): the split
		 * axis stays whole.  Both axes are operand 1, negative from the
		 * end. */
		int64_t ax = 0;
		sapp_attr_int(S, X->n, 1, SA_axis, &ax);
		int a = norm_axis(ax, X->nin ? X->rank[0] : 0);
		if (a >= 0 && a < t.n)
			t.v[a] = 1;
		check_divisible(X, &t);
	} else if (f == FAM_ELEMWISE && X->nin >= 2) {
		check_broadcast(X, s);
	} else if (f == FAM_BIASADD) {
		check_divisible(X, s);
		if (X->nin > 1 && X->rank[0] >= 1)
			sapp_set_input(X, 0, s->v, s->n, 1);
		if (X->nin > 1 && X->rank[1] == 1)
			sin_of(X, 1)[0] = s->n > 1 ? s->v[1] : 1;
	} else if (f == FAM_SOFTMAX) {
		int r = X->nin ? X->rank[0] : 0;
		axes_of(S, X, 1, SA_axis, r, 0, -1, &mask);
		for (int d = 0; d < t.n && d < 31; d++)
			if (mask & (1 << d))
				t.v[d] = 1;
		check_divisible(X, &t);
	} else if (f == FAM_LAYERNORM) {
		int r = X->nin ? X->rank[0] : 0;
		int64_t b = -1;
		sapp_attr_int(S, X->n, -1, SA_begin_norm_axis, &b);
		int bb = norm_axis(b, r);
		for (int d = bb < 0 ? 0 : bb; d < t.n; d++)
			t.v[d] = 1;
		check_divisible(X, &t);
		for (uint32_t i = 1; i < X->nin; i++)
			sapp_set_input(X, i, NULL, 0, 1);
	} else if (f == FAM_RMSNORM) {
		for (uint32_t i = 0; i < X->nin; i++)
			sapp_set_input(X, i, NULL, 0, 1);
		if (X->nin && X->rank[0]) {
			int64_t d0 = X->dims[0][0];
			sin_of(X, 0)[0] = d0 < S->stage_devices ? d0 : S->stage_devices;
		}
	} else if (f == FAM_ONEHOT) {
		for (int d = t.n; d < X->orank && d < MAX_RANK; d++)
			t.v[t.n++] = 1;
		for (int d = 0; d < t.n && d < X->orank; d++)
			if (t.v[d] > X->odims[d])
				t.v[d] = 1;
		for (uint32_t i = 0; i < X->nin; i++)
			sapp_set_input(X, i, i == 0 ? t.v : NULL, i == 0 ? t.n : 0, 1);
	} else if (f == FAM_STRIDEDSLICE) {
		stridedslice(S, X, s);
	} else if (f == FAM_FLATTEN || X->type == REC_BatchParallel) {
		data_parallel(S, X);
	} else if (f == FAM_BATCHMATMUL) {
		batch_matmul(X, s);
	} else if (f == FAM_ATTENTION) {
		flash_attention(X, s);
	} else if (f == FAM_TILE && X->nin) {
		/* the repeated dimensions stay whole (each rank would repeat its
		 * own block); s may be shaped like the input or the output */
		int64_t m[MAX_RANK];
		int k = sapp_attr_ints(S, X->n, 1, SA_multiples, m, MAX_RANK), r = X->rank[0];
		int shift = s->n > r && k >= r ? s->n - r : 0;
		for (int d = 0; d < r; d++)
			t.v[d] = d + shift < s->n ? s->v[d + shift] : 1;
		t.n = r;
		for (int d = 0; d < r && k >= r; d++)
			if (m[k - r + d] != 1)
				t.v[d] = 1;
		check_divisible(X, &t);
	} else if (f == FAM_LPNORM) {
		/* kRecBatchParallel: set up front (§4.1 step 3); here only as a
		 * default, data parallel; kRecStandAlone (graph.c): all ones */
		if (X->type == REC_StandAlone)
			for (uint32_t i = 0; i < X->nin; i++)
				sapp_set_input(X, i, NULL, 0, 1);
		else
			data_parallel(S, X);
	} else if (f == FAM_L2NORM || f == FAM_CUM || f == FAM_SWIGLU || f == FAM_ROPE) {
		/* L2Normalize: 1 on `axis` (§4.6); CumSum: 1 on the accumulated
		 * axis; Swiglu and the rotary embedding: 1 on the halved / rotated
		 * axis, which every rank needs whole */
		int r = X->nin ? X->rank[0] : 0;
		if (f == FAM_ROPE)
			mask = r ? 1 << (r - 1) : 0;
		else
			axes_of(S, X, 1, f == FAM_SWIGLU ? SA_dim : SA_axis, r, 0, f == FAM_L2NORM ? 0 : -1, &mask);
		keep_axes_whole(X, s, mask);
	} else {
		check_divisible(X, s);
	}
	X->has_s = 1;
}

/* ------------------------------------------------------------ forward (§4.3) */

static int stop_prop_at(const SappOp *Y)
{
	return Y->type == REC_GatherV2 || op_is(Y, OP_Assign) || Y->type == REC_ExpandDims;
}

/* the output strategy an already decided eliminated producer Q passes on */
static int incoming(Prop *P, SappOp *Q, const SappOp *X, Stra *s)
{
	const Sapp *S = P->S;
	int f = fam(Q);
	s->n = 0;
	if (op_is(X, OP_OneHot) || op_is(X, OP_Transpose) || f == FAM_STRIDEDSLICE)
		return 0;
	int fi = first_nonscalar(Q);
	if (Q->type == REC_GatherV2) {
		s->n = Q->orank;
		sapp_gen_gather_stra(Q->odims, Q->orank, S->stage_devices, s->v);
	} else if ((f == FAM_ELEMWISE || f == FAM_BIASADD) && Q->nin) {
		uint32_t best = 0;
		for (uint32_t i = 1; i < Q->nin; i++)
			if (Q->rank[i] > Q->rank[best])
				best = i;
		input_stra(Q, best, s);
	} else if (f == FAM_RESHAPE && Q->nin) {
		s->n = Q->orank;
		if (!sapp_prepare_reshape(Q->dims[0], Q->rank[0], Q->odims, Q->orank, sin_of(Q, 0), s->v))
			return 0;
	} else if (f == FAM_TRANSPOSE && Q->nin) {
		int64_t perm[MAX_RANK];
		int r = sapp_attr_ints(S, Q->n, 1, SA_perm, perm, MAX_RANK);
		if (r != Q->rank[0])
			return 0;
		s->n = r;
		for (int i = 0; i < r; i++) {
			int a = norm_axis(perm[i], r);
			if (a < 0 || a >= r)
				return 0;
			s->v[i] = sin_of(Q, 0)[a];
		}
	} else if (f == FAM_EXPANDDIMS && Q->nin) {
		int64_t ax = 0;
		sapp_attr_int(S, Q->n, 1, SA_axis, &ax);
		Stra in;
		input_stra(Q, 0, &in);
		int a = norm_axis(ax, in.n + 1);
		if (a < 0 || a > in.n || in.n + 1 > MAX_RANK)
			return 0;
		s->n = 0;
		for (int i = 0; i <= in.n; i++)
			s->v[s->n++] = i == a ? 1 : in.v[i < a ? i : i - 1];
	} else if (f == FAM_ONEHOT && Q->nin) {
		input_stra(Q, 0, s);
		while (s->n < Q->orank && s->n < MAX_RANK)
			s->v[s->n++] = 1;
	} else if (fi >= 0) {
		input_stra(Q, (uint32_t)fi, s);
	} else {
		return 0;
	}
	/* the producer's own shape change */
	int mask;
	if (f == FAM_SQUEEZE || (f == FAM_REDUCE && !sapp_attr_bool(S, Q->n, 2, SA_keep_dims, 0)) ||
	    (f == FAM_ARGWITHVALUE && !sapp_attr_bool(S, Q->n, -1, SA_keep_dims, 0))) {
		if (f == FAM_SQUEEZE) {
			int64_t ax[MAX_RANK];
			int k = sapp_attr_ints(S, Q->n, 1, SA_axis, ax, MAX_RANK);
			mask = 0;
			if (k <= 0) {
				for (int d = 0; d < s->n && Q->nin; d++)
					if (d < Q->rank[0] && Q->dims[0][d] == 1)
						mask |= 1 << d;
			} else {
				for (int i = 0; i < k; i++)
					mask |= 1 << norm_axis(ax[i], s->n);
			}
		} else if (f == FAM_REDUCE) {
			axes_of(S, Q, 1, SA_axis, s->n, 1, 0, &mask);
		} else {
			axes_of(S, Q, -1, SA_axis, s->n, 0, 0, &mask);
		}
		int k = 0;
		for (int d = 0; d < s->n; d++)
			if (!(mask & (1 << d)))
				s->v[k++] = s->v[d];
		s->n = k;
	} else if (f == FAM_FLATTEN) {
		int64_t a = 1, b = -1;
		sapp_attr_int(S, Q->n, -1, SA_start_dim, &a);
		sapp_attr_int(S, Q->n, -1, SA_end_dim, &b);
		int sa = norm_axis(a, s->n), sb = norm_axis(b, s->n);
		if (sa >= 0 && sb < s->n && sa < sb) {
			for (int d = sa + 1; d <= sb; d++)
				s->v[sa] *= s->v[d];
			int k = sa + 1;
			for (int d = sb + 1; d < s->n; d++)
				s->v[k++] = s->v[d];
			s->n = k;
		}
	}
	return s->n > 0;
}

/* --explain: how X got (or did not get) its strategy */
static void explain_prop(SappOp *X, const char *what, const SappOp *from, const Stra *s, int64_t md)
{
	char a[256], b[256], st[128], res[512];
	size_t k = 0;
	res[0] = 0;
	if (X->has_s) {
		k += (size_t)snprintf(res, sizeof res, " -> in_strategy (");
		for (uint32_t i = 0; i < X->nin && k < sizeof res; i++) {
			Stra t;
			input_stra(X, i, &t);
			fmt_stra(&t, st, sizeof st);
			k += (size_t)snprintf(res + k, sizeof res - k, "%s%s", i ? ", " : "", st);
		}
		if (k < sizeof res)
			snprintf(res + k, sizeof res - k, ")");
	}
	if (s)
		fmt_stra(s, st, sizeof st);
	fprintf(stderr, "sapp: explain: %s: %s%s%s%s%s (min_devices %lld)%s\n", sapp_op_label(X, a, sizeof a), what,
		from ? " " : "", from ? sapp_op_label(from, b, sizeof b) : "", s ? ", basic strategy " : "", s ? st : "",
		(long long)md, res);
}

static int forward(Prop *P, uint32_t x)
{
	Sapp *S = P->S;
	SappOp *X = &S->ops[x];
	int32_t q = -1;
	for (uint32_t i = 0; i < X->nin; i++) {
		if (X->prod[i] < 0)
			continue;
		q = X->prod[i];
		if (S->ops[q].has_s && !all_ones(&S->ops[q]))
			break;
	}
	if (q < 0)
		return 0;
	SappOp *Q = &S->ops[q];
	int ex = sapp_explaining(S, x);
	if (q == S->vd && S->conf.vd_forward_refused) {
		if (ex)
			explain_prop(X, "forward propagation from the VirtualDataset refused", NULL, NULL, P->md);
		return 0;
	}
	Stra s = {0, {0}};
	if (!Q->elim) {
		const PartNode *R = &S->part[S->rec[q].kidx];
		int fi = first_nonscalar(X);
		if (fi < 0 || !Q->has_s)
			return 0;
		s.n = X->rank[fi];
		for (int d = 0; d < s.n; d++)
			s.v[d] = s.n <= 4 ? R->ocut.d[4 - s.n + d] : 1;
	} else {
		if (!Q->has_s || !incoming(P, Q, X, &s))
			return 0;
	}
	if (s.n == 0 || stop_prop_at(Q))
		return 0;
	if (sapp_product(s.v, s.n) < P->md)
		return below_md(P, sapp_product(s.v, s.n));
	adapt(P, X, &s);
	X->source = SRC_PROPAGATED;
	if (ex)
		explain_prop(X, "forward from", Q, &s, P->md);
	return 1;
}

/* ------------------------------------------------------------ backward (§4.4) */

static int backward(Prop *P, uint32_t x)
{
	Sapp *S = P->S;
	SappOp *X = &S->ops[x];
	int32_t c = -1;
	uint32_t slot = 0;
	for (uint32_t k = 0; k < X->ncons; k++) {
		SappOp *C = &S->ops[X->cons_op[k]];
		if (C->has_s && C->nin) {
			c = (int32_t)X->cons_op[k];
			slot = X->cons_slot[k];
			break;
		}
	}
	if (c < 0)
		return 0;
	SappOp *C = &S->ops[c];
	int f = fam(X);
	if (f == FAM_ARGWITHVALUE || f == FAM_FLATTEN) {
		if (sapp_explaining(S, x))
			explain_prop(X, "backward propagation refused for this operator type, consumer", C, NULL, P->md);
		return 0;
	}
	Stra t, s = {0, {0}};
	input_stra(C, slot, &t);
	int mask;
	if (f == FAM_EXPANDDIMS) {
		int64_t ax = 0;
		sapp_attr_int(S, X->n, 1, SA_axis, &ax);
		int a = norm_axis(ax, t.n);
		for (int d = 0; d < t.n; d++)
			if (d != a)
				s.v[s.n++] = t.v[d];
	} else if (f == FAM_RESHAPE && X->nin) {
		s.n = X->rank[0];
		if (t.n != X->orank || !sapp_prepare_reshape(X->odims, X->orank, X->dims[0], X->rank[0], t.v, s.v))
			return 0;
	} else if (X->type == REC_GatherV2) {
		s.n = t.n;
		sapp_gen_gather_stra(C->dims[slot], C->rank[slot], S->stage_devices, s.v);
	} else if (f == FAM_REDUCE && X->nin) {
		int r = X->rank[0];
		axes_of(S, X, 1, SA_axis, r, 1, 0, &mask);
		if (sapp_attr_bool(S, X->n, 2, SA_keep_dims, 0)) {
			s = t;
		} else {
			int k = 0;
			for (int d = 0; d < r; d++)
				s.v[d] = (mask & (1 << d)) ? 1 : k < t.n ? t.v[k++] : 1;
			s.n = r;
		}
	} else if (f == FAM_TRANSPOSE && X->nin) {
		int64_t perm[MAX_RANK];
		int r = sapp_attr_ints(S, X->n, 1, SA_perm, perm, MAX_RANK);
		if (r != X->rank[0] || r != t.n)
			return 0;
		s.n = r;
		for (int i = 0; i < r; i++) {
			int a = norm_axis(perm[i], r);
			if (a < 0 || a >= r)
				return 0;
			s.v[a] = t.v[i];
		}
	} else {
		s.n = t.n < X->orank ? t.n : X->orank;
		memcpy(s.v, t.v, (size_t)s.n * sizeof(int64_t));
	}
	if (f == FAM_SQUEEZE && X->nin) {
		int r = X->rank[0];
		int64_t ax[MAX_RANK];
		int k = sapp_attr_ints(S, X->n, 1, SA_axis, ax, MAX_RANK);
		mask = 0;
		if (k <= 0) {
			for (int d = 0; d < r; d++)
				if (X->dims[0][d] == 1)
					mask |= 1 << d;
		} else {
			for (int i = 0; i < k; i++)
				mask |= 1 << norm_axis(ax[i], r);
		}
		Stra u = {r, {0}};
		int j = 0;
		for (int d = 0; d < r; d++)
			u.v[d] = (mask & (1 << d)) ? 1 : j < s.n ? s.v[j++] : 1;
		s = u;
		if (sapp_product(s.v, s.n) != S->stage_devices)
			return 0;
	}
	if (s.n == 0 || stop_prop_at(C))
		return 0;
	if (sapp_product(s.v, s.n) < P->md)
		return below_md(P, sapp_product(s.v, s.n));
	adapt(P, X, &s);
	X->source = SRC_PROPAGATED;
	if (sapp_explaining(S, x))
		explain_prop(X, "backward from", C, &s, P->md);
	return 1;
}

/* ------------------------------------------------------------ the no-strategy list */

/* The no-strategy list is visited from its end to its start; an operator
 * is looked at again only when a neighbour got a strategy since (it is
 * "dirty"), or at the start of a round when a smaller min_devices is
 * what its last attempt lacked (need[]): every other attempt would fail
 * exactly as before, so the visits that change anything are MindSpore's,
 * in its order, and the work is linear.
 *
 * The dirty positions of a direction are bit sets: `cur`, those the
 * running pass still reaches (all below its cursor, so the next one is
 * the highest bit below it), and `next`, those for the following pass. */
typedef struct Bits {
	uint64_t *w;
	uint32_t nw;
} Bits;

static int bit_get(const Bits *b, uint32_t i)
{
	return (int)((b->w[i >> 6] >> (i & 63)) & 1);
}

static void bit_set(Bits *b, uint32_t i)
{
	b->w[i >> 6] |= (uint64_t)1 << (i & 63);
}

/* the highest set bit below `below`, cleared; -1 if none */
static int32_t bit_take_below(Bits *b, int64_t below)
{
	if (below <= 0)
		return -1;
	int64_t k = (below - 1) >> 6;
	uint64_t m = b->w[k] & (~(uint64_t)0 >> (63 - ((below - 1) & 63)));
	while (!m) {
		if (--k < 0)
			return -1;
		m = b->w[k];
	}
	int hi = 0; /* the highest set bit of m */
	for (int step = 32; step; step /= 2)
		if (m >> step) {
			m >>= step;
			hi += step;
		}
	int32_t i = (int32_t)(k * 64 + hi);
	b->w[k] &= ~((uint64_t)1 << (i & 63));
	return i;
}

typedef struct Queue {
	Bits cur[2], next[2]; /* [0] forward, [1] backward */
	int active;            /* direction of the running pass, -1 none */
	int32_t cursor;
	uint32_t *list;        /* no-strategy list: position -> operator */
	uint32_t n;
	uint8_t *done;         /* per position: has its strategy */
	int32_t *need[2];      /* per position: -1 look again every round, else Prop.need
				* of the last attempt in that direction */
} Queue;

static void mark(Sapp *S, Queue *q, uint32_t z, int dir)
{
	const SappOp *Z = &S->ops[z];
	if (Z->nspos < 0 || Z->has_s)
		return;
	uint32_t pos = (uint32_t)Z->nspos;
	if (bit_get(&q->cur[dir], pos) || bit_get(&q->next[dir], pos))
		return; /* dirty already */
	if (q->active == dir && Z->nspos < q->cursor)
		bit_set(&q->cur[dir], pos);
	else
		bit_set(&q->next[dir], pos);
}

static void decided(Sapp *S, Queue *q, uint32_t y)
{
	SappOp *Y = &S->ops[y];
	for (uint32_t k = 0; k < Y->ncons; k++)
		mark(S, q, Y->cons_op[k], 0);
	for (uint32_t i = 0; i < Y->nin; i++)
		if (Y->prod[i] >= 0)
			mark(S, q, (uint32_t)Y->prod[i], 1);
}

/* a new round with min_devices md: every operator that may now succeed.
 * The ones still dirty from the passes before stay marked: a V3 round ends
 * with none, but V1's single forward pass leaves the consumers of what its
 * backward pass decided. */
static void mark_round(Queue *q, int64_t md)
{
	for (int dir = 0; dir < 2; dir++) {
		for (uint32_t i = 0; i < q->n; i++)
			if (!q->done[i] && (q->need[dir][i] < 0 || q->need[dir][i] >= md))
				bit_set(&q->next[dir], i);
	}
}

static uint32_t run_pass(Prop *P, Queue *q, int dir)
{
	Sapp *S = P->S;
	Bits t = q->cur[dir];
	q->cur[dir] = q->next[dir];
	q->next[dir] = t;
	memset(t.w, 0, t.nw * sizeof(uint64_t));
	q->active = dir;
	q->cursor = INT32_MAX;
	uint32_t changed = 0;
	int32_t pos;
	while ((pos = bit_take_below(&q->cur[dir], q->cursor < (int32_t)q->n ? q->cursor : (int32_t)q->n)) >= 0) {
		uint32_t x = q->list[pos];
		q->cursor = pos;
		if (q->done[pos])
			continue;
		P->need = 0;
		if (dir ? backward(P, x) : forward(P, x)) {
			changed++;
			q->done[pos] = 1;
			decided(S, q, x);
		} else {
			/* --explain shows every attempt at its operator */
			q->need[dir][pos] = sapp_explaining(S, x) ? -1 : P->need;
		}
	}
	q->active = -1;
	return changed;
}

/* ------------------------------------------------------------ kept operators (§4.2) */

static void copy_main(Sapp *S, uint32_t x)
{
	SappOp *X = &S->ops[x];
	const PartNode *R = &S->part[S->rec[x].kidx];
	if (X->pinned) {
		X->has_s = 1;
		X->source = SRC_PINNED;
		return;
	}
	X->source = SRC_SEARCHED;
	X->has_s = 1;
	if (x == (uint32_t)S->vd) {
		for (uint32_t i = 0; i < X->nin; i++) {
			int64_t *v = sin_of(X, i);
			for (int d = 0; d < X->rank[i]; d++)
				v[d] = 1;
			if (!S->o->full_batch && X->rank[i])
				v[0] = X->dims[i][0] < S->stage_devices ? X->dims[i][0] : S->stage_devices;
		}
		sapp_dataset_given(S, X);
		return;
	}
	if (X->type == REC_SparseSoftmaxCrossEntropyWithLogits || X->type == REC_UnsortedSegmentOp) {
		for (uint32_t i = 0; i < X->nin; i++) {
			int64_t *v = sin_of(X, i);
			for (int d = 0; d < X->rank[i]; d++)
				v[d] = 1;
			if (X->rank[i])
				v[0] = X->dims[i][0] < S->stage_devices ? X->dims[i][0] : S->stage_devices;
		}
		return;
	}
	for (uint32_t i = 0; i < X->nin; i++) {
		int64_t *v = sin_of(X, i);
		int r = X->rank[i];
		Dim4 c = i < R->nargs && i < 2 ? R->acut[i] : (Dim4){{1, 1, 1, 1}};
		if ((X->type == REC_MatMul || X->type == REC_BatchMatMul) && i < 2 && (i == 0 ? X->ta : X->tb) && r >= 2) {
			int64_t tmp = c.d[2];
			c.d[2] = c.d[3];
			c.d[3] = tmp;
		}
		for (int d = 0; d < r; d++)
			v[d] = r <= 4 ? c.d[4 - r + d] : 1;
	}
	/* BatchNorm's per-channel operands (scale, bias, mean, variance) must be
	 * split like the channel dimension of its input: MindSpore's generic
	 * strategy leaves them (1) even when the batch-parallel rule cut the
	 * channels, which no BatchNorm operator accepts (the layouts pass
	 * rejects it) -- derive them from input 0 instead. */
	if (X->type == REC_BatchNorm && X->nin && X->rank[0] >= 2)
		for (uint32_t i = 1; i < X->nin; i++)
			if (X->rank[i] == 1)
				sin_of(X, i)[0] = sin_of(X, 0)[1];
	/* PReLU's slopes likewise (PReLUInfo, mindspore/ccsrc/frontend/parallel/
	 * ops_info/prelu_info.cc, wants them split like the channel), unless it
	 * has one slope shared by every channel */
	if (X->type == REC_PReLU && X->nin == 2 && X->rank[0] >= 2 && X->rank[1] == 1)
		sin_of(X, 1)[0] = X->dims[1][0] == 1 ? 1 : sin_of(X, 0)[1];
	/* the softmax loss reduces over its class axis and takes no split there
	 * (the batch-parallel rule would cut it once the batch is exhausted) */
	if (X->type == REC_SoftmaxCrossEntropyWithLogits)
		for (uint32_t i = 0; i < X->nin; i++)
			if (X->rank[i] >= 2)
				sin_of(X, i)[X->rank[i] - 1] = 1;
	if (X->type == REC_LayerNorm && X->nin) {
		int64_t b = 1;
		sapp_attr_int(S, X->n, -1, SA_begin_norm_axis, &b);
		int r = X->rank[0], bb = norm_axis(b, r);
		for (int d = bb < 0 ? 0 : bb; d < r; d++)
			sin_of(X, 0)[d] = 1;
	}
}

/* ExtraShardMatmulOnBatchDim (§4.1 step 0): K-cut + all-reduce becomes
 * K-cut + reduce-scatter on the rows */
static void extra_shard_matmul(Sapp *S)
{
	for (uint32_t i = 0; i < S->nkept; i++) {
		uint32_t x = S->kept[i];
		SappOp *X = &S->ops[x];
		PartNode *R = &S->part[i];
		if (X->type != REC_MatMul || X->pinned || !R->nargs || X->orank != 2)
			continue;
		int64_t a = R->acut[0].d[2] * R->acut[0].d[3];
		if (a > S->stage_devices)
			a = S->stage_devices;
		int64_t o = R->ocut.d[2] * R->ocut.d[3];
		if (o && a / o > 1) {
			R->ocut.d[2] *= a / o;
			X->os[0] = R->ocut.d[2];
			X->os[1] = R->ocut.d[3];
			X->has_os = 1;
		}
	}
}

/* ModifyParamSharingOpsStrategy (§4.7): a Gather sharing its table with a
 * Cast, MatMul or Mul takes that operator's strategy for the table (the
 * parameters with a value behind the operands are SappOp.param).  The
 * tables are few: sorted by node id, the last Gather of a table in
 * operator order answers for it. */
typedef struct Table {
	uint32_t id, seq; /* the parameter's node id; the Gather's rank in operator order */
	int32_t gather;
} Table;

static int table_cmp(const void *a, const void *b)
{
	const Table *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int32_t gather_of(const Table *t, uint32_t n, uint32_t id)
{
	uint32_t lo = 0, hi = n; /* the first entry with a larger id */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (t[mid].id <= id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && t[lo - 1].id == id ? t[lo - 1].gather : -1;
}

static void param_sharing(Sapp *S)
{
	Vec(Table) tab = {0};
	for (uint32_t x = 0; x < S->nops; x++) {
		SappOp *X = &S->ops[x];
		if (X->type != REC_GatherV2 || X->nin < 2 || !X->n)
			continue;
		if (X->param[0]) {
			Table t = {X->param[0] - 1, tab.n, (int32_t)x};
			vec_push(&tab, t);
		}
	}
	if (tab.n)
		qsort(tab.a, tab.n, sizeof *tab.a, table_cmp);
	for (uint32_t y = 0; tab.n && y < S->nops; y++) {
		SappOp *Y = &S->ops[y];
		int slot = -1;
		if (op_is(Y, OP_Cast) || op_is(Y, OP_Mul))
			slot = 0;
		else if (Y->type == REC_MatMul)
			slot = 1;
		if (slot < 0 || (uint32_t)slot >= Y->nin || !Y->has_s || !Y->param[slot])
			continue;
		int32_t g = gather_of(tab.a, tab.n, Y->param[slot] - 1);
		if (g < 0)
			continue;
		SappOp *G = &S->ops[g];
		int64_t *ps = sin_of(G, 0), *ys = sin_of(Y, (uint32_t)slot);
		int r = G->rank[0] < Y->rank[slot] ? G->rank[0] : Y->rank[slot];
		for (int d = 0; d < G->rank[0]; d++)
			ps[d] = d < r ? ys[d] : 1;
		int64_t used = sapp_product(ps, G->rank[0]);
		int64_t *is = sin_of(G, 1);
		for (int d = 0; d < G->rank[1]; d++)
			is[d] = 1;
		if (G->rank[1] && used > 0)
			is[0] = S->stage_devices / used > 0 ? S->stage_devices / used : 1;
		if (sapp_explaining(S, (uint32_t)g)) {
			char a[256], b[256];
			fprintf(stderr, "sapp: explain: %s: table shared with %s, strategy taken from it\n",
				sapp_op_label(G, a, sizeof a), sapp_op_label(Y, b, sizeof b));
		}
	}
	vec_free(&tab);
}

/* SetParamStrategy + ApplyParamStrategy (§4.7, inference): the operators
 * reading one weight (MatMul and BatchMatMul in their input 1, the others
 * in their input 0, seen through Load) all take the strategy of the one
 * that uses the most devices for it (ties: the smaller slice, dims/shards
 * summed; then the first in operator order).  A Gather adds an index
 * strategy for the devices the table leaves (if its gather axis is whole);
 * a MatMul or BatchMatMul cuts its input 0's reduction dimension like the
 * weight's; a StridedSlice takes it as it is (CheckDivisible); the others
 * adapt it (§4.6).  Decisions where the spec is silent: pinned users keep
 * their strategy; the chosen user is not adapted again (its strategy
 * already has that weight strategy); BatchMatMul is treated like MatMul
 * rather than adapting a weight strategy as if it were an output one. */
static int param_slot(const SappOp *X)
{
	return X->type == REC_MatMul || X->type == REC_BatchMatMul ? 1 : 0;
}

static Node *slot_weight(const SappOp *X)
{
	uint32_t slot = (uint32_t)param_slot(X);
	if (!X->n || slot >= X->nin || X->arg[slot] >= X->src->nargs)
		return NULL;
	const Value *v = &X->src->args[X->arg[slot]];
	Node *p = v->kind == V_NODE ? ir_look_through(v->u.node) : NULL;
	return p && p->kind == NK_PARAM && p->has_default ? p : NULL;
}

static void apply_param(Prop *P, SappOp *U, const Stra *w, const SappOp *from)
{
	Sapp *S = P->S;
	uint32_t slot = (uint32_t)param_slot(U);
	if (U->type == REC_GatherV2 && U->nin >= 2) {
		int64_t axis = 0;
		sapp_attr_int(S, U->n, 2, SA_axis, &axis);
		int a = norm_axis(axis, w->n);
		sapp_set_input(U, 0, w->v, w->n, 1);
		int64_t used = sapp_product(w->v, w->n), *is = sin_of(U, 1);
		for (int d = 0; d < U->rank[1]; d++)
			is[d] = 1;
		if (U->rank[1] && a >= 0 && a < w->n && w->v[a] == 1 && used > 0 && S->stage_devices / used > 1)
			is[0] = S->stage_devices / used;
	} else if ((U->type == REC_MatMul || U->type == REC_BatchMatMul) && U->nin >= 2 && w->n >= 2 &&
		   U->rank[0] >= 2) {
		sapp_set_input(U, 1, w->v, w->n, 1);
		int64_t wk = U->tb ? w->v[w->n - 1] : w->v[w->n - 2];
		int r0 = U->rank[0], kd = U->ta ? r0 - 2 : r0 - 1;
		int64_t *a = sin_of(U, 0);
		a[kd] = wk;
		/* the operator uses (input 0's cuts) x (the weight's column
		 * cuts) devices: input 0's other cuts give way to fit the stage
		 * (the spec does not say; a MatMul keeping its row cuts next to
		 * a model-parallel weight would need more devices than exist) */
		int64_t cols = U->tb ? w->v[w->n - 2] : w->v[w->n - 1];
		/* a BatchMatMul's batch dimensions (aligned from the right) are
		 * cut like the weight's: MindSpore wants the two inputs' batch
		 * cuts equal (CheckRelevantDimension, ops_info/matmul_info.cc);
		 * they were left as input 0 had them */
		uint32_t fixed = 0;
		int64_t used = wk * cols;
		for (int d = 0; U->type == REC_BatchMatMul && d < r0 - 2; d++) {
			int wd = d - (r0 - w->n);
			if (wd < 0 || wd >= w->n - 2 || U->dims[0][d] == 1 || U->dims[1][wd] == 1)
				continue;
			a[d] = w->v[wd];
			used *= a[d];
			fixed |= 1u << d;
		}
		int64_t left = S->stage_devices / (used > 0 ? used : 1);
		for (int d = 0; d < r0; d++)
			if (d != kd && !(fixed >> d & 1)) {
				a[d] = gcd64(a[d], left > 0 ? left : 1);
				left /= a[d];
			}
	} else if (fam(U) == FAM_STRIDEDSLICE) {
		check_divisible(U, w);
	} else {
		adapt(P, U, w);
	}
	U->has_s = 1;
	if (sapp_explaining(S, (uint32_t)(U - S->ops))) {
		char a[256], b[256], st[128];
		fmt_stra(w, st, sizeof st);
		fprintf(stderr, "sapp: explain: %s: input %u reads a weight shared with %s, which splits it most: %s\n",
			sapp_op_label(U, a, sizeof a), slot + 1, sapp_op_label(from, b, sizeof b), st);
		explain_prop(U, "weight strategy applied", NULL, NULL, P->md);
	}
}

static void param_strategy_v1(Prop *P)
{
	Sapp *S = P->S;
	Module *m = S->m;
	int32_t *head = xmalloc((m->next_id + 1) * sizeof *head), *tail = xmalloc((m->next_id + 1) * sizeof *tail);
	int32_t *next = xmalloc((S->nops + 1) * sizeof *next);
	for (uint32_t i = 0; i <= m->next_id; i++)
		head[i] = tail[i] = -1;
	for (uint32_t x = 0; x < S->nops; x++) {
		next[x] = -1;
		const Node *p = S->ops[x].has_s ? slot_weight(&S->ops[x]) : NULL;
		if (!p || p->id > m->next_id)
			continue;
		if (tail[p->id] < 0)
			head[p->id] = (int32_t)x;
		else
			next[tail[p->id]] = (int32_t)x;
		tail[p->id] = (int32_t)x;
	}
	for (uint32_t id = 0; id <= m->next_id; id++) {
		if (head[id] < 0 || next[head[id]] < 0)
			continue; /* one user: nothing to share */
		int32_t best = -1;
		int64_t bdev = 0;
		double bsum = 0;
		for (int32_t x = head[id]; x >= 0; x = next[x]) {
			SappOp *X = &S->ops[x];
			uint32_t slot = (uint32_t)param_slot(X);
			const int64_t *v = sin_of(X, slot);
			int64_t dev = sapp_product(v, X->rank[slot]);
			double sum = 0;
			for (int d = 0; d < X->rank[slot]; d++)
				sum += (double)X->dims[slot][d] / (double)v[d];
			if (best < 0 || dev > bdev || (dev == bdev && sum < bsum)) {
				best = x;
				bdev = dev;
				bsum = sum;
			}
		}
		const SappOp *B = &S->ops[best];
		Stra w;
		input_stra((SappOp *)B, (uint32_t)param_slot(B), &w);
		for (int32_t x = head[id]; x >= 0; x = next[x]) {
			SappOp *U = &S->ops[x];
			if (x == best || U->pinned || U->rank[param_slot(U)] != w.n)
				continue;
			apply_param(P, U, &w, B);
		}
	}
	free(head);
	free(tail);
	free(next);
}

/* the inference clean-up (§4.8): the last operator of the entry graph (in
 * module order, the one nearest the output; MindSpore's list runs the
 * other way, but "back to raw" is meant for the output) and the
 * VirtualDataset take the all-ones strategy, so every device holds the
 * whole result; pinned operators keep theirs */
static void make_raw(Sapp *S, SappOp *X, const char *what)
{
	for (uint32_t i = 0; i < X->nin; i++)
		sapp_set_input(X, i, NULL, 0, 1);
	X->has_os = 0;
	X->has_s = 1;
	X->source = SRC_DEFAULT;
	if (sapp_explaining(S, (uint32_t)(X - S->ops)))
		explain_prop(X, what, NULL, NULL, 1);
}

static void inference_cleanup(Sapp *S)
{
	const Graph *g = ir_entry(S->m);
	for (uint32_t x = S->nops; x-- > 0;) {
		SappOp *X = &S->ops[x];
		if (!X->n || X->n->g != g || !X->has_s)
			continue;
		if (!X->pinned)
			make_raw(S, X, "inference: the last operator keeps its result whole");
		break;
	}
	if (S->vd >= 0 && !S->ops[S->vd].pinned)
		make_raw(S, &S->ops[S->vd], "inference: the VirtualDataset is left whole");
}

/* FixInvalidStra (§4.8) */
/* A strategy's device count must divide the stage's (the repeat count is
 * whole).  Powers of two always do; with prime levels (6144 = 2^11 * 3) a
 * rule that takes min(dimension, devices) may not: keep, left to right,
 * the part of each entry that still divides what is left. */
static void fit_devices(int64_t *v, int n, int64_t devices)
{
	int64_t left = devices;
	for (int d = 0; d < n; d++) {
		if (v[d] == 1)
			continue; /* gcd(1, left) = 1 */
		v[d] = gcd64(v[d], left);
		left /= v[d];
	}
}

/* The operators reading one MakeTuple (Concat and AddN take its elements as
 * their inputs) must lay its elements out alike: the lowering refuses
 * readers that disagree, as MindSpore does ("has multiple users, but the
 * TensorInfo are different", CheckMakeTupleSplit, frontend/parallel/
 * step_parallel_utils.cc).  The search decides each reader alone, so here
 * the readers all take, dimension by dimension, the greatest common divisor
 * of their element strategies (one reader's elements already share one):
 * cuts only shrink, so a Concat's axis and an operator kept whole stay so.
 * A group with a pinned (user) strategy is left as it is. */
typedef struct TupleReader {
	uint32_t tuple, op;
} TupleReader;

static int reader_cmp(const void *a, const void *b)
{
	const TupleReader *x = a, *y = b;
	return x->tuple != y->tuple ? (x->tuple < y->tuple ? -1 : 1) : (x->op > y->op) - (x->op < y->op);
}

static void tuple_readers_agree(Sapp *S)
{
	Vec(TupleReader) rd = {0};
	for (uint32_t x = 0; x < S->nops; x++) {
		const SappOp *X = &S->ops[x];
		if (X->n && X->src && X->src != X->n && X->has_s && X->nin && ir_node_is_op(X->src, OP_MakeTuple)) {
			TupleReader t = {X->src->id, x};
			vec_push(&rd, t);
		}
	}
	if (rd.n > 1)
		qsort(rd.a, rd.n, sizeof *rd.a, reader_cmp);
	for (uint32_t i = 0, j; i < rd.n; i = j) {
		for (j = i + 1; j < rd.n && rd.a[j].tuple == rd.a[i].tuple;)
			j++;
		if (j - i < 2)
			continue;
		int r = S->ops[rd.a[i].op].rank[0], keep = 0;
		int64_t c[MAX_RANK];
		for (int d = 0; d < r; d++)
			c[d] = 0;
		for (uint32_t k = i; k < j; k++) {
			SappOp *Y = &S->ops[rd.a[k].op];
			keep |= Y->pinned;
			for (uint32_t e = 0; e < Y->nin; e++) {
				keep |= Y->rank[e] != r;
				for (int d = 0; d < r && Y->rank[e] == r; d++)
					c[d] = gcd64(c[d], sin_of(Y, e)[d]);
			}
		}
		for (uint32_t k = i; k < j && !keep; k++) {
			SappOp *Y = &S->ops[rd.a[k].op];
			for (uint32_t e = 0; e < Y->nin; e++)
				sapp_set_input(Y, e, c, r, 1);
		}
	}
	vec_free(&rd);
}

static void fix_invalid(Sapp *S)
{
	for (uint32_t x = 0; x < S->nops; x++) {
		SappOp *X = &S->ops[x];
		if (x + 8 < S->nops) /* the shapes live in the IR */
			for (uint32_t i = 0; i < S->ops[x + 8].nin; i++)
				sapp_prefetch(S->ops[x + 8].dims[i]);
		if (!X->has_s || X->pinned)
			continue;
		for (uint32_t i = 0; i < X->nin; i++) {
			fix_entries(X, i);
			fit_devices(sin_of(X, i), X->rank[i], S->stage_devices);
		}
		if (X->has_os)
			for (int d = 0; d < X->orank; d++)
				if (X->os[d] < 1 || X->odims[d] % X->os[d] != 0)
					X->os[d] = 1;
		/* ExtraShardMatmulOnBatchDim's output strategy means "reduce-scatter
		 * the k partial sums over the rows": (a*k, b) for ((a, k), (k, b)).
		 * When the fix-ups above broke that shape (rows not divisible by
		 * a*k), the MatMul keeps its AllReduce instead. */
		if (X->has_os && X->type == REC_MatMul && X->nin >= 2 && X->rank[0] == 2 && X->rank[1] == 2) {
			const int64_t *a = sin_of(X, 0), *b = sin_of(X, 1);
			int64_t a_row = X->ta ? a[1] : a[0], a_k = X->ta ? a[0] : a[1];
			int64_t b_col = X->tb ? b[0] : b[1];
			if (a_k <= 1 || X->os[0] != a_row * a_k || X->os[1] != b_col)
				X->has_os = 0;
		}
	}
}

void sapp_generate(Sapp *S)
{
	Prop P = {S, 1, 0};
	if (S->devices > S->conf.extra_shard_devices)
		extra_shard_matmul(S);
	for (uint32_t i = 0; i < S->nkept; i++)
		copy_main(S, S->kept[i]);
	/* the no-strategy list: eliminated operators in elimination order (V1:
	 * reversed; the passes run from the end of the list to its start) */
	Queue q;
	memset(&q, 0, sizeof q);
	q.active = -1;
	q.list = xmalloc((S->nelim + 1) * sizeof *q.list);
	for (uint32_t i = 0; i < S->nelim; i++) {
		uint32_t x = S->elim_order[S->predict ? S->nelim - 1 - i : i];
		SappOp *X = &S->ops[x];
		if (!S->predict && (X->type == REC_StandAlone || X->type == REC_BatchParallel)) {
			if (X->type == REC_BatchParallel)
				data_parallel(S, X);
			X->has_s = 1;
			X->source = SRC_PROPAGATED;
			continue;
		}
		X->nspos = (int32_t)q.n;
		q.list[q.n++] = x;
	}
	uint32_t nw = q.n / 64 + 1;
	q.done = xcalloc(q.n + 1, 1);
	for (int dir = 0; dir < 2; dir++) {
		q.cur[dir] = (Bits){xcalloc(nw, sizeof(uint64_t)), nw};
		q.next[dir] = (Bits){xcalloc(nw, sizeof(uint64_t)), nw};
		q.need[dir] = xmalloc((q.n + 1) * sizeof(int32_t));
		for (uint32_t i = 0; i < q.n; i++)
			q.need[dir][i] = -1;
	}
	/* V1: one forward pass, then one backward pass, any device count */
	if (S->predict) {
		mark_round(&q, 1);
		run_pass(&P, &q, 0);
		mark_round(&q, 1);
		run_pass(&P, &q, 1);
	}
	/* V3: min_devices = stage devices, then smaller (one prime less each round) */
	for (int64_t md = S->stage_devices; !S->predict && md >= 2;) {
		P.md = md;
		mark_round(&q, md);
		for (;;) {
			if (run_pass(&P, &q, 0))
				continue;
			if (run_pass(&P, &q, 1))
				continue;
			break;
		}
		int sp = smallest_prime(md);
		if (!sp)
			break;
		md /= sp;
	}
	P.md = 1;
	mark_round(&q, 1);
	for (;;) {
		uint32_t c = run_pass(&P, &q, 0);
		c += run_pass(&P, &q, 1);
		if (!c)
			break;
	}
	/* GenerateRemainingOperatorStrategy: all ones through the adapter */
	for (uint32_t i = 0; i < q.n; i++) {
		SappOp *X = &S->ops[q.list[i]];
		if (X->has_s)
			continue;
		Stra s = {0, {0}};
		for (uint32_t k = 0; k < X->nin; k++)
			if (X->rank[k] > s.n)
				s.n = X->rank[k];
		for (int d = 0; d < s.n; d++)
			s.v[d] = 1;
		adapt(&P, X, &s);
		X->source = SRC_DEFAULT;
		if (sapp_explaining(S, q.list[i]))
			explain_prop(X, "no neighbour gave a strategy; default", NULL, &s, 1);
	}
	for (int dir = 0; dir < 2; dir++) {
		free(q.cur[dir].w);
		free(q.next[dir].w);
		free(q.need[dir]);
	}
	free(q.done);
	free(q.list);
	if (S->predict)
		param_strategy_v1(&P);
	else
		param_sharing(S);
	fix_invalid(S);
	if (S->predict)
		inference_cleanup(S);
	tuple_readers_agree(S);
}

/* semi_auto: the default batch-parallel strategy: dim 0 of every
 * activation input cut by the device count when it divides.  Like
 * MindSpore's split flags, weights (parameters with a value, seen through
 * Load/Cast) and broadcast operands of element-wise operators stay whole: splitting a
 * weight's first dimension is model parallelism, not batch parallelism. */
/* The VirtualDataset's inputs take the strategies the user gave (an
 * explicit _VirtualDataset's in_strategy, --dataset-strategy=TUPLE, as
 * MindSpore's dataset_strategy sets the VirtualDataset's), where given. */
void sapp_dataset_given(const Sapp *S, SappOp *X)
{
	const Graph *g = ir_entry(S->m);
	uint32_t ord = 0, p = 0;
	for (uint32_t i = 0; i < X->nin; i++) {
		uint32_t k = X->arg[i];
		if (!X->n && !S->getnext) {
			/* implicit: X->arg[i] is a parameter index; k its place
			 * among the dataset inputs */
			for (; g && p < X->arg[i] && p < g->params.n; p++)
				ord += ir_is_dataset_input(g->params.a[p]);
			k = ord;
		}
		int64_t s[MAX_RANK];
		if (ir_dataset_split(S->o, X->n, k, X->rank[i], s))
			memcpy(sin_of(X, i), s, (size_t)X->rank[i] * sizeof *s);
	}
}

int sapp_default_batch(const Sapp *S, SappOp *X)
{
	AttnInfo ai;
	char why[8];
	if (X->n && X->fam == FAM_ATTENTION && ir_attention_info(X->n, &ai, why, sizeof why) == 1) {
		/* the batch of the attention, wherever its layout keeps it (SBH:
		 * dimension 1); the other operands follow as MindSpore derives them */
		Stra s = {X->nin ? X->rank[0] : 0, {0}};
		for (int d = 0; d < s.n; d++)
			s.v[d] = 1;
		if (ai.batch % S->stage_devices == 0)
			s.v[ai.bdim] = S->stage_devices;
		flash_attention(X, &s);
		X->has_s = 1;
		return 0;
	}
	int maxr = 0;
	for (uint32_t i = 0; i < X->nin; i++)
		if (X->rank[i] > maxr)
			maxr = X->rank[i];
	for (uint32_t i = 0; i < X->nin; i++) {
		int64_t *v = sin_of(X, i);
		for (int d = 0; d < X->rank[i]; d++)
			v[d] = 1;
		int weight = 0;
		if (X->n && X->arg[i] < X->src->nargs && X->src->args[X->arg[i]].kind == V_NODE) {
			const Node *p = ir_look_through(X->src->args[X->arg[i]].u.node);
			while (p && ir_node_is_op(p, OP_Cast) && p->nargs && p->args[0].kind == V_NODE)
				p = ir_look_through(p->args[0].u.node);
			weight = p && p->kind == NK_PARAM && p->has_default;
		}
		int fam = X->n ? op_table[X->n->op].family : FAM_OPAQUE;
		int bcast = (fam == FAM_ELEMWISE || fam == FAM_BIASADD) && X->rank[i] < maxr;
		/* RandomChoiceWithMask clears its input's split flag and the MoE
		 * routing operators map every tensor unsplit; ScatterDiv's
		 * indices may not be split and its variable is a weight
		 * (random_choice_with_mask_info.cc, moe_init_routing_info.cc,
		 * scatter_math_ops_info.cc): their default is all ones */
		int whole = fam == FAM_UNSPLIT || fam == FAM_SCATTER;
		/* a StandAloneInfo (the fallback's LpNorm with an indivisible
		 * dimension 0, graph.c) splits nothing */
		whole |= X->type == REC_StandAlone;
		/* CumSum/CumProd: the batch split flag is cleared when the
		 * accumulated axis is dimension 0, so the input stays whole
		 * rather than split on the axis CheckStrategy refuses
		 * (CumOpBase::ReComputeBatchSplitFlagList, mindspore-ai/mindspore,
		 * mindspore/ccsrc/frontend/parallel/ops_info/activation_info.cc) */
		int mask = 0;
		if (fam == FAM_CUM && i == 0)
			axes_of(S, X, 1, SA_axis, X->rank[0], 0, -1, &mask);
		/* Split along dimension 0 (or a 1-D input): all ones, since the
		 * split axis may not be cut (SplitInfo::GenerateBatchStrategies,
		 * mindspore/ccsrc/frontend/parallel/ops_info/split_info.cc) */
		if (fam == FAM_SPLIT && i == 0) {
			axes_of(S, X, 1, SA_axis, X->rank[0], 0, 0, &mask);
			mask |= X->rank[0] == 1;
		}
		whole |= mask & 1;
		/* Concat: every element is cut alike, weights too, unless the
		 * concatenation axis is dimension 0; then none is
		 * (ConcatInfo::ReComputeBatchSplitFlagList, ops_info/concat_info.cc) */
		if (fam == FAM_CONCAT) {
			axes_of(S, X, 1, SA_axis, X->rank[i], 0, 0, &mask);
			whole |= mask & 1;
			weight = 0;
		}
		/* BatchMatMul: both inputs cut along dimension 0, a weight too
		 * (BatchMatMulInfo::GenerateBatchStrategies, ops_info/
		 * matmul_info.cc), when they have the same rank; a weight of
		 * lower rank is broadcast over the batch and stays whole */
		if (fam == FAM_BATCHMATMUL && X->nin == 2 && X->rank[0] == X->rank[1] && X->rank[i] > 2)
			weight = 0;
		/* element-wise arithmetic and AddN: an input's flag is whether its
		 * dimension 0, broadcast to the output's rank, is not 1, weights
		 * included (ArithmeticBase::ReComputeBatchSplitFlagList,
		 * ops_info/arithmetic_info.cc; AddNInfo, addn_info.cc) */
		if (fam == FAM_ELEMWISE && X->n->op != OP_Select && X->rank[i] == maxr)
			weight = 0;
		if (weight || bcast || whole)
			continue;
		if (X->rank[i] && X->dims[i][0] % S->stage_devices == 0)
			v[0] = S->stage_devices;
	}
	if (S->vd >= 0 && X == &S->ops[S->vd])
		sapp_dataset_given(S, X);
	X->has_s = 1;
	return 0;
}
