/* recompute.c - the `recompute` pass: forward sub-graphs computed again in
 * the backward instead of being kept (training-step.md §5).
 *
 * pass_recompute (training-step.md §0 item 3, §5.1-§5.4)
 *   Requires: the whole training step of the rank (autodiff, gradcomm,
 *             optimizer): MindSpore duplicates in add_recomputation, after
 *             the backward and the update exist, so the pass runs last.
 *   Provides: the recompute flag of every forward CNode, decided as
 *             MindSpore's SetRecomputedAttr decides it (mindspore-ai/
 *             mindspore mindspore/ccsrc/utils/recompute_helper.cc): not for a
 *             node whose cnode attr `recompute` is false, a backward node
 *             (full name "Gradients..."), DropoutGenMask, Load, TupleGetItem,
 *             Send, Receive, a node no forward node reads or one that reads
 *             the backward (Depend's attached operand aside); otherwise for a
 *             node whose primitive attr `recompute` is true, whose cnode attr
 *             already is, or that lies in a recomputed cell and whose
 *             primitive attr is not false. A recomputed cell is a scope
 *             starting `recompute` (what Cell.recompute() does to the scope)
 *             or a cell instance matched by --recompute=PATTERN (a cell path
 *             matched as --stage matches, lower_match_cell; the full names
 *             stay as the dump gives them); the cell's outputs - nodes whose
 *             value a forward node outside the cell instance, or the Return,
 *             reads - are not recomputed (§5.1; recompute_prepare.h
 *             SetCellOutputNoRecompute). The `recompute_` scopes do not say
 *             which cell called recompute(): their deepest common scope is
 *             taken as that cell, or each numbered child of it when it has no
 *             operator of its own (every layer of a CellList recomputed,
 *             prefix_cells). A cell whose every operator is an output
 *             recomputes nothing, with a warning, as MindSpore warns. The
 *             tuple elements (TupleGetItem) of a recomputed node are
 *             recomputed with it, those of its bprop too: a TupleGetItem
 *             counts as backward only when what it reads does (IsBpropNode),
 *             so the bprop reads their duplicates. The optimizer-parallel
 *             AllGather (primitive attr recompute false, §5.4) is thus never
 *             recomputed; forward communication inside a recomputed cell is,
 *             as MindSpore recomputes it unless mp_comm_recompute=False gave
 *             it recompute: Bool(0) (the lowering turns an operator's
 *             recompute_comm_op into that attribute: comm.c, redistribute.c).
 *             Then, as recompute.cc InsertRecomputedNodes: each maximal
 *             connected set of recomputed nodes (through operands and users,
 *             not through UpdateState) that holds a node read by the backward
 *             gets `recompute_sub_graph: U64(k)`; its origins - the nodes the
 *             backward reads and their recomputed operands - are duplicated
 *             (same primitive, attributes and scope directory, the next -opN,
 *             the origin's abstract; `micro` and
 *             `forward_comm_node_unique_id` primal attributes kept) with
 *             cnode attrs duplicated, need_cse_after_recompute,
 *             recompute_sub_graph and a `recompute_id: I64(n)` shared with
 *             the origin. A duplicate with no duplicated operand reads its
 *             first operand through Depend(x, MakeTuple(...)) with
 *             `recompute_depend: Bool(1)`, so that it waits for the backward
 *             inputs of the first target (an UpdateState operand becomes the
 *             monad U). Backward nodes reading an origin (targets) read its
 *             duplicate and get `target_grad: Bool(1)`; every backward node
 *             of a forward node in a sub-graph gets its recompute_sub_graph.
 *             Nodes whose full name starts with `recompute` (or that
 *             --recompute matched) get need_cse_after_recompute. The
 *             duplicates go just before the first target, so no forward value
 *             of an origin is live across the step any more.
 *             checkpoint: Bool(1) (§5.3): MindSpore puts it on every CNode
 *             it does not recompute, recompute or not, but the validate dumps
 *             the samples follow do not show it. sappc prints it only when
 *             the graph has recompute (some node is recomputed), so that a
 *             step without recompute keeps the older dumps' form.
 *   Simplified: the Depend waits for the first target's backward operands
 *             that no target or origin reaches (recompute_helper.cc
 *             GetFirstTargetInputs looks further into the recomputed
 *             forward's bprop nodes); with none before the first target no
 *             Depend is made (MindSpore makes one over an empty MakeTuple and
 *             warns). The fusion id shift of a recomputed zero3 AllGather is
 *             not modelled (sappc has no zero3).
 *   Errors:   --recompute on an inference graph.  A --recompute pattern
 *             matching no operator is refused before the passes run
 *             (recompute_check_patterns, called by the driver on the whole
 *             graph: a pipeline stage may hold none of a cell).
 *   Invalidates: nothing; node marks are cleared.
 * Linear in the graph, except the search for the Depend's inputs when the
 * first target has none (bounded by the backward between the targets).
 */
#include <string.h>

#include "train.h"

