/* report.c - what a plan costs: communication volume per operator and per
 * category, per-device memory, and an alpha-beta estimate of communication
 * time, computed from a lowered (per-rank, local-shape) module.
 *
 * Volumes are the bytes one device sends with ring algorithms over a group
 * of p devices holding S bytes (S = the local tensor on this device):
 *   AllReduce      2 (p-1)/p * S          (reduce-scatter + all-gather)
 *   AllGather        (p-1)   * S_in       (= (p-1)/p * S_out)
 *   ReduceScatter    (p-1)/p * S_in
 *   AlltoAll         (p-1)/p * S
 *   Send / Receive   S (counted once, on the sender)
 * and take alpha*steps + bytes/beta, with 2(p-1) steps for AllReduce and p-1
 * for the others; a group whose ranks span more than one node
 * (--devices-per-node) uses the inter-node alpha and beta.
 *
 * Categories come from MindSpore's naming of the inserted operators
 * (ir-format.md §1.10): forward_op_* forward collectives,
 * redistribution_op_* tensor redistribution, parallel_optimizer_allgather*
 * optimizer-shard gathers, Send/Receive pipeline traffic.  The gradient
 * all-reduce of a trainable parameter is not in a forward graph; it is
 * derived from the mirror group its consumers name in related_fusion_key
 * (all_reduce_<group>_<fusion>): 2 (p-1)/p * its local size.
 *
 * A training step (nodes of the backward or the optimizer, told apart by
 * their scope: ir_node_phase()) has its gradient communication as real
 * operators: every collective is counted where it is, in its phase, and
 * nothing is estimated from mirrors.  A bprop's instance is "grad" or
 * "grad_" and the forward operator's (training-step.md §2.1), so it falls in
 * the forward operator's category; grad_mirror* is the gradient all-reduce.
 * Memory then tells the weights from the optimizer state (every other
 * Parameter the optimizer reads or writes: moments.*, learning_rate,
 * global_step, ...) and counts one gradient buffer per update operator, at
 * the shape of its gradient operand (the weight's local or shard shape).
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "report.h"

static int64_t tensor_bytes(const Abs *a)
{
	int64_t n;
	if (!a || !a->is_tensor || shape_numel(&a->shape, &n) != 0)
		return 0;
	return n * dtype_size(a->dtype);
}

/* ranks of a communication operator's group, from its attributes */
static int group_ranks(const Node *n, int64_t *ranks, int max, int world)
{
	const Value *v = ir_attr_get(&n->pattrs, "group_rank_ids");
	if (!v)
		v = ir_attr_get(&n->pattrs, "rank_list");
	int k = v ? value_int_list(v, ranks, max) : -1;
	if (k > 0)
		return k;
	v = ir_attr_get(&n->pattrs, "group_ranks");
	if (v && (v->kind == V_STR || v->kind == V_WORD || v->kind == V_RAW)) {
		const char *s = sym_str(v->text);
		if (strcmp(s, "WORLD_GROUP") != 0) {
			k = 0;
			while (*s && k < max) {
				ranks[k++] = strtoll(s, (char **)&s, 10);
				if (*s == '-')
					s++;
				else if (*s)
					break;
			}
			if (k > 0)
				return k;
		}
	}
	for (k = 0; k < world && k < max; k++)
		ranks[k] = k;
	return k;
}

static const char *kind_name(int op)
{
	switch (op) {
	case OP_AllReduce:
		return "AllReduce";
	case OP_AllGather:
		return "AllGather";
	case OP_ReduceScatter:
		return "ReduceScatter";
	case OP_AlltoAll:
		return "AlltoAll";
	case OP_Send:
		return "Send";
	case OP_Receive:
		return "Receive";
	default:
		return "?";
	}
}

const char *const report_category_names[RC_COUNT] = {
	"forward collectives", "redistribution", "gradient all-reduce (mirrors)", "optimizer all-gather",
	"pipeline send/receive", "other communication",
};

const char *const report_phase_names[3] = {"forward", "backward", "optimizer"};

