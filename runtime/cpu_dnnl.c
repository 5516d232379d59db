/* cpu_dnnl.c — convolutions on CPU devices through oneDNN (libdnnl), in
 * place of cpu.c's im2col + GEMM where mpcc chose it (--cpu-kernels): the
 * forward, the data gradient and the filter gradient, 1-D to 3-D, with
 * groups, strides, dilations and pads; and max pooling's forward (at the
 * end). Pasted only into programs that use it (their build line then has
 * -ldnnl).
 *
 * The model's tensors are in their plain layouts (NCDHW, filters
 * (G)OIDHW), except the activations mpcc keeps in oneDNN's blocked layout
 * between the operations that can take it (compiler/parallel/layout.c):
 * nChw16c on machines with AVX-512, else nChw8c (mprt_dnnl_block), the
 * layout the convolutions run in there; the blocked twins of cpu.c's batch
 * normalisation and global average pooling at the end give cpu.c's bits.
 * At start-up, mprt_dnnl_start makes one primitive per
 * convolution of the table the model hands it, letting oneDNN pick the
 * layouts it runs fastest in; an operand whose picked layout is not the
 * plain one is reordered into the device's scratch before the call (a
 * result back after it). That scratch also holds oneDNN's own scratchpad
 * (user mode): the call allocates nothing. Each device's scratch is raised
 * to what its convolutions need before the arenas are allocated.
 *
 * Threads: oneDNN runs on OpenMP; each device's thread gives it the
 * device's thread count (pool.c's mprt_dev_threads: OPENBLAS_NUM_THREADS,
 * else the device's share of the cores), the count its primitives were
 * made for (pool.c's mprt_omp_threads: the trainer is built with
 * MPRT_GOMP). At a fixed count the results do not depend on the call's
 * order or on other devices. */
#include "mprt.h"
#include "kernel.h"

#include <cblas.h>
#include <dnnl.h>
#include <dnnl_debug.h>

/* An operand of a primitive: the model's plain layout, the one the
 * primitive runs in, and the reorder between them when they differ (into
 * the primitive's layout for an input, out of it for the result), its copy
 * at `at` bytes into the scratch. */
typedef struct MprtDnnlArg {
    int arg;   /* DNNL_ARG_SRC ... */
    dnnl_memory_t plain, best;
    dnnl_primitive_t reorder;
    size_t at;
} MprtDnnlArg;

/* One convolution: its primitive, its two inputs and its result, and its
 * scratchpad at `pad_at` bytes into the device's scratch. */
typedef struct MprtDnnlPrim {
    const MprtDnnlConv *spec;
    dnnl_primitive_t prim;
    MprtDnnlArg in[2], out;
    dnnl_memory_t bias, pad;
    size_t pad_at;
} MprtDnnlPrim;

static dnnl_engine_t mprt_dnnl_engine;
static int mprt_dnnl_block = 16;   /* the blocked layout's channels a block: 16 or 8 */
static dnnl_stream_t *mprt_dnnl_streams;   /* one per device */
static MprtDnnlPrim *mprt_dnnl_prims;   /* [replicas here * nconvs]: each copy of the
                                           replica its own memory objects (state.c) */
static int mprt_dnnl_nconvs, mprt_dnnl_npools;

static const char *const mprt_dnnl_kind[] = {"Conv", "ConvGradX", "ConvGradW"};

/* A failed oneDNN call: one line naming the node (of kind `kind`), and
 * what to try. */
static void mprt_dnnl_fail(dnnl_status_t s, const char *node, const char *kind, const char *what)
{
    if (s == dnnl_success)
        return;
    fprintf(stderr, "train: error: node '%s' (%s): oneDNN's %s failed (%s); compile with "
            "mpcc --cpu-kernels=builtin to run it without oneDNN\n", node, kind, what,
            dnnl_status2str(s));
    exit(1);
}

static void mprt_dnnl_check(dnnl_status_t s, const MprtDnnlConv *c, const char *what)
{
    mprt_dnnl_fail(s, c->node, mprt_dnnl_kind[c->kind], what);
}

/* The spatial dimensions a convolution has: 3 with a depth, 1 without a
 * height either, else 2 (as codegen.c's window ops). */
static int mprt_dnnl_spatial(const MprtConv *p)
{
    if (p->D > 1 || p->KD > 1 || p->OD > 1 || p->pd || p->sd > 1 || p->dd > 1)
        return 3;
    return p->H == 1 && p->KH == 1 && p->OH == 1 && !p->ph && p->sh == 1 && p->dh == 1 ? 1 : 2;
}

/* dims[0..1] then the last `sp` of depth, height, width. */
static int mprt_dnnl_dims(dnnl_dims_t d, int sp, long a, long b, long dd, long h, long w)
{
    long all[3] = {dd, h, w};
    d[0] = a, d[1] = b;
    for (int i = 0; i < sp; i++)
        d[2 + i] = all[3 - sp + i];
    return 2 + sp;
}

/* The model's descriptions of a convolution's input, output and filter:
 * plain, or blocked where c->blocked says (2-D and 1-D data only). */
