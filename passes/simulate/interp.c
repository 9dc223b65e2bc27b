/* interp.c - forward semantics of one operator on one rank.
 *
 * sim_eval_node() reads the node's operands (earlier nodes' values, or the
 * literal operands the dump prints inline: I64(0), (I64(2), I64(3)),
 * Tensor(shape=[], dtype=Float32, value=0.5), Bool(1)), dispatches on the
 * operator family of ir/ops.def and stores the result.  Attribute-like
 * inputs (axes, shapes, flags) are looked up the way the dumps spell them,
 * newest first: a literal operand at the documented position, then the
 * primitive attribute (transpose_b / transpose_x2, axis, keep_dims...).
 *
 * Every computed tensor is checked against the node's type line: a rank's
 * lowered graph whose declared local shape is not what its inputs produce
 * is reported here, before any value is compared.
 *
 * Element-wise, shape and structural operators live here; the operators
 * with real arithmetic structure (MatMul, Conv2D, pools, reductions,
 * softmax, norms, losses) are in kernels.c.  Communication operators are
 * run by the executor (exec.c).
 */
#include <math.h>
#include <string.h>

#include "simint.h"

#define FAILV(...) (sim_fail(c, __VA_ARGS__), (SimValue *)NULL)

int sim_fail(Ctx *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return sim_errorf(c->r, c->s, c->n, "%s", msg);
}

const Value *sim_attr(const Node *n, const char *key)
{
	const Value *v = ir_attr_get(&n->pattrs, key);
	return v ? v : ir_attr_get(&ir_node_ext(n)->cattrs, key);
}

const char *sim_attr_str(const Node *n, const char *key)
{
	const Value *v = sim_attr(n, key);
	if (v && (v->kind == V_STR || v->kind == V_WORD))
		return sym_str(v->text);
	return NULL;
}

int sim_out_dtype(const Node *n, int dflt)
{
	if (n->has_type_line && n->out.is_tensor)
		return sim_dtype_of(n->out.dtype);
	return dflt;
}

int sim_is_comm(const Node *n)
{
	return n->kind == NK_CNODE && n->callee_kind == CK_PRIM &&
	       (op_table[n->op].family == FAM_COMM || op_table[n->op].family == FAM_P2P);
}

/* ------------------------------------------------------------ operands */
static SimValue *scalar(Ctx *c, int dtype, double x)
{
	SimTensor *t = sim_tensor_new(c->r, dtype, 0, NULL);
	if (!t)
		return NULL;
	t->data[0] = (float)x;
	return sim_val_tensor(c->r, t);
}

static const Value *call_arg(const Value *v, const char *key)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (v->u.elems[i].keyi && strcmp(sym_str(value_key(&v->u.elems[i])), key) == 0)
			return &v->u.elems[i];
	return NULL;
}

static int literal_number(const Value *v, double *x)
{
	int64_t i;
	if (v->kind == V_FLOAT) {
		*x = v->u.f;
		return 1;
	}
	if (value_get_int(v, &i)) {
		*x = (double)i;
		return 1;
	}
	return 0;
}

/* Tensor(shape=[2, 3], dtype=Float32, value=0.5): the value fills the tensor
 * (a scalar) or lists every element */
static SimValue *literal_tensor(Ctx *c, const Value *v)
{
	const Value *sh = call_arg(v, "shape"), *dt = call_arg(v, "dtype"), *val = call_arg(v, "value");
	int64_t shape[MAX_RANK];
	int nd = sh ? value_int_list(sh, shape, MAX_RANK) : 0;
	if (nd < 0)
		return FAILV("constant Tensor(...) operand has an unreadable shape");
	int dtype = dt && (dt->kind == V_WORD || dt->kind == V_STR) ? sim_dtype_of(dt->text) : SD_F32;
	SimTensor *t = sim_tensor_new(c->r, dtype, nd, shape);
	if (!t)
		return NULL;
	double x;
	if (val && literal_number(val, &x)) {
		for (int64_t i = 0; i < t->numel; i++)
			t->data[i] = (float)x;
	} else if (val && (val->kind == V_LIST || val->kind == V_TUPLE) && (int64_t)val->n == t->numel) {
		for (uint32_t i = 0; i < val->n; i++) {
			if (!literal_number(&val->u.elems[i], &x))
				return FAILV("constant Tensor(...) operand has a non-numeric element");
			t->data[i] = (float)x;
		}
	} else {
		return FAILV("constant Tensor(...) operand has no value in the text");
	}
	return sim_val_tensor(c->r, t);
}

static SimValue *literal(Ctx *c, const Value *v)
{
	double x;
	switch (v->kind) {
	case V_INT:
		return scalar(c, v->numtype >= NT_F16 ? SD_F32 : SD_INT, (double)v->u.i);
	case V_BOOL:
		return scalar(c, SD_BOOL, (double)v->u.i);
	case V_FLOAT:
		return scalar(c, SD_F32, v->u.f);
	case V_WORD:
		if (literal_number(v, &x))
			return scalar(c, SD_BOOL, x);
		return sim_val_none(c->r);
	case V_TUPLE:
	case V_LIST: {
		SimValue *t = sim_val_tuple(c->r, v->n);
		for (uint32_t i = 0; i < v->n; i++)
			if (!(t->elems[i] = literal(c, &v->u.elems[i])))
				return NULL;
		return t;
	}
	case V_CALL:
		if (strcmp(sym_str(value_call_name(v)), "Tensor") == 0)
			return literal_tensor(c, v);
		return sim_val_none(c->r);
	case V_NODE:
	case V_EXTERN:
	case V_GRAPH:
		return FAILV("internal: literal() on a reference");
	default: /* UMonad[U], IOMonad, strings, None */
		return sim_val_none(c->r);
	}
}

SimValue *sim_arg(Ctx *c, uint32_t i)
{
	Node *n = c->n;
	if (i >= n->nargs)
		return FAILV("operand %u is missing (the node has %u)", i, n->nargs);
	const Value *v = &n->args[i];
	if (v->kind == V_EXTERN)
		return FAILV("operand %u (%s) is outside the text; a fragment cannot be simulated", i,
		             sym_str(v->text));
	if (v->kind == V_GRAPH)
		return FAILV("operand %u is a graph; higher-order operands are not simulated", i);
	if (v->kind != V_NODE)
		return literal(c, v);
	Node *p = v->u.node;
	if (p->id >= c->s->nvals || !c->s->vals[p->id]) {
		if (p->g != c->s->g)
			return FAILV("operand %u refers to a node of graph @%s; only the entry graph is simulated", i,
			             sym_str(p->g->name));
		return FAILV("operand %u (%%%d) has no value yet", i, p->local);
	}
	return c->s->vals[p->id];
}