static int category(const Node *n)
{
	const char *inst = sym_str(n->instance);
	if (n->op == OP_Send || n->op == OP_Receive)
		return RC_PIPELINE;
	if (strncmp(inst, "grad_mirror", 11) == 0)
		return RC_GRADIENT;
	if (strncmp(inst, "grad", 4) == 0) /* a bprop: the category of its forward operator */
		inst += inst[4] == '_' ? 5 : 4;
	if (strncmp(inst, "forward_op_", 11) == 0)
		return RC_FORWARD;
	if (strncmp(inst, "redistribution_op_", 18) == 0)
		return RC_REDIST;
	if (strncmp(inst, "parallel_optimizer_allgather", 28) == 0)
		return RC_OPTIMIZER;
	return RC_OTHER;
}

void report_cost(const ReportConfig *c, int op, int p, int64_t bytes, int inter, double *vol, double *secs)
{
	double v = 0, steps = 0;
	if (p <= 1 && op != OP_Send && op != OP_Receive) {
		*vol = 0;
		*secs = 0;
		return;
	}
	switch (op) {
	case OP_AllReduce:
		v = 2.0 * (p - 1) / p * (double)bytes;
		steps = 2.0 * (p - 1);
		break;
	case OP_AllGather:
		v = (double)(p - 1) * (double)bytes;
		steps = p - 1;
		break;
	case OP_ReduceScatter:
	case OP_AlltoAll:
		v = (double)(p - 1) / p * (double)bytes;
		steps = p - 1;
		break;
	case OP_Send:
		v = (double)bytes;
		steps = 1;
		break;
	default: /* Receive: the sender counts the volume */
		v = 0;
		steps = 0;
		break;
	}
	double bw = (inter ? c->bw_inter : c->bw_intra) * 1e9; /* bytes/s */
	double lat = (inter ? c->lat_inter : c->lat_intra) * 1e-6;
	*vol = v;
	*secs = steps * lat + (bw > 0 ? v / bw : 0);
}

static int spans_nodes(const int64_t *ranks, int k, int per_node)
{
	if (per_node <= 0)
		return 0;
	for (int i = 1; i < k; i++)
		if (ranks[i] / per_node != ranks[0] / per_node)
			return 1;
	return 0;
}

/* "all_reduce_<group>_<fusion>" -> group size (world group = devices) */
static int mirror_group_size(const char *key, int world, const char *world_name)
{
	if (strncmp(key, "all_reduce_", 11) != 0)
		return 0;
	const char *g = key + 11;
	if (strncmp(g, world_name, strlen(world_name)) == 0 || strstr(g, "world_group"))
		return world;
	return atoi(g);
}

static Node *param_of(Node *n)
{
	while (n && n->kind == NK_CNODE && (ir_node_is_op(n, OP_Load) || ir_node_is_op(n, OP_Cast) ||
					    ir_node_is_op(n, OP_Depend)) && n->nargs && n->args[0].kind == V_NODE)
		n = n->args[0].u.node;
	return n && n->kind == NK_PARAM ? n : NULL;
}

/* The optimizer's update operators and the operand that is the weight's
 * gradient (training-step.md §3.1; the weight is operand 0) */
static int update_grad_operand(const Node *n)
{
	static const struct {
		const char *name;
		int grad;
	} upd[] = {{"ApplyMomentum", 3}, {"SGD", 1}, {"Adam", 9}, {"AdamWeightDecay", 8}};
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return -1;
	for (size_t i = 0; i < sizeof upd / sizeof upd[0]; i++)
		if (strcmp(sym_str(n->prim), upd[i].name) == 0)
			return (uint32_t)upd[i].grad < n->nargs ? upd[i].grad : -1;
	return -1;
}

enum { P_WEIGHT = 1, P_STATE = 2, P_MIRROR = 4 }; /* Node.mark of parameters */