static void mprt_dnnl_plain(const MprtDnnlConv *c, int sp, dnnl_memory_desc_t *x,
                            dnnl_memory_desc_t *y, dnnl_memory_desc_t *w)
{
    static const dnnl_format_tag_t data[] = {dnnl_ncw, dnnl_nchw, dnnl_ncdhw};
    static const dnnl_format_tag_t b16[] = {dnnl_nCw16c, dnnl_nChw16c, dnnl_nCdhw16c};
    static const dnnl_format_tag_t b8[] = {dnnl_nCw8c, dnnl_nChw8c, dnnl_nCdhw8c};
    const dnnl_format_tag_t *blocked = mprt_dnnl_block == 16 ? b16 : b8;
    static const dnnl_format_tag_t filt[] = {dnnl_oiw, dnnl_oihw, dnnl_oidhw};
    static const dnnl_format_tag_t gfilt[] = {dnnl_goiw, dnnl_goihw, dnnl_goidhw};
    const MprtConv *p = &c->p;
    dnnl_dims_t d;
    int n = mprt_dnnl_dims(d, sp, p->N, p->C, p->D, p->H, p->W);
    mprt_dnnl_check(dnnl_memory_desc_init_by_tag(x, n, d, dnnl_f32, (c->blocked & MPRT_DNNL_X ?
                                                                     blocked : data)[sp - 1]),
                    c, "input");
    n = mprt_dnnl_dims(d, sp, p->N, p->M, p->OD, p->OH, p->OW);
    mprt_dnnl_check(dnnl_memory_desc_init_by_tag(y, n, d, dnnl_f32, (c->blocked & MPRT_DNNL_Y ?
                                                                     blocked : data)[sp - 1]),
                    c, "output");
    n = mprt_dnnl_dims(d, sp, p->M / p->group, p->C / p->group, p->KD, p->KH, p->KW);
    if (p->group == 1) {
        mprt_dnnl_check(dnnl_memory_desc_init_by_tag(w, n, d, dnnl_f32, filt[sp - 1]), c, "filter");
        return;
    }
    for (int i = n; i > 0; i--)
        d[i] = d[i - 1];
    d[0] = p->group;
    mprt_dnnl_check(dnnl_memory_desc_init_by_tag(w, n + 1, d, dnnl_f32, gfilt[sp - 1]), c,
                    "filter");
}

/* A description as the plain one but in the layout oneDNN picks. */
static dnnl_memory_desc_t mprt_dnnl_any(const MprtDnnlConv *c, const dnnl_memory_desc_t *plain)
{
    dnnl_memory_desc_t a;
    mprt_dnnl_check(dnnl_memory_desc_init_by_tag(&a, plain->ndims, plain->dims, dnnl_f32,
                                                 dnnl_format_tag_any), c, "layout");
    return a;
}

/* The operation: its strides, dilations (oneDNN counts them from 0) and
 * pads; the trailing pads are what the output's size leaves, none where
 * the input's last positions are simply not reached. */
static void mprt_dnnl_window(const MprtConv *p, int sp, dnnl_dims_t st, dnnl_dims_t dl,
                             dnnl_dims_t pl, dnnl_dims_t pr)
{
    int s[3] = {p->sd, p->sh, p->sw}, di[3] = {p->dd, p->dh, p->dw}, pa[3] = {p->pd, p->ph, p->pw};
    int in[3] = {p->D, p->H, p->W}, out[3] = {p->OD, p->OH, p->OW}, k[3] = {p->KD, p->KH, p->KW};
    for (int i = 0; i < sp; i++) {
        int j = 3 - sp + i;
        long r = (long)(out[j] - 1) * s[j] + (long)(k[j] - 1) * di[j] + 1 - in[j] - pa[j];
        st[i] = s[j], dl[i] = di[j] - 1, pl[i] = pa[j];
        pr[i] = r < 0 && r > -s[j] ? 0 : r;
    }
}

/* The description of convolution c, with its layouts left to oneDNN. */
static dnnl_convolution_desc_t mprt_dnnl_desc(const MprtDnnlConv *c, int kind, int sp)
{
    dnnl_memory_desc_t x, y, w, b, ax, ay, aw;
    dnnl_dims_t st, dl, pl, pr, nb = {c->p.M};
    dnnl_convolution_desc_t d;
    mprt_dnnl_plain(c, sp, &x, &y, &w);
    ax = mprt_dnnl_any(c, &x), ay = mprt_dnnl_any(c, &y), aw = mprt_dnnl_any(c, &w);
    mprt_dnnl_window(&c->p, sp, st, dl, pl, pr);
    dnnl_status_t s;
    if (kind == MPRT_DNNL_FWD) {
        mprt_dnnl_check(dnnl_memory_desc_init_by_tag(&b, 1, nb, dnnl_f32, dnnl_a), c, "bias");
        s = dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_training,
                                                       dnnl_convolution_direct, &ax, &aw,
                                                       c->bias ? &b : NULL, &ay, st, dl, pl, pr);
    } else if (kind == MPRT_DNNL_BWD_DATA) {
        s = dnnl_dilated_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &ax,
                                                             &aw, &ay, st, dl, pl, pr);
    } else {
        s = dnnl_dilated_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct, &ax,
                                                                &aw, NULL, &ay, st, dl, pl, pr);
    }
    mprt_dnnl_check(s, c, "convolution description");
    return d;
}

static dnnl_primitive_t mprt_dnnl_make(const MprtDnnlConv *c, const_dnnl_primitive_desc_t pd)
{
    dnnl_primitive_t p;
    mprt_dnnl_check(dnnl_primitive_create(&p, pd), c, "primitive");
    return p;
}

static dnnl_memory_t mprt_dnnl_memory(const MprtDnnlConv *c, const dnnl_memory_desc_t *md)
{
    dnnl_memory_t m;
    mprt_dnnl_check(dnnl_memory_create(&m, md, mprt_dnnl_engine, DNNL_MEMORY_NONE), c, "memory");
    return m;
}

