/* codegen.c — writes the standalone trainer for CPU devices: train.c and
 * the initial weights as safetensors under the ONNX initializer names. With
 * --infer, the same kernels and buffers make a forward-only program
 * (infer.c: the forward function and runtime/infer.c's main).
 *
 * The program reads top down: its head (how it was made and how to build
 * it); the runtime's declarations (its headers, then a prototype of every
 * runtime function and global the model uses); the model (one function per
 * stage and action, the step as the plan's operations on each device's
 * streams, and the tables the runtime reads); the runtime's definitions
 * (the runtime's .c files, pasted in); and main.
 *
 * Every buffer lives at the static offset the plan gave it in its device's
 * arena (An), micro-batch mb in slot mb % slots; a function names each
 * buffer it uses in a local pointer (the value's name as a C identifier)
 * with its type and shape. Every kernel call is preceded by a comment
 * naming the ONNX node it implements. Names from the model reach the C file
 * only inside comments (escaped), string literals (escaped) and as
 * identifiers made of [A-Za-z0-9_] (c_ident).
 */
#include "mpcc.h"
#include "mprt.h"
#include "kernel.h"

#include <ctype.h>
#include <setjmp.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct EmbeddedFile {
    const char *name, *text;
    size_t size;
} EmbeddedFile;
extern const EmbeddedFile embedded_files[];

/* A node's operands that its kernel reads and writes in scratch under
 * bf16 (stage_operands). */
typedef struct Staged {
    uint32_t *vals, n;
    StageKind *kind;
    int64_t end;   /* the byte of the scratch past them */
} Staged;

typedef struct CG {
    Graph *g;
    const Options *o;
    const Plan *plan;
    FILE *out;
    int stage;            /* the stage whose function is being written */
    int kind;             /* and its ActKind: a backward reads offloaded values' fetched copies */
    uint32_t *profiled;   /* the nodes in the order of their --profile slots */
    int nprofiled;
    bool recomputing;     /* writing a forward node again inside a backward */
    bool cuda;            /* some devices are CUDA devices */
    bool mixed;           /* and some are CPU devices (runtime/mixed.c) */
    const Fusion *fu;     /* the chains that run as one kernel each */
    /* the convolutions that run through oneDNN, in the order of the model's
     * table (dnnl_convs), each with its device; a node's row, -1 if none */
    uint32_t *dnnl_node;
    int *dnnl_dev, ndnnl, *dnnl_row;
    uint32_t *pool_node;   /* the same for the max poolings through oneDNN (dnnl_pools) */
    int *pool_dev, npool;
    bool dnnl_gemm;   /* the CPU devices' GEMMs run through oneDNN (MPRT_DNNL_GEMM) */
    /* the function being written: the buffers it uses, as named locals */
    struct Local *locals;
    int nlocals, cap_locals;
    int *local_of;        /* [nbufs]: the buffer's local, -1 if none yet */
    bool in_function;
    bool dropout;         /* it runs a Dropout node (which reads mprt_dropout_mb) */
    bool timed;           /* it has marked a node's start for --profile */
    /* --check (codegen_check): each node that cannot be written is reported
     * once, and writing goes on with the next */
    bool checking;
    bool *reported;       /* [nnodes] */
    int problems;
    /* --precision=bf16: the node being written reads and writes these values
     * through float32 scratch (stage_operands) */
    const char **staged_as;   /* [nvalues]: the scratch's expression, or NULL */
    Native native;            /* how the node being written takes bf16 (cost.c's bf16_native) */
    Staged *staged;           /* the node's, while it is written; NULL otherwise */
} CG;

/* A buffer of the function being written, by the name it has there. */
typedef struct Local {
    int buf;
    const char *name;
} Local;

static void emit(CG *cg, const char *fmt, ...) FMT(2, 3);
static void emit(CG *cg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(cg->out, fmt, ap);
    va_end(ap);
}

/* The program is written to memory, then to its file: an error on the
 * way (an op the trainer lacks) leaves no partial file, and one that
 * unwinds to a harness (diag_jmp) frees it with the arena. */
typedef struct Text {
    FILE *f;
    char *buf;
    size_t n;
} Text;

static void text_free(void *p)
{
    Text *t = p;
    if (t->f)
        fclose(t->f);
    free(t->buf);
}

static FILE *text_open(Graph *g, Text *t)
{
    t->f = open_memstream(&t->buf, &t->n);
    if (!t->f)
        error_file(g->file, "out of memory for the generated program");
    arena_defer(g->arena, text_free, t);
    return t->f;
}

/* Finishes a text in memory: its bytes are t->buf[0 .. t->n). */
static void text_close(Graph *g, Text *t)
{
    bool ok = fclose(t->f) == 0;
    t->f = NULL;
    if (!ok)
        error_file(g->file, "out of memory for the generated program");
}

/* Calls fn on every identifier of the C text s[0 .. n), leaving out
 * comments, string and character literals and numbers (0x1p+0f). */
typedef void (*IdentFn)(void *ctx, const char *id, size_t len);
static void for_each_ident(const char *s, size_t n, IdentFn fn, void *ctx)
{
    const char *p = s, *end = s + n;
    while (p < end) {
        const char *q = p;
        if (p + 1 < end && p[0] == '/' && p[1] == '*') {
            for (p += 2; p < end && !(p[0] == '*' && p + 1 < end && p[1] == '/'); p++)
                ;
            p = p + 2 < end ? p + 2 : end;
        } else if (p + 1 < end && p[0] == '/' && p[1] == '/') {
            while (p < end && *p != '\n')
                p++;
        } else if (*p == '"' || *p == '\'') {
            for (p++; p < end && *p != *q; p++)
                p += *p == '\\';
            p = p < end ? p + 1 : end;
        } else if (isdigit((unsigned char)*p)) {
            for (p++; p < end && (isalnum((unsigned char)*p) || *p == '_' || *p == '.' ||
                                  ((*p == '+' || *p == '-') && strchr("eEpP", p[-1])));
                 p++)
                ;
        } else if (isalpha((unsigned char)*p) || *p == '_') {
            while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
                p++;
            fn(ctx, q, (size_t)(p - q));
        } else {
            p++;
        }
    }
}

/* Text from the model inside a C comment: escaped, with no comment start
 * or end and no trigraph ("* /", "/ *", "? ?" get a space). */
static const char *comment_text(CG *cg, const char *s)
{
    const char *e = str_escaped(cg->g->arena, s, 200);
    char *r = arena_alloc(cg->g->arena, strlen(e) * 2 + 1), *w = r;
    for (; *e; e++) {
        *w++ = *e;
        if ((e[0] == '*' && e[1] == '/') || (e[0] == '/' && e[1] == '*') ||
            (e[0] == '?' && e[1] == '?'))
            *w++ = ' ';
    }
    *w = 0;
    return r;
}

static const char *c_string(CG *cg, const char *s);
static void emit_float_literal(CG *cg, double f);

static size_t value_bytes(const Value *v)
{
    return (size_t)shape_numel(&v->shape) * dtype_size(v->dtype);
}

/* ---- names in the generated file ---- */

static const char *ctype(DType t)
{
    switch (t) {
    case DT_F32: return "float";
    case DT_I64: return "int64_t";
    case DT_I32: return "int32_t";
    case DT_BOOL: case DT_U8: return "uint8_t";
    case DT_F64: return "double";   /* the kernels that take any element type: Mod, ArgMax */
    case DT_I16: return "int16_t";
    case DT_I8: return "int8_t";
    case DT_F16: return "uint16_t";   /* its bits: read and written by Cast */
    case DT_BF16: return "uint16_t";  /* its bits: staged in float32 around a kernel */
    default: return NULL;
    }
}

/* What device d's host arena holds, in words. */
static const char *host_holds(const Plan *p, int d)
{
    bool acts = false, weights = false;
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b].host && p->bufs[b].dev == d)
            *(p->bufs[b].streamed ? &weights : &acts) = true;
    return acts && weights ? "offloaded activations and weights"
           : weights       ? "offloaded weights" : "offloaded activations";
}

/* The micro-batches of a step over every replica (--data-parallel). */
static int step_microbatches(const CG *cg)
{
    int R = cg->o->pipe.replicas;
    return cg->plan->sc->M * (R > 1 ? R : 1);
}

/* A buffer's address in a function of the micro-batch mb: A1 + 4096, or
 * A1 + 4096 + (size_t)(mb % 3) * 8192 with a slot per micro-batch; H1 for
 * device 1's host arena. */
static const char *addr(CG *cg, int b)
{
    const Buf *bf = &cg->plan->bufs[b];
    char arena = bf->host ? 'H' : 'A';
    if (bf->slots == 1 || bf->acc)
        return arena_printf(cg->g->arena, "%c%d + %zu", arena, bf->dev, bf->offset);
    return arena_printf(cg->g->arena, "%c%d + %zu + (size_t)(mb %% %d) * %zu", arena, bf->dev,
                        bf->offset, bf->slots, bf->bytes);
}

/* Micro-batch mb's slot of a buffer: A1 + 12288. */
static const char *slot_addr(CG *cg, int b, int mb)
{
    const Buf *bf = &cg->plan->bufs[b];
    return arena_printf(cg->g->arena, "%c%d + %zu", bf->host ? 'H' : 'A', bf->dev,
                        bf->offset + (size_t)(mb % bf->slots) * bf->bytes);
}

static bool has_buf(CG *cg, uint32_t v)
{
    return v != NONE && (plan_buf(cg->plan, v, cg->stage) >= 0 || cg->staged_as[v]);
}

/* ---- the buffers a function uses: named locals ---- */

/* Names a local may not take: C's keywords (through C23), what the
 * generated code itself declares or reads inside its functions, and the C
 * library's macros with lowercase names (reserved_name refuses the
 * others, in capitals, as a class). */
static const char *const reserved_names[] = {
    "alignas", "alignof", "asm", "auto", "bool", "break", "case", "char", "complex", "const",
    "constexpr", "continue", "default", "do", "double", "else", "enum", "extern", "false",
    "float", "for", "goto", "if", "imaginary", "inline", "int", "long", "noreturn", "nullptr",
    "register", "restrict", "return", "short", "signed", "sizeof", "static", "static_assert",
    "struct", "switch", "thread_local", "true", "typedef", "typeof", "typeof_unqual", "union",
    "unsigned", "void", "volatile", "while",
    "mb", "chain", "logp", "scale", "lr", "step", "main", "model", "buffers", "prof_nodes",
    "op_info", "arena_bytes", "host_bytes", "work_offset", "work_bytes", "slot_bytes", "device_names",
    "zero_state",
    "run_step", "eval_forward",
    "errno", "stdin", "stdout", "stderr", "environ", "linux", "unix", "i386", "assert",
    "offsetof", "math_errhandling", "st_atime", "st_mtime", "st_ctime", "sa_handler",
    "sa_sigaction",
    "I",   /* <complex.h>'s imaginary unit, which OpenBLAS's cblas.h includes */
};

/* The prefixes of the runtime's names and of the libraries it includes
 * (matched in any case): a local so named could meet one of their macros. */
static const char *const reserved_prefixes[] = {"mprt", "cuda", "cublas", "cudnn", "nvrtc",
                                                "nvtx", "cblas", "pthread"};

static bool has_prefix_nocase(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++)
        if (tolower((unsigned char)*s) != *prefix)
            return false;
    return true;
}

/* sN_forward and the other action functions. */
static bool action_function_name(const char *s)
{
    static const char *const acts[] = {"forward", "backward", "wgrad", "update"};
    if (*s++ != 's' || !isdigit((unsigned char)*s))
        return false;
    while (isdigit((unsigned char)*s))
        s++;
    for (size_t i = 0; *s == '_' && i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(s + 1, acts[i]) == 0)
            return true;
    return false;
}

/* Whether identifier s could mean something else where a local of that
 * name is declared: a keyword, a macro (the headers' are in capitals:
 * NULL, EOF; so are the program's own: A0, CPU0_COMPUTE, EV_S0_FWD_MB0),
 * a type (size_t), the runtime's or a library's name, or the program's. */
static bool reserved_name(const char *s)
{
    size_t n = strlen(s);
    bool lower = false;
    for (const char *p = s; *p; p++)
        lower = lower || islower((unsigned char)*p);
    if ((!lower && n > 1) || (n >= 2 && strcmp(s + n - 2, "_t") == 0))
        return true;
    for (size_t i = 0; i < sizeof reserved_prefixes / sizeof reserved_prefixes[0]; i++)
        if (has_prefix_nocase(s, reserved_prefixes[i]))
            return true;
    if (s[0] == 'c' && s[1] == 'u' && isupper((unsigned char)s[2]))   /* cuMemAlloc */
        return true;
    for (size_t i = 0; i < sizeof reserved_names / sizeof reserved_names[0]; i++)
        if (strcmp(s, reserved_names[i]) == 0)
            return true;
    return action_function_name(s);
}

/* At most this many characters of a value's name, so a name with its
 * suffix (_2) stays within the 63 that C11 promises to tell apart. */
enum { C_IDENT_MAX = 56 };

/* A model's name as a C identifier: runs of characters other than
 * [A-Za-z0-9_] become one '_', none is kept at either end, and "v_" goes
 * before a name that would start with a digit, be empty or be reserved. */
static const char *c_ident(CG *cg, const char *name)
{
    char *r = arena_alloc(cg->g->arena, C_IDENT_MAX + 3), *w = r + 2, *end = w + C_IDENT_MAX;
    bool gap = false;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (!isalnum(*p) || *p >= 0x80) {
            gap = true;   /* '_' too: a run of them is one, and none is kept at the ends */
            continue;
        }
        if (w + (gap && w > r + 2) >= end)
            break;
        if (gap && w > r + 2)
            *w++ = '_';
        *w++ = (char)*p;
        gap = false;
    }
    *w = 0;
    if (w == r + 2 || isdigit((unsigned char)r[2]) || reserved_name(r + 2)) {
        r[0] = 'v', r[1] = '_';
        return r;
    }
    return r + 2;
}

static bool local_named(const CG *cg, const char *name)
{
    for (int i = 0; i < cg->nlocals; i++)
        if (strcmp(cg->locals[i].name, name) == 0)
            return true;
    return false;
}

/* Buffer b in the function being written. Its local is named later, in
 * the order the body first mentions it (end_function), not in the order
 * the emitters happen to evaluate their arguments: until then the body
 * holds a mark, "\1b\2" (bytes nothing else in the program has). */
static const char *local_buf(CG *cg, int b)
{
    MPCC_ASSERT(cg->in_function);
    const Value *val = &cg->g->values[cg->plan->bufs[b].value];
    if (!ctype(val->dtype)) {
        Loc loc = value_loc(cg->g, cg->plan->bufs[b].value);
        error_at(&loc, "element type %s is not supported by the CPU trainer yet",
                 dtype_name(val->dtype));
    }
    return arena_printf(cg->g->arena, "\1%d\2", b);
}

/* Buffer b's local, made the first time: called after its value (a
 * gradient's sum: VALUE_grad_sum), unique in the function by _2, _3, ... */
static const char *local_name(CG *cg, int b)
{
    if (cg->local_of[b] >= 0)
        return cg->locals[cg->local_of[b]].name;
    const Buf *bf = &cg->plan->bufs[b];
    const Value *val = &cg->g->values[bf->value];
    const char *base = c_ident(cg, bf->acc ? arena_printf(cg->g->arena, "%s_grad_sum", val->name)
                                           : val->name);
    const char *name = base;
    for (int k = 2; local_named(cg, name); k++)
        name = arena_printf(cg->g->arena, "%s_%d", base, k);
    if (cg->nlocals == cg->cap_locals) {
        int cap = cg->cap_locals ? 2 * cg->cap_locals : 64;
        cg->locals = arena_grow(cg->g->arena, cg->locals, (size_t)cg->cap_locals, (size_t)cap,
                                sizeof(Local));
        cg->cap_locals = cap;
    }
    cg->locals[cg->nlocals] = (Local){b, name};
    cg->local_of[b] = cg->nlocals++;
    return name;
}

/* The buffer a mark at p ("\1b\2") stands for; *next is after it. */
static int local_mark(const char *p, const char **next)
{
    char *end;
    long b = strtol(p + 1, &end, 10);
    MPCC_ASSERT(*end == '\2');
    *next = end + 1;
    return (int)b;
}

/* A buffer of the current stage, by its local's name. */
static const char *buf(CG *cg, uint32_t v)
{
    if (cg->staged_as[v])
        return cg->staged_as[v];
    int b = plan_read(cg->plan, v, cg->stage, cg->kind);
    MPCC_ASSERT(b >= 0);
    return local_buf(cg, b);
}

static long numel(CG *cg, uint32_t v)
{
    return (long)shape_numel(&cg->g->values[v].shape);
}

static const Shape *shape_of(CG *cg, uint32_t v)
{
    return &cg->g->values[v].shape;
}

/* What a local's comment says of its buffer: its element type and shape,
 * where it comes from, and its slot. */
static const char *local_note(CG *cg, const Buf *bf)
{
    Arena *a = cg->g->arena;
    const Value *val = &cg->g->values[bf->value];
    const char *s = arena_printf(a, "%s[", dtype_name(val->dtype));
    for (int i = 0; i < val->shape.rank; i++)
        s = arena_printf(a, "%s%s%lld", s, i ? "," : "", (long long)val->shape.d[i]);
    s = arena_printf(a, "%s]", s);
    if (bf->acc && bf->levels > 1)
        s = arena_printf(a, "%s, the sum over the micro-batches: %d levels of a tree", s,
                         bf->levels);
    else if (bf->acc)
        s = arena_printf(a, "%s, the sum over the micro-batches", s);
    else if (bf->received)
        s = arena_printf(a, "%s, from stage %d", s, cg->plan->st->home[bf->value]);
    else if (bf->streamed)
        s = arena_printf(a, "%s, in host memory between steps", s);
    else if (bf->from >= 0)
        s = arena_printf(a, "%s, back from host memory", s);
    if (bf->slots > 1)
        s = arena_printf(a, "%s, slot mb %% %d", s, bf->slots);
    return s;
}

/* A function being written: its body goes to memory while the buffers it
 * uses become locals; end_function writes its head, the locals and the
 * body. */
typedef struct Function {
    FILE *out;   /* where the function goes */
    Text *body;
} Function;

static Function begin_function(CG *cg)
{
    for (int i = 0; i < cg->nlocals; i++)
        cg->local_of[cg->locals[i].buf] = -1;
    cg->nlocals = 0;
    cg->in_function = true;
    cg->dropout = cg->timed = false;
    Function f = {cg->out, arena_alloc(cg->g->arena, sizeof(Text))};
    cg->out = text_open(cg->g, f.body);
    return f;
}

static void find_mb(void *ctx, const char *id, size_t len)
{
    if (len == 2 && memcmp(id, "mb", 2) == 0)
        *(bool *)ctx = true;
}

/* The function: head ("static void s0_forward(int mb)\n"), a local per
 * buffer in the order the body first mentions them, then (where the
 * function has a Dropout node) the micro-batch its masks are drawn for,
 * and the body with its marks replaced by the locals' names. */
static void end_function(CG *cg, Function *f, const char *head)
{
    text_close(cg->g, f->body);
    cg->out = f->out;
    cg->in_function = false;
    const char *body = f->body->buf, *end = body + f->body->n, *next = body;
    for (const char *p; (p = memchr(next, '\1', (size_t)(end - next)));)
        local_name(cg, local_mark(p, &next));
    emit(cg, "%s{\n", head);
    bool mb_used = false;
    for (int i = 0; i < cg->nlocals; i++) {
        const Buf *bf = &cg->plan->bufs[cg->locals[i].buf];
        const char *t = ctype(cg->g->values[bf->value].dtype);
        emit(cg, "    %s *%s = (%s *)(%s);   /* %s */\n", t, cg->locals[i].name, t,
             addr(cg, cg->locals[i].buf), local_note(cg, bf));
        mb_used = mb_used || bf->slots > 1;
    }
    if (cg->dropout && !cg->o->infer) {
        if (cg->o->pipe.replicas > 1)
            emit(cg, "    mprt_dropout_mb = mprt_step_no * %d + mprt_replica_index() * %d + mb;   "
                 "/* dropout masks: per micro-batch of the step */\n", step_microbatches(cg),
                 cg->plan->sc->M);
        else
            emit(cg, "    mprt_dropout_mb = mprt_step_no * %d + mb;   /* dropout masks: per "
                 "micro-batch */\n", cg->plan->sc->M);
        mb_used = true;
    }
    if (!mb_used)
        for_each_ident(body, f->body->n, find_mb, &mb_used);
    if (!mb_used)
        emit(cg, "    (void)mb;\n");
    for (const char *p = body; p < end; p = next) {
        const char *mark = memchr(p, '\1', (size_t)(end - p));
        fwrite(p, 1, (size_t)((mark ? mark : end) - p), cg->out);
        next = end;
        if (mark)
            emit(cg, "%s", cg->locals[cg->local_of[local_mark(mark, &next)]].name);
    }
    emit(cg, "}\n");
}

/* ---- kernels, one call per node ---- */

/* Whether the stage being written runs on a CUDA device. */
static bool cuda_stage(const CG *cg)
{
    const Plan *p = cg->plan;
    return p->ds->d[p->st->dev[cg->stage]].kind == DEV_CUDA;
}

/* The kernel a node calls: mprt_NAME on a CPU device, mprt_cu_NAME (the
 * same arguments, device pointers) on a CUDA device. */
static const char *kernel(CG *cg, const char *name)
{
    return arena_printf(cg->g->arena, "mprt_%s%s", cuda_stage(cg) ? "cu_" : "", name);
}

/* A row kernel's call: under bf16 on a GPU, its twin on bf16 tensors
 * (mprt_cu_softmax_bf16, mprt_cu_sum_to_bf16: cost.c's bf16_rows). */
static const char *row_kernel(CG *cg, const char *name)
{
    if (cg->native == NATIVE_ROWS)
        return arena_printf(cg->g->arena, "mprt_cu_%s_bf16", name);
    return kernel(cg, name);
}

/* The scratch of the node being written, as its kernel's own area: on a
 * GPU past its staged operands (cost.c's node_staging_at). */
static const char *workspace(CG *cg)
{
    int dev = cg->plan->st->dev[cg->stage];
    int64_t past = cg->staged && cuda_stage(cg) ? cg->staged->end : 0;
    if (past)
        return arena_printf(cg->g->arena, "(W%d + %lld)", dev, (long long)(past / 4));
    return arena_printf(cg->g->arena, "W%d", dev);
}

/* Optional input or output k of a node: its buffer, or NULL. */
static const char *opt_buf(CG *cg, const Node *n, uint32_t k, bool out)
{
    uint32_t v = out ? (k < n->nout ? n->out[k] : NONE) : (k < n->nin ? n->in[k] : NONE);
    return has_buf(cg, v) ? buf(cg, v) : "NULL";
}


static _Noreturn void unsupported(CG *cg, const Node *n, const char *what)
{
    error_at(&n->loc, "the %s trainer does not support %s yet", cuda_stage(cg) ? "CUDA" : "CPU",
             what);
}

static bool is_bf16(CG *cg, uint32_t v)
{
    return cg->g->values[v].dtype == DT_BF16;
}

static void emit_gemm(CG *cg, const Node *n)
{
    const Shape *a = shape_of(cg, n->in[0]), *y = shape_of(cg, n->out[0]);
    GemmParams gp = gemm_params(n);
    int ta = gp.trans_a, tb = gp.trans_b;
    long K = ta ? a->d[0] : a->d[1];
    int has_c = n->nin > 2 && n->in[2] != NONE;
    long cr = 1, cc = 1;
    if (has_c) {
        const Shape *c = shape_of(cg, n->in[2]);
        cr = c->rank == 2 ? c->d[0] : 1;
        cc = c->rank >= 1 ? c->d[c->rank - 1] : 1;
    }
    if (cg->native == NATIVE_MATRIX) {   /* on bf16 tensors: the types of C and Y after them */
        emit(cg, "    mprt_cu_gemm_bf16(%d, %d, %lld, %lld, %ld, (float)%.9g, %s, %s, (float)%.9g, "
             "%s, %d, %ld, %ld, %s, %d);\n", ta, tb, (long long)y->d[0], (long long)y->d[1], K,
             gp.alpha, buf(cg, n->in[0]), buf(cg, n->in[1]), gp.beta,
             has_c ? buf(cg, n->in[2]) : "NULL", has_c && is_bf16(cg, n->in[2]), cr, cc,
             buf(cg, n->out[0]), is_bf16(cg, n->out[0]));
        return;
    }
    emit(cg, "    %s(%d, %d, %lld, %lld, %ld, (float)%.9g, %s, %s, (float)%.9g, %s, %ld, %ld, %s);\n", kernel(cg, "gemm"),
         ta, tb, (long long)y->d[0], (long long)y->d[1], K, gp.alpha,
         buf(cg, n->in[0]), buf(cg, n->in[1]), gp.beta,
         has_c ? buf(cg, n->in[2]) : "NULL", cr, cc, buf(cg, n->out[0]));
}

/* Strides of `in` per dimension of `out` (0 where broadcast). */
static void bcast_strides(const Shape *out, const Shape *in, long *s)
{
    long stride = 1;
    for (int d = out->rank - 1, j = in->rank - 1; d >= 0; d--, j--) {
        s[d] = (j >= 0 && in->d[j] != 1) ? stride : 0;
        if (j >= 0)
            stride *= in->d[j];
    }
}


/* {v0, v1, ...}, or {0} when empty (a C initializer cannot be). */
static void emit_braced(CG *cg, const long *v, int n)
{
    emit(cg, "{");
    for (int i = 0; i < n; i++)
        emit(cg, "%s%ld", i ? ", " : "", v[i]);
    emit(cg, n ? "}" : "0}");
}

static void emit_longs(CG *cg, const long *v, int n)
{
    emit(cg, "(const long[])");
    emit_braced(cg, v, n);
}

static void emit_binary(CG *cg, const Node *n)
{
    static const char *ops[] = {[OP_ADD] = "MPRT_ADD", [OP_SUB] = "MPRT_SUB",
                                [OP_MUL] = "MPRT_MUL", [OP_DIV] = "MPRT_DIV",
                                [OP_POW] = "MPRT_POW", [OP_PRELU] = "MPRT_PRELU"};
    const Shape *y = shape_of(cg, n->out[0]);
    long shape[MAX_RANK], sa[MAX_RANK], sb[MAX_RANK];
    for (int d = 0; d < y->rank; d++)
        shape[d] = (long)y->d[d];
    bcast_strides(y, shape_of(cg, n->in[0]), sa);
    bcast_strides(y, shape_of(cg, n->in[1]), sb);
    emit(cg, "    %s(%s, %d, ", kernel(cg, "binary"), ops[n->op], y->rank);
    emit_longs(cg, shape, y->rank);
    emit(cg, ", %s, ", buf(cg, n->in[0]));
    emit_longs(cg, sa, y->rank);
    emit(cg, ", %s, ", buf(cg, n->in[1]));
    emit_longs(cg, sb, y->rank);
    emit(cg, ", %s);\n", buf(cg, n->out[0]));
}

