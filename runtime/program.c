/* program.c — what the generated programs share: the table of their
 * buffers, the device arenas, errors, and loading weights.
 *
 * The trainer (train.c) and the forward-only program (infer.c) both
 * describe their model as buffers at static offsets in one arena per
 * device, through the devices' entry points below; micro-batch mb of a buffer lives in slot mb % slots. Errors are
 * one line on standard error, `PROGRAM: error: ...`, and exit status 1.
 */
#include "mprt.h"
#include "program.h"

/* The devices' entry points that the model calls, each through the
 * program's table (program.h); the runtime calls mprt_ops itself. */
/* With several replicas in the process (state.c), the calling thread's
 * copy: its streams, events and losses come after the copies' before it;
 * only the first copy's operations are timed (--trace, --profile). */
static int mprt_ev(int ev) { return mprt_copy_of_thread() * mprt_replica_events + ev; }
MPRT_KERNEL int mprt_dev_here(int dev) { return dev >= mprt_dev_lo && dev < mprt_dev_hi; }
static int mprt_stream_here(int stream) { return stream / MPRT_STREAMS >= mprt_dev_lo && stream / MPRT_STREAMS < mprt_dev_hi; }

MPRT_KERNEL void mprt_sync(void) { mprt_ops->sync(); }
MPRT_KERNEL void mprt_dev_write(int dev, void *dst, const void *src, size_t n) { mprt_ops->dev_write(mprt_dev_base + dev, dst, src, n); }
MPRT_KERNEL void mprt_dev_zero(int dev, void *dst, size_t n) { mprt_ops->dev_zero(mprt_dev_base + dev, dst, n); }
MPRT_KERNEL void mprt_dev_copy(void *dst, const void *src, size_t n) { mprt_ops->dev_copy(dst, src, n); }
MPRT_KERNEL double *mprt_norms_here(void) { return mprt_norm_sq + (size_t)mprt_copy_of_thread() * (size_t)mprt_replica_norms; }
MPRT_KERNEL void mprt_keep_loss(int mb, const float *loss) { mprt_ops->keep_loss(mprt_copy_of_thread() * mprt_replica_mbs + mb, loss); }

MPRT_GLOBAL unsigned char **mprt_arenas;   /* one per device */
MPRT_GLOBAL unsigned char **mprt_host_arenas;   /* one per device: what is offloaded */
static const char *mprt_program = "train";   /* the program's name in errors */
static int mprt_rank_tag = -1;   /* across processes (comm.c): the rank errors name */

static unsigned char *mprt_slot(const MprtBuffer *b, int mb)
{
    unsigned char *arena = (b->host ? mprt_host_arenas : mprt_arenas)[mprt_dev_base + b->dev];
    return arena + b->offset + (size_t)(mb % b->slots) * b->stride;
}

static _Noreturn void mprt_die(const char *fmt, ...) MPRT_PRINTF(1, 2);
static _Noreturn void mprt_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (mprt_rank_tag >= 0)
        fprintf(stderr, "%s: rank %d: error: ", mprt_program, mprt_rank_tag);
    else
        fprintf(stderr, "%s: error: ", mprt_program);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Replicas in one process whose steps one host thread issues (a device
 * kind with copies_sum: GPUs): each copy's run_step only lists its
 * operations here (mprt_deferring), and mprt_issue_in_turn issues them,
 * operation k of every copy before operation k + 1 of any. So when a
 * copy's bucket sum is issued, every copy's gradients it adds, and their
 * events, have been (cuda.c's mprt_cu_copies_sum). */
enum { MPRT_DO_LAUNCH, MPRT_DO_COPY, MPRT_DO_WAIT, MPRT_DO_RECORD };
typedef struct MprtDeferred {
    int kind, stream, mb, label, ev;
    void (*fn)(int);
    void *dst;
    const void *src;
    size_t n;
} MprtDeferred;
typedef struct MprtDeferredList {
    MprtDeferred *op;
    int n, cap;
} MprtDeferredList;
static MprtDeferredList *mprt_deferred;   /* [replicas here] */
MPRT_GLOBAL int mprt_deferring;

static void mprt_do(const MprtDeferred *d)
{
    if (d->kind == MPRT_DO_LAUNCH)
        mprt_ops->launch(d->stream, d->fn, d->mb, d->label);
    else if (d->kind == MPRT_DO_COPY)
        mprt_ops->memcpy_async(d->stream, d->dst, d->src, d->n, d->label);
    else if (d->kind == MPRT_DO_WAIT)
        mprt_ops->wait_event(d->stream, d->ev);
    else
        mprt_ops->record_event(d->stream, d->ev);
}

/* An operation of the calling thread's copy: issued now, or listed. */
static void mprt_issue(MprtDeferred d)
{
    if (!mprt_deferring) {
        mprt_do(&d);
        return;
    }
    if (!mprt_deferred &&
        !(mprt_deferred = calloc((size_t)mprt_replicas_here, sizeof *mprt_deferred)))
        mprt_die("out of memory");
    MprtDeferredList *l = &mprt_deferred[mprt_copy_of_thread()];
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        if (!(l->op = realloc(l->op, (size_t)l->cap * sizeof *l->op)))
            mprt_die("out of memory");
    }
    l->op[l->n++] = d;
}

/* Every copy's listed operations, in turn (each copy's step is the same
 * program, so the lists are as long); the lists are then empty. */
