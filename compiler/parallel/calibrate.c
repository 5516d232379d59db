/* calibrate.c — the CPU profile: this machine's rates for each kind of work
 * the CPU trainer does, measured once and kept.
 *
 * Each rate comes from a small kernel shaped like the trainer's own, timed
 * as the best of several runs, alone (one CPU device) and on two threads at
 * once (CPU devices running side by side share caches and the memory bus):
 *
 *   matrix_flops   the GEMM a trainer calls by default, on one thread:
 *   gemm_bw        oneDNN's dnnl_sgemm where mpcc was built with oneDNN,
 *                  else OpenBLAS's cblas_sgemm (each opened with dlopen:
 *                  mpcc links neither), timed on a convolution's product
 *                  (256 x 512 x 2304) and a skinny one (512 x 4 x 4608),
 *                  fitted as 2mnk / matrix_flops + operand bytes / gemm_bw;
 *                  without either, a multiply-add loop's rate
 *   call_overhead  a GEMM call too small to cost anything else
 *   blas_*         the same three of OpenBLAS's cblas_sgemm, the GEMM of
 *                  --cpu-kernels=builtin (the oneDNN ones where it is absent)
 *   patch_bw,      im2col as runtime/cpu.c does it, one row of a patch
 *   patch_row      matrix per memcpy: fitted on rows of 64 and of 8 floats
 *   flops          a multiply-add loop, vectorised four wide
 *   bw_at[]        elementwise work, z = x * s + y, over working sets of
 *                  64 KB to 64 MB: how the rate falls as the caches run out
 *   bandwidth      that rate at 32 MB, the reference size
 *   copy_bw        memcpy over 32 MB (copies between devices)
 *   transpose_bw   the transpose of a 1024 x 256 matrix (a layer's weight),
 *                  counted as its bytes read and written
 *   window_rate    max pooling as runtime/cpu.c does it (the best so far and
 *                  its index per output, row by row), 2 x 2 windows over 16
 *                  channels of 64 x 64: window elements per second
 *   norm_bw,       batch normalisation's passes, over 4 MB in and 4 MB
 *   norm_row       out: per channel the sums of x and x^2, then normalise,
 *                  channel by channel; counted as its input and output,
 *                  fitted on rows of 1024 floats and of 4 (a row's cost
 *                  apart). runtime/cpu.c walks the data in memory order
 *                  instead, which is faster on data in the cache, but the
 *                  trainer's activations mostly are not by the time they
 *                  are normalised or differentiated: on ResNet-50 this
 *                  probe predicts its normalisation within 8%, one in
 *                  memory order 1.2 to 1.3 times short (tests/bench/README.md)
 *   peer_latency   a hand-off between two threads (a copy's worker waking)
 *
 * The measurement takes about half a second, so it is kept in the cache
 * (~/.cache/mpcc/, as a profile file that --profile reads too), under a name
 * made of this CPU, its core count and mpcc's version. MPCC_CPU_PROFILE=
 * FLOPS,BYTES pins every rate to those two instead (the tests'
 * predictions do not depend on the machine then).
 */
#define _GNU_SOURCE
#include "mpcc.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static volatile float sink;

/* ---- probes: a kernel on buffers of its own, timed ---- */

typedef struct Probe Probe;
struct Probe {
    void (*run)(Probe *);      /* one repetition */
    int m, n, k;               /* its shape */
    size_t floats;             /* each of its three buffers */
    float *a, *b, *c;
    double seconds;            /* a repetition, the best of REPEATS timed runs */
};

enum { REPEATS = 7 };
#define MIN_SECONDS 4e-3       /* a timed run repeats the kernel at least this long */

static bool probe_alloc(Probe *p)
{
    p->a = malloc(p->floats * sizeof(float));
    p->b = malloc(p->floats * sizeof(float));
    p->c = malloc(p->floats * sizeof(float));
    if (!p->a || !p->b || !p->c)
        return false;
    for (size_t i = 0; i < p->floats; i++)
        p->a[i] = (float)(i % 13) * 0.1f, p->b[i] = (float)(i % 7) * 0.2f, p->c[i] = 0;
    return true;
}

