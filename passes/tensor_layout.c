/* tensor_layout.c - the layout algebra of parallel-lowering.md §2.1 and the
 * redistribution planner of §4.2 (steps 0-5), on Layout values only.
 *
 * This is the lowering branch's own minimal implementation of passes/layout.h,
 * written so that the lowering passes can be built and tested before the
 * dedicated implementation (passes/tensor_layout.c + passes/redist.c) is
 * merged; that one replaces this file and keeps the same signatures.
 *
 * Conventions: positions p = 0..prod(D)-1 index the stage's dev_list; map
 * value v names device dimension ndev-1-v.  Everything is deterministic and
 * allocation-free except the group storage of a plan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

/* ------------------------------------------------------------ algebra */

static int64_t dev_prod(const Layout *l)
{
	int64_t p = 1;
	for (int i = 0; i < l->ndev; i++)
		p *= l->dev[i];
	return p;
}

int layout_check(const Layout *l)
{
	if (l->ndev < 1 || l->ndev > LAYOUT_MAX_DEV || l->rank < 0 || l->rank > LAYOUT_MAX_DIM)
		return -1;
	for (int i = 0; i < l->ndev; i++)
		if (l->dev[i] < 1)
			return -1;
	unsigned used = 0;
	for (int i = 0; i < l->rank; i++) {
		int64_t v = l->map[i];
		if (v == -1)
			continue;
		if (v < 0 || v >= l->ndev || (used >> v & 1))
			return -1;
		used |= 1u << v;
		int64_t d = l->dev[l->ndev - 1 - v];
		if (l->shape[i] < 0 || l->shape[i] % d)
			return -1;
	}
	return 0;
}

void layout_standardize(const Layout *in, Layout *out)
{
	Layout t = *in;
	int newidx[LAYOUT_MAX_DEV];
	int nd = 0;
	for (int i = 0; i < in->ndev; i++) {
		if (in->dev[i] == 1) {
			newidx[i] = -1;
			continue;
		}
		newidx[i] = nd;
		t.dev[nd++] = in->dev[i];
	}
	int keep = nd;
	if (nd == 0) {
		t.dev[0] = 1;
		nd = 1;
	}
	for (int i = 0; i < in->rank; i++) {
		int64_t v = in->map[i];
		if (v < 0) {
			t.map[i] = -1;
			continue;
		}
		int j = newidx[in->ndev - 1 - v];
		t.map[i] = j < 0 ? -1 : keep - 1 - j;
	}
	t.ndev = nd;
	*out = t;
}

int layout_equal(const Layout *a, const Layout *b)
{
	Layout x, y;
	layout_standardize(a, &x);
	layout_standardize(b, &y);
	if (x.ndev != y.ndev || x.rank != y.rank)
		return 0;
	for (int i = 0; i < x.ndev; i++)
		if (x.dev[i] != y.dev[i])
			return 0;
	for (int i = 0; i < x.rank; i++)
		if (x.map[i] != y.map[i] || x.shape[i] != y.shape[i])
			return 0;
	return 1;
}

void layout_slice_shape(const Layout *l, int64_t *out)
{
	for (int i = 0; i < l->rank; i++) {
		int64_t v = l->map[i];
		out[i] = v < 0 ? l->shape[i] : l->shape[i] / l->dev[l->ndev - 1 - v];
	}
}

void layout_coord(const Layout *l, int64_t p, int64_t *coord)
{
	for (int i = l->ndev - 1; i >= 0; i--) {
		coord[i] = p % l->dev[i];
		p /= l->dev[i];
	}
}

static int64_t coord_pos(const Layout *l, const int64_t *c)
{
	int64_t p = 0;
	for (int i = 0; i < l->ndev; i++)
		p = p * l->dev[i] + c[i];
	return p;
}

int layout_group_along(const Layout *l, int64_t p, int a, int64_t *out)
{
	int64_t c[LAYOUT_MAX_DEV];
	layout_coord(l, p, c);
	for (int64_t k = 0; k < l->dev[a]; k++) {
		c[a] = k;
		out[k] = coord_pos(l, c);
	}
	return (int)l->dev[a];
}

