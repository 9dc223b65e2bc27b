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
#include <string.h>

#include "lower.h"

static Node *subst_of(Node *p)
{
	for (int guard = 0; p->lay && p->lay->subst && guard < 64; guard++)
		p = p->lay->subst;
	return p;
}

/* substitutions are valid inside the pass that made them only */
void lower_clear_subst(Graph *g)
{
	for (uint32_t i = 0; g && i < g->nodes.n; i++)
		if (g->nodes.a[i]->lay)
			g->nodes.a[i]->lay->subst = NULL;
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

static Node *all_reduce(LowerCtx *c, Node *src, Node *origin, const int64_t *g, int ng, Sym op, int index)
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
	static const char *const order[] = {"comm_reuse", "group", "fusion", "op", "rank_list",
					    "group_ranks", "index", "group_rank_ids", "no_eliminate"};
	lower_reorder_attrs(&a->pattrs, order, 9);
	a->has_pattrs = 1;
	char inst[64];
	snprintf(inst, sizeof inst, "forward_op_%llu", (unsigned long long)lower_hash_name(origin, index));
	a->instance = intern_cstr(inst);
	char uid[16];
	snprintf(uid, sizeof uid, "%u", c->next_uid++);
	lower_attr_put(m, &a->primal, "forward_comm_node_unique_id", value_str(uid));
	a->has_primal = 1;
	a->lay = pass_lay(m, &origin->lay->out[0], origin);
	return a;
}

static Value scalar_tensor(Module *m, Sym dtype, int64_t v)
{
	Value e[3];
	memset(e, 0, sizeof e);
	e[0].kind = V_LIST;
	e[0].key = intern_cstr("shape");
	e[1] = value_word(sym_str(dtype));
	e[1].key = intern_cstr("dtype");
	e[2] = value_int(v, NT_BARE);
	e[2].key = intern_cstr("value");
	Value t = value_tuple_of(m->arena, e, 3);
	t.kind = V_CALL;
	t.text = intern_cstr("Tensor");
	return t;
}

static Node *real_div(LowerCtx *c, Node *src, Node *origin, int64_t divisor, int index)
{
	Module *m = c->m;
	Node *d = lower_new_op(c, OP_RealDiv, origin, 2);
	d->args[0] = value_node(src);
	Sym dt = src->out.dtype ? src->out.dtype : intern_cstr("Float32");
	d->args[1] = scalar_tensor(m, dt, divisor);
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

static void mirror_attrs(LowerCtx *c, Node *user, Node *param, const int64_t *g, int ng)
{
	Module *m = c->m;
	char name[64], key[128], id[16], nid[16];
	lower_group_name(c, g, ng, name, sizeof name);
	snprintf(key, sizeof key, "all_reduce_%s_%lld", name, (long long)param_fusion(param));
	snprintf(id, sizeof id, "%u", c->next_uid++);
	snprintf(nid, sizeof nid, "%u", param->id);
	ir_attr_set(m, &user->cattrs, "related_comm_node_id", value_str(id));
	ir_attr_set(m, &user->primal, "related_fusion_key", value_str(key));
	ir_attr_set(m, &user->primal, "related_node_id", value_str(nid));
	user->has_cattrs = user->has_primal = 1;
	lower_order_attrs(&user->cattrs);
	lower_order_attrs(&user->primal);
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
	Vec(Node *) out = {0};
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		lower_subst_args(n);
		vec_push(&out, n);
		NodeLayout *l = n->lay;
		if (!l || !(l->flags & LAY_OP) || l->fwd == FC_NONE || n->dead || !l->nout)
			continue;
		int ng = lower_group_mask(&c, l->odev, l->nodev, l->fwd_mask, grp);
		if (ng <= 1)
			continue;
		Node *last = all_reduce(&c, n, n, grp, ng, l->fwd_op, 0);
		vec_push(&out, last);
		if (l->fwd == FC_ALLREDUCE_MEAN) {
			last = real_div(&c, last, n, ng, 1);
			vec_push(&out, last);
		}
		l->subst = last;
	}
	if (g) {
		free(g->nodes.a);
		g->nodes.a = out.a;
		g->nodes.n = out.n;
		g->nodes.cap = out.cap;
		ir_renumber(g);
		/* mirrors: every operator input that reads a trainable weight
		 * with a replica (gradient) group larger than one (§3.6) */
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			if (!n->lay || !(n->lay->flags & LAY_OP) || (n->lay->flags & LAY_INSERTED))
				continue;
			for (uint32_t k = 0; k < n->nargs && k < n->lay->nin; k++) {
				if (n->args[k].kind != V_NODE || !n->lay->in[k].ndev)
					continue;
				Node *p = source(n->args[k].u.node);
				if (!p || !lower_is_weight(p) || !p->lay)
					continue;
				int nopt = 0, nm = 0;
				if (tlay_equal(&p->lay->out[0], &n->lay->in[k]))
					lower_param_shard(&c, p, opt, &nopt, grp, &nm);
				else
					nm = lower_replica_group(&c, &n->lay->in[k], grp);
				if (nm > 1)
					mirror_attrs(&c, n, p, grp, nm);
			}
		}
	}
	lower_clear_subst(g);
	free(grp);
	free(opt);
	lower_ctx_free(&c);
	return 0;
}
