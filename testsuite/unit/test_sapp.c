/* test_sapp.c - cmocka unit tests for the SAPP search (passes/sapp/):
 * the worked examples of shared/spec/sapp-search.md §7 and the helpers of
 * §4.10 that are easier to pin down on one rec node than on a whole graph. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../passes/sapp/sapp.h"

static const Dim4 ONES = {{1, 1, 1, 1}};

static Dim4 d4(int64_t n, int64_t c, int64_t h, int64_t w)
{
	Dim4 x = {{n, c, h, w}};
	return x;
}

static void eq4(const Dim4 *a, int64_t n, int64_t c, int64_t h, int64_t w)
{
	assert_int_equal(a->d[0], n);
	assert_int_equal(a->d[1], c);
	assert_int_equal(a->d[2], h);
	assert_int_equal(a->d[3], w);
}

static void init_sapp(Sapp *S)
{
	memset(S, 0, sizeof *S);
	S->conf = sapp_default_conf;
	S->stages = 1;
	S->mbs = 1;
	S->explain = -1;
}

/* a kept node with two inputs and no neighbours; shp holds the input
 * shapes and then the output shape */
static void init_node(PartNode *N, int type, Dim4 a, Dim4 b, Dim4 out, Dim4 shp[3])
{
	memset(N, 0, sizeof *N);
	N->type = (uint8_t)type;
	N->nargs = 2;
	shp[0] = a;
	shp[1] = b;
	shp[2] = out;
	N->arg = shp;
	N->acut[0] = N->acut[1] = ONES;
	N->ocut = ONES;
	sapp_part_gran(N, &shp[2]);
}

static void free_sapp(Sapp *S)
{
	free(S->cons);
	if (S->arena)
		arena_free(S->arena);
}

/* E1: test_PartitionNode - MatMul A(3000x1000) . B(1000x4000), one level */
static void test_e1_partition_matmul(void **state)
{
	(void)state;
	Sapp S;
	PartNode N;
	Dim4 shp[3];
	init_sapp(&S);
	init_node(&N, REC_MatMul, d4(1, 1, 3000, 1000), d4(1, 1, 1000, 4000), d4(1, 1, 3000, 4000), shp);
	SappChoice c;
	sapp_choose(&S, &N, 2, 0, &c);
	assert_int_equal(c.nopt, 4);
	assert_true(c.opcost[0] == 0.1 * 4000 * 1000 / 2); /* I = 2.0e5 */
	assert_true(c.opcost[1] == 3000.0 * 1000 / 2);     /* J = 1.5e6 */
	assert_true(c.opcost[2] == 3000.0 * 4000 / 2);     /* K = 6.0e6 */
	assert_true(c.opcost[3] > 2.57e8 && c.opcost[3] < 2.58e8);
	assert_string_equal(c.name[c.best], "I");
	sapp_apply_choice(&N, &c);
	assert_int_equal(N.ocut.d[2], 2); /* out.str_h = 0.5 */
	assert_int_equal(N.ocut.d[3], 1); /* out.str_w = 1 */
	assert_int_equal(N.acut[0].d[2], 2);
	free_sapp(&S);
}

/* E9: the tutorial MLP's first MatMul alone: I, I, K -> ((4, 2), (1, 2)) */
static void test_e9_mlp_matmul_levels(void **state)
{
	(void)state;
	Sapp S;
	PartNode N;
	Dim4 shp[3];
	init_sapp(&S);
	/* (256, 784) . (512, 784)^T stored logically: B = K x J = (784, 512) */
	init_node(&N, REC_MatMul, d4(1, 1, 256, 784), d4(1, 1, 784, 512), d4(1, 1, 256, 512), shp);
	const char *want[] = {"I", "I", "K"};
	for (int level = 0; level < 3; level++) {
		SappChoice c;
		sapp_choose(&S, &N, 2, level, &c);
		assert_string_equal(c.name[c.best], want[level]);
		sapp_apply_choice(&N, &c);
	}
	assert_int_equal(N.acut[0].d[2], 4);
	assert_int_equal(N.acut[0].d[3], 2);
	assert_int_equal(N.acut[1].d[2], 2);
	assert_int_equal(N.acut[1].d[3], 1);
	free_sapp(&S);
}

