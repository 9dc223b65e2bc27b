/* layouts.c - the `layouts` pass and the layout checks of --verify-each.
 *
 * pass_layouts (parallel-lowering.md §2.2-§2.3, §5.2-§5.3)
 *   Requires: a verified module; in_strategy on the operators that have one
 *             (from the sapp pass or the input).
 *   Provides: Node.lay on every node of the entry graph that carries a
 *             tensor: operators with a rule get device matrix, input and
 *             output maps and their forward communication (rules.c); weights
 *             take the input layout of their first parallel-care user;
 *             dataset inputs are split on dimension 0 over the stage
 *             (data_parallel, unless --full-batch); Load, Depend, Cast,
 *             TupleGetItem and MakeTuple pass their operand's layout through;
 *             Reshape takes its producer's layout in and its first consumer's
 *             layout out (§2.3 Reshape).  With --parallel-detail the
 *             operators also get the inputs_tensor_map / device_matrix /
 *             outputs_tensor_map attributes of MS_DEV_DUMP_IR_PARALLEL_DETAIL
 *             (ir-format.md §1.4).
 *   Invalidates: nothing; the IR text is unchanged otherwise.
 *   Errors: strategies that do not divide, have the wrong rank, need more
 *   devices than a stage has, or break an operator's rule (MatMul reduction
 *   splits that differ, a split softmax axis, ...), a bad device count or
 *   rank: reported at the operator, exit 1.
 */
#include <string.h>

#include "lower.h"

/* users of every node of a graph, in node order (CSR) */
typedef struct Users {
	uint32_t *start; /* by mark index */
	Node **user;
	uint16_t *arg;
} Users;

static int pass_through(const Node *n)
{
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return 0;
	if (n->lay && (n->lay->flags & LAY_OP))
		return 0;
	return (op_table[n->op].flags & OPF_LOOKTHROUGH) || n->op == OP_Cast;
}

/* The edges are found in one sweep and kept (producer mark, user, operand)
 * in node order, so the fill below reads no producer again: each producer
 * read is a cache miss on a graph of a hundred thousand nodes, and the
 * second sweep's were half of the pass's own time (perf, 4096 layers). */
typedef struct UseEdge {
	uint32_t mark, user;
	uint16_t arg;
} UseEdge;

static void users_build(Graph *g, Users *u)
{
	uint32_t np = g->params.n, nn = g->nodes.n, tot = np + nn;
	for (uint32_t i = 0; i < np; i++)
		g->params.a[i]->mark = i + 1;
	for (uint32_t i = 0; i < nn; i++)
		g->nodes.a[i]->mark = np + i + 1;
	u->start = xcalloc(tot + 2, sizeof *u->start);
	uint32_t total = 0, cap = nn * 2 + 16;
	UseEdge *e = xmalloc(cap * sizeof *e);
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		for (uint32_t k = 0; k < n->nargs; k++)
			if (n->args[k].kind == V_NODE && n->args[k].u.node->g == g && n->args[k].u.node->mark) {
				if (total == cap) {
					cap *= 2;
					e = xrealloc(e, cap * sizeof *e);
				}
				e[total++] = (UseEdge){n->args[k].u.node->mark, i, (uint16_t)k};
				u->start[n->args[k].u.node->mark + 1]++;
			}
	}
	for (uint32_t i = 1; i <= tot + 1; i++)
		u->start[i] += u->start[i - 1];
	u->user = xmalloc((total + 1) * sizeof *u->user);
	u->arg = xmalloc((total + 1) * sizeof *u->arg);
	uint32_t *fill = xmalloc((tot + 2) * sizeof *fill);
	memcpy(fill, u->start, (tot + 2) * sizeof *fill);
	for (uint32_t j = 0; j < total; j++) {
		uint32_t at = fill[e[j].mark]++;
		u->user[at] = g->nodes.a[e[j].user];
		u->arg[at] = e[j].arg;
	}
	free(fill);
	free(e);
}

static void users_free(Users *u)
{
	free(u->start);
	free(u->user);
	free(u->arg);
}

