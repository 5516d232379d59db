/* bench_softmax.c — the CPU's attention softmax under a causal mask:
 * runtime/cpu_math.c's mprt_softmax_bias (the scores plus the mask, then
 * the softmax of each row) and mprt_softmax_grad on its output, on the
 * shape of tests/bench/bench_train.sh's GPT (batch 8, 4 heads, T 128:
 * 4096 rows of 128), or T given. Prints each kernel's minimum and median
 * over R rounds, on one thread. Built against two checkouts' runtime/
 * (-I), it compares a change with what was there before:
 *   cc -O2 -fno-trapping-math -ffp-contract=off -I runtime tests/bench/bench_softmax.c \
 *       -o bench_softmax -ldnnl -lgomp -lopenblas -lm -pthread
 *   OPENBLAS_NUM_THREADS=1 ./bench_softmax [ROUNDS [T]] */
#define _POSIX_C_SOURCE 200809L
#include "program.h"
#include "kernel.h"
#include "state.c"
#include "pool.c"
#include "cpu.c"
#include "cpu_move.c"
#include "cpu_math.c"
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *t, int rounds)
{
    qsort(t, (size_t)rounds, sizeof *t, by_value);
    printf("  %-13s min %.3f ms  median %.3f ms\n", what, t[0] * 1e3, t[rounds / 2] * 1e3);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    long T = argc > 2 ? atol(argv[2]) : 128, rows = 8 * 4 * T, n = rows * T;
    if (rounds < 1 || T < 1)
        return fprintf(stderr, "usage: bench_softmax [ROUNDS [T]]\n"), 2;
    float *x = malloc((size_t)n * 4), *b = malloc((size_t)(T * T) * 4);
    float *y = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *dx = malloc((size_t)n * 4);
    double *tf = malloc((size_t)rounds * sizeof *tf), *tg = malloc((size_t)rounds * sizeof *tg);
    if (!x || !b || !y || !dy || !dx || !tf || !tg)
        return fprintf(stderr, "bench_softmax: out of memory\n"), 1;
    for (long i = 0; i < n; i++) {
        x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
        dy[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    for (long i = 0; i < T * T; i++)
        b[i] = i % T > i / T ? -INFINITY : 0.0f;   /* causal: -inf above the diagonal */
    mprt_training = 1;
    for (int k = 0; k < rounds; k++) {
        double t0 = now();
        mprt_softmax_bias(rows, T, T, 0, x, b, y);
        double t1 = now();
        mprt_softmax_grad(rows, T, 1, dy, y, dx);
        tf[k] = t1 - t0, tg[k] = now() - t1;
    }
    printf("causal softmax, %ld rows of %ld, %d rounds, one thread:\n", rows, T, rounds);
    report("softmax_bias", tf, rounds);
    report("softmax_grad", tg, rounds);
    free(x), free(b), free(y), free(dy), free(dx), free(tf), free(tg);
    return 0;
}
