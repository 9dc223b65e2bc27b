/* driver.c - sappc --simulate: prove a parallel plan correct by running it.
 *
 * The plan is correct when every rank computes its slice of what the
 * single device computes.  So the input is read once more for the
 * single-device reference (through `verify` only, when the pipeline has it:
 * the global graph as written) and once per rank r of N (the pipeline as
 * given, with rank r, exactly as --all-ranks lowers it).  The reference runs
 * alone on seeded random inputs; the N rank graphs run together, their
 * collectives and Send/Receive executed across ranks, each parameter being
 * the rank's block of the reference's parameter (sim_run_ranks).  Then
 * sim_compare checks every operator present in both graphs, and each rank's
 * returned value, against the matching block of the reference.
 *
 * The blocks come from the lowering's layouts (Node.lay, passes/lower/
 * lower.h), read by lower_slice() below:
 *   - a node's output layout names the block of its rank's position in the
 *     stage's device matrix (layout_slice_offset); with pipeline stages a
 *     rank's position is its index in its stage, and its graph holds only
 *     that stage's operators (the others have no partner and are skipped);
 *   - an operator followed by a forward AllReduce or ReduceScatter holds
 *     partial values: the ranks of one reduction group (the device
 *     dimensions of fwd_mask) are combined with the reduction before the
 *     comparison, each group separately;
 *   - with optimizer sharding a weight and its Load hold only their chunk
 *     of dimension 0 among the weight's replicas, in replica-group order
 *     (the order the restoring AllGather concatenates in);
 *   - a Gather with a row-split table, whose local lookup only its
 *     AllReduce completes, and a Send (what a stage before the last sends
 *     on) are not slices of anything and are left out.
 *
 * Memory: the reference and every rank live at once - each one's graph
 * (ir_module_bytes), tensors (sim_estimate_bytes) and run state
 * (sim_estimate_state_bytes), plus the comparison's scratch - and all of it
 * counts against --simulate-max-mb.  The run is refused up front, before
 * the other ranks are lowered, when the reference plus N times the rank
 * already lowered exceeds the limit; then again as soon as the ranks
 * lowered so far, with the rest projected from them, exceed it (pipeline
 * stages make ranks differ); the tensors the ranks then allocate are
 * bounded by what is left.
 */
#include <math.h>
#include <string.h>

#include "simint.h"
#include "../lower/lower.h"

typedef struct Plan {
	int per_stage; /* ranks in one pipeline stage */
	Module **ranks;
	int nranks;
} Plan;

static int64_t int_attr(const Node *n, const char *key)
{
	int64_t v;
	const Value *a = ir_attr_get(&n->pattrs, key);
	return a && value_get_int(a, &v) ? v : -1;
}

/* What a Receive of `rank` holds: the operand of the matching Send of the
 * sending rank, which sits at the same position of its own stage. */
static const Node *sent_value(const Plan *pl, const Node *recv, int rank)
{
	int64_t src = int_attr(recv, "src_rank"), tag = int_attr(recv, "sr_tag");
	Graph *g = src >= 0 && src < pl->nranks ? ir_entry(pl->ranks[src]) : NULL;
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		const Node *s = g->nodes.a[i];
		if (s->op == OP_Send && s->nargs && s->args[0].kind == V_NODE && int_attr(s, "dest_rank") == rank &&
		    int_attr(s, "sr_tag") == tag)
			return s->args[0].u.node;
	}
	return NULL;
}

/* the reduction that completes a partial value */
static int combine_of(const NodeLayout *l)
{
	const char *op = l->fwd_op ? sym_str(l->fwd_op) : "sum";
	if (l->fwd == FC_ALLREDUCE_MEAN)
		return SIM_MEAN;
	return strcmp(op, "max") == 0    ? SIM_MAX
	       : strcmp(op, "min") == 0  ? SIM_MIN
	       : strcmp(op, "prod") == 0 ? SIM_PROD
	                                 : SIM_SUM;
}

/* The ranks holding partial values of one block: those that differ only
 * in the device dimensions `dims` of layout l (the position with those
 * coordinates zeroed names the group), combined with `combine`. */
static void partial_group(const NodeLayout *l, uint32_t dims, int64_t pos, int combine, SimSlice *out)
{
	if (l->nodev <= 0)
		return;
	int64_t coord[LAYOUT_MAX_DIM + 2], p = pos, k = 1, key = 0;
	for (int i = l->nodev - 1; i >= 0; i--) {
		coord[i] = p % l->odev[i];
		p /= l->odev[i];
	}
	for (int i = 0; i < l->nodev; i++) {
		if (dims >> i & 1) {
			k *= l->odev[i];
			coord[i] = 0;
		}
		key = key * l->odev[i] + coord[i];
	}
	if (k > 1) {
		out->replicated_sum = (int)k;
		out->combine = combine;
		out->group = key;
	}
}

