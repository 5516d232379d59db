/* stream.c — CPU devices with the semantics of CUDA streams and events.
 *
 * Each stream is a worker thread running its queue in order: run a stage
 * action for a micro-batch, copy bytes, wait for an event, record an event.
 * The host enqueues a whole step (in an order where every wait names an
 * event recorded earlier in that order) and then waits for every stream to
 * drain. One mutex and one condition variable guard all queues and events:
 * a step has hundreds of operations, not millions.
 *
 * With tracing on, every operation's start and end (seconds since the
 * trainer started) are kept by its label, for --trace and --profile.
 */
#include "mprt.h"

#include <pthread.h>
#include <time.h>

enum { MPRT_OP_RUN, MPRT_OP_COPY, MPRT_OP_WAIT, MPRT_OP_RECORD };

typedef struct MprtOp {
    int kind, mb, ev, label;
    void (*fn)(int mb);
    void *dst;
    const void *src;
    size_t n;
} MprtOp;

typedef struct MprtStream {
    pthread_t thread;
    MprtOp *q;
    int cap, head, tail, busy, index;
} MprtStream;

static pthread_mutex_t mprt_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mprt_cv = PTHREAD_COND_INITIALIZER;
static MprtStream *mprt_streams;
static int mprt_nstreams;
static unsigned char *mprt_events;
static int mprt_nevents;
static int mprt_tracing;               /* record op times by label */
static double *mprt_op_start, *mprt_op_end;
static double mprt_clock0;

static double mprt_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9 - mprt_clock0;
}

static void mprt_execute(const MprtOp *op)
{
    double t0 = mprt_tracing ? mprt_clock() : 0;
    if (op->kind == MPRT_OP_RUN)
        op->fn(op->mb);
    else
        memcpy(op->dst, op->src, op->n);
    if (mprt_tracing && op->label >= 0) {
        mprt_op_start[op->label] = t0;
        mprt_op_end[op->label] = mprt_clock();
    }
}

static void *mprt_stream_main(void *arg)
{
    MprtStream *s = arg;
    pthread_mutex_lock(&mprt_mu);
    for (;;) {
        while (s->head == s->tail)
            pthread_cond_wait(&mprt_cv, &mprt_mu);
        MprtOp op = s->q[s->head % s->cap];
        if (op.kind == MPRT_OP_WAIT) {
            while (!mprt_events[op.ev])
                pthread_cond_wait(&mprt_cv, &mprt_mu);
        } else if (op.kind == MPRT_OP_RECORD) {
            mprt_events[op.ev] = 1;
        } else {
            s->busy = 1;
            pthread_mutex_unlock(&mprt_mu);
            mprt_execute(&op);
            pthread_mutex_lock(&mprt_mu);
            s->busy = 0;
        }
        s->head++;
        pthread_cond_broadcast(&mprt_cv);
    }
    return NULL;
}

/* Starts nstreams worker threads; nops bounds the operations of one step. */
static int mprt_streams_start(int nstreams, int nevents, int nops, char *err, size_t errlen)
{
    mprt_clock0 = 0;
    mprt_clock0 = mprt_clock();
    mprt_streams = calloc((size_t)nstreams, sizeof *mprt_streams);
    mprt_events = calloc((size_t)nevents + 1, 1);
    mprt_op_start = calloc((size_t)nops + 1, sizeof(double));
    mprt_op_end = calloc((size_t)nops + 1, sizeof(double));
    if (!mprt_streams || !mprt_events || !mprt_op_start || !mprt_op_end)
        return mprt_errf(err, errlen, "out of memory starting %d streams", nstreams);
    mprt_nstreams = nstreams;
    mprt_nevents = nevents;
    for (int i = 0; i < nstreams; i++) {
        MprtStream *s = &mprt_streams[i];
        s->cap = 4 * nops + 16;
        s->index = i;
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

static void mprt_enqueue(int stream, MprtOp op)
{
    MprtStream *s = &mprt_streams[stream];
    pthread_mutex_lock(&mprt_mu);
    s->q[s->tail++ % s->cap] = op;
    pthread_cond_broadcast(&mprt_cv);
    pthread_mutex_unlock(&mprt_mu);
}

MPRT_KERNEL void mprt_launch(int stream, void (*fn)(int), int mb, int label)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_RUN, mb, -1, label, fn, NULL, NULL, 0});
}

MPRT_KERNEL void mprt_memcpy_async(int stream, void *dst, const void *src, size_t n, int label)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_COPY, 0, -1, label, NULL, dst, src, n});
}

MPRT_KERNEL void mprt_wait_event(int stream, int ev)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_WAIT, 0, ev, -1, NULL, NULL, NULL, 0});
}

MPRT_KERNEL void mprt_record_event(int stream, int ev)
{
    mprt_enqueue(stream, (MprtOp){MPRT_OP_RECORD, 0, ev, -1, NULL, NULL, NULL, 0});
}

/* Waits until every stream has run everything enqueued, then clears the
 * events for the next step. */
