/* codegen.c — writes the standalone trainer for CPU devices: train.c (the
 * runtime pasted in, then the model: its buffers, stage0_forward,
 * stage0_backward, accumulate, update) and the initial weights as
 * safetensors under the ONNX initializer names.
 *
 * Every buffer lives at a static offset in one arena. Every kernel call is
 * preceded by a comment naming the ONNX node it implements; names from the
 * model reach the C file only inside comments (escaped) and string literals
 * (escaped).
 */
#include "mpcc.h"
#include "mprt.h"

#include <errno.h>
#include <string.h>

typedef struct EmbeddedFile {
    const char *name, *text;
    size_t size;
} EmbeddedFile;
extern const EmbeddedFile embedded_files[];

typedef struct CG {
    Graph *g;
    const Options *o;
    FILE *out;
    size_t *offset;       /* per value: byte offset in the arena, SIZE_MAX if none */
    size_t *acc;          /* per trainable param: gradient accumulator (M > 1) */
    size_t arena;
} CG;

static void emit(CG *cg, const char *fmt, ...) FMT(2, 3);
static void emit(CG *cg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(cg->out, fmt, ap);
    va_end(ap);
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

/* ---- the memory plan: one arena, static offsets, no reuse yet ---- */

static size_t place(CG *cg, size_t bytes)
{
    size_t off = cg->arena;
    cg->arena += (bytes + 63) & ~(size_t)63;
    return off;
}

static size_t value_bytes(const Value *v)
{
    return (size_t)shape_numel(&v->shape) * dtype_size(v->dtype);
}

static bool runtime_value(const Value *v)
{
    return v->kind == VK_PARAM || v->kind == VK_STATE || v->kind == VK_INPUT ||
           v->kind == VK_ACTIVATION || (v->kind == VK_CONST && v->nuses > 0);
}

/* BatchNormalization writes its running statistics back into the
 * initializers it read them from. */
static void alias_running_stats(CG *cg)
{
    Graph *g = cg->g;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->op != OP_BATCH_NORM)
            continue;
        for (uint32_t k = 1; k < 3 && k < n->nout; k++)
            if (n->out[k] != NONE)
                cg->offset[n->out[k]] = cg->offset[n->in[k + 2]];
    }
}

static void plan_memory(CG *cg)
{
    Graph *g = cg->g;
    cg->offset = arena_array(g->arena, g->nvalues, sizeof(size_t));
    cg->acc = arena_array(g->arena, g->nvalues, sizeof(size_t));
    for (uint32_t v = 0; v < g->nvalues; v++)
        cg->offset[v] = cg->acc[v] = SIZE_MAX;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind == VK_PARAM || val->kind == VK_STATE || val->kind == VK_INPUT)
            cg->offset[v] = place(cg, value_bytes(val));
    }
    alias_running_stats(cg);
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (cg->offset[v] == SIZE_MAX && runtime_value(&g->values[v]))
            cg->offset[v] = place(cg, value_bytes(&g->values[v]));
    if (cg->o->train.microbatches > 1)
        for (uint32_t v = 0; v < g->nvalues; v++)
            if (g->values[v].trainable)
                cg->acc[v] = place(cg, value_bytes(&g->values[v]));
}

/* ---- names in the generated file ---- */

static const char *ctype(DType t)
{
    switch (t) {
    case DT_F32: return "float";
    case DT_I64: return "int64_t";
    case DT_I32: return "int32_t";
    case DT_BOOL: case DT_U8: return "uint8_t";
    default: return NULL;
    }
}

/* A buffer expression: ((float *)(mprt_arena + 4096)) */
static const char *buf(CG *cg, uint32_t v)
{
    const Value *val = &cg->g->values[v];
    MPCC_ASSERT(cg->offset[v] != SIZE_MAX);
    const char *t = ctype(val->dtype);
    if (!t) {
        Loc loc = value_loc(cg->g, v);
        error_at(&loc, "element type %s is not supported by the CPU trainer yet",
                 dtype_name(val->dtype));
    }
    return arena_printf(cg->g->arena, "((%s *)(mprt_arena + %zu))", t, cg->offset[v]);
}

static long numel(CG *cg, uint32_t v)
{
    return (long)shape_numel(&cg->g->values[v].shape);
}

static const Shape *shape_of(CG *cg, uint32_t v)
{
    return &cg->g->values[v].shape;
}

