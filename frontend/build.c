/* build.c - turns the parser's line-by-line actions into a Module.
 *
 * The dump format is a flat sequence of lines whose meaning depends on what
 * came before (ir-format.md §1.2-1.3): a type line belongs to the node above
 * it, "# ..." lines under a node are its scope and debug lines, comment lines
 * between "subgraph instance" and "subgraph @" belong to that graph, and so
 * on.  BuildCtx tracks that state.  Invariants kept here:
 *   - operands refer to nodes defined earlier in the same graph (%k), to
 *     parameters (%paraN_x), or to another graph's node ($(@g:x)); anything
 *     else is an error, except with --fragment where it becomes V_EXTERN and
 *     prints back verbatim;
 *   - text that sappc does not interpret (debug lines, raw brackets) is kept
 *     byte for byte so that the printer reproduces it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "build.h"
#include "parser.h"

#define MAX_LOCAL (1 << 24)

typedef Vec(const char *) LineVec;

/* What b_abstract reads from a type name that had no error, kept by the
 * Sym's low bits: a file has a handful of type names in 100 000 types. */
typedef struct TstrMemo {
	Sym tstr, dtype;
	uint8_t is_ref;
} TstrMemo;

/* An attribute group read whole (lex_attrblock), kept by its text: a
 * model's groups repeat, word for word, on thousands of lines. */
typedef struct {
	char *text;
	uint64_t hash;
	uint32_t n, nattrs;
	uint32_t used; /* when it was last met (of the two of its set) */
	Attr *attrs; /* list values' elements are the memo's own copies */
} AttrMemo;

/* sets of two, placed by a hash of every byte: the direct-mapped memo of
 * 16 slots, placed by the length and the middle byte, lost three pairs of
 * the generated file's eight groups to each other (the two MatMul groups
 * differ only in a Bool's digit), and a third of its groups were read
 * again by the DFA and built again */
#define ATTR_MEMO 64
#define PATTRS_CACHE 1024

/* A type line read before, kept by its text from ':' to the NL: a model
 * prints the same few type lines in every layer, and such a line met again
 * is a memchr, a hash and a memcmp instead of a dozen tokens, their
 * reductions and the shapes read from text (of the 4096-layer generated
 * transformer's 139 000 type lines, 102 000 are one of 20 texts).  Only a
 * line that parsed without an error is kept, and never one with a ref_key
 * or other extras (an AbsExt): those name one parameter and do not repeat.
 * The memo's shapes are its own copies (in mem, with the text); a node
 * gets its own copies of them, as a line read token by token gives it. */
typedef struct {
	char *mem; /* the shapes' arrays, then the text (NULL: empty slot) */
	const char *text;
	uint64_t hash;
	uint32_t n, nabs;
	uint32_t used; /* when it was last met (of the two of its set) */
	uint8_t has_out;
	/* a Load's line: its text is without its nrefs ref_key values, and
	 * the abstracts of refmask take them from the line met */
	uint8_t nrefs;
	uint16_t refmask;
	Abs abs[16]; /* the inputs, then the output */
} TypeMemo;

/* sets of two: a direct-mapped memo lost two of the generated file's 15
 * repeated lines to each other in every layer */
#define TYPE_MEMO 256

struct BuildCtx {
	Module *m;
	LexState ls;
	Graph *cur;          /* graph receiving nodes */
	Graph *pending;      /* graph announced by "subgraph attr:" etc. but not opened */
	Graph *closed;       /* last closed graph (for "# Order:") */
	int in_braces;       /* between "subgraph @g(...) {" and "}" */
	int implicit;        /* cur is the implicit graph of a headerless file */
	Node *last;          /* node receiving type, scope and debug lines */
	int in_order;
	int attr_target;     /* 0 none, 1 module "# Attrs:", 2 pending graph */
	VList *param_types;  /* "# Parameters:" of the pending graph */
	LineVec pend;      /* comment lines waiting for their owner */
	LineVec nodelines; /* debug lines of b->last */
	LineVec xlines;
	Vec(Node *) hparams;         /* "# Params:" lines: entry graph parameters */
	Vec(Node *) locals;          /* %k -> node in cur */
	Vec(VList *) vlists;   /* every list ever made (owned; freed at the end) */
	Vec(Groups *) groups;
	Vec(VList *) vfree;    /* lists ready for reuse */
	Vec(Groups *) gfree;
	Vec(Abs *) afree;      /* parsed abstracts are copied into nodes, then reused */
	Vec(Abs *) aall;
	Vec(Node *) phparams;  /* stand-ins for parameters whose line failed to parse */
	Node **ptab;           /* parameter lookup: (name, number) -> node */
	uint32_t *ptag;        /* the hash of each slot (0: empty): a probe that meets another parameter reads no node */
	Vec(Node *) pnum;      /* the first parameter put in ptab with each number N of %paraN_x */
	uint32_t pgap;         /* the least number put in ptab but not in pnum (none: UINT32_MAX) */
	TstrMemo tmemo[64];
	AttrMemo amemo[ATTR_MEMO];
	size_t amemo_max; /* the longest text ever kept there */
	uint32_t amclock;
	TypeMemo tymemo[TYPE_MEMO];
	uint32_t tyclock;
	/* recent primitive attribute lists in the arena, by contents: nodes
	 * with equal ones share one (pattrs_shared) */
	struct {
		uint64_t h;
		uint32_t n;
		Attr *a;
	} pattrs_cache[PATTRS_CACHE];
	uint32_t pmask, pcount;
	int nforeign;
	Sym cycle;
	Sym funcunion;
	int skip;            /* a node line failed to parse: drop its type line */
	int commented;       /* a "#" line came after b->last's node line */
	int blocks;          /* "subgraph @g(...) {" lines read so far */
	Graph *implicit_g;   /* the graph of node lines outside any block, if any */
	Loc entry_loc;       /* the "# IR entry" line */
	int fragment;
	const char *fname;
};

/* ------------------------------------------------------------ helpers */

static void vrelease(BuildCtx *b, VList *l);
static void grelease(BuildCtx *b, Groups *g);
static void ptab_insert(BuildCtx *b, Node *p);
static Node *find_param(BuildCtx *b, Graph *g, int64_t num, Sym name);
static void register_local(BuildCtx *b, Loc loc, int64_t k, Node *n);

static char *adup(BuildCtx *b, const char *p, size_t n)
{
	return arena_strndup(b->m->arena, p, n);
}

static const char **freeze(BuildCtx *b, void *vec_a, uint32_t n)
{
	if (!n)
		return NULL;
	return arena_dup(b->m->arena, vec_a, n * sizeof(const char *));
}

/* "MatMul (%1)", "Return", "call @g (%3)": how messages name a node */
static void node_label(char *buf, size_t n, const Node *nd)
{
	if (nd->kind == NK_RETURN)
		snprintf(buf, n, "Return");
	else if (nd->callee_kind == CK_PRIM)
		snprintf(buf, n, "%s (%%%d)", sym_str(nd->prim), nd->local);
	else if (nd->callee_kind == CK_CALL)
		snprintf(buf, n, "call @%s (%%%d)", sym_str(ir_node_ext(nd)->callee.text), nd->local);
	else
		snprintf(buf, n, "node %%%d", nd->local);
}

/* What the line being read defines, as a message prefix: errors inside a
 * node line name the node and its operator. */
static void line_ctx(BuildCtx *b, char *buf, size_t n)
{
	LexState *ls = &b->ls;
	char lab[128];
	buf[0] = 0;
	switch (ls->lkind) {
	case LK_NODE:
		if (ls->lname[0])
			snprintf(buf, n, "%s (%%%lld): ", ls->lname, (long long)ls->llocal);
		else
			snprintf(buf, n, "node %%%lld: ", (long long)ls->llocal);
		break;
	case LK_RETURN:
		snprintf(buf, n, "Return: ");
		break;
	case LK_TYPE:
		if (b->last && !b->skip) {
			node_label(lab, sizeof lab, b->last);
			snprintf(buf, n, "type line of %s: ", lab);
		}
		break;
	case LK_PARAM:
		snprintf(buf, n, "parameter '%s': ", ls->lname);
		break;
	case LK_SUBGRAPH:
		if (ls->lname[0])
			snprintf(buf, n, "subgraph '@%s': ", ls->lname);
		break;
	default:
		break;
	}
}

