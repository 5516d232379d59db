/* comm.c — the gradient sum of data parallelism (mpcc --data-parallel) as a
 * fixed tree over micro-batches and replicas, and the trainer across
 * processes (--nodes): one replica per process, started by mpirun (or
 * srun), talking over MPI.
 *
 * What crosses between processes, all of it from fixed orders so that
 * every layout gives the same bits:
 *   - each stage's gradients, summed over the replicas once its last
 *     micro-batch has finished them, bucket by bucket, before their norms
 *     and its update (mprt_replica_sum, on the device's communication
 *     stream; a communicator per stage, so that stages of one process sum
 *     at once without their calls interleaving, and a stage's buckets one
 *     after another): a reduce-scatter, each rank adding its share of the
 *     replicas' sums as the tree of program.c's mprt_tree_add adds
 *     micro-batches, then an all-gather;
 *   - the micro-batches' losses, gathered in replica order;
 *   - whether any process was asked to stop (SIGINT, SIGTERM), after each
 *     step, so that every process stops after the same one.
 * Rank 0 reads nothing the others do not, and alone prints progress,
 * evaluates and writes checkpoints (the replicas' weights are the same).
 * A process that fails exits non-zero and mpirun stops the others.
 *
 * Built without MPRT_MPI (one process), the same entry points do what one
 * replica needs: nothing crosses.
 */
#include "mprt.h"
#include "train.h"

#include <pthread.h>

/* Micro-batch k of `count` into a parameter's gradient sum as a fixed
 * tree (mpcc --data-parallel): level l of `sum` (the levels `stride`
 * floats apart) holds a sum of 2^l micro-batches. The gradient g goes in
 * at level 0 and carries up, added to each level the bits of k fill; what
 * is left waits on its level. After the last, the levels still held are
 * added from the lowest up, so the sum ends on the highest. It is the
 * tree that halves a power of two, and otherwise splits the largest
 * power of two below the count from the rest; a replica's micro-batches
 * are one of its subtrees, and mprt_replica_sum adds the replicas' sums
 * the same way. acc is the device's mprt_accumulate (first: copy). */
MPRT_KERNEL void mprt_tree_add(void (*acc)(long, float *, const float *, int), long n,
                               float *sum, size_t stride, const float *g, int k, int count)
{
    const float *c = g;   /* a whole subtree of 2^l micro-batches */
    int l = 0;
    for (; k >> l & 1; l++) {
        acc(n, sum + (size_t)l * stride, c, 0);
        c = sum + (size_t)l * stride;
    }
    if (k + 1 < count || k + 1 == 1 << l) {   /* waits on level l, or is the whole sum */
        if (c != sum + (size_t)l * stride && (k + 1 < count || l == 0))
            acc(n, sum + (size_t)l * stride, c, 1);
        return;
    }
    for (int j = l + 1; (1 << j) <= count; j++)   /* the last: fold what waits above */
        if (count >> j & 1) {
            acc(n, sum + (size_t)j * stride, c, 0);
            c = sum + (size_t)j * stride;
        }
}

static void mprt_host_add(long n, float *sum, const float *g, int first)
{
    if (first)
        memcpy(sum, g, (size_t)n * sizeof *sum);
    else
        for (long i = 0; i < n; i++)
            sum[i] += g[i];
}

/* v[0] = the sum of v[0 .. r) of n floats in host memory, as the tree of
 * mprt_tree_add (state.c's mprt_tree_with). */
MPRT_KERNEL void mprt_tree_vectors(float *const *v, int r, long n)
{
    mprt_tree_with(mprt_host_add, v, r, n);
}

/* The replica the calling thread works for, of every process's: its rows
 * of each batch, its dropout masks. */
MPRT_KERNEL int mprt_replica_index(void)
{
    return mprt_first_replica + mprt_copy_of_thread();
}

/* The processes of one replica: 1, or with a pipeline across processes
 * (--nodes=K --data-parallel=R, R < K) K/R, replica r's being ranks r*P ..
 * r*P + P - 1. */
static int mprt_procs_per_replica(const MprtModel *m)
{
    return m->node_devs ? m->nodes / (m->replicas > 1 ? m->replicas : 1) : 1;
}

/* ---- the replicas of this process (state.c) ---- */

/* For each stage: its copies' communication streams meet at a barrier,
 * and show each other their gradients, a bucket at a time. */
typedef struct MprtHere {
    pthread_barrier_t meet;
    float **g;                        /* [replicas here * n]: each copy's n gradients, kept
                                         here: a copy's own list ends with its sum */
    int cap;                          /* n that g has room for */
    float **w;                        /* --zero=1: each copy's n weights, as g */
    int wcap;
} MprtHere;
static MprtHere *mprt_here;           /* [nstages] */

static void mprt_replicas_start(const MprtModel *m)
{
    if (mprt_replicas_here == 1)
        return;
    mprt_here = calloc((size_t)m->nstages, sizeof *mprt_here);
    if (!mprt_here)
        mprt_die("out of memory");
    for (int s = 0; s < m->nstages; s++)
        if (pthread_barrier_init(&mprt_here[s].meet, NULL, (unsigned)mprt_replicas_here) != 0)
            mprt_die("out of memory");
}

