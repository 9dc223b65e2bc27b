/* simint.h - what the files of passes/simulate/ share and nobody else sees. */
#ifndef SAPPC_SIMINT_H
#define SAPPC_SIMINT_H

#include <math.h>
#include <pthread.h>

#include "sim.h"

/* A rank's execution state: a program counter over its entry graph and the
 * value of every node computed so far (indexed by Node.id). */
typedef struct RankState {
	Module *m;
	Graph *g;
	int rank;
	uint32_t pc;
	uint8_t done;
	SimValue **vals;
	uint32_t nvals;
	SimValue *result;
	Node *wait;      /* the communication op this rank is blocked at, or NULL */
	Sym wgroup;      /* its group ("0-1") */
	uint32_t wseq;   /* and its number among the collectives of that group on this rank */
	int64_t *wranks; /* the group's ranks, in group order (wn of them, wcap allocated) */
	int wn, wcap;
	Vec(struct GroupSeq {
		Sym group;
		uint32_t n;
	}) seqs;
	/* In-place writes (sim_write_ref): every value a written parameter
	 * has had, so that Load(p, state) reads p as of that state.  clock
	 * counts the writes; an UpdateState's value (SV_NONE) keeps in `n` the
	 * clock when it ran; U is state 0, the initial values. */
	uint32_t clock;
	Vec(struct RefLog {
		uint32_t prev; /* 1 + index of the parameter's previous entry, 0: none */
		uint32_t time; /* clock of the write (0: the initial value) */
		SimValue *v;
	}) log;
	uint32_t *last; /* per node id: 1 + index of the parameter's latest entry; NULL until a write */
	SimValue **aux; /* per node id: all outputs of an operator declared with its first only (kernels.c) */
} RankState;

typedef struct SimMsg {
	int src, dest;
	int64_t tag;
	SimValue *v;
	Node *send;
} SimMsg;

typedef struct SimOverride {
	int rank;
	Sym name;
	float *data;
	int64_t n;
} SimOverride;

/* a and b are equal within the comparison's tolerance (a != b, or both
 * nonzero: two exact zeros, as ReLU makes them, are alike on every rank) */
static inline int sim_near(double a, double b)
{
	double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
	return (a != 0 || b != 0) && fabs(a - b) <= SIM_RTOL * (m > 1 ? m : 1);
}

struct SimRun {
	SimOptions o;
	int nranks;
	RankState *rs;
	Vec(SimTensor *) tensors; /* every tensor, with its data if owned (see tensor.c) */
	Vec(float *) buffers;
	Vec(SimValue *) values;
	Vec(SimMsg) mail;
	Vec(SimOverride) overrides;
	int64_t *group_buf; /* sim_group_of's answer before it is copied to the rank: group_cap entries */
	int group_cap;
	int64_t bytes, limit;
	uint32_t executed;
	/* values within the comparison's tolerance of a switch point of a
	 * piecewise operator, where rounding can move the gradient (driver.c):
	 * a MaxPool window's two largest (k_pool), two extremes of ReduceMax,
	 * ReduceMin, ArgMax/MinWithValue, neighbours of Sort and TopK
	 * (kernels.c), a ReLU, ReLU6 or Abs input at its kink, Maximum's or
	 * Minimum's two operands (interp.c) */
	uint32_t near_switch;
	int failed;
	char err[640]; /* "file:line:col: " + err + msgoff */
	size_t msgoff;
	Loc errloc;
	/* Ranks running in parallel (exec.c): between two communication
	 * rounds rank k runs against sub[k], a copy of the run with its own
	 * allocation lists, error and counters, whose parent is the run.  Its
	 * bytes count what it allocated in the round; sim_budget_take()
	 * charges them to the parent's limit under mu. */
	SimRun *parent, *sub;
	Vec(int64_t) asks;   /* a sub-run: the sizes it asked for in the round, in order */
	int threads;         /* worker threads of the rank rounds (1: in the caller) */
	uint8_t running;     /* a sub-run: its rank has not finished the round */
	int64_t round_bytes; /* the run: what its sub-runs allocated in this round */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a sub-run finished its round */
};

/* What a kernel sees: the run, the rank and the node being evaluated. */
typedef struct Ctx {
	SimRun *r;
	RankState *s;
	Node *n;
} Ctx;

