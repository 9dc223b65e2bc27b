/* value.c - constructors and queries for the tagged Value union that holds
 * operands, attribute values and strategies (ir-format.md §1.5-1.6). */
#include <stdlib.h>
#include <string.h>

#include "sappc.h"

Value value_int(int64_t v, NumType nt)
{
	Value x = {0};
	x.kind = V_INT;
	x.numtype = (uint8_t)nt;
	x.u.i = v;
	return x;
}

Value value_word(const char *s)
{
	Value x = {0};
	x.kind = V_WORD;
	x.text = intern_cstr(s);
	return x;
}

Value value_str(const char *s)
{
	Value x = {0};
	x.kind = V_STR;
	x.text = intern_cstr(s);
	return x;
}

Value value_bool(int b)
{
	Value x = {0};
	x.kind = V_BOOL;
	x.u.i = b != 0;
	return x;
}

Value value_node(Node *n)
{
	Value x = {0};
	x.kind = V_NODE;
	x.u.node = n;
	return x;
}

Value value_tuple_of(Arena *a, const Value *elems, uint32_t n)
{
	Value x = {0};
	x.kind = V_TUPLE;
	x.n = n;
	x.u.elems = n ? arena_dup(a, elems, n * sizeof *elems) : NULL;
	return x;
}

Value *value_tuple_ints(Arena *a, const int64_t *v, int n, NumType nt)
{
	Value *t = arena_alloc(a, sizeof *t);
	t->kind = V_TUPLE;
	t->n = (uint32_t)n;
	t->u.elems = n ? arena_alloc(a, (size_t)n * sizeof(Value)) : NULL;
	for (int i = 0; i < n; i++)
		t->u.elems[i] = value_int(v[i], nt);
	return t;
}

int value_get_int(const Value *v, int64_t *out)
{
	if (!v)
		return 0;
	switch (v->kind) {
	case V_INT:
	case V_BOOL:
		*out = v->u.i;
		return 1;
	case V_WORD:
		if (value_is_word(v, "true")) {
			*out = 1;
			return 1;
		}
		if (value_is_word(v, "false")) {
			*out = 0;
			return 1;
		}
		return 0;
	default:
		return 0;
	}
}

int value_is_word(const Value *v, const char *w)
{
	return v && v->kind == V_WORD && strcmp(sym_str(v->text), w) == 0;
}

int value_truthy(const Value *v, int *out)
{
	int64_t i;
	if (!value_get_int(v, &i))
		return 0;
	*out = i != 0;
	return 1;
}

int value_int_list(const Value *v, int64_t *out, int max)
{
	if (!v)
		return -1;
	if (v->kind == V_INT) {
		if (max < 1)
			return -1;
		out[0] = v->u.i;
		return 1;
	}
	if (v->kind != V_TUPLE && v->kind != V_LIST)
		return -1;
	if ((int)v->n > max)
		return -1;
	for (uint32_t i = 0; i < v->n; i++) {
		if (v->u.elems[i].kind != V_INT)
			return -1;
		out[i] = v->u.elems[i].u.i;
	}
	return (int)v->n;
}

int value_equal(const Value *a, const Value *b)
{
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case V_INT:
	case V_BOOL:
		return a->u.i == b->u.i && a->numtype == b->numtype;
	case V_FLOAT:
		return a->text == b->text && a->numtype == b->numtype;
	case V_STR:
	case V_WORD:
	case V_RAW:
	case V_EXTERN:
		return a->text == b->text;
	case V_NODE:
		return a->u.node == b->u.node;
	case V_GRAPH:
		return a->u.graph == b->u.graph;
	default:
		if (a->n != b->n || a->keyi != b->keyi ||
		    (a->kind == V_CALL && value_call_name(a) != value_call_name(b)))
			return 0;
		for (uint32_t i = 0; i < a->n; i++)
			if (!value_equal(&a->u.elems[i], &b->u.elems[i]) || a->u.elems[i].keyi != b->u.elems[i].keyi)
				return 0;
		return 1;
	}
}

Value value_clone(Arena *a, const Value *v)
{
	Value x = *v;
	uint32_t ns = value_nslots(v);
	if (ns) {
		x.u.elems = arena_alloc(a, ns * sizeof(Value));
		for (uint32_t i = 0; i < ns; i++)
			x.u.elems[i] = value_clone(a, &v->u.elems[i]);
	} else if (v->kind == V_TUPLE || v->kind == V_LIST || v->kind == V_DICT) {
		x.u.elems = NULL;
	}
	return x;
}

uint32_t value_nslots(const Value *v)
{
	switch (v->kind) {
	case V_TUPLE:
	case V_LIST:
	case V_DICT:
		return v->n;
	case V_CALL:
		return v->n + 1;
	default:
		return 0;
	}
}

Value value_call_of(Arena *a, Sym name, const Value *elems, uint32_t n)
{
	Value x = {0};
	x.kind = V_CALL;
	x.n = n;
	x.u.elems = arena_alloc(a, (n + 1) * sizeof *elems);
	if (n)
		memcpy(x.u.elems, elems, n * sizeof *elems);
	x.u.elems[n].kind = V_WORD;
	x.u.elems[n].text = name;
	return x;
}

