/* optimizer.c - the `optimizer` pass: the weight update of the step.
 *
 * pass_optimizer (training-step.md §1.3, §1.4, §3.1, §3.2)
 *   Requires: gradcomm (Module.train: the communicated gradients).
 *   Provides: the optimizer's Parameters after the graph's own: the scalar
 *             `learning_rate` (and `momentum` for momentum/sgd), the Int32
 *             `global_step` of shape (1), `beta1_power`/`beta2_power` for
 *             adam, and per weight its cloned states `<prefix>.<weight>` with
 *             the weight's local (or optimizer-shard) shape and layout:
 *             moments.* (momentum), accum.* and stat.* (sgd), moment1.* and
 *             moment2.* (adam), adam_m.* and adam_v.* (adamw).  Then the
 *             update as MindSpore's construct issues it: AssignAdd of
 *             global_step first, (adam) beta powers multiplied and
 *             assigned, then one update per weight in reverse parameter
 *             order (hyper_map_reverse): ApplyMomentum(w, moments.w, lr, g,
 *             momentum, U), SGD(w, g, lr, accum.w, momentum, stat.w, U),
 *             Adam(w, m, v, beta1_power, beta2_power, lr, beta1, beta2, eps,
 *             g, U), PrimFunc_AdamWeightDecay(w, m, v, lr, beta1, beta2, eps,
 *             decay, g, U).  Written Parameters are operands themselves,
 *             read-only ones come through Load(., U); each side effect is
 *             followed by UpdateState, one chain.  All under
 *             Default/optimizer-<Class>.  The graph returns
 *             Depend(loss, last UpdateState) (with a pipeline stage's
 *             gradient Sends: Depend(loss, MakeTuple(U, Sends))).
 *   Initial values: states zeros except stat.* (ones) and beta powers (1);
 *   learning_rate, momentum from the options (Options.learning_rate, ...).
 *   Invalidates: nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "train.h"

typedef struct Opt {
	TrainEmit e;
	Module *m;
	Graph *g;
	int32_t next_local;
	Value u;  /* the current monad state */
	Abs ua;
	/* the operand types of the last Loads of learning_rate and momentum:
	 * every weight's update loads both, with the same types */
	const Node *lt_p[2];
	Abs *lt[2];
	/* the update op's attributes, the same constants for every weight */
	AttrList upd;
} Opt;

static Node *new_param(Opt *s, const char *name, Sym dtype, const Shape *sh, NodeLayout *lay)
{
	return train_new_param(s->m, s->g, s->next_local++, name, dtype, sh, lay);
}

static Node *scalar_param(Opt *s, const char *name, Sym dtype, int one)
{
	int64_t d[1] = {1};
	Shape sh = shape_shared(s->m, d, one ? 1 : 0);
	return new_param(s, name, dtype, &sh, NULL);
}

/* the state <prefix>.<weight>: the weight's shape and layout (§3.2) */
static Node *state_param(Opt *s, const char *prefix, const Node *w)
{
	char buf[1024];
	/* joined by hand: one per weight and state, snprintf was most of it */
	size_t pl = strlen(prefix), wl = sym_len(w->name);
	if (pl + 1 + wl >= sizeof buf)
		wl = sizeof buf - 2 - pl; /* cut short, as snprintf did */
	memcpy(buf, prefix, pl);
	buf[pl] = '.';
	memcpy(buf + pl + 1, sym_str(w->name), wl);
	buf[pl + 1 + wl] = 0;
	return new_param(s, buf, w->out.dtype, &w->out.shape, w->lay);
}

/* the same fields: equal abstracts print the same */
static int same_abs(const Abs *a, const Abs *b)
{
	return a->tstr == b->tstr && a->dtype == b->dtype && a->is_ref == b->is_ref && a->is_tensor == b->is_tensor &&
	       a->has_value == b->has_value && a->shape.kind == b->shape.kind && a->shape.rank == b->shape.rank &&
	       a->shape.dims == b->shape.dims && a->xi == b->xi;
}

