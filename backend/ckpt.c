/* ckpt.c - MindSpore's strategy checkpoint and group checkpoint files
 * (shared/spec/training-step.md §7).
 *
 * What MindSpore writes, from mindspore-ai/mindspore
 * mindspore/ccsrc/frontend/parallel/parallel_postprocessor.cc
 * (CheckpointStrategy), .../strategy_checkpoint/strategy_checkpoint_info.cc
 * (to_protobuf, to_json, from_json) and parallel_strategy_checkpoint.cc
 * (Save, SaveGroupInfo):
 *   - the save runs after the pipeline split, so a rank's file holds the
 *     operators of its own stage: here, the module after the `pipeline` pass;
 *   - one strategy item per operator that has a strategy and reads a weight
 *     (through Load, Cast, Depend, AllGather and the mirror operators:
 *     step_parallel_utils.cc NodeParameterName, IsCohesiveNode), keyed
 *     "<primitive>_<first weight>"; its stage is the saving rank's stage
 *     (the strategies carry g_device_manager->stage_id()) and its value the
 *     input strategies.  A key met twice keeps the later operator (a map);
 *   - one layout item per weight those operators read: the weight's layout
 *     with the size-1 device dimensions removed (TensorLayout keeps the
 *     standardised device matrix), field 0, and the optimizer-shard pair
 *     (operator_info.cc CreateGroupForOptShard): when the weight is
 *     optimizer-sharded, the configured optimizer_weight_shard_size (-1 when
 *     not set) and the rank step of its replica group, else 0 and 0;
 *     param_split_shape and indices_offset are one empty entry each;
 *   - current_stage is the save counter, 1 after the first compile;
 *   - MindSpore keeps both maps in hash maps, so its order is arbitrary:
 *     this writer sorts by key, which is also the JSON form's order
 *     (nlohmann's objects are sorted), compact on one line.
 * sappc cannot tell trainable weights from the others (requires_grad is not
 * in the dump): every parameter with a default value counts as one.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "backend/node_strategy.pb-c.h"
#include "../passes/lower/lower.h"

int ckpt_format_named(const char *word)
{
	if (strcmp(word, "sappc") == 0)
		return CKPT_SAPPC;
	if (strcmp(word, "mindspore") == 0)
		return CKPT_MINDSPORE;
	if (strcmp(word, "mindspore-json") == 0)
		return CKPT_MINDSPORE_JSON;
	return -1;
}

static int ends_with(const char *s, const char *t)
{
	size_t a = strlen(s), b = strlen(t);
	return a >= b && strcmp(s + a - b, t) == 0;
}

CkptFormat ckpt_format_of_name(const char *path)
{
	return ends_with(path, ".ckpt") || ends_with(path, ".pb") ? CKPT_MINDSPORE : CKPT_SAPPC;
}

CkptFormat ckpt_format_of_text(const char *buf, size_t len)
{
	size_t i = 0;
	while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
		i++;
	if (i < len && buf[i] == '[')
		return CKPT_SAPPC; /* JSON, but no strategy file: the sappc reader says so */
	if (i == len || buf[i] != '{')
		return CKPT_MINDSPORE;
	/* a sappc plan has "operators"; MindSpore's JSON has parallel_strategy_item */
	static const char key[] = "\"parallel_strategy_item\"";
	for (size_t k = i; k + sizeof key - 1 <= len; k++)
		if (buf[k] == '"' && memcmp(buf + k, key, sizeof key - 1) == 0)
			return CKPT_MINDSPORE_JSON;
	return CKPT_SAPPC;
}

/* ------------------------------------------------------------ keys */

/* the primitives NodeParameterName looks through (IsCohesiveNode) */
static int cohesive(const Node *n)
{
	static const char *const names[] = {
	    "Load",
	    "Cast",
	    "Depend",
	    "AllGather",
	    "_MiniStepAllGather",
	    "_MirrorMicroStepOperator",
	    "_MicroStepAllGather",
	    "_MirrorOperator",
	    "_MirrorMiniStepOperator",
	};
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return 0;
	if (n->lay && (n->lay->flags & LAY_INSERTED))
		return 1; /* the lowering's own operators stand where MindSpore's do */
	const char *p = sym_str(n->prim);
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(p, names[i]) == 0)
			return 1;
	return 0;
}

/* the weights n reads, in input order, depth first through cohesive nodes */
static int weights_of(const Node *n, const Node **out, int max, int k, int depth)
{
	for (uint32_t i = 0; i < n->nargs && k < max; i++) {
		if (n->args[i].kind != V_NODE)
			continue;
		const Node *a = n->args[i].u.node;
		if (a->kind == NK_PARAM) {
			if (lower_is_weight(a))
				out[k++] = a;
		} else if (depth < 16 && cohesive(a)) {
			k = weights_of(a, out, max, k, depth + 1);
		}
	}
	return k;
}