/* A data-parallel loss is its rank's local mean (lower_local_mean_dims);
 * a scalar that an affine step makes of it - loss + c, loss - c, loss * c,
 * loss / c, -loss, Cast, Depend, loss1 + loss2 of the same loss (or of
 * its micro-batch copies, whose means are over the same ranks) - is one
 * too: the mean over the loss's group of ranks is still the reference
 * value.  Only scalars, whose other operands are whole on every rank (a
 * partial one has its AllReduce before it).  The loss node, else NULL. */
/* two local-mean losses whose means are over the same ranks (the
 * micro-batches' copies of one loss) */
static int same_mean(const Node *a, const Node *b)
{
	return a == b || (a->lay && b->lay && a->lay->nin && b->lay->nin && tlay_equal(&a->lay->in[0], &b->lay->in[0]) &&
	                  lower_local_mean_dims(a) == lower_local_mean_dims(b));
}

static const Node *mean_source(const Node *n, int depth)
{
	if (!n || n->kind != NK_CNODE || depth > 32 || n->out.shape.kind != SK_DIMS || n->out.shape.rank != 0)
		return NULL;
	if (lower_local_mean_dims(n))
		return n;
	int one = 0; /* the operand that must be the only partial one, -1 any */
	switch (n->op) {
	case OP_Add:
	case OP_Sub:
	case OP_AddN:
		one = -1;
		break;
	case OP_Mul:
		one = -2; /* exactly one, either */
		break;
	case OP_Div:
	case OP_RealDiv:
	case OP_Neg:
	case OP_Cast:
	case OP_Depend:
		one = 0;
		break;
	default:
		return NULL;
	}
	const Node *src = NULL;
	int npartial = 0;
	uint32_t nt = n->op == OP_Cast || n->op == OP_Depend ? 1 : n->nargs;
	for (uint32_t i = 0; i < nt && i < n->nargs; i++) {
		const Value *v = &n->args[i];
		if (v->kind != V_NODE)
			continue;
		const Node *a = v->u.node;
		if (a->kind == NK_CNODE && a->op == OP_MakeTuple && n->op == OP_AddN) {
			for (uint32_t j = 0; j < a->nargs; j++) {
				const Node *e = a->args[j].kind == V_NODE ? a->args[j].u.node : NULL;
				const Node *s2 = e ? mean_source(e, depth + 1) : NULL;
				if (s2 && src && !same_mean(s2, src))
					return NULL;
				if (s2) {
					src = s2;
					npartial++;
				}
			}
			continue;
		}
		if (a->out.shape.kind == SK_DIMS && a->out.shape.rank != 0)
			return NULL; /* a tensor operand: not a scalar step */
		const Node *s2 = mean_source(a, depth + 1);
		if (!s2)
			continue;
		if ((src && !same_mean(s2, src)) || (one >= 0 && (int)i != one))
			return NULL;
		src = s2;
		npartial++;
	}
	if (!src || (one == -2 && npartial != 1))
		return NULL;
	return src;
}

static int lower_slice(void *ctx, const Node *local, const Node *global, int rank, SimSlice *out)
{
	const Plan *pl = ctx;
	const NodeLayout *l = local->lay;
	(void)global;
	if (local->kind == NK_CNODE && local->op == OP_Send)
		return 2;
	if (local->kind == NK_CNODE && local->op == OP_Receive) {
		/* a partial value (a data-parallel loss) stays partial across stages */
		const Node *p = sent_value(pl, local, rank);
		if (p && p->lay && !(p->op == OP_Receive && p->kind == NK_CNODE))
			return lower_slice(ctx, p, global, rank, out);
	}
	if (!l || !(l->flags & LAY_LOCAL) || !l->nout || !l->out[0].ndev)
		return 0;
	if ((l->flags & LAY_OP) && (l->flags & LAY_REPLACED) && op_table[local->op].family == FAM_GATHER)
		return 2;
	/* an LpNorm over a split axis: each rank's norm of its block, which
	 * the comm pass completes (the completed value is what users read) */
	if ((l->flags & LAY_OP) && l->fwd == FC_ALLREDUCE_PNORM)
		return 2;
	Layout L;
	tlay_to_layout(&l->out[0], &L);
	int64_t pos = rank % pl->per_stage, ndev = 1;
	for (int i = 0; i < L.ndev; i++)
		ndev *= L.dev[i];
	if (ndev != pl->per_stage || L.rank > MAX_RANK)
		return -1;
	out->rank = L.rank;
	layout_slice_shape(&L, out->shape);
	layout_slice_offset(&L, pos, out->offset);
	if (l->opt_rep > 1 && L.rank >= 1) {
		/* optimizer sharding: chunk idx % rep of the replicas' block */
		int64_t *rep = xmalloc((size_t)ndev * sizeof *rep);
		int nrep = layout_replica_group(&L, pos, rep), idx = 0;
		for (int i = 0; i < nrep; i++)
			if (rep[i] == pos)
				idx = i;
		free(rep);
		out->shape[0] /= l->opt_rep;
		out->offset[0] += (int64_t)(idx % l->opt_rep) * out->shape[0];
	}
	uint32_t mask = 0, dp = lower_local_mean_dims(local);
	if ((l->flags & LAY_OP) &&
	    (l->fwd == FC_ALLREDUCE || l->fwd == FC_ALLREDUCE_MEAN || l->fwd == FC_REDUCESCATTER))
		mask = l->fwd_mask;
	const Node *src = mask || dp ? NULL : mean_source(local, 0);
	if (src) /* loss + c and the like: the mean over the loss's group */
		partial_group(src->lay, lower_local_mean_dims(src), pos, SIM_MEAN, out);
	else if (mask || dp)
		partial_group(l, mask | dp, pos, dp ? SIM_MEAN : combine_of(l), out);
	return 1;
}

