/* memory.c - what SAPP says about memory after the partition (spec
 * sapp-search.md §3.7 DevicesMemoryControl).  It changes no strategy.
 */
#include <string.h>

#include "sapp.h"

/* ------------------------------------------------------------ §3.7 memory check */

/* MindSpore's GetDataTypeSize: float16 2, float32 4, double 8, and int8 8
 * bytes (a bug kept as spec, §3.7 and §8.4).  MindSpore's parser stores
 * float32 for every tensor (§1.3), so it never meets another type; sappc
 * reads the dump's element type, and types MindSpore has no case for take
 * their real size. */
static double mc_elt_size(Sym dtype)
{
	const char *s = dtype ? sym_str(dtype) : "Float32";
	if (strcmp(s, "Float16") == 0)
		return 2;
	if (strcmp(s, "Float32") == 0)
		return 4;
	if (strcmp(s, "Float64") == 0)
		return 8;
	if (strcmp(s, "Int8") == 0)
		return 8;
	return dtype_size(dtype);
}

static Sym input_dtype(const Sapp *S, const SappOp *X, uint32_t i)
{
	if (X->n) {
		const Node *n = X->n;
		uint32_t a = X->arg[i];
		if (a < n->nin_types)
			return n->in_types[a].dtype;
		if (a < n->nargs && n->args[a].kind == V_NODE && n->args[a].u.node)
			return n->args[a].u.node->out.dtype;
		return 0;
	}
	const Graph *g = ir_entry(S->m);
	return g && X->arg[i] < g->params.n ? g->params.a[X->arg[i]]->out.dtype : 0;
}

static void human(char *buf, size_t n, double bytes)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	int i = 0;
	while (bytes >= 1024 && i < 5) {
		bytes /= 1024;
		i++;
	}
	snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", bytes, u[i]);
}

/* DevicesMemoryControl: over the kept operators the search partitioned
 * (not the pinned ones), the per-device size of their first two inputs
 * times the element size, summed; MindSpore warns when the device memory is
 * below that sum divided by the device count -- although the sizes are
 * already per device [quirk kept, §3.7; §8 does not advise otherwise].
 * Called on the whole partition, before the pipeline roll-back, with the
 * total device count, where MindSpore's PartitionForAllDevices runs it.
 * The warning points at the first such operator (else the entry graph). */
double sapp_memory_check(Sapp *S)
{
	double sum = 0;
	const Node *first = NULL;
	for (uint32_t k = 0; k < S->nkept; k++) {
		uint32_t x = S->kept[k];
		const RecNode *R = &S->rec[x];
		const SappOp *X = &S->ops[x];
		if (R->pinned)
			continue;
		if (!first && X->n)
			first = X->n;
		for (uint32_t i = 0; i < 2 && i < R->nargs && i < X->nin; i++) {
			double e = 1;
			for (int d = 0; d < 4; d++)
				e *= (double)R->arg[i].d[d] / (double)R->acut[i].d[d];
			sum += e * mc_elt_size(input_dtype(S, X, i));
		}
	}
	double est = sum / (double)S->devices;
	char a[32], b[32];
	human(a, sizeof a, est);
	human(b, sizeof b, S->o->device_memory);
	if (S->explain >= 0)
		fprintf(stderr,
		        "sapp: explain: memory check: the searched operators' first two inputs take %s per device "
		        "(summed, divided by the %lld devices once more as MindSpore does); device memory %s\n",
		        a, (long long)S->devices, b);
	if (S->o->device_memory < est) {
		const Graph *g = ir_entry(S->m);
		Loc loc = first ? first->loc : g ? g->loc : (Loc){0, 0};
		diag_warning_at(
		    loc,
		    "the strategies may collapse due to out of memory: SAPP's estimate is %s per device, the "
		    "device memory %s (--device-memory)",
		    a, b);
	}
	return est;
}
