/* test_core.c - cmocka unit tests for the IR core: hashes, interning,
 * values, shapes and shape inference, parse + print round trips, the output
 * set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>

#include <cmocka.h>

#include "sappc.h"

static void test_std_hash(void **state)
{
	(void)state;
	/* verified values from ir-format.md §1.10 / parallel-lowering.md Appendix A */
	static const struct {
		const char *s;
		uint64_t h;
	} v[] = {
		{"0-1", 5004544844489628105ULL},
		{"2-6", 511848487187618470ULL},
		{"0-4", 16453000547691086251ULL},
		{"0-1-2-3", 6301172352641561019ULL},
		{"0-2-4-6", 5226697808808137312ULL},
		{"0-1-2-3-4-5-6-7", 12158923167718251343ULL},
		{"Default/MatMul-op1_0", 15773666391001111732ULL},
		{"Default/network-WithLossCell/_backbone-Net/MatMul-op4_0", 11795743325248501408ULL},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		size_t n = strlen(v[i].s);
		assert_int_equal(std_hash_bytes(v[i].s, n), v[i].h);
		/* in two steps, whatever part is known first */
		for (size_t known = 0; known <= n + 3; known++) {
			StdHash st;
			std_hash_start(&st, v[i].s, n, known);
			assert_int_equal(std_hash_finish(&st, v[i].s), v[i].h);
		}
	}
}

static void test_intern(void **state)
{
	(void)state;
	Sym a = intern_cstr("MatMul"), b = intern("MatMulX", 6), c = intern_cstr("BiasAdd");
	assert_int_equal(a, b);
	assert_int_not_equal(a, c);
	assert_string_equal(sym_str(c), "BiasAdd");
	assert_int_equal(sym_len(c), 7);
	for (int i = 0; i < 20000; i++) { /* forces rehashing */
		char buf[32];
		snprintf(buf, sizeof buf, "sym%d", i);
		Sym s = intern_cstr(buf);
		assert_string_equal(sym_str(s), buf);
	}
	assert_int_equal(intern_cstr("MatMul"), a);
	/* the hash reads eight bytes a step: every tail length, and strings
	 * that differ only in their last byte or only past the first word */
	char lng[64];
	memset(lng, 'x', sizeof lng);
	Sym prev = 0;
	for (size_t n = 0; n < 40; n++) {
		Sym s = intern(lng, n);
		assert_int_equal(sym_len(s), n);
		assert_int_not_equal(s, prev);
		assert_int_equal(intern(lng, n), s);
		prev = s;
	}
	char v1[] = "Default/network/layer-0/Reshape", v2[] = "Default/network/layer-0/Reshapf";
	assert_int_not_equal(intern_cstr(v1), intern_cstr(v2));
	assert_string_equal(sym_str(intern_cstr(v2)), v2);
	/* in two steps (intern_prepare, intern_hashed): the Sym intern gives,
	 * for a new text and a known one, short (the front cache) and long */
	const char *two[] = {"Relu", "a-name-never-seen-before/in/this/test-op0", "BiasAdd", v1};
	for (int i = 0; i < 4; i++) {
		size_t n = strlen(two[i]);
		Sym s = intern_hashed(two[i], n, intern_prepare(two[i], n));
		assert_int_equal(s, intern(two[i], n));
		assert_string_equal(sym_str(s), two[i]);
	}
}

/* deferred symbols: sym_format writes the text, sym_str forms (and
 * interns) it on demand, sym_same is text equality across deferred and
 * interned Syms */
/* sym_has_prefix: a deferred name's prefix may end inside its number or
 * its suffix */
static void test_has_prefix(void **state)
{
	(void)state;
	Sym pre = intern_cstr("parallel_"), sfx = intern_cstr("AllGather");
	Sym d = sym_defer(pre, 4096, sfx); /* parallel_4096AllGather */
	assert_true(sym_has_prefix(d, "parallel_"));
	assert_true(sym_has_prefix(d, "parallel_40"));
	assert_true(sym_has_prefix(d, "parallel_4096All"));
	assert_true(sym_has_prefix(d, "parallel_4096AllGather"));
	assert_false(sym_has_prefix(d, "parallel_4096AllGatherX"));
	assert_false(sym_has_prefix(d, "parallel_5"));
	assert_false(sym_has_prefix(d, "paralel"));
	assert_true(sym_has_prefix(sfx, "All"));
	assert_true(sym_has_prefix(sfx, ""));
	assert_false(sym_has_prefix(sfx, "AllGathers"));
	assert_false(sym_has_prefix(0, "A"));
}

static void test_defer(void **state)
{
	(void)state;
	Sym pre = intern_cstr("redistribution_op_"), ag = intern_cstr("AllGather"), rs = intern_cstr("Reshape");
	Sym a = sym_defer(pre, 18446744073709551615ULL, ag);
	assert_true(sym_is_deferred(a));
	assert_false(sym_is_deferred(ag));
	Sym a2 = sym_defer(pre, 18446744073709551615ULL, ag);
	assert_true(sym_same(a, a2));
	assert_false(sym_same(sym_defer(pre, 18446744073709551615ULL, rs), a));
	assert_false(sym_same(sym_defer(pre, 7, ag), a));
	assert_false(sym_same(a, ag));
	assert_true(sym_same(ag, ag));
	assert_false(sym_same(ag, rs));
	char buf[128];
	assert_int_equal(sym_format(a, buf, sizeof buf), 18 + 20 + 9);
	assert_string_equal(buf, "redistribution_op_18446744073709551615AllGather");
	assert_int_equal(sym_format(ag, buf, sizeof buf), 9);
	assert_string_equal(buf, "AllGather");
	Sym z = sym_defer(pre, 0, rs);
	Sym zi = intern_cstr("redistribution_op_0Reshape");
	assert_true(sym_same(z, zi)); /* before and after z's text is formed */
	assert_int_equal(sym_len(z), 26);
	assert_string_equal(sym_str(z), "redistribution_op_0Reshape");
	assert_ptr_equal(sym_str(z), sym_str(zi));
	assert_true(sym_same(zi, z));
	assert_false(sym_same(z, intern_cstr("redistribution_op_0Reshapf")));
	Sym many[10000];
	for (uint64_t i = 0; i < 10000; i++) /* forces the array to grow */
		many[i] = sym_defer(pre, i * 0x9e3779b97f4a7c15ULL, ag);
	/* every sym_str() here interns a new text and so, again and again,
	 * grows the entry table under the call: the text must come from the
	 * table as it is after the growth (a crash of --svg on big plans) */
	for (uint64_t i = 0; i < 10000; i++) {
		snprintf(buf, sizeof buf, "redistribution_op_%lluAllGather",
		         (unsigned long long)(i * 0x9e3779b97f4a7c15ULL));
		if (i & 1) /* sym_len forms the text too */
			assert_int_equal(sym_len(many[i]), strlen(buf));
		assert_string_equal(sym_str(many[i]), buf);
	}
	assert_true(sym_same(sym_defer(pre, 18446744073709551615ULL, ag), a));
	/* a formed name keeps its text in place of its parts: it reads,
	 * compares, prints and prefixes as before it was formed */
	Sym f = sym_defer(pre, 42, rs), g = sym_defer(pre, 42, rs);
	assert_string_equal(sym_str(f), "redistribution_op_42Reshape");
	assert_true(sym_same(f, g));
	assert_true(sym_same(g, f));
	assert_false(sym_same(f, sym_defer(pre, 4, rs)));
	assert_int_equal(sym_format(f, buf, sizeof buf), 27);
	assert_string_equal(buf, "redistribution_op_42Reshape");
	assert_int_equal(sym_format(f, buf, 27 - 2 + 20), 0); /* what an unformed one gives */
	assert_int_equal(sym_format(g, buf, 27 - 2 + 20), 0);
	assert_true(sym_has_prefix(f, "redistribution_op_4"));
	assert_false(sym_has_prefix(f, "redistribution_op_5"));
	Sym pf = sym_prefixed("x/", f);
	assert_string_equal(sym_str(pf), "x/redistribution_op_42Reshape");
	sym_str(g);
	assert_true(sym_same(f, g)); /* both formed */
}

