/* diag.c - every diagnostic goes through here: "file:line:col: error: msg",
 * then the source line and a caret (columns count from 1).  At most 20
 * errors are printed per run; the count decides the exit status.
 *
 * The source line is shown as text a terminal can take: tabs become spaces,
 * control bytes and invalid UTF-8 become '?', and a line longer than
 * SHOW_WIDTH bytes is cut to a window around the caret with "..." marks
 * (a 5 MB node line must not flood the terminal).  The caret counts one
 * column per shown character. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sappc.h"

#define MAX_ERRORS 20
#define SHOW_WIDTH 160

static Source cur;
static int nerrors, quiet, silent;

void diag_restore(int n)
{
	nerrors = n;
}

void diag_set_silent(int s)
{
	silent = s;
}
static char *const *hold_pos;
static const char *hold_ch;

void diag_set_source(const Source *src)
{
	if (src)
		cur = *src;
	else
		memset(&cur, 0, sizeof cur);
}

Source diag_source(void)
{
	return cur;
}

void diag_set_hold(char *const *pos, const char *ch)
{
	hold_pos = pos;
	hold_ch = ch;
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

/* the byte at p as the user wrote it */
static unsigned char byte_at(const char *p)
{
	if (hold_pos && hold_ch && *hold_pos == p)
		return (unsigned char)*hold_ch;
	return (unsigned char)*p;
}

/* the next '\n' in [p, end), or end */
static const char *next_nl(const char *p, const char *end)
{
	const char *q = memchr(p, '\n', (size_t)(end - p));
	if (!q)
		q = end;
	if (hold_pos && hold_ch && *hold_ch == '\n' && *hold_pos >= p && *hold_pos < q)
		q = *hold_pos;
	return q;
}

/* One shown character starting at q (q < stop): its bytes go to out, the
 * return value is how many source bytes it covers. */
static size_t glyph(const char *q, const char *stop, char out[4], size_t *olen)
{
	unsigned char c = byte_at(q);
	*olen = 1;
	if (c == '\t') {
		out[0] = ' ';
		return 1;
	}
	if (c >= 0x20 && c < 0x7f) {
		out[0] = (char)c;
		return 1;
	}
	size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	if (n && (size_t)(stop - q) >= n) {
		size_t i = 1;
		while (i < n && (byte_at(q + i) & 0xc0) == 0x80)
			i++;
		if (i == n) {
			for (i = 0; i < n; i++)
				out[i] = (char)byte_at(q + i);
			*olen = n;
			return n;
		}
	}
	out[0] = '?';
	return 1;
}

static void show_line(Loc loc)
{
	if (!cur.buf || loc.line == 0)
		return;
	const char *p = cur.buf, *end = cur.buf + cur.len;
	for (uint32_t l = 1; l < loc.line; l++) {
		p = next_nl(p, end);
		if (p == end)
			return; /* no such line */
		p++;
	}
	const char *e = next_nl(p, end);
	/* the caret's byte; a column past the end of the line gets no caret */
	const char *at = loc.col >= 1 && loc.col - 1 <= (size_t)(e - p) ? p + loc.col - 1 : NULL;
	const char *from = p, *to = e;
	if (e - p > SHOW_WIDTH) {
		const char *mid = at ? at : p;
		from = mid - p > SHOW_WIDTH / 2 ? mid - SHOW_WIDTH / 2 : p;
		while (from > p && (byte_at(from) & 0xc0) == 0x80)
			from--; /* do not start inside a UTF-8 sequence */
		to = e - from > SHOW_WIDTH ? from + SHOW_WIDTH : e;
	}
	char g[4];
	size_t gl;
	fputs(from > p ? " ..." : " ", stderr);
	for (const char *q = from; q < to;) {
		q += glyph(q, to, g, &gl);
		fwrite(g, 1, gl, stderr);
	}
	fputs(to < e ? "...\n" : "\n", stderr);
	if (!at || at < from || at > to)
		return;
	fputs(from > p ? "    " : " ", stderr);
	for (const char *q = from; q < at;) {
		q += glyph(q, to, g, &gl);
		fputc(' ', stderr);
	}
	fputs("^\n", stderr);
}

static void vreport(const char *kind, Loc loc, int located, const char *fmt, va_list ap)
{
	if (silent)
		return;
	if (located && cur.name && loc.line)
		fprintf(stderr, "%s:%u:%u: %s: ", cur.name, loc.line, loc.col, kind);
	else if (located && cur.name)
		fprintf(stderr, "%s: %s: ", cur.name, kind); /* about the whole file */
	else
		fprintf(stderr, "sappc: %s: ", kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	if (located)
		show_line(loc);
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
	if (nerrors == MAX_ERRORS && !silent)
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

void diag_note_at(Loc loc, const char *fmt, ...)
{
	/* a note explains the error just printed: none once errors are dropped */
	if (quiet || nerrors >= MAX_ERRORS)
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport("note", loc, 1, fmt, ap);
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
	out_discard(); /* abort() skips atexit: no temporary output left behind */
	abort();
}