/* E16: with pipeline stages and micro-batch size 4, at most two row cuts */
static void test_e16_micro_batch_limit(void **state)
{
	(void)state;
	Sapp S;
	PartNode N;
	Dim4 shp[3];
	init_sapp(&S);
	S.stages = 2;
	S.mbs = 4;
	init_node(&N, REC_MatMul, d4(1, 1, 4096, 64), d4(1, 1, 64, 64), d4(1, 1, 4096, 64), shp);
	int64_t allowed[] = {1, 2};
	for (int i = 0; i < 2; i++) {
		SappChoice c;
		N.acut[0].d[2] = N.ocut.d[2] = allowed[i];
		sapp_part_gran(&N, &shp[2]);
		sapp_choose(&S, &N, 2, 0, &c);
		assert_true(c.total[0] != SAPP_INVALID);
	}
	SappChoice c;
	N.acut[0].d[2] = N.ocut.d[2] = 4;
	sapp_part_gran(&N, &shp[2]);
	sapp_choose(&S, &N, 2, 0, &c);
	assert_true(c.total[0] == SAPP_INVALID);
	free_sapp(&S);
}

/* E18: BatchMatMul cost, 4 devices: bd >= 32 -> the batch option is free */
static void test_e18_batch_matmul(void **state)
{
	(void)state;
	Sapp S;
	PartNode N;
	Dim4 shp[3];
	init_sapp(&S);
	init_node(&N, REC_BatchMatMul, d4(32, 32, 32, 16), d4(32, 32, 16, 16), d4(32, 32, 32, 16), shp);
	for (int level = 0; level < 2; level++) {
		SappChoice c;
		sapp_choose(&S, &N, 2, level, &c);
		assert_string_equal(c.name[c.best], "B");
		assert_true(c.opcost[0] == 0);
		sapp_apply_choice(&N, &c);
	}
	eq4(&N.acut[0], 4, 1, 1, 1);
	eq4(&N.acut[1], 4, 1, 1, 1);
	free_sapp(&S);
}

/* E17: Conv2D only has the batch option */
static void test_e17_conv_batch_only(void **state)
{
	(void)state;
	Sapp S;
	PartNode N;
	Dim4 shp[3];
	init_sapp(&S);
	init_node(&N, REC_Convolution, d4(2, 4, 8, 8), d4(64, 4, 1, 1), d4(2, 64, 8, 8), shp);
	SappChoice c;
	sapp_choose(&S, &N, 2, 0, &c);
	assert_string_equal(c.name[c.best], "B");
	for (int k = 1; k < c.nopt; k++)
		assert_true(c.total[k] == SAPP_INVALID);
	sapp_apply_choice(&N, &c);
	sapp_choose(&S, &N, 2, 1, &c);
	assert_int_equal(c.best, -1); /* batch 1 left: the conv is not cut */
	free_sapp(&S);
}

/* two kept rec nodes, producer 0 -> input 0 of 1 with the identity
 * mapping, in their partition view; node 0 decided at level 0 cutting h */
static void redis_graph(Sapp *S, RecNode rec[2], Dim4 pout, Dim4 args[4], uint32_t *kept, RecIn *in0)
{
	init_sapp(S);
	S->arena = arena_new();
	memset(rec, 0, 2 * sizeof *rec);
	for (int x = 0; x < 2; x++) {
		rec[x].kept = 1;
		rec[x].arg = &args[2 * x];
		kept[x] = (uint32_t)x;
	}
	rec[0].type = REC_Virtual;
	rec[0].nargs = 1;
	args[0] = d4(1, 1, 256, 784);
	args[1] = ONES;
	rec[0].out = pout;
	rec[1].type = REC_MatMul;
	rec[1].nargs = 2;
	args[2] = d4(1, 1, 256, 784);
	args[3] = d4(1, 1, 784, 512);
	rec[1].out = d4(1, 1, 256, 512);
	in0->node = 0;
	in0->map = sapp_map_identity();
	rec[1].in.a = in0;
	rec[1].in.n = 1;
	S->rec = rec;
	S->nops = S->nkept = 2;
	S->kept = kept;
	sapp_part_init(S);
	S->vis[0].lvl = 0;
	S->vis[0].in0 = S->vis[0].out = d4(1, 1, 2, 1);
}

