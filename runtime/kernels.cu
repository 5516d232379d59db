/* kernels.cu — the CUDA device's kernels, compiled by NVRTC when the
 * trainer starts (one module; runtime/cuda_ops.c launches them by name).
 *
 * Each kernel mirrors its CPU twin in runtime/cpu.c, cpu_move.c or
 * cpu_math.c: the same formulas in the same float operation order (the
 * products and sums that a fused multiply-add would change are written
 * with the _rn intrinsics, which are never fused), reductions in double
 * where the CPU reduces in double, and the same dropout mask bit for bit.
 * Where the CPU scatters (gradients of Gather, MaxPool, AveragePool, Pad,
 * Resize; ScatterElements, ScatterND), the kernels gather instead: each
 * output element is owned by one thread that adds its terms in the CPU's
 * order, so the results are deterministic. Double products that the CPU
 * rounds before adding are DMUL (__dmul_rn) for the same reason as the
 * float ones. The op codes and limits are runtime/opcodes.h's, as
 * kernel.h's are (NVRTC gets that file as the header of this one); the
 * parameter structs passed by value have kernel.h's layouts
 * (tests/cuda/check_cuda_ops.py compares them).
 *
 * NVRTC has no libc headers: the fixed-width types are defined here.
 * Elementwise kernels are grid-stride loops; row kernels run one block per
 * row (blockDim a multiple of 32, at most 1024). */

#include "opcodes.h"

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;

/* The op codes of opcodes.h as named there: ADD, not kernel.h's MPRT_ADD. */
#define OPCODE(name) name,
MPRT_OPCODES(OPCODE)

#define MPRT_INF __int_as_float(0x7f800000)
#define FMUL __fmul_rn
#define FADD __fadd_rn
#define FSUB __fsub_rn
#define FDIV __fdiv_rn
#define DMUL __dmul_rn   /* a double product that must not fuse into the sum after it */

#define FOR_EACH(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (i64)gridDim.x * blockDim.x)
#define FOR_ROWS(r, n) for (i64 r = blockIdx.x; r < (n); r += gridDim.x)

/* Faults a kernel cannot report itself (an index or a label out of range):
 * the first one is kept here, {code, value, bound, node, ignore}, where
 * node is the host's pointer to the node's name and ignore a loss's
 * ignore_index; the host reads it after a step (mprt_cu_check_faults). */
enum { FAULT_NONE, FAULT_INDEX, FAULT_LABEL };
extern "C" {
__device__ u64 mprt_k_fault[5];
}

static __device__ void fault(int code, i64 value, i64 bound, u64 node, i64 ignore)
{
    if (atomicCAS(&mprt_k_fault[0], 0ULL, (u64)code) == 0ULL) {
        mprt_k_fault[1] = (u64)value;
        mprt_k_fault[2] = (u64)bound;
        mprt_k_fault[3] = node;
        mprt_k_fault[4] = (u64)ignore;
    }
}

/* ---- block reductions (every thread of the block calls them) ---- */

static __device__ double block_sum(double v)
{
    __shared__ double part[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? part[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0)
            part[0] = v;
    }
    __syncthreads();
    return part[0];
}

/* The largest value, NaNs ignored (the caller applies the CPU's rule for a
 * NaN first element). */
static __device__ float block_max(float v)
{
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_down_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? part[lane] : -MPRT_INF;
        for (int o = 16; o > 0; o >>= 1) {
            float u = __shfl_down_sync(0xffffffffu, v, o);
            v = u > v ? u : v;
        }
        if (lane == 0)
            part[0] = v;
    }
    __syncthreads();
    return part[0];
}

/* ---- broadcasting: up to three operands' strides per output dimension ---- */

struct Bcast {
    i64 shape[8];
    i64 stride[3][8];
    int rank;
};

/* Element i's index along each of `rank` dims (digit[d], the last dim
 * fastest). In 32 bits below 2^31: a 64-bit division is tens of
 * instructions, which for a few each element would bound the elementwise
 * kernels below the memory's bandwidth (a dim past 2^31 then holds the
 * whole rest of the index). The host merges the dims every operand walks
 * alike first (cuda_ops.c's mprt_cu_merge_dims, codegen.c's chain_dims):
 * dense operands take one dim and the callers no division. */
static __device__ void index_digits(i64 i, int rank, const i64 *shape, i64 *digit)
{
    if (i <= 0x7fffffff) {
        unsigned e = (unsigned)i;
        for (int d = rank - 1; d >= 0; d--) {
            unsigned s = shape[d] > 0x7fffffff ? 0x80000000u : (unsigned)shape[d], q = e / s;
            digit[d] = e - q * s;
            e = q;
        }
        return;
    }
    for (int d = rank - 1; d >= 0; d--) {
        i64 q = i / shape[d];
        digit[d] = i - q * shape[d];
        i = q;
    }
}

/* Element i's offset in each of k operands. */
static __device__ void bcast_offsets(const Bcast &b, i64 i, int k, i64 *off)
{
    i64 digit[8];
    if (b.rank == 1) {
        for (int j = 0; j < k; j++)
            off[j] = i * b.stride[j][0];
        return;
    }
    index_digits(i, b.rank, b.shape, digit);
    for (int j = 0; j < k; j++) {
        off[j] = 0;
        for (int d = 0; d < b.rank; d++)
            off[j] += digit[d] * b.stride[j][d];
    }
}

/* ---- bfloat16 storage (--precision=bf16): cpu.c's conversions ---- */

typedef unsigned short u16;

static __device__ u16 bf16_of(float f)
{
    unsigned u = (unsigned)__float_as_int(f);
    unsigned even = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
    return (u16)((u & 0x7fffffffu) > 0x7f800000u ? nan : even);
}

static __device__ float f32_of(u16 h)
{
    return __int_as_float((int)((unsigned)h << 16));
}

/* An element of float32 or bf16 as a float, and a float stored as one
 * (bf16 rounded to nearest even): the row kernels' bodies are templates
 * over the element type, so that their bf16 twins (mprt_k_softmax_bf16
 * and the like) do the float32 kernels' float operations on the widened
 * values and round each result once, as the CPU's conversions do. */
static __device__ float load_el(const float *p, i64 i)
{
    return p[i];
}

static __device__ float load_el(const u16 *p, i64 i)
{
    return f32_of(p[i]);
}

static __device__ void store_el(float *p, i64 i, float v)
{
    p[i] = v;
}

static __device__ void store_el(u16 *p, i64 i, float v)
{
    p[i] = bf16_of(v);
}

extern "C" __global__ void mprt_k_bf16_widen(i64 n, const u16 *x, float *y)
{
    FOR_EACH(i, n) y[i] = f32_of(x[i]);
}

extern "C" __global__ void mprt_k_bf16_narrow(i64 n, const float *x, u16 *y)
{
    FOR_EACH(i, n) y[i] = bf16_of(x[i]);
}

extern "C" __global__ void mprt_k_bf16_round(i64 n, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] = f32_of(bf16_of(x[i]));
}

/* ---- chunks of 8 elements: a thread's loads issued together ----
 *
 * A kernel whose threads each load one element keeps too few loads in
 * flight to use the memory's bandwidth where it has few threads (a block
 * per channel), or bf16 elements of 2 bytes: these take chunks of 8
 * contiguous elements a thread, loaded as one 16-byte load (two for
 * float32) where the chunk is whole and 16-byte aligned, else one element
 * after another, then computed element by element in order, as before. */
#define CHUNK 8

static __device__ bool aligned16(const void *p)
{
    return ((unsigned long long)p & 15) == 0;
}

/* Whether every chunk of rows of P elements at a, b and c lies whole and
 * 16-byte aligned (NULL tensors, not read, count as aligned). */
static __device__ bool chunk_vec(i64 P, const void *a, const void *b, const void *c)
{
    return P % CHUNK == 0 && aligned16(a) && aligned16(b) && aligned16(c);
}

/* How many elements chunk r of a row of P elements has. */
static __device__ int chunk_len(i64 r, i64 P)
{
    return P - CHUNK * r < CHUNK ? (int)(P - CHUNK * r) : CHUNK;
}

/* 16 bytes at p, 16-byte aligned: one vector load or store (memcpy where
 * tests/cuda compiles this file for the host). */
static __device__ uint4 load16(const void *p)
{
#ifdef __CUDA_ARCH__
    return *(const uint4 *)p;
#else
    uint4 q;
    memcpy(&q, p, sizeof q);
    return q;
#endif
}

static __device__ void store16(void *p, uint4 q)
{
#ifdef __CUDA_ARCH__
    *(uint4 *)p = q;
#else
    memcpy(p, &q, sizeof q);
#endif
}

/* Elements [k, k + len) of p (len <= CHUNK) as floats in v: with vec, a
 * whole aligned chunk in vector loads (the lower address the lower half
 * of each word), else one by one. */
static __device__ void load_chunk(const u16 *p, i64 k, int len, bool vec, float *v)
{
    if (vec) {
        uint4 q = load16(p + k);
        unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int h = 0; h < CHUNK; h++)
            v[h] = f32_of((u16)(w[h >> 1] >> (16 * (h & 1))));
        return;
    }
#pragma unroll
    for (int h = 0; h < CHUNK; h++)
        if (h < len)
            v[h] = f32_of(p[k + h]);
}

static __device__ void load_chunk(const float *p, i64 k, int len, bool vec, float *v)
{
    if (vec) {
#pragma unroll
        for (int j = 0; j < CHUNK; j += 4) {
            uint4 q = load16(p + k + j);
            v[j] = __int_as_float((int)q.x), v[j + 1] = __int_as_float((int)q.y);
            v[j + 2] = __int_as_float((int)q.z), v[j + 3] = __int_as_float((int)q.w);
        }
        return;
    }
#pragma unroll
    for (int h = 0; h < CHUNK; h++)
        if (h < len)
            v[h] = p[k + h];
}

