/* dot.c - builds the Graphviz picture of a module with libcgraph.
 *
 * Every kind of node has its own shape and colour (see the legend):
 * compute operators are boxes, communication operators (AllReduce,
 * AllGather, ReduceScatter, AlltoAll) red octagons labelled with their
 * group's ranks, redistribution operators (StridedSlice, Split, Concat,
 * Reshape inserted by the lowering) yellow parallelograms, pipeline
 * Send/Receive blue house shapes, weights and graph inputs ellipses.  Edges
 * carry the shape they transport (the local shape after the lowering) and,
 * once the `layouts` pass has run, the producer's layout: device matrix D and
 * tensor map M as MindSpore prints them (ir_layout_text()).
 * Operators are grouped in one cluster per pipeline stage when stages are
 * known, otherwise one cluster per subgraph.  In a training step the
 * backward and the optimizer (ir_node_phase(): scopes Gradients/... and
 * Default/optimizer-...) are clusters of their own inside it, tinted, and
 * their operators and boxes are outlined in the phase's colour.
 *
 * Large graphs stay readable: above Options.max_nodes operators, nodes are
 * collapsed by scope (the full name without its last segment, cut at the
 * deepest level that yields at most max_nodes groups); each group is one box
 * with its operator count and the communication it contains, and edges
 * between groups are merged.  --focus=SCOPE keeps the operators under SCOPE
 * expanded; they do not count against max_nodes, which sizes the rest.
 * Names are "n<id>" / "g<k>", so the DOT text is deterministic.  Layout and
 * rendering live in render.c.
 */
#include <graphviz/cgraph.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"

static void set(void *obj, const char *k, const char *v)
{
	agsafeset(obj, (char *)k, (char *)v, (char *)"");
}

static void shape_text(char *buf, size_t n, const Abs *a)
{
	size_t k = 0;
	buf[0] = 0;
	if (a->shape.kind != SK_DIMS) {
		snprintf(buf, n, "%s", a->tstr ? sym_str(a->tstr) : "");
		return;
	}
	k += (size_t)snprintf(buf + k, n - k, "(");
	for (int i = 0; i < a->shape.rank && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)a->shape.dims[i]);
	if (k < n)
		snprintf(buf + k, n - k, ")");
}

typedef enum { K_PARAM, K_INPUT, K_COMPUTE, K_COMM, K_REDIST, K_P2P, K_RETURN, K_STRUCT, K_COUNT } Kind;

static const struct {
	const char *name, *shape, *fill;
} kind_style[K_COUNT] = {
	[K_PARAM] = {"weight", "ellipse", "#fff2cc"},
	[K_INPUT] = {"graph input", "ellipse", "#d9ead3"},
	[K_COMPUTE] = {"operator", "box", "#ffffff"},
	[K_COMM] = {"collective", "octagon", "#f4cccc"},
	[K_REDIST] = {"redistribution", "parallelogram", "#fce5cd"},
	[K_P2P] = {"pipeline send/receive", "house", "#cfe2f3"},
	[K_RETURN] = {"return", "box", "#eeeeee"},
	[K_STRUCT] = {"load / tuple", "box", "#f3f3f3"},
};

/* a training step's parts (IrPhase order): cluster label, tint, outline */
static const struct {
	const char *name, *bg, *pen;
} phase_style[3] = {
	{"forward", NULL, NULL},
	{"backward", "#f1ebf8", "#6a3d9a"},
	{"optimizer", "#e9f5ec", "#1b7837"},
};

static int phase_of(const Node *n)
{
	return n->kind == NK_CNODE ? (int)ir_node_phase(n) : IR_PHASE_FWD;
}

/* an operator of the backward or the optimizer: outlined in its colour */
static void phase_outline(void *obj, int phase)
{
	if (phase != IR_PHASE_FWD) {
		set(obj, "color", phase_style[phase].pen);
		set(obj, "penwidth", "2");
	}
}

static Kind kind_of(const Node *n)
{
	if (n->kind == NK_PARAM)
		return n->has_default ? K_PARAM : K_INPUT;
	if (n->kind == NK_RETURN)
		return K_RETURN;
	const OpInfo *oi = ir_opinfo(n);
	if (oi->family == FAM_P2P)
		return K_P2P;
	if (oi->family == FAM_COMM)
		return strncmp(sym_str(n->instance), "redistribution_op_", 18) == 0 ? K_REDIST : K_COMM;
	if (strncmp(sym_str(n->instance), "redistribution_op_", 18) == 0)
		return K_REDIST;
	if (oi->family == FAM_STRUCT)
		return K_STRUCT;
	return K_COMPUTE;
}

static int hidden(const Node *n)
{
	if (n->dead || ir_node_is_op(n, OP_UpdateState))
		return 1;
	return n->kind == NK_PARAM && n->out.tstr && strcmp(sym_str(n->out.tstr), "UMonad") == 0;
}

int dot_drawn(const Node *n)
{
	return !hidden(n);
}

static void group_text(char *buf, size_t n, const Node *c)
{
	int64_t r[64];
	const Value *v = ir_attr_get(&c->pattrs, "group_rank_ids");
	if (!v)
		v = ir_attr_get(&c->pattrs, "rank_list");
	int k = v ? value_int_list(v, r, 64) : -1;
	if (k > 0) {
		size_t p = (size_t)snprintf(buf, n, "ranks ");
		for (int i = 0; i < k && p < n; i++)
			p += (size_t)snprintf(buf + p, n - p, i ? ",%lld" : "%lld", (long long)r[i]);
		return;
	}
	v = ir_attr_get(&c->pattrs, "group");
	snprintf(buf, n, "%s", v ? sym_str(value_text(v)) : "");
}

/* --view=plan: how an operator got its strategy shows in its outline:
 * pinned by the user (--interfered) thick and dark red, propagated to an
 * operator the search eliminated dashed, searched (and default or loaded
 * from --strategy-in, which the label names) plain */