/* keymap: equal keys share a value, different lengths and orders do
 * not, values stay put while the table grows, entries come back in
 * insertion order */
static void test_keymap(void **state)
{
	(void)state;
	KeyMap m;
	keymap_init(&m, sizeof(int64_t));
	int fresh;
	int64_t k[3] = {1, 2, 3};
	int64_t *first = keymap_get(&m, k, 3, &fresh);
	assert_int_equal(fresh, 1);
	*first = 42;
	assert_ptr_equal(keymap_get(&m, k, 3, &fresh), first);
	assert_int_equal(fresh, 0);
	int64_t *two = keymap_get(&m, k, 2, &fresh); /* a prefix is another key */
	assert_int_equal(fresh, 1);
	assert_int_equal(*two, 0);
	int64_t r[3] = {3, 2, 1};
	keymap_get(&m, r, 3, &fresh);
	assert_int_equal(fresh, 1);
	int64_t *empty = keymap_get(&m, NULL, 0, &fresh);
	assert_int_equal(fresh, 1);
	assert_ptr_equal(keymap_get(&m, NULL, 0, &fresh), empty);
	for (int64_t i = 0; i < 5000; i++) {
		int64_t kk[2] = {i, -i};
		*(int64_t *)keymap_get(&m, kk, 2, NULL) = i;
	}
	assert_int_equal(m.n, 5004);
	assert_int_equal(*first, 42);
	assert_ptr_equal(keymap_get(&m, k, 3, &fresh), first);
	assert_int_equal(fresh, 0);
	for (int64_t i = 0; i < 5000; i++) {
		int64_t kk[2] = {i, -i};
		assert_int_equal(*(int64_t *)keymap_get(&m, kk, 2, &fresh), i);
		assert_int_equal(fresh, 0);
	}
	const int64_t *key;
	uint32_t nkey;
	assert_ptr_equal(keymap_at(&m, 0, &key, &nkey), first);
	assert_int_equal(nkey, 3);
	assert_int_equal(key[2], 3);
	assert_int_equal(*(int64_t *)keymap_at(&m, 4 + 4999, &key, &nkey), 4999);
	assert_int_equal(key[1], -4999);
	/* long keys are hashed by a sample of their words: keys that differ
	 * in one word anywhere are still different keys */
	static int64_t big[4096];
	for (int i = 0; i < 4096; i++)
		big[i] = 16 * i;
	int64_t *b0 = keymap_get(&m, big, 4096, &fresh);
	assert_int_equal(fresh, 1);
	*b0 = 1;
	for (int at = 1; at < 4096; at += 97) {
		big[at]++;
		int64_t *bi = keymap_get(&m, big, 4096, &fresh);
		assert_int_equal(fresh, 1);
		*bi = at + 100;
		big[at]--;
	}
	assert_ptr_equal(keymap_get(&m, big, 4096, &fresh), b0);
	assert_int_equal(fresh, 0);
	big[97 * 3 + 1]++;
	assert_int_equal(*(int64_t *)keymap_get(&m, big, 4096, &fresh), 97 * 3 + 1 + 100);
	assert_int_equal(fresh, 0);
	keymap_free(&m);
	assert_int_equal(m.n, 0);
}

/* fmt_i64/fmt_u64: the printer's and the lowering's decimal text */
static void test_fmt_int(void **state)
{
	(void)state;
	static const struct {
		int64_t v;
		const char *s;
	} v[] = {{0, "0"},       {7, "7"},     {10, "10"},   {99, "99"},         {100, "100"},
		 {-1, "-1"},     {-10, "-10"}, {-99, "-99"}, {-100, "-100"},     {1000000007, "1000000007"},
		 {INT64_MAX, "9223372036854775807"}, {INT64_MIN, "-9223372036854775808"}};
	char buf[24];
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		size_t n = fmt_i64(buf, v[i].v);
		assert_int_equal(n, strlen(v[i].s));
		assert_memory_equal(buf, v[i].s, n);
	}
	size_t n = fmt_u64(buf, UINT64_MAX);
	assert_int_equal(n, 20);
	assert_memory_equal(buf, "18446744073709551615", 20);
}

static void test_ops(void **state)
{
	(void)state;
	assert_int_equal(op_lookup("MatMul", 6), OP_MatMul);
	assert_int_equal(op_lookup("PrimFunc_MatMul", 15), OP_MatMul);
	assert_int_equal(op_lookup("_VirtualDiv", 11), OP_VirtualDiv);
	assert_int_equal(op_lookup("NoSuchOp", 8), OP_UNKNOWN);
	assert_true(op_table[OP_ReLU].flags & OPF_ELIMINATE);
	assert_false(op_table[OP_MatMul].flags & OPF_ELIMINATE);
}

static Module *parse(const char *text, int fragment)
{
	size_t n = strlen(text);
	char *buf = malloc(n + 2);
	memcpy(buf, text, n + 1);
	buf[n + 1] = 0;
	Module *m = ir_parse("<test>", buf, n, fragment);
	/* the module keeps no pointer into the buffer, but diag does (to show
	 * source lines of later errors): forget it before freeing it */
	diag_set_source(NULL);
	free(buf);
	return m;
}

static char *print(const Module *m)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	ir_print_module(f, m);
	fclose(f);
	return out;
}

static const char *mlp =
	"%para1_x: <Tensor[Float32], (256, 784)>\n"
	"%para2_w: <Ref[Tensor[Float32]], (512, 784), ref_key=w>  :  has_default\n"
	"  %0(a) = Load(%para2_w, UMonad[U])\n"
	"      : (<Ref[Tensor[Float32]], (512, 784), ref_key=w>, <UMonad, NoShape>) -> (<Tensor[Float32], (512, 784)>)\n"
	"  %1(b) = MatMul(%para1_x, %0) {instance name: matmul} primitive_attrs: {transpose_a: Bool(0), transpose_b: Bool(1)} {in_strategy: ((4, 2), (1, 2))}\n"
	"      : (<Tensor[Float32], (256, 784)>, <Tensor[Float32], (512, 784)>) -> (<Tensor[Float32], (256, 512)>)\n"
	"      # Fullname with scope: (Default/MatMul-op1)\n"
	"  Return(%1)\n"
	"      : (<Tensor[Float32], (256, 512)>)\n";

/* a copy prints like its original, after the original is gone, and the
 * pipeline lowers it to the same rank graph */
static void test_clone(void **state)
{
	(void)state;
	Module *m = parse(mlp, 0);
	assert_non_null(m);
	Module *c = ir_module_clone(m), *again = ir_module_clone(m);
	char *a = print(m);
	ir_module_free(m);
	char *b = print(c);
	assert_string_equal(a, b);
	Options o = {0};
	o.device_num = 8;
	o.pipeline_stages = o.micro_batch_num = 1;
	o.mem_coef = 0.1;
	o.device_memory = 1e12;
	o.world_group = "hccl_world_group";
	o.quiet = 1;
	PassManagerOptions pm = {0};
	for (int i = 0; i < pass_count; i++)
		if (pass_table[i].in_default)
			pm.passes[pm.npasses++] = &pass_table[i];
	assert_int_equal(pm_run(c, &o, &pm), 0);
	char *lowered = print(c);
	assert_string_not_equal(lowered, a); /* the pipeline did change it */
	Module *d = ir_module_clone(again); /* a copy of a copy */
	ir_module_free(again);
	assert_int_equal(pm_run(d, &o, &pm), 0);
	char *lowered2 = print(d);
	assert_string_equal(lowered, lowered2);
	free(a);
	free(b);
	free(lowered);
	free(lowered2);
	ir_module_free(c);
	ir_module_free(d);
}

