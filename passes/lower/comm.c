/* comm.c - the `comm` pass: forward communication and mirror annotations.
 *
 * pass_comm (parallel-lowering.md §3.0-§3.4, §3.6)
 *   Requires: layouts (Node.lay), and pipeline when stages > 1.
 *   Provides: after each operator whose rule asks for it, the forward
 *             communication ops (§3.1) in MindSpore's InsertForwardOps order:
 *             AllReduce(op) over the group the rule names (MatMul's split
 *             reduction dimension, a reduction over split axes, a row-split
 *             Gather), plus RealDiv by the group size for ReduceMean.  Users
 *             are re-pointed to the last inserted op.  Instance names are
 *             forward_op_<std::hash(fullname + "_" + index)> (§3.2).  Mirror
 *             operators of trainable weights leave only their trace on the
 *             consumer, as in validate IR (§3.4): cnode_attrs
 *             related_comm_node_id and cnode_primal_attrs related_fusion_key
 *             "all_reduce_<mirror group>_<fusion>" and related_node_id.
 *             Inserted ops keep global shapes (an AllReduce does not change
 *             its operand's shape), so the module stays verifiable.
 *   Invalidates: nothing computed earlier.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"

static Node *subst_of(Node *p)
{
	for (int guard = 0; p->lay && p->lay->subst && guard < 64; guard++)
		p = p->lay->subst;
	return p;
}

/* substitutions are valid inside the pass that made them only (few are
 * set: a layout is only written when it has one) */
void lower_clear_subst(Graph *g)
{
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		sweep_prefetch(g->nodes.a, i, g->nodes.n);
		NodeLayout *l = g->nodes.a[i]->lay;
		if (l && l->subst)
			l->subst = NULL;
	}
}

void lower_subst_args(Node *n)
{
	for (uint32_t k = 0; k < n->nargs; k++)
		if (n->args[k].kind == V_NODE)
			n->args[k].u.node = subst_of(n->args[k].u.node);
}

static NodeLayout *pass_lay(Module *m, const TLay *t, Node *origin)
{
	NodeLayout *l = lay_new(m, 1, 1);
	l->in[0] = *t;
	l->out[0] = *t;
	l->flags = LAY_INSERTED;
	l->origin = origin;
	return l;
}

/* AllReduce(op) of src over g after origin's forward list (index = its
 * place in the list); its layout is origin's output layout */
Node *lower_all_reduce(LowerCtx *c, Node *src, Node *origin, const int64_t *g, int ng, Sym op, int index)
{
	Module *m = c->m;
	Node *a = lower_new_op(c, OP_AllReduce, origin, 1);
	a->args[0] = value_node(src);
	a->in_types[0] = src->out;
	a->out = src->out;
	lower_attr_put(m, &a->pattrs, "fusion", value_int(0, NT_I64));
	lower_attr_put(m, &a->pattrs, "op", value_str(sym_str(op)));
	lower_attr_put(m, &a->pattrs, "index", value_int(0, NT_I64));
	lower_attr_put(m, &a->pattrs, "no_eliminate", value_bool(1));
	lower_comm_group_attrs(c, a, g, ng, 1);
	/* the order MindSpore prints this set in (ir-format.md §1.9) */
	static const char *const order[] = {"comm_reuse",  "group", "fusion",         "op",          "rank_list",
	                                    "group_ranks", "index", "group_rank_ids", "no_eliminate"};
	lower_reorder_attrs(&a->pattrs, order, 9);
	/* mp_comm_recompute=False on the operator: its forward communication
	 * is not recomputed (training-step.md §5.4) */
	const Value *rcv = ir_attr_get(&origin->pattrs, "recompute_comm_op");
	int rc;
	if (rcv && value_truthy(rcv, &rc) && !rc)
		lower_attr_put(m, &a->pattrs, "recompute", value_bool(0));
	a->has_pattrs = 1;
	char inst[64];
	snprintf(inst, sizeof inst, "forward_op_%llu", (unsigned long long)lower_hash_name(origin, index));
	a->instance = intern_cstr(inst);
	char uid[16];
	snprintf(uid, sizeof uid, "%u", c->next_uid++);
	NodeExt *x = ir_node_ext_mut(m, a);
	lower_attr_put(m, &x->primal, "forward_comm_node_unique_id", value_str(uid));
	x->has_primal = 1;
	a->lay = pass_lay(m, &origin->lay->out[0], origin);
	return a;
}

typedef Vec(Node *) NodeVec;

