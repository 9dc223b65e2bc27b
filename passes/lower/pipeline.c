/* pipeline.c - the `pipeline` pass: one pipeline stage per rank.
 *
 * pass_pipeline (parallel-lowering.md §3.8, §2.1 stage device lists)
 *   Requires: layouts.
 *   Provides: with --pipeline-stages=S > 1, the entry graph of rank R holds
 *             only the operators of stage R / (N / S).  A node's stage is the
 *             first of: the longest matching --stage=PATTERN=K rule (PATTERN
 *             is a cell path such as `_backbone.layer1`, matched against the
 *             scope segments `_backbone-Net/layer1-Dense` by the names before
 *             their '-'), its `stage` attribute, the smallest stage of its
 *             users, the largest stage of its operands, 0.  A value produced
 *             in stage a and used in stage b > a leaves stage a through a
 *             Send (dest_rank = rank + (b-a)·N/S) and enters stage b through a
 *             Receive (src_rank = rank - (b-a)·N/S); sr_tag numbers the
 *             transfers between each pair of ranks in producer order, so both
 *             sides agree; shape and dtype are the producer's slice.  The
 *             Receive takes its producer's layout, so redistribution happens
 *             after it, never before a Send.  A weight read in several stages
 *             belongs to the first: later stages receive its Load
 *             (pipeline_param) instead of loading it.  Only values count:
 *             the side-effect order edges (UpdateState's operands, Depend's
 *             after the first) neither pull a Load into an earlier stage nor
 *             cross a boundary; each stage keeps the order edges inside it
 *             (as MindSpore's pipeline_transformer.cc gives a parameter the
 *             stage of the operators that use it), so a weight only a
 *             later stage uses is loaded there, not sent every step.  Parameters no operator
 *             of the stage uses are dropped.  A non-last stage returns
 *             Depend(zeros of the output, MakeTuple(its Sends)), as
 *             MindSpore does (the loss is the last stage's); an output
 *             that is not one tensor of static shape returns its last Send.
 *             With S = 1 the pass does nothing.
 *   Invalidates: nodes of other stages (removed).
 *   Not done: micro-batch slicing and the 1F1B schedule (`micro` is 0).
 */
#include <string.h>

#include "lower.h"
#include "../train/train.h"

#define MAX_STAGES PIPELINE_MAX_STAGES

static int rule_stage(const Options *o, const Node *n)
{
	if (!n->scope || !o->nstage_rules)
		return -1;
	const char *scope = sym_str(n->scope);
	int best = 0, st = -1;
	for (int i = 0; i < o->nstage_rules; i++) {
		const char *r = o->stage_rules[i];
		const char *eq = strrchr(r, '=');
		if (!eq)
			continue;
		int k = lower_match_cell(scope, r, (size_t)(eq - r), NULL);
		if (k > best) {
			best = k;
			st = atoi(eq + 1);
		}
	}
	return st;
}

/* Operand k of n orders side effects rather than carrying a value. */
static int order_edge(const Node *n, uint32_t k)
{
	return ir_node_is_op(n, OP_UpdateState) || (ir_node_is_op(n, OP_Depend) && k >= 1);
}

/* the weight a Load reads, or NULL */
static Node *load_weight(const Node *n)
{
	if (!ir_node_is_op(n, OP_Load) || !n->nargs || n->args[0].kind != V_NODE)
		return NULL;
	Node *p = n->args[0].u.node;
	return lower_is_weight(p) ? p : NULL;
}

/* An order edge to another stage's node orders nothing here: drop it
 * (UpdateState is variadic; Depend keeps its value). */
