/* html.c - --html: one self-contained page to explore a plan in a browser.
 *
 * The page is backend/html/explorer.{css,js} (embedded at build time as
 * html_assets.c) around one JSON document made here with jansson:
 *
 *   views    the plan view (global shapes, strategies, one cluster per
 *            stage) and the per-rank views, each with its overview SVG drawn
 *            by libgvc exactly as --svg draws it (collapsed by scope above
 *            --max-nodes), the SVG of every collapsed box drawn open, and
 *            its operators (name, operator, strategy, where the strategy came
 *            from, the recorded --explain levels, input and output layouts
 *            with local shapes, the communication each causes);
 *   report   this plan against pure data parallel (report.c), and for
 *            pipelines the stages with their ranks and 1F1B order.
 *
 * Everything shown is read from the IR the pipeline left: ir_node_si() (the
 * strategy's source and search levels, Options.record_levels), Node.lay
 * (layouts), the type lines (local shapes), report_collect() (bytes and
 * time); nothing calls back into the passes.
 *
 * Size: a 4096-layer transformer has some 176 000 nodes per view.
 * Strings go into one table (operators point at it), so the scopes,
 * strategies, layouts and level tables that repeat layer after layer are
 * written once; the boxes of equal layers draw the same picture (dot.c's
 * pieces leave names out), which is laid out once and shared.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "render.h"

/* a box with more operators than this is not drawn open (layout time);
 * the page lists its operators instead */
#define PIECE_MAX 2000
/* rank views beyond the one of --rank while their operators stay below this */
#define RANK_BUDGET 200000
#define RANK_MAX 64

/* interned text -> index in the page's string table */
typedef struct {
	KeyMap idx;
	json_t *arr;
} Strings;

/* a JSON string of s[0..n); jansson takes only UTF-8, and names and labels
 * come from the input: other bytes become '?' */
