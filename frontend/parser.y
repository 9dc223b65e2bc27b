/* parser.y - pure bison grammar for MindSpore IR dumps (ir-format.md §1).
 *
 * A file is a sequence of lines; each line kind is one rule, and every action
 * is a one-line call into build.c, which assembles the module (current graph,
 * last node for type and scope lines, pending comments).  Values, types and
 * attribute groups are parsed fully here.
 */
%define api.pure full
%define api.prefix {ir_yy}
%define parse.error custom
%locations
%expect 0
%param {void *scanner}
%parse-param {BuildCtx *b}

%code requires {
#include "sappc.h"
#include "build.h"
/* A location is where a token starts, nothing more: half of bison's four
 * ints to copy on every shift and reduction.  Only tokens' locations are
 * ever read (@k of a token, the lookahead of a syntax error), so a
 * nonterminal takes its first symbol's, or the one before it when empty. */
#define IR_YYLTYPE Loc
#define IR_YYLTYPE_IS_DECLARED 1
#define YYLLOC_DEFAULT(Cur, Rhs, N) ((Cur) = YYRHSLOC(Rhs, (N) ? 1 : 0))
}

%code {
#include <string.h>

int ir_yylex(IR_YYSTYPE *lval, IR_YYLTYPE *lloc, void *scanner);
static void ir_yyerror(IR_YYLTYPE *l, void *scanner, BuildCtx *b, const char *msg)
{
	(void)scanner;
	b_syntax_error(b, (int)l->line, (int)l->col, msg);
}
#define LOC(l) (l)
}

%union {
	Tok tok;
	Value v;
	VList *vl;
	Abs *abs;
	Groups *gr;
	Sym s;
}

/* the names in quotes are what syntax errors call the tokens */
%token <tok> NODEDEF "node definition" PARAMDEF "parameter definition"
%token <tok> PARAMREF "parameter reference" LOCALREF "node reference"
%token <tok> FOREIGN "'$(@graph:node)' reference" GRAPHREF "graph name" FUNCUNION "'[@FuncUnion(...)]'"
/* SCALAR is I64(8) or Bool(1) read as one token where only a value can
 * stand (lex_scalar): syntax errors call it and list it as the identifier
 * it starts with, so messages are those of the four tokens */
%token <tok> SCALAR "typed scalar"
/* TSTR is "Tensor[Float32]" read as one token right after '<'; it, too,
 * is never named in a message (IDENT is expected wherever it is) */
%token <tok> TSTR "type name"
/* SHAPE is "(4096, 1024)" read as one token after ',' in a type; messages
 * call it the '(' it starts with */
%token <tok> SHAPE "shape"
/* ABSTRACT is "<Tensor[Float32], (4096, 1024)>" read as one token where a
 * type starts (lex_abstract); messages call it the '<' it starts with */
%token <tok> ABSTRACT "type"
/* ATTRBLOCK is a group of plain values after its keyword, read as one
 * token (lex_attrblock); messages call it the '{' it starts with */
%token <gr> ATTRBLOCK "attribute group"
/* TYPELINE is a whole type line after its ':' with its NL, one met before
 * without an error (lex_typeline); messages call it the ':' it starts
 * with.  SCOPE_NL is a scope line with its NL (LEX_TAKE_NL), where a NL
 * ends it and no continuation line follows; SCOPE_LINE is one without. */
%token <tok> TYPELINE "type line"
%token <tok> INT "integer" FLOAT "number" STRING "string" BAREWORD "word" IDENT "identifier"
%token <tok> RAW "bracketed value" REFKEY "'ref_key='" INSTANCE "'{instance name: ...}'"
%token <tok> HDR_ENTRY "'# IR entry' line" HDR_NSUB "'# Total subgraphs' line" HDR_ATTRS "'# Attrs:' line"
%token <tok> HDR_NPARAMS "'# Total params' line" HDR_PARAMS "'# Params:' line"
%token <tok> HDR_PARAMETERS "'# Parameters:' line"
%token <tok> SCOPE_LINE "scope line" SCOPE_NL "scope line and its end" ORDER_HDR "'# Order:' line" CYCLE_MARK "cycle mark line"
%token <tok> COMMENT "comment line" TEXTLINE "text line" ATTRLINE "attribute line"
%token <tok> SG_ATTR "'subgraph attr:'" SG_INSTANCE "'subgraph instance:' line"
%token <tok> SG_SYMENG "'subgraph symbol engine:' line" SG_INDIRECT "'indirect:' line"
%token <tok> SUBGRAPH "'subgraph'" PARENT "'parent:'" END_GRAPH "'}' closing a subgraph"
%token <tok> COUNT_HDR "'Node counting information:'" COUNT_NODES "'Total number of nodes:' line"
%token <tok> COUNT_CNODES "'Total number of cnodes:' line" RETURN "'Return'"
%token PATTRS "'primitive_attrs:'" CATTRS "'cnode_attrs:'" PRIMAL "'cnode_primal_attrs:'"
%token STRAT_OPEN "'{in_strategy:'" ARROW "'->'" VALDOTS "'value=...'" NL "end of line"
%token BADCHAR "stray character" BADSTRING "unterminated string" BADINT "out-of-range integer"
%token UNTERMINATED "unclosed bracketed value" TOODEEP "too deeply nested bracket"