/* a training step: the weights, the optimizer state and the gradients */
static void collect_training(const Module *m, Report *r)
{
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			const Node *n = g->nodes.a[i];
			if (n->dead || n->kind != NK_CNODE || ir_node_phase(n) != IR_PHASE_OPT)
				continue;
			int gk = update_grad_operand(n);
			if (gk >= 0) {
				const Abs *ga = ir_in_abs(n, (uint32_t)gk);
				if (!ga && n->args[gk].kind == V_NODE)
					ga = &n->args[gk].u.node->out;
				r->grad_bytes += tensor_bytes(ga);
			}
			for (uint32_t k = 0; k < n->nargs; k++) {
				Node *p = n->args[k].kind == V_NODE ? param_of(n->args[k].u.node) : NULL;
				if (p)
					p->mark |= k == 0 && gk >= 0 ? P_WEIGHT : P_STATE;
			}
		}
	}
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->params.n; i++) {
			const Node *p = g->params.a[i];
			if (!p->has_default)
				continue;
			/* the weight an update writes is a weight even if another reads it */
			if ((p->mark & P_STATE) && !(p->mark & P_WEIGHT))
				r->state_bytes += tensor_bytes(&p->out);
			else
				r->weight_bytes += tensor_bytes(&p->out);
		}
	}
}

static int is_training(const Module *m)
{
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++)
			if (g->nodes.a[i]->kind == NK_CNODE && !g->nodes.a[i]->dead &&
			    ir_node_phase(g->nodes.a[i]) != IR_PHASE_FWD)
				return 1;
	}
	return 0;
}

/* 1: a duplicate the recompute pass made (computed in the backward);
 * -1: its origin, whose value the backward no longer keeps; 0: neither */
static int recomputed(const Node *n)
{
	const NodeExt *x = ir_node_ext(n);
	if (!x->cattrs.n || !ir_attr_get(&x->cattrs, "recompute_id"))
		return 0;
	return ir_attr_get(&x->cattrs, "duplicated") ? 1 : -1;
}

void report_collect(const Module *m, const ReportConfig *c, Report *r)
{
	memset(r->cat_bytes, 0, sizeof r->cat_bytes);
	memset(r->cat_secs, 0, sizeof r->cat_secs);
	memset(r->ph_ops, 0, sizeof r->ph_ops);
	memset(r->ph_bytes, 0, sizeof r->ph_bytes);
	memset(r->ph_secs, 0, sizeof r->ph_secs);
	r->param_bytes = r->act_bytes = 0;
	r->weight_bytes = r->grad_bytes = r->state_bytes = r->bwd_bytes = 0;
	r->saved_bytes = r->recomputed_bytes = 0;
	r->ncomm = 0;
	r->nops = 0;
	int world = c->world;
	int64_t ranks[4096];
	/* parameters: local size, and the mirror group named by a consumer */
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->params.n; i++) {
			Node *p = g->params.a[i];
			p->mark = 0;
			if (p->has_default)
				r->param_bytes += tensor_bytes(&p->out);
		}
	}
	r->training = is_training(m);
	if (r->training)
		collect_training(m, r);
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			const Node *n = g->nodes.a[i];
			if (n->dead || n->kind != NK_CNODE)
				continue;
			int phase = r->training ? (int)ir_node_phase(n) : IR_PHASE_FWD;
			const Value *key = r->training ? NULL : ir_attr_get(&ir_node_ext(n)->primal, "related_fusion_key");
			if (key && key->kind == V_STR) {
				int gs = mirror_group_size(sym_str(key->text), world, c->world_group);
				for (uint32_t k = 0; k < n->nargs; k++) {
					if (n->args[k].kind != V_NODE)
						continue;
					Node *p = param_of(n->args[k].u.node);
					if (p && p->has_default && !(p->mark & P_MIRROR) && gs > 1) {
						p->mark |= P_MIRROR;
						double v, t;
						report_cost(c, OP_AllReduce, gs, tensor_bytes(&p->out), gs > c->per_node, &v, &t);
						r->cat_bytes[RC_GRADIENT] += v;
						r->cat_secs[RC_GRADIENT] += t;
					}
				}
			}
			const OpInfo *oi = ir_opinfo(n);
			if (oi->family == FAM_COMM || oi->family == FAM_P2P) {
				ReportComm *rc = r->ncomm < REPORT_MAX_COMM ? &r->comm[r->ncomm] : NULL;
				int k = group_ranks(n, ranks, 4096, world);
				int64_t bytes = tensor_bytes(n->op == OP_Receive ? &n->out : ir_in_abs(n, 0));
				int p = n->op == OP_Send || n->op == OP_Receive ? 2 : k;
				double v, t;
				report_cost(c, n->op, p, bytes, spans_nodes(ranks, k, c->per_node), &v, &t);
				int cat = category(n);
				r->cat_bytes[cat] += v;
				r->cat_secs[cat] += t;
				r->ph_ops[phase]++;
				r->ph_bytes[phase] += v;
				r->ph_secs[phase] += t;
				if (rc) {
					rc->phase = phase;
					rc->node = n;
					rc->kind = kind_name(n->op);
					rc->group = p;
					rc->bytes = v;
					rc->secs = t;
					rc->category = cat;
					r->ncomm++;
				}
			} else if (oi->family != FAM_STRUCT && n->callee_kind == CK_PRIM && phase != IR_PHASE_OPT) {
				/* the optimizer's outputs are its Parameters, already counted */
				int rc = r->training ? recomputed(n) : 0;
				if (phase == IR_PHASE_BWD || rc > 0)
					r->bwd_bytes += tensor_bytes(&n->out);
				else if (rc < 0)
					r->saved_bytes += tensor_bytes(&n->out);
				else
					r->act_bytes += tensor_bytes(&n->out);
				if (rc > 0)
					r->recomputed_bytes += tensor_bytes(&n->out);
				if (ir_node_strat(n)->n)
					r->nops++;
			}
		}
	}
	for (uint32_t gi = 0; gi < m->graphs.n; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->params.n; i++)
			m->graphs.a[gi]->params.a[i]->mark = 0;
}

