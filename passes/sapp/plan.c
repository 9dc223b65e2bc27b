/* plan.c - strategy files, the sapp pass's decisions on disk.
 *
 * --strategy-out FILE writes every operator's strategy as JSON (device_num,
 * stages, parallel_mode, then per operator: node, fullname, instance,
 * operator, in_strategy, out_strategy, source).
 *
 * --strategy-in FILE reads such a file back and applies it instead of
 * searching, like MindSpore's strategy checkpoint (strategy_ckpt_load_file):
 *   - an entry names its operator by full name (the `# Fullname with scope`
 *     text); an entry without one by instance name and operator.  Operators
 *     sharing a name take the entries with that name in module order, which
 *     is the order the writer uses;
 *   - every entry must match an operator of the same kind, and its
 *     strategies must fit the graph: one per tensor input, each of the
 *     input's rank, every count dividing its dimension, at most the devices
 *     of a stage.  The plan's device_num and stages must be this run's.
 *     Any mismatch is an error naming the entry (exit 1);
 *   - an operator the file does not mention gets the default batch-parallel
 *     strategy (as in semi_auto mode), with one warning that counts them:
 *     a graph edited since the plan was saved still lowers, visibly;
 *   - the file's `source` of each entry is kept, so out -> in -> out gives
 *     the same file; the picture (--view=plan) shows such strategies as
 *     "loaded".
 *
 * --strategy-in also reads MindSpore's strategy checkpoint, protobuf or
 * JSON (backend/ckpt.c; told apart by content), as strategy_ckpt_load_file
 * does (training-step.md §7.3 "Loading"): an operator whose key
 * "<primitive>_<first weight>" is in the file takes the file's input
 * strategy; the file has nothing for the operators that read no weight,
 * so they are derived as without a file: by the SAPP search (auto) or the
 * default batch-parallel strategy (semi_auto).  The search runs first and
 * the file's strategies replace its choices for the operators they name,
 * so a file sappc wrote gives back the plan it was written from.  A user
 * strategy that the mode keeps (semi_auto, --interfered) wins over the
 * file's, as in MindSpore.  (Pinning the file's strategies before the
 * search, as interfered SAPP pins user ones, was tried: the search then
 * cuts the other operators differently, and a plan no longer survives its
 * own checkpoint.)  Layout
 * items are checked for form only (MindSpore's loader ignores them too).
 */
#include <jansson.h>
#include <string.h>

#include "sapp.h"
#include "../../backend/ckpt.h"

/* ------------------------------------------------------------ writer */

static json_t *json_stra(const SappOp *X, int out)
{
	json_t *a = json_array();
	uint32_t n = out ? 1 : X->nin;
	for (uint32_t i = 0; i < n; i++) {
		json_t *t = json_array();
		const int64_t *v = out ? X->os : X->s + X->off[i];
		int r = out ? X->orank : X->rank[i];
		for (int d = 0; d < r; d++)
			json_array_append_new(t, json_integer((json_int_t)v[d]));
		json_array_append_new(a, t);
	}
	return a;
}

