/* html.h - --html: the plan explorer page (html.c). */
#ifndef SAPPC_HTML_H
#define SAPPC_HTML_H

#include "report.h"

/* the page's style and script, from backend/html/ (html_assets.c, generated
 * at build time by backend/html/embed.sh) */
extern const char html_explorer_css[];
extern const char html_explorer_js[];

/* What the driver gives the page besides m: modules it has run the pipeline
 * on, never the input to read again.  plan: the global graph after the sapp
 * pass with its stages (m itself when the pipeline stopped before the
 * lowering, NULL with one device); dp: the pure data-parallel plan of the
 * rank (NULL: none); rank_module(ctx, k): rank k lowered like m, or NULL
 * when it cannot be (the page leaves it out); the page frees it. */
typedef struct HtmlInputs {
	Module *plan;
	int plan_failed; /* the plan view could not be made (reported): exit 1 */
	const Report *dp;
	Module *(*rank_module)(void *ctx, int rank);
	void *ctx;
} HtmlInputs;

/* write the page for m (lowered for o->rank) to path, through out_open and
 * out_commit.  0 ok, 1 bad input, 3 I/O or rendering failure (reported). */
int html_write(Module *m, const HtmlInputs *in, const Options *o, const ReportConfig *rc, const char *path);

#endif