static size_t mprt_dnnl_round(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Operand `arg` of primitive pd, whose plain layout is `plain`: a reorder
 * and a copy in the scratch at *used when the primitive's layout differs. */
static MprtDnnlArg mprt_dnnl_arg(const MprtDnnlConv *c, const_dnnl_primitive_desc_t pd, int arg,
                                 const dnnl_memory_desc_t *plain, int input,
                                 const_dnnl_primitive_attr_t attr, size_t *used)
{
    const dnnl_memory_desc_t *best = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    MprtDnnlArg a = {arg, mprt_dnnl_memory(c, plain), NULL, NULL, 0};
    if (dnnl_memory_desc_equal(best, plain))
        return a;
    dnnl_primitive_desc_t rpd;
    const dnnl_memory_desc_t *from = input ? plain : best, *to = input ? best : plain;
    mprt_dnnl_check(dnnl_reorder_primitive_desc_create(&rpd, from, mprt_dnnl_engine, to,
                                                       mprt_dnnl_engine, attr), c, "reorder");
    a.best = mprt_dnnl_memory(c, best);
    a.reorder = mprt_dnnl_make(c, rpd);
    a.at = *used;
    *used += mprt_dnnl_round(dnnl_memory_desc_get_size(best));
    dnnl_primitive_desc_destroy(rpd);
    return a;
}

/* Convolution c's primitive and operands; returns the scratch it needs. */
static size_t mprt_dnnl_prepare(MprtDnnlPrim *q, const MprtDnnlConv *c,
                                const_dnnl_primitive_attr_t attr)
{
    static const int args[3][3] = {
        {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
        {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
        {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS},
    };
    int sp = mprt_dnnl_spatial(&c->p);
    dnnl_memory_desc_t x, y, w;
    mprt_dnnl_plain(c, sp, &x, &y, &w);
    const dnnl_memory_desc_t *plain[3][3] = {{&x, &w, &y}, {&y, &w, &x}, {&y, &x, &w}};
    dnnl_primitive_desc_t hint = NULL, pd;
    dnnl_convolution_desc_t d;
    if (c->kind != MPRT_DNNL_FWD) {   /* backward primitives need the forward's */
        d = mprt_dnnl_desc(c, MPRT_DNNL_FWD, sp);
        mprt_dnnl_check(dnnl_primitive_desc_create(&hint, &d, attr, mprt_dnnl_engine, NULL), c,
                        "forward description");
    }
    d = mprt_dnnl_desc(c, c->kind, sp);
    mprt_dnnl_check(dnnl_primitive_desc_create(&pd, &d, attr, mprt_dnnl_engine, hint), c,
                    "primitive description");
    size_t used = 0;
    *q = (MprtDnnlPrim){.spec = c};
    for (int k = 0; k < 2; k++)
        q->in[k] = mprt_dnnl_arg(c, pd, args[c->kind][k], plain[c->kind][k], 1, attr, &used);
    q->out = mprt_dnnl_arg(c, pd, args[c->kind][2], plain[c->kind][2], 0, attr, &used);
    if (c->bias)
        q->bias = mprt_dnnl_memory(c, dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md,
                                                                    DNNL_ARG_BIAS));
    const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    q->pad = mprt_dnnl_memory(c, pad);
    q->pad_at = used;
    used += mprt_dnnl_round(dnnl_memory_desc_get_size(pad));
    q->prim = mprt_dnnl_make(c, pd);
    dnnl_primitive_desc_destroy(pd);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return used;
}

static void mprt_dnnl_pools_start(const MprtDnnlPool *pools, int n, size_t *scratch);

/* Before the arenas: the primitives of the model's n convolutions and
 * npools max poolings (on ndev devices), and scratch[d] raised to what
 * device d's need. */
MPRT_KERNEL void mprt_dnnl_start(const MprtDnnlConv *convs, int n, const MprtDnnlPool *pools,
                                 int npools, int ndev, size_t *scratch)
{
    const char *first = n ? convs[0].node : pools[0].node, *kind = n ? "Conv" : "MaxPool";
    int copies = mprt_replicas_here;
    mprt_dnnl_nconvs = n;
    mprt_dnnl_prims = calloc((size_t)n * (size_t)copies + 1, sizeof *mprt_dnnl_prims);
    ndev *= copies;   /* each copy's devices their own streams */
    mprt_dnnl_streams = calloc((size_t)ndev, sizeof *mprt_dnnl_streams);
    if (!mprt_dnnl_prims || !mprt_dnnl_streams) {
        fprintf(stderr, "train: error: out of memory\n");
        exit(1);
    }
    mprt_dnnl_fail(dnnl_engine_create(&mprt_dnnl_engine, dnnl_cpu, 0), first, kind, "engine");
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    mprt_dnnl_block = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core ? 16 : 8;
    dnnl_primitive_attr_t attr;
    mprt_dnnl_fail(dnnl_primitive_attr_create(&attr), first, kind, "attributes");
    mprt_dnnl_fail(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
                   first, kind, "scratchpad mode");
    for (int d = 0; d < ndev; d++)
        mprt_dnnl_fail(dnnl_stream_create(&mprt_dnnl_streams[d], mprt_dnnl_engine,
                                          dnnl_stream_default_flags), first, kind, "stream");
    for (int i = 0; i < n * copies; i++) {
        const MprtDnnlConv *c = &convs[i % n];
        omp_set_num_threads(mprt_dev_threads(c->dev));   /* the count it runs on */
        size_t need = mprt_dnnl_prepare(&mprt_dnnl_prims[i], c, attr);
        if (need > scratch[c->dev])
            scratch[c->dev] = need;
    }
    dnnl_primitive_attr_destroy(attr);
    mprt_dnnl_pools_start(pools, npools, scratch);
}

/* Points operand a at the model's buffer and its copy in the scratch. */
static void mprt_dnnl_bind(const MprtDnnlConv *c, MprtDnnlArg *a, const void *data, char *scratch)
{
    mprt_dnnl_check(dnnl_memory_set_data_handle(a->plain, (void *)data), c, "memory handle");
    if (a->reorder)
        mprt_dnnl_check(dnnl_memory_set_data_handle(a->best, scratch + a->at), c,
                        "memory handle");
}

static void mprt_dnnl_reorder(const MprtDnnlConv *c, dnnl_stream_t s, MprtDnnlArg *a, int input)
{
    dnnl_exec_arg_t io[2] = {{DNNL_ARG_FROM, input ? a->plain : a->best},
                             {DNNL_ARG_TO, input ? a->best : a->plain}};
    mprt_dnnl_check(dnnl_primitive_execute(a->reorder, s, 2, io), c, "reorder");
}

/* Convolution `id` of the model's table: its operands in, the primitive,
 * its result out, all on the device's stream, finished on return. */
static void mprt_dnnl_run(int id, const void *a, const void *b, const float *bias, void *out,
                          float *scratch)
{
    MprtDnnlPrim *q = &mprt_dnnl_prims[mprt_copy_of_thread() * mprt_dnnl_nconvs + id];
    const MprtDnnlConv *c = q->spec;
    dnnl_stream_t s = mprt_dnnl_streams[mprt_dev_base + c->dev];
    char *w = (char *)scratch;
    mprt_omp_threads();
    mprt_dnnl_bind(c, &q->in[0], a, w);
    mprt_dnnl_bind(c, &q->in[1], b, w);
    mprt_dnnl_bind(c, &q->out, out, w);
    mprt_dnnl_check(dnnl_memory_set_data_handle(q->pad, w + q->pad_at), c, "memory handle");
    dnnl_exec_arg_t args[5];
    int n = 0;
    for (int k = 0; k < 2; k++) {
        if (q->in[k].reorder)
            mprt_dnnl_reorder(c, s, &q->in[k], 1);
        args[n++] = (dnnl_exec_arg_t){q->in[k].arg, q->in[k].reorder ? q->in[k].best
                                                                      : q->in[k].plain};
    }
    args[n++] = (dnnl_exec_arg_t){q->out.arg, q->out.reorder ? q->out.best : q->out.plain};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, q->pad};
    if (c->bias) {
        mprt_dnnl_check(dnnl_memory_set_data_handle(q->bias, (void *)bias), c, "memory handle");
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, q->bias};
    }
    mprt_dnnl_check(dnnl_primitive_execute(q->prim, s, n, args), c, "convolution");
    if (q->out.reorder)
        mprt_dnnl_reorder(c, s, &q->out, 0);
    mprt_dnnl_check(dnnl_stream_wait(s), c, "stream");
}

