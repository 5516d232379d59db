/* lower.c — the DSL front end: model.mp -> syntax tree (dsl.y) -> IR graph.
 *
 * Lowering runs the program once, as an interpreter would: names hold
 * values (tensors of the graph, or compile-time numbers, strings and
 * lists), a call of a `def` block runs its body in a new frame (inlining),
 * `repeat` runs its body N times, and every operation on a tensor adds one
 * node of the op table (ops.def), with the attributes the ONNX importer
 * would give it and a Loc (file:line:col) of the call or operator.
 * Compile-time arithmetic on numbers is folded here. Shapes are left to
 * bind_shapes and infer_shapes, which report at the nodes' Locs.
 *
 * Parameters are named after the block instances that declare them, as
 * PyTorch names a state_dict: `fc1.weight`, `blocks.3.ln1.bias`. Their
 * initial values are drawn at compile time from the model's seed (see
 * init_param), so the weights file and --emit-onnx hold the same numbers.
 */
#include "dsl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

size_t dsl_param_limit = (size_t)16 << 30;   /* bytes of initial weights */

enum {
    MAX_NODES = 1 << 20,
    MAX_STEPS = 10000000,       /* statements run, repeats included */
    MAX_CALL_DEPTH = 64,
    MAX_REPEAT = 100000,
    OPSET = 17,
};

/* ---- values of the language ---- */

typedef enum DvKind { DV_NONE, DV_TENSOR, DV_INT, DV_FLOAT, DV_STR, DV_LIST, DV_TUPLE } DvKind;

typedef struct Dv {
    DvKind kind;
    uint32_t v;              /* DV_TENSOR: the value id */
    DType dt;                /* DV_TENSOR: its element type, as far as known here */
    int64_t i;
    double f;
    const char *s;
    struct Dv *items;        /* DV_LIST, DV_TUPLE */
    int n;
} Dv;

typedef struct Var {
    const char *name;
    Dv val;
    DslPos pos;
    struct Var *next;
} Var;

typedef struct Def {
    const Stmt *s;
    const char *file;        /* the user's file or "<prelude>" */
    struct Def *next;
} Def;

typedef struct Used {
    const char *name;
    int line;
    struct Used *next;
} Used;

/* One running block: its variables, the path of its instance (for
 * parameter names) and the instance names it has given out. */
typedef struct Frame {
    Var *vars;
    const char *path;        /* "" at the top, "enc.blk0." inside */
    Used *used;
    const Def *def;          /* NULL at the top */
    Dv ret;
    bool returned;
    const char *ret_name;    /* the name the caller wants for the result */
    const char *rep_suffix;  /* ".3" inside iteration 3 of a repeat */
    struct Frame *up;
} Frame;

typedef struct Place {
    int32_t stage;
    const char *device;
} Place;

typedef enum { INIT_CONST, INIT_UNIFORM, INIT_NORMAL } InitKind;

typedef struct Init {
    InitKind kind;
    double a, b;             /* constant a; uniform [a, b); normal mean a, std b */
} Init;

typedef struct PendingParam {
    uint32_t v;
    Init init;
} PendingParam;

typedef struct Lower {
    Arena *a;
    Graph *g;
    const char *file;        /* the user's file */
    const char *cur_file;    /* the file of the code being run */
    Def *defs;
    Frame *top;
    Place place;
    uint64_t seed;
    bool seed_given, name_given;
    DslPos loss_pos;
    bool has_loss;
    uint32_t *outputs;
    uint32_t noutputs;
    PendingParam *params;
    uint32_t nparams;
    size_t param_bytes;
    long steps;
    int call_depth;
    bool in_prelude_call;    /* nodes get the Loc of the user's call */
    DslPos call_site;
} Lower;

static Loc loc_at(Lower *L, DslPos p)
{
    if (L->in_prelude_call)
        return (Loc){.file = L->file, .index = -1, .line = L->call_site.line,
                     .col = L->call_site.col};
    return (Loc){.file = L->cur_file, .index = -1, .line = p.line, .col = p.col};
}

static _Noreturn FMT(3, 4) void fail(Lower *L, DslPos p, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    Loc loc = loc_at(L, p);
    error_at(&loc, "%s", msg);
}

static const char *esc(Lower *L, const char *s)
{
    return str_escaped(L->a, s, 80);
}

static const char *kind_name(DvKind k)
{
    switch (k) {
    case DV_NONE: return "nothing";
    case DV_TENSOR: return "a tensor";
    case DV_INT: return "an integer";
    case DV_FLOAT: return "a number";
    case DV_STR: return "a string";
    case DV_LIST: return "a list";
    case DV_TUPLE: return "several values";
    }
    return "?";
}

/* ---- suggestions for misspelt names ---- */

static int edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 40 || m > 40)
        return 99;
    int d[41][41];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int sub = d[i - 1][j - 1] + ((a[i - 1] | 32) != (b[j - 1] | 32));
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[n][m];
}

typedef struct Suggest {
    const char *best;
    int dist;
} Suggest;

static void consider(Suggest *s, const char *want, const char *cand)
{
    int d = edit_distance(want, cand);
    int limit = strlen(want) <= 3 ? 1 : 2;
    if (d <= limit && (!s->best || d < s->dist))
        s->best = cand, s->dist = d;
}

static const char *did_you_mean(Lower *L, const Suggest *s)
{
    return s->best ? arena_printf(L->a, "; did you mean '%s'?", s->best) : "";
}

/* ---- variables ---- */

static Var *find_var(Frame *f, const char *name)
{
    for (Var *v = f->vars; v; v = v->next)
        if (strcmp(v->name, name) == 0)
            return v;
    return NULL;
}

static void set_var(Lower *L, Frame *f, const char *name, DslPos pos, Dv val)
{
    Var *v = find_var(f, name);
    if (!v) {
        v = arena_alloc(L->a, sizeof *v);
        v->name = name;
        v->next = f->vars;
        f->vars = v;
    }
    v->val = val;
    v->pos = pos;
}

static const Def *find_def(Lower *L, const char *name)
{
    for (const Def *d = L->defs; d; d = d->next)
        if (strcmp(d->s->name, name) == 0)
            return d;
    return NULL;
}

/* Builtin ops are the non-internal rows of ops.def, matched without regard
 * to case: Relu, relu and RELU are the same op. */
static Op find_op(const char *name)
{
    for (int op = 1; op < OP_COUNT; op++)
        if (!(op_info[op].flags & OPF_INTERNAL) && strcasecmp(op_info[op].name, name) == 0)
            return (Op)op;
    return OP_UNKNOWN;
}

static _Noreturn void unknown_name(Lower *L, Frame *f, const char *name, DslPos pos)
{
    Suggest s = {0};
    for (Frame *fr = f; fr; fr = fr->up == NULL ? NULL : L->top)
        for (Var *v = fr->vars; v; v = v->next)
            consider(&s, name, v->name);
    fail(L, pos, "unknown name '%s'%s", esc(L, name), did_you_mean(L, &s));
}

static Dv lookup(Lower *L, Frame *f, const char *name, DslPos pos)
{
    Var *v = find_var(f, name);
    if (!v && f != L->top)
        v = find_var(L->top, name);   /* blocks see the top level's names */
    if (!v)
        unknown_name(L, f, name, pos);
    return v->val;
}

/* ---- building the graph ---- */

static const char *unique_name(Lower *L, const char *name)
{
    const char *u = name;
    for (int k = 1; ir_find(L->g, u) != NONE; k++)
        u = arena_printf(L->a, "%s.%d", name, k);
    return u;
}

static Dv tensor(uint32_t v, DType dt)
{
    return (Dv){.kind = DV_TENSOR, .v = v, .dt = dt};
}

/* Nodes and activations inside block instance "enc.blk0." are named
 * "enc.blk0/...", apart from the parameters' "enc.blk0.weight". */
static const char *node_path(Lower *L, Frame *f)
{
    size_t n = strlen(f->path);
    return n ? arena_printf(L->a, "%.*s/", (int)n - 1, f->path) : "";
}

static uint32_t new_const(Lower *L, Frame *f, DType dt, const Shape *s, const void *data,
                          size_t nbytes)
{
    Tensor *t = arena_alloc(L->a, sizeof *t);
    t->dtype = dt;
    t->shape = *s;
    t->nbytes = nbytes;
    t->data = nbytes ? memcpy(arena_alloc(L->a, nbytes), data, nbytes) : arena_alloc(L->a, 8);
    uint32_t v = ir_value(L->g, unique_name(L, arena_printf(L->a, "%sconst", node_path(L, f))));
    Value *val = &L->g->values[v];
    val->kind = VK_CONST;
    val->dtype = dt;
    val->shape = *s;
    val->typed = true;
    val->data = t;
    return v;
}

