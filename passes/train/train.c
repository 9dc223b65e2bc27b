/* train.c - helpers shared by the training-step passes (train.h). */
#include <stdio.h>
#include <string.h>

#include "train.h"

int train_wanted(const Module *m, const Options *o)
{
	if (o->forward_only || o->phase == PHASE_PREDICT)
		return 0;
	if (o->phase == PHASE_TRAIN)
		return 1;
	return m->sapp && !m->sapp->predict;
}

int train_is_trainable(const Node *p)
{
	return p->kind == NK_PARAM && p->has_default;
}

/* train_emit_bprop_of's answers, by (f's scope, prim, grad): a forward
 * node's full name is its own, so a table of every one would hold an
 * entry per forward node; the few the bprops are asking for now (a node's
 * rule, then its operands' accumulations) stay in a small cache, and a
 * miss forms the text again and finds it interned */
#define TRAIN_DIRS 4096
struct TrainDir {
	Sym scope, prim, dir;
	int32_t grad; /* dir 0: an empty entry */
	int32_t op;
};

int train_emit_init(TrainEmit *e, Module *m, const Options *o)
{
	memset(e, 0, sizeof *e);
	if (lower_ctx_init(&e->lc, m, o) < 0)
		return -1;
	e->m = m;
	e->g = ir_entry(m);
	e->tmpl.kind = NK_CNODE;
	e->tmpl.g = e->g;
	e->tmpl.stage = -1;
	e->dirs = xcalloc(TRAIN_DIRS, sizeof *e->dirs);
	return 0;
}

void train_emit_free(TrainEmit *e)
{
	free(e->dirs);
	e->dirs = NULL;
	lower_ctx_free(&e->lc);
	vec_free(&e->out);
}

void train_emit_dir(TrainEmit *e, Sym dir_x)
{
	e->tmpl.scope_kind = SCOPE_FULLNAME;
	e->tmpl.scope = dir_x;
	e->tmpl.scope_op = 0;
}

/* the directory of f's full name (up to its last '/'), with prefix and
 * suffix (spec §1.2: Gradients/<forward scope>/Grad_<PrimName>).  The
 * template's own name is "<dir>/<op>": the full-name key of op's first node
 * there, so the template costs no string of its own (a "<dir>/x" for each
 * of 140,000 directories was 25 MB of names) */
void train_emit_bprop_of(TrainEmit *e, const Node *f, Sym ps, int grad, int op)
{
	uint32_t h = (f->scope * 2654435761u ^ ps * 40503u ^ (uint32_t)grad * 97u) & (TRAIN_DIRS - 1);
	struct TrainDir *d = &e->dirs[h];
	Sym *s = &d->dir;
	if (!(d->dir && d->scope == f->scope && d->prim == ps && d->grad == grad && d->op == op)) {
		d->scope = f->scope;
		d->prim = ps;
		d->grad = grad;
		d->op = op;
		const char *leaf = op != OP_UNKNOWN ? op_table[op].name : "x";
		const char *fs = f->scope_kind ? sym_str(f->scope) : "Default/x";
		if (f->scope_kind && f->scope_kind != SCOPE_FULLNAME)
			fs = "Default/x";
		/* every forward node misses (its scope is its own): the text is
		 * put together with memcpy, not three snprintf calls and a malloc */
		const char *slash = strrchr(fs, '/');
		size_t dl = slash ? (size_t)(slash - fs) : 0;
		const char *prim = ps ? sym_str(ps) : "";
		size_t pl = grad ? sym_len(ps) : 0, ll = strlen(leaf);
		size_t len = sizeof "Gradients/" - 1 + dl + (grad ? sizeof "/Grad_" - 1 + pl : 0) + 1 + ll;
		char stack[512];
		char *buf = len <= sizeof stack ? stack : xmalloc(len), *p = buf;
		memcpy(p, "Gradients/", sizeof "Gradients/" - 1);
		p += sizeof "Gradients/" - 1;
		memcpy(p, fs, dl);
		p += dl;
		if (grad) {
			memcpy(p, "/Grad_", sizeof "/Grad_" - 1);
			p += sizeof "/Grad_" - 1;
			memcpy(p, prim, pl);
			p += pl;
		}
		*p++ = '/';
		memcpy(p, leaf, ll);
		*s = intern(buf, len);
		if (buf != stack)
			free(buf);
	}
	train_emit_dir(e, *s);
}

Node *train_op(TrainEmit *e, int op, uint32_t nargs, const Abs *out)
{
	Node *n = lower_new_op(&e->lc, op, &e->tmpl, nargs);
	n->g = e->g;
	n->loc = (Loc){0, 0};
	if (out) {
		n->out = *out;
		n->out.has_value = 0; /* a computed value, even of constants */
	}
	if (e->ext)
		ir_node_set_x(e->lc.m, n, (NodeExt *)e->ext); /* shared and never written (train.h) */
	vec_push(&e->out, n);
	return n;
}

