/* dsl.y — the model DSL's grammar (bison): tokens from dsl.l -> syntax tree.
 *
 * A program is a list of statements, one per line (or separated by ';'):
 *
 *   model NAME                      seed N
 *   input NAME: DTYPE[DIM, ...]     param NAME: [SHAPE] = INIT
 *   def NAME(ARG, ARG=DEFAULT) @HINT { ... }
 *   A, B = EXPR @HINT               return EXPR, ...
 *   output NAME, ...                loss EXPR
 *   repeat N { ... }                @HINT { ... }
 *
 * Expressions: numbers, strings, names, [lists], calls f(a, key=b) with an
 * optional `as NAME`, slices x[a:b, :], unary -, and + - * / @ with the
 * usual precedence. A syntax error is reported where it is found and the
 * parser resumes at the next line, so one run reports several.
 */
%define api.pure full
%define api.prefix {dsl}
%define parse.error custom
%locations
%parse-param {DslParser *P} {void *scanner}
%lex-param {void *scanner}

%code requires {
#include "dsl.h"
}

%code {
#include <string.h>

int dsllex(DSLSTYPE *lval, DSLLTYPE *lloc, void *scanner);
void *dsl_scanner_new(DslParser *p, const char *text, size_t n);
void dsl_scanner_free(void *scanner);

#define YYMAXDEPTH 2000   /* deeper nesting is an error, not a deep recursion later */

static DslPos pos_of(DSLLTYPE l)
{
    return (DslPos){l.first_line, l.first_column};
}

static void dslerror(DSLLTYPE *loc, DslParser *P, void *scanner, const char *msg)
{
    (void)scanner;
    if (strcmp(msg, "memory exhausted") == 0)
        msg = "the program is nested too deeply";
    dsl_report(P, pos_of(*loc), "%s", msg);
}

static Expr *binop(DslParser *P, DSLLTYPE l, char op, Expr *a, Expr *b)
{
    Expr *e = dsl_expr(P, E_BINOP, pos_of(l));
    e->op = op;
    dsl_expr_add(P, e, NULL, (DslPos){0, 0}, a);
    dsl_expr_add(P, e, NULL, (DslPos){0, 0}, b);
    return e;
}

static Expr *unary(DslParser *P, ExprKind k, DslPos pos, Expr *a)
{
    Expr *e = dsl_expr(P, k, pos);
    dsl_expr_add(P, e, NULL, (DslPos){0, 0}, a);
    return e;
}

static void slice_add(DslParser *P, Expr *e, SliceItem it)
{
    e->slices = arena_grow(P->a, e->slices, (size_t)e->nslices, (size_t)e->nslices + 1,
                           sizeof(SliceItem));
    e->slices[e->nslices++] = it;
}

static Hint *hint(DslParser *P, DSLLTYPE l, const char *name, int64_t arg)
{
    Hint *h = arena_alloc(P->a, sizeof *h);
    h->pos = pos_of(l);
    h->name = name;
    h->arg = arg;
    return h;
}

static void dims_add(DslParser *P, Stmt *s, Dim d)
{
    s->dims = arena_grow(P->a, s->dims, (size_t)s->ndims, (size_t)s->ndims + 1, sizeof(Dim));
    s->dims[s->ndims++] = d;
}
}

%union {
    int64_t i;
    double f;
    const char *s;
    Expr *e;
    Stmt *st;
    Hint *h;
    Block *b;
    SliceItem sl;
    Dim dim;
}

%token <s> IDENT "name" STRING "string" HINT "placement hint"
%token <i> INT "integer"
%token <f> FLOAT "number"
%token NL "end of line"
%token DEF "'def'" RETURN "'return'" PARAM "'param'" INPUT "'input'" OUTPUT "'output'"
%token LOSS "'loss'" REPEAT "'repeat'" MODEL "'model'" SEED "'seed'" AS "'as'"

%type <b> stmts block
%type <st> stmt input_stmt dims param_stmt def_head assign targets names
%type <e> expr postfix index primary call args exprs exprs_opt
%type <h> hints hints_opt hint
%type <sl> slice
%type <dim> dim

%left '+' '-'
%left '*' '/' '@'
%precedence NEG

%%

program
    : stmts                     { P->program = *$1; }
    ;

stmts
    : %empty                    { $$ = arena_alloc(P->a, sizeof(Block)); }
    | stmts NL                  { $$ = $1; }
    | stmts stmt NL             { $$ = $1; if ($2) dsl_block_add(P, $$, $2); }
    | stmts error NL            { $$ = $1; yyerrok; }
    ;

