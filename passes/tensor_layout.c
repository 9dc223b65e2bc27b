/* tensor_layout.c - the tensor-layout algebra (parallel-lowering.md §2.1 and
 * the layout transforms of §4.2 steps 0-2).
 *
 * A layout says how a global tensor is cut over the devices of a stage: the
 * device matrix D numbers the devices row-major (last dimension fastest), and
 * map entry m_i = j >= 0 cuts tensor dimension i into D[ndev-1-j] equal blocks,
 * block k going to the devices whose coordinate on that device dimension is k.
 * Everything here is pure arithmetic on Layout values; nothing allocates.
 */
#include <string.h>

#include "layout.h"

static int64_t dev_of(const Layout *l, int i)
{
	return l->dev[l->ndev - 1 - l->map[i]];
}

int layout_check(const Layout *l)
{
	if (l->ndev < 1 || l->ndev > LAYOUT_MAX_DEV || l->rank < 0 || l->rank > LAYOUT_MAX_DIM)
		return -1;
	for (int d = 0; d < l->ndev; d++)
		if (l->dev[d] < 1)
			return -1;
	for (int i = 0; i < l->rank; i++) {
		if (l->shape[i] < 1 || l->map[i] < -1 || l->map[i] >= l->ndev)
			return -1;
		if (l->map[i] == -1)
			continue;
		for (int k = 0; k < i; k++)
			if (l->map[k] == l->map[i])
				return -1;
		if (l->shape[i] % dev_of(l, i) != 0)
			return -1;
	}
	return 0;
}

/* §2.1 "Standardisation": a device dimension of size 1 cuts nothing, so it is
 * dropped; entries that named it become -1 and entries naming dimensions to
 * its left (higher values) move down by one. */
void layout_standardize(const Layout *in, Layout *out)
{
	Layout t = *in;
	int nd = 0;
	int64_t newval[LAYOUT_MAX_DEV]; /* old map value -> new map value */
	int kept = 0;
	for (int d = in->ndev - 1; d >= 0; d--) { /* from the right: value order */
		int v = in->ndev - 1 - d;
		newval[v] = in->dev[d] == 1 ? -1 : kept++;
	}
	for (int d = 0; d < in->ndev; d++)
		if (in->dev[d] != 1)
			t.dev[nd++] = in->dev[d];
	if (nd == 0)
		t.dev[nd++] = 1;
	t.ndev = nd;
	for (int i = 0; i < in->rank; i++)
		t.map[i] = in->map[i] < 0 ? -1 : newval[in->map[i]];
	*out = t;
}

int layout_equal(const Layout *a, const Layout *b)
{
	Layout x, y;
	layout_standardize(a, &x);
	layout_standardize(b, &y);
	if (x.ndev != y.ndev || x.rank != y.rank)
		return 0;
	for (int d = 0; d < x.ndev; d++)
		if (x.dev[d] != y.dev[d])
			return 0;
	for (int i = 0; i < x.rank; i++)
		if (x.map[i] != y.map[i] || x.shape[i] != y.shape[i])
			return 0;
	return 1;
}

void layout_slice_shape(const Layout *l, int64_t *out)
{
	for (int i = 0; i < l->rank; i++)
		out[i] = l->map[i] < 0 ? l->shape[i] : l->shape[i] / dev_of(l, i);
}

/* ConvertRankToCoordinate: the last device dimension varies fastest. */
void layout_coord(const Layout *l, int64_t p, int64_t *coord)
{
	for (int d = l->ndev - 1; d >= 0; d--) {
		coord[d] = p % l->dev[d];
		p /= l->dev[d];
	}
}

static int64_t dev_stride(const Layout *l, int a)
{
	int64_t s = 1;
	for (int d = a + 1; d < l->ndev; d++)
		s *= l->dev[d];
	return s;
}

/* GetDevicesAlongDim: walk coordinate a from 0 to d_a-1, the rest fixed. */
int layout_group_along(const Layout *l, int64_t p, int a, int64_t *out)
{
	int64_t s = dev_stride(l, a);
	int64_t c = (p / s) % l->dev[a];
	int64_t base = p - c * s;
	for (int64_t k = 0; k < l->dev[a]; k++)
		out[k] = base + k * s;
	return (int)l->dev[a];
}

/* GetDevicesByTensorMap: every device dimension the map does not use is free;
 * enumerate all combinations of the free coordinates in ascending order. */
int layout_replica_group(const Layout *l, int64_t p, int64_t *out)
{
	int used[LAYOUT_MAX_DEV] = {0};
	for (int i = 0; i < l->rank; i++)
		if (l->map[i] >= 0)
			used[l->ndev - 1 - l->map[i]] = 1;
	int64_t coord[LAYOUT_MAX_DEV], cur[LAYOUT_MAX_DEV];
	layout_coord(l, p, coord);
	memcpy(cur, coord, sizeof cur);
	for (int d = 0; d < l->ndev; d++)
		if (!used[d])
			cur[d] = 0;
	int n = 0;
	for (;;) {
		int64_t q = 0;
		for (int d = 0; d < l->ndev; d++)
			q = q * l->dev[d] + cur[d];
		out[n++] = q;
		/* odometer over the free dimensions, last fastest */
		int d = l->ndev - 1;
		for (; d >= 0; d--) {
			if (used[d])
				continue;
			if (++cur[d] < l->dev[d])
				break;
			cur[d] = 0;
		}
		if (d < 0)
			break;
	}
	return n;
}