static __device__ void store_chunk(u16 *p, i64 k, int len, bool vec, const float *v)
{
    if (vec) {
        unsigned w[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = (unsigned)bf16_of(v[2 * j]) | (unsigned)bf16_of(v[2 * j + 1]) << 16;
        store16(p + k, uint4{w[0], w[1], w[2], w[3]});
        return;
    }
#pragma unroll
    for (int h = 0; h < CHUNK; h++)
        if (h < len)
            p[k + h] = bf16_of(v[h]);
}

static __device__ void store_chunk(float *p, i64 k, int len, bool vec, const float *v)
{
    if (vec) {
#pragma unroll
        for (int j = 0; j < CHUNK; j += 4)
            store16(p + k + j, uint4{(unsigned)__float_as_int(v[j]),
                                     (unsigned)__float_as_int(v[j + 1]),
                                     (unsigned)__float_as_int(v[j + 2]),
                                     (unsigned)__float_as_int(v[j + 3])});
        return;
    }
#pragma unroll
    for (int h = 0; h < CHUNK; h++)
        if (h < len)
            p[k + h] = v[h];
}

/* mprt_k_bf16_widen and _narrow a chunk of 8 a thread (cuda_ops.c's
 * mprt_cu_chunked says where): one 16-byte load or store of bf16 for two
 * of float32. */
extern "C" __global__ void mprt_k_bf16_widen_chunks(i64 chunks, const u16 *x, float *y)
{
    FOR_EACH(j, chunks) {
        float v[CHUNK];
        load_chunk(x, CHUNK * j, CHUNK, true, v);
        store_chunk(y, CHUNK * j, CHUNK, true, v);
    }
}

extern "C" __global__ void mprt_k_bf16_narrow_chunks(i64 chunks, const float *x, u16 *y)
{
    FOR_EACH(j, chunks) {
        float v[CHUNK];
        load_chunk(x, CHUNK * j, CHUNK, true, v);
        store_chunk(y, CHUNK * j, CHUNK, true, v);
    }
}

/* ---- elementwise ---- */

extern "C" __global__ void mprt_k_relu(i64 n, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

extern "C" __global__ void mprt_k_relu_grad(i64 n, const float *dy, const float *y, float *dx)
{
    FOR_EACH(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* y = x[0] + x[1] + ... (k <= 8 inputs), left to right; with more, the host
 * continues with acc = 1 (y + x[8] + ...). */
struct Ptrs {
    const float *p[8];
};

extern "C" __global__ void mprt_k_sum(i64 n, int k, int acc, Ptrs x, float *y)
{
    FOR_EACH(i, n) {
        float s = acc ? y[i] : x.p[0][i];
        for (int j = acc ? 0 : 1; j < k; j++)
            s = FADD(s, x.p[j][i]);
        y[i] = s;
    }
}

/* sum = (first ? 0 : sum) + g: a parameter's gradient summed over micro-batches */
extern "C" __global__ void mprt_k_accumulate(i64 n, float *sum, const float *g, int first)
{
    FOR_EACH(i, n) sum[i] = FADD(first ? 0.0f : sum[i], g[i]);
}

/* One element of mprt_k_binary: u op v (shared with mprt_k_ew_chain). */
static __device__ float binary1(int op, float u, float v)
{
    switch (op) {
    case ADD: return FADD(u, v);
    case SUB: return FSUB(u, v);
    case MUL: return FMUL(u, v);
    case DIV: return FDIV(u, v);
    case PRELU: return u > 0 ? u : FMUL(u, v);
    default: return powf(u, v);
    }
}

extern "C" __global__ void mprt_k_binary(int op, i64 n, Bcast b, const float *x, const float *z,
                                         float *y)
{
    FOR_EACH(i, n) {
        i64 off[2];
        bcast_offsets(b, i, 2, off);
        y[i] = binary1(op, x[off[0]], z[off[1]]);
    }
}

/* The gradient of a^b in y's shape: wrt 0, dy * b * a^(b-1); wrt 1, dy * y * ln a. */
extern "C" __global__ void mprt_k_pow_grad(int wrt, i64 n, Bcast b, const float *dy,
                                           const float *a, const float *e, const float *y,
                                           float *out)
{
    FOR_EACH(i, n) {
        i64 off[2];
        bcast_offsets(b, i, 2, off);
        float u = a[off[0]], v = e[off[1]];
        if (wrt == 0)
            out[i] = v == 0.0f ? 0.0f : FMUL(FMUL(dy[i], v), powf(u, FSUB(v, 1.0f)));
        else
            out[i] = u > 0.0f ? FMUL(FMUL(dy[i], y[i]), logf(u)) : 0.0f;
    }
}

extern "C" __global__ void mprt_k_where(i64 n, Bcast b, const u8 *cond, const float *x,
                                        const float *z, float *y)
{
    FOR_EACH(i, n) {
        i64 off[3];
        bcast_offsets(b, i, 3, off);
        y[i] = cond[off[0]] ? x[off[1]] : z[off[2]];
    }
}

/* Expand of bool or integer tensors: size bytes per element. */
extern "C" __global__ void mprt_k_broadcast_bytes(i64 n, Bcast b, i64 size, const u8 *x, u8 *y)
{
    FOR_EACH(i, n) {
        i64 off[1];
        bcast_offsets(b, i, 1, off);
        for (i64 k = 0; k < size; k++)
            y[i * size + k] = x[off[0] * size + k];
    }
}

/* The gradient of PRelu in x's shape (b: the slope's strides): wrt 0,
 * dy * (x > 0 ? 1 : slope); wrt 1, dy * (x > 0 ? 0 : x). */
extern "C" __global__ void mprt_k_prelu_grad(int wrt, i64 n, Bcast b, const float *dy,
                                             const float *x, const float *slope, float *out)
{
    FOR_EACH(i, n) {
        i64 off[1];
        bcast_offsets(b, i, 1, off);
        float v = x[i];
        out[i] = wrt == 0 ? (v > 0 ? dy[i] : FMUL(dy[i], slope[off[0]]))
                          : (v > 0 ? 0.0f : FMUL(dy[i], v));
    }
}

/* ---- variadic ops with broadcasting: Sum, Mean, Min, Max (and Expand, Tile) ---- */

/* k <= 8 operands broadcast into the output: their pointers and their
 * strides per output dimension (0 where broadcast). */
struct Nary {
    const float *p[8];
    i64 shape[8];
    i64 stride[8][8];   /* [operand][dimension] */
    int rank, k;
};

static __device__ void nary_offsets(const Nary &a, i64 i, i64 *off)
{
    i64 digit[8];
    if (a.rank == 1) {
        for (int j = 0; j < a.k; j++)
            off[j] = i * a.stride[j][0];
        return;
    }
    index_digits(i, a.rank, a.shape, digit);
    for (int j = 0; j < a.k; j++) {
        off[j] = 0;
        for (int d = 0; d < a.rank; d++)
            off[j] += digit[d] * a.stride[j][d];
    }
}

/* y = scale * (x[0] op x[1] op ...), left to right; a NaN operand gives NaN */
extern "C" __global__ void mprt_k_nary(int op, i64 n, Nary a, float scale, float *y)
{
    FOR_EACH(i, n) {
        i64 off[8];
        nary_offsets(a, i, off);
        float v = a.p[0][off[0]];
        for (int j = 1; j < a.k; j++) {
            float u = a.p[j][off[j]];
            v = op == ADD ? FADD(v, u) : v != v || u != u ? FADD(v, u)
              : op == MIN ? (u < v ? u : v) : (u > v ? u : v);
        }
        y[i] = FMUL(v, scale);
    }
}

/* The gradient of Min or Max for operand wrt, in y's shape: dy where the
 * operand is the result, divided among the operands that tie there. */
extern "C" __global__ void mprt_k_minmax_grad(int wrt, i64 n, Nary a, const float *dy,
                                              const float *y, float *out)
{
    FOR_EACH(i, n) {
        i64 off[8];
        nary_offsets(a, i, off);
        int ties = 0;
        for (int j = 0; j < a.k; j++)
            ties += a.p[j][off[j]] == y[i];
        out[i] = a.p[wrt][off[wrt]] == y[i] ? FDIV(dy[i], (float)ties) : 0.0f;
    }
}

static __device__ float clampf(float v, float lo, float hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* sqrt(2/pi) and the cubic coefficient of Gelu's tanh approximation */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

static __device__ float gelu(float v, float q)
{
    if (q != 0.0f)
        return FMUL(FMUL(0.5f, v),
                    FADD(1.0f, tanhf(FMUL(GELU_K, FADD(v, FMUL(FMUL(FMUL(GELU_C, v), v), v))))));
    return FMUL(FMUL(0.5f, v), FADD(1.0f, erff(FMUL(v, 0.70710678118654752f))));
}

static __device__ float gelu_grad(float v, float q)
{
    if (q != 0.0f) {
        float t = tanhf(FMUL(GELU_K, FADD(v, FMUL(FMUL(FMUL(GELU_C, v), v), v))));
        float dt = FMUL(FMUL(FSUB(1.0f, FMUL(t, t)), GELU_K),
                        FADD(1.0f, FMUL(FMUL(FMUL(3.0f, GELU_C), v), v)));
        return FADD(FMUL(0.5f, FADD(1.0f, t)), FMUL(FMUL(0.5f, v), dt));
    }
    return FADD(FMUL(0.5f, FADD(1.0f, erff(FMUL(v, 0.70710678118654752f)))),
                FMUL(FMUL(v, 0.39894228040143268f), expf(FMUL(FMUL(-0.5f, v), v))));
}

/* One element of mprt_k_unary: f(v); p, q: the op's parameters (kernel.h
 * says which op has which). Shared with mprt_k_ew_chain. */
static __device__ float unary1(int op, float v, float p, float q)
{
    switch (op) {
    case ERF: return erff(v);
    case TANH: return tanhf(v);
    case SQRT: return __fsqrt_rn(v);
    case EXP: return expf(v);
    case LOG: return logf(v);
    case NEG: return -v;
    case SIGMOID: return FDIV(1.0f, FADD(1.0f, expf(-v)));
    case RECIPROCAL: return FDIV(1.0f, v);
    case HARD_SIGMOID: return clampf(FADD(FMUL(p, v), q), 0.0f, 1.0f);
    case HARD_SWISH: return FMUL(v, clampf(FADD(FDIV(v, 6.0f), 0.5f), 0.0f, 1.0f));
    case LEAKY_RELU: return v > 0 ? v : FMUL(p, v);
    case ELU: return v > 0 ? v : FMUL(p, expm1f(v));
    case SELU: return FMUL(q, v > 0 ? v : FMUL(p, expm1f(v)));
    case SOFTPLUS: return FADD(v > 0 ? v : 0.0f, log1pf(expf(-fabsf(v))));
    case GELU: return gelu(v, q);
    case CLIP: return clampf(v, p, q);
    default: return fabsf(v);
    }
}

extern "C" __global__ void mprt_k_unary(int op, i64 n, float p, float q, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] = unary1(op, x[i], p, q);
}

/* One element of mprt_k_unary_grad: g * f'(x) from x or y = f(x), PyTorch's
 * side at the kinks (as the CPU). Shared with mprt_k_ew_chain. */
static __device__ float unary_grad1(int op, float g, float x, float y, float p, float q)
{
    const float two_over_sqrt_pi = 1.12837916709551257f;
    switch (op) {
    case ERF: return FMUL(FMUL(g, two_over_sqrt_pi), expf(FMUL(-x, x)));
    case TANH: return FMUL(g, FSUB(1.0f, FMUL(y, y)));
    case SQRT: return FDIV(FMUL(g, 0.5f), y);
    case EXP: return FMUL(g, y);
    case LOG: return FDIV(g, x);
    case NEG: return -g;
    case SIGMOID: return FMUL(FMUL(g, y), FSUB(1.0f, y));
    case RECIPROCAL: return FMUL(FMUL(-g, y), y);
    case HARD_SIGMOID: {
        float t = FADD(FMUL(p, x), q);
        return t > 0.0f && t < 1.0f ? FMUL(g, p) : 0.0f;
    }
    case HARD_SWISH: return x < -3.0f ? 0.0f : x <= 3.0f ? FMUL(g, FADD(FDIV(x, 3.0f), 0.5f)) : g;
    case LEAKY_RELU: return x > 0 ? g : FMUL(g, p);
    case ELU: return x > 0 ? g : FMUL(g, FADD(y, p));
    case SELU: return x > 0 ? FMUL(g, q) : FMUL(FMUL(FMUL(g, q), p), expf(x));
    case SOFTPLUS: return FDIV(g, FADD(1.0f, expf(-x)));
    case GELU: return FMUL(g, gelu_grad(x, q));
    case CLIP: return x >= p && x <= q ? g : 0.0f;
    default: return x > 0 ? g : x < 0 ? -g : 0.0f;
    }
}

extern "C" __global__ void mprt_k_unary_grad(int op, i64 n, float p, float q, const float *dy,
                                             const float *x, const float *y, float *dx)
{
    FOR_EACH(i, n) dx[i] = unary_grad1(op, dy[i], x[i], y[i], p, q);
}

/* ---- fused elementwise chains (kernel.h's MprtEwChain) ---- */

struct EwStep {
    int kind, op;
    int a, b;
    int swap;
    int round;
    float p, q;
};

struct EwChain {
    int rank, nops, nsteps;
    int bf16;
    i64 shape[8];
    i64 stride[MPRT_EW_OPERANDS][8];
    EwStep step[MPRT_EW_STEPS];
};

struct EwPtrs {
    const void *p[MPRT_EW_OPERANDS];
};

/* Operand k at offset i: bf16 widened where the chain stores it so. */
static __device__ float ew_operand(const EwChain &c, const EwPtrs &x, int k, i64 i)
{
    if (c.bf16 >> k & 1)
        return f32_of(((const u16 *)x.p[k])[i]);
    return ((const float *)x.p[k])[i];
}

/* Element i's offset in each operand (index_digits). */
static __device__ void ew_offsets(const EwChain &c, i64 i, i64 *off)
{
    i64 digit[8];
    if (c.rank == 1) {
        for (int k = 0; k < c.nops; k++)
            off[k] = i * c.stride[k][0];
        return;
    }
    index_digits(i, c.rank, c.shape, digit);
    for (int k = 0; k < c.nops; k++) {
        off[k] = 0;
        for (int d = 0; d < c.rank; d++)
            off[k] += digit[d] * c.stride[k][d];
    }
}

/* One thread per element: its value through the chain's steps, each the
 * float operations of the unfused kernel (binary1, unary1, unary_grad1,
 * mprt_k_relu's and mprt_k_relu_grad's selects), rounded to bf16 where
 * the step's node stores its value so. */
extern "C" __global__ void mprt_k_ew_chain(i64 n, EwChain c, EwPtrs x, void *y)
{
    FOR_EACH(i, n) {
        i64 off[MPRT_EW_OPERANDS];
        ew_offsets(c, i, off);
        float v = 0.0f;
        for (int s = 0; s < c.nsteps; s++) {
            const EwStep &t = c.step[s];
            float u = t.a >= 0 ? ew_operand(c, x, t.a, off[t.a]) : t.p;
            switch (t.kind) {
            case EW_LOAD: v = u; break;
            case EW_UNARY: v = unary1(t.op, v, t.p, t.q); break;
            case EW_RELU: v = v > 0.0f ? v : 0.0f; break;
            case EW_BINARY: v = t.swap ? binary1(t.op, u, v) : binary1(t.op, v, u); break;
            case EW_UNARY_GRAD:
                v = unary_grad1(t.op, v, u, ew_operand(c, x, t.b, off[t.b]), t.p, t.q);
                break;
            default: v = u > 0.0f ? v : 0.0f; break;
            }
            if (t.round)
                v = f32_of(bf16_of(v));
        }
        if (c.bf16 & MPRT_EW_OUT_BF16)
            ((u16 *)y)[i] = bf16_of(v);
        else
            ((float *)y)[i] = v;
    }
}

/* Operand k's chunk of 8 at offset i into u: a value broadcast along the
 * last dim (its stride 0 there) 8 times, else 8 contiguous elements from
 * a 16-byte aligned start (cuda_ops.c's mprt_cu_ew_chunked). */
static __device__ void ew_chunk(const EwChain &c, const EwPtrs &x, int k, i64 i, float *u)
{
    if (c.stride[k][c.rank - 1] == 0) {
        float v = ew_operand(c, x, k, i);
#pragma unroll
        for (int h = 0; h < CHUNK; h++)
            u[h] = v;
    } else if (c.bf16 >> k & 1) {
        load_chunk((const u16 *)x.p[k], i, CHUNK, true, u);
    } else {
        load_chunk((const float *)x.p[k], i, CHUNK, true, u);
    }
}

/* mprt_k_ew_chain a chunk of 8 elements of the last dim a thread (its
 * extent a multiple of 8; mprt_cu_ew_chunked says where): each step's
 * operands loaded a chunk at a time, then the step's float operations on
 * each element, as mprt_k_ew_chain's. */
extern "C" __global__ void mprt_k_ew_chain_chunks(i64 chunks, EwChain c, EwPtrs x, void *y)
{
    FOR_EACH(j, chunks) {
        i64 off[MPRT_EW_OPERANDS];
        ew_offsets(c, CHUNK * j, off);
        float v[CHUNK] = {0};
        for (int s = 0; s < c.nsteps; s++) {
            const EwStep &t = c.step[s];
            float u[CHUNK], w[CHUNK] = {0};
            if (t.a >= 0)
                ew_chunk(c, x, t.a, off[t.a], u);
            else
#pragma unroll
                for (int h = 0; h < CHUNK; h++)
                    u[h] = t.p;
            if (t.kind == EW_UNARY_GRAD)
                ew_chunk(c, x, t.b, off[t.b], w);
#pragma unroll
            for (int h = 0; h < CHUNK; h++) {
                switch (t.kind) {
                case EW_LOAD: v[h] = u[h]; break;
                case EW_UNARY: v[h] = unary1(t.op, v[h], t.p, t.q); break;
                case EW_RELU: v[h] = v[h] > 0.0f ? v[h] : 0.0f; break;
                case EW_BINARY:
                    v[h] = t.swap ? binary1(t.op, u[h], v[h]) : binary1(t.op, v[h], u[h]);
                    break;
                case EW_UNARY_GRAD: v[h] = unary_grad1(t.op, v[h], u[h], w[h], t.p, t.q); break;
                default: v[h] = u[h] > 0.0f ? v[h] : 0.0f; break;
                }
                if (t.round)
                    v[h] = f32_of(bf16_of(v[h]));
            }
        }
        if (c.bf16 & MPRT_EW_OUT_BF16)
            store_chunk((u16 *)y, CHUNK * j, CHUNK, true, v);
        else
            store_chunk((float *)y, CHUNK * j, CHUNK, true, v);
    }
}

/* ---- sums over broadcast dimensions ---- */

/* out = alpha * dy summed over the dims where keep[d] is 0. kept/red list
 * the kept and the reduced dims (in order) with dy's strides. */
struct SumTo {
    i64 kshape[8], kstride[8];   /* kept dims: extent, stride in dy */
    i64 rshape[8], rstride[8];   /* reduced dims */
    int nk, nr;
    i64 nred;                    /* product of rshape */
};

static __device__ i64 sum_to_base(const SumTo &p, i64 o)
{
    i64 base = 0;
    for (int d = p.nk - 1; d >= 0; d--) {
        i64 q = o / p.kshape[d];
        base += (o - q * p.kshape[d]) * p.kstride[d];
        o = q;
    }
    return base;
}

static __device__ i64 sum_to_off(const SumTo &p, i64 r)
{
    i64 off = 0;
    for (int d = p.nr - 1; d >= 0; d--) {
        i64 q = r / p.rshape[d];
        off += (r - q * p.rshape[d]) * p.rstride[d];
        r = q;
    }
    return off;
}

/* One thread per output, adding in dy's order as the CPU does (dy float32,
 * or bf16 in the _bf16 twins: the sums of a bias gradient). */
template <typename T>
static __device__ void sum_to_each(SumTo p, const T *dy, float alpha, i64 n_out, float *out)
{
    FOR_EACH(o, n_out) {
        i64 base = sum_to_base(p, o);
        double acc = 0;
        for (i64 r = 0; r < p.nred; r++)
            acc += load_el(dy, base + sum_to_off(p, r));
        out[o] = (float)(alpha * acc);
    }
}

extern "C" __global__ void mprt_k_sum_to(SumTo p, const float *dy, float alpha, i64 n_out,
                                         float *out)
{
    sum_to_each(p, dy, alpha, n_out, out);
}

extern "C" __global__ void mprt_k_sum_to_bf16(SumTo p, const u16 *dy, float alpha, i64 n_out,
                                              float *out)
{
    sum_to_each(p, dy, alpha, n_out, out);
}

/* One block per output, for few outputs with many terms each. */
template <typename T>
static __device__ void sum_to_rows(SumTo p, const T *dy, float alpha, i64 n_out, float *out)
{
    FOR_ROWS(o, n_out) {
        i64 base = sum_to_base(p, o);
        double acc = 0;
        for (i64 r = threadIdx.x; r < p.nred; r += blockDim.x)
            acc += load_el(dy, base + sum_to_off(p, r));
        acc = block_sum(acc);
        if (threadIdx.x == 0)
            out[o] = (float)(alpha * acc);
    }
}

extern "C" __global__ void mprt_k_sum_to_rows(SumTo p, const float *dy, float alpha, i64 n_out,
                                              float *out)
{
    sum_to_rows(p, dy, alpha, n_out, out);
}

extern "C" __global__ void mprt_k_sum_to_rows_bf16(SumTo p, const u16 *dy, float alpha,
                                                   i64 n_out, float *out)
{
    sum_to_rows(p, dy, alpha, n_out, out);
}

/* out[c] = alpha * the sum over r of y[r * C + c], for a sum over leading
 * dims (bias gradients): a block takes 32 adjacent columns (a warp's
 * lanes, so that each row's read is one coalesced line), its warps split
 * the rows (warp w takes r = w, w + nw, ...), each in double, and the
 * warps' partials add in the warps' order: the same bits on every run for
 * a given block size. With one thread a block (runtime/cuda_ops.c never
 * launches that; tests/cuda's emulation does) it is the CPU's loop. */
template <typename T>
static __device__ void col_sum_cols(i64 R, i64 C, const T *y, float alpha, float *out)
{
    __shared__ double part[32][33];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    int width = blockDim.x < 32 ? blockDim.x : 32;
    for (i64 c0 = (i64)blockIdx.x * width; c0 < C; c0 += (i64)gridDim.x * width) {
        i64 c = c0 + lane;
        double acc = 0;
        if (c < C)
#pragma unroll 4
            for (i64 r = w; r < R; r += nw)
                acc += load_el(y, r * C + c);
        part[w][lane] = acc;
        __syncthreads();
        if (w == 0 && c < C) {
            double total = 0;
            for (int q = 0; q < nw; q++)
                total += part[q][lane];
            out[c] = (float)(alpha * total);
        }
        __syncthreads();
    }
}

extern "C" __global__ void mprt_k_col_sum(i64 R, i64 C, const float *y, float alpha, float *out)
{
    col_sum_cols(R, C, y, alpha, out);
}

extern "C" __global__ void mprt_k_col_sum_bf16(i64 R, i64 C, const u16 *y, float alpha,
                                               float *out)
{
    col_sum_cols(R, C, y, alpha, out);
}

/* ---- ReduceMax and ReduceMin over the dims SumTo reduces ---- */

/* Whether candidate (v, iv) replaces (m, im) as the CPU's running extreme
 * would, the elements being taken in index order: a NaN wins (the last
 * one), then a strictly larger (is_min: smaller) value, then among equal
 * values (+0 and -0 too) the first. */
static __device__ bool extreme_wins(int is_min, float v, i64 iv, float m, i64 im)
{
    if (v != v || m != m)
        return v != v && (m == m || iv > im);
    if (is_min ? v < m : v > m)
        return true;
    return v == m && iv < im;
}

/* One thread per output, the reduced elements in x's order. */
extern "C" __global__ void mprt_k_reduce_max(int is_min, SumTo p, const float *x, i64 n_out,
                                             float *y)
{
    FOR_EACH(o, n_out) {
        i64 base = sum_to_base(p, o);
        float m = is_min ? MPRT_INF : -MPRT_INF;
        for (i64 r = 0; r < p.nred; r++) {
            float v = x[base + sum_to_off(p, r)];
            if (v != v || (is_min ? v < m : v > m))
                m = v;
        }
        y[o] = m;
    }
}

/* One block per output: each thread keeps the extreme of its elements
 * with its index, and the block keeps the one the CPU's scan ends with. */
extern "C" __global__ void mprt_k_reduce_max_rows(int is_min, SumTo p, const float *x,
                                                  i64 n_out, float *y)
{
    __shared__ float val[1024];
    __shared__ i64 at[1024];
    FOR_ROWS(o, n_out) {
        i64 base = sum_to_base(p, o), im = p.nred;
        float m = is_min ? MPRT_INF : -MPRT_INF;
        for (i64 r = threadIdx.x; r < p.nred; r += blockDim.x) {
            float v = x[base + sum_to_off(p, r)];
            if (extreme_wins(is_min, v, r, m, im))
                m = v, im = r;
        }
        val[threadIdx.x] = m;
        at[threadIdx.x] = im;
        __syncthreads();
        for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
            unsigned t = threadIdx.x, u = t + half;
            if (t < half && extreme_wins(is_min, val[u], at[u], val[t], at[t]))
                val[t] = val[u], at[t] = at[u];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            y[o] = val[0];
        __syncthreads();
    }
}

/* dx = dy where x is its output's extreme, split evenly among the ties: one
 * thread per output counts its ties, then writes its elements. */
extern "C" __global__ void mprt_k_reduce_max_grad(SumTo p, const float *dy, const float *x,
                                                  const float *y, i64 n_out, float *dx)
{
    FOR_EACH(o, n_out) {
        i64 base = sum_to_base(p, o);
        float count = 0.0f;
        for (i64 r = 0; r < p.nred; r++)
            count = FADD(count, x[base + sum_to_off(p, r)] == y[o] ? 1.0f : 0.0f);
        for (i64 r = 0; r < p.nred; r++) {
            i64 k = base + sum_to_off(p, r);
            dx[k] = x[k] == y[o] ? FDIV(dy[o], count) : 0.0f;
        }
    }
}

/* The same with one block per output (the ties counted exactly, as the
 * CPU's float count is below 2^24 ties). */
extern "C" __global__ void mprt_k_reduce_max_grad_rows(SumTo p, const float *dy, const float *x,
                                                       const float *y, i64 n_out, float *dx)
{
    FOR_ROWS(o, n_out) {
        i64 base = sum_to_base(p, o);
        double c = 0;
        for (i64 r = threadIdx.x; r < p.nred; r += blockDim.x)
            c += x[base + sum_to_off(p, r)] == y[o];
        float count = (float)block_sum(c);
        for (i64 r = threadIdx.x; r < p.nred; r += blockDim.x) {
            i64 k = base + sum_to_off(p, r);
            dx[k] = x[k] == y[o] ? FDIV(dy[o], count) : 0.0f;
        }
    }
}

/* d bias[m] = sum over n and positions of dy[n, m, :], in double */
template <typename T>
static __device__ void channel_sum_rows(int N, int M, i64 P, const T *dy, float *db)
{
    FOR_ROWS(m, M) {
        double s = 0;
        for (int n = 0; n < N; n++)
            for (i64 i = threadIdx.x; i < P; i += blockDim.x)
                s += load_el(dy, ((i64)n * M + m) * P + i);
        s = block_sum(s);
        if (threadIdx.x == 0)
            db[m] = (float)s;
    }
}

extern "C" __global__ void mprt_k_channel_sum(int N, int M, i64 P, const float *dy, float *db)
{
    channel_sum_rows(N, M, P, dy, db);
}

/* A bias gradient of a bf16 dy, into the float32 gradient. */
extern "C" __global__ void mprt_k_channel_sum_bf16(int N, int M, i64 P, const u16 *dy, float *db)
{
    channel_sum_rows(N, M, P, dy, db);
}

/* i / P and (i / P) % M, in 32 bits below 2^31 (index_digits). */
static __device__ i64 quotient(i64 i, i64 P)
{
    return i <= 0x7fffffff && P <= 0x7fffffff ? (i64)((unsigned)i / (unsigned)P) : i / P;
}

static __device__ int channel_of(i64 i, i64 P, int M)
{
    i64 q = quotient(i, P);
    return q <= 0x7fffffff ? (int)((unsigned)q % (unsigned)M) : (int)(q % M);
}

extern "C" __global__ void mprt_k_bias_add(i64 n, int M, i64 P, const float *b, float *y)
{
    FOR_EACH(i, n) y[i] = FADD(y[i], b[channel_of(i, P, M)]);
}

extern "C" __global__ void mprt_k_bias_add_bf16(i64 n, int M, i64 P, const float *b, u16 *y)
{
    FOR_EACH(i, n) y[i] = bf16_of(FADD(f32_of(y[i]), f32_of(bf16_of(b[channel_of(i, P, M)]))));
}

/* A batch norm's output v, at k, with what graph/simplify.c fused into it
 * (runtime/cpu.c's mprt_bn_fused): with add, v + add[k], v rounded to
 * bf16 first where it was stored so (a bf16 T, or fuse & 2: float32
 * copies of bf16 values); with fuse & 1, then max(v, 0). */
template <typename T>
static __device__ float bn_fused_with(int fuse, bool add, float a, float v)
{
    if (add) {
        if (sizeof(T) == 2 || (fuse & 2))
            v = f32_of(bf16_of(v));
        v = FADD(v, a);
    }
    return (fuse & 1) && !(v > 0.0f) ? 0.0f : v;
}

template <typename T>
static __device__ float bn_fused(int fuse, const T *add, i64 k, float v)
{
    return bn_fused_with<T>(fuse, add != 0, add ? load_el(add, k) : 0.0f, v);
}

/* Batch normalization with the running statistics: y = (x - mean) *
 * (1 / sqrt(var + eps), in double) * scale + bias, x being N x C x P;
 * then bn_fused. */
template <typename T>
static __device__ void bn_infer_each(int N, int C, i64 P, const T *x, const float *scale,
                                     const float *bias, const float *mean, const float *var,
                                     float eps, int fuse, const T *add, T *y)
{
    FOR_EACH(k, (i64)N * C * P) {
        int c = (int)((k / P) % C);
        float inv = (float)(1.0 / sqrt((double)var[c] + eps));
        float v = FADD(FMUL(FMUL(FSUB(load_el(x, k), mean[c]), inv), scale[c]), bias[c]);
        store_el(y, k, bn_fused(fuse, add, k, v));
    }
}

extern "C" __global__ void mprt_k_bn_infer(int N, int C, i64 P, const float *x,
                                           const float *scale, const float *bias,
                                           const float *mean, const float *var, float eps,
                                           int fuse, const float *add, float *y)
{
    bn_infer_each(N, C, P, x, scale, bias, mean, var, eps, fuse, add, y);
}

extern "C" __global__ void mprt_k_bn_infer_bf16(int N, int C, i64 P, const u16 *x,
                                                const float *scale, const float *bias,
                                                const float *mean, const float *var, float eps,
                                                int fuse, const u16 *add, u16 *y)
{
    bn_infer_each(N, C, P, x, scale, bias, mean, var, eps, fuse, add, y);
}

/* ---- batch normalization with its ReLU: one block per channel ----
 *
 * runtime/cpu.c's mprt_bn_train and mprt_bn_grad with their relu, where
 * cuDNN has no fused ReLU for these layouts. Block c sums channel c over
 * the images, each thread its chunks of 8 positions of a row (loaded
 * together, see CHUNK), even and odd positions apart and added at the end
 * of each row, in double (DMUL: no product fuses into its sum): with one
 * thread a block (tests/cuda's emulation) the CPU's order, so its bits. The factors are
 * the CPU's (mprt_bn_train_factors, mprt_bn_grad_factors); then the block
 * writes its channel. */

/* Up to 1024 threads a block (cuda_ops.c's mprt_cu_channels): the
 * compiler keeps each thread within the 64 registers that allows. */
#define CHANNEL_BLOCK __launch_bounds__(1024)

/* Row n, element r of rows of len elements: on by the block's width
 * (no division in the loop). */
static __device__ void next_at(i64 *n, i64 *r, i64 len)
{
    *r += blockDim.x;
    while (*r >= len)
        *r -= len, ++*n;
}

/* Channel c's rows of P elements, in chunks (chunks a row): the thread's
 * first, row n and its chunk r, walked on by next_at. */
#define FOR_CHANNEL_CHUNKS(n, r, chunks)                                                    \
    for (i64 n = threadIdx.x / (chunks), r = threadIdx.x - n * (chunks); n < N;              \
         next_at(&n, &r, chunks))

/* Where chunk r of row n of channel c begins in the tensor. */
static __device__ i64 chunk_at(i64 n, i64 r, int C, i64 c, i64 P)
{
    return (n * C + c) * P + CHUNK * r;
}

/* Thread's share of channel c's sums: of x and x^2 (width 2), and with dy
 * of dy' and dy' * x where dy' = dy, or 0 where z <= 0 (width 4); even
 * and odd positions of a row apart, added into acc at the row's end (the
 * CPU's order, with one thread a block). */
template <typename T>
static __device__ void bn_channel_sums(int N, int C, i64 P, int c, const T *x, const T *dy,
                                       const T *z, int width, bool vec, double acc[4])
{
    i64 chunks = (P + CHUNK - 1) / CHUNK, last = -1;
    double s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    FOR_CHANNEL_CHUNKS(n, r, chunks) {
        i64 k = chunk_at(n, r, C, c, P);
        int len = chunk_len(r, P);
        if (n != last) {   /* a new row: the one before adds its even and odd sums */
            for (int j = 0; j < width; j++)
                acc[j] += s[0][j] + s[1][j], s[0][j] = s[1][j] = 0;
            last = n;
        }
        float u[CHUNK] = {0}, g[CHUNK] = {0}, q[CHUNK] = {0};
        load_chunk(x, k, len, vec, u);
        if (width == 4)
            load_chunk(dy, k, len, vec, g);
        if (width == 4 && z)
            load_chunk(z, k, len, vec, q);
#pragma unroll
        for (int h = 0; h < CHUNK; h++) {
            if (h >= len)
                continue;
            double du = u[h];
            s[h & 1][0] += du, s[h & 1][1] += DMUL(du, du);
            if (width == 4) {
                double d = z && !(q[h] > 0.0f) ? 0.0 : (double)g[h];
                s[h & 1][2] += d, s[h & 1][3] += DMUL(d, du);
            }
        }
    }
    for (int j = 0; j < width; j++)
        acc[j] += s[0][j] + s[1][j];
}

template <typename T>
static __device__ void bn_train_rows(int N, int C, i64 P, const T *x, const float *scale,
                                     const float *bias, float *rmean, float *rvar,
                                     float momentum, float eps, int fuse, const T *add, T *y)
{
    __shared__ float f[2];
    i64 cnt = (i64)N * P, chunks = (P + CHUNK - 1) / CHUNK;
    bool vec = chunk_vec(P, x, add, y);
    FOR_ROWS(c, C) {
        double acc[4] = {0, 0, 0, 0};
        bn_channel_sums(N, C, P, (int)c, x, (const T *)0, (const T *)0, 2, vec, acc);
        double s = block_sum(acc[0]), ss = block_sum(acc[1]);
        if (threadIdx.x == 0) {
            double mean = s / (double)cnt, var = ss / (double)cnt - DMUL(mean, mean);
            var = var > 0 ? var : 0;
            float inv = (float)(1.0 / sqrt(var + eps)), m = (float)mean;
            f[0] = FMUL(inv, scale[c]), f[1] = m;
            if (rmean) {   /* NULL: a recomputation, the statistics moved already */
                rmean[c] = FADD(FMUL(momentum, rmean[c]), FMUL(FSUB(1.0f, momentum), m));
                float unbiased =
                    (float)(cnt > 1 ? DMUL(var, (double)cnt) / (double)(cnt - 1) : var);
                rvar[c] = FADD(FMUL(momentum, rvar[c]), FMUL(FSUB(1.0f, momentum), unbiased));
            }
        }
        __syncthreads();
        float a = f[0], m = f[1], b = bias[c];
        FOR_CHANNEL_CHUNKS(n, r, chunks) {
            i64 k = chunk_at(n, r, C, c, P);
            int len = chunk_len(r, P);
            float v[CHUNK] = {0}, s[CHUNK] = {0};
            load_chunk(x, k, len, vec, v);
            if (add)
                load_chunk(add, k, len, vec, s);
#pragma unroll
            for (int h = 0; h < CHUNK; h++)
                if (h < len)
                    v[h] = bn_fused_with<T>(fuse, add != 0, s[h], FADD(FMUL(FSUB(v[h], m), a), b));
            store_chunk(y, k, len, vec, v);
        }
        __syncthreads();
    }
}

extern "C" __global__ void CHANNEL_BLOCK
mprt_k_bn_train_rows(int N, int C, i64 P, const float *x, const float *scale, const float *bias,
                     float *rmean, float *rvar, float momentum, float eps, int fuse,
                     const float *add, float *y)
{
    bn_train_rows(N, C, P, x, scale, bias, rmean, rvar, momentum, eps, fuse, add, y);
}

extern "C" __global__ void CHANNEL_BLOCK
mprt_k_bn_train_rows_bf16(int N, int C, i64 P, const u16 *x, const float *scale, const float *bias,
                          float *rmean, float *rvar, float momentum, float eps, int fuse,
                          const u16 *add, u16 *y)
{
    bn_train_rows(N, C, P, x, scale, bias, rmean, rvar, momentum, eps, fuse, add, y);
}

/* dx = k1 * (dy' - k0 - (x - m) * k2), dscale and dbias, from the sums
 * of x, x^2, dy' and dy' * x (z: the ReLU's output; NULL: dy' = dy). */
template <typename T>
static __device__ void bn_grad_rows(int N, int C, i64 P, const T *dy, const T *z, const T *x,
                                    const float *scale, float eps, T *dx, float *dscale,
                                    float *dbias)
{
    __shared__ float f[4];
    i64 cnt = (i64)N * P, chunks = (P + CHUNK - 1) / CHUNK;
    bool vec = chunk_vec(P, dy, z, x) && aligned16(dx);
    FOR_ROWS(c, C) {
        double acc[4] = {0, 0, 0, 0};
        bn_channel_sums(N, C, P, (int)c, x, dy, z, 4, vec, acc);
        double s0 = block_sum(acc[0]), s1 = block_sum(acc[1]);
        double sdy = block_sum(acc[2]), s3 = block_sum(acc[3]);
        if (threadIdx.x == 0) {
            double mean = s0 / (double)cnt, var = s1 / (double)cnt - DMUL(mean, mean);
            var = var > 0 ? var : 0;
            double sdyx = s3 - DMUL(mean, sdy), inv = 1.0 / sqrt(var + eps);
            dscale[c] = (float)DMUL(sdyx, inv);
            dbias[c] = (float)sdy;
            f[0] = (float)DMUL((double)scale[c], inv), f[1] = (float)(sdy / (double)cnt);
            f[2] = (float)(DMUL(DMUL(inv, inv), sdyx) / (double)cnt), f[3] = (float)mean;
        }
        __syncthreads();
        float k1 = f[0], k0 = f[1], k2 = f[2], m = f[3];
        FOR_CHANNEL_CHUNKS(n, r, chunks) {
            i64 k = chunk_at(n, r, C, c, P);
            int len = chunk_len(r, P);
            float g[CHUNK] = {0}, q[CHUNK] = {0}, u[CHUNK] = {0};
            load_chunk(dy, k, len, vec, g);
            if (z)
                load_chunk(z, k, len, vec, q);
            load_chunk(x, k, len, vec, u);
#pragma unroll
            for (int h = 0; h < CHUNK; h++) {
                float d = z && !(q[h] > 0.0f) ? 0.0f : g[h];
                if (h < len)
                    u[h] = FMUL(k1, FSUB(FSUB(d, k0), FMUL(FSUB(u[h], m), k2)));
            }
            store_chunk(dx, k, len, vec, u);
        }
        __syncthreads();
    }
}

extern "C" __global__ void CHANNEL_BLOCK
mprt_k_bn_grad_rows(int N, int C, i64 P, const float *dy, const float *z, const float *x,
                    const float *scale, float eps, float *dx, float *dscale, float *dbias)
{
    bn_grad_rows(N, C, P, dy, z, x, scale, eps, dx, dscale, dbias);
}

extern "C" __global__ void CHANNEL_BLOCK
mprt_k_bn_grad_rows_bf16(int N, int C, i64 P, const u16 *dy, const u16 *z, const u16 *x,
                         const float *scale, float eps, u16 *dx, float *dscale, float *dbias)
{
    bn_grad_rows(N, C, P, dy, z, x, scale, eps, dx, dscale, dbias);
}

/* Y[i, j] = C[i or 0, j or 0], before a GEMM with beta */
extern "C" __global__ void mprt_k_gemm_c(int M, int N, const float *C, int c_rows, int c_cols,
                                         float *Y)
{
    FOR_EACH(e, (i64)M * N) {
        i64 i = e / N, j = e - i * N;
        Y[e] = C[(c_rows == 1 ? 0 : i) * c_cols + (c_cols == 1 ? 0 : j)];
    }
}

/* mprt_k_gemm_c under --precision=bf16: C (float32, or bf16 where c_bf16)
 * rounded to bf16, as the matrix product reads every operand, into Y
 * (bf16 where y_bf16, else float32). */
extern "C" __global__ void mprt_k_gemm_c_bf16(int M, int N, const void *C, int c_bf16, int c_rows,
                                              int c_cols, void *Y, int y_bf16)
{
    FOR_EACH(e, (i64)M * N) {
        i64 i = e / N, j = e - i * N, k = (c_rows == 1 ? 0 : i) * c_cols + (c_cols == 1 ? 0 : j);
        u16 c = c_bf16 ? ((const u16 *)C)[k] : bf16_of(((const float *)C)[k]);
        if (y_bf16)
            ((u16 *)Y)[e] = c;
        else
            ((float *)Y)[e] = f32_of(c);
    }
}

/* ---- pooling ---- */

/* The pooling kernels' bodies are templates over the element type too: the
 * bf16 twins (mprt_k_gap_bf16, ...) widen what they read and round what
 * they write, the CPU's conversions around its float32 kernels. */
template <typename T> static __device__ void gap_rows(i64 NC, i64 P, const T *x, T *y)
{
    FOR_ROWS(r, NC) {
        double s = 0;
        for (i64 k = threadIdx.x; k < P; k += blockDim.x)
            s += load_el(x, r * P + k);
        s = block_sum(s);
        if (threadIdx.x == 0)
            store_el(y, r, (float)(s / P));
    }
}

extern "C" __global__ void mprt_k_gap(i64 NC, i64 P, const float *x, float *y)
{
    gap_rows(NC, P, x, y);
}

extern "C" __global__ void mprt_k_gap_bf16(i64 NC, i64 P, const u16 *x, u16 *y)
{
    gap_rows(NC, P, x, y);
}

template <typename T> static __device__ void gap_grad_each(i64 NC, i64 P, const T *dy, T *dx)
{
    FOR_EACH(i, NC * P) store_el(dx, i, FDIV(load_el(dy, quotient(i, P)), (float)P));
}

extern "C" __global__ void mprt_k_gap_grad(i64 NC, i64 P, const float *dy, float *dx)
{
    gap_grad_each(NC, P, dy, dx);
}

extern "C" __global__ void mprt_k_gap_grad_bf16(i64 NC, i64 P, const u16 *dy, u16 *dx)
{
    gap_grad_each(NC, P, dy, dx);
}

/* runtime/kernel.h's MprtPool, passed by value */
struct Pool {
    int N, C, D, H, W, OD, OH, OW, KD, KH, KW, sd, sh, sw, dd, dh, dw, pd, ph, pw;
    int ed, eh, ew;          /* trailing pads (average pooling) */
    int count_include_pad;   /* average pooling: divide by the padded window */
};

/* An output (or input) position's coordinates within its plane of
 * depth x height x width. */
static __device__ void dhw_of(i64 r, int H, int W, int *d, int *h, int *w)
{
    i64 dh = r / W;
    *w = (int)(r - dh * W);
    *d = (int)(dh / H);
    *h = (int)(dh - (i64)*d * H);
}

/* Max pooling, taps in the CPU's order: a larger value or a NaN takes the
 * place; a window entirely in the padding gives -inf and index -1. */
template <typename T> static __device__ void maxpool_each(Pool p, const T *x, T *y, i64 *idx)
{
    i64 oplane = (i64)p.OD * p.OH * p.OW, plane = (i64)p.D * p.H * p.W;
    FOR_EACH(o, (i64)p.N * p.C * oplane) {
        i64 nc = o / oplane;
        int od, oh, ow;
        dhw_of(o - nc * oplane, p.OH, p.OW, &od, &oh, &ow);
        const T *xs = x + nc * plane;
        float bv = -MPRT_INF;
        i64 best = -1;
        for (int kd = 0; kd < p.KD; kd++) {
            int id = od * p.sd - p.pd + kd * p.dd;
            for (int kh = 0; kh < p.KH && id >= 0 && id < p.D; kh++) {
                int ih = oh * p.sh - p.ph + kh * p.dh;
                if (ih < 0 || ih >= p.H)
                    continue;
                for (int kw = 0; kw < p.KW; kw++) {
                    int iw = ow * p.sw - p.pw + kw * p.dw;
                    if (iw < 0 || iw >= p.W)
                        continue;
                    i64 k = ((i64)id * p.H + ih) * p.W + iw;
                    float v = load_el(xs, k);
                    if (v > bv || v != v || best < 0)
                        bv = v, best = k;
                }
            }
        }
        store_el(y, o, bv);
        if (idx)
            idx[o] = best < 0 ? -1 : nc * plane + best;
    }
}

extern "C" __global__ void mprt_k_maxpool(Pool p, const float *x, float *y, i64 *idx)
{
    maxpool_each(p, x, y, idx);
}

extern "C" __global__ void mprt_k_maxpool_bf16(Pool p, const u16 *x, u16 *y, i64 *idx)
{
    maxpool_each(p, x, y, idx);
}

/* The outputs [*o0, *o1] along one dim whose window, taps dil apart, can
 * hold input i. */
static __device__ void windows_over(int i, int pad, int k, int dil, int stride, int out,
                                    int *o0, int *o1)
{
    int n = i + pad - (k - 1) * dil;
    *o0 = n <= 0 ? 0 : (n + stride - 1) / stride;
    *o1 = (i + pad) / stride;
    *o1 = *o1 < out - 1 ? *o1 : out - 1;
}

/* dx[j] = sum of dy over the outputs whose maximum came from j, in the
 * outputs' order (as the CPU's scatter adds them): each input gathers from
 * the windows that can contain it. */
template <typename T>
static __device__ void maxpool_grad_each(Pool p, const T *dy, const i64 *idx, T *dx)
{
    i64 oplane = (i64)p.OD * p.OH * p.OW, plane = (i64)p.D * p.H * p.W;
    FOR_EACH(j, (i64)p.N * p.C * plane) {
        i64 nc = j / plane;
        int id, ih, iw, od0, od1, oh0, oh1, ow0, ow1;
        dhw_of(j - nc * plane, p.H, p.W, &id, &ih, &iw);
        windows_over(id, p.pd, p.KD, p.dd, p.sd, p.OD, &od0, &od1);
        windows_over(ih, p.ph, p.KH, p.dh, p.sh, p.OH, &oh0, &oh1);
        windows_over(iw, p.pw, p.KW, p.dw, p.sw, p.OW, &ow0, &ow1);
        float acc = 0.0f;
        for (int od = od0; od <= od1; od++)
            for (int oh = oh0; oh <= oh1; oh++)
                for (int ow = ow0; ow <= ow1; ow++) {
                    i64 o = nc * oplane + ((i64)od * p.OH + oh) * p.OW + ow;
                    if (idx[o] == j)
                        acc = FADD(acc, load_el(dy, o));
                }
        store_el(dx, j, acc);
    }
}

extern "C" __global__ void mprt_k_maxpool_grad(Pool p, const float *dy, const i64 *idx, float *dx)
{
    maxpool_grad_each(p, dy, idx, dx);
}

extern "C" __global__ void mprt_k_maxpool_grad_bf16(Pool p, const u16 *dy, const i64 *idx, u16 *dx)
{
    maxpool_grad_each(p, dy, idx, dx);
}

/* The same by scattering, for when the window parameters are unknown: dx
 * must be zero; overlapping windows make the order of the adds vary. */
extern "C" __global__ void mprt_k_maxpool_grad_scatter(i64 n_out, const float *dy,
                                                       const i64 *idx, float *dx)
{
    FOR_EACH(i, n_out) if (idx[i] >= 0) atomicAdd(dx + idx[i], dy[i]);
}

/* One average-pooling window along a dim: [lo, hi) inside the input and
 * the divisor's share, as the CPU's mprt_avg_window. */
static __device__ int avg_window(int o, int stride, int pad, int k, int n, int end_pad,
                                 int include_pad, int *lo, int *hi)
{
    int s = o * stride - pad, e = s + k < n + end_pad ? s + k : n + end_pad;
    int padded = e - s;
    *lo = s > 0 ? s : 0;
    *hi = e < n ? e : n;
    return include_pad ? padded : *hi - *lo;
}

static __device__ float avg_inv(int count)
{
    return count > 0 ? FDIV(1.0f, (float)count) : 0.0f;
}

/* Average pooling: the window summed in double, times 1/count. */
template <typename T> static __device__ void avgpool_each(Pool p, const T *x, T *y)
{
    i64 oplane = (i64)p.OD * p.OH * p.OW, plane = (i64)p.D * p.H * p.W;
    int cip = p.count_include_pad;
    FOR_EACH(o, (i64)p.N * p.C * oplane) {
        i64 nc = o / oplane;
        int od, oh, ow, d0, d1, h0, h1, w0, w1;
        dhw_of(o - nc * oplane, p.OH, p.OW, &od, &oh, &ow);
        int dd = avg_window(od, p.sd, p.pd, p.KD, p.D, p.ed, cip, &d0, &d1);
        int dh = avg_window(oh, p.sh, p.ph, p.KH, p.H, p.eh, cip, &h0, &h1);
        int dw = avg_window(ow, p.sw, p.pw, p.KW, p.W, p.ew, cip, &w0, &w1);
        const T *xs = x + nc * plane;
        double sum = 0;
        for (int id = d0; id < d1; id++)
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++)
                    sum += load_el(xs, ((i64)id * p.H + ih) * p.W + iw);
        store_el(y, o, (float)(sum * avg_inv(dd * dh * dw)));
    }
}

extern "C" __global__ void mprt_k_avgpool(Pool p, const float *x, float *y)
{
    avgpool_each(p, x, y);
}

extern "C" __global__ void mprt_k_avgpool_bf16(Pool p, const u16 *x, u16 *y)
{
    avgpool_each(p, x, y);
}

/* Its gradient, gathered: each input adds dy * (1/count) of every window
 * that holds it, in the outputs' order (the CPU's scatter order). */
template <typename T> static __device__ void avgpool_grad_each(Pool p, T *dx, const T *dy)
{
    i64 oplane = (i64)p.OD * p.OH * p.OW, plane = (i64)p.D * p.H * p.W;
    int cip = p.count_include_pad;
    FOR_EACH(j, (i64)p.N * p.C * plane) {
        i64 nc = j / plane;
        int id, ih, iw, od0, od1, oh0, oh1, ow0, ow1;
        dhw_of(j - nc * plane, p.H, p.W, &id, &ih, &iw);
        /* the windows starting at or before the input and ending after it */
        windows_over(id, p.pd, p.KD, 1, p.sd, p.OD, &od0, &od1);
        windows_over(ih, p.ph, p.KH, 1, p.sh, p.OH, &oh0, &oh1);
        windows_over(iw, p.pw, p.KW, 1, p.sw, p.OW, &ow0, &ow1);
        float acc = 0.0f;
        for (int od = od0; od <= od1; od++) {
            int d0, d1, h0, h1, w0, w1;
            int dd = avg_window(od, p.sd, p.pd, p.KD, p.D, p.ed, cip, &d0, &d1);
            if (id < d0 || id >= d1)
                continue;
            for (int oh = oh0; oh <= oh1; oh++) {
                int dh = avg_window(oh, p.sh, p.ph, p.KH, p.H, p.eh, cip, &h0, &h1);
                if (ih < h0 || ih >= h1)
                    continue;
                for (int ow = ow0; ow <= ow1; ow++) {
                    int dw = avg_window(ow, p.sw, p.pw, p.KW, p.W, p.ew, cip, &w0, &w1);
                    i64 o = nc * oplane + ((i64)od * p.OH + oh) * p.OW + ow;
                    if (iw >= w0 && iw < w1)
                        acc = FADD(acc, FMUL(load_el(dy, o), avg_inv(dd * dh * dw)));
                }
            }
        }
        store_el(dx, j, acc);
    }
}

extern "C" __global__ void mprt_k_avgpool_grad(Pool p, float *dx, const float *dy)
{
    avgpool_grad_each(p, dx, dy);
}

extern "C" __global__ void mprt_k_avgpool_grad_bf16(Pool p, u16 *dx, const u16 *dy)
{
    avgpool_grad_each(p, dx, dy);
}

/* ---- convolution (1-D, 2-D and 3-D), direct: for shapes cuDNN cannot
 * take (padding that is not symmetric); each output sums its terms in one
 * thread ---- */

struct Conv {
    int N, C, D, H, W, M, KD, KH, KW, OD, OH, OW, group;
    int sd, sh, sw, dd, dh, dw, pd, ph, pw;
};

template <typename T> static __device__ void conv_each(Conv p, const T *x, const T *w, T *y)
{
    int cg = p.C / p.group, mg = p.M / p.group;
    i64 P = (i64)p.OD * p.OH * p.OW, plane = (i64)p.D * p.H * p.W, taps = (i64)p.KD * p.KH * p.KW;
    FOR_EACH(o, (i64)p.N * p.M * P) {
        i64 nm = o / P;
        int n = (int)(nm / p.M), m = (int)(nm - (i64)n * p.M), g = m / mg, od, oh, ow;
        dhw_of(o - nm * P, p.OH, p.OW, &od, &oh, &ow);
        float acc = 0.0f;
        for (int c = 0; c < cg; c++) {
            const T *xs = x + ((i64)n * p.C + (i64)g * cg + c) * plane;
            const T *ws = w + ((i64)m * cg + c) * taps;
            for (int kd = 0; kd < p.KD; kd++) {
                int id = od * p.sd - p.pd + kd * p.dd;
                for (int kh = 0; kh < p.KH && id >= 0 && id < p.D; kh++) {
                    int ih = oh * p.sh - p.ph + kh * p.dh;
                    if (ih < 0 || ih >= p.H)
                        continue;
                    for (int kw = 0; kw < p.KW; kw++) {
                        int iw = ow * p.sw - p.pw + kw * p.dw;
                        if (iw >= 0 && iw < p.W)
                            acc = FADD(acc, FMUL(load_el(ws, (kd * p.KH + kh) * p.KW + kw),
                                                 load_el(xs, ((i64)id * p.H + ih) * p.W + iw)));
                    }
                }
            }
        }
        store_el(y, o, acc);
    }
}

extern "C" __global__ void mprt_k_conv(Conv p, const float *x, const float *w, float *y)
{
    conv_each(p, x, w, y);
}

extern "C" __global__ void mprt_k_conv_bf16(Conv p, const u16 *x, const u16 *w, u16 *y)
{
    conv_each(p, x, w, y);
}

/* The output index that input i meets through tap k along one dim, or -1. */
static __device__ int tap_out(int i, int pad, int k, int dil, int stride, int out)
{
    int t = i + pad - k * dil;
    return t < 0 || t % stride || t / stride >= out ? -1 : t / stride;
}

template <typename T>
static __device__ void conv_grad_x_each(Conv p, const T *dy, const T *w, T *dx)
{
    int cg = p.C / p.group, mg = p.M / p.group;
    i64 plane = (i64)p.D * p.H * p.W, P = (i64)p.OD * p.OH * p.OW, taps = (i64)p.KD * p.KH * p.KW;
    FOR_EACH(j, (i64)p.N * p.C * plane) {
        i64 nc = j / plane;
        int n = (int)(nc / p.C), c = (int)(nc - (i64)n * p.C), g = c / cg, id, ih, iw;
        dhw_of(j - nc * plane, p.H, p.W, &id, &ih, &iw);
        float acc = 0.0f;
        for (int m = g * mg; m < (g + 1) * mg; m++) {
            const T *ws = w + ((i64)m * cg + (c - g * cg)) * taps;
            const T *ds = dy + ((i64)n * p.M + m) * P;
            for (int kd = 0; kd < p.KD; kd++) {
                int od = tap_out(id, p.pd, kd, p.dd, p.sd, p.OD);
                for (int kh = 0; kh < p.KH && od >= 0; kh++) {
                    int oh = tap_out(ih, p.ph, kh, p.dh, p.sh, p.OH);
                    if (oh < 0)
                        continue;
                    for (int kw = 0; kw < p.KW; kw++) {
                        int ow = tap_out(iw, p.pw, kw, p.dw, p.sw, p.OW);
                        if (ow >= 0)
                            acc = FADD(acc, FMUL(load_el(ws, (kd * p.KH + kh) * p.KW + kw),
                                                 load_el(ds, ((i64)od * p.OH + oh) * p.OW + ow)));
                    }
                }
            }
        }
        store_el(dx, j, acc);
    }
}

extern "C" __global__ void mprt_k_conv_grad_x(Conv p, const float *dy, const float *w, float *dx)
{
    conv_grad_x_each(p, dy, w, dx);
}

extern "C" __global__ void mprt_k_conv_grad_x_bf16(Conv p, const u16 *dy, const u16 *w, u16 *dx)
{
    conv_grad_x_each(p, dy, w, dx);
}

template <typename T>
static __device__ void conv_grad_w_each(Conv p, const T *dy, const T *x, T *dw)
{
    int cg = p.C / p.group, mg = p.M / p.group;
    i64 taps = (i64)p.KD * p.KH * p.KW, K = (i64)cg * taps;
    i64 P = (i64)p.OD * p.OH * p.OW, plane = (i64)p.D * p.H * p.W;
    FOR_EACH(e, (i64)p.M * K) {
        int m = (int)(e / K), g = m / mg, kd, kh, kw;
        i64 r = e - (i64)m * K;
        int c = (int)(r / taps);
        dhw_of(r - (i64)c * taps, p.KH, p.KW, &kd, &kh, &kw);
        float acc = 0.0f;
        for (int n = 0; n < p.N; n++) {
            const T *xs = x + ((i64)n * p.C + (i64)g * cg + c) * plane;
            const T *ds = dy + ((i64)n * p.M + m) * P;
            for (int od = 0; od < p.OD; od++) {
                int id = od * p.sd - p.pd + kd * p.dd;
                for (int oh = 0; oh < p.OH && id >= 0 && id < p.D; oh++) {
                    int ih = oh * p.sh - p.ph + kh * p.dh;
                    if (ih < 0 || ih >= p.H)
                        continue;
                    for (int ow = 0; ow < p.OW; ow++) {
                        int iw = ow * p.sw - p.pw + kw * p.dw;
                        if (iw >= 0 && iw < p.W)
                            acc = FADD(acc, FMUL(load_el(ds, ((i64)od * p.OH + oh) * p.OW + ow),
                                                 load_el(xs, ((i64)id * p.H + ih) * p.W + iw)));
                    }
                }
            }
        }
        store_el(dw, e, acc);
    }
}

extern "C" __global__ void mprt_k_conv_grad_w(Conv p, const float *dy, const float *x, float *dw)
{
    conv_grad_w_each(p, dy, x, dw);
}

extern "C" __global__ void mprt_k_conv_grad_w_bf16(Conv p, const u16 *dy, const u16 *x, u16 *dw)
{
    conv_grad_w_each(p, dy, x, dw);
}

/* ---- softmax over one axis: rows (o, j) of C elements `inner` apart ---- */

#define ROW_BASE(r) (((r) / inner) * C * inner + (r) % inner)

/* The row's maximum as the CPU finds it: x[0] if it is NaN, else the
 * largest of the others. */
/* Class c's score in a row `inner` apart: with a bias (the
 * cross-entropy's, graph/loss.c), the sum the Add before it made. */
template <typename T>
static __device__ float score_el(const T *xs, i64 c, i64 inner, const float *b)
{
    return b ? FADD(load_el(xs, c * inner), b[c]) : load_el(xs, c * inner);
}

template <typename T>
static __device__ float row_max(const T *xs, i64 C, i64 inner, const float *b = 0)
{
    float mx = -MPRT_INF;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
        float v = score_el(xs, c, inner, b);
        mx = v > mx ? v : mx;
    }
    mx = block_max(mx);
    float x0 = score_el(xs, 0, inner, b);
    return x0 != x0 ? x0 : mx;
}

/* Each exponential is computed twice, once for the sum and once for the
 * result (the same float each time), so that a bf16 y is written once. */
template <typename T>
static __device__ void softmax_rows(i64 outer, i64 C, i64 inner, const T *x, T *y)
{
    FOR_ROWS(r, outer * inner) {
        const T *xs = x + ROW_BASE(r);
        T *ys = y + ROW_BASE(r);
        float mx = row_max(xs, C, inner);
        if (mx == -MPRT_INF)
            mx = 0.0f;
        double sum = 0;
        for (i64 c = threadIdx.x; c < C; c += blockDim.x)
            sum += expf(FSUB(load_el(xs, c * inner), mx));
        float inv = (float)(1.0 / block_sum(sum));
        for (i64 c = threadIdx.x; c < C; c += blockDim.x)
            store_el(ys, c * inner, FMUL(expf(FSUB(load_el(xs, c * inner), mx)), inv));
    }
}

extern "C" __global__ void mprt_k_softmax(i64 outer, i64 C, i64 inner, const float *x, float *y)
{
    softmax_rows(outer, C, inner, x, y);
}

extern "C" __global__ void mprt_k_softmax_bf16(i64 outer, i64 C, i64 inner, const u16 *x, u16 *y)
{
    softmax_rows(outer, C, inner, x, y);
}

/* Element c of a SoftmaxBias row: x + b, rounded to bf16 where the Add
 * it stands for stored its sum so (always for a bf16 y); where b masks it
 * (-inf), -inf without reading x (the same for a finite x: a causal
 * mask's half of the scores is never loaded). */
template <typename T>
static __device__ float biased(const T *xs, const float *bs, i64 c, int round)
{
    if (bs[c] == -MPRT_INF)
        return -MPRT_INF;
    float v = FADD(load_el(xs, c), bs[c]);
    return round ? f32_of(bf16_of(v)) : v;
}

/* Chunk j of a SoftmaxBias row (CHUNK elements from CHUNK * j, len of
 * them) into v, each as biased() makes it; x is not loaded where the
 * whole chunk is masked. */
template <typename T>
static __device__ void biased_chunk(const T *xs, const float *bs, i64 j, int len, int round,
                                    bool vec, float *v)
{
    float b[CHUNK] = {0}, x[CHUNK] = {0};
    load_chunk(bs, CHUNK * j, len, vec, b);
    bool seen = false;
#pragma unroll
    for (int h = 0; h < CHUNK; h++)
        seen |= h < len && b[h] != -MPRT_INF;
    if (seen)
        load_chunk(xs, CHUNK * j, len, vec, x);
#pragma unroll
    for (int h = 0; h < CHUNK; h++) {
        float s = FADD(x[h], b[h]);
        v[h] = b[h] == -MPRT_INF ? -MPRT_INF : round ? f32_of(bf16_of(s)) : s;
    }
}

/* softmax_rows on x + b: rows of C, b's brows rows taken in turn; each
 * thread takes chunks of the row (cuda_ops.c gives a block a thread a
 * chunk), element by element in order. */
template <typename T>
static __device__ void softmax_bias_rows(i64 rows, i64 C, i64 brows, int round, const T *x,
                                         const float *b, T *y)
{
    i64 chunks = (C + CHUNK - 1) / CHUNK;
    bool vec = chunk_vec(C, x, b, y);
    FOR_ROWS(r, rows) {
        const T *xs = x + r * C;
        const float *bs = b + (r % brows) * C;
        T *ys = y + r * C;
        float mx = -MPRT_INF, v[CHUNK];
        for (i64 j = threadIdx.x; j < chunks; j += blockDim.x) {
            int len = chunk_len(j, C);
            biased_chunk(xs, bs, j, len, round, vec, v);
#pragma unroll
            for (int h = 0; h < CHUNK; h++)
                if (h < len)
                    mx = v[h] > mx ? v[h] : mx;
        }
        mx = block_max(mx);
        float v0 = biased(xs, bs, 0, round);
        mx = v0 != v0 ? v0 : mx == -MPRT_INF ? 0.0f : mx;
        double sum = 0;
        for (i64 j = threadIdx.x; j < chunks; j += blockDim.x) {
            int len = chunk_len(j, C);
            biased_chunk(xs, bs, j, len, round, vec, v);
#pragma unroll
            for (int h = 0; h < CHUNK; h++)
                if (h < len)
                    sum += expf(FSUB(v[h], mx));
        }
        float inv = (float)(1.0 / block_sum(sum));
        for (i64 j = threadIdx.x; j < chunks; j += blockDim.x) {
            int len = chunk_len(j, C);
            biased_chunk(xs, bs, j, len, round, vec, v);
#pragma unroll
            for (int h = 0; h < CHUNK; h++)
                v[h] = FMUL(expf(FSUB(v[h], mx)), inv);
            store_chunk(ys, CHUNK * j, len, vec, v);
        }
    }
}

extern "C" __global__ void mprt_k_softmax_bias(i64 rows, i64 C, i64 brows, int round,
                                               const float *x, const float *b, float *y)
{
    softmax_bias_rows(rows, C, brows, round, x, b, y);
}

extern "C" __global__ void mprt_k_softmax_bias_bf16(i64 rows, i64 C, i64 brows, const u16 *x,
                                                    const float *b, u16 *y)
{
    softmax_bias_rows(rows, C, brows, 1, x, b, y);
}

/* dx = y * (dy - sum dy * y), where y is not 0; where it is (a masked
 * score's), +0 without reading dy (runtime/cpu_math.c's
 * mprt_softmax_grad_piece: the same numbers). */
/* Chunk j of the rows at y and dy (len elements) into yv and g; dy is
 * not loaded where the chunk's y are all 0. */
template <typename T>
static __device__ void grad_chunk(const T *ys, const T *dys, i64 j, int len, bool vec,
                                  float *yv, float *g)
{
    load_chunk(ys, CHUNK * j, len, vec, yv);
    bool seen = false;
#pragma unroll
    for (int h = 0; h < CHUNK; h++)
        seen |= h < len && yv[h] != 0.0f;
    if (seen)
        load_chunk(dys, CHUNK * j, len, vec, g);
}

/* softmax_grad_rows over contiguous rows (inner 1), a thread's chunks
 * at a time, element by element in order. */
template <typename T>
static __device__ void softmax_grad_chunks(i64 rows, i64 C, const T *dy, const T *y, T *dx)
{
    i64 chunks = (C + CHUNK - 1) / CHUNK;
    bool vec = chunk_vec(C, dy, y, dx);
    FOR_ROWS(r, rows) {
        const T *ys = y + r * C, *dys = dy + r * C;
        float yv[CHUNK] = {0}, g[CHUNK] = {0};
        double dot = 0;
        for (i64 j = threadIdx.x; j < chunks; j += blockDim.x) {
            int len = chunk_len(j, C);
            grad_chunk(ys, dys, j, len, vec, yv, g);
#pragma unroll
            for (int h = 0; h < CHUNK; h++)
                if (h < len && yv[h] != 0.0f)
                    dot += (double)g[h] * yv[h];
        }
        float d = (float)block_sum(dot);
        for (i64 j = threadIdx.x; j < chunks; j += blockDim.x) {
            int len = chunk_len(j, C);
            grad_chunk(ys, dys, j, len, vec, yv, g);
#pragma unroll
            for (int h = 0; h < CHUNK; h++)
                yv[h] = yv[h] != 0.0f ? FMUL(yv[h], FSUB(g[h], d)) : 0.0f;
            store_chunk(dx + r * C, CHUNK * j, len, vec, yv);
        }
    }
}

template <typename T>
static __device__ void softmax_grad_rows(i64 outer, i64 C, i64 inner, const T *dy, const T *y,
                                         T *dx)
{
    if (inner == 1) {
        softmax_grad_chunks(outer, C, dy, y, dx);
        return;
    }
    FOR_ROWS(r, outer * inner) {
        i64 base = ROW_BASE(r);
        double dot = 0;
        for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
            float yc = load_el(y, base + c * inner);
            if (yc != 0.0f)
                dot += (double)load_el(dy, base + c * inner) * yc;
        }
        float d = (float)block_sum(dot);
        for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
            float yc = load_el(y, base + c * inner);
            store_el(dx, base + c * inner,
                     yc != 0.0f ? FMUL(yc, FSUB(load_el(dy, base + c * inner), d)) : 0.0f);
        }
    }
}

