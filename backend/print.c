/* print.c - writes a Module as IR text, exactly the syntax frontend/ reads.
 *
 * The output is the newest MindSpore dump layout (ir-format.md §1.2-1.7):
 * header, parameters, node counts, then every subgraph.  Counts are
 * recomputed from the module, operand references are printed relative to
 * the graph being printed (%k, %paraN_x, or $(@g:x) for another graph's
 * node), and text kept verbatim by the reader (debug lines, raw brackets) is
 * written back unchanged, so a canonical file round-trips byte for byte.
 */
#include <string.h>

#include "sappc.h"

static const Graph *cur_graph;

/* The printer writes a lot of small pieces (a lowered rank graph can be
 * hundreds of MB): they go through one buffer instead of one locked stdio
 * call each.  Every public entry point names the stream once (w_begin) and
 * flushes before returning, so the writers below only check for room; the
 * FILE * they are given is always sink.f.  256 KiB: --all-ranks writes
 * gigabytes of rank files with _IONBF streams, one write(2) per flush, and
 * a flush also forgets the memo's texts still in the buffer. */
static struct {
	FILE *f;
	size_t n;
	unsigned long flushes; /* tells memo_keep whether its text is still in buf */
	char buf[1 << 18];
} sink;

static void w_flush(void)
{
	if (sink.n && sink.f)
		fwrite(sink.buf, 1, sink.n, sink.f);
	sink.n = 0;
	sink.flushes++;
}

static uint32_t symc_epoch;

static void w_begin(FILE *f)
{
	sink.f = f;
	sink.n = 0;
	symc_epoch = intern_epoch() + 1; /* 0 is no entry's */
}

static void w_write_slow(const void *p, size_t n)
{
	w_flush();
	if (n > sizeof sink.buf) {
		fwrite(p, 1, n, sink.f);
		return;
	}
	memcpy(sink.buf, p, n);
	sink.n = n;
}

/* the common case inline: room in the buffer */
static inline void w_write(FILE *f, const void *p, size_t n)
{
	(void)f;
	if (n <= sizeof sink.buf - sink.n) {
		memcpy(sink.buf + sink.n, p, n);
		sink.n += n;
	} else {
		w_write_slow(p, n);
	}
}

/* Room for n bytes (n <= sizeof sink.buf) at the end of the buffer: the
 * caller forms its text there and adds its length to sink.n. */
static inline char *w_room(FILE *f, size_t n)
{
	(void)f;
	if (n > sizeof sink.buf - sink.n)
		w_flush();
	return sink.buf + sink.n;
}

static inline void w_puts(const char *s, FILE *f)
{
	w_write(f, s, strlen(s));
}

static inline void w_putc(int c, FILE *f)
{
	(void)f;
	if (sink.n == sizeof sink.buf)
		w_flush();
	sink.buf[sink.n++] = (char)c;
}

/* everything below prints through the buffer */
#define fputs(s, f) w_puts((s), (f))
#define fputc(c, f) w_putc((c), (f))
#define fwrite(p, sz, n, f) w_write((f), (p), (size_t)(sz) * (size_t)(n))

/* The text of a piece printed from an array, by the array's address.  The
 * lowering shares arrays between the operators it inserts (clone_op: type
 * arrays, dims, attribute lists, constant operand tuples) and a Split's n
 * outputs are read by n TupleGetItems that each print the whole tuple type,
 * so a rank graph prints the same few thousand arrays hundreds of thousands
 * of times.  Direct-mapped on (address, count, what); the texts live in one
 * fixed pool.  When the pool is full, and when a public entry point returns
 * (the arrays may be freed before the next call), every entry is forgotten
 * at once by a new generation.  Nothing is changed while a module prints,
 * and a text that depends on the graph being printed (a node reference) is
 * never kept.
 *
 * Dims are also found by their content (memo_get_dims): the passes give many
 * nodes a dims array of their own with the same numbers.  Such an entry
 * keeps the first array as its key, which stays valid while a module prints.
 * An abstract found or kept so is also entered under its own dims' address
 * (memo_alias, MEMO_BYADDR): looking that up costs no hash of the numbers. */
enum { MEMO_DIMS = 1, MEMO_OLD, MEMO_ELEMS, MEMO_ATTRS, MEMO_TYPES, MEMO_ABS };
#define MEMO_BITS 14 /* 16384 slots of 32 bytes */
#define MEMO_SLOTS (1u << MEMO_BITS)
#define MEMO_POOL (1u << 20)
#define MEMO_MAXLEN 4096u
/* A communication op's rank list (group_rank_ids, rank_list) is one shared
 * array per group (lower_comm_group_attrs) but its text is 5 bytes a rank:
 * 24 KB at 4096 devices, printed by every collective of the group.  Lists
 * of at least MEMO_LONG_N elements are kept up to MEMO_LONG_MAXLEN bytes,
 * with the buffer flushed first so that their text stays in one piece. */