static void test_parse_minimal(void **state)
{
	(void)state;
	Module *m = parse(mlp, 0);
	assert_non_null(m);
	Graph *g = ir_entry(m);
	assert_int_equal(g->params.n, 2);
	assert_int_equal(g->nodes.n, 3);
	Node *mm = g->nodes.a[1];
	assert_int_equal(mm->op, OP_MatMul);
	assert_string_equal(sym_str(mm->instance), "matmul");
	assert_string_equal(ir_node_fullname(mm), "Default/MatMul-op1");
	Value *s = ir_attr_get(ir_node_strat(mm), "in_strategy");
	assert_non_null(s);
	assert_int_equal(s->kind, V_TUPLE);
	int64_t d[4];
	assert_int_equal(value_int_list(&s->u.elems[0], d, 4), 2);
	assert_int_equal(d[0], 4);
	assert_int_equal(d[1], 2);
	assert_true(mm->args[0].kind == V_NODE && mm->args[0].u.node == g->params.a[0]);
	assert_true(g->params.a[1]->has_default);
	assert_int_equal(pass_verify(m, NULL), 0);
	/* print -> parse -> print is a fixed point */
	char *p1 = print(m);
	Module *m2 = parse(p1, 0);
	assert_non_null(m2);
	char *p2 = print(m2);
	assert_string_equal(p1, p2);
	free(p1);
	free(p2);
	ir_module_free(m2);
	ir_module_free(m);
}

static void *fullname_job(void *arg)
{
	return (void *)ir_node_fullname(arg);
}

/* --simulate asks ir_node_phase() (so ir_node_fullname()) from the ranks'
 * threads: a name formed on one thread must not overwrite another's */
static void test_fullname_threads(void **state)
{
	(void)state;
	Module *m = parse(mlp, 0);
	assert_non_null(m);
	Node *mm = ir_entry(m)->nodes.a[1];
	/* the split form the reader keeps for "<scope>-op<k>" names: formed on demand */
	mm->scope = intern_cstr("Gradients/Default/MatMul");
	mm->scope_kind = SCOPE_FULLNAME;
	mm->scope_op = 8;
	const char *mine = ir_node_fullname(mm);
	assert_string_equal(mine, "Gradients/Default/MatMul-op7");
	pthread_t th;
	void *theirs = NULL;
	assert_int_equal(pthread_create(&th, NULL, fullname_job, mm), 0);
	assert_int_equal(pthread_join(th, &theirs), 0);
	assert_non_null(theirs);
	assert_ptr_not_equal(theirs, mine); /* one static buffer would be the same */
	assert_int_equal(ir_node_phase(mm), IR_PHASE_BWD);
	ir_module_free(m);
}

static void test_infer(void **state)
{
	(void)state;
	const char *bad = "%para1_x: <Tensor[Float32], (256, 784)>\n"
	                  "%para2_w: <Tensor[Float32], (512, 784)>\n"
	                  "  %0(b) = MatMul(%para1_x, %para2_w) primitive_attrs: {transpose_b: Bool(1)}\n"
	                  "      : (<Tensor[Float32], (256, 784)>, <Tensor[Float32], (512, 784)>) -> "
	                  "(<Tensor[Float32], (256, 513)>)\n"
	                  "  Return(%0)\n"
	                  "      : (<Tensor[Float32], (256, 513)>)\n";
	diag_set_quiet(1);
	Module *m = parse(bad, 0);
	assert_non_null(m);
	int e0 = diag_errors();
	assert_int_equal(pass_verify(m, NULL), 1);
	assert_int_equal(diag_errors(), e0 + 1);
	int64_t d[MAX_RANK];
	int r;
	char why[128];
	assert_int_equal(ir_infer_shape(ir_entry(m)->nodes.a[0], d, &r, why, sizeof why), 1);
	assert_int_equal(r, 2);
	assert_int_equal(d[0], 256);
	assert_int_equal(d[1], 512);
	ir_module_free(m);
}

/* GetNext (dataset sink mode): a modelled source whose outputs are the
 * declared tuple; at most a monad as operand. */
static void test_getnext(void **state)
{
	(void)state;
	static const char *const text[2] = {
		"  %0(b) = GetNext(U) primitive_attrs: {types: [Float32, Float32], shapes: [(32, 16), (32, 4)], "
		"output_num: I64(2), shared_name: \"ds\"}\n"
		"      : (<UMonad, NoShape>) -> (<Tuple[Tensor[Float32]*2], TupleShape((32, 16), (32, 4))>)\n"
		"  %1(x) = TupleGetItem(%0, I64(1))\n"
		"      : (<Tuple[Tensor[Float32]*2], TupleShape((32, 16), (32, 4))>, <Int64, NoShape>) -> "
		"(<Tensor[Float32], (32, 4)>)\n"
		"  Return(%1)\n"
		"      : (<Tensor[Float32], (32, 4)>)\n",
		"  %0(b) = GetNext(U, U)\n"
		"      : (<UMonad, NoShape>, <UMonad, NoShape>) -> (<Tuple[Tensor[Float32]*1], TupleShape((32, 16))>)\n"
		"  Return(%0)\n"
		"      : (<Tuple[Tensor[Float32]*1], TupleShape((32, 16))>)\n",
	};
	assert_int_equal(op_lookup("GetNext", 7), OP_GetNext);
	assert_int_equal(op_table[OP_GetNext].family, FAM_GETNEXT);
	diag_set_quiet(1);
	Module *m = parse(text[0], 0);
	assert_non_null(m);
	Node *n = ir_entry(m)->nodes.a[0];
	assert_false(op_is_opaque(n));
	assert_int_equal(pass_verify(m, NULL), 0);
	assert_int_equal(n->out.shape.kind, SK_TUPLE);
	assert_int_equal(n->out.shape.rank, 2);
	assert_int_equal(n->out.shape.sub[1].dims[1], 4);
	ir_module_free(m);
	m = parse(text[1], 0);
	assert_non_null(m);
	assert_int_equal(pass_verify(m, NULL), 1);
	ir_module_free(m);
}

/* ScatterDiv, RandomChoiceWithMask and the MoE routing pair: known, not
 * opaque; ScatterDiv's and MoeFinalizeRouting's shape rules, and the
 * operand counts verify holds them to. */