static void fmt_shape(char *buf, size_t n, const Abs *a)
{
	size_t k = 0;
	if (!a || a->shape.kind != SK_DIMS) {
		snprintf(buf, n, "-");
		return;
	}
	k += (size_t)snprintf(buf + k, n - k, "(");
	for (int i = 0; i < a->shape.rank && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)a->shape.dims[i]);
	if (k < n)
		snprintf(buf + k, n - k, ")");
}

static void human(char *buf, size_t n, double bytes)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (bytes >= 1024 && i < 4) {
		bytes /= 1024;
		i++;
	}
	snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", bytes, u[i]);
}

static double total(const double *a)
{
	double t = 0;
	for (int i = 0; i < RC_COUNT; i++)
		t += a[i];
	return t;
}

/* "  what   SIZE | DP SIZE" */
static void mem_line(FILE *f, const char *what, int64_t bytes, const Report *dp, int64_t dp_bytes)
{
	char s1[64], s2[64];
	human(s1, sizeof s1, (double)bytes);
	human(s2, sizeof s2, (double)dp_bytes);
	fprintf(f, "  %-30s %12s%s%s\n", what, s1, dp ? " | " : "", dp ? s2 : "");
}

static int64_t step_memory(const Report *r)
{
	return r->weight_bytes + r->grad_bytes + r->state_bytes + r->act_bytes + r->bwd_bytes;
}

/* a training step: its communication by phase, and memory with the
 * gradients and the optimizer state */
static void print_training(FILE *f, const Report *r, const Report *dp)
{
	char s1[64], s2[64];
	mem_line(f, "weights", r->weight_bytes, dp, dp ? dp->weight_bytes : 0);
	mem_line(f, "gradients", r->grad_bytes, dp, dp ? dp->grad_bytes : 0);
	mem_line(f, "optimizer state", r->state_bytes, dp, dp ? dp->state_bytes : 0);
	mem_line(f, "activations (no reuse)", r->act_bytes, dp, dp ? dp->act_bytes : 0);
	mem_line(f, "backward buffers (no reuse)", r->bwd_bytes, dp, dp ? dp->bwd_bytes : 0);
	if (r->saved_bytes || (dp && dp->saved_bytes)) {
		mem_line(f, "  recomputed in the backward", r->recomputed_bytes, dp, dp ? dp->recomputed_bytes : 0);
		mem_line(f, "activations saved by recompute", r->saved_bytes, dp, dp ? dp->saved_bytes : 0);
	}
	mem_line(f, "memory (training step)", step_memory(r), dp, dp ? step_memory(dp) : 0);
	fprintf(f, "\nTraining step by phase, per device%s\n", dp ? " (this plan | pure data parallel)" : "");
	int ops = 0, dops = 0;
	double b = 0, t = 0, db = 0, dt = 0;
	for (int p = 0; p <= 3; p++) {
		const char *name = p < 3 ? report_phase_names[p] : "step";
		int n = p < 3 ? r->ph_ops[p] : ops;
		double pb = p < 3 ? r->ph_bytes[p] : b, pt = p < 3 ? r->ph_secs[p] : t;
		human(s1, sizeof s1, pb);
		fprintf(f, "  %-10s %6d op%s %12s %10.2f us", name, n, n == 1 ? " " : "s", s1, pt * 1e6);
		if (dp) {
			int dn = p < 3 ? dp->ph_ops[p] : dops;
			double dpb = p < 3 ? dp->ph_bytes[p] : db, dpt = p < 3 ? dp->ph_secs[p] : dt;
			human(s2, sizeof s2, dpb);
			fprintf(f, " | %6d op%s %12s %10.2f us", dn, dn == 1 ? " " : "s", s2, dpt * 1e6);
			if (p < 3) {
				dops += dn;
				db += dpb;
				dt += dpt;
			}
		}
		fputc('\n', f);
		if (p < 3) {
			ops += n;
			b += pb;
			t += pt;
		}
	}
}