#define MEMO_LONG_N 256u
#define MEMO_LONG_MAXLEN (1u << 15)
#define MEMO_BYADDR (1u << 24) /* an abstract's entry under its dims' address */
typedef struct MemoEnt {
	const void *key;
	uint32_t n, gen, off, len;
	uint32_t tag;
} MemoEnt;
static MemoEnt memo_tab[MEMO_SLOTS];
static struct {
	uint32_t gen, used; /* entries of another generation are empty */
	unsigned long ctx;  /* node references printed: the text depends on cur_graph */
} memo = {.gen = 1};
static char memo_pool[MEMO_POOL];

/* Attribute lists found by their contents (print_attrs) have a table of
 * their own, small enough to stay in the cache: 16 bytes an entry, the
 * whole hash of the list's signature (which turns another list away without
 * reading the pool), and where the signature's words are in the pool,
 * followed by the text. */
#define SIG_BITS 11
typedef struct {
	uint32_t h, gen, off;
	uint16_t nw, len;
} SigEnt;
static SigEnt sig_tab[1u << SIG_BITS];

/* and by the list's address, the text a signature found for it: a training
 * graph's backward nodes share their lists, and forming the signature of
 * the same list again cost more than printing it had.  The text stays in
 * the pool, unmoved, for the generation. */
#define SIGA_BITS 10
typedef struct {
	const void *key;
	uint32_t n, gen, off, len;
} SigAddr;
static SigAddr sig_addr[1u << SIGA_BITS];

/* a miss: where its text starts, for memo_keep */
typedef struct {
	MemoEnt *e;
	const void *key;
	uint32_t n, tag;
	size_t start;
	unsigned long flushes, ctx;
} Memo;

static inline int memo_miss(Memo *m, MemoEnt *e, const void *key, uint32_t n, uint32_t tag)
{
	*m = (Memo){e, key, n, tag, sink.n, sink.flushes, memo.ctx};
	return 0;
}

/* A node's input types, looked up by their array's address once a node
 * line, have a table of their own, an eighth of the big one's size: there
 * the look was most often a cache miss that the line waited on (half of
 * ir_print_node_impl's time in an --all-ranks profile). */
#define TYPES_BITS 12
static MemoEnt types_tab[1u << TYPES_BITS];

/* 1: the kept text of (key, n, tag) is written; 0: *m is set for the
 * memo_keep() after the caller has printed it */
static inline int memo_get(FILE *f, Memo *m, const void *key, uint32_t n, uint32_t tag)
{
	uint32_t h = (uint32_t)((uintptr_t)key >> 3) * 0x9E3779B1u + n * 0x85EBCA77u + tag;
	MemoEnt *e = tag == MEMO_TYPES ? &types_tab[h >> (32 - TYPES_BITS)] : &memo_tab[h >> (32 - MEMO_BITS)];
	if (e->key != key || e->gen != memo.gen || e->n != n || e->tag != tag)
		return memo_miss(m, e, key, n, tag);
	w_write(f, memo_pool + e->off, e->len);
	return 1;
}

/* the same for rank dims d (rank > 0), found by their numbers */
static inline int memo_get_dims(FILE *f, Memo *m, const int64_t *d, uint32_t rank, uint32_t n, uint32_t tag)
{
	uint64_t x = rank;
	for (uint32_t i = 0; i < rank; i++)
		x = (x ^ (uint64_t)d[i]) * 0x100000001B3u;
	uint32_t h = ((uint32_t)(x >> 32) ^ (uint32_t)x) * 0x9E3779B1u + n * 0x85EBCA77u + tag;
	MemoEnt *e = &memo_tab[h >> (32 - MEMO_BITS)];
	if (e->gen != memo.gen || e->n != n || e->tag != tag)
		return memo_miss(m, e, d, n, tag);
	if (e->key != d) {
		const int64_t *k = e->key;
		for (uint32_t i = 0; i < rank; i++)
			if (k[i] != d[i])
				return memo_miss(m, e, d, n, tag);
	}
	w_write(f, memo_pool + e->off, e->len);
	m->e = e;
	return 1;
}

/* keep what was written since the miss m as its text (1: kept) */
static int memo_keep(const Memo *m)
{
	if (m->flushes != sink.flushes || m->ctx != memo.ctx)
		return 0;
	size_t len = sink.n - m->start;
	if (len > (m->n >= MEMO_LONG_N && m->tag == MEMO_ELEMS ? MEMO_LONG_MAXLEN : MEMO_MAXLEN))
		return 0;
	if (len > MEMO_POOL - memo.used) {
		memo.gen++;
		memo.used = 0;
	}
	*m->e = (MemoEnt){m->key, m->n, memo.gen, memo.used, (uint32_t)len, m->tag};
	memcpy(memo_pool + memo.used, sink.buf + m->start, len);
	memo.used += (uint32_t)len;
	return 1;
}

/* the entry of a hit or kept text e also under the address key: the next
 * look for the same array needs no hash of its numbers */
static inline void memo_alias(MemoEnt *slot, const MemoEnt *e, const void *key, uint32_t tag)
{
	*slot = *e;
	slot->key = key;
	slot->tag = tag;
}