static void mprt_sync(void)
{
    pthread_mutex_lock(&mprt_mu);
    for (int i = 0; i < mprt_nstreams; i++)
        while (mprt_streams[i].head != mprt_streams[i].tail || mprt_streams[i].busy)
            pthread_cond_wait(&mprt_cv, &mprt_mu);
    memset(mprt_events, 0, (size_t)mprt_nevents + 1);
    pthread_mutex_unlock(&mprt_mu);
}

/* ---- the measured timeline ---- */

/* One operation of the step, as the generated program describes it. */
typedef struct MprtOpInfo {
    int stream;            /* device * 3 + (0 compute, 1 send, 2 send-back) */
    const char *name;      /* "forward s0 mb1", "copy x mb1 to s1" */
    int dst_dev;           /* copies: the receiving device; -1 otherwise */
} MprtOpInfo;

/* Writes the last traced step in Chrome trace format, as mpcc --trace
 * writes the predicted one: a process per device, a thread per stream,
 * complete events, flow arrows for copies, a memory counter per device. */
MPRT_KERNEL int mprt_write_trace(const char *path, const MprtOpInfo *ops, int nops,
                                 const char *const *devices, const size_t *arena_bytes,
                                 int ndev, char *err, size_t errlen)
{
    static const char *const kinds[] = {"compute", "send", "send-back"};
    MprtOut out;
    if (mprt_out_open(&out, path, err, errlen) != 0)
        return 1;
    double t0 = 1e300;
    for (int i = 0; i < nops; i++)
        if (mprt_op_start[i] < t0)
            t0 = mprt_op_start[i];
    fprintf(out.fp, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    for (int d = 0; d < ndev; d++) {
        fprintf(out.fp, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":"
                "{\"name\":\"%s\"}},\n", d, devices[d]);
        for (int k = 0; k < 3; k++)
            fprintf(out.fp, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s\"}},\n", d, k, kinds[k]);
        fprintf(out.fp, "{\"name\":\"memory\",\"ph\":\"C\",\"pid\":%d,\"ts\":0,\"args\":"
                "{\"bytes\":%zu}},\n", d, arena_bytes[d]);
    }
    for (int i = 0; i < nops; i++) {
        double ts = (mprt_op_start[i] - t0) * 1e6, te = (mprt_op_end[i] - t0) * 1e6;
        int pid = ops[i].stream / 3, tid = ops[i].stream % 3;
        fprintf(out.fp, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                "\"ts\":%.3f,\"dur\":%.3f},\n", ops[i].name, ops[i].dst_dev < 0 ? "compute" :
                "copy", pid, tid, ts, te - ts);
        if (ops[i].dst_dev >= 0)
            fprintf(out.fp, "{\"name\":\"copy\",\"cat\":\"copy\",\"ph\":\"s\",\"id\":%d,"
                    "\"pid\":%d,\"tid\":%d,\"ts\":%.3f},\n{\"name\":\"copy\",\"cat\":\"copy\","
                    "\"ph\":\"f\",\"bp\":\"e\",\"id\":%d,\"pid\":%d,\"tid\":0,\"ts\":%.3f},\n",
                    i, pid, tid, ts, i, ops[i].dst_dev, te);
    }
    fprintf(out.fp, "{\"name\":\"step\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":0}\n]}\n");
    return mprt_out_commit(&out, err, errlen);
}

/* ---- per-node times (--profile) ---- */

static int mprt_profiling;
static double *mprt_node_seconds;
static long *mprt_node_calls;

/* Around each node of a stage action: its time, when profiling. */
#define MPRT_PROF_BEGIN double mprt_t0_ = mprt_profiling ? mprt_clock() : 0
#define MPRT_PROF_END(k)                                    \
    do {                                                    \
        if (mprt_profiling) {                               \
            mprt_node_seconds[k] += mprt_clock() - mprt_t0_; \
            mprt_node_calls[k]++;                           \
        }                                                   \
    } while (0)

typedef struct MprtProfNode {
    const char *name;      /* the ONNX node (or mpcc's name for a gradient node) */
    const char *phase;     /* "forward", "backward" or "update" */
} MprtProfNode;

/* Mean seconds per call of every node that ran while profiling, as mpcc
 * --measured reads them. */
MPRT_KERNEL int mprt_write_profile(const char *path, const char *model_file,
                                   const MprtProfNode *nodes, int n, char *err, size_t errlen)
{
    MprtOut out;
    if (mprt_out_open(&out, path, err, errlen) != 0)
        return 1;
    fprintf(out.fp, "{\"format\": \"mpcc-profile\", \"model\": ");
    mprt_json_fputs(out.fp, model_file);
    fprintf(out.fp, ",\n \"nodes\": [");
    int first = 1;
    for (int k = 0; k < n; k++) {
        if (!mprt_node_calls[k])
            continue;
        fprintf(out.fp, "%s\n  {\"name\": ", first ? "" : ",");
        mprt_json_fputs(out.fp, nodes[k].name);
        fprintf(out.fp, ", \"phase\": \"%s\", \"seconds\": %.9g, \"calls\": %ld}", nodes[k].phase,
                mprt_node_seconds[k] / (double)mprt_node_calls[k], mprt_node_calls[k]);
        first = 0;
    }
    fprintf(out.fp, "\n]}\n");
    return mprt_out_commit(&out, err, errlen);
}
