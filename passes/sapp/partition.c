/* partition.c - the outer recursion of SAPP (spec sapp-search.md §3, §4.9).
 *
 * One level per prime factor of the device count (largest first; with S
 * pipeline stages the primes of the per-stage count come first and those of
 * S last, so that rolling back the last levels leaves the per-stage
 * partition, §3.6).  For 2^L devices these are MindSpore's L halvings.
 * At each level every kept, non-pinned rec node decides once, greedily,
 * which dimension to cut by the level's prime (cost.c), seeing the choices
 * made before it in the same level.  Visiting order (§3.3, §8.2): a genuine
 * topological order (rec index order is module order, producers first; the
 * VirtualDataset is index 0), unknown-type nodes last; or, with more than
 * `weight_order_devices` devices and a micro-batch size below
 * `weight_order_mbs`, decreasing GetWeights, ties producers first: MindSpore
 * sorts by (weight, index) descending, but its operator indices come from a
 * walk back from the Return and grow towards the inputs, so its "higher
 * index first" is sappc's lower (module-order) index first.  Two equal
 * MatMuls of a chain then decide the first before the second, as in
 * MindSpore's test_auto_parallel_matmul_seq_parallel.py (issue 19).
 * Pinned (user) nodes are never re-partitioned; at each level they show
 * their neighbours one step of their strategy (DecomposeStrategy).
 * With pipeline stages every node keeps its cuts after each of the levels
 * the roll-back may return to (MindSpore's strs history, §3.6): the memory
 * check sees the whole partition and --auto-pipeline (§5) may roll back
 * fewer levels than --pipeline-stages asks; sapp_rollback() does it.
 * The levels work on the dense partition view of the kept nodes (PartNode,
 * RecVis, RecLink; sapp_part_init in cost.c): one node's decision reads its
 * own state and its linked neighbours' visible state, nothing else.
 */
#include <stdlib.h>
#include <string.h>

#include "sapp.h"

static const Dim4 ONES = {{1, 1, 1, 1}};

/* DecomposeStrategy (§4.9), one level at a time: the first of n, c, h, w
 * whose remaining shard count the level's prime divides gives this level's
 * step; when there is none, the user's raw cuts are shown (they match a
 * pattern only if they are all ones). */
void sapp_decompose_step(Dim4 *rem, const Dim4 *user, int p, Dim4 *step)
{
	for (int d = 0; d < 4; d++)
		if (rem->d[d] > 1 && rem->d[d] % p == 0) {
			*step = ONES;
			step->d[d] = p;
			rem->d[d] /= p;
			return;
		}
	*step = *user;
}

typedef struct WItem {
	double w;
	uint32_t idx;
} WItem;

static int wcmp(const void *a, const void *b)
{
	const WItem *x = a, *y = b;
	if (x->w != y->w)
		return x->w < y->w ? 1 : -1;
	return x->idx < y->idx ? -1 : x->idx > y->idx ? 1 : 0;
}

/* scratch of weight_sort, sized once for all levels */
typedef struct WSort {
	uint32_t cap;  /* hash slots, a power of two */
	uint64_t *key; /* slot -> weight bits */
	int32_t *grp;  /* slot -> group, -1 empty */
	WItem *gs;     /* groups (weight, group), then by decreasing weight */
	uint32_t *cnt; /* group -> items, then its next free position in order[] */
	uint32_t *of;  /* item -> group */
} WSort;

static void wsort_init(WSort *t, uint32_t n)
{
	t->cap = 16;
	while (t->cap < 2 * n + 2)
		t->cap *= 2;
	t->key = xmalloc(t->cap * sizeof *t->key);
	t->grp = xmalloc(t->cap * sizeof *t->grp);
	t->gs = xmalloc((n + 1) * sizeof *t->gs);
	t->cnt = xmalloc((n + 1) * sizeof *t->cnt);
	t->of = xmalloc((n + 1) * sizeof *t->of);
}

static void wsort_free(WSort *t)
{
	free(t->key);
	free(t->grp);
	free(t->gs);
	free(t->cnt);
	free(t->of);
}

/* order[] = w[] (in increasing idx) by wcmp: decreasing weight, ties by
 * increasing index (producers first).  Weights repeat (every layer has the
 * same operators), so the items are bucketed by weight: the distinct
 * weights are sorted, then each bucket filled walking the items in order.  Without a NaN
 * wcmp is a total order and this is the one sorted sequence; with one,
 * the qsort of before. */
