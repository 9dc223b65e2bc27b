/* parser.y - pure bison grammar for MindSpore IR dumps (ir-format.md §1).
 *
 * A file is a sequence of lines; each line kind is one rule, and every action
 * is a one-line call into build.c, which assembles the module (current graph,
 * last node for type and scope lines, pending comments).  Values, types and
 * attribute groups are parsed fully here.
 */
%define api.pure full
%define api.prefix {ir_yy}
%define parse.error detailed
%locations
%expect 0
%param {void *scanner}
%parse-param {BuildCtx *b}

%code requires {
#include "sappc.h"
#include "build.h"
}

%code {
int ir_yylex(IR_YYSTYPE *lval, IR_YYLTYPE *lloc, void *scanner);
static void ir_yyerror(IR_YYLTYPE *l, void *scanner, BuildCtx *b, const char *msg)
{
	(void)scanner;
	b_syntax_error(b, l->first_line, l->first_column, msg);
}
#define LOC(l) ((Loc){(uint32_t)(l).first_line, (uint32_t)(l).first_column})
}

%union {
	Tok tok;
	Value v;
	VList *vl;
	Abs *abs;
	Groups *gr;
	Sym s;
}

%token <tok> NODEDEF PARAMDEF PARAMREF LOCALREF FOREIGN GRAPHREF FUNCUNION
%token <tok> INT FLOAT STRING BAREWORD IDENT RAW REFKEY INSTANCE
%token <tok> HDR_ENTRY HDR_NSUB HDR_ATTRS HDR_NPARAMS HDR_PARAMS HDR_PARAMETERS
%token <tok> SCOPE_LINE ORDER_HDR CYCLE_MARK COMMENT TEXTLINE ATTRLINE
%token <tok> SG_ATTR SG_INSTANCE SG_SYMENG SG_INDIRECT SUBGRAPH PARENT END_GRAPH
%token <tok> COUNT_HDR COUNT_NODES COUNT_CNODES RETURN
%token PATTRS CATTRS PRIMAL STRAT_OPEN ARROW VALDOTS NL
%token BADCHAR BADSTRING BADINT UNTERMINATED TOODEEP

%type <v> value callee titem shape_el
%type <vl> vals vals_opt cargs cargs_opt dict dict_opt titems shape_list int_list abs_list abs_list_opt ptail sg_params
%type <abs> abstract
%type <gr> groups attrlist attrlist_opt strat_rest
%type <s> tstr tstr_list

%%

file:	  %empty
	| file line
	;

line:	  NL
	| HDR_ENTRY NL			{ b_entry(b, &$1); }
	| HDR_NSUB NL
	| HDR_ATTRS NL			{ b_header_attrs(b); }
	| ATTRLINE NL			{ b_attrline(b, &$1); }
	| HDR_NPARAMS NL
	| HDR_PARAMS NL
	| PARAMDEF abstract ptail NL	{ b_paramdef(b, LOC(@1), &$1, $2, $3); }
	| COUNT_HDR NL
	| COUNT_NODES NL
	| COUNT_CNODES NL
	| SG_INDIRECT NL		{ b_indirect(b, &$1); }
	| SG_ATTR NL			{ b_sg_attr(b); }
	| SG_INSTANCE NL		{ b_sg_instance(b, &$1); }
	| SG_SYMENG NL			{ b_sg_symeng(b, &$1); }
	| HDR_PARAMETERS INT ',' '(' abs_list_opt ')' NL	{ b_sg_parameters(b, $5); }
	| SUBGRAPH GRAPHREF '(' sg_params ')' '{' NL	{ b_sg_open(b, LOC(@1), &$2, NULL, $4); }
	| SUBGRAPH GRAPHREF PARENT '[' IDENT GRAPHREF ']' '(' sg_params ')' '{' NL	{ b_sg_open(b, LOC(@1), &$2, &$6, $9); }
	| END_GRAPH NL			{ b_sg_close(b, LOC(@1)); }
	| ORDER_HDR NL			{ b_order(b); }
	| COMMENT NL			{ b_comment(b, &$1); }
	| SCOPE_LINE NL			{ b_scope(b, LOC(@1), &$1); }
	| CYCLE_MARK NL			{ b_cycle(b, &$1); }
	| TEXTLINE NL			{ b_textline(b, &$1); }
	| NODEDEF callee '(' vals_opt ')' groups NL	{ b_node(b, LOC(@1), &$1, &$2, $4, $6); }
	| NODEDEF callee '(' vals_opt ')' groups ':' '(' abs_list_opt ')' ARROW '(' abstract ')' NL
					{ b_node(b, LOC(@1), &$1, &$2, $4, $6); b_typeline(b, LOC(@7), $9, $13); }
	| RETURN '(' vals_opt ')' groups NL	{ b_return(b, LOC(@1), $3, $5); }
	| ':' '(' abs_list_opt ')' ARROW '(' abstract ')' NL	{ b_typeline(b, LOC(@1), $3, $7); }
	| ':' '(' abs_list_opt ')' NL	{ b_typeline(b, LOC(@1), $3, NULL); }
	| error NL			{ yyerrok; if (b_abort(b)) YYABORT; }
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
	| groups PATTRS '{' attrlist_opt '}'	{ $$ = $1; b_group_merge(b, $$, $4, 0); }
	| groups CATTRS '{' attrlist_opt '}'	{ $$ = $1; b_group_merge(b, $$, $4, 1); }
	| groups PRIMAL '{' attrlist_opt '}'	{ $$ = $1; b_group_merge(b, $$, $4, 2); }
	| groups STRAT_OPEN value strat_rest '}'	{ $$ = $1; b_group_strategy(b, $$, &$3, $4); }
	| groups PATTRS STRAT_OPEN value strat_rest '}'	{ $$ = $1; b_group_attr_strategy(b, $$, &$4, $5, 0); }
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
	;

tstr:	  IDENT				{ $$ = $1.s; }
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
