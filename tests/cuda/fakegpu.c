/* fakegpu.c — GPUs made of the host, so that a whole generated CUDA
 * trainer runs without one: the CUDA runtime, cuBLAS and NVRTC calls that
 * runtime/cuda.c and cuda_ops.c make, linked into the trainer in place of
 * the real libraries (tests/cuda/fakegpu.py).
 *
 * - Device memory is host memory; there are $FAKEGPU_COUNT GPUs (default 1).
 * - With $FAKEGPU_NOPEER=1, distinct GPUs have no peer access:
 *   cudaDeviceCanAccessPeer says 0, and an asynchronous copy between two
 *   of them (cudaMemcpyPeerAsync, or cudaMemcpyAsync from one's memory to
 *   the other's) fails with cudaErrorPeerAccessNotEnabled, where a real
 *   driver would stage it through host memory: a trainer that runs must
 *   stage its copies itself (runtime/cuda.c, mprt_cu_stage_copy).
 * - With $FAKEGPU_NVRTC_LOG set, NVRTC's compilation fails with that log.
 * - With $FAKEGPU_ARCH=70 (say), the GPUs are of compute capability 7.0
 *   (default 9.0).
 * - With $FAKEGPU_MEMORY=N, each GPU has N bytes: a cudaMalloc past them
 *   fails with cudaErrorMemoryAllocation, and cudaMemGetInfo counts them.
 * - Kernels are runtime/kernels.cu compiled for the host (emulate.py's
 *   thunks, one thread per block); a launch copies its arguments.
 * - Streams are queues that nothing runs until the host synchronizes (a
 *   stream, an event, or a cudaMemcpy's source). Then runnable streams run
 *   one operation at a time, the next stream drawn at random
 *   ($FAKEGPU_SEED): a wait runs only once the event's last record before
 *   it has run. So work is as late and as reordered as streams allow, and
 *   a missing wait or synchronisation shows as wrong numbers; a wait that
 *   can never be met is reported as a deadlock.
 * - cuBLAS's SGEMMs are OpenBLAS's, column-major, on the handle's stream.
 * - NVRTC "compiles" nothing (tests/cuda/nvrtc_compile.c compiles the
 *   real kernels) but takes only runtime/kernels.cu as the source, with
 *   runtime/opcodes.h as its one header named "opcodes.h".
 * - cuDNN's convolutions and batch norm are fakecudnn.c's:
 *   the descriptors read back, the CPU trainer's kernels run as an
 *   operation of the handle's stream (fakegpu_enqueue_host).
 * - NCCL's all-reduces are fakenccl.c's, over MPI: an operation that
 *   starts when its stream comes to it and holds the stream until the
 *   other processes' parts are done (fakegpu_enqueue_async); meanwhile
 *   the other streams run, and with nothing else to run the host waits
 *   for it, up to $FAKEGPU_PATIENCE seconds (default 120). And while the
 *   host waits in the trainer's own MPI_Allreduce, the streams run
 *   (fakegpu_run_while), as a real GPU's would.
 * - Graphs: between cudaStreamBeginCapture and cudaStreamEndCapture the
 *   operations of the capturing stream, and of every stream that waits
 *   for an event recorded in the capture (it joins), are kept instead of
 *   queued, each kernel with its arguments as they were. A launch queues
 *   them again in their order, on their streams, the events recorded
 *   anew. As CUDA does, it fails a capture that waits for an event
 *   recorded outside it, that synchronises the host, or whose joined
 *   streams do not end with an event the capturing stream waits for.
 * One mutex guards everything: a mixed trainer's CPU worker threads call
 * in too.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*Thunk)(void **args);
Thunk mprt_emu_kernel(const char *name);
int mprt_emu_kernel_sizes(const char *name, size_t *sizes);
extern unsigned long long mprt_k_fault[5];

enum { MAX_ARGS = 24 };
enum { OP_KERNEL, OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_GEMM, OP_HOST, OP_ASYNC };

typedef struct {
    int ta, tb, m, n, k, batch;
    float alpha, beta;
    const void *a, *b;
    void *c;
    int lda, ldb, ldc;
    long long sa, sb, sc;
    int bf16;                    /* CUBLAS_COMPUTE_32F_FAST_16BF: A and B must hold bf16 values */
    int in16, out16;             /* A and B bfloat16 (CUDA_R_16BF); C bfloat16 */
} Gemm;

