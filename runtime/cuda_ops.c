/* cuda_ops.c — the CUDA device's kernels, forward and backward: for every
 * CPU kernel mprt_X the generated step can call (runtime/cpu.c,
 * cpu_move.c, cpu_math.c), mprt_cu_X with the same parameters, issued on
 * the device being driven (mprt_cu, from runtime/cuda.c) with device
 * pointers into its arena.
 *
 * GEMM and batched MatMul go through cuBLAS (row-major by the operand
 * swap: Y^T = op(B)^T op(A)^T), convolution and batch normalization
 * through cuDNN, everything else through the NVRTC kernels of
 * runtime/kernels.cu, launched by name (mprt_cu_launch("relu", ...)
 * starts mprt_k_relu). Everything is asynchronous on the device's compute
 * stream: nothing here synchronizes or allocates device memory. cuDNN
 * descriptors and algorithms are made once per distinct shape, on first
 * use; the convolutions' workspace is the memory plan's scratch.
 *
 * The host's globals the CPU kernels read (mprt_training, the dropout
 * seed and micro-batch) are read when the call is issued and passed to the
 * kernel. A kernel cannot stop the program the way the CPU's Gather and
 * NegativeLogLikelihoodLoss do on a bad index: it records the fault in the
 * module's mprt_k_fault, and mprt_sync (cuda.c) reports it after a step
 * with the CPU's message.
 *
 * Where the CPU scatters (the gradients of Gather, MaxPool, AveragePool,
 * Pad, Resize; ScatterElements, ScatterND), the kernels gather: one thread
 * owns each element of the result and adds its terms in the order the
 * CPU's loop adds them, so the results are deterministic and the CPU's.
 * cuda.c comes first in the program: its mprt_cu_call_failed is for
 * failing calls, mprt_cu_refuse here for what the kernels cannot take.
 */
#include "mprt.h"
#include "kernel.h"
#include "program.h"

#include <math.h>

#define MPRT_CU_BLOCK 256u       /* threads per block of the elementwise kernels */
#define MPRT_CU_COUNT_GRID 1024u /* at most this many blocks for kernels that count labels */

/* A shape or a state the kernels cannot take: one line naming the node,
 * exit 1 (runtime/cuda.c's mprt_cu_call_failed is for failing calls). */
static _Noreturn MPRT_PRINTF(1, 2) void mprt_cu_refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "train: error: node '%s': ", mprt_cu_node ? mprt_cu_node : "?");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* MPRT_CU_ALGOS set (and not 0): report which algorithms and paths the
 * kernels take, on stderr. */
static int mprt_cu_algos_on(void)
{
    const char *e = getenv("MPRT_CU_ALGOS");
    return e && *e && strcmp(e, "0") != 0;
}

/* ---- launching the NVRTC kernels ---- */

/* An elementwise kernel over n elements (a grid-stride loop). */
static void mprt_cu_each(const char *kernel, long n, void **args)
{
    if (n > 0)
        mprt_cu_launch(kernel, mprt_cu_blocks(n, MPRT_CU_BLOCK), MPRT_CU_BLOCK, 0, args);
}

/* A row kernel: one block per row of len elements, as many threads as the
 * row can use (a multiple of 32, at most 256). */
static void mprt_cu_rows(const char *kernel, long rows, long len, void **args)
{
    unsigned block = 32;
    while (block < 256 && block < len)
        block *= 2;
    if (rows > 0)
        mprt_cu_launch(kernel, mprt_cu_blocks(rows * (long)block, block), block, 0, args);
}

/* A column kernel (kernels.cu's mprt_k_col_sum): 32 columns of C a block,
 * its 16 warps splitting the rows. */
static void mprt_cu_cols(const char *kernel, long C, void **args)
{
    if (C > 0)
        mprt_cu_launch(kernel, mprt_cu_blocks(C, 32), 512, 0, args);
}

/* A channel kernel (kernels.cu's mprt_k_bn_train_rows): one block per
 * channel, each reducing over its channel's images; 1024 threads a block
 * where there are fewer channels than about two an SM (ptxas gives these
 * kernels 48 registers a thread on sm_90: one such block fits an SM). */
static void mprt_cu_channels(const char *kernel, long C, void **args)
{
    if (C > 0)
        mprt_cu_launch(kernel, mprt_cu_blocks(C, 1), C < 256 ? 1024 : 512, 0, args);
}

/* One block reducing everything (the losses). */
static void mprt_cu_one(const char *kernel, void **args)
{
    mprt_cu_launch(kernel, 1, MPRT_CU_BLOCK, 0, args);
}

/* Structures passed to the kernels by value: the same layout as theirs. */
typedef struct {
    int64_t shape[8];
    int64_t stride[3][8];
    int rank;
} MprtCuBcast;

/* `shape` (rank dims, at most 8) walked by k operands at strides s[j] (NULL:
 * 0 throughout), with its dims merged where every operand walks them
 * alike, as codegen.c's chain_dims: the same offsets over fewer dims, so
 * fewer divisions an element in the kernels (kernels.cu's index_digits);
 * dims of extent 1 dropped. Into out_shape and out_stride[j]; returns the
 * rank and the elements in *n. */
static int mprt_cu_merge_dims(int rank, const long *shape, int k, const long *const *s,
                              int64_t *out_shape, int64_t (*out_stride)[8], long *n)
{
    int r = 0;
    *n = 1;
    for (int d = 0; d < rank; d++) {
        *n *= shape[d];
        if (shape[d] == 1)
            continue;
        int merge = r > 0;
        for (int j = 0; j < k; j++)
            merge = merge && out_stride[j][r - 1] == (s[j] ? s[j][d] : 0) * shape[d];
        if (!merge)
            out_shape[r++] = 1;
        out_shape[r - 1] *= shape[d];
        for (int j = 0; j < k; j++)
            out_stride[j][r - 1] = s[j] ? s[j][d] : 0;
    }
    return r;
}

static MprtCuBcast mprt_cu_bcast(int rank, const long *shape, const long *s0, const long *s1,
                                 const long *s2, long *n)
{
    MprtCuBcast b;
    memset(&b, 0, sizeof b);
    if (rank > 8)
        mprt_cu_refuse("a broadcast over %d dimensions (at most 8)", rank);
    const long *s[3] = {s0, s1, s2};
    b.rank = mprt_cu_merge_dims(rank, shape, 3, s, b.shape, b.stride, n);
    return b;
}

/* ---- matrix multiply (cuBLAS) ---- */

/* Under --precision=bf16 the operands a float32 GEMM reads (a product
 * whose operands the code generator stages: most run on bf16 tensors,
 * mprt_cu_gemm_bf16 below) are float32 scratch holding bf16 values
 * (the code generator widens or rounds each), and the
 * GEMM runs on bf16 tensor cores: cuBLAS down-converts its inputs, which
 * loses nothing, and accumulates in float32, as the CPU's float32 GEMM of
 * the same values does. */
static cublasComputeType_t mprt_cu_gemm_compute(void)
{
    return mprt_cu_bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                        : mprt_cu_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* A GEMM's element types: float32 throughout, or under --precision=bf16
 * (mprt_cu_gemm_bf16, mprt_cu_bmm_bf16) bf16 A and B (MPRT_CU_IN16) and a
 * bf16 Y (MPRT_CU_OUT16) or a float32 one, accumulated in float32. */
enum { MPRT_CU_IN16 = 1, MPRT_CU_OUT16 = 2 };

/* Row-major Y[M,N] = op(A) op(B) (+ beta Y) with leading dimensions lda,
 * ldb, ldy: column-major Y^T = op(B)^T op(A)^T; io: the element types. */
static void mprt_cu_sgemm(int io, int ta, int tb, int M, int N, int K, float alpha,
                          const void *A, int lda, const void *B, int ldb, float beta, void *Y,
                          int ldy)
{
    if (M <= 0 || N <= 0)
        return;
    cudaDataType in = io & MPRT_CU_IN16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType out = io & MPRT_CU_OUT16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t compute = io & MPRT_CU_IN16 ? CUBLAS_COMPUTE_32F : mprt_cu_gemm_compute();
    MPRT_CUBLAS(cublasGemmEx(mprt_cu->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, in, ldb, A, in,
                             lda, &beta, Y, out, ldy, compute, CUBLAS_GEMM_DEFAULT));
}

MPRT_CU_KERNEL void mprt_cu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                 const float *B, float beta, const float *C, int c_rows,
                                 int c_cols, float *Y)
{
    float b = 0.0f;
    if (C && beta != 0.0f) {
        void *args[] = {&M, &N, &C, &c_rows, &c_cols, &Y};
        mprt_cu_each("gemm_c", (long)M * N, args);
        b = beta;
    }
    mprt_cu_sgemm(0, ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, b, Y, N);
}

/* mprt_cu_gemm on bf16 tensors, with no float32 copies (a GPU's only: a
 * CPU device computes on widened ones, codegen.c): A and B bf16; C
 * float32, or bf16 where c_bf16, read rounded to bf16 as the product
 * reads every operand; Y bf16 where y_bf16, else float32. The CPU's
 * numbers: the same float32 products and sums of the same bf16 values,
 * rounded to bf16 once at the end. */
MPRT_CU_KERNEL void mprt_cu_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha,
                                      const uint16_t *A, const uint16_t *B, float beta,
                                      const void *C, int c_bf16, int c_rows, int c_cols, void *Y,
                                      int y_bf16)
{
    float b = 0.0f;
    if (C && beta != 0.0f) {
        void *args[] = {&M, &N, &C, &c_bf16, &c_rows, &c_cols, &Y, &y_bf16};
        mprt_cu_each("gemm_c_bf16", (long)M * N, args);
        b = beta;
    }
    mprt_cu_sgemm(MPRT_CU_IN16 | (y_bf16 ? MPRT_CU_OUT16 : 0), ta, tb, M, N, K, alpha, A,
                  ta ? M : K, B, tb ? K : N, b, Y, N);
}

/* A batch's layout: each operand's batch strides dense (full), B's or
 * Y's 0 (shared), and whether Y sums over broadcast batch dims. */
typedef struct {
    long nb;
    int full_a, full_b, full_y, shared_b, shared_y, accumulate;
} MprtCuBatch;

/* The even step of strides st over the batch, or -1. */
static long mprt_cu_batch_step(int rank, const long *shape, const long *st)
{
    long step = -1, after = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (shape[d] > 1) {
            if (step < 0 && st[d] % after == 0)
                step = st[d] / after;
            if (st[d] != step * after)
                return -1;
        }
        after *= shape[d];
    }
    return step < 0 ? 0 : step;
}

static MprtCuBatch mprt_cu_batch(int rank, const long *shape, const long *sa, const long *sb,
                                 const long *sy, int M, int N, int K, int dense)
{
    MprtCuBatch b = {1, dense, dense, dense, 1, 1, 0};
    long s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        b.nb *= shape[d];
        b.full_a &= shape[d] == 1 || sa[d] == (long)M * K * s;
        b.full_b &= shape[d] == 1 || sb[d] == (long)K * N * s;
        b.full_y &= shape[d] == 1 || sy[d] == (long)M * N * s;
        b.shared_b &= shape[d] == 1 || sb[d] == 0;
        b.shared_y &= shape[d] == 1 || sy[d] == 0;
        b.accumulate |= shape[d] > 1 && sy[d] == 0;
        s *= shape[d];
    }
    return b;
}

/* The first batch dim from which every operand's strides walk evenly:
 * the dims from there on are one strided batch of GEMMs. */
static int mprt_cu_even_from(int rank, const long *shape, const long *const *st)
{
    int p = rank;
    while (p > 0 && mprt_cu_batch_step(rank - p + 1, shape + p - 1, st[0] + p - 1) >= 0 &&
           mprt_cu_batch_step(rank - p + 1, shape + p - 1, st[1] + p - 1) >= 0 &&
           mprt_cu_batch_step(rank - p + 1, shape + p - 1, st[2] + p - 1) >= 0)
        p--;
    return p;
}

/* Y[b] = op(A[b]) op(B[b]) for a batch Y does not sum over: one
 * strided-batched GEMM for the dims from mprt_cu_even_from on, one for
 * each index of the dims before (a view whose batch dims walk it
 * unevenly: a (B, T, H, d) activation read as (B, H, T, d)). */
static void mprt_cu_gemm_batches(int io, int rank, const long *shape, const long *const *st,
                                 int M, int N, int K, int ta, int tb, const long *ld,
                                 const void *A, const void *B, void *Y)
{
    int p = mprt_cu_even_from(rank, shape, st);
    long outer = 1, inner = 1, step[3];
    for (int d = 0; d < rank; d++)
        *(d < p ? &outer : &inner) *= shape[d];
    for (int k = 0; k < 3; k++)
        step[k] = mprt_cu_batch_step(rank - p, shape + p, st[k] + p);
    size_t ab = io & MPRT_CU_IN16 ? 2 : 4, yb = io & MPRT_CU_OUT16 ? 2 : 4;
    float one = 1.0f, zero = 0.0f;
    cudaDataType in = io & MPRT_CU_IN16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType out = io & MPRT_CU_OUT16 ? CUDA_R_16BF : CUDA_R_32F;
    for (long i = 0; i < outer; i++) {
        long off[3] = {0, 0, 0}, r = i;
        for (int d = p - 1; d >= 0; d--) {
            long k = r % shape[d];
            r /= shape[d];
            for (int j = 0; j < 3; j++)
                off[j] += k * st[j][d];
        }
        MPRT_CUBLAS(cublasGemmStridedBatchedEx(
            mprt_cu->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
            K, &one, (const char *)B + off[1] * ab, in, (int)ld[1], step[1],
            (const char *)A + off[0] * ab, in, (int)ld[0], step[0], &zero,
            (char *)Y + off[2] * yb, out, (int)ld[2], step[2], (int)inner,
            io & MPRT_CU_IN16 ? CUBLAS_COMPUTE_32F : mprt_cu_gemm_compute(), CUBLAS_GEMM_DEFAULT));
    }
}

