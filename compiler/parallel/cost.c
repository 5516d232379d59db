/* cost.c — what one node costs on a device: the cost model behind every
 * prediction (the links between devices are device.c's).
 *
 * Each node is priced by its kind of work (ops.def: OPF_GEMM, OPF_CONV,
 * OPF_NORM, elementwise otherwise) with the device's rates for that kind:
 *
 *   GPU devices: a roofline, max(FLOPs / rate, bytes / bandwidth) + the
 *   launch overhead, where the rate is matrix_flops for matrix products and
 *   convolutions (cuBLAS, cuDNN) and flops for the rest. Under bf16 the
 *   matrix products run at the bf16 rate and the convolutions at TF32's
 *   (runtime/cuda_ops.c: cuDNN's float32 convolutions of bf16 values).
 *
 *   CPU devices (profile.per_call): the work as the CPU trainer does it.
 *   A matrix product is the BLAS calls runtime/cpu_math.c makes, each
 *   max(2mnk / matrix_flops, its operands' bytes / bandwidth) plus a call's
 *   overhead: a skinny call that re-reads its weights is memory-bound. A
 *   convolution is runtime/cpu.c's im2col (or col2im) and one GEMM per
 *   image and group, the patch matrix moved at copy_bandwidth. Passes over
 *   data (normalisation, softmax, pooling, reductions) go at norm_bandwidth,
 *   elementwise work at bandwidth. The rates come from a short calibration
 *   of this machine (calibrate.c).
 *
 * A node inside a fused chain (fuse.c) writes nothing and the next node
 * does not read its value: fused_saving says what that takes off.
 * --measured replaces the estimate with the time a trainer recorded.
 */
#include "mpcc.h"
#include "kernel.h"

#include <math.h>

WorkKind work_kind(const Node *n)
{
    unsigned f = op_info[n->op].flags;
    return f & OPF_GEMM ? WORK_GEMM : f & OPF_CONV ? WORK_CONV : f & OPF_NORM ? WORK_NORM
           : f & OPF_WINDOW ? WORK_WINDOW : WORK_ELEMENTWISE;
}

static double numel_of(const Graph *g, uint32_t v)
{
    return v == NONE ? 0 : (double)shape_numel(&g->values[v].shape);
}

/* a per b: 0 where b is 0 (a tensor with an empty dimension: no work). */
static double per(double a, double b)
{
    return b > 0 ? a / b : 0;
}

static double bytes_of(const Graph *g, uint32_t v)
{
    return v == NONE ? 0 : numel_of(g, v) * (double)dtype_size(g->values[v].dtype);
}

/* A matrix product as codegen.c's emit_matmul hands it to mprt_bmm: batch
 * matrices of M x K times K x N (the batch the operands' leading dimensions
 * broadcast to), and which operands carry the batch. */
typedef struct MatDims {
    double batch, M, N, K;
    bool a_batched, b_batched, y_batched;
} MatDims;

static MatDims mat_dims(const Graph *g, const Node *n)
{
    MatView va = matmul_view(g, n, 0), vb = matmul_view(g, n, 1);
    const Shape *a = &va.shape, *b = &vb.shape;
    GemmParams gp = gemm_params(n);
    bool ta = gp.trans_a, tb = gp.trans_b;
    MatDims d = {.batch = 1};
    d.M = a->rank >= 2 ? (double)a->d[a->rank - (ta ? 1 : 2)] : 1;
    d.K = (double)a->d[a->rank - (ta && a->rank >= 2 ? 2 : 1)];
    d.N = b->rank >= 2 ? (double)b->d[b->rank - (tb ? 2 : 1)] : 1;
    if (n->op == OP_GEMM)
        return d;
    int ma = a->rank >= 2 ? 2 : 1, mb = b->rank >= 2 ? 2 : 1;
    double ab = 1, bb = 1;
    for (int i = 0; i < a->rank - ma; i++)
        ab *= (double)a->d[i];
    for (int i = 0; i < b->rank - mb; i++)
        bb *= (double)b->d[i];
    d.batch = ab > bb ? ab : bb;
    d.a_batched = ab > 1, d.b_batched = bb > 1;
    d.y_batched = numel_of(g, n->out[0]) > d.M * d.N;
    return d;
}