MPRT_KERNEL void mprt_issue_in_turn(void)
{
    int RL = mprt_replicas_here;
    for (int c = 1; c < RL; c++)
        if (mprt_deferred[c].n != mprt_deferred[0].n)
            mprt_die("the replicas' steps listed %d and %d operations: a fault of mpcc",
                     mprt_deferred[0].n, mprt_deferred[c].n);
    for (int k = 0; k < mprt_deferred[0].n; k++)
        for (int c = 0; c < RL; c++) {
            mprt_dev_base = c * mprt_replica_devs;   /* the launched functions' copy */
            mprt_do(&mprt_deferred[c].op[k]);
        }
    mprt_dev_base = 0;
    for (int c = 0; c < RL; c++)
        mprt_deferred[c].n = 0;
}

/* The calling thread's copy's stream (state.c), and the label that --trace
 * times: the first copy's operations only. */
static int mprt_copy_stream(int stream) { return MPRT_STREAMS * mprt_dev_base + stream; }
static int mprt_copy_label(int label) { return mprt_dev_base ? -1 : label; }

MPRT_KERNEL void mprt_launch(int stream, void (*fn)(int), int mb, int label)
{
    if (mprt_stream_here(stream))
        mprt_issue((MprtDeferred){.kind = MPRT_DO_LAUNCH, .stream = mprt_copy_stream(stream),
                                  .fn = fn, .mb = mb, .label = mprt_copy_label(label)});
}

MPRT_KERNEL void mprt_memcpy_async(int stream, void *dst, const void *src, size_t n, int label)
{
    if (mprt_stream_here(stream))
        mprt_issue((MprtDeferred){.kind = MPRT_DO_COPY, .stream = mprt_copy_stream(stream),
                                  .dst = dst, .src = src, .n = n, .label = mprt_copy_label(label)});
}

MPRT_KERNEL void mprt_wait_event(int stream, int ev)
{
    if (mprt_stream_here(stream))
        mprt_issue((MprtDeferred){.kind = MPRT_DO_WAIT, .stream = mprt_copy_stream(stream),
                                  .ev = mprt_ev(ev)});
}

MPRT_KERNEL void mprt_record_event(int stream, int ev)
{
    if (mprt_stream_here(stream))
        mprt_issue((MprtDeferred){.kind = MPRT_DO_RECORD, .stream = mprt_copy_stream(stream),
                                  .ev = mprt_ev(ev)});
}

/* A shape as numpy prints it: (2, 3), (5,), (). */
static void mprt_shape_str(int rank, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, rank == 1 ? ",)" : ")");
}

/* The buffers of the kinds in the mask `kinds` (1 << MPRT_PARAM, ...)
 * from a safetensors file, each checked against its buffer; *step from the
 * file's metadata when step is not NULL. */
static void mprt_load_tensors(const MprtBuffer *bufs, int nbufs, const char *model_file,
                              const char *path, int kinds, long *step)
{
    char err[512];
    MprtStFile f;
    if (mprt_st_open(path, &f, err, sizeof err) != 0)
        mprt_die("%s", err);
    for (int i = 0; i < nbufs; i++) {
        const MprtBuffer *b = &bufs[i];
        if (!(kinds & 1 << b->kind))
            continue;
        const MprtStTensor *t = mprt_st_find(&f, b->name);
        if (!t && b->kind == MPRT_CONST)
            mprt_die("%s: has no tensor '%s', a constant of the model; the program reads it "
                     "from the weights file mpcc wrote beside it", path, b->name);
        if (!t)
            mprt_die("%s: has no tensor '%s'; is it a checkpoint of this model (%s)?", path,
                     b->name, model_file);
        if (t->dtype != b->dtype || t->nbytes != b->nbytes || t->rank != b->rank ||
            memcmp(t->shape, b->shape, sizeof(int64_t) * (size_t)b->rank) != 0) {
            char want[128], got[128];
            mprt_shape_str(b->rank, b->shape, want, sizeof want);
            mprt_shape_str(t->rank, t->shape, got, sizeof got);
            mprt_die("%s: tensor '%s' is %s %s, the model needs %s %s", path, b->name,
                     mprt_dtype_name(t->dtype), got, mprt_dtype_name(b->dtype), want);
        }
        if (b->shard > 1) {   /* --zero=1: this replica's share (comm.c) */
            long lo, k = mprt_shard((long)(b->nbytes / sizeof(float)), &lo);
            mprt_dev_write(b->dev, mprt_slot(b, 0), (const float *)t->data + lo,
                           (size_t)k * sizeof(float));
        } else if (b->host) {   /* an offloaded weight: host memory */
            memcpy(mprt_slot(b, 0), t->data, b->nbytes);
        } else {
            mprt_dev_write(b->dev, mprt_slot(b, 0), t->data, b->nbytes);
        }
    }
    if (step) {
        const char *s = mprt_st_meta(&f, "step");
        *step = s ? atol(s) : 0;
    }
    mprt_st_close(&f);
}

/* The default weights file: in the current folder, else next to the program. */
static const char *mprt_default_weights(const char *name)
{
    static char path[4096];
    if (access(name, R_OK) == 0)
        return name;
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0)
        return name;
    path[n] = 0;
    char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) + strlen(name) + 2 > sizeof path)
        return name;
    strcpy(slash + 1, name);
    return access(path, R_OK) == 0 ? path : name;
}

/* The constants too large for the C file, from the program's own weights
 * file (not --weights, which may be a checkpoint). */
static void mprt_load_consts(const MprtBuffer *bufs, int nbufs, const char *model_file,
                             const char *weights_file)
{
    for (int i = 0; i < nbufs; i++)
        if (bufs[i].kind == MPRT_CONST) {
            mprt_load_tensors(bufs, nbufs, model_file, mprt_default_weights(weights_file),
                              1 << MPRT_CONST, NULL);
            return;
        }
}
