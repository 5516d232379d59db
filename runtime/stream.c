/* stream.c — CPU devices with the semantics of CUDA streams and events.
 *
 * Each stream is a worker thread running its queue in order: run a stage
 * action for a micro-batch, copy bytes, wait for an event, record an event.
 * The host enqueues a whole step (in an order where every wait names an
 * event recorded earlier in that order) and then waits for every stream to
 * drain. One mutex guards all queues and events (a step has hundreds of
 * operations, not millions); each stream sleeps on a condition variable of
 * its own, woken when its queue grows or when the event it waits for is
 * recorded, and the host on another, so a hand-off wakes the one thread it
 * concerns rather than every device's threads (on a machine with fewer
 * cores than threads, each needless wake-up takes a core from a kernel).
 *
 * With tracing on, every operation's start and end (seconds since the
 * trainer started) are kept by its label, for --trace and --profile.
 */
#include "mprt.h"
#include "program.h"

#include <cblas.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

/* SEND and RECV: to or from a device of another process (comm.c), mb the
 * device and ev the tag. */
enum { MPRT_OP_RUN, MPRT_OP_COPY, MPRT_OP_WAIT, MPRT_OP_RECORD, MPRT_OP_SEND, MPRT_OP_RECV };

typedef struct MprtOp {
    int kind, mb, ev, label;
    void (*fn)(int mb);
    void *dst;
    const void *src;
    size_t n;
} MprtOp;

typedef struct MprtStream {
    pthread_t thread;
    pthread_cond_t cv;     /* its queue grew, or the event it waits for came */
    MprtOp *q;
    int cap, head, tail, busy, index;
    int waiting;           /* the event it sleeps on, -1 if none */
} MprtStream;

MPRT_GLOBAL pthread_mutex_t mprt_mu = PTHREAD_MUTEX_INITIALIZER;
MPRT_GLOBAL pthread_cond_t mprt_cv = PTHREAD_COND_INITIALIZER;   /* the host's */
MPRT_GLOBAL int mprt_host_waits;   /* the host sleeps on mprt_cv */
MPRT_GLOBAL MprtStream *mprt_streams;
MPRT_GLOBAL int mprt_nstreams;
MPRT_GLOBAL unsigned char *mprt_events;
MPRT_GLOBAL int mprt_nevents;

/* How a copy stream moves bytes: memcpy, or (mixed.c) a CUDA copy when one
 * side is a GPU's. */
MPRT_GLOBAL void *(*mprt_stream_copy)(void *dst, const void *src, size_t n) = memcpy;
/* How a stream sends to and receives from a device of another process
 * (comm.c, over MPI). */
MPRT_GLOBAL void (*mprt_stream_send)(const void *src, size_t n, int dev, int tag);
MPRT_GLOBAL void (*mprt_stream_recv)(void *dst, size_t n, int dev, int tag);

MPRT_KERNEL void mprt_execute(const MprtOp *op)
{
    double t0 = mprt_tracing ? mprt_clock() : 0;
    if (op->kind == MPRT_OP_RUN)
        op->fn(op->mb);
    else if (op->kind == MPRT_OP_SEND)
        mprt_stream_send(op->src, op->n, op->mb, op->ev);
    else if (op->kind == MPRT_OP_RECV)
        mprt_stream_recv(op->dst, op->n, op->mb, op->ev);
    else
        mprt_stream_copy(op->dst, op->src, op->n);
    if (mprt_tracing && op->label >= 0) {
        mprt_op_start[op->label] = t0;
        mprt_op_end[op->label] = mprt_clock();
    }
}

/* Event ev is recorded: the streams sleeping on it wake, and the host if it
 * waits (mprt_host_wait). Called with mprt_mu held. */
static void mprt_recorded(int ev)
{
    mprt_events[ev] = 1;
    for (int i = 0; i < mprt_nstreams; i++)
        if (mprt_streams[i].waiting == ev)
            pthread_cond_signal(&mprt_streams[i].cv);
    if (mprt_host_waits)
        pthread_cond_broadcast(&mprt_cv);
}

