/* verify.c - the IR invariants every pass relies on (STYLE habit 4).
 *
 * Requires: a parsed module.  Provides: nothing new; checks that
 *   - every operand reference points at a live node defined before its use
 *     (a parameter, an earlier CNode of the same graph, or a node of another
 *     graph of the module);
 *   - CNode numbers %k are unique in their graph, parameters %paraN_x in the
 *     module;
 *   - every graph name is used once, and every graph ends with its only
 *     Return, which returns one value of the type it declares;
 *   - every node has its types (a type line), a known operator has as many
 *     operands as ops.def allows, and its tensor operands are tensors;
 *   - type lines list one type per operand, operand types (tensor shapes and
 *     element types, tuple elements) agree with their producers' declared
 *     output types, and the declared output shape of every known operator
 *     equals what ops.def's shape rule computes;
 *   - every shape, tuple elements included, is non-empty and its element
 *     count fits 64 bits.
 * This is the contract of the passes after it: they may rely on these
 * shapes without checking them again.  An excerpt (--fragment) is exempt
 * from what only a whole dump has (types on every node, Returns).
 * On a parsed file a violation is an input error (exit 1); under
 * --verify-each after a transforming pass it is a bug in sappc.
 */
#include <string.h>

#include "sappc.h"
#include "lower/lower.h"

static void fmt_dims(char *buf, size_t n, const int64_t *d, int r)
{
	size_t k = 0;
	k += (size_t)snprintf(buf + k, n - k, "(");
	for (int i = 0; i < r && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)d[i]);
	if (k < n)
		snprintf(buf + k, n - k, ")");
}

/* how messages name a node: "MatMul (%1)", "Return", "parameter '%para1_x'" */
static const char *label(const Node *n, char *buf, size_t len)
{
	if (n->kind == NK_RETURN)
		snprintf(buf, len, "Return");
	else if (n->kind == NK_PARAM && n->local >= 0)
		snprintf(buf, len, "parameter '%%para%d_%s'", n->local, sym_str(n->name));
	else if (n->kind == NK_PARAM)
		snprintf(buf, len, "parameter '%%para_%s'", sym_str(n->name));
	else if (n->callee_kind == CK_PRIM)
		snprintf(buf, len, "%s (%%%d)", sym_str(n->prim), n->local);
	else if (n->callee_kind == CK_CALL)
		snprintf(buf, len, "call @%s (%%%d)", sym_str(ir_node_ext(n)->callee.text), n->local);
	else
		snprintf(buf, len, "node %%%d", n->local);
	return buf;
}

/* shape errors are about the type line; a node made by a pass has none */
static Loc type_loc(const Node *n)
{
	Loc t = ir_node_tloc(n);
	return t.line ? t : n->loc;
}

static int check_ref(const Node *user, const Value *v, uint32_t pos)
{
	char lu[160];
	int bad = 0;
	if (v->kind == V_TUPLE || v->kind == V_LIST || v->kind == V_DICT || v->kind == V_CALL) {
		for (uint32_t i = 0; i < v->n; i++)
			bad |= check_ref(user, &v->u.elems[i], pos);
		return bad;
	}
	if (v->kind != V_NODE)
		return 0;
	const Node *d = v->u.node;
	if (!d || d->dead) {
		diag_error_at(user->loc, "%s uses a removed node", label(user, lu, sizeof lu));
		return 1;
	}
	if (d->kind == NK_PARAM || d->g != user->g)
		return 0;
	if (d->mark >= pos) {
		diag_error_at(user->loc, "%s uses %%%d, which is defined after it", label(user, lu, sizeof lu), d->local);
		return 1;
	}
	return 0;
}

/* the printed text of an abstract, for messages */
static void abs_text(char *buf, size_t n, const Abs *a)
{
	buf[0] = 0;
	FILE *f = fmemopen(buf, n, "w");
	if (!f)
		return;
	ir_print_abs(f, a);
	fclose(f);
	buf[n - 1] = 0;
}

static int is_seq(const Shape *s)
{
	return s->kind == SK_TUPLE || s->kind == SK_LIST;
}

static int is_dims(const Shape *s)
{
	return s->kind == SK_DIMS || s->kind == SK_OLD;
}

/* Do a declared abstract and its producer's disagree?  Tensors by shape
 * and element type (a Ref is the tensor it refers to), tuples and lists
 * element by element.  Monads, scalars and spellings of "no shape" are
 * not compared: dumps of different years write them differently. */