extern "C" __global__ void mprt_k_softmax_grad(i64 outer, i64 C, i64 inner, const float *dy,
                                               const float *y, float *dx)
{
    softmax_grad_rows(outer, C, inner, dy, y, dx);
}

extern "C" __global__ void mprt_k_softmax_grad_bf16(i64 outer, i64 C, i64 inner, const u16 *dy,
                                                    const u16 *y, u16 *dx)
{
    softmax_grad_rows(outer, C, inner, dy, y, dx);
}

/* log-sum-exp in double, as the CPU; x float32, or bf16 (the scores a
 * loss reads under --precision=bf16), y float32 */
template <typename T>
static __device__ void log_softmax_rows(i64 outer, i64 C, i64 inner, const T *x, float *y)
{
    FOR_ROWS(r, outer * inner) {
        const T *xs = x + ROW_BASE(r);
        float *ys = y + ROW_BASE(r);
        float mx = row_max(xs, C, inner);
        double sum = 0;
        for (i64 c = threadIdx.x; c < C; c += blockDim.x)
            sum += exp((double)load_el(xs, c * inner) - mx);
        float lse = (float)(mx + log(block_sum(sum)));
        for (i64 c = threadIdx.x; c < C; c += blockDim.x)
            ys[c * inner] = FSUB(load_el(xs, c * inner), lse);
    }
}