/* First user (in node order, looking through pass-through nodes) that needs
 * a layout for this value: returns its required layout. */
static const TLay *first_care(const Users *u, const Node *src, int depth)
{
	if (!src->mark || depth > 64)
		return NULL;
	for (uint32_t k = u->start[src->mark]; k < u->start[src->mark + 1]; k++) {
		Node *c = u->user[k];
		int a = u->arg[k];
		if (c->lay && (c->lay->flags & LAY_OP) && a < c->lay->nin && c->lay->in[a].ndev)
			return &c->lay->in[a];
		if (pass_through(c) && a == 0 && !ir_node_is_op(c, OP_TupleGetItem)) {
			const TLay *t = first_care(u, c, depth + 1);
			if (t)
				return t;
		}
	}
	return NULL;
}

static const TLay *out_of(const Value *v, int k)
{
	if (v->kind != V_NODE)
		return NULL;
	const Node *p = v->u.node;
	if (!p->lay || k >= p->lay->nout || !p->lay->out[k].ndev)
		return NULL;
	/* a MatMul with out_strategy hands its users the ReduceScatter's result */
	if (k == 0 && p->lay->fwd == FC_REDUCESCATTER && p->lay->fwd_out)
		return p->lay->fwd_out;
	return &p->lay->out[k];
}

static int dims_of(const Abs *a, const int64_t **d)
{
	if (!a->is_tensor || a->shape.kind != SK_DIMS)
		return -1;
	*d = a->shape.dims;
	return a->shape.rank;
}

/* A dataset input with a given strategy s (--dataset-strategy=TUPLE, an
 * explicit _VirtualDataset's in_strategy): the device matrix is s's split
 * entries, then the repeat; 1 done, 0 when s does not fit (reported). */
static int given_dataset_layout(LowerCtx *c, Loc loc, const char *what, TLay *out, const int64_t *s, const int64_t *d,
                                int r)
{
	int32_t dev[LAYOUT_MAX_DIM + 1];
	int8_t map[LAYOUT_MAX_DIM];
	int nd = 0;
	int64_t prod = 1;
	for (int i = 0; i < r; i++) {
		if (d[i] % s[i]) {
			diag_error_at(loc, "%s: its strategy splits dimension %d (%lld) %lld ways", what, i,
			              (long long)d[i], (long long)s[i]);
			return 0;
		}
		prod *= s[i];
		if (s[i] > 1)
			dev[nd++] = (int32_t)s[i];
	}
	if (prod > c->per_stage || c->per_stage % prod) {
		diag_error_at(loc, "%s: its strategy uses %lld devices, which does not divide the stage's %d", what,
		              (long long)prod, c->per_stage);
		return 0;
	}
	if (prod < c->per_stage)
		dev[nd++] = (int32_t)(c->per_stage / prod);
	for (int i = 0, j = 0; i < r; i++)
		map[i] = s[i] > 1 ? (int8_t)(nd - 1 - j++) : -1;
	tlay_set(c, out, dev, nd, map, d, r);
	return 1;
}

/* vd: an explicit _VirtualDataset and k the operand it reads p as, or
 * NULL and k p's place among the dataset inputs */
static int param_fill(LowerCtx *c, const Users *u, Node *p, const Node *vd, uint32_t k, NodeLayout *l, const int64_t *d,
                      int r)
{
	int64_t s[LAYOUT_MAX_DIM];
	if (ir_is_dataset_input(p) && ir_dataset_split(c->o, vd, k, r, s)) {
		char what[256];
		snprintf(what, sizeof what, "dataset input %s", sym_str(p->name));
		if (given_dataset_layout(c, p->loc, what, &l->out[0], s, d, r))
			return 0;
		tlay_replicated(c, &l->out[0], c->per_stage, d, r);
		return -1;
	}
	if (lower_is_weight(p)) {
		const TLay *t = first_care(u, p, 0);
		if (t && t->rank == r) {
			l->out[0] = *t;
			return 0;
		}
	} else if (!c->o->full_batch && r >= 1 && d[0] % c->per_stage == 0) {
		int32_t dev[1] = {c->per_stage};
		int8_t map[LAYOUT_MAX_DIM];
		memset(map, -1, sizeof map);
		map[0] = 0;
		tlay_set(c, &l->out[0], dev, 1, map, d, r);
		return 0;
	}
	tlay_replicated(c, &l->out[0], c->per_stage, d, r);
	return 0;
}

