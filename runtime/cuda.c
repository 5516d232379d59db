/* cuda.c — CUDA devices: the stream, event and memory calls of stream.c,
 * on GPUs, driven by one host thread.
 *
 * The host runs the step's operations in the generated order, which is a
 * topological order of the schedule, so every cudaStreamWaitEvent names an
 * event already recorded. An action (mprt_launch) is a function that
 * enqueues its kernels on its device's compute stream and returns: the
 * host never waits inside a step. Copies go on the sender's copy streams:
 * cudaMemcpyPeerAsync where it is direct (peer access enabled, or both
 * logical devices on one GPU); where the GPUs have no peer access, staged
 * in chunks through pinned host buffers of the runtime's own, double
 * buffered so that the two halves of the copy overlap (mprt_cu_stage_copy).
 *
 * Logical devices map onto the GPUs present: cuda:k runs on GPU k modulo
 * their count (k + r * N for the r-th of several processes of N devices
 * on one machine; with a warning when several share one), each keeping its
 * own streams, cuBLAS and cuDNN handles and arena, so a multi-device
 * program runs, and can be debugged, on one GPU.
 *
 * Kernels: runtime/kernels.cu, specialised by nothing but their
 * arguments, compiled by NVRTC once per GPU architecture and cached on
 * disk under $MPCC_CACHE (default $XDG_CACHE_HOME/mpcc or ~/.cache/mpcc),
 * keyed by a hash of the source, the architecture and the NVRTC version.
 *
 * Errors: no driver or no GPU is one line and exit status 2; every other
 * failing call is one line naming the call, the node being issued and the
 * error, and exit status 1.
 */
#include "mprt.h"
#include "program.h"

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <nvrtc.h>
#ifdef MPCC_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

typedef struct MprtCuDevice {
    int ordinal;                 /* the physical GPU; -1: a CPU device of a mixed trainer, or
                                    another process's */
    int away;                    /* another process's GPU (a pipeline across processes): no
                                    streams here; its arena host memory, which only rank 0
                                    fills, with what a checkpoint gathers */
    cudaStream_t compute;        /* kernels, cuBLAS and cuDNN run here */
    cublasHandle_t blas;         /* bound to compute */
    cudnnHandle_t dnn;           /* bound to compute */
    void *scratch;               /* the memory plan's kernel scratch on this device */
    size_t scratch_bytes;
    void *workspace;             /* cuDNN's, where an algorithm wants more than the scratch */
    size_t workspace_bytes;
    double *norm_part;           /* --clip-norm: a gradient's group sums (MPRT_SQ_GROUPS) */
    cudaEvent_t norm_done;       /* --clip-norm: recorded after its last squared norm */
    float *clip;                 /* --clip-norm: the step's clipping factor, on the GPU */
    int clip_on;                 /* its updates read it (mprt_cu_clip_factor) */
    float *slots;                /* the step's numbers its kernels read (mprt_cu_slot): */
    size_t slot_bytes;           /* the memory plan's, at the end of its scratch */
    int slot_next;               /* its next slot in the step */
} MprtCuDevice;

/* Copies between GPUs without peer access (mprt_cu_stage_copy) go in
 * chunks of MPRT_CU_STAGE_BYTES (a test builds with a tiny one: many
 * chunks, both buffers reused). */
#ifndef MPRT_CU_STAGE_BYTES
#define MPRT_CU_STAGE_BYTES ((size_t)4 << 20)
#endif

typedef struct MprtCuStager {    /* a sender stream's, made at its first staged copy */
    unsigned char *buf;          /* pinned, two chunks: buffer b at b * MPRT_CU_STAGE_BYTES */
    cudaEvent_t staged[2];       /* on the sender's GPU: buffer b holds its chunk */
} MprtCuStager;

typedef struct MprtCuLanding {   /* a sender stream's to one device, made at its first copy */
    cudaStream_t stream;         /* on the receiver's GPU: the host-to-device halves */
    cudaEvent_t landed[2];       /* on the receiver's GPU: buffer b's chunk is in place */
} MprtCuLanding;

static MprtCuDevice *mprt_cu;        /* the device whose action is being issued */
static const char *mprt_cu_node;     /* the node being issued, for error messages */

static MprtCuDevice *mprt_cu_devs;   /* [ndev] */
static int mprt_cu_ndev;
static cudaStream_t *mprt_cu_streams;    /* [ndev * MPRT_STREAMS]: compute, send, send-back, comm */
static cudaEvent_t *mprt_cu_events;      /* created on first record, on its device */
static int mprt_cu_nevents;
static unsigned char *mprt_cu_direct;    /* [ndev * ndev]: a copy from a to b is a peer copy */
static MprtCuStager *mprt_cu_stagers;    /* [ndev * MPRT_STREAMS]: per sender stream */
static MprtCuLanding *mprt_cu_landings;  /* [ndev * MPRT_STREAMS * ndev]: per sender stream and receiver */
static unsigned char **mprt_cu_arena_base;   /* [ndev], to find a pointer's device */
static size_t *mprt_cu_arena_size;
static const char *const *mprt_cu_lines;   /* runtime/kernels.cu line by line, NULL-ended:
                                               set by the generated program */
static const char *const *mprt_cu_header_lines;   /* opcodes.h, which kernels.cu includes */
static char *mprt_cu_source, *mprt_cu_header;       /* those lines joined */
static int mprt_cu_tf32;             /* mpcc --tf32: GEMMs and convolutions may round to TF32 */
static int mprt_cu_bf16;             /* mpcc --precision=bf16: every operand of a GEMM or a
                                        convolution holds a bf16 value (graph/precision.c),
                                        so bf16 and TF32 tensor cores compute it exactly */
/* --trace: each operation's timing events and device, one reference per device */
static cudaEvent_t *mprt_cu_tstart, *mprt_cu_tend, *mprt_cu_ref;   /* [nops + 1], [ndev] */
static int *mprt_cu_tdev, mprt_cu_nops;
static double *mprt_cu_ref_host;

static _Noreturn void mprt_cu_call_failed(int status, const char *call, const char *what)
{
    fprintf(stderr, "train: error: %s%s%s failed: %s\n", mprt_cu_node ? mprt_cu_node : "",
            mprt_cu_node ? ": " : "", call, what);
    exit(status);
}