static void mprt_replicas_end(const MprtModel *m)
{
    if (!mprt_here)
        return;
    for (int s = 0; s < m->nstages; s++) {
        pthread_barrier_destroy(&mprt_here[s].meet);
        free(mprt_here[s].g);
        free(mprt_here[s].w);
    }
    free(mprt_here);
    mprt_here = NULL;
}

static void mprt_ranks_sum(int stage, int n, float *const *g, const long *len);

/* The copies of this process meet for a stage: each shows the others its
 * n tensors t (in *list, grown to *cap by copy 0), and after this every
 * copy's are in the list, copy r's at r * n. */
static float **mprt_here_meet(MprtHere *h, float ***list, int *cap, int n, float *const *t)
{
    int RL = mprt_replicas_here, me = mprt_copy_of_thread();
    pthread_barrier_wait(&h->meet);   /* every copy is done with the last list */
    if (me == 0 && n > *cap) {
        free(*list);
        if (!(*list = calloc((size_t)RL * (size_t)n, sizeof **list)))
            mprt_die("out of memory");
        *cap = n;
    }
    pthread_barrier_wait(&h->meet);   /* the list is there */
    memcpy(*list + (size_t)me * (size_t)n, t, (size_t)n * sizeof *t);
    pthread_barrier_wait(&h->meet);
    return *list;
}

/* The n gradients of a stage (g[i], len[i] floats), summed over every
 * replica in place: over the copies of this process (each adds its share
 * of the elements, as the tree adds them, into copy 0's), then over the
 * processes (copy 0's thread: ranks_sum), then every copy takes copy 0's
 * sums, or (share: --zero=1) only its share of them. */
static void mprt_here_sum(int stage, int n, float *const *g, const long *len,
                          void (*ranks_sum)(int, int, float *const *, const long *), int share)
{
    int RL = mprt_replicas_here;
    MprtHere *h = &mprt_here[stage];
    int me = mprt_copy_of_thread();
    mprt_here_meet(h, &h->g, &h->cap, n, g);
    float **v = malloc((size_t)RL * sizeof *v);
    if (!v)
        mprt_die("out of memory");
    for (int i = 0; i < n; i++) {
        long lo = mprt_share_lo(len[i], me, RL), hi = mprt_share_lo(len[i], me + 1, RL);
        for (int r = 0; r < RL; r++)
            v[r] = h->g[(size_t)r * (size_t)n + (size_t)i] + lo;
        mprt_tree_vectors(v, RL, hi - lo);
    }
    free(v);
    pthread_barrier_wait(&h->meet);
    if (me == 0)
        ranks_sum(stage, n, g, len);
    pthread_barrier_wait(&h->meet);
    for (int i = 0; i < n && me != 0; i++) {
        long lo = 0, k = len[i];
        if (share)
            k = mprt_shard(len[i], &lo);
        memcpy(g[i] + lo, h->g[i] + lo, (size_t)k * sizeof(float));
    }
}

MPRT_KERNEL void mprt_replica_sum(int stage, int n, float *const *g, const long *len)
{
    if (mprt_replicas_here == 1)
        mprt_ranks_sum(stage, n, g, len);
    else if (mprt_ops->copies_sum)   /* GPUs: one host thread issues every copy's sum */
        mprt_ops->copies_sum(stage, n, g, len, mprt_ranks_sum);
    else
        mprt_here_sum(stage, n, g, len, mprt_ranks_sum, 0);
}

/* Process r's part of n floats: the shares of its replicas, which follow
 * one another ([lo(r), lo(r + 1)); one replica each: its share). */
static long mprt_part_lo(long n, int r)
{
    return mprt_share_lo(n, r * mprt_replicas_here, mprt_ranks * mprt_replicas_here);
}

static void mprt_zero_ranks_sum(int stage, int n, float *const *g, const long *len);
static void mprt_zero_ranks_gather(int stage, int n, float *const *w, const long *len);

/* --zero=1: a bucket of the stage's gradients summed over the replicas,
 * each replica keeping only its share (mprt_shard): over the copies of
 * this process as mprt_replica_sum's tree, then between the processes
 * each its part (a reduce-scatter), and each copy takes its share. */
MPRT_KERNEL void mprt_zero_sum(int stage, int n, float *const *g, const long *len)
{
    if (mprt_replicas_here == 1)
        mprt_zero_ranks_sum(stage, n, g, len);
    else
        mprt_here_sum(stage, n, g, len, mprt_zero_ranks_sum, 1);
}

/* After the update, which wrote each replica's share of the stage's
 * weights: every copy takes the other copies' shares (from their
 * weights), copy 0 the other processes' parts (an all-gather), and the
 * other copies those from copy 0. */
