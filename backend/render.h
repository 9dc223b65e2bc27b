/* render.h - Graphviz output: DOT text (before layout) and SVG through libgvc. */
#ifndef SAPPC_RENDER_H
#define SAPPC_RENDER_H

#include "../ir/sappc.h"

/* dot.c: the module as a cgraph graph (an Agraph_t *), nodes and clusters in id order */
void *dot_build(const Module *m, const Options *o);
void dot_free(void *g);
/* render.c */
int gv_write_dot(const Module *m, const Options *o, const char *path);
int gv_render_svg(const Module *m, const Options *o, const char *path);

#endif