MPRT_KERNEL void *mprt_stream_main(void *arg)
{
    MprtStream *s = arg;
    mprt_thread_dev = s->index / MPRT_STREAMS;   /* pool.c: its device's thread count */
    if (s->index % MPRT_STREAMS == MPRT_STREAM_COMM)
        mprt_pool_worker = 1;   /* the sums run on this thread alone, beside the kernels */
    if (mprt_replicas_here > 1)   /* state.c: its device's copy of the replica */
        mprt_dev_base = mprt_thread_dev / mprt_replica_devs * mprt_replica_devs;
    pthread_mutex_lock(&mprt_mu);
    for (;;) {
        while (s->head == s->tail)
            pthread_cond_wait(&s->cv, &mprt_mu);
        MprtOp op = s->q[s->head % s->cap];
        if (op.kind == MPRT_OP_WAIT) {
            s->waiting = op.ev;
            while (!mprt_events[op.ev])
                pthread_cond_wait(&s->cv, &mprt_mu);
            s->waiting = -1;
        } else if (op.kind == MPRT_OP_RECORD) {
            mprt_recorded(op.ev);
        } else {
            s->busy = 1;
            pthread_mutex_unlock(&mprt_mu);
            mprt_execute(&op);
            pthread_mutex_lock(&mprt_mu);
            s->busy = 0;
        }
        s->head++;
        if (s->head == s->tail && mprt_host_waits)   /* drained: the host may be syncing */
            pthread_cond_broadcast(&mprt_cv);
    }
    return NULL;
}

/* Starts nstreams worker threads; nops bounds the operations of one step. */
static int mprt_cpu_streams_start(int nstreams, int nevents, int nops, char *err, size_t errlen)
{
    mprt_clock0 = 0;
    mprt_clock0 = mprt_clock();
    mprt_streams = calloc((size_t)nstreams, sizeof *mprt_streams);
    mprt_events = calloc((size_t)nevents + 1, 1);
    if (!mprt_op_start)   /* a mixed trainer's GPUs may have made them */
        mprt_op_start = calloc((size_t)nops + 1, sizeof(double));
    if (!mprt_op_end)
        mprt_op_end = calloc((size_t)nops + 1, sizeof(double));
    if (!mprt_streams || !mprt_events || !mprt_op_start || !mprt_op_end)
        return mprt_errf(err, errlen, "out of memory starting %d streams", nstreams);
    mprt_nstreams = nstreams;
    mprt_nevents = nevents;
    for (int i = 0; i < nstreams; i++) {
        MprtStream *s = &mprt_streams[i];
        s->cap = 4 * nops + 16;
        s->index = i;
        s->waiting = -1;
        pthread_cond_init(&s->cv, NULL);
        s->q = malloc((size_t)s->cap * sizeof *s->q);
        if (!s->q)
            return mprt_errf(err, errlen, "out of memory starting %d streams", nstreams);
        int rc = pthread_create(&s->thread, NULL, mprt_stream_main, s);
        if (rc != 0)
            return mprt_errf(err, errlen, "cannot start a device thread: %s", strerror(rc));
        pthread_detach(s->thread);
    }
    return 0;
}

MPRT_KERNEL void mprt_enqueue(int stream, MprtOp op)
{
    MprtStream *s = &mprt_streams[stream];
    pthread_mutex_lock(&mprt_mu);
    s->q[s->tail++ % s->cap] = op;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&mprt_mu);
}

static void mprt_cpu_launch(int stream, void (*fn)(int), int mb, int label)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_RUN, mb, -1, label, fn, NULL, NULL, 0});
}

static void mprt_cpu_memcpy_async(int stream, void *dst, const void *src, size_t n, int label)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_COPY, 0, -1, label, NULL, dst, src, n});
}

static void mprt_cpu_wait_event(int stream, int ev)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_WAIT, 0, ev, -1, NULL, NULL, NULL, 0});
}

static void mprt_cpu_record_event(int stream, int ev)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_RECORD, 0, ev, -1, NULL, NULL, NULL, 0});
}

/* The host waits until event ev is recorded (mixed.c: before it issues a
 * GPU's work that depends on a CPU device). */
MPRT_KERNEL void mprt_host_wait(int ev)
{
    pthread_mutex_lock(&mprt_mu);
    mprt_host_waits++;
    while (!mprt_events[ev])
        pthread_cond_wait(&mprt_cv, &mprt_mu);
    mprt_host_waits--;
    pthread_mutex_unlock(&mprt_mu);
}