int layout_replica_group(const Layout *l, int64_t p, int64_t *out)
{
	/* device dimensions not used by the map vary freely; enumerating
	 * positions in ascending order keeps the result sorted */
	int used[LAYOUT_MAX_DEV] = {0};
	for (int i = 0; i < l->rank; i++)
		if (l->map[i] >= 0)
			used[l->ndev - 1 - l->map[i]] = 1;
	int64_t c[LAYOUT_MAX_DEV], q[LAYOUT_MAX_DEV];
	layout_coord(l, p, c);
	int64_t total = dev_prod(l);
	int n = 0;
	for (int64_t x = 0; x < total; x++) {
		layout_coord(l, x, q);
		int same = 1;
		for (int i = 0; i < l->ndev && same; i++)
			same = !used[i] || q[i] == c[i];
		if (same)
			out[n++] = x;
	}
	return n;
}

void layout_slice_offset(const Layout *l, int64_t p, int64_t *off)
{
	int64_t c[LAYOUT_MAX_DEV], s[LAYOUT_MAX_DIM];
	layout_coord(l, p, c);
	layout_slice_shape(l, s);
	for (int i = 0; i < l->rank; i++)
		off[i] = l->map[i] < 0 ? 0 : c[l->ndev - 1 - l->map[i]] * s[i];
}

/* ------------------------------------------------------------ §4.2 steps 0-2 */

/* Remove size-1 tensor dimensions; a one-element tensor becomes [1]/[-1]. */
static void squeeze(const Layout *in, Layout *out)
{
	*out = *in;
	int r = 0;
	for (int i = 0; i < in->rank; i++) {
		if (in->shape[i] == 1)
			continue;
		out->shape[r] = in->shape[i];
		out->map[r] = in->map[i];
		r++;
	}
	if (r == 0) {
		out->shape[0] = 1;
		out->map[0] = -1;
		r = 1;
	}
	out->rank = r;
}

/* Re-express l on the finer device matrix nd (§4.2 step 1). */
static int expand_dev(const Layout *l, const int64_t *nd, int nn, Layout *out)
{
	int start[LAYOUT_MAX_DEV + 1], j = 0;
	for (int i = 0; i < l->ndev; i++) {
		start[i] = j;
		int64_t p = 1;
		while (j < nn && p < l->dev[i])
			p *= nd[j++];
		if (p != l->dev[i])
			return -1;
	}
	start[l->ndev] = j;
	if (j != nn)
		return -1;
	Layout o = {0};
	o.ndev = nn;
	memcpy(o.dev, nd, (size_t)nn * sizeof *nd);
	int r = 0;
	for (int t = 0; t < l->rank; t++) {
		if (l->map[t] < 0) {
			if (r >= LAYOUT_MAX_DIM)
				return -1;
			o.shape[r] = l->shape[t];
			o.map[r++] = -1;
			continue;
		}
		int di = l->ndev - 1 - (int)l->map[t];
		int a = start[di], b = start[di + 1];
		int64_t rest = l->shape[t];
		for (int k = a; k < b; k++) {
			if (r >= LAYOUT_MAX_DIM)
				return -1;
			int64_t sz;
			if (k < b - 1) {
				sz = nd[k];
				if (rest % sz)
					return -1;
				rest /= sz;
			} else {
				sz = rest;
			}
			o.shape[r] = sz;
			o.map[r++] = nn - 1 - k;
		}
	}
	o.rank = r;
	*out = o;
	return 0;
}

/* suffix products from the right: [512,1024] -> [524288,1024] */
static int suffix_products(const int64_t *s, int r, int64_t *out)
{
	int64_t p = 1;
	for (int i = r - 1; i >= 0; i--) {
		p *= s[i];
		out[i] = p;
	}
	return r;
}

/* is every suffix product of b also one of a's (a refines b)? */
static int refines(const Layout *a, const Layout *b)
{
	int64_t pa[LAYOUT_MAX_DIM], pb[LAYOUT_MAX_DIM];
	suffix_products(a->shape, a->rank, pa);
	suffix_products(b->shape, b->rank, pb);
	for (int i = 0; i < b->rank; i++) {
		int hit = 0;
		for (int k = 0; k < a->rank && !hit; k++)
			hit = pa[k] == pb[i];
		if (!hit)
			return 0;
	}
	return 1;
}

