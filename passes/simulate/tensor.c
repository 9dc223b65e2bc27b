/* tensor.c - tensors and values of the simulator: allocation against the
 * run's storage limit, views, shapes, the counter-based random generator,
 * block extraction and the first-error record.
 *
 * Storage: every tensor and value belongs to its SimRun and is freed by
 * sim_free().  Tensors are never written after the kernel that made them
 * returns, so identity-like operators (Load, Reshape, TupleGetItem, the
 * output of an AllReduce on every rank of its group) share one buffer
 * through views instead of copying it.
 */
#include <string.h>

#include "simint.h"

int sim_numel(int ndim, const int64_t *shape, int64_t *out)
{
	int64_t p = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0)
			return -1;
		if (shape[i] && p > INT64_MAX / 4 / shape[i])
			return -1;
		p *= shape[i];
	}
	*out = p;
	return 0;
}

void sim_strides(int ndim, const int64_t *shape, int64_t *st)
{
	int64_t s = 1;
	for (int i = ndim - 1; i >= 0; i--) {
		st[i] = s;
		s *= shape[i];
	}
}

int sim_same_shape(const SimTensor *a, int ndim, const int64_t *shape)
{
	if (a->ndim != ndim)
		return 0;
	for (int i = 0; i < ndim; i++)
		if (a->shape[i] != shape[i])
			return 0;
	return 1;
}

void sim_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t k = 0;
	k += (size_t)snprintf(buf + k, n - k, "(");
	for (int i = 0; i < ndim && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
	if (k < n)
		snprintf(buf + k, n - k, ")");
}

void sim_fmt_index(char *buf, size_t n, int ndim, const int64_t *idx)
{
	sim_fmt_shape(buf, n, ndim, idx);
}

void sim_unflatten(int64_t flat, int ndim, const int64_t *shape, int64_t *idx)
{
	for (int i = ndim - 1; i >= 0; i--) {
		idx[i] = shape[i] ? flat % shape[i] : 0;
		flat = shape[i] ? flat / shape[i] : 0;
	}
}

int sim_dtype_of(Sym dtype)
{
	const char *s = dtype ? sym_str(dtype) : "";
	if (strcmp(s, "Bool") == 0)
		return SD_BOOL;
	if (strncmp(s, "Int", 3) == 0 || strncmp(s, "UInt", 4) == 0)
		return SD_INT;
	return SD_F32;
}

const char *sim_dtype_name(int d)
{
	return d == SD_BOOL ? "Bool" : d == SD_INT ? "Int" : "Float32";
}

uint64_t sim_mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

static SimTensor *tensor_shell(SimRun *r, int dtype, int ndim, const int64_t *shape, int64_t numel)
{
	SimTensor *t = xcalloc(1, sizeof *t);
	t->dtype = (uint8_t)dtype;
	t->ndim = ndim;
	for (int i = 0; i < ndim; i++)
		t->shape[i] = shape[i];
	t->numel = numel;
	vec_push(&r->tensors, t);
	return t;
}

int sim_budget_error(SimRun *r)
{
	return sim_errorf(r, NULL, NULL,
	                  "the simulation needs more than the %.0f MB of tensor storage it may use "
	                  "(--simulate-max-mb)",
	                  (double)r->limit / (1024.0 * 1024.0));
}

SimTensor *sim_tensor_new(SimRun *r, int dtype, int ndim, const int64_t *shape)
{
	int64_t numel;
	if (ndim < 0 || ndim > MAX_RANK || sim_numel(ndim, shape, &numel) < 0) {
		sim_errorf(r, NULL, NULL, "tensor shape out of range");
		return NULL;
	}
	int64_t bytes = numel * (int64_t)sizeof(float);
	if (!sim_budget_take(r, bytes)) {
		sim_budget_error(r);
		return NULL;
	}
	SimTensor *t = tensor_shell(r, dtype, ndim, shape, numel);
	t->data = xcalloc((size_t)(numel ? numel : 1), sizeof(float));
	vec_push(&r->buffers, t->data);
	return t;
}

