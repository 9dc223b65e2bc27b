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
static uint32_t *table;      /* slot -> Sym (0 empty) */
static uint32_t tmask;
static char *block;
static size_t block_left;
static Vec(char *) blocks;

/* Eight bytes a step: names are long ("Default/network-.../Reshape"), and a
 * byte-at-a-time hash was a fifth of what interning a full name cost.  The
 * value only places strings in the table; nothing observable depends on it. */
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
	memcpy(&w, s + i, n - i);
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 29;
	return (uint32_t)h;
}

static void rehash(void)
{
	uint32_t ncap = tmask ? (tmask + 1) * 2 : 4096;
	free(table);
	table = xcalloc(ncap, sizeof *table);
	tmask = ncap - 1;
	for (uint32_t i = 1; i < nents; i++) {
		uint32_t j = ents[i].hash & tmask;
		while (table[j])
			j = (j + 1) & tmask;
		table[j] = i;
	}
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

Sym intern(const char *s, size_t n)
{
	if (!ents) {
		capents = 4096;
		ents = xmalloc(capents * sizeof *ents);
		ents[0] = (Entry){"", 0, 0};
		nents = 1;
		rehash();
	}
	uint32_t h = hash(s, n);
	uint32_t j = h & tmask;
	while (table[j]) {
		Entry *e = &ents[table[j]];
		if (e->hash == h && e->len == n && memcmp(e->s, s, n) == 0)
			return table[j];
		j = (j + 1) & tmask;
	}
	if (nents == capents) {
		capents *= 2;
		ents = xrealloc(ents, capents * sizeof *ents);
	}
	ents[nents] = (Entry){store(s, n), (uint32_t)n, h};
	table[j] = nents;
	Sym id = nents++;
	if (nents * 2 > tmask + 1)
		rehash();
	return id;
}

Sym intern_cstr(const char *s)
{
	return intern(s, strlen(s));
}

const char *sym_str(Sym s)
{
	return s && s < nents ? ents[s].s : "";
}

size_t sym_len(Sym s)
{
	return s && s < nents ? ents[s].len : 0;
}

void intern_free_all(void)
{
	for (uint32_t i = 0; i < blocks.n; i++)
		free(blocks.a[i]);
	vec_free(&blocks);
	free(ents);
	free(table);
	ents = NULL;
	table = NULL;
	nents = capents = tmask = 0;
	block = NULL;
	block_left = 0;
}