/* coarsest common refinement of two shapes (ExpandShape); -1 if none */
static int expand_shape(const Layout *a, const Layout *b, int64_t *e)
{
	int64_t pa[LAYOUT_MAX_DIM], pb[LAYOUT_MAX_DIM], m[2 * LAYOUT_MAX_DIM];
	suffix_products(a->shape, a->rank, pa);
	suffix_products(b->shape, b->rank, pb);
	int i = 0, j = 0, n = 0;
	while (i < a->rank || j < b->rank) { /* both descending */
		int64_t v;
		if (j >= b->rank || (i < a->rank && pa[i] > pb[j]))
			v = pa[i++];
		else if (i >= a->rank || pb[j] > pa[i])
			v = pb[j++];
		else {
			v = pa[i++];
			j++;
		}
		m[n++] = v;
	}
	if (n > LAYOUT_MAX_DIM)
		return -1;
	for (int k = 0; k < n; k++) {
		int64_t next = k + 1 < n ? m[k + 1] : 1;
		if (next == 0 || m[k] % next)
			return -1;
		e[k] = m[k] / next;
	}
	return n;
}

/* ExpandTensorShape: refine l's shape to e (a refinement of l->shape). */
static int expand_tensor_shape(const Layout *l, const int64_t *e, int ne, Layout *out)
{
	/* split device dimensions by the leading pieces of the dimension they map */
	int64_t nd[LAYOUT_MAX_DEV];
	int nn = 0;
	int64_t factors[LAYOUT_MAX_DEV][LAYOUT_MAX_DIM];
	int nf[LAYOUT_MAX_DEV] = {0};
	int pos = 0;
	int first[LAYOUT_MAX_DIM], cnt[LAYOUT_MAX_DIM];
	for (int t = 0; t < l->rank; t++) {
		int64_t p = 1;
		first[t] = pos;
		while (pos < ne && p < l->shape[t])
			p *= e[pos++];
		if (p != l->shape[t])
			return -1;
		cnt[t] = pos - first[t];
		if (cnt[t] == 0) /* a size-1 dimension */
			cnt[t] = 0;
	}
	if (pos != ne)
		return -1;
	for (int t = 0; t < l->rank; t++) {
		if (l->map[t] < 0)
			continue;
		int di = l->ndev - 1 - (int)l->map[t];
		int64_t rem = l->dev[di];
		for (int k = 0; k < cnt[t] && rem > 1; k++) {
			int64_t piece = e[first[t] + k];
			if (piece >= rem || k == cnt[t] - 1) {
				if (piece % rem)
					return -1;
				factors[di][nf[di]++] = rem;
				rem = 1;
			} else {
				if (rem % piece)
					return -1;
				factors[di][nf[di]++] = piece;
				rem /= piece;
			}
		}
	}
	for (int i = 0; i < l->ndev; i++) {
		if (nf[i] == 0) {
			nd[nn++] = l->dev[i];
			continue;
		}
		for (int k = 0; k < nf[i]; k++)
			nd[nn++] = factors[i][k];
	}
	Layout x;
	if (expand_dev(l, nd, nn, &x) < 0)
		return -1;
	/* now split x's dimensions further to e: the first piece keeps the map */
	Layout o = x;
	int r = 0, q = 0;
	for (int t = 0; t < x.rank; t++) {
		int64_t p = 1;
		int k0 = q;
		while (q < ne && p < x.shape[t])
			p *= e[q++];
		if (p != x.shape[t] || q == k0)
			return -1;
		for (int k = k0; k < q; k++) {
			o.shape[r] = e[k];
			o.map[r++] = k == k0 ? x.map[t] : -1;
		}
	}
	if (q != ne)
		return -1;
	o.rank = r;
	*out = o;
	return 0;
}