typedef struct Rc {
	Module *m;
	const Options *o;
	Graph *g;
	LowerCtx lc;
	uint32_t n;             /* entry graph nodes (Return included) */
	uint32_t *uoff, *users; /* users of node i: users[uoff[i] .. uoff[i+1]) */
	uint8_t *bp, *bpn, *rec, *ckpt, *scoped, *gin, *fwd_out, *out_of_cell;
	Sym *cell;                   /* the recomputed cell instance of node i, 0 none */
	int32_t *sg;                 /* sub-graph of node i, -1 none */
	uint32_t *orig, *tgt, *memo; /* stamps: sub-graph + 1 */
	uint8_t *memo_val;
	int64_t *rid; /* recompute_id of an origin, 0 none */
	Node **dup;   /* an origin's duplicate */
	uint8_t *is_target;
	int32_t *sg_of_id; /* by module id: the sub-graph of a forward node */
	uint32_t nid;
	int64_t next_rid;
	/* emitted nodes and the position they go before */
	Vec(Node *) emit;
	Vec(uint32_t) at;
	Node tmpl; /* Default/x: the Depend and MakeTuple scope */
	Value monad;
	Abs monad_abs;
} Rc;

static uint32_t pos(const Rc *r, const Node *n)
{
	return n && n->g == r->g && n->mark ? n->mark - 1 : UINT32_MAX;
}

static Node *arg_node(const Node *n, uint32_t k)
{
	return k < n->nargs && n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
}

/* operand k of n carries an order, not a value */
static int order_edge(const Node *n, uint32_t k)
{
	return ir_node_is_op(n, OP_UpdateState) || (ir_node_is_op(n, OP_Depend) && k >= 1);
}

