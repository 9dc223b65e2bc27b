/* test_report.c - the report's byte counts and times, checked by hand on a
 * small lowered graph: one forward AllReduce, one redistribution AllGather,
 * one mirrored weight. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sappc.h"
#include "../../backend/report.h"

static const char *graph =
	"%para1_x: <Tensor[Float32], (64, 392)>\n"
	"%para2_w: <Ref[Tensor[Float32]], (512, 392), ref_key=w>  :  has_default\n"
	"  %0(a) = Load(%para2_w, UMonad[U])\n"
	"      : (<Ref[Tensor[Float32]], (512, 392), ref_key=w>, <UMonad, NoShape>) -> (<Tensor[Float32], (512, 392)>)\n"
	"  %1(b) = MatMul(%para1_x, %0) {instance name: matmul} primitive_attrs: {transpose_b: Bool(1)} "
	"cnode_primal_attrs: {related_fusion_key: \"all_reduce_4-5226697808808137312_1\"} {in_strategy: ((4, 2), (1, 2))}\n"
	"      : (<Tensor[Float32], (64, 392)>, <Tensor[Float32], (512, 392)>) -> (<Tensor[Float32], (64, 512)>)\n"
	"  %2(c) = AllReduce(%1) {instance name: forward_op_15773666391001111732} primitive_attrs: "
	"{group: \"2-5004544844489628105\", op: \"sum\", group_rank_ids: (0, 1)}\n"
	"      : (<Tensor[Float32], (64, 512)>) -> (<Tensor[Float32], (64, 512)>)\n"
	"  %3(d) = AllGather(%2) {instance name: redistribution_op_7AllGather} primitive_attrs: "
	"{group: \"4-6301172352641561019\", rank_size: I64(4), group_rank_ids: (0, 1, 2, 3)}\n"
	"      : (<Tensor[Float32], (64, 512)>) -> (<Tensor[Float32], (256, 512)>)\n"
	"  Return(%3)\n"
	"      : (<Tensor[Float32], (256, 512)>)\n";

static void test_bytes(void **state)
{
	(void)state;
	size_t n = strlen(graph);
	char *buf = malloc(n + 2);
	memcpy(buf, graph, n + 1);
	buf[n + 1] = 0;
	Module *m = ir_parse("<report>", buf, n, 0);
	assert_non_null(m);
	assert_int_equal(pass_verify(m, NULL), 0);
	ReportConfig c = {8, 0, 8, 100.0, 12.5, 1.0, 5.0, "hccl_world_group", 1, SCHED_1F1B};
	Report *r = calloc(1, sizeof *r);
	report_collect(m, &c, r);
	assert_int_equal(r->ncomm, 2);
	/* AllReduce of 64*512 floats = 131072 bytes over 2 ranks: 2*(1/2)*S */
	assert_true(r->cat_bytes[RC_FORWARD] == 131072.0);
	/* its time: 2(p-1) = 2 steps of 1 us plus 131072 B at 100 GB/s */
	assert_true(r->cat_secs[RC_FORWARD] > 3.3107e-6 && r->cat_secs[RC_FORWARD] < 3.3108e-6);
	/* redistribution AllGather of 131072 bytes over 4 ranks: (p-1)*S_in */
	assert_true(r->cat_bytes[RC_REDIST] == 393216.0);
	/* the weight's gradient all-reduce over its mirror group of 4: 2*3/4 * 512*392*4 */
	assert_true(r->cat_bytes[RC_GRADIENT] == 1204224.0);
	assert_int_equal(r->param_bytes, 512 * 392 * 4);
	/* a group spanning two nodes of 4 devices is inter-node */
	double v, t;
	ReportConfig c2 = c;
	c2.per_node = 1;
	report_cost(&c2, OP_AllReduce, 2, 131072, 1, &v, &t);
	assert_true(v == 131072.0);
	assert_true(t > 2 * 5e-6 + 131072 / 12.5e9 - 1e-12 && t < 2 * 5e-6 + 131072 / 12.5e9 + 1e-12);
	free(r);
	ir_module_free(m);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_bytes)};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	intern_free_all();
	return rc;
}