typedef struct {
    int kind;
    Thunk fn;                    /* OP_KERNEL: the kernel, its arguments' copies */
    void *argv[MAX_ARGS];
    unsigned char *argbuf;
    void *dst;                   /* OP_COPY, OP_SET */
    const void *src;
    size_t n;
    int value;
    cudaEvent_t ev;              /* OP_RECORD, OP_WAIT: which record of it */
    unsigned long gen;
    Gemm gemm;
    void (*host)(void *);        /* OP_HOST: host(arg), then arg freed (fakecudnn.c); */
    void *arg;                   /* OP_ASYNC: host(arg) starts it, then the stream waits */
    int (*done)(void *);         /* until done(arg), then arg is freed (fakenccl.c) */
    int started;
    int kept;                    /* a graph's: argbuf and arg stay for the next launch */
} Op;

struct CUgraph_st {              /* a capture: its operations, each with its stream */
    Op *ops;
    cudaStream_t *on, origin;
    int n, cap;
};

struct CUgraphExec_st {
    struct CUgraph_st g;
};

struct CUstream_st {
    int device;
    Op *q;
    int head, tail, cap;
    struct CUgraph_st *capture;   /* the capture it is part of, or NULL */
};

struct CUevent_st {
    int device;
    unsigned long recorded, done;   /* records issued, records run */
    double when;                    /* the fake clock when the last ran */
    struct CUgraph_st *capture;     /* its last record was kept by this capture */
};

struct CUkern_st {
    const char *name;
    Thunk fn;
    int nargs;
    size_t sizes[MAX_ARGS];
};

struct CUlib_st {
    struct CUkern_st *kernels;
    int n;
};

struct cublasContext {
    cudaStream_t stream;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int current;   /* cudaSetDevice is per host thread */
static cudaStream_t *streams;
static int nstreams;
static uint64_t rng;
static double clock_ms;             /* one operation = 1 ms of fake time */
static struct Alloc {               /* cudaMalloc's blocks, for FAKEGPU_NOPEER */
    const unsigned char *p;
    size_t n;
    int device;
} *allocs;
static int nallocs;

static int gpu_count(void)
{
    const char *c = getenv("FAKEGPU_COUNT");
    return c && atoi(c) > 0 ? atoi(c) : 1;
}

/* $FAKEGPU_MEMORY: each GPU's bytes (default 80 GiB). */
static size_t gpu_memory(void)
{
    const char *c = getenv("FAKEGPU_MEMORY");
    return c && atoll(c) > 0 ? (size_t)atoll(c) : (size_t)80 << 30;
}

/* What device d has allocated; under mu. */
static size_t gpu_used(int d)
{
    size_t n = 0;
    for (int i = 0; i < nallocs; i++)
        n += allocs[i].device == d ? allocs[i].n : 0;
    return n;
}

static int no_peer(void)
{
    const char *c = getenv("FAKEGPU_NOPEER");
    return c && atoi(c) != 0;
}

static void fail(const char *what)
{
    fprintf(stderr, "fakegpu: %s\n", what);
    exit(3);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        fail("out of memory");
    return p;
}

static uint64_t next_random(void)
{
    if (!rng) {
        const char *s = getenv("FAKEGPU_SEED");
        rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(s ? atoll(s) : 1);
    }
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* ---- the streams' engine ---- */

static struct CUgraph_st *capturing;   /* the capture under way, or NULL */

static void keep(struct CUgraph_st *g, cudaStream_t s, Op op)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->ops = realloc(g->ops, (size_t)g->cap * sizeof *g->ops);
        g->on = realloc(g->on, (size_t)g->cap * sizeof *g->on);
        if (!g->ops || !g->on)
            fail("out of memory");
    }
    op.kept = 1;
    g->ops[g->n] = op;
    g->on[g->n++] = s;
}

