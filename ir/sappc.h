/* sappc.h - the one data model every stage of sappc shares.
 *
 * Core types first, then the cross-file prototypes grouped by the file that
 * defines them (QBE all.h style).  A Module owns one Arena; everything hanging
 * off the module (graphs, nodes, values, attribute lists, shapes) lives in it
 * and is freed by ir_module_free().  Identifiers are interned (Sym) once at
 * parse time and compared as integers afterwards.
 */
#ifndef SAPPC_H
#define SAPPC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define NORETURN __attribute__((noreturn))
#define PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define NORETURN
#define PRINTF(a, b)
#endif

/* A sweep over every node of a big graph waits on memory, not on its work
 * (a 4096-layer training step has millions of nodes, each a separate
 * allocation): sweep_prefetch(a, i, n) asks for the first two cache lines
 * of a[i + SWEEP_AHEAD] while node a[i] is looked at. */
#define SWEEP_AHEAD 16
#if defined(__GNUC__)
#define sweep_prefetch(a, i, n)                                                        \
	do {                                                                           \
		if ((i) + SWEEP_AHEAD < (n)) {                                         \
			__builtin_prefetch((a)[(i) + SWEEP_AHEAD]);                    \
			__builtin_prefetch((const char *)(a)[(i) + SWEEP_AHEAD] + 64); \
		}                                                                      \
	} while (0)
/* the same for a sweep from the end: a[i - SWEEP_AHEAD] */
#define sweep_prefetch_back(a, i)                                                      \
	do {                                                                           \
		if ((i) >= SWEEP_AHEAD) {                                              \
			__builtin_prefetch((a)[(i) - SWEEP_AHEAD]);                    \
			__builtin_prefetch((const char *)(a)[(i) - SWEEP_AHEAD] + 64); \
		}                                                                      \
	} while (0)
#else
#define sweep_prefetch(a, i, n) ((void)0)
#define sweep_prefetch_back(a, i) ((void)0)
#endif

#define MAX_RANK 16 /* tensor rank limit (dims beyond this are an input error) */

/* ------------------------------------------------------------------ arena.c */
typedef struct Arena Arena;

Arena *arena_new(void);
void *arena_alloc(Arena *a, size_t n);  /* zeroed, 8-byte aligned */
void xmem_release(void *p, size_t n);   /* [p, p + n) of a malloc'd block is dead: its whole pages go back */
void *arena_dup(Arena *a, const void *p, size_t n);
char *arena_strndup(Arena *a, const char *s, size_t n);
size_t arena_used(const Arena *a);
void arena_free(Arena *a);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
void xmalloc_trim(void); /* give freed heap pages back to the system (after a pass's tables) */
void xmalloc_keep(void); /* keep freed heap pages for the next round of the same work */

/* Growable array with a small header: Vec(T) v = {0}; vec_push(&v, x). */
#define Vec(T) struct { T *a; uint32_t n, cap; }
#define vec_grow(v, extra)                                                       \
	do {                                                                     \
		if ((v)->n + (extra) > (v)->cap) {                               \
			uint32_t nc_ = (v)->cap ? (v)->cap * 2 : 8;              \
			while (nc_ < (v)->n + (extra)) nc_ *= 2;                 \
			(v)->a = xrealloc((v)->a, (size_t)nc_ * sizeof *(v)->a); \
			(v)->cap = nc_;                                          \
		}                                                                \
	} while (0)
#define vec_push(v, x)                     \
	do {                               \
		vec_grow(v, 1);            \
		(v)->a[(v)->n++] = (x);    \
	} while (0)
#define vec_free(v) (free((v)->a), (v)->a = NULL, (v)->n = (v)->cap = 0)

/* ----------------------------------------------------------------- intern.c */
typedef uint32_t Sym; /* 0 is "no symbol" */

Sym intern(const char *s, size_t n);
Sym intern_cstr(const char *s);
/* intern(s, n) in two steps: the hash (and a prefetch of its slot), then
 * the Sym; nothing may be interned between them */
uint32_t intern_prepare(const char *s, size_t n);
Sym intern_hashed(const char *s, size_t n, uint32_t h);
const char *sym_str(Sym s);
size_t sym_len(Sym s);
/* a name kept as parts until somebody reads it: prefix, decimal v, suffix
 * (see intern.c).  Two deferred Syms of one text may differ: sym_same() is
 * text equality for any two Syms.  sym_format writes any Sym's text into
 * buf (cap bytes, NUL-terminated) without interning a deferred one, and
 * returns its length */
#define SYM_DEFERRED 0x80000000u /* the bit a deferred Sym has */
Sym sym_defer(Sym prefix, uint64_t v, Sym suffix);
int sym_is_deferred(Sym s);
int sym_same(Sym a, Sym b);
size_t sym_format(Sym s, char *buf, size_t cap);
int sym_has_prefix(Sym s, const char *p); /* s's text starts with p (a deferred one stays deferred) */
/* pre + s's text, deferred again when s is (no interning per name) */
Sym sym_prefixed(const char *pre, Sym s);
void intern_free_all(void);
/* changes at each intern_free_all: static memos of Syms check it */
uint32_t intern_epoch(void);

/* --------------------------------------------------------------- ops.def */
enum {
#define OP(id, name, arity, amin, amax, shape, family, flags) OP_##id,
#include "ops.def"
#undef OP
	OP_COUNT_
};
#define OP_UNKNOWN 0 /* first entry of ops.def */

