/* compare.c - does every rank compute its slice of what the single device
 * computes?
 *
 * Operators are paired by their full name (the "# Fullname with scope"
 * text, which the lowering keeps on every operator it does not create),
 * else by instance name + debug name; the k-th single-device node with a
 * key pairs with the k-th rank node with that key.  Nodes the lowering
 * inserted (communication, redistribution) have no partner and are checked
 * only through the operators that consume them.
 *
 * For each pair, in the single-device graph's order and then by rank, the
 * layout hook says which block of the global tensor the rank holds, or that
 * it holds a partial sum of a block (replicated_sum = k: the k ranks
 * reporting that block are added first).  A pair passes when every element
 * satisfies |got - expected| <= rtol * max(1, |expected|).
 */
#include <math.h>
#include <string.h>

#include "simint.h"

typedef struct Key {
	uint64_t key;
	uint32_t order;
	Node *n;
} Key;

/* the nodes the recompute pass made: a duplicate, or the Depend that
 * delays one (their full names count on from the graph's, which differ
 * between the single device and the ranks) */
static int recompute_made(const Node *n)
{
	const NodeExt *x = ir_node_ext(n);
	return x->cattrs.n &&
	       (ir_attr_get(&x->cattrs, "duplicated") || ir_attr_get(&x->cattrs, "recompute_depend"));
}

static uint64_t node_key(const Node *n)
{
	if (n->kind != NK_CNODE || recompute_made(n))
		return 0;
	if (n->scope && sym_len(n->scope)) /* inserted ops: prefix + -op<k> (Node.scope_op) */
		return 1ULL << 63 | (uint64_t)(n->scope_kind == SCOPE_FULLNAME ? n->scope_op : 0) << 32 | n->scope;
	if (n->autoname) /* an inserted operator without scope: nothing in the reference has it */
		return 0;
	if (n->instance || n->name)
		return (uint64_t)n->instance << 32 | n->name;
	return 0;
}

static int key_cmp(const void *a, const void *b)
{
	const Key *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static Key *index_graph(const Graph *g, uint32_t *count)
{
	Key *k = xmalloc((g->nodes.n ? g->nodes.n : 1) * sizeof *k);
	uint32_t n = 0;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		uint64_t key = node_key(g->nodes.a[i]);
		if (key)
			k[n++] = (Key){key, i, g->nodes.a[i]};
	}
	qsort(k, n, sizeof *k, key_cmp);
	*count = n;
	return k;
}

