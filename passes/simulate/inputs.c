/* inputs.c - the values of graph inputs and parameters, and the memory
 * estimate.
 *
 * Every parameter's values are a pure function of (seed, parameter name,
 * element position in the GLOBAL tensor): element i of parameter P is
 * drawn from splitmix64's stream at sim_mix64(seed ^ hash(P)) + i.  A rank
 * that holds block [offset, offset+shape) of P computes exactly those
 * elements, without the global tensor ever being built, so the single
 * device and every rank see the same numbers however the lowering cut them.
 *
 * The distribution comes from the parameter and from what consumes it in
 * the single-device graph, looking through value-preserving operators
 * (Load, Reshape, Cast, TupleGetItem of _VirtualDataset, ...):
 *   - integer inputs feeding Gather's indices get [0, rows of the table),
 *     sparse-loss labels [0, classes), OneHot indices [0, depth);
 *     ScatterDiv's indices [0, rows of its variable), MoeFinalizeRouting's
 *     experts [0, rows of its bias), MoeInitRoutingV2's [0, expert_num) and
 *     MoeComputeExpertTokens' [0, num_expert); other integers [0, 16); Bool inputs
 *     {0, 1}; MoeInitRouting's row ids are no draw but the permutation
 *     MindFormers builds, k*N + n at (n, k) (its routing needs one);
 *   - inputs of Log, Sqrt, Rsqrt, BatchNorm's variance and ScatterDiv's
 *     divisors get [0.5, 1.5);
 *   - weights of rank >= 2 get Glorot-uniform +-sqrt(6 / (fan_in + fan_out)),
 *     other floats [-1, 1), which keeps activations of deep graphs O(1).
 */
#include <math.h>
#include <string.h>

#include "simint.h"

typedef struct Dist {
	int isint;
	double lo, hi;            /* [lo, hi) */
	int64_t route_n, route_k; /* route_k > 0: MoeInitRouting's row ids of (N, K) */
} Dist;

static int64_t in_dim(const Node *n, uint32_t operand, int64_t axis)
{
	const Abs *a = ir_in_abs(n, operand);
	const Shape *s = a ? &a->shape : NULL;
	if ((!s || s->kind != SK_DIMS) && operand < n->nargs && n->args[operand].kind == V_NODE)
		s = &n->args[operand].u.node->out.shape;
	if (!s || s->kind != SK_DIMS || s->rank == 0)
		return -1;
	if (axis < 0)
		axis += s->rank;
	return axis >= 0 && axis < s->rank ? s->dims[axis] : -1;
}

static int passes_value(const Node *n, uint32_t i)
{
	switch (n->op) {
	case OP_Load:
	case OP_Depend:
	case OP_StopGradient:
	case OP_Reshape:
	case OP_Cast:
	case OP_Flatten:
	case OP_ExpandDims:
	case OP_Squeeze:
	case OP_Transpose:
	case OP_StridedSlice:
	case OP_MirrorOperator:
	case OP_VirtualDiv:
		return i == 0;
	default:
		return 0;
	}
}

static Dist narrow(const Module *m, const Node *src, int start, Dist d);

/* Walk the graph once in order, following where p's values flow
 * (flow[id] = 1: the node's value is p's values; 2 + k: element k of the
 * node's tuple is), and narrow the distribution at each consumer. */
static Dist derive(const Module *m, const Node *p)
{
	Dist d = {.isint = 0, .lo = -1, .hi = 1};
	int dt = sim_dtype_of(p->out.dtype);
	const Shape *s = &p->out.shape;
	if (dt == SD_BOOL)
		return (Dist){.isint = 1, .lo = 0, .hi = 2};
	if (dt == SD_INT)
		d = (Dist){.isint = 1, .lo = 0, .hi = 16};
	else if (p->has_default && s->kind == SK_DIMS && s->rank >= 2) {
		double rf = 1;
		for (int i = 2; i < s->rank; i++)
			rf *= (double)s->dims[i];
		double fan = (double)s->dims[1] * rf + (double)s->dims[0] * rf;
		double a = fan > 0 ? sqrt(6.0 / fan) : 1;
		d = (Dist){.isint = 0, .lo = -a, .hi = a};
	}
	return narrow(m, p, 1, d);
}

