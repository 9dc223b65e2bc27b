/* test_redist.c - cmocka unit tests for the layout algebra, the redistribution
 * planner and the robin_hood order emulation: every worked example of
 * parallel-lowering.md §2.1/§2.3/§4.2/§4.3/§4.5 and ir-format.md §1.9, then a
 * property test that executes random plans on every rank and checks that each
 * ends with exactly its target slice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sappc.h"
#include "../passes/layout.h"
#include "plan_text.h"

/* ------------------------------------------------------------ helpers */

static int parse_list(const char *s, int64_t *out)
{
	int n = 0;
	while (*s) {
		char *end;
		long long v = strtoll(s, &end, 10);
		if (end == s) {
			s++;
			continue;
		}
		out[n++] = v;
		s = end;
	}
	return n;
}

/* lay("2,4,2", "2,0", "512,1024") */
static Layout lay(const char *dev, const char *map, const char *shape)
{
	Layout l;
	memset(&l, 0, sizeof l);
	l.ndev = parse_list(dev, l.dev);
	l.rank = parse_list(map, l.map);
	int r = parse_list(shape, l.shape);
	assert_int_equal(r, l.rank);
	return l;
}

static void expect_list(const int64_t *got, int n, const char *want)
{
	int64_t w[64];
	int nw = parse_list(want, w);
	if (n != nw) {
		print_error("length %d, want %d (%s)\n", n, nw, want);
		fail();
	}
	for (int i = 0; i < n; i++)
		if (got[i] != w[i]) {
			print_error("element %d is %lld, want %lld (%s)\n", i, (long long)got[i], (long long)w[i],
			            want);
			fail();
		}
}

static void expect_layout(const Layout *l, const char *dev, const char *map, const char *shape)
{
	expect_list(l->dev, l->ndev, dev);
	expect_list(l->map, l->rank, map);
	if (shape)
		expect_list(l->shape, l->rank, shape);
}

static const char *kind_name(RedistKind k)
{
	static const char *const names[] = {"StridedSlice", "AllGather", "Split", "Concat", "AlltoAll", "Reshape"};
	return names[k];
}

static void expect_kinds(const RedistPlan *p, const char *want)
{
	char got[512] = "";
	for (int i = 0; i < p->nops; i++) {
		if (i)
			strcat(got, " ");
		strcat(got, kind_name(p->ops[i].kind));
	}
	assert_string_equal(got, want);
}

static int64_t iota_list[4096];

static void plan_ok(const Layout *from, const Layout *to, int64_t rank, int a2a, RedistPlan *p)
{
	char err[256];
	int rc = redist_plan(from, to, iota_list, rank, a2a, 0, p, err, sizeof err);
	if (rc != 0) {
		print_error("redist_plan: %s\n", err);
		fail();
	}
}

static int setup(void **state)
{
	(void)state;
	for (int i = 0; i < 4096; i++)
		iota_list[i] = i;
	return 0;
}

/* ------------------------------------------------------------ robin_hood (§1.9) */

static void test_rh_int_orders(void **state)
{
	(void)state;
	/* parallel-lowering.md §4.2 step 3 item 2, measured on the real library */
	static const char *const want[] = {"0",         "0 1",         "0 1 2",         "0 1 3 2",
	                                   "0 1 4 3 2", "0 1 4 5 3 2", "0 4 3 1 5 6 2", "0 4 3 1 5 6 7 2"};
	for (int r = 1; r <= 8; r++) {
		int o[8];
		int64_t g[8];
		rh_order_ints(r, o);
		for (int i = 0; i < r; i++)
			g[i] = o[i];
		expect_list(g, r, want[r - 1]);
	}
	/* larger maps still visit every key exactly once */
	for (int r = 9; r <= 64; r++) {
		int o[64], seen[64] = {0};
		rh_order_ints(r, o);
		for (int i = 0; i < r; i++) {
			assert_true(o[i] >= 0 && o[i] < r);
			assert_false(seen[o[i]]);
			seen[o[i]] = 1;
		}
	}
}

static void expect_attr_order(const char *keys, const char *want)
{
	char buf[512], got[512] = "";
	Attr a[32];
	uint32_t n = 0;
	strcpy(buf, keys);
	for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
		memset(&a[n], 0, sizeof a[n]);
		a[n].key = intern_cstr(t);
		a[n].val = value_int((int64_t)n, NT_I64);
		n++;
	}
	rh_order_attrs(a, n);
	for (uint32_t i = 0; i < n; i++) {
		if (i)
			strcat(got, ", ");
		strcat(got, sym_str(a[i].key));
	}
	assert_string_equal(got, want);
	/* values travel with their keys */
	strcpy(buf, keys);
	uint32_t k = 0;
	for (char *t = strtok(buf, " "); t; t = strtok(NULL, " "), k++)
		for (uint32_t i = 0; i < n; i++)
			if (a[i].key == intern_cstr(t))
				assert_int_equal(a[i].val.u.i, k);
}

static void test_rh_attr_orders(void **state)
{
	(void)state;
	/* every row of ir-format.md §1.9 */
	expect_attr_order("op group fusion index no_eliminate group_ranks group_rank_ids comm_reuse rank_list",
	                  "comm_reuse, group, fusion, op, rank_list, group_ranks, index, group_rank_ids, no_eliminate");
	expect_attr_order("op group fusion index no_eliminate rank_list group_ranks group_rank_ids",
	                  "group, fusion, op, rank_list, group_ranks, index, group_rank_ids, no_eliminate");
	expect_attr_order("op group fusion index group_ranks", "group, fusion, op, group_ranks, index");
	expect_attr_order("transpose_a transpose_b input_names output_names transpose_x1 transpose_x2",
	                  "output_names, transpose_a, input_names, transpose_x2, transpose_x1, transpose_b");
	expect_attr_order("transpose_a transpose_b input_names output_names transpose_x1 transpose_x2 in_strategy "
	                  "out_strategy",
	                  "input_names, out_strategy, transpose_x2, transpose_b, in_strategy, output_names, "
	                  "transpose_a, transpose_x1");
	expect_attr_order("begin_mask end_mask ellipsis_mask new_axis_mask shrink_axis_mask input_names output_names "
	                  "keep_value_node_input",
	                  "new_axis_mask, shrink_axis_mask, end_mask, input_names, output_names, "
	                  "keep_value_node_input, begin_mask, ellipsis_mask");
	expect_attr_order("input_names output_names", "output_names, input_names");
	expect_attr_order("format input_names output_names data_format",
	                  "output_names, format, input_names, data_format");
	expect_attr_order("unique_id related_fusion_key related_node_id",
	                  "unique_id, related_fusion_key, related_node_id");
	expect_attr_order("unique_id micro origin_output_shape origin_input_shapes",
	                  "unique_id, origin_output_shape, micro, origin_input_shapes");
	expect_attr_order("recompute_sub_graph recompute_id recompute need_cse_after_recompute",
	                  "recompute_sub_graph, recompute_id, recompute, need_cse_after_recompute");
	expect_attr_order("has_shard has_attached jit_level check_set_strategy_valid_once_only FLASH_SP_RUN_ONCE_ONLY "
	                  "pynative_run_in_graph less_bn auto_parallel_finish_pre_action",
	                  "has_shard, has_attached, jit_level, check_set_strategy_valid_once_only, "
	                  "FLASH_SP_RUN_ONCE_ONLY, pynative_run_in_graph, less_bn, auto_parallel_finish_pre_action");
	/* "200 random insertion orders of each set all gave the same result" */
	expect_attr_order("rank_list comm_reuse group_rank_ids group_ranks no_eliminate index fusion group op",
	                  "comm_reuse, group, fusion, op, rank_list, group_ranks, index, group_rank_ids, no_eliminate");
}

/* Big and awkward maps: the heap path, growth past the overflow tail and
 * duplicate keys must still give every key exactly once. */