/* the occ-th node (0-based, in graph order) with this key */
static Node *lookup(const Key *k, uint32_t n, uint64_t key, uint32_t occ)
{
	uint32_t lo = 0, hi = n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (k[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo + occ < n && k[lo + occ].key == key ? k[lo + occ].n : NULL;
}

typedef struct Pair {
	Node *ln;
	const SimTensor *lt;
	SimSlice sl;
	int rc; /* 1 compare, 0 skip (no layout), 2 excluded by the hook, -1 hook error */
	int done;
} Pair;

static int get_slice(SimSliceFn fn, void *ctx, Pair *p, const Node *gn, const SimTensor *gt, int rank)
{
	memset(&p->sl, 0, sizeof p->sl);
	int rc = fn ? fn(ctx, p->ln, gn, rank, &p->sl) : 0;
	if (rc != 0)
		return rc < 0 ? -1 : rc == 2 ? 2 : 1;
	if (!sim_same_shape(p->lt, gt->ndim, gt->shape))
		return 0;
	p->sl.rank = gt->ndim;
	memcpy(p->sl.shape, gt->shape, sizeof p->sl.shape);
	return 1;
}

static void set_where(SimMismatch *mm, const Node *gn, const Node *ln, int rank)
{
	memset(mm, 0, sizeof *mm);
	mm->global = gn;
	mm->local = ln;
	mm->rank = rank;
}

/* a structural problem of the slice: 1 (and mm->why) or 0 */
static int check_slice(const SimSlice *sl, const SimTensor *gt, const SimTensor *lt, SimMismatch *mm)
{
	char a[96], b[96], c[96];
	sim_fmt_shape(a, sizeof a, lt->ndim, lt->shape);
	sim_fmt_shape(b, sizeof b, sl->rank >= 0 && sl->rank <= MAX_RANK ? sl->rank : 0, sl->shape);
	sim_fmt_shape(c, sizeof c, gt->ndim, gt->shape);
	if (sl->rank != gt->ndim || !sim_same_shape(lt, sl->rank, sl->shape)) {
		snprintf(mm->why, sizeof mm->why, "the rank's tensor is %s but its slice of the global %s is %s", a, c,
		         b);
		return 1;
	}
	for (int i = 0; i < sl->rank; i++)
		if (sl->offset[i] < 0 || sl->offset[i] + sl->shape[i] > gt->shape[i]) {
			sim_fmt_shape(a, sizeof a, sl->rank, sl->offset);
			snprintf(mm->why, sizeof mm->why, "slice %s at offset %s falls outside the global %s", b, a, c);
			return 1;
		}
	return 0;
}

/* element-wise check of got (shape sl->shape) against gt's block; the
 * largest relative error goes to *worst_out */
static int compare_block(const SimTensor *gt, const SimSlice *sl, const float *got, double rtol, SimMismatch *mm,
                         double *worst_out)
{
	int64_t gst[MAX_RANK], idx[MAX_RANK] = {0}, numel;
	int nd = sl->rank;
	sim_numel(nd, sl->shape, &numel);
	sim_strides(gt->ndim, gt->shape, gst);
	double worst = -1;
	int64_t wi = 0, nbad = 0;
	for (int64_t i = 0; i < numel; i++) {
		int64_t o = 0;
		for (int d = 0; d < nd; d++)
			o += (sl->offset[d] + idx[d]) * gst[d];
		double e = gt->data[o], g = got[i], err;
		if (isnan(e) || isnan(g))
			err = isnan(e) && isnan(g) ? 0 : INFINITY;
		else if (isinf(e) || isinf(g))
			err = e == g ? 0 : INFINITY;
		else
			err = fabs(g - e) / (fabs(e) > 1 ? fabs(e) : 1);
		if (err > rtol)
			nbad++;
		if (err > worst) {
			worst = err;
			wi = i;
			mm->expected = e;
			mm->got = g;
		}
		for (int d = nd - 1; d >= 0; d--) {
			if (++idx[d] < sl->shape[d])
				break;
			idx[d] = 0;
		}
	}
	mm->ndim = nd;
	mm->nbad = nbad;
	mm->numel = numel;
	sim_unflatten(wi, nd, sl->shape, mm->index);
	for (int d = 0; d < nd; d++)
		mm->gindex[d] = sl->offset[d] + mm->index[d];
	*worst_out = worst > 0 ? worst : 0;
	return nbad > 0;
}

static int same_block(const SimSlice *a, const SimSlice *b)
{
	if (a->rank != b->rank || a->replicated_sum != b->replicated_sum || a->combine != b->combine ||
	    a->group != b->group)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->offset[i] != b->offset[i] || a->shape[i] != b->shape[i])
			return 0;
	return 1;
}

/* The outcome of one (node, rank) check, handed to the caller's tally. */
typedef struct Tally {
	int compared, mismatched;
	int skipped, excluded; /* (node, rank) pairs without a layout, not slices */
	double max_err;
	SimMismatch first;
} Tally;

/* The comparison's scratch (a partial block combined: a double and a float
 * an element) under a storage limit: the driver reserves one block's
 * (sim_estimate_scratch_bytes); threads comparing at once share that and
 * what the ranks left of their limit, and one that finds too little waits
 * until it is alone.  on (set before the threads start): there is a limit. */
typedef struct Scratch {
	int on;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int64_t avail; /* under mu */
	int holders;
} Scratch;

static void scratch_take(Scratch *s, int64_t b)
{
	if (!s || !s->on)
		return;
	pthread_mutex_lock(&s->mu);
	while (s->holders && s->avail < b)
		pthread_cond_wait(&s->cv, &s->mu);
	s->avail -= b;
	s->holders++;
	pthread_mutex_unlock(&s->mu);
}

static void scratch_give(Scratch *s, int64_t b)
{
	if (!s || !s->on)
		return;
	pthread_mutex_lock(&s->mu);
	s->avail += b;
	s->holders--;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void record(Tally *t, const SimMismatch *mm)
{
	if (!t->mismatched++)
		t->first = *mm;
}

static void note_err(Tally *t, double err)
{
	if (err > t->max_err)
		t->max_err = err;
}

/* the ranks holding partial values of p[r]'s block: combine them, then compare */
static void compare_partial(Pair *p, int nranks, int r, const Node *gn, const SimTensor *gt, double rtol, Tally *t,
                            Scratch *sc)
{
	SimMismatch mm;
	set_where(&mm, gn, p[r].ln, r);
	int64_t numel = p[r].lt->numel, found = 0, need = (numel ? numel : 1) * (int64_t)(sizeof(double) + sizeof(float));
	int how = p[r].sl.combine;
	scratch_take(sc, need);
	double *acc = xcalloc((size_t)(numel ? numel : 1), sizeof *acc);
	for (int q = r; q < nranks; q++) {
		/* a member whose tensor is not the block's shape is left to
		 * check_slice, and missing from the count here */
		if (p[q].rc != 1 || p[q].done || !same_block(&p[r].sl, &p[q].sl) ||
		    !sim_same_shape(p[q].lt, p[r].sl.rank, p[r].sl.shape))
			continue;
		p[q].done = 1;
		for (int64_t i = 0; i < numel; i++) {
			double x = p[q].lt->data[i];
			if (!found)
				acc[i] = x;
			else if (how == SIM_MAX)
				acc[i] = x > acc[i] ? x : acc[i];
			else if (how == SIM_MIN)
				acc[i] = x < acc[i] ? x : acc[i];
			else if (how == SIM_PROD)
				acc[i] *= x;
			else
				acc[i] += x;
		}
		found++;
	}
	t->compared++;
	if (found != p[r].sl.replicated_sum) {
		snprintf(mm.why, sizeof mm.why, "%lld ranks hold partial values of this block, the layout says %d",
		         (long long)found, p[r].sl.replicated_sum);
		record(t, &mm);
	} else {
		float *sum = xmalloc((size_t)(numel ? numel : 1) * sizeof *sum);
		for (int64_t i = 0; i < numel; i++)
			sum[i] = (float)(how == SIM_MEAN ? acc[i] / (double)found : acc[i]);
		double err;
		if (compare_block(gt, &p[r].sl, sum, rtol, &mm, &err))
			record(t, &mm);
		note_err(t, err);
		free(sum);
	}
	free(acc);
	scratch_give(sc, need);
}

/* Check one single-device node against the ranks' counterparts p[0..nr)
 * (ln, lt filled; ln NULL where a rank has none).  Returns -1 on a hook
 * error; per-rank outcomes (1 compared and agrees, 0 not compared, -1
 * disagrees) go to ok[] when given. */
static int check_node(SimSliceFn slice, void *ctx, Pair *p, int nr, const Node *gn, const SimTensor *gt, double rtol,
                      Tally *t, int *ok, Scratch *sc)
{
	for (int r = 0; r < nr; r++) {
		p[r].done = 0;
		p[r].rc = p[r].lt ? get_slice(slice, ctx, &p[r], gn, gt, r) : 0;
		if (p[r].ln && p[r].lt && p[r].rc == 0)
			t->skipped++;
		if (p[r].ln && p[r].lt && p[r].rc == 2)
			t->excluded++;
		if (ok)
			ok[r] = 0;
	}
	for (int r = 0; r < nr; r++) {
		SimMismatch mm;
		if (p[r].done || p[r].rc == 0 || p[r].rc == 2)
			continue;
		set_where(&mm, gn, p[r].ln, r);
		int before = t->mismatched;
		if (p[r].rc < 0) {
			snprintf(mm.why, sizeof mm.why, "the layout hook failed");
			record(t, &mm);
			return -1;
		} else if (check_slice(&p[r].sl, gt, p[r].lt, &mm)) {
			t->compared++;
			record(t, &mm);
		} else if (p[r].sl.replicated_sum > 0) {
			compare_partial(p, nr, r, gn, gt, rtol, t, sc);
			if (ok) /* every member of the partial group shares the verdict */
				for (int q = r + 1; q < nr; q++)
					if (p[q].done && same_block(&p[r].sl, &p[q].sl) && !ok[q])
						ok[q] = t->mismatched > before ? -1 : 1;
		} else {
			double err;
			t->compared++;
			if (compare_block(gt, &p[r].sl, p[r].lt->data, rtol, &mm, &err))
				record(t, &mm);
			note_err(t, err);
		}
		if (ok)
			ok[r] = t->mismatched > before ? -1 : 1;
	}
	return 0;
}

/* the returned nodes: a returned MakeTuple's operands, else the operand */
static int returned(const Graph *g, const SimValue *v, const Node **out, int max)
{
	const Node *ret = g->nodes.n ? g->nodes.a[g->nodes.n - 1] : NULL;
	if (!v || !ret || ret->kind != NK_RETURN || !ret->nargs || ret->args[0].kind != V_NODE)
		return 0;
	const Node *n = ret->args[0].u.node;
	/* a training step returns Depend(loss, updates): the loss is the output */
	while (n->kind == NK_CNODE && n->op == OP_Depend && n->nargs && n->args[0].kind == V_NODE)
		n = n->args[0].u.node;
	/* a stage before the last returns zeros that wait for its Sends
	 * (pipeline.c): the network's outputs are the last stage's */
	if (ir_node_is_stage_zeros(n))
		return 0;
	if (v->kind == SV_TUPLE && n->op == OP_MakeTuple && n->nargs == v->n) {
		int k = 0;
		for (uint32_t i = 0; i < n->nargs && k < max; i++)
			out[k++] = n->args[i].kind == V_NODE ? n->args[i].u.node : NULL;
		return k;
	}
	out[0] = n;
	return 1;
}

static const SimTensor *element(const SimValue *v, int i, int n)
{
	if (!v)
		return NULL;
	if (n == 1 && v->kind == SV_TENSOR)
		return v->t;
	if (v->kind == SV_TUPLE && (uint32_t)i < v->n && v->elems[i] && v->elems[i]->kind == SV_TENSOR)
		return v->elems[i]->t;
	return NULL;
}

/* the outputs: each rank's Return value against the single device's */
static int compare_outputs(const SimRun *G, const SimRun *R, SimSliceFn slice, void *ctx, double rtol, Pair *p,
                           SimReport *rep)
{
	int nr = R->nranks;
	const Node *gout[SIM_MAX_OUTPUTS], *lout[SIM_MAX_OUTPUTS];
	const SimValue *gv = G->rs[0].result;
	int ng = returned(G->rs[0].g, gv, gout, SIM_MAX_OUTPUTS), err = 0;
	int *ok = xcalloc((size_t)nr, sizeof *ok);
	rep->noutputs = ng;
	for (int i = 0; i < ng && !err; i++) {
		SimOutput *o = &rep->outputs[i];
		const SimTensor *gt = element(gv, i, ng);
		o->global = gout[i];
		if (!gt || !gout[i])
			continue;
		for (int r = 0; r < nr; r++) {
			p[r] = (Pair){0};
			const SimValue *lv = R->rs[r].result;
			int nl = returned(R->rs[r].g, lv, lout, SIM_MAX_OUTPUTS);
			if (nl != ng || !lout[i])
				continue;
			p[r].ln = (Node *)lout[i];
			p[r].lt = element(lv, i, nl);
		}
		Tally t = {0}; /* its skipped and excluded are not counted: those counts are about operators */
		if (check_node(slice, ctx, p, nr, gout[i], gt, rtol, &t, ok, NULL) < 0)
			err = 1;
		for (int r = 0; r < nr; r++) {
			o->ranks += ok[r] != 0;
			o->agree += ok[r] > 0;
		}
		o->max_err = t.max_err;
		if (t.mismatched && !rep->outputs_bad)
			rep->first_output = t.first;
		rep->outputs_bad += t.mismatched;
	}
	free(ok);
	return err ? -1 : 0;
}

static int64_t recompute_id(const Node *n)
{
	const Value *v = ir_attr_get(&ir_node_ext(n)->cattrs, "recompute_id");
	int64_t id;
	return v && value_get_int(v, &id) && id > 0 ? id : 0;
}

/* Every duplicate against its origin (the node of its recompute_id that
 * is not a duplicate) in one run of one rank: the same operator on the
 * same operands computes the same values, bit for bit. */
static void check_recomputed(const SimRun *run, int rank, SimReport *rep)
{
	Graph *g = ir_entry(sim_module(run, rank));
	int64_t max = 0;
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		int64_t id = recompute_id(g->nodes.a[i]);
		max = id > max ? id : max;
	}
	if (!max)
		return;
	const Node **origin = xcalloc((size_t)max + 1, sizeof *origin);
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		const Node *n = g->nodes.a[i];
		int64_t id = recompute_id(n);
		if (id && !ir_attr_get(&ir_node_ext(n)->cattrs, "duplicated"))
			origin[id] = n;
	}
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		const Node *d = g->nodes.a[i];
		int64_t id = recompute_id(d);
		if (!id || !origin[id] || d == origin[id])
			continue;
		const SimTensor *a = sim_tensor(run, rank, origin[id]), *b = sim_tensor(run, rank, d);
		if (!a && !b)
			continue; /* a tuple: its elements are checked */
		rep->recomputed++;
		SimMismatch mm;
		set_where(&mm, origin[id], d, rank);
		if (!a || !b || a->numel != b->numel) {
			snprintf(mm.why, sizeof mm.why, "the duplicate's value is not the shape of its origin's");
		} else {
			for (int64_t k = 0; k < a->numel; k++)
				if (a->data[k] != b->data[k] && !(a->data[k] != a->data[k] && b->data[k] != b->data[k])) {
					if (!mm.nbad++) {
						mm.expected = a->data[k];
						mm.got = b->data[k];
						mm.ndim = 1;
						mm.index[0] = mm.gindex[0] = k;
					}
				}
			mm.numel = a->numel;
			if (!mm.nbad)
				continue;
		}
		if (!rep->recomputed_bad++)
			rep->first_recomputed = mm;
	}
	free(origin);
}