/* Operator families: what SAPP, layouts and the interpreter dispatch on. */
typedef enum {
	FAM_OPAQUE,     /* unknown or structural: no strategy of its own */
	FAM_STRUCT,     /* Load, Depend, UpdateState, MakeTuple, TupleGetItem, ... */
	FAM_MATMUL,
	FAM_BATCHMATMUL,
	FAM_CONV,
	FAM_POOL,
	FAM_BATCHNORM,
	FAM_LAYERNORM,
	FAM_RMSNORM,
	FAM_ELEMWISE,   /* binary broadcasting element-wise */
	FAM_UNARY,      /* activations and other unary element-wise */
	FAM_BIASADD,
	FAM_SOFTMAX,
	FAM_REDUCE,
	FAM_RESHAPE,
	FAM_TRANSPOSE,
	FAM_FLATTEN,
	FAM_GATHER,
	FAM_ONEHOT,
	FAM_STRIDEDSLICE,
	FAM_CONCAT,
	FAM_SPLIT,
	FAM_CAST,
	FAM_LOSS,       /* SoftmaxCrossEntropyWithLogits & co */
	FAM_SPARSELOSS, /* SparseSoftmaxCrossEntropyWithLogits */
	FAM_COMM,       /* AllReduce, AllGather, ... */
	FAM_P2P,        /* Send, Receive */
	FAM_VIRTUAL,    /* _VirtualDataset, _VirtualDiv, _MirrorOperator */
	FAM_EXPANDDIMS,
	FAM_SQUEEZE,
	FAM_ARGWITHVALUE,
	FAM_ATTENTION,  /* FlashAttentionScore, PromptFlashAttention: ir_attention_info() */
	FAM_ROPE,       /* RotaryPositionEmbedding: element-wise, the rotated last axis whole */
	FAM_SWIGLU,     /* Swiglu: halves its axis, which stays whole */
	FAM_PRELU,      /* PReLU: the weight follows the channel dimension */
	FAM_L2NORM,     /* L2Normalize: element-wise, the normalised axes whole */
	FAM_CUM,        /* CumSum/CumProd: the accumulated axis whole */
	FAM_DENSE,      /* Dense(x, w, b): x w^T + b */
	FAM_SLICE,      /* Slice(x, begin, size): the cut dimensions whole */
	FAM_TILE,       /* Tile(x, multiples): the repeated dimensions whole */
	FAM_SORT,       /* TopK, Sort: (values, indices), the sorted axis whole */
	FAM_LPNORM,     /* LpNorm: a p-norm reduction, the reduced axes whole */
	FAM_GETNEXT,    /* GetNext: the dataset's tensors, each split on dimension 0 like a dataset input */
	FAM_SCATTER,    /* ScatterDiv: indices whole, updates like the variable's trailing dimensions */
	FAM_UNSPLIT,    /* RandomChoiceWithMask, MoeInitRouting, MoeFinalizeRouting: MindSpore splits nothing */
	FAM_GMM,        /* GroupedMatmul: lists of x [.., K] and weights [(E,) K, N]; ir_gmm_info() */
} OpFamily;

/* Shape rules used by verify and by the lowering to re-infer local shapes. */
typedef enum {
	SHAPE_NONE,      /* unknown: outputs are taken as declared */
	SHAPE_SAME,      /* output = input 0 */
	SHAPE_BROADCAST, /* numpy broadcast of all tensor inputs */
	SHAPE_MATMUL,
	SHAPE_BATCHMATMUL,
	SHAPE_RESHAPE,   /* operand 1 = target shape tuple */
	SHAPE_TRANSPOSE, /* operand 1 = permutation tuple */
	SHAPE_FLATTEN,
	SHAPE_REDUCE,    /* operand 1 = axis (int or tuple), keep_dims attr/operand */
	SHAPE_GATHER,
	SHAPE_ONEHOT,
	SHAPE_CONCAT,
	SHAPE_SCALAR,    /* output is () */
	SHAPE_LOSS,      /* (B, C) -> (B) */
	SHAPE_CONV2D,
	SHAPE_POOL,
	SHAPE_ALLGATHER,
	SHAPE_REDUCESCATTER,
	SHAPE_STRIDEDSLICE,
	SHAPE_EXPANDDIMS,
	SHAPE_SWIGLU,    /* input 0 with its axis (operand 1, default -1) halved */
	SHAPE_ATTENTION, /* a tuple: ir_attention_info() */
	SHAPE_DENSE,     /* x.shape[:-1] + (w rows) */
	SHAPE_SLICE,     /* operand 2 = size (-1: to the end) */
	SHAPE_TILE,      /* operand 1 = multiples */
	SHAPE_SCATTER,   /* input 0; updates must be indices.shape + input.shape[1:] */
	SHAPE_MOEFINALIZE, /* x1's (tokens, hidden), checked against the other operands */
	SHAPE_MOETOKENS, /* MoeComputeExpertTokens: (num_expert,) of a 1-D sorted_experts */
	SHAPE_GMM,         /* a list: ir_gmm_info() */
} ShapeRule;

enum { OPF_ELIMINATE = 1, OPF_PRIMFUNC = 2, OPF_COMM = 4, OPF_ACTIVATION = 8, OPF_LOOKTHROUGH = 16 };

typedef struct OpInfo {
	const char *name;
	int8_t arity;      /* leading tensor operands; -1 = variadic */
	int8_t amin, amax; /* operand count bounds (-1: not checked) */
	uint8_t shape;
	uint8_t family;
	uint16_t flags;
} OpInfo;

extern const OpInfo op_table[OP_COUNT_];
int op_lookup(const char *name, size_t n); /* strips PrimFunc_; OP_UNKNOWN if not found */

/* ------------------------------------------------------------------ value.c */
typedef struct Node Node;
typedef struct Module Module;
typedef struct Graph Graph;
typedef struct Value Value;

typedef enum {
	V_INT,      /* I64(3) or bare 3 (numtype says which) */
	V_FLOAT,    /* F32(0.5) or bare 0.5; text keeps the original spelling */
	V_BOOL,     /* Bool(1), or bare true/false */
	V_STR,      /* "text" (text is the content without quotes, escapes kept) */
	V_WORD,     /* bare word: None, U, sum, x1, __main__.Net, 0-1-2-3 */
	V_RAW,      /* opaque bracketed value kept verbatim: UMonad[U], NameSpace[...] */
	V_TUPLE,    /* (a, b) */
	V_LIST,     /* [a, b] */
	V_DICT,     /* {"k": v}: elems alternate key, value */
	V_CALL,     /* Name(args): Tensor(shape=[..], ...), elems carry keys */
	V_NODE,     /* %k, a CNode or parameter in this module */
	V_GRAPH,    /* @graph */
	V_EXTERN,   /* reference to something not in the text (fragments, other graphs) */
} ValueKind;

/* numeric type tags: which wrapper a number printed with ("" = bare) */
typedef enum { NT_BARE, NT_I8, NT_I16, NT_I32, NT_I64, NT_U8, NT_U16, NT_U32, NT_U64,
	       NT_F16, NT_F32, NT_F64, NT_BF16 } NumType;

/* 16 bytes: a rank graph holds millions (operand arrays were a fifth of a
 * 4096-layer forward run's memory at 24).  A value has a count or a text,
 * never both, so they share their bytes; a CALL keeps its name after its
 * arguments (value_call_name), and the rare key=value key is an index into
 * a table of the process (value_key). */
struct Value {
	unsigned kind : 4;    /* ValueKind */
	unsigned numtype : 4; /* NumType */
	unsigned keyi : 24;   /* the key of an argument written key=value: value_key(), 0 none */
	union {
		uint32_t n; /* element count for TUPLE/LIST/DICT/CALL */
		Sym text;   /* WORD/RAW/STR/FLOAT/EXTERN/GRAPH text, EXTERN spelling, bool bare word */
	};
	union {
		int64_t i;
		double f;
		Value *elems;
		Node *node;
		Graph *graph;
	} u;
};

/* the key of v written key=value (0: none); setting it interns key in the
 * table of keys (a handful of texts: shape, dtype, value, ref_key) */