/* ---- kernels, one call per node ---- */

static _Noreturn void unsupported(CG *cg, const Node *n, const char *what)
{
    (void)cg;
    error_at(&n->loc, "the CPU trainer does not support %s yet", what);
}

static void emit_gemm(CG *cg, const Node *n)
{
    const Shape *a = shape_of(cg, n->in[0]), *y = shape_of(cg, n->out[0]);
    int ta = (int)attr_int(n, "transA", 0), tb = (int)attr_int(n, "transB", 0);
    long K = ta ? a->d[0] : a->d[1];
    int has_c = n->nin > 2 && n->in[2] != NONE;
    long cr = 1, cc = 1;
    if (has_c) {
        const Shape *c = shape_of(cg, n->in[2]);
        cr = c->rank == 2 ? c->d[0] : 1;
        cc = c->rank >= 1 ? c->d[c->rank - 1] : 1;
    }
    emit(cg, "    mprt_gemm(%d, %d, %lld, %lld, %ld, (float)%.9g, %s, %s, (float)%.9g, %s, %ld, %ld, %s);\n",
         ta, tb, (long long)y->d[0], (long long)y->d[1], K, attr_float(n, "alpha", 1.0),
         buf(cg, n->in[0]), buf(cg, n->in[1]), attr_float(n, "beta", 1.0),
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

static void emit_longs(CG *cg, const long *v, int n)
{
    emit(cg, "(const long[]){");
    for (int i = 0; i < n; i++)
        emit(cg, "%s%ld", i ? ", " : "", v[i]);
    emit(cg, n ? "}" : "0}");
}

static void emit_binary(CG *cg, const Node *n)
{
    static const char *ops[] = {[OP_ADD] = "MPRT_ADD", [OP_SUB] = "MPRT_SUB",
                                [OP_MUL] = "MPRT_MUL", [OP_DIV] = "MPRT_DIV"};
    const Shape *y = shape_of(cg, n->out[0]);
    long shape[MAX_RANK], sa[MAX_RANK], sb[MAX_RANK];
    for (int d = 0; d < y->rank; d++)
        shape[d] = (long)y->d[d];
    bcast_strides(y, shape_of(cg, n->in[0]), sa);
    bcast_strides(y, shape_of(cg, n->in[1]), sb);
    emit(cg, "    mprt_binary(%s, %d, ", ops[n->op], y->rank);
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
    emit(cg, "    mprt_sum_to(%d, ", x->rank);
    emit_longs(cg, shape, x->rank);
    emit(cg, ", (const int[]){");
    for (int d = 0; d < x->rank; d++)
        emit(cg, "%s%d", d ? ", " : "", keep[d]);
    emit(cg, "%s}, %s, (float)%.9g, %ld, %s);\n", x->rank ? "" : "0", buf(cg, n->in[0]),
         attr_float(n, "alpha", 1.0), numel(cg, n->out[0]), buf(cg, n->out[0]));
}

static void emit_sum(CG *cg, const Node *n)
{
    emit(cg, "    mprt_sum(%ld, %u, (const float *const[]){", numel(cg, n->out[0]), n->nin);
    for (uint32_t k = 0; k < n->nin; k++)
        emit(cg, "%s%s", k ? ", " : "", buf(cg, n->in[k]));
    emit(cg, "}, %s);\n", buf(cg, n->out[0]));
}

static void loss_dims(CG *cg, uint32_t scores, long *N, long *C, long *D)
{
    const Shape *s = shape_of(cg, scores);
    *N = (long)s->d[0];
    *C = (long)s->d[1];
    *D = 1;
    for (int i = 2; i < s->rank; i++)
        *D *= (long)s->d[i];
}

static void emit_sce(CG *cg, const Node *n, bool grad)
{
    long N, C, D;
    loss_dims(cg, n->in[grad ? 1 : 0], &N, &C, &D);
    if (n->nin > (grad ? 3u : 2u))
        unsupported(cg, n, "class weights in SoftmaxCrossEntropyLoss");
    if (strcmp(attr_str(n, "reduction", "mean"), "mean") != 0)
        unsupported(cg, n, "a reduction other than mean");
    long long ignore = (long long)attr_int(n, "ignore_index", -100);
    if (!grad)
        emit(cg, "    mprt_sce(%ld, %ld, %ld, %s, %s, %lldLL, %s, %s);\n", N, C, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), ignore, buf(cg, n->out[0]),
             buf(cg, n->out[1]));
    else
        emit(cg, "    mprt_sce_grad(%ld, %ld, %ld, %s, %s, %s, %lldLL, %s);\n", N, C, D,
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]), ignore,
             buf(cg, n->out[0]));
}