static void source_style(Agnode_t *an, const char *how)
{
	if (how && strcmp(how, "pinned") == 0) {
		set(an, "penwidth", "3");
		set(an, "color", "#990000");
	} else if (how && strcmp(how, "propagated") == 0) {
		set(an, "style", "filled,dashed");
	}
}

/* with_name 0: the label leaves out what differs between repeated layers
 * (instance and parameter names), so equal pieces draw alike (html.c) */
static void label_node(Agnode_t *an, const Node *n, const Options *o, int with_name)
{
	char shp[256], lab[1024], extra[512] = "";
	Kind k = kind_of(n);
	shape_text(shp, sizeof shp, &n->out);
	set(an, "shape", kind_style[k].shape);
	set(an, "style", "filled");
	set(an, "fillcolor", kind_style[k].fill);
	if (n->kind == NK_PARAM) {
		snprintf(lab, sizeof lab, "%s\n%s", with_name ? sym_str(n->name) : kind_style[k].name, shp);
	} else if (n->kind == NK_RETURN) {
		snprintf(lab, sizeof lab, "Return\n%s", shp);
	} else {
		const char *op = n->callee_kind == CK_PRIM ? sym_str(n->prim) : "call";
		if (k == K_COMM || (k == K_REDIST && ir_opinfo(n)->family == FAM_COMM))
			group_text(extra, sizeof extra, n);
		else if (k == K_P2P) {
			const Value *peer = ir_attr_get(&n->pattrs, n->op == OP_Send ? "dest_rank" : "src_rank");
			int64_t pr = 0;
			if (peer && value_get_int(peer, &pr))
				snprintf(extra, sizeof extra, "%s rank %lld", n->op == OP_Send ? "to" : "from", (long long)pr);
		} else if (o && o->view_plan) {
			const Value *st = ir_attr_get(ir_node_strat(n), "in_strategy");
			if (st) {
				FILE *f = fmemopen(extra, sizeof extra - 1, "w");
				if (f) {
					ir_print_value(f, st);
					fclose(f);
				}
			}
			const char *how = ir_strategy_source(n);
			source_style(an, how);
			if (how && *extra) {
				size_t l = strlen(extra);
				snprintf(extra + l, sizeof extra - l, "\n%s", how);
			}
		}
		if (n->instance && with_name)
			snprintf(lab, sizeof lab, "%s\n%s\n%s%s%s", op, sym_str(n->instance), shp, *extra ? "\n" : "", extra);
		else
			snprintf(lab, sizeof lab, "%s\n%s%s%s", op, shp, *extra ? "\n" : "", extra);
		phase_outline(an, phase_of(n));
	}
	set(an, "label", lab);
}

/* an edge into operand k of n: the shape it carries and its producer's layout */
static void label_edge(Agedge_t *e, const Node *n, uint32_t k)
{
	const Node *p = n->args[k].u.node;
	char shp[256], lay[160], lab[420];
	const Abs *ab = k < n->nin_types ? &n->in_types[k] : &p->out;
	shape_text(shp, sizeof shp, ab);
	if (ir_layout_text(p, lay, sizeof lay)) {
		snprintf(lab, sizeof lab, "%s\n%s", shp, lay);
		set(e, "label", lab);
	} else {
		set(e, "label", shp);
	}
}

/* ------------------------------------------------------------ collapsing */

/* scope of a node: its full name without the last "/Op-opN" segment */
static size_t scope_len(const Node *n)
{
	const char *s = ir_node_fullname(n);
	const char *slash = strrchr(s, '/');
	return slash ? (size_t)(slash - s) : 0;
}

/* the scope a collapsed box is made of: a backward operator's scope ends
 * in "Grad_<Op>" under the scope of the operator it differentiates
 * (training-step.md §1.2); without that segment, one box holds the backward
 * of a cell as one box holds its forward, instead of one box per operator
 * kind (twice the boxes and edges of the forward, too slow to lay out) */
static size_t box_scope_len(const Node *n, const char *full)
{
	size_t len = scope_len(n);
	if (ir_node_phase(n) != IR_PHASE_BWD)
		return len;
	size_t cut = len;
	while (cut > 0 && full[cut - 1] != '/')
		cut--;
	if (cut > 0 && strncmp(full + cut, "Grad_", 5) == 0)
		return cut - 1;
	return len;
}

/* the prefix of s made of its first `depth` '/'-separated segments, within
 * len; a backward scope counts from below its "Gradients/" (its cell sits
 * one level deeper than the forward cell it differentiates), so one depth
 * cuts both into the same cells; without that, at the depth of the layers
 * the whole backward is one box every forward box feeds */
static size_t prefix_at(const char *s, size_t len, int depth)
{
	size_t i = 0;
	if (len > 10 && memcmp(s, "Gradients/", 10) == 0)
		depth++;
	for (int d = 0; d < depth; d++) {
		const char *slash = memchr(s + i, '/', len - i);
		if (!slash)
			return len;
		i = (size_t)(slash - s) + 1;
	}
	return i ? i - 1 : 0;
}

#define PARAM_SHOWN 0xffffffffu

/* communication a collapsed box counts, by kind */
enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_ALLTOALL, C_P2P, C_OTHER, NCOMM };
static const char *const comm_name[NCOMM] = {"AllReduce", "AllGather", "ReduceScatter", "AlltoAll", "Send/Receive",
					      "other"};

static int comm_kind(const Node *n)
{
	switch (n->op) {
	case OP_AllReduce:
		return C_ALLREDUCE;
	case OP_AllGather:
		return C_ALLGATHER;
	case OP_ReduceScatter:
		return C_REDUCESCATTER;
	case OP_AlltoAll:
		return C_ALLTOALL;
	case OP_Send:
	case OP_Receive:
		return C_P2P;
	default:
		return C_OTHER;
	}
}

