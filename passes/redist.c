/* redist.c - the tensor-redistribution planner (parallel-lowering.md §4.2,
 * steps 0-5; the 2.3+ list optimiser of step 6 is not implemented).
 *
 * Given the layout a producer leaves a tensor in and the layout a consumer
 * wants, list the local operators one rank runs to get from its old slice to
 * its new one.  The plan is built in three layers:
 *
 *   unify     (steps 0-2) standardise and squeeze both layouts, put them on a
 *             common device matrix (prefix products) and a common tensor shape
 *             (suffix products, ExpandTensorShape); when no common shape
 *             exists the transfer is "unexpandable" (step 2b);
 *   infer     (step 3) walk the tensor dimensions in robin_hood hash order
 *             and emit abstract SplitByAxis / PermuteByAxis / ConcatByAxis
 *             steps that turn the source map into the target map;
 *   construct (step 4) turn each abstract step into concrete operators for
 *             one rank: StridedSlice, AllGather (+ Split + Concat when the
 *             gathered axis is not 0) or AlltoAll; step 5 adds the Reshapes
 *             that move between the caller's shapes and the unified ones.
 *
 * Step 3 depends only on the maps, never on the rank, so every rank gets the
 * same operator sequence (only groups and slice offsets differ): this is what
 * lets the collectives match up.  Nothing here allocates except the group
 * storage of a plan that communicates.
 *
 * Limits: unified layouts live in Layout, so a unification that would need
 * more than LAYOUT_MAX_DIM tensor or LAYOUT_MAX_DEV device dimensions is
 * treated as unexpandable (step 2b), which is still a correct plan.
 */
#include <stdio.h>
#include <string.h>

#include "layout.h"
#include "sappc.h"

/* ------------------------------------------------------------ step 3 */

typedef enum { AB_SPLIT, AB_CONCAT, AB_PERMUTE } AbsKind;

/* An abstract step of §4.2 step 3.  SPLIT(dim, val): cut tensor dim `dim`
 * over the device dim with map value `val`.  CONCAT(dim, val): gather it back.
 * PERMUTE(dim, cat, val): AlltoAll moving the cut by `val` from `cat` to
 * `dim`.  n is the size of the device dimension; P (cost model only) the
 * element count recorded with the step. */
typedef struct AbsOp {
	uint8_t kind;
	int8_t dim, cat;
	int8_t val;
	int64_t n;
	double P;
} AbsOp;

#define ABS_MAX (4 * LAYOUT_MAX_DIM + 8)

static int64_t dev_size(const Layout *l, int64_t val)
{
	return l->dev[l->ndev - 1 - val];
}

static int64_t numel(const int64_t *s, int r)
{
	int64_t p = 1;
	for (int i = 0; i < r; i++)
		p *= s[i];
	return p;
}

/* RedistributionOperatorInfer.  `m` is the hash map tensor-dim -> current
 * source map value; entries are erased once their dimension is final.  The
 * map is visited in the iteration order of a robin_hood map that holds keys
 * 0..r-1 (rh_order_ints); erasing keeps the order of what is left and no key
 * is ever added, so an "alive" flag per position is an exact model.
 *
 * Outer loop: (split pass, then permute passes until they add nothing) until
 * a split pass adds nothing; then one concat pass for values the target does
 * not use; if the whole round added nothing (a cycle such as swapping two
 * dims), the first remaining entry is gathered to break it.
 *
 * Caveat: MindSpore erases with `map_.erase(iter++)`.  robin_hood's erase
 * shifts a displaced successor back into the freed slot, so for r >= 6 (where
 * a fresh map has displaced keys: key 5 for r = 6, key 6 for r >= 7) the real
 * loop may visit that successor through a stale slot.  We follow the spec's
 * model (order kept, nothing skipped); the two can differ only for unified
 * ranks >= 6 when the erased key sits just before a displaced one. */