static int reference_passes(const PassManagerOptions *pm, PassManagerOptions *v)
{
	memset(v, 0, sizeof *v);
	for (int i = 0; i < pm->npasses; i++)
		if (strcmp(pm->passes[i]->name, "verify") == 0 || strcmp(pm->passes[i]->name, "micro") == 0 ||
		    strcmp(pm->passes[i]->name, "unroll") == 0)
			v->passes[v->npasses++] = pm->passes[i];
	return v->npasses;
}

static void report_error(const SimRun *r, const char *what)
{
	Loc loc;
	const char *msg = sim_error_detail(r, &loc);
	if (loc.line)
		diag_error_at(loc, "simulate: %s%s", what, msg);
	else
		diag_error("simulate: %s%s", what, msg);
}

static double mb(int64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static void print_size(FILE *f, int64_t bytes)
{
	double kb = (double)bytes / 1024.0;
	fprintf(f, "%.1f %s", kb < 1024 ? kb : kb / 1024, kb < 1024 ? "KB" : "MB");
}

/* what simulating module m holds: its graph, tensors and run state */
static int64_t held_bytes(Module *m)
{
	return (int64_t)ir_module_bytes(m) + sim_estimate_bytes(&m, 1) + sim_estimate_state_bytes(&m, 1);
}

/* What the simulation holds, against --simulate-max-mb. */
typedef struct Budget {
	double limit;    /* MB; <= 0: none */
	int n;           /* ranks */
	int64_t ref;     /* the single device's graph, tensors and state, and the comparison's scratch */
	int64_t per;     /* one rank's (the one lowered first), for the ranks not lowered yet */
	int64_t held;    /* the ranks lowered so far */
	int64_t modules; /* of which their graphs */
} Budget;

/* the ranks lowered so far plus `todo` more like the first: refuse when it is too much */
static int over_budget(const Budget *b, int todo)
{
	int64_t ranks = b->held + (int64_t)todo * b->per;
	if (b->limit <= 0 || mb(b->ref + ranks) <= b->limit)
		return 0;
	diag_error("simulate: simulating %d %s needs about %.1f MB (%.1f MB for the single device, %.1f MB for the "
	           "graphs, tensors and state of the ranks), more than the %.0f MB allowed (--simulate-max-mb)",
	           b->n, b->n == 1 ? "rank" : "ranks", mb(b->ref + ranks), mb(b->ref), mb(ranks), b->limit);
	return 1;
}

static void count_rank(Budget *b, Module *r)
{
	b->held += held_bytes(r);
	b->modules += (int64_t)ir_module_bytes(r);
}

/* The lowered graph of every rank; ranks[keep] = m (already lowered).
 * Stops (1) when the ranks would not fit in the budget: first with all of
 * them projected from m, before anything else is lowered, then after each
 * rank with the ranks lowered so far and the rest projected. */
static int lower_ranks(Module **ranks, Module *m, int keep, const char *buf, size_t len, const Options *o,
                       const PassManagerOptions *pm, Budget *b)
{
	Options ro = *o;
	PassManagerOptions rpm = *pm;
	/* what the first lowering printed (warnings, --print-after, --time-passes) is not repeated */
	rpm.print_after = NULL;
	rpm.print_after_all = 0;
	rpm.time_passes = 0;
	ro.time_passes = 0;
	ro.explain = NULL;
	ro.strategy_out = NULL;
	int done = 0;
	b->per = held_bytes(m);
	if (keep >= 0) {
		count_rank(b, m);
		done = 1;
	}
	if (over_budget(b, o->device_num - done))
		return 1;
	int rc = 0;
	for (int r = 0; r < o->device_num && rc == 0; r++) {
		if (r == keep) {
			ranks[r] = m;
			continue;
		}
		ro.rank = r;
		diag_set_quiet(1);
		ranks[r] = ir_parse(m->filename, buf, len, o->fragment);
		if (!ranks[r] || pm_run(ranks[r], &ro, &rpm) != 0 || diag_errors())
			rc = 1;
		diag_set_quiet(o->quiet);
		if (rc == 0) {
			count_rank(b, ranks[r]);
			rc = over_budget(b, o->device_num - ++done);
		}
	}
	return rc;
}

/* whether m is a training step: the training passes built it (a rank of a
 * later pipeline stage may hold no weight to update), or it updates weights
 * (training-step.md §3) */
static int is_step(Module *m)
{
	if (m->train)
		return 1;
	Graph *g = ir_entry(m);
	for (uint32_t i = 0; g && i < g->nodes.n; i++)
		if (sim_grad_operand(g->nodes.a[i]) >= 0)
			return 1;
	return 0;
}

/* The single-device reference of a training step: the same pipeline at
 * one device (TRAIN-CONTRACT.md), so that its backward and optimizer are
 * built by the same passes; what only makes sense for N devices (stages,
 * a plan for N devices, the given strategies) is left out. */
static int reference_step(Module *ref, const Options *o, const PassManagerOptions *pm)
{
	Options go = *o;
	PassManagerOptions rpm = *pm;
	go.device_num = 1;
	go.rank = 0;
	go.pipeline_stages = 1;
	go.auto_pipeline = 0;
	go.stage_rules = NULL;
	go.nstage_rules = 0;
	go.semi_auto = 0;
	go.data_parallel = 0;
	go.interfered = 0;
	go.strategy_in = NULL;
	go.strategy_out = NULL;
	go.explain = NULL;
	go.time_passes = 0;
	rpm.print_after = NULL;
	rpm.print_after_all = 0;
	rpm.time_passes = 0;
	return pm_run(ref, &go, &rpm);
}

/* Test-only switches that break the gradient communication of the ranks
 * (not of the reference), to see --simulate catch it: SIM_FAULT_* */
static unsigned test_faults(void)
{
	static const struct {
		const char *env;
		unsigned bit;
	} t[] = {{"SAPPC_TEST_DROP_GRAD_MEAN", SIM_FAULT_DROP_GRAD_MEAN},
	         {"SAPPC_TEST_BREAK_RS_BPROP", SIM_FAULT_RS_BPROP},
	         {"SAPPC_TEST_DROP_MICRO_GRAD", SIM_FAULT_DROP_MICRO},
	         {"SAPPC_TEST_BAD_SR_TAG", SIM_FAULT_BAD_SR_TAG},
	         {"SAPPC_TEST_BREAK_RECOMPUTE", SIM_FAULT_RECOMPUTE}};
	unsigned f = 0;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		const char *v = getenv(t[i].env);
		if (v && *v && strcmp(v, "0") != 0)
			f |= t[i].bit;
	}
	return f;
}