static void err(BuildCtx *b, Loc loc, const char *fmt, ...) PRINTF(3, 4);
static void err(BuildCtx *b, Loc loc, const char *fmt, ...)
{
	char msg[512], ctx[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	line_ctx(b, ctx, sizeof ctx);
	diag_error_at(loc, "%s%s", ctx, msg);
}

static Loc lexloc(LexState *ls, const char *p)
{
	return (Loc){ls->line, (uint32_t)(p - ls->line_start) + 1};
}

/* an error found by the scanner in the token it is returning; the parser's
 * complaint about that token would only repeat it */
static void lexerr(LexState *ls, const char *p, const char *fmt, ...) PRINTF(3, 4);
static void lexerr(LexState *ls, const char *p, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	err(ls->b, lexloc(ls, p), "%s", msg);
	ls->explained = 1;
}

/* Flush the debug lines collected for the last node onto it. */
static void flush_node(BuildCtx *b)
{
	Node *n = b->last;
	b->commented = 0;
	if (n) {
		if (b->nodelines.n) {
			NodeExt *x = ir_node_ext_mut(b->m, n);
			x->debug = freeze(b, b->nodelines.a, b->nodelines.n);
			x->ndebug = b->nodelines.n;
		}
		if (b->xlines.n) {
			NodeExt *x = ir_node_ext_mut(b->m, n);
			x->xlines = freeze(b, b->xlines.a, b->xlines.n);
			x->nxlines = b->xlines.n;
		}
	}
	b->nodelines.n = 0;
	b->xlines.n = 0;
	b->last = NULL;
}

static Graph *pending_graph(BuildCtx *b)
{
	if (!b->pending) {
		b->pending = ir_graph_new(b->m, 0);
		b->pending->loc = (Loc){b->ls.line, 1}; /* until its subgraph line */
		if (b->pend.n) {
			b->pending->lead = freeze(b, b->pend.a, b->pend.n);
			b->pending->nlead = b->pend.n;
			b->pend.n = 0;
		}
	}
	return b->pending;
}

static void attach_header_params(BuildCtx *b, Graph *g)
{
	if (!b->hparams.n || g->params.n)
		return;
	for (uint32_t i = 0; i < b->hparams.n; i++) {
		b->hparams.a[i]->g = g;
		vec_push(&g->params, b->hparams.a[i]);
	}
	b->hparams.n = 0;
	g->is_entry = 1;
	/* the parameters changed graph: rebuild the lookup table */
	free(b->ptab);
	free(b->ptag);
	b->ptab = NULL;
	b->ptag = NULL;
	b->pmask = b->pcount = 0;
	b->pnum.n = 0;
	b->pgap = UINT32_MAX;
	for (uint32_t gi = 0; gi < b->m->graphs.n; gi++)
		for (uint32_t i = 0; i < b->m->graphs.a[gi]->params.n; i++)
			ptab_insert(b, b->m->graphs.a[gi]->params.a[i]);
	for (uint32_t i = 0; i < b->phparams.n; i++) {
		if (!b->phparams.a[i]->g)
			b->phparams.a[i]->g = g;
		ptab_insert(b, b->phparams.a[i]);
	}
}

/* The graph that receives a node line: the open one, or an implicit graph
 * for the hand-written minimal form and dump fragments. */
static Graph *node_graph(BuildCtx *b, Loc loc)
{
	if (b->cur) {
		/* the Return ends a graph's nodes (ir-format.md §1.3) */
		if (!b->fragment && b->cur->nodes.n && b->cur->nodes.a[b->cur->nodes.n - 1]->kind == NK_RETURN)
			err(b, loc, "node line after the Return of subgraph '@%s' (the Return is a graph's last node)",
			    sym_str(b->cur->name));
		return b->cur;
	}
	/* a dump (a header or subgraph blocks) keeps every node in a block;
	 * only a file of bare node lines forms an implicit graph */
	if (!b->fragment && (b->m->has_header || b->blocks || b->pending))
		err(b, loc,
		    "node line outside any subgraph (a dump's nodes go between 'subgraph @NAME(...) {' and '}')");
	Sym name = b->m->entry ? b->m->entry : intern_cstr("main");
	Graph *g;
	if (b->pending) {
		g = b->pending;
		b->pending = NULL;
		if (!g->name)
			g->name = name;
	} else {
		g = ir_graph_new(b->m, name);
		if (b->pend.n) {
			g->lead = freeze(b, b->pend.a, b->pend.n);
			g->nlead = b->pend.n;
			b->pend.n = 0;
		}
	}
	if (!b->m->entry)
		b->m->entry = g->name;
	g->loc = loc;
	if (g->name == b->m->entry)
		attach_header_params(b, g);
	b->cur = g;
	b->implicit = 1;
	if (!b->implicit_g)
		b->implicit_g = g;
	b->locals.n = 0;
	b->in_order = 0;
	return g;
}

/* ------------------------------------------------------------ scanner helpers */

static int starts(const char *p, const char *e, const char *w)
{
	size_t n = strlen(w);
	return (size_t)(e - p) >= n && memcmp(p, w, n) == 0;
}

int lex_hash_line(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv, int *keep)
{
	const char *p = t, *e = t + n;
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\r'))
		p++;
	while (e > p && (e[-1] == '\r'))
		e--;
	lv->tok.p = p;
	lv->tok.n = (uint32_t)(e - p);
	const char *q = p + 1; /* after '#' */
	const char *r = q;
	while (r < e && *r == ' ')
		r++;
	if (starts(r, e, "IR entry")) {
		const char *at = memchr(r, '@', (size_t)(e - r));
		if (!at) {
			const char *nm = r + strlen("IR entry");
			while (nm < e && (*nm == ':' || *nm == ' ' || *nm == '\t'))
				nm++;
			lexerr(ls, nm < e ? nm : r, "'# IR entry' line without a graph name: write '# IR entry: @NAME'");
			return BADCHAR;
		}
		const char *ne = e;
		while (ne > at + 1 && (ne[-1] == ' ' || ne[-1] == '\t'))
			ne--;
		lv->tok.s = intern(at + 1, (size_t)(ne - at - 1));
		return HDR_ENTRY;
	}
	if (starts(r, e, "Total subgraphs:"))
		return HDR_NSUB;
	if (starts(r, e, "Attrs:") && r == q + 1)
		return HDR_ATTRS;
	if (starts(r, e, "attrs") && q == r) {
		/* MindSpore 1.x "#attrs         :" */
		return HDR_ATTRS;
	}
	if (starts(r, e, "Total params"))
		return HDR_NPARAMS;
	if (starts(r, e, "Params:"))
		return HDR_PARAMS;
	if (starts(r, e, "Parameters:")) {
		*keep = (int)(r + strlen("Parameters:") - t);
		return HDR_PARAMETERS;
	}
	if (starts(r, e, "Order:"))
		return ORDER_HDR;
	if (starts(q, e, "------------------------> ")) {
		lv->tok.s = intern(p, (size_t)(e - p));
		return CYCLE_MARK;
	}
	int kind = 0;
	const char *rest = NULL;
	if (starts(r, e, "Fullname with scope:") && r == q + 1) {
		kind = SCOPE_FULLNAME;
		rest = r + strlen("Fullname with scope:");
	} else if (starts(r, e, "Scope:") && r == q + 1) {
		kind = SCOPE_SCOPE;
		rest = r + strlen("Scope:");
	} else if (starts(r, e, "scope:")) {
		kind = r == q ? SCOPE_LOWER_NOSPACE : SCOPE_LOWER;
		rest = r + strlen("scope:");
		if (r != q && r != q + 1)
			kind = 0;
	}
	if (kind) {
		while (rest < e && *rest == ' ')
			rest++;
		const char *se = e;
		while (se > rest && se[-1] == ' ')
			se--;
		if (rest < se && *rest == '(' && se[-1] == ')' && se - rest >= 2) {
			/* interned by b_scope, right after the NL: the probe's
			 * cache miss overlaps the parser's work till then */
			lv->tok.k = kind;
			lv->tok.i = (int64_t)(rest + 1 - p) << 32 | (uint32_t)(se - rest - 2);
			lv->tok.s2 = intern_prepare(rest + 1, (size_t)(se - rest - 2));
			return SCOPE_LINE;
		}
	}
	return COMMENT;
}

/* the line's name for messages: an operator, "%paraN_x", a graph */
static void note_name(LexState *ls, const char *p, size_t n)
{
	if (n >= sizeof ls->lname)
		n = sizeof ls->lname - 1;
	memcpy(ls->lname, p, n);
	ls->lname[n] = 0;
}

static int64_t digits18(const char *p, size_t n);

/* "%k(name) =": also notes the operator that follows, for messages */
void lex_nodedef(LexState *ls, const char *t, size_t len, char held, union IR_YYSTYPE *lv)
{
	size_t i = 0;
	const char *q = t + len;
	char c = held;
	while (c == ' ' || c == '\t')
		c = *++q;
	while (i + 1 < sizeof ls->lname && (c == '_' || c == '.' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
					    (c >= '0' && c <= '9') || (unsigned char)c >= 0x80)) {
		ls->lname[i++] = c;
		c = *++q;
	}
	ls->lname[i] = 0;
	ls->lkind = LK_NODE;
	const char *p = strchr(t, '%');
	const char *end = p + 1;
	while (*end >= '0' && *end <= '9')
		end++;
	/* more than 18 digits is over MAX_LOCAL: no strtoll for its errno */
	int64_t v = end - p - 1 <= 18 ? digits18(p + 1, (size_t)(end - p - 1)) : INT64_MAX;
	if (v > MAX_LOCAL) {
		diag_error_at(lexloc(ls, p), "node number %.*s is too large (the limit is %d)", (int)strspn(p + 1, "0123456789") + 1,
			      p, MAX_LOCAL);
		v = -1;
	}
	const char *open = end; /* at '(' */
	const char *close = strchr(open, ')');
	lv->tok.i = v;
	lv->tok.s = intern(open + 1, (size_t)(close - open - 1));
	lv->tok.p = p;
	ls->llocal = v;
}

void lex_graphref(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	if (ls->lkind == LK_SUBGRAPH && !ls->lname[0])
		note_name(ls, t + 1, n - 1);
	lv->tok.s = intern(t + 1, n - 1);
}

static void split_param(const char *p, size_t n, Tok *tok)
{
	/* p points after "%para": digits, then '_' and the name */
	size_t i = 0;
	int64_t num = -1;
	if (i < n && p[i] >= '0' && p[i] <= '9') {
		num = 0;
		while (i < n && p[i] >= '0' && p[i] <= '9') {
			if (num < 100000000)
				num = num * 10 + (p[i] - '0');
			i++;
		}
	}
	if (i < n && p[i] == '_')
		i++;
	tok->i = num;
	tok->s = intern(p + i, n - i);
}

void lex_paramdef(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	const char *p = strchr(t, '%') + 5;
	const char *e = t + n - 1; /* ':' */
	while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	split_param(p, (size_t)(e - p), &lv->tok);
	lv->tok.p = t;
	ls->lkind = LK_PARAM;
	ls->pnum = lv->tok.i;
	ls->psym = lv->tok.s;
	note_name(ls, p - 5, (size_t)(e - p + 5));
}

static Node *pnum_find(const BuildCtx *b, int64_t num);

void lex_paramref(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	/* a parameter's name is interned when its line is read: a reference
	 * that spells the name of the parameter its number finds takes that
	 * Sym (the one intern would give) without a probe of the table */
	const char *p = t + 5, *e = t + n;
	int64_t num = 0;
	while (p < e && *p >= '0' && *p <= '9' && num < 100000000)
		num = num * 10 + (*p++ - '0');
	const Node *q = p > t + 5 && (p == e || *p < '0' || *p > '9') ? pnum_find(ls->b, num) : NULL;
	/* references come in the order of the numbers (a layer's Loads read
	 * its weights one after the other), and the next parameter's node
	 * was last touched at its own line, far above: fetch it now */
	const Node *next = q ? pnum_find(ls->b, num + 1) : NULL;
	if (next)
		__builtin_prefetch(&next->name);
	if (q && p < e && *p == '_')
		p++;
	if (q && sym_len(q->name) == (size_t)(e - p) && memcmp(sym_str(q->name), p, (size_t)(e - p)) == 0) {
		lv->tok.i = num;
		lv->tok.s = q->name;
	} else {
		split_param(t + 5, n - 5, &lv->tok);
		q = NULL;
	}
	ls->pref = q;
	lv->tok.p = t;
	lv->tok.n = (uint32_t)n;
}

void lex_instance(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	(void)ls;
	const char *p = t + strlen("subgraph instance:");
	const char *e = t + n;
	while (p < e && *p == ' ')
		p++;
	while (e > p && (e[-1] == ' ' || e[-1] == '\r'))
		e--;
	/* "NAME : PTR" - split at the last " : " */
	const char *sep = NULL;
	for (const char *q = p; q + 3 <= e; q++)
		if (q[0] == ' ' && q[1] == ':' && q[2] == ' ')
			sep = q;
	if (sep) {
		lv->tok.s = intern(p, (size_t)(sep - p));
		lv->tok.s2 = intern(sep + 3, (size_t)(e - sep - 3));
	} else {
		lv->tok.s = intern(p, (size_t)(e - p));
		lv->tok.s2 = 0;
	}
}

void lex_instname(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	(void)ls;
	const char *p = t + strlen("{instance name:");
	const char *e = t + n - 1;
	while (p < e && *p == ' ')
		p++;
	while (e > p && e[-1] == ' ')
		e--;
	lv->tok.s = intern(p, (size_t)(e - p));
}

void lex_foreign(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	(void)ls;
	const char *g = t + 3;
	const char *colon = memchr(g, ':', n - 3);
	lv->tok.s = intern(g, (size_t)(colon - g));
	lv->tok.s2 = intern(colon + 1, (size_t)(t + n - 1 - colon - 1));
	lv->tok.p = t;
	lv->tok.n = (uint32_t)n;
}

void lex_attrline(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	(void)ls;
	const char *e = t + n;
	while (e > t && e[-1] == '\r')
		e--;
	const char *colon = memchr(t, ':', (size_t)(e - t));
	if (!colon) {
		lv->tok.s = 0;
		lv->tok.s2 = intern(t, (size_t)(e - t));
		return;
	}
	lv->tok.s = intern(t, (size_t)(colon - t));
	const char *v = colon + 1;
	if (v < e && *v == ' ')
		v++;
	lv->tok.s2 = intern(v, (size_t)(e - v));
}

/* The value of the decimal digits at p (n of them, n <= 18: no overflow),
 * without strtoll's locale and errno work: integers are a third of the
 * tokens. */
static int64_t digits18(const char *p, size_t n)
{
	int64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v = v * 10 + (p[i] - '0');
	return v;
}

int64_t lex_local(const char *t, size_t n)
{
	return n - 1 <= 18 ? digits18(t + 1, n - 1) : strtoll(t + 1, NULL, 10);
}

int lex_int(LexState *ls, const char *t, union IR_YYSTYPE *lv)
{
	size_t nd = strspn(t + (*t == '-'), "0123456789");
	if (nd <= 18) {
		int64_t v = digits18(t + (*t == '-'), nd);
		lv->tok.i = *t == '-' ? -v : v;
		lv->tok.p = t;
		return INT;
	}
	errno = 0;
	char *end;
	long long v = strtoll(t, &end, 10);
	if (errno == ERANGE) {
		int n = (int)(end - t);
		if (n > 40)
			lexerr(ls, t, "integer literal %.20s... (%d digits) is out of the int64 range", t, n - (*t == '-'));
		else
			lexerr(ls, t, "integer literal %.*s is out of the int64 range", n, t);
		return BADINT;
	}
	lv->tok.i = v;
	lv->tok.p = t;
	return INT;
}

/* "I64(8)" and "Bool(1)" are 270 000 of the 4096-layer file's values; as
 * one token they skip three tokens, four reductions and the scalar type's
 * lookup.  Only where the grammar can take nothing but a value: after ':'
 * (an attribute's, a dict's, a parameter's value, the strategy's first),
 * after '(' (operands, tuple and call elements), and after ',' inside '('
 * or '[' (an attribute key after ',' inside '{' must stay an IDENT, so
 * that "{a: 1, I64(2): 3}" fails where it always did).  Elsewhere, and for
 * a Bool that is neither 0 nor 1 (its error comes from b_call), the name is
 * an IDENT and the rest is scanned as usual. */
int lex_scalar(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	const char *open = memchr(t, '(', n);
	int name = (int)(open - t);
	const char *q = t;
	while (q > ls->line_start && (q[-1] == ' ' || q[-1] == '\t' || q[-1] == '\r'))
		q--;
	char prev = q > ls->line_start ? q[-1] : 0;
	char top = ls->depth > 0 && ls->depth <= LEX_MAX_DEPTH ? ls->br[ls->depth - 1].ch : 0;
	if (!(prev == ':' || prev == '(' || (prev == ',' && (top == '(' || top == '['))))
		return name;
	const char *d = open + 1 + (open[1] == '-');
	int64_t v = digits18(d, (size_t)(t + n - 1 - d));
	if (open[1] == '-')
		v = -v;
	if (*t == 'B') {
		if (v != 0 && v != 1)
			return name;
		lv->tok.k = -1;
	} else {
		static const NumType nt[2][4] = {{NT_I8, NT_I16, NT_I32, NT_I64}, {NT_U8, NT_U16, NT_U32, NT_U64}};
		int bits = name == 2 ? 0 : t[1] == '1' ? 1 : t[1] == '3' ? 2 : 3;
		lv->tok.k = nt[*t == 'U'][bits];
	}
	lv->tok.i = v;
	return 0;
}

/* A shape in a type, "(4096, 1024)", is five tokens and five reductions;
 * after ',' (a shape's place in a type; a type name never starts with
 * '(') it is read as one.  Elsewhere, and where the '(' would be one
 * bracket too deep, it is read as before. */
int lex_shape(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	(void)n;
	const char *q = t;
	while (q > ls->line_start && (q[-1] == ' ' || q[-1] == '\t' || q[-1] == '\r'))
		q--;
	if (q == ls->line_start || q[-1] != ',' || ls->depth >= LEX_MAX_DEPTH)
		return 0;
	lv->tok.p = t;
	lv->tok.n = (uint32_t)n;
	return 1;
}

/* A type that is a name and a shape, "<Tensor[Float32], (4096, 1024)>"
 * (with ", ref_key=NAME" for a weight), is four of five tokens in a type
 * line and five tokens and six reductions when read piece by piece; as
 * one token it is the '<' TSTR ',' SHAPE [',' REFKEY] '>' it stands for,
 * and b_abstract_tok makes what those would have made.  Only where both
 * brackets fit under LEX_MAX_DEPTH and every number is one SHAPE takes
 * (at most 18 digits); else it is read as before, from its '<'. */
int lex_abstract(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	if (ls->depth >= LEX_MAX_DEPTH - 1)
		return 0;
	const char *comma = memchr(t, ',', n); /* the type name has none */
	const char *sh = comma + 2, *p = sh + 1;
	for (;;) {
		size_t nd = 0;
		p += *p == '-';
		while (*p >= '0' && *p <= '9')
			p++, nd++;
		if (nd > 18)
			return 0;
		if (*p == ')')
			break;
		p += 2; /* ", " */
	}
	lv->tok.s = intern(t + 1, (size_t)(comma - t - 1));
	lv->tok.p = sh;
	lv->tok.n = (uint32_t)(p + 1 - sh);
	lv->tok.i = 0;
	if (p[1] == ',') {
		const char *rk = p + 3 + strlen("ref_key="); /* after "), " */
		lv->tok.i = rk - sh;
		lv->tok.k = (int)(t + n - 1 - rk);
	}
	return 1;
}

/* "<UMonad, NoShape>" (a monad, a scalar's type): '<' IDENT ',' IDENT '>'
 * read as one token; both names are interned here, as the IDENTs were.
 * The token's p is NULL: b_abstract_tok then makes a NoShape type. */
int lex_abstract_noshape(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	if (ls->depth >= LEX_MAX_DEPTH)
		return 0;
	size_t k = n - strlen("<, NoShape>");
	lv->tok.s = intern(t + 1, k);
	lv->tok.s2 = intern(t + 1 + k + 2, strlen("NoShape"));
	lv->tok.p = NULL;
	lv->tok.i = 0;
	return 1;
}

/* "<Tuple[Int64*4], TupleShape(NoShape, NoShape, NoShape, NoShape)>", a
 * shape's type, was twenty tokens.  Its names are interned here in the
 * order the pieces interned them: the IDENTs "Tuple" and "Int64" as they
 * were scanned, then "4", "Int64*4" and "Tuple[Int64*4]" as the grammar
 * reduced tstr (b_tstr_rep, b_tstr_wrap: before the next token was
 * scanned), then "TupleShape" and "NoShape".  The token's p is NULL and
 * its i the number of elements: b_abstract_tok makes the tuple of NoShape
 * to_shape made of the call. */
int lex_abstract_tuple(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	if (ls->depth >= LEX_MAX_DEPTH - 1)
		return 0;
	const char *open = memchr(t, '[', n), *star = memchr(t, '*', n);
	const char *digits = star + 1, *close = digits;
	while (*close >= '0' && *close <= '9')
		close++;
	const char *elems = close + strlen("], TupleShape(");
	size_t k = ((size_t)(t + n - strlen(")>") - elems) + 2) / strlen("NoShape, ");
	if (close - digits > 18 || k > 255)
		return 0;
	Tok outer = {.s = intern(t + 1, (size_t)(open - t - 1))};
	Sym inner = intern(open + 1, (size_t)(star - open - 1));
	Tok count = {.i = digits18(digits, (size_t)(close - digits))};
	lv->tok.s = b_tstr_wrap(ls->b, &outer, '[', b_tstr_rep(ls->b, inner, &count));
	intern(close + 3, strlen("TupleShape"));
	intern(elems, strlen("NoShape"));
	lv->tok.p = NULL;
	lv->tok.i = (int64_t)k;
	return 1;
}

/* An attribute group of plain values, "{output_names: [output], transpose_a:
 * Bool(0)}", is a third of a node line's tokens when read piece by piece;
 * right after its keyword it is read as one token, and the group is made
 * here, its names interned in the order the pieces would have interned
 * them.  The scanner's pattern admits only keys, words, integers, I64(n)
 * and Bool(0|1) scalars (a value's place: lex_scalar reads them so too) and
 * lists of words, so nothing in it can be an error; what the pattern lets
 * through and the pieces would not read the same way is left to them: a
 * key that is a keyword ("parent:", the group keywords, "{in_strategy:"),
 * a number longer than 18 digits, brackets over LEX_MAX_DEPTH, and a group
 * anywhere but right after its keyword (a dict value reads differently). */
static int aword_len(const char *p)
{
	const char *q = p;
	while (*q == '_' || *q == '.' || (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') ||
	       (*q >= '0' && *q <= '9') || (unsigned char)*q >= 0x80)
		q++;
	return (int)(q - p);
}

static int digits_len(const char *p)
{
	const char *q = p + (*p == '-');
	while (*q >= '0' && *q <= '9')
		q++;
	return (int)(q - p);
}

static void attr_memo_free(AttrMemo *am)
{
	free(am->attrs);
	free(am->text);
	*am = (AttrMemo){0};
}

/* a hash of every byte, eight a step: groups that differ in one digit
 * must not share a set */
static uint64_t attr_memo_key(const char *t, size_t n)
{
	uint64_t h = n * 0x9e3779b97f4a7c15ULL, w;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		memcpy(&w, t + i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	for (; i < n; i++)
		h = (h ^ (unsigned char)t[i]) * 0xff51afd7ed558ccdULL;
	return h ^ h >> 29;
}

static AttrMemo *attr_memo_set(BuildCtx *b, uint64_t h)
{
	return &b->amemo[(h % (ATTR_MEMO / 2)) * 2];
}

/* keep the group in the way of its set met least lately (or empty) */
static void attr_memo_keep(BuildCtx *b, uint64_t h, const char *t, size_t n, const Groups *g)
{
	AttrMemo *am = attr_memo_set(b, h);
	if (am[1].used < am[0].used)
		am++;
	if (n > b->amemo_max)
		b->amemo_max = n;
	attr_memo_free(am);
	am->text = xmalloc(n);
	memcpy(am->text, t, n);
	am->hash = h;
	am->used = ++b->amclock;
	am->n = (uint32_t)n;
	am->nattrs = g->attrs[0].n;
	am->attrs = xmalloc((am->nattrs ? am->nattrs : 1) * sizeof *am->attrs);
	/* a list's elements are the module's (b_seq), never written once
	 * parsed: every node of this group shares them, as it shares the
	 * values inside them (196 000 copies on a 4096-layer graph, 4.8 MB) */
	memcpy(am->attrs, g->attrs[0].a, am->nattrs * sizeof *am->attrs);
}

/* a group met before: its names are interned already (no Sym is made out
 * of order), its values are shared */
static int attr_memo_hit(LexState *ls, const char *t, size_t n, uint64_t h, union IR_YYSTYPE *lv)
{
	AttrMemo *am = attr_memo_set(ls->b, h);
	if (!am->text || am->hash != h || am->n != n || memcmp(am->text, t, n) != 0) {
		am++;
		if (!am->text || am->hash != h || am->n != n || memcmp(am->text, t, n) != 0)
			return 0;
	}
	am->used = ++ls->b->amclock;
	Groups *g = b_groups(ls->b);
	for (uint32_t i = 0; i < am->nattrs; i++)
		vec_push(&g->attrs[0], am->attrs[i]);
	lv->gr = g;
	return 1;
}

/* Right after its keyword (at t, the scanner's NUL not there), a group met
 * before is found without the scanner: the text up to the first '}' is a
 * memo's, which the scanner would read as the same ATTRBLOCK token (its
 * pattern ends at the first '}', and no other pattern starting with '{'
 * matches longer: those start "{instance name:" or "{in_strategy:", which
 * lex_attrblock never keeps).  The scanner returns it next (ls->ahead)
 * without its DFA's step per byte of the group's: a node line's group
 * is half its bytes, and it repeats on thousands of lines. */
void lex_attr_ahead(LexState *ls, const char *t)
{
	const char *end = ls->buf + ls->len, *q = t;
	if (q >= end || *q != '{' || ls->depth >= LEX_MAX_DEPTH - 1)
		return;
	/* a '}' past a NL only finds a text no memo holds */
	size_t max = ls->b->amemo_max < (size_t)(end - t) ? ls->b->amemo_max : (size_t)(end - t);
	q = memchr(t, '}', max);
	if (!q)
		return;
	union IR_YYSTYPE v;
	size_t n = (size_t)(q + 1 - t);
	if (!attr_memo_hit(ls, t, n, attr_memo_key(t, n), &v))
		return;
	ls->ahead = v.gr;
	ls->ahead_p = t;
	ls->ahead_n = (uint32_t)(q + 1 - t);
}

int lex_attrblock(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	const char *k = ls->attrkw_end;
	if (!k || k > t || ls->depth >= LEX_MAX_DEPTH - 1)
		return 0;
	while (k < t && (*k == ' ' || *k == '\t' || *k == '\r'))
		k++;
	if (k != t)
		return 0;
	uint64_t h = attr_memo_key(t, n);
	if (attr_memo_hit(ls, t, n, h, lv))
		return 1;
	/* first pass: what the pattern cannot refuse */
	const char *p = t + 1, *e = t + n - 1; /* at '}' */
	while (p < e) {
		int kl = aword_len(p);
		static const char *const kw[] = {"parent", "primitive_attrs", "cnode_attrs", "cnode_primal_attrs",
						 "in_strategy"};
		for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
			if ((size_t)kl == strlen(kw[i]) && memcmp(p, kw[i], (size_t)kl) == 0 &&
			    (i < 4 || p == t + 1))
				return 0;
		p += kl + 2; /* ": " */
		if (*p == '[') {
			p++;
			while (*p != ']')
				p += aword_len(p) + (p[aword_len(p)] == ',' ? 2 : 0);
			p++;
		} else if (*p == '-' || (*p >= '0' && *p <= '9')) {
			int dl = digits_len(p);
			if (dl - (*p == '-') > 18)
				return 0;
			p += dl;
		} else {
			p += aword_len(p);
			if (*p == '(') {
				int dl = digits_len(p + 1);
				if (dl - (p[1] == '-') > 18)
					return 0;
				p += 1 + dl + 1;
			}
		}
		if (*p == ',')
			p += 2;
	}
	/* second pass: the group, as the grammar's actions make it */
	Groups *g = b_groups(ls->b);
	p = t + 1;
	while (p < e) {
		int kl = aword_len(p);
		Tok key = {.s = intern(p, (size_t)kl)};
		p += kl + 2;
		Value v;
		if (*p == '[') {
			VList *l = NULL;
			p++;
			while (*p != ']') {
				int wl = aword_len(p);
				Tok w = {.s = intern(p, (size_t)wl)};
				if (!l)
					l = b_vlist(ls->b);
				b_vpush(l, b_word(&w));
				p += wl;
				if (*p == ',')
					p += 2;
			}
			p++;
			v = b_seq(ls->b, V_LIST, l);
		} else if (*p == '-' || (*p >= '0' && *p <= '9')) {
			int dl = digits_len(p);
			Tok x = {.i = digits18(p + (*p == '-'), (size_t)(dl - (*p == '-')))};
			if (*p == '-')
				x.i = -x.i;
			v = b_int(&x);
			p += dl;
		} else {
			int wl = aword_len(p);
			if (p[wl] == '(') {
				union IR_YYSTYPE x;
				size_t sl = (size_t)(wl + 1 + digits_len(p + wl + 1) + 1);
				lex_scalar(ls, p, sl, &x); /* after ": ": a scalar */
				v = b_scalar(&x.tok);
				p += sl;
			} else {
				Tok w = {.s = intern(p, (size_t)wl)};
				v = b_word(&w);
				p += wl;
			}
		}
		b_attr_push(ls->b, g, &key, &v);
		if (*p == ',')
			p += 2;
	}
	attr_memo_keep(ls->b, h, t, n, g);
	lv->gr = g;
	return 1;
}

/* ------------------------------------------------------------ grammar actions */

/* bison's own messages (only "memory exhausted" reaches here) */
void b_syntax_error(BuildCtx *b, int line, int col, const char *msg)
{
	Loc loc = {(uint32_t)line, (uint32_t)col};
	if (strstr(msg, "memory exhausted"))
		err(b, loc, "input nested too deeply for the parser");
	else
		err(b, loc, "%s", msg);
}

static char closer_of(char open)
{
	return open == '(' ? ')' : open == '[' ? ']' : open == '{' ? '}' : '>';
}

/* a token name as the grammar spells it, without the quotes of an alias */
static const char *tokname(const char *raw, char *buf, size_t n)
{
	size_t l = strlen(raw);
	if (l >= 2 && raw[0] == '"' && raw[l - 1] == '"') {
		snprintf(buf, n, "%.*s", (int)(l - 2), raw + 1);
		return buf;
	}
	return raw;
}

/* "expected 'C' before X", pointing at X, and a note at the bracket it closes */
static void expected_closer(BuildCtx *b, Loc loc, const Bracket *open, const char *before)
{
	err(b, loc, "expected '%c' before %s", closer_of(open->ch), before);
	diag_note_at((Loc){open->line, open->col}, "to match this '%c'", open->ch);
}

/* The innermost bracket of an unclosed bracketed value (UMonad[U, ...):
 * its offset in the text, or -1. */
static long raw_unclosed(const char *p, size_t n)
{
	long st[64];
	int d = 0, deep = 0;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (c == '"') {
			for (i++; i < n && p[i] != '"'; i++)
				if (p[i] == '\\')
					i++;
		} else if (strchr("([{<", c)) {
			if (d < 64)
				st[d++] = (long)i;
			else
				deep++;
		} else if (strchr(")]}>", c)) {
			if (deep)
				deep--;
			else if (d)
				d--;
		}
	}
	return d ? st[d - 1] : -1;
}

void b_syntax_error_at(BuildCtx *b, Loc loc, int cls, const char *got, const char **expected, int nexp)
{
	LexState *ls = &b->ls;
	char gbuf[96], ebuf[96], list[512];
	if (ls->explained)
		return; /* the scanner already said what is wrong with this token */
	const char *g = tokname(got, gbuf, sizeof gbuf);
	/* the innermost open bracket before the unexpected token */
	const Bracket *open = NULL;
	int d = ls->depth > LEX_MAX_DEPTH ? 0 : ls->depth;
	if (ls->last_push)
		open = d >= 2 ? &ls->br[d - 2] : NULL;
	else if (ls->last_pop.ch)
		open = &ls->last_pop;
	else if (d >= 1)
		open = &ls->br[d - 1];
	switch (cls) {
	case SE_BADCHAR: {
		unsigned char c = (unsigned char)ls->badch;
		if (c > 0x20 && c < 0x7f)
			err(b, loc, "stray '%c' in input", c);
		else
			err(b, loc, "stray byte 0x%02x in input", c);
		return;
	}
	case SE_BADSTRING:
		err(b, loc, "unterminated string: no closing '\"' before the end of the line");
		return;
	case SE_TOODEEP:
		err(b, loc, "brackets nested more than %d levels deep", LEX_MAX_DEPTH);
		return;
	case SE_UNTERMINATED: {
		long at = ls->unterm ? raw_unclosed(ls->unterm, ls->untermlen) : -1;
		if (at < 0) {
			err(b, loc, "unclosed bracket before the end of the line");
			return;
		}
		Loc eol = {loc.line, loc.col + ls->untermlen};
		err(b, eol, "expected '%c' before end of line", closer_of(ls->unterm[at]));
		diag_note_at((Loc){loc.line, loc.col + (uint32_t)at}, "to match this '%c'", ls->unterm[at]);
		return;
	}
	case SE_EOL:
		if (open) {
			expected_closer(b, loc, open, "end of line");
			return;
		}
		break;
	case SE_CLOSE:
		if (ls->last_unmatched) {
			if (d >= 1)
				expected_closer(b, loc, &ls->br[d - 1], g);
			else
				err(b, loc, "unmatched %s", g);
			return;
		}
		break;
	case SE_OPEN:
		/* '<' inside '<...>': the first type was not closed */
		if (g[1] == '<' && open && open->ch == '<') {
			expected_closer(b, loc, open, g);
			return;
		}
		break;
	default:
		break;
	}
	if (open) {
		char want[4] = {'\'', closer_of(open->ch), '\'', 0};
		for (int i = 0; i < nexp; i++)
			if (strcmp(expected[i], want) == 0) {
				expected_closer(b, loc, open, g);
				return;
			}
	}
	if (nexp > 5) {
		/* where any value may come (operands, tuples, attribute values) */
		for (int i = 0; i < nexp; i++)
			if (strcmp(tokname(expected[i], ebuf, sizeof ebuf), "integer") == 0) {
				err(b, loc, "expected a value before %s", g);
				return;
			}
	}
	if (nexp < 1 || nexp > 5) {
		err(b, loc, "unexpected %s", g);
		return;
	}
	size_t k = 0;
	list[0] = 0;
	for (int i = 0; i < nexp && k < sizeof list; i++)
		k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i == 0 ? "" : i == nexp - 1 ? " or " : ", ",
				      tokname(expected[i], ebuf, sizeof ebuf));
	err(b, loc, "unexpected %s, expected %s", g, list);
}

/* After a line that failed to parse: keep what it defined known, so that
 * its uses below do not report it again ("undefined node %3" after %3's
 * line had a syntax error), and drop the lines that belonged to it. */
void b_recover(BuildCtx *b)
{
	LexState *ls = &b->ls;
	Loc loc = {ls->line, 1};
	switch (ls->lkind) {
	case LK_NODE:
	case LK_RETURN: {
		flush_node(b);
		b->skip = 1;
		if (ls->lkind == LK_RETURN || ls->llocal < 0)
			break;
		Graph *g = node_graph(b, loc);
		Node *ph = arena_alloc(b->m->arena, sizeof *ph);
		ph->kind = NK_EXTERN;
		ph->g = g;
		ph->local = (int32_t)ls->llocal;
		ph->loc = loc;
		int64_t k = ls->llocal;
		if ((uint64_t)k >= b->locals.n || !b->locals.a[k])
			register_local(b, loc, k, ph);
		break;
	}
	case LK_PARAM:
		if (!find_param(b, b->cur, ls->pnum, ls->psym)) {
			Node *ph = arena_alloc(b->m->arena, sizeof *ph);
			ph->kind = NK_EXTERN;
			ph->g = b->cur;
			ph->local = (int32_t)ls->pnum;
			ph->name = ls->psym;
			ph->loc = loc;
			ptab_insert(b, ph);
			vec_push(&b->phparams, ph);
		}
		break;
	case LK_SUBGRAPH:
		if (ls->lname[0] && !(b->cur && b->in_braces)) {
			Tok t = {0};
			t.s = intern_cstr(ls->lname);
			b_sg_open(b, loc, &t, NULL, NULL);
		}
		break;
	default:
		break;
	}
}

int b_abort(BuildCtx *b)
{
	(void)b;
	return diag_too_many();
}

void b_entry(BuildCtx *b, Loc loc, Tok *t)
{
	b->entry_loc = loc;
	b->m->entry = t->s;
	b->m->has_header = 1;
	if (b->pend.n && !b->m->nlead && !b->m->graphs.n) {
		b->m->lead = freeze(b, b->pend.a, b->pend.n);
		b->m->nlead = b->pend.n;
		b->pend.n = 0;
	}
	b->attr_target = 0;
}

void b_header_attrs(BuildCtx *b)
{
	b->m->has_attrs = 1;
	b->attr_target = 1;
}

void b_attrline(BuildCtx *b, Tok *t)
{
	Value v = {0};
	v.kind = V_RAW;
	v.text = t->s2;
	AttrList *l;
	if (b->attr_target == 1)
		l = &b->m->attrs;
	else
		l = &pending_graph(b)->attrs;
	Attr *na = arena_alloc(b->m->arena, (l->n + 1) * sizeof(Attr));
	if (l->n)
		memcpy(na, l->a, l->n * sizeof(Attr));
	na[l->n].key = t->s;
	na[l->n].val = v;
	l->a = na;
	l->n++;
}

static Node *new_param(BuildCtx *b, Graph *g, Tok *t, Loc loc)
{
	Node *n = ir_node_new(b->m, g, NK_PARAM);
	n->local = (int32_t)t->i;
	n->name = t->s;
	n->loc = loc;
	return n;
}

/* Parameters are found by (graph, name, number) through a hash table: a
 * training graph reads tens of thousands of weights. */
static uint32_t phash(const Graph *g, int64_t num, Sym name)
{
	uint64_t h = ((uint64_t)name * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)num * 0xc2b2ae3d27d4eb4fULL) ^
		     ((uint64_t)(uintptr_t)g * 0x165667b19e3779f9ULL);
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (uint32_t)h ? (uint32_t)h : 1; /* a tag of 0 is an empty slot */
}