static int abs_differ(const Abs *d, const Abs *p)
{
	if (!d->tstr || !p->tstr)
		return 0;
	const Shape *a = &d->shape, *b = &p->shape;
	if ((is_seq(a) || is_dims(a)) != (is_seq(b) || is_dims(b)))
		return 0;
	if (is_dims(a) != is_dims(b) || (is_seq(a) && a->kind != b->kind))
		return 1;
	if (is_dims(a) && d->dtype && p->dtype && d->dtype != p->dtype)
		return 1;
	return !shape_equal(a, b);
}

/* Operand shapes on the type line must be what their producers declare
 * (bad[id]: the producer's own type line was already reported). */
static int check_edges(const Node *n, const uint8_t *bad_out)
{
	char lu[160], lp[160];
	int bad = 0;
	if (n->kind != NK_CNODE || !n->has_type_line)
		return 0;
	if (n->callee_kind == CK_PRIM && n->nin_types != n->nargs) {
		diag_error_at(type_loc(n), "%s: the type line lists %u input types for %u operands",
			      label(n, lu, sizeof lu), n->nin_types, n->nargs);
		return 1;
	}
	for (uint32_t i = 0; i < n->nargs && i < n->nin_types; i++) {
		if (n->args[i].kind != V_NODE)
			continue;
		const Node *p = n->args[i].u.node;
		if (bad_out[p->id])
			continue;
		const Shape *ps = &p->out.shape, *is = &n->in_types[i].shape;
		if (!abs_differ(&n->in_types[i], &p->out))
			continue;
		if (ps->kind != SK_DIMS || is->kind != SK_DIMS || shape_equal(ps, is)) {
			char a[256], b[256];
			abs_text(a, sizeof a, &p->out);
			abs_text(b, sizeof b, &n->in_types[i]);
			diag_error_at(type_loc(n),
			              "%s: operand %u is %s on this type line, but its producer %s gives %s",
			              label(n, lu, sizeof lu), i + 1, b, label(p, lp, sizeof lp), a);
			bad = 1;
		} else {
			char a[128], b[128];
			fmt_dims(a, sizeof a, ps->dims, ps->rank);
			fmt_dims(b, sizeof b, is->dims, is->rank);
			diag_error_at(type_loc(n),
			              "%s: operand %u has shape %s on this type line, but its producer %s gives %s",
			              label(n, lu, sizeof lu), i + 1, b, label(p, lp, sizeof lp), a);
			bad = 1;
		}
		if (p->kind == NK_PARAM)
			diag_note_at(p->loc, "%s declared here", lp);
		else
			diag_note_at(type_loc(p), "output of %s declared here", lp);
	}
	return bad;
}

/* Operators whose leading operands are computed on as tensors (the others
 * pass values through, or take a tuple: Concat's operand is one). */
static int takes_tensors(const OpInfo *oi)
{
	return oi->arity > 0 && oi->family != FAM_STRUCT && oi->family != FAM_OPAQUE && oi->family != FAM_VIRTUAL &&
	       oi->family != FAM_CONCAT;
}

/* the abstract operand i arrives with: its type-line entry, else its producer's */
static const Abs *operand_abs(const Node *n, uint32_t i)
{
	if (i < n->nin_types && n->in_types[i].tstr)
		return &n->in_types[i];
	if (n->args[i].kind == V_NODE && n->args[i].u.node && n->args[i].u.node->out.tstr)
		return &n->args[i].u.node->out;
	return NULL;
}

/* A known operator has as many operands as ops.def allows; its tensor
 * operands are not tuples or lists, and the attribute-like operands after
 * them are not tensors computed by the graph (which no layout would cover). */
