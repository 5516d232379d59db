/* bench_conv.c — per-shape times of the CPU convolutions: runtime/cpu.c's
 * im2col + GEMM (builtin) against runtime/cpu_dnnl.c (oneDNN), forward,
 * data gradient and filter gradient, on the convolutions of the CNN of
 * tests/bench/bench_train.sh, ResNet-50 at 64x64 batch 32 and a depthwise
 * one. Each shape runs the two kernels alternately, R rounds; it prints
 * each side's minimum and median and the ratios oneDNN/builtin, then the
 * least time oneDNN's side spent in reorders between the model's plain
 * layouts and the primitive's, and its share of that side's minimum: what
 * keeping oneDNN's layouts from one operation to the next could save.
 *   cc -O2 -I runtime tests/bench/bench_conv.c -o bench_conv -ldnnl -lgomp -lopenblas -lm
 *   OPENBLAS_NUM_THREADS=1 ./bench_conv [ROUNDS] */
#define _POSIX_C_SOURCE 200809L
#define MPRT_GOMP 1   /* as a trainer that links oneDNN: pool.c on its OpenMP threads */
#include "program.h"
#include "kernel.h"
#include "state.c"
#include "pool.c"
#include "cpu.c"
#include "cpu_dnnl.c"
#include <time.h>

typedef struct Shape {
    const char *name;
    int N, C, H, W, M, K, s, pad, group;
} Shape;

