/* test_dnnl_blocked.c — runtime/cpu_dnnl.c's kernels on activations in
 * oneDNN's blocked layout give runtime/cpu.c's plain kernels' results bit
 * for bit, in blocks of 16 channels and of 8 (the layout on machines
 * without AVX-512, forced here): batch normalisation in training (the
 * output and the running statistics) and in inference, its gradient,
 * each alone and with its ReLU (which also gives the bits of the batch
 * norm and mprt_relu, and of mprt_relu_grad and the batch norm's), a
 * convolution's bias gradient, global average pooling and its gradient; on
 * 1 and 3 threads; with an odd number of positions (the sums' tails), one
 * position, and many. */
#define _POSIX_C_SOURCE 200809L
#define MPRT_GOMP 1   /* as a trainer that links oneDNN */
#include "program.h"
#include "kernel.h"
#include "state.c"
#include "pool.c"
#include "cpu.c"
#include "cpu_dnnl.c"

#include "check.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static float rnd(void)   /* in [-2, 2), with a mean away from 0 */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24) * 4.0f - 1.5f;
}

static float *floats(long n)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (long i = 0; i < n; i++)
        x[i] = rnd();
    return x;
}

/* x (N x C x P, plain) in the blocked layout of b channels a block. */
static float *block(const float *x, int N, int C, long P, int b)
{
    float *y = malloc((size_t)N * C * P * sizeof *y);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (long p = 0; p < P; p++)
                y[(((size_t)n * (C / b) + c / b) * P + p) * b + c % b] =
                    x[((size_t)n * C + c) * P + p];
    return y;
}

/* Whether blocked y holds plain x's bits. */
static int same_blocked(const float *x, const float *y, int N, int C, long P, int b)
{
    float *xb = block(x, N, C, P, b);
    int same = memcmp(xb, y, (size_t)N * C * P * sizeof *y) == 0;
    free(xb);
    return same;
}

#define EXPECT(cond, what)                                                             \
    do {                                                                               \
        CHECK(cond);                                                                   \
        if (!(cond))                                                                   \
            fprintf(stderr, "  %s: N %d C %d P %ld, blocks of %d, %d thread(s)\n", what, N, \
                    C, P, b, mprt_threads);                                            \
    } while (0)

/* The plain kernels with relu: the batch norm then mprt_relu, and
 * mprt_relu_grad then the batch norm's gradient, bit for bit. */
static void fused_is_composed(int N, int C, long P, const float *x, const float *dy,
                              const float *scale, const float *bias)
{
    long n = (long)N * C * P;
    float *y = floats(n), *z = floats(n), *dx1 = floats(n), *dx2 = floats(n), *t = floats(n);
    float *st = calloc(8 * (size_t)C, 4);
    int b = 0;
    mprt_training = 1;
    for (int c = 0; c < C; c++)
        st[2 * C + c] = st[3 * C + c] = 1.0f;
    mprt_bn_train(N, C, P, x, scale, bias, st, st + 2 * C, 0.9f, 1e-5f, 0, NULL, y);
    mprt_relu(n, y, y);
    mprt_bn_train(N, C, P, x, scale, bias, st + C, st + 3 * C, 0.9f, 1e-5f, 1, NULL, z);
    EXPECT(memcmp(y, z, (size_t)n * 4) == 0 && memcmp(st, st + C, (size_t)C * 4) == 0 &&
           memcmp(st + 2 * C, st + 3 * C, (size_t)C * 4) == 0,
           "batch norm + ReLU against the batch norm, then mprt_relu");
    /* a residual (dy), in float32, then bf16; training, then inference */
    for (int v = 0; v < 4; v++) {
        int fuse = v & 1 ? 3 : 1;
        mprt_training = v < 2;
        mprt_bn_train(N, C, P, x, scale, bias, st, st + 2 * C, 0.9f, 1e-5f, 0, NULL, y);
        if (fuse & 2)
            mprt_bf16_round(n, y, y);
        for (long i = 0; i < n; i++)
            y[i] += dy[i];
        mprt_relu(n, y, y);
        mprt_bn_train(N, C, P, x, scale, bias, st + C, st + 3 * C, 0.9f, 1e-5f, fuse, dy, z);
        EXPECT(memcmp(y, z, (size_t)n * 4) == 0,
               fuse & 2 ? "batch norm + residual + ReLU against them apart, y rounded to bf16"
                        : "batch norm + residual + ReLU against the three kernels");
    }
    mprt_training = 1;
    mprt_relu_grad(n, dy, z, t);
    mprt_bn_grad(N, C, P, t, NULL, x, scale, 1e-5f, dx1, st + 4 * C, st + 5 * C);
    mprt_bn_grad(N, C, P, dy, z, x, scale, 1e-5f, dx2, st + 6 * C, st + 7 * C);
    EXPECT(memcmp(dx1, dx2, (size_t)n * 4) == 0 &&
           memcmp(st + 4 * C, st + 6 * C, 2 * (size_t)C * 4) == 0,
           "batch norm + ReLU's gradient against mprt_relu_grad, then the batch norm's");
    free(y), free(z), free(dx1), free(dx2), free(t), free(st);
}