static void enqueue(cudaStream_t s, Op op)
{
    if (!s)
        fail("an operation on the legacy default stream (the runtime uses its own streams)");
    if (s->capture) {
        keep(s->capture, s, op);
        return;
    }
    if (s->tail - s->head == s->cap) {
        Op *q = xcalloc((size_t)(s->cap ? 2 * s->cap : 64), sizeof *q);
        for (int i = s->head; i < s->tail; i++)
            q[i - s->head] = s->q[i % s->cap];
        s->tail -= s->head, s->head = 0;
        free(s->q);
        s->q = q;
        s->cap = s->cap ? 2 * s->cap : 64;
    }
    s->q[s->tail++ % s->cap] = op;
}

static int runnable(cudaStream_t s)
{
    if (s->head == s->tail)
        return 0;
    const Op *op = &s->q[s->head % s->cap];
    if (op->kind == OP_ASYNC)
        return !op->started || op->done(op->arg);
    return op->kind != OP_WAIT || op->ev->done >= op->gen;
}

/* A stream whose next operation is an OP_ASYNC under way: waiting on
 * another process, which runs on its own. */
static int in_flight(cudaStream_t s)
{
    return s->head != s->tail && s->q[s->head % s->cap].kind == OP_ASYNC &&
           s->q[s->head % s->cap].started;
}

/* Whether the rows x cols column-major matrix at p holds only values that
 * bfloat16 holds: a bf16 GEMM on a real GPU would round any other. */
static int holds_bf16(const float *p, int rows, int cols, int ld)
{
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            uint32_t bits;
            memcpy(&bits, &p[r + (long)c * ld], 4);
            if (bits & 0xffffu)
                return 0;
        }
    return 1;
}

static void check_bf16_operands(const Gemm *g, int i)
{
    const float *a = (const float *)g->a + i * g->sa, *b = (const float *)g->b + i * g->sb;
    if (!holds_bf16(a, g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->lda) ||
        !holds_bf16(b, g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb))
        fail("a GEMM under CUBLAS_COMPUTE_32F_FAST_16BF read a value bfloat16 does not "
             "hold: an operand the trainer did not round would lose bits on a GPU");
}

/* bfloat16 as cuBLAS converts it: widened exactly; rounded to nearest
 * even, a NaN kept quiet. */
static float widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t narrow(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t even = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : even);
}

/* The float32 copy of the column-major rows x cols matrix at element
 * `at` of p (bf16 where half), its leading dimension ld. */
static float *widened(const void *p, int half, long long at, int rows, int cols, int ld)
{
    size_t n = (size_t)ld * (size_t)(cols - 1) + (size_t)rows;
    float *w = xcalloc(n, sizeof *w);
    for (size_t e = 0; e < n; e++)
        w[e] = half ? widen(((const uint16_t *)p)[at + (long long)e])
                    : ((const float *)p)[at + (long long)e];
    return w;
}

/* One product of a batch whose operands or result are bf16: computed on
 * float32 copies, as the CPU computes on its widened ones, and the result
 * rounded once. */
static void run_gemm_bf16(const Gemm *g, int i)
{
    int ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
    int br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
    float *a = widened(g->a, g->in16, i * g->sa, ar, ac, g->lda);
    float *b = widened(g->b, g->in16, i * g->sb, br, bc, g->ldb);
    float *c = widened(g->c, g->out16, i * g->sc, g->m, g->n, g->ldc);
    cblas_sgemm(CblasColMajor, g->ta ? CblasTrans : CblasNoTrans,
                g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha, a, g->lda, b,
                g->ldb, g->beta, c, g->ldc);
    for (int col = 0; col < g->n; col++)
        for (int r = 0; r < g->m; r++) {
            long long e = r + (long long)col * g->ldc;
            if (g->out16)
                ((uint16_t *)g->c)[i * g->sc + e] = narrow(c[e]);
            else
                ((float *)g->c)[i * g->sc + e] = c[e];
        }
    free(a), free(b), free(c);
}