/* p's layout, shared with the parameters of equal layouts (a layer's
 * weights repeat them; optshard gives a sharded weight its own copy) */
static int param_layout(LowerCtx *c, const Users *u, Node *p, const Node *vd, uint32_t k)
{
	const int64_t *d = NULL;
	int r = dims_of(&p->out, &d);
	if (r < 0)
		return 0;
	NodeLayout *l = lay_scratch(0, 1);
	p->lay = l;
	int rc = param_fill(c, u, p, vd, k, l, d, r);
	p->lay = lay_keep(c, l, 1);
	return rc;
}

/* GetNext (dataset sink mode) hands out the batch the dataset inputs would
 * otherwise be: MindSpore's GetNextInfo (mindspore-ai/mindspore,
 * mindspore/ccsrc/frontend/parallel/ops_info/get_next_info.cc) splits each
 * output by the dataset strategy, dimension 0 over the stage's devices
 * unless full_batch.  Output k takes the strategy of dataset input k
 * (--dataset-strategy); its TupleGetItem users then see the local shapes.
 * -1 when a given strategy does not fit (reported). */
static int getnext_layout(LowerCtx *c, Node *n)
{
	const Shape *os = &n->out.shape;
	if (os->kind != SK_TUPLE || os->rank < 1)
		return 0;
	for (int k = 0; k < os->rank; k++)
		if (os->sub[k].kind != SK_DIMS)
			return 0;
	NodeLayout *l = lay_new(c->m, n->nargs, (uint32_t)os->rank);
	int bad = 0;
	for (int k = 0; k < os->rank; k++) {
		const int64_t *d = os->sub[k].dims;
		int r = os->sub[k].rank;
		int64_t s[LAYOUT_MAX_DIM];
		if (r <= LAYOUT_MAX_DIM && ir_dataset_split(c->o, NULL, (uint32_t)k, r, s)) {
			char what[256];
			snprintf(what, sizeof what, "GetNext (%%%d) output %d", n->local, k);
			if (!given_dataset_layout(c, n->loc, what, &l->out[k], s, d, r)) {
				tlay_replicated(c, &l->out[k], c->per_stage, d, r);
				bad = 1;
			}
		} else if (!c->o->full_batch && r >= 1 && d[0] % c->per_stage == 0) {
			int32_t dev[1] = {c->per_stage};
			int8_t map[LAYOUT_MAX_DIM];
			memset(map, -1, sizeof map);
			map[0] = 0;
			tlay_set(c, &l->out[k], dev, 1, map, d, r);
		} else {
			tlay_replicated(c, &l->out[k], c->per_stage, d, r);
		}
	}
	n->lay = l;
	return bad ? -1 : 0;
}

static void reshape_layout(LowerCtx *c, const Users *u, Node *n)
{
	const int64_t *d = NULL, *di = NULL;
	int r = dims_of(&n->out, &d);
	const Abs *ia = ir_in_abs(n, 0);
	int ri = ia ? dims_of(ia, &di) : -1;
	if (r < 0 || ri < 0 || n->nargs < 1)
		return;
	NodeLayout *l = lay_new(c->m, n->nargs, 1);
	const TLay *in = out_of(&n->args[0], 0);
	if (in && in->rank == ri)
		l->in[0] = *in;
	else
		tlay_replicated(c, &l->in[0], c->per_stage, di, ri);
	const TLay *t = first_care(u, n, 0);
	if (t && t->rank == r) {
		l->out[0] = *t;
	} else {
		/* no consumer with a layout: keep dimension 0's split when it fits */
		const TLay *x = &l->in[0];
		int8_t map[LAYOUT_MAX_DIM];
		memset(map, -1, sizeof map);
		if (x->rank >= 1 && r >= 1 && x->map[0] >= 0 && x->shape[0] == d[0])
			map[0] = x->map[0];
		tlay_set(c, &l->out[0], x->dev, x->ndev, map, d, r);
	}
	n->lay = l;
}