/* Multiply-adds per output element of the matrix products and convolutions. */
static double contraction(const Graph *g, const Node *n)
{
    switch (n->op) {
    case OP_GEMM: case OP_MATMUL: case OP_BATCH_MATMUL: {
        MatDims d = mat_dims(g, n);   /* over the output: a batch it sums adds to K */
        return per(d.batch * d.M * d.N * d.K, numel_of(g, n->out[0]));
    }
    case OP_CONV: case OP_CONV_GRAD_X: case OP_CONV_TRANSPOSE: {
        /* ConvTranspose: each input element is an output of the convolution it inverts */
        const Shape *w = &g->values[n->in[1]].shape;
        return per(numel_of(g, n->in[1]), (double)w->d[0]);
    }
    case OP_CONV_GRAD_W: {
        const Shape *w = &g->values[n->out[0]].shape;
        return per(numel_of(g, n->out[0]), (double)w->d[0]);
    }
    default:
        return 0;
    }
}

/* The share of n's first input that its kernel on profile p neither reads
 * nor computes on: the scores a SoftmaxBias's constant masks
 * (graph/simplify.c), on every device; the dy of its gradient where y is
 * 0, on a GPU only (runtime/kernels.cu; the CPU's kernel reads each row
 * whole, runtime/cpu_math.c). */
static double masked_share(const Node *n, const Profile *p)
{
    bool skips = n->op == OP_SOFTMAX_BIAS || (n->op == OP_SOFTMAX_GRAD && !p->per_call);
    return skips ? attr_float(n, "mpcc_masked", 0) : 0;
}

NodeCost node_cost(const Graph *g, const Node *n, const Profile *p)
{
    NodeCost c = {0, 0};
    for (uint32_t k = 0; k < n->nin; k++)
        c.bytes += bytes_of(g, n->in[k]);
    for (uint32_t k = 0; k < n->nout; k++)
        c.bytes += bytes_of(g, n->out[k]);
    double k = contraction(g, n);
    uint32_t big = n->op == OP_CONV_GRAD_X || n->op == OP_CONV_GRAD_W ||
                   n->op == OP_CONV_TRANSPOSE ? n->in[0] : n->out[0];
    if (k > 0) {
        c.flops = 2.0 * numel_of(g, big) * k;
        return c;
    }
    /* a few FLOPs an element of the larger of the first input and the
     * output (a loss reads many and writes one), some 20 for a
     * transcendental, one an input for a sum of several */
    double elems = n->nout ? numel_of(g, n->out[0]) : 0;
    if (n->nin && numel_of(g, n->in[0]) > elems)
        elems = numel_of(g, n->in[0]);
    double per = op_info[n->op].flags & OPF_HEAVY ? 20 : n->op == OP_SUM ? 4.0 * n->nin : 4;
    c.flops = per * elems;
    double masked = masked_share(n, p);
    c.bytes -= masked * bytes_of(g, n->in[0]);
    c.flops *= 1 - masked;
    return c;
}

/* runtime/kernel.h's rule for one GEMM over every image's patches. */
static bool conv_batched(int64_t images, int64_t plane)
{
    MprtConv c = {.N = (int)images, .OD = 1, .OH = 1, .OW = (int)plane};
    return mprt_conv_batched(&c);
}

/* A convolution's input x, filter w and output y, whichever it computes. */
void conv_operands(const Node *n, uint32_t *x, uint32_t *w, uint32_t *y)
{
    switch (n->op) {
    case OP_CONV: *x = n->in[0], *w = n->in[1], *y = n->out[0]; break;
    case OP_CONV_GRAD_X: *x = n->out[0], *w = n->in[1], *y = n->in[0]; break;
    default: *x = n->in[1], *w = n->out[0], *y = n->in[0]; break;   /* OP_CONV_GRAD_W */
    }
}

/* Whether convolution n runs through oneDNN on a CPU device
 * (runtime/cpu_dnnl.c) rather than as im2col + GEMM (runtime/cpu.c):
 * always with --cpu-kernels=onednn, never with builtin. With auto (when
 * mpcc was built where oneDNN is), oneDNN unless builtin measured faster
 * (tests/bench/bench_conv.c, tests/bench/README.md): the data gradient of
 * a convolution without groups and with fewer than 16 input channels,
 * which oneDNN computed 1.6 to 2.8 times slower (depthwise ones 7 times
 * faster), and the filter gradient over 4 output
 * positions or fewer (2 x 2), 1.3 to 1.8 times slower. ConvTranspose
 * stays builtin. */
bool conv_onednn(const Graph *g, const Node *n)
{
    if (n->op != OP_CONV && n->op != OP_CONV_GRAD_X && n->op != OP_CONV_GRAD_W)
        return false;
    if (g->cpu_kernels != KERNELS_AUTO)
        return g->cpu_kernels == KERNELS_ONEDNN;
#ifndef MPCC_HAVE_DNNL
    return false;
#else
    uint32_t x, w, y;
    conv_operands(n, &x, &w, &y);
    const Shape *ws = &g->values[w].shape, *ys = &g->values[y].shape;
    int64_t plane = 1;
    for (int i = 2; i < ys->rank; i++)
        plane *= ys->d[i];
    if (n->op == OP_CONV_GRAD_X)
        return ws->d[1] >= 16 || conv_group(n) > 1;
    return n->op != OP_CONV_GRAD_W || plane > 4;
#endif
}

