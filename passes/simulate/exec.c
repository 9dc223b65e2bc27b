/* exec.c - runs R ranks together, one Module per rank (rank i = ranks[i]).
 *
 * Each rank evaluates its entry graph's nodes in order until it reaches a
 * communication operator, where it stops; the ranks of such a round run on
 * several threads (see "rank rounds" below).  The scheduler then, on one
 * thread and in ascending rank order, so that every run is deterministic,
 * fires what can fire:
 *   - a collective (AllReduce, AllGather, ReduceScatter, AlltoAll) fires
 *     when every rank of its group waits at the matching op: the k-th
 *     collective of that group on each rank (SIM_MATCH_ORDER, what NCCL and
 *     HCCL require), or the one with the same instance name
 *     (SIM_MATCH_INSTANCE).  Group members must agree on the operator and
 *     on the input shapes;
 *   - Send is buffered: it posts its tensor under (src, dest, sr_tag) and
 *     goes on; Receive takes the oldest matching message, or waits.
 * A round in which no rank moves while some have not returned is a
 * deadlock; it is reported with where every rank waits.  Messages nobody
 * received are reported at the end.
 *
 * Groups come from group_rank_ids or rank_list (tuples, in group order),
 * else group_ranks ("0-1-2", "WORLD_GROUP"), else a group name equal to the
 * world group (parallel-lowering.md §3.3-3.4).  Group order is the order of
 * AllGather's concatenation and of ReduceScatter's and AlltoAll's blocks.
 */
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "simint.h"

static const char *world_name(const SimRun *r, const char *g)
{
	if (!g)
		return NULL;
	if (r->o.world_group ? strcmp(g, r->o.world_group) == 0
	                     : strcmp(g, "hccl_world_group") == 0 || strcmp(g, "nccl_world_group") == 0)
		return g;
	return NULL;
}

int sim_group_of(SimRun *r, RankState *s, Node *n, int64_t *ranks, int max)
{
	const Value *v = sim_attr(n, "group_rank_ids");
	const char *gr = sim_attr_str(n, "group_ranks"), *gname = sim_attr_str(n, "group");
	int k = -1;
	if (!v)
		v = sim_attr(n, "rank_list");
	if (v) {
		k = value_int_list(v, ranks, max);
		if (k < 0)
			return sim_errorf(r, s, n, "group_rank_ids/rank_list is not a tuple of at most %d ranks", max);
	} else if (gr && strcmp(gr, "WORLD_GROUP") != 0) {
		k = 0;
		for (const char *p = gr; *p;) {
			char *end;
			long x = strtol(p, &end, 10);
			if (end == p || k == max || (*end && *end != '-'))
				return sim_errorf(r, s, n, "cannot read group_ranks \"%s\"", gr);
			ranks[k++] = x;
			p = *end ? end + 1 : end;
		}
	} else if ((gr && strcmp(gr, "WORLD_GROUP") == 0) || world_name(r, gname)) {
		for (k = 0; k < r->nranks; k++)
			ranks[k] = k;
	} else {
		return sim_errorf(r, s, n,
		                  "cannot tell the ranks of group '%s': no group_rank_ids, rank_list or group_ranks",
		                  gname ? gname : "");
	}
	int self = 0;
	for (int i = 0; i < k; i++) {
		if (ranks[i] < 0 || ranks[i] >= r->nranks)
			return sim_errorf(r, s, n, "group rank %lld is not among the %d simulated ranks",
			                  (long long)ranks[i], r->nranks);
		for (int j = 0; j < i; j++)
			if (ranks[j] == ranks[i])
				return sim_errorf(r, s, n, "rank %lld appears twice in the group", (long long)ranks[i]);
		self |= ranks[i] == s->rank;
	}
	if (!self)
		return sim_errorf(r, s, n, "this rank is not in the operator's group");
	return k;
}