/* The three kernels, with cpu.c's operands in cpu.c's order. */
MPRT_KERNEL void mprt_dnnl_conv(int id, const float *x, const float *w, const float *b, float *y,
                                float *scratch)
{
    mprt_dnnl_run(id, x, w, b, y, scratch);
}

MPRT_KERNEL void mprt_dnnl_conv_grad_x(int id, const float *dy, const float *w, float *dx,
                                       float *scratch)
{
    mprt_dnnl_run(id, dy, w, NULL, dx, scratch);
}

MPRT_KERNEL void mprt_dnnl_conv_grad_w(int id, const float *dy, const float *x, float *dw,
                                       float *scratch)
{
    mprt_dnnl_run(id, dy, x, NULL, dw, scratch);
}

/* ---- max pooling ----
 *
 * oneDNN's forward (measured 2.7 to 4.5 times cpu.c's: tests/bench/
 * bench_norm.c) writes Y and, in its workspace in the device's scratch,
 * which tap of each window held the maximum (the first of equal ones, as
 * cpu.c). The kernel turns that into ONNX's Indices, which cpu.c's
 * gradient reads (faster than oneDNN's). oneDNN's max passes over NaN
 * where cpu.c's, as PyTorch's, keeps it: an input with a NaN runs cpu.c's
 * kernel instead, so that the result is cpu.c's in every case. */

typedef struct MprtDnnlPoolPrim {
    const MprtDnnlPool *spec;
    dnnl_primitive_t prim;   /* NULL: oneDNN's workspace is not one plain tap per output */
    dnnl_memory_t x, y, ws;
    int ws_s32;              /* the workspace's taps: int32 (else uint8) */
    long *tap_at;            /* each tap's offset in the plane from its window's corner */
} MprtDnnlPoolPrim;

static MprtDnnlPoolPrim *mprt_dnnl_pool_prims;

static int mprt_dnnl_pool_spatial(const MprtPool *p)
{
    if (p->D > 1 || p->KD > 1 || p->OD > 1 || p->pd || p->sd > 1 || p->dd > 1)
        return 3;
    return p->H == 1 && p->KH == 1 && p->OH == 1 && !p->ph && p->sh == 1 && p->dh == 1 ? 1 : 2;
}

/* The description of pooling c's forward, in plain layouts; *x and *y the
 * input's and output's. */
