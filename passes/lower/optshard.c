/* optshard.c - the `optshard` pass: optimizer parallel (weight sharding).
 *
 * pass_optshard (parallel-lowering.md §3.7, §5.2)
 *   Requires: redistribute (the module is rank-local).
 *   Provides: with --enable-parallel-optimizer, every trainable weight whose
 *             replica group has R > 1 ranks is stored sharded on dimension 0
 *             over rep = R ranks, or over consecutive chunks of
 *             --optimizer-weight-shard-size=K ranks when 1 < K < R divides R
 *             (a weight whose local dimension 0 does not divide is left
 *             alone, and so is a variable a forward ScatterDiv writes).  The # Params line and the Load type line show the
 *             shard; an AllGather named
 *             parallel_optimizer_allgather_not_recompute restores the
 *             model-parallel slice between the Load and its users.  The
 *             mirror (gradient) group seen in related_fusion_key (comm pass)
 *             is then the chunk-pairing group, or none when rep = R.
 *   Invalidates: nothing.
 */
#include <string.h>

#include "lower.h"

static Node *opt_allgather(LowerCtx *c, Node *src, Node *param, const int64_t *g, int ng, const Abs *full)
{
	Module *m = c->m;
	Node *like = src->kind == NK_PARAM ? NULL : src;
	Node *a = lower_new_op(c, OP_AllGather, like, 1);
	if (!like) {
		a->g = param->g;
		a->scope_kind = SCOPE_NONE;
	}
	a->instance = intern_cstr("parallel_optimizer_allgather_not_recompute");
	a->args[0] = value_node(src);
	a->in_types[0] = src->out;
	if (a->in_types[0].is_ref) {
		a->in_types[0] = lower_abs_like(m, &src->out, src->out.shape.dims, src->out.shape.rank);
	}
	a->out = lower_abs_like(m, full, full->shape.dims, full->shape.rank);
	lower_attr_put(m, &a->pattrs, "rank_size", value_int(ng, NT_I64));
	lower_attr_put(m, &a->pattrs, "fusion", value_int(1, NT_I64));
	lower_attr_put(m, &a->pattrs, "mean_flag", value_bool(c->o->gradients_mean)); /* gradients_mean (§3.3) */
	lower_attr_put(m, &a->pattrs, "no_eliminate", value_bool(1));
	lower_comm_group_attrs(c, a, g, ng, 0);
	lower_attr_put(m, &a->pattrs, "recompute", value_bool(0));
	lower_attr_put(m, &a->pattrs, "mirror_user_id", value_str(sym_str(param->name)));
	static const char *const order[] = {"group",          "rank_size",    "fusion",
	                                    "mean_flag",      "no_eliminate", "group_ranks",
	                                    "group_rank_ids", "recompute",    "mirror_user_id"};
	lower_reorder_attrs(&a->pattrs, order, 9);
	a->has_pattrs = 1;
	a->lay = lay_new(m, 1, 1);
	a->lay->out[0] = param->lay->out[0];
	a->lay->flags = LAY_INSERTED | LAY_LOCAL;
	return a;
}

static Shape shard0(Module *m, const Shape *s, int rep)
{
	Shape t = shape_dims(m->arena, s->dims, s->rank);
	if (t.rank >= 1)
		t.dims[0] /= rep;
	return t;
}