static Sym group_sym(const int64_t *ranks, int k)
{
	char buf[4096];
	size_t n = 0;
	for (int i = 0; i < k && n < sizeof buf - 24; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", i ? "-" : "", (long long)ranks[i]);
	return intern(buf, n);
}

static uint32_t *seq_slot(RankState *s, Sym g)
{
	for (uint32_t i = 0; i < s->seqs.n; i++)
		if (s->seqs.a[i].group == g)
			return &s->seqs.a[i].n;
	struct GroupSeq z = {g, 0};
	vec_push(&s->seqs, z);
	return &s->seqs.a[s->seqs.n - 1].n;
}

static int is_p2p(const Node *n)
{
	return n->op == OP_Send || n->op == OP_Receive;
}

static int64_t int_attr(const Node *n, const char *key, int64_t dflt, int *found)
{
	int64_t v;
	const Value *a = sim_attr(n, key);
	if (a && value_get_int(a, &v)) {
		if (found)
			*found = 1;
		return v;
	}
	if (found)
		*found = 0;
	return dflt;
}

/* a rank reaches a communication op: remember what it waits for */
static int arrive(SimRun *r, RankState *s, Node *n)
{
	s->wait = n;
	if (is_p2p(n)) {
		int found;
		int64_t peer = int_attr(n, n->op == OP_Send ? "dest_rank" : "src_rank", -1, &found);
		if (!found)
			return sim_errorf(r, s, n, "no %s attribute", n->op == OP_Send ? "dest_rank" : "src_rank");
		if (peer < 0 || peer >= r->nranks || peer == s->rank)
			return sim_errorf(r, s, n, "peer rank %lld is not another simulated rank", (long long)peer);
		return 0;
	}
	/* one buffer of the run for the group as read; each rank keeps only
	 * what its group needs (a buffer of R entries on each of R ranks is
	 * R^2 words: 32 GB at -n 65536) */
	s->wn = sim_group_of(r, s, n, r->group_buf, r->group_cap);
	if (s->wn < 0)
		return -1;
	if (s->wn > s->wcap) {
		s->wcap = s->wn;
		s->wranks = xrealloc(s->wranks, (size_t)s->wcap * sizeof *s->wranks);
	}
	memcpy(s->wranks, r->group_buf, (size_t)s->wn * sizeof *s->wranks);
	s->wgroup = group_sym(s->wranks, s->wn);
	s->wseq = *seq_slot(s, s->wgroup);
	return 0;
}

/* the communication op of t has its value: store it, move t on */
static int finish(SimRun *r, RankState *t, SimValue *v)
{
	Ctx c = {r, t, t->wait};
	if (!v || sim_check_declared(&c, v) < 0)
		return -1;
	t->vals[t->wait->id] = v;
	if (!is_p2p(t->wait))
		(*seq_slot(t, t->wgroup))++;
	if (r->o.trace)
		fprintf(r->o.trace, "rank %d: %%%d %s\n", t->rank, t->wait->local, sym_str(t->wait->prim));
	t->wait = NULL;
	t->pc++;
	r->executed++;
	return 0;
}

static int send(SimRun *r, RankState *s)
{
	Ctx c = {r, s, s->wait};
	SimValue *v = sim_arg(&c, 0);
	if (!v)
		return -1;
	int64_t tag = int_attr(s->wait, "sr_tag", 0, NULL);
	if ((r->o.faults & SIM_FAULT_BAD_SR_TAG) && sim_micro_of(s->wait) == 1)
		tag++; /* test fault: micro-batch 1's Sends carry the next tag */
	SimMsg msg = {s->rank, (int)int_attr(s->wait, "dest_rank", -1, NULL), tag, v, s->wait};
	vec_push(&r->mail, msg);
	return finish(r, s, v) < 0 ? -1 : 1;
}

static int receive(SimRun *r, RankState *s)
{
	Node *n = s->wait;
	int src = (int)int_attr(n, "src_rank", -1, NULL);
	int64_t tag = int_attr(n, "sr_tag", 0, NULL), shape[MAX_RANK];
	for (uint32_t i = 0; i < r->mail.n; i++) {
		SimMsg *m = &r->mail.a[i];
		if (m->src != src || m->dest != s->rank || m->tag != tag)
			continue;
		SimValue *v = m->v;
		memmove(m, m + 1, (r->mail.n - i - 1) * sizeof *m);
		r->mail.n--;
		const Value *sv = sim_attr(n, "shape");
		int k = sv ? value_int_list(sv, shape, MAX_RANK) : -1;
		if (k >= 0 && (v->kind != SV_TENSOR || !sim_same_shape(v->t, k, shape))) {
			char a[160], b[160];
			sim_fmt_shape(a, sizeof a, k, shape);
			if (v->kind == SV_TENSOR)
				sim_fmt_shape(b, sizeof b, v->t->ndim, v->t->shape);
			else
				snprintf(b, sizeof b, "a non-tensor");
			return sim_errorf(r, s, n, "expects shape %s but rank %d sent %s (sr_tag %lld)", a, src, b,
			                  (long long)tag);
		}
		return finish(r, s, v) < 0 ? -1 : 1;
	}
	return 0;
}

/* the members of s's collective, if all are there */
static int gather_members(SimRun *r, RankState *s, RankState **mem)
{
	for (int j = 0; j < s->wn; j++) {
		RankState *t = &r->rs[s->wranks[j]];
		if (!t->wait || is_p2p(t->wait) || t->wgroup != s->wgroup)
			return 0;
		if (r->o.match == SIM_MATCH_INSTANCE ? !sym_same(t->wait->instance, s->wait->instance) : t->wseq != s->wseq)
			return 0;
		mem[j] = t;
	}
	return 1;
}

static const char *ordinal(uint32_t k, char *buf, size_t n)
{
	uint32_t x = k + 1;
	const char *suf = x % 100 >= 11 && x % 100 <= 13 ? "th"
	                  : x % 10 == 1                  ? "st"
	                  : x % 10 == 2                  ? "nd"
	                  : x % 10 == 3                  ? "rd"
	                                                 : "th";
	snprintf(buf, n, "%u%s", x, suf);
	return buf;
}

static SimTensor *member_input(SimRun *r, RankState *t)
{
	Ctx c = {r, t, t->wait};
	return sim_arg_tensor(&c, 0);
}

/* element-wise reduction of the members' inputs in group order */
static SimTensor *reduce_inputs(SimRun *r, RankState *s, SimTensor **in, int k, const char *op)
{
	SimTensor *o = sim_tensor_new(r, in[0]->dtype, in[0]->ndim, in[0]->shape);
	if (!o)
		return NULL;
	int kind = strcmp(op, "sum") == 0    ? 's'
	           : strcmp(op, "max") == 0  ? 'M'
	           : strcmp(op, "min") == 0  ? 'm'
	           : strcmp(op, "prod") == 0 ? 'p'
	                                     : 0;
	if (!kind) {
		sim_errorf(r, s, s->wait, "reduce op \"%s\" is not simulated (sum, max, min, prod)", op);
		return NULL;
	}
	for (int64_t i = 0; i < o->numel; i++) {
		double acc = in[0]->data[i];
		for (int j = 1; j < k; j++) {
			double x = in[j]->data[i];
			acc = kind == 's'   ? acc + x
			      : kind == 'p' ? acc * x
			      : kind == 'M' ? (x > acc ? x : acc)
			                    : (x < acc ? x : acc);
		}
		o->data[i] = (float)acc;
	}
	return o;
}

static SimTensor *all_gather(SimRun *r, SimTensor **in, int k)
{
	int64_t d[MAX_RANK];
	memcpy(d, in[0]->shape, sizeof d);
	d[0] *= k;
	SimTensor *o = sim_tensor_new(r, in[0]->dtype, in[0]->ndim, d);
	if (!o)
		return NULL;
	for (int j = 0; j < k; j++)
		memcpy(o->data + j * in[0]->numel, in[j]->data, (size_t)in[0]->numel * sizeof(float));
	return o;
}

/* AlltoAll on the member at position p: chunk p (along split_dim) of every
 * sender, concatenated along concat_dim in group order */
static SimTensor *all_to_all(SimRun *r, SimTensor **in, int k, int p, int sd, int cd)
{
	int nd = in[0]->ndim;
	int64_t cs[MAX_RANK], os[MAX_RANK], st[MAX_RANK], idx[MAX_RANK];
	memcpy(cs, in[0]->shape, sizeof cs);
	cs[sd] /= k;
	memcpy(os, cs, sizeof os);
	os[cd] *= k;
	SimTensor *o = sim_tensor_new(r, in[0]->dtype, nd, os);
	if (!o)
		return NULL;
	sim_strides(nd, in[0]->shape, st);
	for (int64_t i = 0; i < o->numel; i++) {
		sim_unflatten(i, nd, os, idx);
		int q = (int)(idx[cd] / cs[cd]);
		idx[cd] %= cs[cd];
		idx[sd] += p * cs[sd];
		int64_t off = 0;
		for (int d = 0; d < nd; d++)
			off += idx[d] * st[d];
		o->data[i] = in[q]->data[off];
	}
	return o;
}

static int collective(SimRun *r, RankState *s)
{
	RankState **mem = xmalloc((size_t)s->wn * sizeof *mem);
	SimTensor **in = xmalloc((size_t)s->wn * sizeof *in);
	int rc = gather_members(r, s, mem), k = s->wn;
	Node *n = s->wait;
	char ord[32], a[160], b[160];
	if (rc <= 0)
		goto out;
	rc = -1;
	for (int j = 0; j < k; j++) {
		if (mem[j]->wait->op != n->op) {
			sim_errorf(r, s, n, "the %s collective of group %s is %s here but %s on rank %d",
			           ordinal(s->wseq, ord, sizeof ord), sym_str(s->wgroup), sym_str(n->prim),
			           sym_str(mem[j]->wait->prim), mem[j]->rank);
			goto out;
		}
		if (!(in[j] = member_input(r, mem[j])))
			goto out;
		if (!sim_same_shape(in[j], in[0]->ndim, in[0]->shape)) {
			sim_fmt_shape(a, sizeof a, in[0]->ndim, in[0]->shape);
			sim_fmt_shape(b, sizeof b, in[j]->ndim, in[j]->shape);
			sim_errorf(r, s, n, "rank %d contributes shape %s but rank %d contributes %s", mem[0]->rank, a,
			           mem[j]->rank, b);
			goto out;
		}
	}
	int found;
	int64_t rs = int_attr(n, "rank_size", k, &found);
	if (found && rs != k && n->op != OP_AllReduce) {
		sim_errorf(r, s, n, "rank_size %lld but the group has %d ranks", (long long)rs, k);
		goto out;
	}
	const char *op = sim_attr_str(n, "op");
	if (!op)
		op = "sum";
	SimTensor *res = NULL;
	switch (n->op) {
	case OP_AllReduce:
		res = reduce_inputs(r, s, in, k, op);
		break;
	case OP_AllGather:
		if (in[0]->ndim == 0) {
			sim_errorf(r, s, n, "cannot gather scalars along dimension 0");
			goto out;
		}
		res = all_gather(r, in, k);
		break;
	case OP_ReduceScatter:
		if (in[0]->ndim == 0 || in[0]->shape[0] % k) {
			sim_errorf(r, s, n, "dimension 0 does not split into %d blocks", k);
			goto out;
		}
		if ((r->o.faults & SIM_FAULT_RS_BPROP) && ir_node_phase(n) == IR_PHASE_BWD) {
			/* test-only: each rank keeps its own block, nothing is added */
			int64_t d[MAX_RANK];
			memcpy(d, in[0]->shape, sizeof d);
			d[0] /= k;
			for (int j = 0; j < k; j++)
				if (finish(r, mem[j],
				           sim_val_tensor(r, sim_tensor_view(r, in[j], in[j]->ndim, d,
				                                             j * (in[j]->numel / k)))) < 0)
					goto out;
			rc = 1;
			goto out;
		}
		res = reduce_inputs(r, s, in, k, op);
		break;
	case OP_AlltoAll: {
		int f1, f2, f3;
		int64_t cnt = int_attr(n, "split_count", k, &f1), sd = int_attr(n, "split_dim", 0, &f2);
		int64_t cd = int_attr(n, "concat_dim", 0, &f3);
		int nd = in[0]->ndim;
		sd += sd < 0 ? nd : 0;
		cd += cd < 0 ? nd : 0;
		if (!f1 || !f2 || !f3) {
			sim_errorf(r, s, n, "needs split_count, split_dim and concat_dim");
			goto out;
		}
		if (cnt != k || sd < 0 || sd >= nd || cd < 0 || cd >= nd || in[0]->shape[sd] % k) {
			sim_errorf(r, s, n,
			           "split_count %lld, split_dim %lld, concat_dim %lld do not fit a %d-rank group "
			           "and a rank-%d input",
			           (long long)cnt, (long long)sd, (long long)cd, k, nd);
			goto out;
		}
		for (int j = 0; j < k; j++)
			if (finish(r, mem[j], sim_val_tensor(r, all_to_all(r, in, k, j, (int)sd, (int)cd))) < 0)
				goto out;
		rc = 1;
		goto out;
	}
	default:
		sim_errorf(r, s, n, "communication operator %s is not simulated", sym_str(n->prim));
		goto out;
	}
	if (!res)
		goto out;
	SimValue *shared = sim_val_tensor(r, res);
	for (int j = 0; j < k; j++) {
		SimValue *v = shared;
		if (n->op == OP_ReduceScatter) {
			int64_t d[MAX_RANK];
			memcpy(d, res->shape, sizeof d);
			d[0] /= k;
			v = sim_val_tensor(r, sim_tensor_view(r, res, res->ndim, d, j * (res->numel / k)));
		}
		if (finish(r, mem[j], v) < 0)
			goto out;
	}
	rc = 1;
out:
	free(mem);
	free(in);
	return rc;
}

/* run s until it returns or reaches a communication op, where its pc
 * stays (the scheduler calls arrive(), in rank order): 0 ok, -1 error */
static int run_rank(SimRun *r, RankState *s)
{
	while (s->pc < s->g->nodes.n) {
		Node *n = s->g->nodes.a[s->pc];
		if (n->dead) {
			s->pc++;
			continue;
		}
		if (sim_is_comm(n))
			return 0;
		Ctx c = {r, s, n};
		if (sim_eval_node(&c) < 0)
			return -1;
		if (r->o.trace && n->kind == NK_CNODE) {
			const SimValue *v = s->vals[n->id];
			char sh[160] = "";
			if (v->kind == SV_TENSOR)
				sim_fmt_shape(sh, sizeof sh, v->t->ndim, v->t->shape);
			fprintf(r->o.trace, "rank %d: %%%d %s %s\n", s->rank, n->local, sym_str(n->prim), sh);
		}
		if (n->kind == NK_RETURN) {
			s->result = s->vals[n->id];
			s->done = 1;
			return 0;
		}
		r->executed++;
		s->pc++;
	}
	s->done = 1;
	return 0;
}

static void deadlock(SimRun *r)
{
	char buf[sizeof r->err - 64], ord[32];
	size_t k = 0;
	for (int i = 0; i < r->nranks && k < sizeof buf - 1; i++) {
		RankState *s = &r->rs[i];
		const Node *n = s->wait;
		if (s->done)
			k += (size_t)snprintf(buf + k, sizeof buf - k, "%srank %d has returned", i ? "; " : "", i);
		else if (n && n->op == OP_Receive)
			k += (size_t)snprintf(buf + k, sizeof buf - k,
			                      "%srank %d waits in Receive %%%d for rank %lld (sr_tag %lld)",
			                      i ? "; " : "", i, n->local, (long long)int_attr(n, "src_rank", -1, NULL),
			                      (long long)int_attr(n, "sr_tag", 0, NULL));
		else if (n)
			k += (size_t)snprintf(buf + k, sizeof buf - k,
			                      "%srank %d waits in %s %%%d%s%s%s, its %s collective of group %s",
			                      i ? "; " : "", i, sym_str(n->prim), n->local, n->instance ? " (" : "",
			                      n->instance ? sym_str(n->instance) : "", n->instance ? ")" : "",
			                      ordinal(s->wseq, ord, sizeof ord), sym_str(s->wgroup));
	}
	sim_errorf(r, NULL, NULL, "deadlock: %s", buf);
}

/* ------------------------------------------------------- rank rounds
 * The ranks' inputs are drawn in a first round; then a round runs every
 * rank that is neither waiting nor done up to its next communication op,
 * each against its sub-run.  The ranks of a round do not
 * see each other (only the executor, between rounds, moves values from
 * rank to rank), so they run on `threads` threads in any order and compute
 * the same values as one after the other.  What could depend on the order
 * is made not to: the first error is the lowest rank's (a rank after it
 * would not have run), and the storage limit is decided by
 * sim_budget_take() as if the ranks had run in ascending order. */
typedef struct Crew {
	SimRun *r;
	pthread_mutex_t mu;
	pthread_cond_t go, idle;
	pthread_t *th;
	int nth;
	int *todo, ntodo; /* the round's ranks, ascending: the caller's */
	int *q, nq, next; /* the crew's copy and the next to take: under mu */
	int busy;
	int inputs; /* the round draws the ranks' inputs instead of running them */
	void (*job)(void *, int); /* sim_for: job(arg, k) for each k instead */
	void *arg;
	unsigned round;
	int quit;
} Crew;

static void round_rank(SimRun *r, int k, int inputs)
{
	SimRun *sub = &r->sub[k];
	if (inputs)
		sim_make_inputs(sub, &r->rs[k]);
	else
		run_rank(sub, &r->rs[k]);
	if (r->limit > 0) {
		pthread_mutex_lock(&r->mu);
		sub->running = 0;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
	}
}

/* take the round's ranks one by one until none is left; c->mu held */
static void crew_work(Crew *c)
{
	c->busy++;
	while (c->next < c->nq) {
		int k = c->q[c->next++], inputs = c->inputs;
		pthread_mutex_unlock(&c->mu);
		if (c->job)
			c->job(c->arg, k);
		else
			round_rank(c->r, k, inputs);
		pthread_mutex_lock(&c->mu);
	}
	if (--c->busy == 0)
		pthread_cond_signal(&c->idle);
}

static void *crew_main(void *arg)
{
	Crew *c = arg;
	unsigned seen = 0;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->quit && c->round == seen)
			pthread_cond_wait(&c->go, &c->mu);
		if (c->quit)
			break;
		seen = c->round;
		crew_work(c);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* up to threads - 1 workers besides the caller for rounds of at most n
 * items (ranks of r, or sim_for's jobs); fewer if the system gives fewer
 * (the run is the same, only slower) */
static void crew_start(Crew *c, SimRun *r, int threads, int n)
{
	memset(c, 0, sizeof *c);
	c->r = r;
	c->todo = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *c->todo);
	c->q = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *c->q);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->go, NULL);
	pthread_cond_init(&c->idle, NULL);
	int want = threads < n ? threads - 1 : n - 1;
	if (want <= 0)
		return;
	c->th = xmalloc((size_t)want * sizeof *c->th);
	while (c->nth < want && pthread_create(&c->th[c->nth], NULL, crew_main, c) == 0)
		c->nth++;
}

