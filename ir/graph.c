/* graph.c - Module / Graph / Node construction and the small queries every
 * pass uses.  Nodes are arena-allocated and never freed individually; a pass
 * that removes a node marks it dead and drops it from its graph's list. */
#include <string.h>

#include "sappc.h"

Module *ir_module_new(const char *filename)
{
	Module *m = xcalloc(1, sizeof *m);
	m->arena = arena_new();
	m->filename = filename ? arena_strndup(m->arena, filename, strlen(filename)) : "<input>";
	m->next_param = 1;
	return m;
}

void ir_module_free(Module *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		vec_free(&m->graphs.a[i]->params);
		vec_free(&m->graphs.a[i]->nodes);
	}
	vec_free(&m->graphs);
	vec_free(&m->externs);
	if (m->dims_pool) {
		keymap_free(m->dims_pool);
		free(m->dims_pool);
	}
	arena_free(m->arena);
	free(m);
}

/* what a module holds: its arena's chunks, its lists, its shape pool */
size_t ir_module_bytes(const Module *m)
{
	size_t n = sizeof *m + arena_used(m->arena) + (size_t)m->graphs.cap * sizeof *m->graphs.a +
	           (size_t)m->externs.cap * sizeof *m->externs.a;
	for (uint32_t i = 0; i < m->graphs.n; i++)
		n += (size_t)m->graphs.a[i]->params.cap * sizeof *m->graphs.a[i]->params.a +
		     (size_t)m->graphs.a[i]->nodes.cap * sizeof *m->graphs.a[i]->nodes.a;
	if (m->dims_pool)
		n += sizeof *m->dims_pool + (m->dims_pool->arena ? arena_used(m->dims_pool->arena) : 0) +
		     (size_t)m->dims_pool->cap * sizeof *m->dims_pool->slot +
		     (size_t)m->dims_pool->ecap * sizeof *m->dims_pool->ent;
	return n;
}

Graph *ir_graph_new(Module *m, Sym name)
{
	Graph *g = arena_alloc(m->arena, sizeof *g);
	g->name = name;
	g->indirect = -1;
	g->index = m->graphs.n;
	vec_push(&m->graphs, g);
	return g;
}

Graph *ir_entry(Module *m)
{
	Graph *g = m->entry ? ir_find_graph(m, m->entry) : NULL;
	return g ? g : (m->graphs.n ? m->graphs.a[0] : NULL);
}

/* (name, position) of a graph: names given twice are found by sorting */
typedef struct GraphKey {
	Sym name;
	uint32_t index;
} GraphKey;

static int graphkey_cmp(const void *pa, const void *pb)
{
	const GraphKey *a = pa, *b = pb;
	if (a->name != b->name)
		return a->name < b->name ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

int ir_check_graph_names(const Module *m)
{
	uint32_t n = m->graphs.n;
	int bad = 0;
	GraphKey *k = xmalloc((n + 1) * sizeof *k);
	for (uint32_t i = 0; i < n; i++)
		k[i] = (GraphKey){m->graphs.a[i]->name, i};
	qsort(k, n, sizeof *k, graphkey_cmp);
	for (uint32_t i = 1; i < n; i++)
		if (k[i].name == k[i - 1].name) {
			const Graph *first = m->graphs.a[k[i - 1].index], *again = m->graphs.a[k[i].index];
			diag_error_at(again->loc, "subgraph '@%s' is defined twice", sym_str(again->name));
			diag_note_at(first->loc, "first defined here");
			bad = 1;
		}
	free(k);
	return bad;
}

Graph *ir_find_graph(Module *m, Sym name)
{
	for (uint32_t i = 0; i < m->graphs.n; i++)
		if (m->graphs.a[i]->name == name)
			return m->graphs.a[i];
	return NULL;
}

Node *ir_node_new(Module *m, Graph *g, NodeKind k)
{
	Node *n = arena_alloc(m->arena, sizeof *n);
	n->id = m->next_id++;
	n->kind = (uint8_t)k;
	n->g = g;
	n->stage = -1;
	n->local = -1;
	return n;
}

Node *ir_cnode_new(Module *m, Graph *g, int op, const char *prim, uint32_t nargs)
{
	Node *n = ir_node_new(m, g, NK_CNODE);
	n->op = (uint16_t)op;
	n->callee_kind = CK_PRIM;
	if (prim) {
		n->prim = intern_cstr(prim);
	} else { /* the lowering makes a million of these: intern each name once */
		if (!m->op_syms)
			m->op_syms = arena_alloc(m->arena, OP_COUNT_ * sizeof *m->op_syms);
		if (!m->op_syms[op])
			m->op_syms[op] = intern_cstr(op_table[op].name);
		n->prim = m->op_syms[op];
	}
	n->nargs = nargs;
	n->args = nargs ? arena_alloc(m->arena, nargs * sizeof(Value)) : NULL;
	n->has_type_line = 1;
	return n;
}

void ir_graph_insert(Graph *g, uint32_t pos, Node *n)
{
	vec_grow(&g->nodes, 1);
	memmove(&g->nodes.a[pos + 1], &g->nodes.a[pos], (g->nodes.n - pos) * sizeof(Node *));
	g->nodes.a[pos] = n;
	g->nodes.n++;
	n->g = g;
}

Value *ir_attr_get_sym(const AttrList *l, Sym key)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (l->a[i].key == key)
			return &l->a[i].val;
	return NULL;
}