/* a scalar Tensor constant of dtype dt holding x (a float spelling) */
static Value scalar_tensor_f(Module *m, Sym dt, double x)
{
	char buf[40];
	snprintf(buf, sizeof buf, "%.9g", x);
	Value t = lower_scalar_tensor(m, dt, 0);
	Value *v = &t.u.elems[2];
	v->kind = V_FLOAT;
	v->numtype = NT_BARE;
	v->u.f = strtod(buf, NULL);
	v->text = intern_cstr(buf);
	return t;
}

/* op(src, constant) with origin's output layout, named after origin's
 * forward list (index = its place in the list) */
static Node *scalar_op(LowerCtx *c, int op, Node *src, Node *origin, Value k, int index)
{
	Module *m = c->m;
	Node *d = lower_new_op(c, op, origin, 2);
	d->args[0] = value_node(src);
	d->args[1] = k;
	d->in_types[0] = src->out;
	d->in_types[1] = lower_abs_like(m, &src->out, NULL, 0);
	d->in_types[1].has_value = 1;
	d->out = src->out;
	char inst[64];
	snprintf(inst, sizeof inst, "forward_op_%llu", (unsigned long long)lower_hash_name(origin, index));
	d->instance = intern_cstr(inst);
	d->lay = pass_lay(m, &origin->lay->out[0], origin);
	return d;
}

static double attr_number(const Node *n, const char *key, double dflt)
{
	const Value *v = ir_attr_get(&n->pattrs, key);
	int64_t i;
	if (v && v->kind == V_FLOAT)
		return v->u.f;
	if (v && value_get_int(v, &i))
		return (double)i;
	return dflt;
}

/* An LpNorm whose reduced axis is split (FC_ALLREDUCE_PNORM): each rank's
 * norm covers its block only.  Its p-th power is summed over the split
 * group, and the p-th root of the sum, floored at epsilon, is the single
 * device's norm:
 *   max((sum_r LpNorm_r(x)^p)^(1/p), epsilon).
 * The local operator's own floor drops to the smallest normal float (or the
 * user's epsilon if smaller): a block of zeros then adds nothing a float
 * can hold to the sum, where epsilon^p per rank would, and its bprop still
 * divides by a nonzero norm as the single device's does.  p = 1 needs no
 * powers.  Appends the new nodes to out; returns the last. */
static Node *pnorm_across(LowerCtx *c, Node *n, const int64_t *g, int ng, NodeVec *out)
{
	Module *m = c->m;
	double p = attr_number(n, "p", 2), eps = attr_number(n, "epsilon", 1e-12);
	Sym dt = n->out.dtype ? n->out.dtype : intern_cstr("Float32");
	char buf[40];
	snprintf(buf, sizeof buf, "%.9g", eps < FLT_MIN ? eps : (double)FLT_MIN);
	Value floor = {0};
	floor.kind = V_FLOAT;
	floor.numtype = NT_F32;
	floor.u.f = strtod(buf, NULL);
	floor.text = intern_cstr(buf);
	ir_attr_set(m, &n->pattrs, "epsilon", floor);
	Node *last = n;
	if (p != 1) {
		last = scalar_op(c, OP_Pow, last, n, scalar_tensor_f(m, dt, p), 1);
		vec_push(out, last);
	}
	last = lower_all_reduce(c, last, n, g, ng, n->lay->fwd_op, 0);
	vec_push(out, last);
	if (p != 1) {
		last = scalar_op(c, OP_Pow, last, n, scalar_tensor_f(m, dt, 1 / p), 2);
		vec_push(out, last);
	}
	last = scalar_op(c, OP_Maximum, last, n, scalar_tensor_f(m, dt, eps), 3);
	vec_push(out, last);
	return last;
}

/* A forward AllReduce of an operator whose result is a list or tuple
 * (GroupedMatmul): one AllReduce per element, each behind its
 * TupleGetItem, and a MakeTuple of the sums that the users read instead
 * (MindSpore's GroupedMatmulInfo asks for one AllReduce per output).
 * The new nodes are appended to out; returns the MakeTuple. */