%type <v> value callee titem shape_el
%type <vl> vals vals_opt cargs cargs_opt dict dict_opt titems shape_list int_list abs_list abs_list_opt ptail sg_params
%type <abs> abstract
%type <gr> groups attrlist attrlist_opt strat_rest attrblock
%type <s> tstr tstr_list

%%

/* every line kind is an alternative of file itself, not of a line that
 * file then takes: one reduction a line, not two (455,000 lines in the
 * 4096-layer file) */
file:	  %empty
	| file NL
	| file HDR_ENTRY NL			{ b_entry(b, LOC(@2), &$2); }
	| file HDR_NSUB NL
	| file HDR_ATTRS NL			{ b_header_attrs(b); }
	| file ATTRLINE NL			{ b_attrline(b, &$2); }
	| file HDR_NPARAMS NL
	| file HDR_PARAMS NL
	| file PARAMDEF abstract ptail NL	{ b_paramdef(b, LOC(@2), &$2, $3, $4); }
	| file COUNT_HDR NL
	| file COUNT_NODES NL
	| file COUNT_CNODES NL
	| file SG_INDIRECT NL		{ b_indirect(b, &$2); }
	| file SG_ATTR NL			{ b_sg_attr(b); }
	| file SG_INSTANCE NL		{ b_sg_instance(b, &$2); }
	| file SG_SYMENG NL			{ b_sg_symeng(b, &$2); }
	| file HDR_PARAMETERS INT ',' '(' abs_list_opt ')' NL	{ b_sg_parameters(b, $6); }
	| file SUBGRAPH GRAPHREF '(' sg_params ')' '{' NL	{ b_sg_open(b, LOC(@2), &$3, NULL, $5); }
	| file SUBGRAPH GRAPHREF PARENT '[' IDENT GRAPHREF ']' '(' sg_params ')' '{' NL	{ b_sg_open(b, LOC(@2), &$3, &$7, $10); }
	| file END_GRAPH NL			{ b_sg_close(b, LOC(@2)); }
	| file ORDER_HDR NL			{ b_order(b); }
	| file COMMENT NL			{ b_comment(b, &$2); }
	| file SCOPE_LINE NL			{ b_scope(b, LOC(@2), &$2); }
	| file SCOPE_NL				{ b_scope(b, LOC(@2), &$2); }
	| file CYCLE_MARK NL			{ b_cycle(b, &$2); }
	| file TEXTLINE NL			{ b_textline(b, &$2); }
	| file NODEDEF callee '(' vals_opt ')' groups NL	{ b_node(b, LOC(@2), &$2, &$3, $5, $7); }
	| file NODEDEF callee '(' vals_opt ')' groups ':' '(' abs_list_opt ')' ARROW '(' abstract ')' NL
					{ b_node(b, LOC(@2), &$2, &$3, $5, $7); b_typeline(b, LOC(@8), LOC(@16), $10, $14); }
	| file RETURN '(' vals_opt ')' groups NL	{ b_return(b, LOC(@2), $4, $6); }
	| file ':' '(' abs_list_opt ')' ARROW '(' abstract ')' NL	{ b_typeline(b, LOC(@2), LOC(@10), $4, $8); }
	| file ':' '(' abs_list_opt ')' NL	{ b_typeline(b, LOC(@2), LOC(@6), $4, NULL); }
	| file TYPELINE				{ b_typeline_memo(b, LOC(@2), (Loc){@2.line, (uint32_t)$2.k}, &$2); }
	| file error NL			{ yyerrok; b_recover(b); if (b_abort(b)) YYABORT; }
	;

sg_params: %empty			{ $$ = b_vlist(b); }
	| PARAMREF			{ $$ = b_vlist(b); b_vpush($$, b_sgparam(b, &$1)); }
	| sg_params ',' PARAMREF	{ $$ = $1; b_vpush($$, b_sgparam(b, &$3)); }
	;

ptail:	  %empty			{ $$ = NULL; }
	| ptail ':' value		{ $$ = $1 ? $1 : b_vlist(b); b_vpush($$, $3); }
	;

