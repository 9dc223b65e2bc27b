/* common.c - helpers shared by the lowering passes: the device context of
 * the rank being lowered (§2.1), compact layouts, communication groups and
 * their names (§3.3, ir-format.md §1.10), and the construction of inserted
 * CNodes with correct type lines (§3.4-3.5). */
#include <string.h>

#include "lower.h"

/* ------------------------------------------------------------ symbols */

/* Interned constants (attribute keys, type strings) are looked up once:
 * inserting hundreds of thousands of operators otherwise spends most of
 * its time re-hashing the same few strings.  Entries are keyed by the
 * literal's address and re-checked, so a reset intern table is harmless. */
Sym lower_sym(const char *s)
{
	static struct {
		const char *p;
		Sym s;
	} cache[256];
	static uint32_t epoch;
	if (epoch != intern_epoch()) { /* the Syms cached name freed texts */
		memset(cache, 0, sizeof cache);
		epoch = intern_epoch();
	}
	uint32_t h = (uint32_t)(((uintptr_t)s >> 3) * 2654435761u) >> 24;
	for (uint32_t k = 0; k < 256; k++) {
		uint32_t i = (h + k) & 255;
		if (cache[i].p == s && cache[i].s && strcmp(sym_str(cache[i].s), s) == 0)
			return cache[i].s;
		if (!cache[i].p || cache[i].p == s) {
			cache[i].p = s;
			cache[i].s = intern_cstr(s);
			return cache[i].s;
		}
	}
	return intern_cstr(s);
}

/* Append an attribute to a list built only by this function (capacity is
 * the next power of two of n, so appends are amortised O(1)).  It writes
 * into that room in place: never call it on a list another node may hold
 * (a parsed list, a plan's clone, the ReduceScatters' shared list), whose
 * room is not there or is not its own; copy the list first. */
void lower_attr_put(Module *m, AttrList *l, const char *key, Value v)
{
	if (l->n == 0 || (l->n >= 4 && (l->n & (l->n - 1)) == 0)) {
		uint32_t cap = l->n ? l->n * 2 : 4;
		Attr *na = arena_alloc(m->arena, cap * sizeof(Attr));
		if (l->n)
			memcpy(na, l->a, l->n * sizeof(Attr));
		l->a = na;
	}
	l->a[l->n].key = lower_sym(key);
	l->a[l->n].val = v;
	l->n++;
}

/* ------------------------------------------------------------ context */

/* lower_group_mask's answers: a pass asks for the same few (device
 * matrix, mask) groups once per operator, and a group can hold every rank */
typedef struct MaskVal {
	int n;          /* the group's size */
	int64_t *ranks; /* its first min(n, LOWER_MAX_GROUP) ranks */
} MaskVal;

int lower_ctx_init(LowerCtx *c, Module *m, const Options *o)
{
	memset(c, 0, sizeof *c);
	c->fn_epoch = 1;
	c->m = m;
	c->o = o;
	c->n_total = o->device_num > 0 ? o->device_num : 1;
	c->stages = sapp_plan_stages(m, o); /* --auto-pipeline may have lowered it */
	c->rank = o->rank;
	c->world = o->world_group ? o->world_group : "hccl_world_group";
	const char *br = getenv("SAPPC_TEST_BREAK_REDIST"); /* once, not per plan */
	c->break_redist = br && strcmp(br, "1") == 0;
	if (c->n_total % c->stages) {
		diag_error("%d devices cannot be divided into %d pipeline stages", c->n_total, c->stages);
		return -1;
	}
	if (c->rank < 0 || c->rank >= c->n_total) {
		diag_error("rank %d is out of range for %d devices (ranks 0 to %d)", c->rank, c->n_total,
		           c->n_total - 1);
		return -1;
	}
	c->per_stage = c->n_total / c->stages;
	c->stage = c->rank / c->per_stage;
	c->pos = c->rank - c->stage * c->per_stage;
	c->dev_list = xmalloc((size_t)c->per_stage * sizeof *c->dev_list);
	for (int i = 0; i < c->per_stage; i++)
		c->dev_list[i] = (int64_t)c->stage * c->per_stage + i;
	for (uint32_t gi = 0; gi < m->graphs.n && !c->primfunc; gi++) {
		Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++)
			if (g->nodes.a[i]->primfunc) {
				c->primfunc = 1;
				break;
			}
	}
	c->next_uid = 1;
	c->mask_memo = xmalloc(sizeof *c->mask_memo);
	keymap_init(c->mask_memo, sizeof(MaskVal));
	keymap_init(&c->groups, sizeof(LowerGroup));
	keymap_init(&c->lay_arrays, sizeof(unsigned char *));
	keymap_init(&c->plan_lays, sizeof(NodeLayout *));
	keymap_init(&c->rs_attrs, sizeof(AttrList));
	keymap_init(&c->shared_lays, sizeof(NodeLayout *));
	keymap_init(&c->tuple_users, sizeof(Node *));
	return 0;
}