/* ------------------------------------------------------------- tensor.c */
SimTensor *sim_tensor_new(SimRun *r, int dtype, int ndim, const int64_t *shape); /* zeroed; NULL: limit hit */
int sim_budget_error(SimRun *r); /* records "over --simulate-max-mb"; -1 */
SimTensor *sim_tensor_view(SimRun *r, const SimTensor *base, int ndim, const int64_t *shape, int64_t off);
SimValue *sim_val_tensor(SimRun *r, SimTensor *t);
SimValue *sim_val_tuple(SimRun *r, uint32_t n);
SimValue *sim_val_none(SimRun *r);
int sim_numel(int ndim, const int64_t *shape, int64_t *out); /* 0 ok, -1 overflow / negative */
void sim_strides(int ndim, const int64_t *shape, int64_t *st);
int sim_same_shape(const SimTensor *a, int ndim, const int64_t *shape);
void sim_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape);
void sim_fmt_index(char *buf, size_t n, int ndim, const int64_t *idx);
void sim_unflatten(int64_t flat, int ndim, const int64_t *shape, int64_t *idx);
int sim_dtype_of(Sym dtype); /* SimDType of a type-line element type */
const char *sim_dtype_name(int d);
uint64_t sim_mix64(uint64_t x); /* splitmix64 finaliser */
/* dst[i] = src[base + sum_d idx_d(i) * stride[d]] over the row-major indices of shape */
void sim_copy_strided(const float *src, int64_t base, int nd, const int64_t *shape, const int64_t *stride, float *dst);
/* copy the block [off, off+shape) of src into a new tensor */
SimTensor *sim_extract(SimRun *r, const SimTensor *src, const int64_t *off, const int64_t *shape);
/* record the first error: "<where>: message" */
int sim_errorf(SimRun *r, const RankState *s, const Node *n, const char *fmt, ...) PRINTF(4, 5);

/* ------------------------------------------------------------- interp.c */
int sim_eval_node(Ctx *c);      /* computes c->s->vals[c->n->id]; 0 ok, -1 error */
int sim_is_comm(const Node *n); /* evaluated by the executor, not by sim_eval_node */
int sim_micro_of(const Node *n); /* its micro-batch (primal attribute micro), -1 none */
SimValue *sim_arg(Ctx *c, uint32_t i);
SimTensor *sim_arg_tensor(Ctx *c, uint32_t i);
/* attribute-like operand i (literal or computed), else the attribute key:
 * count of ints (0 = empty tuple), -1 when neither is present */
int sim_ints(Ctx *c, uint32_t i, const char *key, int64_t *out, int max);
int sim_flag(Ctx *c, uint32_t i, const char *k1, const char *k2, int dflt);
double sim_float(Ctx *c, uint32_t i, const char *key, double dflt);
int sim_axis(Ctx *c, int64_t ax, int ndim, int *out); /* normalise a possibly negative axis */
/* the window of a StridedSlice (interp.c): per dimension first element, step and count */
int sim_slice_window(Ctx *c, int nd, const int64_t *shape, uint32_t at, uint32_t mask_at, int64_t *start,
                     int64_t *step, int64_t *cnt, int *ond, int64_t *oshape);
/* numpy broadcasting of nin tensors: output shape, per-input element strides (0 on broadcast dims) */
int sim_broadcast(Ctx *c, int nin, SimTensor **in, int *ond, int64_t *oshape, int64_t st[][MAX_RANK]);
int sim_fail(Ctx *c, const char *fmt, ...) PRINTF(2, 3);
int sim_check_declared(Ctx *c, const SimValue *v); /* computed vs type-line shape */
/* the parameter at operand i of c->n now holds t (an in-place write) */
int sim_write_ref(Ctx *c, uint32_t i, SimTensor *t);
const char *sim_attr_str(const Node *n, const char *key);
const Value *sim_attr(const Node *n, const char *key); /* primitive_attrs, then cnode_attrs */
int sim_out_dtype(const Node *n, int dflt);
int sim_allocates(const Node *n); /* whether the op makes new storage (memory estimate) */

/* --------------------------------------------------------------- gemm.c */
/* C = op(A) op(B) (+ bias, one value per column): op(A) is (m, k), op(B)
 * (k, n), all row-major with row strides lda, ldb, ldc; ta: A is stored
 * (k, m), tb: B is stored (n, k).  Sums in double, rounded once to float32;
 * through cblas_dgemm when configure found a CBLAS and it loads, else
 * through sim_gemm_portable (same contract; its own entry so that the unit
 * tests check it in every build). */
void sim_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
              int64_t ldb, const float *bias, float *C, int64_t ldc);
void sim_gemm_portable(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                       int64_t ldb, const float *bias, float *C, int64_t ldc);
/* matrix products run on one thread (1) or on the BLAS's own count (0):
 * one while ranks run in parallel, so that they do not share the cores */
void sim_gemm_serial(int on);

