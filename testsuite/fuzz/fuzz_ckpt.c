/* fuzz_ckpt.c - libFuzzer harness for the reader of MindSpore's strategy
 * checkpoints (backend/ckpt.c): any byte string is either a protobuf or
 * JSON strategy file or an error with a message; the reader never crashes,
 * hangs or leaks.  `make fuzz` runs it over a corpus seeded with the files
 * of testsuite/ckpt/ (valid, truncated and malformed). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sappc.h"
#include "backend/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	diag_set_silent(1);
	diag_reset();
	char *buf = malloc(size + 2);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = buf[size + 1] = 0;
	Source src = {"fuzz", buf, size};
	diag_set_source(&src);
	CkptPlan p;
	if (ckpt_read("fuzz", buf, size, &p) == 0) {
		/* every item's strategies lie inside the item's storage */
		for (uint32_t i = 0; i < p.nitems; i++)
			for (uint32_t k = 0; k < p.items[i].nstra; k++)
				if (p.items[i].len[k] && p.items[i].s[p.items[i].off[k] + p.items[i].len[k] - 1] < 0)
					abort();
	}
	ckpt_plan_free(&p);
	diag_set_source(NULL);
	free(buf);
	return 0;
}