SimTensor *sim_arg_tensor(Ctx *c, uint32_t i)
{
	SimValue *v = sim_arg(c, i);
	if (!v)
		return NULL;
	if (v->kind != SV_TENSOR) {
		sim_fail(c, "operand %u is %s, not a tensor", i, v->kind == SV_TUPLE ? "a tuple" : "empty");
		return NULL;
	}
	return v->t;
}

/* an operand given as a literal (not a reference), or NULL */
static const Value *lit_operand(const Node *n, uint32_t i)
{
	if (i >= n->nargs)
		return NULL;
	const Value *v = &n->args[i];
	if (v->kind == V_NODE || v->kind == V_EXTERN || v->kind == V_RAW)
		return NULL;
	if (v->kind == V_WORD && !value_is_word(v, "true") && !value_is_word(v, "false"))
		return NULL; /* None: fall back to the attribute */
	return v;
}

static int ints_of_value(const SimValue *v, int64_t *out, int max)
{
	if (v->kind == SV_TENSOR) {
		if (v->t->numel > max || v->t->ndim > 1)
			return -1;
		for (int64_t i = 0; i < v->t->numel; i++)
			out[i] = (int64_t)v->t->data[i];
		return (int)v->t->numel;
	}
	if (v->kind == SV_TUPLE) {
		if ((int)v->n > max)
			return -1;
		for (uint32_t i = 0; i < v->n; i++) {
			if (v->elems[i]->kind != SV_TENSOR || v->elems[i]->t->numel != 1)
				return -1;
			out[i] = (int64_t)v->elems[i]->t->data[0];
		}
		return (int)v->n;
	}
	return -2;
}

/* Operand i read as a list of integers (a literal int or tuple, or a
 * computed tuple of scalars / 1-D tensor), else the attribute `key`.
 * Returns the count (0 for an empty tuple), -1 when neither is there. */
int sim_ints(Ctx *c, uint32_t i, const char *key, int64_t *out, int max)
{
	const Value *v = lit_operand(c->n, i);
	if (v) {
		int k = value_int_list(v, out, max);
		if (k >= 0)
			return k;
		if (v->kind == V_BOOL) {
			out[0] = v->u.i;
			return 1;
		}
	} else if (i < c->n->nargs && c->n->args[i].kind == V_NODE) {
		SimValue *sv = sim_arg(c, i);
		if (!sv)
			return -1;
		int k = ints_of_value(sv, out, max);
		if (k >= 0)
			return k;
	}
	if (key) {
		const Value *a = sim_attr(c->n, key);
		if (a) {
			int k = value_int_list(a, out, max);
			if (k >= 0)
				return k;
			if (value_get_int(a, out))
				return 1;
		}
	}
	return -1;
}

int sim_flag(Ctx *c, uint32_t i, const char *k1, const char *k2, int dflt)
{
	const Value *v = lit_operand(c->n, i);
	int b;
	if (v && value_truthy(v, &b))
		return b;
	const Value *a = k1 ? sim_attr(c->n, k1) : NULL;
	if (!a && k2)
		a = sim_attr(c->n, k2);
	if (a && value_truthy(a, &b))
		return b;
	return dflt;
}

double sim_float(Ctx *c, uint32_t i, const char *key, double dflt)
{
	const Value *v = lit_operand(c->n, i);
	double x;
	if (v && literal_number(v, &x))
		return x;
	if (v && v->kind == V_CALL) {
		const Value *val = call_arg(v, "value");
		if (val && literal_number(val, &x))
			return x;
	}
	if (!v && i < c->n->nargs && c->n->args[i].kind == V_NODE) {
		SimValue *sv = sim_arg(c, i);
		if (sv && sv->kind == SV_TENSOR && sv->t->numel == 1)
			return sv->t->data[0];
	}
	const Value *a = key ? sim_attr(c->n, key) : NULL;
	if (a && literal_number(a, &x))
		return x;
	return dflt;
}

int sim_axis(Ctx *c, int64_t ax, int ndim, int *out)
{
	int64_t a = ax < 0 ? ax + ndim : ax;
	*out = 0;
	if (a < 0 || a >= (ndim ? ndim : 1))
		return sim_fail(c, "axis %lld is out of range for a rank-%d tensor", (long long)ax, ndim);
	*out = (int)a;
	return 0;
}

/* --------------------------------------------------- declared shapes */
static int check_shape(Ctx *c, const SimTensor *t, const Shape *s, const char *what)
{
	if (s->kind != SK_DIMS)
		return 0;
	if (sim_same_shape(t, s->rank, s->dims))
		return 0;
	char got[160], want[160];
	sim_fmt_shape(got, sizeof got, t->ndim, t->shape);
	sim_fmt_shape(want, sizeof want, s->rank, s->dims);
	return sim_fail(c, "the inputs give %s shape %s but the type line declares %s", what, got, want);
}

int sim_check_declared(Ctx *c, const SimValue *v)
{
	const Node *n = c->n;
	if (!n->has_type_line)
		return 0;
	if (v->kind == SV_TENSOR && n->out.is_tensor)
		return check_shape(c, v->t, &n->out.shape, "output");
	if (v->kind == SV_TUPLE && n->out.shape.kind == SK_TUPLE && n->out.shape.rank == v->n) {
		for (uint32_t i = 0; i < v->n; i++) {
			char what[32];
			snprintf(what, sizeof what, "output %u", i);
			if (v->elems[i]->kind == SV_TENSOR &&
			    check_shape(c, v->elems[i]->t, &n->out.shape.sub[i], what))
				return -1;
		}
	}
	return 0;
}

/* --------------------------------------------------------- element-wise */
static void round_to(SimTensor *t)
{
	if (t->dtype == SD_INT)
		for (int64_t i = 0; i < t->numel; i++)
			t->data[i] = truncf(t->data[i]);
	else if (t->dtype == SD_BOOL)
		for (int64_t i = 0; i < t->numel; i++)
			t->data[i] = t->data[i] != 0.0f ? 1.0f : 0.0f;
}

