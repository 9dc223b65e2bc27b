/* cost.c - SAPP's symbolic cost model (spec sapp-search.md §2).
 *
 * For the rec node being decided at one level, every option (one dimension
 * cut by the level's prime p, or no cut) gets
 *     total = operator cost + redistribution penalty,
 * the cheapest option wins, ties going to the earliest option in the listed
 * order (§8.1), and an invalid option costs SAPP_INVALID.  Sizes are taken
 * at the current granularity (shape / shard count).  MindSpore's "/2" of a
 * halving is "/p" here, its "dim >= 2 and even" is "dim divisible by p";
 * for p = 2 the formulas are MindSpore's.
 *
 * Redistribution (§2.2): against the neighbours decided earlier in the same
 * level (and the pinned ones, §4.9), a shared tensor whose cut this level
 * differs from the option's pattern costs REDIS_COEF x its current size.
 * Shared means "adjacent": the producer's output, mapped through the
 * Transpose/Reshape mapping of the contracted edge, has exactly the shape of
 * the consumer's input.  The producer's one-level pattern is compared after
 * the same mapping (MindSpore compares raw dims; with an identity mapping the
 * two agree).  Kept MindSpore details: a producer slot is the position in the
 * compressed input list and its penalty is sized by input 0; the consumer
 * rule compares with the consumer's input-0 pattern.  Each (producer, slot)
 * pair is counted once (§2.2 recommendation).
 */
#include <math.h>
#include <string.h>

#include "sapp.h"

const SappConf sapp_default_conf = {
	.mem_coef = 0.1,
	.redis_coef = 16,
	.expert_coef = 1.5,
	.replicate_below = 350,
	.ascend_cores = 32,
	.bmm_coef = 1,
	.max_inputs = SAPP_MAX_IN,
	.weight_order_devices = 32,
	.weight_order_mbs = 8,
	.extra_shard_devices = 32,
	.vd_forward_refused = 1,
	.only_same_shape = 1,
	.replicate_option = 1,
};

static const Dim4 ONES = {{1, 1, 1, 1}};

static Dim4 cut1(int d, int p)
{
	Dim4 x = ONES;
	x.d[d] = p;
	return x;
}

static int64_t gran(const Dim4 *shape, const Dim4 *cut, int d)
{
	return cut->d[d] ? shape->d[d] / cut->d[d] : shape->d[d];
}

static int divisible(int64_t g, int p)
{
	return g >= p && g % p == 0;
}

/* One decided neighbour's demand on the node being decided: an option whose
 * pattern on `row` (0, 1: inputs, 3: a tensor the node never cuts) differs
 * from `pat` pays `cost`; row 2: a consumer, whose input-0 pattern `pat` is
 * compared with the option's output pattern mapped through `map`.
 * Collected once per node and level, then checked against every option. */
typedef struct Demand {
	uint8_t row, ident;
	RecMap map;
	Dim4 pat;
	double cost;
} Demand;

/* the producer-side pattern seen by the consumer through an edge mapping */
static Dim4 map_pattern(const RecMap *m, const Dim4 *pat)
{
	Dim4 r;
	if (!sapp_map_shape(m, pat, &r))
		return ONES;
	return r;
}

static int same4(const Dim4 *a, const Dim4 *b)
{
	return memcmp(a, b, sizeof *a) == 0;
}

/* size_of() from the kept granularity */
static double size4(const Dim4 *g)
{
	double s = 1;
	for (int d = 0; d < 4; d++)
		s *= (double)g->d[d];
	return s;
}

/* the granularity from the shapes (out: the output shape) and the cuts */
void sapp_part_gran(PartNode *N, const Dim4 *out)
{
	for (int d = 0; d < 4; d++) {
		N->g[0].d[d] = gran(&N->arg[0], &N->acut[0], d);
		N->g[1].d[d] = gran(&N->arg[1], &N->acut[1], d);
		N->g[2].d[d] = gran(out, &N->ocut, d);
	}
}

/* would a producer with output `out` feeding slot `slot` of N through
 * `map` ever be adjacent? */
static int producer_adjacent(const Sapp *S, const RecNode *N, const Dim4 *out, const RecMap *map, uint32_t slot)
{
	Dim4 shp;
	if (slot >= N->nargs || !sapp_map_shape(map, out, &shp))
		return 0;
	return !S->conf.only_same_shape || same4(&shp, &N->arg[slot]);
}