MPRT_KERNEL void mprt_zero_gather(int stage, int n, float *const *w, const long *len)
{
    if (mprt_replicas_here == 1) {
        mprt_zero_ranks_gather(stage, n, w, len);
        return;
    }
    MprtHere *h = &mprt_here[stage];
    int RL = mprt_replicas_here, me = mprt_copy_of_thread(), base = mprt_first_replica;
    int R = mprt_ranks * RL;
    float **all = mprt_here_meet(h, &h->w, &h->wcap, n, w);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < RL; c++) {
            long lo = mprt_share_lo(len[i], base + c, R);
            long hi = mprt_share_lo(len[i], base + c + 1, R);
            if (c != me)
                memcpy(w[i] + lo, all[(size_t)c * (size_t)n + (size_t)i] + lo,
                       (size_t)(hi - lo) * sizeof(float));
        }
    pthread_barrier_wait(&h->meet);
    if (me == 0)
        mprt_zero_ranks_gather(stage, n, w, len);
    pthread_barrier_wait(&h->meet);
    for (int i = 0; i < n && me != 0; i++) {   /* the other processes' parts */
        long lo = mprt_part_lo(len[i], mprt_rank), hi = mprt_part_lo(len[i], mprt_rank + 1);
        memcpy(w[i], all[i], (size_t)lo * sizeof(float));
        memcpy(w[i] + hi, all[i] + hi, (size_t)(len[i] - hi) * sizeof(float));
    }
}

/* Rank 0's whole copy of sharded buffer i (mprt_shard_whole, which
 * checkpoint.c writes), made at its first checkpoint. */
static float *mprt_whole(const MprtModel *m, int i)
{
    if (!mprt_shard_whole && !(mprt_shard_whole = calloc((size_t)m->nbuffers, sizeof(void *))))
        mprt_die("out of memory");
    if (!mprt_shard_whole[i] && !(mprt_shard_whole[i] = malloc(m->buffers[i].nbytes)))
        mprt_die("out of memory for the checkpoint's '%s'", m->buffers[i].name);
    return mprt_shard_whole[i];
}

/* This process's part of sharded buffer b (n floats whole), on the host:
 * its copies' shards, one after another (each at the start of its slot). */
static void mprt_zero_part_of(const MprtBuffer *b, long n, float *out)
{
    long first = mprt_part_lo(n, mprt_rank);
    for (int c = 0; c < mprt_replicas_here; c++) {
        mprt_dev_base = c * mprt_replica_devs;
        long lo, k = mprt_shard(n, &lo);   /* on a GPU: to the host */
        const void *p = mprt_ops->dev_hold(mprt_dev_base + b->dev, mprt_slot(b, 0),
                                           (size_t)k * sizeof(float));
        memcpy(out + (lo - first), p, (size_t)k * sizeof(float));
        mprt_ops->dev_unhold(p, mprt_slot(b, 0));
    }
    mprt_dev_base = 0;
}

#ifdef MPRT_MPI
#include <limits.h>
#include <mpi.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>

static MPI_Comm *mprt_stage_comm;   /* [nstages] */
static int mprt_procs_each = 1;     /* the processes of one replica (mprt_procs_per_replica) */
static MPI_Comm mprt_p2p;           /* a pipeline across processes: those of one replica,
                                       for the copies between their stages */
static int mprt_node_devs;          /* each process's devices of the pipeline */

/* A pipeline across processes: the rank in mprt_p2p of model device dev's
 * process. */
static int mprt_p2p_rank(int dev)
{
    return dev / mprt_node_devs;
}
typedef struct MprtSumScratch {
    float *flat, *parts;            /* every gradient of the stage, one after another;
                                       the replicas' sums of this rank's share */
    long n;
    float *out, *in;                /* --zero=1: what a bucket's reduce-scatter sends and
                                       receives (the all-gather of the update: out) */
    size_t out_cap, in_cap;
} MprtSumScratch;
/* [nstages], each used by its device alone, and by one stream at a time:
 * the stage's sums on its communication stream, then its update */
static MprtSumScratch *mprt_sum_scratch;

static void mprt_mpi_check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        mprt_die("%s failed: %.*s", what, len, msg);
    }
}

/* The processes on this machine, by the name MPI gives it: how many, and
 * how many come before this one. (Not MPI_Comm_split_type: with Open MPI
 * its shared memory keeps SIGTERM from reaching the trainer.) */
static void mprt_local_ranks_find(void)
{
    char *names = calloc((size_t)mprt_ranks, MPI_MAX_PROCESSOR_NAME);
    char mine[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    if (!names)
        mprt_die("out of memory");
    mprt_mpi_check(MPI_Get_processor_name(mine, &len), "MPI_Get_processor_name");
    mprt_mpi_check(MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names,
                                 MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD),
                   "MPI_Allgather");
    mprt_local_rank = 0, mprt_local_ranks = 0;
    for (int r = 0; r < mprt_ranks; r++)
        if (strncmp(names + (size_t)r * MPI_MAX_PROCESSOR_NAME, mine, MPI_MAX_PROCESSOR_NAME) == 0) {
            mprt_local_rank += r < mprt_rank;
            mprt_local_ranks++;
        }
    free(names);
}