static void crew_stop(Crew *c)
{
	pthread_mutex_lock(&c->mu);
	c->quit = 1;
	pthread_cond_broadcast(&c->go);
	pthread_mutex_unlock(&c->mu);
	for (int i = 0; i < c->nth; i++)
		pthread_join(c->th[i], NULL);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->go);
	pthread_cond_destroy(&c->idle);
	free(c->th);
	free(c->todo);
	free(c->q);
}

/* run (or draw the inputs of) the ranks of c->todo: on the crew when there is one and more than one
 * rank, else in order in the caller, stopping at the first error */
static void crew_round(Crew *c, int inputs)
{
	SimRun *r = c->r;
	if (r->limit > 0)
		for (int j = 0; j < c->ntodo; j++)
			r->sub[c->todo[j]].running = 1;
	if (!c->nth || c->ntodo < 2) {
		for (int j = 0; j < c->ntodo && !(j && r->sub[c->todo[j - 1]].failed); j++)
			round_rank(r, c->todo[j], inputs);
		return;
	}
	sim_gemm_serial(1);
	pthread_mutex_lock(&c->mu);
	memcpy(c->q, c->todo, (size_t)c->ntodo * sizeof *c->q);
	c->inputs = inputs;
	c->nq = c->ntodo;
	c->next = 0;
	c->round++;
	pthread_cond_broadcast(&c->go);
	crew_work(c);
	while (c->busy || c->next < c->nq)
		pthread_cond_wait(&c->idle, &c->mu);
	pthread_mutex_unlock(&c->mu);
	sim_gemm_serial(0);
}