static void test_rh_stress(void **state)
{
	(void)state;
	enum { N = 5000 };
	static Attr a[N];
	static int seen[N];
	for (int i = 0; i < N; i++) {
		char buf[32];
		snprintf(buf, sizeof buf, "attr_%d", i);
		memset(&a[i], 0, sizeof a[i]);
		a[i].key = intern_cstr(buf);
		a[i].val = value_int(i, NT_I64);
	}
	rh_order_attrs(a, N);
	for (int i = 0; i < N; i++) {
		assert_false(seen[a[i].val.u.i]);
		seen[a[i].val.u.i] = 1;
	}
	/* a duplicate key stays right after its first occurrence */
	Attr d[4];
	memset(d, 0, sizeof d);
	d[0].key = intern_cstr("group");
	d[1].key = intern_cstr("op");
	d[2].key = intern_cstr("group");
	d[3].key = intern_cstr("fusion");
	for (int i = 0; i < 4; i++)
		d[i].val = value_int(i, NT_I64);
	rh_order_attrs(d, 4);
	int at = -1;
	for (int i = 0; i < 4; i++)
		if (d[i].val.u.i == 0)
			at = i;
	assert_true(at >= 0 && at < 3);
	assert_int_equal(d[at + 1].val.u.i, 2);
	/* the same hash for many keys: long clusters overflow the info byte */
	uint64_t h[200];
	uint32_t id[200], o[200];
	for (uint32_t i = 0; i < 200; i++) {
		h[i] = 12345 + (i & 3);
		id[i] = i;
	}
	assert_int_equal(rh_order(h, id, 40, o), 40);
}

/* ------------------------------------------------------------ §2.1 / §2.3 */

static void test_standardize(void **state)
{
	(void)state;
	Layout l = lay("4,2,1", "2,0", "256,512"), s;
	layout_standardize(&l, &s);
	expect_layout(&s, "4,2", "1,-1", "256,512");
	l = lay("1,1", "-1,1", "3,5");
	layout_standardize(&l, &s);
	expect_layout(&s, "1", "-1,-1", "3,5");
	/* E2's layouts: D=[16,1,1] M=[2,0] and D=[1,16,1] M=[2,1] */
	l = lay("16,1,1", "2,0", "512,1024");
	layout_standardize(&l, &s);
	expect_layout(&s, "16", "0,-1", NULL);
	l = lay("1,16,1", "2,1", "512,1024");
	layout_standardize(&l, &s);
	expect_layout(&s, "16", "-1,0", NULL);
	/* equality compares standardised forms */
	Layout a = lay("4,2,1", "2,1", "256,784"), b = lay("4,2", "1,0", "256,784");
	assert_true(layout_equal(&a, &b));
	b = lay("4,2", "1,-1", "256,784");
	assert_false(layout_equal(&a, &b));
	/* the sapp BiasAdd input [4,1,2] M=[2,1] is the MatMul output [4,2,1] M=[2,0] */
	a = lay("4,1,2", "2,1", "256,512");
	b = lay("4,2,1", "2,0", "256,512");
	assert_true(layout_equal(&a, &b));
}

static void test_check(void **state)
{
	(void)state;
	Layout l = lay("4,2", "1,0", "256,784");
	assert_int_equal(layout_check(&l), 0);
	l = lay("4,2", "1,1", "256,784"); /* value twice */
	assert_int_equal(layout_check(&l), -1);
	l = lay("4,2", "2,0", "256,784"); /* out of range */
	assert_int_equal(layout_check(&l), -1);
	l = lay("4,2", "1,0", "256,785"); /* not divisible */
	assert_int_equal(layout_check(&l), -1);
}

static void test_coord_slice(void **state)
{
	(void)state;
	Layout l = lay("4,2,1", "2,1", "256,784");
	int64_t c[3], s[2], off[2];
	layout_coord(&l, 5, c);
	expect_list(c, 3, "2,1,0");
	layout_slice_shape(&l, s);
	expect_list(s, 2, "64,392");
	layout_slice_offset(&l, 5, off);
	expect_list(off, 2, "128,392");
	/* sharding_propagation 2024: w (784,64) D=[2,1,4] M=[1,0] -> (784,16) */
	l = lay("2,1,4", "1,0", "784,64");
	layout_slice_shape(&l, s);
	expect_list(s, 2, "784,16");
}

static void test_groups(void **state)
{
	(void)state;
	int64_t g[64];
	/* sapp, rank 0 of 8, D=[4,2,1]: MatMul k-group along device dim 1 */
	Layout x = lay("4,2,1", "2,1", "256,784");
	expect_list(g, layout_group_along(&x, 0, 1, g), "0,1");
	/* w map [0,1]: replicas vary along device dim 0 */
	Layout w = lay("4,2,1", "0,1", "512,784");
	expect_list(g, layout_replica_group(&w, 0, g), "0,2,4,6");
	expect_list(g, layout_replica_group(&w, 3, g), "1,3,5,7");
	/* 2024: w D=[2,1,4] M=[1,0], rank 2 -> {2,6} */
	Layout w2 = lay("2,1,4", "1,0", "784,64");
	expect_list(g, layout_replica_group(&w2, 2, g), "2,6");
	/* 2023 quickstart: AllReduce over device dim 1 of [2,4,1] -> {0,1,2,3} */
	Layout q = lay("2,4,1", "2,1", "16,32");
	expect_list(g, layout_group_along(&q, 0, 1, g), "0,1,2,3");
	/* BiasAdd bias [4,1,2] M=[1]: replicated on all 8 devices */
	Layout bias = lay("4,1,2", "1", "512");
	expect_list(g, layout_replica_group(&bias, 5, g), "0,1,2,3,4,5,6,7");
}

/* ------------------------------------------------------------ §4.2 steps 0-2 */

static void test_expand_dev(void **state)
{
	(void)state;
	static const struct {
		const char *map, *ndev, *nmap, *nshape;
	} rows[] = {
	    {"1,0", "4,2,2,2", "3,2,1,0", "4,128,2,512"},
	    {"0,1", "4,2,2,2", "1,0,3,2", "2,256,4,256"},
	    {"1,-1", "4,2,2,2", "3,2,-1", "4,128,1024"},
	    {"0,1", "4,2,4", "0,2,1", "512,4,256"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		Layout l = lay("8,4", rows[i].map, "512,1024"), e;
		int64_t d[8];
		int nd = parse_list(rows[i].ndev, d);
		assert_int_equal(layout_expand_dev(&l, d, nd, &e), 0);
		expect_layout(&e, rows[i].ndev, rows[i].nmap, rows[i].nshape);
	}
	/* [8,4] is not refined by [4,4,2] */
	Layout l = lay("8,4", "1,0", "512,1024"), e;
	assert_int_equal(layout_expand_dev(&l, (const int64_t[]){4, 4, 2}, 3, &e), -1);
}

static void test_unify_and_expand_shape(void **state)
{
	(void)state;
	int64_t o[16];
	/* step 1: [2,4,2] and [4,2,2] -> [2,2,2,2] */
	expect_list(o, layout_unify_dev((const int64_t[]){2, 4, 2}, 3, (const int64_t[]){4, 2, 2}, 3, o, 16),
	            "2,2,2,2");
	expect_list(o, layout_unify_dev((const int64_t[]){8}, 1, (const int64_t[]){4, 2}, 2, o, 16), "4,2");
	assert_int_equal(layout_unify_dev((const int64_t[]){2, 3}, 2, (const int64_t[]){3, 2}, 2, o, 16), -1);
	assert_int_equal(layout_unify_dev((const int64_t[]){8}, 1, (const int64_t[]){4}, 1, o, 16), -1);
	/* step 2: ExpandShape */
	expect_list(o, layout_expand_shape((const int64_t[]){512, 1024}, 2, (const int64_t[]){2, 256, 1024}, 3, o, 16),
	            "2,256,1024");
	expect_list(o, layout_expand_shape((const int64_t[]){32, 64}, 2, (const int64_t[]){32, 8, 8}, 3, o, 16),
	            "32,8,8");
	assert_int_equal(layout_expand_shape((const int64_t[]){6, 4}, 2, (const int64_t[]){4, 6}, 2, o, 16), -1);
	assert_true(layout_refines((const int64_t[]){512, 1024}, 2, (const int64_t[]){2, 256, 1024}, 3));
	assert_false(layout_refines((const int64_t[]){2, 256, 1024}, 3, (const int64_t[]){512, 1024}, 2));
}

static void test_expand_tensor_shape(void **state)
{
	(void)state;
	Layout l = lay("8,4", "1,0", "512,1024"), e;
	/* the source's two examples */
	assert_int_equal(layout_expand_tensor_shape(&l, (const int64_t[]){128, 4, 2, 512}, 4, &e), 0);
	expect_layout(&e, "8,2,2", "2,-1,1,0", "128,4,2,512");
	assert_int_equal(layout_expand_tensor_shape(&l, (const int64_t[]){8, 64, 4, 256}, 4, &e), 0);
	expect_layout(&e, "8,4", "1,-1,0,-1", "8,64,4,256");
	/* E1's from_u */
	l = lay("2,2,2,2", "3,0", "512,1024");
	assert_int_equal(layout_expand_tensor_shape(&l, (const int64_t[]){2, 256, 1024}, 3, &e), 0);
	expect_layout(&e, "2,2,2,2", "3,-1,0", "2,256,1024");
	/* a first piece the device dim cannot cut */
	l = lay("4", "0", "24");
	assert_int_equal(layout_expand_tensor_shape(&l, (const int64_t[]){6, 4}, 2, &e), -1);
}

static void test_squeeze(void **state)
{
	(void)state;
	Layout l = lay("8", "0,-1,-1,-1", "128,64,1,1"), s;
	layout_squeeze(&l, &s);
	expect_layout(&s, "8", "0,-1", "128,64");
	l = lay("8", "-1,-1", "1,1");
	layout_squeeze(&l, &s);
	expect_layout(&s, "8", "-1", "1");
}

/* ------------------------------------------------------------ §4.3 worked examples */

static void expect_op(const RedistOp *op, const char *in, const char *out)
{
	expect_list(op->in_shape, op->rank_in, in);
	expect_list(op->out_shape, op->rank_out, out);
}

static void expect_slice(const RedistOp *op, const char *begin, const char *end)
{
	assert_int_equal(op->kind, RD_STRIDEDSLICE);
	expect_list(op->begin, op->rank_in, begin);
	expect_list(op->end, op->rank_in, end);
	for (int i = 0; i < op->rank_in; i++)
		assert_int_equal(op->strides[i], 1);
}

static void test_e1(void **state)
{
	(void)state;
	Layout from = lay("2,4,2", "2,0", "512,1024"), to = lay("4,2,2", "2,1", "512,1024");
	RedistPlan p;
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "Reshape StridedSlice AllGather Split Concat StridedSlice Reshape");
	expect_op(&p.ops[0], "256,512", "1,256,512");
	expect_slice(&p.ops[1], "0,0,0", "1,128,512");
	expect_op(&p.ops[2], "1,128,512", "2,128,512");
	expect_list(p.ops[2].group, p.ops[2].ngroup, "0,1");
	assert_int_equal(p.ops[2].n, 2);
	assert_int_equal(p.ops[3].axis, 0);
	assert_int_equal(p.ops[3].n, 2);
	assert_int_equal(p.ops[4].axis, 2);
	expect_op(&p.ops[4], "1,128,512", "1,128,1024");
	expect_slice(&p.ops[5], "0,0,0", "1,128,512");
	expect_op(&p.ops[6], "1,128,512", "128,512");
	redist_plan_free(&p);
}

