/* micro.c - the `micro` pass: the micro-batches of a pipelined step.
 *
 * pass_micro (training-step.md §4.1, §4.2)
 *   Requires: a verified module; the strategies (sapp), when there are any.
 *   Provides: with --micro-batch-num=K > 1, the entry graph as MindSpore's
 *             PipelineCell unrolls it (mindspore-ai/mindspore,
 *             python/mindspore/parallel/nn/parallel_cell_wrapper.py
 *             PipelineCell.construct, nn/wrap/cell_wrapper.py _MicroBatch):
 *             - every dataset input (a parameter without a default value)
 *               but those of dimension 0 = 1, which every micro-batch
 *               reads whole (MindSpore's _MicroBatch would cut them too,
 *               into nothing; a dump that feeds RoPE tables as inputs has
 *               them), is cut into K slices of dimension 0 by StridedSlice, begin
 *               (b·i, 0, ...), end (b·(i+1), rest), strides 1, b = B/K,
 *               in_strategy all 1s, primal attributes micro: I64(i),
 *               pipeline_begin: I64(i), segment: I64(0) (pipeline_transformer.cc
 *               LabelMicroBatch, pipeline_split_utils.cc SetStridedSliceStrategy);
 *             - the network (every operator but the Return) once per
 *               micro-batch, micro-batch i reading the i-th slices: the
 *               originals are micro-batch 0, the copies keep the
 *               original's full name, primitive, attributes and strategy,
 *               get the output shapes their inputs now give, and carry
 *               micro: I64(i) in their primal attributes, as MindSpore
 *               broadcasts it to every node (BroadCastMicroBatch);
 *             - the graph returns the sum of the K losses, Add(ret, loss_i)
 *               with primitive attribute pipeline_end: I64(i).
 *             Operators are ordered micro-batch by micro-batch, so the
 *             pipeline pass numbers the transfers of micro-batch i after
 *             those of i - 1 (with one boundary value, micro i has
 *             sr_tag i, §4.3).  The gradient of the sum is the sum of the
 *             micro-batches' gradients: the optimizer's gradient is that
 *             sum times 1/K (gradcomm, _TrainGradAccuStepCell), which for a
 *             loss that is a mean over the batch is the full batch's.
 *             With K = 1 the pass does nothing.
 *   Shapes: an operator with a shape rule (ir/shape.c) gets the shape its
 *   new inputs give; a Reshape's target and a BroadcastTo's shape have
 *   their dimension 0 divided by K when their input's was; an operator
 *   without a rule has the dimensions 0 of its outputs that equal an
 *   input's old dimension 0 divided by K.
 *   Errors: K does not divide a dataset input's dimension 0 (at the
 *   input); with pipeline stages in training, fewer micro-batches than
 *   stages (MindSpore refuses it too); the graph returns something other
 *   than one tensor (a loss to sum); an operator whose shape cannot follow
 *   the micro-batch (at the operator).  Exit 1.
 *   Invalidates: nothing computed earlier; node marks are cleared.
 * Linear: one copy of each operator per micro-batch.
 */
#include <string.h>

#include "lower.h"

/* the copy of operand producer p for micro-batch i: map[p->mark - 1] */
typedef struct Micro {
	Module *m;
	Graph *g;
	int K;
	uint32_t nn;
	Node **map;    /* per original node index, this micro-batch's copy */
	Node **slice;  /* per parameter index, this micro-batch's slice */
	int64_t *old0; /* per original node index: its output's old dimension 0 (-1: none) */
	Vec(Node *) out;
} Micro;

/* primal attribute key of n set to I64(v) */
static void set_primal(Module *m, Node *n, const char *key, int64_t v)
{
	NodeExt *x = ir_node_ext_mut(m, n);
	ir_attr_set(m, &x->primal, key, value_int(v, NT_I64));
	x->has_primal = 1;
}

static void label(Module *m, Node *n, int i)
{
	if (n->kind != NK_CNODE)
		return;
	set_primal(m, n, "micro", i);
	lower_order_attrs(&ir_node_x(n)->primal);
}

/* a copy of n (a new node of the same graph, same everything but its id
 * and debug name), NodeExt lists copied so that labelling the copy leaves
 * the original alone */
