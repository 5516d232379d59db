/* cuda_stub.h — the part of runtime/cuda.c that runtime/cuda_ops.c uses,
 * for compiling and linking cuda_ops.c without the real device code (the
 * generated trainer pastes cuda.c in its place). Nothing here runs. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <nvrtc.h>

typedef struct MprtCuDevice {
    int ordinal;
    cudaStream_t compute;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *scratch;
    size_t scratch_bytes;
} MprtCuDevice;

static MprtCuDevice *mprt_cu;
static const char *mprt_cu_node;

#define MPRT_CU_FAIL(call, what)                                                        \
    do {                                                                               \
        fprintf(stderr, "train: error: node '%s': %s: %s\n",                           \
                mprt_cu_node ? mprt_cu_node : "?", #call, what);                       \
        exit(1);                                                                       \
    } while (0)
#define MPRT_CUDA(call)                                                                \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess)                                                         \
            MPRT_CU_FAIL(call, cudaGetErrorString(e_));                                \
    } while (0)
#define MPRT_CUBLAS(call)                                                              \
    do {                                                                               \
        cublasStatus_t e_ = (call);                                                    \
        if (e_ != CUBLAS_STATUS_SUCCESS)                                               \
            MPRT_CU_FAIL(call, cublasGetStatusString(e_));                             \
    } while (0)
#define MPRT_CUDNN(call)                                                               \
    do {                                                                               \
        cudnnStatus_t e_ = (call);                                                     \
        if (e_ != CUDNN_STATUS_SUCCESS)                                                \
            MPRT_CU_FAIL(call, cudnnGetErrorString(e_));                               \
    } while (0)
#define MPRT_CU(call)                                                                  \
    do {                                                                               \
        CUresult e_ = (call);                                                          \
        const char *s_ = "unknown error";                                              \
        if (e_ != CUDA_SUCCESS) {                                                      \
            cuGetErrorString(e_, &s_);                                                 \
            MPRT_CU_FAIL(call, s_);                                                    \
        }                                                                              \
    } while (0)

static CUmodule mprt_cu_stub_module;

static void mprt_cu_launch(const char *name, unsigned grid, unsigned block, size_t shmem,
                           void **args)
{
    CUfunction f;
    char full[128];
    snprintf(full, sizeof full, "mprt_k_%s", name);
    MPRT_CU(cuModuleGetFunction(&f, mprt_cu_stub_module, full));
    MPRT_CU(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, (unsigned)shmem,
                           (CUstream)mprt_cu->compute, args, NULL));
}

static unsigned mprt_cu_blocks(long n, unsigned block)
{
    long b = (n + block - 1) / block;
    return b < 1 ? 1u : b > 65535 ? 65535u : (unsigned)b;
}
