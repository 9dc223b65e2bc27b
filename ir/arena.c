/* arena.c - bump allocation for everything a Module owns, plus the x*alloc
 * wrappers that exit cleanly (status 3) when memory runs out. */
#include <stdlib.h>
#include <string.h>

#include "sappc.h"

typedef struct Chunk {
	struct Chunk *next;
	size_t size, used;
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

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

Arena *arena_new(void)
{
	return xcalloc(1, sizeof(Arena));
}

void *arena_alloc(Arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	Chunk *c = a->head;
	if (!c || c->size - c->used < n) {
		size_t sz = n > (1u << 20) / 2 ? n : (size_t)1 << 20;
		/* calloc: chunks are never reused, so memory handed out is
		 * zero already (fresh mmap pages are not written twice) */
		c = xcalloc(1, sizeof(Chunk) + sz);
		c->size = sz;
		c->used = 0;
		/* a huge one-off block goes behind the current chunk so the
		 * current one keeps serving small requests */
		if (a->head && n > (1u << 20) / 2) {
			c->next = a->head->next;
			a->head->next = c;
		} else {
			c->next = a->head;
			a->head = c;
		}
		a->total += sz;
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
		free(c);
	}
	free(a);
}