/* Unify device matrices and shapes (§4.2 steps 1-2).  0 ok, -1 not expandable. */
static int unify(const Layout *from, const Layout *to, Layout *fu, Layout *tu)
{
	int64_t pf[LAYOUT_MAX_DEV], pt[LAYOUT_MAX_DEV], m[2 * LAYOUT_MAX_DEV], nd[LAYOUT_MAX_DEV];
	int64_t p = 1;
	for (int i = 0; i < from->ndev; i++)
		pf[i] = p *= from->dev[i];
	p = 1;
	for (int i = 0; i < to->ndev; i++)
		pt[i] = p *= to->dev[i];
	int i = 0, j = 0, n = 0;
	while (i < from->ndev || j < to->ndev) {
		int64_t v;
		if (j >= to->ndev || (i < from->ndev && pf[i] < pt[j]))
			v = pf[i++];
		else if (i >= from->ndev || pt[j] < pf[i])
			v = pt[j++];
		else {
			v = pf[i++];
			j++;
		}
		m[n++] = v;
	}
	if (n > LAYOUT_MAX_DEV)
		return -1;
	int64_t prev = 1;
	for (int k = 0; k < n; k++) {
		if (m[k] % prev)
			return -1;
		nd[k] = m[k] / prev;
		prev = m[k];
	}
	Layout a, b;
	if (expand_dev(from, nd, n, &a) < 0 || expand_dev(to, nd, n, &b) < 0)
		return -1;
	for (int guard = 0; guard < 16; guard++) {
		int same = a.rank == b.rank;
		for (int k = 0; same && k < a.rank; k++)
			same = a.shape[k] == b.shape[k];
		if (same) {
			*fu = a;
			*tu = b;
			return 0;
		}
		int64_t e[LAYOUT_MAX_DIM];
		int ne;
		if (!refines(&a, &b)) {
			if ((ne = expand_shape(&a, &b, e)) < 0 || expand_tensor_shape(&a, e, ne, &a) < 0)
				return -1;
			if (expand_dev(&b, a.dev, a.ndev, &b) < 0)
				return -1;
		}
		if (!refines(&b, &a)) {
			if ((ne = expand_shape(&b, &a, e)) < 0 || expand_tensor_shape(&b, e, ne, &b) < 0)
				return -1;
			if (expand_dev(&a, b.dev, b.ndev, &a) < 0)
				return -1;
		}
	}
	return -1;
}

/* ------------------------------------------------------------ §4.2 step 3 */

/* robin_hood iteration order of a fresh HashMap<uint64,int64> holding the
 * keys 0..r-1 (measured, §4.2); ascending beyond the measured range */
static const int8_t rh_order[9][8] = {
    {0},
    {0},
    {0, 1},
    {0, 1, 2},
    {0, 1, 3, 2},
    {0, 1, 4, 3, 2},
    {0, 1, 4, 5, 3, 2},
    {0, 4, 3, 1, 5, 6, 2},
    {0, 4, 3, 1, 5, 6, 7, 2},
};

typedef struct AbsOp {
	int kind; /* 0 split, 1 concat, 2 permute */
	int dim, val, cat;
} AbsOp;

typedef struct Infer {
	int keys[LAYOUT_MAX_DIM]; /* m in iteration order */
	int64_t val[LAYOUT_MAX_DIM];
	int n;
	AbsOp ops[REDIST_MAX_OPS];
	int nops;
} Infer;

static void m_erase(Infer *s, int k)
{
	memmove(&s->keys[k], &s->keys[k + 1], (size_t)(s->n - k - 1) * sizeof s->keys[0]);
	memmove(&s->val[k], &s->val[k + 1], (size_t)(s->n - k - 1) * sizeof s->val[0]);
	s->n--;
}

static int m_holds(const Infer *s, int64_t v)
{
	for (int k = 0; k < s->n; k++)
		if (s->val[k] == v)
			return k;
	return -1;
}

static int emit(Infer *s, int kind, int dim, int val, int cat)
{
	if (s->nops >= REDIST_MAX_OPS)
		return -1;
	s->ops[s->nops++] = (AbsOp){kind, dim, val, cat};
	return 0;
}

