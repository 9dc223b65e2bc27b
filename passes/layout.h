/* layout.h - tensor layouts and tensor redistribution (parallel-lowering.md §2.1, §4).
 *
 * Shared by the lowering passes.  The layout algebra and the redistribution
 * planner (passes/tensor_layout.c, passes/redist.c) know nothing of the IR:
 * they work on Layout values and rank numbers only, so they can be unit
 * tested against the spec's worked examples directly.
 */
#ifndef SAPPC_LAYOUT_H
#define SAPPC_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define LAYOUT_MAX_DEV 32   /* device-matrix dimensions */
#define LAYOUT_MAX_DIM 16   /* tensor dimensions (equals MAX_RANK) */
#define REDIST_MAX_OPS 64

/* A tensor layout: device matrix D (product = devices of the stage), tensor
 * map M (one entry per tensor dimension: -1 = not split, j >= 0 = split over
 * device dimension ndev-1-j, i.e. map values count device dims from the
 * right) and the full (global) tensor shape. */
typedef struct Layout {
	int ndev;
	int64_t dev[LAYOUT_MAX_DEV];
	int rank;
	int64_t map[LAYOUT_MAX_DIM];
	int64_t shape[LAYOUT_MAX_DIM];
} Layout;

/* ---- tensor_layout.c: the algebra of §2.1 and §4.2 steps 0-2 ---- */
/* 0 ok, -1 invalid (map value out of range, used twice, or a split that does not divide) */
int layout_check(const Layout *l);
/* standardisation: drop size-1 device dims, renumber the map; all-1 -> D=[1] */
void layout_standardize(const Layout *in, Layout *out);
int layout_equal(const Layout *a, const Layout *b); /* compares standardised forms */
void layout_slice_shape(const Layout *l, int64_t *out); /* local shape, rank l->rank */
/* coordinate of position p (0..prod(D)-1) in the device matrix, row-major, last dim fastest */
void layout_coord(const Layout *l, int64_t p, int64_t *coord);
/* position in dev_list of the devices that differ from p only along device dimension a (ascending) */
int layout_group_along(const Layout *l, int64_t p, int a, int64_t *out);
/* positions that hold the same slice as p (replica group, GetDevicesByTensorMap), ascending */
int layout_replica_group(const Layout *l, int64_t p, int64_t *out);
/* offset of p's block along every tensor dimension (in elements) */
void layout_slice_offset(const Layout *l, int64_t p, int64_t *off);

/* Helpers of §4.2 steps 0-2, exposed for the unit tests and for callers that
 * want the unified layouts.  All return 0 (or a length) on success, -1 when
 * the transform does not exist or would exceed LAYOUT_MAX_DEV/LAYOUT_MAX_DIM. */
void layout_squeeze(const Layout *in, Layout *out); /* drop size-1 tensor dims; all-1 -> [1] */
/* fine refines coarse: fine splits into consecutive runs whose products are coarse's entries */
int layout_refines(const int64_t *coarse, int nc, const int64_t *fine, int nf);
/* coarsest device matrix refining both (merged prefix products); length or -1 */
int layout_unify_dev(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int max);
/* ExpandShape: coarsest shape refining both (merged suffix products); length or -1 */
int layout_expand_shape(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int max);
/* ExpandDeviceArrangement onto dev (which must refine l->dev) */
int layout_expand_dev(const Layout *l, const int64_t *dev, int ndev, Layout *out);
/* ExpandTensorShape to shape (which must refine l->shape) */
int layout_expand_tensor_shape(const Layout *l, const int64_t *shape, int rank, Layout *out);

/* ---- redist.c: the redistribution planner of §4.2 (steps 0-5; step 6 separately) ---- */
typedef enum {
	RD_STRIDEDSLICE, /* begin/end/strides over the current local tensor */
	RD_ALLGATHER,    /* concatenate along dim 0 over group */
	RD_SPLIT,        /* Split(axis, n) of the gathered tensor (n outputs) */
	RD_CONCAT,       /* Concat(axis) of the n Split outputs */
	RD_ALLTOALL,     /* split_count, split_dim, concat_dim, group */
	RD_RESHAPE,      /* to shape[] */
} RedistKind;
#define RD_KINDS (RD_RESHAPE + 1)

typedef struct RedistOp {
	RedistKind kind;
	int rank_in, rank_out;          /* ranks of the local tensor before / after */
	int64_t in_shape[LAYOUT_MAX_DIM];  /* local shape before the op */
	int64_t out_shape[LAYOUT_MAX_DIM]; /* local shape after the op */
	int64_t begin[LAYOUT_MAX_DIM], end[LAYOUT_MAX_DIM], strides[LAYOUT_MAX_DIM]; /* STRIDEDSLICE */
	int axis;                       /* SPLIT / CONCAT */
	int n;                          /* SPLIT output count / ALLTOALL split_count / ALLGATHER group size */
	int split_dim, concat_dim;      /* ALLTOALL */
	int ngroup;                     /* ALLGATHER / ALLTOALL */
	int64_t *group;                 /* ranks (dev_list values), ascending; owned by the plan */
} RedistOp;

typedef struct RedistPlan {
	int nops;
	RedistOp ops[REDIST_MAX_OPS];
	int64_t *groupbuf; /* storage behind ops[].group; free with redist_plan_free */
	int ngroupbuf, capgroupbuf;
	int unexpandable; /* built by step 2b, which step 6 leaves alone */
} RedistPlan;

void redist_plan_free(RedistPlan *plan);

/* Plan the operators that turn rank `rank`'s slice of `from` into its slice of
 * `to`.  dev_list maps device-matrix positions to global ranks (length =
 * prod(D)); `rank` must be in it.  keep_reshape: emit a Reshape even when no
 * communication is needed and the local shapes differ (ReshapeInfo).
 * Returns 0, or -1 with a message in err (element counts differ, layouts
 * invalid, device counts differ, device matrices without a common refinement
 * such as [2,3] and [3,2], which MindSpore rejects too).
 * `plan` needs no initialisation; call redist_plan_free after either result.
 * Groups list the ranks in device-coordinate order, which is ascending
 * because stage dev_lists are.  Every rank gets the same op kinds in the same
 * order; only groups and StridedSlice bounds differ. */
int redist_plan(const Layout *from, const Layout *to, const int64_t *dev_list, int64_t rank, int enable_alltoall,
		int keep_reshape, RedistPlan *plan, char *err, size_t errlen);

/* §4.2 step 6, the operator-list optimiser of MindSpore >= 2.3, on a plan of
 * redist_plan() (or any list of Reshape / AllGather [+ Split(0, n) +
 * Concat] / single-axis StridedSlice ops with consistent shapes and groups
 * that contain the rank): gather before slicing, gather and slice on axis 0
 * where leading 1s allow, merge what then sits side by side.  Returns 1
 * when it rewrote the list, 0 when it kept it (one op or none, an AlltoAll,
 * a step-2b plan, or a list it cannot read).  Every rank still gets the same
 * op kinds in the same order. */
int redist_optimize(RedistPlan *plan);

/* §4.5: the cost the strategy searcher charges for a transfer (before the
 * element byte size is applied).  Rank-independent. */
typedef struct RedistCost {
	double forward_comm, backward_comm, comm, computation, memory;
} RedistCost;
int redist_cost(const Layout *from, const Layout *to, int enable_alltoall, int keep_reshape, RedistCost *cost,
		char *err, size_t errlen);

#endif
