/* precision.c — --precision=bf16: which of the training graph's values are
 * stored in bfloat16 (docs/precision.md).
 *
 * Every kernel computes in float32; bf16 is how a value is kept between
 * them. A float32 activation becomes DT_BF16 when:
 *   - a matrix product or a convolution computes it (its gradients too),
 *     or a loss as the gradient of its scores, or
 *   - a normalisation computes it as its first output (the normalised
 *     activation or the input's gradient; the statistics stay float32), or
 *   - any other op computes it from at least one bf16 value, or
 *   - it is a weight moved alone (a Transpose or Reshape of a parameter,
 *     as exports put before a MatMul): the bf16 copy a kernel reads.
 * An embedding's rows (a Gather of a parameter) stay float32, as under
 * torch.autocast: rounding them and their gradients moved BERT's third
 * loss 3 times further from float32's, past the bound (docs/precision.md).
 * Kept in float32 whatever their inputs: the losses, LogSoftmax (the
 * log-probabilities a loss reads) and its gradient, the reductions, a
 * parameter's gradient (its sum over the micro-batches is float32 too), and
 * the graph's outputs, which the host reads. A convolution's filter
 * gradient is a bf16 value in float32 all the same: cuDNN writes it from
 * bf16 tensors only as bf16, and torch.autocast's is bf16 too, so every
 * device rounds it once (rounded_output). So too a convolution with a bias
 * into a bf16 value rounds its sum before it adds the bias, and rounds
 * again: cuDNN's bf16 convolutions take no bias, and PyTorch's add it
 * after (codegen.c's bias_after). Parameters, their optimizer
 * state, inputs and constants are not activations and stay as they are.
 * The elementwise ops of the fused chain kernel (parallel/fuse.c) read and
 * write their bf16 operands themselves. Around any other node's kernel the
 * code generator widens each bf16 operand into float32 scratch, and rounds
 * each bf16 result to nearest even. The matrix products and convolutions
 * read every operand as bf16: their float32 ones (the parameters, as the
 * bf16 copies of the weights a GPU reads; an input) rounded to it. On a
 * GPU the matrix products read and write bf16 tensors themselves, their
 * float32 operands narrowed into bf16 copies (NATIVE_MATRIX). */
#include "mpcc.h"

static bool loss_op(Op op)
{
    switch (op) {
    case OP_SOFTMAX_CE: case OP_NLL_LOSS: case OP_MSE_LOSS: case OP_LOG_SOFTMAX:
    case OP_LOG_SOFTMAX_GRAD:
        return true;
    default: return false;
    }
}

/* The gradient a loss gives its scores: the matrix product before it
 * reads it as bf16 in any case. */
static bool loss_grad_op(Op op)
{
    return op == OP_SCE_GRAD || op == OP_NLL_GRAD || op == OP_MSE_GRAD;
}

static bool reduction_op(Op op)
{
    switch (op) {
    case OP_REDUCE_SUM: case OP_REDUCE_MEAN: case OP_REDUCE_MAX: case OP_REDUCE_MIN:
    case OP_SUM_TO: case OP_CONV_GRAD_B: case OP_CUMSUM:
        return true;
    default: return false;
    }
}

static bool norm_op(Op op)
{
    switch (op) {
    case OP_BATCH_NORM: case OP_LAYER_NORM: case OP_INSTANCE_NORM:
    case OP_BN_GRAD: case OP_LN_GRAD: case OP_INSTANCE_NORM_GRAD:
        return true;
    default: return false;
    }
}

static bool layout_op(Op op)
{
    switch (op) {
    case OP_TRANSPOSE: case OP_RESHAPE: case OP_FLATTEN: case OP_SQUEEZE: case OP_UNSQUEEZE:
    case OP_IDENTITY:
        return true;
    default: return false;
    }
}

/* A layout op on a parameter: the first input is one (the others, shapes). */
static bool moves_weight(const Graph *g, const Node *n)
{
    return layout_op(n->op) && n->nin && n->in[0] != NONE &&
           g->values[n->in[0]].kind == VK_PARAM;
}

/* A Reshape (or the like) from bf16 to bf16: its bytes copied as they are. */
static bool copies_bf16(const Graph *g, const Node *n)
{
    switch (n->op) {
    case OP_RESHAPE: case OP_FLATTEN: case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_IDENTITY:
        return n->in[0] != NONE && g->values[n->in[0]].dtype == DT_BF16 &&
               g->values[n->out[0]].dtype == DT_BF16;
    default: return false;
    }
}

static bool reads_bf16(const Graph *g, const Node *n)
{
    for (uint32_t k = 0; k < n->nin; k++)
        if (n->in[k] != NONE && g->values[n->in[k]].dtype == DT_BF16)
            return true;
    return false;
}

/* Whether output k of node n is stored in bf16 (it is a float32 activation). */
static bool stored_bf16(const Graph *g, const Node *n, uint32_t k)
{
    if (loss_op(n->op) || reduction_op(n->op))
        return false;
    if (norm_op(n->op))
        return k == 0;
    if ((op_info[n->op].flags & (OPF_GEMM | OPF_CONV)) || loss_grad_op(n->op))
        return true;
    return reads_bf16(g, n) || moves_weight(g, n);
}