void lower_ctx_free(LowerCtx *c)
{
	if (c->mask_memo) {
		for (uint32_t i = 0; i < c->mask_memo->n; i++)
			free(((MaskVal *)keymap_at(c->mask_memo, i, NULL, NULL))->ranks);
		keymap_free(c->mask_memo);
		free(c->mask_memo);
		c->mask_memo = NULL;
	}
	keymap_free(&c->groups);
	keymap_free(&c->lay_arrays);
	keymap_free(&c->plan_lays);
	keymap_free(&c->rs_attrs);
	keymap_free(&c->shared_lays);
	keymap_free(&c->tuple_users);
	free(c->dev_list);
	free(c->ckeys);
	free(c->cvals);
	free(c->seed_nodes);
	free(c->seed_next);
	c->seed_nodes = NULL;
	c->seed_next = NULL;
	keymap_free(&c->seed_prims);
	c->dev_list = NULL;
}

/* ------------------------------------------------------------ layouts */

/* one block: the record, then its inputs' and outputs' layouts */
NodeLayout *lay_new(Module *m, uint32_t nin, uint32_t nout)
{
	NodeLayout *l = arena_alloc(m->arena, sizeof *l + (nin + nout) * sizeof(TLay));
	l->nin = (uint16_t)nin;
	l->nout = (uint8_t)nout;
	l->in = nin ? (TLay *)(l + 1) : NULL;
	l->out = nout ? (TLay *)(l + 1) + nin : NULL;
	return l;
}

/* A layout being filled outside the arena: lay_keep makes it a node's. */
NodeLayout *lay_scratch(uint32_t nin, uint32_t nout)
{
	NodeLayout *l = xcalloc(1, sizeof *l + (nin + nout) * sizeof(TLay));
	l->nin = (uint16_t)nin;
	l->nout = (uint8_t)nout;
	l->in = nin ? (TLay *)(l + 1) : NULL;
	l->out = nout ? (TLay *)(l + 1) + nin : NULL;
	return l;
}

/* l's copy in the arena, its in and out arrays after it */
NodeLayout *lay_copy(Module *m, const NodeLayout *l)
{
	NodeLayout *d = lay_new(m, l->nin, l->nout);
	TLay *in = d->in, *out = d->out;
	*d = *l;
	d->in = in;
	d->out = out;
	if (l->nin)
		memcpy(in, l->in, l->nin * sizeof *in);
	if (l->nout)
		memcpy(out, l->out, l->nout * sizeof *out);
	return d;
}

/* Scratch layout s (freed) as a node's: with share, the one arena copy that
 * every equal layout of this pass shares.  A layer repeats its operators'
 * layouts: 86 000 operator and 37 000 Load layouts of a 4096-layer graph
 * (20 MB) are a few hundred distinct ones.  Equal TLays of one pass share
 * their arrays (tlay_set), so the arrays' addresses are the key. */
NodeLayout *lay_keep(LowerCtx *c, NodeLayout *s, int share)
{
	if (!share) {
		NodeLayout *d = lay_copy(c->m, s);
		free(s);
		return d;
	}
	uint32_t nt = (uint32_t)s->nin + s->nout, nk = 8 + 4 * nt;
	int64_t kbuf[8 + 4 * 16];
	int64_t *key = nk <= sizeof kbuf / sizeof *kbuf ? kbuf : xmalloc(nk * sizeof *key);
	key[0] = (int64_t)s->nin | (int64_t)s->nout << 16 | (int64_t)s->flags << 24 | (int64_t)s->fwd << 32 |
	         (int64_t)s->nodev << 40;
	key[1] = s->fwd_mask;
	key[2] = s->fwd_op;
	key[3] = s->opt_rep;
	key[4] = (int64_t)(intptr_t)s->odev;
	key[5] = (int64_t)(intptr_t)s->fwd_out;
	key[6] = (int64_t)(intptr_t)s->origin;
	key[7] = (int64_t)(intptr_t)s->subst;
	for (uint32_t i = 0; i < nt; i++) {
		const TLay *t = i < s->nin ? &s->in[i] : &s->out[i - s->nin];
		int64_t *k = key + 8 + 4 * i;
		k[0] = (int64_t)t->ndev << 8 | (uint8_t)t->rank;
		k[1] = t->ndev ? (int64_t)(intptr_t)t->dev : 0;
		k[2] = t->ndev ? (int64_t)(intptr_t)t->map : 0;
		k[3] = t->ndev ? (int64_t)(intptr_t)t->shape : 0;
	}
	int fresh;
	NodeLayout **v = keymap_get(&c->shared_lays, key, nk, &fresh);
	if (fresh)
		*v = lay_copy(c->m, s);
	if (key != kbuf)
		free(key);
	free(s);
	return *v;
}

/* The arrays of a layout live in one block, shared by every TLay with the
 * same device matrix, map and shape: a graph repeats a handful of them in
 * every layer.  The block (shape, then dev, then map) is made once per
 * lowering pass in the module arena, since layouts outlive the pass; the
 * pass's table finds it by its contents, packed into words as the key
 * (shape one a word, dev two, map eight). */
