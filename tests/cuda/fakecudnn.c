/* fakecudnn.c — the cuDNN calls of runtime/cuda_ops.c for the fake GPUs
 * (tests/cuda/fakegpu.c), so that whole CUDA trainers with convolutions
 * and batch norm run on the host.
 *
 * The descriptors are read as cuDNN documents them (packed NCHW or NCDHW
 * tensors, KCRS or KCTRS filters with C the channels of one group,
 * symmetric pads, strides, dilations, the group count), turned back into
 * the runtime's MprtConv (a 2-D one with depth 1),
 * and the work runs as an operation of the handle's stream: the CPU
 * trainer's own kernels (runtime/cpu.c), with the workspace the caller
 * passed as their im2col buffer. So a trainer on these GPUs gives the CPU
 * trainer's bits exactly when every descriptor, pointer, scale and
 * workspace that cuda_ops.c hands cuDNN says what the CPU kernel was given:
 * what this checks is that wiring, not cuDNN's arithmetic.
 *
 * - Convolution: the forward's one algorithm, deterministic; the data and
 *   weight gradients' two, ranked as cuDNN often does: a nondeterministic
 *   algorithm 0 first, then the deterministic algorithm 1. Both compute
 *   the same here, so a call that runs algorithm 0 is an error unless
 *   FAKECUDNN_ALGOS=first, where any other is (what a trainer with
 *   MPRT_CU_DETERMINISTIC=0 must pick). Each algorithm's
 *   workspace is the im2col buffer (C/group x KD x KH x KW x OD x OH x OW
 *   floats, or
 *   the batch's, runtime/kernel.h's mprt_conv_batched; plus
 *   FAKECUDNN_EXTRA_BYTES); a smaller workspace, a NULL one, alpha != 1 or beta != 0, or a filter
 *   that does not match the tensors is an error. Each call fills the whole
 *   workspace it asked for with NaNs before it computes, as cuDNN may use
 *   every byte of it: an operand the trainer left in that area is lost.
 * - Batch norm (spatial): the running statistics move as cuDNN says,
 *   running = factor * batch + (1 - factor) * running, which is the CPU's
 *   momentum = 1 - factor; alpha and beta must be 1 and 0.
 */
#include "mprt.h"
#include "state.c"
#include "kernel.h"
#include "pool.c"
#include "cpu.c"

#include <cuda_runtime.h>
#include <cudnn.h>

void fakegpu_enqueue_host(cudaStream_t s, void (*fn)(void *), void *arg);

struct cudnnContext {
    cudaStream_t stream;
};

/* 4-D descriptors have d = 1; half: bf16 elements (else float32) */
struct cudnnTensorStruct {
    int nb, n, c, d, h, w, set, half;
};

struct cudnnFilterStruct {
    int nb, k, c, d, h, w, set, half;
};

struct cudnnConvolutionStruct {
    int spatial, pd, ph, pw, sd, sh, sw, dd, dh, dw, group, set;
};

enum { CONV_FWD, CONV_DATA, CONV_FILTER, BN_FWD, BN_BWD };

/* One queued call: what runs when the stream reaches it. */
typedef struct {
    int kind, half;   /* half: a convolution on bf16 tensors */
    MprtConv p;
    const float *a, *b, *scale, *bias;
    float *out, *col, *d1, *d2;
    size_t col_bytes;   /* the workspace the algorithm asked for */
    float momentum, eps;
    int N, C;
    long P;
} Call;

static cudnnStatus_t bad(const char *why)
{
    fprintf(stderr, "fakecudnn: %s\n", why);
    return CUDNN_STATUS_BAD_PARAM;
}

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    return s == CUDNN_STATUS_SUCCESS ? "success" : "rejected by the fake cuDNN (see above)";
}

static cudnnStatus_t made(const void *p)
{
    return p ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}

/* A 4-d or 5-d float32 or bf16 NCHW shape (a tensor's, or a filter's as
 * KCRS), as (nb, n, c, d, h, w) with d = 1 for 4 dims. */