/* A single-device node to check, and its partners' key and occurrence. */
typedef struct Item {
	Node *gn;
	const SimTensor *gt;
	uint64_t key;
	uint32_t occ;
} Item;

/* The checks of a run of items, on one thread into a tally of its own;
 * sim_compare merges the chunks' tallies in item order. */
typedef struct Chunk {
	uint32_t lo, hi;
	Tally t;
	int err;
} Chunk;

typedef struct Cmp {
	const SimRun *R;
	SimSliceFn slice;
	void *ctx;
	double rtol;
	const Item *it;
	Key **rk;
	uint32_t *nk;
	Chunk *ch;
	Scratch *sc;
} Cmp;

static void index_job(void *arg, int r)
{
	Cmp *x = arg;
	x->rk[r] = index_graph(x->R->rs[r].g, &x->nk[r]);
}

static void chunk_job(void *arg, int c)
{
	Cmp *x = arg;
	Chunk *ch = &x->ch[c];
	int nr = x->R->nranks;
	Pair *p = xcalloc((size_t)nr, sizeof *p);
	for (uint32_t j = ch->lo; j < ch->hi && !ch->err; j++) {
		const Item *it = &x->it[j];
		for (int r = 0; r < nr; r++) {
			p[r] = (Pair){0};
			p[r].ln = lookup(x->rk[r], x->nk[r], it->key, it->occ);
			p[r].lt = p[r].ln ? sim_tensor(x->R, r, p[r].ln) : NULL;
		}
		if (check_node(x->slice, x->ctx, p, nr, it->gn, it->gt, x->rtol, &ch->t, NULL, x->sc) < 0)
			ch->err = 1;
	}
	free(p);
}