static void memo_drop(void)
{
	memo.used = 0;
	if (++memo.gen == 0) { /* wrapped: no entry may look current */
		memset(memo_tab, 0, sizeof memo_tab);
		memset(sig_tab, 0, sizeof sig_tab);
		memset(types_tab, 0, sizeof types_tab);
		memset(sig_addr, 0, sizeof sig_addr);
		memo.gen = 1;
	}
}

/* The text of the numbers printed, by their value: a node's %k is printed
 * again by every operand that uses it, mostly a few lines later, and the
 * next node's %k (and CNode_ id) is mostly one more, whose text is the last
 * one's with its last digit increased.  Depends on nothing but the value,
 * so never forgotten. */
#define NUMC_SLOTS 2048
typedef struct {
	int64_t v;
	char t[20];
	uint32_t len; /* 0: empty */
} NumText;
static NumText numc[NUMC_SLOTS];

static void put_i64_slow(int64_t v)
{
	char *p = w_room(NULL, 20);
	if (v < 0) {
		sink.n += fmt_i64(p, v);
		return;
	}
	NumText *e = &numc[(uint64_t)v % NUMC_SLOTS];
	const NumText *q = &numc[(uint64_t)(v - 1) % NUMC_SLOTS];
	if (q->v == v - 1 && q->len && q->t[q->len - 1] != '9') {
		*e = *q;
		e->t[e->len - 1]++;
	} else {
		e->len = (uint32_t)fmt_u64(e->t, (uint64_t)v);
	}
	e->v = v;
	memcpy(p, e->t, sizeof e->t);
	sink.n += e->len;
}

/* the hit: a copy of 20 bytes, no registers to save */
static inline void put_i64(FILE *f, int64_t v)
{
	(void)f;
	const NumText *e = &numc[(uint64_t)v % NUMC_SLOTS];
	if (e->v == v && e->len && sizeof e->t <= sizeof sink.buf - sink.n) {
		memcpy(sink.buf + sink.n, e->t, sizeof e->t);
		sink.n += e->len;
	} else {
		put_i64_slow(v);
	}
}

/* The text of the symbols printed, by their number: one table look instead
 * of the two calls sym_str() and sym_len().  Kept from one call to the
 * next while the interner keeps its texts (an --all-ranks worker prints
 * rank after rank with the same names): an entry is current when its
 * epoch is intern_epoch() + 1, which symc_epoch holds for the call. */
#define SYMC_SLOTS 4096
static struct {
	Sym s;
	uint32_t gen, len;
	const char *p;
} symc[SYMC_SLOTS];

/* a deferred Sym (a redistribution op's instance name) is written, not
 * interned, and not kept in the table */
static void put_deferred(FILE *f, Sym s)
{
	/* formed in place: sym_format writes at most cap - 1 bytes and a NUL */
	char *p = w_room(f, 512);
	sink.n += sym_format(s, p, 512);
}

static void put_sym_slow(FILE *f, Sym s)
{
	if (s & SYM_DEFERRED) {
		put_deferred(f, s);
		return;
	}
	uint32_t i = s % SYMC_SLOTS;
	symc[i].s = s;
	symc[i].gen = symc_epoch;
	symc[i].p = sym_str(s);
	symc[i].len = (uint32_t)sym_len(s);
	w_write(f, symc[i].p, symc[i].len);
}

static inline void put_sym(FILE *f, Sym s)
{
	uint32_t i = s % SYMC_SLOTS;
	if (symc[i].s == s && symc[i].gen == symc_epoch)
		w_write(f, symc[i].p, symc[i].len);
	else
		put_sym_slow(f, s);
}

/* the debug name, CNode_<id> when a pass left it unformed */
static void put_name(FILE *f, const Node *n)
{
	if (n->autoname) {
		fputs("CNode_", f);
		put_i64(f, n->id);
	} else {
		put_sym(f, n->name);
	}
}

/* "I64(": the wrapper of a number by its NumType, padded to 8 bytes so
 * that it is copied whole, and its length */
static const char numtype_open[][8] = {"",     "I8(",  "I16(", "I32(", "I64(", "U8(",  "U16(",
                                       "U32(", "U64(", "F16(", "F32(", "F64(", "BF16("};
static const uint8_t numtype_len[] = {0, 3, 4, 4, 4, 3, 4, 4, 4, 4, 4, 4, 5};

static inline void put_numtype_open(FILE *f, unsigned nt)
{
	char *p = w_room(f, 8);
	memcpy(p, numtype_open[nt], 8);
	sink.n += numtype_len[nt];
}

static void print_param_ref(FILE *f, const Node *p)
{
	fputs("%para", f);
	if (p->local >= 0)
		put_i64(f, p->local);
	fputc('_', f);
	put_sym(f, p->name);
}

static void ir_print_value_impl(FILE *f, const Value *v);

