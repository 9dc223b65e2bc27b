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

/* How the partial values of a block combine into the global one: the
 * reduction of the AllReduce (or ReduceScatter) that completes them. */
typedef enum { SIM_SUM, SIM_MEAN, SIM_MAX, SIM_MIN, SIM_PROD } SimCombine;

/* Where one rank's tensor sits in the global (single-device) tensor.
 * `rank` is the number of tensor dimensions described (the tensor rank, not
 * the device rank); offset/shape give the block.  replicated_sum = 0: the
 * rank holds exactly global[offset : offset+shape]; k > 0: the rank holds one
 * of k partial values of that block (e.g. a MatMul output before its
 * AllReduce) - the k ranks reporting the same node, block, k and `group`
 * are combined with `combine` (SimCombine; 0 = sum) before the comparison.
 * `group` tells apart the replicas of a partial block: ranks that hold the
 * same partial sums (a repeated device dimension) report different groups. */
typedef struct SimSlice {
	int rank;
	int64_t offset[MAX_RANK];
	int64_t shape[MAX_RANK];
	int replicated_sum;
	int combine;   /* SimCombine, for replicated_sum > 0 */
	int64_t group; /* for replicated_sum > 0 */
} SimSlice;

/* The layout hook, filled by the lowering (from Node.lay) or by a test.
 * local: a node (CNode or parameter) of device_rank's module; global: its
 * counterpart in the single-device module.  Return 1 after filling *out,
 * 0 when no layout is known (the tensor is then taken whole if its shape
 * equals the global one, else skipped), 2 when the rank's value is not a
 * slice of the global one and must not be compared (a masked lookup that
 * only its AllReduce completes, a pipeline stage's Send), -1 for a layout
 * error. */
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
	 * parameter's block.  NULL global: each rank draws its own inputs.
	 * The hooks (slice, init, grad_scale) are called from the run's
	 * threads, several at once: they must not write shared state. */
	Module *global;
	SimSliceFn slice;
	void *slice_ctx;
	FILE *trace;     /* if set: one line per executed operator */
	unsigned faults; /* SIM_FAULT_*: test-only wrong programs, to see the check bite */
	/* A parameter with a fixed initial value (a hyper-parameter of the
	 * optimizer): return 1 with *value set.  NULL, or 0: optimizer state
	 * gets MindSpore's initial values (inputs.c), anything else is drawn. */
	int (*init)(void *ctx, const Node *param, double *value);
	void *init_ctx;
	/* The factor the ranks' gradient of a weight carries relative to the
	 * single device's (--gradients-mean: 1/R, R the weight's replicas).
	 * The optimizer updates of a run apply it to their gradient operand, so
	 * that the single device updates its weights as the ranks do; the step
	 * comparison expects the gradients scaled by it.  NULL: 1. */
	double (*grad_scale)(void *ctx, const Node *weight);
	void *grad_scale_ctx;
	/* --simulate-gradcheck-mb: check the single-device gradients against
	 * central differences when its tensors need at most this many MB (0:
	 * never) */
	double gradcheck_mb;
	/* if set: only the nodes whose id is marked are evaluated, the others
	 * get an empty value (the central differences need only the loss) */
	const uint8_t *only;
	/* --simulate-threads: threads the ranks of a run share (0: every
	 * online core, see sim_default_threads); the values do not depend on it */
	int threads;
} SimOptions;

/* the default of SimOptions.threads: the online cores */
int sim_default_threads(void);

/* Test-only faults a run can inject into the programs it runs (sappc reads
 * them from SAPPC_TEST_DROP_GRAD_MEAN, SAPPC_TEST_BREAK_RS_BPROP,
 * SAPPC_TEST_DROP_MICRO_GRAD and SAPPC_TEST_BAD_SR_TAG, see driver.c):
 *   DROP_GRAD_MEAN - the x 1/n after a gradient's AllReduce or ReduceScatter
 *                    (--gradients-mean) passes its input through;
 *   RS_BPROP       - a backward ReduceScatter (the bprop of an AllGather)
 *                    hands each rank its own block of its own input, without
 *                    adding the other ranks' contributions;
 *   DROP_MICRO     - every backward value of micro-batch 1 is zero (its
 *                    gradient is dropped from the accumulation);
 *   BAD_SR_TAG     - the Sends of micro-batch 1 carry sr_tag + 1;
 *   RECOMPUTE      - a recomputed duplicate whose output has its first
 *                    operand's shape passes that operand through
 *                    (SAPPC_TEST_BREAK_RECOMPUTE). */
enum {
	SIM_FAULT_DROP_GRAD_MEAN = 1,
	SIM_FAULT_RS_BPROP = 2,
	SIM_FAULT_DROP_MICRO = 4,
	SIM_FAULT_BAD_SR_TAG = 8,
	SIM_FAULT_RECOMPUTE = 16
};

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
/* What a run of these modules keeps besides tensor storage: a value, a
 * tensor header and list entries per node, a state per rank. */
int64_t sim_estimate_state_bytes(Module **ranks, int nranks);
/* What comparing a run with the single-device one needs at a time. */
int64_t sim_estimate_scratch_bytes(Module *global);

/* An optimizer update (ApplyMomentum, SGD, Adam, AdamWeightDecay): the
 * position of its gradient operand; -1 for any other node.  The weight it
 * updates is operand 0 (training-step.md §3.1). */
int sim_grad_operand(const Node *n);
/* what parameter p held before the run wrote it in place (its current
 * value if it was never written); NULL if it has none */