/* Waits until every stream has run everything enqueued, then clears the
 * events for the next step. */
static void mprt_cpu_sync(void)
{
    pthread_mutex_lock(&mprt_mu);
    mprt_host_waits++;
    for (int i = 0; i < mprt_nstreams; i++)
        while (mprt_streams[i].head != mprt_streams[i].tail || mprt_streams[i].busy)
            pthread_cond_wait(&mprt_cv, &mprt_mu);
    mprt_host_waits--;
    memset(mprt_events, 0, (size_t)mprt_nevents + 1);
    pthread_mutex_unlock(&mprt_mu);
}

/* ---- device memory: a CPU device's is the host's ---- */

/* The cores CPU devices share: $MPRT_CORES, else the machine's. */
static long mprt_cores(void)
{
    const char *env = getenv("MPRT_CORES");
    long n = env && *env ? atol(env) : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

/* Each CPU device's thread count (its pool's and oneDNN's), so that
 * devices working at once do not oversubscribe the cores: with
 * OPENBLAS_NUM_THREADS set, that many each; else one each and the rest of
 * the cores in proportion to the plan's shares (each device's predicted
 * busy seconds a step; NULL: even), the largest remainders rounded up.
 * OpenBLAS's count is the process's, so its GEMMs (--cpu-kernels=builtin)
 * take an even share. */
static void mprt_cpu_devices_open(int ndev, const char *const *names, const double *shares)
{
    int cpus = 0;
    double total = 0;
    for (int d = 0; d < ndev; d++)
        if (strncmp(names[d], "cpu", 3) == 0)
            cpus++, total += shares ? shares[d] : 1;
    if (getenv("OPENBLAS_NUM_THREADS") || cpus == 0)
        return;
    long cores = mprt_cores(), rest = cores > cpus ? cores - cpus : 0;
    if (cpus > 1 || getenv("MPRT_CORES"))
        openblas_set_num_threads((int)(cores > cpus ? cores / cpus : 1));
    int *t = calloc((size_t)ndev, sizeof *t);
    double *left = calloc((size_t)ndev, sizeof *left);
    if (!t || !left) {
        fprintf(stderr, "train: error: out of memory\n");
        exit(1);
    }
    long given = 0;
    for (int d = 0; d < ndev; d++) {
        if (strncmp(names[d], "cpu", 3) != 0)
            continue;
        double w = !shares || total <= 0 ? 1.0 / cpus : shares[d] / total;
        long k = (long)(rest * w);
        t[d] = 1 + (int)k, left[d] = rest * w - (double)k, given += k;
    }
    for (; given < rest; given++) {   /* the largest remainders, the first on a tie */
        int best = -1;
        for (int d = 0; d < ndev; d++)
            if (strncmp(names[d], "cpu", 3) == 0 && (best < 0 || left[d] > left[best]))
                best = d;
        t[best]++, left[best] = -1;
    }
    free(left);
    mprt_dev_threads_of = t;
}

/* The host's thread runs CPU device dev's kernels (evaluation's forward)
 * with that device's thread count (pool.c); -1: its own again. */
MPRT_KERNEL void mprt_run_as(int dev)
{
    mprt_thread_dev = dev;
}

static int mprt_cpu_dev_threads(int dev)
{
    return mprt_threads ? mprt_threads : mprt_dev_threads(dev);
}

/* The memory plan's kernel scratch of a device: CPU kernels are handed it. */
static void mprt_cpu_dev_scratch(int dev, void *p, size_t n) { (void)dev, (void)p, (void)n; }

/* n zeroed bytes of the host's, or the out-of-memory line: "NAME WHAT
 * needs n bytes NOTE; try mpcc FLAGS or a smaller -batch". */
static unsigned char *mprt_cpu_zalloc(size_t n, const char *name, const char *what,
                                      const char *note, const char *flags)
{
    unsigned char *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "train: error: out of memory: %s%s needs %zu bytes%s; try mpcc %s or a "
                "smaller -batch\n", name, what, n, note, flags);
        exit(1);
    }
    return p;
}

static unsigned char *mprt_cpu_arena_alloc(int dev, const char *name, size_t n)
{
    (void)dev;
    return mprt_cpu_zalloc(n, name, "", " (the memory plan's peak)",
                           "--recompute=auto, more devices");
}