static void run_gemm(const Gemm *g)
{
    for (int i = 0; i < g->batch && g->bf16; i++)
        check_bf16_operands(g, i);
    for (int i = 0; i < g->batch; i++) {
        if (g->in16 || g->out16) {
            run_gemm_bf16(g, i);
            continue;
        }
        cblas_sgemm(CblasColMajor, g->ta ? CblasTrans : CblasNoTrans,
                    g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha,
                    (const float *)g->a + i * g->sa, g->lda, (const float *)g->b + i * g->sb,
                    g->ldb, g->beta, (float *)g->c + i * g->sc, g->ldc);
    }
}

static void run_one(cudaStream_t s)
{
    Op *op = &s->q[s->head % s->cap];
    if (op->kind == OP_ASYNC && !op->started) {   /* started; it stays at the head */
        op->started = 1;
        op->host(op->arg);
        return;
    }
    s->head++;
    clock_ms += 1;
    switch (op->kind) {
    case OP_KERNEL:
        op->fn(op->argv);
        if (!op->kept)
            free(op->argbuf);
        break;
    case OP_COPY: memmove(op->dst, op->src, op->n); break;
    case OP_SET: memset(op->dst, op->value, op->n); break;
    case OP_RECORD:
        op->ev->done = op->gen;
        op->ev->when = clock_ms;
        break;
    case OP_WAIT: break;
    case OP_GEMM: run_gemm(&op->gemm); break;
    case OP_HOST:
        op->host(op->arg);
        if (!op->kept)
            free(op->arg);
        break;
    case OP_ASYNC:
        if (!op->kept)
            free(op->arg);
        break;
    }
}

/* Whether the wait that began at *since (0: now) has passed
 * $FAKEGPU_PATIENCE seconds (default 120). */
static int waited_too_long(struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!since->tv_sec) {
        *since = now;
        return 0;
    }
    const char *c = getenv("FAKEGPU_PATIENCE");
    return now.tv_sec - since->tv_sec > (c && atoi(c) > 0 ? atoi(c) : 120);
}

/* One operation of a random one of the k runnable streams. */
static void run_any(int k)
{
    int pick = (int)(next_random() % (uint64_t)k);
    for (int i = 0; i < nstreams; i++)
        if (runnable(streams[i]) && pick-- == 0) {
            run_one(streams[i]);
            return;
        }
}

/* Runs streams, one operation at a time from a random runnable one, until
 * done(arg) holds. With nothing runnable but operations in flight (another
 * process's part of them), it waits for them, up to FAKEGPU_PATIENCE
 * seconds. */
static void run_until(int (*done)(const void *), const void *arg)
{
    struct timespec since = {0, 0};
    while (!done(arg)) {
        int k = 0, flying = 0;
        for (int i = 0; i < nstreams; i++) {
            k += runnable(streams[i]);
            flying += in_flight(streams[i]);
        }
        if (!k && flying && !waited_too_long(&since))
            continue;
        if (!k && flying)
            fail("deadlock across processes: an operation with another process (fakenccl.c) "
                 "has not completed in $FAKEGPU_PATIENCE seconds");
        if (!k)
            fail("deadlock: every stream with work waits for an event that no stream will "
                 "record");
        since.tv_sec = 0;
        run_any(k);
    }
}

static int stream_empty(const void *s)
{
    return ((const struct CUstream_st *)s)->head == ((const struct CUstream_st *)s)->tail;
}

static int event_done(const void *e)
{
    return ((const struct CUevent_st *)e)->done >= ((const struct CUevent_st *)e)->recorded;
}

/* For tests/cuda/fakenccl.c: while the host waits in MPI (busy(arg)), the
 * streams run, as a real GPU's do; with nothing to run, the host waits up
 * to FAKEGPU_PATIENCE seconds. */
void fakegpu_run_while(int (*busy)(void *), void *arg);
void fakegpu_run_while(int (*busy)(void *), void *arg)
{
    struct timespec since = {0, 0};
    pthread_mutex_lock(&mu);
    while (busy(arg)) {
        int k = 0;
        for (int i = 0; i < nstreams; i++)
            k += runnable(streams[i]);
        if (!k && waited_too_long(&since))
            fail("deadlock across processes: the host's MPI call has not completed in "
                 "$FAKEGPU_PATIENCE seconds");
        if (!k)
            continue;
        since.tv_sec = 0;
        run_any(k);
    }
    pthread_mutex_unlock(&mu);
}