static int starts(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* -1 absent, 0 false, 1 true */
static int flag_attr(const AttrList *l, const char *key)
{
	const Value *v = ir_attr_get(l, key);
	int b;
	return v && value_truthy(v, &b) ? b : -1;
}

/* the recomputed cell instance of n from the --recompute rules (longest
 * match, as --stage) or from the `recompute` scope prefix; 0: none */
static Sym cell_of(const Rc *r, const Node *n)
{
	if (n->kind != NK_CNODE || !n->scope || n->scope_kind != SCOPE_FULLNAME)
		return 0;
	const char *s = ir_node_fullname(n);
	int best = 0;
	size_t end = 0;
	for (int i = 0; i < r->o->nrecompute_rules; i++) {
		const char *pat = r->o->recompute_rules[i];
		size_t e = 0;
		int k = lower_match_cell(s, pat, strlen(pat), &e);
		if (k > best) {
			best = k;
			end = e;
		}
	}
	if (best)
		return intern(s, end);
	if (starts(s, "recompute"))
		return lower_sym("recompute_");
	return 0;
}

static int cannot_recompute(const Node *n)
{
	return n->callee_kind != CK_PRIM || n->prim == lower_sym("DropoutGenMask") || n->op == OP_Load ||
	       n->op == OP_TupleGetItem || n->op == OP_Send || n->op == OP_Receive;
}

/* ------------------------------------------------------------ analysis */

static void index_graph(Rc *r)
{
	Graph *g = r->g;
	r->n = g->nodes.n;
	ir_clear_marks(r->m);
	for (uint32_t i = 0; i < r->n; i++)
		g->nodes.a[i]->mark = i + 1;
	r->uoff = xcalloc(r->n + 1, sizeof *r->uoff);
	for (uint32_t i = 0; i < r->n; i++) {
		Node *u = g->nodes.a[i];
		for (uint32_t k = 0; k < u->nargs; k++) {
			uint32_t p = pos(r, arg_node(u, k));
			if (p != UINT32_MAX)
				r->uoff[p + 1]++;
		}
	}
	for (uint32_t i = 0; i < r->n; i++)
		r->uoff[i + 1] += r->uoff[i];
	r->users = xmalloc((r->uoff[r->n] + 1) * sizeof *r->users);
	uint32_t *fill = xmalloc((r->n + 1) * sizeof *fill);
	memcpy(fill, r->uoff, (r->n + 1) * sizeof *fill);
	for (uint32_t i = 0; i < r->n; i++) {
		Node *u = g->nodes.a[i];
		for (uint32_t k = 0; k < u->nargs; k++) {
			uint32_t p = pos(r, arg_node(u, k));
			if (p != UINT32_MAX)
				r->users[fill[p]++] = i;
		}
	}
	free(fill);
	/* backward nodes (IsBpropNode): named "Gradients..."; a TupleGetItem
	 * is one when what it reads is, so the bprop's TupleGetItems of a
	 * forward tuple are not (bpn: by the name alone) */
	r->bp = xcalloc(r->n + 1, 1);
	r->bpn = xcalloc(r->n + 1, 1);
	for (uint32_t i = 0; i < r->n; i++) {
		Node *n = g->nodes.a[i];
		if (n->kind != NK_CNODE)
			continue;
		uint32_t p = pos(r, arg_node(n, 0));
		r->bpn[i] = starts(ir_node_fullname(n), "Gradients");
		if (ir_node_is_op(n, OP_TupleGetItem))
			r->bp[i] = p != UINT32_MAX && r->bp[p];
		else
			r->bp[i] = r->bpn[i];
	}
}

/* length of the directory of full name s (up to its last '/') */
static size_t dir_len(const char *s)
{
	const char *slash = strrchr(s, '/');
	return slash ? (size_t)(slash - s) : 0;
}

/* The cells of the `recompute` scopes (cell_of gave them "recompute_"):
 * the scope says that some cell called recompute(), not which.  Their
 * directories' deepest common scope A is that cell, unless A holds no
 * operator of its own and every scope below it goes through a numbered
 * child (a CellList or SequentialCell: "0-Block", "1-Block"), the usual
 * recompute() of every layer: then each child is a cell, whose output the
 * next layer reads and the backward keeps. */
static void prefix_cells(Rc *r)
{
	Sym mark = lower_sym("recompute_");
	char *a = NULL; /* A, as the first node's directory cut down */
	size_t al = 0;
	for (uint32_t i = 0; i < r->n; i++) {
		if (r->cell[i] != mark)
			continue;
		const char *s = ir_node_fullname(r->g->nodes.a[i]);
		size_t dl = dir_len(s);
		if (!a) {
			a = xmalloc(dl + 1);
			memcpy(a, s, dl);
			a[al = dl] = 0;
			continue;
		}
		size_t k = 0; /* the common segments */
		while (k < al && k < dl && a[k] == s[k])
			k++;
		if (k == al && (k == dl || s[k] == '/'))
			continue; /* A is a scope of this directory */
		if (k == dl && a[k] == '/') {
			al = k; /* this directory is a scope of A */
		} else {
			while (k > 0 && a[k - 1] != '/')
				k--;
			al = k ? k - 1 : 0;
		}
		a[al] = 0;
	}
	if (!a)
		return;
	int split = 1;
	for (uint32_t i = 0; i < r->n && split; i++) {
		if (r->cell[i] != mark)
			continue;
		const char *s = ir_node_fullname(r->g->nodes.a[i]);
		split = dir_len(s) > al && s[al] == '/' && s[al + 1] >= '0' && s[al + 1] <= '9';
	}
	Sym whole = intern(a, al);
	for (uint32_t i = 0; i < r->n; i++) {
		if (r->cell[i] != mark)
			continue;
		if (!split) {
			r->cell[i] = whole;
			continue;
		}
		const char *s = ir_node_fullname(r->g->nodes.a[i]);
		const char *e = strchr(s + al + 1, '/');
		r->cell[i] = intern(s, (size_t)(e - s));
	}
	free(a);
}

/* the cells, their outputs, and the warning for a cell of outputs only */
static void find_cells(Rc *r)
{
	Graph *g = r->g;
	r->cell = xcalloc(r->n + 1, sizeof *r->cell);
	r->scoped = xcalloc(r->n + 1, 1);
	r->out_of_cell = xcalloc(r->n + 1, 1);
	for (uint32_t i = 0; i < r->n; i++)
		if (!r->bpn[i])
			r->cell[i] = cell_of(r, g->nodes.a[i]);
	prefix_cells(r);
	for (uint32_t i = 0; i < r->n; i++) {
		Node *n = g->nodes.a[i];
		uint32_t p = pos(r, arg_node(n, 0));
		r->scoped[i] = r->cell[i] || (ir_node_is_op(n, OP_Depend) && p != UINT32_MAX && r->cell[p]);
		if (!r->cell[i])
			continue;
		for (uint32_t u = r->uoff[i]; u < r->uoff[i + 1] && !r->out_of_cell[i]; u++) {
			Node *un = g->nodes.a[r->users[u]];
			if (r->bpn[r->users[u]])
				continue;
			for (uint32_t k = 0; k < un->nargs; k++)
				if (arg_node(un, k) == n && !order_edge(un, k) &&
				    (un->kind == NK_RETURN || r->cell[r->users[u]] != r->cell[i]))
					r->out_of_cell[i] = 1;
		}
	}
	/* a cell of outputs only (operators, not Load and the structural ops) */
	typedef struct {
		Sym cell;
		uint32_t ops, outs, first;
	} CellCount;
	Vec(CellCount) cc = {0};
	for (uint32_t i = 0; i < r->n; i++) {
		Node *n = g->nodes.a[i];
		if (!r->cell[i] || n->callee_kind != CK_PRIM || ir_opinfo(n)->family == FAM_STRUCT)
			continue;
		uint32_t k = 0;
		while (k < cc.n && cc.a[k].cell != r->cell[i])
			k++;
		if (k == cc.n)
			vec_push(&cc, ((CellCount){r->cell[i], 0, 0, i}));
		cc.a[k].ops++;
		cc.a[k].outs += r->out_of_cell[i];
	}
	for (uint32_t k = 0; k < cc.n; k++)
		if (cc.a[k].ops && cc.a[k].ops == cc.a[k].outs) {
			Node *f = g->nodes.a[cc.a[k].first];
			diag_warning_at(f->loc,
			                "every operator of the recomputed cell '%s' is an output of the cell: nothing "
			                "in it is recomputed",
			                sym_str(cc.a[k].cell));
		}
	vec_free(&cc);
}

/* SetRecomputedAttr: which nodes are recomputed (rec) and which get
 * checkpoint (ckpt); 1 when some node is recomputed */
static int decide(Rc *r)
{
	Graph *g = r->g;
	r->rec = xcalloc(r->n + 1, 1);
	r->ckpt = xcalloc(r->n + 1, 1);
	r->gin = xcalloc(r->n + 1, 1);
	r->fwd_out = xcalloc(r->n + 1, 1);
	for (uint32_t i = 0; i < r->n; i++) {
		Node *n = g->nodes.a[i];
		for (uint32_t k = 0; k < n->nargs; k++) {
			uint32_t p = pos(r, arg_node(n, k));
			if (p == UINT32_MAX || (ir_node_is_op(n, OP_Depend) && k == 1))
				continue;
			if (r->bp[p] || r->gin[p])
				r->gin[i] = 1;
		}
		for (uint32_t u = r->uoff[i]; u < r->uoff[i + 1]; u++)
			if (!r->bp[r->users[u]])
				r->fwd_out[i] = 1;
	}
	for (uint32_t i = 0; i < r->n; i++) {
		Node *n = g->nodes.a[i];
		if (n->kind != NK_CNODE)
			continue;
		int ca = flag_attr(&ir_node_ext(n)->cattrs, "recompute");
		if (ca == 1 && !r->bp[i])
			r->rec[i] = 1; /* set before (a dump of MindSpore's own pass) */
		/* a cell output is set not to be recomputed before (SetCellOutputNoRecompute) */
		if (ca == 0 || (r->cell[i] && r->out_of_cell[i]) || r->bp[i] || cannot_recompute(n) || !r->fwd_out[i] ||
		    r->gin[i]) {
			r->ckpt[i] = 1;
			continue;
		}
		int pv = flag_attr(&n->pattrs, "recompute");
		if ((r->scoped[i] && pv != 0) || pv == 1)
			r->rec[i] = 1;
		if (!r->rec[i]) {
			r->ckpt[i] = 1;
			continue;
		}
		for (uint32_t u = r->uoff[i]; u < r->uoff[i + 1]; u++)
			if (ir_node_is_op(g->nodes.a[r->users[u]], OP_TupleGetItem))
				r->rec[r->users[u]] = 1;
	}
	int any = 0;
	for (uint32_t i = 0; i < r->n && !any; i++)
		any = r->rec[i];
	return any;
}

/* IsCandidateRecomputedNode */
static int candidate(const Rc *r, uint32_t i)
{
	return r->rec[i] && (!r->bp[i] || ir_node_is_op(r->g->nodes.a[i], OP_TupleGetItem));
}

/* ------------------------------------------------------------ duplication */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* whether backward node i reaches an origin or a target of sub-graph s
 * through backward nodes (HasTargetOrRecomputeInputs); nothing before the
 * first target p0 does */
static int reaches(Rc *r, uint32_t i, uint32_t s, uint32_t p0)
{
	Vec(uint32_t) st = {0};
	vec_push(&st, i);
	while (st.n) {
		uint32_t x = st.a[st.n - 1];
		if (r->memo[x] == s + 1) {
			st.n--;
			continue;
		}
		if (r->orig[x] == s + 1 || r->tgt[x] == s + 1) {
			r->memo[x] = s + 1, r->memo_val[x] = 1;
			st.n--;
			continue;
		}
		if (!r->bp[x] || x < p0) {
			r->memo[x] = s + 1, r->memo_val[x] = 0;
			st.n--;
			continue;
		}
		Node *n = r->g->nodes.a[x];
		int pending = 0, hit = 0;
		for (uint32_t k = 0; k < n->nargs && !hit; k++) {
			uint32_t p = pos(r, arg_node(n, k));
			if (p == UINT32_MAX)
				continue;
			if (r->memo[p] != s + 1) {
				vec_push(&st, p);
				pending = 1;
			} else if (r->memo_val[p]) {
				hit = 1;
			}
		}
		if (hit || !pending) {
			r->memo[x] = s + 1, r->memo_val[x] = (uint8_t)hit;
			st.n--;
		}
	}
	vec_free(&st);
	return r->memo_val[i];
}

static void put_emit(Rc *r, Node *n, uint32_t before)
{
	vec_push(&r->emit, n);
	vec_push(&r->at, before);
}

static NodeExt *fresh_ext(Rc *r, Node *n)
{
	NodeExt *x = arena_alloc(r->m->arena, sizeof *x);
	ir_node_set_x(r->m, n, x);
	return x;
}

/* "Tuple[T]", "Tuple[T*n]" or "Tuple[T1, T2, ...]" of the elements' types */
static Sym tuple_tstr(const Node *const *e, uint32_t n)
{
	int same = 1;
	for (uint32_t k = 1; k < n; k++)
		same &= e[k]->out.tstr == e[0]->out.tstr;
	size_t cap = 32;
	for (uint32_t k = 0; k < n; k++)
		cap += sym_len(e[k]->out.tstr) + 2;
	char *buf = xmalloc(cap);
	size_t l = (size_t)snprintf(buf, cap, "Tuple[");
	if (same)
		l += (size_t)snprintf(buf + l, cap - l, n > 1 ? "%s*%u" : "%s", sym_str(e[0]->out.tstr), n);
	else
		for (uint32_t k = 0; k < n; k++)
			l += (size_t)snprintf(buf + l, cap - l, k ? ", %s" : "%s", sym_str(e[k]->out.tstr));
	snprintf(buf + l, cap - l, "]");
	Sym s = intern_cstr(buf);
	free(buf);
	return s;
}

/* the duplicate of origin i (its duplicated operands exist: origins are
 * taken in graph order) */
static Node *duplicate(Rc *r, uint32_t i, uint32_t s, const Node *const *fti, uint32_t nfti, uint32_t before)
{
	Module *m = r->m;
	Node *o = r->g->nodes.a[i];
	Node *d = ir_cnode_new(m, r->g, o->op, sym_str(o->prim), o->nargs);
	d->primfunc = o->primfunc;
	d->instance = o->instance;
	d->pattrs = o->pattrs;
	d->has_pattrs = o->has_pattrs;
	ir_node_share_strat(m, d, o);
	d->has_strat = o->has_strat;
	d->out = o->out;
	d->loc = o->loc;
	d->stage = -1; /* with the backward, which has no stage (train.c) */
	d->lay = o->lay; /* the same tensor, computed again */
	d->autoname = 1;
	d->nin_types = o->nin_types;
	d->in_types = o->nin_types ? arena_dup(m->arena, o->in_types, o->nin_types * sizeof(Abs)) : NULL;
	lower_set_fullname(&r->lc, d, o);
	int has_dup = 0;
	for (uint32_t k = 0; k < o->nargs; k++) {
		Node *a = arg_node(o, k);
		uint32_t p = pos(r, a);
		d->args[k] = o->args[k];
		if (p != UINT32_MAX && r->orig[p] == s + 1) {
			d->args[k] = value_node(r->dup[p]);
			has_dup = 1;
		} else if (a && ir_node_is_op(a, OP_UpdateState)) {
			d->args[k] = r->monad;
			if (k < d->nin_types)
				d->in_types[k] = r->monad_abs;
		}
	}
	if (!has_dup && o->nargs && nfti) {
		/* Depend(x, MakeTuple(first target's inputs)): wait for the backward */
		Node *mt = ir_cnode_new(m, r->g, OP_MakeTuple, NULL, nfti);
		mt->autoname = 1;
		mt->nin_types = nfti;
		mt->in_types = arena_alloc(m->arena, nfti * sizeof(Abs));
		lower_set_fullname(&r->lc, mt, &r->tmpl);
		Abs ta = {0};
		ta.tstr = tuple_tstr(fti, nfti);
		ta.shape.kind = SK_TUPLE;
		ta.shape.rank = (uint8_t)(nfti < 255 ? nfti : 255);
		ta.shape.sub = arena_alloc(m->arena, nfti * sizeof(Shape));
		for (uint32_t k = 0; k < nfti; k++) {
			mt->args[k] = value_node((Node *)fti[k]);
			mt->in_types[k] = fti[k]->out;
			if (k < ta.shape.rank)
				ta.shape.sub[k] = fti[k]->out.shape;
		}
		mt->out = ta;
		Node *dep = ir_cnode_new(m, r->g, OP_Depend, NULL, 2);
		dep->autoname = 1;
		dep->nin_types = 2;
		dep->in_types = arena_alloc(m->arena, 2 * sizeof(Abs));
		lower_set_fullname(&r->lc, dep, &r->tmpl);
		dep->args[0] = d->args[0];
		dep->in_types[0] = d->nin_types ? d->in_types[0] : o->out;
		dep->args[1] = value_node(mt);
		dep->in_types[1] = ta;
		dep->out = dep->in_types[0];
		dep->out.has_value = 0;
		dep->lay = NULL;
		NodeExt *dx = fresh_ext(r, dep);
		ir_attr_set(m, &dx->cattrs, "recompute_depend", value_bool(1));
		put_emit(r, mt, before);
		put_emit(r, dep, before);
		d->args[0] = value_node(dep);
	}
	NodeExt *x = fresh_ext(r, d);
	const NodeExt *ox = ir_node_ext(o);
	ir_attr_set(m, &x->cattrs, "duplicated", value_bool(1));
	ir_attr_set(m, &x->cattrs, "need_cse_after_recompute", value_bool(1));
	ir_attr_set(m, &x->cattrs, "recompute_sub_graph", value_int(s, NT_U64));
	r->rid[i] = ++r->next_rid;
	ir_attr_set(m, &x->cattrs, "recompute_id", value_int(r->rid[i], NT_I64));
	lower_order_attrs(&x->cattrs);
	static const char *const keep[] = {"micro", "forward_comm_node_unique_id"};
	for (int k = 0; k < 2; k++) {
		const Value *v = ir_attr_get(&ox->primal, keep[k]);
		if (v)
			ir_attr_set(m, &x->primal, keep[k], *v);
	}
	put_emit(r, d, before);
	return d;
}

/* one maximal recomputed sub-graph from candidate c: ids, origins,
 * targets, duplicates */
static void sub_graph(Rc *r, uint32_t c, uint32_t s)
{
	Graph *g = r->g;
	Vec(uint32_t) q = {0}, sub = {0}, tg = {0};
	vec_push(&q, c);
	r->sg[c] = (int32_t)s;
	while (q.n) { /* GetMaxSubGraph, inputs and outputs */
		uint32_t x = q.a[--q.n];
		vec_push(&sub, x);
		Node *n = g->nodes.a[x];
		if (ir_node_is_op(n, OP_UpdateState))
			continue;
		for (uint32_t k = 0; k < n->nargs; k++) {
			uint32_t p = pos(r, arg_node(n, k));
			if (p != UINT32_MAX && r->sg[p] < 0 && candidate(r, p)) {
				r->sg[p] = (int32_t)s;
				vec_push(&q, p);
			}
		}
		for (uint32_t u = r->uoff[x]; u < r->uoff[x + 1]; u++) {
			uint32_t p = r->users[u];
			if (r->sg[p] < 0 && candidate(r, p)) {
				r->sg[p] = (int32_t)s;
				vec_push(&q, p);
			}
		}
	}
	/* origins read by the backward, and their targets */
	for (uint32_t k = 0; k < sub.n; k++) {
		uint32_t x = sub.a[k];
		for (uint32_t u = r->uoff[x]; u < r->uoff[x + 1]; u++) {
			uint32_t p = r->users[u];
			if (!r->bp[p] || ir_node_is_op(g->nodes.a[p], OP_TupleGetItem))
				continue;
			if (r->tgt[p] != s + 1) {
				r->tgt[p] = s + 1;
				vec_push(&tg, p);
			}
			if (r->orig[x] != s + 1) {
				r->orig[x] = s + 1;
				vec_push(&q, x);
			}
		}
	}
	/* ... and their recomputed operands (GetMaxSubGraph, inputs only) */
	Vec(uint32_t) org = {0};
	while (q.n) {
		uint32_t x = q.a[--q.n];
		vec_push(&org, x);
		Node *n = g->nodes.a[x];
		if (ir_node_is_op(n, OP_UpdateState))
			continue;
		for (uint32_t k = 0; k < n->nargs; k++) {
			uint32_t p = pos(r, arg_node(n, k));
			if (p != UINT32_MAX && r->orig[p] != s + 1 && candidate(r, p)) {
				r->orig[p] = s + 1;
				vec_push(&q, p);
			}
		}
	}
	qsort(tg.a, tg.n, sizeof *tg.a, cmp_u32);
	qsort(org.a, org.n, sizeof *org.a, cmp_u32);
	uint32_t p0 = tg.n ? tg.a[0] : 0;
	/* the backward inputs of the first target that has some (GetFirstTargetInputs) */
	Vec(Node *) fti = {0};
	for (uint32_t t = 0; t < tg.n && !fti.n; t++) {
		Node *tn = g->nodes.a[tg.a[t]];
		for (uint32_t k = 0; k < tn->nargs; k++) {
			Node *a = arg_node(tn, k);
			uint32_t p = pos(r, a);
			if (p == UINT32_MAX || a->kind != NK_CNODE || !r->bp[p] || p >= p0 || reaches(r, p, s, p0))
				continue;
			int seen = 0;
			for (uint32_t j = 0; j < fti.n; j++)
				seen |= fti.a[j] == a;
			if (!seen)
				vec_push(&fti, a);
		}
	}
	for (uint32_t k = 0; k < org.n; k++)
		r->dup[org.a[k]] = duplicate(r, org.a[k], s, (const Node *const *)fti.a, fti.n, p0);
	/* the targets read the duplicates */
	for (uint32_t t = 0; t < tg.n; t++) {
		Node *tn = g->nodes.a[tg.a[t]];
		Value *args = arena_dup(r->m->arena, tn->args, tn->nargs * sizeof(Value));
		for (uint32_t k = 0; k < tn->nargs; k++) {
			uint32_t p = pos(r, arg_node(tn, k));
			if (p != UINT32_MAX && r->orig[p] == s + 1)
				args[k] = value_node(r->dup[p]);
		}
		tn->args = args;
		r->is_target[tg.a[t]] = 1;
	}
	vec_free(&q);
	vec_free(&sub);
	vec_free(&tg);
	vec_free(&org);
	vec_free(&fti);
}

/* the cnode attributes of the nodes that were there, in the order
 * MindSpore adds them (the printer's order follows from it) */
static void set_attrs(Rc *r)
{
	Module *m = r->m;
	for (uint32_t i = 0; i < r->n; i++) {
		Node *n = r->g->nodes.a[i];
		if (n->kind != NK_CNODE)
			continue;
		int32_t bsg = -1; /* a backward node of a forward node in a sub-graph */
		const NodeExt *ox = ir_node_ext(n);
		uint32_t fid = ox->has_fwd ? ir_node_fwd_id(n) : UINT32_MAX;
		if (fid < r->nid)
			bsg = r->sg_of_id[fid];
		int cse = r->cell[i] != 0;
		if (!r->rec[i] && !r->ckpt[i] && !r->is_target[i] && bsg < 0 && !cse && r->sg[i] < 0)
			continue;
		/* a node's own copy: backward nodes share theirs (train.h) */
		NodeExt *x = arena_alloc(m->arena, sizeof *x);
		*x = *ox;
		if (x->cattrs.n)
			x->cattrs.a = arena_dup(m->arena, x->cattrs.a, x->cattrs.n * sizeof(Attr));
		ir_node_set_x(m, n, x);
		if (r->rec[i])
			ir_attr_set(m, &x->cattrs, "recompute", value_bool(1));
		if (r->ckpt[i])
			ir_attr_set(m, &x->cattrs, "checkpoint", value_bool(1));
		if (r->is_target[i])
			ir_attr_set(m, &x->cattrs, "target_grad", value_bool(1));
		if (r->sg[i] >= 0)
			ir_attr_set(m, &x->cattrs, "recompute_sub_graph", value_int(r->sg[i], NT_U64));
		else if (bsg >= 0)
			ir_attr_set(m, &x->cattrs, "recompute_sub_graph", value_int(bsg, NT_U64));
		if (r->rid[i])
			ir_attr_set(m, &x->cattrs, "recompute_id", value_int(r->rid[i], NT_I64));
		if (cse)
			ir_attr_set(m, &x->cattrs, "need_cse_after_recompute", value_bool(1));
		lower_order_attrs(&x->cattrs);
	}
}

/* the emitted nodes before the positions they were made for */
static void splice(Rc *r)
{
	Graph *g = r->g;
	Vec(Node *) out = {0};
	vec_grow(&out, g->nodes.n + r->emit.n);
	/* emit is in order of making; positions are sorted stably */
	uint32_t *ord = xmalloc((r->emit.n + 1) * sizeof *ord);
	for (uint32_t k = 0; k < r->emit.n; k++)
		ord[k] = k;
	for (uint32_t k = 1; k < r->emit.n; k++) { /* insertion sort: few sub-graphs out of order */
		uint32_t v = ord[k], j = k;
		while (j > 0 && r->at.a[ord[j - 1]] > r->at.a[v]) {
			ord[j] = ord[j - 1];
			j--;
		}
		ord[j] = v;
	}
	uint32_t e = 0;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		while (e < r->emit.n && r->at.a[ord[e]] == i)
			out.a[out.n++] = r->emit.a[ord[e++]];
		out.a[out.n++] = g->nodes.a[i];
	}
	free(ord);
	ir_graph_set_nodes(g, out.a, out.n, out.cap);
}