static void one_case(int N, int C, long P, int b)
{
    long n = (long)N * C * P;
    float *x = floats(n), *dy = floats(n), *scale = floats(C), *bias = floats(C);
    float *xb = block(x, N, C, P, b), *dyb = block(dy, N, C, P, b);
    float *y = malloc((size_t)n * sizeof *y), *yb = malloc((size_t)n * sizeof *yb);
    float *rm = floats(C), *rv = malloc((size_t)C * sizeof *rv), *rmb = malloc((size_t)C * 4);
    float *rvb = malloc((size_t)C * 4), *g1 = malloc((size_t)C * 4), *g2 = malloc((size_t)C * 4);
    float *h1 = malloc((size_t)C * 4), *h2 = malloc((size_t)C * 4);
    for (int c = 0; c < C; c++)
        rv[c] = 0.5f + (float)c / (float)C;
    memcpy(rmb, rm, (size_t)C * 4), memcpy(rvb, rv, (size_t)C * 4);
    mprt_dnnl_block = b;

    /* alone, with its ReLU, with a residual (dy) and its ReLU, and so in bf16 */
    for (int v = 0; v < 4; v++) {
        int relu = v > 0, fuse = v == 3 ? 3 : relu;
        const float *add = v >= 2 ? dy : NULL, *addb = v >= 2 ? dyb : NULL;
        mprt_training = 1;
        mprt_bn_train(N, C, P, x, scale, bias, rm, rv, 0.9f, 1e-5f, fuse, add, y);
        mprt_dnnl_bn_train(N, C, P, xb, scale, bias, rmb, rvb, 0.9f, 1e-5f, fuse, addb, yb);
        EXPECT(same_blocked(y, yb, N, C, P, b), add  ? "batch norm + residual + ReLU, training"
                                                : relu ? "batch norm + ReLU, training"
                                                       : "batch norm, training");
        EXPECT(memcmp(rm, rmb, (size_t)C * 4) == 0 && memcmp(rv, rvb, (size_t)C * 4) == 0,
               "batch norm's running statistics");
        mprt_training = 0;
        mprt_bn_train(N, C, P, x, scale, bias, rm, rv, 0.9f, 1e-5f, fuse, add, y);
        mprt_dnnl_bn_train(N, C, P, xb, scale, bias, rmb, rvb, 0.9f, 1e-5f, fuse, addb, yb);
        EXPECT(same_blocked(y, yb, N, C, P, b), add  ? "batch norm + residual + ReLU, inference"
                                                : relu ? "batch norm + ReLU, inference"
                                                       : "batch norm, inference");
        mprt_training = 1;
        if (add)
            continue;   /* its gradient is the plain one's, after a ReluGrad */

        /* z: the fused forward's output (blocked: its blocked twin) */
        float *z = relu ? y : NULL, *zb = relu ? yb : NULL, *dx = floats(n), *dxb = floats(n);
        mprt_bn_grad(N, C, P, dy, z, x, scale, 1e-5f, dx, g1, h1);
        mprt_dnnl_bn_grad(N, C, P, dyb, zb, xb, scale, 1e-5f, dxb, g2, h2);
        EXPECT(same_blocked(dx, dxb, N, C, P, b),
               relu ? "batch norm + ReLU's dx" : "batch norm's dx");
        EXPECT(memcmp(g1, g2, (size_t)C * 4) == 0 && memcmp(h1, h2, (size_t)C * 4) == 0,
               "batch norm's dscale and dbias");
        free(dx), free(dxb);
    }
    fused_is_composed(N, C, P, x, dy, scale, bias);

    mprt_channel_sum(N, C, P, dy, g1);
    mprt_dnnl_channel_sum(N, C, P, dyb, g2);
    EXPECT(memcmp(g1, g2, (size_t)C * 4) == 0, "the bias gradient");

    float *m1 = malloc((size_t)N * C * 4), *m2 = malloc((size_t)N * C * 4);
    mprt_gap((long)N * C, P, x, m1);
    mprt_dnnl_gap(N, C, P, xb, m2);
    EXPECT(memcmp(m1, m2, (size_t)N * C * 4) == 0, "global average pooling");
    mprt_gap_grad((long)N * C, P, m1, y);
    mprt_dnnl_gap_grad(N, C, P, m1, yb);
    EXPECT(same_blocked(y, yb, N, C, P, b), "global average pooling's gradient");

    free(x), free(dy), free(scale), free(bias), free(xb), free(dyb), free(y), free(yb);
    free(rm), free(rv), free(rmb), free(rvb), free(g1), free(g2), free(h1), free(h2);
    free(m1), free(m2);
}

int main(void)
{
    static const struct { int N, C; long P; } cases[] = {
        {3, 32, 7}, {2, 48, 1}, {4, 16, 50}, {2, 64, 196}, {5, 16, 3},
    };
    for (int t = 1; t <= 3; t += 2) {
        mprt_threads = t;
        for (int b = 16; b >= 8; b /= 2)
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
                one_case(cases[i].N, cases[i].C, cases[i].P, b);
    }
    return check_summary("test_dnnl_blocked");
}
