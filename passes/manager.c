/* manager.c - runs the pass pipeline of passes.def: --passes, --stop-after,
 * --print-after, --print-after-all, --verify-each and --time-passes are
 * handled here, once, for every pass (LLVM's pass-manager options). */
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "sappc.h"

const PassInfo pass_table[] = {
#define PASS(name, fn, dflt, per_rank, help) {#name, fn, help, dflt, per_rank},
#include "passes.def"
#undef PASS
};
const int pass_count = (int)(sizeof pass_table / sizeof pass_table[0]);

const PassInfo *pass_find(const char *name)
{
	for (int i = 0; i < pass_count; i++)
		if (strcmp(pass_table[i].name, name) == 0)
			return &pass_table[i];
	return NULL;
}

/* resident memory now, in MB (0 where /proc is not there) */
double pm_rss_now(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size, res;
	int ok = f && fscanf(f, "%lu %lu", &size, &res) == 2;
	if (f)
		fclose(f);
	long pg = sysconf(_SC_PAGESIZE);
	return ok && pg > 0 ? (double)res * (double)pg / (1024.0 * 1024.0) : 0.0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int pm_run(Module *m, const Options *o, const PassManagerOptions *pm)
{
	double t_total = 0;
	double times[64] = {0}, rss[64] = {0};
	if (pm->verify_each && !pm->list_has_verify_first) {
		if (pass_verify(m, o) != 0)
			return 1;
	}
	for (int i = 0; i < pm->npasses; i++) {
		const PassInfo *p = pm->passes[i];
		if (pm->hook)
			pm->hook(pm->hook_ctx, m, i, 0);
		double t0 = now();
		int rc = p->fn(m, o);
		double dt = now() - t0;
		if (i < 64) {
			times[i] = dt;
			rss[i] = pm->time_passes ? pm_rss_now() : 0.0;
		}
		t_total += dt;
		if (rc != 0)
			return rc;
		if (pm->verify_each && p->fn != pass_verify) {
			diag_set_quiet(0);
			if (pass_verify(m, o) != 0)
				die("the IR is invalid after pass '%s' (see the errors above)", p->name);
		}
		if (pm->hook)
			pm->hook(pm->hook_ctx, m, i, 1);
		if (pm->print_after_all || (pm->print_after && strcmp(pm->print_after, p->name) == 0)) {
			fprintf(stderr, "# *** IR dump after %s ***\n", p->name);
			ir_print_module(stderr, m);
		}
		if (pm->stop_after && strcmp(pm->stop_after, p->name) == 0)
			break;
	}
	if (pm->time_passes) {
		fprintf(stderr, "===-------------------------------------------===\n");
		fprintf(stderr, "  sappc pass execution timing report\n");
		fprintf(stderr, "===-------------------------------------------===\n");
		fprintf(stderr, "  %10s  %6s  %9s  %s\n", "wall (s)", "%", "RSS (MB)", "pass");
		if (pm->parse_time > 0)
			fprintf(stderr, "  %10.4f  %6s  %9.1f  %s\n", pm->parse_time, "", pm->parse_rss, "(parse)");
		for (int i = 0; i < pm->npasses && i < 64; i++)
			fprintf(stderr, "  %10.4f  %5.1f%%  %9.1f  %s\n", times[i], t_total > 0 ? 100 * times[i] / t_total : 0.0,
				rss[i], pm->passes[i]->name);
		fprintf(stderr, "  %10.4f  %5.1f%%  %s\n", t_total, 100.0, "total (passes)");
		struct rusage ru;
		if (getrusage(RUSAGE_SELF, &ru) == 0)
			fprintf(stderr, "  peak RSS: %.1f MB\n", ru.ru_maxrss / 1024.0);
	}
	return 0;
}