Sym value_key(const Value *v);
void value_set_key(Value *v, Sym key);
/* a CALL value name(elems...): its elements copied, its name after them */
Value value_call_of(Arena *a, Sym name, const Value *elems, uint32_t n);
Sym value_call_name(const Value *v);
/* the text a value is written with: WORD/RAW/STR/FLOAT/EXTERN/GRAPH text, a
 * CALL's name, 0 for the others */
Sym value_text(const Value *v);
/* the elements a TUPLE/LIST/DICT/CALL holds in memory: n, and a CALL's name */
uint32_t value_nslots(const Value *v);
Value value_int(int64_t v, NumType nt);
/* decimal text of v at p (at most 20 bytes, no NUL); returns its length */
size_t fmt_u64(char *p, uint64_t v);
size_t fmt_i64(char *p, int64_t v);
Value value_word(const char *s);
Value value_str(const char *s);
Value value_bool(int b);
Value value_node(Node *n);
Value *value_tuple_ints(Arena *a, const int64_t *v, int n, NumType nt); /* (I64(a), ...) */
Value value_tuple_of(Arena *a, const Value *elems, uint32_t n);
int value_get_int(const Value *v, int64_t *out); /* I64(3), 3, Bool(1) */
int value_is_word(const Value *v, const char *w);
int value_truthy(const Value *v, int *out);      /* Bool(1), true, 1 */
int value_int_list(const Value *v, int64_t *out, int max); /* tuple/list/single int -> count or -1 */
int value_equal(const Value *a, const Value *b);
Value value_clone(Arena *a, const Value *v);

/* ------------------------------------------------------------------ shape.c */
typedef enum { SK_NONE, SK_DIMS, SK_NOSHAPE, SK_TUPLE, SK_LIST, SK_OLD } ShapeKind;

/* Only kind says which member of the union is meant (a tuple's dims is its
 * sub array, not NULL); every reader tests kind first. */
typedef struct Shape {
	uint8_t kind;
	uint8_t rank;       /* SK_DIMS / SK_OLD: number of dims; SK_TUPLE/LIST: number of elements */
	union {
		int64_t *dims;      /* SK_DIMS, SK_OLD */
		struct Shape *sub;  /* SK_TUPLE, SK_LIST */
	};
} Shape;

/* The parameter-only text of an abstract: ", ref_key=..." and the other
 * ", item" texts.  Interned (abs_ext_intern): one per distinct text for the
 * whole process, shared by every Abs that has it and never written. */
typedef struct AbsExt {
	Sym ref_key;    /* without the leading ':' (0: none) */
	uint8_t ref_colon;
	uint32_t nextras;
	Sym extras[];   /* other ", item" texts in order (is_parameter, elements_use_flags={..}) */
} AbsExt;

/* An abstract as printed in a type line: <TYPESTR[, SHAPE][, extras...]>.
 * Copied by value (a rank graph holds millions), so the rare text is an
 * index of 32 bits (the struct is 32 bytes, not 40 with a pointer). */
typedef struct Abs {
	Sym tstr;       /* "Tensor[Float32]", "Ref[Tensor[Float32]]", "UMonad", "null" */
	Sym dtype;      /* element type: Float32 ... (0 if not a tensor) */
	uint8_t is_ref, is_tensor, has_value;
	uint32_t xi;    /* its AbsExt: abs_ext(); 0: no ref_key and no extras (every abstract a pass makes) */
	Shape shape;
} Abs;

/* the AbsExt of this text, made on first use: its index for Abs.xi (never 0) */
uint32_t abs_ext_intern(Sym ref_key, uint8_t ref_colon, const Sym *extras, uint32_t nextras);
const AbsExt *abs_ext(const Abs *a); /* NULL: none */

int shape_numel(const Shape *s, int64_t *out); /* 0 ok, -1 overflow/not dims */
int shape_equal(const Shape *a, const Shape *b);
Shape shape_dims(Arena *a, const int64_t *d, int rank);
/* the same, but equal shapes share one dims array of the module (nobody
 * may write into it): what a pass uses for the shapes it makes by the
 * hundred thousand */
Shape shape_shared(Module *m, const int64_t *d, int rank);
int abs_equal(const Abs *a, const Abs *b);
Abs abs_tensor(Arena *a, Sym dtype, const int64_t *d, int rank);
int dtype_size(Sym dtype);
/* output shape of a known operator from its type-line inputs: 1 ok, 0 n/a, -1 error (why) */
int ir_infer_shape(const Node *n, int64_t *out, int *orank, char *why, size_t whylen);
int ir_gather_batch_dims(const Node *n, int irank, int64_t *bd); /* operand 3 or attribute; 0 if out of range */
struct Options;
/* graph.c: a dataset input: a parameter of the entry graph without a value */
int ir_is_dataset_input(const Node *p);
/* The strategy given for dataset input k: entry k of the in_strategy of an
 * explicit _VirtualDataset vd (k its operand index), else entry k of
 * --dataset-strategy=TUPLE (k its place among the dataset inputs).  1 and
 * s[0..rank) when one of that rank is given, 0 otherwise. */
int ir_dataset_split(const struct Options *o, const Node *vd, uint32_t k, int rank, int64_t *s);
/* a boolean operator setting: literal operand i (newest dumps: MatMul's
 * Bool(0), Bool(1)), else attribute k1 or k2 (transpose_a / transpose_x1) */
int ir_node_flag(const Node *n, uint32_t i, const char *k1, const char *k2);

/* The attention operators (FAM_ATTENTION) and FlashAttentionScoreGrad:
 * where their operands are, which dimensions of q/k/v are batch, sequence
 * and heads for the input layout, and the output shapes.  Operand
 * positions are the argument lists of mindspore-ai/mindspore
 * mindspore/ops/op_def/yaml/
 * flash_attention_score_op.yaml, prompt_flash_attention_op.yaml and
 * incre_flash_attention_op.yaml (its key and value as single tensors); the
 * layout numbers are ops::FASInputLayoutMode (mindspore/core/include/ops/
 * op_enum.h: BSH 0, BNSD 1, SBH 2, BSND 3). */
enum { ATTN_BSH, ATTN_BNSD, ATTN_SBH, ATTN_BSND, ATTN_NLAYOUTS };
enum { /* operand roles */
	AR_NONE, AR_Q, AR_K, AR_V, AR_SHIFT, AR_DROP, AR_PADDING, AR_MASK, AR_PREFIX, AR_SEQLEN, AR_SCALE,
	AR_PAGED, /* IncreFlashAttention's block table and kv padding: not modelled */
};
#define ATTN_MAX_OPND 20
typedef struct AttnInfo {
	int layout;            /* ATTN_* */
	int bdim, sdim, ndim;  /* dims of q/k/v holding batch, sequence, heads (or hidden) */
	int packed;            /* BSH/SBH: heads and head size share one hidden dim */
	int64_t heads, kv_heads, head_dim, batch, s1, s2;
	int kv_split;          /* MindSpore's kv_split_: k/v heads split with q's */
	int mask_compressed;   /* sparse_mode 2, 3, 4: the mask is a fixed (2048, 2048) pattern */
	int heads_opnd;        /* operand of the head count, -1: attribute only */
	const char *heads_attr;
	int kvheads_opnd;      /* operand of the key/value head count (0: as many), -1: none */
	int scale_opnd, sparse_opnd; /* operands of scale_value and sparse_mode */
	uint8_t role[ATTN_MAX_OPND]; /* AR_* of each tensor operand */
	int nout;              /* 4 (FlashAttentionScore), 3 (its grad: dq, dk, dv) or 1 */
	int64_t out[4][4];     /* output shapes; out[2] (softmax_out) is not checked */
	int orank[4];
} AttnInfo;
/* 1 filled, 0 shapes unknown, -1 bad operands (why): a layout number out of
 * range, q/k/v that disagree */