static int infer(const Layout *u, const int64_t *to_map, int alltoall, double P, AbsOp *ops)
{
	int r = u->rank, ord[LAYOUT_MAX_DIM], alive[LAYOUT_MAX_DIM], nalive = r, n = 0;
	int64_t m[LAYOUT_MAX_DIM];
	rh_order_ints(r, ord);
	for (int i = 0; i < r; i++) {
		alive[i] = 1;
		m[i] = u->map[i];
	}
#define EMIT(K, D, C, V)                                                                                               \
	do {                                                                                                           \
		if (n >= ABS_MAX)                                                                                      \
			return -1;                                                                                     \
		ops[n] = (AbsOp){(K), (int8_t)(D), (int8_t)(C), (int8_t)(V), dev_size(u, (V)), P};                     \
		n++;                                                                                                   \
	} while (0)
#define ERASE(k) (alive[k] = 0, nalive--)
	while (nalive > 0) {
		int len_global = n;
		while (nalive > 0) {
			int len_split = n;
			/* SplitByAxis: cut dims whose target value is free */
			for (int x = 0; x < r; x++) {
				int k = ord[x];
				if (!alive[k])
					continue;
				int64_t in = m[k], out = to_map[k];
				if (in == out) {
					ERASE(k);
					continue;
				}
				if (in != -1)
					continue;
				int held = 0;
				for (int j = 0; j < r; j++)
					held |= alive[j] && m[j] == out;
				if (!held) {
					EMIT(AB_SPLIT, k, -1, out);
					ERASE(k);
				}
			}
			/* PermuteByAxis: the target value is held by another dim */
			while (nalive > 0) {
				int len_perm = n;
				for (int x = 0; x < r; x++) {
					int k = ord[x];
					if (!alive[k])
						continue;
					int64_t in = m[k], out = to_map[k];
					if (in == out) {
						ERASE(k);
						continue;
					}
					if (in != -1)
						continue;
					int cat = -1;
					for (int j = 0; j < r; j++)
						if (alive[j] && m[j] == out)
							cat = j;
					if (cat < 0)
						continue;
					if (alltoall) {
						EMIT(AB_PERMUTE, k, cat, out);
					} else {
						EMIT(AB_CONCAT, cat, -1, out);
						EMIT(AB_SPLIT, k, -1, out);
					}
					ERASE(k);
					m[cat] = -1;
				}
				if (len_perm == n)
					break;
			}
			if (len_split == n)
				break;
		}
		/* ConcatByAxis: values the target does not use at all */
		for (int x = 0; x < r; x++) {
			int k = ord[x];
			if (!alive[k] || m[k] == -1)
				continue;
			int used = 0;
			for (int j = 0; j < r; j++)
				used |= to_map[j] == m[k];
			if (used)
				continue;
			EMIT(AB_CONCAT, k, -1, m[k]);
			if (to_map[k] == -1)
				ERASE(k);
			else
				m[k] = -1;
		}
		/* deadlock breaker */
		if (len_global == n && nalive > 0) {
			int k = -1;
			for (int x = 0; x < r && k < 0; x++)
				if (alive[ord[x]])
					k = ord[x];
			if (m[k] == -1) /* cannot happen: such an entry makes progress above */
				return -1;
			EMIT(AB_CONCAT, k, -1, m[k]);
			m[k] = -1;
		}
	}
#undef EMIT
#undef ERASE
	return n;
}

/* ------------------------------------------------------------ step 4 */

typedef struct Builder {
	RedistPlan *plan;
	const int64_t *dev_list;
	size_t *goff; /* group offsets into plan->groupbuf, fixed up at the end */
	char *err;
	size_t errlen;
} Builder;

static RedistOp *new_op(Builder *b, RedistKind k, const int64_t *in, int rin)
{
	RedistPlan *p = b->plan;
	if (p->nops >= REDIST_MAX_OPS) {
		snprintf(b->err, b->errlen, "redistribution needs more than %d operators", REDIST_MAX_OPS);
		return NULL;
	}
	RedistOp *op = &p->ops[p->nops++];
	memset(op, 0, sizeof *op);
	op->kind = k;
	op->rank_in = op->rank_out = rin;
	memcpy(op->in_shape, in, (size_t)rin * sizeof *in);
	memcpy(op->out_shape, in, (size_t)rin * sizeof *in);
	return op;
}