static int check_operands(const Node *n)
{
	char lu[160], t[256];
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || n->op == OP_UNKNOWN)
		return 0;
	const OpInfo *oi = &op_table[n->op];
	if (oi->amin >= 0 && (n->nargs < (uint32_t)oi->amin || n->nargs > (uint32_t)oi->amax)) {
		if (oi->amin == oi->amax)
			diag_error_at(n->loc, "%s: %u operand%s, but %s takes %d", label(n, lu, sizeof lu), n->nargs,
			              n->nargs == 1 ? "" : "s", oi->name, oi->amin);
		else
			diag_error_at(n->loc, "%s: %u operand%s, but %s takes %d to %d", label(n, lu, sizeof lu),
			              n->nargs, n->nargs == 1 ? "" : "s", oi->name, oi->amin, oi->amax);
		return 1;
	}
	if (!takes_tensors(oi))
		return 0;
	for (uint32_t i = 0; i < n->nargs; i++) {
		const Abs *a = operand_abs(n, i);
		if (!a)
			continue;
		/* GroupedMatmul's x, weight, bias and quantization operands are
		 * lists (TensorList in grouped_matmul_info.cc); ir_gmm_info
		 * checks them */
		int gmm_list = oi->family == FAM_GMM && i <= 6;
		if (i < (uint32_t)oi->arity && is_seq(&a->shape) && !gmm_list) {
			abs_text(t, sizeof t, a);
			diag_error_at(n->loc, "%s: operand %u is %s, but %s computes on a tensor there",
			              label(n, lu, sizeof lu), i + 1, t, oi->name);
			return 1;
		}
		/* OneHot's on_value and off_value are tensor inputs in MindSpore
		 * (ops/op_def/yaml/one_hot_op.yaml; OneHotInfo gives them the
		 * empty strategies of scalars): a computed scalar is fine there */
		int onehot_value = n->op == OP_OneHot && (i == 2 || i == 3) && a->shape.rank == 0;
		if (i >= (uint32_t)oi->arity && n->args[i].kind == V_NODE && a->is_tensor && is_dims(&a->shape) &&
		    !onehot_value) {
			abs_text(t, sizeof t, a);
			diag_error_at(n->loc, "%s: operand %u is a tensor (%s), but %s takes %d tensor operand%s",
			              label(n, lu, sizeof lu), i + 1, t, oi->name, oi->arity,
			              oi->arity == 1 ? "" : "s");
			return 1;
		}
	}
	return 0;
}

static int same_value_shape(const Shape *a, const Shape *b)
{
	if (!(is_dims(a) || is_seq(a)) || !(is_dims(b) || is_seq(b)))
		return 1; /* monads, scalars: not compared */
	return shape_equal(a, b);
}

/* literal operand i, else attribute key, as an integer */
static int int_arg(const Node *n, uint32_t i, const char *key, int64_t *v)
{
	if (i < n->nargs && n->args[i].kind != V_NODE && n->args[i].kind != V_EXTERN)
		return value_get_int(&n->args[i], v);
	return value_get_int(ir_attr_get(&n->pattrs, key), v);
}

/* Split(x, axis, output_num) gives output_num equal pieces of x along axis. */
static int check_split(const Node *n)
{
	char lu[160], a[256], b[256];
	const Abs *x = operand_abs(n, 0);
	int64_t axis, num;
	if (!x || x->shape.kind != SK_DIMS || !int_arg(n, 1, "axis", &axis) || !int_arg(n, 2, "output_num", &num))
		return 0;
	const Shape *xs = &x->shape, *o = &n->out.shape;
	if (axis < 0)
		axis += xs->rank;
	int ok = axis >= 0 && axis < xs->rank && num == o->rank && num > 0;
	int64_t piece = ok ? xs->dims[axis] : 0;
	if (ok && piece >= 0) {
		ok = piece % num == 0;
		piece /= num;
	}
	for (int k = 0; ok && k < o->rank; k++) {
		const Shape *e = &o->sub[k];
		ok = e->kind == SK_DIMS && e->rank == xs->rank;
		for (int i = 0; ok && i < xs->rank; i++)
			ok = e->dims[i] == (i == axis ? piece : xs->dims[i]);
	}
	if (ok)
		return 0;
	abs_text(a, sizeof a, &n->out);
	abs_text(b, sizeof b, x);
	diag_error_at(type_loc(n), "%s: declares %s, which is not %s in %lld equal pieces along axis %lld",
	              label(n, lu, sizeof lu), a, b, (long long)num, (long long)axis);
	return 1;
}

/* MakeTuple and TupleGetItem have no shape rule, but their types follow
 * from their operands all the same: a tuple's elements are its operands,
 * an item is its tuple's element (so nothing sized differently reaches the
 * operators behind them). */