extern "C" __global__ void mprt_k_log_softmax(i64 outer, i64 C, i64 inner, const float *x,
                                              float *y)
{
    log_softmax_rows(outer, C, inner, x, y);
}

extern "C" __global__ void mprt_k_log_softmax_of_bf16(i64 outer, i64 C, i64 inner, const u16 *x,
                                                      float *y)
{
    log_softmax_rows(outer, C, inner, x, y);
}

/* Each row's log-sum-exp alone, as log_softmax_rows makes it (a loss
 * that keeps it for its gradient: graph/loss.c's mpcc_lse), of the scores
 * plus each class's bias b (or NULL). */
template <typename T>
static __device__ void lse_rows(i64 outer, i64 C, i64 inner, const T *x, const float *b,
                                float *lse)
{
    FOR_ROWS(r, outer * inner) {
        const T *xs = x + ROW_BASE(r);
        float mx = row_max(xs, C, inner, b);
        double sum = 0;
        for (i64 c = threadIdx.x; c < C; c += blockDim.x)
            sum += exp((double)score_el(xs, c, inner, b) - mx);
        float v = (float)(mx + log(block_sum(sum)));
        if (threadIdx.x == 0)
            lse[r] = v;
    }
}

extern "C" __global__ void mprt_k_lse(i64 outer, i64 C, i64 inner, const float *x,
                                      const float *b, float *lse)
{
    lse_rows(outer, C, inner, x, b, lse);
}