/* The optimizer's hyper-parameters, which the dump names but does not
 * give a value: the options' (training-step.md §3.1; a negative option
 * means MindSpore's default for the optimizer, as passes/train/ reads it:
 * learning rate 0.01, momentum 0.9 for Momentum and 0 for SGD). */
static int hyper_value(void *ctx, const Node *p, double *v)
{
	const Options *o = ctx;
	const char *nm = sym_str(p->name);
	if (strcmp(nm, "learning_rate") == 0)
		*v = o->learning_rate >= 0 ? o->learning_rate : 0.01;
	else if (strcmp(nm, "momentum") == 0)
		*v = o->momentum >= 0 ? o->momentum : o->optimizer == OPTIM_SGD ? 0.0 : 0.9;
	else
		return 0;
	return 1;
}

/* --gradients-mean: a rank's gradient of weight W is the single device's
 * divided by R, the number of W's replicas on its stage (the device
 * dimensions W's layout does not use; GRAD-SEMANTICS, man page TRAINING
 * STEP).  R is read from W's layout on the first rank that holds W. */
static double mean_scale(void *ctx, const Node *w)
{
	const Plan *pl = ctx;
	for (int r = 0; r < pl->nranks; r++) {
		Graph *g = ir_entry(pl->ranks[r]);
		for (uint32_t i = 0; g && i < g->params.n; i++) {
			const Node *p = g->params.a[i];
			const NodeLayout *l = p->lay;
			if (p->name != w->name || !l || !(l->flags & LAY_LOCAL) || !l->nout || !l->out[0].ndev)
				continue;
			Layout L;
			tlay_to_layout(&l->out[0], &L);
			int64_t *rep = xmalloc((size_t)pl->per_stage * sizeof *rep);
			int k = layout_replica_group(&L, r % pl->per_stage, rep);
			free(rep);
			return k > 0 ? 1.0 / k : 1;
		}
	}
	return 1;
}

/* the central differences' step and tolerance (gradcheck.c) */
#define GRADCHECK_STEP 1e-3
#define GRADCHECK_TOL 2e-2

/* the step's checks after the operator comparison: gradients, the
 * parameters after the step; 0 ok, 1 a mismatch (reported, unless quiet
 * or *retry), -1 hook error.  may_retry: the reference run had values at a
 * switch point; *retry is then set when the mismatch looks like one moved:
 * some gradient differs, and at most an eighth of the gradients' elements
 * and of the written parameters' do (a wrong plan corrupts whole blocks:
 * a missing reduction, a wrong slice, a forgotten scale), and no weight
 * goes without its update. */
