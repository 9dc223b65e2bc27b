/* stdsort.c - libstdc++'s std::stable_sort, step for step.
 *
 * MindSpore's 2.3+ redistribution optimiser (parallel-lowering.md §4.2 step 6)
 * sorts its operator list with std::stable_sort and a comparator that is not
 * a strict weak order (a Reshape is "equal" to everything, yet the other ops
 * are ordered among themselves).  With such a comparator the result depends
 * on which elements the algorithm happens to compare, so only the library's
 * own sequence of comparisons reproduces MindSpore's list.  The spec
 * describes it as a plain insertion sort for short lists; that is what
 * __inplace_stable_sort does, but it is only the fallback when no temporary
 * buffer can be had.  What really runs (libstdc++ of GCC 7 to 14) is:
 *
 *   __stable_sort_adaptive: middle = first + (n+1)/2; sort each half with
 *       __merge_sort_with_buffer, then __merge_adaptive the halves: forward
 *       through the buffer when len1 <= len2 (n even), else backward;
 *   __merge_sort_with_buffer: __insertion_sort on chunks of 7 (an element
 *       less than the chunk's first jumps to the front, else it moves left
 *       while less than its left neighbour), then __merge_sort_loop passes of
 *       doubling step, alternating between the range and the buffer;
 *   every merge takes from the second run only when comp(second, first).
 *
 * The buffer always suffices for the list lengths sappc sorts, so the
 * rotation-based paths are not needed.  testsuite/stdsort.sh checks this
 * against the real library, when a C++ compiler is around.
 */
#include <string.h>

#include "sappc.h"

enum { CHUNK = 7 }; /* _S_chunk_size */

static void insertion_sort(int *a, int n, StdLess less, const void *ctx)
{
	for (int i = 1; i < n; i++) {
		int v = a[i];
		if (less(v, a[0], ctx)) {
			memmove(a + 1, a, (size_t)i * sizeof *a);
			a[0] = v;
		} else {
			int j = i;
			while (less(v, a[j - 1], ctx)) {
				a[j] = a[j - 1];
				j--;
			}
			a[j] = v;
		}
	}
}

/* __move_merge: [a, a+na) and [b, b+nb) into out */
static int *move_merge(const int *a, int na, const int *b, int nb, int *out, StdLess less, const void *ctx)
{
	int i = 0, j = 0;
	while (i < na && j < nb)
		*out++ = less(b[j], a[i], ctx) ? b[j++] : a[i++];
	while (i < na)
		*out++ = a[i++];
	while (j < nb)
		*out++ = b[j++];
	return out;
}

static void merge_sort_loop(const int *a, int n, int *out, int step, StdLess less, const void *ctx)
{
	int k = 0;
	while (n - k >= 2 * step) {
		out = move_merge(a + k, step, a + k + step, step, out, less, ctx);
		k += 2 * step;
	}
	int s = n - k < step ? n - k : step;
	move_merge(a + k, s, a + k + s, n - k - s, out, less, ctx);
}

static void merge_sort_with_buffer(int *a, int n, int *buf, StdLess less, const void *ctx)
{
	int step = CHUNK, k = 0;
	for (; n - k >= CHUNK; k += CHUNK)
		insertion_sort(a + k, CHUNK, less, ctx);
	insertion_sort(a + k, n - k, less, ctx);
	while (step < n) {
		merge_sort_loop(a, n, buf, step, less, ctx);
		step *= 2;
		merge_sort_loop(buf, n, a, step, less, ctx);
		step *= 2;
	}
}

void std_stable_sort(int *a, int n, int *buf, StdLess less, const void *ctx)
{
	if (n <= 0)
		return;
	int n1 = (n + 1) / 2, n2 = n - n1;
	int *mid = a + n1;
	merge_sort_with_buffer(a, n1, buf, less, ctx);
	merge_sort_with_buffer(mid, n2, buf, less, ctx);
	if (n1 <= n2) {
		/* __move_merge_adaptive: the first run from the buffer, forwards */
		memcpy(buf, a, (size_t)n1 * sizeof *a);
		int i = 0, j = 0, *out = a;
		while (i < n1 && j < n2)
			*out++ = less(mid[j], buf[i], ctx) ? mid[j++] : buf[i++];
		while (i < n1)
			*out++ = buf[i++];
		return;
	}
	/* __move_merge_adaptive_backward: the second run from the buffer */
	if (n2 == 0)
		return;
	memcpy(buf, mid, (size_t)n2 * sizeof *a);
	int i = n1 - 1, j = n2 - 1, *out = a + n;
	for (;;) {
		if (less(buf[j], a[i], ctx)) {
			*--out = a[i];
			if (i == 0) {
				while (j >= 0)
					*--out = buf[j--];
				return;
			}
			i--;
		} else {
			*--out = buf[j];
			if (j == 0)
				return;
			j--;
		}
	}
}