Sym value_call_name(const Value *v)
{
	return v->u.elems[v->n].text;
}

Sym value_text(const Value *v)
{
	switch (v->kind) {
	case V_TUPLE:
	case V_LIST:
	case V_DICT:
		return 0;
	case V_CALL:
		return value_call_name(v);
	default:
		return v->text;
	}
}

/* The keys of key=value arguments, one index per text for the process
 * (like abs_ext's table: the parser and the passes add to it, threads
 * only read it).  Index 0 is "no key". */
static Sym *key_sym;                 /* index -> key */
static uint32_t nkeys, capkeys;
static uint32_t *key_slot, key_mask; /* open addressing: key -> index */

Sym value_key(const Value *v)
{
	return v->keyi ? key_sym[v->keyi] : 0;
}

static uint32_t key_hash(Sym k)
{
	return (uint32_t)(k * 0x9E3779B1u);
}

void value_set_key(Value *v, Sym key)
{
	if (!key) {
		v->keyi = 0;
		return;
	}
	if (key_slot) {
		for (uint32_t h = key_hash(key) & key_mask; key_slot[h]; h = (h + 1) & key_mask)
			if (key_sym[key_slot[h]] == key) {
				v->keyi = key_slot[h];
				return;
			}
	}
	if (nkeys + 1 >= (1u << 24))
		die("more than %u distinct argument keys", (1u << 24) - 2);
	if (!nkeys)
		nkeys = 1; /* index 0: none */
	if (nkeys >= capkeys) {
		capkeys = capkeys ? 2 * capkeys : 16;
		key_sym = xrealloc(key_sym, capkeys * sizeof *key_sym);
	}
	key_sym[nkeys] = key;
	if (2 * (nkeys + 1) > key_mask) { /* at most half full */
		uint32_t cap = key_mask ? 2 * (key_mask + 1) : 32;
		free(key_slot);
		key_slot = xcalloc(cap, sizeof *key_slot);
		key_mask = cap - 1;
		for (uint32_t i = 1; i < nkeys; i++) {
			uint32_t h = key_hash(key_sym[i]) & key_mask;
			while (key_slot[h])
				h = (h + 1) & key_mask;
			key_slot[h] = i;
		}
	}
	uint32_t h = key_hash(key) & key_mask;
	while (key_slot[h])
		h = (h + 1) & key_mask;
	key_slot[h] = nkeys;
	v->keyi = nkeys++;
}

/* "00" .. "99": two digits per division */
static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
				     "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
				     "8081828384858687888990919293949596979899";

/* The digits are counted first and written in place from the end: no
 * temporary and no copy (the printer calls this half a million times for
 * a rank graph, mostly for numbers of one to five digits). */
size_t fmt_u64(char *p, uint64_t u)
{
	if (u < 10) {
		*p = (char)('0' + u);
		return 1;
	}
	size_t n = u < 100 ? 2 : u < 1000 ? 3 : u < 10000 ? 4 : 5;
	if (u >= 100000) { /* from the bit length, not by a chain of divisions */
		static const uint64_t p10[20] = {1,
						 10,
						 100,
						 1000,
						 10000,
						 100000,
						 1000000,
						 10000000,
						 100000000,
						 1000000000,
						 10000000000u,
						 100000000000u,
						 1000000000000u,
						 10000000000000u,
						 100000000000000u,
						 1000000000000000u,
						 10000000000000000u,
						 100000000000000000u,
						 1000000000000000000u,
						 10000000000000000000u};
		unsigned t = (unsigned)(64 - __builtin_clzll(u)) * 1233 >> 12; /* ~ log10(2) */
		n = t + 1 - (u < p10[t]);
	}
	char *q = p + n;
	/* a redistribution op's name carries a 64-bit hash (twenty digits, a
	 * few thousand a rank): eight digits at a time in 32-bit arithmetic */
	while (u >= 100000000) {
		uint32_t lo = (uint32_t)(u % 100000000);
		u /= 100000000;
		for (int k = 0; k < 4; k++) {
			unsigned d = lo % 100 * 2;
			lo /= 100;
			*--q = digit_pairs[d + 1];
			*--q = digit_pairs[d];
		}
	}
	uint32_t v = (uint32_t)u;
	while (v >= 100) {
		unsigned d = v % 100 * 2;
		v /= 100;
		*--q = digit_pairs[d + 1];
		*--q = digit_pairs[d];
	}
	if (v >= 10) {
		q[-1] = digit_pairs[v * 2 + 1];
		q[-2] = digit_pairs[v * 2];
	} else {
		q[-1] = (char)('0' + v);
	}
	return n;
}

size_t fmt_i64(char *p, int64_t v)
{
	if (v >= 0)
		return fmt_u64(p, (uint64_t)v);
	*p = '-';
	return 1 + fmt_u64(p + 1, (uint64_t)0 - (uint64_t)v);
}