static double unary(int op, double x)
{
	switch (op) {
	case OP_ReLU:
		return x > 0 ? x : 0;
	case OP_ReLU6:
		return x < 0 ? 0 : x > 6 ? 6 : x;
	case OP_SiLU:
		return x / (1 + exp(-x));
	case OP_Sigmoid:
		return 1 / (1 + exp(-x));
	case OP_GeLU: /* the tanh form MindSpore's GeLU kernel computes */
		return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
	case OP_FastGeLU:
		return x / (1 + exp(-1.702 * fabs(x))) * exp(0.851 * (x - fabs(x)));
	case OP_Tanh:
		return tanh(x);
	case OP_Softplus:
		return x > 20 ? x : log1p(exp(x));
	case OP_Neg:
		return -x;
	case OP_Abs:
		return fabs(x);
	case OP_Exp:
		return exp(x);
	case OP_Log:
		return log(x);
	case OP_Sqrt:
		return sqrt(x);
	case OP_Rsqrt:
		return 1 / sqrt(x);
	case OP_Square:
		return x * x;
	case OP_Reciprocal:
		return 1 / x;
	case OP_Erf:
		return erf(x);
	case OP_Sin:
		return sin(x);
	case OP_Cos:
		return cos(x);
	case OP_ZerosLike:
		return 0;
	case OP_OnesLike:
		return 1;
	default: /* Dropout, and anything identity-like */
		return x;
	}
}

static double binary(int op, double x, double y)
{
	switch (op) {
	case OP_Add:
		return x + y;
	case OP_Sub:
		return x - y;
	case OP_Mul:
		return x * y;
	case OP_Div:
	case OP_RealDiv:
		return x / y;
	case OP_Maximum:
		return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
	case OP_Minimum:
		return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
	case OP_Pow:
		return pow(x, y);
	case OP_Equal:
		return x == y;
	case OP_NotEqual:
		return x != y;
	case OP_Greater:
		return x > y;
	case OP_Less:
		return x < y;
	case OP_LogicalAnd:
		return x != 0 && y != 0;
	case OP_LogicalOr:
		return x != 0 || y != 0;
	case OP_FloorDiv:
		return floor(x / y);
	case OP_FloorMod:
		return x - floor(x / y) * y;
	case OP_SquaredDifference:
		return (x - y) * (x - y);
	case OP_SigmoidCrossEntropyWithLogits: /* logits x, labels y */
		return (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
	default:
		return NAN;
	}
}

static int is_compare(int op)
{
	return op == OP_Equal || op == OP_NotEqual || op == OP_Greater || op == OP_Less || op == OP_LogicalAnd ||
	       op == OP_LogicalOr;
}

/* numpy broadcasting of up to 3 tensors: output shape and per-input strides */
int sim_broadcast(Ctx *c, int nin, SimTensor **in, int *ond, int64_t *oshape, int64_t st[][MAX_RANK])
{
	int nd = 0;
	for (int k = 0; k < nin; k++)
		nd = in[k]->ndim > nd ? in[k]->ndim : nd;
	for (int i = 0; i < nd; i++) {
		int64_t d = 1;
		for (int k = 0; k < nin; k++) {
			int j = i - (nd - in[k]->ndim);
			int64_t dk = j >= 0 ? in[k]->shape[j] : 1;
			if (dk == d || dk == 1)
				continue;
			if (d != 1) {
				char a[160], b[160];
				sim_fmt_shape(a, sizeof a, in[0]->ndim, in[0]->shape);
				sim_fmt_shape(b, sizeof b, in[k]->ndim, in[k]->shape);
				return sim_fail(c, "shapes %s and %s do not broadcast", a, b);
			}
			d = dk;
		}
		oshape[i] = d;
	}
	for (int k = 0; k < nin; k++) {
		int64_t s = 1;
		for (int i = nd - 1; i >= 0; i--) {
			int j = i - (nd - in[k]->ndim);
			if (j < 0) {
				st[k][i] = 0;
				continue;
			}
			st[k][i] = in[k]->shape[j] == 1 ? 0 : s;
			s *= in[k]->shape[j];
		}
	}
	*ond = nd;
	return 0;
}

static SimValue *elementwise(Ctx *c, int nin)
{
	SimTensor *in[3];
	for (int k = 0; k < nin; k++)
		if (!(in[k] = sim_arg_tensor(c, (uint32_t)k)))
			return NULL;
	int nd, op = c->n->op;
	int64_t shape[MAX_RANK], st[3][MAX_RANK];
	if (sim_broadcast(c, nin, in, &nd, shape, st) < 0)
		return NULL;
	int dflt = is_compare(op) ? SD_BOOL : in[nin - 1]->dtype == SD_F32 ? SD_F32 : in[0]->dtype;
	SimTensor *o = sim_tensor_new(c->r, sim_out_dtype(c->n, dflt), nd, shape);
	if (!o)
		return NULL;
	int64_t idx[MAX_RANK] = {0}, off[3] = {0};
	for (int64_t i = 0; i < o->numel; i++) {
		double x = in[0]->data[off[0]], y = nin > 1 ? in[1]->data[off[1]] : 0;
		if (op == OP_Select) /* Select(cond, x, y) */
			o->data[i] = x != 0 ? (float)y : in[2]->data[off[2]];
		else
			o->data[i] = (float)binary(op, x, y);
		if ((op == OP_Maximum || op == OP_Minimum) && sim_near(x, y))
			c->r->near_switch++;
		sim_bcast_next(nd, shape, idx, st, off, 0, nin);
	}
	round_to(o);
	return sim_val_tensor(c->r, o);
}

static SimValue *unary_op(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	if (!x)
		return NULL;
	int op = c->n->op;
	int dtype = op == OP_Dropout || op == OP_ZerosLike || op == OP_OnesLike ? x->dtype : SD_F32;
	SimTensor *o = sim_tensor_new(c->r, sim_out_dtype(c->n, dtype), x->ndim, x->shape);
	if (!o)
		return NULL;
	for (int64_t i = 0; i < x->numel; i++)
		o->data[i] = (float)unary(op, x->data[i]);
	if (op == OP_ReLU || op == OP_ReLU6 || op == OP_Abs)
		for (int64_t i = 0; i < x->numel; i++)
			c->r->near_switch += sim_near(x->data[i], 0) || (op == OP_ReLU6 && sim_near(x->data[i], 6));
	round_to(o);
	SimValue *v = sim_val_tensor(c->r, o);
	if (op == OP_Dropout && c->n->out.shape.kind == SK_TUPLE) { /* (output, mask): dropout is the identity */
		SimTensor *mask = sim_tensor_new(c->r, SD_F32, x->ndim, x->shape);
		if (!mask)
			return NULL;
		for (int64_t i = 0; i < mask->numel; i++)
			mask->data[i] = 1;
		SimValue *t = sim_val_tuple(c->r, 2);
		t->elems[0] = v;
		t->elems[1] = sim_val_tensor(c->r, mask);
		return t;
	}
	return v;
}

static SimValue *cast(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	if (!x)
		return NULL;
	int dt = sim_out_dtype(c->n, x->dtype);
	if (dt == x->dtype)
		return sim_val_tensor(c->r, sim_tensor_view(c->r, x, x->ndim, x->shape, 0));
	SimTensor *o = sim_tensor_new(c->r, dt, x->ndim, x->shape);
	if (!o)
		return NULL;
	memcpy(o->data, x->data, (size_t)x->numel * sizeof(float));
	round_to(o);
	return sim_val_tensor(c->r, o);
}

static SimValue *bias_add(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0), *b = x ? sim_arg_tensor(c, 1) : NULL;
	if (!b)
		return NULL;
	const char *fmt = sim_attr_str(c->n, "data_format");
	int ch = x->ndim < 2 ? 0 : fmt && strcmp(fmt, "NHWC") == 0 ? x->ndim - 1 : 1;
	if (x->ndim == 0 || b->ndim != 1 || b->shape[0] != x->shape[ch])
		return FAILV("bias of %lld elements does not match channel dimension %d of the input",
		             (long long)b->numel, ch);
	SimTensor *o = sim_tensor_new(c->r, x->dtype, x->ndim, x->shape);
	if (!o)
		return NULL;
	int64_t inner = 1;
	for (int d = ch + 1; d < x->ndim; d++)
		inner *= x->shape[d];
	for (int64_t i = 0; i < x->numel; i++)
		o->data[i] = x->data[i] + b->data[(i / inner) % b->numel];
	return sim_val_tensor(c->r, o);
}