static void test_scatter_moe(void **state)
{
	(void)state;
	static const char *const names[4] = {"ScatterDiv", "RandomChoiceWithMask", "MoeInitRouting",
	                                     "MoeFinalizeRouting"};
	static const int ops[4] = {OP_ScatterDiv, OP_RandomChoiceWithMask, OP_MoeInitRouting, OP_MoeFinalizeRouting};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(op_lookup(names[i], strlen(names[i])), ops[i]);
		assert_int_equal(op_table[ops[i]].family, i ? FAM_UNSPLIT : FAM_SCATTER);
	}
	diag_set_quiet(1);
	Module *m = parse(
	    "%para1_t: <Ref[Tensor[Float32]], (16, 4, 8)>  :  has_default\n"
	    "%para2_i: <Tensor[Int32], (2, 3)>\n"
	    "%para3_u: <Tensor[Float32], (2, 3, 4, 8)>\n"
	    "%para4_v: <Tensor[Float32], (2, 3, 4, 4)>\n"
	    "%para5_x: <Tensor[Float32], (6, 8)>\n"
	    "%para6_s: <Tensor[Float32], (6, 2)>\n"
	    "%para7_r: <Tensor[Int32], (12)>\n"
	    "%para8_b: <Tensor[Float32], (4, 8)>\n"
	    "%para9_e: <Tensor[Float32], (12, 8)>\n"
	    "  %0(a) = ScatterDiv(%para1_t, %para2_i, %para3_u, U)\n"
	    "      : (<Ref[Tensor[Float32]], (16, 4, 8)>, <Tensor[Int32], (2, 3)>, <Tensor[Float32], (2, 3, 4, 8)>, "
	    "<UMonad, NoShape>) -> (<Tensor[Float32], (16, 4, 8)>)\n"
	    "  %1(b) = ScatterDiv(%para1_t, %para2_i, %para4_v, U)\n"
	    "      : (<Ref[Tensor[Float32]], (16, 4, 8)>, <Tensor[Int32], (2, 3)>, <Tensor[Float32], (2, 3, 4, 4)>, "
	    "<UMonad, NoShape>) -> (<Tensor[Float32], (16, 4, 8)>)\n"
	    "  %2(c) = MoeFinalizeRouting(%para9_e, %para5_x, None, %para8_b, %para6_s, %para7_r, %para6_s)\n"
	    "      : (<Tensor[Float32], (12, 8)>, <Tensor[Float32], (6, 8)>, <None, NoShape>, <Tensor[Float32], (4, "
	    "8)>, "
	    "<Tensor[Float32], (6, 2)>, <Tensor[Int32], (12)>, <Tensor[Float32], (6, 2)>) -> (<Tensor[Float32], (6, "
	    "8)>)\n"
	    "  %3(d) = MoeFinalizeRouting(%para5_x, %para5_x, None, %para8_b, %para6_s, %para7_r, %para6_s)\n"
	    "      : (<Tensor[Float32], (6, 8)>, <Tensor[Float32], (6, 8)>, <None, NoShape>, <Tensor[Float32], (4, "
	    "8)>, "
	    "<Tensor[Float32], (6, 2)>, <Tensor[Int32], (12)>, <Tensor[Float32], (6, 2)>) -> (<Tensor[Float32], (6, "
	    "8)>)\n"
	    "  Return(%2)\n",
	    0);
	assert_non_null(m);
	int64_t d[MAX_RANK];
	int r;
	char why[200];
	Node **a = ir_entry(m)->nodes.a;
	for (int i = 0; i < 4; i++)
		assert_false(op_is_opaque(a[i]));
	assert_int_equal(ir_infer_shape(a[0], d, &r, why, sizeof why), 1);
	assert_int_equal(r * 1000 + d[0] * 100 + d[1] * 10 + d[2], 3000 + 1600 + 40 + 8);
	assert_int_equal(ir_infer_shape(a[1], d, &r, why, sizeof why), -1); /* updates' last dimension 4, not 8 */
	assert_non_null(strstr(why, "updates dimension 3 is 4"));
	assert_int_equal(ir_infer_shape(a[2], d, &r, why, sizeof why), 1);
	assert_int_equal(r * 100 + d[0] * 10 + d[1], 268);
	assert_int_equal(ir_infer_shape(a[3], d, &r, why, sizeof why), -1); /* 6 expanded rows for 6 x top-2 */
	assert_non_null(strstr(why, "need 12 expanded rows"));
	ir_module_free(m);
	/* RandomChoiceWithMask takes x and at most count, seed, seed2 */
	for (int extra = 0; extra < 2; extra++) {
		char text[1024];
		snprintf(text, sizeof text,
		         "%%para1_m: <Tensor[Bool], (4, 4)>\n"
		         "  %%0(a) = RandomChoiceWithMask(%%para1_m, I64(4), I64(0), I64(0)%s)\n"
		         "      : (<Tensor[Bool], (4, 4)>, <Int64, NoShape>, <Int64, NoShape>, <Int64, NoShape>%s) -> "
		         "(<Tuple[Tensor[Int32],Tensor[Bool]], TupleShape((4, 2), (4))>)\n"
		         "  Return(%%0)\n"
		         "      : (<Tuple[Tensor[Int32],Tensor[Bool]], TupleShape((4, 2), (4))>)\n",
		         extra ? ", I64(0)" : "", extra ? ", <Int64, NoShape>" : "");
		m = parse(text, 0);
		assert_non_null(m);
		assert_int_equal(pass_verify(m, NULL), extra);
		ir_module_free(m);
	}
}

/* MoeInitRoutingV2 (ir_moe_v2_info) and MoeComputeExpertTokens
 * (SHAPE_MOETOKENS): lookup, family, the output shapes of the dropless,
 * active and drop/pad modes, the parameters they refuse, and verify
 * checking a declared output against them. */
