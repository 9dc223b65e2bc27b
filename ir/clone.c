/* clone.c - a deep copy of a module, so that the driver can run the
 * pipeline a second time on what it has already read and verified (the
 * report's data-parallel plan, the plan view of the pictures, the other
 * ranks of --html) instead of reading the input again.
 *
 * The copy lives in its own arena and shares nothing with the original but
 * interned symbols, so either may be freed first.  Nodes keep their ids,
 * %N numbers and order, so a pass gives the copy the same names and the
 * same output as it gives the original.  What the sapp pass left (Node.strat,
 * Module.sapp) is copied; the lowering's Node.lay is not (a lowered module
 * is one rank's and is never copied: the copy's lay is NULL).
 */
#include <string.h>

#include "sappc.h"

typedef struct Cloner {
	const Module *from;
	Module *to;
	Node **node; /* old id -> new node */
} Cloner;

static const char *dup_str(Cloner *c, const char *s)
{
	return s ? arena_strndup(c->to->arena, s, strlen(s)) : NULL;
}

static const char **dup_lines(Cloner *c, const char **a, uint32_t n)
{
	if (!a)
		return NULL;
	const char **b = arena_alloc(c->to->arena, (n + 1) * sizeof *b);
	for (uint32_t i = 0; i < n; i++)
		b[i] = dup_str(c, a[i]);
	return b;
}

static Node *map_node(Cloner *c, const Node *n)
{
	if (!n)
		return NULL;
	if (n->id >= c->from->next_id || !c->node[n->id])
		die("clone: node %u is referenced but in no graph", n->id);
	return c->node[n->id];
}

static Value clone_value(Cloner *c, const Value *v)
{
	Value x = *v;
	switch (v->kind) {
	case V_NODE:
		x.u.node = map_node(c, v->u.node);
		break;
	case V_GRAPH:
		x.u.graph = v->u.graph ? c->to->graphs.a[v->u.graph->index] : NULL;
		break;
	case V_TUPLE:
	case V_LIST:
	case V_DICT:
	case V_CALL: {
		uint32_t ns = value_nslots(v); /* a CALL's name too */
		x.u.elems = ns ? arena_alloc(c->to->arena, ns * sizeof(Value)) : NULL;
		for (uint32_t i = 0; i < ns; i++)
			x.u.elems[i] = clone_value(c, &v->u.elems[i]);
		break;
	}
	default:
		break;
	}
	return x;
}

static Value *clone_values(Cloner *c, const Value *a, uint32_t n)
{
	if (!a)
		return NULL;
	Value *b = arena_alloc(c->to->arena, (n ? n : 1) * sizeof *b);
	for (uint32_t i = 0; i < n; i++)
		b[i] = clone_value(c, &a[i]);
	return b;
}

static AttrList clone_attrs(Cloner *c, const AttrList *l)
{
	AttrList r = {NULL, l->n};
	if (l->n) {
		r.a = arena_alloc(c->to->arena, l->n * sizeof *r.a);
		for (uint32_t i = 0; i < l->n; i++) {
			r.a[i].key = l->a[i].key;
			r.a[i].val = clone_value(c, &l->a[i].val);
		}
	}
	return r;
}

static Shape clone_shape(Cloner *c, const Shape *s)
{
	Shape r = *s;
	if (s->kind == SK_DIMS || s->kind == SK_OLD) {
		r.dims = s->rank ? arena_dup(c->to->arena, s->dims, s->rank * sizeof *s->dims) : NULL;
	} else if (s->kind == SK_TUPLE || s->kind == SK_LIST) {
		r.sub = s->rank ? arena_alloc(c->to->arena, s->rank * sizeof *r.sub) : NULL;
		for (int i = 0; i < s->rank; i++)
			r.sub[i] = clone_shape(c, &s->sub[i]);
	}
	return r;
}

static Abs clone_abs(Cloner *c, const Abs *a)
{
	Abs r = *a;
	r.shape = clone_shape(c, &a->shape);
	return r;
}