/* the pipeline's schedule, when the step has micro-batches over stages:
 * each stage's order and its timeline (sched_timeline), with the bubble */
static void print_schedule(FILE *f, const Module *m, const ReportConfig *c)
{
	int S = c->stages, M = m->micro;
	if (S <= 1 || M <= 1 || !m->train)
		return;
	int n2 = 2 * M, per = c->world / S;
	int32_t *start = xmalloc((size_t)S * n2 * sizeof *start);
	SchedStep *ord = xmalloc((size_t)n2 * sizeof *ord);
	int span = sched_timeline(S, M, c->scheduler, start);
	fprintf(f, "\nPipeline schedule (%s, %d stages x %d micro-batches; a backward takes two forwards' time)\n",
	        c->scheduler == SCHED_GPIPE ? "gpipe" : "1f1b", S, M);
	int w = M > 10 ? (M > 100 ? 4 : 3) : 2; /* a cell: F or B and the micro-batch */
	for (int s = 0; s < S; s++) {
		sched_order(S, s, M, c->scheduler, ord);
		fprintf(f, "  stage %d (ranks %d-%d):", s, s * per, s * per + per - 1);
		for (int k = 0; k < n2; k++)
			fprintf(f, " %c%d", ord[k].bwd ? 'B' : 'F', ord[k].micro);
		fputc('\n', f);
		if (span <= 0 || span > 160)
			continue;
		/* one cell per unit of time, "." where the stage waits */
		fprintf(f, "    ");
		int t = 0;
		for (int k = 0; k < n2; k++) {
			int t0 = start[(size_t)s * n2 + k], d = ord[k].bwd ? 2 : 1;
			for (; t < t0; t++)
				fprintf(f, " %*s", w, ".");
			for (int u = 0; u < d; u++, t++)
				fprintf(f, " %c%-*d", ord[k].bwd ? 'B' : 'F', w - 1, ord[k].micro);
		}
		for (; t < span; t++)
			fprintf(f, " %*s", w, ".");
		fputc('\n', f);
	}
	if (span > 0)
		fprintf(f, "  bubble: %.1f%% of the stages' time is idle (the textbook (S-1)/(M+S-1) = %.1f%%)\n",
		        100.0 * (1.0 - 3.0 * M / span), 100.0 * (S - 1) / (M + S - 1));
	free(start);
	free(ord);
}