/* For tests/cuda/fakecudnn.c: fn(arg) as stream s's next operation; arg
 * (malloc'd) is freed after it ran. */
void fakegpu_enqueue_host(cudaStream_t s, void (*fn)(void *), void *arg);
void fakegpu_enqueue_host(cudaStream_t s, void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&mu);
    enqueue(s, (Op){.kind = OP_HOST, .host = fn, .arg = arg});
    pthread_mutex_unlock(&mu);
}

/* For tests/cuda/fakenccl.c: an operation with other processes as stream
 * s's next: start(arg) when it comes to run, then the stream waits until
 * done(arg); arg (malloc'd) is freed after. */
void fakegpu_enqueue_async(cudaStream_t s, void (*start)(void *), int (*done)(void *), void *arg);
void fakegpu_enqueue_async(cudaStream_t s, void (*start)(void *), int (*done)(void *), void *arg)
{
    pthread_mutex_lock(&mu);
    enqueue(s, (Op){.kind = OP_ASYNC, .host = start, .done = done, .arg = arg});
    pthread_mutex_unlock(&mu);
}

static int owner(const void *p);

/* For fakenccl.c: the GPU that holds n bytes at p, -1 if none does; the
 * GPU a stream is on; the calling thread's current GPU. */
int fakegpu_owner(const void *p, size_t n);
int fakegpu_owner(const void *p, size_t n)
{
    pthread_mutex_lock(&mu);
    int d = owner(p), e = n ? owner((const unsigned char *)p + n - 1) : d;
    pthread_mutex_unlock(&mu);
    return d == e ? d : -1;
}

int fakegpu_stream_device(cudaStream_t s);
int fakegpu_stream_device(cudaStream_t s)
{
    return s ? s->device : -1;
}

int fakegpu_current(void);
int fakegpu_current(void)
{
    return current;
}

/* ---- the CUDA runtime ---- */

const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess                    ? "no error"
           : e == cudaErrorPeerAccessNotEnabled ? "peer access has not been enabled "
                                                  "(fakegpu: FAKEGPU_NOPEER)"
                                                : "fakegpu error";
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = gpu_count();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= gpu_count())
        return cudaErrorInvalidDevice;
    current = device;
    return cudaSuccess;
}

/* $FAKEGPU_ARCH: the GPUs' compute capability as major * 10 + minor
 * (default 90, an H100's). */
static int gpu_arch(void)
{
    const char *c = getenv("FAKEGPU_ARCH");
    return c && atoi(c) > 0 ? atoi(c) : 90;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    (void)device;
    *value = attr == cudaDevAttrComputeCapabilityMajor   ? gpu_arch() / 10
             : attr == cudaDevAttrComputeCapabilityMinor ? gpu_arch() % 10
                                                         : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    *can = device != peer && !no_peer();
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    (void)flags;
    return peer != current && no_peer() ? cudaErrorPeerAccessUnsupported : cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&mu);
    streams = realloc(streams, (size_t)(nstreams + 1) * sizeof *streams);
    if (!streams)
        fail("out of memory");
    *s = streams[nstreams++] = xcalloc(1, sizeof **s);
    (*s)->device = current;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* A call that waits for the GPU, made while a capture is under way. */