callee:	  IDENT				{ $$ = b_callee_prim(b, &$1); }
	| IDENT GRAPHREF		{ $$ = b_callee_call(b, LOC(@1), &$1, &$2); }
	| LOCALREF			{ $$ = b_ref_local(b, LOC(@1), &$1); }
	| LOCALREF FUNCUNION		{ $$ = b_ref_local(b, LOC(@1), &$1); b_funcunion(b, &$2); }
	| PARAMREF			{ $$ = b_ref_param(b, LOC(@1), &$1); }
	| FOREIGN			{ $$ = b_ref_foreign(b, LOC(@1), &$1); }
	;

groups:	  %empty			{ $$ = b_groups(b); }
	| groups INSTANCE		{ $$ = $1; b_group_instance(b, $$, &$2); }
	| groups PATTRS attrblock	{ $$ = $1; b_group_merge(b, $$, $3, 0); }
	| groups CATTRS attrblock	{ $$ = $1; b_group_merge(b, $$, $3, 1); }
	| groups PRIMAL attrblock	{ $$ = $1; b_group_merge(b, $$, $3, 2); }
	| groups STRAT_OPEN value strat_rest '}'	{ $$ = $1; b_group_strategy(b, $$, &$3, $4); }
	;

/* "{in_strategy:" is one token; inside an attribute group it is just the first key */
attrblock: '{' attrlist_opt '}'		{ $$ = $2; }
	| ATTRBLOCK			{ $$ = $1; }
	| STRAT_OPEN value strat_rest '}'	{ $$ = b_groups(b); b_group_strategy(b, $$, &$2, $3); b_group_flatten($$); }
	;

attrlist_opt: %empty			{ $$ = b_groups(b); }
	| attrlist			{ $$ = $1; }
	;

attrlist: IDENT ':' value		{ $$ = b_groups(b); b_attr_push(b, $$, &$1, &$3); }
	| attrlist ',' IDENT ':' value	{ $$ = $1; b_attr_push(b, $$, &$3, &$5); }
	;

strat_rest: %empty			{ $$ = b_groups(b); }
	| strat_rest ',' IDENT ':' value	{ $$ = $1; b_attr_push(b, $$, &$3, &$5); }
	;

value:	  INT				{ $$ = b_int(&$1); }
	| SCALAR			{ $$ = b_scalar(&$1); }
	| FLOAT				{ $$ = b_float(&$1, NT_BARE); }
	| STRING			{ $$ = b_string(&$1); }
	| BAREWORD			{ $$ = b_word(&$1); }
	| IDENT				{ $$ = b_word(&$1); }
	| RAW				{ $$ = b_raw(&$1); }
	| LOCALREF			{ $$ = b_ref_local(b, LOC(@1), &$1); }
	| PARAMREF			{ $$ = b_ref_param(b, LOC(@1), &$1); }
	| FOREIGN			{ $$ = b_ref_foreign(b, LOC(@1), &$1); }
	| GRAPHREF			{ $$ = b_ref_graph(b, &$1); }
	| IDENT '(' cargs_opt ')'	{ $$ = b_call(b, LOC(@1), &$1, $3); }
	| '(' vals_opt ')'		{ $$ = b_seq(b, V_TUPLE, $2); }
	| '[' vals_opt ']'		{ $$ = b_seq(b, V_LIST, $2); }
	| '{' dict_opt '}'		{ $$ = b_seq(b, V_DICT, $2); }
	;

vals_opt: %empty			{ $$ = NULL; }
	| vals				{ $$ = $1; }
	;

vals:	  value				{ $$ = b_vlist(b); b_vpush($$, $1); }
	| vals ',' value		{ $$ = $1; b_vpush($$, $3); }
	;

cargs_opt: %empty			{ $$ = NULL; }
	| cargs				{ $$ = $1; }
	;

cargs:	  value				{ $$ = b_vlist(b); b_vpush($$, $1); }
	| IDENT '=' value		{ $$ = b_vlist(b); b_vpush_kw($$, &$1, $3); }
	| cargs ',' value		{ $$ = $1; b_vpush($$, $3); }
	| cargs ',' IDENT '=' value	{ $$ = $1; b_vpush_kw($$, &$3, $5); }
	;

dict_opt: %empty			{ $$ = NULL; }
	| dict				{ $$ = $1; }
	;

dict:	  value ':' value		{ $$ = b_vlist(b); b_vpush($$, $1); b_vpush($$, $3); }
	| dict ',' value ':' value	{ $$ = $1; b_vpush($$, $3); b_vpush($$, $5); }
	;

abs_list_opt: %empty			{ $$ = NULL; }
	| abs_list			{ $$ = $1; }
	;

abs_list: abstract			{ $$ = b_vlist(b); b_apush(b, $$, $1); }
	| abs_list ',' abstract		{ $$ = $1; b_apush(b, $$, $3); }
	;

abstract: '<' tstr titems '>'		{ $$ = b_abstract(b, LOC(@1), $2, $3); }
	| ABSTRACT			{ $$ = b_abstract_tok(b, LOC(@1), &$1); }
	;