static SimValue *add_n(Ctx *c)
{
	SimValue *a = sim_arg(c, 0);
	if (!a)
		return NULL;
	SimValue **xs = &a;
	uint32_t k = 1;
	if (a->kind == SV_TUPLE) {
		xs = a->elems;
		k = a->n;
	} else if (c->n->nargs > 1) {
		return FAILV("AddN takes one tuple operand");
	}
	if (k == 0 || xs[0]->kind != SV_TENSOR)
		return FAILV("AddN needs tensors");
	SimTensor *o = sim_tensor_new(c->r, xs[0]->t->dtype, xs[0]->t->ndim, xs[0]->t->shape);
	if (!o)
		return NULL;
	for (uint32_t j = 0; j < k; j++) {
		if (xs[j]->kind != SV_TENSOR || !sim_same_shape(xs[j]->t, o->ndim, o->shape))
			return FAILV("AddN input %u does not have the shape of input 0", j);
		for (int64_t i = 0; i < o->numel; i++)
			o->data[i] += xs[j]->t->data[i];
	}
	return sim_val_tensor(c->r, o);
}

/* ------------------------------------------------------------- shapes */
static SimValue *view_as(Ctx *c, SimTensor *x, int nd, const int64_t *shape)
{
	int64_t numel;
	if (sim_numel(nd, shape, &numel) < 0 || numel != x->numel) {
		char a[160], b[160];
		sim_fmt_shape(a, sizeof a, x->ndim, x->shape);
		sim_fmt_shape(b, sizeof b, nd, shape);
		return FAILV("cannot view %s as %s: element counts differ", a, b);
	}
	return sim_val_tensor(c->r, sim_tensor_view(c->r, x, nd, shape, 0));
}

static SimValue *reshape(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t d[MAX_RANK];
	if (!x)
		return NULL;
	int k = sim_ints(c, 1, "shape", d, MAX_RANK);
	if (k < 0)
		return FAILV("no target shape (operand 1 or attribute shape)");
	int neg = -1;
	int64_t known = 1;
	for (int i = 0; i < k; i++) {
		if (d[i] == -1 && neg < 0)
			neg = i;
		else if (d[i] < 0)
			return FAILV("target shape has dimension %lld", (long long)d[i]);
		else
			known *= d[i];
	}
	if (neg >= 0) {
		if (known == 0 || x->numel % known)
			return FAILV("cannot infer the -1 dimension of the target shape");
		d[neg] = x->numel / known;
	}
	return view_as(c, x, k, d);
}

static SimValue *flatten(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	if (!x)
		return NULL;
	if (x->ndim == 0)
		return FAILV("Flatten needs an input of rank >= 1");
	int64_t d[2] = {x->shape[0], x->shape[0] ? x->numel / x->shape[0] : 0};
	return view_as(c, x, 2, d);
}

static SimValue *expand_dims(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t ax, d[MAX_RANK];
	if (!x)
		return NULL;
	if (sim_ints(c, 1, "axis", &ax, 1) != 1)
		return FAILV("no axis");
	if (ax < 0)
		ax += x->ndim + 1;
	if (ax < 0 || ax > x->ndim || x->ndim >= MAX_RANK)
		return FAILV("axis out of range");
	for (int i = 0, j = 0; i <= x->ndim; i++)
		d[i] = i == ax ? 1 : x->shape[j++];
	return view_as(c, x, x->ndim + 1, d);
}

static SimValue *squeeze(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t ax[MAX_RANK], d[MAX_RANK];
	if (!x)
		return NULL;
	int k = sim_ints(c, 1, "axis", ax, MAX_RANK);
	unsigned drop = 0;
	for (int i = 0; i < k; i++) {
		int a;
		if (sim_axis(c, ax[i], x->ndim, &a) < 0)
			return NULL;
		if (x->shape[a] != 1)
			return FAILV("cannot squeeze dimension %d of size %lld", a, (long long)x->shape[a]);
		drop |= 1u << a;
	}
	int nd = 0;
	for (int i = 0; i < x->ndim; i++)
		if (!(k > 0 ? drop >> i & 1 : x->shape[i] == 1))
			d[nd++] = x->shape[i];
	return view_as(c, x, nd, d);
}

