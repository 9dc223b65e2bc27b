/* autodiff.c - the `autodiff` pass: the backward graph of this rank.
 *
 * pass_autodiff (training-step.md §0, §1, §2.1, §6)
 *   Requires: the lowered forward graph of the rank (local shapes, inserted
 *             communication), i.e. everything up to optshard.  Runs when the
 *             phase resolves to train and --forward-only is not given.
 *   Provides: after the forward nodes, the backward nodes as MindSpore's J
 *             expansion builds them after step_parallel: a reverse
 *             topological walk from the loss (seed: a constant 1 of the
 *             loss's type, `_ones_like_for_grad` folded) and from every
 *             forward Send (a pipeline stage's backward starts at the Receive
 *             of the gradient), the bprop rule of each operator from
 *             bprops.def, dout contributions of a value with several users
 *             summed by Add (AccumulateDout, scope Gradients/<forward
 *             scope>).  Every node a rule makes is named
 *             Gradients/<forward dir>/Grad_<Prim>/<Op>-opK and carries the
 *             forward node's primal attributes plus forward_node_name
 *             "<Prim>_<id>" and forward_unique_id "<id>" (the forward node's
 *             module id).  The loss's _VirtualDiv (parallel-lowering §3.6),
 *             not a node in the default view, still has its bprop: the
 *             loss operator's input gradients are divided by the number of
 *             devices holding the loss.  Module.train records each
 *             trainable weight's local gradient for gradcomm.
 *   Errors:   the loss is not a scalar; no trainable weight reaches it; an
 *             operator without a bprop on a path from a trainable weight to
 *             the loss (file:line:col naming it).
 *   Invalidates: nothing computed earlier; node marks are cleared.
 * Linear in the graph: one forward sweep, one backward sweep, O(1) work per
 * emitted node.
 */
#include <math.h>
#include <string.h>

#include "train.h"

typedef struct GV {
	Value v;
	Abs a;
	uint8_t set;
} GV;

/* A gradient kept until its value's bprop runs (one per forward value, a
 * million on a 4096-layer rank graph): the abstract is the pass's shared
 * copy (Ad.abs), so a slot is half a GV.  a == NULL: no gradient yet. */
typedef struct Slot {
	Value v;
	const Abs *a;
} Slot;

typedef struct Tup {
	Slot *g;    /* per element */
	Node **fwd; /* a forward TupleGetItem of each element, or NULL */
	uint32_t n;
} Tup;

/* A direct-mapped cache in front of a KeyMap with short keys: the rules
 * ask for the same few abstracts and operand lists (a layer's) thousands
 * of times, and a hit here costs a hash and a compare of a few words where
 * the map probes its table (front_get) */
#define FRONT 256
#define FRONT_WORDS 18
typedef struct Front {
	uint32_t nkey;
	int64_t key[FRONT_WORDS];
	void *val;
} Front;

typedef struct Ad Ad;
typedef void (*Bprop)(Ad *a, Node *n, const GV *g, int gop);

struct Ad {
	TrainEmit e;
	Module *m;
	const Options *o;
	Graph *g;
	uint32_t nn;
	Slot *dout;
	Tup **tup;
	uint8_t *needs, *reach;
	Node **gather; /* per parameter: its optimizer-parallel AllGather */
	Node *cur;     /* the forward node whose bprop is being built */
	int ext_built;
	Node *loss_op; /* the loss operator and its _VirtualDiv divisor */
	int64_t vdiv;
	int in_loss;
	Vec(Node *) keep;
	/* operand types of the nodes a rule is building, interned when it is
	 * done (equal arrays shared, as the lowering's clones share theirs) */
	Abs *scratch;
	uint32_t nscratch;
	uint32_t rule_start; /* e.out.n when the rule began */
	KeyMap types;        /* operand abstracts -> the module's copy */
	KeyMap abs;          /* the abstracts of the Slots (pass memory) */
	Front *front_types, *front_abs;
	/* attribute lists of the nodes the rules made -> one shared copy of
	 * each distinct list (a bprop op's attributes are its forward op's
	 * group and a few constants: a million nodes, a few thousand lists) */
	KeyMap attrs;
	Vec(int64_t) akey;
	Vec(Attr *) aheap; /* the lists attr_put is building (heap, until interned) */
	Vec(uint32_t) acap; /* and the room of each */
	KeyMap ints;       /* c_ints(): int tuple -> its Value in the module */
	/* (communication rule, forward op's attribute words) -> the list the
	 * rule made (comm_attrs) */
	KeyMap comm_attrs;
	/* micro-batches (Module.micro > 1): each weight's contributions go to
	 * its buffer accu_grads.<w> by AssignAdd as they are made */
	int micro;
	Node **accu;   /* by parameter index */
	Value accu_u;  /* the monad state of the accumulation chain */
	Abs accu_ua;
	int32_t next_local;
	/* the NodeExt of the backward nodes, one per (forward primitive,
	 * primal list), and the forward id of each node made (by node id) */
	KeyMap exts;
	FwdIds *fwd_tab;
	Vec(uint32_t) fwd;
};

#define SCRATCH 65536

enum { RULE_NONE, RULE_NOGRAD, RULE_BPROP };

#define BPROP(op, rule, gop) static void bp_##rule(Ad *a, Node *n, const GV *g, int gop);
#define NOGRAD(op)
#include "bprops.def"
#undef BPROP
#undef NOGRAD

static const struct {
	Bprop fn;
	uint16_t gop;
	uint8_t kind;
} rules[OP_COUNT_] = {
#define BPROP(op, rule, g) [OP_##op] = {bp_##rule, OP_##g, RULE_BPROP},
#define NOGRAD(op) [OP_##op] = {NULL, 0, RULE_NOGRAD},
#include "bprops.def"
#undef BPROP
#undef NOGRAD
};

/* ------------------------------------------------------------ indexing */

static uint32_t idx(const Ad *a, const Node *n)
{
	return n->g == a->g && n->mark ? n->mark - 1 : UINT32_MAX;
}

static Node *arg_node(const Node *n, uint32_t k)
{
	return k < n->nargs && n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
}

static int needs(const Ad *a, const Node *n)
{
	uint32_t i = n ? idx(a, n) : UINT32_MAX;
	return i != UINT32_MAX && a->needs[i];
}

/* does operand k of n want a gradient */
static int wants(const Ad *a, const Node *n, uint32_t k)
{
	return needs(a, arg_node(n, k));
}

static int gmm_differentiable(const Node *n);

static int rule_kind(const Node *n)
{
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return RULE_NONE;
	if (n->op == OP_GroupedMatmul && !gmm_differentiable(n))
		return RULE_NONE;
	return rules[n->op].kind;
}

/* ------------------------------------------------------------ emission */

static void ensure_ext(Ad *a)
{
	if (a->ext_built || !a->cur)
		return;
	a->ext_built = 1;
	Node *f = a->cur;
	const NodeExt *fx = ir_node_ext(f);
	int64_t key[3] = {f->prim, fx->has_primal ? (int64_t)(intptr_t)fx->primal.a : 0,
	                  fx->has_primal ? (int64_t)fx->primal.n : 0};
	int fresh;
	NodeExt **slot = keymap_get(&a->exts, key, 3, &fresh);
	if (fresh) {
		NodeExt *x = arena_alloc(a->m->arena, sizeof *x);
		/* the forward's own list, shared; the printer adds
		 * forward_node_name and forward_unique_id from fwd_prim and the
		 * node's entry of fwd_tab (emit) */
		if (fx->has_primal)
			x->primal = fx->primal;
		x->has_fwd = 1;
		x->fwd_prim = f->prim;
		x->fwd_tab = a->fwd_tab;
		x->has_primal = 1;
		*slot = x;
	}
	a->e.ext = *slot;
}

/* n is a node of the bprop of a->cur: its entry of the forward ids */
static void note_fwd(Ad *a, const Node *n)
{
	uint32_t k = n->id - a->fwd_tab->base;
	if (k >= a->fwd.n) {
		vec_grow(&a->fwd, k + 1 - a->fwd.n);
		memset(a->fwd.a + a->fwd.n, 0, (k + 1 - a->fwd.n) * sizeof *a->fwd.a);
		a->fwd.n = k + 1;
	}
	a->fwd.a[k] = a->cur->id;
}

static Node *emit(Ad *a, int op, uint32_t nargs, const Abs *out)
{
	ensure_ext(a);
	if (a->nscratch + nargs > SCRATCH) {
		Node *n = train_op(&a->e, op, nargs, out);
		if (a->e.ext)
			note_fwd(a, n);
		return n;
	}
	Node *n = train_op(&a->e, op, 0, out);
	if (a->e.ext)
		note_fwd(a, n);
	n->nargs = n->nin_types = nargs;
	n->args = nargs ? arena_alloc(a->m->arena, nargs * sizeof(Value)) : NULL;
	n->in_types = nargs ? a->scratch + a->nscratch : NULL;
	a->nscratch += nargs;
	return n;
}

/* keymap_get(m, key, nkey, fresh) through the cache f */
static void *front_get(Front *f, KeyMap *m, const int64_t *key, uint32_t nkey, int *fresh)
{
	if (nkey > FRONT_WORDS)
		return keymap_get(m, key, nkey, fresh);
	uint64_t h = nkey;
	for (uint32_t i = 0; i < nkey; i++)
		h = (h ^ (uint64_t)key[i]) * 0x9E3779B97F4A7C15ull;
	Front *e = &f[h >> 56];
	if (e->val && e->nkey == nkey && memcmp(e->key, key, nkey * sizeof *key) == 0) {
		*fresh = 0;
		return e->val;
	}
	void *v = keymap_get(m, key, nkey, fresh); /* never moves */
	e->nkey = nkey;
	memcpy(e->key, key, nkey * sizeof *key);
	e->val = v;
	return v;
}

/* the words of intern_types' key for one abstract */
static uint32_t abs_key(const Abs *t, int64_t *key)
{
	key[0] = t->tstr;
	key[1] = t->dtype;
	key[2] = t->is_ref | t->is_tensor << 1 | t->has_value << 2 | t->shape.kind << 3 | (int64_t)t->shape.rank << 8;
	key[3] = t->shape.kind == SK_DIMS || t->shape.kind == SK_OLD ? (int64_t)(intptr_t)t->shape.dims
	         : t->shape.kind == SK_TUPLE || t->shape.kind == SK_LIST ? (int64_t)(intptr_t)t->shape.sub
	                                                               : 0;
	key[4] = t->xi;
	key[5] = 0;
	return 6;
}

/* the words of a value, exactly (every field but a container's elements
 * pointer, then the elements'): equal words, equal printed text */
static void value_words(Ad *a, const Value *v)
{
	vec_grow(&a->akey, 4);
	int64_t *k = a->akey.a + a->akey.n;
	k[0] = v->kind | v->numtype << 8 | (int64_t)v->n << 16;
	k[1] = v->text;
	k[2] = v->keyi | (int64_t)(v->kind == V_CALL ? value_call_name(v) : 0) << 32;
	k[3] = v->u.i;
	a->akey.n += 4;
	if (v->kind == V_TUPLE || v->kind == V_LIST || v->kind == V_DICT || v->kind == V_CALL) {
		a->akey.a[a->akey.n - 1] = 0;
		for (uint32_t i = 0; i < v->n; i++)
			value_words(a, &v->u.elems[i]);
	}
}

/* Append an attribute to a list a rule is building: the list is on the
 * heap until intern_types() puts it into the module (a list shared with
 * the forward op is copied first) */
static void attr_put(Ad *a, AttrList *l, const char *key, Value v)
{
	uint32_t h = 0;
	while (h < a->aheap.n && (!l->a || a->aheap.a[h] != l->a))
		h++;
	if (h == a->aheap.n) {
		/* room for a rule's few attributes: no realloc per attribute */
		uint32_t cap = l->n + 8;
		Attr *c = xmalloc(cap * sizeof(Attr));
		if (l->n)
			memcpy(c, l->a, l->n * sizeof(Attr));
		l->a = c;
		vec_push(&a->aheap, c);
		vec_push(&a->acap, cap);
	} else if (l->n + 1 > a->acap.a[h]) {
		a->acap.a[h] *= 2;
		l->a = a->aheap.a[h] = xrealloc(l->a, a->acap.a[h] * sizeof(Attr));
	}
	l->a[l->n].key = lower_sym(key);
	l->a[l->n].val = v;
	l->n++;
}

/* a list attr_put built -> the module's one copy of that list (never
 * written afterwards: gradcomm and optimizer make their own nodes) */
static void intern_attrs(Ad *a, AttrList *l)
{
	uint32_t h = 0;
	while (h < a->aheap.n && (!l->a || a->aheap.a[h] != l->a))
		h++;
	if (!l->n || h == a->aheap.n)
		return;
	a->akey.n = 0;
	for (uint32_t i = 0; i < l->n; i++) {
		vec_push(&a->akey, (int64_t)l->a[i].key);
		value_words(a, &l->a[i].val);
	}
	int fresh;
	Attr **slot = keymap_get(&a->attrs, a->akey.a, a->akey.n, &fresh);
	if (fresh)
		*slot = arena_dup(a->m->arena, l->a, l->n * sizeof(Attr));
	l->a = *slot;
}

/* The attribute list of a communication rule's op c follows from the
 * forward op n's list alone, and the forward ops of one group have equal
 * lists (a rank graph has thousands of AllGathers, a few dozen lists):
 * 1 when c got the list the rule made before for an equal one; else 0,
 * the rule builds it and hands *memo to comm_attrs_done.  The key is
 * shallow: a container is its elements pointer, which a group's ops
 * share (LowerGroup.ids); equal lists with elements of their own only
 * miss, and their lists are still shared by intern_attrs. */
static int comm_attrs(Ad *a, Node *c, const Node *n, int rule, AttrList **memo)
{
	uint32_t na = n->pattrs.n;
	a->akey.n = 0;
	vec_grow(&a->akey, 1 + 5 * na);
	int64_t *k = a->akey.a;
	*k++ = rule;
	for (uint32_t i = 0; i < na; i++) {
		const Value *v = &n->pattrs.a[i].val;
		*k++ = n->pattrs.a[i].key;
		*k++ = v->kind | v->numtype << 8 | (int64_t)v->n << 16;
		*k++ = v->text;
		*k++ = v->keyi; /* a CALL's name is in its elements */
		*k++ = v->u.i;
	}
	a->akey.n = 1 + 5 * na;
	int fresh;
	AttrList *p = keymap_get(&a->comm_attrs, a->akey.a, a->akey.n, &fresh);
	if (fresh) {
		*memo = p;
		return 0;
	}
	c->pattrs = *p;
	c->has_pattrs = 1;
	return 1;
}

static void comm_attrs_done(Ad *a, Node *c, AttrList *memo)
{
	intern_attrs(a, &c->pattrs);
	*memo = c->pattrs;
}

/* the nodes the rule made: their operand types into the module, one
 * array per distinct list (shapes are shared, so equal ones compare as
 * equal pointers) */