/* label of a run of merged scopes a .. b without the directories b shares
 * with a: "Net/layers/1-Layer\n... to .../3-Layer" */
static void run_label(char *buf, size_t n, const char *a, const char *b)
{
	size_t cut = 0, i = 0;
	for (; a[i] && a[i] == b[i]; i++)
		if (b[i] == '/')
			cut = i + 1;
	if (!a[i] && b[i] == '/') /* b lies under a */
		cut = i + 1;
	snprintf(buf, n, "%s\n... to %s%s", a, cut ? ".../" : "", b + cut);
}

typedef struct {
	Sym key;
	uint32_t count, comm;
	uint32_t ncomm_kind[NCOMM];
	int first;
	int phase; /* of its operators: a box never mixes the parts of a training step */
} Group;

static int count_ops(const Module *m)
{
	int c = 0;
	for (uint32_t gi = 0; gi < m->graphs.n; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++)
			c += !hidden(m->graphs.a[gi]->nodes.a[i]);
	return c;
}

/* Sym -> value map (open addressing): scopes are compared as interned ids */
typedef struct {
	Sym *key;
	uint32_t *val;
	uint32_t cap, used;
} SymMap;

static uint32_t *symmap_slot(SymMap *t, Sym k, int *fresh)
{
	if ((t->used + 1) * 2 > t->cap) {
		SymMap g = {xcalloc(t->cap ? t->cap * 2 : 1024, sizeof(Sym)), NULL, t->cap ? t->cap * 2 : 1024, 0};
		g.val = xcalloc(g.cap, sizeof *g.val);
		for (uint32_t i = 0; i < t->cap; i++)
			if (t->key[i]) {
				int f;
				*symmap_slot(&g, t->key[i], &f) = t->val[i];
			}
		free(t->key);
		free(t->val);
		*t = g;
	}
	uint32_t j = (k * 2654435761u) & (t->cap - 1);
	while (t->key[j] && t->key[j] != k)
		j = (j + 1) & (t->cap - 1);
	*fresh = !t->key[j];
	if (*fresh) {
		t->key[j] = k;
		t->used++;
	}
	return &t->val[j];
}

/* the value of k, or 0 when k is not in the map */
static uint32_t symmap_get(const SymMap *t, Sym k)
{
	if (!t->cap)
		return 0;
	uint32_t j = (k * 2654435761u) & (t->cap - 1);
	while (t->key[j] && t->key[j] != k)
		j = (j + 1) & (t->cap - 1);
	return t->key[j] ? t->val[j] : 0;
}

static void symmap_free(SymMap *t)
{
	free(t->key);
	free(t->val);
}

/* a box of merged groups: its label runs from its first scope to the last's */
static void merged_label(Group *d, const Group *last)
{
	if (d->key == last->key)
		return;
	char lab[1024];
	run_label(lab, sizeof lab, sym_str(d->key), sym_str(last->key));
	d->key = intern_cstr(lab);
}

/* The optimizer's operators all share one scope (Default/optimizer-<Name>,
 * training-step.md §3); one box for them all would receive an edge from
 * every backward box, edges as long as the picture, which dot takes minutes
 * to lay out.  Its updates come one parameter after another, each closed
 * by an UpdateState (the monad chain): each update is a directory of its
 * own, "<scope>/<parameter>" (the Ref it writes, its dots as slashes), so
 * boxes of updates sit beside the backward boxes that feed them.  From node i of graph gr, an
 * optimizer operator, to the end of its update; returns the last index. */
typedef Vec(Sym) SymVec;
static uint32_t opt_segment(const Graph *gr, uint32_t i, Sym *dir, const char *focus, size_t flen, SymVec *dirs,
			    SymMap *seen)
{
	uint32_t end = i;
	const char *param = NULL;
	for (; end < gr->nodes.n; end++) {
		const Node *n = gr->nodes.a[end];
		if (n->kind != NK_CNODE || ir_node_phase(n) != IR_PHASE_OPT)
			break;
		if (!param && n->callee_kind == CK_PRIM && n->op != OP_Load && n->op != OP_UpdateState && n->nargs &&
		    n->args[0].kind == V_NODE && n->args[0].u.node->kind == NK_PARAM)
			param = sym_str(n->args[0].u.node->name);
		if (n->callee_kind == CK_PRIM && n->op == OP_UpdateState)
			break;
	}
	if (end == gr->nodes.n)
		end--;
	char key[1024];
	for (uint32_t j = i; j <= end; j++) {
		const Node *n = gr->nodes.a[j];
		if (n->kind != NK_CNODE || hidden(n))
			continue;
		const char *s = ir_node_fullname(n);
		if (focus && strncmp(s, focus, flen) == 0)
			continue;
		size_t len = scope_len(n);
		int kl = snprintf(key, sizeof key, "%.*s", (int)len, s);
		if (param && kl > 0 && (size_t)kl < sizeof key) {
			/* "model.layers.5.wq.weight" -> ".../model/layers/5/wq/weight":
			 * a parameter's dotted name nests as scopes do, so the depth
			 * that cuts the forward into layers cuts the updates alike */
			snprintf(key + kl, sizeof key - (size_t)kl, "/%s", param);
			for (char *c = key + kl; *c; c++)
				if (*c == '.')
					*c = '/';
		}
		int fresh;
		dir[n->id] = intern_cstr(key);
		symmap_slot(seen, dir[n->id], &fresh);
		if (fresh)
			vec_push(dirs, dir[n->id]);
	}
	return end;
}

/* Assign every visible node a group (mark = group index + 1) or 0 when
 * shown alone.  A node's group is its scope directory cut at one depth:
 * the deepest whose number of distinct prefixes fits max_nodes.  Each
 * node's directory is interned once, and the depth search and the prefix
 * of each directory work on the distinct directories only (a 150 000
 * operator graph has some 20 000), never on every node at every depth. */