void tlay_set(LowerCtx *c, TLay *t, const int32_t *dev, int ndev, const int8_t *map, const int64_t *shape, int rank)
{
	int64_t key[1 + LAYOUT_MAX_DIM + (LAYOUT_MAX_DIM + 3) / 2 + (LAYOUT_MAX_DIM + 7) / 8];
	int nd = (ndev + 1) / 2, nm = (rank + 7) / 8;
	key[0] = (int64_t)ndev << 8 | rank;
	for (int i = 0; i < rank; i++)
		key[1 + i] = shape[i];
	memset(key + 1 + rank, 0, (size_t)(nd + nm) * sizeof *key);
	for (int i = 0; i < ndev; i++)
		key[1 + rank + i / 2] |= (int64_t)((uint64_t)(uint32_t)dev[i] << (32 * (i & 1)));
	for (int i = 0; i < rank; i++)
		key[1 + rank + nd + i / 8] |= (int64_t)((uint64_t)(uint8_t)map[i] << (8 * (i & 7)));
	size_t ss = (size_t)rank * sizeof *shape, ds = (size_t)ndev * sizeof *dev;
	int fresh;
	unsigned char **v = keymap_get(&c->lay_arrays, key, (uint32_t)(1 + rank + nd + nm), &fresh);
	if (fresh) {
		unsigned char *b = arena_alloc(c->m->arena, ss + ds + (size_t)rank);
		if (rank) {
			memcpy(b, shape, ss);
			memcpy(b + ss + ds, map, (size_t)rank);
		}
		if (ndev)
			memcpy(b + ss, dev, ds);
		*v = b;
	}
	t->ndev = (int8_t)ndev;
	t->rank = (int8_t)rank;
	t->shape = (const int64_t *)(void *)*v;
	t->dev = (const int32_t *)(void *)(*v + ss);
	t->map = (const int8_t *)(*v + ss + ds);
}

/* a device matrix on its own (NodeLayout.odev): the block of a scalar's layout */
const int32_t *lower_dev(LowerCtx *c, const int32_t *dev, int ndev)
{
	TLay t;
	tlay_set(c, &t, dev, ndev, NULL, NULL, 0);
	return t.dev;
}

void tlay_to_layout(const TLay *t, Layout *l)
{
	l->ndev = t->ndev;
	for (int i = 0; i < t->ndev; i++)
		l->dev[i] = t->dev[i];
	l->rank = t->rank;
	for (int i = 0; i < t->rank; i++) {
		l->map[i] = t->map[i];
		l->shape[i] = t->shape[i];
	}
}

void tlay_from_layout(LowerCtx *c, TLay *t, const Layout *l)
{
	int32_t dev[LAYOUT_MAX_DIM + 2];
	int8_t map[LAYOUT_MAX_DIM];
	for (int i = 0; i < l->ndev; i++)
		dev[i] = (int32_t)l->dev[i];
	for (int i = 0; i < l->rank; i++)
		map[i] = (int8_t)l->map[i];
	tlay_set(c, t, dev, l->ndev, map, l->shape, l->rank);
}

void tlay_slice(const TLay *t, int64_t *out)
{
	for (int i = 0; i < t->rank; i++) {
		int v = t->map[i];
		out[i] = v < 0 ? t->shape[i] : t->shape[i] / t->dev[t->ndev - 1 - v];
	}
}

int tlay_equal(const TLay *a, const TLay *b)
{
	if (a->shape == b->shape && a->ndev == b->ndev && a->rank == b->rank)
		return 1; /* the same block (tlay_set): the same layout */
	Layout x, y;
	tlay_to_layout(a, &x);
	tlay_to_layout(b, &y);
	return layout_equal(&x, &y);
}

/* "D=[4,2] M=[1,-1]": device matrix and tensor map, the part of a layout
 * that the local shape does not already say */
void tlay_replicated(LowerCtx *c, TLay *t, int per_stage, const int64_t *shape, int rank)
{
	int32_t dev[1] = {per_stage};
	int8_t map[LAYOUT_MAX_DIM];
	memset(map, -1, sizeof map);
	tlay_set(c, t, dev, 1, map, shape, rank);
}

/* ------------------------------------------------------------ groups */

static int group_mask_compute(const LowerCtx *c, const int32_t *dev, int ndev, uint32_t mask, int64_t *out)
{
	int64_t coord[LAYOUT_MAX_DIM + 2];
	int64_t p = c->pos;
	for (int i = ndev - 1; i >= 0; i--) {
		coord[i] = p % dev[i];
		p /= dev[i];
	}
	/* enumerate the varying coordinates in ascending position order */
	int vary[LAYOUT_MAX_DIM + 2], nv = 0;
	int64_t total = 1;
	for (int i = 0; i < ndev; i++)
		if (mask >> i & 1) {
			vary[nv++] = i;
			total *= dev[i];
		}
	for (int64_t k = 0; k < total && k < LOWER_MAX_GROUP; k++) {
		int64_t rem = k;
		for (int j = nv - 1; j >= 0; j--) {
			coord[vary[j]] = rem % dev[vary[j]];
			rem /= dev[vary[j]];
		}
		int64_t q = 0;
		for (int i = 0; i < ndev; i++)
			q = q * dev[i] + coord[i];
		out[k] = c->dev_list[q];
	}
	return (int)total;
}

int lower_group_mask(const LowerCtx *c, const int32_t *dev, int ndev, uint32_t mask, int64_t *out)
{
	if (!c->mask_memo || ndev > LAYOUT_MAX_DIM + 2)
		return group_mask_compute(c, dev, ndev, mask, out);
	int64_t key[LAYOUT_MAX_DIM + 3];
	key[0] = mask;
	for (int i = 0; i < ndev; i++)
		key[1 + i] = dev[i];
	int fresh;
	MaskVal *v = keymap_get(c->mask_memo, key, (uint32_t)ndev + 1, &fresh);
	if (fresh) {
		v->n = group_mask_compute(c, dev, ndev, mask, out);
		int k = v->n < LOWER_MAX_GROUP ? v->n : LOWER_MAX_GROUP;
		v->ranks = xmalloc((size_t)(k ? k : 1) * sizeof *out);
		memcpy(v->ranks, out, (size_t)k * sizeof *out);
		return v->n;
	}
	int k = v->n < LOWER_MAX_GROUP ? v->n : LOWER_MAX_GROUP;
	if (k)
		memcpy(out, v->ranks, (size_t)k * sizeof *out);
	return v->n;
}

