/* dot.c - builds the Graphviz picture of a module with libcgraph: one
 * cluster per subgraph, operators as boxes labelled with operator, instance
 * name and output shape, parameters and graph inputs as ellipses, data edges
 * labelled with the shape they carry.  Node names are "n<id>", so the DOT
 * text is deterministic.  Layout and rendering live in render.c. */
#include <graphviz/cgraph.h>
#include <string.h>

#include "render.h"

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

static void set(void *obj, const char *k, const char *v)
{
	agsafeset(obj, (char *)k, (char *)v, (char *)"");
}

static Agnode_t *mknode(Agraph_t *sg, const Node *n)
{
	char name[32];
	snprintf(name, sizeof name, "n%u", n->id);
	return agnode(sg, name, 1);
}

static void label_node(Agnode_t *an, const Node *n)
{
	char shp[256], lab[1024];
	shape_text(shp, sizeof shp, &n->out);
	if (n->kind == NK_PARAM) {
		snprintf(lab, sizeof lab, "%s\n%s", sym_str(n->name), shp);
		set(an, "shape", "ellipse");
		set(an, "style", "filled");
		set(an, "fillcolor", n->has_default ? "#fff2cc" : "#d9ead3");
	} else if (n->kind == NK_RETURN) {
		snprintf(lab, sizeof lab, "Return\n%s", shp);
		set(an, "shape", "box");
		set(an, "style", "rounded");
	} else {
		const char *op = n->callee_kind == CK_PRIM ? sym_str(n->prim) : "call";
		if (n->instance)
			snprintf(lab, sizeof lab, "%s\n%s\n%s", op, sym_str(n->instance), shp);
		else
			snprintf(lab, sizeof lab, "%s\n%s", op, shp);
		set(an, "shape", "box");
	}
	set(an, "label", lab);
}

void *dot_build(const Module *m, const Options *o)
{
	(void)o;
	Agraph_t *g = agopen((char *)"sappc", Agdirected, NULL);
	set(g, "rankdir", "TB");
	agattr(g, AGNODE, (char *)"fontname", (char *)"Helvetica");
	agattr(g, AGEDGE, (char *)"fontname", (char *)"Helvetica");
	agattr(g, AGEDGE, (char *)"fontsize", (char *)"10");
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *gr = m->graphs.a[gi];
		char cname[64];
		snprintf(cname, sizeof cname, "cluster_%u", gi);
		Agraph_t *sg = agsubg(g, cname, 1);
		char lab[512];
		snprintf(lab, sizeof lab, "@%s", sym_str(gr->name));
		set(sg, "label", lab);
		for (uint32_t i = 0; i < gr->params.n; i++) {
			const Node *p = gr->params.a[i];
			if (p->out.tstr && strcmp(sym_str(p->out.tstr), "UMonad") == 0)
				continue;
			label_node(mknode(sg, p), p);
		}
		for (uint32_t i = 0; i < gr->nodes.n; i++) {
			const Node *n = gr->nodes.a[i];
			if (n->dead || ir_node_is_op(n, OP_UpdateState))
				continue;
			label_node(mknode(sg, n), n);
		}
	}
	/* data edges, consumer order */
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		const Graph *gr = m->graphs.a[gi];
		for (uint32_t i = 0; i < gr->nodes.n; i++) {
			const Node *n = gr->nodes.a[i];
			if (n->dead || ir_node_is_op(n, OP_UpdateState))
				continue;
			for (uint32_t k = 0; k < n->nargs; k++) {
				if (n->args[k].kind != V_NODE)
					continue;
				const Node *p = n->args[k].u.node;
				if (p->kind == NK_PARAM && p->out.tstr && strcmp(sym_str(p->out.tstr), "UMonad") == 0)
					continue;
				if (ir_node_is_op(p, OP_UpdateState))
					continue;
				Agnode_t *a = mknode(g, p), *b = mknode(g, n);
				char ename[32];
				snprintf(ename, sizeof ename, "e%u_%u", n->id, k);
				Agedge_t *e = agedge(g, a, b, ename, 1);
				char shp[256];
				const Abs *ab = k < n->nin_types ? &n->in_types[k] : &p->out;
				shape_text(shp, sizeof shp, ab);
				set(e, "label", shp);
			}
		}
	}
	return g;
}

void dot_free(void *g)
{
	if (g)
		agclose(g);
}
