/* device.c — the devices a step runs on, and the cost model behind every
 * prediction: a roofline per node (FLOPs over the device's sustained rate,
 * bytes over its memory bandwidth, plus a fixed overhead per kernel) and a
 * latency-bandwidth model per link.
 *
 * Profiles are built in (cpu, h100-sxm, h100-pcie, a100) or read from a
 * file of `key = value` lines; the cpu profile measures this machine with a
 * short calibration when mpcc starts (calibrate.c). What one node costs with
 * a profile is cost.c's.
 */
#include "mpcc.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Figures from NVIDIA's documents (docs/pipeline.md names them): the dense
 * peaks of fp32 (CUDA cores), TF32 and bf16 (tensor cores), derated to what
 * training kernels sustain: 80% of the fp32 peak and of the memory
 * bandwidth, 70% of the tensor-core peaks; links at 80% of one direction.
 * Matrix products and convolutions run at the rate of the precision in
 * effect (fp32, or --precision's tf32 or bf16), everything else at the
 * fp32 rate. */
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

/* The rate of the matrix products under precision `prec`. */
static void matrix_rate(Profile *p, Precision prec)
{
    if (prec == PREC_TF32)
        p->matrix_flops = p->tf32_flops;
    else if (prec == PREC_BF16)
        p->matrix_flops = p->bf16_flops;
}

static Profile gpu_profile(const Builtin *b, Precision prec)
{
    Profile p = {b->name, 0.8 * b->fp32, 0.8 * b->hbm, 5e-6, 80LL << 30, 0.8 * b->peer, 3e-6,
                 0.8 * b->host, 10e-6};
    if (strcmp(b->name, "h100-pcie") == 0)
        p.peer_latency = 10e-6;   /* no NVLink: peer copies cross PCIe */
    p.matrix_flops = 0.8 * b->fp32;
    p.tf32_flops = 0.7 * b->tf32;
    p.bf16_flops = 0.7 * b->bf16;
    p.graph_overhead = 1e-6;   /* a kernel node of a captured step: an estimate */
    matrix_rate(&p, prec);
    return p;
}

/* ---- profile files: `key = value` lines, # comments ---- */

static void profile_set(const char *path, int line, Profile *p, const char *key, double v)
{
    struct { const char *key; double *field; } fields[] = {
        {"flops", &p->flops}, {"bandwidth", &p->bandwidth}, {"overhead", &p->overhead},
        {"graph_overhead", &p->graph_overhead},
        {"peer_bandwidth", &p->peer_bw}, {"peer_latency", &p->peer_latency},
        {"host_bandwidth", &p->host_bw}, {"host_latency", &p->host_latency},
        {"node_bandwidth", &p->node_bw}, {"node_latency", &p->node_latency},
        {"matrix_flops", &p->matrix_flops}, {"tf32_flops", &p->tf32_flops},
        {"bf16_flops", &p->bf16_flops}, {"call_overhead", &p->call_overhead},
        {"copy_bandwidth", &p->copy_bw}, {"norm_bandwidth", &p->norm_bw},
        {"shared_bandwidth", &p->shared_bw}, {"gemm_bandwidth", &p->gemm_bw},
        {"patch_bandwidth", &p->patch_bw}, {"patch_row", &p->patch_row},
        {"transpose_bandwidth", &p->transpose_bw}, {"window_rate", &p->window_rate},
        {"norm_row", &p->norm_row}, {"blas_matrix_flops", &p->blas_flops},
        {"blas_gemm_bandwidth", &p->blas_bw}, {"blas_call_overhead", &p->blas_call},
        {"bw64k", &p->bw_at[0]}, {"bw512k", &p->bw_at[1]}, {"bw4m", &p->bw_at[2]},
        {"bw16m", &p->bw_at[3]}, {"bw64m", &p->bw_at[4]},
    };
    if (strncmp(key, "shared.", 7) == 0)
        return;   /* the measured cache's rates of two CPU devices at once: see calibrate.c */
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
               "bf16_flops, bandwidth, copy_bandwidth, norm_bandwidth, shared_bandwidth, "
               "gemm_bandwidth, patch_bandwidth, patch_row, transpose_bandwidth, window_rate, norm_row, blas_matrix_flops, blas_gemm_bandwidth, blas_call_overhead, bw64k..bw64m, overhead, call_overhead, memory, peer_bandwidth, peer_latency, peer_access, "
               "host_bandwidth, host_latency, node_bandwidth, node_latency)", line, key);
}