/* The values the host or the optimizer reads as float32. */
static bool *kept_fp32(Graph *g)
{
    bool *keep = arena_array(g->arena, g->nvalues, sizeof(bool));
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->is_output)
            keep[v] = true;
        if (val->kind == VK_PARAM && val->grad != NONE)
            keep[val->grad] = true;
    }
    if (g->loss != NONE)
        keep[g->loss] = true;
    return keep;
}

void lower_precision(Graph *g, const Options *o)
{
    if (o->precision != PREC_BF16)
        return;
    g->bf16 = true;
    bool *keep = kept_fp32(g);
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->phase == PH_UPDATE)
            continue;
        for (uint32_t k = 0; k < n->nout; k++) {
            uint32_t v = n->out[k];
            if (v == NONE || keep[v] || g->values[v].kind != VK_ACTIVATION ||
                g->values[v].dtype != DT_F32)
                continue;
            if (stored_bf16(g, n, k))
                g->values[v].dtype = DT_BF16;
        }
    }
}

/* Input k of a GPU's matrix product on bf16 tensors that the code
 * generator narrows: A or B when float32 (Gemm's C is read as it is). */
static bool narrowed_input(const Graph *g, const Node *n, uint32_t k)
{
    return k < 2 && n->in[k] != NONE && g->values[n->in[k]].dtype == DT_F32;
}

/* Output k of node n (counted after its inputs) when it is a float32
 * filter gradient: rounded to bf16 once, through a float32 copy or, on a
 * GPU's bf16 tensors, a bf16 one. */
static bool rounded_output(const Graph *g, const Node *n, uint32_t k)
{
    return g->bf16 && n->op == OP_CONV_GRAD_W && k == n->nin &&
           g->values[n->out[0]].dtype == DT_F32;
}

/* The operands node n's kernel reads and writes through scratch under
 * bf16, each value once, inputs first (vals and kind hold n->nin +
 * n->nout). With native NATIVE_NONE: its bf16 inputs and outputs widened
 * and, for a matrix product or a convolution, its float32 inputs rounded
 * to bf16 in float32; NATIVE_MATRIX: a matrix product's float32 A and B
 * narrowed into bf16; NATIVE_CHAIN (the chain kernel), NATIVE_MOVE and
 * NATIVE_ROWS: none. A float32 filter gradient is staged either way
 * (rounded_output). */
uint32_t precision_staged(const Graph *g, const Node *n, Native native, uint32_t *vals,
                          StageKind *kind)
{
    uint32_t count = 0;
    if (native == NATIVE_CHAIN || native == NATIVE_MOVE || native == NATIVE_ROWS ||
        copies_bf16(g, n))
        return 0;
    bool matrix = g->bf16 && (op_info[n->op].flags & (OPF_GEMM | OPF_CONV));
    for (uint32_t k = 0; k < n->nin + n->nout; k++) {
        uint32_t v = k < n->nin ? n->in[k] : n->out[k - n->nin];
        if (v == NONE)
            continue;
        const Value *val = &g->values[v];
        StageKind how = val->dtype == DT_BF16 ? STAGE_WIDE : STAGE_ROUND;
        if (native == NATIVE_MATRIX) {
            if (!narrowed_input(g, n, k) && !rounded_output(g, n, k))
                continue;
            how = STAGE_NARROW;
        } else if (val->dtype != DT_BF16 && !(matrix && k < n->nin && val->dtype == DT_F32) &&
                   !rounded_output(g, n, k)) {
            continue;
        }
        bool seen = false;
        for (uint32_t j = 0; j < count; j++)
            seen = seen || vals[j] == v;
        if (seen)
            continue;
        kind[count] = how;
        vals[count++] = v;
    }
    return count;
}

/* What staging node n's operands takes: the operands, their elements by
 * conversion, and the bytes of their scratch. */
Staging precision_staging(const Graph *g, const Node *n, Native native)
{
    Staging s = {0};
    if (!g->bf16)
        return s;
    uint32_t vbuf[64], *vals = vbuf;
    StageKind kbuf[64], *kind = kbuf;
    if (n->nin + n->nout > 64) {
        vals = arena_array(g->arena, n->nin + n->nout, sizeof *vals);
        kind = arena_array(g->arena, n->nin + n->nout, sizeof *kind);
    }
    s.operands = precision_staged(g, n, native, vals, kind);
    for (uint32_t j = 0; j < s.operands; j++) {
        int64_t e = shape_numel(&g->values[vals[j]].shape);
        *(kind[j] == STAGE_ROUND ? &s.rounded : kind[j] == STAGE_NARROW ? &s.narrowed
                                                                       : &s.converted) += (double)e;
        s.scratch += (e * (kind[j] == STAGE_NARROW ? 2 : 4) + 63) / 64 * 64;
    }
    return s;
}
