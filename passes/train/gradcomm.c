/* gradcomm.c - the `gradcomm` pass: gradient communication of the weights.
 *
 * pass_gradcomm (training-step.md §2.1 _MirrorOperator, §2.2, §2.3, §3.3;
 * parallel-lowering.md §3.6, §3.7)
 *   Requires: autodiff (Module.train: each trainable weight's local gradient).
 *   Provides: right after the node that completes a weight's gradient:
 *             - the mirror's bprop, AllReduce(sum) over the weight's replica
 *               (mirror) group, instance grad_mirror_MirrorOperator, fusion
 *               1 (comm_fusion), primal forward_node_name
 *               "_MirrorOperator_<weight id>"; pure data parallel gives the
 *               world group; nothing when the group is one rank;
 *             - with --gradients-mean, Mul(., Tensor(1/dev_num)) (the
 *               Cast(ScalarToTensor) pair folded to one constant, §8 Q2);
 *             - optimizer parallel (the weight is stored sharded): the bprop
 *               of its AllGather, ReduceScatter(sum) over the shard group,
 *               instance grad_parallel_optimizer_allgather_not_recompute,
 *               fusion 1, after the partial-shard mirror (§3.3 step 3),
 *               then x 1/rank_size with --gradients-mean (mean_flag).
 *             - with micro-batches (the micro pass), the accumulated
 *               gradient times 1/K once per step, as MindSpore's
 *               _TrainGradAccuStepCell divides by micro_size
 *               (training-step.md §4.6); this runs at one device too.
 *             Module.train's gradients become the communicated ones.
 *   What a weight's gradient then equals (sappc(1) "TRAINING STEP"): the
 *   loss's _VirtualDiv divides the seed by the number of devices holding the
 *   loss, every other partial sum is completed by these AllReduces, so
 *   without --gradients-mean each rank holds exactly its slice of the
 *   single-device gradient; with it, that slice divided by the size of the
 *   weight's replica group R (1 for a weight no device repeats).
 *   Invalidates: nothing; node marks are cleared.
 */
#include <string.h>

#include "train.h"

static void drop_attr(AttrList *l, const char *key)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < l->n; i++)
		if (strcmp(sym_str(l->a[i].key), key) != 0)
			l->a[k++] = l->a[i];
	l->n = k;
}

/* a communication op of the gradient: group attributes as a bprop-made
 * op has them (no group_ranks, §2.2).  The list depends on the operator
 * and the group only, so the ops of one group share one (lists, by
 * (op, the group's ranks); nobody writes into an inserted op's list):
 * a 4096-layer step has tens of thousands of these ops, 400 bytes of
 * attributes each.  The key is the ranks themselves, not the group's name
 * printed and interned again for every weight. */
static Node *grad_comm(TrainEmit *e, KeyMap *lists, int64_t *key, int op, Node *src, const Abs *out,
                       const int64_t *ranks, int nr, const char *inst)
{
	Node *c = train_op(e, op, 1, out);
	train_arg_node(e, c, 0, src);
	c->instance = lower_sym(inst);
	key[0] = op; /* key: room for LOWER_MAX_GROUP + 1 */
	memcpy(key + 1, ranks, (size_t)nr * sizeof *ranks);
	int fresh;
	AttrList *shared = keymap_get(lists, key, (uint32_t)nr + 1, &fresh);
	if (!fresh) {
		c->pattrs = *shared;
		c->has_pattrs = 1;
		return c;
	}
	lower_attr_put(e->m, &c->pattrs, "op", value_str("sum"));
	lower_comm_group_attrs(&e->lc, c, ranks, nr, 0);
	drop_attr(&c->pattrs, "group_ranks");
	if (op == OP_ReduceScatter)
		lower_attr_put(e->m, &c->pattrs, "rank_size", value_int(nr, NT_I64));
	lower_attr_put(e->m, &c->pattrs, "fusion", value_int(1, NT_I64));
	if (op == OP_AllReduce)
		lower_attr_put(e->m, &c->pattrs, "index", value_int(0, NT_I64));
	lower_attr_put(e->m, &c->pattrs, "no_eliminate", value_bool(1));
	static const char *const order[] = {"op",     "group",          "rank_size",   "fusion",
	                                    "index",  "group_rank_ids", "no_eliminate"};
	lower_reorder_attrs(&c->pattrs, order, 7);
	c->has_pattrs = 1;
	*shared = c->pattrs;
	return c;
}

