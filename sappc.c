/* sappc.c - the driver: options -> read -> run pipeline -> write.  Nothing else.
 *
 * Exit status: 0 ok, 1 bad input, 2 bad usage, 3 I/O or rendering failure.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config.h"
#include "ir/sappc.h"
#include "backend/render.h"

enum {
	OPT_PASSES = 256,
	OPT_STOP_AFTER,
	OPT_PRINT_AFTER,
	OPT_PRINT_AFTER_ALL,
	OPT_VERIFY_EACH,
	OPT_TIME_PASSES,
	OPT_DOT,
	OPT_SVG,
	OPT_FRAGMENT,
	OPT_VERSION,
	OPT_HELP,
};

static const struct option longopts[] = {
	{"output", required_argument, NULL, 'o'},
	{"device-num", required_argument, NULL, 'n'},
	{"quiet", no_argument, NULL, 'q'},
	{"passes", required_argument, NULL, OPT_PASSES},
	{"stop-after", required_argument, NULL, OPT_STOP_AFTER},
	{"print-after", required_argument, NULL, OPT_PRINT_AFTER},
	{"print-after-all", no_argument, NULL, OPT_PRINT_AFTER_ALL},
	{"verify-each", no_argument, NULL, OPT_VERIFY_EACH},
	{"time-passes", no_argument, NULL, OPT_TIME_PASSES},
	{"dot", required_argument, NULL, OPT_DOT},
	{"svg", required_argument, NULL, OPT_SVG},
	{"fragment", no_argument, NULL, OPT_FRAGMENT},
	{"version", no_argument, NULL, OPT_VERSION},
	{"help", no_argument, NULL, OPT_HELP},
	{NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
	fputs("Usage: sappc [OPTION]... [FILE]\n"
	      "Plan and lower a MindSpore-style training graph (IR dump) for N devices.\n"
	      "FILE is an IR text file; '-' or no FILE reads standard input.\n"
	      "\n"
	      "Output:\n"
	      "  -o, --output=FILE       write the resulting IR to FILE ('-' = stdout, the default)\n"
	      "      --dot=FILE          write the graph as Graphviz DOT (before layout)\n"
	      "      --svg=FILE          render the graph to SVG through libgvc\n"
	      "  -q, --quiet             no warnings or notes on stderr\n"
	      "\n"
	      "Parallel configuration:\n"
	      "  -n, --device-num=N      number of devices (default 1)\n"
	      "\n"
	      "Input:\n"
	      "      --fragment          read a dump excerpt: references to nodes that are not in the\n"
	      "                          text are kept as opaque external operands\n"
	      "\n"
	      "Pass manager:\n"
	      "      --passes=LIST       run exactly these passes (comma separated); empty = parse and print\n"
	      "      --stop-after=PASS   stop the pipeline after PASS\n"
	      "      --print-after=PASS  print the IR to stderr after PASS\n"
	      "      --print-after-all   print the IR to stderr after every pass\n"
	      "      --verify-each       run the verifier before the pipeline and after every pass\n"
	      "      --time-passes       report the time spent in each pass on stderr\n"
	      "\n"
	      "      --help              display this help and exit\n"
	      "      --version           output version information and exit\n"
	      "\n"
	      "Passes (default pipeline marked *):\n",
	      f);
	for (int i = 0; i < pass_count; i++)
		fprintf(f, "  %c %-14s %s\n", pass_table[i].in_default ? '*' : ' ', pass_table[i].name, pass_table[i].help);
	fputs("\nExit status: 0 ok, 1 bad input, 2 bad usage, 3 I/O or rendering failure.\n"
	      "See sappc(1) and sappc-ir(5).\n",
	      f);
}

static NORETURN void bad_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "sappc: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'sappc --help' for more information.\n");
	exit(2);
}

static long parse_long(const char *opt, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "sappc: invalid value '%s' for %s (expected an integer from %ld to %ld)\n", s, opt, lo, hi);
		fprintf(stderr, "Try 'sappc --help' for more information.\n");
		exit(2);
	}
	return v;
}

static void parse_pass_list(PassManagerOptions *pm, const char *list)
{
	pm->npasses = 0;
	char *copy = xstrdup(list);
	for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
		while (*tok == ' ')
			tok++;
		if (!*tok)
			continue;
		const PassInfo *p = pass_find(tok);
		/* bad_usage exits: the message still needs tok, so copy is not freed */
		if (!p)
			bad_usage("unknown pass '%s' (see --help for the list)", tok);
		if (pm->npasses == 64)
			bad_usage("too many passes in '%s'", list);
		pm->passes[pm->npasses++] = p;
	}
	free(copy);
}

