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
 * `weight_order_mbs`, decreasing GetWeights (ties: higher index first).
 * Pinned (user) nodes are never re-partitioned; at each level they show
 * their neighbours one step of their strategy (DecomposeStrategy).
 * With pipeline stages every node keeps its cuts after each of the levels
 * the roll-back may return to (MindSpore's strs history, §3.6): the memory
 * check sees the whole partition and --auto-pipeline (§5) may roll back
 * fewer levels than --pipeline-stages asks; sapp_rollback() does it.
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
	return x->idx < y->idx ? 1 : x->idx > y->idx ? -1 : 0;
}

static void explain_level(const Sapp *S, const RecNode *N, int level, int p, const SappChoice *c)
{
	char lab[256];
	fprintf(stderr, "sapp: explain: %s: level %d (cut by %d)\n", sapp_op_label(&S->ops[N->op], lab, sizeof lab),
		level, p);
	if (!c->nopt)
		fprintf(stderr, "  no options: a %s node is never cut\n", sapp_rectype_name[N->type]);
	for (int k = 0; k < c->nopt; k++) {
		if (c->total[k] == SAPP_INVALID)
			fprintf(stderr, "  option %-4s invalid\n", c->name[k]);
		else
			fprintf(stderr, "  option %-4s op cost %.6g  redistribution %.6g  total %.6g\n", c->name[k],
				c->opcost[k], c->redis[k], c->total[k]);
	}
	fprintf(stderr, "  choice: %s\n", c->best < 0 ? "no cut" : c->name[c->best]);
}

static void print_cuts(const RecNode *N, char *buf, size_t n)
{
	snprintf(buf, n, "in0 (%lld, %lld, %lld, %lld) in1 (%lld, %lld, %lld, %lld) out (%lld, %lld, %lld, %lld)",
		 (long long)N->acut[0].d[0], (long long)N->acut[0].d[1], (long long)N->acut[0].d[2],
		 (long long)N->acut[0].d[3], (long long)N->acut[1].d[0], (long long)N->acut[1].d[1],
		 (long long)N->acut[1].d[2], (long long)N->acut[1].d[3], (long long)N->ocut.d[0], (long long)N->ocut.d[1],
		 (long long)N->ocut.d[2], (long long)N->ocut.d[3]);
}

/* cuts after keep_levels + j levels (j = 0 .. rollback - 1) */
static void snapshot(Sapp *S, int j)
{
	for (uint32_t i = 0; i < S->nkept; i++) {
		RecNode *N = &S->rec[S->kept[i]];
		Dim4 *sn = N->snap + 3 * j;
		sn[0] = N->acut[0];
		sn[1] = N->nargs > 1 ? N->acut[1] : ONES;
		sn[2] = N->ocut;
	}
}

int sapp_partition(Sapp *S)
{
	uint32_t *order = xmalloc((S->nkept + 1) * sizeof *order);
	WItem *w = xmalloc((S->nkept + 1) * sizeof *w);
	uint32_t npin = 0;
	uint32_t *pins = xmalloc((S->nkept + 1) * sizeof *pins);
	for (uint32_t i = 0; i < S->nkept; i++)
		if (S->rec[S->kept[i]].pinned)
			pins[npin++] = S->kept[i];
	int keep_levels = S->nlevels - S->rollback;
	if (S->rollback > 0)
		for (uint32_t i = 0; i < S->nkept; i++)
			S->rec[S->kept[i]].snap = arena_alloc(S->arena, 3 * (size_t)S->rollback * sizeof(Dim4));
	if (keep_levels == 0 && S->rollback > 0)
		snapshot(S, 0);
	for (int level = 0; level < S->nlevels; level++) {
		int p = S->primes[level];
		for (uint32_t i = 0; i < npin; i++) {
			RecNode *N = &S->rec[pins[i]];
			N->lvl = level;
			for (int t = 0; t < 3; t++)
				sapp_decompose_step(&N->pin[3 + t], &N->pin[t], p, &N->one[t]);
		}
		uint32_t n = 0;
		if (S->weight_order) {
			for (uint32_t i = 0; i < S->nkept; i++) {
				RecNode *N = &S->rec[S->kept[i]];
				if (N->pinned)
					continue;
				w[n].w = sapp_weight(S, N, p);
				w[n].idx = S->kept[i];
				n++;
			}
			qsort(w, n, sizeof *w, wcmp);
			for (uint32_t i = 0; i < n; i++)
				order[i] = w[i].idx;
		} else {
			for (int pass = 0; pass < 2; pass++)
				for (uint32_t i = 0; i < S->nkept; i++) {
					RecNode *N = &S->rec[S->kept[i]];
					if (!N->pinned && (N->type == REC_UnknownType) == pass)
						order[n++] = S->kept[i];
				}
		}
		for (uint32_t i = 0; i < n; i++) {
			RecNode *N = &S->rec[order[i]];
			SappChoice c;
			sapp_choose(S, N, p, level, &c);
			if (sapp_explaining(S, N->op))
				explain_level(S, N, level, p, &c);
			sapp_apply_choice(N, &c);
			N->lvl = level;
		}
		if (level + 1 >= keep_levels && level + 1 < S->nlevels)
			snapshot(S, level + 1 - keep_levels);
	}
	free(order);
	free(w);
	free(pins);
	return 0;
}

/* Pipeline roll-back (§3.6): every node not pinned takes its cuts after
 * nlevels - levels levels, the partition for the per-stage device count.
 * levels <= S->rollback (0: keep the whole partition). */
void sapp_rollback(Sapp *S, int levels)
{
	int keep_levels = S->nlevels - levels;
	if (levels > 0)
		for (uint32_t i = 0; i < S->nkept; i++) {
			RecNode *N = &S->rec[S->kept[i]];
			if (N->pinned)
				continue;
			const Dim4 *sn = N->snap + 3 * (S->rollback - levels);
			N->acut[0] = sn[0];
			if (N->nargs > 1)
				N->acut[1] = sn[1];
			N->ocut = sn[2];
		}
	for (uint32_t i = 0; i < S->nkept; i++) {
		RecNode *N = &S->rec[S->kept[i]];
		if (!N->pinned && sapp_explaining(S, N->op)) {
			char lab[256], cuts[256];
			print_cuts(N, cuts, sizeof cuts);
			fprintf(stderr, "sapp: explain: %s: after %d level(s)%s: %s\n",
				sapp_op_label(&S->ops[N->op], lab, sizeof lab), keep_levels,
				levels ? " (pipeline roll-back)" : "", cuts);
		}
	}
}
