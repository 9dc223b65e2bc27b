/* sapp.c - the `sapp` pass: operator-level sharding strategies.
 *
 * Requires: a verified module (operands defined, shapes consistent).
 * Provides: on every operator that MindSpore gives an OperatorInfo, the
 *   strategy suffix `{in_strategy: ((4, 2), (1, 2))}` (and `out_strategy`
 *   where one is set), as a step_parallel_begin dump shows it; ir_node_si() says
 *   whether the strategy was pinned by the user, searched or propagated;
 *   with --strategy-out the same decisions as JSON.
 * Invalidates: nothing (no node is added or removed).
 *
 * --parallel-mode=auto (default; also `recursive_programming`): the SAPP
 * double recursive search of shared/spec/sapp-search.md:
 *   graph.c      operator list, rec graph, elimination           §1
 *   cost.c       cost model and redistribution penalty           §2
 *   partition.c  levels, visiting order, pipeline roll-back      §3, §3.6, §4.9
 *   memory.c     memory check, auto-pipeline suggestion          §3.7, §5
 *   propagate.c  strategies of eliminated operators, fix-ups     §4
 *   plan.c       --strategy-out / --strategy-in files
 * After the partition: the memory check on the whole partition, the
 * auto-pipeline estimate (which may lower the stage number), the roll-back,
 * then GenerateStrategyV3 for a training graph or V1 for inference
 * (--phase, decided by detect_training() when auto).  Module.sapp records
 * the phase, its reason, the stage number and the suggestion.
 * Device counts: one level per prime factor of N, largest first (§3.2
 * generalised); a power of two gives MindSpore's log2(N) halvings exactly.
 * User strategies (primitive attribute in_strategy/out_strategy) are pinned
 * with --interfered or MS_INTERFERED_SAPP=1 (§4.9), otherwise ignored.
 *
 * --parallel-mode=semi_auto: no search; an operator keeps the strategy it
 * arrives with (the dump's suffix, else its .shard() attribute) and the
 * others get MindSpore's default batch-parallel strategy.
 *
 * --strategy-in=FILE (either mode): no search and no user strategies; the
 * saved plan is applied as it is (plan.c says how entries are matched and
 * checked).
 */
#include <string.h>
#include <time.h>

#include "sapp.h"

int sapp_explaining(const Sapp *S, uint32_t op)
{
	return S->explain >= 0 && (uint32_t)S->explain == op;
}

const char *sapp_op_label(const SappOp *X, char *buf, size_t n)
{
	if (!X->n) {
		snprintf(buf, n, "_VirtualDataset (implicit)");
		return buf;
	}
	const char *full = ir_node_fullname(X->n);
	snprintf(buf, n, "%s%s%s%s (%%%d%s%s)", sym_str(X->n->prim), X->n->instance ? " '" : "",
		 X->n->instance ? sym_str(X->n->instance) : "", X->n->instance ? "'" : "", X->n->local,
		 *full ? ", " : "", full);
	return buf;
}

/* ------------------------------------------------------------ user strategies */

/* Is vals[0..k) a valid strategy for X's tensor input i (its output when
 * out != 0)?  The rank must match, every count must divide its dimension,
 * and the product must fit the devices of a stage.  If not, why says so:
 * "entry 2 has rank 1, but input 2 has rank 2". */
int sapp_check_stra(const Sapp *S, const SappOp *X, uint32_t i, const int64_t *vals, int k, int out, char *why,
		    size_t n)
{
	int r = out ? X->orank : X->rank[i];
	const int64_t *dims = out ? X->odims : X->dims[i];
	if (k != r) {
		snprintf(why, n, "entry %u has rank %d, but %s %u has rank %d", i + 1, k, out ? "output" : "input", i + 1,
			 r);
		return 0;
	}
	int64_t prod = 1;
	for (int d = 0; d < k; d++) {
		if (vals[d] < 1 || dims[d] % vals[d] != 0) {
			snprintf(why, n, "entry %u cuts dimension %d (size %lld) into %lld parts, which does not divide it",
				 i + 1, d, (long long)dims[d], (long long)vals[d]);
			return 0;
		}
		prod *= vals[d];
	}
	if (prod > S->stage_devices) {
		snprintf(why, n, "entry %u uses %lld devices, but there are only %lld%s", i + 1, (long long)prod,
			 (long long)S->stage_devices, S->stages > 1 ? " per pipeline stage" : "");
		return 0;
	}
	return 1;
}

