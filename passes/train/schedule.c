/* schedule.c - the `schedule` pass: the order of a pipeline stage's
 * micro-batches, and the order itself (sched_order), which the report and
 * the pictures draw too.
 *
 * sched_order (training-step.md §4.7)
 *   1F1B, as MindSpore's Reorder always builds it without interleaving
 *   (mindspore-ai/mindspore, mindspore/ccsrc/frontend/parallel/
 *   graph_util/pipeline_split_utils.cc Reorder): stage s of S runs
 *   min(S - s, M) forwards to warm up, then in turn one backward and one
 *   forward, then the remaining backwards.  GPipe: every forward, then
 *   every backward.
 *
 * pass_schedule
 *   Requires: the whole step of a rank (optimizer) with micro-batches
 *             (Module.micro > 1) and pipeline stages.
 *   Provides: the Depend edges MindSpore's Reorder inserts: between two
 *             consecutive steps of the stage's order the later one's first
 *             border node waits for the earlier one's last:
 *               F(i-1) -> F(i):  F-start(i) waits for F-end(i-1);
 *               F(i) -> B(j):    B-start(j) waits for F-end-before(i);
 *               B(j) -> F(i):    F-start(i) waits for B-end(j);
 *               B(j-1) -> B(j):  B-start(j) waits for B-end(j-1);
 *             and with 1F1B on a stage that sends on, for the steady
 *             steps i >= S - s: F-end(i-1) waits for B-start(i-S+s) and
 *             B-end(i-S+s) waits for F-end(i-1).  The border nodes of
 *             micro-batch m: F-start the forward Receives and the input
 *             slices (pipeline_begin m), F-end the forward Sends
 *             (pipeline_end m) - on the last stage the micro-batch's loss -,
 *             F-end-before what a Send sends, B-start the backward Receives
 *             (the Sends' bprops) - on the last stage the first backward
 *             operator of the micro-batch -, B-end the backward Sends - on
 *             the first stage the last backward operator of the
 *             micro-batch.  A waiting node's first operand x becomes
 *             Depend(x, prior); cnode attribute send_receive_depend:
 *             Bool(1) when a forward and a backward Send/Receive meet.
 *             Then the nodes are printed in that order: every node belongs
 *             to the step of its micro-batch and phase (a node without a
 *             label to the latest of its operands'), and a topological sort
 *             takes the earliest step first.
 *   Errors: none (a step the order cannot follow would be our bug: the
 *   sort then reports a cycle).
 *   Invalidates: nothing.  Linear but for the sort's heap (n log n).
 */
#include <string.h>

#include "train.h"

int sched_order(int stages, int stage, int micro, int scheduler, SchedStep *out)
{
	int n = 0;
	if (scheduler == SCHED_GPIPE) {
		for (int i = 0; i < micro; i++)
			out[n++] = (SchedStep){0, i};
		for (int i = 0; i < micro; i++)
			out[n++] = (SchedStep){1, i};
		return n;
	}
	int warm = stages - stage < micro ? stages - stage : micro;
	for (int i = 0; i < warm; i++)
		out[n++] = (SchedStep){0, i};
	for (int i = warm; i < micro; i++) {
		out[n++] = (SchedStep){1, i - warm};
		out[n++] = (SchedStep){0, i};
	}
	for (int i = micro - warm; i < micro; i++)
		out[n++] = (SchedStep){1, i};
	return n;
}

/* The timeline of every stage when a forward takes one unit of time and a
 * backward two (the usual estimate: a backward computes two products per
 * forward one), a step starting when its stage is free and its input is
 * there - the previous stage's forward of the micro-batch, the next
 * stage's backward.  start[s * 2M + k] is the start of stage s's k-th
 * step (sched_order); returns the makespan.  The idle share of the
 * stages' time is the pipeline bubble: 1 - 3M / makespan. */