/* job(arg, k) for k in [0, n), on up to `threads` threads (the caller's
 * among them) in any order: each job must write only what is its own */
void sim_for(int threads, int n, void (*job)(void *arg, int k), void *arg)
{
	if (threads < 2 || n < 2) {
		for (int k = 0; k < n; k++)
			job(arg, k);
		return;
	}
	Crew c;
	crew_start(&c, NULL, threads, n);
	c.job = job;
	c.arg = arg;
	pthread_mutex_lock(&c.mu);
	for (int k = 0; k < n; k++)
		c.q[k] = k;
	c.nq = n;
	c.next = 0;
	c.round++;
	pthread_cond_broadcast(&c.go);
	crew_work(&c);
	while (c.busy || c.next < c.nq)
		pthread_cond_wait(&c.idle, &c.mu);
	pthread_mutex_unlock(&c.mu);
	crew_stop(&c);
}

/* Under an address-space limit (ulimit -v, what bound.sh and the man page
 * suggest for --simulate-max-mb) one thread: every thread that multiplies
 * matrices through OpenBLAS gets its own work buffer (128 MB), and OpenBLAS
 * retries for ever when it cannot map one. */
int sim_default_threads(void)
{
	struct rlimit as;
	if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
		return 1;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 1 ? (n < 1024 ? (int)n : 1024) : 1;
}

