/* passdata.c - what the passes leave on the IR (ir_node_si() from the sapp
 * pass, Node.lay from the lowering), as text for the printers, the report
 * and the pictures.  The records are defined in sappc.h; nothing here
 * calls into a pass.
 */
#include <string.h>

#include "sappc.h"

const char *const ir_strat_source_name[SRC_COUNT_] = {"none", "pinned", "searched", "propagated", "default", "loaded"};

static size_t tlay_dm(const TLay *t, char *buf, size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "D=[");
	for (int i = 0; i < t->ndev && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, i ? ",%d" : "%d", t->dev[i]);
	if (k < len)
		k += (size_t)snprintf(buf + k, len - k, "] M=[");
	for (int i = 0; i < t->rank && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, i ? ",%d" : "%d", t->map[i]);
	if (k < len)
		k += (size_t)snprintf(buf + k, len - k, "]");
	return k;
}

const char *tlay_format(const TLay *t, char *buf, size_t len)
{
	size_t k = tlay_dm(t, buf, len);
	if (k < len)
		k += (size_t)snprintf(buf + k, len - k, " S=(");
	for (int i = 0; i < t->rank && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, i ? ",%lld" : "%lld", (long long)t->shape[i]);
	if (k < len)
		snprintf(buf + k, len - k, ")");
	return buf;
}

/* For pictures (backend/dot.c): the layout of n's single tensor output, or
 * NULL when there is none (not lowered, a tuple, not a tensor).  A weight
 * the optimizer stores sharded says so: " opt=K" (dim 0 cut K more ways). */
const char *ir_layout_text(const Node *n, char *buf, size_t len)
{
	const NodeLayout *l = n->lay;
	if (!l || l->nout != 1 || !l->out[0].ndev || len == 0)
		return NULL;
	size_t k = tlay_dm(&l->out[0], buf, len);
	if (l->opt_rep > 1 && k < len)
		snprintf(buf + k, len - k, " opt=%d", (int)l->opt_rep);
	return buf;
}

const char *ir_tensor_layout_text(const Node *n, int out, uint32_t k, char *buf, size_t len)
{
	const NodeLayout *l = n->lay;
	if (!l || len == 0)
		return NULL;
	const TLay *t = NULL;
	if (out && l->out && k < l->nout)
		t = &l->out[k];
	else if (!out && l->in && k < l->nin)
		t = &l->in[k];
	if (!t || !t->ndev)
		return NULL;
	tlay_format(t, buf, len);
	size_t used = strlen(buf);
	if (out && l->opt_rep > 1 && used < len)
		snprintf(buf + used, len - used, " opt=%d", (int)l->opt_rep);
	return buf;
}

const Node *ir_node_origin(const Node *n)
{
	return n->lay && n->lay->origin ? n->lay->origin : n;
}

const char *ir_strategy_source(const Node *n)
{
	const StratInfo *si = n ? ir_node_si(n) : NULL;
	return si ? ir_strat_source_name[si->source] : NULL;
}

const char *ir_strategy_levels(const Node *n)
{
	const StratInfo *si = n ? ir_node_si(n) : NULL;
	if (!si)
		return NULL;
	return si->levels ? sym_str(si->levels) : "";
}
