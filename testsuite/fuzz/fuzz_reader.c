/* fuzz_reader.c - libFuzzer harness for the reader and printer: any byte
 * string either fails to parse with diagnostics or parses, verifies and
 * prints; it never crashes, hangs or leaks.  `make fuzz` builds and runs it
 * for FUZZ_TIME seconds over a corpus seeded from ir-samples/, the dump
 * excerpts and the error tests. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sappc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	if (!devnull)
		devnull = fopen("/dev/null", "w");
	diag_set_silent(1);
	diag_reset();
	char *buf = malloc(size + 2);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = buf[size + 1] = 0;
	Module *m = ir_parse("fuzz", buf, size, size & 1);
	if (m) {
		pass_verify(m, NULL);
		ir_print_module(devnull, m);
		ir_module_free(m);
	}
	free(buf);
	return 0;
}
