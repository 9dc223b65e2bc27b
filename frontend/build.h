/* build.h - the interface between the scanner/parser and build.c. */
#ifndef SAPPC_BUILD_H
#define SAPPC_BUILD_H

#include "sappc.h"

typedef struct Tok {
	const char *p;
	uint32_t n;
	int k;
	int64_t i;
	Sym s, s2;
} Tok;

typedef struct VList {
	Vec(Value) v;
	Vec(Abs *) abs;
} VList;

typedef struct Groups {
	Sym instance;
	uint8_t has[4];
	Vec(Attr) attrs[4]; /* 0 primitive, 1 cnode, 2 primal, 3 strategy */
} Groups;

typedef struct BuildCtx BuildCtx;

/* Brackets nest at most this deep (deeper input is an error, not a crash). */
#define LEX_MAX_DEPTH 1000
/* a type line's ref_key values a memo entry can stand for, and the
 * longest line it holds so */
#define LEX_TL_REFS 4
#define LEX_TL_KEY 512

/* An open bracket of the line being scanned: where it is, which one. */
typedef struct Bracket {
	uint32_t line, col;
	char ch;
} Bracket;

/* What kind of line is being scanned: syntax errors name the node. */
enum { LK_NONE, LK_NODE, LK_RETURN, LK_TYPE, LK_PARAM, LK_SUBGRAPH };

typedef struct LexState {
	const char *buf;
	size_t len;
	const char *line_start;
	const char *nl_after; /* the last token ended with a NL: the line moves on at the next one */
	const char *dropped;  /* the input before this was given back (io_file_drop) */
	uint32_t line;
	int tdepth, rawdepth, rawkind, prev_state, eof_nl;
	const char *rawstart;
	const char *attrkw_end; /* the end of the last "primitive_attrs:" (or the other two) */
	BuildCtx *b;
	/* open brackets of the current line (all brackets close on their line);
	 * depth may exceed LEX_MAX_DEPTH, then only the count is kept */
	int depth;
	Bracket br[LEX_MAX_DEPTH];
	/* what the last token did to the stack: a syntax error is reported with
	 * that token as lookahead, and wants the stack as it was before it */
	int last_push;        /* it opened br[depth - 1] */
	Bracket last_pop;     /* it closed this one (ch 0: it closed nothing) */
	int last_unmatched;   /* it was a closer that matched no open bracket */
	int nl_pending;       /* a NL was scanned: the next token starts a new line */
	int bol, at_bol;      /* no token yet on this line / the last token was its first */
	int explained;        /* the scanner reported the last token itself */
	char badch;           /* the last stray character */
	const char *unterm;   /* the last unclosed bracketed value (UNTERMINATED) */
	uint32_t untermlen;
	/* the line being scanned */
	int lkind;            /* LK_* */
	int64_t llocal;       /* LK_NODE: the %k being defined */
	int64_t pnum;         /* LK_PARAM: N of %paraN_x, and x */
	Sym psym;
	char lname[64];       /* LK_NODE: operator; LK_PARAM: "%paraN_x"; LK_SUBGRAPH: graph name */
	/* the type line being read token by token (lex_typeline did not know
	 * it): its text from ':' to the NL, its line, the error count before
	 * it; b_typeline keeps it when it parsed without an error */
	const struct Node *pref; /* the parameter of the last %paraN_x read by its number (lex_paramref) */
	/* the group lex_attr_ahead found after its keyword: the next token */
	Groups *ahead;
	const char *ahead_p;
	uint32_t ahead_n;
	const char *tl_text;
	uint32_t tl_n, tl_line;
	uint64_t tl_hash;
	int tl_nerr;
	/* the type line without its ref_key values (tl_keyok: made), their
	 * places in the input: a memo of a Load's line holds it so */
	uint8_t tl_keyok, tl_nrefs;
	uint32_t tl_keyn;
	uint64_t tl_keyhash;
	const char *tl_ref[LEX_TL_REFS];
	uint32_t tl_refn[LEX_TL_REFS];
	char tl_key[LEX_TL_KEY];
} LexState;