SimTensor *sim_tensor_view(SimRun *r, const SimTensor *base, int ndim, const int64_t *shape, int64_t off)
{
	int64_t numel;
	if (ndim > MAX_RANK || sim_numel(ndim, shape, &numel) < 0 || off + numel > base->numel)
		die("simulate: bad tensor view");
	SimTensor *t = tensor_shell(r, base->dtype, ndim, shape, numel);
	t->data = base->data + off;
	return t;
}

static SimValue *val_new(SimRun *r, int kind)
{
	SimValue *v = xcalloc(1, sizeof *v);
	v->kind = (uint8_t)kind;
	vec_push(&r->values, v);
	return v;
}

SimValue *sim_val_tensor(SimRun *r, SimTensor *t)
{
	if (!t)
		return NULL;
	SimValue *v = val_new(r, SV_TENSOR);
	v->t = t;
	return v;
}

SimValue *sim_val_tuple(SimRun *r, uint32_t n)
{
	SimValue *v = val_new(r, SV_TUPLE);
	v->n = n;
	v->elems = xcalloc(n ? n : 1, sizeof *v->elems);
	return v;
}

SimValue *sim_val_none(SimRun *r)
{
	return val_new(r, SV_NONE);
}

void sim_copy_strided(const float *src, int64_t base, int nd, const int64_t *shape, const int64_t *stride, float *dst)
{
	int64_t idx[MAX_RANK] = {0}, numel, off = base;
	if (sim_numel(nd, shape, &numel) < 0)
		return;
	for (int64_t i = 0; i < numel; i++) {
		dst[i] = src[off];
		for (int d = nd - 1; d >= 0; d--) {
			off += stride[d];
			if (++idx[d] < shape[d])
				break;
			off -= stride[d] * shape[d];
			idx[d] = 0;
		}
	}
}

SimTensor *sim_extract(SimRun *r, const SimTensor *src, const int64_t *off, const int64_t *shape)
{
	int nd = src->ndim;
	SimTensor *t = sim_tensor_new(r, src->dtype, nd, shape);
	if (!t)
		return NULL;
	int64_t st[MAX_RANK], base = 0;
	sim_strides(nd, src->shape, st);
	for (int d = 0; d < nd; d++)
		base += off[d] * st[d];
	sim_copy_strided(src->data, base, nd, shape, st, t->data);
	return t;
}

int sim_errorf(SimRun *r, const RankState *s, const Node *n, const char *fmt, ...)
{
	if (r->failed)
		return -1;
	r->failed = 1;
	size_t k = 0, cap = sizeof r->err;
	char name[32];
	if (n && s) {
		if (n->loc.line)
			k += (size_t)snprintf(r->err + k, cap - k, "%s:%u:%u: ", s->m->filename, n->loc.line,
			                      n->loc.col);
		r->errloc = n->loc;
		r->msgoff = k;
		if (r->nranks > 1)
			k += (size_t)snprintf(r->err + k, cap - k, "rank %d: ", s->rank);
		if (n->kind == NK_PARAM)
			k += (size_t)snprintf(r->err + k, cap - k, "parameter %s: ", sym_str(n->name));
		else if (n->kind == NK_RETURN)
			k += (size_t)snprintf(r->err + k, cap - k, "Return: ");
		else
			k += (size_t)snprintf(r->err + k, cap - k, "%%%d(%s) %s: ", n->local,
			                      ir_node_name_r(n, name, sizeof name), n->prim ? sym_str(n->prim) : "call");
	} else if (s && r->nranks > 1) {
		k += (size_t)snprintf(r->err + k, cap - k, "rank %d: ", s->rank);
	}
	if (k < cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->err + k, cap - k, fmt, ap);
		va_end(ap);
	}
	return -1;
}
