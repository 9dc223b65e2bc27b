/* redistribute.c - the `redistribute` pass: tensor redistribution, operator
 * replacement and local shapes.
 *
 * pass_redistribute (parallel-lowering.md §2.3 Reshape/Gather, §4.1, §4.4, §5)
 *   Requires: layouts; comm (forward ops already in place); pipeline when
 *             stages > 1.
 *   Provides: for every operator input whose producer's output layout
 *             differs from the layout the operator needs, the operator list
 *             of redist_plan() inserted in front of the input, in list order
 *             (StridedSlice; AllGather, and for a non-zero axis Split +
 *             TupleGetItem + MakeTuple + Concat; AlltoAll with
 *             --enable-alltoall; Reshape), rewritten by the 2.3+ list
 *             optimiser redist_optimize() (§4.2 step 6) unless
 *             --disable-redistribution-opt, named
 *             redistribution_op_<std::hash(producer fullname + "_" + i)><Op>.
 *             Reshape operators are replaced by their own list (a Reshape to
 *             the local target when no communication is needed); a Gather
 *             whose table rows are split is replaced by the masked local
 *             lookup of §2.3.  Then every type line, the # Params lines, Load
 *             lines, StridedSlice ends and Reshape targets are rewritten to the
 *             device-local shapes of this rank (§5); strategies stay global.
 *   Invalidates: global shapes (the module is now rank-local).
 */
#include <string.h>

#include "lower.h"

typedef Vec(Node *) NodeVec;

static const char *const rd_name[] = {"StridedSlice", "AllGather", "Split", "Concat", "AlltoAll", "Reshape"};

/* The instance names of one plan's ops: "redistribution_op_<h><Op>", h the
 * std::hash of "<origin's full name>_<step>".  A rank graph names hundreds
 * of thousands of these: the origin's full name is formed once per plan,
 * and the name itself only when printed (sym_defer). */
typedef struct PlanNames {
	const Node *origin;
	size_t k;   /* length of the full name in buf, 0: not formed yet */
	StdHash hs; /* the full name's blocks hashed, for names of length hs.len */
	char buf[1024];
} PlanNames;

/* mp_comm_recompute (training-step.md §5.4; mindspore-ai/mindspore
 * mindspore/ccsrc/frontend/parallel/parallel_processer.cc
 * InsertRedistribution): the consumer's, else the producer's primitive
 * attribute recompute_comm_op; -1 when neither has it */
static int comm_recompute(const Node *user, const Node *origin)
{
	const Node *on[2] = {user, origin};
	for (int k = 0; k < 2; k++) {
		const Value *v = on[k] ? ir_attr_get(&on[k]->pattrs, "recompute_comm_op") : NULL;
		int b;
		if (v && value_truthy(v, &b))
			return b;
	}
	return -1;
}

/* n's instance name; with recompute_comm_op (rc >= 0) it ends in
 * _recompute or _not_recompute and n gets the primitive attribute
 * recompute, as MindSpore's InsertNode derives it from that suffix */
static void name_op(LowerCtx *c, PlanNames *pn, Node *n, int index, int kind, int rc)
{
	if (!pn->k) {
		lower_fullname(pn->origin, pn->buf, sizeof pn->buf - 24); /* as lower_hash_name */
		pn->k = strlen(pn->buf);
	}
	size_t k = pn->k;
	pn->buf[k++] = '_';
	k += fmt_u64(pn->buf + k, (uint64_t)index);
	if (pn->hs.len != k) /* the steps of a plan share the full name */
		std_hash_start(&pn->hs, pn->buf, k, pn->k);
	/* formed only when printed (a deferred Sym) */
	if (!c->inst_prefix) {
		c->inst_prefix = intern_cstr("redistribution_op_");
		for (int i = 0; i < RD_KINDS; i++)
			c->rd_syms[i] = intern_cstr(rd_name[i]);
	}
	Sym suffix = c->rd_syms[kind];
	if (rc >= 0) {
		char buf[64];
		snprintf(buf, sizeof buf, "%s_%s", rd_name[kind], rc ? "recompute" : "not_recompute");
		suffix = intern_cstr(buf);
		if (n->pattrs.n) /* a clone shares its template's list */
			n->pattrs.a = arena_dup(c->m->arena, n->pattrs.a, n->pattrs.n * sizeof(Attr));
		ir_attr_set(c->m, &n->pattrs, "recompute", value_bool(rc));
		n->has_pattrs = 1;
	}
	n->instance = sym_defer(c->inst_prefix, std_hash_finish(&pn->hs, pn->buf), suffix);
}

static void keep_value(Module *m, Node *n)
{
	lower_attr_put(m, &n->pattrs, "keep_value_node_input", value_bool(1));
	n->has_pattrs = 1;
}

static Abs tensor_abs(Module *m, Sym dtype, const int64_t *d, int r)
{
	Abs like = {0};
	like.dtype = dtype;
	return lower_abs_like(m, &like, d, r);
}

/* Test only: SAPPC_TEST_BREAK_REDIST=1 (LowerCtx.break_redist) makes every
 * redistribution wrong in a way that keeps every shape right - each
 * StridedSlice takes the next block (cyclically) and each AllGather lists
 * its group backwards - so that the tests can show that sappc --simulate
 * catches a wrong plan. */
static void break_op(RedistOp *o)
{
	if (o->kind == RD_STRIDEDSLICE) {
		for (int d = 0; d < o->rank_in; d++) {
			int64_t blk = o->end[d] - o->begin[d];
			if (o->strides[d] == 1 && blk > 0 && blk < o->in_shape[d]) {
				o->begin[d] = (o->begin[d] + blk) % o->in_shape[d];
				o->end[d] = o->begin[d] + blk;
			}
		}
	} else if (o->kind == RD_ALLGATHER) {
		/* the group belongs to a memoised plan: reverse a copy
		 * (build_plan frees it) */
		int64_t *g = xmalloc((size_t)(o->ngroup ? o->ngroup : 1) * sizeof *g);
		memcpy(g, o->group, (size_t)o->ngroup * sizeof *g);
		o->group = g;
		for (int i = 0, j = o->ngroup - 1; i < j; i++, j--) {
			int64_t t = o->group[i];
			o->group[i] = o->group[j];
			o->group[j] = t;
		}
	}
}

/* *a = value_node(p), written in place: value_node returns its Value
 * through memory, built with a one-byte store and read back whole, a
 * store-forwarding stall for each operand of the million ops a 4096-layer
 * rank graph clones (value_node was 1% of that run, perf) */
static inline void set_operand(Value *a, Node *p)
{
	memset(a, 0, sizeof *a);
	a->kind = V_NODE;
	a->u.node = p;
}

/* A copy of template node T (an op built earlier from the same plan step)
 * for a new place: its operand values, attributes, input and output types
 * are shared (nothing changes them after this pass), only the node, its
 * operand array, names and place are new.  A rank graph has hundreds of
 * thousands of these ops and only as many distinct ones as plan steps. */
