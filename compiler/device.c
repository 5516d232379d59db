/* device.c — the devices a step runs on, and the cost model behind every
 * prediction: a roofline per node (FLOPs over the device's sustained rate,
 * bytes over its memory bandwidth, plus a fixed overhead per kernel) and a
 * latency-bandwidth model per link.
 *
 * Profiles are built in (cpu, h100-sxm, h100-pcie, a100) or read from a
 * file of `key = value` lines; the cpu profile measures this machine with a
 * short calibration when mpcc starts. --measured replaces estimates with
 * the per-node times a trainer recorded (./train --profile).
 */
#include "mpcc.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Figures from NVIDIA's documents (docs/pipeline.md names them): the dense
 * peaks of fp32 (CUDA cores), TF32 and bf16 (tensor cores), derated to what
 * training kernels sustain: 80% of the fp32 peak and of the memory
 * bandwidth, 70% of the tensor-core peaks; links at 80% of one direction.
 * Matrix products and convolutions run at the rate of the precision in
 * effect (fp32 unless --tf32), everything else at the fp32 rate. */
typedef struct Builtin {
    const char *name;
    double fp32, tf32, bf16;         /* dense peak FLOP/s */
    double hbm;                      /* bytes/s */
    double peer, host;               /* bytes/s, one direction */
} Builtin;

static const Builtin builtin[] = {
    {"h100-sxm", 66.9e12, 494.7e12, 989.4e12, 3.35e12, 450e9, 64e9},
    {"h100-pcie", 51.2e12, 378e12, 756e12, 2.0e12, 64e9, 64e9},
    {"a100", 19.5e12, 156e12, 312e12, 2.039e12, 300e9, 32e9},
};

enum { NBUILTIN = sizeof builtin / sizeof builtin[0] };

static Profile gpu_profile(const Builtin *b, bool tf32)
{
    Profile p = {b->name, 0.8 * b->fp32, 0.8 * b->hbm, 5e-6, 80LL << 30, 0.8 * b->peer, 3e-6,
                 0.8 * b->host, 10e-6};
    if (strcmp(b->name, "h100-pcie") == 0)
        p.peer_latency = 10e-6;   /* no NVLink: peer copies cross PCIe */
    p.matrix_flops = 0.8 * b->fp32;
    p.tf32_flops = 0.7 * b->tf32;
    p.bf16_flops = 0.7 * b->bf16;
    if (tf32)
        p.matrix_flops = p.tf32_flops;
    return p;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* This machine, measured: a small blocked multiply-add loop for the FLOP
 * rate and a large copy for the bandwidth; about 30 ms. Single-threaded,
 * as one CPU device is one worker thread. */
static volatile float calib_sink;

static double calibrate_flops(void)
{
    enum { N = 64 };
    static float a[N * N], b[N * N], c[N * N];
    for (int i = 0; i < N * N; i++)
        a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f;
    double t0 = now(), t;
    int reps = 0;
    do {
        for (int i = 0; i < N; i++)
            for (int k = 0; k < N; k++) {
                float s = a[i * N + k];
                for (int j = 0; j < N; j++)
                    c[i * N + j] += s * b[k * N + j];
            }
        reps++;
        t = now() - t0;
    } while (t < 0.015);
    calib_sink = c[reps % (N * N)];
    return 2.0 * N * N * N * reps / t;
}

static double calibrate_bandwidth(void)
{
    size_t n = (size_t)16 << 20;
    char *src = malloc(n), *dst = malloc(n);
    if (!src || !dst) {
        free(src);
        free(dst);
        return 5e9;
    }
    memset(src, 1, n);
    memset(dst, 0, n);
    double t0 = now(), t;
    int reps = 0;
    do {
        memcpy(dst, src, n);
        src[reps % n] = (char)reps;
        reps++;
        t = now() - t0;
    } while (t < 0.015);
    calib_sink = dst[reps % n];
    free(src);
    free(dst);
    return 2.0 * (double)n * reps / t;   /* read and write */
}

static Profile cpu_profile(void)
{
    static Profile p;
    if (!p.name) {
        const char *fixed = getenv("MPCC_CPU_PROFILE");   /* "FLOPS,BYTES": tests pin it */
        double f = 0, b = 0;
        if (!fixed || sscanf(fixed, "%lf,%lf", &f, &b) != 2 || f <= 0 || b <= 0) {
            f = calibrate_flops() * 4;   /* the kernels vectorise what the loop does not */
            b = calibrate_bandwidth();
        }
        p = (Profile){"cpu", f, b, 2e-6, 0, b / 2, 5e-6, b / 2, 5e-6};
        p.memory = (int64_t)16 << 30;
        p.matrix_flops = p.tf32_flops = p.bf16_flops = f;
    }
    return p;
}

/* ---- profile files: `key = value` lines, # comments ---- */

static void profile_set(const char *path, int line, Profile *p, const char *key, double v)
{
    struct { const char *key; double *field; } fields[] = {
        {"flops", &p->flops}, {"bandwidth", &p->bandwidth}, {"overhead", &p->overhead},
        {"peer_bandwidth", &p->peer_bw}, {"peer_latency", &p->peer_latency},
        {"host_bandwidth", &p->host_bw}, {"host_latency", &p->host_latency},
        {"matrix_flops", &p->matrix_flops}, {"tf32_flops", &p->tf32_flops},
        {"bf16_flops", &p->bf16_flops},
    };
    if (strcmp(key, "memory") == 0) {
        p->memory = (int64_t)v;
        return;
    }
    if (strcmp(key, "peer_access") == 0) {
        if (v != 0 && v != 1)
            error_file(path, "line %d: peer_access is 1 (the default) or 0 (copies between "
                       "GPUs are staged through host memory)", line);
        p->no_peer = v == 0;
        return;
    }
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(key, fields[i].key) == 0) {
            *fields[i].field = v;
            return;
        }
    error_file(path, "line %d: unknown key '%s' (known: flops, matrix_flops, tf32_flops, "
               "bf16_flops, bandwidth, overhead, memory, peer_bandwidth, peer_latency, "
               "peer_access, host_bandwidth, host_latency)", line, key);
}

