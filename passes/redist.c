/* redist.c - the tensor-redistribution planner (parallel-lowering.md §4.2,
 * steps 0-5) and the operator-list optimiser of MindSpore 2.3+ (step 6).
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
 * redist_optimize() is step 6, run by the caller on a finished plan: it
 * reads the list back as Reshape / AllConcat / Slice, reorders and rewrites
 * it, and constructs it again.
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

/* Room for op's n group ranks at the end of the plan's group storage; the
 * offset is recorded and turned into op->group by finish_groups(). */
static int64_t *reserve_group(Builder *b, RedistOp *op, int64_t n)
{
	RedistPlan *p = b->plan;
	if (p->ngroupbuf + n > p->capgroupbuf) {
		int nc = p->capgroupbuf ? p->capgroupbuf : 64;
		while (nc < p->ngroupbuf + n)
			nc *= 2;
		p->groupbuf = xrealloc(p->groupbuf, (size_t)nc * sizeof *p->groupbuf);
		p->capgroupbuf = nc;
	}
	b->goff[op - p->ops] = (size_t)p->ngroupbuf;
	op->ngroup = (int)n;
	p->ngroupbuf += (int)n;
	return p->groupbuf + b->goff[op - p->ops];
}

static void finish_groups(Builder *b)
{
	RedistPlan *p = b->plan;
	for (int i = 0; i < p->nops; i++)
		if (p->ops[i].kind == RD_ALLGATHER || p->ops[i].kind == RD_ALLTOALL)
			p->ops[i].group = p->groupbuf + b->goff[i];
}

/* Record the ranks of device dimension a's group through position pos. */
static void set_group(Builder *b, RedistOp *op, const Layout *u, int64_t pos, int a)
{
	int64_t n = u->dev[a], *g = reserve_group(b, op, n);
	layout_group_along(u, pos, a, g);
	for (int64_t k = 0; k < n; k++)
		g[k] = b->dev_list[g[k]];
}

/* StridedSlice keeping block idx of num along `axis` of the local tensor s */
static int emit_slice(Builder *b, const int64_t *s, int r, int axis, int64_t num, int64_t idx)
{
	RedistOp *op = new_op(b, RD_STRIDEDSLICE, s, r);
	if (!op)
		return -1;
	int64_t blk = s[axis] / num;
	for (int i = 0; i < r; i++) {
		op->begin[i] = 0;
		op->end[i] = s[i];
		op->strides[i] = 1;
	}
	op->begin[axis] = idx * blk;
	op->end[axis] = (idx + 1) * blk;
	op->out_shape[axis] = blk;
	return 0;
}

/* AllGather of the local tensor s over a group of n ranks, which stacks the
 * pieces along axis 0; for another axis, Split(0, n) cuts them apart again
 * and Concat(axis) joins them there.  Returns the AllGather, whose group the
 * caller fills in. */
