/* report.c - what --simulate prints: one line for the run, one per output
 * (shape and a scalar's value, else sum, mean, extremes and the first
 * elements). */
#include <math.h>

#include "simint.h"

static void print_tensor_line(FILE *f, const char *label, const SimTensor *t)
{
	char sh[160];
	sim_fmt_shape(sh, sizeof sh, t->ndim, t->shape);
	fprintf(f, "%s: %s %s", label, sim_dtype_name(t->dtype), sh);
	if (t->numel == 1) {
		fprintf(f, " = %.6g\n", (double)t->data[0]);
		return;
	}
	double sum = 0, mn = INFINITY, mx = -INFINITY;
	for (int64_t i = 0; i < t->numel; i++) {
		double x = t->data[i];
		sum += x;
		mn = x < mn ? x : mn;
		mx = x > mx ? x : mx;
	}
	fprintf(f, " sum=%.6g mean=%.6g min=%.6g max=%.6g first=[", sum, t->numel ? sum / (double)t->numel : 0.0, mn,
	        mx);
	for (int64_t i = 0; i < t->numel && i < 4; i++)
		fprintf(f, "%s%.6g", i ? ", " : "", (double)t->data[i]);
	fprintf(f, "%s]\n", t->numel > 4 ? ", ..." : "");
}

static void print_value(FILE *f, const char *label, const SimValue *v)
{
	char sub[64];
	if (!v || v->kind == SV_NONE) {
		fprintf(f, "%s: none\n", label);
	} else if (v->kind == SV_TENSOR) {
		print_tensor_line(f, label, v->t);
	} else {
		for (uint32_t i = 0; i < v->n; i++) {
			snprintf(sub, sizeof sub, "%s[%u]", label, i);
			print_value(f, sub, v->elems[i]);
		}
	}
}

void sim_print_summary(FILE *f, const SimRun *r, uint64_t seed)
{
	double kb = (double)r->bytes / 1024.0;
	fprintf(f, "# simulate: %d %s, seed %llu, %u operators, %.1f %s of tensors\n", r->nranks,
	        r->nranks == 1 ? "device" : "ranks", (unsigned long long)seed, r->executed, kb < 1024 ? kb : kb / 1024,
	        kb < 1024 ? "KB" : "MB");
	for (int k = 0; k < r->nranks; k++) {
		char label[32];
		if (r->nranks > 1)
			snprintf(label, sizeof label, "rank %d output", k);
		else
			snprintf(label, sizeof label, "output");
		print_value(f, label, r->rs[k].result);
	}
}