static void drop_foreign_order(Module *m, Graph *g, Node *n, const int32_t *st, int me)
{
	uint32_t keep = 0;
	for (uint32_t k = 0; k < n->nargs; k++) {
		const Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
		keep += !(p && p->kind == NK_CNODE && p->g == g && order_edge(n, k) && st[p->mark - 1] != me);
	}
	if (keep == n->nargs)
		return;
	Value *args = arena_alloc(m->arena, (keep ? keep : 1) * sizeof *args);
	Abs *types = n->nin_types ? arena_alloc(m->arena, (keep ? keep : 1) * sizeof *types) : NULL;
	uint32_t j = 0;
	for (uint32_t k = 0; k < n->nargs; k++) {
		const Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
		if (p && p->kind == NK_CNODE && p->g == g && order_edge(n, k) && st[p->mark - 1] != me)
			continue;
		if (types && k < n->nin_types)
			types[j] = n->in_types[k];
		args[j++] = n->args[k];
	}
	n->args = args;
	n->nargs = keep;
	if (types)
		n->nin_types = n->nin_types < keep ? n->nin_types : keep;
	if (types)
		n->in_types = types;
}

/* the micro-batch of a node (its primal attribute micro, set by the micro
 * pass), 0 without micro-batches */
static int64_t micro_of(const Node *n)
{
	int64_t v;
	const Value *a = ir_attr_get(&ir_node_ext(n)->primal, "micro");
	return a && value_get_int(a, &v) ? v : 0;
}

/* The trainable weight n reads, through Load, Cast and Depend, or NULL */
static const Node *trainable_operand(const Node *n)
{
	for (uint32_t k = 0; k < n->nargs; k++) {
		const Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
		while (p && p->kind == NK_CNODE && p->callee_kind == CK_PRIM &&
		       (p->op == OP_Load || p->op == OP_Cast || p->op == OP_Depend) && p->nargs &&
		       p->args[0].kind == V_NODE)
			p = p->args[0].u.node;
		if (p && p->kind == NK_PARAM && train_is_trainable(p))
			return p;
	}
	return NULL;
}

/* parameter_start: in a training step, the first operator of stage 0 (of
 * each micro-batch) that reads a trainable weight gets the primitive
 * attribute parameter_start: 0 and the primal attribute parameter_start:
 * its micro-batch - where stage 0's backward ends (MindSpore's
 * LabelParameterStart, NeedGrad and IsPipelineCareNode in
 * mindspore-ai/mindspore mindspore/ccsrc/frontend/parallel/pipeline_transformer/
 * pipeline_transformer.cc; the operators that are not "care" nodes are the
 * virtual and tuple ones, Load and the side-effect order). */
static void label_parameter_start(Module *m, Graph *g, const int32_t *st)
{
	int K = m->micro > 1 ? m->micro : 1;
	uint8_t *done = xcalloc((size_t)K, 1);
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		if (st[i] != 0 || n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
			continue;
		switch (n->op) {
		case OP_Load: case OP_Cast: case OP_Depend: case OP_MakeTuple: case OP_TupleGetItem:
		case OP_UpdateState: case OP_Send: case OP_Receive: case OP_Unknown:
			continue;
		default:
			break;
		}
		int64_t mb = micro_of(n);
		if (mb < 0 || mb >= K || done[mb] || !trainable_operand(n))
			continue;
		done[mb] = 1;
		ir_attr_set(m, &n->pattrs, "parameter_start", value_int(0, NT_I64));
		n->has_pattrs = 1;
		if (m->micro > 0) {
			NodeExt *x = ir_node_ext_mut(m, n);
			ir_attr_set(m, &x->primal, "parameter_start", value_int(mb, NT_I64));
			x->has_primal = 1;
			lower_order_attrs(&x->primal);
		}
	}
	free(done);
}

/* Tensor(shape=[d...], dtype=T, value=v): a constant the value v fills */
static Value tensor_literal(Module *m, const char *dtype, const int64_t *d, int rank, int64_t v)
{
	Value e[3], *dims = arena_alloc(m->arena, (size_t)(rank ? rank : 1) * sizeof *dims);
	for (int i = 0; i < rank; i++)
		dims[i] = value_int(d[i], NT_BARE);
	memset(e, 0, sizeof e);
	e[0] = value_tuple_of(m->arena, dims, (uint32_t)rank);
	e[0].kind = V_LIST;
	value_set_key(&e[0], intern_cstr("shape"));
	e[1] = value_word(dtype);
	value_set_key(&e[1], intern_cstr("dtype"));
	e[2] = value_int(v, NT_BARE);
	value_set_key(&e[2], intern_cstr("value"));
	return value_call_of(m->arena, intern_cstr("Tensor"), e, 3);
}