static void test_e2(void **state)
{
	(void)state;
	Layout from = lay("16,1,1", "2,0", "512,1024"), to = lay("1,16,1", "2,1", "512,1024");
	RedistPlan p;
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "AllGather StridedSlice");
	expect_list(p.ops[0].group, p.ops[0].ngroup, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
	assert_int_equal(p.ops[0].n, 16);
	expect_op(&p.ops[0], "32,1024", "512,1024");
	expect_slice(&p.ops[1], "0,0", "512,64");
	redist_plan_free(&p);
	plan_ok(&from, &to, 0, 1, &p);
	expect_kinds(&p, "AlltoAll");
	assert_int_equal(p.ops[0].n, 16);
	assert_int_equal(p.ops[0].split_dim, 1);
	assert_int_equal(p.ops[0].concat_dim, 0);
	assert_int_equal(p.ops[0].ngroup, 16);
	expect_op(&p.ops[0], "32,1024", "512,64");
	redist_plan_free(&p);
}

static void test_e3(void **state)
{
	(void)state;
	Layout from = lay("8", "0,-1,-1,-1", "128,64,1,1"), to = lay("8", "0,-1", "128,64");
	RedistPlan p;
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "Reshape");
	expect_op(&p.ops[0], "16,64,1,1", "16,64");
	redist_plan_free(&p);
}

static void test_e4_e5(void **state)
{
	(void)state;
	/* E4: quickstart MatMul output -> ReLU (2,4) */
	Layout from = lay("2,4,1", "2,0", "16,16"), to = lay("2,4", "1,0", "16,16");
	RedistPlan p;
	for (int r = 0; r < 8; r++) {
		plan_ok(&from, &to, r, 0, &p);
		expect_kinds(&p, "StridedSlice");
		expect_op(&p.ops[0], "8,16", "8,4");
		assert_int_equal(p.ops[0].begin[1], 4 * (r % 4));
		assert_int_equal(p.ops[0].end[1], 4 * (r % 4) + 4);
		redist_plan_free(&p);
	}
	/* E5: 2022 sharding propagation, (64,64) -> Add ((2,4),(4)) */
	from = lay("2,4,1", "2,0", "64,64");
	to = lay("2,4", "1,0", "64,64");
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "StridedSlice");
	expect_slice(&p.ops[0], "0,0", "32,16");
	redist_plan_free(&p);
}

static void test_e6(void **state)
{
	(void)state;
	Layout from = lay("8", "0,-1", "256,784"), to = lay("4,2,1", "2,1", "256,784");
	RedistPlan p;
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "Reshape AllGather Split Concat StridedSlice Reshape");
	expect_op(&p.ops[0], "32,784", "1,32,784");
	expect_list(p.ops[1].group, p.ops[1].ngroup, "0,1");
	assert_int_equal(p.ops[3].axis, 1);
	expect_op(&p.ops[3], "1,32,784", "1,64,784");
	expect_slice(&p.ops[4], "0,0,0", "1,64,392");
	expect_op(&p.ops[5], "1,64,392", "64,392");
	redist_plan_free(&p);
	plan_ok(&from, &to, 5, 0, &p);
	expect_list(p.ops[1].group, p.ops[1].ngroup, "4,5");
	expect_slice(&p.ops[4], "0,0,392", "1,64,784");
	redist_plan_free(&p);
}

static void test_e7(void **state)
{
	(void)state;
	Layout from = lay("2,4", "1,0", "16,16"), to = lay("2,4", "1,-1", "16,16");
	RedistPlan p;
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "AllGather Split Concat");
	expect_list(p.ops[0].group, p.ops[0].ngroup, "0,1,2,3");
	assert_int_equal(p.ops[1].n, 4);
	assert_int_equal(p.ops[1].axis, 0);
	assert_int_equal(p.ops[2].axis, 1);
	expect_op(&p.ops[0], "8,4", "32,4");
	expect_op(&p.ops[1], "32,4", "8,4");
	expect_op(&p.ops[2], "8,4", "8,16");
	redist_plan_free(&p);
	plan_ok(&from, &to, 5, 0, &p);
	expect_list(p.ops[0].group, p.ops[0].ngroup, "4,5,6,7");
	redist_plan_free(&p);
}

static void test_e8(void **state)
{
	(void)state;
	Layout from = lay("8", "0,-1", "64,32"), to = lay("8", "-1,0", "64,32");
	RedistPlan p;
	plan_ok(&from, &to, 3, 0, &p);
	expect_kinds(&p, "AllGather StridedSlice");
	expect_list(p.ops[0].group, p.ops[0].ngroup, "0,1,2,3,4,5,6,7");
	expect_op(&p.ops[0], "8,32", "64,32");
	expect_slice(&p.ops[1], "0,12", "64,16");
	redist_plan_free(&p);
	plan_ok(&from, &to, 3, 1, &p);
	expect_kinds(&p, "AlltoAll");
	assert_int_equal(p.ops[0].n, 8);
	assert_int_equal(p.ops[0].split_dim, 1);
	assert_int_equal(p.ops[0].concat_dim, 0);
	expect_list(p.ops[0].group, p.ops[0].ngroup, "0,1,2,3,4,5,6,7");
	expect_op(&p.ops[0], "8,32", "64,4");
	redist_plan_free(&p);
}

static void test_e9(void **state)
{
	(void)state;
	Layout from = lay("8", "-1,-1", "64,32"), to = lay("4,2", "1,0", "64,32");
	RedistPlan p;
	plan_ok(&from, &to, 3, 0, &p);
	expect_kinds(&p, "StridedSlice StridedSlice");
	expect_slice(&p.ops[0], "16,0", "32,32");
	expect_slice(&p.ops[1], "0,16", "16,32");
	assert_null(p.groupbuf); /* no communication, no allocation */
	redist_plan_free(&p);
}

static void test_e10(void **state)
{
	(void)state;
	Layout from = lay("2,4", "1,0", "32,64"), to = lay("2,4", "1,0,-1", "32,8,8");
	RedistPlan p;
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "Reshape");
	expect_op(&p.ops[0], "16,16", "16,2,8");
	redist_plan_free(&p);
	from = lay("8", "0,-1", "256,784");
	to = lay("8", "0,-1,-1", "256,28,28");
	plan_ok(&from, &to, 0, 0, &p);
	expect_kinds(&p, "Reshape");
	expect_op(&p.ops[0], "32,784", "32,28,28");
	redist_plan_free(&p);
}

