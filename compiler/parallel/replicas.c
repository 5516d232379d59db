/* replicas.c — data parallelism: --data-parallel=R copies of the pipeline,
 * each training on its own rows of every batch, their gradients summed
 * before the update; --nodes=K processes, one per machine, started by
 * mpirun.
 *
 * This version runs on CPU devices: R/K replicas in each process, each on
 * its own N/(R/K) of the process's -cpus N devices, the sum between the
 * replicas of a process in its memory and between processes over MPI
 * (runtime/comm.c). The plan is one replica's: -batch B with M
 * micro-batches becomes B/R rows in M/R micro-batches on N/(R/K)
 * devices; the trainer runs R/K copies of it.
 *
 * The sum's order is fixed so that every layout gives the same bits: a
 * pairwise tree over the step's micro-batches, in their order. Replica r
 * sums its micro-batches r*M/R .. (r+1)*M/R - 1, a subtree when M/R is a
 * power of two; the sums of the replicas are then added as the same tree
 * adds micro-batches (docs/distributed.md).
 */
#include "mpcc.h"

#include <string.h>

static bool power_of_two(int n)
{
    return n > 0 && (n & (n - 1)) == 0;
}

static bool has_cuda(const Options *o)
{
    return o->gpus > 0 || (o->pipe.devices && strstr(o->pipe.devices, "cuda"));
}

/* The devices of one process: -gpus N, else -cpus N (1 when neither). */
static int devices_given(const Options *o)
{
    return o->gpus > 0 ? o->gpus : o->cpus > 0 ? o->cpus : 1;
}

/* What this version does not build yet, each as one line that says what
 * to give instead. */
static void check_layout(const Options *o, int R, int K)
{
    if (o->infer)
        error_file(o->input, "--data-parallel and --nodes are for training; drop them "
                   "with --infer");
    if (R < K && K % R == 0)   /* each replica one pipeline across K/R processes */
        return;
    if (R % K)
        error_file(o->input, "--data-parallel=%d with --nodes=%d: each process holds whole "
                   "replicas, the same number each, or each replica spans the same number of "
                   "processes; give a divisor or a multiple of %d", R, K, K);
    int RL = R / K;
    if (RL > 1 && K > 1 && (RL & (RL - 1)))
        error_file(o->input, "--data-parallel=%d over --nodes=%d: %d replicas in each process "
                   "must be a power of two (their sum is a subtree of the fixed tree over "
                   "every replica)", R, K, RL);
    int N = devices_given(o);
    if (RL > 1 && N % RL)
        error_file(o->input, "--data-parallel=%d: %d replicas in each process need -%s N "
                   "with N a multiple of %d (each replica on N/%d devices), got -%s %d",
                   R, RL, has_cuda(o) ? "gpus" : "cpus", RL, RL, has_cuda(o) ? "gpus" : "cpus",
                   N);
}

/* --zero=1: over replicas that each hold whole stages (GPUs: one per
 * process, over NCCL). */
static void check_zero(const Options *o, int R, int K)
{
    if (!o->pipe.zero)
        return;
    if (R <= 1 || R < K)
        error_file(o->input, "--zero=1 shards the optimizer state over replicas that each "
                   "hold whole stages: give --data-parallel=R with R > 1 and R a multiple of "
                   "--nodes");
    if (R > K && has_cuda(o))
        error_file(o->input, "--zero=1 with %d replicas in each process is built for CPU "
                   "devices (-cpus N); on GPUs give a replica per process: --data-parallel=%d "
                   "--nodes=%d", R / K, R, R);
}

/* -batch and --microbatches split evenly over the replicas, each replica's
 * micro-batches a power of two (the tree's subtree). */
static void check_split(const Options *o, int R)
{
    if (!o->batch)
        error_file(o->input, "--data-parallel=%d needs -batch N, the rows of a step over "
                   "every replica", R);
    if (o->batch % R)
        error_file(o->input, "-batch %lld does not split over %d replicas; give a multiple "
                   "of %d", (long long)o->batch, R, R);
    if (!o->pipe.micro_given)
        return;
    int M = o->train.microbatches;
    if (M % R || !power_of_two(M / R))
        error_file(o->input, "--microbatches=%d over %d replicas: each replica needs a power "
                   "of two of them (the gradient sum is a fixed tree over the micro-batches); "
                   "give --microbatches=%d or %d", M, R, R, 2 * R);
}

/* --devices with --data-parallel or --nodes: one process's devices, all of
 * one kind and in order from 0, taken as -cpus N or -gpus N. */