#define MPRT_CUDA(call)                                                \
    do {                                                               \
        cudaError_t e_ = (call);                                       \
        if (e_ != cudaSuccess)                                         \
            mprt_cu_call_failed(1, #call, cudaGetErrorString(e_));             \
    } while (0)
#define MPRT_CUBLAS(call)                                              \
    do {                                                               \
        cublasStatus_t e_ = (call);                                    \
        if (e_ != CUBLAS_STATUS_SUCCESS)                               \
            mprt_cu_call_failed(1, #call, cublasGetStatusString(e_));          \
    } while (0)
#define MPRT_CUDNN(call)                                               \
    do {                                                               \
        cudnnStatus_t e_ = (call);                                     \
        if (e_ != CUDNN_STATUS_SUCCESS)                                \
            mprt_cu_call_failed(1, #call, cudnnGetErrorString(e_));            \
    } while (0)
#define MPRT_NVRTC(call)                                               \
    do {                                                               \
        nvrtcResult e_ = (call);                                       \
        if (e_ != NVRTC_SUCCESS)                                       \
            mprt_cu_call_failed(1, #call, nvrtcGetErrorString(e_));            \
    } while (0)

/* ---- kernels: NVRTC, the on-disk cache, the modules ---- */

typedef struct MprtCuModule {
    int arch;                    /* 10 * major + minor */
    cudaLibrary_t lib;
    const char **names;          /* kernels looked up so far */
    cudaKernel_t *fns;
    int n, cap;
} MprtCuModule;

MPRT_KERNEL MprtCuModule *mprt_cu_modules;   /* [physical GPUs] */

MPRT_KERNEL uint64_t mprt_fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

MPRT_KERNEL void mprt_cu_cache_dir(char *dir, size_t n)
{
    const char *c = getenv("MPCC_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (c && *c)
        snprintf(dir, n, "%s", c);
    else if (x && *x)
        snprintf(dir, n, "%s/mpcc", x);
    else
        snprintf(dir, n, "%s/.cache/mpcc", h && *h ? h : "/tmp");
}

/* NVRTC's options besides the architecture. --fmad=false: no contraction
 * of a * b + c into one rounding, so the kernels round as the CPU's do. */
static const char *const mprt_cu_opts[] = {"--std=c++17", "-default-device", "--fmad=false"};
enum { MPRT_CU_NOPTS = sizeof mprt_cu_opts / sizeof mprt_cu_opts[0] };

/* A file of the kernels' source in one string, joined once into *joined.
 * The generated program holds it line by line, as no ISO C compiler need
 * take a string literal of its length. */
static const char *mprt_cu_joined(const char *const *lines, char **joined)
{
    if (*joined)
        return *joined;
    size_t n = 1;
    for (const char *const *l = lines; *l; l++)
        n += strlen(*l);
    char *s = malloc(n), *w = s;
    if (!s) {
        fprintf(stderr, "train: out of host memory for the CUDA kernels' source\n");
        exit(1);
    }
    for (const char *const *l = lines; *l; l++) {
        size_t k = strlen(*l);
        memcpy(w, *l, k);
        w += k;
    }
    *w = 0;
    return *joined = s;
}

/* The cubin of the kernels for arch: from the cache (keyed by the source
 * and its header, the options, the architecture and NVRTC's version), or
 * compiled now. */
MPRT_KERNEL char *mprt_cu_cubin(int arch, size_t *size)
{
    const char *source = mprt_cu_joined(mprt_cu_lines, &mprt_cu_source);
    const char *header = mprt_cu_joined(mprt_cu_header_lines, &mprt_cu_header);
    const char *header_name = "opcodes.h";   /* as kernels.cu includes it */
    int major, minor;
    MPRT_NVRTC(nvrtcVersion(&major, &minor));
    char dir[1024], path[1200], err[512];
    mprt_cu_cache_dir(dir, sizeof dir);
    uint64_t key = mprt_fnv1a(header, mprt_fnv1a(source, 0xcbf29ce484222325ULL));
    for (int i = 0; i < MPRT_CU_NOPTS; i++)
        key = mprt_fnv1a(mprt_cu_opts[i], key);
    snprintf(path, sizeof path, "%s/kernels-%016llx-sm%d-nvrtc%d.%d.cubin", dir,
             (unsigned long long)key, arch, major, minor);
    FILE *f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *bin = len > 0 ? malloc((size_t)len) : NULL;
        if (bin && fread(bin, 1, (size_t)len, f) == (size_t)len) {
            fclose(f);
            *size = (size_t)len;
            return bin;
        }
        free(bin);
        fclose(f);
    }
    fprintf(stderr, "compiling CUDA kernels for sm_%d with NVRTC %d.%d (cached in %s)\n", arch,
            major, minor, dir);
    nvrtcProgram prog;
    MPRT_NVRTC(nvrtcCreateProgram(&prog, source, "runtime/kernels.cu", 1, &header, &header_name));
    char opt_arch[64];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=sm_%d", arch);
    const char *opts[1 + MPRT_CU_NOPTS] = {opt_arch};
    for (int i = 0; i < MPRT_CU_NOPTS; i++)
        opts[1 + i] = mprt_cu_opts[i];
    if (nvrtcCompileProgram(prog, 1 + MPRT_CU_NOPTS, opts) != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        char *log = malloc(n + 1);
        if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
            fprintf(stderr, "%s\n", log);
        fprintf(stderr, "train: error: NVRTC could not compile the kernels for sm_%d (the log "
                "above names the lines of runtime/kernels.cu)\n", arch);
        exit(1);
    }
    MPRT_NVRTC(nvrtcGetCUBINSize(prog, size));
    char *bin = malloc(*size);
    if (!bin)
        mprt_cu_call_failed(1, "malloc", "out of memory for the kernels");
    MPRT_NVRTC(nvrtcGetCUBIN(prog, bin));
    nvrtcDestroyProgram(&prog);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s", dir);   /* mkdir -p */
    for (char *p = cmd + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(cmd, 0755);
            *p = '/';
        }
    mkdir(cmd, 0755);
    MprtOut out;
    if (mprt_out_open(&out, path, err, sizeof err) == 0) {
        fwrite(bin, 1, *size, out.fp);
        if (mprt_out_commit(&out, err, sizeof err) != 0)
            fprintf(stderr, "train: warning: %s (the kernels are compiled again next time)\n",
                    err);
    }
    return bin;
}

MPRT_KERNEL MprtCuModule *mprt_cu_module(int ordinal)
{
    MprtCuModule *m = &mprt_cu_modules[ordinal];
    if (m->lib)
        return m;
    int major, minor;
    MPRT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
    MPRT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal));
    m->arch = 10 * major + minor;
    size_t size;
    char *bin = mprt_cu_cubin(m->arch, &size);
    MPRT_CUDA(cudaLibraryLoadData(&m->lib, bin, NULL, NULL, 0, NULL, NULL, 0));
    free(bin);
    return m;
}

MPRT_KERNEL cudaKernel_t mprt_cu_function(const char *name)
{
    MprtCuModule *m = mprt_cu_module(mprt_cu->ordinal);
    for (int i = 0; i < m->n; i++)
        if (m->names[i] == name || strcmp(m->names[i], name) == 0)
            return m->fns[i];
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->names = realloc(m->names, (size_t)m->cap * sizeof *m->names);
        m->fns = realloc(m->fns, (size_t)m->cap * sizeof *m->fns);
        if (!m->names || !m->fns)
            mprt_cu_call_failed(1, "realloc", "out of memory");
    }
    char full[256];
    snprintf(full, sizeof full, "mprt_k_%s", name);
    MPRT_CUDA(cudaLibraryGetKernel(&m->fns[m->n], m->lib, full));
    m->names[m->n] = name;
    return m->fns[m->n++];
}

/* Launches kernel mprt_k_<name> on the current device's compute stream. */
MPRT_KERNEL void mprt_cu_launch(const char *name, unsigned grid, unsigned block, size_t shmem,
                           void **args)
{
    cudaKernel_t f = mprt_cu_function(name);
    MPRT_CUDA(cudaLaunchKernel((const void *)f, (dim3){grid ? grid : 1, 1, 1}, (dim3){block, 1, 1}, args,
                               shmem, mprt_cu->compute));
}

/* A 1-D grid for n elements, capped: kernels loop with a grid stride. */
MPRT_KERNEL unsigned mprt_cu_blocks(long n, unsigned block)
{
    long b = (n + block - 1) / block;
    return b < 1 ? 1u : b > 65535 ? 65535u : (unsigned)b;
}

/* ---- devices and streams ---- */

MPRT_KERNEL int mprt_cu_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        fprintf(stderr, "train: error: no CUDA device (%s); this trainer was compiled for CUDA "
                "devices; compile with mpcc -cpus N to train on this machine's CPU\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
        exit(2);
    }
    return n;
}

/* Which pairs of GPUs copy through host memory, said once at start-up:
 * slower than a peer copy, and the plan may have priced them as one. */
static void staged_note(int ndev, const char *const *names)
{
    int n = 0;
    for (int a = 0; a < ndev; a++)
        for (int b = a + 1; b < ndev; b++) {
            if (mprt_cu_devs[a].ordinal < 0 || mprt_cu_devs[b].ordinal < 0 ||
                (mprt_cu_direct[a * ndev + b] && mprt_cu_direct[b * ndev + a]))
                continue;
            fprintf(stderr, "%s %s-%s", n++ ? "," : "train: note: no peer access between",
                    names[a], names[b]);
        }
    if (n)
        fprintf(stderr, ": their copies are staged through pinned host memory (a profile "
                "file with peer_access = 0 plans for that: docs/pipeline.md)\n");
}