/* Start-up: the world must be the one compiled for. */
static void mprt_comm_start(const MprtModel *m, int *argc, char ***argv)
{
    /* device threads call MPI at once: several devices, or the sums' stream
     * beside the host's */
    int many = m->ndev > 1 || m->node_devs || m->replicas > 1;
    int need = many ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, have = 0, size = 0;
    mprt_mpi_check(MPI_Init_thread(argc, argv, need, &have), "MPI_Init_thread");
    MPI_Comm_rank(MPI_COMM_WORLD, &mprt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mprt_rank_tag = mprt_rank;
    if (size != m->nodes) {
        if (mprt_rank == 0)
            fprintf(stderr, "%s: error: compiled for %d processes (mpcc --nodes=%d) but "
                    "started as %d; run mpirun -np %d ./%s ...\n", m->program, m->nodes,
                    m->nodes, size, m->nodes, m->program);
        MPI_Finalize();
        exit(1);
    }
    if (have < need)
        mprt_die("this MPI gives thread level %d, and %d device threads call it: build Open "
                 "MPI with MPI_THREAD_MULTIPLE, or compile with -cpus 1", have, m->ndev);
    mprt_ranks = size;
    mprt_local_ranks_find();
    mprt_stage_comm = calloc((size_t)m->nstages, sizeof *mprt_stage_comm);
    mprt_sum_scratch = calloc((size_t)m->nstages, sizeof *mprt_sum_scratch);
    if (!mprt_stage_comm || !mprt_sum_scratch)
        mprt_die("out of memory");
    MPI_Comm same;   /* the processes that hold the same stages: one of each replica */
    int P = mprt_procs_each = mprt_procs_per_replica(m);
    mprt_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, mprt_rank % P, mprt_rank, &same),
                   "MPI_Comm_split");
    for (int s = 0; s < m->nstages; s++)
        mprt_mpi_check(MPI_Comm_dup(same, &mprt_stage_comm[s]), "MPI_Comm_dup");
    MPI_Comm_free(&same);
}

/* Once the devices are open: NCCL's communicators between the GPUs, for
 * the sums over replicas, or the copies of a pipeline across processes. */
static void mprt_comm_devices(const MprtModel *m)
{
#ifdef MPRT_NCCL
    if (m->nlinks)
        mprt_nccl_links(m, mprt_p2p, mprt_p2p_rank);
    if (m->replicas > 1)   /* the sums: between the processes of one stage, a replica each */
        mprt_nccl_start(mprt_procs_each, mprt_stage_comm[0]);
#else
    (void)m;
#endif
}

static void mprt_comm_end(void)
{
#ifdef MPRT_NCCL
    mprt_nccl_end();
#endif
    MPI_Finalize();
}

#ifdef MPRT_NCCL
/* The GPUs' gradients: NCCL's all-reduce (nccl.c). */
static void mprt_ranks_sum(int stage, int n, float *const *g, const long *len)
{
    (void)stage;
    mprt_nccl_sum(n, g, len);
}
#else
/* *p with room for n floats, kept from one step to the next. */
static float *mprt_room(float **p, size_t *cap, size_t n, int stage)
{
    if (n > *cap) {
        free(*p);
        if (!(*p = malloc(n * sizeof(float) + 1)))
            mprt_die("out of memory for the gradient sum of stage %d (%zu floats)", stage, n);
        *cap = n;
    }
    return *p;
}

static MprtSumScratch *mprt_scratch(int stage, long n, int R)
{
    MprtSumScratch *s = &mprt_sum_scratch[stage];   /* the stage's largest bucket */
    if (n > s->n) {
        free(s->flat), free(s->parts);
        s->n = n;
        s->flat = malloc((size_t)n * sizeof(float));
        s->parts = malloc((size_t)(n / R + 1) * (size_t)R * sizeof(float));
        if (!s->flat || !s->parts)
            mprt_die("out of memory for the gradient sum of stage %d (%ld floats)", stage, n);
    }
    return s;
}

/* The n gradients of a stage (g[i], len[i] floats), this process's sums,
 * summed over the processes in place. */
static void mprt_ranks_sum(int stage, int n, float *const *g, const long *len)
{
    MPI_Comm c = mprt_stage_comm[stage];   /* a process of each replica */
    int R = 1, me = 0;
    MPI_Comm_size(c, &R);
    MPI_Comm_rank(c, &me);
    long total = 0;
    for (int i = 0; i < n; i++)
        total += len[i];
    if (total > INT_MAX)
        mprt_die("stage %d has %ld gradient floats, more than one MPI call counts; split it "
                 "over more stages (mpcc -cpus N)", stage, total);
    MprtSumScratch *s = mprt_scratch(stage, total, R);
    for (long i = 0, at = 0; i < n; at += len[i], i++)
        memcpy(s->flat + at, g[i], (size_t)len[i] * sizeof(float));
    int *count = malloc((size_t)R * sizeof(int)), *at = malloc((size_t)R * sizeof(int));
    int *rcount = malloc((size_t)R * sizeof(int)), *rat = malloc((size_t)R * sizeof(int));
    float **part = malloc((size_t)R * sizeof *part);
    if (!count || !at || !rcount || !rat || !part)
        mprt_die("out of memory");
    long mine = mprt_share_lo(total, me + 1, R) - mprt_share_lo(total, me, R);
    for (int r = 0; r < R; r++) {
        at[r] = (int)mprt_share_lo(total, r, R);
        count[r] = (int)(mprt_share_lo(total, r + 1, R) - at[r]);
        rcount[r] = (int)mine;
        rat[r] = (int)(r * mine);
        part[r] = s->parts + r * mine;
    }
    mprt_mpi_check(MPI_Alltoallv(s->flat, count, at, MPI_FLOAT, s->parts, rcount, rat,
                                 MPI_FLOAT, c), "the gradient sum (MPI_Alltoallv)");
    mprt_tree_vectors(part, R, mine);
    mprt_mpi_check(MPI_Allgatherv(part[0], (int)mine, MPI_FLOAT, s->flat, count, at, MPI_FLOAT,
                                  c), "the gradient sum (MPI_Allgatherv)");
    for (long i = 0, k = 0; i < n; k += len[i], i++)
        memcpy(g[i], s->flat + k, (size_t)len[i] * sizeof(float));
    free(count), free(at), free(rcount), free(rat), free(part);
}
#endif