/* Strides, dilations and pads (begins, then ends) of a 2-D window op. */
static void window_2d(const Node *n, int64_t st[2], int64_t dl[2], int64_t pd[4])
{
    uint32_t c;
    const int64_t *v;
    st[0] = st[1] = dl[0] = dl[1] = 1;
    pd[0] = pd[1] = pd[2] = pd[3] = 0;
    if ((v = attr_ints(n, "strides", &c)) && c == 2)
        st[0] = v[0], st[1] = v[1];
    if ((v = attr_ints(n, "dilations", &c)) && c == 2)
        dl[0] = v[0], dl[1] = v[1];
    if ((v = attr_ints(n, "pads", &c)) && c == 4)
        memcpy(pd, v, 4 * sizeof *pd);
}

/* Conv and its gradients: 2-D only for now. */
static void conv_params(CG *cg, const Node *n, uint32_t x, uint32_t w, uint32_t y)
{
    const Shape *xs = shape_of(cg, x), *ws = shape_of(cg, w), *ys = shape_of(cg, y);
    if (xs->rank != 4)
        unsupported(cg, n, "convolutions that are not 2-D");
    int64_t st[2], dl[2], pd[4];
    window_2d(n, st, dl, pd);
    const char *ap = attr_str(n, "auto_pad", "NOTSET");
    if (strncmp(ap, "SAME", 4) == 0)
        for (int i = 0; i < 2; i++) {
            int64_t total = (ys->d[2 + i] - 1) * st[i] + (ws->d[2 + i] - 1) * dl[i] + 1 -
                            xs->d[2 + i];
            total = total < 0 ? 0 : total;
            pd[i] = strcmp(ap, "SAME_LOWER") == 0 ? (total + 1) / 2 : total / 2;
        }
    emit(cg, "&(MprtConv){%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
         "%lld, %lld, %lld, %lld, %lld, %lld}",
         (long long)xs->d[0], (long long)xs->d[1], (long long)xs->d[2], (long long)xs->d[3],
         (long long)ws->d[0], (long long)ws->d[2], (long long)ws->d[3], (long long)ys->d[2],
         (long long)ys->d[3], (long long)attr_int(n, "group", 1), (long long)st[0],
         (long long)st[1], (long long)dl[0], (long long)dl[1], (long long)pd[0],
         (long long)pd[1]);
}

static void emit_conv(CG *cg, const Node *n)
{
    switch (n->op) {
    case OP_CONV:
        emit(cg, "    mprt_conv(");
        conv_params(cg, n, n->in[0], n->in[1], n->out[0]);
        emit(cg, ", %s, %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]),
             n->nin > 2 && n->in[2] != NONE ? buf(cg, n->in[2]) : "NULL", buf(cg, n->out[0]));
        break;
    case OP_CONV_GRAD_X:
        emit(cg, "    mprt_conv_grad_x(");
        conv_params(cg, n, n->out[0], n->in[1], n->in[0]);
        emit(cg, ", %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
        break;
    default:
        emit(cg, "    mprt_conv_grad_w(");
        conv_params(cg, n, n->in[1], n->out[0], n->in[0]);
        emit(cg, ", %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
        break;
    }
}

static void channel_dims(CG *cg, uint32_t x, long *N, long *C, long *P)
{
    const Shape *s = shape_of(cg, x);
    *N = (long)s->d[0];
    *C = (long)s->d[1];
    *P = 1;
    for (int i = 2; i < s->rank; i++)
        *P *= (long)s->d[i];
}

static void emit_batch_norm(CG *cg, const Node *n)
{
    long N, C, P;
    channel_dims(cg, n->in[0], &N, &C, &P);
    bool training = ir_attr(n, "training_mode") ? attr_int(n, "training_mode", 0) != 0
                                                : cg->g->opset < 14 && n->nout > 1;
    if (!training)
        unsupported(cg, n, "BatchNormalization in inference mode");
    emit(cg, "    mprt_bn_train(%ld, %ld, %ld, %s, %s, %s, %s, %s, (float)%.9g, (float)%.9g, %s);\n", N, C,
         P, buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]), buf(cg, n->in[3]),
         buf(cg, n->in[4]), attr_float(n, "momentum", 0.9), attr_float(n, "epsilon", 1e-5),
         buf(cg, n->out[0]));
}

