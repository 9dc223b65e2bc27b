/* test_lower.c - cmocka unit tests for the layout algebra and the
 * redistribution planner (passes/layout.h) against the worked examples of
 * parallel-lowering.md: §2.1 coordinates and standardisation, §3.3 group
 * names, §4.3 E1-E10.  The plans are compared as one line of text, e.g.
 * "Reshape(1,32,784) AllGather{0,1} Split(0,2) Concat(1) ...". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sappc.h"
#include "../passes/lower/lower.h"
#include "plan_text.h"

static Layout mk(int ndev, const int64_t *dev, int rank, const int64_t *map, const int64_t *shape)
{
	Layout l = {0};
	l.ndev = ndev;
	memcpy(l.dev, dev, (size_t)ndev * sizeof *dev);
	l.rank = rank;
	memcpy(l.map, map, (size_t)rank * sizeof *map);
	memcpy(l.shape, shape, (size_t)rank * sizeof *shape);
	return l;
}
#define L(dev, map, shape)                                                                                             \
	mk((int)(sizeof(int64_t[]) dev / sizeof(int64_t)), (int64_t[])dev,                                             \
	   (int)(sizeof(int64_t[]) map / sizeof(int64_t)), (int64_t[])map, (int64_t[])shape)
#define A(...)                                                                                                         \
	{                                                                                                              \
		__VA_ARGS__                                                                                            \
	}

static char planbuf[2048];

static const char *plan_text(const Layout *from, const Layout *to, int ndev, int64_t rank, int alltoall, int keep)
{
	int64_t dl[256];
	for (int i = 0; i < ndev; i++)
		dl[i] = i;
	RedistPlan p;
	char err[256] = "";
	if (redist_plan(from, to, dl, rank, alltoall, keep, &p, err, sizeof err) != 0) {
		snprintf(planbuf, sizeof planbuf, "error: %s", err);
		return planbuf;
	}
	fmt_plan(&p, planbuf, sizeof planbuf);
	redist_plan_free(&p);
	return planbuf;
}

static void test_coord_standardize(void **state)
{
	(void)state;
	Layout l = L(A(4, 2, 1), A(2, 0), A(256, 784)), s;
	int64_t c[8];
	layout_coord(&l, 5, c);
	assert_int_equal(c[0], 2);
	assert_int_equal(c[1], 1);
	assert_int_equal(c[2], 0);
	layout_standardize(&l, &s);
	assert_int_equal(s.ndev, 2);
	assert_int_equal(s.dev[0], 4);
	assert_int_equal(s.dev[1], 2);
	assert_int_equal(s.map[0], 1);
	assert_int_equal(s.map[1], -1);
	Layout one = L(A(1, 1), A(-1), A(7)), so;
	layout_standardize(&one, &so);
	assert_int_equal(so.ndev, 1);
	assert_int_equal(so.dev[0], 1);
	assert_int_equal(layout_check(&l), 0);
	Layout bad = L(A(3), A(0), A(8));
	assert_int_equal(layout_check(&bad), -1);
}

static void test_groups(void **state)
{
	(void)state;
	int64_t g[16];
	/* sapp MatMul: D=[4,2,1]; k along dim 1 on rank 0 -> {0,1}; w map [0,1] replicas {0,2,4,6} */
	Layout x = L(A(4, 2, 1), A(2, 1), A(256, 784)), w = L(A(4, 2, 1), A(0, 1), A(512, 784));
	assert_int_equal(layout_group_along(&x, 0, 1, g), 2);
	assert_int_equal(g[0], 0);
	assert_int_equal(g[1], 1);
	assert_int_equal(layout_replica_group(&w, 0, g), 4);
	assert_int_equal(g[0], 0);
	assert_int_equal(g[1], 2);
	assert_int_equal(g[2], 4);
	assert_int_equal(g[3], 6);
	/* sharding propagation 2024: w (784,64) D=[2,1,4] M=[1,0], rank 2 -> {2,6} */
	Layout w2 = L(A(2, 1, 4), A(1, 0), A(784, 64));
	assert_int_equal(layout_replica_group(&w2, 2, g), 2);
	assert_int_equal(g[0], 2);
	assert_int_equal(g[1], 6);
	int64_t off[4], sl[4];
	layout_slice_shape(&x, sl);
	assert_int_equal(sl[0], 64);
	assert_int_equal(sl[1], 392);
	layout_slice_offset(&x, 5, off);
	assert_int_equal(off[0], 128);
	assert_int_equal(off[1], 392);
}