/* ------------------------------------------------------------ kernels.c */
/* a tensor seen as outer x shape[ax] x inner around axis ax */
void sim_around(const SimTensor *x, int ax, int64_t *outer, int64_t *inner);
SimValue *sim_tuple2(Ctx *c, SimTensor *a, SimTensor *b);
void sim_hw_attr(const Node *n, const char *key, int64_t dflt, int64_t *h, int64_t *w);
void sim_softmax_rows(const float *x, float *y, int64_t outer, int64_t n, int64_t inner, int logv);
/* window geometry of a convolution (pool = 0) or pool (1), NCHW */
typedef struct SimConvGeom {
	int64_t group, sh, sw, dh, dw; /* group, strides, dilations */
	int64_t pt, pl;                /* leading pads */
	int64_t OH, OW;                /* output size */
} SimConvGeom;
int sim_conv_geom(Ctx *c, int64_t H, int64_t W, int64_t KH, int64_t KW, int pool, SimConvGeom *g);
SimValue *k_matmul(Ctx *c);
SimValue *k_conv2d(Ctx *c);
SimValue *k_pool(Ctx *c);
SimValue *k_reduce(Ctx *c);
SimValue *k_argwithvalue(Ctx *c);
SimValue *k_softmax(Ctx *c);
SimValue *k_layernorm(Ctx *c);
SimValue *k_rmsnorm(Ctx *c);
SimValue *k_batchnorm(Ctx *c);
SimValue *k_loss(Ctx *c);
SimValue *k_sparseloss(Ctx *c);
SimValue *k_attention(Ctx *c);
SimValue *k_attention_grad(Ctx *c); /* FlashAttentionScoreGrad, named in backward.c */
SimValue *k_rope(Ctx *c);
SimValue *k_swiglu(Ctx *c);
/* the next element of a broadcast walk over shape (row-major idx): the
 * offsets off[k0..k1) move by their strides st[k] */
void sim_bcast_next(int nd, const int64_t *shape, int64_t *idx, int64_t st[][MAX_RANK], int64_t *off, int k0, int k1);
/* RoPE's partner of element e (position i of D in the last dimension):
 * the other half (mode 0) or the neighbour (mode 1); returns its sign */
double sim_rope_partner(int64_t mode, int64_t i, int64_t D, int64_t e, int64_t *p);
int sim_rope_operands(Ctx *c, SimTensor **in, uint32_t mode_at, int64_t *mode, int *nd, int64_t *shape,
		      int64_t (*st)[MAX_RANK]);
int sim_swiglu_halves(Ctx *c, const SimTensor *x, int at, int *a, int64_t *sh);
SimValue *k_prelu(Ctx *c);
SimValue *k_l2normalize(Ctx *c);
SimValue *k_cum(Ctx *c);
SimValue *k_dense(Ctx *c);
SimValue *k_sort(Ctx *c);
SimValue *k_lpnorm(Ctx *c);
SimValue *k_scatter_div(Ctx *c); /* in backward.c's table: writes its variable */
SimValue *k_random_choice(Ctx *c);
SimValue *k_moe_init_routing(Ctx *c);
SimValue *k_moe_finalize_routing(Ctx *c);
SimValue *k_moe_init_routing_v2(Ctx *c);
SimValue *k_moe_compute_expert_tokens(Ctx *c);
SimValue *k_grouped_matmul(Ctx *c);

/* ----------------------------------------------------------- backward.c */
/* The kernel of an operator known by name: the backward operators of the
 * training step (ReluGrad, LayerNormGrad, ...), the optimizer updates and
 * the other operators the autodiff emits; NULL for any other. */
typedef SimValue *(*SimKernel)(Ctx *c);
SimKernel sim_named_kernel(const Node *n);
/* Parameters the operator writes in place (Ref operands): their operand
 * positions, at most 8; 0 when it writes none. */
int sim_ref_operands(const Node *n, uint32_t *pos);

/* ------------------------------------------------------------- inputs.c */
int sim_make_inputs(SimRun *r, RankState *s);
SimValue *sim_getnext(Ctx *c); /* GetNext's outputs, drawn like dataset inputs */

/* --------------------------------------------------------------- exec.c */
int sim_group_of(SimRun *r, RankState *s, Node *n, int64_t *ranks, int max); /* count, -1 error */
/* take b bytes of the storage limit for r (a run, or a rank's sub-run) and
 * count them: 1 ok, 0 over the limit.  A sub-run's decision is the one the
 * ranks running one after the other in ascending order would make. */
int sim_budget_take(SimRun *r, int64_t b);
/* job(arg, k) for every k in [0, n) on up to `threads` threads (exec.c) */
void sim_for(int threads, int n, void (*job)(void *arg, int k), void *arg);

#endif