static json_t *jstr(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	if (j)
		return j;
	char *c = xmalloc(n + 1);
	for (size_t i = 0; i < n; i++)
		c[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
	j = json_stringn(c, n);
	free(c);
	return j;
}

static int str_id(Strings *t, const char *s, size_t n)
{
	int64_t key = intern(s, n);
	int fresh;
	int *v = keymap_get(&t->idx, &key, 1, &fresh);
	if (fresh) {
		*v = (int)json_array_size(t->arr);
		json_array_append_new(t->arr, jstr(s, n));
	}
	return *v;
}

static int str_c(Strings *t, const char *s)
{
	return str_id(t, s ? s : "", s ? strlen(s) : 0);
}

/* a growing text for one operator's details */
typedef struct {
	char *s;
	size_t n;
	FILE *f;
} Text;

static void shape_of(FILE *f, const Abs *a)
{
	if (!a || a->shape.kind != SK_DIMS) {
		fputs(a && a->tstr ? sym_str(a->tstr) : "-", f);
		return;
	}
	fputc('(', f);
	for (int i = 0; i < a->shape.rank; i++)
		fprintf(f, i ? ", %lld" : "%lld", (long long)a->shape.dims[i]);
	fputc(')', f);
}

static void strategy_text(FILE *f, const Node *n)
{
	static const char *const keys[] = {"in_strategy", "out_strategy"};
	for (int i = 0; i < 2; i++) {
		const Value *v = ir_attr_get(ir_node_strat(n), keys[i]);
		if (!v)
			continue;
		if (i)
			fputs("  out ", f);
		ir_print_value(f, v);
	}
}

/* inputs and outputs: local shape (the type line) and layout */
static void tensors_text(FILE *f, const Node *n)
{
	char lay[256];
	for (uint32_t k = 0; k < n->nargs; k++) {
		if (n->args[k].kind != V_NODE)
			continue;
		const Abs *a = k < n->nin_types ? &n->in_types[k] : &n->args[k].u.node->out;
		if (!a->is_tensor)
			continue;
		fprintf(f, "input %u  ", k);
		shape_of(f, a);
		const char *l = ir_tensor_layout_text(n, 0, k, lay, sizeof lay);
		if (l)
			fprintf(f, "  %s", l);
		fputc('\n', f);
	}
	fputs("output  ", f);
	shape_of(f, &n->out);
	const char *l;
	for (uint32_t k = 0; (l = ir_tensor_layout_text(n, 1, k, lay, sizeof lay)) != NULL; k++)
		if (k)
			fprintf(f, "  [%u] %s", k, l);
		else
			fprintf(f, "  %s", l);
	fputc('\n', f);
}

/* per node of a view: the fields of its record in "nodes" */
/* F_PHASE: the part of a training step (IrPhase: forward, backward, optimizer) */
enum { F_ID, F_GROUP, F_LOCAL, F_SCOPE, F_NAME, F_OP, F_STRAT, F_SOURCE, F_LEVELS, F_TENSORS, F_STAGE, F_PHASE, NF };

static void add_node(Strings *t, json_t *arr, const Node *n, int group)
{
	int rec[NF];
	char *buf = NULL;
	size_t len = 0;
	rec[F_ID] = (int)n->id;
	rec[F_GROUP] = group;
	rec[F_LOCAL] = n->local;
	if (n->kind == NK_PARAM) {
		rec[F_SCOPE] = str_c(t, "");
		rec[F_NAME] = str_c(t, sym_str(n->name));
		rec[F_OP] = str_c(t, n->has_default ? "weight" : "input");
	} else {
		const char *full = ir_node_fullname(n);
		const char *slash = strrchr(full, '/');
		size_t cut = slash ? (size_t)(slash - full) : 0;
		rec[F_SCOPE] = str_id(t, full, cut);
		rec[F_NAME] = str_c(t, slash ? slash + 1 : full);
		const char *op = n->callee_kind == CK_PRIM ? sym_str(n->prim) : "call";
		rec[F_OP] = str_c(t, n->kind == NK_RETURN ? "Return" : op);
	}
	FILE *f = open_memstream(&buf, &len);
	if (f) {
		strategy_text(f, n);
		fclose(f);
	}
	rec[F_STRAT] = str_c(t, buf);
	free(buf);
	rec[F_SOURCE] = str_c(t, ir_strategy_source(n));
	rec[F_LEVELS] = str_c(t, ir_strategy_levels(n));
	buf = NULL;
	f = open_memstream(&buf, &len);
	if (f) {
		tensors_text(f, n);
		fclose(f);
	}
	rec[F_TENSORS] = str_c(t, buf);
	free(buf);
	rec[F_STAGE] = n->stage;
	rec[F_PHASE] = n->kind == NK_CNODE ? (int)ir_node_phase(n) : IR_PHASE_FWD;
	for (int i = 0; i < NF; i++)
		json_array_append_new(arr, json_integer(rec[i]));
}

/* the SVG without its XML prolog: the page inlines it */
static json_t *svg_json(char *svg, size_t len)
{
	const char *s = strstr(svg, "<svg");
	json_t *j = s ? jstr(s, len - (size_t)(s - svg)) : json_string("");
	free(svg);
	return j;
}

/* an operator the lowering inserted to redistribute a tensor (named by
 * MindSpore's rule, ir-format.md §1.10) */
static int is_redist(const Node *n)
{
	return n->kind == NK_CNODE && n->instance && strncmp(sym_str(n->instance), "redistribution_op_", 18) == 0;
}

/* serves[node id] = the index of the operator a redistribution operator
 * feeds (through a chain of others), -1 for the rest: MindSpore names the
 * chain after that consumer, and the page counts its cost there */
static int32_t *redist_consumers(const Module *m, const int32_t *pos)
{
	int32_t *serves = xmalloc(((size_t)m->next_id + 1) * sizeof *serves);
	for (uint32_t i = 0; i <= m->next_id; i++)
		serves[i] = -1;
	Vec(const Node *) stack = {0};
	for (uint32_t gi = 0; gi < m->graphs.n; gi++)
		for (uint32_t i = 0; i < m->graphs.a[gi]->nodes.n; i++) {
			const Node *c = m->graphs.a[gi]->nodes.a[i];
			if (c->dead || is_redist(c) || pos[c->id] < 0)
				continue;
			vec_push(&stack, c);
			while (stack.n) {
				const Node *n = stack.a[--stack.n];
				for (uint32_t k = 0; k < n->nargs; k++) {
					const Node *a = n->args[k].kind == V_NODE ? n->args[k].u.node : NULL;
					if (a && serves[a->id] < 0 && is_redist(a)) {
						serves[a->id] = pos[c->id];
						vec_push(&stack, a);
					}
				}
			}
		}
	vec_free(&stack);
	return serves;
}

static json_t *view_json(Strings *t, GvSvg *gv, Module *m, const Options *o, const char *name, int rank,
			 const ReportConfig *rc, Report *r, int *err)
{
	json_t *v = json_object();
	json_object_set_new(v, "name", json_string(name));
	json_object_set_new(v, "rank", json_integer(rank));
	DotGroups dg = {0};
	void *g = dot_build_groups(m, o, &dg);
	size_t len = 0;
	char *svg = gv_svg_render(gv, g, &len);
	dot_free(g);
	if (!svg) {
		*err = 1;
		dot_groups_free(&dg);
		return v;
	}
	json_object_set_new(v, "svg", svg_json(svg, len));
	/* the nodes, in graph order; a group's members in the same order */
	json_t *nodes = json_array();
	Vec(Node *) *members = xcalloc((size_t)dg.n + 1, sizeof *members);
	uint32_t count = 0;
	int32_t *pos = xmalloc(((size_t)m->next_id + 1) * sizeof *pos);
	for (uint32_t i = 0; i <= m->next_id; i++)
		pos[i] = -1;
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *gr = m->graphs.a[gi];
		for (uint32_t pass = 0; pass < 2; pass++) {
			uint32_t nn = pass ? gr->nodes.n : gr->params.n;
			for (uint32_t i = 0; i < nn; i++) {
				Node *n = pass ? gr->nodes.a[i] : gr->params.a[i];
				if (!dot_drawn(n))
					continue;
				int grp = dg.n && n->kind == NK_CNODE ? (int)dg.of[n->id] - 1 : -1;
				add_node(t, nodes, n, grp);
				pos[n->id] = (int32_t)count++;
				if (grp >= 0)
					vec_push(&members[grp], n);
			}
		}
	}
	json_object_set_new(v, "fields", json_integer(NF));
	json_object_set_new(v, "nodes", nodes);
	/* each box: label, members, and its picture (shared by equal boxes) */
	json_t *groups = json_array(), *pieces = json_array();
	KeyMap seen;
	keymap_init(&seen, sizeof(int));
	for (int k = 0; k < dg.n && !*err; k++) {
		json_t *grp = json_array(), *mem = json_array();
		int piece = -1;
		json_array_append_new(grp, json_integer(str_c(t, sym_str(dg.key[k]))));
		if (members[k].n <= PIECE_MAX) {
			void *pg = dot_build_piece(m, o, members[k].a, members[k].n);
			size_t dl = 0;
			char *dot = gv_dot_text(pg, &dl);
			if (dot) {
				int64_t key = intern(dot, dl);
				int fresh;
				int *slot = keymap_get(&seen, &key, 1, &fresh);
				if (fresh) {
					char *ps = gv_svg_render(gv, pg, &len);
					if (ps) {
						*slot = (int)json_array_size(pieces);
						json_array_append_new(pieces, svg_json(ps, len));
					} else {
						*err = 1;
					}
				}
				piece = *slot;
				free(dot);
			}
			dot_free(pg);
		}
		json_array_append_new(grp, json_integer(piece));
		for (uint32_t i = 0; i < members[k].n; i++)
			json_array_append_new(mem, json_integer(pos[members[k].a[i]->id]));
		json_array_append_new(grp, mem);
		json_array_append_new(groups, grp);
	}
	keymap_free(&seen);
	json_object_set_new(v, "groups", groups);
	json_object_set_new(v, "pieces", pieces);
	for (int k = 0; k < dg.n; k++)
		vec_free(&members[k]);
	free(members);
	dot_groups_free(&dg);
	/* communication: each operation with its cost and the node it serves */
	if (r) {
		report_collect(m, rc, r);
		int32_t *serves = redist_consumers(m, pos);
		json_t *comm = json_array();
		for (int i = 0; i < r->ncomm; i++) {
			const ReportComm *c = &r->comm[i];
			int32_t at = pos[c->node->id];
			int32_t from = serves[c->node->id] >= 0 ? serves[c->node->id] : pos[ir_node_origin(c->node)->id];
			if (at < 0)
				continue;
			json_t *e = json_pack("[iisiiff]", at, from < 0 ? at : from, c->kind, c->category, c->group,
					      c->bytes, c->secs);
			json_array_append_new(comm, e);
		}
		free(serves);
		json_object_set_new(v, "comm", comm);
		json_object_set_new(v, "totals", report_totals_json(r));
		json_object_set_new(v, "operators", json_integer(r->nops));
	}
	free(pos);
	return v;
}