int ir_attention_info(const Node *n, AttnInfo *ai, char *why, size_t whylen);

/* GroupedMatmul(x, weight, bias, scale, offset, antiquant_scale,
 * antiquant_offset, group_list, split_item, group_type, transpose_a,
 * transpose_b): x and weight are lists (MakeTuple operands), the result a
 * list.  The modes sappc models (ir_gmm_info):
 *   group_type -1, split_item 0: y_i = x_i w_i for every pair;
 *   group_type 0, split_item 3: one x (M, K), the weights one (E, K, N) or
 *     E of (K, N), group_list (E) the cumulative row counts: rows
 *     [gl[i-1], gl[i]) of x times weight i, one y (M, N);
 *   group_type 2, split_item 3: one x (M, Ktot) and one w (Ktot, N) whose
 *     shared axis the cumulative group_list cuts, one y (E, M, N) (the
 *     weight gradient of MindSpore's bprop).
 * Bias and the quantization operands must be None, transposes false. */
#define GMM_MAX_LIST 16
typedef struct GmmInfo {
	int split_item, group_type;
	int nx, nw;     /* elements of the x and weight lists */
	int wstack;     /* the weights are one (E, K, N) tensor */
	int grouped;    /* group_list is a tensor (operand 7) */
	int64_t groups; /* its length (E), 0 without one */
	int nout;
	int64_t out[GMM_MAX_LIST][MAX_RANK];
	int orank[GMM_MAX_LIST];
} GmmInfo;
/* 1 filled, 0 shapes unknown, -1 operands sappc does not model or that
 * disagree (why) */
int ir_gmm_info(const Node *n, GmmInfo *gi, char *why, size_t whylen);

/* MoeInitRoutingV2's four outputs (the shapes of CANN's
 * aclnnMoeInitRoutingV2): expanded_x (rows, H) in the dropless mode, rows
 * N*K or min(active_num, N*K), (expert_num, expert_capacity, H) in the
 * drop/pad mode; expanded_row_idx (N*K); the token counts or their cumsum
 * (expert_num) when the dropless mode asks for them; the counts before
 * the capacity (expert_num) when the drop/pad mode asks for them.  An
 * output the mode does not write has orank -1 (not checked). */
typedef struct MoeV2Info {
	int64_t n, k, h;
	int64_t active, capacity, experts, drop_pad, count_flag;
	int before_flag;
	int64_t out[4][MAX_RANK];
	int orank[4];
} MoeV2Info;
/* 1 filled, 0 shapes unknown, -1 operands that disagree (why) */
int ir_moe_v2_info(const Node *n, MoeV2Info *mi, char *why, size_t whylen);

/* ------------------------------------------------------------------ graph.c */
typedef struct Attr {
	Sym key;
	Value val;
} Attr;

typedef struct AttrList {
	Attr *a;
	uint32_t n;
} AttrList;

typedef enum { NK_PARAM, NK_CNODE, NK_RETURN, NK_EXTERN } NodeKind;
typedef enum { CK_PRIM, CK_CALL, CK_NODE, CK_EXTERN } CalleeKind;
typedef enum { SCOPE_NONE, SCOPE_FULLNAME, SCOPE_SCOPE, SCOPE_LOWER, SCOPE_LOWER_NOSPACE } ScopeKind;

typedef struct Loc {
	uint32_t line, col;
} Loc;

/* What passes attach to a node. */
typedef struct NodeLayout NodeLayout; /* defined by the lowering */
typedef struct StratInfo StratInfo;   /* defined by sapp */

/* The forward node of each backward node a pass made, by node id: a
 * NodeExt shared by many backward nodes finds its node's entry here. */
typedef struct FwdIds {
	uint32_t base, n;   /* node ids base .. base + n - 1 */
	const uint32_t *id; /* id[k]: the forward node's id for node base + k */
} FwdIds;

/* What only some nodes have: text of the dump kept verbatim, the callee of
 * a call, the rarer attribute groups.  A rank graph has about a million
 * nodes the lowering inserted and none of them needs this, so a Node holds
 * a pointer (NULL: all empty).  Read through ir_node_ext(), which never
 * gives NULL; write through ir_node_ext_mut(), which allocates. */
typedef struct NodeExt {
	Value callee;      /* CK_CALL: V_GRAPH, CK_NODE: V_NODE/V_EXTERN (+ funcunion text) */
	AttrList cattrs, primal;
	const char **xlines; /* further type lines (symbolic / kernel), verbatim, without indent */
	const char **debug; /* "# ..." lines after the scope line, verbatim without indent */
	uint32_t nxlines;
	uint32_t ndebug;
	Sym funcunion;     /* "[@FuncUnion(...)]" text after a %k callee */
	Sym cycle_mark;    /* "#------------------------> N" text before the node */
	uint8_t has_cattrs, has_primal;
	/* a node of the backward graph (autodiff): its cnode_primal_attrs go on
	 * with forward_node_name "<fwd_prim>_<fwd_id>" and forward_unique_id
	 * "<fwd_id>" of the forward node it differentiates, formed by the
	 * printer (half a million forward nodes would each need two attributes
	 * and two names otherwise).  fwd_tab set: the NodeExt is shared by the
	 * backward nodes of every forward node of primitive fwd_prim with this
	 * primal list (a NodeExt per forward node was 50 MB on a 4096-layer
	 * rank graph), and the forward id is the node's entry of fwd_tab; read
	 * it with ir_node_fwd_id() */
	uint8_t has_fwd;
	uint32_t fwd_id;
	Sym fwd_prim;
	const FwdIds *fwd_tab;
	Loc tloc;          /* the type line, when Node.tloc_ext */
	struct NodeSide *side0; /* the NodeSide of the nodes that have only this NodeExt (ir_node_set_x) */
} NodeExt;

/* A rank graph is millions of Nodes (a 4096-layer training step at 4096
 * devices: 2.2 million), so every byte here is megabytes: flags are bits,
 * the rest is ordered without holes (144 bytes), and what only some
 * nodes have lives elsewhere, behind one pointer (NodeSide: NodeExt, the
 * strategy). */