static void weight_sort(WSort *t, WItem *w, uint32_t n, uint32_t *order)
{
	for (uint32_t i = 0; i < n; i++)
		if (w[i].w != w[i].w) {
			qsort(w, n, sizeof *w, wcmp);
			for (uint32_t k = 0; k < n; k++)
				order[k] = w[k].idx;
			return;
		}
	memset(t->grp, 0xff, t->cap * sizeof *t->grp);
	uint32_t ng = 0;
	for (uint32_t i = 0; i < n; i++) {
		double v = w[i].w == 0 ? 0.0 : w[i].w; /* -0 == 0 */
		uint64_t k;
		memcpy(&k, &v, sizeof k);
		uint32_t j = (uint32_t)((k * 0x9E3779B97F4A7C15ULL) >> 32) & (t->cap - 1);
		while (t->grp[j] >= 0 && t->key[j] != k)
			j = (j + 1) & (t->cap - 1);
		if (t->grp[j] < 0) {
			t->key[j] = k;
			t->grp[j] = (int32_t)ng;
			t->gs[ng].w = v;
			t->gs[ng].idx = ng;
			t->cnt[ng] = 0;
			ng++;
		}
		t->of[i] = (uint32_t)t->grp[j];
		t->cnt[t->of[i]]++;
	}
	qsort(t->gs, ng, sizeof *t->gs, wcmp); /* distinct weights: by weight alone */
	uint32_t pos = 0;
	for (uint32_t r = 0; r < ng; r++) {
		uint32_t g = t->gs[r].idx, c = t->cnt[g];
		t->cnt[g] = pos;
		pos += c;
	}
	for (uint32_t i = 0; i < n; i++)
		order[t->cnt[t->of[i]]++] = w[i].idx;
}

/* --explain's table of one level: on stderr after "sapp: explain: LABEL: "
 * (lead), or without a lead into Sapp.levels (Options.record_levels) */
static void explain_level(FILE *f, const char *lead, const PartNode *N, int level, int p, const SappChoice *c)
{
	fprintf(f, "%slevel %d (cut by %d)\n", lead, level, p);
	if (!c->nopt)
		fprintf(f, "  no options: a %s node is never cut\n", sapp_rectype_name[N->type]);
	for (int k = 0; k < c->nopt; k++) {
		if (c->total[k] == SAPP_INVALID)
			fprintf(f, "  option %-4s invalid\n", c->name[k]);
		else
			fprintf(f, "  option %-4s op cost %.6g  redistribution %.6g  total %.6g\n", c->name[k],
				c->opcost[k], c->redis[k], c->total[k]);
	}
	fprintf(f, "  choice: %s\n", c->best < 0 ? "no cut" : c->name[c->best]);
}

/* append what fill prints to operator x's recorded level text */
static void record(Sapp *S, uint32_t x, void (*fill)(FILE *, const void *), const void *arg)
{
	char buf[2048];
	FILE *f = fmemopen(buf, sizeof buf, "w");
	if (!f)
		return;
	fill(f, arg);
	long k = ftell(f);
	fclose(f);
	if (k <= 0)
		return;
	if ((size_t)k >= sizeof buf)
		k = sizeof buf - 1;
	SappText *t = &S->levels[x];
	if (t->n + (size_t)k + 1 > t->cap) {
		t->cap = (t->n + (size_t)k + 1) * 2;
		t->s = xrealloc(t->s, t->cap);
	}
	memcpy(t->s + t->n, buf, (size_t)k);
	t->n += (size_t)k;
	t->s[t->n] = 0;
}

typedef struct {
	const PartNode *N;
	int level, p;
	const SappChoice *c;
} LevelArgs;

static void fill_level(FILE *f, const void *arg)
{
	const LevelArgs *a = arg;
	explain_level(f, "", a->N, a->level, a->p, a->c);
}

static void print_cuts(const PartNode *N, char *buf, size_t n)
{
	snprintf(buf, n, "in0 (%lld, %lld, %lld, %lld) in1 (%lld, %lld, %lld, %lld) out (%lld, %lld, %lld, %lld)",
		 (long long)N->acut[0].d[0], (long long)N->acut[0].d[1], (long long)N->acut[0].d[2],
		 (long long)N->acut[0].d[3], (long long)N->acut[1].d[0], (long long)N->acut[1].d[1],
		 (long long)N->acut[1].d[2], (long long)N->acut[1].d[3], (long long)N->ocut.d[0], (long long)N->ocut.d[1],
		 (long long)N->ocut.d[2], (long long)N->ocut.d[3]);
}

/* cuts after keep_levels + j levels (j = 0 .. rollback - 1), in S->snap */
static void snapshot(Sapp *S, int j)
{
	Dim4 *sn = S->snap + 3 * (size_t)S->nkept * (size_t)j;
	for (uint32_t k = 0; k < S->nkept; k++) {
		const PartNode *P = &S->part[k];
		sn[3 * k] = P->acut[0];
		sn[3 * k + 1] = P->acut[1];
		sn[3 * k + 2] = P->ocut;
	}
}