static Node *copy(Module *m, const Node *n, const Value *args)
{
	Node *c = ir_node_new(m, n->g, NK_CNODE);
	uint32_t id = c->id;
	*c = *n;
	c->id = id;
	c->name = 0;
	c->autoname = 1;
	c->mark = 0;
	c->args = n->nargs ? arena_dup(m->arena, args, n->nargs * sizeof *n->args) : NULL;
	c->in_types = n->nin_types ? arena_dup(m->arena, n->in_types, n->nin_types * sizeof *n->in_types) : NULL;
	if (ir_node_x(n)) {
		NodeExt *x = arena_dup(m->arena, ir_node_x(n), sizeof *x);
		if (x->primal.n)
			x->primal.a = arena_dup(m->arena, x->primal.a, x->primal.n * sizeof *x->primal.a);
		if (x->cattrs.n)
			x->cattrs.a = arena_dup(m->arena, x->cattrs.a, x->cattrs.n * sizeof *x->cattrs.a);
		ir_node_set_x(m, c, x);
	}
	if (n->pattrs.n) {
		c->pattrs.a = arena_dup(m->arena, n->pattrs.a, n->pattrs.n * sizeof *n->pattrs.a);
	}
	return c;
}

/* the full name of a node PipelineCell makes itself [inferred: the
 * wrapper's cells, micro_inputs (a CellList of _MicroBatch) and its
 * add_list primitives, under the top scope] */
static void wrapper_name(Node *n, const char *fmt, int i, int k)
{
	char buf[160];
	snprintf(buf, sizeof buf, fmt, i, k);
	n->scope_kind = SCOPE_FULLNAME;
	n->scope = intern_cstr(buf);
	n->scope_op = 0;
}

/* StridedSlice of dataset input p for micro-batch i */
static Node *make_slice(Micro *mc, LowerCtx *lc, Node *p, int i, int nth)
{
	Module *m = mc->m;
	const Shape *s = &p->out.shape;
	int r = s->rank;
	int64_t b = s->dims[0] / mc->K, begin[MAX_RANK], end[MAX_RANK], one[MAX_RANK], d[MAX_RANK];
	for (int k = 0; k < r; k++) {
		begin[k] = k ? 0 : b * i;
		end[k] = k ? s->dims[k] : b * (i + 1);
		one[k] = 1;
		d[k] = k ? s->dims[k] : b;
	}
	Node *n = lower_new_op(lc, OP_StridedSlice, NULL, 9);
	n->g = mc->g;
	n->args[0] = value_node(p);
	n->in_types[0] = p->out;
	n->args[1] = lower_ints(m, begin, r);
	n->args[2] = lower_ints(m, end, r);
	n->args[3] = lower_ints(m, one, r);
	for (int k = 1; k <= 3; k++)
		n->in_types[k] = lower_abs_tuple_ints(m, r);
	for (int k = 4; k < 9; k++) {
		n->args[k] = value_int(0, NT_I64);
		n->in_types[k] = lower_abs_int();
	}
	n->out = lower_abs_like(m, &p->out, d, r);
	n->stage = -1; /* the stage of its first user (pipeline.c) */
	n->loc = p->loc;
	wrapper_name(n, "Default/micro_inputs-CellList/%d-_MicroBatch/StridedSlice-op%d", i, nth);
	set_primal(m, n, "micro", i);
	set_primal(m, n, "pipeline_begin", i);
	set_primal(m, n, "segment", 0);
	lower_order_attrs(&ir_node_ext_mut(m, n)->primal);
	return n;
}

/* divide dimension 0 of a shape literal by K when it is a positive
 * multiple of K (a Reshape target, a BroadcastTo shape) */
static int scale_literal(Module *m, Value *v, int K)
{
	if ((v->kind != V_TUPLE && v->kind != V_LIST) || !v->n)
		return 0;
	int64_t d0;
	if (!value_get_int(&v->u.elems[0], &d0) || d0 <= 0 || d0 % K)
		return d0 == -1; /* -1 follows by itself */
	Value c = value_clone(m->arena, v);
	c.u.elems[0].u.i = d0 / K;
	*v = c;
	return 1;
}

/* Give copy c (or original, for micro-batch 0 with sliced inputs) the
 * shapes its operands now have.  0 ok, 1 reported. */