/* Read a strategy value ((a, b), (c)) into X->s (or X->os when out != 0);
 * report what is wrong with it at the operator's line.  1 ok. */
static int read_user(const Sapp *S, SappOp *X, const Value *v, int out, const char *what)
{
	Node *n = X->n;
	const char *op = sym_str(n->prim);
	if (!v || v->kind != V_TUPLE) {
		diag_error_at(n->loc, "%s (%%%d): %s is not a tuple of tuples", op, n->local, what);
		return 0;
	}
	uint32_t want = out ? 1 : X->nin;
	if (v->n != want) {
		diag_error_at(n->loc, "%s (%%%d): %s has %u entries, but the operator has %u tensor %s", op, n->local,
			      what, v->n, want, out ? "output" : "inputs");
		return 0;
	}
	for (uint32_t i = 0; i < want; i++) {
		const Value *e = &v->u.elems[i];
		int64_t vals[MAX_RANK];
		int k = value_int_list(e, vals, MAX_RANK);
		if (e->kind == V_TUPLE && e->n == 0)
			k = 0;
		if (k < 0) {
			diag_error_at(n->loc, "%s (%%%d): %s entry %u is not a tuple of integers", op, n->local, what, i + 1);
			return 0;
		}
		char why[256];
		if (!sapp_check_stra(S, X, i, vals, k, out, why, sizeof why)) {
			diag_error_at(n->loc, "%s (%%%d): %s %s", op, n->local, what, why);
			return 0;
		}
		int64_t *dst = out ? X->os : X->s + X->off[i];
		memcpy(dst, vals, (size_t)k * sizeof *dst);
	}
	if (out)
		X->has_os = 1;
	else
		X->has_s = 1;
	return 1;
}

/* Pinned operator: its rec node holds the user's cuts (§4.9), which are
 * its cuts in the partition (sapp_part_init) */
static void pin_rec(Sapp *S, uint32_t x)
{
	SappOp *X = &S->ops[x];
	RecNode *R = &S->rec[x];
	R->pin = arena_alloc(S->arena, 6 * sizeof(Dim4));
	Dim4 *user = R->pin;
	for (uint32_t i = 0; i < 2; i++) {
		Dim4 c = {{1, 1, 1, 1}};
		if (i < X->nin && i < R->nargs && X->rank[i] <= 4)
			c = sapp_dim4(X->s + X->off[i], X->rank[i]);
		if ((X->type == REC_MatMul || X->type == REC_BatchMatMul) && (i == 0 ? X->ta : X->tb)) {
			int64_t t = c.d[2];
			c.d[2] = c.d[3];
			c.d[3] = t;
		}
		user[i] = c;
	}
	if (X->has_os && X->orank <= 4) {
		user[2] = sapp_dim4(X->os, X->orank);
	} else if (X->type == REC_MatMul) {
		user[2] = (Dim4){{1, 1, user[0].d[2], user[1].d[3]}};
	} else {
		user[2] = user[0];
	}
	for (int t = 0; t < 3; t++)
		R->pin[3 + t] = user[t];
}

/* ------------------------------------------------------------ setup */

static int factor_desc(int64_t n, int *out, int max)
{
	int k = 0;
	for (int64_t q = 2; q * q <= n; q++)
		while (n % q == 0 && k < max) {
			out[k++] = (int)q;
			n /= q;
		}
	if (n > 1 && k < max)
		out[k++] = (int)n;
	for (int i = 0; i < k / 2; i++) {
		int t = out[i];
		out[i] = out[k - 1 - i];
		out[k - 1 - i] = t;
	}
	return k;
}

static int64_t find_explain(const Sapp *S, const char *name)
{
	if (!name)
		return -1;
	for (uint32_t x = 0; x < S->nops; x++) {
		const Node *n = S->ops[x].n;
		if (!n) {
			if (strcmp(name, "_VirtualDataset") == 0)
				return x;
			continue;
		}
		char loc[32];
		snprintf(loc, sizeof loc, "%%%d", n->local);
		if ((n->instance && strcmp(sym_str(n->instance), name) == 0) || strcmp(ir_node_fullname(n), name) == 0 ||
		    strcmp(loc, name) == 0)
			return x;
	}
	return -2;
}