static void print_node_ref(FILE *f, const Node *n)
{
	int same = n->g == cur_graph || (n->kind == NK_PARAM && !n->g);
	if (!same) {
		fputs("$(@", f);
		put_sym(f, n->g ? n->g->name : 0);
		fputc(':', f);
		if (n->kind == NK_PARAM) {
			fputs("para", f);
			if (n->local >= 0)
				put_i64(f, n->local);
			fputc('_', f);
			put_sym(f, n->name);
		} else {
			put_name(f, n);
		}
		fputc(')', f);
		return;
	}
	if (n->kind == NK_PARAM)
		print_param_ref(f, n);
	else {
		fputc('%', f);
		put_i64(f, n->local);
	}
}

static void print_elems(FILE *f, const Value *v)
{
	Memo m;
	if (!v->n || memo_get(f, &m, v->u.elems, v->n, MEMO_ELEMS))
		return;
	if (v->n >= MEMO_LONG_N && sizeof sink.buf - sink.n < MEMO_LONG_MAXLEN) {
		w_flush();
		memo_miss(&m, m.e, m.key, m.n, m.tag);
	}
	for (uint32_t i = 0; i < v->n; i++) {
		if (i)
			fputs(", ", f);
		if (v->kind == V_DICT && (i & 1)) {
			/* key: value pairs: the separator before a value is ": " */
		}
		if (v->u.elems[i].keyi) {
			put_sym(f, value_key(&v->u.elems[i]));
			fputc('=', f);
		}
		ir_print_value_impl(f, &v->u.elems[i]);
	}
	memo_keep(&m);
}

static void ir_print_value_impl(FILE *f, const Value *v)
{
	switch (v->kind) {
	case V_INT:
		if (v->numtype) {
			put_numtype_open(f, v->numtype);
			put_i64(f, v->u.i);
			fputc(')', f);
		} else {
			put_i64(f, v->u.i);
		}
		break;
	case V_FLOAT:
		if (v->numtype) {
			put_numtype_open(f, v->numtype);
			put_sym(f, v->text);
			fputc(')', f);
		} else {
			put_sym(f, v->text);
		}
		break;
	case V_BOOL:
		fputs(v->u.i ? "Bool(1)" : "Bool(0)", f);
		break;
	case V_STR:
		fputc('"', f);
		put_sym(f, v->text);
		fputc('"', f);
		break;
	case V_WORD:
	case V_RAW:
	case V_EXTERN:
		put_sym(f, v->text);
		break;
	case V_TUPLE:
		fputc('(', f);
		print_elems(f, v);
		fputc(')', f);
		break;
	case V_LIST:
		fputc('[', f);
		print_elems(f, v);
		fputc(']', f);
		break;
	case V_DICT:
		fputc('{', f);
		for (uint32_t i = 0; i + 1 < v->n; i += 2) {
			if (i)
				fputs(", ", f);
			ir_print_value_impl(f, &v->u.elems[i]);
			fputs(": ", f);
			ir_print_value_impl(f, &v->u.elems[i + 1]);
		}
		fputc('}', f);
		break;
	case V_CALL:
		put_sym(f, value_call_name(v));
		fputc('(', f);
		print_elems(f, v);
		fputc(')', f);
		break;
	case V_NODE:
		memo.ctx++;
		print_node_ref(f, v->u.node);
		break;
	case V_GRAPH:
		fputc('@', f);
		if (v->u.graph && !v->text)
			put_sym(f, v->u.graph->name);
		else
			put_sym(f, v->text);
		break;
	default:
		die("print: value kind %d", v->kind);
	}
}

/* two dims shapes with the same text */
static inline int dims_same(const Shape *a, const Shape *b)
{
	return (a->kind == SK_DIMS || a->kind == SK_OLD) && a->kind == b->kind && a->rank == b->rank &&
	       (a->dims == b->dims || !a->rank || memcmp(a->dims, b->dims, a->rank * sizeof *a->dims) == 0);
}

static void print_shape(FILE *f, const Shape *s)
{
	switch (s->kind) {
	case SK_DIMS:
	case SK_OLD: {
		Memo m;
		if (s->rank &&
		    memo_get_dims(f, &m, s->dims, s->rank, s->rank, s->kind == SK_DIMS ? MEMO_DIMS : MEMO_OLD))
			break;
		char *t = w_room(f, 2 + 22 * (size_t)s->rank);
		m.start = sink.n; /* after a flush w_room may have made */
		m.flushes = sink.flushes;
		size_t n = 0;
		t[n++] = s->kind == SK_DIMS ? '(' : '[';
		for (int i = 0; i < s->rank; i++) {
			if (i) {
				t[n++] = ',';
				t[n++] = ' ';
			}
			n += fmt_i64(t + n, s->dims[i]);
		}
		t[n++] = s->kind == SK_DIMS ? ')' : ']';
		sink.n += n;
		if (s->rank)
			memo_keep(&m);
		break;
	}
	case SK_NOSHAPE:
		fputs("NoShape", f);
		break;
	case SK_TUPLE:
	case SK_LIST: {
		/* Kept as part of the abstract it is in.  A Split's outputs are
		 * mostly all alike: an element with the same dims as the one
		 * before is a copy of its text, still in the buffer. */
		fputs(s->kind == SK_TUPLE ? "TupleShape(" : "ListShape(", f);
		size_t prev = 0, plen = 0;
		unsigned long fl = 0;
		for (int i = 0; i < s->rank; i++) {
			const Shape *e = &s->sub[i];
			if (i) {
				fputs(", ", f);
				if (fl == sink.flushes && plen <= sizeof sink.buf - sink.n && dims_same(e, e - 1)) {
					memcpy(sink.buf + sink.n, sink.buf + prev, plen);
					sink.n += plen;
					continue;
				}
			}
			prev = sink.n;
			fl = sink.flushes;
			print_shape(f, e);
			plen = sink.n - prev;
		}
		fputc(')', f);
		break;
	}
	default:
		break;
	}
}