static int check_step(const SimRun *G, const SimRun *R, Plan *plan, FILE *out, int quiet_first, int may_retry,
                      int *retry)
{
	SimStepReport st;
	int rc = sim_compare_step(G, R, lower_slice, plan, SIM_RTOL, &st);
	sim_print_step_report(out, &st);
	*retry = may_retry && rc > 0 && st.grads.bad > 0 && !st.grads.missing &&
	         st.grads.bad_elems * 8 <= st.grads.elems && st.after.bad_elems * 8 <= st.after.elems;
	if (rc <= 0 || quiet_first || *retry)
		return rc;
	const SimStepCheck *ck = st.grads.bad ? &st.grads : &st.after;
	const Node *at = ck->first.global;
	const char *what = st.grads.bad ? "the gradient of" : "the value after the step of";
	if (at->loc.line)
		diag_error_at(at->loc,
		              "simulate: rank %d: %s parameter %s (%%%d %s) is not the single-device one; see the "
		              "report on standard output",
		              ck->first.rank, what, sym_str(ck->first_param->name), at->local, sym_str(at->prim));
	else
		diag_error("simulate: rank %d: %s parameter %s (%%%d %s) is not the single-device one; see the report "
		           "on standard output",
		           ck->first.rank, what, sym_str(ck->first_param->name), at->local, sym_str(at->prim));
	return 1;
}

/* the single-device gradients against central differences of its loss */
static int check_fd(Module *ref, const SimRun *G, const SimOptions *so, FILE *out)
{
	/* each of its runs repeats the forward of the whole step: only on small steps */
	int64_t bytes = sim_estimate_bytes(&ref, 1);
	if (so->gradcheck_mb <= 0) {
		fprintf(out, "simulate: central differences: not run (--simulate-gradcheck-mb=0)\n");
		return 0;
	}
	if (mb(bytes) > so->gradcheck_mb) {
		fprintf(out,
		        "simulate: central differences: not run, the single-device step has %.1f MB of tensors "
		        "(--simulate-gradcheck-mb=%.0f)\n",
		        mb(bytes), so->gradcheck_mb);
		return 0;
	}
	SimGradCheck gc;
	int rc = sim_check_gradients(ref, G, so, GRADCHECK_STEP, GRADCHECK_TOL, &gc);
	if (rc < 0) {
		fprintf(out, "simulate: central differences: not run: %s\n", gc.skipped);
		return 0;
	}
	sim_print_gradcheck(out, &gc);
	if (rc == 0)
		return 0;
	const Node *at = gc.first_node;
	if (at->loc.line)
		diag_error_at(at->loc,
		              "simulate: the single-device gradient of parameter %s (%%%d %s) is not the derivative of "
		              "the loss; see the report on standard output",
		              sym_str(gc.first_param->name), at->local, sym_str(at->prim));
	else
		diag_error("simulate: the single-device gradient of parameter %s (%%%d %s) is not the derivative of "
		           "the loss; see the report on standard output",
		           sym_str(gc.first_param->name), at->local, sym_str(at->prim));
	return 1;
}

/* every tensor whole: two single-device runs */
static int whole(void *ctx, const Node *local, const Node *global, int rank, SimSlice *out)
{
	(void)ctx, (void)local, (void)global, (void)rank, (void)out;
	return 0;
}

static double loss_value(const SimRun *r)
{
	const SimValue *v = sim_result(r, 0);
	while (v && v->kind == SV_TUPLE && v->n)
		v = v->elems[0];
	return v && v->kind == SV_TENSOR && v->t && v->t->numel == 1 ? v->t->data[0] : NAN;
}

/* ------------------------------------------- why micro-batches differ */

typedef struct MicroCopy {
	char *full; /* the operator's full name (copies keep it) */
	Sym prim;
	int micro; /* -1: shared by every micro-batch */
	const Node *n;
} MicroCopy;

static int copy_cmp(const void *a, const void *b)
{
	const MicroCopy *x = a, *y = b;
	int c = strcmp(x->full, y->full);
	if (c)
		return c;
	if (x->prim != y->prim)
		return x->prim < y->prim ? -1 : 1;
	return (x->micro > y->micro) - (x->micro < y->micro);
}

/* the copy of micro-batch k (or the shared one), NULL when there is none */
static const Node *find_copy(const MicroCopy *c, uint32_t n, const char *full, Sym prim, int k)
{
	MicroCopy key = {(char *)full, prim, k, NULL};
	const MicroCopy *f = bsearch(&key, c, n, sizeof *c, copy_cmp);
	if (!f) {
		key.micro = -1;
		f = bsearch(&key, c, n, sizeof *c, copy_cmp);
	}
	return f ? f->n : NULL;
}

static int close_to(double e, double g)
{
	return fabs(g - e) <= SIM_RTOL * fmax(1.0, fabs(e));
}

static int float_cmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* 0 when the K micro-batch copies' values together are the full batch's
 * value f, element for element up to order (blocks of the batch's rows,
 * in any arrangement: a Concat of two of them along the batch reorders
 * rows), else 1 */