tstr:	  IDENT				{ $$ = $1.s; }
	| TSTR				{ $$ = $1.s; }
	| IDENT '[' tstr_list ']'	{ $$ = b_tstr_wrap(b, &$1, '[', $3); }
	| IDENT '(' IDENT ')'		{ $$ = b_tstr_wrap(b, &$1, '(', $3.s); }
	| tstr '*' INT			{ $$ = b_tstr_rep(b, $1, &$3); }
	;

tstr_list: tstr				{ $$ = $1; }
	| tstr_list ',' tstr		{ $$ = b_tstr_join(b, $1, $3); }
	;

titems:	  %empty			{ $$ = NULL; }
	| titems ',' titem		{ $$ = $1 ? $1 : b_vlist(b); b_vpush($$, $3); }
	;

titem:	  shape_el			{ $$ = $1; }
	| REFKEY			{ $$ = b_refkey(&$1); }
	| VALDOTS			{ $$ = b_valdots(); }
	| RAW				{ $$ = b_raw(&$1); }
	| '[' ']'			{ $$ = b_seq(b, V_LIST, NULL); }
	| '[' int_list ']'		{ $$ = b_seq(b, V_LIST, $2); }
	;

shape_el: '(' ')'			{ $$ = b_seq(b, V_TUPLE, NULL); }
	| SHAPE				{ $$ = b_shape(b, &$1); }
	| '(' int_list ')'		{ $$ = b_seq(b, V_TUPLE, $2); }
	| IDENT				{ $$ = b_word(&$1); }
	| IDENT '(' shape_list ')'	{ $$ = b_call(b, LOC(@1), &$1, $3); }
	;

shape_list: shape_el			{ $$ = b_vlist(b); b_vpush($$, $1); }
	| shape_list ',' shape_el	{ $$ = $1; b_vpush($$, $3); }
	;

int_list: INT				{ $$ = b_vlist(b); b_vpush($$, b_int(&$1)); }
	| int_list ',' INT		{ $$ = $1; b_vpush($$, b_int(&$3)); }
	;

%%

/* Syntax errors: classify the unexpected token and hand the expected ones
 * to build.c, which knows the line and its open brackets. */
static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner, BuildCtx *b)
{
	(void)scanner;
	yysymbol_kind_t got = yypcontext_token(ctx);
	yysymbol_kind_t exp[YYNTOKENS];
	const char *names[YYNTOKENS];
	int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS), k = 0;
	for (int i = 0; i < n; i++)
		if (exp[i] != YYSYMBOL_SCALAR && exp[i] != YYSYMBOL_TSTR && exp[i] != YYSYMBOL_SHAPE &&
		    exp[i] != YYSYMBOL_ABSTRACT && exp[i] != YYSYMBOL_ATTRBLOCK && exp[i] != YYSYMBOL_TYPELINE &&
		    exp[i] != YYSYMBOL_SCOPE_NL)
			names[k++] = yysymbol_name(exp[i]); /* IDENT, '(', '<' or ':' is expected wherever they are */
	if (got == YYSYMBOL_SCALAR || got == YYSYMBOL_TSTR)
		got = YYSYMBOL_IDENT;
	if (got == YYSYMBOL_SHAPE)
		got = YYTRANSLATE('(');
	if (got == YYSYMBOL_ABSTRACT)
		got = YYTRANSLATE('<');
	if (got == YYSYMBOL_ATTRBLOCK)
		got = YYTRANSLATE('{');
	if (got == YYSYMBOL_SCOPE_NL)
		got = YYSYMBOL_SCOPE_LINE;
	if (got == YYSYMBOL_TYPELINE)
		got = YYTRANSLATE(':');
	const char *gn = yysymbol_name(got);
	int cls = SE_OTHER;
	switch (got) {
	case YYSYMBOL_NL: cls = SE_EOL; break;
	case YYSYMBOL_BADCHAR: cls = SE_BADCHAR; break;
	case YYSYMBOL_BADSTRING: cls = SE_BADSTRING; break;
	case YYSYMBOL_BADINT: cls = SE_BADINT; break;
	case YYSYMBOL_UNTERMINATED: cls = SE_UNTERMINATED; break;
	case YYSYMBOL_TOODEEP: cls = SE_TOODEEP; break;
	default:
		if (gn[0] == '\'' && gn[1] && gn[2] == '\'' && strchr("([{<", gn[1]))
			cls = SE_OPEN;
		else if (gn[0] == '\'' && gn[1] && gn[2] == '\'' && strchr(")]}>", gn[1]))
			cls = SE_CLOSE;
	}
	b_syntax_error_at(b, LOC(*yypcontext_location(ctx)), cls, gn, names, k);
	return 0;
}
