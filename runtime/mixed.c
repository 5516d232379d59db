/* mixed.c — CPU and CUDA devices in one trainer (--devices=cpu,cuda:0).
 *
 * stream.c drives the CPU devices (a worker thread per stream, its table
 * mprt_cpu_ops) and cuda.c the GPUs (the host thread issuing to CUDA
 * streams, mprt_gpu_ops). The program's table, mprt_ops, is this file's
 * third one: each entry picks the table of the device that owns the
 * stream, buffer or event, or does what only a mix of the two needs.
 *
 * Between the two kinds:
 * - A CPU device's arena is pinned host memory (cudaHostAlloc), so every
 *   copy between a CPU stage and a GPU stage is one DMA transfer, with no
 *   bounce through a pageable buffer.
 * - A copy is issued on the sender's copy stream: a GPU's is an
 *   asynchronous cudaMemcpyAsync into the pinned arena; a CPU device's
 *   worker thread runs a cudaMemcpy out of it.
 * - A CPU stream waiting for a GPU's event: its worker thread blocks in
 *   cudaEventSynchronize. The host issues the step in a topological order
 *   of the schedule, so the event is recorded before the wait is queued.
 * - A GPU stream waiting for a CPU device's event: CUDA's runtime has no
 *   way to make a stream wait for the host, so the host thread waits for
 *   the CPU device to record it before it issues anything more. What the
 *   GPUs were already given keeps running meanwhile.
 */
#include "mprt.h"
#include "program.h"

#include <cuda_runtime.h>

static unsigned char *mprt_mx_event_gpu;   /* [nevents + 1]: recorded on a GPU stream */

/* Whether logical device d is a GPU (cuda.c gives a CPU device none). */
static int mprt_mx_gpu(int dev)
{
    return mprt_cu_devs[dev].ordinal >= 0;
}

/* The table of device d's kind. */
static const MprtDeviceOps *mprt_mx_dev(int dev)
{
    return mprt_mx_gpu(dev) ? &mprt_gpu_ops : &mprt_cpu_ops;
}

/* The table of the kind whose memory holds p: a GPU's arena, else the host's. */
static const MprtDeviceOps *mprt_mx_owner(const void *p)
{
    return mprt_cu_owner(p) >= 0 ? &mprt_gpu_ops : &mprt_cpu_ops;
}

/* A CPU device's copy: cudaMemcpy when either side is a GPU's arena. */
static void *mprt_mx_copy_bytes(void *dst, const void *src, size_t n)
{
    int d = mprt_cu_owner(dst);
    if (d < 0)
        d = mprt_cu_owner(src);
    if (d < 0)
        return memcpy(dst, src, n);
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
    MPRT_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
    return dst;
}

static int mprt_mx_dev_threads(int dev)
{
    return mprt_mx_gpu(dev) ? 0 : mprt_cpu_ops.dev_threads(dev);
}

static void mprt_mx_devices_open(int ndev, const char *const *names, const double *shares)
{
    mprt_gpu_ops.devices_open(ndev, names, shares);
    mprt_cpu_ops.devices_open(ndev, names, shares);
    mprt_stream_copy = mprt_mx_copy_bytes;
}

static int mprt_mx_streams_start(int nstreams, int nevents, int nops, char *err, size_t errlen)
{
    mprt_mx_event_gpu = calloc((size_t)nevents + 1, 1);
    if (!mprt_mx_event_gpu)
        return mprt_errf(err, errlen, "out of memory starting the streams");
    if (mprt_gpu_ops.streams_start(nstreams, nevents, nops, err, errlen) != 0)
        return -1;
    return mprt_cpu_ops.streams_start(nstreams, nevents, nops, err, errlen);
}

static void mprt_mx_launch(int stream, void (*fn)(int), int mb, int label)
{
    mprt_mx_dev(stream / MPRT_STREAMS)->launch(stream, fn, mb, label);
}

static void mprt_mx_memcpy_async(int stream, void *dst, const void *src, size_t n, int label)
{
    mprt_mx_dev(stream / MPRT_STREAMS)->memcpy_async(stream, dst, src, n, label);
}

static void mprt_mx_record_event(int stream, int ev)
{
    mprt_mx_event_gpu[ev] = (unsigned char)mprt_mx_gpu(stream / MPRT_STREAMS);
    mprt_mx_dev(stream / MPRT_STREAMS)->record_event(stream, ev);
}

/* Run by a CPU stream's worker: waits for GPU event ev. */
static void mprt_mx_wait_gpu_event(int ev)
{
    MPRT_CUDA(cudaEventSynchronize(mprt_cu_events[ev]));
}

static void mprt_mx_wait_event(int stream, int ev)
{
    int gpu_waits = mprt_mx_gpu(stream / MPRT_STREAMS), gpu_event = mprt_mx_event_gpu[ev];
    if (gpu_waits == gpu_event)
        mprt_mx_dev(stream / MPRT_STREAMS)->wait_event(stream, ev);
    else if (gpu_waits)
        mprt_host_wait(ev);
    else
        mprt_cpu_ops.launch(stream, mprt_mx_wait_gpu_event, ev, -1);
}