int lower_replica_group(const LowerCtx *c, const TLay *t, int64_t *out)
{
	uint32_t used = 0;
	for (int i = 0; i < t->rank; i++)
		if (t->map[i] >= 0)
			used |= 1u << (t->ndev - 1 - t->map[i]);
	uint32_t mask = ((t->ndev >= 32) ? 0xffffffffu : ((1u << t->ndev) - 1)) & ~used;
	return lower_group_mask(c, t->dev, t->ndev, mask, out);
}

static size_t join_ranks(const int64_t *r, int n, char *buf, size_t len)
{
	size_t k = 0;
	buf[0] = 0;
	for (int i = 0; i < n && k + 24 < len; i++)
		k += (size_t)snprintf(buf + k, len - k, i ? "-%lld" : "%lld", (long long)r[i]);
	return k;
}

static Value ints_bare(Module *m, const int64_t *v, int n)
{
	Value t = {0};
	t.kind = V_TUPLE;
	t.n = (uint32_t)n;
	t.u.elems = n ? arena_alloc(m->arena, (size_t)n * sizeof(Value)) : NULL;
	for (int i = 0; i < n; i++)
		t.u.elems[i] = value_int(v[i], NT_BARE);
	return t;
}

Value lower_ints(Module *m, const int64_t *v, int n)
{
	return *value_tuple_ints(m->arena, v, n, NT_I64);
}

/* The group of these ranks, its name and attribute values made the first
 * time it is asked for: a rank graph has hundreds of thousands of
 * communication ops but only as many groups as device-matrix shapes. */
static LowerGroup *lower_group(LowerCtx *c, const int64_t *ranks, int n)
{
	int fresh;
	LowerGroup *g = keymap_get(&c->groups, ranks, (uint32_t)n, &fresh);
	if (!fresh)
		return g;
	char *buf = xmalloc((size_t)n * 24 + 64);
	size_t k = join_ranks(ranks, n, buf, (size_t)n * 24 + 64);
	if (n == c->n_total)
		g->name = intern_cstr(c->world);
	else {
		char name[64];
		snprintf(name, sizeof name, "%d-%llu", n, (unsigned long long)std_hash_bytes(buf, k));
		g->name = intern_cstr(name);
	}
	g->granks = n == c->n_total ? intern_cstr("WORLD_GROUP") : intern(buf, k);
	free(buf);
	return g;
}

const char *lower_group_name(LowerCtx *c, const int64_t *ranks, int n, char *buf, size_t len)
{
	snprintf(buf, len, "%s", sym_str(lower_group(c, ranks, n)->name));
	return buf;
}

/* The group-derived attributes every inserted communication op carries
 * (§3.3): group, group_ranks (string), group_rank_ids and, for ops whose
 * fusion is 0, comm_reuse and rank_list (§3.0 late passes).  The caller has
 * already put the op-specific ones; order is fixed by lower_order_attrs. */
void lower_comm_group_attrs(LowerCtx *c, Node *n, const int64_t *ranks, int nr, int reuse)
{
	Module *m = c->m;
	LowerGroup *g = lower_group(c, ranks, nr);
	if (!g->ids.kind)
		g->ids = ints_bare(m, ranks, nr);
	Value v = {0};
	v.kind = V_STR;
	v.text = g->name;
	lower_attr_put(m, &n->pattrs, "group", v);
	v.text = g->granks;
	lower_attr_put(m, &n->pattrs, "group_ranks", v);
	lower_attr_put(m, &n->pattrs, "group_rank_ids", g->ids);
	if (reuse) {
		lower_attr_put(m, &n->pattrs, "comm_reuse", value_bool(1));
		lower_attr_put(m, &n->pattrs, "rank_list", g->ids);
	}
}

/* Put the attributes of l in the order of keys (a set whose MindSpore print
 * order is known), then hand them to the robin_hood order emulation. */
void lower_reorder_attrs(AttrList *l, const char *const *keys, int nk)
{
	Attr tmp[32];
	uint32_t k = 0;
	for (int i = 0; i < nk && k < 32; i++) {
		size_t kl = strlen(keys[i]); /* lengths first: most pairs differ in it */
		for (uint32_t j = 0; j < l->n; j++)
			if (sym_len(l->a[j].key) == kl && memcmp(sym_str(l->a[j].key), keys[i], kl) == 0)
				tmp[k++] = l->a[j];
	}
	if (k == l->n)
		memcpy(l->a, tmp, k * sizeof *tmp);
	lower_order_attrs(l);
}

/* Attribute print order: MindSpore prints its HashMap's slot order
 * (ir-format.md §1.9), emulated by rh_order_attrs() in ir/rhmap.c. */
void lower_order_attrs(AttrList *l)
{
	if (l->n > 1)
		rh_order_attrs(l->a, l->n);
}

/* ------------------------------------------------------------ names */