int ckpt_key(const Node *n, char *buf, size_t len)
{
	const Node *w[1];
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || weights_of(n, w, 1, 0, 0) == 0)
		return 0;
	snprintf(buf, len, "%s_%s", sym_str(n->prim), sym_str(w[0]->name));
	return 1;
}

/* ------------------------------------------------------------ reader */

typedef struct Reader {
	const char *path;
	CkptPlan *p;
	int bad;
} Reader;

static void bad_file(Reader *R, const char *fmt, ...) PRINTF(2, 3);
static void bad_file(Reader *R, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	diag_error_at((Loc){0, 0}, "%s", msg);
	R->bad = 1;
}

static CkptItem *new_items(CkptPlan *p, size_t n)
{
	p->items = arena_alloc(p->arena, (n ? n : 1) * sizeof *p->items);
	return p->items;
}

/* an item's strategies from nstra lists of lens[i] values got by at(i, d) */
static void fill_item(CkptPlan *p, CkptItem *it, uint32_t nstra, const uint32_t *lens)
{
	it->nstra = nstra;
	it->off = arena_alloc(p->arena, (nstra + 1) * sizeof *it->off);
	it->len = arena_alloc(p->arena, (nstra + 1) * sizeof *it->len);
	uint32_t tot = 0;
	for (uint32_t i = 0; i < nstra; i++) {
		it->off[i] = tot;
		it->len[i] = lens[i];
		tot += lens[i];
	}
	it->s = arena_alloc(p->arena, (tot + 1) * sizeof *it->s);
}

/* a base-128 varint at b[*i] (n bytes in all) into *v; what is wrong, or NULL */
static const char *varint(const uint8_t *b, size_t n, size_t *i, uint64_t *v, const char *what)
{
	static char why[64];
	*v = 0;
	for (int sh = 0;; sh += 7) {
		if (*i == n || sh > 63) {
			snprintf(why, sizeof why,
			         *i == n ? "the file ends inside a %s" : "a %s is longer than 10 bytes", what);
			return why;
		}
		*v |= (uint64_t)(b[*i] & 0x7f) << sh;
		if (!(b[(*i)++] & 0x80))
			return NULL;
	}
}

/* Where a protobuf stops making sense, for the error message: walks the
 * wire format (tags, varints, lengths) of the top-level message. */
static const char *wire_check(const uint8_t *b, size_t n, size_t *at)
{
	size_t i = 0;
	while (i < n) {
		*at = i;
		uint64_t tag, l;
		const char *why = varint(b, n, &i, &tag, "field tag");
		if (why)
			return why;
		if ((tag >> 3) == 0)
			return "field number 0 is not valid";
		switch (tag & 7) {
		case 0:
		case 2:
			if ((why = varint(b, n, &i, &l, (tag & 7) ? "length" : "number")))
				return why;
			if ((tag & 7) == 2) {
				if (l > n - i)
					return "a field's length runs past the end of the file (truncated?)";
				i += (size_t)l;
			}
			break;
		case 1:
			if (n - i < 8)
				return "the file ends inside a 64-bit field";
			i += 8;
			break;
		case 5:
			if (n - i < 4)
				return "the file ends inside a 32-bit field";
			i += 4;
			break;
		default:
			return "a field has an unknown wire type (not a protobuf file?)";
		}
	}
	return NULL;
}

static void read_protobuf(Reader *R, const char *buf, size_t len)
{
	CkptPlan *p = R->p;
	Mindspore__Straspb__ParallelStrategyMap *map =
	    mindspore__straspb__parallel_strategy_map__unpack(NULL, len, (const uint8_t *)buf);
	if (!map) {
		size_t at = 0;
		const char *why = wire_check((const uint8_t *)buf, len, &at);
		if (len == 0)
			bad_file(R, "empty file: not a MindSpore strategy checkpoint (ParallelStrategyMap)");
		else if (why)
			bad_file(R, "not a MindSpore strategy checkpoint (protobuf ParallelStrategyMap): byte %zu: %s",
			         at, why);
		else
			bad_file(R, "not a MindSpore strategy checkpoint: the protobuf does not decode as a "
			            "ParallelStrategyMap (a required field is missing or has the wrong type)");
		return;
	}
	p->current_stage = map->current_stage;
	p->nlayouts = (uint32_t)map->n_parallel_layout_item;
	CkptItem *items = new_items(p, map->n_parallel_strategy_item);
	for (size_t k = 0; k < map->n_parallel_strategy_item; k++) {
		const Mindspore__Straspb__ParallelStrategyItem *e = map->parallel_strategy_item[k];
		const Mindspore__Straspb__ParallelStrategys *ss = e->parallel_strategys;
		CkptItem *it = &items[k];
		it->key = arena_strndup(p->arena, e->node_name, strlen(e->node_name));
		it->stage = ss->stage;
		uint32_t *lens = xmalloc((ss->n_parallel_strategy + 1) * sizeof *lens);
		for (size_t i = 0; i < ss->n_parallel_strategy; i++)
			lens[i] = (uint32_t)ss->parallel_strategy[i]->n_dim;
		fill_item(p, it, (uint32_t)ss->n_parallel_strategy, lens);
		free(lens);
		for (size_t i = 0; i < ss->n_parallel_strategy; i++)
			for (size_t d = 0; d < ss->parallel_strategy[i]->n_dim; d++)
				it->s[it->off[i] + d] = (int64_t)ss->parallel_strategy[i]->dim[d];
	}
	p->nitems = (uint32_t)map->n_parallel_strategy_item;
	mindspore__straspb__parallel_strategy_map__free_unpacked(map, NULL);
}