static void mprt_mx_sync(void)
{
    mprt_cpu_ops.sync();
    mprt_gpu_ops.sync();
}

/* ---- device memory ---- */

static size_t mprt_mx_dev_extra(int dev)
{
    return mprt_mx_gpu(dev) ? mprt_gpu_ops.dev_extra(dev) : 0;
}

static void mprt_mx_dev_scratch(int dev, void *p, size_t n)
{
    mprt_mx_dev(dev)->dev_scratch(dev, p, n);
}

static void mprt_mx_dev_slots(int dev, void *p, size_t n)
{
    mprt_mx_dev(dev)->dev_slots(dev, p, n);   /* only a GPU has slots (plan.c) */
}

/* A CPU device's arena is pinned: a copy to or from a GPU is one DMA. */
static unsigned char *mprt_mx_arena_alloc(int dev, const char *name, size_t n)
{
    if (mprt_mx_gpu(dev))
        return mprt_gpu_ops.arena_alloc(dev, name, n);
    void *p = NULL;
    if (cudaHostAlloc(&p, n ? n : 1, cudaHostAllocPortable) != cudaSuccess) {
        fprintf(stderr, "train: error: out of pinned host memory: %s needs %zu bytes (the "
                "memory plan's peak); try mpcc --recompute=auto, more devices or a smaller "
                "-batch\n", name, n);
        exit(1);
    }
    memset(p, 0, n ? n : 1);
    return p;
}

static void mprt_mx_arena_free(int dev, unsigned char *p)
{
    if (mprt_mx_gpu(dev))
        mprt_gpu_ops.arena_free(dev, p);
    else
        cudaFreeHost(p);
}

static unsigned char *mprt_mx_host_alloc(int dev, const char *name, size_t n)
{
    return mprt_mx_dev(dev)->host_alloc(dev, name, n);
}

static void mprt_mx_host_free(int dev, unsigned char *p)
{
    mprt_mx_dev(dev)->host_free(dev, p);
}

static void mprt_mx_dev_write(int dev, void *dst, const void *src, size_t n)
{
    mprt_mx_dev(dev)->dev_write(dev, dst, src, n);
}

static const void *mprt_mx_dev_read(int dev, const void *src, size_t n, int k)
{
    return mprt_mx_dev(dev)->dev_read(dev, src, n, k);
}

static const void *mprt_mx_dev_hold(int dev, const void *src, size_t n)
{
    return mprt_mx_dev(dev)->dev_hold(dev, src, n);
}

static void mprt_mx_dev_unhold(const void *host, const void *src)
{
    mprt_mx_owner(src)->dev_unhold(host, src);
}

static void *mprt_mx_dev_stage(int dev, void *dst, size_t n)
{
    return mprt_mx_dev(dev)->dev_stage(dev, dst, n);
}

static void mprt_mx_dev_commit(int dev, void *dst, const void *staged, size_t n)
{
    mprt_mx_dev(dev)->dev_commit(dev, dst, staged, n);
}

static void mprt_mx_dev_zero(int dev, void *dst, size_t n)
{
    mprt_mx_dev(dev)->dev_zero(dev, dst, n);
}

static void mprt_mx_keep_loss(int mb, const float *loss)
{
    mprt_mx_owner(loss)->keep_loss(mb, loss);
}

/* cuda.c's, for the whole program: its dev_copy is a cudaMemcpy, which
 * takes any pair of arenas, pinned or not; its losses are pinned, so that
 * a GPU's copy of its loss is asynchronous; its norms pinned and mapped,
 * so that a GPU writes its entries in place. */
MPRT_GLOBAL const MprtDeviceOps mprt_mixed_ops = {
    .launch = mprt_mx_launch, .memcpy_async = mprt_mx_memcpy_async,
    .wait_event = mprt_mx_wait_event, .record_event = mprt_mx_record_event,
    .dev_scratch = mprt_mx_dev_scratch, .dev_zero = mprt_mx_dev_zero,
    .dev_slots = mprt_mx_dev_slots,
    .arena_alloc = mprt_mx_arena_alloc, .arena_free = mprt_mx_arena_free,
    .host_alloc = mprt_mx_host_alloc, .host_free = mprt_mx_host_free,
    .dev_write = mprt_mx_dev_write, .dev_read = mprt_mx_dev_read, .dev_hold = mprt_mx_dev_hold,
    .dev_unhold = mprt_mx_dev_unhold, .dev_stage = mprt_mx_dev_stage,
    .dev_commit = mprt_mx_dev_commit, .keep_loss = mprt_mx_keep_loss,
    .devices_open = mprt_mx_devices_open, .streams_start = mprt_mx_streams_start,
    .sync = mprt_mx_sync, .losses_alloc = mprt_gpu_losses_alloc, .norm_alloc = mprt_gpu_norm_alloc,
    .dev_copy = mprt_gpu_dev_copy,
    .dev_threads = mprt_mx_dev_threads, .dev_extra = mprt_mx_dev_extra,
};

MPRT_GLOBAL const MprtDeviceOps *mprt_ops = &mprt_mixed_ops;