static void emit_sum_to(CG *cg, const Node *n)
{
    const Shape *x = shape_of(cg, n->in[0]), *y = shape_of(cg, n->out[0]);
    long shape[MAX_RANK];
    int keep[MAX_RANK];
    for (int d = 0, j = d - (x->rank - y->rank); d < x->rank; d++, j++) {
        shape[d] = (long)x->d[d];
        keep[d] = j >= 0 && y->d[j] == x->d[d];
    }
    emit(cg, "    %s(%d, ", row_kernel(cg, "sum_to"), x->rank);
    emit_longs(cg, shape, x->rank);
    emit(cg, ", (const int[]){");
    for (int d = 0; d < x->rank; d++)
        emit(cg, "%s%d", d ? ", " : "", keep[d]);
    emit(cg, "%s}, %s, (float)%.9g, %ld, %s);\n", x->rank ? "" : "0", buf(cg, n->in[0]),
         attr_float(n, "alpha", 1.0), numel(cg, n->out[0]), buf(cg, n->out[0]));
}

static void float_only(CG *cg, const Node *n, uint32_t v)
{
    if (cg->g->values[v].dtype != DT_F32)
        unsupported(cg, n, arena_printf(cg->g->arena, "%s on %s tensors", n->op_type,
                                        dtype_name(cg->g->values[v].dtype)));
}

static void dense_strides(const Shape *s, long *st)
{
    long k = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        st[d] = k;
        k *= (long)s->d[d];
    }
}

/* The dims of `out` as a rank and a list, then k operands broadcast into
 * it: an array of their buffers and an array of their strides. */
static void emit_operands(CG *cg, uint32_t out, const uint32_t *ins, uint32_t k)
{
    const Shape *y = shape_of(cg, out);
    long shape[MAX_RANK], st[MAX_RANK];
    for (int d = 0; d < y->rank; d++)
        shape[d] = (long)y->d[d];
    emit(cg, "%d, ", y->rank);
    emit_longs(cg, shape, y->rank);
    emit(cg, ", (const float *const[]){");
    for (uint32_t j = 0; j < k; j++)
        emit(cg, "%s%s", j ? ", " : "", buf(cg, ins[j]));
    emit(cg, "}, (const long *const[]){");
    for (uint32_t j = 0; j < k; j++) {
        bcast_strides(y, shape_of(cg, ins[j]), st);
        emit(cg, "%s", j ? ", " : "");
        emit_longs(cg, st, y->rank);
    }
    emit(cg, "}");
}

/* Sum, Mean, Min and Max of up to 8 operands with broadcasting. */
static void emit_nary(CG *cg, const Node *n)
{
    if (n->nin > 8)
        unsupported(cg, n, arena_printf(cg->g->arena, "%s of more than 8 inputs", n->op_type));
    for (uint32_t k = 0; k < n->nin; k++)
        float_only(cg, n, n->in[k]);
    const char *op = n->op == OP_MIN ? "MPRT_MIN" : n->op == OP_MAX ? "MPRT_MAX" : "MPRT_ADD";
    emit(cg, "    %s(%s, %u, ", kernel(cg, "nary"), op, n->nin);
    emit_operands(cg, n->out[0], n->in, n->nin);
    emit(cg, ", (float)%.9g, %s);\n", n->op == OP_MEAN ? 1.0 / n->nin : 1.0,
         buf(cg, n->out[0]));
}

static void emit_minmax_grad(CG *cg, const Node *n)
{
    emit(cg, "    %s(%d, %u, ", kernel(cg, "minmax_grad"), (int)attr_int(n, "wrt", 0), n->nin - 2);
    emit_operands(cg, n->out[0], n->in + 2, n->nin - 2);
    emit(cg, ", %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
}

/* Reduce* over x's dims as (shape, keep): mprt_sum_to sums (ReduceSum,
 * ReduceMean), mprt_reduce_max takes extremes; ReduceMaxGrad carries the
 * reduced dims as an attribute. */
static void emit_reduce(CG *cg, const Node *n)
{
    bool grad = n->op == OP_REDUCE_MAX_GRAD;
    uint32_t x = grad ? n->in[1] : n->in[0];
    float_only(cg, n, x);
    const Shape *xs = shape_of(cg, x);
    bool reduced[MAX_RANK];
    if (grad) {
        uint32_t c;
        const int64_t *r = attr_ints(n, "reduced", &c);
        MPCC_ASSERT(r && (int)c == xs->rank);
        for (int d = 0; d < xs->rank; d++)
            reduced[d] = r[d] != 0;
    } else {
        reduce_axes(cg->g, (Node *)n, reduced);
    }
    long shape[MAX_RANK];
    emit(cg, "    %s(", kernel(cg, grad ? "reduce_max_grad" : n->op == OP_REDUCE_SUM ||
                                 n->op == OP_REDUCE_MEAN ? "sum_to" : "reduce_max"));
    if (n->op == OP_REDUCE_MAX || n->op == OP_REDUCE_MIN)
        emit(cg, "%d, ", n->op == OP_REDUCE_MIN);
    for (int d = 0; d < xs->rank; d++)
        shape[d] = (long)xs->d[d];
    emit(cg, "%d, ", xs->rank);
    emit_longs(cg, shape, xs->rank);
    emit(cg, ", (const int[]){");
    for (int d = 0; d < xs->rank; d++)
        emit(cg, "%s%d", d ? ", " : "", !reduced[d]);
    emit(cg, "%s}, ", xs->rank ? "" : "0");
    long n_in = numel(cg, x), n_out = numel(cg, grad ? n->in[0] : n->out[0]);
    if (grad)
        emit(cg, "%s, %s, %s, %ld, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]),
             buf(cg, n->in[2]), n_out, buf(cg, n->out[0]));
    else if (n->op == OP_REDUCE_SUM || n->op == OP_REDUCE_MEAN)
        emit(cg, "%s, (float)%.9g, %ld, %s);\n", buf(cg, x),
             n->op == OP_REDUCE_MEAN ? (double)n_out / (double)n_in : 1.0, n_out,
             buf(cg, n->out[0]));
    else
        emit(cg, "%s, %ld, %s);\n", buf(cg, x), n_out, buf(cg, n->out[0]));
}

/* Expand: the input broadcast into the output. Tile: the same with every
 * repeated dim split into (repeats, dim), the input's stride 0 along the
 * repeats. */
static void emit_expand(CG *cg, const Node *n)
{
    DType t = cg->g->values[n->in[0]].dtype;
    if (n->op == OP_EXPAND && t != DT_F32) {   /* the bytes: a bool mask, integers */
        const Shape *ys = shape_of(cg, n->out[0]);
        long shape[MAX_RANK], st[MAX_RANK];
        for (int d = 0; d < ys->rank; d++)
            shape[d] = (long)ys->d[d];
        bcast_strides(ys, shape_of(cg, n->in[0]), st);
        emit(cg, "    %s(%zu, %d, ", kernel(cg, "broadcast_bytes"), dtype_size(t), ys->rank);
        emit_longs(cg, shape, ys->rank);
        emit(cg, ", ");
        emit_longs(cg, st, ys->rank);
        emit(cg, ", %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->out[0]));
        return;
    }
    float_only(cg, n, n->in[0]);
    if (n->op == OP_EXPAND) {
        emit(cg, "    %s(MPRT_ADD, 1, ", kernel(cg, "nary"));
        emit_operands(cg, n->out[0], n->in, 1);
        emit(cg, ", 1.0f, %s);\n", buf(cg, n->out[0]));
        return;
    }
    const Shape *xs = shape_of(cg, n->in[0]), *ys = shape_of(cg, n->out[0]);
    long shape[MAX_RANK], st[MAX_RANK], dense[MAX_RANK];
    int r = 0;
    dense_strides(xs, dense);
    for (int d = 0; d < xs->rank; d++) {
        long rep = (long)(ys->d[d] / (xs->d[d] ? xs->d[d] : 1));
        if (rep != 1 && r + xs->rank - d >= MAX_RANK)
            unsupported(cg, n, "Tile of this many repeated dims (at most 8 dims and "
                        "repeated dims together)");
        if (rep != 1)
            shape[r] = rep, st[r++] = 0;
        shape[r] = (long)xs->d[d], st[r++] = dense[d];
    }
    emit(cg, "    %s(MPRT_ADD, 1, %d, ", kernel(cg, "nary"), r);
    emit_longs(cg, shape, r);
    emit(cg, ", (const float *const[]){%s}, (const long *const[]){", buf(cg, n->in[0]));
    emit_longs(cg, st, r);
    emit(cg, "}, 1.0f, %s);\n", buf(cg, n->out[0]));
}

static void emit_prelu(CG *cg, const Node *n)
{
    const Shape *x = shape_of(cg, n->in[0]), *sl = shape_of(cg, n->in[1]);
    if (cg->g->opset < 7 && sl->rank == 1 && x->rank >= 2 && sl->d[0] == x->d[1] &&
        sl->d[0] != x->d[x->rank - 1])
        unsupported(cg, n, "PRelu's per-channel slope of opsets before 7 (export with "
                    "opset 7 or newer)");
    if (n->op == OP_PRELU) {
        emit_binary(cg, n);
        return;
    }
    long shape[MAX_RANK], ss[MAX_RANK];
    const Shape *y = shape_of(cg, n->out[0]);
    for (int d = 0; d < y->rank; d++)
        shape[d] = (long)y->d[d];
    bcast_strides(y, shape_of(cg, n->in[2]), ss);
    emit(cg, "    %s(%d, %d, ", kernel(cg, "prelu_grad"), (int)attr_int(n, "wrt", 0), y->rank);
    emit_longs(cg, shape, y->rank);
    emit(cg, ", %s, %s, %s, ", buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]));
    emit_longs(cg, ss, y->rank);
    emit(cg, ", %s);\n", buf(cg, n->out[0]));
}

static void emit_sum(CG *cg, const Node *n)
{
    for (uint32_t k = 0; k < n->nin; k++)
        if (!shape_eq(shape_of(cg, n->in[k]), shape_of(cg, n->out[0]))) {
            emit_nary(cg, n);
            return;
        }
    emit(cg, "    %s(%ld, %u, (const float *const[]){", kernel(cg, "sum"), numel(cg, n->out[0]),
         n->nin);
    for (uint32_t k = 0; k < n->nin; k++)
        emit(cg, "%s%s", k ? ", " : "", buf(cg, n->in[k]));
    emit(cg, "}, %s);\n", buf(cg, n->out[0]));
}

/* N, C and the product of the rest: a (N, C, ...) tensor's batch, channels
 * (or classes) and positions. */
static void channel_dims(CG *cg, uint32_t x, long *N, long *C, long *P)
{
    const Shape *s = shape_of(cg, x);
    *N = (long)s->d[0];
    *C = (long)s->d[1];
    *P = 1;
    for (int i = 2; i < s->rank; i++)
        *P *= (long)s->d[i];
}

/* A loss's scores x as (N, C, D): the dims before its class axis, the
 * classes, the dims after (loss_class_axis). */
static void class_dims(CG *cg, const Node *n, uint32_t x, long *N, long *C, long *D)
{
    const Shape *s = shape_of(cg, x);
    int axis = n->op == OP_SOFTMAX_CE || n->op == OP_SCE_GRAD ? loss_class_axis(n) : 1;
    *N = *D = 1;
    for (int i = 0; i < s->rank; i++)
        if (i < axis)
            *N *= (long)s->d[i];
        else if (i > axis)
            *D *= (long)s->d[i];
    *C = (long)s->d[axis];
}

/* --infer: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with
 * class weights and every reduction (the trainer's loss kernels do the
 * mean without weights, which is what their gradients follow). */
static void emit_loss_forward(CG *cg, const Node *n)
{
    long N, C, D;
    class_dims(cg, n, n->in[0], &N, &C, &D);
    if (cg->g->values[n->in[1]].dtype != DT_I64)
        unsupported(cg, n, "labels that are not int64");
    const char *red = loss_reduction(n);
    int reduction = strcmp(red, "none") == 0 ? 0 : strcmp(red, "sum") == 0 ? 1 : 2;
    if (reduction == 2 && strcmp(red, "mean") != 0)
        unsupported(cg, n, arena_printf(cg->g->arena, "the reduction '%s'",
                                        str_escaped(cg->g->arena, red, 40)));
    const char *logp = buf(cg, n->in[0]);
    if (n->op == OP_SOFTMAX_CE) {
        logp = has_buf(cg, n->nout > 1 ? n->out[1] : NONE)
                   ? buf(cg, n->out[1])
                   : workspace(cg);   /* node_workspace counts it */
        emit(cg, "    {\n    float *logp = %s;\n    mprt_log_softmax(%ld, %ld, %ld, %s, logp);\n",
             logp, N, C, D, buf(cg, n->in[0]));
        logp = "logp";
    }
    emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s, %lldLL, %d, %s, %s);\n", kernel(cg, "nll_forward"), N, C, D,
         logp, buf(cg, n->in[1]), opt_buf(cg, n, 2, false),
         (long long)loss_ignore_index(n), reduction, buf(cg, n->out[0]),
         c_string(cg, n->name));
    if (n->op == OP_SOFTMAX_CE)
        emit(cg, "    }\n");
}

/* The cross-entropy that keeps each row's log-sum-exp (graph/loss.c):
 * its forward writes the loss and lse, its gradient reads the scores x
 * again: (N, C, D, x, bias, labels, ignore, loss, lse) and (N, C, D,
 * dloss, x, bias, lse, labels, ignore, dx), the bias each class's, added
 * to its scores (a head's: graph/loss.c's loss_bias puts it third, where
 * attribute mpcc_bias says so, and the gradient's fifth), or NULL. Under bf16 on a
 * GPU the twins read bf16 scores, and the gradient's writes a bf16 dx
 * from scores of either type. */
static void emit_sce_lse(CG *cg, const Node *n, bool grad, long N, long C, long D,
                         long long ignore)
{
    if (!grad) {
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s, %lldLL, %s, %s);\n", row_kernel(cg, "sce_lse"),
             N, C, D, buf(cg, n->in[0]), opt_buf(cg, n, 2, false), buf(cg, n->in[1]), ignore,
             buf(cg, n->out[0]), buf(cg, n->out[1]));
        return;
    }
    const char *x = buf(cg, n->in[3]);
    if (cg->native == NATIVE_ROWS)
        x = arena_printf(cg->g->arena, "%s, %d", x, is_bf16(cg, n->in[3]));
    emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s, %s, %s, %lldLL, %s);\n",
         row_kernel(cg, "sce_lse_grad"), N, C, D, buf(cg, n->in[0]), x, opt_buf(cg, n, 4, false),
         buf(cg, n->in[1]), buf(cg, n->in[2]), ignore, buf(cg, n->out[0]));
}

static void emit_sce(CG *cg, const Node *n, bool grad)
{
    long N, C, D;
    if (cg->o->infer) {
        emit_loss_forward(cg, n);
        return;
    }
    bool lse = attr_int(n, "mpcc_lse", 0) != 0;
    class_dims(cg, n, n->in[!grad ? 0 : lse ? 3 : 1], &N, &C, &D);
    if (!grad && n->nin > 2 && n->in[2] != NONE && !attr_int(n, "mpcc_bias", 0))
        unsupported(cg, n, "class weights in SoftmaxCrossEntropyLoss");
    if (strcmp(loss_reduction(n), "mean") != 0)
        unsupported(cg, n, "a reduction other than mean");
    long long ignore = (long long)loss_ignore_index(n);
    if (lse) {
        emit_sce_lse(cg, n, grad, N, C, D, ignore);
        return;
    }
    if (!grad)
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %lldLL, %s, %s);\n", row_kernel(cg, "sce"), N, C, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), ignore, buf(cg, n->out[0]),
             buf(cg, n->out[1]));
    else
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s, %lldLL, %s);\n", row_kernel(cg, "sce_grad"), N, C, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]), ignore,
             buf(cg, n->out[0]));
}

/* NegativeLogLikelihoodLoss on log-probabilities (N, C, d..): mean
 * reduction, no class weights. */
static void emit_nll(CG *cg, const Node *n)
{
    bool grad = n->op == OP_NLL_GRAD;
    long N, C, D;
    if (cg->o->infer) {
        emit_loss_forward(cg, n);
        return;
    }
    channel_dims(cg, grad ? n->out[0] : n->in[0], &N, &C, &D);
    if (!grad && n->nin > 2 && n->in[2] != NONE)
        unsupported(cg, n, "class weights in NegativeLogLikelihoodLoss");
    if (strcmp(loss_reduction(n), "mean") != 0)
        unsupported(cg, n, "a reduction other than mean");
    long long ignore = (long long)loss_ignore_index(n);
    if (!grad)
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %lldLL, %s, %s);\n", kernel(cg, "nll"), N, C, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), ignore, buf(cg, n->out[0]),
             c_string(cg, n->name));
    else
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %lldLL, %s);\n", kernel(cg, "nll_grad"), N, C, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), ignore, buf(cg, n->out[0]));
}

/* A window op's dims as 3-D ones: (N, C, L) is (N, C, 1, 1, L) and (N, C,
 * H, W) is (N, C, 1, H, W), so 1-D and 2-D convolution and pooling run as
 * 3-D ones of depth (and height) 1. */
static void dims_3d(const Shape *s, int64_t d[5])
{
    int sp = s->rank - 2;
    d[0] = s->d[0];
    d[1] = s->d[1];
    for (int i = 0; i < 3; i++)
        d[2 + i] = i < 3 - sp ? 1 : s->d[2 + i - (3 - sp)];
}

/* The spatial dimensions of window op n over input x, refused unless 1 to 3. */
static int window_rank(CG *cg, const Node *n, uint32_t x)
{
    int sp = shape_of(cg, x)->rank - 2;
    if (sp < 1 || sp > 3)
        unsupported(cg, n, arena_printf(cg->g->arena, "%s over %d spatial dimensions",
                                        comment_text(cg, n->op_type), sp));
    return sp;
}

/* Strides, dilations and pads (begins, then ends) of a 1-D, 2-D or 3-D
 * window op over input x (N, C, spatial..) with output y and kernel k (kd,
 * kh, kw), as 3-D (window_params reads them); auto_pad SAME_* pads as ONNX
 * says (the extra one at the end for SAME_UPPER, at the beginning for
 * SAME_LOWER). */
static void window_3d(CG *cg, const Node *n, uint32_t x, uint32_t y, const int64_t k[3],
                      int64_t st[3], int64_t dl[3], int64_t pd[6])
{
    int sp = window_rank(cg, n, x), o = 3 - sp;
    Window w = window_params(n, sp, k + o);
    for (int i = 0; i < 3; i++)
        st[i] = dl[i] = 1, pd[i] = pd[3 + i] = 0;
    for (int i = 0; i < sp; i++) {
        st[o + i] = w.stride[i], dl[o + i] = w.dil[i];
        pd[o + i] = w.pad[i], pd[3 + o + i] = w.pad[sp + i];
    }
    const char *ap = w.auto_pad;
    int64_t xd[5], yd[5];
    dims_3d(shape_of(cg, x), xd);
    dims_3d(shape_of(cg, y), yd);
    if (strncmp(ap, "SAME", 4) == 0)
        for (int i = 0; i < 3; i++) {
            int64_t total = (yd[2 + i] - 1) * st[i] + (k[i] - 1) * dl[i] + 1 - xd[2 + i];
            total = total < 0 ? 0 : total;
            pd[i] = strcmp(ap, "SAME_LOWER") == 0 ? (total + 1) / 2 : total / 2;
            pd[3 + i] = total - pd[i];
        }
    else if (strcmp(ap, "VALID") == 0)
        for (int i = 0; i < 6; i++)
            pd[i] = 0;
}

/* Conv and its gradients: 1-D, 2-D and 3-D, as runtime/kernel.h's MprtConv:
 * the initializer's braces and fields. */
static void conv_fields(CG *cg, const Node *n, uint32_t x, uint32_t w, uint32_t y)
{
    int64_t xd[5], wd[5], yd[5], st[3], dl[3], pd[6];
    window_rank(cg, n, x);
    dims_3d(shape_of(cg, x), xd);
    dims_3d(shape_of(cg, w), wd);
    dims_3d(shape_of(cg, y), yd);
    window_3d(cg, n, x, y, wd + 2, st, dl, pd);
    emit(cg, "{%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
         "%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld}",
         (long long)xd[0], (long long)xd[1], (long long)xd[2], (long long)xd[3],
         (long long)xd[4], (long long)wd[0], (long long)wd[2], (long long)wd[3],
         (long long)wd[4], (long long)yd[2], (long long)yd[3], (long long)yd[4],
         (long long)conv_group(n), (long long)st[0], (long long)st[1], (long long)st[2],
         (long long)dl[0], (long long)dl[1], (long long)dl[2], (long long)pd[0],
         (long long)pd[1], (long long)pd[2]);
}

/* The same as a compound literal: a kernel's argument. */
static void conv_params(CG *cg, const Node *n, uint32_t x, uint32_t w, uint32_t y)
{
    emit(cg, "&(MprtConv)");
    conv_fields(cg, n, x, w, y);
}

/* ConvTranspose, as the convolution whose data gradient it is: that
 * convolution's input has y's shape and its output x's. Its gradients are
 * that convolution (dX) and its filter gradient (dW), made by autodiff. */
static void emit_conv_transpose(CG *cg, const Node *n)
{
    if (strcmp(attr_str(n, "auto_pad", "NOTSET"), "NOTSET") != 0 || ir_attr(n, "output_shape"))
        unsupported(cg, n, "ConvTranspose with auto_pad or output_shape (export with pads "
                    "and output_padding)");
    emit(cg, "    %s(", kernel(cg, "conv_transpose"));
    conv_params(cg, n, n->out[0], n->in[1], n->in[0]);
    emit(cg, ", %s, %s, %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]),
         opt_buf(cg, n, 2, false), buf(cg, n->out[0]), workspace(cg));
}

/* Node n's row in a table of oneDNN kernels (its nodes, their devices,
 * *rows of them), added the first time the node is written. */
static int table_row(CG *cg, const Node *n, uint32_t *nodes, int *devs, int *rows)
{
    uint32_t id = (uint32_t)(n - cg->g->nodes);
    if (cg->dnnl_row[id] < 0) {
        nodes[*rows] = id;
        devs[*rows] = cg->plan->st->dev[cg->stage];
        cg->dnnl_row[id] = (*rows)++;
    }
    return cg->dnnl_row[id];
}

/* Convolution n's row in dnnl_convs. */
static int dnnl_row(CG *cg, const Node *n)
{
    return table_row(cg, n, cg->dnnl_node, cg->dnnl_dev, &cg->ndnnl);
}

/* Max pooling n's row in dnnl_pools. */
static int pool_row(CG *cg, const Node *n)
{
    return table_row(cg, n, cg->pool_node, cg->pool_dev, &cg->npool);
}

/* Whether value v is kept in oneDNN's blocked layout (layout.c): its
 * kernels are cpu_dnnl.c's blocked twins. */
static bool blocked(const CG *cg, uint32_t v)
{
    return v != NONE && cg->plan->blocked && cg->plan->blocked[v];
}

/* Whether cpu_dnnl.c is pasted: some convolution or max pooling runs
 * through oneDNN. */
static bool dnnl_kernels(const CG *cg)
{
    return cg->ndnnl || cg->npool;
}

/* Value v's type as the graph stores it, while the node being written
 * reads it staged as another (stage_operands). */
static DType stored_dtype(CG *cg, uint32_t v)
{
    for (uint32_t j = 0; cg->staged && j < cg->staged->n; j++)
        if (cg->staged->vals[j] == v)
            return cg->staged->kind[j] == STAGE_WIDE ? DT_BF16 : DT_F32;
    return cg->g->values[v].dtype;
}

/* Under bf16, a convolution with a bias into a bf16 value adds its bias
 * after its sum is rounded, and rounds again (graph/precision.c): cuDNN's
 * bf16 convolutions take no bias. */
static bool bias_after(CG *cg, const Node *n)
{
    return n->op == OP_CONV && n->nin > 2 && n->in[2] != NONE &&
           stored_dtype(cg, n->out[0]) == DT_BF16;
}

/* Whether the convolution kernel adds the bias itself. */
static bool adds_bias(CG *cg, const Node *n)
{
    return n->op == OP_CONV && n->nin > 2 && n->in[2] != NONE && !bias_after(cg, n);
}

/* The bias the convolution kernel adds itself, or "NULL". */
static const char *conv_bias(CG *cg, const Node *n)
{
    return adds_bias(cg, n) ? buf(cg, n->in[2]) : "NULL";
}

/* After a convolution under bias_after: y rounded, the bias added
 * (rounded again when y is stored). */
static void emit_bias_after(CG *cg, const Node *n)
{
    if (!bias_after(cg, n))
        return;
    long N, M, P;
    channel_dims(cg, n->out[0], &N, &M, &P);
    emit(cg, "    %s(%ld, %ld, %ld, %s, %s);\n",
         cg->native == NATIVE_MATRIX ? "mprt_cu_bias_add_bf16" : kernel(cg, "bias_round_add"),
         N * M * P, M, P, buf(cg, n->in[2]), buf(cg, n->out[0]));
}

/* A convolution through oneDNN (runtime/cpu_dnnl.c): cpu.c's operands, the
 * parameters in the table's row. */
static void emit_conv_dnnl(CG *cg, const Node *n)
{
    int row = dnnl_row(cg, n);
    if (n->op == OP_CONV)
        emit(cg, "    mprt_dnnl_conv(%d, %s, %s, %s, %s, %s);\n", row, buf(cg, n->in[0]),
             buf(cg, n->in[1]), conv_bias(cg, n), buf(cg, n->out[0]), workspace(cg));
    else
        emit(cg, "    mprt_dnnl_%s(%d, %s, %s, %s, %s);\n",
             n->op == OP_CONV_GRAD_X ? "conv_grad_x" : "conv_grad_w", row, buf(cg, n->in[0]),
             buf(cg, n->in[1]), buf(cg, n->out[0]), workspace(cg));
}

/* Whether convolution n, in the stage being written, runs through oneDNN:
 * on a CPU device of a trainer, where conv_onednn says so (cost.c). */
static bool uses_dnnl(CG *cg, const Node *n)
{
    return !cg->o->infer && !cuda_stage(cg) && conv_onednn(cg->g, n);
}