/* n joins box g: its count, and its kind of communication */
static void group_add(Group *g, const Node *n)
{
	g->count++;
	Kind kd = kind_of(n);
	if (kd == K_COMM || kd == K_P2P || (kd == K_REDIST && ir_opinfo(n)->family == FAM_COMM)) {
		g->comm++;
		g->ncomm_kind[comm_kind(n)]++;
	}
}

/* A step of K micro-batches repeats one network K times: micro-batch 0
 * is drawn whole, every other micro-batch is one box per phase ("micro-batch
 * i": its forward, its backward).  A node's micro-batch is its primal
 * attribute micro, else the latest of its operands' (the inserted
 * communication, the accumulation), -1 for nodes of no micro-batch (the
 * optimizer, the update), which stay as they are.  Returns the groups. */
static int collapse_micro(const Module *m, Group **out)
{
	Vec(Group) groups = {0};
	int32_t *mic = xcalloc((size_t)m->next_id + 1, sizeof *mic);
	int32_t *gix = xmalloc((size_t)m->micro * 3 * sizeof *gix);
	for (int k = 0; k < m->micro * 3; k++)
		gix[k] = -1;
	for (uint32_t gi = 0; gi < m->graphs.n; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++) {
			Node *n = m->graphs.a[gi]->nodes.a[i];
			n->mark = 0;
			mic[n->id] = -1;
			if (n->kind != NK_CNODE)
				continue;
			int64_t v;
			const Value *a = ir_attr_get(&ir_node_ext(n)->primal, "micro");
			if (a && value_get_int(a, &v) && v >= 0 && v < m->micro)
				mic[n->id] = (int32_t)v;
			else
				for (uint32_t k = 0; k < n->nargs; k++)
					if (n->args[k].kind == V_NODE && n->args[k].u.node->kind == NK_CNODE &&
					    mic[n->args[k].u.node->id] > mic[n->id])
						mic[n->id] = mic[n->args[k].u.node->id];
			int ph = phase_of(n);
			if (hidden(n) || mic[n->id] < 1 || ph == IR_PHASE_OPT)
				continue;
			int32_t *gx = &gix[mic[n->id] * 3 + ph];
			if (*gx < 0) {
				char key[64];
				snprintf(key, sizeof key, "micro-batch %d", mic[n->id]);
				Group g = {intern_cstr(key), 0, 0, {0}, (int)n->id, ph};
				*gx = (int32_t)groups.n;
				vec_push(&groups, g);
			}
			group_add(&groups.a[*gx], n);
			n->mark = (uint32_t)*gx + 1;
		}
	free(gix);
	free(mic);
	*out = groups.a;
	return (int)groups.n;
}

static int collapse(const Module *m, const Options *o, Group **out)
{
	int maxn = o && o->max_nodes > 0 ? o->max_nodes : 1500;
	const char *focus = o ? o->focus : NULL;
	size_t flen = focus ? strlen(focus) : 0;
	Vec(Group) groups = {0};
	/* the directory of every node that may be collapsed, by node id */
	Sym *dir = xcalloc(m->next_id + 1, sizeof *dir);
	SymVec dirs = {0};
	SymMap seen = {0};
	for (uint32_t gi = 0; gi < m->graphs.n; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++) {
			const Node *n = m->graphs.a[gi]->nodes.a[i];
			if (n->kind != NK_CNODE || hidden(n))
				continue;
			const char *s = ir_node_fullname(n);
			if (focus && strncmp(s, focus, flen) == 0)
				continue; /* drawn as they are, outside the budget */
			int fresh;
			if (ir_node_phase(n) == IR_PHASE_OPT) {
				i = opt_segment(m->graphs.a[gi], i, dir, focus, flen, &dirs, &seen);
				continue;
			}
			dir[n->id] = intern(s, box_scope_len(n, s));
			symmap_slot(&seen, dir[n->id], &fresh);
			if (fresh)
				vec_push(&dirs, dir[n->id]);
		}
	symmap_free(&seen);
	/* deepest depth whose number of distinct scope prefixes fits */
	int depth = 12;
	for (; depth >= 1; depth--) {
		SymMap pre = {0};
		uint32_t distinct = 0;
		for (uint32_t i = 0; i < dirs.n && (int)distinct <= maxn; i++) {
			int fresh;
			const char *d = sym_str(dirs.a[i]);
			symmap_slot(&pre, intern(d, prefix_at(d, sym_len(dirs.a[i]), depth)), &fresh);
			distinct += (uint32_t)fresh;
		}
		symmap_free(&pre);
		if ((int)distinct <= maxn)
			break;
	}
	if (depth < 1)
		depth = 1;
	/* when the next level down has too many groups (e.g. 4096 layers for
	 * 1500 boxes), use it anyway and merge runs of consecutive groups */
	int chunking = depth < 12;
	if (chunking)
		depth++;
	/* directory -> its prefix at that depth, then groups in node order */
	SymMap key_of = {0}, group_of[3] = {{0}}; /* a group per (scope, phase): a box never mixes phases */
	for (uint32_t i = 0; i < dirs.n; i++) {
		int fresh;
		const char *d = sym_str(dirs.a[i]);
		*symmap_slot(&key_of, dirs.a[i], &fresh) = intern(d, prefix_at(d, sym_len(dirs.a[i]), depth));
	}
	for (uint32_t gi = 0; gi < m->graphs.n; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++) {
			Node *n = m->graphs.a[gi]->nodes.a[i];
			n->mark = 0;
			if (n->kind != NK_CNODE || !dir[n->id])
				continue;
			int fresh;
			Sym k = *symmap_slot(&key_of, dir[n->id], &fresh);
			uint32_t *gx = symmap_slot(&group_of[phase_of(n)], k, &fresh);
			if (fresh) {
				*gx = groups.n;
				Group g = {k, 0, 0, {0}, (int)n->id, phase_of(n)};
				vec_push(&groups, g);
			}
			group_add(&groups.a[*gx], n);
			n->mark = *gx + 1;
		}
	symmap_free(&key_of);
	for (int ph = 0; ph < 3; ph++)
		symmap_free(&group_of[ph]);
	vec_free(&dirs);
	free(dir);
	if (chunking && (int)groups.n > maxn) {
		/* runs of c consecutive groups of one phase become one box: the
		 * forward, backward and optimizer each in their own runs, c the
		 * smallest that gives at most max_nodes boxes (or one per phase) */
		uint32_t nph[3] = {0}, most = 0;
		for (uint32_t i = 0; i < groups.n; i++)
			if (++nph[groups.a[i].phase] > most)
				most = nph[groups.a[i].phase];
		uint32_t c = (groups.n + (uint32_t)maxn - 1) / (uint32_t)maxn;
		while (c < most && (nph[0] + c - 1) / c + (nph[1] + c - 1) / c + (nph[2] + c - 1) / c > (uint32_t)maxn)
			c++;
		uint32_t *to = xmalloc(((size_t)groups.n + 1) * sizeof *to);
		Group *merged = xcalloc(groups.n, sizeof *merged);
		uint32_t nn = 0;
		for (int ph = IR_PHASE_FWD; ph <= IR_PHASE_OPT; ph++) {
			uint32_t run = 0, last = 0;
			for (uint32_t i = 0; i < groups.n; i++) {
				Group *g = &groups.a[i];
				if (g->phase != ph)
					continue;
				if (run == c)
					run = 0;
				if (run == 0) {
					merged[nn++] = *g;
				} else {
					Group *d = &merged[nn - 1];
					d->count += g->count;
					d->comm += g->comm;
					for (int k = 0; k < NCOMM; k++)
						d->ncomm_kind[k] += g->ncomm_kind[k];
				}
				to[i] = nn - 1;
				last = i;
				if (++run == c)
					merged_label(&merged[nn - 1], &groups.a[i]);
			}
			if (run > 1 && run < c)
				merged_label(&merged[nn - 1], &groups.a[last]);
		}
		for (uint32_t gi = 0; gi < m->graphs.n; gi++)
			for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++) {
				Node *n = m->graphs.a[gi]->nodes.a[i];
				if (n->mark)
					n->mark = to[n->mark - 1] + 1;
			}
		free(to);
		vec_free(&groups);
		*out = merged;
		return (int)nn;
	}
	*out = groups.a;
	return (int)groups.n;
}