/* the largest prime of N must divide some dimension, or N devices cannot be used */
static int check_absorbable(const Sapp *S)
{
	if (S->nlevels == 0)
		return 1;
	int p = S->primes[0];
	for (int l = 1; l < S->nlevels; l++)
		if (S->primes[l] > p)
			p = S->primes[l];
	for (uint32_t x = 0; x < S->nops; x++) {
		const SappOp *X = &S->ops[x];
		for (uint32_t i = 0; i < X->nin; i++)
			for (int d = 0; d < X->rank[i]; d++)
				if (X->dims[i][d] % p == 0)
					return 1;
		for (int d = 0; d < X->orank; d++)
			if (X->odims[d] % p == 0)
				return 1;
	}
	diag_error("%lld devices cannot be used: no tensor dimension of any operator is divisible by %d",
		   (long long)S->devices, p);
	return 0;
}

/* ------------------------------------------------------------ train or predict */

/* MindSpore's primitives that update weights (nn.Optimizer subclasses) */
static const char *const optimizer_prims[] = {
	"ApplyMomentum", "Adam", "AdamWeightDecay", "FusedAdamWeightDecay", "FusedAdam", "FusedSparseAdam",
	"FusedSparseLazyAdam", "ApplyAdamWithAmsgrad", "Lamb", "LARSUpdate", "ApplyAdagrad", "ApplyAdagradV2",
	"ApplyRMSProp", "ApplyCenteredRMSProp", "SGD", "ApplyGradientDescent", "ApplyProximalGradientDescent",
	"ApplyFtrl", "SparseApplyFtrl",
};

static int ends_with(const char *s, const char *t)
{
	size_t a = strlen(s), b = strlen(t);
	return a >= b && strcmp(s + a - b, t) == 0;
}

/* what the name of primitive p says: 1 a gradient operator (*Grad,
 * *Backprop*), 2 an optimizer update, 0 neither */
static int prim_says(const char *p)
{
	if (ends_with(p, "Grad") || strstr(p, "Backprop"))
		return 1;
	for (size_t k = 0; k < sizeof optimizer_prims / sizeof optimizer_prims[0]; k++)
		if (strcmp(p, optimizer_prims[k]) == 0)
			return 2;
	return 0;
}

/* `training: 1` in a "subgraph attr:" or "# Attrs:" block: 1 train, 0
 * predict, -1 absent */
static int training_flag(const AttrList *l)
{
	const Value *v = ir_attr_get(l, "training");
	if (!v)
		return -1;
	const char *t = v->text ? sym_str(v->text) : "";
	int b;
	if (v->kind != V_RAW && value_truthy(v, &b))
		return b;
	return strcmp(t, "1") == 0 || strcmp(t, "true") == 0 || strcmp(t, "True") == 0;
}

/* --phase=auto.  MindSpore runs GenerateStrategyV3 when IsTraining(): some
 * graph carries the "training" flag, which the frontend sets for a network
 * that is differentiated.  A dump a user gives shows that as, in order:
 *   1. `training: 0|1` in a graph's "subgraph attr:" block (or "# Attrs:"):
 *      the flag itself decides;
 *   2. gradient operators: a full name under "Gradients/" (the backward
 *      graph's scope) or a primitive named *Grad / *Backprop*;
 *   3. an optimizer update (ApplyMomentum, Adam, AdamWeightDecay, ...);
 *   4. a loss: a softmax / sigmoid cross-entropy operator, or an entry
 *      graph that returns a scalar (the network ends in its loss, like a
 *      WithLossCell's forward graph);
 * and is inference (GenerateStrategyV1) otherwise.  1 train, 0 predict;
 * why says which rule decided. */
