/* sappc.c - the driver: options -> read -> run pipeline -> write.  Nothing else.
 *
 * Exit status: 0 ok, 1 bad input, 2 bad usage, 3 I/O or rendering failure.
 */
#define _DEFAULT_SOURCE 1 /* MAP_ANONYMOUS */
#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "config.h"
#include "ir/sappc.h"
#include "backend/html.h"
#include "backend/render.h"
#include "backend/report.h"
#include "backend/ckpt.h"
#include "passes/simulate/sim.h"

enum {
	OPT_PASSES = 256,
	OPT_STOP_AFTER,
	OPT_PRINT_AFTER,
	OPT_PRINT_AFTER_ALL,
	OPT_VERIFY_EACH,
	OPT_TIME_PASSES,
	OPT_DOT,
	OPT_SVG,
	OPT_HTML,
	OPT_FRAGMENT,
	OPT_VIEW,
	OPT_MAX_NODES,
	OPT_FOCUS,
	OPT_SIMULATE,
	OPT_SEED,
	OPT_SIMULATE_MAX_MB,
	OPT_SIMULATE_GRADCHECK_MB,
	OPT_SIMULATE_THREADS,
	OPT_REPORT,
	OPT_REPORT_FORMAT,
	OPT_BANDWIDTH,
	OPT_LATENCY,
	OPT_DEVICES_PER_NODE,
	OPT_VERSION,
	OPT_HELP,
	OPT_MEM_COEF,
	OPT_FULLY_USE_DEVICES,
	OPT_DATASET_STRATEGY,
	OPT_INTERFERED,
	OPT_PIPELINE_STAGES,
	OPT_MICRO_BATCH_NUM,
	OPT_PARALLEL_OPTIMIZER,
	OPT_PARALLEL_MODE,
	OPT_EXPLAIN,
	OPT_STRATEGY_OUT,
	OPT_STRATEGY_IN,
	OPT_RANK,
	OPT_ALL_RANKS,
	OPT_RANKS,
	OPT_STAGE,
	OPT_WORLD_GROUP,
	OPT_ENABLE_ALLTOALL,
	OPT_DISABLE_REDIST_OPT,
	OPT_OPT_SHARD_SIZE,
	OPT_PARALLEL_DETAIL,
	OPT_VIRTUAL_OPS,
	OPT_PHASE,
	OPT_DEVICE_MEMORY,
	OPT_AUTO_PIPELINE,
	OPT_STRATEGY_FORMAT,
	OPT_GROUP_CKPT_OUT,
	OPT_STRICT,
	/* the training step (passes/train/) */
	OPT_FORWARD_ONLY,
	OPT_OPTIMIZER,
	OPT_PIPELINE_SCHEDULER,
	OPT_LEARNING_RATE,
	OPT_MOMENTUM,
	OPT_BETA1,
	OPT_BETA2,
	OPT_EPS,
	OPT_WEIGHT_DECAY,
	OPT_GRADIENTS_MEAN,
	OPT_RECOMPUTE,
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
	{"html", required_argument, NULL, OPT_HTML},
	{"fragment", no_argument, NULL, OPT_FRAGMENT},
	{"view", required_argument, NULL, OPT_VIEW},
	{"max-nodes", required_argument, NULL, OPT_MAX_NODES},
	{"focus", required_argument, NULL, OPT_FOCUS},
	{"simulate", no_argument, NULL, OPT_SIMULATE},
	{"seed", required_argument, NULL, OPT_SEED},
	{"simulate-max-mb", required_argument, NULL, OPT_SIMULATE_MAX_MB},
	{"simulate-gradcheck-mb", required_argument, NULL, OPT_SIMULATE_GRADCHECK_MB},
	{"simulate-threads", required_argument, NULL, OPT_SIMULATE_THREADS},
	{"report", optional_argument, NULL, OPT_REPORT},
	{"report-format", required_argument, NULL, OPT_REPORT_FORMAT},
	{"bandwidth", required_argument, NULL, OPT_BANDWIDTH},
	{"latency", required_argument, NULL, OPT_LATENCY},
	{"devices-per-node", required_argument, NULL, OPT_DEVICES_PER_NODE},
	{"version", no_argument, NULL, OPT_VERSION},
	{"help", no_argument, NULL, OPT_HELP},
	{"mem-coef", required_argument, NULL, OPT_MEM_COEF},
	{"fully-use-devices", no_argument, NULL, OPT_FULLY_USE_DEVICES},
	{"dataset-strategy", required_argument, NULL, OPT_DATASET_STRATEGY},
	{"interfered", no_argument, NULL, OPT_INTERFERED},
	{"pipeline-stages", required_argument, NULL, OPT_PIPELINE_STAGES},
	{"micro-batch-num", required_argument, NULL, OPT_MICRO_BATCH_NUM},
	{"enable-parallel-optimizer", no_argument, NULL, OPT_PARALLEL_OPTIMIZER},
	{"parallel-mode", required_argument, NULL, OPT_PARALLEL_MODE},
	{"explain", required_argument, NULL, OPT_EXPLAIN},
	{"strategy-out", required_argument, NULL, OPT_STRATEGY_OUT},
	{"strategy-in", required_argument, NULL, OPT_STRATEGY_IN},
	{"rank", required_argument, NULL, OPT_RANK},
	{"all-ranks", required_argument, NULL, OPT_ALL_RANKS},
	{"ranks", required_argument, NULL, OPT_RANKS},
	{"stage", required_argument, NULL, OPT_STAGE},
	{"world-group", required_argument, NULL, OPT_WORLD_GROUP},
	{"enable-alltoall", no_argument, NULL, OPT_ENABLE_ALLTOALL},
	{"disable-redistribution-opt", no_argument, NULL, OPT_DISABLE_REDIST_OPT},
	{"optimizer-weight-shard-size", required_argument, NULL, OPT_OPT_SHARD_SIZE},
	{"parallel-detail", no_argument, NULL, OPT_PARALLEL_DETAIL},
	{"virtual-ops", no_argument, NULL, OPT_VIRTUAL_OPS},
	{"phase", required_argument, NULL, OPT_PHASE},
	{"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
	{"auto-pipeline", no_argument, NULL, OPT_AUTO_PIPELINE},
	{"strategy-format", required_argument, NULL, OPT_STRATEGY_FORMAT},
	{"group-ckpt-out", required_argument, NULL, OPT_GROUP_CKPT_OUT},
	{"strict", no_argument, NULL, OPT_STRICT},
	{"forward-only", no_argument, NULL, OPT_FORWARD_ONLY},
	{"optimizer", required_argument, NULL, OPT_OPTIMIZER},
	{"pipeline-scheduler", required_argument, NULL, OPT_PIPELINE_SCHEDULER},
	{"learning-rate", required_argument, NULL, OPT_LEARNING_RATE},
	{"momentum", required_argument, NULL, OPT_MOMENTUM},
	{"beta1", required_argument, NULL, OPT_BETA1},
	{"beta2", required_argument, NULL, OPT_BETA2},
	{"eps", required_argument, NULL, OPT_EPS},
	{"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
	{"gradients-mean", no_argument, NULL, OPT_GRADIENTS_MEAN},
	{"recompute", required_argument, NULL, OPT_RECOMPUTE},
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
	      "      --html=FILE         write a self-contained page to explore the plan in a browser:\n"
	      "                          the graph by rank and the plan view, search, each operator's\n"
	      "                          strategy, layouts, search levels and communication, the report\n"
	      "      --view=rank|plan    what --dot/--svg draw: the graph as printed (rank), or the\n"
	      "                          global graph with every operator's strategy (plan)\n"
	      "      --max-nodes=N       above N operators, draw one box per scope (default 1500)\n"
	      "      --focus=SCOPE       keep the operators under SCOPE expanded when collapsing\n"
	      "  -q, --quiet             no warnings or notes on stderr\n"
	      "      --strict            refuse a graph with operators sappc does not model (by\n"
	      "                          default a warning names them; they stay whole)\n"
	      "\n"
	      "",
	      f);
	fputs("Parallel configuration:\n"
	      "  -n, --device-num=N      number of devices, 1 to 65536 (default 1)\n"
	      "      --parallel-mode=MODE  auto (SAPP search, the default; also recursive_programming)\n"
	      "                          or semi_auto (keep given strategies, batch-parallel default)\n"
	      "      --pipeline-stages=S pipeline stages, 1 to 64 (default 1); S must divide N\n"
	      "      --micro-batch-num=K micro-batches per step (default 1): inputs sliced, the network\n"
	      "                          once per micro-batch, gradients accumulated\n"
	      "      --pipeline-scheduler=1f1b|gpipe\n"
	      "                          order of the micro-batches on each stage (default 1f1b)\n"
	      "      --dataset-strategy=data_parallel|full_batch|TUPLE\n"
	      "                          how graph inputs are split (default data_parallel), or one\n"
	      "                          strategy per input as MindSpore writes it: ((1, 8), (8,))\n"
	      "      --enable-parallel-optimizer\n"
	      "                          shard optimizer states (used by the lowering)\n"
	      "      --rank=R            print the graph of rank R (default 0)\n"
	      "      --all-ranks=DIR     write every rank's graph to DIR/rank_R/NAME_validate_0000.ir\n"
	      "      --ranks=A-B|R       with --all-ranks: only ranks A to B (or rank R), so that the\n"
	      "                          ranks of a job can be split over machines into one DIR\n"
	      "      --stage=PATTERN=K   put the cells matching PATTERN (e.g. _backbone.layer1) in stage K\n"
	      "      --optimizer-weight-shard-size=K\n"
	      "                          shard over groups of K replicas instead of all of them\n"
	      "      --enable-alltoall   redistribute with AlltoAll instead of AllGather + slice\n"
	      "      --disable-redistribution-opt\n"
	      "                          keep the redistribution operator lists of MindSpore < 2.3:\n"
	      "                          no 2.3+ list optimiser (gather before slicing, axis-0\n"
	      "                          AllGather without Split/Concat where leading 1s allow)\n"
	      "      --world-group=NAME  name of the all-devices group (default hccl_world_group)\n"
	      "      --parallel-detail   add inputs_tensor_map / device_matrix / outputs_tensor_map\n"
	      "                          attributes to every operator with a layout\n"
	      "      --virtual-ops       keep _MirrorOperator and _VirtualDiv nodes (the step_parallel_end\n"
	      "                          view; validate IR shows only their traces)\n"
	      "\n"
	      "",
	      f);
	fputs("Strategy search (sapp pass):\n"
	      "      --mem-coef=X        weight of replicating a MatMul weight (default 0.1);\n"
	      "                          larger favours model parallelism and saves memory\n"
	      "      --fully-use-devices never choose to replicate a MatMul when a cut is valid\n"
	      "      --phase=auto|train|predict\n"
	      "                          generate training (GenerateStrategyV3) or inference (V1)\n"
	      "                          strategies; auto (default): train when the graph has a\n"
	      "                          training flag, gradient, optimizer or loss operators or\n"
	      "                          returns a scalar, see sappc(1)\n"
	      "      --device-memory=SIZE  device memory, e.g. 1024GB (the default), 32GB, 512MB:\n"
	      "                          warn when SAPP's memory check exceeds it\n"
	      "      --auto-pipeline     let the memory estimate of a transformer lower the number\n"
	      "                          of pipeline stages (the suggestion is printed as a note)\n"
	      "      --interfered        keep user strategies (.shard(): in_strategy/out_strategy\n"
	      "                          primitive attributes) and search around them;\n"
	      "                          also on when MS_INTERFERED_SAPP=1\n"
	      "      --explain=NAME      explain the choices for one operator on stderr\n"
	      "                          (instance name, full name or %k)\n"
	      "      --strategy-out=FILE write the chosen strategies as JSON\n"
	      "      --strategy-format=sappc|mindspore|mindspore-json\n"
	      "                          what --strategy-out writes: sappc's JSON (the default),\n"
	      "                          or this rank's MindSpore strategy checkpoint, protobuf or\n"
	      "                          JSON, for strategy_ckpt_load_file (a FILE ending in .ckpt\n"
	      "                          or .pb means mindspore)\n"
	      "      --strategy-in=FILE  apply the strategies of FILE (written by --strategy-out)\n"
	      "                          instead of searching; entries are matched by full name\n"
	      "                          and checked against the graph's shapes.  A MindSpore\n"
	      "                          checkpoint (protobuf or JSON) sets the operators it\n"
	      "                          names; the others are searched as usual\n"
	      "      --group-ckpt-out=FILE\n"
	      "                          write the communication groups of the rank as MindSpore's\n"
	      "                          group checkpoint (group_ckpt_save_file)\n"
	      "\n"
	      "",
	      f);
	fputs("Training step (the default output when the phase is train):\n"
	      "      --forward-only      print the forward graph only (as at step_parallel_end): no\n"
	      "                          backward, gradient communication or optimizer update\n"
	      "      --optimizer=momentum|sgd|adam|adamw\n"
	      "                          the update after the gradients (default momentum):\n"
	      "                          ApplyMomentum, SGD, Adam or the fused AdamWeightDecay\n"
	      "      --learning-rate=X   the learning_rate Parameter's value (default 0.01)\n"
	      "      --momentum=X        momentum of momentum (default 0.9) and sgd (default 0)\n"
	      "      --beta1=X, --beta2=X, --eps=X\n"
	      "                          Adam's and AdamWeightDecay's (defaults 0.9, 0.999, and\n"
	      "                          1e-8 for adam, 1e-6 for adamw)\n"
	      "      --weight-decay=X    weight decay of adamw (default 0)\n"
	      "      --gradients-mean    scale each gradient AllReduce by 1/(its group size), as\n"
	      "                          MindSpore's gradients_mean=True (off by default)\n"
	      "      --recompute=PATTERN recompute the cells matching PATTERN (e.g. _backbone.layer1,\n"
	      "                          matched as --stage) in the backward, as Cell.recompute();\n"
	      "                          repeatable\n"
	      "\n"
	      "",
	      f);
	fputs("Report (what the plan costs):\n"
	      "      --report[=FILE]     print, instead of the IR (unless -o is given), the plan's\n"
	      "                          strategies, local shapes, communication volume and time per\n"
	      "                          device, memory, next to the pure data-parallel plan's\n"
	      "      --report-format=text|json\n"
	      "      --bandwidth=B[,BI]  link bandwidth in GB/s inside a node [and between nodes]\n"
	      "                          (default 100,12.5)\n"
	      "      --latency=L[,LI]    link latency in microseconds inside [and between] nodes\n"
	      "                          (default 2,10)\n"
	      "      --devices-per-node=K  devices in one node (default 8)\n"
	      "\n"
	      "",
	      f);
	fputs("Input:\n"
	      "      --fragment          read a dump excerpt: references to nodes that are not in the\n"
	      "                          text are kept as opaque external operands\n"
	      "\n"
	      "",
	      f);
	fputs("Simulation:\n"
	      "      --simulate          check the plan by numbers: run the single-device graph and\n"
	      "                          every rank's lowered graph (collectives across ranks) on\n"
	      "                          seeded random inputs in float32, compare each rank with its\n"
	      "                          slice, and print a report instead of the IR (exit 1 on a\n"
	      "                          mismatch)\n"
	      "      --seed=S            seed of the simulated inputs (default 0)\n"
	      "      --simulate-max-mb=N refuse to simulate when the graphs, tensors and state of the\n"
	      "                          single device and of all ranks need more than N MB\n"
	      "                          (default 2048)\n"
	      "      --simulate-gradcheck-mb=N  of a training step, also check the single-device\n"
	      "                          gradients against central differences of the loss when its\n"
	      "                          tensors need at most N MB (default 4; 0: never)\n"
	      "      --simulate-threads=N  run the ranks on N threads (default: one per online\n"
	      "                          core); the results do not depend on N\n"
	      "\n"
	      "",
	      f);
	fputs("Pass manager:\n"
	      "      --passes=LIST       run exactly these passes (comma separated); empty = parse and print\n"
	      "      --stop-after=PASS   stop the pipeline after PASS\n"
	      "      --print-after=PASS  print the IR to stderr after PASS\n"
	      "      --print-after-all   print the IR to stderr after every pass\n"
	      "      --verify-each       run the verifier before the pipeline and after every pass\n"
	      "      --time-passes       report the time and resident memory of each pass on stderr\n"
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

/* bad_usage with a message formatted here */
static NORETURN void bad_usagef(const char *fmt, ...) PRINTF(1, 2);
static NORETURN void bad_usagef(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	bad_usage("%s", msg);
}

/* What the driver is asked to do besides the pipeline: the outputs and
 * reports that --all-ranks would silently drop. */
typedef struct Requests {
	int out_given, simulate;
	const char *dot, *svg, *report, *html, *all_ranks;
	const char *ranks; /* --ranks as given, its last rank rank_hi */
	int rank_hi;
} Requests;

/* Option combinations that no graph can satisfy are usage errors (exit 2),
 * found before the input is read (sappc(1), EXIT STATUS). */
static void check_usage(const Options *o, const PassManagerOptions *pm, const Requests *q)
{
	int S = o->pipeline_stages, N = o->device_num;
	if (S > 1 && N % S != 0)
		bad_usagef(
		    "%d devices cannot be divided into %d pipeline stages (--pipeline-stages must divide --device-num)",
		    N, S);
	if (o->rank >= N)
		bad_usagef("--rank=%d is out of range for %d device%s (ranks 0 to %d)", o->rank, N, N == 1 ? "" : "s",
		           N - 1);
	for (int i = 0; i < o->nstage_rules && S > 1; i++) {
		const char *eq = strrchr(o->stage_rules[i], '=');
		long k = strtol(eq + 1, NULL, 10);
		if (k >= S)
			bad_usagef("--stage=%s: stage %ld is out of range for %d pipeline stages (0 to %d)",
			           o->stage_rules[i], k, S, S - 1);
	}
	if (pm->print_after) {
		int found = 0;
		for (int i = 0; i < pm->npasses; i++)
			found |= strcmp(pm->passes[i]->name, pm->print_after) == 0;
		if (!found)
			bad_usage("--print-after=%s names a pass that is not in the pipeline", pm->print_after);
	}
	if (q->all_ranks) {
		const char *other = q->out_given  ? "--output"
		                    : q->dot      ? "--dot"
		                    : q->svg      ? "--svg"
		                    : q->simulate ? "--simulate"
		                    : q->report   ? "--report"
		                    : q->html     ? "--html"
		                                  : NULL;
		if (other)
			bad_usagef("--all-ranks writes one graph per rank and cannot be combined with %s", other);
	}
	if (q->ranks && !q->all_ranks)
		bad_usage("--ranks=%s chooses the ranks --all-ranks=DIR writes: it needs --all-ranks", q->ranks);
	if (q->ranks && q->rank_hi >= N)
		bad_usagef("--ranks=%s is out of range for %d device%s (ranks 0 to %d)", q->ranks, N, N == 1 ? "" : "s",
		           N - 1);
}

/* --ranks=A-B or --ranks=R: the ranks from A to B (inclusive) */
static void parse_ranks(const char *arg, int *lo, int *hi)
{
	const char *s = arg;
	long v[2];
	int n = 0;
	while (n < 2) {
		char *end;
		if (*s < '0' || *s > '9')
			break;
		errno = 0;
		v[n] = strtol(s, &end, 10);
		if (errno || v[n] > 65535)
			break;
		n++;
		s = end;
		if (n == 2 || *s != '-')
			break;
		s++;
	}
	if (!n || *s || (n == 1 && s[-1] == '-'))
		bad_usage("invalid value '%s' for --ranks (expected A-B, the ranks from A to B, or one rank R)", arg);
	if (n == 1)
		v[1] = v[0];
	if (v[1] < v[0])
		bad_usage("--ranks=%s: the last rank is before the first (expected A-B with A <= B)", arg);
	*lo = (int)v[0];
	*hi = (int)v[1];
}

/* --dataset-strategy=TUPLE in MindSpore's per-input syntax, e.g.
 * ((1, 8), (1, 8), (8,)): one tuple of positive ints per dataset input
 * (a trailing comma as in Python, () for a scalar).  Whether the tuples fit
 * the inputs is checked against the graph (the verify pass). */
static const char *skip_blank(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

static void parse_dataset_tuple(Options *o, const char *arg)
{
	const char *s = arg;
	int n = 0, cap = 0;
	int8_t *rank = NULL;
	int64_t *val = NULL;
	s = skip_blank(s);
	if (*s++ != '(')
		goto bad;
	s = skip_blank(s);
	while (*s == '(') {
		s++;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			rank = xrealloc(rank, (size_t)cap);
			val = xrealloc(val, (size_t)cap * MAX_RANK * sizeof *val);
		}
		int r = 0;
		for (s = skip_blank(s); *s != ')'; s = skip_blank(s)) {
			char *end;
			errno = 0;
			long long v = strtoll(s, &end, 10);
			if (end == s || errno || v < 1 || v > 65536 || r == MAX_RANK)
				goto bad;
			val[(size_t)n * MAX_RANK + r++] = v;
			s = end;
			s = skip_blank(s);
			if (*s == ',')
				s++;
			else if (*s != ')')
				goto bad;
		}
		s++;
		rank[n++] = (int8_t)r;
		s = skip_blank(s);
		if (*s == ',')
			s++;
		s = skip_blank(s);
	}
	if (*s++ != ')' || !n)
		goto bad;
	s = skip_blank(s);
	if (*s)
		goto bad;
	o->ds_n = n;
	o->ds_rank = rank;
	o->ds_val = val;
	o->full_batch = 0;
	return;
bad:
	bad_usage("invalid value '%s' for --dataset-strategy (expected data_parallel, full_batch or a tuple of "
		  "strategies such as ((1, 8), (1, 8), (8,)))",
		  arg);
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

/* an optimizer hyper-parameter option: a number >= 0 (below 1 for the
 * momentum and the betas) into its Options field */
static void set_hyper(Options *o, int opt, const char *s)
{
	static const struct {
		int opt;
		const char *name;
		size_t off;
		int unit;
	} hyper[] = {
		{OPT_LEARNING_RATE, "--learning-rate", offsetof(Options, learning_rate), 0},
		{OPT_MOMENTUM, "--momentum", offsetof(Options, momentum), 1},
		{OPT_BETA1, "--beta1", offsetof(Options, beta1), 1},
		{OPT_BETA2, "--beta2", offsetof(Options, beta2), 1},
		{OPT_EPS, "--eps", offsetof(Options, eps), 0},
		{OPT_WEIGHT_DECAY, "--weight-decay", offsetof(Options, weight_decay), 0},
	};
	for (size_t i = 0; i < sizeof hyper / sizeof hyper[0]; i++) {
		if (hyper[i].opt != opt)
			continue;
		char *end;
		errno = 0;
		double v = strtod(s, &end);
		if (errno || end == s || *end || !(v >= 0) || v > 1e6 || (hyper[i].unit && v >= 1)) {
			fprintf(stderr, "sappc: invalid value '%s' for %s (expected a number from 0 %s)\n", s,
				hyper[i].name, hyper[i].unit ? "to below 1" : "up to 1e6");
			fprintf(stderr, "Try 'sappc --help' for more information.\n");
			exit(2);
		}
		*(double *)((char *)o + hyper[i].off) = v;
		o->optimizer_given = 1;
	}
}

/* a memory size: a positive number and a unit B, KB, MB, GB or TB (powers
 * of 1024, as MindSpore reads max_device_memory="1024GB") -> bytes */
static double parse_size(const char *opt, const char *s)
{
	static const struct {
		const char *unit;
		double scale;
	} units[] = {{"B", 1}, {"KB", 1024.0}, {"MB", 1048576.0}, {"GB", 1073741824.0}, {"TB", 1099511627776.0}};
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!errno && end != s && v > 0 && v <= 1e15 && (*s >= '0' && *s <= '9'))
		for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
			if (strcmp(end, units[i].unit) == 0)
				return v * units[i].scale;
	fprintf(stderr,
		"sappc: invalid value '%s' for %s (expected a size with a unit B, KB, MB, GB or TB, such as 1024GB, "
		"30.5GB or 512MB)\n",
		s, opt);
	fprintf(stderr, "Try 'sappc --help' for more information.\n");
	exit(2);
}

/* "X" or "X,Y": two positive numbers (the second defaults to the first) */
static void parse_pair(const char *opt, const char *s, double *a, double *b)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end), y = x;
	if (!errno && *end == ',') {
		const char *t = end + 1;
		y = strtod(t, &end);
		if (end == t)
			y = -1;
	}
	if (errno || end == s || *end || !(x > 0) || !(y > 0) || x > 1e9 || y > 1e9) {
		fprintf(stderr, "sappc: invalid value '%s' for %s (expected X or X,Y with positive numbers)\n", s, opt);
		fprintf(stderr, "Try 'sappc --help' for more information.\n");
		exit(2);
	}
	*a = x;
	*b = y;
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

/* exit status for output written to stdout by --help / --version */
static int stdout_status(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "sappc: error: write error on standard output\n");
		return 3;
	}
	return 0;
}