/* The nodes are checked in chunks on the ranks' threads (R->threads), one
 * chunk each when there is one thread; each chunk stops at its first hook
 * error, and the merge in item order stops after the chunk that had one,
 * so the counts and the first mismatch are those of the nodes checked one
 * after the other. */
int sim_compare(const SimRun *G, const SimRun *R, SimSliceFn slice, void *ctx, double rtol, SimReport *rep)
{
	memset(rep, 0, sizeof *rep);
	if (rtol <= 0)
		rtol = SIM_RTOL;
	int nr = R->nranks, err = 0, threads = R->threads > 1 ? R->threads : 1;
	Graph *gg = ir_entry(G->rs[0].m);
	uint32_t ng, *nk = xcalloc((size_t)nr, sizeof *nk), nit = 0;
	Key *gk = index_graph(gg, &ng), **rk = xcalloc((size_t)nr, sizeof *rk);
	uint32_t *occ = xcalloc(gg->nodes.n ? gg->nodes.n : 1, sizeof *occ);
	for (uint32_t i = 1; i < ng; i++) /* gk is sorted by (key, order): occurrences are runs */
		if (gk[i].key == gk[i - 1].key)
			occ[gk[i].order] = occ[gk[i - 1].order] + 1;
	Item *it = xmalloc((gg->nodes.n ? gg->nodes.n : 1) * sizeof *it);
	for (uint32_t i = 0; i < gg->nodes.n; i++) {
		Node *gn = gg->nodes.a[i];
		uint64_t key = node_key(gn);
		const SimTensor *gt = sim_tensor(G, 0, gn);
		if (key && gt && ir_node_phase(gn) == IR_PHASE_FWD)
			it[nit++] = (Item){gn, gt, key, occ[i]};
	}
	/* a few chunks a thread: the nodes' sizes differ by orders of magnitude */
	uint32_t nch = threads == 1 || !nit ? 1 : nit < (uint32_t)threads * 16 ? nit : (uint32_t)threads * 16;
	Chunk *ch = xcalloc(nch, sizeof *ch);
	for (uint32_t c = 0; c < nch; c++) {
		ch[c].lo = (uint32_t)((uint64_t)nit * c / nch);
		ch[c].hi = (uint32_t)((uint64_t)nit * (c + 1) / nch);
	}
	Scratch sc = {0};
	if (R->limit > 0) {
		sc.on = 1;
		sc.avail = sim_estimate_scratch_bytes(G->rs[0].m) + (R->limit > R->bytes ? R->limit - R->bytes : 0);
		pthread_mutex_init(&sc.mu, NULL);
		pthread_cond_init(&sc.cv, NULL);
	}
	Cmp x = {R, slice, ctx, rtol, it, rk, nk, ch, &sc};
	sim_for(threads, nr, index_job, &x);
	sim_for(threads, (int)nch, chunk_job, &x);
	Tally t = {0};
	for (uint32_t c = 0; c < nch && !err; c++) {
		const Tally *u = &ch[c].t;
		if (u->mismatched && !t.mismatched)
			t.first = u->first;
		t.compared += u->compared;
		t.mismatched += u->mismatched;
		t.skipped += u->skipped;
		t.excluded += u->excluded;
		if (u->max_err > t.max_err)
			t.max_err = u->max_err;
		err = ch[c].err;
	}
	if (R->limit > 0) {
		pthread_mutex_destroy(&sc.mu);
		pthread_cond_destroy(&sc.cv);
	}
	check_recomputed(G, 0, rep);
	for (int r = 0; r < nr; r++)
		check_recomputed(R, r, rep);
	rep->compared = t.compared;
	rep->mismatched = t.mismatched;
	rep->skipped = t.skipped;
	rep->excluded = t.excluded;
	rep->max_err = t.max_err;
	rep->first = t.first;
	Pair *p = xcalloc((size_t)nr, sizeof *p);
	if (!err && compare_outputs(G, R, slice, ctx, rtol, p, rep) < 0)
		err = 1;
	for (int r = 0; r < nr; r++)
		free(rk[r]);
	free(rk);
	free(nk);
	free(gk);
	free(occ);
	free(it);
	free(ch);
	free(p);
	return err ? -1 : rep->mismatched || rep->outputs_bad || rep->recomputed_bad ? 1 : 0;
}