static RedistOp *emit_allconcat(Builder *b, const int64_t *s, int r, int axis, int64_t n)
{
	RedistOp *ag = new_op(b, RD_ALLGATHER, s, r);
	if (!ag)
		return NULL;
	ag->n = (int)n;
	ag->out_shape[0] = s[0] * n;
	if (axis == 0)
		return ag;
	RedistOp *op = new_op(b, RD_SPLIT, ag->out_shape, r);
	if (!op)
		return NULL;
	op->axis = 0;
	op->n = (int)n;
	op->out_shape[0] = s[0];
	op = new_op(b, RD_CONCAT, s, r);
	if (!op)
		return NULL;
	op->axis = axis;
	op->n = (int)n;
	op->out_shape[axis] = s[axis] * n;
	return ag;
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
	return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
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
			/* this rank keeps block coord[dd] of dimension dim */
			if (n > 1 && emit_slice(b, s, r, a->dim, n, coord[dd]) < 0)
				return -1;
			cur.map[a->dim] = a->val;
		} else if (a->kind == AB_CONCAT) {
			if (n > 1) {
				RedistOp *op = emit_allconcat(b, s, r, a->dim, n);
				if (!op)
					return -1;
				set_group(b, op, u, pos, dd);
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
	plan->unexpandable = !U.expandable;
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
	finish_groups(&b);
	return 0;
fail:
	if (errlen && !err[0])
		snprintf(err, errlen, "redistribution failed: operator list too long");
	redist_plan_free(plan);
	return -1;
}

/* ------------------------------------------------------------ step 6 */

/* TensorTransform::OptimizeTensorRedistributionOperatorList (§4.2 step 6,
 * MindSpore 2.3+).  Lists of one op, lists with anything but Reshape,
 * AllGather, Split, Concat and StridedSlice, and step-2b plans are kept.
 * Otherwise, in order:
 *   1. compact form: AllGather [-> Split(0, n) -> Concat(a)] is AllConcat(g,
 *      a), a StridedSlice is Slice(axis, num, idx);
 *   2. drop a Reshape followed by a Reshape, then Reshapes to their input;
 *   3. libstdc++ std::stable_sort with co_less (AllConcats first, larger
 *      axes first; then Slices, smaller axes first; Reshapes "equal" to all);
 *   4. AllConcat on axis k > 0 of (1,..,1, ...) -> Reshape, axis 0, Reshape;
 *   5. Slice on axis k of (1,..,1, ...) followed by Reshape(t) ->
 *      Reshape(t_0 * num, ...), Slice on axis 0;
 *   6. as 2;
 *   7. adjacent AllConcats, same axis, nested strides -> one bigger group;
 *   8. adjacent Slices, same axis -> one Slice;
 *   9. back to operators, shapes and StridedSlice bounds from the input.
 * Where the spec leaves room, the choices are (each at its function):
 *   - the sort is libstdc++'s real algorithm (ir/stdsort.c), not the plain
 *     insertion sort the spec describes: that is only its no-buffer
 *     fallback, and the two differ from 3 ops on ([Slice, Reshape,
 *     AllConcat] stays as it is);
 *   - step-2b plans are kept: the spec runs step 6 "after step 5", and the
 *     unexpandable path (InferTensorRedistributionOperatorListUnExpand) is
 *     a list of its own without a step 5;
 *   - rule 4's first Reshape drops the leading 1s (what E6 needs);
 *   - rule 5 applies to k = 0 too and until no pattern is left;
 *   - rule 7 merges only when the first group is the inner one (the second
 *     group's rank stride is the first's times its size): then one
 *     ascending group concatenates in the same order;
 *   - a StridedSlice that cuts several axes, or not into equal blocks, and
 *     a Split or Concat outside an AllGather chain keep the list (sappc's
 *     planner makes none of them);
 *   - if the sort breaks the shapes (it can carry an op across a Reshape)
 *     the list is kept; the planner's lists never do that.
 * The strategy searcher's cost (§4.5) is made of the step-3 operators, so
 * step 6 does not change it. */

/* The compact ops of §4.2 step 6 (TensorTransform): Reshape(shape);
 * AllConcat(group, axis) = AllGather, then Split(0, n) + Concat(axis) when
 * axis > 0; Slice(axis, num, idx) = keep block idx of num along axis. */
typedef enum { CO_RESHAPE, CO_ALLCONCAT, CO_SLICE } CoKind;

typedef struct CoOp {
	uint8_t kind;
	int8_t axis;
	int8_t rank;                   /* RESHAPE */
	int64_t shape[LAYOUT_MAX_DIM]; /* RESHAPE target */
	int64_t n;                     /* ALLCONCAT group size, SLICE num */
	int64_t idx;                   /* SLICE */
	int64_t goff;                  /* ALLCONCAT ranks: CoList.groups + goff */
} CoOp;

/* rule 4 turns one op into three, so a list can triple before it shrinks */
#define CO_MAX (3 * REDIST_MAX_OPS)

typedef struct CoList {
	int n;
	CoOp op[CO_MAX];
	int rin; /* the local tensor the list starts from */
	int64_t in[LAYOUT_MAX_DIM];
	int64_t *groups; /* xmalloc'ed */
	int64_t ngroups;
} CoList;

/* op applied to the local shape (s, *r); -1 when it does not apply */
static int co_apply(const CoOp *o, int64_t *s, int *r)
{
	if (o->kind == CO_RESHAPE) {
		if (numel(s, *r) != numel(o->shape, o->rank))
			return -1;
		*r = o->rank;
		memcpy(s, o->shape, (size_t)o->rank * sizeof *s);
		return 0;
	}
	if (o->axis >= *r)
		return -1;
	if (o->kind == CO_ALLCONCAT) {
		s[o->axis] *= o->n;
		return 0;
	}
	if (s[o->axis] % o->n != 0)
		return -1;
	s[o->axis] /= o->n;
	return 0;
}

/* the local shape in front of every op (shapes[k], ranks[k]) and after the
 * last (index n); -1 when the list does not apply to its input */
static int co_shapes(const CoList *L, int64_t (*shapes)[LAYOUT_MAX_DIM], int *ranks)
{
	int r = L->rin;
	int64_t s[LAYOUT_MAX_DIM];
	memcpy(s, L->in, sizeof s);
	for (int k = 0; k <= L->n; k++) {
		memcpy(shapes[k], s, sizeof s);
		ranks[k] = r;
		if (k < L->n && co_apply(&L->op[k], s, &r) < 0)
			return -1;
	}
	return 0;
}

static void co_insert(CoList *L, int at, const CoOp *o)
{
	memmove(&L->op[at + 1], &L->op[at], (size_t)(L->n - at) * sizeof *o);
	L->op[at] = *o;
	L->n++;
}

static void co_delete(CoList *L, int at)
{
	memmove(&L->op[at], &L->op[at + 1], (size_t)(L->n - at - 1) * sizeof L->op[0]);
	L->n--;
}

static CoOp co_reshape(const int64_t *s, int r)
{
	CoOp o = {.kind = CO_RESHAPE, .rank = (int8_t)r};
	memcpy(o.shape, s, (size_t)r * sizeof *s);
	return o;
}

static int64_t co_add_group(CoList *L, const int64_t *g, int64_t n)
{
	L->groups = xrealloc(L->groups, (size_t)(L->ngroups + n) * sizeof *L->groups);
	memcpy(L->groups + L->ngroups, g, (size_t)n * sizeof *g);
	L->ngroups += n;
	return L->ngroups - n;
}

/* Step 6.1: the plan in compact form.  0, or -1 when step 6 keeps the list
 * as it is: an op it does not know (AlltoAll), a Split or Concat that is not
 * part of an AllGather -> Split(0, n) -> Concat chain, or a StridedSlice that
 * cuts other than one axis into equal blocks (ours never do). */
static int co_from_plan(const RedistPlan *p, CoList *L)
{
	L->n = 0;
	L->rin = p->ops[0].rank_in;
	memcpy(L->in, p->ops[0].in_shape, sizeof L->in);
	for (int k = 0; k < p->nops; k++) {
		const RedistOp *o = &p->ops[k];
		CoOp c = {0};
		switch (o->kind) {
		case RD_RESHAPE:
			c = co_reshape(o->out_shape, o->rank_out);
			break;
		case RD_ALLGATHER:
			c.kind = CO_ALLCONCAT;
			c.n = o->ngroup;
			c.goff = co_add_group(L, o->group, o->ngroup);
			if (k + 1 < p->nops && p->ops[k + 1].kind == RD_SPLIT) {
				const RedistOp *sp = &p->ops[k + 1], *cc = &p->ops[k + 2];
				if (k + 2 >= p->nops || cc->kind != RD_CONCAT || sp->axis != 0 || sp->n != o->ngroup ||
				    cc->n != o->ngroup)
					return -1;
				c.axis = (int8_t)cc->axis;
				k += 2;
			}
			break;
		case RD_STRIDEDSLICE: {
			int axis = -1;
			for (int i = 0; i < o->rank_in; i++) {
				if (o->strides[i] != 1)
					return -1;
				if (o->begin[i] == 0 && o->end[i] == o->in_shape[i])
					continue;
				int64_t blk = o->end[i] - o->begin[i];
				if (axis >= 0 || blk <= 0 || o->in_shape[i] % blk || o->begin[i] % blk)
					return -1;
				axis = i;
				c.n = o->in_shape[i] / blk;
				c.idx = o->begin[i] / blk;
			}
			if (axis < 0)
				return -1;
			c.kind = CO_SLICE;
			c.axis = (int8_t)axis;
			break;
		}
		default:
			return -1;
		}
		L->op[L->n++] = c;
	}
	return 0;
}

/* Steps 6.2 and 6.6: a Reshape followed by a Reshape is dropped (the second
 * one's target is what counts), then a Reshape to the shape it is given. */
static void co_tidy_reshapes(CoList *L)
{
	int r = L->rin, w = 0;
	int64_t s[LAYOUT_MAX_DIM];
	memcpy(s, L->in, sizeof s);
	for (int k = 0; k < L->n; k++) {
		const CoOp *o = &L->op[k];
		if (o->kind == CO_RESHAPE &&
		    ((k + 1 < L->n && L->op[k + 1].kind == CO_RESHAPE) || same_shape(s, r, o->shape, o->rank)))
			continue;
		co_apply(o, s, &r);
		L->op[w++] = *o;
	}
	L->n = w;
}

/* Step 6.3's comparator, "x goes before y".  Not a strict weak order: a
 * Reshape is unordered with everything, yet AllConcat < Slice. */
static int co_less(int x, int y, const void *ctx)
{
	const CoOp *a = &((const CoOp *)ctx)[x], *b = &((const CoOp *)ctx)[y];
	if (a->kind == CO_RESHAPE || b->kind == CO_RESHAPE)
		return 0;
	if (a->kind != b->kind)
		return a->kind == CO_ALLCONCAT;
	return a->kind == CO_ALLCONCAT ? a->axis > b->axis : a->axis < b->axis;
}

static void co_sort(CoList *L)
{
	int idx[CO_MAX], buf[CO_MAX / 2 + 1];
	CoOp old[CO_MAX];
	memcpy(old, L->op, (size_t)L->n * sizeof *old);
	for (int k = 0; k < L->n; k++)
		idx[k] = k;
	std_stable_sort(idx, L->n, buf, co_less, old);
	for (int k = 0; k < L->n; k++)
		L->op[k] = old[idx[k]];
}

static int ones_before(const int64_t *s, int k)
{
	for (int i = 0; i < k; i++)
		if (s[i] != 1)
			return 0;
	return 1;
}

/* Step 6.4: AllConcat(g, k > 0) on (1,..,1, s_k, ...) gathers whole
 * contiguous blocks, so it is Reshape(s_k, ...) (the leading 1s dropped, as
 * E6 requires), AllConcat(g, 0), Reshape back to the 1s. */
static void co_allconcat_axis0(CoList *L, int64_t (*sh)[LAYOUT_MAX_DIM], int *rk)
{
	co_shapes(L, sh, rk);
	for (int k = L->n - 1; k >= 0; k--) {
		CoOp *o = &L->op[k];
		int a = o->axis;
		if (o->kind != CO_ALLCONCAT || a == 0 || !ones_before(sh[k], a))
			continue;
		CoOp pre = co_reshape(sh[k] + a, rk[k] - a), post = co_reshape(sh[k + 1], rk[k + 1]);
		o->axis = 0;
		co_insert(L, k + 1, &post);
		co_insert(L, k, &pre);
	}
}

/* Step 6.5: Slice(k, num, idx) on (1,..,1, s_k, ...) followed by Reshape(t)
 * keeps the idx-th of num contiguous blocks either way, so it is
 * Reshape(t_0 * num, t_1, ...) followed by Slice(0, num, idx).  The spec
 * does not limit this to k > 0 as it does rule 4, so k = 0 moves too.
 * Walking from the right applies it until no pattern is left: a Slice that
 * moved right can meet the Reshape a Slice before it now faces. */
static void co_slice_axis0(CoList *L, int64_t (*sh)[LAYOUT_MAX_DIM], int *rk)
{
	co_shapes(L, sh, rk);
	for (int k = L->n - 2; k >= 0; k--) {
		CoOp *o = &L->op[k], *next = &L->op[k + 1];
		if (o->kind != CO_SLICE || next->kind != CO_RESHAPE || !ones_before(sh[k], o->axis))
			continue;
		CoOp slice = *o, re = *next;
		re.shape[0] *= slice.n;
		slice.axis = 0;
		L->op[k] = re;
		L->op[k + 1] = slice;
	}
}

/* Step 6.7: AllConcat(g1, a) then AllConcat(g2, a), where g2's stride is g1's
 * stride times |g1| (g1 is the inner group), is one AllGather over the
 * |g1|*|g2| ranks, ascending: for j in g2, for i in g1, rank j + i - self.
 * Both groups are the ranks along device dimensions, so every rank takes
 * the same decision. */
static int arith_stride(const int64_t *g, int64_t n, int64_t *stride)
{
	*stride = n > 1 ? g[1] - g[0] : 0;
	for (int64_t i = 1; i < n; i++)
		if (g[i] - g[i - 1] != *stride || *stride <= 0)
			return 0;
	return n > 1;
}

static void co_merge_allconcats(CoList *L)
{
	for (int k = 0; k + 1 < L->n;) {
		CoOp *a = &L->op[k], *b = &L->op[k + 1];
		int64_t s1, s2;
		if (a->kind != CO_ALLCONCAT || b->kind != CO_ALLCONCAT || a->axis != b->axis ||
		    !arith_stride(L->groups + a->goff, a->n, &s1) || !arith_stride(L->groups + b->goff, b->n, &s2) ||
		    s2 != s1 * a->n) {
			k++;
			continue;
		}
		/* g2 holds self, which sits at the start of its g1 block */
		const int64_t *g1 = L->groups + a->goff, *g2 = L->groups + b->goff;
		int64_t self = -1;
		for (int64_t j = 0; j < b->n && self < 0; j++)
			for (int64_t i = 0; i < a->n; i++)
				if (g2[j] == g1[i])
					self = g1[i];
		if (self < 0)
			die("redistribution: AllGather groups without the rank");
		int64_t n = a->n * b->n, *g = xmalloc((size_t)n * sizeof *g);
		for (int64_t t = 0; t < n; t++)
			g[t] = g2[0] + g1[0] - self + t * s1;
		a->goff = co_add_group(L, g, n);
		a->n = n;
		free(g);
		co_delete(L, k + 1);
	}
}

/* Step 6.8: Slice(a, n1, i1) then Slice(a, n2, i2) = Slice(a, n1*n2, i1*n2 + i2) */
static void co_merge_slices(CoList *L)
{
	for (int k = 0; k + 1 < L->n;) {
		CoOp *a = &L->op[k], *b = &L->op[k + 1];
		if (a->kind != CO_SLICE || b->kind != CO_SLICE || a->axis != b->axis) {
			k++;
			continue;
		}
		a->idx = a->idx * b->n + b->idx;
		a->n *= b->n;
		co_delete(L, k + 1);
	}
}

/* Step 6.9: back to operators, into a fresh plan. */
static int co_to_plan(const CoList *L, RedistPlan *p)
{
	size_t goff[REDIST_MAX_OPS];
	char err[8];
	Builder b = {p, NULL, goff, err, sizeof err};
	int r = L->rin;
	int64_t s[LAYOUT_MAX_DIM];
	memcpy(s, L->in, sizeof s);
	memset(p, 0, sizeof *p);
	for (int k = 0; k < L->n; k++) {
		const CoOp *o = &L->op[k];
		int rc = 0;
		if (o->kind == CO_RESHAPE) {
			rc = emit_reshape(&b, s, r, o->shape, o->rank);
		} else if (o->kind == CO_SLICE) {
			rc = emit_slice(&b, s, r, o->axis, o->n, o->idx);
		} else {
			RedistOp *ag = emit_allconcat(&b, s, r, o->axis, o->n);
			if (ag)
				memcpy(reserve_group(&b, ag, o->n), L->groups + o->goff,
				       (size_t)o->n * sizeof(int64_t));
			rc = ag ? 0 : -1;
		}
		if (rc < 0) {
			redist_plan_free(p);
			return -1;
		}
		co_apply(o, s, &r);
	}
	finish_groups(&b);
	return 0;
}

static int same_plan(const RedistPlan *a, const RedistPlan *b)
{
	if (a->nops != b->nops)
		return 0;
	for (int k = 0; k < a->nops; k++) {
		const RedistOp *x = &a->ops[k], *y = &b->ops[k];
		if (x->kind != y->kind || !same_shape(x->in_shape, x->rank_in, y->in_shape, y->rank_in) ||
		    !same_shape(x->out_shape, x->rank_out, y->out_shape, y->rank_out) || x->axis != y->axis ||
		    x->n != y->n || !same_shape(x->group, x->ngroup, y->group, y->ngroup) ||
		    (x->kind == RD_STRIDEDSLICE && !same_shape(x->begin, x->rank_in, y->begin, y->rank_in)))
			return 0;
	}
	return 1;
}

int redist_optimize(RedistPlan *plan)
{
	if (plan->nops <= 1 || plan->unexpandable)
		return 0;
	struct {
		CoList L;
		int64_t sh[CO_MAX + 1][LAYOUT_MAX_DIM];
		int rk[CO_MAX + 1];
		RedistPlan np;
	} *w = xmalloc(sizeof *w); /* 100 KB: not on the stack */
	CoList *L = &w->L;
	const RedistOp *last = &plan->ops[plan->nops - 1];
	L->groups = NULL;
	L->ngroups = 0;
	int ok = co_from_plan(plan, L) == 0;
	if (ok) {
		co_tidy_reshapes(L);
		co_sort(L);
		/* the sort carries an op across a Reshape when it compares less
		 * than the first element; keep the list if that breaks the shapes */
		ok = co_shapes(L, w->sh, w->rk) == 0;
	}
	if (ok) {
		co_allconcat_axis0(L, w->sh, w->rk);
		co_slice_axis0(L, w->sh, w->rk);
		co_tidy_reshapes(L);
		co_merge_allconcats(L);
		co_merge_slices(L);
		if (co_shapes(L, w->sh, w->rk) < 0 ||
		    !same_shape(w->sh[L->n], w->rk[L->n], last->out_shape, last->rank_out))
			die("redistribution: step 6 changed the shape of the result");
		ok = co_to_plan(L, &w->np) == 0;
	}
	if (ok && same_plan(plan, &w->np)) {
		redist_plan_free(&w->np);
		ok = 0;
	} else if (ok) {
		redist_plan_free(plan);
		*plan = w->np;
	}
	free(L->groups);
	free(w);
	return ok;
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
