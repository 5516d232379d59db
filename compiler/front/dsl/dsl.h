/* dsl.h — the model DSL's syntax tree, shared by the parser (dsl.y, with
 * the lexer dsl.l) and the lowering to the IR (lower.c).
 *
 * This header stays inside compiler/front/dsl/: the rest of the compiler sees only
 * dsl_import() in mpcc.h, as it sees only onnx_import() of the ONNX side.
 * Everything here lives in the compiler's arena.
 */
#ifndef MPCC_DSL_H
#define MPCC_DSL_H

#include "mpcc.h"

enum { DSL_MAX_DEPTH = 200 };   /* nesting of expressions and blocks */

typedef struct DslPos {
    int line, col;
} DslPos;

/* A placement hint: @gpu1, @cuda(0), @cpu, @cpu2, @stage(2). */
typedef struct Hint {
    DslPos pos;
    const char *name;        /* as written after '@' */
    int64_t arg;             /* the number in parentheses, -1 if none */
    struct Hint *next;
} Hint;

typedef enum ExprKind {
    E_INT, E_FLOAT, E_STR, E_NAME, E_LIST, E_CALL, E_BINOP, E_NEG, E_INDEX
} ExprKind;

typedef struct Expr Expr;

/* One item of x[a:b, :, c]: a range (lo and hi may be NULL) or an index. */
typedef struct SliceItem {
    DslPos pos;
    Expr *lo, *hi;
    bool range;
} SliceItem;

struct Expr {
    ExprKind kind;
    DslPos pos;              /* the operator, the callee's name, the literal */
    int depth;               /* height of the tree, bounded by DSL_MAX_DEPTH */
    int64_t i;               /* E_INT */
    double f;                /* E_FLOAT */
    const char *s;           /* E_STR text, E_NAME / E_CALL name */
    char op;                 /* E_BINOP: + - * / @ */
    Expr **items;            /* E_LIST items, E_CALL arguments, E_BINOP lhs and rhs,
                                E_NEG / E_INDEX operand in items[0] */
    const char **keys;       /* E_CALL: keyword of each argument, NULL if positional */
    DslPos *key_pos;
    int nitems;
    const char *as;          /* E_CALL: `as NAME`, the block instance's name */
    DslPos as_pos;
    SliceItem *slices;       /* E_INDEX */
    int nslices;
};

typedef enum StmtKind {
    S_MODEL, S_SEED, S_INPUT, S_PARAM, S_DEF, S_ASSIGN, S_RETURN, S_OUTPUT,
    S_LOSS, S_REPEAT, S_PLACE
} StmtKind;

/* One dimension of an input's shape: a number or a symbolic name. */
typedef struct Dim {
    DslPos pos;
    int64_t value;           /* -1 when symbolic */
    const char *sym;
} Dim;

typedef struct Stmt Stmt;

typedef struct Block {
    Stmt **stmts;
    int n, cap;
} Block;

struct Stmt {
    StmtKind kind;
    DslPos pos;              /* the keyword, or the first target */
    const char *name;        /* S_MODEL, S_INPUT, S_PARAM, S_DEF */
    DslPos name_pos;
    int64_t i;               /* S_SEED */
    const char **names;      /* S_ASSIGN targets, S_OUTPUT names, S_DEF parameters */
    DslPos *name_pos_list;
    Expr **defaults;         /* S_DEF: default of each parameter, or NULL */
    int nnames;
    Expr *expr;              /* S_ASSIGN value, S_LOSS, S_REPEAT count, S_PARAM init */
    Expr **exprs;            /* S_RETURN values, S_PARAM shape */
    int nexprs;
    const char *dtype;       /* S_INPUT */
    DslPos dtype_pos;
    Dim *dims;               /* S_INPUT */
    int ndims;
    Hint *hints;             /* S_ASSIGN, S_DEF, S_PLACE, S_PARAM */
    Block body;              /* S_DEF, S_REPEAT, S_PLACE */
};

/* The parser's state, shared with the lexer (its "extra" data). */
typedef struct DslParser {
    Arena *a;
    const char *file;
    int nerrors;
    Block program;
    void *scanner;           /* the flex scanner */
    bool ender;              /* the last token can end a statement */
    int depth;               /* open ( and [ : newlines inside do not end statements */
    DslPos open[32];         /* where the innermost of them were opened */
    int line, col;           /* where the lexer is */
    const char *tok;         /* the text of the last token, for syntax errors */
    int tok_len;
    bool at_eof;
} DslParser;

/* Parses text (n bytes, NULs allowed) into P->program. Syntax errors are
 * reported as they are found, with recovery at the next line; the result
 * is the number of errors (0: the tree is complete). */
int dsl_parse(DslParser *P, const char *text, size_t n);

/* Reports an error at file:line:col without stopping. */
void dsl_report(DslParser *P, DslPos pos, const char *fmt, ...) FMT(3, 4);

/* Tree building, for the parser's actions. */
Expr *dsl_expr(DslParser *P, ExprKind k, DslPos pos);
void dsl_expr_add(DslParser *P, Expr *e, const char *key, DslPos key_pos, Expr *item);
Stmt *dsl_stmt(DslParser *P, StmtKind k, DslPos pos);
void dsl_block_add(DslParser *P, Block *b, Stmt *s);
void dsl_name_add(DslParser *P, Stmt *s, const char *name, DslPos pos, Expr *dflt);

extern const char dsl_prelude[];   /* prelude.c: the layers, written in the DSL */

#endif