static void intern_types(Ad *a)
{
	int64_t key[6 * 16];
	for (uint32_t i = a->rule_start; i < a->e.out.n; i++) {
		Node *n = a->e.out.a[i];
		intern_attrs(a, &n->pattrs);
		if (!n->nin_types || n->in_types < a->scratch || n->in_types >= a->scratch + SCRATCH)
			continue;
		if (n->nin_types > 16) {
			n->in_types = arena_dup(a->m->arena, n->in_types, n->nin_types * sizeof(Abs));
			continue;
		}
		uint32_t k = 0;
		for (uint32_t j = 0; j < n->nin_types; j++)
			k += abs_key(&n->in_types[j], key + k);
		int fresh;
		Abs **slot = front_get(a->front_types, &a->types, key, k, &fresh);
		if (fresh)
			*slot = arena_dup(a->m->arena, n->in_types, n->nin_types * sizeof(Abs));
		n->in_types = *slot;
	}
	for (uint32_t h = 0; h < a->aheap.n; h++)
		free(a->aheap.a[h]);
	a->aheap.n = 0;
	a->acap.n = 0;
	a->nscratch = 0;
	a->rule_start = a->e.out.n;
}

static GV gv_node(Node *n)
{
	GV r = {value_node(n), n->out, 1};
	return r;
}

static GV gv_val(Value v, Abs a)
{
	GV r = {v, a, 1};
	return r;
}

static GV slot_get(const Slot *s)
{
	GV r = {0};
	if (s->a)
		r = gv_val(s->v, *s->a);
	return r;
}

static void slot_put(Ad *a, Slot *s, GV g)
{
	int64_t key[6];
	if (g.v.kind == V_NODE) {
		/* a node's own output, as most gradients are: its abstract is the
		 * node's, which nothing changes while the pass runs (equal words,
		 * the same abstract the map would give) */
		int64_t kn[6];
		abs_key(&g.a, key);
		abs_key(&g.v.u.node->out, kn);
		if (memcmp(key, kn, sizeof key) == 0) {
			s->v = g.v;
			s->a = &g.v.u.node->out;
			return;
		}
	}
	int fresh;
	Abs *p = front_get(a->front_abs, &a->abs, key, abs_key(&g.a, key), &fresh);
	if (fresh)
		*p = g.a;
	s->v = g.v;
	s->a = p;
}

/* forward operand k as a value with its abstract */
static GV gv_arg(const Node *n, uint32_t k)
{
	Abs ab = {0};
	if (k < n->nin_types)
		ab = n->in_types[k];
	else if (n->args[k].kind == V_NODE)
		ab = n->args[k].u.node->out;
	return gv_val(n->args[k], ab);
}

/* a tensor operand's value (a Parameter read directly is a Ref) */
static Abs tensor_abs(const GV *x)
{
	return train_abs_value(&x->a);
}

static void set(Node *n, uint32_t k, GV x)
{
	n->args[k] = x.v;
	n->in_types[k] = x.a;
}

static Node *op1(Ad *a, int op, GV x, const Abs *out)
{
	Node *n = emit(a, op, 1, out);
	set(n, 0, x);
	return n;
}

static Node *op2(Ad *a, int op, GV x, GV y, const Abs *out)
{
	Node *n = emit(a, op, 2, out);
	set(n, 0, x);
	set(n, 1, y);
	return n;
}

static Node *op3(Ad *a, int op, GV x, GV y, GV z, const Abs *out)
{
	Node *n = emit(a, op, 3, out);
	set(n, 0, x);
	set(n, 1, y);
	set(n, 2, z);
	return n;
}

static GV c_bool(int b)
{
	return gv_val(value_bool(b), train_abs_bool());
}

static GV c_int(int64_t v)
{
	return gv_val(value_int(v, NT_I64), lower_abs_int());
}

/* an int tuple constant: one per distinct tuple, shared by the nodes
 * (shapes and axes, the same few in every layer) */
static GV c_ints(Ad *a, const int64_t *v, int n)
{
	int fresh;
	Value *t = keymap_get(&a->ints, v, (uint32_t)n, &fresh);
	if (fresh)
		*t = lower_ints(a->m, v, n);
	return gv_val(*t, lower_abs_tuple_ints(a->m, n));
}

static GV c_scalar(Ad *a, Sym dtype, double v)
{
	return gv_val(train_float_tensor(a->m, dtype, v), train_abs_tensor(a->m, dtype, NULL, 0, 1));
}

static int dims_of(const Abs *a, int64_t *d)
{
	if (a->shape.kind != SK_DIMS)
		return -1;
	if (a->shape.rank)
		memcpy(d, a->shape.dims, a->shape.rank * sizeof *d);
	return a->shape.rank;
}

static Abs tensor_like(Ad *a, const Abs *like, const int64_t *d, int r)
{
	return lower_abs_like(a->m, like, d, r);
}

/* ------------------------------------------------------------ dout */

static void acc(Ad *a, Slot *slot, GV g, Node *target)
{
	if (!slot->a) {
		if (g.set)
			slot_put(a, slot, g);
		return;
	}
	/* AccumulateDout: hyper_add, scope Gradients/<forward scope>, no primal */
	Node tm = a->e.tmpl;
	const NodeExt *x = a->e.ext;
	train_emit_bprop_of(&a->e, target, 0, 0, OP_Add);
	a->e.ext = NULL;
	Node *s = train_op(&a->e, OP_Add, 2, slot->a);
	set(s, 0, slot_get(slot));
	set(s, 1, g);
	a->e.tmpl = tm;
	a->e.ext = x;
	slot_put(a, slot, gv_node(s));
}

static void give_node(Ad *a, Node *t, GV g);

/* _VirtualDiv's bprop, named after n: RealDiv(dout, divisor)
 * (grad_comm_ops.py) */
static GV virtual_div(Ad *a, Node *n, GV g, int64_t divisor)
{
	Node tm = a->e.tmpl;
	const NodeExt *x = a->e.ext;
	train_emit_bprop_of(&a->e, n, lower_sym("_VirtualDiv"), 1, OP_RealDiv);
	a->e.ext = NULL;
	Node *d = train_op(&a->e, OP_RealDiv, 2, &g.a);
	set(d, 0, g);
	set(d, 1, c_scalar(a, g.a.dtype, (double)divisor));
	a->e.tmpl = tm;
	a->e.ext = x;
	return gv_node(d);
}

/* the gradient of operand k of the node being differentiated */
static void give(Ad *a, Node *n, uint32_t k, GV g)
{
	Node *t = arg_node(n, k);
	if (!t || !needs(a, t) || !g.set)
		return;
	if (a->in_loss && n == a->loss_op && a->vdiv > 1 && t->out.is_tensor)
		g = virtual_div(a, n, g, a->vdiv);
	give_node(a, t, g);
}

/* A micro-batch's gradient of weight t (index i): AssignAdd into its
 * buffer, then UpdateState - the bprop of the _VirtualAssignAdd that
 * MindSpore puts between a weight and each of its forward users with
 * micro-batches (pipeline_split_utils.cc InsertVirtualAssignAdd;
 * training-step.md §4.6), named after the user whose bprop gives it. */
static void accumulate(Ad *a, Node *t, uint32_t i, GV g)
{
	Module *m = a->m;
	if (!a->accu[i]) {
		char buf[1024];
		snprintf(buf, sizeof buf, "accu_grads.%s", sym_str(t->name));
		Abs ga = tensor_abs(&g);
		a->accu[i] = train_new_param(m, a->g, a->next_local++, buf, ga.dtype, &ga.shape,
		                             ga.shape.rank == t->out.shape.rank && shape_equal(&ga.shape, &t->out.shape)
		                                 ? t->lay
		                                 : NULL);
	}
	Node *buf = a->accu[i];
	Node tm = a->e.tmpl;
	train_emit_bprop_of(&a->e, a->cur ? a->cur : t, lower_sym("_VirtualAssignAdd"), 1, OP_AssignAdd);
	Abs va = train_abs_value(&buf->out);
	Node *n = train_op(&a->e, OP_AssignAdd, 3, &va);
	train_arg_node(&a->e, n, 0, buf);
	set(n, 1, g);
	train_arg(&a->e, n, 2, a->accu_u, &a->accu_ua);
	lower_attr_put(m, &n->pattrs, "side_effect_mem", value_bool(1));
	n->has_pattrs = 1;
	Abs ua = train_abs_monad();
	Node *u = train_op(&a->e, OP_UpdateState, 2, &ua);
	train_arg(&a->e, u, 0, a->accu_u, &a->accu_ua);
	train_arg_node(&a->e, u, 1, n);
	a->accu_u = value_node(u);
	a->accu_ua = u->out;
	a->e.tmpl = tm;
}

static void give_node(Ad *a, Node *t, GV g)
{
	uint32_t i = idx(a, t);
	if (i == UINT32_MAX || !a->needs[i])
		return;
	if (a->micro > 1 && g.set && train_is_trainable(t)) {
		accumulate(a, t, i, g);
		return;
	}
	acc(a, &a->dout[i], g, t);
}

static Tup *tup_of(Ad *a, Node *t)
{
	uint32_t i = idx(a, t);
	if (i == UINT32_MAX)
		return NULL;
	if (!a->tup[i]) {
		/* one slot per element: the tuple's declared size, else the
		 * most any producer here has (LayerNorm 3, BatchNorm 5, ...) */
		uint32_t n = t->out.shape.kind == SK_TUPLE ? t->out.shape.rank : 0;
		if (t->op == OP_MakeTuple && t->nargs > n)
			n = t->nargs;
		if (!n)
			n = 8;
		Tup *p = xcalloc(1, sizeof *p + n * (sizeof(Slot) + sizeof(Node *)));
		p->n = n;
		p->g = (Slot *)(p + 1);
		p->fwd = (Node **)(p->g + n);
		a->tup[i] = p;
	}
	return a->tup[i];
}

/* the gradient of element e of tuple value t */
static void give_elem(Ad *a, Node *t, uint32_t e, GV g)
{
	if (!t || !needs(a, t) || !g.set)
		return;
	Tup *p = tup_of(a, t);
	if (p && e < p->n)
		acc(a, &p->g[e], g, t);
}

/* element e of n's tuple output as a value: the forward TupleGetItem when
 * there is one, else a new one */
static GV elem(Ad *a, Node *n, uint32_t e, const Abs *like)
{
	Tup *p = tup_of(a, n);
	if (p && e < p->n && p->fwd[e])
		return gv_node(p->fwd[e]);
	Abs ab = *like;
	if (n->out.shape.kind == SK_TUPLE && e < n->out.shape.rank && n->out.shape.sub[e].kind == SK_DIMS)
		ab = tensor_like(a, like, n->out.shape.sub[e].dims, n->out.shape.sub[e].rank);
	Node *t = op2(a, OP_TupleGetItem, gv_node(n), c_int(e), &ab);
	return gv_node(t);
}

/* ------------------------------------------------------------ helpers */

/* BinopGradCommon: sum d over the axes broadcast to reach its shape from
 * the operand's (target), then reshape to it */
static GV unbroadcast(Ad *a, GV d, const Abs *target)
{
	int64_t od[MAX_RANK], td[MAX_RANK], axes[MAX_RANK];
	int ro = dims_of(&d.a, od), rt = dims_of(target, td);
	if (ro < 0 || rt < 0 || (ro == rt && memcmp(od, td, ro * sizeof *od) == 0))
		return d;
	int na = 0;
	for (int i = 0; i < ro; i++) {
		int j = i - (ro - rt);
		if (j < 0 || (td[j] == 1 && od[i] != 1))
			axes[na++] = i;
	}
	if (na) {
		int64_t rd[MAX_RANK];
		int rr = 0;
		for (int i = 0, k = 0; i < ro; i++) {
			if (k < na && axes[k] == i)
				k++;
			else
				rd[rr++] = od[i];
		}
		Abs ra = tensor_like(a, &d.a, rd, rr);
		Node *s = op3(a, OP_SumExt, d, c_ints(a, axes, na), c_bool(0), &ra);
		d = gv_node(s);
	}
	Abs ta = tensor_like(a, &d.a, td, rt);
	if (d.a.shape.kind == SK_DIMS && shape_equal(&d.a.shape, &ta.shape))
		return d;
	return gv_node(op2(a, OP_Reshape, d, c_ints(a, td, rt), &ta));
}

static GV reshape_to(Ad *a, GV d, const Abs *target)
{
	int64_t td[MAX_RANK];
	int rt = dims_of(target, td);
	if (rt < 0 || (d.a.shape.kind == SK_DIMS && shape_equal(&d.a.shape, &target->shape)))
		return d;
	Abs ta = tensor_like(a, &d.a, td, rt);
	return gv_node(op2(a, OP_Reshape, d, c_ints(a, td, rt), &ta));
}

/* the integer setting of a primitive: operand i if literal, else attribute */
static int get_int(const Node *n, uint32_t i, const char *key, int64_t *out)
{
	if (i < n->nargs && n->args[i].kind != V_NODE && value_get_int(&n->args[i], out))
		return 0;
	const Value *v = ir_attr_get(&n->pattrs, key);
	return v && value_get_int(v, out) ? 0 : -1;
}

/* the axes setting (operand i or attribute key) as a list; -1 when absent */
static int get_axes(const Node *n, uint32_t i, const char *key, int64_t *ax)
{
	const Value *v = NULL;
	if (i < n->nargs && n->args[i].kind != V_NODE)
		v = &n->args[i];
	else
		v = ir_attr_get(&n->pattrs, key);
	return v ? value_int_list(v, ax, MAX_RANK) : -1;
}

/* ------------------------------------------------------------ rules */

static void bp_pass0(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	give(a, n, 0, g[0]);
}

static void bp_getitem(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	int64_t e;
	if (n->nargs >= 2 && value_get_int(&n->args[1], &e) && e >= 0)
		give_elem(a, arg_node(n, 0), (uint32_t)e, g[0]);
}

static void bp_maketuple(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	Tup *p = tup_of(a, n);
	for (uint32_t k = 0; p && k < n->nargs && k < p->n; k++)
		give(a, n, k, slot_get(&p->g[k]));
	(void)g;
}

static Node *mm(Ad *a, int op, GV p, GV q, int t1, int t2, const Abs *out)
{
	Node *r = emit(a, op, 4, out);
	set(r, 0, p);
	set(r, 1, q);
	set(r, 2, c_bool(t1));
	set(r, 3, c_bool(t2));
	return r;
}

/* a batched product's result: g's batch dimensions, target's matrix */
static Abs batch_like(Ad *a, const Abs *g, const Abs *target)
{
	int64_t gd[MAX_RANK], td[MAX_RANK];
	int rg = dims_of(g, gd), rt = dims_of(target, td);
	if (rg < 3 || rt < 2)
		return *target;
	gd[rg - 2] = td[rt - 2];
	gd[rg - 1] = td[rt - 1];
	return tensor_like(a, target, gd, rg);
}