static cudnnStatus_t shape_nd(cudnnTensorFormat_t format, cudnnDataType_t type, int nb,
                              const int *dims, int out[6], const char *what)
{
    if (format != CUDNN_TENSOR_NCHW || (type != CUDNN_DATA_FLOAT && type != CUDNN_DATA_BFLOAT16) ||
        (nb != 4 && nb != 5))
        return bad(what);
    for (int i = 0; i < nb; i++)
        if (dims[i] < 1)
            return bad(what);
    out[0] = nb, out[1] = dims[0], out[2] = dims[1];
    out[3] = nb == 5 ? dims[2] : 1;
    out[4] = dims[nb - 2], out[5] = dims[nb - 1];
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    return made(*h = calloc(1, sizeof **h));
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
    return made(*d = calloc(1, sizeof **d));
}

cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t d,
                                           cudnnTensorFormat_t format, cudnnDataType_t type,
                                           int nb, const int *dims)
{
    int v[6];
    cudnnStatus_t s = shape_nd(format, type, nb, dims, v,
                               "a tensor that is not float32 or bf16 NCHW");
    if (s == CUDNN_STATUS_SUCCESS)
        *d = (struct cudnnTensorStruct){v[0], v[1], v[2], v[3], v[4], v[5], 1,
                                        type == CUDNN_DATA_BFLOAT16};
    return s;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
    return made(*d = calloc(1, sizeof **d));
}

cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int nb, const int *dims)
{
    int v[6];
    cudnnStatus_t s = shape_nd(format, type, nb, dims, v,
                               "a filter that is not float32 or bf16 KCRS");
    if (s == CUDNN_STATUS_SUCCESS)
        *d = (struct cudnnFilterStruct){v[0], v[1], v[2], v[3], v[4], v[5], 1,
                                        type == CUDNN_DATA_BFLOAT16};
    return s;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
    if (!(*d = calloc(1, sizeof **d)))
        return CUDNN_STATUS_ALLOC_FAILED;
    (*d)->group = 1;
    return CUDNN_STATUS_SUCCESS;
}

/* 2 or 3 spatial dims; a 2-D one has depth pad 0, stride and dilation 1. */
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int n,
                                              const int *pad, const int *stride,
                                              const int *dil, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t type)
{
    if (mode != CUDNN_CROSS_CORRELATION || type != CUDNN_DATA_FLOAT || (n != 2 && n != 3))
        return bad("a convolution descriptor other than a float 2-D or 3-D cross-correlation");
    int p[3] = {0, 0, 0}, s[3] = {1, 1, 1}, l[3] = {1, 1, 1}, o = 3 - n;
    for (int i = 0; i < n; i++) {
        if (pad[i] < 0 || stride[i] < 1 || dil[i] < 1)
            return bad("a convolution descriptor with a negative pad, or a stride or "
                       "dilation below 1");
        p[o + i] = pad[i], s[o + i] = stride[i], l[o + i] = dil[i];
    }
    int group = d->group;
    *d = (struct cudnnConvolutionStruct){n, p[0], p[1], p[2], s[0], s[1], s[2],
                                         l[0], l[1], l[2], group, 1};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int group)
{
    if (group < 1)
        return bad("a group count below 1");
    d->group = group;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math)
{
    (void)d;
    return math == CUDNN_DEFAULT_MATH || math == CUDNN_FMA_MATH || math == CUDNN_TENSOR_OP_MATH
               ? CUDNN_STATUS_SUCCESS
               : bad("an unexpected math type");
}

static int out_dim(int in, int pad, int k, int dil, int stride)
{
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t c,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int nb,
                                                    int *dims)
{
    if (!c->set || !x->set || !w->set)
        return bad("an output size asked of descriptors never set");
    if (nb != x->nb || nb != w->nb || nb != c->spatial + 2)
        return bad("an output size of descriptors with different ranks");
    int out[3] = {out_dim(x->d, c->pd, w->d, c->dd, c->sd),
                  out_dim(x->h, c->ph, w->h, c->dh, c->sh),
                  out_dim(x->w, c->pw, w->w, c->dw, c->sw)};
    dims[0] = x->n, dims[1] = w->k;
    for (int i = 2; i < nb; i++)
        dims[i] = out[i - nb + 3];
    return CUDNN_STATUS_SUCCESS;
}