static void emit_conv(CG *cg, const Node *n)
{
    if (uses_dnnl(cg, n)) {
        emit_conv_dnnl(cg, n);
        emit_bias_after(cg, n);
        return;
    }
    if (cg->native == NATIVE_MATRIX) {   /* on bf16 tensors, the bias after */
        uint32_t x, w, y;
        conv_operands(n, &x, &w, &y);
        emit(cg, "    mprt_cu_conv%s_bf16(", n->op == OP_CONV          ? ""
                                             : n->op == OP_CONV_GRAD_X ? "_grad_x"
                                                                       : "_grad_w");
        conv_params(cg, n, x, w, y);
        emit(cg, ", %s, %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]),
             workspace(cg));
        emit_bias_after(cg, n);
        return;
    }
    switch (n->op) {
    case OP_CONV:
        emit(cg, "    %s(", kernel(cg, "conv"));
        conv_params(cg, n, n->in[0], n->in[1], n->out[0]);
        emit(cg, ", %s, %s, %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]),
             conv_bias(cg, n), buf(cg, n->out[0]), workspace(cg));
        emit_bias_after(cg, n);
        break;
    case OP_CONV_GRAD_X:
        emit(cg, "    %s(", kernel(cg, "conv_grad_x"));
        conv_params(cg, n, n->out[0], n->in[1], n->in[0]);
        emit(cg, ", %s, %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]),
             buf(cg, n->out[0]), workspace(cg));
        break;
    default:
        emit(cg, "    %s(", kernel(cg, "conv_grad_w"));
        conv_params(cg, n, n->in[1], n->out[0], n->in[0]);
        emit(cg, ", %s, %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]),
             buf(cg, n->out[0]), workspace(cg));
        break;
    }
}

static void emit_batch_norm(CG *cg, const Node *n)
{
    long N, C, P;
    channel_dims(cg, n->in[0], &N, &C, &P);
    bool training = bn_is_training(cg->g, n);
    /* what graph/simplify.c put in its kernel (runtime/cpu.c's MprtBn):
     * the ReLU after it (1); the residual it adds, its own output rounded
     * to bf16 first where that was stored so (2) */
    bool add = bn_add(n) != NULL;
    int fuse = (bn_relu(n) ? 1 : 0) | (add && cg->g->bf16 ? 2 : 0);
    const char *added = add ? buf(cg, n->in[5]) : "NULL";
    if (!training && cg->o->infer) {
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s, %s, %s, (float)%.9g, %d, %s, %s);\n",
             kernel(cg, "bn_infer"), N, C, P, buf(cg, n->in[0]), buf(cg, n->in[1]),
             buf(cg, n->in[2]), buf(cg, n->in[3]), buf(cg, n->in[4]), norm_epsilon(n), fuse,
             added, buf(cg, n->out[0]));
        return;
    }
    if (!training)
        unsupported(cg, n, "BatchNormalization in inference mode");
    /* a recomputation leaves the running statistics alone (NULL) */
    emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s, %s, %s, (float)%.9g, (float)%.9g, %d, %s, %s);\n",
         blocked(cg, n->in[0]) ? "mprt_dnnl_bn_train" : row_kernel(cg, "bn_train"), N, C,
         P, buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]),
         cg->recomputing ? "NULL" : buf(cg, n->in[3]), cg->recomputing ? "NULL" : buf(cg, n->in[4]),
         bn_momentum(n), norm_epsilon(n), fuse, added, buf(cg, n->out[0]));
}

static void emit_instance_norm(CG *cg, const Node *n)
{
    bool grad = n->op == OP_INSTANCE_NORM_GRAD;
    long N, C, P;
    channel_dims(cg, n->in[grad ? 1 : 0], &N, &C, &P);
    if (!grad)
        emit(cg, "    %s(%ld, %ld, %ld, %ld, %s, %s, %s, (float)%.9g, %s);\n", kernel(cg, "group_norm"), N, C,
             C, P, buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]),
             norm_epsilon(n), buf(cg, n->out[0]));
    else
        emit(cg, "    %s(%ld, %ld, %ld, %ld, %s, %s, %s, (float)%.9g, %s, %s, "
             "%s);\n", kernel(cg, "group_norm_grad"), N, C, C, P, buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]),
             norm_epsilon(n), buf(cg, n->out[0]), buf(cg, n->out[1]),
             buf(cg, n->out[2]));
}

/* A pooling's MprtPool fields, {...}. */
static void pool_fields(CG *cg, const Node *n, uint32_t x, uint32_t y)
{
    int64_t xd[5], yd[5], k[3] = {1, 1, 1}, st[3], dl[3], pd[6];
    int sp = window_rank(cg, n, x);
    dims_3d(shape_of(cg, x), xd);
    dims_3d(shape_of(cg, y), yd);
    uint32_t c;
    const int64_t *ks = attr_ints(n, "kernel_shape", &c);
    if (!ks || (int)c != sp)
        unsupported(cg, n, "a kernel_shape that does not match the input's rank");
    for (int i = 0; i < sp; i++)
        k[3 - sp + i] = ks[i];
    window_3d(cg, n, x, y, k, st, dl, pd);
    bool avg = n->op == OP_AVERAGE_POOL || n->op == OP_AVG_POOL_GRAD;
    if (avg && (dl[0] != 1 || dl[1] != 1 || dl[2] != 1))
        unsupported(cg, n, "AveragePool with dilations");
    emit(cg, "{%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
         "%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %d}",
         (long long)xd[0], (long long)xd[1], (long long)xd[2], (long long)xd[3],
         (long long)xd[4], (long long)yd[2], (long long)yd[3], (long long)yd[4],
         (long long)k[0], (long long)k[1], (long long)k[2], (long long)st[0],
         (long long)st[1], (long long)st[2], (long long)dl[0], (long long)dl[1],
         (long long)dl[2], (long long)pd[0], (long long)pd[1], (long long)pd[2],
         (long long)pd[3], (long long)pd[4], (long long)pd[5],
         avg && attr_int(n, "count_include_pad", 0) != 0);
}

static void pool_params(CG *cg, const Node *n, uint32_t x, uint32_t y)
{
    emit(cg, "&(MprtPool)");
    pool_fields(cg, n, x, y);
}

static void emit_pool(CG *cg, const Node *n)
{
    if (n->op == OP_MAX_POOL) {
        if (attr_int(n, "storage_order", 0) != 0)
            unsupported(cg, n, "MaxPool with storage_order 1");
        if (!cg->o->infer && !cuda_stage(cg) && pool_onednn(cg->g, n)) {
            emit(cg, "    mprt_dnnl_maxpool(%d, %s, %s, %s, %s);\n", pool_row(cg, n),
                 buf(cg, n->in[0]), buf(cg, n->out[0]), opt_buf(cg, n, 1, true), workspace(cg));
            return;
        }
        emit(cg, "    %s(", row_kernel(cg, "maxpool"));
        pool_params(cg, n, n->in[0], n->out[0]);
        emit(cg, ", %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->out[0]),
             opt_buf(cg, n, 1, true));
    } else if (n->op == OP_AVERAGE_POOL || n->op == OP_AVG_POOL_GRAD) {
        bool back = n->op == OP_AVG_POOL_GRAD;
        uint32_t x = back ? n->out[0] : n->in[0], y = back ? n->in[0] : n->out[0];
        float_only(cg, n, x);
        emit(cg, "    %s(%d, ", row_kernel(cg, "avgpool"), back);
        pool_params(cg, n, x, y);
        emit(cg, ", %s, %s);\n", buf(cg, x), buf(cg, y));
    } else if (cg->native == NATIVE_ROWS) {   /* gathered, with the forward's window */
        const Node *fwd = &cg->g->nodes[cg->g->values[n->in[1]].producer];
        emit(cg, "    mprt_cu_maxpool_grad_bf16(");
        pool_params(cg, fwd, n->out[0], n->in[0]);
        emit(cg, ", %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
    } else {
        emit(cg, "    %s(%ld, %ld, %s, %s, %s);\n", kernel(cg, "maxpool_grad"), numel(cg, n->in[0]),
             numel(cg, n->out[0]), buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
    }
}

/* ---- elementwise functions, MatMul, normalization (runtime/cpu_math.c) ---- */

static const char *unary_code(Op op)
{
    switch (op) {
    case OP_ERF: return "MPRT_ERF";
    case OP_TANH: return "MPRT_TANH";
    case OP_SQRT: return "MPRT_SQRT";
    case OP_EXP: return "MPRT_EXP";
    case OP_LOG: return "MPRT_LOG";
    case OP_NEG: return "MPRT_NEG";
    case OP_SIGMOID: return "MPRT_SIGMOID";
    case OP_RECIPROCAL: return "MPRT_RECIPROCAL";
    case OP_ABS: return "MPRT_ABS";
    case OP_HARD_SIGMOID: return "MPRT_HARD_SIGMOID";
    case OP_HARD_SWISH: return "MPRT_HARD_SWISH";
    case OP_LEAKY_RELU: return "MPRT_LEAKY_RELU";
    case OP_ELU: return "MPRT_ELU";
    case OP_SELU: return "MPRT_SELU";
    case OP_SOFTPLUS: return "MPRT_SOFTPLUS";
    case OP_GELU: return "MPRT_GELU";
    case OP_CLIP: return "MPRT_CLIP";
    default: return NULL;
    }
}

/* A bound as a float literal: infinities become the largest floats. */
static double finite_float(double v)
{
    return v > 3.4028234663852886e38 ? 3.4028234663852886e38
         : v < -3.4028234663852886e38 ? -3.4028234663852886e38 : v;
}

/* The parameters p, q of an elementwise function (mprt_unary), from the
 * forward node's attributes; a gradient node carries the forward's
 * attributes, and Clip's bounds resolved as attributes min and max. */
static void unary_params(CG *cg, const Node *n, Op op, double *p, double *q)
{
    *p = *q = 0;
    switch (op) {
    case OP_HARD_SIGMOID:
        *p = attr_float(n, "alpha", 0.2), *q = attr_float(n, "beta", 0.5);
        break;
    case OP_LEAKY_RELU: *p = attr_float(n, "alpha", 0.01); break;
    case OP_ELU: *p = attr_float(n, "alpha", 1.0); break;
    case OP_SELU:
        *p = attr_float(n, "alpha", 1.67326319217681884765625);
        *q = attr_float(n, "gamma", 1.05070102214813232421875);
        break;
    case OP_GELU: *q = strcmp(attr_str(n, "approximate", "none"), "tanh") == 0; break;
    case OP_CLIP:
        if (n->op == OP_CLIP)
            clip_bounds(cg->g, n, p, q);
        else
            *p = attr_float(n, "min", -INFINITY), *q = attr_float(n, "max", INFINITY);
        *p = finite_float(*p), *q = finite_float(*q);
        break;
    default: break;
    }
}

/* ElementwiseGrad's y: its own input, or the one value (x or y) its
 * derivative reads, passed as both (autodiff.c's grad_elementwise). */
static uint32_t grad_y(const Node *n)
{
    return n->nin > 2 ? n->in[2] : n->in[1];
}

static void emit_unary(CG *cg, const Node *n)
{
    Op op = n->op == OP_UNARY_GRAD ? (Op)attr_int(n, "op", OP_UNKNOWN) : n->op;
    const char *code = unary_code(op);
    MPCC_ASSERT(code);
    double p, q;
    unary_params(cg, n, op, &p, &q);
    if (n->op == OP_UNARY_GRAD)
        emit(cg, "    %s(%s, %ld, (float)%.9g, (float)%.9g, %s, %s, %s, %s);\n", kernel(cg, "unary_grad"),
             code, numel(cg, n->out[0]), p, q, buf(cg, n->in[0]), buf(cg, n->in[1]),
             buf(cg, grad_y(n)), buf(cg, n->out[0]));
    else
        emit(cg, "    %s(%s, %ld, (float)%.9g, (float)%.9g, %s, %s);\n", kernel(cg, "unary"), code,
             numel(cg, n->out[0]), p, q, buf(cg, n->in[0]), buf(cg, n->out[0]));
}

/* The output's dims as longs, and each listed input's broadcast strides. */
static void emit_bcast(CG *cg, uint32_t out, const uint32_t *ins, int k)
{
    const Shape *y = shape_of(cg, out);
    long shape[MAX_RANK], s[MAX_RANK];
    for (int d = 0; d < y->rank; d++)
        shape[d] = (long)y->d[d];
    emit(cg, "%d, ", y->rank);
    emit_longs(cg, shape, y->rank);
    for (int j = 0; j < k; j++) {
        bcast_strides(y, shape_of(cg, ins[j]), s);
        emit(cg, ", %s, ", buf(cg, ins[j]));
        emit_longs(cg, s, y->rank);
    }
}

static void emit_pow_grad(CG *cg, const Node *n)
{
    emit(cg, "    %s(%d, ", kernel(cg, "pow_grad"), (int)attr_int(n, "wrt", 0));
    /* dy and y have the output's shape; a and b are broadcast into it */
    const Shape *y = shape_of(cg, n->out[0]);
    long shape[MAX_RANK];
    for (int d = 0; d < y->rank; d++)
        shape[d] = (long)y->d[d];
    emit(cg, "%d, ", y->rank);
    emit_longs(cg, shape, y->rank);
    emit(cg, ", %s", buf(cg, n->in[0]));
    for (int j = 1; j <= 2; j++) {
        long s[MAX_RANK];
        bcast_strides(y, shape_of(cg, n->in[j]), s);
        emit(cg, ", %s, ", buf(cg, n->in[j]));
        emit_longs(cg, s, y->rank);
    }
    emit(cg, ", %s, %s);\n", buf(cg, n->in[3]), buf(cg, n->out[0]));
}

/* Strides of one operand's matrices along the full batch dims (rank r,
 * right-aligned), 0 where the operand's batch dim is 1 or absent. */
static void matrix_strides(const MatView *v, int mdims, int r, long *st)
{
    for (int d = r - 1, j = v->shape.rank - mdims - 1; d >= 0; d--, j--)
        st[d] = j >= 0 && v->shape.d[j] != 1 ? (long)v->stride[j] : 0;
}

/* An operand matrix's leading dimension, for op(X) with *trans: its rows'
 * stride where its columns lie contiguous, else (a view of a transposed
 * activation, graph/views.c) its columns', read as the transpose (*trans
 * flips). */
static long leading_dim(const MatView *v, int *trans)
{
    int r = v->shape.rank;
    long rows = (long)v->shape.d[r - 2], cols = (long)v->shape.d[r - 1];
    if (v->stride[r - 1] == 1 || cols == 1)
        return rows == 1 ? cols : (long)v->stride[r - 2];
    MPCC_ASSERT(rows == 1 || v->stride[r - 2] == 1);
    *trans = !*trans;
    return (long)v->stride[r - 1];
}

/* MatMul (numpy semantics, 1-D operands included) and BatchMatMul, its
 * gradient form with transposed operands and an output that may sum over
 * broadcast batch dims, each operand read and the output written through
 * its view (dense but for graph/views.c's). An output whose rows lie
 * contiguous is written as its transpose: op(B)^T op(A)^T. */
static void emit_matmul(CG *cg, const Node *n)
{
    MatView va = matmul_view(cg->g, n, 0), vb = matmul_view(cg->g, n, 1),
            vy = matmul_view(cg->g, n, 2);
    const Shape *a = &va.shape, *b = &vb.shape, *y = &vy.shape;
    GemmParams gp = gemm_params(n);   /* autodiff's transposed products */
    int ta = gp.trans_a, tb = gp.trans_b;
    int ma = a->rank >= 2 ? 2 : 1, mb = b->rank >= 2 ? 2 : 1;
    long M = a->rank >= 2 ? (long)a->d[a->rank - (ta ? 1 : 2)] : 1;
    long K = (long)a->d[a->rank - (ta && a->rank >= 2 ? 2 : 1)];
    long N = b->rank >= 2 ? (long)b->d[b->rank - (tb ? 2 : 1)] : 1;
    int my = (a->rank >= 2) + (b->rank >= 2);
    if (n->op == OP_BATCH_MATMUL)
        my = 2;
    int r = a->rank - ma > b->rank - mb ? a->rank - ma : b->rank - mb;
    long shape[MAX_RANK], sa[MAX_RANK], sb[MAX_RANK], sy[MAX_RANK];
    for (int d = r - 1, ja = a->rank - ma - 1, jb = b->rank - mb - 1; d >= 0; d--, ja--, jb--) {
        long da = ja >= 0 ? (long)a->d[ja] : 1, db = jb >= 0 ? (long)b->d[jb] : 1;
        shape[d] = da > db ? da : db;
    }
    matrix_strides(&va, ma, r, sa);
    matrix_strides(&vb, mb, r, sb);
    matrix_strides(&vy, my, r, sy);
    if (y->rank - my > r)
        unsupported(cg, n, "a MatMul output with more batch dims than its operands");
    int ty = 0;
    long ld[3] = {ma < 2 ? K : leading_dim(&va, &ta), mb < 2 ? 1 : leading_dim(&vb, &tb),
                  my < 2 ? N : leading_dim(&vy, &ty)};
    const char *in_a = buf(cg, n->in[0]), *in_b = buf(cg, n->in[1]);
    if (ty) {   /* Y^T = op(B)^T op(A)^T */
        long t = M;
        M = N, N = t;
        int tt = ta;
        ta = !tb, tb = !tt;
        const char *p = in_a;
        in_a = in_b, in_b = p;
        t = ld[0], ld[0] = ld[1], ld[1] = t;
        for (int d = 0; d < r; d++)
            t = sa[d], sa[d] = sb[d], sb[d] = t;
    }
    emit(cg, "    %s(%d, ", cg->native == NATIVE_MATRIX ? "mprt_cu_bmm_bf16" : kernel(cg, "bmm"), r);
    emit_longs(cg, shape, r);
    emit(cg, ", ");
    emit_longs(cg, sa, r);
    emit(cg, ", ");
    emit_longs(cg, sb, r);
    emit(cg, ", ");
    emit_longs(cg, sy, r);
    emit(cg, ", %ld, %ld, %ld, %d, %d, ", M, N, K, ta, tb);
    emit_longs(cg, ld, 3);
    emit(cg, ", %s, %s, %s", in_a, in_b, buf(cg, n->out[0]));
    if (cg->native == NATIVE_MATRIX)
        emit(cg, ", %d", is_bf16(cg, n->out[0]));
    emit(cg, ");\n");
}

/* Softmax over `axis` as (outer, C, inner); before opset 13 the axis
 * flattens everything after it into C. */
static void softmax_dims(CG *cg, const Node *n, uint32_t x, long *outer, long *C, long *inner)
{
    const Shape *s = shape_of(cg, x);
    int axis = softmax_axis(cg->g, n);
    *outer = *C = *inner = 1;
    for (int i = 0; i < s->rank; i++) {
        long d = (long)s->d[i];
        if (i < axis)
            *outer *= d;
        else if (i == axis || cg->g->opset < 13)
            *C *= d;
        else
            *inner *= d;
    }
}

/* softmax(x + b) over the last axis, b's rows taken in turn by x's
 * (simplify.c's SoftmaxBias). The sum is rounded as the Add it replaces
 * stored it: to bf16 when the output is kept in bf16. */
static void emit_softmax_bias(CG *cg, const Node *n)
{
    const Shape *b = shape_of(cg, n->in[1]);
    long C = (long)b->d[b->rank - 1], rows = numel(cg, n->out[0]) / C, brows = numel(cg, n->in[1]) / C;
    if (cg->native == NATIVE_ROWS) {
        emit(cg, "    mprt_cu_softmax_bias_bf16(%ld, %ld, %ld, %s, %s, %s);\n", rows, C, brows,
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
        return;
    }
    emit(cg, "    %s(%ld, %ld, %ld, %d, %s, %s, %s);\n", kernel(cg, "softmax_bias"), rows, C, brows,
         stored_dtype(cg, n->out[0]) == DT_BF16, buf(cg, n->in[0]), buf(cg, n->in[1]),
         buf(cg, n->out[0]));
}

static void emit_softmax(CG *cg, const Node *n)
{
    long outer, C, inner;
    if (n->op == OP_SOFTMAX_BIAS) {
        emit_softmax_bias(cg, n);
        return;
    }
    softmax_dims(cg, n, n->out[0], &outer, &C, &inner);
    bool log = n->op == OP_LOG_SOFTMAX || n->op == OP_LOG_SOFTMAX_GRAD;
    if (n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX)
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s);\n", row_kernel(cg, log ? "log_softmax" : "softmax"),
             outer, C,
             inner, buf(cg, n->in[0]), buf(cg, n->out[0]));
    else
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s);\n",
             row_kernel(cg, log ? "log_softmax_grad" : "softmax_grad"), outer,
             C, inner, buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
}


static void layer_norm_dims(CG *cg, const Node *n, uint32_t x, uint32_t scale, long *rows,
                            long *D)
{
    const Shape *s = shape_of(cg, x);
    int axis = (int)attr_int(n, "axis", -1);
    axis = axis < 0 ? axis + s->rank : axis;
    *rows = *D = 1;
    for (int i = 0; i < s->rank; i++)
        *(i < axis ? rows : D) *= (long)s->d[i];
    if (numel(cg, scale) != *D)
        unsupported(cg, n, "a LayerNormalization scale that is broadcast");
}

static void emit_layer_norm(CG *cg, const Node *n)
{
    long rows, D;
    if (n->op == OP_LAYER_NORM) {
        layer_norm_dims(cg, n, n->in[0], n->in[1], &rows, &D);
        emit(cg, "    %s(%ld, %ld, %s, %s, %s, (float)%.9g, %s, %s, %s);\n", row_kernel(cg, "layernorm"), rows, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), opt_buf(cg, n, 2, false),
             norm_epsilon(n), buf(cg, n->out[0]), opt_buf(cg, n, 1, true),
             opt_buf(cg, n, 2, true));
    } else {
        layer_norm_dims(cg, n, n->in[1], n->in[2], &rows, &D);
        emit(cg, "    %s(%ld, %ld, %s, %s, %s, %s, %s, %s, %s, %s);\n", row_kernel(cg, "layernorm_grad"), rows, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]), buf(cg, n->in[3]),
             buf(cg, n->in[4]), buf(cg, n->out[0]), buf(cg, n->out[1]),
             opt_buf(cg, n, 2, true));
    }
}

static void emit_dropout(CG *cg, const Node *n)
{
    cg->dropout = true;   /* the function sets mprt_dropout_mb, which the mask reads */
    /* --infer: before opset 12 Dropout has no training mode: the identity */
    double ratio = cg->o->infer && cg->g->opset < 12 ? 0 : dropout_ratio(cg->g, n);
    if (n->op == OP_DROPOUT)
        emit(cg, "    %s(%ld, %u, (float)%.9g, mprt_training, %s, %s, %s);\n", row_kernel(cg, "dropout"),
             numel(cg, n->out[0]), (unsigned)(n - cg->g->nodes), ratio,
             buf(cg, n->in[0]), buf(cg, n->out[0]), opt_buf(cg, n, 1, true));
    else
        emit(cg, "    %s(%ld, %u, (float)%.9g, %s, %s);\n", row_kernel(cg, "dropout_grad"), numel(cg, n->out[0]),
             (unsigned)attr_int(n, "node", 0), attr_float(n, "ratio", 0), buf(cg, n->in[0]),
             buf(cg, n->out[0]));
}

/* ---- data movement (runtime/cpu_move.c) ---- */

/* One strided copy: `view` (the small side: a slice, or the transposed
 * output) read from (back: written into) `full` at base + idx * stride. */
/* The element size of a tensor the layout kernels move (Transpose, Slice,
 * Concat): float32, or bf16 under --precision=bf16 where every operand is
 * (cost.c's bf16_native). */
static int moved_size(CG *cg, const Node *n, uint32_t v)
{
    if (cg->g->values[v].dtype == DT_BF16)
        return 2;
    float_only(cg, n, v);
    return 4;
}

static void emit_strided(CG *cg, int size, int back, uint32_t view, const long *stride,
                         long base, uint32_t full)
{
    const Shape *s = shape_of(cg, view);
    long shape[MAX_RANK];
    for (int d = 0; d < s->rank; d++)
        shape[d] = (long)s->d[d];
    emit(cg, "    %s(%d, %d, %d, ", kernel(cg, "strided"), size, back, s->rank);
    emit_longs(cg, shape, s->rank);
    emit(cg, ", ");
    emit_longs(cg, stride, s->rank);
    emit(cg, ", %ld, %ld, %s, %s);\n", base, numel(cg, full), buf(cg, full), buf(cg, view));
}

static void emit_transpose(CG *cg, const Node *n)
{
    int size = moved_size(cg, n, n->in[0]);
    int perm[MAX_RANK];
    transpose_perm(cg->g, (Node *)n, perm);
    long in_st[MAX_RANK], st[MAX_RANK];
    dense_strides(shape_of(cg, n->in[0]), in_st);
    for (int d = 0; d < shape_of(cg, n->out[0])->rank; d++)
        st[d] = in_st[perm[d]];
    emit_strided(cg, size, 0, n->out[0], st, 0, n->in[0]);
}

static void emit_slice(CG *cg, const Node *n)
{
    bool back = n->op == OP_SLICE_GRAD;
    uint32_t full = back ? n->out[0] : n->in[0], view = back ? n->in[0] : n->out[0];
    int size = moved_size(cg, n, full);
    const Shape *fs = shape_of(cg, full);
    int64_t start[MAX_RANK], step[MAX_RANK];
    if (back) {
        uint32_t c1, c2;
        const int64_t *a = attr_ints(n, "starts", &c1), *b = attr_ints(n, "steps", &c2);
        MPCC_ASSERT(a && b && (int)c1 == fs->rank && (int)c2 == fs->rank);
        memcpy(start, a, sizeof(int64_t) * c1);
        memcpy(step, b, sizeof(int64_t) * c2);
    } else {
        SliceParams p;
        slice_params(cg->g, (Node *)n, &p);
        memcpy(start, p.start, sizeof start);
        memcpy(step, p.step, sizeof step);
    }
    long st[MAX_RANK], base = 0;
    dense_strides(fs, st);
    for (int d = 0; d < fs->rank; d++) {
        base += (long)start[d] * st[d];
        st[d] *= (long)step[d];
    }
    emit_strided(cg, size, back, view, st, base, full);
}

static int norm_axis_of(const Node *n, int rank)
{
    int axis = (int)attr_int(n, "axis", 0);
    return axis < 0 ? axis + rank : axis;
}

/* The element counts before and after dimension `axis`. */
static void around_axis(const Shape *s, int axis, long *outer, long *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < s->rank; d++)
        if (d < axis)
            *outer *= (long)s->d[d];
        else if (d > axis)
            *inner *= (long)s->d[d];
}

/* Concat, and Split as its inverse: `outer` rows of parts laid side by
 * side along the axis. */
