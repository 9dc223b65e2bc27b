/* randgraph.c - write a random, valid forward graph in sappc's IR text (the
 * random-graph test's input generator, testsuite/lower/randgraph.sh).
 *
 *   randgraph SEED [N_OPS] [loss] > out.ir     (N_OPS: operators to draw, default 14)
 *
 * The graph is a random DAG over operators sappc plans, lowers and
 * simulates: MatMul and BatchMatMul (transpose flags as operands or as
 * attributes, weights as parameters behind Load, or two activations),
 * element-wise binary operators with broadcasting (Add, Sub, Mul, RealDiv,
 * Maximum), unary operators (ReLU, GeLU, Tanh, Sigmoid, Neg, Abs, SiLU, Exp,
 * Square, Cast), Reshape, Transpose, ReduceSum/ReduceMean (keep_dims, negative
 * axes), Softmax, Split + TupleGetItem, MakeTuple + Concat (a MakeTuple
 * sometimes read by a second operator: another Concat or an AddN).  Operands
 * are drawn mostly from recent values but also from far upstream (residuals),
 * and any value may have several users; values nobody reads are returned
 * (a MakeTuple when there are several).  With "loss", the graph returns
 * a scalar instead, the sum of those values' ReduceSums (a loss: sappc
 * builds the training step of it, every weight trainable).
 *
 * Shapes are computed here as the operators' shape rules define them: every
 * dimension drawn is a power of two from 2 to 32 (so strategies divide them;
 * a Concat may add two, up to MAXDIM) and no tensor has more than MAXEL elements (--simulate holds every rank's
 * tensors).  Each value carries a rough magnitude so that the graph stays
 * numerically tame (--simulate compares with a relative tolerance): Exp and
 * Square only take small values, a RealDiv divides by exp(tanh(.)), large
 * values are read only by squashing operators, and a Cast to Float16 (which
 * rounds) only reads values every rank computes bit for bit (no reduction
 * upstream, whose order a strategy may change).
 *
 * Output is a pure function of SEED and N_OPS.  Standalone C11, libc only. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 4       /* largest rank */
#define MAXEL 4096   /* largest tensor, in elements */
#define MAXDIM 64    /* largest dimension */
#define MAXV 1024    /* values */
#define TAME 30.0    /* magnitude above which only squashing operators read a value */

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return n ? (uint32_t)((rng >> 33) % n) : 0;
}

typedef struct {
	char ref[32]; /* how an operand names it: %12, %para1_x1 */
	int rank;
	int64_t d[MAXR];
	double mag;  /* rough magnitude of its elements */
	int exact;   /* every rank computes it bit for bit */
	int uses;
	int output;  /* may be returned (not a parameter) */
} Val;

static Val V[MAXV];
static int nv;
static int nid;   /* next %N */
static int made;  /* operators drawn so far (the budget) */
static FILE *body;
static char *body_text;
static size_t body_len;
static FILE *params;
static char *params_text;
static size_t params_len;
static int npar;

/* ------------------------------------------------------------ text helpers */

static int64_t numel(const int64_t *d, int r)
{
	int64_t n = 1;
	for (int i = 0; i < r; i++)
		n *= d[i];
	return n;
}

/* "(4, 8)", "(8)", "()" */
static char *shape_text(char *b, const int64_t *d, int r)
{
	int o = sprintf(b, "(");
	for (int i = 0; i < r; i++)
		o += sprintf(b + o, "%s%" PRId64, i ? ", " : "", d[i]);
	sprintf(b + o, ")");
	return b;
}

static char *ttype(char *b, const int64_t *d, int r, const char *dt)
{
	char s[64];
	sprintf(b, "<Tensor[%s], %s>", dt, shape_text(s, d, r));
	return b;
}

static char *vtype(char *b, const Val *v)
{
	return ttype(b, v->d, v->rank, "Float32");
}

/* appends the operand ", (I64(1), I64(0))" to args and its type to ty */
static void add_ints(char *args, char *ty, const int64_t *x, int n)
{
	args += strlen(args), ty += strlen(ty);
	int o = sprintf(args, ", (");
	for (int i = 0; i < n; i++)
		o += sprintf(args + o, "%sI64(%" PRId64 ")", i ? ", " : "", x[i]);
	sprintf(args + o, ")");
	if (n == 1) {
		sprintf(ty, ", <Tuple[Int64], TupleShape(NoShape)>");
		return;
	}
	o = sprintf(ty, ", <Tuple[Int64*%d], TupleShape(", n);
	for (int i = 0; i < n; i++)
		o += sprintf(ty + o, "%sNoShape", i ? ", " : "");
	sprintf(ty + o, ")>");
}