const char *lower_fullname(const Node *n, char *buf, size_t len)
{
	if (n->scope_kind == SCOPE_FULLNAME && n->scope_op)
		snprintf(buf, len, "%s-op%u", sym_str(n->scope), n->scope_op - 1);
	else if (n->scope_kind == SCOPE_FULLNAME)
		snprintf(buf, len, "%s", sym_str(n->scope));
	else if (n->scope)
		snprintf(buf, len, "%s/%s-op0", sym_str(n->scope), sym_str(n->prim));
	else
		snprintf(buf, len, "%s-op0", sym_str(n->prim));
	return buf;
}

uint64_t lower_hash_name(const Node *producer, int index)
{
	char buf[1024];
	lower_fullname(producer, buf, sizeof buf - 24);
	size_t k = strlen(buf);
	k += (size_t)snprintf(buf + k, sizeof buf - k, "_%d", index);
	return std_hash_bytes(buf, k);
}

/* fullname counters: "scope/Op" -> next N of "-opN", seeded from the graph
 * so that inserted operators never reuse an existing full name */
static uint32_t ckey_hash(Sym s)
{
	return s * 2654435761u;
}

static int32_t *counter(LowerCtx *c, Sym key)
{
	if (c->ccount * 2 >= c->ccap) {
		uint32_t ncap = c->ccap ? c->ccap * 2 : 1024;
		Sym *nk = xcalloc(ncap, sizeof *nk);
		int32_t *nv = xcalloc(ncap, sizeof *nv);
		for (uint32_t i = 0; i < c->ccap; i++) {
			if (!c->ckeys[i])
				continue;
			uint32_t h = ckey_hash(c->ckeys[i]) & (ncap - 1);
			while (nk[h])
				h = (h + 1) & (ncap - 1);
			nk[h] = c->ckeys[i];
			nv[h] = c->cvals[i];
		}
		free(c->ckeys);
		free(c->cvals);
		c->fn_epoch++; /* cached counter pointers are stale */
		c->ckeys = nk;
		c->cvals = nv;
		c->ccap = ncap;
	}
	uint32_t h = ckey_hash(key) & (c->ccap - 1);
	while (c->ckeys[h] && c->ckeys[h] != key)
		h = (h + 1) & (c->ccap - 1);
	if (!c->ckeys[h]) {
		c->ckeys[h] = key;
		c->cvals[h] = 0;
		c->ccount++;
	}
	return &c->cvals[h];
}

/* The "-op<k>" suffix of a full name: its position and k, or NULL. */
static const char *op_suffix(const char *s, size_t len, long *k)
{
	const char *last = NULL;
	for (size_t i = len >= 3 ? len - 3 + 1 : 0; i-- > 0;)
		if (s[i] == '-' && s[i + 1] == 'o' && s[i + 2] == 'p') {
			last = s + i;
			break;
		}
	if (!last)
		return NULL;
	/* plain digits to the end, as nearly every name has: read here (the
	 * counters' seeding asks this of every node of every pass) */
	const char *d = last + 3, *end = s + len;
	if (d < end && end - d <= 18 && *d >= '0' && *d <= '9') {
		long v = 0;
		for (; d < end && *d >= '0' && *d <= '9'; d++)
			v = v * 10 + (*d - '0');
		if (d == end && !*d) {
			*k = v;
			return last;
		}
	}
	char *e;
	*k = strtol(last + 3, &e, 10);
	return e == last + 3 || *e ? NULL : last;
}

static void seed_one(LowerCtx *c, const char *s, const char *last, long v)
{
	int32_t *ct = counter(c, intern(s, (size_t)(last - s)));
	if (*ct <= v)
		*ct = (int32_t)v + 1;
}

/* The counters start past every full name of the graph.  A full name
 * "dir/Op-op<k>" only matters if the lowering inserts an Op in dir, so the
 * nodes named after their own primitive - nearly all - wait in a list per
 * primitive, and seed_prim() interns their prefixes the first time an op
 * of that primitive is named; the others are counted now. */
static void seed_counters(LowerCtx *c)
{
	c->cseeded = 1;
	keymap_init(&c->seed_prims, sizeof(int32_t));
	uint32_t total = 0;
	for (uint32_t gi = 0; gi < c->m->graphs.n; gi++)
		total += c->m->graphs.a[gi]->nodes.n;
	c->seed_next = xmalloc(((size_t)total + 1) * sizeof *c->seed_next);
	c->seed_nodes = xmalloc(((size_t)total + 1) * sizeof *c->seed_nodes);
	uint32_t k = 0;
	/* the inserted ops' prefixes repeat (a layer's bprops, its
	 * redistributions): their counters are kept in a direct-mapped cache,
	 * emptied when the table grows (its pointers die) */
	struct {
		Sym scope;
		int32_t *ct;
	} cts[256] = {{0, NULL}};
	uint32_t cts_epoch = c->fn_epoch;
	/* and each primitive's list head, by Sym (a graph has a few dozen) */
	struct {
		Sym prim;
		int32_t *head;
	} heads[64] = {{0, NULL}};
	for (uint32_t gi = 0; gi < c->m->graphs.n; gi++) {
		Graph *g = c->m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			sweep_prefetch(g->nodes.a, i, g->nodes.n);
			if (n->scope_kind != SCOPE_FULLNAME)
				continue;
			if (n->scope_op) { /* inserted by an earlier pass: scope is the prefix */
				if (cts_epoch != c->fn_epoch) {
					memset(cts, 0, sizeof cts);
					cts_epoch = c->fn_epoch;
				}
				uint32_t j = (n->scope * 2654435761u) >> 24;
				if (cts[j].scope != n->scope || !cts[j].ct) {
					cts[j].ct = counter(c, n->scope);
					cts[j].scope = n->scope;
				}
				int32_t *ct = cts[j].ct;
				if ((uint32_t)*ct < n->scope_op)
					*ct = (int32_t)n->scope_op;
				continue;
			}
			const char *s = sym_str(n->scope);
			size_t len = sym_len(n->scope);
			long v;
			const char *last = op_suffix(s, len, &v);
			if (!last)
				continue;
			const char *op = last;
			while (op > s && op[-1] != '/')
				op--;
			size_t pl = sym_len(n->prim);
			if (n->prim && (size_t)(last - op) == pl && memcmp(op, sym_str(n->prim), pl) == 0) {
				int32_t *head = heads[n->prim % 64].prim == n->prim ? heads[n->prim % 64].head : NULL;
				if (!head) {
					int64_t key = n->prim;
					int fresh;
					head = keymap_get(&c->seed_prims, &key, 1, &fresh);
					if (fresh)
						*head = -1;
					heads[n->prim % 64].prim = n->prim;
					heads[n->prim % 64].head = head;
				}
				c->seed_nodes[k] = n;
				c->seed_next[k] = *head;
				*head = (int32_t)k++;
			} else {
				seed_one(c, s, last, v);
			}
		}
	}
}