extern "C" __global__ void mprt_k_lse_of_bf16(i64 outer, i64 C, i64 inner, const u16 *x,
                                              const float *b, float *lse)
{
    lse_rows(outer, C, inner, x, b, lse);
}

extern "C" __global__ void mprt_k_log_softmax_grad(i64 outer, i64 C, i64 inner, const float *dy,
                                                   const float *y, float *dx)
{
    FOR_ROWS(r, outer * inner) {
        i64 base = ROW_BASE(r);
        double sum = 0;
        for (i64 c = threadIdx.x; c < C; c += blockDim.x)
            sum += dy[base + c * inner];
        float s = (float)block_sum(sum);
        for (i64 c = threadIdx.x; c < C; c += blockDim.x)
            dx[base + c * inner] = FSUB(dy[base + c * inner], FMUL(expf(y[base + c * inner]), s));
    }
}

/* ---- losses (one block reduces all the labels, in double) ---- */

/* Mean of -x[n, t, d] over the labels t that are not `ignore`; x is
 * (N, C, D): log-probabilities (NegativeLogLikelihoodLoss, and the
 * cross-entropy after its log-softmax), or with lse the scores (float32
 * or bf16), whose log-probability x - lse at each label is made from the
 * rows' log-sum-exp (a cross-entropy that keeps it: graph/loss.c). */
template <typename T>
static __device__ void nll_block(int N, int C, i64 D, const T *x, const float *b,
                                 const float *lse, const i64 *labels, i64 ignore, float *loss,
                                 u64 node)
{
    double total = 0, count = 0;
    for (i64 i = threadIdx.x; i < (i64)N * D; i += blockDim.x) {
        i64 t = labels[i];
        if (t == ignore)
            continue;
        if (t < 0 || t >= C) {
            fault(FAULT_LABEL, t, C, node, ignore);
            continue;
        }
        float v = score_el(x + (i / D) * C * D + i % D, t, D, b);
        total -= lse ? FSUB(v, lse[i]) : v;
        count += 1;
    }
    total = block_sum(total);
    count = block_sum(count);
    if (threadIdx.x == 0)
        *loss = count != 0 ? (float)(total / count) : 0.0f;
}

extern "C" __global__ void mprt_k_nll(int N, int C, i64 D, const float *x, const i64 *labels,
                                      i64 ignore, float *loss, u64 node)
{
    nll_block(N, C, D, x, (const float *)0, (const float *)0, labels, ignore, loss, node);
}

extern "C" __global__ void mprt_k_nll_lse(int N, int C, i64 D, const float *x, const float *b,
                                          const float *lse, const i64 *labels, i64 ignore,
                                          float *loss, u64 node)
{
    nll_block(N, C, D, x, b, lse, labels, ignore, loss, node);
}

extern "C" __global__ void mprt_k_nll_lse_of_bf16(int N, int C, i64 D, const u16 *x,
                                                  const float *b, const float *lse,
                                                  const i64 *labels, i64 ignore, float *loss,
                                                  u64 node)
{
    nll_block(N, C, D, x, b, lse, labels, ignore, loss, node);
}

/* NegativeLogLikelihoodLoss with class weights (or NULL) and reduction 0
 * none (loss is N x D, 0 where ignored: any grid), 1 sum or 2 mean over
 * the weights counted (one block, in double). */
extern "C" __global__ void mprt_k_nll_forward(int N, int C, i64 D, const float *x,
                                              const i64 *labels, const float *weight,
                                              i64 ignore, int reduction, float *loss, u64 node)
{
    double total = 0, wsum = 0;
    FOR_EACH(i, (i64)N * D) {
        i64 t = labels[i];
        if (t == ignore || t < 0 || t >= C) {
            if (t != ignore)
                fault(FAULT_LABEL, t, C, node, ignore);
            if (reduction == 0)
                loss[i] = 0.0f;
            continue;
        }
        double w = weight ? (double)weight[t] : 1.0;
        double l = DMUL(-w, (double)x[((i / D) * C + t) * D + i % D]);
        if (reduction == 0)
            loss[i] = (float)l;
        total += l;
        wsum += w;
    }
    if (reduction == 0)
        return;
    total = block_sum(total);
    wsum = block_sum(wsum);
    if (threadIdx.x == 0)
        *loss = reduction == 1 ? (float)total : (float)(total / wsum);
}

/* How many labels are not `ignore` (every block counts them all). */
static __device__ i64 label_count(i64 n, const i64 *labels, i64 ignore)
{
    double c = 0;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x)
        c += labels[i] != ignore;
    return (i64)block_sum(c);
}

/* dx float32, or bf16 (the scores' gradient under --precision=bf16) */
template <typename T>
static __device__ void sce_grad_each(int N, int C, i64 D, const float *dloss, const float *logp,
                                     const i64 *labels, i64 ignore, T *dx)
{
    i64 count = label_count((i64)N * D, labels, ignore);
    float scale = count ? FDIV(dloss[0], (float)count) : 0.0f;
    FOR_EACH(i, (i64)N * C * D) {
        i64 n = i / ((i64)C * D), r = i - n * C * D, c = r / D, d = r - c * D;
        i64 t = labels[n * D + d];
        store_el(dx, i, t == ignore ? 0.0f : FMUL(FSUB(expf(logp[i]), (float)(c == t)), scale));
    }
}

extern "C" __global__ void mprt_k_sce_grad(int N, int C, i64 D, const float *dloss,
                                           const float *logp, const i64 *labels, i64 ignore,
                                           float *dx)
{
    sce_grad_each(N, C, D, dloss, logp, labels, ignore, dx);
}

extern "C" __global__ void mprt_k_sce_grad_bf16(int N, int C, i64 D, const float *dloss,
                                                const float *logp, const i64 *labels,
                                                i64 ignore, u16 *dx)
{
    sce_grad_each(N, C, D, dloss, logp, labels, ignore, dx);
}

/* sce_grad_each with each log-probability made from the scores x (float32
 * or bf16, plus each class's bias b or NULL) and its row's log-sum-exp, as
 * the loss made it. */
