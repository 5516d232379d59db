/* bench_norm.c — per-shape times of the CPU batch normalisation and max
 * pooling: runtime/cpu.c's kernels (builtin) against oneDNN's primitives in
 * the same plain NCHW layout (what the trainer's tensors are in), forward
 * (training: the batch's statistics) and backward, on the shapes of the CNN
 * of tests/bench/bench_train.sh and ResNet-50 at 64x64 batch 32. Each shape
 * runs the two sides alternately, R rounds; it prints each side's minimum
 * and median and the ratios oneDNN/builtin. oneDNN's max pooling keeps its
 * own workspace for the backward pass where mpcc keeps ONNX's int64
 * indices; its times are what that pass would cost with it.
 *
 * LAYOUT "blocked" gives oneDNN's side the layout its convolutions choose
 * on AVX-512 (nChw16c, every shape here has C % 16 == 0; "blocked8":
 * nChw8c, AVX2's): what batch norm and pooling would cost if tensors stayed
 * in the convolutions' layout, the reorders gone. "relu" adds the ReLU
 * that follows most of ResNet-50's batch norms to both sides: fused into
 * oneDNN's (dnnl_fuse_norm_relu), runtime/cpu.c's mprt_relu and its
 * gradient after and before mpcc's.
 *   cc -O2 -I runtime tests/bench/bench_norm.c -o bench_norm -ldnnl -lgomp -lopenblas -lm
 *   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./bench_norm [ROUNDS [LAYOUT [relu]]] */
#define _POSIX_C_SOURCE 200809L
#include "program.h"
#include "kernel.h"
#include "state.c"
#include "pool.c"
#include "cpu.c"
#include <dnnl.h>
#include <time.h>

typedef struct Shape {
    const char *name;
    int N, C, H, W;
    int K, s, pad;   /* pooling's window, stride, pad; K 0: batch normalisation */
} Shape;

static const Shape shapes[] = {
    {"cnn bn 16x32x32", 64, 16, 32, 32, 0, 0, 0},
    {"cnn bn 32x16x16", 64, 32, 16, 16, 0, 0, 0},
    {"r50 bn 64x32x32", 32, 64, 32, 32, 0, 0, 0},
    {"r50 bn 64x16x16", 32, 64, 16, 16, 0, 0, 0},
    {"r50 bn 256x16x16", 32, 256, 16, 16, 0, 0, 0},
    {"r50 bn 128x8x8", 32, 128, 8, 8, 0, 0, 0},
    {"r50 bn 512x8x8", 32, 512, 8, 8, 0, 0, 0},
    {"r50 bn 1024x4x4", 32, 1024, 4, 4, 0, 0, 0},
    {"r50 bn 2048x2x2", 32, 2048, 2, 2, 0, 0, 0},
    {"cnn maxpool 2x2 16x32x32", 64, 16, 32, 32, 2, 2, 0},
    {"cnn maxpool 2x2 32x16x16", 64, 32, 16, 16, 2, 2, 0},
    {"r50 maxpool 3x3 s2 64x32x32", 32, 64, 32, 32, 3, 2, 1},
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *zalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "bench_norm: out of memory\n");
        exit(1);
    }
    return p;
}

static float *fill(size_t n)
{
    float *p = zalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

static void ok(dnnl_status_t s, const char *what)
{
    if (s != dnnl_success) {
        fprintf(stderr, "bench_norm: oneDNN's %s failed (status %d)\n", what, (int)s);
        exit(1);
    }
}

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static dnnl_format_tag_t layout = dnnl_nchw;   /* oneDNN's side */
static int with_relu;

static dnnl_memory_t memory(const dnnl_memory_desc_t *md, void *data)
{
    dnnl_memory_t m;
    ok(dnnl_memory_create(&m, md, engine, data), "memory");
    return m;
}

static dnnl_memory_t queried(const_dnnl_primitive_desc_t pd, int arg)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    return memory(md, DNNL_MEMORY_ALLOCATE);
}

static void execute(dnnl_primitive_t p, int n, const dnnl_exec_arg_t *args)
{
    ok(dnnl_primitive_execute(p, stream, n, args), "execute");
    ok(dnnl_stream_wait(stream), "stream");
}

/* One shape's two passes on each side: fwd[side], bwd[side] in ms, R rounds. */
typedef struct Times {
    double fwd[2][64], bwd[2][64];
} Times;

