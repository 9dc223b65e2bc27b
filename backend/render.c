/* render.c - the only file that touches libgvc.  DOT is written with
 * agwrite before any layout (so golden files carry no coordinates); SVG goes
 * gvContext -> gvLayout(dot) -> gvRender(svg) -> gvFreeLayout -> agclose ->
 * gvFreeContext, every return checked.  The SVG is rendered into memory
 * (gvRenderData) and written by us: graphviz ends the process on a failed
 * write to a FILE (gvwrite_no_z in lib/gvc/gvdevice.c calls exit), and a full
 * disk must be exit 3 with our message and no temporary left behind. */
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
	if (rc != 0 && !ferror(of.f)) { /* a write error is out_commit's to report, with its cause */
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
		char *data = NULL;
		unsigned int len = 0;
		if (gvRenderData(gvc, g, "svg", &data, &len) != 0 || !data) {
			diag_error("graphviz could not render SVG");
		} else if (out_open(&of, path) == 0) {
			/* a short write sets the stream's error flag: out_commit reports it */
			(void)!fwrite(data, 1, len, of.f);
			rc = out_commit(&of);
		}
		if (data)
			gvFreeRenderData(data);
		gvFreeLayout(gvc, g);
	}
	dot_free(g);
	gvFreeContext(gvc);
	return rc;
}