int sched_timeline(int stages, int micro, int scheduler, int32_t *start)
{
	int M = micro, S = stages, n2 = 2 * M;
	SchedStep *ord = xmalloc((size_t)S * n2 * sizeof *ord);
	int32_t *fend = xmalloc((size_t)S * M * sizeof *fend), *bend = xmalloc((size_t)S * M * sizeof *bend);
	int *next = xcalloc((size_t)S, sizeof *next), *free_at = xcalloc((size_t)S, sizeof *free_at);
	for (int s = 0; s < S; s++)
		sched_order(S, s, M, scheduler, ord + (size_t)s * n2);
	for (size_t k = 0; k < (size_t)S * M; k++)
		fend[k] = bend[k] = -1;
	int left = S * n2, span = 0;
	while (left > 0) {
		int progress = 0;
		for (int s = 0; s < S; s++) {
			while (next[s] < n2) {
				SchedStep st = ord[(size_t)s * n2 + next[s]];
				int ready;
				if (!st.bwd)
					ready = s == 0 ? 0 : fend[(size_t)(s - 1) * M + st.micro];
				else
					ready = s == S - 1 ? fend[(size_t)s * M + st.micro] : bend[(size_t)(s + 1) * M + st.micro];
				if (ready < 0)
					break;
				int t0 = ready > free_at[s] ? ready : free_at[s], t1 = t0 + (st.bwd ? 2 : 1);
				start[(size_t)s * n2 + next[s]] = t0;
				(st.bwd ? bend : fend)[(size_t)s * M + st.micro] = t1;
				free_at[s] = t1;
				if (t1 > span)
					span = t1;
				next[s]++;
				left--;
				progress = 1;
			}
		}
		if (!progress)
			break; /* cannot happen for 1F1B or GPipe */
	}
	free(ord);
	free(fend);
	free(bend);
	free(next);
	free(free_at);
	return left ? -1 : span;
}

typedef struct Borders {
	Vec(Node *) fstart, bstart; /* per micro-batch: several */
	Node *fend, *fbefore, *bend;
} Borders;

typedef struct Sch {
	TrainEmit e;
	Module *m;
	Graph *g;
	int K;
	Borders *b;
	int32_t *step;  /* per node index: its position in the order (-1: before all, big: after all) */
	uint32_t ndeps; /* Depends inserted */
} Sch;

static int64_t pint(const Node *n, const char *key)
{
	int64_t v;
	const Value *a = ir_attr_get(&ir_node_ext(n)->primal, key);
	return a && value_get_int(a, &v) ? v : -1;
}

static int is_p2p(const Node *n)
{
	return ir_node_is_op(n, OP_Send) || ir_node_is_op(n, OP_Receive);
}

/* first operand a tensor node, and not a write (a Depend there keeps its meaning) */
static int can_wait(const Node *n)
{
	return n->kind == NK_CNODE && n->nargs && !ir_node_is_op(n, OP_UpdateState) && !ir_node_is_op(n, OP_AssignAdd) &&
	       !ir_node_is_op(n, OP_Assign) && !ir_node_is_op(n, OP_Load) &&
	       !(n->args[0].kind == V_NODE && n->args[0].u.node->kind == NK_PARAM && n->args[0].u.node->out.is_ref);
}

/* post waits for prior: post's first operand x becomes Depend(x, prior) */
static void wait_for(Sch *s, Node *post, Node *prior)
{
	if (!post || !prior || post == prior)
		return;
	Module *m = s->m;
	Abs xa = post->nin_types ? post->in_types[0] : post->args[0].u.node->out;
	Node *d = lower_new_op(&s->e.lc, OP_Depend, post, 2);
	d->args[0] = post->args[0];
	d->in_types[0] = xa;
	d->args[1] = value_node(prior);
	d->in_types[1] = prior->out;
	d->out = xa;
	d->out.is_ref = 0;
	d->stage = post->stage;
	if (is_p2p(post) || is_p2p(prior)) {
		int fb = ir_node_phase(post) == IR_PHASE_BWD, pb = ir_node_phase(prior) == IR_PHASE_BWD;
		if (fb != pb) {
			NodeExt *x = ir_node_ext_mut(m, d);
			ir_attr_set(m, &x->cattrs, "send_receive_depend", value_bool(1));
			x->has_cattrs = 1;
		}
	}
	post->args[0] = value_node(d);
	vec_push(&s->e.out, d);
	d->mark = post->mark; /* sorted with the node that waits */
	s->ndeps++;
}

static void wait_all(Sch *s, Node **post, uint32_t n, Node *prior)
{
	for (uint32_t k = 0; k < n; k++)
		wait_for(s, post[k], prior);
}

/* the losses of the micro-batches on the last stage: the operands of
 * PipelineCell's Adds (micro.c) */
static void losses(Sch *s)
{
	Graph *g = s->g;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *n = g->nodes.a[i];
		const Value *pe = ir_node_is_op(n, OP_Add) ? ir_attr_get(&n->pattrs, "pipeline_end") : NULL;
		int64_t k;
		if (!pe || !value_get_int(pe, &k) || k < 1 || k >= s->K || n->nargs < 2)
			continue;
		for (int j = 0; j < 2; j++) {
			Node *l = n->args[j].kind == V_NODE ? n->args[j].u.node : NULL;
			int mi = j ? (int)k : 0;
			if (l && (j || k == 1) && !s->b[mi].fend)
				s->b[mi].fend = s->b[mi].fbefore = l;
		}
	}
}