static int consumer_adjacent(const Sapp *S, const RecNode *N, const RecNode *C, const RecMap *map)
{
	Dim4 shp;
	if (!sapp_map_shape(map, &N->out, &shp))
		return 0;
	for (uint32_t a = 0; a < C->nargs; a++)
		if (!S->conf.only_same_shape || same4(&shp, &C->arg[a]))
			return 1;
	return 0;
}

static void add_link(RecLink *l, uint32_t *n, uint32_t nb, int row, const RecMap *map)
{
	RecLink *x = &l[(*n)++];
	x->nb = nb;
	x->row = (uint8_t)row;
	x->ident = (uint8_t)sapp_map_is_identity(map);
	x->map = *map;
}

/* The partition view of the kept nodes (S->kept): the dense state, cut
 * only where the user pinned a strategy, nothing decided yet, and each node's links to the kept
 * neighbours that can ever be adjacent, in the order the penalties are
 * summed: input slots, out edges, aux producers.  An eliminated neighbour
 * never decides and a tensor whose shapes differ never costs (§1.7), so
 * neither becomes a link. */
void sapp_part_init(Sapp *S)
{
	RecNode *rec = S->rec;
	uint32_t total = 0;
	for (uint32_t k = 0; k < S->nkept; k++) {
		RecNode *N = &rec[S->kept[k]];
		N->kidx = k;
		total += N->in.n + N->outs.n + N->aux.n;
	}
	S->part = arena_alloc(S->arena, (S->nkept + 1) * sizeof *S->part);
	S->vis = arena_alloc(S->arena, (S->nkept + 1) * sizeof *S->vis);
	RecLink *l = arena_alloc(S->arena, (total + 1) * sizeof *l);
	uint32_t n = 0, maxl = 0;
	for (uint32_t k = 0; k < S->nkept; k++) {
		RecNode *N = &rec[S->kept[k]];
		PartNode *P = &S->part[k];
		P->rec = S->kept[k];
		P->type = N->type;
		P->nargs = N->nargs;
		P->pinned = N->pinned;
		P->arg = N->arg;
		for (int t = 0; t < 2; t++)
			P->acut[t] = N->pinned && t < N->nargs ? N->pin[t] : ONES;
		P->ocut = N->pinned ? N->pin[2] : ONES;
		sapp_part_gran(P, &N->out);
		S->vis[k].lvl = -1;
		P->link = l + n;
		uint32_t n0 = n;
		for (uint32_t s = 0; s < N->in.n; s++) {
			const RecNode *Q = &rec[N->in.a[s].node];
			if (Q->kept && producer_adjacent(S, N, &Q->out, &N->in.a[s].map, s))
				add_link(l, &n, Q->kidx, s < 2 ? (int)s : 3, &N->in.a[s].map);
		}
		for (uint32_t i = 0; i < N->outs.n; i++) {
			const RecEdge *e = &N->outs.a[i];
			const RecNode *C = &rec[e->to];
			if (C->kept && consumer_adjacent(S, N, C, &e->map))
				add_link(l, &n, C->kidx, 2, &e->map);
		}
		for (uint32_t i = 0; i < N->aux.n; i++) {
			const RecAux *a = &N->aux.a[i];
			const RecNode *Q = &rec[a->node];
			if (Q->kept && producer_adjacent(S, N, &Q->out, &a->map, a->idx))
				add_link(l, &n, Q->kidx, a->idx < 2 ? (int)a->idx : 3, &a->map);
		}
		P->nlink = n - n0;
		if (P->nlink > maxl)
			maxl = P->nlink;
	}
	S->ncons_cap = maxl + 1;
	S->cons = xrealloc(S->cons, S->ncons_cap * sizeof(Demand));
}

/* Kept MindSpore details: a producer slot is the position in the
 * compressed input list and its penalty is sized by input 0; the consumer
 * rule compares with the consumer's input-0 pattern. */
static uint32_t collect_demands(Sapp *S, const PartNode *N, int level)
{
	const RecVis *vis = S->vis;
	Demand *d = S->cons;
	uint32_t n = 0;
	int have_in0 = 0, have_out = 0;
	double in0 = 0, outsz = 0;
	for (uint32_t i = 0; i < N->nlink; i++) {
		const RecLink *l = &N->link[i];
		const RecVis *V = &vis[l->nb];
		if (V->lvl != level)
			continue;
		Demand *x = &d[n++];
		x->row = l->row;
		x->ident = l->ident;
		x->map = l->map;
		if (l->row == 2) {
			if (!have_out) {
				outsz = size4(&N->g[2]);
				have_out = 1;
			}
			x->pat = V->in0;
			x->cost = outsz * S->conf.redis_coef;
		} else {
			if (!have_in0) {
				in0 = N->nargs ? size4(&N->g[0]) : 0;
				have_in0 = 1;
			}
			x->pat = l->ident ? V->out : map_pattern(&l->map, &V->out);
			x->cost = in0 * S->conf.redis_coef;
		}
	}
	return n;
}