/* ---- --zero=1: the optimizer state sharded over the processes ---- */

/* The floats of rank r's shares of a stage's n tensors; at[i]: where
 * tensor i's share starts among them. */
static long mprt_zero_part(int n, const long *len, int r, int R, long *at)
{
    long k = 0;
    for (int i = 0; i < n; i++) {
        if (at)
            at[i] = k;
        k += mprt_part_lo(len[i], r + 1) - mprt_part_lo(len[i], r);
    }
    return k;
}

/* Counts and offsets of every rank's part, for MPI's v-calls. */
static void mprt_zero_counts(int n, const long *len, int R, int *count, int *at)
{
    long k = 0;
    for (int r = 0; r < R; r++) {
        long c = mprt_zero_part(n, len, r, R, NULL);
        if (k + c > INT_MAX)
            mprt_die("a stage's gradients are more floats than one MPI call counts; split it "
                     "over more stages (mpcc -cpus N)");
        count[r] = (int)c, at[r] = (int)k;
        k += c;
    }
}

#ifdef MPRT_NCCL
/* The GPUs' shares: NCCL's reductions and broadcasts (nccl.c). */
static void mprt_zero_ranks_sum(int stage, int n, float *const *g, const long *len)
{
    (void)stage;
    mprt_nccl_shares(n, g, len, 1);
}

static void mprt_zero_ranks_gather(int stage, int n, float *const *w, const long *len)
{
    (void)stage;
    mprt_nccl_shares(n, w, len, 0);
}
#else
/* The stage's gradients summed over the processes, each process only its
 * part (a reduce-scatter): the same tree over the ranks, element by
 * element, as mprt_ranks_sum. */
static void mprt_zero_ranks_sum(int stage, int n, float *const *g, const long *len)
{
    MPI_Comm c = mprt_stage_comm[stage];
    int R = mprt_ranks, me = mprt_rank;
    int *count = malloc((size_t)R * sizeof(int)), *at = malloc((size_t)R * sizeof(int));
    int *rcount = malloc((size_t)R * sizeof(int)), *rat = malloc((size_t)R * sizeof(int));
    long *off = malloc((size_t)n * sizeof(long));
    float **part = malloc((size_t)R * sizeof *part);
    mprt_zero_counts(n, len, R, count, at);
    if (!count || !at || !rcount || !rat || !off || !part)
        mprt_die("out of memory for the gradient sum of stage %d", stage);
    long total = at[R - 1] + count[R - 1], mine = mprt_zero_part(n, len, me, R, off);
    MprtSumScratch *s = &mprt_sum_scratch[stage];
    float *out = mprt_room(&s->out, &s->out_cap, (size_t)total, stage);
    float *in = mprt_room(&s->in, &s->in_cap, (size_t)R * (size_t)mine, stage);
    for (int r = 0, k = 0; r < R; r++)   /* to rank r: its share of every tensor */
        for (int i = 0; i < n; i++) {
            long lo = mprt_part_lo(len[i], r), hi = mprt_part_lo(len[i], r + 1);
            memcpy(out + k, g[i] + lo, (size_t)(hi - lo) * sizeof(float));
            k += (int)(hi - lo);
        }
    for (int r = 0; r < R; r++) {
        rcount[r] = (int)mine, rat[r] = (int)(r * mine);
        part[r] = in + (size_t)r * (size_t)mine;
    }
    mprt_mpi_check(MPI_Alltoallv(out, count, at, MPI_FLOAT, in, rcount, rat, MPI_FLOAT, c),
                   "the gradient sum (MPI_Alltoallv)");
    mprt_tree_vectors(part, R, mine);
    for (int i = 0; i < n; i++) {
        long lo = mprt_part_lo(len[i], me), hi = mprt_part_lo(len[i], me + 1);
        memcpy(g[i] + lo, part[0] + off[i], (size_t)(hi - lo) * sizeof(float));
    }
    free(count), free(at), free(rcount), free(rat), free(off), free(part);
}