static void ptab_insert(BuildCtx *b, Node *p)
{
	if ((b->pcount + 1) * 2 > b->pmask) {
		uint32_t ncap = b->pmask ? (b->pmask + 1) * 2 : 1024;
		Node **nt = xcalloc(ncap, sizeof *nt);
		uint32_t *ng = xcalloc(ncap, sizeof *ng);
		for (uint32_t i = 0; b->ptab && i <= b->pmask; i++) {
			if (!b->ptag[i])
				continue;
			uint32_t j = b->ptag[i] & (ncap - 1);
			while (ng[j])
				j = (j + 1) & (ncap - 1);
			nt[j] = b->ptab[i];
			ng[j] = b->ptag[i];
		}
		free(b->ptab);
		free(b->ptag);
		b->ptab = nt;
		b->ptag = ng;
		b->pmask = ncap - 1;
	}
	uint32_t h = phash(p->g, p->local, p->name), j = h & b->pmask;
	while (b->ptag[j])
		j = (j + 1) & b->pmask;
	b->ptab[j] = p;
	b->ptag[j] = h;
	b->pcount++;
	/* numbers as a dump gives them (1, 2, ... in "# Params:"): no array
	 * much longer than the parameters are many */
	uint32_t k = (uint32_t)p->local;
	if (p->local < 0)
		return;
	if (k >= 2 * b->pcount + 4096) {
		if (k < b->pgap)
			b->pgap = k;
		return;
	}
	if (k >= b->pnum.n) {
		vec_grow(&b->pnum, k + 1 - b->pnum.n);
		memset(b->pnum.a + b->pnum.n, 0, (k + 1 - b->pnum.n) * sizeof(Node *));
		b->pnum.n = k + 1;
	}
	if (!b->pnum.a[k])
		b->pnum.a[k] = p;
}

