/* nccl.c — the gradient sums of CUDA trainers across processes (mpcc
 * -gpus N --nodes=K): each process holds one replica on its N GPUs, and
 * device d's gradients are summed with device d's of every other process
 * by NCCL all-reduces.
 *
 * - One communicator per device, made at start-up: rank 0 asks NCCL for
 *   a unique id, MPI broadcasts it, and every process joins with its rank
 *   (ncclCommInitRank), device after device in the same order.
 * - A bucket's sum is an operation of the step on its device's
 *   communication stream (the plan's, as on CPU devices): it waits for
 *   the event of the stage's last gradient action, sums each gradient of
 *   the bucket in place in one NCCL group, and records the event the
 *   stage's update waits for. The device's compute stream and the other
 *   devices' go on meanwhile.
 * - Every process issues the same sums in the same order (the step is one
 *   program), so the calls on each communicator match; the communicators
 *   of distinct devices never wait on each other.
 * - NCCL's order of the sum is its own. Every rank gets the same bits
 *   from one all-reduce, so the replicas stay equal (--check-replicas),
 *   but the sums are not the CPU trainer's tree, bit for bit.
 *
 * Built without MPRT_NCCL the file is empty: comm.c's sums are MPI's.
 */
#include "mprt.h"
#include "train.h"

#ifdef MPRT_NCCL
#include <mpi.h>
#include <nccl.h>

typedef struct MprtNccl {
    ncclComm_t comm;          /* this device with the same device of every other process */
} MprtNccl;
static MprtNccl *mprt_nccl;   /* [the devices of this process] */

#define MPRT_NCCL_CALL(call)                                           \
    do {                                                               \
        ncclResult_t e_ = (call);                                      \
        if (e_ != ncclSuccess)                                         \
            mprt_cu_call_failed(1, #call, ncclGetErrorString(e_));     \
    } while (0)

/* After the devices are open: a communicator per device, over every process. */
static void mprt_nccl_start(void)
{
    mprt_nccl = calloc((size_t)mprt_cu_ndev, sizeof *mprt_nccl);
    if (!mprt_nccl)
        mprt_die("out of memory");
    for (int d = 0; d < mprt_cu_ndev; d++) {
        MprtNccl *c = &mprt_nccl[d];
        ncclUniqueId id;
        if (mprt_rank == 0)
            MPRT_NCCL_CALL(ncclGetUniqueId(&id));
        if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            mprt_die("broadcasting NCCL's unique id (MPI_Bcast) failed");
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
        MPRT_NCCL_CALL(ncclCommInitRank(&c->comm, mprt_ranks, id, mprt_rank));
    }
}

/* The n gradients of a bucket of the device being issued (g[i], len[i]
 * floats), summed over the processes in place, on the stream its sum is
 * issued to (the device's communication stream: cuda.c's launch). */
static void mprt_nccl_sum(int n, float *const *g, const long *len)
{
    MprtNccl *c = &mprt_nccl[mprt_cu - mprt_cu_devs];
    MPRT_NCCL_CALL(ncclGroupStart());
    for (int i = 0; i < n; i++)
        MPRT_NCCL_CALL(ncclAllReduce(g[i], g[i], (size_t)len[i], ncclFloat, ncclSum, c->comm,
                                     mprt_cu->compute));
    MPRT_NCCL_CALL(ncclGroupEnd());
}

/* --zero=1: every rank's share (mprt_share_lo) of each of n tensors, in
 * one group: summed to the rank whose share it is (ncclReduce: a
 * bucket's reduce-scatter, the shares differing by an element, which
 * ncclReduceScatter's may not), or sent from it to the others
 * (ncclBroadcast: the all-gather of the updated weights). */
static void mprt_nccl_shares(int n, float *const *t, const long *len, int reduce)
{
    MprtNccl *c = &mprt_nccl[mprt_cu - mprt_cu_devs];
    MPRT_NCCL_CALL(ncclGroupStart());
    for (int i = 0; i < n; i++)
        for (int r = 0; r < mprt_ranks; r++) {
            long lo = mprt_share_lo(len[i], r, mprt_ranks);
            size_t k = (size_t)(mprt_share_lo(len[i], r + 1, mprt_ranks) - lo);
            if (k > 0 && reduce)
                MPRT_NCCL_CALL(ncclReduce(t[i] + lo, t[i] + lo, k, ncclFloat, ncclSum, r,
                                          c->comm, mprt_cu->compute));
            else if (k > 0)
                MPRT_NCCL_CALL(ncclBroadcast(t[i] + lo, t[i] + lo, k, ncclFloat, r, c->comm,
                                             mprt_cu->compute));
        }
    MPRT_NCCL_CALL(ncclGroupEnd());
}

/* At the end, after the last step's streams are drained (the streams and
 * events go with the process, as cuda.c's do). */
static void mprt_nccl_end(void)
{
    if (!mprt_nccl)
        return;
    for (int d = 0; d < mprt_cu_ndev; d++) {
        MprtNccl *c = &mprt_nccl[d];
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
        MPRT_NCCL_CALL(ncclCommDestroy(c->comm));
    }
    free(mprt_nccl);
    mprt_nccl = NULL;
}

#endif