static void test_moe_v2(void **state)
{
	(void)state;
	assert_int_equal(op_lookup("MoeInitRoutingV2", 16), OP_MoeInitRoutingV2);
	assert_int_equal(op_lookup("MoeComputeExpertTokens", 22), OP_MoeComputeExpertTokens);
	assert_int_equal(op_table[OP_MoeInitRoutingV2].family, FAM_UNSPLIT);
	assert_int_equal(op_table[OP_MoeComputeExpertTokens].family, FAM_UNSPLIT);
	diag_set_quiet(1);
	static const struct {
		const char *args; /* active, capacity, experts, drop_pad, count_flag, before_flag */
		int rc;
		int64_t o0[3], o2, o3;
		const char *why;
	} cases[] = {
	    {"I64(0), I64(0), I64(4), I64(0), I64(1), Bool(0)", 1, {12, 8, -1}, 4, -1, NULL},  /* dropless, cumsum */
	    {"I64(5), I64(0), I64(4), I64(0), I64(0), Bool(0)", 1, {5, 8, -1}, -1, -1, NULL},  /* active 5 rows */
	    {"I64(20), I64(0), I64(4), I64(0), I64(2), Bool(0)", 1, {12, 8, -1}, 4, -1, NULL}, /* active > N*K */
	    {"I64(0), I64(3), I64(4), I64(1), I64(0), Bool(1)", 1, {4, 3, 8}, -1, 4, NULL},    /* drop/pad */
	    {"I64(0), I64(7), I64(4), I64(1), I64(0), Bool(0)", -1, {0}, 0, 0, "expert_capacity 7"},
	    {"I64(0), I64(0), I64(0), I64(0), I64(1), Bool(0)", -1, {0}, 0, 0, "expert_num must be positive"},
	    {"I64(0), I64(0), I64(4), I64(2), I64(0), Bool(0)", -1, {0}, 0, 0, "drop_pad_mode is 2"},
	    {"I64(0), I64(0), I64(4), I64(0), I64(3), Bool(0)", -1, {0}, 0, 0, "flag is 3"},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		char text[1024];
		snprintf(
		    text, sizeof text,
		    "%%para1_x: <Tensor[Float32], (6, 8)>\n"
		    "%%para2_e: <Tensor[Int32], (6, 2)>\n"
		    "  %%0(a) = MoeInitRoutingV2(%%para1_x, %%para2_e, %s)\n"
		    "      : (<Tensor[Float32], (6, 8)>, <Tensor[Int32], (6, 2)>, <Int64, NoShape>, <Int64, NoShape>, "
		    "<Int64, NoShape>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>) -> "
		    "(<Tuple[Tensor[Float32],Tensor[Int32],Tensor[Int32],Tensor[Int32]], TupleShape((1), (1), (1), "
		    "(1))>)\n"
		    "  Return(%%0)\n",
		    cases[c].args);
		Module *m = parse(text, 0);
		assert_non_null(m);
		Node *n = ir_entry(m)->nodes.a[0];
		assert_false(op_is_opaque(n));
		MoeV2Info mi;
		char why[256] = "";
		assert_int_equal(ir_moe_v2_info(n, &mi, why, sizeof why), cases[c].rc);
		if (cases[c].rc < 0) {
			assert_non_null(strstr(why, cases[c].why));
		} else {
			int r0 = cases[c].o0[2] < 0 ? 2 : 3;
			assert_int_equal(mi.orank[0], r0);
			for (int i = 0; i < r0; i++)
				assert_int_equal(mi.out[0][i], cases[c].o0[i]);
			assert_int_equal(mi.orank[1], 1);
			assert_int_equal(mi.out[1][0], 12);
			assert_int_equal(mi.orank[2], cases[c].o2 < 0 ? -1 : 1);
			assert_int_equal(mi.orank[3], cases[c].o3 < 0 ? -1 : 1);
			if (cases[c].o2 >= 0)
				assert_int_equal(mi.out[2][0], cases[c].o2);
			if (cases[c].o3 >= 0)
				assert_int_equal(mi.out[3][0], cases[c].o3);
		}
		ir_module_free(m);
	}
	/* verify: a declared expanded_x of 6 rows for 6 tokens x top-2 is refused */
	for (int bad = 0; bad < 2; bad++) {
		char text[2048];
		snprintf(
		    text, sizeof text,
		    "%%para1_x: <Tensor[Float32], (6, 8)>\n"
		    "%%para2_e: <Tensor[Int32], (6, 2)>\n"
		    "  %%0(a) = MoeInitRoutingV2(%%para1_x, %%para2_e, I64(0), I64(0), I64(4), I64(0), I64(1), "
		    "Bool(0))\n"
		    "      : (<Tensor[Float32], (6, 8)>, <Tensor[Int32], (6, 2)>, <Int64, NoShape>, <Int64, NoShape>, "
		    "<Int64, NoShape>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>) -> "
		    "(<Tuple[Tensor[Float32],Tensor[Int32],Tensor[Int32],Tensor[Int32]], TupleShape((%d, 8), (12), "
		    "(4), (4))>)\n"
		    "  Return(%%0)\n"
		    "      : (<Tuple[Tensor[Float32],Tensor[Int32],Tensor[Int32],Tensor[Int32]], TupleShape((%d, 8), "
		    "(12), (4), (4))>)\n",
		    bad ? 6 : 12, bad ? 6 : 12);
		Module *m = parse(text, 0);
		assert_non_null(m);
		assert_int_equal(pass_verify(m, NULL), bad);
		ir_module_free(m);
	}
	/* MoeComputeExpertTokens: (num_expert,) of a 1-D input; a 2-D input
	 * and a missing num_expert are refused */
	Module *m = parse("%para1_s: <Tensor[Int32], (12)>\n"
	                  "%para2_t: <Tensor[Int32], (6, 2)>\n"
	                  "  %0(a) = MoeComputeExpertTokens(%para1_s, I64(5))\n"
	                  "      : (<Tensor[Int32], (12)>, <Int64, NoShape>) -> (<Tensor[Int32], (5)>)\n"
	                  "  %1(b) = MoeComputeExpertTokens(%para2_t, I64(5))\n"
	                  "      : (<Tensor[Int32], (6, 2)>, <Int64, NoShape>) -> (<Tensor[Int32], (5)>)\n"
	                  "  %2(c) = MoeComputeExpertTokens(%para1_s)\n"
	                  "      : (<Tensor[Int32], (12)>) -> (<Tensor[Int32], (5)>)\n"
	                  "  Return(%0)\n",
	                  0);
	assert_non_null(m);
	Node **a = ir_entry(m)->nodes.a;
	int64_t d[MAX_RANK];
	int r;
	char why[200];
	assert_int_equal(ir_infer_shape(a[0], d, &r, why, sizeof why), 1);
	assert_int_equal(r * 10 + d[0], 15);
	assert_int_equal(ir_infer_shape(a[1], d, &r, why, sizeof why), -1);
	assert_non_null(strstr(why, "1-D sorted_experts"));
	assert_int_equal(ir_infer_shape(a[2], d, &r, why, sizeof why), -1);
	assert_non_null(strstr(why, "positive literal num_expert"));
	ir_module_free(m);
}

/* GroupedMatmul (ir_gmm_info): the shapes of its three modes (rows
 * grouped by a cumulative group_list over stacked weights, independent
 * pairs, groups along the shared axis), the forms it refuses, and verify
 * accepting list operands for it and checking its declared list. */