static Node *load(Opt *s, Node *p)
{
	Abs va = train_abs_value(&p->out);
	Node *l = train_op(&s->e, OP_Load, 0, &va);
	l->nargs = l->nin_types = 2;
	l->args = arena_alloc(s->m->arena, 2 * sizeof(Value));
	l->args[0] = value_node(p);
	l->args[1] = s->u;
	int k = s->lt_p[0] == p ? 0 : s->lt_p[1] == p ? 1 : s->lt_p[0] ? 1 : 0;
	if (s->lt_p[k] != p || !same_abs(&s->lt[k][1], &s->ua)) {
		s->lt[k] = arena_alloc(s->m->arena, 2 * sizeof(Abs));
		s->lt[k][0] = p->out;
		s->lt[k][1] = s->ua;
		s->lt_p[k] = p;
	}
	l->in_types = s->lt[k];
	return l;
}

static void update_state(Opt *s, Node *effect)
{
	Abs ua = train_abs_monad();
	Node *n = train_op(&s->e, OP_UpdateState, 2, &ua);
	train_arg(&s->e, n, 0, s->u, &s->ua);
	train_arg_node(&s->e, n, 1, effect);
	s->u = value_node(n);
	s->ua = n->out;
}

/* an update op: operands are Parameters, nodes or constants; the monad last */
static Node *update(Opt *s, int op, Node *const *args, const Value *consts, uint32_t n, const Abs *out)
{
	Node *c = train_op(&s->e, op, n + 1, out);
	for (uint32_t k = 0; k < n; k++) {
		if (args[k]) {
			train_arg_node(&s->e, c, k, args[k]);
		} else {
			Abs ca = train_abs_tensor(s->m, lower_sym("Float32"), NULL, 0, 1);
			train_arg(&s->e, c, k, consts[k], &ca);
		}
	}
	train_arg(&s->e, c, n, s->u, &s->ua);
	if (s->upd.n)
		c->pattrs = s->upd; /* the first update's list, shared */
	else
		lower_attr_put(s->m, &c->pattrs, "side_effect_mem", value_bool(1));
	c->has_pattrs = 1;
	return c;
}

/* F32(v) */
static Value f32_value(double v)
{
	char buf[40];
	snprintf(buf, sizeof buf, "%g", v);
	Value f = {0};
	f.kind = V_FLOAT;
	f.numtype = NT_F32;
	f.u.f = v;
	f.text = intern_cstr(buf);
	return f;
}

static double dflt(double v, double d)
{
	return v < 0 ? d : v;
}