/* derive()'s walk from src, whose value is flow value start (1: src's
 * values; 2 + k: element k of its tuple), starting from d */
static Dist narrow(const Module *m, const Node *src, int start, Dist d)
{
	Graph *g = ir_entry((Module *)m);
	int *flow = xcalloc(m->next_id + 1, sizeof *flow);
	int64_t hi = -1, route_n = 0, route_k = 0;
	int positive = 0;
	flow[src->id] = start;
	for (uint32_t k = 0; g && k < g->nodes.n; k++) {
		const Node *n = g->nodes.a[k];
		if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
			continue;
		for (uint32_t i = 0; i < n->nargs; i++) {
			if (n->args[i].kind != V_NODE)
				continue;
			int f = flow[n->args[i].u.node->id];
			if (f == 0)
				continue;
			int64_t lim = -1, idx;
			if (f >= 2) {
				if (n->op == OP_TupleGetItem && i == 0 && n->nargs > 1 &&
				    value_get_int(&n->args[1], &idx) && idx == f - 2)
					flow[n->id] = 1;
				continue;
			}
			if (passes_value(n, i))
				flow[n->id] = 1;
			else if (n->op == OP_VirtualDataset || n->op == OP_MakeTuple)
				flow[n->id] = 2 + (int)i;
			else if ((n->op == OP_Gather || n->op == OP_GatherV2) && i == 1) {
				int64_t ax = 0;
				const Value *av = n->nargs > 2 && n->args[2].kind != V_NODE
				                      ? &n->args[2]
				                      : ir_attr_get(&n->pattrs, "axis");
				if (av)
					value_get_int(av, &ax);
				lim = in_dim(n, 0, ax);
			} else if (n->op == OP_SparseSoftmaxCrossEntropyWithLogits && i == 1)
				lim = in_dim(n, 0, -1);
			else if (n->op == OP_OneHot && i == 0) {
				const Value *dv = n->nargs > 1 && n->args[1].kind != V_NODE
				                      ? &n->args[1]
				                      : ir_attr_get(&n->pattrs, "depth");
				if (dv)
					value_get_int(dv, &lim);
			} else if ((n->op == OP_Log || n->op == OP_Sqrt || n->op == OP_Rsqrt) && i == 0)
				positive = 1;
			else if (n->op == OP_BatchNorm && i == 4)
				positive = 1;
			else if (n->op == OP_ScatterDiv && i == 1)
				lim = in_dim(n, 0, 0);
			else if (n->op == OP_ScatterDiv && i == 2)
				positive = 1;
			else if (n->op == OP_MoeFinalizeRouting && i == 6)
				lim = in_dim(n, 3, 0);
			else if (n->op == OP_MoeInitRoutingV2 && i == 1) {
				MoeV2Info mi;
				char why[8];
				if (ir_moe_v2_info(n, &mi, why, sizeof why) >= 0 && mi.experts > 0)
					lim = mi.experts;
			} else if (n->op == OP_MoeComputeExpertTokens && i == 0) {
				const Value *ev = n->nargs > 1 && n->args[1].kind != V_NODE
				                      ? &n->args[1]
				                      : ir_attr_get(&n->pattrs, "num_expert");
				if (ev)
					value_get_int(ev, &lim);
			} else if (n->op == OP_MoeInitRouting && i == 1) {
				route_n = in_dim(n, 1, 0);
				route_k = in_dim(n, 1, 1);
			}
			if (lim >= 0 && (hi < 0 || lim < hi))
				hi = lim;
		}
	}
	free(flow);
	if (d.isint && route_k > 0 && route_n > 0) {
		d.route_n = route_n;
		d.route_k = route_k;
	}
	if (d.isint && hi >= 0)
		d.hi = (double)hi;
	else if (!d.isint && positive)
		d = (Dist){.isint = 0, .lo = 0.5, .hi = 1.5};
	return d;
}