static int check_tuple_ops(const Node *n)
{
	char lu[160], a[256], b[256];
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || !n->out.tstr)
		return 0;
	const Shape *o = &n->out.shape;
	if (n->op == OP_MakeTuple && o->kind == SK_TUPLE) {
		if (o->rank != n->nargs) {
			diag_error_at(type_loc(n), "%s: the declared tuple has %u elements for %u operands",
			              label(n, lu, sizeof lu), o->rank, n->nargs);
			return 1;
		}
		for (uint32_t i = 0; i < n->nargs; i++) {
			const Abs *x = operand_abs(n, i);
			if (x && !same_value_shape(&x->shape, &o->sub[i])) {
				abs_text(a, sizeof a, &n->out);
				abs_text(b, sizeof b, x);
				diag_error_at(
				    type_loc(n),
				    "%s: operand %u is %s, but the declared tuple %s has another element there",
				    label(n, lu, sizeof lu), i + 1, b, a);
				return 1;
			}
		}
	}
	int64_t k;
	if (n->op == OP_Split && o->kind == SK_TUPLE)
		return check_split(n);
	if (n->op == OP_TupleGetItem && n->nargs == 2 && value_get_int(&n->args[1], &k)) {
		const Abs *t = operand_abs(n, 0);
		if (!t || !is_seq(&t->shape))
			return 0;
		if (k < 0 || k >= t->shape.rank) {
			abs_text(a, sizeof a, t);
			diag_error_at(n->loc, "%s: item %lld of %s, which has %u elements", label(n, lu, sizeof lu),
			              (long long)k, a, t->shape.rank);
			return 1;
		}
		if (!same_value_shape(&t->shape.sub[k], o)) {
			abs_text(a, sizeof a, &n->out);
			abs_text(b, sizeof b, t);
			diag_error_at(type_loc(n), "%s: declares %s, but item %lld of %s differs",
			              label(n, lu, sizeof lu), a, (long long)k, b);
			return 1;
		}
	}
	return 0;
}

/* A Return returns one value, of the type its type line declares. */
static int check_return(const Node *n, const uint8_t *bad_out)
{
	char lp[160], a[256], b[256];
	if (n->kind != NK_RETURN)
		return 0;
	if (n->nargs != 1) {
		diag_error_at(n->loc, "Return: %u operands, but a Return returns one value", n->nargs);
		return 1;
	}
	if (n->args[0].kind != V_NODE || !n->args[0].u.node || bad_out[n->args[0].u.node->id])
		return 0;
	const Node *p = n->args[0].u.node;
	if (!abs_differ(&n->out, &p->out))
		return 0;
	abs_text(a, sizeof a, &n->out);
	abs_text(b, sizeof b, &p->out);
	diag_error_at(type_loc(n), "Return: declares %s, but the returned %s gives %s", a, label(p, lp, sizeof lp), b);
	return 1;
}

/* The declared output shape of a known operator must follow from its inputs. */
static int check_shape(const Node *n)
{
	char lu[160];
	if (n->kind != NK_CNODE || !n->has_type_line || n->out.shape.kind != SK_DIMS)
		return 0;
	int64_t d[MAX_RANK];
	int r = 0;
	char why[256] = "";
	int rc = ir_infer_shape(n, d, &r, why, sizeof why);
	if (rc < 0) {
		diag_error_at(type_loc(n), "%s: contradictory input shapes: %s", label(n, lu, sizeof lu), why);
		return 1;
	}
	if (rc == 0)
		return 0;
	const Shape *o = &n->out.shape;
	if (o->rank != r || (r && memcmp(o->dims, d, (size_t)r * sizeof(int64_t)) != 0)) {
		char a[160], b[160];
		fmt_dims(a, sizeof a, o->dims, o->rank);
		fmt_dims(b, sizeof b, d, r);
		diag_error_at(type_loc(n), "%s: declared output shape %s, but its inputs give %s", label(n, lu, sizeof lu),
			      a, b);
		return 1;
	}
	return 0;
}

/* declared output k (shape e) of a multi-output operator against the one
 * its inputs give: 1 reported when they differ */
static int check_out_elem(const Node *n, int k, const Shape *e, const int64_t *dims, int rank)
{
	char lu[160], a[160], b[160];
	if (e->rank == rank && memcmp(e->dims, dims, (size_t)e->rank * sizeof(int64_t)) == 0)
		return 0;
	fmt_dims(a, sizeof a, e->dims, e->rank);
	fmt_dims(b, sizeof b, dims, rank);
	diag_error_at(type_loc(n), "%s: declared output %d shape %s, but its inputs give %s", label(n, lu, sizeof lu),
	              k + 1, a, b);
	return 1;
}