/* After the update: every process takes the others' parts of the stage's
 * weights (an all-gather). */
static void mprt_zero_ranks_gather(int stage, int n, float *const *w, const long *len)
{
    MPI_Comm c = mprt_stage_comm[stage];
    int R = mprt_ranks, me = mprt_rank;
    int *count = malloc((size_t)R * sizeof(int)), *at = malloc((size_t)R * sizeof(int));
    if (!count || !at)
        mprt_die("out of memory");
    mprt_zero_counts(n, len, R, count, at);
    long total = at[R - 1] + count[R - 1];
    MprtSumScratch *s = &mprt_sum_scratch[stage];
    float *all = mprt_room(&s->out, &s->out_cap, (size_t)total, stage);
    for (int i = 0, k = at[me]; i < n; i++) {   /* this rank's shares, in place */
        long lo = mprt_part_lo(len[i], me), hi = mprt_part_lo(len[i], me + 1);
        memcpy(all + k, w[i] + lo, (size_t)(hi - lo) * sizeof(float));
        k += (int)(hi - lo);
    }
    mprt_mpi_check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, all, count, at, MPI_FLOAT, c),
                   "sharing the updated weights (MPI_Allgatherv)");
    for (int r = 0; r < R; r++)
        for (int i = 0, k = at[r]; i < n; i++) {
            long lo = mprt_part_lo(len[i], r), hi = mprt_part_lo(len[i], r + 1);
            if (r != me)
                memcpy(w[i] + lo, all + k, (size_t)(hi - lo) * sizeof(float));
            k += (int)(hi - lo);
        }
    free(count), free(at);
}
#endif

/* Before a checkpoint: rank 0 gathers the shards of each sharded buffer
 * into its whole copy (mprt_shard_whole, which checkpoint.c writes). */
static void mprt_zero_gather_state(const MprtModel *m)
{
    int R = mprt_ranks;
    int *count = malloc((size_t)R * sizeof(int)), *at = malloc((size_t)R * sizeof(int));
    if (!count || !at)
        mprt_die("out of memory");
    for (int i = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        if (b->shard <= 1)
            continue;
        long n = (long)(b->nbytes / sizeof(float));
        for (int r = 0; r < R; r++) {
            at[r] = (int)mprt_part_lo(n, r);
            count[r] = (int)(mprt_part_lo(n, r + 1) - at[r]);
        }
        float *whole = mprt_rank == 0 ? mprt_whole(m, i) : NULL;
        float *mine = malloc((size_t)count[mprt_rank] * sizeof(float) + 1);
        if (!mine)
            mprt_die("out of memory for the checkpoint's '%s'", b->name);
        mprt_zero_part_of(b, n, mine);
        mprt_mpi_check(MPI_Gatherv(mine, count[mprt_rank], MPI_FLOAT, whole,
                                   count, at, MPI_FLOAT, 0, MPI_COMM_WORLD),
                       "gathering the optimizer state (MPI_Gatherv)");
        free(mine);
    }
    free(count), free(at);
}

/* Every replica's micro-batch losses, in replica order: all[r * M + mb].
 * With a pipeline across processes, each replica's are those of its
 * process that computes them: the others' are 0, and x + 0 is x, so the
 * P processes of a replica add up to it. */
static void mprt_comm_losses(int M, const float *mine, float *all)
{
    if (mprt_procs_each == 1) {
        mprt_mpi_check(MPI_Allgather(mine, M, MPI_FLOAT, all, M, MPI_FLOAT, MPI_COMM_WORLD),
                       "gathering the losses (MPI_Allgather)");
        return;
    }
    static float *each;   /* kept from step to step: M is the model's */
    if (!each && !(each = malloc((size_t)mprt_ranks * (size_t)M * sizeof *each)))
        mprt_die("out of memory");
    mprt_mpi_check(MPI_Allgather(mine, M, MPI_FLOAT, each, M, MPI_FLOAT, MPI_COMM_WORLD),
                   "gathering the losses (MPI_Allgather)");
    int P = mprt_procs_each;
    for (int r = 0; r < mprt_ranks / P; r++)
        for (int mb = 0; mb < M; mb++) {
            float x = 0;
            for (int q = 0; q < P; q++)
                x += each[(size_t)(r * P + q) * (size_t)M + (size_t)mb];
            all[(size_t)r * (size_t)M + (size_t)mb] = x;
        }
}

/* ---- a pipeline across processes ---- */

static void mprt_p2p_check(size_t n, int tag, const char *what)
{
    static int *ub;
    int flag = 0;
    if (!ub)
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (n > INT_MAX || (ub && tag > *ub))
        mprt_die("%s of %zu bytes, operation %d: beyond what one MPI call counts", what, n, tag);
}

#ifndef MPRT_NCCL   /* CPU devices: the copies are MPI's */
static void mprt_mpi_send(const void *src, size_t n, int dev, int tag)
{
    mprt_p2p_check(n, tag, "a copy to another process");
    mprt_mpi_check(MPI_Send(src, (int)n, MPI_BYTE, dev / mprt_node_devs, tag, mprt_p2p),
                   "a copy to another process (MPI_Send)");
}