static int rows_of(const SimTensor *f, const SimTensor *const *m, int K)
{
	int64_t n = 0;
	for (int k = 0; k < K; k++)
		n += m[k]->numel;
	if (n != f->numel)
		return 1;
	float *a = xmalloc((size_t)(n ? n : 1) * sizeof *a), *b = xmalloc((size_t)(n ? n : 1) * sizeof *b);
	memcpy(a, f->data, (size_t)n * sizeof *a);
	for (int k = 0, at = 0; k < K; at += (int)m[k]->numel, k++)
		memcpy(b + at, m[k]->data, (size_t)m[k]->numel * sizeof *b);
	qsort(a, (size_t)n, sizeof *a, float_cmp);
	qsort(b, (size_t)n, sizeof *b, float_cmp);
	int bad = 0;
	for (int64_t e = 0; e < n && !bad; e++)
		bad = !close_to(a[e], b[e]);
	free(a);
	free(b);
	return bad;
}

/* When the step over K micro-batches is not the full batch's: the first
 * forward operator of the full batch whose value the micro-batches' copies
 * do not give back: together (their rows, in any order), or, for a value
 * shaped alike in both (a loss, a statistic of the batch), as their mean
 * (what the step's 1/K makes of them).  Printed on out; nothing when every value agrees. */
static void explain_micro(Module *full, const SimRun *F, Module *ref, const SimRun *M, int K, FILE *out)
{
	Graph *fg = ir_entry(full), *mg = ir_entry(ref);
	if (!fg || !mg)
		return;
	MicroCopy *c = xmalloc((mg->nodes.n + 1) * sizeof *c);
	uint32_t nc = 0;
	char buf[1024];
	for (uint32_t i = 0; i < mg->nodes.n; i++) {
		const Node *n = mg->nodes.a[i];
		if (n->kind != NK_CNODE || ir_node_phase(n) != IR_PHASE_FWD)
			continue;
		const char *f = ir_node_fullname_r(n, buf, sizeof buf);
		if (*f)
			c[nc++] = (MicroCopy){xstrdup(f), n->prim, sim_micro_of(n), n};
	}
	qsort(c, nc, sizeof *c, copy_cmp);
	const Node *bad = NULL;
	int how = 0; /* 1 rows, 2 a sum over the batch, 3 neither mean nor sum */
	for (uint32_t i = 0; i < fg->nodes.n && !bad; i++) {
		const Node *n = fg->nodes.a[i];
		const SimTensor *tf = n->kind == NK_CNODE && ir_node_phase(n) == IR_PHASE_FWD ? sim_tensor(F, 0, n) : NULL;
		const char *f = tf ? ir_node_fullname_r(n, buf, sizeof buf) : "";
		if (!*f || tf->numel > (int64_t)1 << 24)
			continue;
		const SimTensor *tm[64];
		int k, same = 1;
		for (k = 0; k < K && k < 64; k++) {
			const Node *m = find_copy(c, nc, f, n->prim, k);
			if (!m || !(tm[k] = sim_tensor(M, 0, m)))
				break;
			same &= sim_same_shape(tm[k], tf->ndim, tf->shape);
		}
		if (k < K)
			continue; /* not in every micro-batch: nothing to compare */
		if (!same) {
			if (rows_of(tf, tm, K))
				bad = n, how = 1;
			continue;
		}
		int mean = 1, sum = 1;
		for (int64_t e = 0; e < tf->numel; e++) {
			double a = 0;
			for (k = 0; k < K; k++)
				a += tm[k]->data[e];
			mean &= close_to(tf->data[e], a / K);
			sum &= close_to(tf->data[e], a);
		}
		if (!mean)
			bad = n, how = sum ? 2 : 3;
	}
	for (uint32_t i = 0; i < nc; i++)
		free(c[i].full);
	free(c);
	if (!bad) {
		fprintf(out, "simulate: micro-batches: every forward value of the full batch is its micro-batches' rows, "
		             "or their mean\n");
		return;
	}
	static const char *const why[] = {
	    "", "its micro-batches' values together are not the full batch's: it mixes the rows of a batch",
	    "it sums over the batch's rows, so the micro-batches' mean (the step's 1/K) is 1/K of the full batch's: "
	    "a mean over the batch keeps the step",
	    "it combines the batch's rows into a value the micro-batches' mean does not give back"};
	fprintf(out, "simulate: micro-batches: the first forward value that differs: %%%d %s [%s]: %s\n", bad->local,
	        sym_str(bad->prim), ir_node_fullname_r(bad, buf, sizeof buf), why[how]);
}

/* The ranks agree with the micro-batched single-device step (the same
 * pipeline at one device, micro pass included); that step must in turn be
 * the full batch's: the summed loss over K is the full batch's loss, the
 * gradients (the micro-batches' sum times 1/K) and the parameters after the
 * step are the full batch's.  Both runs here take no --gradients-mean
 * scale, so that they update alike.  0 ok, 1 not (reported). */