static void probe_free(Probe *p)
{
    free(p->a), free(p->b), free(p->c);
    p->a = p->b = p->c = NULL;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The best run: what the kernel does when nothing else gets in its way,
 * which is what repeats from one calibration to the next (the median moves
 * with whatever else the machine does). */
static void *probe_time(void *arg)
{
    Probe *p = arg;
    double t[REPEATS];
    p->run(p);   /* warm */
    for (int r = 0; r < REPEATS; r++) {
        double t0 = now();
        int reps = 0;
        do
            p->run(p), reps++;
        while (now() - t0 < MIN_SECONDS);
        t[r] = (now() - t0) / reps;
    }
    qsort(t, REPEATS, sizeof *t, cmp_double);
    p->seconds = t[0];
    return NULL;
}

/* Seconds per repetition: alone, or (shared) the mean of two copies run
 * on two threads at once. 0 when it cannot run. */
static double measure(Probe proto, bool shared)
{
    Probe p[2] = {proto, proto};
    double t = 0;
    if (!probe_alloc(&p[0]) || (shared && !probe_alloc(&p[1])))
        goto done;
    pthread_t th;
    if (shared && pthread_create(&th, NULL, probe_time, &p[1]) != 0)
        goto done;
    probe_time(&p[0]);
    if (shared)
        pthread_join(th, NULL);
    t = shared ? (p[0].seconds + p[1].seconds) / 2 : p[0].seconds;
done:
    probe_free(&p[0]), probe_free(&p[1]);
    return t;
}

/* ---- the kernels ---- */

typedef void (*SgemmFn)(int, int, int, int, int, int, float, const float *, int, const float *,
                        int, float, float *, int);
typedef int (*DnnlSgemmFn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                           const float *, int64_t, float, float *, int64_t);
typedef void (*ThreadsFn)(int);

/* The GEMM being timed: OpenBLAS's, or oneDNN's with its OpenMP thread
 * count setter (per calling thread, so set on each probe's own). */
static SgemmFn sgemm;
static DnnlSgemmFn dnnl_sgemm_fn;
static ThreadsFn omp_threads;

/* The first of `names` that dlopen finds and that has `symbol`: its handle,
 * the symbol at *fn. */
static void *open_library(const char *const *names, size_t n, const char *symbol, void **fn)
{
    for (size_t i = 0; i < n; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        if ((*fn = dlsym(h, symbol)))
            return h;
        dlclose(h);
    }
    return NULL;
}

/* The system's cblas_sgemm, one thread; NULL without OpenBLAS. */
static SgemmFn open_blas(void)
{
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
    void *fn, *h = open_library(names, sizeof names / sizeof names[0], "cblas_sgemm", &fn);
    if (!h)
        return NULL;
    ThreadsFn threads = (ThreadsFn)(uintptr_t)dlsym(h, "openblas_set_num_threads");
    if (threads)
        threads(1);
    return (SgemmFn)(uintptr_t)fn;
}

/* oneDNN's dnnl_sgemm, and the OpenMP it runs on (a dependency of libdnnl,
 * which dlsym searches); NULL where mpcc was built without oneDNN, or the
 * library is gone. */
static DnnlSgemmFn open_onednn(void)
{
#ifdef MPCC_HAVE_DNNL
    static const char *const names[] = {"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"};
    void *fn, *h = open_library(names, sizeof names / sizeof names[0], "dnnl_sgemm", &fn);
    if (!h || !(omp_threads = (ThreadsFn)(uintptr_t)dlsym(h, "omp_set_num_threads")))
        return NULL;
    return (DnnlSgemmFn)(uintptr_t)fn;
#else
    return NULL;
#endif
}

enum { ROW_MAJOR = 101, NO_TRANS = 111 };

static void run_gemm(Probe *p)
{
    if (dnnl_sgemm_fn) {
        omp_threads(1);   /* this thread's OpenMP team: itself */
        dnnl_sgemm_fn('N', 'N', p->m, p->n, p->k, 1.0f, p->a, p->k, p->b, p->n, 0.0f, p->c, p->n);
        return;
    }
    sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, p->m, p->n, p->k, 1.0f, p->a, p->k, p->b, p->n, 0.0f,
          p->c, p->n);
}

static void run_loop(Probe *p)   /* a 64 x 64 multiply-add, for machines without BLAS */
{
    enum { N = 64 };
    for (int i = 0; i < N; i++)
        for (int k = 0; k < N; k++) {
            float s = p->a[i * N + k];
            for (int j = 0; j < N; j++)
                p->c[i * N + j] += s * p->b[k * N + j];
        }
}