static void mprt_mpi_recv(void *dst, size_t n, int dev, int tag)
{
    mprt_p2p_check(n, tag, "a copy from another process");
    mprt_mpi_check(MPI_Recv(dst, (int)n, MPI_BYTE, dev / mprt_node_devs, tag, mprt_p2p,
                            MPI_STATUS_IGNORE), "a copy from another process (MPI_Recv)");
}
#endif

/* The p-th process of a replica runs devices p * node_devs .. of the
 * model's; the copies go between the processes of its replica. */
static void mprt_pipeline_start(const MprtModel *m)
{
    int P = mprt_procs_per_replica(m);
    mprt_node_devs = m->node_devs;
    mprt_dev_lo = mprt_rank % P * m->node_devs;
    mprt_dev_hi = mprt_dev_lo + m->node_devs;
#ifndef MPRT_NCCL
    mprt_stream_send = mprt_mpi_send;
    mprt_stream_recv = mprt_mpi_recv;
#endif
    mprt_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, mprt_rank / P, mprt_rank, &mprt_p2p),
                   "MPI_Comm_split");
}

#ifdef MPRT_NCCL   /* GPUs: NCCL's sends and receives (nccl.c) */
MPRT_KERNEL void mprt_send(int stream, const void *src, size_t n, int dev, int label)
{
    if (mprt_stream_here(stream))
        mprt_nccl_p2p(stream, (void *)src, n, dev, label, 1);
}

MPRT_KERNEL void mprt_recv(int stream, void *dst, size_t n, int dev, int label)
{
    if (mprt_stream_here(stream))
        mprt_nccl_p2p(stream, dst, n, dev, label, 0);
}
#else
/* A copy between stages on two processes: the sender's stream sends... */
MPRT_KERNEL void mprt_send(int stream, const void *src, size_t n, int dev, int label)
{
    if (mprt_stream_here(stream))
        mprt_enqueue(stream, (MprtOp){.kind = MPRT_OP_SEND, .src = src, .n = n, .mb = dev,
                                      .ev = label, .label = label});
}

/* ... and the receiver's stream of the same kind receives. */
MPRT_KERNEL void mprt_recv(int stream, void *dst, size_t n, int dev, int label)
{
    if (mprt_stream_here(stream))
        mprt_enqueue(stream, (MprtOp){.kind = MPRT_OP_RECV, .dst = dst, .n = n, .mb = dev,
                                      .ev = label, .label = label});
}

#endif

/* Evaluation of a pipeline across processes (codegen.c's eval_forward):
 * an activation of micro-batch 0 from device `from` to device `to`, where
 * either may be another process's; through host memory between them. */
MPRT_KERNEL void mprt_eval_copy(void *dst, int to, const void *src, int from, size_t n)
{
    int a = mprt_dev_here(from), b = mprt_dev_here(to);
    if (a && b) {
        mprt_dev_copy(dst, src, n);
    } else if (a) {
        mprt_p2p_check(n, 0, "an evaluation's copy to another process");
        mprt_mpi_check(MPI_Send(mprt_ops->dev_read(from, src, n, 0), (int)n, MPI_BYTE,
                                mprt_p2p_rank(to), 0, mprt_p2p),
                       "an evaluation's copy to another process (MPI_Send)");
    } else if (b) {
        void *h = mprt_ops->dev_stage(to, dst, n);
        mprt_p2p_check(n, 0, "an evaluation's copy from another process");
        mprt_mpi_check(MPI_Recv(h, (int)n, MPI_BYTE, mprt_p2p_rank(from), 0, mprt_p2p,
                                MPI_STATUS_IGNORE),
                       "an evaluation's copy from another process (MPI_Recv)");
        mprt_ops->dev_commit(to, dst, h, n);
    }
}

/* --clip-norm with a pipeline across processes: the squared norms of the
 * other processes' stages (k entries, each process's own written this
 * step and the others' 0: train.c's mprt_step), added into this one's
 * table, once a step, by the first update that asks (the plan has every
 * update wait for this process's stages' norms). x + 0 is x: the table
 * is one process's, bit for bit. */
MPRT_KERNEL void mprt_norms_across(int k)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static long done = -1;
    pthread_mutex_lock(&mu);
    if (done != mprt_step_no)
        mprt_mpi_check(MPI_Allreduce(MPI_IN_PLACE, mprt_norm_sq, k, MPI_DOUBLE, MPI_SUM,
                                     mprt_p2p), "adding the squared norms (MPI_Allreduce)");
    done = mprt_step_no;
    pthread_mutex_unlock(&mu);
}

/* ... and its scores, n sums, added over the processes of the pipeline
 * into rank 0's (the process of the last stage scores; the others add 0). */
static void mprt_eval_sum(double *v, int n)
{
    mprt_mpi_check(MPI_Reduce(mprt_rank == 0 ? MPI_IN_PLACE : v, v, n, MPI_DOUBLE, MPI_SUM, 0,
                              mprt_p2p), "adding the evaluation's scores (MPI_Reduce)");
}

