/* mixed.c — CPU and CUDA devices in one trainer (--devices=cpu,cuda:0).
 *
 * stream.c drives the CPU devices (a worker thread per stream) and cuda.c
 * the GPUs (the host thread issuing to CUDA streams). In a mixed trainer
 * both are compiled with their entry points renamed, mprt_host_* and
 * mprt_gpu_* (MPRT_HOST_API and MPRT_GPU_API, state.c), and the functions
 * here pick one by the device of the stream, buffer or event.
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

#include <cuda_runtime.h>

static unsigned char *mprt_mx_event_gpu;   /* [nevents + 1]: recorded on a GPU stream */

/* Whether logical device d is a GPU (cuda.c gives a CPU device none). */
static int mprt_mx_gpu(int dev)
{
    return mprt_cu_devs[dev].ordinal >= 0;
}

/* A CPU device's copy: cudaMemcpy when either side is a GPU's arena. */
static void mprt_mx_copy_bytes(void *dst, const void *src, size_t n)
{
    int d = mprt_cu_owner(dst);
    if (d < 0)
        d = mprt_cu_owner(src);
    if (d < 0) {
        memcpy(dst, src, n);
        return;
    }
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
    MPRT_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
}

MPRT_KERNEL void mprt_devices_open(int ndev, const char *const *names)
{
    mprt_gpu_devices_open(ndev, names);
    mprt_host_devices_open(ndev, names);
    mprt_stream_copy = mprt_mx_copy_bytes;
}

MPRT_KERNEL int mprt_streams_start(int nstreams, int nevents, int nops, char *err, size_t errlen)
{
    mprt_mx_event_gpu = calloc((size_t)nevents + 1, 1);
    if (!mprt_mx_event_gpu)
        return mprt_errf(err, errlen, "out of memory starting the streams");
    if (mprt_gpu_streams_start(nstreams, nevents, nops, err, errlen) != 0)
        return -1;
    return mprt_host_streams_start(nstreams, nevents, nops, err, errlen);
}

MPRT_KERNEL void mprt_launch(int stream, void (*fn)(int), int mb, int label)
{
    if (mprt_mx_gpu(stream / 3))
        mprt_gpu_launch(stream, fn, mb, label);
    else
        mprt_host_launch(stream, fn, mb, label);
}

MPRT_KERNEL void mprt_memcpy_async(int stream, void *dst, const void *src, size_t n, int label)
{
    if (mprt_mx_gpu(stream / 3))
        mprt_gpu_memcpy_async(stream, dst, src, n, label);
    else
        mprt_host_memcpy_async(stream, dst, src, n, label);
}

MPRT_KERNEL void mprt_record_event(int stream, int ev)
{
    mprt_mx_event_gpu[ev] = (unsigned char)mprt_mx_gpu(stream / 3);
    if (mprt_mx_event_gpu[ev])
        mprt_gpu_record_event(stream, ev);
    else
        mprt_host_record_event(stream, ev);
}

/* Run by a CPU stream's worker: waits for GPU event ev. */
static void mprt_mx_wait_gpu_event(int ev)
{
    MPRT_CUDA(cudaEventSynchronize(mprt_cu_events[ev]));
}

MPRT_KERNEL void mprt_wait_event(int stream, int ev)
{
    int gpu_waits = mprt_mx_gpu(stream / 3), gpu_event = mprt_mx_event_gpu[ev];
    if (gpu_waits && gpu_event)
        mprt_gpu_wait_event(stream, ev);
    else if (gpu_waits)
        mprt_host_wait(ev);
    else if (gpu_event)
        mprt_host_launch(stream, mprt_mx_wait_gpu_event, ev, -1);
    else
        mprt_host_wait_event(stream, ev);
}

MPRT_KERNEL void mprt_sync(void)
{
    mprt_host_sync();
    mprt_gpu_sync();
}

/* ---- device memory ---- */

MPRT_KERNEL void mprt_dev_scratch(int dev, void *p, size_t n)
{
    if (mprt_mx_gpu(dev))
        mprt_gpu_dev_scratch(dev, p, n);
    else
        mprt_host_dev_scratch(dev, p, n);
}

MPRT_KERNEL unsigned char *mprt_arena_alloc(int dev, const char *name, size_t n)
{
    if (mprt_mx_gpu(dev))
        return mprt_gpu_arena_alloc(dev, name, n);
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

MPRT_KERNEL void mprt_arena_free(int dev, unsigned char *p)
{
    if (mprt_mx_gpu(dev))
        mprt_gpu_arena_free(dev, p);
    else
        cudaFreeHost(p);
}

MPRT_KERNEL void mprt_dev_write(int dev, void *dst, const void *src, size_t n)
{
    if (mprt_mx_gpu(dev))
        mprt_gpu_dev_write(dev, dst, src, n);
    else
        mprt_host_dev_write(dev, dst, src, n);
}

MPRT_KERNEL const void *mprt_dev_read(int dev, const void *src, size_t n, int k)
{
    return mprt_mx_gpu(dev) ? mprt_gpu_dev_read(dev, src, n, k)
                            : mprt_host_dev_read(dev, src, n, k);
}

MPRT_KERNEL const void *mprt_dev_hold(int dev, const void *src, size_t n)
{
    return mprt_mx_gpu(dev) ? mprt_gpu_dev_hold(dev, src, n) : mprt_host_dev_hold(dev, src, n);
}

MPRT_KERNEL void mprt_dev_unhold(const void *host, const void *src)
{
    if (mprt_cu_owner(src) >= 0)
        mprt_gpu_dev_unhold(host, src);
    else
        mprt_host_dev_unhold(host, src);
}

MPRT_KERNEL void *mprt_dev_stage(int dev, void *dst, size_t n)
{
    return mprt_mx_gpu(dev) ? mprt_gpu_dev_stage(dev, dst, n) : mprt_host_dev_stage(dev, dst, n);
}

MPRT_KERNEL void mprt_dev_commit(int dev, void *dst, const void *staged, size_t n)
{
    if (mprt_mx_gpu(dev))
        mprt_gpu_dev_commit(dev, dst, staged, n);
    else
        mprt_host_dev_commit(dev, dst, staged, n);
}

MPRT_KERNEL void mprt_dev_zero(int dev, void *dst, size_t n)
{
    if (mprt_mx_gpu(dev))
        mprt_gpu_dev_zero(dev, dst, n);
    else
        mprt_host_dev_zero(dev, dst, n);
}

/* Outside the step: cudaMemcpy takes any pair of arenas, pinned or not. */
MPRT_KERNEL void mprt_dev_copy(void *dst, const void *src, size_t n)
{
    mprt_gpu_dev_copy(dst, src, n);
}

MPRT_KERNEL void mprt_keep_loss(int mb, const float *loss)
{
    if (mprt_cu_owner(loss) >= 0)
        mprt_gpu_keep_loss(mb, loss);
    else
        mprt_host_keep_loss(mb, loss);
}

/* cuda.c's: pinned, so that a GPU's copy of its loss is asynchronous. */
MPRT_KERNEL void mprt_losses_alloc(int n)
{
    mprt_gpu_losses_alloc(n);
}

/* cuda.c's: pinned and mapped, so that a GPU writes its entries in place. */
MPRT_KERNEL void mprt_norm_alloc(int n)
{
    mprt_gpu_norm_alloc(n);
}