/* Logical device d (names[d] = "cuda:K") onto the GPUs present; a mixed
 * trainer's CPU devices ("cpu:K") get none. */
/* Processes on one machine (mpirun, nccl.c) need GPUs of their own. */
static void mprt_gpus_per_process(int ndev, int gpus)
{
    if (mprt_local_ranks == 1 || mprt_local_ranks * ndev <= gpus)
        return;   /* one process: its devices may share GPUs */
    if (mprt_local_rank == 0)
        fprintf(stderr, "train: error: %d processes of %d GPU(s) each on a machine with %d "
                "GPU(s); NCCL needs a GPU of its own for each: start one process per "
                "machine (mpirun --map-by ppr:1:node), or compile for fewer GPUs (mpcc "
                "-gpus %d)\n", mprt_local_ranks, ndev, gpus,
                gpus / mprt_local_ranks > 0 ? gpus / mprt_local_ranks : 1);
    exit(1);   /* mpirun stops the others */
}

/* A bf16 trainer's matrix products and convolutions run on bf16 tensor
 * cores, which GPUs before compute capability 8.0 (Ampere) lack: cuBLAS and
 * cuDNN would refuse them mid-step. Said before anything runs. */
static void mprt_cu_check_arch(const char *name, int ordinal)
{
    int major, minor;
    MPRT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
    MPRT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal));
    if (!mprt_cu_bf16 || major >= 8)
        return;
    fprintf(stderr, "train: error: %s is GPU %d, of compute capability %d.%d; this trainer was "
            "compiled with mpcc --precision=bf16, whose matrix products and convolutions need "
            "bf16 tensor cores (compute capability 8.0 or newer): compile it with "
            "--precision=fp32 for this GPU\n", name, ordinal, major, minor);
    exit(2);
}

/* A pipeline across processes: this process's devices are [mprt_dev_lo,
 * mprt_dev_hi) (comm.c), its GPUs counted from 0. */
static int mprt_cu_away(int d)
{
    return d < mprt_dev_lo || d >= mprt_dev_hi;
}

static void mprt_gpu_devices_open(int ndev, const char *const *names, const double *shares)
{
    (void)shares;   /* the CPU devices' (stream.c) */
    int gpus = mprt_cu_count(), here = 0, first = -1;
    for (int d = 0; d < ndev; d++)
        here += !mprt_cu_away(d);
    mprt_gpus_per_process(here, gpus);
    mprt_cu_ndev = ndev;
    mprt_cu_devs = calloc((size_t)ndev, sizeof *mprt_cu_devs);
    mprt_cu_streams = calloc((size_t)ndev * MPRT_STREAMS, sizeof *mprt_cu_streams);
    mprt_cu_modules = calloc((size_t)gpus, sizeof *mprt_cu_modules);
    mprt_cu_arena_base = calloc((size_t)ndev, sizeof *mprt_cu_arena_base);
    mprt_cu_arena_size = calloc((size_t)ndev, sizeof *mprt_cu_arena_size);
    mprt_cu_direct = calloc((size_t)ndev * ndev, 1);
    mprt_cu_stagers = calloc((size_t)ndev * MPRT_STREAMS, sizeof *mprt_cu_stagers);
    mprt_cu_landings = calloc((size_t)ndev * MPRT_STREAMS * ndev, sizeof *mprt_cu_landings);
    if (!mprt_cu_devs || !mprt_cu_streams || !mprt_cu_modules || !mprt_cu_arena_base ||
        !mprt_cu_arena_size || !mprt_cu_direct || !mprt_cu_stagers || !mprt_cu_landings)
        mprt_cu_call_failed(1, "calloc", "out of memory");
    int shared = 0;
    for (int d = 0; d < ndev; d++) {
        MprtCuDevice *c = &mprt_cu_devs[d];
        c->ordinal = -1;
        c->away = mprt_cu_away(d);
        if (strncmp(names[d], "cpu", 3) == 0 || c->away)
            continue;
        if (first < 0)
            first = d;
        int k = (here < ndev ? d - first : strncmp(names[d], "cuda:", 5) == 0 ? atoi(names[d] + 5)
                                                                             : d) +
                mprt_local_rank * here;   /* after those of this machine's other processes */
        c->ordinal = k % gpus;
        shared |= k >= gpus;
        mprt_cu_check_arch(names[d], c->ordinal);
        MPRT_CUDA(cudaSetDevice(c->ordinal));
        for (int k = 0; k < MPRT_STREAMS; k++)
            MPRT_CUDA(cudaStreamCreateWithFlags(&mprt_cu_streams[d * MPRT_STREAMS + k],
                                                cudaStreamNonBlocking));
        c->compute = mprt_cu_streams[d * MPRT_STREAMS];
        MPRT_CUBLAS(cublasCreate(&c->blas));
        MPRT_CUBLAS(cublasSetStream(c->blas, c->compute));
        MPRT_CUBLAS(cublasSetMathMode(c->blas, mprt_cu_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                            : CUBLAS_DEFAULT_MATH));
        MPRT_CUDNN(cudnnCreate(&c->dnn));
        MPRT_CUDNN(cudnnSetStream(c->dnn, c->compute));
    }
    if (shared) {
        fprintf(stderr, "train: warning: %d logical device(s) on %d GPU(s):", ndev, gpus);
        for (int d = 0; d < ndev; d++)
            if (mprt_cu_devs[d].ordinal >= 0)
                fprintf(stderr, " %s->GPU %d", names[d], mprt_cu_devs[d].ordinal);
        fprintf(stderr, " (each keeps its own streams; copies between them stay on the GPU)\n");
    }
    /* Direct copies: within one GPU (cudaMemcpyPeerAsync with equal
     * ordinals is a device-to-device copy), or where the GPUs allow peer
     * access. The others are staged (memcpy_async); built with
     * -DMPRT_CU_STAGE_ALL, every copy between two logical devices is, so
     * that one GPU runs the staged path. */
    for (int a = 0; a < ndev; a++)
        for (int b = 0; b < ndev; b++) {
            int x = mprt_cu_devs[a].ordinal, y = mprt_cu_devs[b].ordinal, ok = 0;
            if (x < 0 || y < 0)
                continue;
            if (x != y) {
                if (cudaDeviceCanAccessPeer(&ok, x, y) != cudaSuccess || !ok) {
                    cudaGetLastError();
                    continue;
                }
                MPRT_CUDA(cudaSetDevice(x));
                cudaError_t e = cudaDeviceEnablePeerAccess(y, 0);
                if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                    mprt_cu_call_failed(1, "cudaDeviceEnablePeerAccess", cudaGetErrorString(e));
                cudaGetLastError();
            }
#ifndef MPRT_CU_STAGE_ALL
            mprt_cu_direct[a * ndev + b] = 1;
#endif
        }
    staged_note(ndev, names);
}

static int mprt_gpu_streams_start(int nstreams, int nevents, int nops, char *err, size_t errlen)
{
    (void)nstreams;
    mprt_clock0 = 0;
    mprt_clock0 = mprt_clock();
    mprt_cu_events = calloc((size_t)nevents + 1, sizeof *mprt_cu_events);
    mprt_cu_nevents = nevents;
    if (!mprt_op_start)   /* a mixed trainer's CPU devices may have made them */
        mprt_op_start = calloc((size_t)nops + 1, sizeof(double));
    if (!mprt_op_end)
        mprt_op_end = calloc((size_t)nops + 1, sizeof(double));
    mprt_cu_nops = nops;
    mprt_cu_tstart = calloc((size_t)nops + 1, sizeof *mprt_cu_tstart);
    mprt_cu_tend = calloc((size_t)nops + 1, sizeof *mprt_cu_tend);
    mprt_cu_tdev = calloc((size_t)nops + 1, sizeof *mprt_cu_tdev);
    mprt_cu_ref = calloc((size_t)mprt_cu_ndev, sizeof *mprt_cu_ref);
    mprt_cu_ref_host = calloc((size_t)mprt_cu_ndev, sizeof *mprt_cu_ref_host);
    if (!mprt_cu_events || !mprt_op_start || !mprt_op_end || !mprt_cu_tstart ||
        !mprt_cu_tend || !mprt_cu_tdev || !mprt_cu_ref || !mprt_cu_ref_host)
        return mprt_errf(err, errlen, "out of memory starting the streams");
    return 0;
}