void layout_slice_offset(const Layout *l, int64_t p, int64_t *off)
{
	int64_t coord[LAYOUT_MAX_DEV], loc[LAYOUT_MAX_DIM];
	layout_coord(l, p, coord);
	layout_slice_shape(l, loc);
	for (int i = 0; i < l->rank; i++)
		off[i] = l->map[i] < 0 ? 0 : coord[l->ndev - 1 - l->map[i]] * loc[i];
}

/* §4.2 step 0, SqueezeShape: size-1 tensor dimensions carry no data and can
 * only be unmapped (-1), so they are removed; a one-element tensor is [1]. */
void layout_squeeze(const Layout *in, Layout *out)
{
	Layout t = *in;
	int r = 0;
	for (int i = 0; i < in->rank; i++) {
		if (in->shape[i] == 1)
			continue;
		t.shape[r] = in->shape[i];
		t.map[r++] = in->map[i];
	}
	if (r == 0) {
		t.shape[0] = 1;
		t.map[0] = -1;
		r = 1;
	}
	t.rank = r;
	*out = t;
}

/* Prefix products of a and b merged (UnifyAccumulateProduct) and turned back
 * into factors (AccumulateProductToShape): the coarsest device matrix that
 * refines both.  Fails when the totals differ or a merged product does not
 * divide the next one (e.g. [2,3] with [3,2]). */
int layout_unify_dev(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int max)
{
	int64_t pa[LAYOUT_MAX_DEV], pb[LAYOUT_MAX_DEV];
	if (na < 1 || nb < 1 || na > LAYOUT_MAX_DEV || nb > LAYOUT_MAX_DEV)
		return -1;
	pa[0] = a[0];
	for (int i = 1; i < na; i++)
		pa[i] = pa[i - 1] * a[i];
	pb[0] = b[0];
	for (int i = 1; i < nb; i++)
		pb[i] = pb[i - 1] * b[i];
	if (pa[na - 1] != pb[nb - 1])
		return -1;
	int i = 0, j = 0, n = 0;
	int64_t prev = 1;
	while (i < na || j < nb) {
		int64_t x = i < na ? pa[i] : INT64_MAX, y = j < nb ? pb[j] : INT64_MAX;
		int64_t v = x < y ? x : y;
		if (x == v)
			i++;
		if (y == v)
			j++;
		if (v == prev && n > 0)
			continue; /* a size-1 factor */
		if (v % prev != 0 || n >= max)
			return -1;
		out[n++] = v / prev;
		prev = v;
	}
	return n;
}

/* Suffix products merged from the right (ExpandShape): the coarsest shape
 * that refines both a and b; -1 when none exists. */
int layout_expand_shape(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int max)
{
	int64_t sa[LAYOUT_MAX_DIM + 1], sb[LAYOUT_MAX_DIM + 1], m[2 * LAYOUT_MAX_DIM + 2];
	if (na < 1 || nb < 1 || na > LAYOUT_MAX_DIM || nb > LAYOUT_MAX_DIM)
		return -1;
	/* suffix products, descending: sa[0] = total */
	sa[na] = 1;
	for (int i = na - 1; i >= 0; i--)
		sa[i] = sa[i + 1] * a[i];
	sb[nb] = 1;
	for (int i = nb - 1; i >= 0; i--)
		sb[i] = sb[i + 1] * b[i];
	if (sa[0] != sb[0])
		return -1;
	int i = 0, j = 0, n = 0;
	while (i < na || j < nb) {
		int64_t x = i < na ? sa[i] : 0, y = j < nb ? sb[j] : 0;
		int64_t v = x > y ? x : y;
		if (x == v)
			i++;
		if (y == v)
			j++;
		if (n == 0 || m[n - 1] != v)
			m[n++] = v;
	}
	if (n > max)
		return -1;
	for (int k = 0; k < n; k++) {
		int64_t next = k + 1 < n ? m[k + 1] : 1;
		if (m[k] % next != 0)
			return -1;
		out[k] = m[k] / next;
	}
	return n;
}

/* GetExpandShapeList: split `fine` into consecutive runs whose products are
 * the entries of `coarse`; cnt[i] = run length of coarse[i].  Fails if `fine`
 * does not refine `coarse`. */
static int expand_list(const int64_t *coarse, int nc, const int64_t *fine, int nf, int *cnt)
{
	int j = 0;
	for (int i = 0; i < nc; i++) {
		int64_t p = 1;
		int c = 0;
		do {
			if (j >= nf)
				return -1;
			p *= fine[j++];
			c++;
		} while (p < coarse[i]);
		if (p != coarse[i])
			return -1;
		cnt[i] = c;
	}
	return j == nf ? 0 : -1;
}

