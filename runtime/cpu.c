/* cpu.c — the CPU device's kernels, forward and backward, float32.
 *
 * The generated step calls these with the model's static shapes as
 * literals. GEMMs go through oneDNN's or BLAS's sgemm (mprt_sgemm), the
 * builtin convolution as im2col + GEMM. Reductions accumulate in double where PyTorch's own
 * results depend on it (losses, normalization statistics).
 */
#include "mprt.h"
#include "kernel.h"
#include "vmath.h"

#include <cblas.h>
#include <math.h>
#ifdef MPRT_DNNL_GEMM
#include <dnnl.h>
#endif

/* The mode flag and Dropout's generator are in state.c. Kernels that need
 * scratch memory (the convolutions' patch matrix) are handed it: the
 * memory plan keeps one scratch area per device, after its buffers.
 *
 * Most loops run on the device's threads (pool.c's mprt_par), split over
 * independent elements, rows, channels or planes, each computed whole as
 * the one-thread loop would: the results do not depend on the thread
 * count. A loop's grain is the least work worth handing to another thread
 * (about 16 K simple elements). */

/* Pieces of at least this many items: elementwise ops, and rows of n. */
#define MPRT_GRAIN 16384L
static inline long mprt_grain_rows(long n)
{
    return n >= MPRT_GRAIN ? 1 : MPRT_GRAIN / (n > 0 ? n : 1);
}

/* An elementwise kernel's operands: up to three arrays, two numbers and
 * a count. */
typedef struct MprtEw {
    const float *a, *b;
    float *y;
    float p, q;
    long n;
} MprtEw;

/* A per-channel kernel's operands (batch norm, bias gradients): x (and
 * dy) are N x C x P; per channel, sums in acc (`width` doubles each) or
 * the factors of a second pass in k; the result in y. A batch norm's
 * `fuse` (graph/simplify.c): with MPRT_BN_ADD, y + add (y rounded to
 * bf16 first with MPRT_BN_ROUND, as a bf16 y was stored); with
 * MPRT_BN_RELU, then max(y, 0). */
enum { MPRT_BN_RELU = 1, MPRT_BN_ROUND = 2 };
typedef struct MprtBn {
    int N, C, width, fuse;
    long P;
    const float *x, *dy, *m, *a, *b, *k, *add;
    double *acc;
    float *y;
} MprtBn;

/* ---- matrix multiply ---- */

/* Every GEMM of the CPU kernels, row-major, C = alpha op(A) op(B) + beta C
 * (C not read when beta is 0): oneDNN's dnnl_sgemm where mpcc defines
 * MPRT_DNNL_GEMM (its JIT kernels for the CPU the trainer runs on), else
 * BLAS's cblas_sgemm (--cpu-kernels=builtin). Either runs on the device's
 * thread count, OpenBLAS's (pool.c's mprt_omp_threads); at a fixed count,
 * the same call gives the same bits. */
static void mprt_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef MPRT_DNNL_GEMM
    mprt_omp_threads();
    if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                   ldc) == dnnl_success)
        return;
    /* oneDNN refused the call (its arguments are checked as BLAS's): BLAS's
     * answer rather than none */
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Y[M,N] = alpha * op(A) op(B) + beta * C, with C broadcast from
 * c_rows x c_cols (1 or M, 1 or N), or absent. */
MPRT_KERNEL void mprt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                      const float *B, float beta, const float *C, int c_rows, int c_cols,
                      float *Y)
{
    float b = 0.0f;
    if (C && beta != 0.0f) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                Y[(size_t)i * N + j] = C[(size_t)(c_rows == 1 ? 0 : i) * c_cols +
                                         (c_cols == 1 ? 0 : j)];
        b = beta;
    }
    mprt_sgemm(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, b, Y, N);
}

/* Batched Y[b] = A[b] @ B[b] with broadcast batch strides (0 = shared). */
MPRT_KERNEL void mprt_matmul(int batch, int M, int N, int K, const float *A, long sa,
                        const float *B, long sb, float *Y)
{
    for (int i = 0; i < batch; i++)
        mprt_sgemm(0, 0, M, N, K, 1.0f, A + i * sa, K, B + i * sb, N, 0.0f, Y + (size_t)i * M * N,
                   N);
}

/* ---- elementwise ---- */

/* v where keep, else +0.0, without a branch: activations' signs are
 * random, so a branch mispredicts half the time. */
static inline float mprt_select(int keep, float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    b &= -(uint32_t)(keep != 0);
    memcpy(&v, &b, sizeof v);
    return v;
}

/* a if take else b, without a branch */
static inline float mprt_pick(int take, float a, float b)
{
    uint32_t x, y, m = -(uint32_t)(take != 0);
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    x = (x & m) | (y & ~m);
    memcpy(&a, &x, sizeof a);
    return a;
}

static void mprt_relu_piece(void *ctx, long lo, long hi)
{
    const MprtEw *e = ctx;
    for (long i = lo; i < hi; i++)
        e->y[i] = mprt_select(e->a[i] > 0.0f, e->a[i]);
}

MPRT_KERNEL void mprt_relu(long n, const float *x, float *y)
{
    mprt_par(n, MPRT_GRAIN, mprt_relu_piece, &(MprtEw){.a = x, .y = y});
}

static void mprt_relu_grad_piece(void *ctx, long lo, long hi)
{
    const MprtEw *e = ctx;
    for (long i = lo; i < hi; i++)
        e->y[i] = mprt_select(e->b[i] > 0.0f, e->a[i]);
}

MPRT_KERNEL void mprt_relu_grad(long n, const float *dy, const float *y, float *dx)
{
    mprt_par(n, MPRT_GRAIN, mprt_relu_grad_piece, &(MprtEw){.a = dy, .b = y, .y = dx});
}

MPRT_KERNEL void mprt_copy(long n, const float *x, float *y)
{
    if (x != y)
        memcpy(y, x, (size_t)n * sizeof *y);
}

/* ---- bfloat16 storage (--precision=bf16, docs/precision.md) ---- */

/* float32 to bfloat16, rounded to nearest even (as PyTorch's conversion
 * does); a NaN stays a quiet NaN of the same sign. */
static inline uint16_t mprt_bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t even = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : even);
}

