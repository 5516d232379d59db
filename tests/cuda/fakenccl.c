/* fakenccl.c — NCCL made of MPI calls, for CUDA trainers across processes
 * on the fake GPUs (fakegpu.c), as fakecudnn.c makes cuDNN of the CPU's
 * kernels: linked into the trainer in place of libnccl (fakegpu.py).
 *
 * - A communicator is a duplicate of MPI_COMM_WORLD. Every rank must join
 *   with the unique id rank 0 was given (the trainer broadcasts it), its
 *   world rank and the world's size, from a GPU no other rank of it uses
 *   (the processes share one machine's GPUs, as NCCL requires of ranks on
 *   one machine); each communicator remembers that GPU.
 * - ncclAllReduce and ncclReduce take float sums only, ncclBroadcast
 *   floats, on a stream of the communicator's GPU, of buffers that GPU
 *   holds, as NCCL requires. Each runs as an operation of that stream
 *   (fakegpu_enqueue_async): when the stream comes to it, MPI_Iallreduce
 *   (MPI_Ireduce, MPI_Ibcast) starts, and the stream waits until it
 *   completes, while the other streams run on. So a sum issued before its
 *   gradients are complete, or an update that does not wait for its sum,
 *   shows as wrong numbers, as with the fake GPUs' own waits.
 * - Group calls must nest and balance; the operations inside go on their
 *   streams as they are called.
 * Anything else is one line on standard error and exit status 3.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <limits.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fakegpu_enqueue_async(cudaStream_t s, void (*start)(void *), int (*done)(void *), void *arg);
int fakegpu_owner(const void *p, size_t n);
int fakegpu_stream_device(cudaStream_t s);
int fakegpu_current(void);

struct ncclComm {
    MPI_Comm comm;
    int rank, nranks, device;
};

static int group_depth;

static void fail(const char *what)
{
    fprintf(stderr, "fakenccl: %s\n", what);
    exit(3);
}

const char *ncclGetErrorString(ncclResult_t r)
{
    return r == ncclSuccess ? "no error" : "fakenccl: an error";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static int made;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fakenccl %ld %d", (long)getpid(), made++);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    int size = 0, me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (nranks != size || rank != me)
        fail("ncclCommInitRank: not the world's size and this process's rank");
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        fail("out of memory");
    c->rank = rank, c->nranks = nranks, c->device = fakegpu_current();
    if (MPI_Comm_dup(MPI_COMM_WORLD, &c->comm) != MPI_SUCCESS)
        fail("MPI_Comm_dup failed");
    ncclUniqueId first = id;
    MPI_Bcast(&first, (int)sizeof first, MPI_BYTE, 0, c->comm);
    if (memcmp(&first, &id, sizeof id) != 0)
        fail("ncclCommInitRank: this rank was given another unique id than rank 0 "
             "(broadcast rank 0's)");
    int *devs = calloc((size_t)nranks, sizeof *devs);   /* one machine: distinct GPUs */
    if (!devs)
        fail("out of memory");
    MPI_Allgather(&c->device, 1, MPI_INT, devs, 1, MPI_INT, c->comm);
    for (int r = 0; r < nranks; r++)
        if (r != rank && devs[r] == c->device)
            fail("ncclCommInitRank: two ranks of one communicator on one GPU, which NCCL "
                 "refuses");
    free(devs);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    MPI_Comm_free(&comm->comm);
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth-- <= 0)
        fail("ncclGroupEnd without ncclGroupStart");
    return ncclSuccess;
}

enum { ALL_REDUCE, REDUCE, BROADCAST };

typedef struct Sum {
    int kind, root;           /* root: REDUCE's and BROADCAST's */
    const void *send;
    void *recv;
    int count;
    MPI_Comm comm;
    MPI_Request req;
    int done;
} Sum;

static void sum_start(void *arg)
{
    Sum *s = arg;
    int me = 0, rc;
    MPI_Comm_rank(s->comm, &me);
    const void *send = s->send == s->recv ? MPI_IN_PLACE : s->send;
    if (s->kind == ALL_REDUCE)
        rc = MPI_Iallreduce(send, s->recv, s->count, MPI_FLOAT, MPI_SUM, s->comm, &s->req);
    else if (s->kind == REDUCE)   /* in place at the root; the others only send */
        rc = MPI_Ireduce(me == s->root ? send : s->send, s->recv, s->count, MPI_FLOAT, MPI_SUM,
                         s->root, s->comm, &s->req);
    else
        rc = MPI_Ibcast(s->recv, s->count, MPI_FLOAT, s->root, s->comm, &s->req);
    if (rc != MPI_SUCCESS)
        fail("a nonblocking MPI collective failed to start");
}

static int sum_done(void *arg)
{
    Sum *s = arg;
    if (!s->done && MPI_Test(&s->req, &s->done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        fail("MPI_Test failed");
    return s->done;
}

static ncclResult_t enqueue(int kind, int root, const void *sendbuff, void *recvbuff,
                            size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream)
{
    if (datatype != ncclFloat || op != ncclSum)
        fail("ncclAllReduce, ncclReduce, ncclBroadcast: only float sums are faked");
    if (count == 0 || count > INT_MAX)
        fail("a collective of 0 elements, or beyond one MPI call");
    if (root < 0 || root >= comm->nranks)
        fail("a root outside the communicator");
    if (fakegpu_stream_device(stream) != comm->device)
        fail("a collective on a stream not on the communicator's GPU");
    size_t n = count * sizeof(float);
    if ((kind != BROADCAST && fakegpu_owner(sendbuff, n) != comm->device) ||
        fakegpu_owner(recvbuff, n) != comm->device)
        fail("a collective's buffer not in the communicator's GPU's memory");
    Sum *s = calloc(1, sizeof *s);
    if (!s)
        fail("out of memory");
    *s = (Sum){.kind = kind, .root = root, .send = sendbuff, .recv = recvbuff,
               .count = (int)count, .comm = comm->comm};
    fakegpu_enqueue_async(stream, sum_start, sum_done, s);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    return enqueue(ALL_REDUCE, 0, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream)
{
    return enqueue(REDUCE, root, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream)
{
    if (sendbuff != recvbuff)
        fail("ncclBroadcast: only in place is faked");
    return enqueue(BROADCAST, root, sendbuff, recvbuff, count, datatype, ncclSum, comm, stream);
}