/* ------------------------------------------------------ the training step */
/* a rank's parameters and optimizer updates by the weight's name */
typedef struct ByName {
	Sym name;
	Node *n;
} ByName;

static int byname_cmp(const void *a, const void *b)
{
	const ByName *x = a, *y = b;
	return x->name < y->name ? -1 : x->name > y->name;
}

static Node *find_name(const ByName *k, uint32_t n, Sym name)
{
	ByName key = {name, NULL};
	const ByName *f = n ? bsearch(&key, k, n, sizeof *k, byname_cmp) : NULL;
	return f ? f->n : NULL;
}

/* the weight an optimizer update writes (operand 0), or NULL */
static Node *updated_weight(const Node *n)
{
	int gi = sim_grad_operand(n);
	if (gi < 0 || (uint32_t)gi >= n->nargs || !n->nargs || n->args[0].kind != V_NODE ||
	    n->args[gi].kind != V_NODE || n->args[0].u.node->kind != NK_PARAM)
		return NULL;
	return n->args[0].u.node;
}

typedef struct RankIndex {
	ByName *upd, *par; /* updates by weight name, parameters by name */
	uint32_t nupd, npar;
} RankIndex;

static void index_rank(const Graph *g, RankIndex *x)
{
	x->upd = xmalloc((g->nodes.n ? g->nodes.n : 1) * sizeof *x->upd);
	x->par = xmalloc((g->params.n ? g->params.n : 1) * sizeof *x->par);
	x->nupd = x->npar = 0;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *w = updated_weight(g->nodes.a[i]);
		if (w)
			x->upd[x->nupd++] = (ByName){w->name, g->nodes.a[i]};
	}
	for (uint32_t i = 0; i < g->params.n; i++)
		x->par[x->npar++] = (ByName){g->params.a[i]->name, g->params.a[i]};
	qsort(x->upd, x->nupd, sizeof *x->upd, byname_cmp);
	qsort(x->par, x->npar, sizeof *x->par, byname_cmp);
}