static inline float mprt_f32_of(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef struct MprtBf16 {
    const void *x;
    void *y;
} MprtBf16;

static void mprt_bf16_widen_piece(void *ctx, long lo, long hi)
{
    const MprtBf16 *e = ctx;
    const uint16_t *x = e->x;
    float *y = e->y;
    for (long i = lo; i < hi; i++)
        y[i] = mprt_f32_of(x[i]);
}

static void mprt_bf16_narrow_piece(void *ctx, long lo, long hi)
{
    const MprtBf16 *e = ctx;
    const float *x = e->x;
    uint16_t *y = e->y;
    for (long i = lo; i < hi; i++)
        y[i] = mprt_bf16_of(x[i]);
}

static void mprt_bf16_round_piece(void *ctx, long lo, long hi)
{
    const MprtBf16 *e = ctx;
    const float *x = e->x;
    float *y = e->y;
    for (long i = lo; i < hi; i++)
        y[i] = mprt_f32_of(mprt_bf16_of(x[i]));
}

/* y = x, bf16 widened to float32 (exact). */
MPRT_KERNEL void mprt_bf16_widen(long n, const uint16_t *x, float *y)
{
    mprt_par(n, MPRT_GRAIN, mprt_bf16_widen_piece, &(MprtBf16){x, y});
}

/* y = x rounded to bf16. */
MPRT_KERNEL void mprt_bf16_narrow(long n, const float *x, uint16_t *y)
{
    mprt_par(n, MPRT_GRAIN, mprt_bf16_narrow_piece, &(MprtBf16){x, y});
}

/* y = x rounded to bf16, kept in float32: a weight as a bf16 copy reads. */
MPRT_KERNEL void mprt_bf16_round(long n, const float *x, float *y)
{
    mprt_par(n, MPRT_GRAIN, mprt_bf16_round_piece, &(MprtBf16){x, y});
}

typedef struct MprtBiasRound {
    int M;
    long P;
    const float *b;
    float *y;
} MprtBiasRound;

/* Elements [lo, hi): the channel found once, then stepped (no division an
 * element). */
static void mprt_bias_round_add_piece(void *ctx, long lo, long hi)
{
    const MprtBiasRound *e = ctx;
    long c = lo / e->P % e->M, k = lo % e->P;
    for (long i = lo; i < hi; i++) {
        e->y[i] = mprt_f32_of(mprt_bf16_of(e->y[i])) + e->b[c];
        if (++k == e->P)
            k = 0, c = c + 1 == e->M ? 0 : c + 1;
    }
}

/* Under bf16, a convolution's bias after its sum: y (n values, N x M x P)
 * rounded to bf16, then y + b per channel, in float32 (the caller rounds
 * the result): as cuDNN's bf16 convolution and a bias added after it. */
MPRT_KERNEL void mprt_bias_round_add(long n, int M, long P, const float *b, float *y)
{
    mprt_par(n, MPRT_GRAIN, mprt_bias_round_add_piece, &(MprtBiasRound){M, P, b, y});
}

typedef struct MprtSumCall {
    int k;
    const float *const *x;
    float *y;
} MprtSumCall;

static void mprt_sum_piece(void *ctx, long lo, long hi)
{
    const MprtSumCall *t = ctx;
    for (long i = lo; i < hi; i++) {
        float s = t->x[0][i];
        for (int j = 1; j < t->k; j++)
            s += t->x[j][i];
        t->y[i] = s;
    }
}

/* y = sum of k inputs of n elements */
MPRT_KERNEL void mprt_sum(long n, int k, const float *const *x, float *y)
{
    mprt_par(n, MPRT_GRAIN, mprt_sum_piece, &(MprtSumCall){k, x, y});
}

/* One row of a binary op: n elements, the inputs' strides along it
 * (0 or 1 after broadcasting; kept general). The op is a literal at each
 * call site, so each case is its own loop. */
static inline void mprt_binary_row(int op, long n, const float *a, long sa, const float *b,
                                   long sb, float *y)
{
    switch (op) {
    case MPRT_ADD: for (long j = 0; j < n; j++) y[j] = a[j * sa] + b[j * sb]; break;
    case MPRT_SUB: for (long j = 0; j < n; j++) y[j] = a[j * sa] - b[j * sb]; break;
    case MPRT_MUL: for (long j = 0; j < n; j++) y[j] = a[j * sa] * b[j * sb]; break;
    case MPRT_DIV: for (long j = 0; j < n; j++) y[j] = a[j * sa] / b[j * sb]; break;
    case MPRT_PRELU:
        for (long j = 0; j < n; j++)
            y[j] = a[j * sa] > 0 ? a[j * sa] : a[j * sa] * b[j * sb];
        break;
    default: for (long j = 0; j < n; j++) y[j] = powf(a[j * sa], b[j * sb]); break;
    }
}

/* A broadcasting binary op's operands, for the output rows a thread takes. */
typedef struct MprtBinary {
    int op, rank;
    const long *shape, *sa, *sb;
    const float *a, *b;
    float *y;
} MprtBinary;

static void mprt_binary_piece(void *ctx, long lo, long hi)
{
    const MprtBinary *t = ctx;
    int rank = t->rank;
    long idx[8] = {0}, ia = 0, ib = 0, n = t->shape[rank - 1], rest = lo;
    for (int d = rank - 2; d >= 0; d--) {   /* row lo's index and offsets */
        idx[d] = rest % t->shape[d], rest /= t->shape[d];
        ia += idx[d] * t->sa[d], ib += idx[d] * t->sb[d];
    }
    for (long r = lo; r < hi; r++) {
        mprt_binary_row(t->op, n, t->a + ia, t->sa[rank - 1], t->b + ib, t->sb[rank - 1],
                        t->y + r * n);
        for (int d = rank - 2; d >= 0; d--) {
            ia += t->sa[d], ib += t->sb[d];
            if (++idx[d] < t->shape[d])
                break;
            ia -= t->sa[d] * t->shape[d], ib -= t->sb[d] * t->shape[d];
            idx[d] = 0;
        }
    }
}

MPRT_KERNEL void mprt_binary(int op, int rank, const long *shape, const float *a, const long *sa,
                        const float *b, const long *sb, float *y)
{
    if (rank == 0) {
        mprt_binary_row(op, 1, a, 0, b, 0, y);
        return;
    }
    long rows = 1;
    for (int d = 0; d < rank - 1; d++)
        rows *= shape[d];
    MprtBinary t = {op, rank, shape, sa, sb, a, b, y};
    mprt_par(rows, mprt_grain_rows(shape[rank - 1]), mprt_binary_piece, &t);
}

/* Sums over the leading dimensions into the trailing ones (a bias's
 * gradient): column j of an outer x inner matrix summed in the rows'
 * order, as mprt_sum_to's walk sums it, so the bits are its own. Columns
 * go in blocks of MPRT_COLS, each loop of a fixed length (it vectorises
 * across columns), the last short block one at a time; blocks of columns
 * are split over the device's threads. */
#define MPRT_COLS 256
typedef struct MprtColSum {
    long outer, inner;
    float alpha;
    const float *dy;
    float *out;
} MprtColSum;

MPRT_VECTOR static void mprt_col_block(const MprtColSum *t, long j0)
{
    double acc[MPRT_COLS] = {0};
    for (long i = 0; i < t->outer; i++) {
        const float *restrict row = t->dy + i * t->inner + j0;
        for (long j = 0; j < MPRT_COLS; j++)
            acc[j] += row[j];
    }
    for (long j = 0; j < MPRT_COLS; j++)
        t->out[j0 + j] = (float)(t->alpha * acc[j]);
}

static void mprt_col_sum_piece(void *ctx, long lo, long hi)
{
    const MprtColSum *t = ctx;
    for (long b = lo; b < hi; b++) {
        long j0 = b * MPRT_COLS;
        if (j0 + MPRT_COLS <= t->inner) {
            mprt_col_block(t, j0);
            continue;
        }
        for (long j = j0; j < t->inner; j++) {
            double acc = 0;
            for (long i = 0; i < t->outer; i++)
                acc += t->dy[i * t->inner + j];
            t->out[j] = (float)(t->alpha * acc);
        }
    }
}

/* Whether out keeps exactly the trailing dimensions of dy past some d
 * (all of them size > 1 or not: what matters is the layout). */
static int mprt_keeps_trailing(int rank, const int *keep)
{
    int d = 0;
    while (d < rank && !keep[d])
        d++;
    while (d < rank && keep[d])
        d++;
    return d == rank;
}

/* out = alpha * dy summed over the dimensions where out has size 1
 * (shape: dy's dims; keep[d]: out keeps dimension d). */
MPRT_KERNEL void mprt_sum_to(int rank, const long *shape, const int *keep, const float *dy,
                        float alpha, long n_out, float *out)
{
    if (mprt_keeps_trailing(rank, keep) && n_out > 1) {
        long n = 1;
        for (int d = 0; d < rank; d++)
            n *= shape[d];
        MprtColSum t = {n / n_out, n_out, alpha, dy, out};
        long blocks = (n_out + MPRT_COLS - 1) / MPRT_COLS;
        mprt_par(blocks, mprt_grain_rows(t.outer * MPRT_COLS), mprt_col_sum_piece, &t);
        return;
    }
    double *acc = calloc((size_t)n_out, sizeof *acc);
    long n = 1, idx[8] = {0}, so[8], s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        so[d] = keep[d] ? s : 0;
        if (keep[d])
            s *= shape[d];
        n *= shape[d];
    }
    long io = 0;
    for (long i = 0; i < n; i++) {
        acc[io] += dy[i];
        for (int d = rank - 1; d >= 0; d--) {
            io += so[d];
            if (++idx[d] < shape[d])
                break;
            io -= so[d] * shape[d];
            idx[d] = 0;
        }
    }
    for (long i = 0; i < n_out; i++)
        out[i] = (float)(alpha * acc[i]);
    free(acc);
}