int sim_budget_take(SimRun *r, int64_t b)
{
	SimRun *p = r->parent;
	if (r->limit <= 0) {
		r->bytes += b;
		return 1;
	}
	if (!p) {
		if (r->bytes + b > r->limit)
			return 0;
		r->bytes += b;
		return 1;
	}
	/* Rank k run after ranks 0..k-1 would see what the run held before
	 * the round, all that ranks 0..k-1 allocate in it and its own.  Within
	 * the limit with everything allocated so far: go on, and round_end()
	 * replays the round's asks in rank order to decide.  Else over it with
	 * what ranks 0..k-1 hold now: over it in rank order too.  Else wait
	 * until ranks 0..k-1 have finished the round, when their sum is final
	 * (so memory stays within the limit but for that last case). */
	int ok = 0, k = (int)(r - p->sub);
	vec_push(&r->asks, b);
	pthread_mutex_lock(&p->mu);
	if (p->bytes + p->round_bytes + b <= p->limit) {
		ok = 1;
	} else {
		for (;;) {
			int64_t before = p->bytes + r->bytes + b;
			int final = 1;
			for (int i = 0; i < k; i++) {
				before += p->sub[i].bytes;
				final &= !p->sub[i].running;
			}
			if (before > p->limit)
				break;
			if (final) {
				ok = 1;
				break;
			}
			pthread_cond_wait(&p->cv, &p->mu);
		}
	}
	if (ok) {
		r->bytes += b;
		p->round_bytes += b;
	}
	pthread_mutex_unlock(&p->mu);
	return ok;
}

