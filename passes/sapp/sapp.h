/* sapp.h - private interface of the SAPP strategy search (passes/sapp/).
 *
 * The pass works on two views of the module:
 *   - the operator list (SappOp): every primitive CNode that gets a strategy,
 *     in module order, plus the implicit VirtualDataset (spec sapp-search.md
 *     §4: "framework operators"); strategies are per tensor input;
 *   - the rec graph (RecNode, one per operator, same index): tensors squeezed
 *     to 4-D (§1.3), eliminated operators contracted out (§1.5-1.7), kept
 *     operators partitioned level by level (§2, §3) in a dense view of their
 *     own (PartNode, RecVis, RecLink, in kept order).
 * Shard counts are exact integers (the product of the primes of the levels
 * that cut the dimension), never fractions: two cuts are compared as
 * integers (§8.6).  One level cuts a dimension by one prime p; for a power
 * of two device count every level is p = 2, which is MindSpore's halving.
 */
#ifndef SAPP_H
#define SAPP_H

#include <float.h>

#include "sappc.h"

/* ---------------------------------------------------------- constants (§2.11, §8.7) */
typedef struct SappConf {
	double mem_coef;         /* rp_matmul_mem_coef: scales the MatMul I-cut cost */
	double redis_coef;       /* REDIS_COEF: redistribution penalty multiplier */
	double expert_coef;      /* EXPERT_COEF: multiplier in "replicate" costs */
	double replicate_below;  /* REPLICATE_BELOW: divisor in "replicate" costs */
	double ascend_cores;     /* NUMBER_ASCEND_CORES: BatchMatMul batch heuristic */
	double bmm_coef;         /* BMM_COEF: divisor of BatchMatMul totals */
	int max_inputs;          /* MAX_INPUT_NUM: inputs modelled per operator */
	int weight_order_devices; /* weight (memory-first) order above this many devices ... */
	int weight_order_mbs;     /* ... when the micro-batch size is below this (§3.3) */
	int extra_shard_devices;  /* ExtraShardMatmulOnBatchDim above this many devices (§4.1) */
	int vd_forward_refused;   /* forward propagation from the VirtualDataset is refused (§4.3) */
	int only_same_shape;      /* ONLY_REDIST_WITH_SAME_SHAPE (§1.7) */
	int replicate_option;     /* MatMul/BatchMatMul may choose "no cut" (off: --fully-use-devices) */
} SappConf;

extern const SappConf sapp_default_conf;

#define SAPP_MAX_IN 20
#define SAPP_INVALID DBL_MAX /* DOUBLE_MAX: an invalid option */

/* ---------------------------------------------------------- operator types (§1.1) */
#define SAPP_RECTYPES(X)                                                                         \
	X(UnknownType) X(MatMul) X(Convolution) X(Pooling) X(ElmWiseOp) X(ReLU) X(BatchNorm)        \
	X(LayerNorm) X(Reshape) X(BiasAdd) X(Softmax) X(SparseSoftmaxCrossEntropyWithLogits)       \
	X(SoftmaxCrossEntropyWithLogits) X(OneHot) X(Log) X(Exp) X(Add) X(Sub) X(Mul) X(Div)        \
	X(Squeeze) X(Cast) X(Reduce) X(PReLU) X(GatherV2) X(ExpandDims) X(StridedSlice)            \
	X(ArgWithValue) X(UnsortedSegmentOp) X(BatchMatMul) X(Flatten) X(Cum) X(StandAlone)        \
	X(BatchParallel) X(PadV3) X(Virtual) X(FlashAttentionScore) X(RmsNorm)

enum {
#define X(t) REC_##t,
	SAPP_RECTYPES(X)
#undef X
	REC_COUNT_
};
extern const char *const sapp_rectype_name[REC_COUNT_];

/* where an operator's strategy came from: StratSource (ir/sappc.h) */

/* the passes walk the IR's nodes in order, each a few cache misses away:
 * reading a few nodes ahead hides the latency */
#if defined(__GNUC__) || defined(__clang__)
#define sapp_prefetch(p) __builtin_prefetch(p)
#else
#define sapp_prefetch(p) ((void)(p))
#endif

static inline void sapp_prefetch_bytes(const void *p, size_t n)
{
	for (size_t o = 0; o < n; o += 64)
		sapp_prefetch((const char *)p + o);
}

/* ---------------------------------------------------------- primitive attributes */
/* the attributes the search reads, interned once per run (Sapp.attr): the
 * lookups compare symbols, not strings */
#define SAPP_ATTRS(X)                                                                              \
	X(perm) X(axis) X(batch_dims) X(begin) X(end) X(strides) X(begin_mask) X(end_mask)          \
	X(new_axis_mask) X(begin_norm_axis) X(keep_dims) X(start_dim) X(end_dim) X(transpose_a)    \
	X(transpose_b) X(transpose_x1) X(transpose_x2) X(in_strategy) X(out_strategy) X(dim) X(multiples)