/* Whether a CPU device's GEMMs (Gemm, MatMul and their gradients, and the
 * builtin convolutions' im2col products) run through oneDNN's dnnl_sgemm
 * rather than OpenBLAS: its JIT kernels are made for the CPU the trainer
 * runs on, where an OpenBLAS may run generic ones (docs/trainer.md). */
bool kernels_gemm_onednn(int cpu_kernels)
{
    if (cpu_kernels != KERNELS_AUTO)
        return cpu_kernels == KERNELS_ONEDNN;
#ifdef MPCC_HAVE_DNNL
    return true;
#else
    return false;
#endif
}

bool gemm_onednn(const Graph *g)
{
    return kernels_gemm_onednn(g->cpu_kernels);
}

/* Whether max pooling n runs through oneDNN on a CPU device
 * (runtime/cpu_dnnl.c's forward, cpu.c's gradient): where the
 * convolutions may (--cpu-kernels auto with oneDNN, or onednn). Its
 * forward measured 2.7 to 4.5 times cpu.c's (tests/bench/bench_norm.c);
 * its results are cpu.c's. */
bool pool_onednn(const Graph *g, const Node *n)
{
    return n->op == OP_MAX_POOL && gemm_onednn(g);
}

static double round16(int64_t n)
{
    return (double)((n + 15) / 16 * 16);
}

/* What a oneDNN convolution's scratch holds, as the plan estimates it:
 * its operands in oneDNN's blocked layouts (channels in blocks of 16).
 * The trainer sizes it exactly at start-up, from oneDNN, with oneDNN's own
 * scratchpad, and raises the device's scratch if it needs more. */
static double onednn_workspace(const Graph *g, const Node *n)
{
    uint32_t x, w, y;
    conv_operands(n, &x, &w, &y);
    const Shape *xs = &g->values[x].shape, *ws = &g->values[w].shape, *ys = &g->values[y].shape;
    double xp = 1, yp = 1, taps = 1, group = (double)conv_group(n);
    for (int i = 2; i < xs->rank; i++)
        xp *= (double)xs->d[i], yp *= (double)ys->d[i], taps *= (double)ws->d[i];
    double mg = (double)ws->d[0] / group;
    double floats = (double)xs->d[0] * (round16(xs->d[1]) * xp + round16(ys->d[1]) * yp) +
                    group * round16((int64_t)mg) * round16(ws->d[1]) * taps;
    return floats * sizeof(float);
}

/* The scratch memory a node's kernel uses while it runs: the CPU
 * convolutions' patch matrix (one image and group at a time, as
 * runtime/cpu.c computes it) or, for one that runs through oneDNN, the
 * larger of that and oneDNN's (onednn_workspace; CPU devices only); a
 * cross-entropy's log-probabilities. */
static int64_t kernel_workspace(const Graph *g, const Node *n, bool cpu)
{
    uint32_t w, y;
    switch (n->op) {
    case OP_CONV: case OP_CONV_GRAD_X: w = n->in[1], y = n->op == OP_CONV ? n->out[0] : n->in[0]; break;
    case OP_CONV_GRAD_W: w = n->out[0], y = n->in[0]; break;
    case OP_CONV_TRANSPOSE: w = n->in[1], y = n->in[0]; break;   /* a convolution's backward */
    case OP_MAX_POOL:   /* oneDNN's workspace: a tap per output, at most 4 bytes */
        return cpu && pool_onednn(g, n) ? (int64_t)shape_numel(&g->values[n->out[0]].shape) * 4
                                        : 0;
    case OP_SOFTMAX_CE:   /* the log-probabilities, when no output keeps them */
        if (n->nout > 1 && n->out[1] != NONE)
            return 0;
        return (int64_t)shape_numel(&g->values[n->in[0]].shape) * (int64_t)sizeof(float);
    default: return 0;
    }
    const Shape *ws = &g->values[w].shape, *ys = &g->values[y].shape;
    int64_t k = 1, p = 1;   /* patch rows C/group * KD * KH * KW, columns OD * OH * OW */
    for (int i = 1; i < ws->rank; i++)
        k *= ws->d[i];
    for (int i = 2; i < ys->rank; i++)
        p *= ys->d[i];
    /* in double: the product of two tensors' sizes may pass int64 (a model
     * that large is an error in stages.c, which sums these) */
    double bytes = (double)k * (double)p * sizeof(float);
    if (conv_batched(ys->d[0], p)) {
        /* the patches of every image side by side, then a group's output (or
         * dy) planes gathered in the GEMM's order */
        int64_t mg = ws->d[0] / conv_group(n);
        bytes = ((double)k + (double)mg) * (double)ys->d[0] * (double)p * sizeof(float);
    }
    if (cpu && conv_onednn(g, n) && onednn_workspace(g, n) > bytes)
        bytes = onednn_workspace(g, n);
    return bytes < WORKSPACE_MAX ? (int64_t)bytes : (int64_t)WORKSPACE_MAX;
}