static void bp_matmul(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0), w = gv_arg(n, 1);
	int ta = ir_node_flag(n, 2, "transpose_a", "transpose_x1");
	int tb = ir_node_flag(n, 3, "transpose_b", "transpose_x2");
	Abs xa = tensor_abs(&x), wa = tensor_abs(&w);
	/* dx = MatMul(g, w, 0, !tb), or MatMul(w, g, tb, 1) when ta;
	 * dw = MatMul(x, g, !ta, 0), or MatMul(g, x, 1, ta) when tb (§6) */
	if (wants(a, n, 0)) {
		Abs o = batch_like(a, &g[0].a, &xa);
		Node *r = ta ? mm(a, gop, w, g[0], tb, 1, &o) : mm(a, gop, g[0], w, 0, !tb, &o);
		give(a, n, 0, unbroadcast(a, gv_node(r), &xa));
	}
	if (wants(a, n, 1)) {
		Abs o = batch_like(a, &g[0].a, &wa);
		Node *r = tb ? mm(a, gop, g[0], x, 1, ta, &o) : mm(a, gop, x, g[0], !ta, 0, &o);
		give(a, n, 1, unbroadcast(a, gv_node(r), &wa));
	}
}

/* Conv2DBackpropInput(g, w, x_shape), Conv2DBackpropFilter(g, x, w_shape),
 * the forward's attributes copied (grad_nn_ops.cc Conv2D) */
static void bp_conv2d(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0), w = gv_arg(n, 1);
	Abs xa = tensor_abs(&x), wa = tensor_abs(&w);
	int64_t d[MAX_RANK];
	if (wants(a, n, 0)) {
		int r = dims_of(&xa, d);
		Node *c = op3(a, gop, g[0], w, c_ints(a, d, r < 0 ? 0 : r), &xa);
		c->pattrs = n->pattrs;
		c->has_pattrs = n->has_pattrs;
		give(a, n, 0, gv_node(c));
	}
	if (wants(a, n, 1)) {
		int r = dims_of(&wa, d);
		Node *c = op3(a, OP_Conv2DBackpropFilter, g[0], x, c_ints(a, d, r < 0 ? 0 : r), &wa);
		c->pattrs = n->pattrs;
		c->has_pattrs = n->has_pattrs;
		give(a, n, 1, gv_node(c));
	}
}

/* MaxPoolGrad(x, y, g) / AvgPoolGrad(x, y, g), attributes copied */
static void bp_pool(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Node *c = op3(a, gop, x, gv_node(n), g[0], &xa);
	c->pattrs = n->pattrs;
	c->has_pattrs = n->has_pattrs;
	give(a, n, 0, gv_node(c));
}

/* the outputs of a multi-output grad op: TupleGetItem k for operand k */
static void give_items(Ad *a, Node *n, Node *c, const uint32_t *operand, int count)
{
	for (int k = 0; k < count; k++) {
		if (!wants(a, n, operand[k]))
			continue;
		GV x = gv_arg(n, operand[k]);
		Abs xa = tensor_abs(&x);
		Node *t = op2(a, OP_TupleGetItem, gv_node(c), c_int(k), &xa);
		give(a, n, operand[k], gv_node(t));
	}
}

static Abs tuple_abs(Ad *a, Node *n, const uint32_t *operand, int count)
{
	Abs t = {0};
	char buf[32];
	snprintf(buf, sizeof buf, "Tuple[Tensor*%d]", count);
	t.tstr = intern_cstr(buf);
	t.shape.kind = SK_TUPLE;
	t.shape.rank = (uint8_t)count;
	t.shape.sub = arena_alloc(a->m->arena, (size_t)count * sizeof(Shape));
	for (int k = 0; k < count; k++) {
		GV x = gv_arg(n, operand[k]);
		t.shape.sub[k] = x.a.shape;
	}
	return t;
}

static void comm_group(Ad *a, Node *c, const Node *n, int fusion0);
static void grad_allreduce_attrs(Ad *a, Node *c, const Node *from);
static Node *comm_op(Ad *a, int op, GV x, const Abs *out, const Node *n, const char *prefix);
static void put(Ad *a, Node *c, const char *key, Value v);
static void put_from(Ad *a, Node *c, const Node *n, const char *key, const char *as);

/* the forward AllReduce of the per-channel sum behind a BatchNorm's
 * statistics operand k (3: mean = RealDiv(AllReduce(sum x), count); 4:
 * variance = Sub(RealDiv(AllReduce(sum x*x), count), mean*mean)), as the
 * lowering builds them for a batch-split training BatchNorm
 * (redistribute.c, batch_stats), or NULL */
static Node *stats_allreduce(const Node *n, uint32_t k)
{
	Node *p = arg_node(n, k);
	if (p && k == 4)
		p = p->kind == NK_CNODE && p->callee_kind == CK_PRIM && p->op == OP_Sub ? arg_node(p, 0) : NULL;
	p = p && p->kind == NK_CNODE && p->callee_kind == CK_PRIM && p->op == OP_RealDiv ? arg_node(p, 0) : NULL;
	return p && p->kind == NK_CNODE && p->callee_kind == CK_PRIM && p->op == OP_AllReduce ? p : NULL;
}

/* the epsilon of a BatchNorm (operand 6 or the attribute) onto c */
static void put_epsilon(Ad *a, Node *c, const Node *n)
{
	if (n->nargs > 6 && (n->args[6].kind == V_FLOAT || n->args[6].kind == V_INT))
		put(a, c, "epsilon", n->args[6]);
	else
		put_from(a, c, n, "epsilon", NULL);
	c->has_pattrs = c->pattrs.n > 0;
}

/* A batch-split training BatchNorm normalises with statistics of the whole
 * batch (mean_ar: the forward AllReduce of its sum), so dx carries the
 * gradient through them, which needs the group-wide per-channel sums of
 * dy*x_hat and dy.  As MindSpore's SyncBatchNorm bprop, split for the
 * device (mindspore-ai/mindspore: python/mindspore/ops/_grad_experimental
 * SyncBatchNorm bprop -> SyncBatchNormGrad(epsilon, group, device_num);
 * mindspore/ccsrc/plugin/device/ascend/optimizer/ir_fission/
 * bn_grad_split.cc, SyncBnGradSplit; the group from
 * frontend/parallel/ops_info/batch_norm_info.cc):
 *   u = BNTrainingUpdateGrad(dy, x, mean, var) -> (sum dy*x_hat, sum dy)
 *   s_k = Mul(AllReduce(sum, group)(u[k]), 1/device_num)
 *   dx = BNTrainingReduceGrad(dy, x, s_0, s_1, scale, mean, var)
 * dscale and dbias are the local sums u[0], u[1] (summed over the batch
 * group by the parameters' mirror, like every data-parallel gradient).
 * BNTrainingReduceGrad divides by the local count: the 1/device_num makes
 * that the global mean over equal local batches. */
static void bp_sync_batchnorm(Ad *a, Node *n, const GV *g, Node *mean_ar)
{
	GV x = gv_arg(n, 0), sc = gv_arg(n, 1), mu = gv_arg(n, 3), var = gv_arg(n, 4);
	Abs xa = tensor_abs(&x), sa = tensor_abs(&sc);
	GV dy = g[0].set ? g[0] : gv_val(value_node(n), xa);
	Node *var_ar = stats_allreduce(n, 4);
	const Value *gr = ir_attr_get(&mean_ar->pattrs, "group_rank_ids");
	uint32_t dn = gr && (gr->kind == V_TUPLE || gr->kind == V_LIST) && gr->n ? gr->n : 1;
	static const uint32_t sb[] = {1, 2};
	Abs ta = tuple_abs(a, n, sb, 2);
	Node *u = emit(a, OP_BNTrainingUpdateGrad, 4, &ta);
	set(u, 0, dy);
	set(u, 1, x);
	set(u, 2, mu);
	set(u, 3, var);
	put_epsilon(a, u, n);
	GV s[2];
	for (int k = 0; k < 2; k++) {
		const Node *f = k == 1 && var_ar ? var_ar : mean_ar;
		Node *t = op2(a, OP_TupleGetItem, gv_node(u), c_int(k), &sa);
		Node *r = comm_op(a, OP_AllReduce, gv_node(t), &sa, f, "grad");
		grad_allreduce_attrs(a, r, f);
		s[k] = gv_node(op2(a, OP_Mul, gv_node(r), c_scalar(a, sa.dtype, 1.0 / (double)dn), &sa));
		if (wants(a, n, 1 + (uint32_t)k))
			give(a, n, 1 + (uint32_t)k, gv_node(t));
	}
	if (!wants(a, n, 0))
		return;
	Node *d = emit(a, OP_BNTrainingReduceGrad, 7, &xa);
	set(d, 0, dy);
	set(d, 1, x);
	set(d, 2, s[0]);
	set(d, 3, s[1]);
	set(d, 4, sc);
	set(d, 5, mu);
	set(d, 6, var);
	put_epsilon(a, d, n);
	give(a, n, 0, gv_node(d));
}

/* BatchNorm(x, scale, bias, mean, var, ...) -> (y, mean, var, reserve1,
 * reserve2): BatchNormGrad(g0, x, scale, out[3], out[4], out[2],
 * is_training, eps, format) -> dx, dscale, dbias (§6); a batch-split
 * training one (its statistics from a forward AllReduce): above */
static void bp_batchnorm(Ad *a, Node *n, const GV *g, int gop)
{
	Node *mean_ar = stats_allreduce(n, 3);
	if (mean_ar) {
		bp_sync_batchnorm(a, n, g, mean_ar);
		return;
	}
	static const uint32_t ops[] = {0, 1, 2};
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x), sa = tensor_abs((GV[]){gv_arg(n, 1)});
	Abs ta = tuple_abs(a, n, ops, 3);
	uint32_t extra = n->nargs > 5 ? n->nargs - 5 : 0;
	if (extra > 3)
		extra = 3;
	GV o3 = elem(a, n, 3, &sa), o4 = elem(a, n, 4, &sa), o2 = elem(a, n, 2, &sa);
	Node *c = emit(a, gop, 6 + extra, &ta);
	set(c, 0, g[0].set ? g[0] : gv_val(value_node(n), xa));
	set(c, 1, x);
	set(c, 2, gv_arg(n, 1));
	set(c, 3, o3);
	set(c, 4, o4);
	set(c, 5, o2);
	for (uint32_t k = 0; k < extra; k++)
		set(c, 6 + k, gv_arg(n, 5 + k));
	c->pattrs = n->pattrs;
	c->has_pattrs = n->has_pattrs;
	give_items(a, n, c, ops, 3);
}

/* the statistics outputs of a normalisation (LayerNorm's mean and rstd,
 * RmsNorm's rstd) when the forward's type line declares only y: x's shape
 * with the normalised axes, from `from` on, kept as 1 (MindSpore's
 * LayerNorm/RmsNorm infer: ops/infer/ops_func_impl/layer_norm*.cc, rms_norm.cc) */
static Abs stats_abs(Ad *a, const Abs *x, int64_t from)
{
	int64_t d[MAX_RANK];
	int r = dims_of(x, d);
	if (r < 0)
		return *x;
	if (from < 0)
		from += r;
	for (int i = 0; i < r; i++)
		if (i >= from)
			d[i] = 1;
	return tensor_like(a, x, d, r);
}

/* LayerNorm(x, gamma, beta, ...) -> (y, mean, rstd):
 * LayerNormGrad(x, g0, out[2], out[1], gamma, begin_norm_axis,
 * begin_params_axis) -> dx, dgamma, dbeta (§6) */
static void bp_layernorm(Ad *a, Node *n, const GV *g, int gop)
{
	static const uint32_t ops[] = {0, 1, 2};
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Abs ta = tuple_abs(a, n, ops, 3);
	int64_t bna = -1, bpa = -1;
	get_int(n, 3, "begin_norm_axis", &bna);
	get_int(n, 4, "begin_params_axis", &bpa);
	Abs st = stats_abs(a, &xa, bna);
	GV o2 = elem(a, n, 2, &st), o1 = elem(a, n, 1, &st);
	Node *c = emit(a, gop, 7, &ta);
	set(c, 0, x);
	set(c, 1, g[0]);
	set(c, 2, o2);
	set(c, 3, o1);
	set(c, 4, gv_arg(n, 1));
	set(c, 5, c_int(bna));
	set(c, 6, c_int(bpa));
	const Value *eps = ir_attr_get(&n->pattrs, "epsilon");
	if (eps) {
		attr_put(a, &c->pattrs, "epsilon", *eps);
		c->has_pattrs = 1;
	}
	give_items(a, n, c, ops, 3);
}

/* RmsNorm(x, gamma, eps) -> (y, rstd): RmsNormGrad(g0, x, rstd, gamma) -> dx, dgamma */
static void bp_rmsnorm(Ad *a, Node *n, const GV *g, int gop)
{
	static const uint32_t ops[] = {0, 1};
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Abs ta = tuple_abs(a, n, ops, 2);
	GV gm = gv_arg(n, 1);
	Abs ga = tensor_abs(&gm);
	int64_t gd[MAX_RANK];
	int gr = dims_of(&ga, gd);
	Abs st = stats_abs(a, &xa, gr > 0 ? -gr : 0);
	GV o1 = elem(a, n, 1, gr > 0 ? &st : &xa);
	Node *c = emit(a, gop, 4, &ta);
	set(c, 0, g[0]);
	set(c, 1, x);
	set(c, 2, o1);
	set(c, 3, gv_arg(n, 1));
	give_items(a, n, c, ops, 2);
}

/* dx = g; db = BiasAddGrad(g, format) (§6) */
static void bp_biasadd(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, g[0]);
	if (!wants(a, n, 1))
		return;
	GV b = gv_arg(n, 1);
	Abs ba = tensor_abs(&b);
	Node *c;
	if (n->nargs >= 3) {
		c = op2(a, gop, g[0], gv_arg(n, 2), &ba);
	} else {
		c = op1(a, gop, g[0], &ba);
		const Value *f = ir_attr_get(&n->pattrs, "format");
		if (f) {
			attr_put(a, &c->pattrs, "format", *f);
			c->has_pattrs = 1;
		}
	}
	give(a, n, 1, gv_node(c));
}

static GV in_grad(Ad *a, Node *n, uint32_t k, GV d)
{
	GV x = gv_arg(n, k);
	Abs xa = tensor_abs(&x);
	return unbroadcast(a, d, &xa);
}

static void bp_add(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	for (uint32_t k = 0; k < 2; k++)
		if (wants(a, n, k))
			give(a, n, k, in_grad(a, n, k, g[0]));
}

/* AddN(MakeTuple(x...)), MindSpore's form, gives every element dout (its
 * bprop returns a tuple of len(x) douts: mindspore-ai/mindspore
 * mindspore/python/mindspore/ops/_grad/grad_math_ops.py,
 * get_bprop_scalar_addn); the tuple's own slot would be read by nobody */
static void bp_addn(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	Node *mt = n->nargs == 1 ? arg_node(n, 0) : NULL;
	if (mt && mt->op == OP_MakeTuple) {
		for (uint32_t k = 0; k < mt->nargs; k++)
			give_elem(a, mt, k, g[0]);
		return;
	}
	for (uint32_t k = 0; k < n->nargs; k++)
		if (wants(a, n, k))
			give(a, n, k, g[0]);
}

static void bp_sub(Ad *a, Node *n, const GV *g, int gop)
{
	if (wants(a, n, 0))
		give(a, n, 0, in_grad(a, n, 0, g[0]));
	if (wants(a, n, 1))
		give(a, n, 1, in_grad(a, n, 1, gv_node(op1(a, gop, g[0], &g[0].a))));
}