static void pool_params(CG *cg, const Node *n, uint32_t x, uint32_t y)
{
    const Shape *xs = shape_of(cg, x), *ys = shape_of(cg, y);
    if (xs->rank != 4)
        unsupported(cg, n, "pooling that is not 2-D");
    uint32_t c;
    const int64_t *k = attr_ints(n, "kernel_shape", &c);
    int64_t st[2], dl[2], pd[4];
    window_2d(n, st, dl, pd);
    if (strcmp(attr_str(n, "auto_pad", "NOTSET"), "NOTSET") != 0)
        unsupported(cg, n, "auto_pad in pooling");
    emit(cg, "&(MprtPool){%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
         "%lld, %lld, %lld}", (long long)xs->d[0], (long long)xs->d[1], (long long)xs->d[2],
         (long long)xs->d[3], (long long)ys->d[2], (long long)ys->d[3], (long long)k[0],
         (long long)k[1], (long long)st[0], (long long)st[1], (long long)dl[0],
         (long long)dl[1], (long long)pd[0], (long long)pd[1]);
}

static void emit_pool(CG *cg, const Node *n)
{
    if (n->op == OP_MAX_POOL) {
        if (n->nout > 1 && n->out[1] != NONE && cg->g->values[n->out[1]].nuses)
            unsupported(cg, n, "MaxPool's indices output");
        emit(cg, "    mprt_maxpool(");
        pool_params(cg, n, n->in[0], n->out[0]);
        emit(cg, ", %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->out[0]));
    } else {
        emit(cg, "    mprt_maxpool_grad(");
        pool_params(cg, n, n->in[1], n->in[0]);
        emit(cg, ", %s, %s, %s);\n", buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
    }
}

static void emit_node(CG *cg, const Node *n)
{
    emit(cg, "    /* node '%s' (%s) */\n", comment_text(cg, n->name), comment_text(cg, n->op_type));
    switch (n->op) {
    case OP_GEMM: emit_gemm(cg, n); break;
    case OP_RELU:
        emit(cg, "    mprt_relu(%ld, %s, %s);\n", numel(cg, n->out[0]), buf(cg, n->in[0]),
             buf(cg, n->out[0]));
        break;
    case OP_RELU_GRAD:
        emit(cg, "    mprt_relu_grad(%ld, %s, %s, %s);\n", numel(cg, n->out[0]),
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->out[0]));
        break;
    case OP_RESHAPE: case OP_FLATTEN: case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_IDENTITY:
        emit(cg, "    mprt_copy(%ld, %s, %s);\n", numel(cg, n->out[0]), buf(cg, n->in[0]),
             buf(cg, n->out[0]));
        break;
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: emit_binary(cg, n); break;
    case OP_SUM: emit_sum(cg, n); break;
    case OP_SUM_TO: emit_sum_to(cg, n); break;
    case OP_SOFTMAX_CE: emit_sce(cg, n, false); break;
    case OP_SCE_GRAD: emit_sce(cg, n, true); break;
    case OP_MSE_LOSS:
        emit(cg, "    mprt_mse(%ld, %s, %s, %s);\n", numel(cg, n->in[0]), buf(cg, n->in[0]),
             buf(cg, n->in[1]), buf(cg, n->out[0]));
        break;
    case OP_MSE_GRAD:
        emit(cg, "    mprt_mse_grad(%ld, %s, %s, %s, %s);\n", numel(cg, n->in[1]),
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]), buf(cg, n->out[0]));
        break;
    case OP_CONV: case OP_CONV_GRAD_X: case OP_CONV_GRAD_W: emit_conv(cg, n); break;
    case OP_CONV_GRAD_B: {
        long N, C, P;
        channel_dims(cg, n->in[0], &N, &C, &P);
        emit(cg, "    mprt_channel_sum(%ld, %ld, %ld, %s, %s);\n", N, C, P, buf(cg, n->in[0]),
             buf(cg, n->out[0]));
        break;
    }
    case OP_BATCH_NORM: emit_batch_norm(cg, n); break;
    case OP_BN_GRAD: {
        long N, C, P;
        channel_dims(cg, n->in[1], &N, &C, &P);
        emit(cg, "    mprt_bn_grad(%ld, %ld, %ld, %s, %s, %s, (float)%.9g, %s, %s, %s);\n", N, C, P,
             buf(cg, n->in[0]), buf(cg, n->in[1]), buf(cg, n->in[2]),
             attr_float(n, "epsilon", 1e-5), buf(cg, n->out[0]), buf(cg, n->out[1]),
             buf(cg, n->out[2]));
        break;
    }
    case OP_MAX_POOL: case OP_MAX_POOL_GRAD: emit_pool(cg, n); break;
    case OP_GLOBAL_AVG_POOL: case OP_GAP_GRAD: {
        long N, C, P;
        channel_dims(cg, n->op == OP_GAP_GRAD ? n->in[1] : n->in[0], &N, &C, &P);
        if (n->op == OP_GLOBAL_AVG_POOL)
            emit(cg, "    mprt_gap(%ld, %ld, %s, %s);\n", N * C, P, buf(cg, n->in[0]),
                 buf(cg, n->out[0]));
        else
            emit(cg, "    mprt_gap_grad(%ld, %ld, %s, %s);\n", N * C, P, buf(cg, n->in[0]),
                 buf(cg, n->out[0]));
        break;
    }
    default:
        unsupported(cg, n, arena_printf(cg->g->arena, "%s", n->op_type));
    }
}