/* What an operator's info function (ir_attention_info and the like) said:
 * rc < 0 is the operator's error, reported here (1); rc == 0, or no type
 * line, leaves nothing to check (0); else -1: check the declared outputs. */
static int info_verdict(const Node *n, int rc, const char *why)
{
	char lu[160];
	if (rc < 0) {
		diag_error_at(n->loc, "%s: %s", label(n, lu, sizeof lu), why);
		return 1;
	}
	return rc == 0 || !n->has_type_line ? 0 : -1;
}

/* The attention operators: a layout the operator knows, q/k/v/mask shapes
 * that fit it, and the declared outputs it gives (ir_attention_info). */
static int check_attention(const Node *n)
{
	char lu[160], why[256] = "";
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || op_table[n->op].family != FAM_ATTENTION)
		return 0;
	AttnInfo ai;
	int v = info_verdict(n, ir_attention_info(n, &ai, why, sizeof why), why);
	if (v >= 0)
		return v;
	const Shape *o = &n->out.shape;
	for (int k = 0; k < ai.nout; k++) {
		const Shape *e = ai.nout == 1 ? o : o->kind == SK_TUPLE && o->rank == ai.nout ? &o->sub[k] : NULL;
		if (!e) {
			diag_error_at(type_loc(n), "%s: declares %s outputs, but %s gives a tuple of %d",
			              label(n, lu, sizeof lu), o->kind == SK_TUPLE ? "other" : "no tuple of",
			              op_table[n->op].name, ai.nout);
			return 1;
		}
		if (ai.orank[k] >= 0 && e->kind == SK_DIMS && check_out_elem(n, k, e, ai.out[k], ai.orank[k]))
			return 1;
	}
	return 0;
}

/* GroupedMatmul: a mode sappc models (ir_gmm_info), and the declared list
 * of outputs it gives */
static int check_gmm(const Node *n)
{
	char lu[160], why[256] = "";
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || op_table[n->op].family != FAM_GMM)
		return 0;
	GmmInfo gi;
	int v = info_verdict(n, ir_gmm_info(n, &gi, why, sizeof why), why);
	if (v >= 0)
		return v;
	const Shape *o = &n->out.shape;
	if (!is_seq(o) || o->rank != gi.nout) {
		diag_error_at(type_loc(n), "%s: declares %s, but GroupedMatmul gives a list of %d",
		              label(n, lu, sizeof lu), is_seq(o) ? "another number of outputs" : "no list of outputs",
		              gi.nout);
		return 1;
	}
	for (int k = 0; k < gi.nout; k++) {
		const Shape *e = &o->sub[k];
		if (e->kind == SK_DIMS && check_out_elem(n, k, e, gi.out[k], gi.orank[k]))
			return 1;
	}
	return 0;
}

/* MoeInitRoutingV2: operands in range, and the declared tuple of four
 * outputs it gives (ir_moe_v2_info) */
static int check_moe_v2(const Node *n)
{
	char lu[160], why[256] = "";
	if (n->kind != NK_CNODE || n->callee_kind != CK_PRIM || n->op != OP_MoeInitRoutingV2)
		return 0;
	MoeV2Info mi;
	int v = info_verdict(n, ir_moe_v2_info(n, &mi, why, sizeof why), why);
	if (v >= 0)
		return v;
	const Shape *o = &n->out.shape;
	if (o->kind != SK_TUPLE || o->rank != 4) {
		diag_error_at(type_loc(n), "%s: declares %s, but MoeInitRoutingV2 gives a tuple of 4",
		              label(n, lu, sizeof lu), o->kind == SK_TUPLE ? "another number of outputs" : "no tuple");
		return 1;
	}
	for (int k = 0; k < 4; k++) {
		const Shape *e = &o->sub[k];
		if (mi.orank[k] >= 0 && e->kind == SK_DIMS && check_out_elem(n, k, e, mi.out[k], mi.orank[k]))
			return 1;
	}
	return 0;
}

/* (name, number) pairs of a graph's parameters are unique: hash set */
static void check_params(const Graph *g)
{
	uint32_t cap = 16;
	while (cap < g->params.n * 2)
		cap *= 2;
	const Node **set = xcalloc(cap, sizeof *set);
	for (uint32_t i = 0; i < g->params.n; i++) {
		const Node *p = g->params.a[i];
		uint64_t h = ((uint64_t)p->name * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)(uint32_t)p->local * 0xc2b2ae3d27d4eb4fULL);
		uint32_t j = (uint32_t)(h ^ (h >> 31)) & (cap - 1);
		for (; set[j]; j = (j + 1) & (cap - 1))
			if (set[j]->name == p->name && set[j]->local == p->local)
				break;
		if (set[j])
			diag_error_at(p->loc, "duplicate parameter '%s'", sym_str(p->name));
		else
			set[j] = p;
	}
	free(set);
}