static void mprt_cpu_arena_free(int dev, unsigned char *p) { (void)dev, free(p); }

/* A CPU device's host arena is more of the host's memory. */
static unsigned char *mprt_cpu_host_alloc(int dev, const char *name, size_t n)
{
    (void)dev;
    return mprt_cpu_zalloc(n, name, "'s host arena for offloaded activations", "",
                           "--offload=none");
}

/* Host data into a device buffer, and back; a device's bytes to zero. */
static void mprt_cpu_dev_write(int dev, void *dst, const void *src, size_t n)
{
    (void)dev, memcpy(dst, src, n);
}

/* The host's view of n device bytes at src (k: which staging area, so
 * that several views can be alive; CPU devices need none). */
static const void *mprt_cpu_dev_read(int dev, const void *src, size_t n, int k)
{
    return (void)dev, (void)n, (void)k, src;
}

/* A host copy of n device bytes that stays until mprt_dev_unhold. */
static const void *mprt_cpu_dev_hold(int dev, const void *src, size_t n)
{
    return (void)dev, (void)n, src;
}

static void mprt_cpu_dev_unhold(const void *host, const void *src) { (void)host, (void)src; }

/* Where the host writes n bytes bound for dst, then mprt_dev_commit. */
static void *mprt_cpu_dev_stage(int dev, void *dst, size_t n) { return (void)dev, (void)n, dst; }

static void mprt_cpu_dev_commit(int dev, void *dst, const void *staged, size_t n)
{
    (void)dev, (void)dst, (void)staged, (void)n;
}

static void mprt_cpu_dev_zero(int dev, void *dst, size_t n) { (void)dev, memset(dst, 0, n); }

/* Outside the step (evaluation): bytes between any two devices. */
static void mprt_cpu_dev_copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

/* In a stage's forward: keep the loss of micro-batch mb for the host. */
static void mprt_cpu_keep_loss(int mb, const float *loss) { mprt_losses[mb] = loss[0]; }

/* The host's per-step arrays: the losses, --clip-norm's squared norms. */
static void *mprt_cpu_calloc(int n, size_t size)
{
    void *p = calloc((size_t)n, size);
    if (!p) {
        fprintf(stderr, "train: error: out of memory\n");
        exit(1);
    }
    return p;
}

static void mprt_cpu_losses_alloc(int n) { mprt_losses = mprt_cpu_calloc(n, sizeof(float)); }
static void mprt_cpu_norm_alloc(int n) { mprt_norm_sq = mprt_cpu_calloc(n, sizeof(double)); }

MPRT_GLOBAL const MprtDeviceOps mprt_cpu_ops = {
    .launch = mprt_cpu_launch, .memcpy_async = mprt_cpu_memcpy_async,
    .wait_event = mprt_cpu_wait_event, .record_event = mprt_cpu_record_event,
    .dev_scratch = mprt_cpu_dev_scratch, .dev_zero = mprt_cpu_dev_zero,
    .arena_alloc = mprt_cpu_arena_alloc, .arena_free = mprt_cpu_arena_free,
    .host_alloc = mprt_cpu_host_alloc, .host_free = mprt_cpu_arena_free,
    .dev_write = mprt_cpu_dev_write, .dev_read = mprt_cpu_dev_read, .dev_hold = mprt_cpu_dev_hold,
    .dev_unhold = mprt_cpu_dev_unhold, .dev_stage = mprt_cpu_dev_stage,
    .dev_commit = mprt_cpu_dev_commit, .keep_loss = mprt_cpu_keep_loss,
    .devices_open = mprt_cpu_devices_open, .streams_start = mprt_cpu_streams_start,
    .sync = mprt_cpu_sync, .losses_alloc = mprt_cpu_losses_alloc, .norm_alloc = mprt_cpu_norm_alloc,
    .dev_copy = mprt_cpu_dev_copy, .dev_threads = mprt_cpu_dev_threads,
};

#ifndef MPRT_MIXED   /* CPU devices only; mixed.c has the table of a trainer with both */
MPRT_GLOBAL const MprtDeviceOps *mprt_ops = &mprt_cpu_ops;
#endif
