/* pool.c — a CPU device's threads for the kernels mpcc writes itself:
 * elementwise work and fused chains, normalisations, softmax, pooling,
 * reductions, im2col, the optimizers. (GEMMs and oneDNN's convolutions
 * bring threads of their own.)
 *
 * mprt_par(n, grain, fn, ctx) runs fn(ctx, lo, hi) over pieces [lo, hi)
 * that cover [0, n), on the calling thread and the workers of its pool.
 * Where the trainer links oneDNN, the pool is the calling thread's OpenMP
 * team (MPRT_GOMP, below). Otherwise it is threads of its own: the pool
 * belongs to the thread that first asks for one, a device's
 * stream, and has one worker fewer than the device has threads: one pool
 * per device, each with the count oneDNN uses there (OPENBLAS_NUM_THREADS,
 * else the device's share of the cores: stream.c's mprt_cpu_devices_open).
 * A call with fewer than two pieces' worth of items
 * (grain each), or from a worker, runs on the calling thread alone.
 *
 * The numbers do not depend on the thread count. A kernel splits only
 * over items whose results are independent (elements, rows, channels,
 * planes) and computes each item whole, in the order its one-thread loop
 * uses; no sum is ever split between threads. Which thread takes which
 * piece changes no bit.
 *
 * Thread k takes piece k: the calling thread the first, worker k the
 * (k+1)-th, so consecutive kernels over the same tensor give each thread
 * the same part of it, still in its core's cache. A thread that finishes
 * takes the pieces no one has started, so a worker the system runs late
 * (OpenBLAS's and oneDNN's threads share the cores) delays nothing. A
 * worker spins briefly after each call (the next kernel usually follows at
 * once), then sleeps on a condition variable.
 */
#include "mprt.h"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

typedef void (*MprtParFn)(void *ctx, long lo, long hi);

enum { MPRT_POOL_MAX = 32 };   /* pieces of a call, and threads of a device */

/* $MPRT_POOL_THREADS: the pool's count on every device, for mpcc's own
 * kernels alone (tests/train/threads.sh varies it with OpenBLAS's held: on
 * some CPUs OpenBLAS splits a GEMM's inner dimension at another thread
 * count, and rounds differently); 0 where unset: each device's own. */
MPRT_GLOBAL int mprt_threads;

/* Each CPU device's thread count, for its pool and oneDNN: the cores
 * shared out by the plan (stream.c's mprt_cpu_devices_open); NULL, and for
 * a thread that is no device's, OpenBLAS's count. */
MPRT_GLOBAL int *mprt_dev_threads_of;

/* The device whose stream this thread is; -1: the host's thread. */
static _Thread_local int mprt_thread_dev = -1;

static int mprt_clamp_threads(int t)
{
    return t < 1 ? 1 : t > MPRT_POOL_MAX ? MPRT_POOL_MAX : t;
}

static int mprt_dev_threads(int dev)
{
    if (mprt_dev_threads_of && dev >= 0)
        return mprt_dev_threads_of[dev];
    return mprt_clamp_threads(openblas_get_num_threads());
}

/* The calling thread's pool: $MPRT_POOL_THREADS, else its device's count. */
static int mprt_pool_threads(void)
{
    static int read;
    if (!read) {
        const char *own = getenv("MPRT_POOL_THREADS");
        if (own && *own && !mprt_threads)
            mprt_threads = mprt_clamp_threads(atoi(own));
        read = 1;
    }
    return mprt_threads ? mprt_threads : mprt_dev_threads(mprt_thread_dev);
}

/* This thread is worker k (from 1) of its device's pool: a call it makes
 * runs on it alone. */
static _Thread_local int mprt_pool_worker;

#ifdef MPRT_GOMP
/* Where the trainer links libgomp (oneDNN's OpenMP runtime: its GEMMs or
 * convolutions run through oneDNN), the device's OpenMP threads are its
 * pool: a call is one parallel region of libgomp's (GOMP_parallel, what
 * `#pragma omp parallel` compiles to, called directly so that the trainer
 * needs no -fopenmp), so mpcc's kernels and oneDNN's take turns on the
 * same threads instead of two sets of threads spinning for the same cores.
 * Thread k takes piece k, then any piece no one has started, as below. */
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
int omp_get_thread_num(void);
int omp_get_max_threads(void);
void omp_set_num_threads(int n);

/* Before a oneDNN call (a GEMM or a convolution): the calling thread's
 * OpenMP team is its device's thread count, the count oneDNN's primitives
 * were made for (checked each time: a thread's count is its own, and
 * cheap to read). */
static void mprt_omp_threads(void)
{
    int want = mprt_dev_threads(mprt_thread_dev);
    if (omp_get_max_threads() != want)
        omp_set_num_threads(want);
}

typedef struct MprtOmpCall {
    MprtParFn fn;
    void *ctx;
    long n, pieces;
    atomic_ullong left;   /* a bit per piece not taken */
} MprtOmpCall;

static void mprt_omp_take(MprtOmpCall *c, int k)
{
    unsigned long long bit = 1ull << k;
    if (atomic_fetch_and(&c->left, ~bit) & bit)
        c->fn(c->ctx, c->n * k / c->pieces, c->n * (k + 1) / c->pieces);
}