static void run_triad(Probe *p)
{
    for (size_t i = 0; i < p->floats; i++)
        p->c[i] = p->a[i] * 1.0001f + p->b[i];
}

static void run_copy(Probe *p)
{
    memcpy(p->c, p->a, p->floats * sizeof(float));
    p->a[p->k++ % p->floats] += 1;
}

/* im2col of an m-channel 32 x n image, 3 x 3 kernel, padding 1: 9m rows of
 * 32 x n floats, one memcpy per output row of n floats. */
static void run_im2col(Probe *p)
{
    enum { H = 32 };
    int C = p->m, W = p->n;
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < 3; kh++)
            for (int kw = 0; kw < 3; kw++) {
                float *row = p->c + ((size_t)(c * 3 + kh) * 3 + kw) * H * W;
                for (int oh = 0; oh < H; oh++) {
                    int ih = oh - 1 + kh;
                    float *r = row + (size_t)oh * W;
                    if (ih < 0 || ih >= H) {
                        memset(r, 0, (size_t)W * sizeof *r);
                        continue;
                    }
                    r[0] = 0, r[W - 1] = 0;
                    memcpy(r + (kw == 0), p->a + ((size_t)c * H + ih) * W + kw - 1 + (kw == 0),
                           (size_t)(W - 1) * sizeof *r);
                }
            }
}

/* y = x^T for an m x n matrix, rows of x read in order. */
static void run_transpose(Probe *p)
{
    for (int i = 0; i < p->m; i++)
        for (int j = 0; j < p->n; j++)
            p->c[(size_t)j * p->m + i] = p->a[(size_t)i * p->n + j];
}

/* Max pooling, 2 x 2, stride 2, over m channels of n x n: each output row
 * keeps the best value and its index, as mprt_maxpool_row does. */
static void run_window(Probe *p)
{
    int n = p->n, on = n / 2;
    long *best = (long *)(void *)p->b;
    for (int c = 0; c < p->m; c++)
        for (int oh = 0; oh < on; oh++) {
            const float *xs = p->a + (size_t)c * n * n;
            float *y = p->c + ((size_t)c * on + oh) * on;
            for (int ow = 0; ow < on; ow++)
                y[ow] = -1e30f, best[ow] = -1;
            for (int kh = 0; kh < 2; kh++)
                for (int kw = 0; kw < 2; kw++)
                    for (int ow = 0; ow < on; ow++) {
                        long k = (long)(2 * oh + kh) * n + 2 * ow + kw;
                        float v = xs[k], bv = y[ow];
                        long m = -(long)((v > bv) | (v != v) | (best[ow] < 0));
                        y[ow] = m ? v : bv;
                        best[ow] ^= (best[ow] ^ k) & m;
                    }
        }
}

/* Batch normalisation's passes over an image batch laid out (16, m, k),
 * channel by channel: the sums of x and x^2 over its rows (two lanes of
 * doubles), then y = (x - mean) * a + b (see norm_bw above). */
static void run_norm(Probe *p)
{
    enum { N = 16 };
    long P = p->k;
    for (int c = 0; c < p->m; c++) {
        double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
        for (int r = 0; r < N; r++) {
            const float *x = p->a + ((size_t)r * p->m + c) * P;
            for (long i = 0; i + 1 < P; i += 2) {
                double u = x[i], v = x[i + 1];
                a0 += u, a1 += v, b0 += u * u, b1 += v * v;
            }
        }
        double cnt = (double)N * P, mean = (a0 + a1) / cnt, var = (b0 + b1) / cnt - mean * mean;
        float a = (float)(1 / (var > 0 ? var + 1e-5 : 1e-5)), m = (float)mean, b = 0.5f;
        for (int r = 0; r < N; r++) {
            const float *x = p->a + ((size_t)r * p->m + c) * P;
            float *y = p->c + ((size_t)r * p->m + c) * P;
            for (long i = 0; i < P; i++)
                y[i] = (x[i] - m) * a + b;
        }
    }
}

/* ---- the rates ---- */

static double gemm_seconds(int m, int n, int k, bool shared)
{
    size_t floats = (size_t)m * k > (size_t)k * n ? (size_t)m * k : (size_t)k * n;
    floats = floats > (size_t)m * n ? floats : (size_t)m * n;
    return measure((Probe){.run = run_gemm, .m = m, .n = n, .k = k, .floats = floats}, shared);
}

/* Fits t = flops / F + bytes / B to a wide and a skinny product, of the
 * GEMM run_gemm calls: F, B and a tiny call's time. */