/* ---- row reductions ---- */

/* Sums over a row, in double with four independent accumulators
 * (latency, not the adds, bounds a single chain). */
static double mprt_row_sum(const float *x, long n)
{
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    long m = n & ~3L;
    for (long i = 0; i < m; i += 4)
        a0 += x[i], a1 += x[i + 1], a2 += x[i + 2], a3 += x[i + 3];
    for (long i = m; i < n; i++)
        a0 += x[i];
    return (a0 + a1) + (a2 + a3);
}

/* sum x and sum x^2 over a row, in one pass */
static void mprt_row_sums(const float *x, long n, double *s, double *ss)
{
    double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    long m = n & ~1L;
    for (long i = 0; i < m; i += 2) {
        double u = x[i], v = x[i + 1];
        a0 += u, a1 += v, b0 += u * u, b1 += v * v;
    }
    for (long i = m; i < n; i++)
        a0 += x[i], b0 += (double)x[i] * x[i];
    *s += a0 + a1;
    *ss += b0 + b1;
}

/* One pass over a row of x and dy: the sums of x, x^2, dy and dy * x. */
static void mprt_row_moments_dots(const float *dy, const float *x, long n, double acc[4])
{
    double s0 = 0, s1 = 0, q0 = 0, q1 = 0, d0 = 0, d1 = 0, p0 = 0, p1 = 0;
    long m = n & ~1L;
    for (long i = 0; i < m; i += 2) {
        double u = x[i], v = x[i + 1], du = dy[i], dv = dy[i + 1];
        s0 += u, s1 += v, q0 += u * u, q1 += v * v;
        d0 += du, d1 += dv, p0 += du * u, p1 += dv * v;
    }
    for (long i = m; i < n; i++) {
        double u = x[i], du = dy[i];
        s0 += u, q0 += u * u, d0 += du, p0 += du * u;
    }
    acc[0] += s0 + s1, acc[1] += q0 + q1, acc[2] += d0 + d1, acc[3] += p0 + p1;
}

/* ---- losses ---- */

/* The largest of C elements `stride` apart. */
static float mprt_strided_max(const float *x, long C, long stride)
{
    float mx = x[0];
    for (long c = 1; c < C; c++)
        mx = x[c * stride] > mx ? x[c * stride] : mx;
    return mx;
}

/* A kernel over the lines of an outer x C x inner tensor (the C elements
 * `inner` apart at each outer and inner position), each line whole on one
 * thread: operands, and for the cross-entropy's gradient the labels. */
typedef struct MprtLines {
    long C, inner;
    const float *a, *b;
    const float *bias;   /* the cross-entropy's: each class's, added to its score */
    float *y;
    const int64_t *labels;
    int64_t ignore;
    float scale;
} MprtLines;

/* The first element of line l. */
static inline size_t mprt_line_at(const MprtLines *t, long l)
{
    return (size_t)(l / t->inner) * t->C * t->inner + (size_t)(l % t->inner);
}

/* Class c's score in a line of scores `stride` apart: with a bias (the
 * cross-entropy's, graph/loss.c), the sum the Add before it made. */
static inline float mprt_score_at(const float *xs, long c, long stride, const float *bias)
{
    return bias ? xs[c * stride] + bias[c] : xs[c * stride];
}

/* The log-sum-exp of C scores `stride` apart (plus each class's bias),
 * in double, as a float: log_softmax(x) = x - (max + log sum e^(x - max)),
 * as PyTorch. */
static float mprt_strided_lse(const float *xs, long C, long stride, const float *bias)
{
    float mx = bias ? mprt_score_at(xs, 0, stride, bias) : mprt_strided_max(xs, C, stride);
    for (long c = 1; bias && c < C; c++) {
        float v = mprt_score_at(xs, c, stride, bias);
        mx = v > mx ? v : mx;
    }
    double sum = 0;
    for (long c = 0; c < C; c++)
        sum += exp((double)mprt_score_at(xs, c, stride, bias) - mx);
    return (float)(mx + log(sum));
}

/* Lines [lo, hi) of y = log_softmax(a). */
static void mprt_log_softmax_piece(void *ctx, long lo, long hi)
{
    const MprtLines *t = ctx;
    long C = t->C, inner = t->inner;
    for (long l = lo; l < hi; l++) {
        const float *xs = t->a + mprt_line_at(t, l);
        float *ys = t->y + mprt_line_at(t, l);
        float lse = mprt_strided_lse(xs, C, inner, NULL);
        for (long c = 0; c < C; c++)
            ys[c * inner] = xs[c * inner] - lse;
    }
}

/* Lines [lo, hi) of y[l] = the log-sum-exp of line l of a. */
static void mprt_lse_piece(void *ctx, long lo, long hi)
{
    const MprtLines *t = ctx;
    for (long l = lo; l < hi; l++)
        t->y[l] = mprt_strided_lse(t->a + mprt_line_at(t, l), t->C, t->inner, t->bias);
}

/* Log-softmax over one axis: x is outer x C x inner. */
MPRT_KERNEL void mprt_log_softmax(long outer, long C, long inner, const float *x, float *y)
{
    MprtLines t = {.C = C, .inner = inner, .a = x, .y = y};
    mprt_par(outer * inner, mprt_grain_rows(C * 8), mprt_log_softmax_piece, &t);
}

/* Softmax cross-entropy, mean over the labels that are not ignore_index.
 * scores (N, C, D) with D the product of trailing dims; labels (N, D);
 * logp receives the log-probabilities for the backward pass. */
MPRT_KERNEL void mprt_sce(int N, int C, long D, const float *x, const int64_t *labels,
                     int64_t ignore, float *loss, float *logp)
{
    mprt_log_softmax(N, C, D, x, logp);
    double total = 0;
    long count = 0;
    for (long i = 0; i < (long)N * D; i++) {
        int64_t t = labels[i];
        if (t == ignore)
            continue;
        total -= logp[((size_t)(i / D) * C + t) * D + i % D];
        count++;
    }
    *loss = count ? (float)(total / count) : 0.0f;
}

/* mprt_sce keeping each line's log-sum-exp (N x D, the labels' shape)
 * instead of the log-probabilities: the same loss, x - lse at each label.
 * The scores x + bias (bias NULL, or C floats: graph/loss.c folds the Add
 * of a head's bias into the loss). */
MPRT_KERNEL void mprt_sce_lse(int N, int C, long D, const float *x, const float *bias,
                              const int64_t *labels, int64_t ignore, float *loss, float *lse)
{
    MprtLines t = {.C = C, .inner = D, .a = x, .bias = bias, .y = lse};
    mprt_par((long)N * D, mprt_grain_rows((long)C * 8), mprt_lse_piece, &t);
    double total = 0;
    long count = 0;
    for (long i = 0; i < (long)N * D; i++) {
        int64_t l = labels[i];
        if (l == ignore)
            continue;
        total -= mprt_score_at(x + (size_t)(i / D) * C * D + i % D, l, D, bias) - lse[i];
        count++;
    }
    *loss = count ? (float)(total / count) : 0.0f;
}

/* Lines [lo, hi) of the cross-entropy's gradient: (softmax - one-hot) *
 * scale, 0 where the label is ignored. Line l is label l's. a holds the
 * log-probabilities, or with b each line's log-sum-exp the scores, whose
 * log-probability x - lse is made as mprt_sce_lse made it. */
static void mprt_sce_grad_piece(void *ctx, long lo, long hi)
{
    const MprtLines *t = ctx;
    for (long l = lo; l < hi; l++) {
        int64_t label = t->labels[l];
        size_t at = mprt_line_at(t, l);
        float lse = t->b ? t->b[l] : 0.0f;
        for (long c = 0; c < t->C; c++) {
            size_t i = at + (size_t)c * t->inner;
            float lp = t->b ? mprt_score_at(t->a + at, c, t->inner, t->bias) - lse : t->a[i];
            t->y[i] = label == t->ignore ? 0.0f : (mprt_expf(lp) - (c == label)) * t->scale;
        }
    }
}