static int reshape_node(Micro *mc, Node *c, int changed)
{
	Module *m = mc->m;
	if (!changed)
		return 0;
	if (ir_node_is_op(c, OP_Reshape) && c->nargs >= 2 && c->args[1].kind != V_NODE) {
		if (!scale_literal(m, &c->args[1], mc->K))
			goto cannot;
	}
	if (ir_node_is_op(c, OP_BroadcastTo)) {
		if (c->nargs >= 2 && c->args[1].kind != V_NODE) {
			if (!scale_literal(m, &c->args[1], mc->K))
				goto cannot;
		} else if (ir_attr_get(&c->pattrs, "shape")) {
			/* nodes share attribute lists: scale the shape in a copy */
			AttrList l = c->pattrs;
			l.a = arena_dup(m->arena, l.a, l.n * sizeof *l.a);
			if (!scale_literal(m, ir_attr_get(&l, "shape"), mc->K))
				goto cannot;
			c->pattrs = l;
		}
	}
	if (ir_node_is_op(c, OP_TupleGetItem) && c->nargs == 2 && c->nin_types >= 1 &&
	    c->in_types[0].shape.kind == SK_TUPLE) {
		/* the element of the producer's (new) tuple */
		int64_t e;
		const Abs *t = &c->in_types[0];
		if (value_get_int(&c->args[1], &e) && e >= 0 && e < t->shape.rank &&
		    t->shape.sub[e].kind == SK_DIMS) {
			c->out = lower_abs_like(m, &c->out, t->shape.sub[e].dims, t->shape.sub[e].rank);
			return 0;
		}
	}
	if (ir_node_is_op(c, OP_MakeTuple) && c->out.shape.kind == SK_TUPLE && c->out.shape.rank == c->nargs) {
		/* its elements are its operands as they now are (not a guess
		 * from dimension 0: MakeTuple(t, t) of a Transpose that moved
		 * the batch keeps a dimension 0 equal to the old one) */
		Shape *sub = arena_dup(m->arena, c->out.shape.sub, c->out.shape.rank * sizeof *sub);
		for (uint32_t k = 0; k < c->nargs; k++) {
			const Node *p = c->args[k].kind == V_NODE ? c->args[k].u.node : NULL;
			if (p)
				sub[k] = p->out.shape;
			else if (k < c->nin_types)
				sub[k] = c->in_types[k].shape;
		}
		c->out.shape.sub = sub;
		return 0;
	}
	if (ir_node_is_op(c, OP_AddN) && c->nargs >= 1 && c->args[0].kind == V_NODE) {
		/* the sum has its operands' shape: the first tensor's, or the
		 * first element's of a tuple (AddN(MakeTuple(...))) */
		const Shape *xs = &c->args[0].u.node->out.shape;
		if (xs->kind == SK_TUPLE && xs->rank)
			xs = &xs->sub[0];
		if (xs->kind == SK_DIMS) {
			c->out = lower_abs_like(m, &c->out, xs->dims, xs->rank);
			return 0;
		}
	}
	if (ir_node_is_op(c, OP_Split) && c->nargs >= 1 && c->args[0].kind == V_NODE && c->out.shape.kind == SK_TUPLE) {
		/* output_num equal pieces along axis of its operand as it now is
		 * (the batch need not be dimension 0 here, nor the split axis
		 * another) */
		const Shape *xs = &c->args[0].u.node->out.shape;
		int64_t axis = 0, num = c->out.shape.rank, e[MAX_RANK];
		Value *av = c->nargs >= 2 && c->args[1].kind != V_NODE ? &c->args[1] : ir_attr_get(&c->pattrs, "axis");
		if (xs->kind != SK_DIMS || !av || !value_get_int(av, &axis))
			goto cannot;
		axis += axis < 0 ? xs->rank : 0;
		if (axis < 0 || axis >= xs->rank || num <= 0 || xs->dims[axis] % num) {
			diag_error_at(c->loc,
			              "Split (%%%d): its shapes cannot follow the micro-batch (--micro-batch-num=%d): "
			              "dimension %lld of a micro-batch's operand does not split into %lld",
			              c->local, mc->K, (long long)axis, (long long)num);
			return 1;
		}
		memcpy(e, xs->dims, xs->rank * sizeof *e);
		e[axis] /= num;
		Shape piece = shape_shared(m, e, xs->rank);
		Shape *sub = arena_alloc(m->arena, (size_t)num * sizeof *sub);
		for (int64_t k = 0; k < num; k++)
			sub[k] = piece;
		c->out.shape.sub = sub;
		return 0;
	}
	int64_t d[MAX_RANK];
	int r = 0;
	char why[256] = "";
	int rc = ir_infer_shape(c, d, &r, why, sizeof why);
	if (rc < 0) {
		diag_error_at(c->loc, "%s (%%%d): its shapes cannot follow the micro-batch (--micro-batch-num=%d): %s",
		              sym_str(c->prim), c->local, mc->K, why);
		return 1;
	}
	if (rc > 0) {
		c->out = lower_abs_like(m, &c->out, d, r);
		return 0;
	}
	/* no rule: dimensions 0 equal to an input's old dimension 0 */
	int64_t olds[64];
	int no = 0;
	for (uint32_t k = 0; k < c->nargs && no < 64; k++) {
		Node *p = c->args[k].kind == V_NODE ? c->args[k].u.node : NULL;
		if (p && p->kind == NK_CNODE && p->g == mc->g && p->mark && mc->old0[p->mark - 1] > 0)
			olds[no++] = mc->old0[p->mark - 1];
		else if (p && p->kind == NK_PARAM && p->mark && mc->slice[p->mark - 1])
			olds[no++] = p->out.shape.dims[0];
	}
	Abs o = c->out;
	int hit = 0;
	if (o.shape.kind == SK_DIMS && o.shape.rank) {
		for (int j = 0; j < no && !hit; j++)
			if (o.shape.dims[0] == olds[j]) {
				int64_t e[MAX_RANK];
				memcpy(e, o.shape.dims, o.shape.rank * sizeof *e);
				e[0] /= mc->K;
				c->out = lower_abs_like(m, &o, e, o.shape.rank);
				hit = 1;
			}
	} else if (o.shape.kind == SK_TUPLE) {
		Shape *sub = arena_dup(m->arena, o.shape.sub, o.shape.rank * sizeof *sub);
		for (uint32_t t = 0; t < o.shape.rank; t++) {
			if (sub[t].kind != SK_DIMS || !sub[t].rank)
				continue;
			for (int j = 0; j < no; j++)
				if (sub[t].dims[0] == olds[j]) {
					int64_t e[MAX_RANK];
					memcpy(e, sub[t].dims, sub[t].rank * sizeof *e);
					e[0] /= mc->K;
					sub[t] = shape_shared(m, e, sub[t].rank);
					hit = 1;
					break;
				}
		}
		c->out.shape.sub = sub;
	} else {
		hit = 1; /* no shape: nothing to follow (monads, scalars) */
	}
	if (hit)
		return 0;
cannot:
	diag_error_at(c->loc,
	              "%s (%%%d): its output shape cannot follow the micro-batch (--micro-batch-num=%d): no "
	              "dimension 0 comes from the batch",
	              sym_str(c->prim), c->local, mc->K);
	return 1;
}