/* The parameter numbered num, when it is the first one numbered so and
 * has that graph and name: a reference's parameter without a probe of
 * ptab (a cache miss or two), and the nodes and names it reads were made
 * in the order the references come in.  Keys (graph, number, name) are
 * unique in ptab (b_paramdef and the stand-ins look before they insert),
 * so this is the node ptab_find finds. */
static Node *pnum_find(const BuildCtx *b, int64_t num)
{
	return num >= 0 && num < (int64_t)b->pnum.n ? b->pnum.a[num] : NULL;
}

static Node *ptab_find(BuildCtx *b, const Graph *g, int64_t num, Sym name)
{
	if (!b->ptab)
		return NULL;
	Node *first = pnum_find(b, num);
	if (first && first->g == g && first->local == num && first->name == name)
		return first;
	if (!first && num >= 0 && num < (int64_t)b->pnum.n && num < (int64_t)b->pgap)
		return NULL; /* no parameter has that number (a new one's line) */
	uint32_t h = phash(g, num, name);
	/* the tags alone until one matches: half the bytes of the
	 * slots' pointers, and no trip to ptab for a probe that misses */
	for (uint32_t j = h & b->pmask; b->ptag[j]; j = (j + 1) & b->pmask) {
		if (b->ptag[j] != h)
			continue;
		Node *q = b->ptab[j];
		if (q->g == g && q->local == num && q->name == name)
			return q;
	}
	return NULL;
}

static Node *find_param(BuildCtx *b, Graph *g, int64_t num, Sym name)
{
	Node *p = g ? ptab_find(b, g, num, name) : NULL;
	if (!p) /* header parameters (graph not known yet) */
		p = ptab_find(b, NULL, num, name);
	if (!p) {
		Graph *e = ir_entry(b->m);
		if (e && e != g)
			p = ptab_find(b, e, num, name);
	}
	return p;
}

void b_paramdef(BuildCtx *b, Loc loc, Tok *t, Abs *type, VList *tail)
{
	Graph *g = b->cur; /* a parameter line inside a graph belongs to it */
	Node *old = find_param(b, g, t->i, t->s);
	if (old) {
		if (old->kind == NK_PARAM)
			err(b, loc, "duplicate parameter (first defined on line %u)", old->loc.line);
		return;
	}
	Node *n = new_param(b, g, t, loc);
	if (type) {
		n->out = *type;
		vec_push(&b->afree, type);
	}
	if (tail) {
		n->nargs = tail->v.n;
		n->args = arena_dup(b->m->arena, tail->v.a, tail->v.n * sizeof(Value));
		for (uint32_t i = 0; i < tail->v.n; i++)
			if (value_is_word(&tail->v.a[i], "has_default"))
				n->has_default = 1;
		vrelease(b, tail);
	}
	if (g)
		vec_push(&g->params, n);
	else
		vec_push(&b->hparams, n);
	ptab_insert(b, n);
}

void b_indirect(BuildCtx *b, Tok *t)
{
	pending_graph(b)->indirect = (int32_t)t->i;
}

void b_sg_attr(BuildCtx *b)
{
	Graph *g = pending_graph(b);
	g->has_attr_block = 1;
	b->attr_target = 2;
	b->in_order = 0;
}

void b_sg_instance(BuildCtx *b, Tok *t)
{
	Graph *g = pending_graph(b);
	g->has_instance = 1;
	g->name = t->s;
	g->instance_ptr = t->s2;
	b->attr_target = 0;
}

void b_sg_symeng(BuildCtx *b, Tok *t)
{
	const char *p = t->p + strlen("subgraph symbol engine:");
	const char *e = t->p + t->n;
	if (p < e && *p == ' ')
		p++;
	pending_graph(b)->symbol_engine = intern(p, (size_t)(e - p));
}

void b_sg_parameters(BuildCtx *b, VList *types)
{
	pending_graph(b);
	b->param_types = types;
	if (!types)
		b->param_types = b_vlist(b);
}

Value b_sgparam(BuildCtx *b, Tok *t)
{
	(void)b;
	Value v = {0};
	v.kind = V_WORD;
	v.text = t->s;
	v.u.i = t->i;
	return v;
}

void b_sg_open(BuildCtx *b, Loc loc, Tok *name, Tok *parent, VList *params)
{
	flush_node(b);
	if (!b->fragment && b->implicit_g && !b->blocks && b->implicit_g->nodes.n)
		diag_error_at(
		    b->implicit_g->nodes.a[0]->loc,
		    "node line outside any subgraph (a dump's nodes go between 'subgraph @NAME(...) {' and '}')");
	b->blocks++;
	if (b->cur && b->in_braces) {
		err(b, loc, "starts inside subgraph '@%s', which is missing its '}'", sym_str(b->cur->name));
		diag_note_at(b->cur->loc, "subgraph '@%s' starts here", sym_str(b->cur->name));
	}
	Graph *g = b->pending;
	b->pending = NULL;
	if (!g) {
		g = ir_graph_new(b->m, name->s);
		if (b->pend.n) {
			g->lead = freeze(b, b->pend.a, b->pend.n);
			g->nlead = b->pend.n;
			b->pend.n = 0;
		}
	} else if (g->name && g->name != name->s) {
		err(b, loc, "subgraph '@%s' follows the header of '%s'", sym_str(name->s), sym_str(g->name));
	}
	g->name = name->s;
	g->loc = loc;
	if (parent)
		g->parent = parent->s;
	if (!b->m->entry)
		b->m->entry = g->name;
	int other_entry = 0;
	for (uint32_t i = 0; i < b->m->graphs.n; i++)
		if (b->m->graphs.a[i] != g && b->m->graphs.a[i]->is_entry)
			other_entry = 1;
	if (g->name == b->m->entry && !other_entry)
		attach_header_params(b, g);
	if (params) {
		for (uint32_t i = 0; i < params->v.n; i++) {
			Tok t = {0};
			t.s = params->v.a[i].text;
			t.i = params->v.a[i].u.i;
			Node *p = find_param(b, g, t.i, t.s);
			if (p && p->g == g)
				continue; /* header parameter listed again */
			p = new_param(b, g, &t, loc);
			if (b->param_types && i < b->param_types->abs.n)
				p->out = *b->param_types->abs.a[i];
			vec_push(&g->params, p);
			ptab_insert(b, p);
		}
	}
	vrelease(b, b->param_types);
	vrelease(b, params);
	b->param_types = NULL;
	b->cur = g;
	b->in_braces = 1;
	b->implicit = 0;
	b->locals.n = 0;
	b->in_order = 0;
	b->attr_target = 0;
	if (b->pend.n) { /* comments right before the graph line */
		const char **old = g->pre;
		uint32_t no = g->npre;
		const char **np = arena_alloc(b->m->arena, (no + b->pend.n) * sizeof *np);
		if (no)
			memcpy(np, old, no * sizeof *np);
		memcpy(np + no, b->pend.a, b->pend.n * sizeof *np);
		g->pre = np;
		g->npre = no + b->pend.n;
		b->pend.n = 0;
	}
}