/* dloss over the count of labels that are not `ignore` (0 if none). */
static float mprt_sce_scale(int N, long D, const float *dloss, const int64_t *labels,
                            int64_t ignore)
{
    long count = 0;
    for (long i = 0; i < (long)N * D; i++)
        count += labels[i] != ignore;
    return count ? dloss[0] / (float)count : 0.0f;
}

MPRT_KERNEL void mprt_sce_grad(int N, int C, long D, const float *dloss, const float *logp,
                          const int64_t *labels, int64_t ignore, float *dx)
{
    MprtLines t = {.C = C, .inner = D, .a = logp, .y = dx, .labels = labels, .ignore = ignore,
                   .scale = mprt_sce_scale(N, D, dloss, labels, ignore)};
    mprt_par((long)N * D, mprt_grain_rows((long)C * 4), mprt_sce_grad_piece, &t);
}

/* The gradient of mprt_sce_lse from the scores x (+ bias) and each
 * line's lse. */
MPRT_KERNEL void mprt_sce_lse_grad(int N, int C, long D, const float *dloss, const float *x,
                                   const float *bias, const float *lse, const int64_t *labels,
                                   int64_t ignore, float *dx)
{
    MprtLines t = {.C = C, .inner = D, .a = x, .b = lse, .bias = bias, .y = dx, .labels = labels,
                   .ignore = ignore, .scale = mprt_sce_scale(N, D, dloss, labels, ignore)};
    mprt_par((long)N * D, mprt_grain_rows((long)C * 4), mprt_sce_grad_piece, &t);
}

MPRT_KERNEL void mprt_mse(long n, const float *x, const float *t, float *loss)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += (double)(x[i] - t[i]) * (x[i] - t[i]);
    *loss = (float)(s / n);
}

static void mprt_mse_grad_piece(void *ctx, long lo, long hi)
{
    const MprtEw *t = ctx;
    for (long i = lo; i < hi; i++)
        t->y[i] = (t->a[i] - t->b[i]) * t->p;
}

MPRT_KERNEL void mprt_mse_grad(long n, const float *dloss, const float *x, const float *t, float *dx)
{
    MprtEw e = {.a = x, .b = t, .y = dx, .p = 2.0f * dloss[0] / (float)n};
    mprt_par(n, MPRT_GRAIN, mprt_mse_grad_piece, &e);
}

/* ---- convolution (1-D, 2-D and 3-D) as im2col + GEMM ---- */

/* The output positions o whose input position o * stride - pad + k * dil
 * lies inside [0, n): [lo, hi). */
static inline void mprt_valid_range(int n, int out, int stride, int pad, int k, int dil,
                                    int *lo, int *hi)
{
    int off = k * dil - pad;   /* input = o * stride + off */
    int a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int b = n - off <= 0 ? 0 : (n - off + stride - 1) / stride;
    *lo = a < out ? a : out;
    *hi = b < out ? b : out;
    if (*hi < *lo)
        *hi = *lo;
}

/* The input row that output row r (r = od * OH + oh) reads through taps
 * kd and kh of channel c: its offset in the image, or -1 when the tap
 * lies in the padding. */
static inline long mprt_conv_row(const MprtConv *p, int c, int kd, int kh, int r)
{
    int od = r / p->OH, oh = r - od * p->OH;
    int id = od * p->sd - p->pd + kd * p->dd, ih = oh * p->sh - p->ph + kh * p->dh;
    if (id < 0 || id >= p->D || ih < 0 || ih >= p->H)
        return -1;
    return (((long)c * p->D + id) * p->H + ih) * p->W;
}

typedef struct MprtIm2col {
    const MprtConv *p;
    const float *x;
    float *col;
    size_t ld;
} MprtIm2col;

/* Channels [lo, hi) of mprt_im2col. */
static void mprt_im2col_piece(void *ctx, long lo, long hi)
{
    const MprtIm2col *t = ctx;
    const MprtConv *p = t->p;
    const float *x = t->x;
    float *col = t->col;
    size_t ld = t->ld;
    int rows = p->OD * p->OH;
    for (int c = (int)lo; c < hi; c++)
        for (int kd = 0; kd < p->KD; kd++)
            for (int kh = 0; kh < p->KH; kh++)
                for (int kw = 0; kw < p->KW; kw++) {
                    long tap = ((long)(c * p->KD + kd) * p->KH + kh) * p->KW + kw;
                    float *row = col + (size_t)tap * ld;
                    int w0, w1;
                    mprt_valid_range(p->W, p->OW, p->sw, p->pw, kw, p->dw, &w0, &w1);
                    for (int o = 0; o < rows; o++) {
                        long in = mprt_conv_row(p, c, kd, kh, o);
                        float *r = row + (size_t)o * p->OW;
                        if (in < 0) {
                            memset(r, 0, (size_t)p->OW * sizeof *r);
                            continue;
                        }
                        const float *xs = x + in + kw * p->dw - p->pw;
                        for (int ow = 0; ow < w0; ow++)
                            r[ow] = 0.0f;
                        if (p->sw == 1)
                            memcpy(r + w0, xs + w0, (size_t)(w1 - w0) * sizeof *r);
                        else
                            for (int ow = w0; ow < w1; ow++)
                                r[ow] = xs[(size_t)ow * p->sw];
                        for (int ow = w1; ow < p->OW; ow++)
                            r[ow] = 0.0f;
                    }
                }
}

/* One image's patches as columns: row (c, kd, kh, kw) of col, ld floats
 * apart, holds that tap for every output position; channels on the
 * device's threads. */
MPRT_KERNEL void mprt_im2col(const MprtConv *p, const float *x, float *col, size_t ld)
{
    long per_channel = mprt_conv_taps(p) * mprt_conv_out_plane(p);
    mprt_par(p->C / p->group, mprt_grain_rows(per_channel), mprt_im2col_piece,
             &(MprtIm2col){p, x, col, ld});
}

MPRT_KERNEL void mprt_col2im(const MprtConv *p, const float *col, size_t ld, float *x)
{
    int cg = p->C / p->group, rows = p->OD * p->OH;
    for (int c = 0; c < cg; c++)
        for (int kd = 0; kd < p->KD; kd++)
            for (int kh = 0; kh < p->KH; kh++)
                for (int kw = 0; kw < p->KW; kw++) {
                    long tap = ((long)(c * p->KD + kd) * p->KH + kh) * p->KW + kw;
                    const float *row = col + (size_t)tap * ld;
                    int w0, w1;
                    mprt_valid_range(p->W, p->OW, p->sw, p->pw, kw, p->dw, &w0, &w1);
                    for (int o = 0; o < rows; o++) {
                        long in = mprt_conv_row(p, c, kd, kh, o);
                        if (in < 0)
                            continue;
                        float *xs = x + in + kw * p->dw - p->pw;
                        const float *r = row + (size_t)o * p->OW;
                        for (int ow = w0; ow < w1; ow++)
                            xs[(size_t)ow * p->sw] += r[ow];
                    }
                }
}

/* Between one group's block of an [N, C, P] tensor (C = G * cg channels)
 * and the GEMM's layout of it, cg x N*P: image n's rows at column n*P. */
static void mprt_gather_images(int N, int C, int cg, int g, long P, const float *x, float *t)
{
    for (int n = 0; n < N; n++)
        for (int c = 0; c < cg; c++)
            memcpy(t + (size_t)c * N * P + (size_t)n * P, x + ((size_t)n * C + g * cg + c) * P,
                   (size_t)P * sizeof *t);
}

static void mprt_scatter_images(int N, int C, int cg, int g, long P, const float *t, float *x)
{
    for (int n = 0; n < N; n++)
        for (int c = 0; c < cg; c++)
            memcpy(x + ((size_t)n * C + g * cg + c) * P, t + (size_t)c * N * P + (size_t)n * P,
                   (size_t)P * sizeof *t);
}