enum {
#define X(a) SA_##a,
	SAPP_ATTRS(X)
#undef X
	SA_COUNT_
};

/* ---------------------------------------------------------- 4-D tensors (§1.3) */
typedef struct Dim4 {
	int64_t d[4]; /* n, c, h, w */
} Dim4;

/* Edge mapping (§1.7): g[i] = bit set of the producer's 4-D dims that make up
 * the consumer's dim i (a permutation has one bit per dim; a merging reshape
 * several; an empty set is a size-1 dim).  bad: the mapping is unknown, the
 * tensors are never "adjacent". */
typedef struct RecMap {
	uint8_t g[4];
	uint8_t bad;
} RecMap;

typedef struct RecEdge {
	uint32_t to;
	RecMap map;
} RecEdge;

typedef struct RecAux {
	uint32_t node;
	uint32_t idx; /* consumer input slot the aux producer relates to */
	RecMap map;   /* mapping from the aux producer's output to that input */
} RecAux;

/* A neighbour that can charge a kept node a redistribution (§2.2), found
 * once after elimination: whether the two tensors are "adjacent" (same
 * shape through the mapping) does not change between levels, only whether
 * the neighbour has decided yet.  Links keep the order of the node's input
 * slots, out edges and aux producers, the order the penalties add up in. */
typedef struct RecLink {
	uint32_t nb;   /* the neighbour's position in kept order (Sapp.vis) */
	uint8_t row;   /* producer: the row of the slot it feeds (0, 1; 3 past input 1); consumer: 2 */
	uint8_t ident; /* identity mapping: patterns pass unchanged */
	RecMap map;    /* producer: its output -> the slot; consumer: this node's output -> its input */
} RecLink;

/* what a kept node shows its neighbours: the level it decided in and that
 * level's cut factors on input 0 and on its output (one[0], one[2]) */
typedef struct RecVis {
	int32_t lvl;
	Dim4 in0, out;
} RecVis;

/* (producer, consumer) -> position in the producer's out list, for the
 * producers with long out lists (graph.c); open addressing with linear
 * probing and backward-shift deletion: no tombstones, so the table stays
 * sized by the live edges */
typedef struct EdgeSlot {
	uint64_t key; /* 0: empty */
	uint32_t val;
} EdgeSlot;

typedef struct EdgeSet {
	EdgeSlot *slot;
	uint32_t cap, live;
} EdgeSet;

typedef Vec(uint32_t) U32Vec;

/* growable arrays inside the pass arena (a grown array leaves its old block
 * to the arena): the rec graph has a few small lists per node, which start
 * at their exact size in one block per kind and grow only during
 * elimination */
void sapp_avec_grow(Arena *a, void **p, uint32_t *cap, size_t elt, uint32_t n);
#define avec_push(A, v, x)                                                                 \
	do {                                                                               \
		if ((v)->n == (v)->cap)                                                    \
			sapp_avec_grow((A), (void **)&(v)->a, &(v)->cap, sizeof *(v)->a, (v)->n); \
		(v)->a[(v)->n++] = (x);                                                    \
	} while (0)

/* an input slot: its producer and the mapping from the producer's output
 * to the slot (bad: the two are never adjacent) */
typedef struct RecIn {
	uint32_t node;
	RecMap map;
} RecIn;

typedef struct RecNode {
	uint8_t type;
	uint8_t kept;    /* not eliminated */
	uint8_t hashed;  /* out edges indexed in Sapp.edges (a long out list) */
	uint8_t pinned;  /* interfered SAPP: never re-partitioned */
	uint8_t nargs;
	RecMap own;      /* Transpose/Reshape: the node's own mapping */
	uint32_t kidx;   /* kept nodes: position in kept order (Sapp.part, Sapp.vis) */
	Dim4 out;        /* output shape */
	Dim4 *arg;       /* kept nodes: input shapes (MatMul operands stored logically) */
	Vec(RecIn) in;   /* input slots (positions compress, §1.6) */
	Vec(RecAux) aux;
	Vec(RecEdge) outs;
	U32Vec users;    /* eliminated nodes: the nodes that list this one in `in` or `aux` (may repeat) */
	Dim4 *pin;       /* pinned: the user's cuts (in0, in1, out), then what
			  * DecomposeStrategy has not handed out yet (6) */
} RecNode;

/* Partition state of a kept rec node, dense in kept order: all that one
 * decision reads of the node itself (§2, §3), and its cuts, which the
 * strategy generation reads (§4.2). */