static void emit_concat(CG *cg, const Node *n)
{
    bool split = n->op == OP_SPLIT;
    uint32_t whole = split ? n->in[0] : n->out[0];
    const uint32_t *parts = split ? n->out : n->in;
    uint32_t k = split ? n->nout : n->nin;
    int size = moved_size(cg, n, whole);
    const Shape *s = shape_of(cg, whole);
    int axis = norm_axis_of(n, s->rank);
    long outer, inner;
    around_axis(s, axis, &outer, &inner);
    long *len = arena_array(cg->g->arena, k, sizeof(long));
    for (uint32_t j = 0; j < k; j++)
        len[j] = parts[j] != NONE ? (long)shape_of(cg, parts[j])->d[axis] : 0;
    emit(cg, "    %s(%d, %d, %ld, %ld, %u, ", kernel(cg, "concat"), size, split, outer, inner, k);
    emit_longs(cg, len, (int)k);
    emit(cg, ", (void *const[]){");
    for (uint32_t j = 0; j < k; j++)
        emit(cg, "%s%s", j ? ", " : "",
             has_buf(cg, parts[j]) ? buf(cg, parts[j]) : "NULL");
    emit(cg, "}, %s);\n", buf(cg, whole));
}

static void emit_pad(CG *cg, const Node *n)
{
    bool back = n->op == OP_PAD_GRAD;
    uint32_t x = back ? n->out[0] : n->in[0], y = back ? n->in[0] : n->out[0];
    float_only(cg, n, x);
    const char *mode = attr_str(n, "mode", "constant");
    const char *code = strcmp(mode, "constant") == 0 ? "MPRT_PAD_CONSTANT"
                     : strcmp(mode, "reflect") == 0 ? "MPRT_PAD_REFLECT"
                     : strcmp(mode, "edge") == 0 ? "MPRT_PAD_EDGE" : NULL;
    if (!code)
        unsupported(cg, n, "Pad mode 'wrap' (use constant, reflect or edge)");
    const Shape *xs = shape_of(cg, x), *ys = shape_of(cg, y);
    long xd[MAX_RANK], yd[MAX_RANK], begin[MAX_RANK];
    double value = 0;
    if (back) {
        uint32_t c;
        const int64_t *b = attr_ints(n, "begins", &c);
        MPCC_ASSERT(b && (int)c == xs->rank);
        for (int d = 0; d < xs->rank; d++)
            begin[d] = (long)b[d];
    } else {
        int64_t pads[2 * MAX_RANK];
        pad_params(cg->g, (Node *)n, pads, &value);
        for (int d = 0; d < xs->rank; d++)
            begin[d] = (long)pads[d];
    }
    for (int d = 0; d < xs->rank; d++)
        xd[d] = (long)xs->d[d], yd[d] = (long)ys->d[d];
    emit(cg, "    %s(%d, %s, %d, ", kernel(cg, "pad"), back, code, xs->rank);
    emit_longs(cg, xd, xs->rank);
    emit(cg, ", ");
    emit_longs(cg, yd, xs->rank);
    emit(cg, ", ");
    emit_longs(cg, begin, xs->rank);
    emit(cg, ", ");
    emit_float_literal(cg, value);
    emit(cg, ", %s, %s);\n", buf(cg, x), buf(cg, y));
}

static void emit_gather(CG *cg, const Node *n)
{
    bool grad = n->op == OP_GATHER_GRAD;
    uint32_t data = grad ? n->out[0] : n->in[0], idx = n->in[1];
    float_only(cg, n, data);
    if (cg->g->values[idx].dtype != DT_I64)
        unsupported(cg, n, "Gather indices that are not int64");
    const Shape *s = shape_of(cg, data);
    int axis = norm_axis_of(n, s->rank);
    long outer, inner;
    around_axis(s, axis, &outer, &inner);
    emit(cg, "    %s(%ld, %lld, %ld, %ld, %s, %s, %s, %s);\n",
         kernel(cg, grad ? "gather_grad" : "gather"),
         outer, (long long)s->d[axis], inner, numel(cg, idx), buf(cg, idx),
         buf(cg, n->in[0]), buf(cg, n->out[0]), c_string(cg, n->name));
}

static void emit_where(CG *cg, const Node *n)
{
    float_only(cg, n, n->out[0]);
    if (cg->g->values[n->in[0]].dtype != DT_BOOL)
        unsupported(cg, n, "a Where condition that is not bool");
    emit(cg, "    %s(", kernel(cg, "where"));
    emit_bcast(cg, n->out[0], n->in, 3);
    emit(cg, ", %s);\n", buf(cg, n->out[0]));
}

/* Comparisons and logic ops: bool masks from float, int64 or bool inputs. */
static void emit_compare(CG *cg, const Node *n)
{
    if (n->op == OP_NOT) {
        emit(cg, "    %s(%ld, %s, %s);\n", kernel(cg, "not"), numel(cg, n->out[0]), buf(cg, n->in[0]),
             buf(cg, n->out[0]));
        return;
    }
    static const char *ops[] = {[OP_EQUAL] = "MPRT_EQUAL", [OP_LESS] = "MPRT_LESS",
                                [OP_LESS_EQUAL] = "MPRT_LESS_EQUAL",
                                [OP_GREATER] = "MPRT_GREATER",
                                [OP_GREATER_EQUAL] = "MPRT_GREATER_EQUAL",
                                [OP_AND] = "MPRT_AND", [OP_OR] = "MPRT_OR",
                                [OP_XOR] = "MPRT_XOR"};
    DType t = cg->g->values[n->in[0]].dtype;
    const char *type = t == DT_F32 ? "MPRT_ELEM_F32" : t == DT_I64 ? "MPRT_ELEM_I64"
                     : t == DT_BOOL ? "MPRT_ELEM_BOOL" : NULL;
    if (!type)
        unsupported(cg, n, arena_printf(cg->g->arena, "%s on %s tensors", n->op_type,
                                        dtype_name(t)));
    emit(cg, "    %s(%s, %s, ", kernel(cg, "compare"), ops[n->op], type);
    emit_bcast(cg, n->out[0], n->in, 2);
    emit(cg, ", %s);\n", buf(cg, n->out[0]));
}

/* The element type of the kernels that take any (Mod, ArgMax): MPRT_ELEM_*. */
static const char *elem_code(CG *cg, const Node *n, uint32_t v)
{
    switch (cg->g->values[v].dtype) {
    case DT_F32: return "MPRT_ELEM_F32";
    case DT_F64: return "MPRT_ELEM_F64";
    case DT_I64: return "MPRT_ELEM_I64";
    case DT_I32: return "MPRT_ELEM_I32";
    case DT_I16: return "MPRT_ELEM_I16";
    case DT_I8: return "MPRT_ELEM_I8";
    case DT_U8: return "MPRT_ELEM_U8";
    default:
        unsupported(cg, n, arena_printf(cg->g->arena, "%s on %s tensors", n->op_type,
                                        dtype_name(cg->g->values[v].dtype)));
    }
}

/* Mod with broadcasting, in its operands' type. */
static void emit_mod(CG *cg, const Node *n)
{
    const char *type = elem_code(cg, n, n->in[0]);
    emit(cg, "    %s(%d, %s, ", kernel(cg, "mod"), mod_fmod(n), type);
    emit_bcast(cg, n->out[0], n->in, 2);
    emit(cg, ", %s);\n", buf(cg, n->out[0]));
}

/* ArgMax and ArgMin over the input as (outer, axis, inner). */
static void emit_argmax(CG *cg, const Node *n)
{
    uint32_t x = n->in[0];
    const char *type = elem_code(cg, n, x);
    ArgParams p = arg_params(cg->g, n);
    const Shape *s = shape_of(cg, x);
    long outer, inner;
    around_axis(s, p.axis, &outer, &inner);
    emit(cg, "    %s(%d, %d, %s, %ld, %lld, %ld, %s, %s);\n", kernel(cg, "argmax"),
         n->op == OP_ARGMIN, p.last, type, outer, (long long)s->d[p.axis], inner, buf(cg, x),
         buf(cg, n->out[0]));
}

/* CumSum (and its gradient, CumSum the other way) along its constant axis. */
static void emit_cumsum(CG *cg, const Node *n)
{
    uint32_t x = n->in[0];
    float_only(cg, n, x);
    CumSumParams p = cumsum_params(cg->g, n);
    const Shape *s = shape_of(cg, x);
    long outer, inner;
    around_axis(s, p.axis, &outer, &inner);
    emit(cg, "    %s(%d, %d, %ld, %lld, %ld, %s, %s);\n", kernel(cg, "cumsum"), p.exclusive,
         p.reverse, outer, (long long)s->d[p.axis], inner, buf(cg, x), buf(cg, n->out[0]));
}

/* The element type of GatherElements', ScatterElements', GatherND's and
 * ScatterND's data (bool as its bytes), and of their indices. */
static const char *elements_type(CG *cg, const Node *n, uint32_t v)
{
    return cg->g->values[v].dtype == DT_BOOL ? "MPRT_ELEM_U8" : elem_code(cg, n, v);
}

static const char *index_type(CG *cg, const Node *n, uint32_t idx)
{
    DType t = cg->g->values[idx].dtype;
    if (t != DT_I32 && t != DT_I64)
        unsupported(cg, n, arena_printf(cg->g->arena, "%s indices of type %s", n->op_type,
                                        dtype_name(t)));
    return t == DT_I32 ? "MPRT_ELEM_I32" : "MPRT_ELEM_I64";
}

static const char *const scatter_codes[] = {"MPRT_SCATTER_NONE", "MPRT_SCATTER_ADD",
                                            "MPRT_SCATTER_MUL", "MPRT_SCATTER_MAX",
                                            "MPRT_SCATTER_MIN"};

/* GatherElements, ScatterElements and Scatter, and their gradients
 * (float32: dy scatter-added into zeros; dy zeroed where the updates
 * were written), over the data's and the indices' shapes. */
static void emit_elements(CG *cg, const Node *n)
{
    bool fwd = n->op == OP_GATHER_ELEMENTS || n->op == OP_SCATTER ||
               n->op == OP_SCATTER_ELEMENTS;
    uint32_t data = n->op == OP_GATHER_ELEMENTS ? n->in[0] : n->out[0], idx = n->in[1];
    const Shape *xs = shape_of(cg, data), *is = shape_of(cg, idx);
    const char *itype = index_type(cg, n, idx);
    long xd[MAX_RANK], id[MAX_RANK];
    for (int d = 0; d < xs->rank; d++)
        xd[d] = (long)xs->d[d], id[d] = (long)is->d[d];
    if (!fwd)
        float_only(cg, n, data);
    const char *name = n->op == OP_GATHER_ELEMENTS ? "gather_elements"
                     : n->op == OP_GATHER_ELEMENTS_GRAD ? "gather_elements_grad"
                     : n->op == OP_SCATTER_ELEMENTS_GRAD ? "scatter_elements_grad"
                     : "scatter_elements";
    emit(cg, "    %s(", kernel(cg, name));
    if (fwd && n->op != OP_GATHER_ELEMENTS)
        emit(cg, "%s, ", scatter_codes[scatter_reduction(cg->g, n)]);
    if (fwd)
        emit(cg, "%s, ", elements_type(cg, n, data));
    emit(cg, "%s, %d, %d, ", itype, xs->rank, elements_axis(n, xs->rank));
    emit_longs(cg, xd, xs->rank);
    emit(cg, ", ");
    emit_longs(cg, id, xs->rank);
    emit(cg, ", %s", buf(cg, idx));
    for (uint32_t k = 0; k < n->nin; k++)
        if (k != 1)
            emit(cg, ", %s", buf(cg, n->in[k]));
    emit(cg, ", %s, %s);\n", buf(cg, n->out[0]), c_string(cg, n->name));
}

/* GatherND (batch_dims b), ScatterND and their gradients: the data as
 * nbatch x (the k dims an index row names) x inner, the indices as
 * nbatch x nrows x k; ScatterND has no batch. */
static void emit_nd(CG *cg, const Node *n)
{
    bool gather = n->op == OP_GATHER_ND || n->op == OP_GATHER_ND_GRAD;
    bool fwd = n->op == OP_GATHER_ND || n->op == OP_SCATTER_ND;
    uint32_t data = n->op == OP_GATHER_ND ? n->in[0] : n->out[0], idx = n->in[1];
    const Shape *xs = shape_of(cg, data), *is = shape_of(cg, idx);
    const char *itype = index_type(cg, n, idx);
    int b = gather ? (int)attr_int(n, "batch_dims", 0) : 0, k = (int)is->d[is->rank - 1];
    long nbatch = 1, nrows = 1, inner = 1, dims[MAX_RANK];
    for (int d = 0; d < b; d++)
        nbatch *= (long)xs->d[d];
    for (int d = b; d < is->rank - 1; d++)
        nrows *= (long)is->d[d];
    for (int q = 0; q < k; q++)
        dims[q] = (long)xs->d[b + q];
    for (int d = b + k; d < xs->rank; d++)
        inner *= (long)xs->d[d];
    if (!fwd)
        float_only(cg, n, data);
    const char *name = n->op == OP_GATHER_ND ? "gather_nd"
                     : n->op == OP_GATHER_ND_GRAD ? "gather_nd_grad"
                     : n->op == OP_SCATTER_ND_GRAD ? "scatter_nd_grad" : "scatter_nd";
    emit(cg, "    %s(", kernel(cg, name));
    if (n->op == OP_SCATTER_ND)
        emit(cg, "%s, ", scatter_codes[scatter_reduction(cg->g, n)]);
    if (fwd)
        emit(cg, "%s, ", elements_type(cg, n, data));
    emit(cg, "%s, ", itype);
    if (gather)
        emit(cg, "%ld, ", nbatch);
    emit(cg, "%ld, %d, ", nrows, k);
    emit_longs(cg, dims, k);
    emit(cg, ", %ld, %s", inner, buf(cg, idx));
    for (uint32_t j = 0; j < n->nin; j++)
        if (j != 1)
            emit(cg, ", %s", buf(cg, n->in[j]));
    emit(cg, ", %s, %s);\n", buf(cg, n->out[0]), c_string(cg, n->name));
}

/* The bytes of an element of v, for the kernels that copy elements of any
 * type (TopK's values, OneHot, Trilu). */
static int elem_bytes(CG *cg, const Node *n, uint32_t v)
{
    DType t = cg->g->values[v].dtype;
    if (!ctype(t))
        unsupported(cg, n, arena_printf(cg->g->arena, "%s on %s tensors", n->op_type,
                                        dtype_name(t)));
    return (int)dtype_size(t);
}

/* TopK over the input as (outer, axis, inner): the K first of each line,
 * their values and their indices. */
static void emit_topk(CG *cg, const Node *n)
{
    uint32_t x = n->in[0];
    const char *type = elem_code(cg, n, x);
    TopKParams p = topk_params(cg->g, n);
    const Shape *s = shape_of(cg, x);
    long outer, inner;
    around_axis(s, p.axis, &outer, &inner);
    emit(cg, "    %s(%d, %s, %ld, %lld, %lld, %ld, %s, %s, %s);\n", kernel(cg, "topk"),
         p.largest, type, outer, (long long)s->d[p.axis], (long long)p.k, inner, buf(cg, x),
         buf(cg, n->out[0]), buf(cg, n->out[1]));
}

/* TopK's gradient: dy back at the positions of the forward's indices. */
static void emit_topk_grad(CG *cg, const Node *n)
{
    uint32_t dy = n->in[0], dx = n->out[0];
    float_only(cg, n, dx);
    int axis = (int)attr_int(n, "axis", 0);
    const Shape *s = shape_of(cg, dx);
    long outer, inner;
    around_axis(s, axis, &outer, &inner);
    emit(cg, "    %s(%ld, %lld, %lld, %ld, %s, %s, %s);\n", kernel(cg, "topk_grad"), outer,
         (long long)s->d[axis], (long long)shape_of(cg, dy)->d[axis], inner, buf(cg, dy),
         buf(cg, n->in[1]), buf(cg, dx));
}

/* OneHot, the output as (outer, depth, inner); its gradient (dvalues from
 * dy) walks the same layout. */
static void emit_onehot(CG *cg, const Node *n)
{
    bool grad = n->op == OP_ONE_HOT_GRAD;
    uint32_t idx = grad ? n->in[1] : n->in[0], y = grad ? n->in[0] : n->out[0];
    const char *type = elem_code(cg, n, idx);
    int axis = grad ? (int)attr_int(n, "axis", 0) : onehot_params(cg->g, n).axis;
    const Shape *s = shape_of(cg, y);
    long outer, inner;
    around_axis(s, axis, &outer, &inner);
    if (grad) {
        float_only(cg, n, y);
        emit(cg, "    %s(%s, %ld, %lld, %ld, %s, %s, %s);\n", kernel(cg, "onehot_grad"), type,
             outer, (long long)s->d[axis], inner, buf(cg, idx), buf(cg, y), buf(cg, n->out[0]));
        return;
    }
    emit(cg, "    %s(%s, %ld, %lld, %ld, %d, %s, %s, %s);\n", kernel(cg, "onehot"), type, outer,
         (long long)s->d[axis], inner, elem_bytes(cg, n, y), buf(cg, idx), buf(cg, n->in[2]),
         buf(cg, y));
}

/* Trilu (and its gradient, the same triangle of dy) over the matrices of
 * the last two dimensions; a k past either corner is clamped to it. */
static void emit_trilu(CG *cg, const Node *n)
{
    uint32_t x = n->in[0], y = n->out[0];
    TriluParams p = trilu_params(cg->g, n);
    const Shape *s = shape_of(cg, x);
    long count = 1, rows = (long)s->d[s->rank - 2], cols = (long)s->d[s->rank - 1];
    for (int d = 0; d < s->rank - 2; d++)
        count *= (long)s->d[d];
    long k = p.k < -rows ? -rows : p.k > cols ? cols : (long)p.k;
    emit(cg, "    %s(%d, %ld, %ld, %ld, %ld, %d, %s, %s);\n", kernel(cg, "trilu"), p.upper, k,
         count, rows, cols, elem_bytes(cg, n, y), buf(cg, x), buf(cg, y));
}

static const char *cast_code(CG *cg, const Node *n, DType t)
{
    switch (t) {
    case DT_F32: return "MPRT_CAST_F32";
    case DT_I64: return "MPRT_CAST_I64";
    case DT_I32: return "MPRT_CAST_I32";
    case DT_U8: return "MPRT_CAST_U8";
    case DT_BOOL: return "MPRT_CAST_BOOL";
    case DT_F64: return "MPRT_CAST_F64";
    case DT_F16: return "MPRT_CAST_F16";
    default: unsupported(cg, n, arena_printf(cg->g->arena, "Cast to or from %s", dtype_name(t)));
    }
}

static void emit_cast(CG *cg, const Node *n)
{
    DType from = cg->g->values[n->in[0]].dtype, to = cg->g->values[n->out[0]].dtype;
    emit(cg, "    %s(%ld, %s, %s, %s, %s);\n", kernel(cg, "cast"), numel(cg, n->out[0]), cast_code(cg, n, from),
         cast_code(cg, n, to), buf(cg, n->in[0]), buf(cg, n->out[0]));
}

/* Upsample, and Resize before opset 11 (and their gradients, marked by
 * autodiff): the output coordinate over the scale, nearest rounding down. */
static bool upsample_like(CG *cg, const Node *n)
{
    return n->op == OP_UPSAMPLE || attr_int(n, "upsample", 0) != 0 || cg->g->opset < 11;
}

static const char *resize_coord(CG *cg, const Node *n)
{
    if (upsample_like(cg, n))
        return "MPRT_ASYMMETRIC";
    const char *c = attr_str(n, "coordinate_transformation_mode", "half_pixel");
    if (strcmp(c, "half_pixel") == 0) return "MPRT_HALF_PIXEL";
    if (strcmp(c, "pytorch_half_pixel") == 0) return "MPRT_PYTORCH_HALF_PIXEL";
    if (strcmp(c, "align_corners") == 0) return "MPRT_ALIGN_CORNERS";
    if (strcmp(c, "asymmetric") == 0) return "MPRT_ASYMMETRIC";
    unsupported(cg, n, arena_printf(cg->g->arena, "Resize with coordinate_transformation_mode "
                                    "%s", str_escaped(cg->g->arena, c, 40)));
}

static const char *resize_mode(CG *cg, const Node *n)
{
    const char *m = attr_str(n, "mode", "nearest");
    if (strcmp(m, "linear") == 0 || (upsample_like(cg, n) && strcmp(m, "bilinear") == 0))
        return "MPRT_LINEAR";
    if (strcmp(m, "nearest") != 0)
        unsupported(cg, n, "Resize modes other than nearest and linear");
    if (upsample_like(cg, n))
        return "MPRT_NEAREST_FLOOR";
    const char *r = attr_str(n, "nearest_mode", "round_prefer_floor");
    if (strcmp(r, "floor") == 0) return "MPRT_NEAREST_FLOOR";
    if (strcmp(r, "ceil") == 0) return "MPRT_NEAREST_CEIL";
    if (strcmp(r, "round_prefer_ceil") == 0) return "MPRT_NEAREST_ROUND_UP";
    return "MPRT_NEAREST_ROUND_DOWN";
}

static void emit_resize(CG *cg, const Node *n)
{
    bool back = n->op == OP_RESIZE_GRAD;
    uint32_t x = back ? n->out[0] : n->in[0], y = back ? n->in[0] : n->out[0];
    const Shape *xs = shape_of(cg, x), *ys = shape_of(cg, y);
    float_only(cg, n, x);
    if (xs->rank != 4 || xs->d[0] != ys->d[0] || xs->d[1] != ys->d[1])
        unsupported(cg, n, "Resize other than of the last two dims of a 4-D tensor");
    if (attr_int(n, "antialias", 0))
        unsupported(cg, n, "Resize with antialias");
    double scale[2] = {attr_float(n, "scale_h", 0), attr_float(n, "scale_w", 0)};
    if (!back)
        resize_scales(cg->g, n, scale);
    emit(cg, "    %s(%d, &(MprtResize){%lld, %lld, %lld, %lld, %lld, %s, %s, "
         "(float)%.9g, (float)%.9g}, %s, %s);\n", kernel(cg, "resize"), back, (long long)(xs->d[0] * xs->d[1]),
         (long long)xs->d[2], (long long)xs->d[3], (long long)ys->d[2], (long long)ys->d[3],
         resize_coord(cg, n), resize_mode(cg, n), scale[0], scale[1], buf(cg, x), buf(cg, y));
}

/* ---- fused elementwise chains (fuse.c; runtime/kernel.h's MprtEwChain) ---- */

/* One step of a chain as the program writes it. */
typedef struct ChainStep {
    const char *kind, *op;   /* "MPRT_EW_BINARY", "MPRT_ADD" */
    int a, b, swap;
    bool round;              /* the node's value is stored in bf16: v rounded after */
    double p, q;
    bool literal;            /* p is a constant's float (written exactly), not a parameter */
    const Node *node;
} ChainStep;

typedef struct Chain {
    ChainStep step[MPRT_EW_STEPS];
    int nsteps;
    uint32_t ops[MPRT_EW_OPERANDS];   /* the operands' values */
    int nops;
} Chain;

static int chain_operand(Chain *ch, uint32_t v)
{
    for (int k = 0; k < ch->nops; k++)
        if (ch->ops[k] == v)
            return k;
    MPCC_ASSERT(ch->nops < MPRT_EW_OPERANDS);
    ch->ops[ch->nops] = v;
    return ch->nops++;
}

static ChainStep *chain_step(Chain *ch, const Node *n, const char *kind, const char *op)
{
    MPCC_ASSERT(ch->nsteps < MPRT_EW_STEPS);
    ChainStep *t = &ch->step[ch->nsteps++];
    *t = (ChainStep){.kind = kind, .op = op ? op : "0", .a = -1, .b = -1, .node = n};
    return t;
}

/* What a load or binary step reads: operand v, or a scalar constant. */
static void chain_read(CG *cg, Chain *ch, ChainStep *t, uint32_t v)
{
    float f;
    if (fuse_constant(cg->g, v, &f))
        t->p = f, t->literal = true;
    else
        t->a = chain_operand(ch, v);
}

static const char *binary_code(Op op)
{
    switch (op) {
    case OP_SUB: return "MPRT_SUB";
    case OP_MUL: return "MPRT_MUL";
    case OP_DIV: return "MPRT_DIV";
    case OP_POW: return "MPRT_POW";
    default: return "MPRT_ADD";   /* Add, Sum */
    }
}

/* Sum: the terms added to the value left to right (those before it on the
 * left: the value came in through input via). */
static void chain_sum(CG *cg, Chain *ch, const Node *n, uint32_t via)
{
    for (uint32_t k = 0; k < n->nin; k++)
        if (k != via) {
            ChainStep *t = chain_step(ch, n, "MPRT_EW_BINARY", "MPRT_ADD");
            t->swap = k < via;
            chain_read(cg, ch, t, n->in[k]);
        }
}

/* The steps of node n, the chain's value coming in through input via. */
static void chain_node(CG *cg, Chain *ch, const Node *n, uint32_t via)
{
    ChainStep *t;
    switch (n->op) {
    case OP_RELU: chain_step(ch, n, "MPRT_EW_RELU", NULL); break;
    case OP_RELU_GRAD:
        chain_step(ch, n, "MPRT_EW_RELU_GRAD", NULL)->a = chain_operand(ch, n->in[1]);
        break;
    case OP_UNARY_GRAD: {
        Op op = (Op)attr_int(n, "op", OP_UNKNOWN);
        t = chain_step(ch, n, "MPRT_EW_UNARY_GRAD", unary_code(op));
        unary_params(cg, n, op, &t->p, &t->q);
        t->a = chain_operand(ch, n->in[1]);
        t->b = chain_operand(ch, grad_y(n));
        break;
    }
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_POW:
        t = chain_step(ch, n, "MPRT_EW_BINARY", binary_code(n->op));
        t->swap = via == 1;
        chain_read(cg, ch, t, n->in[1 - via]);
        break;
    case OP_SUM: chain_sum(cg, ch, n, via); break;
    default:
        MPCC_ASSERT(unary_code(n->op));
        t = chain_step(ch, n, "MPRT_EW_UNARY", unary_code(n->op));
        unary_params(cg, n, n->op, &t->p, &t->q);
    }
    ch->step[ch->nsteps - 1].round = cg->g->values[n->out[0]].dtype == DT_BF16;
}

/* The output's dims and each operand's strides, without the dims of 1 and
 * with neighbours every operand walks as one merged into one. */
static int chain_dims(CG *cg, const Chain *ch, uint32_t out, long *shape,
                      long st[][MAX_RANK])
{
    const Shape *y = shape_of(cg, out);
    long full[MPRT_EW_OPERANDS][MAX_RANK];
    int r = 0;
    for (int k = 0; k < ch->nops; k++)
        bcast_strides(y, shape_of(cg, ch->ops[k]), full[k]);
    for (int d = 0; d < y->rank; d++) {
        if (y->d[d] == 1)
            continue;
        bool merge = r > 0;
        for (int k = 0; k < ch->nops; k++)
            merge = merge && st[k][r - 1] == full[k][d] * y->d[d];
        if (!merge)
            shape[r++] = 1;
        shape[r - 1] *= (long)y->d[d];
        for (int k = 0; k < ch->nops; k++)
            st[k][r - 1] = full[k][d];
    }
    return r;
}