static dnnl_pooling_v2_desc_t mprt_dnnl_pool_desc(const MprtDnnlPool *c, dnnl_memory_desc_t *x,
                                                 dnnl_memory_desc_t *y)
{
    static const dnnl_format_tag_t data[] = {dnnl_ncw, dnnl_nchw, dnnl_ncdhw};
    const MprtPool *p = &c->p;
    int sp = mprt_dnnl_pool_spatial(p);
    int s[3] = {p->sd, p->sh, p->sw}, di[3] = {p->dd, p->dh, p->dw}, pa[3] = {p->pd, p->ph, p->pw};
    int in[3] = {p->D, p->H, p->W}, out[3] = {p->OD, p->OH, p->OW}, k[3] = {p->KD, p->KH, p->KW};
    dnnl_dims_t xd = {p->N, p->C}, yd = {p->N, p->C}, st, kd, dl, pl, pr;
    for (int i = 0; i < sp; i++) {
        int j = 3 - sp + i;
        long r = (long)(out[j] - 1) * s[j] + (long)(k[j] - 1) * di[j] + 1 - in[j] - pa[j];
        xd[2 + i] = in[j], yd[2 + i] = out[j];
        st[i] = s[j], kd[i] = k[j], dl[i] = di[j] - 1, pl[i] = pa[j];
        pr[i] = r < 0 && r > -s[j] ? 0 : r;
    }
    mprt_dnnl_fail(dnnl_memory_desc_init_by_tag(x, 2 + sp, xd, dnnl_f32, data[sp - 1]), c->node,
                   "MaxPool", "input");
    mprt_dnnl_fail(dnnl_memory_desc_init_by_tag(y, 2 + sp, yd, dnnl_f32, data[sp - 1]), c->node,
                   "MaxPool", "output");
    dnnl_pooling_v2_desc_t d;
    mprt_dnnl_fail(dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_training, dnnl_pooling_max,
                                                     x, y, st, kd, dl, pl, pr),
                   c->node, "MaxPool", "pooling description");
    return d;
}

/* Whether the workspace pd asks for is one tap per output, in the output's
 * plain order (what the kernel reads), and which type. */
static int mprt_dnnl_pool_plain_ws(const MprtDnnlPool *c, const_dnnl_primitive_desc_t pd,
                                   const dnnl_memory_desc_t *y, int *s32)
{
    const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0);
    if (!ws || (ws->data_type != dnnl_u8 && ws->data_type != dnnl_s32))
        return 0;
    static const dnnl_format_tag_t data[] = {dnnl_ncw, dnnl_nchw, dnnl_ncdhw};
    dnnl_memory_desc_t want;
    mprt_dnnl_fail(dnnl_memory_desc_init_by_tag(&want, y->ndims, y->dims, ws->data_type,
                                                data[y->ndims - 3]), c->node, "MaxPool",
                   "workspace");
    *s32 = ws->data_type == dnnl_s32;
    return dnnl_memory_desc_equal(ws, &want);
}

/* Pooling c's primitive and its taps' offsets; returns the scratch it
 * needs (its workspace). */
static size_t mprt_dnnl_pool_prepare(MprtDnnlPoolPrim *q, const MprtDnnlPool *c)
{
    const MprtPool *p = &c->p;
    dnnl_memory_desc_t x, y;
    dnnl_pooling_v2_desc_t d = mprt_dnnl_pool_desc(c, &x, &y);
    dnnl_primitive_desc_t pd;
    *q = (MprtDnnlPoolPrim){.spec = c};
    mprt_dnnl_fail(dnnl_primitive_desc_create(&pd, &d, NULL, mprt_dnnl_engine, NULL), c->node,
                   "MaxPool", "primitive description");
    size_t need = 0;
    if (mprt_dnnl_pool_plain_ws(c, pd, &y, &q->ws_s32)) {
        const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0);
        mprt_dnnl_fail(dnnl_primitive_create(&q->prim, pd), c->node, "MaxPool", "primitive");
        mprt_dnnl_fail(dnnl_memory_create(&q->x, &x, mprt_dnnl_engine, DNNL_MEMORY_NONE), c->node,
                       "MaxPool", "memory");
        mprt_dnnl_fail(dnnl_memory_create(&q->y, &y, mprt_dnnl_engine, DNNL_MEMORY_NONE), c->node,
                       "MaxPool", "memory");
        mprt_dnnl_fail(dnnl_memory_create(&q->ws, ws, mprt_dnnl_engine, DNNL_MEMORY_NONE),
                       c->node, "MaxPool", "memory");
        need = mprt_dnnl_round(dnnl_memory_desc_get_size(ws));
    }
    dnnl_primitive_desc_destroy(pd);
    long taps = (long)p->KD * p->KH * p->KW;
    q->tap_at = malloc((size_t)taps * sizeof *q->tap_at);
    if (!q->tap_at) {
        fprintf(stderr, "train: error: out of memory\n");
        exit(1);
    }
    for (long t = 0; t < taps; t++) {
        long kd = t / ((long)p->KH * p->KW), kh = t / p->KW % p->KH, kw = t % p->KW;
        q->tap_at[t] = (kd * p->dd * p->H + kh * p->dh) * p->W + kw * p->dw;
    }
    return need;
}