static int detect_training(const Module *m, const char **why)
{
	int f = training_flag(&m->attrs);
	for (uint32_t gi = 0; f < 0 && gi < m->graphs.n; gi++)
		f = training_flag(&m->graphs.a[gi]->attrs);
	if (f >= 0) {
		*why = f ? "the graph's training flag is 1" : "the graph's training flag is 0";
		return f;
	}
	const Node *loss = NULL;
	/* prim_says() once per distinct primitive, not once per node */
	enum { SAYS_SLOTS = 1024 };
	static struct {
		Sym prim;
		int says;
	} said[SAYS_SLOTS];
	memset(said, 0, sizeof said);
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			sweep_prefetch(g->nodes.a, i, g->nodes.n);
			const Node *n = g->nodes.a[i];
			if (n->dead || n->kind != NK_CNODE)
				continue;
			if (strncmp(ir_node_fullname(n), "Gradients/", 10) == 0) {
				*why = "the graph has gradient operators (scope Gradients/)";
				return 1;
			}
			if (n->callee_kind != CK_PRIM || !n->prim)
				continue;
			uint32_t h = (n->prim * 2654435761u) % SAYS_SLOTS, probes = 0;
			while (said[h].prim && said[h].prim != n->prim && probes++ < SAYS_SLOTS / 2)
				h = (h + 1) % SAYS_SLOTS;
			int says;
			if (said[h].prim == n->prim) {
				says = said[h].says;
			} else {
				says = prim_says(sym_str(n->prim));
				if (!said[h].prim)
					said[h].prim = n->prim, said[h].says = says;
			}
			if (says == 1) {
				*why = "the graph has gradient operators (*Grad, *Backprop*)";
				return 1;
			}
			if (says == 2) {
				*why = "the graph has an optimizer update";
				return 1;
			}
			int fam = op_table[n->op].family;
			if (!loss &&
			    (fam == FAM_LOSS || fam == FAM_SPARSELOSS || n->op == OP_SigmoidCrossEntropyWithLogits))
				loss = n;
		}
	}
	if (loss) {
		*why = "the graph has a loss operator";
		return 1;
	}
	const Graph *g = ir_entry((Module *)m);
	const Node *ret = g && g->nodes.n ? g->nodes.a[g->nodes.n - 1] : NULL;
	if (ret && ret->kind == NK_RETURN && ret->nargs && ret->args[0].kind == V_NODE) {
		const Node *r = ir_look_through(ret->args[0].u.node);
		if (r && r->out.is_tensor && r->out.shape.kind == SK_DIMS && r->out.shape.rank == 0) {
			*why = "the graph returns a scalar (a loss)";
			return 1;
		}
	}
	*why = "no training flag, gradient, optimizer or loss operator, and the graph does not return a scalar";
	return 0;
}

static void decide_phase(Sapp *S)
{
	const char *why;
	if (S->o->phase == PHASE_TRAIN) {
		S->predict = 0;
		why = "--phase=train";
	} else if (S->o->phase == PHASE_PREDICT) {
		S->predict = 1;
		why = "--phase=predict";
	} else {
		S->predict = !detect_training(S->m, &why);
	}
	S->m->sapp->predict = (uint8_t)S->predict;
	S->m->sapp->phase_why = why;
	if (S->explain >= 0)
		fprintf(stderr, "sapp: explain: phase: %s (GenerateStrategy%s): %s\n", S->predict ? "predict" : "train",
			S->predict ? "V1" : "V3", why);
}

static int log2_exact(int64_t n)
{
	int k = 0;
	while (n > 1 && n % 2 == 0) {
		n /= 2;
		k++;
	}
	return n == 1 ? k : -1;
}

/* ------------------------------------------------------------ output */

/* Strategies repeat: every layer of a deep network has the same ones.
 * Each distinct strategy value is built once and shared by the nodes that
 * have it (nothing writes into a strategy value after this pass; a pass
 * that changes an attribute value clones it first).  Keys are the integers of the value: kind
 * (0 in, 1 out), entry count, then per entry its rank and counts. */
typedef struct StraSlot {
	uint64_t h;
	uint32_t off, len; /* key in StraTab.key */
	Value v;
} StraSlot;

typedef struct StraTab {
	Module *m;
	Sym in_key, out_key;
	const SappText *levels; /* Sapp.levels, by operator; NULL: not recorded */
	const SappOp *ops;
	StraSlot *slot;
	uint32_t cap, used;
	Vec(int64_t) key; /* the keys of the slots, then scratch for the next one */
	KeyMap sides;     /* (strategy values, source, levels) -> the first node given them */
} StraTab;

static uint64_t key_hash(const int64_t *k, uint32_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ULL;
	for (uint32_t i = 0; i < n; i++)
		h = (h ^ (uint64_t)k[i]) * 0x100000001B3ULL;
	return h ^ (h >> 29);
}