/* Batched Y[b] (+)= op(A[b]) op(B[b]) with broadcast batch strides and
 * leading dimensions ld, as the CPU's mprt_bmm: the same two single-GEMM
 * layouts; a batch Y does not sum over is strided-batched GEMMs
 * (mprt_cu_gemm_batches: one, where every operand is dense, shared, or a
 * transposed activation's view walked evenly); one Y sums over walks the
 * batch, summing into Y in the CPU's order (in float32 only: a bf16 sum
 * would round each term). io: the types. */
static void mprt_cu_batched(int io, int rank, const long *shape, const long *sa, const long *sb,
                            const long *sy, int M, int N, int K, int ta, int tb, const long *ld,
                            const void *A, const void *B, void *Y)
{
    int lda = (int)ld[0], ldb = (int)ld[1], ldy = (int)ld[2];
    int dense = lda == (ta ? M : K) && ldb == (tb ? K : N) && ldy == N;
    MprtCuBatch b = mprt_cu_batch(rank, shape, sa, sb, sy, M, N, K, dense);
    size_t ab = io & MPRT_CU_IN16 ? 2 : 4, yb = io & MPRT_CU_OUT16 ? 2 : 4;
    if (b.nb <= 0 || M <= 0 || N <= 0)
        return;
    if (b.nb > 1 && !ta && b.full_a && b.full_y && b.shared_b) {
        mprt_cu_sgemm(io, 0, tb, (int)(b.nb * M), N, K, 1.0f, A, K, B, ldb, 0.0f, Y, N);
        return;
    }
    if (b.nb > 1 && ta && !tb && b.full_a && b.full_b && b.shared_y) {
        mprt_cu_sgemm(io, 1, 0, M, N, (int)(b.nb * K), 1.0f, A, M, B, N, 0.0f, Y, N);
        return;
    }
    if (!b.accumulate) {
        mprt_cu_gemm_batches(io, rank, shape, (const long *const[]){sa, sb, sy}, M, N, K, ta, tb,
                             ld, A, B, Y);
        return;
    }
    if (io & MPRT_CU_OUT16)
        mprt_cu_refuse("a bf16 MatMul output summed over broadcast batch dims");
    MPRT_CUDA(cudaMemsetAsync(Y, 0, (size_t)M * N * yb, mprt_cu->compute));
    for (long i = 0; i < b.nb; i++) {
        long oa = 0, ob = 0, oy = 0, r = i;
        for (int d = rank - 1; d >= 0; d--) {
            long k = r % shape[d];
            r /= shape[d];
            oa += k * sa[d], ob += k * sb[d], oy += k * sy[d];
        }
        mprt_cu_sgemm(io, ta, tb, M, N, K, 1.0f, (const char *)A + oa * ab, lda,
                      (const char *)B + ob * ab, ldb, 1.0f, (char *)Y + oy * yb, ldy);
    }
}

MPRT_CU_KERNEL void mprt_cu_bmm(int rank, const long *shape, const long *sa, const long *sb,
                                const long *sy, int M, int N, int K, int ta, int tb,
                                const long *ld, const float *A, const float *B, float *Y)
{
    mprt_cu_batched(0, rank, shape, sa, sb, sy, M, N, K, ta, tb, ld, A, B, Y);
}

/* mprt_cu_bmm on bf16 tensors (as mprt_cu_gemm_bf16): A and B bf16, Y bf16
 * where y_bf16 (then not summed over batch dims), else float32. */
MPRT_CU_KERNEL void mprt_cu_bmm_bf16(int rank, const long *shape, const long *sa, const long *sb,
                                     const long *sy, int M, int N, int K, int ta, int tb,
                                     const long *ld, const uint16_t *A, const uint16_t *B,
                                     void *Y, int y_bf16)
{
    mprt_cu_batched(MPRT_CU_IN16 | (y_bf16 ? MPRT_CU_OUT16 : 0), rank, shape, sa, sb, sy, M, N,
                    K, ta, tb, ld, A, B, Y);
}

/* ---- bfloat16 storage (--precision=bf16) ---- */

/* Whether n elements at x and y go a chunk of 8 a thread (kernels.cu's
 * CHUNK): n whole chunks, both 16-byte aligned. */
static int mprt_cu_chunked(long n, const void *x, const void *y)
{
    return n % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
}

/* A conversion of n elements from x to y: kernel, or its _chunks twin
 * where mprt_cu_chunked allows. */
static void mprt_cu_convert(const char *kernel, const char *chunked, long n, const void *x,
                            void *y)
{
    long chunks = n / 8;
    void *args[] = {&n, &x, &y}, *by_chunk[] = {&chunks, &x, &y};
    if (mprt_cu_chunked(n, x, y))
        mprt_cu_each(chunked, chunks, by_chunk);
    else
        mprt_cu_each(kernel, n, args);
}

MPRT_CU_KERNEL void mprt_cu_bf16_widen(long n, const uint16_t *x, float *y)
{
    mprt_cu_convert("bf16_widen", "bf16_widen_chunks", n, x, y);
}

MPRT_CU_KERNEL void mprt_cu_bf16_narrow(long n, const float *x, uint16_t *y)
{
    mprt_cu_convert("bf16_narrow", "bf16_narrow_chunks", n, x, y);
}

MPRT_CU_KERNEL void mprt_cu_bf16_round(long n, const float *x, float *y)
{
    void *args[] = {&n, &x, &y};
    mprt_cu_each("bf16_round", n, args);
}

/* ---- elementwise ---- */

MPRT_CU_KERNEL void mprt_cu_relu(long n, const float *x, float *y)
{
    void *args[] = {&n, &x, &y};
    mprt_cu_each("relu", n, args);
}

MPRT_CU_KERNEL void mprt_cu_relu_grad(long n, const float *dy, const float *y, float *dx)
{
    void *args[] = {&n, &dy, &y, &dx};
    mprt_cu_each("relu_grad", n, args);
}

MPRT_CU_KERNEL void mprt_cu_copy(long n, const float *x, float *y)
{
    if (x != y && n > 0)
        MPRT_CUDA(cudaMemcpyAsync(y, x, (size_t)n * sizeof *y, cudaMemcpyDeviceToDevice,
                                  mprt_cu->compute));
}

/* y = x[0] + ... + x[k-1], left to right, eight inputs per launch. */
MPRT_CU_KERNEL void mprt_cu_sum(long n, int k, const float *const *x, float *y)
{
    for (int j0 = 0; j0 < k; j0 += 8) {
        struct {
            const float *p[8];
        } ptrs;
        int m = k - j0 < 8 ? k - j0 : 8, acc = j0 > 0;
        memset(&ptrs, 0, sizeof ptrs);
        for (int j = 0; j < m; j++)
            ptrs.p[j] = x[j0 + j];
        void *args[] = {&n, &m, &acc, &ptrs, &y};
        mprt_cu_each("sum", n, args);
    }
}

/* sum = (first ? 0 : sum) + g: a parameter's gradient summed over the
 * micro-batches. */
MPRT_CU_KERNEL void mprt_cu_accumulate(long n, float *sum, const float *g, int first)
{
    void *args[] = {&n, &sum, &g, &first};
    mprt_cu_each("accumulate", n, args);
}

/* A copy of any element type, on the compute stream. */
MPRT_CU_KERNEL void mprt_cu_copy_bytes(size_t n, const void *x, void *y)
{
    if (x != y && n > 0)
        MPRT_CUDA(cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, mprt_cu->compute));
}

/* ADD, SUB, MUL, DIV, POW and PRELU (MIN and MAX are mprt_cu_nary's) */
MPRT_CU_KERNEL void mprt_cu_binary(int op, int rank, const long *shape, const float *a,
                                   const long *sa, const float *b, const long *sb, float *y)
{
    long n;
    MprtCuBcast bc = mprt_cu_bcast(rank, shape, sa, sb, NULL, &n);
    void *args[] = {&op, &n, &bc, &a, &b, &y};
    mprt_cu_each("binary", n, args);
}

MPRT_CU_KERNEL void mprt_cu_pow_grad(int wrt, int rank, const long *shape, const float *dy,
                                     const float *a, const long *sa, const float *b,
                                     const long *sb, const float *y, float *out)
{
    long n;
    MprtCuBcast bc = mprt_cu_bcast(rank, shape, sa, sb, NULL, &n);
    void *args[] = {&wrt, &n, &bc, &dy, &a, &b, &y, &out};
    mprt_cu_each("pow_grad", n, args);
}

MPRT_CU_KERNEL void mprt_cu_where(int rank, const long *shape, const uint8_t *cond,
                                  const long *sc, const float *a, const long *sa, const float *b,
                                  const long *sb, float *y)
{
    long n;
    MprtCuBcast bc = mprt_cu_bcast(rank, shape, sc, sa, sb, &n);
    void *args[] = {&n, &bc, &cond, &a, &b, &y};
    mprt_cu_each("where", n, args);
}

/* Expand of a tensor that is not float (a bool mask, int64 values): each
 * element's `size` bytes, from x's broadcast position. */
MPRT_CU_KERNEL void mprt_cu_broadcast_bytes(size_t size, int rank, const long *shape,
                                            const long *stride, const void *x, void *y)
{
    long n;
    MprtCuBcast bc = mprt_cu_bcast(rank, shape, stride, NULL, NULL, &n);
    int64_t sz = (int64_t)size;
    void *args[] = {&n, &bc, &sz, &x, &y};
    mprt_cu_each("broadcast_bytes", n, args);
}

MPRT_CU_KERNEL void mprt_cu_unary(int op, long n, float p, float q, const float *x, float *y)
{
    void *args[] = {&op, &n, &p, &q, &x, &y};
    mprt_cu_each("unary", n, args);
}

MPRT_CU_KERNEL void mprt_cu_unary_grad(int op, long n, float p, float q, const float *dy,
                                       const float *x, const float *y, float *dx)
{
    void *args[] = {&op, &n, &p, &q, &dy, &x, &y, &dx};
    mprt_cu_each("unary_grad", n, args);
}

/* Whether chain c runs a chunk of 8 elements a thread
 * (kernels.cu's mprt_k_ew_chain_chunks): its last dim a multiple of 8
 * long, the output and every operand that walks that dim (stride 1 there,
 * else 0: a value broadcast along it) 16-byte aligned at every chunk. */
static int mprt_cu_ew_chunked(const MprtEwChain *c, const void *const *x, const void *y)
{
    int last = c->rank - 1;
    if (last < 0 || c->shape[last] % 8 || (uintptr_t)y % 16)
        return 0;
    for (int k = 0; k < c->nops; k++) {
        if (c->stride[k][last] == 0)
            continue;
        if (c->stride[k][last] != 1 || (uintptr_t)x[k] % 16)
            return 0;
        for (int d = 0; d < last; d++)
            if (c->stride[k][d] % 8)
                return 0;
    }
    return 1;
}

/* A fused elementwise chain (kernel.h): the program passed by value, its
 * operands' pointers in kernels.cu's struct EwPtrs; in chunks of 8
 * elements a thread where mprt_cu_ew_chunked allows. */
MPRT_CU_KERNEL void mprt_cu_ew_chain(const MprtEwChain *c, const void *const *x, void *y)
{
    struct {
        const void *p[MPRT_EW_OPERANDS];
    } ptrs;
    long n = 1;
    memset(&ptrs, 0, sizeof ptrs);
    if (c->rank > 8 || c->nops > MPRT_EW_OPERANDS || c->nsteps > MPRT_EW_STEPS)
        mprt_cu_refuse("a fused chain of %d dimensions, %d operands, %d steps", c->rank,
                       c->nops, c->nsteps);
    for (int k = 0; k < c->nops; k++)
        ptrs.p[k] = x[k];
    for (int d = 0; d < c->rank; d++)
        n *= c->shape[d];
    if (mprt_cu_ew_chunked(c, x, y)) {
        long chunks = n / 8;
        void *args[] = {&chunks, (void *)c, &ptrs, &y};
        mprt_cu_each("ew_chain_chunks", chunks, args);
        return;
    }
    void *args[] = {&n, (void *)c, &ptrs, &y};
    mprt_cu_each("ew_chain", n, args);
}

/* k <= 8 operands broadcast into an output (kernels.cu's struct Nary) */
typedef struct {
    const float *p[8];
    int64_t shape[8];
    int64_t stride[8][8];   /* [operand][dimension] */
    int rank, k;
} MprtCuNary;