static void test_gmm(void **state)
{
	(void)state;
	assert_int_equal(op_lookup("GroupedMatmul", 13), OP_GroupedMatmul);
	assert_int_equal(op_table[OP_GroupedMatmul].family, FAM_GMM);
#define GMM_TAIL "<None, NoShape>, <None, NoShape>, <None, NoShape>, <None, NoShape>, <None, NoShape>, "
	static const char text[] =
	    "%para1_x: <Tensor[Float32], (10, 8)>\n"
	    "%para2_w: <Tensor[Float32], (3, 8, 4)>\n"
	    "%para3_g: <Tensor[Int64], (3)>\n"
	    "%para4_a: <Tensor[Float32], (2, 5, 8)>\n"
	    "%para5_b: <Tensor[Float32], (8, 6)>\n"
	    "%para6_h: <Tensor[Int64], (2)>\n"
	    "  %0(xl) = MakeTuple(%para1_x)\n"
	    "      : (<Tensor[Float32], (10, 8)>) -> (<Tuple[Tensor[Float32]], TupleShape((10, 8))>)\n"
	    "  %1(wl) = MakeTuple(%para2_w)\n"
	    "      : (<Tensor[Float32], (3, 8, 4)>) -> (<Tuple[Tensor[Float32]], TupleShape((3, 8, 4))>)\n"
	    "  %2(al) = MakeTuple(%para4_a)\n"
	    "      : (<Tensor[Float32], (2, 5, 8)>) -> (<Tuple[Tensor[Float32]], TupleShape((2, 5, 8))>)\n"
	    "  %3(bl) = MakeTuple(%para5_b)\n"
	    "      : (<Tensor[Float32], (8, 6)>) -> (<Tuple[Tensor[Float32]], TupleShape((8, 6))>)\n"
	    "  %4(rows) = GroupedMatmul(%0, %1, None, None, None, None, None, %para3_g, I64(3), I64(0), Bool(0), "
	    "Bool(0))\n"
	    "      : (<Tuple[Tensor[Float32]], TupleShape((10, 8))>, <Tuple[Tensor[Float32]], TupleShape((3, 8, "
	    "4))>, " GMM_TAIL
	    "<Tensor[Int64], (3)>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>, <Bool, NoShape>) -> "
	    "(<Tuple[Tensor[Float32]], TupleShape((10, 4))>)\n"
	    "  %5(pairs) = GroupedMatmul(%2, %3, None, None, None, None, None, None, I64(0), I64(-1), Bool(0), "
	    "Bool(0))\n"
	    "      : (<Tuple[Tensor[Float32]], TupleShape((2, 5, 8))>, <Tuple[Tensor[Float32]], TupleShape((8, "
	    "6))>, " GMM_TAIL
	    "<None, NoShape>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>, <Bool, NoShape>) -> "
	    "(<Tuple[Tensor[Float32]], TupleShape((2, 5, 6))>)\n"
	    "  %6(shared) = GroupedMatmul(%0, %3, None, None, None, None, None, %para3_g, I64(3), I64(2), Bool(0), "
	    "Bool(0))\n"
	    "      : (<Tuple[Tensor[Float32]], TupleShape((10, 8))>, <Tuple[Tensor[Float32]], TupleShape((8, "
	    "6))>, " GMM_TAIL
	    "<Tensor[Int64], (3)>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>, <Bool, NoShape>) -> "
	    "(<Tuple[Tensor[Float32]], TupleShape((3, 10, 6))>)\n"
	    "  %7(tb) = GroupedMatmul(%0, %1, None, None, None, None, None, %para3_g, I64(3), I64(0), Bool(0), "
	    "Bool(1))\n"
	    "  %8(two) = GroupedMatmul(%0, %1, None, None, None, None, None, %para6_h, I64(3), I64(0), Bool(0), "
	    "Bool(0))\n"
	    "      : (<Tuple[Tensor[Float32]], TupleShape((10, 8))>, <Tuple[Tensor[Float32]], TupleShape((3, 8, "
	    "4))>, " GMM_TAIL
	    "<Tensor[Int64], (2)>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>, <Bool, NoShape>) -> "
	    "(<Tuple[Tensor[Float32]], TupleShape((10, 4))>)\n"
	    "  %9(bias) = GroupedMatmul(%0, %1, %3, None, None, None, None, %para3_g, I64(3), I64(0), Bool(0), "
	    "Bool(0))\n"
	    "      : (<Tuple[Tensor[Float32]], TupleShape((10, 8))>, <Tuple[Tensor[Float32]], TupleShape((3, 8, 4))>, "
	    "<Tuple[Tensor[Float32]], TupleShape((8, 6))>, <None, NoShape>, <None, NoShape>, <None, NoShape>, <None, "
	    "NoShape>, <Tensor[Int64], (3)>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>, <Bool, NoShape>) -> "
	    "(<Tuple[Tensor[Float32]], TupleShape((10, 4))>)\n"
	    "  %10(split) = GroupedMatmul(%2, %3, None, None, None, None, None, None, I64(1), I64(-1), Bool(0), "
	    "Bool(0))\n"
	    "      : (<Tuple[Tensor[Float32]], TupleShape((2, 5, 8))>, <Tuple[Tensor[Float32]], TupleShape((8, "
	    "6))>, " GMM_TAIL
	    "<None, NoShape>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>, <Bool, NoShape>) -> "
	    "(<Tuple[Tensor[Float32]], TupleShape((2, 5, 6))>)\n"
	    "  Return(%4)\n";
	diag_set_quiet(1);
	Module *m = parse(text, 0);
	assert_non_null(m);
	Node **a = ir_entry(m)->nodes.a;
	GmmInfo gi;
	char why[256];
	assert_int_equal(ir_gmm_info(a[4], &gi, why, sizeof why), 1);
	assert_int_equal(gi.nout * 10000 + gi.orank[0] * 1000 + gi.out[0][0] * 10 + gi.out[0][1], 12104);
	assert_true(gi.grouped && gi.wstack && gi.groups == 3 && gi.nx == 1 && gi.nw == 1);
	assert_int_equal(ir_gmm_info(a[5], &gi, why, sizeof why), 1);
	assert_int_equal(gi.orank[0] * 1000 + gi.out[0][0] * 100 + gi.out[0][1] * 10 + gi.out[0][2], 3256);
	assert_false(gi.grouped);
	assert_int_equal(ir_gmm_info(a[6], &gi, why, sizeof why), 1);
	assert_int_equal(gi.orank[0] * 10000 + gi.out[0][0] * 1000 + gi.out[0][1] * 10 + gi.out[0][2], 33106);
	assert_int_equal(ir_gmm_info(a[7], &gi, why, sizeof why), -1);
	assert_non_null(strstr(why, "transposed"));
	assert_int_equal(ir_gmm_info(a[8], &gi, why, sizeof why), -1); /* 3 stacked experts, 2 groups */
	assert_non_null(strstr(why, "does not fit 2 groups"));
	assert_int_equal(ir_gmm_info(a[9], &gi, why, sizeof why), -1);
	assert_non_null(strstr(why, "operand 3 (bias"));
	assert_int_equal(ir_gmm_info(a[10], &gi, why, sizeof why), -1);
	assert_non_null(strstr(why, "split_item 1"));
	ir_module_free(m);
	/* verify takes the list operands and checks the declared list */
	for (int bad = 0; bad < 2; bad++) {
		char t2[2048];
		snprintf(
		    t2, sizeof t2,
		    "%%para1_x: <Tensor[Float32], (10, 8)>\n"
		    "%%para2_w: <Tensor[Float32], (3, 8, 4)>\n"
		    "%%para3_g: <Tensor[Int64], (3)>\n"
		    "  %%0(xl) = MakeTuple(%%para1_x)\n"
		    "      : (<Tensor[Float32], (10, 8)>) -> (<Tuple[Tensor[Float32]], TupleShape((10, 8))>)\n"
		    "  %%1(wl) = MakeTuple(%%para2_w)\n"
		    "      : (<Tensor[Float32], (3, 8, 4)>) -> (<Tuple[Tensor[Float32]], TupleShape((3, 8, 4))>)\n"
		    "  %%2(y) = GroupedMatmul(%%0, %%1, None, None, None, None, None, %%para3_g, I64(3), I64(0), "
		    "Bool(0), Bool(0))\n"
		    "      : (<Tuple[Tensor[Float32]], TupleShape((10, 8))>, <Tuple[Tensor[Float32]], TupleShape((3, "
		    "8, 4))>, " GMM_TAIL "<Tensor[Int64], (3)>, <Int64, NoShape>, <Int64, NoShape>, <Bool, NoShape>, "
		    "<Bool, NoShape>) -> (<Tuple[Tensor[Float32]], TupleShape((10, %d))>)\n"
		    "  Return(%%2)\n"
		    "      : (<Tuple[Tensor[Float32]], TupleShape((10, %d))>)\n",
		    bad ? 8 : 4, bad ? 8 : 4);
		m = parse(t2, 0);
		assert_non_null(m);
		assert_int_equal(pass_verify(m, NULL), bad);
		ir_module_free(m);
	}
#undef GMM_TAIL
}

/* FlashAttentionScore / PromptFlashAttention (ir_attention_info): each
 * layout's batch/sequence/heads positions, grouped key/value heads, the
 * output shapes, and the operands it refuses. */
static const char *attn_text(const char *q, const char *k, const char *mask, const char *layout, const char *heads)
{
	static char buf[2048];
	snprintf(buf, sizeof buf,
	         "%%para1_q: <Tensor[Float32], %s>\n%%para2_k: <Tensor[Float32], %s>\n"
	         "%%para3_m: <Tensor[Bool], %s>\n"
	         "  %%0(a) = FlashAttentionScore(%%para1_q, %%para2_k, %%para2_k, None, None, None, %%para3_m, None, "
	         "None, None, I64(%s), F32(1), F32(1), I64(65536), I64(65536), I64(0), %s, I64(0))\n"
	         "  Return(%%0)\n",
	         q, k, mask, heads, layout);
	return buf;
}

static int attn_of(const char *text, AttnInfo *ai, char *why)
{
	Module *m = parse(text, 0);
	assert_non_null(m);
	int rc = ir_attention_info(ir_entry(m)->nodes.a[0], ai, why, 200);
	ir_module_free(m);
	return rc;
}