static void mprt_omp_piece(void *arg)
{
    MprtOmpCall *c = arg;
    int was = mprt_pool_worker, me = omp_get_thread_num();
    mprt_pool_worker = 1 + me;   /* a call from inside runs on this thread */
    if (me < c->pieces)
        mprt_omp_take(c, me);
    for (int k = 0; k < c->pieces; k++)
        mprt_omp_take(c, k);
    mprt_pool_worker = was;
}

static void mprt_par_omp(long n, long pieces, MprtParFn fn, void *ctx)
{
    MprtOmpCall c = {fn, ctx, n, pieces, (1ull << pieces) - 1};
    GOMP_parallel(mprt_omp_piece, &c, (unsigned)pieces, 0);
}
#else
typedef struct MprtTeam {
    int workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint job;       /* bumped for each new call */
    MprtParFn fn;
    void *ctx;
    long n, pieces;
    atomic_ullong left;    /* the call's number (high 32 bits), a bit per piece not taken */
    atomic_long done;      /* pieces of this call finished */
} MprtTeam;

static _Thread_local MprtTeam *mprt_pool_mine;    /* the calling stream's */

enum { MPRT_POOL_SPIN = 20000 };   /* polls before a worker sleeps (tens of µs) */

/* Takes piece k of call `job` if no one has: the call's number and its
 * pieces not yet taken are one atomic word, so a piece runs once, and only
 * while its call does (the call's fields are read after taking it). */
static int mprt_pool_take(MprtTeam *p, unsigned job, int k)
{
    unsigned long long v = atomic_load(&p->left), bit = 1ull << k;
    while ((unsigned)(v >> 32) == job && (v & bit))
        if (atomic_compare_exchange_weak(&p->left, &v, v & ~bit)) {
            long lo = p->n * k / p->pieces, hi = p->n * (k + 1) / p->pieces;
            p->fn(p->ctx, lo, hi);
            atomic_fetch_add(&p->done, 1);
            return 1;
        }
    return 0;
}

/* Piece `first`, then any piece of call `job` no one has started. */
static void mprt_pool_drain(MprtTeam *p, unsigned job, int first)
{
    if (first < MPRT_POOL_MAX)
        mprt_pool_take(p, job, first);
    for (int k = 0; k < MPRT_POOL_MAX; k++) {
        unsigned long long v = atomic_load(&p->left);
        if ((unsigned)(v >> 32) != job || !(v & 0xffffffffu))
            return;
        if (v & (1ull << k))
            mprt_pool_take(p, job, k);
    }
}

/* A worker: waits for a call newer than the last it saw, spinning first. */
static unsigned mprt_pool_wait(MprtTeam *p, unsigned seen)
{
    for (int i = 0; i < MPRT_POOL_SPIN; i++) {
        unsigned j = atomic_load(&p->job);
        if (j != seen)
            return j;
        if (i % 64 == 63)
            sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    unsigned j;
    while ((j = atomic_load(&p->job)) == seen)
        pthread_cond_wait(&p->wake, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return j;
}

typedef struct MprtWorker {
    MprtTeam *team;
    int index;
} MprtWorker;

static void *mprt_pool_main(void *arg)
{
    MprtWorker w = *(MprtWorker *)arg;
    free(arg);
    unsigned seen = 0;
    mprt_pool_worker = w.index;
    for (;;) {
        seen = mprt_pool_wait(w.team, seen);
        mprt_pool_drain(w.team, seen, w.index);
    }
    return NULL;
}

/* The calling thread's pool, made on its first parallel call; NULL when
 * the device has one thread or no worker can be started (then every call
 * runs on the caller). */
static MprtTeam *mprt_pool_get(void)
{
    static _Thread_local int tried;
    int threads = mprt_pool_threads();
    if (mprt_pool_mine || tried || threads < 2)
        return mprt_pool_mine;
    tried = 1;
    MprtTeam *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    for (int i = 0; i < threads - 1; i++) {
        pthread_t t;
        MprtWorker *w = malloc(sizeof *w);
        if (!w)
            break;
        *w = (MprtWorker){p, i + 1};
        if (pthread_create(&t, NULL, mprt_pool_main, w) != 0) {
            free(w);
            break;
        }
        pthread_detach(t);
        p->workers++;
    }
    mprt_pool_mine = p->workers ? p : NULL;
    return mprt_pool_mine;
}

#endif

MPRT_KERNEL void mprt_par(long n, long grain, MprtParFn fn, void *ctx)
{
    if (n <= 0)
        return;
#ifdef MPRT_GOMP
    long most = mprt_pool_threads(), pieces = n / grain < most ? n / grain : most;
    if (mprt_pool_worker || pieces < 2)
        fn(ctx, 0, n);
    else
        mprt_par_omp(n, pieces, fn, ctx);
#else
    MprtTeam *p = mprt_pool_worker || n < 2 * grain ? NULL : mprt_pool_get();
    if (!p) {
        fn(ctx, 0, n);
        return;
    }
    long pieces = n / grain < p->workers + 1 ? n / grain : p->workers + 1;
    p->pieces = pieces;
    p->fn = fn, p->ctx = ctx, p->n = n;
    unsigned job = atomic_load(&p->job) + 1;
    atomic_store(&p->done, 0);
    atomic_store(&p->left, (unsigned long long)job << 32 | ((1ull << pieces) - 1));
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->job, job);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    mprt_pool_drain(p, job, 0);
    for (long i = 0; atomic_load(&p->done) < p->pieces; i++)   /* pieces workers took */
        if (i % 64 == 63)
            sched_yield();
#endif
}
