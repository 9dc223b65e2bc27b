/* train.h - what the training-step passes share (autodiff, gradcomm,
 * optimizer; spec training-step.md §1-§3): the record autodiff leaves on
 * the module (TrainInfo) and the helpers that build the nodes they emit.
 *
 * The three passes run on this rank's lowered forward graph.  Emitted nodes
 * go into a list (TrainEmit.out) that the pass splices into the entry graph;
 * their full names are made by the lowering's counters (lower_set_fullname)
 * from a template node whose scope is the wanted directory.
 */
#ifndef SAPPC_TRAIN_H
#define SAPPC_TRAIN_H

#include "../lower/lower.h"

/* what autodiff leaves for gradcomm and optimizer (Module.train) */
typedef struct TrainInfo {
	uint32_t nw;   /* trainable weights with a gradient, in # Params order */
	Node **weight; /* the Parameters */
	Node **grad;   /* their local gradient; gradcomm replaces it by the communicated one */
	Node **gather; /* the optimizer-parallel AllGather autodiff left to gradcomm, or NULL */
	Node **keep;   /* backward nodes nothing reads (a pipeline stage's gradient Sends) */
	uint32_t nkeep;
	Value ret;     /* what the forward graph returned (the loss, or a stage's Send) */
	Abs ret_abs;
	Node **accu;   /* with micro-batches: each weight's accu_grads.<w> buffer, else NULL */
	Value monad;   /* the UMonad state the update starts from (the forward Loads', or the last accumulation's) */
	Abs monad_abs;
} TrainInfo;

/* whether the training passes run: phase resolves to train, not --forward-only */
int train_wanted(const Module *m, const Options *o);
/* the trainable weights: Parameters with a default value (every weight
 * counts: the dump does not say requires_grad, ckpt.c) */
int train_is_trainable(const Node *p);

typedef struct TrainEmit {
	LowerCtx lc;
	Module *m;
	Graph *g;
	Vec(Node *) out;   /* emitted nodes, in order */
	Node tmpl;         /* fullname template: scope = "<dir>/x" */
	const NodeExt *ext; /* shared by every node emitted now (primal attributes), or NULL */
	struct TrainDir *dirs; /* (scope, prim, grad) -> the interned "Gradients/<dir>/Grad_<Prim>/x" */
} TrainEmit;

int train_emit_init(TrainEmit *e, Module *m, const Options *o); /* 0, -1 reported */
/* a trainable Parameter appended to g's: Ref[Tensor[dtype]] of shape sh, %para<local>_<name> */
Node *train_new_param(Module *m, Graph *g, int32_t local, const char *name, Sym dtype, const Shape *sh,
                      NodeLayout *lay);
void train_emit_free(TrainEmit *e);
/* the emitted nodes go before the entry graph's Return */
void train_splice(TrainEmit *e);
/* the directory new nodes are named under: "<dir>/x" */
void train_emit_dir(TrainEmit *e, Sym dir_x);
/* the template for the bprop of forward node f: Gradients/<f's dir>/Grad_<f's prim>,
 * or Gradients/<f's dir> for dout accumulation (grad = 0); op: the
 * operator it makes first (OP_UNKNOWN: not known) */
void train_emit_bprop_of(TrainEmit *e, const Node *f, Sym prim, int grad, int op);
/* a new node of op with nargs operands (set with train_arg) and output abstract out */
Node *train_op(TrainEmit *e, int op, uint32_t nargs, const Abs *out);
void train_arg(TrainEmit *e, Node *n, uint32_t k, Value v, const Abs *a);
void train_arg_node(TrainEmit *e, Node *n, uint32_t k, Node *src);

/* abstracts and constants */
Abs train_abs_value(const Abs *a);     /* a tensor's value: Ref stripped */
Abs train_abs_bool(void);
Abs train_abs_word(const char *t);     /* <Int64, NoShape>-like scalar of type t */
Abs train_abs_monad(void);
Abs train_abs_tensor(Module *m, Sym dtype, const int64_t *d, int rank, int has_value);
Value train_float_tensor(Module *m, Sym dtype, double v); /* Tensor(shape=[], dtype=T, value=v) */
Value train_ints_tensor(Module *m, Sym dtype, int64_t v);  /* Tensor(shape=[1], dtype=T, value=[v]) */
/* Tensor(shape=[n], dtype=T, value=[v0, ...]) */
Value train_int_list_tensor(Module *m, Sym dtype, const int64_t *v, uint32_t n);

#endif