static void no_capture(const char *call)
{
    if (capturing) {
        fprintf(stderr, "fakegpu: %s during a stream capture "
                "(cudaErrorStreamCaptureUnsupported)\n", call);
        exit(3);
    }
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    no_capture("cudaStreamSynchronize");
    pthread_mutex_lock(&mu);
    run_until(stream_empty, s);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = xcalloc(1, sizeof **e);
    (*e)->device = current;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, 0);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    pthread_mutex_lock(&mu);
    if (s->device != e->device)
        fail("cudaEventRecord: the event and the stream are on different GPUs");
    e->capture = s->capture;
    if (s->capture)
        keep(s->capture, s, (Op){.kind = OP_RECORD, .ev = e});
    else
        enqueue(s, (Op){.kind = OP_RECORD, .ev = e, .gen = ++e->recorded});
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&mu);
    if (s->capture && e->capture != s->capture)
        fail("cudaStreamWaitEvent: a captured stream waits for an event recorded outside the "
             "capture (cudaErrorStreamCaptureIsolation)");
    if (e->capture && !s->capture)
        s->capture = e->capture;   /* it joins the capture */
    enqueue(s, (Op){.kind = OP_WAIT, .ev = e, .gen = e->recorded});
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    no_capture("cudaEventSynchronize");
    pthread_mutex_lock(&mu);
    run_until(event_done, e);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!event_done(a) || !event_done(b))
        return cudaErrorNotReady;
    *ms = (float)(b->when - a->when);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    pthread_mutex_lock(&mu);
    if (gpu_used(current) + n > gpu_memory()) {
        pthread_mutex_unlock(&mu);
        *p = NULL;
        return cudaErrorMemoryAllocation;
    }
    *p = xcalloc(1, n);
    allocs = realloc(allocs, (size_t)(nallocs + 1) * sizeof *allocs);
    if (!allocs)
        fail("out of memory");
    allocs[nallocs++] = (struct Alloc){*p, n, current};
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

static int all_idle(const void *unused)
{
    (void)unused;
    for (int i = 0; i < nstreams; i++)
        if (!stream_empty(streams[i]))
            return 0;
    return 1;
}

/* As CUDA's, it waits for the work queued before it (which may use p). */
cudaError_t cudaFree(void *p)
{
    no_capture("cudaFree");
    pthread_mutex_lock(&mu);
    run_until(all_idle, NULL);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].p == p) {
            allocs[i] = allocs[--nallocs];
            break;
        }
    free(p);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* The GPU whose cudaMalloc'd memory holds p, or -1 (host memory). */