struct Node {
	uint32_t id;       /* module-wide creation index, stable */
	uint16_t op;       /* OP_* of the primitive, OP_UNKNOWN otherwise */
	int16_t stage;     /* pass data: pipeline stage, -1 unknown */
	unsigned kind : 2;        /* NodeKind */
	unsigned callee_kind : 2; /* CalleeKind */
	unsigned scope_kind : 3;  /* ScopeKind */
	bool has_type_line : 1;
	bool primfunc : 1;  /* operator printed with PrimFunc_ prefix */
	bool has_default : 1;
	bool dead : 1;      /* removed by a pass; skipped by the printer */
	bool autoname : 1;  /* debug name is CNode_<id>, formed when needed (name is 0) */
	bool has_pattrs : 1, has_strat : 1;
	/* the type line's position (verify points its shape errors there):
	 * tline lines below loc, at column tcol; tline 0: none, or, with
	 * tloc_ext, in NodeExt.tloc (a position these bits cannot hold) */
	unsigned tline : 8;
	unsigned tcol : 9;
	bool tloc_ext : 1;
	int32_t local;     /* %N; parameters: the N of %paraN (0 = none) */
	uint32_t scope_op; /* SCOPE_FULLNAME: 0, or k+1 when the full name is scope + "-op<k>" */
	Sym name;          /* debug name; parameter: name without %paraN_ */
	Sym prim;          /* primitive name without PrimFunc_ */
	uint32_t nargs;
	Sym instance;
	uint32_t nin_types;
	Sym scope;         /* text inside the parentheses of the scope line */
	uint32_t mark;     /* pass data: scratch for passes (cleared by ir_clear_marks) */
	Loc loc;
	Graph *g;
	Value *args;
	AttrList pattrs;
	/* NULL for most nodes: its NodeExt and strategy, read through
	 * ir_node_ext(), ir_node_x(), ir_node_strat(), ir_node_si() */
	struct NodeSide *side;
	Abs *in_types;     /* type line inputs */
	Abs out;           /* output abstract (params: the parameter type) */
	NodeLayout *lay;   /* pass data: the lowering's layouts */
};

struct Graph {
	Sym name;
	uint32_t index;      /* position in module */
	int32_t indirect;    /* -1 when absent */
	uint8_t has_attr_block, has_instance, is_entry;
	AttrList attrs;      /* raw key/value lines of "subgraph attr:" (values are V_RAW text) */
	Sym instance_ptr;    /* text after "subgraph instance: NAME : " */
	Sym symbol_engine;   /* "subgraph symbol engine: ..." line tail */
	const char **pre;    /* "# ..." lines between "subgraph instance" and "subgraph @" (not # Parameters) */
	uint32_t npre;
	Sym parent;          /* parent graph name or 0 */
	Vec(Node *) params;
	Vec(Node *) nodes;   /* CNodes in print order, Return last */
	const char **order;  /* "# Order:" block lines (verbatim, after the leading '#') */
	uint32_t norder;
	uint8_t has_order;
	const char **lead;   /* comment lines printed before this graph */
	uint32_t nlead;
	Loc loc;
};

struct Module {
	Arena *arena;
	const char *filename;
	Sym entry;           /* entry graph name */
	uint8_t has_header;
	AttrList attrs;      /* "# Attrs:" block */
	uint8_t has_attrs;
	Vec(Graph *) graphs;
	Vec(Node *) externs; /* placeholders for references outside the text */
	const char **lead;   /* comment lines before "# IR entry" */
	uint32_t nlead;
	const char **trail;  /* comment / text lines after the last graph */
	uint32_t ntrail;
	uint32_t next_id;
	uint32_t next_param; /* next %paraN number */
	uint8_t fragment;    /* read with --fragment */
	struct SappSummary *sapp; /* what the sapp pass decided besides the strategies (NULL: no sapp pass) */
	Sym *op_syms;        /* OP_* -> its interned name, made as ir_cnode_new needs them */
	struct KeyMap *dims_pool; /* shape_shared(): one dims array per distinct shape */
	struct TrainInfo *train; /* what autodiff found for gradcomm and optimizer (NULL: forward graph) */
	int32_t micro;       /* micro-batches the micro pass made of the step (0: none) */
};

Module *ir_module_new(const char *filename);
void ir_module_free(Module *m);
size_t ir_module_bytes(const Module *m); /* memory it holds (arena chunks, lists, shape pool) */
Graph *ir_graph_new(Module *m, Sym name);
Graph *ir_entry(Module *m);
Graph *ir_find_graph(Module *m, Sym name);
int ir_check_graph_names(const Module *m); /* two graphs of one name: reported, 1 */
Node *ir_node_new(Module *m, Graph *g, NodeKind k);
Node *ir_cnode_new(Module *m, Graph *g, int op, const char *prim, uint32_t nargs); /* not inserted */
void ir_graph_insert(Graph *g, uint32_t pos, Node *n);
Value *ir_attr_get(const AttrList *l, const char *key);
Value *ir_attr_get_sym(const AttrList *l, Sym key);
void ir_attr_set(Module *m, AttrList *l, const char *key, Value v);
int ir_node_is_op(const Node *n, int op);
/* what a pipeline stage before the last returns instead of its outputs
 * (passes/lower/pipeline.c): Depend(zeros, MakeTuple(its Sends)) */
int ir_node_is_stage_zeros(const Node *n);
const NodeExt *ir_node_ext(const Node *n);     /* n's NodeExt, or an empty one: never NULL */
NodeExt *ir_node_ext_mut(Module *m, Node *n); /* n's NodeExt, made on first use */
NodeExt *ir_node_x(const Node *n);            /* n's NodeExt, NULL when it has none */
/* gives n the NodeExt x (NULL: none), which other nodes may share; n's
 * strategy stays */
void ir_node_set_x(Module *m, Node *n, NodeExt *x);
/* gives d the strategy of o (shared, not copied); d's NodeExt stays */
void ir_node_share_strat(Module *m, Node *d, const Node *o);
uint32_t ir_node_fwd_id(const Node *n);       /* the forward node a backward node differentiates (has_fwd) */
/* the position of n's type line (line 0: it has none) */
Loc ir_node_tloc(const Node *n);
void ir_node_set_tloc(Module *m, Node *n, Loc t);
/* n's strategy attributes (in_strategy ...): an empty list when it has none */
const AttrList *ir_node_strat(const Node *n);
/* gives n the list l, keeping its StratInfo (a new NodeSide: nodes copied
 * from one another may share one; the attributes themselves are not copied) */
void ir_node_set_strat(Module *m, Node *n, AttrList l);
/* Names a pass may leave unformed (inserted operators: one interned string
 * each would cost more than the node).  Both return the interned text when
 * there is one, else text formed in a buffer of the calling thread that
 * the next call of the same function on that thread overwrites. */