static Node *clone_op(LowerCtx *c, const Node *T, const Node *like)
{
	Node *n = ir_cnode_new(c->m, like->g, T->op, NULL, T->nargs);
	memcpy(n->args, T->args, T->nargs * sizeof *n->args);
	n->primfunc = T->primfunc;
	n->nin_types = T->nin_types;
	n->in_types = T->in_types;
	n->out = T->out;
	n->pattrs = T->pattrs;
	n->has_pattrs = T->has_pattrs;
	n->autoname = 1;
	n->loc = like->loc;
	n->stage = like->stage;
	lower_set_fullname(c, n, like);
	if ((T->op == OP_MakeTuple || T->op == OP_TupleGetItem) && n->scope_kind == SCOPE_FULLNAME)
		n->scope_kind = SCOPE_NONE; /* as build_plan makes them */
	return n;
}

/* Build the nodes of one plan after src; returns the last node.  tm (NULL:
 * none) holds 2*nops template nodes of this plan, filled on first use: the
 * op of step i, and for a Split step its MakeTuple (whose operands are the
 * TupleGetItem templates). */
static Node *build_plan(LowerCtx *c, NodeVec *out, const RedistOp *ops, int nops, Node **tm, Node *src,
                        Node *origin, Node *like)
{
	Module *m = c->m;
	Sym dt = src->out.dtype ? src->out.dtype : intern_cstr("Float32");
	Node *cur = src;
	PlanNames pn;
	pn.origin = origin;
	pn.k = 0;
	pn.hs.len = 0;
	int broken = c->break_redist;
	if (broken)
		tm = NULL;
	int rc = comm_recompute(like, origin);
	for (int i = 0; i < nops; i++) {
		Node *T = tm ? tm[i] : NULL;
		if (T && T->in_types[0].dtype == cur->out.dtype && abs_equal(&T->in_types[0], &cur->out)) {
			Node *n = clone_op(c, T, like);
			name_op(c, &pn, n, i, ops[i].kind, rc);
			set_operand(&n->args[0], cur);
			vec_push(out, n);
			cur = n;
			if (ops[i].kind == RD_SPLIT) {
				const Node *MT = tm[nops + i];
				Node *mt = clone_op(c, MT, like);
				for (uint32_t k = 0; k < mt->nargs; k++) {
					Node *gi = clone_op(c, MT->args[k].u.node, like);
					set_operand(&gi->args[0], n);
					vec_push(out, gi);
					set_operand(&mt->args[k], gi);
				}
				vec_push(out, mt);
				cur = mt;
			}
			continue;
		}
		RedistOp bo = ops[i];
		if (broken)
			break_op(&bo);
		const RedistOp *o = &bo;
		Node *n;
		switch (o->kind) {
		case RD_STRIDEDSLICE: {
			n = lower_new_op(c, OP_StridedSlice, like, 9);
			n->args[1] = lower_ints(m, o->begin, o->rank_in);
			n->args[2] = lower_ints(m, o->end, o->rank_in);
			n->args[3] = lower_ints(m, o->strides, o->rank_in);
			for (int k = 1; k <= 3; k++)
				n->in_types[k] = lower_abs_tuple_ints(m, o->rank_in);
			for (int k = 4; k < 9; k++) {
				n->args[k] = value_int(0, NT_I64);
				n->in_types[k] = lower_abs_int();
			}
			keep_value(m, n);
			break;
		}
		case RD_ALLGATHER:
		case RD_ALLTOALL: {
			n = lower_new_op(c, o->kind == RD_ALLGATHER ? OP_AllGather : OP_AlltoAll, like, 1);
			if (o->kind == RD_ALLTOALL) {
				lower_attr_put(m, &n->pattrs, "split_count", value_int(o->n, NT_I64));
				lower_attr_put(m, &n->pattrs, "split_dim", value_int(o->split_dim, NT_I64));
				lower_attr_put(m, &n->pattrs, "concat_dim", value_int(o->concat_dim, NT_I64));
			}
			lower_attr_put(m, &n->pattrs, "rank_size", value_int(o->ngroup, NT_I64));
			if (o->kind == RD_ALLGATHER) {
				lower_attr_put(m, &n->pattrs, "fusion", value_int(0, NT_I64));
				lower_attr_put(m, &n->pattrs, "mean_flag", value_bool(0));
			}
			lower_attr_put(m, &n->pattrs, "no_eliminate", value_bool(1));
			keep_value(m, n);
			lower_comm_group_attrs(c, n, o->group, o->ngroup, 1);
			static const char *const ag[] = {"group",
			                                 "rank_size",
			                                 "fusion",
			                                 "mean_flag",
			                                 "no_eliminate",
			                                 "group_ranks",
			                                 "keep_value_node_input",
			                                 "group_rank_ids",
			                                 "comm_reuse",
			                                 "rank_list"};
			static const char *const aa[] = {
			    "split_count",    "split_dim",    "concat_dim",  "group",
			    "rank_size",      "no_eliminate", "group_ranks", "keep_value_node_input",
			    "group_rank_ids", "comm_reuse",   "rank_list"};
			if (o->kind == RD_ALLGATHER)
				lower_reorder_attrs(&n->pattrs, ag, 10);
			else
				lower_reorder_attrs(&n->pattrs, aa, 11);
			break;
		}
		case RD_SPLIT: {
			n = lower_new_op(c, OP_Split, like, 3);
			n->args[1] = value_int(o->axis, NT_I64);
			n->args[2] = value_int(o->n, NT_I64);
			n->in_types[1] = n->in_types[2] = lower_abs_int();
			keep_value(m, n);
			break;
		}
		case RD_CONCAT:
			n = lower_new_op(c, OP_Concat, like, 2);
			n->args[1] = value_int(o->axis, NT_I64);
			n->in_types[1] = lower_abs_int();
			keep_value(m, n);
			break;
		default: /* RD_RESHAPE */
			n = lower_new_op(c, OP_Reshape, like, 2);
			n->args[1] = lower_ints(m, o->out_shape, o->rank_out);
			n->in_types[1] = lower_abs_tuple_ints(m, o->rank_out);
			keep_value(m, n);
			break;
		}
		if (broken && o->kind == RD_ALLGATHER)
			free(bo.group); /* break_op's copy */
		name_op(c, &pn, n, i, o->kind, rc);
		n->args[0] = value_node(cur);
		n->in_types[0] = cur->out;
		Abs t = tensor_abs(m, dt, o->out_shape, o->rank_out);
		if (o->kind == RD_SPLIT) {
			n->out = lower_abs_tuple(m, &t, (uint32_t)o->n, 0);
			vec_push(out, n);
			/* Split's outputs feed Concat through TupleGetItem + MakeTuple (§4.4) */
			Node *mt = lower_new_op(c, OP_MakeTuple, like, (uint32_t)o->n);
			mt->scope_kind = like->scope_kind == SCOPE_FULLNAME ? SCOPE_NONE : like->scope_kind;
			for (int k = 0; k < o->n; k++) {
				Node *gi = lower_new_op(c, OP_TupleGetItem, like, 2);
				gi->scope_kind = mt->scope_kind;
				gi->args[0] = value_node(n);
				gi->args[1] = value_int(k, NT_I64);
				gi->in_types[0] = n->out;
				gi->in_types[1] = lower_abs_int();
				gi->out = t;
				vec_push(out, gi);
				mt->args[k] = value_node(gi);
				mt->in_types[k] = t;
			}
			mt->out = n->out;
			vec_push(out, mt);
			if (tm && !tm[i]) {
				tm[i] = n;
				tm[nops + i] = mt;
			}
			cur = mt;
			continue;
		}
		if (o->kind == RD_CONCAT)
			n->in_types[0] = cur->out;
		n->out = t;
		vec_push(out, n);
		if (tm && !tm[i])
			tm[i] = n;
		cur = n;
	}
	return cur;
}