/* A number as a scalar (rank 0) or a list of numbers as a 1-D constant. */
static uint32_t const_from(Lower *L, Frame *f, const Dv *x, DType dt, DslPos pos)
{
    int n = x->kind == DV_LIST ? x->n : 1;
    const Dv *items = x->kind == DV_LIST ? x->items : x;
    Shape s = {x->kind == DV_LIST ? 1 : 0, {n}};
    size_t es = dtype_size(dt);
    uint8_t *buf = arena_array(L->a, (size_t)n ? (size_t)n : 1, es);
    for (int i = 0; i < n; i++) {
        const Dv *it = &items[i];
        if (it->kind != DV_INT && it->kind != DV_FLOAT)
            fail(L, pos, "expected numbers here, got %s", kind_name(it->kind));
        double d = it->kind == DV_INT ? (double)it->i : it->f;
        int64_t k = it->i;
        if (it->kind == DV_FLOAT && !dtype_is_float(dt)) {
            if (d != floor(d) || !(fabs(d) < 9e18))
                fail(L, pos, "expected integers here, got %g", d);
            k = (int64_t)d;
        }
        switch (dt) {
        case DT_F32: { float v = (float)d; memcpy(buf + i * 4, &v, 4); break; }
        case DT_F64: memcpy(buf + i * 8, &d, 8); break;
        case DT_I64: memcpy(buf + i * 8, &k, 8); break;
        case DT_I32: { int32_t v = (int32_t)k; memcpy(buf + i * 4, &v, 4); break; }
        case DT_BOOL: buf[i] = d != 0; break;
        default:
            fail(L, pos, "a number cannot be combined with a tensor of %s", dtype_name(dt));
        }
    }
    return new_const(L, f, dt, &s, buf, (size_t)n * es);
}

static uint32_t new_output(Lower *L, const char *name, uint32_t node)
{
    uint32_t v = ir_value(L->g, unique_name(L, name));
    Value *val = &L->g->values[v];
    val->producer = node;
    return v;
}

typedef struct NodeSpec {
    Op op;
    DslPos pos;
    uint32_t in[16];
    uint32_t nin;
    uint32_t nout;
    const char *out_name;    /* the variable it is assigned to, or NULL */
    Attr *attrs;
    uint32_t nattrs;
} NodeSpec;

static uint32_t add_node(Lower *L, Frame *f, NodeSpec *ns)
{
    Graph *g = L->g;
    if (g->nnodes >= MAX_NODES)
        fail(L, ns->pos, "the model has more than %d nodes; is a repeat count too large?",
             MAX_NODES);
    const char *name = arena_printf(L->a, "%s%s_%u", node_path(L, f), op_info[ns->op].name,
                                    g->nnodes);
    uint32_t id = ir_add_node(g, ns->op, op_info[ns->op].name, name);
    Node *n = &g->nodes[id];
    n->loc = loc_at(L, ns->pos);
    n->hint_stage = L->place.stage;
    n->hint_device = L->place.device;
    n->nin = ns->nin;
    n->in = arena_array(L->a, ns->nin + 1, sizeof(uint32_t));
    memcpy(n->in, ns->in, ns->nin * sizeof(uint32_t));
    n->attrs = ns->attrs ? ns->attrs : arena_alloc(L->a, sizeof(Attr));  /* never NULL, as
                                                                            the importer's */
    n->nattrs = ns->nattrs;
    n->nout = ns->nout;
    n->out = arena_array(L->a, ns->nout + 1, sizeof(uint32_t));
    for (uint32_t k = 0; k < ns->nout; k++) {
        const char *on = ns->out_name ? ns->out_name
                                      : arena_printf(L->a, "%s%s_out", node_path(L, f),
                                                     op_info[ns->op].name);
        if (k > 0)
            on = arena_printf(L->a, "%s_%u", on, k);
        uint32_t v = new_output(L, on, id);
        g->nodes[id].out[k] = v;
    }
    return id;
}