const char *ir_node_fullname(const Node *n); /* scope text or "" */
const char *ir_node_name(const Node *n);     /* debug name or "" */
/* the same, formed in buf when it must be (when a caller keeps two at once) */
const char *ir_node_fullname_r(const Node *n, char *buf, size_t cap);
const char *ir_node_name_r(const Node *n, char *buf, size_t cap);
Node *ir_look_through(Node *n);               /* skip Load/Depend/Cast... to the producer */
void ir_renumber(Graph *g);
void ir_graph_set_nodes(Graph *g, Node **a, uint32_t n, uint32_t cap); /* takes the array, renumbers */
/* a deep copy in a new arena, node ids kept (clone.c); Node.lay is not copied */
Module *ir_module_clone(const Module *m);
void ir_clear_marks(Module *m);
uint32_t ir_count_cnodes(const Module *m);
uint32_t ir_count_nodes(const Module *m);
const OpInfo *ir_opinfo(const Node *n);
/* Operators sappc does not model (ops.c): unknown primitives and the opaque
 * family get no strategy, stay whole on every device and have no simulation
 * semantics of their own.  op_opaque_uses() lists them once per operator
 * name, in order of first use, into *out (xmalloc'd, freed by the caller). */
typedef struct OpaqueUse {
	Sym prim;
	uint32_t count;
	Loc first;
} OpaqueUse;
int op_is_opaque(const Node *n);
uint32_t op_opaque_uses(const Module *m, OpaqueUse **out);
/* which part of a training step n belongs to, from its full name:
 * "Gradients/..." backward, "Default/optimizer-..." optimizer, else forward;
 * what the recompute pass made (duplicates, their Depend and its
 * MakeTuple of backward values) is backward */
typedef enum { IR_PHASE_FWD, IR_PHASE_BWD, IR_PHASE_OPT } IrPhase;
IrPhase ir_node_phase(const Node *n);
/* tensor operand shapes: the declared type-line input i (NULL if absent) */
const Abs *ir_in_abs(const Node *n, uint32_t i);

/* ------------------------------------------------------------------- diag.c */
typedef struct Source {
	const char *name;
	const char *buf;
	size_t len;
} Source;

void diag_set_source(const Source *src); /* src->buf must outlive the errors about it (NULL: none) */
Source diag_source(void);                /* the current one, to restore after reporting about another file */
void diag_error_at(Loc loc, const char *fmt, ...) PRINTF(2, 3);
void diag_warning_at(Loc loc, const char *fmt, ...) PRINTF(2, 3);
void diag_error(const char *fmt, ...) PRINTF(1, 2);   /* no location: "sappc: error: " */
void diag_warning(const char *fmt, ...) PRINTF(1, 2);
void diag_note(const char *fmt, ...) PRINTF(1, 2);
void diag_note_at(Loc loc, const char *fmt, ...) PRINTF(2, 3); /* follows the error it explains */
/* The scanner borrows one byte of the source buffer for a NUL (flex's hold
 * char): *pos is where, *ch what it was.  Diagnostics show the original. */
void diag_set_hold(char *const *pos, const char *ch);
int diag_errors(void);
int diag_too_many(void); /* the 20-error limit was reached */
void diag_reset(void);
void diag_set_quiet(int q);
void diag_set_silent(int s); /* print nothing at all (fuzzing) */
void diag_restore(int n);     /* forget errors of a silent side run: the count goes back to n */
NORETURN void die(const char *fmt, ...) PRINTF(1, 2); /* internal bug */

/* --------------------------------------------------------- frontend/build.c */
/* Reads a whole buffer; returns NULL after reporting errors. */
Module *ir_parse(const char *filename, const char *buf, size_t len, int fragment);

/* -------------------------------------------------------- backend/print.c */
void ir_print_module(FILE *f, const Module *m);
void ir_print_value(FILE *f, const Value *v);
void ir_print_abs(FILE *f, const Abs *a);
void ir_print_node(FILE *f, const Node *n);

/* ----------------------------------------------------------------- hash.c */
uint64_t std_hash_bytes(const void *p, size_t len); /* libstdc++ std::hash<std::string> */
/* the same hash of a len-byte string whose first `known` bytes are hashed
 * once (start) for several strings of that length (finish: the whole string) */
typedef struct StdHash {
	uint64_t h;
	size_t len, done;
} StdHash;
void std_hash_start(StdHash *st, const void *p, size_t len, size_t known);
uint64_t std_hash_finish(const StdHash *st, const void *p);
uint64_t rh_hash_bytes(const void *p, size_t len);  /* robin_hood hash_bytes */

/* ---------------------------------------------------------------- rhmap.c */
/* Iteration order of robin_hood::unordered_map v3.11.5 (ir-format.md §1.9),
 * the order MindSpore prints attribute dicts and visits HashMaps in. */
uint64_t rh_hash_int(uint64_t x); /* robin_hood::hash<uint64_t> */
/* Insert keys 0..n-1 (hash[k], identity id[k]) into a fresh map in that order;
 * writes the key indices in iteration order, returns the number of distinct keys. */
uint32_t rh_order(const uint64_t *hash, const uint32_t *id, uint32_t n, uint32_t *order);
/* Reorder an attribute list in place into MindSpore's print order (the list's
 * current order is taken as the insertion order). */
void rh_order_attrs(Attr *a, uint32_t n);
/* Iteration order of a fresh map holding integer keys 0..r-1 inserted in order. */
void rh_order_ints(int r, int *order);

/* --------------------------------------------------------------- keymap.c */
/* A map from short int64 arrays to zeroed values of vsize bytes that never
 * move (the lowering's caches: groups by ranks, plans by transfer). */
typedef struct KeyEnt {
	uint64_t h;
	uint32_t nkey;
	const int64_t *key;
	void *val;
} KeyEnt;
typedef struct KeyMap {
	Arena *arena;  /* keys and values */
	size_t vsize;
	KeyEnt *ent;   /* in insertion order */
	uint32_t *slot; /* cap slots: entry index + 1, 0 empty */
	uint32_t n, ecap, cap;
} KeyMap;
void keymap_init(KeyMap *m, size_t vsize);
/* the value of key[0..nkey), zeroed and *fresh = 1 when the key is new */
void *keymap_get(KeyMap *m, const int64_t *key, uint32_t nkey, int *fresh);
/* entry i (0 .. m->n - 1, insertion order): its value, and its key if asked */
void *keymap_at(const KeyMap *m, uint32_t i, const int64_t **key, uint32_t *nkey);
void keymap_free(KeyMap *m);

/* -------------------------------------------------------------- stdsort.c */
/* libstdc++'s std::stable_sort, comparison for comparison, so that a
 * comparator that is not a strict weak order gives MindSpore's result.
 * Sorts a[0..n) by less(x, y, ctx) ("x goes before y"); buf holds (n+1)/2
 * ints (the library's temporary buffer). */