/* no dimension split (a map onto a device dimension of size 1 splits nothing) */
static int replicated(const Layout *l)
{
	for (int i = 0; i < l->rank; i++)
		if (l->map[i] >= 0 && l->dev[l->ndev - 1 - l->map[i]] > 1)
			return 0;
	return 1;
}

/* the replicated layout r on other's device matrix */
static void on_devices(Layout *r, const Layout *other)
{
	r->ndev = other->ndev;
	memcpy(r->dev, other->dev, sizeof r->dev);
	for (int i = 0; i < r->rank; i++)
		r->map[i] = -1;
}

/* redist_plan(), then §4.2 step 6 unless --disable-redistribution-opt */
static int plan(const LowerCtx *c, const Layout *f, const Layout *t, int keep, RedistPlan *p, char *err, size_t n)
{
	int rc = redist_plan(f, t, c->dev_list, c->rank, c->o->enable_alltoall, keep, p, err, n);
	if (rc == 0 && !c->o->no_redist_opt)
		redist_optimize(p);
	return rc;
}

/* Two device matrices without a common refinement (D=[3,2] and D=[2,3]:
 * no matrix refines both) leave no direct plan.  The tensor then goes
 * through its replicated form, as MindSpore does when the device
 * arrangements cannot be unified (the layout transfer is marked not
 * expandable and InferTensorRedistributionOperatorListUnExpand plans from ->
 * from's repeat layout, then to's repeat layout -> to:
 * mindspore/ccsrc/frontend/parallel/tensor_layout/tensor_redistribution.cc):
 * gathered whole on from's devices (a replicated tensor is the same on any
 * device matrix) and cut to `to` on to's.  On success p holds both plans'
 * operators in order, their groups moved into one buffer. */
static int64_t product(const int64_t *a, int n)
{
	int64_t p = 1;
	for (int i = 0; i < n; i++)
		p *= a[i];
	return p;
}

/* as many devices and elements on both sides: only the matrices differ */
static int same_counts(const Layout *f, const Layout *t)
{
	return product(f->dev, f->ndev) == product(t->dev, t->ndev) &&
	       product(f->shape, f->rank) == product(t->shape, t->rank);
}

static int via_replicated(const LowerCtx *c, const Layout *f, const Layout *t, int keep, RedistPlan *p, char *err,
			  size_t n)
{
	Layout rf = *f, rt = *t;
	on_devices(&rf, f);
	on_devices(&rt, t);
	RedistPlan *a = xcalloc(1, sizeof *a), *b = xcalloc(1, sizeof *b);
	int rc = plan(c, f, &rf, keep, a, err, n);
	if (rc == 0)
		rc = plan(c, &rt, t, keep, b, err, n);
	if (rc == 0 && a->nops + b->nops > REDIST_MAX_OPS) {
		snprintf(err, n, "redistribution through the replicated tensor needs %d operators (at most %d)",
			 a->nops + b->nops, REDIST_MAX_OPS);
		rc = -1;
	}
	if (rc == 0) {
		redist_plan_free(p);
		memset(p, 0, sizeof *p);
		int ng = a->ngroupbuf + b->ngroupbuf;
		p->groupbuf = xmalloc((size_t)(ng ? ng : 1) * sizeof *p->groupbuf);
		p->ngroupbuf = p->capgroupbuf = ng;
		if (a->ngroupbuf)
			memcpy(p->groupbuf, a->groupbuf, (size_t)a->ngroupbuf * sizeof *p->groupbuf);
		if (b->ngroupbuf)
			memcpy(p->groupbuf + a->ngroupbuf, b->groupbuf, (size_t)b->ngroupbuf * sizeof *p->groupbuf);
		for (int i = 0; i < a->nops + b->nops; i++) {
			const RedistPlan *src = i < a->nops ? a : b;
			RedistOp *op = &p->ops[p->nops++];
			*op = src->ops[i < a->nops ? i : i - a->nops];
			if (op->group)
				op->group = p->groupbuf + (src == a ? 0 : a->ngroupbuf) + (op->group - src->groupbuf);
		}
		p->unexpandable = a->unexpandable || b->unexpandable;
	}
	redist_plan_free(a);
	redist_plan_free(b);
	free(a);
	free(b);
	return rc;
}

/* The plan of a (from, to, keep) transfer, worked out once per lowering.
 * A rank's plan depends on nothing else, and a transformer repeats the
 * same few transfers in every layer: planning each edge again was most of
 * the pass.  Entries own their plan (ops trimmed to nops, groupbuf) or the
 * error text. */
typedef struct MemoEntry {
	int ok, nops;     /* ok = 0: failed with err */
	RedistOp *ops;    /* group pointers into groupbuf */
	Node **tmpl;      /* 2*nops template nodes (build_plan) */
	int64_t *groupbuf;
	char *err;
} MemoEntry;

static int memo_key(const TLay *from, const TLay *to, int keep, int fallback, int64_t *k)
{
	int n = 0;
	k[n++] = keep << 1 | fallback;
	const TLay *t2[2] = {from, to};
	for (int s = 0; s < 2; s++) {
		const TLay *t = t2[s];
		k[n++] = (int64_t)t->ndev << 8 | t->rank;
		for (int i = 0; i < t->ndev; i++)
			k[n++] = t->dev[i];
		for (int i = 0; i < t->rank; i++) {
			k[n++] = t->map[i];
			k[n++] = t->shape[i];
		}
	}
	return n;
}

static void memo_free(KeyMap *mm)
{
	for (uint32_t i = 0; i < mm->n; i++) {
		MemoEntry *e = keymap_at(mm, i, NULL, NULL);
		free(e->err);
		free(e->ops);
		free(e->tmpl);
		free(e->groupbuf);
	}
	keymap_free(mm);
}

/* plan a transfer (with the replicated fall-back if asked) into e */
static void memo_fill(LowerCtx *c, MemoEntry *e, const TLay *from, const TLay *to, int keep, int fallback)
{
	Layout f, t;
	tlay_to_layout(from, &f);
	tlay_to_layout(to, &t);
	RedistPlan *p = xmalloc(sizeof *p);
	char err[256];
	int rc = plan(c, &f, &t, keep, p, err, sizeof err);
	if (rc != 0 && fallback && (replicated(&f) || replicated(&t))) {
		/* a replicated tensor is the same on any device matrix: on the
		 * other side's, D=[3,2] and D=[2,3] need no common refinement */
		if (replicated(&f))
			on_devices(&f, &t);
		else
			on_devices(&t, &f);
		redist_plan_free(p);
		rc = plan(c, &f, &t, keep, p, err, sizeof err);
	}
	if (rc != 0 && fallback && !replicated(&f) && !replicated(&t) && same_counts(&f, &t))
		rc = via_replicated(c, &f, &t, keep, p, err, sizeof err);
	if (rc != 0) {
		redist_plan_free(p);
		free(p);
		e->err = xstrdup(err);
		return;
	}
	/* keep only the ops in use (a RedistPlan has room for REDIST_MAX_OPS) */
	e->ok = 1;
	e->nops = p->nops;
	e->ops = xmalloc((size_t)(p->nops ? p->nops : 1) * sizeof *e->ops);
	memcpy(e->ops, p->ops, (size_t)p->nops * sizeof *e->ops);
	e->tmpl = xcalloc((size_t)(p->nops ? 2 * p->nops : 1), sizeof *e->tmpl);
	e->groupbuf = p->groupbuf; /* the ops' groups point into it */
	free(p);
}