static Node *mean(TrainEmit *e, Node *src, int64_t n)
{
	Node *d = train_op(e, OP_Mul, 2, &src->out);
	train_arg_node(e, d, 0, src);
	Abs ca = train_abs_tensor(e->m, src->out.dtype, NULL, 0, 1);
	train_arg(e, d, 1, train_float_tensor(e->m, src->out.dtype, 1.0 / (double)n), &ca);
	return d;
}

/* the primal attributes of the bprop of a forward node that is not in the
 * graph (the mirror, the gather): forward_node_name "<prim>_<id>" and
 * forward_unique_id of the weight (mirror) or of its AllGather, formed by
 * the printer as for autodiff's nodes: one NodeExt per prim, the id of
 * each node in tab */
static NodeExt *virtual_ext(Module *m, const char *prim, const FwdIds *tab)
{
	NodeExt *x = arena_alloc(m->arena, sizeof *x);
	x->has_fwd = 1;
	x->fwd_prim = intern_cstr(prim);
	x->fwd_tab = tab;
	x->has_primal = 1;
	return x;
}

/* the first forward user of weight p (its Load): the mirror's scope */
static const Node *first_user(Graph *g, const Node *p)
{
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		const Node *n = g->nodes.a[i];
		for (uint32_t k = 0; k < n->nargs; k++)
			if (n->args[k].kind == V_NODE && n->args[k].u.node == p)
				return n;
	}
	return p;
}

