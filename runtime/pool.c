/* pool.c — a CPU device's threads for the kernels mpcc writes itself:
 * elementwise work and fused chains, normalisations, softmax, pooling,
 * reductions, im2col, the optimizers. (GEMMs and oneDNN's convolutions
 * bring threads of their own.)
 *
 * mprt_par(n, grain, fn, ctx) runs fn(ctx, lo, hi) over pieces [lo, hi)
 * that cover [0, n), on the calling thread and the workers of its pool.
 * The pool belongs to the thread that first asks for one, a device's
 * stream, and has mprt_threads - 1 workers: one pool per device, each
 * with the thread count OpenBLAS and oneDNN use (OPENBLAS_NUM_THREADS,
 * else every core). A call with fewer than two pieces' worth of items
 * (grain each), or from a worker, runs on the calling thread alone.
 *
 * The numbers do not depend on the thread count. A kernel splits only
 * over items whose results are independent (elements, rows, channels,
 * planes) and computes each item whole, in the order its one-thread loop
 * uses; no sum is ever split between threads. Which thread takes which
 * piece varies from call to call and changes no bit.
 *
 * A worker spins briefly after each piece of work (the next kernel
 * usually follows at once), then sleeps on a condition variable, so idle
 * workers take no core from OpenBLAS's threads or another device's.
 */
#include "mprt.h"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

typedef void (*MprtParFn)(void *ctx, long lo, long hi);

typedef struct MprtTeam {
    int workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint job;       /* bumped for each new call */
    MprtParFn fn;
    void *ctx;
    long n, piece, pieces;
    atomic_long next;      /* the next piece to take */
    atomic_int running;    /* workers still on this call */
} MprtTeam;

MPRT_GLOBAL int mprt_threads;                     /* per device; 0: not yet known */
static _Thread_local MprtTeam *mprt_pool_mine;    /* the calling stream's */
static _Thread_local int mprt_pool_worker;        /* this thread is a worker */

enum { MPRT_POOL_SPIN = 20000 };   /* polls before a worker sleeps (tens of µs) */

/* The thread count of every CPU device: OpenBLAS's, as oneDNN's. */
static int mprt_pool_threads(void)
{
    if (!mprt_threads) {
        int t = openblas_get_num_threads();
        mprt_threads = t > 0 ? t : 1;
    }
    return mprt_threads;
}

/* Takes pieces of the current call until none is left. */
static void mprt_pool_drain(MprtTeam *p)
{
    for (;;) {
        long k = atomic_fetch_add(&p->next, 1);
        if (k >= p->pieces)
            return;
        long lo = k * p->piece, hi = lo + p->piece < p->n ? lo + p->piece : p->n;
        p->fn(p->ctx, lo, hi);
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

static void *mprt_pool_main(void *arg)
{
    MprtTeam *p = arg;
    unsigned seen = 0;
    mprt_pool_worker = 1;
    for (;;) {
        seen = mprt_pool_wait(p, seen);
        mprt_pool_drain(p);
        atomic_fetch_sub(&p->running, 1);
    }
    return NULL;
}

/* The calling thread's pool, made on its first parallel call; NULL when
 * the device has one thread or no worker can be started (then every call
 * runs on the caller). */
static MprtTeam *mprt_pool_get(void)
{
    static _Thread_local int tried;
    if (mprt_pool_mine || tried || mprt_pool_threads() < 2)
        return mprt_pool_mine;
    tried = 1;
    MprtTeam *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    for (int i = 0; i < mprt_threads - 1; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, mprt_pool_main, p) != 0)
            break;
        pthread_detach(t);
        p->workers++;
    }
    mprt_pool_mine = p->workers ? p : NULL;
    return mprt_pool_mine;
}

MPRT_KERNEL void mprt_par(long n, long grain, MprtParFn fn, void *ctx)
{
    if (n <= 0)
        return;
    MprtTeam *p = mprt_pool_worker || n < 2 * grain ? NULL : mprt_pool_get();
    if (!p) {
        fn(ctx, 0, n);
        return;
    }
    long want = 4L * (p->workers + 1), piece = (n + want - 1) / want;
    p->piece = piece < grain ? grain : piece;
    p->pieces = (n + p->piece - 1) / p->piece;
    p->fn = fn, p->ctx = ctx, p->n = n;
    atomic_store(&p->next, 0);
    atomic_store(&p->running, p->workers);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->job, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    mprt_pool_drain(p);
    for (long i = 0; atomic_load(&p->running) > 0; i++)
        if (i % 64 == 63)
            sched_yield();
}