block
    : '{' stmts '}'             { $$ = $2; }
    ;

stmt
    : MODEL IDENT               { $$ = dsl_stmt(P, S_MODEL, pos_of(@1)); $$->name = $2;
                                  $$->name_pos = pos_of(@2); }
    | SEED INT                  { $$ = dsl_stmt(P, S_SEED, pos_of(@1)); $$->i = $2; }
    | input_stmt
    | param_stmt
    | def_head block            { $$ = $1; $$->body = *$2; }
    | assign hints_opt          { $$ = $1; $$->hints = $2; }
    | RETURN exprs              { $$ = dsl_stmt(P, S_RETURN, pos_of(@1));
                                  $$->exprs = $2->items; $$->nexprs = $2->nitems; }
    | OUTPUT names              { $$ = $2; $$->kind = S_OUTPUT; $$->pos = pos_of(@1); }
    | LOSS expr                 { $$ = dsl_stmt(P, S_LOSS, pos_of(@1)); $$->expr = $2; }
    | REPEAT expr block         { $$ = dsl_stmt(P, S_REPEAT, pos_of(@1)); $$->expr = $2;
                                  $$->body = *$3; }
    | hints block               { $$ = dsl_stmt(P, S_PLACE, $1->pos); $$->hints = $1;
                                  $$->body = *$2; }
    ;

input_stmt
    : INPUT IDENT ':' IDENT '[' dims ']'
                                { $$ = $6; $$->pos = pos_of(@1); $$->name = $2;
                                  $$->name_pos = pos_of(@2); $$->dtype = $4;
                                  $$->dtype_pos = pos_of(@4); }
    | INPUT IDENT ':' IDENT '[' ']'
                                { $$ = dsl_stmt(P, S_INPUT, pos_of(@1)); $$->name = $2;
                                  $$->name_pos = pos_of(@2); $$->dtype = $4;
                                  $$->dtype_pos = pos_of(@4); }
    ;

dims
    : dim                       { $$ = dsl_stmt(P, S_INPUT, pos_of(@1)); dims_add(P, $$, $1); }
    | dims ',' dim              { $$ = $1; dims_add(P, $$, $3); }
    ;

dim
    : INT                       { $$ = (Dim){pos_of(@1), $1, NULL}; }
    | IDENT                     { $$ = (Dim){pos_of(@1), -1, $1}; }
    ;

param_stmt
    : PARAM IDENT ':' '[' exprs_opt ']' '=' expr
                                { $$ = dsl_stmt(P, S_PARAM, pos_of(@1)); $$->name = $2;
                                  $$->name_pos = pos_of(@2); $$->exprs = $5->items;
                                  $$->nexprs = $5->nitems; $$->expr = $8; }
    ;

def_head
    : DEF IDENT '(' ')' hints_opt
                                { $$ = dsl_stmt(P, S_DEF, pos_of(@1)); $$->name = $2;
                                  $$->name_pos = pos_of(@2); $$->hints = $5; }
    | DEF IDENT '(' names ')' hints_opt
                                { $$ = $4; $$->kind = S_DEF; $$->pos = pos_of(@1);
                                  $$->name = $2; $$->name_pos = pos_of(@2); $$->hints = $6; }
    ;

/* Names with optional defaults: output lists, def parameters, targets. */
names
    : IDENT                     { $$ = dsl_stmt(P, S_ASSIGN, pos_of(@1));
                                  dsl_name_add(P, $$, $1, pos_of(@1), NULL); }
    | IDENT '=' expr            { $$ = dsl_stmt(P, S_ASSIGN, pos_of(@1));
                                  dsl_name_add(P, $$, $1, pos_of(@1), $3); }
    | names ',' IDENT           { $$ = $1; dsl_name_add(P, $$, $3, pos_of(@3), NULL); }
    | names ',' IDENT '=' expr  { $$ = $1; dsl_name_add(P, $$, $3, pos_of(@3), $5); }
    ;

assign
    : targets '=' expr          { $$ = $1; $$->expr = $3; }
    ;

targets
    : IDENT                     { $$ = dsl_stmt(P, S_ASSIGN, pos_of(@1));
                                  dsl_name_add(P, $$, $1, pos_of(@1), NULL); }
    | targets ',' IDENT         { $$ = $1; dsl_name_add(P, $$, $3, pos_of(@3), NULL); }
    ;

hints_opt
    : %empty                    { $$ = NULL; }
    | hints
    ;

hints
    : hint
    | hints hint                { $$ = $2; $$->next = $1; }
    ;

hint
    : HINT                      { $$ = hint(P, @1, $1, -1); }
    | HINT '(' INT ')'          { $$ = hint(P, @1, $1, $3); }
    ;