/* A strategy that splits something on an operator without a layout rule
 * would be printed while the operator computes on whole tensors: say so. */
static void unapplied_strategy(const Node *n)
{
	int64_t st[8][LAYOUT_MAX_DIM];
	int srk[8], ns = 0, split = 0;
	if (lower_strategy(n, st, srk, 8, &ns) <= 0)
		return;
	for (int k = 0; k < ns; k++)
		for (int i = 0; i < srk[k]; i++)
			split |= st[k][i] > 1;
	if (split)
		diag_warning_at(n->loc,
				"%s (%%%d): its strategy is not applied: sappc has no layout rule for %s, which "
				"computes on whole tensors",
				sym_str(n->prim), n->local, sym_str(n->prim));
}

static void structural_layout(LowerCtx *c, Node *n)
{
	if (n->kind != NK_CNODE || n->lay)
		return;
	if (n->callee_kind == CK_PRIM && n->op == OP_Reshape)
		return; /* done separately */
	const int64_t *d = NULL;
	int r = dims_of(&n->out, &d);
	if (ir_node_is_op(n, OP_TupleGetItem) && n->nargs >= 2) {
		int64_t k;
		const TLay *t = value_get_int(&n->args[1], &k) ? out_of(&n->args[0], (int)k) : NULL;
		if (t) {
			n->lay = lay_new(c->m, n->nargs, 1);
			n->lay->out[0] = *t;
		}
		return;
	}
	if (ir_node_is_op(n, OP_MakeTuple) || ir_node_is_op(n, OP_VirtualDataset)) {
		/* a tuple of its operands; _VirtualDataset hands the inputs'
		 * (dataset) layouts on to its TupleGetItem users */
		NodeLayout *l = lay_new(c->m, n->nargs, n->nargs);
		int any = 0;
		for (uint32_t i = 0; i < n->nargs; i++) {
			const TLay *t = out_of(&n->args[i], 0);
			if (t) {
				l->in[i] = l->out[i] = *t;
				any = 1;
			}
		}
		if (any)
			n->lay = l;
		return;
	}
	const Shape *os = &n->out.shape;
	int tuple = r < 0 && n->callee_kind == CK_PRIM && op_table[n->op].family != FAM_STRUCT && os->kind == SK_TUPLE &&
		    os->rank >= 1;
	for (int i = 0; tuple && i < os->rank; i++)
		tuple = os->sub[i].kind == SK_DIMS;
	if (r < 0 && !tuple)
		return;
	const TLay *t0 = n->nargs && !tuple ? out_of(&n->args[0], 0) : NULL;
	if (n->callee_kind == CK_PRIM && t0 && t0->rank == r &&
	    ((op_table[n->op].flags & OPF_LOOKTHROUGH) || n->op == OP_Cast || op_table[n->op].shape == SHAPE_SAME)) {
		int same = 1;
		for (int i = 0; i < r && same; i++)
			same = t0->shape[i] == d[i];
		if (same) {
			NodeLayout *l = lay_scratch(n->nargs, 1);
			l->in[0] = *t0;
			l->out[0] = *t0;
			n->lay = lay_keep(c, l, 1);
			return;
		}
	}
	if (n->callee_kind != CK_PRIM)
		return; /* calls of other graphs: not lowered */
	/* an operator without a rule computes on whole tensors: gather its
	 * tensor inputs and replicate its output (each, for a tuple) */
	unapplied_strategy(n);
	NodeLayout *l = lay_new(c->m, n->nargs, tuple ? (uint32_t)os->rank : 1);
	l->flags = LAY_OP;
	for (uint32_t i = 0; i < n->nargs; i++) {
		const Abs *a = ir_in_abs(n, i);
		const int64_t *ad;
		int ar;
		if (a && n->args[i].kind == V_NODE && (ar = dims_of(a, &ad)) >= 0 && out_of(&n->args[i], 0))
			tlay_replicated(c, &l->in[i], c->per_stage, ad, ar);
	}
	if (tuple)
		for (int i = 0; i < os->rank; i++)
			tlay_replicated(c, &l->out[i], c->per_stage, os->sub[i].dims, os->sub[i].rank);
	else
		tlay_replicated(c, &l->out[0], c->per_stage, d, r);
	l->odev = l->out[0].dev; /* [per_stage] */
	l->nodev = 1;
	n->lay = l;
}