/* ---- the program ---- */

static void emit_header(CG *cg, const char *hash)
{
    emit(cg, "/* Generated by mpcc %s. Do not edit: regenerate with the command below.\n"
         " *\n *   %s\n *\n", MPCC_VERSION, comment_text(cg, cg->o->cmdline));
    emit(cg, " * model:  %s (sha256 %s)\n", comment_text(cg, cg->g->file), hash);
    emit(cg, " * device: cpu:0, 1 stage; batch %lld in %d micro-batch(es)\n",
         (long long)cg->o->batch * cg->o->train.microbatches, cg->o->train.microbatches);
    emit(cg, " * build:  cc -O2 %s -o train -lopenblas -lm\n */\n",
         comment_text(cg, cg->o->output));
    emit(cg, "#define _DEFAULT_SOURCE\n#define _POSIX_C_SOURCE 200809L\n");
}

static void emit_runtime(CG *cg)
{
    static const char *order[] = {"mprt_h", "mprt_c", "npy_c", "safetensors_c", "cpu_c",
                                  "train_c"};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        for (const EmbeddedFile *f = embedded_files; f->name; f++) {
            if (strcmp(f->name, order[i]) != 0)
                continue;
            emit(cg, "\n/* ---- runtime/%s ---- */\n", f->name);
            const char *p = f->text;
            while (*p) {
                const char *nl = strchr(p, '\n');
                size_t len = nl ? (size_t)(nl - p) : strlen(p);
                if (!(len == 17 && strncmp(p, "#include \"mprt.h\"", 17) == 0))
                    fprintf(cg->out, "%.*s\n", (int)len, p);
                p += len + (nl ? 1 : 0);
            }
        }
}

static void emit_phase(CG *cg, int phase, const char *fn)
{
    emit(cg, "\n/* --- stage 0 on cpu:0: %s --- */\nstatic void %s(int mb)\n{\n    (void)mb;\n",
         phase == PH_FORWARD ? "forward" : "backward", fn);
    for (uint32_t i = 0; i < cg->g->norder; i++) {
        const Node *n = &cg->g->nodes[cg->g->order[i]];
        if (n->phase == phase)
            emit_node(cg, n);
    }
    emit(cg, "}\n");
}

static void emit_constants(CG *cg)
{
    emit(cg, "\nstatic void zero_state(void)\n{\n");
    for (uint32_t v = 0; v < cg->g->nvalues; v++) {
        const Value *val = &cg->g->values[v];
        if (val->kind == VK_STATE)
            emit(cg, "    memset(mprt_arena + %zu, 0, %zu);\n", cg->offset[v], value_bytes(val));
        if (val->kind != VK_CONST || cg->offset[v] == SIZE_MAX)
            continue;
        if (!ctype(val->dtype) || value_bytes(val) > (1 << 20))
            unsupported(cg, &cg->g->nodes[0], "large or non-numeric constants");
        emit(cg, "    /* const '%s' */\n    memcpy(mprt_arena + %zu, (const %s[]){",
             comment_text(cg, val->name), cg->offset[v], ctype(val->dtype));
        for (int64_t i = 0; i < shape_numel(&val->shape); i++) {
            if (val->dtype == DT_F32)
                emit(cg, "%s%af", i ? ", " : "", tensor_f64(val->data, i));
            else
                emit(cg, "%s%lld", i ? ", " : "", (long long)tensor_i64(val->data, i));
        }
        emit(cg, "}, %zu);\n", value_bytes(val));
    }
    emit(cg, "}\n");
}