/* Compare the rank tensor lt with gt's block that the rank's copy of the
 * weight lparam holds (the hook on the parameter: the weight's layout, its
 * optimizer shard), gt being the value of the single-device node gn;
 * `named` is the parameter the report names. */
static int check_block(SimSliceFn slice, void *ctx, Node *lparam, const Node *gparam, const Node *named, const Node *gn,
                       const Node *ln, const SimTensor *gt, const SimTensor *lt, int rank, double rtol,
                       SimStepCheck *ck)
{
	Pair p = {.ln = lparam, .lt = lt};
	SimMismatch mm;
	set_where(&mm, gn, ln, rank);
	int rc = get_slice(slice, ctx, &p, gparam, gt, rank);
	if (rc < 0)
		return -1;
	if (rc != 1)
		return 0; /* no layout and another shape, or not a slice: nothing to compare */
	ck->compared++;
	double err = INFINITY;
	int bad = 1;
	int64_t nbad = lt->numel; /* no block to compare: every element is wrong */
	if (p.sl.replicated_sum > 0)
		snprintf(mm.why, sizeof mm.why, "the layout of parameter %s says its ranks hold partial values",
		         sym_str(gparam->name));
	else if (!check_slice(&p.sl, gt, lt, &mm)) {
		bad = compare_block(gt, &p.sl, lt->data, rtol, &mm, &err);
		nbad = mm.nbad;
	}
	ck->elems += lt->numel;
	ck->bad_elems += bad ? nbad : 0;
	if (bad && !ck->bad++) {
		ck->first = mm;
		ck->first_param = named;
	}
	if (!ck->worst_param || err > ck->max_err) {
		ck->worst = mm;
		ck->worst_param = named;
		ck->max_err = err;
	}
	return 0;
}

/* a weight the single-device step updates that rank r (or, with no
 * local, every rank) leaves as it is: a mismatch of its gradient, all of
 * whose numel elements count as wrong (no retry on another seed) */