/* Empty tensors and element counts beyond 64 bits are refused: no strategy
 * or layout arithmetic is meaningful on them.  (-1 and -2, dynamic shapes,
 * are left alone here.)  The node's label is formed only for the message. */
static int check_shape_size(const Shape *s, const Node *n)
{
	if (is_seq(s)) {
		for (int i = 0; i < s->rank; i++)
			if (check_shape_size(&s->sub[i], n))
				return 1;
		return 0;
	}
	if (!is_dims(s))
		return 0;
	char what[160];
	uint64_t p = 1;
	for (int i = 0; i < s->rank; i++) {
		int64_t d = s->dims[i];
		if (d == 0) {
			diag_error_at(n->loc, "%s: dimension %d is 0 (empty tensors are not supported)",
			              label(n, what, sizeof what), i);
			return 1;
		}
		if (d < 0)
			continue;
		if (p > UINT64_MAX / (uint64_t)d || p * (uint64_t)d > (uint64_t)INT64_MAX) {
			diag_error_at(n->loc, "%s: the element count of the shape overflows 64 bits",
			              label(n, what, sizeof what));
			return 1;
		}
		p *= (uint64_t)d;
	}
	return 0;
}

static int check_abs_size(const Abs *a, const Node *n)
{
	return check_shape_size(&a->shape, n);
}

/* one error per node: the first shape of its type line that is refused */
static int check_sizes(const Node *n)
{
	for (uint32_t i = 0; i < n->nin_types; i++)
		if (check_abs_size(&n->in_types[i], n))
			return 1;
	return check_abs_size(&n->out, n);
}

/* What only a whole dump has: a Return ending every graph, and the types
 * of every node (a node without a type line has none, and every pass
 * would reason about an empty abstract). */
static void check_whole(const Graph *g)
{
	char lu[160];
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		const Node *n = g->nodes.a[i];
		if (n->kind == NK_RETURN && i + 1 < g->nodes.n)
			diag_error_at(g->nodes.a[i + 1]->loc,
			              "%s comes after the Return of subgraph '@%s' (the Return is a graph's last node)",
			              label(g->nodes.a[i + 1], lu, sizeof lu), sym_str(g->name));
		if ((n->kind == NK_CNODE || n->kind == NK_RETURN) && !n->out.tstr)
			diag_error_at(n->loc,
			              "%s has no type line (write '      : (<INPUT TYPES>)%s' under the node line)",
			              label(n, lu, sizeof lu), n->kind == NK_RETURN ? "" : " -> (<OUTPUT TYPE>)");
	}
	if (!g->nodes.n || g->nodes.a[g->nodes.n - 1]->kind != NK_RETURN)
		diag_error_at(g->loc, "subgraph '@%s' has no Return (its last node must be 'Return(%%k)')",
		              sym_str(g->name));
}

/* --dataset-strategy=TUPLE against the graph: one strategy per dataset
 * input (per operand of an explicit _VirtualDataset), each of the input's
 * rank.  Whether the entries divide the shapes is the layouts pass's
 * question (after lowering, shapes are local). */
