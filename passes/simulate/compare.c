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

static uint64_t node_key(const Node *n)
{
	if (n->kind != NK_CNODE)
		return 0;
	if (n->scope && sym_len(n->scope))
		return 1ULL << 63 | n->scope;
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
	int rc; /* 1 compare, 0 skip, -1 hook error */
	int done;
} Pair;

static int get_slice(SimSliceFn fn, void *ctx, Pair *p, const Node *gn, const SimTensor *gt, int rank)
{
	memset(&p->sl, 0, sizeof p->sl);
	int rc = fn ? fn(ctx, p->ln, gn, rank, &p->sl) : 0;
	if (rc != 0)
		return rc < 0 ? -1 : 1;
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

/* element-wise check of got (shape sl->shape) against gt's block */
static int compare_block(const SimTensor *gt, const SimSlice *sl, const float *got, double rtol, SimMismatch *mm)
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
	return nbad > 0;
}

static int same_block(const SimSlice *a, const SimSlice *b)
{
	if (a->rank != b->rank || a->replicated_sum != b->replicated_sum)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->offset[i] != b->offset[i] || a->shape[i] != b->shape[i])
			return 0;
	return 1;
}

static void record(SimReport *rep, const SimMismatch *mm)
{
	if (!rep->mismatched++)
		rep->first = *mm;
}

/* the ranks holding partial sums of p[r]'s block: add them, then compare */
static void compare_partial(Pair *p, int nranks, int r, const Node *gn, const SimTensor *gt, double rtol,
                            SimReport *rep)
{
	SimMismatch mm;
	set_where(&mm, gn, p[r].ln, r);
	int64_t numel = p[r].lt->numel, found = 0;
	double *acc = xcalloc((size_t)(numel ? numel : 1), sizeof *acc);
	for (int q = r; q < nranks; q++) {
		/* a member whose tensor is not the block's shape is left to
		 * check_slice, and missing from the count here */
		if (p[q].rc != 1 || p[q].done || !same_block(&p[r].sl, &p[q].sl) ||
		    !sim_same_shape(p[q].lt, p[r].sl.rank, p[r].sl.shape))
			continue;
		p[q].done = 1;
		found++;
		for (int64_t i = 0; i < numel; i++)
			acc[i] += p[q].lt->data[i];
	}
	rep->compared++;
	if (found != p[r].sl.replicated_sum) {
		snprintf(mm.why, sizeof mm.why, "%lld ranks hold partial sums of this block, the layout says %d",
		         (long long)found, p[r].sl.replicated_sum);
		record(rep, &mm);
	} else {
		float *sum = xmalloc((size_t)(numel ? numel : 1) * sizeof *sum);
		for (int64_t i = 0; i < numel; i++)
			sum[i] = (float)acc[i];
		if (compare_block(gt, &p[r].sl, sum, rtol, &mm))
			record(rep, &mm);
		free(sum);
	}
	free(acc);
}

int sim_compare(const SimRun *G, const SimRun *R, SimSliceFn slice, void *ctx, double rtol, SimReport *rep)
{
	memset(rep, 0, sizeof *rep);
	if (rtol <= 0)
		rtol = 1e-4;
	int nr = R->nranks, err = 0;
	Graph *gg = ir_entry(G->rs[0].m);
	uint32_t ng, *nk = xcalloc((size_t)nr, sizeof *nk);
	Key *gk = index_graph(gg, &ng), **rk = xcalloc((size_t)nr, sizeof *rk);
	uint32_t *occ = xcalloc(gg->nodes.n ? gg->nodes.n : 1, sizeof *occ);
	for (uint32_t i = 1; i < ng; i++) /* gk is sorted by (key, order): occurrences are runs */
		if (gk[i].key == gk[i - 1].key)
			occ[gk[i].order] = occ[gk[i - 1].order] + 1;
	for (int r = 0; r < nr; r++)
		rk[r] = index_graph(R->rs[r].g, &nk[r]);
	Pair *p = xcalloc((size_t)nr, sizeof *p);
	for (uint32_t i = 0; i < gg->nodes.n && !err; i++) {
		Node *gn = gg->nodes.a[i];
		uint64_t key = node_key(gn);
		const SimTensor *gt = sim_tensor(G, 0, gn);
		if (!key || !gt)
			continue;
		for (int r = 0; r < nr; r++) {
			p[r] = (Pair){0};
			p[r].ln = lookup(rk[r], nk[r], key, occ[i]);
			p[r].lt = p[r].ln ? sim_tensor(R, r, p[r].ln) : NULL;
			p[r].rc = p[r].lt ? get_slice(slice, ctx, &p[r], gn, gt, r) : 0;
			if (p[r].ln && p[r].lt && p[r].rc == 0)
				rep->skipped++;
		}
		for (int r = 0; r < nr && !err; r++) {
			SimMismatch mm;
			if (p[r].done || p[r].rc == 0)
				continue;
			set_where(&mm, gn, p[r].ln, r);
			if (p[r].rc < 0) {
				snprintf(mm.why, sizeof mm.why, "the layout hook failed");
				record(rep, &mm);
				err = 1;
			} else if (check_slice(&p[r].sl, gt, p[r].lt, &mm)) {
				rep->compared++;
				record(rep, &mm);
			} else if (p[r].sl.replicated_sum > 0) {
				compare_partial(p, nr, r, gn, gt, rtol, rep);
			} else {
				rep->compared++;
				if (compare_block(gt, &p[r].sl, p[r].lt->data, rtol, &mm))
					record(rep, &mm);
			}
		}
	}
	for (int r = 0; r < nr; r++)
		free(rk[r]);
	free(rk);
	free(nk);
	free(gk);
	free(occ);
	free(p);
	return err ? -1 : rep->mismatched ? 1 : 0;
}

static void print_node(FILE *f, const Node *n)
{
	const char *full = ir_node_fullname(n);
	fprintf(f, "%%%d(%s) %s", n->local, sym_str(n->name), sym_str(n->prim));
	if (*full)
		fprintf(f, " [%s]", full);
}

void sim_print_report(FILE *f, const SimReport *rep)
{
	if (!rep->mismatched) {
		fprintf(f, "simulate: %d operator values compared, all within tolerance (%d skipped: no layout)\n",
		        rep->compared, rep->skipped);
		return;
	}
	const SimMismatch *m = &rep->first;
	fprintf(f, "simulate: first divergence at ");
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
	fprintf(f, "simulate: %d of %d operator values differ (%d skipped: no layout)\n", rep->mismatched,
	        rep->compared, rep->skipped);
}
