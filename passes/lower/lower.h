/* lower.h - what the parallel lowering passes share (parallel-lowering.md
 * §2-§5): the per-node layout record (NodeLayout, hung on Node.lay), the
 * device context of the rank being lowered, group naming and the helpers
 * that build inserted CNodes.  The layout algebra itself is passes/layout.h.
 */
#ifndef SAPPC_LOWER_H
#define SAPPC_LOWER_H

#include "sappc.h"
#include "../layout.h"

#define LOWER_MAX_GROUP 65536
#define LOWER_FNCACHE 1024
#define LOWER_DIRCACHE 4096
#define LOWER_TUPLECACHE 64

/* TLay, NodeLayout: the layout records left on the IR (ir/sappc.h) */

enum {
	LAY_OP = 1,       /* has an operator rule (a strategy, given or default) */
	LAY_LOCAL = 2,    /* type lines rewritten to local shapes */
	LAY_INSERTED = 4, /* created by the lowering */
	LAY_REPLACED = 8, /* the node was replaced (Reshape, row-split Gather) */
	LAY_NOGRAD = 16,  /* a stage boundary's Send/Receive whose value no trainable weight reaches: no
	                     gradient goes back (both sides know it, pipeline.c) */
};


_Static_assert(FC_ALLREDUCE_PNORM < 8 && LAYOUT_MAX_DIM + 2 < 24, "NodeLayout's bit fields are too narrow");

/* The rank being lowered and its stage (§2.1). */
typedef struct LowerCtx {
	Module *m;
	const Options *o;
	int n_total, stages, per_stage, stage, rank, pos; /* pos: index of rank in dev_list */
	int64_t *dev_list;                                /* per_stage ranks of this stage */
	const char *world;
	int primfunc; /* the input spells operators PrimFunc_X: inserted ops follow */
	uint32_t next_uid;
	/* fullname counters "scope/Op" -> next N (lower_set_fullname) */
	Sym *ckeys;
	int32_t *cvals;
	uint32_t ccap, ccount;
	int cseeded;
	KeyMap seed_prims;   /* primitive -> first waiting node in seed_nodes, -1 */
	Node **seed_nodes;   /* full names not yet counted (seed_counters) */
	int32_t *seed_next;
	Sym seeded[64];      /* primitives seed_prim has done (by Sym % 64): nothing more to do */
	Sym fn_scope[LOWER_FNCACHE], fn_prim[LOWER_FNCACHE], fn_key[LOWER_FNCACHE];
	int32_t *fn_ctr[LOWER_FNCACHE];
	uint32_t fn_gen[LOWER_FNCACHE], fn_epoch; /* counter pointers die when the table grows */
	/* behind it, the key "dir/Op" by (directory of the consumer's full
	 * name, operator): most consumers are new, their directory is not */
	struct {
		Sym key, prim;
		uint32_t plen;
	} fn_dir[LOWER_DIRCACHE];
	/* communication groups seen so far (lower_group): their names and rank
	 * tuples are built once and shared by every op of that group */
	KeyMap groups;         /* ranks -> LowerGroup */
	KeyMap *redist_memo;   /* redistribute pass: plans by transfer (MemoEntry) */
	KeyMap *mask_memo;     /* lower_group_mask results by (mask, dev) */
	KeyMap lay_arrays;     /* the shared arrays of layouts (tlay_set, lower_dev) */
	KeyMap plan_lays;      /* redistribute.c: the NodeLayout of a plan's last op, by its TLay */
	KeyMap rs_attrs;       /* redistribute.c: a ReduceScatter's attributes, by (odev, fwd_mask) */
	KeyMap shared_lays;    /* layouts nobody writes per node, by contents (lay_keep) */
	KeyMap tuple_users;    /* rules.c: the operator that laid a MakeTuple out first, by its id */
	Sym inst_prefix, rd_syms[RD_KINDS]; /* redistribute.c's instance names, interned once */
	int break_redist;      /* test only: SAPPC_TEST_BREAK_REDIST=1 (redistribute.c)*/
	/* redistribute.c's localize: the local element shapes of recent
	 * MakeTuples, by their contents, shared by the next MakeTuple with
	 * equal ones (tuple_sub) */
	struct {
		uint32_t n;
		Shape *sub;
	} tuple_subs[LOWER_TUPLECACHE];
} LowerCtx;

/* one communication group: derived attributes shared by its ops (never mutated) */
typedef struct LowerGroup {
	Sym name;          /* "<n>-<hash>" or the world group */
	Sym granks;        /* "0-1-2" or WORLD_GROUP */
	Value ids;         /* (0, 1, 2), bare ints */
} LowerGroup;