static MprtCuNary mprt_cu_nary_of(int k, int rank, const long *shape, const float *const *x,
                                  const long *const *sx, long *n)
{
    MprtCuNary a;
    memset(&a, 0, sizeof a);
    if (rank > 8 || k > 8 || k < 1)
        mprt_cu_refuse("%d operands over %d dimensions (at most 8 of each)", k, rank);
    a.k = k;
    a.rank = mprt_cu_merge_dims(rank, shape, k, sx, a.shape, a.stride, n);
    for (int j = 0; j < k; j++)
        a.p[j] = x[j];
    return a;
}

/* y = scale * (x[0] op ... x[k-1]): Sum, Mean, Min, Max, Expand, Tile */
MPRT_CU_KERNEL void mprt_cu_nary(int op, int k, int rank, const long *shape,
                                 const float *const *x, const long *const *sx, float scale,
                                 float *y)
{
    long n;
    MprtCuNary a = mprt_cu_nary_of(k, rank, shape, x, sx, &n);
    void *args[] = {&op, &n, &a, &scale, &y};
    mprt_cu_each("nary", n, args);
}

MPRT_CU_KERNEL void mprt_cu_minmax_grad(int wrt, int k, int rank, const long *shape,
                                        const float *const *x, const long *const *sx,
                                        const float *dy, const float *y, float *out)
{
    long n;
    MprtCuNary a = mprt_cu_nary_of(k, rank, shape, x, sx, &n);
    if (wrt < 0 || wrt >= k)
        mprt_cu_refuse("the gradient of operand %d of %d", wrt, k);
    void *args[] = {&wrt, &n, &a, &dy, &y, &out};
    mprt_cu_each("minmax_grad", n, args);
}

MPRT_CU_KERNEL void mprt_cu_prelu_grad(int wrt, int rank, const long *shape, const float *dy,
                                       const float *x, const float *slope, const long *ss,
                                       float *out)
{
    long n;
    MprtCuBcast bc = mprt_cu_bcast(rank, shape, ss, NULL, NULL, &n);
    void *args[] = {&wrt, &n, &bc, &dy, &x, &slope, &out};
    mprt_cu_each("prelu_grad", n, args);
}

/* kernels.cu's struct SumTo: the kept and the reduced dims of x, each
 * outermost first with x's strides. */
typedef struct {
    int64_t kshape[8], kstride[8], rshape[8], rstride[8];
    int nk, nr;
    int64_t nred;
} MprtCuSumTo;

static MprtCuSumTo mprt_cu_sum_to_of(int rank, const long *shape, const int *keep)
{
    MprtCuSumTo p;
    memset(&p, 0, sizeof p);
    if (rank > 8)
        mprt_cu_refuse("a reduction over %d dimensions (at most 8)", rank);
    long stride = 1;
    p.nred = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (keep[d]) {
            p.kshape[p.nk] = shape[d], p.kstride[p.nk++] = stride;
        } else {
            p.rshape[p.nr] = shape[d], p.rstride[p.nr++] = stride;
            p.nred *= shape[d];
        }
        stride *= shape[d];
    }
    /* listed innermost first: put them outermost first */
    for (int i = 0, j = p.nk - 1; i < j; i++, j--) {
        int64_t t = p.kshape[i]; p.kshape[i] = p.kshape[j]; p.kshape[j] = t;
        t = p.kstride[i]; p.kstride[i] = p.kstride[j]; p.kstride[j] = t;
    }
    for (int i = 0, j = p.nr - 1; i < j; i++, j--) {
        int64_t t = p.rshape[i]; p.rshape[i] = p.rshape[j]; p.rshape[j] = t;
        t = p.rstride[i]; p.rstride[i] = p.rstride[j]; p.rstride[j] = t;
    }
    return p;
}

/* A reduction: one thread per output taking its terms in x's order (as
 * the CPU), or, for few outputs with many terms each, one block per output. */
static void mprt_cu_reduce(const char *each, const char *rows, long n_out,
                           const MprtCuSumTo *p, void **args)
{
    if (n_out >= 1024 || p->nred < 64)
        mprt_cu_each(each, n_out, args);
    else
        mprt_cu_rows(rows, n_out, (long)p->nred, args);
}

/* out = alpha * dy summed over the dims where keep[d] is 0 */
/* mprt_cu_sum_to of a float32 dy, or (half) of a bf16 one: the kernels'
 * _bf16 twins, a GPU's only (codegen.c's row_kernel). */
static void mprt_cu_sum_to_typed(int half, int rank, const long *shape, const int *keep,
                                 const void *dy, float alpha, long n_out, float *out)
{
    int lead = 0;   /* reduced leading dims, then only kept ones: columns */
    while (lead < rank && !keep[lead])
        lead++;
    int cols = lead > 0;
    for (int d = lead; d < rank; d++)
        cols &= keep[d] != 0;
    if (cols) {
        long R = 1;
        for (int d = 0; d < lead; d++)
            R *= shape[d];
        void *args[] = {&R, &n_out, &dy, &alpha, &out};
        if (half)
            mprt_cu_cols("col_sum_bf16", n_out, args);
        else
            mprt_cu_cols("col_sum", n_out, args);
        return;
    }
    MprtCuSumTo p = mprt_cu_sum_to_of(rank, shape, keep);
    void *args[] = {&p, &dy, &alpha, &n_out, &out};
    if (half)
        mprt_cu_reduce("sum_to_bf16", "sum_to_rows_bf16", n_out, &p, args);
    else
        mprt_cu_reduce("sum_to", "sum_to_rows", n_out, &p, args);
}

MPRT_CU_KERNEL void mprt_cu_sum_to(int rank, const long *shape, const int *keep, const float *dy,
                                   float alpha, long n_out, float *out)
{
    mprt_cu_sum_to_typed(0, rank, shape, keep, dy, alpha, n_out, out);
}

MPRT_CU_KERNEL void mprt_cu_sum_to_bf16(int rank, const long *shape, const int *keep,
                                        const uint16_t *dy, float alpha, long n_out, float *out)
{
    mprt_cu_sum_to_typed(1, rank, shape, keep, dy, alpha, n_out, out);
}

/* ReduceMax (is_min: ReduceMin): the CPU's result, NaN and signed zeros
 * included, in either form (kernels.cu: extreme_wins). */
MPRT_CU_KERNEL void mprt_cu_reduce_max(int is_min, int rank, const long *shape, const int *keep,
                                       const float *x, long n_out, float *y)
{
    MprtCuSumTo p = mprt_cu_sum_to_of(rank, shape, keep);
    void *args[] = {&is_min, &p, &x, &n_out, &y};
    mprt_cu_reduce("reduce_max", "reduce_max_rows", n_out, &p, args);
}

MPRT_CU_KERNEL void mprt_cu_reduce_max_grad(int rank, const long *shape, const int *keep,
                                            const float *dy, const float *x, const float *y,
                                            long n_out, float *dx)
{
    MprtCuSumTo p = mprt_cu_sum_to_of(rank, shape, keep);
    void *args[] = {&p, &dy, &x, &y, &n_out, &dx};
    mprt_cu_reduce("reduce_max_grad", "reduce_max_grad_rows", n_out, &p, args);
}

/* ---- losses ---- */

MPRT_CU_KERNEL void mprt_cu_log_softmax(long outer, long C, long inner, const float *x, float *y)
{
    void *args[] = {&outer, &C, &inner, &x, &y};
    mprt_cu_rows("log_softmax", outer * inner, C, args);
}

MPRT_CU_KERNEL void mprt_cu_sce(int N, int C, long D, const float *x, const int64_t *labels,
                                int64_t ignore, float *loss, float *logp)
{
    mprt_cu_log_softmax(N, C, D, x, logp);
    uint64_t node = 0;   /* the CPU kernel names no node; a bad label reads "?" */
    const float *lp = logp;
    void *args[] = {&N, &C, &D, &lp, &labels, &ignore, &loss, &node};
    mprt_cu_one("nll", args);
}

/* mprt_cu_sce of bf16 scores, a GPU's only (codegen.c's row_kernel): the
 * log-probabilities (float32) of the widened scores, then the loss. */
MPRT_CU_KERNEL void mprt_cu_sce_bf16(int N, int C, long D, const uint16_t *x,
                                     const int64_t *labels, int64_t ignore, float *loss,
                                     float *logp)
{
    long outer = N, inner = D, Cl = C;
    void *ls[] = {&outer, &Cl, &inner, &x, &logp};
    mprt_cu_rows("log_softmax_of_bf16", outer * inner, Cl, ls);
    uint64_t node = 0;
    const float *lp = logp;
    void *args[] = {&N, &C, &D, &lp, &labels, &ignore, &loss, &node};
    mprt_cu_one("nll", args);
}

/* mprt_cu_sce keeping each row's log-sum-exp (cpu.c's mprt_sce_lse), of
 * the scores plus each class's bias (or NULL). */
MPRT_CU_KERNEL void mprt_cu_sce_lse(int N, int C, long D, const float *x, const float *bias,
                                    const int64_t *labels, int64_t ignore, float *loss,
                                    float *lse)
{
    long outer = N, inner = D, Cl = C;
    void *rows[] = {&outer, &Cl, &inner, &x, &bias, &lse};
    mprt_cu_rows("lse", outer * inner, Cl, rows);
    uint64_t node = 0;
    void *args[] = {&N, &C, &D, &x, &bias, &lse, &labels, &ignore, &loss, &node};
    mprt_cu_one("nll_lse", args);
}

/* The same of bf16 scores, a GPU's only (codegen.c's row_kernel). */
MPRT_CU_KERNEL void mprt_cu_sce_lse_bf16(int N, int C, long D, const uint16_t *x,
                                         const float *bias, const int64_t *labels,
                                         int64_t ignore, float *loss, float *lse)
{
    long outer = N, inner = D, Cl = C;
    void *rows[] = {&outer, &Cl, &inner, &x, &bias, &lse};
    mprt_cu_rows("lse_of_bf16", outer * inner, Cl, rows);
    uint64_t node = 0;
    void *args[] = {&N, &C, &D, &x, &bias, &lse, &labels, &ignore, &loss, &node};
    mprt_cu_one("nll_lse_of_bf16", args);
}

/* A kernel over N*C*D elements that also counts the labels (every block
 * counts them all, so the grid stays small). */
static void mprt_cu_counting(const char *kernel, long n, void **args)
{
    unsigned grid = mprt_cu_blocks(n, MPRT_CU_BLOCK);
    grid = grid < MPRT_CU_COUNT_GRID ? grid : MPRT_CU_COUNT_GRID;
    if (n > 0)
        mprt_cu_launch(kernel, grid, MPRT_CU_BLOCK, 0, args);
}

MPRT_CU_KERNEL void mprt_cu_sce_grad(int N, int C, long D, const float *dloss, const float *logp,
                                     const int64_t *labels, int64_t ignore, float *dx)
{
    void *args[] = {&N, &C, &D, &dloss, &logp, &labels, &ignore, &dx};
    mprt_cu_counting("sce_grad", (long)N * C * D, args);
}

/* mprt_cu_sce_grad into bf16 scores' gradient (as mprt_cu_sce_bf16). */
MPRT_CU_KERNEL void mprt_cu_sce_grad_bf16(int N, int C, long D, const float *dloss,
                                          const float *logp, const int64_t *labels,
                                          int64_t ignore, uint16_t *dx)
{
    void *args[] = {&N, &C, &D, &dloss, &logp, &labels, &ignore, &dx};
    mprt_cu_counting("sce_grad_bf16", (long)N * C * D, args);
}

MPRT_CU_KERNEL void mprt_cu_sce_lse_grad(int N, int C, long D, const float *dloss,
                                         const float *x, const float *bias, const float *lse,
                                         const int64_t *labels, int64_t ignore, float *dx)
{
    void *args[] = {&N, &C, &D, &dloss, &x, &bias, &lse, &labels, &ignore, &dx};
    mprt_cu_counting("sce_lse_grad", (long)N * C * D, args);
}

/* mprt_cu_sce_lse_grad into a bf16 dx, the scores float32 or (x_bf16) bf16. */
MPRT_CU_KERNEL void mprt_cu_sce_lse_grad_bf16(int N, int C, long D, const float *dloss,
                                              const void *x, int x_bf16, const float *bias,
                                              const float *lse, const int64_t *labels,
                                              int64_t ignore, uint16_t *dx)
{
    void *args[] = {&N, &C, &D, &dloss, &x, &x_bf16, &bias, &lse, &labels, &ignore, &dx};
    mprt_cu_counting("sce_lse_grad_bf16", (long)N * C * D, args);
}

MPRT_CU_KERNEL void mprt_cu_nll(int N, int C, long D, const float *x, const int64_t *labels,
                                int64_t ignore, float *loss, const char *node)
{
    uint64_t tag = (uint64_t)(uintptr_t)node;
    void *args[] = {&N, &C, &D, &x, &labels, &ignore, &loss, &tag};
    mprt_cu_one("nll", args);
}

/* The forward-only program's loss: class weights and every reduction. */
MPRT_CU_KERNEL void mprt_cu_nll_forward(int N, int C, long D, const float *x,
                                        const int64_t *labels, const float *weight,
                                        int64_t ignore, int reduction, float *loss,
                                        const char *node)
{
    uint64_t tag = (uint64_t)(uintptr_t)node;
    void *args[] = {&N, &C, &D, &x, &labels, &weight, &ignore, &reduction, &loss, &tag};
    if (reduction == 0)
        mprt_cu_each("nll_forward", (long)N * D, args);
    else
        mprt_cu_one("nll_forward", args);
}