static void test_equal_and_keep_reshape(void **state)
{
	(void)state;
	char err[128];
	RedistPlan p;
	Layout a = lay("4,2,1", "2,0", "256,512"), b = lay("4,1,2", "2,1", "256,512");
	plan_ok(&a, &b, 3, 0, &p);
	assert_int_equal(p.nops, 0);
	redist_plan_free(&p);
	assert_int_equal(redist_plan(&a, &b, iota_list, 3, 0, 1, &p, err, sizeof err), 0);
	expect_kinds(&p, "Reshape");
	expect_op(&p.ops[0], "64,512", "64,512");
	redist_plan_free(&p);
}

static void test_errors(void **state)
{
	(void)state;
	char err[256];
	RedistPlan p;
	Layout a = lay("8", "0,-1", "64,32"), b = lay("8", "0,-1", "64,16");
	assert_int_equal(redist_plan(&a, &b, iota_list, 0, 0, 0, &p, err, sizeof err), -1);
	assert_non_null(strstr(err, "element counts"));
	b = lay("4", "0,-1", "64,32");
	assert_int_equal(redist_plan(&a, &b, iota_list, 0, 0, 0, &p, err, sizeof err), -1);
	assert_non_null(strstr(err, "device counts"));
	a = lay("2,3", "1,0", "12,12");
	b = lay("3,2", "1,0", "12,12");
	assert_int_equal(redist_plan(&a, &b, iota_list, 0, 0, 0, &p, err, sizeof err), -1);
	assert_non_null(strstr(err, "common refinement"));
	a = lay("8", "0,-1", "64,32");
	b = lay("8", "-1,0", "64,32");
	assert_int_equal(redist_plan(&a, &b, iota_list, 9, 0, 0, &p, err, sizeof err), -1);
	assert_non_null(strstr(err, "rank 9"));
	b = lay("8", "0,0", "64,32");
	assert_int_equal(redist_plan(&a, &b, iota_list, 0, 0, 0, &p, err, sizeof err), -1);
	assert_non_null(strstr(err, "invalid"));
}

static void test_unexpandable(void **state)
{
	(void)state;
	/* (6,4) -> (4,6): no common refinement of the shapes (step 2b) */
	Layout from = lay("2", "0,-1", "6,4"), to = lay("2", "-1,0", "4,6");
	RedistPlan p;
	plan_ok(&from, &to, 1, 0, &p);
	expect_kinds(&p, "AllGather Reshape StridedSlice");
	expect_op(&p.ops[0], "3,4", "6,4");
	expect_op(&p.ops[1], "6,4", "4,6");
	expect_slice(&p.ops[2], "0,3", "4,6");
	redist_plan_free(&p);
}

/* §4.5 example costs */
static void test_cost(void **state)
{
	(void)state;
	char err[128];
	RedistCost c;
	Layout from = lay("2,4,1", "2,0", "16,16"), to = lay("2,4", "1,0", "16,16");
	assert_int_equal(redist_cost(&from, &to, 0, 0, &c, err, sizeof err), 0);
	assert_true(c.computation == 128 && c.memory == 128 && c.comm == 0);
	from = lay("16,1,1", "2,0", "512,1024");
	to = lay("1,16,1", "2,1", "512,1024");
	assert_int_equal(redist_cost(&from, &to, 0, 0, &c, err, sizeof err), 0);
	assert_true(c.forward_comm == 262144 && c.backward_comm == 16384 && c.comm == 278528);
	assert_true(c.computation == 32768 + 32768 && c.memory == 524288 + 32768);
	/* a Reshape adds COST_FACTOR * prod(from slice) */
	from = lay("8", "0,-1,-1,-1", "128,64,1,1");
	to = lay("8", "0,-1", "128,64");
	assert_int_equal(redist_cost(&from, &to, 0, 0, &c, err, sizeof err), 0);
	assert_true(c.computation == 2 * 16 * 64 && c.comm == 0);
}

/* ------------------------------------------------------------ property test */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int64_t rnd_below(int64_t n)
{
	return (int64_t)(rnd() % (uint64_t)n);
}

/* a random ordered factorisation of n, with an occasional size-1 factor */
static int rnd_factors(int64_t n, int64_t *out)
{
	int k = 0;
	while (n > 1 && k < 6) {
		int64_t d[64];
		int nd = 0;
		for (int64_t x = 2; x <= n; x++)
			if (n % x == 0)
				d[nd++] = x;
		if (k < 4 && rnd_below(8) == 0)
			out[k++] = 1;
		int64_t f = k == 5 ? n : d[rnd_below(nd)];
		out[k++] = f;
		n /= f;
	}
	if (k == 0 || n > 1)
		out[k++] = n;
	return k;
}

/* a random map over l->dev for the shape already in l (each split divides) */
static void rnd_map(Layout *l)
{
	int used[LAYOUT_MAX_DEV] = {0};
	for (int i = 0; i < l->rank; i++) {
		l->map[i] = -1;
		if (rnd_below(4) == 0)
			continue;
		int64_t c[LAYOUT_MAX_DEV];
		int nc = 0;
		for (int v = 0; v < l->ndev; v++)
			if (!used[v] && l->shape[i] % l->dev[l->ndev - 1 - v] == 0)
				c[nc++] = v;
		if (nc) {
			l->map[i] = c[rnd_below(nc)];
			used[l->map[i]] = 1;
		}
	}
}

static int64_t total(const int64_t *s, int r)
{
	int64_t t = 1;
	for (int i = 0; i < r; i++)
		t *= s[i];
	return t;
}

typedef struct Buf {
	int64_t *d;
	int64_t shape[LAYOUT_MAX_DIM];
	int rank;
	int pieces; /* > 1 between a Split and its Concat */
} Buf;

/* global linear index of every element of position p's slice of l */
static void fill_slice(const Layout *l, int64_t p, Buf *b)
{
	int64_t off[LAYOUT_MAX_DIM], idx[LAYOUT_MAX_DIM] = {0};
	layout_slice_shape(l, b->shape);
	layout_slice_offset(l, p, off);
	b->rank = l->rank;
	b->pieces = 1;
	int64_t n = total(b->shape, b->rank);
	b->d = xmalloc((size_t)(n ? n : 1) * sizeof *b->d);
	for (int64_t e = 0; e < n; e++) {
		int64_t g = 0;
		for (int i = 0; i < l->rank; i++)
			g = g * l->shape[i] + off[i] + idx[i];
		b->d[e] = g;
		for (int i = l->rank - 1; i >= 0; i--) {
			if (++idx[i] < b->shape[i])
				break;
			idx[i] = 0;
		}
	}
}

/* outer x mid x inner view of shape s around axis a */
static void around(const int64_t *s, int r, int a, int64_t *outer, int64_t *inner)
{
	*outer = total(s, a);
	*inner = total(s + a + 1, r - a - 1);
}

/* concatenate k equally shaped blocks (shape s each) along axis a */
static int64_t *concat_blocks(int64_t *const *blk, int k, const int64_t *s, int r, int a)
{
	int64_t outer, inner, mid = s[a];
	around(s, r, a, &outer, &inner);
	int64_t *o = xmalloc((size_t)(outer * mid * inner * k + 1) * sizeof *o), *w = o;
	for (int64_t x = 0; x < outer; x++)
		for (int j = 0; j < k; j++) {
			memcpy(w, blk[j] + x * mid * inner, (size_t)(mid * inner) * sizeof *w);
			w += mid * inner;
		}
	return o;
}

/* piece j of n along axis a of a tensor of shape s */
static int64_t *take_piece(const int64_t *d, const int64_t *s, int r, int a, int64_t n, int64_t j)
{
	int64_t outer, inner, mid = s[a], pm = mid / n;
	around(s, r, a, &outer, &inner);
	int64_t *o = xmalloc((size_t)(outer * pm * inner + 1) * sizeof *o), *w = o;
	for (int64_t x = 0; x < outer; x++) {
		memcpy(w, d + (x * mid + j * pm) * inner, (size_t)(pm * inner) * sizeof *w);
		w += pm * inner;
	}
	return o;
}

static int64_t *strided_slice(const Buf *b, const RedistOp *op)
{
	int64_t os[LAYOUT_MAX_DIM], idx[LAYOUT_MAX_DIM] = {0};
	for (int i = 0; i < b->rank; i++)
		os[i] = op->end[i] - op->begin[i];
	int64_t n = total(os, b->rank);
	int64_t *o = xmalloc((size_t)(n + 1) * sizeof *o);
	for (int64_t e = 0; e < n; e++) {
		int64_t src = 0;
		for (int i = 0; i < b->rank; i++)
			src = src * b->shape[i] + op->begin[i] + idx[i];
		o[e] = b->d[src];
		for (int i = b->rank - 1; i >= 0; i--) {
			if (++idx[i] < os[i])
				break;
			idx[i] = 0;
		}
	}
	return o;
}

