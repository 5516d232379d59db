/* fakenccl.c — NCCL made of MPI calls, for CUDA trainers across processes
 * on the fake GPUs (fakegpu.c), as fakecudnn.c makes cuDNN of the CPU's
 * kernels: linked into the trainer in place of libnccl (fakegpu.py).
 *
 * - A communicator is an MPI communicator of the processes that join it
 *   (MPI_Comm_create_group): its rank 0 asked for the unique id, which
 *   names that process; each other rank tells it its world rank, and it
 *   answers every rank with the group, in the order of their ranks. Every
 *   rank must join with rank 0's id (the trainer hands it over MPI) from a
 *   GPU no other rank of it uses (the processes share one machine's GPUs,
 *   as NCCL requires of ranks on one machine); each communicator
 *   remembers that GPU.
 * - ncclAllReduce and ncclReduce take float sums only, ncclBroadcast
 *   floats, on a stream of the communicator's GPU, of buffers that GPU
 *   holds, as NCCL requires. Each runs as an operation of that stream
 *   (fakegpu_enqueue_async): when the stream comes to it, MPI_Iallreduce
 *   (MPI_Ireduce, MPI_Ibcast) starts, and the stream waits until it
 *   completes, while the other streams run on. So a sum issued before its
 *   gradients are complete, or an update that does not wait for its sum,
 *   shows as wrong numbers, as with the fake GPUs' own waits.
 * - ncclSend and ncclRecv move bytes (any type) to and from a peer of the
 *   communicator: MPI_Isend and MPI_Irecv when the stream comes to them,
 *   and the stream waits until they complete. So a send waits for its
 *   receive, which NCCL allows, and a step that would deadlock on NCCL
 *   deadlocks here too (FAKEGPU_PATIENCE names it).
 * - Group calls must nest and balance; the operations inside go on their
 *   streams as they are called.
 * - The trainer's own MPI_Allreduce (MPI's profiling interface: PMPI_)
 *   lets the fake GPUs' streams run while the host waits in it, as real
 *   GPUs run on: a GPU pipeline across processes adds the norms of
 *   --clip-norm on the host in the middle of a step (runtime/comm.c).
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
void fakegpu_run_while(int (*busy)(void *), void *arg);
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
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fakenccl %ld %d %d", (long)getpid(), made++,
             me);
    return ncclSuccess;
}

/* The joining: tags of the world's point-to-point messages, apart from
 * the trainer's (a checkpoint's gather, its buffers' indices). */
enum { JOIN_TAG = 30000 };

/* The world ranks of a communicator's ranks, in their order: rank 0 (the
 * id's maker) hears from the others and answers each. */