static Attr *add_attr(Lower *L, NodeSpec *ns, const char *name, AttrKind kind)
{
    ns->attrs = arena_grow(L->a, ns->attrs, ns->nattrs, ns->nattrs + 1, sizeof(Attr));
    Attr *a = &ns->attrs[ns->nattrs++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->kind = kind;
    return a;
}

static Dv simple_node(Lower *L, Frame *f, Op op, DslPos pos, uint32_t a, uint32_t b, DType dt,
                      const char *out_name)
{
    NodeSpec ns = {.op = op, .pos = pos, .in = {a, b}, .nin = b == NONE ? 1 : 2, .nout = 1,
                   .out_name = out_name};
    uint32_t id = add_node(L, f, &ns);
    return tensor(L->g->nodes[id].out[0], dt);
}

/* ---- the op table's argument names: the ARGS rows of ops.def ---- */
typedef struct OpArgs {
    const char *inputs, *attrs;   /* NULL: positional inputs only */
} OpArgs;

static const OpArgs op_args[OP_COUNT] = {
#define OP(id, name, mi, ma, mo, mao, fl)
#define ARGS(id, ins, at) [OP_##id] = {ins, at},
#include "ops.def"
#undef ARGS
#undef OP
};

static const OpArgs *args_of(Op op)
{
    return op_args[op].inputs ? &op_args[op] : NULL;
}

/* The k-th comma-separated item of list (its name, type letter in *type);
 * false when there is none. */
static bool list_item(const char *list, int k, char *name, size_t cap, char *type)
{
    const char *p = list;
    for (int i = 0; i < k; i++) {
        p = strchr(p, ',');
        if (!p)
            return false;
        p++;
    }
    if (!*p)
        return false;
    size_t n = strcspn(p, ",:");
    if (n == 0 || n >= cap)
        return false;
    memcpy(name, p, n);
    name[n] = 0;
    *type = p[n] == ':' ? p[n + 1] : 'T';
    return true;
}

static int list_find(const char *list, const char *name, char *type)
{
    char item[64];
    char t;
    for (int k = 0; list && list_item(list, k, item, sizeof item, &t); k++)
        if (strcmp(item, name) == 0) {
            if (type)
                *type = t;
            return k;
        }
    return -1;
}

/* ---- compile-time arithmetic ---- */

static bool is_num(const Dv *x)
{
    return x->kind == DV_INT || x->kind == DV_FLOAT;
}

static double num(const Dv *x)
{
    return x->kind == DV_INT ? (double)x->i : x->f;
}

static Dv int_dv(int64_t i)
{
    return (Dv){.kind = DV_INT, .i = i};
}

static Dv float_dv(double f)
{
    return (Dv){.kind = DV_FLOAT, .f = f};
}

static Dv fold_binop(Lower *L, char op, const Dv *a, const Dv *b, DslPos pos)
{
    if (a->kind == DV_INT && b->kind == DV_INT) {
        int64_t r;
        switch (op) {
        case '+':
            if (__builtin_add_overflow(a->i, b->i, &r))
                fail(L, pos, "%lld + %lld overflows", (long long)a->i, (long long)b->i);
            return int_dv(r);
        case '-':
            if (__builtin_sub_overflow(a->i, b->i, &r))
                fail(L, pos, "%lld - %lld overflows", (long long)a->i, (long long)b->i);
            return int_dv(r);
        case '*':
            if (__builtin_mul_overflow(a->i, b->i, &r))
                fail(L, pos, "%lld * %lld overflows", (long long)a->i, (long long)b->i);
            return int_dv(r);
        case '/':
            if (b->i == 0)
                fail(L, pos, "division by zero");
            if (!(a->i == INT64_MIN && b->i == -1) && a->i % b->i == 0)
                return int_dv(a->i / b->i);
            return float_dv((double)a->i / (double)b->i);
        default:
            break;
        }
    }
    double x = num(a), y = num(b);
    switch (op) {
    case '+': return float_dv(x + y);
    case '-': return float_dv(x - y);
    case '*': return float_dv(x * y);
    case '/':
        if (y == 0)
            fail(L, pos, "division by zero");
        return float_dv(x / y);
    default:
        fail(L, pos, "'@' multiplies tensors; both sides here are numbers");
    }
}

/* ---- expressions ---- */

typedef struct Want {
    const char *name;        /* the name for the result: the variable it goes to, with
                                its block's path; NULL for a temporary */
    int nresults;            /* the number of names it is unpacked into (1 if one) */
} Want;

static Dv eval(Lower *L, Frame *f, const Expr *e, Want w);
static void run_block(Lower *L, Frame *f, const Block *b, int depth);

static Dv eval1(Lower *L, Frame *f, const Expr *e)
{
    return eval(L, f, e, (Want){NULL, 1});
}

static Dv eval_value(Lower *L, Frame *f, const Expr *e)
{
    Dv x = eval1(L, f, e);
    if (x.kind == DV_NONE)
        fail(L, e->pos, "this block returns nothing; it has no 'return'");
    if (x.kind == DV_TUPLE)
        fail(L, e->pos, "this gives %d values; assign them to as many names: a, b = ...", x.n);
    return x;
}

static Dv as_tensor_or_num(Lower *L, Frame *f, const Expr *e)
{
    Dv x = eval_value(L, f, e);
    if (x.kind != DV_TENSOR && !is_num(&x))
        fail(L, e->pos, "expected a tensor or a number, got %s", kind_name(x.kind));
    return x;
}

static int64_t eval_int(Lower *L, Frame *f, const Expr *e, const char *what)
{
    Dv x = eval_value(L, f, e);
    if (x.kind == DV_FLOAT && x.f == floor(x.f) && fabs(x.f) < 9e18)
        return (int64_t)x.f;
    if (x.kind != DV_INT)
        fail(L, e->pos, "%s must be an integer known at compile time, not %s", what,
             kind_name(x.kind));
    return x.i;
}

static Dv arith(Lower *L, Frame *f, char op, Dv a, Dv b, DslPos pos, const char *name)
{
    if (is_num(&a) && is_num(&b))
        return fold_binop(L, op, &a, &b, pos);
    DType dt = a.kind == DV_TENSOR ? a.dt : b.dt;
    uint32_t x = a.kind == DV_TENSOR ? a.v : const_from(L, f, &a, dt, pos);
    uint32_t y = b.kind == DV_TENSOR ? b.v : const_from(L, f, &b, dt, pos);
    Op o = op == '+' ? OP_ADD : op == '-' ? OP_SUB : op == '*' ? OP_MUL
         : op == '/' ? OP_DIV : OP_MATMUL;
    return simple_node(L, f, o, pos, x, y, dt, name);
}

static DType out_dtype(Op op, const NodeSpec *ns, const DType *in_dt, uint32_t k)
{
    switch (op) {
    case OP_SHAPE: case OP_SIZE: case OP_ARGMAX: case OP_ARGMIN:
        return DT_I64;
    case OP_EQUAL: case OP_LESS: case OP_LESS_EQUAL: case OP_GREATER: case OP_GREATER_EQUAL:
    case OP_NOT: case OP_AND: case OP_OR: case OP_XOR:
        return DT_BOOL;
    case OP_CAST:
        for (uint32_t i = 0; i < ns->nattrs; i++)
            if (strcmp(ns->attrs[i].name, "to") == 0)
                return (DType)ns->attrs[i].i;
        return DT_F32;
    case OP_CONSTANT_OF_SHAPE:
        return DT_F32;
    case OP_WHERE:
        return in_dt[1];
    case OP_DROPOUT:
        return k == 1 ? DT_BOOL : in_dt[0];
    case OP_MAX_POOL:
        return k == 1 ? DT_I64 : in_dt[0];
    default:
        return in_dt[0];
    }
}

static const struct { const char *name; DType dt; } dtype_names[] = {
    {"f32", DT_F32}, {"f64", DT_F64}, {"f16", DT_F16}, {"bf16", DT_BF16},
    {"i64", DT_I64}, {"i32", DT_I32}, {"i16", DT_I16}, {"i8", DT_I8},
    {"u8", DT_U8}, {"bool", DT_BOOL},
};

static DType dtype_by_name(const char *s)
{
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (strcmp(dtype_names[i].name, s) == 0)
            return dtype_names[i].dt;
    return DT_UNDEFINED;
}

/* A keyword argument that is not an input: an attribute of the node. */
static void keyword_attr(Lower *L, NodeSpec *ns, const char *key, Dv x, DslPos pos)
{
    const char *opn = op_info[ns->op].name;
    switch (x.kind) {
    case DV_INT:
        add_attr(L, ns, key, AT_INT)->i = x.i;
        return;
    case DV_FLOAT:
        if (ns->op == OP_CONSTANT_OF_SHAPE && strcmp(key, "value") == 0) {
            Tensor *t = arena_alloc(L->a, sizeof *t);
            float v = (float)x.f;
            *t = (Tensor){.dtype = DT_F32, .shape = {1, {1}}, .nbytes = 4};
            t->data = memcpy(arena_alloc(L->a, 4), &v, 4);
            add_attr(L, ns, key, AT_TENSOR)->t = t;
            return;
        }
        add_attr(L, ns, key, AT_FLOAT)->f = x.f;
        return;
    case DV_STR:
        if (ns->op == OP_CAST && strcmp(key, "to") == 0) {
            DType dt = dtype_by_name(x.s);
            if (dt == DT_UNDEFINED)
                fail(L, pos, "Cast to '%s': the element types are f32, f64, f16, bf16, "
                     "i64, i32, i16, i8, u8 and bool", esc(L, x.s));
            add_attr(L, ns, key, AT_INT)->i = dt;
            return;
        }
        add_attr(L, ns, key, AT_STRING)->s = x.s;
        return;
    case DV_LIST: {
        bool any_float = false, all_str = x.n > 0;
        for (int i = 0; i < x.n; i++) {
            if (!is_num(&x.items[i]) && x.items[i].kind != DV_STR)
                fail(L, pos, "attribute '%s' of %s must be a list of numbers or strings",
                     esc(L, key), opn);
            any_float |= x.items[i].kind == DV_FLOAT;
            all_str &= x.items[i].kind == DV_STR;
        }
        if (all_str) {
            Attr *a = add_attr(L, ns, key, AT_STRINGS);
            a->n = (uint32_t)x.n;
            a->strs = arena_array(L->a, (size_t)x.n, sizeof(char *));
            for (int i = 0; i < x.n; i++)
                a->strs[i] = x.items[i].s;
            return;
        }
        Attr *a = add_attr(L, ns, key, any_float ? AT_FLOATS : AT_INTS);
        a->n = (uint32_t)x.n;
        if (any_float) {
            a->floats = arena_array(L->a, (size_t)x.n + 1, sizeof(double));
            for (int i = 0; i < x.n; i++)
                a->floats[i] = num(&x.items[i]);
        } else {
            a->ints = arena_array(L->a, (size_t)x.n + 1, sizeof(int64_t));
            for (int i = 0; i < x.n; i++) {
                if (x.items[i].kind == DV_STR)
                    fail(L, pos, "attribute '%s' of %s mixes numbers and strings",
                         esc(L, key), opn);
                a->ints[i] = x.items[i].i;
            }
        }
        return;
    }
    default:
        fail(L, pos, "attribute '%s' of %s must be a number, a string or a list known at "
             "compile time, not %s", esc(L, key), opn, kind_name(x.kind));
    }
}

static uint32_t input_value(Lower *L, Frame *f, Dv x, char type, DType like, DslPos pos)
{
    if (x.kind == DV_TENSOR)
        return x.v;
    if (!is_num(&x) && x.kind != DV_LIST)
        fail(L, pos, "expected a tensor, a number or a list of numbers, got %s",
             kind_name(x.kind));
    DType dt = type == 'I' ? DT_I64 : type == 'F' ? DT_F32 : type == 'B' ? DT_BOOL : like;
    return const_from(L, f, &x, dt, pos);
}

/* How many outputs a call of op makes when it is unpacked into `want`
 * names (1 if it is not unpacked). */
static uint32_t op_outputs(Lower *L, Op op, const NodeSpec *ns, int want, DslPos pos)
{
    const OpInfo *oi = &op_info[op];
    if (want > 1) {
        if (oi->max_out >= 0 && want > oi->max_out)
            fail(L, pos, "%s gives at most %d value%s, not %d", oi->name, oi->max_out,
                 oi->max_out == 1 ? "" : "s", want);
        return (uint32_t)want;
    }
    if (op == OP_SPLIT)
        fail(L, pos, "Split gives one value per part; assign them: a, b = Split(x, ...)");
    if (op == OP_BATCH_NORM)
        for (uint32_t i = 0; i < ns->nattrs; i++)
            if (strcmp(ns->attrs[i].name, "training_mode") == 0 && ns->attrs[i].i)
                return 3;   /* the running statistics, as PyTorch's training export */
    return (uint32_t)oi->min_out;
}

static Dv call_op(Lower *L, Frame *f, const Expr *e, Op op, Want w)
{
    const OpInfo *oi = &op_info[op];
    const OpArgs *oa = args_of(op);
    NodeSpec ns = {.op = op, .pos = e->pos, .out_name = w.name};
    Dv args[16];
    bool given[16] = {false};
    DslPos arg_pos[16];
    uint32_t nin = 0;
    DType like = DT_F32;
    bool like_set = false;
    if (e->as)
        fail(L, e->as_pos, "'as' names a block instance; %s is an op", oi->name);
    /* positional inputs first, then keywords that name inputs */
    for (int i = 0; i < e->nitems; i++) {
        if (e->keys[i])
            continue;
        if (nin >= 16)
            fail(L, e->items[i]->pos, "%s takes at most 16 inputs here", oi->name);
        args[nin] = eval_value(L, f, e->items[i]);
        arg_pos[nin] = e->items[i]->pos;
        given[nin++] = true;
    }
    for (int i = 0; i < e->nitems; i++) {
        if (!e->keys[i])
            continue;
        for (int j = 0; j < i; j++)
            if (e->keys[j] && strcmp(e->keys[j], e->keys[i]) == 0)
                fail(L, e->key_pos[i], "'%s' is given twice", esc(L, e->keys[i]));
        char type;
        int k = oa ? list_find(oa->inputs, e->keys[i], &type) : -1;
        if (k < 0)
            continue;
        if (given[k])
            fail(L, e->key_pos[i], "input '%s' of %s is given twice", esc(L, e->keys[i]),
                 oi->name);
        args[k] = eval_value(L, f, e->items[i]);
        arg_pos[k] = e->items[i]->pos;
        given[k] = true;
        if ((uint32_t)k + 1 > nin)
            nin = (uint32_t)k + 1;
    }
    if ((int)nin < oi->min_in || (oi->max_in >= 0 && (int)nin > oi->max_in)) {
        if (oi->min_in == oi->max_in)
            fail(L, e->pos, "%s takes %d input%s, got %u", oi->name, oi->min_in,
                 oi->min_in == 1 ? "" : "s", nin);
        if (oi->max_in < 0)
            fail(L, e->pos, "%s takes at least %d input%s, got %u", oi->name, oi->min_in,
                 oi->min_in == 1 ? "" : "s", nin);
        fail(L, e->pos, "%s takes %d to %d inputs, got %u", oi->name, oi->min_in,
             oi->max_in, nin);
    }
    for (uint32_t k = 0; k < nin; k++)
        if (given[k] && args[k].kind == DV_TENSOR && !like_set)
            like = args[k].dt, like_set = true;
    for (uint32_t k = 0; k < nin && !like_set; k++)   /* numbers only: int64 if whole */
        if (given[k] && args[k].kind == DV_FLOAT)
            like_set = true;
    if (!like_set)
        like = DT_I64;
    DType in_dt[16];
    for (uint32_t k = 0; k < nin; k++) {
        char type = 'T';
        char name[64];
        if (oa)
            for (int j = 0; list_item(oa->inputs, j, name, sizeof name, &type); j++)
                if (j == (int)k)
                    break;
        if (!oa || !list_item(oa->inputs, (int)k, name, sizeof name, &type))
            type = 'T';
        if (!given[k]) {
            ns.in[k] = NONE;
            in_dt[k] = like;
            continue;
        }
        ns.in[k] = input_value(L, f, args[k], type, like, arg_pos[k]);
        in_dt[k] = L->g->values[ns.in[k]].kind == VK_CONST ? L->g->values[ns.in[k]].dtype
                 : args[k].kind == DV_TENSOR ? args[k].dt : like;
    }
    ns.nin = nin;
    /* the other keywords are attributes */
    for (int i = 0; i < e->nitems; i++) {
        if (!e->keys[i] || (oa && list_find(oa->inputs, e->keys[i], NULL) >= 0))
            continue;
        if (!oa || list_find(oa->attrs, e->keys[i], NULL) < 0) {
            Suggest s = {0};
            char item[64], t;
            for (int k = 0; oa && list_item(oa->attrs, k, item, sizeof item, &t); k++)
                consider(&s, e->keys[i], arena_strdup(L->a, item));
            for (int k = 0; oa && list_item(oa->inputs, k, item, sizeof item, &t); k++)
                consider(&s, e->keys[i], arena_strdup(L->a, item));
            fail(L, e->key_pos[i], "%s has no argument '%s'%s", oi->name, esc(L, e->keys[i]),
                 s.best ? did_you_mean(L, &s)
                        : oa && oa->attrs[0] ? arena_printf(L->a, " (its attributes: %s)",
                                                           oa->attrs)
                        : " (it takes no keyword arguments)");
        }
        keyword_attr(L, &ns, e->keys[i], eval_value(L, f, e->items[i]), e->key_pos[i]);
    }
    /* Dropout in a training DSL is active: as PyTorch's training export */
    if (op == OP_DROPOUT && nin >= 2 && nin < 3) {
        Dv yes = int_dv(1);
        ns.in[2] = const_from(L, f, &yes, DT_BOOL, e->pos);
        ns.nin = 3;
    }
    ns.nout = op_outputs(L, op, &ns, w.nresults, e->pos);
    uint32_t id = add_node(L, f, &ns);
    const Node *n = &L->g->nodes[id];
    if (ns.nout == 1 || w.nresults <= 1)
        return tensor(n->out[0], out_dtype(op, &ns, in_dt, 0));
    Dv t = {.kind = DV_TUPLE, .n = (int)ns.nout};
    t.items = arena_array(L->a, ns.nout, sizeof(Dv));
    for (uint32_t k = 0; k < ns.nout; k++)
        t.items[k] = tensor(n->out[k], out_dtype(op, &ns, in_dt, k));
    return t;
}

/* sqrt(2), exp(1), ... on numbers are compile-time arithmetic. */
static bool fold_math(Lower *L, Frame *f, const Expr *e, Op op, Dv *out)
{
    if (e->nitems != 1 || e->keys[0])
        return false;
    if (op != OP_SQRT && op != OP_EXP && op != OP_LOG && op != OP_ABS && op != OP_NEG)
        return false;
    Dv x = eval1(L, f, e->items[0]);
    if (!is_num(&x))
        return false;
    double v = num(&x);
    if ((op == OP_SQRT && v < 0) || (op == OP_LOG && v <= 0))
        fail(L, e->pos, "%s(%g) is not a real number", op_info[op].name, v);
    *out = float_dv(op == OP_SQRT ? sqrt(v) : op == OP_EXP ? exp(v) : op == OP_LOG ? log(v)
                    : op == OP_ABS ? fabs(v) : -v);
    if (x.kind == DV_INT && (op == OP_ABS || op == OP_NEG) && x.i != INT64_MIN)
        *out = int_dv(op == OP_ABS ? (x.i < 0 ? -x.i : x.i) : -x.i);
    return true;
}

/* ---- calls of blocks (def) ---- */

static const char *instance_name(Lower *L, Frame *f, const Expr *e, const Def *d)
{
    const char *name;
    if (e->as) {
        name = arena_printf(L->a, "%s%s", e->as, f->rep_suffix);
        for (Used *u = f->used; u; u = u->next)
            if (strcmp(u->name, name) == 0)
                fail(L, e->as_pos, "the block instance name '%s' is already used (line %d); "
                     "each instance needs its own name", esc(L, name), u->line);
    } else {
        for (int k = 0;; k++) {
            name = arena_printf(L->a, "%s%d", d->s->name, k);
            bool taken = false;
            for (Used *u = f->used; u && !taken; u = u->next)
                taken = strcmp(u->name, name) == 0;
            if (!taken)
                break;
        }
    }
    Used *u = arena_alloc(L->a, sizeof *u);
    u->name = name;
    u->line = e->pos.line;
    u->next = f->used;
    f->used = u;
    return name;
}

static void apply_hints(Lower *L, const Hint *h, Place *p);

static Dv call_def(Lower *L, Frame *f, const Expr *e, const Def *d, Want w)
{
    const Stmt *s = d->s;
    if (L->call_depth >= MAX_CALL_DEPTH)
        fail(L, e->pos, "blocks call each other more than %d deep", MAX_CALL_DEPTH);
    Frame *nf = arena_alloc(L->a, sizeof *nf);
    nf->up = f;
    nf->def = d;
    nf->rep_suffix = "";
    nf->ret_name = w.nresults == 1 ? w.name : NULL;
    nf->path = arena_printf(L->a, "%s%s.", f->path, instance_name(L, f, e, d));
    /* arguments: positional, then by name, then defaults */
    bool *set = arena_array(L->a, (size_t)s->nnames + 1, sizeof(bool));
    int npos = 0;
    for (int i = 0; i < e->nitems; i++) {
        if (e->keys[i])
            continue;
        if (npos >= s->nnames)
            fail(L, e->items[i]->pos, "block '%s' takes %d argument%s, got more",
                 esc(L, s->name), s->nnames, s->nnames == 1 ? "" : "s");
        set_var(L, nf, s->names[npos], s->name_pos_list[npos], eval_value(L, f, e->items[i]));
        set[npos++] = true;
    }
    for (int i = 0; i < e->nitems; i++) {
        if (!e->keys[i])
            continue;
        int k = 0;
        while (k < s->nnames && strcmp(s->names[k], e->keys[i]) != 0)
            k++;
        if (k == s->nnames) {
            Suggest sg = {0};
            for (int j = 0; j < s->nnames; j++)
                consider(&sg, e->keys[i], s->names[j]);
            fail(L, e->key_pos[i], "block '%s' has no argument '%s'%s", esc(L, s->name),
                 esc(L, e->keys[i]), did_you_mean(L, &sg));
        }
        if (set[k])
            fail(L, e->key_pos[i], "argument '%s' of block '%s' is given twice",
                 esc(L, e->keys[i]), esc(L, s->name));
        set_var(L, nf, s->names[k], s->name_pos_list[k], eval_value(L, f, e->items[i]));
        set[k] = true;
    }
    /* defaults are evaluated in the block's own frame, in order */
    const char *caller_file = L->cur_file;
    bool was_prelude = L->in_prelude_call;
    DslPos site = L->call_site;
    bool prelude = strcmp(d->file, L->file) != 0;
    if (prelude && !was_prelude) {
        L->in_prelude_call = true;
        L->call_site = e->pos;
    }
    L->cur_file = d->file;
    for (int k = 0; k < s->nnames; k++) {
        if (set[k])
            continue;
        if (!s->defaults[k]) {
            L->cur_file = caller_file;
            L->in_prelude_call = was_prelude;
            L->call_site = site;
            int nreq = 0;
            for (int j = 0; j < s->nnames; j++)
                nreq += s->defaults[j] == NULL;
            fail(L, e->pos, "block '%s' takes %d argument%s, got %d (missing '%s')",
                 esc(L, s->name), nreq, nreq == 1 ? "" : "s", npos, esc(L, s->names[k]));
        }
        set_var(L, nf, s->names[k], s->name_pos_list[k], eval_value(L, nf, s->defaults[k]));
    }
    Place saved = L->place;
    apply_hints(L, s->hints, &L->place);
    L->call_depth++;
    run_block(L, nf, &s->body, 1);
    L->call_depth--;
    L->place = saved;
    L->cur_file = caller_file;
    L->in_prelude_call = was_prelude;
    L->call_site = site;
    Dv r = nf->ret;
    if (w.nresults > 1 && r.kind != DV_TUPLE)
        fail(L, e->pos, "block '%s' returns one value, not %d", esc(L, s->name), w.nresults);
    if (w.nresults > 1 && r.n != w.nresults)
        fail(L, e->pos, "block '%s' returns %d values, not %d", esc(L, s->name), r.n,
             w.nresults);
    return r;
}

static _Noreturn void unknown_callee(Lower *L, const Expr *e)
{
    Suggest s = {0};
    for (const Def *d = L->defs; d; d = d->next)
        consider(&s, e->s, d->s->name);
    for (int op = 1; op < OP_COUNT; op++)
        if (!(op_info[op].flags & OPF_INTERNAL))
            consider(&s, e->s, op_info[op].name);
    if (strcmp(e->s, "cross_entropy") == 0 || strcmp(e->s, "nll") == 0)
        fail(L, e->pos, "%s is a loss: write it in a 'loss' statement", e->s);
    fail(L, e->pos, "unknown op or block '%s'%s", esc(L, e->s), did_you_mean(L, &s));
}

static Dv eval_call(Lower *L, Frame *f, const Expr *e, Want w)
{
    const Def *d = find_def(L, e->s);
    if (d)
        return call_def(L, f, e, d, w);
    Op op = find_op(e->s);
    if (op == OP_UNKNOWN)
        unknown_callee(L, e);
    Dv r;
    if (fold_math(L, f, e, op, &r))
        return r;
    return call_op(L, f, e, op, w);
}

/* x[a:b, :, i]: one Slice for the ranges, then a Gather per index. */
static Dv eval_index(Lower *L, Frame *f, const Expr *e, Want w)
{
    Dv x = eval_value(L, f, e->items[0]);
    if (x.kind != DV_TENSOR)
        fail(L, e->pos, "only tensors can be sliced; this is %s", kind_name(x.kind));
    Dv starts = {.kind = DV_LIST}, ends = {.kind = DV_LIST}, axes = {.kind = DV_LIST};
    starts.items = arena_array(L->a, (size_t)e->nslices, sizeof(Dv));
    ends.items = arena_array(L->a, (size_t)e->nslices, sizeof(Dv));
    axes.items = arena_array(L->a, (size_t)e->nslices, sizeof(Dv));
    for (int i = 0; i < e->nslices; i++) {
        const SliceItem *it = &e->slices[i];
        if (!it->range)
            continue;
        if (!it->lo && !it->hi)
            continue;
        starts.items[starts.n++] = int_dv(it->lo ? eval_int(L, f, it->lo, "a slice bound") : 0);
        ends.items[ends.n++] = int_dv(it->hi ? eval_int(L, f, it->hi, "a slice bound")
                                             : INT64_MAX);
        axes.items[axes.n++] = int_dv(i);
    }
    Dv r = x;
    bool last = true;
    for (int i = 0; i < e->nslices; i++)
        last &= e->slices[i].range;
    if (starts.n > 0) {
        NodeSpec ns = {.op = OP_SLICE, .pos = e->pos, .nin = 4, .nout = 1,
                       .out_name = last ? w.name : NULL};
        ns.in[0] = x.v;
        ns.in[1] = const_from(L, f, &starts, DT_I64, e->pos);
        ns.in[2] = const_from(L, f, &ends, DT_I64, e->pos);
        ns.in[3] = const_from(L, f, &axes, DT_I64, e->pos);
        uint32_t id = add_node(L, f, &ns);
        r = tensor(L->g->nodes[id].out[0], x.dt);
    }
    for (int i = e->nslices; i-- > 0;) {
        const SliceItem *it = &e->slices[i];
        if (it->range)
            continue;
        Dv idx = int_dv(eval_int(L, f, it->lo, "an index"));
        NodeSpec ns = {.op = OP_GATHER, .pos = it->pos, .nin = 2, .nout = 1};
        ns.in[0] = r.v;
        ns.in[1] = const_from(L, f, &idx, DT_I64, it->pos);
        add_attr(L, &ns, "axis", AT_INT)->i = i;
        uint32_t id = add_node(L, f, &ns);
        r = tensor(L->g->nodes[id].out[0], x.dt);
    }
    return r;
}

static Dv eval(Lower *L, Frame *f, const Expr *e, Want w)
{
    switch (e->kind) {
    case E_INT: return int_dv(e->i);
    case E_FLOAT: return float_dv(e->f);
    case E_STR: return (Dv){.kind = DV_STR, .s = e->s};
    case E_NAME: return lookup(L, f, e->s, e->pos);
    case E_LIST: {
        Dv l = {.kind = DV_LIST, .n = e->nitems};
        l.items = arena_array(L->a, (size_t)e->nitems + 1, sizeof(Dv));
        for (int i = 0; i < e->nitems; i++)
            l.items[i] = eval_value(L, f, e->items[i]);
        return l;
    }
    case E_NEG: {
        Dv x = as_tensor_or_num(L, f, e->items[0]);
        if (x.kind == DV_INT && x.i != INT64_MIN)
            return int_dv(-x.i);
        if (is_num(&x))
            return float_dv(-num(&x));
        return simple_node(L, f, OP_NEG, e->pos, x.v, NONE, x.dt, w.name);
    }
    case E_BINOP: {
        Dv a = as_tensor_or_num(L, f, e->items[0]);
        Dv b = as_tensor_or_num(L, f, e->items[1]);
        return arith(L, f, e->op, a, b, e->pos, w.name);
    }
    case E_CALL: return eval_call(L, f, e, w);
    case E_INDEX: return eval_index(L, f, e, w);
    }
    unreachable();
}

/* ---- placement hints ---- */

static bool hint_number(const char *s, const char *prefix, int64_t *n)
{
    size_t k = strlen(prefix);
    if (strncmp(s, prefix, k) != 0 || !s[k])
        return false;
    return parse_i64(s + k, n) && *n >= 0 && *n < 1024;
}

static void apply_hint(Lower *L, const Hint *h, Place *p, bool *dev_set, bool *stage_set)
{
    int64_t n = h->arg;
    const char *s = h->name;
    bool gpu = strcmp(s, "gpu") == 0 || strcmp(s, "cuda") == 0;
    bool cpu = strcmp(s, "cpu") == 0;
    bool stage = strcmp(s, "stage") == 0;
    if (n < 0 && (hint_number(s, "gpu", &n) || hint_number(s, "cuda", &n)))
        gpu = true;
    else if (n < 0 && hint_number(s, "cpu", &n))
        cpu = true;
    else if (n < 0 && hint_number(s, "stage", &n))
        stage = true;
    if (h->arg > 1023)
        fail(L, h->pos, "@%s(%lld): the number is too large", esc(L, s), (long long)h->arg);
    if (!gpu && !cpu && !stage)
        fail(L, h->pos, "unknown placement '@%s'; placements are @gpuN (or @cuda:N as "
             "@cuda(N)), @cpuN, @gpu, @cpu and @stage(N); a matrix product is written "
             "'a @ b'", esc(L, s));
    if (stage) {
        if (n < 0)
            fail(L, h->pos, "@stage needs a number: @stage(1)");
        if (*stage_set)
            fail(L, h->pos, "two @stage hints on one statement");
        *stage_set = true;
        p->stage = (int32_t)n;
        return;
    }
    if (*dev_set)
        fail(L, h->pos, "two device hints on one statement");
    *dev_set = true;
    const char *kind = gpu ? "cuda" : "cpu";
    p->device = n < 0 ? kind : arena_printf(L->a, "%s:%lld", kind, (long long)n);
}

static void apply_hints(Lower *L, const Hint *h, Place *p)
{
    bool dev = false, stage = false;
    for (; h; h = h->next)
        apply_hint(L, h, p, &dev, &stage);
}

/* ---- parameters and their initial values ---- */

/* SplitMix64 (docs/dsl.md): one stream per parameter, from the model's seed
 * and the parameter's name. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct Rng {
    uint64_t state;
} Rng;

static double rng_uniform(Rng *r)   /* [0, 1) with 53 bits */
{
    r->state += 0x9e3779b97f4a7c15ull;
    return (double)(mix64(r->state) >> 11) * 0x1.0p-53;
}

static double rng_normal(Rng *r)    /* Box-Muller, one draw per pair */
{
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint64_t name_hash(const char *s)   /* FNV-1a */
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static void fans(Lower *L, const Shape *s, DslPos pos, const char *how, double *in, double *out)
{
    if (s->rank < 2)
        fail(L, pos, "%s needs a parameter of rank 2 or more (it uses the fan-in); use "
             "normal(std) or uniform(a, b) for a rank-%d parameter", how, s->rank);
    double rf = 1;
    for (int i = 2; i < s->rank; i++)
        rf *= (double)s->d[i];
    *in = (double)s->d[1] * rf;
    *out = (double)s->d[0] * rf;
    if (*in == 0 || *out == 0)
        fail(L, pos, "%s of a parameter with no elements", how);
}

static double init_arg(Lower *L, Frame *f, const Expr *e, const char *key, int k, double dflt)
{
    const Expr *x = NULL;
    int pos = 0;
    for (int i = 0; i < e->nitems; i++) {
        if (e->keys[i] ? strcmp(e->keys[i], key) == 0 : pos++ == k)
            x = e->items[i];
    }
    if (!x)
        return dflt;
    Dv v = eval_value(L, f, x);
    if (!is_num(&v))
        fail(L, x->pos, "'%s' of an initialiser must be a number, not %s", key, kind_name(v.kind));
    return num(&v);
}

static const char *init_keys[][3] = {
    {"zeros", "", ""}, {"ones", "", ""}, {"constant", "value", ""},
    {"normal", "std", "mean"}, {"uniform", "a", "b"}, {"kaiming", "gain", ""},
    {"xavier", "gain", ""},
};

static Init parse_init(Lower *L, Frame *f, const Expr *e, const Shape *s)
{
    if (e->kind != E_NAME && e->kind != E_CALL)
        fail(L, e->pos, "a parameter's initialiser is zeros, ones, constant(v), normal(std), "
             "uniform(a, b), kaiming or xavier");
    const char *name = e->s;
    int which = -1;
    for (int i = 0; i < 7; i++)
        if (strcmp(init_keys[i][0], name) == 0)
            which = i;
    if (which < 0) {
        Suggest sg = {0};
        for (int i = 0; i < 7; i++)
            consider(&sg, name, init_keys[i][0]);
        fail(L, e->pos, "unknown initialiser '%s'%s (the initialisers: zeros, ones, "
             "constant(v), normal(std), uniform(a, b), kaiming, xavier)", esc(L, name),
             did_you_mean(L, &sg));
    }
    int nargs = e->kind == E_CALL ? e->nitems : 0;
    int maxargs = init_keys[which][2][0] ? 2 : init_keys[which][1][0] ? 1 : 0;
    if (nargs > maxargs)
        fail(L, e->pos, "%s takes %d argument%s, got %d", name, maxargs, maxargs == 1 ? "" : "s",
             nargs);
    for (int i = 0; i < nargs; i++)
        if (e->keys[i] && strcmp(e->keys[i], init_keys[which][1]) != 0 &&
            strcmp(e->keys[i], init_keys[which][2]) != 0)
            fail(L, e->key_pos[i], "%s has no argument '%s'", name, esc(L, e->keys[i]));
    double fin, fout;
    switch (which) {
    case 0: return (Init){INIT_CONST, 0, 0};
    case 1: return (Init){INIT_CONST, 1, 0};
    case 2:
        if (nargs != 1)
            fail(L, e->pos, "constant takes the value: constant(0.5)");
        return (Init){INIT_CONST, init_arg(L, f, e, "value", 0, 0), 0};
    case 3: {
        double std = init_arg(L, f, e, "std", 0, 1), mean = init_arg(L, f, e, "mean", 1, 0);
        if (!(std >= 0))
            fail(L, e->pos, "normal: the standard deviation %g is negative", std);
        return (Init){INIT_NORMAL, mean, std};
    }
    case 4: {
        double a = init_arg(L, f, e, "a", 0, 0), b = init_arg(L, f, e, "b", 1, 1);
        if (!(a <= b))
            fail(L, e->pos, "uniform(%g, %g): the first bound must not be above the second", a, b);
        return (Init){INIT_UNIFORM, a, b};
    }
    case 5:
        fans(L, s, e->pos, "kaiming", &fin, &fout);
        return (Init){INIT_NORMAL, 0, init_arg(L, f, e, "gain", 0, sqrt(2.0)) / sqrt(fin)};
    default: {
        fans(L, s, e->pos, "xavier", &fin, &fout);
        double a = init_arg(L, f, e, "gain", 0, 1) * sqrt(6.0 / (fin + fout));
        return (Init){INIT_UNIFORM, -a, a};
    }
    }
}

static void fill_param(Lower *L, PendingParam *pp)
{
    Value *val = &L->g->values[pp->v];
    Init in = pp->init;
    int64_t n = shape_numel(&val->shape);
    float *data = arena_array(L->a, (size_t)n ? (size_t)n : 1, sizeof(float));
    Rng r = {mix64(L->seed * 0x9e3779b97f4a7c15ull ^ name_hash(val->name))};
    for (int64_t i = 0; i < n; i++) {
        double x = in.kind == INIT_CONST ? in.a
                 : in.kind == INIT_UNIFORM ? in.a + (in.b - in.a) * rng_uniform(&r)
                 : in.a + in.b * rng_normal(&r);
        data[i] = (float)x;
    }
    Tensor *t = arena_alloc(L->a, sizeof *t);
    t->dtype = DT_F32;
    t->shape = val->shape;
    t->nbytes = (size_t)n * sizeof(float);
    t->data = data;
    val->data = t;
}

static void declare_param(Lower *L, Frame *f, const Stmt *s)
{
    const char *name = arena_printf(L->a, "%s%s", f->path, s->name);
    if (ir_find(L->g, name) != NONE)
        fail(L, s->name_pos, "'%s' is already defined; parameter names must be unique",
             esc(L, name));
    Shape shape = {0};
    if (s->nexprs > MAX_RANK)
        fail(L, s->exprs[MAX_RANK]->pos, "a parameter has at most %d dimensions", MAX_RANK);
    int64_t numel = 1;
    for (int i = 0; i < s->nexprs; i++) {
        int64_t d = eval_int(L, f, s->exprs[i], "a dimension");
        if (d < 1)
            fail(L, s->exprs[i]->pos, "dimension %d of '%s' is %lld; dimensions are 1 or more",
                 i, esc(L, s->name), (long long)d);
        shape.d[shape.rank++] = d;
        if (__builtin_mul_overflow(numel, d, &numel) || numel > ((int64_t)1 << 40))
            fail(L, s->exprs[i]->pos, "'%s' is too large", esc(L, s->name));
    }
    size_t bytes = (size_t)numel * 4;
    if (L->param_bytes + bytes > dsl_param_limit)
        fail(L, s->name_pos, "the parameters would take more than %zu MB", dsl_param_limit >> 20);
    L->param_bytes += bytes;
    uint32_t v = ir_value(L->g, name);
    Value *val = &L->g->values[v];
    val->kind = VK_PARAM;
    val->dtype = DT_F32;
    val->shape = shape;
    val->typed = true;
    val->loc = loc_at(L, s->name_pos);
    /* the initialiser is read now and drawn once the seed is known */
    Init init = parse_init(L, f, s->expr, &shape);
    L->params = arena_grow(L->a, L->params, L->nparams, L->nparams + 1, sizeof(PendingParam));
    L->params[L->nparams++] = (PendingParam){v, init};
    set_var(L, f, s->name, s->name_pos, tensor(v, DT_F32));
}

/* ---- statements ---- */

static void declare_input(Lower *L, Frame *f, const Stmt *s)
{
    if (f != L->top)
        fail(L, s->pos, "inputs are declared at the top level, not inside a block");
    if (ir_find(L->g, s->name) != NONE)
        fail(L, s->name_pos, "'%s' is already defined", esc(L, s->name));
    DType dt = dtype_by_name(s->dtype);
    if (dt == DT_UNDEFINED) {
        Suggest sg = {0};
        for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
            consider(&sg, s->dtype, dtype_names[i].name);
        fail(L, s->dtype_pos, "unknown element type '%s'%s (the types: f32, f64, f16, bf16, "
             "i64, i32, i16, i8, u8, bool)", esc(L, s->dtype), did_you_mean(L, &sg));
    }
    if (s->ndims > MAX_RANK)
        fail(L, s->dims[MAX_RANK].pos, "an input has at most %d dimensions", MAX_RANK);
    uint32_t v = ir_value(L->g, s->name);
    Value *val = &L->g->values[v];
    val->kind = VK_INPUT;
    val->dtype = dt;
    val->loc = loc_at(L, s->name_pos);
    val->shape.rank = s->ndims;
    for (int i = 0; i < s->ndims; i++) {
        const Dim *d = &s->dims[i];
        int64_t n = d->value;
        if (d->sym) {
            Var *var = find_var(L->top, d->sym);
            if (var && var->val.kind == DV_INT)
                n = var->val.i;
        }
        if (d->sym && n < 0) {
            val->sym[i] = d->sym;
            val->symbolic = true;
        } else if (n < 1) {
            fail(L, d->pos, "dimension %d is %lld; dimensions are 1 or more", i, (long long)n);
        } else {
            val->shape.d[i] = n;
        }
    }
    set_var(L, f, s->name, s->name_pos, tensor(v, dt));
}

static void assign(Lower *L, Frame *f, const Stmt *s)
{
    Place saved = L->place;
    apply_hints(L, s->hints, &L->place);
    const char *name = s->nnames == 1 ? arena_printf(L->a, "%s%s", node_path(L, f),
                                                     s->names[0]) : NULL;
    Dv x = eval(L, f, s->expr, (Want){name, s->nnames});
    L->place = saved;
    if (s->nnames == 1) {
        if (x.kind == DV_NONE)
            fail(L, s->expr->pos, "this block returns nothing; it has no 'return'");
        if (x.kind == DV_TUPLE)
            fail(L, s->expr->pos, "this gives %d values; assign them to as many names: "
                 "a, b = ...", x.n);
        set_var(L, f, s->names[0], s->name_pos_list[0], x);
        return;
    }
    if (x.kind != DV_TUPLE || x.n != s->nnames)
        fail(L, s->pos, "%d names but the value on the right is %s", s->nnames,
             x.kind == DV_TUPLE ? arena_printf(L->a, "%d values", x.n) : kind_name(x.kind));
    for (int i = 0; i < s->nnames; i++)
        set_var(L, f, s->names[i], s->name_pos_list[i], x.items[i]);
}

static uint32_t tensor_var(Lower *L, Frame *f, const char *name, DslPos pos, const char *what)
{
    Dv x = lookup(L, f, name, pos);
    if (x.kind != DV_TENSOR)
        fail(L, pos, "%s '%s' is %s, not a tensor", what, esc(L, name), kind_name(x.kind));
    return x.v;
}

static void add_output(Lower *L, uint32_t v)
{
    for (uint32_t i = 0; i < L->noutputs; i++)
        if (L->outputs[i] == v)
            return;
    L->outputs = arena_grow(L->a, L->outputs, L->noutputs, L->noutputs + 1, sizeof(uint32_t));
    L->outputs[L->noutputs++] = v;
    L->g->values[v].is_output = true;
}

/* loss cross_entropy(scores, labels, ignore_index=N) or nll(logp, labels):
 * the model's own SoftmaxCrossEntropyLoss or NegativeLogLikelihoodLoss, as
 * loss.c takes it from an ONNX model; the labels must be an input. */
static void declare_loss(Lower *L, Frame *f, const Stmt *s)
{
    const Expr *e = s->expr;
    if (f != L->top)
        fail(L, s->pos, "the loss is declared at the top level, not inside a block");
    if (L->has_loss)
        fail(L, s->pos, "the model has a loss already (line %d)", L->loss_pos.line);
    if (e->kind != E_CALL || (strcmp(e->s, "cross_entropy") != 0 && strcmp(e->s, "nll") != 0))
        fail(L, e->pos, "a loss is cross_entropy(scores, labels) or nll(log_probs, labels)");
    bool ce = strcmp(e->s, "cross_entropy") == 0;
    int npos = 0;
    Dv args[2];
    NodeSpec ns = {.op = ce ? OP_SOFTMAX_CE : OP_NLL_LOSS, .pos = e->pos, .nin = 2, .nout = 1,
                   .out_name = "loss"};
    for (int i = 0; i < e->nitems; i++) {
        if (e->keys[i]) {
            if (strcmp(e->keys[i], "ignore_index") != 0)
                fail(L, e->key_pos[i], "%s has no argument '%s' (it takes ignore_index=N)",
                     e->s, esc(L, e->keys[i]));
            add_attr(L, &ns, "ignore_index", AT_INT)->i =
                eval_int(L, f, e->items[i], "ignore_index");
            continue;
        }
        if (npos == 2)
            fail(L, e->items[i]->pos, "%s takes 2 arguments (scores, labels), got more", e->s);
        args[npos] = eval_value(L, f, e->items[i]);
        if (args[npos].kind != DV_TENSOR)
            fail(L, e->items[i]->pos, "expected a tensor, got %s", kind_name(args[npos].kind));
        npos++;
    }
    if (npos != 2)
        fail(L, e->pos, "%s takes 2 arguments (scores, labels), got %d", e->s, npos);
    if (L->g->values[args[1].v].kind != VK_INPUT)
        fail(L, e->items[1]->pos, "the labels must be an input of the model (declare them: "
             "input labels: i64[batch])");
    add_attr(L, &ns, "reduction", AT_STRING)->s = "mean";
    ns.in[0] = args[0].v;
    ns.in[1] = args[1].v;
    uint32_t id = add_node(L, f, &ns);
    add_output(L, L->g->nodes[id].out[0]);
    L->has_loss = true;
    L->loss_pos = s->pos;
}

static void run_stmt(Lower *L, Frame *f, const Stmt *s, int depth);

static void run_block(Lower *L, Frame *f, const Block *b, int depth)
{
    if (depth > DSL_MAX_DEPTH)
        fail(L, b->n ? b->stmts[0]->pos : (DslPos){0, 0}, "blocks are nested too deeply");
    for (int i = 0; i < b->n && !f->returned; i++)
        run_stmt(L, f, b->stmts[i], depth);
}

static void run_repeat(Lower *L, Frame *f, const Stmt *s, int depth)
{
    int64_t n = eval_int(L, f, s->expr, "a repeat count");
    if (n < 0 || n > MAX_REPEAT)
        fail(L, s->expr->pos, "repeat %lld: the count must be from 0 to %d", (long long)n,
             MAX_REPEAT);
    const char *outer = f->rep_suffix;
    for (int64_t k = 0; k < n && !f->returned; k++) {
        f->rep_suffix = arena_printf(L->a, "%s.%lld", outer, (long long)k);
        run_block(L, f, &s->body, depth + 1);
    }
    f->rep_suffix = outer;
}

static void top_only(Lower *L, Frame *f, const Stmt *s, const char *what)
{
    if (f != L->top)
        fail(L, s->pos, "%s belongs at the top level, not inside a block", what);
}

static void run_stmt(Lower *L, Frame *f, const Stmt *s, int depth)
{
    if (++L->steps > MAX_STEPS)
        fail(L, s->pos, "the program runs more than %d statements; is a repeat count too "
             "large?", MAX_STEPS);
    switch (s->kind) {
    case S_MODEL:
        top_only(L, f, s, "'model'");
        if (L->name_given)
            fail(L, s->pos, "the model is named twice");
        L->name_given = true;
        L->g->name = s->name;
        break;
    case S_SEED:
        top_only(L, f, s, "'seed'");
        if (L->seed_given)
            fail(L, s->pos, "the seed is given twice");
        L->seed_given = true;
        L->seed = (uint64_t)s->i;
        break;
    case S_INPUT: declare_input(L, f, s); break;
    case S_PARAM: declare_param(L, f, s); break;
    case S_DEF:
        if (f != L->top)
            fail(L, s->pos, "blocks are defined at the top level, not inside a block");
        break;   /* registered before the program runs */
    case S_ASSIGN: assign(L, f, s); break;
    case S_RETURN:
        if (!f->def)
            fail(L, s->pos, "'return' outside a block");
        if (s->nexprs == 1) {
            f->ret = eval(L, f, s->exprs[0], (Want){f->ret_name, 1});
            if (f->ret.kind == DV_NONE || f->ret.kind == DV_TUPLE)
                f->ret = eval_value(L, f, s->exprs[0]);
        } else {
            f->ret = (Dv){.kind = DV_TUPLE, .n = s->nexprs};
            f->ret.items = arena_array(L->a, (size_t)s->nexprs, sizeof(Dv));
            for (int i = 0; i < s->nexprs; i++)
                f->ret.items[i] = eval_value(L, f, s->exprs[i]);
        }
        f->returned = true;
        break;
    case S_OUTPUT:
        top_only(L, f, s, "'output'");
        for (int i = 0; i < s->nnames; i++) {
            if (s->defaults[i])
                fail(L, s->name_pos_list[i], "'output' takes names: output logits");
            add_output(L, tensor_var(L, f, s->names[i], s->name_pos_list[i], "output"));
        }
        break;
    case S_LOSS: declare_loss(L, f, s); break;
    case S_REPEAT: run_repeat(L, f, s, depth); break;
    case S_PLACE: {
        Place saved = L->place;
        apply_hints(L, s->hints, &L->place);
        run_block(L, f, &s->body, depth + 1);
        L->place = saved;
        break;
    }
    }
}

/* ---- before running: the blocks, and no recursion among them ---- */

static void register_defs(Lower *L, const Block *b, const char *file, bool prelude)
{
    for (int i = 0; i < b->n; i++) {
        const Stmt *s = b->stmts[i];
        if (s->kind != S_DEF)
            continue;
        L->cur_file = file;
        const Def *old = find_def(L, s->name);
        if (old && strcmp(old->file, file) == 0)
            fail(L, s->name_pos, "block '%s' is defined twice (first at line %d)",
                 esc(L, s->name), old->s->pos.line);
        /* The prelude's lstm and gru are layers around the ops LSTM and GRU:
         * a block named in other case than an op shadows that spelling only
         * (calls look for blocks first, exactly named). A model's own block
         * may not look like an op at all. */
        Op op = find_op(s->name);
        if (op != OP_UNKNOWN && !(prelude && strcmp(op_info[op].name, s->name) != 0))
            fail(L, s->name_pos, "'%s' is the builtin op %s; give the block another name",
                 esc(L, s->name), op_info[op].name);
        if (old && !prelude) {   /* a user block replaces the prelude's */
            Def **p = &L->defs;
            while (*p != old)
                p = &(*p)->next;
            *p = old->next;
        }
        for (int k = 0; k < s->nnames; k++)
            for (int j = 0; j < k; j++)
                if (strcmp(s->names[j], s->names[k]) == 0)
                    fail(L, s->name_pos_list[k], "block '%s' has two arguments named '%s'",
                         esc(L, s->name), esc(L, s->names[k]));
        Def *d = arena_alloc(L->a, sizeof *d);
        d->s = s;
        d->file = file;
        d->next = L->defs;
        L->defs = d;
    }
}

typedef struct CallPath {
    const Def *d;
    struct CallPath *up;
} CallPath;

static void check_calls_block(Lower *L, const Block *b, CallPath *path, uint8_t *state,
                              const Def **all, int ndefs);

static void check_calls_expr(Lower *L, const Expr *e, CallPath *path, uint8_t *state,
                             const Def **all, int ndefs)
{
    if (!e)
        return;
    for (int i = 0; i < e->nitems; i++)
        check_calls_expr(L, e->items[i], path, state, all, ndefs);
    for (int i = 0; i < e->nslices; i++) {
        check_calls_expr(L, e->slices[i].lo, path, state, all, ndefs);
        check_calls_expr(L, e->slices[i].hi, path, state, all, ndefs);
    }
    if (e->kind != E_CALL)
        return;
    const Def *d = find_def(L, e->s);
    if (!d)
        return;
    int k = 0;
    while (all[k] != d)
        k++;
    if (state[k] == 2)
        return;
    if (state[k] == 1) {   /* on the path: a cycle */
        const char *cycle = d->s->name;
        for (CallPath *p = path; p && p->d != d; p = p->up)
            cycle = arena_printf(L->a, "%s -> %s", p->d->s->name, cycle);
        cycle = arena_printf(L->a, "%s -> %s", d->s->name, cycle);
        L->cur_file = path->d->file;
        fail(L, e->pos, "block '%s' calls itself (%s); blocks cannot be recursive: use "
             "repeat N { ... } for repeated layers", esc(L, d->s->name), esc(L, cycle));
    }
    state[k] = 1;
    CallPath p = {d, path};
    check_calls_block(L, &d->s->body, &p, state, all, ndefs);
    for (int i = 0; i < d->s->nnames; i++)
        check_calls_expr(L, d->s->defaults[i], &p, state, all, ndefs);
    state[k] = 2;
}

static void check_calls_block(Lower *L, const Block *b, CallPath *path, uint8_t *state,
                              const Def **all, int ndefs)
{
    for (int i = 0; i < b->n; i++) {
        const Stmt *s = b->stmts[i];
        check_calls_expr(L, s->expr, path, state, all, ndefs);
        for (int k = 0; k < s->nexprs; k++)
            check_calls_expr(L, s->exprs[k], path, state, all, ndefs);
        if (s->kind == S_REPEAT || s->kind == S_PLACE)
            check_calls_block(L, &s->body, path, state, all, ndefs);
    }
}

static void check_recursion(Lower *L)
{
    int n = 0;
    for (const Def *d = L->defs; d; d = d->next)
        n++;
    const Def **all = arena_array(L->a, (size_t)n + 1, sizeof(Def *));
    uint8_t *state = arena_array(L->a, (size_t)n + 1, 1);
    n = 0;
    for (const Def *d = L->defs; d; d = d->next)
        all[n++] = d;
    for (int k = 0; k < n; k++) {
        if (state[k])
            continue;
        state[k] = 1;
        CallPath p = {all[k], NULL};
        check_calls_block(L, &all[k]->s->body, &p, state, all, n);
        for (int i = 0; i < all[k]->s->nnames; i++)
            check_calls_expr(L, all[k]->s->defaults[i], &p, state, all, n);
        state[k] = 2;
    }
}

/* ---- the front end's entry point ---- */

static Block parse_text(Arena *a, const char *file, const char *text, size_t n)
{
    DslParser P = {.a = a, .file = file};
    diag_source(file, text, n);
    if (dsl_parse(&P, text, n) > 0) {
        Loc loc = {.file = file, .index = -1};
        error_at(&loc, "%d error%s; nothing was compiled", P.nerrors > 20 ? 20 : P.nerrors,
                 P.nerrors == 1 ? "" : "s");
    }
    return P.program;
}

static void check_inputs_used(Lower *L)
{
    Graph *g = L->g;
    bool *used = arena_array(L->a, g->nvalues + 1, sizeof(bool));
    for (uint32_t i = 0; i < g->nnodes; i++)
        for (uint32_t k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] != NONE)
                used[g->nodes[i].in[k]] = true;
    for (uint32_t i = 0; i < g->ninputs; i++)
        if (!used[g->inputs[i]] && !g->values[g->inputs[i]].is_output)
            error_at(&g->values[g->inputs[i]].loc, "input '%s' is not used by the model",
                     esc(L, g->values[g->inputs[i]].name));
}

static void finish_graph(Lower *L)
{
    Graph *g = L->g;
    if (L->noutputs == 0) {
        Loc loc = {.file = L->file, .index = -1};
        error_at(&loc, "the model has no output: add 'output NAME' or a 'loss' statement");
    }
    g->outputs = L->outputs;
    g->noutputs = L->noutputs;
    g->inputs = arena_array(L->a, g->nvalues + 1, sizeof(uint32_t));
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == VK_INPUT)
            g->inputs[g->ninputs++] = v;
    check_inputs_used(L);
    for (uint32_t i = 0; i < L->nparams; i++)
        fill_param(L, &L->params[i]);
    L->cur_file = L->file;
}