/* the graph's loss (what Return returns), or NULL when it returns
 * something else than one tensor (reported) */
static Node *the_loss(Graph *g, int K)
{
	Node *ret = g->nodes.a[g->nodes.n - 1];
	if (ret->kind != NK_RETURN || !ret->nargs || ret->args[0].kind != V_NODE ||
	    ret->args[0].u.node->kind != NK_CNODE || ret->args[0].u.node->out.shape.kind != SK_DIMS) {
		diag_error_at(ret->loc,
		              "--micro-batch-num=%d: the graph must return one tensor, the loss the micro-batches "
		              "add up",
		              K);
		return NULL;
	}
	return ret->args[0].u.node;
}

int pass_micro(Module *m, const Options *o)
{
	int K = o->micro_batch_num;
	Graph *g = ir_entry(m);
	if (K <= 1 || !g || !g->nodes.n || m->micro)
		return 0;
	if (!the_loss(g, K))
		return 1;
	int S = o->pipeline_stages > 1 ? o->pipeline_stages : 1;
	if (S > 1 && K < S && !o->forward_only && o->phase != PHASE_PREDICT) {
		diag_error("--micro-batch-num=%d: a pipelined training step needs at least as many micro-batches as "
		           "stages (%d)",
		           K, S);
		return 1;
	}
	int bad = 0;
	for (uint32_t i = 0; i < g->params.n; i++) {
		Node *p = g->params.a[i];
		p->mark = 0;
		if (!lower_is_dataset(p) || !p->out.shape.rank || p->out.shape.dims[0] == 1)
			continue; /* a broadcast input (RoPE tables of dimension 0 = 1): every micro-batch reads it whole */
		if (p->out.shape.dims[0] % K) {
			diag_error_at(p->loc,
			              "%%para%d_%s: --micro-batch-num=%d does not divide its batch dimension (%lld)",
			              p->local, sym_str(p->name), K, (long long)p->out.shape.dims[0]);
			bad = 1;
		}
		p->mark = i + 1;
	}
	if (bad)
		return 1;
	LowerCtx lc;
	if (lower_ctx_init(&lc, m, o) < 0)
		return 1;
	Micro mc = {.m = m, .g = g, .K = K, .nn = g->nodes.n};
	mc.slice = xcalloc(g->params.n + 1, sizeof *mc.slice);
	mc.old0 = xmalloc((mc.nn + 1) * sizeof *mc.old0);
	for (uint32_t i = 0; i < mc.nn; i++) {
		Node *n = g->nodes.a[i];
		n->mark = i + 1;
		mc.old0[i] = n->out.shape.kind == SK_DIMS && n->out.shape.rank ? n->out.shape.dims[0] : -1;
	}
	vec_grow(&mc.out, mc.nn + g->params.n);
	for (uint32_t k = 0, ns = 0; k < g->params.n; k++) {
		Node *p = g->params.a[k];
		if (p->mark) {
			mc.slice[k] = make_slice(&mc, &lc, p, 0, (int)ns++);
			vec_push(&mc.out, mc.slice[k]);
		}
	}
	for (uint32_t j = 0; j < mc.nn && !bad; j++) {
		Node *n = g->nodes.a[j];
		int changed = 0;
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (p && p->kind == NK_PARAM && p->g == g && p->mark) {
				n->args[k].u.node = mc.slice[p->mark - 1];
				p = n->args[k].u.node;
			}
			if (p && k < n->nin_types && (p->kind == NK_CNODE || p->kind == NK_RETURN) &&
			    !abs_equal(&n->in_types[k], &p->out)) {
				n->in_types[k] = p->out;
				changed = 1;
			}
		}
		if (n->kind == NK_RETURN) {
			if (changed && n->nargs && n->args[0].kind == V_NODE)
				n->out = n->args[0].u.node->out;
		} else {
			bad = reshape_node(&mc, n, changed);
			label(m, n, 0);
		}
		vec_push(&mc.out, n);
	}
	if (!bad) {
		ir_graph_set_nodes(g, mc.out.a, mc.out.n, mc.out.cap);
		m->micro = K;
	} else {
		vec_free(&mc.out);
	}
	free(mc.slice);
	free(mc.old0);
	lower_ctx_free(&lc);
	ir_clear_marks(m);
	return bad;
}