static void bp_mul(Ad *a, Node *n, const GV *g, int gop)
{
	if (wants(a, n, 0))
		give(a, n, 0, in_grad(a, n, 0, gv_node(op2(a, gop, g[0], gv_arg(n, 1), &g[0].a))));
	if (wants(a, n, 1))
		give(a, n, 1, in_grad(a, n, 1, gv_node(op2(a, gop, gv_arg(n, 0), g[0], &g[0].a))));
}

/* dx = g / y; dy = -(dx * out) */
static void bp_div(Ad *a, Node *n, const GV *g, int gop)
{
	Node *dx = op2(a, gop, g[0], gv_arg(n, 1), &g[0].a);
	if (wants(a, n, 0))
		give(a, n, 0, in_grad(a, n, 0, gv_node(dx)));
	if (wants(a, n, 1)) {
		Node *t = op2(a, OP_Mul, gv_node(dx), gv_node(n), &g[0].a);
		give(a, n, 1, in_grad(a, n, 1, gv_node(op1(a, OP_Neg, gv_node(t), &g[0].a))));
	}
}

/* MaximumGrad(x, y, g) -> (dx, dy), each shaped like its operand: the
 * kernel sums g over the dimensions an operand was broadcast along
 * (Maximum(r, Tensor(shape=[], ...)) gives a scalar dy) */
static void bp_minmax(Ad *a, Node *n, const GV *g, int gop)
{
	GV x[2] = {gv_arg(n, 0), gv_arg(n, 1)};
	Abs xa[2] = {tensor_abs(&x[0]), tensor_abs(&x[1])};
	Abs t = {0};
	t.tstr = lower_sym("Tuple[Tensor*2]");
	t.shape.kind = SK_TUPLE;
	t.shape.rank = 2;
	t.shape.sub = arena_alloc(a->m->arena, 2 * sizeof(Shape));
	t.shape.sub[0] = xa[0].shape;
	t.shape.sub[1] = xa[1].shape;
	Node *c = op3(a, gop, x[0], x[1], g[0], &t);
	for (uint32_t k = 0; k < 2; k++)
		if (wants(a, n, k)) {
			Node *e = op2(a, OP_TupleGetItem, gv_node(c), c_int(k), &xa[k]);
			give(a, n, k, in_grad(a, n, k, gv_node(e)));
		}
}

/* dx = g * y * x^(y-1); dy = g * out * log(x) */
static void bp_pow(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0), y = gv_arg(n, 1);
	Abs o = g[0].a;
	if (wants(a, n, 0)) {
		Node *ym1 = op2(a, OP_Sub, y, c_scalar(a, o.dtype, 1), &y.a);
		Node *p = op2(a, gop, x, gv_node(ym1), &o);
		Node *t = op2(a, OP_Mul, gv_node(p), y, &o);
		give(a, n, 0, in_grad(a, n, 0, gv_node(op2(a, OP_Mul, g[0], gv_node(t), &o))));
	}
	if (wants(a, n, 1)) {
		Node *l = op1(a, OP_Log, x, &x.a);
		Node *t = op2(a, OP_Mul, gv_node(n), gv_node(l), &o);
		give(a, n, 1, in_grad(a, n, 1, gv_node(op2(a, OP_Mul, g[0], gv_node(t), &o))));
	}
}

/* dx = g; dy = -g * FloorDiv(x, y) */
static void bp_floormod(Ad *a, Node *n, const GV *g, int gop)
{
	if (wants(a, n, 0))
		give(a, n, 0, in_grad(a, n, 0, g[0]));
	if (wants(a, n, 1)) {
		Node *q = op2(a, gop, gv_arg(n, 0), gv_arg(n, 1), &g[0].a);
		Node *t = op2(a, OP_Mul, g[0], gv_node(q), &g[0].a);
		give(a, n, 1, in_grad(a, n, 1, gv_node(op1(a, OP_Neg, gv_node(t), &g[0].a))));
	}
}

/* d = g * 2(x - y); dx = d, dy = -d */
static void bp_sqdiff(Ad *a, Node *n, const GV *g, int gop)
{
	Abs o = g[0].a;
	Node *s = op2(a, OP_Sub, gv_arg(n, 0), gv_arg(n, 1), &o);
	Node *s2 = op2(a, gop, gv_node(s), c_scalar(a, o.dtype, 2), &o);
	Node *d = op2(a, gop, g[0], gv_node(s2), &o);
	if (wants(a, n, 0))
		give(a, n, 0, in_grad(a, n, 0, gv_node(d)));
	if (wants(a, n, 1))
		give(a, n, 1, in_grad(a, n, 1, gv_node(op1(a, OP_Neg, gv_node(d), &o))));
}

/* Select(c, x, y): dx = Select(c, g, 0), dy = Select(c, 0, g) */
static void bp_select(Ad *a, Node *n, const GV *g, int gop)
{
	Abs o = g[0].a;
	Node *z = NULL;
	for (uint32_t k = 1; k < 3; k++) {
		if (!wants(a, n, k))
			continue;
		if (!z)
			z = op1(a, OP_ZerosLike, g[0], &o);
		Node *s = op3(a, gop, gv_arg(n, 0), k == 1 ? g[0] : gv_node(z), k == 1 ? gv_node(z) : g[0], &o);
		give(a, n, k, in_grad(a, n, k, gv_node(s)));
	}
}

/* unary activations: the grad op's operand order is the rule's name */
static void bp_g_y(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, gv_node(op2(a, gop, g[0], gv_node(n), &g[0].a)));
}

static void bp_y_g(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, gv_node(op2(a, gop, gv_node(n), g[0], &g[0].a)));
}

static void bp_g_x(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, gv_node(op2(a, gop, g[0], gv_arg(n, 0), &g[0].a)));
}

static void bp_g_x_y(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, gv_node(op3(a, gop, g[0], gv_arg(n, 0), gv_node(n), &g[0].a)));
}

static void bp_x_y_g(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	give(a, n, 0, gv_node(op3(a, gop, x, gv_arg(n, 1), g[0], &xa)));
}

static void bp_neg(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, gv_node(op1(a, gop, g[0], &g[0].a)));
}

/* g * Sign(x) */
static void bp_abs(Ad *a, Node *n, const GV *g, int gop)
{
	Node *s = op1(a, gop, gv_arg(n, 0), &g[0].a);
	give(a, n, 0, gv_node(op2(a, OP_Mul, g[0], gv_node(s), &g[0].a)));
}

/* g * y */
static void bp_exp(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, gv_node(op2(a, gop, g[0], gv_node(n), &g[0].a)));
}

/* g / x */
static void bp_log(Ad *a, Node *n, const GV *g, int gop)
{
	give(a, n, 0, gv_node(op2(a, gop, g[0], gv_arg(n, 0), &g[0].a)));
}

/* g * (x * 2) */
static void bp_square(Ad *a, Node *n, const GV *g, int gop)
{
	Node *t = op2(a, gop, gv_arg(n, 0), c_scalar(a, g[0].a.dtype, 2), &g[0].a);
	give(a, n, 0, gv_node(op2(a, gop, g[0], gv_node(t), &g[0].a)));
}

/* g * 2/sqrt(pi) * exp(-x^2) */
static void bp_erf(Ad *a, Node *n, const GV *g, int gop)
{
	Abs o = g[0].a;
	Node *sq = op1(a, OP_Square, gv_arg(n, 0), &o);
	Node *ng = op1(a, OP_Neg, gv_node(sq), &o);
	Node *ex = op1(a, gop, gv_node(ng), &o);
	Node *t = op2(a, OP_Mul, gv_node(ex), c_scalar(a, o.dtype, 2.0 / sqrt(3.14159265358979323846)), &o);
	give(a, n, 0, gv_node(op2(a, OP_Mul, g[0], gv_node(t), &o)));
}

/* g * cos(x) */
static void bp_sin(Ad *a, Node *n, const GV *g, int gop)
{
	Node *c = op1(a, gop, gv_arg(n, 0), &g[0].a);
	give(a, n, 0, gv_node(op2(a, OP_Mul, g[0], gv_node(c), &g[0].a)));
}

/* -(g * sin(x)) */
static void bp_cos(Ad *a, Node *n, const GV *g, int gop)
{
	Node *s = op1(a, gop, gv_arg(n, 0), &g[0].a);
	Node *t = op2(a, OP_Mul, g[0], gv_node(s), &g[0].a);
	give(a, n, 0, gv_node(op1(a, OP_Neg, gv_node(t), &g[0].a)));
}

/* Dropout -> (y, mask): DropoutGrad(g0, mask); a one-output Dropout (an
 * older dump's inference form) passes the gradient through */
static void bp_dropout(Ad *a, Node *n, const GV *g, int gop)
{
	if (n->out.shape.kind != SK_TUPLE) {
		give(a, n, 0, g[0]);
		return;
	}
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	give(a, n, 0, gv_node(op2(a, gop, g[0], elem(a, n, 1, &xa), &xa)));
}

/* Cast back to the input's type; nothing when the types agree */
static void bp_cast(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	if (xa.dtype == g[0].a.dtype || !xa.dtype) {
		give(a, n, 0, g[0]);
		return;
	}
	GV t = gv_val(value_word(sym_str(xa.dtype)), train_abs_word("TypeType"));
	give(a, n, 0, gv_node(op2(a, gop, g[0], t, &xa)));
}

/* SoftmaxBackward(g, y, dim) / LogSoftmaxGrad(y, g, axis) */
static void bp_softmax(Ad *a, Node *n, const GV *g, int gop)
{
	int64_t ax[MAX_RANK];
	int k = get_axes(n, 1, "axis", ax);
	GV axis = k == 1 ? c_int(ax[0]) : c_ints(a, ax, k < 0 ? 0 : k);
	if (k < 0)
		axis = c_int(-1);
	Node *c = gop == OP_LogSoftmaxGrad ? op3(a, gop, gv_node(n), g[0], axis, &g[0].a)
	                                   : op3(a, gop, g[0], gv_node(n), axis, &g[0].a);
	give(a, n, 0, gv_node(c));
}

/* the reduced axes of a reduction as a bit set over x's rank; keep_dims */
static unsigned reduced_axes(const Node *n, int rank, int *keep)
{
	int64_t ax[MAX_RANK];
	int k = get_axes(n, 1, "axis", ax);
	*keep = ir_node_flag(n, 2, "keep_dims", NULL);
	if (k <= 0)
		return (1u << rank) - 1;
	unsigned red = 0;
	for (int i = 0; i < k; i++) {
		int64_t v = ax[i] < 0 ? ax[i] + rank : ax[i];
		if (v >= 0 && v < rank)
			red |= 1u << v;
	}
	return red;
}

/* SumGrad: Reshape(v, kept-dims shape), BroadcastTo(x's shape) */
static GV sum_grad(Ad *a, GV v, const Abs *xa, unsigned red)
{
	int64_t xd[MAX_RANK], kd[MAX_RANK];
	int r = dims_of(xa, xd);
	if (r < 0)
		return v;
	for (int i = 0; i < r; i++)
		kd[i] = red >> i & 1 ? 1 : xd[i];
	Abs ka = tensor_like(a, &v.a, kd, r);
	v = reshape_to(a, v, &ka);
	if (shape_equal(&v.a.shape, &xa->shape))
		return v;
	Abs o = tensor_like(a, &v.a, xd, r);
	return gv_node(op2(a, OP_BroadcastTo, v, c_ints(a, xd, r), &o));
}

/* a reduction's input, its abstract and the reduced axes; 0 when its
 * shape is not known */
static int reduce_input(const Node *n, GV *x, Abs *xa, unsigned *red)
{
	int keep;
	*x = gv_arg(n, 0);
	*xa = tensor_abs(x);
	if (xa->shape.kind != SK_DIMS)
		return 0;
	*red = reduced_axes(n, xa->shape.rank, &keep);
	return 1;
}

static void bp_reduce(Ad *a, Node *n, const GV *g, int gop)
{
	GV x;
	Abs xa;
	unsigned red;
	if (!reduce_input(n, &x, &xa, &red))
		return;
	GV d = sum_grad(a, g[0], &xa, red);
	if (gop == OP_RealDiv) {
		/* ReduceMean: / (local elements in / out) (§6) */
		double ratio = 1;
		for (int i = 0; i < xa.shape.rank; i++)
			if (red >> i & 1)
				ratio *= (double)xa.shape.dims[i];
		d = gv_node(op2(a, gop, d, c_scalar(a, xa.dtype, ratio), &xa));
	}
	give(a, n, 0, d);
}

/* the selection mask of a max/min reduction over red: Equal(x,
 * broadcast(y)) as x's dtype, divided by the number of selected elements */
static GV select_mask(Ad *a, GV x, GV y, unsigned red)
{
	Abs xa = tensor_abs(&x);
	GV yb = sum_grad(a, y, &xa, red);
	Abs ba = xa;
	ba.dtype = lower_sym("Bool");
	ba.tstr = lower_sym("Tensor[Bool]");
	Node *eq = op2(a, OP_Equal, x, yb, &ba);
	GV t = gv_val(value_word(sym_str(xa.dtype)), train_abs_word("TypeType"));
	Node *m = op2(a, OP_Cast, gv_node(eq), t, &xa);
	int64_t ax[MAX_RANK], kd[MAX_RANK];
	int na = 0;
	for (int i = 0; i < xa.shape.rank; i++) {
		kd[i] = red >> i & 1 ? 1 : xa.shape.dims[i];
		if (red >> i & 1)
			ax[na++] = i;
	}
	Abs ka = tensor_like(a, &xa, kd, xa.shape.rank);
	Node *cnt = op3(a, OP_ReduceSum, gv_node(m), c_ints(a, ax, na), c_bool(1), &ka);
	return gv_node(op2(a, OP_RealDiv, gv_node(m), gv_node(cnt), &xa));
}

static void bp_reduce_sel(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	GV x;
	Abs xa;
	unsigned red;
	if (!reduce_input(n, &x, &xa, &red))
		return;
	GV mask = select_mask(a, x, gv_node(n), red);
	GV gb = sum_grad(a, g[0], &xa, red);
	give(a, n, 0, gv_node(op2(a, OP_Mul, gb, mask, &xa)));
}

/* ReduceProd: broadcast(g) * broadcast(y) / x */
static void bp_reduce_prod(Ad *a, Node *n, const GV *g, int gop)
{
	GV x;
	Abs xa;
	unsigned red;
	if (!reduce_input(n, &x, &xa, &red))
		return;
	GV yb = sum_grad(a, gv_node(n), &xa, red);
	GV gb = sum_grad(a, g[0], &xa, red);
	Node *q = op2(a, gop, yb, x, &xa);
	give(a, n, 0, gv_node(op2(a, OP_Mul, gb, gv_node(q), &xa)));
}

/* ArgMaxWithValue(x, axis, keep_dims) -> (index, value): the value's
 * gradient as ReduceMax's; the index has none */
static void bp_argval(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	Tup *p = tup_of(a, n);
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	if (!p || !p->g[1].a || xa.shape.kind != SK_DIMS)
		return;
	int64_t ax = 0;
	get_int(n, 1, "axis", &ax);
	if (ax < 0)
		ax += xa.shape.rank;
	unsigned red = ax >= 0 && ax < xa.shape.rank ? 1u << ax : 0;
	GV g1 = slot_get(&p->g[1]);
	GV mask = select_mask(a, x, elem(a, n, 1, &g1.a), red);
	GV gb = sum_grad(a, g1, &xa, red);
	give(a, n, 0, gv_node(op2(a, OP_Mul, gb, mask, &xa)));
	(void)g;
}

