/* keymap.c - a map from short int64 arrays to values that never move.
 *
 * The lowering caches what it works out per distinct group of ranks, per
 * (device matrix, mask) and per redistribution transfer: a rank graph has
 * hundreds of thousands of communication ops but only as many distinct
 * keys as the layer has shapes.  One open-addressing table (linear
 * probing, at most half full) serves them all.  Keys and values live in
 * the map's own arena, so a value pointer stays valid while the map grows;
 * entries are numbered in insertion order, which is how a caller walks
 * them (to free what its values own). */
#include <string.h>

#include "sappc.h"

/* Four independent multiply chains over at most KEY_SAMPLE words: a long
 * key (a group of 4096 ranks, looked up once per weight use) is hashed by
 * an even sample of its words.  Equal keys still hash equally, and
 * keymap_get compares whole keys, so a sample only costs probes. */
#define KEY_SAMPLE 64
static uint64_t key_hash(const int64_t *k, uint32_t n)
{
	const uint64_t P = 1099511628211ULL;
	uint64_t h0 = 1469598103934665603ULL ^ n, h1 = 0x9e3779b97f4a7c15ULL, h2 = 0xc2b2ae3d27d4eb4fULL,
	         h3 = 0x165667b19e3779f9ULL;
	uint32_t step = n > KEY_SAMPLE ? n / (KEY_SAMPLE / 4) : 4, i = 0;
	for (; i + 4 <= n; i += step) {
		h0 = (h0 ^ (uint64_t)k[i]) * P;
		h1 = (h1 ^ (uint64_t)k[i + 1]) * P;
		h2 = (h2 ^ (uint64_t)k[i + 2]) * P;
		h3 = (h3 ^ (uint64_t)k[i + 3]) * P;
	}
	for (i = n & ~3u; i < n; i++)
		h0 = (h0 ^ (uint64_t)k[i]) * P;
	if (n > KEY_SAMPLE)
		h0 = (h0 ^ (uint64_t)k[n - 1]) * P;
	uint64_t h = h0 ^ (h1 * 0x9e3779b97f4a7c15ULL) ^ (h2 * 0xc2b2ae3d27d4eb4fULL) ^ (h3 * 0x165667b19e3779f9ULL);
	h *= P;
	return h ^ (h >> 29);
}

void keymap_init(KeyMap *m, size_t vsize)
{
	memset(m, 0, sizeof *m);
	m->vsize = vsize;
}

static void grow(KeyMap *m)
{
	uint32_t ncap = m->cap ? m->cap * 2 : 64;
	uint32_t *ns = xcalloc(ncap, sizeof *ns);
	for (uint32_t i = 0; i < m->n; i++) {
		uint32_t j = (uint32_t)m->ent[i].h & (ncap - 1);
		while (ns[j])
			j = (j + 1) & (ncap - 1);
		ns[j] = i + 1;
	}
	free(m->slot);
	m->slot = ns;
	m->cap = ncap;
}

void *keymap_get(KeyMap *m, const int64_t *key, uint32_t nkey, int *fresh)
{
	if (!m->arena)
		m->arena = arena_new();
	if (2 * (m->n + 1) > m->cap)
		grow(m);
	uint64_t h = key_hash(key, nkey);
	uint32_t j = (uint32_t)h & (m->cap - 1);
	for (; m->slot[j]; j = (j + 1) & (m->cap - 1)) {
		KeyEnt *e = &m->ent[m->slot[j] - 1];
		if (e->h == h && e->nkey == nkey && (!nkey || memcmp(e->key, key, nkey * sizeof *key) == 0)) {
			if (fresh)
				*fresh = 0;
			return e->val;
		}
	}
	if (m->n == m->ecap) {
		m->ecap = m->ecap ? 2 * m->ecap : 32;
		m->ent = xrealloc(m->ent, m->ecap * sizeof *m->ent);
	}
	KeyEnt *e = &m->ent[m->n];
	e->h = h;
	e->nkey = nkey;
	e->key = nkey ? arena_dup(m->arena, key, nkey * sizeof *key) : NULL;
	e->val = arena_alloc(m->arena, m->vsize ? m->vsize : 1);
	m->slot[j] = ++m->n;
	if (fresh)
		*fresh = 1;
	return e->val;
}

void *keymap_at(const KeyMap *m, uint32_t i, const int64_t **key, uint32_t *nkey)
{
	if (key)
		*key = m->ent[i].key;
	if (nkey)
		*nkey = m->ent[i].nkey;
	return m->ent[i].val;
}

void keymap_free(KeyMap *m)
{
	free(m->slot);
	free(m->ent);
	if (m->arena)
		arena_free(m->arena);
	keymap_init(m, m->vsize);
}