MPRT_CU_KERNEL void mprt_cu_nll_grad(int N, int C, long D, const float *dloss,
                                     const int64_t *labels, int64_t ignore, float *dx)
{
    void *args[] = {&N, &C, &D, &dloss, &labels, &ignore, &dx};
    mprt_cu_counting("nll_grad", (long)N * C * D, args);
}

MPRT_CU_KERNEL void mprt_cu_mse(long n, const float *x, const float *t, float *loss)
{
    void *args[] = {&n, &x, &t, &loss};
    mprt_cu_one("mse", args);
}

MPRT_CU_KERNEL void mprt_cu_mse_grad(long n, const float *dloss, const float *x, const float *t,
                                     float *dx)
{
    void *args[] = {&n, &dloss, &x, &t, &dx};
    mprt_cu_each("mse_grad", n, args);
}

/* ---- softmax, layer normalization, dropout ---- */

MPRT_CU_KERNEL void mprt_cu_softmax(long outer, long C, long inner, const float *x, float *y)
{
    void *args[] = {&outer, &C, &inner, &x, &y};
    mprt_cu_rows("softmax", outer * inner, C, args);
}

MPRT_CU_KERNEL void mprt_cu_softmax_bias(long rows, long C, long brows, int round,
                                         const float *x, const float *b, float *y)
{
    void *args[] = {&rows, &C, &brows, &round, &x, &b, &y};
    mprt_cu_rows("softmax_bias", rows, (C + 7) / 8, args);   /* a thread a chunk of 8 */
}

MPRT_CU_KERNEL void mprt_cu_softmax_grad(long outer, long C, long inner, const float *dy,
                                         const float *y, float *dx)
{
    void *args[] = {&outer, &C, &inner, &dy, &y, &dx};
    mprt_cu_rows("softmax_grad", outer * inner, inner == 1 ? (C + 7) / 8 : C, args);
}

MPRT_CU_KERNEL void mprt_cu_log_softmax_grad(long outer, long C, long inner, const float *dy,
                                             const float *y, float *dx)
{
    void *args[] = {&outer, &C, &inner, &dy, &y, &dx};
    mprt_cu_rows("log_softmax_grad", outer * inner, C, args);
}

MPRT_CU_KERNEL void mprt_cu_layernorm(long rows, long D, const float *x, const float *scale,
                                      const float *bias, float eps, float *y, float *mean,
                                      float *rstd)
{
    void *args[] = {&rows, &D, &x, &scale, &bias, &eps, &y, &mean, &rstd};
    mprt_cu_rows("layernorm", rows, D, args);
}

MPRT_CU_KERNEL void mprt_cu_layernorm_grad(long rows, long D, const float *dy, const float *x,
                                           const float *scale, const float *mean,
                                           const float *rstd, float *dx, float *dscale,
                                           float *dbias)
{
    void *gx[] = {&rows, &D, &dy, &x, &scale, &mean, &rstd, &dx};
    mprt_cu_rows("layernorm_grad_x", rows, D, gx);
    void *gw[] = {&rows, &D, &dy, &x, &mean, &rstd, &dscale, &dbias};
    mprt_cu_cols("layernorm_grad_w", D, gw);
}

/* The row kernels' twins on bf16 tensors, a GPU's only (a CPU device
 * computes on float32 copies, codegen.c): kernels.cu runs the float32
 * kernels' bodies on the widened values and rounds each bf16 result once,
 * so the numbers are the CPU's with its conversions. */
MPRT_CU_KERNEL void mprt_cu_softmax_bf16(long outer, long C, long inner, const uint16_t *x,
                                         uint16_t *y)
{
    void *args[] = {&outer, &C, &inner, &x, &y};
    mprt_cu_rows("softmax_bf16", outer * inner, C, args);
}

MPRT_CU_KERNEL void mprt_cu_softmax_bias_bf16(long rows, long C, long brows, const uint16_t *x,
                                              const float *b, uint16_t *y)
{
    void *args[] = {&rows, &C, &brows, &x, &b, &y};
    mprt_cu_rows("softmax_bias_bf16", rows, (C + 7) / 8, args);
}

MPRT_CU_KERNEL void mprt_cu_softmax_grad_bf16(long outer, long C, long inner, const uint16_t *dy,
                                              const uint16_t *y, uint16_t *dx)
{
    void *args[] = {&outer, &C, &inner, &dy, &y, &dx};
    mprt_cu_rows("softmax_grad_bf16", outer * inner, inner == 1 ? (C + 7) / 8 : C, args);
}

MPRT_CU_KERNEL void mprt_cu_layernorm_bf16(long rows, long D, const uint16_t *x,
                                           const float *scale, const float *bias, float eps,
                                           uint16_t *y, float *mean, float *rstd)
{
    void *args[] = {&rows, &D, &x, &scale, &bias, &eps, &y, &mean, &rstd};
    mprt_cu_rows("layernorm_bf16", rows, D, args);
}

MPRT_CU_KERNEL void mprt_cu_layernorm_grad_bf16(long rows, long D, const uint16_t *dy,
                                                const uint16_t *x, const float *scale,
                                                const float *mean, const float *rstd,
                                                uint16_t *dx, float *dscale, float *dbias)
{
    void *gx[] = {&rows, &D, &dy, &x, &scale, &mean, &rstd, &dx};
    mprt_cu_rows("layernorm_grad_x_bf16", rows, D, gx);
    void *gw[] = {&rows, &D, &dy, &x, &mean, &rstd, &dscale, &dbias};
    mprt_cu_cols("layernorm_grad_w_bf16", D, gw);
}

/* Instance normalization (G = C) and group normalization: one block per
 * (image, group) of D = C/G * P elements. The weight gradients run one
 * block per channel recomputing its group's moments; both launches get
 * the block size of D, so the moments are the same bits as the forward's. */
MPRT_CU_KERNEL void mprt_cu_group_norm(int N, int C, int G, long P, const float *x,
                                       const float *scale, const float *bias, float eps, float *y)
{
    long D = (long)(C / G) * P;
    void *args[] = {&N, &C, &G, &P, &x, &scale, &bias, &eps, &y};
    mprt_cu_rows("group_norm", (long)N * G, D, args);
}

MPRT_CU_KERNEL void mprt_cu_group_norm_grad(int N, int C, int G, long P, const float *dy,
                                            const float *x, const float *scale, float eps,
                                            float *dx, float *dscale, float *dbias)
{
    long D = (long)(C / G) * P;
    void *gx[] = {&N, &C, &G, &P, &dy, &x, &scale, &eps, &dx};
    mprt_cu_rows("group_norm_grad_x", (long)N * G, D, gx);
    void *gw[] = {&N, &C, &G, &P, &dy, &x, &eps, &dscale, &dbias};
    mprt_cu_rows("group_norm_grad_w", C, D, gw);
}

/* Dropout's key, through a slot (cuda.c, mprt_cu_slot), so that a replayed
 * step draws the masks of its own micro-batches: k holds the node and the
 * micro-batch's number less the step's first (mprt_dropout_mb - the step
 * times mprt_dropout_stride), as bits; out, the key's. For the step of the
 * call itself that is mprt_dropout_key(node), whatever the numbering. */
static void mprt_cu_dropout_numbers(const float *k, long step, float *out)
{
    uint32_t c[4];
    memcpy(c, k, sizeof c);
    long mb = (step - 1) * mprt_dropout_stride + (long)((uint64_t)c[2] << 32 | c[1]);
    uint64_t key = mprt_dropout_key_at(c[0], mb);
    memcpy(out, &key, sizeof key);
}

static const uint64_t *mprt_cu_dropout_slot(uint64_t node)
{
    uint64_t rel = (uint64_t)(mprt_dropout_mb - mprt_step_no * mprt_dropout_stride);
    uint32_t c[4] = {(uint32_t)node, (uint32_t)rel, (uint32_t)(rel >> 32), 0};
    float k[4];
    memcpy(k, c, sizeof k);
    return (const uint64_t *)(const void *)mprt_cu_slot(mprt_cu_dropout_numbers, k,
                                                         mprt_step_no + 1);
}

/* The mask is the CPU's: the key is mprt_dropout_key's (the seed and the
 * micro-batch as they are now), read from its slot; the bits from the same
 * hash. */
/* Dropout of float32 x and y, or (half) of bf16 ones: the bf16 twins are a
 * GPU's only (codegen.c's row_kernel). */
static void mprt_cu_dropout_typed(int half, long n, uint64_t node, float ratio, int training,
                                  const void *x, void *y, uint8_t *mask)
{
    if (n <= 0)
        return;
    if (!training || ratio <= 0.0f) {
        mprt_cu_copy_bytes((size_t)n * (half ? 2 : 4), x, y);
        if (mask)
            MPRT_CUDA(cudaMemsetAsync(mask, 1, (size_t)n, mprt_cu->compute));
        return;
    }
    const uint64_t *key = mprt_cu_dropout_slot(node);
    float scale = ratio < 1.0f ? 1.0f / (1.0f - ratio) : 0.0f;
    void *args[] = {&n, &key, &ratio, &scale, &x, &y, &mask};
    if (half)
        mprt_cu_each("dropout_bf16", n, args);
    else
        mprt_cu_each("dropout", n, args);
}

MPRT_CU_KERNEL void mprt_cu_dropout(long n, uint64_t node, float ratio, int training,
                                    const float *x, float *y, uint8_t *mask)
{
    mprt_cu_dropout_typed(0, n, node, ratio, training, x, y, mask);
}

MPRT_CU_KERNEL void mprt_cu_dropout_grad(long n, uint64_t node, float ratio, const float *dy,
                                         float *dx)
{
    mprt_cu_dropout_typed(0, n, node, ratio, 1, dy, dx, NULL);
}

MPRT_CU_KERNEL void mprt_cu_dropout_bf16(long n, uint64_t node, float ratio, int training,
                                         const uint16_t *x, uint16_t *y, uint8_t *mask)
{
    mprt_cu_dropout_typed(1, n, node, ratio, training, x, y, mask);
}

MPRT_CU_KERNEL void mprt_cu_dropout_grad_bf16(long n, uint64_t node, float ratio,
                                              const uint16_t *dy, uint16_t *dx)
{
    mprt_cu_dropout_typed(1, n, node, ratio, 1, dy, dx, NULL);
}

/* ---- pooling ---- */

/* MaxPool runs on the NVRTC kernels: its gradient gets only the Indices,
 * which cuDNN neither makes nor reads. Each forward with Indices records
 * its window parameters under the Indices' address, so the gradient can
 * gather (deterministic, the CPU's order of adds); without them it
 * scatters with atomics. */
typedef struct {
    const int64_t *idx;
    MprtPool p;
} MprtCuPoolSeen;

static MprtCuPoolSeen *mprt_cu_pools;
static int mprt_cu_npools, mprt_cu_pools_cap;

static void mprt_cu_pool_remember(const int64_t *idx, const MprtPool *p)
{
    for (int i = 0; i < mprt_cu_npools; i++)
        if (mprt_cu_pools[i].idx == idx) {
            mprt_cu_pools[i].p = *p;
            return;
        }
    if (mprt_cu_npools == mprt_cu_pools_cap) {
        int cap = mprt_cu_pools_cap ? 2 * mprt_cu_pools_cap : 16;
        MprtCuPoolSeen *t = realloc(mprt_cu_pools, (size_t)cap * sizeof *t);
        if (!t)
            mprt_cu_refuse("out of memory");
        mprt_cu_pools = t, mprt_cu_pools_cap = cap;
    }
    mprt_cu_pools[mprt_cu_npools].idx = idx;
    mprt_cu_pools[mprt_cu_npools++].p = *p;
}

MPRT_CU_KERNEL void mprt_cu_maxpool(const MprtPool *p, const float *x, float *y, int64_t *idx)
{
    if (idx)
        mprt_cu_pool_remember(idx, p);
    void *args[] = {(void *)p, &x, &y, &idx};
    mprt_cu_each("maxpool", (long)p->N * p->C * p->OD * p->OH * p->OW, args);
}

MPRT_CU_KERNEL void mprt_cu_maxpool_grad(long n_out, long n_in, const float *dy,
                                         const int64_t *idx, float *dx)
{
    for (int i = 0; i < mprt_cu_npools; i++) {
        MprtPool *p = &mprt_cu_pools[i].p;
        long nc = (long)p->N * p->C;
        if (mprt_cu_pools[i].idx != idx || nc * p->OD * p->OH * p->OW != n_out ||
            nc * p->D * p->H * p->W != n_in)
            continue;
        void *args[] = {p, &dy, &idx, &dx};
        mprt_cu_each("maxpool_grad", n_in, args);
        return;
    }
    if (mprt_cu_algos_on())
        fprintf(stderr, "maxpool gradient %s: by scattering with atomics (where windows "
                "overlap, not the same bits run to run)\n", mprt_cu_node ? mprt_cu_node : "?");
    if (n_in > 0)
        MPRT_CUDA(cudaMemsetAsync(dx, 0, (size_t)n_in * sizeof *dx, mprt_cu->compute));
    void *args[] = {&n_out, &dy, &idx, &dx};
    mprt_cu_each("maxpool_grad_scatter", n_out, args);
}