static void test_attention_shapes(void **state)
{
	(void)state;
	AttnInfo ai;
	char why[200];
	/* BSH: (B, S, N*D); 8 heads of 16, key/value with 2 heads (GQA) */
	assert_int_equal(attn_of(attn_text("(2, 64, 128)", "(2, 32, 32)", "(2, 1, 64, 32)", "I64(0)", "8"), &ai, why), 1);
	assert_int_equal(ai.layout, ATTN_BSH);
	assert_int_equal(ai.bdim * 100 + ai.sdim * 10 + ai.ndim, 12);
	assert_int_equal(ai.head_dim, 16);
	assert_int_equal(ai.kv_heads, 2);
	assert_int_equal(ai.s1, 64);
	assert_int_equal(ai.s2, 32);
	assert_true(ai.kv_split);
	assert_int_equal(ai.nout, 4);
	assert_int_equal(ai.out[0][0] * 1000 + ai.out[0][1] * 100 + ai.out[0][2], 2000 + 800 + 64);
	assert_int_equal(ai.out[0][3], 8);
	assert_int_equal(ai.out[3][2], 128);
	assert_int_equal(ai.role[6], AR_MASK);
	/* BNSD: (B, N, S, D), one key/value head (MQA): no kv split */
	assert_int_equal(attn_of(attn_text("(2, 8, 64, 16)", "(2, 1, 64, 16)", "(64, 64)", "I64(1)", "8"), &ai, why), 1);
	assert_int_equal(ai.bdim * 100 + ai.sdim * 10 + ai.ndim, 21);
	assert_int_equal(ai.kv_heads, 1);
	assert_false(ai.kv_split);
	/* SBH (S, B, H) and BSND (B, S, N, D), the layout also as a string */
	assert_int_equal(attn_of(attn_text("(64, 2, 128)", "(64, 2, 128)", "(64, 64)", "\"SBH\"", "8"), &ai, why), 1);
	assert_int_equal(ai.bdim * 100 + ai.sdim * 10 + ai.ndim, 102);
	assert_int_equal(ai.batch, 2);
	assert_int_equal(attn_of(attn_text("(2, 64, 8, 16)", "(2, 64, 8, 16)", "(64, 64)", "I64(3)", "8"), &ai, why), 1);
	assert_int_equal(ai.layout, ATTN_BSND);
	assert_int_equal(ai.bdim * 100 + ai.sdim * 10 + ai.ndim, 12);
	/* refused: a layout number out of range, heads that do not divide H,
	 * a batch mismatch, a mask of the wrong shape */
	assert_int_equal(attn_of(attn_text("(2, 64, 128)", "(2, 64, 128)", "(64, 64)", "I64(5)", "8"), &ai, why), -1);
	assert_non_null(strstr(why, "input_layout 5 is out of range"));
	assert_int_equal(attn_of(attn_text("(2, 64, 128)", "(2, 64, 128)", "(64, 64)", "I64(0)", "3"), &ai, why), -1);
	assert_int_equal(attn_of(attn_text("(2, 64, 128)", "(4, 64, 128)", "(64, 64)", "I64(0)", "8"), &ai, why), -1);
	assert_int_equal(attn_of(attn_text("(2, 64, 128)", "(2, 64, 128)", "(2, 2, 64, 64)", "I64(0)", "8"), &ai, why),
	                 -1);
	/* IncreFlashAttention: one query position against the cache; its head
	 * count is operand 15, its layout operand 16 */
	assert_int_equal(attn_of("%para1_q: <Tensor[Float32], (2, 1, 64)>\n%para2_k: <Tensor[Float32], (2, 16, 64)>\n"
	                         "  %0(a) = IncreFlashAttention(%para1_q, %para2_k, %para2_k, None, None, None, None, "
	                         "None, None, None, None, None, None, None, None, I64(8), I64(0), F32(1), I64(8))\n"
	                         "  Return(%0)\n",
	                         &ai, why),
	                 1);
	assert_int_equal(ai.s1 * 100 + ai.s2, 116);
	assert_int_equal(ai.nout, 1);
	assert_int_equal(ai.heads_opnd * 100 + ai.kvheads_opnd, 1518);
	assert_int_equal(ai.role[13], AR_PAGED);
	/* Swiglu halves its dim */
	Module *m = parse("%para1_x: <Tensor[Float32], (6, 8)>\n"
	                  "  %0(a) = Swiglu(%para1_x, I64(-1))\n"
	                  "      : (<Tensor[Float32], (6, 8)>, <Int64, NoShape>) -> (<Tensor[Float32], (6, 4)>)\n"
	                  "  %1(b) = Swiglu(%para1_x, I64(0))\n"
	                  "      : (<Tensor[Float32], (6, 8)>, <Int64, NoShape>) -> (<Tensor[Float32], (3, 8)>)\n"
	                  "  Return(%1)\n"
	                  "      : (<Tensor[Float32], (3, 8)>)\n",
	                  0);
	int64_t d[MAX_RANK];
	int r;
	assert_int_equal(ir_infer_shape(ir_entry(m)->nodes.a[0], d, &r, why, sizeof why), 1);
	assert_int_equal(r * 100 + d[0] * 10 + d[1], 264);
	assert_int_equal(ir_infer_shape(ir_entry(m)->nodes.a[1], d, &r, why, sizeof why), 1);
	assert_int_equal(r * 100 + d[0] * 10 + d[1], 238);
	assert_int_equal(pass_verify(m, NULL), 0);
	ir_module_free(m);
	/* Dense, Slice (size -1 to the end), Tile (a new leading dimension) */
	m = parse("%para1_x: <Tensor[Float32], (4, 6, 8)>\n"
	          "%para2_w: <Tensor[Float32], (5, 8)>\n"
	          "  %0(a) = Dense(%para1_x, %para2_w, None)\n"
	          "      : (<Tensor[Float32], (4, 6, 8)>, <Tensor[Float32], (5, 8)>, <None, NoShape>) -> (<Tensor[Float32], (4, 6, 5)>)\n"
	          "  %1(b) = Slice(%para1_x, (I64(1), I64(0), I64(2)), (I64(2), I64(-1), I64(4)))\n"
	          "      : (<Tensor[Float32], (4, 6, 8)>, <Tuple[Int64*3], TupleShape(NoShape, NoShape, NoShape)>, <Tuple[Int64*3], TupleShape(NoShape, NoShape, NoShape)>) -> (<Tensor[Float32], (2, 6, 4)>)\n"
	          "  %2(c) = Tile(%para2_w, (I64(3), I64(2), I64(1)))\n"
	          "      : (<Tensor[Float32], (5, 8)>, <Tuple[Int64*3], TupleShape(NoShape, NoShape, NoShape)>) -> (<Tensor[Float32], (3, 10, 8)>)\n"
	          "  %3(d) = Slice(%para1_x, (I64(3), I64(0), I64(0)), (I64(2), I64(6), I64(8)))\n"
	          "      : (<Tensor[Float32], (4, 6, 8)>, <Tuple[Int64*3], TupleShape(NoShape, NoShape, NoShape)>, <Tuple[Int64*3], TupleShape(NoShape, NoShape, NoShape)>) -> (<Tensor[Float32], (2, 6, 8)>)\n"
	          "  %4(e) = Dense(%para2_w, %para2_w, None)\n"
	          "      : (<Tensor[Float32], (5, 8)>, <Tensor[Float32], (5, 8)>, <None, NoShape>) -> (<Tensor[Float32], (5, 5)>)\n"
	          "  %5(f) = Dense(%para1_x, %para1_x, None)\n"
	          "      : (<Tensor[Float32], (4, 6, 8)>, <Tensor[Float32], (4, 6, 8)>, <None, NoShape>) -> (<Tensor[Float32], (4, 6, 4)>)\n"
	          "  Return(%2)\n"
	          "      : (<Tensor[Float32], (3, 10, 8)>)\n",
	          0);
	static const int64_t want[3][4] = {{3, 4, 6, 5}, {3, 2, 6, 4}, {3, 3, 10, 8}};
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ir_infer_shape(ir_entry(m)->nodes.a[i], d, &r, why, sizeof why), 1);
		assert_int_equal(r, want[i][0]);
		for (int k = 0; k < r; k++)
			assert_int_equal(d[k], want[i][k + 1]);
	}
	assert_int_equal(ir_infer_shape(ir_entry(m)->nodes.a[3], d, &r, why, sizeof why), -1); /* past the end */
	assert_int_equal(ir_infer_shape(ir_entry(m)->nodes.a[4], d, &r, why, sizeof why), 1);
	assert_int_equal(ir_infer_shape(ir_entry(m)->nodes.a[5], d, &r, why, sizeof why), -1); /* a 3-D weight */
	ir_module_free(m);
}