/* The runtime's description of the convolution the descriptors give, or
 * an error if they do not agree with each other. */
static cudnnStatus_t conv_of(const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                             const cudnnConvolutionDescriptor_t c,
                             const cudnnTensorDescriptor_t y, MprtConv *p)
{
    if (!x->set || !w->set || !c->set || !y->set)
        return bad("a convolution with a descriptor never set");
    if (x->nb != c->spatial + 2 || w->nb != x->nb || y->nb != x->nb)
        return bad("a convolution whose descriptors have different ranks");
    if (x->c != w->c * c->group || w->k % c->group || y->c != w->k || y->n != x->n)
        return bad("the filter's channels do not match the tensors' and the group count");
    if (x->half != w->half || y->half != x->half)
        return bad("a convolution on tensors of different types");
    if (y->d != out_dim(x->d, c->pd, w->d, c->dd, c->sd) ||
        y->h != out_dim(x->h, c->ph, w->h, c->dh, c->sh) ||
        y->w != out_dim(x->w, c->pw, w->w, c->dw, c->sw))
        return bad("the output tensor is not the size the convolution gives");
    *p = (MprtConv){.N = x->n, .C = x->c, .D = x->d, .H = x->h, .W = x->w, .M = w->k,
                    .KD = w->d, .KH = w->h, .KW = w->w, .OD = y->d, .OH = y->h, .OW = y->w,
                    .group = c->group, .sd = c->sd, .sh = c->sh, .sw = c->sw, .dd = c->dd,
                    .dh = c->dh, .dw = c->dw, .pd = c->pd, .ph = c->ph, .pw = c->pw};
    return CUDNN_STATUS_SUCCESS;
}

/* The CPU kernels' scratch: one image's patches, or with small output
 * planes every image's side by side and a group's planes after them
 * (mprt_conv_batched). */
static size_t col_bytes(const MprtConv *p)
{
    size_t k = (size_t)(p->C / p->group) * mprt_conv_taps(p), plane = mprt_conv_out_plane(p);
    if (!mprt_conv_batched(p))
        return k * plane * sizeof(float);
    return (k + (size_t)(p->M / p->group)) * p->N * plane * sizeof(float);
}

/* FAKECUDNN_EXTRA_BYTES=N: every algorithm asks for N bytes beyond the
 * im2col buffer, more than the memory plan's scratch holds, as cuDNN's
 * fast algorithms do: the trainer must then give its own workspace. */
static size_t extra_bytes(void)
{
    const char *e = getenv("FAKECUDNN_EXTRA_BYTES");
    return e && *e ? (size_t)strtoull(e, NULL, 10) : 0;
}

/* The workspace an algorithm asks for. */
static cudnnStatus_t workspace(const cudnnTensorDescriptor_t x,
                               const cudnnFilterDescriptor_t w,
                               const cudnnConvolutionDescriptor_t c,
                               const cudnnTensorDescriptor_t y, size_t *bytes)
{
    MprtConv p;
    cudnnStatus_t s = conv_of(x, w, c, y, &p);
    if (s == CUDNN_STATUS_SUCCESS)
        *bytes = col_bytes(&p) + extra_bytes();
    return s;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h,
                                                      const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t c,
                                                      const cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *n)
{
    (void)h, (void)algo;
    return workspace(x, w, c, y, n);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h,
                                                           const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t c,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo,
                                                           size_t *n)
{
    (void)h, (void)algo;
    return workspace(dx, w, c, dy, n);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *n)
{
    (void)h, (void)algo;
    return workspace(x, dw, c, dy, n);
}

/* The candidates, as cuDNN's heuristics would rank them: FMA math, the
 * im2col buffer as workspace; the forward's algorithm 0, deterministic,
 * and a gradient's nondeterministic algorithm 0 before its deterministic 1
 * (backward). The three directions' result structs have one layout, so
 * forward ones are filled and copied. */