static void devices_as_count(Options *o)
{
    char list[256];
    int n = 0, kinds = 0, in_order = 1;
    if (snprintf(list, sizeof list, "%s", o->pipe.devices) >= (int)sizeof list)
        error_file(o->input, "--devices: the list is too long with --data-parallel or "
                   "--nodes; give -cpus N or -gpus N");
    for (char *w = strtok(list, ","); w; w = strtok(NULL, ","), n++) {
        int k = -1;
        char rest;
        bool cuda = strncmp(w, "cuda", 4) == 0;
        if (strcmp(w, "cpu") == 0)
            k = n;
        else if (sscanf(w, cuda ? "cuda:%d%c" : "cpu:%d%c", &k, &rest) != 1)
            error_file(o->input, "--devices: '%s' is not a device (write cpu, cpu:N or "
                       "cuda:N, separated by commas)", w);
        kinds |= cuda ? 2 : 1;
        in_order = in_order && k == n;
    }
    if (kinds == 3)
        error_file(o->input, "--devices=%s with --data-parallel or --nodes: replicas of CPU "
                   "and CUDA devices mixed are not built; give -cpus N or -gpus N",
                   o->pipe.devices);
    if (!in_order)
        error_file(o->input, "--devices=%s with --data-parallel or --nodes: name the devices "
                   "in order from 0 (%s:0,%s:1,...), or give -%s %d (to pick GPUs, set "
                   "CUDA_VISIBLE_DEVICES)", o->pipe.devices, kinds == 2 ? "cuda" : "cpu",
                   kinds == 2 ? "cuda" : "cpu", kinds == 2 ? "gpus" : "cpus", n);
    *(kinds == 2 ? &o->gpus : &o->cpus) = n;
    o->pipe.devices = NULL;
}

void replicas_apply(Options *o)
{
    PipeOptions *p = &o->pipe;
    if (p->nodes < 1)
        p->nodes = 1;
    if (p->devices && (o->cpus || o->gpus))
        error_file(o->input, "give either --devices or -cpus/-gpus, not both");
    if (p->devices && (p->replicas || p->nodes > 1))
        devices_as_count(o);
    if (!p->replicas && p->nodes == 1 && p->zero)
        error_file(o->input, "--zero=1 shards the optimizer state over replicas: give "
                   "--data-parallel=R with R > 1 (and --nodes=K to spread them over processes)");
    if (!p->replicas && p->nodes == 1)
        return;
    int K = p->nodes;
    if (p->replicas == REPLICAS_AUTO || !p->replicas) {   /* driver.c searches auto */
        p->replicas = K;
        Loc loc = {.file = o->input, .index = -1};
        note_once(&loc, "--nodes=%d: %d replicas, one per process (--data-parallel=%d)", K, K,
                  K);
    }
    int R = p->replicas;
    check_layout(o, R, K);
    check_zero(o, R, K);
    check_split(o, R);
    o->batch /= R;
    if (p->micro_given)
        o->train.microbatches /= R;
    p->replicas_here = R >= K ? R / K : 1;
    int *count = has_cuda(o) ? &o->gpus : &o->cpus, N = devices_given(o);
    if (p->replicas_here > 1)
        *count = N / p->replicas_here;   /* one replica's devices */
    if (R < K) {   /* the plan spans the devices of a replica's K/R processes */
        p->node_devs = N;
        *count = N * (K / R);
    }
}

/* R = K * RL with RL dividing each process's devices (a power of two over
 * several processes), the batch and the micro-batches split evenly, each
 * replica's a power of two; and R dividing K, each replica one pipeline
 * across K/R processes (R = 1: one pipeline across them all). */
int replicas_candidates(const Options *o, int *R, int max)
{
    int K = o->pipe.nodes > 0 ? o->pipe.nodes : 1, N = devices_given(o), n = 0;
    for (int r = 1; r < K && n < max; r++)   /* each replica a pipeline across K/r processes */
        if (K % r == 0 && (r == 1 || (o->batch && o->batch % r == 0 &&
                                      (!o->pipe.micro_given || (o->train.microbatches % r == 0 &&
                                       power_of_two(o->train.microbatches / r))))))
            R[n++] = r;
    for (int RL = 1; RL <= N && n < max; RL++) {
        int r = K * RL, M = o->train.microbatches;
        if (N % RL || (K > 1 && !power_of_two(RL)) || !o->batch || o->batch % r)
            continue;
        if (o->pipe.micro_given && (M % r || !power_of_two(M / r)))
            continue;
        R[n++] = r;
    }
    return n;
}

bool replicas_tree(const Options *o)
{
    return o->pipe.replicas > 0;
}

/* Micro-batch k of a replica's count goes in at level 0 and carries up
 * while k's bits are ones (runtime/program.c): level l holds a sum of 2^l
 * micro-batches. A power of two ends on the level below its own. */
int tree_top(int count)
{
    int top = 0;
    while ((2 << top) <= count)
        top++;
    return power_of_two(count) && count > 1 ? top - 1 : top;
}

int tree_levels(int count)
{
    return tree_top(count) + 1;
}

/* The link between nodes: the profile's, else 400 Gb/s InfiniBand for
 * GPUs and 10 Gb/s Ethernet for CPUs, at 80% of one direction. */
double node_bandwidth(const Devices *ds)
{
    const Profile *p = &ds->d[0].prof;
    return p->node_bw > 0 ? p->node_bw : ds->d[0].kind == DEV_CUDA ? 0.8 * 50e9 : 0.8 * 1.25e9;
}