/* Reshape, Flatten, ExpandDims, Squeeze: Reshape(g, local input shape) */
static void bp_reshape(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	give(a, n, 0, reshape_to(a, g[0], &xa));
}

static void bp_transpose(Ad *a, Node *n, const GV *g, int gop)
{
	int64_t p[MAX_RANK], inv[MAX_RANK];
	int k = get_axes(n, 1, "perm", p);
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	if (k <= 0) {
		give(a, n, 0, g[0]);
		return;
	}
	for (int i = 0; i < k; i++)
		inv[p[i] < 0 ? p[i] + k : p[i]] = i;
	give(a, n, 0, gv_node(op2(a, gop, g[0], c_ints(a, inv, k), &xa)));
}

/* Gather(table, idx, axis): (Transpose) UnsortedSegmentSum(g', idx,
 * table dim) (Transpose back); the indices get none (§6) */
static void bp_gather(Ad *a, Node *n, const GV *g, int gop)
{
	if (!wants(a, n, 0))
		return;
	GV t = gv_arg(n, 0), ix = gv_arg(n, 1);
	Abs ta = tensor_abs(&t);
	int64_t axis = 0;
	get_int(n, 2, "axis", &axis);
	int64_t td[MAX_RANK], gd[MAX_RANK];
	int rt = dims_of(&ta, td), rg = dims_of(&g[0].a, gd);
	int ri = ix.a.shape.kind == SK_DIMS ? ix.a.shape.rank : 0;
	if (rt < 0 || rg < 0)
		return;
	if (axis < 0)
		axis += rt;
	GV d = g[0];
	if (axis > 0) {
		/* bring the index dimensions to the front */
		int64_t perm[MAX_RANK], pd[MAX_RANK];
		int k = 0;
		for (int i = 0; i < ri; i++)
			perm[k++] = axis + i;
		for (int i = 0; i < axis; i++)
			perm[k++] = i;
		for (int i = (int)axis + ri; i < rg; i++)
			perm[k++] = i;
		for (int i = 0; i < rg; i++)
			pd[i] = gd[perm[i]];
		Abs pa = tensor_like(a, &g[0].a, pd, rg);
		d = gv_node(op2(a, OP_Transpose, d, c_ints(a, perm, rg), &pa));
	}
	int64_t sd[MAX_RANK];
	int rs = 0;
	sd[rs++] = td[axis];
	for (int i = 0; i < rt; i++)
		if (i != axis)
			sd[rs++] = td[i];
	Abs sa = tensor_like(a, &ta, sd, rs);
	Node *s = op3(a, gop, d, ix, c_int(td[axis]), &sa);
	GV r = gv_node(s);
	if (axis > 0) {
		int64_t perm[MAX_RANK];
		int k = 0;
		for (int i = 1; i <= axis; i++)
			perm[k++] = i;
		perm[k++] = 0;
		for (int i = (int)axis + 1; i < rt; i++)
			perm[k++] = i;
		r = gv_node(op2(a, OP_Transpose, r, c_ints(a, perm, rt), &ta));
	}
	give(a, n, 0, r);
}

/* StridedSliceGrad(g, local x shape, begin, end, strides), the masks as
 * attributes (§2.1) */
static void bp_stridedslice(Ad *a, Node *n, const GV *g, int gop)
{
	static const char *const masks[] = {"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
	                                    "shrink_axis_mask"};
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	int64_t xd[MAX_RANK];
	int r = dims_of(&xa, xd);
	if (r < 0 || n->nargs < 4)
		return;
	Node *c = emit(a, gop, 5, &xa);
	set(c, 0, g[0]);
	set(c, 1, c_ints(a, xd, r));
	for (uint32_t k = 1; k < 4; k++)
		set(c, k + 1, gv_arg(n, k));
	for (int k = 0; k < 5; k++) {
		int64_t v = 0;
		get_int(n, 4 + (uint32_t)k, masks[k], &v);
		attr_put(a, &c->pattrs, masks[k], value_int(v, NT_I64));
	}
	c->has_pattrs = 1;
	give(a, n, 0, gv_node(c));
}

/* Concat(MakeTuple(x...), axis): Split(g, axis, n) when the inputs are
 * equally sized on axis, else one Slice per input (§2.1) */
static void bp_concat(Ad *a, Node *n, const GV *g, int gop)
{
	Node *mt = arg_node(n, 0);
	if (!mt || mt->op != OP_MakeTuple)
		return;
	int64_t axis = 0, gd[MAX_RANK];
	get_int(n, 1, "axis", &axis);
	int rg = dims_of(&g[0].a, gd);
	if (rg <= 0)
		return;
	if (axis < 0)
		axis += rg;
	int equal = 1;
	for (uint32_t k = 0; k < mt->nargs; k++) {
		GV x = gv_arg(mt, k);
		if (x.a.shape.kind != SK_DIMS || x.a.shape.dims[axis] * (int64_t)mt->nargs != gd[axis])
			equal = 0;
	}
	if (equal) {
		uint32_t cnt = mt->nargs;
		Abs ta = {0};
		ta.tstr = lower_sym("Tuple");
		ta.shape.kind = SK_TUPLE;
		ta.shape.rank = (uint8_t)cnt;
		ta.shape.sub = arena_alloc(a->m->arena, cnt * sizeof(Shape));
		for (uint32_t k = 0; k < cnt; k++)
			ta.shape.sub[k] = gv_arg(mt, k).a.shape;
		Node *s = op3(a, gop, g[0], c_int(axis), c_int(cnt), &ta);
		attr_put(a, &s->pattrs, "num_split", value_int(cnt, NT_I64));
		s->has_pattrs = 1;
		for (uint32_t k = 0; k < cnt; k++) {
			GV x = gv_arg(mt, k);
			Abs xa = tensor_abs(&x);
			Node *e = op2(a, OP_TupleGetItem, gv_node(s), c_int(k), &xa);
			give_elem(a, mt, k, gv_node(e));
		}
		return;
	}
	int64_t off = 0;
	for (uint32_t k = 0; k < mt->nargs; k++) {
		GV x = gv_arg(mt, k);
		Abs xa = tensor_abs(&x);
		int64_t b[MAX_RANK] = {0}, sz[MAX_RANK];
		int rx = dims_of(&xa, sz);
		if (rx != rg)
			return;
		b[axis] = off;
		off += sz[axis];
		Node *sl = op3(a, OP_Slice, g[0], c_ints(a, b, rx), c_ints(a, sz, rx), &xa);
		give_elem(a, mt, k, gv_node(sl));
	}
}

/* Split(x, axis, n) -> tuple: Concat(MakeTuple(douts, zeros for the
 * missing ones), axis) */
static void bp_split(Ad *a, Node *n, const GV *g, int gop)
{
	(void)g;
	Tup *p = tup_of(a, n);
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	int64_t axis = 0, cnt = 0;
	get_int(n, 1, "axis", &axis);
	if (get_int(n, 2, "output_num", &cnt) < 0)
		get_int(n, 2, "num_split", &cnt);
	if (!p || cnt <= 0 || (uint32_t)cnt > p->n)
		return;
	Node *mt = emit(a, OP_MakeTuple, (uint32_t)cnt, NULL);
	Abs ta = {0};
	ta.tstr = lower_sym("Tuple");
	ta.shape.kind = SK_TUPLE;
	ta.shape.rank = (uint8_t)cnt;
	ta.shape.sub = arena_alloc(a->m->arena, (size_t)cnt * sizeof(Shape));
	a->e.out.n--; /* placed after the zeros it may need */
	for (int64_t k = 0; k < cnt; k++) {
		GV d = slot_get(&p->g[k]);
		if (!d.set) {
			GV e = elem(a, n, (uint32_t)k, &xa);
			d = gv_node(op1(a, OP_ZerosLike, e, &e.a));
		}
		set(mt, (uint32_t)k, d);
		ta.shape.sub[k] = d.a.shape;
	}
	mt->out = ta;
	vec_push(&a->e.out, mt);
	give(a, n, 0, gv_node(op2(a, gop, gv_node(mt), c_int(axis), &xa)));
}

/* ------------------------------------------------ issue 19's operators */

static GV none_gv(void)
{
	return gv_val(value_word("None"), train_abs_word("None"));
}

/* forward operand k, None past the end (the older 8-input form) */
static GV arg_or_none(const Node *n, uint32_t k)
{
	return k < n->nargs ? gv_arg(n, k) : none_gv();
}

/* ------------------------------------------------------------ GroupedMatmul */

/* MindSpore builds GroupedMatmul's bprop for one form only (mindspore-ai/
 * mindspore, mindspore/ccsrc/frontend/expander/bprop/grad_ops/
 * grad_math_ops.cc, and the note of its op definition): split_item 3,
 * group_type 0, no bias or quantization operands, no transposes.  sappc
 * builds it for one x and one stacked (E, K, N) weight, both lists made
 * here (MakeTuple); any other form has no gradient rule. */
static int gmm_differentiable(const Node *n)
{
	GmmInfo gi;
	char why[8];
	return ir_gmm_info(n, &gi, why, sizeof why) == 1 && gi.split_item == 3 && gi.group_type == 0 && gi.nx == 1 &&
	       gi.nw == 1 && gi.wstack && ir_node_is_op(arg_node(n, 0), OP_MakeTuple) &&
	       ir_node_is_op(arg_node(n, 1), OP_MakeTuple);
}

/* GroupedMatmul([p], [q], None x5, group_list, 3, type, False, False)
 * and its single result (an element of the list it gives) */
static GV gmm_call(Ad *a, int gop, GV p, GV q, GV gl, int64_t type, const Abs *out)
{
	Abs pa = lower_abs_tuple(a->m, &p.a, 1, 0), qa = lower_abs_tuple(a->m, &q.a, 1, 0);
	Abs oa = lower_abs_tuple(a->m, out, 1, 0);
	Node *mp = op1(a, OP_MakeTuple, p, &pa), *mq = op1(a, OP_MakeTuple, q, &qa);
	Node *c = emit(a, gop, 12, &oa);
	set(c, 0, gv_node(mp));
	set(c, 1, gv_node(mq));
	for (uint32_t k = 2; k <= 6; k++)
		set(c, k, none_gv());
	set(c, 7, gl);
	set(c, 8, c_int(3));
	set(c, 9, c_int(type));
	set(c, 10, c_bool(0));
	set(c, 11, c_bool(0));
	return gv_node(op2(a, OP_TupleGetItem, gv_node(c), c_int(0), out));
}

/* dx = GroupedMatmul([dy], [w^T]) grouped by rows as the forward (w^T:
 * each expert's (N, K)); dw = GroupedMatmul([x^T], [dy]) grouped along
 * the shared row axis (group_type 2), an (E, K, N) like the weight.  The
 * gradients go to element 0 of the x and weight lists.  On a rank the
 * blocks are local: dy (M, N/n), w (E, K/k, N/n), x (M, K/k). */
static void bp_gmm(Ad *a, Node *n, const GV *g, int gop)
{
	Node *xl = arg_node(n, 0), *wl = arg_node(n, 1);
	if (!g[0].set || !xl || !wl)
		return;
	GV x = gv_arg(xl, 0), w = gv_arg(wl, 0), gl = gv_arg(n, 7);
	Abs xa = tensor_abs(&x), wa = tensor_abs(&w);
	int64_t xd[MAX_RANK], wd[MAX_RANK];
	if (dims_of(&xa, xd) != 2 || dims_of(&wa, wd) != 3)
		return;
	if (wants(a, n, 0)) {
		int64_t perm[3] = {0, 2, 1}, td[3] = {wd[0], wd[2], wd[1]};
		Abs ta = tensor_like(a, &wa, td, 3);
		Node *wt = op2(a, OP_Transpose, w, c_ints(a, perm, 3), &ta);
		give_elem(a, xl, 0, gmm_call(a, gop, g[0], gv_node(wt), gl, 0, &xa));
	}
	if (wants(a, n, 1)) {
		int64_t perm[2] = {1, 0}, td[2] = {xd[1], xd[0]};
		Abs ta = tensor_like(a, &xa, td, 2);
		Node *xt = op2(a, OP_Transpose, x, c_ints(a, perm, 2), &ta);
		give_elem(a, wl, 0, gmm_call(a, gop, gv_node(xt), g[0], gl, 2, &wa));
	}
}

/* FlashAttentionScore -> (softmax_max, softmax_sum, softmax_out,
 * attention_out): FlashAttentionScoreGrad(q, k, v, dout, real_shift,
 * drop_mask, padding_mask, attn_mask, softmax_max, softmax_sum,
 * softmax_out, attention_out, prefix, actual_seq_qlen, actual_seq_kvlen,
 * head_num, keep_prob, scale_value, pre_tokens, next_tokens,
 * inner_precise, input_layout, sparse_mode) -> dq, dk, dv (and dpse, not
 * taken: real_shift carries no weight here).  On a rank it runs on the
 * rank's block with the local head count, as the forward does. */
static void bp_flash_attention(Ad *a, Node *n, const GV *g, int gop)
{
	static const uint32_t ops[] = {0, 1, 2};
	GV q = gv_arg(n, 0);
	Abs qa = tensor_abs(&q);
	if (!g[3].set)
		return;
	Abs ta = tuple_abs(a, n, ops, 3);
	GV o[4];
	for (uint32_t e = 0; e < 4; e++)
		o[e] = elem(a, n, e, &qa);
	Node *c = emit(a, gop, 23, &ta);
	for (uint32_t k = 0; k < 3; k++)
		set(c, k, gv_arg(n, k));
	set(c, 3, g[3]);
	for (uint32_t k = 3; k < 7; k++) /* real_shift, drop_mask, padding_mask, attn_mask */
		set(c, k + 1, arg_or_none(n, k));
	for (uint32_t e = 0; e < 4; e++)
		set(c, 8 + e, o[e]);
	for (uint32_t k = 7; k < 18; k++) /* prefix, sequence lengths, the settings */
		set(c, k + 5, arg_or_none(n, k));
	c->pattrs = n->pattrs;
	c->has_pattrs = n->has_pattrs;
	give_items(a, n, c, ops, 3);
}

/* RotaryPositionEmbeddingGrad(dy, cos, sin, x, mode) -> dx, dcos, dsin */
static void bp_rope(Ad *a, Node *n, const GV *g, int gop)
{
	static const uint32_t ops[] = {0, 1, 2};
	Abs ta = tuple_abs(a, n, ops, 3);
	Node *c = emit(a, gop, 5, &ta);
	set(c, 0, g[0]);
	set(c, 1, gv_arg(n, 1));
	set(c, 2, gv_arg(n, 2));
	set(c, 3, gv_arg(n, 0));
	set(c, 4, n->nargs > 3 ? gv_arg(n, 3) : c_int(0));
	give_items(a, n, c, ops, 3);
}