/* a set of 64-bit keys (open addressing; 0 marks an empty slot) */
typedef struct {
	uint64_t *a;
	uint32_t cap, used;
} U64Set;

static uint32_t u64_home(uint64_t k, uint32_t cap)
{
	return (uint32_t)(k * 0x9e3779b97f4a7c15u >> 40) & (cap - 1);
}

/* 1 the first time key is added, 0 after that */
static int u64set_add(U64Set *t, uint64_t key)
{
	key++;
	if ((t->used + 1) * 2 > t->cap) {
		U64Set g = {xcalloc(t->cap ? t->cap * 2 : 1024, sizeof(uint64_t)), t->cap ? t->cap * 2 : 1024, t->used};
		for (uint32_t i = 0; i < t->cap; i++)
			if (t->a[i]) {
				uint32_t j = u64_home(t->a[i], g.cap);
				while (g.a[j])
					j = (j + 1) & (g.cap - 1);
				g.a[j] = t->a[i];
			}
		free(t->a);
		*t = g;
	}
	uint32_t j = u64_home(key, t->cap);
	while (t->a[j] && t->a[j] != key)
		j = (j + 1) & (t->cap - 1);
	if (t->a[j])
		return 0;
	t->a[j] = key;
	t->used++;
	return 1;
}

static const char *stage_cluster_label(int s, char *buf, size_t n)
{
	if (s < 0)
		snprintf(buf, n, "no stage");
	else
		snprintf(buf, n, "pipeline stage %d", s);
	return buf;
}

static void add_legend(Agraph_t *g, const Module *m, const Options *o, int phased)
{
	Agraph_t *lg = agsubg(g, (char *)"cluster_legend", 1);
	set(lg, "label", "legend");
	set(lg, "style", "dashed");
	Agnode_t *prev = NULL;
	for (int k = 0; k < K_COUNT; k++) {
		char name[32];
		snprintf(name, sizeof name, "legend_%d", k);
		Agnode_t *ln = agnode(lg, name, 1);
		set(ln, "label", kind_style[k].name);
		set(ln, "shape", kind_style[k].shape);
		set(ln, "style", "filled");
		set(ln, "fillcolor", kind_style[k].fill);
		if (prev) {
			char en[32];
			snprintf(en, sizeof en, "legend_e%d", k);
			Agedge_t *e = agedge(lg, prev, ln, en, 1);
			set(e, "style", "invis");
		}
		prev = ln;
	}
	for (int ph = IR_PHASE_BWD; phased && ph <= IR_PHASE_OPT; ph++) {
		char name[32];
		snprintf(name, sizeof name, "legend_%s", phase_style[ph].name);
		Agnode_t *ln = agnode(lg, name, 1);
		set(ln, "label", phase_style[ph].name);
		set(ln, "shape", "box");
		set(ln, "style", "filled");
		set(ln, "fillcolor", phase_style[ph].bg);
		phase_outline(ln, ph);
		snprintf(name, sizeof name, "legend_e%s", phase_style[ph].name);
		set(agedge(lg, prev, ln, name, 1), "style", "invis");
		prev = ln;
	}
	int S = o ? sapp_plan_stages(m, o) : 1;
	if (S > 1 && m->micro > 1 && m->train && o->device_num >= S) {
		/* the rank's pipeline stage runs its micro-batches in this order (schedule.c) */
		int stage = o->rank / (o->device_num / S), M = m->micro;
		SchedStep *ord = xmalloc((size_t)2 * M * sizeof *ord);
		int n = sched_order(S, stage, M, o->pipeline_scheduler, ord);
		size_t cap = (size_t)n * 8 + 96, len = 0;
		char *lab = xmalloc(cap);
		len += (size_t)snprintf(lab, cap, "schedule of stage %d (%s):", stage,
		                        o->pipeline_scheduler == SCHED_GPIPE ? "gpipe" : "1f1b");
		for (int k = 0; k < n && len < cap; k++)
			len += (size_t)snprintf(lab + len, cap - len, "%s%c%d", k % 8 ? " " : "\n", ord[k].bwd ? 'B' : 'F',
			                        ord[k].micro);
		Agnode_t *ln = agnode(lg, (char *)"legend_schedule", 1);
		set(ln, "label", lab);
		set(ln, "shape", "note");
		set(agedge(lg, prev, ln, (char *)"legend_eschedule", 1), "style", "invis");
		prev = ln;
		free(lab);
		free(ord);
	}
	static const char *const how[] = {"searched", "propagated", "pinned"};
	static const char *const what[] = {"strategy searched", "strategy propagated\n(eliminated operator)",
					   "strategy pinned\n(user, --interfered)"};
	for (int k = 0; o && o->view_plan && k < 3; k++) {
		char name[32];
		snprintf(name, sizeof name, "legend_%d", K_COUNT + k);
		Agnode_t *ln = agnode(lg, name, 1);
		set(ln, "label", what[k]);
		set(ln, "shape", "box");
		set(ln, "style", "filled");
		set(ln, "fillcolor", kind_style[K_COMPUTE].fill);
		source_style(ln, how[k]);
		snprintf(name, sizeof name, "legend_e%d", K_COUNT + k);
		set(agedge(lg, prev, ln, name, 1), "style", "invis");
		prev = ln;
	}
}