static int owner(const void *p)
{
    for (int i = 0; i < nallocs; i++)
        if ((const unsigned char *)p >= allocs[i].p &&
            (const unsigned char *)p < allocs[i].p + allocs[i].n)
            return allocs[i].device;
    return -1;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
    (void)flags;
    *p = xcalloc(1, n);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    pthread_mutex_lock(&mu);
    *total = gpu_memory();
    *free_bytes = *total - gpu_used(current);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* The synchronous calls: the runtime's streams are non-blocking, so
 * cudaMemcpy and cudaMemset wait for none of them and run now. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    (void)kind;
    no_capture("cudaMemcpy");
    pthread_mutex_lock(&mu);
    memmove(dst, src, n);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t n)
{
    no_capture("cudaMemset");
    pthread_mutex_lock(&mu);
    memset(dst, value, n);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

static cudaError_t enqueue_locked(cudaStream_t s, Op op)
{
    pthread_mutex_lock(&mu);
    enqueue(s, op);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    (void)kind;
    pthread_mutex_lock(&mu);
    int to = owner(dst), from = owner(src);
    pthread_mutex_unlock(&mu);
    if (to >= 0 && from >= 0 && to != from && no_peer())
        return cudaErrorPeerAccessNotEnabled;
    return enqueue_locked(s, (Op){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int to, const void *src, int from, size_t n,
                                cudaStream_t s)
{
    if (to < 0 || to >= gpu_count() || from < 0 || from >= gpu_count())
        return cudaErrorInvalidDevice;
    if (to != from && no_peer())
        return cudaErrorPeerAccessNotEnabled;
    return enqueue_locked(s, (Op){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t s)
{
    return enqueue_locked(s, (Op){.kind = OP_SET, .dst = dst, .value = value, .n = n});
}

/* ---- graphs ---- */

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    (void)mode;
    pthread_mutex_lock(&mu);
    if (capturing || s->capture)
        fail("cudaStreamBeginCapture: a capture is already under way");
    capturing = s->capture = xcalloc(1, sizeof *capturing);
    capturing->origin = s;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* Whether stream t's last kept operation records an event that the
 * origin waits for after it: t joined back. */
static int joined(const struct CUgraph_st *g, cudaStream_t t)
{
    int last = -1;
    for (int i = 0; i < g->n; i++)
        if (g->on[i] == t)
            last = i;
    if (last < 0 || g->ops[last].kind != OP_RECORD)
        return 0;
    for (int i = last + 1; i < g->n; i++)
        if (g->on[i] == g->origin && g->ops[i].kind == OP_WAIT && g->ops[i].ev == g->ops[last].ev)
            return 1;
    return 0;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    pthread_mutex_lock(&mu);
    if (!capturing || s != capturing->origin)
        fail("cudaStreamEndCapture: not the stream that began the capture");
    for (int i = 0; i < nstreams; i++) {
        if (streams[i]->capture != capturing)
            continue;
        if (streams[i] != s && !joined(capturing, streams[i]))
            fail("cudaStreamEndCapture: a stream joined to the capture was not joined back "
                 "(cudaErrorStreamCaptureUnjoined)");
        streams[i]->capture = NULL;
    }
    *graph = capturing;
    capturing = NULL;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    (void)flags;
    *exec = xcalloc(1, sizeof **exec);
    (*exec)->g = *graph;   /* the operations are the instance's from here on */
    graph->ops = NULL, graph->on = NULL, graph->n = graph->cap = 0;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    free(graph->ops), free(graph->on), free(graph);
    return cudaSuccess;
}

/* The kept operations queued again in their order; each event recorded
 * anew, each wait for its latest record. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    pthread_mutex_lock(&mu);
    if (capturing)
        fail("cudaGraphLaunch during a capture");
    const struct CUgraph_st *g = &exec->g;
    for (int i = 0; i < g->n; i++) {
        Op op = g->ops[i];
        cudaStream_t t = g->on[i] == g->origin ? s : g->on[i];
        if (op.kind == OP_RECORD) {
            op.gen = ++op.ev->recorded;
            op.ev->capture = NULL;
        } else if (op.kind == OP_WAIT) {
            op.gen = op.ev->recorded;
        }
        enqueue(t, op);
    }
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* ---- kernels ---- */

cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, enum cudaJitOption *jo,
                                void **jv, unsigned int nj, enum cudaLibraryOption *lo,
                                void **lv, unsigned int nl)
{
    (void)code, (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    *lib = xcalloc(1, sizeof **lib);
    return cudaSuccess;
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name)
{
    (void)lib;
    if (strncmp(name, "mprt_k_", 7) != 0)
        return cudaErrorSymbolNotFound;
    struct CUkern_st *f = xcalloc(1, sizeof *f);
    f->name = name;
    f->fn = mprt_emu_kernel(name + 7);
    f->nargs = mprt_emu_kernel_sizes(name + 7, f->sizes);
    if (!f->fn || f->nargs < 0)
        return cudaErrorSymbolNotFound;
    *k = f;
    return cudaSuccess;
}

cudaError_t cudaLibraryGetGlobal(void **p, size_t *bytes, cudaLibrary_t lib, const char *name)
{
    (void)lib;
    if (strcmp(name, "mprt_k_fault") != 0)
        return cudaErrorSymbolNotFound;
    *p = mprt_k_fault;
    *bytes = sizeof mprt_k_fault;
    return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                             cudaStream_t s)
{
    (void)grid, (void)block, (void)shmem;
    const struct CUkern_st *f = func;
    Op op = {.kind = OP_KERNEL, .fn = f->fn};
    size_t total = 0;
    for (int i = 0; i < f->nargs; i++)
        total += (f->sizes[i] + 15) / 16 * 16;
    op.argbuf = xcalloc(1, total);
    for (int i = 0, at = 0; i < f->nargs; i++) {
        op.argv[i] = op.argbuf + at;
        memcpy(op.argv[i], args[i], f->sizes[i]);
        at += (int)((f->sizes[i] + 15) / 16 * 16);
    }
    return enqueue_locked(s, op);
}

/* ---- cuBLAS ---- */

const char *cublasGetStatusString(cublasStatus_t status)
{
    return status == CUBLAS_STATUS_SUCCESS ? "success" : "fakegpu cuBLAS error";
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    *h = xcalloc(1, sizeof **h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    (void)h, (void)mode;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t gemm(cublasHandle_t h, Gemm g)
{
    enqueue_locked(h->stream, (Op){.kind = OP_GEMM, .gemm = g});
    return CUBLAS_STATUS_SUCCESS;
}

/* The GEMMs of cublasGemmEx that cuBLAS runs with float32 compute:
 * float32 operands (a FAST_16BF one checks its inputs, see run_gemm), or
 * bf16 A and B with a bf16 or float32 C, computed in float32. */
static cublasStatus_t gemm_ex(cublasHandle_t h, Gemm g, cudaDataType at, cudaDataType bt,
                              cudaDataType ct, cublasComputeType_t compute)
{
    g.in16 = at == CUDA_R_16BF, g.out16 = ct == CUDA_R_16BF;
    if (at != bt || (at != CUDA_R_32F && at != CUDA_R_16BF) ||
        (ct != CUDA_R_32F && ct != CUDA_R_16BF) || (ct == CUDA_R_16BF && !g.in16))
        fail("cublasGemmEx: types cuBLAS has no float32-compute GEMM for");
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
        compute != CUBLAS_COMPUTE_32F_FAST_16BF)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (g.in16 && compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    g.bf16 = compute == CUBLAS_COMPUTE_32F_FAST_16BF;
    return gemm(h, g);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm_ex(h, (Gemm){ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, 1,
                             *(const float *)alpha, *(const float *)beta, a, b, c, lda, ldb,
                             ldc, 0, 0, 0, 0, 0, 0},
                   at, bt, ct, compute);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *a, cudaDataType at, int lda, long long sa, const void *b,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *c, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm_ex(h, (Gemm){ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, batch,
                             *(const float *)alpha, *(const float *)beta, a, b, c, lda, ldb,
                             ldc, sa, sb, sc, 0, 0, 0},
                   at, bt, ct, compute);
}

/* ---- NVRTC: the kernels are already compiled for the host ---- */

struct _nvrtcProgram {
    int unused;
};

const char *nvrtcGetErrorString(nvrtcResult r)
{
    return r == NVRTC_SUCCESS ? "success" : "fakegpu NVRTC error";
}

nvrtcResult nvrtcVersion(int *major, int *minor)
{
    *major = 0, *minor = 0;
    return NVRTC_SUCCESS;
}

/* Whether text is the file at path as it is, byte for byte. */
static bool same_as_file(const char *text, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    bool same = true;
    int c;
    for (size_t i = 0; same && (c = fgetc(f)) != EOF; i++)
        same = text[i] == (char)c;
    long n = ftell(f);
    fclose(f);
    return same && n >= 0 && strlen(text) == (size_t)n;
}

/* The source must be runtime/kernels.cu and its one header opcodes.h as
 * they are: the host kernels the fake runs were built from those files. */
static bool is_kernels_cu(const char *src, int n, const char *const *headers,
                          const char *const *names)
{
    return src && same_as_file(src, FAKEGPU_KERNELS) && n == 1 && headers && names &&
           strcmp(names[0], "opcodes.h") == 0 && same_as_file(headers[0], FAKEGPU_OPCODES);
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int n,
                               const char *const *headers, const char *const *names)
{
    (void)name;
    if (!is_kernels_cu(src, n, headers, names)) {
        fprintf(stderr, "fakegpu: the program is not %s with the header %s\n", FAKEGPU_KERNELS,
                FAKEGPU_OPCODES);
        return NVRTC_ERROR_INVALID_INPUT;
    }
    *p = xcalloc(1, sizeof **p);
    return NVRTC_SUCCESS;
}

/* $FAKEGPU_NVRTC_LOG: the compilation fails with this log. */
static const char *nvrtc_log(void)
{
    const char *l = getenv("FAKEGPU_NVRTC_LOG");
    return l ? l : "";
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts)
{
    (void)p, (void)n, (void)opts;
    return *nvrtc_log() ? NVRTC_ERROR_COMPILATION : NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *size)
{
    (void)p;
    *size = 8;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *cubin)
{
    (void)p;
    memcpy(cubin, "fakegpu", 8);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    *n = strlen(nvrtc_log()) + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    (void)p;
    strcpy(log, nvrtc_log());
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *p)
{
    free(*p);
    *p = NULL;
    return NVRTC_SUCCESS;
}