/* SwigluGrad(dy, x, dim) -> dx */
static void bp_swiglu(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	int64_t dim = -1;
	get_int(n, 1, "dim", &dim);
	give(a, n, 0, gv_node(op3(a, gop, g[0], x, c_int(dim), &xa)));
}

/* PReLUGrad(dy, x, weight) -> dx, dweight */
static void bp_prelu(Ad *a, Node *n, const GV *g, int gop)
{
	static const uint32_t ops[] = {0, 1};
	Abs ta = tuple_abs(a, n, ops, 2);
	Node *c = op3(a, gop, g[0], gv_arg(n, 0), gv_arg(n, 1), &ta);
	give_items(a, n, c, ops, 2);
}

/* L2NormalizeGrad(x, y, dy) with the forward's axis and epsilon -> dx */
static void bp_l2normalize(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Node *c = op3(a, gop, x, gv_node(n), g[0], &xa);
	c->pattrs = n->pattrs;
	c->has_pattrs = n->has_pattrs;
	give(a, n, 0, gv_node(c));
}

/* SliceGrad(dy, x, begin, size) -> dx (the rank's own begin and size) */
static void bp_slice(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Node *c = emit(a, gop, 4, &xa);
	set(c, 0, g[0]);
	set(c, 1, x);
	set(c, 2, gv_arg(n, 1));
	set(c, 3, gv_arg(n, 2));
	give(a, n, 0, gv_node(c));
}

/* CumSum(dy, axis, exclusive, !reverse): the sums run the other way */
static void bp_cumsum(Ad *a, Node *n, const GV *g, int gop)
{
	int64_t axis = 0;
	get_int(n, 1, "axis", &axis);
	int excl = ir_node_flag(n, 2, "exclusive", NULL), rev = ir_node_flag(n, 3, "reverse", NULL);
	Node *c = emit(a, gop, 4, &g[0].a);
	set(c, 0, g[0]);
	set(c, 1, c_int(axis));
	set(c, 2, c_bool(excl));
	set(c, 3, c_bool(!rev));
	give(a, n, 0, gv_node(c));
}

/* Dense(x, w, b), y = x w^T + b over x's last axis (grad_nn_ops.cc,
 * Dense): with d = Reshape(dout, (rows, N)), dx = Reshape(MatMul(d, w),
 * x's shape), dw = MatMul(d, Reshape(x, (rows, K)), 1, 0), db = SumExt(d,
 * (0,), False).  MindSpore writes the bias-less products as MatMulExt; they
 * compute the same, so both forms emit MatMul here. */
static void bp_dense(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0), w = gv_arg(n, 1);
	Abs xa = tensor_abs(&x), wa = tensor_abs(&w);
	int64_t xd[MAX_RANK], wd[MAX_RANK], gd[MAX_RANK];
	int rx = dims_of(&xa, xd), rw = dims_of(&wa, wd), rg = dims_of(&g[0].a, gd);
	if (rx < 1 || rw != 2 || rg < 1)
		return;
	int64_t rows = 1;
	for (int i = 0; i + 1 < rg; i++)
		rows *= gd[i];
	int64_t d2[2] = {rows, gd[rg - 1]}, x2[2] = {rows, xd[rx - 1]};
	Abs da = tensor_like(a, &g[0].a, d2, 2);
	GV d = reshape_to(a, g[0], &da);
	if (wants(a, n, 0)) {
		Abs o = tensor_like(a, &xa, x2, 2);
		Node *r = mm(a, gop, d, w, 0, 0, &o);
		give(a, n, 0, reshape_to(a, gv_node(r), &xa));
	}
	if (wants(a, n, 1)) {
		Abs x2a = tensor_like(a, &xa, x2, 2);
		GV xr = reshape_to(a, x, &x2a);
		give(a, n, 1, gv_node(mm(a, gop, d, xr, 1, 0, &wa)));
	}
	if (n->nargs > 2 && wants(a, n, 2)) {
		GV b = gv_arg(n, 2);
		Abs ba = tensor_abs(&b);
		int64_t zero = 0;
		give(a, n, 2, gv_node(op3(a, OP_SumExt, d, c_ints(a, &zero, 1), c_bool(0), &ba)));
	}
}

/* CumProd(x, axis, exclusive, reverse) (grad_math_ops.cc, CumProd): the
 * product again, p = CumProd(x, axis, exclusive, reverse), then dx =
 * CumSum(p * dout, axis, exclusive, !reverse) / x; an axis of length 1
 * passes dout through. */
static void bp_cumprod(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	int64_t axis = 0, xd[MAX_RANK];
	get_int(n, 1, "axis", &axis);
	int r = dims_of(&xa, xd);
	int excl = ir_node_flag(n, 2, "exclusive", NULL), rev = ir_node_flag(n, 3, "reverse", NULL);
	if (r >= 0 && axis < 0)
		axis += r;
	int64_t numel = 1;
	for (int i = 0; i < r; i++)
		numel *= xd[i];
	if (r < 0 || numel <= 1 || (axis >= 0 && axis < r && xd[axis] == 1)) {
		give(a, n, 0, g[0]);
		return;
	}
	Node *p = emit(a, OP_CumProd, 4, &xa);
	set(p, 0, x);
	set(p, 1, c_int(axis));
	set(p, 2, c_bool(excl));
	set(p, 3, c_bool(rev));
	Node *m = op2(a, OP_Mul, gv_node(p), g[0], &xa);
	Node *s = emit(a, gop, 4, &xa);
	set(s, 0, gv_node(m));
	set(s, 1, c_int(axis));
	set(s, 2, c_bool(excl));
	set(s, 3, c_bool(!rev));
	give(a, n, 0, gv_node(op2(a, OP_RealDiv, gv_node(s), x, &xa)));
}

/* LpNorm(x) with attributes p, axis, keep_dims (grad_math_ops.cc, LpNorm):
 * dout and out get back the reduced axes (ExpandDims), then p = 1: dout *
 * Sign(x); p = 2: x * (dout / out); else |x|^(p-2) x * (dout / out^(p-1));
 * p = 0 has none. */
static void bp_lpnorm(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	int64_t p = 2, ax[MAX_RANK], xd[MAX_RANK];
	const Value *pv = ir_attr_get(&n->pattrs, "p");
	if (pv)
		value_get_int(pv, &p);
	int r = dims_of(&xa, xd), k = get_axes(n, 99, "axis", ax);
	if (r < 0 || p == 0)
		return;
	GV d = g[0], out = gv_node(n);
	if (!ir_node_flag(n, 99, "keep_dims", NULL) && r > 0) {
		/* the reduced axes, ascending, each back as 1 */
		unsigned red = 0;
		for (int i = 0; i < k; i++)
			red |= 1u << (ax[i] < 0 ? ax[i] + r : ax[i]);
		if (k <= 0)
			red = (1u << r) - 1;
		int64_t cur[MAX_RANK];
		int rc = 0;
		for (int i = 0; i < r; i++)
			if (!(red >> i & 1))
				cur[rc++] = xd[i];
		for (int i = 0; i < r; i++) {
			if (!(red >> i & 1))
				continue;
			/* insert a 1 at position i of the current shape */
			memmove(cur + i + 1, cur + i, (size_t)(rc - i) * sizeof *cur);
			cur[i] = 1;
			rc++;
			Abs ea = tensor_like(a, &xa, cur, rc);
			d = gv_node(op2(a, OP_ExpandDims, d, c_int(i), &ea));
			out = gv_node(op2(a, OP_ExpandDims, out, c_int(i), &ea));
		}
	}
	Abs ka = d.a;
	if (p == 1) {
		Node *s = op1(a, OP_Sign, x, &xa);
		give(a, n, 0, gv_node(op2(a, OP_Mul, d, gv_node(s), &xa)));
		return;
	}
	GV scaled = x, den = out;
	if (p != 2) {
		Node *ab = op1(a, OP_Abs, x, &xa);
		Node *pw = op2(a, OP_Pow, gv_node(ab), c_scalar(a, xa.dtype, (double)(p - 2)), &xa);
		scaled = gv_node(op2(a, OP_Mul, gv_node(pw), x, &xa));
		den = gv_node(op2(a, OP_Pow, out, c_scalar(a, xa.dtype, (double)(p - 1)), &ka));
	}
	Node *sv = op2(a, OP_RealDiv, d, den, &ka);
	give(a, n, 0, gv_node(op2(a, OP_Mul, scaled, gv_node(sv), &xa)));
}

/* The scatter both TopK's and Sort's bprops end with (grad_nn_ops.cc TopK,
 * grad_array_ops.cc Sort): indices (..., k) into the last axis (length len)
 * of a tensor of shape to, dv the values' gradient of the indices' shape.
 * Each row's indices get the row's flat offset added (a constant
 * Tensor of 0, len, 2 len, ...), then ScatterNd puts dv at those flat
 * positions of a zero tensor of every element, reshaped to `to`.  sort
 * spells the offsets as Sort's rule does (ExpandDims, not Reshape). */
static GV scatter_rows(Ad *a, GV ind, GV dv, const Abs *to, int sort)
{
	int64_t td[MAX_RANK], id[MAX_RANK];
	int rt = dims_of(to, td), ri = dims_of(&ind.a, id);
	if (rt < 1 || ri < 1)
		return dv;
	int64_t k = id[ri - 1], len = td[rt - 1], numel = 1, rows = 1;
	for (int i = 0; i < rt; i++)
		numel *= td[i];
	for (int i = 0; i + 1 < ri; i++)
		rows *= id[i];
	int64_t i2[2] = {rows, k}, col[2] = {rows, 1}, flat = rows * k, fl2[2] = {flat, 1};
	Abs i2a = tensor_like(a, &ind.a, i2, 2);
	GV ind2 = reshape_to(a, ind, &i2a);
	int64_t *off = xmalloc((size_t)(rows ? rows : 1) * sizeof *off);
	for (int64_t r = 0; r < rows; r++)
		off[r] = r * len;
	GV rng = gv_val(train_int_list_tensor(a->m, ind.a.dtype, off, (uint32_t)rows),
	                train_abs_tensor(a->m, ind.a.dtype, &rows, 1, 1));
	free(off);
	Abs cola = tensor_like(a, &ind.a, col, 2);
	GV rc = sort ? gv_node(op2(a, OP_ExpandDims, rng, c_int(-1), &cola))
	             : gv_node(op2(a, OP_Reshape, rng, c_ints(a, col, 2), &cola));
	GV sum = gv_node(op2(a, OP_Add, ind2, rc, &i2a));
	GV fi;
	if (sort) {
		Abs fa = tensor_like(a, &ind.a, &flat, 1);
		Abs fea = tensor_like(a, &ind.a, fl2, 2);
		GV f = gv_node(op2(a, OP_Reshape, sum, c_ints(a, &flat, 1), &fa));
		fi = gv_node(op2(a, OP_ExpandDims, f, c_int(-1), &fea));
	} else {
		Abs fea = tensor_like(a, &ind.a, fl2, 2);
		fi = gv_node(op2(a, OP_Reshape, sum, c_ints(a, fl2, 2), &fea));
	}
	Abs dva = tensor_like(a, &dv.a, &flat, 1);
	GV d1 = reshape_to(a, dv, &dva);
	Abs oa = tensor_like(a, &dv.a, &numel, 1);
	Node *sc = op3(a, OP_ScatterNd, fi, d1, c_ints(a, &numel, 1), &oa);
	Abs ta = tensor_like(a, &dv.a, td, rt);
	return reshape_to(a, gv_node(sc), &ta);
}

/* TopK(x, k, sorted) -> (values, indices) along the last axis: the
 * values' gradient scattered to the forward's indices (grad_nn_ops.cc,
 * TopK); the indices carry none */
static void bp_topk(Ad *a, Node *n, const GV *g, int gop)
{
	(void)gop;
	(void)g;
	Tup *p = tup_of(a, n);
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	if (!p || !p->g[0].a || xa.shape.kind != SK_DIMS || n->out.shape.kind != SK_TUPLE || n->out.shape.rank < 2)
		return;
	Abs ia = tensor_like(a, &xa, n->out.shape.sub[1].dims, n->out.shape.sub[1].rank);
	ia.dtype = lower_sym("Int32");
	ia.tstr = lower_sym("Tensor[Int32]");
	give(a, n, 0, scatter_rows(a, elem(a, n, 1, &ia), slot_get(&p->g[0]), &xa, 0));
}

/* Sort(x, axis, descending) -> (values, indices) (grad_array_ops.cc, Sort):
 * the indices again from TopK(x', len, sorted) on x' = x (Neg(x) when
 * ascending) with axis swapped to the end, the values' gradient (negated
 * alike) scattered there, swapped back and negated back */
static void bp_sort(Ad *a, Node *n, const GV *g, int gop)
{
	(void)g;
	Tup *p = tup_of(a, n);
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	int64_t axis = -1, xd[MAX_RANK];
	int r = dims_of(&xa, xd);
	if (!p || !p->g[0].a || r < 1)
		return;
	get_int(n, 1, "axis", &axis);
	if (axis < 0)
		axis += r;
	if (axis < 0 || axis >= r)
		return;
	int desc = ir_node_flag(n, 2, "descending", NULL);
	GV in = x, dv = slot_get(&p->g[0]);
	if (!desc) {
		in = gv_node(op1(a, OP_Neg, x, &xa));
		dv = gv_node(op1(a, OP_Neg, dv, &dv.a));
	}
	int64_t perm[MAX_RANK], td[MAX_RANK];
	for (int i = 0; i < r; i++)
		perm[i] = i;
	perm[axis] = r - 1;
	perm[r - 1] = axis;
	for (int i = 0; i < r; i++)
		td[i] = xd[perm[i]];
	Abs ta = tensor_like(a, &xa, td, r);
	int swap = axis != r - 1;
	if (swap)
		in = gv_node(op2(a, OP_Transpose, in, c_ints(a, perm, r), &ta));
	/* TopK -> (values, indices), indices as Int32 */
	Abs ia = ta;
	ia.dtype = lower_sym("Int32");
	ia.tstr = lower_sym("Tensor[Int32]");
	Abs tup = {0};
	char tbuf[96];
	snprintf(tbuf, sizeof tbuf, "Tuple[Tensor[%s],Tensor[Int32]]", xa.dtype ? sym_str(xa.dtype) : "Float32");
	tup.tstr = intern_cstr(tbuf);
	tup.shape.kind = SK_TUPLE;
	tup.shape.rank = 2;
	tup.shape.sub = arena_alloc(a->m->arena, 2 * sizeof(Shape));
	tup.shape.sub[0] = tup.shape.sub[1] = ta.shape;
	Node *tk = op2(a, gop, in, c_int(td[r - 1]), &tup);
	lower_attr_put(a->m, &tk->pattrs, "sorted", value_bool(1));
	tk->has_pattrs = 1;
	GV ind = gv_node(op2(a, OP_TupleGetItem, gv_node(tk), c_int(1), &ia));
	if (swap)
		dv = gv_node(op2(a, OP_Transpose, dv, c_ints(a, perm, r), &ta));
	GV dx = scatter_rows(a, ind, dv, &ta, 1);
	if (swap)
		dx = gv_node(op2(a, OP_Transpose, dx, c_ints(a, perm, r), &xa));
	if (!desc)
		dx = gv_node(op1(a, OP_Neg, dx, &xa));
	give(a, n, 0, dx);
}