/* Object ids in creation order.  cgraph's default discipline makes the id of
 * a named object its string's address, and subgraphs are kept (and written
 * by agwrite) in id order, so the order of the clusters in the DOT followed
 * the heap and changed with unrelated allocations.  Here a name gets the next
 * even id the first time it is seen (odd ids are anonymous objects), so
 * clusters come out in the order they were made; names are interned. */
typedef struct {
	SymMap ids;      /* name -> id */
	Vec(Sym) names;  /* id / 2 - 1 -> name */
	IDTYPE anon;     /* next odd id */
} SeqIds;

static void *seq_open(Agraph_t *g, Agdisc_t *d)
{
	(void)g;
	(void)d;
	SeqIds *t = xcalloc(1, sizeof *t);
	t->anon = 1;
	return t;
}

static long seq_map(void *state, int objtype, char *str, IDTYPE *id, int createflag)
{
	(void)objtype;
	SeqIds *t = state;
	if (!str) {
		if (!createflag)
			return 0;
		*id = t->anon;
		t->anon += 2;
		return 1;
	}
	Sym name = intern_cstr(str);
	if (!createflag) {
		*id = symmap_get(&t->ids, name);
		return *id != 0;
	}
	int fresh;
	uint32_t *v = symmap_slot(&t->ids, name, &fresh);
	if (fresh) {
		vec_push(&t->names, name);
		*v = 2 * t->names.n;
	}
	*id = *v;
	return 1;
}

static long seq_alloc(void *state, int objtype, IDTYPE id)
{
	(void)state;
	(void)objtype;
	(void)id;
	return 0;
}

static void seq_free(void *state, int objtype, IDTYPE id)
{
	(void)state;
	(void)objtype;
	(void)id;
}

static char *seq_print(void *state, int objtype, IDTYPE id)
{
	(void)objtype;
	SeqIds *t = state;
	return id % 2 == 0 && id / 2 - 1 < t->names.n ? (char *)sym_str(t->names.a[id / 2 - 1]) : NULL;
}

static void seq_close(void *state)
{
	SeqIds *t = state;
	symmap_free(&t->ids);
	vec_free(&t->names);
	free(t);
}

static void seq_register(void *state, int objtype, void *obj)
{
	(void)state;
	(void)objtype;
	(void)obj;
}

static Agiddisc_t seq_iddisc = {seq_open, seq_map, seq_alloc, seq_free, seq_print, seq_close, seq_register};

static Agraph_t *new_graph(void)
{
	static Agdisc_t disc;
	disc = AgDefaultDisc;
	disc.id = &seq_iddisc;
	Agraph_t *g = agopen((char *)"sappc", Agdirected, &disc);
	set(g, "rankdir", "TB");
	set(g, "newrank", "true");
	agattr(g, AGNODE, (char *)"fontname", (char *)"Helvetica");
	agattr(g, AGEDGE, (char *)"fontname", (char *)"Helvetica");
	agattr(g, AGEDGE, (char *)"fontsize", (char *)"10");
	return g;
}

void *dot_build(const Module *m, const Options *o)
{
	return dot_build_groups(m, o, NULL);
}