/* the sort's order of ready nodes: the earlier step, then the graph's order */
static int before(uint32_t x, uint32_t y, const int32_t *key)
{
	return key[x] < key[y] || (key[x] == key[y] && x < y);
}

static void heap_push(uint32_t *heap, uint32_t *nh, uint32_t i, const int32_t *key)
{
	uint32_t c = (*nh)++;
	heap[c] = i;
	while (c && before(heap[c], heap[(c - 1) / 2], key)) {
		uint32_t t = heap[c];
		heap[c] = heap[(c - 1) / 2];
		heap[(c - 1) / 2] = t;
		c = (c - 1) / 2;
	}
}

int pass_schedule(Module *m, const Options *o)
{
	int K = m->micro;
	Graph *g = ir_entry(m);
	if (K <= 1 || !g || !m->train || !train_wanted(m, o))
		return 0;
	Sch s = {.m = m, .g = g, .K = K};
	if (train_emit_init(&s.e, m, o) < 0)
		return 1;
	int S = s.e.lc.stages, me = s.e.lc.stage;
	if (S <= 1) {
		train_emit_free(&s.e);
		return 0;
	}
	uint32_t nn = g->nodes.n;
	s.b = xcalloc((size_t)K, sizeof *s.b);
	/* each node's micro-batch and phase */
	int32_t *mic = xmalloc((nn + 1) * sizeof *mic);
	uint8_t *bwd = xmalloc(nn + 1);
	ir_clear_marks(m);
	for (uint32_t i = 0; i < nn; i++)
		g->nodes.a[i]->mark = i + 1;
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		IrPhase ph = ir_node_phase(n);
		int64_t v = n->kind == NK_CNODE ? pint(n, "micro") : -1;
		int b = v >= 0 && v < K ? (int)v : -1;
		if (b < 0)
			for (uint32_t k = 0; k < n->nargs; k++) {
				Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
				if (p && p->g == g && p->kind == NK_CNODE && p->mark && mic[p->mark - 1] > b)
					b = mic[p->mark - 1];
			}
		mic[i] = ph == IR_PHASE_OPT || n->kind == NK_RETURN ? -2 : b;
		bwd[i] = ph == IR_PHASE_BWD;
		if (n->kind != NK_CNODE || b < 0)
			continue;
		Borders *B = &s.b[b];
		int64_t pb = pint(n, "pipeline_begin"), pe = pint(n, "pipeline_end");
		if (!bwd[i]) {
			if (pb == b && (is_p2p(n) || ir_node_is_op(n, OP_StridedSlice)))
				vec_push(&B->fstart, n);
			if (pe == b && ir_node_is_op(n, OP_Send) && !B->fend) {
				B->fend = n;
				B->fbefore = n->args[0].kind == V_NODE ? n->args[0].u.node : n;
			}
		} else {
			if (pe == b && ir_node_is_op(n, OP_Receive))
				vec_push(&B->bstart, n);
			if (pb == b && ir_node_is_op(n, OP_Send))
				B->bend = n;
		}
	}
	if (me == S - 1)
		losses(&s);
	/* a stage without backward Receives starts a micro-batch's backward at
	 * its first operator, one without backward Sends ends it at its last */
	for (uint32_t i = 0; i < nn; i++) {
		Node *n = g->nodes.a[i];
		if (!bwd[i] || mic[i] < 0 || !can_wait(n))
			continue;
		Borders *B = &s.b[mic[i]];
		if (me == S - 1 && !B->bstart.n)
			vec_push(&B->bstart, n);
		if (me == 0)
			B->bend = n;
	}
	SchedStep *ord = xmalloc((size_t)(2 * K + 1) * sizeof *ord);
	int no = sched_order(S, me, K, o->pipeline_scheduler, ord);
	int32_t *pos = xmalloc((size_t)2 * K * sizeof *pos); /* [bwd * K + micro] */
	for (int k = 0; k < no; k++)
		pos[ord[k].bwd * K + ord[k].micro] = k;
	for (int k = 1; k < no; k++) {
		SchedStep a = ord[k - 1], b = ord[k];
		Borders *A = &s.b[a.micro], *Bb = &s.b[b.micro];
		if (!a.bwd && !b.bwd)
			wait_all(&s, Bb->fstart.a, Bb->fstart.n, A->fend);
		else if (!a.bwd && b.bwd)
			wait_all(&s, Bb->bstart.a, Bb->bstart.n, A->fbefore);
		else if (a.bwd && !b.bwd)
			wait_all(&s, Bb->fstart.a, Bb->fstart.n, A->bend);
		else
			wait_all(&s, Bb->bstart.a, Bb->bstart.n, A->bend);
	}
	if (o->pipeline_scheduler == SCHED_1F1B && me < S - 1)
		for (int i = S - me; i < K; i++) {
			Borders *P = &s.b[i - 1], *J = &s.b[i - S + me];
			if (J->bstart.n && can_wait(P->fend))
				wait_for(&s, P->fend, J->bstart.a[J->bstart.n - 1]);
			if (J->bend && can_wait(J->bend))
				wait_for(&s, J->bend, P->fend);
		}
	/* the order: every node's step, then a topological sort, earliest
	 * step first, ties in the graph's order */
	uint32_t nd = s.e.out.n, tot = nn + nd;
	Node **all = xmalloc((tot + 1) * sizeof *all);
	int32_t *key = xmalloc((tot + 1) * sizeof *key);
	for (uint32_t i = 0; i < nn; i++) {
		all[i] = g->nodes.a[i];
		int b = mic[i];
		key[i] = b == -2 ? 2 * K + 2 : b < 0 ? -1 : pos[bwd[i] * K + b];
	}
	for (uint32_t k = 0; k < nd; k++) {
		Node *d = s.e.out.a[k];
		all[nn + k] = d;
		key[nn + k] = key[d->mark - 1];
	}
	for (uint32_t i = 0; i < tot; i++)
		all[i]->mark = i + 1;
	uint32_t *indeg = xcalloc(tot + 1, sizeof *indeg), *ustart = xcalloc(tot + 2, sizeof *ustart);
	for (uint32_t i = 0; i < tot; i++) {
		Node *n = all[i];
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (p && p->g == g && p->kind != NK_PARAM && p->mark) {
				indeg[i]++;
				ustart[p->mark]++;
			}
		}
	}
	for (uint32_t i = 0; i < tot; i++)
		ustart[i + 1] += ustart[i];
	uint32_t *users = xmalloc((ustart[tot] + 1) * sizeof *users), *fill = xmalloc((tot + 1) * sizeof *fill);
	memcpy(fill, ustart, tot * sizeof *fill);
	for (uint32_t i = 0; i < tot; i++) {
		Node *n = all[i];
		for (uint32_t k = 0; k < n->nargs; k++) {
			Node *p = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
			if (p && p->g == g && p->kind != NK_PARAM && p->mark)
				users[fill[p->mark - 1]++] = i;
		}
	}
	/* a binary heap of ready nodes by (key, index) */
	uint32_t *heap = xmalloc((tot + 1) * sizeof *heap), nh = 0;
	Vec(Node *) out = {0};
	vec_grow(&out, tot);
	for (uint32_t i = 0; i < tot; i++)
		if (!indeg[i])
			heap_push(heap, &nh, i, key);
	while (nh) {
		uint32_t i = heap[0];
		heap[0] = heap[--nh];
		for (uint32_t c = 0;;) {
			uint32_t l = 2 * c + 1, r = l + 1, b = c;
			if (l < nh && before(heap[l], heap[b], key))
				b = l;
			if (r < nh && before(heap[r], heap[b], key))
				b = r;
			if (b == c)
				break;
			uint32_t t = heap[c];
			heap[c] = heap[b];
			heap[b] = t;
			c = b;
		}
		out.a[out.n++] = all[i];
		for (uint32_t u = ustart[i]; u < ustart[i + 1]; u++)
			if (!--indeg[users[u]])
				heap_push(heap, &nh, users[u], key);
	}
	int rc = 0;
	if (out.n != tot) {
		diag_error("internal: the %s order of pipeline stage %d leaves a cycle (%u of %u nodes ordered)",
		           o->pipeline_scheduler == SCHED_GPIPE ? "gpipe" : "1f1b", me, out.n, tot);
		vec_free(&out);
		rc = 1;
	} else {
		ir_graph_set_nodes(g, out.a, out.n, out.cap);
	}
	free(heap);
	free(users);
	free(fill);
	free(indeg);
	free(ustart);
	free(key);
	free(all);
	free(ord);
	free(pos);
	free(mic);
	free(bwd);
	for (int k = 0; k < K; k++) {
		vec_free(&s.b[k].fstart);
		vec_free(&s.b[k].bstart);
	}
	free(s.b);
	s.e.out.n = 0; /* placed by the sort */
	ir_clear_marks(m);
	train_emit_free(&s.e);
	return rc;
}
