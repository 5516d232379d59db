/* opcodes.h — the op codes and limits kernel.h and kernels.cu share, once
 * (NVRTC gets this file as kernels.cu's header). MPRT_OPCODES(X) declares
 * the codes, an enum each, X(NAME) naming a code (kernel.h: MPRT_NAME):
 * binary ops (mprt_binary; MIN and MAX are for mprt_nary only; PRELU is
 * x > 0 ? x : x * slope); elementwise functions (mprt_unary; p and q are
 * the op's parameters where it has some: HardSigmoid alpha, beta;
 * LeakyRelu, Elu alpha; Selu alpha, gamma; Clip min, max; Gelu q = 1 for
 * the tanh approximation); a fused chain's steps (kernel.h); comparisons
 * and logic (bool results); the element types of their operands, of Mod's
 * and of ArgMax's input (mprt_compare: F32, I64, BOOL); Cast's
 * element types; Pad's modes; the reductions of ScatterElements and
 * ScatterND (NONE: the update replaces the element; ZERO, for their
 * gradients: a zero does); how Resize maps an output coordinate to the
 * input (ONNX's coordinate_transformation_mode) and samples it. */
#ifndef MPRT_OPCODES_H
#define MPRT_OPCODES_H
#define MPRT_OPCODES(X) \
    enum { X(ADD) X(SUB) X(MUL) X(DIV) X(POW) X(MIN) X(MAX) X(PRELU) }; \
    enum { X(ERF) X(TANH) X(SQRT) X(EXP) X(LOG) X(NEG) X(SIGMOID) X(RECIPROCAL) X(ABS) \
        X(HARD_SIGMOID) X(HARD_SWISH) X(LEAKY_RELU) X(ELU) X(SELU) X(SOFTPLUS) X(GELU) X(CLIP) }; \
    enum { X(EW_LOAD) X(EW_UNARY) X(EW_RELU) X(EW_BINARY) X(EW_UNARY_GRAD) X(EW_RELU_GRAD) }; \
    enum { X(EQUAL) X(LESS) X(LESS_EQUAL) X(GREATER) X(GREATER_EQUAL) X(AND) X(OR) X(XOR) }; \
    enum { X(ELEM_F32) X(ELEM_I64) X(ELEM_BOOL) X(ELEM_I32) X(ELEM_I16) X(ELEM_I8) \
        X(ELEM_U8) X(ELEM_F64) }; \
    enum { X(CAST_F32) X(CAST_I64) X(CAST_I32) X(CAST_U8) X(CAST_BOOL) X(CAST_F64) \
        X(CAST_F16) }; \
    enum { X(PAD_CONSTANT) X(PAD_REFLECT) X(PAD_EDGE) }; \
    enum { X(SCATTER_NONE) X(SCATTER_ADD) X(SCATTER_MUL) X(SCATTER_MAX) X(SCATTER_MIN) \
        X(SCATTER_ZERO) }; \
    enum { X(HALF_PIXEL) X(PYTORCH_HALF_PIXEL) X(ALIGN_CORNERS) X(ASYMMETRIC) }; \
    enum { X(NEAREST_FLOOR) X(NEAREST_ROUND_DOWN) X(NEAREST_ROUND_UP) X(NEAREST_CEIL) X(LINEAR) };

/* Limits: a fused chain's steps and operands; --clip-norm's lanes, groups. */
#define MPRT_EW_STEPS 16
#define MPRT_EW_OPERANDS 8
#define MPRT_EW_OUT_BF16 (1 << MPRT_EW_OPERANDS)   /* a chain's output is stored in bf16 */
#define MPRT_SQ_GROUP 256
#define MPRT_SQ_GROUPS 128

#endif