static void gemm_fit(bool shared, double *flops, double *bw, double *call)
{
    double f1 = 2.0 * 256 * 512 * 2304, b1 = 4.0 * (256 * 2304 + 2304 * 512 + 256 * 512);
    double f2 = 2.0 * 512 * 4 * 4608, b2 = 4.0 * (512 * 4608 + 4608 * 4 + 512 * 4);
    double t1 = gemm_seconds(256, 512, 2304, shared), t2 = gemm_seconds(512, 4, 4608, shared);
    double y = (t2 - f2 / f1 * t1) / (b2 - f2 / f1 * b1);   /* 1 / B */
    double x = (t1 - b1 * y) / f1;                             /* 1 / F */
    if (!(x > 0) || !(y > 0))   /* noise: the square product's rate, no bytes term */
        x = t1 / f1, y = 1e-12;
    *flops = 1 / x;
    *bw = 1 / y;
    *call = gemm_seconds(1, 4, 4, shared);
}

/* The default GEMM's rates (oneDNN's where there is one), OpenBLAS's as
 * blas_*, and the vectorised loop's. */
static void blas_rates(Profile *p, bool shared)
{
    double loop = measure((Probe){.run = run_loop, .floats = 64 * 64}, shared);
    double loop_flops = loop > 0 ? 4 * 2.0 * 64 * 64 * 64 / loop : 1e9;
    p->flops = p->matrix_flops = loop_flops;
    p->gemm_bw = p->bandwidth;
    DnnlSgemmFn onednn = dnnl_sgemm_fn;
    if (sgemm) {
        dnnl_sgemm_fn = NULL;
        gemm_fit(shared, &p->blas_flops, &p->blas_bw, &p->blas_call);
        p->matrix_flops = p->blas_flops, p->gemm_bw = p->blas_bw, p->call_overhead = p->blas_call;
    }
    if ((dnnl_sgemm_fn = onednn)) {
        gemm_fit(shared, &p->matrix_flops, &p->gemm_bw, &p->call_overhead);
    }
    if (!sgemm)   /* builtin's GEMM unmeasured: priced as the default's */
        p->blas_flops = p->matrix_flops, p->blas_bw = p->gemm_bw, p->blas_call = p->call_overhead;
}

/* t = rows * patch_row + bytes / patch_bw, from rows of 64 and 8 floats
 * (the same bytes: 16 channels of 64 columns, 128 of 8). */
static void patch_rates(Profile *p, bool shared)
{
    double bytes = 4.0 * 9 * 16 * 32 * 64, wide = 9.0 * 16 * 32, narrow = 9.0 * 128 * 32;
    size_t floats = 9 * 16 * 32 * 64;
    double t_wide = measure((Probe){.run = run_im2col, .m = 16, .n = 64, .floats = floats}, shared);
    double t_narrow = measure((Probe){.run = run_im2col, .m = 128, .n = 8, .floats = floats},
                              shared);
    double per_row = (t_narrow - t_wide) / (narrow - wide);
    p->patch_row = per_row > 0 ? per_row : 0;
    double left = t_wide - wide * p->patch_row;
    p->patch_bw = left > 0 ? bytes / left : p->copy_bw;
}

/* t = rows * norm_row + bytes / norm_bw, from 16 x 64 rows of 1024 floats
 * and 16 x 16384 rows of 4 (the same 4 MB in and 4 MB out: a layer's
 * activations). */
static void norm_rates(Profile *p, bool shared)
{
    size_t half = (size_t)(BW_REFERENCE / 32);
    double bytes = 8.0 * half, few = 16.0 * 64, many = 16.0 * 16384;
    double t_few = measure((Probe){.run = run_norm, .m = 64, .k = (int)(half / few),
                                   .floats = half}, shared);
    double t_many = measure((Probe){.run = run_norm, .m = 16384, .k = (int)(half / many),
                                    .floats = half}, shared);
    double per_row = (t_many - t_few) / (many - few);
    p->norm_row = per_row > 0 ? per_row : 0;
    double left = t_few - few * p->norm_row;
    p->norm_bw = left > 0 ? bytes / left : p->bandwidth;
}