/* the type of a tuple of the tensors vs[0..n) */
static void tuple_type(char *b, const int *vs, int n)
{
	char s[96];
	int o = sprintf(b, "<Tuple[Tensor[Float32]*%d], TupleShape(", n);
	for (int i = 0; i < n; i++)
		o += sprintf(b + o, "%s%s", i ? ", " : "", shape_text(s, V[vs[i]].d, V[vs[i]].rank));
	sprintf(b + o, ")>");
}

/* the operands vs[0..n), "%3, %para1_x1", and their types */
static void operands(char *args, char *ty, const int *vs, int n)
{
	char t[96];
	args[0] = ty[0] = 0;
	for (int i = 0; i < n; i++) {
		sprintf(args + strlen(args), "%s%s", i ? ", " : "", V[vs[i]].ref);
		sprintf(ty + strlen(ty), "%s%s", i ? ", " : "", vtype(t, &V[vs[i]]));
	}
}

/* per-primitive counters for the full names (Default/Add-op3) */
static struct {
	const char *prim;
	int n;
} count[64];

static int op_number(const char *prim)
{
	int i = 0;
	while (count[i].prim && strcmp(count[i].prim, prim) != 0)
		i++;
	count[i].prim = prim;
	return ++count[i].n;
}

/* one CNode: returns its N (%N) */
static int emit(const char *prim, const char *args, const char *attrs, const char *in_types, const char *out_type)
{
	int k = op_number(prim), id = nid++;
	fprintf(body, "  %%%d(x) = %s(%s)%s\n", id, prim, args, attrs);
	fprintf(body, "      : (%s) -> (%s)\n", in_types, out_type);
	fprintf(body, "      # Fullname with scope: (Default/%s-op%d)\n", prim, k);
	return id;
}

