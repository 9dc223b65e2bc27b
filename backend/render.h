/* render.h - Graphviz output: DOT text (before layout) and SVG through libgvc. */
#ifndef SAPPC_RENDER_H
#define SAPPC_RENDER_H

#include "../ir/sappc.h"

/* dot.c: the module as a cgraph graph (an Agraph_t *), nodes and clusters in id order */
void *dot_build(const Module *m, const Options *o);
void dot_free(void *g);
int dot_drawn(const Node *n); /* 0 for what pictures leave out (UpdateState, monads, dead nodes) */
/* how dot_build_groups collapsed the module: box k (0-based, drawn as "g<k>")
 * labelled key[k]; of[node id] = its box + 1, 0 when drawn alone */
typedef struct DotGroups {
	int n;
	uint32_t *of;
	Sym *key;
} DotGroups;
void *dot_build_groups(const Module *m, const Options *o, DotGroups *out);
void dot_groups_free(DotGroups *d);
/* the operators of one box alone, named x<i> in the order given */
void *dot_build_piece(const Module *m, const Options *o, Node *const *nodes, uint32_t count);
/* render.c */
int gv_write_dot(const Module *m, const Options *o, const char *path);
int gv_render_svg(const Module *m, const Options *o, const char *path);
/* SVG text of a cgraph graph (dot_build*), for --html: laid out and rendered
 * in memory through one graphviz context; NULL (reported) on failure */
typedef struct GvSvg GvSvg;
GvSvg *gv_svg_open(void);
char *gv_svg_render(GvSvg *s, void *graph, size_t *len);
void gv_svg_close(GvSvg *s);
/* the DOT text of a graph before layout (malloc'd), NULL on failure */
char *gv_dot_text(void *graph, size_t *len);


#endif