/* a node's own data; its operands are filled in once every node exists */
static Node *copy_node(Cloner *c, const Node *n, Graph *g)
{
	Node *x = arena_dup(c->to->arena, n, sizeof *n);
	x->g = g;
	x->lay = NULL;
	x->mark = 0;
	c->node[n->id] = x;
	return x;
}

static void fill_node(Cloner *c, Node *x)
{
	x->args = x->nargs ? clone_values(c, x->args, x->nargs) : NULL;
	x->pattrs = clone_attrs(c, &x->pattrs);
	if (x->in_types) {
		Abs *t = arena_alloc(c->to->arena, (x->nin_types ? x->nin_types : 1) * sizeof *t);
		for (uint32_t i = 0; i < x->nin_types; i++)
			t[i] = clone_abs(c, &x->in_types[i]);
		x->in_types = t;
	}
	x->out = clone_abs(c, &x->out);
	if (x->side) { /* a side of its own: the copy shares nothing with n */
		NodeSide *sd = arena_dup(c->to->arena, x->side, sizeof *sd);
		sd->l = clone_attrs(c, &sd->l);
		if (sd->x) {
			const NodeExt *e = sd->x;
			NodeExt *y = arena_dup(c->to->arena, e, sizeof *e);
			y->callee = clone_value(c, &e->callee);
			y->cattrs = clone_attrs(c, &e->cattrs);
			y->primal = clone_attrs(c, &e->primal);
			y->xlines = dup_lines(c, e->xlines, e->nxlines);
			y->debug = dup_lines(c, e->debug, e->ndebug);
			y->fwd_id = ir_node_fwd_id(x); /* x still has n's NodeExt */
			y->fwd_tab = NULL;
			y->side0 = NULL;
			sd->x = y;
		}
		x->side = sd;
	}
}

Module *ir_module_clone(const Module *m)
{
	Module *r = ir_module_new(m->filename);
	Cloner c = {m, r, xcalloc((size_t)m->next_id + 1, sizeof(Node *))};
	r->entry = m->entry;
	r->has_header = m->has_header;
	r->has_attrs = m->has_attrs;
	r->next_id = m->next_id;
	r->next_param = m->next_param;
	r->micro = m->micro;
	r->fragment = m->fragment;
	r->lead = dup_lines(&c, m->lead, m->nlead);
	r->nlead = m->nlead;
	r->trail = dup_lines(&c, m->trail, m->ntrail);
	r->ntrail = m->ntrail;
	if (m->sapp) {
		r->sapp = arena_dup(r->arena, m->sapp, sizeof *m->sapp);
		r->sapp->phase_why = dup_str(&c, m->sapp->phase_why);
		r->sapp->suggestion = dup_str(&c, m->sapp->suggestion);
	}
	/* the graphs and their nodes first (values point at both) ... */
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		Graph *h = ir_graph_new(r, g->name);
		*h = *g; /* then lists of its own */
		memset(&h->params, 0, sizeof h->params);
		memset(&h->nodes, 0, sizeof h->nodes);
		h->pre = dup_lines(&c, g->pre, g->npre);
		h->order = dup_lines(&c, g->order, g->norder);
		h->lead = dup_lines(&c, g->lead, g->nlead);
		vec_grow(&h->params, g->params.n);
		vec_grow(&h->nodes, g->nodes.n);
		for (uint32_t i = 0; i < g->params.n; i++)
			h->params.a[h->params.n++] = copy_node(&c, g->params.a[i], h);
		for (uint32_t i = 0; i < g->nodes.n; i++)
			h->nodes.a[h->nodes.n++] = copy_node(&c, g->nodes.a[i], h);
	}
	/* ... then everything that refers to them */
	r->attrs = clone_attrs(&c, &m->attrs);
	for (uint32_t gi = 0; gi < r->graphs.n; gi++) {
		Graph *h = r->graphs.a[gi];
		h->attrs = clone_attrs(&c, &h->attrs);
		for (uint32_t i = 0; i < h->params.n; i++)
			fill_node(&c, h->params.a[i]);
		for (uint32_t i = 0; i < h->nodes.n; i++)
			fill_node(&c, h->nodes.a[i]);
	}
	free(c.node);
	return r;
}