static cudnnStatus_t ranked_algos(const cudnnTensorDescriptor_t x,
                                  const cudnnFilterDescriptor_t w,
                                  const cudnnConvolutionDescriptor_t c,
                                  const cudnnTensorDescriptor_t y, int backward, int count,
                                  int *got, void *perf)
{
    _Static_assert(sizeof(cudnnConvolutionFwdAlgoPerf_t) ==
                           sizeof(cudnnConvolutionBwdDataAlgoPerf_t) &&
                       sizeof(cudnnConvolutionFwdAlgoPerf_t) ==
                           sizeof(cudnnConvolutionBwdFilterAlgoPerf_t),
                   "cuDNN's algorithm results share a layout");
    cudnnConvolutionFwdAlgoPerf_t one;
    memset(&one, 0, sizeof one);
    cudnnStatus_t s = workspace(x, w, c, y, &one.memory);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if (count < 1 + backward)
        return bad("no room for the algorithms");
    one.status = CUDNN_STATUS_SUCCESS;
    one.mathType = CUDNN_FMA_MATH;
    cudnnConvolutionFwdAlgoPerf_t *out = perf;
    for (int i = 0; i <= backward; i++) {
        one.algo = (cudnnConvolutionFwdAlgo_t)i;
        one.determinism = backward && i == 0 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
        memcpy(out + i, &one, sizeof one);
    }
    *got = 1 + backward;
    return CUDNN_STATUS_SUCCESS;
}

/* FAKECUDNN_ALGOS=first: a gradient must run the first-ranked algorithm,
 * nondeterministic; otherwise the deterministic one. */