int pass_gradcomm(Module *m, const Options *o)
{
	TrainInfo *ti = m->train;
	int micro = m->micro > 1 ? m->micro : 1;
	if (!ti || !train_wanted(m, o) || (o->device_num <= 1 && micro == 1) || !ti->nw)
		return 0;
	TrainEmit e;
	if (train_emit_init(&e, m, o) < 0)
		return 1;
	Graph *g = e.g;
	KeyMap lists;
	keymap_init(&lists, sizeof(AttrList));
	int64_t *key = xmalloc((LOWER_MAX_GROUP + 1) * sizeof *key);
	int64_t *grp = xmalloc(LOWER_MAX_GROUP * sizeof *grp), *opt = xmalloc(LOWER_MAX_GROUP * sizeof *opt);
	uint32_t *start = xcalloc(ti->nw + 1, sizeof *start);
	uint32_t *next = xcalloc(ti->nw, sizeof *next); /* weights whose gradient is the same node */
	/* the first user of each weight, found in one sweep */
	const Node **user = xcalloc(ti->nw, sizeof *user);
	ir_clear_marks(m);
	for (uint32_t w = 0; w < ti->nw; w++)
		ti->weight[w]->mark = w + 1;
	/* the sweep stops once every weight has its user: they are all in the
	 * forward part, and the backward after it is most of the graph */
	uint32_t found = 0;
	for (uint32_t i = 0; i < g->nodes.n && found < ti->nw; i++) {
		sweep_prefetch(g->nodes.a, i, g->nodes.n);
		Node *n = g->nodes.a[i];
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (p && p->kind == NK_PARAM && p->mark && !user[p->mark - 1]) {
				user[p->mark - 1] = n;
				found++;
			}
		}
	}
	for (uint32_t w = 0; w < ti->nw; w++) /* the only marks set since the clear */
		ti->weight[w]->mark = 0;
	FwdIds *tab = arena_alloc(m->arena, sizeof *tab);
	tab->base = m->next_id;
	/* with micro-batches the mirror is _MirrorMicroStepOperator
	 * (parallel_processer.cc DoInsertMirrorOps), reducing the buffer */
	const char *mirror_prim = micro > 1 ? "_MirrorMicroStepOperator" : "_MirrorOperator";
	NodeExt *mirror_x = virtual_ext(m, mirror_prim, tab), *gather_x = virtual_ext(m, "AllGather", tab);
	for (uint32_t w = 0; w < ti->nw; w++) {
		Node *p = ti->weight[w];
		Node *gr = ti->grad[w];
		start[w] = e.out.n;
		int nopt = 0, nm = 0;
		int rep = o->device_num > 1 ? lower_param_shard(&e.lc, p, opt, &nopt, grp, &nm) : 1;
		const Node *u = user[w] ? user[w] : first_user(g, p);
		if (nm > 1) {
			train_emit_bprop_of(&e, u, lower_sym(mirror_prim), 1, OP_AllReduce);
			e.ext = mirror_x;
			gr = grad_comm(&e, &lists, key, OP_AllReduce, gr, &gr->out, grp, nm,
			               micro > 1 ? "grad_mirror_MirrorMicroStepOperator" : "grad_mirror_MirrorOperator");
			if (o->gradients_mean)
				gr = mean(&e, gr, nm);
		}
		if (ti->gather[w] && rep > 1) {
			Node *ag = ti->gather[w];
			train_emit_bprop_of(&e, ag, lower_sym("AllGather"), 1, OP_ReduceScatter);
			e.ext = gather_x;
			Abs sa = train_abs_value(&p->out);
			gr = grad_comm(&e, &lists, key, OP_ReduceScatter, gr, &sa, opt, nopt,
			               "grad_parallel_optimizer_allgather_not_recompute");
			if (o->gradients_mean)
				gr = mean(&e, gr, nopt);
		}
		e.ext = NULL;
		if (micro > 1) /* the micro-batches' sum, averaged (micro.c) */
			gr = mean(&e, gr, micro);
		ti->grad[w] = gr;
	}
	start[ti->nw] = e.out.n;
	/* the forward ids: the weight's for its mirror's nodes, its
	 * AllGather's for the gather's */
	tab->n = m->next_id - tab->base;
	uint32_t *fid = tab->n ? arena_alloc(m->arena, tab->n * sizeof *fid) : NULL;
	for (uint32_t w = 0; w < ti->nw; w++)
		for (uint32_t k = start[w]; k < start[w + 1]; k++) {
			const Node *n = e.out.a[k];
			if (ir_node_x(n) == mirror_x)
				fid[n->id - tab->base] = ti->weight[w]->id;
			else if (ir_node_x(n) == gather_x)
				fid[n->id - tab->base] = ti->gather[w]->id;
		}
	tab->id = fid;
	if (e.out.n) {
		/* splice each weight's nodes after its local gradient */
		for (uint32_t w = ti->nw; w-- > 0;) {
			Node *gl = start[w] < start[w + 1] ? e.out.a[start[w]]->args[0].u.node : NULL;
			if (!gl)
				continue;
			next[w] = gl->mark;
			gl->mark = w + 1;
		}
		/* in place, from the end: a node moves up by the nodes spliced
		 * before it, so it is read before its slot is written (a second
		 * array of two million nodes would be the pass's peak) */
		uint32_t n0 = g->nodes.n, pos = n0 + e.out.n;
		vec_grow(&g->nodes, e.out.n);
		for (uint32_t i = n0; i-- > 0;) {
			sweep_prefetch_back(g->nodes.a, i);
			Node *n = g->nodes.a[i];
			uint32_t cnt = 0;
			for (uint32_t w = n->mark; w; w = next[w - 1])
				cnt += start[w] - start[w - 1];
			pos -= cnt;
			uint32_t q = pos;
			for (uint32_t w = n->mark; w; w = next[w - 1])
				for (uint32_t k = start[w - 1]; k < start[w]; k++)
					g->nodes.a[q++] = e.out.a[k];
			g->nodes.a[--pos] = n;
		}
		g->nodes.n = n0 + e.out.n;
		ir_renumber(g);
		for (uint32_t w = 0; w < ti->nw; w++) /* the only marks set: all 0 again */
			if (start[w] < start[w + 1])
				e.out.a[start[w]]->args[0].u.node->mark = 0;
	}
	free(user);
	free(next);
	free(start);
	free(grp);
	free(opt);
	keymap_free(&lists);
	free(key);
	train_emit_free(&e);
	xmalloc_trim();
	return 0;
}