static dnnl_primitive_t make(const void *desc, const_dnnl_primitive_desc_t hint,
                             dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_t p;
    ok(dnnl_primitive_desc_create(pd, desc, NULL, engine, hint), "primitive description");
    ok(dnnl_primitive_create(&p, *pd), "primitive");
    return p;
}

static void bench_bn(const Shape *s, int rounds, Times *t)
{
    size_t n = (size_t)s->N * s->C * s->H * s->W;
    long P = (long)s->H * s->W;
    float *x = fill(n), *dy = fill(n), *y = zalloc(n * 4), *dx = zalloc(n * 4);
    float *ss = fill(2 * (size_t)s->C), *dss = zalloc(8 * (size_t)s->C);
    float *rm = zalloc(4 * (size_t)s->C), *rv = fill((size_t)s->C);
    dnnl_dims_t d = {s->N, s->C, s->H, s->W};
    dnnl_memory_desc_t md;
    ok(dnnl_memory_desc_init_by_tag(&md, 4, d, dnnl_f32, layout), "layout");
    dnnl_batch_normalization_desc_t fd, bd;
    unsigned flags = dnnl_use_scaleshift | (with_relu ? dnnl_fuse_norm_relu : 0);
    ok(dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &md, 1e-5f, flags),
       "description");
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t fwd = make(&fd, NULL, &fpd);
    ok(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &md, &md, 1e-5f, flags),
       "description");
    dnnl_primitive_t bwd = make(&bd, fpd, &bpd);
    dnnl_memory_t mx = memory(&md, x), my = memory(&md, y), mdy = memory(&md, dy),
                  mdx = memory(&md, dx), mean = queried(fpd, DNNL_ARG_MEAN),
                  var = queried(fpd, DNNL_ARG_VARIANCE), sc = queried(fpd, DNNL_ARG_SCALE_SHIFT),
                  dsc = queried(bpd, DNNL_ARG_DIFF_SCALE_SHIFT),
                  ws = with_relu ? queried(fpd, DNNL_ARG_WORKSPACE) : NULL;
    dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DST, my}, {DNNL_ARG_MEAN, mean},
                            {DNNL_ARG_VARIANCE, var}, {DNNL_ARG_SCALE_SHIFT, sc},
                            {DNNL_ARG_WORKSPACE, ws}};
    dnnl_exec_arg_t ba[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_MEAN, mean},
                            {DNNL_ARG_VARIANCE, var}, {DNNL_ARG_SCALE_SHIFT, sc},
                            {DNNL_ARG_DIFF_SRC, mdx}, {DNNL_ARG_DIFF_SCALE_SHIFT, dsc},
                            {DNNL_ARG_WORKSPACE, ws}};
    float *g = with_relu ? zalloc(n * 4) : dy;   /* the ReLU's input gradient */
    for (int r = -1; r < rounds; r++)
        for (int side = 0; side < 2; side++) {
            double t0 = now();
            if (side == 0) {
                mprt_bn_train(s->N, s->C, P, x, ss, ss + s->C, rm, rv, 0.9f, 1e-5f, with_relu, NULL, y);
            } else {
                execute(fwd, 5 + with_relu, fa);
            }
            double t1 = now();
            if (side == 0) {
                mprt_bn_grad(s->N, s->C, P, dy, with_relu ? y : NULL, x, ss, 1e-5f, dx, dss,
                             dss + s->C);
            } else {
                execute(bwd, 7 + with_relu, ba);
            }
            if (r >= 0)
                t->fwd[side][r] = (t1 - t0) * 1e3, t->bwd[side][r] = (now() - t1) * 1e3;
        }
    if (with_relu)
        free(g);
    free(x), free(dy), free(y), free(dx), free(ss), free(dss), free(rm), free(rv);
}