static cudnnStatus_t check_algo(int algo)
{
    const char *e = getenv("FAKECUDNN_ALGOS");
    int first = e && strcmp(e, "first") == 0;
    if (first && algo != 0)
        return bad("a gradient convolution with the deterministic algorithm 1 where "
                   "FAKECUDNN_ALGOS=first wants the first-ranked, 0");
    if (!first && algo != 1)
        return bad("a gradient convolution with an algorithm other than the deterministic 1: "
                   "the trainer promised the same bits every run");
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h,
                                                     const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t c,
                                                     const cudnnTensorDescriptor_t y,
                                                     const int count, int *got,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf)
{
    (void)h;
    return ranked_algos(x, w, c, y, 0, count, got, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, const int count,
    int *got, cudnnConvolutionBwdDataAlgoPerf_t *perf)
{
    (void)h;
    return ranked_algos(dx, w, c, dy, 1, count, got, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, const int count,
    int *got, cudnnConvolutionBwdFilterAlgoPerf_t *perf)
{
    (void)h;
    return ranked_algos(x, dw, c, dy, 1, count, got, perf);
}

/* n bf16 values at p as float32, in a new array. */
static float *widened(const void *p, long n)
{
    float *w = malloc((size_t)n * sizeof *w);
    if (!w) {
        fprintf(stderr, "fakecudnn: out of memory\n");
        exit(1);
    }
    mprt_bf16_widen(n, p, w);
    return w;
}

/* A convolution on bf16 tensors, as cuDNN's with float32 compute: the
 * CPU's float32 convolution of the widened values, the result rounded
 * once (the CPU trainer's conversions around the same kernel). */
static void run_half(Call *k)
{
    const MprtConv *p = &k->p;
    long x = (long)p->N * p->C * mprt_conv_in_plane(p), y = (long)p->N * p->M * mprt_conv_out_plane(p);
    long w = (long)p->M * (p->C / p->group) * mprt_conv_taps(p);
    /* a: x, dy, dy; b: w, w, x; out: y, dx, dw */
    long na = k->kind == CONV_FWD ? x : y, nb = k->kind == CONV_FILTER ? x : w;
    long nout = k->kind == CONV_FWD ? y : k->kind == CONV_DATA ? x : w;
    float *a = widened(k->a, na), *b = widened(k->b, nb), *out = malloc((size_t)nout * sizeof *out);
    if (k->kind == CONV_FWD)
        mprt_conv(p, a, b, NULL, out, k->col);
    else if (k->kind == CONV_DATA)
        mprt_conv_grad_x(p, a, b, out, k->col);
    else
        mprt_conv_grad_w(p, a, b, out, k->col);
    mprt_bf16_narrow(nout, out, (uint16_t *)(void *)k->out);
    free(a), free(b), free(out);
}

/* A batch norm on bf16 x and y (dy, dx), as cuDNN's: the CPU's float32
 * batch norm of the widened values, the result rounded once. */
static void run_half_bn(Call *k)
{
    long n = (long)k->N * k->C * k->P;
    float *a = widened(k->a, n), *out = malloc((size_t)n * sizeof *out);
    float *b = k->kind == BN_BWD ? widened(k->b, n) : NULL;
    if (k->kind == BN_FWD)
        mprt_bn_train(k->N, k->C, k->P, a, k->scale, k->bias, k->d1, k->d2, k->momentum, k->eps,
                      0, NULL, out);
    else
        mprt_bn_grad(k->N, k->C, k->P, a, NULL, b, k->scale, k->eps, out, k->d1, k->d2);
    mprt_bf16_narrow(n, out, (uint16_t *)(void *)k->out);
    free(a), free(b), free(out);
}

static void run_call(void *arg)
{
    Call *k = arg;
    if (k->kind <= CONV_FILTER)
        memset(k->col, 0xff, k->col_bytes);   /* NaNs where an operand must not be */
    if (k->half && (k->kind == BN_FWD || k->kind == BN_BWD)) {
        run_half_bn(k);
        return;
    }
    if (k->half) {
        run_half(k);
        return;
    }
    switch (k->kind) {
    case CONV_FWD: mprt_conv(&k->p, k->a, k->b, NULL, k->out, k->col); break;
    case CONV_DATA: mprt_conv_grad_x(&k->p, k->a, k->b, k->out, k->col); break;
    case CONV_FILTER: mprt_conv_grad_w(&k->p, k->a, k->b, k->out, k->col); break;
    case BN_FWD:
        mprt_bn_train(k->N, k->C, k->P, k->a, k->scale, k->bias, k->d1, k->d2, k->momentum,
                      k->eps, 0, NULL, k->out);
        break;
    case BN_BWD:
        mprt_bn_grad(k->N, k->C, k->P, k->a, NULL, k->b, k->scale, k->eps, k->out, k->d1,
                     k->d2);
        break;
    }
}

static cudnnStatus_t enqueue(cudnnHandle_t h, const Call *c)
{
    Call *k = malloc(sizeof *k);
    if (!k)
        return CUDNN_STATUS_ALLOC_FAILED;
    *k = *c;
    fakegpu_enqueue_host(h->stream, run_call, k);
    return CUDNN_STATUS_SUCCESS;
}

static int is(const void *p, float v)
{
    return p && *(const float *)p == v;
}

/* A convolution call: the descriptors, the scales and the workspace. */
static cudnnStatus_t conv_call(cudnnHandle_t h, int kind, const void *alpha, const void *beta,
                               const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                               const cudnnConvolutionDescriptor_t c,
                               const cudnnTensorDescriptor_t y, void *ws, size_t ws_bytes,
                               const void *a, const void *b, void *out)
{
    Call k = {.kind = kind, .half = x->half, .a = a, .b = b, .out = out, .col = ws};
    cudnnStatus_t s = conv_of(x, w, c, y, &k.p);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if (!is(alpha, 1.0f) || !is(beta, 0.0f))
        return bad("a convolution with alpha != 1 or beta != 0");
    k.col_bytes = col_bytes(&k.p) + extra_bytes();
    if (!ws || ws_bytes < k.col_bytes)
        return bad("a convolution with less workspace than its algorithm asked for");
    return enqueue(h, &k);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                      const cudnnTensorDescriptor_t xd, const void *x,
                                      const cudnnFilterDescriptor_t wd, const void *w,
                                      const cudnnConvolutionDescriptor_t c,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                      const void *beta, const cudnnTensorDescriptor_t yd,
                                      void *y)
{
    (void)algo;
    return conv_call(h, CONV_FWD, alpha, beta, xd, wd, c, yd, ws, ws_bytes, x, w, y);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha,
                                           const cudnnFilterDescriptor_t wd, const void *w,
                                           const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const cudnnConvolutionDescriptor_t c,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws,
                                           size_t ws_bytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx)
{
    cudnnStatus_t s = check_algo(algo);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    return conv_call(h, CONV_DATA, alpha, beta, dxd, wd, c, dyd, ws, ws_bytes, dy, w, dx);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha,
                                             const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnTensorDescriptor_t dyd, const void *dy,
                                             const cudnnConvolutionDescriptor_t c,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                             size_t ws_bytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwd, void *dw)
{
    cudnnStatus_t s = check_algo(algo);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    return conv_call(h, CONV_FILTER, alpha, beta, xd, dwd, c, dyd, ws, ws_bytes, dy, x, dw);
}

/* Spatial batch norm's descriptors: x N x C x H x W, the statistics 1 x C x 1 x 1
 * (4-D ones). */
static cudnnStatus_t bn_shape(cudnnBatchNormMode_t mode, const cudnnTensorDescriptor_t x,
                              const cudnnTensorDescriptor_t other,
                              const cudnnTensorDescriptor_t stats, Call *k)
{
    if (mode != CUDNN_BATCHNORM_SPATIAL)
        return bad("a batch norm other than spatial");
    if (!x->set || !other->set || !stats->set)
        return bad("a batch norm with a descriptor never set");
    if (x->nb != 4 || other->nb != 4 || stats->nb != 4)
        return bad("a batch norm of descriptors that are not 4-D");
    if (other->half != x->half || stats->half)
        return bad("a batch norm whose x and y differ in type, or with bf16 statistics");
    k->half = x->half;
    if (other->n != x->n || other->c != x->c || other->h != x->h || other->w != x->w ||
        stats->n != 1 || stats->c != x->c || stats->h != 1 || stats->w != 1)
        return bad("batch norm descriptors that do not agree (x, y, 1 x C x 1 x 1)");
    k->N = x->n, k->C = x->c, k->P = (long)x->h * x->w;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
    const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t yd, void *y,
    const cudnnTensorDescriptor_t sd, const void *scale, const void *bias, double factor,
    void *running_mean, void *running_var, double eps, void *save_mean, void *save_inv_var)
{
    Call k = {.kind = BN_FWD, .a = x, .scale = scale, .bias = bias, .out = y,
              .d1 = running_mean, .d2 = running_var, .momentum = (float)(1.0 - factor),
              .eps = (float)eps};
    cudnnStatus_t s = bn_shape(mode, xd, yd, sd, &k);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if (!is(alpha, 1.0f) || !is(beta, 0.0f))
        return bad("a batch norm with alpha != 1 or beta != 0");
    if (!running_mean != !running_var || save_mean || save_inv_var)
        return bad("a batch norm with one running statistic, or saved ones");
    return enqueue(h, &k);
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha_data, const void *beta_data,
    const void *alpha_param, const void *beta_param, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnTensorDescriptor_t dxd, void *dx, const cudnnTensorDescriptor_t sd,
    const void *scale, void *dscale, void *dbias, double eps, const void *saved_mean,
    const void *saved_inv_var)
{
    Call k = {.kind = BN_BWD, .a = dy, .b = x, .scale = scale, .out = dx, .d1 = dscale,
              .d2 = dbias, .eps = (float)eps};
    cudnnStatus_t s = bn_shape(mode, xd, dyd, sd, &k);
    if (s == CUDNN_STATUS_SUCCESS)
        s = bn_shape(mode, xd, dxd, sd, &k);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if (!is(alpha_data, 1.0f) || !is(beta_data, 0.0f) || !is(alpha_param, 1.0f) ||
        !is(beta_param, 0.0f))
        return bad("a batch norm gradient with alphas != 1 or betas != 0");
    if (saved_mean || saved_inv_var)
        return bad("a batch norm gradient with saved statistics");
    return enqueue(h, &k);
}