/* the sub-runs of the ranks: copies of the run without its lists */
static void subs_new(SimRun *r)
{
	r->sub = xcalloc((size_t)r->nranks, sizeof *r->sub);
	for (int k = 0; k < r->nranks; k++) {
		SimRun *t = &r->sub[k];
		*t = *r;
		memset(&t->tensors, 0, sizeof t->tensors);
		memset(&t->buffers, 0, sizeof t->buffers);
		memset(&t->values, 0, sizeof t->values);
		memset(&t->mail, 0, sizeof t->mail);
		memset(&t->asks, 0, sizeof t->asks);
		t->group_buf = NULL;
		t->group_cap = 0;
		t->bytes = 0;
		t->executed = 0;
		t->near_switch = 0;
		t->parent = r;
		t->sub = NULL;
	}
}

/* A deferred Sym's text is interned the first time sym_str() asks for it
 * (ir/intern.c), which writes the interning table: form the text of every
 * name a rank's operators may read before the ranks run on threads. */
static void resolve_value(const Value *v)
{
	uint32_t ns = value_nslots(v); /* a CALL's name is its last slot */
	if (!ns)
		sym_str(v->text);
	sym_str(value_key(v));
	for (uint32_t i = 0; i < ns; i++)
		resolve_value(&v->u.elems[i]);
}

static void resolve_attrs(const AttrList *l)
{
	for (uint32_t i = 0; i < l->n; i++) {
		sym_str(l->a[i].key);
		resolve_value(&l->a[i].val);
	}
}

static void resolve_abs(const Abs *a)
{
	sym_str(a->tstr);
	sym_str(a->dtype);
	const AbsExt *x = abs_ext(a);
	if (x) {
		sym_str(x->ref_key);
		for (uint32_t i = 0; i < x->nextras; i++)
			sym_str(x->extras[i]);
	}
}

static void resolve_node(const Node *n)
{
	const NodeExt *x = ir_node_ext(n);
	sym_str(n->name);
	sym_str(n->prim);
	sym_str(n->instance);
	sym_str(n->scope);
	resolve_abs(&n->out);
	for (uint32_t i = 0; i < n->nin_types; i++)
		resolve_abs(&n->in_types[i]);
	for (uint32_t i = 0; i < n->nargs; i++)
		resolve_value(&n->args[i]);
	resolve_attrs(&n->pattrs);
	resolve_attrs(ir_node_strat(n));
	resolve_attrs(&x->cattrs);
	resolve_attrs(&x->primal);
	sym_str(x->fwd_prim);
}