static Node *all_reduce_items(LowerCtx *c, Node *n, const int64_t *g, int ng, NodeVec *out)
{
	Module *m = c->m;
	NodeLayout *l = n->lay;
	int k = l->nout;
	Node *mt = lower_new_op(c, OP_MakeTuple, n, (uint32_t)k);
	mt->scope_kind = n->scope_kind == SCOPE_FULLNAME ? SCOPE_NONE : n->scope_kind;
	NodeLayout *tl = lay_new(m, (uint32_t)k, (uint32_t)k);
	tl->flags = LAY_INSERTED;
	tl->origin = n;
	for (int i = 0; i < k; i++) {
		Node *gi = lower_new_op(c, OP_TupleGetItem, n, 2);
		gi->scope_kind = mt->scope_kind;
		gi->args[0] = value_node(n);
		gi->args[1] = value_int(i, NT_I64);
		gi->in_types[0] = n->out;
		gi->in_types[1] = lower_abs_int();
		gi->out = lower_abs_like(m, &n->out, n->out.shape.sub[i].dims, n->out.shape.sub[i].rank);
		gi->lay = pass_lay(m, &l->out[i], n);
		vec_push(out, gi);
		Node *a = lower_all_reduce(c, gi, n, g, ng, l->fwd_op, i);
		a->lay = pass_lay(m, &l->out[i], n);
		vec_push(out, a);
		mt->args[i] = value_node(a);
		mt->in_types[i] = a->out;
		tl->in[i] = tl->out[i] = l->out[i];
	}
	mt->out = n->out;
	mt->lay = tl;
	vec_push(out, mt);
	return mt;
}

/* the value behind an operand, looking through Load, Depend, Cast, ... */
static Node *source(Node *n)
{
	for (int guard = 0; n && guard < 64; guard++) {
		if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || n->nargs == 0 || n->args[0].kind != V_NODE)
			return n;
		if (n->lay && (n->lay->flags & LAY_OP))
			return n;
		if (!(op_table[n->op].flags & OPF_LOOKTHROUGH) && n->op != OP_Cast)
			return n;
		if (n->op == OP_TupleGetItem)
			return n;
		n = n->args[0].u.node;
	}
	return n;
}

static int64_t param_fusion(const Node *p)
{
	(void)p;
	return 1; /* comm_fusion default (§3.4) */
}

/* The mirror group of a weight read in layout t (shard: t is the weight's
 * own layout, which the optimizer may shard, lower_param_shard; else the
 * consumer's, lower_replica_group): its size and, when above one, the
 * related_fusion_key text.  Both depend on t and the weight's fusion only,
 * so they are found once per (layout block, fusion): a transformer has tens
 * of thousands of weight reads and a handful of layouts, and each group
 * costs a walk over up to thousands of ranks to build, hash and name. */
typedef struct MirrorGroup {
	int nm;
	Sym fusion_key; /* "all_reduce_<group>_<fusion>" */
} MirrorGroup;

static const MirrorGroup *mirror_group(LowerCtx *c, KeyMap *memo, const TLay *t, int shard, const Node *p,
                                       int64_t *grp, int64_t *opt)
{
	/* a TLay's arrays are one block per distinct layout (tlay_set): the
	 * block's address and the counts name its content */
	int64_t fusion = param_fusion(p);
	int64_t key[6] = {shard,
	                  (int64_t)(intptr_t)t->shape,
	                  (int64_t)(intptr_t)t->dev,
	                  (int64_t)(intptr_t)t->map,
	                  (int64_t)t->ndev << 8 | (uint8_t)t->rank,
	                  fusion};
	int fresh;
	MirrorGroup *v = keymap_get(memo, key, 6, &fresh);
	if (fresh) {
		int nopt = 0, nm = 0;
		if (shard)
			lower_param_shard(c, p, opt, &nopt, grp, &nm);
		else
			nm = lower_replica_group(c, t, grp);
		v->nm = nm;
		v->fusion_key = 0;
		if (nm > 1) {
			char name[64], buf[128];
			lower_group_name(c, grp, nm, name, sizeof name);
			snprintf(buf, sizeof buf, "all_reduce_%s_%lld", name, (long long)fusion);
			v->fusion_key = intern_cstr(buf);
		}
	}
	return v;
}

static void mirror_attrs(LowerCtx *c, Node *user, Node *param, Sym fusion_key)
{
	Module *m = c->m;
	char id[24], nid[24];
	/* decimal, as "%u" would print them (fmt_u64 is the cheap path) */
	id[fmt_u64(id, c->next_uid++)] = 0;
	nid[fmt_u64(nid, param->id)] = 0;
	NodeExt *x = ir_node_ext_mut(m, user);
	ir_attr_set(m, &x->cattrs, "related_comm_node_id", value_str(id));
	Value fk = {0};
	fk.kind = V_STR;
	fk.text = fusion_key;
	if (!x->primal.n) { /* the usual case: both in one list (37 000 users of weights) */
		Attr *a = arena_alloc(m->arena, 2 * sizeof *a);
		a[0].key = lower_sym("related_fusion_key");
		a[0].val = fk;
		a[1].val = value_str(nid); /* interned in ir_attr_set's order */
		a[1].key = lower_sym("related_node_id");
		x->primal = (AttrList){a, 2};
	} else {
		ir_attr_set(m, &x->primal, "related_fusion_key", fk);
		ir_attr_set(m, &x->primal, "related_node_id", value_str(nid));
	}
	x->has_cattrs = x->has_primal = 1;
	lower_order_attrs(&x->cattrs);
	lower_order_attrs(&x->primal);
}