/* Where image n's channels of group g start in an input [N, C, D, H, W]. */
static inline size_t mprt_conv_group_at(const MprtConv *p, int n, int g)
{
    return ((size_t)n * p->C + (size_t)g * (p->C / p->group)) * mprt_conv_in_plane(p);
}

/* Every image's patches of group g side by side: K x N*P. */
static void mprt_im2col_batch(const MprtConv *p, const float *x, int g, float *col)
{
    long P = mprt_conv_out_plane(p);
    for (int n = 0; n < p->N; n++)
        mprt_im2col(p, x + mprt_conv_group_at(p, n, g), col + (size_t)n * P, (size_t)p->N * P);
}

/* Convolution as im2col + one GEMM per image and group, the patches in
 * col (K x P floats, from the device's scratch); with small output planes
 * (mprt_conv_batched) one GEMM per group over every image's patches,
 * side by side (K x N*P, then the output mg x N*P after them). (GEMMs over
 * several images at once measured slower on large planes: the copies in
 * and out cost more than the larger GEMMs gain.) */
MPRT_KERNEL void mprt_conv(const MprtConv *p, const float *x, const float *w, const float *b,
                           float *y, float *col)
{
    int cg = p->C / p->group, mg = p->M / p->group;
    int K = (int)(cg * mprt_conv_taps(p)), P = (int)mprt_conv_out_plane(p);
    int batched = mprt_conv_batched(p);
    long NP = (long)p->N * P;
    for (int g = 0; g < p->group && batched; g++) {
        float *out = col + (size_t)K * NP;
        mprt_im2col_batch(p, x, g, col);
        mprt_sgemm(0, 0, mg, (int)NP, K, 1.0f, w + (size_t)g * mg * K, K, col, (int)NP, 0.0f, out,
                   (int)NP);
        mprt_scatter_images(p->N, p->M, mg, g, P, out, y);
    }
    for (int n = 0; n < p->N; n++)
        for (int g = 0; g < p->group; g++) {
            float *yg = y + ((size_t)n * p->M + (size_t)g * mg) * P;
            if (!batched) {
                mprt_im2col(p, x + mprt_conv_group_at(p, n, g), col, P);
                mprt_sgemm(0, 0, mg, P, K, 1.0f, w + (size_t)g * mg * K, K, col, P, 0.0f, yg, P);
            }
            if (b)
                for (int m = 0; m < mg; m++)
                    for (int i = 0; i < P; i++)
                        yg[(size_t)m * P + i] += b[g * mg + m];
        }
}

MPRT_KERNEL void mprt_conv_grad_x(const MprtConv *p, const float *dy, const float *w, float *dx,
                                  float *col)
{
    int cg = p->C / p->group, mg = p->M / p->group;
    int K = (int)(cg * mprt_conv_taps(p)), P = (int)mprt_conv_out_plane(p);
    int batched = mprt_conv_batched(p);
    long NP = (long)p->N * P;
    memset(dx, 0, (size_t)p->N * p->C * mprt_conv_in_plane(p) * sizeof *dx);
    for (int g = 0; g < p->group && batched; g++) {
        float *dys = col + (size_t)K * NP;   /* dy of the group, mg x N*P */
        mprt_gather_images(p->N, p->M, mg, g, P, dy, dys);
        mprt_sgemm(1, 0, K, (int)NP, mg, 1.0f, w + (size_t)g * mg * K, K, dys, (int)NP, 0.0f, col,
                   (int)NP);
        for (int n = 0; n < p->N; n++)
            mprt_col2im(p, col + (size_t)n * P, (size_t)NP,
                        dx + mprt_conv_group_at(p, n, g));
    }
    for (int n = 0; n < p->N && !batched; n++)
        for (int g = 0; g < p->group; g++) {
            mprt_sgemm(1, 0, K, P, mg, 1.0f, w + (size_t)g * mg * K, K,
                       dy + ((size_t)n * p->M + (size_t)g * mg) * P, P, 0.0f, col, P);
            mprt_col2im(p, col, P, dx + mprt_conv_group_at(p, n, g));
        }
}

MPRT_KERNEL void mprt_conv_grad_w(const MprtConv *p, const float *dy, const float *x, float *dw,
                                  float *col)
{
    int cg = p->C / p->group, mg = p->M / p->group;
    int K = (int)(cg * mprt_conv_taps(p)), P = (int)mprt_conv_out_plane(p);
    int batched = mprt_conv_batched(p);
    long NP = (long)p->N * P;
    for (int g = 0; g < p->group && batched; g++) {
        float *dys = col + (size_t)K * NP;
        mprt_im2col_batch(p, x, g, col);
        mprt_gather_images(p->N, p->M, mg, g, P, dy, dys);
        mprt_sgemm(0, 1, mg, K, (int)NP, 1.0f, dys, (int)NP, col, (int)NP, 0.0f,
                   dw + (size_t)g * mg * K, K);
    }
    for (int n = 0; n < p->N && !batched; n++)
        for (int g = 0; g < p->group; g++) {
            mprt_im2col(p, x + mprt_conv_group_at(p, n, g), col, P);
            mprt_sgemm(0, 1, mg, K, P, 1.0f, dy + ((size_t)n * p->M + (size_t)g * mg) * P, P, col,
                       P, n ? 1.0f : 0.0f, dw + (size_t)g * mg * K, K);
        }
}

/* ConvTranspose as the data gradient of the convolution it inverts: p
 * describes that convolution (its input is y, N x C x D x H x W; its
 * output is x, N x M x OD x OH x OW; w is M x C/group x KD x KH x KW),
 * then the bias per channel of y. */
MPRT_KERNEL void mprt_conv_transpose(const MprtConv *p, const float *x, const float *w,
                                     const float *b, float *y, float *col)
{
    mprt_conv_grad_x(p, x, w, y, col);
    if (!b)
        return;
    size_t plane = (size_t)mprt_conv_in_plane(p);
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++) {
            float *yc = y + ((size_t)n * p->C + c) * plane;
            for (size_t i = 0; i < plane; i++)
                yc[i] += b[c];
        }
}

/* d bias[m] = sum over n and positions of dy[n, m, :] */
static void mprt_channel_sum_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    for (long m = lo; m < hi; m++) {
        double s = 0;
        for (int n = 0; n < t->N; n++)
            s += mprt_row_sum(t->dy + ((size_t)n * t->C + m) * t->P, t->P);
        t->y[m] = (float)s;
    }
}

MPRT_KERNEL void mprt_channel_sum(int N, int M, long P, const float *dy, float *db)
{
    MprtBn t = {.N = N, .C = M, .P = P, .dy = dy, .y = db};
    mprt_par(M, mprt_grain_rows((long)N * P), mprt_channel_sum_piece, &t);
}

/* ---- batch normalization ---- */

/* Every kernel here walks x in memory order, image by image and channel by
 * channel within it, keeping per-channel sums: with small planes (a 4 x 4
 * feature map is 64 bytes), going channel by channel would touch one short
 * row in each image, pages apart, and wait on memory for every one when x
 * is not in the cache (a saved activation read by the backward pass). Each
 * channel's sums still add its rows in image order, as one channel at a
 * time would. On several threads, each takes a block of channels (for the
 * sums) or of planes (to write y or dx), and walks it the same way. */

/* n values of y, a batch norm's output, made y + add (y rounded to bf16
 * first with MPRT_BN_ROUND) and max(y, 0) with MPRT_BN_RELU, as its
 * residual Add and ReLU made them (mprt_add, mprt_relu): the same bits. */
static void mprt_bn_fused(int fuse, long n, const float *add, float *y)
{
    if (fuse & MPRT_BN_ROUND)
        for (long i = 0; i < n; i++)
            y[i] = mprt_f32_of(mprt_bf16_of(y[i]));
    for (long i = 0; i < n; i++)
        y[i] = (fuse & MPRT_BN_RELU) ? mprt_select(y[i] + add[i] > 0.0f, y[i] + add[i])
                                     : y[i] + add[i];
}