static Value stra_build(Arena *a, const int64_t *k)
{
	uint32_t n = (uint32_t)k[1];
	Value v = {0};
	v.kind = V_TUPLE;
	v.n = n;
	v.u.elems = n ? arena_alloc(a, n * sizeof(Value)) : NULL;
	k += 2;
	for (uint32_t i = 0; i < n; i++) {
		int r = (int)*k++;
		v.u.elems[i] = *value_tuple_ints(a, k, r, NT_BARE);
		k += r;
	}
	return v;
}

static void tab_grow(StraTab *t)
{
	StraSlot *old = t->slot;
	uint32_t oc = t->cap;
	t->cap = oc ? 2 * oc : 64;
	t->slot = xcalloc(t->cap, sizeof *t->slot);
	for (uint32_t i = 0; i < oc; i++)
		if (old[i].len) {
			uint32_t j = (uint32_t)old[i].h & (t->cap - 1);
			while (t->slot[j].len)
				j = (j + 1) & (t->cap - 1);
			t->slot[j] = old[i];
		}
	free(old);
}

/* the shared value of the key at t->key.a[base..t->key.n) */
static Value tab_value(StraTab *t, uint32_t base)
{
	const int64_t *k = t->key.a + base;
	uint32_t len = t->key.n - base;
	uint64_t h = key_hash(k, len);
	if ((t->used + 1) * 2 > t->cap)
		tab_grow(t);
	uint32_t j = (uint32_t)h & (t->cap - 1);
	for (; t->slot[j].len; j = (j + 1) & (t->cap - 1))
		if (t->slot[j].h == h && t->slot[j].len == len &&
		    memcmp(t->key.a + t->slot[j].off, k, len * sizeof *k) == 0) {
			t->key.n = base; /* drop the scratch copy */
			return t->slot[j].v;
		}
	StraSlot *sl = &t->slot[j];
	sl->h = h;
	sl->off = base;
	sl->len = len;
	sl->v = stra_build(t->m->arena, k);
	t->used++;
	return sl->v;
}

static Value stra_value(StraTab *t, const SappOp *X, int out)
{
	uint32_t base = t->key.n, n = out ? 1 : X->nin;
	uint32_t total = out ? X->orank : X->nin ? X->off[X->nin - 1] + X->rank[X->nin - 1] : 0;
	vec_grow(&t->key, 2 + n + total);
	int64_t *k = t->key.a + base;
	*k++ = out;
	*k++ = n;
	for (uint32_t i = 0; i < n; i++) {
		int r = out ? X->orank : X->rank[i];
		const int64_t *v = out ? X->os : X->s + X->off[i];
		*k++ = r;
		memcpy(k, v, (size_t)r * sizeof *k);
		k += r;
	}
	t->key.n = (uint32_t)(k - t->key.a);
	return tab_value(t, base);
}

/* the node's strategy attributes: in_strategy, then out_strategy if set */
static void write_node(StraTab *t, SappOp *X)
{
	Module *m = t->m;
	Node *n = X->n;
	uint32_t na = X->has_os ? 2 : 1;
	Value iv = stra_value(t, X, 0), ov = X->has_os ? stra_value(t, X, 1) : (Value){0};
	n->has_strat = 1;
	StratInfo si = {.source = X->loaded ? SRC_LOADED : X->source};
	if (t->levels && t->levels[X - t->ops].n) /* the level table is the operator's */
		si.levels = intern(t->levels[X - t->ops].s, t->levels[X - t->ops].n);
	/* A node without a NodeExt shares the side of the first node given the
	 * same values (the table's, so equal ones are identical) and record:
	 * sides are never written once set, and a layer's operators repeat
	 * their strategies (a side and a list per operator were 6.8 MB on a
	 * 4096-layer graph). */
	Node **first = NULL;
	if (!ir_node_x(n)) {
		int64_t key[6];
		memcpy(key, &iv, sizeof iv);
		memcpy(key + 2, &ov, sizeof ov);
		key[4] = (int64_t)na << 8 | si.source;
		key[5] = si.levels;
		int fresh;
		first = keymap_get(&t->sides, key, 6, &fresh);
		if (!fresh) {
			ir_node_share_strat(m, n, *first);
			return;
		}
	}
	Attr *a = arena_alloc(m->arena, na * sizeof *a);
	a[0].key = t->in_key;
	a[0].val = iv;
	if (X->has_os) {
		a[1].key = t->out_key;
		a[1].val = ov;
	}
	ir_node_set_strat_si(m, n, (AttrList){a, na}, &si);
	if (first)
		*first = n;
}

