/* rhmap.c - the iteration order of robin_hood::unordered_map v3.11.5.
 *
 * MindSpore's HashMap is a robin_hood map (ir-format.md §1.9), so two things
 * sappc must reproduce come out in that map's slot order: the order in which
 * attribute dicts are printed, and the order in which the redistribution
 * planner visits tensor dimensions (parallel-lowering.md §4.2 step 3).
 *
 * Only the order matters, so this keeps the map's control state and no
 * values: per slot an "info" byte (distance-from-home in units of infoInc,
 * plus the low hash bits) and the index of the key that sits there.  What is
 * emulated, in the library's terms:
 *   - keyToIdx: hash * mHashMultiplier, h ^= h >> 33; the low 5 bits feed the
 *     info byte (shifted right by infoHashShift), the rest picks the slot;
 *   - insertion: skip forward while our info is smaller than the slot's,
 *     compare keys while equal, then shift the cluster up by one slot;
 *   - growth: 8 slots on first use; when the element count reaches 80% of
 *     the slots the table doubles, unless it is less than half full, in which
 *     case the multiplier changes and it rehashes at the same size; rehashing
 *     re-inserts the old slots in ascending order with the "<=" probe of
 *     insert_move;
 *   - info overflow: an info byte that would pass 255 zeroes the element
 *     budget, which makes the next insertion halve infoInc instead;
 *   - slots past the mask (up to min(80%, 255) of them) are an overflow tail;
 *     iteration walks every slot in index order.
 */
#include <string.h>

#include "sappc.h"

#define RH_INIT_SLOTS 8
#define RH_INFO_BITS 5
#define RH_INFO_INC 32
#define RH_INFO_MASK 31
#define RH_MULT0 0xc4ceb9fe1a85ec53ULL
#define RH_MULT_STEP 0xc4ceb9fe1a85ec54ULL
#define RH_SMALL 64 /* keys handled without touching the heap */

typedef struct RhTab {
	const uint64_t *hash; /* per key index */
	const uint32_t *id;   /* key identity: equal ids are the same key */
	uint64_t mult;
	size_t mask, max_allowed, num;
	unsigned inc, shift;
	uint8_t *info;  /* nbuf + 1 bytes, sentinel 1 at nbuf */
	uint32_t *slot; /* key index in each occupied slot */
	size_t nbuf;
	/* storage: the small case lives here, larger tables on the heap */
	uint8_t info_small[2 * RH_SMALL + 256 + 8];
	uint32_t slot_small[2 * RH_SMALL + 256];
	int heap;
} RhTab;

static size_t max_allowed(size_t slots)
{
	return slots * 80 / 100;
}

static size_t with_buffer(size_t slots)
{
	size_t m = max_allowed(slots);
	return slots + (m < 255 ? m : 255);
}

static void init_data(RhTab *t, size_t slots)
{
	size_t nb = with_buffer(slots);
	if (t->heap) {
		free(t->info);
		free(t->slot);
	}
	if (nb + 1 <= sizeof t->info_small && nb <= sizeof t->slot_small / sizeof t->slot_small[0]) {
		t->info = t->info_small;
		t->slot = t->slot_small;
		t->heap = 0;
	} else {
		t->info = xmalloc(nb + 1);
		t->slot = xmalloc(nb * sizeof *t->slot);
		t->heap = 1;
	}
	memset(t->info, 0, nb);
	t->info[nb] = 1; /* sentinel */
	t->nbuf = nb;
	t->num = 0;
	t->mask = slots - 1;
	t->max_allowed = max_allowed(slots);
	t->inc = RH_INFO_INC;
	t->shift = 0;
}

static void key_to_idx(const RhTab *t, uint32_t k, size_t *idx, unsigned *info)
{
	uint64_t h = t->hash[k] * t->mult;
	h ^= h >> 33;
	*info = t->inc + (unsigned)((h & RH_INFO_MASK) >> t->shift);
	*idx = (size_t)(h >> RH_INFO_BITS) & t->mask;
}

static int try_increase_info(RhTab *t)
{
	if (t->inc <= 2)
		return 0;
	t->inc >>= 1;
	t->shift++;
	for (size_t i = 0; i < t->nbuf; i++)
		t->info[i] = (uint8_t)((t->info[i] >> 1) & 0x7f);
	t->info[t->nbuf] = 1;
	t->max_allowed = max_allowed(t->mask + 1);
	return 1;
}

/* Move slots [ins, empty) up by one; the info bytes gain one step. */
static void shift_up(RhTab *t, size_t empty, size_t ins)
{
	for (size_t i = empty; i != ins; i--) {
		t->slot[i] = t->slot[i - 1];
		t->info[i] = (uint8_t)(t->info[i - 1] + t->inc);
		if (t->info[i] + t->inc > 0xFF)
			t->max_allowed = 0;
	}
}

static void place(RhTab *t, uint32_t k, size_t idx, unsigned info)
{
	size_t ins = idx;
	unsigned ins_info = info;
	if (ins_info + t->inc > 0xFF)
		t->max_allowed = 0;
	while (t->info[idx] != 0) {
		idx++;
		info += t->inc;
	}
	if (idx >= t->nbuf)
		die("rhmap: probe ran past the overflow area");
	if (idx != ins)
		shift_up(t, idx, ins);
	t->slot[ins] = k;
	t->info[ins] = (uint8_t)ins_info;
	t->num++;
}