/* Planes [lo, hi) of y = (x - m[c]) * a[c] + b[c] (subtracting the mean
 * first keeps what a large mean would cancel), then max(y, 0) with
 * MPRT_BN_RELU: mprt_relu's select, so the same bits as the two kernels;
 * with add, mprt_bn_fused. */
static void mprt_bn_apply_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    for (long nc = lo; nc < hi; nc++) {
        int c = (int)(nc % t->C);
        size_t k = (size_t)nc * t->P;
        float mc = t->m[c], ac = t->a[c], bc = t->b[c];
        float *y = t->y + k;
        const float *x = t->x + k;
        if (t->add) {
            for (long i = 0; i < t->P; i++)
                y[i] = (x[i] - mc) * ac + bc;
            mprt_bn_fused(t->fuse, t->P, t->add + k, y);
        } else if (t->fuse & MPRT_BN_RELU)
            for (long i = 0; i < t->P; i++) {
                float v = (x[i] - mc) * ac + bc;
                y[i] = mprt_select(v > 0.0f, v);
            }
        else
            for (long i = 0; i < t->P; i++)
                y[i] = (x[i] - mc) * ac + bc;
    }
}

static void mprt_bn_apply(const MprtBn *t)
{
    mprt_par((long)t->N * t->C, mprt_grain_rows(t->P), mprt_bn_apply_piece, (void *)t);
}

/* Scratch for one call: `arrays` arrays of C elements of `size` bytes. */
static void *mprt_bn_scratch(int C, size_t size, int arrays)
{
    void *p = calloc((size_t)C * arrays, size);
    if (!p) {
        fprintf(stderr, "train: error: out of memory in BatchNormalization (%d channels)\n", C);
        exit(1);
    }
    return p;
}

/* Inference (mprt_training == 0): Y = (X - running_mean) /
 * sqrt(running_var + eps) * scale + bias; the running statistics stay.
 * fuse and add as for mprt_bn_train. */
MPRT_KERNEL void mprt_bn_infer(int N, int C, long P, const float *x, const float *scale,
                          const float *bias, const float *running_mean,
                          const float *running_var, float eps, int fuse, const float *add,
                          float *y)
{
    int relu = (fuse & MPRT_BN_RELU) && !add;
    float *inv = mprt_bn_scratch(C, sizeof(float), 1);
    for (int c = 0; c < C; c++)
        inv[c] = (float)(1.0 / sqrt((double)running_var[c] + eps));
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t k = ((size_t)n * C + c) * P;
            float m = running_mean[c], i = inv[c], s = scale[c], b = bias[c];
            for (long j = 0; j < P; j++) {   /* the CUDA kernel's order of operations */
                float v = (x[k + j] - m) * i * s + b;
                y[k + j] = relu ? mprt_select(v > 0.0f, v) : v;
            }
            if (add)
                mprt_bn_fused(fuse, P, add + k, y + k);
        }
    free(inv);
}

/* The batch mean and (population) variance of every channel, from sums of
 * x and x^2 in double (exact enough unless mean^2 exceeds the variance by
 * ~1e10, far outside what activations do): mean[C], var[C]. */
static void mprt_bn_sums_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    for (int n = 0; n < t->N; n++)
        for (long c = lo; c < hi; c++) {
            size_t o = ((size_t)n * t->C + c) * t->P;
            double *a = t->acc + (size_t)t->width * c;
            if (t->dy)
                mprt_row_moments_dots(t->dy + o, t->x + o, t->P, a);
            else
                mprt_row_sums(t->x + o, t->P, &a[0], &a[1]);
        }
}

/* Per channel, over every image in order: sum x and x^2 (width 2), or
 * with dy also sum dy and dy * x (width 4), into acc (zeroed). */
static void mprt_bn_sums(int N, int C, long P, const float *x, const float *dy, double *acc)
{
    MprtBn t = {.N = N, .C = C, .P = P, .x = x, .dy = dy, .acc = acc, .width = dy ? 4 : 2};
    mprt_par(C, mprt_grain_rows((long)N * P), mprt_bn_sums_piece, &t);
}

/* Training's per-channel factors from the sums of x and x^2 (acc, width
 * 2): y = (x - m[c]) * a[c] + bias[c]; the running statistics move (see
 * mprt_bn_train). Any layout's sums, taken in the same order, give the
 * same factors. */
static void mprt_bn_train_factors(int C, long cnt, const double *acc, const float *scale,
                                  float *running_mean, float *running_var, float momentum,
                                  float eps, float *a, float *m)
{
    double *mean = mprt_bn_scratch(C, sizeof(double), 2), *var = mean + C;
    for (int c = 0; c < C; c++)
        mean[c] = acc[2 * c], var[c] = acc[2 * c + 1];
    for (int c = 0; c < C; c++) {
        mean[c] /= (double)cnt;
        var[c] = var[c] / (double)cnt - mean[c] * mean[c];
        var[c] = var[c] > 0 ? var[c] : 0;
    }
    for (int c = 0; c < C; c++) {
        float inv = (float)(1.0 / sqrt(var[c] + eps));
        a[c] = inv * scale[c];
        m[c] = (float)mean[c];
        if (!running_mean)   /* recomputing: the statistics were updated already */
            continue;
        running_mean[c] = momentum * running_mean[c] + (1 - momentum) * m[c];
        running_var[c] = momentum * running_var[c] +
                         (1 - momentum) * (float)(cnt > 1 ? var[c] * cnt / (cnt - 1) : var[c]);
    }
    free(mean);
}

/* Training: Y = (X - mean) / sqrt(var + eps) * scale + bias with the
 * batch's statistics; running stats move by momentum (ONNX's convention:
 * new = momentum * old + (1 - momentum) * batch), the variance unbiased as
 * in PyTorch. In the same pass (graph/simplify.c), with add (not NULL) Y
 * + add, Y rounded to bf16 first where fuse has MPRT_BN_ROUND: a residual
 * Add; with MPRT_BN_RELU, then max(Y, 0): the ReLU after it. In inference
 * mode (mprt_training == 0), mprt_bn_infer. */
MPRT_KERNEL void mprt_bn_train(int N, int C, long P, const float *x, const float *scale,
                          const float *bias, float *running_mean, float *running_var,
                          float momentum, float eps, int fuse, const float *add, float *y)
{
    if (!mprt_training) {
        mprt_bn_infer(N, C, P, x, scale, bias, running_mean, running_var, eps, fuse, add, y);
        return;
    }
    double *acc = mprt_bn_scratch(C, sizeof(double), 2);
    float *a = mprt_bn_scratch(C, sizeof(float), 2), *m = a + C;
    mprt_bn_sums(N, C, P, x, NULL, acc);
    mprt_bn_train_factors(C, (long)N * P, acc, scale, running_mean, running_var, momentum, eps,
                          a, m);
    mprt_bn_apply(&(MprtBn){.N = N, .C = C, .P = P, .x = x, .m = m, .a = a, .b = bias,
                            .fuse = fuse, .add = add, .y = y});
    free(acc);
    free(a);
}

/* One pass over x and dy for the statistics and the two sums the gradient
 * needs (in double: sum dy * (x - mean) = sum dy * x - mean * sum dy loses
 * nothing a float gradient keeps), a second to write
 * dx = scale * inv * (dy - sdy/cnt - (x - mean) * inv^2 * sdyx/cnt). */
/* Planes [lo, hi) of dx, from the factors k (4 per channel). */
static void mprt_bn_grad_piece(void *ctx, long lo, long hi)
{
    const MprtBn *t = ctx;
    for (long nc = lo; nc < hi; nc++) {
        size_t o = (size_t)nc * t->P;
        const float *d = t->dy + o, *xs = t->x + o, *kc = t->k + 4 * (size_t)(nc % t->C);
        float k1 = kc[0], k0 = kc[1], k2 = kc[2], m = kc[3];
        float *dx = t->y + o;
        for (long i = 0; i < t->P; i++)
            dx[i] = k1 * (d[i] - k0 - (xs[i] - m) * k2);
    }
}