static void mprt_dnnl_pools_start(const MprtDnnlPool *pools, int n, size_t *scratch)
{
    int copies = mprt_replicas_here;
    mprt_dnnl_npools = n;
    mprt_dnnl_pool_prims = calloc((size_t)n * (size_t)copies + 1, sizeof *mprt_dnnl_pool_prims);
    if (!mprt_dnnl_pool_prims) {
        fprintf(stderr, "train: error: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < n * copies; i++) {
        const MprtDnnlPool *c = &pools[i % n];
        omp_set_num_threads(mprt_dev_threads(c->dev));
        size_t need = mprt_dnnl_pool_prepare(&mprt_dnnl_pool_prims[i], c);
        if (need > scratch[c->dev])
            scratch[c->dev] = need;
    }
}

/* Elements [lo, hi) of x: does any hold a NaN? */
typedef struct MprtNanScan {
    const float *x;
    atomic_int found;
} MprtNanScan;

static void mprt_nan_piece(void *ctx, long lo, long hi)
{
    MprtNanScan *t = ctx;
    int nan = 0;
    for (long i = lo; i < hi; i++)
        nan |= t->x[i] != t->x[i];
    if (nan)
        atomic_store(&t->found, 1);
}

/* Planes [lo, hi) of ONNX's Indices from oneDNN's taps. */
typedef struct MprtTapsToIdx {
    const MprtDnnlPoolPrim *q;
    const void *ws;
    int64_t *idx;
} MprtTapsToIdx;

static void mprt_taps_piece(void *ctx, long lo, long hi)
{
    const MprtTapsToIdx *t = ctx;
    const MprtPool *p = &t->q->spec->p;
    const long *at = t->q->tap_at;
    long plane = (long)p->D * p->H * p->W;
    for (long nc = lo; nc < hi; nc++)
        for (int od = 0; od < p->OD; od++)
            for (int oh = 0; oh < p->OH; oh++) {
                long o = ((nc * p->OD + od) * p->OH + oh) * p->OW;
                long row = nc * plane + ((long)(od * p->sd - p->pd) * p->H + oh * p->sh - p->ph) *
                                            p->W - p->pw;
                for (int ow = 0; ow < p->OW; ow++) {
                    long tap = t->q->ws_s32 ? ((const int32_t *)t->ws)[o + ow]
                                            : ((const uint8_t *)t->ws)[o + ow];
                    t->idx[o + ow] = row + (long)ow * p->sw + at[tap];
                }
            }
}

/* Max pooling `id` of the model's table: cpu.c's mprt_maxpool's result
 * (idx may be NULL), through oneDNN where it can. */
MPRT_KERNEL void mprt_dnnl_maxpool(int id, const float *x, float *y, int64_t *idx, float *scratch)
{
    MprtDnnlPoolPrim *q = &mprt_dnnl_pool_prims[mprt_copy_of_thread() * mprt_dnnl_npools + id];
    const MprtDnnlPool *c = q->spec;
    const MprtPool *p = &c->p;
    long n = (long)p->N * p->C * p->D * p->H * p->W;
    MprtNanScan scan = {x, 0};
    if (q->prim)
        mprt_par(n, MPRT_GRAIN, mprt_nan_piece, &scan);
    if (!q->prim || atomic_load(&scan.found)) {
        mprt_maxpool(p, x, y, idx);
        return;
    }
    mprt_omp_threads();
    dnnl_stream_t s = mprt_dnnl_streams[mprt_dev_base + c->dev];
    mprt_dnnl_fail(dnnl_memory_set_data_handle(q->x, (void *)x), c->node, "MaxPool", "memory");
    mprt_dnnl_fail(dnnl_memory_set_data_handle(q->y, y), c->node, "MaxPool", "memory");
    mprt_dnnl_fail(dnnl_memory_set_data_handle(q->ws, scratch), c->node, "MaxPool", "memory");
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, q->x}, {DNNL_ARG_DST, q->y},
                              {DNNL_ARG_WORKSPACE, q->ws}};
    mprt_dnnl_fail(dnnl_primitive_execute(q->prim, s, 3, args), c->node, "MaxPool", "pooling");
    mprt_dnnl_fail(dnnl_stream_wait(s), c->node, "MaxPool", "stream");
    if (!idx)
        return;
    MprtTapsToIdx t = {q, scratch, idx};
    long planes = (long)p->N * p->C;
    mprt_par(planes, mprt_grain_rows((long)p->OD * p->OH * p->OW), mprt_taps_piece, &t);
}

/* ---- the blocked layout: batch normalisation, bias gradients, global average pooling ----
 *
 * Element (n, c, p) of an N x C x P tensor (P the spatial positions) lies
 * at ((n * C / B + c / B) * P + p) * B + c % B, B = mprt_dnnl_block; C is
 * a multiple of 16. Each kernel does cpu.c's float operations in cpu.c's
 * order per channel (the sums over a row in two interleaved halves, the
 * images in order), so it gives cpu.c's bits on the same values; the B
 * channels of a block go side by side, which vectorises. */

/* One image's block of b channels (P positions, b side by side): per
 * channel the sums of x and x^2 added to a[0..1] (width 2), or with dy
 * also of dy and dy * x to a[2..3] (width 4), as cpu.c's mprt_row_sums and
 * mprt_row_moments_dots: even and odd positions apart, then together. */
MPRT_INLINE void mprt_bnb_sums_block(const float *x, const float *dy, long P, const int b,
                                     double *acc, int width)
{
    double s0[16] = {0}, s1[16] = {0}, q0[16] = {0}, q1[16] = {0};
    double d0[16] = {0}, d1[16] = {0}, p0[16] = {0}, p1[16] = {0};
    long m = P & ~1L;
    if (dy) {
        for (long i = 0; i < m; i += 2)
            for (int j = 0; j < b; j++) {
                double u = x[i * b + j], v = x[(i + 1) * b + j];
                double du = dy[i * b + j], dv = dy[(i + 1) * b + j];
                s0[j] += u, s1[j] += v, q0[j] += u * u, q1[j] += v * v;
                d0[j] += du, d1[j] += dv, p0[j] += du * u, p1[j] += dv * v;
            }
        for (int j = 0; j < b && m < P; j++) {
            double u = x[m * b + j], du = dy[m * b + j];
            s0[j] += u, q0[j] += u * u, d0[j] += du, p0[j] += du * u;
        }
    } else {
        for (long i = 0; i < m; i += 2)
            for (int j = 0; j < b; j++) {
                double u = x[i * b + j], v = x[(i + 1) * b + j];
                s0[j] += u, s1[j] += v, q0[j] += u * u, q1[j] += v * v;
            }
        for (int j = 0; j < b && m < P; j++) {
            double u = x[m * b + j];
            s0[j] += u, q0[j] += u * u;
        }
    }
    for (int j = 0; j < b; j++) {
        double *a = acc + (size_t)width * j;
        a[0] += s0[j] + s1[j], a[1] += q0[j] + q1[j];
        if (dy)
            a[2] += d0[j] + d1[j], a[3] += p0[j] + p1[j];
    }
}