/* the memoised plan of a transfer: e->ok and e->ops, or e->err */
static MemoEntry *memo_plan(LowerCtx *c, const TLay *from, const TLay *to, int keep, int fallback)
{
	int64_t key[4 + 2 * (LAYOUT_MAX_DIM + 2) + 4 * LAYOUT_MAX_DIM];
	int nk = memo_key(from, to, keep, fallback, key);
	int fresh;
	MemoEntry *e = keymap_get(c->redist_memo, key, (uint32_t)nk, &fresh);
	if (fresh)
		memo_fill(c, e, from, to, keep, fallback);
	return e;
}

static Node *plan_between(LowerCtx *c, NodeVec *out, const TLay *from, const TLay *to, Node *src, Node *origin,
                          Node *user, int keep)
{
	MemoEntry *e = memo_plan(c, from, to, keep, 1);
	if (!e->ok) {
		diag_error_at(user->loc, "%s (%%%d): cannot redistribute its input: %s", sym_str(user->prim),
		              user->local, e->err);
		return NULL;
	}
	return e->nops ? build_plan(c, out, e->ops, e->nops, e->tmpl, src, origin, user) : src;
}

static NodeLayout *pass_lay(Module *m, const TLay *t)
{
	NodeLayout *l = lay_new(m, 0, 1);
	l->out[0] = *t;
	l->flags = LAY_INSERTED;
	return l;
}

/* The layout of a plan's last op, {out[0] = t, LAY_INSERTED}: one per
 * distinct t, shared by every such op (40 000 records of 96 bytes on a
 * 4096-layer rank graph, for a few hundred distinct layouts).  Nothing
 * writes into it per node: its origin stays NULL (origin_of gives the op
 * itself), and the localize sweep's LAY_LOCAL and cleared subst are the same
 * for every op that shares it.  The key is t's arrays, which equal TLays of
 * one pass share (tlay_set). */
static NodeLayout *plan_lay(LowerCtx *c, const TLay *t)
{
	int64_t key[4] = {(int64_t)t->ndev << 8 | (uint8_t)t->rank, (int64_t)(intptr_t)t->dev,
	                  (int64_t)(intptr_t)t->map, (int64_t)(intptr_t)t->shape};
	int fresh;
	NodeLayout **v = keymap_get(&c->plan_lays, key, 4, &fresh);
	if (fresh)
		*v = pass_lay(c->m, t);
	return *v;
}

static Node *origin_of(Node *p)
{
	return p->lay && p->lay->origin ? p->lay->origin : p;
}

static int64_t coord_of(const LowerCtx *c, const NodeLayout *l, int a)
{
	int64_t p = c->pos;
	for (int i = l->nodev - 1; i > a; i--)
		p /= l->odev[i];
	return p % l->odev[a];
}

/* Scalar constant operand: Tensor(shape=[], dtype=D, value=v). */
static Node *binop(LowerCtx *c, int op, Node *like, Node *a, Value b, const Abs *bt, const Abs *outt)
{
	Node *n = lower_new_op(c, op, like, 2);
	n->args[0] = value_node(a);
	n->in_types[0] = a->out;
	n->args[1] = b;
	n->in_types[1] = *bt;
	n->out = *outt;
	return n;
}

/* §2.3 Gather with a row-split table: look up the local rows only and zero
 * the rows another device owns; the forward AllReduce (comm pass) sums. */
static int gather_rowsplit(LowerCtx *c, NodeVec *out, Node *n)
{
	Module *m = c->m;
	NodeLayout *l = n->lay;
	const TLay *tt = &l->in[0], *it = &l->in[1];
	if (tt->rank != 2 || n->nargs < 2 || n->args[1].kind != V_NODE) {
		diag_error_at(n->loc, "%s (%%%d): a row-split table must be 2-D", sym_str(n->prim), n->local);
		return -1;
	}
	int a = it->rank; /* device dimension of the table rows */
	int64_t rows = tt->shape[0] / l->odev[a];
	int64_t bias = coord_of(c, l, a) * rows;
	Node *idx = n->args[1].u.node;
	int64_t il[LAYOUT_MAX_DIM];
	tlay_slice(it, il);
	Sym idt = idx->out.dtype ? idx->out.dtype : intern_cstr("Int32");
	Sym vdt = n->out.dtype ? n->out.dtype : intern_cstr("Float32");
	Abs ia = tensor_abs(m, idt, il, it->rank), sc = tensor_abs(m, idt, NULL, 0);
	sc.has_value = 1;
	Node *sub = binop(c, OP_Sub, n, idx, lower_scalar_tensor(m, idt, bias), &sc, &ia);
	vec_push(out, sub);
	Node *relu = lower_new_op(c, OP_ReLU, n, 1);
	relu->args[0] = value_node(sub);
	relu->in_types[0] = ia;
	relu->out = ia;
	vec_push(out, relu);
	Node *mn = binop(c, OP_Minimum, n, relu, lower_scalar_tensor(m, idt, rows - 1), &sc, &ia);
	vec_push(out, mn);
	Abs ba = ia;
	char bt[32];
	snprintf(bt, sizeof bt, "Tensor[Bool]");
	ba.tstr = intern_cstr(bt);
	ba.dtype = intern_cstr("Bool");
	Node *eq = lower_new_op(c, OP_Equal, n, 2);
	eq->args[0] = value_node(sub);
	eq->args[1] = value_node(mn);
	eq->in_types[0] = eq->in_types[1] = ia;
	eq->out = ba;
	vec_push(out, eq);
	n->args[1] = value_node(mn);
	vec_push(out, n);
	Node *cast = lower_new_op(c, OP_Cast, n, 2);
	cast->args[0] = value_node(eq);
	cast->in_types[0] = ba;
	cast->args[1] = value_word(strcmp(sym_str(vdt), "Float16") == 0 ? "F16" : "F32");
	cast->in_types[1].tstr = intern_cstr("TypeType");
	cast->in_types[1].shape.kind = SK_NOSHAPE;
	Abs fa = tensor_abs(m, vdt, il, it->rank);
	cast->out = fa;
	vec_push(out, cast);
	int64_t el[LAYOUT_MAX_DIM + 1];
	memcpy(el, il, sizeof il);
	el[it->rank] = 1;
	Node *ex = lower_new_op(c, OP_ExpandDims, n, 2);
	ex->args[0] = value_node(cast);
	ex->in_types[0] = fa;
	ex->args[1] = value_int(-1, NT_I64);
	ex->in_types[1] = lower_abs_int();
	ex->out = tensor_abs(m, vdt, el, it->rank + 1);
	vec_push(out, ex);
	int64_t ol[LAYOUT_MAX_DIM];
	tlay_slice(&l->out[0], ol);
	Abs oa = tensor_abs(m, vdt, ol, l->out[0].rank);
	Node *mul = lower_new_op(c, OP_Mul, n, 2);
	mul->args[0] = value_node(n);
	mul->in_types[0] = oa;
	mul->args[1] = value_node(ex);
	mul->in_types[1] = ex->out;
	mul->out = oa;
	vec_push(out, mul);
	mul->lay = pass_lay(m, &l->out[0]);
	mul->lay->origin = n;
	l->subst = mul;
	return 0;
}