static void rc_free(Rc *r)
{
	free(r->uoff);
	free(r->users);
	free(r->bp);
	free(r->bpn);
	free(r->rec);
	free(r->ckpt);
	free(r->scoped);
	free(r->gin);
	free(r->fwd_out);
	free(r->out_of_cell);
	free(r->cell);
	free(r->sg);
	free(r->orig);
	free(r->tgt);
	free(r->memo);
	free(r->memo_val);
	free(r->rid);
	free(r->dup);
	free(r->is_target);
	free(r->sg_of_id);
	vec_free(&r->emit);
	vec_free(&r->at);
	lower_ctx_free(&r->lc);
}

int recompute_check_patterns(const Module *m, const Options *o)
{
	int bad = 0;
	for (int i = 0; i < o->nrecompute_rules; i++) {
		const char *pat = o->recompute_rules[i];
		int hit = 0;
		for (uint32_t gi = 0; gi < m->graphs.n && !hit; gi++) {
			const Graph *g = m->graphs.a[gi];
			for (uint32_t k = 0; k < g->nodes.n && !hit; k++) {
				const Node *n = g->nodes.a[k];
				hit = n->kind == NK_CNODE && n->scope && n->scope_kind == SCOPE_FULLNAME &&
				      lower_match_cell(ir_node_fullname(n), pat, strlen(pat), NULL);
			}
		}
		if (!hit) {
			diag_error("--recompute=%s matches no operator of the graph (a cell path such as "
			           "_backbone.layer1, matched against the names before '-' of the scope segments)",
			           pat);
			bad = 1;
		}
	}
	return bad;
}