typedef int (*StdLess)(int x, int y, const void *ctx);
void std_stable_sort(int *a, int n, int *buf, StdLess less, const void *ctx);

/* ------------------------------------------------------ passes/manager.c */
/* Pipeline stages are numbered 0 to PIPELINE_MAX_STAGES - 1: the reader
 * refuses other stage attributes, the driver other --pipeline-stages and
 * --stage values. */
#define PIPELINE_MAX_STAGES 64

typedef struct Options {
	int device_num;
	int rank;
	int quiet;
	int verify_each;
	int time_passes;
	int fragment;
	double mem_coef;
	int fully_use_devices;
	int full_batch;
	int ds_n;                /* --dataset-strategy=TUPLE: one strategy per dataset input (0: none) */
	const int8_t *ds_rank;   /* its entries per input */
	const int64_t *ds_val;   /* MAX_RANK slots per input */
	int interfered;
	int pipeline_stages;
	int micro_batch_num;
	int pipeline_scheduler; /* --pipeline-scheduler: SCHED_* */
	int enable_parallel_optimizer;
	int optimizer_weight_shard_size;
	int semi_auto;
	int data_parallel;  /* semi_auto ignoring every given strategy: the pure data-parallel plan */
	int enable_alltoall;
	int no_redist_opt;  /* --disable-redistribution-opt: no §4.2 step 6 (pre-2.3 op lists) */
	const char *explain;
	int record_levels;  /* keep every searched operator's --explain level table (StratInfo) */
	const char *strategy_out;
	const char *strategy_in; /* --strategy-in: apply this plan instead of searching */
	const char *world_group;
	int view_plan;      /* --view=plan: draw the global graph with strategies */
	int max_nodes;      /* --max-nodes: collapse by scope above this many operators */
	const char *focus;  /* --focus: keep this scope expanded */
	const char **stage_rules; /* "PATTERN=K" */
	int nstage_rules;
	const char **recompute_rules; /* --recompute=PATTERN: cells recomputed in the backward */
	int nrecompute_rules;
	int parallel_detail; /* inputs_tensor_map / device_matrix / outputs_tensor_map attributes */
	int virtual_ops;     /* keep _MirrorOperator / _VirtualDiv (step_parallel_end view) */
	int phase;           /* --phase: PHASE_AUTO (from the graph), PHASE_TRAIN, PHASE_PREDICT */
	double device_memory; /* --device-memory, bytes (max_device_memory, default 1024 GB) */
	int auto_pipeline;   /* --auto-pipeline: the sapp pass may lower the stage number (§5) */
	/* the training step (passes/train/, training-step.md) */
	int forward_only;    /* --forward-only: no backward, gradient communication or optimizer */
	int gradients_mean;  /* --gradients-mean: gradient AllReduce followed by x 1/n (§2.3) */
	int optimizer;       /* --optimizer: OPTIM_* */
	int optimizer_given; /* an optimizer option was given (an error without a training step) */
	double learning_rate, momentum, beta1, beta2, eps, weight_decay; /* < 0: the optimizer's default */
} Options;

enum { OPTIM_MOMENTUM, OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW };
enum { SCHED_1F1B, SCHED_GPIPE };
/* one step of a pipeline stage's order: the forward or backward of a micro-batch */
typedef struct SchedStep {
	uint8_t bwd;
	int32_t micro;
} SchedStep;
/* the order of stage `stage` of `stages` for `micro` micro-batches
 * (passes/train/schedule.c): 2 * micro steps written to out */
int sched_order(int stages, int stage, int micro, int scheduler, SchedStep *out);
/* start times of every stage's steps (forward 1, backward 2 units):
 * start[s * 2 * micro + k]; returns the makespan, -1 if the order stalls */
int sched_timeline(int stages, int micro, int scheduler, int32_t *start);

enum { PHASE_AUTO, PHASE_TRAIN, PHASE_PREDICT };

typedef int (*PassFn)(Module *m, const Options *o);

typedef struct PassInfo {
	const char *name;
	PassFn fn;
	const char *help;
	int in_default; /* part of the default pipeline */
	int per_rank;   /* depends on the rank lowered (passes.def) */
} PassInfo;

extern const PassInfo pass_table[];
extern const int pass_count;
const PassInfo *pass_find(const char *name);
double pm_rss_now(void); /* resident memory in MB, 0 where unknown */

typedef struct PassManagerOptions {
	const PassInfo *passes[64];
	int npasses;
	const char *stop_after;
	const char *print_after;
	int print_after_all;
	int verify_each;
	int time_passes;
	int list_has_verify_first;
	double parse_time;
	double parse_rss; /* resident MB after parsing (--time-passes) */
	/* called before (after 0) and after (after 1) pass i: where the driver
	 * copies the module it will run again (sappc.c, struct Copies) */
	void (*hook)(void *ctx, Module *m, int i, int after);
	void *hook_ctx;
} PassManagerOptions;

int pm_run(Module *m, const Options *o, const PassManagerOptions *pm);

#define PASS(name, fn, dflt, per_rank, help) int fn(Module *m, const Options *o);
#include "../passes/passes.def"
#undef PASS
/* passes/train/recompute.c: every --recompute pattern matches some operator
 * of the whole graph (before lowering keeps one stage): 0, or 1 reported */
int recompute_check_patterns(const Module *m, const Options *o);

/* ----------------------------------------------------------- passdata.c */
/* What the passes leave on the IR for the printers, the report and the
 * pictures: these read the records below (and the text of passdata.c),
 * never the passes' own code.
 *
 * ir_node_si(), set by the sapp pass: where the node's strategy came from, and
 * the --explain text of its search levels when Options.record_levels is
 * set.  STRAT_LOADED: from --strategy-in (the file's own source is kept
 * by the sapp pass). */
enum { SRC_NONE, SRC_PINNED, SRC_SEARCHED, SRC_PROPAGATED, SRC_DEFAULT, SRC_LOADED, SRC_COUNT_ };
extern const char *const ir_strat_source_name[SRC_COUNT_];
struct StratInfo {
	uint8_t source;
	Sym levels; /* the search levels' text (interned, so equal tables are shared), else 0 */
};
/* Node.side: what only some nodes have, behind one pointer (a rank graph
 * has a million nodes with neither).  Shared by nodes copied from one
 * another, so never written once set: the setters make a new one.  The
 * nodes that have only a NodeExt share its side0. */
typedef struct NodeSide {
	NodeExt *x;    /* NULL: none */
	AttrList l;    /* in_strategy/out_strategy/in_layout/out_layout: only operators given or searched a strategy */
	StratInfo si;  /* when has_si */
	uint8_t has_si;
} NodeSide;
/* what the sapp pass left on n (NULL: nothing) */
const StratInfo *ir_node_si(const Node *n);
/* gives n the list l and the record si (NULL: none); a new NodeSide,
 * since nodes copied from one another may share one */