/* The device dimension that splits OneHot's depth, or -1 when it is whole. */
static int onehot_depth_dim(const Node *n)
{
	const NodeLayout *l = n->lay;
	if (!l || !(l->flags & LAY_OP) || op_table[n->op].family != FAM_ONEHOT || !l->nout || !l->out[0].ndev)
		return -1;
	const TLay *o = &l->out[0];
	const Value *av = ir_attr_get(&n->pattrs, "axis");
	int64_t axis = -1;
	if (n->nargs > 4 && n->args[4].kind == V_INT)
		axis = n->args[4].u.i;
	else if (av)
		value_get_int(av, &axis);
	int d = axis == 0 ? 0 : o->rank - 1;
	if (d < 0 || o->map[d] < 0)
		return -1;
	int a = o->ndev - 1 - o->map[d];
	return o->dev[a] > 1 ? a : -1;
}

/* OneHot with a split depth (MindSpore's OneHotInfo::ComputeReplaceGraph):
 * the rank that holds block k of the depth's C-class blocks computes
 * OneHot(indices - k*C, C), in which an index of another block gives a row
 * of off_value.  MindSpore maps those indices to -1 with a few more
 * operators; outside [0, C) OneHot gives the same row either way. */
static int onehot_split(LowerCtx *c, NodeVec *out, Node *n, int a)
{
	Module *m = c->m;
	NodeLayout *l = n->lay;
	const TLay *it = &l->in[0];
	if (!n->nargs || n->args[0].kind != V_NODE || !it->ndev) {
		diag_error_at(n->loc, "%s (%%%d): a split depth needs computed indices", sym_str(n->prim), n->local);
		return -1;
	}
	const TLay *o = &l->out[0];
	int d = o->ndev - 1 - a; /* the map value of the depth */
	int64_t classes = 0;
	for (int i = 0; i < o->rank; i++)
		if (o->map[i] == d)
			classes = o->shape[i] / o->dev[a];
	Node *idx = n->args[0].u.node;
	int64_t il[LAYOUT_MAX_DIM];
	tlay_slice(it, il);
	Sym idt = idx->out.dtype ? idx->out.dtype : intern_cstr("Int32");
	Abs ia = tensor_abs(m, idt, il, it->rank), sc = tensor_abs(m, idt, NULL, 0);
	sc.has_value = 1;
	Node *sub = binop(c, OP_Sub, n, idx, lower_scalar_tensor(m, idt, coord_of(c, l, a) * classes), &sc, &ia);
	vec_push(out, sub);
	n->args[0] = value_node(sub);
	Value dv = value_int(classes, NT_I64);
	if (n->nargs > 1 && n->args[1].kind == V_INT) {
		Value *args = arena_alloc(m->arena, n->nargs * sizeof *args);
		memcpy(args, n->args, n->nargs * sizeof *args);
		args[1] = dv;
		n->args = args;
	} else {
		ir_attr_set(m, &n->pattrs, "depth", dv);
	}
	vec_push(out, n);
	return 0;
}

static Node *unop(LowerCtx *c, int op, Node *like, Node *a, const Abs *outt, const TLay *t)
{
	Node *n = lower_new_op(c, op, like, 1);
	n->args[0] = value_node(a);
	n->in_types[0] = a->out;
	n->out = *outt;
	n->lay = pass_lay(c->m, t);
	return n;
}

/* ReduceSum(a) over every dimension but the channel (1), not keeping them */
static Node *channel_sum(LowerCtx *c, Node *like, Node *a, int rank, const Abs *outt, const TLay *t)
{
	Module *m = c->m;
	int64_t ax[LAYOUT_MAX_DIM];
	int k = 0;
	for (int i = 0; i < rank; i++)
		if (i != 1)
			ax[k++] = i;
	Node *n = lower_new_op(c, OP_ReduceSum, like, 2);
	n->args[0] = value_node(a);
	n->in_types[0] = a->out;
	n->args[1] = lower_ints(m, ax, k);
	n->in_types[1] = lower_abs_tuple_ints(m, k);
	lower_attr_put(m, &n->pattrs, "keep_dims", value_bool(0));
	n->has_pattrs = 1;
	n->out = *outt;
	n->lay = pass_lay(m, t);
	return n;
}

/* A training BatchNorm whose batch (or another non-channel dimension) is
 * split normalises with the whole batch's statistics, as the single
 * device does: the per-channel sums of x and x*x are AllReduced over the
 * split dimensions' group, mean = sum / count and variance = E[x*x] -
 * mean*mean are fed to the operator as its mean and variance inputs, and
 * the operator runs in inference mode (is_training false), which
 * normalises with them and returns them as its batch statistics. */
static uint32_t uid_of(const AttrList *l, const char *key)
{
	const Value *v = ir_attr_get(l, key);
	return v && v->kind == V_STR ? (uint32_t)strtoul(sym_str(v->text), NULL, 10) : 0;
}

/* the comm pass numbered its forward ops and mirror traces from 1: go on
 * after them */
static void continue_uids(LowerCtx *c)
{
	Graph *g = ir_entry(c->m);
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		const Node *n = g->nodes.a[i];
		const NodeExt *x = ir_node_ext(n);
		uint32_t a = uid_of(&x->primal, "forward_comm_node_unique_id"),
		         b = uid_of(&x->cattrs, "related_comm_node_id");
		a = a > b ? a : b;
		if (a >= c->next_uid)
			c->next_uid = a + 1;
	}
}