static void ir_print_abs_impl(FILE *f, const Abs *a)
{
	/* by the type text and the shape: its dims by their numbers, a
	 * tuple's by the address of its element array */
	Memo m, ma;
	m.e = ma.e = NULL;
	uint32_t tag =
	    MEMO_ABS | (uint32_t)a->shape.kind << 8 | (uint32_t)a->has_value << 12 | (uint32_t)a->shape.rank << 16;
	if (!a->xi && a->shape.rank) {
		if (a->shape.kind == SK_DIMS || a->shape.kind == SK_OLD) {
			if (memo_get(f, &ma, a->shape.dims, a->tstr, tag | MEMO_BYADDR))
				return;
			if (memo_get_dims(f, &m, a->shape.dims, a->shape.rank, a->tstr, tag)) {
				memo_alias(ma.e, m.e, a->shape.dims, tag | MEMO_BYADDR);
				return;
			}
		} else if (a->shape.kind == SK_TUPLE || a->shape.kind == SK_LIST) {
			if (memo_get(f, &m, a->shape.sub, a->tstr, tag))
				return;
		}
	}
	fputc('<', f);
	if (a->tstr)
		put_sym(f, a->tstr);
	else
		fputs("null", f);
	if (a->shape.kind != SK_NONE) {
		fputs(", ", f);
		print_shape(f, &a->shape);
	}
	if (a->has_value)
		fputs(", value=...", f);
	const AbsExt *x = abs_ext(a);
	if (x && x->ref_key) {
		fputs(x->ref_colon ? ", ref_key=:" : ", ref_key=", f);
		put_sym(f, x->ref_key);
	}
	for (uint32_t i = 0; x && i < x->nextras; i++) {
		fputs(", ", f);
		put_sym(f, x->extras[i]);
	}
	fputc('>', f);
	if (m.e && memo_keep(&m) && ma.e)
		memo_alias(ma.e, m.e, a->shape.dims, tag | MEMO_BYADDR);
}

static void print_types(FILE *f, const Abs *t, uint32_t n)
{
	Memo m;
	if (!n || memo_get(f, &m, t, n, MEMO_TYPES))
		return;
	for (uint32_t i = 0; i < n; i++) {
		if (i)
			fputs(", ", f);
		ir_print_abs_impl(f, &t[i]);
	}
	memo_keep(&m);
}

/* An attribute list by its contents.  The reader gives every node its own
 * copy of its groups (a pass may set one node's attribute in place), so
 * the memo by address never meets a parsed list twice, and a node line's
 * primitive_attrs were printed value by value: 4% of parse+print, where
 * a model has a few groups repeated on thousands of lines.  A list of
 * values whose text is a function of their fields alone (numbers, words,
 * strings; tuples, lists and calls of those) is reduced to a signature of
 * words; the signature and the text are kept together in the pool (the
 * entry's key points at the signature there), so a hit compares the words
 * and copies the text. */
#define ATTRSIG_MAX 96

/* a scalar's two words, 0 when v is not one whose text is a function of
 * its fields */
static inline int attrsig_scalar(const Value *v, uint64_t *w)
{
	switch (v->kind) {
	case V_INT:
	case V_BOOL:
		w[1] = (uint64_t)v->u.i;
		break;
	case V_FLOAT:
	case V_STR:
	case V_WORD:
	case V_RAW:
	case V_EXTERN:
		w[1] = v->text;
		break;
	default:
		return 0;
	}
	w[0] = v->kind | (uint64_t)v->numtype << 8 | (uint64_t)v->keyi << 32; /* keyi: one per key text */
	return 1;
}

/* a tuple, list or call's two words: its kind, and its count and name */
static inline int attrsig_head(const Value *v, uint64_t *w)
{
	if (v->kind != V_TUPLE && v->kind != V_LIST && v->kind != V_CALL)
		return 0;
	w[0] = v->kind | (uint64_t)v->numtype << 8 | (uint64_t)v->keyi << 32;
	/* n and text share their bytes (ir/sappc.h): a CALL's name is value_call_name */
	w[1] = v->n | (uint64_t)(v->kind == V_CALL ? value_call_name(v) : 0) << 32;
	return 1;
}

/* v's words at w + *k: a scalar's two, or, depth > 0, a container's two
 * and its elements' (each one level less deep); 0 when it has none or they
 * pass ATTRSIG_MAX */
