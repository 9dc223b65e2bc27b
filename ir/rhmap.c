/* rhmap.c - placeholder for the robin_hood attribute-order emulation
 * (ir-format.md §1.9).  The lowering branch only needs the symbol to link:
 * this keeps insertion order, and the lowering inserts the attribute sets
 * whose real order is known (AllReduce, §1.9 table) in that order already.
 * The real emulation replaces this file at merge. */
#include "sappc.h"

void rh_order_attrs(Attr *a, uint32_t n)
{
	(void)a;
	(void)n;
}