MPRT_KERNEL void mprt_cu_use(int dev)
{
    mprt_cu = &mprt_cu_devs[dev];
    MPRT_CUDA(cudaSetDevice(mprt_cu->ordinal));
}

/* --trace: timing events around each operation (created only in that
 * mode), read at the step's end against one reference event per device
 * whose host time is known, so the host never waits inside a step. */

static cudaEvent_t mprt_cu_timing_event(cudaEvent_t *e)
{
    if (!*e)
        MPRT_CUDA(cudaEventCreate(e));
    return *e;
}

/* At the first traced operation of a step, before it is issued: every
 * device is idle (the previous step synchronized), so an event recorded
 * on each now marks the host's present time. */
static void mprt_cu_trace_refs(void)
{
    if (mprt_cu_ref_host[0] > 0)
        return;
    for (int d = 0; d < mprt_cu_ndev; d++) {
        if (mprt_cu_devs[d].ordinal < 0)
            continue;
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
        MPRT_CUDA(cudaEventRecord(mprt_cu_timing_event(&mprt_cu_ref[d]),
                                  mprt_cu_devs[d].compute));
        MPRT_CUDA(cudaEventSynchronize(mprt_cu_ref[d]));
        mprt_cu_ref_host[d] = mprt_clock();
    }
}

MPRT_KERNEL void mprt_cu_trace_mark(int stream, int label, int end)
{
    if (!mprt_tracing || label < 0 || label > mprt_cu_nops)
        return;
    int d = stream / MPRT_STREAMS;
    mprt_cu_trace_refs();
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
    cudaEvent_t *e = end ? &mprt_cu_tend[label] : &mprt_cu_tstart[label];
    MPRT_CUDA(cudaEventRecord(mprt_cu_timing_event(e), mprt_cu_streams[stream]));
    mprt_cu_tdev[label] = d;
}

/* At the end of a traced step (every stream drained): the operations'
 * times on the host's clock. */
MPRT_KERNEL void mprt_cu_trace_read(void)
{
    for (int k = 0; k <= mprt_cu_nops; k++) {
        if (!mprt_cu_tstart[k] || !mprt_cu_tend[k])
            continue;
        int d = mprt_cu_tdev[k];
        float a, b;
        MPRT_CUDA(cudaEventElapsedTime(&a, mprt_cu_ref[d], mprt_cu_tstart[k]));
        MPRT_CUDA(cudaEventElapsedTime(&b, mprt_cu_ref[d], mprt_cu_tend[k]));
        mprt_op_start[k] = mprt_cu_ref_host[d] + 1e-3 * a;
        mprt_op_end[k] = mprt_cu_ref_host[d] + 1e-3 * b;
    }
    for (int d = 0; d < mprt_cu_ndev; d++)
        mprt_cu_ref_host[d] = 0;
}

static void mprt_gpu_launch(int stream, void (*fn)(int), int mb, int label)
{
    mprt_cu_trace_mark(stream, label, 0);
    mprt_cu_use(stream / MPRT_STREAMS);
    cudaStream_t own = mprt_cu->compute;   /* a sum over the replicas runs its NCCL calls */
    mprt_cu->compute = mprt_cu_streams[stream];   /* and kernels on the comm stream */
#ifdef MPCC_NVTX
    char range[64];
    snprintf(range, sizeof range, "stream %d mb %d op %d", stream, mb, label);
    nvtxRangePushA(range);
#endif
    fn(mb);
#ifdef MPCC_NVTX
    nvtxRangePop();
#endif
    mprt_cu->compute = own;
    mprt_cu_node = NULL;
    mprt_cu_trace_mark(stream, label, 1);
}

/* The GPU device whose arena holds p, or -1 (host memory). */
MPRT_KERNEL int mprt_cu_owner(const void *p)
{
    for (int d = 0; d < mprt_cu_ndev; d++)
        if (mprt_cu_devs[d].ordinal >= 0 && (const unsigned char *)p >= mprt_cu_arena_base[d] &&
            (const unsigned char *)p < mprt_cu_arena_base[d] + mprt_cu_arena_size[d])
            return d;
    return -1;
}

/* ---- copies between GPUs without peer access: staged ---- */

static MprtCuStager *mprt_cu_stager(int stream)
{
    MprtCuStager *s = &mprt_cu_stagers[stream];
    if (s->buf)
        return s;
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[stream / MPRT_STREAMS].ordinal));
    MPRT_CUDA(cudaHostAlloc((void **)&s->buf, 2 * (size_t)MPRT_CU_STAGE_BYTES,
                            cudaHostAllocPortable));
    for (int b = 0; b < 2; b++)
        MPRT_CUDA(cudaEventCreateWithFlags(&s->staged[b], cudaEventDisableTiming));
    return s;
}

/* Its own staging stream for each sender stream, so that a copy whose
 * source is not ready holds up no other sender's copy to the device. */
static MprtCuLanding *mprt_cu_landing(int stream, int to)
{
    MprtCuLanding *l = &mprt_cu_landings[stream * mprt_cu_ndev + to];
    if (l->stream)
        return l;
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[to].ordinal));
    MPRT_CUDA(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking));
    for (int b = 0; b < 2; b++)
        MPRT_CUDA(cudaEventCreateWithFlags(&l->landed[b], cudaEventDisableTiming));
    return l;
}

/* n bytes from src, on the GPU of sender stream `stream`, to dst on device
 * to's, with no peer access between them: chunk i goes through buffer
 * b = i % 2 of the stream's pinned pair,
 *
 *   sender stream:   (i >= 2: wait landed[b])  D2H chunk i -> b  record staged[b]
 *   staging stream:  wait staged[b]  H2D b -> dst chunk i  record landed[b]
 *
 * so chunk i+1's device-to-host copy overlaps chunk i's host-to-device
 * copy. The staging stream starts each chunk after staged[b], so after
 * the waits the plan put on the sender stream (the destination is free).
 * At the end the sender stream waits for the last landed[b]: the event
 * the plan records next on it means the data has arrived, which is all
 * that its consumers wait for, and both buffers are free for the
 * stream's next copy.
 *
 * Two events of each kind, reused by every chunk and every copy, are
 * enough: the one host thread issues everything in a topological order,
 * and cudaStreamWaitEvent waits for the event's latest record issued
 * before the wait. Each wait here is issued after the record it means
 * and before the next record of that event (landed[b] of chunk i is
 * waited for by chunk i+2 before that chunk records it again). */
static void mprt_cu_stage_copy(int stream, int to, void *dst, const void *src, size_t n)
{
    MprtCuStager *s = mprt_cu_stager(stream);
    MprtCuLanding *l = mprt_cu_landing(stream, to);
    cudaStream_t send = mprt_cu_streams[stream];
    int from = mprt_cu_devs[stream / MPRT_STREAMS].ordinal, recv = mprt_cu_devs[to].ordinal;
    const size_t chunk = MPRT_CU_STAGE_BYTES, chunks = (n + chunk - 1) / chunk;
    for (size_t i = 0; i < chunks; i++) {
        int b = (int)(i % 2);
        size_t at = i * chunk, len = n - at < chunk ? n - at : chunk;
        unsigned char *host = s->buf + b * chunk;
        MPRT_CUDA(cudaSetDevice(from));
        if (i >= 2)
            MPRT_CUDA(cudaStreamWaitEvent(send, l->landed[b], 0));
        MPRT_CUDA(cudaMemcpyAsync(host, (const unsigned char *)src + at, len,
                                  cudaMemcpyDeviceToHost, send));
        MPRT_CUDA(cudaEventRecord(s->staged[b], send));
        MPRT_CUDA(cudaSetDevice(recv));
        MPRT_CUDA(cudaStreamWaitEvent(l->stream, s->staged[b], 0));
        MPRT_CUDA(cudaMemcpyAsync((unsigned char *)dst + at, host, len, cudaMemcpyHostToDevice,
                                  l->stream));
        MPRT_CUDA(cudaEventRecord(l->landed[b], l->stream));
    }
    MPRT_CUDA(cudaSetDevice(from));
    if (chunks)
        MPRT_CUDA(cudaStreamWaitEvent(send, l->landed[(chunks - 1) % 2], 0));
}