static int check_micro(Module *ref, const SimRun *G, const char *buf, size_t len, const Options *o,
                       const PassManagerOptions *pm, const SimOptions *so, int step, FILE *out)
{
	int K = ref->micro, rc = 1;
	/* an operator that mixes the rows of a batch computes something else
	 * on a micro-batch: a training BatchNorm normalises each micro-batch
	 * with its own statistics (so does MindSpore) */
	Graph *rg = ir_entry(ref);
	for (uint32_t i = 0; rg && i < rg->nodes.n; i++) {
		const Node *n = rg->nodes.a[i];
		if (n->kind == NK_CNODE && op_table[n->op].family == FAM_BATCHNORM && ir_node_flag(n, 5, "is_training", NULL)) {
			fprintf(out,
			        "simulate: micro-batches: not compared with the full batch: %s %%%d normalises each of the %d "
			        "micro-batches with its own statistics\n",
			        sym_str(n->prim), n->local, K);
			return 0;
		}
	}
	Options fo = *o;
	fo.micro_batch_num = 1;
	fo.device_num = 1;
	fo.rank = 0;
	fo.pipeline_stages = 1;
	fo.auto_pipeline = 0;
	PassManagerOptions vpm;
	diag_set_quiet(1);
	Module *full = ir_parse(ref->filename, buf, len, o->fragment);
	if (full && (step ? reference_step(full, &fo, pm) != 0 : reference_passes(pm, &vpm) && pm_run(full, &fo, &vpm) != 0))
		full = (ir_module_free(full), NULL);
	diag_set_quiet(o->quiet);
	if (!full || diag_errors()) {
		if (full)
			ir_module_free(full);
		return 1;
	}
	SimOptions fs = *so;
	fs.grad_scale = NULL;
	fs.grad_scale_ctx = NULL;
	SimRun *F = sim_run(full, &fs), *M = NULL;
	if (sim_error(F)) {
		report_error(F, "single device, full batch: ");
		goto done;
	}
	if (G->o.grad_scale) {
		M = sim_run(ref, &fs);
		if (sim_error(M)) {
			report_error(M, "single device, micro-batches: ");
			goto done;
		}
	}
	const SimRun *Mr = M ? M : G;
	double lm = loss_value(Mr), lf = loss_value(F);
	int loss_ok = !isnan(lm) && !isnan(lf) && fabs(lm / K - lf) <= 1e-4 * fmax(1.0, fabs(lf));
	fprintf(out, "simulate: micro-batches: the %d micro-batch losses add up to %g, / %d = %g; the full batch's loss is %g%s\n",
	        K, lm, K, lm / K, lf, loss_ok ? "" : " (differs)");
	int srep = 0;
	if (step) {
		SimStepReport st;
		srep = sim_compare_step(F, Mr, whole, NULL, 1e-4, &st);
		fprintf(out, "simulate: micro-batches against the full batch, on one device:\n");
		sim_print_step_report(out, &st);
	}
	if (!loss_ok || srep != 0) {
		explain_micro(full, F, ref, Mr, K, out);
		diag_error("simulate: the step over %d micro-batches is not the full batch's step (%s); see the report on "
		           "standard output",
		           K, !loss_ok ? "the loss" : "the gradients or the parameters after the step");
		goto done;
	}
	rc = 0;
done:
	sim_free(F);
	sim_free(M);
	ir_module_free(full);
	return rc;
}