static Profile read_profile(Arena *a, const char *path, Profile base, bool tf32)
{
    FILE *f = fopen(path, "r");
    if (!f)
        error_file(path, "not a built-in profile (cpu, h100-sxm, h100-pcie, a100) and "
                   "cannot be read as a profile file: %s", strerror(errno));
    Profile p = base;
    p.name = arena_strdup(a, path);
    p.flops = p.matrix_flops = -1;   /* given or not */
    char line[512], key[64];
    for (int no = 1; fgets(line, sizeof line, f); no++) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        double v;
        char rest;
        if (sscanf(line, " %63[a-z0-9_] = %lf %c", key, &v, &rest) == 2 && v >= 0)
            profile_set(path, no, &p, key, v);
        else if (strspn(line, " \t\r\n") != strlen(line))
            error_file(path, "line %d: expected 'key = number'", no);
    }
    fclose(f);
    bool flops_given = p.flops >= 0;
    p.flops = flops_given ? p.flops : base.flops;
    if (p.matrix_flops < 0)   /* a file that sets flops alone means every node at that rate */
        p.matrix_flops = flops_given ? p.flops : base.matrix_flops;
    if (p.flops <= 0 || p.bandwidth <= 0 || p.peer_bw <= 0 || p.host_bw <= 0 ||
        p.matrix_flops <= 0 || p.tf32_flops <= 0 || p.bf16_flops <= 0)
        error_file(path, "the rates (flops, matrix_flops, tf32_flops, bf16_flops, bandwidth and "
                   "the link bandwidths) must be positive");
    if (tf32)
        p.matrix_flops = p.tf32_flops;
    return p;
}