/* Average pooling (back == 0: y from x) and its gradient (back: dx from
 * dy, gathered per input in the CPU's order; every input is written). */
MPRT_CU_KERNEL void mprt_cu_avgpool(int back, const MprtPool *p, float *x, float *y)
{
    long nc = (long)p->N * p->C;
    if (back) {
        void *args[] = {(void *)p, &x, &y};
        mprt_cu_each("avgpool_grad", nc * p->D * p->H * p->W, args);
    } else {
        void *args[] = {(void *)p, &x, &y};
        mprt_cu_each("avgpool", nc * p->OD * p->OH * p->OW, args);
    }
}

MPRT_CU_KERNEL void mprt_cu_gap(long NC, long P, const float *x, float *y)
{
    void *args[] = {&NC, &P, &x, &y};
    mprt_cu_rows("gap", NC, P, args);
}

MPRT_CU_KERNEL void mprt_cu_gap_grad(long NC, long P, const float *dy, float *dx)
{
    void *args[] = {&NC, &P, &dy, &dx};
    mprt_cu_each("gap_grad", NC * P, args);
}

/* Pooling on bf16 tensors, a GPU's only (a CPU device computes on float32
 * copies): the kernels' bf16 twins, the float32 kernels' operations on the
 * widened values, each result rounded once. A max pooling's gradient
 * gathers with its window, which the code generator passes (the forward
 * MaxPool's). */
MPRT_CU_KERNEL void mprt_cu_maxpool_bf16(const MprtPool *p, const uint16_t *x, uint16_t *y,
                                         int64_t *idx)
{
    void *args[] = {(void *)p, &x, &y, &idx};
    mprt_cu_each("maxpool_bf16", (long)p->N * p->C * p->OD * p->OH * p->OW, args);
}

MPRT_CU_KERNEL void mprt_cu_maxpool_grad_bf16(const MprtPool *p, const uint16_t *dy,
                                              const int64_t *idx, uint16_t *dx)
{
    void *args[] = {(void *)p, &dy, &idx, &dx};
    mprt_cu_each("maxpool_grad_bf16", (long)p->N * p->C * p->D * p->H * p->W, args);
}

MPRT_CU_KERNEL void mprt_cu_avgpool_bf16(int back, const MprtPool *p, uint16_t *x, uint16_t *y)
{
    long nc = (long)p->N * p->C;
    void *args[] = {(void *)p, &x, &y};
    if (back)
        mprt_cu_each("avgpool_grad_bf16", nc * p->D * p->H * p->W, args);
    else
        mprt_cu_each("avgpool_bf16", nc * p->OD * p->OH * p->OW, args);
}

MPRT_CU_KERNEL void mprt_cu_gap_bf16(long NC, long P, const uint16_t *x, uint16_t *y)
{
    void *args[] = {&NC, &P, &x, &y};
    mprt_cu_rows("gap_bf16", NC, P, args);
}

MPRT_CU_KERNEL void mprt_cu_gap_grad_bf16(long NC, long P, const uint16_t *dy, uint16_t *dx)
{
    void *args[] = {&NC, &P, &dy, &dx};
    mprt_cu_each("gap_grad_bf16", NC * P, args);
}

/* ---- cuDNN: descriptors made once per shape ---- */

/* A packed tensor descriptor of 4 (NCHW) or 5 (NCDHW) dims, float32 or
 * bf16 (a convolution's under --precision=bf16), one per distinct shape
 * and type. */
typedef struct {
    int nb, dims[5];
    cudnnDataType_t type;
    cudnnTensorDescriptor_t d;
} MprtCuTensor;

static MprtCuTensor *mprt_cu_tensors;
static int mprt_cu_ntensors, mprt_cu_tensors_cap;

static cudnnTensorDescriptor_t mprt_cu_tensor_nd(int nb, const long *dims, cudnnDataType_t type)
{
    int d[5];
    for (int i = 0; i < nb; i++) {
        if (dims[i] > INT_MAX)
            mprt_cu_refuse("a tensor dimension of %ld is too large for cuDNN", dims[i]);
        d[i] = (int)dims[i];
    }
    for (int i = 0; i < mprt_cu_ntensors; i++) {
        MprtCuTensor *t = &mprt_cu_tensors[i];
        if (t->nb == nb && t->type == type && memcmp(t->dims, d, (size_t)nb * sizeof *d) == 0)
            return t->d;
    }
    if (mprt_cu_ntensors == mprt_cu_tensors_cap) {
        int cap = mprt_cu_tensors_cap ? 2 * mprt_cu_tensors_cap : 32;
        MprtCuTensor *t = realloc(mprt_cu_tensors, (size_t)cap * sizeof *t);
        if (!t)
            mprt_cu_refuse("out of memory");
        mprt_cu_tensors = t, mprt_cu_tensors_cap = cap;
    }
    MprtCuTensor *t = &mprt_cu_tensors[mprt_cu_ntensors];
    t->nb = nb;
    t->type = type;
    memcpy(t->dims, d, (size_t)nb * sizeof *d);
    MPRT_CUDNN(cudnnCreateTensorDescriptor(&t->d));
    MPRT_CUDNN(cudnnSetTensorNdDescriptorEx(t->d, CUDNN_TENSOR_NCHW, type, nb, t->dims));
    mprt_cu_ntensors++;
    return t->d;
}

static cudnnTensorDescriptor_t mprt_cu_tensor(long n, long c, long h, long w)
{
    return mprt_cu_tensor_nd(4, (long[]){n, c, h, w}, CUDNN_DATA_FLOAT);
}

/* ---- convolution (cuDNN; the NVRTC kernels where cuDNN cannot) ---- */

/* One convolution shape on one device, on float32 tensors or (half) bf16
 * ones: descriptors, and each direction's algorithm and workspace once
 * chosen (deterministic ones first, within the device's scratch). direct:
 * the output size is not what cuDNN's symmetric padding gives (the end
 * pads differ), so the direct kernels run. */
typedef struct {
    const MprtCuDevice *dev;
    MprtConv p;
    int half;
    int direct;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int chosen[3];   /* forward, backward data, backward filter */
    int algo[3];
    size_t ws[3];
} MprtCuConv;

static MprtCuConv **mprt_cu_convs;
static int mprt_cu_nconvs, mprt_cu_convs_cap;

/* The spatial dims cuDNN is given: 2 (a 1-D convolution is a 2-D one of
 * height 1), or 3 when the depth is used. */
static int mprt_cu_conv_spatial(const MprtConv *p)
{
    return p->D == 1 && p->KD == 1 && p->OD == 1 && p->pd == 0 ? 2 : 3;
}

/* c's descriptors, as 4-D (NCHW, KCRS) or 5-D (NCDHW, KCTRS) ones; direct
 * when cuDNN's output size is not p's. */
static void mprt_cu_conv_describe(MprtCuConv *c, const MprtConv *p)
{
    int ns = mprt_cu_conv_spatial(p), o = 3 - ns, nb = ns + 2;
    int in[3] = {p->D, p->H, p->W}, out[3] = {p->OD, p->OH, p->OW}, k[3] = {p->KD, p->KH, p->KW};
    int pad[3] = {p->pd, p->ph, p->pw}, stride[3] = {p->sd, p->sh, p->sw};
    int dil[3] = {p->dd, p->dh, p->dw}, wd[5] = {p->M, p->C / p->group}, got[5];
    long xd[5] = {p->N, p->C}, yd[5] = {p->N, p->M};
    for (int i = 0; i < ns; i++)
        xd[2 + i] = in[o + i], yd[2 + i] = out[o + i], wd[2 + i] = k[o + i];
    cudnnDataType_t type = c->half ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    MPRT_CUDNN(cudnnCreateFilterDescriptor(&c->w));
    MPRT_CUDNN(cudnnSetFilterNdDescriptor(c->w, type, CUDNN_TENSOR_NCHW, nb, wd));
    MPRT_CUDNN(cudnnCreateConvolutionDescriptor(&c->conv));
    MPRT_CUDNN(cudnnSetConvolutionNdDescriptor(c->conv, ns, pad + o, stride + o, dil + o,
                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    MPRT_CUDNN(cudnnSetConvolutionGroupCount(c->conv, p->group));
    /* no TF32 unless mpcc --tf32 or --precision=bf16: the products stay
     * float, as on the CPU. Under bf16 every operand holds a bf16 value,
     * which TF32 holds exactly: the tensor cores' products are the CPU's.
     * On bf16 tensors (float32 compute): the bf16 tensor cores. */
    MPRT_CUDNN(cudnnSetConvolutionMathType(c->conv, c->half ? CUDNN_TENSOR_OP_MATH
                                                    : mprt_cu_tf32 || mprt_cu_bf16
                                                        ? CUDNN_DEFAULT_MATH
                                                        : CUDNN_FMA_MATH));
    c->x = mprt_cu_tensor_nd(nb, xd, type);
    c->y = mprt_cu_tensor_nd(nb, yd, type);
    MPRT_CUDNN(cudnnGetConvolutionNdForwardOutputDim(c->conv, c->x, c->w, nb, got));
    c->direct = 0;
    for (int i = 2; i < nb; i++)
        c->direct |= got[i] != yd[i];
}

static MprtCuConv *mprt_cu_conv_of(const MprtConv *p, int half)
{
    for (int i = 0; i < mprt_cu_nconvs; i++)
        if (mprt_cu_convs[i]->dev == mprt_cu && mprt_cu_convs[i]->half == half &&
            memcmp(&mprt_cu_convs[i]->p, p, sizeof *p) == 0)
            return mprt_cu_convs[i];
    if (mprt_cu_nconvs == mprt_cu_convs_cap) {
        int cap = mprt_cu_convs_cap ? 2 * mprt_cu_convs_cap : 32;
        MprtCuConv **t = realloc(mprt_cu_convs, (size_t)cap * sizeof *t);
        if (!t)
            mprt_cu_refuse("out of memory");
        mprt_cu_convs = t, mprt_cu_convs_cap = cap;
    }
    MprtCuConv *c = calloc(1, sizeof *c);
    if (!c)
        mprt_cu_refuse("out of memory");
    c->dev = mprt_cu;
    c->p = *p;
    c->half = half;
    mprt_cu_conv_describe(c, p);
    mprt_cu_convs[mprt_cu_nconvs++] = c;
    return c;
}

/* The candidates of one direction as cuDNN's heuristics rank them. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
} MprtCuAlgo;

/* The workspace `algo` needs in direction dir, or (size_t)-1 if it cannot
 * run this convolution. */
static size_t mprt_cu_conv_ws(const MprtCuConv *c, int dir, int algo)
{
    size_t ws = 0;
    cudnnStatus_t s;
    if (dir == 0)
        s = cudnnGetConvolutionForwardWorkspaceSize(mprt_cu->dnn, c->x, c->w, c->conv, c->y,
                                                    (cudnnConvolutionFwdAlgo_t)algo, &ws);
    else if (dir == 1)
        s = cudnnGetConvolutionBackwardDataWorkspaceSize(mprt_cu->dnn, c->w, c->y, c->conv, c->x,
                                                         (cudnnConvolutionBwdDataAlgo_t)algo, &ws);
    else
        s = cudnnGetConvolutionBackwardFilterWorkspaceSize(mprt_cu->dnn, c->x, c->y, c->conv,
                                                           c->w,
                                                           (cudnnConvolutionBwdFilterAlgo_t)algo,
                                                           &ws);
    return s == CUDNN_STATUS_SUCCESS ? ws : (size_t)-1;
}

/* MPRT_CU_ALGOS=1: one line on stderr per convolution shape and direction,
 * the algorithm chosen and cuDNN's ranking, to read a run's speed and
 * reproducibility by. */
static void mprt_cu_conv_report(const MprtCuConv *c, int dir, const MprtCuAlgo *cand, int n,
                                size_t room)
{
    static const char *const dirs[] = {"the forward", "the data gradient", "the weight gradient"};
    if (!mprt_cu_algos_on())
        return;
    const MprtConv *p = &c->p;
    fprintf(stderr, "conv N%d C%d %dx%dx%d -> M%d k%dx%dx%d s%d,%d g%d, %s: algo %d, "
            "workspace %zu of at most %zu bytes; cuDNN's ranking:", p->N, p->C, p->D, p->H, p->W,
            p->M, p->KD, p->KH, p->KW, p->sh, p->sw, p->group, dirs[dir], c->algo[dir],
            c->ws[dir], room);
    for (int i = 0; i < n; i++)
        if (cand[i].status == CUDNN_STATUS_SUCCESS)
            fprintf(stderr, " %d%s%s(%zu)", cand[i].algo,
                    cand[i].det == CUDNN_DETERMINISTIC ? "" : "*",
                    cand[i].math == CUDNN_TENSOR_OP_MATH ||
                            cand[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? "+" : "",
                    cand[i].memory);
    fprintf(stderr, " (* not deterministic, + tensor cores; workspace bytes)\n");
}

/* The most workspace a convolution may take: the memory plan's scratch, or
 * MPRT_CU_WORKSPACE_MB (default 1024) MiB of cuDNN's own if that is more. */
static size_t mprt_cu_conv_room(void)
{
    size_t scratch = mprt_cu->scratch ? mprt_cu->scratch_bytes : 0, mb = 1024;
    const char *e = getenv("MPRT_CU_WORKSPACE_MB");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end || v > ((size_t)-1 >> 20))
            mprt_cu_refuse("MPRT_CU_WORKSPACE_MB=%s is not a number of MiB", e);
        mb = (size_t)v;
    }
    return scratch > (mb << 20) ? scratch : mb << 20;
}

/* Grows the device's cuDNN workspace to n bytes; 0 if cudaMalloc cannot
 * (the choice then falls back to what fits). cudaFree waits for the work
 * that may still use the old one. */
static int mprt_cu_grow_workspace(size_t n)
{
    if (n <= mprt_cu->workspace_bytes)
        return 1;
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (mprt_cu->workspace)
        MPRT_CUDA(cudaFree(mprt_cu->workspace));
    mprt_cu->workspace = p;
    mprt_cu->workspace_bytes = n;
    return 1;
}

/* Whether direction dir's workspace fits the scratch from col (the
 * call's own area: past what the call holds there, codegen.c's workspace)
 * to its end. */
static int mprt_cu_conv_fits(const MprtCuConv *c, int dir, const void *col)
{
    size_t at = (size_t)((const char *)col - (const char *)mprt_cu->scratch);
    return mprt_cu->scratch && col && at <= mprt_cu->scratch_bytes &&
           c->ws[dir] <= mprt_cu->scratch_bytes - at;
}

/* The area direction dir's algorithm runs in: the scratch from col if it
 * fits, else the device's cuDNN workspace (mprt_cu_conv_ready grew it). */
static void *mprt_cu_conv_area(const MprtCuConv *c, int dir, void *col)
{
    return mprt_cu_conv_fits(c, dir, col) ? col : mprt_cu->workspace;
}

/* cuDNN's ranking of direction dir's algorithms (its heuristics: fastest
 * expected first) into cand[16]; returns how many. */
static int mprt_cu_conv_rank(const MprtCuConv *c, int dir, MprtCuAlgo *cand)
{
    int n = 0;
    if (dir == 0) {
        cudnnConvolutionFwdAlgoPerf_t perf[16];
        MPRT_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(mprt_cu->dnn, c->x, c->w, c->conv,
                                                          c->y, 16, &n, perf));
        for (int i = 0; i < n; i++)
            cand[i] = (MprtCuAlgo){perf[i].algo, perf[i].status, perf[i].memory,
                                   perf[i].determinism, perf[i].mathType};
    } else if (dir == 1) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[16];
        MPRT_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(mprt_cu->dnn, c->w, c->y, c->conv,
                                                               c->x, 16, &n, perf));
        for (int i = 0; i < n; i++)
            cand[i] = (MprtCuAlgo){perf[i].algo, perf[i].status, perf[i].memory,
                                   perf[i].determinism, perf[i].mathType};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
        MPRT_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(mprt_cu->dnn, c->x, c->y,
                                                                 c->conv, c->w, 16, &n, perf));
        for (int i = 0; i < n; i++)
            cand[i] = (MprtCuAlgo){perf[i].algo, perf[i].status, perf[i].memory,
                                   perf[i].determinism, perf[i].mathType};
    }
    return n;
}