int layout_refines(const int64_t *coarse, int nc, const int64_t *fine, int nf)
{
	int cnt[LAYOUT_MAX_DIM > LAYOUT_MAX_DEV ? LAYOUT_MAX_DIM : LAYOUT_MAX_DEV];
	if (nc > (int)(sizeof cnt / sizeof cnt[0]))
		return 0;
	return expand_list(coarse, nc, fine, nf, cnt) == 0;
}

/* §4.2 step 1, ExpandDeviceArrangement: each old device dimension becomes a
 * run of new ones.  A tensor dimension cut by an old device dimension that
 * became r new ones is itself cut into r pieces: the leading r-1 pieces are
 * exactly the leading device factors (one block per device along them) and
 * the last piece keeps the rest; their map values are the new device
 * dimensions, highest first. */
int layout_expand_dev(const Layout *l, const int64_t *dev, int ndev, Layout *out)
{
	int cnt[LAYOUT_MAX_DEV], first[LAYOUT_MAX_DEV];
	if (ndev > LAYOUT_MAX_DEV || expand_list(l->dev, l->ndev, dev, ndev, cnt) < 0)
		return -1;
	first[0] = 0;
	for (int d = 1; d < l->ndev; d++)
		first[d] = first[d - 1] + cnt[d - 1];
	Layout t;
	memset(&t, 0, sizeof t);
	t.ndev = ndev;
	memcpy(t.dev, dev, (size_t)ndev * sizeof *dev);
	int r = 0;
	for (int i = 0; i < l->rank; i++) {
		if (l->map[i] < 0) {
			if (r >= LAYOUT_MAX_DIM)
				return -1;
			t.shape[r] = l->shape[i];
			t.map[r++] = -1;
			continue;
		}
		int od = l->ndev - 1 - (int)l->map[i];
		int64_t rest = l->shape[i];
		if (r + cnt[od] > LAYOUT_MAX_DIM)
			return -1;
		for (int k = 0; k < cnt[od]; k++) {
			int nd = first[od] + k;
			if (k + 1 < cnt[od]) {
				if (rest % dev[nd] != 0)
					return -1;
				t.shape[r] = dev[nd];
				rest /= dev[nd];
			} else {
				t.shape[r] = rest;
			}
			t.map[r++] = ndev - 1 - nd;
		}
	}
	t.rank = r;
	if (layout_check(&t) < 0)
		return -1;
	*out = t;
	return 0;
}

/* §4.2 step 2, ExpandTensorShape: refine the tensor shape to `shape`.
 * First every mapped device dimension is cut where its tensor dimension's
 * pieces need it (ComputeArrangementByExpandedShape: a device dimension of
 * size d over pieces e0, e1, ... takes e0, e1, ... as factors while they
 * divide what is left of d, then the remainder), the layout is re-expressed
 * on that device matrix, and finally the tensor dimensions are cut to `shape`
 * with a mapped dimension's value kept on its first piece. */
int layout_expand_tensor_shape(const Layout *l, const int64_t *shape, int rank, Layout *out)
{
	int cnt[LAYOUT_MAX_DIM], first[LAYOUT_MAX_DIM];
	if (rank > LAYOUT_MAX_DIM || expand_list(l->shape, l->rank, shape, rank, cnt) < 0)
		return -1;
	first[0] = 0;
	for (int i = 1; i < l->rank; i++)
		first[i] = first[i - 1] + cnt[i - 1];
	/* the new device matrix */
	int64_t nd[LAYOUT_MAX_DEV];
	int nnd = 0;
	for (int d = 0; d < l->ndev; d++) {
		int v = l->ndev - 1 - d, ti = -1, pushed = 0;
		for (int i = 0; i < l->rank; i++)
			if (l->map[i] == v)
				ti = i;
		int64_t rem = l->dev[d];
		for (int k = 0; ti >= 0 && k + 1 < cnt[ti] && rem > 1; k++) {
			int64_t e = shape[first[ti] + k];
			if (e == 1 || rem % e != 0)
				break;
			if (nnd >= LAYOUT_MAX_DEV)
				return -1;
			nd[nnd++] = e;
			rem /= e;
			pushed++;
		}
		if (rem > 1 || !pushed) {
			if (nnd >= LAYOUT_MAX_DEV)
				return -1;
			nd[nnd++] = rem;
		}
	}
	Layout t;
	if (layout_expand_dev(l, nd, nnd, &t) < 0)
		return -1;
	/* cut to `shape`, the value staying on the first piece */
	int tc[LAYOUT_MAX_DIM];
	if (expand_list(t.shape, t.rank, shape, rank, tc) < 0)
		return -1;
	Layout u = t;
	int r = 0;
	for (int i = 0; i < t.rank; i++)
		for (int k = 0; k < tc[i]; k++) {
			u.shape[r] = shape[r];
			u.map[r] = k == 0 ? t.map[i] : -1;
			r++;
		}
	u.rank = r;
	if (layout_check(&u) < 0)
		return -1;
	*out = u;
	return 0;
}