void b_sg_close(BuildCtx *b, Loc loc)
{
	flush_node(b);
	if (!b->cur || !b->in_braces) {
		err(b, loc, "'}' without an open subgraph");
		return;
	}
	if (b->pend.n) { /* comments after the last node: keep them inside */
		b->cur->order = NULL;
	}
	b->closed = b->cur;
	b->cur = NULL;
	b->in_braces = 0;
	b->locals.n = 0;
}

void b_order(BuildCtx *b)
{
	flush_node(b);
	Graph *g = b->cur ? b->cur : b->closed;
	if (!g) {
		b_comment(b, &(Tok){.p = "# Order:", .n = 8});
		return;
	}
	g->has_order = 1;
	b->in_order = 1;
}

static void add_line(LineVec *v, const char *s)
{
	vec_push(v, s);
}

void b_comment(BuildCtx *b, Tok *t)
{
	const char *s = adup(b, t->p, t->n);
	if (b->in_order) {
		Graph *g = b->closed;
		if (g) {
			const char **np = arena_alloc(b->m->arena, (g->norder + 1) * sizeof *np);
			if (g->norder)
				memcpy(np, g->order, g->norder * sizeof *np);
			np[g->norder++] = s;
			g->order = np;
			return;
		}
	}
	if (b->last) {
		add_line(&b->nodelines, s);
		b->commented = 1;
		return;
	}
	if (b->pending && !b->cur) {
		Graph *g = b->pending;
		const char **np = arena_alloc(b->m->arena, (g->npre + 1) * sizeof *np);
		if (g->npre)
			memcpy(np, g->pre, g->npre * sizeof *np);
		np[g->npre++] = s;
		g->pre = np;
		return;
	}
	add_line(&b->pend, s);
}

void b_scope(BuildCtx *b, Loc loc, Tok *t)
{
	(void)loc;
	/* the scope text, as lex_hash_line found it (a SCOPE_LINE is reduced
	 * with its NL, before the scanner reads on: the text is still there) */
	Sym s = intern_hashed(t->p + (t->i >> 32), (uint32_t)t->i, t->s2);
	if (b->last && !b->last->scope_kind && b->nodelines.n == 0) {
		b->last->scope_kind = (uint8_t)t->k;
		b->last->scope = s;
		b->commented = 1;
		return;
	}
	b_comment(b, t);
}

void b_cycle(BuildCtx *b, Tok *t)
{
	flush_node(b);
	b->cycle = t->s;
}

void b_textline(BuildCtx *b, Tok *t)
{
	flush_node(b);
	b->in_order = 0;
	add_line(&b->pend, adup(b, t->p, t->n));
}

/* group i of g as an arena list */
static AttrList group_attrs(BuildCtx *b, const Groups *g, int i)
{
	AttrList l = {NULL, g->attrs[i].n};
	if (l.n)
		l.a = arena_dup(b->m->arena, g->attrs[i].a, l.n * sizeof(Attr));
	return l;
}

/* Group 0 (the primitive attributes) as an arena list: the one an earlier
 * node with equal attributes has when the cache holds it.  A layer's nodes
 * repeat their attribute groups (a list per node was 8.5 MB on a 4096-layer
 * graph); nobody writes into a node's list in place (ir_attr_set makes a
 * new one; passes already share lists between copied nodes). */
static int attr_same(const Attr *a, const Attr *b, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (a[i].key != b[i].key || memcmp(&a[i].val, &b[i].val, sizeof a[i].val) != 0)
			return 0;
	return 1;
}

static AttrList pattrs_shared(BuildCtx *b, const Groups *g)
{
	const Attr *a = g->attrs[0].a;
	uint32_t n = g->attrs[0].n;
	if (!n)
		return (AttrList){NULL, 0};
	uint64_t h = n;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t w[2];
		memcpy(w, &a[i].val, sizeof w);
		h = (h ^ a[i].key) * 0x9E3779B97F4A7C15ull;
		h = (h ^ w[0]) * 0xff51afd7ed558ccdull;
		h = (h ^ w[1]) * 0x9E3779B97F4A7C15ull;
		h ^= h >> 29;
	}
	uint32_t j = (uint32_t)(h % PATTRS_CACHE);
	if (b->pattrs_cache[j].a && b->pattrs_cache[j].h == h && b->pattrs_cache[j].n == n &&
	    attr_same(b->pattrs_cache[j].a, a, n))
		return (AttrList){b->pattrs_cache[j].a, n};
	AttrList l = group_attrs(b, g, 0);
	b->pattrs_cache[j].h = h;
	b->pattrs_cache[j].n = n;
	b->pattrs_cache[j].a = l.a;
	return l;
}

static void apply_groups(BuildCtx *b, Node *n, Groups *g)
{
	if (!g)
		return;
	n->instance = g->instance;
	n->has_pattrs = g->has[0];
	n->pattrs = pattrs_shared(b, g);
	n->has_strat = g->has[3];
	ir_node_set_strat(b->m, n, group_attrs(b, g, 3));
	/* cnode_attrs and cnode_primal_attrs are rare: a NodeExt only for them */
	if (g->has[1] || g->attrs[1].n || g->has[2] || g->attrs[2].n) {
		NodeExt *x = ir_node_ext_mut(b->m, n);
		x->has_cattrs = g->has[1];
		x->cattrs = group_attrs(b, g, 1);
		x->has_primal = g->has[2];
		x->primal = group_attrs(b, g, 2);
	}
	grelease(b, g);
	/* pipeline stage written as a node attribute */
	const NodeExt *xr = ir_node_ext(n);
	Value *st = ir_attr_get(&xr->cattrs, "stage");
	if (!st)
		st = ir_attr_get(&xr->primal, "stage");
	if (!st)
		st = ir_attr_get(&xr->cattrs, "pipeline_stage");
	int64_t s;
	if (!st)
		return;
	if (st->kind != V_INT || !value_get_int(st, &s)) {
		err(b, n->loc, "the stage attribute must be an integer");
		return;
	}
	if (s < 0 || s >= PIPELINE_MAX_STAGES) {
		err(b, n->loc, "stage %lld is out of range (pipeline stages are numbered 0 to %d)", (long long)s,
		    PIPELINE_MAX_STAGES - 1);
		return;
	}
	n->stage = (int32_t)s;
}

static void register_local(BuildCtx *b, Loc loc, int64_t k, Node *n)
{
	if (k < 0)
		return;
	if ((uint64_t)k >= b->locals.n) {
		uint32_t old = b->locals.n;
		vec_grow(&b->locals, (uint32_t)k + 1 - old);
		memset(b->locals.a + old, 0, ((size_t)k + 1 - old) * sizeof(Node *));
		b->locals.n = (uint32_t)k + 1;
	}
	if (b->locals.a[k]) {
		Node *old = b->locals.a[k];
		if (old->kind != NK_EXTERN) {
			char lab[128];
			node_label(lab, sizeof lab, old);
			err(b, loc, "duplicate node number %%%lld: %s is already defined on line %u", (long long)k, lab,
			    old->loc.line);
		}
		return;
	}
	b->locals.a[k] = n;
}

static void set_args(BuildCtx *b, Node *n, VList *args)
{
	if (!args)
		return;
	n->nargs = args->v.n;
	n->args = arena_dup(b->m->arena, args->v.a, args->v.n * sizeof(Value));
	vrelease(b, args);
}

void b_node(BuildCtx *b, Loc loc, Tok *def, Value *callee, VList *args, Groups *g)
{
	flush_node(b);
	b->in_order = 0;
	b->skip = 0;
	Graph *gr = node_graph(b, loc);
	Node *n = ir_node_new(b->m, gr, NK_CNODE);
	n->loc = loc;
	n->local = (int32_t)def->i;
	n->name = def->s;
	if (b->cycle)
		ir_node_ext_mut(b->m, n)->cycle_mark = b->cycle;
	b->cycle = 0;
	switch (callee->kind) {
	case V_WORD: {
		const char *s = sym_str(callee->text);
		n->callee_kind = CK_PRIM;
		if (strncmp(s, "PrimFunc_", 9) == 0) {
			n->primfunc = 1;
			n->prim = intern_cstr(s + 9);
		} else {
			n->prim = callee->text;
		}
		n->op = (uint16_t)op_lookup(sym_str(n->prim), sym_len(n->prim));
		break;
	}
	case V_GRAPH:
		n->callee_kind = CK_CALL;
		ir_node_ext_mut(b->m, n)->callee = *callee;
		break;
	case V_EXTERN:
		n->callee_kind = CK_EXTERN;
		ir_node_ext_mut(b->m, n)->callee = *callee;
		break;
	default:
		n->callee_kind = CK_NODE;
		ir_node_ext_mut(b->m, n)->callee = *callee;
		break;
	}
	if (b->funcunion)
		ir_node_ext_mut(b->m, n)->funcunion = b->funcunion;
	b->funcunion = 0;
	set_args(b, n, args);
	apply_groups(b, n, g);
	register_local(b, loc, def->i, n);
	vec_push(&gr->nodes, n);
	b->last = n;
}

void b_return(BuildCtx *b, Loc loc, VList *args, Groups *g)
{
	flush_node(b);
	b->in_order = 0;
	b->skip = 0;
	Graph *gr = node_graph(b, loc);
	Node *n = ir_node_new(b->m, gr, NK_RETURN);
	n->loc = loc;
	n->callee_kind = CK_PRIM;
	n->prim = intern_cstr("Return");
	if (b->cycle)
		ir_node_ext_mut(b->m, n)->cycle_mark = b->cycle;
	b->cycle = 0;
	set_args(b, n, args);
	apply_groups(b, n, g);
	vec_push(&gr->nodes, n);
	b->last = n;
}

static void typeline(BuildCtx *b, Loc loc, Loc eol, VList *ins, Abs *out)
{
	Node *n = b->last;
	if (b->skip)
		return; /* the node line above failed to parse: already reported */
	if (!n) {
		err(b, loc, "type line without a node above it");
		return;
	}
	if (!n->has_type_line && b->commented) {
		/* real dumps print the type line right under its node; after a
		 * comment it would be taken for a further (kernel) type line and
		 * the node would lose its shapes */
		err(b, loc, "it must come right under the node line, before any '#' line");
		return;
	}
	if (n->has_type_line || b->nodelines.n) {
		/* a further line (symbolic shapes, kernel info): keep its text */
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		if (!f)
			return;
		fputs(": (", f);
		for (uint32_t i = 0; ins && i < ins->abs.n; i++) {
			if (i)
				fputs(", ", f);
			ir_print_abs(f, ins->abs.a[i]);
		}
		fputc(')', f);
		if (out) {
			fputs(" -> (", f);
			ir_print_abs(f, out);
			fputc(')', f);
		}
		fclose(f);
		add_line(&b->xlines, adup(b, buf, len));
		free(buf);
		return;
	}
	n->has_type_line = 1;
	ir_node_set_tloc(b->m, n, loc);
	if (ins && ins->abs.n) {
		n->nin_types = ins->abs.n;
		n->in_types = arena_alloc(b->m->arena, ins->abs.n * sizeof(Abs));
		for (uint32_t i = 0; i < ins->abs.n; i++)
			n->in_types[i] = *ins->abs.a[i];
	}
	if (n->kind == NK_RETURN) {
		if (out)
			err(b, loc, "a Return type line lists only the returned value's type: '      : (<TYPE>)', no '->'");
		if (n->nin_types == 1) {
			n->out = n->in_types[0];
			n->nin_types = 0;
			n->in_types = NULL;
		} else if (n->nin_types > 1) {
			err(b, loc, "%u types listed, but Return returns one value", n->nin_types);
		}
		return;
	}
	if (!out) {
		err(b, eol, "expected '-> (<OUTPUT TYPE>)' before end of line");
		return;
	}
	n->out = *out;
}

/* A memo slot's key: the length and five words spread over the line, not
 * every byte (the whole line was 2% of parse+print in std_hash_bytes); the
 * memcmp after it reads them all anyway, and a line that shares the
 * sampled words with another only shares its set. */
static uint64_t type_memo_key(const char *t, size_t n)
{
	uint64_t h = n * 0x9e3779b97f4a7c15ULL;
	if (n < 8) {
		for (size_t i = 0; i < n; i++)
			h = (h ^ (unsigned char)t[i]) * 0xff51afd7ed558ccdULL;
	} else {
		for (size_t i = 0; i <= 4; i++) {
			uint64_t w;
			memcpy(&w, t + (n - 8) * i / 4, 8);
			h = (h ^ w) * 0xff51afd7ed558ccdULL;
			h ^= h >> 32;
		}
	}
	return h ^ h >> 29;
}