static Value f16_placeholder(Module *m)
{
	int64_t one = 1;
	return tensor_literal(m, "Float16", &one, 1, 0);
}

/* A zero tensor of the abstract of a graph output: scalar losses keep their
 * shape; in inference, dimension 0 is this stage's slice of the batch (MindSpore's
 * CreateZeroseOutput, mindspore-ai/mindspore
 * mindspore/ccsrc/frontend/parallel/pipeline_transformer/pipeline_transformer.cc:
 * only the last stage redistributes the network's output, unless full_batch).
 * 0 when the output is not a tensor of known shape. */
static int zero_of(LowerCtx *c, const Abs *a, int train, Value *out, Abs *ta)
{
	if (!a->is_tensor || a->shape.kind != SK_DIMS || a->shape.rank > LAYOUT_MAX_DIM)
		return 0;
	int64_t d[LAYOUT_MAX_DIM];
	int r = a->shape.rank;
	for (int i = 0; i < r; i++)
		if ((d[i] = a->shape.dims[i]) < 0)
			return 0;
	if (!train && !c->o->full_batch && r >= 1 && d[0] % c->per_stage == 0)
		d[0] /= c->per_stage;
	*out = tensor_literal(c->m, sym_str(a->dtype ? a->dtype : intern_cstr("Float32")), d, r, 0);
	*ta = lower_abs_like(c->m, a, d, r);
	ta->is_ref = 0;
	ta->has_value = 1;
	return 1;
}

/* What a stage before the last returns, as MindSpore's HandleGraphOutputs
 * (pipeline_transformer.cc, same file) builds it: Depend(zeros, MakeTuple(the
 * stage's Sends)) - zeros of the network's output, since the loss is the last
 * stage's, that wait for every value the stage sends on.  NULL (the caller
 * keeps today's form, the stage's last Send) for an output that is not one
 * tensor of static shape. */
static Node *zero_output(LowerCtx *c, const Node *ret, Node *const *sends, uint32_t ns, const Node *like,
                         int train)
{
	Value z;
	Abs za;
	const Abs *oa = ret->nin_types ? &ret->in_types[0] : &ret->out;
	if (!zero_of(c, oa, train, &z, &za))
		return NULL;
	Node *t = lower_new_op(c, OP_MakeTuple, like, ns);
	Abs *outs = xmalloc((ns ? ns : 1) * sizeof *outs);
	for (uint32_t k = 0; k < ns; k++) {
		t->args[k] = value_node(sends[k]);
		t->in_types[k] = outs[k] = sends[k]->out;
	}
	Abs ta = lower_abs_tuple(c->m, outs, ns, 1);
	free(outs);
	t->out = ta;
	Node *d = lower_new_op(c, OP_Depend, like, 2);
	d->args[0] = z;
	d->in_types[0] = za;
	d->args[1] = value_node(t);
	d->in_types[1] = ta;
	d->out = za;
	d->out.has_value = 0;
	t->stage = d->stage = like->stage;
	return d;
}