/* On the sender's copy stream: to another GPU's arena by a peer copy where
 * that is direct, else staged through host memory; to a mixed trainer's
 * CPU device, whose arena is pinned, by one DMA. */
static void mprt_gpu_memcpy_async(int stream, void *dst, const void *src, size_t n, int label)
{
    int to = mprt_cu_owner(dst), from = stream / MPRT_STREAMS;
    mprt_cu_trace_mark(stream, label, 0);
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[from].ordinal));
    if (to < 0)
        MPRT_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, mprt_cu_streams[stream]));
    else if (mprt_cu_owner(src) < 0)   /* back from the host arena (--offload) */
        MPRT_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, mprt_cu_streams[stream]));
    else if (mprt_cu_direct[from * mprt_cu_ndev + to])
        MPRT_CUDA(cudaMemcpyPeerAsync(dst, mprt_cu_devs[to].ordinal, src,
                                      mprt_cu_devs[from].ordinal, n, mprt_cu_streams[stream]));
    else
        mprt_cu_stage_copy(stream, to, dst, src, n);
    mprt_cu_trace_mark(stream, label, 1);
}

static void mprt_gpu_wait_event(int stream, int ev)
{
    MPRT_CUDA(cudaStreamWaitEvent(mprt_cu_streams[stream], mprt_cu_events[ev], 0));
}

static void mprt_gpu_record_event(int stream, int ev)
{
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[stream / MPRT_STREAMS].ordinal));
    if (!mprt_cu_events[ev])
        MPRT_CUDA(cudaEventCreateWithFlags(&mprt_cu_events[ev], cudaEventDisableTiming));
    MPRT_CUDA(cudaEventRecord(mprt_cu_events[ev], mprt_cu_streams[stream]));
}

/* After a step, the devices synchronized: a bad Gather index or loss
 * label that a kernel recorded in its GPU's mprt_k_fault {code, value,
 * bound, node, ignore_index} (a kernel cannot stop the program as the
 * CPU's kernels do) ends the program with the CPU kernel's message. */
MPRT_KERNEL void mprt_cu_check_faults(void)
{
    for (int d = 0; d < mprt_cu_ndev; d++) {
        if (mprt_cu_devs[d].ordinal < 0)
            continue;
        MprtCuModule *m = &mprt_cu_modules[mprt_cu_devs[d].ordinal];
        if (!m->lib)
            continue;   /* no kernel has run on this GPU */
        void *at;
        size_t bytes;
        uint64_t f[5];
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[d].ordinal));
        MPRT_CUDA(cudaLibraryGetGlobal(&at, &bytes, m->lib, "mprt_k_fault"));
        MPRT_CUDA(cudaMemcpy(f, at, sizeof f, cudaMemcpyDeviceToHost));
        if (!f[0])
            continue;
        const char *node = (const char *)(uintptr_t)f[3];
        if (f[0] == 1)
            fprintf(stderr, "train: error: node '%s': index %lld is out of range [-%lld, %lld); "
                    "check the input data (token ids must be below the vocabulary size)\n",
                    node ? node : "?", (long long)f[1], (long long)f[2], (long long)f[2]);
        else
            fprintf(stderr, "train: error: node '%s': label %lld is not a class in [0, %lld) nor "
                    "the ignore_index %lld; check the labels\n", node ? node : "?",
                    (long long)f[1], (long long)f[2], (long long)f[4]);
        exit(1);
    }
}

/* ---- the whole step as one CUDA graph (mpcc --cuda-graph, docs/cuda.md) ----
 *
 * The first step runs as issued (it creates the events, the landing
 * streams, cuBLAS's and cuDNN's state). The second is captured: the first
 * GPU's compute stream (the origin) begins a capture and records a fork
 * event that every other stream of the step waits for, which joins them
 * to the capture, on any GPU; the step is issued as always; at its sync
 * each of those streams records a join event that the origin waits for,
 * the capture ends and the graph is instantiated. Then it, and every later
 * step, is one cudaGraphLaunch on the origin. The trainer turns this on
 * only for a step whose launches are the same every step (the model's
 * graph_why is NULL), and not in a step it times (--trace, --profile). */

static long mprt_cu_graph_runs;          /* steps through mprt_gpu_graph_step */
static int mprt_cu_capturing;
static void mprt_gpu_sync(void);

/* The numbers of a step that a kernel reads and that change every step
 * (AdamW's bias correction, Dropout's keys) cannot be its arguments in a
 * captured step, which would replay the step it was captured at. So each
 * goes through a slot: the host fills the slot's pinned host memory, and
 * the kernel's stream copies it to the GPU just before the kernel, into
 * the GPU's slots: the memory plan keeps 32 bytes for each of its AdamW
 * updates and Dropout calls at the end of its scratch (plan.c,
 * place_workspace). The copy is captured with
 * the step; before each replay the host fills every slot again for the new
 * step, with the slot's fill and constants. Slots go in the order of the
 * step's calls, from 0 each step. */
enum { MPRT_CU_SLOTS = 32768, MPRT_CU_SLOT_FLOATS = 8 };
typedef void (*MprtCuFill)(const float *k, long step, float *out);
static float *mprt_cu_slot_host;          /* pinned: MPRT_CU_SLOT_FLOATS a slot */
static float mprt_cu_slot_k[MPRT_CU_SLOTS][4];
static MprtCuFill mprt_cu_slot_fill[MPRT_CU_SLOTS];
static int mprt_cu_slot_next, mprt_cu_slot_used;

MPRT_KERNEL const float *mprt_cu_slot(MprtCuFill fill, const float *k, long step)
{
    size_t bytes = (size_t)MPRT_CU_SLOTS * MPRT_CU_SLOT_FLOATS * sizeof(float);
    if (!mprt_cu_slot_host)
        MPRT_CUDA(cudaHostAlloc((void **)&mprt_cu_slot_host, bytes, cudaHostAllocPortable));
    int i = mprt_cu_slot_next++, j = ++mprt_cu->slot_next;
    if (i >= MPRT_CU_SLOTS)
        mprt_cu_call_failed(1, "mprt_cu_slot", "more than 32768 numbers of a step in slots");
    if ((size_t)j * MPRT_CU_SLOT_FLOATS * sizeof(float) > mprt_cu->slot_bytes)
        mprt_cu_call_failed(1, "mprt_cu_slot", "more slots than the memory plan keeps");
    memcpy(mprt_cu_slot_k[i], k, sizeof mprt_cu_slot_k[i]);
    mprt_cu_slot_fill[i] = fill;
    mprt_cu_slot_used = i + 1 > mprt_cu_slot_used ? i + 1 : mprt_cu_slot_used;
    float *h = mprt_cu_slot_host + (size_t)i * MPRT_CU_SLOT_FLOATS;
    float *d = mprt_cu->slots + (size_t)(j - 1) * MPRT_CU_SLOT_FLOATS;
    fill(k, step, h);
    MPRT_CUDA(cudaMemcpyAsync(d, h, MPRT_CU_SLOT_FLOATS * sizeof(float), cudaMemcpyHostToDevice,
                              mprt_cu->compute));
    return d;
}

/* Before a replay: every slot filled for step `step` (the step the
 * updates' calls name: mprt_step_no + 1, codegen.c's emit_update_body). */
static void mprt_cu_slots_refill(long step)
{
    for (int i = 0; i < mprt_cu_slot_used; i++)
        mprt_cu_slot_fill[i](mprt_cu_slot_k[i], step,
                             mprt_cu_slot_host + (size_t)i * MPRT_CU_SLOT_FLOATS);
}
static cudaGraphExec_t mprt_cu_graph;
static cudaEvent_t mprt_cu_fork, *mprt_cu_joins;   /* [streams + landings] */
static int mprt_cu_nforked;              /* how many streams the capture began with */

