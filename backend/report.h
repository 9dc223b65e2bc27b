/* report.h - communication and memory report of a lowered plan. */
#ifndef SAPPC_REPORT_H
#define SAPPC_REPORT_H

#include "../ir/sappc.h"

enum { RC_FORWARD, RC_REDIST, RC_GRADIENT, RC_OPTIMIZER, RC_PIPELINE, RC_OTHER, RC_COUNT };
extern const char *const report_category_names[RC_COUNT];

typedef struct ReportConfig {
	int world;           /* devices */
	int rank;            /* the rank whose graph is reported */
	int per_node;        /* devices per node */
	double bw_intra, bw_inter;   /* GB/s */
	double lat_intra, lat_inter; /* microseconds */
	const char *world_group;
	int stages;          /* pipeline stages of the plan (1: none) */
	int scheduler;       /* --pipeline-scheduler: SCHED_* */
} ReportConfig;

#define REPORT_MAX_COMM 100000

typedef struct ReportComm {
	const Node *node;
	const char *kind;
	int group, category, phase; /* phase: IrPhase */
	double bytes, secs;
} ReportComm;

/* forward, backward, optimizer: IrPhase order */
extern const char *const report_phase_names[3];

typedef struct Report {
	double cat_bytes[RC_COUNT], cat_secs[RC_COUNT];
	int64_t param_bytes, act_bytes;
	int nops, ncomm;
	/* a training step (backward or optimizer nodes, TRAIN-CONTRACT.md):
	 * communication by phase, and the parameters split into the weights,
	 * the optimizer's state and the gradients the optimizer reads */
	int training;
	int ph_ops[3];
	double ph_bytes[3], ph_secs[3];
	int64_t weight_bytes, grad_bytes, state_bytes, bwd_bytes;
	/* recompute (training-step.md §5.2): the forward values the backward
	 * no longer keeps (origins, left out of act_bytes) and the duplicates
	 * that compute them again in the backward (part of bwd_bytes) */
	int64_t saved_bytes, recomputed_bytes;
	ReportComm comm[REPORT_MAX_COMM];
} Report;

/* volume (bytes sent per device) and alpha-beta time of one operation */
void report_cost(const ReportConfig *c, int op, int group, int64_t bytes, int inter, double *vol, double *secs);
void report_collect(const Module *m, const ReportConfig *c, Report *r);
void report_print_text(FILE *f, const Module *m, const ReportConfig *c, const Report *r, const Report *dp);
int report_print_json(FILE *f, const Module *m, const ReportConfig *c, const Report *r, const Report *dp);
/* {category: {bytes, seconds}, parameters_bytes, activations_bytes} (jansson json_t *) */
struct json_t;
struct json_t *report_totals_json(const Report *r);
/* the report of m next to dp, the data-parallel plan's (NULL: none), to path ("-" = stdout) */
int report_run(const Module *m, const Report *dp, const ReportConfig *c, const char *path, int json);

#endif