static Value map_value(Module *m, const TLay *t)
{
	int64_t v[LAYOUT_MAX_DIM];
	for (int i = 0; i < t->rank; i++)
		v[i] = t->map[i];
	Value x = lower_ints(m, v, t->rank);
	for (uint32_t i = 0; i < x.n; i++)
		x.u.elems[i].numtype = NT_BARE;
	return x;
}

static void detail_attrs(LowerCtx *c, Node *n)
{
	NodeLayout *l = n->lay;
	Module *m = c->m;
	const NodeLayout *il = l;
	if ((op_table[n->op].family == FAM_CONCAT || n->op == OP_AddN) && n->nargs && n->args[0].kind == V_NODE &&
	    ir_node_is_op(n->args[0].u.node, OP_MakeTuple) && n->args[0].u.node->lay)
		il = n->args[0].u.node->lay;
	Value ins[64], outs[16];
	uint32_t ni = 0, no = 0;
	/* GroupedMatmul: the maps of its x and weight lists' elements (on
	 * their MakeTuples), then group_list's */
	for (uint32_t k = 0; op_table[n->op].family == FAM_GMM && k < 2 && k < n->nargs; k++) {
		const NodeLayout *tl = n->args[k].kind == V_NODE ? n->args[k].u.node->lay : NULL;
		for (uint32_t i = 0; tl && i < tl->nin && ni < 64; i++)
			if (tl->in[i].ndev)
				ins[ni++] = map_value(m, &tl->in[i]);
	}
	for (uint32_t i = 0; i < il->nin && ni < 64; i++)
		if (il->in[i].ndev)
			ins[ni++] = map_value(m, &il->in[i]);
	for (uint32_t i = 0; i < l->nout && no < 16; i++)
		outs[no++] = map_value(m, &l->out[i]);
	int64_t dv[LAYOUT_MAX_DIM + 2];
	for (int i = 0; i < l->nodev; i++)
		dv[i] = l->odev[i];
	Value dm = lower_ints(m, dv, l->nodev);
	for (uint32_t i = 0; i < dm.n; i++)
		dm.u.elems[i].numtype = NT_BARE;
	ir_attr_set(m, &n->pattrs, "inputs_tensor_map", value_tuple_of(m->arena, ins, ni));
	ir_attr_set(m, &n->pattrs, "device_matrix", dm);
	ir_attr_set(m, &n->pattrs, "outputs_tensor_map", value_tuple_of(m->arena, outs, no));
	n->has_pattrs = 1;
	lower_order_attrs(&n->pattrs);
}