/* insert_move: used while rehashing; keys are known to be distinct. */
static void insert_move(RhTab *t, uint32_t k)
{
	if (t->max_allowed == 0 && !try_increase_info(t))
		die("rhmap: info overflow while rehashing");
	size_t idx;
	unsigned info;
	key_to_idx(t, k, &idx, &info);
	while (info <= t->info[idx]) {
		idx++;
		info += t->inc;
	}
	place(t, k, idx, info);
}

static void rehash(RhTab *t, size_t slots)
{
	size_t oldn = t->nbuf;
	uint32_t keys_small[2 * RH_SMALL + 256];
	uint32_t *keys = oldn <= sizeof keys_small / sizeof keys_small[0] ? keys_small : xmalloc(oldn * sizeof *keys);
	size_t nk = 0;
	for (size_t i = 0; i < oldn; i++)
		if (t->info[i])
			keys[nk++] = t->slot[i];
	init_data(t, slots);
	for (size_t i = 0; i < nk; i++)
		insert_move(t, keys[i]);
	if (keys != keys_small)
		free(keys);
}

static void increase_size(RhTab *t)
{
	if (t->mask == 0) {
		init_data(t, RH_INIT_SLOTS);
		return;
	}
	size_t maxa = max_allowed(t->mask + 1);
	if (t->num < maxa && try_increase_info(t))
		return;
	if (t->num * 2 < maxa) {
		/* "bad hash" guard: same size, new multiplier */
		t->mult += RH_MULT_STEP;
		rehash(t, t->mask + 1);
	} else {
		rehash(t, (t->mask + 1) * 2);
	}
}

/* insertKeyPrepareEmptySpot: returns 1 if inserted, 0 if the key was there. */
static int insert(RhTab *t, uint32_t k)
{
	for (;;) {
		if (t->mask == 0) { /* nothing allocated yet */
			increase_size(t);
			continue;
		}
		size_t idx;
		unsigned info;
		key_to_idx(t, k, &idx, &info);
		while (info < t->info[idx]) {
			idx++;
			info += t->inc;
		}
		while (info == t->info[idx]) {
			if (t->id[t->slot[idx]] == t->id[k])
				return 0;
			idx++;
			info += t->inc;
		}
		if (t->num >= t->max_allowed) {
			increase_size(t);
			continue;
		}
		place(t, k, idx, info);
		return 1;
	}
}

uint32_t rh_order(const uint64_t *hash, const uint32_t *id, uint32_t n, uint32_t *order)
{
	RhTab t;
	memset(&t, 0, sizeof t);
	t.hash = hash;
	t.id = id;
	t.mult = RH_MULT0;
	for (uint32_t k = 0; k < n; k++)
		insert(&t, k);
	uint32_t m = 0;
	for (size_t i = 0; i < t.nbuf; i++)
		if (t.info[i])
			order[m++] = t.slot[i];
	if (t.heap) {
		free(t.info);
		free(t.slot);
	}
	return m;
}

uint64_t rh_hash_int(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

void rh_order_ints(int r, int *order)
{
	uint64_t hs[RH_SMALL], *h = r <= RH_SMALL ? hs : xmalloc((size_t)r * sizeof *h);
	uint32_t is[RH_SMALL], *id = r <= RH_SMALL ? is : xmalloc((size_t)r * sizeof *id);
	uint32_t os[RH_SMALL], *o = r <= RH_SMALL ? os : xmalloc((size_t)r * sizeof *o);
	for (int i = 0; i < r; i++) {
		h[i] = rh_hash_int((uint64_t)i);
		id[i] = (uint32_t)i;
	}
	uint32_t m = rh_order(h, id, (uint32_t)(r > 0 ? r : 0), o);
	for (uint32_t i = 0; i < m; i++)
		order[i] = (int)o[i];
	if (h != hs) {
		free(h);
		free(id);
		free(o);
	}
}

/* Attribute lists have no duplicate keys in MindSpore (they are maps).  Should
 * one reach us anyway, its later occurrences follow the first one, so no
 * attribute is lost. */
void rh_order_attrs(Attr *a, uint32_t n)
{
	if (n < 2)
		return;
	int small = n <= RH_SMALL;
	uint64_t hs[RH_SMALL], *h = small ? hs : xmalloc(n * sizeof *h);
	uint32_t is[RH_SMALL], *id = small ? is : xmalloc(n * sizeof *id);
	uint32_t os[RH_SMALL], *o = small ? os : xmalloc(n * sizeof *o);
	Attr ts[RH_SMALL], *tmp = small ? ts : xmalloc(n * sizeof *tmp);
	for (uint32_t i = 0; i < n; i++) {
		const char *s = sym_str(a[i].key);
		h[i] = rh_hash_bytes(s, sym_len(a[i].key));
		id[i] = a[i].key;
	}
	uint32_t m = rh_order(h, id, n, o), k = 0;
	for (uint32_t i = 0; i < m; i++) {
		tmp[k++] = a[o[i]];
		for (uint32_t j = o[i] + 1; j < n && m < n; j++)
			if (a[j].key == a[o[i]].key)
				tmp[k++] = a[j];
	}
	memcpy(a, tmp, n * sizeof *a);
	if (!small) {
		free(h);
		free(id);
		free(o);
		free(tmp);
	}
}