/* Is n a micro-batch StridedSlice of the micro pass? */
static int is_micro_slice(const Node *n)
{
	return ir_node_is_op(n, OP_StridedSlice) && ir_attr_get(&ir_node_ext(n)->primal, "pipeline_begin") &&
	       n->nargs == 9 && n->args[0].kind == V_NODE && n->args[0].u.node->kind == NK_PARAM;
}

/* a micro StridedSlice of micro-batch i: begin and end of dimension 0
 * moved to the i-th slice, its labels and name set */
static void retarget_slice(Micro *mc, Node *c, int i, int nth)
{
	Module *m = mc->m;
	const Shape *s = &c->args[0].u.node->out.shape;
	int64_t b = s->dims[0] / mc->K;
	for (int k = 1; k <= 2; k++) {
		Value v = value_clone(m->arena, &c->args[k]);
		v.u.elems[0].u.i = b * (i + (k == 2));
		c->args[k] = v;
	}
	wrapper_name(c, "Default/micro_inputs-CellList/%d-_MicroBatch/StridedSlice-op%d", i, nth);
	set_primal(m, c, "pipeline_begin", i);
}

/* in_strategy all 1s (pipeline_split_utils.cc SetStridedSliceStrategy) */
static void replicated_strategy(Module *m, Node *n)
{
	int64_t one[MAX_RANK];
	int r = n->out.shape.kind == SK_DIMS ? n->out.shape.rank : 0;
	for (int k = 0; k < r; k++)
		one[k] = 1;
	Value in = *value_tuple_ints(m->arena, one, r, NT_BARE);
	AttrList l = {0};
	lower_attr_put(m, &l, "in_strategy", value_tuple_of(m->arena, &in, 1));
	ir_node_set_strat(m, n, l);
	n->has_strat = 1;
}