static void resolve_module(const Module *m)
{
	for (uint32_t i = 0; m && i < m->graphs.n; i++) {
		const Graph *g = m->graphs.a[i];
		for (uint32_t j = 0; j < g->params.n; j++)
			resolve_node(g->params.a[j]);
		for (uint32_t j = 0; j < g->nodes.n; j++)
			resolve_node(g->nodes.a[j]);
	}
}

/* a round's outcome, in rank order: the first error, else each rank that
 * stopped at a communication op arrives there */
static int round_end(SimRun *r, const Crew *c, int inputs)
{
	int rc = 0;
	int64_t before = r->bytes; /* what the run held before the round */
	for (int j = 0; j < c->ntodo; j++) {
		SimRun *t = &r->sub[c->todo[j]];
		r->bytes += t->bytes;
		r->executed += t->executed;
		r->near_switch += t->near_switch;
		t->bytes = 0;
		t->executed = 0;
		t->near_switch = 0;
	}
	r->round_bytes = 0;
	int64_t held = before;
	for (int j = 0; j < c->ntodo && rc == 0; j++) {
		RankState *s = &r->rs[c->todo[j]];
		SimRun *t = &r->sub[c->todo[j]];
		/* its asks as they come after those of ranks 0..j-1 */
		for (uint32_t i = 0; i < t->asks.n && r->limit > 0 && rc == 0; i++)
			if ((held += t->asks.a[i]) > r->limit)
				rc = sim_budget_error(r);
		t->asks.n = 0;
		if (rc < 0)
			break;
		if (t->failed) {
			r->failed = 1;
			memcpy(r->err, t->err, sizeof r->err);
			r->msgoff = t->msgoff;
			r->errloc = t->errloc;
			rc = -1;
		} else if (!inputs && !s->done && arrive(r, s, s->g->nodes.a[s->pc]) < 0) {
			rc = -1;
		}
	}
	return rc;
}

static int schedule(SimRun *r, Crew *c)
{
	for (;;) {
		int moved = 0, done = 1;
		c->ntodo = 0;
		for (int i = 0; i < r->nranks; i++)
			if (!r->rs[i].done && !r->rs[i].wait)
				c->todo[c->ntodo++] = i;
		crew_round(c, 0);
		if (round_end(r, c, 0) < 0)
			return -1;
		moved = c->ntodo > 0;
		for (int i = 0; i < r->nranks; i++) {
			RankState *s = &r->rs[i];
			if (!s->wait)
				continue;
			int rc = s->wait->op == OP_Send      ? send(r, s)
			         : s->wait->op == OP_Receive ? receive(r, s)
			                                     : collective(r, s);
			if (rc < 0)
				return -1;
			moved |= rc;
		}
		for (int i = 0; i < r->nranks; i++)
			done &= r->rs[i].done;
		if (done)
			break;
		if (!moved) {
			deadlock(r);
			return -1;
		}
	}
	if (r->mail.n) {
		SimMsg *m = &r->mail.a[0];
		return sim_errorf(r, &r->rs[m->src], m->send, "the message to rank %d (sr_tag %lld) was never received",
		                  m->dest, (long long)m->tag);
	}
	return 0;
}

/* ------------------------------------------------------------ the run */
SimRun *sim_new(Module **ranks, int nranks, const SimOptions *o)
{
	SimRun *r = xcalloc(1, sizeof *r);
	if (o)
		r->o = *o;
	r->nranks = nranks > 0 ? nranks : 0;
	r->limit = r->o.max_mb > 0 ? (int64_t)(r->o.max_mb * 1024.0 * 1024.0) : 0;
	r->rs = xcalloc(r->nranks ? (size_t)r->nranks : 1, sizeof *r->rs);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	if (nranks <= 0) {
		sim_errorf(r, NULL, NULL, "nothing to simulate (no ranks)");
		return r;
	}
	for (int k = 0; k < nranks; k++) {
		RankState *s = &r->rs[k];
		s->m = ranks[k];
		s->rank = k;
		s->g = ranks[k] ? ir_entry(ranks[k]) : NULL;
		if (!s->g) {
			sim_errorf(r, s, NULL, "the module has no graph");
			return r;
		}
		s->nvals = ranks[k]->next_id;
		s->vals = xcalloc(s->nvals ? s->nvals : 1, sizeof *s->vals);
	}
	r->group_cap = nranks > 4096 ? nranks : 4096;
	r->group_buf = xcalloc((size_t)r->group_cap, sizeof *r->group_buf);
	return r;
}

int sim_set_input(SimRun *r, int rank, const char *param, const float *data, int64_t n)
{
	if (rank < 0 || rank >= r->nranks || n < 0)
		return -1;
	SimOverride ov = {rank, intern_cstr(param), xmalloc((size_t)(n ? n : 1) * sizeof(float)), n};
	memcpy(ov.data, data, (size_t)n * sizeof(float));
	vec_push(&r->overrides, ov);
	return 0;
}