static void check_dataset_strategy(Module *m, const Options *o)
{
	Graph *g = ir_entry(m);
	if (!o || !o->ds_n || !g || m->fragment)
		return;
	const Node *vd = NULL;
	for (uint32_t i = 0; i < g->nodes.n && !vd; i++)
		if (ir_node_is_op(g->nodes.a[i], OP_VirtualDataset))
			vd = g->nodes.a[i];
	/* two rounds: the count, then (when it matches) each rank */
	for (int round = 0; round < 2; round++) {
		int k = 0;
		for (uint32_t i = 0; i < (vd ? vd->nargs : g->params.n); i++) {
			const Node *p = vd ? (vd->args[i].kind == V_NODE ? vd->args[i].u.node : NULL) : g->params.a[i];
			const Abs *a = vd ? ir_in_abs(vd, i) : &p->out;
			if ((!vd && !ir_is_dataset_input(p)) || !a || a->shape.kind != SK_DIMS)
				continue;
			if (round && o->ds_rank[k] != a->shape.rank)
				diag_error_at(vd ? vd->loc : p->loc,
					      "--dataset-strategy: strategy %d has %d entr%s, but dataset input %d (%s) has "
					      "rank %d",
					      k + 1, o->ds_rank[k], o->ds_rank[k] == 1 ? "y" : "ies", k + 1,
					      p ? sym_str(p->name) : "?", a->shape.rank);
			k++;
		}
		/* dataset sink mode: GetNext's outputs are the dataset inputs */
		const Node *gn = NULL;
		for (uint32_t i = 0; !vd && !k && !gn && i < g->nodes.n; i++)
			if (ir_node_is_op(g->nodes.a[i], OP_GetNext) && g->nodes.a[i]->out.shape.kind == SK_TUPLE)
				gn = g->nodes.a[i];
		for (int j = 0; gn && j < gn->out.shape.rank; j++) {
			const Shape *sh = &gn->out.shape.sub[j];
			if (sh->kind != SK_DIMS)
				continue;
			if (round && o->ds_rank[k] != sh->rank)
				diag_error_at(gn->loc,
				              "--dataset-strategy: strategy %d has %d entr%s, but GetNext output %d has "
				              "rank %d",
				              k + 1, o->ds_rank[k], o->ds_rank[k] == 1 ? "y" : "ies", j, sh->rank);
			k++;
		}
		if (!round && k != o->ds_n) {
			diag_error_at(vd ? vd->loc : g->loc,
				      "--dataset-strategy gives %d strateg%s, but %s has %d dataset input%s", o->ds_n,
				      o->ds_n == 1 ? "y" : "ies", vd ? "the _VirtualDataset" : "the graph", k,
				      k == 1 ? "" : "s");
			return;
		}
	}
}

int pass_verify(Module *m, const Options *o)
{
	char lu[160];
	int errs0 = diag_errors();
	uint8_t *bad_out = xcalloc(m->next_id + 1, 1);
	if (!m->fragment)
		ir_check_graph_names(m);
	ir_clear_marks(m);
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		Graph *g = m->graphs.a[gi];
		/* mark = 1-based position in the graph; parameters 0 */
		for (uint32_t i = 0; i < g->nodes.n; i++)
			g->nodes.a[i]->mark = i + 1;
		Vec(uint8_t) seen = {0};
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			Node *n = g->nodes.a[i];
			if (n->kind != NK_CNODE || n->local < 0)
				continue;
			if ((uint32_t)n->local >= seen.n) {
				uint32_t old = seen.n;
				vec_grow(&seen, (uint32_t)n->local + 1 - old);
				memset(seen.a + old, 0, (size_t)n->local + 1 - old);
				seen.n = (uint32_t)n->local + 1;
			}
			if (seen.a[n->local])
				diag_error_at(n->loc, "%s: duplicate node number %%%d in graph '@%s'", label(n, lu, sizeof lu),
					      n->local, sym_str(g->name));
			seen.a[n->local] = 1;
		}
		vec_free(&seen);
		if (!m->fragment)
			check_whole(g);
		check_params(g);
		for (uint32_t i = 0; i < g->params.n; i++)
			check_sizes(g->params.a[i]);
		for (uint32_t i = 0; i < g->nodes.n && !diag_too_many(); i++) {
			Node *n = g->nodes.a[i];
			if (check_sizes(n)) {
				bad_out[n->id] = 1;
				continue;
			}
			for (uint32_t k = 0; k < n->nargs; k++)
				check_ref(n, &n->args[k], i + 1);
			if (n->callee_kind == CK_NODE)
				check_ref(n, &ir_node_ext(n)->callee, i + 1);
			/* one root cause, one error: a wrong operand shape also makes
			 * the output look wrong, a wrong output its users' operands */
			if (check_operands(n) || check_edges(n, bad_out) || check_return(n, bad_out) ||
			    check_tuple_ops(n) || check_shape(n) || check_attention(n) || check_gmm(n) ||
			    check_moe_v2(n))
				bad_out[n->id] = 1;
		}
	}
	ir_clear_marks(m);
	check_dataset_strategy(m, o);
	/* layouts are consistent, and once lowered, shapes follow them */
	lower_verify(m);
	free(bad_out);
	return diag_errors() > errs0 ? 1 : 0;
}