const SimTensor *sim_initial_tensor(const SimRun *r, int rank, const Node *p);

/* ---------------------------------------------------------- gradcheck.c */
typedef struct SimGradCheck {
	int weights, probes, bad; /* weights checked, directional derivatives compared, of which wrong */
	double max_err;           /* largest |difference| / (|gradient| |step|) */
	const Node *worst_param;
	const Node *first_param, *first_node; /* the first wrong one: its weight and gradient node */
	int first_probe;
	double claimed, measured; /* its directional derivative: from the gradient, from the loss */
	char skipped[640];        /* why the check stopped ("" if it did not) */
} SimGradCheck;

/* Check the gradients of G (a run of the single-device step m) against
 * central differences of its loss with step h, tolerance tol relative to
 * |gradient|.  0 all agree, 1 some do not, -1 a run failed (skipped). */
int sim_check_gradients(Module *m, const SimRun *G, const SimOptions *so, double h, double tol, SimGradCheck *out);
void sim_print_gradcheck(FILE *f, const SimGradCheck *c);

/* ------------------------------------------------------------- report.c */
/* --simulate's report on one run: its size and a line per output. */
void sim_print_summary(FILE *f, const SimRun *r, uint64_t seed);

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

/* One output of the program (an element of a returned tuple, or the
 * returned value): how many ranks return it and how many agree. */
typedef struct SimOutput {
	const Node *global; /* the single-device node whose value it is */
	int ranks;          /* ranks that return it (a pipeline stage that sends on returns none) */
	int agree;          /* of those, ranks whose value agrees within tolerance */
	double max_err;     /* largest relative error among them */
} SimOutput;

#define SIM_MAX_OUTPUTS 16

typedef struct SimReport {
	int compared;      /* (operator, rank) pairs checked */
	int skipped;       /* present in both, but no slice known and shapes differ */
	int excluded;      /* present in both, but the hook says the rank's value is not a slice */
	int mismatched;    /* pairs beyond tolerance or structurally wrong */
	double max_err;    /* largest relative error over the pairs compared */
	SimMismatch first; /* the first mismatch in the single-device graph's order, lowest rank */
	int noutputs;      /* outputs (at most SIM_MAX_OUTPUTS are described) */
	SimOutput outputs[SIM_MAX_OUTPUTS];
	int outputs_bad;          /* (output, rank) pairs that disagree */
	SimMismatch first_output; /* the first of them */
	/* recompute (training-step.md §5.2): (duplicate, run) pairs whose
	 * value was checked against the origin's of the same recompute_id, in
	 * the single-device run and on every rank */
	int recomputed, recomputed_bad;
	SimMismatch first_recomputed;
} SimReport;

/* The training step (training-step.md §1.4, §3): each weight's gradient is
 * the gradient operand of its optimizer update, and the step writes the
 * weights and their optimizer state in place.  Checked per (weight, rank):
 * the rank's gradient against the block of the single-device gradient its
 * weight holds, then every parameter the step wrote (weights, states,
 * global_step, ...) as it is after the step. */
typedef struct SimStepCheck {
	int compared, bad;                     /* (parameter, rank) pairs */
	int missing;                           /* of the bad: a weight a rank holds but never updates */
	int64_t elems, bad_elems;              /* their elements, those beyond tolerance (a bad layout: all) */
	double max_err;                        /* largest relative error */
	SimMismatch first;                     /* the first bad pair in the single-device graph's order, lowest rank */
	SimMismatch worst;                     /* the worst element over all pairs */
	const Node *first_param, *worst_param; /* the single-device parameters they belong to */
} SimStepCheck;

typedef struct SimStepReport {
	int weights;        /* optimizer updates in the single-device graph (0: not a training step) */
	int written;        /* parameters the single-device step writes */
	SimStepCheck grads; /* gradients */
	SimStepCheck after; /* written parameters after the step */
} SimStepReport;

/* 0 all agree, 1 a mismatch, -1 a hook error */
int sim_compare_step(const SimRun *global, const SimRun *ranks, SimSliceFn slice, void *ctx, double rtol,
                     SimStepReport *rep);
void sim_print_step_report(FILE *f, const SimStepReport *rep);

/* the tolerance the plan check compares with (relative to max(1, |expected|)) */
#define SIM_RTOL 1e-4

/* Compare every rank's operators with the single-device run: |got - expected|
 * <= rtol * max(1, |expected|) element-wise (rtol <= 0: SIM_RTOL).  Then compare
 * each rank's result (the value of its Return) with the single device's,
 * output by output, through the hook applied to the nodes both return.
 * Returns 0 when everything compared agrees, 1 on a mismatch (rep->first,
 * rep->first_output), -1 on an error of the hook.  Of a training step only
 * the forward operators are compared one by one: backward values are
 * partial sums no layout describes, and what they produce, the gradients,
 * is checked by sim_compare_step. */
int sim_compare(const SimRun *global, const SimRun *ranks, SimSliceFn slice, void *ctx, double rtol, SimReport *rep);
void sim_print_report(FILE *f, const SimReport *rep);

/* ------------------------------------------------------------- driver.c */
/* sappc --simulate: m is the input after the pipeline as rank o->rank; buf
 * the input it was read from, re-read for the single-device reference and
 * for every other rank of o->device_num.  Runs them all, compares, prints
 * the report to out and the first divergence through diag.  0 when every
 * rank agrees with the single device, 1 otherwise. */
int sim_check_plan(Module *m, const char *buf, size_t len, const Options *o, const PassManagerOptions *pm,
                   const SimOptions *so, FILE *out);

#endif