static void test_e1(void **state)
{
	(void)state;
	Layout f = L(A(2, 4, 2), A(2, 0), A(512, 1024)), t = L(A(4, 2, 2), A(2, 1), A(512, 1024));
	assert_string_equal(plan_text(&f, &t, 16, 0, 0, 0),
	                    "Reshape(1,256,512) StridedSlice[0,0,0:1,128,512] AllGather{0,1} Split(0,2) Concat(2) "
	                    "StridedSlice[0,0,0:1,128,512] Reshape(128,512)");
}

static void test_e2(void **state)
{
	(void)state;
	Layout f = L(A(16, 1, 1), A(2, 0), A(512, 1024)), t = L(A(1, 16, 1), A(2, 1), A(512, 1024));
	assert_string_equal(plan_text(&f, &t, 16, 0, 0, 0),
	                    "AllGather{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15} StridedSlice[0,0:512,64]");
	assert_string_equal(plan_text(&f, &t, 16, 0, 1, 0), "AlltoAll(16,1,0){0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}");
}

static void test_e3(void **state)
{
	(void)state;
	Layout f = L(A(8), A(0, -1, -1, -1), A(128, 64, 1, 1)), t = L(A(8), A(0, -1), A(128, 64));
	assert_string_equal(plan_text(&f, &t, 8, 0, 0, 0), "Reshape(16,64)");
}

static void test_e4_e5(void **state)
{
	(void)state;
	Layout f = L(A(2, 4, 1), A(2, 0), A(16, 16)), t = L(A(2, 4), A(1, 0), A(16, 16));
	assert_string_equal(plan_text(&f, &t, 8, 0, 0, 0), "StridedSlice[0,0:8,4]");
	assert_string_equal(plan_text(&f, &t, 8, 7, 0, 0), "StridedSlice[0,12:8,16]");
	Layout f5 = L(A(2, 4, 1), A(2, 0), A(64, 64)), t5 = L(A(2, 4), A(1, 0), A(64, 64));
	assert_string_equal(plan_text(&f5, &t5, 8, 0, 0, 0), "StridedSlice[0,0:32,16]");
}

static void test_e6(void **state)
{
	(void)state;
	Layout f = L(A(8), A(0, -1), A(256, 784)), t = L(A(4, 2, 1), A(2, 1), A(256, 784));
	assert_string_equal(plan_text(&f, &t, 8, 0, 0, 0),
	                    "Reshape(1,32,784) AllGather{0,1} Split(0,2) Concat(1) StridedSlice[0,0,0:1,64,392] "
	                    "Reshape(64,392)");
	assert_string_equal(plan_text(&f, &t, 8, 5, 0, 0),
	                    "Reshape(1,32,784) AllGather{4,5} Split(0,2) Concat(1) StridedSlice[0,0,392:1,64,784] "
	                    "Reshape(64,392)");
}

static void test_e7_e8_e9(void **state)
{
	(void)state;
	Layout f7 = L(A(2, 4), A(1, 0), A(16, 16)), t7 = L(A(2, 4), A(1, -1), A(16, 16));
	assert_string_equal(plan_text(&f7, &t7, 8, 0, 0, 0), "AllGather{0,1,2,3} Split(0,4) Concat(1)");
	assert_string_equal(plan_text(&f7, &t7, 8, 5, 0, 0), "AllGather{4,5,6,7} Split(0,4) Concat(1)");
	Layout f8 = L(A(8), A(0, -1), A(64, 32)), t8 = L(A(8), A(-1, 0), A(64, 32));
	assert_string_equal(plan_text(&f8, &t8, 8, 3, 0, 0), "AllGather{0,1,2,3,4,5,6,7} StridedSlice[0,12:64,16]");
	assert_string_equal(plan_text(&f8, &t8, 8, 3, 1, 0), "AlltoAll(8,1,0){0,1,2,3,4,5,6,7}");
	Layout f9 = L(A(8), A(-1, -1), A(64, 32)), t9 = L(A(4, 2), A(1, 0), A(64, 32));
	assert_string_equal(plan_text(&f9, &t9, 8, 3, 0, 0), "StridedSlice[16,0:32,32] StridedSlice[0,16:16,32]");
}