template <typename X, typename T>
static __device__ void sce_lse_grad_each(int N, int C, i64 D, const float *dloss, const X *x,
                                         const float *b, const float *lse, const i64 *labels,
                                         i64 ignore, T *dx)
{
    i64 count = label_count((i64)N * D, labels, ignore);
    float scale = count ? FDIV(dloss[0], (float)count) : 0.0f;
    FOR_EACH(i, (i64)N * C * D) {
        i64 n = i / ((i64)C * D), r = i - n * C * D, c = r / D, d = r - c * D;
        i64 t = labels[n * D + d];
        float lp = FSUB(score_el(x + i - c * D, c, D, b), lse[n * D + d]);
        store_el(dx, i, t == ignore ? 0.0f : FMUL(FSUB(expf(lp), (float)(c == t)), scale));
    }
}

extern "C" __global__ void mprt_k_sce_lse_grad(int N, int C, i64 D, const float *dloss,
                                               const float *x, const float *b,
                                               const float *lse, const i64 *labels, i64 ignore,
                                               float *dx)
{
    sce_lse_grad_each(N, C, D, dloss, x, b, lse, labels, ignore, dx);
}

/* into a bf16 dx, from scores stored as float32 or (x_bf16) bf16 */
extern "C" __global__ void mprt_k_sce_lse_grad_bf16(int N, int C, i64 D, const float *dloss,
                                                    const void *x, int x_bf16, const float *b,
                                                    const float *lse, const i64 *labels,
                                                    i64 ignore, u16 *dx)
{
    if (x_bf16)
        sce_lse_grad_each(N, C, D, dloss, (const u16 *)x, b, lse, labels, ignore, dx);
    else
        sce_lse_grad_each(N, C, D, dloss, (const float *)x, b, lse, labels, ignore, dx);
}

extern "C" __global__ void mprt_k_nll_grad(int N, int C, i64 D, const float *dloss,
                                           const i64 *labels, i64 ignore, float *dx)
{
    i64 count = label_count((i64)N * D, labels, ignore);
    float g = count ? FDIV(-dloss[0], (float)count) : 0.0f;
    FOR_EACH(i, (i64)N * C * D) {
        i64 n = i / ((i64)C * D), r = i - n * C * D, c = r / D, d = r - c * D;
        i64 t = labels[n * D + d];
        dx[i] = t != ignore && t == c ? g : 0.0f;
    }
}

extern "C" __global__ void mprt_k_mse(i64 n, const float *x, const float *t, float *loss)
{
    double s = 0;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        float d = FSUB(x[i], t[i]);
        s += (double)d * d;
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        *loss = (float)(s / n);
}

extern "C" __global__ void mprt_k_mse_grad(i64 n, const float *dloss, const float *x,
                                           const float *t, float *dx)
{
    float scale = FDIV(FMUL(2.0f, dloss[0]), (float)n);
    FOR_EACH(i, n) dx[i] = FMUL(FSUB(x[i], t[i]), scale);
}

/* ---- layer normalization over the last D elements of each row ---- */

template <typename T>
static __device__ void layernorm_rows(i64 rows, i64 D, const T *x, const float *scale,
                                      const float *bias, float eps, T *y, float *mean,
                                      float *rstd)
{
    FOR_ROWS(r, rows) {
        const T *xs = x + r * D;
        T *ys = y + r * D;
        double s = 0, ss = 0;
        for (i64 i = threadIdx.x; i < D; i += blockDim.x)
            s += load_el(xs, i);
        double mu = block_sum(s) / D;
        for (i64 i = threadIdx.x; i < D; i += blockDim.x) {
            double d = load_el(xs, i) - mu;
            ss += DMUL(d, d);
        }
        ss = block_sum(ss);
        float m = (float)mu, inv = (float)(1.0 / sqrt(ss / D + eps));
        for (i64 i = threadIdx.x; i < D; i += blockDim.x)
            store_el(ys, i, FADD(FMUL(FMUL(FSUB(load_el(xs, i), m), inv), scale[i]),
                                 bias ? bias[i] : 0.0f));
        if (threadIdx.x == 0 && mean)
            mean[r] = m;
        if (threadIdx.x == 0 && rstd)
            rstd[r] = inv;
    }
}

extern "C" __global__ void mprt_k_layernorm(i64 rows, i64 D, const float *x, const float *scale,
                                            const float *bias, float eps, float *y,
                                            float *mean, float *rstd)
{
    layernorm_rows(rows, D, x, scale, bias, eps, y, mean, rstd);
}

extern "C" __global__ void mprt_k_layernorm_bf16(i64 rows, i64 D, const u16 *x,
                                                 const float *scale, const float *bias,
                                                 float eps, u16 *y, float *mean, float *rstd)
{
    layernorm_rows(rows, D, x, scale, bias, eps, y, mean, rstd);
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale */
template <typename T>
static __device__ void layernorm_grad_x_rows(i64 rows, i64 D, const T *dy, const T *x,
                                             const float *scale, const float *mean,
                                             const float *rstd, T *dx)
{
    FOR_ROWS(r, rows) {
        const T *xs = x + r * D, *g = dy + r * D;
        float m = mean[r], inv = rstd[r];
        double sg = 0, sgx = 0;
        for (i64 i = threadIdx.x; i < D; i += blockDim.x) {
            float xhat = FMUL(FSUB(load_el(xs, i), m), inv), gi = FMUL(load_el(g, i), scale[i]);
            sg += gi;
            sgx += FMUL(gi, xhat);
        }
        float mg = (float)(block_sum(sg) / D), mgx = (float)(block_sum(sgx) / D);
        for (i64 i = threadIdx.x; i < D; i += blockDim.x) {
            float xhat = FMUL(FSUB(load_el(xs, i), m), inv);
            store_el(dx, r * D + i,
                     FMUL(inv, FSUB(FSUB(FMUL(load_el(g, i), scale[i]), mg), FMUL(xhat, mgx))));
        }
    }
}

extern "C" __global__ void mprt_k_layernorm_grad_x(i64 rows, i64 D, const float *dy,
                                                   const float *x, const float *scale,
                                                   const float *mean, const float *rstd,
                                                   float *dx)
{
    layernorm_grad_x_rows(rows, D, dy, x, scale, mean, rstd, dx);
}

extern "C" __global__ void mprt_k_layernorm_grad_x_bf16(i64 rows, i64 D, const u16 *dy,
                                                        const u16 *x, const float *scale,
                                                        const float *mean, const float *rstd,
                                                        u16 *dx)
{
    layernorm_grad_x_rows(rows, D, dy, x, scale, mean, rstd, dx);
}

/* dscale[i] = sum over rows of dy * xhat, dbias[i] = sum of dy (may be
 * NULL), in double, as mprt_k_col_sum splits its sums: 32 columns a block,
 * the rows split among its warps, the warps' partials added in order. */
template <typename T>
static __device__ void layernorm_grad_w_cols(i64 rows, i64 D, const T *dy, const T *x,
                                             const float *mean, const float *rstd,
                                             float *dscale, float *dbias)
{
    __shared__ double ps[32][33], pb[32][33];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    int width = blockDim.x < 32 ? blockDim.x : 32;
    for (i64 c0 = (i64)blockIdx.x * width; c0 < D; c0 += (i64)gridDim.x * width) {
        i64 i = c0 + lane;
        double as = 0, ab = 0;
        if (i < D)
#pragma unroll 4
            for (i64 r = w; r < rows; r += nw) {
                float g = load_el(dy, r * D + i);
                float xhat = FMUL(FSUB(load_el(x, r * D + i), mean[r]), rstd[r]);
                as += (double)g * xhat;
                ab += g;
            }
        ps[w][lane] = as;
        pb[w][lane] = ab;
        __syncthreads();
        if (w == 0 && i < D) {
            double ts = 0, tb = 0;
            for (int q = 0; q < nw; q++)
                ts += ps[q][lane], tb += pb[q][lane];
            dscale[i] = (float)ts;
            if (dbias)
                dbias[i] = (float)tb;
        }
        __syncthreads();
    }
}

extern "C" __global__ void mprt_k_layernorm_grad_w(i64 rows, i64 D, const float *dy,
                                                   const float *x, const float *mean,
                                                   const float *rstd, float *dscale,
                                                   float *dbias)
{
    layernorm_grad_w_cols(rows, D, dy, x, mean, rstd, dscale, dbias);
}

extern "C" __global__ void mprt_k_layernorm_grad_w_bf16(i64 rows, i64 D, const u16 *dy,
                                                        const u16 *x, const float *mean,
                                                        const float *rstd, float *dscale,
                                                        float *dbias)
{
    layernorm_grad_w_cols(rows, D, dy, x, mean, rstd, dscale, dbias);
}

/* ---- instance normalization, as group normalization with G groups ---- */

/* A group's mean and 1 / sqrt(var + eps) over its D elements at xs, in
 * double as the CPU's mprt_group_moments. Every kernel that calls it runs
 * with the same block size for the same D (mprt_cu_rows(..., D, ...)), so
 * they all get the same bits. */
static __device__ void group_moments(const float *xs, i64 D, double eps, float *mean,
                                     float *rstd)
{
    double s = 0, ss = 0;
    for (i64 i = threadIdx.x; i < D; i += blockDim.x)
        s += xs[i];
    double mu = block_sum(s) / D;
    for (i64 i = threadIdx.x; i < D; i += blockDim.x) {
        double d = xs[i] - mu;
        ss += DMUL(d, d);
    }
    ss = block_sum(ss);
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(ss / D + eps));
}