/* float32 or bf16: what cuBLAS's bf16 products read and write. */
static bool bf16_or_f32(const Graph *g, uint32_t v)
{
    return v != NONE && (g->values[v].dtype == DT_F32 || g->values[v].dtype == DT_BF16);
}

/* Whether a MatMul's output holds each product of its batch, summed over
 * no broadcast batch dim (a bf16 sum would round each term). */
static bool keeps_batches(const Graph *g, const Node *n)
{
    MatView va = matmul_view(g, n, 0), vb = matmul_view(g, n, 1), vy = matmul_view(g, n, 2);
    const Shape *a = &va.shape, *b = &vb.shape, *y = &vy.shape;
    int ma = a->rank >= 2 ? 2 : 1, mb = b->rank >= 2 ? 2 : 1;
    int my = n->op == OP_BATCH_MATMUL ? 2 : (a->rank >= 2) + (b->rank >= 2);
    for (int i = 1; i <= a->rank - ma || i <= b->rank - mb; i++) {
        int ja = a->rank - ma - i, jb = b->rank - mb - i, jy = y->rank - my - i;
        int64_t da = ja >= 0 ? a->d[ja] : 1, db = jb >= 0 ? b->d[jb] : 1;
        int64_t d = da > db ? da : db;
        if (d > 1 && (jy < 0 || y->d[jy] != d))
            return false;
    }
    return true;
}

/* Whether a MatMul sums its batch in one GEMM: A transposed, both
 * operands holding every batch dim, the output none, so that K runs over
 * the batch too (runtime/cuda_ops.c's mprt_cu_batched, as the CPU's
 * mprt_bmm): a weight's gradient, summed over the batch and rounded once. */
static bool sums_in_one_gemm(const Graph *g, const Node *n)
{
    MatView va = matmul_view(g, n, 0), vb = matmul_view(g, n, 1);
    const Shape *a = &va.shape, *b = &vb.shape;
    GemmParams gp = gemm_params(n);
    if (!gp.trans_a || gp.trans_b || a->rank < 3 || a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank - 2; i++)
        if (a->d[i] != b->d[i])
            return false;
    return !mat_dims(g, n).y_batched;
}

/* A GPU's convolution, or its data gradient, into a bf16 value, or its
 * filter gradient: cuDNN on bf16 tensors (runtime/cuda_ops.c's
 * mprt_cu_conv_bf16, mprt_cu_conv_grad_x_bf16, mprt_cu_conv_grad_w_bf16).
 * A bias is added after (mprt_cu_bias_add_bf16); a float32 filter gradient
 * is written as bf16 and widened (precision.c's rounded_output). */
static bool bf16_conv(const Graph *g, const Node *n)
{
    if (n->op != OP_CONV && n->op != OP_CONV_GRAD_X && n->op != OP_CONV_GRAD_W)
        return false;
    DType out = g->values[n->out[0]].dtype;
    return bf16_or_f32(g, n->in[0]) && bf16_or_f32(g, n->in[1]) &&
           (out == DT_BF16 || (n->op == OP_CONV_GRAD_W && out == DT_F32));
}

/* A GPU's matrix product that runs on bf16 tensors (runtime/cuda_ops.c's
 * mprt_cu_gemm_bf16 and mprt_cu_bmm_bf16), or a convolution (bf16_conv). */
static bool bf16_matrix(const Graph *g, const Node *n)
{
    if (bf16_conv(g, n))
        return true;
    if (n->op != OP_GEMM && n->op != OP_MATMUL && n->op != OP_BATCH_MATMUL)
        return false;
    if (!bf16_or_f32(g, n->in[0]) || !bf16_or_f32(g, n->in[1]) || !bf16_or_f32(g, n->out[0]) ||
        (n->op == OP_GEMM && n->nin > 2 && n->in[2] != NONE && !bf16_or_f32(g, n->in[2])))
        return false;
    return n->op == OP_GEMM || g->values[n->out[0]].dtype == DT_F32 || keeps_batches(g, n) ||
           sums_in_one_gemm(g, n);
}