static int batch_stats(LowerCtx *c, NodeVec *out, Node *n)
{
	Module *m = c->m;
	if (c->next_uid == 1)
		continue_uids(c);
	NodeLayout *l = n->lay;
	const TLay *xt = &l->in[0];
	if (n->nargs < 5 || n->args[0].kind != V_NODE || xt->rank < 2 || !l->in[3].ndev) {
		diag_error_at(n->loc,
		              "%s (%%%d): a split batch needs the five operands x, scale, offset, mean, variance",
		              sym_str(n->prim), n->local);
		return -1;
	}
	int64_t g[LOWER_MAX_GROUP / 16];
	int ng = lower_group_mask(c, l->odev, l->nodev, l->fwd_mask, g);
	int64_t count = 1, xl[LAYOUT_MAX_DIM], cl;
	for (int i = 0; i < xt->rank; i++)
		if (i != 1)
			count *= xt->shape[i];
	tlay_slice(xt, xl);
	const TLay *ct = &l->in[3]; /* the channel vector's layout */
	tlay_slice(ct, &cl);
	Node *x = n->args[0].u.node;
	Sym dt = x->out.dtype ? x->out.dtype : intern_cstr("Float32");
	Abs xa = tensor_abs(m, dt, xl, xt->rank), ca = tensor_abs(m, dt, &cl, 1), sc = tensor_abs(m, dt, NULL, 0);
	sc.has_value = 1;
	Node *s1 = channel_sum(c, n, x, xt->rank, &ca, ct);
	vec_push(out, s1);
	Node *sq = unop(c, OP_Square, n, x, &xa, xt);
	vec_push(out, sq);
	Node *s2 = channel_sum(c, n, sq, xt->rank, &ca, ct);
	vec_push(out, s2);
	Node *a1 = lower_all_reduce(c, s1, n, g, ng, l->fwd_op, 0);
	a1->lay = pass_lay(m, ct);
	vec_push(out, a1);
	Node *a2 = lower_all_reduce(c, s2, n, g, ng, l->fwd_op, 1);
	a2->lay = pass_lay(m, ct);
	vec_push(out, a2);
	Node *mean = binop(c, OP_RealDiv, n, a1, lower_scalar_tensor(m, dt, count), &sc, &ca);
	mean->lay = pass_lay(m, ct);
	vec_push(out, mean);
	Node *ex2 = binop(c, OP_RealDiv, n, a2, lower_scalar_tensor(m, dt, count), &sc, &ca);
	ex2->lay = pass_lay(m, ct);
	vec_push(out, ex2);
	Node *m2 = lower_new_op(c, OP_Mul, n, 2);
	m2->args[0] = m2->args[1] = value_node(mean);
	m2->in_types[0] = m2->in_types[1] = ca;
	m2->out = ca;
	m2->lay = pass_lay(m, ct);
	vec_push(out, m2);
	Node *var = lower_new_op(c, OP_Sub, n, 2);
	var->args[0] = value_node(ex2);
	var->args[1] = value_node(m2);
	var->in_types[0] = var->in_types[1] = ca;
	var->out = ca;
	var->lay = pass_lay(m, ct);
	vec_push(out, var);
	n->args[3] = value_node(mean);
	n->args[4] = value_node(var);
	if (n->nargs > 5 && n->args[5].kind == V_BOOL)
		n->args[5] = value_bool(0);
	else
		ir_attr_set(m, &n->pattrs, "is_training", value_bool(0));
	return 0;
}

/* MatMul with out_strategy: ReduceScatter(sum) of the partial products
 * over the k group, splitting the rows (§3.1); named like a forward op */
static void reduce_scatter(LowerCtx *c, NodeVec *out, Node *n)
{
	Module *m = c->m;
	NodeLayout *l = n->lay;
	int64_t g[LOWER_MAX_GROUP / 16];
	int ng = lower_group_mask(c, l->odev, l->nodev, l->fwd_mask, g);
	Node *rs = lower_new_op(c, OP_ReduceScatter, n, 1);
	rs->args[0] = value_node(n);
	int64_t d[LAYOUT_MAX_DIM];
	tlay_slice(&l->out[0], d);
	rs->in_types[0] = tensor_abs(m, n->out.dtype, d, l->out[0].rank);
	tlay_slice(l->fwd_out, d);
	rs->out = tensor_abs(m, n->out.dtype, d, l->fwd_out->rank);
	/* the attributes depend on the group alone, which (odev, fwd_mask)
	 * decide: one list per group, shared (nobody writes into an inserted
	 * op's list; a list per op was 5.5 MB on a 4096-layer rank graph) */
	int64_t key[3] = {(int64_t)(intptr_t)l->odev, l->nodev, l->fwd_mask};
	int fresh;
	AttrList *al = keymap_get(&c->rs_attrs, key, 3, &fresh);
	if (fresh) {
		lower_attr_put(m, &rs->pattrs, "op", value_str("sum"));
		lower_attr_put(m, &rs->pattrs, "rank_size", value_int(ng, NT_I64));
		lower_attr_put(m, &rs->pattrs, "fusion", value_int(0, NT_I64));
		lower_attr_put(m, &rs->pattrs, "no_eliminate", value_bool(1));
		lower_comm_group_attrs(c, rs, g, ng, 1);
		static const char *const order[] = {"op",           "group",       "rank_size",      "fusion",
		                                    "no_eliminate", "group_ranks", "group_rank_ids", "comm_reuse",
		                                    "rank_list"};
		lower_reorder_attrs(&rs->pattrs, order, 9);
		*al = rs->pattrs;
	}
	rs->pattrs = *al;
	rs->has_pattrs = 1;
	char inst[64];
	snprintf(inst, sizeof inst, "forward_op_%llu", (unsigned long long)lower_hash_name(n, 0));
	rs->instance = intern_cstr(inst);
	rs->lay = pass_lay(m, l->fwd_out);
	rs->lay->origin = n;
	vec_push(out, rs);
	l->subst = rs;
}

/* the shape of a node's output, local once localize has visited it */
static void set_dims(Module *m, Abs *a, const int64_t *d, int r)
{
	a->shape = shape_shared(m, d, r);
}

/* An attention operator whose heads are split h ways runs heads/h of them
 * on each rank: its head count (operand or attribute, and
 * PromptFlashAttention's key/value head count) becomes the local one, as
 * MindSpore's FlashAttentionScoreInfo rewrites head_num. */
static void local_int(Module *m, Node *n, int opnd, const char *key, int64_t div)
{
	int64_t v;
	if (opnd >= 0 && (uint32_t)opnd < n->nargs && n->args[opnd].kind == V_INT && n->args[opnd].u.i > 0)
		n->args[opnd] = value_int(n->args[opnd].u.i / div, (NumType)n->args[opnd].numtype);
	const Value *a = ir_attr_get(&n->pattrs, key);
	if (!a || !value_get_int(a, &v) || v <= 0)
		return;
	Attr *na = arena_alloc(m->arena, n->pattrs.n * sizeof *na);
	for (uint32_t i = 0; i < n->pattrs.n; i++) {
		na[i] = n->pattrs.a[i];
		if (strcmp(sym_str(na[i].key), key) == 0)
			na[i].val = value_int(v / div, (NumType)a->numtype);
	}
	n->pattrs.a = na;
}

static void local_heads(Module *m, Node *n)
{
	int64_t h, kvh;
	if (!lower_attention_split(n, &h, &kvh) || h == 1)
		return;
	AttnInfo ai;
	char why[8];
	ir_attention_info(n, &ai, why, sizeof why); /* the operand positions */
	local_int(m, n, ai.heads_opnd, ai.heads_attr, h);
	if (ai.kvheads_opnd >= 0)
		local_int(m, n, ai.kvheads_opnd, "num_key_value_heads", kvh);
}

/* A MakeTuple's local element shapes, its input types' shapes: the array of
 * an earlier MakeTuple with the same ones when the cache holds it (a
 * layer's tuples repeat, and the clones of one plan step share their input
 * types; 61 000 arrays of a 4096-layer rank graph were 6 MB), else a new
 * one.  Equal local dims share their array (set_dims), so an element is
 * its kind, rank and array.  Nobody writes into a tuple's element array
 * after this pass. */
