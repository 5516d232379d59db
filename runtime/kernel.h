/* kernel.h — what the generated step hands every device's kernels: the op
 * codes and the parameter blocks that the CPU kernels (cpu.c, cpu_move.c,
 * cpu_math.c) and their CUDA twins (cuda_ops.c) share, so one call in
 * train.c reads the same on either device. Pasted after opcodes.h. */
#ifndef MPRT_KERNEL_H
#define MPRT_KERNEL_H

#include "mprt.h"
#include "opcodes.h"

#define MPRT_OPCODE(name) MPRT_##name,   /* opcodes.h's codes: MPRT_ADD.. */
MPRT_OPCODES(MPRT_OPCODE)

/* Fused elementwise chains (mprt_ew_chain): one value v per element of
 * the output, started by an MPRT_EW_LOAD step and carried through the
 * steps that follow, each the float operations of the node's own kernel in
 * the same order: MPRT_EW_UNARY is mprt_unary's op (p, q its parameters),
 * MPRT_EW_RELU mprt_relu, MPRT_EW_BINARY mprt_binary's op with v on the
 * left (on the right with swap), MPRT_EW_UNARY_GRAD mprt_unary_grad's op
 * with v as dy and operands a and b as x and y, MPRT_EW_RELU_GRAD
 * mprt_relu_grad with v as dy and operand a as y. A step reads operand a
 * (and b) at its strides; a LOAD or BINARY step with a = -1 reads the
 * constant p instead. Operands: at most MPRT_EW_OPERANDS per chain,
 * steps: at most MPRT_EW_STEPS.
 *
 * Under --precision=bf16 an operand or the output may be stored in bf16
 * (bit k of bf16 for operand k, MPRT_EW_OUT_BF16 for the output): read
 * widened, written rounded to nearest even. A step with round set rounds
 * v to bf16 after it, as its node's value is stored unfused, so a chain
 * gives the numbers of its nodes' own kernels with their bf16 staging. */

typedef struct MprtEwStep {
    int kind, op;   /* MPRT_EW_*, and MPRT_ERF.. or MPRT_ADD.. where it has one */
    int a, b;       /* operands, -1 if none */
    int swap;       /* MPRT_EW_BINARY: v = a op v */
    int round;      /* v rounded to bf16 after the step */
    float p, q;
} MprtEwStep;

/* The output's dims (rank, shape) and each operand's strides per output
 * dimension (0 where it is broadcast). */
typedef struct MprtEwChain {
    int rank, nops, nsteps;
    int bf16;       /* operands (bit k) and output (MPRT_EW_OUT_BF16) stored in bf16 */
    long shape[8];
    long stride[MPRT_EW_OPERANDS][8];
    MprtEwStep step[MPRT_EW_STEPS];
} MprtEwChain;

/* A convolution over up to three spatial dimensions, depth, height and
 * width: 2-D ones have D = KD = OD = 1, sd = dd = 1 and pd = 0, 1-D ones H,
 * KH and OH 1 as well. */
typedef struct MprtConv {
    int N, C, D, H, W, M, KD, KH, KW, OD, OH, OW, group;
    int sd, sh, sw, dd, dh, dw, pd, ph, pw;   /* strides, dilations, leading pads */
} MprtConv;

/* An image's positions (one channel's), an output's and a filter's taps. */
static inline long mprt_conv_in_plane(const MprtConv *p)
{
    return (long)p->D * p->H * p->W;
}

static inline long mprt_conv_out_plane(const MprtConv *p)
{
    return (long)p->OD * p->OH * p->OW;
}

static inline long mprt_conv_taps(const MprtConv *p)
{
    return (long)p->KD * p->KH * p->KW;
}

/* A convolution whose output planes are small (deep layers: 7 x 7 and
 * less) runs all its images' patches as one GEMM rather than a GEMM per
 * image, which would read the whole weight once per image for a few
 * columns: the patch matrices of the batch side by side (K x N*P) and the
 * output in the GEMM's order (mg x N*P) share the scratch. The compiler
 * (cost.c, node_workspace) sizes the scratch by the same rule. */
#define MPRT_CONV_BATCH_P 64
static inline int mprt_conv_batched(const MprtConv *p)
{
    return p->N > 1 && mprt_conv_out_plane(p) <= MPRT_CONV_BATCH_P;
}

/* A convolution that runs through oneDNN (runtime/cpu_dnnl.c): the model
 * lists them in a table, each call names its row. */
enum { MPRT_DNNL_FWD, MPRT_DNNL_BWD_DATA, MPRT_DNNL_BWD_WEIGHTS };
typedef struct MprtDnnlConv {
    int kind;            /* MPRT_DNNL_*: the forward, dX or dW */
    int dev, bias;       /* the device that runs it; a forward with a bias */
    const char *node;    /* the ONNX node, for errors */
    MprtConv p;
    int blocked;         /* MPRT_DNNL_X: the input side (x, dx) is in the blocked layout
                            (cpu_dnnl.c); MPRT_DNNL_Y: the output side (y, dy) */
} MprtDnnlConv;

enum { MPRT_DNNL_X = 1, MPRT_DNNL_Y = 2 };

/* Pooling over up to three spatial dimensions (as MprtConv: 2-D has D = OD
 * = KD = 1, sd = dd = 1, pd = ed = 0). */
typedef struct MprtPool {
    int N, C, D, H, W, OD, OH, OW, KD, KH, KW, sd, sh, sw, dd, dh, dw, pd, ph, pw;
    int ed, eh, ew;          /* trailing pads (average pooling) */
    int count_include_pad;   /* average pooling: divide by the padded window */
} MprtPool;

/* A max pooling that runs through oneDNN (cpu_dnnl.c): its row of the
 * model's table, as MprtDnnlConv's. */
typedef struct MprtDnnlPool {
    int dev;             /* the device that runs it */
    const char *node;    /* the ONNX node, for errors */
    MprtPool p;
} MprtDnnlPool;

/* Resize over the last two dimensions (opcodes.h: coord, mode). */
typedef struct MprtResize {
    long NC;
    int H, W, OH, OW;
    int coord, mode;
    float scale_h, scale_w;    /* output / input, as given or from the sizes */
} MprtResize;

/* --clip-norm: the order in which a gradient's squared norm is summed, the
 * same on both kinds of device. Lane l of MPRT_SQ_GROUPS * MPRT_SQ_GROUP
 * sums the squares of elements l, l + lanes, l + 2 lanes ... in double;
 * each group of MPRT_SQ_GROUP consecutive lanes, then the groups' sums,
 * are added by halving (s[t] += s[t + w] for w = half the count ... 1). */

#endif