/* Record the ranks of device dimension a's group through position pos. */
static void set_group(Builder *b, RedistOp *op, const Layout *u, int64_t pos, int a)
{
	RedistPlan *p = b->plan;
	int64_t n = u->dev[a];
	if (p->ngroupbuf + n > p->capgroupbuf) {
		int nc = p->capgroupbuf ? p->capgroupbuf : 64;
		while (nc < p->ngroupbuf + n)
			nc *= 2;
		p->groupbuf = xrealloc(p->groupbuf, (size_t)nc * sizeof *p->groupbuf);
		p->capgroupbuf = nc;
	}
	int64_t *g = p->groupbuf + p->ngroupbuf;
	layout_group_along(u, pos, a, g);
	for (int64_t k = 0; k < n; k++)
		g[k] = b->dev_list[g[k]];
	b->goff[op - p->ops] = (size_t)p->ngroupbuf;
	op->ngroup = (int)n;
	p->ngroupbuf += (int)n;
}

static int emit_reshape(Builder *b, const int64_t *in, int rin, const int64_t *out, int rout)
{
	RedistOp *op = new_op(b, RD_RESHAPE, in, rin);
	if (!op)
		return -1;
	op->rank_out = rout;
	memcpy(op->out_shape, out, (size_t)rout * sizeof *out);
	return 0;
}