static void fill_block(SimTensor *t, const Dist *d, uint64_t key, const int64_t *off, const Shape *gs);

static float draw(const Dist *d, uint64_t key, int64_t i)
{
	if (d->route_k > 0)
		return (float)(i % d->route_k * d->route_n + i / d->route_k);
	uint64_t h = sim_mix64(key + (uint64_t)i * 0x9E3779B97F4A7C15ULL);
	if (d->isint) {
		uint64_t span = (uint64_t)(d->hi - d->lo);
		return (float)(d->lo + (double)(span ? h % span : 0));
	}
	double u = (double)(h >> 40) * (1.0 / 16777216.0);
	return (float)(d->lo + (d->hi - d->lo) * u);
}

static Node *find_param(Module *m, Sym name)
{
	Graph *g = ir_entry(m);
	for (uint32_t i = 0; g && i < g->params.n; i++)
		if (g->params.a[i]->name == name)
			return g->params.a[i];
	return NULL;
}

/* where this rank's block of p sits in the global parameter G */
static int param_slice(SimRun *r, RankState *s, Node *p, Node *G, int64_t *off)
{
	const Shape *ls = &p->out.shape, *gs = &G->out.shape;
	memset(off, 0, MAX_RANK * sizeof *off);
	if (G == p || shape_equal(ls, gs))
		return 0;
	char a[160], b[160];
	sim_fmt_shape(a, sizeof a, ls->rank, ls->dims);
	sim_fmt_shape(b, sizeof b, gs->kind == SK_DIMS ? gs->rank : 0, gs->dims);
	if (gs->kind != SK_DIMS)
		return sim_errorf(r, s, p, "the single-device parameter has no static shape");
	SimSlice sl = {0};
	int rc = r->o.slice ? r->o.slice(r->o.slice_ctx, p, G, s->rank, &sl) : 0;
	if (rc < 0)
		return sim_errorf(r, s, p, "the layout hook failed");
	if (rc == 0)
		return sim_errorf(r, s, p, "local shape %s differs from the global %s and no slice is known", a, b);
	if (sl.rank != ls->rank)
		return sim_errorf(r, s, p, "the slice describes %d dimensions, the parameter has %d", sl.rank,
		                  ls->rank);
	for (int i = 0; i < ls->rank; i++) {
		if (sl.shape[i] != ls->dims[i] || sl.offset[i] < 0 || sl.offset[i] + sl.shape[i] > gs->dims[i]) {
			char c[160];
			sim_fmt_shape(c, sizeof c, sl.rank, sl.shape);
			return sim_errorf(r, s, p, "slice %s at dimension %d does not fit local %s inside global %s", c,
			                  i, a, b);
		}
		off[i] = sl.offset[i];
	}
	return 0;
}

static SimOverride *find_override(SimRun *r, int rank, Sym name)
{
	for (uint32_t i = 0; i < r->overrides.n; i++)
		if (r->overrides.a[i].rank == rank && r->overrides.a[i].name == name)
			return &r->overrides.a[i];
	return NULL;
}

/* Optimizer state is not drawn: MindSpore creates it with fixed values
 * (python/mindspore/nn/optim/momentum.py, sgd.py, adam.py, optimizer.py:
 * moments, accum, Adam's moments zeros, SGD's stat ones, global_step 0, the
 * beta powers 1).  Hyper-parameters (learning_rate, momentum, ...) come from
 * the caller's hook.  1 with *v set, else 0. */