static const Shape shapes[] = {
    {"cnn conv1 3-16 3x3 32x32", 64, 3, 32, 32, 16, 3, 1, 1, 1},
    {"cnn conv2 16-32 3x3 16x16", 64, 16, 16, 16, 32, 3, 1, 1, 1},
    {"r50 conv1 3-64 7x7 s2 64x64", 32, 3, 64, 64, 64, 7, 2, 3, 1},
    {"r50 l1 64-64 1x1 16x16", 32, 64, 16, 16, 64, 1, 1, 0, 1},
    {"r50 l1 64-64 3x3 16x16", 32, 64, 16, 16, 64, 3, 1, 1, 1},
    {"r50 l1 64-256 1x1 16x16", 32, 64, 16, 16, 256, 1, 1, 0, 1},
    {"r50 l1 256-64 1x1 16x16", 32, 256, 16, 16, 64, 1, 1, 0, 1},
    {"r50 l2 256-128 1x1 16x16", 32, 256, 16, 16, 128, 1, 1, 0, 1},
    {"r50 l2 128-128 3x3 s2 16x16", 32, 128, 16, 16, 128, 3, 2, 1, 1},
    {"r50 l2 256-512 1x1 s2 16x16", 32, 256, 16, 16, 512, 1, 2, 0, 1},
    {"r50 l2 128-512 1x1 8x8", 32, 128, 8, 8, 512, 1, 1, 0, 1},
    {"r50 l2 512-128 1x1 8x8", 32, 512, 8, 8, 128, 1, 1, 0, 1},
    {"r50 l2 128-128 3x3 8x8", 32, 128, 8, 8, 128, 3, 1, 1, 1},
    {"r50 l3 256-256 3x3 4x4", 32, 256, 4, 4, 256, 3, 1, 1, 1},
    {"r50 l3 1024-256 1x1 4x4", 32, 1024, 4, 4, 256, 1, 1, 0, 1},
    {"r50 l3 256-1024 1x1 4x4", 32, 256, 4, 4, 1024, 1, 1, 0, 1},
    {"r50 l4 512-512 3x3 2x2", 32, 512, 2, 2, 512, 3, 1, 1, 1},
    {"r50 l4 2048-512 1x1 2x2", 32, 2048, 2, 2, 512, 1, 1, 0, 1},
    {"r50 l4 512-2048 1x1 2x2", 32, 512, 2, 2, 2048, 1, 1, 0, 1},
    {"depthwise 96 3x3 16x16", 32, 96, 16, 16, 96, 3, 1, 1, 96},
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

static float *fill(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

/* builtin's scratch, as compiler/parallel/cost.c's node_workspace. */
static size_t builtin_scratch(const MprtConv *p)
{
    size_t k = (size_t)(p->C / p->group) * mprt_conv_taps(p), P = (size_t)mprt_conv_out_plane(p);
    if (mprt_conv_batched(p))
        return (k + (size_t)(p->M / p->group)) * p->N * P;
    return k * P;
}

static void run(int kind, int builtin, int id, const MprtConv *p, float *x, float *w, float *b,
                float *y, float *ws)
{
    if (kind == MPRT_DNNL_FWD)
        builtin ? mprt_conv(p, x, w, b, y, ws) : mprt_dnnl_conv(id, x, w, b, y, ws);
    else if (kind == MPRT_DNNL_BWD_DATA)
        builtin ? mprt_conv_grad_x(p, y, w, x, ws) : mprt_dnnl_conv_grad_x(id, y, w, x, ws);
    else
        builtin ? mprt_conv_grad_w(p, y, x, w, ws) : mprt_dnnl_conv_grad_w(id, y, x, w, ws);
}

/* The least time, in ms over R rounds, of convolution id's reorders alone
 * (its operands into the primitive's layouts, its result out). */
static double reorder_ms(int id, float *x, float *w, float *y, float *ws, int rounds)
{
    MprtDnnlPrim *q = &mprt_dnnl_prims[id];
    const void *data[3][3] = {{x, w, y}, {y, w, x}, {y, x, w}};
    const void *const *d = data[q->spec->kind];
    mprt_dnnl_bind(q->spec, &q->in[0], d[0], (char *)ws);
    mprt_dnnl_bind(q->spec, &q->in[1], d[1], (char *)ws);
    mprt_dnnl_bind(q->spec, &q->out, d[2], (char *)ws);
    dnnl_stream_t s = mprt_dnnl_streams[0];
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (int k = 0; k < 2; k++)
            if (q->in[k].reorder)
                mprt_dnnl_reorder(q->spec, s, &q->in[k], 1);
        if (q->out.reorder)
            mprt_dnnl_reorder(q->spec, s, &q->out, 0);
        mprt_dnnl_check(dnnl_stream_wait(s), q->spec, "stream");
        double t = (now() - t0) * 1e3;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7, ns = (int)(sizeof shapes / sizeof shapes[0]);
    MprtDnnlConv *convs = calloc((size_t)ns * 3, sizeof *convs);
    for (int i = 0; i < ns; i++) {
        const Shape *s = &shapes[i];
        int o = (s->H + 2 * s->pad - s->K) / s->s + 1;
        MprtConv p = {s->N, s->C, 1, s->H, s->W, s->M, 1, s->K, s->K, 1, o, o, s->group,
                      1, s->s, s->s, 1, 1, 1, 0, s->pad, s->pad};
        for (int k = 0; k < 3; k++)
            convs[3 * i + k] = (MprtDnnlConv){k, 0, k == 0, s->name, p};
    }
    size_t dnnl_scratch = 0;
    mprt_dnnl_start(convs, 3 * ns, NULL, 0, 1, &dnnl_scratch);
    printf("threads %d; rounds %d; times in ms: builtin min/median, oneDNN min/median, "
           "ratio oneDNN/builtin of the minima and of the medians; oneDNN's reorders "
           "(min) and their share of its minimum\n", mprt_dnnl_threads, rounds);
    static const char *kinds[] = {"fwd", "bwd-data", "bwd-weights"};
    for (int i = 0; i < ns; i++)
        for (int k = 0; k < 3; k++) {
            const MprtConv *p = &convs[3 * i + k].p;
            float *x = fill((size_t)p->N * p->C * mprt_conv_in_plane(p));
            float *w = fill((size_t)p->M * (p->C / p->group) * mprt_conv_taps(p));
            float *b = fill((size_t)p->M), *y = fill((size_t)p->N * p->M * mprt_conv_out_plane(p));
            size_t need = builtin_scratch(p) * sizeof(float);
            float *ws = malloc(need > dnnl_scratch ? need : dnnl_scratch);
            double t[2][64];
            for (int r = -1; r < rounds && r < 64; r++)
                for (int side = 0; side < 2; side++) {
                    double t0 = now();
                    run(k, side == 0, 3 * i + k, p, x, w, b, y, ws);
                    if (r >= 0)
                        t[side][r] = (now() - t0) * 1e3;
                }
            qsort(t[0], (size_t)rounds, sizeof(double), cmp);
            qsort(t[1], (size_t)rounds, sizeof(double), cmp);
            double m0 = t[0][rounds / 2], m1 = t[1][rounds / 2];
            double re = reorder_ms(3 * i + k, x, w, y, ws, rounds);
            printf("%-30s %-11s %8.3f %8.3f  %8.3f %8.3f  %5.2f %5.2f  %7.3f %4.0f%%\n",
                   shapes[i].name, kinds[k], t[0][0], m0, t[1][0], m1, t[1][0] / t[0][0],
                   m1 / m0, re, 100 * re / t[1][0]);
            fflush(stdout);
            free(x), free(w), free(b), free(y), free(ws);
        }
    return 0;
}