/* the lengths first: most keys differ in length, and a length is one
 * table read where strcmp reads the text too (the passes ask every node
 * of a rank graph for an attribute it rarely has) */
Value *ir_attr_get(const AttrList *l, const char *key)
{
	size_t kl = strlen(key);
	for (uint32_t i = 0; i < l->n; i++)
		if (sym_len(l->a[i].key) == kl && memcmp(sym_str(l->a[i].key), key, kl) == 0)
			return &l->a[i].val;
	return NULL;
}

/* a new list, never a write into l's: lists are shared (the reader's
 * nodes with equal attributes, copied nodes, a plan's clones) */
void ir_attr_set(Module *m, AttrList *l, const char *key, Value v)
{
	Value *old = ir_attr_get(l, key);
	if (old) {
		uint32_t i = 0;
		while (&l->a[i].val != old)
			i++;
		Attr *na = arena_dup(m->arena, l->a, l->n * sizeof(Attr));
		na[i].val = v;
		l->a = na;
		return;
	}
	Attr *na = arena_alloc(m->arena, (l->n + 1) * sizeof(Attr));
	if (l->n)
		memcpy(na, l->a, l->n * sizeof(Attr));
	na[l->n].key = intern_cstr(key);
	na[l->n].val = v;
	l->a = na;
	l->n++;
}

int ir_node_is_op(const Node *n, int op)
{
	return n && n->kind == NK_CNODE && n->callee_kind == CK_PRIM && n->op == op;
}

int ir_node_is_stage_zeros(const Node *n)
{
	return ir_node_is_op(n, OP_Depend) && n->nargs && n->args[0].kind != V_NODE;
}

const NodeExt *ir_node_ext(const Node *n)
{
	static const NodeExt none;
	return n->side && n->side->x ? n->side->x : &none;
}

NodeExt *ir_node_x(const Node *n)
{
	return n->side ? n->side->x : NULL;
}

NodeExt *ir_node_ext_mut(Module *m, Node *n)
{
	NodeExt *x = ir_node_x(n);
	if (!x) {
		x = arena_alloc(m->arena, sizeof *x);
		ir_node_set_x(m, n, x);
	}
	return x;
}

static int side_has_strat(const NodeSide *s)
{
	return s && (s->l.n || s->l.a || s->has_si);
}

/* a new NodeSide for n: x and the strategy l, si (NULL: none); the one
 * x's nodes share when there is no strategy, NULL when neither */
static void side_set(Module *m, Node *n, NodeExt *x, AttrList l, const StratInfo *si)
{
	if (!l.n && !l.a && !si) {
		if (!x) {
			n->side = NULL;
			return;
		}
		if (!x->side0 || x->side0->x != x || side_has_strat(x->side0)) { /* a copied NodeExt copies side0 */
			x->side0 = arena_alloc(m->arena, sizeof *x->side0);
			x->side0->x = x;
		}
		n->side = x->side0;
		return;
	}
	NodeSide *s = arena_alloc(m->arena, sizeof *s);
	s->x = x;
	s->l = l;
	if (si) {
		s->si = *si;
		s->has_si = 1;
	}
	n->side = s;
}

void ir_node_set_x(Module *m, Node *n, NodeExt *x)
{
	const NodeSide *s = n->side;
	if (s && s->x == x)
		return;
	if (side_has_strat(s))
		side_set(m, n, x, s->l, s->has_si ? &s->si : NULL);
	else
		side_set(m, n, x, (AttrList){0}, NULL);
}