double node_latency(const Devices *ds)
{
    const Profile *p = &ds->d[0].prof;
    return p->node_latency > 0 ? p->node_latency : ds->d[0].kind == DEV_CUDA ? 5e-6 : 30e-6;
}


/* The replicas of a process add their shares in memory (each reads its
 * share of every copy, and the others read the sum back: RL + 1 passes of
 * the bytes at the device's copy bandwidth, over RL threads); the
 * processes then exchange as a ring reduce-scatter and all-gather, each
 * sending and receiving 2 (K-1)/K of the bytes in 2 (K-1) steps. Under
 * --zero=1 (without --clip-norm, which sums whole) the sum is the
 * reduce-scatter alone, half of that; the all-gather of the updated
 * weights follows in the update (zero_gather_seconds). */
double replica_sum_seconds(const Options *o, const Devices *ds, double bytes)
{
    int R = o->pipe.replicas, RL = o->pipe.replicas_here;
    int K = R / (RL > 1 ? RL : 1);   /* the processes that sum each stage */
    if (R <= 1)
        return 0;
    double t = 0;
    if (RL > 1 && ds->d[0].kind == DEV_CUDA) {   /* a ring over the peer links */
        const Profile *p = &ds->d[0].prof;
        t += 2.0 * (RL - 1) / RL * bytes / p->peer_bw + 2.0 * (RL - 1) * p->peer_latency;
    } else if (RL > 1) {
        const Profile *p = &ds->d[0].prof;
        double copy = p->copy_bw > 0 ? p->copy_bw : p->bandwidth;
        t += (RL + 1) * bytes / RL / copy;
    }
    if (K > 1) {
        double half = (double)(K - 1) / K * bytes / node_bandwidth(ds) + (K - 1) * node_latency(ds);
        t += o->pipe.zero && o->train.clip_norm <= 0 ? half : 2 * half;
    }
    return t;
}

/* --zero=1: the update's all-gather of a stage's `bytes` of updated
 * weights between the K processes, a ring's second half; 0 otherwise. */
double zero_gather_seconds(const Options *o, const Devices *ds, double bytes)
{
    int K = o->pipe.replicas;
    if (!o->pipe.zero || K <= 1)
        return 0;
    return (double)(K - 1) / K * bytes / node_bandwidth(ds) + (K - 1) * node_latency(ds);
}

/* The bytes of a stage's gradients: what it sums over the replicas. */
double stage_grad_bytes(const Graph *g, const Stages *st, int stage)
{
    double bytes = 0;
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].trainable && st->home[v] == stage)
            bytes += (double)shape_numel(&g->values[v].shape) * sizeof(float);
    return bytes;
}

/* The kind of each stage's action that finishes its last gradients: the
 * weight gradients where the schedule runs them apart (zb) and the stage
 * has any there, else the backward. */
static void last_grads(Plan *p)
{
    const Graph *g = p->g;
    p->last_grad = arena_array(g->arena, (size_t)p->st->n + 1, sizeof(int));
    for (int s = 0; s < p->st->n; s++)
        p->last_grad[s] = ACT_BWD;
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].trainable && p->st->home[v] >= 0 &&
            p->st->act[g->values[g->values[v].grad].producer] == ACT_WGRAD)
            p->last_grad[p->st->home[v]] = ACT_WGRAD;
}

/* With replicas, each stage's parameters in buckets of at most
 * --bucket-mb (25 by default, as PyTorch's DistributedDataParallel; a
 * larger parameter is a bucket alone), from the last update of the
 * stage's update action back: the backward finishes the last layers'
 * gradients first. */
void plan_buckets(Plan *p, const Options *o)
{
    last_grads(p);
    if (o->pipe.replicas <= 1 || o->infer)
        return;
    const Graph *g = p->g;
    double cap = (o->pipe.bucket_mb > 0 ? o->pipe.bucket_mb : 25) * 1e6;
    for (int s = 0; s < p->st->n; s++) {
        const uint32_t *nodes = p->nodes[(size_t)s * ACT_KINDS + ACT_UPDATE];
        int end = p->nnodes[(size_t)s * ACT_KINDS + ACT_UPDATE];
        for (int index = 0; end > 0; index++) {
            int first = end;
            double bytes = 0;
            while (first > 0) {
                const Value *w = &g->values[g->nodes[nodes[first - 1]].in[0]];
                double more = (double)shape_numel(&w->shape) * sizeof(float);
                if (first < end && bytes + more > cap)
                    break;
                bytes += more;
                first--;
            }
            p->buckets = arena_grow(g->arena, p->buckets, (size_t)p->nbuckets,
                                    (size_t)p->nbuckets + 1, sizeof(Bucket));
            p->buckets[p->nbuckets++] = (Bucket){.stage = s, .index = index, .first = first,
                                                 .count = end - first, .bytes = bytes};
            end = first;
        }
    }
}