/* the end of a run: standard output must have been written in every mode;
 * then the output files appear all together, or none of them does */
static int finish(int rc)
{
	if (rc == 0)
		rc = stdout_status();
	if (rc == 0 && out_publish() != 0)
		rc = 3;
	if (rc != 0)
		out_discard();
	return rc;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int make_dir(const char *path)
{
	if (mkdir(path, 0777) == 0 || errno == EEXIST)
		return 0;
	fprintf(stderr, "sappc: cannot create directory '%s': %s\n", path, strerror(errno));
	return -1;
}

/* --all-ranks splits the pipeline: the passes before the first per-rank
 * pass of passes.def (and none after --stop-after) run once on the module
 * read, the others once per rank on a copy of it */
static int shared_passes(const PassManagerOptions *pm, int *nrest)
{
	int k = 0;
	while (k < pm->npasses && !pm->passes[k]->per_rank) {
		if (pm->stop_after && strcmp(pm->stop_after, pm->passes[k]->name) == 0) {
			*nrest = 0;
			return k + 1;
		}
		k++;
	}
	*nrest = pm->npasses - k;
	return k;
}

/* what write_all_ranks shares with its workers */
typedef struct AllRanks {
	const char *dir, *base;
	size_t bl, plen;
	char *path;
	const Module *plan; /* after the shared passes */
	Options *o;
	PassManagerOptions rest; /* the per-rank passes */
} AllRanks;

/* rank r from a copy of the shared module: the per-rank passes, then
 * DIR/rank_R/NAME_validate_0000.ir */
static int lower_one_rank(AllRanks *a, int r)
{
	a->o->rank = r;
	Module *m = ir_module_clone(a->plan);
	int errs = diag_errors();
	int rc = pm_run(m, a->o, &a->rest);
	if (rc == 0 && diag_errors() != errs)
		rc = 1;
	if (rc == 0) {
		snprintf(a->path, a->plen, "%s/rank_%d", a->dir, r);
		if (make_dir(a->path) < 0)
			rc = 3;
	}
	if (rc == 0) {
		snprintf(a->path, a->plen, "%s/rank_%d/%.*s_validate_0000.ir", a->dir, r, (int)a->bl, a->base);
		OutFile of;
		if (out_open_staged(&of, a->path) != 0)
			rc = 3;
		else {
			setvbuf(of.f, NULL, _IONBF, 0); /* the printer buffers: no second copy */
			ir_print_module(of.f, m);
			if (out_commit(&of) != 0)
				rc = 3;
		}
	}
	ir_module_free(m);
	return rc;
}

/* --all-ranks DIR: the shared passes once on m (the module read), then
 * ranks lo..hi (--ranks, every rank by default) each from a copy of it,
 * written to DIR/rank_R/NAME_validate_0000.ir as MindSpore's dump
 * directories are (DIR is staged: see out_dir_stage).  Rank lo runs first,
 * in this process, so that a bad input is reported once; the others in one
 * worker process per processor, forked after the shared work, each taking
 * the next rank not yet taken.  m is freed. */
static int write_all_ranks(const char *dir, const char *in, Module *m, Options *o, const PassManagerOptions *pm,
			   int lo, int hi)
{
	AllRanks a = {.o = o};
	a.base = strrchr(in, '/');
	a.base = a.base ? a.base + 1 : in;
	if (strcmp(in, "-") == 0)
		a.base = "stdin";
	a.bl = strlen(a.base);
	if (a.bl > 3 && strcmp(a.base + a.bl - 3, ".ir") == 0)
		a.bl -= 3;
	int nrest, k = shared_passes(pm, &nrest);
	PassManagerOptions shared = *pm;
	shared.npasses = k;
	shared.hook = NULL;
	int rc = pm_run(m, o, &shared);
	if (rc == 0 && diag_errors())
		rc = 1;
	/* a staging directory, published with the other outputs: a run that
	 * fails half way leaves no rank_R behind */
	if (rc == 0 && !(a.dir = out_dir_stage(dir)))
		rc = 3;
	if (rc != 0) {
		ir_module_free(m);
		return rc;
	}
	a.plan = m;
	a.rest = *pm;
	a.rest.hook = NULL;
	a.rest.npasses = nrest;
	memmove(a.rest.passes, pm->passes + k, (size_t)nrest * sizeof *pm->passes);
	a.rest.list_has_verify_first = 1; /* verified by the shared passes */
	a.rest.parse_time = 0;
	o->strategy_out = NULL; /* the sapp pass has written the plan, every rank's */
	o->explain = NULL;
	a.plen = strlen(a.dir) + a.bl + 64;
	a.path = xmalloc(a.plen);
	xmalloc_keep();
	rc = lower_one_rank(&a, lo);
	/* the warnings and notes are the graph's, not a rank's: rank lo has
	 * shown them; errors of the other ranks still show */
	diag_set_quiet(1);
	a.rest.time_passes = 0;
	o->time_passes = 0;
	long np = sysconf(_SC_NPROCESSORS_ONLN);
	int nw = np < 1 ? 1 : np > 64 ? 64 : (int)np;
	if (hi - lo < 8)
		nw = 1;
	/* the next rank to lower, shared by the workers */
	atomic_int *next = NULL;
	if (rc == 0 && nw > 1) {
		next = mmap(NULL, sizeof *next, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (next == MAP_FAILED)
			next = NULL;
	}
	if (next) {
		atomic_init(next, lo + 1);
		pid_t pids[64];
		int started = 0;
		fflush(NULL);
		for (int w = 0; w < nw; w++) {
			pid_t p = fork();
			if (p == 0) {
				int wrc = 0;
				for (int r; wrc == 0 && (r = atomic_fetch_add(next, 1)) <= hi;)
					wrc = lower_one_rank(&a, r);
				if (wrc != 0) /* the other workers stop at their next rank */
					atomic_store(next, hi + 1);
				fflush(NULL);
				_exit(wrc);
			}
			if (p < 0) {
				atomic_store(next, hi + 1);
				diag_error("cannot start a worker process: %s", strerror(errno));
				rc = 3;
				break;
			}
			pids[started++] = p;
		}
		for (int w = 0; w < started; w++) {
			int st;
			if (waitpid(pids[w], &st, 0) < 0 || !WIFEXITED(st))
				rc = rc ? rc : 3;
			else if (WEXITSTATUS(st) && !rc)
				rc = WEXITSTATUS(st);
		}
		munmap(next, sizeof *next);
	} else {
		for (int r = lo + 1; r <= hi && rc == 0; r++)
			rc = lower_one_rank(&a, r);
	}
	free(a.path);
	ir_module_free(m);
	return rc;
}

/* Does this run plan, lower or simulate the graph (and so treat operators
 * it does not model as whole tensors)?  A run of verify or print alone does
 * not. */
static int plans(const PassManagerOptions *pm, int simulate, const char *report)
{
	if (simulate || report)
		return 1;
	for (int i = 0; i < pm->npasses; i++)
		if (strcmp(pm->passes[i]->name, "sapp") == 0 || strcmp(pm->passes[i]->name, "layouts") == 0)
			return 1;
	return 0;
}

/* Name every operator sappc does not model once, at its first use: a
 * warning, or with --strict an error.  1 when the run must stop. */
static int not_modelled(const Module *m, int strict)
{
	OpaqueUse *u;
	uint32_t n = op_opaque_uses(m, &u);
	for (uint32_t i = 0; i < n; i++) {
		const char *name = sym_str(u[i].prim);
		if (strict)
			diag_error_at(u[i].first,
				      "operator '%s' is not modelled by sappc (%u use%s), refused by --strict",
				      name, u[i].count, u[i].count == 1 ? "" : "s");
		else
			diag_warning_at(u[i].first,
					"operator '%s' is not modelled by sappc (%u use%s): it is never split, "
					"every device computes it whole",
					name, u[i].count, u[i].count == 1 ? "" : "s");
	}
	free(u);
	return strict && n;
}

/* ------------------------------------------------ running the pipeline again
 * The report's data-parallel comparison, the plan view of the pictures and
 * the other ranks of --html come from the module this run has read and
 * verified: pm_run's hook copies it before the first pass after `verify`
 * (base: the data-parallel plan runs the rest of the pipeline on it) and
 * after `sapp` (plan: the global graph with its strategies, from which the
 * other ranks are lowered).  Nothing reads the input twice. */
typedef struct Copies {
	int base_at, plan_at; /* pass index: copy before base_at, after plan_at; -1 none */
	int sapp_at;          /* the sapp pass in the pipeline, -1 none */
	Module *base, *plan;
	const Options *o;
	const PassManagerOptions *pm;
} Copies;

static void take_copy(void *ctx, Module *m, int i, int after)
{
	Copies *c = ctx;
	if (!after && i == c->base_at && !c->base)
		c->base = ir_module_clone(m);
	if (after && i == c->plan_at && !c->plan)
		c->plan = ir_module_clone(m);
}

/* a run after the first: without what the first run already printed or
 * wrote (--explain, --strategy-out, --time-passes) */
static void rerun_options(Options *o)
{
	o->explain = NULL;
	o->strategy_out = NULL;
	o->time_passes = 0;
}

/* pm's passes from index `from` on, quietly and without --print-after or
 * --time-passes (the first run has shown them); 1 when m is lowered with
 * no new error */
static int run_rest(Module *m, int from, const Options *o, const PassManagerOptions *pm, int to_end)
{
	PassManagerOptions rest = *pm;
	rest.print_after = NULL;
	rest.print_after_all = 0;
	rest.time_passes = 0;
	rest.hook = NULL;
	rest.npasses = 0;
	for (int i = from; i < pm->npasses; i++)
		rest.passes[rest.npasses++] = pm->passes[i];
	if (to_end)
		rest.stop_after = NULL;
	int errs = diag_errors();
	diag_set_silent(1);
	int ok = pm_run(m, o, &rest) == 0 && diag_errors() == errs;
	diag_set_silent(0);
	diag_restore(errs);
	return ok;
}

/* the pure data-parallel plan of the graph, on the rank of c: every
 * strategy replaced by the default batch-parallel one (semi_auto ignoring
 * the given ones), collected; NULL (warned) when it cannot be lowered */
static Report *data_parallel(Copies *cp, Module *m, const ReportConfig *c)
{
	Report *dp = xcalloc(1, sizeof *dp);
	if (cp->base_at < 0) { /* no pass but verify: the module is its own plan */
		report_collect(m, c, dp);
		return dp;
	}
	Options od = *cp->o;
	rerun_options(&od);
	od.semi_auto = 1;
	od.data_parallel = 1;
	od.record_levels = 0;
	Module *md = cp->base;
	cp->base = NULL;
	int ok = md && run_rest(md, cp->base_at, &od, cp->pm, 1);
	if (ok)
		report_collect(md, c, dp);
	ir_module_free(md);
	if (!ok) {
		diag_warning("no data-parallel comparison: the data-parallel plan of this graph cannot be lowered");
		free(dp);
		return NULL;
	}
	return dp;
}

/* --html: rank k lowered from the plan copy like the module of --rank */
static Module *rank_module(void *ctx, int k)
{
	Copies *cp = ctx;
	if (!cp->plan || cp->plan_at < 0)
		return NULL;
	Options ro = *cp->o;
	rerun_options(&ro);
	ro.rank = k;
	Module *mk = ir_module_clone(cp->plan);
	if (!run_rest(mk, cp->plan_at + 1, &ro, cp->pm, 0)) {
		ir_module_free(mk);
		return NULL;
	}
	return mk;
}

/* --view=plan draws the global graph with the strategies the sapp pass
 * chose: m itself when nothing after sapp ran (one device, or a pipeline
 * that stops at sapp), else the copy taken after sapp.  Operators get the
 * stage the pipeline pass would give them, so the picture has one cluster
 * per stage.  NULL after an error (reported). */
static Module *plan_module(Copies *cp, Module *m, const Options *o)
{
	Module *p = cp->plan_at >= 0 ? cp->plan : m;
	if (!p)
		return NULL;
	if (cp->sapp_at >= 0 && lower_assign_stages(p, o) != 0)
		return NULL;
	return p;
}

int main(int argc, char **argv)
{
	Options o = {0};
	PassManagerOptions pm = {0};
	const char *out = "-", *dot = NULL, *svg = NULL, *html = NULL;
	int passes_given = 0, out_given = 0, simulate = 0, report_json = 0, strict = 0;
	const char *report = NULL;
	ReportConfig rc_cfg = {0, 0, 8, 100.0, 12.5, 2.0, 10.0, NULL, 1, SCHED_1F1B};
	SimOptions so = {0};
	so.max_mb = 2048;
	so.gradcheck_mb = 4;
	const char *all_ranks = NULL, *ranks = NULL;
	int rank_lo = 0, rank_hi = -1; /* --ranks; -1: the last rank */
	const char **stage_rules = NULL;
	const char **recompute_rules = NULL;
	int strategy_format = -1; /* CkptFormat; -1: from the file name */
	const char *ckpt_out = NULL, *group_out = NULL;
	o.device_num = 1;
	o.pipeline_stages = 1;
	o.micro_batch_num = 1;
	o.mem_coef = 0.1;
	o.device_memory = 1024.0 * 1073741824.0; /* MindSpore's max_device_memory default, "1024GB" */
	o.world_group = "hccl_world_group";
	o.max_nodes = 1500;
	o.learning_rate = o.momentum = o.beta1 = o.beta2 = o.eps = o.weight_decay = -1; /* the optimizer's default */

	/* getopt prefixes its messages with argv[0]; ours say "sappc:" */
	static char progname[] = "sappc";
	argv[0] = progname;
	int c;
	while ((c = getopt_long(argc, argv, "o:n:q", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			out_given = 1;
			break;
		case 'n':
			o.device_num = (int)parse_long("--device-num", optarg, 1, 65536);
			break;
		case 'q':
			o.quiet = 1;
			break;
		case OPT_STRICT:
			strict = 1;
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
		case OPT_HTML:
			html = optarg;
			o.record_levels = 1; /* the page shows every operator's search levels */
			break;
		case OPT_FRAGMENT:
			o.fragment = 1;
			break;
		case OPT_VIEW:
			if (strcmp(optarg, "plan") == 0)
				o.view_plan = 1;
			else if (strcmp(optarg, "rank") == 0)
				o.view_plan = 0;
			else
				bad_usage("invalid --view '%s' (expected rank or plan)", optarg);
			break;
		case OPT_MAX_NODES:
			o.max_nodes = (int)parse_long("--max-nodes", optarg, 1, 100000000);
			break;
		case OPT_FOCUS:
			o.focus = optarg;
			break;
		case OPT_MEM_COEF: {
			char *end;
			errno = 0;
			o.mem_coef = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(o.mem_coef > 0) || o.mem_coef > 1e12)
				bad_usage("invalid value '%s' for --mem-coef (expected a positive number)", optarg);
			break;
		}
		case OPT_FULLY_USE_DEVICES:
			o.fully_use_devices = 1;
			break;
		case OPT_DATASET_STRATEGY:
			if (strcmp(optarg, "data_parallel") == 0)
				o.full_batch = 0;
			else if (strcmp(optarg, "full_batch") == 0)
				o.full_batch = 1;
			else
				parse_dataset_tuple(&o, optarg);
			break;
		case OPT_INTERFERED:
			o.interfered = 1;
			break;
		case OPT_PIPELINE_STAGES:
			o.pipeline_stages = (int)parse_long("--pipeline-stages", optarg, 1, PIPELINE_MAX_STAGES);
			break;
		case OPT_MICRO_BATCH_NUM:
			o.micro_batch_num = (int)parse_long("--micro-batch-num", optarg, 1, 1 << 30);
			break;
		case OPT_PARALLEL_OPTIMIZER:
			o.enable_parallel_optimizer = 1;
			break;
		case OPT_PARALLEL_MODE:
			if (strcmp(optarg, "auto") == 0 || strcmp(optarg, "recursive_programming") == 0)
				o.semi_auto = 0;
			else if (strcmp(optarg, "semi_auto") == 0)
				o.semi_auto = 1;
			else
				bad_usage("invalid value '%s' for --parallel-mode (expected auto, recursive_programming or semi_auto)",
					  optarg);
			break;
		case OPT_EXPLAIN:
			o.explain = optarg;
			break;
		case OPT_STRATEGY_OUT:
			o.strategy_out = optarg;
			break;
		case OPT_STRATEGY_IN:
			o.strategy_in = optarg;
			break;
		case OPT_SIMULATE:
			simulate = 1;
			break;
		case OPT_SEED:
			so.seed = (uint64_t)parse_long("--seed", optarg, 0, LONG_MAX);
			break;
		case OPT_SIMULATE_MAX_MB:
			so.max_mb = (double)parse_long("--simulate-max-mb", optarg, 1, 1L << 30);
			break;
		case OPT_SIMULATE_GRADCHECK_MB:
			so.gradcheck_mb = (double)parse_long("--simulate-gradcheck-mb", optarg, 0, 1L << 30);
			break;
		case OPT_SIMULATE_THREADS:
			so.threads = (int)parse_long("--simulate-threads", optarg, 1, 1024);
			break;
		case OPT_REPORT:
			report = optarg ? optarg : "-";
			break;
		case OPT_REPORT_FORMAT:
			if (strcmp(optarg, "json") == 0)
				report_json = 1;
			else if (strcmp(optarg, "text") == 0)
				report_json = 0;
			else
				bad_usage("invalid --report-format '%s' (expected text or json)", optarg);
			break;
		case OPT_BANDWIDTH:
			parse_pair("--bandwidth", optarg, &rc_cfg.bw_intra, &rc_cfg.bw_inter);
			break;
		case OPT_LATENCY:
			parse_pair("--latency", optarg, &rc_cfg.lat_intra, &rc_cfg.lat_inter);
			break;
		case OPT_DEVICES_PER_NODE:
			rc_cfg.per_node = (int)parse_long("--devices-per-node", optarg, 1, 65536);
			break;
		case OPT_RANK:
			o.rank = (int)parse_long("--rank", optarg, 0, 65535);
			break;
		case OPT_ALL_RANKS:
			all_ranks = optarg;
			break;
		case OPT_RANKS:
			parse_ranks(optarg, &rank_lo, &rank_hi);
			ranks = optarg;
			break;
		case OPT_STAGE: {
			const char *eq = strrchr(optarg, '=');
			if (!eq || eq == optarg)
				bad_usage("--stage=%s: expected PATTERN=K", optarg);
			parse_long("--stage", eq + 1, 0, PIPELINE_MAX_STAGES - 1);
			stage_rules = xrealloc(stage_rules, (size_t)(o.nstage_rules + 1) * sizeof *stage_rules);
			stage_rules[o.nstage_rules++] = optarg;
			o.stage_rules = stage_rules;
			break;
		}
		case OPT_WORLD_GROUP:
			if (!*optarg)
				bad_usage("--world-group needs a name%s", "");
			o.world_group = optarg;
			break;
		case OPT_ENABLE_ALLTOALL:
			o.enable_alltoall = 1;
			break;
		case OPT_DISABLE_REDIST_OPT:
			o.no_redist_opt = 1;
			break;
		case OPT_OPT_SHARD_SIZE:
			o.optimizer_weight_shard_size = (int)parse_long("--optimizer-weight-shard-size", optarg, 1, 65536);
			break;
		case OPT_PARALLEL_DETAIL:
			o.parallel_detail = 1;
			break;
		case OPT_VIRTUAL_OPS:
			o.virtual_ops = 1;
			break;
		case OPT_PHASE:
			if (strcmp(optarg, "auto") == 0)
				o.phase = PHASE_AUTO;
			else if (strcmp(optarg, "train") == 0)
				o.phase = PHASE_TRAIN;
			else if (strcmp(optarg, "predict") == 0)
				o.phase = PHASE_PREDICT;
			else
				bad_usage("invalid value '%s' for --phase (expected auto, train or predict)", optarg);
			break;
		case OPT_DEVICE_MEMORY:
			o.device_memory = parse_size("--device-memory", optarg);
			break;
		case OPT_AUTO_PIPELINE:
			o.auto_pipeline = 1;
			break;
		case OPT_STRATEGY_FORMAT:
			strategy_format = ckpt_format_named(optarg);
			if (strategy_format < 0)
				bad_usage("invalid value '%s' for --strategy-format (expected sappc, mindspore or mindspore-json)",
					  optarg);
			break;
		case OPT_GROUP_CKPT_OUT:
			group_out = optarg;
			break;
		case OPT_FORWARD_ONLY:
			o.forward_only = 1;
			break;
		case OPT_PIPELINE_SCHEDULER:
			if (strcmp(optarg, "1f1b") == 0)
				o.pipeline_scheduler = SCHED_1F1B;
			else if (strcmp(optarg, "gpipe") == 0)
				o.pipeline_scheduler = SCHED_GPIPE;
			else
				bad_usage("invalid value '%s' for --pipeline-scheduler (expected 1f1b or gpipe)", optarg);
			break;
		case OPT_OPTIMIZER:
			if (strcmp(optarg, "momentum") == 0)
				o.optimizer = OPTIM_MOMENTUM;
			else if (strcmp(optarg, "sgd") == 0)
				o.optimizer = OPTIM_SGD;
			else if (strcmp(optarg, "adam") == 0)
				o.optimizer = OPTIM_ADAM;
			else if (strcmp(optarg, "adamw") == 0)
				o.optimizer = OPTIM_ADAMW;
			else
				bad_usage("invalid value '%s' for --optimizer (expected momentum, sgd, adam or adamw)",
					  optarg);
			o.optimizer_given = 1;
			break;
		case OPT_LEARNING_RATE:
		case OPT_MOMENTUM:
		case OPT_BETA1:
		case OPT_BETA2:
		case OPT_EPS:
		case OPT_WEIGHT_DECAY:
			set_hyper(&o, c, optarg);
			break;
		case OPT_GRADIENTS_MEAN:
			o.gradients_mean = 1;
			o.optimizer_given = 1;
			break;
		case OPT_RECOMPUTE:
			if (!*optarg || optarg[0] == '.' || optarg[strlen(optarg) - 1] == '.' || strstr(optarg, ".."))
				bad_usage("--recompute=%s: expected a cell path such as _backbone.layer1", optarg);
			recompute_rules =
			    xrealloc(recompute_rules, (size_t)(o.nrecompute_rules + 1) * sizeof *recompute_rules);
			recompute_rules[o.nrecompute_rules++] = optarg;
			o.recompute_rules = recompute_rules;
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
	{
		const char *env = getenv("MS_INTERFERED_SAPP");
		if (env && strcmp(env, "1") == 0)
			o.interfered = 1;
	}
	if (o.nrecompute_rules && (o.forward_only || o.phase == PHASE_PREDICT))
		bad_usage("%s: --recompute needs a training step", o.forward_only ? "--forward-only" : "--phase=predict");
	if (o.optimizer_given && (o.forward_only || o.phase == PHASE_PREDICT))
		bad_usage("%s: the optimizer options need a training step (--optimizer, --learning-rate, "
			  "--momentum, --beta1, --beta2, --eps, --weight-decay, --gradients-mean)",
			  o.forward_only ? "--forward-only" : "--phase=predict");
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
	check_usage(&o, &pm, &(Requests){out_given, simulate, dot, svg, report, html, all_ranks, ranks, rank_hi});
	pm.verify_each = pm.verify_each;
	o.verify_each = pm.verify_each;
	o.time_passes = pm.time_passes;
	diag_set_quiet(o.quiet);

	/* MindSpore's strategy checkpoint describes a lowered rank: written
	 * after the pipeline, not by the sapp pass */
	if (o.strategy_out && strategy_format < 0)
		strategy_format = ckpt_format_of_name(o.strategy_out);
	if (o.strategy_out && strategy_format != CKPT_SAPPC) {
		ckpt_out = o.strategy_out;
		o.strategy_out = NULL;
	}
	if ((ckpt_out || group_out) && all_ranks)
		bad_usage("%s describes one rank: use --rank=R, not --all-ranks",
			  ckpt_out ? "a MindSpore strategy checkpoint" : "--group-ckpt-out");
	/* never write over the input, nor two outputs to one file */
	const char *out_names[] = {"-o", "--dot", "--svg", "--strategy-out", "--report", "--all-ranks",
				   "--strategy-out", "--group-ckpt-out", "--html"};
	const char *out_paths[] = {out, dot, svg, o.strategy_out, report, all_ranks, ckpt_out, group_out, html};
	if (out_check_paths(in, (int)(sizeof out_paths / sizeof *out_paths), out_names, out_paths) != 0)
		return 2;

	char *buf;
	size_t len;
	if (io_read_file(in, &buf, &len) != 0)
		return 3;
	double t0 = now();
	Module *m = ir_parse(strcmp(in, "-") == 0 ? "<stdin>" : in, buf, len, o.fragment);
	pm.parse_time = now() - t0;
	if (pm.time_passes)
		pm.parse_rss = pm_rss_now();
	if (!m) {
		io_free_file(buf);
		return 1;
	}
	/* --strict: an operator sappc does not model stops the run here */
	int stop = plans(&pm, simulate, report) && not_modelled(m, strict);
	stop = stop || recompute_check_patterns(m, &o);
	if (all_ranks && !stop) {
		int rc = write_all_ranks(all_ranks, in, m, &o, &pm, rank_lo, rank_hi < 0 ? o.device_num - 1 : rank_hi);
		io_free_file(buf);
		free(stage_rules);
		free(recompute_rules);
		free((void *)o.ds_rank);
		free((void *)o.ds_val);
		intern_free_all();
		return finish(rc);
	}
	/* the copies the report, the plan view and --html run again */
	Copies cp = {-1, -1, -1, NULL, NULL, &o, &pm};
	int last = pm.npasses - 1;
	for (int i = 0; i < pm.npasses; i++) {
		if (pm.passes[i]->fn == pass_sapp && cp.sapp_at < 0)
			cp.sapp_at = i;
		if (pm.passes[i]->fn != pass_verify && cp.base_at < 0)
			cp.base_at = i;
		if (pm.stop_after && strcmp(pm.stop_after, pm.passes[i]->name) == 0) {
			last = i;
			break;
		}
	}
	for (int i = last + 1; i < pm.npasses && cp.base_at < 0; i++)
		if (pm.passes[i]->fn != pass_verify)
			cp.base_at = i;
	if (!report && !html)
		cp.base_at = -2; /* not wanted */
	if (cp.sapp_at >= 0 && last > cp.sapp_at && o.device_num > 1 && ((o.view_plan && (dot || svg)) || html))
		cp.plan_at = cp.sapp_at;
	pm.hook = take_copy;
	pm.hook_ctx = &cp;
	int rc = stop ? 1 : pm_run(m, &o, &pm);
	pm.hook = NULL;
	if (rc == 0 && diag_errors())
		rc = 1;
	/* stopped (--stop-after) before the base copy: m is that module */
	if (rc == 0 && cp.base_at >= 0 && !cp.base)
		cp.base = ir_module_clone(m);
	Report *dp = NULL;
	if (rc == 0 && (report || html)) {
		rc_cfg.world = o.device_num;
		rc_cfg.rank = o.rank;
		rc_cfg.world_group = o.world_group;
		rc_cfg.stages = sapp_plan_stages(m, &o);
		rc_cfg.scheduler = o.pipeline_scheduler;
	}
	if (rc == 0 && ckpt_out)
		rc = ckpt_write(m, &o, ckpt_out, (CkptFormat)strategy_format);
	if (rc == 0 && group_out)
		rc = ckpt_write_groups(m, &o, group_out);
	if (rc == 0 && simulate) {
		so.world_group = o.world_group;
		rc = sim_check_plan(m, buf, len, &o, &pm, &so, stdout);
	}
	if (rc == 0 && report) {
		dp = data_parallel(&cp, m, &rc_cfg);
		rc = report_run(m, dp, &rc_cfg, report, report_json);
	}
	if (rc == 0 && ((!simulate && !(report && strcmp(report, "-") == 0)) || out_given)) {
		OutFile of;
		if (out_open(&of, out) != 0)
			rc = 3;
		else {
			if (of.f != stdout) /* the printer buffers: no second copy */
				setvbuf(of.f, NULL, _IONBF, 0);
			ir_print_module(of.f, m);
			if (out_commit(&of) != 0)
				rc = 3;
		}
	}
	Module *pic = m;
	if (rc == 0 && (dot || svg) && o.view_plan && !(pic = plan_module(&cp, m, &o)))
		rc = 1;
	if (rc == 0 && dot && gv_write_dot(pic, &o, dot) != 0)
		rc = 3;
	if (rc == 0 && svg && gv_render_svg(pic, &o, svg) != 0)
		rc = 3;
	if (rc == 0 && html) {
		Options pv = o;
		pv.view_plan = 1;
		HtmlInputs hin = {NULL, 0, NULL, rank_module, &cp};
		if (o.device_num > 1)
			hin.plan_failed = !(hin.plan = plan_module(&cp, m, &pv));
		if (!report && !hin.plan_failed)
			dp = data_parallel(&cp, m, &rc_cfg);
		hin.dp = dp;
		rc = html_write(m, &hin, &o, &rc_cfg, html);
	}
	free(dp);
	ir_module_free(cp.base);
	ir_module_free(cp.plan);
	ir_module_free(m);
	io_free_file(buf);
	free(stage_rules);
	free(recompute_rules);
	free((void *)o.ds_rank);
	free((void *)o.ds_val);
	intern_free_all();
	return finish(rc);
}
