/* html.h - --html: the plan explorer page (html.c). */
#ifndef SAPPC_HTML_H
#define SAPPC_HTML_H

#include "report.h"

/* the page's style and script, from backend/html/ (html_assets.c, generated
 * at build time by backend/html/embed.sh) */
extern const char html_explorer_css[];
extern const char html_explorer_js[];

/* write the page for m (lowered for o->rank) to path, through out_open and
 * out_commit; in/buf/len are the input, parsed again for the plan view, the
 * other ranks and the data-parallel comparison.  0 ok, 1 bad input, 3 I/O
 * or rendering failure (reported). */
int html_write(Module *m, const char *in, const char *buf, size_t len, const Options *o, const PassManagerOptions *pm,
	       const ReportConfig *rc, const char *path);

#endif