exprs_opt
    : %empty                    { $$ = dsl_expr(P, E_LIST, pos_of(@$)); }
    | exprs
    ;

exprs
    : expr                      { $$ = dsl_expr(P, E_LIST, pos_of(@1));
                                  dsl_expr_add(P, $$, NULL, pos_of(@1), $1); }
    | exprs ',' expr            { $$ = $1; dsl_expr_add(P, $$, NULL, pos_of(@3), $3); }
    ;

expr
    : expr '+' expr             { $$ = binop(P, @2, '+', $1, $3); }
    | expr '-' expr             { $$ = binop(P, @2, '-', $1, $3); }
    | expr '*' expr             { $$ = binop(P, @2, '*', $1, $3); }
    | expr '/' expr             { $$ = binop(P, @2, '/', $1, $3); }
    | expr '@' expr             { $$ = binop(P, @2, '@', $1, $3); }
    | '-' expr %prec NEG        { $$ = unary(P, E_NEG, pos_of(@1), $2); }
    | postfix
    ;

postfix
    : primary
    | index ']'
    ;

index
    : postfix '[' slice         { $$ = unary(P, E_INDEX, pos_of(@2), $1); slice_add(P, $$, $3); }
    | index ',' slice           { $$ = $1; slice_add(P, $$, $3); }
    ;

primary
    : INT                       { $$ = dsl_expr(P, E_INT, pos_of(@1)); $$->i = $1; }
    | FLOAT                     { $$ = dsl_expr(P, E_FLOAT, pos_of(@1)); $$->f = $1; }
    | STRING                    { $$ = dsl_expr(P, E_STR, pos_of(@1)); $$->s = $1; }
    | IDENT                     { $$ = dsl_expr(P, E_NAME, pos_of(@1)); $$->s = $1; }
    | call ')'                  { $$ = $1; }
    | call ')' AS IDENT         { $$ = $1; $$->as = $4; $$->as_pos = pos_of(@4); }
    | '(' expr ')'              { $$ = $2; }
    | '[' exprs_opt ']'         { $$ = $2; $$->pos = pos_of(@1); }
    ;

call
    : IDENT '('                 { $$ = dsl_expr(P, E_CALL, pos_of(@1)); $$->s = $1; }
    | IDENT '(' args            { $$ = $3; $$->pos = pos_of(@1); $$->s = $1; }
    ;

args
    : expr                      { $$ = dsl_expr(P, E_CALL, pos_of(@1));
                                  dsl_expr_add(P, $$, NULL, pos_of(@1), $1); }
    | IDENT '=' expr            { $$ = dsl_expr(P, E_CALL, pos_of(@1));
                                  dsl_expr_add(P, $$, $1, pos_of(@1), $3); }
    | args ',' expr             { $$ = $1; dsl_expr_add(P, $$, NULL, pos_of(@3), $3); }
    | args ',' IDENT '=' expr   { $$ = $1; dsl_expr_add(P, $$, $3, pos_of(@3), $5); }
    ;

slice
    : expr                      { $$ = (SliceItem){pos_of(@1), $1, NULL, false}; }
    | ':'                       { $$ = (SliceItem){pos_of(@1), NULL, NULL, true}; }
    | expr ':'                  { $$ = (SliceItem){pos_of(@1), $1, NULL, true}; }
    | ':' expr                  { $$ = (SliceItem){pos_of(@1), NULL, $2, true}; }
    | expr ':' expr             { $$ = (SliceItem){pos_of(@1), $1, $3, true}; }
    ;

%%

/* ---- syntax errors: what was found, what was expected ---- */

static const char *token_text(DslParser *P, yysymbol_kind_t k)
{
    if (k == YYSYMBOL_YYEOF)
        return "end of file";
    if (k == YYSYMBOL_NL)
        return P->tok_len == 1 && P->tok[0] == ';' ? "';'" : "end of line";
    if (k == YYSYMBOL_STRING)
        return "a string";
    int n = P->tok_len < 40 ? P->tok_len : 40;
    char buf[48];
    int k2 = 0;
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)P->tok[i];
        buf[k2++] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    buf[k2] = 0;
    return arena_printf(P->a, "'%s'", buf);
}

/* bison's names of the tokens, without the quotes of string aliases. */
static const char *symbol_text(yysymbol_kind_t k)
{
    const char *s = yysymbol_name(k);
    if (s[0] == '"') {
        static char buf[64];
        size_t n = strlen(s);
        snprintf(buf, sizeof buf, "%.*s", (int)(n >= 2 ? n - 2 : 0), s + 1);
        return buf;
    }
    return s;
}