static int infer_ops(const Layout *fu, const Layout *tu, int alltoall, Infer *s)
{
	int r = fu->rank;
	s->n = r;
	s->nops = 0;
	for (int k = 0; k < r; k++) {
		s->keys[k] = r <= 8 ? rh_order[r][k] : k;
		s->val[k] = fu->map[s->keys[k]];
	}
	const int64_t *out = tu->map;
	for (int guard = 0; s->n > 0 && guard < 256; guard++) {
		int before = s->nops;
		for (int added = 1; added;) {
			added = 0;
			/* SplitByAxis pass */
			for (int k = 0; k < s->n;) {
				int i = s->keys[k];
				if (s->val[k] == out[i]) {
					m_erase(s, k);
					continue;
				}
				if (s->val[k] == -1 && m_holds(s, out[i]) < 0) {
					if (emit(s, 0, i, (int)out[i], 0) < 0)
						return -1;
					m_erase(s, k);
					added = 1;
					continue;
				}
				k++;
			}
			/* PermuteByAxis loop */
			for (int padded = 1; padded;) {
				padded = 0;
				for (int k = 0; k < s->n;) {
					int i = s->keys[k];
					if (s->val[k] == out[i]) {
						m_erase(s, k);
						continue;
					}
					int j;
					if (s->val[k] == -1 && (j = m_holds(s, out[i])) >= 0) {
						int cat = s->keys[j];
						if (alltoall) {
							if (emit(s, 2, i, (int)out[i], cat) < 0)
								return -1;
						} else if (emit(s, 1, cat, (int)out[i], 0) < 0 ||
						           emit(s, 0, i, (int)out[i], 0) < 0) {
							return -1;
						}
						s->val[j] = -1;
						m_erase(s, k);
						padded = added = 1;
						continue;
					}
					k++;
				}
			}
		}
		/* ConcatByAxis pass */
		for (int k = 0; k < s->n;) {
			int i = s->keys[k];
			int64_t in = s->val[k];
			int intarget = 0;
			for (int t = 0; t < tu->rank; t++)
				intarget |= out[t] == in;
			if (in != -1 && !intarget) {
				if (emit(s, 1, i, (int)in, 0) < 0)
					return -1;
				if (out[i] == -1) {
					m_erase(s, k);
					continue;
				}
				s->val[k] = -1;
			}
			k++;
		}
		if (s->nops == before && s->n > 0) { /* deadlock breaker */
			if (s->val[0] != -1 && emit(s, 1, s->keys[0], (int)s->val[0], 0) < 0)
				return -1;
			s->val[0] = -1;
		}
	}
	return s->n ? -1 : 0;
}

/* ------------------------------------------------------------ step 4-5 */

typedef struct Builder {
	RedistPlan *p;
	int rank;
	int64_t shape[LAYOUT_MAX_DIM];
	char *err;
	size_t errlen;
} Builder;

static int64_t *group_store(RedistPlan *p, const int64_t *g, int n)
{
	if (p->ngroupbuf + n > p->capgroupbuf) {
		/* groups are referenced by index while building, fixed up at the end */
		int nc = p->capgroupbuf ? p->capgroupbuf * 2 : 64;
		while (nc < p->ngroupbuf + n)
			nc *= 2;
		int64_t *nb = realloc(p->groupbuf, (size_t)nc * sizeof *nb);
		if (!nb)
			return NULL;
		p->groupbuf = nb;
		p->capgroupbuf = nc;
	}
	int64_t *dst = p->groupbuf + p->ngroupbuf;
	memcpy(dst, g, (size_t)n * sizeof *g);
	p->ngroupbuf += n;
	return dst;
}

static RedistOp *new_op(Builder *b, RedistKind k)
{
	if (b->p->nops >= REDIST_MAX_OPS) {
		snprintf(b->err, b->errlen, "redistribution needs more than %d operators", REDIST_MAX_OPS);
		return NULL;
	}
	RedistOp *o = &b->p->ops[b->p->nops++];
	memset(o, 0, sizeof *o);
	o->kind = k;
	o->rank_in = o->rank_out = b->rank;
	memcpy(o->in_shape, b->shape, sizeof b->shape);
	memcpy(o->out_shape, b->shape, sizeof b->shape);
	o->group = NULL;
	o->ngroup = 0;
	return o;
}

static int add_reshape(Builder *b, const int64_t *to, int r)
{
	RedistOp *o = new_op(b, RD_RESHAPE);
	if (!o)
		return -1;
	o->rank_out = r;
	memcpy(o->out_shape, to, (size_t)r * sizeof *to);
	memcpy(b->shape, to, (size_t)r * sizeof *to);
	b->rank = r;
	return 0;
}

/* group index of group g stored as an offset; resolved in fix_groups */
static int set_group(Builder *b, RedistOp *o, const int64_t *g, int n)
{
	if (!group_store(b->p, g, n))
		return -1;
	o->ngroup = n;
	o->group = (int64_t *)(intptr_t)(b->p->ngroupbuf - n); /* offset, fixed later */
	return 0;
}

static void fix_groups(RedistPlan *p)
{
	for (int i = 0; i < p->nops; i++)
		if (p->ops[i].ngroup)
			p->ops[i].group = p->groupbuf + (intptr_t)p->ops[i].group;
}

