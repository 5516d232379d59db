/* emulate_host.h — runtime/cuda.c's part that runtime/cuda_ops.c uses, on
 * the host: the device is the host's memory, mprt_cu_launch runs the named
 * kernel of runtime/kernels.cu compiled for the host
 * (emulate_device.h), and the compute stream's memset and copy are
 * memset and memcpy, and the fault record is read from the host. cuBLAS
 * and cuDNN are linked but not called (the emulation leaves GEMMs,
 * convolutions and batch-norm training out).
 * Pasted after the runtime and before cuda_ops.c by tests/cuda/emulate.py. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cudnn.h>

typedef struct MprtCuDevice {
    int ordinal;
    cudaStream_t compute;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *scratch;
    size_t scratch_bytes;
    void *workspace;
    size_t workspace_bytes;
    double *norm_part;
    float *clip;
    int clip_on;
} MprtCuDevice;

static MprtCuDevice mprt_emu_device;
static MprtCuDevice *mprt_cu = &mprt_emu_device;
static const char *mprt_cu_node;
static int mprt_cu_tf32;
static int mprt_cu_bf16;

/* runtime/cuda.c's wait for every GPU's squared norms: one device here. */
static void mprt_cu_norm_join(void)
{
}

#define MPRT_EMU_OK(call, ok)                                                          \
    do {                                                                               \
        if ((call) != (ok)) {                                                          \
            fprintf(stderr, "emulate: %s failed\n", #call);                            \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)
#define MPRT_CUDA(call) MPRT_EMU_OK(call, cudaSuccess)
#define MPRT_CUBLAS(call) MPRT_EMU_OK(call, CUBLAS_STATUS_SUCCESS)
#define MPRT_CUDNN(call) MPRT_EMU_OK(call, CUDNN_STATUS_SUCCESS)

/* emulate.py's thunks: kernel mprt_k_<name> unpacking a launch's args. */
typedef void (*MprtEmuThunk)(void **args);
MprtEmuThunk mprt_emu_kernel(const char *name);
extern unsigned long long mprt_k_fault[5];

/* The runtime calls cuda_ops.c makes outside cuBLAS and cuDNN. */
#define cudaMemsetAsync(p, v, n, s) (memset((p), (v), (n)), (void)(s), cudaSuccess)
#define cudaMemcpyAsync(d, x, n, k, s) (memcpy((d), (x), (n)), (void)(k), (void)(s), cudaSuccess)
#define cudaSetDevice(d) ((void)(d), cudaSuccess)
int mprt_emu_launches;

static void mprt_cu_launch(const char *name, unsigned grid, unsigned block, size_t shmem,
                           void **args)
{
    MprtEmuThunk k = mprt_emu_kernel(name);
    if (!k) {
        fprintf(stderr, "emulate: no kernel mprt_k_%s\n", name);
        exit(1);
    }
    (void)grid, (void)block, (void)shmem;
    mprt_emu_launches++;
    k(args);
}

/* runtime/cuda.c's slots of a step's numbers: here the kernel runs at once,
 * so one buffer serves every call. */
typedef void (*MprtCuFill)(const float *k, long step, float *out);
static const float *mprt_cu_slot(MprtCuFill fill, const float *k, long step)
{
    static union { float f[8]; uint64_t u[4]; } h;   /* aligned as a GPU's slot */
    fill(k, step, h.f);
    return h.f;
}

static unsigned mprt_cu_blocks(long n, unsigned block)
{
    long b = (n + block - 1) / block;
    return b < 1 ? 1u : b > 65535 ? 65535u : (unsigned)b;
}
