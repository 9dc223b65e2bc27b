/* fuzz_pipeline.c - libFuzzer harness for the whole pipeline: the first
 * byte picks the device count (1-64), the mode (search or semi_auto) and
 * whether the lowering also shards the optimizer and cuts two pipeline
 * stages (when the count is even: sappc refuses odd ones as usage errors);
 * the rest is the IR text; parse, run every default pass with
 * --verify-each semantics, print.  Bad input is fine; a crash, a hang, a
 * leak or a verify failure after a pass (an internal error) is a bug. */
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
	if (size < 1)
		return 0;
	diag_set_silent(1);
	diag_reset();
	Options o = {0};
	o.device_num = 1 + (data[0] & 63);
	o.semi_auto = (data[0] >> 6) & 1;
	o.pipeline_stages = (data[0] >> 7) && o.device_num % 2 == 0 ? 2 : 1;
	o.enable_parallel_optimizer = data[0] >> 7;
	o.micro_batch_num = 1;
	o.mem_coef = 0.1;
	o.device_memory = 1024.0 * 1073741824.0; /* sappc's defaults */
	o.world_group = "hccl_world_group";
	o.quiet = 1;
	o.verify_each = 1;
	PassManagerOptions pm = {0};
	pm.verify_each = 1;
	for (int i = 0; i < pass_count; i++)
		if (pass_table[i].in_default)
			pm.passes[pm.npasses++] = &pass_table[i];
	size -= 1;
	char *buf = malloc(size + 2);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size);
	buf[size] = buf[size + 1] = 0;
	Module *m = ir_parse("fuzz", buf, size, 0);
	if (m) {
		if (pm_run(m, &o, &pm) == 0)
			ir_print_module(devnull, m);
		ir_module_free(m);
	}
	free(buf);
	return 0;
}