/* " {instance name: add_3}" for operators that have one */
static const char *inst(char *b, const char *prim)
{
	int o = sprintf(b, " {instance name: ");
	for (const char *p = prim; *p; p++) {
		if (*p >= 'A' && *p <= 'Z' && p != prim && p[-1] >= 'a' && p[-1] <= 'z')
			b[o++] = '_';
		b[o++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
	}
	sprintf(b + o, "_%d}", nid);
	return b;
}

static int new_val(int rank, const int64_t *d, double mag, int exact)
{
	if (nv == MAXV) {
		fprintf(stderr, "randgraph: more than %d values\n", MAXV);
		exit(1);
	}
	Val *v = &V[nv];
	memset(v, 0, sizeof *v);
	v->rank = rank;
	memcpy(v->d, d, sizeof(int64_t) * (size_t)rank);
	v->mag = mag;
	v->exact = exact;
	v->output = 1;
	return nv++;
}

static int node_val(int id, int rank, const int64_t *d, double mag, int exact)
{
	int v = new_val(rank, d, mag, exact);
	sprintf(V[v].ref, "%%%d", id);
	return v;
}

/* an operator with an instance name (and primitive_attrs {pattrs} unless
 * NULL) whose result is a Float32 tensor of shape od: returns that value */
static int tensor_node(const char *prim, const char *args, const char *in_types, const char *pattrs, int orank,
                       const int64_t *od, double mag, int exact)
{
	char in[64], attrs[512], o[96];
	inst(in, prim);
	if (pattrs)
		sprintf(attrs, "%s primitive_attrs: {%s}", in, pattrs);
	else
		sprintf(attrs, "%s", in);
	int id = emit(prim, args, attrs, in_types, ttype(o, od, orank, "Float32"));
	return node_val(id, orank, od, mag, exact);
}

static void use(int v)
{
	V[v].uses++;
}

/* ---------------------------------------------------------- parameters */

static int64_t dim(void)
{
	static const int64_t ds[] = {2, 4, 4, 8, 8, 8, 16, 16, 32};
	return ds[rnd(sizeof ds / sizeof *ds)];
}

/* a graph input (no default) */
static int input(int rank, const int64_t *d)
{
	char s[96];
	int v = new_val(rank, d, 1, 1);
	npar++;
	sprintf(V[v].ref, "%%para%d_x%d", npar, npar);
	fprintf(params, "%%para%d_x%d: %s\n", npar, npar, ttype(s, d, rank, "Float32"));
	V[v].output = 0;
	return v;
}

/* a weight: a Ref parameter with a default, read through Load */
static int weight(int rank, const int64_t *d)
{
	char s[96], a[256], ty[512], o[96];
	npar++;
	shape_text(s, d, rank);
	fprintf(params, "%%para%d_w%d: <Ref[Tensor[Float32]], %s, ref_key=w%d>  :  has_default\n", npar, npar, s, npar);
	sprintf(a, "%%para%d_w%d, UMonad[U]", npar, npar);
	sprintf(ty, "<Ref[Tensor[Float32]], %s, ref_key=w%d>, <UMonad, NoShape>", s, npar);
	int id = emit("Load", a, "", ty, ttype(o, d, rank, "Float32"));
	/* Glorot-uniform for rank >= 2 (passes/simulate/inputs.c), else [-1, 1) */
	double mag = rank >= 2 ? sqrt(6.0 / (double)(d[rank - 2] + d[rank - 1])) : 1;
	int v = node_val(id, rank, d, mag, 1);
	V[v].output = 0;
	return v;
}

/* an operand that is a new parameter: a weight or an input */
static int param(int rank, const int64_t *d)
{
	return rnd(2) ? weight(rank, d) : input(rank, d);
}

/* --------------------------------------------------------- operand picks */

typedef int (*Filter)(const Val *v, const void *ctx);

/* a value the filter accepts: one of the last few most of the time, any
 * other (a residual) else; -1 when there is none */
static int pick(Filter f, const void *ctx)
{
	int c[MAXV], n = 0;
	for (int i = 0; i < nv; i++)
		if (V[i].ref[0] && f(&V[i], ctx))
			c[n++] = i;
	if (!n)
		return -1;
	if (rnd(3))
		return c[n - 1 - (int)rnd(n < 4 ? (uint32_t)n : 4)];
	return c[rnd((uint32_t)n)];
}

static int f_tame(const Val *v, const void *ctx)
{
	(void)ctx;
	return v->mag <= TAME;
}

static int f_rank(const Val *v, const void *ctx)
{
	const int *r = ctx; /* {lo, hi} */
	return v->mag <= TAME && v->rank >= r[0] && v->rank <= r[1];
}

/* a tame value of rank lo to hi */
static int pick_rank(int lo, int hi)
{
	const int r[2] = {lo, hi};
	return pick(f_rank, r);
}

/* ----------------------------------------------------------- operators */

/* a MatMul or BatchMatMul of a by b, its transpose flags as operands or as
 * attributes */
static void matmul_node(const char *prim, int a, int b, int ta, int tb, int r, const int64_t *od, int64_t k)
{
	char args[256], ty[512], pattrs[256];
	const int ab[2] = {a, b};
	use(a), use(b);
	operands(args, ty, ab, 2);
	int as_operands = rnd(2);
	if (as_operands) {
		sprintf(args + strlen(args), ", Bool(%d), Bool(%d)", ta, tb);
		strcat(ty, ", <Bool, NoShape>, <Bool, NoShape>");
	} else {
		sprintf(pattrs,
		        "output_names: [output], transpose_a: Bool(%d), input_names: [x1, x2], "
		        "transpose_x2: Bool(%d), transpose_x1: Bool(%d), transpose_b: Bool(%d)",
		        ta, tb, ta, tb);
	}
	tensor_node(prim, args, ty, as_operands ? NULL : pattrs, r, od, sqrt((double)k) * V[a].mag * V[b].mag, 0);
}

static int op_matmul(void)
{
	int a = pick_rank(2, 2);
	if (a < 0)
		return -1;
	int ta = rnd(4) == 0, tb = rnd(2);
	int64_t m = V[a].d[ta ? 1 : 0], k = V[a].d[ta ? 0 : 1], n = 0;
	int b = -1;
	if (rnd(3) == 0) { /* two activations: any rank-2 value with a k side */
		int c[MAXV], nc = 0;
		for (int i = 0; i < nv; i++)
			if (V[i].rank == 2 && V[i].mag <= TAME && (V[i].d[0] == k || V[i].d[1] == k))
				c[nc++] = i;
		if (nc) {
			b = c[rnd((uint32_t)nc)];
			tb = V[b].d[0] == k && V[b].d[1] == k ? (int)rnd(2) : V[b].d[1] == k;
			n = V[b].d[tb ? 0 : 1];
		}
	}
	if (b < 0) {
		n = dim();
		int64_t wd[2] = {tb ? n : k, tb ? k : n};
		b = weight(2, wd);
	}
	if (m * n > MAXEL)
		return -1;
	int64_t od[2] = {m, n};
	matmul_node("MatMul", a, b, ta, tb, 2, od, k);
	return 0;
}

static int op_batchmatmul(void)
{
	int a = pick_rank(3, 4);
	if (a < 0)
		return -1;
	int r = V[a].rank, ta = rnd(4) == 0, tb = rnd(2);
	int64_t m = V[a].d[r - (ta ? 1 : 2)], k = V[a].d[r - (ta ? 2 : 1)], n = 0;
	int b = -1;
	if (rnd(2)) { /* an activation with the same batch dimensions */
		int c[MAXV], nc = 0;
		for (int i = 0; i < nv; i++)
			if (V[i].rank == r && V[i].mag <= TAME && memcmp(V[i].d, V[a].d, sizeof(int64_t) * (size_t)(r - 2)) == 0 &&
			    (V[i].d[r - 2] == k || V[i].d[r - 1] == k))
				c[nc++] = i;
		if (nc) {
			b = c[rnd((uint32_t)nc)];
			tb = V[b].d[r - 2] == k && V[b].d[r - 1] == k ? (int)rnd(2) : V[b].d[r - 1] == k;
			n = V[b].d[r - (tb ? 2 : 1)];
		}
	}
	if (b < 0) { /* a weight: 2-D (broadcast over the batch) or batched */
		n = dim();
		int64_t wd[MAXR];
		int wr = rnd(2) ? 2 : r;
		memcpy(wd, V[a].d + (r - wr), sizeof(int64_t) * (size_t)wr);
		wd[wr - 2] = tb ? n : k;
		wd[wr - 1] = tb ? k : n;
		b = weight(wr, wd);
	}
	int64_t od[MAXR];
	memcpy(od, V[a].d, sizeof(int64_t) * (size_t)r);
	od[r - 2] = m, od[r - 1] = n;
	if (numel(od, r) > MAXEL)
		return -1;
	matmul_node("BatchMatMul", a, b, ta, tb, r, od, k);
	return 0;
}

/* the broadcast of two shapes; 0 when they do not broadcast */
static int broadcast(const Val *x, const Val *y, int64_t *od, int *orank)
{
	int r = x->rank > y->rank ? x->rank : y->rank;
	for (int i = 0; i < r; i++) {
		int ix = i - (r - x->rank), iy = i - (r - y->rank);
		int64_t a = ix >= 0 ? x->d[ix] : 1, b = iy >= 0 ? y->d[iy] : 1;
		if (a != b && a != 1 && b != 1)
			return 0;
		od[i] = a > b ? a : b;
	}
	*orank = r;
	return numel(od, r) <= MAXEL;
}

static int unary_node(const char *prim, int a, double mag, int exact);

static int op_binary(void)
{
	static const char *ops[] = {"Add", "Add", "Add", "Sub", "Mul", "Mul", "RealDiv", "Maximum"};
	const char *prim = ops[rnd(sizeof ops / sizeof *ops)];
	int a = pick(f_tame, NULL);
	if (a < 0)
		return -1;
	int b = -1, orank;
	int64_t od[MAXR];
	if (rnd(2)) { /* another value: same shape (a residual) or broadcastable */
		int c[MAXV], nc = 0, same[MAXV], ns = 0;
		for (int i = 0; i < nv; i++) {
			if (V[i].mag > TAME || !broadcast(&V[a], &V[i], od, &orank))
				continue;
			c[nc++] = i;
			if (V[i].rank == V[a].rank && memcmp(V[i].d, V[a].d, sizeof(int64_t) * (size_t)V[a].rank) == 0)
				same[ns++] = i;
		}
		if (ns && rnd(2))
			b = same[rnd((uint32_t)ns)];
		else if (nc)
			b = c[rnd((uint32_t)nc)];
	}
	if (b < 0) { /* a parameter: a's shape, some dimensions 1, maybe fewer of them */
		int64_t bd[MAXR];
		int br = V[a].rank - (V[a].rank && rnd(3) == 0 ? (int)rnd((uint32_t)V[a].rank + 1) : 0);
		for (int i = 0; i < br; i++)
			bd[i] = rnd(3) == 0 ? 1 : V[a].d[V[a].rank - br + i];
		b = param(br, bd);
	}
	if (strcmp(prim, "RealDiv") == 0) { /* divide by exp(tanh(b)), in [1/e, e] */
		int t = unary_node("Tanh", b, 1, V[b].exact);
		b = unary_node("Exp", t, 2.72, V[t].exact);
	} else if (rnd(2)) {
		int t = a;
		a = b, b = t;
	}
	if (!broadcast(&V[a], &V[b], od, &orank))
		return -1;
	use(a), use(b);
	double mag = strcmp(prim, "Mul") == 0 ? V[a].mag * V[b].mag
	             : strcmp(prim, "RealDiv") == 0 ? V[a].mag * 2.72
	             : strcmp(prim, "Maximum") == 0 ? fmax(V[a].mag, V[b].mag)
	                                            : V[a].mag + V[b].mag;
	char args[256], ty[256];
	const int ab[2] = {a, b};
	operands(args, ty, ab, 2);
	tensor_node(prim, args, ty, "output_names: [output], input_names: [x, y]", orank, od, mag,
	            V[a].exact && V[b].exact);
	return 0;
}

static int unary_node(const char *prim, int a, double mag, int exact)
{
	char ty[96];
	use(a);
	made++;
	return tensor_node(prim, V[a].ref, vtype(ty, &V[a]), NULL, V[a].rank, V[a].d, mag, exact);
}

static int f_big(const Val *v, const void *ctx)
{
	(void)ctx;
	return v->mag > TAME;
}

static int f_exact(const Val *v, const void *ctx)
{
	(void)ctx;
	return v->exact && v->mag <= TAME;
}

static int op_unary(void)
{
	static const char *ops[] = {"ReLU", "GeLU", "Tanh", "Sigmoid", "Neg", "Abs", "SiLU", "Exp", "Square", "Cast", "Cast"};
	const char *prim = ops[rnd(sizeof ops / sizeof *ops)];
	int squash = !strcmp(prim, "Tanh") || !strcmp(prim, "Sigmoid");
	int a = squash && rnd(2) ? pick(f_big, NULL) : -1;
	if (a < 0)
		a = pick(!strcmp(prim, "Cast") && rnd(2) ? f_exact : f_tame, NULL);
	if (a < 0)
		return -1;
	double m = V[a].mag;
	if (!strcmp(prim, "Exp") && m > 3)
		return -1;
	if (!strcmp(prim, "Square") && m > 5)
		return -1;
	if (!strcmp(prim, "Cast")) {
		char args[64], ty[192], t[96], t16[96];
		use(a);
		if (!V[a].exact) { /* Float32 to Float32: the operator, no rounding */
			sprintf(args, "%s, F32", V[a].ref);
			sprintf(ty, "%s, <Type, NoShape>", vtype(t, &V[a]));
			int id = emit("Cast", args, "", ty, t);
			node_val(id, V[a].rank, V[a].d, m, 0);
			return 0;
		}
		/* to Float16 and back: rounds, the same on every rank */
		sprintf(args, "%s, F16", V[a].ref);
		sprintf(ty, "%s, <Type, NoShape>", vtype(t, &V[a]));
		ttype(t16, V[a].d, V[a].rank, "Float16");
		int id = emit("Cast", args, "", ty, t16);
		sprintf(args, "%%%d, F32", id);
		sprintf(ty, "%s, <Type, NoShape>", t16);
		id = emit("Cast", args, "", ty, t);
		node_val(id, V[a].rank, V[a].d, m, 1);
		return 0;
	}
	double mag = squash ? 1
	             : !strcmp(prim, "Exp") ? exp(m)
	             : !strcmp(prim, "Square") ? m * m
	                                       : m;
	made--; /* unary_node counts it, the caller too */
	unary_node(prim, a, mag, V[a].exact);
	return 0;
}

/* a Reshape or a Transpose of a, its operand x[0..n) (the new shape, the
 * permutation): a's elements in shape od */
static void layout_node(const char *prim, const char *pattrs, int a, const int64_t *x, int n, int orank,
                        const int64_t *od)
{
	char args[256], ty[256];
	use(a);
	operands(args, ty, &a, 1);
	add_ints(args, ty, x, n);
	tensor_node(prim, args, ty, pattrs, orank, od, V[a].mag, V[a].exact);
}

static int op_reshape(void)
{
	int a = pick_rank(1, 4);
	if (a < 0)
		return -1;
	int r = V[a].rank, orank = 0;
	int64_t od[MAXR];
	int how = rnd(3);
	if (how == 0 && r >= 2) { /* merge two neighbours */
		int i = (int)rnd((uint32_t)r - 1);
		for (int j = 0; j < r; j++)
			if (j == i + 1)
				od[orank - 1] *= V[a].d[j];
			else
				od[orank++] = V[a].d[j];
		if (od[i] > MAXDIM * 4)
			return -1;
	} else if (how <= 1 && r < MAXR) { /* split one dimension in two */
		int c[MAXR], nc = 0;
		for (int j = 0; j < r; j++)
			if (V[a].d[j] >= 4 && V[a].d[j] % 2 == 0)
				c[nc++] = j;
		if (!nc)
			return -1;
		int i = c[rnd((uint32_t)nc)];
		int64_t f = 2; /* a divisor: a Concat may have made the dimension 6 or 12 */
		while (f * 2 < V[a].d[i] && V[a].d[i] % (f * 2) == 0 && rnd(2))
			f *= 2;
		for (int j = 0; j < r; j++)
			if (j == i)
				od[orank++] = f, od[orank++] = V[a].d[j] / f;
			else
				od[orank++] = V[a].d[j];
	} else { /* (first, rest) */
		if (r < 2)
			return -1;
		od[0] = V[a].d[0];
		od[1] = numel(V[a].d + 1, r - 1);
		orank = 2;
		if (r == 2)
			return -1;
	}
	layout_node("Reshape", "output_names: [output], input_names: [tensor, shape]", a, od, orank, orank, od);
	return 0;
}

static int op_transpose(void)
{
	int a = pick_rank(2, 4);
	if (a < 0)
		return -1;
	int r = V[a].rank, id_perm = 1;
	int64_t p[MAXR] = {0}, od[MAXR];
	for (int i = 0; i < r; i++)
		p[i] = i;
	for (int i = r - 1; i > 0; i--) {
		int j = (int)rnd((uint32_t)i + 1);
		int64_t t = p[i];
		p[i] = p[j], p[j] = t;
	}
	for (int i = 0; i < r; i++)
		id_perm &= p[i] == i;
	if (id_perm) {
		int64_t t = p[0];
		p[0] = p[1], p[1] = t;
	}
	for (int i = 0; i < r; i++)
		od[i] = V[a].d[p[i]];
	layout_node("Transpose", "output_names: [output], input_names: [x, perm]", a, p, r, r, od);
	return 0;
}

static int op_reduce(void)
{
	int a = pick_rank(1, 4);
	if (a < 0)
		return -1;
	int sum = rnd(2), keep = rnd(2), r = V[a].rank, na = 0, orank = 0;
	int64_t ax[MAXR], od[MAXR], cnt = 1;
	int red[MAXR];
	for (int i = 0; i < r; i++)
		red[i] = rnd(2);
	red[rnd((uint32_t)r)] = 1;
	for (int i = 0; i < r; i++) {
		if (red[i]) {
			ax[na++] = rnd(4) == 0 ? i - r : i; /* a negative axis now and then */
			cnt *= V[a].d[i];
			if (keep)
				od[orank++] = 1;
		} else {
			od[orank++] = V[a].d[i];
		}
	}
	use(a);
	const char *prim = sum ? "ReduceSum" : "ReduceMean";
	char args[256], ty[384];
	operands(args, ty, &a, 1);
	add_ints(args, ty, ax, na);
	int skip = sum && rnd(2); /* with skip_mode */
	sprintf(args + strlen(args), ", Bool(%d)%s", keep, skip ? ", Bool(0)" : "");
	strcat(ty, skip ? ", <Bool, NoShape>, <Bool, NoShape>" : ", <Bool, NoShape>");
	tensor_node(prim, args, ty, "output_names: [y], input_names: [input_x, axis, keep_dims]", orank, od,
	            sum ? V[a].mag * (double)cnt : V[a].mag, 0);
	return 0;
}

static int op_softmax(void)
{
	int a = pick_rank(1, 4);
	if (a < 0)
		return -1;
	int r = V[a].rank;
	int64_t ax = rnd(2) ? -1 : (int64_t)rnd((uint32_t)r) - (rnd(2) ? r : 0);
	use(a);
	char args[256], ty[256];
	operands(args, ty, &a, 1);
	add_ints(args, ty, &ax, 1);
	tensor_node("Softmax", args, ty, "output_names: [output], input_names: [x, axis]", r, V[a].d, 1, 0);
	return 0;
}

static int op_split(void)
{
	int a = pick_rank(1, 4);
	if (a < 0)
		return -1;
	int r = V[a].rank, c[MAXR], nc = 0;
	for (int i = 0; i < r; i++)
		if (V[a].d[i] >= 4 && V[a].d[i] % 2 == 0)
			c[nc++] = i;
	if (!nc)
		return -1;
	int ax = c[rnd((uint32_t)nc)];
	int64_t n = V[a].d[ax] >= 8 && V[a].d[ax] % 4 == 0 && rnd(3) == 0 ? 4 : 2;
	int64_t od[MAXR];
	memcpy(od, V[a].d, sizeof od);
	od[ax] /= n;
	use(a);
	/* the elements, as values (given their names below) */
	int el[4];
	for (int i = 0; i < n; i++)
		el[i] = new_val(r, od, V[a].mag, V[a].exact);
	char args[256], ty[640], t[96], tt[512], in[64];
	tuple_type(tt, el, (int)n);
	sprintf(args, "%s, I64(%d), I64(%" PRId64 ")", V[a].ref, rnd(3) == 0 ? ax - r : ax, n);
	sprintf(ty, "%s, <Int64, NoShape>, <Int64, NoShape>", vtype(t, &V[a]));
	int id = emit("Split", args, inst(in, "Split"), ty, tt);
	for (int i = 0; i < n; i++) {
		if (rnd(5) == 0 && i) { /* an element nobody reads */
			V[el[i]].output = 0;
			V[el[i]].mag = 1e30; /* never picked */
			continue;
		}
		sprintf(args, "%%%d, I64(%d)", id, i);
		sprintf(ty, "%s, <Int64, NoShape>", tt);
		int g = emit("TupleGetItem", args, "", ty, vtype(t, &V[el[i]]));
		sprintf(V[el[i]].ref, "%%%d", g);
	}
	return 0;
}

typedef struct {
	int a, ax;
} CatCtx;

/* same rank, same dimensions but the axis */
static int f_cat(const Val *v, const void *ctx)
{
	const CatCtx *c = ctx;
	const Val *a = &V[c->a];
	if (v->rank != a->rank || v->mag > TAME || v->ref[0] == 0)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (i != c->ax && v->d[i] != a->d[i])
			return 0;
	return 1;
}

static int concat_node(int mt, const int *el, int n, int ax, const char *tt)
{
	int64_t od[MAXR];
	double mag = 0;
	int exact = 1;
	memcpy(od, V[el[0]].d, sizeof od);
	od[ax] = 0;
	for (int i = 0; i < n; i++) {
		od[ax] += V[el[i]].d[ax];
		mag = fmax(mag, V[el[i]].mag);
		exact &= V[el[i]].exact;
	}
	int r = V[el[0]].rank;
	char args[64], ty[640];
	sprintf(args, "%%%d, I64(%d)", mt, rnd(3) == 0 ? ax - r : ax);
	sprintf(ty, "%s, <Int64, NoShape>", tt);
	return tensor_node("Concat", args, ty, NULL, r, od, mag, exact);
}

static int op_concat(void)
{
	CatCtx c;
	c.a = pick_rank(1, 4);
	if (c.a < 0)
		return -1;
	int r = V[c.a].rank;
	c.ax = (int)rnd((uint32_t)r);
	int n = rnd(3) ? 2 : 3, el[3];
	el[0] = c.a;
	int64_t len = V[c.a].d[c.ax];
	for (int i = 1; i < n; i++) {
		el[i] = rnd(6) == 0 ? c.a : pick(f_cat, &c);
		len += V[el[i]].d[c.ax];
	}
	int64_t od[MAXR];
	memcpy(od, V[c.a].d, sizeof od);
	od[c.ax] = len;
	if (len > MAXDIM || numel(od, r) > MAXEL)
		return -1;
	if (rnd(2)) { /* not always the first element first */
		int t = el[0];
		el[0] = el[n - 1], el[n - 1] = t;
	}
	char args[256], ty[384], tt[512];
	for (int i = 0; i < n; i++)
		use(el[i]);
	operands(args, ty, el, n);
	tuple_type(tt, el, n);
	int mt = emit("MakeTuple", args, "", ty, tt);
	concat_node(mt, el, n, c.ax, tt);
	/* a second reader of the same MakeTuple now and then */
	if (rnd(3) == 0) {
		int same = 1;
		for (int i = 1; i < n; i++)
			same &= memcmp(V[el[i]].d, V[el[0]].d, sizeof(int64_t) * (size_t)r) == 0;
		if (same && rnd(2)) {
			double mag = 0;
			for (int i = 0; i < n; i++)
				mag += V[el[i]].mag;
			sprintf(args, "%%%d", mt);
			tensor_node("AddN", args, tt, NULL, r, V[el[0]].d, mag, 0);
		} else {
			int ax2 = c.ax;
			if (same && rnd(2))
				ax2 = (int)rnd((uint32_t)r);
			od[ax2] = V[el[0]].d[ax2] * n;
			if (ax2 == c.ax || (od[ax2] <= MAXDIM && numel(od, r) <= MAXEL))
				concat_node(mt, el, n, ax2, tt);
		}
		made++;
	}
	return 0;
}

/* ----------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	int loss = argc == 4 && strcmp(argv[3], "loss") == 0;
	if (argc < 2 || argc > 4 || (argc == 4 && !loss)) {
		fprintf(stderr, "usage: randgraph SEED [N_OPS] [loss] > out.ir\n");
		return 2;
	}
	uint64_t seed = strtoull(argv[1], NULL, 10);
	int nops = argc >= 3 ? atoi(argv[2]) : 14;
	if (nops < 1 || nops > 200) {
		fprintf(stderr, "randgraph: N_OPS must be 1 to 200\n");
		return 2;
	}
	rng = seed * 2654435761u + 7;
	body = open_memstream(&body_text, &body_len);
	params = open_memstream(&params_text, &params_len);
	if (!body || !params)
		return 3;

	/* one or two inputs of rank 2 or 3 */
	int nin = 1 + (int)rnd(2);
	for (int i = 0; i < nin; i++) {
		int64_t d[3] = {dim(), dim(), dim()};
		int r = 2 + (int)rnd(2);
		while (numel(d, r) > MAXEL / 2)
			d[rnd((uint32_t)r)] = 2;
		input(r, d);
	}
	static int (*const ops[])(void) = {op_matmul,  op_matmul,    op_batchmatmul, op_binary,  op_binary,
	                                   op_binary,  op_unary,     op_unary,       op_reshape, op_reshape,
	                                   op_transpose, op_reduce, op_softmax,     op_split,   op_concat};
	int tries = 0;
	while (made < nops && tries++ < 100 * nops)
		if (ops[rnd(sizeof ops / sizeof *ops)]() == 0)
			made++;

	/* return what nobody reads */
	int outs[MAXV], no = 0;
	for (int i = 0; i < nv; i++)
		if (V[i].output && !V[i].uses && V[i].ref[0])
			outs[no++] = i;
	char ret[64], rt[4096];
	if (no == 0)
		outs[no++] = nv - 1;
	if (loss) { /* the scalar sum of every output's ReduceSum */
		int64_t ax[MAXR];
		int acc = -1;
		for (int i = 0; i < no; i++) {
			char args[256], ty[384];
			int a = outs[i], r = a; /* a scalar is its own sum */
			for (int k = 0; k < V[a].rank; k++)
				ax[k] = k;
			if (V[a].rank > 0) {
				use(a);
				operands(args, ty, &a, 1);
				add_ints(args, ty, ax, V[a].rank);
				strcat(args, ", Bool(0)");
				strcat(ty, ", <Bool, NoShape>");
				r = tensor_node("ReduceSum", args, ty,
				                "output_names: [y], input_names: [input_x, axis, keep_dims]", 0, ax,
				                V[a].mag * (double)numel(V[a].d, V[a].rank), 0);
			}
			if (acc >= 0) {
				int ab[2] = {acc, r};
				use(acc), use(r);
				operands(args, ty, ab, 2);
				r = tensor_node("Add", args, ty, "output_names: [output], input_names: [x, y]", 0, ax,
				                V[acc].mag + V[r].mag, 0);
			}
			acc = r;
		}
		outs[0] = acc;
		no = 1;
	}
	if (no == 1) {
		sprintf(ret, "%s", V[outs[0]].ref);
		vtype(rt, &V[outs[0]]);
	} else {
		char args[2048], ty[4096];
		operands(args, ty, outs, no);
		tuple_type(rt, outs, no);
		sprintf(ret, "%%%d", emit("MakeTuple", args, "", ty, rt));
	}
	fprintf(body, "  Return(%s)\n      : (%s)\n      # Fullname with scope: (Default/Return-op1)\n}\n", ret, rt);
	fclose(body);
	fclose(params);

	printf("# randgraph %" PRIu64 " %d%s: a random %s (testsuite/gen/randgraph.c)\n", seed, nops,
	       loss ? " loss" : "", loss ? "graph with a loss" : "forward graph");
	printf("# IR entry: @main\n# Total subgraphs: 1\n\n# Total params: %d\n# Params:\n%s\n", npar, params_text);
	printf("Node counting information:\nTotal number of nodes: 0\nTotal number of cnodes: 0\n\n");
	printf("subgraph attr:\nsubgraph instance: main : 0x1\nsubgraph @main() {\n%s", body_text);
	free(body_text);
	free(params_text);
	return ferror(stdout) ? 3 : 0;
}