int pass_unroll(Module *m, const Options *o)
{
	int K = m->micro;
	Graph *g = ir_entry(m);
	if (K <= 1 || !g || !g->nodes.n)
		return 0;
	Node *loss = the_loss(g, K), *ret = g->nodes.a[g->nodes.n - 1];
	if (!loss)
		return 1;
	LowerCtx lc;
	if (lower_ctx_init(&lc, m, o) < 0)
		return 1;
	Micro mc = {.m = m, .g = g, .K = K, .nn = g->nodes.n - 1};
	mc.map = xcalloc(mc.nn + 1, sizeof *mc.map);
	for (uint32_t i = 0; i < mc.nn; i++) {
		Node *n = g->nodes.a[i];
		n->mark = i + 1;
		if (is_micro_slice(n))
			replicated_strategy(m, n);
	}
	vec_grow(&mc.out, (size_t)mc.nn * K + K + 1);
	Node *sum = NULL;
	for (int i = 0; i < K; i++) {
		for (uint32_t j = 0, ns = 0; j < mc.nn; j++) {
			Node *n = g->nodes.a[j];
			Node *c = n;
			if (i) {
				c = copy(m, n, n->args);
				for (uint32_t k = 0; k < c->nargs; k++) {
					Node *p = c->args[k].kind == V_NODE ? c->args[k].u.node : NULL;
					if (p && p->kind == NK_CNODE && p->g == g && p->mark)
						c->args[k].u.node = mc.map[p->mark - 1];
				}
				if (is_micro_slice(n))
					retarget_slice(&mc, c, i, (int)ns++);
				label(m, c, i);
			}
			mc.map[j] = c;
			vec_push(&mc.out, c);
		}
		Node *li = mc.map[loss->mark - 1];
		if (!sum) {
			sum = li;
			continue;
		}
		/* ret = add_i(ret, out_i), pipeline_end = i (PipelineCell) */
		Node *a = lower_new_op(&lc, OP_Add, NULL, 2);
		a->loc = li->loc;
		wrapper_name(a, "Default/Add-op%d", i - 1, 0);
		a->args[0] = value_node(sum);
		a->in_types[0] = sum->out;
		a->args[1] = value_node(li);
		a->in_types[1] = li->out;
		a->out = li->out;
		a->stage = -1; /* the stage of its user, the Return: the last */
		lower_attr_put(m, &a->pattrs, "pipeline_end", value_int(i, NT_I64));
		a->has_pattrs = 1;
		int64_t one[MAX_RANK];
		int r = li->out.shape.rank;
		for (int k = 0; k < r; k++)
			one[k] = 1;
		Value in = *value_tuple_ints(m->arena, one, r, NT_BARE);
		Value both[2] = {in, in};
		AttrList st = *ir_node_strat(a);
		lower_attr_put(m, &st, "in_strategy", value_tuple_of(m->arena, both, 2));
		ir_node_set_strat(m, a, st);
		a->has_strat = 1;
		label(m, a, i);
		vec_push(&mc.out, a);
		sum = a;
	}
	ret->args[0] = value_node(sum);
	if (ret->nin_types)
		ret->in_types[0] = sum->out;
	ret->out = sum->out;
	vec_push(&mc.out, ret);
	ir_graph_set_nodes(g, mc.out.a, mc.out.n, mc.out.cap);
	free(mc.map);
	lower_ctx_free(&lc);
	ir_clear_marks(m);
	return 0;
}