typedef struct PartNode {
	uint32_t rec;          /* its rec node */
	uint8_t type, nargs, pinned;
	const RecLink *link;   /* neighbours that may charge a redistribution */
	uint32_t nlink;
	const Dim4 *arg;       /* input shapes, the rec node's (MatMul operands stored logically) */
	Dim4 acut[2], ocut;    /* cuts so far */
	Dim4 g[3];             /* granularity: shape / cut of input 0, input 1 and the
				* output, kept with the cuts so that no level divides */
} PartNode;

/* ---------------------------------------------------------- operators (§4) */
typedef struct SappOp {
	Node *n;          /* NULL: the implicit VirtualDataset */
	uint8_t type;     /* REC_* */
	uint8_t elim;     /* contracted before partitioning */
	uint8_t pinned;   /* user strategy frozen (interfered SAPP) */
	uint8_t source;   /* SRC_* */
	uint8_t has_s;    /* strategy decided (possibly all ones) */
	uint8_t has_os;   /* out strategy set */
	uint8_t ta, tb;
	uint8_t orank;
	uint8_t loaded;   /* strategy read from --strategy-in */
	uint8_t fam;      /* n's FAM_* (FAM_VIRTUAL for the implicit VirtualDataset) */
	uint8_t user;     /* n has a user strategy attribute (in_strategy / out_strategy) */
	uint16_t op;      /* n's OP_* (UINT16_MAX for the implicit VirtualDataset) */
	uint32_t nin;     /* tensor inputs */
	const Node *src;  /* the node whose operands are the inputs: n, or a Concat's or AddN's MakeTuple */
	uint32_t *arg;    /* operand index of each tensor input (in src) */
	uint8_t *rank;
	const int64_t **dims;
	int32_t *prod;    /* producer operator of each tensor input, -1 none */
	uint32_t *param;  /* parameter with a value each tensor input reads: node id + 1, 0 none */
	uint32_t *off;    /* offset of input i's entries in s[] */
	int64_t *s;       /* strategy: for each tensor input, one shard count per dim */
	int64_t *os;      /* out strategy (orank entries) */
	const int64_t *odims;
	uint32_t ncons;   /* consumers (operator, tensor input slot), in operator order */
	int32_t nspos;    /* position in the no-strategy list, -1 */
	uint32_t *cons_op, *cons_slot;
} SappOp;

/* a growing text (Sapp.levels) */
typedef struct SappText {
	char *s;
	size_t n, cap;
} SappText;

typedef struct Sapp {
	Module *m;
	const Options *o;
	SappConf conf;
	Arena *arena;       /* pass-local memory */
	SappOp *ops;
	uint32_t nops;
	int32_t vd;          /* the VirtualDataset operator, -1 if the graph has no inputs */
	const Node *getnext; /* dataset sink mode: the implicit VirtualDataset reads GetNext's outputs */
	int32_t *op_of_node; /* node id -> operator index, -1 */
	RecNode *rec;        /* one per operator */
	uint32_t *kept;      /* kept rec nodes in index order */
	PartNode *part;      /* per kept node: partition state (partition.c) */
	RecVis *vis;         /* per kept node: what its neighbours see */
	uint32_t nkept;
	uint32_t *elim_order; /* eliminated operators in elimination order */
	uint32_t nelim;
	uint32_t *stamp;     /* scratch, one per operator */
	EdgeSet edges;       /* (producer, consumer) -> out-list position, long lists */
	Vec(RecAux) prods;   /* scratch of eliminate() */
	void *cons;          /* scratch of the cost model: constraints of one node */
	uint32_t ncons_cap;
	int64_t devices, stage_devices;
	int64_t stages;
	int64_t mbs;         /* micro-batch size (1 without pipeline) */
	int nlevels, rollback;
	int primes[64];      /* the prime of each level */
	int weight_order;
	int64_t explain;     /* operator index for --explain, -1 */
	SappText *levels;    /* Options.record_levels: per operator, its --explain
			      * level lines (partition.c), else NULL */
	int predict;         /* inference: GenerateStrategyV1 (§4.1), else V3 */
	Sym attr[SA_COUNT_]; /* interned attribute names */
	struct SappCkpt *ckpt; /* --strategy-in of a MindSpore checkpoint (plan.c) */
	Dim4 *snap;          /* with pipeline stages: the cuts of every kept node
			      * (in0, in1, out) after each level the roll-back may
			      * return to, rollback blocks of 3 * nkept (partition.c) */
} Sapp;