/* the operator whose value the graph returns: the loss (§3.6) */
Node *lower_loss_node(Graph *g)
{
	Node *ret = g->nodes.n ? g->nodes.a[g->nodes.n - 1] : NULL;
	if (!ret || ret->kind != NK_RETURN || !ret->nargs || ret->args[0].kind != V_NODE)
		return NULL;
	Node *n = ret->args[0].u.node;
	for (int guard = 0; n && guard < 64; guard++) {
		if (n->lay && n->lay->origin)
			n = n->lay->origin;
		else if (n->lay && (n->lay->flags & LAY_OP))
			return n;
		else if (n->kind == NK_CNODE && n->nargs && n->args[0].kind == V_NODE &&
		         (op_table[n->op].flags & OPF_LOOKTHROUGH))
			n = n->args[0].u.node;
		else
			return NULL;
	}
	return NULL;
}

/* how many devices hold the same loss value: all of the stage for a
 * scalar, else the device dimensions the output map leaves unused */
int64_t lower_loss_repeat(const LowerCtx *c, const NodeLayout *l)
{
	const TLay *t = &l->out[0];
	if (t->rank == 0)
		return c->per_stage;
	uint32_t used = 0;
	for (int i = 0; i < t->rank; i++)
		if (t->map[i] >= 0)
			used |= 1u << (t->ndev - 1 - t->map[i]);
	int64_t k = 1;
	for (int i = 0; i < t->ndev; i++)
		if (!(used >> i & 1))
			k *= t->dev[i];
	return k;
}

static Node *virtual_op(LowerCtx *c, int op, Node *src, Node *like, const TLay *t)
{
	Node *v = lower_new_op(c, op, like, 1);
	v->args[0] = value_node(src);
	v->in_types[0] = src->out;
	v->out = src->out;
	if (v->out.is_ref) /* a parameter read directly: the mirror yields a tensor */
		v->out = lower_abs_like(c->m, &src->out, src->out.shape.dims, src->out.shape.rank);
	v->lay = lay_new(c->m, 1, 1);
	v->lay->in[0] = v->lay->out[0] = *t;
	v->lay->flags = LAY_INSERTED;
	v->has_pattrs = 1;
	return v;
}

/* --virtual-ops: the step_parallel_end view (§3.0, §3.6), where the mirror
 * operators of weights and the loss's _VirtualDiv are still nodes (autodiff
 * later turns them into the gradient AllReduce and RealDiv). */
static void insert_virtual_ops(LowerCtx *c, Graph *g, int64_t *grp, int64_t *opt)
{
	Module *m = c->m;
	Node *loss = lower_loss_node(g);
	int64_t div = loss && loss->lay->nout ? lower_loss_repeat(c, loss->lay) : 1;
	Vec(Node *) out = {0};
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		NodeLayout *l = n->lay;
		if (l && (l->flags & LAY_OP) && !(l->flags & LAY_INSERTED)) {
			for (uint32_t k = 0; k < n->nargs && k < l->nin; k++) {
				if (n->args[k].kind != V_NODE || !l->in[k].ndev)
					continue;
				Node *a = n->args[k].u.node;
				const TLay *at = a->lay && a->lay->nout ? &a->lay->out[0] : &l->in[k];
				Node *p = source(a);
				if (n == loss && div > 1) {
					Node *v = virtual_op(c, OP_VirtualDiv, a, n, at);
					char inst[32];
					snprintf(inst, sizeof inst, "%llu",
					         (unsigned long long)lower_hash_name(n, (int)k));
					v->instance = intern_cstr(inst);
					lower_attr_put(m, &v->pattrs, "divisor", value_int(div, NT_I64));
					lower_attr_put(m, &v->pattrs, "keep_value_node_input", value_bool(1));
					lower_order_attrs(&v->pattrs);
					vec_push(&out, v);
					n->args[k] = value_node(v);
					continue;
				}
				if (!p || !lower_is_weight(p) || !p->lay)
					continue;
				int nopt = 0, nm = 0;
				if (tlay_equal(&p->lay->out[0], &l->in[k]))
					lower_param_shard(c, p, opt, &nopt, grp, &nm);
				else
					nm = lower_replica_group(c, &l->in[k], grp);
				if (nm <= 1)
					continue;
				Node *v = virtual_op(c, OP_MirrorOperator, a, n, at);
				v->instance = intern_cstr("_MirrorOperator");
				char name[64];
				lower_group_name(c, grp, nm, name, sizeof name);
				lower_attr_put(m, &v->pattrs, "group", value_str(name));
				lower_attr_put(m, &v->pattrs, "dev_num", value_int(nm, NT_I64));
				lower_attr_put(m, &v->pattrs, "mean_flag", value_bool(0));
				lower_attr_put(m, &v->pattrs, "fusion", value_int(param_fusion(p), NT_I64));
				lower_attr_put(m, &v->pattrs, "keep_value_node_input", value_bool(1));
				lower_attr_put(m, &v->pattrs, "mirror_user_id", value_str(sym_str(p->name)));
				lower_order_attrs(&v->pattrs);
				vec_push(&out, v);
				n->args[k] = value_node(v);
			}
		}
		vec_push(&out, n);
	}
	ir_graph_set_nodes(g, out.a, out.n, out.cap);
}