/* MPRT_CU_DETERMINISTIC: 1 (the default), cuDNN's deterministic
 * algorithms first, so that two runs give the same bits; 0, the first of
 * cuDNN's ranking whatever it is, as PyTorch picks them with
 * cudnn.deterministic off: faster on some shapes (the data and weight
 * gradients' algorithms 0 and 3 accumulate with atomics), and two runs may
 * differ from the second step. */
static int mprt_cu_deterministic(void)
{
    const char *e = getenv("MPRT_CU_DETERMINISTIC");
    if (!e || !*e || strcmp(e, "1") == 0)
        return 1;
    if (strcmp(e, "0") != 0)
        mprt_cu_refuse("MPRT_CU_DETERMINISTIC=%s: give 1 (the default: cuDNN's deterministic "
                       "algorithms, the same bits every run) or 0 (the fastest-ranked, "
                       "deterministic or not)", e);
    return 0;
}

/* The first of cand[n] that can run within room bytes: deterministic
 * ones first (unless MPRT_CU_DETERMINISTIC=0), tensor-core ones only under
 * --tf32 or bf16 (never one that converts to float16, whose range is
 * bf16's less); -1 if none. */
static int mprt_cu_conv_pick(const MprtCuConv *c, int dir, const MprtCuAlgo *cand, int n,
                             size_t room, size_t *ws)
{
    for (int pass = !mprt_cu_deterministic(); pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (cand[i].status != CUDNN_STATUS_SUCCESS || cand[i].memory > room ||
                (!mprt_cu_tf32 && !mprt_cu_bf16 && cand[i].math == CUDNN_TENSOR_OP_MATH) ||
                (!mprt_cu_tf32 && cand[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) ||
                (pass == 0 && cand[i].det != CUDNN_DETERMINISTIC))
                continue;
            *ws = mprt_cu_conv_ws(c, dir, cand[i].algo);
            if (*ws != (size_t)-1 && *ws <= room)
                return cand[i].algo;
        }
    return -1;
}

/* Chooses direction dir's algorithm as cuDNN's heuristics rank them: the
 * first deterministic one within the room (mprt_cu_conv_room), else (or
 * with MPRT_CU_DETERMINISTIC=0) the first that fits; the workspace grows
 * to what it needs, and where cudaMalloc cannot, the choice is made again
 * within what there is. None fits: the direct kernels run. */
static int mprt_cu_conv_choose(MprtCuConv *c, int dir)
{
    MprtCuAlgo cand[16];
    int n = mprt_cu_conv_rank(c, dir, cand);
    size_t room = mprt_cu_conv_room(), ws = 0;
    int pick = mprt_cu_conv_pick(c, dir, cand, n, room, &ws);
    if (pick >= 0 && ws > mprt_cu->scratch_bytes && !mprt_cu_grow_workspace(ws)) {
        room = mprt_cu->scratch_bytes > mprt_cu->workspace_bytes ? mprt_cu->scratch_bytes
                                                                 : mprt_cu->workspace_bytes;
        pick = mprt_cu_conv_pick(c, dir, cand, n, room, &ws);
    }
    c->chosen[dir] = 1;
    c->algo[dir] = pick;
    c->ws[dir] = pick >= 0 ? ws : 0;
    mprt_cu_conv_report(c, dir, cand, n, room);
    return pick >= 0;
}

/* Whether direction dir runs through cuDNN, with its workspace at the
 * scratch from col or in the device's workspace, grown to it (at the first
 * step, before any capture: a call holds the same operands every step). */
static int mprt_cu_conv_ready(MprtCuConv *c, int dir, const void *col)
{
    if (c->direct)
        return 0;
    if (!c->chosen[dir])
        mprt_cu_conv_choose(c, dir);
    if (c->algo[dir] < 0)
        return 0;
    return mprt_cu_conv_fits(c, dir, col) || mprt_cu_grow_workspace(c->ws[dir]);
}

MPRT_CU_KERNEL void mprt_cu_conv(const MprtConv *p, const float *x, const float *w,
                                 const float *b, float *y, float *col)
{
    MprtCuConv *c = mprt_cu_conv_of(p, 0);
    if (mprt_cu_conv_ready(c, 0, col)) {
        float one = 1.0f, zero = 0.0f;
        MPRT_CUDNN(cudnnConvolutionForward(mprt_cu->dnn, &one, c->x, x, c->w, w, c->conv,
                                           (cudnnConvolutionFwdAlgo_t)c->algo[0],
                                           mprt_cu_conv_area(c, 0, col), c->ws[0], &zero, c->y, y));
    } else {
        void *args[] = {(void *)p, &x, &w, &y};
        mprt_cu_each("conv", (long)p->N * p->M * mprt_conv_out_plane(p), args);
    }
    if (b) {
        long P = mprt_conv_out_plane(p), n = (long)p->N * p->M * P;
        int M = p->M;
        void *args[] = {&n, &M, &P, &b, &y};
        mprt_cu_each("bias_add", n, args);
    }
}

/* mprt_bias_round_add: y rounded to bf16, then the bias added. */
MPRT_CU_KERNEL void mprt_cu_bias_round_add(long n, int M, long P, const float *b, float *y)
{
    void *round[] = {&n, &y, &y};
    mprt_cu_each("bf16_round", n, round);
    void *args[] = {&n, &M, &P, &b, &y};
    mprt_cu_each("bias_add", n, args);
}

/* The same on a bf16 y, the bias read rounded to bf16 (as every operand
 * of a convolution under bf16): y = bf16(y + bf16(b)). */
MPRT_CU_KERNEL void mprt_cu_bias_add_bf16(long n, int M, long P, const float *b, uint16_t *y)
{
    void *args[] = {&n, &M, &P, &b, &y};
    mprt_cu_each("bias_add_bf16", n, args);
}

MPRT_CU_KERNEL void mprt_cu_conv_grad_x(const MprtConv *p, const float *dy, const float *w,
                                        float *dx, float *col)
{
    MprtCuConv *c = mprt_cu_conv_of(p, 0);
    if (mprt_cu_conv_ready(c, 1, col)) {
        float one = 1.0f, zero = 0.0f;
        MPRT_CUDNN(cudnnConvolutionBackwardData(mprt_cu->dnn, &one, c->w, w, c->y, dy, c->conv,
                                                (cudnnConvolutionBwdDataAlgo_t)c->algo[1],
                                                mprt_cu_conv_area(c, 1, col), c->ws[1], &zero, c->x, dx));
    } else {
        void *args[] = {(void *)p, &dy, &w, &dx};
        mprt_cu_each("conv_grad_x", (long)p->N * p->C * mprt_conv_in_plane(p), args);
    }
}

/* ConvTranspose as the data gradient of the convolution it inverts (p
 * describes that convolution, groups included), then the bias per channel
 * of y, as the CPU. */
MPRT_CU_KERNEL void mprt_cu_conv_transpose(const MprtConv *p, const float *x, const float *w,
                                           const float *b, float *y, float *col)
{
    mprt_cu_conv_grad_x(p, x, w, y, col);
    if (b) {
        long P = mprt_conv_in_plane(p), n = (long)p->N * p->C * P;
        int C = p->C;
        void *args[] = {&n, &C, &P, &b, &y};
        mprt_cu_each("bias_add", n, args);
    }
}

MPRT_CU_KERNEL void mprt_cu_conv_grad_w(const MprtConv *p, const float *dy, const float *x,
                                        float *dw, float *col)
{
    MprtCuConv *c = mprt_cu_conv_of(p, 0);
    if (mprt_cu_conv_ready(c, 2, col)) {
        float one = 1.0f, zero = 0.0f;
        MPRT_CUDNN(cudnnConvolutionBackwardFilter(mprt_cu->dnn, &one, c->x, x, c->y, dy, c->conv,
                                                  (cudnnConvolutionBwdFilterAlgo_t)c->algo[2],
                                                  mprt_cu_conv_area(c, 2, col), c->ws[2], &zero, c->w, dw));
    } else {
        void *args[] = {(void *)p, &dy, &x, &dw};
        mprt_cu_each("conv_grad_w", (long)p->M * (p->C / p->group) * mprt_conv_taps(p), args);
    }
}

/* A convolution without bias, its data gradient and its filter gradient
 * on bf16 tensors, a GPU's only (a CPU device computes on float32 copies,
 * codegen.c): cuDNN with bf16 descriptors and float32 compute, or where it
 * cannot, the direct kernels' bf16 twins. The products and sums of the
 * CPU's float32 convolution of the same bf16 values, each result rounded
 * once (a float32 filter gradient is widened after, as the CPU rounds
 * it: graph/precision.c). */
MPRT_CU_KERNEL void mprt_cu_conv_bf16(const MprtConv *p, const uint16_t *x, const uint16_t *w,
                                      uint16_t *y, float *col)
{
    MprtCuConv *c = mprt_cu_conv_of(p, 1);
    if (mprt_cu_conv_ready(c, 0, col)) {
        float one = 1.0f, zero = 0.0f;
        MPRT_CUDNN(cudnnConvolutionForward(mprt_cu->dnn, &one, c->x, x, c->w, w, c->conv,
                                           (cudnnConvolutionFwdAlgo_t)c->algo[0],
                                           mprt_cu_conv_area(c, 0, col), c->ws[0], &zero, c->y, y));
    } else {
        void *args[] = {(void *)p, &x, &w, &y};
        mprt_cu_each("conv_bf16", (long)p->N * p->M * mprt_conv_out_plane(p), args);
    }
}

MPRT_CU_KERNEL void mprt_cu_conv_grad_x_bf16(const MprtConv *p, const uint16_t *dy,
                                             const uint16_t *w, uint16_t *dx, float *col)
{
    MprtCuConv *c = mprt_cu_conv_of(p, 1);
    if (mprt_cu_conv_ready(c, 1, col)) {
        float one = 1.0f, zero = 0.0f;
        MPRT_CUDNN(cudnnConvolutionBackwardData(mprt_cu->dnn, &one, c->w, w, c->y, dy, c->conv,
                                                (cudnnConvolutionBwdDataAlgo_t)c->algo[1],
                                                mprt_cu_conv_area(c, 1, col), c->ws[1], &zero, c->x,
                                                dx));
    } else {
        void *args[] = {(void *)p, &dy, &w, &dx};
        mprt_cu_each("conv_grad_x_bf16", (long)p->N * p->C * mprt_conv_in_plane(p), args);
    }
}

MPRT_CU_KERNEL void mprt_cu_conv_grad_w_bf16(const MprtConv *p, const uint16_t *dy,
                                             const uint16_t *x, uint16_t *dw, float *col)
{
    MprtCuConv *c = mprt_cu_conv_of(p, 1);
    if (mprt_cu_conv_ready(c, 2, col)) {
        float one = 1.0f, zero = 0.0f;
        MPRT_CUDNN(cudnnConvolutionBackwardFilter(mprt_cu->dnn, &one, c->x, x, c->y, dy, c->conv,
                                                  (cudnnConvolutionBwdFilterAlgo_t)c->algo[2],
                                                  mprt_cu_conv_area(c, 2, col), c->ws[2], &zero,
                                                  c->w, dw));
    } else {
        void *args[] = {(void *)p, &dy, &x, &dw};
        mprt_cu_each("conv_grad_w_bf16", (long)p->M * (p->C / p->group) * mprt_conv_taps(p), args);
    }
}

MPRT_CU_KERNEL void mprt_cu_channel_sum(int N, int M, long P, const float *dy, float *db)
{
    void *args[] = {&N, &M, &P, &dy, &db};
    mprt_cu_rows("channel_sum", M, (long)N * P, args);
}

/* A convolution's bias gradient of a bf16 dy, into its float32 value. */
MPRT_CU_KERNEL void mprt_cu_channel_sum_bf16(int N, int M, long P, const uint16_t *dy, float *db)
{
    void *args[] = {&N, &M, &P, &dy, &db};
    mprt_cu_rows("channel_sum_bf16", M, (long)N * P, args);
}

/* ---- batch normalization (cuDNN, spatial: one statistic per channel) ----
 *
 * A batch norm with its ReLU or its residual Add (fuse or add set, or z
 * given to the gradient: graph/simplify.c) runs kernels.cu's channel
 * kernels instead, in the CPU's operation order: cuDNN fuses neither into
 * a batch norm of NCHW tensors. */

/* Inference: the running statistics, by the NVRTC kernel in the CPU's
 * operation order. */
MPRT_CU_KERNEL void mprt_cu_bn_infer(int N, int C, long P, const float *x, const float *scale,
                                     const float *bias, const float *running_mean,
                                     const float *running_var, float eps, int fuse,
                                     const float *add, float *y)
{
    void *args[] = {&N, &C, &P, &x, &scale, &bias, &running_mean, &running_var, &eps, &fuse,
                    &add, &y};
    mprt_cu_each("bn_infer", (long)N * C * P, args);
}

/* Training: the batch's statistics; the running ones move as ONNX says
 * (new = momentum * old + (1 - momentum) * batch, the variance unbiased),
 * which is cuDNN's average with factor 1 - momentum; NULL running
 * statistics (a recomputation) stay as they are. Inference
 * (mprt_training == 0): mprt_cu_bn_infer, as the CPU. */
MPRT_CU_KERNEL void mprt_cu_bn_train(int N, int C, long P, const float *x, const float *scale,
                                     const float *bias, float *running_mean, float *running_var,
                                     float momentum, float eps, int fuse, const float *add,
                                     float *y)
{
    if (!mprt_training) {
        mprt_cu_bn_infer(N, C, P, x, scale, bias, running_mean, running_var, eps, fuse, add, y);
        return;
    }
    if (fuse || add) {
        void *args[] = {&N, &C, &P, &x, &scale, &bias, &running_mean, &running_var,
                        &momentum, &eps, &fuse, &add, &y};
        mprt_cu_channels("bn_train_rows", C, args);
        return;
    }
    cudnnTensorDescriptor_t xd = mprt_cu_tensor(N, C, P, 1), sd = mprt_cu_tensor(1, C, 1, 1);
    float one = 1.0f, zero = 0.0f;
    MPRT_CUDNN(cudnnBatchNormalizationForwardTraining(
        mprt_cu->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, sd, scale, bias,
        1.0 - (double)momentum, running_mean, running_mean ? running_var : NULL, (double)eps,
        NULL, NULL));
}

MPRT_CU_KERNEL void mprt_cu_bn_grad(int N, int C, long P, const float *dy, const float *z,
                                    const float *x, const float *scale, float eps, float *dx,
                                    float *dscale, float *dbias)
{
    if (z) {
        void *args[] = {&N, &C, &P, &dy, &z, &x, &scale, &eps, &dx, &dscale, &dbias};
        mprt_cu_channels("bn_grad_rows", C, args);
        return;
    }
    cudnnTensorDescriptor_t xd = mprt_cu_tensor(N, C, P, 1), sd = mprt_cu_tensor(1, C, 1, 1);
    float one = 1.0f, zero = 0.0f;
    MPRT_CUDNN(cudnnBatchNormalizationBackward(mprt_cu->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                               &one, &zero, xd, x, xd, dy, xd, dx, sd, scale,
                                               dscale, dbias, (double)eps, NULL, NULL));
}

/* Batch normalization on bf16 activations, a GPU's only (a CPU device
 * computes on float32 copies, codegen.c): cuDNN with bf16 x and y (dx, dy)
 * descriptors and float32 statistics, weights and weight gradients, or in
 * evaluation the inference kernel's bf16 twin. */
MPRT_CU_KERNEL void mprt_cu_bn_train_bf16(int N, int C, long P, const uint16_t *x,
                                          const float *scale, const float *bias,
                                          float *running_mean, float *running_var,
                                          float momentum, float eps, int fuse,
                                          const uint16_t *add, uint16_t *y)
{
    if (!mprt_training) {
        void *args[] = {&N, &C, &P, &x, &scale, &bias, &running_mean, &running_var, &eps,
                        &fuse, &add, &y};
        mprt_cu_each("bn_infer_bf16", (long)N * C * P, args);
        return;
    }
    if (fuse || add) {
        void *args[] = {&N, &C, &P, &x, &scale, &bias, &running_mean, &running_var,
                        &momentum, &eps, &fuse, &add, &y};
        mprt_cu_channels("bn_train_rows_bf16", C, args);
        return;
    }
    cudnnTensorDescriptor_t xd = mprt_cu_tensor_nd(4, (long[]){N, C, P, 1}, CUDNN_DATA_BFLOAT16);
    cudnnTensorDescriptor_t sd = mprt_cu_tensor(1, C, 1, 1);
    float one = 1.0f, zero = 0.0f;
    MPRT_CUDNN(cudnnBatchNormalizationForwardTraining(
        mprt_cu->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, sd, scale, bias,
        1.0 - (double)momentum, running_mean, running_mean ? running_var : NULL, (double)eps,
        NULL, NULL));
}

MPRT_CU_KERNEL void mprt_cu_bn_grad_bf16(int N, int C, long P, const uint16_t *dy,
                                         const uint16_t *z, const uint16_t *x,
                                         const float *scale, float eps, uint16_t *dx,
                                         float *dscale, float *dbias)
{
    if (z) {
        void *args[] = {&N, &C, &P, &dy, &z, &x, &scale, &eps, &dx, &dscale, &dbias};
        mprt_cu_channels("bn_grad_rows_bf16", C, args);
        return;
    }
    cudnnTensorDescriptor_t xd = mprt_cu_tensor_nd(4, (long[]){N, C, P, 1}, CUDNN_DATA_BFLOAT16);
    cudnnTensorDescriptor_t sd = mprt_cu_tensor(1, C, 1, 1);
    float one = 1.0f, zero = 0.0f;
    MPRT_CUDNN(cudnnBatchNormalizationBackward(mprt_cu->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                               &one, &zero, xd, x, xd, dy, xd, dx, sd, scale,
                                               dscale, dbias, (double)eps, NULL, NULL));
}

/* ---- data movement ---- */

MPRT_CU_KERNEL void mprt_cu_strided(size_t size, int back, int rank, const long *shape,
                                    const long *stride, long base, long n_x, void *x, void *y)
{
    int half = size == 2;
    struct {
        int64_t shape[8], stride[8];
        int rank;
    } s;
    memset(&s, 0, sizeof s);
    if (rank > 8)
        mprt_cu_refuse("a strided copy over %d dimensions (at most 8)", rank);
    long n;
    s.rank = mprt_cu_merge_dims(rank, shape, 1, &stride, s.shape, &s.stride, &n);
    if (back && n_x > 0)
        MPRT_CUDA(cudaMemsetAsync(x, 0, (size_t)n_x * size, mprt_cu->compute));
    void *args[] = {&back, &s, &base, &n, &x, &y, &half};
    mprt_cu_each("strided", n, args);
}

MPRT_CU_KERNEL void mprt_cu_concat(size_t size, int back, long outer, long inner, int k,
                                   const long *len, void *const *part, void *y)
{
    long row = 0, col = 0;
    int half = size == 2;
    for (int j = 0; j < k; j++)
        row += len[j] * inner;
    for (int j = 0; j < k; j++) {
        long seg = len[j] * inner;
        void *pj = part[j];
        void *args[] = {&back, &outer, &seg, &row, &col, &pj, &y, &half};
        if (pj)
            mprt_cu_each("concat", outer * seg, args);
        col += seg;
    }
}

MPRT_CU_KERNEL void mprt_cu_gather(long outer, long dim, long inner, long nidx,
                                   const int64_t *idx, const float *x, float *y, const char *node)
{
    uint64_t tag = (uint64_t)(uintptr_t)node;
    void *args[] = {&outer, &dim, &inner, &nidx, &idx, &x, &y, &tag};
    mprt_cu_each("gather", outer * nidx * inner, args);
}

/* dx = 0, then each row an index names gets the sum of its gradients, in
 * the indices' order (kernels.cu: per first occurrence, blocks of elements). */
MPRT_CU_KERNEL void mprt_cu_gather_grad(long outer, long dim, long inner, long nidx,
                                        const int64_t *idx, const float *dy, float *dx,
                                        const char *node)
{
    (void)node;   /* a bad index was reported by the forward pass */
    if (outer * dim * inner > 0)
        MPRT_CUDA(cudaMemsetAsync(dx, 0, (size_t)(outer * dim * inner) * sizeof *dx,
                                  mprt_cu->compute));
    void *args[] = {&outer, &dim, &inner, &nidx, &idx, &dy, &dx};
    long chunks = (outer * inner + MPRT_CU_BLOCK - 1) / MPRT_CU_BLOCK;
    if (nidx > 0 && outer * inner > 0)
        mprt_cu_launch("gather_grad", mprt_cu_blocks(nidx * chunks * MPRT_CU_BLOCK, MPRT_CU_BLOCK),
                       MPRT_CU_BLOCK, 0, args);
}

/* GatherElements' and ScatterElements' shapes (kernels.cu's struct Elems). */
typedef struct MprtCuElems {
    int64_t xs[8], is[8];
    int rank, axis;
} MprtCuElems;

static MprtCuElems mprt_cu_elems(int rank, int axis, const long *xs, const long *is)
{
    MprtCuElems p;
    memset(&p, 0, sizeof p);
    if (rank > 8)
        mprt_cu_refuse("GatherElements or ScatterElements over %d dimensions (at most 8)", rank);
    p.rank = rank, p.axis = axis;
    for (int d = 0; d < rank; d++)
        p.xs[d] = xs[d], p.is[d] = is[d];
    return p;
}

/* GatherND's and ScatterND's shapes (kernels.cu's struct Nd). */
typedef struct MprtCuNd {
    int64_t dims[8];
    int64_t nbatch, nrows, slots, inner;
    int k;
} MprtCuNd;

static MprtCuNd mprt_cu_nd(long nbatch, long nrows, int k, const long *dims, long inner)
{
    MprtCuNd p;
    memset(&p, 0, sizeof p);
    if (k > 8)
        mprt_cu_refuse("GatherND or ScatterND with %d indices per row (at most 8)", k);
    p.nbatch = nbatch, p.nrows = nrows, p.inner = inner, p.k = k, p.slots = 1;
    for (int q = 0; q < k; q++)
        p.dims[q] = dims[q], p.slots *= dims[q];
    return p;
}

/* y = x (NULL: zeros) before a scatter; nothing when y is x. */
static void mprt_cu_scatter_fill(int type, long n, const void *x, void *y)
{
    void *args[] = {&type, &n, &x, &y};
    if (x != y)
        mprt_cu_each("scatter_fill", n, args);
}

MPRT_CU_KERNEL void mprt_cu_gather_elements(int type, int itype, int rank, int axis,
                                            const long *xs, const long *is, const void *idx,
                                            const void *x, void *y, const char *node)
{
    MprtCuElems p = mprt_cu_elems(rank, axis, xs, is);
    uint64_t tag = (uint64_t)(uintptr_t)node;
    long n = 1;
    for (int d = 0; d < rank; d++)
        n *= is[d];
    void *args[] = {&type, &itype, &p, &n, &idx, &x, &y, &tag};
    mprt_cu_each("gather_elements", n, args);
}

/* y = x (NULL: zeros), then one thread per line of the indices along the
 * axis combines its updates in order (kernels.cu). */
static void mprt_cu_scatter_lines(int red, int type, int itype, int rank, int axis,
                                  const long *xs, const long *is, const void *idx,
                                  const void *x, const void *u, void *y, const char *node)
{
    MprtCuElems p = mprt_cu_elems(rank, axis, xs, is);
    uint64_t tag = (uint64_t)(uintptr_t)node;
    long ny = 1, nlines = 1;
    for (int d = 0; d < rank; d++)
        ny *= xs[d], nlines *= d == axis ? 1 : is[d];
    mprt_cu_scatter_fill(type, ny, x, y);
    void *args[] = {&red, &type, &itype, &p, &nlines, &idx, &u, &y, &tag};
    if (is[axis] > 0)
        mprt_cu_each("scatter_elements", nlines, args);
}

MPRT_CU_KERNEL void mprt_cu_scatter_elements(int red, int type, int itype, int rank, int axis,
                                             const long *xs, const long *is, const void *idx,
                                             const void *x, const void *u, void *y,
                                             const char *node)
{
    mprt_cu_scatter_lines(red, type, itype, rank, axis, xs, is, idx, x, u, y, node);
}

MPRT_CU_KERNEL void mprt_cu_gather_elements_grad(int itype, int rank, int axis, const long *xs,
                                                 const long *is, const void *idx,
                                                 const float *dy, float *dx, const char *node)
{
    mprt_cu_scatter_lines(MPRT_SCATTER_ADD, MPRT_ELEM_F32, itype, rank, axis, xs, is, idx, NULL,
                          dy, dx, node);
}

MPRT_CU_KERNEL void mprt_cu_scatter_elements_grad(int itype, int rank, int axis, const long *xs,
                                                  const long *is, const void *idx,
                                                  const float *dy, float *dx, const char *node)
{
    mprt_cu_scatter_lines(MPRT_SCATTER_ZERO, MPRT_ELEM_F32, itype, rank, axis, xs, is, idx, dy,
                          dy, dx, node);
}

MPRT_CU_KERNEL void mprt_cu_gather_nd(int type, int itype, long nbatch, long nrows, int k,
                                      const long *dims, long inner, const void *idx,
                                      const void *x, void *y, const char *node)
{
    MprtCuNd p = mprt_cu_nd(nbatch, nrows, k, dims, inner);
    uint64_t tag = (uint64_t)(uintptr_t)node;
    void *args[] = {&type, &itype, &p, &idx, &x, &y, &tag};
    mprt_cu_each("gather_nd", nbatch * nrows * inner, args);
}

/* y = x (NULL: zeros), then one thread per column of each batch walks its
 * rows in order. */
static void mprt_cu_scatter_columns(int red, int type, int itype, long nbatch, long nrows,
                                    int k, const long *dims, long inner, const void *idx,
                                    const void *x, const void *u, void *y, const char *node)
{
    MprtCuNd p = mprt_cu_nd(nbatch, nrows, k, dims, inner);
    uint64_t tag = (uint64_t)(uintptr_t)node;
    mprt_cu_scatter_fill(type, nbatch * p.slots * inner, x, y);
    void *args[] = {&red, &type, &itype, &p, &idx, &u, &y, &tag};
    if (nrows > 0)
        mprt_cu_each("scatter_nd", nbatch * inner, args);
}

MPRT_CU_KERNEL void mprt_cu_scatter_nd(int red, int type, int itype, long nrows, int k,
                                       const long *dims, long inner, const void *idx,
                                       const void *x, const void *u, void *y, const char *node)
{
    mprt_cu_scatter_columns(red, type, itype, 1, nrows, k, dims, inner, idx, x, u, y, node);
}

MPRT_CU_KERNEL void mprt_cu_gather_nd_grad(int itype, long nbatch, long nrows, int k,
                                           const long *dims, long inner, const void *idx,
                                           const float *dy, float *dx, const char *node)
{
    mprt_cu_scatter_columns(MPRT_SCATTER_ADD, MPRT_ELEM_F32, itype, nbatch, nrows, k, dims,
                            inner, idx, NULL, dy, dx, node);
}

MPRT_CU_KERNEL void mprt_cu_scatter_nd_grad(int itype, long nrows, int k, const long *dims,
                                            long inner, const void *idx, const float *dy,
                                            float *dx, const char *node)
{
    mprt_cu_scatter_columns(MPRT_SCATTER_ZERO, MPRT_ELEM_F32, itype, 1, nrows, k, dims, inner,
                            idx, dy, dy, dx, node);
}

MPRT_CU_KERNEL void mprt_cu_cast(long n, int from, int to, const void *x, void *y)
{
    void *args[] = {&n, &from, &to, &x, &y};
    mprt_cu_each("cast", n, args);
}

/* Comparisons and logic with broadcasting: bool results. */
MPRT_CU_KERNEL void mprt_cu_compare(int op, int type, int rank, const long *shape, const void *a,
                                    const long *sa, const void *b, const long *sb, uint8_t *y)
{
    long n;
    MprtCuBcast bc = mprt_cu_bcast(rank, shape, sa, sb, NULL, &n);
    void *args[] = {&op, &type, &n, &bc, &a, &b, &y};
    mprt_cu_each("compare", n, args);
}

MPRT_CU_KERNEL void mprt_cu_not(long n, const uint8_t *x, uint8_t *y)
{
    void *args[] = {&n, &x, &y};
    mprt_cu_each("not", n, args);
}

/* Mod with broadcasting, in the operands' element type (MPRT_ELEM_*). */
MPRT_CU_KERNEL void mprt_cu_mod(int c_fmod, int type, int rank, const long *shape, const void *a,
                                const long *sa, const void *b, const long *sb, void *y)
{
    long n;
    MprtCuBcast bc = mprt_cu_bcast(rank, shape, sa, sb, NULL, &n);
    void *args[] = {&c_fmod, &type, &n, &bc, &a, &b, &y};
    mprt_cu_each("mod", n, args);
}

/* ArgMax and ArgMin: a thread per output walks its line of the axis. */
MPRT_CU_KERNEL void mprt_cu_argmax(int is_min, int last, int type, long outer, long n,
                                   long inner, const void *x, int64_t *y)
{
    void *args[] = {&is_min, &last, &type, &outer, &n, &inner, &x, &y};
    mprt_cu_each("argmax", outer * inner, args);
}

/* CumSum: a thread per line of the axis, summing in double as the CPU. */
MPRT_CU_KERNEL void mprt_cu_cumsum(int exclusive, int reverse, long outer, long n, long inner,
                                   const float *x, float *y)
{
    void *args[] = {&exclusive, &reverse, &outer, &n, &inner, &x, &y};
    mprt_cu_each("cumsum", outer * inner, args);
}

/* TopK: a thread per line of the axis selects as the CPU does. */
MPRT_CU_KERNEL void mprt_cu_topk(int largest, int type, long outer, long n, long k, long inner,
                                 const void *x, void *values, int64_t *idx)
{
    void *args[] = {&largest, &type, &outer, &n, &k, &inner, &x, &values, &idx};
    mprt_cu_each("topk", outer * inner, args);
}

/* TopK's gradient: a thread per line zeroes it and puts dy back. */
MPRT_CU_KERNEL void mprt_cu_topk_grad(long outer, long n, long k, long inner, const float *dy,
                                      const int64_t *idx, float *dx)
{
    void *args[] = {&outer, &n, &k, &inner, &dy, &idx, &dx};
    mprt_cu_each("topk_grad", outer * inner, args);
}

/* OneHot: a thread per output element. */
MPRT_CU_KERNEL void mprt_cu_onehot(int type, long outer, long depth, long inner, int es,
                                   const void *idx, const void *values, void *y)
{
    void *args[] = {&type, &outer, &depth, &inner, &es, &idx, &values, &y};
    mprt_cu_each("onehot", outer * depth * inner, args);
}

/* OneHot's gradient: one thread sums dy in the CPU's order (values are
 * rarely trained; the sums are two numbers). */
MPRT_CU_KERNEL void mprt_cu_onehot_grad(int type, long outer, long depth, long inner,
                                        const void *idx, const float *dy, float *dvalues)
{
    void *args[] = {&type, &outer, &depth, &inner, &idx, &dy, &dvalues};
    mprt_cu_each("onehot_grad", 1, args);
}

/* Trilu: a thread per element. */
MPRT_CU_KERNEL void mprt_cu_trilu(int upper, long k, long count, long rows, long cols, int es,
                                  const void *x, void *y)
{
    void *args[] = {&upper, &k, &count, &rows, &cols, &es, &x, &y};
    mprt_cu_each("trilu", count * rows * cols, args);
}

/* Pad (back == 0: y from x) and its gradient (back: dx from dy, gathered
 * per input in the CPU's order; every input is written). */
MPRT_CU_KERNEL void mprt_cu_pad(int back, int mode, int rank, const long *xs, const long *ys,
                                const long *begin, float value, float *x, float *y)
{
    struct {
        int64_t xs[8], ys[8], begin[8];
        int rank, mode;
    } p;
    memset(&p, 0, sizeof p);
    if (rank > 8)
        mprt_cu_refuse("Pad over %d dimensions (at most 8)", rank);
    long nx = 1, ny = 1;
    p.rank = rank, p.mode = mode;
    for (int d = 0; d < rank; d++) {
        p.xs[d] = xs[d], p.ys[d] = ys[d], p.begin[d] = begin[d];
        nx *= xs[d], ny *= ys[d];
    }
    if (back) {
        void *args[] = {&p, &nx, &x, &y};
        mprt_cu_each("pad_grad", nx, args);
    } else {
        void *args[] = {&p, &value, &ny, &x, &y};
        mprt_cu_each("pad", ny, args);
    }
}

/* Forward (back == 0): y from x. Gradient: x (dx) from y (dy), one thread
 * per input row, which it zeroes first. */
MPRT_CU_KERNEL void mprt_cu_resize(int back, const MprtResize *p, float *x, float *y)
{
    if (back) {
        void *args[] = {(void *)p, &x, &y};
        mprt_cu_each("resize_grad", p->NC * p->H, args);
    } else {
        void *args[] = {(void *)p, &x, &y};
        mprt_cu_each("resize", p->NC * p->OH * p->OW, args);
    }
}

/* ---- --clip-norm ---- */

/* *out = the squared norm of g * scale in the CPU's order (kernel.h): the
 * lanes' group sums into the device's norm_part, then their total, written
 * by the GPU into the pinned table (mprt_norm_sq). */
MPRT_CU_KERNEL void mprt_cu_sq_norm(long n, const float *g, float scale, double *out)
{
    double *part = mprt_cu->norm_part;
    void *args[] = {&n, &g, &scale, &part};
    mprt_cu_launch("sq_lanes", MPRT_SQ_GROUPS, MPRT_SQ_GROUP, 0, args);
    void *total[] = {&part, &out};
    mprt_cu_launch("sq_total", 1, MPRT_SQ_GROUPS, 0, total);
}

/* --clip-norm inside the step: this GPU's compute stream waits for every
 * GPU's squared norms (their events, which a captured step keeps), then a
 * kernel computes the clipping factor from the table into the GPU's clip,
 * which its updates' kernels multiply their scale by from now on. The
 * host does not wait, so the step stays one graph. */
MPRT_KERNEL void mprt_cu_clip_factor(int k, const double *sq, float max_norm)
{
    mprt_cu_norm_join();
    mprt_cu->clip_on = 1;
    float *clip = mprt_cu->clip;
    void *args[] = {&k, &sq, &max_norm, &clip};
    mprt_cu_launch("clip_factor", 1, 1, 0, args);
}

/* ---- optimizers ---- */

MPRT_CU_KERNEL void mprt_cu_sgd(long n, float *w, const float *g, float *buf, float scale,
                                float lr, float momentum, float wd, int nesterov, int first)
{
    const float *clip = mprt_cu->clip_on ? mprt_cu->clip : NULL;
    void *args[] = {&n, &w, &g, &buf, &scale, &clip, &lr, &momentum, &wd, &nesterov, &first};
    mprt_cu_each("sgd", n, args);
}

/* The bias corrections are computed here as the CPU computes them (powf,
 * sqrtf on the host), so the kernel's arithmetic is the CPU loop's. */
/* AdamW's numbers of step `step`, from k = {lr, beta1, beta2, weight decay}:
 * h = {decay, step size, sqrt of the second bias correction}, as the CPU's
 * mprt_adamw computes them. */
static void mprt_cu_adamw_numbers(const float *k, long step, float *h)
{
    float lr = k[0], b1 = k[1], b2 = k[2], wd = k[3];
    float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
    h[0] = 1.0f - lr * wd;
    h[1] = lr / bc1;
    h[2] = sqrtf(bc2);
}

MPRT_CU_KERNEL void mprt_cu_adamw(long n, float *w, const float *g, float *m, float *v,
                                  float scale, float lr, float b1, float b2, float eps, float wd,
                                  long step)
{
    const float *h = mprt_cu_slot(mprt_cu_adamw_numbers, (const float[]){lr, b1, b2, wd}, step);
    const float *clip = mprt_cu->clip_on ? mprt_cu->clip : NULL;
    void *args[] = {&n, &w, &g, &m, &v, &scale, &clip, &b1, &b2, &eps, &h};
    mprt_cu_each("adamw", n, args);
}