static int fixed_value(SimRun *r, const Node *p, double *v)
{
	static const char *const zeros[] = {"moments.", "accum.",  "moment1.",   "moment2.",
	                                    "adam_m.",  "adam_v.", "accu_grads."};
	const char *nm = sym_str(p->name);
	if (!p->has_default)
		return 0;
	if (r->o.init && r->o.init(r->o.init_ctx, p, v))
		return 1;
	for (size_t i = 0; i < sizeof zeros / sizeof zeros[0]; i++)
		if (strncmp(nm, zeros[i], strlen(zeros[i])) == 0)
			return *v = 0, 1;
	if (strncmp(nm, "stat.", 5) == 0 || strcmp(nm, "beta1_power") == 0 || strcmp(nm, "beta2_power") == 0)
		return *v = 1, 1;
	if (strcmp(nm, "global_step") == 0)
		return *v = 0, 1;
	return 0;
}

static int make_param(SimRun *r, RankState *s, Node *p)
{
	if (!p->out.is_tensor) {
		s->vals[p->id] = sim_val_none(r);
		return 0;
	}
	const Shape *ls = &p->out.shape;
	if (ls->kind != SK_DIMS)
		return sim_errorf(r, s, p, "no static shape to simulate");
	SimTensor *t = sim_tensor_new(r, sim_dtype_of(p->out.dtype), ls->rank, ls->dims);
	if (!t)
		return -1;
	s->vals[p->id] = sim_val_tensor(r, t);
	SimOverride *ov = find_override(r, s->rank, p->name);
	if (ov) {
		if (ov->n != t->numel)
			return sim_errorf(r, s, p, "%lld values given for %lld elements", (long long)ov->n,
			                  (long long)t->numel);
		memcpy(t->data, ov->data, (size_t)t->numel * sizeof(float));
		return 0;
	}
	double fixed;
	if (fixed_value(r, p, &fixed)) {
		for (int64_t i = 0; i < t->numel; i++)
			t->data[i] = (float)fixed;
		return 0;
	}
	Node *G = r->o.global && r->o.global != s->m ? find_param(r->o.global, p->name) : NULL;
	Module *gm = G ? r->o.global : s->m;
	if (!G)
		G = p;
	int64_t off[MAX_RANK];
	if (param_slice(r, s, p, G, off) < 0)
		return -1;
	Dist d = derive(gm, G);
	if (d.isint && d.hi <= d.lo)
		return sim_errorf(r, s, p, "no valid integer value: a consumer accepts only [0, %.0f)", d.hi);
	const char *nm = sym_str(p->name);
	fill_block(t, &d, sim_mix64(r->o.seed ^ std_hash_bytes(nm, strlen(nm))), off, &G->out.shape);
	return 0;
}

/* t is the block at off of a global tensor of shape gs: element i of the
 * global tensor is draw(d, key, i).  Row by row: the global index of a
 * row's first element, then one stride per element. */
static void fill_block(SimTensor *t, const Dist *d, uint64_t key, const int64_t *off, const Shape *gs)
{
	int64_t gst[MAX_RANK], idx[MAX_RANK] = {0};
	sim_strides(gs->rank, gs->dims, gst);
	int nd = t->ndim;
	int64_t row = nd ? t->shape[nd - 1] : 1, step = nd ? gst[nd - 1] : 0;
	for (int64_t i = 0; i < t->numel; i += row) {
		int64_t gi = nd ? off[nd - 1] * step : 0;
		for (int k = 0; k < nd - 1; k++)
			gi += (off[k] + idx[k]) * gst[k];
		for (int64_t j = 0; j < row; j++)
			t->data[i + j] = draw(d, key, gi + j * step);
		for (int k = nd - 2; k >= 0; k--) {
			if (++idx[k] < t->shape[k])
				break;
			idx[k] = 0;
		}
	}
}

/* the TupleGetItem of g that reads element k of n, or NULL */
static Node *item_user(const Graph *g, const Node *n, int64_t k)
{
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		Node *u = g->nodes.a[i];
		int64_t j;
		if (ir_node_is_op(u, OP_TupleGetItem) && u->nargs >= 2 && u->args[0].kind == V_NODE &&
		    u->args[0].u.node == n && value_get_int(&u->args[1], &j) && j == k)
			return u;
	}
	return NULL;
}

