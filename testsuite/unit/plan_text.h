/* plan_text.h - a redistribution plan as one line of text, for the unit
 * tests: "Reshape(1,32,784) AllGather{0,1} Split(0,2) Concat(1)
 * StridedSlice[0,0,0:1,64,392] Reshape(64,392)". */
#ifndef SAPPC_PLAN_TEXT_H
#define SAPPC_PLAN_TEXT_H

#include <stdio.h>

#include "../passes/layout.h"

static void fmt_list(char **p, char *end, const char *open, const int64_t *v, int n, const char *close)
{
	*p += snprintf(*p, (size_t)(end - *p), "%s", open);
	for (int i = 0; i < n; i++)
		*p += snprintf(*p, (size_t)(end - *p), i ? ",%lld" : "%lld", (long long)v[i]);
	*p += snprintf(*p, (size_t)(end - *p), "%s", close);
}

static const char *fmt_plan(const RedistPlan *p, char *buf, size_t n)
{
	char *s = buf, *end = buf + n;
	*s = 0;
	for (int i = 0; i < p->nops; i++) {
		const RedistOp *o = &p->ops[i];
		if (i)
			s += snprintf(s, (size_t)(end - s), " ");
		switch (o->kind) {
		case RD_RESHAPE:
			fmt_list(&s, end, "Reshape(", o->out_shape, o->rank_out, ")");
			break;
		case RD_STRIDEDSLICE:
			fmt_list(&s, end, "StridedSlice[", o->begin, o->rank_in, ":");
			fmt_list(&s, end, "", o->end, o->rank_in, "]");
			break;
		case RD_ALLGATHER:
			fmt_list(&s, end, "AllGather{", o->group, o->ngroup, "}");
			break;
		case RD_SPLIT:
			s += snprintf(s, (size_t)(end - s), "Split(%d,%d)", o->axis, o->n);
			break;
		case RD_CONCAT:
			s += snprintf(s, (size_t)(end - s), "Concat(%d)", o->axis);
			break;
		case RD_ALLTOALL:
			s += snprintf(s, (size_t)(end - s), "AlltoAll(%d,%d,%d)", o->n, o->split_dim, o->concat_dim);
			fmt_list(&s, end, "{", o->group, o->ngroup, "}");
			break;
		}
	}
	return buf;
}

#endif
