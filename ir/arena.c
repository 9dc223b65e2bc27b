/* arena.c - bump allocation for everything a Module owns, plus the x*alloc
 * wrappers that exit cleanly (status 3) when memory runs out. */
#define _DEFAULT_SOURCE 1 /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "sappc.h"

typedef struct Chunk {
	struct Chunk *next;
	size_t size, used;
	size_t mapped; /* > 0: mmap'd region of this many bytes starting at the chunk */
	_Alignas(16) unsigned char data[];
} Chunk;

struct Arena {
	Chunk *head;
	size_t total;
};

static NORETURN void oom(void)
{
	fputs("sappc: error: out of memory\n", stderr);
	exit(3);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t m)
{
	void *p = calloc(n ? n : 1, m ? m : 1);
	if (!p)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

/* A pass that freed large working tables while the names it interned
 * stayed leaves them as holes in the heap, resident until malloc reuses
 * them: glibc's malloc_trim gives their pages back (on a 4096-layer
 * training step, 80 MB after autodiff).  Elsewhere nothing to do. */
static int heap_kept; /* xmalloc_keep() was called */

void xmalloc_trim(void)
{
#if defined(__GLIBC__)
	if (!heap_kept)
		malloc_trim(0);
#endif
}

/* A process that makes and frees the same tables again and again (an
 * --all-ranks worker, one rank after another) keeps what it frees: by
 * default glibc maps a block of 128 KiB or more on its own and unmaps it
 * when freed, and gives the heap's free top back past 128 KiB, so every
 * rank faulted the same pages in again (a minor fault each 4 KiB, a trip
 * to the host on a VM).  The heap then stays at the largest rank's size,
 * and xmalloc_trim (after autodiff and gradcomm, which run per rank in a
 * training step) leaves it so. */
void xmalloc_keep(void)
{
	heap_kept = 1; /* and xmalloc_trim no longer trims */
#if defined(__GLIBC__)
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

/* The whole pages inside [p, p + n), part of a block the caller holds,
 * are dead (a pass's table walked once, back to front): give them back
 * now rather than when the block is freed.  Where the system takes them
 * they read as zero after; the caller reads them no more either way. */
void xmem_release(void *p, size_t n)
{
#if defined(MADV_DONTNEED)
	static uintptr_t page;
	if (!page) {
		long ps = sysconf(_SC_PAGESIZE);
		page = ps > 0 ? (uintptr_t)ps : 4096;
	}
	uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + n) & ~(page - 1);
	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
#else
	(void)p;
	(void)n;
#endif
}

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

Arena *arena_new(void)
{
	return xcalloc(1, sizeof(Arena));
}

/* A chunk of sz usable bytes, zeroed.  Chunks grow with the arena (a
 * lowered rank graph takes a gigabyte or more); from 2 MiB on they are
 * mapped on a 2 MiB boundary and offered to transparent huge pages, which
 * turns hundreds of thousands of page faults into hundreds.  Anything that
 * fails falls back to calloc. */
#define HUGE_SZ ((size_t)2 << 20)

/* Mapped chunks of freed arenas (a pass's own arena, an earlier rank's
 * module) wait here for the next arena instead of going back to the
 * system: their pages are resident, and zeroing the part that was used
 * costs far less than faulting fresh pages in (on a VM, each first touch
 * is a trip to the host).  Up to POOL_MAX bytes; `used` is the dirty part. */
#define POOL_MAX ((size_t)1 << 30)
static Chunk *pool;
static size_t pool_bytes;

/* the largest pooled chunk that holds need bytes: resident pages first */
static Chunk *pool_take(size_t need)
{
	Chunk **best = NULL;
	for (Chunk **pc = &pool; *pc; pc = &(*pc)->next)
		if ((*pc)->size >= need && (!best || (*pc)->size > (*best)->size))
			best = pc;
	if (!best)
		return NULL;
	Chunk *c = *best;
	*best = c->next;
	pool_bytes -= c->mapped;
	memset(c->data, 0, c->used);
	c->next = NULL;
	c->used = 0;
	return c;
}

static Chunk *chunk_new(size_t sz, size_t need)
{
	size_t want = sizeof(Chunk) + sz;
#if defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
	if (want >= HUGE_SZ) {
		Chunk *r = pool_take(need);
		if (r)
			return r;
		want = (want + HUGE_SZ - 1) & ~(HUGE_SZ - 1);
		size_t len = want + HUGE_SZ;
		unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED) {
			uintptr_t a = ((uintptr_t)p + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1);
			unsigned char *q = (unsigned char *)a;
			if (q > p)
				munmap(p, (size_t)(q - p));
			if (p + len > q + want)
				munmap(q + want, (size_t)(p + len - (q + want)));
			madvise(q, want, MADV_HUGEPAGE);
			Chunk *c = (Chunk *)q;
			c->size = want - sizeof(Chunk);
			c->mapped = want;
			return c;
		}
	}
#endif
	Chunk *c = xcalloc(1, want); /* chunks are never reused: zero once */
	c->size = sz;
	return c;
}

/* Blocks are rounded to 8 bytes, the strictest alignment of anything an
 * arena holds (pointers, int64_t, double): a rank graph is millions of
 * small blocks (a 24-byte operand, a 152-byte Node), and rounding to 16
 * cost a tenth of them. */
void *arena_alloc(Arena *a, size_t n)
{
	n = (n + 7) & ~(size_t)7;
	Chunk *c = a->head;
	if (!c || c->size - c->used < n) {
		/* 64 KiB, then half of what the arena holds, up to 64 MiB.  Small
		 * first: --simulate keeps a module per rank (thousands of 40 KB
		 * graphs), and a calloc'd chunk that reuses freed heap memory is
		 * resident in full, used or not (1 MiB chunks made -n 1024 hold
		 * 1.2 GB for 40 MB of graphs) */
		size_t grow = a->total / 2;
		grow = grow < ((size_t)64 << 10) ? (size_t)64 << 10 : grow > ((size_t)64 << 20) ? (size_t)64 << 20 : grow;
		size_t sz = n > grow / 2 ? n : grow;
		c = chunk_new(sz, n);
		c->used = 0;
		/* a huge one-off block goes behind the current chunk so the
		 * current one keeps serving small requests */
		if (a->head && n > grow / 2) {
			c->next = a->head->next;
			a->head->next = c;
		} else {
			c->next = a->head;
			a->head = c;
		}
		a->total += c->size;
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

void *arena_dup(Arena *a, const void *p, size_t n)
{
	void *q = arena_alloc(a, n);
	if (n)
		memcpy(q, p, n);
	return q;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
	char *q = arena_alloc(a, n + 1);
	memcpy(q, s, n);
	q[n] = 0;
	return q;
}

size_t arena_used(const Arena *a)
{
	return a->total;
}

void arena_free(Arena *a)
{
	if (!a)
		return;
	for (Chunk *c = a->head, *n; c; c = n) {
		n = c->next;
		if (c->mapped && pool_bytes + c->mapped <= POOL_MAX) {
			c->next = pool;
			pool = c;
			pool_bytes += c->mapped;
		} else if (c->mapped) {
			munmap(c, c->mapped);
		} else {
			free(c);
		}
	}
	free(a);
}