static double eval_demands(const Sapp *S, const Dim4 mode[3], uint32_t n)
{
	const Demand *d = S->cons;
	double cost = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (d[i].row == 2) {
			Dim4 pat = d[i].ident ? mode[2] : map_pattern(&d[i].map, &mode[2]);
			if (!same4(&pat, &d[i].pat))
				cost += d[i].cost;
		} else if (!same4(d[i].row == 3 ? &ONES : &mode[d[i].row], &d[i].pat)) {
			cost += d[i].cost;
		}
	}
	return cost;
}

double sapp_redis(Sapp *S, const PartNode *N, const Dim4 mode[3], int level)
{
	uint32_t n = collect_demands(S, N, level);
	return eval_demands(S, mode, n);
}

/* ------------------------------------------------------------ options */

typedef struct Ctx {
	Sapp *S;
	const PartNode *N;
	int level, p;
	uint32_t ndemands;
	SappChoice *c;
} Ctx;

/* add an option; mode = the pattern neighbours compare with, eff = what the
 * choice does to input 0, input 1 and the output */
static void add_opt(Ctx *x, const char *name, int valid, double opcost, Dim4 m0, Dim4 m1, Dim4 mo, const Dim4 *eff,
		    int with_redis, double divisor)
{
	SappChoice *c = x->c;
	int k = c->nopt++;
	c->name[k] = name;
	c->mode[k][0] = m0;
	c->mode[k][1] = m1;
	c->mode[k][2] = mo;
	if (eff) {
		c->eff[k][0] = eff[0];
		c->eff[k][1] = eff[1];
		c->eff[k][2] = eff[2];
	} else {
		c->eff[k][0] = m0;
		c->eff[k][1] = m1;
		c->eff[k][2] = mo;
	}
	if (!valid) {
		c->opcost[k] = c->redis[k] = c->total[k] = SAPP_INVALID;
		return;
	}
	c->opcost[k] = opcost;
	c->redis[k] = with_redis && x->ndemands ? eval_demands(x->S, c->mode[k], x->ndemands) : 0;
	c->total[k] = fabs((opcost + c->redis[k]) / divisor);
}

static void pick(SappChoice *c)
{
	c->best = -1;
	double best = SAPP_INVALID;
	for (int k = 0; k < c->nopt; k++)
		if (c->total[k] < best) {
			best = c->total[k];
			c->best = k;
		}
}

static int pipeline_batch_ok(const Sapp *S, int64_t cut)
{
	return S->stages <= 1 || S->mbs > cut;
}

static void matmul_costs(const Sapp *S, const PartNode *N, int p, double *cI, double *cJ, double *cK, double *cR)
{
	double i = (double)N->g[0].d[2], k = (double)N->g[0].d[3];
	double j = (double)N->g[1].d[3];
	*cI = S->conf.mem_coef * j * k / p;
	*cJ = i * k / p;
	*cK = i * j / p;
	double mn = fmin(*cI, fmin(*cJ, *cK));
	*cR = pow(S->conf.expert_coef * mn, 2) / S->conf.replicate_below;
}

static void choose_matmul(Ctx *x)
{
	const PartNode *N = x->N;
	int p = x->p;
	if (N->nargs < 2)
		return;
	double cI, cJ, cK, cR;
	matmul_costs(x->S, N, p, &cI, &cJ, &cK, &cR);
	int64_t i = N->g[0].d[2], k = N->g[0].d[3];
	int64_t j = N->g[1].d[3];
	Dim4 H = cut1(2, p), W = cut1(3, p);
	add_opt(x, "I", divisible(i, p) && pipeline_batch_ok(x->S, N->acut[0].d[2]), cI, H, ONES, H, NULL, 1, 1);
	add_opt(x, "J", divisible(j, p) && N->acut[0].d[3] == 1, cJ, ONES, W, W, NULL, 1, 1);
	add_opt(x, "K", divisible(k, p) && N->acut[1].d[3] == 1, cK, W, H, ONES, NULL, 1, 1);
	add_opt(x, "none", x->S->conf.replicate_option, cR, ONES, ONES, ONES, NULL, 1, 1);
}