/* A Load's type line names its parameter ("ref_key=NAME"), so no two are
 * alike: 37,000 of the 4096-layer file's type lines were read token by
 * token, eleven tokens each.  Without the values (the scanner's
 * "ref_key=" [^,>\n]* is opaque to the grammar, so the rest of the line
 * reads the same whatever they are) they are a few texts, which the memo
 * holds; the values met are put back (b_typeline_memo).  The text
 * without them goes to ls->tl_key, their places to tl_ref: 1 when the
 * line has one to four and fits. */
static int type_line_unref(LexState *ls, const char *t, size_t n)
{
	ls->tl_keyok = 0;
	ls->tl_nrefs = 0;
	const char *p = t, *e = t + n, *q;
	char *o = ls->tl_key;
	if (n > sizeof ls->tl_key)
		return 0;
	while ((q = memchr(p, 'r', (size_t)(e - p))) != NULL) {
		if ((size_t)(e - q) < 8 || memcmp(q, "ref_key=", 8) != 0) {
			q++;
			memcpy(o, p, (size_t)(q - p));
			o += q - p;
			p = q;
			continue;
		}
		if (ls->tl_nrefs == LEX_TL_REFS)
			return 0;
		q += 8;
		memcpy(o, p, (size_t)(q - p));
		o += q - p;
		p = q;
		while (q < e && *q != ',' && *q != '>' && *q != '\n')
			q++;
		ls->tl_ref[ls->tl_nrefs] = p;
		ls->tl_refn[ls->tl_nrefs++] = (uint32_t)(q - p);
		p = q;
	}
	memcpy(o, p, (size_t)(e - p));
	o += e - p;
	if (!ls->tl_nrefs)
		return 0;
	ls->tl_keyn = (uint32_t)(o - ls->tl_key);
	ls->tl_keyhash = type_memo_key(ls->tl_key, ls->tl_keyn);
	ls->tl_keyok = 1;
	return 1;
}

int lex_typeline(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv)
{
	ls->tl_text = NULL;
	/* a NL before "{in_strategy:" is no token (the 2022 continuation) */
	const char *end = ls->buf + ls->len, *q = t + n + 1;
	while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
		q++;
	if ((size_t)(end - q) >= 13 && memcmp(q, "{in_strategy:", 13) == 0)
		return 0;
	uint64_t h = type_memo_key(t, n);
	uint32_t set = (uint32_t)(h % (TYPE_MEMO / 2)) * 2;
	for (uint32_t w = set; w < set + 2; w++) {
		TypeMemo *tm = &ls->b->tymemo[w];
		if (tm->mem && !tm->nrefs && tm->hash == h && tm->n == n && memcmp(tm->text, t, n) == 0) {
			tm->used = ++ls->b->tyclock;
			lv->tok.i = w;
			return 1;
		}
	}
	if (type_line_unref(ls, t, n)) {
		set = (uint32_t)(ls->tl_keyhash % (TYPE_MEMO / 2)) * 2;
		for (uint32_t w = set; w < set + 2; w++) {
			TypeMemo *tm = &ls->b->tymemo[w];
			if (tm->mem && tm->nrefs == ls->tl_nrefs && tm->hash == ls->tl_keyhash && tm->n == ls->tl_keyn &&
			    memcmp(tm->text, ls->tl_key, ls->tl_keyn) == 0) {
				tm->used = ++ls->b->tyclock;
				lv->tok.i = w;
				return 1;
			}
		}
	}
	ls->tl_text = t;
	ls->tl_n = (uint32_t)n;
	ls->tl_line = ls->line;
	ls->tl_hash = h;
	ls->tl_nerr = diag_errors();
	return 0;
}

/* keep the type line just read, when lex_typeline noted it and it parsed
 * without an error up to its NL (the last token the scanner read) */
static void type_memo_keep(BuildCtx *b, Loc loc, VList *ins, Abs *out)
{
	LexState *ls = &b->ls;
	const char *t = ls->tl_text;
	ls->tl_text = NULL;
	uint32_t nin = ins ? ins->abs.n : 0;
	if (!t || ls->tl_line != loc.line || ls->nl_after != t + ls->tl_n + 1 || diag_errors() != ls->tl_nerr ||
	    nin + (out != NULL) > sizeof b->tymemo[0].abs / sizeof(Abs))
		return;
	/* the abstracts with a ref_key (and nothing else in an AbsExt) must
	 * be those of the values type_line_unref found, in order */
	uint32_t nabs = nin + (out != NULL), nref = 0;
	uint16_t refmask = 0;
	for (uint32_t i = 0; i < nabs; i++) {
		const Abs *a = i < nin ? ins->abs.a[i] : out;
		if (!a->xi)
			continue;
		const AbsExt *x = abs_ext(a);
		if (!ls->tl_keyok || nref == ls->tl_nrefs || !x || x->nextras || !x->ref_key)
			return;
		const char *r = ls->tl_ref[nref];
		uint32_t rn = ls->tl_refn[nref], c = x->ref_colon;
		if (rn != c + sym_len(x->ref_key) || (c && *r != ':') || memcmp(r + c, sym_str(x->ref_key), rn - c) != 0)
			return;
		refmask |= (uint16_t)(1u << i);
		nref++;
	}
	if (nref && nref != ls->tl_nrefs)
		return;
	const char *text = nref ? ls->tl_key : t;
	uint32_t tn = nref ? ls->tl_keyn : ls->tl_n;
	uint64_t th = nref ? ls->tl_keyhash : ls->tl_hash;
	size_t k = tn;
	TypeMemo *tm = &b->tymemo[(th % (TYPE_MEMO / 2)) * 2];
	if (tm[1].used < tm[0].used)
		tm++;
	free(tm->mem);
	tm->mem = xmalloc(k);
	/* the shapes' arrays are the module's (the parser's), never written
	 * once parsed: the nodes of this line share them (a copy per node was
	 * 8.6 MB on a 4096-layer graph) */
	for (uint32_t i = 0; i < nin; i++) {
		tm->abs[i] = *ins->abs.a[i];
		tm->abs[i].xi = 0;
	}
	if (out) {
		tm->abs[nin] = *out;
		tm->abs[nin].xi = 0;
	}
	memcpy(tm->mem, text, tn);
	tm->text = tm->mem;
	tm->n = tn;
	tm->hash = th;
	tm->nabs = nabs;
	tm->has_out = out != NULL;
	tm->nrefs = (uint8_t)nref;
	tm->refmask = refmask;
	tm->used = ++b->tyclock;
}

static Abs *abs_take(BuildCtx *b);

void b_typeline_memo(BuildCtx *b, Loc loc, Loc eol, Tok *t)
{
	const TypeMemo *tm = &b->tymemo[t->i];
	uint32_t nin = tm->nabs - tm->has_out;
	VList *ins = nin ? b_vlist(b) : NULL;
	Abs *out = NULL;
	uint32_t r = 0;
	for (uint32_t i = 0; i < tm->nabs; i++) {
		Abs *a = abs_take(b);
		*a = tm->abs[i];
		if (tm->refmask >> i & 1) {
			/* what b_refkey and abstract_make make of the value */
			Tok rk = {.p = b->ls.tl_ref[r], .n = b->ls.tl_refn[r]};
			r++;
			Sym v = b_refkey(&rk).text, ref = v;
			const char *k = sym_str(v);
			if (*k == ':')
				ref = intern_cstr(k + 1);
			a->xi = abs_ext_intern(ref, *k == ':', NULL, 0);
		}
		if (i < nin)
			b_apush(b, ins, a);
		else
			out = a;
	}
	b_typeline(b, loc, eol, ins, out);
}

void b_typeline(BuildCtx *b, Loc loc, Loc eol, VList *ins, Abs *out)
{
	type_memo_keep(b, loc, ins, out);
	typeline(b, loc, eol, ins, out);
	vrelease(b, ins);
	if (out)
		vec_push(&b->afree, out);
}

Value b_callee_prim(BuildCtx *b, Tok *t)
{
	(void)b;
	Value v = {0};
	v.kind = V_WORD;
	v.text = t->s;
	return v;
}

Value b_callee_call(BuildCtx *b, Loc loc, Tok *kw, Tok *g)
{
	Value v = {0};
	if (strcmp(sym_str(kw->s), "call") != 0)
		err(b, loc, "expected 'call @graph' but found '%s @...'", sym_str(kw->s));
	v.kind = V_GRAPH;
	v.text = g->s;
	return v;
}

static Value extern_value(const char *p, size_t n)
{
	Value v = {0};
	v.kind = V_EXTERN;
	v.text = intern(p, n);
	return v;
}

Value b_ref_local(BuildCtx *b, Loc loc, Tok *t)
{
	int64_t k = t->i;
	/* t->p is "%k" as written (k may not fit in an int64) */
	if (b->cur && k >= 0 && (uint64_t)k < b->locals.n && b->locals.a[k]) {
		if (b->locals.a[k]->kind == NK_EXTERN) /* its line failed to parse */
			return extern_value(t->p, t->n);
		return value_node(b->locals.a[k]);
	}
	if (b->fragment)
		return extern_value(t->p, t->n);
	if (b->ls.lkind == LK_NODE && b->ls.llocal == k)
		err(b, loc, "%.*s uses itself (operands must be defined above their use)", (int)t->n, t->p);
	else
		err(b, loc, "undefined node %.*s (operands must be defined above their use)", (int)t->n, t->p);
	return extern_value(t->p, t->n);
}

Value b_ref_param(BuildCtx *b, Loc loc, Tok *t)
{
	Node *p = find_param(b, b->cur, t->i, t->s);
	if (p && p->kind == NK_PARAM)
		return value_node(p);
	if (!p && !b->fragment)
		err(b, loc, "undefined parameter '%.*s'", (int)t->n, t->p);
	return extern_value(t->p, t->n);
}

Value b_ref_foreign(BuildCtx *b, Loc loc, Tok *t)
{
	/* resolved at the end of the parse, when every graph is known */
	Value v = extern_value(t->p, t->n);
	v.u.i = ((int64_t)loc.line << 32) | loc.col;
	b->nforeign++;
	return v;
}

Value b_ref_graph(BuildCtx *b, Tok *t)
{
	(void)b;
	Value v = {0};
	v.kind = V_GRAPH;
	v.text = t->s;
	return v;
}

void b_funcunion(BuildCtx *b, Tok *t)
{
	b->funcunion = intern(t->p, t->n);
}

Groups *b_groups(BuildCtx *b)
{
	if (b->gfree.n)
		return b->gfree.a[--b->gfree.n];
	Groups *g = xcalloc(1, sizeof *g);
	vec_push(&b->groups, g);
	return g;
}

void b_group_instance(BuildCtx *b, Groups *g, Tok *t)
{
	(void)b;
	g->instance = t->s;
}

void b_group_merge(BuildCtx *b, Groups *g, Groups *attrs, int which)
{
	g->has[which] = 1;
	for (uint32_t i = 0; i < attrs->attrs[0].n; i++)
		vec_push(&g->attrs[which], attrs->attrs[0].a[i]);
	grelease(b, attrs);
}

void b_group_strategy(BuildCtx *b, Groups *g, Value *first, Groups *rest)
{
	(void)b;
	g->has[3] = 1;
	Attr a = {intern_cstr("in_strategy"), *first};
	vec_push(&g->attrs[3], a);
	for (uint32_t i = 0; i < rest->attrs[0].n; i++)
		vec_push(&g->attrs[3], rest->attrs[0].a[i]);
	grelease(b, rest);
}

/* move the strategy group's attributes into slot 0 (a plain attribute list) */
void b_group_flatten(Groups *g)
{
	for (uint32_t i = 0; i < g->attrs[3].n; i++)
		vec_push(&g->attrs[0], g->attrs[3].a[i]);
	g->attrs[3].n = 0;
	g->has[3] = 0;
}

void b_attr_push(BuildCtx *b, Groups *g, Tok *key, Value *v)
{
	(void)b;
	Attr a = {key->s, *v};
	vec_push(&g->attrs[0], a);
}

Value b_int(Tok *t)
{
	return value_int(t->i, NT_BARE);
}

Value b_scalar(Tok *t)
{
	return t->k < 0 ? value_bool(t->i != 0) : value_int(t->i, (NumType)t->k);
}

/* the tuple '(' int_list ')' would have made */
Value b_shape(BuildCtx *b, Tok *t)
{
	Value e[MAX_RANK + 1];
	VList *l = NULL;
	uint32_t k = 0;
	for (const char *p = t->p + 1; *p != ')';) {
		int neg = *p == '-';
		size_t nd = strspn(p + neg, "0123456789");
		int64_t v = digits18(p + neg, nd);
		Value x = value_int(neg ? -v : v, NT_BARE);
		if (!l && k < MAX_RANK + 1) {
			e[k++] = x;
		} else {
			if (!l) {
				l = b_vlist(b);
				for (uint32_t i = 0; i < k; i++)
					b_vpush(l, e[i]);
			}
			b_vpush(l, x);
		}
		p += neg + nd;
		if (*p == ',')
			p += 2;
	}
	if (l)
		return b_seq(b, V_TUPLE, l);
	Value v = {0};
	v.kind = V_TUPLE;
	v.n = k;
	v.u.elems = arena_dup(b->m->arena, e, k * sizeof(Value));
	return v;
}

Value b_float(Tok *t, NumType nt)
{
	Value v = {0};
	v.kind = V_FLOAT;
	v.numtype = (uint8_t)nt;
	v.text = intern(t->p, t->n);
	v.u.f = strtod(sym_str(v.text), NULL);
	return v;
}

Value b_string(Tok *t)
{
	Value v = {0};
	v.kind = V_STR;
	v.text = t->s;
	return v;
}

Value b_word(Tok *t)
{
	Value v = {0};
	v.kind = V_WORD;
	v.text = t->s;
	return v;
}