static int attrsig_value(const Value *v, uint64_t *w, uint32_t *k, int depth)
{
	if (*k + 2 > ATTRSIG_MAX)
		return 0;
	if (attrsig_scalar(v, w + *k)) {
		*k += 2;
		return 1;
	}
	if (!depth || !attrsig_head(v, w + *k))
		return 0;
	*k += 2;
	if (*k + 2 * (size_t)v->n > ATTRSIG_MAX)
		return 0;
	for (uint32_t j = 0; j < v->n; j++)
		if (!attrsig_value(&v->u.elems[j], w, k, depth - 1))
			return 0;
	return 1;
}

/* The signature of l at w (its number of words), or 0: per attribute its
 * key, then its value's words: a scalar's two, or a container's two and
 * its elements', scalars or containers of scalars (a strategy's
 * ((64, 8), (1, 8))).  The first word's kind tells a scalar's payload from
 * a container's count, so two texts never have the same words. */
static uint32_t attrsig(const AttrList *l, uint64_t *w)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < l->n; i++) {
		if (k + 3 > ATTRSIG_MAX)
			return 0;
		w[k++] = l->a[i].key;
		if (!attrsig_value(&l->a[i].val, w, &k, 2))
			return 0;
	}
	return k;
}

/* A list of at most SIG_SHORT scalar attributes is printed as it is: a
 * cnode_attrs {related_comm_node_id: "119"} is one node's own, and keeping
 * its text cost more than writing it (a few hundred times a rank). */
#define SIG_SHORT 2

static void print_attrs(FILE *f, const AttrList *l)
{
	if (!l->n)
		return;
	/* a list with a signature is found by it alone (an attribute list of
	 * a rank graph is mostly a node's own copy, which its address never
	 * finds), the others by their address */
	SigAddr *sa = &sig_addr[((uint32_t)((uintptr_t)l->a >> 3) * 0x9E3779B1u) >> (32 - SIGA_BITS)];
	if (sa->key == l->a && sa->n == l->n && sa->gen == memo.gen) {
		w_write(f, memo_pool + sa->off, sa->len);
		return;
	}
	uint64_t sig[ATTRSIG_MAX];
	uint32_t nw = attrsig(l, sig);
	SigEnt *se = NULL;
	uint32_t h = 0;
	Memo m;
	if (nw == 3 * l->n && l->n <= SIG_SHORT) {
		m.start = 0; /* nothing kept */
	} else if (nw) {
		/* two lanes: the multiplies of one word need not wait for the other's */
		uint64_t x = nw, y = 0x9E3779B97F4A7C15u;
		uint32_t i = 0;
		for (; i + 1 < nw; i += 2) {
			x = (x ^ sig[i]) * 0x100000001B3u;
			y = (y ^ sig[i + 1]) * 0xff51afd7ed558ccdu;
		}
		if (i < nw)
			x = (x ^ sig[i]) * 0x100000001B3u;
		x ^= y ^ y >> 29;
		h = (uint32_t)(x >> 32) ^ (uint32_t)x;
		se = &sig_tab[(h * 0x9E3779B1u) >> (32 - SIG_BITS)];
		if (se->h == h && se->gen == memo.gen && se->nw == nw &&
		    memcmp(memo_pool + se->off, sig, nw * sizeof *sig) == 0) {
			w_write(f, memo_pool + se->off + nw * sizeof *sig, se->len);
			*sa = (SigAddr){l->a, l->n, memo.gen, se->off + nw * (uint32_t)sizeof *sig, se->len};
			return;
		}
		m.start = sink.n;
		m.flushes = sink.flushes;
	} else if (memo_get(f, &m, l->a, l->n, MEMO_ATTRS)) {
		return;
	}
	for (uint32_t i = 0; i < l->n; i++) {
		if (i)
			fputs(", ", f);
		put_sym(f, l->a[i].key);
		fputs(": ", f);
		ir_print_value_impl(f, &l->a[i].val);
	}
	if (!nw)
		memo_keep(&m);
	if (!se)
		return;
	/* the signature, then the text, in the pool (8-byte aligned) */
	size_t len = sink.n - m.start, at = (memo.used + 7u) & ~(size_t)7, need = nw * sizeof *sig + len;
	if (m.flushes != sink.flushes || len > MEMO_MAXLEN)
		return;
	if (need > MEMO_POOL - at) {
		memo_drop();
		at = 0;
	}
	memcpy(memo_pool + at, sig, nw * sizeof *sig);
	memcpy(memo_pool + at + nw * sizeof *sig, sink.buf + m.start, len);
	*se = (SigEnt){h, memo.gen, (uint32_t)at, (uint16_t)nw, (uint16_t)len};
	*sa = (SigAddr){l->a, l->n, memo.gen, (uint32_t)(at + nw * sizeof *sig), (uint32_t)len};
	memo.used = (uint32_t)(at + need);
}

/* ir_node_ext() and ir_node_strat() without the calls (ir/graph.c): a
 * node line asks for both, and most nodes have neither */
