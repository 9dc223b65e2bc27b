/* intern.c - process-wide string interning.  Identifiers are interned once
 * while parsing; everything after that compares Sym integers.  Open
 * addressing on a power-of-two table, a word-at-a-time hash, strings stored in
 * large blocks (never moved, so sym_str pointers stay valid). */
#include <stdlib.h>
#include <string.h>

#include "sappc.h"

typedef struct {
	const char *s;
	uint32_t len, hash;
} Entry;

static Entry *ents;          /* index = Sym */
static uint32_t nents, capents;
static uint64_t *table;      /* slot -> hash << 32 | Sym (0 empty) */
static uint32_t tmask;
static char *block;
static size_t block_left;
static Vec(char *) blocks;

/* Eight bytes a step: names are long ("Default/network-.../Reshape"), and a
 * byte-at-a-time hash was a fifth of what interning a full name cost.  The
 * last bytes are one load too (overlapping the step before when the name is
 * eight bytes or longer), not a memcpy call of a variable length.  The value
 * only places strings in the table; nothing observable depends on it. */
static uint32_t hash(const char *s, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, s + i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	uint64_t w = 0;
	if (n >= 8) {
		if (i < n) {
			memcpy(&w, s + n - 8, 8);
			w >>= 8 * (8 - (n - i));
		}
	} else if (n >= 4) {
		uint32_t a, b;
		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		w = (uint64_t)a | (uint64_t)b << 32;
	} else if (n) {
		w = (uint64_t)(unsigned char)s[0] | (uint64_t)(unsigned char)s[n / 2] << 8 |
		    (uint64_t)(unsigned char)s[n - 1] << 16;
	}
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 29;
	return (uint32_t)h;
}

/* A slot holds the Sym and its hash: a probe that meets another string
 * costs no trip to ents[], and growing the table reads only the table. */
static void rehash(void)
{
	uint32_t ncap = tmask ? (tmask + 1) * 2 : 4096;
	uint64_t *old = table;
	uint32_t ocap = tmask ? tmask + 1 : 0;
	table = xcalloc(ncap, sizeof *table);
	tmask = ncap - 1;
	for (uint32_t k = 0; k < ocap; k++) {
		if (!old[k])
			continue;
		uint32_t j = (uint32_t)(old[k] >> 32) & tmask;
		while (table[j])
			j = (j + 1) & tmask;
		table[j] = old[k];
	}
	free(old);
}

static const char *store(const char *s, size_t n)
{
	if (n + 1 > block_left) {
		size_t sz = n + 1 > 65536 ? n + 1 : 65536;
		block = xmalloc(sz);
		vec_push(&blocks, block);
		block_left = sz;
	}
	char *p = block;
	memcpy(p, s, n);
	p[n] = 0;
	block += n + 1;
	block_left -= n + 1;
	return p;
}

/* The words a file repeats (operator names, attribute keys, "Tensor[Float32]")
 * are most of what the reader interns, and with a few hundred thousand
 * names in the table each of their probes was a cache miss (three quarters
 * of intern's time).  A small direct-mapped cache in front keeps a short
 * name's bytes beside its Sym: a hit reads one line, not the table, the
 * entry and the stored string. */
#define FRONT_BITS 10
#define FRONT_MAX 20
typedef struct {
	uint32_t hash, len;
	Sym id;
	char s[FRONT_MAX];
} Front;
static Front front[1u << FRONT_BITS];

/* A longer name is found again through its own small table, which keeps
 * where its bytes are: an --all-ranks worker interns the same few thousand
 * full names ("Default/network-.../wq-Linear/AllGather") for every rank,
 * and each look through the big table was two or three cache misses (its
 * slot, the entry, the text) where this is one or two. */
#define LFRONT_BITS 10
typedef struct {
	uint32_t hash, len;
	Sym id;
	const char *s;
} LongFront;
static LongFront lfront[1u << LFRONT_BITS];

static Sym intern_table(const char *s, size_t n, uint32_t h);

static Sym intern_long(const char *s, size_t n, uint32_t h)
{
	LongFront *f = &lfront[h >> (32 - LFRONT_BITS)];
	if (f->hash == h && f->len == n && f->id && memcmp(f->s, s, n) == 0)
		return f->id;
	Sym id = intern_table(s, n, h);
	*f = (LongFront){h, (uint32_t)n, id, ents[id].s};
	return id;
}

Sym intern(const char *s, size_t n)
{
	if (!ents)
		return intern_table(s, n, hash(s, n));
	if (n > FRONT_MAX)
		return intern_long(s, n, hash(s, n));
	uint32_t h = hash(s, n);
	Front *f = &front[h >> (32 - FRONT_BITS)];
	if (f->hash == h && f->len == n && f->id && memcmp(f->s, s, n) == 0)
		return f->id;
	Sym id = intern_table(s, n, h);
	f->hash = h;
	f->len = (uint32_t)n;
	f->id = id;
	memcpy(f->s, s, n);
	return id;
}