/* §2.2: a decided producer of the same shape that cut h this level makes
 * every option that does not cut h on input 0 pay 16 x |input 0| */
static void test_redistribution_penalty(void **state)
{
	(void)state;
	Sapp S;
	RecNode rec[2];
	Dim4 args[4];
	uint32_t kept[2];
	RecIn in0;
	Dim4 modeI[3] = {d4(1, 1, 2, 1), ONES, d4(1, 1, 2, 1)};
	Dim4 modeJ[3] = {ONES, d4(1, 1, 1, 2), d4(1, 1, 1, 2)};
	redis_graph(&S, rec, d4(1, 1, 256, 784), args, kept, &in0);
	assert_true(sapp_redis(&S, &S.part[1], modeI, 0) == 0);
	assert_true(sapp_redis(&S, &S.part[1], modeJ, 0) == 256.0 * 784 * 16);
	/* another level: the producer's choice is not visible any more */
	assert_true(sapp_redis(&S, &S.part[1], modeJ, 1) == 0);
	free_sapp(&S);
	/* a different shape is not adjacent */
	redis_graph(&S, rec, d4(256, 1, 28, 28), args, kept, &in0);
	assert_true(sapp_redis(&S, &S.part[1], modeJ, 0) == 0);
	free_sapp(&S);
}

/* E15: DecomposeStrategy */
static void test_e15_decompose(void **state)
{
	(void)state;
	Dim4 user = d4(1, 1, 1, 8), rem = user, step;
	for (int i = 0; i < 3; i++) {
		sapp_decompose_step(&rem, &user, 2, &step);
		eq4(&step, 1, 1, 1, 2);
	}
	sapp_decompose_step(&rem, &user, 2, &step); /* beyond the last step: raw */
	assert_memory_equal(&step, &user, sizeof step);
	user = d4(1, 2, 4, 1);
	rem = user;
	Dim4 want[3] = {d4(1, 2, 1, 1), d4(1, 1, 2, 1), d4(1, 1, 2, 1)};
	for (int i = 0; i < 3; i++) {
		sapp_decompose_step(&rem, &user, 2, &step);
		assert_memory_equal(&step, &want[i], sizeof step);
	}
	user = ONES;
	rem = user;
	sapp_decompose_step(&rem, &user, 2, &step);
	assert_memory_equal(&step, &ONES, sizeof step);
}

/* §4.10 PrepareReshape examples */
static void test_prepare_reshape(void **state)
{
	(void)state;
	int64_t ts[4];
	int64_t f1[] = {640, 1280}, s1[] = {64, 1};
	int64_t t1[] = {64, 10, 1280}, t2[] = {10, 64, 1280};
	assert_int_equal(sapp_prepare_reshape(f1, 2, t1, 3, s1, ts), 1);
	assert_true(ts[0] == 64 && ts[1] == 1 && ts[2] == 1);
	assert_int_equal(sapp_prepare_reshape(f1, 2, t2, 3, s1, ts), 1);
	assert_true(ts[0] == 1 && ts[1] == 64 && ts[2] == 1);
	int64_t f3[] = {128, 2048}, s3[] = {1, 4}, t3[] = {128, 64, 32};
	assert_int_equal(sapp_prepare_reshape(f3, 2, t3, 3, s3, ts), 1);
	assert_true(ts[0] == 1 && ts[1] == 4 && ts[2] == 1);
}