/* whether anything may be recomputed: a --recompute rule, a recompute
 * attribute set, a `recompute` scope.  A step without any (most) leaves
 * the pass before it indexes two million nodes (the training step's peak
 * memory is the bench's target, testsuite/bench/train.sh) */
/* 1 when l has key set true; l_seen: the last list found without it
 * (nodes share their lists: the lowering's clones, the bprops' interned
 * ones), so a run of equal lists is read once */
static int flag_sym(const AttrList *l, Sym key, AttrList *l_seen)
{
	if (!l->n || (l->a == l_seen->a && l->n == l_seen->n))
		return 0;
	const Value *v = ir_attr_get_sym(l, key);
	int b;
	if (v && value_truthy(v, &b) && b == 1)
		return 1;
	*l_seen = *l;
	return 0;
}

/* Is anything to be recomputed?  Asked of every node of the step, so the
 * key is compared as its Sym (attribute keys are interned, one Sym per
 * text), not as text, and the scopes by their first bytes. */
static int any_candidate(const Graph *g, const Options *o)
{
	if (o->nrecompute_rules)
		return 1;
	Sym key = lower_sym("recompute");
	AttrList seen_p = {0}, seen_c = {0};
	Sym seen_scope = 0;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		sweep_prefetch(g->nodes.a, i, g->nodes.n);
		const Node *n = g->nodes.a[i];
		if (n->kind != NK_CNODE)
			continue;
		if (flag_sym(&n->pattrs, key, &seen_p) || flag_sym(&ir_node_ext(n)->cattrs, key, &seen_c))
			return 1;
		if (n->scope && n->scope_kind == SCOPE_FULLNAME && n->scope != seen_scope) {
			if (sym_len(n->scope) >= 9 && memcmp(sym_str(n->scope), "recompute", 9) == 0)
				return 1;
			seen_scope = n->scope;
		}
	}
	return 0;
}