static void write_nodes(Sapp *S)
{
	StraTab t;
	memset(&t, 0, sizeof t);
	t.m = S->m;
	t.in_key = S->attr[SA_in_strategy];
	t.out_key = S->attr[SA_out_strategy];
	t.levels = S->levels;
	t.ops = S->ops;
	keymap_init(&t.sides, sizeof(Node *));
	for (uint32_t x = 0; x < S->nops; x++) {
		if (x + 8 < S->nops && S->ops[x + 8].n) { /* the node's fields this writes */
			sapp_prefetch(&S->ops[x + 8].n->side);
		}
		if (S->ops[x].n && S->ops[x].has_s)
			write_node(&t, &S->ops[x]);
	}
	free(t.slot);
	vec_free(&t.key);
	keymap_free(&t.sides);
}

/* CPU time of the process: the phase figures do not depend on the load */
static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ modes */

static int semi_auto(Sapp *S)
{
	int bad = 0;
	for (uint32_t x = 0; x < S->nops; x++) {
		SappOp *X = &S->ops[x];
		if (!X->n)
			continue;
		const Value *in = sapp_attr(S, ir_node_strat(X->n), SA_in_strategy);
		const Value *out = sapp_attr(S, ir_node_strat(X->n), SA_out_strategy);
		if (!in) {
			in = sapp_attr(S, &X->n->pattrs, SA_in_strategy);
			if (!out)
				out = sapp_attr(S, &X->n->pattrs, SA_out_strategy);
		}
		if (S->o->data_parallel) /* the reference plan of --report */
			in = out = NULL;
		if (in) {
			if (!read_user(S, X, in, 0, "in_strategy"))
				bad = 1;
			X->source = SRC_PINNED;
		} else {
			sapp_default_batch(S, X);
			X->source = SRC_DEFAULT;
		}
		if (out && !read_user(S, X, out, 1, "out_strategy"))
			bad = 1;
	}
	return bad;
}

static int user_strategies(Sapp *S)
{
	uint32_t ignored = 0;
	int bad = 0;
	for (uint32_t x = 0; x < S->nops; x++) {
		SappOp *X = &S->ops[x];
		if (!X->user)
			continue;
		const Value *in = sapp_attr(S, &X->n->pattrs, SA_in_strategy);
		const Value *out = sapp_attr(S, &X->n->pattrs, SA_out_strategy);
		if (!S->o->interfered) {
			ignored++;
			continue;
		}
		int ok = 1;
		for (uint32_t i = 0; i < X->nin && ok; i++)
			if (X->rank[i] > 4) {
				diag_error_at(X->n->loc, "%s (%%%d): SAPP keeps user strategies of rank 4 or less only (input %u has rank %d)",
					      sym_str(X->n->prim), X->n->local, i + 1, X->rank[i]);
				ok = 0;
			}
		if (ok && in)
			ok = read_user(S, X, in, 0, "in_strategy");
		if (ok && out)
			ok = read_user(S, X, out, 1, "out_strategy");
		if (!ok) {
			bad = 1;
			continue;
		}
		if (!in) /* only an output strategy: the inputs stay whole */
			X->has_s = 1;
		X->pinned = 1;
	}
	if (ignored)
		diag_warning("%u operator%s carr%s a user strategy (in_strategy/out_strategy), ignored by the SAPP search; "
			     "use --interfered or MS_INTERFERED_SAPP=1 to keep %s",
			     ignored, ignored == 1 ? "" : "s", ignored == 1 ? "ies" : "y", ignored == 1 ? "it" : "them");
	return bad;
}

