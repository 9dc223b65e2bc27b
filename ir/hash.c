/* hash.c - the two 64-bit string hashes MindSpore's output depends on.
 * std_hash_bytes: libstdc++'s std::hash<std::string> (_Hash_bytes, seed
 * 0xc70f6907), which names communication groups and inserted operators
 * (ir-format.md §1.10).  rh_hash_bytes: robin_hood's hash_bytes (§1.9). */
#include <string.h>

#include "sappc.h"

static uint64_t load_le(const unsigned char *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = n; i-- > 0;)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t shift_mix(uint64_t v)
{
	return v ^ (v >> 47);
}

#define STD_MUL 0xc6a4a7935bd1e995ULL

/* std_hash_bytes in two steps, for many strings of one length that share
 * a prefix: the blocks that lie inside the first `known` bytes once, the
 * rest per string. */
void std_hash_start(StdHash *st, const void *ptr, size_t len, size_t known)
{
	const unsigned char *p = ptr;
	uint64_t h = 0xc70f6907ULL ^ (len * STD_MUL);
	size_t nblocks = (known < len ? known : len) / 8;
	for (size_t i = 0; i < nblocks; i++) {
		uint64_t d = shift_mix(load_le(p + 8 * i, 8) * STD_MUL) * STD_MUL;
		h ^= d;
		h *= STD_MUL;
	}
	st->h = h;
	st->len = len;
	st->done = 8 * nblocks;
}

uint64_t std_hash_finish(const StdHash *st, const void *ptr)
{
	const unsigned char *p = ptr;
	uint64_t h = st->h;
	size_t len = st->len, nblocks = len / 8;
	for (size_t i = st->done / 8; i < nblocks; i++) {
		uint64_t d = shift_mix(load_le(p + 8 * i, 8) * STD_MUL) * STD_MUL;
		h ^= d;
		h *= STD_MUL;
	}
	size_t rem = len & 7;
	if (rem) {
		h ^= load_le(p + 8 * nblocks, rem);
		h *= STD_MUL;
	}
	h = shift_mix(h) * STD_MUL;
	h = shift_mix(h);
	return h;
}

uint64_t std_hash_bytes(const void *ptr, size_t len)
{
	StdHash st;
	std_hash_start(&st, ptr, len, len);
	return std_hash_finish(&st, ptr);
}

uint64_t rh_hash_bytes(const void *ptr, size_t len)
{
	const uint64_t m = 0xc6a4a7935bd1e995ULL;
	const uint64_t seed = 0xe17a1465ULL;
	const int r = 47;
	const unsigned char *p = ptr;
	uint64_t h = seed ^ (len * m);
	size_t nblocks = len / 8;
	for (size_t i = 0; i < nblocks; i++) {
		uint64_t k = load_le(p + 8 * i, 8);
		k *= m;
		k ^= k >> r;
		k *= m;
		h ^= k;
		h *= m;
	}
	size_t rem = len & 7;
	if (rem) {
		const unsigned char *t = p + 8 * nblocks;
		for (size_t i = rem; i-- > 0;)
			h ^= (uint64_t)t[i] << (8 * i);
		h *= m;
	}
	h ^= h >> r;
	return h;
}