static void test_values(void **state)
{
	(void)state;
	Arena *a = arena_new();
	int64_t v[3] = {4, 2, 1};
	Value *t = value_tuple_ints(a, v, 3, NT_I64);
	int64_t out[3];
	assert_int_equal(value_int_list(t, out, 3), 3);
	assert_int_equal(out[2], 1);
	assert_int_equal(value_int_list(t, out, 2), -1);
	Value c = value_clone(a, t);
	assert_true(value_equal(&c, t));
	c.u.elems[0].u.i = 5;
	assert_false(value_equal(&c, t));
	Value w = value_word("true");
	int b;
	assert_true(value_truthy(&w, &b));
	assert_int_equal(b, 1);
	/* a CALL keeps its name after its arguments, a key is an index:
	 * a copy has both, and values that differ only there differ */
	Value e[2] = {value_int(2, NT_BARE), value_word("Float32")};
	value_set_key(&e[0], intern_cstr("shape"));
	value_set_key(&e[1], intern_cstr("dtype"));
	Value k = value_call_of(a, intern_cstr("Tensor"), e, 2), kc = value_clone(a, &k);
	assert_int_equal(sizeof(Value), 16);
	assert_int_equal(kc.n, 2);
	assert_string_equal(sym_str(value_call_name(&kc)), "Tensor");
	assert_string_equal(sym_str(value_text(&kc)), "Tensor");
	assert_string_equal(sym_str(value_key(&kc.u.elems[1])), "dtype");
	assert_ptr_not_equal(kc.u.elems, k.u.elems);
	assert_true(value_equal(&kc, &k));
	Value other = value_call_of(a, intern_cstr("Parameter"), e, 2);
	assert_false(value_equal(&other, &k));
	value_set_key(&kc.u.elems[1], intern_cstr("value"));
	assert_false(value_equal(&kc, &k));
	value_set_key(&kc.u.elems[1], intern_cstr("dtype")); /* the same index again */
	assert_int_equal(kc.u.elems[1].keyi, k.u.elems[1].keyi);
	assert_int_equal(value_key(&w), 0);
	Value none = value_call_of(a, intern_cstr("Empty"), NULL, 0);
	assert_string_equal(sym_str(value_call_name(&none)), "Empty");
	assert_int_equal(value_text(t), 0);
	int64_t big[2] = {INT64_MAX / 2, 4};
	Shape s = shape_dims(a, big, 2);
	int64_t numel;
	assert_int_equal(shape_numel(&s, &numel), -1); /* overflow is reported, not wrapped */
	arena_free(a);
}

static void test_fragment(void **state)
{
	(void)state;
	const char *frag = "  %2(logits) = Flatten(%1) {in_strategy: ((8, 1, 1, 1))}\n"
			   "      : (<Tensor[Float32], (256, 1, 28, 28)>) -> (<Tensor[Float32], (256, 784)>)\n";
	diag_set_quiet(1);
	int e0 = diag_errors();
	assert_null(parse(frag, 0)); /* %1 is undefined */
	assert_true(diag_errors() > e0);
	Module *m = parse(frag, 1);
	assert_non_null(m);
	Node *n = ir_entry(m)->nodes.a[0];
	assert_int_equal(n->args[0].kind, V_EXTERN);
	assert_string_equal(sym_str(n->args[0].text), "%1");
	ir_module_free(m);
}

/* the output set (ir/io.c) in one directory */
static char odir[64];

static char *opath(const char *name)
{
	static char buf[4][128];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", odir, name);
	return buf[k];
}

static void put(const char *name, const char *text)
{
	FILE *f = fopen(opath(name), "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int holds(const char *name, const char *text)
{
	char buf[64] = {0};
	FILE *f = fopen(opath(name), "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	return n == strlen(text) && memcmp(buf, text, n) == 0;
}

static int entries(void) /* files in odir */
{
	DIR *d = opendir(odir);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void write_out(const char *name, const char *text)
{
	OutFile of;
	assert_int_equal(out_open(&of, opath(name)), 0);
	fputs(text, of.f);
	assert_int_equal(out_commit(&of), 0);
}

static void test_output_set(void **state)
{
	(void)state;
	strcpy(odir, "/tmp/sappc-outset.XXXXXX");
	assert_non_null(mkdtemp(odir));
	diag_set_quiet(1);
	put("a", "old a");
	/* committed files wait: nothing replaced until out_publish */
	write_out("a", "new a");
	write_out("b", "new b");
	assert_true(holds("a", "old a"));
	assert_int_equal(entries(), 3); /* a and two temporaries */
	out_discard();
	assert_true(holds("a", "old a"));
	assert_int_equal(entries(), 1);
	/* one destination that cannot take its file: nothing is moved */
	write_out("a", "new a");
	write_out("b", "new b");
	assert_int_equal(mkdir(opath("b"), 0777), 0);
	int e0 = diag_errors();
	assert_int_equal(out_publish(), -1);
	assert_true(diag_errors() > e0);
	assert_true(holds("a", "old a"));
	assert_int_equal(entries(), 2); /* a, the directory b */
	assert_int_equal(rmdir(opath("b")), 0);
	/* success: all of them */
	write_out("a", "new a");
	write_out("b", "new b");
	assert_int_equal(out_publish(), 0);
	assert_true(holds("a", "new a") && holds("b", "new b"));
	assert_int_equal(entries(), 2);
	/* an aborted file is gone at once, the others still go */
	OutFile of;
	assert_int_equal(out_open(&of, opath("c")), 0);
	out_abort(&of);
	write_out("b", "newer b");
	assert_int_equal(entries(), 3);
	assert_int_equal(out_publish(), 0);
	assert_true(holds("b", "newer b"));
	assert_int_equal(entries(), 2);
	/* the usage check: the same file however spelled */
	char a[128], a2[128], b[128], b2[128];
	snprintf(a, sizeof a, "%s", opath("a"));
	snprintf(a2, sizeof a2, "%s/../%s/a", odir, strrchr(odir, '/') + 1);
	snprintf(b, sizeof b, "%s", opath("b"));
	snprintf(b2, sizeof b2, "%s", opath("b2"));
	assert_int_equal(link(b, b2), 0);
	const char *names[] = {"-o", "--dot"};
	const char *same[] = {a, a2}, *other[] = {a, b}, *hard[] = {b2, b}, *input[] = {"-", b};
	assert_int_equal(out_check_paths("-", 2, names, same), -1);
	assert_int_equal(out_check_paths("-", 2, names, other), 0);
	assert_int_equal(out_check_paths("-", 2, names, hard), -1);
	assert_int_equal(out_check_paths(b2, 2, names, input), -1);
	unlink(opath("a"));
	unlink(opath("b"));
	unlink(opath("b2"));
	assert_int_equal(rmdir(odir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_std_hash),         cmocka_unit_test(test_intern),
	    cmocka_unit_test(test_has_prefix),       cmocka_unit_test(test_ops),
	    cmocka_unit_test(test_parse_minimal),    cmocka_unit_test(test_infer),
	    cmocka_unit_test(test_attention_shapes), cmocka_unit_test(test_values),
	    cmocka_unit_test(test_getnext),          cmocka_unit_test(test_scatter_moe),
	    cmocka_unit_test(test_moe_v2),           cmocka_unit_test(test_gmm),
	    cmocka_unit_test(test_fragment),         cmocka_unit_test(test_keymap),
	    cmocka_unit_test(test_fmt_int),          cmocka_unit_test(test_defer),
	    cmocka_unit_test(test_output_set),       cmocka_unit_test(test_clone),
	    cmocka_unit_test(test_fullname_threads),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	intern_free_all();
	return rc;
}