/* Channel blocks [lo, hi): their sums over every image in order. */
MPRT_VECTOR static void mprt_bnb_sums_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    int b = mprt_dnnl_block, CB = t->C / b;
    for (long cb = lo; cb < hi; cb++)
        for (int n = 0; n < t->N; n++) {
            size_t o = ((size_t)n * CB + cb) * t->P * b;
            const float *dy = t->dy ? t->dy + o : NULL;
            double *acc = t->acc + (size_t)t->width * cb * b;
            if (b == 16)
                mprt_bnb_sums_block(t->x + o, dy, t->P, 16, acc, t->width);
            else
                mprt_bnb_sums_block(t->x + o, dy, t->P, 8, acc, t->width);
        }
}

static void mprt_bnb_sums(int N, int C, long P, const float *x, const float *dy, double *acc)
{
    MprtBn t = {.N = N, .C = C, .P = P, .x = x, .dy = dy, .acc = acc, .width = dy ? 4 : 2};
    mprt_par(C / mprt_dnnl_block, mprt_grain_rows((long)N * P * mprt_dnnl_block),
             mprt_bnb_sums_piece, &t);
}

/* One image's block of b channels from channel c0: training's y = (x -
 * m[c]) * a[c] + b[c]; with dy, the gradient's dx from the factors k (4 a
 * channel); with inference set, y = (x - m[c]) * a[c] * k[c] + b[c] (a: 1
 * / sqrt(var + eps), k: the scale). cpu.c's operations, in its order. */
MPRT_INLINE void mprt_bnb_apply_block(const MprtBn *t, size_t o, int c0, const int b,
                                      int inference)
{
    const float *x = t->x + o;
    float *y = t->y + o;
    float k0[16], k1[16], k2[16], k3[16];
    for (int j = 0; j < b; j++) {
        int c = c0 + j;
        if (t->dy)
            k0[j] = t->k[4 * c], k1[j] = t->k[4 * c + 1], k2[j] = t->k[4 * c + 2],
            k3[j] = t->k[4 * c + 3];
        else
            k0[j] = t->m[c], k1[j] = t->a[c], k2[j] = t->b[c], k3[j] = inference ? t->k[c] : 0;
    }
    if (t->dy) {
        const float *dy = t->dy + o;
        for (long i = 0; i < t->P; i++)
            for (int j = 0; j < b; j++)
                y[i * b + j] = k0[j] * (dy[i * b + j] - k1[j] - (x[i * b + j] - k3[j]) * k2[j]);
    } else if (inference) {
        for (long i = 0; i < t->P; i++)
            for (int j = 0; j < b; j++)
                y[i * b + j] = (x[i * b + j] - k0[j]) * k1[j] * k3[j] + k2[j];
    } else {
        for (long i = 0; i < t->P; i++)
            for (int j = 0; j < b; j++)
                y[i * b + j] = (x[i * b + j] - k0[j]) * k1[j] + k2[j];
    }
    if (t->add && !t->dy)   /* the block just written, still in the cache */
        mprt_bn_fused(t->fuse, t->P * b, t->add + o, y);
    else if ((t->fuse & MPRT_BN_RELU) && !t->dy)
        for (long i = 0; i < t->P * b; i++)
            y[i] = mprt_select(y[i] > 0.0f, y[i]);
}

/* Blocks [lo, hi) of (image, channel block); .width 1 marks inference. */
MPRT_VECTOR static void mprt_bnb_apply_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    int b = mprt_dnnl_block, CB = t->C / b;
    for (long nb = lo; nb < hi; nb++) {
        size_t o = (size_t)nb * t->P * b;
        int c0 = (int)(nb % CB) * b;
        if (b == 16)
            mprt_bnb_apply_block(t, o, c0, 16, t->width == 1);
        else
            mprt_bnb_apply_block(t, o, c0, 8, t->width == 1);
    }
}

static void mprt_bnb_apply(MprtBn *t)
{
    mprt_par((long)t->N * (t->C / mprt_dnnl_block), mprt_grain_rows(t->P * mprt_dnnl_block),
             mprt_bnb_apply_piece, t);
}

/* cpu.c's mprt_bn_train (and, in inference mode, mprt_bn_infer) on
 * blocked x, add and y. */
MPRT_KERNEL void mprt_dnnl_bn_train(int N, int C, long P, const float *x, const float *scale,
                                    const float *bias, float *running_mean, float *running_var,
                                    float momentum, float eps, int fuse, const float *add,
                                    float *y)
{
    float *a = mprt_bn_scratch(C, sizeof(float), 2), *m = a + C;
    MprtBn t = {.N = N, .C = C, .P = P, .x = x, .m = m, .a = a, .b = bias, .fuse = fuse,
                .add = add, .y = y};
    if (!mprt_training) {
        for (int c = 0; c < C; c++)
            a[c] = (float)(1.0 / sqrt((double)running_var[c] + eps)), m[c] = running_mean[c];
        t.k = scale, t.width = 1;
    } else {
        double *acc = mprt_bn_scratch(C, sizeof(double), 2);
        mprt_bnb_sums(N, C, P, x, NULL, acc);
        mprt_bn_train_factors(C, (long)N * P, acc, scale, running_mean, running_var, momentum,
                              eps, a, m);
        free(acc);
    }
    mprt_bnb_apply(&t);
    free(a);
}