static int build_ops(Builder *b, const Layout *fu, const Infer *s, const int64_t *dev_list, int64_t pos)
{
	for (int k = 0; k < s->nops; k++) {
		const AbsOp *a = &s->ops[k];
		int da = fu->ndev - 1 - a->val;
		int64_t g[4096];
		if (fu->dev[da] > 4096) {
			snprintf(b->err, b->errlen, "device dimension too large");
			return -1;
		}
		int n = layout_group_along(fu, pos, da, g);
		int idx = 0;
		for (int t = 0; t < n; t++) {
			if (g[t] == pos)
				idx = t;
			g[t] = dev_list[g[t]];
		}
		if (n == 1)
			continue;
		if (a->kind == 0) {
			RedistOp *o = new_op(b, RD_STRIDEDSLICE);
			if (!o)
				return -1;
			for (int t = 0; t < b->rank; t++) {
				o->begin[t] = 0;
				o->end[t] = b->shape[t];
				o->strides[t] = 1;
			}
			int64_t part = b->shape[a->dim] / n;
			o->begin[a->dim] = idx * part;
			o->end[a->dim] = (idx + 1) * part;
			b->shape[a->dim] = part;
			memcpy(o->out_shape, b->shape, sizeof b->shape);
		} else if (a->kind == 1) {
			RedistOp *o = new_op(b, RD_ALLGATHER);
			if (!o || set_group(b, o, g, n) < 0)
				return -1;
			o->n = n;
			b->shape[0] *= n;
			memcpy(o->out_shape, b->shape, sizeof b->shape);
			if (a->dim != 0) {
				RedistOp *sp = new_op(b, RD_SPLIT);
				if (!sp)
					return -1;
				sp->axis = 0;
				sp->n = n;
				b->shape[0] /= n;
				memcpy(sp->out_shape, b->shape, sizeof b->shape); /* shape of each output */
				RedistOp *c = new_op(b, RD_CONCAT);
				if (!c)
					return -1;
				c->axis = a->dim;
				c->n = n;
				b->shape[a->dim] *= n;
				memcpy(c->out_shape, b->shape, sizeof b->shape);
			}
		} else {
			RedistOp *o = new_op(b, RD_ALLTOALL);
			if (!o || set_group(b, o, g, n) < 0)
				return -1;
			o->n = n;
			o->split_dim = a->dim;
			o->concat_dim = a->cat;
			b->shape[a->dim] /= n;
			b->shape[a->cat] *= n;
			memcpy(o->out_shape, b->shape, sizeof b->shape);
		}
	}
	return 0;
}