/* Tile(x, multiples): Reshape g to (m0, x0, m1, x1, ...), sum the m axes */
static void bp_tile(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	int64_t mul[MAX_RANK], xd[MAX_RANK];
	int k = get_axes(n, 1, "multiples", mul), r = dims_of(&xa, xd);
	if (r < 0 || k != r || 2 * r > MAX_RANK) {
		give(a, n, 0, g[0]);
		return;
	}
	int64_t sd[MAX_RANK], ax[MAX_RANK];
	for (int i = 0; i < r; i++) {
		sd[2 * i] = mul[i];
		sd[2 * i + 1] = xd[i];
		ax[i] = 2 * i;
	}
	Abs sa = tensor_like(a, &xa, sd, 2 * r);
	GV s = reshape_to(a, g[0], &sa);
	give(a, n, 0, gv_node(op3(a, gop, s, c_ints(a, ax, r), c_bool(0), &xa)));
}

/* SoftmaxCrossEntropyWithLogits -> (loss, backprop):
 * dlogits = backprop * ExpandDims(g[0], -1) (§6); labels get none */
static void bp_sce(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	if (!g[0].set)
		return;
	GV bp = elem(a, n, 1, &xa);
	int64_t d[MAX_RANK];
	int r = dims_of(&g[0].a, d);
	if (r < 0)
		return;
	d[r] = 1;
	Abs ea = tensor_like(a, &g[0].a, d, r + 1);
	Node *e = op2(a, OP_ExpandDims, g[0], c_int(-1), &ea);
	give(a, n, 0, gv_node(op2(a, gop, bp, gv_node(e), &xa)));
}

/* SparseSoftmaxCrossEntropyWithLogits(logits, labels) with is_grad, then
 * Depend(., out), then Mul(., g) (§6) */
static void bp_sparse_sce(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Node *c = op2(a, gop, x, gv_arg(n, 1), &xa);
	attr_put(a, &c->pattrs, "is_grad", value_bool(1));
	c->has_pattrs = 1;
	Node *d = op2(a, OP_Depend, gv_node(c), gv_node(n), &xa);
	give(a, n, 0, gv_node(op2(a, OP_Mul, gv_node(d), g[0], &xa)));
}

/* _VirtualDiv(divisor): RealDiv(g, divisor) (grad_comm_ops.py) */
static void bp_virtualdiv(Ad *a, Node *n, const GV *g, int gop)
{
	int64_t div = 1;
	get_int(n, 1, "divisor", &div);
	if (div == 1) {
		give(a, n, 0, g[0]);
		return;
	}
	give(a, n, 0, gv_node(op2(a, gop, g[0], c_scalar(a, g[0].a.dtype, (double)div), &g[0].a)));
}

/* ------------------------------------------------------------ communication */

/* the instance name of a bprop communication op: prefix + the forward's */
static Sym grad_instance(const Node *n, const char *prefix)
{
	return n->instance ? sym_prefixed(prefix, n->instance) : 0;
}

static void put(Ad *a, Node *c, const char *key, Value v)
{
	attr_put(a, &c->pattrs, key, v);
}

static void put_from(Ad *a, Node *c, const Node *n, const char *key, const char *as)
{
	const Value *v = ir_attr_get(&n->pattrs, key);
	if (v)
		put(a, c, as ? as : key, *v);
}

/* the group attributes every communication op gets, from the forward op's
 * (a bprop op has no group_ranks, §2.2); comm_reuse and rank_list when its
 * fusion is 0 */
static void comm_group(Ad *a, Node *c, const Node *n, int fusion0)
{
	put_from(a, c, n, "group_rank_ids", NULL);
	if (fusion0) {
		put(a, c, "comm_reuse", value_bool(1));
		put_from(a, c, n, "group_rank_ids", "rank_list");
	}
	c->has_pattrs = 1;
	lower_order_attrs(&c->pattrs);
}

/* a gradient AllReduce(sum) over the group of the forward op `from` */
static void grad_allreduce_attrs(Ad *a, Node *c, const Node *from)
{
	put(a, c, "op", value_str("sum"));
	put_from(a, c, from, "group", NULL);
	put(a, c, "fusion", value_int(0, NT_I64));
	put(a, c, "index", value_int(0, NT_I64));
	put(a, c, "no_eliminate", value_bool(1));
	comm_group(a, c, from, 1);
}

static Node *comm_op(Ad *a, int op, GV x, const Abs *out, const Node *n, const char *prefix)
{
	Node *c = op1(a, op, x, out);
	c->instance = grad_instance(n, prefix);
	return c;
}

/* AllReduce(sum) -> AllReduce(sum, same group), instance "grad" + inst;
 * max/min: then the winners' mask; prod: Mul(g, out) first, RealDiv by x */
static void bp_allreduce(Ad *a, Node *n, const GV *g, int gop)
{
	const Value *opv = ir_attr_get(&n->pattrs, "op");
	const char *op = opv && value_text(opv) ? sym_str(value_text(opv)) : "sum";
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	GV in = g[0];
	if (strcmp(op, "prod") == 0)
		in = gv_node(op2(a, OP_Mul, g[0], gv_node(n), &xa));
	Node *c = comm_op(a, gop, in, &xa, n, "grad");
	AttrList *memo;
	if (!comm_attrs(a, c, n, OP_AllReduce, &memo)) {
		grad_allreduce_attrs(a, c, n);
		comm_attrs_done(a, c, memo);
	}
	GV d = gv_node(c);
	if (strcmp(op, "max") == 0 || strcmp(op, "min") == 0) {
		Abs ba = xa;
		ba.dtype = lower_sym("Bool");
		ba.tstr = lower_sym("Tensor[Bool]");
		Node *eq = op2(a, OP_Equal, x, gv_node(n), &ba);
		GV t = gv_val(value_word(sym_str(xa.dtype)), train_abs_word("TypeType"));
		Node *m = op2(a, OP_Cast, gv_node(eq), t, &xa);
		d = gv_node(op2(a, OP_Mul, d, gv_node(m), &xa));
	} else if (strcmp(op, "prod") == 0) {
		d = gv_node(op2(a, OP_RealDiv, d, x, &xa));
	}
	give(a, n, 0, d);
}

static int is_opt_gather(const Node *n)
{
	/* not sym_str: the lowering's deferred names would be interned, a
	 * hundred thousand of them */
	return n->instance && sym_has_prefix(n->instance, "parallel_optimizer_allgather");
}

/* AllGather -> ReduceScatter(sum, same group), instance "grad_" + inst,
 * fusion = the AllGather's; x 1/rank_size when mean_flag.  The optimizer
 * parallel AllGather's is gradcomm's (after the mirror, §3.3): its dout
 * goes to the weight as it is, and the gather is recorded. */
static void bp_allgather(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	if (is_opt_gather(n)) {
		Node *p = arg_node(n, 0);
		while (p && p->kind == NK_CNODE && p->op == OP_Load)
			p = arg_node(p, 0);
		uint32_t i = p ? idx(a, p) : UINT32_MAX;
		if (i != UINT32_MAX && p->kind == NK_PARAM) {
			a->gather[i] = n;
			give_node(a, p, g[0]);
			return;
		}
	}
	Node *c = comm_op(a, gop, g[0], &xa, n, "grad_");
	int64_t fusion = 0, rs = 1;
	AttrList *memo;
	if (!comm_attrs(a, c, n, OP_AllGather, &memo)) {
		const Value *f = ir_attr_get(&n->pattrs, "fusion");
		if (f)
			value_get_int(f, &fusion);
		put(a, c, "op", value_str("sum"));
		put_from(a, c, n, "group", NULL);
		put_from(a, c, n, "rank_size", NULL);
		put(a, c, "fusion", value_int(fusion, NT_I64));
		put(a, c, "no_eliminate", value_bool(1));
		comm_group(a, c, n, fusion == 0);
		comm_attrs_done(a, c, memo);
	}
	GV d = gv_node(c);
	int mean = 0;
	const Value *mf = ir_attr_get(&n->pattrs, "mean_flag");
	const Value *rv = ir_attr_get(&n->pattrs, "rank_size");
	if (rv)
		value_get_int(rv, &rs);
	if (mf && value_truthy(mf, &mean) && mean && rs > 1)
		d = gv_node(op2(a, OP_Mul, d, c_scalar(a, xa.dtype, 1.0 / (double)rs), &xa));
	give(a, n, 0, d);
}

/* ReduceScatter -> AllGather(same group), instance "grad" + inst */
static void bp_reducescatter(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Node *c = comm_op(a, gop, g[0], &xa, n, "grad");
	AttrList *memo;
	if (!comm_attrs(a, c, n, OP_ReduceScatter, &memo)) {
		put_from(a, c, n, "group", NULL);
		put_from(a, c, n, "rank_size", NULL);
		put(a, c, "fusion", value_int(0, NT_I64));
		put(a, c, "mean_flag", value_bool(0));
		put(a, c, "no_eliminate", value_bool(1));
		comm_group(a, c, n, 1);
		comm_attrs_done(a, c, memo);
	}
	give(a, n, 0, gv_node(c));
}

/* AlltoAll(split_count, split_dim, concat_dim) -> the same with the split
 * and concat axes swapped, instance "grad" + inst */
static void bp_alltoall(Ad *a, Node *n, const GV *g, int gop)
{
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Node *c = comm_op(a, gop, g[0], &xa, n, "grad");
	AttrList *memo;
	if (!comm_attrs(a, c, n, OP_AlltoAll, &memo)) {
		put_from(a, c, n, "split_count", NULL);
		put_from(a, c, n, "concat_dim", "split_dim");
		put_from(a, c, n, "split_dim", "concat_dim");
		put_from(a, c, n, "group", NULL);
		put_from(a, c, n, "rank_size", NULL);
		put(a, c, "no_eliminate", value_bool(1));
		comm_group(a, c, n, 1);
		comm_attrs_done(a, c, memo);
	}
	give(a, n, 0, gv_node(c));
}

/* the forward Send's bprop: Receive(Tensor 0) of the gradient from the
 * Send's peer (§4.4): same sr_tag, src_rank = dest_rank, group = group_back */
static void bp_send(Ad *a, Node *n, const GV *g, int gop)
{
	(void)g;
	GV x = gv_arg(n, 0);
	Abs xa = tensor_abs(&x);
	Node *c = op1(a, gop, c_scalar(a, xa.dtype, 0), &xa);
	put_from(a, c, n, "sr_tag", NULL);
	put_from(a, c, n, "dest_rank", "src_rank");
	put_from(a, c, n, "shape", NULL);
	Value dt = value_word(sym_str(xa.dtype ? xa.dtype : lower_sym("Float32")));
	put(a, c, "dtype", dt);
	put_from(a, c, n, "group_back", "group");
	put_from(a, c, n, "group_back", NULL);
	put(a, c, "no_eliminate", value_bool(1));
	c->has_pattrs = 1;
	lower_order_attrs(&c->pattrs);
	give(a, n, 0, gv_node(c));
}

/* the forward Receive's bprop: Send(g) back to its peer (§4.4); the
 * placeholder operand gets no gradient */
static void bp_receive(Ad *a, Node *n, const GV *g, int gop)
{
	GV d = g[0];
	if (!d.set) {
		/* the producer waits for a gradient this stage does not make
		 * (a weight only a no-gradient operand reads): zeros */
		Abs va = train_abs_value(&n->out);
		d = gv_node(op1(a, OP_ZerosLike, gv_node(n), &va));
	}
	Node *c = op1(a, gop, d, &d.a);
	put_from(a, c, n, "sr_tag", NULL);
	put_from(a, c, n, "src_rank", "dest_rank");
	put_from(a, c, n, "group_back", "group");
	put_from(a, c, n, "group_back", NULL);
	put_from(a, c, n, "shape", NULL);
	put(a, c, "no_eliminate", value_bool(1));
	c->has_pattrs = 1;
	lower_order_attrs(&c->pattrs);
	vec_push(&a->keep, c); /* nothing reads a Send: the step's Depend keeps it */
}

/* ------------------------------------------------------------ the pass */

/* a stage boundary transfer that no gradient comes back through (pipeline.c) */
static int no_grad_back(const Node *n)
{
	return n->lay && (n->lay->flags & LAY_NOGRAD);
}

static int is_send(const Node *n)
{
	return n->kind == NK_CNODE && n->callee_kind == CK_PRIM && n->op == OP_Send;
}

/* What a stage before the last returns instead of a loss (pipeline.c):
 * Depend(zeros, MakeTuple(Sends)), or a Send.  Its backward starts at the
 * gradients the next stage sends back, not at a seed of 1. */
static int stage_output(const Node *n)
{
	return is_send(n) || ir_node_is_stage_zeros(n);
}

/* Which nodes need a gradient (a trainable weight or a Receive upstream,
 * through operators that carry one) and which reach the loss or a Send;
 * an operator without a bprop where both hold is an error.  0 ok. */
static int analyse(Ad *a, Node *root)
{
	Graph *g = a->g;
	uint32_t np = g->params.n;
	for (uint32_t i = 0; i < np; i++)
		a->needs[i] = (uint8_t)train_is_trainable(g->params.a[i]);
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		sweep_prefetch(g->nodes.a, i, g->nodes.n);
		Node *n = g->nodes.a[i];
		uint32_t j = np + i;
		if (n->kind != NK_CNODE || n->dead)
			continue;
		if (n->callee_kind == CK_PRIM && (n->op == OP_Receive || n->op == OP_Send) && !no_grad_back(n)) {
			/* a gradient crosses this boundary: both sides build its transfer */
			a->needs[j] = 1;
			continue;
		}
		if (rule_kind(n) == RULE_NOGRAD)
			continue;
		for (uint32_t k = 0; k < n->nargs && !a->needs[j]; k++)
			if (n->args[k].kind == V_NODE && needs(a, n->args[k].u.node))
				a->needs[j] = 1;
		if (n->callee_kind == CK_PRIM && n->op == OP_TupleGetItem && a->needs[j]) {
			int64_t e;
			Node *t = arg_node(n, 0);
			Tup *p = t && n->nargs >= 2 && value_get_int(&n->args[1], &e) && e >= 0 ? tup_of(a, t)
			                                                                              : NULL;
			if (p && (uint32_t)e < p->n && !p->fwd[e])
				p->fwd[e] = n;
		}
	}
	if (root && idx(a, root) != UINT32_MAX)
		a->reach[idx(a, root)] = 1;
	/* a node's users come after it, so its reach is known once the
	 * backward sweep has passed it: the error check rides along, and the
	 * first such node in graph order (the last one met) is reported */
	Node *bad = NULL;
	for (uint32_t i = g->nodes.n; i-- > 0;) {
		sweep_prefetch_back(g->nodes.a, i);
		Node *n = g->nodes.a[i];
		/* every boundary transfer with a gradient back builds its half of it,
		 * even when nothing here reads the value (the other rank waits) */
		if (is_send(n) || (n->kind == NK_CNODE && n->op == OP_Receive && !no_grad_back(n)))
			a->reach[np + i] = 1;
		if (!a->reach[np + i] || n->kind != NK_CNODE)
			continue;
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *t = arg_node(n, k);
			if (t && idx(a, t) != UINT32_MAX)
				a->reach[idx(a, t)] = 1;
		}
		if (!n->dead && a->needs[np + i] && rule_kind(n) == RULE_NONE)
			bad = n;
	}
	if (bad) {
		const char *what = bad->callee_kind == CK_PRIM ? sym_str(bad->prim) : "a call";
		diag_error_at(bad->loc,
		              "operator '%s' (%s) has no gradient rule, and it is on a path from a trainable "
		              "weight to the loss: the training step cannot be built (--forward-only prints the "
		              "forward graph)",
		              what, ir_node_name(bad));
		return 1;
	}
	return 0;
}