/* operators a module draws (the rank-view budget) */
static uint32_t drawn_count(const Module *m)
{
	uint32_t c = 0;
	for (uint32_t gi = 0; gi < m->graphs.n; gi++)
		c += m->graphs.a[gi]->nodes.n;
	return c;
}

/* the order of each stage's forwards and backwards (sched_order,
 * passes/train/schedule.c; training-step.md §4.7) */
static json_t *schedule_json(int stages, int micro, int scheduler)
{
	json_t *all = json_array();
	SchedStep *ord = xmalloc((size_t)(2 * micro + 1) * sizeof *ord);
	for (int s = 0; s < stages; s++) {
		json_t *row = json_array();
		int n = sched_order(stages, s, micro, scheduler, ord);
		for (int k = 0; k < n; k++) {
			char step[32];
			snprintf(step, sizeof step, "%c%d", ord[k].bwd ? 'B' : 'F', ord[k].micro);
			json_array_append_new(row, json_string(step));
		}
		json_array_append_new(all, row);
	}
	free(ord);
	return all;
}

static int write_page(const char *path, json_t *root)
{
	OutFile of;
	if (out_open(&of, path) != 0)
		return 3;
	FILE *f = of.f;
	json_t *title = json_object_get(root, "input");
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", f);
	fputs("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>sappc: ", f);
	for (const char *s = json_string_value(title); s && *s; s++) /* the file name, as HTML text */
		if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '&')
			fputs("&amp;", f);
		else
			fputc(*s, f);
	fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", html_explorer_css);
	/* JSON_ESCAPE_SLASH: no "</script>" can end the data early */
	fputs("<script type=\"application/json\" id=\"sappc-data\">", f);
	int rc = json_dumpf(root, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ESCAPE_SLASH | JSON_REAL_PRECISION(10));
	fprintf(f, "</script>\n<script>\n%s</script>\n</body>\n</html>\n", html_explorer_js);
	if (rc != 0 && !ferror(f)) { /* a write error is out_commit's to report, with its cause */
		out_abort(&of);
		diag_error("cannot encode the page's data for '%s'", path);
		return 3;
	}
	return out_commit(&of) != 0 ? 3 : 0;
}