/* A layout op whose kernel (mprt_strided, mprt_concat) moves elements of
 * any size: Transpose, Slice and its gradient, Concat, Split. Its data
 * operands: the first input, or every input of a Concat. */
static uint32_t moved_inputs(const Node *n)
{
    switch (n->op) {
    case OP_TRANSPOSE: case OP_SLICE: case OP_SLICE_GRAD: case OP_SPLIT: return 1;
    case OP_CONCAT: return n->nin;
    default: return 0;
    }
}

/* A layout op on bf16 values alone: it moves them 2 bytes each. */
static bool moves_bf16(const Graph *g, const Node *n)
{
    uint32_t k = moved_inputs(n);
    for (uint32_t j = 0; j < k; j++)
        if (n->in[j] == NONE || g->values[n->in[j]].dtype != DT_BF16)
            return false;
    for (uint32_t j = 0; j < n->nout; j++)
        if (n->out[j] != NONE && g->values[n->out[j]].dtype != DT_BF16)
            return false;
    return k > 0;
}

static bool all_of(const Graph *g, const uint32_t *v, uint32_t k, DType t)
{
    for (uint32_t j = 0; j < k; j++)
        if (v[j] == NONE || g->values[v[j]].dtype != t)
            return false;
    return true;
}

static bool all_bf16(const Graph *g, const uint32_t *v, uint32_t k)
{
    return all_of(g, v, k, DT_BF16);
}

/* A GPU's row kernel with a bf16 twin (runtime/cuda_ops.c's
 * mprt_cu_softmax_bf16 and the like): Softmax and its gradient on bf16
 * values alone, SoftmaxBias of a bf16 x and its float32 bias; LayerNorm of a bf16 x into a bf16 y, and its gradient of
 * bf16 dy and x into a bf16 dx (the weights, statistics and weight
 * gradients float32 as they always are); SumTo of a bf16 dy into its
 * float32 sum (a bias gradient), and a convolution's bias gradient;
 * BatchNormalization in training and its gradient, on bf16 x and y (dy, x and dx), through cuDNN; the softmax
 * cross-entropy of bf16 scores, and its gradient into bf16 (the loss and
 * the log-probabilities float32); Dropout and its gradient on bf16 values
 * (the mask is bytes); the poolings and their gradients, from bf16 x (dy)
 * into bf16 y (dx), a max pooling's indices int64 as always. */
static bool bf16_rows(const Graph *g, const Node *n)
{
    switch (n->op) {
    case OP_SOFTMAX: case OP_SOFTMAX_GRAD:
        return all_bf16(g, n->in, n->nin) && all_bf16(g, n->out, 1);
    case OP_SOFTMAX_BIAS:   /* the bias a float32 constant */
        return all_bf16(g, n->in, 1) && all_of(g, n->in + 1, 1, DT_F32) && all_bf16(g, n->out, 1);
    case OP_LAYER_NORM:
        return all_bf16(g, n->in, 1) && all_bf16(g, n->out, 1);
    case OP_LN_GRAD:
        return all_bf16(g, n->in, 2) && all_bf16(g, n->out, 1);
    case OP_SUM_TO: case OP_CONV_GRAD_B:
        return all_bf16(g, n->in, 1) && g->values[n->out[0]].dtype == DT_F32;
    case OP_BATCH_NORM:   /* x, and the residual it adds (graph/simplify.c) */
        return all_bf16(g, n->in, 1) && (n->nin < 6 || all_bf16(g, n->in + 5, 1)) &&
               all_bf16(g, n->out, 1);
    case OP_SOFTMAX_CE:
        return all_bf16(g, n->in, 1) && n->nout > 1 && all_of(g, n->out, 2, DT_F32);
    case OP_SCE_GRAD:   /* with lse (graph/loss.c), scores of either type */
        return all_of(g, n->in, 2, DT_F32) && all_bf16(g, n->out, 1) &&
               (n->nin < 4 || g->values[n->in[3]].dtype == DT_F32 ||
                g->values[n->in[3]].dtype == DT_BF16);
    case OP_DROPOUT: case OP_DROPOUT_GRAD:
        return all_bf16(g, n->in, 1) && all_bf16(g, n->out, 1);
    case OP_BN_GRAD:   /* dy, x, and a ReLU's output z */
        return all_bf16(g, n->in, 2) && (n->nin < 4 || all_bf16(g, n->in + 3, 1)) &&
               all_bf16(g, n->out, 1);
    case OP_MAX_POOL: case OP_MAX_POOL_GRAD: case OP_AVERAGE_POOL: case OP_AVG_POOL_GRAD:
    case OP_GLOBAL_AVG_POOL: case OP_GAP_GRAD:
        return all_bf16(g, n->in, 1) && all_bf16(g, n->out, 1);
    default:
        return false;
    }
}