static int same_shape(const int64_t *a, int ra, const int64_t *b, int rb)
{
	if (ra != rb)
		return 0;
	for (int i = 0; i < ra; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

void redist_plan_free(RedistPlan *plan)
{
	free(plan->groupbuf);
	plan->groupbuf = NULL;
	plan->ngroupbuf = plan->capgroupbuf = 0;
	plan->nops = 0;
}

static int64_t numel(const Layout *l)
{
	int64_t p = 1;
	for (int i = 0; i < l->rank; i++)
		p *= l->shape[i];
	return p;
}

/* plan for two layouts with identical full shapes or a unified pair */
static int plan_expandable(Builder *b, const Layout *fo, const Layout *to, const Layout *fu, const Layout *tu,
                           const int64_t *dev_list, int64_t pos, int alltoall, int keep_reshape)
{
	Infer s;
	if (infer_ops(fu, tu, alltoall, &s) < 0) {
		snprintf(b->err, b->errlen, "redistribution operator inference did not converge");
		return -1;
	}
	int64_t fo_s[LAYOUT_MAX_DIM], fu_s[LAYOUT_MAX_DIM], to_s[LAYOUT_MAX_DIM], tu_s[LAYOUT_MAX_DIM];
	layout_slice_shape(fo, fo_s);
	layout_slice_shape(fu, fu_s);
	layout_slice_shape(to, to_s);
	layout_slice_shape(tu, tu_s);
	int real = 0; /* abstract ops that become real operators */
	for (int k = 0; k < s.nops; k++)
		real |= fu->dev[fu->ndev - 1 - s.ops[k].val] > 1;
	b->rank = fo->rank;
	memcpy(b->shape, fo_s, sizeof fo_s);
	if (!real) {
		if (keep_reshape || !same_shape(fo_s, fo->rank, to_s, to->rank))
			return add_reshape(b, to_s, to->rank);
		return 0;
	}
	if (!same_shape(fo_s, fo->rank, fu_s, fu->rank) && add_reshape(b, fu_s, fu->rank) < 0)
		return -1;
	b->rank = fu->rank;
	memcpy(b->shape, fu_s, sizeof fu_s);
	if (build_ops(b, fu, &s, dev_list, pos) < 0)
		return -1;
	if (!same_shape(to_s, to->rank, tu_s, tu->rank) && add_reshape(b, to_s, to->rank) < 0)
		return -1;
	return 0;
}

int redist_plan(const Layout *from, const Layout *to, const int64_t *dev_list, int64_t rank, int enable_alltoall,
                int keep_reshape, RedistPlan *plan, char *err, size_t errlen)
{
	plan->nops = 0;
	plan->groupbuf = NULL;
	plan->ngroupbuf = plan->capgroupbuf = 0;
	if (layout_check(from) < 0 || layout_check(to) < 0) {
		snprintf(err, errlen, "invalid layout");
		return -1;
	}
	Layout fo, tor;
	layout_standardize(from, &fo);
	layout_standardize(to, &tor);
	if (numel(&fo) != numel(&tor)) {
		snprintf(err, errlen, "element counts differ (%lld and %lld)", (long long)numel(&fo),
		         (long long)numel(&tor));
		return -1;
	}
	int64_t nd = dev_prod(&fo);
	if (nd != dev_prod(&tor)) {
		snprintf(err, errlen, "device counts differ (%lld and %lld)", (long long)nd, (long long)dev_prod(&tor));
		return -1;
	}
	int64_t pos = -1;
	for (int64_t i = 0; i < nd; i++)
		if (dev_list[i] == rank)
			pos = i;
	if (pos < 0) {
		snprintf(err, errlen, "rank %lld is not in the device list", (long long)rank);
		return -1;
	}
	Builder b = {plan, 0, {0}, err, errlen};
	if (nd == 1) {
		/* one device: nothing moves; only a change of local shape remains */
		int64_t a[LAYOUT_MAX_DIM], c[LAYOUT_MAX_DIM];
		layout_slice_shape(&fo, a);
		layout_slice_shape(&tor, c);
		b.rank = fo.rank;
		memcpy(b.shape, a, sizeof a);
		if ((keep_reshape || !same_shape(a, fo.rank, c, tor.rank)) && add_reshape(&b, c, tor.rank) < 0) {
			redist_plan_free(plan);
			return -1;
		}
		fix_groups(plan);
		return 0;
	}
	Layout fs, ts, fu, tu;
	squeeze(&fo, &fs);
	squeeze(&tor, &ts);
	int rc;
	if (unify(&fs, &ts, &fu, &tu) == 0) {
		rc = plan_expandable(&b, &fo, &tor, &fu, &tu, dev_list, pos, enable_alltoall, keep_reshape);
	} else {
		/* §4.2 step 2b: gather everything, reshape the full tensor, slice again */
		Layout frep = fo, trep = tor, a, c;
		for (int i = 0; i < frep.rank; i++)
			frep.map[i] = -1;
		for (int i = 0; i < trep.rank; i++)
			trep.map[i] = -1;
		squeeze(&frep, &a);
		if (unify(&fs, &a, &fu, &tu) < 0) {
			snprintf(err, errlen, "layouts cannot be unified");
			return -1;
		}
		rc = plan_expandable(&b, &fo, &frep, &fu, &tu, dev_list, pos, enable_alltoall, 0);
		if (rc == 0 && !same_shape(frep.shape, frep.rank, trep.shape, trep.rank))
			rc = add_reshape(&b, trep.shape, trep.rank);
		squeeze(&trep, &c);
		if (rc == 0 && unify(&c, &ts, &fu, &tu) < 0) {
			snprintf(err, errlen, "layouts cannot be unified");
			rc = -1;
		}
		if (rc == 0)
			rc = plan_expandable(&b, &trep, &tor, &fu, &tu, dev_list, pos, enable_alltoall, 0);
	}
	if (rc < 0) {
		redist_plan_free(plan);
		return -1;
	}
	fix_groups(plan);
	return 0;
}