void *dot_build_groups(const Module *m, const Options *o, DotGroups *out)
{
	Agraph_t *g = new_graph();
	int total = count_ops(m);
	int maxn = o && o->max_nodes > 0 ? o->max_nodes : 1500;
	Group *groups = NULL;
	int ngroups = 0;
	ir_clear_marks((Module *)m);
	if (total > maxn)
		ngroups = collapse(m, o, &groups);
	else if (m->micro > 1 && !(o && o->focus))
		ngroups = collapse_micro(m, &groups);
	/* when collapsing, draw a parameter only if an expanded operator uses it
	 * (params of collapsed operators are inside their group's box) */
	if (ngroups)
		for (uint32_t gi = 0; gi < m->graphs.n; gi++)
			for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++) {
				const Node *n = m->graphs.a[gi]->nodes.a[i];
				if (n->mark || hidden(n))
					continue;
				for (uint32_t k = 0; k < n->nargs; k++)
					if (n->args[k].kind == V_NODE && n->args[k].u.node->kind == NK_PARAM)
						n->args[k].u.node->mark = PARAM_SHOWN;
			}
	/* a training step: the backward and the optimizer in clusters of their own */
	int phased = 0;
	for (uint32_t gi = 0; gi < m->graphs.n && !phased; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n && !phased; i++)
			phased = !hidden(m->graphs.a[gi]->nodes.a[i]) && phase_of(m->graphs.a[gi]->nodes.a[i]) != IR_PHASE_FWD;
	Vec(Agraph_t *) phase_cl = {0}; /* (stage slot, phase - 1) -> its cluster */
	int staged = 0;
	for (uint32_t gi = 0; gi < m->graphs.n && !staged; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++)
			if (m->graphs.a[gi]->nodes.a[i]->stage >= 0) {
				staged = 1;
				break;
			}
	/* the cgraph node of node id i, of group k at next_id + k: edges are
	 * added by pointer, not by looking names up (150 000 edges) */
	uint32_t gbase = m->next_id;
	Agnode_t **drawn = xcalloc((size_t)gbase + (uint32_t)ngroups + 1, sizeof *drawn);
	/* clusters: per stage, else per subgraph */
	Vec(Agraph_t *) stage_cl = {0};
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *gr = m->graphs.a[gi];
		char cname[64], lab[512];
		snprintf(cname, sizeof cname, "cluster_%u", gi);
		Agraph_t *sg = agsubg(g, cname, 1);
		snprintf(lab, sizeof lab, "@%s", sym_str(gr->name));
		set(sg, "label", lab);
		for (uint32_t i = 0; i < gr->params.n; i++) {
			const Node *p = gr->params.a[i];
			if (hidden(p) || (ngroups && p->mark != PARAM_SHOWN))
				continue;
			char name[32];
			snprintf(name, sizeof name, "n%u", p->id);
			drawn[p->id] = agnode(sg, name, 1);
			label_node(drawn[p->id], p, o, 1);
		}
		for (uint32_t i = 0; i < gr->nodes.n; i++) {
			const Node *n = gr->nodes.a[i];
			if (hidden(n))
				continue;
			Agraph_t *home = sg;
			if (staged) {
				int s = n->stage < 0 ? -1 : n->stage;
				uint32_t slot = (uint32_t)(s + 1);
				while (stage_cl.n <= slot)
					vec_push(&stage_cl, NULL);
				if (!stage_cl.a[slot]) { /* only stages this graph has */
					char sn[64], sl[64];
					if (s < 0)
						snprintf(sn, sizeof sn, "cluster_%u_nostage", gi);
					else
						snprintf(sn, sizeof sn, "cluster_%u_stage%d", gi, s);
					Agraph_t *c = agsubg(sg, sn, 1);
					set(c, "label", stage_cluster_label(s, sl, sizeof sl));
					set(c, "style", "rounded");
					stage_cl.a[slot] = c;
				}
				home = stage_cl.a[slot];
			}
			int ph = phase_of(n);
			if (phased && !ngroups && ph != IR_PHASE_FWD) {
				uint32_t slot = (uint32_t)(staged ? n->stage + 1 : 0) * 2 + (uint32_t)ph - 1;
				while (phase_cl.n <= slot)
					vec_push(&phase_cl, NULL);
				if (!phase_cl.a[slot]) {
					char pn[80];
					snprintf(pn, sizeof pn, "%s_%s", agnameof(home), phase_style[ph].name);
					Agraph_t *c = agsubg(home, pn, 1);
					set(c, "label", phase_style[ph].name);
					set(c, "style", "filled,rounded");
					set(c, "fillcolor", phase_style[ph].bg);
					set(c, "color", phase_style[ph].pen);
					phase_cl.a[slot] = c;
				}
				home = phase_cl.a[slot];
			}
			if (n->mark) { /* collapsed into a group box */
				Group *grp = &groups[n->mark - 1];
				char name[32];
				snprintf(name, sizeof name, "g%u", n->mark - 1);
				if (!drawn[gbase + n->mark - 1]) {
					char lab2[1024];
					const char *k = sym_str(grp->key);
					size_t len = (size_t)snprintf(lab2, sizeof lab2, "%s\n%u operator%s",
								      *k ? k : "(no scope)", grp->count,
								      grp->count == 1 ? "" : "s");
					/* "3 communication: 2 AllReduce, 1 AllGather": the kinds present */
					if (grp->comm && len < sizeof lab2)
						len += (size_t)snprintf(lab2 + len, sizeof lab2 - len, "\n%u communication:",
									grp->comm);
					for (int c = 0, first = 1; grp->comm && c < NCOMM && len < sizeof lab2; c++)
						if (grp->ncomm_kind[c]) {
							len += (size_t)snprintf(lab2 + len, sizeof lab2 - len, "%s %u %s",
										first ? "" : ",", grp->ncomm_kind[c],
										comm_name[c]);
							first = 0;
						}
					Agnode_t *an = drawn[gbase + n->mark - 1] = agnode(home, name, 1);
					set(an, "shape", "box3d");
					set(an, "style", "filled");
					set(an, "fillcolor", grp->comm ? "#f4cccc" : "#ffffff");
					set(an, "label", lab2);
					phase_outline(an, grp->phase);
				}
				continue;
			}
			char name[32];
			snprintf(name, sizeof name, "n%u", n->id);
			drawn[n->id] = agnode(home, name, 1);
			label_node(drawn[n->id], n, o, 1);
		}
		stage_cl.n = 0;
		phase_cl.n = 0;
	}
	vec_free(&stage_cl);
	vec_free(&phase_cl);
	/* data edges, consumer order; collapsed groups merge their edges (one
	 * per pair of boxes, remembered in `merged`: key = from << 32 | to) */
	U64Set merged = {0};
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *gr = m->graphs.a[gi];
		for (uint32_t i = 0; i < gr->nodes.n; i++) {
			const Node *n = gr->nodes.a[i];
			if (hidden(n))
				continue;
			for (uint32_t k = 0; k < n->nargs; k++) {
				if (n->args[k].kind != V_NODE)
					continue;
				const Node *p = n->args[k].u.node;
				if (hidden(p) || (ngroups && p->kind == NK_PARAM && p->mark != PARAM_SHOWN))
					continue;
				uint32_t pm = p->mark == PARAM_SHOWN ? 0 : p->mark;
				if (pm && pm == n->mark)
					continue; /* inside one group */
				uint32_t ai = pm ? gbase + pm - 1 : p->id, bi = n->mark ? gbase + n->mark - 1 : n->id;
				Agnode_t *a = drawn[ai], *b = drawn[bi];
				if (!a || !b)
					continue;
				if ((pm || n->mark) && !u64set_add(&merged, (uint64_t)ai << 32 | bi))
					continue; /* merged */
				char ename[48];
				snprintf(ename, sizeof ename, "e%u_%u", n->id, k);
				Agedge_t *e;
				if (phase_of(p) == IR_PHASE_BWD && phase_of(n) == IR_PHASE_BWD) {
					/* the backward runs the layers in reverse: its edges are
					 * laid out upwards (drawn head to tail, arrow reversed),
					 * so the gradient of layer i sits beside layer i and the
					 * edge from an activation to its bprop stays short (laid
					 * downwards, a training step's edges span the whole
					 * picture and dot's crossing minimisation takes minutes) */
					e = agedge(g, b, a, ename, 1);
					set(e, "dir", "back");
				} else {
					e = agedge(g, a, b, ename, 1);
				}
				if (ir_node_is_op(n, OP_Depend) && k >= 1 && phase_of(p) != phase_of(n)) {
					/* an order edge of the pipeline schedule (schedule.c)
					 * between a forward and a backward node: dashed, and
					 * not ranked - it would close a cycle through the
					 * forward laid down and the backward laid up, and dot
					 * would lay it flat; Graphviz 2.43 frees memory twice
					 * after laying out a labelled flat edge in a cluster */
					set(e, "style", "dashed");
					set(e, "constraint", "false");
				} else if (!pm && !n->mark) {
					label_edge(e, n, k);
				}
			}
		}
	}
	free(merged.a);
	free(drawn);
	if (out) {
		out->n = ngroups;
		out->of = xcalloc((size_t)m->next_id + 1, sizeof *out->of);
		out->key = xcalloc((size_t)ngroups + 1, sizeof *out->key);
		for (int k = 0; k < ngroups; k++)
			out->key[k] = groups[k].key;
		for (uint32_t gi = 0; gi < m->graphs.n; gi++)
			for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++) {
				const Node *n = m->graphs.a[gi]->nodes.a[i];
				if (n->kind == NK_CNODE && n->mark != PARAM_SHOWN)
					out->of[n->id] = n->mark;
			}
	}
	ir_clear_marks((Module *)m);
	free(groups);
	add_legend(g, m, o, phased);
	if (total > maxn) {
		char lab[256];
		snprintf(lab, sizeof lab, "%d operators, collapsed by scope into %d groups (--max-nodes=%d)", total,
			 ngroups, maxn);
		set(g, "label", lab);
	}
	return g;
}