static SimValue *transpose(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t p[MAX_RANK], d[MAX_RANK], st[MAX_RANK], ost[MAX_RANK];
	if (!x)
		return NULL;
	int k = sim_ints(c, 1, "perm", p, MAX_RANK);
	if (k != x->ndim)
		return FAILV("permutation has %d entries for a rank-%d input", k, x->ndim);
	unsigned seen = 0;
	for (int i = 0; i < k; i++) {
		int a;
		if (sim_axis(c, p[i], k, &a) < 0)
			return NULL;
		if (seen >> a & 1)
			return FAILV("permutation repeats axis %d", a);
		seen |= 1u << a;
		p[i] = a;
		d[i] = x->shape[a];
	}
	SimTensor *o = sim_tensor_new(c->r, x->dtype, k, d);
	if (!o)
		return NULL;
	sim_strides(k, x->shape, st);
	for (int j = 0; j < k; j++)
		ost[j] = st[p[j]];
	sim_copy_strided(x->data, 0, k, d, ost, o->data);
	return sim_val_tensor(c->r, o);
}

static SimValue *tile(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t m[MAX_RANK], d[MAX_RANK], st[MAX_RANK], xs[MAX_RANK];
	if (!x)
		return NULL;
	int k = sim_ints(c, 1, "multiples", m, MAX_RANK);
	if (k < x->ndim)
		return FAILV("multiples has %d entries for a rank-%d input", k, x->ndim);
	int lead = k - x->ndim;
	for (int i = 0; i < k; i++) {
		xs[i] = i < lead ? 1 : x->shape[i - lead];
		d[i] = xs[i] * m[i];
	}
	SimTensor *o = sim_tensor_new(c->r, x->dtype, k, d);
	if (!o)
		return NULL;
	sim_strides(k, xs, st);
	int64_t idx[MAX_RANK] = {0};
	for (int64_t i = 0; i < o->numel; i++) {
		int64_t off = 0;
		for (int j = 0; j < k; j++)
			off += (idx[j] % xs[j]) * st[j];
		o->data[i] = x->data[off];
		for (int j = k - 1; j >= 0; j--) {
			if (++idx[j] < d[j])
				break;
			idx[j] = 0;
		}
	}
	return sim_val_tensor(c->r, o);
}

/* Gather(params, indices, axis[, batch_dims]): out = params.shape[:axis] +
 * indices.shape[batch_dims:] + params.shape[axis+1:], where the first
 * batch_dims dimensions are shared: batch b looks up its rows in its own
 * block of params.  An index outside [0, rows) gives zeros, as on
 * Ascend (the row-split embedding's replacement graph relies on masking
 * instead of on this, but a wrong offset must show up as a wrong value, not
 * as a crash). */
static SimValue *gather(Ctx *c)
{
	SimTensor *p = sim_arg_tensor(c, 0), *ix = p ? sim_arg_tensor(c, 1) : NULL;
	int64_t axv = 0, d[MAX_RANK], bd;
	int ax, nd = 0;
	if (!ix)
		return NULL;
	if (sim_ints(c, 2, "axis", &axv, 1) < 0)
		axv = 0;
	if (sim_axis(c, axv, p->ndim, &ax) < 0)
		return NULL;
	if (!ir_gather_batch_dims(c->n, ix->ndim, &bd) || bd > ax)
		return FAILV("batch_dims out of range");
	if (p->ndim - 1 + ix->ndim - bd > MAX_RANK)
		return FAILV("output rank too large");
	int64_t batch = 1, outer = 1, inner = 1, rows = p->shape[ax], nidx = 1;
	for (int i = 0; i < bd; i++) {
		if (p->shape[i] != ix->shape[i])
			return FAILV("batch dimension %d differs", i);
		batch *= d[nd++] = p->shape[i];
	}
	for (int i = (int)bd; i < ax; i++)
		outer *= d[nd++] = p->shape[i];
	for (int i = (int)bd; i < ix->ndim; i++)
		nidx *= d[nd++] = ix->shape[i];
	for (int i = ax + 1; i < p->ndim; i++)
		inner *= d[nd++] = p->shape[i];
	SimTensor *o = sim_tensor_new(c->r, p->dtype, nd, d);
	if (!o)
		return NULL;
	for (int64_t b = 0; b < batch; b++)
		for (int64_t a = 0; a < outer; a++)
			for (int64_t j = 0; j < nidx; j++) {
				int64_t row = (int64_t)ix->data[b * nidx + j];
				float *dst = o->data + ((b * outer + a) * nidx + j) * inner;
				if (row < 0 || row >= rows)
					continue;
				memcpy(dst, p->data + ((b * outer + a) * rows + row) * inner,
				       (size_t)inner * sizeof(float));
			}
	return sim_val_tensor(c->r, o);
}

static SimValue *one_hot(Ctx *c)
{
	SimTensor *ix = sim_arg_tensor(c, 0);
	int64_t depth, axv = -1, d[MAX_RANK];
	int ax;
	if (!ix)
		return NULL;
	if (sim_ints(c, 1, "depth", &depth, 1) != 1 || depth < 0)
		return FAILV("no depth");
	double on = sim_float(c, 2, "on_value", 1), off = sim_float(c, 3, "off_value", 0);
	const Value *av = sim_attr(c->n, "axis");
	if (av)
		value_get_int(av, &axv);
	if (ix->ndim >= MAX_RANK || sim_axis(c, axv, ix->ndim + 1, &ax) < 0)
		return NULL;
	for (int i = 0, j = 0; i <= ix->ndim; i++)
		d[i] = i == ax ? depth : ix->shape[j++];
	SimTensor *o = sim_tensor_new(c->r, sim_out_dtype(c->n, SD_F32), ix->ndim + 1, d);
	if (!o)
		return NULL;
	int64_t inner = 1;
	for (int i = ax; i < ix->ndim; i++)
		inner *= ix->shape[i];
	for (int64_t i = 0; i < o->numel; i++) {
		int64_t a = i / (depth * inner), k = i / inner % depth, b = i % inner;
		o->data[i] = (float)((int64_t)ix->data[a * inner + b] == k ? on : off);
	}
	return sim_val_tensor(c->r, o);
}

/* The window StridedSlice takes from a tensor of shape[nd]: begin, end and
 * strides are the operands from `at` on, the five masks the operands from
 * `mask_at` on (or the attributes begin_mask ... shrink_axis_mask).
 * begin/end masks and shrink_axis are honoured, ellipsis and new_axis masks
 * are not simulated; each dimension is normalised the way numpy normalises
 * a slice.  Fills the first element, step and count of every dimension and
 * the output shape (shrunk dimensions dropped).  StridedSliceGrad reads the
 * same window to put its gradient back. */