Graph *dsl_import_text(Arena *a, const char *path, const char *text, size_t n)
{
    Block prelude = parse_text(a, "<prelude>", dsl_prelude, strlen(dsl_prelude));
    Block prog = parse_text(a, path, text, n);
    Lower L = {.a = a, .file = path, .cur_file = path, .place = {-1, NULL}};
    L.g = ir_new(a, path);
    L.g->opset = OPSET;
    L.g->producer = "mpcc " MPCC_VERSION;
    L.g->source = text;
    L.g->source_size = n;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    L.g->name = arena_strndup(a, base, strcspn(base, "."));
    register_defs(&L, &prelude, "<prelude>", true);
    register_defs(&L, &prog, path, false);
    check_recursion(&L);
    L.cur_file = path;
    Frame top = {.path = "", .rep_suffix = ""};
    L.top = &top;
    run_block(&L, &top, &prog, 0);
    finish_graph(&L);
    return L.g;
}

bool dsl_is_source(const char *path)
{
    size_t n = strlen(path);
    return n > 3 && strcmp(path + n - 3, ".mp") == 0;
}

Graph *dsl_import(Arena *a, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        error_file(path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        error_file(path, "not a regular file");
    }
    if (st.st_size > (1 << 30)) {
        close(fd);
        error_file(path, "the file is larger than 1 GB; is it a model in the DSL?");
    }
    size_t n = (size_t)st.st_size;
    char *text = arena_alloc(a, n + 1);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, text + got, n - got);
        if (r <= 0) {
            close(fd);
            error_file(path, "cannot read: %s", r < 0 ? strerror(errno) : "file shrank");
        }
        got += (size_t)r;
    }
    close(fd);
    return dsl_import_text(a, path, text, n);
}

Graph *import_model(Arena *a, const char *path)
{
    return dsl_is_source(path) ? dsl_import(a, path) : onnx_import(a, path);
}