Value b_raw(Tok *t)
{
	Value v = {0};
	v.kind = V_RAW;
	v.text = intern(t->p, t->n);
	return v;
}

Value b_refkey(Tok *t)
{
	Value v = {0};
	v.kind = V_RAW;
	value_set_key(&v, intern_cstr("ref_key"));
	v.text = intern(t->p, t->n);
	return v;
}

Value b_valdots(void)
{
	Value v = {0};
	v.kind = V_WORD;
	value_set_key(&v, intern_cstr("value"));
	v.text = intern_cstr("value=...");
	return v;
}

static const struct {
	const char *name;
	NumType nt;
	int isfloat;
} scalar_types[] = {
	{"I8", NT_I8, 0},   {"I16", NT_I16, 0}, {"I32", NT_I32, 0}, {"I64", NT_I64, 0},
	{"U8", NT_U8, 0},   {"U16", NT_U16, 0}, {"U32", NT_U32, 0}, {"U64", NT_U64, 0},
	{"F16", NT_F16, 1}, {"F32", NT_F32, 1}, {"F64", NT_F64, 1}, {"BF16", NT_BF16, 1},
};

static Value call_value(BuildCtx *b, Loc loc, Tok *name, VList *args)
{
	const char *s = sym_str(name->s);
	uint32_t n = args ? args->v.n : 0;
	if (n == 1 && !args->v.a[0].keyi) {
		Value *a = &args->v.a[0];
		if (strcmp(s, "Bool") == 0 && a->kind == V_INT) {
			if (a->u.i != 0 && a->u.i != 1)
				err(b, loc, "Bool(%lld): a Bool is 0 or 1", (long long)a->u.i);
			return value_bool(a->u.i != 0);
		}
		for (size_t i = 0; i < sizeof scalar_types / sizeof scalar_types[0]; i++) {
			if (strcmp(s, scalar_types[i].name) != 0)
				continue;
			if (a->kind == V_INT && !scalar_types[i].isfloat)
				return value_int(a->u.i, scalar_types[i].nt);
			if (scalar_types[i].isfloat && (a->kind == V_INT || a->kind == V_FLOAT || a->kind == V_WORD)) {
				Value v = {0};
				v.kind = V_FLOAT;
				v.numtype = (uint8_t)scalar_types[i].nt;
				if (a->kind == V_INT) {
					char buf[32];
					snprintf(buf, sizeof buf, "%lld", (long long)a->u.i);
					v.text = intern_cstr(buf);
					v.u.f = (double)a->u.i;
				} else {
					v.text = a->text;
					v.u.f = strtod(sym_str(a->text), NULL);
				}
				return v;
			}
		}
	}
	Value v = value_call_of(b->m->arena, name->s, n ? args->v.a : NULL, n);
	vrelease(b, args);
	return v;
}

Value b_call(BuildCtx *b, Loc loc, Tok *name, VList *args)
{
	Value v = call_value(b, loc, name, args);
	if (v.kind != V_CALL)
		vrelease(b, args); /* a typed scalar: the list was not copied */
	return v;
}

Value b_seq(BuildCtx *b, ValueKind k, VList *l)
{
	Value v = {0};
	v.kind = (uint8_t)k;
	if (l && l->v.n) {
		v.n = l->v.n;
		v.u.elems = arena_dup(b->m->arena, l->v.a, l->v.n * sizeof(Value));
	}
	vrelease(b, l);
	return v;
}

VList *b_vlist(BuildCtx *b)
{
	if (b->vfree.n)
		return b->vfree.a[--b->vfree.n];
	VList *l = xcalloc(1, sizeof *l);
	vec_push(&b->vlists, l);
	return l;
}

/* A list whose contents were copied into the module goes back to the pool
 * (lists are made for every operand list, tuple and type line: reusing them
 * keeps the parser's memory flat). */
static void vrelease(BuildCtx *b, VList *l)
{
	if (!l)
		return;
	for (uint32_t i = 0; i < l->abs.n; i++)
		vec_push(&b->afree, l->abs.a[i]);
	l->v.n = 0;
	l->abs.n = 0;
	vec_push(&b->vfree, l);
}

static void grelease(BuildCtx *b, Groups *g)
{
	if (!g)
		return;
	g->instance = 0;
	for (int i = 0; i < 4; i++) {
		g->has[i] = 0;
		g->attrs[i].n = 0;
	}
	vec_push(&b->gfree, g);
}

void b_vpush(VList *l, Value v)
{
	vec_push(&l->v, v);
}

void b_vpush_kw(VList *l, Tok *key, Value v)
{
	value_set_key(&v, key->s);
	b_vpush(l, v);
}

void b_apush(BuildCtx *b, VList *l, Abs *a)
{
	(void)b;
	vec_push(&l->abs, a);
}

static Sym dtype_of(const char *t)
{
	const char *p = strstr(t, "Tensor[");
	char close = ']';
	if (!p) {
		p = strstr(t, "Tensor(");
		close = ')';
	}
	if (!p)
		return 0;
	p += 7;
	const char *e = strchr(p, close);
	if (!e)
		return 0;
	return intern(p, (size_t)(e - p));
}

/* Element types a tensor may have: MindSpore's type names (mindspore-ai/mindspore,
 * mindspore/core/ir/dtype/number.cc: Bool, Int<n>, UInt<n>, Float<n>, BFloat16,
 * Complex<n>) and the short 2022 spellings (Tensor(F32)). */
static const char *const known_dtypes[] = {
    "Bool",   "Int4",         "Int8",       "Int16",    "Int32",   "Int64",    "UInt8",     "UInt16",
    "UInt32", "UInt64",       "Float16",    "Float32",  "Float64", "BFloat16", "Complex64", "Complex128",
    "String", "Float8E4M3FN", "Float8E5M2", "HiFloat8", "F16",     "F32",      "F64",       "BF16",
    "I8",     "I16",          "I32",        "I64",      "U8",      "U16",      "U32",       "U64",
};

/* Every tensor element type in a type string (a tuple names several):
 * an unknown one is an error, not a tensor of 4-byte elements. */
/* 1 when it reported an unknown element type */
static int check_dtypes(BuildCtx *b, Loc loc, const char *t)
{
	int bad = 0;
	for (const char *p = t; (p = strstr(p, "Tensor")) != NULL;) {
		p += 6;
		char close = *p == '[' ? ']' : *p == '(' ? ')' : 0;
		if (!close)
			continue;
		const char *e = strchr(++p, close);
		if (!e)
			return bad;
		size_t n = (size_t)(e - p), i;
		for (i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; i++)
			if (strlen(known_dtypes[i]) == n && memcmp(known_dtypes[i], p, n) == 0)
				break;
		if (i == sizeof known_dtypes / sizeof known_dtypes[0]) {
			err(b, loc, "unknown tensor element type '%.*s'", (int)n, p);
			bad = 1;
		}
	}
	return bad;
}

static int to_shape(BuildCtx *b, Loc loc, const Value *v, Shape *s)
{
	memset(s, 0, sizeof *s);
	if (v->kind == V_TUPLE || v->kind == V_LIST) {
		if (v->n > MAX_RANK) {
			err(b, loc, "tensor rank %u exceeds the limit of %d", v->n, MAX_RANK);
			return 0;
		}
		s->kind = v->kind == V_TUPLE ? SK_DIMS : SK_OLD;
		s->rank = (uint8_t)v->n;
		s->dims = v->n ? arena_alloc(b->m->arena, v->n * sizeof(int64_t)) : NULL;
		for (uint32_t i = 0; i < v->n; i++) {
			if (v->u.elems[i].kind != V_INT)
				return 0;
			s->dims[i] = v->u.elems[i].u.i;
			if (s->dims[i] < -2) {
				err(b, loc, "invalid dimension %lld in shape", (long long)s->dims[i]);
				return 0;
			}
		}
		return 1;
	}
	if (v->kind == V_WORD && strcmp(sym_str(v->text), "NoShape") == 0 && !v->keyi) {
		s->kind = SK_NOSHAPE;
		return 1;
	}
	if (v->kind == V_CALL) {
		const char *nm = sym_str(value_call_name(v));
		int tuple = strcmp(nm, "TupleShape") == 0;
		if (!tuple && strcmp(nm, "ListShape") != 0)
			return 0;
		if (v->n > 255)
			return 0;
		s->kind = tuple ? SK_TUPLE : SK_LIST;
		s->rank = (uint8_t)v->n;
		s->sub = v->n ? arena_alloc(b->m->arena, v->n * sizeof(Shape)) : NULL;
		for (uint32_t i = 0; i < v->n; i++)
			if (!to_shape(b, loc, &v->u.elems[i], &s->sub[i]))
				return 0;
		return 1;
	}
	return 0;
}

/* shape: made already (b_abstract_tok), items then hold no shape */
/* an abstract of the pool, zeroed */
static Abs *abs_take(BuildCtx *b)
{
	Abs *a;
	if (b->afree.n) {
		a = b->afree.a[--b->afree.n];
		memset(a, 0, sizeof *a);
	} else {
		a = xcalloc(1, sizeof *a);
		vec_push(&b->aall, a);
	}
	return a;
}

static Abs *abstract_make(BuildCtx *b, Loc loc, Sym tstr, const Shape *shape, VList *items)
{
	Abs *a = abs_take(b);
	a->tstr = tstr;
	TstrMemo *tm = &b->tmemo[tstr & 63];
	if (tstr && tm->tstr == tstr) {
		a->is_ref = tm->is_ref;
		a->dtype = tm->dtype;
		a->is_tensor = a->dtype != 0;
	} else {
		const char *t = sym_str(tstr);
		a->is_ref = strncmp(t, "Ref[", 4) == 0;
		a->dtype = dtype_of(t);
		a->is_tensor = a->dtype != 0;
		if (!check_dtypes(b, loc, t)) {
			tm->tstr = tstr;
			tm->dtype = a->dtype;
			tm->is_ref = a->is_ref;
		}
	}
	Vec(Sym) extras = {0};
	Sym ref_key = 0;
	uint8_t ref_colon = 0;
	if (shape)
		a->shape = *shape;
	for (uint32_t i = 0; items && i < items->v.n; i++) {
		Value *v = &items->v.a[i];
		if (i == 0 && !shape && to_shape(b, loc, v, &a->shape))
			continue;
		if (v->kind == V_RAW && v->keyi) { /* ref_key */
			const char *k = sym_str(v->text);
			if (*k == ':') {
				ref_colon = 1;
				ref_key = intern_cstr(k + 1);
			} else {
				ref_key = v->text; /* what interning its text again gives */
			}
			continue;
		}
		if (v->kind == V_WORD && v->keyi) { /* value=... */
			a->has_value = 1;
			continue;
		}
		if (v->kind == V_WORD || v->kind == V_RAW) {
			vec_push(&extras, v->text);
			continue;
		}
		/* anything else: keep its printed text */
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		if (f) {
			ir_print_value(f, v);
			fclose(f);
			vec_push(&extras, intern(buf, len));
			free(buf);
		}
	}
	if (ref_key || extras.n)
		a->xi = abs_ext_intern(ref_key, ref_colon, extras.a, extras.n);
	vec_free(&extras);
	vrelease(b, items);
	return a;
}

/* the abstract '<' TSTR ',' SHAPE [',' REFKEY] '>' would have made; the
 * shape's dimensions go from the text to the Shape (no tuple Value on the
 * way) unless to_shape would refuse them, which is then left to it */
Abs *b_abstract_tok(BuildCtx *b, Loc loc, Tok *t)
{
	if (!t->p && !t->i) /* "<UMonad, NoShape>": what to_shape makes of the word */
		return abstract_make(b, loc, t->s, &(Shape){.kind = SK_NOSHAPE}, NULL);
	if (!t->p) { /* "<Tuple[...], TupleShape(NoShape, ...)>": of the call */
		Shape s = {.kind = SK_TUPLE, .rank = (uint8_t)t->i};
		s.sub = arena_alloc(b->m->arena, (size_t)t->i * sizeof(Shape));
		for (int64_t i = 0; i < t->i; i++)
			s.sub[i] = (Shape){.kind = SK_NOSHAPE};
		return abstract_make(b, loc, t->s, &s, NULL);
	}
	int64_t d[MAX_RANK];
	int rank = 0, ok = 1;
	for (const char *p = t->p + 1; *p != ')';) {
		int neg = *p == '-';
		const char *q = p + neg;
		int64_t v = 0;
		while (*q >= '0' && *q <= '9') /* at most 18 digits (lex_abstract) */
			v = v * 10 + (*q++ - '0');
		if (neg)
			v = -v;
		if (rank == MAX_RANK || v < -2) {
			ok = 0;
			break;
		}
		d[rank++] = v;
		p = *q == ',' ? q + 2 : q;
	}
	VList *items = NULL;
	Shape s = {0};
	if (ok) {
		s.kind = SK_DIMS;
		s.rank = (uint8_t)rank;
		s.dims = arena_alloc(b->m->arena, (size_t)rank * sizeof(int64_t));
		memcpy(s.dims, d, (size_t)rank * sizeof(int64_t));
	} else {
		items = b_vlist(b);
		b_vpush(items, b_shape(b, t));
	}
	if (t->i) {
		Tok rk = {.p = t->p + t->i, .n = (uint32_t)t->k};
		if (!items)
			items = b_vlist(b);
		/* a Load's type line names the parameter its node line read (the
		 * last reference lex_paramref found): its Sym, the one intern
		 * gives that text, without a probe of the table */
		const Node *pr = b->ls.pref;
		Value v;
		if (pr && sym_len(pr->name) == rk.n && memcmp(sym_str(pr->name), rk.p, rk.n) == 0) {
			v = (Value){.kind = V_RAW, .text = pr->name};
			value_set_key(&v, intern_cstr("ref_key"));
		} else {
			v = b_refkey(&rk);
		}
		b_vpush(items, v);
	}
	return abstract_make(b, loc, t->s, ok ? &s : NULL, items);
}