/* Every stream of the step on a GPU here, the origin first: the devices'
 * own, then the landing streams of staged copies; their GPUs' ordinals in
 * *ordinal. Returns how many. */
static int mprt_cu_step_streams(cudaStream_t *s, int *ordinal)
{
    int n = 0;
    for (int k = 0; k < MPRT_STREAMS * mprt_cu_ndev; k++)
        if (mprt_cu_devs[k / MPRT_STREAMS].ordinal >= 0 && !mprt_cu_devs[k / MPRT_STREAMS].away)
            s[n] = mprt_cu_streams[k], ordinal[n++] = mprt_cu_devs[k / MPRT_STREAMS].ordinal;
    for (int k = 0; k < MPRT_STREAMS * mprt_cu_ndev * mprt_cu_ndev; k++)
        if (mprt_cu_landings[k].stream)
            s[n] = mprt_cu_landings[k].stream, ordinal[n++] = mprt_cu_devs[k % mprt_cu_ndev].ordinal;
    return n;
}

static int mprt_cu_all_streams(cudaStream_t **s, int **ordinal)
{
    int cap = MPRT_STREAMS * mprt_cu_ndev * (mprt_cu_ndev + 1);
    *s = calloc((size_t)cap, sizeof **s);
    *ordinal = calloc((size_t)cap, sizeof **ordinal);
    if (!*s || !*ordinal)
        mprt_cu_call_failed(1, "calloc", "out of host memory for the step's graph");
    return mprt_cu_step_streams(*s, *ordinal);
}

/* The fork and join events made, each on its stream's GPU, before the
 * capture begins (nothing but the step's own work inside it). */
static void mprt_cu_capture_events(const int *ord, int n)
{
    mprt_cu_joins = calloc((size_t)n + 1, sizeof *mprt_cu_joins);
    if (!mprt_cu_joins)
        mprt_cu_call_failed(1, "calloc", "out of host memory for the step's graph");
    MPRT_CUDA(cudaSetDevice(ord[0]));
    MPRT_CUDA(cudaEventCreateWithFlags(&mprt_cu_fork, cudaEventDisableTiming));
    for (int i = 1; i < n; i++) {
        MPRT_CUDA(cudaSetDevice(ord[i]));
        MPRT_CUDA(cudaEventCreateWithFlags(&mprt_cu_joins[i], cudaEventDisableTiming));
    }
}

static void mprt_cu_capture_begin(void)
{
    cudaStream_t *s;
    int *ord, n = mprt_cu_all_streams(&s, &ord);
    mprt_cu_capture_events(ord, n);
    mprt_cu_nforked = n;
    MPRT_CUDA(cudaSetDevice(ord[0]));
    MPRT_CUDA(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal));
    MPRT_CUDA(cudaEventRecord(mprt_cu_fork, s[0]));
    for (int i = 1; i < n; i++) {
        MPRT_CUDA(cudaSetDevice(ord[i]));
        MPRT_CUDA(cudaStreamWaitEvent(s[i], mprt_cu_fork, 0));
    }
    mprt_cu_capturing = 1;
    free(s), free(ord);
}

/* The capture's end: every stream joined back to the origin, the graph
 * instantiated, then launched for the step that was captured. */
static void mprt_cu_capture_end(void)
{
    cudaStream_t *s;
    int *ord, n = mprt_cu_all_streams(&s, &ord);
    if (n != mprt_cu_nforked)   /* a landing stream made inside the captured step */
        mprt_cu_call_failed(1, "mprt_cu_capture_end", "the step's streams changed while it "
                            "was captured; build the trainer with mpcc --cuda-graph=off");
    for (int i = 1; i < n; i++) {
        MPRT_CUDA(cudaSetDevice(ord[i]));
        MPRT_CUDA(cudaEventRecord(mprt_cu_joins[i], s[i]));
        MPRT_CUDA(cudaSetDevice(ord[0]));
        MPRT_CUDA(cudaStreamWaitEvent(s[0], mprt_cu_joins[i], 0));
    }
    cudaGraph_t graph;
    MPRT_CUDA(cudaSetDevice(ord[0]));
    MPRT_CUDA(cudaStreamEndCapture(s[0], &graph));
    MPRT_CUDA(cudaGraphInstantiate(&mprt_cu_graph, graph, 0));
    MPRT_CUDA(cudaGraphDestroy(graph));
    mprt_cu_capturing = 0;
    MPRT_CUDA(cudaGraphLaunch(mprt_cu_graph, s[0]));
    free(s), free(ord);
}

/* One step through the graph: captured at the second, replayed after.
 * Returns 0 where the step is to be issued as always. */
static int mprt_gpu_graph_step(void (*run_step)(void))
{
    if (!mprt_step_graphs || mprt_tracing || mprt_profiling || mprt_cu_graph_runs++ == 0)
        return 0;
    if (mprt_cu_graph) {
        cudaStream_t *s;
        int *ord;
        mprt_cu_slots_refill(mprt_step_no + 1);
        mprt_cu_all_streams(&s, &ord);
        MPRT_CUDA(cudaSetDevice(ord[0]));
        MPRT_CUDA(cudaGraphLaunch(mprt_cu_graph, s[0]));
        free(s), free(ord);
        mprt_gpu_sync();
        return 1;
    }
    mprt_cu_capture_begin();
    run_step();   /* its sync ends the capture and launches the graph */
    return 1;
}

/* The end of a step: every stream drained (a kernel's failure surfaces
 * here, named as the step's), then the kernels' recorded faults. */
static void mprt_gpu_sync(void)
{
    if (mprt_cu_capturing)
        mprt_cu_capture_end();
    mprt_cu_slot_next = 0;
    for (int d = 0; d < mprt_cu_ndev; d++)
        mprt_cu_devs[d].slot_next = 0;
    mprt_cu_node = "the step";
    for (int s = 0; s < MPRT_STREAMS * mprt_cu_ndev; s++) {
        if (mprt_cu_devs[s / MPRT_STREAMS].ordinal < 0)
            continue;
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[s / MPRT_STREAMS].ordinal));
        MPRT_CUDA(cudaStreamSynchronize(mprt_cu_streams[s]));
    }
    for (int k = 0; k < MPRT_STREAMS * mprt_cu_ndev * mprt_cu_ndev; k++)   /* idle: their senders waited */
        if (mprt_cu_landings[k].stream) {
            MPRT_CUDA(cudaSetDevice(mprt_cu_devs[k % mprt_cu_ndev].ordinal));
            MPRT_CUDA(cudaStreamSynchronize(mprt_cu_landings[k].stream));
        }
    mprt_cu_check_faults();
    if (mprt_tracing)
        mprt_cu_trace_read();
    mprt_cu_node = NULL;
}

/* The marks around the nodes of a stage action (timeline.c's
 * mprt_prof_node): when profiling, the host waits for the node before its
 * time is taken, so the time is the GPU's (profiling runs are
 * measurements). The mark also names the node for the CUDA calls' errors. */
MPRT_KERNEL void mprt_cu_prof_end(void)
{
    if (mprt_prof_open >= 0)
        MPRT_CUDA(cudaStreamSynchronize(mprt_cu->compute));
    mprt_prof_end();
}

MPRT_KERNEL void mprt_cu_prof_node(int k)
{
    mprt_cu_prof_end();
    mprt_cu_node = mprt_prof_nodes[k].name;
    mprt_prof_node(k);
}

/* ---- device memory ---- */

/* Another process's device: host memory, its pages untouched until a
 * checkpoint's gather (or the weights' load) writes them. */
static unsigned char *mprt_cu_away_alloc(size_t n)
{
    unsigned char *p = calloc(1, n ? n : 1);
    if (!p)
        mprt_cu_call_failed(1, "calloc", "out of host memory for another process's arena");
    return p;
}