static void emit_chain_step(CG *cg, const ChainStep *t)
{
    emit(cg, "                {%s, %s, %d, %d, %d, %d, ", t->kind, t->op, t->a, t->b, t->swap,
         t->round);
    if (t->literal)
        emit_float_literal(cg, t->p);
    else
        emit(cg, "(float)%.9g", t->p);
    emit(cg, ", (float)%.9g},   /* '%s' */\n", t->q, comment_text(cg, t->node->name));
}

/* Which of the chain's operands and output are stored in bf16. */
static void emit_chain_bf16(CG *cg, const Chain *ch, uint32_t out)
{
    const char *sep = "";
    if (cg->g->values[out].dtype == DT_BF16) {
        emit(cg, "MPRT_EW_OUT_BF16");
        sep = " | ";
    }
    for (int k = 0; k < ch->nops; k++)
        if (cg->g->values[ch->ops[k]].dtype == DT_BF16) {
            emit(cg, "%s1 << %d", sep, k);
            sep = " | ";
        }
    emit(cg, "%s, ", *sep ? "" : "0");
}

/* The chain's program, a constant of the block that runs it. */
static void emit_chain_program(CG *cg, const Chain *ch, uint32_t out)
{
    long shape[MAX_RANK], st[MPRT_EW_OPERANDS][MAX_RANK];
    int rank = chain_dims(cg, ch, out, shape, st);
    emit(cg, "        static const MprtEwChain chain = {%d, %d, %d, ", rank, ch->nops, ch->nsteps);
    emit_chain_bf16(cg, ch, out);
    emit_braced(cg, shape, rank);
    emit(cg, ",\n            {");
    for (int k = 0; k < ch->nops; k++) {
        emit(cg, "%s", k ? ", " : "");
        emit_braced(cg, st[k], rank);
    }
    emit(cg, "%s},\n            {\n", ch->nops ? "" : "{0}");
    for (int i = 0; i < ch->nsteps; i++)
        emit_chain_step(cg, &ch->step[i]);
    emit(cg, "            }};\n");
}

/* The chain ending at node `tail`, as one kernel call (under bf16, maybe
 * of tail alone: fuse_alone). */
static void emit_chain(CG *cg, const Node *tail)
{
    const Fusion *fu = cg->fu;
    uint32_t ids[MPRT_EW_STEPS];
    int n = 0;
    for (uint32_t id = (uint32_t)(tail - cg->g->nodes); id != NONE; id = fu->prev[id])
        ids[n++] = id;
    Chain ch = {.nsteps = 0};
    const Node *head = &cg->g->nodes[ids[n - 1]];
    chain_read(cg, &ch, chain_step(&ch, head, "MPRT_EW_LOAD", NULL), head->in[0]);
    emit(cg, n > 1 ? "    /* fused:" : "    /* the chain kernel, reading and writing bf16:");
    for (int i = n - 1; i >= 0; i--) {
        const Node *nd = &cg->g->nodes[ids[i]];
        chain_node(cg, &ch, nd, i == n - 1 ? 0 : fu->via[ids[i]]);
        emit(cg, "%s'%s' (%s)", i == n - 1 ? " " : " -> ", comment_text(cg, nd->name),
             comment_text(cg, nd->op_type));
    }
    emit(cg, n > 1 ? ": one kernel, writing only the last value */\n    {\n" : " */\n    {\n");
    emit_chain_program(cg, &ch, tail->out[0]);
    emit(cg, "        %s(&chain, (const void *const[]){", kernel(cg, "ew_chain"));
    for (int k = 0; k < ch.nops; k++)
        emit(cg, "%s%s", k ? ", " : "", buf(cg, ch.ops[k]));
    emit(cg, "%s}, %s);\n    }\n", ch.nops ? "" : "NULL", buf(cg, tail->out[0]));
}

static void float_only(CG *cg, const Node *n, uint32_t v);

/* The float32 kernels: the first k inputs and the first output must be
 * float32 (integer and float64 tensors are refused here rather than read
 * as floats). */
static void float_kernel(CG *cg, const Node *n, uint32_t k)
{
    for (uint32_t j = 0; j < k && j < n->nin; j++)
        if (n->in[j] != NONE)
            float_only(cg, n, n->in[j]);
    if (n->nout && n->out[0] != NONE)
        float_only(cg, n, n->out[0]);
}

/* How many leading inputs each float32 kernel reads as float32; 0 for the
 * kernels that take other element types (copies, Cast, Gather, ...). */
static uint32_t float_inputs(const Node *n)
{
    switch (n->op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_POW: case OP_MATMUL:
    case OP_GEMM: case OP_CONV:
        return n->nin;
    case OP_SUM: return n->nin;
    case OP_RELU: case OP_ERF: case OP_TANH: case OP_SQRT: case OP_EXP: case OP_LOG:
    case OP_NEG: case OP_SIGMOID: case OP_RECIPROCAL: case OP_ABS: case OP_SOFTMAX:
    case OP_LOG_SOFTMAX: case OP_MAX_POOL: case OP_GLOBAL_AVG_POOL: case OP_DROPOUT:
        return 1;
    case OP_SOFTMAX_BIAS: return 2;
    case OP_BATCH_NORM: return n->nin;   /* a sixth: the residual it adds */
    case OP_LAYER_NORM: return n->nin;
    default: return 0;
    }
}

/* Where node `mark` of the profile (-1: none) starts: the line that times
 * it for --profile, and names it for the CUDA calls' errors on a CUDA
 * device. The node's comment follows on the same line. */
static void emit_mark(CG *cg, int mark)
{
    emit(cg, "    ");
    if (mark >= 0)
        emit(cg, "mprt_%sprof_node(%d);   ", cuda_stage(cg) ? "cu_" : "", mark);
}

/* The node's comment, after its mark; a node inside a fused chain is
 * computed by the chain's last node, and says so. */
static void emit_node_comment(CG *cg, const Node *n, int mark)
{
    uint32_t tail = cg->fu->tail[n - cg->g->nodes];
    emit_mark(cg, mark);
    emit(cg, "/* node '%s' (%s)", comment_text(cg, n->name), comment_text(cg, n->op_type));
    if (tail != NONE)
        emit(cg, ": fused into '%s' below, not written",
             comment_text(cg, cg->g->nodes[tail].name));
    emit(cg, " */\n");
}

static void emit_node_code(CG *cg, const Node *n, int mark);
static void emit_kernel(CG *cg, const Node *n);

/* ---- bf16 operands (--precision=bf16, graph/precision.c) ---- */

/* Staging (Staged): a node's operands that its kernel reads and writes in
 * scratch: each bf16 input widened before it, each bf16 output rounded
 * after it, a matrix product's parameters rounded to bf16 before it (STAGE_WIDE,
 * STAGE_ROUND); on a GPU, a matrix product on bf16 tensors has its
 * float32 operands narrowed into bf16 (STAGE_NARROW). While the node is
 * written the staged values read at their scratch with its type, so its
 * kernel's code is that of float32 (or bf16) operands. */

static bool is_output_of(const Node *n, uint32_t v)
{
    for (uint32_t k = 0; k < n->nout; k++)
        if (n->out[k] == v)
            return true;
    return false;
}

static bool is_input_of(const Node *n, uint32_t v)
{
    for (uint32_t k = 0; k < n->nin; k++)
        if (n->in[k] == v)
            return true;
    return false;
}

static void stage_operands(CG *cg, const Node *n, Native native, Staged *s)
{
    Arena *a = cg->g->arena;
    s->vals = arena_array(a, n->nin + n->nout, sizeof *s->vals);
    s->kind = arena_array(a, n->nin + n->nout, sizeof *s->kind);
    s->n = precision_staged(cg->g, n, native, s->vals, s->kind);
    if (!s->n)
        return;
    int64_t at = node_staging_at(cg->g, n, !cuda_stage(cg));
    for (uint32_t j = 0; j < s->n; j++) {
        uint32_t v = s->vals[j];
        bool half = s->kind[j] == STAGE_NARROW;
        const char *mem = buf(cg, v), *copy = arena_printf(a, half ? "((uint16_t *)(%s + %lld))"
                                                                   : "(%s + %lld)",
                                                           workspace(cg), (long long)(at / 4));
        /* an output is written there and converted after (unstage_operands) */
        bool in = is_input_of(n, v);
        if (in && s->kind[j] != STAGE_WIDE)
            emit(cg, "    %s(%ld, %s, %s);   /* read as bf16 */\n",
                 kernel(cg, half ? "bf16_narrow" : "bf16_round"), numel(cg, v), mem, copy);
        else if (in)
            emit(cg, "    %s(%ld, %s, %s);\n", kernel(cg, "bf16_widen"), numel(cg, v), mem, copy);
        cg->staged_as[v] = copy;
        cg->g->values[v].dtype = half ? DT_BF16 : DT_F32;
        at += (numel(cg, v) * (half ? 2 : 4) + 63) / 64 * 64;
    }
    s->end = at;
    cg->staged = s;
}

/* The node's staged values as they are stored again; `emit`: with the
 * rounding of its bf16 outputs (not on the way out of an error). */
static void unstage_operands(CG *cg, const Node *n, bool emit_rounding)
{
    Staged *s = cg->staged;
    cg->staged = NULL;
    for (uint32_t j = 0; s && j < s->n; j++) {
        uint32_t v = s->vals[j];
        const char *f32 = cg->staged_as[v];
        cg->staged_as[v] = NULL;
        if (s->kind[j] != STAGE_WIDE) {   /* float32, as a bf16 value */
            cg->g->values[v].dtype = DT_F32;
            if (emit_rounding && is_output_of(n, v))
                emit(cg, "    %s(%ld, %s, %s);   /* rounded to bf16 */\n",
                     kernel(cg, s->kind[j] == STAGE_NARROW ? "bf16_widen" : "bf16_round"),
                     numel(cg, v), f32, buf(cg, v));
            continue;
        }
        cg->g->values[v].dtype = DT_BF16;
        if (emit_rounding && is_output_of(n, v))
            emit(cg, "    %s(%ld, %s, %s);\n", kernel(cg, "bf16_narrow"), numel(cg, v), f32,
                 buf(cg, v));
    }
}

/* Under --check, a node whose code cannot be written is reported (its
 * error printed as it would be) and skipped from then on, so that every
 * such node is listed in one run. */
static void emit_node(CG *cg, const Node *n, int mark)
{
    if (!cg->checking) {
        emit_node_code(cg, n, mark);
        return;
    }
    uint32_t id = (uint32_t)(n - cg->g->nodes);
    if (cg->reported[id])
        return;
    jmp_buf here, *outer = diag_jmp;
    diag_jmp = &here;
    if (setjmp(here) == 0) {
        emit_node_code(cg, n, mark);
    } else {
        unstage_operands(cg, n, false);
        cg->native = NATIVE_NONE;
        cg->reported[id] = true;
        cg->problems++;
    }
    diag_jmp = outer;
}

static void emit_node_code(CG *cg, const Node *n, int mark)
{
    emit_node_comment(cg, n, mark);
    if (cuda_stage(cg) && n->op != OP_UNKNOWN && !(op_info[n->op].flags & OPF_CUDA))
        error_at(&n->loc, "%s has no CUDA kernel yet; train this model on CPU devices (-cpus N)",
                 n->op_type);
    if (cg->fu->tail[n - cg->g->nodes] != NONE)
        return;   /* fused into a later chain, which computes it */
    /* a chain's last node, or under bf16 an op of the chain kernel alone:
     * the chain kernel reads and writes its bf16 operands itself */
    Native native = cg->fu->prev[n - cg->g->nodes] != NONE
                        ? NATIVE_CHAIN : bf16_native(cg->g, n, cuda_stage(cg));
    Staged *s = arena_alloc(cg->g->arena, sizeof *s);   /* outlives an error's longjmp */
    bool in_eval = eval_only(n);
    if (in_eval)   /* graph/loss.c: the loss adds the bias itself */
        emit(cg, "    if (!mprt_training) {   /* the model's output, for evaluation only */\n");
    stage_operands(cg, n, native, s);
    if (native == NATIVE_CHAIN) {
        emit_chain(cg, n);
    } else {
        if (float_inputs(n) && native == NATIVE_NONE)
            float_kernel(cg, n, float_inputs(n));
        cg->native = native;
        emit_kernel(cg, n);
        cg->native = NATIVE_NONE;
    }
    unstage_operands(cg, n, true);
    if (in_eval)
        emit(cg, "    }\n");
}

/* The call of node n's kernel. */
static void emit_kernel(CG *cg, const Node *n)
{
    switch (n->op) {
    case OP_GEMM: emit_gemm(cg, n); break;
    case OP_RELU:
        emit(cg, "    %s(%ld, %s, %s);\n", kernel(cg, "relu"), numel(cg, n->out[0]), buf(cg, n->in[0]),
             buf(cg, n->out[0]));
        break;
    case OP_RELU_GRAD:
        emit(cg, "    %s(%ld, %s, %s, %s);\n", kernel(cg, "relu_grad"), numel(cg, n->out[0]),
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
        break;
    case OP_RESHAPE: case OP_FLATTEN: case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_IDENTITY:
        if (!strcmp(buf(cg, n->in[0]), buf(cg, n->out[0])))
            emit(cg, "    /* in place: its input's buffer */\n");
        else if (cg->g->values[n->out[0]].dtype == DT_F32)
            emit(cg, "    %s(%ld, %s, %s);\n", kernel(cg, "copy"), numel(cg, n->out[0]),
                 buf(cg, n->in[0]), buf(cg, n->out[0]));
        else   /* any element type: the bytes */
            emit(cg, "    %s(%zu, %s, %s);\n", kernel(cg, "copy_bytes"),
                 value_bytes(&cg->g->values[n->out[0]]), buf(cg, n->in[0]), buf(cg, n->out[0]));
        break;
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: emit_binary(cg, n); break;
    case OP_SUM: emit_sum(cg, n); break;
    case OP_MEAN: case OP_MIN: case OP_MAX: emit_nary(cg, n); break;
    case OP_MINMAX_GRAD: emit_minmax_grad(cg, n); break;
    case OP_REDUCE_SUM: case OP_REDUCE_MEAN: case OP_REDUCE_MAX: case OP_REDUCE_MIN:
    case OP_REDUCE_MAX_GRAD:
        emit_reduce(cg, n);
        break;
    case OP_EXPAND: case OP_TILE: emit_expand(cg, n); break;
    case OP_PAD: case OP_PAD_GRAD: emit_pad(cg, n); break;
    case OP_PRELU: case OP_PRELU_GRAD: emit_prelu(cg, n); break;
    case OP_EQUAL: case OP_LESS: case OP_LESS_EQUAL: case OP_GREATER: case OP_GREATER_EQUAL:
    case OP_AND: case OP_OR: case OP_XOR: case OP_NOT:
        emit_compare(cg, n);
        break;
    case OP_SUM_TO: emit_sum_to(cg, n); break;
    case OP_SOFTMAX_CE: emit_sce(cg, n, false); break;
    case OP_SCE_GRAD: emit_sce(cg, n, true); break;
    case OP_MSE_LOSS:
        emit(cg, "    %s(%ld, %s, %s, %s);\n", kernel(cg, "mse"), numel(cg, n->in[0]), buf(cg, n->in[0]),
             buf(cg, n->in[1]), buf(cg, n->out[0]));
        break;
    case OP_MSE_GRAD:
        emit(cg, "    %s(%ld, %s, %s, %s, %s);\n", kernel(cg, "mse_grad"), numel(cg, n->in[1]),
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]), buf(cg, n->out[0]));
        break;
    case OP_CONV: case OP_CONV_GRAD_X: case OP_CONV_GRAD_W: emit_conv(cg, n); break;
    case OP_CONV_TRANSPOSE: emit_conv_transpose(cg, n); break;
    case OP_CONV_GRAD_B: {
        long N, C, P;
        channel_dims(cg, n->in[0], &N, &C, &P);
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s);\n",
             blocked(cg, n->in[0]) ? "mprt_dnnl_channel_sum" : row_kernel(cg, "channel_sum"), N, C, P,
             buf(cg, n->in[0]),
             buf(cg, n->out[0]));
        break;
    }
    case OP_BATCH_NORM: emit_batch_norm(cg, n); break;
    case OP_INSTANCE_NORM: case OP_INSTANCE_NORM_GRAD: emit_instance_norm(cg, n); break;
    case OP_BN_GRAD: {
        long N, C, P;
        channel_dims(cg, n->in[1], &N, &C, &P);
        /* dy, the ReLU's output z (or NULL), x, scale */
        emit(cg, "    %s(%ld, %ld, %ld, %s, %s, %s, %s, (float)%.9g, %s, %s, %s);\n",
             blocked(cg, n->in[1]) ? "mprt_dnnl_bn_grad" : row_kernel(cg, "bn_grad"), N, C, P,
             buf(cg, n->in[0]), opt_buf(cg, n, 3, false), buf(cg, n->in[1]),
             buf(cg, n->in[2]), norm_epsilon(n), buf(cg, n->out[0]), buf(cg, n->out[1]),
             buf(cg, n->out[2]));
        break;
    }
    case OP_MAX_POOL: case OP_MAX_POOL_GRAD: case OP_AVERAGE_POOL: case OP_AVG_POOL_GRAD:
        emit_pool(cg, n);
        break;
    case OP_ERF: case OP_TANH: case OP_SQRT: case OP_EXP: case OP_LOG: case OP_NEG:
    case OP_SIGMOID: case OP_RECIPROCAL: case OP_ABS: case OP_UNARY_GRAD:
    case OP_HARD_SIGMOID: case OP_HARD_SWISH: case OP_LEAKY_RELU: case OP_ELU: case OP_SELU:
    case OP_SOFTPLUS: case OP_GELU: case OP_CLIP:
        emit_unary(cg, n);
        break;
    case OP_POW: emit_binary(cg, n); break;
    case OP_POW_GRAD: emit_pow_grad(cg, n); break;
    case OP_MATMUL: case OP_BATCH_MATMUL: emit_matmul(cg, n); break;
    case OP_SOFTMAX: case OP_SOFTMAX_GRAD: case OP_LOG_SOFTMAX: case OP_LOG_SOFTMAX_GRAD:
    case OP_SOFTMAX_BIAS:
        emit_softmax(cg, n);
        break;
    case OP_NLL_LOSS: case OP_NLL_GRAD: emit_nll(cg, n); break;
    case OP_LAYER_NORM: case OP_LN_GRAD: emit_layer_norm(cg, n); break;
    case OP_DROPOUT: case OP_DROPOUT_GRAD: emit_dropout(cg, n); break;
    case OP_TRANSPOSE: emit_transpose(cg, n); break;
    case OP_SLICE: case OP_SLICE_GRAD: emit_slice(cg, n); break;
    case OP_CONCAT: case OP_SPLIT: emit_concat(cg, n); break;
    case OP_GATHER: case OP_GATHER_GRAD: emit_gather(cg, n); break;
    case OP_GATHER_ELEMENTS: case OP_SCATTER: case OP_SCATTER_ELEMENTS:
    case OP_GATHER_ELEMENTS_GRAD: case OP_SCATTER_ELEMENTS_GRAD:
        emit_elements(cg, n);
        break;
    case OP_GATHER_ND: case OP_SCATTER_ND: case OP_GATHER_ND_GRAD: case OP_SCATTER_ND_GRAD:
        emit_nd(cg, n);
        break;
    case OP_WHERE: emit_where(cg, n); break;
    case OP_CAST: emit_cast(cg, n); break;
    case OP_MOD: emit_mod(cg, n); break;
    case OP_ARGMAX: case OP_ARGMIN: emit_argmax(cg, n); break;
    case OP_CUMSUM: emit_cumsum(cg, n); break;
    case OP_TOPK: emit_topk(cg, n); break;
    case OP_TOPK_GRAD: emit_topk_grad(cg, n); break;
    case OP_ONE_HOT: case OP_ONE_HOT_GRAD: emit_onehot(cg, n); break;
    case OP_TRILU: emit_trilu(cg, n); break;
    case OP_RESIZE: case OP_RESIZE_GRAD: case OP_UPSAMPLE: emit_resize(cg, n); break;
    case OP_GLOBAL_AVG_POOL: case OP_GAP_GRAD: {
        long N, C, P;
        channel_dims(cg, n->op == OP_GAP_GRAD ? n->in[1] : n->in[0], &N, &C, &P);
        if (blocked(cg, n->op == OP_GAP_GRAD ? n->out[0] : n->in[0]))
            emit(cg, "    mprt_dnnl_%s(%ld, %ld, %ld, %s, %s);\n",
                 n->op == OP_GAP_GRAD ? "gap_grad" : "gap", N, C, P, buf(cg, n->in[0]),
                 buf(cg, n->out[0]));
        else
            emit(cg, "    %s(%ld, %ld, %s, %s);\n",
                 row_kernel(cg, n->op == OP_GLOBAL_AVG_POOL ? "gap" : "gap_grad"), N * C, P,
                 buf(cg, n->in[0]), buf(cg, n->out[0]));
        break;
    }
    /* no CPU kernel (no OPF_CPU in ops.def), or lowered before shapes are inferred */
    case OP_UNKNOWN: case OP_CEIL: case OP_COS: case OP_FLOOR: case OP_ROUND: case OP_SIGN:
    case OP_SIN: case OP_CAST_LIKE: case OP_EINSUM: case OP_LSTM: case OP_GRU: case OP_RNN: case OP_GLOBAL_MAX_POOL:
    case OP_REDUCE_L1: case OP_REDUCE_L2: case OP_REDUCE_LOG_SUM: case OP_REDUCE_LOG_SUM_EXP:
    case OP_DEPTH_TO_SPACE: case OP_SPACE_TO_DEPTH:
    case OP_REDUCE_PROD: case OP_REDUCE_SUM_SQ:
    case OP_CONSTANT_OF_SHAPE: case OP_RANGE: case OP_SHAPE: case OP_SIZE:
        unsupported(cg, n, arena_printf(cg->g->arena, "%s", n->op_type));
        break;
    case OP_SGD: case OP_ADAMW:   /* the updates: emit_update_node */
        unreachable();
    }
}

/* ---- the program ---- */

static const char *const act_names[] = {"forward", "backward", "wgrad", "update"};

/* The line that builds the program, as the header and mpcc print it.
 * -fno-trapping-math changes no result: it lets the compiler vectorise
 * the elementwise loops, whose selections it may then compute on every
 * lane; -ffp-contract=off keeps every multiply and add rounded on its
 * own, so the AVX-512, AVX2 and plain clones of a loop give the same bits
 * (runtime/vmath.h). */
static const char *build_line(CG *cg)
{
    const char *out = comment_text(cg, cg->o->output);
    bool dnnl = dnnl_kernels(cg) || cg->dnnl_gemm;
    bool mpi = cg->o->pipe.nodes > 1;
    if (cg->cuda)
        return arena_printf(cg->g->arena, "%s -O2 -fno-trapping-math -ffp-contract=off %s -o train -I"
                            MPCC_CUDA_HOME "/include -L" MPCC_CUDA_HOME "/lib64 -Wl,-rpath,"
                            MPCC_CUDA_HOME "/lib64 %s-lcudnn -lcublas -lnvrtc -lcudart %s-lm "
                            "-pthread", mpi ? "mpicc" : "cc", out, mpi ? "-lnccl " : "",
                            dnnl ? "-ldnnl -lgomp -lopenblas " : cg->mixed ? "-lopenblas " : "");
    return arena_printf(cg->g->arena,
                        "%s -O2 -fno-trapping-math -ffp-contract=off %s -o train %s-lopenblas -lm -pthread",
                        mpi ? "mpicc" : "cc", out, dnnl ? "-ldnnl -lgomp " : "");
}

/* The program's name: the output file's, without folder and ".c". */
static const char *program_name(CG *cg)
{
    const char *out = cg->o->output, *slash = strrchr(out, '/');
    const char *base = slash ? slash + 1 : out;
    size_t n = strlen(base);
    if (n > 2 && strcmp(base + n - 2, ".c") == 0)
        n -= 2;
    return arena_strndup(cg->g->arena, base, n);
}

/* How many nodes run inside fused elementwise chains (fuse.c). */
static void emit_fused_line(CG *cg)
{
    if (cg->fu->nchains)
        emit(cg, " * fused:    %d elementwise chain(s) of %d nodes, one kernel each (%d kernel "
             "calls fewer; --no-fuse: none)\n", cg->fu->nchains, cg->fu->nfused,
             cg->fu->nfused - cg->fu->nchains);
}

/* What runs through oneDNN (the GEMMs, how many convolutions and max
 * poolings), and so what the build links. */