static int same_shape(const int64_t *a, int na, const int64_t *b, int nb)
{
	return na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

/* ConstructOperator: abstract steps -> operators for the device at position
 * pos of u's device matrix.  `cur` tracks the layout as the steps apply, so
 * every op sees the local shape left by the previous one.  A step over a
 * size-1 device dimension moves no data and emits nothing. */
static int construct(Builder *b, const Layout *u, const AbsOp *ops, int nops, int64_t pos)
{
	Layout cur = *u;
	int64_t coord[LAYOUT_MAX_DEV], s[LAYOUT_MAX_DIM];
	int r = u->rank;
	layout_coord(u, pos, coord);
	for (int k = 0; k < nops; k++) {
		const AbsOp *a = &ops[k];
		int dd = u->ndev - 1 - a->val; /* device dimension */
		int64_t n = u->dev[dd];
		layout_slice_shape(&cur, s);
		if (a->kind == AB_SPLIT) {
			if (n > 1) {
				/* this rank keeps block coord[dd] of dimension dim */
				RedistOp *op = new_op(b, RD_STRIDEDSLICE, s, r);
				if (!op)
					return -1;
				int64_t blk = s[a->dim] / n;
				for (int i = 0; i < r; i++) {
					op->begin[i] = 0;
					op->end[i] = s[i];
					op->strides[i] = 1;
				}
				op->begin[a->dim] = coord[dd] * blk;
				op->end[a->dim] = (coord[dd] + 1) * blk;
				op->out_shape[a->dim] = blk;
			}
			cur.map[a->dim] = a->val;
		} else if (a->kind == AB_CONCAT) {
			if (n > 1) {
				/* AllGather stacks the group's slices along axis 0 */
				RedistOp *op = new_op(b, RD_ALLGATHER, s, r);
				if (!op)
					return -1;
				op->n = (int)n;
				op->out_shape[0] = s[0] * n;
				set_group(b, op, u, pos, dd);
				if (a->dim != 0) {
					/* ... so cut them apart again and join along dim */
					op = new_op(b, RD_SPLIT, op->out_shape, r);
					if (!op)
						return -1;
					op->axis = 0;
					op->n = (int)n;
					op->out_shape[0] = s[0];
					op = new_op(b, RD_CONCAT, s, r);
					if (!op)
						return -1;
					op->axis = a->dim;
					op->n = (int)n;
					op->out_shape[a->dim] = s[a->dim] * n;
				}
			}
			cur.map[a->dim] = -1;
		} else {
			if (n > 1) {
				RedistOp *op = new_op(b, RD_ALLTOALL, s, r);
				if (!op)
					return -1;
				op->n = (int)n;
				op->split_dim = a->dim;
				op->concat_dim = a->cat;
				op->out_shape[a->dim] = s[a->dim] / n;
				op->out_shape[a->cat] = s[a->cat] * n;
				set_group(b, op, u, pos, dd);
			}
			cur.map[a->cat] = -1;
			cur.map[a->dim] = a->val;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ steps 0-2 */

/* Both layouts standardised, squeezed and unified.  expandable = 0 selects
 * the step-2b path. */
typedef struct Unified {
	Layout fo, to; /* standardised originals */
	Layout fs, ts; /* squeezed */
	Layout fu, tu; /* unified: same device matrix, same shape */
	int expandable;
} Unified;

static int same_dev(const Layout *a, const Layout *b)
{
	return a->ndev == b->ndev && memcmp(a->dev, b->dev, (size_t)a->ndev * sizeof a->dev[0]) == 0;
}

/* §4.2 step 2: grow the two tensor shapes towards each other.  (a) while
 * from's shape does not refine to's, refine from to the common shape and
 * carry its new device cuts over to `to`; (b) the same with the roles
 * swapped; repeat until the shapes agree.  Shapes only get finer, so a small
 * round limit is a safety net, not a semantic. */
static int unify_shapes(Layout *f, Layout *t)
{
	int64_t e[LAYOUT_MAX_DIM];
	if (layout_expand_shape(f->shape, f->rank, t->shape, t->rank, e, LAYOUT_MAX_DIM) < 0)
		return 0;
	for (int round = 0; round < 4 * LAYOUT_MAX_DIM; round++) {
		if (same_shape(f->shape, f->rank, t->shape, t->rank))
			return same_dev(f, t);
		for (int g = 0; !layout_refines(t->shape, t->rank, f->shape, f->rank); g++) {
			int ne = layout_expand_shape(f->shape, f->rank, t->shape, t->rank, e, LAYOUT_MAX_DIM);
			if (g > LAYOUT_MAX_DIM || ne < 0 || layout_expand_tensor_shape(f, e, ne, f) < 0 ||
			    layout_expand_dev(t, f->dev, f->ndev, t) < 0)
				return 0;
		}
		for (int g = 0; !layout_refines(f->shape, f->rank, t->shape, t->rank); g++) {
			int ne = layout_expand_shape(t->shape, t->rank, f->shape, f->rank, e, LAYOUT_MAX_DIM);
			if (g > LAYOUT_MAX_DIM || ne < 0 || layout_expand_tensor_shape(t, e, ne, t) < 0 ||
			    layout_expand_dev(f, t->dev, t->ndev, f) < 0)
				return 0;
		}
	}
	return 0;
}

static void fmt_layout(char *buf, size_t n, const Layout *l)
{
	size_t k = 0;
	k += (size_t)snprintf(buf + k, n - k, "D=[");
	for (int d = 0; d < l->ndev && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)l->dev[d]);
	if (k < n)
		k += (size_t)snprintf(buf + k, n - k, "] M=[");
	for (int i = 0; i < l->rank && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)l->map[i]);
	if (k < n)
		k += (size_t)snprintf(buf + k, n - k, "] shape=[");
	for (int i = 0; i < l->rank && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)l->shape[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

static int unify(const Layout *from, const Layout *to, Unified *U, char *err, size_t errlen)
{
	char a[256], b[256];
	if (layout_check(from) < 0 || layout_check(to) < 0) {
		fmt_layout(a, sizeof a, layout_check(from) < 0 ? from : to);
		snprintf(err, errlen, "invalid tensor layout %s", a);
		return -1;
	}
	layout_standardize(from, &U->fo);
	layout_standardize(to, &U->to);
	if (numel(from->shape, from->rank) != numel(to->shape, to->rank) ||
	    numel(from->dev, from->ndev) != numel(to->dev, to->ndev)) {
		fmt_layout(a, sizeof a, from);
		fmt_layout(b, sizeof b, to);
		snprintf(err, errlen, "cannot redistribute %s to %s: %s differ", a, b,
		         numel(from->dev, from->ndev) != numel(to->dev, to->ndev) ? "device counts" : "element counts");
		return -1;
	}
	/* step 0 */
	layout_squeeze(&U->fo, &U->fs);
	layout_squeeze(&U->to, &U->ts);
	/* step 1 */
	int64_t udev[LAYOUT_MAX_DEV];
	int nu = layout_unify_dev(U->fs.dev, U->fs.ndev, U->ts.dev, U->ts.ndev, udev, LAYOUT_MAX_DEV);
	if (nu < 0 || layout_expand_dev(&U->fs, udev, nu, &U->fu) < 0 ||
	    layout_expand_dev(&U->ts, udev, nu, &U->tu) < 0) {
		fmt_layout(a, sizeof a, &U->fo);
		fmt_layout(b, sizeof b, &U->to);
		snprintf(err, errlen, "cannot redistribute %s to %s: the device matrices have no common refinement", a,
		         b);
		return -1;
	}
	/* step 2 */
	U->expandable = unify_shapes(&U->fu, &U->tu);
	return 0;
}

static void replicated(const Layout *l, Layout *out)
{
	*out = *l;
	for (int i = 0; i < l->rank; i++)
		out->map[i] = -1;
}

/* ------------------------------------------------------------ entry points */

void redist_plan_free(RedistPlan *plan)
{
	free(plan->groupbuf);
	plan->groupbuf = NULL;
	plan->ngroupbuf = plan->capgroupbuf = 0;
	plan->nops = 0;
}

int redist_plan(const Layout *from, const Layout *to, const int64_t *dev_list, int64_t rank, int enable_alltoall,
                int keep_reshape, RedistPlan *plan, char *err, size_t errlen)
{
	Unified U;
	AbsOp abs[ABS_MAX];
	size_t goff[REDIST_MAX_OPS];
	Builder b = {plan, dev_list, goff, err, errlen};
	int64_t sf[LAYOUT_MAX_DIM], st[LAYOUT_MAX_DIM], su[LAYOUT_MAX_DIM];
	plan->nops = 0;
	plan->groupbuf = NULL;
	plan->ngroupbuf = plan->capgroupbuf = 0;
	if (errlen)
		err[0] = 0;
	if (unify(from, to, &U, err, errlen) < 0)
		return -1;
	int64_t ndev = numel(U.fo.dev, U.fo.ndev), pos = -1;
	for (int64_t p = 0; p < ndev && pos < 0; p++)
		if (dev_list[p] == rank)
			pos = p;
	if (pos < 0) {
		snprintf(err, errlen, "rank %lld is not in the stage's device list", (long long)rank);
		return -1;
	}
	layout_slice_shape(&U.fo, sf);
	layout_slice_shape(&U.to, st);
	if (!U.expandable) {
		/* step 2b: gather everything, reshape the full tensor, cut again */
		Layout rf, rt;
		replicated(&U.fo, &rf);
		replicated(&U.to, &rt);
		int n1 = infer(&U.fo, rf.map, enable_alltoall, 0, abs);
		if (n1 < 0 || construct(&b, &U.fo, abs, n1, pos) < 0)
			goto fail;
		if (!same_shape(U.fo.shape, U.fo.rank, U.to.shape, U.to.rank) &&
		    emit_reshape(&b, U.fo.shape, U.fo.rank, U.to.shape, U.to.rank) < 0)
			goto fail;
		int64_t tpos = pos; /* same dev_list, same position */
		int n2 = infer(&rt, U.to.map, enable_alltoall, 0, abs);
		if (n2 < 0 || construct(&b, &rt, abs, n2, tpos) < 0)
			goto fail;
	} else {
		int n = infer(&U.fu, U.tu.map, enable_alltoall, 0, abs);
		if (n < 0)
			goto fail;
		if (n == 0) {
			/* step 5, no communication: at most one Reshape */
			if ((!same_shape(sf, U.fo.rank, st, U.to.rank) || keep_reshape) &&
			    emit_reshape(&b, sf, U.fo.rank, st, U.to.rank) < 0)
				goto fail;
		} else {
			layout_slice_shape(&U.fu, su);
			if (!same_shape(sf, U.fo.rank, su, U.fu.rank) &&
			    emit_reshape(&b, sf, U.fo.rank, su, U.fu.rank) < 0)
				goto fail;
			if (construct(&b, &U.fu, abs, n, pos) < 0)
				goto fail;
			layout_slice_shape(&U.tu, su);
			if (!same_shape(st, U.to.rank, su, U.tu.rank) &&
			    emit_reshape(&b, su, U.tu.rank, st, U.to.rank) < 0)
				goto fail;
		}
	}
	for (int i = 0; i < plan->nops; i++)
		if (plan->ops[i].kind == RD_ALLGATHER || plan->ops[i].kind == RD_ALLTOALL)
			plan->ops[i].group = plan->groupbuf + goff[i];
	return 0;
fail:
	if (errlen && !err[0])
		snprintf(err, errlen, "redistribution failed: operator list too long");
	redist_plan_free(plan);
	return -1;
}

/* §4.5: the cost of a transfer as the strategy searcher sees it.  The search
 * runs step 3 without updating the tracked layout, so every abstract step is
 * charged on the element count of the layout inference started from. */
int redist_cost(const Layout *from, const Layout *to, int enable_alltoall, int keep_reshape, RedistCost *cost,
                char *err, size_t errlen)
{
	Unified U;
	AbsOp abs[2 * ABS_MAX];
	int64_t s[LAYOUT_MAX_DIM], s2[LAYOUT_MAX_DIM];
	int n = 0, reshape = 0;
	memset(cost, 0, sizeof *cost);
	if (unify(from, to, &U, err, errlen) < 0)
		return -1;
	if (!U.expandable) {
		Layout rf, rt;
		replicated(&U.fo, &rf);
		replicated(&U.to, &rt);
		layout_slice_shape(&U.fo, s);
		int n1 = infer(&U.fo, rf.map, enable_alltoall, (double)numel(s, U.fo.rank), abs);
		int n2 =
		    n1 < 0 ? -1 : infer(&rt, U.to.map, enable_alltoall, (double)numel(rt.shape, rt.rank), abs + n1);
		if (n2 < 0) {
			snprintf(err, errlen, "redistribution failed: operator list too long");
			return -1;
		}
		n = n1 + n2;
		reshape = !same_shape(U.fo.shape, U.fo.rank, U.to.shape, U.to.rank);
	} else {
		layout_slice_shape(&U.fu, s);
		n = infer(&U.fu, U.tu.map, enable_alltoall, (double)numel(s, U.fu.rank), abs);
		if (n < 0) {
			snprintf(err, errlen, "redistribution failed: operator list too long");
			return -1;
		}
		layout_slice_shape(&U.fo, s);
		layout_slice_shape(&U.to, s2);
		int64_t su[LAYOUT_MAX_DIM];
		if (n == 0) {
			reshape = !same_shape(s, U.fo.rank, s2, U.to.rank) || keep_reshape;
		} else {
			layout_slice_shape(&U.fu, su);
			reshape = !same_shape(s, U.fo.rank, su, U.fu.rank);
			layout_slice_shape(&U.tu, su);
			reshape |= !same_shape(s2, U.to.rank, su, U.tu.rank);
		}
	}
	const double ag = 0.5, a2a = 2, cf = 2; /* ALLGATHER_REDUCESCATTER / ALLTOALL scale, COST_FACTOR */
	for (int i = 0; i < n; i++) {
		double P = abs[i].P, d = (double)abs[i].n;
		if (abs[i].kind == AB_SPLIT) {
			cost->computation += P;
			cost->memory += P;
		} else if (abs[i].kind == AB_CONCAT) {
			cost->forward_comm += P * d * ag;
			cost->backward_comm += P * ag;
			cost->comm += P * (d + 1) * ag;
			if (abs[i].dim == 0) {
				cost->computation += P;
				cost->memory += P * d;
			} else {
				cost->computation += P + 2 * P * d;
				cost->memory += 2 * P * d + P;
			}
		} else {
			cost->forward_comm += P * a2a;
			cost->backward_comm += P * a2a;
			cost->comm += cf * P * a2a;
			if (abs[i].cat == 0) {
				cost->computation += P;
				cost->memory += P;
			} else {
				cost->computation += P + 2 * P * d;
				cost->memory += 2 * P * d + P;
			}
		}
	}
	if (reshape) {
		/* from_ is the squeezed source: its slice, or its full shape when unexpandable */
		layout_slice_shape(&U.fs, s);
		double prev = U.expandable ? (double)numel(s, U.fs.rank) : (double)numel(U.fs.shape, U.fs.rank);
		cost->computation += cf * prev;
		cost->memory += cf * prev;
	}
	return 0;
}