static Profile profile_for(Arena *a, const Options *o, DevKind kind)
{
    const char *name = o->pipe.profile;
    bool tf32 = o->tf32 && kind == DEV_CUDA;
    if (!name)
        return kind == DEV_CPU ? cpu_profile() : gpu_profile(&builtin[0], tf32);
    if (strcmp(name, "cpu") == 0)
        return cpu_profile();
    for (int i = 0; i < NBUILTIN; i++)
        if (strcmp(name, builtin[i].name) == 0)
            return gpu_profile(&builtin[i], tf32);
    return read_profile(a, name, kind == DEV_CPU ? cpu_profile() : gpu_profile(&builtin[0], false),
                        tf32);
}

/* ---- the device list ---- */

static void add_device(Arena *a, Devices *ds, DevKind kind, int ordinal, const Options *o)
{
    ds->d = arena_grow(a, ds->d, (size_t)ds->n, (size_t)ds->n + 1, sizeof(Device));
    Device *d = &ds->d[ds->n++];
    d->kind = kind;
    d->ordinal = ordinal;
    d->name = arena_printf(a, "%s:%d", kind == DEV_CPU ? "cpu" : "cuda", ordinal);
    d->prof = profile_for(a, o, kind);
}

static void parse_device_list(Arena *a, const Options *o, Devices *ds)
{
    char *copy = arena_strdup(a, o->pipe.devices);
    int next_cpu = 0;
    for (char *w = strtok(copy, ","); w; w = strtok(NULL, ",")) {
        int ordinal;
        char rest;
        if (strcmp(w, "cpu") == 0)
            add_device(a, ds, DEV_CPU, next_cpu++, o);
        else if (sscanf(w, "cpu:%d%c", &ordinal, &rest) == 1 && ordinal >= 0)
            add_device(a, ds, DEV_CPU, ordinal, o), next_cpu = ordinal + 1;
        else if (sscanf(w, "cuda:%d%c", &ordinal, &rest) == 1 && ordinal >= 0)
            add_device(a, ds, DEV_CUDA, ordinal, o);
        else
            error_file(o->input, "--devices: '%s' is not a device (write cpu, cpu:N or "
                       "cuda:N, separated by commas)", w);
    }
    for (int i = 0; i < ds->n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(ds->d[i].name, ds->d[j].name) == 0)
                error_file(o->input, "--devices names %s twice", ds->d[i].name);
}

Devices devices_resolve(Arena *a, const Options *o)
{
    Devices ds = {0};
    if (o->pipe.devices && (o->cpus || o->gpus))
        error_file(o->input, "give either --devices or -cpus/-gpus, not both");
    if (o->pipe.devices)
        parse_device_list(a, o, &ds);
    for (int i = 0; i < o->gpus; i++)
        add_device(a, &ds, DEV_CUDA, i, o);
    for (int i = 0; i < o->cpus; i++)
        add_device(a, &ds, DEV_CPU, i, o);
    if (ds.n == 0)
        add_device(a, &ds, DEV_CPU, 0, o);
    return ds;
}

/* Two devices of one kind talk over their peer link (NVLink, or shared
 * memory between CPU threads); anything else goes through host memory.
 * Without peer access a copy between two devices of one kind is staged
 * through host memory: out of one and into the other, in chunks that
 * overlap, so at the host link's rate after two of its latencies. */
static bool peer_link(const Devices *ds, int a, int b)
{
    return ds->d[a].kind == ds->d[b].kind && !ds->d[a].prof.no_peer && !ds->d[b].prof.no_peer;
}

double link_bandwidth(const Devices *ds, int a, int b)
{
    const Profile *pa = &ds->d[a].prof, *pb = &ds->d[b].prof;
    if (peer_link(ds, a, b))
        return fmin(pa->peer_bw, pb->peer_bw);
    return fmin(pa->host_bw, pb->host_bw);
}

double link_latency(const Devices *ds, int a, int b)
{
    const Profile *pa = &ds->d[a].prof, *pb = &ds->d[b].prof;
    if (peer_link(ds, a, b))
        return fmax(pa->peer_latency, pb->peer_latency);
    double hop = fmax(pa->host_latency, pb->host_latency);
    return ds->d[a].kind == ds->d[b].kind ? 2 * hop : hop;
}