static void not_updated(SimStepCheck *ck, const Node *w, const Node *gn, const Node *lw, int rank, int64_t numel,
                        const char *why)
{
	SimMismatch mm;
	set_where(&mm, gn, lw, rank);
	snprintf(mm.why, sizeof mm.why, "%s", why);
	ck->compared++;
	ck->elems += numel;
	ck->bad_elems += numel;
	ck->missing++;
	if (!ck->bad++) {
		ck->first = mm;
		ck->first_param = w;
	}
}

int sim_compare_step(const SimRun *G, const SimRun *R, SimSliceFn slice, void *ctx, double rtol, SimStepReport *rep)
{
	memset(rep, 0, sizeof *rep);
	if (rtol <= 0)
		rtol = SIM_RTOL;
	const RankState *gs = &G->rs[0];
	Graph *gg = gs->g;
	int nr = R->nranks, err = 0;
	RankIndex *ix = xcalloc((size_t)nr, sizeof *ix);
	for (int r = 0; r < nr; r++)
		index_rank(R->rs[r].g, &ix[r]);
	uint8_t *covered = xcalloc(G->rs[0].nvals ? G->rs[0].nvals : 1, 1);
	for (uint32_t i = 0; i < gg->nodes.n && !err; i++) {
		Node *u = gg->nodes.a[i], *w = updated_weight(u);
		if (!w)
			continue;
		rep->weights++;
		Node *gn = u->args[sim_grad_operand(u)].u.node;
		const SimTensor *gt = sim_tensor(G, 0, gn), *st = gt;
		/* what the ranks' gradient should be: the reference's, scaled */
		double f = gt && G->o.grad_scale ? G->o.grad_scale(G->o.grad_scale_ctx, w) : 1;
		SimTensor scaled;
		if (f != 1) {
			scaled = *gt;
			scaled.data = xmalloc((size_t)(gt->numel ? gt->numel : 1) * sizeof(float));
			for (int64_t k = 0; k < gt->numel; k++)
				scaled.data[k] = (float)(gt->data[k] * f);
			st = &scaled;
		}
		uint32_t pos[8];
		int nw = sim_ref_operands(u, pos), updated = 0, held = 0;
		for (int r = 0; r < nr && !err && gt; r++) {
			Node *lu = find_name(ix[r].upd, ix[r].nupd, w->name);
			if (!lu) {
				/* another pipeline stage's weight, unless the rank holds it */
				Node *lw = find_name(ix[r].par, ix[r].npar, w->name);
				if (lw) {
					held = 1;
					not_updated(&rep->grads, w, gn, lw, r, gt->numel,
					            "the rank holds the weight but no optimizer update of it");
				}
				continue;
			}
			updated = 1;
			Node *lw = lu->args[0].u.node, *lg = lu->args[sim_grad_operand(lu)].u.node;
			const SimTensor *lt = sim_tensor(R, r, lg);
			if (check_block(slice, ctx, lw, w, w, gn, lg, st, lt, r, rtol, &rep->grads) < 0)
				err = 1;
			/* the written parameters: the weight and its states, all in the weight's block */
			for (int k = 0; k < nw && !err; k++) {
				const Value *gv = &u->args[pos[k]], *lv = pos[k] < lu->nargs ? &lu->args[pos[k]] : NULL;
				if (gv->kind != V_NODE || !lv || lv->kind != V_NODE)
					continue;
				const SimTensor *ga = sim_tensor(G, 0, gv->u.node), *la = sim_tensor(R, r, lv->u.node);
				if (ga && la &&
				    check_block(slice, ctx, lw, w, gv->u.node, gv->u.node, lv->u.node, ga, la, r, rtol,
				                &rep->after) < 0)
					err = 1;
			}
		}
		if (gt && !updated && !held && !err)
			not_updated(&rep->grads, w, gn, NULL, 0, gt->numel, "no rank updates the weight");
		for (int k = 0; k < nw; k++)
			if (u->args[pos[k]].kind == V_NODE)
				covered[u->args[pos[k]].u.node->id] = 1;
		if (st != gt)
			free(scaled.data);
	}
	/* other written parameters (global_step, beta1_power, ...): each in its own layout */
	for (uint32_t i = 0; i < gg->params.n && !err; i++) {
		Node *p = gg->params.a[i];
		if (!gs->last || !gs->last[p->id])
			continue;
		rep->written++;
		const SimTensor *ga = covered[p->id] ? NULL : sim_tensor(G, 0, p);
		for (int r = 0; r < nr && !err && ga; r++) {
			Node *lp = find_name(ix[r].par, ix[r].npar, p->name);
			const SimTensor *la = lp ? sim_tensor(R, r, lp) : NULL;
			if (la && check_block(slice, ctx, lp, p, p, p, lp, ga, la, r, rtol, &rep->after) < 0)
				err = 1;
		}
	}
	for (int r = 0; r < nr; r++) {
		free(ix[r].upd);
		free(ix[r].par);
	}
	free(ix);
	free(covered);
	return err ? -1 : rep->grads.bad || rep->after.bad ? 1 : 0;
}