void report_print_text(FILE *f, const Module *m, const ReportConfig *c, const Report *r, const Report *dp)
{
	char a[128], b[128], s1[64], s2[64];
	fprintf(f, "sappc plan report: %d devices, rank %d\n\n", c->world, c->rank);
	fprintf(f, "Operators (strategy, local input shapes -> local output shape)\n");
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			const Node *n = g->nodes.a[i];
			const Value *st = ir_attr_get(ir_node_strat(n), "in_strategy");
			if (n->dead || !st)
				continue;
			char strat[256] = "";
			FILE *sf = fmemopen(strat, sizeof strat - 1, "w");
			if (sf) {
				ir_print_value(sf, st);
				fclose(sf);
			}
			fprintf(f, "  %%%-4d %-22s %-26s", n->local, sym_str(n->prim), strat);
			for (uint32_t k = 0; k < n->nin_types; k++) {
				if (!n->in_types[k].is_tensor)
					continue;
				fmt_shape(a, sizeof a, &n->in_types[k]);
				fprintf(f, " %s", a);
			}
			fmt_shape(b, sizeof b, &n->out);
			fprintf(f, " -> %s\n", b);
		}
	}
	OpaqueUse *u;
	uint32_t nu = op_opaque_uses(m, &u);
	if (nu)
		fprintf(f, "\nNot modelled (never split, computed whole on every device): operator, uses, first use\n");
	for (uint32_t i = 0; i < nu; i++)
		fprintf(f, "  %-28s %6u  %s:%u:%u\n", sym_str(u[i].prim), u[i].count, m->filename, u[i].first.line,
			u[i].first.col);
	free(u);
	fprintf(f, "\nCommunication operators (bytes sent per device, ring algorithms)\n");
	if (r->training)
		fprintf(f, "  %-6s %-14s %-22s %-9s %6s %14s %12s\n", "node", "kind", "category", "phase", "group", "bytes",
			"time (us)");
	else
		fprintf(f, "  %-6s %-14s %-22s %6s %14s %12s\n", "node", "kind", "category", "group", "bytes", "time (us)");
	for (int i = 0; i < r->ncomm; i++) {
		const ReportComm *rc = &r->comm[i];
		if (r->training)
			fprintf(f, "  %%%-5d %-14s %-22.22s %-9s %6d %14.0f %12.2f\n", rc->node->local, rc->kind,
				report_category_names[rc->category], report_phase_names[rc->phase], rc->group, rc->bytes,
				rc->secs * 1e6);
		else
			fprintf(f, "  %%%-5d %-14s %-22.22s %6d %14.0f %12.2f\n", rc->node->local, rc->kind,
				report_category_names[rc->category], rc->group, rc->bytes, rc->secs * 1e6);
	}
	fprintf(f, "\nTotals per device%s\n", dp ? " (this plan | pure data parallel)" : "");
	for (int i = 0; i < RC_COUNT; i++) {
		human(s1, sizeof s1, r->cat_bytes[i]);
		if (dp) {
			human(s2, sizeof s2, dp->cat_bytes[i]);
			fprintf(f, "  %-30s %12s %10.2f us | %12s %10.2f us\n", report_category_names[i], s1,
				r->cat_secs[i] * 1e6, s2, dp->cat_secs[i] * 1e6);
		} else {
			fprintf(f, "  %-30s %12s %10.2f us\n", report_category_names[i], s1, r->cat_secs[i] * 1e6);
		}
	}
	human(s1, sizeof s1, total(r->cat_bytes));
	if (dp) {
		human(s2, sizeof s2, total(dp->cat_bytes));
		fprintf(f, "  %-30s %12s %10.2f us | %12s %10.2f us\n", "communication", s1, total(r->cat_secs) * 1e6,
			s2, total(dp->cat_secs) * 1e6);
	} else {
		fprintf(f, "  %-30s %12s %10.2f us\n", "communication", s1, total(r->cat_secs) * 1e6);
	}
	if (r->training) {
		print_training(f, r, dp);
	} else {
		mem_line(f, "parameters", r->param_bytes, dp, dp ? dp->param_bytes : 0);
		mem_line(f, "activations (no reuse)", r->act_bytes, dp, dp ? dp->act_bytes : 0);
	}
	print_schedule(f, m, c);
	const SappSummary *ss = m->sapp;
	if (ss && ss->searched) {
		fprintf(f, "\nSearch: %s strategies (GenerateStrategy%s): %s\n", ss->predict ? "inference" : "training",
			ss->predict ? "V1" : "V3", ss->phase_why);
		if (ss->suggestion)
			fprintf(f, "Auto pipeline: %s\n", ss->suggestion);
	}
	fprintf(f, "\nModel: alpha-beta, intra-node %.1f GB/s and %.2f us, inter-node %.1f GB/s and %.2f us, "
		   "%d devices per node\n",
		c->bw_intra, c->lat_intra, c->bw_inter, c->lat_inter, c->per_node);
}