static Sym intern_table(const char *s, size_t n, uint32_t h)
{
	if (!ents) {
		capents = 4096;
		ents = xmalloc(capents * sizeof *ents);
		ents[0] = (Entry){"", 0, 0};
		nents = 1;
		rehash();
	}
	uint32_t j = h & tmask;
	while (table[j]) {
		if ((uint32_t)(table[j] >> 32) == h) {
			Sym id = (Sym)(uint32_t)table[j];
			const Entry *e = &ents[id];
			if (e->len == n && memcmp(e->s, s, n) == 0)
				return id;
		}
		j = (j + 1) & tmask;
	}
	if (nents == capents) {
		capents *= 2;
		ents = xrealloc(ents, capents * sizeof *ents);
	}
	ents[nents] = (Entry){store(s, n), (uint32_t)n, h};
	table[j] = (uint64_t)h << 32 | nents;
	Sym id = nents++;
	if (nents * 2 > tmask + 1)
		rehash();
	return id;
}

/* The probe of a name seen once (a node's scope: 139 000 of them in the
 * 4096-layer file) misses the cache, and was most of what interning it
 * cost: a caller with other work to do first takes the hash and a
 * prefetch of the slot the probe starts at, and interns later (before any
 * other intern, so that Syms are made in the same order). */
uint32_t intern_prepare(const char *s, size_t n)
{
	uint32_t h = hash(s, n);
	if (table)
		__builtin_prefetch(&table[h & tmask]);
	return h;
}

Sym intern_hashed(const char *s, size_t n, uint32_t h)
{
	if (n > FRONT_MAX || !ents)
		return intern_table(s, n, h);
	return intern(s, n);
}

Sym intern_cstr(const char *s)
{
	return intern(s, strlen(s));
}

/* ------------------------------------------------------------ deferred
 * A name made by the hundred thousand and then only printed - the
 * lowering's "redistribution_op_<hash>AllGather" - is kept as its parts:
 * prefix Sym, a number, suffix Sym.  Its Sym has SYM_DEFERRED set and
 * indexes defs[]; making one is an append (a table to find equal parts
 * again cost a cache miss or two per name, more than the name is worth).
 * So two deferred Syms of the same text may differ: sym_same() is the
 * equality of text.  sym_str() interns the text the first time somebody
 * asks for it, and sym_format() writes it without interning, which is
 * what the printer does.  Once formed, a name keeps its interned text
 * in place of its parts (16 bytes a name, not 24 with a field of its own:
 * a 4096-layer rank graph makes half a million). */
typedef struct {
	Sym prefix; /* DEF_FORMED in suffix: the interned text */
	Sym suffix;
	uint64_t v;
} Deferred;
#define DEF_FORMED 0x80000000u /* never in an interned Sym */

static Deferred *defs;
static uint32_t ndefs, capdefs;

Sym sym_defer(Sym prefix, uint64_t v, Sym suffix)
{
	if (ndefs == capdefs) {
		capdefs = capdefs ? 2 * capdefs : 4096;
		defs = xrealloc(defs, capdefs * sizeof *defs);
	}
	defs[ndefs] = (Deferred){prefix, suffix, v};
	return SYM_DEFERRED | ndefs++;
}

int sym_is_deferred(Sym s)
{
	return (s & SYM_DEFERRED) && (s & ~SYM_DEFERRED) < ndefs;
}

int sym_same(Sym a, Sym b)
{
	if (a == b)
		return 1;
	if (!sym_is_deferred(a) && !sym_is_deferred(b))
		return 0; /* interned: one Sym per text */
	if (sym_is_deferred(a) && sym_is_deferred(b)) {
		const Deferred *x = &defs[a & ~SYM_DEFERRED], *y = &defs[b & ~SYM_DEFERRED];
		if (x->prefix == y->prefix && x->v == y->v && x->suffix == y->suffix)
			return 1; /* the same parts, or both formed (their v equal too) */
	}
	return sym_len(a) == sym_len(b) && memcmp(sym_str(a), sym_str(b), sym_len(a)) == 0;
}