static void print_node(FILE *f, const Node *n)
{
	if (n->kind == NK_PARAM) {
		fprintf(f, "%%para%d_%s", n->local, sym_str(n->name));
		return;
	}
	const char *full = ir_node_fullname(n);
	fprintf(f, "%%%d(%s) %s", n->local, ir_node_name(n), sym_str(n->prim));
	if (*full)
		fprintf(f, " [%s]", full);
}

static void print_mismatch(FILE *f, const SimMismatch *m)
{
	print_node(f, m->global);
	fprintf(f, " on rank %d", m->rank);
	if (m->local && m->local->local != m->global->local)
		fprintf(f, " (its %%%d there)", m->local->local);
	if (m->why[0]) {
		fprintf(f, ": %s\n", m->why);
	} else {
		char li[160], gi[160];
		sim_fmt_index(li, sizeof li, m->ndim, m->index);
		sim_fmt_index(gi, sizeof gi, m->ndim, m->gindex);
		fprintf(f, ": element %s (global %s) expected %.9g, got %.9g; %lld of %lld elements differ\n", li, gi,
		        m->expected, m->got, (long long)m->nbad, (long long)m->numel);
	}
}

void sim_print_report(FILE *f, const SimReport *rep)
{
	char extra[64] = "";
	if (rep->excluded)
		snprintf(extra, sizeof extra, ", %d not slices", rep->excluded);
	if (!rep->mismatched) {
		fprintf(f,
		        "simulate: %d operator values compared, all within tolerance, max relative error %.3g (%d "
		        "skipped: no layout%s)\n",
		        rep->compared, rep->max_err, rep->skipped, extra);
	} else {
		fprintf(f, "simulate: first divergence at ");
		print_mismatch(f, &rep->first);
		fprintf(f, "simulate: %d of %d operator values differ (%d skipped: no layout%s)\n", rep->mismatched,
		        rep->compared, rep->skipped, extra);
	}
	for (int i = 0; i < rep->noutputs && i < SIM_MAX_OUTPUTS; i++) {
		const SimOutput *o = &rep->outputs[i];
		if (!o->global)
			continue;
		fprintf(f, "simulate: output");
		if (rep->noutputs > 1)
			fprintf(f, " %d", i);
		fprintf(f, " (");
		print_node(f, o->global);
		fprintf(f, "): %d of %d returning ranks agree, max relative error %.3g\n", o->agree, o->ranks,
		        o->max_err);
	}
	if (rep->outputs_bad) {
		fprintf(f, "simulate: first output divergence at ");
		print_mismatch(f, &rep->first_output);
	}
	if (rep->recomputed && !rep->recomputed_bad)
		fprintf(f, "simulate: recomputed: %d duplicate values equal their origins'\n", rep->recomputed);
	if (rep->recomputed_bad) {
		fprintf(f, "simulate: recomputed: %d of %d duplicate values differ from their origins'; first: ",
		        rep->recomputed_bad, rep->recomputed);
		print_mismatch(f, &rep->first_recomputed);
	}
}

static void print_check(FILE *f, const char *what, const SimStepCheck *ck)
{
	if (!ck->compared)
		return;
	if (!ck->bad)
		fprintf(
		    f,
		    "simulate: %s: %d (parameter, rank) pairs compared, all within tolerance, max relative error %.3g",
		    what, ck->compared, ck->max_err);
	else
		fprintf(f, "simulate: %s: %d of %d (parameter, rank) pairs differ", what, ck->bad, ck->compared);
	if (ck->worst_param && !ck->worst.why[0]) {
		char gi[160];
		sim_fmt_index(gi, sizeof gi, ck->worst.ndim, ck->worst.gindex);
		fprintf(f, "; worst element: %s %s on rank %d, expected %.9g, got %.9g", sym_str(ck->worst_param->name),
		        gi, ck->worst.rank, ck->worst.expected, ck->worst.got);
	}
	fprintf(f, "\n");
	if (ck->bad) {
		fprintf(f, "simulate: %s: first wrong: parameter %s, ", what, sym_str(ck->first_param->name));
		print_mismatch(f, &ck->first);
	}
}

void sim_print_step_report(FILE *f, const SimStepReport *rep)
{
	if (!rep->weights)
		return;
	print_check(f, "gradients", &rep->grads);
	print_check(f, "after the step", &rep->after);
}