static void memory_rates(Profile *p, bool shared)
{
    for (int i = 0; i < BW_POINTS; i++) {
        size_t floats = (size_t)(bw_point_bytes(i) / 12) + 1;
        double t = measure((Probe){.run = run_triad, .floats = floats}, shared);
        p->bw_at[i] = t > 0 ? 12.0 * floats / t : (i ? p->bw_at[i - 1] : 1e9);
    }
    p->bandwidth = bandwidth_at(p, BW_REFERENCE);
    size_t half = (size_t)(BW_REFERENCE / 8);   /* floats: 32 MB read and written */
    double t = measure((Probe){.run = run_copy, .floats = half}, shared);
    p->copy_bw = t > 0 ? 8.0 * half / t : p->bandwidth;
    norm_rates(p, shared);
    t = measure((Probe){.run = run_transpose, .m = 1024, .n = 256, .floats = 1024 * 256}, shared);
    p->transpose_bw = t > 0 ? 8.0 * 1024 * 256 / t : p->bandwidth;
    t = measure((Probe){.run = run_window, .m = 16, .n = 64, .floats = 16 * 64 * 64}, shared);
    p->window_rate = t > 0 ? 16.0 * 64 * 64 / t : 1e9;   /* each input element in one window */
}

/* ---- hand-offs between threads ---- */

typedef struct PingPong {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn, rounds;
} PingPong;

static void *pong(void *arg)
{
    PingPong *pp = arg;
    pthread_mutex_lock(&pp->mu);
    for (int r = 0; r < pp->rounds; r++) {
        while (pp->turn != 1)
            pthread_cond_wait(&pp->cv, &pp->mu);
        pp->turn = 0;
        pthread_cond_broadcast(&pp->cv);
    }
    pthread_mutex_unlock(&pp->mu);
    return NULL;
}

/* Half a round trip of a signal to a sleeping thread and back. */
static double handoff_seconds(void)
{
    PingPong pp = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 2000};
    pthread_t th;
    if (pthread_create(&th, NULL, pong, &pp) != 0)
        return 5e-6;
    double t0 = now();
    pthread_mutex_lock(&pp.mu);
    for (int r = 0; r < pp.rounds; r++) {
        pp.turn = 1;
        pthread_cond_broadcast(&pp.cv);
        while (pp.turn != 0)
            pthread_cond_wait(&pp.cv, &pp.mu);
    }
    pthread_mutex_unlock(&pp.mu);
    double t = (now() - t0) / (2.0 * pp.rounds);
    pthread_join(th, NULL);
    return t;
}

/* ---- the profile ---- */

static Profile pinned(double f, double b)
{
    Profile p = {"cpu", f, b, 2e-6, (int64_t)16 << 30, b / 2, 5e-6, b / 2, 5e-6};
    p.matrix_flops = p.tf32_flops = p.bf16_flops = f;
    p.copy_bw = p.norm_bw = p.shared_bw = p.gemm_bw = p.patch_bw = p.transpose_bw = b;
    p.window_rate = f / 4;
    for (int i = 0; i < BW_POINTS; i++)
        p.bw_at[i] = b;
    p.per_call = true;
    return p;
}

static Profile measured(bool shared, double handoff)
{
    Profile p = pinned(1e9, 1e9);
    memory_rates(&p, shared);
    blas_rates(&p, shared);
    patch_rates(&p, shared);
    p.tf32_flops = p.bf16_flops = p.matrix_flops;
    p.peer_bw = p.host_bw = p.copy_bw;
    p.peer_latency = p.host_latency = handoff;
    return p;
}

/* ---- the cache ---- */

static const char *const keys[] = {
    "flops", "matrix_flops", "bandwidth", "copy_bandwidth", "norm_bandwidth",
    "gemm_bandwidth", "patch_bandwidth", "patch_row", "call_overhead", "peer_latency",
    "transpose_bandwidth", "window_rate", "norm_row", "blas_matrix_flops",
    "blas_gemm_bandwidth", "blas_call_overhead", "bw64k", "bw512k", "bw4m", "bw16m", "bw64m",
};
enum { NKEYS = sizeof keys / sizeof keys[0] };

static double *fields(Profile *p, int k)
{
    double *f[NKEYS] = {&p->flops, &p->matrix_flops, &p->bandwidth, &p->copy_bw, &p->norm_bw,
                        &p->gemm_bw, &p->patch_bw, &p->patch_row, &p->call_overhead,
                        &p->peer_latency, &p->transpose_bw, &p->window_rate, &p->norm_row, &p->blas_flops, &p->blas_bw, &p->blas_call,
                        &p->bw_at[0], &p->bw_at[1], &p->bw_at[2],
                        &p->bw_at[3], &p->bw_at[4]};
    return f[k];
}