int pass_layouts(Module *m, const Options *o)
{
	LowerCtx c;
	if (lower_ctx_init(&c, m, o) < 0)
		return 1;
	Graph *g = ir_entry(m);
	int bad = 0;
	if (!g || o->device_num <= 1)
		goto done; /* stand-alone: nothing to lower */
	for (uint32_t i = 0; i < g->nodes.n && !diag_too_many(); i++)
		if (lower_infer_node(&c, g->nodes.a[i]) < 0)
			bad = 1;
	if (bad)
		goto done;
	Users u;
	users_build(g, &u);
	/* the dataset inputs an explicit _VirtualDataset reads: its operand
	 * index per parameter */
	const Node *vd = NULL;
	for (uint32_t i = 0; i < g->nodes.n && !vd; i++)
		if (ir_node_is_op(g->nodes.a[i], OP_VirtualDataset))
			vd = g->nodes.a[i];
	KeyMap vdk;
	keymap_init(&vdk, sizeof(uint32_t));
	for (uint32_t k = 0; vd && k < vd->nargs; k++)
		if (vd->args[k].kind == V_NODE && vd->args[k].u.node->kind == NK_PARAM) {
			int64_t key = vd->args[k].u.node->id;
			int fresh;
			uint32_t *at = keymap_get(&vdk, &key, 1, &fresh);
			if (fresh)
				*at = k;
		}
	for (uint32_t i = 0, ord = 0; i < g->params.n; i++) {
		Node *p = g->params.a[i];
		int64_t key = p->id;
		int fresh = 0;
		uint32_t *at = vd ? keymap_get(&vdk, &key, 1, &fresh) : NULL;
		int via_vd = at && !fresh;
		if (param_layout(&c, &u, p, via_vd ? vd : NULL, via_vd ? *at : ord) < 0)
			bad = 1;
		ord += ir_is_dataset_input(p);
	}
	keymap_free(&vdk);
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		if (ir_node_is_op(n, OP_Reshape) && !n->lay)
			reshape_layout(&c, &u, n);
		else if (ir_node_is_op(n, OP_GetNext) && !n->lay) {
			if (getnext_layout(&c, n) < 0)
				bad = 1;
		} else
			structural_layout(&c, n);
	}
	users_free(&u);
	ir_clear_marks(m);
	if (o->parallel_detail)
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			if (n->lay && (n->lay->flags & LAY_OP) && lower_has_rule(n))
				detail_attrs(&c, n);
		}
done:
	lower_ctx_free(&c);
	return bad ? 1 : 0;
}

/* ------------------------------------------------------------ verify */

static int check_tlay(const Node *n, const TLay *t, const char *what)
{
	if (!t->ndev)
		return 0;
	Layout x;
	tlay_to_layout(t, &x);
	if (layout_check(&x) < 0) {
		diag_error_at(n->loc, "%s (%%%d): invalid %s layout", sym_str(n->prim), n->local, what);
		return 1;
	}
	return 0;
}

static void fmt(char *b, size_t len, const int64_t *d, int r)
{
	size_t k = (size_t)snprintf(b, len, "(");
	for (int i = 0; i < r && k < len; i++)
		k += (size_t)snprintf(b + k, len - k, i ? ", %lld" : "%lld", (long long)d[i]);
	if (k < len)
		snprintf(b + k, len - k, ")");
}

static int check_local(const Node *n)
{
	const NodeLayout *l = n->lay;
	if (!(l->flags & LAY_LOCAL) || !l->nout || !l->out[0].ndev)
		return 0;
	const Shape *s = &n->out.shape;
	if (s->kind == SK_TUPLE) {
		if (s->rank != l->nout)
			return 0;
		for (int k = 0; k < s->rank; k++) {
			int64_t want[LAYOUT_MAX_DIM];
			if (!l->out[k].ndev || s->sub[k].kind != SK_DIMS)
				continue;
			tlay_slice(&l->out[k], want);
			/* a scalar element has no dims array: nothing to compare */
			if (s->sub[k].rank != l->out[k].rank ||
			    (s->sub[k].rank && memcmp(s->sub[k].dims, want, (size_t)l->out[k].rank * sizeof *want) != 0)) {
				diag_error_at(n->loc,
				              "%s (%%%d): output %d's local shape does not follow from its layout",
				              sym_str(n->prim), n->local, k);
				return 1;
			}
		}
		return 0;
	}
	if (s->kind != SK_DIMS)
		return 0;
	int64_t want[LAYOUT_MAX_DIM];
	tlay_slice(&l->out[0], want);
	if (l->opt_rep > 1 && l->out[0].rank >= 1)
		want[0] /= l->opt_rep;
	if (s->rank != l->out[0].rank || (s->rank && memcmp(s->dims, want, (size_t)s->rank * sizeof *want) != 0)) {
		char a[160], b[160];
		fmt(a, sizeof a, s->dims, s->rank);
		fmt(b, sizeof b, want, l->out[0].rank);
		if (n->kind == NK_PARAM)
			diag_error_at(n->loc, "parameter '%s': local shape %s, but its layout gives %s",
			              sym_str(n->name), a, b);
		else
			diag_error_at(n->loc, "%s (%%%d): local output shape %s, but its layout gives %s",
			              sym_str(n->prim), n->local, a, b);
		return 1;
	}
	return 0;
}

