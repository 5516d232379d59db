/* bench_gemm.c — the CPU kernels' two single-precision GEMMs, OpenBLAS's
 * cblas_sgemm (--cpu-kernels=builtin) against oneDNN's dnnl_sgemm (the
 * default), row-major, on the shapes of the GPT of bench_train.sh (d 256,
 * T 128, batch 8: 1024 rows; its products forward and backward) and one
 * attention product: the best of 5 calls each, alternating, in GFLOP/s.
 * The thread count is OPENBLAS_NUM_THREADS's for OpenBLAS and
 * OMP_NUM_THREADS's for oneDNN: set both.
 *   cc -O2 tests/bench/bench_gemm.c -o bench_gemm -ldnnl -lopenblas
 *   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./bench_gemm */
#include <cblas.h>
#include <dnnl.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *random_matrix(long n)
{
    float *m = malloc((size_t)n * sizeof *m);
    if (!m) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < n; i++)
        m[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return m;
}

int main(void)
{
    /* M, N, K, A transposed, B transposed */
    static const int shapes[][5] = {
        {1024, 768, 256, 0, 0},   /* qkv projection */
        {1024, 256, 256, 0, 0},   /* attention output projection */
        {1024, 1024, 256, 0, 0},  /* fc1 */
        {1024, 256, 1024, 0, 0},  /* fc2 */
        {1024, 512, 256, 0, 0},   /* the head (vocabulary 512) */
        {256, 768, 1024, 1, 0},   /* a weight gradient: x^T dy */
        {1024, 256, 768, 0, 1},   /* a data gradient: dy W^T */
        {128, 128, 64, 0, 1},     /* attention scores of one head: q k^T */
    };
    printf("%-28s %12s %12s %8s\n", "M x N x K", "OpenBLAS", "oneDNN", "ratio");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = shapes[s][3],
            tb = shapes[s][4];
        float *A = random_matrix((long)M * K), *B = random_matrix((long)K * N),
              *C = random_matrix((long)M * N);
        int lda = ta ? M : K, ldb = tb ? K : N;
        double blas = 1e30, dnnl = 1e30;
        for (int r = 0; r < 5; r++) {
            double t = now();
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
            t = now() - t;
            blas = t < blas ? t : blas;
            t = now();
            if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C,
                           N) != dnnl_success) {
                fprintf(stderr, "bench_gemm: dnnl_sgemm failed\n");
                return 1;
            }
            t = now() - t;
            dnnl = t < dnnl ? t : dnnl;
        }
        double flop = 2.0 * M * N * K;
        char name[64];
        snprintf(name, sizeof name, "%d x %d x %d%s%s", M, N, K, ta ? " (A^T)" : "",
                 tb ? " (B^T)" : "");
        printf("%-28s %7.1f GF/s %7.1f GF/s %8.2f\n", name, flop / blas / 1e9, flop / dnnl / 1e9,
               blas / dnnl);
        free(A), free(B), free(C);
    }
    return 0;
}