static int same_shape(const Shape *a, const Shape *b)
{
	return a->kind == b->kind && a->rank == b->rank && a->dims == b->dims;
}

static Shape *tuple_sub(LowerCtx *c, const Node *n)
{
	uint64_t h = n->nin_types;
	for (uint32_t k = 0; k < n->nin_types; k++) {
		const Shape *e = &n->in_types[k].shape;
		h = (h ^ (uint64_t)(uintptr_t)e->dims ^ ((uint64_t)e->kind << 8 | e->rank)) * 0x9E3779B97F4A7C15ull;
	}
	uint32_t j = (uint32_t)(h >> 58) & (LOWER_TUPLECACHE - 1);
	Shape *s = c->tuple_subs[j].sub;
	if (s && c->tuple_subs[j].n == n->nin_types) {
		uint32_t k = 0;
		while (k < n->nin_types && same_shape(&s[k], &n->in_types[k].shape))
			k++;
		if (k == n->nin_types)
			return s;
	}
	s = arena_alloc(c->m->arena, n->nin_types * sizeof *s);
	for (uint32_t k = 0; k < n->nin_types; k++)
		s[k] = n->in_types[k].shape;
	c->tuple_subs[j].n = n->nin_types;
	c->tuple_subs[j].sub = s;
	return s;
}

static void localize_node(LowerCtx *c, Node *n)
{
	Module *m = c->m;
	if (n->kind == NK_CNODE && n->callee_kind == CK_PRIM && op_table[n->op].family == FAM_ATTENTION)
		local_heads(m, n); /* before the operand shapes turn local */
	for (uint32_t i = 0; i < n->nargs && i < n->nin_types; i++) {
		if (n->args[i].kind != V_NODE)
			continue;
		const Node *p = n->args[i].u.node;
		Shape *is = &n->in_types[i].shape;
		if ((p->out.shape.kind == SK_DIMS || p->out.shape.kind == SK_TUPLE) && is->kind == p->out.shape.kind)
			*is = p->out.shape;
	}
	if (n->kind == NK_RETURN) {
		if (n->nargs && n->args[0].kind == V_NODE && n->has_type_line)
			n->out = n->args[0].u.node->out;
		return;
	}
	NodeLayout *l = n->lay;
	if (l && l->nout && l->out[0].ndev) {
		int64_t d[LAYOUT_MAX_DIM];
		if (n->out.shape.kind == SK_DIMS) {
			tlay_slice(&l->out[0], d);
			set_dims(m, &n->out, d, l->out[0].rank);
		} else if (n->out.shape.kind == SK_TUPLE && n->out.shape.rank == l->nout) {
			Shape *sub = arena_alloc(m->arena, l->nout * sizeof *sub);
			for (int k = 0; k < l->nout; k++) {
				sub[k] = n->out.shape.sub[k];
				if (l->out[k].ndev && sub[k].kind == SK_DIMS) {
					tlay_slice(&l->out[k], d);
					sub[k] = shape_shared(m, d, l->out[k].rank);
				}
			}
			n->out.shape.sub = sub;
		}
	} else if (!l || !(l->flags & LAY_INSERTED)) {
		int64_t d[MAX_RANK];
		int r;
		char why[128];
		if (n->out.shape.kind == SK_DIMS && ir_infer_shape(n, d, &r, why, sizeof why) == 1)
			set_dims(m, &n->out, d, r);
		else if (ir_node_is_op(n, OP_MakeTuple) && n->out.shape.kind == SK_TUPLE &&
		         n->out.shape.rank == n->nin_types) {
			n->out.shape.sub = tuple_sub(c, n);
		} else if (ir_node_is_op(n, OP_TupleGetItem) && n->nin_types >= 1 && n->nargs >= 2) {
			int64_t k;
			const Shape *ts = &n->in_types[0].shape;
			if (value_get_int(&n->args[1], &k) && ts->kind == SK_TUPLE && k >= 0 && k < ts->rank)
				n->out.shape = ts->sub[k];
		}
	}
	/* an operand from outside the text (--fragment) is taken to arrive in
	 * the layout the operator needs */
	if (l && (l->flags & LAY_OP))
		for (uint32_t i = 0; i < n->nargs && i < l->nin && i < n->nin_types; i++)
			if (n->args[i].kind == V_EXTERN && l->in[i].ndev && n->in_types[i].shape.kind == SK_DIMS) {
				int64_t sl[LAYOUT_MAX_DIM];
				tlay_slice(&l->in[i], sl);
				set_dims(m, &n->in_types[i], sl, l->in[i].rank);
			}
	/* tensor constants feeding an operator are sliced to this rank's block
	 * (StepSplitTensor, §5.4); a constant given as one broadcast value
	 * slices by its shape alone */
	if (l && (l->flags & LAY_OP))
		for (uint32_t i = 0; i < n->nargs && i < l->nin && i < n->nin_types; i++) {
			Value *v = &n->args[i];
			if (v->kind != V_CALL || !l->in[i].ndev || strcmp(sym_str(value_call_name(v)), "Tensor") != 0)
				continue;
			int64_t sl[LAYOUT_MAX_DIM];
			tlay_slice(&l->in[i], sl);
			Value c2 = value_clone(m->arena, v);
			for (uint32_t k = 0; k < c2.n; k++) {
				Value *e = &c2.u.elems[k];
				if (e->keyi && strcmp(sym_str(value_key(e)), "shape") == 0 && e->kind == V_LIST &&
				    (int)e->n == l->in[i].rank)
					for (uint32_t d = 0; d < e->n; d++)
						if (e->u.elems[d].kind == V_INT)
							e->u.elems[d].u.i = sl[d];
				if (e->keyi && strcmp(sym_str(value_key(e)), "value") == 0 &&
				    (e->kind == V_LIST || e->kind == V_TUPLE))
					diag_warning_at(n->loc,
					                "%s (%%%d): constant operand %u is sliced by its shape only; "
					                "its values are kept",
					                sym_str(n->prim), n->local, i + 1);
			}
			*v = c2;
			set_dims(m, &n->in_types[i], sl, l->in[i].rank);
		}
	/* StridedSlice over a split dimension takes that dimension whole: its
	 * end becomes the local size */
	if (l && (l->flags & LAY_OP) && ir_node_is_op(n, OP_StridedSlice) && n->nargs >= 3 &&
	    n->args[2].kind == V_TUPLE && l->in[0].ndev) {
		int64_t sl[LAYOUT_MAX_DIM];
		tlay_slice(&l->in[0], sl);
		Value e = value_clone(m->arena, &n->args[2]);
		for (uint32_t i = 0; i < e.n && (int)i < l->in[0].rank; i++)
			if (l->in[0].map[i] >= 0 && l->in[0].dev[l->in[0].ndev - 1 - l->in[0].map[i]] > 1 &&
			    e.u.elems[i].kind == V_INT)
				e.u.elems[i].u.i = sl[i];
		n->args[2] = e;
	}
	/* Slice over a split dimension takes that dimension whole (r_slice):
	 * its size becomes the local size */
	if (l && (l->flags & LAY_OP) && ir_node_is_op(n, OP_Slice) && n->nargs >= 3 && n->args[2].kind == V_TUPLE &&
	    l->in[0].ndev) {
		int64_t sl[LAYOUT_MAX_DIM];
		tlay_slice(&l->in[0], sl);
		Value e = value_clone(m->arena, &n->args[2]);
		for (uint32_t i = 0; i < e.n && (int)i < l->in[0].rank; i++)
			if (l->in[0].map[i] >= 0 && l->in[0].dev[l->in[0].ndev - 1 - l->in[0].map[i]] > 1 &&
			    e.u.elems[i].kind == V_INT && e.u.elems[i].u.i != -1)
				e.u.elems[i].u.i = sl[i];
		n->args[2] = e;
	}
}