/* x is N x C x P; row r = (n, group) of C/G channels: one block per row. */
extern "C" __global__ void mprt_k_group_norm(int N, int C, int G, i64 P, const float *x,
                                             const float *scale, const float *bias, float eps,
                                             float *y)
{
    int cg = C / G;
    i64 D = (i64)cg * P;
    FOR_ROWS(r, (i64)N * G) {
        const float *xs = x + r * D;
        float m, inv;
        group_moments(xs, D, eps, &m, &inv);
        for (i64 i = threadIdx.x; i < D; i += blockDim.x) {
            int c = (int)(r % G) * cg + (int)(i / P);
            y[r * D + i] = FADD(FMUL(FSUB(xs[i], m), FMUL(inv, scale[c])), bias[c]);
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale, per row */
extern "C" __global__ void mprt_k_group_norm_grad_x(int N, int C, int G, i64 P, const float *dy,
                                                    const float *x, const float *scale,
                                                    float eps, float *dx)
{
    int cg = C / G;
    i64 D = (i64)cg * P;
    FOR_ROWS(r, (i64)N * G) {
        const float *xs = x + r * D, *d = dy + r * D;
        float m, inv;
        group_moments(xs, D, eps, &m, &inv);
        double sg = 0, sgx = 0;
        for (i64 i = threadIdx.x; i < D; i += blockDim.x) {
            int c = (int)(r % G) * cg + (int)(i / P);
            float xhat = FMUL(FSUB(xs[i], m), inv);
            double gs = DMUL((double)d[i], (double)scale[c]);
            sg += gs;
            sgx += DMUL(gs, (double)xhat);
        }
        float mg = (float)(block_sum(sg) / D), mgx = (float)(block_sum(sgx) / D);
        for (i64 i = threadIdx.x; i < D; i += blockDim.x) {
            int c = (int)(r % G) * cg + (int)(i / P);
            float xhat = FMUL(FSUB(xs[i], m), inv);
            dx[r * D + i] = FMUL(inv, FSUB(FSUB(FMUL(d[i], scale[c]), mg), FMUL(xhat, mgx)));
        }
    }
}

/* dscale[c] = sum of dy * xhat, dbias[c] = sum of dy over channel c of every
 * image, in double: one block per channel, its group's moments recomputed
 * per image (as the CPU does in the gradient). */
extern "C" __global__ void mprt_k_group_norm_grad_w(int N, int C, int G, i64 P, const float *dy,
                                                    const float *x, float eps, float *dscale,
                                                    float *dbias)
{
    int cg = C / G;
    i64 D = (i64)cg * P;
    FOR_ROWS(c, C) {
        i64 g = c / cg, j = c - g * cg;
        double as = 0, ab = 0;
        for (int n = 0; n < N; n++) {
            i64 r = (i64)n * G + g;
            float m, inv;
            group_moments(x + r * D, D, eps, &m, &inv);
            const float *xs = x + r * D + j * P, *d = dy + r * D + j * P;
            for (i64 i = threadIdx.x; i < P; i += blockDim.x) {
                as += DMUL((double)d[i], (double)FMUL(FSUB(xs[i], m), inv));
                ab += d[i];
            }
        }
        as = block_sum(as);
        ab = block_sum(ab);
        if (threadIdx.x == 0) {
            dscale[c] = (float)as;
            dbias[c] = (float)ab;
        }
    }
}

/* ---- dropout: the CPU's counter-based mask (runtime/cpu_math.c) ---- */

static __device__ u64 mix64(u64 z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* *key: the host's mprt_dropout_key(node) for this micro-batch, in a slot
 * the host fills each step; y = x * keep * scale; mask (may be NULL) = keep. */
template <typename T>
static __device__ void dropout_each(i64 n, const u64 *key, float ratio, float scale, const T *x,
                                    T *y, u8 *mask)
{
    FOR_EACH(i, n) {
        u64 r = mix64(*key + (u64)i * 0x9e3779b97f4a7c15ULL);
        int keep = (float)(r >> 40) * (1.0f / 16777216.0f) >= ratio;
        store_el(y, i, keep ? FMUL(load_el(x, i), scale) : 0.0f);
        if (mask)
            mask[i] = (u8)keep;
    }
}

extern "C" __global__ void mprt_k_dropout(i64 n, const u64 *key, float ratio, float scale,
                                          const float *x, float *y, u8 *mask)
{
    dropout_each(n, key, ratio, scale, x, y, mask);
}

extern "C" __global__ void mprt_k_dropout_bf16(i64 n, const u64 *key, float ratio, float scale,
                                               const u16 *x, u16 *y, u8 *mask)
{
    dropout_each(n, key, ratio, scale, x, y, mask);
}

/* ---- optimizers (torch.optim), the CPU's operation order ---- */

/* The gradients' factor: the host's (1 / micro-batches), times the
 * clipping factor where a kernel computed it on the GPU (clip, non-NULL
 * under --clip-norm: mprt_k_clip_factor), as the host multiplies them. */
static __device__ float step_scale(float scale, const float *clip)
{
    return clip ? FMUL(scale, *clip) : scale;
}

extern "C" __global__ void mprt_k_sgd(i64 n, float *w, const float *g, float *buf, float scale,
                                      const float *clip, float lr, float momentum, float wd,
                                      int nesterov, int first)
{
    scale = step_scale(scale, clip);
    FOR_EACH(i, n) {
        float d = FADD(FMUL(g[i], scale), FMUL(wd, w[i]));
        if (buf) {
            buf[i] = first ? d : FADD(FMUL(momentum, buf[i]), d);
            d = nesterov ? FADD(d, FMUL(momentum, buf[i])) : buf[i];
        }
        w[i] = FSUB(w[i], FMUL(lr, d));
    }
}

/* decay = 1 - lr * wd, step_size = lr / (1 - b1^t), bc2s = sqrt(1 - b2^t),
 * all from the host as the CPU computes them. */
/* h: the step's {decay, step size, sqrt of the second bias correction},
 * from its slot (runtime/cuda.c, mprt_cu_slot), so a captured step replays
 * with each step's own. */
extern "C" __global__ void mprt_k_adamw(i64 n, float *w, const float *g, float *m, float *v,
                                        float scale, const float *clip, float b1, float b2,
                                        float eps, const float *h)
{
    float decay = h[0], step_size = h[1], bc2s = h[2];
    scale = step_scale(scale, clip);
    FOR_EACH(i, n) {
        float gi = FMUL(g[i], scale);
        float wi = FMUL(w[i], decay);
        float mi = FADD(FMUL(b1, m[i]), FMUL(FSUB(1.0f, b1), gi));
        float vi = FADD(FMUL(b2, v[i]), FMUL(FMUL(FSUB(1.0f, b2), gi), gi));
        m[i] = mi;
        v[i] = vi;
        w[i] = FSUB(wi, FDIV(FMUL(step_size, mi), FADD(FDIV(__fsqrt_rn(vi), bc2s), eps)));
    }
}

/* ---- --clip-norm: a gradient's squared norm, in runtime/kernel.h's
 * order (the CPU's mprt_sq_norm), whatever the launch shape ---- */

/* *clip = state.c's mprt_clip_scale(k, sq, max_norm), in the same
 * operations (IEEE double sums, square root and quotient), on one thread:
 * the factor the step's updates on this GPU read. */
extern "C" __global__ void mprt_k_clip_factor(int k, const double *sq, float max_norm,
                                              float *clip)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double s = 0.0;
    for (int j = 0; j < k; j++)
        s = __dadd_rn(s, sq[j]);
    double c = __ddiv_rn((double)max_norm, __dadd_rn(__dsqrt_rn(s), 1e-6));
    *clip = c < 1.0 ? __double2float_rn(c) : 1.0f;
}

/* s[0 .. 2 w) added by halving into s[0]; every thread of the block calls it. */
static __device__ void sq_halving(double *s, int w)
{
    for (; w > 0; w >>= 1) {
        __syncthreads();
        for (int t = threadIdx.x; t < w; t += blockDim.x)
            s[t] += s[t + w];
    }
    __syncthreads();
}

/* part[k]: the sum of group k's lanes. */
extern "C" __global__ void mprt_k_sq_lanes(i64 n, const float *g, float scale, double *part)
{
    __shared__ double s[MPRT_SQ_GROUP];
    const i64 lanes = (i64)MPRT_SQ_GROUP * MPRT_SQ_GROUPS;
    FOR_ROWS(k, MPRT_SQ_GROUPS) {
        for (int t = threadIdx.x; t < MPRT_SQ_GROUP; t += blockDim.x) {
            double a = 0.0;
            for (i64 i = k * MPRT_SQ_GROUP + t; i < n; i += lanes) {
                float x = FMUL(g[i], scale);
                a += DMUL((double)x, (double)x);
            }
            s[t] = a;
        }
        sq_halving(s, MPRT_SQ_GROUP / 2);
        if (threadIdx.x == 0)
            part[k] = s[0];
        __syncthreads();
    }
}

/* *out: the groups' sums added by halving (one block). */
extern "C" __global__ void mprt_k_sq_total(const double *part, double *out)
{
    __shared__ double s[MPRT_SQ_GROUPS];
    for (int t = threadIdx.x; t < MPRT_SQ_GROUPS; t += blockDim.x)
        s[t] = part[t];
    sq_halving(s, MPRT_SQ_GROUPS / 2);
    if (threadIdx.x == 0)
        *out = s[0];
}

/* ---- data movement ---- */

/* y[i] = x[base + sum idx[d] * stride[d]] (Transpose, Slice); back: the
 * other way (x zeroed by the host first). Elements: float32, or bf16 where
 * half. */
struct Strided {
    i64 shape[8], stride[8];
    int rank;
};

/* *y = *x, or *x = *y where back: one element of float32, or of bf16. */
static __device__ void move32(int back, float *x, float *y)
{
    if (back)
        *x = *y;
    else
        *y = *x;
}

static __device__ void move16(int back, u16 *x, u16 *y)
{
    if (back)
        *x = *y;
    else
        *y = *x;
}

extern "C" __global__ void mprt_k_strided(int back, Strided s, i64 base, i64 n, void *x,
                                          void *y, int half)
{
    FOR_EACH(i, n) {
        i64 off = base, digit[8];
        index_digits(i, s.rank, s.shape, digit);
        for (int d = 0; d < s.rank; d++)
            off += digit[d] * s.stride[d];
        if (half)
            move16(back, (u16 *)x + off, (u16 *)y + i);
        else
            move32(back, (float *)x + off, (float *)y + i);
    }
}

/* One part of a Concat (Split when back): `outer` rows of seg elements at
 * column `col` of y's rows of `row` elements (float32, or bf16 where half). */
extern "C" __global__ void mprt_k_concat(int back, i64 outer, i64 seg, i64 row, i64 col,
                                         void *part, void *y, int half)
{
    FOR_EACH(e, outer * seg) {
        i64 o = e / seg, at = o * row + col + (e - o * seg);
        if (half)
            move16(back, (u16 *)part + e, (u16 *)y + at);
        else
            move32(back, (float *)part + e, (float *)y + at);
    }
}

/* An index of Gather in [-dim, dim) made non-negative; -1 if out of range. */
static __device__ i64 gather_index(i64 v, i64 dim)
{
    return v < -dim || v >= dim ? -1 : v < 0 ? v + dim : v;
}

extern "C" __global__ void mprt_k_gather(i64 outer, i64 dim, i64 inner, i64 nidx,
                                         const i64 *idx, const float *x, float *y, u64 node)
{
    FOR_EACH(e, outer * nidx * inner) {
        i64 oi = e / inner, j = e - oi * inner, o = oi / nidx, i = oi - o * nidx;
        i64 k = gather_index(idx[i], dim);
        if (k < 0) {
            fault(FAULT_INDEX, idx[i], dim, node, 0);
            y[e] = 0.0f;
            continue;
        }
        y[e] = x[(o * dim + k) * inner + j];
    }
}

/* The gradient of Gather, deterministic: blocks walk the pairs (index i,
 * chunk of blockDim elements of dx's outer x inner); a pair does the work
 * only when i is the first occurrence of its row k, and each of its threads
 * then sums dy[o, i', j] over every i' >= i with the same row, in order (as
 * the CPU's scatter does), and writes dx[o, k, j]. The host zeroes dx for
 * the rows no index names. So an index alone (a Gather that picks one
 * slice, as exporters split attention's q, k and v) spreads over the grid
 * rather than one block. */
extern "C" __global__ void mprt_k_gather_grad(i64 outer, i64 dim, i64 inner, i64 nidx,
                                              const i64 *idx, const float *dy, float *dx)
{
    i64 n = outer * inner, chunks = (n + blockDim.x - 1) / blockDim.x;
    for (i64 t = blockIdx.x; t < nidx * chunks; t += gridDim.x) {
        i64 i = t / chunks, e = (t - i * chunks) * blockDim.x + threadIdx.x;
        i64 k = gather_index(idx[i], dim);
        if (k < 0)
            continue;   /* the forward pass reported it */
        int earlier = 0;
        for (i64 j = threadIdx.x; j < i && !earlier; j += blockDim.x)
            earlier = gather_index(idx[j], dim) == k;
        if (__syncthreads_or(earlier) || e >= n)
            continue;
        i64 o = e / inner, jj = e - o * inner;
        float acc = 0.0f;
        for (i64 b = i; b < nidx; b++)
            if (gather_index(idx[b], dim) == k)
                acc = FADD(acc, dy[(o * nidx + b) * inner + jj]);
        dx[(o * dim + k) * inner + jj] = acc;
    }
}

/* float16 by its bits, as cpu_move.c converts it. */
static __device__ float f16_to_f32(unsigned short h)
{
    unsigned sign = (unsigned)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0x1f)
        x = sign | 0x7f800000u | (m << 13);
    else if (e)
        x = sign | ((e + 112) << 23) | (m << 13);
    else if (!m)
        x = sign;
    else {
        for (e = 113; !(m & 0x400); e--)
            m <<= 1;
        x = sign | (e << 23) | ((m & 0x3ff) << 13);
    }
    return __int_as_float((int)x);
}

static __device__ unsigned short f32_to_f16(float f)
{
    unsigned x = (unsigned)__float_as_int(f);
    unsigned sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e == 0xff)
        return (unsigned short)(sign | 0x7c00 | (m ? 0x200 : 0));
    int he = (int)e - 112;
    if (he >= 31)
        return (unsigned short)(sign | 0x7c00);
    if (he < -10)
        return (unsigned short)sign;
    int shift = he <= 0 ? 14 - he : 13;
    if (he <= 0)
        m |= 0x800000;
    unsigned r = (he <= 0 ? 0 : (unsigned)he << 10) | (m >> shift);
    unsigned rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    r += rem > half || (rem == half && (r & 1));
    return (unsigned short)(sign | r);
}

static __device__ double cast_read(int t, const void *x, i64 i)
{
    switch (t) {
    case CAST_F32: return ((const float *)x)[i];
    case CAST_I64: return (double)((const i64 *)x)[i];
    case CAST_I32: return ((const int *)x)[i];
    case CAST_F64: return ((const double *)x)[i];
    case CAST_F16: return f16_to_f32(((const unsigned short *)x)[i]);
    default: return ((const u8 *)x)[i];
    }
}

extern "C" __global__ void mprt_k_cast(i64 n, int from, int to, const void *x, void *y)
{
    FOR_EACH(i, n) {
        double v = cast_read(from, x, i);
        switch (to) {
        case CAST_F32: ((float *)y)[i] = (float)v; break;
        case CAST_I64: ((i64 *)y)[i] = (i64)v; break;
        case CAST_I32: ((int *)y)[i] = (int)v; break;
        case CAST_U8: ((u8 *)y)[i] = (u8)v; break;
        case CAST_F64: ((double *)y)[i] = v; break;
        case CAST_F16: ((unsigned short *)y)[i] = f32_to_f16((float)v); break;
        default: ((u8 *)y)[i] = v != 0; break;
        }
    }
}

/* ---- comparisons and logic: bool (u8) results ---- */

static __device__ double elem(int type, const void *p, i64 i)
{
    switch (type) {
    case ELEM_F32: return ((const float *)p)[i];
    case ELEM_I64: return (double)((const i64 *)p)[i];
    default: return ((const u8 *)p)[i];
    }
}

/* y = a op b with broadcasting; int64 operands compare exactly */
extern "C" __global__ void mprt_k_compare(int op, int type, i64 n, Bcast b, const void *x,
                                          const void *z, u8 *y)
{
    FOR_EACH(i, n) {
        i64 off[2];
        bcast_offsets(b, i, 2, off);
        int r;
        if (type == ELEM_I64) {
            i64 u = ((const i64 *)x)[off[0]], v = ((const i64 *)z)[off[1]];
            r = op == EQUAL ? u == v : op == LESS ? u < v
              : op == LESS_EQUAL ? u <= v : op == GREATER ? u > v : u >= v;
        } else {
            double u = elem(type, x, off[0]), v = elem(type, z, off[1]);
            switch (op) {
            case EQUAL: r = u == v; break;
            case LESS: r = u < v; break;
            case LESS_EQUAL: r = u <= v; break;
            case GREATER: r = u > v; break;
            case GREATER_EQUAL: r = u >= v; break;
            case AND: r = u != 0 && v != 0; break;
            case OR: r = u != 0 || v != 0; break;
            default: r = (u != 0) != (v != 0); break;
            }
        }
        y[i] = (u8)r;
    }
}

extern "C" __global__ void mprt_k_not(i64 n, const u8 *x, u8 *y)
{
    FOR_EACH(i, n) y[i] = !x[i];
}

/* ---- elements of any type (ELEM_*): integers as i64, floats as double ---- */

static __device__ i64 int_at(int type, const void *p, i64 i)
{
    switch (type) {
    case ELEM_I64: return ((const i64 *)p)[i];
    case ELEM_I32: return ((const int *)p)[i];
    case ELEM_I16: return ((const short *)p)[i];
    case ELEM_I8: return ((const signed char *)p)[i];
    default: return ((const u8 *)p)[i];
    }
}

static __device__ void int_put(int type, void *p, i64 i, i64 v)
{
    switch (type) {
    case ELEM_I64: ((i64 *)p)[i] = v; break;
    case ELEM_I32: ((int *)p)[i] = (int)v; break;
    case ELEM_I16: ((short *)p)[i] = (short)v; break;
    case ELEM_I8: ((signed char *)p)[i] = (signed char)v; break;
    default: ((u8 *)p)[i] = (u8)v; break;
    }
}

static __device__ double float_at(int type, const void *p, i64 i)
{
    return type == ELEM_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}

/* ---- Mod, in the operands' own type ---- */

/* The CPU's rules (cpu_move.c): 0 for a zero or -1 divisor; fmod 0 takes
 * the divisor's sign, as Python (and numpy for floats) do. */
static __device__ i64 mod_int(int c_fmod, i64 a, i64 b)
{
    if (b == 0 || b == -1)
        return 0;
    i64 r = a % b;
    return c_fmod || r == 0 || (r < 0) == (b < 0) ? r : r + b;
}

static __device__ float mod_f32(int c_fmod, float a, float b)
{
    float r = fmodf(a, b);
    if (c_fmod || b == 0)
        return r;
    if (r == 0)
        return copysignf(0.0f, b);
    return (r < 0) != (b < 0) ? FADD(r, b) : r;
}

static __device__ double mod_f64(int c_fmod, double a, double b)
{
    double r = fmod(a, b);
    if (c_fmod || b == 0)
        return r;
    if (r == 0)
        return copysign(0.0, b);
    return (r < 0) != (b < 0) ? r + b : r;
}

extern "C" __global__ void mprt_k_mod(int c_fmod, int type, i64 n, Bcast b, const void *x,
                                      const void *z, void *y)
{
    FOR_EACH(i, n) {
        i64 off[2];
        bcast_offsets(b, i, 2, off);
        if (type == ELEM_F32)
            ((float *)y)[i] = mod_f32(c_fmod, ((const float *)x)[off[0]],
                                      ((const float *)z)[off[1]]);
        else if (type == ELEM_F64)
            ((double *)y)[i] = mod_f64(c_fmod, ((const double *)x)[off[0]],
                                       ((const double *)z)[off[1]]);
        else
            int_put(type, y, i, mod_int(c_fmod, int_at(type, x, off[0]), int_at(type, z, off[1])));
    }
}

/* ---- ArgMax and ArgMin, CumSum: one thread per line of (outer, n, inner),
 * the axis walked in the CPU's order ---- */

/* Whether v takes the place of m, the extreme so far (cpu_math.c's
 * mprt_arg_takes): NaN wins; a tie, or NaN after NaN, only for the last. */
static __device__ bool arg_takes(int is_min, int last, double v, double m)
{
    if (v != v || m != m)
        return v != v && (last || m == m);
    return is_min ? v < m || (last && v == m) : v > m || (last && v == m);
}

static __device__ bool arg_takes_int(int is_min, int last, i64 v, i64 m)
{
    return is_min ? v < m || (last && v == m) : v > m || (last && v == m);
}

extern "C" __global__ void mprt_k_argmax(int is_min, int last, int type, i64 outer, i64 n,
                                         i64 inner, const void *x, i64 *y)
{
    FOR_EACH(e, outer * inner) {
        i64 o = e / inner, base = o * n * inner + (e - o * inner), best = 0;
        if (type == ELEM_F32 || type == ELEM_F64) {
            double m = float_at(type, x, base);
            for (i64 j = 1; j < n; j++) {
                double v = float_at(type, x, base + j * inner);
                if (arg_takes(is_min, last, v, m))
                    m = v, best = j;
            }
        } else {
            i64 m = int_at(type, x, base);
            for (i64 j = 1; j < n; j++) {
                i64 v = int_at(type, x, base + j * inner);
                if (arg_takes_int(is_min, last, v, m))
                    m = v, best = j;
            }
        }
        y[e] = best;
    }
}

/* Running sums in double, as the CPU's; y may be x (each thread reads an
 * element before it writes it). */
extern "C" __global__ void mprt_k_cumsum(int exclusive, int reverse, i64 outer, i64 n, i64 inner,
                                         const float *x, float *y)
{
    FOR_EACH(e, outer * inner) {
        i64 o = e / inner, base = o * n * inner + (e - o * inner);
        double acc = 0.0;
        for (i64 k = 0; k < n; k++) {
            i64 j = base + (reverse ? n - 1 - k : k) * inner;
            double v = x[j];
            if (!exclusive)
                acc += v;
            y[j] = (float)acc;
            if (exclusive)
                acc += v;
        }
    }
}

/* ---- GatherElements, ScatterElements, GatherND and ScatterND (the CPU's
 * mprt_gather_elements ... mprt_scatter_nd): a scatter first copies x to y
 * (scatter_fill), then one thread per line of the indices, or per column
 * of ScatterND's rows, combines the updates into y in the CPU's order ---- */

/* The shapes of GatherElements' and ScatterElements' data and indices. */
struct Elems {
    i64 xs[8], is[8];
    int rank, axis;
};

/* GatherND's and ScatterND's data: nbatch x dims[0..k) (slots in all) x
 * inner; the indices: nbatch x nrows x k. */
struct Nd {
    i64 dims[8];
    i64 nbatch, nrows, slots, inner;
    int k;
};

static __device__ i64 elem_size(int type)
{
    return type == ELEM_F64 || type == ELEM_I64 ? 8 : type == ELEM_F32 || type == ELEM_I32 ? 4
         : type == ELEM_I16 ? 2 : 1;
}

/* y[i] = x[j], or 0 where x is NULL. */
static __device__ void elem_copy(int type, void *y, i64 i, const void *x, i64 j)
{
    switch (elem_size(type)) {
    case 8: ((i64 *)y)[i] = x ? ((const i64 *)x)[j] : 0; break;
    case 4: ((int *)y)[i] = x ? ((const int *)x)[j] : 0; break;
    case 2: ((short *)y)[i] = x ? ((const short *)x)[j] : (short)0; break;
    default: ((u8 *)y)[i] = x ? ((const u8 *)x)[j] : (u8)0; break;
    }
}

static __device__ float combine_f32(int red, float a, float b)
{
    switch (red) {
    case SCATTER_ADD: return FADD(a, b);
    case SCATTER_MUL: return FMUL(a, b);
    case SCATTER_MAX: return b > a || b != b ? b : a;
    default: return b < a || b != b ? b : a;
    }
}

static __device__ double combine_f64(int red, double a, double b)
{
    switch (red) {
    case SCATTER_ADD: return a + b;
    case SCATTER_MUL: return DMUL(a, b);
    case SCATTER_MAX: return b > a || b != b ? b : a;
    default: return b < a || b != b ? b : a;
    }
}

static __device__ i64 combine_int(int red, i64 a, i64 b)
{
    switch (red) {
    case SCATTER_ADD: return (i64)((u64)a + (u64)b);
    case SCATTER_MUL: return (i64)((u64)a * (u64)b);
    case SCATTER_MAX: return b > a ? b : a;
    default: return b < a ? b : a;
    }
}

/* y[i] = u[j] (SCATTER_NONE), 0 (SCATTER_ZERO), or y[i] combined with
 * u[j] by the reduction red. */
static __device__ void scatter_put(int red, int type, void *y, i64 i, const void *u, i64 j)
{
    if (red == SCATTER_NONE) {
        elem_copy(type, y, i, u, j);
    } else if (red == SCATTER_ZERO) {
        elem_copy(type, y, i, 0, 0);
    } else if (type == ELEM_F32) {
        float *p = (float *)y + i;
        *p = combine_f32(red, *p, ((const float *)u)[j]);
    } else if (type == ELEM_F64) {
        double *p = (double *)y + i;
        *p = combine_f64(red, *p, ((const double *)u)[j]);
    } else {
        int_put(type, y, i, combine_int(red, int_at(type, y, i), int_at(type, u, j)));
    }
}

/* y = x (NULL: zeros). */
extern "C" __global__ void mprt_k_scatter_fill(int type, i64 n, const void *x, void *y)
{
    FOR_EACH(i, n) elem_copy(type, y, i, x, i);
}

extern "C" __global__ void mprt_k_gather_elements(int type, int itype, Elems p, i64 n,
                                                  const void *idx, const void *x, void *y, u64 node)
{
    FOR_EACH(e, n) {
        i64 rest = e, off = 0, st = 1, ast = 0;
        for (int d = p.rank - 1; d >= 0; d--) {
            i64 c = rest % p.is[d];
            rest /= p.is[d];
            if (d == p.axis)
                ast = st;
            else
                off += c * st;
            st *= p.xs[d];
        }
        i64 v = int_at(itype, idx, e), k = gather_index(v, p.xs[p.axis]);
        if (k < 0) {
            fault(FAULT_INDEX, v, p.xs[p.axis], node, 0);
            elem_copy(type, y, e, 0, 0);
            continue;
        }
        elem_copy(type, y, e, x, off + k * ast);
    }
}

/* One thread per line of the indices along the axis (nlines of them),
 * walking it from its start: each element of y is combined with its
 * updates in the CPU's order. */
extern "C" __global__ void mprt_k_scatter_elements(int red, int type, int itype, Elems p,
                                                   i64 nlines, const void *idx, const void *u,
                                                   void *y, u64 node)
{
    FOR_EACH(l, nlines) {
        i64 rest = l, ib = 0, yb = 0, ist = 1, yst = 1, ia = 0, ya = 0;
        for (int d = p.rank - 1; d >= 0; d--) {
            if (d == p.axis) {
                ia = ist, ya = yst;
            } else {
                i64 c = rest % p.is[d];
                rest /= p.is[d];
                ib += c * ist, yb += c * yst;
            }
            ist *= p.is[d], yst *= p.xs[d];
        }
        for (i64 j = 0; j < p.is[p.axis]; j++) {
            i64 v = int_at(itype, idx, ib + j * ia), k = gather_index(v, p.xs[p.axis]);
            if (k < 0)
                fault(FAULT_INDEX, v, p.xs[p.axis], node, 0);
            else
                scatter_put(red, type, y, yb + k * ya, u, ib + j * ia);
        }
    }
}

/* The slot of index row `at` (the CPU's mprt_nd_slot), or -1 after
 * recording a fault. */
static __device__ i64 nd_slot(const Nd &p, int itype, const void *idx, i64 at, u64 node)
{
    i64 s = 0;
    for (int q = 0; q < p.k; q++) {
        i64 v = int_at(itype, idx, at + q), k = gather_index(v, p.dims[q]);
        if (k < 0) {
            fault(FAULT_INDEX, v, p.dims[q], node, 0);
            return -1;
        }
        s = s * p.dims[q] + k;
    }
    return s;
}

extern "C" __global__ void mprt_k_gather_nd(int type, int itype, Nd p, const void *idx,
                                            const void *x, void *y, u64 node)
{
    FOR_EACH(e, p.nbatch * p.nrows * p.inner) {
        i64 row = e / p.inner, j = e - row * p.inner, b = row / p.nrows;
        i64 s = nd_slot(p, itype, idx, row * p.k, node);
        if (s < 0)
            elem_copy(type, y, e, 0, 0);
        else
            elem_copy(type, y, e, x, (b * p.slots + s) * p.inner + j);
    }
}

/* One thread per column of a batch's rows, walking the rows in order. */
extern "C" __global__ void mprt_k_scatter_nd(int red, int type, int itype, Nd p,
                                             const void *idx, const void *u, void *y, u64 node)
{
    FOR_EACH(c, p.nbatch * p.inner) {
        i64 b = c / p.inner, j = c - b * p.inner;
        for (i64 r = 0; r < p.nrows; r++) {
            i64 row = b * p.nrows + r, s = nd_slot(p, itype, idx, row * p.k, node);
            if (s >= 0)
                scatter_put(red, type, y, (b * p.slots + s) * p.inner + j, u, row * p.inner + j);
        }
    }
}

/* ---- TopK: one thread per line of (outer, n, inner), selecting as the
 * CPU does (cpu_math.c's mprt_topk_line) ---- */

/* One element of es bytes from x[from] to y[to]. */
static __device__ void copy_elem(i64 es, const void *x, i64 from, void *y, i64 to)
{
    switch (es) {
    case 8: ((i64 *)y)[to] = ((const i64 *)x)[from]; break;
    case 4: ((int *)y)[to] = ((const int *)x)[from]; break;
    case 2: ((short *)y)[to] = ((const short *)x)[from]; break;
    default: ((u8 *)y)[to] = ((const u8 *)x)[from]; break;
    }
}

static __device__ void zero_elem(i64 es, void *y, i64 to)
{
    switch (es) {
    case 8: ((i64 *)y)[to] = 0; break;
    case 4: ((int *)y)[to] = 0; break;
    case 2: ((short *)y)[to] = 0; break;
    default: ((u8 *)y)[to] = 0; break;
    }
}

/* Whether element a comes before element b (a lower index): NaN above
 * every number, equals in index order. */
static __device__ bool topk_before(int largest, int type, const void *x, i64 a, i64 b)
{
    if (type == ELEM_F32 || type == ELEM_F64) {
        double u = float_at(type, x, a), v = float_at(type, x, b);
        if (u != u || v != v)
            return largest ? u != u && v == v : v != v && u == u;
        return largest ? u > v : u < v;
    }
    i64 u = int_at(type, x, a), v = int_at(type, x, b);
    return largest ? u > v : u < v;
}

extern "C" __global__ void mprt_k_topk(int largest, int type, i64 outer, i64 n, i64 k,
                                       i64 inner, const void *x, void *values, i64 *idx)
{
    FOR_EACH(e, outer * inner) {
        i64 o = e / inner, i = e - o * inner, xb = o * n * inner + i, yb = o * k * inner + i;
        i64 have = 0, *line = idx + yb;
        for (i64 j = 0; j < n; j++) {
            i64 p = have;
            while (p > 0 && topk_before(largest, type, x, xb + j * inner,
                                        xb + line[(p - 1) * inner] * inner))
                p--;
            if (p >= k)
                continue;
            for (i64 q = have < k ? have : k - 1; q > p; q--)
                line[q * inner] = line[(q - 1) * inner];
            line[p * inner] = j;
            have += have < k;
        }
        for (i64 j = 0; j < k; j++)
            copy_elem(elem_size(type), x, xb + line[j * inner] * inner, values, yb + j * inner);
    }
}

/* TopK's gradient: each thread zeroes its line of dx, then puts dy back
 * at the line's indices. */
extern "C" __global__ void mprt_k_topk_grad(i64 outer, i64 n, i64 k, i64 inner,
                                            const float *dy, const i64 *idx, float *dx)
{
    FOR_EACH(e, outer * inner) {
        i64 o = e / inner, i = e - o * inner;
        for (i64 j = 0; j < n; j++)
            dx[(o * n + j) * inner + i] = 0.0f;
        for (i64 j = 0; j < k; j++)
            dx[(o * n + idx[(o * k + j) * inner + i]) * inner + i] = dy[(o * k + j) * inner + i];
    }
}

/* ---- OneHot and Trilu: elements of es bytes, copied ---- */

/* cpu_move.c's mprt_onehot_pos: the on position of index i, -1 if none. */
static __device__ i64 onehot_pos(int type, const void *idx, i64 i, i64 depth)
{
    i64 v;
    if (type == ELEM_F32 || type == ELEM_F64) {
        double f = float_at(type, idx, i);
        if (!(f > -(double)depth - 1 && f < (double)depth))
            return -1;
        v = (i64)f;
    } else {
        v = int_at(type, idx, i);
    }
    if (v < -depth || v >= depth)
        return -1;
    return v < 0 ? v + depth : v;
}

extern "C" __global__ void mprt_k_onehot(int type, i64 outer, i64 depth, i64 inner, int es,
                                         const void *idx, const void *values, void *y)
{
    FOR_EACH(e, outer * depth * inner) {
        i64 i = e % inner, od = e / inner, d = od % depth, o = od / depth;
        copy_elem(es, values, onehot_pos(type, idx, o * inner + i, depth) == d, y, e);
    }
}

/* One thread: the sums in the CPU's order. */
extern "C" __global__ void mprt_k_onehot_grad(int type, i64 outer, i64 depth, i64 inner,
                                              const void *idx, const float *dy, float *dvalues)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        double sum[2] = {0.0, 0.0};
        for (i64 e = 0; e < outer * depth * inner; e++) {
            i64 i = e % inner, od = e / inner, d = od % depth, o = od / depth;
            sum[onehot_pos(type, idx, o * inner + i, depth) == d] += dy[e];
        }
        dvalues[0] = (float)sum[0];
        dvalues[1] = (float)sum[1];
    }
}