/* How node n's kernel takes its bf16 operands, on a GPU (cuda) or a CPU
 * device: precision.c's Native. */
Native bf16_native(const Graph *g, const Node *n, bool cuda)
{
    if (!g->bf16)
        return NATIVE_NONE;
    if (fuse_alone(g, n))
        return NATIVE_CHAIN;
    if (moves_bf16(g, n))
        return NATIVE_MOVE;
    if (cuda && bf16_rows(g, n))
        return NATIVE_ROWS;
    return cuda && bf16_matrix(g, n) ? NATIVE_MATRIX : NATIVE_NONE;
}

/* Where a node's staged bf16 operands (--precision=bf16, precision.c)
 * start in its scratch. On a CPU device past the kernel's own area,
 * 64-byte aligned. On a GPU first, so that the kernel's own area is all
 * the scratch past them: cuDNN may use every byte from its workspace
 * pointer on (runtime/cuda_ops.c's mprt_cu_conv_area). */
int64_t node_staging_at(const Graph *g, const Node *n, bool cpu)
{
    return cpu ? (kernel_workspace(g, n, cpu) + 63) / 64 * 64 : 0;
}

/* All the scratch a node uses: its kernel's and its staged operands'
 * (each 64-byte aligned, node_staging_at). */
int64_t node_workspace(const Graph *g, const Node *n, bool cpu)
{
    int64_t staging = precision_staging(g, n, bf16_native(g, n, !cpu)).scratch;
    if (!staging)
        return kernel_workspace(g, n, cpu);
    return cpu ? node_staging_at(g, n, cpu) + staging : staging + kernel_workspace(g, n, cpu);
}

/* ---- CPU devices: the work as runtime/ does it ---- */

static const double bw_points[BW_POINTS] = {64 << 10, 512 << 10, 4 << 20, 16 << 20, 64 << 20};

double bw_point_bytes(int i)
{
    return bw_points[i];
}

/* Elementwise work's rate over a working set of `bytes`: the calibrated
 * curve, log-linear between its points, flat past its ends. */
double bandwidth_at(const Profile *p, double bytes)
{
    if (!p->per_call || !(p->bw_at[0] > 0))
        return p->bandwidth;
    if (bytes <= bw_points[0])
        return p->bw_at[0];
    for (int i = 1; i < BW_POINTS; i++)
        if (bytes <= bw_points[i]) {
            double f = log(bytes / bw_points[i - 1]) / log(bw_points[i] / bw_points[i - 1]);
            return p->bw_at[i - 1] * pow(p->bw_at[i] / p->bw_at[i - 1], f);
        }
    return p->bw_at[BW_POINTS - 1];
}

/* One BLAS call: C(m x n) = A(m x k) B(k x n), its arithmetic and its
 * operands' traffic added (calibrate.c fits the two rates together). */
static double gemm_call(const Profile *p, double m, double n, double k)
{
    double flops = 2 * m * n * k, bytes = 4 * (m * k + k * n + m * n);
    return flops / p->matrix_flops + bytes / p->gemm_bw + p->call_overhead;
}

/* Gemm, MatMul and BatchMatMul as runtime/cpu_math.c's mprt_bmm runs them:
 * a right operand shared by the batch folds the batch into the rows, an
 * output shared by it (a weight's gradient) into the inner dimension, else
 * one call per matrix. */
static double cpu_matmul(const Graph *g, const Node *n, const Profile *p)
{
    MatDims d = mat_dims(g, n);
    double t;
    if (d.batch > 1 && d.a_batched && !d.b_batched && d.y_batched &&
        !gemm_params(n).trans_a)
        t = gemm_call(p, d.batch * d.M, d.N, d.K);
    else if (d.batch > 1 && !d.y_batched)
        t = gemm_call(p, d.M, d.N, d.batch * d.K);
    else
        t = d.batch * gemm_call(p, d.M, d.N, d.K);
    if (n->op == OP_GEMM && n->nin > 2 && n->in[2] != NONE) {   /* the bias, copied in first */
        double bytes = 8 * d.M * d.N;
        t += bytes / bandwidth_at(p, bytes);
    }
    return t;
}

typedef struct ConvDims {
    double N, group, mg, K, P;   /* images, groups, outputs per group, patch rows, columns */
    double rows;                 /* memcpy calls of one im2col: K times the output rows */
} ConvDims;

/* w: the convolution's weight, y: its output (mprt_conv's view;
 * ConvTranspose and the gradients are written in its terms). */