/* the counters of the full names waiting for primitive prim */
static void seed_prim(LowerCtx *c, Sym prim)
{
	Sym *done = &c->seeded[prim % 64];
	if (prim && *done == prim)
		return; /* its list is empty: a keymap look saved on every cache miss */
	*done = prim;
	int64_t key = prim;
	int fresh;
	int32_t *head = keymap_get(&c->seed_prims, &key, 1, &fresh);
	for (int32_t k = fresh ? -1 : *head; k >= 0; k = c->seed_next[k]) {
		const Node *n = c->seed_nodes[k];
		const char *s = sym_str(n->scope);
		long v;
		const char *last = op_suffix(s, sym_len(n->scope), &v);
		seed_one(c, s, last, v);
	}
	*head = -1; /* done */
}

void lower_set_fullname(LowerCtx *c, Node *n, const Node *like)
{
	if (!like || !like->scope_kind)
		return;
	if (like->scope_kind != SCOPE_FULLNAME) {
		n->scope_kind = like->scope_kind;
		n->scope = like->scope;
		return;
	}
	if (!c->cseeded)
		seed_counters(c);
	/* the counter and the interned prefix of (consumer scope, operator) are
	 * cached: building and interning the prefix again for every inserted op
	 * is the costly part.  The "-op<k>" suffix is not interned at all: the
	 * node keeps the prefix and k (Node.scope_op), the printer joins them. */
	uint32_t h = (like->scope * 2654435761u ^ n->prim * 40503u) & (LOWER_FNCACHE - 1);
	if (!(c->fn_scope[h] == like->scope && c->fn_prim[h] == n->prim && c->fn_ctr[h] &&
	      c->fn_gen[h] == c->fn_epoch)) {
		seed_prim(c, n->prim);
		const char *s = sym_str(like->scope);
		/* the last '/' sought from the end: a full name is a long path
		 * and its last segment short (strrchr read all of it) */
		size_t plen = sym_len(like->scope), ol = sym_len(n->prim);
		while (plen && s[plen - 1] != '/')
			plen--;
		plen = plen ? plen - 1 : 0;
		char buf[1024];
		size_t k = plen + (plen ? 1 : 0) + ol; /* "dir/Prim" */
		if (k >= sizeof buf - 16)
			return;
		Sym key;
		/* every key is interned, one Sym per text: the cached one is the
		 * one intern would give */
		uint64_t dh = plen * 0x9E3779B97F4A7C15ull ^ n->prim;
		size_t i = 0;
		for (; i + 8 <= plen; i += 8) { /* whole words: a fixed-size load */
			uint64_t w;
			memcpy(&w, s + i, 8);
			dh = (dh ^ w) * 0xff51afd7ed558ccdull;
		}
		if (i < plen) {
			uint64_t w = 0;
			memcpy(&w, s + i, plen - i);
			dh = (dh ^ w) * 0xff51afd7ed558ccdull;
		}
		uint32_t dj = (uint32_t)(dh >> 40) & (LOWER_DIRCACHE - 1);
		if (c->fn_dir[dj].key && c->fn_dir[dj].prim == n->prim && c->fn_dir[dj].plen == plen &&
		    memcmp(sym_str(c->fn_dir[dj].key), s, plen) == 0) {
			key = c->fn_dir[dj].key;
		} else if (!(like->scope & SYM_DEFERRED) && sym_len(like->scope) == k &&
		           memcmp(s + k - ol, sym_str(n->prim), ol) == 0) {
			key = like->scope; /* like is named after n's primitive (a bprop's template): its own key */
		} else {
			memcpy(buf, s, plen);
			if (plen)
				buf[plen] = '/';
			memcpy(buf + k - ol, sym_str(n->prim), ol);
			key = intern(buf, k);
		}
		c->fn_dir[dj].key = key;
		c->fn_dir[dj].prim = n->prim;
		c->fn_dir[dj].plen = (uint32_t)plen;
		c->fn_ctr[h] = counter(c, key);
		c->fn_scope[h] = like->scope;
		c->fn_prim[h] = n->prim;
		c->fn_key[h] = key;
		c->fn_gen[h] = c->fn_epoch;
	}
	n->scope_kind = SCOPE_FULLNAME;
	n->scope = c->fn_key[h];
	n->scope_op = (uint32_t)(*c->fn_ctr[h])++ + 1;
}

