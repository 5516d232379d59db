/* cpu_math.c — the CPU device's math kernels beyond GEMM and convolution,
 * forward and backward: batched MatMul, elementwise functions, Pow,
 * variadic Sum/Mean/Min/Max, PRelu, reductions, ArgMax/ArgMin, CumSum,
 * TopK, Softmax, LayerNormalization, InstanceNormalization and Dropout.
 *
 * Elementwise functions share one kernel per direction, specialised by the
 * op code (a literal at every call, so the switch is hoisted by the
 * compiler); mprt_ew_chain runs a chain of them and of mprt_binary's and
 * mprt_relu's ops as one kernel, each step with its unfused kernel's float
 * operations. Statistics (softmax sums, layer-norm moments) accumulate in
 * double.
 *
 * The kernels run on the device's threads (pool.c's mprt_par), each output
 * element, line or row computed whole on one thread, as in cpu.c; the
 * losses' sums over the batch stay on one.
 */
#include "mprt.h"
#include "kernel.h"
#include "vmath.h"

#include <cblas.h>
#include <math.h>

/* ---- batched matrix multiply ---- */

/* Y[b] (+)= op(A[b]) op(B[b]) over the batch index b of `shape` (rank
 * dims, the broadcast batch of A and B); sa, sb, sy are the strides of A's,
 * B's and Y's matrices per batch dimension, 0 where one is broadcast, and
 * ld their leading dimensions (rows this far apart; more than a dense
 * matrix's where the product reads or writes a transposed activation in
 * place, compiler/graph/views.c). Where Y's stride is 0 the products are
 * summed into it: that is the gradient of a broadcast operand (a weight
 * shared by the batch). Common dense layouts become one GEMM: a shared
 * right operand folds the batch into the rows, a shared output folds it
 * into the inner dimension. */
MPRT_KERNEL void mprt_bmm(int rank, const long *shape, const long *sa, const long *sb,
                          const long *sy, int M, int N, int K, int ta, int tb, const long *ld,
                          const float *A, const float *B, float *Y)
{
    long lda = ld[0], ldb = ld[1], ldy = ld[2];
    long dense = lda == (ta ? M : K) && ldb == (tb ? K : N) && ldy == N;
    long nb = 1, full_a = dense, full_b = dense, full_y = dense, shared_b = 1, shared_y = 1, s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        nb *= shape[d];
        full_a &= shape[d] == 1 || sa[d] == (long)M * K * s;
        full_b &= shape[d] == 1 || sb[d] == (long)K * N * s;
        full_y &= shape[d] == 1 || sy[d] == (long)M * N * s;
        shared_b &= shape[d] == 1 || sb[d] == 0;
        shared_y &= shape[d] == 1 || sy[d] == 0;
        s *= shape[d];
    }
    if (nb > 1 && !ta && full_a && full_y && shared_b) {
        mprt_sgemm(0, tb, (int)(nb * M), N, K, 1.0f, A, K, B, tb ? K : N, 0.0f, Y, N);
        return;
    }
    if (nb > 1 && ta && !tb && full_a && full_b && shared_y) {
        /* Y[M,N] = sum_b A[b]^T B[b]: A is (nb*K, M) rows, B (nb*K, N) rows */
        mprt_sgemm(1, 0, M, N, (int)(nb * K), 1.0f, A, M, B, N, 0.0f, Y, N);
        return;
    }
    long idx[8] = {0}, off[3] = {0, 0, 0};
    const long *st[3] = {sa, sb, sy};
    int accumulate = 0;
    for (int d = 0; d < rank; d++)
        accumulate |= shape[d] > 1 && sy[d] == 0;
    if (accumulate)
        memset(Y, 0, (size_t)M * N * sizeof *Y);
    for (long i = 0; i < nb; i++) {
        mprt_sgemm(ta, tb, M, N, K, 1.0f, A + off[0], (int)lda, B + off[1], (int)ldb,
                   accumulate ? 1.0f : 0.0f, Y + off[2], (int)ldy);
        mprt_bcast_next(rank, shape, idx, 3, off, st);
    }
}

/* ---- elementwise functions ---- */