void ir_node_share_strat(Module *m, Node *d, const Node *o)
{
	if (!side_has_strat(o->side) && !d->side)
		return;
	if (!ir_node_x(d) && (!o->side || !o->side->x)) {
		d->side = side_has_strat(o->side) ? o->side : NULL;
		return;
	}
	ir_node_set_strat_si(m, d, *ir_node_strat(o), ir_node_si(o));
}

/* Node keeps the type line's position in 17 bits, as a line offset from
 * the node's own line and a column (the dump's type line is the next line,
 * indented); another position goes to NodeExt */
#define TLINE_MAX 255u
#define TCOL_MAX 511u

Loc ir_node_tloc(const Node *n)
{
	if (n->tloc_ext)
		return ir_node_ext(n)->tloc;
	if (!n->tline)
		return (Loc){0, 0};
	return (Loc){n->loc.line + n->tline, n->tcol};
}

void ir_node_set_tloc(Module *m, Node *n, Loc t)
{
	n->tline = 0;
	n->tcol = 0;
	n->tloc_ext = 0;
	if (!t.line)
		return;
	if (t.line > n->loc.line && t.line - n->loc.line <= TLINE_MAX && t.col <= TCOL_MAX) {
		n->tline = t.line - n->loc.line;
		n->tcol = t.col;
		return;
	}
	ir_node_ext_mut(m, n)->tloc = t;
	n->tloc_ext = 1;
}

const AttrList *ir_node_strat(const Node *n)
{
	static const AttrList none;
	return n->side ? &n->side->l : &none;
}

const StratInfo *ir_node_si(const Node *n)
{
	return n->side && n->side->has_si ? &n->side->si : NULL;
}

void ir_node_set_strat_si(Module *m, Node *n, AttrList l, const StratInfo *si)
{
	side_set(m, n, ir_node_x(n), l, si);
}

void ir_node_set_strat(Module *m, Node *n, AttrList l)
{
	ir_node_set_strat_si(m, n, l, ir_node_si(n));
}

uint32_t ir_node_fwd_id(const Node *n)
{
	const NodeExt *x = ir_node_ext(n);
	if (!x->fwd_tab)
		return x->fwd_id;
	uint32_t k = n->id - x->fwd_tab->base;
	return k < x->fwd_tab->n ? x->fwd_tab->id[k] : 0;
}

const char *ir_node_fullname_r(const Node *n, char *buf, size_t cap)
{
	if (n->scope_kind != SCOPE_FULLNAME || !n->scope_op)
		return sym_str(n->scope);
	snprintf(buf, cap, "%s-op%u", sym_str(n->scope), n->scope_op - 1);
	return buf;
}

/* the buffer is the calling thread's: --simulate runs ranks on threads,
 * and ir_node_phase() (is_grad_mean(), a fault's test) asks from there */
const char *ir_node_fullname(const Node *n)
{
	static _Thread_local char buf[1024];
	return ir_node_fullname_r(n, buf, sizeof buf);
}

const char *ir_node_name_r(const Node *n, char *buf, size_t cap)
{
	if (!n->autoname)
		return sym_str(n->name);
	snprintf(buf, cap, "CNode_%u", n->id);
	return buf;
}

const char *ir_node_name(const Node *n)
{
	static _Thread_local char buf[32];
	return ir_node_name_r(n, buf, sizeof buf);
}

const OpInfo *ir_opinfo(const Node *n)
{
	return &op_table[n->kind == NK_CNODE && n->callee_kind == CK_PRIM ? n->op : OP_UNKNOWN];
}

Node *ir_look_through(Node *n)
{
	for (int guard = 0; n && guard < 1000000; guard++) {
		if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM ||
		    !(op_table[n->op].flags & OPF_LOOKTHROUGH) || n->nargs == 0 ||
		    n->args[0].kind != V_NODE)
			return n;
		n = n->args[0].u.node;
	}
	return n;
}

/* A pass that added nodes at the end renumbers the graph: the nodes before
 * them keep their numbers, and are only read (as ir_clear_marks). */
void ir_renumber(Graph *g)
{
	int32_t k = 0;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		sweep_prefetch(g->nodes.a, i, g->nodes.n);
		Node *n = g->nodes.a[i];
		if (n->kind == NK_CNODE) {
			if (n->local != k)
				n->local = k;
			k++;
		}
	}
}

/* Most marks are 0 already: a node is only written when its mark is set,
 * so that a sweep of a few million nodes reads them and dirties (writes
 * back) only the few it changes. */