Node *lower_new_op(LowerCtx *c, int op, const Node *like, uint32_t nargs)
{
	Node *n = ir_cnode_new(c->m, like ? like->g : ir_entry(c->m), op, NULL, nargs);
	n->primfunc = c->primfunc && (op_table[op].flags & OPF_PRIMFUNC);
	n->nin_types = nargs;
	n->in_types = nargs ? arena_alloc(c->m->arena, nargs * sizeof(Abs)) : NULL;
	n->autoname = 1; /* CNode_<id>, formed by whoever prints it */
	n->loc = like ? like->loc : (Loc){0, 0};
	n->stage = like ? like->stage : -1;
	lower_set_fullname(c, n, like);
	return n;
}

/* ------------------------------------------------------------ cell paths */

static int seg_name_eq(const char *seg, size_t slen, const char *pat, size_t plen)
{
	const char *dash = memchr(seg, '-', slen);
	size_t n = dash ? (size_t)(dash - seg) : slen;
	return n == plen && memcmp(seg, pat, n) == 0;
}

/* A cell path `a.b.c` (MindSpore's stage_config and cell names) against
 * the '/'-separated segments of a scope, each compared by its name before
 * '-' (`a-Net/b-Dense/c-ReLU`): the first run of consecutive segments that
 * matches.  Returns the number of pattern parts matched (0: no match) and,
 * when end is given, the length of the scope prefix through the last
 * matched segment (the path of the cell instance). */