void train_arg(TrainEmit *e, Node *n, uint32_t k, Value v, const Abs *a)
{
	(void)e;
	n->args[k] = v;
	n->in_types[k] = *a;
}

void train_arg_node(TrainEmit *e, Node *n, uint32_t k, Node *src)
{
	train_arg(e, n, k, value_node(src), &src->out);
}

/* ------------------------------------------------------------ abstracts */

Abs train_abs_value(const Abs *a)
{
	Abs r = *a;
	if (r.is_ref && r.dtype) {
		r.tstr = lower_tensor_tstr(r.dtype, 0);
		r.is_ref = 0;
	}
	r.xi = 0;
	r.has_value = 0;
	return r;
}

Abs train_abs_word(const char *t)
{
	Abs a = {0};
	a.tstr = lower_sym(t);
	a.shape.kind = SK_NOSHAPE;
	return a;
}

Abs train_abs_bool(void)
{
	return train_abs_word("Bool");
}

Abs train_abs_monad(void)
{
	return train_abs_word("UMonad");
}

Abs train_abs_tensor(Module *m, Sym dtype, const int64_t *d, int rank, int has_value)
{
	Abs like = {0};
	like.dtype = dtype;
	Abs a = lower_abs_like(m, &like, d, rank);
	a.has_value = (uint8_t)has_value;
	return a;
}

static Value tensor_call(Module *m, Sym dtype, Value shape, Value val)
{
	Value e[3];
	e[0] = shape;
	value_set_key(&e[0], lower_sym("shape"));
	e[1] = value_word(sym_str(dtype ? dtype : lower_sym("Float32")));
	value_set_key(&e[1], lower_sym("dtype"));
	e[2] = val;
	value_set_key(&e[2], lower_sym("value"));
	return value_call_of(m->arena, lower_sym("Tensor"), e, 3);
}

Value train_float_tensor(Module *m, Sym dtype, double v)
{
	Value shape = {0};
	shape.kind = V_LIST;
	char buf[40];
	snprintf(buf, sizeof buf, "%g", v);
	Value f = {0};
	f.kind = V_FLOAT;
	f.u.f = v;
	f.text = intern_cstr(buf);
	return tensor_call(m, dtype, shape, f);
}

Value train_ints_tensor(Module *m, Sym dtype, int64_t v)
{
	int64_t one = 1;
	Value shape = value_tuple_of(m->arena, (Value[]){value_int(one, NT_BARE)}, 1);
	shape.kind = V_LIST;
	Value val = value_tuple_of(m->arena, (Value[]){value_int(v, NT_BARE)}, 1);
	val.kind = V_LIST;
	return tensor_call(m, dtype, shape, val);
}

Value train_int_list_tensor(Module *m, Sym dtype, const int64_t *v, uint32_t n)
{
	Value *e = arena_alloc(m->arena, (n ? n : 1) * sizeof *e);
	for (uint32_t i = 0; i < n; i++)
		e[i] = value_int(v[i], NT_BARE);
	Value shape = value_tuple_of(m->arena, (Value[]){value_int((int64_t)n, NT_BARE)}, 1);
	shape.kind = V_LIST;
	Value val = value_tuple_of(m->arena, e, n);
	val.kind = V_LIST;
	return tensor_call(m, dtype, shape, val);
}

/* in place: a second array of two million nodes would be the pass's peak */
void train_splice(TrainEmit *e)
{
	Graph *g = e->g;
	Node *ret = g->nodes.a[g->nodes.n - 1];
	if (!e->out.n)
		return; /* nothing emitted (a stage with nothing to train): out.a may be NULL */
	vec_grow(&g->nodes, e->out.n);
	memcpy(g->nodes.a + g->nodes.n - 1, e->out.a, e->out.n * sizeof *e->out.a);
	g->nodes.n += e->out.n;
	g->nodes.a[g->nodes.n - 1] = ret;
	ir_renumber(g);
}

Node *train_new_param(Module *m, Graph *g, int32_t local, const char *name, Sym dtype, const Shape *sh,
                      NodeLayout *lay)
{
	Node *p = ir_node_new(m, g, NK_PARAM);
	p->name = intern_cstr(name);
	p->has_default = 1;
	p->nargs = 1; /* the "  :  has_default" tail */
	p->args = arena_alloc(m->arena, sizeof(Value));
	p->args[0] = value_word("has_default");
	p->local = local;
	p->out.tstr = lower_tensor_tstr(dtype, 1);
	p->out.dtype = dtype;
	p->out.is_ref = 1;
	p->out.is_tensor = 1;
	p->out.shape = *sh;
	p->out.xi = abs_ext_intern(p->name, 0, NULL, 0);
	p->lay = lay;
	vec_push(&g->params, p);
	return p;
}