static ConvDims conv_dims(const Graph *g, uint32_t w, uint32_t y, double group)
{
    const Shape *ws = &g->values[w].shape, *ys = &g->values[y].shape;
    ConvDims c = {.N = (double)ys->d[0], .group = group > 0 ? group : 1};
    c.mg = (double)ws->d[0] / c.group;
    c.K = per(numel_of(g, w), (double)ws->d[0]);
    c.P = per(numel_of(g, y), (double)ys->d[0] * (double)ys->d[1]);
    c.rows = c.K;   /* the output's rows: every spatial dimension but the last */
    for (int i = 2; i < ys->rank - 1; i++)
        c.rows *= (double)ys->d[i];
    return c;
}

/* im2col or col2im of one image and group: a memcpy (or add) per row of
 * the patch matrix, at most at the rate of memory over the whole patch
 * matrix (`cols` images side by side). */
static double patches(const Profile *p, const ConvDims *c, double cols)
{
    double bytes = 4 * c->K * c->P, rate = bandwidth_at(p, 2 * bytes * cols);
    return c->rows * p->patch_row + bytes / (rate < p->patch_bw ? rate : p->patch_bw);
}

static double cpu_conv(const Graph *g, const Node *n, const Profile *p)
{
    double group = (double)conv_group(n), calls;
    ConvDims c;
    double t;
    switch (n->op) {
    case OP_CONV:   /* im2col, then W (mg x K) . col (K x P) */
        c = conv_dims(g, n->in[1], n->out[0], group);
        t = patches(p, &c, 1) + gemm_call(p, c.mg, c.P, c.K);
        break;
    case OP_CONV_GRAD_W:   /* im2col, then dY (mg x P) . col^T (P x K) */
        c = conv_dims(g, n->out[0], n->in[0], group);
        t = patches(p, &c, 1) + gemm_call(p, c.mg, c.K, c.P);
        break;
    case OP_CONV_GRAD_X:   /* W^T (K x mg) . dY (mg x P), then col2im */
        c = conv_dims(g, n->in[1], n->in[0], group);
        t = gemm_call(p, c.K, c.P, c.mg) + patches(p, &c, 1);
        break;
    default:   /* ConvTranspose: the data gradient of the convolution it inverts */
        c = conv_dims(g, n->in[1], n->in[0], group);
        t = gemm_call(p, c.K, c.P, c.mg) + patches(p, &c, 1);
        break;
    }
    calls = c.N * c.group;
    if (!conv_batched((int64_t)c.N, (int64_t)c.P))
        return calls * t;
    /* one GEMM per group over the batch, and the images gathered or scattered */
    double t_gemm = n->op == OP_CONV ? gemm_call(p, c.mg, c.N * c.P, c.K)
                    : n->op == OP_CONV_GRAD_W ? gemm_call(p, c.mg, c.K, c.N * c.P)
                                              : gemm_call(p, c.K, c.N * c.P, c.mg);
    double moved = 8 * c.mg * c.N * c.P;
    return c.group * (t_gemm + c.N * patches(p, &c, c.N) + moved / p->copy_bw);
}

/* A transpose writes the output in order, reading the input strided: the
 * trailing axes it keeps in place are runs it copies whole (as im2col's
 * rows); when it moves the innermost axis, every element is a gather. */
static double cpu_transpose(const Graph *g, const Node *n, const Profile *p)
{
    int perm[MAX_RANK];
    transpose_perm((Graph *)g, (Node *)n, perm);
    const Shape *y = &g->values[n->out[0]].shape;
    double run = 1, bytes = 2 * bytes_of(g, n->out[0]);
    for (int d = y->rank - 1; d >= 0 && perm[d] == d; d--)
        run *= (double)y->d[d];
    if (run <= 1)
        return bytes / p->transpose_bw;
    return numel_of(g, n->out[0]) / run * p->patch_row + bytes / p->patch_bw;
}

/* Pooling: each output looks at its window (the input's elements per
 * output, the windows' overlap aside: kernel area). */
static double window_elements(const Graph *g, const Node *n)
{
    uint32_t count;
    const int64_t *k = attr_ints(n, "kernel_shape", &count);
    double area = 1;
    for (uint32_t i = 0; k && i < count; i++)
        area *= (double)k[i];
    uint32_t out = n->op == OP_AVG_POOL_GRAD ? n->in[0] : n->out[0];
    return area * numel_of(g, out);
}

/* The rows a normalisation passes over: a batch normalisation's (image,
 * channel) planes, else the rows of the last axis. */