int lower_match_cell(const char *scope, const char *pat, size_t plen, size_t *end)
{
	const char *segs[128];
	size_t lens[128];
	int ns = 0;
	for (const char *p = scope; *p && ns < 128;) {
		const char *e = strchr(p, '/');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		segs[ns] = p;
		lens[ns++] = l;
		p += l + (e ? 1 : 0);
		if (!e)
			break;
	}
	const char *parts[64];
	size_t plens[64];
	int np = 0;
	for (const char *p = pat; p < pat + plen && np < 64;) {
		const char *e = memchr(p, '.', (size_t)(pat + plen - p));
		size_t l = e ? (size_t)(e - p) : (size_t)(pat + plen - p);
		parts[np] = p;
		plens[np++] = l;
		p += l + 1;
	}
	for (int s = 0; s + np <= ns; s++) {
		int ok = 1;
		for (int k = 0; k < np && ok; k++)
			ok = seg_name_eq(segs[s + k], lens[s + k], parts[k], plens[k]);
		if (ok) {
			if (end)
				*end = (size_t)(segs[s + np - 1] + lens[s + np - 1] - scope);
			return np;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ abstracts */

/* asked for every weight a training rule or the optimizer reads, and every
 * tensor lower_abs_like makes, from a few dtypes */
Sym lower_tensor_tstr(Sym dtype, int ref)
{
	static struct {
		Sym dtype, tstr;
	} memo[2][16];
	static uint32_t epoch;
	if (epoch != intern_epoch()) { /* the Syms kept name freed texts */
		memset(memo, 0, sizeof memo);
		epoch = intern_epoch();
	}
	uint32_t h = (dtype * 2654435761u) >> 28;
	if (memo[ref][h].dtype != dtype || !memo[ref][h].tstr) {
		char buf[96];
		snprintf(buf, sizeof buf, ref ? "Ref[Tensor[%s]]" : "Tensor[%s]", sym_str(dtype));
		memo[ref][h].dtype = dtype;
		memo[ref][h].tstr = intern_cstr(buf);
	}
	return memo[ref][h].tstr;
}

Abs lower_abs_like(Module *m, const Abs *like, const int64_t *d, int rank)
{
	Abs a = {0};
	a.dtype = like->dtype ? like->dtype : lower_sym("Float32");
	a.tstr = lower_tensor_tstr(a.dtype, 0);
	a.is_tensor = 1;
	a.shape = shape_shared(m, d, rank);
	return a;
}

Abs lower_abs_int(void)
{
	Abs a = {0};
	a.tstr = lower_sym("Int64");
	a.shape.kind = SK_NOSHAPE;
	return a;
}

Abs lower_abs_tuple_ints(Module *m, int n)
{
	Abs a = {0};
	static const char *const names[] = {"Tuple[]",        "Tuple[Int64]",   "Tuple[Int64*2]",
	                                    "Tuple[Int64*3]", "Tuple[Int64*4]", "Tuple[Int64*5]",
	                                    "Tuple[Int64*6]", "Tuple[Int64*7]", "Tuple[Int64*8]"};
	if (n >= 0 && n <= 8) {
		a.tstr = lower_sym(names[n]);
	} else {
		char buf[64];
		snprintf(buf, sizeof buf, "Tuple[Int64*%d]", n);
		a.tstr = intern_cstr(buf);
	}
	/* every element is NoShape: small tuples share one constant array */
#define NS {.kind = SK_NOSHAPE}
	static const Shape noshape[16] = {NS, NS, NS, NS, NS, NS, NS, NS, NS, NS, NS, NS, NS, NS, NS, NS};
#undef NS
	a.shape.kind = SK_TUPLE;
	a.shape.rank = (uint8_t)n;
	if (n <= 16) {
		a.shape.sub = n ? (Shape *)noshape : NULL;
		return a;
	}
	a.shape.sub = arena_alloc(m->arena, (size_t)n * sizeof(Shape));
	for (int i = 0; i < n; i++)
		a.shape.sub[i].kind = SK_NOSHAPE;
	return a;
}

Abs lower_abs_tuple(Module *m, const Abs *e, uint32_t n, uint32_t inc)
{
	Abs a = {0};
	/* Tuple[T] or Tuple[T*n] when the elements agree on their type, else
	 * Tuple[T1,T2,...] */
	int same = 1;
	size_t len = 32;
	for (uint32_t k = 0; k < n; k++) {
		same &= e[k * inc].tstr == e[0].tstr;
		len += sym_len(e[k * inc].tstr) + 1;
	}
	char *buf = xmalloc(len);
	if (!n)
		strcpy(buf, "Tuple[]");
	else if (same)
		snprintf(buf, len, n == 1 ? "Tuple[%s]" : "Tuple[%s*%u]", sym_str(e[0].tstr), n);
	else {
		size_t at = (size_t)sprintf(buf, "Tuple[");
		for (uint32_t k = 0; k < n; k++)
			at += (size_t)sprintf(buf + at, "%s%s", k ? "," : "", sym_str(e[k * inc].tstr));
		strcpy(buf + at, "]");
	}
	a.tstr = intern_cstr(buf);
	free(buf);
	a.shape.kind = SK_TUPLE;
	a.shape.rank = (uint8_t)n;
	a.shape.sub = n ? arena_alloc(m->arena, (size_t)n * sizeof(Shape)) : NULL;
	for (uint32_t k = 0; k < n; k++)
		a.shape.sub[k] = e[k * inc].shape;
	return a;
}

/* ------------------------------------------------------------ inputs */

/* in_strategy of a node: from its strategy suffix, else from the
 * in_strategy primitive attribute.  Returns 1 and fills s/rk, 0 if none,
 * -1 if malformed. */
int lower_strategy(const Node *n, int64_t s[][LAYOUT_MAX_DIM], int *rk, int max, int *nstrat)
{
	const Value *v = ir_attr_get(ir_node_strat(n), "in_strategy");
	if (!v)
		v = ir_attr_get(&n->pattrs, "in_strategy");
	if (!v || value_is_word(v, "None"))
		return 0;
	if (v->kind != V_TUPLE && v->kind != V_LIST)
		return -1;
	if ((int)v->n > max)
		return -1;
	for (uint32_t i = 0; i < v->n; i++) {
		int k = value_int_list(&v->u.elems[i], s[i], LAYOUT_MAX_DIM);
		if (k < 0)
			return -1;
		rk[i] = k;
	}
	*nstrat = (int)v->n;
	return 1;
}

int lower_is_weight(const Node *p)
{
	return p->kind == NK_PARAM && (p->has_default || p->out.is_ref);
}

int lower_is_dataset(const Node *p)
{
	return p->kind == NK_PARAM && !lower_is_weight(p) && p->out.is_tensor && p->out.shape.kind == SK_DIMS;
}

int lower_param_shard(const LowerCtx *c, const Node *p, int64_t *optg, int *nopt, int64_t *mirror, int *nmirror)
{
	*nopt = 0;
	*nmirror = 0;
	if (!p->lay || !p->lay->nout || !p->lay->out[0].ndev)
		return 1;
	const TLay *t = &p->lay->out[0];
	int R = lower_replica_group(c, t, mirror);
	*nmirror = R;
	if (!c->o->enable_parallel_optimizer || R <= 1 || t->rank < 1)
		return 1;
	int K = c->o->optimizer_weight_shard_size;
	int rep = (K > 1 && K < R && R % K == 0) ? K : R;
	int64_t sl[LAYOUT_MAX_DIM];
	tlay_slice(t, sl);
	if (sl[0] % rep)
		return 1;
	int idx = 0;
	for (int i = 0; i < R; i++)
		if (mirror[i] == c->rank)
			idx = i;
	int chunk = idx / rep;
	for (int i = 0; i < rep; i++)
		optg[i] = mirror[chunk * rep + i];
	*nopt = rep;
	if (rep == R) {
		*nmirror = 0;
	} else {
		/* the chunks still reduce among themselves: same offset in every chunk */
		int64_t tmp[LOWER_MAX_GROUP / 4];
		int nm = 0;
		for (int j = 0; j < R / rep && nm < LOWER_MAX_GROUP / 4; j++)
			tmp[nm++] = mirror[j * rep + idx % rep];
		memcpy(mirror, tmp, (size_t)nm * sizeof *tmp);
		*nmirror = nm;
	}
	return rep;
}

/* a scalar tensor constant, Tensor(shape=[], dtype=T, value=v), as dumps print it */
Value lower_scalar_tensor(Module *m, Sym dtype, int64_t v)
{
	Value e[3];
	memset(e, 0, sizeof e);
	e[0].kind = V_LIST;
	value_set_key(&e[0], intern_cstr("shape"));
	e[1] = value_word(sym_str(dtype));
	value_set_key(&e[1], intern_cstr("dtype"));
	e[2] = value_int(v, NT_BARE);
	value_set_key(&e[2], intern_cstr("value"));
	return value_call_of(m->arena, intern_cstr("Tensor"), e, 3);
}