/* a JSON integer in [lo, hi] */
static int json_int_in(const json_t *v, long long lo, long long hi, long long *out)
{
	if (!json_is_integer(v))
		return 0;
	long long x = (long long)json_integer_value(v);
	if (x < lo || x > hi)
		return 0;
	*out = x;
	return 1;
}

/* a list of integers in [lo, hi] */
static int json_int_list(const json_t *v, long long lo, long long hi)
{
	if (!json_is_array(v))
		return 0;
	long long x;
	for (size_t i = 0; i < json_array_size(v); i++)
		if (!json_int_in(json_array_get(v, i), lo, hi, &x))
			return 0;
	return 1;
}

static void read_json(Reader *R, const char *buf, size_t len)
{
	CkptPlan *p = R->p;
	json_error_t err;
	json_t *root = json_loadb(buf, len, 0, &err);
	if (!root) {
		diag_error_at(
		    (Loc){(uint32_t)(err.line > 0 ? err.line : 0), (uint32_t)(err.column > 0 ? err.column : 0)}, "%s",
		    err.text);
		R->bad = 1;
		return;
	}
	/* from_json reads these with .at(): all are required */
	const json_t *cs = json_object_get(root, "current_stage"),
	             *si = json_object_get(root, "parallel_strategy_item"),
	             *li = json_object_get(root, "parallel_layout_item");
	long long x;
	if (!json_int_in(cs, 0, UINT32_MAX, &x))
		bad_file(R, "\"current_stage\" must be a non-negative integer");
	else
		p->current_stage = (uint32_t)x;
	if (!json_is_object(si))
		bad_file(R, "\"parallel_strategy_item\" must be an object {node_name: {stage, parallel_strategy}}");
	if (!json_is_object(li))
		bad_file(R, "\"parallel_layout_item\" must be an object {param_name: {dev_matrix, tensor_map, ...}}");
	if (R->bad)
		goto done;
	CkptItem *items = new_items(p, json_object_size(si));
	const char *key;
	json_t *v;
	uint32_t n = 0;
	json_object_foreach((json_t *)si, key, v)
	{
		const json_t *st = json_object_get(v, "stage"), *ps = json_object_get(v, "parallel_strategy");
		if (!json_is_object(v)) {
			bad_file(R, "parallel_strategy_item '%s' is not an object", key);
			continue;
		}
		if (!json_int_in(st, 0, UINT32_MAX, &x)) {
			bad_file(R, "parallel_strategy_item '%s': \"stage\" must be a non-negative integer", key);
			continue;
		}
		int ok = json_is_array(ps);
		for (size_t i = 0; ok && i < json_array_size(ps); i++)
			ok = json_int_list(json_array_get(ps, i), 0, UINT32_MAX);
		if (!ok) {
			bad_file(R,
			         "parallel_strategy_item '%s': \"parallel_strategy\" must be a list of lists of "
			         "non-negative integers",
			         key);
			continue;
		}
		CkptItem *it = &items[n++];
		it->key = arena_strndup(p->arena, key, strlen(key));
		it->stage = (uint32_t)x;
		size_t ns = json_array_size(ps);
		uint32_t *lens = xmalloc((ns + 1) * sizeof *lens);
		for (size_t i = 0; i < ns; i++)
			lens[i] = (uint32_t)json_array_size(json_array_get(ps, i));
		fill_item(p, it, (uint32_t)ns, lens);
		free(lens);
		for (size_t i = 0; i < ns; i++)
			for (size_t d = 0; d < it->len[i]; d++)
				it->s[it->off[i] + d] =
				    (int64_t)json_integer_value(json_array_get(json_array_get(ps, i), d));
	}
	p->nitems = n;
	json_object_foreach((json_t *)li, key, v)
	{
		static const char *const lists[] = {"dev_matrix", "tensor_map", "tensor_shape"};
		static const char *const ints[] = {"field", "opt_weight_shard_step", "opt_weight_shard_size"};
		if (!json_is_object(v)) {
			bad_file(R, "parallel_layout_item '%s' is not an object", key);
			continue;
		}
		for (int i = 0; i < 3; i++)
			if (!json_int_list(json_object_get(v, lists[i]), INT32_MIN, INT64_MAX))
				bad_file(R, "parallel_layout_item '%s': \"%s\" must be a list of integers", key,
				         lists[i]);
		for (int i = 0; i < 3; i++)
			if (!json_int_in(json_object_get(v, ints[i]), INT32_MIN, INT32_MAX, &x))
				bad_file(R, "parallel_layout_item '%s': \"%s\" must be an integer", key, ints[i]);
		const json_t *a = json_object_get(v, "param_split_shape"), *b = json_object_get(v, "indices_offset");
		if ((a || b) && (!json_int_list(a, INT64_MIN, INT64_MAX) || !json_int_list(b, INT64_MIN, INT64_MAX) ||
		                 json_array_size(a) != json_array_size(b)))
			bad_file(R,
			         "parallel_layout_item '%s': \"param_split_shape\" and \"indices_offset\" must be "
			         "lists of integers of one length",
			         key);
		p->nlayouts++;
	}
done:
	json_decref(root);
}