/* graph.c */
int sapp_build(Sapp *S);      /* operator list, producers, consumers; 0 ok */
void sapp_rec_build(Sapp *S); /* rec graph, then elimination */
void sapp_free(Sapp *S);
int sapp_rectype_of(const Node *n);
int sapp_dataset_param(const Node *p);
int sapp_getnext_node(const Node *n);
int sapp_map_reshape(const int64_t *in, int rin, const int64_t *out, int rout, RecMap *m);
RecMap sapp_map_identity(void);
RecMap sapp_map_transpose(const int64_t *perm, int r);
RecMap sapp_map_compose(RecMap first, RecMap then);
int sapp_map_is_identity(const RecMap *m);
int sapp_map_shape(const RecMap *m, const Dim4 *src, Dim4 *dst);
Dim4 sapp_dim4(const int64_t *d, int r);
void sapp_attr_init(Sapp *S);
const Value *sapp_attr(const Sapp *S, const AttrList *l, int attr);
int sapp_attr_int(const Sapp *S, const Node *n, int operand, int attr, int64_t *out);
int sapp_attr_ints(const Sapp *S, const Node *n, int operand, int attr, int64_t *out, int max);
int sapp_attr_bool(const Sapp *S, const Node *n, int operand, int attr, int dflt);

/* cost.c */
typedef struct SappChoice {
	int nopt;
	const char *name[8];
	double opcost[8], redis[8], total[8];
	Dim4 mode[8][3];  /* per option: cut factors on input 0, input 1, output */
	Dim4 eff[8][3];   /* what the option does to input 0, input 1, output */
	int best;         /* -1: no cut at this level */
} SappChoice;
void sapp_part_init(Sapp *S);
void sapp_part_gran(PartNode *N, const Dim4 *out);
void sapp_choose(Sapp *S, const PartNode *N, int p, int level, SappChoice *c);
void sapp_apply_choice(PartNode *N, const SappChoice *c);
double sapp_weight(const Sapp *S, const PartNode *N, int p);
double sapp_redis(Sapp *S, const PartNode *N, const Dim4 mode[3], int level);

/* partition.c */
int sapp_partition(Sapp *S);
void sapp_rollback(Sapp *S, int levels);
void sapp_decompose_step(Dim4 *rem, const Dim4 *user, int p, Dim4 *step);

/* propagate.c */
void sapp_generate(Sapp *S);
int sapp_prepare_reshape(const int64_t *from, int rf, const int64_t *to, int rt, const int64_t *fs, int64_t *ts);
void sapp_gen_gather_stra(const int64_t *shape, int r, int64_t devices, int64_t *out);
int sapp_default_batch(const Sapp *S, SappOp *X);
void sapp_dataset_given(const Sapp *S, SappOp *X);
void sapp_set_input(SappOp *X, uint32_t i, const int64_t *v, int len, int fill);
int64_t sapp_product(const int64_t *v, int n);

/* sapp.c */
int sapp_explaining(const Sapp *S, uint32_t op);
const char *sapp_op_label(const SappOp *X, char *buf, size_t n);
int sapp_check_stra(const Sapp *S, const SappOp *X, uint32_t i, const int64_t *vals, int k, int out, char *why,
		    size_t n);

/* memory.c: DevicesMemoryControl (§3.7) and auto_pipeline (§5) */
double sapp_memory_check(Sapp *S); /* the estimate compared with --device-memory; warns */
typedef struct SappModel {
	int64_t layers, hidden, seq, batch, heads; /* heads 0: no 4-D Softmax (no score term) */
	double layer_bytes, other_bytes;            /* parameters inside and outside the layers */
	double act_elt;                             /* bytes of an activation element */
	int64_t dp, mp;                             /* read off the MatMuls at the rolled-back level */
} SappModel;
typedef struct SappSuggest {
	int fits;                   /* the configured stage number fits (else the fallback advice) */
	int64_t stages, dp, mp;     /* the configuration suggested */
	int64_t batch, micro;
	double mem_coef;
	double stat, dyn;           /* its estimate: parameters + gradients + optimizer states, activations */
	double stat0, dyn0;         /* the estimate of the configured stage number */
} SappSuggest;
int sapp_read_model(const Sapp *S, SappModel *M, char *why, size_t n);
void sapp_model_memory(const SappModel *M, int64_t stages, int64_t dp, int64_t mp, int64_t micro, int opt_shard,
		       double *stat, double *dyn);
void sapp_suggest(const SappModel *M, int64_t stages, int64_t micro, int opt_shard, double capacity, double mem_coef,
		  SappSuggest *r);
/* the stage number --auto-pipeline applies (S->stages if unchanged); the
 * suggestion line for the summary in *line */
int64_t sapp_auto_pipeline(Sapp *S, const char **line);

/* plan.c: strategy files (--strategy-out, --strategy-in); 0 ok, 1 bad input, 3 I/O.
 * A MindSpore checkpoint (*mindspore = 1) only names some operators: the
 * caller derives the plan as without a file, then sapp_apply_ckpt puts the
 * file's strategies on the operators it names. */
int sapp_write_plan(const Sapp *S, const char *path);
int sapp_load_plan(Sapp *S, const char *path, int *mindspore);
void sapp_apply_ckpt(Sapp *S);
void sapp_ckpt_free(Sapp *S);

#endif