static void emit_dnnl_line(CG *cg)
{
    static const char *const mode[] = {[KERNELS_AUTO] = "auto", [KERNELS_BUILTIN] = "builtin",
                                        [KERNELS_ONEDNN] = "onednn"};
    if (!cg->dnnl_gemm && !dnnl_kernels(cg))
        return;
    char convs[64], pools[64];
    snprintf(convs, sizeof convs, "%d convolution kernel(s) (dnnl_convs)", cg->ndnnl);
    snprintf(pools, sizeof pools, "%d max pooling(s) (dnnl_pools)", cg->npool);
    const char *part[3];
    int n = 0;
    if (cg->dnnl_gemm)
        part[n++] = "the GEMMs";
    if (cg->ndnnl)
        part[n++] = convs;
    if (cg->npool)
        part[n++] = pools;
    emit(cg, " * oneDNN:   ");
    for (int i = 0; i < n; i++)
        emit(cg, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ", part[i]);
    emit(cg, " (--cpu-kernels=%s), so -ldnnl -lgomp\n", mode[cg->o->cpu_kernels]);
    int nb = 0;
    for (uint32_t v = 0; v < cg->g->nvalues; v++)
        nb += blocked(cg, v);
    if (nb)
        emit(cg, " * layout:   %d activations in oneDNN's blocked layout between the ops that "
             "take it (--cpu-layout=blocked)\n", nb);
}

/* --data-parallel: where the replicas run and how to start them. */
static void emit_replicas_line(CG *cg)
{
    int R = cg->o->pipe.replicas, K = cg->o->pipe.nodes, RL = cg->o->pipe.replicas_here;
    if (R > 1 && R < K)
        emit(cg, " * replicas: %d, each one pipeline across %d processes of %d device(s): run "
             "as mpirun -np %d ./train ...; copies between a replica's processes over MPI; "
             "each sums its micro-batches' gradients as a tree, then the replicas' sums over "
             "MPI, each stage between the processes that hold it\n", R, K / R,
             cg->o->pipe.node_devs, K);
    else if (R > 1 && K > 1)
        emit(cg, " * replicas: %d, %d per process: run as mpirun -np %d ./train ...; each "
             "sums its micro-batches' gradients as a tree, then the replicas' sums%s over %s "
             "before each update\n", R, RL, K, RL > 1 ? " in each process, then" : "",
             cg->cuda ? "NCCL (an all-reduce per GPU, on its communication stream)" : "MPI");
    else if (R > 1)
        emit(cg, " * replicas: %d in this process, each a copy of the devices below (%d "
             "devices in all); each sums its micro-batches' gradients as a tree, then the "
             "replicas' sums before each update\n", R, R * cg->plan->sc->ndev);
    else if (R == 1 && K > 1)
        emit(cg, " * processes: %d, one pipeline across them, %d device(s) each: run as mpirun "
             "-np %d ./train ...; copies between them over %s; the micro-batches' gradients "
             "summed as a tree, as on more replicas\n", K, cg->o->pipe.node_devs, K,
             cg->cuda ? "NCCL (a send and a receive each)" : "MPI");
    else if (R == 1)
        emit(cg, " * replicas: 1 (--data-parallel=1): the micro-batches' gradients summed as "
             "a tree, as on more replicas\n");
}

static void emit_infer_header(CG *cg, const char *hash)
{
    emit(cg, "/* Generated by mpcc %s. Do not edit: regenerate with the command below.\n"
         " *\n *   %s\n *\n", MPCC_VERSION, comment_text(cg, cg->o->cmdline));
    emit(cg, " * model:    %s (sha256 %s)\n", comment_text(cg, cg->g->file), hash);
    emit(cg, " * forward only (--infer) on cpu:0; memory plan %zu bytes\n",
         cg->plan->arena_bytes[0]);
    emit_fused_line(cg);
    emit(cg, " * build:    cc -O2 -fno-trapping-math -ffp-contract=off %s -o %s -lopenblas -lm -pthread\n",
         comment_text(cg, cg->o->output), comment_text(cg, program_name(cg)));
    emit(cg, " * run:      ./%s --input NAME=FILE.npy ... --output NAME=FILE.npy ...\n */\n",
         comment_text(cg, program_name(cg)));
    emit(cg, "#define _DEFAULT_SOURCE\n#define _POSIX_C_SOURCE 200809L\n");
}

/* The rows of one step: -batch, or without it the first dimension of the
 * model's inputs as bound (an export with a fixed batch, --shapes). */
static long long step_rows(const CG *cg)
{
    if (cg->o->batch)
        return (long long)cg->o->batch * step_microbatches(cg);
    const Graph *g = cg->g;
    for (uint32_t i = 0; i < g->ninputs; i++) {
        const Value *v = &g->values[g->inputs[i]];
        if (v->kind == VK_INPUT && v->shape.rank > 0)
            return (long long)v->shape.d[0];
    }
    return 1;
}

static void emit_header(CG *cg, const char *hash)
{
    const Plan *p = cg->plan;
    if (cg->o->infer) {
        emit_infer_header(cg, hash);
        return;
    }
    emit(cg, "/* Generated by mpcc %s. Do not edit: regenerate with the command below.\n"
         " *\n *   %s\n *\n", MPCC_VERSION, comment_text(cg, cg->o->cmdline));
    emit(cg, " * model:    %s (sha256 %s)\n", comment_text(cg, cg->g->file), hash);
    int R = cg->o->pipe.replicas;
    if (cg->o->batch && R > 1)
        emit(cg, " * batch:    %lld over %d replicas (--data-parallel), each %lld in %d "
             "micro-batch(es) of %lld\n", step_rows(cg), R, (long long)cg->o->batch * p->sc->M,
             p->sc->M, (long long)cg->o->batch);
    else if (cg->o->batch)
        emit(cg, " * batch:    %lld in %d micro-batch(es) of %lld\n",
             (long long)cg->o->batch * p->sc->M, p->sc->M, (long long)cg->o->batch);
    else
        emit(cg, " * batch:    %lld, the inputs' first dimension as the model or --shapes "
             "fixes it, in one micro-batch\n", step_rows(cg));
    emit(cg, " * schedule: %s, %d stage(s) on %d device(s); predicted step %.6g s, bubble "
         "%.1f%%\n", schedule_name(p->sc->kind), p->st->n, p->sc->ndev, p->step_time,
         100 * p->bubble);
    emit_fused_line(cg);
    emit_dnnl_line(cg);
    for (int d = 0; d < p->sc->ndev; d++) {
        emit(cg, " * %-8s  stages", p->ds->d[d].name);
        for (int s = 0; s < p->st->n; s++)
            if (p->st->dev[s] == d)
                emit(cg, " %d", s);
        emit(cg, "; memory plan %zu bytes", p->arena_bytes[d]);
        if (cg->o->pipe.node_devs)
            emit(cg, "; process %d", p->ds->d[d].node);
        if (p->work_bytes[d])
            emit(cg, " (%zu of them kernel scratch)", p->work_bytes[d]);
        if (p->host_bytes[d])
            emit(cg, "; host arena %zu bytes (%s)", p->host_bytes[d], host_holds(p, d));
        emit(cg, "\n");
    }
    emit_replicas_line(cg);
    emit(cg, " * build:    %s\n */\n", build_line(cg));
    emit(cg, "#define _DEFAULT_SOURCE\n#define _POSIX_C_SOURCE 200809L\n");
    if (cg->o->pipe.nodes > 1)
        emit(cg, "#define MPRT_MPI 1   /* %d processes: runtime/comm.c */\n",
             cg->o->pipe.nodes);
    if (cg->o->pipe.nodes > 1 && cg->cuda)
        emit(cg, "#define MPRT_NCCL 1   /* the GPUs' %s over NCCL: runtime/nccl.c */\n",
             cg->o->pipe.node_devs ? "copies between processes" : "gradient sums");
    if (cg->mixed)
        emit(cg, "#define MPRT_MIXED 1   /* CPU and CUDA devices: runtime/mixed.c */\n");
    if (cg->dnnl_gemm)
        emit(cg, "#define MPRT_DNNL_GEMM 1   /* the CPU kernels' GEMMs: oneDNN's (cpu.c) */\n");
    if (cg->dnnl_gemm || dnnl_kernels(cg))
        emit(cg, "#define MPRT_GOMP 1   /* the CPU devices' pools: oneDNN's OpenMP threads "
             "(pool.c) */\n");
}

static const EmbeddedFile *embedded(const char *name)
{
    for (const EmbeddedFile *f = embedded_files; f->name; f++)
        if (strcmp(f->name, name) == 0)
            return f;
    mpcc_die(__FILE__, __LINE__, "runtime file %s is not embedded", name);
}

/* A runtime file line by line as the array `var`, for NVRTC at start-up
 * (joined there: one literal would pass the 4095 characters ISO C
 * promises). */
static void emit_lines(CG *cg, const char *name, const char *var)
{
    const char *p = embedded(name)->text;
    emit(cg, "static const char *const %s[] = {\n", var);
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
        char *line = arena_alloc(cg->g->arena, len + 1);
        memcpy(line, p, len);
        line[len] = 0;
        emit(cg, "    %s,\n", c_string(cg, line));
        p += len;
    }
    emit(cg, "    NULL\n};\n");
}

/* runtime/kernels.cu, and opcodes.h: the header it includes (the op
 * codes it shares with kernel.h), which NVRTC gets by name. */
static void emit_kernel_source(CG *cg)
{
    emit(cg, "\n/* ---- runtime/kernels.cu and its header opcodes.h, compiled by NVRTC at "
         "start-up ---- */\n");
    emit_lines(cg, "kernels_cu", "mprt_cu_kernels");
    emit_lines(cg, "opcodes_h", "mprt_cu_opcodes");
}

/* The runtime's files as the program pastes them, in order: its headers
 * (before the model), then its definitions (after it): CPU devices'
 * kernels and worker threads, CUDA devices' calls and their kernels, or
 * both and what picks one. check_cuda_ops.py reads the lists cpu[] and
 * cuda[]. */
static const char *const *runtime_headers(CG *cg)
{
    static const char *train[] = {"mprt_h", "opcodes_h", "kernel_h", "vmath_h", "program_h",
                                  "train_h", NULL};
    static const char *infer[] = {"mprt_h", "opcodes_h", "kernel_h", "vmath_h", "program_h",
                                  "infer_h", NULL};
    return cg->o->infer ? infer : train;
}

/* files with cpu_dnnl.c after cpu_math.c: programs whose convolutions
 * run through oneDNN. */
static const char *const *with_dnnl(CG *cg, const char *const *files)
{
    int n = 0;
    while (files[n])
        n++;
    const char **r = arena_array(cg->g->arena, (size_t)n + 2, sizeof *r);
    for (int i = 0, k = 0; i <= n; i++) {
        r[k++] = files[i];
        if (files[i] && strcmp(files[i], "cpu_math_c") == 0)
            r[k++] = "cpu_dnnl_c";
    }
    return r;
}

static const char *const *runtime_sources(CG *cg)
{
    static const char *cpu[] = {"mprt_c", "npy_c", "safetensors_c", "state_c", "timeline_c",
                                "pool_c", "cpu_c", "cpu_move_c", "cpu_math_c", "stream_c", "program_c",
                                "data_c", "checkpoint_c", "plot_c", "comm_c", "train_c", NULL};
    static const char *cuda[] = {"mprt_c", "npy_c", "safetensors_c", "state_c", "timeline_c",
                                 "cuda_c", "cuda_ops_c", "program_c", "data_c", "checkpoint_c",
                                 "plot_c", "nccl_c", "comm_c", "train_c", NULL};
    static const char *mixed[] = {"mprt_c", "npy_c", "safetensors_c", "state_c", "timeline_c",
                                  "pool_c", "cpu_c", "cpu_move_c", "cpu_math_c", "stream_c", "cuda_c",
                                  "cuda_ops_c", "mixed_c", "program_c", "data_c", "checkpoint_c",
                                  "plot_c", "comm_c", "train_c", NULL};
    static const char *infer[] = {"mprt_c", "npy_c", "safetensors_c", "state_c", "timeline_c",
                                  "pool_c", "cpu_c", "cpu_move_c", "cpu_math_c", "stream_c", "program_c",
                                  "infer_c", NULL};
    const char *const *files = cg->o->infer ? infer : cg->mixed ? mixed : cg->cuda ? cuda : cpu;
    return dnnl_kernels(cg) ? with_dnnl(cg, files) : files;
}

/* The #if nesting after line p (of length len) at depth. */
static int if_depth(const char *p, size_t len, int depth)
{
    if (len >= 3 && strncmp(p, "#if", 3) == 0)
        return depth + 1;
    return len >= 6 && strncmp(p, "#endif", 6) == 0 ? depth - 1 : depth;
}

/* A line #include <...> outside any #if: a library a runtime file uses,
 * which the program includes once, before the model (emit_libraries). */
static bool library_include(const char *p, size_t len, int depth)
{
    return depth == 0 && len > 10 && strncmp(p, "#include <", 10) == 0;
}

/* A header's include guard: the lines of its first #ifndef, the #define
 * after it and its last #endif (a pasted header is read once and needs
 * none); NULL where a header has none. */
typedef struct Guard {
    const char *ifndef, *define, *endif;
} Guard;

static Guard include_guard(const char *text)
{
    Guard g = {NULL, NULL, NULL};
    const char *ifndef = strstr(text, "\n#ifndef "), *endif = NULL;
    for (const char *q = strstr(text, "\n#endif\n"); q; q = strstr(q + 1, "\n#endif\n"))
        endif = q;
    const char *define = ifndef ? strchr(ifndef + 1, '\n') : NULL;
    if (define && endif && strncmp(define + 1, "#define ", 8) == 0)
        g = (Guard){ifndef + 1, define + 1, endif + 1};
    return g;
}

/* A runtime file as it is, less its #include "..." lines (what they name
 * is pasted already), a header's include guard, the libraries a .c file
 * includes (included once, ahead: emit_libraries), and the blank lines
 * but one between two lines kept. */
static void paste(CG *cg, const char *name, bool header)
{
    const EmbeddedFile *f = embedded(name);
    emit(cg, "\n");   /* the file's first line names it */
    Guard guard = header ? include_guard(f->text) : (Guard){NULL, NULL, NULL};
    int depth = 0;
    bool blank = false;   /* a blank line to write before the next line kept */
    for (const char *p = f->text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        bool keep = !(len > 10 && strncmp(p, "#include \"", 10) == 0) &&
                    p != guard.ifndef && p != guard.define && p != guard.endif &&
                    (header || !library_include(p, len, depth));
        if (keep && len == 0)
            blank = true;
        else if (keep)
            fprintf(cg->out, "%s%.*s\n", blank ? "\n" : "", (int)len, p), blank = false;
        depth = if_depth(p, len, depth);
        p += len + (nl ? 1 : 0);
    }
}

/* The lines #include <...> seen so far, each once. */
typedef struct Libraries {
    const char **line;
    int n, cap;
} Libraries;

/* Adds a runtime file's #include <...> lines (of a .c file, those outside
 * any #if) that libs lacks; writes them when `write`. */
static void add_libraries(CG *cg, Libraries *libs, const char *name, bool header, bool write)
{
    int depth = 0;
    for (const char *p = embedded(name)->text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        bool lib = header ? len > 10 && strncmp(p, "#include <", 10) == 0
                          : library_include(p, len, depth);
        for (int k = 0; lib && k < libs->n; k++)
            lib = !(strlen(libs->line[k]) == len && strncmp(libs->line[k], p, len) == 0);
        if (lib) {
            if (libs->n == libs->cap) {
                int cap = libs->cap ? 2 * libs->cap : 32;
                libs->line = arena_grow(cg->g->arena, libs->line, (size_t)libs->cap,
                                        (size_t)cap, sizeof *libs->line);
                libs->cap = cap;
            }
            libs->line[libs->n++] = arena_strndup(cg->g->arena, p, len);
            if (write)
                emit(cg, "%.*s\n", (int)len, p);
        }
        depth = if_depth(p, len, depth);
        p += len + (nl ? 1 : 0);
    }
}

/* The libraries the runtime's definitions include, each once (those its
 * headers include come with them), before the model: the program reads as
 * a file that includes what it needs first. */
static void emit_libraries(CG *cg)
{
    const char *const *headers = runtime_headers(cg), *const *files = runtime_sources(cg);
    Libraries libs = {0};
    emit(cg, "\n/* ---- the runtime's libraries, and its functions and globals the model uses "
         "---- */\n");
    for (int i = 0; headers[i]; i++)
        add_libraries(cg, &libs, headers[i], true, false);
    for (int i = 0; files[i]; i++)
        add_libraries(cg, &libs, files[i], false, true);
}

/* ---- the runtime's declarations: what the model uses, defined after it ---- */

/* A function or global of the runtime: its name, and its declaration as
 * one line (the definition's head, or the global without its initial
 * value). */
typedef struct RtDecl {
    const char *name, *text;
    size_t len;   /* of the name */
    bool used;
} RtDecl;

typedef struct RtIndex {
    RtDecl *d;
    int n, cap;
} RtIndex;

/* The first name mprt_... in a declaration: what it declares. */
static const char *declared_name(CG *cg, const char *text)
{
    for (const char *p = strstr(text, "mprt_"); p; p = strstr(p + 1, "mprt_"))
        if (p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) {
            size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
            return arena_strndup(cg->g->arena, p, n);
        }
    return NULL;
}

/* One line from the definition starting at p: the head of a function
 * (up to its body's "{", continuation lines joined; the body may follow
 * on the head's line, as the devices' one-line entry points in program.c
 * do, or open a line), or a global without its initial value; *next is
 * where reading goes on. */
static const char *declaration(CG *cg, const char *p, const char **next)
{
    const char *brace = strstr(p, "\n{"), *semi = strchr(p, ';'), *eq = strstr(p, " = ");
    const char *eol = strchr(p, '\n'), *inline_body = strstr(p, ") { ");
    Arena *a = cg->g->arena;
    if (inline_body && (!eol || inline_body < eol)) {   /* head { body } */
        *next = eol ? eol + 1 : p + strlen(p);
        return arena_printf(a, "%.*s;", (int)(inline_body + 1 - p), p);
    }
    if (semi && (!brace || semi < brace)) {   /* a global: up to its value or its end */
        const char *end = eq && eq < semi ? eq : semi;
        *next = semi + 1;
        return arena_printf(a, "%.*s;", (int)(end - p), p);
    }
    MPCC_ASSERT(brace);
    *next = brace + 2;
    char *r = arena_alloc(a, (size_t)(brace - p) + 2), *w = r;
    for (const char *q = p; q < brace; q++) {
        if (*q == '\n') {   /* a continuation line: its indent becomes one space */
            while (q + 1 < brace && q[1] == ' ')
                q++;
            *w++ = ' ';
        } else {
            *w++ = *q;
        }
    }
    *w++ = ';';
    *w = 0;
    return r;
}

/* Every function and global of the program's runtime files, as their
 * definitions at the start of a line declare them (MPRT_KERNEL,
 * MPRT_CU_KERNEL, MPRT_GLOBAL). */
static RtIndex runtime_index(CG *cg)
{
    static const char *const starts[] = {"MPRT_KERNEL ", "MPRT_CU_KERNEL ", "MPRT_GLOBAL "};
    RtIndex ix = {0};
    const char *const *files = runtime_sources(cg);
    for (int i = 0; files[i]; i++)
        for (const char *p = embedded(files[i])->text; p && *p;) {
            bool start = false;
            for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++)
                start = start || strncmp(p, starts[k], strlen(starts[k])) == 0;
            if (!start) {
                p = strchr(p, '\n');
                p = p ? p + 1 : NULL;
                continue;
            }
            const char *text = declaration(cg, p, &p);
            if (ix.n == ix.cap) {
                int cap = ix.cap ? 2 * ix.cap : 256;
                ix.d = arena_grow(cg->g->arena, ix.d, (size_t)ix.cap, (size_t)cap, sizeof *ix.d);
                ix.cap = cap;
            }
            const char *name = declared_name(cg, text);
            ix.d[ix.n++] = (RtDecl){name, text, name ? strlen(name) : 0, false};
        }
    return ix;
}

/* Marks the runtime's declaration of every name mprt_... the model uses;
 * one the runtime does not define is mpcc's error. */
static void mark_used(void *ctx, const char *id, size_t len)
{
    RtIndex *ix = ctx;
    if (len < 5 || strncmp(id, "mprt_", 5) != 0)
        return;
    for (int i = ix->n - 1; i >= 0; i--)   /* the last: mixed.c's over stream.c's */
        if (ix->d[i].len == len && memcmp(ix->d[i].name, id, len) == 0) {
            ix->d[i].used = true;
            return;
        }
    mpcc_die(__FILE__, __LINE__, "the generated model calls %.*s, which the runtime lacks",
             (int)len, id);
}

/* The runtime's headers, and the declarations of what the model uses. */
static void emit_declarations(CG *cg, const Text *model)
{
    emit(cg, "\n/* ==== the runtime's declarations (its definitions follow the model) ==== */\n");
    const char *const *headers = runtime_headers(cg);
    for (int i = 0; headers[i]; i++)
        paste(cg, headers[i], true);
    emit_libraries(cg);
    RtIndex ix = runtime_index(cg);
    for_each_ident(model->buf, model->n, mark_used, &ix);
    for (int i = 0; i < ix.n; i++)
        if (ix.d[i].used)
            emit(cg, "%s\n", ix.d[i].text);
}

/* The runtime's definitions, after the model. */
static void emit_runtime(CG *cg)
{
    emit(cg, "\n/* ==== the runtime ==== */\n");
    const char *const *files = runtime_sources(cg);
    for (int i = 0; files[i]; i++)
        paste(cg, files[i], false);
}

static bool all_zero(const Tensor *t)
{
    const unsigned char *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        if (p[i])
            return false;
    return true;
}

static void emit_float_literal(CG *cg, double f)
{
    if (isnan(f))
        emit(cg, "NAN");
    else if (isinf(f))
        emit(cg, f < 0 ? "-INFINITY" : "INFINITY");
    else
        emit(cg, "%af", f);
}

static void emit_double_literal(CG *cg, double f)
{
    if (isnan(f) || isinf(f))
        emit_float_literal(cg, f);
    else
        emit(cg, "%a", f);
}

/* A constant over this many bytes (and not all zeros) is not written into
 * the C file as a literal: it goes into the weights file, under
 * CONST_PREFIX and its name, and the program reads it from there
 * (MPRT_CONST, runtime/program.c). */
#define CONST_IN_C_MAX (1 << 20)
#define CONST_PREFIX "mpcc.const."

static bool const_in_file(const Value *val)
{
    return val->kind == VK_CONST && val->data && value_bytes(val) > CONST_IN_C_MAX &&
           !all_zero(val->data);
}

/* A constant's bytes, written into its buffer (one per stage reading it). */
static void emit_const(CG *cg, int b)
{
    const Buf *bf = &cg->plan->bufs[b];
    const Value *val = &cg->g->values[bf->value];
    emit(cg, "    /* const '%s' */\n", comment_text(cg, val->name));
    if (all_zero(val->data)) {
        emit(cg, "    mprt_dev_zero(%d, A%d + %zu, %zu);\n", bf->dev, bf->dev, bf->offset,
             value_bytes(val));
        return;
    }
    if (const_in_file(val)) {
        emit(cg, "    /* %zu bytes: read from the weights file at start (MPRT_CONST) */\n",
             value_bytes(val));
        return;
    }
    MPCC_ASSERT(val->dtype != DT_F16);   /* float32.c converts float16 constants */
    if (!ctype(val->dtype)) {
        Loc loc = value_loc(cg->g, bf->value);
        error_at(&loc, "the generated programs do not support constants of type %s yet",
                 dtype_name(val->dtype));
    }
    emit(cg, "    mprt_dev_write(%d, A%d + %zu, (const %s[]){", bf->dev, bf->dev, bf->offset,
         ctype(val->dtype));
    for (int64_t i = 0; i < shape_numel(&val->shape); i++) {
        emit(cg, "%s", i ? ", " : "");
        if (val->dtype == DT_F32)
            emit_float_literal(cg, tensor_f64(val->data, i));
        else if (val->dtype == DT_F64)
            emit_double_literal(cg, tensor_f64(val->data, i));
        else
            emit(cg, "%lld", (long long)tensor_i64(val->data, i));
    }
    emit(cg, "}, %zu);\n", value_bytes(val));
}

/* Each device's arena, and its kernels' scratch inside it. */
static void emit_devices(CG *cg)
{
    const Plan *p = cg->plan;
    bool here = cg->o->pipe.replicas_here > 1;   /* the thread's copy (runtime/state.c) */
    for (int d = 0; d < p->sc->ndev; d++) {
        emit(cg, "#define A%d (mprt_arenas[%s%d])   /* %s */\n", d, here ? "mprt_dev_base + " : "",
             d, p->ds->d[d].name);
        if (p->work_bytes[d])
            emit(cg, "#define W%d ((float *)(A%d + %zu))   /* scratch, %zu bytes */\n", d, d,
                 p->work_offset[d], p->work_bytes[d]);
        if (p->host_bytes[d])
            emit(cg, "#define H%d (mprt_host_arenas[%s%d])   /* %s's host arena: %s */\n", d,
                 here ? "mprt_dev_base + " : "", d, p->ds->d[d].name, host_holds(p, d));
    }
}


static void emit_constants(CG *cg)
{
    emit(cg, "\nstatic void zero_state(void)\n{\n");
    for (int b = 0; b < cg->plan->nbufs; b++) {
        const Buf *bf = &cg->plan->bufs[b];
        const Value *val = &cg->g->values[bf->value];
        if (val->kind == VK_STATE && !bf->acc && bf->host)   /* offloaded: lives there */
            emit(cg, "    memset(H%d + %zu, 0, %zu);\n", bf->dev, bf->offset, value_bytes(val));
        else if (val->kind == VK_STATE && !bf->acc && !bf->streamed)
            emit(cg, "    mprt_dev_zero(%d, A%d + %zu, %zu);\n", bf->dev, bf->dev, bf->offset,
                 bf->shard ? bf->bytes : value_bytes(val));   /* --zero=1: a shard */
        if (val->kind == VK_CONST)
            emit_const(cg, b);
    }
    emit(cg, "}\n");
}

/* The gradient the update reads: the sum over micro-batches when M > 1,
 * which a tree (--data-parallel) leaves on its top level. */
static const char *grad_buf(CG *cg, uint32_t p)
{
    int acc = cg->plan->acc_of[p];
    if (acc < 0)
        return buf(cg, cg->g->values[p].grad);
    const Buf *bf = &cg->plan->bufs[acc];
    MPCC_ASSERT(bf->slots == 1);   /* one sum for the whole step */
    int top = bf->levels > 1 ? tree_top(cg->plan->sc->M) : 0;
    if (top == 0)
        return local_buf(cg, acc);
    return arena_printf(cg->g->arena, "(%s + %zu)", local_buf(cg, acc),
                        (size_t)top * (bf->bytes / (size_t)bf->levels / sizeof(float)));
}

/* The tree's levels, one after another: the floats from one to the next. */
static size_t tree_stride(CG *cg, int acc)
{
    const Buf *bf = &cg->plan->bufs[acc];
    return bf->bytes / (size_t)bf->levels / sizeof(float);
}

/* The place in the action (stage, kind) of the node that writes
 * parameter v's gradient (plan_grad_writer); -1 if not there. */
static int grad_place(CG *cg, int kind, uint32_t v)
{
    const Plan *p = cg->plan;
    size_t k = (size_t)cg->stage * ACT_KINDS + kind;
    uint32_t id = plan_grad_writer(p, v);
    for (int j = 0; j < p->nnodes[k]; j++)
        if (p->nodes[k][j] == id)
            return j;
    return -1;
}

/* After the action computing a parameter's gradient (the nodes lo .. hi -
 * 1 of it, of a part: Plan.part_end): add it to the sum. */
static void emit_accumulate(CG *cg, int kind, int lo, int hi)
{
    Graph *g = cg->g;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (!val->trainable || cg->plan->acc_of[v] < 0 || cg->plan->st->home[v] != cg->stage)
            continue;
        uint32_t pn = g->values[val->grad].producer;
        if (cg->plan->st->act[pn] != kind)
            continue;
        int at = grad_place(cg, kind, v);
        if (at < lo || at >= hi)
            continue;
        int acc = cg->plan->acc_of[v];
        if (cg->plan->bufs[acc].levels > 1)
            emit(cg, "    mprt_tree_add(%s, %ld, %s, %zu, %s, mb, %d);  /* sum of the gradients "
                 "of '%s', a tree */\n", kernel(cg, "accumulate"), numel(cg, v),
                 local_buf(cg, acc), tree_stride(cg, acc), buf(cg, val->grad),
                 cg->plan->sc->M, comment_text(cg, val->name));
        else
            emit(cg, "    %s(%ld, %s, %s, mb == 0);  /* sum of the gradients of '%s' */\n",
                 kernel(cg, "accumulate"), numel(cg, v), grad_buf(cg, v), buf(cg, val->grad),
                 comment_text(cg, val->name));
    }
}