static const char *dump_dtype(Sym dt)
{
	static const struct {
		const char *a, *b;
	} t[] = {{"Float32", "F32"}, {"Float16", "F16"}, {"BFloat16", "BF16"}, {"Float64", "F64"}, {"Int32", "I32"},
	         {"Int64", "I64"},   {"Int16", "I16"},   {"Int8", "I8"},       {"UInt8", "U8"},    {"Bool", "Bool"}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (strcmp(sym_str(dt), t[i].a) == 0)
			return t[i].b;
	return sym_str(dt);
}

static void p2p_attrs(LowerCtx *c, Node *n, const char *peer_key, int64_t peer, int64_t tag, const Node *p)
{
	Module *m = c->m;
	int64_t sl[LAYOUT_MAX_DIM];
	const TLay *t = &p->lay->out[0];
	tlay_slice(t, sl);
	Value shape = lower_ints(m, sl, t->rank);
	for (uint32_t i = 0; i < shape.n; i++)
		shape.u.elems[i].numtype = NT_BARE;
	ir_attr_set(m, &n->pattrs, "sr_tag", value_int(tag, NT_I64));
	ir_attr_set(m, &n->pattrs, peer_key, value_int(peer, NT_I64));
	ir_attr_set(m, &n->pattrs, "group", value_str(c->world));
	ir_attr_set(m, &n->pattrs, "group_back", value_str(c->world));
	ir_attr_set(m, &n->pattrs, "no_eliminate", value_bool(1));
	ir_attr_set(m, &n->pattrs, "shape", shape);
	ir_attr_set(m, &n->pattrs, "dtype", value_word(dump_dtype(p->out.dtype)));
	n->has_pattrs = 1;
	lower_order_attrs(&n->pattrs);
}

/* The micro-batch losses' sum (unroll's pipeline_end Adds) is the last
 * stage's, as PipelineCell's, like the Return: every micro-batch's loss
 * crosses to it on its own (training-step.md §4.5).  Neither pulls its
 * operands into the last stage. */
static int is_loss_sum(const Node *n)
{
	return ir_node_is_op(n, OP_Add) && ir_attr_get(&n->pattrs, "pipeline_end");
}

/* The stage of every operator of g (st[i] for g->nodes.a[i]; see the pass
 * comment for the rules).  Leaves node i's mark at i + 1.  1 when a stage is
 * out of range (reported).  Stages are numbered for --pipeline-stages; when
 * --auto-pipeline lowered the count to S (a divisor), consecutive stages
 * merge: stage k becomes k * S / --pipeline-stages. */
static int assign_stages(const Options *o, Graph *g, int S, int32_t *st)
{
	uint32_t nn = g->nodes.n;
	int bad = 0, given = o->pipeline_stages > S ? o->pipeline_stages : S;
	for (uint32_t i = 0; i < nn; i++)
		g->nodes.a[i]->mark = i + 1;
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		int s = rule_stage(o, n);
		if (s < 0)
			s = n->stage;
		if (s >= 0 && s < given && given != S)
			s = (int)((int64_t)s * S / given);
		if (s >= S) {
			diag_error_at(n->loc, "%s (%%%d): stage %d is out of range for %d pipeline stages",
			              n->kind == NK_RETURN ? "Return" : sym_str(n->prim), n->local, s, S);
			bad = 1;
		}
		st[i] = n->kind == NK_RETURN || is_loss_sum(n) ? S - 1 : s;
	}
	if (bad)
		return 1;
	/* unassigned: the smallest stage of the users (users come later, so a
	 * reverse sweep sees them first), then the largest of the operands */
	uint8_t *fixed = xcalloc(nn + 1, 1);
	for (uint32_t i = 0; i < nn; i++)
		fixed[i] = st[i] >= 0;
	for (uint32_t i = nn; i-- > 0;) {
		Node *n = g->nodes.a[i];
		if (n->kind == NK_RETURN || is_loss_sum(n) || st[i] < 0)
			continue;
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (!p || p->kind != NK_CNODE || p->g != g || order_edge(n, k))
				continue;
			uint32_t j = p->mark - 1;
			if (!fixed[j] && (st[j] < 0 || st[i] < st[j]))
				st[j] = st[i];
		}
	}
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		if (st[i] >= 0)
			continue;
		int s = 0;
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (p && p->kind == NK_CNODE && p->g == g && st[p->mark - 1] > s)
				s = st[p->mark - 1];
		}
		st[i] = s;
	}
	/* A MakeTuple computes nothing: unless given a stage, it goes with
	 * its earliest user, so that its elements (tensors) cross a boundary
	 * one by one rather than the tuple (a Send carries one tensor).  Users
	 * come later, so a reverse sweep sees a nested tuple's user first. */
	int32_t *ust = xmalloc((nn + 1) * sizeof *ust);
	for (uint32_t i = 0; i < nn; i++)
		ust[i] = INT32_MAX;
	for (uint32_t i = nn; i-- > 0;) {
		Node *n = g->nodes.a[i];
		if (ir_node_is_op(n, OP_MakeTuple) && !fixed[i] && ust[i] != INT32_MAX && ust[i] > st[i])
			st[i] = ust[i];
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (p && p->kind == NK_CNODE && p->g == g && !order_edge(n, k) && st[i] < ust[p->mark - 1])
				ust[p->mark - 1] = st[i];
		}
	}
	free(ust);
	free(fixed);
	return 0;
}

