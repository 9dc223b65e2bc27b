/* ops.c - the table of known primitives generated from ops.def, and the
 * lookup from an operator name (with or without PrimFunc_) to its OP_ id. */
#include <string.h>

#include "sappc.h"

const OpInfo op_table[OP_COUNT_] = {
#define OP(id, name, arity, amin, amax, shape, family, flags) {name, arity, amin, amax, shape, family, flags},
#include "ops.def"
#undef OP
};

#define OPHASH 512
static int16_t ophash[OPHASH];
static int ophash_ready;

static uint32_t hname(const char *s, size_t n)
{
	uint32_t h = 5381;
	for (size_t i = 0; i < n; i++)
		h = h * 33 + (unsigned char)s[i];
	return h & (OPHASH - 1);
}

static void init(void)
{
	for (int i = 1; i < OP_COUNT_; i++) {
		uint32_t h = hname(op_table[i].name, strlen(op_table[i].name));
		while (ophash[h])
			h = (h + 1) & (OPHASH - 1);
		ophash[h] = (int16_t)i;
	}
	ophash_ready = 1;
}

int op_lookup(const char *name, size_t n)
{
	if (!ophash_ready)
		init();
	if (n > 9 && memcmp(name, "PrimFunc_", 9) == 0) {
		name += 9;
		n -= 9;
	}
	for (uint32_t h = hname(name, n); ophash[h]; h = (h + 1) & (OPHASH - 1)) {
		const char *s = op_table[ophash[h]].name;
		if (strlen(s) == n && memcmp(s, name, n) == 0)
			return ophash[h];
	}
	/* a few aliases seen in dumps */
	if (n == 8 && memcmp(name, "GatherV2", 8) == 0)
		return OP_GatherV2;
	return OP_UNKNOWN;
}

int op_is_opaque(const Node *n)
{
	return n->kind == NK_CNODE && n->callee_kind == CK_PRIM && !n->dead &&
	       (n->op == OP_UNKNOWN || op_table[n->op].family == FAM_OPAQUE);
}

uint32_t op_opaque_uses(const Module *m, OpaqueUse **out)
{
	KeyMap seen; /* operator name -> its index in the list */
	keymap_init(&seen, sizeof(uint32_t));
	Vec(OpaqueUse) v = {0};
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *g = m->graphs.a[gi];
		for (uint32_t i = 0; i < g->nodes.n; i++) {
			const Node *n = g->nodes.a[i];
			/* the training step's own operators (backward and
			 * optimizer) are never planned: they compute on the
			 * local tensors the lowering made, and the simulator
			 * models them */
			if (!op_is_opaque(n) || ir_node_phase(n) != IR_PHASE_FWD)
				continue;
			int64_t key = n->prim;
			int fresh;
			uint32_t *at = keymap_get(&seen, &key, 1, &fresh);
			if (fresh) {
				*at = v.n;
				vec_push(&v, ((OpaqueUse){n->prim, 0, n->loc}));
			}
			v.a[*at].count++;
		}
	}
	keymap_free(&seen);
	*out = v.a;
	return v.n;
}