static const NodeExt node_ext_none;
static const AttrList node_strat_none;

static inline const NodeExt *node_ext(const Node *n)
{
	return n->side && n->side->x ? n->side->x : &node_ext_none;
}

static inline const AttrList *node_strat(const Node *n)
{
	return n->side ? &n->side->l : &node_strat_none;
}

static void print_groups(FILE *f, const Node *n, const NodeExt *x)
{
	if (n->instance) {
		fputs(" {instance name: ", f);
		put_sym(f, n->instance);
		fputc('}', f);
	}
	if (n->has_pattrs || n->pattrs.n) {
		fputs(" primitive_attrs: {", f);
		print_attrs(f, &n->pattrs);
		fputc('}', f);
	}
	if (x->has_cattrs || x->cattrs.n) {
		fputs(" cnode_attrs: {", f);
		print_attrs(f, &x->cattrs);
		fputc('}', f);
	}
	if (x->has_primal || x->primal.n || x->has_fwd) {
		fputs(" cnode_primal_attrs: {", f);
		print_attrs(f, &x->primal);
		if (x->has_fwd) {
			char id[24];
			size_t k = fmt_u64(id, ir_node_fwd_id(n));
			fputs(x->primal.n ? ", forward_node_name: \"" : "forward_node_name: \"", f);
			put_sym(f, x->fwd_prim);
			fputc('_', f);
			w_write(f, id, k);
			fputs("\", forward_unique_id: \"", f);
			w_write(f, id, k);
			fputc('"', f);
		}
		fputc('}', f);
	}
	if (node_strat(n)->n) {
		fputs(" {", f);
		print_attrs(f, node_strat(n));
		fputc('}', f);
	}
}

static inline void print_lines(FILE *f, const char *indent, const char *const *l, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		fputs(indent, f);
		fputs(l[i], f);
		fputc('\n', f);
	}
}

static const char *scope_prefix(int k)
{
	switch (k) {
	case SCOPE_FULLNAME:
		return "      # Fullname with scope: (";
	case SCOPE_SCOPE:
		return "      # Scope: (";
	case SCOPE_LOWER:
		return "      # scope: (";
	case SCOPE_LOWER_NOSPACE:
		return "      #scope: (";
	default:
		return NULL;
	}
}

static void print_args(FILE *f, const Node *n)
{
	fputc('(', f);
	for (uint32_t i = 0; i < n->nargs; i++) {
		if (i)
			fputs(", ", f);
		ir_print_value_impl(f, &n->args[i]);
	}
	fputc(')', f);
}

static void ir_print_node_impl(FILE *f, const Node *n)
{
	const NodeExt *x = node_ext(n);
	if (x->cycle_mark) {
		fputc('\n', f);
		put_sym(f, x->cycle_mark);
		fputc('\n', f);
	}
	if (n->kind == NK_RETURN) {
		fputs("  Return", f);
		print_args(f, n);
		print_groups(f, n, x);
		fputc('\n', f);
		if (n->has_type_line) {
			fputs("      : (", f);
			ir_print_abs_impl(f, &n->out);
			fputs(")\n", f);
		}
	} else {
		fputs("  %", f);
		put_i64(f, n->local);
		fputc('(', f);
		put_name(f, n);
		fputs(") = ", f);
		switch (n->callee_kind) {
		case CK_PRIM:
			if (n->primfunc)
				fputs("PrimFunc_", f);
			put_sym(f, n->prim);
			break;
		case CK_CALL:
			fputs("call ", f);
			ir_print_value_impl(f, &x->callee);
			break;
		default:
			ir_print_value_impl(f, &x->callee);
			if (x->funcunion)
				put_sym(f, x->funcunion);
			break;
		}
		print_args(f, n);
		print_groups(f, n, x);
		fputc('\n', f);
		if (n->has_type_line) {
			fputs("      : (", f);
			print_types(f, n->in_types, n->nin_types);
			fputs(") -> (", f);
			ir_print_abs_impl(f, &n->out);
			fputs(")\n", f);
		}
	}
	print_lines(f, "      ", x->xlines, x->nxlines);
	const char *sp = scope_prefix(n->scope_kind);
	if (sp) {
		fputs(sp, f);
		put_sym(f, n->scope);
		if (n->scope_kind == SCOPE_FULLNAME && n->scope_op) {
			fputs("-op", f);
			put_i64(f, n->scope_op - 1);
		}
		fputs(")\n", f);
	}
	print_lines(f, "      ", x->debug, x->ndebug);
}

static void print_param_line(FILE *f, const Node *p)
{
	print_param_ref(f, p);
	fputs(": ", f);
	ir_print_abs_impl(f, &p->out);
	for (uint32_t i = 0; i < p->nargs; i++) {
		const Value *v = &p->args[i];
		if (v->kind == V_LIST || v->kind == V_TUPLE)
			fputs(" : ", f);
		else
			fputs("  :  ", f);
		ir_print_value_impl(f, v);
	}
	fputc('\n', f);
}