static void join_ranks(int nranks, int rank, int maker, int tag, int *world)
{
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (rank != 0) {
        int mine[2] = {rank, me};
        MPI_Send(mine, 2, MPI_INT, maker, tag, MPI_COMM_WORLD);
        MPI_Recv(world, nranks, MPI_INT, maker, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
    }
    if (maker != me)
        fail("ncclCommInitRank: rank 0 of a communicator must ask for its unique id");
    world[0] = me;
    for (int k = 1; k < nranks; k++) {
        int theirs[2];
        MPI_Recv(theirs, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (theirs[0] <= 0 || theirs[0] >= nranks)
            fail("ncclCommInitRank: a rank outside the communicator");
        world[theirs[0]] = theirs[1];
    }
    for (int k = 1; k < nranks; k++)
        MPI_Send(world, nranks, MPI_INT, world[k], tag, MPI_COMM_WORLD);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    long pid = 0;
    int made = 0, maker = -1, size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (sscanf(id.internal, "fakenccl %ld %d %d", &pid, &made, &maker) != 3 || maker < 0 ||
        maker >= size)
        fail("ncclCommInitRank: not a unique id of ncclGetUniqueId");
    if (nranks < 1 || nranks > size || rank < 0 || rank >= nranks)
        fail("ncclCommInitRank: a rank outside the communicator, or more ranks than processes");
    struct ncclComm *c = calloc(1, sizeof *c);
    int *world = calloc((size_t)nranks, sizeof *world);
    if (!c || !world)
        fail("out of memory");
    c->rank = rank, c->nranks = nranks, c->device = fakegpu_current();
    int tag = JOIN_TAG + made % 2000;
    join_ranks(nranks, rank, maker, tag, world);
    MPI_Group all, mine;
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    MPI_Group_incl(all, nranks, world, &mine);
    if (MPI_Comm_create_group(MPI_COMM_WORLD, mine, tag, &c->comm) != MPI_SUCCESS)
        fail("MPI_Comm_create_group failed");
    MPI_Group_free(&mine);
    MPI_Group_free(&all);
    free(world);
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

enum { ALL_REDUCE, REDUCE, BROADCAST, SEND, RECV };

typedef struct Sum {
    int kind, root;           /* root: REDUCE's and BROADCAST's; SEND's and RECV's peer */
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
    s->done = 0;   /* a captured step's replay starts it again */
    MPI_Comm_rank(s->comm, &me);
    const void *send = s->send == s->recv ? MPI_IN_PLACE : s->send;
    if (s->kind == ALL_REDUCE)
        rc = MPI_Iallreduce(send, s->recv, s->count, MPI_FLOAT, MPI_SUM, s->comm, &s->req);
    else if (s->kind == REDUCE)   /* in place at the root; the others only send */
        rc = MPI_Ireduce(me == s->root ? send : s->send, s->recv, s->count, MPI_FLOAT, MPI_SUM,
                         s->root, s->comm, &s->req);
    else if (s->kind == SEND)   /* count: bytes */
        rc = MPI_Isend(s->send, s->count, MPI_BYTE, s->root, 0, s->comm, &s->req);
    else if (s->kind == RECV)
        rc = MPI_Irecv(s->recv, s->count, MPI_BYTE, s->root, 0, s->comm, &s->req);
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

/* The bytes of count elements of type t. */
static size_t type_bytes(ncclDataType_t t, size_t count)
{
    if (t == ncclInt8 || t == ncclUint8)
        return count;
    if (t == ncclFloat || t == ncclInt32 || t == ncclUint32)
        return count * 4;
    fail("ncclSend, ncclRecv: only bytes, ints and floats are faked");
    return 0;
}

/* A send (or receive) of count elements to (from) peer. */
static ncclResult_t enqueue_p2p(int kind, void *buff, size_t count, ncclDataType_t datatype,
                                int peer, ncclComm_t comm, cudaStream_t stream)
{
    size_t n = type_bytes(datatype, count);
    if (n == 0 || n > INT_MAX)
        fail("a send or receive of 0 bytes, or beyond one MPI call");
    if (peer < 0 || peer >= comm->nranks || peer == comm->rank)
        fail("a send or receive to a peer outside the communicator, or to itself");
    if (fakegpu_stream_device(stream) != comm->device)
        fail("a send or receive on a stream not on the communicator's GPU");
    if (fakegpu_owner(buff, n) != comm->device)
        fail("a send's or receive's buffer not in the communicator's GPU's memory");
    Sum *s = calloc(1, sizeof *s);
    if (!s)
        fail("out of memory");
    *s = (Sum){.kind = kind, .root = peer, .send = buff, .recv = buff, .count = (int)n,
               .comm = comm->comm};
    fakegpu_enqueue_async(stream, sum_start, sum_done, s);
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return enqueue_p2p(SEND, (void *)sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return enqueue_p2p(RECV, recvbuff, count, datatype, peer, comm, stream);
}

static int reducing(void *req)
{
    int done = 0;
    if (PMPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        fail("MPI_Test failed");
    return !done;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm)
{
    MPI_Request req;
    int rc = PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, &req);
    if (rc == MPI_SUCCESS)
        fakegpu_run_while(reducing, &req);
    return rc;
}