int pass_redistribute(Module *m, const Options *o)
{
	if (o->device_num <= 1)
		return 0; /* stand-alone: nothing to lower */
	LowerCtx c;
	if (lower_ctx_init(&c, m, o) < 0)
		return 1;
	KeyMap memo;
	keymap_init(&memo, sizeof(MemoEntry));
	c.redist_memo = &memo;
	Graph *g = ir_entry(m);
	NodeVec out = {0};
	/* room for the inserted ops up front (a rank graph grows three- to
	 * fourfold): the doubling copies of a vector of half a million
	 * pointers were the pass's top source of fresh pages; room never
	 * written is never faulted in */
	if (g)
		vec_grow(&out, g->nodes.n * 4);
	int bad = 0, dead_in = 0;
	for (uint32_t i = 0; g && i < g->nodes.n && !diag_too_many(); i++) {
		sweep_prefetch(g->nodes.a, i, g->nodes.n);
		Node *n = g->nodes.a[i];
		dead_in |= n->dead;
		lower_subst_args(n);
		NodeLayout *l = n->lay;
		if (l && ir_node_is_op(n, OP_Reshape) && l->in[0].ndev && l->out[0].ndev && n->args[0].kind == V_NODE) {
			MemoEntry *e = memo_plan(&c, &l->in[0], &l->out[0], 1, 0);
			if (!e->ok) {
				diag_error_at(n->loc, "Reshape (%%%d): %s", n->local, e->err);
				bad = 1;
				continue;
			}
			const RedistOp *ops = e->ops;
			if (e->nops == 1 && ops[0].kind == RD_RESHAPE) {
				/* the node simply becomes a Reshape to the local target */
				if (n->nargs >= 2) {
					n->args[1] = lower_ints(m, ops[0].out_shape, ops[0].rank_out);
					if (n->nin_types >= 2)
						n->in_types[1] = lower_abs_tuple_ints(m, ops[0].rank_out);
				}
				vec_push(&out, n);
			} else {
				Node *last =
				    e->nops ? build_plan(&c, &out, ops, e->nops, e->tmpl, n->args[0].u.node, n, n) : n->args[0].u.node;
				n->dead = 1;
				l->flags |= LAY_REPLACED;
				l->subst = last;
				if (last->lay == NULL)
					last->lay = e->nops ? plan_lay(&c, &l->out[0]) : pass_lay(m, &l->out[0]);
			}
			continue;
		}
		if (l && (l->flags & LAY_OP)) {
			for (uint32_t k = 0; k < n->nargs && k < l->nin; k++) {
				if (!l->in[k].ndev || n->args[k].kind != V_NODE)
					continue;
				Node *p = n->args[k].u.node;
				if (!p->lay || !p->lay->nout || !p->lay->out[0].ndev ||
				    tlay_equal(&p->lay->out[0], &l->in[k]))
					continue;
				Node *last = plan_between(&c, &out, &p->lay->out[0], &l->in[k], p, origin_of(p), n, 0);
				if (!last) {
					bad = 1;
					continue;
				}
				if (last == p)
					continue; /* equivalent layouts: nothing moves */
				last->lay = plan_lay(&c, &l->in[k]);
				n->args[k] = value_node(last);
			}
			if ((l->flags & LAY_REPLACED) && op_table[n->op].family == FAM_GATHER) {
				if (gather_rowsplit(&c, &out, n) < 0)
					bad = 1;
				continue;
			}
			if (l->fwd == FC_BATCHSTATS && batch_stats(&c, &out, n) < 0)
				bad = 1;
			int a = onehot_depth_dim(n);
			if (a >= 0) {
				if (onehot_split(&c, &out, n, a) < 0)
					bad = 1;
				continue;
			}
		}
		vec_push(&out, n);
		if (l && (l->flags & LAY_OP) && l->fwd == FC_REDUCESCATTER && l->fwd_out)
			reduce_scatter(&c, &out, n);
	}
	if (g) {
		/* the live nodes, kept in place: a second array of them was fresh
		 * memory the size of the graph */
		uint32_t nlive = out.n;
		/* the nodes this pass kills (a replaced Reshape) never reach out;
		 * only nodes dead on the way in can be there, and without them
		 * there is nothing to drop: reading a million nodes' flags was
		 * an eighth of this pass's own time (perf, 4096 layers) */
		if (dead_in) {
			nlive = 0;
			for (uint32_t i = 0; i < out.n; i++) {
				sweep_prefetch(out.a, i, out.n);
				if (!out.a[i]->dead)
					out.a[nlive++] = out.a[i];
			}
		}
		/* the capacity told is the one a vector of out.n grown from empty
		 * would have: the module's byte count (ir_module_bytes, which
		 * --simulate's estimate reads) stays what it was; the room
		 * reserved beyond it was never written */
		uint32_t cap = out.n ? 8 : 0;
		while (cap && cap < out.n)
			cap *= 2;
		ir_graph_set_nodes(g, out.a, nlive, cap);
		out = (NodeVec){0}; /* the graph's now */
		if (!bad) {
			for (uint32_t i = 0; i < g->params.n; i++) {
				Node *p = g->params.a[i];
				if (p->lay && p->out.shape.kind == SK_DIMS) {
					int64_t d[LAYOUT_MAX_DIM];
					tlay_slice(&p->lay->out[0], d);
					set_dims(m, &p->out, d, p->lay->out[0].rank);
				}
				if (p->lay && !(p->lay->flags & LAY_LOCAL)) /* shared ones once (lay_keep) */
					p->lay->flags |= LAY_LOCAL;
			}
			/* localize reads no substitution: they are cleared in its sweep
			 * (lower_clear_subst's, one pass over the nodes fewer) */
			for (uint32_t i = 0; i < g->nodes.n; i++) {
				sweep_prefetch(g->nodes.a, i, g->nodes.n);
				localize_node(&c, g->nodes.a[i]);
				NodeLayout *nl = g->nodes.a[i]->lay;
				if (nl && !(nl->flags & LAY_LOCAL)) /* a shared one once (plan_lay) */
					nl->flags |= LAY_LOCAL;
				if (nl && nl->subst)
					nl->subst = NULL;
			}
		}
	}
	vec_free(&out);
	if (bad)
		lower_clear_subst(g);
	memo_free(&memo);
	lower_ctx_free(&c);
	return bad ? 1 : 0;
}