json_t *report_totals_json(const Report *r)
{
	json_t *o = json_object();
	for (int i = 0; i < RC_COUNT; i++) {
		json_t *e = json_object();
		json_object_set_new(e, "bytes", json_real(r->cat_bytes[i]));
		json_object_set_new(e, "seconds", json_real(r->cat_secs[i]));
		json_object_set_new(o, report_category_names[i], e);
	}
	json_object_set_new(o, "parameters_bytes", json_integer(r->param_bytes));
	json_object_set_new(o, "activations_bytes", json_integer(r->act_bytes));
	if (r->training) {
		json_t *ph = json_object();
		for (int p = 0; p < 3; p++)
			json_object_set_new(ph, report_phase_names[p],
					    json_pack("{sisfsf}", "operations", r->ph_ops[p], "bytes", r->ph_bytes[p], "seconds",
						      r->ph_secs[p]));
		json_object_set_new(o, "phases", ph);
		json_object_set_new(o, "weights_bytes", json_integer(r->weight_bytes));
		json_object_set_new(o, "gradients_bytes", json_integer(r->grad_bytes));
		json_object_set_new(o, "optimizer_state_bytes", json_integer(r->state_bytes));
		json_object_set_new(o, "backward_buffers_bytes", json_integer(r->bwd_bytes));
		if (r->saved_bytes) {
			json_object_set_new(o, "recomputed_bytes", json_integer(r->recomputed_bytes));
			json_object_set_new(o, "recompute_saved_bytes", json_integer(r->saved_bytes));
		}
		json_object_set_new(o, "training_step_memory_bytes", json_integer(step_memory(r)));
	}
	return o;
}