int pass_optimizer(Module *m, const Options *o)
{
	TrainInfo *ti = m->train;
	if (!ti || !train_wanted(m, o))
		return 0;
	Opt s;
	memset(&s, 0, sizeof s);
	if (train_emit_init(&s.e, m, o) < 0)
		return 1;
	s.m = m;
	s.g = s.e.g;
	Graph *g = s.g;
	s.next_local = 1;
	for (uint32_t i = 0; i < g->params.n; i++)
		if (g->params.a[i]->local >= s.next_local)
			s.next_local = g->params.a[i]->local + 1;
	static const char *const cls[] = {"Momentum", "SGD", "Adam", "AdamWeightDecay"};
	char dir[64];
	snprintf(dir, sizeof dir, "Default/optimizer-%s/x", cls[o->optimizer]);
	train_emit_dir(&s.e, intern_cstr(dir));
	Sym f32 = lower_sym("Float32"), i32 = lower_sym("Int32");
	/* the optimizer's Parameters (§1.4 # Params order) */
	Node *lr = scalar_param(&s, "learning_rate", f32, 0);
	Node *mom = NULL, *b1p = NULL, *b2p = NULL;
	if (o->optimizer == OPTIM_MOMENTUM || o->optimizer == OPTIM_SGD)
		mom = scalar_param(&s, "momentum", f32, 0);
	Node *gstep = scalar_param(&s, "global_step", i32, 1);
	if (o->optimizer == OPTIM_ADAM) {
		b1p = scalar_param(&s, "beta1_power", f32, 1);
		b2p = scalar_param(&s, "beta2_power", f32, 1);
	}
	static const char *const pre[][2] = {{"moments", NULL}, {"accum", "stat"}, {"moment1", "moment2"},
	                                     {"adam_m", "adam_v"}};
	Node **st0 = xcalloc(ti->nw + 1, sizeof *st0), **st1 = xcalloc(ti->nw + 1, sizeof *st1);
	for (uint32_t w = 0; w < ti->nw; w++)
		st0[w] = state_param(&s, pre[o->optimizer][0], ti->weight[w]);
	for (uint32_t w = 0; pre[o->optimizer][1] && w < ti->nw; w++)
		st1[w] = state_param(&s, pre[o->optimizer][1], ti->weight[w]);

	/* global_step += 1, first (optimizer.py) */
	s.u = ti->monad;
	s.ua = ti->monad_abs;
	Abs one_a = train_abs_tensor(m, i32, (int64_t[]){1}, 1, 1);
	Node *aa = train_op(&s.e, OP_AssignAdd, 3, &one_a);
	one_a.has_value = 0;
	aa->out = one_a;
	train_arg_node(&s.e, aa, 0, gstep);
	Abs ca = train_abs_tensor(m, i32, (int64_t[]){1}, 1, 1);
	train_arg(&s.e, aa, 1, train_ints_tensor(m, i32, 1), &ca);
	train_arg(&s.e, aa, 2, s.u, &s.ua);
	lower_attr_put(m, &aa->pattrs, "side_effect_mem", value_bool(1));
	aa->has_pattrs = 1;
	update_state(&s, aa);

	double b1 = dflt(o->beta1, 0.9), b2 = dflt(o->beta2, 0.999);
	double eps = dflt(o->eps, o->optimizer == OPTIM_ADAMW ? 1e-6 : 1e-8), wd = dflt(o->weight_decay, 0);
	Node *b1now = NULL, *b2now = NULL;
	if (o->optimizer == OPTIM_ADAM) {
		/* beta1_power *= beta1; beta2_power *= beta2 (nn.Adam construct) */
		Node *pw[2] = {b1p, b2p};
		double bv[2] = {b1, b2};
		Node **now[2] = {&b1now, &b2now};
		for (int k = 0; k < 2; k++) {
			Node *l = load(&s, pw[k]);
			Node *mu = train_op(&s.e, OP_Mul, 2, &l->out);
			train_arg_node(&s.e, mu, 0, l);
			Abs sa = train_abs_tensor(m, f32, NULL, 0, 1);
			train_arg(&s.e, mu, 1, train_float_tensor(m, f32, bv[k]), &sa);
			Node *as = train_op(&s.e, OP_Assign, 3, &l->out);
			train_arg_node(&s.e, as, 0, pw[k]);
			train_arg_node(&s.e, as, 1, mu);
			train_arg(&s.e, as, 2, s.u, &s.ua);
			lower_attr_put(m, &as->pattrs, "side_effect_mem", value_bool(1));
			as->has_pattrs = 1;
			update_state(&s, as);
			*now[k] = mu;
		}
	}
	/* one update per weight, the last weight first (hyper_map_reverse).
	 * Test-only (SAPPC_TEST_SKIP_UPDATE=1, on the ranks of a parallel run,
	 * not the single-device reference): the last weight is left without
	 * its update, a fault --simulate must name. */
	const char *skip = o->device_num > 1 ? getenv("SAPPC_TEST_SKIP_UPDATE") : NULL;
	uint32_t first = skip && strcmp(skip, "1") == 0 && ti->nw ? ti->nw - 1 : ti->nw;
	for (uint32_t w = first; w-- > 0;) {
		Node *p = ti->weight[w], *gr = ti->grad[w];
		Abs pa = train_abs_value(&p->out);
		Node *l = load(&s, lr), *c;
		switch (o->optimizer) {
		case OPTIM_MOMENTUM: {
			Node *mo = load(&s, mom);
			c = update(&s, OP_ApplyMomentum, (Node *[]){p, st0[w], l, gr, mo}, NULL, 5, &pa);
			if (!s.upd.n) {
				lower_attr_put(m, &c->pattrs, "use_nesterov", value_bool(0));
				lower_attr_put(m, &c->pattrs, "use_locking", value_bool(0));
				lower_attr_put(m, &c->pattrs, "gradient_scale", f32_value(1));
			}
			break;
		}
		case OPTIM_SGD: {
			Node *mo = load(&s, mom);
			c = update(&s, OP_SGD, (Node *[]){p, gr, l, st0[w], mo, st1[w]}, NULL, 6, &pa);
			if (!s.upd.n) {
				lower_attr_put(m, &c->pattrs, "dampening", f32_value(0));
				lower_attr_put(m, &c->pattrs, "weight_decay", f32_value(0));
				lower_attr_put(m, &c->pattrs, "nesterov", value_bool(0));
			}
			break;
		}
		case OPTIM_ADAM: {
			Value k[10] = {0};
			k[6] = train_float_tensor(m, f32, b1);
			k[7] = train_float_tensor(m, f32, b2);
			k[8] = train_float_tensor(m, f32, eps);
			c = update(&s, OP_Adam,
			           (Node *[]){p, st0[w], st1[w], b1now, b2now, l, NULL, NULL, NULL, gr}, k, 10, &pa);
			if (!s.upd.n) {
				lower_attr_put(m, &c->pattrs, "use_locking", value_bool(0));
				lower_attr_put(m, &c->pattrs, "use_nesterov", value_bool(0));
			}
			break;
		}
		default: {
			Value k[9] = {0};
			k[4] = train_float_tensor(m, f32, b1);
			k[5] = train_float_tensor(m, f32, b2);
			k[6] = train_float_tensor(m, f32, eps);
			k[7] = train_float_tensor(m, f32, wd);
			c = update(&s, OP_AdamWeightDecay,
			           (Node *[]){p, st0[w], st1[w], l, NULL, NULL, NULL, NULL, gr}, k, 9, &pa);
			break;
		}
		}
		if (!s.upd.n) {
			lower_order_attrs(&c->pattrs);
			s.upd = c->pattrs;
		}
		update_state(&s, c);
		if (ti->accu && ti->accu[w]) {
			/* the micro-batches' buffer starts the next step at zero:
			 * Assign(accu, accu x 0) (training-step.md §4.6) */
			Node *acc = ti->accu[w], *al = load(&s, acc);
			Node *z = train_op(&s.e, OP_Mul, 2, &al->out);
			train_arg_node(&s.e, z, 0, al);
			Abs sa = train_abs_tensor(m, al->out.dtype, NULL, 0, 1);
			train_arg(&s.e, z, 1, train_float_tensor(m, al->out.dtype, 0), &sa);
			Node *as = train_op(&s.e, OP_Assign, 3, &al->out);
			train_arg_node(&s.e, as, 0, acc);
			train_arg_node(&s.e, as, 1, z);
			train_arg(&s.e, as, 2, s.u, &s.ua);
			lower_attr_put(m, &as->pattrs, "side_effect_mem", value_bool(1));
			as->has_pattrs = 1;
			update_state(&s, as);
		}
	}
	/* Return(Depend(loss, state)) */
	Node *ret = g->nodes.a[g->nodes.n - 1];
	Value dep = s.u;
	Abs depa = s.ua;
	if (ti->nkeep) {
		Node *mt = train_op(&s.e, OP_MakeTuple, ti->nkeep + 1, NULL);
		train_arg(&s.e, mt, 0, s.u, &s.ua);
		for (uint32_t k = 0; k < ti->nkeep; k++)
			train_arg_node(&s.e, mt, k + 1, ti->keep[k]);
		mt->out.tstr = lower_sym("Tuple");
		mt->out.shape.kind = SK_NOSHAPE;
		dep = value_node(mt);
		depa = mt->out;
	}
	Node *d = train_op(&s.e, OP_Depend, 2, &ti->ret_abs);
	train_arg(&s.e, d, 0, ti->ret, &ti->ret_abs);
	train_arg(&s.e, d, 1, dep, &depa);
	ret->args = arena_dup(m->arena, ret->args, ret->nargs * sizeof(Value));
	ret->args[0] = value_node(d);
	train_splice(&s.e);
	free(st0);
	free(st1);
	train_emit_free(&s.e);
	return 0;
}