/* Before a checkpoint: rank 0 takes the weights, optimizer state and
 * running statistics of the other processes' devices into its copies of
 * their arenas, in the buffer table's order. */
static void mprt_comm_gather(const MprtModel *m)
{
    mprt_zero_gather_state(m);
    if (!m->node_devs)
        return;
    for (int i = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        int owner = b->dev / m->node_devs;
        if ((b->kind != MPRT_PARAM && b->kind != MPRT_STATE) || b->dev < 0 || owner == 0)
            continue;
        if (mprt_rank == owner)   /* a GPU's, through host memory */
            mprt_mpi_check(MPI_Send(mprt_ops->dev_read(b->dev, mprt_slot(b, 0), b->nbytes, 0),
                                    (int)b->nbytes, MPI_BYTE, 0, i, MPI_COMM_WORLD),
                           "gathering the checkpoint (MPI_Send)");
        else if (mprt_rank == 0)
            mprt_mpi_check(MPI_Recv(mprt_slot(b, 0), (int)b->nbytes, MPI_BYTE, owner, i,
                                    MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                           "gathering the checkpoint (MPI_Recv)");
    }
}

/* ---- when mpirun stops the job: the step each process was in ---- */

/* mpirun stops every process when one fails (or when it is signalled
 * itself): SIGCONT first, SIGTERM a second later, SIGKILL a second after
 * that. A process waiting on one that died never ends its step, so a
 * watcher thread, woken by the SIGCONT, names the step it is in when no
 * step has ended 0.3 s later: one line beside mpirun's, which names the
 * process that failed. */
static sem_t mprt_woken;   /* posted by SIGCONT's handler */
static _Atomic long mprt_steps_done;
static const char *mprt_watch_name;

static void mprt_on_cont(int sig)
{
    (void)sig;
    sem_post(&mprt_woken);   /* async-signal-safe */
}

static void *mprt_watch(void *arg)
{
    (void)arg;
    while (sem_wait(&mprt_woken) != 0)   /* asleep until mpirun's SIGCONT */
        ;
    long before = mprt_steps_done;
    usleep(300000);
    if (mprt_steps_done == before)
        fprintf(stderr, "%s: rank %d: stopped by mpirun during step %ld (when a process fails, "
                "mpirun's lines name it)\n", mprt_watch_name, mprt_rank, before + 1);
    return NULL;
}

/* At the start of training: the watcher, and the count of steps done. */
static void mprt_comm_watch(const char *program, long done)
{
    mprt_watch_name = program;
    mprt_steps_done = done;
    if (sem_init(&mprt_woken, 0, 0) != 0)
        return;
    mprt_catch(SIGCONT, mprt_on_cont);
    pthread_t t;
    if (pthread_create(&t, NULL, mprt_watch, NULL) == 0)
        pthread_detach(t);
}

static void mprt_comm_step_done(long step)
{
    mprt_steps_done = step;
}

/* Whether any process has `flag` set. */
static int mprt_comm_any(int flag)
{
    int any = 0;
    mprt_mpi_check(MPI_Allreduce(&flag, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD),
                   "agreeing to stop (MPI_Allreduce)");
    return any;
}

/* Every process's hash, in rank order: all[r]. */
static void mprt_comm_hashes(uint64_t mine, uint64_t *all)
{
    mprt_mpi_check(MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD),
                   "comparing the replicas (MPI_Allgather)");
}

#else   /* one process */

static void mprt_comm_start(const MprtModel *m, int *argc, char ***argv)
{
    (void)m, (void)argc, (void)argv;
}

static void mprt_comm_devices(const MprtModel *m)
{
    (void)m;
}

static void mprt_comm_end(void) {}

static void mprt_comm_watch(const char *program, long done)
{
    (void)program, (void)done;
}

static void mprt_comm_step_done(long step)
{
    (void)step;
}

static void mprt_ranks_sum(int stage, int n, float *const *g, const long *len)
{
    (void)stage, (void)n, (void)g, (void)len;
}

static void mprt_pipeline_start(const MprtModel *m)
{
    (void)m;
}

static void mprt_zero_ranks_sum(int stage, int n, float *const *g, const long *len)
{
    (void)stage, (void)n, (void)g, (void)len;
}

static void mprt_zero_ranks_gather(int stage, int n, float *const *w, const long *len)
{
    (void)stage, (void)n, (void)w, (void)len;
}

/* --zero=1: the whole of each sharded buffer, from the copies' shards. */
static void mprt_comm_gather(const MprtModel *m)
{
    for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].shard > 1)
            mprt_zero_part_of(&m->buffers[i], (long)(m->buffers[i].nbytes / sizeof(float)),
                              mprt_whole(m, i));
}

static void mprt_eval_sum(double *v, int n)
{
    (void)v, (void)n;
}

static void mprt_comm_losses(int M, const float *mine, float *all)
{
    memcpy(all, mine, (size_t)M * sizeof(float));
}

static int mprt_comm_any(int flag)
{
    return flag;
}

static void mprt_comm_hashes(uint64_t mine, uint64_t *all)
{
    all[0] = mine;
}

#endif