static int yyreport_syntax_error(const yypcontext_t *ctx, DslParser *P, void *scanner)
{
    (void)scanner;
    yysymbol_kind_t expected[5];
    int n = yypcontext_expected_tokens(ctx, expected, 5);
    const char *found = token_text(P, yypcontext_token(ctx));
    char list[256] = "";
    for (int i = 0; i < n && n <= 4; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                 symbol_text(expected[i]));
    }
    DslPos pos = pos_of(*yypcontext_location(ctx));
    const char *open = "";
    if (P->depth > 0 && P->depth <= 32 && P->open[P->depth - 1].line < pos.line)
        open = arena_printf(P->a, " (to close the bracket opened at %d:%d)",
                            P->open[P->depth - 1].line, P->open[P->depth - 1].col);
    if (n > 0 && n <= 4)
        dsl_report(P, pos, "unexpected %s; expected %s%s", found, list, open);
    else
        dsl_report(P, pos, "unexpected %s%s", found, open);
    P->depth = 0;   /* so that recovery finds the end of the line */
    return 0;
}

/* ---- the tree ---- */

enum { MAX_ERRORS = 20 };

void dsl_report(DslParser *P, DslPos pos, const char *fmt, ...)
{
    if (P->nerrors++ >= MAX_ERRORS)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    Loc loc = {.file = P->file, .index = -1, .line = pos.line, .col = pos.col};
    if (P->nerrors == MAX_ERRORS)
        report_at(&loc, "%s (and more errors; stopping here)", msg);
    else
        report_at(&loc, "%s", msg);
}

Expr *dsl_expr(DslParser *P, ExprKind k, DslPos pos)
{
    Expr *e = arena_alloc(P->a, sizeof *e);
    e->kind = k;
    e->pos = pos;
    e->depth = 1;
    return e;
}

void dsl_expr_add(DslParser *P, Expr *e, const char *key, DslPos key_pos, Expr *item)
{
    size_t n = (size_t)e->nitems;
    e->items = arena_grow(P->a, e->items, n, n + 1, sizeof(Expr *));
    e->keys = arena_grow(P->a, e->keys, n, n + 1, sizeof(char *));
    e->key_pos = arena_grow(P->a, e->key_pos, n, n + 1, sizeof(DslPos));
    e->items[n] = item;
    e->keys[n] = key;
    e->key_pos[n] = key_pos;
    e->nitems++;
    if (item->depth + 1 > e->depth) {
        e->depth = item->depth + 1;
        if (e->depth == DSL_MAX_DEPTH + 1)
            dsl_report(P, item->pos, "the expression is nested too deeply (more than %d levels)",
                       DSL_MAX_DEPTH);
    }
}

Stmt *dsl_stmt(DslParser *P, StmtKind k, DslPos pos)
{
    Stmt *s = arena_alloc(P->a, sizeof *s);
    s->kind = k;
    s->pos = pos;
    return s;
}

void dsl_block_add(DslParser *P, Block *b, Stmt *s)
{
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 8;
        b->stmts = arena_grow(P->a, b->stmts, (size_t)b->n, (size_t)cap, sizeof(Stmt *));
        b->cap = cap;
    }
    b->stmts[b->n++] = s;
}

void dsl_name_add(DslParser *P, Stmt *s, const char *name, DslPos pos, Expr *dflt)
{
    size_t n = (size_t)s->nnames;
    s->names = arena_grow(P->a, s->names, n, n + 1, sizeof(char *));
    s->name_pos_list = arena_grow(P->a, s->name_pos_list, n, n + 1, sizeof(DslPos));
    s->defaults = arena_grow(P->a, s->defaults, n, n + 1, sizeof(Expr *));
    s->names[n] = name;
    s->name_pos_list[n] = pos;
    s->defaults[n] = dflt;
    s->nnames++;
}

static void free_scanner(void *scanner)
{
    dsl_scanner_free(scanner);
}

int dsl_parse(DslParser *P, const char *text, size_t n)
{
    P->line = 1;
    P->col = 1;
    if (n > (size_t)1 << 30) {
        dsl_report(P, (DslPos){0, 0}, "the file is larger than 1 GB");
        return P->nerrors;
    }
    P->scanner = dsl_scanner_new(P, text, n);
    if (!P->scanner) {
        dsl_report(P, (DslPos){0, 0}, "cannot start the lexer");
        return P->nerrors;
    }
    arena_defer(P->a, free_scanner, P->scanner);   /* also when an error unwinds */
    dslparse(P, P->scanner);
    return P->nerrors;
}