/* §4.10 GenGatherStra: dim 0 first, then the larger dims */
static void test_gen_gather_stra(void **state)
{
	(void)state;
	int64_t out[3];
	int64_t a[] = {4, 512};
	sapp_gen_gather_stra(a, 2, 8, out);
	assert_true(out[0] == 4 && out[1] == 2);
	int64_t b[] = {2, 16, 1024};
	sapp_gen_gather_stra(b, 3, 64, out);
	assert_true(out[0] == 2 && out[1] == 1 && out[2] == 32);
}

/* §1.7: reshape groups and transposes, composed along a contracted path */
static void test_mappings(void **state)
{
	(void)state;
	RecMap split, merge;
	int64_t a[] = {4096, 64}, b[] = {32, 128, 64};
	assert_int_equal(sapp_map_reshape(a, 2, b, 3, &split), 1);
	assert_int_equal(sapp_map_reshape(b, 3, a, 2, &merge), 1);
	Dim4 src = d4(1, 1, 4096, 64), dst;
	/* a real split is not "adjacent": each carved dim shows the whole source dim */
	assert_int_equal(sapp_map_shape(&split, &src, &dst), 1);
	assert_false(dst.d[1] == 32 && dst.d[2] == 128);
	/* a merge is */
	Dim4 src3 = d4(1, 32, 128, 64);
	sapp_map_shape(&merge, &src3, &dst);
	assert_memory_equal(&dst, &src, sizeof dst);
	/* split then merge back is the identity on shapes */
	RecMap both = sapp_map_compose(split, merge);
	sapp_map_shape(&both, &src, &dst);
	assert_memory_equal(&dst, &src, sizeof dst);
	int64_t perm[] = {0, 2, 1, 3};
	RecMap t = sapp_map_transpose(perm, 4);
	Dim4 s4 = d4(4, 512, 8, 128);
	sapp_map_shape(&t, &s4, &dst);
	eq4(&dst, 4, 8, 512, 128);
	int64_t bad[] = {0, 0, 1, 3};
	assert_true(sapp_map_transpose(bad, 4).bad);
}

/* one prime per level: a 3-way cut of a dim divisible by 3 */
static void test_prime_level(void **state)
{
	(void)state;
	Sapp S;
	PartNode N;
	Dim4 shp[3];
	init_sapp(&S);
	init_node(&N, REC_MatMul, d4(1, 1, 96, 784), d4(1, 1, 784, 512), d4(1, 1, 96, 512), shp);
	SappChoice c;
	sapp_choose(&S, &N, 3, 0, &c);
	assert_string_equal(c.name[c.best], "I");
	assert_true(c.opcost[0] == 0.1 * 512 * 784 / 3);
	assert_true(c.total[2] == SAPP_INVALID); /* K = 784 is not divisible by 3 */
	sapp_apply_choice(&N, &c);
	assert_int_equal(N.acut[0].d[2], 3);
	free_sapp(&S);
}

/* §5 auto pipeline: the memory model of memory.c, by hand */
static SappModel toy_model(void)
{
	SappModel M;
	memset(&M, 0, sizeof M);
	M.layers = 4;
	M.hidden = 64;
	M.seq = 32;
	M.batch = 8;
	M.heads = 4;
	M.layer_bytes = 400000;
	M.other_bytes = 100000;
	M.act_elt = 4;
	M.dp = 2;
	M.mp = 1;
	return M;
}