/* The gradient's per-channel factors k (4 a channel: see
 * mprt_bn_grad_piece) and dscale, dbias from the sums of x, x^2, dy and
 * dy * x (acc, width 4). */
static void mprt_bn_grad_factors(int C, long cnt, const double *acc, const float *scale,
                                 float eps, float *k, float *dscale, float *dbias)
{
    for (int c = 0; c < C; c++) {
        const double *s = acc + 4 * (size_t)c;
        double mean = s[0] / cnt, var = s[1] / cnt - mean * mean;
        var = var > 0 ? var : 0;
        double sdy = s[2], sdyx = s[3] - mean * sdy, inv = 1.0 / sqrt(var + eps);
        dscale[c] = (float)(sdyx * inv);
        dbias[c] = (float)sdy;
        float *kc = k + 4 * (size_t)c;
        kc[0] = (float)(scale[c] * inv), kc[1] = (float)(sdy / cnt);
        kc[2] = (float)(inv * inv * sdyx / cnt), kc[3] = (float)mean;
    }
}

/* The dy a batch norm's gradient reads. With z (the output of a batch
 * norm with its ReLU), dy is the ReLU's output's gradient: the ReLU's
 * gradient (mprt_relu_grad) goes into dx first, and the batch norm's reads
 * it there and overwrites it, element by element: the same bits as the
 * two kernels, in the memory of one. */
static const float *mprt_bn_dy(long n, const float *dy, const float *z, float *dx)
{
    if (!z)
        return dy;
    mprt_relu_grad(n, dy, z, dx);
    return dx;
}

MPRT_KERNEL void mprt_bn_grad(int N, int C, long P, const float *dy, const float *z,
                         const float *x, const float *scale, float eps, float *dx,
                         float *dscale, float *dbias)
{
    dy = mprt_bn_dy((long)N * C * P, dy, z, dx);
    double *acc = mprt_bn_scratch(C, sizeof(double), 4);
    float *k = mprt_bn_scratch(C, sizeof(float), 4);
    mprt_bn_sums(N, C, P, x, dy, acc);
    mprt_bn_grad_factors(C, (long)N * P, acc, scale, eps, k, dscale, dbias);
    MprtBn t = {.N = N, .C = C, .P = P, .x = x, .dy = dy, .k = k, .y = dx};
    mprt_par((long)N * C, mprt_grain_rows(P), mprt_bn_grad_piece, &t);
    free(acc);
    free(k);
}

/* ---- pooling (1-D, 2-D and 3-D) ---- */

/* Max pooling; idx (may be NULL) receives ONNX's Indices: the flat index
 * of each maximum in x (storage order 0). A window that lies entirely in
 * the padding gives -inf and index -1. */
/* One output row r (r = od * OH + oh), tap by tap: for each tap (kd, kh,
 * kw) of the window, every output position whose tap lies inside the input
 * takes the value if it is larger (or NaN, which sticks). The loop over
 * positions has no dependence between iterations and no branch. */
static void mprt_maxpool_row(const MprtPool *p, const float *xs, int r, float *y, long *best)
{
    int od = r / p->OH, oh = r - od * p->OH;
    int d0 = od * p->sd - p->pd, h0 = oh * p->sh - p->ph;
    for (int ow = 0; ow < p->OW; ow++)
        y[ow] = -INFINITY, best[ow] = -1;
    for (int kd = 0; kd < p->KD; kd++) {
        int id = d0 + kd * p->dd;
        for (int kh = 0; kh < p->KH && id >= 0 && id < p->D; kh++) {
            int ih = h0 + kh * p->dh;
            if (ih < 0 || ih >= p->H)
                continue;
            for (int kw = 0; kw < p->KW; kw++) {
                int o0, o1;
                mprt_valid_range(p->W, p->OW, p->sw, p->pw, kw, p->dw, &o0, &o1);
                long base = ((long)id * p->H + ih) * p->W + kw * p->dw - p->pw;
                for (int ow = o0; ow < o1; ow++) {
                    long k = base + (long)ow * p->sw;
                    float v = xs[k], bv = y[ow];
                    long m = -(long)((v > bv) | (v != v) | (best[ow] < 0));
                    y[ow] = mprt_pick((int)m, v, bv);
                    best[ow] ^= (best[ow] ^ k) & m;
                }
            }
        }
    }
}

/* A pooling call's operands, for the planes a thread takes. */
typedef struct MprtPoolCall {
    const MprtPool *p;
    float *x, *y;
    int64_t *idx;
    int back;
} MprtPoolCall;

static void mprt_maxpool_piece(void *ctx, long lo, long hi)
{
    const MprtPoolCall *t = ctx;
    const MprtPool *p = t->p;
    const float *x = t->x;
    float *y = t->y;
    int64_t *idx = t->idx;
    size_t plane = (size_t)p->D * p->H * p->W, oplane = (size_t)p->OD * p->OH * p->OW;
    for (long nc = lo; nc < hi; nc++) {
        long stack[512], *best = p->OW <= 512 ? stack : malloc((size_t)p->OW * sizeof *best);
        if (!best) {
            fprintf(stderr, "train: error: out of memory in max pooling\n");
            exit(1);
        }
        for (int r = 0; r < p->OD * p->OH; r++) {
            size_t o = nc * oplane + (size_t)r * p->OW;
            mprt_maxpool_row(p, x + nc * plane, r, y + o, best);
            if (idx)
                for (int ow = 0; ow < p->OW; ow++)
                    idx[o + ow] = best[ow] < 0 ? -1 : (int64_t)(nc * plane) + best[ow];
        }
        if (best != stack)
            free(best);
    }
}

MPRT_KERNEL void mprt_maxpool(const MprtPool *p, const float *x, float *y, int64_t *idx)
{
    long planes = (long)p->N * p->C, out = (long)p->OD * p->OH * p->OW * p->KD * p->KH * p->KW;
    MprtPoolCall t = {.p = p, .x = (float *)x, .y = y, .idx = idx};
    mprt_par(planes, mprt_grain_rows(out), mprt_maxpool_piece, &t);
}

/* dx = 0, then each output's gradient goes to the input its maximum came
 * from (Indices from the forward pass). */
MPRT_KERNEL void mprt_maxpool_grad(long n_out, long n_in, const float *dy, const int64_t *idx,
                                   float *dx)
{
    memset(dx, 0, (size_t)n_in * sizeof *dx);
    for (long i = 0; i < n_out; i++)
        if (idx[i] >= 0)
            dx[idx[i]] += dy[i];
}

/* One average-pooling window along a dim: [lo, hi) inside the input and
 * the divisor's share (the window clipped to the padded input, or to the
 * input), as PyTorch's avg_pool2d. */
static int mprt_avg_window(int o, int stride, int pad, int k, int n, int end_pad,
                           int include_pad, int *lo, int *hi)
{
    int s = o * stride - pad, e = s + k < n + end_pad ? s + k : n + end_pad;
    int padded = e - s;
    *lo = s > 0 ? s : 0;
    *hi = e < n ? e : n;
    return include_pad ? padded : *hi - *lo;
}