void ir_clear_marks(Module *m)
{
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		Graph *g = m->graphs.a[i];
		for (uint32_t j = 0; j < g->params.n; j++)
			if (g->params.a[j]->mark)
				g->params.a[j]->mark = 0;
		for (uint32_t j = 0; j < g->nodes.n; j++) {
			sweep_prefetch(g->nodes.a, j, g->nodes.n);
			if (g->nodes.a[j]->mark)
				g->nodes.a[j]->mark = 0;
		}
	}
}

uint32_t ir_count_cnodes(const Module *m)
{
	uint32_t c = 0;
	for (uint32_t i = 0; i < m->graphs.n; i++)
		c += m->graphs.a[i]->nodes.n;
	return c;
}

/* MindSpore counts every node met in its topological sort: CNodes, parameters
 * and value nodes.  We count each literal operand and each primitive or graph
 * callee as one value node (shared value nodes cannot be told apart in text). */
uint32_t ir_count_nodes(const Module *m)
{
	uint32_t c = 0;
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		const Graph *g = m->graphs.a[i];
		c += g->params.n + g->nodes.n;
		for (uint32_t j = 0; j < g->nodes.n; j++) {
			sweep_prefetch(g->nodes.a, j, g->nodes.n);
			const Node *n = g->nodes.a[j];
			if (n->kind != NK_CNODE)
				continue;
			if (n->callee_kind == CK_PRIM || n->callee_kind == CK_CALL)
				c++;
			for (uint32_t k = 0; k < n->nargs; k++)
				if (n->args[k].kind != V_NODE && n->args[k].kind != V_EXTERN)
					c++;
		}
	}
	return c;
}

const Abs *ir_in_abs(const Node *n, uint32_t i)
{
	return i < n->nin_types ? &n->in_types[i] : NULL;
}

/* A pass that rebuilt a graph's node list hands it over: the graph takes
 * ownership of the array and numbers its CNodes again. */
void ir_graph_set_nodes(Graph *g, Node **a, uint32_t n, uint32_t cap)
{
	free(g->nodes.a);
	g->nodes.a = a;
	g->nodes.n = n;
	g->nodes.cap = cap;
	ir_renumber(g);
}

int ir_is_dataset_input(const Node *p)
{
	return p && p->kind == NK_PARAM && !p->has_default && !p->out.is_ref && p->out.is_tensor &&
	       p->out.shape.kind == SK_DIMS && p->g && p->g->is_entry;
}

int ir_dataset_split(const Options *o, const Node *vd, uint32_t k, int rank, int64_t *s)
{
	if (vd) {
		const Value *v = ir_attr_get(ir_node_strat(vd), "in_strategy");
		if (!v)
			v = ir_attr_get(&vd->pattrs, "in_strategy");
		if (v && (v->kind == V_TUPLE || v->kind == V_LIST) && k < v->n) {
			int64_t t[MAX_RANK];
			if (value_int_list(&v->u.elems[k], t, MAX_RANK) == rank) {
				memcpy(s, t, (size_t)rank * sizeof *s);
				return 1;
			}
			return 0;
		}
		if (v)
			return 0;
	}
	if ((int)k >= o->ds_n || o->ds_rank[k] != rank)
		return 0;
	memcpy(s, o->ds_val + (size_t)k * MAX_RANK, (size_t)rank * sizeof *s);
	return 1;
}

/* what recompute made runs in the backward though it keeps forward names
 * (training-step.md §5.2): a duplicate, the Depend delaying one, and the
 * MakeTuple of backward values that Depend waits for */
static int recompute_made(const Node *n)
{
	if (n->kind != NK_CNODE)
		return 0;
	const NodeExt *x = ir_node_x(n);
	if (x && x->cattrs.n && (ir_attr_get(&x->cattrs, "duplicated") || ir_attr_get(&x->cattrs, "recompute_depend")))
		return 1;
	if (n->op != OP_MakeTuple || !n->nargs || n->args[0].kind != V_NODE)
		return 0;
	const Node *a = n->args[0].u.node;
	return a->kind == NK_CNODE && strncmp(ir_node_fullname(a), "Gradients/", 10) == 0;
}

IrPhase ir_node_phase(const Node *n)
{
	const char *s = ir_node_fullname(n);
	if (strncmp(s, "Gradients/", 10) == 0)
		return IR_PHASE_BWD;
	if (strncmp(s, "Default/optimizer-", 18) == 0)
		return IR_PHASE_OPT;
	return recompute_made(n) ? IR_PHASE_BWD : IR_PHASE_FWD;
}