extern "C" __global__ void mprt_k_trilu(int upper, i64 k, i64 count, i64 rows, i64 cols, int es,
                                        const void *x, void *y)
{
    FOR_EACH(e, count * rows * cols) {
        i64 c = e % cols, r = (e / cols) % rows;
        if (upper ? c >= r + k : c <= r + k)
            copy_elem(es, x, e, y, e);
        else
            zero_elem(es, y, e);
    }
}

/* ---- Pad (constant, reflect, edge) over up to 8 dims ---- */

struct Pad {
    i64 xs[8], ys[8], begin[8];   /* x's dims, y's dims, the pads before (negative: crop) */
    int rank, mode;
};

/* The input index that output index o of a dim reads, or -1 for the
 * constant (the CPU's mprt_pad_src). */
static __device__ i64 pad_src(int mode, i64 o, i64 begin, i64 n)
{
    i64 i = o - begin;
    if (i >= 0 && i < n)
        return i;
    if (mode == PAD_CONSTANT)
        return -1;
    if (mode == PAD_EDGE || n == 1)
        return i < 0 ? 0 : n - 1;
    i64 period = 2 * (n - 1);
    i = i % period;
    i = i < 0 ? i + period : i;
    return i < n ? i : period - i;
}

/* The first output index at or after o (of out) that reads input index i
 * of a dim: pad_src inverted; out if there is none. */
static __device__ i64 pad_next(int mode, i64 i, i64 begin, i64 n, i64 out, i64 o)
{
    if (mode == PAD_REFLECT && n > 1) {
        /* (o - begin) mod 2(n-1) is i or 2(n-1) - i */
        i64 period = 2 * (n - 1), r = (o - begin) % period;
        r = r < 0 ? r + period : r;
        i64 d1 = i - r, d2 = (period - i) % period - r;
        d1 = d1 < 0 ? d1 + period : d1;
        d2 = d2 < 0 ? d2 + period : d2;
        o += d1 < d2 ? d1 : d2;
        return o < out ? o : out;
    }
    i64 lo = begin + i, hi = lo + 1;   /* [lo, hi): the outputs that read i */
    if (mode != PAD_CONSTANT) {        /* edge: the first and last stretch out */
        if (i == 0)
            lo = 0;
        if (i == n - 1)
            hi = out;
    }
    lo = lo > o ? lo : o;
    return lo < hi && lo < out ? lo : out;
}

extern "C" __global__ void mprt_k_pad(Pad p, float value, i64 n, const float *x, float *y)
{
    FOR_EACH(o, n) {
        i64 off = 0, st = 1, k = o;
        for (int d = p.rank - 1; d >= 0; d--) {
            i64 q = k / p.ys[d], i = pad_src(p.mode, k - q * p.ys[d], p.begin[d], p.xs[d]);
            if (i < 0) {
                off = -1;
                break;
            }
            off += i * st;
            st *= p.xs[d];
            k = q;
        }
        y[o] = off >= 0 ? x[off] : value;
    }
}

/* The gradient, gathered: each input adds the dy of every output that
 * read it, in the outputs' order (the CPU's scatter order); the outputs
 * that read it are, per dim, the indices pad_next lists, so they are
 * walked as an odometer over those lists. */
extern "C" __global__ void mprt_k_pad_grad(Pad p, i64 n, float *dx, const float *dy)
{
    FOR_EACH(j, n) {
        i64 idx[8], o[8], k = j;
        for (int d = p.rank - 1; d >= 0; d--) {
            i64 q = k / p.xs[d];
            idx[d] = k - q * p.xs[d];
            k = q;
        }
        int none = 0;
        for (int d = 0; d < p.rank; d++) {
            o[d] = pad_next(p.mode, idx[d], p.begin[d], p.xs[d], p.ys[d], 0);
            none |= o[d] >= p.ys[d];
        }
        float acc = 0.0f;
        while (!none) {
            i64 flat = 0;
            for (int d = 0; d < p.rank; d++)
                flat = flat * p.ys[d] + o[d];
            acc = FADD(acc, dy[flat]);
            int d = p.rank - 1;
            for (; d >= 0; d--) {
                o[d] = pad_next(p.mode, idx[d], p.begin[d], p.xs[d], p.ys[d], o[d] + 1);
                if (o[d] < p.ys[d])
                    break;
                o[d] = pad_next(p.mode, idx[d], p.begin[d], p.xs[d], p.ys[d], 0);
            }
            none = d < 0;
        }
        dx[j] = acc;
    }
}

/* ---- Resize (2-D, the last two dimensions), as runtime/cpu_move.c ---- */

struct Resize {
    i64 NC;
    int H, W, OH, OW;
    int coord, mode;
    float scale_h, scale_w;
};

static __device__ float resize_src(const Resize &p, int o, int in, int out, float scale)
{
    switch (p.coord) {
    case ALIGN_CORNERS: return out > 1 ? FDIV(FMUL((float)o, (float)(in - 1)), (float)(out - 1)) : 0.0f;
    case ASYMMETRIC: return FDIV((float)o, scale);
    case PYTORCH_HALF_PIXEL: return out > 1 ? FSUB(FDIV(FADD((float)o, 0.5f), scale), 0.5f) : 0.0f;
    default: return FSUB(FDIV(FADD((float)o, 0.5f), scale), 0.5f);
    }
}

static __device__ void resize_taps(const Resize &p, int o, int in, int out, float scale, int *i0,
                                   int *i1, float *w1)
{
    float s = resize_src(p, o, in, out, scale);
    if (p.mode != LINEAR) {
        float f = p.mode == NEAREST_FLOOR ? floorf(s)
                : p.mode == NEAREST_CEIL ? ceilf(s)
                : p.mode == NEAREST_ROUND_DOWN ? ceilf(FSUB(s, 0.5f)) : floorf(FADD(s, 0.5f));
        int k = (int)f;
        *i0 = *i1 = k < 0 ? 0 : k >= in ? in - 1 : k;
        *w1 = 0.0f;
        return;
    }
    s = s < 0 ? 0 : s;
    int k = (int)s;
    k = k >= in - 1 ? in - 1 : k;
    *i0 = k;
    *i1 = k + 1 < in ? k + 1 : k;
    *w1 = FSUB(s, (float)k);
    if (*i1 == k)
        *w1 = 0.0f;
}

extern "C" __global__ void mprt_k_resize(Resize p, const float *x, float *y)
{
    i64 in_plane = (i64)p.H * p.W, out_plane = (i64)p.OH * p.OW;
    FOR_EACH(e, p.NC * out_plane) {
        i64 nc = e / out_plane, r = e - nc * out_plane;
        int oh = (int)(r / p.OW), ow = (int)(r - (i64)oh * p.OW);
        int h0, h1, w0, w1;
        float ah, aw;
        resize_taps(p, oh, p.H, p.OH, p.scale_h, &h0, &h1, &ah);
        resize_taps(p, ow, p.W, p.OW, p.scale_w, &w0, &w1, &aw);
        float c00 = FMUL(FSUB(1.0f, ah), FSUB(1.0f, aw)), c01 = FMUL(FSUB(1.0f, ah), aw),
              c10 = FMUL(ah, FSUB(1.0f, aw)), c11 = FMUL(ah, aw);
        const float *xs = x + nc * in_plane;
        float v = FMUL(c00, xs[(i64)h0 * p.W + w0]);
        v = FADD(v, FMUL(c01, xs[(i64)h0 * p.W + w1]));
        v = FADD(v, FMUL(c10, xs[(i64)h1 * p.W + w0]));
        y[e] = FADD(v, FMUL(c11, xs[(i64)h1 * p.W + w1]));
    }
}

/* The gradient: one thread per input row (nc, ih) zeroes it and adds every
 * output's share in the CPU's order (outputs in order, taps 00 01 10 11). */
extern "C" __global__ void mprt_k_resize_grad(Resize p, float *dx, const float *dy)
{
    i64 in_plane = (i64)p.H * p.W, out_plane = (i64)p.OH * p.OW;
    FOR_EACH(e, p.NC * p.H) {
        i64 nc = e / p.H;
        int ih = (int)(e - nc * p.H);
        float *row = dx + nc * in_plane + (i64)ih * p.W;
        for (int iw = 0; iw < p.W; iw++)
            row[iw] = 0.0f;
        for (int oh = 0; oh < p.OH; oh++) {
            int h0, h1, w0, w1;
            float ah, aw;
            resize_taps(p, oh, p.H, p.OH, p.scale_h, &h0, &h1, &ah);
            if (h0 != ih && h1 != ih)
                continue;
            for (int ow = 0; ow < p.OW; ow++) {
                resize_taps(p, ow, p.W, p.OW, p.scale_w, &w0, &w1, &aw);
                float c00 = FMUL(FSUB(1.0f, ah), FSUB(1.0f, aw)), c01 = FMUL(FSUB(1.0f, ah), aw),
                      c10 = FMUL(ah, FSUB(1.0f, aw)), c11 = FMUL(ah, aw);
                float g = dy[nc * out_plane + (i64)oh * p.OW + ow];
                if (h0 == ih) {
                    row[w0] = FADD(row[w0], FMUL(c00, g));
                    row[w1] = FADD(row[w1], FMUL(c01, g));
                }
                if (h1 == ih) {
                    row[w0] = FADD(row[w0], FMUL(c10, g));
                    row[w1] = FADD(row[w1], FMUL(c11, g));
                }
            }
        }
    }
}