static Node *find_getnext(Module *m, const char *fullname)
{
	Graph *g = ir_entry(m);
	char buf[1024];
	for (uint32_t i = 0; g && i < g->nodes.n; i++)
		if (ir_node_is_op(g->nodes.a[i], OP_GetNext) &&
		    strcmp(ir_node_fullname_r(g->nodes.a[i], buf, sizeof buf), fullname) == 0)
			return g->nodes.a[i];
	return NULL;
}

/* GetNext (dataset sink mode): output k is drawn as a dataset input would
 * be, keyed by GetNext's scope name and k, its distribution from what
 * consumes the element in the single-device graph.  A rank holds the
 * block of each output that its TupleGetItem user's layout names (the
 * slice hook describes one tensor per node). */
SimValue *sim_getnext(Ctx *c)
{
	SimRun *r = c->r;
	RankState *s = c->s;
	Node *n = c->n;
	const Shape *os = &n->out.shape;
	char fnbuf[1024];
	const char *fn = ir_node_fullname_r(n, fnbuf, sizeof fnbuf);
	Node *G = r->o.global && r->o.global != s->m ? find_getnext(r->o.global, fn) : n;
	Module *gm = G == n ? s->m : r->o.global;
	if (os->kind != SK_TUPLE)
		return sim_errorf(r, s, n, "GetNext's outputs have no static shapes"), (SimValue *)NULL;
	if (!G || G->out.shape.kind != SK_TUPLE || G->out.shape.rank != os->rank)
		return sim_errorf(r, s, n, "no GetNext '%s' with as many outputs in the single-device graph", fn),
		       (SimValue *)NULL;
	SimValue *v = sim_val_tuple(r, (uint32_t)os->rank);
	for (int k = 0; k < os->rank; k++) {
		const Shape *ls = &os->sub[k], *gs = &G->out.shape.sub[k];
		Node *u = item_user(s->g, n, k), *gu = item_user(ir_entry(gm), G, k);
		if (ls->kind != SK_DIMS || gs->kind != SK_DIMS || ls->rank != gs->rank)
			return sim_errorf(r, s, n, "GetNext output %d has no static shape matching the single device's",
			                  k),
			       (SimValue *)NULL;
		int64_t off[MAX_RANK] = {0};
		if (!shape_equal(ls, gs)) {
			SimSlice sl = {0};
			int rc = u && r->o.slice ? r->o.slice(r->o.slice_ctx, u, gu, s->rank, &sl) : 0;
			if (rc != 1 || sl.rank != ls->rank)
				return sim_errorf(r, s, n, "GetNext output %d: no slice is known for its local shape",
				                  k),
				       (SimValue *)NULL;
			for (int i = 0; i < ls->rank; i++) {
				if (sl.shape[i] != ls->dims[i] || sl.offset[i] < 0 ||
				    sl.offset[i] + sl.shape[i] > gs->dims[i])
					return sim_errorf(r, s, n, "GetNext output %d: its slice does not fit", k),
					       (SimValue *)NULL;
				off[i] = sl.offset[i];
			}
		}
		Sym dtype = gu ? gu->out.dtype : G->out.dtype;
		int dt = sim_dtype_of(dtype);
		SimTensor *t = sim_tensor_new(r, dt, ls->rank, ls->dims);
		if (!t)
			return NULL;
		Dist d = dt == SD_BOOL  ? (Dist){.isint = 1, .lo = 0, .hi = 2}
		         : dt == SD_INT ? (Dist){.isint = 1, .lo = 0, .hi = 16}
		                        : (Dist){.isint = 0, .lo = -1, .hi = 1};
		if (dt != SD_BOOL)
			d = narrow(gm, G, 2 + k, d);
		if (d.isint && d.hi <= d.lo)
			return sim_errorf(r, s, n, "GetNext output %d: a consumer accepts only [0, %.0f)", k, d.hi),
			       (SimValue *)NULL;
		char nm[512];
		snprintf(nm, sizeof nm, "%s#%d", fn, k);
		fill_block(t, &d, sim_mix64(r->o.seed ^ std_hash_bytes(nm, strlen(nm))), off, gs);
		v->elems[k] = sim_val_tensor(r, t);
	}
	return v;
}

