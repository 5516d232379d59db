/* nccl.c — CUDA trainers across processes over NCCL: the gradient sums
 * of replicas (mpcc -gpus N --nodes=K: each process holds one replica on
 * its N GPUs, and device d's gradients are summed with device d's of
 * every other process by NCCL all-reduces), and the copies of one
 * pipeline across processes (--data-parallel=1, below).
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

/* A pipeline across processes: a communicator of two ranks for each pair
 * of streams whose copies cross (the model's links), rank 0 the lower
 * stream's. Each stream takes its sends and receives in the step's order
 * and nothing else uses the communicator, so the calls on it match, and
 * a send that waits for its receive (NCCL may) waits only as the plan's
 * check (mpcc's verify_nodes.c) allows. */
typedef struct MprtLink {
    int stream, peer;         /* this process's stream, the other's */
    ncclComm_t comm;
} MprtLink;
static MprtLink *mprt_links;
static int mprt_nlinks;

#define MPRT_NCCL_CALL(call)                                           \
    do {                                                               \
        ncclResult_t e_ = (call);                                      \
        if (e_ != ncclSuccess)                                         \
            mprt_cu_call_failed(1, #call, ncclGetErrorString(e_));     \
    } while (0)

/* The communicators of the copies between processes, made at start-up in
 * the model's order of its links (each process joins those of its
 * streams; a pair's two processes meet in the same order, so no join
 * waits on one that waits for it). rank_of gives the process of a device
 * in `world`, where the lower stream's rank hands the unique id over. */
static void mprt_nccl_links(const MprtModel *m, MPI_Comm world, int (*rank_of)(int dev))
{
    mprt_links = calloc((size_t)m->nlinks + 1, sizeof *mprt_links);
    if (!mprt_links)
        mprt_die("out of memory");
    for (int k = 0; k < m->nlinks; k++) {
        int a = m->links[2 * k], b = m->links[2 * k + 1], lo = a < b ? a : b, hi = a ^ b ^ lo;
        int mine = mprt_stream_here(lo) ? lo : mprt_stream_here(hi) ? hi : -1;
        if (mine < 0)
            continue;
        int peer = mine == lo ? hi : lo, other = rank_of(peer / MPRT_STREAMS);
        ncclUniqueId id;
        if (mine == lo) {
            MPRT_NCCL_CALL(ncclGetUniqueId(&id));
            if (MPI_Send(&id, (int)sizeof id, MPI_BYTE, other, k, world) != MPI_SUCCESS)
                mprt_die("handing NCCL's unique id to another process (MPI_Send) failed");
        } else if (MPI_Recv(&id, (int)sizeof id, MPI_BYTE, other, k, world, MPI_STATUS_IGNORE) !=
                   MPI_SUCCESS) {
            mprt_die("taking NCCL's unique id from another process (MPI_Recv) failed");
        }
        MprtLink *l = &mprt_links[mprt_nlinks++];
        l->stream = mine, l->peer = peer;
        mprt_cu_use(mine / MPRT_STREAMS);
        MPRT_NCCL_CALL(ncclCommInitRank(&l->comm, 2, id, mine == lo ? 0 : 1));
    }
}

/* A copy between processes, on this process's side: n bytes sent from
 * (or received into) buf on stream `stream`, to (from) device dev's
 * stream of the same kind, as the step issues it (comm.c's mprt_send). */
static void mprt_nccl_p2p(int stream, void *buf, size_t n, int dev, int label, int send)
{
    int peer = dev * MPRT_STREAMS + stream % MPRT_STREAMS;
    MprtLink *l = mprt_links;
    while (l < mprt_links + mprt_nlinks && !(l->stream == stream && l->peer == peer))
        l++;
    if (l == mprt_links + mprt_nlinks)
        mprt_die("a copy between processes, operation %d, on a pair of streams the model "
                 "does not list (its links): a fault of mpcc", label);
    mprt_cu_trace_mark(stream, label, 0);
    mprt_cu_use(stream / MPRT_STREAMS);
    int other = stream < peer ? 1 : 0;
    if (send)
        MPRT_NCCL_CALL(ncclSend(buf, n, ncclUint8, other, l->comm, mprt_cu_streams[stream]));
    else
        MPRT_NCCL_CALL(ncclRecv(buf, n, ncclUint8, other, l->comm, mprt_cu_streams[stream]));
    mprt_cu_trace_mark(stream, label, 1);
}

/* After the devices are open: a communicator per device of this process,
 * over the processes that hold the same device of every replica (`same`,
 * this process's rank in it mprt_rank / P, P the processes of one
 * replica: 1, or more where each replica is a pipeline across them). */
static void mprt_nccl_start(int P, MPI_Comm same)
{
    mprt_nccl = calloc((size_t)mprt_cu_ndev, sizeof *mprt_nccl);
    if (!mprt_nccl)
        mprt_die("out of memory");
    for (int d = 0; d < mprt_cu_ndev; d++) {
        MprtNccl *c = &mprt_nccl[d];
        ncclUniqueId id;
        if (mprt_cu_devs[d].away)
            continue;
        if (mprt_rank / P == 0)
            MPRT_NCCL_CALL(ncclGetUniqueId(&id));
        if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, same) != MPI_SUCCESS)
            mprt_die("broadcasting NCCL's unique id (MPI_Bcast) failed");
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
        MPRT_NCCL_CALL(ncclCommInitRank(&c->comm, mprt_ranks / P, id, mprt_rank / P));
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
    for (int k = 0; k < mprt_nlinks; k++)
        MPRT_NCCL_CALL(ncclCommDestroy(mprt_links[k].comm));
    free(mprt_links);
    mprt_links = NULL, mprt_nlinks = 0;
    if (!mprt_nccl)
        return;
    for (int d = 0; d < mprt_cu_ndev; d++) {
        MprtNccl *c = &mprt_nccl[d];
        if (!c->comm)
            continue;   /* another process's device */
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
        MPRT_NCCL_CALL(ncclCommDestroy(c->comm));
    }
    free(mprt_nccl);
    mprt_nccl = NULL;
}

#endif