/* ---- the cost of one node ---- */

static double numel_of(const Graph *g, uint32_t v)
{
    return v == NONE ? 0 : (double)shape_numel(&g->values[v].shape);
}

static double bytes_of(const Graph *g, uint32_t v)
{
    return v == NONE ? 0 : numel_of(g, v) * (double)dtype_size(g->values[v].dtype);
}

/* Multiply-adds per output element of the matrix products and convolutions. */
static double contraction(const Graph *g, const Node *n)
{
    const Shape *a = n->nin ? &g->values[n->in[0]].shape : NULL;
    switch (n->op) {
    case OP_GEMM:
        return (double)a->d[attr_int(n, "transA", 0) ? 0 : 1];
    case OP_MATMUL: case OP_BATCH_MATMUL:
        if (a->rank == 1)
            return (double)a->d[0];
        return (double)a->d[a->rank - (attr_int(n, "transA", 0) ? 2 : 1)];
    case OP_CONV: case OP_CONV_GRAD_X: {
        const Shape *w = &g->values[n->in[1]].shape;
        return numel_of(g, n->in[1]) / (double)w->d[0];
    }
    case OP_CONV_GRAD_W: {
        const Shape *w = &g->values[n->out[0]].shape;
        return numel_of(g, n->out[0]) / (double)w->d[0];
    }
    default:
        return 0;
    }
}

NodeCost node_cost(const Graph *g, const Node *n)
{
    NodeCost c = {0, 0};
    for (uint32_t k = 0; k < n->nin; k++)
        c.bytes += bytes_of(g, n->in[k]);
    for (uint32_t k = 0; k < n->nout; k++)
        c.bytes += bytes_of(g, n->out[k]);
    double k = contraction(g, n);
    uint32_t big = n->op == OP_CONV_GRAD_X || n->op == OP_CONV_GRAD_W ? n->in[0] : n->out[0];
    if (k > 0)
        c.flops = 2.0 * numel_of(g, big) * k;
    else
        c.flops = n->nout ? 4.0 * numel_of(g, n->out[0]) : 0;
    return c;
}

/* The scratch memory a node's kernel uses while it runs: the CPU
 * convolutions' patch matrix (one image and group at a time, as
 * runtime/cpu.c computes it), a cross-entropy's log-probabilities. */
int64_t node_workspace(const Graph *g, const Node *n)
{
    uint32_t w, y;
    switch (n->op) {
    case OP_CONV: case OP_CONV_GRAD_X: w = n->in[1], y = n->op == OP_CONV ? n->out[0] : n->in[0]; break;
    case OP_CONV_GRAD_W: w = n->out[0], y = n->in[0]; break;
    case OP_CONV_TRANSPOSE: w = n->in[1], y = n->in[0]; break;   /* a convolution's backward */
    case OP_SOFTMAX_CE:   /* the log-probabilities, when no output keeps them */
        if (n->nout > 1 && n->out[1] != NONE)
            return 0;
        return (int64_t)shape_numel(&g->values[n->in[0]].shape) * (int64_t)sizeof(float);
    default: return 0;
    }
    const Shape *ws = &g->values[w].shape, *ys = &g->values[y].shape;
    int64_t k = 1, p = 1;   /* patch rows C/group * KH * KW, columns OH * OW (1-D: OW) */
    for (int i = 1; i < ws->rank; i++)
        k *= ws->d[i];
    for (int i = 2; i < ys->rank; i++)
        p *= ys->d[i];
    return k * p * (int64_t)sizeof(float);
}

double node_time(const Graph *g, const Node *n, const Profile *p, const Measured *m)
{
    if (m) {
        double t = measured_time(m, n->name, n->phase);
        if (t >= 0)
            return t;
    }
    NodeCost c = node_cost(g, n);
    double rate = contraction(g, n) > 0 ? p->matrix_flops : p->flops;
    return fmax(c.flops / rate, c.bytes / p->bandwidth) + p->overhead;
}