int sim_check_plan(Module *m, const char *buf, size_t len, const Options *o, const PassManagerOptions *pm,
                   const SimOptions *so, FILE *out)
{
	int n = o->device_num, rc = 1, step = is_step(m);
	Module **ranks = xcalloc((size_t)n, sizeof *ranks);
	Module *ref = NULL;
	SimRun *G = NULL, *R = NULL;
	double limit = so->max_mb;

	/* the reference: the global graph as written, or of a training step
	 * the step the pipeline builds at one device */
	diag_set_quiet(1);
	ref = ir_parse(m->filename, buf, len, o->fragment);
	PassManagerOptions vpm;
	Options go = *o;
	go.device_num = 1;
	go.rank = 0;
	go.pipeline_stages = 1;
	go.auto_pipeline = 0;
	if (ref && (step ? reference_step(ref, o, pm) != 0 : reference_passes(pm, &vpm) && pm_run(ref, &go, &vpm) != 0))
		ref = (ir_module_free(ref), NULL);
	diag_set_quiet(o->quiet);
	if (!ref || diag_errors())
		goto out;
	/* one device has no partial values to combine: no scratch */
	Budget b = {limit, n, held_bytes(ref) + (n > 1 ? sim_estimate_scratch_bytes(ref) : 0), 0, 0, 0};
	if (limit > 0 && mb(b.ref) > limit) {
		diag_error(
		    "simulate: the single-device graph alone needs about %.1f MB (its graph, tensors and state), "
		    "more than the %.0f MB allowed (--simulate-max-mb)",
		    mb(b.ref), limit);
		goto out;
	}
	if (lower_ranks(ranks, m, o->rank < n ? o->rank : -1, buf, len, o, pm, &b) != 0)
		goto out;

	Plan plan = {n / sapp_plan_stages(m, o), ranks, n};
	SimOptions go2 = *so;
	go2.global = NULL;
	go2.slice = NULL;
	go2.init = hyper_value;
	go2.init_ctx = (void *)o;
	if (o->gradients_mean) { /* the ranks update with gradient / R: so does the reference */
		go2.grad_scale = mean_scale;
		go2.grad_scale_ctx = &plan;
	}
	SimOptions ro = *so;
	if (limit > 0) /* the ranks' tensors get what the graphs and run states leave */
		ro.max_mb = limit - mb(b.ref + b.modules + sim_estimate_state_bytes(ranks, n));
	ro.global = ref;
	ro.slice = lower_slice;
	ro.slice_ctx = &plan;
	ro.faults = test_faults();
	ro.init = hyper_value;
	ro.init_ctx = (void *)o;
	/* Where the single-device run has a value at a switch point of a
	 * piecewise operator to rounding (a MaxPool window's two largest
	 * values, a ReLU input at 0), the ranks may take the other branch: the
	 * gradient goes to the other maximum, or is cut, and a weight's
	 * gradient differs by a whole term although the plan is right
	 * (cnn.ir with randstrat 4 11003; sapp_mlp.ir with randstrat 6 19058).
	 * A step whose gradients alone differ after such a run, in few
	 * elements (check_step), is checked once more on the next seed's
	 * inputs: a wrong plan is wrong there too. */
	uint32_t comm = 0; /* the ranks' communication operators, for the summary */
	for (int r = 0; r < n; r++) {
		Graph *g = ir_entry(ranks[r]);
		for (uint32_t i = 0; g && i < g->nodes.n; i++)
			comm += sim_is_comm(g->nodes.a[i]);
	}
	for (int attempt = 0;; attempt++) {
		go2.seed = ro.seed = so->seed + (uint64_t)attempt;
		G = sim_run(ref, &go2);
		if (sim_error(G)) {
			report_error(G, "single device: ");
			goto out;
		}
		R = sim_run_ranks(ranks, n, &ro);
		if (sim_error(R)) {
			report_error(R, "");
			goto out;
		}

		SimReport rep;
		int cmp = sim_compare(G, R, lower_slice, &plan, SIM_RTOL, &rep);
		sim_print_summary(out, G, go2.seed);
		fprintf(out, "# simulate: %d %s, %u operators (%u communication), ", n, n == 1 ? "rank" : "ranks",
		        R->executed, comm);
		print_size(out, sim_bytes(R));
		fprintf(out, " of tensors\n");
		sim_print_report(out, &rep);
		if (cmp < 0) {
			diag_error("simulate: the layout of a rank's operator does not describe its tensor");
			goto out;
		}
		if (cmp > 0 && !rep.mismatched && !rep.outputs_bad) {
			const SimMismatch *mm = &rep.first_recomputed;
			diag_error_at(mm->global->loc,
			              "simulate: the recomputed duplicate of %s (%%%d) does not compute its origin's value on "
			              "rank %d; see the report on standard output",
			              sym_str(mm->global->prim), mm->global->local, mm->rank);
		} else if (cmp > 0) {
			const SimMismatch *mm = rep.mismatched ? &rep.first : &rep.first_output;
			diag_error_at(mm->global->loc,
			              "simulate: rank %d does not compute the single-device value of %s (%%%d)%s; see the "
			              "report on standard output",
			              mm->rank, sym_str(mm->global->prim), mm->global->local,
			              rep.mismatched ? "" : ", the returned value");
		}
		int again = 0;
		int scmp = step ? check_step(G, R, &plan, out, cmp > 0, attempt == 0 && cmp == 0 && G->near_switch > 0,
		                             &again)
		                : 0;
		if (again) {
			fprintf(out,
			        "simulate: seed %llu: only the gradients differ, in few elements, and %u value%s of the "
			        "single-device run lie within the tolerance of a switch point (two maxima or minima, a "
			        "sort order, the kink of ReLU, ReLU6 or Abs), where rounding can send the gradient the "
			        "other way: checking again with seed %llu\n",
			        (unsigned long long)go2.seed, G->near_switch, G->near_switch == 1 ? "" : "s",
			        (unsigned long long)go2.seed + 1);
			sim_free(G);
			sim_free(R);
			G = R = NULL;
			continue;
		}
		if (scmp < 0)
			diag_error("simulate: the layout of a rank's parameter does not describe its tensor");
		if (cmp > 0 || scmp != 0)
			goto out;
		break;
	}
	/* the ranks are done with: the central differences rerun the reference */
	sim_free(R);
	R = NULL;
	if (step && check_fd(ref, G, &go2, out) != 0)
		goto out;
	if (ref->micro > 1 && check_micro(ref, G, buf, len, o, pm, &go2, step, out) != 0)
		goto out;
	fprintf(out, "simulate: ok\n");
	rc = 0;
out:
	sim_free(G);
	sim_free(R);
	for (int r = 0; r < n; r++)
		if (ranks[r] && ranks[r] != m)
			ir_module_free(ranks[r]);
	free(ranks);
	if (ref)
		ir_module_free(ref);
	return rc;
}