int sim_slice_window(Ctx *c, int nd, const int64_t *shape, uint32_t at, uint32_t mask_at, int64_t *start, int64_t *step,
                     int64_t *cnt, int *ond, int64_t *oshape)
{
	int64_t bg[MAX_RANK], en[MAX_RANK], sd[MAX_RANK], mask[5] = {0};
	static const char *const mnames[5] = {"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
	                                      "shrink_axis_mask"};
	int kb = sim_ints(c, at, "begin", bg, MAX_RANK), ke = sim_ints(c, at + 1, "end", en, MAX_RANK);
	int ks = sim_ints(c, at + 2, "strides", sd, MAX_RANK);
	if (kb < 0 || kb != ke || kb != ks || kb > nd)
		return sim_fail(c, "begin, end and strides must have the same length, at most the input rank");
	for (int i = 0; i < 5; i++) {
		int64_t v;
		if (sim_ints(c, mask_at + (uint32_t)i, mnames[i], &v, 1) == 1)
			mask[i] = v;
	}
	if (mask[2] || mask[3])
		return sim_fail(c, "ellipsis_mask and new_axis_mask are not simulated");
	*ond = 0;
	for (int i = 0; i < nd; i++) {
		int64_t dim = shape[i], b = 0, e = dim, s = 1;
		if (i < kb) {
			s = sd[i];
			if (s == 0)
				return sim_fail(c, "stride 0 in dimension %d", i);
			b = bg[i];
			e = en[i];
			if (mask[4] >> i & 1) { /* shrink: take element b, drop the dim */
				if (b < 0)
					b += dim;
				if (b < 0 || b >= dim)
					return sim_fail(c, "shrink index %lld out of range in dimension %d",
					                (long long)bg[i], i);
				start[i] = b;
				step[i] = 1;
				cnt[i] = 1;
				continue;
			}
			if (s > 0) {
				b = mask[0] >> i & 1 ? 0 : b < 0 ? b + dim : b;
				e = mask[1] >> i & 1 ? dim : e < 0 ? e + dim : e;
				b = b < 0 ? 0 : b > dim ? dim : b;
				e = e < 0 ? 0 : e > dim ? dim : e;
			} else {
				b = mask[0] >> i & 1 ? dim - 1 : b < 0 ? b + dim : b;
				e = mask[1] >> i & 1 ? -1 : e < 0 ? e + dim : e;
				b = b < -1 ? -1 : b > dim - 1 ? dim - 1 : b;
				e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
			}
		}
		start[i] = b;
		step[i] = s;
		cnt[i] = s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e - s - 1) / -s : 0);
		oshape[(*ond)++] = cnt[i];
	}
	return 0;
}

static SimValue *strided_slice(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t start[MAX_RANK], step[MAX_RANK], cnt[MAX_RANK], oshape[MAX_RANK], st[MAX_RANK];
	int ond;
	if (!x || sim_slice_window(c, x->ndim, x->shape, 1, 4, start, step, cnt, &ond, oshape) < 0)
		return NULL;
	SimTensor *o = sim_tensor_new(c->r, x->dtype, ond, oshape);
	if (!o)
		return NULL;
	int64_t base = 0;
	sim_strides(x->ndim, x->shape, st);
	for (int d = 0; d < x->ndim; d++) {
		base += start[d] * st[d];
		st[d] *= step[d];
	}
	sim_copy_strided(x->data, base, x->ndim, cnt, st, o->data);
	return sim_val_tensor(c->r, o);
}

/* the tensors to concatenate: a tuple operand (MakeTuple), or the leading
 * tensor operands */
static SimValue *concat(Ctx *c)
{
	SimValue *a = sim_arg(c, 0);
	if (!a)
		return NULL;
	SimValue **xs;
	uint32_t k;
	int64_t axv = 0;
	if (a->kind == SV_TUPLE) {
		xs = a->elems;
		k = a->n;
		if (sim_ints(c, 1, "axis", &axv, 1) < 0)
			axv = 0;
	} else {
		SimValue *t = sim_val_tuple(c->r, c->n->nargs);
		k = 0;
		for (uint32_t i = 0; i < c->n->nargs && c->n->args[i].kind == V_NODE; i++) {
			SimValue *v = sim_arg(c, i);
			if (!v || v->kind != SV_TENSOR)
				break;
			t->elems[k++] = v;
		}
		xs = t->elems;
		const Value *av = sim_attr(c->n, "axis");
		if (av)
			value_get_int(av, &axv);
		else if (k < c->n->nargs)
			sim_ints(c, k, NULL, &axv, 1);
	}
	if (k == 0 || xs[0]->kind != SV_TENSOR)
		return FAILV("nothing to concatenate");
	SimTensor *x0 = xs[0]->t;
	int ax;
	if (sim_axis(c, axv, x0->ndim, &ax) < 0)
		return NULL;
	int64_t d[MAX_RANK];
	for (int i = 0; i < x0->ndim; i++)
		d[i] = x0->shape[i];
	d[ax] = 0;
	for (uint32_t j = 0; j < k; j++) {
		SimTensor *t = xs[j]->kind == SV_TENSOR ? xs[j]->t : NULL;
		if (!t || t->ndim != x0->ndim)
			return FAILV("input %u does not have the rank of input 0", j);
		for (int i = 0; i < x0->ndim; i++)
			if (i != ax && t->shape[i] != x0->shape[i])
				return FAILV("input %u differs from input 0 in dimension %d", j, i);
		d[ax] += t->shape[ax];
	}
	SimTensor *o = sim_tensor_new(c->r, x0->dtype, x0->ndim, d);
	if (!o)
		return NULL;
	int64_t outer = 1, inner = 1;
	for (int i = 0; i < ax; i++)
		outer *= d[i];
	for (int i = ax + 1; i < x0->ndim; i++)
		inner *= d[i];
	int64_t pos = 0;
	for (uint32_t j = 0; j < k; j++) {
		SimTensor *t = xs[j]->t;
		int64_t w = t->shape[ax] * inner;
		for (int64_t q = 0; q < outer; q++)
			memcpy(o->data + q * d[ax] * inner + pos, t->data + q * w, (size_t)w * sizeof(float));
		pos += w;
	}
	return sim_val_tensor(c->r, o);
}