static unsigned char *mprt_gpu_arena_alloc(int dev, const char *name, size_t n)
{
    void *p = NULL;
    if (mprt_cu_devs[dev].away)
        return mprt_cu_away_alloc(n);
    mprt_cu_use(dev);
    cudaError_t e = cudaMalloc(&p, n ? n : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        fprintf(stderr, "train: error: out of memory on %s (GPU %d): its arena, every buffer "
                "of its stages, needs %.1f MB (the memory plan's peak) and %.1f MB of %.1f MB "
                "are free; try mpcc --recompute=auto, --offload=activations, more devices "
                "(-gpus N) or a smaller "
                "-batch (mpcc --dump=memory shows what the arena holds)\n", name, mprt_cu->ordinal, (double)n / 1e6, (double)free_b / 1e6,
                (double)total / 1e6);
        exit(1);
    }
    MPRT_CUDA(cudaMemset(p, 0, n ? n : 1));
    mprt_cu_arena_base[dev] = p;
    mprt_cu_arena_size[dev] = n;
    return p;
}

/* The memory plan's kernel scratch of a device (cuDNN's workspace). */
static void mprt_gpu_dev_scratch(int dev, void *p, size_t n)
{
    mprt_cu_devs[dev].scratch = p;
    mprt_cu_devs[dev].scratch_bytes = n;
}

static void mprt_gpu_dev_slots(int dev, void *p, size_t n)
{
    mprt_cu_devs[dev].slots = p;
    mprt_cu_devs[dev].slot_bytes = n;
}

/* What a device took beyond its arena: cuDNN's workspace (cuda_ops.c). */
static size_t mprt_gpu_dev_extra(int dev)
{
    return mprt_cu_devs[dev].workspace_bytes;
}

static void mprt_gpu_arena_free(int dev, unsigned char *p)
{
    if (mprt_cu_devs[dev].away) {
        free(p);
        return;
    }
    mprt_cu_use(dev);
    cudaFree(p);
}

/* A GPU's host arena is pinned, so its copies run asynchronously. */
static unsigned char *mprt_gpu_host_alloc(int dev, const char *name, size_t n)
{
    void *p = NULL;
    if (mprt_cu_devs[dev].away)
        return mprt_cu_away_alloc(n);
    mprt_cu_use(dev);
    if (cudaHostAlloc(&p, n ? n : 1, cudaHostAllocPortable) != cudaSuccess) {
        fprintf(stderr, "train: error: out of pinned host memory: %s's host arena for "
                "offloaded activations needs %.1f MB; try mpcc --offload=none or a smaller "
                "-batch\n", name, (double)n / 1e6);
        exit(1);
    }
    memset(p, 0, n ? n : 1);
    return p;
}

static void mprt_gpu_host_free(int dev, unsigned char *p)
{
    if (mprt_cu_devs[dev].away)
        free(p);
    else
        cudaFreeHost(p);
}

static void mprt_gpu_dev_write(int dev, void *dst, const void *src, size_t n)
{
    if (mprt_cu_devs[dev].away) {
        memcpy(dst, src, n);
        return;
    }
    mprt_cu_use(dev);
    MPRT_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
}

/* Host staging areas: k selects one, so that several views can be alive. */
MPRT_KERNEL void *mprt_cu_staging(int k, size_t n)
{
    static void *area[4];
    static size_t size[4];
    if (n > size[k]) {
        free(area[k]);
        area[k] = malloc(n);
        size[k] = area[k] ? n : 0;
        if (!area[k])
            mprt_cu_call_failed(1, "malloc", "out of host memory for a staging buffer");
    }
    return area[k];
}

static const void *mprt_gpu_dev_read(int dev, const void *src, size_t n, int k)
{
    if (mprt_cu_devs[dev].away)
        return src;
    void *h = mprt_cu_staging(k, n);
    mprt_cu_use(dev);
    MPRT_CUDA(cudaMemcpy(h, src, n, cudaMemcpyDeviceToHost));
    return h;
}

static const void *mprt_gpu_dev_hold(int dev, const void *src, size_t n)
{
    void *h = malloc(n ? n : 1);
    if (!h)
        mprt_cu_call_failed(1, "malloc", "out of host memory for a checkpoint");
    if (mprt_cu_devs[dev].away)
        return memcpy(h, src, n);
    mprt_cu_use(dev);
    MPRT_CUDA(cudaMemcpy(h, src, n, cudaMemcpyDeviceToHost));
    return h;
}

static void mprt_gpu_dev_unhold(const void *host, const void *src)
{
    (void)src;
    free((void *)host);
}

static void *mprt_gpu_dev_stage(int dev, void *dst, size_t n)
{
    (void)dev, (void)dst;
    return mprt_cu_staging(3, n);
}

static void mprt_gpu_dev_commit(int dev, void *dst, const void *staged, size_t n)
{
    mprt_gpu_dev_write(dev, dst, staged, n);
}

static void mprt_gpu_dev_zero(int dev, void *dst, size_t n)
{
    if (mprt_cu_devs[dev].away) {
        memset(dst, 0, n);
        return;
    }
    mprt_cu_use(dev);
    MPRT_CUDA(cudaMemset(dst, 0, n));
}

static void mprt_gpu_dev_copy(void *dst, const void *src, size_t n)
{
    MPRT_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
}

/* In a stage's forward: the loss of micro-batch mb, copied to the host
 * (mprt_losses, pinned) on the compute stream; read after mprt_sync. */
static void mprt_gpu_keep_loss(int mb, const float *loss)
{
    MPRT_CUDA(cudaMemcpyAsync(&mprt_losses[mb], loss, sizeof(float), cudaMemcpyDeviceToHost,
                              mprt_cu->compute));
}

static void mprt_gpu_losses_alloc(int n)
{
    MPRT_CUDA(cudaHostAlloc((void **)&mprt_losses, (size_t)n * sizeof *mprt_losses,
                            cudaHostAllocPortable));
    memset(mprt_losses, 0, (size_t)n * sizeof *mprt_losses);
}

/* --clip-norm: the table of squared gradient norms (mprt_norm_sq), pinned
 * and mapped, so that a GPU's kernel writes its entries in place (one
 * address on the host and every GPU, unified addressing), and each GPU's
 * group sums and the event that says its entries are in. */
static void mprt_gpu_norm_alloc(int n)
{
    MPRT_CUDA(cudaHostAlloc((void **)&mprt_norm_sq, (size_t)n * sizeof *mprt_norm_sq,
                            cudaHostAllocPortable | cudaHostAllocMapped));
    memset(mprt_norm_sq, 0, (size_t)n * sizeof *mprt_norm_sq);
    for (int d = 0; d < mprt_cu_ndev; d++) {
        MprtCuDevice *c = &mprt_cu_devs[d];
        if (c->ordinal < 0)
            continue;
        MPRT_CUDA(cudaSetDevice(c->ordinal));
        MPRT_CUDA(cudaMalloc((void **)&c->norm_part, MPRT_SQ_GROUPS * sizeof(double)));
        MPRT_CUDA(cudaMalloc((void **)&c->clip, sizeof(float)));
        MPRT_CUDA(cudaEventCreateWithFlags(&c->norm_done, cudaEventDisableTiming));
    }
}

/* At the end of the action that wrote this device's last squared norm. */
MPRT_KERNEL void mprt_cu_norm_mark(void)
{
    MPRT_CUDA(cudaEventRecord(mprt_cu->norm_done, mprt_cu->compute));
}

/* Before a GPU's update computes the clipping factor on the GPU: its compute
 * stream waits for every GPU's squared norms (mprt_cu_clip_factor). */
MPRT_KERNEL void mprt_cu_norm_join(void)
{
    for (int d = 0; d < mprt_cu_ndev; d++)
        if (mprt_cu_devs[d].ordinal >= 0)
            MPRT_CUDA(cudaStreamWaitEvent(mprt_cu->compute, mprt_cu_devs[d].norm_done, 0));
}

