/* render.c - the only file that touches libgvc.  DOT is written with
 * agwrite before any layout (so golden files carry no coordinates); SVG goes
 * gvContext -> gvLayout(dot) -> gvRender(svg) -> gvFreeLayout -> agclose ->
 * gvFreeContext, every return checked, output written atomically. */
#include <graphviz/gvc.h>

#include "render.h"

int gv_write_dot(const Module *m, const Options *o, const char *path)
{
	OutFile of;
	if (out_open(&of, path) != 0)
		return -1;
	Agraph_t *g = dot_build(m, o);
	int rc = agwrite(g, of.f) == EOF ? -1 : 0;
	dot_free(g);
	if (rc != 0) {
		out_abort(&of);
		diag_error("cannot write DOT to '%s'", path);
		return -1;
	}
	return out_commit(&of);
}

int gv_render_svg(const Module *m, const Options *o, const char *path)
{
	GVC_t *gvc = gvContext();
	if (!gvc) {
		diag_error("cannot start graphviz (gvContext failed)");
		return -1;
	}
	Agraph_t *g = dot_build(m, o);
	int rc = -1;
	OutFile of;
	if (gvLayout(gvc, g, "dot") != 0) {
		diag_error("graphviz layout failed");
	} else {
		if (out_open(&of, path) == 0) {
			if (gvRender(gvc, g, "svg", of.f) != 0) {
				diag_error("graphviz could not render SVG");
				out_abort(&of);
			} else {
				rc = out_commit(&of);
			}
		}
		gvFreeLayout(gvc, g);
	}
	dot_free(g);
	gvFreeContext(gvc);
	return rc;
}