static void mprt_avgpool_piece(void *ctx, long lo, long hi)
{
    const MprtPoolCall *t = ctx;
    const MprtPool *p = t->p;
    float *x = t->x, *y = t->y;
    int back = t->back;
    size_t plane = (size_t)p->D * p->H * p->W, oplane = (size_t)p->OD * p->OH * p->OW;
    int cip = p->count_include_pad;
    if (back)
        memset(x + lo * plane, 0, (size_t)(hi - lo) * plane * sizeof *x);
    for (long nc = lo; nc < hi; nc++)
        for (int r = 0; r < p->OD * p->OH; r++) {
            int od = r / p->OH, oh = r - od * p->OH, d0, d1, h0, h1, w0, w1;
            int dd = mprt_avg_window(od, p->sd, p->pd, p->KD, p->D, p->ed, cip, &d0, &d1);
            int dh = mprt_avg_window(oh, p->sh, p->ph, p->KH, p->H, p->eh, cip, &h0, &h1);
            for (int ow = 0; ow < p->OW; ow++) {
                int dw = mprt_avg_window(ow, p->sw, p->pw, p->KW, p->W, p->ew, cip, &w0, &w1);
                float *xs = x + nc * plane, *yo = y + nc * oplane + (size_t)r * p->OW + ow;
                int count = dd * dh * dw;
                float inv = count > 0 ? 1.0f / (float)count : 0.0f;
                double sum = 0;
                for (int id = d0; id < d1; id++)
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            size_t k = ((size_t)id * p->H + ih) * p->W + iw;
                            if (back)
                                xs[k] += *yo * inv;
                            else
                                sum += xs[k];
                        }
                if (!back)
                    *yo = (float)(sum * inv);
            }
        }
}

/* Average pooling (back == 0: y from x) and its gradient (back != 0: dx
 * from dy, each output's gradient spread evenly over its window); planes
 * on the device's threads, each whole on one. */
MPRT_KERNEL void mprt_avgpool(int back, const MprtPool *p, float *x, float *y)
{
    long planes = (long)p->N * p->C, out = (long)p->OD * p->OH * p->OW * p->KD * p->KH * p->KW;
    MprtPoolCall t = {.p = p, .x = x, .y = y, .back = back};
    mprt_par(planes, mprt_grain_rows(out), mprt_avgpool_piece, &t);
}

/* Rows of P (.n): a mean per row, or a row per gradient. */
static void mprt_gap_piece(void *ctx, long lo, long hi)
{
    const MprtEw *e = ctx;
    long P = e->n;
    for (long i = lo; i < hi; i++) {
        double s = 0;
        for (long k = 0; k < P; k++)
            s += e->a[(size_t)i * P + k];
        e->y[i] = (float)(s / P);
    }
}

MPRT_KERNEL void mprt_gap(long NC, long P, const float *x, float *y)
{
    mprt_par(NC, mprt_grain_rows(P), mprt_gap_piece, &(MprtEw){.a = x, .y = y, .n = P});
}

static void mprt_gap_grad_piece(void *ctx, long lo, long hi)
{
    const MprtEw *e = ctx;
    long P = e->n;
    for (long i = lo; i < hi; i++)
        for (long k = 0; k < P; k++)
            e->y[(size_t)i * P + k] = e->a[i] / (float)P;
}

MPRT_KERNEL void mprt_gap_grad(long NC, long P, const float *dy, float *dx)
{
    mprt_par(NC, mprt_grain_rows(P), mprt_gap_grad_piece,
             &(MprtEw){.a = dy, .y = dx, .n = P});
}

/* ---- optimizers (as torch.optim) ---- */

/* An optimizer step's operands, for the elements a thread takes. */
typedef struct MprtOpt {
    float *w, *buf, *m, *v;
    const float *g;
    float scale, lr, momentum, wd, b1, b2, eps, step_size, bc2s;
    int nesterov, first;
} MprtOpt;

static void mprt_sgd_piece(void *ctx, long lo, long hi)
{
    const MprtOpt *o = ctx;
    float *w = o->w, *buf = o->buf, scale = o->scale, lr = o->lr, momentum = o->momentum;
    float wd = o->wd;
    const float *g = o->g;
    int nesterov = o->nesterov, first = o->first;
    for (long i = lo; i < hi; i++) {
        float d = g[i] * scale + wd * w[i];
        if (buf) {
            buf[i] = first ? d : momentum * buf[i] + d;
            d = nesterov ? d + momentum * buf[i] : buf[i];
        }
        w[i] -= lr * d;
    }
}

MPRT_KERNEL void mprt_sgd(long n, float *w, const float *g, float *buf, float scale, float lr,
                     float momentum, float wd, int nesterov, int first)
{
    MprtOpt o = {.w = w, .g = g, .buf = buf, .scale = scale, .lr = lr, .momentum = momentum,
                 .wd = wd, .nesterov = nesterov, .first = first};
    mprt_par(n, MPRT_GRAIN, mprt_sgd_piece, &o);
}

static void mprt_adamw_piece(void *ctx, long lo, long hi)
{
    const MprtOpt *o = ctx;
    float *w = o->w, *m = o->m, *v = o->v, scale = o->scale, lr = o->lr, wd = o->wd;
    float b1 = o->b1, b2 = o->b2, eps = o->eps, step_size = o->step_size, bc2s = o->bc2s;
    const float *g = o->g;
    for (long i = lo; i < hi; i++) {
        float gi = g[i] * scale;
        w[i] *= 1.0f - lr * wd;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2s + eps);
    }
}

MPRT_KERNEL void mprt_adamw(long n, float *w, const float *g, float *m, float *v, float scale,
                       float lr, float b1, float b2, float eps, float wd, long step)
{
    float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
    MprtOpt o = {.w = w, .g = g, .m = m, .v = v, .scale = scale, .lr = lr, .b1 = b1, .b2 = b2,
                 .eps = eps, .wd = wd, .step_size = lr / bc1, .bc2s = sqrtf(bc2)};
    mprt_par(n, MPRT_GRAIN, mprt_adamw_piece, &o);
}

/* A copy of any element type. */
MPRT_KERNEL void mprt_copy_bytes(size_t n, const void *x, void *y)
{
    memcpy(y, x, n);
}

/* A parameter's gradient summed over micro-batches: sum = g for the
 * first, sum += g after. */
static void mprt_accumulate_piece(void *ctx, long lo, long hi)
{
    const MprtEw *e = ctx;
    int first = e->n != 0;
    for (long i = lo; i < hi; i++)
        e->y[i] = (first ? 0.0f : e->y[i]) + e->a[i];
}

MPRT_KERNEL void mprt_accumulate(long n, float *sum, const float *g, int first)
{
    mprt_par(n, MPRT_GRAIN, mprt_accumulate_piece, &(MprtEw){.a = g, .y = sum, .n = first});
}

/* Adds s[0 .. 2 w) by halving, where only s[0 .. m) can be non-zero: the
 * pairs with a zero partner are skipped, as adding +0.0 changes no sum of
 * squares (so a short gradient costs its length, not the lanes'). */
static inline double mprt_sq_halving(double *s, long m, long w)
{
    for (; w > 0; w >>= 1) {
        for (long t = 0; t + w < m; t++)
            s[t] += s[t + w];
        if (m > w)
            m = w;
    }
    return m > 0 ? s[0] : 0.0;
}

/* One parameter's share of the global norm: the sum of squares of its
 * gradient times scale (1/M), in double, in kernel.h's order, which the
 * CUDA kernels repeat, so both kinds of device clip by the same factor. */
MPRT_KERNEL void mprt_sq_norm(long n, const float *g, float scale, double *out)
{
    enum { LANES = MPRT_SQ_GROUP * MPRT_SQ_GROUPS };
    static _Thread_local double s[LANES];
    long lanes = n < LANES ? n : LANES;
    for (long l = 0; l < lanes; l++)
        s[l] = 0.0;
    for (long b = 0; b < n; b += LANES) {
        long m = n - b < LANES ? n - b : LANES;
        for (long l = 0; l < m; l++)
            s[l] += (double)(g[b + l] * scale) * (g[b + l] * scale);
    }
    double part[MPRT_SQ_GROUPS];
    for (int k = 0; k < MPRT_SQ_GROUPS; k++) {
        long m = lanes - (long)k * MPRT_SQ_GROUP;
        part[k] = mprt_sq_halving(s + (long)k * MPRT_SQ_GROUP,
                                  m < 0 ? 0 : m > MPRT_SQ_GROUP ? MPRT_SQ_GROUP : m,
                                  MPRT_SQ_GROUP / 2);
    }
    *out = mprt_sq_halving(part, MPRT_SQ_GROUPS, MPRT_SQ_GROUPS / 2);
}