static void test_e10(void **state)
{
	(void)state;
	Layout f = L(A(2, 4), A(1, 0), A(32, 64)), t = L(A(2, 4), A(1, 0, -1), A(32, 8, 8));
	assert_string_equal(plan_text(&f, &t, 8, 0, 0, 1), "Reshape(16,2,8)");
	Layout f2 = L(A(8), A(0, -1), A(256, 784)), t2 = L(A(8), A(0, -1, -1), A(256, 28, 28));
	assert_string_equal(plan_text(&f2, &t2, 8, 0, 0, 1), "Reshape(32,28,28)");
	/* equal layouts: nothing, unless the Reshape is kept */
	assert_string_equal(plan_text(&f, &f, 8, 0, 0, 0), "");
}

/* §3.3: group names are "<n>-<std::hash of the ranks>" or the world group */
static void test_group_names(void **state)
{
	(void)state;
	LowerCtx c;
	memset(&c, 0, sizeof c);
	c.n_total = 8;
	c.world = "hccl_world_group";
	static const struct {
		int64_t r[8];
		int n;
		const char *name;
	} v[] = {
	    {{0, 1}, 2, "2-5004544844489628105"},       {{2, 6}, 2, "2-511848487187618470"},
	    {{0, 4}, 2, "2-16453000547691086251"},      {{0, 1, 2, 3}, 4, "4-6301172352641561019"},
	    {{0, 2, 4, 6}, 4, "4-5226697808808137312"}, {{0, 1, 2, 3, 4, 5, 6, 7}, 8, "hccl_world_group"},
	};
	char buf[64];
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		assert_string_equal(lower_group_name(&c, v[i].r, v[i].n, buf, sizeof buf), v[i].name);
	lower_ctx_free(&c);
	memset(&c, 0, sizeof c);
	c.n_total = 16; /* the same eight ranks are no longer everyone */
	c.world = "hccl_world_group";
	assert_string_equal(lower_group_name(&c, v[5].r, 8, buf, sizeof buf), "8-12158923167718251343");
	assert_string_equal(lower_group_name(&c, v[5].r, 8, buf, sizeof buf), "8-12158923167718251343"); /* cached */
	lower_ctx_free(&c);
}

static void test_errors(void **state)
{
	(void)state;
	Layout f = L(A(8), A(0), A(64)), t = L(A(8), A(0), A(32));
	const char *e = plan_text(&f, &t, 8, 0, 0, 0);
	assert_true(strncmp(e, "error: ", 7) == 0);
	assert_non_null(strstr(e, "element counts differ"));
}

/* lower_sym and lower_tensor_tstr keep Syms in static memos across calls;
 * after intern_free_all a Sym number names another text (or none), so a
 * memo that outlived the reset would answer with it.  Last in the list: it
 * resets the interner. */
static void test_memos_after_reset(void **state)
{
	(void)state;
	intern_free_all();
	Sym f32 = intern_cstr("Float32");
	assert_string_equal(sym_str(lower_tensor_tstr(f32, 0)), "Tensor[Float32]");
	assert_string_equal(sym_str(lower_tensor_tstr(f32, 1)), "Ref[Tensor[Float32]]");
	static const char dt[] = "Int8";
	assert_string_equal(sym_str(lower_sym(dt)), "Int8");
	intern_free_all();
	Sym f16 = intern_cstr("Float16");
	assert_int_equal(f16, f32); /* the same number, another text */
	assert_string_equal(sym_str(lower_tensor_tstr(f16, 0)), "Tensor[Float16]");
	assert_string_equal(sym_str(lower_tensor_tstr(f16, 1)), "Ref[Tensor[Float16]]");
	assert_string_equal(sym_str(lower_sym(dt)), "Int8");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_coord_standardize),
	    cmocka_unit_test(test_groups),
	    cmocka_unit_test(test_e1),
	    cmocka_unit_test(test_e2),
	    cmocka_unit_test(test_e3),
	    cmocka_unit_test(test_e4_e5),
	    cmocka_unit_test(test_e6),
	    cmocka_unit_test(test_e7_e8_e9),
	    cmocka_unit_test(test_e10),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_group_names),
	    cmocka_unit_test(test_memos_after_reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