int ckpt_read(const char *path, const char *buf, size_t len, CkptPlan *p)
{
	memset(p, 0, sizeof *p);
	p->arena = arena_new();
	Reader R = {path, p, 0};
	if (ckpt_format_of_text(buf, len) == CKPT_MINDSPORE_JSON)
		read_json(&R, buf, len);
	else
		read_protobuf(&R, buf, len);
	return R.bad;
}

void ckpt_plan_free(CkptPlan *p)
{
	if (p->arena)
		arena_free(p->arena);
	memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------ writer */

/* one operator's strategy item, and the weights whose layouts it brings */
typedef struct Stra {
	const char *key;
	const Node *n;
	uint32_t order; /* module order: the later of two with one key wins */
} Stra;

typedef struct Lay {
	const char *name;
	const Node *p;
} Lay;

static int cmp_stra(const void *a, const void *b)
{
	const Stra *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int cmp_lay(const void *a, const void *b)
{
	const Lay *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->p->id > y->p->id) - (x->p->id < y->p->id);
}

/* a weight's layout as MindSpore saves it: standardised device matrix and
 * map, global shape, the optimizer-shard pair */
typedef struct SavedLayout {
	Layout l;
	int32_t step, size;
} SavedLayout;

static void saved_layout(const LowerCtx *c, const Options *o, const Node *p, SavedLayout *s)
{
	memset(s, 0, sizeof *s);
	if (p->lay && p->lay->nout && p->lay->out[0].ndev) {
		Layout full;
		tlay_to_layout(&p->lay->out[0], &full);
		layout_standardize(&full, &s->l);
		if (c && p->lay->opt_rep > 1) {
			/* operator_info.cc CreateGroupForOptShard: the configured
			 * size (-1 when unset) and the step over the replica group */
			int64_t *g = xmalloc(LOWER_MAX_GROUP * sizeof *g);
			int R = lower_replica_group(c, &p->lay->out[0], g);
			int K = o->optimizer_weight_shard_size;
			s->size = K > 0 ? (K < R ? K : R) : -1;
			s->step = R > 1 ? (int32_t)((g[R - 1] - g[0]) / (R - 1)) : 0;
			free(g);
		}
		return;
	}
	/* one device (or no lowering): whole on a one-device matrix */
	s->l.ndev = 1;
	s->l.dev[0] = 1;
	s->l.rank = p->out.shape.kind == SK_DIMS ? (int)p->out.shape.rank : 0;
	if (s->l.rank > LAYOUT_MAX_DIM)
		s->l.rank = LAYOUT_MAX_DIM;
	for (int i = 0; i < s->l.rank; i++) {
		s->l.map[i] = -1;
		s->l.shape[i] = p->out.shape.dims[i];
	}
}

typedef struct Plan {
	Stra *stra;
	uint32_t nstra;
	Lay *lay;
	uint32_t nlay;
	uint32_t stage;
} Plan;

/* the operators and weights of the module that go in the file, sorted */
static void collect(Module *m, const Options *o, Plan *P)
{
	Vec(Stra) st = {0};
	Vec(Lay) ly = {0};
	char key[1024];
	const Node *w[64];
	uint32_t order = 0;
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			const Node *n = g->nodes.a[i];
			if (n->dead || !n->has_strat || (n->lay && (n->lay->flags & LAY_INSERTED)) ||
			    !ckpt_key(n, key, sizeof key))
				continue;
			Stra s = {sym_str(intern_cstr(key)), n, order++};
			vec_push(&st, s);
			int k = weights_of(n, w, 64, 0, 0);
			for (int j = 0; j < k; j++) {
				Lay l = {sym_str(w[j]->name), w[j]};
				vec_push(&ly, l);
			}
		}
	}
	qsort(st.a, st.n, sizeof *st.a, cmp_stra);
	uint32_t n = 0;
	for (uint32_t i = 0; i < st.n; i++) { /* the last of each key */
		if (i + 1 < st.n && strcmp(st.a[i].key, st.a[i + 1].key) == 0)
			continue;
		st.a[n++] = st.a[i];
	}
	qsort(ly.a, ly.n, sizeof *ly.a, cmp_lay);
	uint32_t nl = 0;
	for (uint32_t i = 0; i < ly.n; i++)
		if (!nl || strcmp(ly.a[nl - 1].name, ly.a[i].name) != 0)
			ly.a[nl++] = ly.a[i];
	P->stra = st.a;
	P->nstra = n;
	P->lay = ly.a;
	P->nlay = nl;
	int per = o->device_num / (sapp_plan_stages(m, o) > 0 ? sapp_plan_stages(m, o) : 1);
	P->stage = per > 0 ? (uint32_t)(o->rank / per) : 0;
}