Sym sym_prefixed(const char *pre, Sym s)
{
	size_t pl = strlen(pre);
	char buf[512];
	if (sym_is_deferred(s) && !(defs[s & ~SYM_DEFERRED].suffix & DEF_FORMED)) {
		const Deferred *d = &defs[s & ~SYM_DEFERRED];
		size_t k = ents[d->prefix].len;
		if (pl + k >= sizeof buf)
			return 0;
		memcpy(buf, pre, pl);
		memcpy(buf + pl, ents[d->prefix].s, k);
		uint64_t v = d->v;
		Sym suffix = d->suffix;
		return sym_defer(intern(buf, pl + k), v, suffix);
	}
	size_t k = sym_len(s);
	if (pl + k >= sizeof buf)
		return 0;
	memcpy(buf, pre, pl);
	memcpy(buf + pl, sym_str(s), k);
	return intern(buf, pl + k);
}

size_t sym_format(Sym s, char *buf, size_t cap)
{
	if (!sym_is_deferred(s)) {
		size_t n = sym_len(s) < cap ? sym_len(s) : cap - 1;
		memcpy(buf, sym_str(s), n);
		buf[n] = 0;
		return n;
	}
	const Deferred *d = &defs[s & ~SYM_DEFERRED];
	if (d->suffix & DEF_FORMED) { /* prefix and suffix, as below: the text less the digits */
		char digits[24];
		if (ents[d->prefix].len - fmt_u64(digits, d->v) + 20 >= cap)
			return 0;
		return sym_format(d->prefix, buf, cap);
	}
	size_t pl = ents[d->prefix].len, sl = ents[d->suffix].len;
	if (pl + 20 + sl >= cap)
		return 0;
	memcpy(buf, ents[d->prefix].s, pl);
	size_t n = pl + fmt_u64(buf + pl, d->v);
	memcpy(buf + n, ents[d->suffix].s, sl);
	n += sl;
	buf[n] = 0;
	return n;
}

int sym_has_prefix(Sym s, const char *p)
{
	size_t n = strlen(p);
	if (!sym_is_deferred(s))
		return sym_len(s) >= n && memcmp(sym_str(s), p, n) == 0;
	const Deferred *d = &defs[s & ~SYM_DEFERRED];
	if (d->suffix & DEF_FORMED)
		return sym_has_prefix(d->prefix, p);
	/* the text starts with the prefix's: most answers need no more */
	size_t pl = ents[d->prefix].len;
	if (memcmp(ents[d->prefix].s, p, pl < n ? pl : n) != 0)
		return 0;
	if (pl >= n)
		return 1;
	char buf[512];
	size_t cap = pl + 21 + ents[d->suffix].len;
	char *t = cap <= sizeof buf ? buf : xmalloc(cap);
	size_t k = sym_format(s, t, cap > sizeof buf ? cap : sizeof buf);
	int r = k >= n && memcmp(t, p, n) == 0;
	if (t != buf)
		free(t);
	return r;
}

static Sym def_real(Sym s)
{
	Deferred *d = &defs[s & ~SYM_DEFERRED];
	if (!(d->suffix & DEF_FORMED)) {
		char buf[512];
		size_t cap = ents[d->prefix].len + 21 + ents[d->suffix].len;
		char *p = cap <= sizeof buf ? buf : xmalloc(cap);
		size_t n = sym_format(s, p, cap > sizeof buf ? cap : sizeof buf);
		Sym real = intern(p, n);
		if (p != buf)
			free(p);
		d = &defs[s & ~SYM_DEFERRED]; /* interning makes no deferred name, but read again */
		d->prefix = real;
		d->suffix |= DEF_FORMED;
	}
	return d->prefix;
}

/* (entry 0 is the empty string, Sym 0) */
/* A deferred Sym's text is interned by def_real(), which can move ents[]:
 * the index is taken first, in its own statement, and only then is ents read
 * (in "ents[def_real(s)]" the compiler may load ents before the call). */
const char *sym_str(Sym s)
{
	if (s < nents)
		return ents[s].s;
	if (!sym_is_deferred(s))
		return "";
	Sym r = def_real(s);
	return ents[r].s;
}

size_t sym_len(Sym s)
{
	if (s < nents)
		return ents[s].len;
	if (!sym_is_deferred(s))
		return 0;
	Sym r = def_real(s);
	return ents[r].len;
}

/* bumped by intern_free_all: a memo of Syms kept across calls (static)
 * compares it to know its Syms still name the same texts */
static uint32_t epoch;

void intern_free_all(void)
{
	for (uint32_t i = 0; i < blocks.n; i++)
		free(blocks.a[i]);
	vec_free(&blocks);
	free(ents);
	free(table);
	free(defs);
	defs = NULL;
	ndefs = capdefs = 0;
	ents = NULL;
	table = NULL;
	nents = capents = tmask = 0;
	block = NULL;
	block_left = 0;
	memset(front, 0, sizeof front);
	memset(lfront, 0, sizeof lfront);
	epoch++;
}

uint32_t intern_epoch(void)
{
	return epoch;
}