int html_write(Module *m, const HtmlInputs *hin, const Options *o, const ReportConfig *rc, const char *path)
{
	const char *in = m->filename;
	GvSvg *gv = gv_svg_open();
	if (!gv)
		return 3;
	int err = 0;
	Strings t;
	keymap_init(&t.idx, sizeof(int));
	t.arr = json_array();
	json_t *root = json_object();
	json_object_set_new(root, "input", jstr(in, strlen(in)));
	json_object_set_new(root, "devices", json_integer(o->device_num));
	int stages = sapp_plan_stages(m, o);
	int per_stage = o->device_num / (stages > 0 ? stages : 1);
	json_object_set_new(root, "stages", json_integer(stages));
	json_object_set_new(root, "micro_batches", json_integer(o->micro_batch_num));
	json_object_set_new(root, "rank", json_integer(o->rank));
	json_object_set_new(root, "max_nodes", json_integer(o->max_nodes));
	json_object_set_new(root, "categories", json_array());
	for (int i = 0; i < RC_COUNT; i++)
		json_array_append_new(json_object_get(root, "categories"), json_string(report_category_names[i]));
	json_t *model = json_pack("{sfsfsfsfsi}", "bandwidth_intra_gbps", rc->bw_intra, "bandwidth_inter_gbps",
				  rc->bw_inter, "latency_intra_us", rc->lat_intra, "latency_inter_us", rc->lat_inter,
				  "devices_per_node", rc->per_node);
	json_object_set_new(root, "model", model);
	if (m->sapp && m->sapp->searched) {
		json_object_set_new(root, "phase", json_string(m->sapp->predict ? "predict" : "train"));
		json_object_set_new(root, "phase_reason", json_string(m->sapp->phase_why));
		if (m->sapp->suggestion)
			json_object_set_new(root, "auto_pipeline", json_string(m->sapp->suggestion));
	}
	json_t *views = json_array();
	Report *r = xcalloc(1, sizeof *r);
	/* the plan view first (global shapes), then this rank, then others */
	Options pv = *o;
	pv.view_plan = 1;
	Module *plan = hin->plan;
	int bad = hin->plan_failed; /* reported, exit 1 */
	if (plan && plan != m)
		json_array_append_new(views, view_json(&t, gv, plan, &pv, "plan", -1, rc, NULL, &err));
	/* m itself when the pipeline stopped before the lowering: no ranks */
	int unlowered = plan == m;
	char name[64];
	snprintf(name, sizeof name, unlowered ? "plan" : o->device_num > 1 ? "rank %d" : "graph", o->rank);
	ReportConfig c = *rc;
	json_array_append_new(views, view_json(&t, gv, m, unlowered ? &pv : o, name, o->rank, &c, r, &err));
	uint32_t budget = drawn_count(m);
	int shown = 1;
	for (int k = 0; k < o->device_num && !err && !bad && !unlowered && shown < RANK_MAX; k++) {
		if (k == o->rank)
			continue;
		if (budget + drawn_count(m) > RANK_BUDGET)
			break;
		Module *mk = hin->rank_module ? hin->rank_module(hin->ctx, k) : NULL;
		if (mk) {
			Options ro = *o;
			ro.rank = k;
			snprintf(name, sizeof name, "rank %d", k);
			c.rank = k;
			json_array_append_new(views, view_json(&t, gv, mk, &ro, name, k, &c, r, &err));
			budget += drawn_count(mk);
			shown++;
			ir_module_free(mk);
		}
	}
	json_object_set_new(root, "views", views);
	/* ranks left out (the budget): the page says how to see them */
	int left_out = unlowered || o->device_num < 2 ? 0 : o->device_num - shown;
	json_object_set_new(root, "ranks_left_out", json_integer(left_out));
	/* this plan against pure data parallel, on the rank of --rank */
	const Report *dp = err || bad ? NULL : hin->dp;
	json_object_set_new(root, "data_parallel", dp ? report_totals_json(dp) : json_null());
	free(r);
	if (stages > 1) {
		json_t *st = json_array();
		for (int s = 0; s < stages; s++)
			json_array_append_new(st, json_pack("{sisi}", "first_rank", s * per_stage, "ranks", per_stage));
		json_object_set_new(root, "stage_ranks", st);
		json_object_set_new(root, "schedule", schedule_json(stages, o->micro_batch_num, o->pipeline_scheduler));
	}
	json_object_set_new(root, "strings", t.arr);
	keymap_free(&t.idx);
	gv_svg_close(gv);
	int rcode = bad ? 1 : err ? 3 : write_page(path, root);
	json_decref(root);
	return rcode;
}