int pass_sapp(Module *m, const Options *o)
{
	Sapp S;
	memset(&S, 0, sizeof S);
	S.m = m;
	S.o = o;
	S.conf = sapp_default_conf;
	S.conf.mem_coef = o->mem_coef;
	S.conf.replicate_option = !o->fully_use_devices;
	S.arena = arena_new();
	S.devices = o->device_num > 0 ? o->device_num : 1;
	S.stages = o->pipeline_stages > 1 ? o->pipeline_stages : 1;
	if (S.devices % S.stages != 0) {
		diag_error("%lld devices cannot be split into %lld pipeline stages", (long long)S.devices, (long long)S.stages);
		sapp_free(&S);
		return 1;
	}
	S.stage_devices = S.devices / S.stages;
	m->sapp = arena_alloc(m->arena, sizeof *m->sapp);
	m->sapp->stages = (int32_t)S.stages;
	int rc = 0;
	double t[6] = {now(), 0, 0, 0, 0, 0};
	sapp_build(&S);
	t[1] = now();
	S.explain = find_explain(&S, o->explain);
	if (o->record_levels)
		S.levels = xcalloc(S.nops + 1, sizeof *S.levels);
	if (S.explain == -2) {
		diag_error("--explain=%s: no operator has this instance name, full name or %%k number", o->explain);
		rc = 1;
		goto done;
	}
	int ms_file = 0;
	if (o->strategy_in) {
		rc = sapp_load_plan(&S, o->strategy_in, &ms_file);
		if (rc)
			goto done;
	}
	if (o->semi_auto || (o->strategy_in && !ms_file)) {
		/* no search, but the training step (passes/train/) still asks
		 * the phase: decided as the search decides it */
		const char *why = "--phase=train";
		int train = o->phase == PHASE_TRAIN || (o->phase == PHASE_AUTO && detect_training(m, &why));
		m->sapp->predict = (uint8_t)!train;
		m->sapp->phase_why = o->phase == PHASE_PREDICT ? "--phase=predict" : why;
	}
	if (o->strategy_in && !ms_file) {
		/* sappc's own plan: every operator's strategy is in it */
	} else if (o->semi_auto) {
		if (semi_auto(&S)) {
			rc = 1;
			goto done;
		}
	} else {
		int ns = factor_desc(S.stage_devices, S.primes, 64);
		int nt = factor_desc(S.stages, S.primes + ns, 64 - ns);
		S.nlevels = ns + nt;
		S.rollback = nt;
		S.mbs = 1;
		if (S.stages > 1) {
			int64_t batch = 1;
			if (S.vd >= 0 && S.ops[S.vd].nin && S.ops[S.vd].rank[0])
				batch = S.ops[S.vd].dims[0][0];
			int64_t k = o->micro_batch_num > 0 ? o->micro_batch_num : 1;
			S.mbs = batch / k > 0 ? batch / k : 1;
		}
		S.weight_order = S.devices > S.conf.weight_order_devices && S.mbs < S.conf.weight_order_mbs;
		if (!check_absorbable(&S) || user_strategies(&S)) {
			rc = 1;
			goto done;
		}
		sapp_rec_build(&S);
		for (uint32_t x = 0; x < S.nops; x++)
			if (S.ops[x].pinned)
				pin_rec(&S, x);
		m->sapp->searched = 1;
		decide_phase(&S);
		t[2] = now();
		sapp_partition(&S);
		sapp_memory_check(&S);
		int64_t st = sapp_auto_pipeline(&S, &m->sapp->suggestion);
		int back = S.rollback;
		if (st != S.stages) {
			/* a power of two dividing the configured count (memory.c): the
			 * last levels are the stage number's halvings */
			back = log2_exact(st);
			S.stages = st;
			S.stage_devices = S.devices / st;
			m->sapp->stages = (int32_t)st;
		}
		sapp_rollback(&S, back);
		t[3] = now();
		sapp_generate(&S);
	}
	if (ms_file)
		sapp_apply_ckpt(&S);
	t[4] = now();
	write_nodes(&S);
	if (o->strategy_out)
		rc = sapp_write_plan(&S, o->strategy_out);
	t[5] = now();
	if (o->time_passes && !o->semi_auto && !o->strategy_in)
		fprintf(stderr,
			"sapp: %u operators (%u kept, %u eliminated), %d level(s): operator list %.4fs, rec graph %.4fs, "
			"partition %.4fs, propagation %.4fs, output %.4fs (CPU)\n",
			S.nops, S.nkept, S.nelim, S.nlevels, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], t[5] - t[4]);
done:
	sapp_ckpt_free(&S);
	sapp_free(&S);
	return rc;
}

int sapp_plan_stages(const Module *m, const Options *o)
{
	if (m && m->sapp && m->sapp->stages > 0)
		return m->sapp->stages;
	return o->pipeline_stages > 1 ? o->pipeline_stages : 1;
}