/* --clip-norm: a parameter's place in the table of squared gradient norms
 * (the order of the updates), -1 if it has no update; with NONE, the
 * table's size. Every layout sums the table in this order, so the norm is
 * the same bit for bit. */
static int clip_slot(CG *cg, uint32_t param)
{
    int k = 0;
    for (uint32_t i = 0; i < cg->g->norder; i++) {
        const Node *n = &cg->g->nodes[cg->g->order[i]];
        if (n->op != OP_SGD && n->op != OP_ADAMW)
            continue;
        if (n->in[0] == param)
            return k;
        k++;
    }
    return param == NONE ? k : -1;
}

/* Whether the gradient of v is finished and normed in this stage's
 * actions of this kind; with replicas (--data-parallel) never: the sums
 * over the replicas take the norms of what they sum (emit_bucket_sum). */
static bool grad_done_in(CG *cg, uint32_t v, int kind)
{
    const Value *val = &cg->g->values[v];
    if (cg->plan->st->home[v] != cg->stage || cg->o->pipe.replicas > 1)
        return false;
    return cg->plan->st->act[cg->g->values[val->grad].producer] == kind;
}

/* --clip-norm: the table of squared norms; with replicas in the process,
 * the calling thread's copy's (runtime/program.c). */
static const char *norm_table(CG *cg)
{
    return cg->o->pipe.replicas_here > 1 ? "mprt_norms_here()" : "mprt_norm_sq";
}

/* After the last micro-batch's action finishing a gradient: its squared
 * norm, in the runtime's table (mprt_norm_sq); on a GPU, written by its
 * kernel, and an event that says this device's entries are in. */
static void emit_clip_partials(CG *cg, int kind)
{
    Graph *g = cg->g;
    if (cg->o->train.clip_norm <= 0)
        return;
    bool any = false;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        int k = val->trainable ? clip_slot(cg, v) : -1;
        if (k < 0 || !grad_done_in(cg, v, kind))
            continue;
        emit(cg, "    if (mb == %d)  /* the squared norm of the gradient of '%s' */\n"
             "        %s(%ld, %s, 1.0f / %d, &%s[%d]);\n", cg->plan->sc->M - 1,
             comment_text(cg, val->name), kernel(cg, "sq_norm"), numel(cg, v), grad_buf(cg, v),
             step_microbatches(cg), norm_table(cg), k);
        any = true;
    }
    if (any && cuda_stage(cg))
        emit(cg, "    if (mb == %d)\n        mprt_cu_norm_mark();\n", cg->plan->sc->M - 1);
}

static void emit_update_node(CG *cg, const Node *n, int mark)
{
    emit_mark(cg, mark);
    emit(cg, "/* %s */\n", comment_text(cg, n->name));
    const char *count = arena_printf(cg->g->arena, "%ld", numel(cg, n->in[0])), *at = "";
    if (cg->o->pipe.zero) {   /* this replica's shard of it: [lo, lo + k) */
        emit(cg, "    {\n    long lo, k = mprt_shard(%ld, &lo);   /* --zero=1 */\n",
             numel(cg, n->in[0]));
        count = "k", at = " + lo";
    }
    if (n->op == OP_SGD)
        emit(cg, "    %s(%s, %s%s, %s%s, %s, scale, lr, (float)%.9g, (float)%.9g, %d, 0);\n",
             kernel(cg, "sgd"), count, buf(cg, n->in[0]), at, grad_buf(cg, n->in[0]), at,
             n->nin > 2 ? buf(cg, n->in[2]) : "NULL", attr_float(n, "momentum", 0),
             attr_float(n, "weight_decay", 0), (int)attr_int(n, "nesterov", 0));
    else
        emit(cg, "    %s(%s, %s%s, %s%s, %s, %s, scale, lr, (float)%.9g, (float)%.9g, "
             "(float)%.9g, (float)%.9g, step);\n", kernel(cg, "adamw"), count, buf(cg, n->in[0]),
             at, grad_buf(cg, n->in[0]), at, buf(cg, n->in[2]), buf(cg, n->in[3]),
             attr_float(n, "beta1", 0.9), attr_float(n, "beta2", 0.999),
             attr_float(n, "eps", 1e-8), attr_float(n, "weight_decay", 0));
    if (cg->o->pipe.zero)
        emit(cg, "    }\n");
}

/* Node `node` is timed by --profile: its index in the profile's table. */
static int profile_slot(CG *cg, uint32_t node)
{
    cg->profiled[cg->nprofiled] = node;
    cg->timed = true;
    return cg->nprofiled++;
}

/* After a function's last timed node: where its time ends. */
static void emit_timed_end(CG *cg)
{
    if (cg->timed)
        emit(cg, "    mprt_%sprof_end();\n", cuda_stage(cg) ? "cu_" : "");
    cg->timed = false;
}

/* --clip-norm: the factor that clips every stage's gradients, from the
 * table of their squared norms. A GPU computes it itself, after waiting
 * for every GPU's norms on its stream, so the host does not wait inside
 * the step (runtime/cuda_ops.c); with other processes' norms to add first
 * (MPI, on the host) and on CPU devices, the host computes it. */
static void emit_clip_factor(CG *cg)
{
    double max_norm = cg->o->train.clip_norm;
    if (!(max_norm > 0))
        return;
    if (cuda_stage(cg) && !cg->o->pipe.node_devs) {
        emit(cg, "    mprt_cu_clip_factor(%d, %s, (float)%.9g);   /* on the GPU, from every "
             "stage's squared norms */\n", clip_slot(cg, NONE), norm_table(cg), max_norm);
        return;
    }
    if (cuda_stage(cg))
        emit(cg, "    mprt_cu_norm_wait();   /* every GPU's squared norms are in */\n");
    if (cg->o->pipe.node_devs)
        emit(cg, "    mprt_norms_across(%d);   /* and the other processes' stages' */\n",
             clip_slot(cg, NONE));
    emit(cg, "    scale *= mprt_clip_scale(%d, %s, (float)%.9g);   /* every stage's "
         "gradients */\n", clip_slot(cg, NONE), norm_table(cg), max_norm);
}

/* fn(stage, n, {the stage's gradients or weights}, {their sizes}) over
 * the parameters the stage updates (runtime/comm.c). */
static void emit_stage_tensors(CG *cg, const char *fn, const uint32_t *nodes, int n, bool grads)
{
    emit(cg, "%s(%d, %d, (float *const[]){", fn, cg->stage, n);
    for (int i = 0; i < n; i++) {
        uint32_t v = cg->g->nodes[nodes[i]].in[0];
        emit(cg, "%s%s", i ? ", " : "", grads ? grad_buf(cg, v) : buf(cg, v));
    }
    emit(cg, "},\n                         (const long[]){");
    for (int i = 0; i < n; i++)
        emit(cg, "%s%ld", i ? ", " : "", numel(cg, cg->g->nodes[nodes[i]].in[0]));
    emit(cg, "});\n");
}

static void emit_update_body(CG *cg, const uint32_t *nodes, int n)
{
    bool adamw = false;
    for (int i = 0; i < n; i++)
        adamw = adamw || cg->g->nodes[nodes[i]].op != OP_SGD;   /* emit_update_node */
    emit(cg, "    float scale = 1.0f / %d, lr = mprt_lr;\n", step_microbatches(cg));
    if (adamw)
        emit(cg, "    long step = mprt_step_no + 1;   /* AdamW's bias correction */\n");
    if (n == 0)
        emit(cg, "    (void)scale, (void)lr;\n");
    emit_clip_factor(cg);
    for (int i = 0; i < n; i++)
        emit_update_node(cg, &cg->g->nodes[nodes[i]], profile_slot(cg, nodes[i]));
    emit_timed_end(cg);
    if (cg->o->pipe.zero && n) {   /* every replica takes the others' shards */
        emit(cg, "    ");
        emit_stage_tensors(cg, "mprt_zero_gather", nodes, n, false);
    }
}

/* The body of one stage's action (cg->stage, kind): its nodes, then the
 * gradients' sums and squared norms. */
static void emit_action_body(CG *cg, int kind)
{
    const Plan *p = cg->plan;
    size_t k = (size_t)cg->stage * ACT_KINDS + kind;
    if (kind == ACT_UPDATE) {
        emit_update_body(cg, p->nodes[k], p->nnodes[k]);
        return;
    }
    if (kind == ACT_BWD && p->st->recompute[cg->stage]) {
        size_t f = (size_t)cg->stage * ACT_KINDS + ACT_FWD;
        emit(cg, "    /* the forward again (--recompute): its activations were not kept */\n");
        cg->recomputing = true;
        for (int i = 0; i < p->nnodes[f]; i++)
            emit_node(cg, &cg->g->nodes[p->nodes[f][i]], -1);
        cg->recomputing = false;
        emit(cg, "    /* the backward */\n");
    }
    for (int i = 0; i < p->nnodes[k]; i++) {
        const Node *n = &cg->g->nodes[p->nodes[k][i]];
        emit_node(cg, n, profile_slot(cg, p->nodes[k][i]));
        if (n->out[0] == cg->g->loss && n->nout && kind == ACT_FWD)
            emit(cg, "    mprt_keep_loss(mb, %s);\n", buf(cg, cg->g->loss));
    }
    emit_timed_end(cg);
    if (kind != ACT_FWD) {
        emit_accumulate(cg, kind, 0, p->nnodes[k]);
        emit_clip_partials(cg, kind);
    }
}

/* Part q of the stage's last gradient action, which the last micro-batch
 * runs in parts so that the sums of the buckets done by each start while
 * the rest runs: its nodes, and the gradients they finish added to their
 * sums. The same kernels as the whole action's, in the same order. */
static void emit_action_part(CG *cg, int stage, int q)
{
    const Plan *p = cg->plan;
    int kind = p->last_grad[stage], lo = q ? p->part_end[stage][q - 1] : 0;
    int hi = p->part_end[stage][q];
    size_t k = (size_t)stage * ACT_KINDS + kind, f = (size_t)stage * ACT_KINDS + ACT_FWD;
    cg->stage = stage;
    cg->kind = kind;
    Function fn = begin_function(cg);
    if (q == 0 && kind == ACT_BWD && p->st->recompute[stage]) {
        emit(cg, "    /* the forward again (--recompute): its activations were not kept */\n");
        cg->recomputing = true;
        for (int i = 0; i < p->nnodes[f]; i++)
            emit_node(cg, &cg->g->nodes[p->nodes[f][i]], -1);
        cg->recomputing = false;
    }
    for (int i = lo; i < hi; i++)
        emit_node(cg, &cg->g->nodes[p->nodes[k][i]], -1);
    emit_accumulate(cg, kind, lo, hi);
    end_function(cg, &fn, arena_printf(cg->g->arena, "\n/* --- stage %d on %s: %s of the last "
                                       "micro-batch, part %d of %d (--data-parallel: the sums "
                                       "of the buckets it finishes start after it) --- */\n"
                                       "static void s%d_%s_part%d(int mb)\n", stage,
                                       p->ds->d[p->st->dev[stage]].name, act_names[kind], q + 1,
                                       p->nparts[stage], stage, act_names[kind], q));
}

/* One stage's action as a function of the micro-batch. */
static void emit_action(CG *cg, int stage, int kind)
{
    const Plan *p = cg->plan;
    cg->stage = stage;
    cg->kind = kind;
    Function f = begin_function(cg);
    emit_action_body(cg, kind);
    end_function(cg, &f, arena_printf(cg->g->arena, "\n/* --- stage %d on %s: %s --- */\n"
                                      "static void s%d_%s(int mb)\n", stage,
                                      p->ds->d[p->st->dev[stage]].name, act_names[kind], stage,
                                      act_names[kind]));
}

/* --data-parallel: bucket b of a stage's gradients summed over the
 * replicas in place (runtime/comm.c), on its device's communication
 * stream once the stage's last gradient action has finished them; with
 * --clip-norm, then their squared norms. Under --zero=1 each process
 * receives only its shares of the sums; with --clip-norm too, every one
 * receives them whole, whose norms are then one process's, bit for bit
 * (the update still reads only its shares). */
static void emit_bucket_sum(CG *cg, const Bucket *b)
{
    const Plan *p = cg->plan;
    const uint32_t *nodes = p->nodes[(size_t)b->stage * ACT_KINDS + ACT_UPDATE] + b->first;
    cg->stage = b->stage;
    cg->kind = ACT_UPDATE;
    Function f = begin_function(cg);
    bool shares = cg->o->pipe.zero && cg->o->train.clip_norm <= 0;
    emit(cg, "    ");
    emit_stage_tensors(cg, shares ? "mprt_zero_sum" : "mprt_replica_sum", nodes, b->count, true);
    for (int i = 0; cg->o->train.clip_norm > 0 && i < b->count; i++) {
        uint32_t v = cg->g->nodes[nodes[i]].in[0];
        emit(cg, "    %s(%ld, %s, 1.0f / %d, &%s[%d]);   /* the squared norm of '%s' */\n",
             kernel(cg, "sq_norm"), numel(cg, v), grad_buf(cg, v), step_microbatches(cg),
             norm_table(cg), clip_slot(cg, v), comment_text(cg, cg->g->values[v].name));
    }
    if (cg->o->train.clip_norm > 0 && cuda_stage(cg))
        emit(cg, "    mprt_cu_norm_mark();\n");
    end_function(cg, &f, arena_printf(cg->g->arena, "\n/* --- stage %d on %s: its gradients' "
                                      "bucket %d summed over the %d replicas%s --- */\n"
                                      "static void s%d_sum%d(int mb)\n", b->stage,
                                      p->ds->d[p->st->dev[b->stage]].name, b->index,
                                      cg->o->pipe.replicas, shares ? ", each its shard" : "",
                                      b->stage,
                                      b->index));
}

static void emit_actions(CG *cg)
{
    for (int s = 0; s < cg->plan->st->n; s++)
        for (int k = 0; k < ACT_KINDS; k++)
            if (k != ACT_WGRAD || cg->plan->sc->kind == SCHED_ZB)
                emit_action(cg, s, k);
    for (int s = 0; s < cg->plan->st->n; s++)
        for (int q = 0; cg->plan->nparts[s] > 1 && q < cg->plan->nparts[s]; q++)
            emit_action_part(cg, s, q);
    for (int k = 0; k < cg->plan->nbuckets; k++)
        emit_bucket_sum(cg, &cg->plan->buckets[k]);
}

/* ---- the step: the plan's operations in issue order ---- */

static const char *stream_name(CG *cg, int stream)
{
    return arena_printf(cg->g->arena, "%s %s", cg->plan->ds->d[stream / STREAMS_PER_DEV].name,
                        stream_kinds[stream % STREAMS_PER_DEV]);
}

/* A stream's name in the program: CPU0_COMPUTE, CUDA1_SEND_BACK. */
static const char *stream_ident(CG *cg, int stream)
{
    static const char *const kinds[] = {"COMPUTE", "SEND", "SEND_BACK", "COMM"};
    const char *dev = cg->plan->ds->d[stream / STREAMS_PER_DEV].name;
    char *r = arena_alloc(cg->g->arena, strlen(dev) + 1), *w = r;
    for (; *dev; dev++)
        if (isalnum((unsigned char)*dev))
            *w++ = (char)toupper((unsigned char)*dev);
    *w = 0;
    return arena_printf(cg->g->arena, "%s_%s", r, kinds[stream % STREAMS_PER_DEV]);
}

static bool name_taken(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* An event's name in the program: what it marks as done, the action
 * (EV_S1_BWD_MB2, EV_S0_UPDATE) or copy (EV_COPY_S0_S1_MB2, then
 * EV_COPY_S0_S1_MB2_2 for the next value that crosses with it) that
 * records it. */
static const char *event_ident(CG *cg, const PlanOp *op, const char *const *taken, int ntaken)
{
    static const char *const acts[] = {"FWD", "BWD", "WGRAD", "UPDATE"};
    const Plan *p = cg->plan;
    const char *base;
    if (op->kind == OPK_SUM)
        base = arena_printf(cg->g->arena, "EV_S%d_SUM%d", op->act.stage, op->mb);
    else if (op->kind == OPK_RUN && op->act.kind == ACT_UPDATE)
        base = arena_printf(cg->g->arena, "EV_S%d_UPDATE", op->act.stage);
    else if (op->kind == OPK_RUN)
        base = arena_printf(cg->g->arena, "EV_S%d_%s_MB%d%s", op->act.stage, acts[op->act.kind],
                            op->act.mb, plan_split_part(cg->plan, op) ? arena_printf(cg->g->arena, "_PART%d",
                                                                          op->part) : "");
    else if (p->bufs[op->dst].streamed)
        base = arena_printf(cg->g->arena, "EV_WEIGHT_%s_S%d_W%d",
                            p->bufs[op->dst].host ? "OUT" : "IN", p->bufs[op->dst].stage, op->mb);
    else if (plan_offload_copy(p, op->dst))
        base = arena_printf(cg->g->arena, "EV_%s_S%d_MB%d",
                            p->bufs[op->dst].host ? "OFFLOAD" : "FETCH", p->bufs[op->dst].stage,
                            op->mb);
    else
        base = arena_printf(cg->g->arena, "EV_COPY_S%d_S%d_MB%d", p->bufs[op->src].stage,
                            p->bufs[op->dst].stage, op->mb);
    const char *name = base;
    for (int k = 2; name_taken(taken, ntaken, name); k++)
        name = arena_printf(cg->g->arena, "%s_%d", base, k);
    return name;
}

/* The step's streams and events as enums, by which run_step names them;
 * the events' names by number. */
static const char **emit_step_names(CG *cg)
{
    const Plan *p = cg->plan;
    emit(cg, "\n/* The step's streams: each device's kernels, copies on, copies back and "
         "sums over\n * the replicas. */\nenum {\n");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "    %s, %s, %s, %s,\n", stream_ident(cg, d * STREAMS_PER_DEV),
             stream_ident(cg, d * STREAMS_PER_DEV + 1), stream_ident(cg, d * STREAMS_PER_DEV + 2),
             stream_ident(cg, d * STREAMS_PER_DEV + 3));
    emit(cg, "};\n");
    const char **ev = arena_array(cg->g->arena, (size_t)p->nevents + 1, sizeof *ev);
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].event >= 0)
            ev[p->ops[i].event] = event_ident(cg, &p->ops[i], ev, p->nevents);
    if (p->nevents == 0)
        return ev;
    emit(cg, "\n/* The step's events, each recorded when what it names is done: EV_S1_BWD_MB2,\n"
         " * stage 1's backward of micro-batch 2; EV_COPY_S0_S1_MB2, a copy from stage 0 to 1. */\n"
         "enum {");
    size_t col = 0;   /* of the line's end; 0: no line yet */
    for (int e = 0; e < p->nevents; e++) {
        MPCC_ASSERT(ev[e]);
        if (col == 0 || col + strlen(ev[e]) + 2 > 96)
            emit(cg, "\n   "), col = 3;
        emit(cg, " %s,", ev[e]);
        col += strlen(ev[e]) + 2;
    }
    emit(cg, "\n};\n");
    return ev;
}

/* A pipeline across processes: device d's process. */
static int node_of(CG *cg, int dev)
{
    return cg->plan->ds->d[dev].node;
}

/* A copy between devices of two processes (a pipeline across them): the
 * sender's stream sends, the receiver's stream of the same kind receives,
 * and each records the copy's event, which its own process's waits name;
 * the copy's waits go to the side whose device they are on. Both sides
 * take their operations in this order, so the step cannot deadlock where
 * one process alone could not (docs/distributed.md). */
static void emit_cross_copy(CG *cg, int i, const char *const *ev)
{
    const Plan *p = cg->plan;
    const PlanOp *op = &p->ops[i];
    int from = p->bufs[op->src].dev, to = p->bufs[op->dst].dev;
    MPCC_ASSERT(op->stream / STREAMS_PER_DEV == from);
    int side[2] = {op->stream, to * STREAMS_PER_DEV + op->stream % STREAMS_PER_DEV};
    for (int k = 0; k < 2; k++) {
        const char *stream = stream_ident(cg, side[k]);
        int here = node_of(cg, side[k] / STREAMS_PER_DEV);
        for (int j = 0; j < op->ndeps; j++) {
            const PlanOp *dep = &p->ops[op->deps[j]];
            int there = node_of(cg, dep->stream / STREAMS_PER_DEV);
            MPCC_ASSERT(there == node_of(cg, from) || there == node_of(cg, to));
            if (there == here)
                emit(cg, "    mprt_wait_event(%s, %s);\n", stream, ev[dep->event]);
        }
        if (k == 0)
            emit(cg, "    mprt_send(%s, %s, %zu, %d, %d);   /* %s: '%s' mb %d to stage %d, "
                 "another process */\n", stream, slot_addr(cg, op->src, op->mb),
                 p->bufs[op->dst].bytes, to, i, stream_name(cg, side[k]),
                 comment_text(cg, cg->g->values[p->bufs[op->dst].value].name), op->mb,
                 p->bufs[op->dst].stage);
        else
            emit(cg, "    mprt_recv(%s, %s, %zu, %d, %d);   /* %s: the same, received */\n",
                 stream, slot_addr(cg, op->dst, op->mb), p->bufs[op->dst].bytes, from, i,
                 stream_name(cg, side[k]));
        if (op->event >= 0)
            emit(cg, "    mprt_record_event(%s, %s);\n", stream, ev[op->event]);
    }
}

/* The process records op's event: its stream's, and a copy between
 * processes' receiver's too. */
static bool recorded_on(CG *cg, const PlanOp *op, int node)
{
    const Plan *p = cg->plan;
    return node_of(cg, op->stream / STREAMS_PER_DEV) == node ||
           (op->kind == OPK_COPY && node_of(cg, p->bufs[op->dst].dev) == node);
}

static void emit_op(CG *cg, int i, const char *const *ev)
{
    const Plan *p = cg->plan;
    const PlanOp *op = &p->ops[i];
    const char *stream = stream_ident(cg, op->stream);
    if (op->kind == OPK_COPY &&
        node_of(cg, p->bufs[op->src].dev) != node_of(cg, p->bufs[op->dst].dev)) {
        emit_cross_copy(cg, i, ev);
        return;
    }
    for (int k = 0; k < op->ndeps; k++) {   /* an update under --clip-norm waits for */
        const PlanOp *dep = &p->ops[op->deps[k]];   /* the other processes' norms in it */
        if (recorded_on(cg, dep, node_of(cg, op->stream / STREAMS_PER_DEV)))
            emit(cg, "    mprt_wait_event(%s, %s);\n", stream, ev[dep->event]);
        else
            MPCC_ASSERT(op->kind == OPK_RUN && op->act.kind == ACT_UPDATE &&
                        cg->o->train.clip_norm > 0);
    }
    if (op->kind == OPK_RUN) {
        emit(cg, "    mprt_launch(%s, s%d_%s%s, %d, %d);\n", stream, op->act.stage,
             act_names[op->act.kind], plan_split_part(cg->plan, op) ? arena_printf(cg->g->arena, "_part%d",
                                                                        op->part) : "",
             op->act.mb, i);
    } else if (op->kind == OPK_SUM) {
        emit(cg, "    mprt_launch(%s, s%d_sum%d, 0, %d);   /* %.2f MB over the replicas */\n",
             stream, op->act.stage, op->mb, i, p->buckets[op->bucket].bytes / 1e6);
    } else {
        const Buf *dst = &p->bufs[op->dst];
        const char *to = plan_offload_copy(p, op->dst)
                             ? (dst->host ? "to host memory" : "back from host memory")
                             : arena_printf(cg->g->arena, "to stage %d", dst->stage);
        const char *which = arena_printf(cg->g->arena, "mb %d", op->mb);
        if (dst->streamed)
            which = arena_printf(cg->g->arena, "window %d", op->mb),
            to = dst->host ? "to host memory" : "in from host memory";
        emit(cg, "    mprt_memcpy_async(%s, %s, %s, %zu, %d);   /* %s: '%s' %s %s */\n",
             stream, slot_addr(cg, op->dst, op->mb), slot_addr(cg, op->src, op->mb), dst->bytes, i,
             stream_name(cg, op->stream),
             comment_text(cg, cg->g->values[dst->value].name), which, to);
    }
    if (op->event >= 0)
        emit(cg, "    mprt_record_event(%s, %s);\n", stream, ev[op->event]);
}

static void emit_step(CG *cg)
{
    const Plan *p = cg->plan;
    const char **ev = emit_step_names(cg);
    emit(cg, "\n/* One step: every device's actions and copies, in an order where each wait\n"
         " * names an event recorded before it; an operation's last number is its op_info row. */\n"
         "static void run_step(void)\n{\n");
    for (int i = 0; i < p->nops; i++)
        emit_op(cg, i, ev);
    if (cg->o->pipe.replicas_here > 1)   /* the trainer issues every copy's, then syncs */
        emit(cg, "}\n");
    else
        emit(cg, "    mprt_sync();\n}\n");
}

/* What ./train --profile names each node. */
static void emit_prof_table(CG *cg)
{
    static const char *const phases[] = {"forward", "backward", "update"};
    emit(cg, "\nstatic const MprtProfNode prof_nodes[] = {\n");
    for (int i = 0; i < cg->nprofiled; i++) {
        const Node *n = &cg->g->nodes[cg->profiled[i]];
        emit(cg, "    {%s, \"%s\"},\n", c_string(cg, n->name), phases[n->phase]);
    }
    emit(cg, "    {NULL, NULL}\n};\n");
}

/* What ./train --trace names each operation. */
static void emit_op_table(CG *cg)
{
    const Plan *p = cg->plan;
    emit(cg, "\nstatic const MprtOpInfo op_info[] = {\n");
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind == OPK_RUN)
            emit(cg, "    {%d, \"%s s%d mb%d%s\", -1},\n", op->stream, act_names[op->act.kind],
                 op->act.stage, op->act.mb, plan_split_part(cg->plan, op) ? arena_printf(cg->g->arena,
                 " part %d", op->part) : "");
        else if (op->kind == OPK_SUM)
            emit(cg, "    {%d, \"sum s%d b%d\", -1},\n", op->stream, op->act.stage, op->mb);
        else if (p->bufs[op->dst].streamed)
            emit(cg, "    {%d, \"weight %s w%d s%d\", %d},\n", op->stream,
                 p->bufs[op->dst].host ? "out" : "in", op->mb, p->bufs[op->dst].stage,
                 p->bufs[op->dst].dev);
        else if (plan_offload_copy(p, op->dst))
            emit(cg, "    {%d, \"%s mb%d s%d\", %d},\n", op->stream,
                 p->bufs[op->dst].host ? "offload" : "fetch", op->mb, p->bufs[op->dst].stage,
                 p->bufs[op->dst].dev);
        else
            emit(cg, "    {%d, \"copy mb%d s%d to s%d\", %d},\n", op->stream, op->mb,
                 p->bufs[op->src].stage, p->bufs[op->dst].stage, p->bufs[op->dst].dev);
    }
    emit(cg, "};\n");
}