int sapp_partition(Sapp *S)
{
	sapp_part_init(S);
	uint32_t *order = xmalloc((S->nkept + 1) * sizeof *order);
	WItem *w = xmalloc((S->nkept + 1) * sizeof *w);
	WSort ws = {0};
	if (S->weight_order)
		wsort_init(&ws, S->nkept);
	uint32_t npin = 0;
	uint32_t *pins = xmalloc((S->nkept + 1) * sizeof *pins);
	for (uint32_t k = 0; k < S->nkept; k++)
		if (S->part[k].pinned)
			pins[npin++] = k;
	int keep_levels = S->nlevels - S->rollback;
	if (S->rollback > 0)
		S->snap = arena_alloc(S->arena, (3 * (size_t)S->nkept * (size_t)S->rollback + 1) * sizeof(Dim4));
	if (keep_levels == 0 && S->rollback > 0)
		snapshot(S, 0);
	for (int level = 0; level < S->nlevels; level++) {
		int p = S->primes[level];
		for (uint32_t i = 0; i < npin; i++) {
			RecNode *N = &S->rec[S->part[pins[i]].rec];
			RecVis *V = &S->vis[pins[i]];
			Dim4 one1; /* input 1's step: no neighbour looks at it */
			V->lvl = level;
			sapp_decompose_step(&N->pin[3], &N->pin[0], p, &V->in0);
			sapp_decompose_step(&N->pin[4], &N->pin[1], p, &one1);
			sapp_decompose_step(&N->pin[5], &N->pin[2], p, &V->out);
		}
		uint32_t n = 0;
		if (S->weight_order) {
			for (uint32_t k = 0; k < S->nkept; k++) {
				const PartNode *N = &S->part[k];
				if (N->pinned)
					continue;
				w[n].w = sapp_weight(S, N, p);
				w[n].idx = k;
				n++;
			}
			weight_sort(&ws, w, n, order);
		} else {
			for (int pass = 0; pass < 2; pass++)
				for (uint32_t k = 0; k < S->nkept; k++) {
					const PartNode *N = &S->part[k];
					if (!N->pinned && (N->type == REC_UnknownType) == pass)
						order[n++] = k;
				}
		}
		for (uint32_t i = 0; i < n; i++) {
			PartNode *N = &S->part[order[i]];
			RecVis *V = &S->vis[order[i]];
			SappChoice c;
			/* the visiting order jumps around: fetch the next nodes, their
			 * links, then their neighbours ahead of time */
			if (i + 8 < n)
				sapp_prefetch_bytes(&S->part[order[i + 8]], sizeof(PartNode));
			if (i + 4 < n)
				sapp_prefetch(S->part[order[i + 4]].link);
			if (i + 2 < n) {
				const PartNode *M = &S->part[order[i + 2]];
				for (uint32_t j = 0; j < M->nlink; j++)
					sapp_prefetch(&S->vis[M->link[j].nb]);
			}
			sapp_choose(S, N, p, level, &c);
			if (sapp_explaining(S, N->rec)) {
				char lab[256], lead[300];
				snprintf(lead, sizeof lead, "sapp: explain: %s: ",
					 sapp_op_label(&S->ops[N->rec], lab, sizeof lab));
				explain_level(stderr, lead, N, level, p, &c);
			}
			if (S->levels) {
				LevelArgs la = {N, level, p, &c};
				record(S, N->rec, fill_level, &la);
			}
			sapp_apply_choice(N, &c);
			V->lvl = level;
			V->in0 = c.best < 0 ? ONES : c.eff[c.best][0];
			V->out = c.best < 0 ? ONES : c.eff[c.best][2];
		}
		if (level + 1 >= keep_levels && level + 1 < S->nlevels)
			snapshot(S, level + 1 - keep_levels);
	}
	free(order);
	free(w);
	if (S->weight_order)
		wsort_free(&ws);
	free(pins);
	return 0;
}

typedef struct {
	int keep, levels;
	const char *cuts;
} RollArgs;

static void fill_roll(FILE *f, const void *arg)
{
	const RollArgs *a = arg;
	fprintf(f, "after %d level(s)%s: %s\n", a->keep, a->levels ? " (pipeline roll-back)" : "", a->cuts);
}

/* Pipeline roll-back (§3.6): every node not pinned takes its cuts after
 * nlevels - levels levels, the partition for the per-stage device count.
 * levels <= S->rollback (0: keep the whole partition). */
void sapp_rollback(Sapp *S, int levels)
{
	int keep_levels = S->nlevels - levels;
	if (levels > 0) {
		const Dim4 *sn = S->snap + 3 * (size_t)S->nkept * (size_t)(S->rollback - levels);
		for (uint32_t k = 0; k < S->nkept; k++) {
			PartNode *P = &S->part[k];
			if (P->pinned)
				continue;
			P->acut[0] = sn[3 * k];
			P->acut[1] = sn[3 * k + 1];
			P->ocut = sn[3 * k + 2];
		}
	}
	for (uint32_t k = 0; k < S->nkept; k++) {
		const PartNode *N = &S->part[k];
		if (N->pinned || (!sapp_explaining(S, N->rec) && !S->levels))
			continue;
		char lab[256], cuts[256];
		print_cuts(N, cuts, sizeof cuts);
		if (sapp_explaining(S, N->rec))
			fprintf(stderr, "sapp: explain: %s: after %d level(s)%s: %s\n",
				sapp_op_label(&S->ops[N->rec], lab, sizeof lab), keep_levels,
				levels ? " (pipeline roll-back)" : "", cuts);
		if (S->levels) {
			RollArgs ra = {keep_levels, levels, cuts};
			record(S, N->rec, fill_roll, &ra);
		}
	}
}
