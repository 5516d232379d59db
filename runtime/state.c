/* state.c — the trainer's state that kernels read, on any device.
 *
 * Training (1) or inference (0): kernels whose behaviour depends on the
 * mode read mprt_training: BatchNormalization normalises with the batch's
 * statistics and updates the running ones in training, and with the
 * running statistics, left as they are, in inference; Dropout is the
 * identity in inference. The trainer's evaluation (train.c) clears it
 * around its forward passes.
 */
#include "mprt.h"
#include "program.h"

MPRT_GLOBAL int mprt_training = 1;
MPRT_GLOBAL float *mprt_losses;   /* the loss of each micro-batch of the step, set by the devices */
/* --clip-norm: each parameter's squared gradient norm, in the order of the
 * updates, filled by the action that finishes the gradient. */
MPRT_GLOBAL double *mprt_norm_sq;
MPRT_GLOBAL long mprt_step_no;   /* the step being run, from 0 (train.c) */
MPRT_GLOBAL int mprt_step_graphs;   /* GPUs: the step may run as one captured graph (cuda.c) */

/* --data-parallel with several replicas in one process (CPU devices): the
 * process holds mprt_replicas_here copies of one replica's D devices, the
 * copy r as devices r*D .. r*D + D - 1, with their streams, events and
 * micro-batch losses after those of the copies before. A thread works for
 * one copy, whose first device is its mprt_dev_base: a stream's worker
 * for its device's copy, the host for the copy it fills or issues
 * (train.c). The model's arenas (A0, ...) and the devices' entry points
 * (program.c) add it; with one copy it is 0. */
MPRT_GLOBAL _Thread_local int mprt_dev_base;
MPRT_GLOBAL int mprt_replicas_here = 1;
MPRT_GLOBAL int mprt_replica_devs = 1, mprt_replica_events, mprt_replica_mbs;
MPRT_GLOBAL int mprt_replica_norms;   /* --clip-norm: each copy's squared norms, after those before */

/* --zero=1: rank 0's whole copy of each sharded buffer (buffer table
 * order; NULL for the others), gathered before a checkpoint (comm.c). */
MPRT_GLOBAL void **mprt_shard_whole;

/* The copy the calling thread works for. */
static inline int mprt_copy_of_thread(void)
{
    return mprt_dev_base / mprt_replica_devs;
}

/* A pipeline across processes (mpcc --data-parallel=1 --nodes=K): every
 * process holds every device's arena, but runs only the operations of its
 * own devices, [mprt_dev_lo, mprt_dev_hi) (comm.c sets them); the devices'
 * entry points (program.c) pass over the others'. */
MPRT_GLOBAL int mprt_dev_lo, mprt_dev_hi = 1 << 30;

/* Across processes (mpcc --nodes=K, comm.c): this process, 0 of 1 alone. */
MPRT_GLOBAL int mprt_rank;
MPRT_GLOBAL int mprt_ranks = 1;
/* The processes on this machine before this one: a CUDA trainer's GPUs
 * come after theirs (cuda.c), so that K processes share one machine's. */
MPRT_GLOBAL int mprt_local_rank, mprt_local_ranks = 1;

/* Replica or rank r's share of n floats (of R): [lo(r), lo(r + 1)). */
static inline long mprt_share_lo(long n, int r, int R)
{
    return n / R * r + (r < n % R ? r : n % R);
}

/* The replica this process's first copy is, of every process's: rank x its
 * copies; 0 where one pipeline spans the processes (they are one replica). */
MPRT_GLOBAL int mprt_first_replica;

/* --zero=1: the calling thread's replica's share of a tensor of n floats,
 * [*lo, *lo + k), k returned; its optimizer state holds it, and its update
 * writes it (every replica a process's, or a copy in one). */
MPRT_KERNEL long mprt_shard(long n, long *lo)
{
    int R = mprt_ranks * mprt_replicas_here, r = mprt_first_replica + mprt_copy_of_thread();
    *lo = mprt_share_lo(n, r, R);
    return mprt_share_lo(n, r + 1, R) - *lo;
}

/* ---- Dropout's counter-based generator ---- */

/* The training loop sets these before every micro-batch: a dropout mask is
 * a function of (seed, node, global micro-batch number, element) only, so
 * it does not depend on where or in which order the op runs, and the
 * backward pass regenerates it instead of storing it. */
MPRT_GLOBAL uint64_t mprt_dropout_seed;
MPRT_GLOBAL _Thread_local long mprt_dropout_mb;   /* set by each stage action */

static inline uint64_t mprt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

MPRT_GLOBAL long mprt_dropout_stride = 1;   /* micro-batches a step in that numbering,
                                               over every replica (train.c) */

/* The key of node's masks in global micro-batch mb. */
static inline uint64_t mprt_dropout_key_at(uint64_t node, long mb)
{
    uint64_t k = mprt_mix64(mprt_dropout_seed + 0x9e3779b97f4a7c15ULL);
    k = mprt_mix64(k ^ (node * 0xd1b54a32d192ed03ULL));
    return mprt_mix64(k ^ ((uint64_t)mb * 0x8cb92ba72f3d8dd7ULL));
}

MPRT_KERNEL uint64_t mprt_dropout_key(uint64_t node)
{
    return mprt_dropout_key_at(node, mprt_dropout_mb);
}

/* v[0] = the sum of v[0 .. r) of n floats, as the tree of comm.c's
 * mprt_tree_add adds micro-batches: halves of a power of two; else the
 * largest power of two below r, then the rest. acc(n, sum, g, 0) adds g
 * into sum, on the device that holds them (the host's loop, or a GPU's
 * kernel on its current stream). */
MPRT_KERNEL void mprt_tree_with(void (*acc)(long, float *, const float *, int),
                                float *const *v, int r, long n)
{
    if (r == 1)
        return;
    int p = 1;
    while (2 * p < r)
        p *= 2;
    mprt_tree_with(acc, v, p, n);
    mprt_tree_with(acc, v + p, r - p, n);
    acc(n, v[0], v[p], 0);
}

/* The factor that clips the gradients to a global L2 norm, as
 * torch.nn.utils.clip_grad_norm_, from every parameter's share (summed in
 * the table's order, the same on every layout), on the host for every kind
 * of device. */
MPRT_KERNEL float mprt_clip_scale(int k, const double *sq, float max_norm)
{
    double s = 0;
    for (int j = 0; j < k; j++)
        s += sq[j];
    double c = max_norm / (sqrt(s) + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}