int sim_exec(SimRun *r)
{
	if (r->failed)
		return -1;
	if (r->limit > 0) {
		Module **ms = xmalloc((size_t)r->nranks * sizeof *ms);
		for (int k = 0; k < r->nranks; k++)
			ms[k] = r->rs[k].m;
		int64_t est = sim_estimate_bytes(ms, r->nranks);
		free(ms);
		if (est > r->limit)
			return sim_errorf(
			    r, NULL, NULL,
			    "the simulation needs about %.1f MB of tensor storage%s, more than the %.0f MB "
			    "allowed (--simulate-max-mb)",
			    (double)est / (1024.0 * 1024.0), r->nranks > 1 ? " over all ranks" : "",
			    (double)r->limit / (1024.0 * 1024.0));
	}
	/* a trace is written as the ranks go: one thread keeps its order */
	r->threads = r->o.trace || r->nranks < 2 ? 1 : r->o.threads > 0 ? r->o.threads : sim_default_threads();
	if (r->threads > 1) {
		for (int k = 0; k < r->nranks; k++)
			resolve_module(r->rs[k].m);
		resolve_module(r->o.global);
	}
	subs_new(r);
	Crew c;
	crew_start(&c, r, r->threads, r->nranks);
	/* the inputs first, every rank's, as one round */
	c.ntodo = r->nranks;
	for (int k = 0; k < r->nranks; k++)
		c.todo[k] = k;
	crew_round(&c, 1);
	int rc = round_end(r, &c, 1);
	if (rc == 0)
		rc = schedule(r, &c);
	crew_stop(&c);
	return rc;
}

SimRun *sim_run(Module *m, const SimOptions *o)
{
	SimRun *r = sim_new(&m, 1, o);
	sim_exec(r);
	return r;
}

SimRun *sim_run_ranks(Module **ranks, int nranks, const SimOptions *o)
{
	SimRun *r = sim_new(ranks, nranks, o);
	sim_exec(r);
	return r;
}

/* the buffers, tensors and values r's allocation lists hold (not the lists) */
static void free_allocs(SimRun *r)
{
	for (uint32_t i = 0; i < r->buffers.n; i++)
		free(r->buffers.a[i]);
	for (uint32_t i = 0; i < r->tensors.n; i++)
		free(r->tensors.a[i]);
	for (uint32_t i = 0; i < r->values.n; i++) {
		free(r->values.a[i]->elems);
		free(r->values.a[i]);
	}
}

void sim_free(SimRun *r)
{
	if (!r)
		return;
	free_allocs(r);
	for (uint32_t i = 0; i < r->overrides.n; i++)
		free(r->overrides.a[i].data);
	for (int k = 0; k < r->nranks; k++) {
		free(r->rs[k].vals);
		free(r->rs[k].wranks);
		vec_free(&r->rs[k].seqs);
		vec_free(&r->rs[k].log);
		free(r->rs[k].last);
		free(r->rs[k].aux);
	}
	for (int k = 0; r->sub && k < r->nranks; k++) {
		SimRun *t = &r->sub[k];
		free_allocs(t);
		vec_free(&t->buffers);
		vec_free(&t->tensors);
		vec_free(&t->values);
		vec_free(&t->asks);
	}
	free(r->sub);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r->group_buf);
	vec_free(&r->buffers);
	vec_free(&r->tensors);
	vec_free(&r->values);
	vec_free(&r->overrides);
	vec_free(&r->mail);
	free(r->rs);
	free(r);
}

const char *sim_error(const SimRun *r)
{
	return r->failed ? r->err : NULL;
}

const char *sim_error_detail(const SimRun *r, Loc *loc)
{
	if (!r->failed)
		return NULL;
	*loc = r->errloc;
	return r->err + r->msgoff;
}

int sim_nranks(const SimRun *r)
{
	return r->nranks;
}

Module *sim_module(const SimRun *r, int rank)
{
	return rank >= 0 && rank < r->nranks ? r->rs[rank].m : NULL;
}

const SimValue *sim_value(const SimRun *r, int rank, const Node *n)
{
	if (rank < 0 || rank >= r->nranks || !n || n->id >= r->rs[rank].nvals)
		return NULL;
	return r->rs[rank].vals[n->id];
}

const SimTensor *sim_tensor(const SimRun *r, int rank, const Node *n)
{
	const SimValue *v = sim_value(r, rank, n);
	return v && v->kind == SV_TENSOR ? v->t : NULL;
}

const SimTensor *sim_initial_tensor(const SimRun *r, int rank, const Node *p)
{
	const SimValue *v = sim_value(r, rank, p);
	const RankState *s = v ? &r->rs[rank] : NULL;
	if (s && s->last && s->last[p->id]) {
		uint32_t k = s->last[p->id];
		while (s->log.a[k - 1].prev)
			k = s->log.a[k - 1].prev;
		v = s->log.a[k - 1].v;
	}
	return v && v->kind == SV_TENSOR ? v->t : NULL;
}

const SimValue *sim_result(const SimRun *r, int rank)
{
	return rank >= 0 && rank < r->nranks ? r->rs[rank].result : NULL;
}

int64_t sim_bytes(const SimRun *r)
{
	return r->bytes;
}