static int same(const int64_t *a, int na, const int64_t *b, int nb)
{
	return na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

typedef struct Stats {
	int cases, ranks_checked, unify_errors, unexpandable, with_comm, with_reshape, alltoall_ops;
	int64_t ops;
	int optimized;     /* plans step 6 rewrote */
	int64_t opt_saved; /* operators it saved */
} Stats;

static int64_t stage_base;

static int64_t pos_of(int64_t rank)
{
	return rank - stage_base;
}

/* Every rank's plan has the same op sequence; groups contain the rank, ascend. */
static void check_plans(const RedistPlan *plans, int64_t N, const int64_t *dl)
{
	int nops = plans[0].nops;
	for (int64_t p = 0; p < N; p++) {
		assert_int_equal(plans[p].nops, nops);
		for (int k = 0; k < nops; k++) {
			const RedistOp *op = &plans[p].ops[k];
			assert_int_equal(op->kind, plans[0].ops[k].kind);
			if (op->kind == RD_ALLGATHER || op->kind == RD_ALLTOALL) {
				int self = 0;
				for (int j = 0; j < op->ngroup; j++) {
					self |= op->group[j] == dl[p];
					if (j)
						assert_true(op->group[j - 1] < op->group[j]);
				}
				assert_true(self);
				assert_true(op->ngroup > 1);
			}
			if (op->kind == RD_ALLGATHER)
				assert_int_equal(op->n, op->ngroup);
		}
	}
}

/* Run the N plans in lock step on cur[] (one buffer per position, freed
 * and replaced by the results).  Every op must find the shape it recorded. */
static void exec_plans(const RedistPlan *plans, int64_t N, const int64_t *dl, Buf *cur, Stats *st)
{
	int nops = plans[0].nops;
	Buf *nxt = xcalloc((size_t)N, sizeof *nxt);
	for (int k = 0; k < nops; k++) {
		for (int64_t p = 0; p < N; p++) {
			const RedistOp *op = &plans[p].ops[k];
			Buf *b = &cur[p], *o = &nxt[p];
			if (!same(op->in_shape, op->rank_in, b->shape, b->rank)) {
				print_error("op %d (%s) on position %lld: recorded input shape differs\n", k,
				            kind_name(op->kind), (long long)p);
				fail();
			}
			*o = *b;
			o->rank = op->rank_out;
			memcpy(o->shape, op->out_shape, sizeof o->shape);
			switch (op->kind) {
			case RD_STRIDEDSLICE:
				assert_int_equal(b->pieces, 1);
				o->d = strided_slice(b, op);
				for (int i = 0; i < b->rank; i++)
					assert_int_equal(o->shape[i], op->end[i] - op->begin[i]);
				break;
			case RD_RESHAPE:
				assert_int_equal(b->pieces, 1);
				assert_int_equal(total(op->out_shape, op->rank_out), total(b->shape, b->rank));
				o->d = xmalloc((size_t)(total(b->shape, b->rank) + 1) * sizeof *o->d);
				memcpy(o->d, b->d, (size_t)total(b->shape, b->rank) * sizeof *o->d);
				break;
			case RD_ALLGATHER: {
				int64_t *blk[64];
				for (int j = 0; j < op->ngroup; j++) {
					Buf *m = &cur[pos_of(op->group[j])];
					assert_true(same(m->shape, m->rank, b->shape, b->rank));
					blk[j] = m->d;
				}
				o->d = concat_blocks(blk, op->ngroup, b->shape, b->rank, 0);
				int64_t want[LAYOUT_MAX_DIM];
				memcpy(want, b->shape, sizeof want);
				want[0] *= op->ngroup;
				assert_true(same(o->shape, o->rank, want, b->rank));
				break;
			}
			case RD_SPLIT:
				assert_int_equal(op->axis, 0);
				assert_int_equal(b->shape[0] % op->n, 0);
				assert_int_equal(o->shape[0], b->shape[0] / op->n);
				o->pieces = op->n;
				o->d = xmalloc((size_t)(total(b->shape, b->rank) + 1) * sizeof *o->d);
				memcpy(o->d, b->d, (size_t)total(b->shape, b->rank) * sizeof *o->d);
				break;
			case RD_CONCAT: {
				int64_t *blk[64], sz = total(b->shape, b->rank);
				assert_int_equal(b->pieces, op->n);
				for (int j = 0; j < b->pieces; j++)
					blk[j] = b->d + j * sz;
				o->d = concat_blocks(blk, b->pieces, b->shape, b->rank, op->axis);
				o->pieces = 1;
				assert_int_equal(o->shape[op->axis], b->shape[op->axis] * op->n);
				break;
			}
			case RD_ALLTOALL: {
				int64_t *blk[64];
				int me = -1;
				for (int j = 0; j < op->ngroup; j++)
					if (op->group[j] == dl[p])
						me = j;
				for (int j = 0; j < op->ngroup; j++) {
					Buf *m = &cur[pos_of(op->group[j])];
					blk[j] = take_piece(m->d, m->shape, m->rank, op->split_dim, op->n, me);
				}
				int64_t ps[LAYOUT_MAX_DIM];
				memcpy(ps, b->shape, sizeof ps);
				ps[op->split_dim] /= op->n;
				o->d = concat_blocks(blk, op->ngroup, ps, b->rank, op->concat_dim);
				for (int j = 0; j < op->ngroup; j++)
					free(blk[j]);
				ps[op->concat_dim] *= op->n;
				assert_true(same(o->shape, o->rank, ps, b->rank));
				st->alltoall_ops++;
				break;
			}
			}
		}
		for (int64_t p = 0; p < N; p++) {
			free(cur[p].d);
			cur[p] = nxt[p];
		}
	}
	free(nxt);
}

static RedistPlan *copy_plans(const RedistPlan *plans, int64_t N)
{
	RedistPlan *c = xcalloc((size_t)N, sizeof *c);
	for (int64_t p = 0; p < N; p++) {
		c[p] = plans[p];
		c[p].groupbuf = NULL;
		if (plans[p].groupbuf) {
			c[p].groupbuf = xmalloc((size_t)plans[p].capgroupbuf * sizeof *c[p].groupbuf);
			memcpy(c[p].groupbuf, plans[p].groupbuf, (size_t)plans[p].ngroupbuf * sizeof *c[p].groupbuf);
		}
		for (int k = 0; k < c[p].nops; k++)
			if (plans[p].ops[k].group)
				c[p].ops[k].group = c[p].groupbuf + (plans[p].ops[k].group - plans[p].groupbuf);
	}
	return c;
}

static void free_plans(RedistPlan *plans, int64_t N)
{
	for (int64_t p = 0; p < N; p++)
		redist_plan_free(&plans[p]);
	free(plans);
}

/* Run the plans from every position's slice of `from`; each must end with
 * exactly its slice of `to`. */
static void run_plans(const RedistPlan *plans, int64_t N, const int64_t *dl, const Layout *from, const Layout *to,
                      Stats *st)
{
	check_plans(plans, N, dl);
	Buf *cur = xcalloc((size_t)N, sizeof *cur);
	for (int64_t p = 0; p < N; p++)
		fill_slice(from, p, &cur[p]);
	exec_plans(plans, N, dl, cur, st);
	for (int64_t p = 0; p < N; p++) {
		Buf want;
		fill_slice(to, p, &want);
		if (!same(cur[p].shape, cur[p].rank, want.shape, want.rank) ||
		    memcmp(cur[p].d, want.d, (size_t)total(want.shape, want.rank) * sizeof *want.d) != 0) {
			print_error("position %lld does not end with its target slice\n", (long long)p);
			fail();
		}
		assert_int_equal(cur[p].pieces, 1);
		free(want.d);
		free(cur[p].d);
		st->ranks_checked++;
	}
	free(cur);
}

/* Plan `from -> to` for every rank, run the plans in lock step and check the
 * result; then the same after step 6, which every rank must apply alike.
 * Returns 0, or 1 when the planner (correctly) refused. */
static int run_case(const Layout *from, const Layout *to, int a2a, int keep, Stats *st)
{
	int64_t N = total(from->dev, from->ndev);
	int64_t dl[64];
	char err[256];
	for (int64_t p = 0; p < N; p++)
		dl[p] = stage_base + p;
	RedistPlan *plans = xcalloc((size_t)N, sizeof *plans);
	int rc0 = 0;
	for (int64_t p = 0; p < N; p++) {
		int rc = redist_plan(from, to, dl, dl[p], a2a, keep, &plans[p], err, sizeof err);
		if (p == 0)
			rc0 = rc;
		assert_int_equal(rc, rc0);
	}
	if (rc0 != 0) {
		/* the only refusal allowed for valid layouts: device matrices that
		 * have no common refinement (MindSpore fails there too) */
		Layout a, b, sa, sb;
		int64_t u[LAYOUT_MAX_DEV];
		layout_standardize(from, &a);
		layout_standardize(to, &b);
		layout_squeeze(&a, &sa);
		layout_squeeze(&b, &sb);
		if (layout_unify_dev(sa.dev, sa.ndev, sb.dev, sb.ndev, u, LAYOUT_MAX_DEV) >= 0) {
			print_error("planner refused a unifiable pair: %s\n", err);
			fail();
		}
		if (!strstr(err, "common refinement")) {
			print_error("unexpected refusal: %s\n", err);
			fail();
		}
		free(plans);
		st->unify_errors++;
		return 1;
	}
	run_plans(plans, N, dl, from, to, st);
	int nops = plans[0].nops;
	RedistPlan *opt = copy_plans(plans, N);
	int changed = 0;
	for (int64_t p = 0; p < N; p++) {
		int c = redist_optimize(&opt[p]);
		if (p == 0)
			changed = c;
		assert_int_equal(c, changed);
	}
	run_plans(opt, N, dl, from, to, st);
	st->optimized += changed;
	st->opt_saved += nops - opt[0].nops;
	free_plans(opt, N);
	int comm = 0, resh = 0;
	for (int k = 0; k < nops; k++) {
		comm |= plans[0].ops[k].kind == RD_ALLGATHER || plans[0].ops[k].kind == RD_ALLTOALL;
		resh |= plans[0].ops[k].kind == RD_RESHAPE;
	}
	st->with_comm += comm;
	st->with_reshape += resh;
	st->ops += nops;
	free_plans(plans, N);
	/* the cost model accepts whatever the planner accepts */
	RedistCost c;
	assert_int_equal(redist_cost(from, to, a2a, keep, &c, err, sizeof err), 0);
	if (comm)
		assert_true(c.comm > 0);
	return 0;
}

/* ------------------------------------------------------------ §4.2 step 6 */

/* symbols for the comparator: 0 Reshape, 1 + a AllConcat(axis a), 5 + a Slice(axis a) */
static int step6_less(int x, int y, const void *ctx)
{
	const int *sym = ctx;
	int a = sym[x], b = sym[y];
	if (a == 0 || b == 0)
		return 0;
	if ((a <= 4) != (b <= 4))
		return a <= 4;
	return a <= 4 ? a > b : a < b;
}

static void expect_sorted(const char *syms, const char *want)
{
	int64_t v[64];
	int sym[64] = {0}, idx[64] = {0}, buf[33], n = parse_list(syms, v);
	for (int i = 0; i < n; i++) {
		sym[i] = (int)v[i];
		idx[i] = i;
	}
	std_stable_sort(idx, n, buf, step6_less, sym);
	for (int i = 0; i < n; i++)
		v[i] = idx[i];
	expect_list(v, n, want);
}

/* The results of libstdc++'s std::stable_sort (GCC 12; testsuite/stdsort.sh
 * compares every list up to 6 ops).  An insertion sort, as the spec has it,
 * would give "2 0 1", "2 0 1", "8 5 4 1 0 2 6 3 7" and
 * "13 6 2 1 0 3 4 5 7 9 11 10 8 12 15 14". */
static void test_stable_sort(void **state)
{
	(void)state;
	expect_sorted("6 0 1", "0 1 2");     /* Slice(1) Reshape AllConcat(0): merged, not moved */
	expect_sorted("1 0 2", "0 1 2");     /* AllConcat(0) Reshape AllConcat(1) */
	expect_sorted("2 1 5 6", "0 1 2 3"); /* already in order */
	expect_sorted("7 5 1 3", "3 2 1 0"); /* Slices by axis, after AllConcats by axis descending */
	expect_sorted("5 1 0 7 2 3 6 0 4", "4 1 0 2 8 5 6 3 7");
	expect_sorted("6 5 2 0 1 7 3 0 8 2 5 1 0 4 6 3", "13 6 15 2 9 11 1 10 0 3 4 5 7 8 12 14");
	expect_sorted("", "");
}

static char opt_buf[2048];

/* the plan of rank `rank` after step 6; *changed = what redist_optimize said */
static const char *opt_text(const Layout *from, const Layout *to, int64_t rank, int a2a, int *changed)
{
	RedistPlan p;
	plan_ok(from, to, rank, a2a, &p);
	char before[2048];
	fmt_plan(&p, before, sizeof before);
	*changed = redist_optimize(&p);
	fmt_plan(&p, opt_buf, sizeof opt_buf);
	if (!*changed)
		assert_string_equal(opt_buf, before);
	redist_plan_free(&p);
	return opt_buf;
}

static void test_opt_e6(void **state)
{
	(void)state;
	Layout from = lay("8", "0,-1", "256,784"), to = lay("4,2,1", "2,1", "256,784");
	int changed;
	/* rule 4 makes the gather along axis 1 of (1, 32, 784) a plain AllGather
	 * of (32, 784); the Reshapes around it cancel the first one */
	assert_string_equal(opt_text(&from, &to, 0, 0, &changed),
	                    "AllGather{0,1} Reshape(1,64,784) StridedSlice[0,0,0:1,64,392] Reshape(64,392)");
	assert_true(changed);
	assert_string_equal(opt_text(&from, &to, 5, 0, &changed),
	                    "AllGather{4,5} Reshape(1,64,784) StridedSlice[0,0,392:1,64,784] Reshape(64,392)");
	RedistPlan p;
	plan_ok(&from, &to, 0, 0, &p);
	assert_int_equal(redist_optimize(&p), 1);
	expect_op(&p.ops[0], "32,784", "64,784");
	assert_int_equal(p.ops[0].n, 2);
	expect_op(&p.ops[1], "64,784", "1,64,784");
	expect_slice(&p.ops[2], "0,0,0", "1,64,392");
	expect_op(&p.ops[3], "1,64,392", "64,392");
	redist_plan_free(&p);
}

/* rule 3: AllConcats move in front of Slices; E1 then gathers first */
static void test_opt_sort(void **state)
{
	(void)state;
	Layout from = lay("2,4,2", "2,0", "512,1024"), to = lay("4,2,2", "2,1", "512,1024");
	int changed;
	assert_string_equal(opt_text(&from, &to, 0, 0, &changed),
	                    "Reshape(1,256,512) AllGather{0,1} Split(0,2) Concat(2) StridedSlice[0,0,0:1,128,1024] "
	                    "StridedSlice[0,0,0:1,128,512] Reshape(128,512)");
	assert_true(changed);
	/* E9: Slices on axes 0 then 1 are in order already */
	from = lay("8", "-1,-1", "64,32");
	to = lay("4,2", "1,0", "64,32");
	assert_string_equal(opt_text(&from, &to, 3, 0, &changed), "StridedSlice[16,0:32,32] StridedSlice[0,16:16,32]");
	assert_false(changed);
}

/* rule 4 alone: a gather along axis 1 of (1, 1, 4) */
static void test_opt_allconcat_axis0(void **state)
{
	(void)state;
	Layout from = lay("2,2", "1,0,-1", "2,2,4"), to = lay("2,2", "1,-1,-1", "2,2,4");
	int changed;
	assert_string_equal(opt_text(&from, &to, 0, 0, &changed), "Reshape(1,4) AllGather{0,1} Reshape(1,2,4)");
	assert_true(changed);
	/* E7: 8 rows before the gathered axis, nothing to do */
	from = lay("2,4", "1,0", "16,16");
	to = lay("2,4", "1,-1", "16,16");
	assert_string_equal(opt_text(&from, &to, 5, 0, &changed), "AllGather{4,5,6,7} Split(0,4) Concat(1)");
	assert_false(changed);
}

/* Lists step 6 keeps: one op, an AlltoAll, a step-2b plan. */
static void test_opt_keeps(void **state)
{
	(void)state;
	int changed;
	Layout from = lay("2,4,1", "2,0", "16,16"), to = lay("2,4", "1,0", "16,16");
	assert_string_equal(opt_text(&from, &to, 0, 0, &changed), "StridedSlice[0,0:8,4]");
	assert_false(changed);
	from = lay("8", "0,-1", "256,784"); /* E6 with AlltoAll */
	to = lay("4,2,1", "2,1", "256,784");
	assert_string_equal(opt_text(&from, &to, 0, 1, &changed),
	                    "Reshape(1,32,784) AlltoAll(2,2,1){0,1} Reshape(64,392)");
	assert_false(changed);
	from = lay("2", "0,-1", "6,4");
	to = lay("2", "-1,0", "4,6");
	assert_string_equal(opt_text(&from, &to, 1, 0, &changed), "AllGather{0,1} Reshape(4,6) StridedSlice[0,3:4,6]");
	assert_false(changed);
}

/* Hand-written lists, for the rules the planner rarely needs. */
typedef struct Hand {
	RedistPlan p;
	int64_t s[LAYOUT_MAX_DIM]; /* the current local shape */
	int r;
} Hand;

static void h_start(Hand *h, const char *shape)
{
	memset(h, 0, sizeof *h);
	h->r = parse_list(shape, h->s);
	h->p.capgroupbuf = 256;
	h->p.groupbuf = xmalloc(256 * sizeof *h->p.groupbuf);
}

static RedistOp *h_op(Hand *h, RedistKind k)
{
	RedistOp *o = &h->p.ops[h->p.nops++];
	memset(o, 0, sizeof *o);
	o->kind = k;
	o->rank_in = o->rank_out = h->r;
	memcpy(o->in_shape, h->s, sizeof h->s);
	memcpy(o->out_shape, h->s, sizeof h->s);
	return o;
}

static void h_set(Hand *h, const RedistOp *o)
{
	h->r = o->rank_out;
	memcpy(h->s, o->out_shape, sizeof h->s);
}

static void h_reshape(Hand *h, const char *shape)
{
	RedistOp *o = h_op(h, RD_RESHAPE);
	o->rank_out = parse_list(shape, o->out_shape);
	h_set(h, o);
}

static void h_slice(Hand *h, int axis, int64_t num, int64_t idx)
{
	RedistOp *o = h_op(h, RD_STRIDEDSLICE);
	for (int i = 0; i < h->r; i++) {
		o->end[i] = h->s[i];
		o->strides[i] = 1;
	}
	int64_t blk = h->s[axis] / num;
	o->begin[axis] = idx * blk;
	o->end[axis] = (idx + 1) * blk;
	o->out_shape[axis] = blk;
	h_set(h, o);
}

/* AllGather over ranks first, first + stride, ... (n of them), along axis */
static void h_gather(Hand *h, int64_t first, int64_t stride, int n, int axis)
{
	RedistOp *o = h_op(h, RD_ALLGATHER);
	o->n = o->ngroup = n;
	o->group = h->p.groupbuf + h->p.ngroupbuf;
	h->p.ngroupbuf += n;
	for (int i = 0; i < n; i++)
		o->group[i] = first + i * stride;
	o->out_shape[0] *= n;
	h_set(h, o);
	if (axis == 0)
		return;
	o = h_op(h, RD_SPLIT);
	o->n = n;
	o->out_shape[0] /= n;
	h_set(h, o);
	o = h_op(h, RD_CONCAT);
	o->n = n;
	o->axis = axis;
	o->out_shape[axis] *= n;
	h_set(h, o);
}

typedef void (*HandFn)(Hand *h, int64_t rank, const void *arg);

/* Build fn's list on each of N ranks, optimise it, and run both versions
 * from the same data: every rank must end with the same values.  Returns
 * rank 0's list after step 6. */
static const char *hand_case(HandFn fn, const void *arg, int64_t N, int want_changed)
{
	Hand *h = xcalloc((size_t)N, sizeof *h);
	RedistPlan *plain = xcalloc((size_t)N, sizeof *plain);
	int64_t dl[64];
	Stats st;
	memset(&st, 0, sizeof st);
	stage_base = 0;
	for (int64_t p = 0; p < N; p++) {
		fn(&h[p], p, arg);
		plain[p] = h[p].p;
		dl[p] = p;
	}
	free(h);
	RedistPlan *opt = copy_plans(plain, N);
	for (int64_t p = 0; p < N; p++)
		assert_int_equal(redist_optimize(&opt[p]), want_changed);
	check_plans(opt, N, dl);
	Buf *a = xcalloc((size_t)N, sizeof *a), *b = xcalloc((size_t)N, sizeof *b);
	for (int64_t p = 0; p < N; p++) {
		const RedistOp *o = &plain[p].ops[0];
		a[p].rank = b[p].rank = o->rank_in;
		memcpy(a[p].shape, o->in_shape, sizeof a[p].shape);
		memcpy(b[p].shape, o->in_shape, sizeof b[p].shape);
		a[p].pieces = b[p].pieces = 1;
		int64_t n = total(o->in_shape, o->rank_in);
		a[p].d = xmalloc((size_t)n * sizeof *a[p].d);
		b[p].d = xmalloc((size_t)n * sizeof *b[p].d);
		for (int64_t e = 0; e < n; e++)
			a[p].d[e] = b[p].d[e] = p * 100000 + e;
	}
	exec_plans(plain, N, dl, a, &st);
	exec_plans(opt, N, dl, b, &st);
	for (int64_t p = 0; p < N; p++) {
		assert_true(same(a[p].shape, a[p].rank, b[p].shape, b[p].rank));
		assert_memory_equal(a[p].d, b[p].d, (size_t)total(a[p].shape, a[p].rank) * sizeof *a[p].d);
		free(a[p].d);
		free(b[p].d);
	}
	free(a);
	free(b);
	fmt_plan(&opt[0], opt_buf, sizeof opt_buf);
	free_plans(plain, N);
	free_plans(opt, N);
	return opt_buf;
}

/* rule 2: Reshape then Reshape is the second; a Reshape to the same shape goes */
static void h_reshapes(Hand *h, int64_t rank, const void *arg)
{
	(void)arg;
	h_start(h, "4,8");
	h_reshape(h, "2,16");
	h_reshape(h, "4,8");
	h_gather(h, rank & ~1, 1, 2, 0);
	h_reshape(h, "8,8"); /* after the gather: (8, 8) already */
	h_reshape(h, "64");
}

/* rules 5 and 8: Slice(1) and Slice(2) of (1, 2, 8), then Reshape(4): each
 * Slice moves behind the Reshape in turn, then the two Slices of axis 0 merge */
static void h_slices(Hand *h, int64_t rank, const void *arg)
{
	(void)arg;
	h_start(h, "1,2,8");
	h_slice(h, 1, 2, rank / 2);
	h_slice(h, 2, 2, rank % 2);
	h_reshape(h, "4");
}

/* rule 5 on axis 0: the Slice moves behind the Reshape as well */
static void h_slice_axis0(Hand *h, int64_t rank, const void *arg)
{
	(void)arg;
	h_start(h, "4,8");
	h_slice(h, 0, 2, rank % 2);
	h_reshape(h, "16");
}

/* Two gathers of (2, 4) over pairs of ranks: arg = {stride of the first
 * pair (1: {2k, 2k+1}, 2: two apart), its axis, the second pair's axis}. */
static void h_pairs(Hand *h, int64_t rank, const void *arg)
{
	const int *a = arg;
	int64_t s1 = a[0], s2 = 3 - s1;
	h_start(h, "2,4");
	h_gather(h, rank & ~s1, s1, 2, a[1]);
	h_gather(h, rank & ~s2, s2, 2, a[2]);
}

/* a Split/Concat without its AllGather; a StridedSlice over two axes */
static void h_unknown_split(Hand *h, int64_t rank, const void *arg)
{
	(void)arg;
	(void)rank;
	h_start(h, "4,4");
	RedistOp *o = h_op(h, RD_SPLIT);
	o->n = 2;
	o->out_shape[0] = 2;
	h_set(h, o);
	o = h_op(h, RD_CONCAT);
	o->n = 2;
	o->axis = 1;
	o->out_shape[1] = 8;
	h_set(h, o);
}

static void h_two_axis_slice(Hand *h, int64_t rank, const void *arg)
{
	(void)arg;
	h_start(h, "4,4");
	h_slice(h, 0, 2, rank % 2);
	h->p.ops[0].begin[1] = 0;
	h->p.ops[0].end[1] = 2;
	h->p.ops[0].out_shape[1] = 2;
	h_set(h, &h->p.ops[0]);
	h_reshape(h, "4");
}

static void test_opt_hand(void **state)
{
	(void)state;
	static const int two_axes[] = {1, 0, 1}, nested[] = {1, 0, 0}, nested1[] = {1, 1, 1}, outer[] = {2, 0, 0};
	assert_string_equal(hand_case(h_reshapes, NULL, 4, 1), "AllGather{0,1} Reshape(64)");
	assert_string_equal(hand_case(h_slices, NULL, 4, 1), "Reshape(16) StridedSlice[0:4]");
	assert_string_equal(hand_case(h_slice_axis0, NULL, 2, 1), "Reshape(32) StridedSlice[0:16]");
	/* rule 3: the AllConcat on the larger axis goes first */
	assert_string_equal(hand_case(h_pairs, two_axes, 4, 1), "AllGather{0,2} Split(0,2) Concat(1) AllGather{0,1}");
	/* rule 7: the pair {2k, 2k+1}, then the pair two apart: one group of four */
	assert_string_equal(hand_case(h_pairs, nested, 8, 1), "AllGather{0,1,2,3}");
	assert_string_equal(hand_case(h_pairs, nested1, 8, 1), "AllGather{0,1,2,3} Split(0,4) Concat(1)");
	/* the outer pair first: the data order is not a group's order, kept */
	assert_string_equal(hand_case(h_pairs, outer, 8, 0), "AllGather{0,2} AllGather{0,1}");
	assert_string_equal(hand_case(h_unknown_split, NULL, 2, 0), "Split(0,2) Concat(1)");
	assert_string_equal(hand_case(h_two_axis_slice, NULL, 2, 0), "StridedSlice[0,0:2,2] Reshape(4)");
	/* rank 3's pieces: block 1 then block 1 of it is block 3 of four */
	Hand h;
	h_slices(&h, 3, NULL);
	assert_int_equal(redist_optimize(&h.p), 1);
	assert_string_equal(fmt_plan(&h.p, opt_buf, sizeof opt_buf), "Reshape(16) StridedSlice[12:16]");
	redist_plan_free(&h.p);
	h_pairs(&h, 5, nested);
	assert_int_equal(redist_optimize(&h.p), 1);
	assert_string_equal(fmt_plan(&h.p, opt_buf, sizeof opt_buf), "AllGather{4,5,6,7}");
	expect_op(&h.p.ops[0], "2,4", "8,4");
	redist_plan_free(&h.p);
}

static void rnd_layout_shape(Layout *l, int64_t N, int max_elems)
{
	for (;;) {
		l->ndev = rnd_factors(N, l->dev);
		l->rank = 1 + (int)rnd_below(4);
		for (int i = 0; i < l->rank; i++)
			l->shape[i] = rnd_below(6) == 0 ? 1 : 1 + rnd_below(4);
		/* make room for some splits: multiply random dims by device sizes */
		for (int d = 0; d < l->ndev; d++)
			if (rnd_below(3))
				l->shape[rnd_below(l->rank)] *= l->dev[d];
		if (total(l->shape, l->rank) <= max_elems)
			break;
	}
	rnd_map(l);
}

/* a random shape with the same element count as s */
static int rnd_reshape(int64_t tot, int64_t *out)
{
	int r = 0;
	int want = 1 + (int)rnd_below(4);
	while (r < want - 1 && tot > 1) {
		int64_t d[256];
		int nd = 0;
		for (int64_t x = 1; x <= tot && nd < 256; x++)
			if (tot % x == 0)
				d[nd++] = x;
		out[r] = d[rnd_below(nd)];
		tot /= out[r++];
	}
	out[r++] = tot;
	return r;
}

static void test_property(void **state)
{
	(void)state;
	Stats st;
	memset(&st, 0, sizeof st);
	int ncases = 10000;
	const char *env = getenv("REDIST_PROPERTY_CASES");
	if (env)
		ncases = atoi(env);
	for (int c = 0; c < ncases; c++) {
		int64_t N = 1 + rnd_below(64);
		Layout from, to;
		memset(&from, 0, sizeof from);
		memset(&to, 0, sizeof to);
		rnd_layout_shape(&from, N, 2048);
		to = from;
		to.ndev = rnd_factors(N, to.dev);
		if (rnd_below(3) == 0)
			to.rank = rnd_reshape(total(from.shape, from.rank), to.shape);
		if (rnd_below(10) == 0)
			to.ndev = from.ndev, memcpy(to.dev, from.dev, sizeof to.dev);
		rnd_map(&to);
		assert_int_equal(layout_check(&from), 0);
		assert_int_equal(layout_check(&to), 0);
		stage_base = N * rnd_below(3);
		int a2a = rnd_below(2) == 0;
		int keep = rnd_below(8) == 0;
		if (run_case(&from, &to, a2a, keep, &st) == 0)
			st.cases++;
		/* the identity transfer is always free */
		RedistPlan p;
		char err[128];
		int64_t dl[64];
		for (int64_t q = 0; q < N; q++)
			dl[q] = q;
		assert_int_equal(redist_plan(&from, &from, dl, N - 1, a2a, 0, &p, err, sizeof err), 0);
		assert_int_equal(p.nops, 0);
		redist_plan_free(&p);
	}
	print_message("property: %d cases run on %d ranks (%lld ops; %d communicate, %d reshape, %d AlltoAll); "
	              "%d refused (device matrices without a common refinement); step 6 rewrote %d plans, "
	              "%lld ops fewer\n",
	              st.cases, st.ranks_checked, (long long)st.ops, st.with_comm, st.with_reshape, st.alltoall_ops,
	              st.unify_errors, st.optimized, (long long)st.opt_saved);
	assert_true(st.cases > ncases / 2);
}

/* A few hand-picked hard cases: swaps (deadlock breaker), 3-way rotations,
 * unexpandable reshapes with splits on both sides. */
static void test_hard_cases(void **state)
{
	(void)state;
	static const char *const c[][6] = {
	    {"2,4", "1,0", "8,8", "2,4", "0,1", "8,8"},
	    {"2,2,2", "2,1,0", "4,4,4", "2,2,2", "0,2,1", "4,4,4"},
	    {"2,2,2", "2,1,0", "4,4,4", "2,2,2", "1,0,2", "4,4,4"},
	    {"2,3", "1,0", "6,6", "2,3", "-1,1", "6,6"},
	    {"4", "0,-1", "8,6", "4", "-1,0", "6,8"},
	    {"2,2", "1,0", "6,4", "2,2", "0,1", "4,6"},
	    {"8", "0,-1", "64,32", "2,2,2", "2,0,-1", "16,4,32"},
	    {"16", "0,-1", "512,1024", "2,8", "1,0", "512,1024"},
	    {"2,4,2", "2,0", "512,1024", "4,2,2", "2,1", "512,1024"},
	    {"4,2", "-1,1,0", "3,8,2", "8", "0,-1", "16,3"},
	};
	Stats st;
	memset(&st, 0, sizeof st);
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
		for (int a2a = 0; a2a < 2; a2a++) {
			Layout from = lay(c[i][0], c[i][1], c[i][2]), to = lay(c[i][3], c[i][4], c[i][5]);
			stage_base = 0;
			assert_int_equal(run_case(&from, &to, a2a, 0, &st), 0);
			assert_int_equal(run_case(&to, &from, a2a, 0, &st), 0);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rh_int_orders),
	    cmocka_unit_test(test_rh_attr_orders),
	    cmocka_unit_test(test_rh_stress),
	    cmocka_unit_test(test_standardize),
	    cmocka_unit_test(test_check),
	    cmocka_unit_test(test_coord_slice),
	    cmocka_unit_test(test_groups),
	    cmocka_unit_test(test_expand_dev),
	    cmocka_unit_test(test_unify_and_expand_shape),
	    cmocka_unit_test(test_expand_tensor_shape),
	    cmocka_unit_test(test_squeeze),
	    cmocka_unit_test(test_e1),
	    cmocka_unit_test(test_e2),
	    cmocka_unit_test(test_e3),
	    cmocka_unit_test(test_e4_e5),
	    cmocka_unit_test(test_e6),
	    cmocka_unit_test(test_e7),
	    cmocka_unit_test(test_e8),
	    cmocka_unit_test(test_e9),
	    cmocka_unit_test(test_e10),
	    cmocka_unit_test(test_equal_and_keep_reshape),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_unexpandable),
	    cmocka_unit_test(test_cost),
	    cmocka_unit_test(test_stable_sort),
	    cmocka_unit_test(test_opt_e6),
	    cmocka_unit_test(test_opt_sort),
	    cmocka_unit_test(test_opt_allconcat_axis0),
	    cmocka_unit_test(test_opt_keeps),
	    cmocka_unit_test(test_opt_hand),
	    cmocka_unit_test(test_hard_cases),
	    cmocka_unit_test(test_property),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