int sim_make_inputs(SimRun *r, RankState *s)
{
	for (uint32_t i = 0; i < s->g->params.n; i++)
		if (make_param(r, s, s->g->params.a[i]) < 0)
			return -1;
	return 0;
}

static int64_t shape_bytes(const Shape *s)
{
	int64_t n = 0;
	if (s->kind == SK_TUPLE || s->kind == SK_LIST) {
		for (int i = 0; i < s->rank; i++)
			n += shape_bytes(&s->sub[i]);
		return n;
	}
	if (shape_numel(s, &n) < 0 || n > INT64_MAX / 8)
		return 0;
	return n * (int64_t)sizeof(float);
}

/* An operator that writes parameters in place makes a new tensor for each
 * (its result is the first of them): their bytes, or -1 for any other. */
static int64_t written_bytes(const Node *n)
{
	uint32_t pos[8];
	int k = sim_ref_operands(n, pos);
	if (k <= 0)
		return -1;
	int64_t total = 0;
	for (int j = 0; j < k; j++)
		if (pos[j] < n->nargs && n->args[pos[j]].kind == V_NODE)
			total += shape_bytes(&n->args[pos[j]].u.node->out.shape);
	return total;
}

int64_t sim_estimate_bytes(Module **ranks, int nranks)
{
	int64_t total = 0;
	for (int k = 0; k < nranks; k++) {
		Graph *g = ir_entry(ranks[k]);
		for (uint32_t i = 0; g && i < g->params.n; i++)
			total += shape_bytes(&g->params.a[i]->out.shape);
		for (uint32_t i = 0; g && i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			int64_t w = written_bytes(n);
			if (w >= 0)
				total += w;
			else if (sim_allocates(n))
				total += shape_bytes(&n->out.shape);
		}
	}
	return total;
}

/* What a run keeps per node of each rank besides tensor storage: the
 * rank's value slot, a SimValue and a SimTensor with their malloc headers,
 * the run's three lists (at most half empty) and the comparison's index
 * entry (compare.c: key, order, node).  Per rank: its RankState. */
#define NODE_STATE                                                                                                     \
	(sizeof(SimValue *) + sizeof(SimValue) + sizeof(SimTensor) + 3 * 16 + 3 * 2 * sizeof(void *) +                 \
	 2 * sizeof(uint64_t) + sizeof(void *))

/* A rank that writes parameters in place also keeps a slot per node (the
 * latest write of each parameter) and a log entry per write, plus the
 * initial value's entry. */
int64_t sim_estimate_state_bytes(Module **ranks, int nranks)
{
	int64_t total = 0;
	for (int k = 0; k < nranks; k++) {
		Graph *g = ir_entry(ranks[k]);
		int64_t writes = 0;
		uint32_t pos[8];
		for (uint32_t i = 0; g && i < g->nodes.n; i++)
			writes += sim_ref_operands(g->nodes.a[i], pos);
		total += (int64_t)sizeof(RankState) + (int64_t)ranks[k]->next_id * (int64_t)NODE_STATE;
		if (writes)
			total += (int64_t)ranks[k]->next_id * (int64_t)sizeof(uint32_t) +
			         2 * writes * (int64_t)(sizeof(struct RefLog) + sizeof(SimValue) + 16);
	}
	return total;
}

/* The comparison combines a partial block in a double and a float per
 * element (compare_partial), one block at a time: at most three times the
 * largest tensor of the single-device graph. */
int64_t sim_estimate_scratch_bytes(Module *global)
{
	Graph *g = ir_entry(global);
	int64_t big = 0;
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		int64_t b = shape_bytes(&g->nodes.a[i]->out.shape);
		big = b > big ? b : big;
	}
	return 3 * big;
}