static void bmm_costs(const Sapp *S, const PartNode *N, int p, double c[6])
{
	const Dim4 *A = &N->arg[0], *B = &N->arg[1], *ca = &N->acut[0], *cb = &N->acut[1];
	double b = (double)(A->d[0] > B->d[0] ? A->d[0] : B->d[0]) / (double)(ca->d[0] < cb->d[0] ? ca->d[0] : cb->d[0]);
	double e = (double)(A->d[1] > B->d[1] ? A->d[1] : B->d[1]) / (double)(ca->d[1] < cb->d[1] ? ca->d[1] : cb->d[1]);
	double bd = b * e;
	double mc = bd == 1 ? S->conf.ascend_cores : fmax(S->conf.ascend_cores / bd - 1, 0);
	double dA = size4(&N->g[0]) / p, dB = size4(&N->g[1]) / p, dO = size4(&N->g[2]) / p;
	double m = S->conf.expert_coef * fmin(dA, fmin(dB, dO));
	c[0] = mc * m;
	c[1] = mc * m - 1;
	c[2] = dB;
	c[3] = dA;
	c[4] = dO;
	c[5] = m * m / S->conf.replicate_below;
}

static void choose_bmm(Ctx *x)
{
	const PartNode *N = x->N;
	int p = x->p;
	if (N->nargs < 2)
		return;
	double c[6];
	bmm_costs(x->S, N, p, c);
	const Dim4 *ca = &N->acut[0], *cb = &N->acut[1];
	int64_t b = N->g[0].d[0], e = N->g[0].d[1], i = N->g[0].d[2], k = N->g[0].d[3], j = N->g[1].d[3];
	Dim4 Nn = cut1(0, p), C = cut1(1, p), H = cut1(2, p), W = cut1(3, p);
	double div = x->S->conf.bmm_coef;
	add_opt(x, "B", divisible(b, p) && pipeline_batch_ok(x->S, ca->d[0]), c[0], Nn, Nn, Nn, NULL, 1, div);
	add_opt(x, "X", divisible(e, p), c[1], C, C, C, NULL, 1, div);
	add_opt(x, "I", divisible(i, p), c[2], H, ONES, H, NULL, 1, div);
	add_opt(x, "J", divisible(j, p) && ca->d[3] == 1, c[3], ONES, W, W, NULL, 1, div);
	add_opt(x, "K", divisible(k, p) && cb->d[3] == 1, c[4], W, H, ONES, NULL, 1, div);
	add_opt(x, "R", x->S->conf.replicate_option, c[5], ONES, ONES, ONES, NULL, 1, div);
}

static void choose_conv(Ctx *x)
{
	const PartNode *N = x->N;
	int p = x->p;
	if (N->nargs < 2)
		return;
	double tf = size4(&N->g[1]);
	Dim4 Nn = cut1(0, p);
	add_opt(x, "B", divisible(N->g[0].d[0], p), tf / p, Nn, ONES, Nn, NULL, 1, 1);
	/* input h/w, output channels, filter h/w and input channels: disabled
	 * (channel_partition is always false, §2.5) */
	static const char *const off[] = {"I", "J", "K", "DI", "DJ", "Q"};
	for (int k = 0; k < 6; k++)
		add_opt(x, off[k], 0, 0, ONES, ONES, ONES, NULL, 1, 1);
}

static void choose_pool(Ctx *x)
{
	const PartNode *N = x->N;
	int p = x->p;
	static const char *const nm[] = {"n", "c", "h", "w"};
	for (int d = 0; d < 4; d++) {
		Dim4 m = cut1(d, p);
		Dim4 eff[3] = {m, ONES, m};
		int ok = d < 2 && divisible(N->g[2].d[d], p);
		add_opt(x, nm[d], ok, 0, m, m, m, eff, 1, 1);
	}
}

/* CostCommon / CostTensorAdd / CostBiasAdd (§2.7) */
static void choose_elementwise(Ctx *x)
{
	const PartNode *N = x->N;
	int p = x->p;
	static const char *const nm[] = {"n", "c", "h", "w"};
	if (!N->nargs)
		return;
	for (int d = 0; d < 4; d++) {
		Dim4 m = cut1(d, p);
		Dim4 eff[3] = {m, ONES, m};
		if (N->type == REC_ElmWiseOp || (N->type == REC_BiasAdd && d == 3))
			eff[1] = N->nargs > 1 ? m : ONES;
		add_opt(x, nm[d], divisible(N->g[0].d[d], p), 0, m, m, m, eff, 1, 1);
	}
}