static int splits_nothing(const TLay *t)
{
	for (int i = 0; i < t->rank; i++)
		if (t->map[i] >= 0 && t->dev[t->ndev - 1 - t->map[i]] > 1)
			return 0;
	return 1;
}

/* Layouts that differ only in how replication is spelled (D=[6] against
 * D=[2,3], or D=[3,2] against D=[2,3], both unsplit) move nothing. */
int lower_same_slices(Module *m, const TLay *a, const TLay *b)
{
	(void)m;
	/* replicated on any device matrix: the whole tensor everywhere */
	if (a->rank == b->rank && splits_nothing(a) && splits_nothing(b)) {
		int same = 1;
		for (int i = 0; i < a->rank; i++)
			same &= a->shape[i] == b->shape[i];
		if (same)
			return 1;
	}
	int64_t n = 1;
	for (int i = 0; i < a->ndev; i++)
		n *= a->dev[i];
	if (n < 1 || n > 65536)
		return 0;
	int64_t *dl = xmalloc((size_t)n * sizeof *dl);
	for (int64_t i = 0; i < n; i++)
		dl[i] = i;
	Layout f, t;
	tlay_to_layout(a, &f);
	tlay_to_layout(b, &t);
	for (int64_t r = 0; r < n; r++) {
		RedistPlan p;
		char err[128];
		int bad = redist_plan(&f, &t, dl, r, 0, 0, &p, err, sizeof err) != 0 || p.nops != 0;
		redist_plan_free(&p);
		if (bad) {
			free(dl);
			return 0;
		}
	}
	free(dl);
	return 1;
}

/* After lowering: every local shape follows from its layout, and every
 * edge into an operator joins equal layouts (redistribution is complete). */
int lower_verify(Module *m)
{
	Graph *g = ir_entry(m);
	int bad = 0;
	if (!g)
		return 0;
	for (uint32_t i = 0; i < g->params.n; i++) {
		Node *p = g->params.a[i];
		if (p->lay) {
			bad |= check_tlay(p, &p->lay->out[0], "parameter");
			bad |= check_local(p);
		}
	}
	for (uint32_t i = 0; i < g->nodes.n && !diag_too_many(); i++) {
		Node *n = g->nodes.a[i];
		const NodeLayout *l = n->lay;
		if (!l || n->dead)
			continue;
		for (uint32_t k = 0; k < l->nin; k++)
			bad |= check_tlay(n, &l->in[k], "input");
		for (uint32_t k = 0; k < l->nout; k++)
			bad |= check_tlay(n, &l->out[k], "output");
		if (!(l->flags & LAY_LOCAL))
			continue;
		bad |= check_local(n);
		if (!(l->flags & LAY_OP))
			continue;
		for (uint32_t k = 0; k < l->nin && k < n->nargs; k++) {
			if (!l->in[k].ndev || n->args[k].kind != V_NODE)
				continue;
			const Node *p = n->args[k].u.node;
			if (!p->lay || !(p->lay->flags & LAY_LOCAL) || !p->lay->nout || !p->lay->out[0].ndev)
				continue;
			if (!tlay_equal(&p->lay->out[0], &l->in[k]) &&
			    !lower_same_slices(m, &p->lay->out[0], &l->in[k])) {
				char a[160], b[160];
				tlay_format(&p->lay->out[0], a, sizeof a);
				tlay_format(&l->in[k], b, sizeof b);
				diag_error_at(n->loc,
				              "%s (%%%d): operand %u arrives with layout %s but the operator needs %s "
				              "(missing redistribution)",
				              sym_str(n->prim), n->local, k + 1, a, b);
				bad = 1;
			}
		}
	}
	return bad;
}