/* Offloaded weights the stage's forward reads, in from host memory. */
static void emit_eval_fetch(CG *cg, int s)
{
    const Plan *p = cg->plan;
    for (int i = 0; i < p->nwofl; i++) {
        const Streamed *w = &p->wofl[i];
        if (w->stage == s && w->forward)
            emit(cg, "    mprt_dev_write(%d, %s, %s, %zu);   /* '%s' in from host memory */\n",
                 p->bufs[w->dev].dev, slot_addr(cg, w->dev, 0), slot_addr(cg, w->host, 0),
                 p->bufs[w->dev].bytes, comment_text(cg, cg->g->values[w->value].name));
    }
}

/* Forward of micro-batch 0 through every stage, for evaluation. A
 * pipeline across processes: each process runs its own stages, and the
 * activations cross between processes (mprt_eval_copy, comm.c). */
static void emit_eval(CG *cg)
{
    const Plan *p = cg->plan;
    bool on_cpu = false, across = cg->o->pipe.node_devs > 0;
    emit(cg, "\nstatic void eval_forward(void)\n{\n");
    for (int s = 0; s < p->st->n; s++) {
        cg->stage = s;
        const char *in = across ? "    " : "";
        if (across)
            emit(cg, "    if (mprt_dev_here(%d)) {\n", p->st->dev[s]);
        emit_eval_fetch(cg, s);
        if (cuda_stage(cg))   /* issued on the stage's device, finished before the copies */
            emit(cg, "%s    mprt_cu_use(%d);\n%s    s%d_forward(0);\n%s    mprt_sync();\n", in,
                 p->st->dev[s], in, s, in);
        else   /* on the host's thread, with the device's thread count (pool.c) */
            emit(cg, "%s    mprt_run_as(%d);\n%s    s%d_forward(0);\n", in, p->st->dev[s], in, s);
        if (across)
            emit(cg, "    }\n");
        on_cpu |= !cuda_stage(cg);
        for (int r = 0; r < p->nbufs; r++) {
            const Buf *bf = &p->bufs[r];
            uint32_t v = bf->value, pn = cg->g->values[v].producer;
            if (!bf->received || p->st->home[v] != s ||
                (pn != NONE && cg->g->nodes[pn].phase != PH_FORWARD))
                continue;
            if (across)
                emit(cg, "    mprt_eval_copy(%s, %d, %s, %d, %zu);   /* '%s' to stage %d */\n",
                     slot_addr(cg, r, 0), bf->dev, slot_addr(cg, plan_buf(p, v, s), 0),
                     p->st->dev[s], bf->bytes, comment_text(cg, cg->g->values[v].name),
                     bf->stage);
            else
                emit(cg, "    mprt_dev_copy(%s, %s, %zu);   /* '%s' to stage %d */\n",
                     slot_addr(cg, r, 0), slot_addr(cg, plan_buf(p, v, s), 0), bf->bytes,
                     comment_text(cg, cg->g->values[v].name), bf->stage);
        }
    }
    if (on_cpu)
        emit(cg, "    mprt_run_as(-1);\n");
    emit(cg, "}\n");
}

/* A C string literal: octal escapes (never merge with what follows) for
 * control bytes, and '?' escaped so no trigraph can form. */
static const char *c_string(CG *cg, const char *s)
{
    char *r = arena_alloc(cg->g->arena, strlen(s) * 4 + 3), *w = r;
    *w++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\' || c == '?')
            *w++ = '\\', *w++ = (char)c;
        else if (c < 0x20 || c == 0x7f)
            w += sprintf(w, "\\%03o", c);
        else
            *w++ = (char)c;
    }
    *w++ = '"';
    *w = 0;
    return r;
}

/* The runtime's element type (MprtDType) of value v. */
static MprtDType mprt_dtype_id(CG *cg, uint32_t v)
{
    switch (cg->g->values[v].dtype) {
    case DT_F32: return MPRT_F32;
    case DT_F64: return MPRT_F64;
    case DT_I64: return MPRT_I64;
    case DT_I32: return MPRT_I32;
    case DT_U8: return MPRT_U8;
    case DT_BOOL: return MPRT_BOOL;
    case DT_F16: return MPRT_F16;
    case DT_BF16: return MPRT_BF16;
    case DT_I16: return MPRT_I16;
    case DT_I8: return MPRT_I8;
    default: {
        Loc loc = value_loc(cg->g, v);
        error_at(&loc, "element type %s is not supported by the CPU programs yet",
                 dtype_name(cg->g->values[v].dtype));
    }
    }
}

/* ... and its name in the C file. */
static const char *mprt_dtype(CG *cg, uint32_t v)
{
    static const char *const names[MPRT_DTYPE_COUNT] = {
        [MPRT_F32] = "MPRT_F32", [MPRT_F64] = "MPRT_F64", [MPRT_I64] = "MPRT_I64",
        [MPRT_I32] = "MPRT_I32", [MPRT_U8] = "MPRT_U8",   [MPRT_BOOL] = "MPRT_BOOL",
        [MPRT_F16] = "MPRT_F16", [MPRT_BF16] = "MPRT_BF16", [MPRT_I16] = "MPRT_I16",
        [MPRT_I8] = "MPRT_I8"};
    return names[mprt_dtype_id(cg, v)];
}

/* A row of the buffer table; `name` is what the program calls it. A value
 * nothing reads has no buffer (device -1: the forward-only program checks
 * such an input's file and keeps nothing). */
/* A BatchNormalization's running mean or variance: each replica keeps its
 * own (docs/distributed.md). */
static bool running_stat(CG *cg, uint32_t v)
{
    for (uint32_t i = 0; i < cg->g->norder; i++) {
        const Node *n = &cg->g->nodes[cg->g->order[i]];
        if (n->op == OP_BATCH_NORM && n->nout > 1 && n->nin > 4 &&
            (n->in[3] == v || n->in[4] == v))
            return true;
    }
    return false;
}

static void emit_buffer_row(CG *cg, uint32_t v, const char *name, const char *kind,
                            const Buf *bf)
{
    const Value *val = &cg->g->values[v];
    emit(cg, "    {%s, %s, %s, %d, {", c_string(cg, name), kind, mprt_dtype(cg, v),
         val->shape.rank);
    for (int i = 0; i < val->shape.rank; i++)
        emit(cg, "%s%lld", i ? ", " : "", (long long)val->shape.d[i]);
    emit(cg, "%s}, %d, %zu, %d, %zu, %zu, %d, %d, %d},\n", val->shape.rank ? "" : "0",
         bf ? bf->dev : -1, bf ? bf->offset : 0, bf ? bf->slots : 1, bf ? bf->bytes : 0,
         value_bytes(val), bf && bf->host, val->kind == VK_PARAM && running_stat(cg, v),
         bf ? bf->shard : 0);
}

static void emit_named_buffer(CG *cg, uint32_t v, const char *name, const char *kind)
{
    int b = plan_home_buf(cg->plan, v);   /* an offloaded weight's: in host memory */
    emit_buffer_row(cg, v, name, kind, b >= 0 ? &cg->plan->bufs[b] : NULL);
}

/* The constants read from the weights file: a row for each copy (one per
 * stage that reads the constant). */
static void emit_const_buffers(CG *cg)
{
    for (int b = 0; b < cg->plan->nbufs; b++) {
        const Buf *bf = &cg->plan->bufs[b];
        const Value *val = &cg->g->values[bf->value];
        if (const_in_file(val))
            emit_buffer_row(cg, bf->value, arena_printf(cg->g->arena, CONST_PREFIX "%s", val->name),
                            "MPRT_CONST", bf);
    }
}

static void emit_buffer(CG *cg, uint32_t v, const char *kind)
{
    emit_named_buffer(cg, v, cg->g->values[v].name, kind);
}

/* What evaluation needs besides the output buffer (g->scores: scores for
 * cross-entropy, predictions for MSE): the loss kind and, for
 * cross-entropy, the ignored label and where the loss kernel leaves the
 * log-probabilities. */
static void emit_loss_fields(CG *cg)
{
    const Node *n = &cg->g->nodes[cg->g->values[cg->g->loss].producer];
    if (n->op == OP_SOFTMAX_CE) {
        const Buf *lp = &cg->plan->bufs[plan_buf(cg->plan, n->out[1],
                                                  cg->plan->st->home[n->out[1]])];
        emit(cg, "    .loss_kind = MPRT_LOSS_CROSS_ENTROPY, .ignore_index = %lldLL,\n"
             "    .class_axis = %d, .log_prob_dev = %d, .log_prob_offset = %zu, .lse = %d,\n",
             (long long)loss_ignore_index(n), loss_class_axis(n), lp->dev, lp->offset,
             attr_int(n, "mpcc_lse", 0) != 0);
    } else {
        emit(cg, "    .loss_kind = MPRT_LOSS_MSE,\n");
    }
}

/* A GPU pipeline across processes: the pairs of streams, sender's and
 * receiver's, whose copies cross between processes, each once, in the
 * order of the step's first copy between them. The trainer joins an NCCL
 * communicator of each pair at start-up, every process in this order. */
static void emit_links(CG *cg)
{
    const Plan *p = cg->plan;
    int *seen = arena_array(cg->g->arena, (size_t)p->nops * 2 + 2, sizeof *seen), n = 0;
    emit(cg, "\n/* The pairs of streams (sender, receiver) whose copies cross between processes:\n"
         " * an NCCL communicator each. */\nstatic const int links[] = {");
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind != OPK_COPY || node_of(cg, p->bufs[op->src].dev) ==
                                        node_of(cg, p->bufs[op->dst].dev))
            continue;
        int a = op->stream;
        int b = p->bufs[op->dst].dev * STREAMS_PER_DEV + op->stream % STREAMS_PER_DEV;
        bool known = false;
        for (int k = 0; k < n; k++)
            known |= (seen[2 * k] == a && seen[2 * k + 1] == b) ||
                     (seen[2 * k] == b && seen[2 * k + 1] == a);
        if (known)
            continue;
        seen[2 * n] = a, seen[2 * n + 1] = b;
        emit(cg, "%s%d, %d", n++ ? ", " : "", a, b);
    }
    MPCC_ASSERT(n > 0);
    emit(cg, "};\n");
}

static void emit_model(CG *cg, const char *hash, const char *weights)
{
    Graph *g = cg->g;
    const Plan *p = cg->plan;
    if (cg->cuda && cg->o->pipe.node_devs)
        emit_links(cg);
    emit(cg, "\nstatic const MprtBuffer buffers[] = {\n");
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (p->st->home[v] < 0)
            continue;
        if (val->kind == VK_PARAM)
            emit_buffer(cg, v, "MPRT_PARAM");
        else if (val->kind == VK_STATE)
            emit_buffer(cg, v, "MPRT_STATE");
    }
    emit_const_buffers(cg);
    for (uint32_t i = 0; i < g->ninputs; i++)
        emit_buffer(cg, g->inputs[i], g->inputs[i] == g->labels ? "MPRT_LABELS" : "MPRT_INPUT");
    emit_buffer(cg, g->scores, "MPRT_OUTPUT");
    emit(cg, "};\n\nstatic const size_t arena_bytes[] = {");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "%s%zu", d ? ", " : "", p->arena_bytes[d]);
    emit(cg, "};\nstatic const size_t host_bytes[] = {");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "%s%zu", d ? ", " : "", p->host_bytes[d]);
    emit(cg, "};\nstatic const size_t work_offset[] = {");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "%s%zu", d ? ", " : "", p->work_offset[d]);
    emit(cg, "};\nstatic const size_t work_bytes[] = {");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "%s%zu", d ? ", " : "", p->work_bytes[d]);
    emit(cg, "};\nstatic const size_t slot_bytes[] = {");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "%s%zu", d ? ", " : "", p->slot_bytes ? p->slot_bytes[d] : 0);
    emit(cg, "};\nstatic const char *const device_names[] = {");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "%s%s", d ? ", " : "", c_string(cg, p->ds->d[d].name));
    emit(cg, "};\n/* Each CPU device's predicted busy seconds a step: the CPU devices share the\n"
         " * cores in this proportion (one each, the rest by share), unless\n"
         " * OPENBLAS_NUM_THREADS gives every one that many. */\n"
         "static const double cpu_shares[] = {");
    for (int d = 0; d < p->sc->ndev; d++)
        emit(cg, "%s%.6g", d ? ", " : "", p->ds->d[d].kind == DEV_CPU ? p->busy[d] : 0.0);
    emit(cg, "};\n\nstatic const MprtModel model = {\n"
         "    .program = \"train\", .mpcc_version = \"%s\",\n"
         "    .model_file = %s, .model_hash = \"%s\",\n    .weights_file = %s,\n"
         "    .batch = %lld, .microbatches = %d, .schedule = \"%s\", .lr = %.9g,\n"
         "    .ndev = %d, .arena_bytes = arena_bytes, .device_names = device_names,\n"
         "    .cpu_shares = cpu_shares, .work_offset = work_offset, .work_bytes = work_bytes,\n"
         "    .slot_bytes = slot_bytes,\n"
         "    .host_bytes = host_bytes,\n"
         "    .nstreams = %d, .nevents = %d, .nops = %d,\n"
         "    .buffers = buffers, .nbuffers = (int)(sizeof buffers / sizeof buffers[0]),\n",
         MPCC_VERSION, c_string(cg, g->file), hash, c_string(cg, weights),
         step_rows(cg), p->sc->M, schedule_name(p->sc->kind), cg->o->train.lr, p->sc->ndev,
         p->nstreams, p->nevents, p->nops);
    emit_loss_fields(cg);
    emit(cg, "    .ops = op_info, .prof_nodes = prof_nodes, .nprof_nodes = %d,\n", cg->nprofiled);
    if (cg->o->train.clip_norm > 0)
        emit(cg, "    .norm_terms = %d,\n", clip_slot(cg, NONE));
    if (cg->o->pipe.replicas > 1 || cg->o->pipe.nodes > 1)
        emit(cg, "    .replicas = %d, .nodes = %d, .replicas_here = %d, .nstages = %d,\n"
             "    .node_devs = %d,\n", cg->o->pipe.replicas, cg->o->pipe.nodes,
             cg->o->pipe.replicas_here, p->st->n, cg->o->pipe.node_devs);
    if (cg->cuda && cg->o->pipe.node_devs)
        emit(cg, "    .links = links, .nlinks = (int)(sizeof links / sizeof links[0] / 2),\n");
    if (dnnl_kernels(cg))
        emit(cg, "    .kernels_start = kernels_start,\n");
    emit(cg, "    .zero_state = zero_state, .run_step = run_step, .eval_forward = eval_forward,\n");
    const char *why = cg->cuda ? cuda_graph_why(cg->o, cg->mixed) : NULL;
    if (why)   /* GPUs: the step is issued op by op (runtime/cuda.c) */
        emit(cg, "    .graph_why = %s,\n", c_string(cg, why));
    emit(cg, "};\n");
}

/* The convolutions that run through oneDNN: the table the trainer makes
 * their primitives from at start-up (mprt_dnnl_start), before the arenas,
 * raising each device's scratch to what they need. */
static void emit_dnnl_table(CG *cg)
{
    static const char *const kind[] = {"MPRT_DNNL_FWD", "MPRT_DNNL_BWD_DATA",
                                       "MPRT_DNNL_BWD_WEIGHTS"};
    emit(cg, "\nstatic const MprtDnnlConv dnnl_convs[] = {\n");
    for (int i = 0; i < cg->ndnnl; i++) {
        const Node *n = &cg->g->nodes[cg->dnnl_node[i]];
        int k = n->op == OP_CONV ? 0 : n->op == OP_CONV_GRAD_X ? 1 : 2;
        emit(cg, "    {%s, %d, %d, %s, ", kind[k], cg->dnnl_dev[i],
             adds_bias(cg, n), c_string(cg, n->name));
        /* the data operands: x (dx) and y (dy) */
        uint32_t x = k == 0 ? n->in[0] : k == 1 ? n->out[0] : n->in[1];
        uint32_t y = k == 0 ? n->out[0] : n->in[0];
        conv_fields(cg, n, x, k == 2 ? n->out[0] : n->in[1], y);
        emit(cg, ", %d},\n", (blocked(cg, x) ? 1 : 0) | (blocked(cg, y) ? 2 : 0));
    }
    if (!cg->ndnnl)
        emit(cg, "    {0},   /* none: C has no empty arrays */\n");
    emit(cg, "};\n\nstatic const MprtDnnlPool dnnl_pools[] = {\n");
    if (!cg->npool)
        emit(cg, "    {0},   /* none */\n");
    for (int i = 0; i < cg->npool; i++) {
        const Node *n = &cg->g->nodes[cg->pool_node[i]];
        emit(cg, "    {%d, %s, ", cg->pool_dev[i], c_string(cg, n->name));
        pool_fields(cg, n, n->in[0], n->out[0]);
        emit(cg, "},\n");
    }
    emit(cg, "};\n\nstatic void kernels_start(size_t *scratch)\n{\n"
         "    mprt_dnnl_start(dnnl_convs, %d, dnnl_pools, %d, %d, scratch);\n}\n", cg->ndnnl,
         cg->npool, cg->plan->sc->ndev);
}

/* main, after the runtime: the runtime's trainer (or forward-only program)
 * runs the model; a CUDA trainer hands it the kernels' source. */
static void emit_main(CG *cg)
{
    emit(cg, "\n/* ==== main ==== */\nint main(int argc, char **argv)\n{\n");
    if (cg->cuda)
        emit(cg, "    mprt_cu_lines = mprt_cu_kernels;\n"
             "    mprt_cu_header_lines = mprt_cu_opcodes;\n    mprt_cu_tf32 = %d;\n", cg->o->precision == PREC_TF32);
    if (cg->cuda && cg->g->bf16)
        emit(cg, "    mprt_cu_bf16 = 1;   /* GEMMs on bf16 tensor cores */\n");
    emit(cg, "    return mprt_%s_main(&model, argc, argv);\n}\n", cg->o->infer ? "infer" : "train");
}

/* --infer: each stage's forward, node after node. */
static void emit_forward_only(CG *cg)
{
    const Plan *p = cg->plan;
    for (int s = 0; s < p->st->n; s++) {
        size_t k = (size_t)s * ACT_KINDS + ACT_FWD;
        cg->stage = s;
        Function f = begin_function(cg);
        for (int i = 0; i < p->nnodes[k]; i++)
            emit_node(cg, &cg->g->nodes[p->nodes[k][i]], -1);
        end_function(cg, &f, arena_printf(cg->g->arena, "\n/* --- the forward on %s --- */\n"
                                          "static void s%d_forward(int mb)\n",
                                          p->ds->d[p->st->dev[s]].name, s));
    }
}

/* --infer: the parameters, every graph input and every graph output (by
 * its ONNX name), and main. */
static void emit_infer_model(CG *cg, const char *hash, const char *weights)
{
    Graph *g = cg->g;
    const Plan *p = cg->plan;
    emit(cg, "\nstatic const MprtBuffer buffers[] = {\n");
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == VK_PARAM && p->st->home[v] >= 0)
            emit_buffer(cg, v, "MPRT_PARAM");
    emit_const_buffers(cg);
    for (uint32_t i = 0; i < g->ninputs; i++)
        emit_buffer(cg, g->inputs[i], "MPRT_INPUT");
    for (uint32_t i = 0; i < g->noutputs; i++)
        emit_named_buffer(cg, g->outputs[i], g->output_names[i], "MPRT_OUTPUT");
    emit(cg, "};\n\nstatic const size_t arena_bytes[] = {%zu};\n"
         "static const char *const device_names[] = {%s};\n\n"
         "static const MprtInferModel model = {\n"
         "    .program = %s, .mpcc_version = \"%s\",\n"
         "    .model_file = %s, .model_hash = \"%s\",\n    .weights_file = %s,\n"
         "    .ndev = 1, .arena_bytes = arena_bytes, .device_names = device_names,\n"
         "    .buffers = buffers, .nbuffers = (int)(sizeof buffers / sizeof buffers[0]),\n"
         "    .zero_state = zero_state, .forward = eval_forward,\n"
         "};\n",
         p->arena_bytes[0], c_string(cg, p->ds->d[0].name), c_string(cg, program_name(cg)),
         MPCC_VERSION, c_string(cg, g->file), hash, c_string(cg, weights));
}

/* The initial weights: every floating-point initializer, by ONNX name, and
 * the constants too large for the C file (CONST_PREFIX and their names). */
static void write_weights(CG *cg, const char *path)
{
    Graph *g = cg->g;
    MprtStEntry *e = arena_array(g->arena, g->nvalues, sizeof *e);
    int n = 0;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind != VK_PARAM || cg->plan->st->home[v] < 0)
            continue;
        if (val->dtype != DT_F32)
            unsupported(cg, &g->nodes[0], "initializers that are not float32");
        e[n++] = (MprtStEntry){val->name, MPRT_F32, val->shape.rank, val->shape.d,
                               val->data->data, val->data->nbytes};
    }
    bool *written = arena_array(g->arena, g->nvalues + 1, sizeof(bool));
    for (int b = 0; b < cg->plan->nbufs; b++) {
        uint32_t v = cg->plan->bufs[b].value;
        const Value *val = &g->values[v];
        if (const_in_file(val) && !written[v]) {
            written[v] = true;
            e[n++] = (MprtStEntry){arena_printf(g->arena, CONST_PREFIX "%s", val->name),
                                   mprt_dtype_id(cg, v), val->shape.rank, val->shape.d,
                                   val->data->data, val->data->nbytes};
        }
    }
    char err[512];
    const char *meta[] = {"format", "mpcc-weights", "source", g->file};
    if (mprt_st_save(path, e, n, meta, 2, err, sizeof err) != 0)
        error_file(path, "%s", err);
}

static const char *weights_path(Arena *a, const char *out)
{
    size_t n = strlen(out);
    if (n > 2 && strcmp(out + n - 2, ".c") == 0)
        n -= 2;
    return arena_printf(a, "%.*s.weights.safetensors", (int)n, out);
}

/* How many of the plan's devices are CUDA devices. */
static int cuda_devices(const Plan *plan)
{
    int ncuda = 0;
    for (int d = 0; d < plan->ds->n; d++)
        ncuda += plan->ds->d[d].kind == DEV_CUDA;
    return ncuda;
}

/* Writes the text to path (through path.tmp, renamed when complete). */
static void text_save(Graph *g, Text *t, const char *path)
{
    text_close(g, t);
    char *tmp = out_tmp(g->arena, path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        error_file(path, "cannot open for writing: %s", strerror(errno));
    bool ok = fwrite(t->buf, 1, t->n, f) == t->n;
    if (fclose(f) != 0 || !ok || !out_commit(tmp, path)) {
        int err = errno;
        if (strcmp(tmp, path) != 0)
            remove(tmp);
        error_file(path, "write failed: %s", strerror(err));
    }
}

/* The model's part of the program: its arenas, constants, functions and
 * tables. */
static void emit_model_part(CG *cg, const char *hash, const char *weights)
{
    emit_devices(cg);
    emit_constants(cg);
    if (cg->o->infer) {
        emit_forward_only(cg);
        emit_eval(cg);
        emit_infer_model(cg, hash, weights);
    } else {
        emit_actions(cg);
        emit_step(cg);
        emit_prof_table(cg);
        emit_op_table(cg);
        emit_eval(cg);
        if (dnnl_kernels(cg))
            emit_dnnl_table(cg);
        emit_model(cg, hash, weights);
    }
}

static CG cg_start(Graph *g, const Options *o, const Plan *plan, const Fusion *fu)
{
    int ncuda = cuda_devices(plan);
    CG cg = {.g = g, .o = o, .plan = plan, .cuda = ncuda > 0,
             .mixed = ncuda > 0 && ncuda < plan->ds->n, .fu = fu,
             .dnnl_gemm = ncuda < plan->ds->n && !o->infer && gemm_onednn(g)};
    cg.profiled = arena_array(g->arena, g->nnodes + 1, sizeof(uint32_t));
    cg.staged_as = arena_array(g->arena, g->nvalues + 1, sizeof(const char *));
    cg.local_of = arena_array(g->arena, (size_t)plan->nbufs + 1, sizeof(int));
    for (int b = 0; b < plan->nbufs; b++)
        cg.local_of[b] = -1;
    cg.dnnl_node = arena_array(g->arena, g->nnodes + 1, sizeof(uint32_t));
    cg.dnnl_dev = arena_array(g->arena, g->nnodes + 1, sizeof(int));
    cg.dnnl_row = arena_array(g->arena, g->nnodes + 1, sizeof(int));
    cg.pool_node = arena_array(g->arena, g->nnodes + 1, sizeof(uint32_t));
    cg.pool_dev = arena_array(g->arena, g->nnodes + 1, sizeof(int));
    for (uint32_t i = 0; i < g->nnodes; i++)
        cg.dnnl_row[i] = -1;
    return cg;
}

int codegen_check(Graph *g, const Options *o, const Plan *plan, const Fusion *fu)
{
    CG cg = cg_start(g, o, plan, fu);
    cg.checking = true;
    cg.reported = arena_array(g->arena, g->nnodes + 1, sizeof(bool));
    Text *model = arena_alloc(g->arena, sizeof *model);
    cg.out = text_open(g, model);
    emit_model_part(&cg, "", "check.weights.safetensors");
    text_close(g, model);
    return cg.problems;
}

void codegen(Graph *g, const Options *o, const Plan *plan, const Fusion *fu)
{
    CG cg = cg_start(g, o, plan, fu);
    char hash[65];
    sha256_hex(g->source, g->source_size, hash);
    const char *weights = weights_path(g->arena, o->output);
    const char *slash = strrchr(weights, '/');
    /* the model first, to know what it uses of the runtime */
    Text *model = arena_alloc(g->arena, sizeof *model);
    cg.out = text_open(g, model);
    emit_model_part(&cg, hash, slash ? slash + 1 : weights);
    text_close(g, model);
    Text *text = arena_alloc(g->arena, sizeof *text);
    cg.out = text_open(g, text);
    emit_header(&cg, hash);
    emit_declarations(&cg, model);
    emit(&cg, "\n/* ==== the model ==== */\n\n");
    fwrite(model->buf, 1, model->n, cg.out);
    emit_runtime(&cg);
    if (cg.cuda)
        emit_kernel_source(&cg);
    emit_main(&cg);
    text_save(g, text, o->output);
    struct stat st;   /* -o /dev/null or a pipe: no weights file beside it */
    if (stat(o->output, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
        write_weights(&cg, weights);
}