/* Is path the same file as the input (another spelling, a link)? */
static int same_file(const char *path, const char *in, const struct stat *ist)
{
	struct stat st;
	if (strcmp(path, in) == 0)
		return 1;
	return ist && stat(path, &st) == 0 && st.st_dev == ist->st_dev && st.st_ino == ist->st_ino;
}

/* exit status for output written to stdout by --help / --version */
static int stdout_status(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "sappc: error: write error on standard output\n");
		return 3;
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	Options o = {0};
	PassManagerOptions pm = {0};
	const char *out = "-", *dot = NULL, *svg = NULL;
	int passes_given = 0;
	o.device_num = 1;
	o.mem_coef = 0.1;
	o.world_group = "hccl_world_group";

	/* getopt prefixes its messages with argv[0]; ours say "sappc:" */
	static char progname[] = "sappc";
	argv[0] = progname;
	int c;
	while ((c = getopt_long(argc, argv, "o:n:q", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'n':
			o.device_num = (int)parse_long("--device-num", optarg, 1, 65536);
			break;
		case 'q':
			o.quiet = 1;
			break;
		case OPT_PASSES:
			parse_pass_list(&pm, optarg);
			passes_given = 1;
			break;
		case OPT_STOP_AFTER:
			if (!pass_find(optarg))
				bad_usage("unknown pass '%s' for --stop-after", optarg);
			pm.stop_after = optarg;
			break;
		case OPT_PRINT_AFTER:
			if (!pass_find(optarg))
				bad_usage("unknown pass '%s' for --print-after", optarg);
			pm.print_after = optarg;
			break;
		case OPT_PRINT_AFTER_ALL:
			pm.print_after_all = 1;
			break;
		case OPT_VERIFY_EACH:
			pm.verify_each = 1;
			break;
		case OPT_TIME_PASSES:
			pm.time_passes = 1;
			break;
		case OPT_DOT:
			dot = optarg;
			break;
		case OPT_SVG:
			svg = optarg;
			break;
		case OPT_FRAGMENT:
			o.fragment = 1;
			break;
		case OPT_VERSION:
			printf("sappc %s\n", PACKAGE_VERSION);
			return stdout_status();
		case OPT_HELP:
			usage(stdout);
			return stdout_status();
		default:
			fputs("Try 'sappc --help' for more information.\n", stderr);
			return 2;
		}
	}
	if (argc - optind > 1)
		bad_usage("more than one input file ('%s' is extra)", argv[optind + 1]);
	const char *in = optind < argc ? argv[optind] : "-";
	if (!passes_given)
		for (int i = 0; i < pass_count; i++)
			if (pass_table[i].in_default)
				pm.passes[pm.npasses++] = &pass_table[i];
	if (pm.stop_after) {
		int found = 0;
		for (int i = 0; i < pm.npasses; i++)
			found |= strcmp(pm.passes[i]->name, pm.stop_after) == 0;
		if (!found)
			bad_usage("--stop-after=%s names a pass that is not in the pipeline", pm.stop_after);
	}
	pm.verify_each = pm.verify_each;
	o.verify_each = pm.verify_each;
	o.time_passes = pm.time_passes;
	diag_set_quiet(o.quiet);

	/* never write over the input, however it is spelled */
	const char *outs[3] = {out, dot, svg};
	struct stat ist;
	int have_ist = strcmp(in, "-") != 0 && stat(in, &ist) == 0;
	for (int i = 0; i < 3; i++)
		if (outs[i] && strcmp(outs[i], "-") != 0 && strcmp(in, "-") != 0 &&
		    same_file(outs[i], in, have_ist ? &ist : NULL)) {
			fprintf(stderr, "sappc: refusing to write output over the input file '%s'\n", in);
			fprintf(stderr, "Try 'sappc --help' for more information.\n");
			return 2;
		}

	char *buf;
	size_t len;
	if (io_read_file(in, &buf, &len) != 0)
		return 3;
	double t0 = now();
	Module *m = ir_parse(strcmp(in, "-") == 0 ? "<stdin>" : in, buf, len, o.fragment);
	pm.parse_time = now() - t0;
	if (!m) {
		free(buf);
		return 1;
	}
	int rc = pm_run(m, &o, &pm);
	if (rc == 0 && diag_errors())
		rc = 1;
	if (rc == 0) {
		OutFile of;
		if (out_open(&of, out) != 0)
			rc = 3;
		else {
			static char obuf[1 << 16];
			if (of.f != stdout)
				setvbuf(of.f, obuf, _IOFBF, sizeof obuf);
			ir_print_module(of.f, m);
			if (out_commit(&of) != 0)
				rc = 3;
		}
	}
	if (rc == 0 && dot && gv_write_dot(m, &o, dot) != 0)
		rc = 3;
	if (rc == 0 && svg && gv_render_svg(m, &o, svg) != 0)
		rc = 3;
	ir_module_free(m);
	free(buf);
	intern_free_all();
	return rc;
}