static void emit_accumulate(CG *cg)
{
    emit(cg, "\n/* Gradients summed over the micro-batches of a step. */\n"
         "static void accumulate(int mb)\n{\n    (void)mb;\n");
    for (uint32_t v = 0; v < cg->g->nvalues; v++) {
        const Value *val = &cg->g->values[v];
        if (!val->trainable || cg->acc[v] == SIZE_MAX)
            continue;
        emit(cg, "    for (long i = 0; i < %ld; i++)  /* %s */\n"
             "        ((float *)(mprt_arena + %zu))[i] = (mb ? ((float *)(mprt_arena + %zu))[i] "
             ": 0.0f) + %s[i];\n", numel(cg, v), comment_text(cg, val->name), cg->acc[v],
             cg->acc[v], buf(cg, val->grad));
    }
    emit(cg, "}\n");
}

static const char *grad_buf(CG *cg, uint32_t p)
{
    if (cg->acc[p] != SIZE_MAX)
        return arena_printf(cg->g->arena, "((float *)(mprt_arena + %zu))", cg->acc[p]);
    return buf(cg, cg->g->values[p].grad);
}

static void emit_update(CG *cg)
{
    const TrainOptions *t = &cg->o->train;
    emit(cg, "\n/* --- optimizer: %s --- */\nstatic void update(long step, float lr)\n{\n"
         "    float scale = 1.0f / %d;\n    (void)step;\n",
         t->optim == OPTIM_ADAMW ? "AdamW" : "SGD", t->microbatches);
    if (t->clip_norm > 0) {
        int k = 0;
        emit(cg, "    double norm;\n    scale *= mprt_clip_scale(");
        for (uint32_t i = 0; i < cg->g->norder; i++)
            k += cg->g->nodes[cg->g->order[i]].phase == PH_UPDATE;
        emit(cg, "%d, (const float *const[]){", k);
        for (uint32_t i = 0, j = 0; i < cg->g->norder; i++) {
            const Node *n = &cg->g->nodes[cg->g->order[i]];
            if (n->phase == PH_UPDATE)
                emit(cg, "%s%s", j++ ? ", " : "", grad_buf(cg, n->in[0]));
        }
        emit(cg, "}, (const long[]){");
        for (uint32_t i = 0, j = 0; i < cg->g->norder; i++) {
            const Node *n = &cg->g->nodes[cg->g->order[i]];
            if (n->phase == PH_UPDATE)
                emit(cg, "%s%ld", j++ ? ", " : "", numel(cg, n->in[0]));
        }
        emit(cg, "}, scale, (float)%.9g, &norm);\n", t->clip_norm);
    }
    for (uint32_t i = 0; i < cg->g->norder; i++) {
        const Node *n = &cg->g->nodes[cg->g->order[i]];
        if (n->phase != PH_UPDATE)
            continue;
        emit(cg, "    /* %s */\n", comment_text(cg, n->name));
        if (n->op == OP_SGD)
            emit(cg, "    mprt_sgd(%ld, %s, %s, %s, scale, lr, (float)%.9g, (float)%.9g, %d, 0);\n",
                 numel(cg, n->in[0]), buf(cg, n->in[0]), grad_buf(cg, n->in[0]),
                 n->nin > 2 ? buf(cg, n->in[2]) : "NULL", attr_float(n, "momentum", 0),
                 attr_float(n, "weight_decay", 0), (int)attr_int(n, "nesterov", 0));
        else
            emit(cg, "    mprt_adamw(%ld, %s, %s, %s, %s, scale, lr, (float)%.9g, (float)%.9g, (float)%.9g, "
                 "(float)%.9g, step);\n", numel(cg, n->in[0]), buf(cg, n->in[0]),
                 grad_buf(cg, n->in[0]), buf(cg, n->in[2]), buf(cg, n->in[3]),
                 attr_float(n, "beta1", 0.9), attr_float(n, "beta2", 0.999),
                 attr_float(n, "eps", 1e-8), attr_float(n, "weight_decay", 0));
    }
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

static void emit_buffer(CG *cg, uint32_t v, const char *kind)
{
    const Value *val = &cg->g->values[v];
    emit(cg, "    {%s, %s, MPRT_%s, %d, {", c_string(cg, val->name), kind,
         val->dtype == DT_F32 ? "F32" : val->dtype == DT_I64 ? "I64" : "U8", val->shape.rank);
    for (int i = 0; i < val->shape.rank; i++)
        emit(cg, "%s%lld", i ? ", " : "", (long long)val->shape.d[i]);
    emit(cg, "%s}, %zu, %zu},\n", val->shape.rank ? "" : "0", cg->offset[v], value_bytes(val));
}

static void emit_model(CG *cg, const char *hash, const char *weights)
{
    Graph *g = cg->g;
    emit(cg, "\nstatic const MprtBuffer buffers[] = {\n");
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind == VK_PARAM && cg->offset[v] != SIZE_MAX)
            emit_buffer(cg, v, "MPRT_PARAM");
        else if (val->kind == VK_STATE)
            emit_buffer(cg, v, "MPRT_STATE");
    }
    for (uint32_t i = 0; i < g->ninputs; i++)
        emit_buffer(cg, g->inputs[i], g->inputs[i] == g->labels ? "MPRT_LABELS" : "MPRT_INPUT");
    emit(cg, "};\n\nstatic const MprtModel model = {\n"
         "    .program = \"train\", .mpcc_version = \"%s\",\n"
         "    .model_file = %s, .model_hash = \"%s\",\n    .weights_file = %s,\n"
         "    .batch = %lld, .microbatches = %d, .lr = %.9g,\n"
         "    .arena_bytes = %zu, .loss_offset = %zu,\n"
         "    .buffers = buffers, .nbuffers = (int)(sizeof buffers / sizeof buffers[0]),\n"
         "    .zero_state = zero_state, .forward = stage0_forward,\n"
         "    .backward = stage0_backward, .accumulate = accumulate, .update = update,\n};\n\n"
         "int main(int argc, char **argv)\n{\n    return mprt_train_main(&model, argc, argv);\n}\n",
         MPCC_VERSION, c_string(cg, g->file), hash, c_string(cg, weights),
         (long long)cg->o->batch * cg->o->train.microbatches, cg->o->train.microbatches,
         cg->o->train.lr, cg->arena,
         cg->offset[g->loss]);
}