Abs *b_abstract(BuildCtx *b, Loc loc, Sym tstr, VList *items)
{
	return abstract_make(b, loc, tstr, NULL, items);
}

static Sym join3(Sym a, const char *mid, Sym c, const char *end)
{
	size_t la = sym_len(a), lm = strlen(mid), lc = sym_len(c), le = strlen(end);
	char stackbuf[256];
	char *buf = la + lm + lc + le < sizeof stackbuf ? stackbuf : xmalloc(la + lm + lc + le + 1);
	memcpy(buf, sym_str(a), la);
	memcpy(buf + la, mid, lm);
	memcpy(buf + la + lm, sym_str(c), lc);
	memcpy(buf + la + lm + lc, end, le);
	Sym s = intern(buf, la + lm + lc + le);
	if (buf != stackbuf)
		free(buf);
	return s;
}

Sym b_tstr_wrap(BuildCtx *b, Tok *outer, int bracket, Sym inner)
{
	(void)b;
	return join3(outer->s, bracket == '[' ? "[" : "(", inner, bracket == '[' ? "]" : ")");
}

Sym b_tstr_rep(BuildCtx *b, Sym t, Tok *n)
{
	(void)b;
	char num[32];
	snprintf(num, sizeof num, "%lld", (long long)n->i);
	return join3(t, "*", intern_cstr(num), "");
}

Sym b_tstr_join(BuildCtx *b, Sym a, Sym c)
{
	(void)b;
	return join3(a, ",", c, "");
}

/* ------------------------------------------------------------ driver */

static Node *lookup_foreign(Module *m, const char *text, Graph **gout)
{
	/* text is "$(@graph:name)" */
	const char *g0 = text + 3;
	const char *colon = strchr(g0, ':');
	const char *end = text + strlen(text) - 1;
	if (!colon || colon > end)
		return NULL;
	Graph *g = ir_find_graph(m, intern(g0, (size_t)(colon - g0)));
	*gout = g;
	if (!g)
		return NULL;
	Sym name = intern(colon + 1, (size_t)(end - colon - 1));
	const char *nm = sym_str(name);
	if (strncmp(nm, "para", 4) == 0) {
		Tok t = {0};
		split_param(nm + 4, strlen(nm + 4), &t);
		for (uint32_t j = 0; j < g->params.n; j++)
			if (g->params.a[j]->name == t.s && g->params.a[j]->local == t.i)
				return g->params.a[j];
	}
	for (uint32_t j = 0; j < g->nodes.n; j++)
		if (g->nodes.a[j]->name == name)
			return g->nodes.a[j];
	return NULL;
}

static void resolve_value(BuildCtx *b, const Node *user, Value *v)
{
	if (v->kind == V_EXTERN && strncmp(sym_str(v->text), "$(@", 3) == 0) {
		Graph *g = NULL;
		Node *hit = lookup_foreign(b->m, sym_str(v->text), &g);
		if (hit) {
			*v = value_node(hit);
		} else if (!b->fragment) {
			Loc loc = {(uint32_t)(v->u.i >> 32), (uint32_t)(v->u.i & 0xffffffff)};
			const char *t = sym_str(v->text), *colon = strchr(t, ':');
			int gl = colon ? (int)(colon - t - 3) : 0;
			char lab[128];
			node_label(lab, sizeof lab, user);
			if (g)
				diag_error_at(loc, "%s: undefined reference %s: graph '@%.*s' has no node or parameter '%.*s'",
					      lab, t, gl, t + 3, colon ? (int)strlen(colon + 1) - 1 : 0, colon ? colon + 1 : "");
			else
				diag_error_at(loc, "%s: undefined reference %s: there is no graph '@%.*s' in the file", lab, t,
					      gl, t + 3);
		}
		return;
	}
	if (v->kind == V_TUPLE || v->kind == V_LIST || v->kind == V_DICT || v->kind == V_CALL)
		for (uint32_t i = 0; i < v->n; i++)
			resolve_value(b, user, &v->u.elems[i]);
}

static void resolve_foreign(BuildCtx *b)
{
	if (!b->nforeign)
		return;
	for (uint32_t i = 0; i < b->m->graphs.n; i++) {
		Graph *g = b->m->graphs.a[i];
		for (uint32_t j = 0; j < g->nodes.n; j++) {
			Node *n = g->nodes.a[j];
			for (uint32_t k = 0; k < n->nargs; k++)
				resolve_value(b, n, &n->args[k]);
			if (n->callee_kind == CK_EXTERN) {
				NodeExt *x = ir_node_ext_mut(b->m, n);
				resolve_value(b, n, &x->callee);
				if (x->callee.kind == V_NODE)
					n->callee_kind = CK_NODE;
			}
		}
	}
}

/* What the graphs of a dump must be: every name once, the entry the header
 * names present.  An excerpt (--fragment) may hold any part of a dump, even
 * a graph printed twice (analyze_fail files).  verify checks the rest (a
 * Return ends every graph, every node has its types). */
static void check_graphs(BuildCtx *b)
{
	if (b->fragment)
		return;
	ir_check_graph_names(b->m);
	if (b->m->has_header && !ir_find_graph(b->m, b->m->entry))
		diag_error_at(b->entry_loc, "the entry graph '@%s' is not in the file", sym_str(b->m->entry));
}

static int check_nul(const char *fname, const char *buf, size_t len)
{
	const char *z = memchr(buf, 0, len);
	if (!z)
		return 0;
	uint32_t line = 1;
	const char *ls = buf;
	for (const char *p = buf; p < z; p++)
		if (*p == '\n') {
			line++;
			ls = p + 1;
		}
	(void)fname;
	diag_error_at((Loc){line, (uint32_t)(z - ls) + 1}, "NUL byte in the input: this is not an IR text file");
	return -1;
}

/* The input is UTF-8 text (names, scopes and debug lines are MindSpore
 * strings): the first byte that does not start or continue a well-formed
 * sequence is an error.  Dumps are almost all ASCII, so the scan takes eight
 * bytes a step and finds the line of a bad byte only when there is one. */
#define HI8 0x8080808080808080ULL
#define LO8 0x0101010101010101ULL

/* The UTF-8 scan also finds a NUL (a word has a zero byte when
 * (w - LO8) & ~w & HI8), which check_nul reports wherever it is; it looks
 * for one only when the scan finds one or a bad byte, not in a second pass
 * over the whole input (a memchr of 64 MB was 1% of parse+print). */
#if defined(__SSE2__)
/* 64 bytes a step while they are ASCII and not NUL: a byte's sign bit, or
 * that of its compare with zero, stops it.  The eight-byte words' test
 * below took an instruction a byte, 3% of parse+print. */
static const unsigned char *ascii_run(const unsigned char *p, const unsigned char *e)
{
	const __m128i zero = _mm_setzero_si128();
	while ((size_t)(e - p) >= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 16)),
			c = _mm_loadu_si128((const __m128i *)(p + 32)), d = _mm_loadu_si128((const __m128i *)(p + 48));
		__m128i z = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, zero), _mm_cmpeq_epi8(b, zero)),
					 _mm_or_si128(_mm_cmpeq_epi8(c, zero), _mm_cmpeq_epi8(d, zero)));
		__m128i hi = _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d));
		if (_mm_movemask_epi8(_mm_or_si128(z, hi)))
			break;
		p += 64;
	}
	return p;
}
#else
/* 32 bytes a step while they are ASCII and not NUL */
static const unsigned char *ascii_run(const unsigned char *p, const unsigned char *e)
{
	while ((size_t)(e - p) >= 32) {
		uint64_t w[4];
		memcpy(w, p, 32);
		uint64_t z = ((w[0] - LO8) & ~w[0]) | ((w[1] - LO8) & ~w[1]) | ((w[2] - LO8) & ~w[2]) |
			     ((w[3] - LO8) & ~w[3]);
		if ((w[0] | w[1] | w[2] | w[3] | z) & HI8)
			break;
		p += 32;
	}
	return p;
}
#endif

static int check_utf8(const char *fname, const char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)buf, *e = p + len;
	while (p < e) {
		p = ascii_run(p, e);
		if ((size_t)(e - p) >= 8) {
			uint64_t w;
			memcpy(&w, p, 8);
			if (!((w | ((w - LO8) & ~w)) & HI8)) {
				p += 8;
				continue;
			}
		}
		unsigned c = *p;
		if (c == 0)
			return check_nul(fname, buf, len);
		if (c < 0x80) {
			p++;
			continue;
		}
		size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
		int ok = n && (size_t)(e - p) >= n;
		for (size_t i = 1; ok && i < n; i++)
			ok = (p[i] & 0xc0) == 0x80;
		/* no overlong forms, surrogates or code points past U+10FFFF */
		if (ok && n == 3)
			ok = !(c == 0xe0 && p[1] < 0xa0) && !(c == 0xed && p[1] >= 0xa0);
		if (ok && n == 4)
			ok = !(c == 0xf0 && p[1] < 0x90) && !(c == 0xf4 && p[1] >= 0x90);
		if (!ok) {
			if (check_nul(fname, buf, len))
				return -1; /* a NUL further on is the error to report */
			uint32_t line = 1;
			const unsigned char *ls = (const unsigned char *)buf, *q;
			while ((q = memchr(ls, '\n', (size_t)(p - ls))) != NULL) {
				line++;
				ls = q + 1;
			}
			diag_error_at((Loc){line, (uint32_t)(p - ls) + 1}, "invalid UTF-8 byte 0x%02x in the input", c);
			return -1;
		}
		p += n;
	}
	return 0;
}

Module *ir_parse(const char *filename, const char *buf, size_t len, int fragment)
{
	Source src = {filename, buf, len};
	diag_set_source(&src);
	int errs0 = diag_errors();
	if (len == 0) {
		diag_error_at((Loc){1, 1}, "empty input: no graph to read");
		return NULL;
	}
	if (strspn(buf, " \t\r\n") == len) {
		diag_error_at((Loc){1, 1}, "the input is only white space: no graph to read");
		return NULL;
	}
	if (check_utf8(filename, buf, len))
		return NULL;
	BuildCtx *b = xcalloc(1, sizeof *b);
	b->pgap = UINT32_MAX;
	b->m = ir_module_new(filename);
	b->m->fragment = (uint8_t)fragment;
	b->fragment = fragment;
	b->fname = filename;
	b->ls.buf = buf;
	b->ls.len = len;
	b->ls.line_start = buf;
	b->ls.line = 1;
	b->ls.b = b;
	int rc = lex_run(&b->ls, (char *)buf, len);
	flush_node(b);
	if (b->cur && b->in_braces && !diag_errors())
		diag_error_at(b->cur->loc, "subgraph '@%s' has no closing '}' before the end of the file",
			      sym_str(b->cur->name));
	if (b->pending) {
		/* "subgraph attr:" etc. with no graph after it */
		if (!b->pending->name)
			b->pending->name = intern_cstr("main");
	}
	if (diag_errors() == errs0 && rc == 0)
		check_graphs(b);
	if (b->hparams.n) {
		Graph *g = ir_entry(b->m);
		if (!g) {
			g = ir_graph_new(b->m, b->m->entry ? b->m->entry : intern_cstr("main"));
			if (!b->m->entry)
				b->m->entry = g->name;
		}
		attach_header_params(b, g);
	}
	if (b->pend.n) {
		if (!b->m->graphs.n && !b->m->has_header) {
			b->m->lead = freeze(b, b->pend.a, b->pend.n);
			b->m->nlead = b->pend.n;
		} else {
			b->m->trail = freeze(b, b->pend.a, b->pend.n);
			b->m->ntrail = b->pend.n;
		}
	}
	if (!b->m->graphs.n && !diag_errors() && !b->m->has_header)
		diag_error_at((Loc){1, 1}, "no graph, node or parameter in the input");
	if (!b->m->graphs.n)
		ir_graph_new(b->m, b->m->entry ? b->m->entry : intern_cstr("main"));
	if (!b->m->entry)
		b->m->entry = b->m->graphs.a[0]->name;
	Graph *e = ir_entry(b->m);
	if (e)
		e->is_entry = 1;
	resolve_foreign(b);
	if (rc == 2)
		diag_error("out of memory while parsing");
	for (uint32_t i = 0; i < b->vlists.n; i++) {
		vec_free(&b->vlists.a[i]->v);
		vec_free(&b->vlists.a[i]->abs);
		free(b->vlists.a[i]);
	}
	for (uint32_t i = 0; i < b->groups.n; i++) {
		for (int j = 0; j < 4; j++)
			vec_free(&b->groups.a[i]->attrs[j]);
		free(b->groups.a[i]);
	}
	vec_free(&b->vlists);
	vec_free(&b->groups);
	vec_free(&b->vfree);
	vec_free(&b->gfree);
	for (uint32_t i = 0; i < b->aall.n; i++)
		free(b->aall.a[i]);
	vec_free(&b->aall);
	vec_free(&b->afree);
	free(b->ptab);
	free(b->ptag);
	vec_free(&b->pnum);
	for (int i = 0; i < ATTR_MEMO; i++)
		attr_memo_free(&b->amemo[i]);
	for (int i = 0; i < TYPE_MEMO; i++)
		free(b->tymemo[i].mem);
	vec_free(&b->pend);
	vec_free(&b->nodelines);
	vec_free(&b->xlines);
	vec_free(&b->hparams);
	vec_free(&b->phparams);
	vec_free(&b->locals);
	Module *m = b->m;
	free(b);
	if (diag_errors() > errs0 || rc != 0) {
		if (rc != 0 && diag_errors() == errs0)
			diag_error_at((Loc){1, 1}, "cannot parse the input");
		ir_module_free(m);
		return NULL;
	}
	return m;
}