/* scanner helpers (build.c) */
union IR_YYSTYPE;
int lex_hash_line(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv, int *keep);
/* held: the byte after the token as it was (the scanner keeps a NUL there) */
void lex_nodedef(LexState *ls, const char *t, size_t n, char held, union IR_YYSTYPE *lv);
void lex_graphref(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
void lex_paramdef(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
void lex_paramref(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
void lex_instance(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
void lex_instname(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
void lex_foreign(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
void lex_attrline(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
int lex_int(LexState *ls, const char *t, union IR_YYSTYPE *lv);
int64_t lex_local(const char *t, size_t n); /* "%k": k (saturated, as strtoll) */
/* "(4096, 1024)" in a type: 1 when it is read as one SHAPE token */
int lex_shape(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
/* "<Tensor[Float32], (4096, 1024)>": 1 when it is read as one ABSTRACT
 * token (its type name interned, its shape and ref_key kept as text) */
int lex_abstract(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
/* "<UMonad, NoShape>": 1 when it is read as one ABSTRACT token */
int lex_abstract_noshape(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
/* "<Tuple[Int64*4], TupleShape(NoShape, ...)>": 1 when it is one ABSTRACT token */
int lex_abstract_tuple(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
/* "{output_names: [output], transpose_a: Bool(0)}" after "primitive_attrs:"
 * (or the other two keywords): 1 when it is read as one ATTRBLOCK token */
int lex_attrblock(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
/* right after "primitive_attrs:" (or the other two) and its blanks, at t:
 * sets ls->ahead when the group there is one lex_attrblock kept */
void lex_attr_ahead(LexState *ls, const char *t);
/* "I64(8)": 0 when it is read as one SCALAR token, else the length of the
 * name to read as an IDENT (the rest is scanned as usual) */
int lex_scalar(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
/* a type line from its ':' (t) to its NL (t[n]): 1 when it is one read
 * before without an error, returned as one TYPELINE token */
int lex_typeline(LexState *ls, const char *t, size_t n, union IR_YYSTYPE *lv);
int lex_run(LexState *ls, char *buf, size_t len);

/* grammar actions (build.c) */
void b_syntax_error(BuildCtx *b, int line, int col, const char *msg);
/* A syntax error with the unexpected token (its kind is one of the SE_*
 * classes, and its name as the grammar spells it) and the expected tokens. */
enum { SE_OTHER, SE_EOL, SE_BADCHAR, SE_BADSTRING, SE_BADINT, SE_UNTERMINATED, SE_TOODEEP, SE_OPEN, SE_CLOSE };
void b_syntax_error_at(BuildCtx *b, Loc loc, int cls, const char *got, const char **expected, int nexpected);
void b_recover(BuildCtx *b);
int b_abort(BuildCtx *b);
void b_entry(BuildCtx *b, Loc loc, Tok *t);
void b_header_attrs(BuildCtx *b);
void b_attrline(BuildCtx *b, Tok *t);
void b_paramdef(BuildCtx *b, Loc loc, Tok *t, Abs *type, VList *tail);
void b_indirect(BuildCtx *b, Tok *t);
void b_sg_attr(BuildCtx *b);
void b_sg_instance(BuildCtx *b, Tok *t);
void b_sg_symeng(BuildCtx *b, Tok *t);
void b_sg_parameters(BuildCtx *b, VList *types);
void b_sg_open(BuildCtx *b, Loc loc, Tok *name, Tok *parent, VList *params);
void b_sg_close(BuildCtx *b, Loc loc);
void b_order(BuildCtx *b);
void b_comment(BuildCtx *b, Tok *t);
void b_scope(BuildCtx *b, Loc loc, Tok *t);
void b_cycle(BuildCtx *b, Tok *t);
void b_textline(BuildCtx *b, Tok *t);
void b_node(BuildCtx *b, Loc loc, Tok *def, Value *callee, VList *args, Groups *g);
void b_return(BuildCtx *b, Loc loc, VList *args, Groups *g);
void b_typeline(BuildCtx *b, Loc loc, Loc eol, VList *ins, Abs *out);
void b_typeline_memo(BuildCtx *b, Loc loc, Loc eol, Tok *t);
Value b_sgparam(BuildCtx *b, Tok *t);
Value b_callee_prim(BuildCtx *b, Tok *t);
Value b_callee_call(BuildCtx *b, Loc loc, Tok *kw, Tok *g);
Value b_ref_local(BuildCtx *b, Loc loc, Tok *t);
Value b_ref_param(BuildCtx *b, Loc loc, Tok *t);
Value b_ref_foreign(BuildCtx *b, Loc loc, Tok *t);
Value b_ref_graph(BuildCtx *b, Tok *t);
void b_funcunion(BuildCtx *b, Tok *t);
Groups *b_groups(BuildCtx *b);
void b_group_instance(BuildCtx *b, Groups *g, Tok *t);
void b_group_merge(BuildCtx *b, Groups *g, Groups *attrs, int which);
void b_group_strategy(BuildCtx *b, Groups *g, Value *first, Groups *rest);
void b_group_flatten(Groups *g);
void b_attr_push(BuildCtx *b, Groups *g, Tok *key, Value *v);
Value b_int(Tok *t);
Value b_scalar(Tok *t);
Value b_shape(BuildCtx *b, Tok *t);
Value b_float(Tok *t, NumType nt);
Value b_string(Tok *t);
Value b_word(Tok *t);
Value b_raw(Tok *t);
Value b_refkey(Tok *t);
Value b_valdots(void);
Value b_call(BuildCtx *b, Loc loc, Tok *name, VList *args);
Value b_seq(BuildCtx *b, ValueKind k, VList *l);
VList *b_vlist(BuildCtx *b);
void b_vpush(VList *l, Value v);
void b_vpush_kw(VList *l, Tok *key, Value v);
void b_apush(BuildCtx *b, VList *l, Abs *a);
Abs *b_abstract(BuildCtx *b, Loc loc, Sym tstr, VList *items);
Abs *b_abstract_tok(BuildCtx *b, Loc loc, Tok *t);
Sym b_tstr_wrap(BuildCtx *b, Tok *outer, int bracket, Sym inner);
Sym b_tstr_rep(BuildCtx *b, Sym t, Tok *n);
Sym b_tstr_join(BuildCtx *b, Sym a, Sym c);

#endif