/* CostBatchParallel (§2.8): the first cuttable dim of input 0, no penalty */
static void choose_batch_parallel(Ctx *x)
{
	const PartNode *N = x->N;
	int p = x->p;
	static const char *const nm[] = {"n", "c", "h", "w"};
	if (!N->nargs)
		return;
	for (int d = 0; d < 4; d++) {
		Dim4 m = cut1(d, p);
		Dim4 eff[3] = {m, ONES, m};
		if (N->type == REC_SoftmaxCrossEntropyWithLogits) {
			eff[1] = N->nargs > 1 ? m : ONES;
			eff[2] = d == 2 ? cut1(3, p) : ONES; /* [quirk] the per-sample loss is cut on w */
		}
		add_opt(x, nm[d], divisible(N->g[0].d[d], p), 0, m, m, m, eff, 0, 1);
	}
}

static int is_common(int t)
{
	switch (t) {
	case REC_ReLU:
	case REC_Log:
	case REC_Exp:
	case REC_Add:
	case REC_Sub:
	case REC_Mul:
	case REC_Div:
	case REC_Squeeze:
	case REC_Cast:
	case REC_ElmWiseOp:
	case REC_BiasAdd:
		return 1;
	default:
		return 0;
	}
}

static int is_batch_parallel(int t)
{
	switch (t) {
	case REC_BatchNorm:
	case REC_OneHot:
	case REC_PReLU:
	case REC_Softmax:
	case REC_Virtual:
	case REC_BatchParallel:
	case REC_UnsortedSegmentOp:
	case REC_SparseSoftmaxCrossEntropyWithLogits:
	case REC_SoftmaxCrossEntropyWithLogits:
		return 1;
	default:
		return 0;
	}
}

void sapp_choose(Sapp *S, const PartNode *N, int p, int level, SappChoice *c)
{
	c->nopt = 0;
	c->best = -1;
	Ctx x = {S, N, level, p, collect_demands(S, N, level), c};
	if (N->type == REC_MatMul)
		choose_matmul(&x);
	else if (N->type == REC_BatchMatMul)
		choose_bmm(&x);
	else if (N->type == REC_Convolution)
		choose_conv(&x);
	else if (N->type == REC_Pooling)
		choose_pool(&x);
	else if (is_batch_parallel(N->type))
		choose_batch_parallel(&x);
	else if (is_common(N->type))
		choose_elementwise(&x);
	/* Reshape, Unknown, StandAlone and the rest never cut (§2.9) */
	pick(c);
}

/* cut *a by the factors f and keep the granularity *g (shape / cut) with
 * it: (shape / a) / f == shape / (a * f) in integers, so no division
 * by a whole cut is ever needed again */
static void mul4(Dim4 *a, Dim4 *g, const Dim4 *f)
{
	for (int d = 0; d < 4; d++)
		if (f->d[d] != 1) {
			a->d[d] *= f->d[d];
			g->d[d] /= f->d[d];
		}
}

void sapp_apply_choice(PartNode *N, const SappChoice *c)
{
	if (c->best < 0)
		return;
	const Dim4 *e = c->eff[c->best];
	if (N->nargs > 0)
		mul4(&N->acut[0], &N->g[0], &e[0]);
	if (N->nargs > 1)
		mul4(&N->acut[1], &N->g[1], &e[1]);
	mul4(&N->ocut, &N->g[2], &e[2]);
}

/* GetWeights (§2.10): only used to order the nodes in weight mode */
double sapp_weight(const Sapp *S, const PartNode *N, int p)
{
	if (N->type == REC_MatMul && N->nargs >= 2) {
		double cI, cJ, cK, cR;
		matmul_costs(S, N, p, &cI, &cJ, &cK, &cR);
		return fmax(fmax(cI, cJ), fmax(cK, cR));
	}
	if (N->type == REC_BatchMatMul && N->nargs >= 2) {
		double c[6], w = 0;
		bmm_costs(S, N, p, c);
		for (int k = 0; k < 6; k++)
			w = fmax(w, fabs(c[k]));
		return w;
	}
	if (N->type == REC_Convolution && N->nargs >= 2) {
		double ti = size4(&N->g[0]), tf = size4(&N->g[1]);
		double to = size4(&N->g[2]);
		double v[] = {tf / 2, (ti + tf) / 2, ti / 2, (ti + to) / 2, to / 2};
		double w = v[0];
		for (int k = 1; k < 5; k++)
			w = fmin(w, v[k]);
		return w;
	}
	if (is_batch_parallel(N->type))
		return SAPP_INVALID;
	return 0;
}