int pass_optshard(Module *m, const Options *o)
{
	if (o->device_num <= 1)
		return 0; /* stand-alone: nothing to lower */
	if (!o->enable_parallel_optimizer)
		return 0;
	LowerCtx c;
	if (lower_ctx_init(&c, m, o) < 0)
		return 1;
	Graph *g = ir_entry(m);
	int64_t *opt = xmalloc(LOWER_MAX_GROUP * sizeof *opt), *mir = xmalloc(LOWER_MAX_GROUP * sizeof *mir);
	Node **ag = g ? xcalloc(g->params.n + 1, sizeof *ag) : NULL;
	/* a variable a forward operator writes in place (ScatterDiv's) is
	 * state, not a trained weight (MindSpore shards only parameters that
	 * require a gradient): it stays whole, written where it lives */
	uint8_t *written = g ? xcalloc(g->params.n + 1, 1) : NULL;
	for (uint32_t i = 0; g && i < g->params.n; i++)
		g->params.a[i]->mark = i + 1;
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		const Node *n = g->nodes.a[i];
		const Node *v = n->nargs && n->args[0].kind == V_NODE ? n->args[0].u.node : NULL;
		if (n->kind == NK_CNODE && op_table[n->op].family == FAM_SCATTER && v && v->kind == NK_PARAM &&
		    v->g == g && v->mark)
			written[v->mark - 1] = 1;
	}
	for (uint32_t i = 0; g && i < g->params.n; i++) {
		Node *p = g->params.a[i];
		p->mark = i + 1;
		if (!lower_is_weight(p) || !p->lay || p->out.shape.kind != SK_DIMS || written[i])
			continue;
		int nopt, nm;
		int rep = lower_param_shard(&c, p, opt, &nopt, mir, &nm);
		if (rep <= 1)
			continue;
		Abs full = p->out;
		p->out.shape = shard0(m, &p->out.shape, rep);
		p->lay = lay_copy(m, p->lay); /* its own: weights share equal layouts (lay_keep) */
		p->lay->opt_rep = rep;
		/* the AllGather is built per Load below; remember the group on a
		 * throw-away node carrying the full abstract */
		ag[i] = opt_allgather(&c, p, p, opt, nopt, &full);
	}
	Vec(Node *) out = {0};
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		lower_subst_args(n);
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (!p || p->kind != NK_PARAM || p->g != g || !p->mark || !ag[p->mark - 1])
				continue;
			Node *tmpl = ag[p->mark - 1];
			if (k < n->nin_types)
				n->in_types[k].shape = p->out.shape;
			if (ir_node_is_op(n, OP_Load) && k == 0) {
				/* Load reads the shard; the gather follows it */
				Abs full = n->out;
				n->out.shape = shard0(m, &n->out.shape, p->lay->opt_rep);
				if (n->lay) { /* its own: the Loads of a layer share theirs (lay_keep) */
					n->lay = lay_copy(m, n->lay);
					n->lay->opt_rep = p->lay->opt_rep;
				}
				vec_push(&out, n);
				Node *a = opt_allgather(&c, n, p, NULL, 0, &full);
				a->pattrs = tmpl->pattrs;
				a->out = lower_abs_like(m, &full, full.shape.dims, full.shape.rank);
				vec_push(&out, a);
				if (n->lay)
					n->lay->subst = a;
				else {
					n->lay = lay_new(m, 0, 0);
					n->lay->subst = a;
				}
				n = NULL;
				break;
			}
			/* a direct use of the parameter */
			Node *a = opt_allgather(&c, p, p, NULL, 0, &tmpl->out);
			a->pattrs = tmpl->pattrs;
			a->g = g;
			a->out = tmpl->out;
			vec_push(&out, a);
			n->args[k] = value_node(a);
			if (k < n->nin_types)
				n->in_types[k] = a->out;
		}
		if (n)
			vec_push(&out, n);
	}
	if (g) {
		ir_graph_set_nodes(g, out.a, out.n, out.cap);
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			for (uint32_t k = 0; k < n->nargs && k < n->nin_types; k++)
				if (n->args[k].kind == V_NODE && n->in_types[k].shape.kind == SK_DIMS &&
				    n->args[k].u.node->out.shape.kind == SK_DIMS)
					n->in_types[k].shape = n->args[k].u.node->out.shape;
		}
	} else {
		vec_free(&out);
	}
	lower_clear_subst(g);
	ir_clear_marks(m);
	free(ag);
	free(written);
	free(opt);
	free(mir);
	lower_ctx_free(&c);
	return 0;
}
