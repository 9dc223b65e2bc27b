/* render.c - the only file that touches libgvc.  DOT is written with
 * agwrite before any layout (so golden files carry no coordinates); SVG goes
 * gvContext -> gvLayout(dot) -> gvRender(svg) -> gvFreeLayout -> agclose ->
 * gvFreeContext (once, at exit), every return checked.  The SVG is rendered into memory
 * (gvRenderData) and written by us: graphviz ends the process on a failed
 * write to a FILE (gvwrite_no_z in lib/gvc/gvdevice.c calls exit), and a full
 * disk must be exit 3 with our message and no temporary left behind. */
#include <graphviz/gvc.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"

/* One graphviz context for the whole run, freed at exit: the pango text
 * plugin keeps the last font description in a static that a freed context
 * leaves dangling, so a second context in the same process (--svg and then
 * --html) read freed memory while sizing its first label (AddressSanitizer:
 * heap-use-after-free in textspan_size). */
static GVC_t *shared_gvc;

static void gvc_free(void)
{
	if (shared_gvc)
		gvFreeContext(shared_gvc);
	shared_gvc = NULL;
}

static GVC_t *gvc_get(void)
{
	if (!shared_gvc) {
		shared_gvc = gvContext();
		if (!shared_gvc)
			diag_error("cannot start graphviz (gvContext failed)");
		else
			atexit(gvc_free);
	}
	return shared_gvc;
}

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
	GVC_t *gvc = gvc_get();
	if (!gvc)
		return -1;
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
	return rc;
}

struct GvSvg {
	GVC_t *gvc;
};

GvSvg *gv_svg_open(void)
{
	GVC_t *gvc = gvc_get();
	if (!gvc)
		return NULL;
	GvSvg *s = xcalloc(1, sizeof *s);
	s->gvc = gvc;
	return s;
}

char *gv_svg_render(GvSvg *s, void *graph, size_t *len)
{
	Agraph_t *g = graph;
	char *data = NULL, *copy = NULL;
	unsigned int n = 0;
	if (gvLayout(s->gvc, g, "dot") != 0) {
		diag_error("graphviz layout failed");
		return NULL;
	}
	if (gvRenderData(s->gvc, g, "svg", &data, &n) != 0 || !data) {
		diag_error("graphviz could not render SVG");
	} else {
		copy = xmalloc((size_t)n + 1);
		memcpy(copy, data, n);
		copy[n] = 0;
		*len = n;
	}
	if (data)
		gvFreeRenderData(data);
	gvFreeLayout(s->gvc, g);
	return copy;
}

void gv_svg_close(GvSvg *s)
{
	free(s); /* the context is the run's (gvc_get) */
}

char *gv_dot_text(void *graph, size_t *len)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);
	if (!f)
		return NULL;
	int bad = agwrite(graph, f) == EOF;
	if (fclose(f) != 0 || bad) {
		free(text);
		return NULL;
	}
	*len = n;
	return text;
}
