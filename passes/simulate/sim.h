/* sim.h - the numeric simulator behind --simulate: run the forward graph of
 * the single-device program and of every rank's lowered program on the same
 * (seeded, random) data, and check that each rank computes its slice of what
 * the single device computes.
 *
 * Three layers, each usable alone:
 *   1. the interpreter (interp.c, kernels.c): float32 forward semantics of the
 *      operators of ir/ops.def, one rank at a time;
 *   2. the executor (exec.c): R ranks run together, one Module per rank;
 *      collectives and Send/Receive block until their peers arrive;
 *   3. the comparison (compare.c): each operator present in both the
 *      single-device module and a rank's module is checked against the slice
 *      of the global value that a caller-supplied hook names.
 *
 * Every tensor is stored as float32, whatever its declared dtype: integer and
 * bool tensors hold exact small integers (token ids, labels, masks), and
 * Float16/BFloat16 programs are simulated in float32.  Accumulations
 * (MatMul, Conv2D, reductions, softmax) run in double.
 */
#ifndef SAPPC_SIM_H
#define SAPPC_SIM_H

#include "sappc.h"

typedef enum { SD_F32, SD_INT, SD_BOOL } SimDType;

typedef struct SimTensor {
	int ndim;
	uint8_t dtype; /* SimDType */
	int64_t shape[MAX_RANK];
	int64_t numel;
	float *data; /* row-major; may be shared with other tensors (views): never written after creation */
} SimTensor;

typedef enum { SV_NONE, SV_TENSOR, SV_TUPLE } SimValueKind;

typedef struct SimValue SimValue;
struct SimValue {
	uint8_t kind;     /* SimValueKind; SV_NONE for monads, UpdateState, None */
	SimTensor *t;     /* SV_TENSOR */
	SimValue **elems; /* SV_TUPLE */
	uint32_t n;
};

/* Where one rank's tensor sits in the global (single-device) tensor.
 * `rank` is the number of tensor dimensions described (the tensor rank, not
 * the device rank); offset/shape give the block.  replicated_sum = 0: the
 * rank holds exactly global[offset : offset+shape]; k > 0: the rank holds one
 * of k partial sums of that block (e.g. a MatMul output before its
 * AllReduce) - the k ranks reporting the same node, offset, shape and k are
 * added before the comparison. */
typedef struct SimSlice {
	int rank;
	int64_t offset[MAX_RANK];
	int64_t shape[MAX_RANK];
	int replicated_sum;
} SimSlice;

/* The layout hook, filled by the lowering (from Node.lay) or by a test.
 * local: a node (CNode or parameter) of device_rank's module; global: its
 * counterpart in the single-device module.  Return 1 after filling *out,
 * 0 when no layout is known (the tensor is then taken whole if its shape
 * equals the global one, else skipped), -1 for a layout error. */
typedef int (*SimSliceFn)(void *ctx, const Node *local, const Node *global, int device_rank, SimSlice *out);

typedef enum {
	SIM_MATCH_ORDER,    /* the k-th collective of a group on each rank go together */
	SIM_MATCH_INSTANCE, /* collectives of a group with the same instance name go together */
} SimMatch;

typedef struct SimOptions {
	uint64_t seed;           /* --seed: every input value derives from it and the parameter name */
	double max_mb;           /* refuse when the estimated tensor storage exceeds it; <= 0: no limit */
	const char *world_group; /* group name meaning "all ranks"; NULL: hccl_world_group or nccl_world_group */
	int match;               /* SimMatch */
	/* sim_run_ranks: the single-device module whose parameters the ranks
	 * slice (global shapes, value ranges), and the hook naming each rank
	 * parameter's block.  NULL global: each rank draws its own inputs. */
	Module *global;
	SimSliceFn slice;
	void *slice_ctx;
	FILE *trace; /* if set: one line per executed operator */
} SimOptions;

typedef struct SimRun SimRun;

/* One run of nranks modules (rank i = ranks[i]).  sim_new only sets up;
 * sim_set_input may then fix a parameter's values (n = its element count);
 * sim_exec draws the other inputs, checks the memory estimate, runs every
 * rank to its Return and keeps every node's value.  0 ok, -1 error. */
SimRun *sim_new(Module **ranks, int nranks, const SimOptions *o);
int sim_set_input(SimRun *r, int rank, const char *param, const float *data, int64_t n);
int sim_exec(SimRun *r);
/* sim_new + sim_exec; never NULL: check sim_error() */
SimRun *sim_run(Module *m, const SimOptions *o);
SimRun *sim_run_ranks(Module **ranks, int nranks, const SimOptions *o);
void sim_free(SimRun *r);

const char *sim_error(const SimRun *r); /* NULL, or the first error of the run ("file:line:col: ...") */
/* the same without its location, which goes to *loc (line 0: none) */
const char *sim_error_detail(const SimRun *r, Loc *loc);
int sim_nranks(const SimRun *r);
Module *sim_module(const SimRun *r, int rank);
const SimValue *sim_value(const SimRun *r, int rank, const Node *n); /* NULL if not computed */
const SimTensor *sim_tensor(const SimRun *r, int rank, const Node *n);
const SimValue *sim_result(const SimRun *r, int rank); /* the value of Return */
int64_t sim_bytes(const SimRun *r);                    /* tensor storage allocated */

/* Tensor storage a run of these modules needs (declared shapes, 4 bytes an
 * element, views not counted). */
int64_t sim_estimate_bytes(Module **ranks, int nranks);

/* ------------------------------------------------------------- report.c */
/* --simulate's report on one run: its size and a line per output. */
void sim_print_summary(FILE *f, const SimRun *r, uint64_t seed);
/* --simulate: run m, print the summary to out or the error through diag; 0 ok, 1 error */
int sim_run_and_print(Module *m, const SimOptions *o, FILE *out);

/* ------------------------------------------------------------ compare.c */
typedef struct SimMismatch {
	const Node *global, *local;
	int rank;
	int ndim;
	int64_t index[MAX_RANK];  /* worst element, in the rank's tensor */
	int64_t gindex[MAX_RANK]; /* the same element in the global tensor */
	double expected, got;
	int64_t nbad, numel; /* elements beyond tolerance, elements compared */
	char why[512];       /* a structural mismatch (shape, slice); "" for a numeric one */
} SimMismatch;

typedef struct SimReport {
	int compared;      /* (operator, rank) pairs checked */
	int skipped;       /* present in both, but no slice known and shapes differ */
	int mismatched;    /* pairs beyond tolerance or structurally wrong */
	SimMismatch first; /* the first mismatch in the single-device graph's order, lowest rank */
} SimReport;

/* Compare every rank's operators with the single-device run: |got - expected|
 * <= rtol * max(1, |expected|) element-wise (rtol <= 0: 1e-4).  Returns 0 when
 * everything compared agrees, 1 on a mismatch (rep->first), -1 on an error
 * of the hook. */
int sim_compare(const SimRun *global, const SimRun *ranks, SimSliceFn slice, void *ctx, double rtol, SimReport *rep);
void sim_print_report(FILE *f, const SimReport *rep);

#endif