/* cpu.c's mprt_bn_grad on blocked dy, z, x and dx. */
MPRT_KERNEL void mprt_dnnl_bn_grad(int N, int C, long P, const float *dy, const float *z,
                                   const float *x, const float *scale, float eps, float *dx,
                                   float *dscale, float *dbias)
{
    dy = mprt_bn_dy((long)N * C * P, dy, z, dx);
    double *acc = mprt_bn_scratch(C, sizeof(double), 4);
    float *k = mprt_bn_scratch(C, sizeof(float), 4);
    mprt_bnb_sums(N, C, P, x, dy, acc);
    mprt_bn_grad_factors(C, (long)N * P, acc, scale, eps, k, dscale, dbias);
    MprtBn t = {.N = N, .C = C, .P = P, .x = x, .dy = dy, .k = k, .y = dx};
    mprt_bnb_apply(&t);
    free(acc);
    free(k);
}

/* One image's block of b channels: each channel's sum over the positions
 * (cpu.c's mprt_row_sum: four interleaved partial sums) added to s[j]. */
MPRT_INLINE void mprt_csb_block(const float *dy, long P, const int b, double *s)
{
    double a0[16] = {0}, a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
    long m = P & ~3L;
    for (long i = 0; i < m; i += 4)
        for (int j = 0; j < b; j++)
            a0[j] += dy[i * b + j], a1[j] += dy[(i + 1) * b + j], a2[j] += dy[(i + 2) * b + j],
                a3[j] += dy[(i + 3) * b + j];
    for (long i = m; i < P; i++)
        for (int j = 0; j < b; j++)
            a0[j] += dy[i * b + j];
    for (int j = 0; j < b; j++)
        s[j] += (a0[j] + a1[j]) + (a2[j] + a3[j]);
}

/* Channel blocks [lo, hi) of a convolution's bias gradient: each channel's
 * sum over the images in order (cpu.c's mprt_channel_sum). */
MPRT_VECTOR static void mprt_csb_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    int b = mprt_dnnl_block, CB = t->C / b;
    for (long cb = lo; cb < hi; cb++) {
        double s[16] = {0};
        for (int n = 0; n < t->N; n++) {
            const float *dy = t->dy + ((size_t)n * CB + cb) * t->P * b;
            if (b == 16)
                mprt_csb_block(dy, t->P, 16, s);
            else
                mprt_csb_block(dy, t->P, 8, s);
        }
        for (int j = 0; j < b; j++)
            t->y[cb * b + j] = (float)s[j];
    }
}

/* cpu.c's mprt_channel_sum on a blocked dy. */
MPRT_KERNEL void mprt_dnnl_channel_sum(int N, int M, long P, const float *dy, float *db)
{
    MprtBn t = {.N = N, .C = M, .P = P, .dy = dy, .y = db};
    mprt_par(M / mprt_dnnl_block, mprt_grain_rows((long)N * P * mprt_dnnl_block), mprt_csb_piece,
             &t);
}

/* One image's block of b channels: the mean of each channel's positions
 * (cpu.c's mprt_gap: in double, in order) into y[0..b), or, with dy, the
 * gradient: every position gets dy[j] / P. */
MPRT_INLINE void mprt_gapb_block(const float *x, const float *dy, long P, const int b, float *y)
{
    if (dy) {
        for (long i = 0; i < P; i++)
            for (int j = 0; j < b; j++)
                y[i * b + j] = dy[j] / (float)P;
        return;
    }
    double s[16] = {0};
    for (long i = 0; i < P; i++)
        for (int j = 0; j < b; j++)
            s[j] += x[i * b + j];
    for (int j = 0; j < b; j++)
        y[j] = (float)(s[j] / P);
}

/* Blocks [lo, hi) of (image, channel block): the mean, or (.b: dy) the
 * gradient. */
MPRT_VECTOR static void mprt_gapb_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    int b = mprt_dnnl_block;
    for (long nb = lo; nb < hi; nb++) {
        size_t o = (size_t)nb * t->P * b;
        const float *dy = t->b ? t->b + nb * b : NULL;
        const float *x = dy ? NULL : t->x + o;
        float *y = dy ? t->y + o : t->y + nb * b;
        if (b == 16)
            mprt_gapb_block(x, dy, t->P, 16, y);
        else
            mprt_gapb_block(x, dy, t->P, 8, y);
    }
}

/* cpu.c's mprt_gap on a blocked x (y, N x C, is plain). */
MPRT_KERNEL void mprt_dnnl_gap(int N, int C, long P, const float *x, float *y)
{
    MprtBn t = {.N = N, .C = C, .P = P, .x = x, .y = y};
    mprt_par((long)N * (C / mprt_dnnl_block), mprt_grain_rows(P * mprt_dnnl_block),
             mprt_gapb_piece, &t);
}

/* cpu.c's mprt_gap_grad into a blocked dx (dy, N x C, is plain). */
MPRT_KERNEL void mprt_dnnl_gap_grad(int N, int C, long P, const float *dy, float *dx)
{
    MprtBn t = {.N = N, .C = C, .P = P, .b = dy, .y = dx};
    mprt_par((long)N * (C / mprt_dnnl_block), mprt_grain_rows(P * mprt_dnnl_block),
             mprt_gapb_piece, &t);
}
