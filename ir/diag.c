/* diag.c - every diagnostic goes through here: "file:line:col: error: msg",
 * then the source line and a caret (columns count from 1).  At most 20
 * errors are printed per run; the count decides the exit status. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sappc.h"

#define MAX_ERRORS 20

static Source cur;
static int nerrors, quiet, silent;

/* While the scanner runs it holds a NUL inside the source buffer (flex's
 * yy_hold_char), so the source line of a diagnostic is printed only after
 * the parse: messages are queued until diag_flush(). */
typedef struct Deferred {
	const char *kind;
	Loc loc;
	char *msg;
} Deferred;
static int deferring;
static Vec(Deferred) queue;

void diag_defer(int on)
{
	deferring = on;
}

void diag_set_silent(int s)
{
	silent = s;
}

void diag_set_source(const Source *src)
{
	if (src)
		cur = *src;
	else
		memset(&cur, 0, sizeof cur);
}

void diag_set_quiet(int q)
{
	quiet = q;
}

int diag_errors(void)
{
	return nerrors;
}

int diag_too_many(void)
{
	return nerrors >= MAX_ERRORS;
}

void diag_reset(void)
{
	nerrors = 0;
}

static void show_line(Loc loc)
{
	if (!cur.buf || loc.line == 0)
		return;
	const char *p = cur.buf, *end = cur.buf + cur.len;
	for (uint32_t l = 1; l < loc.line && p < end; p++)
		if (*p == '\n')
			l++;
	const char *e = p;
	while (e < end && *e != '\n' && e - p < 200)
		e++;
	fputc(' ', stderr);
	for (const char *q = p; q < e; q++)
		fputc(*q == '\t' ? ' ' : (*q ? *q : ' '), stderr);
	fputc('\n', stderr);
	if (loc.col >= 1 && loc.col <= (uint32_t)(e - p) + 1) {
		fputc(' ', stderr);
		for (uint32_t i = 1; i < loc.col; i++) {
			unsigned char ch = (unsigned char)p[i - 1];
			/* one caret column per character: skip UTF-8 continuation bytes */
			if ((ch & 0xc0) != 0x80)
				fputc(' ', stderr);
		}
		fputs("^\n", stderr);
	}
}

static void vreport(const char *kind, Loc loc, int located, const char *fmt, va_list ap)
{
	if (silent)
		return;
	if (deferring && located) {
		Deferred d = {kind, loc, NULL};
		va_list aq;
		va_copy(aq, ap);
		int n = vsnprintf(NULL, 0, fmt, aq);
		va_end(aq);
		d.msg = xmalloc((size_t)n + 1);
		vsnprintf(d.msg, (size_t)n + 1, fmt, ap);
		vec_push(&queue, d);
		return;
	}
	if (located && cur.name)
		fprintf(stderr, "%s:%u:%u: %s: ", cur.name, loc.line, loc.col, kind);
	else if (cur.name && located)
		fprintf(stderr, "%s: %s: ", cur.name, kind);
	else
		fprintf(stderr, "sappc: %s: ", kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	if (located)
		show_line(loc);
}

void diag_flush(void)
{
	deferring = 0;
	for (uint32_t i = 0; i < queue.n; i++) {
		Deferred *d = &queue.a[i];
		if (cur.name)
			fprintf(stderr, "%s:%u:%u: %s: %s\n", cur.name, d->loc.line, d->loc.col, d->kind, d->msg);
		else
			fprintf(stderr, "sappc: %s: %s\n", d->kind, d->msg);
		show_line(d->loc);
		free(d->msg);
	}
	if (queue.n && nerrors >= MAX_ERRORS)
		fprintf(stderr, "sappc: too many errors, stopping\n");
	vec_free(&queue);
}

void diag_error_at(Loc loc, const char *fmt, ...)
{
	nerrors++;
	if (nerrors > MAX_ERRORS)
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport("error", loc, 1, fmt, ap);
	va_end(ap);
	if (nerrors == MAX_ERRORS && !silent && !deferring)
		fprintf(stderr, "sappc: too many errors, stopping\n");
}

void diag_warning_at(Loc loc, const char *fmt, ...)
{
	if (quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport("warning", loc, 1, fmt, ap);
	va_end(ap);
}

void diag_error(const char *fmt, ...)
{
	nerrors++;
	va_list ap;
	va_start(ap, fmt);
	vreport("error", (Loc){0, 0}, 0, fmt, ap);
	va_end(ap);
}

void diag_warning(const char *fmt, ...)
{
	if (quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport("warning", (Loc){0, 0}, 0, fmt, ap);
	va_end(ap);
}

void diag_note(const char *fmt, ...)
{
	if (quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport("note", (Loc){0, 0}, 0, fmt, ap);
	va_end(ap);
}

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sappc: internal error (a bug in sappc, please report it): ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}