static void bench_pool(const Shape *s, int rounds, Times *t)
{
    int o = (s->H + 2 * s->pad - s->K) / s->s + 1;
    MprtPool p = {s->N, s->C, 1, s->H, s->W, 1, o, o, 1, s->K, s->K, 1, s->s, s->s, 1, 1, 1,
                  0, s->pad, s->pad, 0, 0, 0, 0};
    size_t n = (size_t)s->N * s->C * s->H * s->W, m = (size_t)s->N * s->C * o * o;
    float *x = fill(n), *dx = zalloc(n * 4), *y = zalloc(m * 4), *dy = fill(m);
    int64_t *idx = zalloc(m * sizeof *idx);
    dnnl_dims_t di = {s->N, s->C, s->H, s->W}, dout = {s->N, s->C, o, o}, st = {s->s, s->s},
                k = {s->K, s->K}, dl = {0, 0}, pl = {s->pad, s->pad};
    long rpad = (long)(o - 1) * s->s + s->K - s->H - s->pad;
    dnnl_dims_t pr = {rpad, rpad};
    dnnl_memory_desc_t xd, yd;
    ok(dnnl_memory_desc_init_by_tag(&xd, 4, di, dnnl_f32, layout), "layout");
    ok(dnnl_memory_desc_init_by_tag(&yd, 4, dout, dnnl_f32, layout), "layout");
    dnnl_pooling_v2_desc_t fd, bd;
    ok(dnnl_pooling_v2_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_max, &xd, &yd,
                                         st, k, dl, pl, pr), "description");
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t fwd = make(&fd, NULL, &fpd);
    ok(dnnl_pooling_v2_backward_desc_init(&bd, dnnl_pooling_max, &xd, &yd, st, k, dl, pl, pr),
       "description");
    dnnl_primitive_t bwd = make(&bd, fpd, &bpd);
    dnnl_memory_t mx = memory(&xd, x), my = memory(&yd, y), mdy = memory(&yd, dy),
                  mdx = memory(&xd, dx), ws = queried(fpd, DNNL_ARG_WORKSPACE);
    dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DST, my}, {DNNL_ARG_WORKSPACE, ws}};
    dnnl_exec_arg_t ba[] = {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_SRC, mdx},
                            {DNNL_ARG_WORKSPACE, ws}};
    for (int r = -1; r < rounds; r++)
        for (int side = 0; side < 2; side++) {
            double t0 = now();
            if (side == 0)
                mprt_maxpool(&p, x, y, idx);
            else
                execute(fwd, 3, fa);
            double t1 = now();
            if (side == 0)
                mprt_maxpool_grad((long)m, (long)n, dy, idx, dx);
            else
                execute(bwd, 3, ba);
            if (r >= 0)
                t->fwd[side][r] = (t1 - t0) * 1e3, t->bwd[side][r] = (now() - t1) * 1e3;
        }
    free(x), free(dx), free(y), free(dy), free(idx);
}

static void report(const char *name, const char *pass, double t[2][64], int rounds)
{
    qsort(t[0], (size_t)rounds, sizeof(double), cmp);
    qsort(t[1], (size_t)rounds, sizeof(double), cmp);
    double m0 = t[0][rounds / 2], m1 = t[1][rounds / 2];
    printf("%-30s %-4s %8.3f %8.3f  %8.3f %8.3f  %5.2f %5.2f\n", name, pass, t[0][0], m0, t[1][0],
           m1, t[1][0] / t[0][0], m1 / m0);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    rounds = rounds < 1 ? 1 : rounds > 64 ? 64 : rounds;
    const char *lay = argc > 2 ? argv[2] : "plain";
    if (strcmp(lay, "blocked") == 0)
        layout = dnnl_aBcd16b;
    else if (strcmp(lay, "blocked8") == 0)
        layout = dnnl_aBcd8b;
    else if (strcmp(lay, "plain") != 0) {
        fprintf(stderr, "bench_norm: layout '%s' is not plain, blocked or blocked8\n", lay);
        return 2;
    }
    with_relu = argc > 3 && strcmp(argv[3], "relu") == 0;
    ok(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine");
    ok(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream");
    printf("threads %d; rounds %d; oneDNN's layout %s%s; times in ms: builtin min/median, "
           "oneDNN min/median, ratio oneDNN/builtin of the minima and of the medians\n",
           mprt_pool_threads(), rounds, lay, with_relu ? ", batch norms with a ReLU" : "");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        static Times t;
        (shapes[i].K ? bench_pool : bench_bn)(&shapes[i], rounds, &t);
        report(shapes[i].name, "fwd", t.fwd, rounds);
        report(shapes[i].name, "bwd", t.bwd, rounds);
        fflush(stdout);
    }
    return 0;
}