static double norm_rows(const Graph *g, const Node *n)
{
    bool batch_norm = n->op == OP_BATCH_NORM || n->op == OP_BN_GRAD ||
                      n->op == OP_INSTANCE_NORM || n->op == OP_INSTANCE_NORM_GRAD;
    uint32_t x = n->op == OP_BN_GRAD || n->op == OP_INSTANCE_NORM_GRAD ? n->in[1] : n->in[0];
    const Shape *s = &g->values[x].shape;
    if (s->rank < 2)
        return 1;
    if (batch_norm)
        return (double)s->d[0] * (double)s->d[1];
    return per(numel_of(g, x), (double)s->d[s->rank - 1]);
}

static double cpu_time(const Graph *g, const Node *n, const Profile *p)
{
    NodeCost c = node_cost(g, n, p);
    switch (work_kind(n)) {
    case WORK_WINDOW:
        return window_elements(g, n) / p->window_rate + c.bytes / bandwidth_at(p, c.bytes) +
               p->overhead;
    case WORK_GEMM: return cpu_matmul(g, n, p) + p->overhead;
    case WORK_CONV: return cpu_conv(g, n, p) + p->overhead;
    case WORK_NORM:
        return norm_rows(g, n) * p->norm_row +
               fmax(c.flops / p->flops, c.bytes / p->norm_bw) + p->overhead;
    default:
        if (n->op == OP_TRANSPOSE)
            return cpu_transpose(g, n, p) + p->overhead;
        return fmax(c.flops / p->flops, c.bytes / bandwidth_at(p, c.bytes)) + p->overhead;
    }
}

/* Under bf16, the passes around n's kernel (graph/precision.c, codegen.c's
 * stage_operands; none around the chain kernel's ops, bf16_native): each
 * staged operand widened, or rounded, into float32 scratch before the
 * kernel and each bf16 output narrowed after it, a launch and a pass over
 * the operand each (6 bytes an element to widen or narrow, 8 to round);
 * and the kernel moves a widened operand's float32 copy, 2 bytes an
 * element more than the bf16 value it stands for. A GPU's matrix product
 * on bf16 tensors narrows its float32 A and B into bf16 scratch, 6 bytes
 * an element, and reads 2 bytes an element fewer than their float32. */
static double staging_time(const Graph *g, const Node *n, const Profile *p)
{
    Staging s = precision_staging(g, n, bf16_native(g, n, !p->per_call));
    if (!s.operands)
        return 0;
    double bytes = 8 * (s.rounded + s.converted) + 4 * s.narrowed;
    return bytes / (p->per_call ? bandwidth_at(p, bytes) : p->bandwidth) +
           s.operands * p->overhead;
}

/* ---- the exports ---- */

/* The arithmetic rate of n on a GPU: under bf16 a convolution on float32
 * copies runs at the TF32 rate, one on bf16 tensors at the bf16 one. */
static double gpu_rate(const Graph *g, const Node *n, const Profile *p)
{
    if (contraction(g, n) <= 0)
        return p->flops;
    if (g->bf16 && (op_info[n->op].flags & OPF_CONV) && p->tf32_flops > 0 &&
        bf16_native(g, n, true) != NATIVE_MATRIX)
        return fmin(p->matrix_flops, p->tf32_flops);
    return p->matrix_flops;
}

double node_time(const Graph *g, const Node *n, const Profile *p, const Measured *m)
{
    if (eval_only(n))
        return 0;   /* graph/loss.c: no training step runs it */
    if (m) {
        double t = measured_time(m, n->name, n->phase, (double)g->rows);
        if (t >= 0)
            return t;
    }
    if (moves_in_place(g, n))
        return 0;   /* it takes its input's buffer (plan.c; a copy where a value leaves) */
    if (p->per_call)
        return cpu_time(g, n, p) + staging_time(g, n, p);
    NodeCost c = node_cost(g, n, p);
    return fmax(c.flops / gpu_rate(g, n, p), c.bytes / p->bandwidth) + p->overhead +
           staging_time(g, n, p);
}

/* What running n inside a fused chain saves: a node before the chain's
 * last writes no value and launches no kernel of its own, and the node
 * after it reads no value from memory. Measured nodes were measured fused. */
double fused_saving(const Graph *g, const Node *n, const Fusion *fu, const Profile *p,
                    const Measured *m)
{
    uint32_t id = (uint32_t)(n - g->nodes);
    if (!fu || (m && measured_time(m, n->name, n->phase, (double)g->rows) >= 0))
        return 0;
    double bytes = 0, launch = 0;
    if (fu->tail[id] != NONE) {
        bytes += bytes_of(g, n->out[0]);
        launch = p->overhead;
    }
    if (fu->prev[id] != NONE)
        bytes += bytes_of(g, n->in[fu->via[id]]);
    NodeCost c = node_cost(g, n, p);
    double bw = bandwidth_at(p, c.bytes);
    return bytes / (bw > 0 ? bw : 1) + launch;
}