int report_print_json(FILE *f, const Module *m, const ReportConfig *c, const Report *r, const Report *dp)
{
	json_t *root = json_object();
	json_object_set_new(root, "device_num", json_integer(c->world));
	json_object_set_new(root, "rank", json_integer(c->rank));
	json_t *model = json_object();
	json_object_set_new(model, "bandwidth_intra_gbps", json_real(c->bw_intra));
	json_object_set_new(model, "bandwidth_inter_gbps", json_real(c->bw_inter));
	json_object_set_new(model, "latency_intra_us", json_real(c->lat_intra));
	json_object_set_new(model, "latency_inter_us", json_real(c->lat_inter));
	json_object_set_new(model, "devices_per_node", json_integer(c->per_node));
	json_object_set_new(root, "model", model);
	const SappSummary *ss = m->sapp;
	if (ss && ss->searched) {
		json_t *sp = json_object();
		json_object_set_new(sp, "phase", json_string(ss->predict ? "predict" : "train"));
		json_object_set_new(sp, "phase_reason", json_string(ss->phase_why));
		json_object_set_new(sp, "stages", json_integer(ss->stages));
		json_object_set_new(sp, "auto_pipeline", ss->suggestion ? json_string(ss->suggestion) : json_null());
		json_object_set_new(root, "search", sp);
	}
	if (c->stages > 1 && m->micro > 1 && m->train) {
		int S = c->stages, M = m->micro, n2 = 2 * M;
		int32_t *start = xmalloc((size_t)S * n2 * sizeof *start);
		SchedStep *ord = xmalloc((size_t)n2 * sizeof *ord);
		int span = sched_timeline(S, M, c->scheduler, start);
		json_t *sc = json_object(), *rows = json_array();
		json_object_set_new(sc, "scheduler", json_string(c->scheduler == SCHED_GPIPE ? "gpipe" : "1f1b"));
		json_object_set_new(sc, "micro_batches", json_integer(M));
		for (int st = 0; st < S; st++) {
			sched_order(S, st, M, c->scheduler, ord);
			json_t *row = json_array();
			for (int k = 0; k < n2; k++) {
				json_t *e = json_object();
				char nm[24];
				snprintf(nm, sizeof nm, "%c%d", ord[k].bwd ? 'B' : 'F', ord[k].micro);
				json_object_set_new(e, "step", json_string(nm));
				json_object_set_new(e, "start", json_integer(span > 0 ? start[(size_t)st * n2 + k] : -1));
				json_array_append_new(row, e);
			}
			json_array_append_new(rows, row);
		}
		json_object_set_new(sc, "stages", rows);
		json_object_set_new(sc, "makespan", json_integer(span));
		json_object_set_new(sc, "bubble", json_real(span > 0 ? 1.0 - 3.0 * M / span : 0));
		json_object_set_new(root, "schedule", sc);
		free(start);
		free(ord);
	}
	json_t *ops = json_array();
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			const Node *n = g->nodes.a[i];
			const Value *st = ir_attr_get(ir_node_strat(n), "in_strategy");
			if (n->dead || !st)
				continue;
			json_t *o = json_object();
			char buf[512] = "";
			FILE *sf = fmemopen(buf, sizeof buf - 1, "w");
			if (sf) {
				ir_print_value(sf, st);
				fclose(sf);
			}
			json_object_set_new(o, "node", json_integer(n->local));
			json_object_set_new(o, "operator", json_string(sym_str(n->prim)));
			json_object_set_new(o, "fullname", json_string(ir_node_fullname(n)));
			json_object_set_new(o, "in_strategy", json_string(buf));
			json_t *shp = json_array();
			for (uint32_t k = 0; k < n->nin_types; k++) {
				if (!n->in_types[k].is_tensor || n->in_types[k].shape.kind != SK_DIMS)
					continue;
				json_t *d = json_array();
				for (int j = 0; j < n->in_types[k].shape.rank; j++)
					json_array_append_new(d, json_integer(n->in_types[k].shape.dims[j]));
				json_array_append_new(shp, d);
			}
			json_object_set_new(o, "local_input_shapes", shp);
			json_array_append_new(ops, o);
		}
	}
	json_object_set_new(root, "operators", ops);
	json_t *nm = json_array();
	OpaqueUse *u;
	uint32_t nu = op_opaque_uses(m, &u);
	for (uint32_t i = 0; i < nu; i++) {
		size_t len = strlen(m->filename) + 32;
		char *at = xmalloc(len);
		snprintf(at, len, "%s:%u:%u", m->filename, u[i].first.line, u[i].first.col);
		json_t *o = json_object();
		json_object_set_new(o, "operator", json_string(sym_str(u[i].prim)));
		json_object_set_new(o, "count", json_integer(u[i].count));
		json_object_set_new(o, "first", json_string(at));
		free(at);
		json_array_append_new(nm, o);
	}
	free(u);
	json_object_set_new(root, "not_modelled", nm);
	json_t *comm = json_array();
	for (int i = 0; i < r->ncomm; i++) {
		const ReportComm *rc = &r->comm[i];
		json_t *o = json_object();
		json_object_set_new(o, "node", json_integer(rc->node->local));
		json_object_set_new(o, "kind", json_string(rc->kind));
		json_object_set_new(o, "instance", json_string(sym_str(rc->node->instance)));
		json_object_set_new(o, "category", json_string(report_category_names[rc->category]));
		if (r->training)
			json_object_set_new(o, "phase", json_string(report_phase_names[rc->phase]));
		json_object_set_new(o, "group_size", json_integer(rc->group));
		json_object_set_new(o, "bytes", json_real(rc->bytes));
		json_object_set_new(o, "seconds", json_real(rc->secs));
		json_array_append_new(comm, o);
	}
	json_object_set_new(root, "communication", comm);
	json_object_set_new(root, "totals", report_totals_json(r));
	if (dp)
		json_object_set_new(root, "data_parallel_totals", report_totals_json(dp));
	int rc = json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
	fputc('\n', f);
	json_decref(root);
	return rc;
}

/* --report: the plan's report, next to dp, the one of the pure data-parallel
 * plan of the same graph (the driver runs the pipeline again on its copy of
 * the verified module with every strategy replaced by the default
 * batch-parallel one), so a user sees what the search bought; NULL when that
 * plan cannot be lowered. */
int report_run(const Module *m, const Report *dp, const ReportConfig *c, const char *path, int json)
{
	Report *r = xcalloc(1, sizeof *r);
	report_collect(m, c, r);
	int rc = 0;
	OutFile of;
	if (out_open(&of, path) != 0) {
		rc = 3;
	} else {
		if (json)
			report_print_json(of.f, m, c, r, dp);
		else
			report_print_text(of.f, m, c, r, dp);
		if (out_commit(&of) != 0)
			rc = 3;
	}
	free(r);
	return rc;
}