static void run_rule(Ad *a, Node *n, uint32_t j)
{
	int tuple = a->tup[j] && (n->op != OP_TupleGetItem);
	const Slot *s = tuple ? a->tup[j]->g : &a->dout[j];
	if (!is_send(n) && !s[0].a && !tuple && n->op != OP_Receive)
		return;
	if (n->op == OP_Receive && no_grad_back(n))
		return;
	uint32_t ns = 1;
	if (tuple) {
		int any = 0;
		for (uint32_t k = 0; k < a->tup[j]->n; k++)
			any |= a->tup[j]->g[k].a != NULL;
		if (!any && !a->dout[j].a)
			return;
		if (any)
			ns = a->tup[j]->n;
		else
			s = &a->dout[j];
	}
	/* the rule reads the gradients as GVs */
	GV one, *g = ns > 1 ? xmalloc(ns * sizeof *g) : &one;
	for (uint32_t k = 0; k < ns; k++)
		g[k] = slot_get(&s[k]);
	a->cur = n;
	a->ext_built = 0;
	a->e.ext = NULL;
	train_emit_bprop_of(&a->e, n, n->prim, 1, rules[n->op].gop);
	a->in_loss = n == a->loss_op;
	a->rule_start = a->e.out.n;
	rules[n->op].fn(a, n, g, rules[n->op].gop);
	intern_types(a);
	a->in_loss = 0;
	a->cur = NULL;
	a->e.ext = NULL;
	if (g != &one)
		free(g);
}

/* The micro-batch of every forward node (its micro label, else the
 * largest of its operands', else -1), and the order the backward walk
 * takes them in with micro-batches: order[k] is the node index walked
 * k-th from the end.  The sum of the micro-batches' losses (PipelineCell's
 * Adds, pipeline_end) is walked first, then micro-batch 0 whole, then 1,
 * ...: each micro-batch's backward is emitted in one piece and in micro-batch
 * order, which the accumulation chain then follows and the 1F1B schedule
 * (schedule.c) needs.  Micro-batches share no forward value, so the walk is
 * still a reverse topological one. */
static uint32_t *micro_order(Ad *a)
{
	Graph *g = a->g;
	uint32_t nn = g->nodes.n, np = g->params.n;
	int K = a->micro;
	int32_t *mic = xmalloc((nn + 1) * sizeof *mic);
	uint32_t *cnt = xcalloc((size_t)K + 3, sizeof *cnt);
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		int64_t v;
		const Value *lv = n->kind == NK_CNODE ? ir_attr_get(&ir_node_ext(n)->primal, "micro") : NULL;
		int b = -1;
		if (lv && value_get_int(lv, &v) && v >= 0 && v < K)
			b = (int)v;
		else
			for (uint32_t k = 0; k < n->nargs; k++) {
				Node *p = arg_node(n, k);
				uint32_t j = p ? idx(a, p) : UINT32_MAX;
				if (j != UINT32_MAX && j >= np && mic[j - np] > b)
					b = mic[j - np];
			}
		if (ir_node_is_op(n, OP_Add) && ir_attr_get(&n->pattrs, "pipeline_end"))
			b = K; /* the losses' sum: walked first */
		else if (b < 0)
			b = K + 1; /* no micro-batch: walked last */
		mic[i] = b;
		cnt[b + 1]++;
	}
	uint32_t *order = xmalloc((nn + 1) * sizeof *order), *pos = xcalloc((size_t)K + 3, sizeof *pos);
	/* bucket sequence from the front: K+1, K-1, ..., 1, 0, K */
	uint32_t at = 0;
	pos[K + 1] = at;
	at += cnt[K + 2];
	for (int b = K - 1; b >= 0; b--) {
		pos[b] = at;
		at += cnt[b + 1];
	}
	pos[K] = at;
	for (uint32_t i = 0; i < nn; i++)
		order[pos[mic[i]]++] = i;
	free(pos);
	free(cnt);
	free(mic);
	return order;
}

int pass_autodiff(Module *m, const Options *o)
{
	Graph *g = ir_entry(m);
	if (!train_wanted(m, o)) {
		if (o->optimizer_given && !o->forward_only && m->sapp && g) {
			diag_error_at(g->loc,
			              "the optimizer options need a training step, but the graph is inference "
			              "(%s; --phase=train forces training)",
			              m->sapp->phase_why ? m->sapp->phase_why : "phase predict");
			return 1;
		}
		return 0;
	}
	if (!g || !g->nodes.n)
		return 0;
	Node *ret = g->nodes.a[g->nodes.n - 1];
	if (ret->kind != NK_RETURN || !ret->nargs)
		return 0;
	Node *root = arg_node(ret, 0);
	if (root && !stage_output(root)) {
		const Abs *l = &root->out;
		if (!l->is_tensor || l->shape.kind != SK_DIMS || l->shape.rank != 0) {
			diag_error_at(root->loc.line ? root->loc : ret->loc,
			              "the training step needs a scalar loss, but the graph returns '%s', which is "
			              "not a scalar tensor (--forward-only prints the forward graph)",
			              ir_node_name(root));
			return 1;
		}
	}
	Ad a;
	memset(&a, 0, sizeof a);
	if (train_emit_init(&a.e, m, o) < 0)
		return 1;
	a.m = m;
	a.o = o;
	a.g = g;
	a.nn = g->params.n + g->nodes.n;
	a.dout = xcalloc(a.nn, sizeof *a.dout);
	a.tup = xcalloc(a.nn, sizeof *a.tup);
	a.needs = xcalloc(a.nn, 1);
	a.reach = xcalloc(a.nn, 1);
	a.gather = xcalloc(g->params.n + 1, sizeof *a.gather);
	a.scratch = xmalloc(SCRATCH * sizeof *a.scratch);
	keymap_init(&a.types, sizeof(Abs *));
	keymap_init(&a.abs, sizeof(Abs));
	a.front_types = xcalloc(FRONT, sizeof *a.front_types);
	a.front_abs = xcalloc(FRONT, sizeof *a.front_abs);
	keymap_init(&a.attrs, sizeof(Attr *));
	keymap_init(&a.ints, sizeof(Value));
	keymap_init(&a.comm_attrs, sizeof(AttrList));
	keymap_init(&a.exts, sizeof(NodeExt *));
	a.fwd_tab = arena_alloc(m->arena, sizeof *a.fwd_tab);
	a.fwd_tab->base = m->next_id;
	ir_clear_marks(m);
	uint32_t marked_params = g->params.n, marked_nodes = g->nodes.n;
	for (uint32_t i = 0; i < g->params.n; i++) /* index: params, then nodes */
		g->params.a[i]->mark = i + 1;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		sweep_prefetch(g->nodes.a, i, g->nodes.n);
		g->nodes.a[i]->mark = g->params.n + i + 1;
	}
	/* the monad the forward Loads use: the update (and the accumulation
	 * of micro-batches) starts from it */
	a.accu_u = value_word("U");
	a.accu_ua = train_abs_monad();
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		if (n->kind == NK_CNODE && n->op == OP_Load && n->nargs == 2 && n->args[1].kind != V_NODE) {
			a.accu_u = n->args[1];
			if (n->nin_types == 2)
				a.accu_ua = n->in_types[1];
			break;
		}
	}
	a.micro = m->micro;
	if (a.micro > 1) {
		a.accu = xcalloc(g->params.n + 1, sizeof *a.accu);
		a.next_local = 1;
		for (uint32_t i = 0; i < g->params.n; i++)
			if (g->params.a[i]->local >= a.next_local)
				a.next_local = g->params.a[i]->local + 1;
	}
	int rc = analyse(&a, root);
	if (!rc) {
		/* the loss's _VirtualDiv, when it is not a node (§3.6) */
		if (o->device_num > 1) {
			a.loss_op = lower_loss_node(g);
			if (a.loss_op && a.loss_op->lay && a.loss_op->lay->nout)
				a.vdiv = lower_loss_repeat(&a.e.lc, a.loss_op->lay);
			for (uint32_t k = 0; a.loss_op && k < a.loss_op->nargs; k++) {
				Node *t = arg_node(a.loss_op, k);
				if (t && t->kind == NK_CNODE && t->op == OP_VirtualDiv)
					a.vdiv = 1;
			}
		}
		/* A loss computed in an earlier pipeline stage arrives through a
		 * Receive (its producer's layout): every rank of that stage that
		 * holds a copy is seeded by its peer here, and the mirror
		 * AllReduce there sums the copies' gradients, so the seed is
		 * divided by the copies, as _VirtualDiv divides a loss computed
		 * here.  (MindSpore has no such case: its loss is the last
		 * stage's.) */
		int64_t seed_div = 0;
		if (o->device_num > 1 && !a.loss_op && root && root->kind == NK_CNODE && root->op == OP_Receive &&
		    root->lay && root->lay->nout)
			seed_div = lower_loss_repeat(&a.e.lc, root->lay);
		TrainInfo *ti = arena_alloc(m->arena, sizeof *ti);
		m->train = ti;
		ti->ret = ret->args[0];
		ti->ret_abs = ret->nin_types ? ret->in_types[0] : (root ? root->out : ret->out);
		if (root && !stage_output(root)) {
			uint32_t r = idx(&a, root);
			Abs la = train_abs_value(&root->out);
			Abs ca = la;
			ca.has_value = 1;
			GV seed = gv_val(train_float_tensor(m, root->out.dtype, 1), ca);
			slot_put(&a, &a.dout[r], seed_div > 1 ? virtual_div(&a, root, seed, seed_div) : seed);
			(void)la;
		}
		uint32_t np = g->params.n;
		uint32_t *order = a.micro > 1 ? micro_order(&a) : NULL;
		uint32_t live = a.nn; /* dout[live..] given back */
		for (uint32_t k = g->nodes.n; k-- > 0;) {
			uint32_t i = order ? order[k] : k;
			Node *n = g->nodes.a[i];
			uint32_t j = np + i;
			if (n->kind == NK_CNODE && !n->dead && a.needs[j] && a.reach[j] && rule_kind(n) == RULE_BPROP)
				run_rule(&a, n, j);
			/* a rule reads the tuples of its node and its operands,
			 * never of a later node: the gradients of n's elements are
			 * spent (a million-node graph's tuples are 37 MB) */
			free(a.tup[j]);
			a.tup[j] = NULL;
			/* in graph order (no micro-batches) a node's operands come
			 * before it, so once n's rule ran nothing reads or adds to
			 * the gradients of n and the nodes after it: their slots go
			 * back to the system (a million forward nodes' slots were
			 * 32 MB at the pass's peak) */
			if (!order && live - j >= 65536) {
				xmem_release(&a.dout[j], (live - j) * sizeof *a.dout);
				live = j;
			}
		}
		free(order);
		/* with micro-batches a weight's gradient is its buffer, read once
		 * every micro-batch has added to it */
		for (uint32_t i = 0; a.accu && i < np; i++) {
			if (!a.accu[i])
				continue;
			Abs va = train_abs_value(&a.accu[i]->out);
			train_emit_bprop_of(&a.e, g->params.a[i], lower_sym("_VirtualAssignAdd"), 1, OP_Load);
			a.e.ext = NULL;
			Node *l = train_op(&a.e, OP_Load, 2, &va);
			train_arg_node(&a.e, l, 0, a.accu[i]);
			train_arg(&a.e, l, 1, a.accu_u, &a.accu_ua);
			slot_put(&a, &a.dout[i], gv_node(l));
		}
		/* the weights' gradients, in # Params order */
		uint32_t nw = 0;
		for (uint32_t i = 0; i < np; i++)
			if (a.needs[i] && a.dout[i].a && a.dout[i].v.kind == V_NODE)
				nw++;
		ti->weight = arena_alloc(m->arena, (nw + 1) * sizeof(Node *));
		ti->grad = arena_alloc(m->arena, (nw + 1) * sizeof(Node *));
		ti->gather = arena_alloc(m->arena, (nw + 1) * sizeof(Node *));
		ti->accu = a.accu ? arena_alloc(m->arena, (nw + 1) * sizeof(Node *)) : NULL;
		for (uint32_t i = 0; i < np; i++)
			if (a.needs[i] && a.dout[i].a && a.dout[i].v.kind == V_NODE) {
				ti->weight[ti->nw] = g->params.a[i];
				ti->grad[ti->nw] = a.dout[i].v.u.node;
				ti->gather[ti->nw] = a.gather[i];
				if (ti->accu)
					ti->accu[ti->nw] = a.accu[i];
				ti->nw++;
			}
		ti->nkeep = a.keep.n;
		ti->keep = a.keep.n ? arena_dup(m->arena, a.keep.a, a.keep.n * sizeof(Node *)) : NULL;
		ti->monad = a.accu_u;
		ti->monad_abs = a.accu_ua;
		if (root && !stage_output(root) && !ti->nw && !ti->nkeep) {
			diag_error_at(root->loc.line ? root->loc : ret->loc,
			              "no trainable weight (a parameter with a default value) reaches the loss the graph "
			              "returns: there is nothing to train (--forward-only prints the forward graph)");
			rc = 1;
		}
		if (!rc) {
			/* the marks set above are the only ones: cleared before the
			 * backward joins the graph, a sweep of the forward instead of
			 * the whole step */
			for (uint32_t i = 0; i < marked_params; i++)
				g->params.a[i]->mark = 0;
			for (uint32_t i = 0; i < marked_nodes; i++) {
				sweep_prefetch(g->nodes.a, i, marked_nodes);
				g->nodes.a[i]->mark = 0;
			}
			train_splice(&a.e); /* forward nodes, the backward, then the Return */
		}
	}
	if (rc)
		ir_clear_marks(m);
	a.fwd_tab->n = a.fwd.n;
	a.fwd_tab->id = a.fwd.n ? arena_dup(m->arena, a.fwd.a, a.fwd.n * sizeof *a.fwd.a) : NULL;
	vec_free(&a.fwd);
	keymap_free(&a.exts);
	free(a.dout);
	for (uint32_t i = 0; i < a.nn; i++)
		free(a.tup[i]);
	free(a.tup);
	free(a.scratch);
	keymap_free(&a.types);
	keymap_free(&a.abs);
	free(a.front_types);
	free(a.front_abs);
	keymap_free(&a.attrs);
	keymap_free(&a.ints);
	keymap_free(&a.comm_attrs);
	vec_free(&a.akey);
	vec_free(&a.aheap);
	vec_free(&a.acap);
	free(a.needs);
	free(a.reach);
	free(a.gather);
	free(a.accu);
	vec_free(&a.keep);
	train_emit_free(&a.e);
	xmalloc_trim();
	return rc;
}