/* The initial weights: every floating-point initializer, by ONNX name. */
static void write_weights(CG *cg, const char *path)
{
    Graph *g = cg->g;
    MprtStEntry *e = arena_array(g->arena, g->nvalues, sizeof *e);
    int n = 0;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind != VK_PARAM || cg->offset[v] == SIZE_MAX)
            continue;
        if (val->dtype != DT_F32)
            unsupported(cg, &g->nodes[0], "initializers that are not float32");
        e[n++] = (MprtStEntry){val->name, MPRT_F32, val->shape.rank, val->shape.d,
                               val->data->data, val->data->nbytes};
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

void codegen_cpu(Graph *g, const Options *o)
{
    CG cg = {.g = g, .o = o};
    plan_memory(&cg);
    char hash[65];
    sha256_hex(g->source, g->source_size, hash);
    const char *weights = weights_path(g->arena, o->output);
    const char *slash = strrchr(weights, '/');
    char *tmp = arena_printf(g->arena, "%s.tmp", o->output);
    cg.out = fopen(tmp, "w");
    if (!cg.out)
        error_file(o->output, "cannot open for writing: %s", strerror(errno));
    emit_header(&cg, hash);
    emit_runtime(&cg);
    emit(&cg, "\n/* ==== the model ==== */\n");
    emit_constants(&cg);
    emit_phase(&cg, PH_FORWARD, "stage0_forward");
    emit_phase(&cg, PH_BACKWARD, "stage0_backward");
    emit_accumulate(&cg);
    emit_update(&cg);
    emit_model(&cg, hash, slash ? slash + 1 : weights);
    if (fclose(cg.out) != 0 || rename(tmp, o->output) != 0)
        error_file(o->output, "write failed: %s", strerror(errno));
    write_weights(&cg, weights);
}