int pass_comm(Module *m, const Options *o)
{
	if (o->device_num <= 1)
		return 0; /* stand-alone: nothing to lower */
	LowerCtx c;
	if (lower_ctx_init(&c, m, o) < 0)
		return 1;
	Graph *g = ir_entry(m);
	int64_t *grp = xmalloc(LOWER_MAX_GROUP * sizeof *grp);
	int64_t *opt = xmalloc(LOWER_MAX_GROUP * sizeof *opt);
	NodeVec out = {0};
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		lower_subst_args(n);
		vec_push(&out, n);
		NodeLayout *l = n->lay;
		if (!l || !(l->flags & LAY_OP) || l->fwd == FC_NONE || l->fwd == FC_REDUCESCATTER ||
		    l->fwd == FC_BATCHSTATS || n->dead || !l->nout)
			continue; /* a ReduceScatter changes the local shape, batch statistics come before
			           * the operator: redistribute inserts both */
		int ng = lower_group_mask(&c, l->odev, l->nodev, l->fwd_mask, grp);
		if (ng <= 1)
			continue;
		if (n->out.shape.kind == SK_TUPLE || n->out.shape.kind == SK_LIST) {
			l->subst = all_reduce_items(&c, n, grp, ng, &out);
			continue;
		}
		if (l->fwd == FC_ALLREDUCE_PNORM) {
			l->subst = pnorm_across(&c, n, grp, ng, &out);
			continue;
		}
		Node *last = lower_all_reduce(&c, n, n, grp, ng, l->fwd_op, 0);
		vec_push(&out, last);
		if (l->fwd == FC_ALLREDUCE_MEAN) {
			last = scalar_op(&c, OP_RealDiv, last, n,
			                 lower_scalar_tensor(m, last->out.dtype ? last->out.dtype : intern_cstr("Float32"), ng),
			                 1);
			vec_push(&out, last);
		}
		l->subst = last;
	}
	if (g) {
		ir_graph_set_nodes(g, out.a, out.n, out.cap);
		KeyMap mirrors;
		keymap_init(&mirrors, sizeof(MirrorGroup));
		/* mirrors: every operator input that reads a trainable weight
		 * with a replica (gradient) group larger than one (§3.6) */
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			if (n->lay && n->lay->subst)
				n->lay->subst = NULL; /* lower_clear_subst, in this sweep: nothing below reads it */
			if (!n->lay || !(n->lay->flags & LAY_OP) || (n->lay->flags & LAY_INSERTED))
				continue;
			for (uint32_t k = 0; k < n->nargs && k < n->lay->nin; k++) {
				if (n->args[k].kind != V_NODE || !n->lay->in[k].ndev)
					continue;
				Node *p = source(n->args[k].u.node);
				if (!p || !lower_is_weight(p) || !p->lay)
					continue;
				int shard = tlay_equal(&p->lay->out[0], &n->lay->in[k]);
				if (shard && (!p->lay->nout || !p->lay->out[0].ndev))
					continue; /* no layout: lower_param_shard's empty group */
				const MirrorGroup *mg =
				    mirror_group(&c, &mirrors, shard ? &p->lay->out[0] : &n->lay->in[k], shard, p, grp, opt);
				if (mg->nm > 1)
					mirror_attrs(&c, n, p, mg->fusion_key);
			}
		}
		keymap_free(&mirrors);
		if (o->virtual_ops)
			insert_virtual_ops(&c, g, grp, opt); /* its ops' layouts are new, no substitution */
	}
	free(grp);
	free(opt);
	lower_ctx_free(&c);
	return 0;
}