int pass_recompute(Module *m, const Options *o)
{
	Graph *g = ir_entry(m);
	if (!m->train) {
		if (o->nrecompute_rules && g && !train_wanted(m, o)) {
			diag_error_at(g->loc,
			              "--recompute needs a training step, but the graph is inference (%s; "
			              "--phase=train forces training)",
			              m->sapp && m->sapp->phase_why ? m->sapp->phase_why : "phase predict");
			return 1;
		}
		return 0;
	}
	if (!g || !g->nodes.n || !any_candidate(g, o))
		return 0;
	Rc r;
	memset(&r, 0, sizeof r);
	r.m = m;
	r.o = o;
	r.g = g;
	if (lower_ctx_init(&r.lc, m, o) < 0)
		return 1;
	r.monad = m->train->monad;
	r.monad_abs = m->train->monad_abs;
	r.tmpl.kind = NK_CNODE;
	r.tmpl.g = g;
	r.tmpl.scope_kind = SCOPE_FULLNAME;
	r.tmpl.scope = lower_sym("Default/x");
	index_graph(&r);
	find_cells(&r);
	if (decide(&r)) {
		r.nid = m->next_id;
		r.sg = xmalloc((r.n + 1) * sizeof *r.sg);
		memset(r.sg, 0xff, (r.n + 1) * sizeof *r.sg);
		r.orig = xcalloc(r.n + 1, sizeof *r.orig);
		r.tgt = xcalloc(r.n + 1, sizeof *r.tgt);
		r.memo = xcalloc(r.n + 1, sizeof *r.memo);
		r.memo_val = xcalloc(r.n + 1, 1);
		r.rid = xcalloc(r.n + 1, sizeof *r.rid);
		r.dup = xcalloc(r.n + 1, sizeof *r.dup);
		r.is_target = xcalloc(r.n + 1, 1);
		r.sg_of_id = xmalloc((r.nid + 1) * sizeof *r.sg_of_id);
		memset(r.sg_of_id, 0xff, (r.nid + 1) * sizeof *r.sg_of_id);
		uint32_t s = 0;
		for (uint32_t i = 0; i < r.n; i++) {
			/* FindCandidateRecomputedNodes: read by the backward, reading none of it */
			if (!candidate(&r, i) || r.sg[i] >= 0)
				continue;
			int to_bp = 0, from_bp = 0;
			for (uint32_t u = r.uoff[i]; u < r.uoff[i + 1]; u++)
				to_bp |= r.bp[r.users[u]];
			Node *n = g->nodes.a[i];
			for (uint32_t k = 0; k < n->nargs; k++) {
				uint32_t p = pos(&r, arg_node(n, k));
				from_bp |= p != UINT32_MAX && r.bp[p];
			}
			if (to_bp && !from_bp)
				sub_graph(&r, i, s++);
		}
		for (uint32_t i = 0; i < r.n; i++)
			if (r.sg[i] >= 0 && g->nodes.a[i]->id < r.nid)
				r.sg_of_id[g->nodes.a[i]->id] = r.sg[i];
		set_attrs(&r);
		splice(&r);
	}
	ir_clear_marks(m);
	rc_free(&r);
	return 0;
}