void ir_node_set_strat_si(Module *m, Node *n, AttrList l, const StratInfo *si);

/* Node.lay, set by the lowering (passes/lower/, parallel-lowering.md §2-§5) */
/* A tensor layout in compact form: Layout without the fixed arrays'
 * footprint (a graph of 150 000 operators holds ~500 000 of these).  The
 * arrays are shared and read-only: tlay_set() finds them in the pass's
 * table (one copy per distinct layout, in the module arena), so a TLay is
 * copied by value and changed only by setting it anew. */
typedef struct TLay {
	int8_t ndev; /* 0: no layout (not a tensor) */
	int8_t rank;
	const int32_t *dev;   /* device matrix, ndev entries */
	const int8_t *map;    /* tensor map, rank entries */
	const int64_t *shape; /* global shape, rank entries */
} TLay;

/* forward communication after an operator (§3.1); FC_BATCHSTATS: a
 * training BatchNorm over a split batch normalises with statistics summed
 * over fwd_mask before it (redistribute.c); FC_ALLREDUCE_PNORM: an LpNorm
 * whose reduced axis is split sums its partial p-th powers (comm.c) */
typedef enum { FC_NONE, FC_ALLREDUCE, FC_ALLREDUCE_MEAN, FC_REDUCESCATTER, FC_BATCHSTATS,
	       FC_ALLREDUCE_PNORM } FwdKind;

/* 64 bytes: a 4096-device rank graph holds ~225 000 of these.  The bit
 * fields hold what is small by construction: a FwdKind, and device
 * dimension counts and masks (at most LAYOUT_MAX_DIM + 2 dimensions). */
struct NodeLayout {
	uint16_t nin; /* = node nargs; in[i].ndev == 0 for non-tensor operands */
	uint8_t nout; /* outputs (a tuple output has several) */
	uint8_t flags;
	unsigned fwd : 3;       /* FwdKind */
	unsigned nodev : 5;     /* origin (non-standardised) device matrix, for --parallel-detail */
	unsigned fwd_mask : 24; /* device dims (index in odev) the forward group varies along */
	Sym fwd_op;             /* "sum", "max", ... */
	int32_t opt_rep;        /* optimizer-parallel shard factor on dim 0 (Loads/params), 0 none */
	const int32_t *odev;    /* nodev entries, shared like a TLay's arrays (lower_dev) */
	TLay *in;
	TLay *out;
	TLay *fwd_out; /* layout after the forward op when it differs (ReduceScatter) */
	Node *subst;   /* users read this node instead (last forward op / replacement) */
	Node *origin;  /* inserted ops: the operator whose full name names them */
};

/* "pinned", "searched", "propagated", "default", "loaded"; NULL when n has no strategy */
const char *ir_strategy_source(const Node *n);
/* the --explain lines of n's search levels; "" when none were recorded
 * (not searched, or not asked), NULL when n has no strategy */
const char *ir_strategy_levels(const Node *n);
/* a layout as "D=[4,2] M=[1,-1] S=(64,32)" in buf */
const char *tlay_format(const TLay *t, char *buf, size_t len);
/* n's output layout as "D=[4,2] M=[1,-1]" (" opt=K" for a weight the
 * optimizer stores sharded) in buf; NULL when n has no single tensor output
 * layout (not lowered, a tuple, not a tensor) */
const char *ir_layout_text(const Node *n, char *buf, size_t len);
/* the layout of n's tensor input k (out 0) or output k (out 1) with its
 * global shape, "D=[4,2] M=[1,-1] S=(64,32)" (" opt=K" as above); NULL when
 * it has none or there is no such tensor */
const char *ir_tensor_layout_text(const Node *n, int out, uint32_t k, char *buf, size_t len);
/* the operator whose full name names n when the lowering inserted n (the
 * one it serves), else n */
const Node *ir_node_origin(const Node *n);

/* ------------------------------------------------------ passes/sapp/ */
/* What the sapp pass decided besides the strategies (Module.sapp), for the
 * lowering, --simulate and --report.  Arena text. */
typedef struct SappSummary {
	uint8_t searched;       /* the SAPP search ran (not semi_auto, not --strategy-in) */
	uint8_t predict;        /* inference strategies (GenerateStrategyV1), else training (V3) */
	const char *phase_why;  /* why that phase: "--phase=predict", "the graph has a loss operator", ... */
	int32_t stages;         /* pipeline stages the plan is for (--auto-pipeline may lower --pipeline-stages) */
	const char *suggestion; /* auto-pipeline estimate and ParallelSuggestion, one line, or NULL */
} SappSummary;
/* the pipeline stage count the module's plan is for */
int sapp_plan_stages(const Module *m, const Options *o);
/* ----------------------------------------------------- passes/lower/ */
/* Node.stage of the entry graph's operators as the pipeline pass assigns
 * them, without cutting the graph (pipeline.c); 0 ok, 1 reported */
int lower_assign_stages(Module *m, const Options *o);

/* ---------------------------------------------------------------- io.c */
/* The whole input plus two NULs; "-" = stdin; 0 ok.  A regular file is
 * mapped, not copied: give it back with io_free_file, never free(). */
int io_read_file(const char *path, char **buf, size_t *len);
void io_free_file(char *buf);
/* Bytes [p, p + n) of a file from io_read_file (else nothing happens): the
 * pages wholly inside leave the process's memory and read back from the
 * file, as they were, when touched again.  The scanner calls it as it goes. */
void io_file_drop(const char *p, size_t n);
/* The output set (all-or-nothing output; HACKING.md "Write an output file").
 * out_open: "-" = stdout; a regular file (symbolic links followed) gets a
 * temporary beside it, a device or pipe is written in place.  out_commit
 * finishes writing (0, or -1 reported); the temporary then waits for
 * out_publish, which renames every waiting output into place at the end of a
 * successful run; out_discard (also at exit) removes them after a failure. */
typedef struct OutFile {
	FILE *f;
	char *path; /* for messages */
	int slot;   /* in the output set; -1 when written in place */
} OutFile;
int out_open(OutFile *o, const char *path);
int out_commit(OutFile *o);
void out_abort(OutFile *o);
/* A directory output: returns a staging directory (NULL: reported) to fill
 * with out_open_staged (plain files, also from forked workers); out_publish
 * renames it to path, or moves its entries into path when path exists. */
const char *out_dir_stage(const char *path);
int out_open_staged(OutFile *o, const char *path);
int out_publish(void); /* 0, or -1 reported */
void out_discard(void);
/* Usage check before reading: no output paths[i] (option names[i]; NULL =
 * not given, "-" = stdout) may name the input file in or another output.
 * 0 ok, -1 after a usage message on stderr. */
int out_check_paths(const char *in, int n, const char *const names[], const char *const paths[]);

#endif