MPRT_INLINE float mprt_clampf(float v, float lo, float hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* sqrt(2/pi) and the cubic coefficient of Gelu's tanh approximation */
#define MPRT_GELU_K 0.7978845608028654f
#define MPRT_GELU_C 0.044715f

MPRT_INLINE float mprt_gelu(float v, float q)
{
    if (q != 0.0f)
        return 0.5f * v * (1.0f + mprt_tanhf(MPRT_GELU_K * (v + MPRT_GELU_C * v * v * v)));
    return 0.5f * v * (1.0f + mprt_erff(v * 0.70710678118654752f));
}

MPRT_INLINE float mprt_gelu_grad(float v, float q)
{
    if (q != 0.0f) {
        float t = mprt_tanhf(MPRT_GELU_K * (v + MPRT_GELU_C * v * v * v));
        float dt = (1.0f - t * t) * MPRT_GELU_K * (1.0f + 3.0f * MPRT_GELU_C * v * v);
        return 0.5f * (1.0f + t) + 0.5f * v * dt;
    }
    return 0.5f * (1.0f + mprt_erff(v * 0.70710678118654752f)) +
           v * 0.39894228040143268f * mprt_expf(-0.5f * v * v);
}

/* One element of mprt_unary: f(v). Shared with the fused chains
 * (mprt_ew_chain), so both do the same float operations. */
MPRT_INLINE float mprt_unary_1(int op, float v, float p, float q)
{
    switch (op) {
    case MPRT_ERF: return mprt_erff(v);
    case MPRT_TANH: return mprt_tanhf(v);
    case MPRT_SQRT: return sqrtf(v);
    case MPRT_EXP: return mprt_expf(v);
    case MPRT_LOG: return logf(v);
    case MPRT_NEG: return -v;
    case MPRT_SIGMOID: return 1.0f / (1.0f + mprt_expf(-v));
    case MPRT_RECIPROCAL: return 1.0f / v;
    case MPRT_HARD_SIGMOID: return mprt_clampf(p * v + q, 0.0f, 1.0f);
    case MPRT_HARD_SWISH: return v * mprt_clampf(v / 6.0f + 0.5f, 0.0f, 1.0f);
    case MPRT_LEAKY_RELU: return v > 0 ? v : p * v;
    case MPRT_ELU: return v > 0 ? v : p * expm1f(v);
    case MPRT_SELU: return q * (v > 0 ? v : p * expm1f(v));
    case MPRT_SOFTPLUS: return (v > 0 ? v : 0.0f) + log1pf(mprt_expf(-fabsf(v)));
    case MPRT_GELU: return mprt_gelu(v, q);
    case MPRT_CLIP: return mprt_clampf(v, p, q);
    default: return fabsf(v);
    }
}

/* The elementwise kernels run tile by tile through the fused chains'
 * steps (below), whose loops are one per op and vectorise. */
#define MPRT_EW_TILE 1024
/* Defined before their first call, never declared ahead: clang 14 builds
 * a target_clones function declared before its definition reading its
 * parameters from static storage (wrong numbers, or a crash; train.clang). */
#define MPRT_EW_UNARY_CASE(OP)                      \
    case OP:                                        \
        for (long j = 0; j < MPRT_EW_TILE; j++)     \
            v[j] = mprt_unary_1(OP, v[j], p, q);    \
        break;
/* Gelu's q picks its form (tanh or erf): one loop for each, so that
 * neither branches. */
#define MPRT_EW_GELU_CASE(E)                                            \
    case MPRT_GELU:                                                     \
        if (q != 0.0f)                                                  \
            for (long j = 0; j < MPRT_EW_TILE; j++)                     \
                v[j] = E(1.0f);                                         \
        else                                                            \
            for (long j = 0; j < MPRT_EW_TILE; j++)                     \
                v[j] = E(0.0f);                                         \
        break;
#define MPRT_EW_GELU(Q) mprt_unary_1(MPRT_GELU, v[j], p, Q)

MPRT_VECTOR static void mprt_ew_unary(int op, float p, float q, float *v)
{
    switch (op) {
    MPRT_EW_UNARY_CASE(MPRT_ERF) MPRT_EW_UNARY_CASE(MPRT_TANH) MPRT_EW_UNARY_CASE(MPRT_SQRT)
    MPRT_EW_UNARY_CASE(MPRT_EXP) MPRT_EW_UNARY_CASE(MPRT_LOG) MPRT_EW_UNARY_CASE(MPRT_NEG)
    MPRT_EW_UNARY_CASE(MPRT_SIGMOID) MPRT_EW_UNARY_CASE(MPRT_RECIPROCAL)
    MPRT_EW_UNARY_CASE(MPRT_ABS) MPRT_EW_UNARY_CASE(MPRT_HARD_SIGMOID)
    MPRT_EW_UNARY_CASE(MPRT_HARD_SWISH) MPRT_EW_UNARY_CASE(MPRT_LEAKY_RELU)
    MPRT_EW_UNARY_CASE(MPRT_ELU) MPRT_EW_UNARY_CASE(MPRT_SELU) MPRT_EW_UNARY_CASE(MPRT_SOFTPLUS)
    MPRT_EW_GELU_CASE(MPRT_EW_GELU) MPRT_EW_UNARY_CASE(MPRT_CLIP)
    }
}

/* n floats of x into a tile, the rest zero. */
static void mprt_tile_in(float *tile, const float *x, long n)
{
    memcpy(tile, x, (size_t)n * sizeof *tile);
    memset(tile + n, 0, (size_t)(MPRT_EW_TILE - n) * sizeof *tile);
}

static void mprt_unary_piece(void *ctx, long lo, long hi)
{
    static _Thread_local float v[MPRT_EW_TILE];
    const MprtEw *e = ctx;
    for (long i = lo; i < hi; i += MPRT_EW_TILE) {
        long m = hi - i < MPRT_EW_TILE ? hi - i : MPRT_EW_TILE;
        mprt_tile_in(v, e->a + i, m);
        mprt_ew_unary((int)e->n, e->p, e->q, v);
        memcpy(e->y + i, v, (size_t)m * sizeof *v);
    }
}

MPRT_KERNEL void mprt_unary(int op, long n, float p, float q, const float *x, float *y)
{
    mprt_par(n, MPRT_GRAIN / 4, mprt_unary_piece,
             &(MprtEw){.a = x, .y = y, .p = p, .q = q, .n = op});
}

/* One element of mprt_unary_grad: g * f'(x), shared with mprt_ew_chain. */
MPRT_INLINE float mprt_unary_grad_1(int op, float g, float x, float y, float p, float q)
{
    const float two_over_sqrt_pi = 1.12837916709551257f;
    switch (op) {
    case MPRT_ERF: return g * two_over_sqrt_pi * mprt_expf(-x * x);
    case MPRT_TANH: return g * (1.0f - y * y);
    case MPRT_SQRT: return g * 0.5f / y;
    case MPRT_EXP: return g * y;
    case MPRT_LOG: return g / x;
    case MPRT_NEG: return -g;
    case MPRT_SIGMOID: return g * y * (1.0f - y);
    case MPRT_RECIPROCAL: return -g * y * y;
    case MPRT_HARD_SIGMOID: {
        float t = p * x + q;
        return t > 0.0f && t < 1.0f ? g * p : 0.0f;
    }
    case MPRT_HARD_SWISH: return x < -3.0f ? 0.0f : x <= 3.0f ? g * (x / 3.0f + 0.5f) : g;
    case MPRT_LEAKY_RELU: return x > 0 ? g : g * p;
    case MPRT_ELU: return x > 0 ? g : g * (y + p);
    case MPRT_SELU: return x > 0 ? g * q : g * q * p * mprt_expf(x);
    case MPRT_SOFTPLUS: return g / (1.0f + mprt_expf(-x));
    case MPRT_GELU: return g * mprt_gelu_grad(x, q);
    case MPRT_CLIP: return x >= p && x <= q ? g : 0.0f;
    default: return x > 0 ? g : x < 0 ? -g : 0.0f;
    }
}

/* dx = dy * f'(x), from x or from y = f(x), whichever is cheaper. Where f
 * has a kink the derivative is PyTorch's: LeakyRelu, Elu and Selu take the
 * left side at 0, HardSigmoid is flat at its corners, HardSwish takes
 * x / 3 + 1/2 at 3, Clip passes the gradient at min and max. */
typedef struct MprtUnaryGrad {
    int op;
    float p, q;
    const float *dy, *x, *y;
    float *dx;
} MprtUnaryGrad;

#define MPRT_EW_GRAD_CASE(OP)                                    \
    case OP:                                                     \
        for (long j = 0; j < MPRT_EW_TILE; j++)                  \
            v[j] = mprt_unary_grad_1(OP, v[j], x[j], y[j], p, q); \
        break;
#define MPRT_EW_GELU_GRAD(Q) mprt_unary_grad_1(MPRT_GELU, v[j], x[j], y[j], p, Q)

MPRT_VECTOR static void mprt_ew_unary_grad(int op, float p, float q, const float *restrict x,
                               const float *restrict y, float *v)
{
    switch (op) {
    MPRT_EW_GRAD_CASE(MPRT_ERF) MPRT_EW_GRAD_CASE(MPRT_TANH) MPRT_EW_GRAD_CASE(MPRT_SQRT)
    MPRT_EW_GRAD_CASE(MPRT_EXP) MPRT_EW_GRAD_CASE(MPRT_LOG) MPRT_EW_GRAD_CASE(MPRT_NEG)
    MPRT_EW_GRAD_CASE(MPRT_SIGMOID) MPRT_EW_GRAD_CASE(MPRT_RECIPROCAL)
    MPRT_EW_GRAD_CASE(MPRT_ABS) MPRT_EW_GRAD_CASE(MPRT_HARD_SIGMOID)
    MPRT_EW_GRAD_CASE(MPRT_HARD_SWISH) MPRT_EW_GRAD_CASE(MPRT_LEAKY_RELU)
    MPRT_EW_GRAD_CASE(MPRT_ELU) MPRT_EW_GRAD_CASE(MPRT_SELU) MPRT_EW_GRAD_CASE(MPRT_SOFTPLUS)
    MPRT_EW_GELU_CASE(MPRT_EW_GELU_GRAD) MPRT_EW_GRAD_CASE(MPRT_CLIP)
    }
}

static void mprt_unary_grad_piece(void *ctx, long lo, long hi)
{
    static _Thread_local float v[MPRT_EW_TILE], x[MPRT_EW_TILE], y[MPRT_EW_TILE];
    const MprtUnaryGrad *t = ctx;
    for (long i = lo; i < hi; i += MPRT_EW_TILE) {
        long m = hi - i < MPRT_EW_TILE ? hi - i : MPRT_EW_TILE;
        mprt_tile_in(v, t->dy + i, m);
        mprt_tile_in(x, t->x + i, m);
        mprt_tile_in(y, t->y + i, m);
        mprt_ew_unary_grad(t->op, t->p, t->q, x, y, v);
        memcpy(t->dx + i, v, (size_t)m * sizeof *v);
    }
}

MPRT_KERNEL void mprt_unary_grad(int op, long n, float p, float q, const float *dy,
                                 const float *x, const float *y, float *dx)
{
    mprt_par(n, MPRT_GRAIN / 4, mprt_unary_grad_piece,
             &(MprtUnaryGrad){op, p, q, dy, x, y, dx});
}

/* ---- fused elementwise chains ---- */

/* The chain runs over tiles of MPRT_EW_TILE consecutive output elements:
 * each operand's tile is its own memory where it is laid out as the output
 * (else gathered, row segment by row segment), and each step is one loop
 * over the tile, in place in the output's memory, in cache between steps.
 * The loops have a fixed length and their operands cannot be the output
 * (restrict), so the compiler vectorises the simple ones; the last, short
 * tile is worked in a local tile padded with zeros. Under bf16 an operand
 * stored in bf16 is widened into a local tile, and an output stored so is
 * worked in one and narrowed (kernel.h). */
/* mprt_binary_row's ops: v = v op u, or u op v with swap; u is a tile, or
 * the scalar c where u is NULL. */
#define MPRT_EW_ADD(a, b) ((a) + (b))
#define MPRT_EW_SUB(a, b) ((a) - (b))
#define MPRT_EW_MUL(a, b) ((a) * (b))
#define MPRT_EW_DIV(a, b) ((a) / (b))
#define MPRT_EW_FOR(e) for (long j = 0; j < MPRT_EW_TILE; j++) v[j] = e
#define MPRT_EW_BINARY_CASE(OP, F)         \
    case OP:                              \
        if (!u && !swap)                  \
            MPRT_EW_FOR(F(v[j], c));      \
        else if (!u)                      \
            MPRT_EW_FOR(F(c, v[j]));      \
        else if (!swap)                   \
            MPRT_EW_FOR(F(v[j], u[j]));   \
        else                              \
            MPRT_EW_FOR(F(u[j], v[j]));   \
        break;

MPRT_VECTOR static void mprt_ew_binary(int op, int swap, const float *restrict u, float c, float *v)
{
    switch (op) {
    MPRT_EW_BINARY_CASE(MPRT_ADD, MPRT_EW_ADD) MPRT_EW_BINARY_CASE(MPRT_SUB, MPRT_EW_SUB)
    MPRT_EW_BINARY_CASE(MPRT_MUL, MPRT_EW_MUL) MPRT_EW_BINARY_CASE(MPRT_DIV, MPRT_EW_DIV)
    MPRT_EW_BINARY_CASE(MPRT_POW, powf)
    }
}

/* One step over a tile: u[k] is operand k's tile; a step without operand
 * a reads the constant p. */
static void mprt_ew_step(const MprtEwStep *t, const float *const *u, float *v)
{
    const float *a = t->a >= 0 ? u[t->a] : NULL;
    float p = t->p;
    switch (t->kind) {
    case MPRT_EW_LOAD:
        if (a)
            memcpy(v, a, MPRT_EW_TILE * sizeof *v);
        else
            MPRT_EW_FOR(p);
        break;
    case MPRT_EW_UNARY: mprt_ew_unary(t->op, t->p, t->q, v); break;
    case MPRT_EW_RELU: MPRT_EW_FOR(mprt_select(v[j] > 0.0f, v[j])); break;
    case MPRT_EW_BINARY: mprt_ew_binary(t->op, t->swap, a, p, v); break;
    case MPRT_EW_UNARY_GRAD: mprt_ew_unary_grad(t->op, t->p, t->q, a, u[t->b], v); break;
    case MPRT_EW_RELU_GRAD: MPRT_EW_FOR(mprt_select(a[j] > 0.0f, v[j])); break;
    }
}

/* Operand values at the output elements i0 .. i0 + m - 1, row segment by
 * row segment of the last dimension (copied, repeated or strided), as
 * they are stored: float32, or bf16 (size 2). */
static void mprt_ew_gather(const MprtEwChain *c, const void *x, size_t size, const long *stride,
                           long i0, long m, void *tmp)
{
    int last = c->rank - 1;
    long idx[8], off = 0, rest = i0, inner = last >= 0 ? c->shape[last] : 1;
    long s = last >= 0 ? stride[last] : 0;
    for (int d = last; d >= 0; d--) {
        idx[d] = rest % c->shape[d], rest /= c->shape[d];
        off += idx[d] * stride[d];
    }
    for (long j = 0; j < m;) {
        long at = last >= 0 ? idx[last] : 0, n = inner - at < m - j ? inner - at : m - j;
        if (s == 1)
            memcpy((char *)tmp + j * size, (const char *)x + off * size, (size_t)n * size);
        else if (size == 2)
            for (long e = 0; e < n; e++)
                ((uint16_t *)tmp)[j + e] = ((const uint16_t *)x)[off + e * s];
        else
            for (long e = 0; e < n; e++)
                ((float *)tmp)[j + e] = ((const float *)x)[off + e * s];
        j += n;
        if (last >= 0)
            off -= at * s, idx[last] = 0;
        if (last > 0)
            mprt_bcast_next(last, c->shape, idx, 1, &off, &stride);
    }
}

/* Whether operand k is laid out as the output (its tiles are its memory). */
static int mprt_ew_dense(const MprtEwChain *c, int k)
{
    long step = 1;
    for (int d = c->rank - 1; d >= 0; d--) {
        if (c->shape[d] > 1 && c->stride[k][d] != step)
            return 0;
        step *= c->shape[d];
    }
    return 1;
}

/* Operand k's tile at output element i0 in tmp: m values as stored,
 * bf16 ones widened. */
static void mprt_ew_load(const MprtEwChain *c, const void *x, int k, int dense, long i0, long m,
                         float *tmp)
{
    static _Thread_local uint16_t half[MPRT_EW_TILE];
    if (!(c->bf16 >> k & 1)) {
        if (dense)
            memcpy(tmp, (const float *)x + i0, (size_t)m * sizeof *tmp);
        else
            mprt_ew_gather(c, x, sizeof *tmp, c->stride[k], i0, m, tmp);
        return;
    }
    if (dense)
        memcpy(half, (const uint16_t *)x + i0, (size_t)m * sizeof *half);
    else
        mprt_ew_gather(c, x, sizeof *half, c->stride[k], i0, m, half);
    for (long j = 0; j < m; j++)
        tmp[j] = mprt_f32_of(half[j]);
}

/* The operands' tiles at output element i0 (m values, then zeros). */
static void mprt_ew_tiles(const MprtEwChain *c, const void *const *x, const int *dense,
                          long i0, long m, float (*tmp)[MPRT_EW_TILE], const float **u)
{
    for (int k = 0; k < c->nops; k++) {
        if (dense[k] && m == MPRT_EW_TILE && !(c->bf16 >> k & 1)) {
            u[k] = (const float *)x[k] + i0;
        } else {
            mprt_ew_load(c, x[k], k, dense[k], i0, m, tmp[k]);
            memset(tmp[k] + m, 0, (size_t)(MPRT_EW_TILE - m) * sizeof(float));
            u[k] = tmp[k];
        }
    }
}

typedef struct MprtEwCall {
    const MprtEwChain *c;
    const void *const *x;
    void *y;
    long n;
    int dense[MPRT_EW_OPERANDS];
} MprtEwCall;

/* Tiles [lo, hi) of a chain (each thread has tiles of its own). */
static void mprt_ew_chain_piece(void *ctx, long lo, long hi)
{
    static _Thread_local float tmp[MPRT_EW_OPERANDS + 1][MPRT_EW_TILE];
    const MprtEwCall *t = ctx;
    const MprtEwChain *c = t->c;
    const float *u[MPRT_EW_OPERANDS];
    long n = t->n;
    int half = c->bf16 & MPRT_EW_OUT_BF16;
    for (long i0 = lo * MPRT_EW_TILE; i0 < n && i0 < hi * MPRT_EW_TILE; i0 += MPRT_EW_TILE) {
        long m = n - i0 < MPRT_EW_TILE ? n - i0 : MPRT_EW_TILE;
        float *y = half ? NULL : (float *)t->y + i0;
        float *v = m == MPRT_EW_TILE && y ? y : tmp[MPRT_EW_OPERANDS];
        mprt_ew_tiles(c, t->x, t->dense, i0, m, tmp, u);
        for (int i = 0; i < c->nsteps; i++) {
            mprt_ew_step(&c->step[i], u, v);
            if (c->step[i].round)
                MPRT_EW_FOR(mprt_f32_of(mprt_bf16_of(v[j])));
        }
        if (half)
            for (long j = 0; j < m; j++)
                ((uint16_t *)t->y)[i0 + j] = mprt_bf16_of(v[j]);
        else if (v != y)
            memcpy(y, v, (size_t)m * sizeof *v);
    }
}

/* y = the chain's value at every element of the output (kernel.h), tiles
 * on the device's threads. */
MPRT_KERNEL void mprt_ew_chain(const MprtEwChain *c, const void *const *x, void *y)
{
    MprtEwCall t = {.c = c, .x = x, .y = y, .n = 1};
    for (int d = 0; d < c->rank; d++)
        t.n *= c->shape[d];
    for (int k = 0; k < c->nops; k++)
        t.dense[k] = mprt_ew_dense(c, k);
    long tiles = (t.n + MPRT_EW_TILE - 1) / MPRT_EW_TILE;
    mprt_par(tiles, mprt_grain_rows(MPRT_EW_TILE), mprt_ew_chain_piece, &t);
}

/* ---- variadic elementwise ops with broadcasting: Sum, Mean, Min, Max ---- */

/* y = scale * (x[0] op x[1] op ... x[k-1]), each x[j] read at its strides
 * per output dimension (0 where broadcast); op is MPRT_ADD, MPRT_MIN or
 * MPRT_MAX (a NaN operand gives NaN, as in PyTorch). */
/* A broadcasting kernel of up to 8 operands, for the elements a thread
 * takes: operand j's strides per output dimension in s[j]. */
typedef struct MprtNary {
    int op, k, rank;
    const long *shape, *const *s;
    const float *const *x, *dy, *y, *a, *b;
    float scale;
    float *out;
} MprtNary;

static void mprt_nary_piece(void *ctx, long lo, long hi)
{
    const MprtNary *t = ctx;
    int op = t->op, k = t->k, rank = t->rank;
    const long *shape = t->shape, *const *sx = t->s;
    const float *const *x = t->x;
    float scale = t->scale, *y = t->out;
    long idx[8], off[8];
    mprt_bcast_at(rank, shape, lo, idx, k, off, sx);
    for (long i = lo; i < hi; i++) {
        float v = x[0][off[0]];
        for (int j = 1; j < k; j++) {
            float u = x[j][off[j]];
            v = op == MPRT_ADD ? v + u : v != v || u != u ? v + u
              : op == MPRT_MIN ? (u < v ? u : v) : (u > v ? u : v);
        }
        y[i] = v * scale;
        mprt_bcast_next(rank, shape, idx, k, off, sx);
    }
}

MPRT_KERNEL void mprt_nary(int op, int k, int rank, const long *shape,
                           const float *const *x, const long *const *sx, float scale, float *y)
{
    MprtNary t = {.op = op, .k = k, .rank = rank, .shape = shape, .s = sx, .x = x,
                  .scale = scale, .out = y};
    mprt_par(mprt_numel(rank, shape), MPRT_GRAIN / 2, mprt_nary_piece, &t);
}

/* The gradient of Min or Max for operand `wrt`, in y's shape (the caller
 * sums it down to the operand): dy where the operand is the result,
 * divided among the operands that tie there (for two operands this is
 * PyTorch's rule for maximum and minimum: half each). */
MPRT_KERNEL void mprt_minmax_grad(int wrt, int k, int rank, const long *shape,
                                  const float *const *x, const long *const *sx,
                                  const float *dy, const float *y, float *out)
{
    long n = 1, idx[8] = {0}, off[8] = {0};
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    for (long i = 0; i < n; i++) {
        int ties = 0;
        for (int j = 0; j < k; j++)
            ties += x[j][off[j]] == y[i];
        out[i] = x[wrt][off[wrt]] == y[i] ? dy[i] / (float)ties : 0.0f;
        mprt_bcast_next(rank, shape, idx, k, off, sx);
    }
}

/* ---- ReduceMax and ReduceMin (ReduceSum and ReduceMean are mprt_sum_to) ---- */

/* x's dimensions (keep[d]: the output keeps dimension d) seen from the
 * output: output element o reduces the elements at o's kept indices,
 * walked over the reduced dimensions in x's order. Each output element is
 * computed whole on one thread, in that order, so the results do not
 * depend on the thread count. */
typedef struct MprtReduce {
    int nk, nr;                  /* kept and reduced dimensions */
    long kn[8], ks[8], rn[8], rs[8];   /* their extents, and strides in x */
    long per;                    /* elements per output element */
    int is_min;
    const float *x, *dy, *y;
    float *out;
} MprtReduce;

static void mprt_reduce_dims(MprtReduce *t, int rank, const long *shape, const int *keep)
{
    long s = 1, kn[8], ks[8], rn[8], rs[8];
    int nk = 0, nr = 0;
    t->per = 1;
    for (int d = rank - 1; d >= 0; d--) {   /* innermost first, reversed below */
        if (keep[d])
            kn[nk] = shape[d], ks[nk++] = s;
        else
            rn[nr] = shape[d], rs[nr++] = s, t->per *= shape[d];
        s *= shape[d];
    }
    for (int i = 0; i < nk; i++)
        t->kn[i] = kn[nk - 1 - i], t->ks[i] = ks[nk - 1 - i];
    for (int i = 0; i < nr; i++)
        t->rn[i] = rn[nr - 1 - i], t->rs[i] = rs[nr - 1 - i];
    t->nk = nk, t->nr = nr;
}

/* Where output element o's elements start in x. */
static long mprt_reduce_base(const MprtReduce *t, long o)
{
    long off = 0;
    for (int i = t->nk - 1; i >= 0; i--) {
        off += (o % t->kn[i]) * t->ks[i];
        o /= t->kn[i];
    }
    return off;
}

/* The offset of the next reduced element after `off` (idx: the reduced
 * dimensions' indices, all 0 at the start). */
static inline long mprt_reduce_step(const MprtReduce *t, long *idx, long off)
{
    for (int i = t->nr - 1; i >= 0; i--) {
        off += t->rs[i];
        if (++idx[i] < t->rn[i])
            return off;
        off -= t->rs[i] * t->rn[i];
        idx[i] = 0;
    }
    return off;
}

static void mprt_reduce_max_piece(void *ctx, long lo, long hi)
{
    const MprtReduce *t = ctx;
    for (long o = lo; o < hi; o++) {
        long idx[8] = {0}, off = mprt_reduce_base(t, o);
        float m = t->is_min ? INFINITY : -INFINITY;
        for (long k = 0; k < t->per; k++) {
            float v = t->x[off];
            if (v != v || (t->is_min ? v < m : v > m))
                m = v;
            off = mprt_reduce_step(t, idx, off);
        }
        t->out[o] = m;
    }
}

/* y = the largest (is_min: smallest) x over the dimensions not kept; NaN
 * wins, as in PyTorch. */
MPRT_KERNEL void mprt_reduce_max(int is_min, int rank, const long *shape, const int *keep,
                                 const float *x, long n_out, float *y)
{
    MprtReduce t = {.is_min = is_min, .x = x, .out = y};
    mprt_reduce_dims(&t, rank, shape, keep);
    mprt_par(n_out, mprt_grain_rows(t.per), mprt_reduce_max_piece, &t);
}

static void mprt_reduce_max_grad_piece(void *ctx, long lo, long hi)
{
    const MprtReduce *t = ctx;
    for (long o = lo; o < hi; o++) {
        long idx[8] = {0}, base = mprt_reduce_base(t, o), off = base;
        float count = 0, m = t->y[o];
        for (long k = 0; k < t->per; k++) {
            count += t->x[off] == m;
            off = mprt_reduce_step(t, idx, off);
        }
        off = base;
        for (long k = 0; k < t->per; k++) {
            t->out[off] = t->x[off] == m ? t->dy[o] / count : 0.0f;
            off = mprt_reduce_step(t, idx, off);
        }
    }
}

/* dx = dy where x is its output's extreme, split evenly among the elements
 * that tie (PyTorch's rule for amax and amin), 0 elsewhere. */
MPRT_KERNEL void mprt_reduce_max_grad(int rank, const long *shape, const int *keep,
                                      const float *dy, const float *x, const float *y,
                                      long n_out, float *dx)
{
    MprtReduce t = {.x = x, .dy = dy, .y = y, .out = dx};
    mprt_reduce_dims(&t, rank, shape, keep);
    mprt_par(n_out, mprt_grain_rows(2 * t.per), mprt_reduce_max_grad_piece, &t);
}

/* ---- ArgMax and ArgMin, CumSum: along the middle of (outer, n, inner) ---- */

/* Whether v takes the place of m, the extreme so far: the larger (is_min:
 * the smaller), and a NaN over any number, as numpy (ONNX's reference)
 * has it; on a tie, or from NaN to NaN, only when the last index is asked
 * for. */
static inline int mprt_arg_takes(int is_min, int last, double v, double m)
{
    if (v != v || m != m)
        return v != v && (last || m == m);
    return is_min ? v < m || (last && v == m) : v > m || (last && v == m);
}

static inline int mprt_arg_takes_int(int is_min, int last, int64_t v, int64_t m)
{
    return is_min ? v < m || (last && v == m) : v > m || (last && v == m);
}

/* The index of the extreme element of one line (n >= 1 elements, stride
 * inner), the axis walked from its start. */
static int64_t mprt_arg_line(int is_min, int last, int type, long n, long inner,
                             const void *x, long base)
{
    int64_t best = 0;
    if (mprt_elem_is_float(type)) {
        double m = mprt_elem_float(type, x, base);
        for (long j = 1; j < n; j++) {
            double v = mprt_elem_float(type, x, base + j * inner);
            if (mprt_arg_takes(is_min, last, v, m))
                m = v, best = j;
        }
    } else {
        int64_t m = mprt_elem_int(type, x, base);
        for (long j = 1; j < n; j++) {
            int64_t v = mprt_elem_int(type, x, base + j * inner);
            if (mprt_arg_takes_int(is_min, last, v, m))
                m = v, best = j;
        }
    }
    return best;
}

/* y[o, i] = the index along the axis of x[o, :, i]'s largest (is_min:
 * smallest) element; x of element type `type` (MPRT_ELEM_*). */
/* A kernel over the lines along the middle of (outer, n, inner), line l
 * (at outer l / inner, inner l % inner) whole on one thread. */
typedef struct MprtAxis {
    int is_min, last, type, flag, reverse;
    long n, k, inner;
    const void *x;
    void *y;
    int64_t *idx;          /* TopK's indices, written */
    const int64_t *at;     /* and read by its gradient */
} MprtAxis;

static void mprt_argmax_piece(void *ctx, long lo, long hi)
{
    const MprtAxis *t = ctx;
    for (long l = lo; l < hi; l++)
        ((int64_t *)t->y)[l] = mprt_arg_line(t->is_min, t->last, t->type, t->n, t->inner, t->x,
                                             l / t->inner * t->n * t->inner + l % t->inner);
}

MPRT_KERNEL void mprt_argmax(int is_min, int last, int type, long outer, long n, long inner,
                             const void *x, int64_t *y)
{
    MprtAxis t = {.is_min = is_min, .last = last, .type = type, .n = n, .inner = inner,
                  .x = x, .y = y};
    mprt_par(outer * inner, mprt_grain_rows(n), mprt_argmax_piece, &t);
}

/* y = the running sums of x along the axis, in double, each line from its
 * start (reverse: from its end); exclusive leaves each element out of its
 * own sum. y may be x. */
static void mprt_cumsum_piece(void *ctx, long lo, long hi)
{
    const MprtAxis *t = ctx;
    long n = t->n, inner = t->inner;
    for (long l = lo; l < hi; l++) {
        size_t at = (size_t)(l / inner * n * inner + l % inner);
        const float *xl = (const float *)t->x + at;
        float *yl = (float *)t->y + at;
        double acc = 0.0;
        for (long k = 0; k < n; k++) {
            long j = (t->reverse ? n - 1 - k : k) * inner;
            double v = xl[j];
            if (!t->flag)
                acc += v;
            yl[j] = (float)acc;
            if (t->flag)
                acc += v;
        }
    }
}

MPRT_KERNEL void mprt_cumsum(int exclusive, int reverse, long outer, long n, long inner,
                             const float *x, float *y)
{
    MprtAxis t = {.flag = exclusive, .reverse = reverse, .n = n, .inner = inner, .x = x, .y = y};
    mprt_par(outer * inner, mprt_grain_rows(n), mprt_cumsum_piece, &t);
}

/* ---- TopK: along the middle of (outer, n, inner), k of each line ---- */

/* Whether element a comes before element b, whose index is lower, in
 * TopK's order: the larger first (largest) or the smaller, NaN above every
 * number as numpy's sort (ONNX's reference) and PyTorch have it; equals
 * keep their index order. */
static int mprt_topk_before(int largest, int type, const void *x, long a, long b)
{
    if (mprt_elem_is_float(type)) {
        double u = mprt_elem_float(type, x, a), v = mprt_elem_float(type, x, b);
        if (u != u || v != v)
            return largest ? u != u && v == v : v != v && u == u;
        return largest ? u > v : u < v;
    }
    int64_t u = mprt_elem_int(type, x, a), v = mprt_elem_int(type, x, b);
    return largest ? u > v : u < v;
}

/* One line (n elements at base, stride inner): idx (stride inner) gets
 * the positions of its k first in order, each element walked in turn and
 * inserted after those it does not come before. */
static void mprt_topk_line(int largest, int type, long n, long k, long inner, const void *x,
                           long base, int64_t *idx)
{
    long have = 0;
    for (long j = 0; j < n; j++) {
        long p = have;
        while (p > 0 && mprt_topk_before(largest, type, x, base + j * inner,
                                         base + (long)idx[(p - 1) * inner] * inner))
            p--;
        if (p >= k)
            continue;
        for (long q = have < k ? have : k - 1; q > p; q--)
            idx[q * inner] = idx[(q - 1) * inner];
        idx[p * inner] = j;
        have += have < k;
    }
}

/* values[o, j, i] = x[o, idx[o, j, i], i]: the k largest (largest = 0: the
 * smallest) of each line of x along the axis, sorted, a tie to the lower
 * index; x and values of element type `type` (MPRT_ELEM_*). */
static void mprt_topk_piece(void *ctx, long lo, long hi)
{
    const MprtAxis *t = ctx;
    long n = t->n, k = t->k, inner = t->inner;
    size_t es = mprt_elem_size(t->type);
    for (long l = lo; l < hi; l++) {
        long o = l / inner, i = l % inner, xb = o * n * inner + i, yb = o * k * inner + i;
        mprt_topk_line(t->flag, t->type, n, k, inner, t->x, xb, t->idx + yb);
        for (long j = 0; j < k; j++) {
            long from = xb + (long)t->idx[yb + j * inner] * inner, to = yb + j * inner;
            memcpy((char *)t->y + (size_t)to * es, (const char *)t->x + (size_t)from * es, es);
        }
    }
}

MPRT_KERNEL void mprt_topk(int largest, int type, long outer, long n, long k, long inner,
                           const void *x, void *values, int64_t *idx)
{
    MprtAxis t = {.flag = largest, .type = type, .n = n, .k = k, .inner = inner, .x = x,
                  .y = values, .idx = idx};
    mprt_par(outer * inner, mprt_grain_rows(n * (k < 8 ? k : 8)), mprt_topk_piece, &t);
}

/* TopK's gradient: dx is zero but at the positions idx names along the
 * axis, which get dy (a line's positions are distinct). */
static void mprt_topk_grad_piece(void *ctx, long lo, long hi)
{
    const MprtAxis *t = ctx;
    long n = t->n, k = t->k, inner = t->inner;
    const float *dy = t->x;
    float *dx = t->y;
    for (long l = lo; l < hi; l++) {
        long o = l / inner, i = l % inner;
        for (long j = 0; j < n; j++)
            dx[(o * n + j) * inner + i] = 0.0f;
        for (long j = 0; j < k; j++) {
            long e = (o * k + j) * inner + i;
            dx[(o * n + (long)t->at[e]) * inner + i] = dy[e];
        }
    }
}

MPRT_KERNEL void mprt_topk_grad(long outer, long n, long k, long inner, const float *dy,
                                const int64_t *idx, float *dx)
{
    MprtAxis t = {.n = n, .k = k, .inner = inner, .x = dy, .y = dx, .at = idx};
    mprt_par(outer * inner, mprt_grain_rows(n + k), mprt_topk_grad_piece, &t);
}

/* The gradient of PRelu y = x > 0 ? x : slope * x, in y's (= x's) shape:
 * wrt 0 gives dy * (x > 0 ? 1 : slope), wrt 1 gives dy * (x > 0 ? 0 : x). */
static void mprt_prelu_grad_piece(void *ctx, long lo, long hi)
{
    const MprtNary *t = ctx;
    const float *dy = t->dy, *x = t->a, *slope = t->b;
    long idx[8], off[1];
    mprt_bcast_at(t->rank, t->shape, lo, idx, 1, off, t->s);
    for (long i = lo; i < hi; i++) {
        float v = x[i];
        t->out[i] = t->op == 0 ? (v > 0 ? dy[i] : dy[i] * slope[off[0]])
                               : (v > 0 ? 0.0f : dy[i] * v);
        mprt_bcast_next(t->rank, t->shape, idx, 1, off, t->s);
    }
}

MPRT_KERNEL void mprt_prelu_grad(int wrt, int rank, const long *shape, const float *dy,
                                 const float *x, const float *slope, const long *ss,
                                 float *out)
{
    const long *s[1] = {ss};
    MprtNary t = {.op = wrt, .rank = rank, .shape = shape, .s = s, .dy = dy, .a = x,
                  .b = slope, .out = out};
    mprt_par(mprt_numel(rank, shape), MPRT_GRAIN / 2, mprt_prelu_grad_piece, &t);
}

/* The gradient of y = a^b with broadcasting, in y's shape (the caller
 * sums it down to the operand): wrt 0 gives dy * b * a^(b-1), wrt 1 gives
 * dy * y * ln(a). */
static void mprt_pow_grad_piece(void *ctx, long lo, long hi)
{
    const MprtNary *t = ctx;
    const float *dy = t->dy, *a = t->a, *b = t->b, *y = t->y;
    long idx[8], off[2];
    mprt_bcast_at(t->rank, t->shape, lo, idx, 2, off, t->s);
    for (long i = lo; i < hi; i++) {
        float u = a[off[0]], v = b[off[1]];
        if (t->op == 0)
            t->out[i] = v == 0.0f ? 0.0f : dy[i] * v * powf(u, v - 1.0f);
        else
            t->out[i] = u > 0.0f ? dy[i] * y[i] * logf(u) : 0.0f;
        mprt_bcast_next(t->rank, t->shape, idx, 2, off, t->s);
    }
}

MPRT_KERNEL void mprt_pow_grad(int wrt, int rank, const long *shape, const float *dy,
                               const float *a, const long *sa, const float *b, const long *sb,
                               const float *y, float *out)
{
    const long *s[2] = {sa, sb};
    MprtNary t = {.op = wrt, .rank = rank, .shape = shape, .s = s, .dy = dy, .a = a, .b = b,
                  .y = y, .out = out};
    mprt_par(mprt_numel(rank, shape), MPRT_GRAIN / 8, mprt_pow_grad_piece, &t);
}

/* ---- softmax over one axis: x is outer x C x inner ---- */

/* A softmax's operands (x is outer x C x inner), for the rows (o, j) a
 * thread takes. */
typedef struct MprtSoftmax {
    long C, inner;
    const float *x, *dy;
    float *y;
    const float *b;   /* SoftmaxBias: brows rows of C, x's rows taking them in turn */
    long brows;
    int round;        /* the sum x + b rounded to bf16 */
} MprtSoftmax;

/* y[c * s] = e^(x[c * s] - mx) for c < C: contiguous rows (s = 1) in
 * blocks of 64, each a loop of a fixed length that vectorises, the rest
 * one at a time (the same operations). */
MPRT_VECTOR static void mprt_exp_shifted(const float *restrict x, float mx, long C, long s,
                                         float *restrict y)
{
    long c = 0;
    if (s == 1)
        for (; c + 64 <= C; c += 64)
            for (long j = 0; j < 64; j++)
                y[c + j] = mprt_expf(x[c + j] - mx);
    for (; c < C; c++)
        y[c * s] = mprt_expf(x[c * s] - mx);
}

/* ys[c * s] /= their sum (in double), the exponentials of a softmax. */
static void mprt_normalize_row(float *ys, long C, long s)
{
    double sum = 0;
    for (long c = 0; c < C; c++)
        sum += ys[c * s];
    float inv = (float)(1.0 / sum);
    for (long c = 0; c < C; c++)
        ys[c * s] *= inv;
}

static void mprt_softmax_piece(void *ctx, long lo, long hi)
{
    const MprtSoftmax *t = ctx;
    long C = t->C, inner = t->inner;
    for (long r = lo; r < hi; r++) {
        long o = r / inner, j = r % inner;
        {
            const float *xs = t->x + (size_t)o * C * inner + j;
            float *ys = t->y + (size_t)o * C * inner + j;
            float mx = mprt_strided_max(xs, C, inner);
            if (mx == -INFINITY)
                mx = 0.0f;   /* a row masked entirely: exp gives 0, the sum 0 */
            mprt_exp_shifted(xs, mx, C, inner, ys);
            mprt_normalize_row(ys, C, inner);
        }
    }
}

MPRT_KERNEL void mprt_softmax(long outer, long C, long inner, const float *x, float *y)
{
    mprt_par(outer * inner, mprt_grain_rows(4 * C), mprt_softmax_piece,
             &(MprtSoftmax){.C = C, .inner = inner, .x = x, .y = y});
}

/* y[c] = e^(y[c] - mx) for c < C, in blocks of 64 as mprt_exp_shifted. */
MPRT_VECTOR static void mprt_exp_shifted_in_place(float *y, float mx, long C)
{
    long c = 0;
    for (; c + 64 <= C; c += 64)
        for (long j = 0; j < 64; j++)
            y[c + j] = mprt_expf(y[c + j] - mx);
    for (; c < C; c++)
        y[c] = mprt_expf(y[c] - mx);
}

/* Where bias row b's scores end: past its last element that is not
 * -inf (a causal mask's row: past the diagonal); C if it masks them all. */
static long mprt_masked_end(const float *b, long C)
{
    long e = C;
    while (e > 0 && b[e - 1] == -INFINITY)
        e--;
    return e ? e : C;
}

/* Rows [lo, hi) of softmax(x + b): the sum as the Add before a Softmax
 * stored it, then mprt_softmax_piece's operations on it. Past the last
 * score the bias does not mask (mprt_masked_end) y is +0, as e^-inf made
 * it, without reading x there, and with exponentials only to the end of
 * the block of 64 that holds it (of -inf: +0): the same numbers for
 * finite x (an x of +inf or NaN there gave the row NaN). */
static void mprt_softmax_bias_piece(void *ctx, long lo, long hi)
{
    const MprtSoftmax *t = ctx;
    long C = t->C;
    for (long r = lo; r < hi; r++) {
        const float *xs = t->x + (size_t)r * C, *bs = t->b + (size_t)(r % t->brows) * C;
        float *ys = t->y + (size_t)r * C;
        long e = mprt_masked_end(bs, C), e64 = (e + 63) / 64 * 64 < C ? (e + 63) / 64 * 64 : C;
        for (long c = 0; c < e; c++) {
            float v = xs[c] + bs[c];
            ys[c] = t->round ? mprt_f32_of(mprt_bf16_of(v)) : v;
        }
        for (long c = e; c < e64; c++)
            ys[c] = -INFINITY;
        float mx = mprt_strided_max(ys, e, 1);
        if (mx == -INFINITY)
            mx = 0.0f;
        mprt_exp_shifted_in_place(ys, mx, e64);
        mprt_normalize_row(ys, e64, 1);
        for (long c = e64; c < C; c++)
            ys[c] = 0.0f;
    }
}

/* y = softmax(x + b) over rows of C (x is rows x C, b brows x C). */
MPRT_KERNEL void mprt_softmax_bias(long rows, long C, long brows, int round, const float *x,
                                   const float *b, float *y)
{
    mprt_par(rows, mprt_grain_rows(5 * C), mprt_softmax_bias_piece,
             &(MprtSoftmax){.C = C, .inner = 1, .x = x, .y = y, .b = b, .brows = brows,
                            .round = round});
}

/* dx[c] = y[c] * (dy[c] - dot) + 0 for c < C, contiguous: in blocks of
 * 16, each a loop of a fixed length that vectorises, the rest one at a
 * time (the same operations). */
MPRT_VECTOR static void mprt_softmax_dx(const float *restrict y, const float *restrict dy,
                                        float dot, long C, float *restrict dx)
{
    long c = 0;
    for (; c + 16 <= C; c += 16)
        for (long j = 0; j < 16; j++)
            dx[c + j] = y[c + j] * (dy[c + j] - dot) + 0.0f;
    for (; c < C; c++)
        dx[c] = y[c] * (dy[c] - dot) + 0.0f;
}

/* Rows [lo, hi) of dx = y * (dy - sum_c dy * y) + 0: a zero dx is +0,
 * where it was 0 * (dy - sum), of either sign, where y is 0 (a masked
 * score's, or one e^x took to 0). The CUDA kernel reads no dy where y is
 * 0 and writes +0 there: the same numbers for a finite dy (a softmax's y
 * is never negative, and dy - sum is +0 where they are equal). A finite
 * dy's term of the sum, a zero, changes no sum, so here every term is
 * added, and the row is read whole: finding where its zeros begin cost
 * as much as the terms it saved. */
static void mprt_softmax_grad_piece(void *ctx, long lo, long hi)
{
    const MprtSoftmax *t = ctx;
    long C = t->C, inner = t->inner;
    const float *dy = t->dy, *y = t->x;
    float *dx = t->y;
    for (long r = lo; r < hi; r++) {
        long o = r / inner, j = r % inner;
        size_t base = (size_t)o * C * inner + j;
        const float *ys = y + base, *dys = dy + base;
        float *dxs = dx + base;
        double dot = 0;
        for (long c = 0; c < C; c++)
            dot += (double)dys[c * inner] * ys[c * inner];
        if (inner == 1)
            mprt_softmax_dx(ys, dys, (float)dot, C, dxs);
        else
            for (long c = 0; c < C; c++)
                dxs[c * inner] = ys[c * inner] * (dys[c * inner] - (float)dot) + 0.0f;
    }
}

/* dx = y * (dy - sum_c dy * y) (mprt_softmax_grad_piece) */
MPRT_KERNEL void mprt_softmax_grad(long outer, long C, long inner, const float *dy,
                                   const float *y, float *dx)
{
    mprt_par(outer * inner, mprt_grain_rows(2 * C), mprt_softmax_grad_piece,
             &(MprtSoftmax){.C = C, .inner = inner, .x = y, .dy = dy, .y = dx});
}

/* ---- layer normalization over the last D elements of each row ---- */

/* A layer norm's operands, for the rows (or, summing the parameters'
 * gradients, the columns) a thread takes. */
typedef struct MprtLayerNorm {
    long D, rows;
    const float *x, *dy, *scale, *bias;
    float eps, *y, *mean, *rstd;
    double *acc;
} MprtLayerNorm;

static void mprt_layernorm_piece(void *ctx, long lo, long hi)
{
    const MprtLayerNorm *t = ctx;
    long D = t->D;
    const float *scale = t->scale, *bias = t->bias;
    float eps = t->eps, *mean = t->mean, *rstd = t->rstd;
    for (long r = lo; r < hi; r++) {
        const float *xs = t->x + (size_t)r * D;
        float *ys = t->y + (size_t)r * D;
        double s = 0, ss = 0;
        for (long i = 0; i < D; i++)
            s += xs[i];
        double mu = s / D;
        for (long i = 0; i < D; i++)
            ss += (xs[i] - mu) * (xs[i] - mu);
        float m = (float)mu, inv = (float)(1.0 / sqrt(ss / D + eps));
        for (long i = 0; i < D; i++)
            ys[i] = (xs[i] - m) * inv * scale[i] + (bias ? bias[i] : 0.0f);
        if (mean)
            mean[r] = m;
        if (rstd)
            rstd[r] = inv;
    }
}

MPRT_KERNEL void mprt_layernorm(long rows, long D, const float *x, const float *scale,
                                const float *bias, float eps, float *y, float *mean,
                                float *rstd)
{
    MprtLayerNorm t = {.D = D, .x = x, .scale = scale, .bias = bias, .eps = eps, .y = y,
                       .mean = mean, .rstd = rstd};
    mprt_par(rows, mprt_grain_rows(3 * D), mprt_layernorm_piece, &t);
}

/* Rows [lo, hi) of a layer norm's dx. */
static void mprt_layernorm_dx_piece(void *ctx, long lo, long hi)
{
    const MprtLayerNorm *t = ctx;
    long D = t->D;
    const float *scale = t->scale;
    for (long r = lo; r < hi; r++) {
        const float *xs = t->x + (size_t)r * D, *g = t->dy + (size_t)r * D;
        float m = t->mean[r], inv = t->rstd[r];
        double sg = 0, sgx = 0;
        for (long i = 0; i < D; i++) {
            float xhat = (xs[i] - m) * inv, gi = g[i] * scale[i];
            sg += gi;
            sgx += gi * xhat;
        }
        float mg = (float)(sg / D), mgx = (float)(sgx / D);
        for (long i = 0; i < D; i++) {
            float xhat = (xs[i] - m) * inv;
            t->y[(size_t)r * D + i] = inv * (g[i] * scale[i] - mg - xhat * mgx);
        }
    }
}

/* Columns [lo, hi) of the scale's and bias's gradients, over every row in
 * order. */
static void mprt_layernorm_params_piece(void *ctx, long lo, long hi)
{
    const MprtLayerNorm *t = ctx;
    long D = t->D, rows = t->rows;
    for (long r = 0; r < rows; r++) {
        const float *xs = t->x + (size_t)r * D, *g = t->dy + (size_t)r * D;
        float m = t->mean[r], inv = t->rstd[r];
        for (long i = lo; i < hi; i++) {
            float xhat = (xs[i] - m) * inv;
            t->acc[i] += (double)g[i] * xhat;
            t->acc[D + i] += g[i];
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * scale;
 * dscale = sum over rows of dy * xhat, dbias = sum of dy (dbias may be
 * NULL). */
MPRT_KERNEL void mprt_layernorm_grad(long rows, long D, const float *dy, const float *x,
                                     const float *scale, const float *mean, const float *rstd,
                                     float *dx, float *dscale, float *dbias)
{
    double *acc = calloc((size_t)D * 2, sizeof *acc);
    if (!acc) {
        fprintf(stderr, "train: error: out of memory in a layer-norm gradient\n");
        exit(1);
    }
    MprtLayerNorm t = {.D = D, .x = x, .dy = dy, .scale = scale, .y = dx, .mean = (float *)mean,
                       .rstd = (float *)rstd, .acc = acc, .rows = rows};
    mprt_par(rows, mprt_grain_rows(3 * D), mprt_layernorm_dx_piece, &t);
    mprt_par(D, mprt_grain_rows(rows), mprt_layernorm_params_piece, &t);
    for (long i = 0; i < D; i++) {
        dscale[i] = (float)acc[i];
        if (dbias)
            dbias[i] = (float)acc[D + i];
    }
    free(acc);
}

/* ---- instance normalization, as group normalization with G groups ---- */

/* x is N x C x P; the C/G channels of a group are normalised together over
 * their P positions (InstanceNormalization: G = C), then scaled and
 * shifted per channel. Moments in double; the variance is the population
 * one, as ONNX and PyTorch. */
static void mprt_group_moments(const float *x, long D, double eps, float *mean, float *rstd)
{
    double s = 0, ss = 0;
    for (long i = 0; i < D; i++)
        s += x[i];
    double mu = s / D;
    for (long i = 0; i < D; i++)
        ss += (x[i] - mu) * (x[i] - mu);
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(ss / D + eps));
}

/* A group normalisation's operands: N x G rows of D = C/G * P elements,
 * and each row's mean and 1/std (rstd) where the gradient keeps them. */
typedef struct MprtGroups {
    int C, G;
    long P, D, rows;
    float eps;
    const float *x, *dy, *scale, *bias;
    float *y, *dscale, *dbias, *moments;
} MprtGroups;

/* Rows [lo, hi) of y (scaled and shifted per channel). */
static void mprt_group_norm_piece(void *ctx, long lo, long hi)
{
    const MprtGroups *t = ctx;
    int cg = t->C / t->G;
    for (long r = lo; r < hi; r++) {
        const float *xs = t->x + (size_t)r * t->D;
        float m, inv;
        mprt_group_moments(xs, t->D, t->eps, &m, &inv);
        for (int j = 0; j < cg; j++) {
            int c = (int)(r % t->G) * cg + j;
            float a = inv * t->scale[c], b = t->bias[c];
            for (long i = (long)j * t->P; i < (long)(j + 1) * t->P; i++)
                t->y[(size_t)r * t->D + i] = (xs[i] - m) * a + b;
        }
    }
}

MPRT_KERNEL void mprt_group_norm(int N, int C, int G, long P, const float *x,
                                 const float *scale, const float *bias, float eps, float *y)
{
    MprtGroups t = {.C = C, .G = G, .P = P, .D = (long)(C / G) * P, .eps = eps, .x = x,
                    .scale = scale, .bias = bias, .y = y};
    mprt_par((long)N * G, mprt_grain_rows(3 * t.D), mprt_group_norm_piece, &t);
}

/* Rows [lo, hi) of dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
 * g = dy * scale over each group; each row's moments kept. */
static void mprt_group_norm_dx_piece(void *ctx, long lo, long hi)
{
    const MprtGroups *t = ctx;
    int cg = t->C / t->G;
    long D = t->D, P = t->P;
    for (long r = lo; r < hi; r++) {
        const float *xs = t->x + (size_t)r * D, *d = t->dy + (size_t)r * D;
        float m, inv;
        mprt_group_moments(xs, D, t->eps, &m, &inv);
        t->moments[2 * r] = m, t->moments[2 * r + 1] = inv;
        double sg = 0, sgx = 0;
        for (long i = 0; i < D; i++) {
            int c = (int)(r % t->G) * cg + (int)(i / P);
            float xhat = (xs[i] - m) * inv;
            sg += (double)d[i] * t->scale[c];
            sgx += (double)d[i] * t->scale[c] * xhat;
        }
        float mg = (float)(sg / D), mgx = (float)(sgx / D);
        for (long i = 0; i < D; i++) {
            int c = (int)(r % t->G) * cg + (int)(i / P);
            float xhat = (xs[i] - m) * inv;
            t->y[(size_t)r * D + i] = inv * (d[i] * t->scale[c] - mg - xhat * mgx);
        }
    }
}

/* Channels [lo, hi) of dscale = sum dy * xhat and dbias = sum dy, over
 * the rows in order (N of them, the channel's group in each). */
static void mprt_group_norm_params_piece(void *ctx, long lo, long hi)
{
    const MprtGroups *t = ctx;
    int cg = t->C / t->G;
    long P = t->P;
    for (long c = lo; c < hi; c++) {
        double sx = 0, s = 0;
        for (long r = c / cg; r < t->rows; r += t->G) {
            const float *xs = t->x + (size_t)r * t->D + (c % cg) * P;
            const float *d = t->dy + (size_t)r * t->D + (c % cg) * P;
            float m = t->moments[2 * r], inv = t->moments[2 * r + 1];
            for (long i = 0; i < P; i++) {
                sx += (double)d[i] * ((xs[i] - m) * inv);
                s += d[i];
            }
        }
        t->dscale[c] = (float)sx;
        t->dbias[c] = (float)s;
    }
}

MPRT_KERNEL void mprt_group_norm_grad(int N, int C, int G, long P, const float *dy,
                                      const float *x, const float *scale, float eps,
                                      float *dx, float *dscale, float *dbias)
{
    float *moments = malloc((size_t)N * G * 2 * sizeof *moments);
    if (!moments) {
        fprintf(stderr, "train: error: out of memory in a normalization gradient\n");
        exit(1);
    }
    MprtGroups t = {.C = C, .G = G, .P = P, .D = (long)(C / G) * P, .rows = (long)N * G,
                    .eps = eps, .x = x, .dy = dy, .scale = scale, .y = dx, .dscale = dscale,
                    .dbias = dbias, .moments = moments};
    mprt_par(t.rows, mprt_grain_rows(4 * t.D), mprt_group_norm_dx_piece, &t);
    mprt_par(C, mprt_grain_rows(2L * N * P), mprt_group_norm_params_piece, &t);
    free(moments);
}

/* ---- dropout (the mask generator is in state.c) ---- */

/* 1 if element i is kept: a uniform 24-bit draw at or above the ratio. */
static inline int mprt_dropout_keep(uint64_t key, long i, float ratio)
{
    uint64_t r = mprt_mix64(key + (uint64_t)i * 0x9e3779b97f4a7c15ULL);
    return (float)(r >> 40) * (1.0f / 16777216.0f) >= ratio;
}

typedef struct MprtDropout {
    uint64_t key;
    float ratio, scale;
    const float *x;
    float *y;
    uint8_t *mask;
} MprtDropout;

/* Elements [lo, hi): each one's draw depends on its index alone. */
static void mprt_dropout_piece(void *ctx, long lo, long hi)
{
    const MprtDropout *t = ctx;
    for (long i = lo; i < hi; i++) {
        int keep = mprt_dropout_keep(t->key, i, t->ratio);
        t->y[i] = keep ? t->x[i] * t->scale : 0.0f;
        if (t->mask)
            t->mask[i] = (uint8_t)keep;
    }
}

/* Training: y = x * keep / (1 - ratio), mask = keep (mask may be NULL).
 * Otherwise (inference, or ratio 0) y = x and the mask is all ones. */
MPRT_KERNEL void mprt_dropout(long n, uint64_t node, float ratio, int training,
                              const float *x, float *y, uint8_t *mask)
{
    if (!training || ratio <= 0.0f) {
        if (x != y)
            memcpy(y, x, (size_t)n * sizeof *y);
        if (mask)
            memset(mask, 1, (size_t)n);
        return;
    }
    MprtDropout t = {mprt_dropout_key(node), ratio, ratio < 1.0f ? 1.0f / (1.0f - ratio) : 0.0f,
                     x, y, mask};
    mprt_par(n, MPRT_GRAIN / 4, mprt_dropout_piece, &t);
}

MPRT_KERNEL void mprt_dropout_grad(long n, uint64_t node, float ratio, const float *dy,
                                   float *dx)
{
    mprt_dropout(n, node, ratio, 1, dy, dx, NULL);
}

/* ---- log-softmax's gradient and the negative log-likelihood loss
 * (log-softmax itself is in cpu.c, with the cross-entropy that uses it) ---- */

/* Lines [lo, hi) of dx = dy - softmax(x) * sum_c dy, with softmax(x) =
 * exp(y) and the sum in double. */
static void mprt_log_softmax_grad_piece(void *ctx, long lo, long hi)
{
    const MprtLines *t = ctx;
    long C = t->C, inner = t->inner;
    for (long l = lo; l < hi; l++) {
        size_t base = mprt_line_at(t, l);
        const float *dy = t->a, *y = t->b;
        double sum = 0;
        for (long c = 0; c < C; c++)
            sum += dy[base + c * inner];
        for (long c = 0; c < C; c++)
            t->y[base + c * inner] = dy[base + c * inner] - mprt_expf(y[base + c * inner]) * (float)sum;
    }
}

MPRT_KERNEL void mprt_log_softmax_grad(long outer, long C, long inner, const float *dy,
                                       const float *y, float *dx)
{
    MprtLines t = {.C = C, .inner = inner, .a = dy, .b = y, .y = dx};
    mprt_par(outer * inner, mprt_grain_rows(C * 4), mprt_log_softmax_grad_piece, &t);
}

/* Mean of -x[n, label, d] over the labels that are not ignore_index;
 * x (N, C, D) holds log-probabilities. */
MPRT_KERNEL void mprt_nll(int N, int C, long D, const float *x, const int64_t *labels,
                          int64_t ignore, float *loss, const char *node)
{
    double total = 0;
    long count = 0;
    for (int n = 0; n < N; n++)
        for (long d = 0; d < D; d++) {
            int64_t t = labels[(size_t)n * D + d];
            if (t == ignore)
                continue;
            if (t < 0 || t >= C) {
                fprintf(stderr, "train: error: node '%s': label %lld is not a class in "
                        "[0, %d) nor the ignore_index %lld; check the labels\n", node,
                        (long long)t, C, (long long)ignore);
                exit(1);
            }
            total -= x[((size_t)n * C + t) * D + d];
            count++;
        }
    *loss = count ? (float)(total / count) : 0.0f;
}

/* NegativeLogLikelihoodLoss's forward with every option: class weights
 * (or NULL) and reduction 0 none (loss is (N, D), 0 where ignored), 1 sum,
 * 2 mean (the sum divided by the weights of the labels counted). */
MPRT_KERNEL void mprt_nll_forward(int N, int C, long D, const float *x, const int64_t *labels,
                                  const float *weight, int64_t ignore, int reduction,
                                  float *loss, const char *node)
{
    double total = 0, wsum = 0;
    for (int n = 0; n < N; n++)
        for (long d = 0; d < D; d++) {
            size_t i = (size_t)n * D + d;
            int64_t t = labels[i];
            if (t == ignore) {
                if (reduction == 0)
                    loss[i] = 0.0f;
                continue;
            }
            if (t < 0 || t >= C) {
                fprintf(stderr, "error: node '%s': label %lld is not a class in [0, %d) nor "
                        "the ignore_index %lld; check the labels\n", node, (long long)t, C,
                        (long long)ignore);
                exit(1);
            }
            double w = weight ? weight[t] : 1.0, l = -w * x[((size_t)n * C + t) * D + d];
            if (reduction == 0)
                loss[i] = (float)l;
            total += l;
            wsum += w;
        }
    if (reduction == 1)
        *loss = (float)total;
    else if (reduction == 2)
        *loss = (float)(total / wsum);
}

MPRT_KERNEL void mprt_nll_grad(int N, int C, long D, const float *dloss, const int64_t *labels,
                               int64_t ignore, float *dx)
{
    long count = 0;
    for (long i = 0; i < (long)N * D; i++)
        count += labels[i] != ignore;
    float g = count ? -dloss[0] / (float)count : 0.0f;
    memset(dx, 0, (size_t)N * C * D * sizeof *dx);
    for (int n = 0; n < N; n++)
        for (long d = 0; d < D; d++) {
            int64_t t = labels[(size_t)n * D + d];
            if (t != ignore)
                dx[((size_t)n * C + t) * D + d] = g;
        }
}