static void print_graph(FILE *f, const Module *m, const Graph *g)
{
	cur_graph = g;
	print_lines(f, "", g->lead, g->nlead);
	if (g->indirect >= 0) {
		fputs("indirect: ", f);
		put_i64(f, g->indirect);
		fputc('\n', f);
	}
	if (g->has_attr_block) {
		fputs("subgraph attr:\n", f);
		for (uint32_t i = 0; i < g->attrs.n; i++) {
			put_sym(f, g->attrs.a[i].key);
			fputc(':', f);
			if (sym_len(g->attrs.a[i].val.text)) {
				fputc(' ', f);
				put_sym(f, g->attrs.a[i].val.text);
			}
			fputc('\n', f);
		}
	}
	if (g->symbol_engine) {
		fputs("subgraph symbol engine: ", f);
		put_sym(f, g->symbol_engine);
		fputc('\n', f);
	}
	if (g->has_instance) {
		fputs("subgraph instance: ", f);
		put_sym(f, g->name);
		if (g->instance_ptr) {
			fputs(" : ", f);
			put_sym(f, g->instance_ptr);
		}
		fputc('\n', f);
	}
	int entry = g->is_entry;
	if (!entry && g->params.n) {
		fputs("# Parameters: ", f);
		put_i64(f, g->params.n);
		fputs(", (", f);
		for (uint32_t i = 0; i < g->params.n; i++) {
			if (i)
				fputs(", ", f);
			ir_print_abs_impl(f, &g->params.a[i]->out);
		}
		fputs(")\n", f);
	}
	print_lines(f, "", g->pre, g->npre);
	fputs("subgraph @", f);
	put_sym(f, g->name);
	if (g->parent) {
		fputs(" parent: [subgraph @", f);
		put_sym(f, g->parent);
		fputc(']', f);
	}
	fputc('(', f);
	if (!entry)
		for (uint32_t i = 0; i < g->params.n; i++) {
			if (i)
				fputs(", ", f);
			print_param_ref(f, g->params.a[i]);
		}
	fputs(") {\n", f);
	for (uint32_t i = 0; i < g->nodes.n; i++)
		if (!g->nodes.a[i]->dead)
			ir_print_node_impl(f, g->nodes.a[i]);
	fputs("}\n", f);
	if (g->has_order) {
		fputs("# Order:\n", f);
		print_lines(f, "", g->order, g->norder);
	}
	(void)m;
}

static void ir_print_module_impl(FILE *f, const Module *m)
{
	const Graph *entry = NULL;
	for (uint32_t i = 0; i < m->graphs.n; i++)
		if (m->graphs.a[i]->is_entry)
			entry = m->graphs.a[i];
	print_lines(f, "", m->lead, m->nlead);
	fputs("# IR entry: @", f);
	put_sym(f, entry ? entry->name : m->entry);
	fputs("\n# Total subgraphs: ", f);
	put_i64(f, m->graphs.n);
	fputs("\n\n", f);
	if (m->has_attrs) {
		fputs("# Attrs:\n", f);
		for (uint32_t i = 0; i < m->attrs.n; i++) {
			put_sym(f, m->attrs.a[i].key);
			fputc(':', f);
			if (sym_len(m->attrs.a[i].val.text)) {
				fputc(' ', f);
				put_sym(f, m->attrs.a[i].val.text);
			}
			fputc('\n', f);
		}
		fputc('\n', f);
	}
	uint32_t np = entry ? entry->params.n : 0;
	fputs("# Total params: ", f);
	put_i64(f, np);
	fputc('\n', f);
	if (np) {
		fputs("# Params:\n", f);
		cur_graph = entry;
		for (uint32_t i = 0; i < np; i++)
			print_param_line(f, entry->params.a[i]);
	}
	fputs("\nNode counting information:\nTotal number of nodes: ", f);
	put_i64(f, ir_count_nodes(m));
	fputs("\nTotal number of cnodes: ", f);
	put_i64(f, ir_count_cnodes(m));
	fputs("\n\n", f);
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		if (i)
			fputs("\n\n", f);
		print_graph(f, m, m->graphs.a[i]);
	}
	if (m->ntrail) {
		fputs("\n\n", f);
		print_lines(f, "", m->trail, m->ntrail);
	}
	cur_graph = NULL;
}

/* every public entry point ends here: the stream may be closed and the
 * arrays freed before the next call */
static void w_end(void)
{
	w_flush();
	sink.f = NULL;
	memo_drop();
}

void ir_print_value(FILE *f, const Value *v)
{
	w_begin(f);
	ir_print_value_impl(f, v);
	w_end();
}

void ir_print_abs(FILE *f, const Abs *a)
{
	w_begin(f);
	ir_print_abs_impl(f, a);
	w_end();
}

void ir_print_node(FILE *f, const Node *n)
{
	w_begin(f);
	ir_print_node_impl(f, n);
	w_end();
}

void ir_print_module(FILE *f, const Module *m)
{
	w_begin(f);
	ir_print_module_impl(f, m);
	w_end();
}