static Profile read_profile(Arena *a, const char *path, Profile base, Precision prec)
{
    FILE *f = fopen(path, "r");
    if (!f)
        error_file(path, "not a built-in profile (cpu, h100-sxm, h100-pcie, a100) and "
                   "cannot be read as a profile file: %s", strerror(errno));
    Profile p = base;
    p.name = arena_strdup(a, path);
    p.flops = p.matrix_flops = p.bandwidth = p.copy_bw = p.norm_bw = p.shared_bw = -1;
    p.gemm_bw = p.patch_bw = p.transpose_bw = p.bw_at[0] = p.blas_flops = -1;
    char line[512], key[64];
    for (int no = 1; fgets(line, sizeof line, f); no++) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        double v;
        char rest;
        if (sscanf(line, " %63[a-z0-9_.] = %lf %c", key, &v, &rest) == 2 && v >= 0)
            profile_set(path, no, &p, key, v);
        else if (strspn(line, " \t\r\n") != strlen(line))
            error_file(path, "line %d: expected 'key = number'", no);
    }
    fclose(f);
    /* a file that sets flops (bandwidth) alone means every node at that rate */
    bool flops_given = p.flops >= 0, bw_given = p.bandwidth >= 0;
    p.flops = flops_given ? p.flops : base.flops;
    p.bandwidth = bw_given ? p.bandwidth : base.bandwidth;
    bool matrix_given = p.matrix_flops >= 0;
    if (!matrix_given)
        p.matrix_flops = flops_given ? p.flops : base.matrix_flops;
    if (p.blas_flops < 0)   /* OpenBLAS's GEMM: as the file's GEMM, else the base's */
        p.blas_flops = matrix_given || flops_given ? 0 : base.blas_flops;
    if (p.gemm_bw < 0 && bw_given)
        p.blas_bw = 0;
    double *bws[] = {&p.copy_bw, &p.norm_bw, &p.shared_bw, &p.gemm_bw, &p.patch_bw,
                     &p.transpose_bw};
    double base_bws[] = {base.copy_bw, base.norm_bw, base.shared_bw, base.gemm_bw, base.patch_bw,
                         base.transpose_bw};
    for (int i = 0; i < 6; i++)
        if (*bws[i] < 0)
            *bws[i] = bw_given ? p.bandwidth : base_bws[i];
    if (p.bw_at[0] < 0)   /* no curve given: one rate whatever the working set, or the base's */
        for (int i = 0; i < BW_POINTS; i++)
            p.bw_at[i] = bw_given ? p.bandwidth : base.bw_at[i];
    if (p.flops <= 0 || p.bandwidth <= 0 || p.peer_bw <= 0 || p.host_bw <= 0 ||
        p.matrix_flops <= 0 || p.tf32_flops <= 0 || p.bf16_flops <= 0)
        error_file(path, "the rates (flops, matrix_flops, tf32_flops, bf16_flops, bandwidth and "
                   "the link bandwidths) must be positive");
    matrix_rate(&p, prec);
    return p;
}

/* A CPU profile priced for the GEMM the trainer will call: OpenBLAS's
 * rates where the kernels are builtin (--cpu-kernels=builtin, --infer). */
static Profile cpu_gemm(Profile p, const Options *o)
{
    int kernels = o->infer ? KERNELS_BUILTIN : (int)o->cpu_kernels;   /* as bind.c */
    if (!kernels_gemm_onednn(kernels) && p.blas_flops > 0) {
        p.matrix_flops = p.blas_flops;
        p.gemm_bw = p.blas_bw > 0 ? p.blas_bw : p.gemm_bw;
        p.call_overhead = p.blas_call > 0 ? p.blas_call : p.call_overhead;
    }
    p.blas_flops = p.blas_bw = p.blas_call = 0;   /* applied: the GEMM in effect */
    return p;
}

static Profile profile_named(Arena *a, const Options *o, DevKind kind)
{
    const char *name = o->pipe.profile;
    /* a CPU device computes bf16 in fp32 (docs/precision.md) */
    Precision prec = kind == DEV_CUDA ? o->precision : PREC_FP32;
    if (!name)
        return kind == DEV_CPU ? cpu_profile(false) : gpu_profile(&builtin[0], prec);
    if (strcmp(name, "cpu") == 0)
        return cpu_profile(false);
    for (int i = 0; i < NBUILTIN; i++)
        if (strcmp(name, builtin[i].name) == 0)
            return gpu_profile(&builtin[i], prec);
    return read_profile(a, name,
                        kind == DEV_CPU ? cpu_profile(false) : gpu_profile(&builtin[0], PREC_FP32),
                        prec);
}

static Profile profile_for(Arena *a, const Options *o, DevKind kind)
{
    Profile p = profile_named(a, o, kind);
    return kind == DEV_CPU ? cpu_gemm(p, o) : p;
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
    d->node = o->pipe.node_devs > 0 ? (ds->n - 1) / o->pipe.node_devs : 0;
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

/* CPU devices running side by side share caches and the memory bus: with
 * two or more, the built-in cpu profile's rates are those measured on two
 * threads at once (calibrate.c). */
static void side_by_side(Devices *ds, const Options *o)
{
    int cpus = 0;
    for (int i = 0; i < ds->n; i++)
        cpus += ds->d[i].kind == DEV_CPU;
    if (o->pipe.replicas_here > 1)   /* the process runs a copy of them per replica */
        cpus *= o->pipe.replicas_here;
    for (int i = 0; i < ds->n && cpus > 1; i++)
        if (ds->d[i].kind == DEV_CPU && strcmp(ds->d[i].prof.name, "cpu") == 0)
            ds->d[i].prof = cpu_gemm(cpu_profile(true), o);
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
    side_by_side(&ds, o);
    cuda_graph_price(&ds, o);
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
    if (ds->d[a].node != ds->d[b].node)
        return node_bandwidth(ds);
    if (peer_link(ds, a, b))
        return fmin(pa->peer_bw, pb->peer_bw);
    return fmin(pa->host_bw, pb->host_bw);
}

double link_latency(const Devices *ds, int a, int b)
{
    const Profile *pa = &ds->d[a].prof, *pb = &ds->d[b].prof;
    if (ds->d[a].node != ds->d[b].node)
        return node_latency(ds);
    if (peer_link(ds, a, b))
        return fmax(pa->peer_latency, pb->peer_latency);
    double hop = fmax(pa->host_latency, pb->host_latency);
    return ds->d[a].kind == ds->d[b].kind ? 2 * hop : hop;
}