void dot_groups_free(DotGroups *d)
{
	free(d->of);
	free(d->key);
	memset(d, 0, sizeof *d);
}

/* One collapsed box drawn open: its operators (named x0, x1, ... in the
 * given order) with the weights and inputs they read (w0, w1, ...) and the
 * edges among them, labelled without names (label_node with_name 0), so two
 * boxes of equal layers give the same graph and are laid out once. */
void *dot_build_piece(const Module *m, const Options *o, Node *const *nodes, uint32_t count)
{
	(void)m;
	Agraph_t *g = new_graph();
	Vec(Node *) params = {0};
	Agnode_t **drawn = xcalloc((size_t)count + 1, sizeof *drawn);
	for (uint32_t i = 0; i < count; i++)
		nodes[i]->mark = i + 1;
	for (uint32_t i = 0; i < count; i++) {
		char name[32];
		snprintf(name, sizeof name, "x%u", i);
		drawn[i] = agnode(g, name, 1);
		label_node(drawn[i], nodes[i], o, 0);
	}
	for (uint32_t i = 0; i < count; i++)
		for (uint32_t k = 0; k < nodes[i]->nargs; k++) {
			Node *p = nodes[i]->args[k].kind == V_NODE ? nodes[i]->args[k].u.node : NULL;
			if (!p || p->kind != NK_PARAM || p->mark || hidden(p))
				continue;
			p->mark = count + params.n + 1;
			vec_push(&params, p);
		}
	drawn = xrealloc(drawn, ((size_t)count + params.n + 1) * sizeof *drawn);
	for (uint32_t j = 0; j < params.n; j++) {
		char name[32];
		snprintf(name, sizeof name, "w%u", j);
		drawn[count + j] = agnode(g, name, 1);
		label_node(drawn[count + j], params.a[j], o, 0);
	}
	for (uint32_t i = 0; i < count; i++)
		for (uint32_t k = 0; k < nodes[i]->nargs; k++) {
			const Node *p = nodes[i]->args[k].kind == V_NODE ? nodes[i]->args[k].u.node : NULL;
			if (!p || !p->mark || hidden(p))
				continue;
			char ename[48];
			snprintf(ename, sizeof ename, "e%u_%u", i, k);
			label_edge(agedge(g, drawn[p->mark - 1], drawn[i], ename, 1), nodes[i], k);
		}
	for (uint32_t i = 0; i < count; i++)
		nodes[i]->mark = 0;
	for (uint32_t j = 0; j < params.n; j++)
		params.a[j]->mark = 0;
	vec_free(&params);
	free(drawn);
	return g;
}

void dot_free(void *g)
{
	if (g)
		agclose(g);
}