int sapp_write_plan(const Sapp *S, const char *path)
{
	json_t *root = json_object();
	json_object_set_new(root, "device_num", json_integer(S->devices));
	json_object_set_new(root, "stages", json_integer(S->stages));
	json_object_set_new(root, "parallel_mode", json_string(S->o->semi_auto ? "semi_auto" : "auto"));
	json_t *ops = json_array();
	for (uint32_t x = 0; x < S->nops; x++) {
		const SappOp *X = &S->ops[x];
		if (!X->n)
			continue;
		json_t *o = json_object();
		char loc[32];
		snprintf(loc, sizeof loc, "%%%d", X->n->local);
		json_object_set_new(o, "node", json_string(loc));
		json_object_set_new(o, "fullname", json_string(ir_node_fullname(X->n)));
		json_object_set_new(o, "instance", json_string(X->n->instance ? sym_str(X->n->instance) : ""));
		json_object_set_new(o, "operator", json_string(sym_str(X->n->prim)));
		json_object_set_new(o, "in_strategy", json_stra(X, 0));
		json_object_set_new(o, "out_strategy", X->has_os ? json_stra(X, 1) : json_null());
		json_object_set_new(o, "source", json_string(ir_strat_source_name[X->source]));
		json_array_append_new(ops, o);
	}
	json_object_set_new(root, "operators", ops);
	OutFile of;
	int rc = 0;
	if (out_open(&of, path) != 0) {
		rc = 3;
	} else if (json_dumpf(root, of.f, JSON_INDENT(2) | JSON_SORT_KEYS) != 0 || fputc('\n', of.f) == EOF) {
		out_abort(&of);
		diag_error("cannot write '%s'", path);
		rc = 3;
	} else if (out_commit(&of) != 0) {
		rc = 3;
	}
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------ reader */

/* Operators by name: head[key] is the first operator not yet given an
 * entry, next[x] the following one with the same key (module order). */
typedef struct NameIndex {
	Sym *keys;
	uint32_t *head;
	uint32_t cap;
	uint32_t *next;
} NameIndex;

#define NONE UINT32_MAX

static uint32_t *slot(NameIndex *t, Sym k, int add)
{
	uint32_t j = (k * 2654435761u) & (t->cap - 1);
	while (t->keys[j] && t->keys[j] != k)
		j = (j + 1) & (t->cap - 1);
	if (!t->keys[j]) {
		if (!add)
			return NULL;
		t->keys[j] = k;
		t->head[j] = NONE;
	}
	return &t->head[j];
}

static void index_init(NameIndex *t, uint32_t nops)
{
	t->cap = 16;
	while (t->cap < 2 * nops + 2)
		t->cap *= 2;
	t->keys = xcalloc(t->cap, sizeof *t->keys);
	t->head = xcalloc(t->cap, sizeof *t->head);
	t->next = xmalloc((nops + 1) * sizeof *t->next);
}

static void index_free(NameIndex *t)
{
	free(t->keys);
	free(t->head);
	free(t->next);
}

/* add operators in reverse so that each chain runs in module order */
static void index_add(NameIndex *t, Sym k, uint32_t x)
{
	uint32_t *h = slot(t, k, 1);
	t->next[x] = *h;
	*h = x;
}

/* the first operator with key k that has no entry yet; NONE if the key is
 * unknown, NONE with *taken = 1 if every such operator already has one */
static uint32_t index_take(NameIndex *t, Sym k, const uint8_t *used, int *taken)
{
	uint32_t *h = k ? slot(t, k, 0) : NULL;
	*taken = 0;
	if (!h)
		return NONE;
	while (*h != NONE && used[*h])
		*h = t->next[*h];
	if (*h == NONE) {
		*taken = 1;
		return NONE;
	}
	uint32_t x = *h;
	*h = t->next[x];
	return x;
}

static Sym alt_key(const char *instance, const char *op)
{
	size_t a = strlen(instance), b = strlen(op);
	char *k = xmalloc(a + b + 2);
	memcpy(k, instance, a);
	k[a] = '\001'; /* in no name */
	memcpy(k + a + 1, op, b + 1);
	Sym s = intern(k, a + b + 1);
	free(k);
	return s;
}

static const char *field_str(const json_t *e, const char *key)
{
	const char *s = json_string_value(json_object_get(e, key));
	return s ? s : "";
}

/* a JSON list of integers into v (at most MAX_RANK); its length or -1 */
static int json_ints(const json_t *a, int64_t *v)
{
	if (!json_is_array(a) || json_array_size(a) > MAX_RANK)
		return -1;
	for (size_t d = 0; d < json_array_size(a); d++) {
		const json_t *x = json_array_get(a, d);
		if (!json_is_integer(x))
			return -1;
		v[d] = (int64_t)json_integer_value(x);
	}
	return (int)json_array_size(a);
}

typedef struct Loader {
	Sapp *S;
	const char *path;
	Source file, ir; /* errors about entries name the file; notes point into the IR */
	int bad;
} Loader;

/* "operators[3] 'Default/MatMul-op1': MSG", about the plan file, then where
 * the operator is in the graph when the entry matched one */
static void entry_error(Loader *L, size_t j, const char *name, const Node *n, const char *fmt, ...) PRINTF(5, 6);
static void entry_error(Loader *L, size_t j, const char *name, const Node *n, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	diag_set_source(&L->file);
	diag_error_at((Loc){0, 0}, "operators[%zu]%s%s: %s", j, *name ? " " : "", name, msg);
	diag_set_source(&L->ir);
	if (n)
		diag_note_at(n->loc, "the %s operator of the graph it names", sym_str(n->prim));
	L->bad = 1;
}

/* in_strategy / out_strategy of entry j into X; 1 ok */
static int load_stra(Loader *L, size_t j, const char *name, SappOp *X, const json_t *v, int out)
{
	const char *what = out ? "out_strategy" : "in_strategy";
	uint32_t want = out ? 1 : X->nin;
	if (!json_is_array(v)) {
		entry_error(L, j, name, X->n, "%s is not a list of lists of integers", what);
		return 0;
	}
	if (json_array_size(v) != want) {
		entry_error(L, j, name, X->n, "%s has %zu entr%s, but the operator has %u tensor %s%s", what,
		            json_array_size(v), json_array_size(v) == 1 ? "y" : "ies", want, out ? "output" : "input",
		            want == 1 ? "" : "s");
		return 0;
	}
	for (uint32_t i = 0; i < want; i++) {
		int64_t vals[MAX_RANK];
		int k = json_ints(json_array_get(v, i), vals);
		char why[256];
		if (k < 0) {
			entry_error(L, j, name, X->n, "%s entry %u is not a list of integers", what, i + 1);
			return 0;
		}
		if (!sapp_check_stra(L->S, X, i, vals, k, out, why, sizeof why)) {
			entry_error(L, j, name, X->n, "%s %s", what, why);
			return 0;
		}
		memcpy(out ? X->os : X->s + X->off[i], vals, (size_t)k * sizeof *vals);
	}
	return 1;
}

static int source_of(const char *s)
{
	for (int k = SRC_PINNED; k < SRC_COUNT_; k++)
		if (strcmp(s, ir_strat_source_name[k]) == 0)
			return k;
	return -1;
}

static void load_entries(Loader *L, const json_t *ops)
{
	Sapp *S = L->S;
	uint8_t *used = xcalloc(S->nops + 1, 1);
	NameIndex byfull, byalt = {0};
	index_init(&byfull, S->nops);
	for (uint32_t x = S->nops; x-- > 0;) {
		const Node *n = S->ops[x].n;
		if (n && *ir_node_fullname(n))
			index_add(&byfull, n->scope, x); /* the full name is the interned scope text */
	}
	for (size_t j = 0; j < json_array_size(ops) && !diag_too_many(); j++) {
		const json_t *e = json_array_get(ops, j);
		if (!json_is_object(e)) {
			entry_error(L, j, "", NULL, "is not an object");
			continue;
		}
		const char *full = field_str(e, "fullname"), *inst = field_str(e, "instance"),
		           *op = field_str(e, "operator");
		char name[512];
		if (*full)
			snprintf(name, sizeof name, "'%s'", full);
		else
			snprintf(name, sizeof name, "'%s' (%s)", inst, *op ? op : "no operator");
		if (!*full && !*op) {
			entry_error(L, j, name, NULL,
			            "names no operator: it needs a fullname, or an instance and an operator");
			continue;
		}
		if (!*full && !byalt.cap) { /* the first entry without a full name */
			index_init(&byalt, S->nops);
			for (uint32_t x = S->nops; x-- > 0;) {
				const Node *n = S->ops[x].n;
				if (n)
					index_add(&byalt,
					          alt_key(n->instance ? sym_str(n->instance) : "", sym_str(n->prim)),
					          x);
			}
		}
		int taken;
		uint32_t x = *full ? index_take(&byfull, intern_cstr(full), used, &taken)
		                   : index_take(&byalt, alt_key(inst, op), used, &taken);
		if (x == NONE) {
			entry_error(L, j, name, NULL, "%s",
			            taken   ? "every operator with this name already has an entry"
			            : *full ? "no operator of the graph has this full name"
			                    : "no operator of the graph has this instance name "
			                      "and operator");
			continue;
		}
		used[x] = 1;
		SappOp *X = &S->ops[x];
		if (*op && strcmp(op, sym_str(X->n->prim)) != 0) {
			entry_error(L, j, name, X->n, "the plan has a %s here, the graph a %s", op,
			            sym_str(X->n->prim));
			continue;
		}
		const json_t *src = json_object_get(e, "source");
		int sk = src ? source_of(field_str(e, "source")) : SRC_LOADED;
		if (sk < 0) {
			entry_error(L, j, name, X->n,
			            "unknown source '%s' (pinned, searched, propagated, default or loaded)",
			            field_str(e, "source"));
			continue;
		}
		const json_t *out = json_object_get(e, "out_strategy");
		if (!load_stra(L, j, name, X, json_object_get(e, "in_strategy"), 0) ||
		    (out && !json_is_null(out) && !load_stra(L, j, name, X, out, 1)))
			continue;
		X->has_s = 1;
		X->has_os = out && !json_is_null(out);
		X->source = (uint8_t)sk;
		X->loaded = 1;
		if (sapp_explaining(S, x)) {
			char lab[512];
			diag_note("%s: strategy loaded from %s (operators[%zu]), no search",
			          sapp_op_label(X, lab, sizeof lab), L->path, j);
		}
	}
	/* what the plan does not mention: the default batch-parallel strategy */
	uint32_t missing = 0, first = NONE;
	for (uint32_t x = 0; x < S->nops && !L->bad; x++) {
		SappOp *X = &S->ops[x];
		if (X->has_s)
			continue;
		sapp_default_batch(S, X);
		X->source = SRC_DEFAULT;
		if (X->n && !missing++)
			first = x;
	}
	if (missing) {
		char lab[512];
		diag_warning("%u operator%s not in %s and get%s the default batch-parallel strategy (the first: %s)",
		             missing, missing == 1 ? " is" : "s are", L->path, missing == 1 ? "s" : "",
		             sapp_op_label(&S->ops[first], lab, sizeof lab));
	}
	index_free(&byfull);
	if (byalt.cap)
		index_free(&byalt);
	free(used);
}

/* ------------------------------------------------------------ MindSpore's files */

/* what a MindSpore file gives: the item of each operator (-1 none) */
struct SappCkpt {
	CkptPlan plan;
	int32_t *item; /* per operator */
};

static int cmp_key(const void *a, const void *b)
{
	const CkptItem *x = *(const CkptItem *const *)a, *y = *(const CkptItem *const *)b;
	return strcmp(x->key, y->key);
}

/* match the file's items to the operators and check that they fit; 1 ok */
static int match_ckpt(Sapp *S, const char *path, const Source *file, const Source *ir)
{
	struct SappCkpt *C = S->ckpt;
	CkptPlan *P = &C->plan;
	int ok = 1;
	/* the items by key (a key met twice: the later, as a map would) */
	const CkptItem **by = xmalloc((P->nitems + 1) * sizeof *by);
	for (uint32_t i = 0; i < P->nitems; i++)
		by[i] = &P->items[i];
	qsort(by, P->nitems, sizeof *by, cmp_key);
	uint8_t *used = xcalloc(P->nitems + 1, 1);
	C->item = xmalloc((S->nops + 1) * sizeof *C->item);
	char key[1024];
	for (uint32_t x = 0; x < S->nops; x++) {
		SappOp *X = &S->ops[x];
		C->item[x] = -1;
		if (!X->n || !ckpt_key(X->n, key, sizeof key))
			continue;
		CkptItem probe = {.key = key}, *pp = &probe;
		const CkptItem **hit = bsearch(&pp, by, P->nitems, sizeof *by, cmp_key);
		if (!hit)
			continue;
		while (hit + 1 < by + P->nitems && strcmp(hit[1]->key, key) == 0)
			hit++;
		const CkptItem *it = *hit;
		uint32_t k = (uint32_t)(it - P->items);
		used[k] = 1;
		char why[256] = "";
		if (it->stage >= (uint32_t)S->stages)
			snprintf(why, sizeof why, "stage %u, but there %s %lld pipeline stage%s (--pipeline-stages)",
			         it->stage, S->stages == 1 ? "is" : "are", (long long)S->stages,
			         S->stages == 1 ? "" : "s");
		else if (it->nstra != X->nin)
			snprintf(why, sizeof why, "%u input strateg%s, but the operator has %u tensor input%s",
			         it->nstra, it->nstra == 1 ? "y" : "ies", X->nin, X->nin == 1 ? "" : "s");
		for (uint32_t i = 0; !*why && i < X->nin; i++)
			if (it->len[i] > MAX_RANK)
				snprintf(why, sizeof why, "entry %u has %u dimensions", i + 1, it->len[i]);
			else
				sapp_check_stra(S, X, i, it->s + it->off[i], (int)it->len[i], 0, why, sizeof why);
		if (*why) {
			diag_set_source(file);
			diag_error_at((Loc){0, 0}, "parallel_strategy_item '%s': %s", key, why);
			diag_set_source(ir);
			diag_note_at(X->n->loc, "the %s operator of the graph it names", sym_str(X->n->prim));
			ok = 0;
			continue;
		}
		C->item[x] = (int32_t)k;
	}
	uint32_t unmatched = 0, first = 0;
	for (uint32_t i = 0; i < P->nitems; i++)
		if (!used[i] && !unmatched++)
			first = i;
	if (ok && unmatched)
		diag_warning("%u entr%s of %s name%s no operator of the graph and %s ignored (the first: '%s')",
		             unmatched, unmatched == 1 ? "y" : "ies", path, unmatched == 1 ? "s" : "",
		             unmatched == 1 ? "is" : "are", P->items[first].key);
	free(by);
	free(used);
	return ok;
}

/* MindSpore takes a user (.shard()) strategy over the file's
 * (step_parallel.cc ExtractStrategyAndInit: the primitive's strategy
 * attribute is looked at first): an operator whose strategy sappc kept as
 * the user's is not the file's to change */
static int user_kept(const SappOp *X)
{
	return X->pinned || X->source == SRC_PINNED;
}

void sapp_apply_ckpt(Sapp *S)
{
	struct SappCkpt *C = S->ckpt;
	for (uint32_t x = 0; C && x < S->nops; x++) {
		if (C->item[x] < 0)
			continue;
		SappOp *X = &S->ops[x];
		if (user_kept(X))
			continue;
		const CkptItem *it = &C->plan.items[C->item[x]];
		for (uint32_t i = 0; i < X->nin; i++) {
			int64_t *dst = X->s + X->off[i];
			if (X->has_os && memcmp(dst, it->s + it->off[i], it->len[i] * sizeof *dst) != 0)
				X->has_os = 0; /* an out strategy chosen for other inputs */
			memcpy(dst, it->s + it->off[i], it->len[i] * sizeof *dst);
		}
		X->has_s = 1;
		X->loaded = 1;
		X->source = SRC_LOADED;
		if (sapp_explaining(S, x)) {
			char lab[512];
			diag_note("%s: strategy loaded from the MindSpore checkpoint (key '%s'), not searched",
			          sapp_op_label(X, lab, sizeof lab), it->key);
		}
	}
}

void sapp_ckpt_free(Sapp *S)
{
	if (!S->ckpt)
		return;
	ckpt_plan_free(&S->ckpt->plan);
	free(S->ckpt->item);
	free(S->ckpt);
	S->ckpt = NULL;
}

static int load_ckpt(Sapp *S, const char *path, const char *buf, size_t len)
{
	Source file = {path, buf, len}, ir = diag_source();
	S->ckpt = xcalloc(1, sizeof *S->ckpt);
	diag_set_source(&file);
	int bad = ckpt_read(path, buf, len, &S->ckpt->plan);
	diag_set_source(&ir);
	if (!bad && !match_ckpt(S, path, &file, &ir))
		bad = 1;
	return bad;
}

int sapp_load_plan(Sapp *S, const char *path, int *mindspore)
{
	char *buf;
	size_t len;
	*mindspore = 0;
	if (io_read_file(path, &buf, &len) != 0)
		return 3;
	if (ckpt_format_of_text(buf, len) != CKPT_SAPPC) {
		*mindspore = 1;
		int bad = load_ckpt(S, path, buf, len);
		free(buf);
		return bad;
	}
	Loader L = {S, path, {path, buf, len}, diag_source(), 0};
	json_error_t err;
	json_t *root = json_loadb(buf, len, 0, &err);
	diag_set_source(&L.file);
	if (!root) {
		diag_error_at(
		    (Loc){(uint32_t)(err.line > 0 ? err.line : 0), (uint32_t)(err.column > 0 ? err.column : 0)}, "%s",
		    err.text);
		L.bad = 1;
		goto done;
	}
	const json_t *ops = json_object_get(root, "operators");
	if (!json_is_object(root) || !json_is_array(ops)) {
		diag_error_at((Loc){0, 0},
		              "not a strategy file: no \"operators\" list (write one with --strategy-out)");
		L.bad = 1;
		goto done;
	}
	const json_t *dn = json_object_get(root, "device_num"), *st = json_object_get(root, "stages");
	if (dn && (!json_is_integer(dn) || json_integer_value(dn) != S->devices)) {
		diag_error_at((Loc){0, 0}, "the plan is for %lld devices, this run has %lld (--device-num)",
		              (long long)json_integer_value(dn), (long long)S->devices);
		L.bad = 1;
	}
	if (st && (!json_is_integer(st) || json_integer_value(st) != S->stages)) {
		diag_error_at(
		    (Loc){0, 0}, "the plan is for %lld pipeline stage%s, this run has %lld (--pipeline-stages)",
		    (long long)json_integer_value(st), json_integer_value(st) == 1 ? "" : "s", (long long)S->stages);
		L.bad = 1;
	}
	diag_set_source(&L.ir);
	if (!L.bad)
		load_entries(&L, ops);
done:
	diag_set_source(&L.ir);
	json_decref(root);
	free(buf);
	return L.bad ? 1 : 0;
}