/* the node's input strategies; the count, or -1 */
static int node_stra(const Node *n, int64_t (**s)[LAYOUT_MAX_DIM], int **rk)
{
	int max = (int)n->nargs + 1, ns = 0;
	*s = xmalloc((size_t)max * sizeof **s);
	*rk = xmalloc((size_t)max * sizeof **rk);
	int r = lower_strategy(n, *s, *rk, max, &ns);
	return r == 1 ? ns : r == 0 ? 0 : -1;
}

static json_t *json_ints64(const int64_t *v, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer((json_int_t)v[i]));
	return a;
}

static int write_json(const Plan *P, const LowerCtx *c, const Options *o, FILE *f)
{
	json_t *root = json_object();
	json_object_set_new(root, "current_stage", json_integer(1));
	json_t *si = json_object(), *li = json_object();
	for (uint32_t i = 0; i < P->nstra; i++) {
		int64_t(*s)[LAYOUT_MAX_DIM];
		int *rk;
		int ns = node_stra(P->stra[i].n, &s, &rk);
		json_t *e = json_object(), *ps = json_array();
		for (int k = 0; k < ns; k++)
			json_array_append_new(ps, json_ints64(s[k], rk[k]));
		json_object_set_new(e, "parallel_strategy", ps);
		json_object_set_new(e, "stage", json_integer(P->stage));
		json_object_set_new(si, P->stra[i].key, e);
		free(s);
		free(rk);
	}
	for (uint32_t i = 0; i < P->nlay; i++) {
		SavedLayout sl;
		saved_layout(c, o, P->lay[i].p, &sl);
		json_t *e = json_object();
		json_object_set_new(e, "dev_matrix", json_ints64(sl.l.dev, sl.l.ndev));
		json_object_set_new(e, "tensor_map", json_ints64(sl.l.map, sl.l.rank));
		json_object_set_new(e, "tensor_shape", json_ints64(sl.l.shape, sl.l.rank));
		json_object_set_new(e, "field", json_integer(0));
		json_object_set_new(e, "opt_weight_shard_step", json_integer(sl.step));
		json_object_set_new(e, "opt_weight_shard_size", json_integer(sl.size));
		json_object_set_new(li, P->lay[i].name, e);
	}
	json_object_set_new(root, "parallel_strategy_item", si);
	json_object_set_new(root, "parallel_layout_item", li);
	int rc = json_dumpf(root, f, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	return rc;
}

/* protobuf-c messages, all in one arena */
#define NEW(A, T, INIT) memcpy(arena_alloc((A), sizeof(T)), &(T)INIT, sizeof(T))

static int write_protobuf(const Plan *P, const LowerCtx *c, const Options *o, FILE *f)
{
	Arena *A = arena_new();
	Mindspore__Straspb__ParallelStrategyMap map = MINDSPORE__STRASPB__PARALLEL_STRATEGY_MAP__INIT;
	map.current_stage = 1;
	map.n_parallel_strategy_item = P->nstra;
	map.parallel_strategy_item = arena_alloc(A, (P->nstra + 1) * sizeof *map.parallel_strategy_item);
	for (uint32_t i = 0; i < P->nstra; i++) {
		Mindspore__Straspb__ParallelStrategyItem *it =
		    NEW(A, Mindspore__Straspb__ParallelStrategyItem, MINDSPORE__STRASPB__PARALLEL_STRATEGY_ITEM__INIT);
		Mindspore__Straspb__ParallelStrategys *ss =
		    NEW(A, Mindspore__Straspb__ParallelStrategys, MINDSPORE__STRASPB__PARALLEL_STRATEGYS__INIT);
		it->node_name = (char *)P->stra[i].key;
		it->parallel_strategys = ss;
		ss->stage = P->stage;
		int64_t(*s)[LAYOUT_MAX_DIM];
		int *rk;
		int ns = node_stra(P->stra[i].n, &s, &rk);
		ss->n_parallel_strategy = ns > 0 ? (size_t)ns : 0;
		ss->parallel_strategy = arena_alloc(A, ((size_t)ns + 1) * sizeof *ss->parallel_strategy);
		for (int k = 0; k < ns; k++) {
			Mindspore__Straspb__ParallelStrategy *one =
			    NEW(A, Mindspore__Straspb__ParallelStrategy, MINDSPORE__STRASPB__PARALLEL_STRATEGY__INIT);
			one->n_dim = (size_t)rk[k];
			one->dim = arena_alloc(A, ((size_t)rk[k] + 1) * sizeof *one->dim);
			for (int d = 0; d < rk[k]; d++)
				one->dim[d] = (uint32_t)s[k][d];
			ss->parallel_strategy[k] = one;
		}
		free(s);
		free(rk);
		map.parallel_strategy_item[i] = it;
	}
	map.n_parallel_layout_item = P->nlay;
	map.parallel_layout_item = arena_alloc(A, (P->nlay + 1) * sizeof *map.parallel_layout_item);
	for (uint32_t i = 0; i < P->nlay; i++) {
		SavedLayout sl;
		saved_layout(c, o, P->lay[i].p, &sl);
		Mindspore__Straspb__ParallelLayoutItem *it =
		    NEW(A, Mindspore__Straspb__ParallelLayoutItem, MINDSPORE__STRASPB__PARALLEL_LAYOUT_ITEM__INIT);
		Mindspore__Straspb__ParallelLayouts *pl =
		    NEW(A, Mindspore__Straspb__ParallelLayouts, MINDSPORE__STRASPB__PARALLEL_LAYOUTS__INIT);
		Mindspore__Straspb__DevMatrix *dm =
		    NEW(A, Mindspore__Straspb__DevMatrix, MINDSPORE__STRASPB__DEV_MATRIX__INIT);
		Mindspore__Straspb__TensorMap *tm =
		    NEW(A, Mindspore__Straspb__TensorMap, MINDSPORE__STRASPB__TENSOR_MAP__INIT);
		dm->n_dim = (size_t)sl.l.ndev;
		dm->dim = arena_alloc(A, ((size_t)sl.l.ndev + 1) * sizeof *dm->dim);
		for (int d = 0; d < sl.l.ndev; d++)
			dm->dim[d] = (uint32_t)sl.l.dev[d];
		tm->n_dim = (size_t)sl.l.rank;
		tm->dim = arena_alloc(A, ((size_t)sl.l.rank + 1) * sizeof *tm->dim);
		for (int d = 0; d < sl.l.rank; d++)
			tm->dim[d] = (int32_t)sl.l.map[d];
		pl->n_dev_matrix = 1;
		pl->dev_matrix = arena_alloc(A, sizeof *pl->dev_matrix);
		pl->dev_matrix[0] = dm;
		pl->n_tensor_map = 1;
		pl->tensor_map = arena_alloc(A, sizeof *pl->tensor_map);
		pl->tensor_map[0] = tm;
		/* one empty entry each, as MindSpore adds them unconditionally */
		pl->n_param_split_shape = 1;
		pl->param_split_shape = arena_alloc(A, sizeof *pl->param_split_shape);
		pl->param_split_shape[0] =
		    NEW(A, Mindspore__Straspb__ParamSplitShape, MINDSPORE__STRASPB__PARAM_SPLIT_SHAPE__INIT);
		pl->n_indices_offset = 1;
		pl->indices_offset = arena_alloc(A, sizeof *pl->indices_offset);
		pl->indices_offset[0] =
		    NEW(A, Mindspore__Straspb__IndicesOffset, MINDSPORE__STRASPB__INDICES_OFFSET__INIT);
		pl->field = 0;
		pl->opt_weight_shard_step = sl.step;
		pl->opt_weight_shard_size = sl.size;
		it->param_name = (char *)P->lay[i].name;
		it->parallel_layouts = pl;
		map.parallel_layout_item[i] = it;
	}
	size_t n = mindspore__straspb__parallel_strategy_map__get_packed_size(&map);
	uint8_t *bytes = xmalloc(n + 1);
	mindspore__straspb__parallel_strategy_map__pack(&map, bytes);
	int rc = fwrite(bytes, 1, n, f) == n ? 0 : -1;
	free(bytes);
	arena_free(A);
	return rc;
}

int ckpt_write(Module *m, const Options *o, const char *path, CkptFormat fmt)
{
	Plan P;
	memset(&P, 0, sizeof P);
	collect(m, o, &P);
	for (uint32_t i = 0; i < P.nlay && o->device_num > 1; i++)
		if (!P.lay[i].p->lay || !P.lay[i].p->lay->nout || !P.lay[i].p->lay->out[0].ndev) {
			diag_error("a MindSpore strategy checkpoint holds the weights' layouts, but '%s' has none: "
			           "run the pipeline through the layouts pass",
			           P.lay[i].name);
			free(P.stra);
			free(P.lay);
			return 1;
		}
	LowerCtx c;
	int have_c = o->device_num > 1 && lower_ctx_init(&c, m, o) == 0;
	OutFile of;
	int rc = 0;
	if (out_open(&of, path) != 0) {
		rc = 3;
	} else if ((fmt == CKPT_MINDSPORE_JSON ? write_json(&P, have_c ? &c : NULL, o, of.f)
	                                       : write_protobuf(&P, have_c ? &c : NULL, o, of.f)) != 0) {
		out_abort(&of);
		diag_error("cannot write '%s'", path);
		rc = 3;
	} else if (out_commit(&of) != 0) {
		rc = 3;
	}
	if (have_c)
		lower_ctx_free(&c);
	free(P.stra);
	free(P.lay);
	return rc;
}

/* ------------------------------------------------------------ groups */

typedef struct GroupList {
	KeyMap seen; /* group name (interned) -> 1; weight node id + 2^32 -> 1 */
	Vec(const char *) name;
	Vec(uint32_t) off, len;
	Vec(int64_t) ranks;
} GroupList;

/* 1 the first time key is seen */
static int first_time(GroupList *G, int64_t key)
{
	int fresh;
	keymap_get(&G->seen, &key, 1, &fresh);
	return fresh;
}

static void group_add(GroupList *G, const char *name, const int64_t *r, int n, const char *world)
{
	if (strcmp(name, world) == 0)
		return; /* the world group is never created, so never saved */
	Sym s = intern_cstr(name);
	if (!first_time(G, (int64_t)s))
		return;
	vec_push(&G->name, sym_str(s));
	vec_push(&G->off, G->ranks.n);
	vec_push(&G->len, (uint32_t)n);
	for (int i = 0; i < n; i++)
		vec_push(&G->ranks, r[i]);
}

/* sorted a ∩ sorted b into a; the new length */
static int intersect(int64_t *a, int na, const int64_t *b, int nb)
{
	int i = 0, j = 0, k = 0;
	while (i < na && j < nb) {
		if (a[i] < b[j])
			i++;
		else if (a[i] > b[j])
			j++;
		else {
			a[k++] = a[i];
			i++;
			j++;
		}
	}
	return k;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Group checkpoint (parallel_strategy_checkpoint.cc SaveGroupInfo; the
 * restore list is step_parallel_utils.cc FindCommonMirrorGroup):
 *   - the groups the rank's graph uses, in the order it first uses them:
 *     each weight's mirror (gradient) group where an operator reads it,
 *     and the group of every communication operator; not the world group;
 *   - ckpt_restore_rank_list: [this rank] when a trainable weight is fully
 *     split (replicated on at most one rank, or on at most
 *     optimizer_weight_shard_size ranks with the parallel optimizer) or the
 *     parallel optimizer shards over all replicas (size -1); otherwise the
 *     ranks common to every mirror group. */
int ckpt_write_groups(Module *m, const Options *o, const char *path)
{
	GroupList G;
	memset(&G, 0, sizeof G);
	keymap_init(&G.seen, 1);
	LowerCtx c;
	int have_c = o->device_num > 1 && lower_ctx_init(&c, m, o) == 0;
	const char *world = o->world_group ? o->world_group : "hccl_world_group";
	int64_t *buf = xmalloc(LOWER_MAX_GROUP * sizeof *buf), *opt = xmalloc(LOWER_MAX_GROUP * sizeof *opt);
	int64_t *common = xmalloc(LOWER_MAX_GROUP * sizeof *common);
	int ncommon = -1, own = 0;
	char name[128];
	const Node *w[64];
	Graph *entry = ir_entry(m);
	/* the restore list, over the weights of the entry graph */
	for (uint32_t i = 0; entry && have_c && i < entry->params.n; i++) {
		const Node *p = entry->params.a[i];
		if (!lower_is_weight(p) || !p->lay || !p->lay->nout || !p->lay->out[0].ndev)
			continue;
		int K = o->optimizer_weight_shard_size;
		if (o->enable_parallel_optimizer && K <= 0) {
			own = 1;
			break;
		}
		int R = lower_replica_group(&c, &p->lay->out[0], buf);
		if (R <= (o->enable_parallel_optimizer ? K : 1)) {
			own = 1;
			break;
		}
		int nopt, nm;
		lower_param_shard(&c, p, opt, &nopt, buf, &nm);
		if (nm <= 1)
			continue;
		qsort(buf, (size_t)nm, sizeof *buf, cmp_i64);
		if (ncommon < 0) {
			memcpy(common, buf, (size_t)nm * sizeof *buf);
			ncommon = nm;
		} else {
			ncommon = intersect(common, ncommon, buf, nm);
		}
	}
	if (!have_c)
		own = 1; /* one device: every weight is whole on its only rank */
	/* the groups, in the order of first use */
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			const Node *n = g->nodes.a[i];
			if (n->dead || n->kind != NK_CNODE)
				continue;
			int k = have_c && n->has_strat ? weights_of(n, w, 64, 0, 0) : 0;
			for (int j = 0; j < k; j++) {
				int nopt, nm;
				if (!first_time(&G, ((int64_t)1 << 32) + w[j]->id))
					continue; /* its mirror group is in already */
				lower_param_shard(&c, w[j], opt, &nopt, buf, &nm);
				if (nm > 1) {
					lower_group_name(&c, buf, nm, name, sizeof name);
					group_add(&G, name, buf, nm, world);
				}
			}
			const Value *gv = ir_attr_get(&n->pattrs, "group");
			const Value *ids = ir_attr_get(&n->pattrs, "group_rank_ids");
			if (gv && gv->kind == V_STR && ids) {
				int nr = value_int_list(ids, buf, LOWER_MAX_GROUP);
				if (nr > 0)
					group_add(&G, sym_str(gv->text), buf, nr, world);
			}
		}
	}
	Arena *A = arena_new();
	Mindspore__Straspb__ParallelGroupMap map = MINDSPORE__STRASPB__PARALLEL_GROUP_MAP__INIT;
	map.n_parallel_group_item = G.name.n;
	map.parallel_group_item = arena_alloc(A, (G.name.n + 1) * sizeof *map.parallel_group_item);
	for (uint32_t i = 0; i < G.name.n; i++) {
		Mindspore__Straspb__ParallelGroupItem *it =
		    NEW(A, Mindspore__Straspb__ParallelGroupItem, MINDSPORE__STRASPB__PARALLEL_GROUP_ITEM__INIT);
		Mindspore__Straspb__ParallelGroupRanks *r =
		    NEW(A, Mindspore__Straspb__ParallelGroupRanks, MINDSPORE__STRASPB__PARALLEL_GROUP_RANKS__INIT);
		it->group_name = (char *)G.name.a[i];
		r->n_dim = G.len.a[i];
		r->dim = arena_alloc(A, (G.len.a[i] + 1) * sizeof *r->dim);
		for (uint32_t k = 0; k < G.len.a[i]; k++)
			r->dim[k] = (uint32_t)G.ranks.a[G.off.a[i] + k];
		it->parallel_group_ranks = r;
		map.parallel_group_item[i] = it;
	}
	Mindspore__Straspb__ParallelGroupRanks restore = MINDSPORE__STRASPB__PARALLEL_GROUP_RANKS__INIT;
	uint32_t own_rank = (uint32_t)o->rank;
	if (own) {
		restore.n_dim = 1;
		restore.dim = &own_rank;
	} else if (ncommon > 0) {
		restore.n_dim = (size_t)ncommon;
		restore.dim = arena_alloc(A, (size_t)ncommon * sizeof *restore.dim);
		for (int i = 0; i < ncommon; i++)
			restore.dim[i] = (uint32_t)common[i];
	}
	map.ckpt_restore_rank_list = &restore;
	size_t n = mindspore__straspb__parallel_group_map__get_packed_size(&map);
	uint8_t *bytes = xmalloc(n + 1);
	mindspore__straspb__parallel_group_map__pack(&map, bytes);
	OutFile of;
	int rc = 0;
	if (out_open(&of, path) != 0) {
		rc = 3;
	} else if (fwrite(bytes, 1, n, of.f) != n) {
		out_abort(&of);
		diag_error("cannot write '%s'", path);
		rc = 3;
	} else if (out_commit(&of) != 0) {
		rc = 3;
	}
	free(bytes);
	arena_free(A);
	free(buf);
	free(opt);
	free(common);
	keymap_free(&G.seen);
	vec_free(&G.name);
	vec_free(&G.off);
	vec_free(&G.len);
	vec_free(&G.ranks);
	if (have_c)
		lower_ctx_free(&c);
	return rc;
}