/* ---- common.c ---- */
Sym lower_sym(const char *s);                                          /* intern a constant string, cached */
Sym lower_tensor_tstr(Sym dtype, int ref); /* "Tensor[dtype]", or "Ref[Tensor[dtype]]", memoised */
void lower_attr_put(Module *m, AttrList *l, const char *key, Value v); /* lists built by it only */
int lower_ctx_init(LowerCtx *c, Module *m, const Options *o);          /* 0 ok, -1 reported */
void lower_ctx_free(LowerCtx *c);
NodeLayout *lay_new(Module *m, uint32_t nin, uint32_t nout);
/* a layout filled outside the arena, then kept with lay_keep: shared (one
 * arena copy per distinct contents in this pass) when share is set, which
 * only a layout that no pass writes into per node may be: an operator's
 * without forward communication, replacement or Reshape, a look-through
 * op's (a Load's: optshard writes into a copy, lay_copy) */
NodeLayout *lay_scratch(uint32_t nin, uint32_t nout);
NodeLayout *lay_keep(LowerCtx *c, NodeLayout *s, int share);
NodeLayout *lay_copy(Module *m, const NodeLayout *l); /* a node's own copy of l */
void tlay_set(LowerCtx *c, TLay *t, const int32_t *dev, int ndev, const int8_t *map, const int64_t *shape, int rank);
const int32_t *lower_dev(LowerCtx *c, const int32_t *dev, int ndev); /* the shared copy */
void tlay_to_layout(const TLay *t, Layout *l);
void tlay_from_layout(LowerCtx *c, TLay *t, const Layout *l);
void tlay_slice(const TLay *t, int64_t *out);
int tlay_equal(const TLay *a, const TLay *b);
void tlay_replicated(LowerCtx *c, TLay *t, int per_stage, const int64_t *shape, int rank);
/* ranks that differ from this rank only along the device dims in mask */
int lower_group_mask(const LowerCtx *c, const int32_t *dev, int ndev, uint32_t mask, int64_t *out);
int lower_replica_group(const LowerCtx *c, const TLay *t, int64_t *out);
/* "<n>-<hash>" or the world group name; buf >= 64 */
const char *lower_group_name(LowerCtx *c, const int64_t *ranks, int n, char *buf, size_t len);
/* the attribute set of an inserted communication op, group part */
void lower_comm_group_attrs(LowerCtx *c, Node *n, const int64_t *ranks, int n_ranks, int reuse);
uint64_t lower_hash_name(const Node *producer, int index);
const char *lower_fullname(const Node *n, char *buf, size_t len);
Node *lower_new_op(LowerCtx *c, int op, const Node *like, uint32_t nargs);
void lower_set_fullname(LowerCtx *c, Node *n, const Node *like);
/* a cell path PATTERN (`_backbone.layer1`) against a scope: parts matched,
 * 0 none; *end: length of the matched cell instance's scope prefix */
int lower_match_cell(const char *scope, const char *pat, size_t plen, size_t *end);
Abs lower_abs_like(Module *m, const Abs *like, const int64_t *d, int rank);
Abs lower_abs_int(void);
Abs lower_abs_tuple_ints(Module *m, int n);
/* the abstract of a tuple of n tensors whose k-th element is e[k * inc]
 * (inc 0: n copies of e[0]) */
Abs lower_abs_tuple(Module *m, const Abs *e, uint32_t n, uint32_t inc);
Value lower_ints(Module *m, const int64_t *v, int n);
void lower_order_attrs(AttrList *l);
void lower_reorder_attrs(AttrList *l, const char *const *keys, int nk);
int lower_strategy(const Node *n, int64_t s[][LAYOUT_MAX_DIM], int *rk, int max, int *nstrat);
int lower_is_dataset(const Node *p);
int lower_is_weight(const Node *p);
/* optimizer-parallel sharding of a weight (§3.7): returns the shard factor
 * (1 = not sharded) and fills the AllGather group and the mirror group */
int lower_param_shard(const LowerCtx *c, const Node *p, int64_t *optg, int *nopt, int64_t *mirror, int *nmirror);

/* ---- comm.c ---- */
Node *lower_all_reduce(LowerCtx *c, Node *src, Node *origin, const int64_t *g, int ng, Sym op, int index);
void lower_subst_args(Node *n);
void lower_clear_subst(Graph *g);
/* the loss operator (what the entry graph returns, through inserted ops)
 * and how many devices hold its value: _VirtualDiv's divisor (§3.6) */
Node *lower_loss_node(Graph *g);
int64_t lower_loss_repeat(const LowerCtx *c, const NodeLayout *l);

/* ---- rules.c ---- */
int lower_has_rule(const Node *n);
int lower_attention_split(const Node *n, int64_t *h, int64_t *kvh); /* heads split of an attention op */
int lower_infer_node(LowerCtx *c, Node *n); /* 1 done, 0 no rule, -1 reported */
uint32_t lower_local_mean_dims(const Node *n); /* a data-parallel loss's local mean: odev dims */

/* ---- verify (layouts.c) ---- */
int lower_verify(Module *m);
int lower_same_slices(Module *m, const TLay *a, const TLay *b);
Value lower_scalar_tensor(Module *m, Sym dtype, int64_t v);

#endif