/* Node.stage of every operator of the entry graph, as the pipeline pass
 * assigns it but without cutting the graph: the global picture of
 * --view=plan clusters operators by stage.  0 ok, 1 reported. */
int lower_assign_stages(Module *m, const Options *o)
{
	Graph *g = ir_entry(m);
	int S = sapp_plan_stages(m, o);
	if (!g || S <= 1 || S > MAX_STAGES)
		return 0;
	int32_t *st = xmalloc((g->nodes.n + 1) * sizeof *st);
	int bad = assign_stages(o, g, S, st);
	if (!bad)
		for (uint32_t i = 0; i < g->nodes.n; i++)
			g->nodes.a[i]->stage = st[i];
	free(st);
	ir_clear_marks(m);
	return bad;
}

int pass_pipeline(Module *m, const Options *o)
{
	if (o->device_num <= 1)
		return 0; /* stand-alone: nothing to lower */
	LowerCtx c;
	if (lower_ctx_init(&c, m, o) < 0)
		return 1;
	Graph *g = ir_entry(m);
	int S = c.stages, bad = 0;
	if (S <= 1 || !g) {
		lower_ctx_free(&c);
		return 0;
	}
	if (S > MAX_STAGES) {
		diag_error("at most %d pipeline stages are supported", MAX_STAGES);
		lower_ctx_free(&c);
		return 1;
	}
	uint32_t nn = g->nodes.n;
	int32_t *st = xmalloc((nn + 1) * sizeof *st);
	uint64_t *umask = xcalloc(nn + 1, sizeof *umask);
	if (assign_stages(o, g, S, st)) {
		bad = 1;
		goto done;
	}
	for (uint32_t i = 0; i < nn; i++)
		g->nodes.a[i]->stage = st[i];
	if (train_wanted(m, o) && c.stage == 0)
		label_parameter_start(m, g, st);
	/* A weight read in several stages belongs to the first of them: later
	 * stages use the owner's Load, so the value crosses the boundary like an
	 * activation and is marked pipeline_param (§3.8). */
	uint8_t *dropped = xcalloc(nn + 1, 1);
	for (uint32_t i = 0; i < g->params.n; i++)
		g->params.a[i]->mark = 0;
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		Node *p = load_weight(n);
		if (p && (!p->mark || st[i] < st[p->mark - 1]))
			p->mark = i + 1;
	}
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		Node *p = load_weight(n);
		if (!p || p->mark - 1 == i || p->mark - 1 > i || st[i] <= st[p->mark - 1])
			continue;
		dropped[i] = 1; /* its users read the owner's Load instead */
	}
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *q = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (q && q->kind == NK_CNODE && q->g == g && dropped[q->mark - 1])
				n->args[k].u.node = g->nodes.a[load_weight(q)->mark - 1];
		}
	}
	/* the last stage returns the graph's value: it receives it when an
	 * earlier stage computes it */
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		if (dropped[i])
			continue;
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (p && p->kind == NK_CNODE && p->g == g && !order_edge(n, k))
				umask[p->mark - 1] |= 1ull << st[i];
		}
	}
	/* which values a trainable weight reaches (through values, not order
	 * edges): only those get a gradient back across a boundary, and both
	 * sides of a transfer must agree on it (LAY_NOGRAD) */
	uint8_t *wdep = xcalloc(nn + 1, 1);
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		for (uint32_t k = 0; k < n->nargs && !wdep[i]; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (!p || order_edge(n, k))
				continue;
			if (p->kind == NK_PARAM ? p->has_default : p->kind == NK_CNODE && p->g == g && wdep[p->mark - 1])
				wdep[i] = 1;
		}
	}
	/* transfer tags: the k-th value stage a sends to stage b has tag k on both sides */
	int32_t *cnt = xcalloc((size_t)S * S, sizeof *cnt);
	int32_t *tagbase = xmalloc((nn + 1) * sizeof *tagbase); /* tag of (P, b): tags[P*S + b] */
	int32_t *tags = xmalloc(((size_t)nn * S + 1) * sizeof *tags);
	for (uint32_t i = 0; i < nn; i++) {
		tagbase[i] = (int32_t)(i * (uint32_t)S);
		for (int b = 0; b < S; b++)
			tags[(size_t)i * S + b] = b > st[i] && (umask[i] >> b & 1) ? cnt[st[i] * S + b]++ : -1;
	}
	Node **recv = xcalloc(nn + 1, sizeof *recv);
	Vec(Node *) out = {0};
	Node *last_send = NULL;
	Vec(Node *) sends = {0};
	int me = c.stage;
	for (uint32_t i = 0; i < nn && !bad; i++) {
		Node *n = g->nodes.a[i];
		if (n->kind == NK_RETURN && me != S - 1) {
			if (n->nargs >= 1) {
				/* a non-last stage returns zeros that wait for its Sends;
				 * an output that is not one tensor: what it sends on (or
				 * its last operator when it sends nothing) */
				Node *r = last_send, *like = NULL;
				for (uint32_t k = out.n; !like && k-- > 0;)
					if (out.a[k]->kind == NK_CNODE)
						like = out.a[k];
				if (!r)
					r = like;
				Node *z = like ? zero_output(&c, n, sends.a, sends.n, last_send ? last_send : like,
				                             train_wanted(m, o))
				               : NULL;
				if (z) {
					vec_push(&out, z->args[1].u.node);
					vec_push(&out, z);
					r = z;
				}
				if (!r) {
					diag_error(
					    "pipeline stage %d has no operators (use fewer --pipeline-stages, or "
					    "--stage rules or stage attributes that give it some)",
					    me);
					bad = 1;
					break;
				}
				n->args[0] = value_node(r);
				n->out = r->out;
			}
			n->stage = me; /* every rank returns from its own stage */
			vec_push(&out, n);
			continue;
		}
		if (n->kind != NK_RETURN && (st[i] != me || dropped[i])) {
			n->dead = 1;
			continue;
		}
		drop_foreign_order(m, g, n, st, me);
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (!p || p->kind != NK_CNODE || p->g != g)
				continue;
			uint32_t j = p->mark - 1;
			if (st[j] == me)
				continue;
			if (st[j] > me) {
				diag_error_at(n->loc, "%s (%%%d) in stage %d uses %%%d of the later stage %d",
				              sym_str(n->prim), n->local, me, p->local, st[j]);
				bad = 1;
				break;
			}
			if (!p->lay || !p->lay->nout || !p->lay->out[0].ndev) {
				diag_error_at(
				    n->loc, "%s (%%%d): the stage boundary crosses a value that is not a tensor (%%%d)",
				    n->kind == NK_RETURN ? "Return" : sym_str(n->prim), n->local, p->local);
				bad = 1;
				break;
			}
			if (!recv[j]) {
				Node *r = lower_new_op(&c, OP_Receive, p, 1);
				r->instance = intern_cstr("Receive");
				r->args[0] = f16_placeholder(m);
				int64_t one = 1;
				r->in_types[0] = lower_abs_like(m, &(Abs){.dtype = intern_cstr("Float16")}, &one, 1);
				r->in_types[0].has_value = 1;
				r->out = p->out;
				r->stage = me;
				int64_t peer = c.rank - (int64_t)(me - st[j]) * c.per_stage;
				p2p_attrs(&c, r, "src_rank", peer, tags[(size_t)tagbase[j] + me], p);
				NodeExt *x = ir_node_ext_mut(m, r);
				ir_attr_set(m, &x->primal, "SRC_RANK", value_int(st[j], NT_I64));
				ir_attr_set(m, &x->primal, "micro", value_int(micro_of(p), NT_I64));
				ir_attr_set(m, &x->primal, load_weight(p) ? "pipeline_param" : "pipeline_begin",
				            value_int(load_weight(p) ? tags[(size_t)tagbase[j] + me] : micro_of(p), NT_I64));
				x->has_primal = 1;
				lower_order_attrs(&x->primal);
				r->lay = lay_new(m, 1, 1);
				r->lay->out[0] = p->lay->out[0];
				r->lay->flags = LAY_INSERTED | (wdep[j] ? 0 : LAY_NOGRAD);
				vec_push(&out, r);
				recv[j] = r;
			}
			n->args[k] = value_node(recv[j]);
		}
		vec_push(&out, n);
		for (int b = me + 1; b < S && n->kind != NK_RETURN; b++) {
			if (tags[(size_t)tagbase[i] + b] < 0)
				continue;
			if (!n->lay || !n->lay->nout || !n->lay->out[0].ndev) {
				diag_error_at(n->loc,
				              "%s (%%%d): the stage boundary crosses a value that is not a tensor",
				              sym_str(n->prim), n->local);
				bad = 1;
				break;
			}
			Node *s = lower_new_op(&c, OP_Send, n, 1);
			s->instance = intern_cstr("Send");
			s->args[0] = value_node(n);
			s->in_types[0] = n->out;
			s->out = n->out;
			int64_t peer = c.rank + (int64_t)(b - me) * c.per_stage;
			p2p_attrs(&c, s, "dest_rank", peer, tags[(size_t)tagbase[i] + b], n);
			NodeExt *x = ir_node_ext_mut(m, s);
			ir_attr_set(m, &x->primal, "DEST_RANK", value_int(b, NT_I64));
			ir_attr_set(m, &x->primal, "micro", value_int(micro_of(n), NT_I64));
			ir_attr_set(m, &x->primal, load_weight(n) ? "pipeline_param" : "pipeline_end",
			            value_int(load_weight(n) ? tags[(size_t)tagbase[i] + b] : micro_of(n), NT_I64));
			x->has_primal = 1;
			lower_order_attrs(&x->primal);
			s->lay = lay_new(m, 1, 1);
			s->lay->in[0] = s->lay->out[0] = n->lay->out[0];
			s->lay->flags = LAY_INSERTED | (wdep[i] ? 0 : LAY_NOGRAD);
			vec_push(&out, s);
			vec_push(&sends, s);
			last_send = s;
		}
	}
	vec_free(&sends);
	if (!bad) {
		ir_graph_set_nodes(g, out.a, out.n, out.cap);
		/* parameters this stage does not read are not part of its graph */
		for (uint32_t i = 0; i < g->params.n; i++)
			g->params.a[i]->mark = 0;
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			for (uint32_t k = 0; k < n->nargs; k++)
				if (n->args[k].kind == V_NODE && n->args[k].u.node->kind == NK_PARAM)
					n->args[k].u.node->mark = 1;
		}
		uint32_t kept = 0;
		int renum = 0;
		for (uint32_t i = 0; i < g->params.n; i++) {
			Node *p = g->params.a[i];
			if (p->mark)
				g->params.a[kept++] = p;
			else
				renum = 1;
		}
		g->params.n = kept;
		if (renum && g->is_entry)
			for (uint32_t i = 0; i < kept; i++)
				if (g->params.a[i]->local > 0)
					g->params.a[i]->local = (int32_t)i + 1;
	} else {
		vec_free(&out);
	}
	free(dropped);
	free(wdep);
	free(cnt);
	free(tagbase);
	free(tags);
	free(recv);
done:
	free(st);
	free(umask);
	ir_clear_marks(m);
	lower_ctx_free(&c);
	return bad ? 1 : 0;
}