static void test_auto_pipeline_memory(void **state)
{
	(void)state;
	SappModel M = toy_model();
	double st, dy;
	/* 4 stages: 1 layer each; micro-batch 8 / (2 x 4) = 1; sbh = 32 x 1 x 64 = 2048, t = 1:
	 * 4 x (100000 + 400000 / 4) / 1; (1/1.5 x 2 x 2048 + 2048 (10 + 24 + 5 x 4 x 32 / 64) + 0) x 4/2 */
	sapp_model_memory(&M, 4, 2, 1, 4, 0, &st, &dy);
	assert_true(st == 800000.0);
	assert_true(dy > 185685.33 && dy < 185685.34);
	/* 2 stages, mp 2, optimizer parallel: 4 x (100000 + 200000) / (2 x 2);
	 * (2/1.5 x 2 x 2048 + 2048 (10 + 12 + 5) + 2 x 8 x 2048 / 2) x 2 */
	sapp_model_memory(&M, 2, 2, 2, 4, 1, &st, &dy);
	assert_true(st == 300000.0);
	assert_true(dy > 154282.66 && dy < 154282.67);
	/* no 4-D softmax: no score term; one stage: the micro-batches do not divide the batch */
	M.heads = 0;
	sapp_model_memory(&M, 1, 2, 1, 4, 0, &st, &dy);
	assert_true(st == 4 * 500000.0);
	double sbh = 32 * 4 * 64;
	assert_true(dy > (4 / 1.5 * 2 * sbh + 34 * sbh) * 2 - 0.01 && dy < (4 / 1.5 * 2 * sbh + 34 * sbh) * 2 + 0.01);
}

static void test_auto_pipeline_suggest(void **state)
{
	(void)state;
	SappModel M = toy_model();
	SappSuggest r;
	/* everything fits: halve 4 -> 2 -> 1, doubling mp first (tie), then dp */
	sapp_suggest(&M, 4, 4, 0, 1e12, 0.1, &r);
	assert_true(r.fits);
	assert_int_equal(r.stages, 1);
	assert_int_equal(r.dp, 4);
	assert_int_equal(r.mp, 2);
	assert_int_equal(r.batch, 8);
	assert_int_equal(r.micro, 1);
	assert_true(r.mem_coef == 0.1);
	/* nothing fits: mem_coeff 1024, batch 1, the stage number stays */
	sapp_suggest(&M, 4, 4, 0, 1000, 0.1, &r);
	assert_false(r.fits);
	assert_int_equal(r.stages, 4);
	assert_true(r.mem_coef == 1024);
	assert_int_equal(r.batch, 1);
	/* stop where the halved pipeline no longer fits (1.1 x memory < capacity) */
	double s4, d4_, s2, d2, s1, d1;
	sapp_model_memory(&M, 4, 2, 1, 4, 0, &s4, &d4_);
	sapp_model_memory(&M, 2, 2, 2, 4, 0, &s2, &d2);
	sapp_model_memory(&M, 1, 4, 2, 4, 0, &s1, &d1);
	double need = 1.1 * (s4 + d4_ > s2 + d2 ? s4 + d4_ : s2 + d2) * 1.001;
	assert_true(1.1 * (s1 + d1) > need);
	sapp_suggest(&M, 4, 4, 0, need, 0.1, &r);
	assert_int_equal(r.stages, 2);
	assert_int_equal(r.micro, 4);
	assert_true(r.stat == s2 && r.dyn == d2);
	assert_true(r.stat0 == s4 && r.dyn0 == d4_);
	/* a stage number that is not a power of two is not halved (the roll-back could not follow) */
	sapp_suggest(&M, 6, 6, 0, 1e12, 0.1, &r);
	assert_true(r.fits);
	assert_int_equal(r.stages, 6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e1_partition_matmul), cmocka_unit_test(test_e9_mlp_matmul_levels),
		cmocka_unit_test(test_e16_micro_batch_limit), cmocka_unit_test(test_e18_batch_matmul),
		cmocka_unit_test(test_e17_conv_batch_only), cmocka_unit_test(test_redistribution_penalty),
		cmocka_unit_test(test_e15_decompose),        cmocka_unit_test(test_prepare_reshape),
		cmocka_unit_test(test_gen_gather_stra),      cmocka_unit_test(test_mappings),
		cmocka_unit_test(test_prime_level),          cmocka_unit_test(test_auto_pipeline_memory),
		cmocka_unit_test(test_auto_pipeline_suggest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