/* How this mpcc was built: an unoptimised or sanitised build measures its
 * own slower loops, which must not stand for the machine's. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BUILD_FLAVOUR "sanitised"
#elif defined(__OPTIMIZE__)
#define BUILD_FLAVOUR "optimised"
#else
#define BUILD_FLAVOUR "debug"
#endif

/* ~/.cache/mpcc/cpu-HASH.profile: HASH of the CPU's model name, the cores,
 * mpcc's version and how it was built; NULL where there is no home to
 * cache in. */
static char *cache_path(void)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[512], model[600] = "?", line[512];
    if (xdg && xdg[0] == '/')
        snprintf(dir, sizeof dir, "%s/mpcc", xdg);
    else if (home && home[0] == '/')
        snprintf(dir, sizeof dir, "%s/.cache/mpcc", home);
    else
        return NULL;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            snprintf(model, sizeof model, "%s", line);
            break;
        }
    if (f)
        fclose(f);
    char key[700];
    snprintf(key, sizeof key, "%s|%ld|%s|%s|cal11", model, sysconf(_SC_NPROCESSORS_ONLN),
             MPCC_VERSION, BUILD_FLAVOUR);
    uint64_t h = 1469598103934665603ull;
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    char *path = malloc(strlen(dir) + 40);
    if (path)
        sprintf(path, "%s/cpu-%016llx.profile", dir, (unsigned long long)h);
    return path;
}

static bool cache_read(const char *path, Profile *solo, Profile *shared)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return false;
    int found = 0;
    char line[256], name[64];
    double v;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%63s = %lf", name, &v) == 2 && v > 0)
            for (int k = 0; k < NKEYS; k++) {
                bool sh = strncmp(name, "shared.", 7) == 0;
                if (strcmp(sh ? name + 7 : name, keys[k]) == 0)
                    *fields(sh ? shared : solo, k) = v, found++;
            }
    fclose(f);
    return found == 2 * NKEYS;
}

static void cache_write(const char *path, Profile *solo, Profile *shared)
{
    if (!path)
        return;
    char *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
    if (slash) {
        *slash = 0;
        char *parent = strrchr(dir, '/');
        if (parent) {   /* ~/.cache, then ~/.cache/mpcc */
            *parent = 0;
            mkdir(dir, 0755);
            *parent = '/';
        }
        mkdir(dir, 0755);
    }
    free(dir);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "# mpcc %s: this machine's CPU rates, measured (calibrate.c); a profile file\n"
            "# for --profile. The shared.* lines: two CPU devices at once. Delete it to\n"
            "# measure again.\n", MPCC_VERSION);
    for (int k = 0; k < NKEYS; k++)
        fprintf(f, "%s = %.6g\n", keys[k], *fields(solo, k));
    for (int k = 0; k < NKEYS; k++)
        fprintf(f, "shared.%s = %.6g\n", keys[k], *fields(shared, k));
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        remove(tmp);
}

static void finish(Profile *p)
{
    p->tf32_flops = p->bf16_flops = p->matrix_flops;
    p->peer_bw = p->host_bw = p->copy_bw;
    p->host_latency = p->peer_latency;
}

/* The CPU rates: alone (shared false) or two CPU devices at once. */
Profile cpu_profile(bool shared)
{
    static Profile solo, both;
    if (solo.name)
        return shared ? both : solo;
    const char *fixed = getenv("MPCC_CPU_PROFILE");   /* "FLOPS,BYTES": tests pin it */
    double f = 0, b = 0;
    if (fixed && sscanf(fixed, "%lf,%lf", &f, &b) == 2 && f > 0 && b > 0) {
        solo = both = pinned(f, b);
        return solo;
    }
    char *path = cache_path();
    solo = both = pinned(1e9, 1e9);
    if (!cache_read(path, &solo, &both)) {
        sgemm = open_blas();
        dnnl_sgemm_fn = open_onednn();
        double handoff = handoff_seconds();
        solo = measured(false, handoff);
        both = measured(true, handoff);
        cache_write(path, &solo, &both);
    }
    free(path);
    finish(&solo), finish(&both);
    solo.shared_bw = 2 * both.bandwidth;
    both.shared_bw = 2 * both.bandwidth;
    return shared ? both : solo;
}