/* Before an update computes the clipping factor on the host: every GPU's
 * squared norms are in (a CPU device's are, as its last backward's event
 * was waited for on the host before this update was issued). The one
 * place the host waits inside a step. */
MPRT_KERNEL void mprt_cu_norm_wait(void)
{
    for (int d = 0; d < mprt_cu_ndev; d++)
        if (mprt_cu_devs[d].ordinal >= 0)
            MPRT_CUDA(cudaEventSynchronize(mprt_cu_devs[d].norm_done));
}

/* ---- replicas in one process: a bucket's sum over the copies ---- */

/* Per device of one replica: what its copies' sums share. */
typedef struct MprtCuCopies {
    cudaEvent_t done;            /* on copy 0's GPU: its bucket summed */
    cudaEvent_t *tail;           /* [copies]: copy c's communication stream reached its sum */
    float *staging;              /* on copy 0's GPU: the other copies' gradients */
    size_t cap;                  /* floats */
} MprtCuCopies;
static MprtCuCopies *mprt_cu_copies;   /* [devices of one replica] */

static MprtCuCopies *mprt_cu_copies_of(int dl)
{
    int RL = mprt_replicas_here, D = mprt_replica_devs;
    if (!mprt_cu_copies && !(mprt_cu_copies = calloc((size_t)D, sizeof *mprt_cu_copies)))
        mprt_cu_call_failed(1, "calloc", "out of memory");
    MprtCuCopies *cc = &mprt_cu_copies[dl];
    if (cc->tail)
        return cc;
    if (!(cc->tail = calloc((size_t)RL, sizeof *cc->tail)))
        mprt_cu_call_failed(1, "calloc", "out of memory");
    for (int c = 0; c < RL; c++) {
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[c * D + dl].ordinal));
        MPRT_CUDA(cudaEventCreateWithFlags(&cc->tail[c], cudaEventDisableTiming));
    }
    MPRT_CUDA(cudaSetDevice(mprt_cu_devs[dl].ordinal));
    MPRT_CUDA(cudaEventCreateWithFlags(&cc->done, cudaEventDisableTiming));
    return cc;
}

/* sum = (first ? 0 : sum) + g on the current GPU's current stream (the
 * additions of state.c's mprt_tree_with). */
static void mprt_cu_add(long n, float *sum, const float *g, int first)
{
    void *args[] = {&n, &sum, &g, &first};
    if (n > 0)
        mprt_cu_launch("accumulate", mprt_cu_blocks(n, 256), 256, 0, args);
}

/* Replicas in one process (--data-parallel=R, R > processes): the n
 * gradients of a bucket (g[i], len[i] floats: this copy's), summed over
 * the copies, on the communication stream of the calling copy's GPU (the
 * launch's current stream). Every copy's step is issued in turn (program.c's
 * mprt_issue_in_turn), so when copy 0's sum is issued, every copy's
 * communication stream has reached its wait for its gradients: copy 0
 * waits for each, copies their gradients into staging on its GPU, adds
 * them as the tree (the CPU's bits), sums over the processes (ranks_sum:
 * NCCL's), and records `done`; every other copy waits for that and takes
 * copy 0's sums. */
static void mprt_cu_copies_sum(int stage, int n, float *const *g, const long *len,
                               void (*ranks_sum)(int stage, int n, float *const *g,
                                                 const long *len))
{
    int RL = mprt_replicas_here, D = mprt_replica_devs, d = (int)(mprt_cu - mprt_cu_devs);
    int me = d / D, dl = d % D;
    MprtCuCopies *cc = mprt_cu_copies_of(dl);
    cudaStream_t s = mprt_cu->compute;   /* the communication stream (mprt_gpu_launch) */
    if (me != 0) {
        MPRT_CUDA(cudaSetDevice(mprt_cu->ordinal));
        MPRT_CUDA(cudaStreamWaitEvent(s, cc->done, 0));
        for (int i = 0; i < n; i++) {
            const float *from = (const float *)(mprt_cu_arena_base[dl] +
                                                ((unsigned char *)g[i] - mprt_cu_arena_base[d]));
            MPRT_CUDA(cudaMemcpyPeerAsync(g[i], mprt_cu->ordinal, from, mprt_cu_devs[dl].ordinal,
                                          (size_t)len[i] * sizeof(float), s));
        }
        return;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)len[i];
    for (int c = 1; c < RL; c++) {   /* each copy's stream has reached its sum */
        int x = c * D + dl;
        MPRT_CUDA(cudaSetDevice(mprt_cu_devs[x].ordinal));
        cudaStream_t comm = mprt_cu_streams[x * MPRT_STREAMS + MPRT_STREAM_COMM];
        MPRT_CUDA(cudaEventRecord(cc->tail[c], comm));
    }
    MPRT_CUDA(cudaSetDevice(mprt_cu->ordinal));
    for (int c = 1; c < RL; c++)
        MPRT_CUDA(cudaStreamWaitEvent(s, cc->tail[c], 0));
    if (total * (size_t)(RL - 1) > cc->cap) {   /* the first step: a larger bucket */
        MPRT_CUDA(cudaStreamSynchronize(s));   /* the buckets before it are done with it */
        MPRT_CUDA(cudaFree(cc->staging));
        MPRT_CUDA(cudaMalloc((void **)&cc->staging, total * (size_t)(RL - 1) * sizeof(float)));
        cc->cap = total * (size_t)(RL - 1);
    }
    float **v = malloc((size_t)RL * sizeof *v);
    if (!v)
        mprt_cu_call_failed(1, "malloc", "out of memory");
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        v[0] = g[i];
        for (int c = 1; c < RL; c++) {
            int x = c * D + dl;
            v[c] = cc->staging + (size_t)(c - 1) * total + at;
            MPRT_CUDA(cudaMemcpyPeerAsync(v[c], mprt_cu->ordinal,
                                          mprt_cu_arena_base[x] +
                                              ((unsigned char *)g[i] - mprt_cu_arena_base[d]),
                                          mprt_cu_devs[x].ordinal,
                                          (size_t)len[i] * sizeof(float), s));
        }
        mprt_tree_with(mprt_cu_add, v, RL, len[i]);
        at += (size_t)len[i];
    }
    free(v);
    ranks_sum(stage, n, g, len);
    MPRT_CUDA(cudaSetDevice(mprt_cu->ordinal));
    MPRT_CUDA(cudaEventRecord(cc->done, s));
}

MPRT_GLOBAL const MprtDeviceOps mprt_gpu_ops = {
    .launch = mprt_gpu_launch, .memcpy_async = mprt_gpu_memcpy_async,
    .wait_event = mprt_gpu_wait_event, .record_event = mprt_gpu_record_event,
    .dev_scratch = mprt_gpu_dev_scratch, .dev_zero = mprt_gpu_dev_zero,
    .dev_slots = mprt_gpu_dev_slots,
    .dev_extra = mprt_gpu_dev_extra,
    .arena_alloc = mprt_gpu_arena_alloc, .arena_free = mprt_gpu_arena_free,
    .host_alloc = mprt_gpu_host_alloc, .host_free = mprt_gpu_host_free,
    .dev_write = mprt_gpu_dev_write, .dev_read = mprt_gpu_dev_read, .dev_hold = mprt_gpu_dev_hold,
    .dev_unhold = mprt_gpu_dev_unhold, .dev_stage = mprt_gpu_dev_stage,
    .dev_commit = mprt_gpu_dev_commit, .keep_loss = mprt_gpu_keep_loss,
    .devices_open = mprt_gpu_devices_open, .streams_start = mprt_gpu_streams_start,
    .sync = mprt_gpu_sync, .losses_alloc = mprt_gpu_losses_alloc, .norm_alloc = mprt_gpu_norm_alloc,
    .dev_copy = mprt_gpu_dev_copy, .copies_sum = mprt_cu_copies_sum,
    .graph_step = mprt_gpu_graph_step,
};

#ifndef MPRT_MIXED   /* GPUs only; mixed.c has the table of a trainer with both */
MPRT_GLOBAL const MprtDeviceOps *mprt_ops = &mprt_gpu_ops;
#endif
