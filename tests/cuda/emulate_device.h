/* emulate_device.h — what runtime/kernels.cu needs from CUDA, on the
 * host, so that it compiles as C++ and its kernels run on the CPU: one
 * block of one thread (FOR_EACH and FOR_ROWS then walk everything in
 * order; the block reductions see one lane). The _rn intrinsics are plain
 * float operations (the host compiler contracts nothing on x86-64 without
 * -mfma), so a kernel that keeps the CPU's operation order gives the CPU's
 * bits; e^x, erf and tanh are the CPU's (runtime/vmath.h). Included before kernels.cu by tests/cuda/emulate.py. */
#include <math.h>
#include <string.h>

/* The CPU kernels' e^x, erf and tanh (they vectorise), in place of the
 * host's libm: CUDA's own differ from both. */
#include "../../runtime/vmath.h"
#define expf mprt_expf
#define erff mprt_erff
#define tanhf mprt_tanhf

#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(threads)

struct MprtEmuDim {
    unsigned x;
};

/* CUDA's vector type of the 16-byte loads (kernels.cu's load16, which
 * copies it with memcpy here) */
struct uint4 {
    unsigned x, y, z, w;
};
static MprtEmuDim threadIdx = {0}, blockIdx = {0}, blockDim = {1}, gridDim = {1};

static float __fmul_rn(float a, float b) { return a * b; }
static float __fadd_rn(float a, float b) { return a + b; }
static float __fsub_rn(float a, float b) { return a - b; }
static float __fdiv_rn(float a, float b) { return a / b; }
static float __fsqrt_rn(float a) { return sqrtf(a); }
static double __dmul_rn(double a, double b) { return a * b; }
static double __dadd_rn(double a, double b) { return a + b; }
static double __ddiv_rn(double a, double b) { return a / b; }
static double __dsqrt_rn(double a) { return sqrt(a); }
static float __double2float_rn(double a) { return (float)a; }

static float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static int __float_as_int(float f)
{
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
}

static void __syncthreads(void) {}
static int __syncthreads_or(int p) { return p != 0; }
static unsigned __ballot_sync(unsigned mask, int p) { return p ? 1u & mask : 0u; }
static int __popc(unsigned v) { return __builtin_popcount(v); }

/* One lane: nothing comes down from the lanes above (the sums add 0, the
 * maxima compare with NaN, which never wins). */
static double __shfl_down_sync(unsigned, double, int) { return 0.0; }
static float __shfl_down_sync(unsigned, float, int) { return __int_as_float(0x7fc00000); }

static unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp,
                                    unsigned long long v)
{
    unsigned long long old = *p;
    if (old == cmp)
        *p = v;
    return old;
}

static float atomicAdd(float *p, float v)
{
    float old = *p;
    *p += v;
    return old;
}