static SimValue *split(Ctx *c)
{
	SimTensor *x = sim_arg_tensor(c, 0);
	int64_t axv = 0, num = 1;
	int ax;
	if (!x)
		return NULL;
	if (sim_ints(c, 1, "axis", &axv, 1) < 0)
		axv = 0;
	if (sim_ints(c, 2, "output_num", &num, 1) < 0)
		num = 1;
	if (sim_axis(c, axv, x->ndim, &ax) < 0)
		return NULL;
	if (num <= 0 || x->shape[ax] % num)
		return FAILV("dimension %d (%lld) does not split into %lld parts", ax, (long long)x->shape[ax],
		             (long long)num);
	SimValue *t = sim_val_tuple(c->r, (uint32_t)num);
	int64_t off[MAX_RANK] = {0}, d[MAX_RANK];
	for (int i = 0; i < x->ndim; i++)
		d[i] = x->shape[i];
	d[ax] /= num;
	for (int64_t j = 0; j < num; j++) {
		off[ax] = j * d[ax];
		if (!(t->elems[j] = sim_val_tensor(c->r, sim_extract(c->r, x, off, d))))
			return NULL;
	}
	return t;
}

/* ---------------------------------------------------------- structural */
static SimValue *make_tuple(Ctx *c, uint32_t from)
{
	SimValue *t = sim_val_tuple(c->r, c->n->nargs - from);
	for (uint32_t i = from; i < c->n->nargs; i++)
		if (!(t->elems[i - from] = sim_arg(c, i)))
			return NULL;
	return t;
}

static SimValue *tuple_get_item(Ctx *c)
{
	SimValue *t = sim_arg(c, 0);
	int64_t i;
	if (!t)
		return NULL;
	const Value *a = &c->n->args[0];
	if (t->kind != SV_TUPLE && a->kind == V_NODE && c->s->aux && c->s->aux[a->u.node->id])
		t = c->s->aux[a->u.node->id]; /* an output its type line leaves out */
	if (sim_ints(c, 1, NULL, &i, 1) != 1)
		return FAILV("no index");
	if (t->kind != SV_TUPLE || i < 0 || i >= (int64_t)t->n)
		return FAILV("index %lld out of range of a %s", (long long)i,
		             t->kind == SV_TUPLE ? "tuple" : "non-tuple operand");
	return t->elems[i];
}

static SimValue *virtual_dataset(Ctx *c)
{
	if (c->n->nargs == 1 && c->n->out.shape.kind != SK_TUPLE)
		return sim_arg(c, 0);
	return make_tuple(c, 0);
}

/* ------------------------------------------------- in-place writes */
int sim_write_ref(Ctx *c, uint32_t i, SimTensor *t)
{
	RankState *s = c->s;
	const Value *v = i < c->n->nargs ? &c->n->args[i] : NULL;
	Node *p = v && v->kind == V_NODE ? v->u.node : NULL;
	if (!p || p->kind != NK_PARAM)
		return sim_fail(c, "operand %u is written in place but is not a Parameter", i);
	if (!s->last)
		s->last = xcalloc(s->nvals ? s->nvals : 1, sizeof *s->last);
	struct RefLog e = {s->last[p->id], 0, s->vals[p->id]};
	if (!e.prev) { /* first write: keep the initial value as state 0 */
		vec_push(&s->log, e);
		e.prev = s->log.n;
	}
	e.time = ++s->clock;
	e.v = sim_val_tensor(c->r, t);
	vec_push(&s->log, e);
	s->last[p->id] = s->log.n;
	s->vals[p->id] = e.v;
	return 0;
}

/* UpdateState: the state after the writes so far */
static SimValue *update_state(Ctx *c)
{
	SimValue *v = sim_val_none(c->r);
	v->n = c->s->clock;
	return v;
}

/* Load(p, state): p as of the state (U: the initial value); a parameter
 * never written, or anything else, is its current value */
static SimValue *load(Ctx *c)
{
	RankState *s = c->s;
	const Value *a = &c->n->args[0];
	Node *p = a->kind == V_NODE ? a->u.node : NULL;
	if (!p || p->kind != NK_PARAM || !s->last || !s->last[p->id] || c->n->nargs < 2)
		return sim_arg(c, 0);
	uint32_t when = 0;
	if (c->n->args[1].kind == V_NODE) {
		SimValue *m = sim_arg(c, 1);
		if (!m)
			return NULL;
		if (m->kind != SV_NONE)
			return sim_arg(c, 0);
		when = m->n;
	}
	for (uint32_t k = s->last[p->id]; k; k = s->log.a[k - 1].prev)
		if (s->log.a[k - 1].time <= when)
			return s->log.a[k - 1].v;
	return sim_arg(c, 0);
}

/* the x 1/n of --gradients-mean: a backward Mul of a gradient's
 * communication (grad_mirror AllReduce, optimizer-shard ReduceScatter) */
static int is_grad_mean(const Node *n)
{
	if (n->op != OP_Mul || n->nargs != 2 || n->args[0].kind != V_NODE || ir_node_phase(n) != IR_PHASE_BWD)
		return 0;
	const Node *p = n->args[0].u.node;
	const char *inst = p->instance ? sym_str(p->instance) : "";
	return (p->op == OP_AllReduce || p->op == OP_ReduceScatter) &&
	       (strncmp(inst, "grad_mirror", 11) == 0 || strncmp(inst, "grad_parallel_optimizer", 23) == 0);
}

void sim_bcast_next(int nd, const int64_t *shape, int64_t *idx, int64_t st[][MAX_RANK], int64_t *off, int k0, int k1)
{
	for (int d = nd - 1; d >= 0; d--) {
		for (int k = k0; k < k1; k++)
			off[k] += st[k][d];
		if (++idx[d] < shape[d])
			return;
		for (int k = k0; k < k1; k++)
			off[k] -= st[k][d] * shape[d];
		idx[d] = 0;
	}
}

double sim_rope_partner(int64_t mode, int64_t i, int64_t D, int64_t e, int64_t *p)
{
	if (mode == 0) {
		*p = i < D / 2 ? e + D / 2 : e - D / 2;
		return i < D / 2 ? -1 : 1;
	}
	*p = i % 2 == 0 ? e + 1 : e - 1;
	return i % 2 == 0 ? -1 : 1;
}

/* the micro-batch a node belongs to (its primal attribute micro), -1 none */
int sim_micro_of(const Node *n)
{
	int64_t v;
	const Value *a = ir_attr_get(&ir_node_ext(n)->primal, "micro");
	return a && value_get_int(a, &v) ? (int)v : -1;
}

/* a duplicate of the recompute pass whose output is its first operand's shape */
static int is_same_shape_duplicate(const Node *n)
{
	const NodeExt *x = ir_node_ext(n);
	return x->cattrs.n && ir_attr_get(&x->cattrs, "duplicated") && n->nin_types &&
	       shape_equal(&n->in_types[0].shape, &n->out.shape);
}

static SimValue *dispatch(Ctx *c)
{
	Node *n = c->n;
	if ((c->r->o.faults & SIM_FAULT_DROP_GRAD_MEAN) && is_grad_mean(n))
		return sim_arg(c, 0);
	if ((c->r->o.faults & SIM_FAULT_RECOMPUTE) && is_same_shape_duplicate(n))
		return sim_arg(c, 0);
	SimKernel named = sim_named_kernel(n); /* training-step operators, by name (backward.c) */
	if (named)
		return named(c);
	switch (n->op) { /* operators whose family does not say enough */
	case OP_SigmoidCrossEntropyWithLogits:
		return elementwise(c, 2);
	case OP_Select:
		return elementwise(c, 3);
	case OP_AddN:
		return add_n(c);
	case OP_Tile:
		return tile(c);
	case OP_UpdateState:
		return update_state(c);
	case OP_MakeTuple:
		return make_tuple(c, 0);
	case OP_TupleGetItem:
		return tuple_get_item(c);
	case OP_Load:
		return load(c);
	case OP_Depend:
	case OP_StopGradient:
		return sim_arg(c, 0);
	default:
		break;
	}
	switch (op_table[n->op].family) {
	case FAM_MATMUL:
	case FAM_BATCHMATMUL:
		return k_matmul(c);
	case FAM_CONV:
		return k_conv2d(c);
	case FAM_POOL:
		return k_pool(c);
	case FAM_BATCHNORM:
		return k_batchnorm(c);
	case FAM_LAYERNORM:
		return k_layernorm(c);
	case FAM_RMSNORM:
		return k_rmsnorm(c);
	case FAM_ELEMWISE:
		return elementwise(c, 2);
	case FAM_UNARY:
		return unary_op(c);
	case FAM_BIASADD:
		return bias_add(c);
	case FAM_SOFTMAX:
		return k_softmax(c);
	case FAM_REDUCE:
		return k_reduce(c);
	case FAM_ARGWITHVALUE:
		return k_argwithvalue(c);
	case FAM_RESHAPE:
		return reshape(c);
	case FAM_TRANSPOSE:
		return transpose(c);
	case FAM_FLATTEN:
		return flatten(c);
	case FAM_EXPANDDIMS:
		return expand_dims(c);
	case FAM_SQUEEZE:
		return squeeze(c);
	case FAM_GATHER:
		return gather(c);
	case FAM_ONEHOT:
		return one_hot(c);
	case FAM_STRIDEDSLICE:
		return strided_slice(c);
	case FAM_CONCAT:
		return concat(c);
	case FAM_SPLIT:
		return split(c);
	case FAM_CAST:
		return cast(c);
	case FAM_LOSS:
		return k_loss(c);
	case FAM_SPARSELOSS:
		return k_sparseloss(c);
	case FAM_ATTENTION:
		return k_attention(c);
	case FAM_ROPE:
		return k_rope(c);
	case FAM_SWIGLU:
		return k_swiglu(c);
	case FAM_PRELU:
		return k_prelu(c);
	case FAM_L2NORM:
		return k_l2normalize(c);
	case FAM_CUM:
		return k_cum(c);
	case FAM_DENSE:
		return k_dense(c);
	case FAM_TILE:
		return tile(c);
	case FAM_SORT:
		return k_sort(c);
	case FAM_LPNORM:
		return k_lpnorm(c);
	case FAM_UNSPLIT:
		return n->op == OP_RandomChoiceWithMask     ? k_random_choice(c)
		       : n->op == OP_MoeInitRouting         ? k_moe_init_routing(c)
		       : n->op == OP_MoeInitRoutingV2       ? k_moe_init_routing_v2(c)
		       : n->op == OP_MoeComputeExpertTokens ? k_moe_compute_expert_tokens(c)
		                                            : k_moe_finalize_routing(c);
	case FAM_GMM:
		return k_grouped_matmul(c);
	case FAM_VIRTUAL:
		return n->op == OP_VirtualDataset ? virtual_dataset(c) : sim_arg(c, 0);
	case FAM_GETNEXT:
		return sim_getnext(c);
	default:
		if (n->op == OP_UNKNOWN)
			return FAILV("operator '%s' has no simulation semantics", sym_str(n->prim));
		return FAILV("operator '%s' is not simulated", sym_str(n->prim));
	}
}

int sim_eval_node(Ctx *c)
{
	Node *n = c->n;
	SimValue *v;
	if (c->r->o.only && !c->r->o.only[n->id]) {
		v = sim_val_none(c->r);
	} else if (n->kind == NK_RETURN) {
		v = n->nargs ? sim_arg(c, 0) : sim_val_none(c->r);
	} else if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM) {
		return sim_fail(c, "calls of graphs and of computed functions are not simulated");
	} else {
		v = dispatch(c);
		if (v && sim_check_declared(c, v) < 0)
			return -1;
		if (v && v->kind == SV_TENSOR && (c->r->o.faults & SIM_FAULT_DROP_MICRO) && sim_micro_of(n) == 1 &&
		    ir_node_phase(n) == IR_PHASE_BWD) {
			/* test fault: micro-batch 1's backward contributes nothing */
			SimTensor *z = sim_tensor_new(c->r, v->t->dtype, v->t->ndim, v->t->shape);
			if (!z)
				return -1;
			v = sim_val_tensor(c->r, z);
		}
	}
	if (c->r->failed)
		return -1;
	if (!v)
		return sim_fail(c, "internal: the operator produced no value");
	c->s->vals[n->id] = v;
	return 0;
}

/* Operators whose result shares its input's storage (see tensor.c); the
 * memory estimate leaves them out. */
int sim_allocates(const Node *n)
{
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM)
		return 0;
	switch (op_table[n->op].family) {
	case FAM_STRUCT:
	case FAM_VIRTUAL:
	case FAM_RESHAPE:
	case FAM_FLATTEN:
	case FAM_EXPANDDIMS:
	case FAM_SQUEEZE:
	case FAM_P2P:
		return 0;
	default:
		return 1;
	}
}
