/* mpcc.h — the one internal header of the compiler.
 *
 * Sections follow the folders of compiler/ in the order the passes run
 * (core, front, graph, parallel, emit; driver.c lists the passes), one
 * section per file. Types from
 * foreign libraries (protobuf-c) never appear here.
 */
#ifndef MPCC_H
#define MPCC_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MPCC_VERSION "0.1.0"
#ifndef MPCC_CUDA_HOME
#define MPCC_CUDA_HOME "/usr/local/cuda"   /* where generated CUDA trainers find the toolkit */
#endif

#if defined(__GNUC__)
#define FMT(a, b) __attribute__((format(printf, a, b)))
#else
#define FMT(a, b)
#endif

/* =================================================================== */
/* compiler/core/ — the IR and what every pass uses */
/* =================================================================== */

/* ------------------------------------------------------ core/util.c */

typedef struct Arena Arena;

Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t size);                /* zeroed, 16-aligned */
void *arena_array(Arena *a, size_t n, size_t size);      /* overflow-checked */
void *arena_grow(Arena *a, void *p, size_t old_n, size_t new_n, size_t size);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) FMT(2, 3);
char *arena_vprintf(Arena *a, const char *fmt, va_list ap);
void arena_defer(Arena *a, void (*fn)(void *), void *p); /* run by arena_free */

/* Writes s with C escapes for '\\', '"' and control bytes, so a name from a
 * model file can never break a line of output or a C string/comment. */
void fput_escaped(FILE *f, const char *s);
char *str_escaped(Arena *a, const char *s, size_t max_len);
bool parse_i64(const char *s, int64_t *out);             /* whole string, decimal */
bool mul_overflows(int64_t a, int64_t b, int64_t *out);  /* a,b >= 0 */
bool add_overflows(int64_t a, int64_t b, int64_t *out);
/* A whole file, NUL-terminated, to free(); errors name it as `what`. */
char *file_read_all(const char *path, const char *what, size_t *n);
/* An output file is written to out_tmp(path) and out_commit renames it over
 * path once whole; a device or a pipe (/dev/null) is written in place, as a
 * rename would replace it. */
char *out_tmp(Arena *a, const char *path);
bool out_commit(const char *tmp, const char *path);   /* false: errno says why */

/* ------------------------------------------------------ core/diag.c */

/* Where a thing came from: an ONNX file plus the kind and name of the element
 * ("node", "initializer", "input", "output"), or a DSL file:line:col. */
typedef struct Loc {
    const char *file;
    const char *what;
    const char *name;
    const char *op;
    int32_t index;          /* node index in the file, -1 if none */
    int32_t line, col;      /* DSL source position, 0 if none */
} Loc;

/* User errors: one line on stderr, exit status 1 (or a longjmp to diag_jmp
 * when a harness set it). Internal bugs: MPCC_ASSERT / unreachable(). */
_Noreturn void error_at(const Loc *loc, const char *fmt, ...) FMT(2, 3);
_Noreturn void error_file(const char *file, const char *fmt, ...) FMT(2, 3);
void warn_at(const Loc *loc, const char *fmt, ...) FMT(2, 3);
void report_at(const Loc *loc, const char *fmt, ...) FMT(2, 3); /* error, no exit */
void note_at(const Loc *loc, const char *fmt, ...) FMT(2, 3);
/* Said only the first time this run (a pass run once per candidate plan). */
void warn_once(const Loc *loc, const char *fmt, ...) FMT(2, 3);
void note_once(const Loc *loc, const char *fmt, ...) FMT(2, 3);

/* Why a candidate plan cannot run: the error it would be, kept instead of
 * raised, so that a search over candidates goes on to the next and reports
 * the one it must (parallel/pipeline.c). The first reason given is kept. */
typedef struct Reject {
    Loc loc;
    const char *why;        /* NULL: nothing rejected */
    bool alone;             /* a whole message; else a reason "no schedule can run: ..." */
    bool memory;            /* the reason is memory: what --offload=auto may answer */
} Reject;
bool reject(Arena *a, Reject *r, const Loc *loc, const char *fmt, ...) FMT(4, 5);  /* false */
bool reject_file(Arena *a, Reject *r, const char *file, const char *fmt, ...) FMT(4, 5);
_Noreturn void error_reject(const Reject *r);
_Noreturn void mpcc_die(const char *file, int line, const char *fmt, ...) FMT(3, 4);
/* The text of a DSL file, so diagnostics at file:line:col can show the
 * line with a caret (the text must outlive the diagnostics). */
void diag_source(const char *file, const char *text, size_t n);
void diag_forget_sources(void);
extern jmp_buf *diag_jmp;   /* set by the fuzzer and tests: errors unwind here */
extern bool diag_quiet;     /* suppress diagnostics (fuzzing) */
extern const char *diag_context;  /* while set, every error ends with it */

#define MPCC_ASSERT(c) \
    ((c) ? (void)0 : mpcc_die(__FILE__, __LINE__, "assertion failed: %s", #c))
#define unreachable() mpcc_die(__FILE__, __LINE__, "unreachable code reached")

/* -------------------------------------------------------- core/ir.c */

/* Element types use the numbering of ONNX TensorProto.DataType. */
typedef enum DType {
    DT_UNDEFINED = 0, DT_F32 = 1, DT_U8 = 2, DT_I8 = 3, DT_U16 = 4, DT_I16 = 5,
    DT_I32 = 6, DT_I64 = 7, DT_STRING = 8, DT_BOOL = 9, DT_F16 = 10,
    DT_F64 = 11, DT_U32 = 12, DT_U64 = 13, DT_C64 = 14, DT_C128 = 15,
    DT_BF16 = 16, DT_COUNT
} DType;

const char *dtype_name(DType t);     /* "f32", "i64", ... ; "?" if unknown */
size_t dtype_size(DType t);          /* bytes per element; 0 if unsupported */
bool dtype_is_float(DType t);
bool dtype_is_int(DType t);          /* signed or unsigned integer, not bool */

#define MAX_RANK 8

typedef struct Shape {
    int rank;
    int64_t d[MAX_RANK];
} Shape;

int64_t shape_numel(const Shape *s); /* valid once shape_bytes accepted s */
bool shape_bytes(const Shape *s, DType t, int64_t *bytes);  /* false on overflow */
bool shape_eq(const Shape *a, const Shape *b);
char *shape_str(Arena *a, const Shape *s);  /* "[2,3,64,64]" */

/* Constant bytes: a view onto the mapped model (or external data file), or a
 * buffer in the graph's arena (typed fields, folded results). */
typedef struct Tensor {
    DType dtype;
    Shape shape;
    const void *data;
    size_t nbytes;
    bool mapped;
} Tensor;

int64_t tensor_i64(const Tensor *t, int64_t i);  /* integer or bool element */
double tensor_f64(const Tensor *t, int64_t i);   /* any numeric element */

typedef enum ValueKind {
    VK_ACTIVATION,   /* computed by a node */
    VK_INPUT,        /* graph input fed by the user */
    VK_PARAM,        /* floating-point initializer: a trainable weight */
    VK_CONST,        /* constant: non-float initializer, Constant, folded */
    VK_STATE,        /* optimizer state, zero at the start of training */
} ValueKind;

#define NONE UINT32_MAX

typedef struct Value {
    const char *name;
    ValueKind kind;
    DType dtype;
    Shape shape;
    bool typed;                 /* dtype and shape are known */
    uint32_t producer;          /* node id, or NONE */
    uint32_t nuses;
    const Tensor *data;         /* VK_PARAM, VK_CONST */
    const char *sym[MAX_RANK];  /* VK_INPUT: symbolic dim names, NULL if fixed */
    bool symbolic;              /* VK_INPUT: some dim still unbound */
    bool is_output;
    bool trainable;             /* VK_PARAM updated by the optimizer */
    uint32_t grad;              /* trainable: its gradient value, or NONE */
    Loc loc;
} Value;

typedef enum AttrKind {
    AT_FLOAT, AT_INT, AT_STRING, AT_TENSOR, AT_FLOATS, AT_INTS, AT_STRINGS,
    AT_GRAPH, AT_OTHER
} AttrKind;

typedef struct Attr {
    const char *name;
    AttrKind kind;
    int64_t i;
    double f;
    const char *s;
    int64_t *ints;
    double *floats;
    const char **strs;
    uint32_t n;
    const Tensor *t;
} Attr;

#define OPF_FOLD 1u
#define OPF_CPU  2u
#define OPF_GRAD 4u
#define OPF_CUDA 8u
#define OPF_INTERNAL 16u   /* made by mpcc's passes, not an ONNX op */
#define OPF_NOGRAD 32u     /* bool or index outputs: no gradient flows through it */
#define OPF_GEMM 64u       /* kinds of work (ops.def): a matrix product */
#define OPF_CONV 128u      /* a convolution */
#define OPF_NORM 256u      /* normalisation, softmax, and the losses built on it */
#define OPF_HEAVY 512u     /* a transcendental per element (exp, erf, ...) */
#define OPF_WINDOW 1024u   /* a window over each output: pooling */

typedef enum Op {
    OP_UNKNOWN,
#define OP(id, name, mi, ma, mo, mao, fl) OP_##id,
#include "ops.def"
#undef OP
} Op;
/* Apart from the enum, so that a switch over Op without default: is
 * complete when it names every op (-Wswitch checks it). */
enum {
    OP_COUNT = 1
#define OP(id, name, mi, ma, mo, mao, fl) + 1
#include "ops.def"
#undef OP
};

typedef struct OpInfo {
    const char *name;
    int min_in, max_in, min_out, max_out;
    unsigned flags;
} OpInfo;

extern const OpInfo op_info[OP_COUNT];
Op op_lookup(const char *onnx_name);   /* OP_UNKNOWN if not in the table */

typedef struct Node {
    Op op;
    const char *op_type;   /* as written in the model (kept for unknown ops) */
    const char *domain;    /* "" for the default ONNX domain */
    const char *name;
    Loc loc;
    uint32_t *in, nin;     /* value ids; NONE for an omitted optional input */
    uint32_t *out, nout;
    Attr *attrs;
    uint32_t nattrs;
    bool dead;             /* folded away or unused */
    uint8_t phase;         /* PH_FORWARD, PH_BACKWARD or PH_UPDATE */
    uint32_t origin;       /* backward: the forward node whose gradient made it, or NONE */
    int32_t hint_stage;    /* placement hint from the DSL: a stage, -1 if none */
    const char *hint_device;  /* placement hint: "cpu:1", "cuda:0", or "cpu"/"cuda"
                                 for any device of that kind; NULL if none */
} Node;

enum { PH_FORWARD, PH_BACKWARD, PH_UPDATE };

typedef struct NameMap NameMap;
typedef struct Rebatch Rebatch;

typedef struct Graph {
    Arena *arena;
    const char *file;      /* the model path, for diagnostics */
    const char *name;
    const char *producer;
    int64_t opset;         /* version of the default ONNX domain */
    Value *values;
    uint32_t nvalues, cap_values;
    Node *nodes;
    uint32_t nnodes, cap_nodes;
    uint32_t *inputs, ninputs;
    uint32_t *outputs, noutputs;
    DType *output_dtypes;  /* each output's element type as the model declares it
                              (DT_UNDEFINED where it does not), or NULL */
    uint32_t *order, norder, cap_order;  /* live nodes in topological order */
    NameMap *names;
    uint32_t loss, labels; /* training: the loss and the labels input, or NONE */
    uint32_t scores;       /* training: what evaluation scores, the loss's first input
                              or the model's output whose Add the loss took in
                              (graph/loss.c), or NONE */
    const char **output_names;  /* --infer: each output's ONNX name (forward.c may have
                                   given the output a copy of its own), else NULL */
    uint32_t cur_origin;   /* autodiff: the forward node being differentiated */
    Rebatch *rebatch;      /* a batch the export fixed, re-bound (rebatch.c), or NULL */
    int64_t rows;          /* -batch of this graph (one micro-batch), 0 if not given */
    int cpu_kernels;       /* --cpu-kernels, a CpuKernels: what conv_onednn decides by */
    const void *source;    /* the model file's bytes (mapped) */
    size_t source_size;
    bool bf16;             /* --precision=bf16: some activations are DT_BF16 (precision.c) */
} Graph;

Graph *ir_new(Arena *a, const char *file);
uint32_t ir_find(Graph *g, const char *name);           /* NONE if absent */
uint32_t ir_value(Graph *g, const char *name);          /* find or create */
uint32_t ir_add_node(Graph *g, Op op, const char *op_type, const char *name);
uint32_t ir_new_value(Graph *g, const char *name, DType t, const Shape *s); /* unique name */
uint32_t ir_new_const(Graph *g, const char *name, const Tensor *t);
uint32_t ir_emit(Graph *g, Op op, const char *name, const uint32_t *in, uint32_t nin,
                 const uint32_t *out, uint32_t nout, uint8_t phase);  /* appends to order */
uint32_t ir_reads(const Graph *g, uint32_t v);   /* live nodes' reads of v, counted now */
void ir_set_int(Graph *g, Node *n, const char *name, int64_t v);
void ir_set_float(Graph *g, Node *n, const char *name, double v);
void ir_set_str(Graph *g, Node *n, const char *name, const char *s);
void ir_set_ints(Graph *g, Node *n, const char *name, const int64_t *v, uint32_t count);
void ir_copy_attrs(Graph *g, Node *dst, const Node *src);
const Attr *ir_attr(const Node *n, const char *name);   /* NULL if absent */
int64_t attr_int(const Node *n, const char *name, int64_t dflt);
double attr_float(const Node *n, const char *name, double dflt);
const char *attr_str(const Node *n, const char *name, const char *dflt);
const int64_t *attr_ints(const Node *n, const char *name, uint32_t *count);
Loc value_loc(const Graph *g, uint32_t v);
void ir_toposort(Graph *g);   /* fills order; errors on cycles and dangling inputs */
/* The nodes emitted since norder was `before` take order[pos]'s place. */
void ir_splice_order(Graph *g, uint32_t pos, uint32_t before);
/* What a lowering (einsum.c, rnn.c, composite.c) emits for `node`: nodes
 * and constants named after `prefix`, numbered by *step. */
Node *ir_emit_lowered(Graph *g, uint32_t node, const char *prefix, uint32_t *step, Op op,
                      const uint32_t *in, uint32_t nin, uint32_t out, uint32_t *result);
uint32_t ir_lowered_const(Graph *g, const char *prefix, uint32_t *step, DType t, const void *v,
                          int n, const Shape *shape);
void ir_verify(Graph *g);     /* internal consistency, debug builds after each pass */

/* ---------------------------------------------------- core/sha256.c */

void sha256_hex(const void *data, size_t n, char out[65]);

/* =================================================================== */
/* compiler/front/ — model file to a bound, typed, folded graph */
/* =================================================================== */

/* ----------------------------------------------------- front/wire.c */

typedef struct Span {
    const uint8_t *p;
    size_t n;
} Span;

/* One protobuf field: its number and wire type, the value of a varint, the
 * whole field (key included) and a length-delimited payload. */
typedef struct WireField {
    uint32_t num, wire;
    uint64_t varint;
    Span whole, payload;
} WireField;

bool wire_next(const uint8_t **p, const uint8_t *end, WireField *f);  /* false: malformed */

/* ----------------------------------------------------- front/onnx.c */

Graph *onnx_import(Arena *a, const char *path);
Graph *onnx_import_bytes(Arena *a, const char *path, const void *data, size_t n);

/* --------------------------------------- front/dsl/ (the model DSL) */

/* model.mp -> IR graph: front/dsl/dsl.l (lexer), dsl.y (parser), lower.c
 * (lowering, the entry points), prelude.c (layers written in the DSL).
 * Nodes carry Locs with line and col, and placement hints (hint_stage,
 * hint_device) from @gpu1, @cpu, @stage(2). */
bool dsl_is_source(const char *path);             /* a .mp file */
Graph *dsl_import(Arena *a, const char *path);
Graph *dsl_import_text(Arena *a, const char *path, const char *text, size_t n);
extern size_t dsl_param_limit;  /* bytes of initial weights lowering may draw */
/* .mp files go to dsl_import, others to onnx_import. */
Graph *import_model(Arena *a, const char *path);

/* ----------------------------------------------------- front/bind.c */

typedef struct ShapeBinding {
    const char *name;
    Shape shape;
} ShapeBinding;

typedef enum { LOSS_AUTO, LOSS_CE, LOSS_MSE } LossKind;
typedef enum { OPTIM_SGD, OPTIM_ADAMW } OptimKind;

typedef struct TrainOptions {
    LossKind loss;
    int64_t ignore_index;      /* cross-entropy labels to skip (default -100) */
    int class_axis;            /* cross-entropy: the output's class dimension (default 1) */
    OptimKind optim;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    double clip_norm;          /* 0: no clipping */
    bool nesterov;
    int microbatches;
    const char *frozen;        /* POSIX extended regex over parameter names */
} TrainOptions;

typedef enum { SCHED_AUTO, SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB } SchedKind;
typedef enum { RECOMPUTE_NONE, RECOMPUTE_AUTO, RECOMPUTE_ALL } RecomputeKind;
typedef enum { OBJECTIVE_TIME, OBJECTIVE_MEMORY } Objective;
/* --offload; auto (the default): activations, then weights too, only when
 * nothing fits without */
typedef enum {
    OFFLOAD_NONE, OFFLOAD_ACTIVATIONS, OFFLOAD_WEIGHTS, OFFLOAD_ALL, OFFLOAD_AUTO, OFFLOAD_COUNT
} OffloadKind;
/* What an --offload kind sends to host memory. */
static inline bool offloads_activations(OffloadKind k)
{
    return k == OFFLOAD_ACTIVATIONS || k == OFFLOAD_ALL;
}
static inline bool offloads_weights(OffloadKind k)
{
    return k == OFFLOAD_WEIGHTS || k == OFFLOAD_ALL;
}

/* How the step is spread over devices (see docs/pipeline.md). */
typedef struct PipeOptions {
    const char *devices;       /* --devices=cpu,cuda:0,..., NULL: from -cpus/-gpus */
    const char *profile;       /* --profile: a built-in profile name or a profile file */
    const char *measured;      /* --measured: per-node times from ./train --profile */
    SchedKind schedule;
    int virt;                  /* interleaved: stages per device (default 2) */
    const char *split;         /* --split=node,node: cut after these nodes */
    const int *cuts;           /* pipeline.c's refinement: the stages' first units, [S+1] */
    RecomputeKind recompute;
    OffloadKind offload;       /* --offload: activations kept for the backward pass wait
                                  in host memory, weights live there (plan.c) */
    int offload_keep;          /* > 0: offload only that many of the candidates, the
                                  largest first (--offload=auto's trimming); 0: all */
    bool offload_auto;         /* the kind is --offload=auto's choice */
    Objective objective;       /* --objective: step time (default) or the largest memory */
    const char *trace;         /* --trace: the predicted timeline as Chrome trace JSON */
    bool micro_given;          /* --microbatches was given (else auto may choose) */
    bool recompute_given;      /* --recompute was given (else a plan that does not fit
                                  may recompute instead of offloading, if faster) */
    int replicas;              /* --data-parallel: copies of the pipeline, each on its
                                  own rows of the batch (0: not given; REPLICAS_AUTO) */
    int nodes;                 /* --nodes: processes, one per machine (default 1) */
    int replicas_here;         /* replicas in each process: replicas / nodes */
    int node_devs;             /* a pipeline across processes (--data-parallel=1,
                                  --nodes=K): each process's devices, the plan's device
                                  d on process d / node_devs; 0: every one here */
    int zero;                  /* --zero=1: the optimizer state and update sharded over
                                  the replicas (ZeRO stage 1); 0: each replica all of it */
    double bucket_mb;          /* --bucket-mb: the most megabytes of gradients one sum
                                  over the replicas takes at once (plan.c's buckets) */
} PipeOptions;

#define REPLICAS_AUTO (-1)     /* --data-parallel=auto */


/* --cpu-kernels: which kernels run the convolutions of CPU devices. */
typedef enum { KERNELS_AUTO, KERNELS_BUILTIN, KERNELS_ONEDNN, KERNELS_COUNT } CpuKernels;   /* auto the default */
typedef enum { LAYOUT_BLOCKED, LAYOUT_PLAIN, LAYOUT_COUNT } CpuLayout;   /* --cpu-layout */
/* --precision (docs/precision.md): fp32; TF32 tensor cores for CUDA GEMMs and
 * convolutions (--tf32); bf16 activations over fp32 master weights. */
typedef enum { PREC_FP32, PREC_TF32, PREC_BF16, PREC_COUNT } Precision;

typedef struct Options {
    const char *input;
    const char *output;        /* -o */
    int gpus, cpus;
    Precision precision;       /* --precision (--tf32: PREC_TF32) */
    bool cuda_graph_off;       /* --cuda-graph=off: never capture the step */
    int64_t batch;             /* -batch, 0 if not given */
    ShapeBinding *shapes;      /* --shapes */
    uint32_t nshapes;
    bool dump_ir, dump_shapes, dump_grad;
    bool dump_partition, dump_schedule, dump_dot;   /* the pipeline plan, then stop */
    bool dump_fuse;            /* --dump=fuse: the fused elementwise chains, then stop */
    bool dump_memory;          /* --dump=memory: what each device's arena holds, then stop */
    bool dump_costs;           /* --dump=costs: the cost model per node, then stop */
    const char *dump_gantt;    /* --dump=gantt=FILE.svg: the predicted step as SVG, then stop */
    const char *dump_sweep;    /* --dump=sweep=FILE.svg: step time against M, then stop */
    const char *gantt_from;    /* --gantt-from=TRACE.json[,..]: draw traces, no model */
    bool no_fuse;              /* --no-fuse: one kernel call per node */
    CpuKernels cpu_kernels;    /* --cpu-kernels */
    CpuLayout cpu_layout;      /* --cpu-layout: blocked (the default) or plain */
    PipeOptions pipe;
    bool check;
    bool infer;                /* --infer: a forward-only program, no training graph */
    bool list_ops;
    bool emit_onnx;            /* --emit-onnx: write the model as ONNX to -o */
    TrainOptions train;
    const char *cmdline;       /* the command line, for the generated header */
} Options;

/* Fixes input shapes; with require, a symbolic dimension left is an error,
 * otherwise the result says whether every input is static. */
bool bind_shapes(Graph *g, const Options *o, bool require);

/* -------------------------------------------------- front/rebatch.c */

/* A first dimension the export fixed, re-bound to -batch (or --shapes):
 * bind.c requests it per input; the driver infers the shapes of the model as
 * exported (the reference); shape inference then follows the batch and
 * rewrites the Reshape and Expand targets that pin it. */
void rebatch_request(Graph *g, uint32_t input, int64_t to, int64_t rows);
void rebatch_bind_reference(Graph *g, Graph *ref);
void rebatch_start(Graph *g);
void rebatch_before(Graph *g, Node *n);
void rebatch_after(Graph *g, Node *n);
void rebatch_note(Graph *g);            /* says so, once the batch is followed */
int64_t rebatch_from(const Graph *g);   /* the exported batch, 0 if none */
const char *rebatch_advice(Graph *g);   /* what its errors end with */

/* ---------------------------------------------- front/export_mode.c */

/* An export for inference: BatchNormalization in inference form is an error
 * that says how to export for training; BatchNorm folded into Conv weights
 * ('onnx::Conv_N') a warning. */
void check_export_mode(Graph *g);
bool bn_is_training(const Graph *g, const Node *n);   /* training_mode, or old opsets' outputs */

/* --------------------------------------------------- front/params.c */

/* Each op's parameters with the opset's defaults and axes normalised and
 * checked (an error names the node): what shapes.c checks first and every
 * later pass reads. */
bool node_has_in(const Node *n, uint32_t k);           /* given, not omitted */
Value *node_in(Graph *g, const Node *n, uint32_t k);   /* an error if omitted */
const char *value_type(const Graph *g, const Value *v);   /* "f32[2,3]", for messages */
const Tensor *param_const(Graph *g, const Node *n, uint32_t k, const char *what);
int64_t *param_ints(Graph *g, const Node *n, const char *attr, uint32_t k, uint32_t *count,
                    bool *given);   /* an attribute (older opsets) or a constant input */
int param_axis(const Node *n, int64_t axis, int rank, const char *what);   /* 0 .. rank-1 */
int softmax_axis(Graph *g, const Node *n);   /* Softmax, LogSoftmax: normalised */
double norm_epsilon(const Node *n);          /* BatchNormalization, InstanceNorm., LayerNorm. */
double bn_momentum(const Node *n);
typedef struct GemmParams {
    bool trans_a, trans_b;
    double alpha, beta;
} GemmParams;
GemmParams gemm_params(const Node *n);
int64_t conv_group(const Node *n);
int64_t loss_ignore_index(const Node *n);
const char *loss_reduction(const Node *n);
int loss_class_axis(const Node *n);
typedef struct SliceParams {
    int64_t start[MAX_RANK], step[MAX_RANK], size[MAX_RANK];
} SliceParams;
void slice_params(Graph *g, Node *n, SliceParams *p);
int64_t *split_sizes(Graph *g, Node *n, int *axis);
void transpose_perm(Graph *g, Node *n, int *perm);
double dropout_ratio(Graph *g, const Node *n);         /* 0 when not training */
void resize_scales(Graph *g, const Node *n, double scale[2]);   /* H and W, 4-D only */
void clip_bounds(Graph *g, const Node *n, double *lo, double *hi);  /* +-inf if absent */
void reduce_axes(Graph *g, Node *n, bool reduced[MAX_RANK]);
void pad_params(Graph *g, Node *n, int64_t pads[2 * MAX_RANK], double *value);
typedef struct ArgParams {
    int axis;
    bool keepdims, last;   /* last: select_last_index */
} ArgParams;
ArgParams arg_params(Graph *g, const Node *n);           /* ArgMax, ArgMin */
typedef struct CumSumParams {
    int axis;
    bool exclusive, reverse;
} CumSumParams;
CumSumParams cumsum_params(Graph *g, const Node *n);    /* the axis a constant input */
bool mod_fmod(const Node *n);                           /* Mod: C's fmod, not Python's */
int elements_axis(const Node *n, int rank);   /* GatherElements, ScatterElements, Scatter */
typedef enum ScatterReduction {
    SCATTER_NONE, SCATTER_ADD, SCATTER_MUL, SCATTER_MAX, SCATTER_MIN
} ScatterReduction;
ScatterReduction scatter_reduction(Graph *g, const Node *n);   /* ScatterElements, ScatterND */
typedef struct TopKParams {
    int axis;
    int64_t k;
    bool largest;
} TopKParams;
TopKParams topk_params(Graph *g, const Node *n);        /* K a constant */
typedef struct OneHotParams {
    int axis;        /* the output's depth dimension */
    int64_t depth;
} OneHotParams;
OneHotParams onehot_params(Graph *g, const Node *n);    /* depth a constant */
typedef struct TriluParams {
    int64_t k;
    bool upper;
} TriluParams;
TriluParams trilu_params(Graph *g, const Node *n);      /* k a constant */
typedef struct Window {
    int n;                       /* spatial dimensions */
    int64_t k[MAX_RANK], stride[MAX_RANK], dil[MAX_RANK];
    int64_t pad[2 * MAX_RANK];   /* begins, then ends */
    const char *auto_pad;        /* "NOTSET", "SAME_UPPER", "SAME_LOWER" or "VALID" */
} Window;
Window window_params(const Node *n, int spatial, const int64_t *kernel_from_weight);
void window_ints(const Node *n, const char *name, int64_t *dst, int count, int64_t dflt);

/* --------------------------------------------------- front/shapes.c */

void infer_shapes(Graph *g);          /* also folds constants through fold.c */

/* --------------------------------------------------- front/einsum.c */

/* Replaces the Einsum at order[pos] (its operands typed) by MatMul,
 * Transpose, Reshape and ReduceSum nodes in its place; shapes.c calls it. */
void lower_einsum(Graph *g, uint32_t pos);

/* ------------------------------------------------------ front/rnn.c */

/* Replaces the LSTM, GRU or RNN at order[pos] (its inputs typed) by its
 * steps unrolled into ops that train, inferred next. */
void lower_rnn(Graph *g, uint32_t pos);

/* ------------------------------------------------ front/composite.c */

/* ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp,
 * DepthToSpace and SpaceToDepth: the ops ONNX defines as compositions of
 * others, which lower_composite replaces at order[pos] (its input typed)
 * by those ops; shapes.c calls it. */
bool is_composite(Op op);
void lower_composite(Graph *g, uint32_t pos);

/* -------------------------------------------------- front/float32.c */

/* float64, float16 and bfloat16 computed in float32, their types kept at
 * the graph's inputs (and, with --infer, its outputs). */
void float32_boundary(Graph *g);

/* ----------------------------------------------------- front/fold.c */

void tensor_set_f64(Tensor *t, int64_t i, double v);   /* rounded to t's type */

bool fold_node(Graph *g, Node *n);    /* true if n was evaluated and removed */
void prune(Graph *g);                 /* drop dead nodes and unused constants */

/* ---------------------------------------------------- front/check.c */

/* Returns the number of problem op types; forward_only (--infer): only a
 * CPU forward kernel is needed, never a gradient. */
int check_ops(Graph *g, FILE *out, bool forward_only);
void list_ops(FILE *out);             /* the op table as Markdown */

/* =================================================================== */
/* compiler/graph/ — the training graph (or the forward alone) */
/* =================================================================== */

/* ----------------------------------------------- graph/transposed.c */

/* A MatMul whose operand is a Transpose of its last two dims reads the
 * Transpose's input in place: a BatchMatMul with transA or transB. */
void fold_transposed_operands(Graph *g);

/* ---------------------------------------------------- graph/views.c */

/* A batched product reads the input of a Transpose before it, and writes
 * the output of one after it, in place (attributes mpcc_view_a, _b, _y). */
void fold_product_views(Graph *g);

/* A matrix product's operand k (0: A, 1: B, 2: the output) as the product
 * sees it: its shape, and each dim's stride in elements in the buffer it
 * reads or writes (dense, where it has no view). */
typedef struct MatView {
    Shape shape;
    int64_t stride[MAX_RANK];
} MatView;
MatView matmul_view(const Graph *g, const Node *n, int k);

/* ------------------------------------------------- graph/simplify.c */

/* x * 1 and x / 1 become x; PyTorch's exported erf GELU becomes Gelu;
 * a BatchNormalization's ReLU runs in it; and the rest of its table. */
void simplify(Graph *g);
/* The name of the Relu a BatchNormalization (or its gradient) took in, or
 * NULL: its output is max(y, 0). */
const char *bn_relu(const Node *n);
/* The name of the residual Add a BatchNormalization took in, before its
 * ReLU, or NULL: it reads the Add's other operand as a sixth input. */
const char *bn_add(const Node *n);

/* ----------------------------------------------------- graph/loss.c */

void add_loss(Graph *g, const Options *o);      /* sets g->loss and g->labels */
bool eval_only(const Node *n);   /* it runs in evaluation alone (a head's Add the loss took in) */

/* ------------------------------------------------- graph/autodiff.c */

void autodiff(Graph *g, const Options *o);      /* gradients of g->loss */

/* ---------------------------------------------------- graph/optim.c */

void add_optimizer(Graph *g, const Options *o);

/* -------------------------------------------------- graph/precision.c */

void lower_precision(Graph *g, const Options *o);   /* --precision=bf16: the bf16 values */
/* How a node's kernel takes its operands under bf16 (cost.c's bf16_native):
 * through float32 scratch around it; itself (the chain kernel; a layout
 * op moving bf16 values, 2 bytes each; a GPU's Softmax or LayerNorm and
 * their gradients); or as a GPU's matrix product on bf16 tensors, its
 * float32 inputs narrowed into bf16 scratch. */
typedef enum { NATIVE_NONE, NATIVE_CHAIN, NATIVE_MOVE, NATIVE_ROWS, NATIVE_MATRIX } Native;
/* A staged operand: a bf16 value widened into float32 scratch (and, an
 * output, narrowed back); a float32 one rounded to bf16 in float32
 * scratch; or narrowed into bf16 scratch. A float32 output that is rounded
 * (a filter gradient) is written to float32 scratch and rounded from it
 * (STAGE_ROUND), or written as bf16 and widened (STAGE_NARROW). */
typedef enum { STAGE_WIDE, STAGE_ROUND, STAGE_NARROW } StageKind;
uint32_t precision_staged(const Graph *g, const Node *n, Native native, uint32_t *vals,
                          StageKind *kind);
typedef struct Staging {
    uint32_t operands;           /* staged: a conversion each */
    double rounded, converted;   /* their elements: rounded from float32; widened or narrowed */
    double narrowed;             /* and narrowed from float32 into bf16 scratch */
    int64_t scratch;             /* bytes: each operand's copy, 64-byte aligned */
} Staging;
Staging precision_staging(const Graph *g, const Node *n,
                          Native native);   /* all 0 unless bf16 */

/* -------------------------------------------------- graph/forward.c */

/* --infer: every graph output becomes the output of a node of its own (a
 * copy when it is a graph input, a constant or another output), so that
 * the program has a buffer to write it from. Sets g->output_names. */
void forward_outputs(Graph *g);

/* =================================================================== */
/* compiler/parallel/ — devices, costs, stages, schedule, the step's plan */
/* =================================================================== */

/* ------------------------------------------------ parallel/device.c */

typedef enum { DEV_CPU, DEV_CUDA } DevKind;

typedef struct Profile {
    const char *name;
    double flops;                    /* sustained FLOP/s of elementwise work (fp32) */
    double bandwidth;                /* memory bytes/s */
    double overhead;                 /* seconds per kernel */
    int64_t memory;                  /* bytes the trainer may use */
    double peer_bw, peer_latency;    /* to a device of the same kind */
    double host_bw, host_latency;    /* through host memory */
    double node_bw, node_latency;    /* between nodes (--nodes), one direction; 0: the
                                        default link (replicas.c) */
    bool no_peer;                    /* peer_access = 0: copies to a device of the same
                                        kind are staged through host memory */
    double matrix_flops;             /* matrix products and convolutions, at the
                                        precision in effect (--tf32: tf32_flops) */
    double tf32_flops, bf16_flops;   /* the same in TF32 and bf16 */
    bool per_call;                   /* CPU: price the work call by call, as runtime/
                                        does it (cost.c); GPU: a roofline per node */
    double call_overhead;            /* seconds per GEMM call */
    double gemm_bw;                  /* bytes/s of a GEMM call's operands (calibrate.c) */
    double blas_flops, blas_bw, blas_call;   /* CPU: the three above for OpenBLAS's GEMM
                                                (--cpu-kernels=builtin); 0: the same */
    double patch_bw, patch_row;      /* im2col: bytes/s, and seconds per row of patches */
    double transpose_bw;             /* bytes/s of a transpose (read and written) */
    double window_rate;              /* pooling: window elements per second */
    double norm_row;                 /* normalisation: seconds per row it passes over */
    double copy_bw, norm_bw;         /* bytes/s over BW_REFERENCE bytes: memcpy, passes
                                        of normalisation */
    double shared_bw;                /* bytes/s of all CPU devices streaming at once */
    double bw_at[5];                 /* bytes/s of elementwise work over BW_POINTS working
                                        sets, 64 KB times 8^i / 2^(i/2)...: see bw_point_bytes */
    double graph_overhead;           /* GPUs: seconds per kernel inside a captured step
                                        (--cuda-graph, capture.c) */
} Profile;

enum { BW_POINTS = 5 };
#define BW_REFERENCE ((double)(32 << 20))   /* the working set `bandwidth` is measured on */
double bw_point_bytes(int i);                     /* cost.c: 64 KB, 512 KB, 4 MB, 16 MB, 64 MB */
double bandwidth_at(const Profile *p, double bytes);   /* the rate over that working set */

typedef struct Device {
    DevKind kind;
    int ordinal;
    int node;                        /* its process (--nodes), 0 in one */
    const char *name;                /* "cpu:0", "cuda:1" */
    Profile prof;
} Device;

typedef struct Devices {
    Device *d;
    int n;
} Devices;

typedef struct NodeCost {
    double flops, bytes;
} NodeCost;

/* The kinds of work the cost model prices apart (ops.def's OPF_GEMM,
 * OPF_CONV, OPF_NORM, OPF_WINDOW; elementwise work and data movement
 * otherwise). */
typedef enum { WORK_GEMM, WORK_CONV, WORK_NORM, WORK_WINDOW, WORK_ELEMENTWISE, WORK_KINDS } WorkKind;

WorkKind work_kind(const Node *n);

typedef struct Measured Measured;    /* measured.c */

Devices devices_resolve(Arena *a, const Options *o);   /* -cpus, -gpus, --devices */
/* capture.c: why a CUDA trainer's step is not one graph (NULL: it is) */
const char *cuda_graph_why(const Options *o, bool mixed);
void cuda_graph_price(Devices *ds, const Options *o);   /* its launch overhead */
Profile cpu_profile(bool shared);    /* calibrate.c: this machine, alone or two devices at once */
double link_bandwidth(const Devices *ds, int a, int b);
double link_latency(const Devices *ds, int a, int b);
NodeCost node_cost(const Graph *g, const Node *n, const Profile *p);   /* on p's device */
double node_time(const Graph *g, const Node *n, const Profile *p, const Measured *m);
typedef struct Fusion Fusion;
double fused_saving(const Graph *g, const Node *n, const Fusion *fu, const Profile *p,
                    const Measured *m);   /* what running n inside a fused chain saves */
int64_t node_staging_at(const Graph *g, const Node *n, bool cpu);   /* bf16 operands' scratch */
Native bf16_native(const Graph *g, const Node *n, bool cuda);   /* how n takes bf16 operands */
/* A convolution's input x, filter w and output y, whichever of them it computes. */
void conv_operands(const Node *n, uint32_t *x, uint32_t *w, uint32_t *y);
int64_t node_workspace(const Graph *g, const Node *n, bool cpu);   /* scratch bytes while
                                      it runs on a CPU (or CUDA) device, at most WORKSPACE_MAX */
bool conv_onednn(const Graph *g, const Node *n);   /* runs through oneDNN on a CPU device */
bool pool_onednn(const Graph *g, const Node *n);   /* MaxPool's forward through oneDNN (CPU) */
bool gemm_onednn(const Graph *g);   /* CPU devices' GEMMs run through oneDNN */
bool kernels_gemm_onednn(int cpu_kernels);   /* the same, by --cpu-kernels in effect */
#define WORKSPACE_MAX 0x1p62

/* ---------------------------------------------- parallel/measured.c */

/* Per-node seconds from a trainer's --profile files, and the steps of its
 * --trace files; NULL path: none. */
Measured *measured_load(Arena *a, const char *path);
/* A node's measured seconds at a micro-batch of `rows` (0: as profiled); -1
 * if no profile names it. */
double measured_time(const Measured *m, const char *node, int phase, double rows);
bool measured_rows(const Measured *m, double *lo, double *hi);   /* the sizes profiled */
/* The runs whose traces (./train --trace) --measured gave, in its order. */
typedef struct Timeline Timeline;
const Timeline *const *measured_runs(const Measured *m, int *n);

/* --------------------------------------------- parallel/partition.c */

/* The partitioning problem, free of the IR: cut a topological order of n
 * units (forward nodes, each standing for its forward, backward and update
 * work) into nstages contiguous, non-empty ranges; stage s runs on device
 * stage_dev[s]. A value produced by one unit and read by units of later
 * stages is received once by each such stage, straight from its producer's
 * stage (a skip connection is not relayed through the stages between); a
 * graph input is read where it is used and never received.
 *
 * The objective is the pipeline's step time
 *     T = sum_s t_s + (M - 1) * max_s t_s,
 *     t_s = sum of time[stage_dev[s] * n + u] over the units u of s
 *         + sum over the values received by s of latency + bytes / bandwidth
 *           (always priced on the link from device stage_dev[s - 1] to
 *           stage_dev[s], wherever the producer is, so t_s depends only on
 *           the stage's own range)
 * and a partition is feasible when every stage's memory
 *     fixed_mem of its units + max work_mem of its units
 *     + inflight[s] * (act_mem of its units
 *                      + bytes of the values it receives that are not
 *                        transient, each rounded up)
 * is at most mem_cap[s], no stage is one of `excluded`, no cut falls where
 * no_cut forbids it, and every unit with pin[u] >= 0 is in stage pin[u].
 *
 * mpcc fills it so that a stage's memory is a lower bound of what the
 * memory plan gives it (stages.c), and excludes the stages that the memory
 * plan measured over their device (pipeline.c): a partition the plan would
 * fit is never rejected. */
typedef struct PartValue {
    int producer;            /* unit, or -1 for a graph input (read where used) */
    double bytes;            /* per micro-batch */
    const int *consumers;    /* units, in any order */
    int nconsumers;
    bool transient;          /* costs time only: not counted in memory */
} PartValue;

typedef struct PartProblem {
    int n, nstages, ndev, M;
    const int *stage_dev;        /* [nstages] */
    const double *time;          /* [ndev * n]: seconds per micro-batch of unit u on device d */
    const int64_t *fixed_mem;    /* [n]: weights, gradients, optimizer state */
    const int64_t *work_mem;     /* [n] or NULL: scratch a unit's kernels use while they
                                  * run; a stage holds the largest of its units' */
    const int64_t *act_mem;      /* [n]: bytes one micro-batch in flight holds */
    const int *inflight;         /* [nstages]: micro-batches in flight under the schedule */
    const int64_t *mem_cap;      /* [nstages]: the memory the stage may use */
    const double *link_bw;       /* [ndev * ndev]: bytes/s from device a to b */
    const double *link_latency;  /* [ndev * ndev]: seconds */
    const PartValue *values;
    int nvalues;
    const bool *no_cut;          /* [n] or NULL: no cut right after unit u */
    const int *pin;              /* [n] or NULL: the stage unit u must be in, -1 if free */
    const int *excluded;         /* [3 * nexcluded]: (s, i, j): stage s over units
                                  * [i, j) does not fit, whatever its memory above */
    int nexcluded;
} PartProblem;

typedef struct PartResult {
    int *first;                  /* [nstages + 1]: stage s is units first[s] .. first[s+1]-1 */
    double step_time;            /* T of the partition */
    double *stage_time;          /* [nstages]: t_s */
    int64_t *stage_mem;          /* [nstages] */
    /* The stage with the largest mem / mem_cap and its need. When nothing
     * is feasible, first, stage_time and stage_mem describe, of the
     * partitions that honour no_cut and pin, one minimising that ratio; when
     * none honours them (or nstages > n), first is NULL and worst_stage -1. */
    bool feasible;
    int worst_stage;
    int64_t worst_need;
} PartResult;

/* Minimises T exactly over the feasible contiguous partitions (dynamic
 * programming). Returns r->feasible. Errors only on malformed input. */
bool part_solve(Arena *a, const PartProblem *p, PartResult *r);
/* --objective=memory: of the partitions that honour no_cut, pins and
 * excluded, one with the least largest mem / mem_cap, and of those (nearly)
 * the least sum of stage times. Returns r->feasible (that ratio <= 1). */
bool part_solve_memory(Arena *a, const PartProblem *p, PartResult *r);
/* T, t_s and memory of one given partition (first[0] = 0, first[nstages] = n);
 * false if it is infeasible. Used by tests, by --split, and by part_solve's checks. */
bool part_eval(Arena *a, const PartProblem *p, const int *first, PartResult *r);

/* ------------------------------------------------ parallel/stages.c */

/* What runs a node: a stage's forward, its backward (all of it, or the
 * input-gradient part when W is apart), its weight-gradient part, or its
 * update once per step. */
typedef enum { ACT_FWD, ACT_BWD, ACT_WGRAD, ACT_UPDATE, ACT_KINDS } ActKind;

typedef struct Stages {
    int n;                     /* stages */
    int *dev;                  /* [n]: the device of each stage */
    int16_t *stage;            /* [nnodes]: stage of each live node, -1 otherwise */
    uint8_t *act;              /* [nnodes]: the ActKind that runs it */
    int16_t *home;             /* [nvalues]: the stage holding it; -1: constants (each
                                  stage has its own) and values nothing uses */
    uint32_t *units;           /* forward nodes in topological order */
    int nunits;
    int *first;                /* [n + 1]: stage s is units first[s] .. first[s+1]-1 */
    double *time;              /* [n * ACT_KINDS]: predicted seconds per micro-batch
                                  (ACT_UPDATE: per step) */
    double *flops;             /* [n]: per micro-batch, forward and backward */
    int64_t *params;           /* [n]: trained parameters (elements) */
    bool *recompute;           /* [n]: the backward reruns the forward (--recompute) */
    PartResult part;           /* the partitioner's figures */
    const Measured *measured;  /* the node times --measured gave, or NULL */
} Stages;

/* Stages the memory plan measured over their device: (s, first, end)
 * triples the partitioner must not choose again (pipeline.c). */
typedef struct Exclusions {
    int *t;
    int n, cap;
} Exclusions;

/* The stages of one candidate; NULL, with why in rej, when it cannot run:
 * every partition left is among ex (rej keeps the caller's reason), the
 * partitioner's own bound rules them all out, the cuts o->pipe.cuts or
 * --split give cannot run, or a placement hint names what this candidate
 * does not have. */
Stages *stages_build(Graph *g, const Options *o, const Devices *ds, const Measured *m,
                     SchedKind kind, int virt, int M, const Exclusions *ex, Reject *rej);

/* ---------------------------------------------- parallel/schedule.c */

typedef struct Act {
    uint8_t kind;              /* ActKind */
    int16_t stage;
    int32_t mb;                /* micro-batch; 0 for ACT_UPDATE */
} Act;

/* Per device, the order in which its compute stream runs actions. */
typedef struct Schedule {
    SchedKind kind;
    int M, ndev, nstages;
    Act **seq;                 /* [ndev] */
    int *nseq;                 /* [ndev] */
} Schedule;

const char *schedule_name(SchedKind k);
/* NULL if kind cannot run with these stages and M; *why says what to change. */
Schedule *schedule_build(Arena *a, SchedKind kind, const Stages *st, int ndev, int M,
                         const char **why);

/* -------------------------------------------------- parallel/plan.c */

/* The streams of a device: compute, one copy stream per direction, and
 * the gradient sums over the replicas (--data-parallel). */
enum { STREAM_COMPUTE, STREAM_SEND_FWD, STREAM_SEND_BWD, STREAM_COMM, STREAMS_PER_DEV };
extern const char *const stream_kinds[STREAMS_PER_DEV];   /* "compute" ... "comm" */

/* --data-parallel: a bucket of a stage's gradients, summed over the
 * replicas by one operation on its device's communication stream once
 * the stage's last gradient action has finished them. The parameters are
 * those of updates first .. first + count - 1 of the stage's update
 * action (Plan.nodes), the last layers' first: the backward pass
 * finishes them first. */
typedef struct Bucket {
    int stage, index;          /* its stage, and its place among the stage's buckets */
    int first, count;
    double bytes;
    int cut;                   /* the node of the stage's last gradient action (its place
                                  in Plan.nodes) after which the bucket's gradients are
                                  done; -1: before the action */
} Bucket;

/* One value's memory on one stage: the value's own (at its home stage) or
 * a received copy. A buffer holds `slots` micro-batches at once; micro-batch
 * mb uses slot mb % slots. */
typedef struct Buf {
    uint32_t value;
    int stage, dev;
    int slots;
    size_t bytes;              /* one slot, rounded up to 64 */
    size_t offset;             /* in the device's arena */
    bool received;             /* written by copies from the home stage */
    bool shared;               /* holds other values than `value` too: a reshape's
                                  output in place, running statistics */
    bool acc;                  /* a parameter's gradient summed over micro-batches */
    int levels;                /* acc: the sum's tree levels (--data-parallel), one after
                                  another, bytes / levels each; 1 for a running sum */
    bool turns;                /* takes turns with other buffers for its memory (share.c) */
    bool host;                 /* in the device's host arena: an offloaded value */
    bool streamed;             /* an offloaded weight's, on the device or the host */
    int from;                  /* the buffer copies fill this one from, -1 if none */
    int shard;                 /* --zero=1: optimizer state held in R shards, this one
                                  the largest (bytes); 0: whole */
} Buf;

/* An activation offloaded (--offload): its stage's forward writes it to
 * `dev` on the device; a copy takes each micro-batch to `host` while the
 * device's next action runs, and another brings it to `fetched` while the
 * action before its backward runs; the backward reads `fetched`. */
typedef struct Offload {
    uint32_t value;
    int stage, dev, host, fetched;    /* buffers */
    int *out_during, *in_during;      /* [M]: the action of the device's sequence that
                                         each micro-batch's copy out, and back, overlaps */
} Offload;

/* A weight or optimizer state offloaded (--offload=weights): between
 * steps it lives in `host`; its device buffer `dev` holds it only in
 * windows of the device's sequence (actions first[w] .. last[w] touch
 * it), filled by a copy while the action before runs and, where the
 * window writes it, copied back while the action after runs. */
typedef struct Streamed {
    uint32_t value;
    int stage, dev, host;             /* buffers */
    int nwin;
    int *first, *last;                /* [nwin]: positions in the device's sequence */
    bool *written;                    /* [nwin]: an action of the window writes it */
    bool forward;                     /* the stage's forward reads it (evaluation fetches it) */
    uint32_t reader;                  /* a node that reads it, which its copies name */
    int *fetch_op, *evict_op;         /* [nwin]: the copies in and out (-1: none), plan_ops */
} Streamed;

/* Where the copies of window w run: the fetch during the action before the
 * window (the first action when the window starts the step), the copy
 * back during the action after it (nseq: after the last). */
static inline int streamed_fetch_during(const Streamed *w, int k)
{
    return w->first[k] > 0 ? w->first[k] - 1 : 0;
}
static inline int streamed_evict_during(const Streamed *w, int k)
{
    return w->last[k] + 1;
}

/* OPK_SUM: bucket `mb` of stage act.stage's gradients summed over the
 * replicas (Plan.buckets), on the device's communication stream. */
typedef enum { OPK_RUN, OPK_COPY, OPK_SUM } OpKind;

typedef struct PlanOp {
    uint8_t kind;              /* OpKind */
    int dev, stream;           /* the stream that runs it: dev * STREAMS_PER_DEV + kind */
    int pos;                   /* its place in that stream */
    Act act;                   /* OPK_RUN; OPK_SUM: act.stage */
    int src, dst, mb;          /* OPK_COPY: buffers and micro-batch; OPK_SUM: mb the
                                  bucket's index in its stage */
    int bucket;                /* OPK_SUM: in Plan.buckets */
    int *deps, ndeps;          /* ops on other streams that must finish first */
    int part;                  /* OPK_RUN: the part of a split action (Plan.part_end) */
    int event;                 /* the event recorded after it, -1 if none */
    double time, start, end;   /* predicted seconds (sim.c) */
} PlanOp;

typedef struct Plan {
    const Graph *g;
    const Stages *st;
    const Schedule *sc;
    const Devices *ds;
    int nstreams;
    bool global_norm;          /* --clip-norm: every update reads every stage's gradients */
    Bucket *buckets;           /* --data-parallel: the gradient sums over the replicas, */
    int nbuckets;              /* stage by stage; 0 with one replica */
    int *last_grad;            /* [nstages]: the ActKind of the stage's action that
                                  finishes its last gradients (ACT_WGRAD under zb) */
    int *nparts;               /* [nstages]: with buckets, the last micro-batch's last
                                  gradient action runs as parts, each ending where a
                                  bucket's gradients are done, so that its sum starts
                                  while the rest of the action runs; 1: whole */
    int **part_end;            /* [nstages][nparts]: the node each part ends before */
    PlanOp *ops;               /* in host issue order: a topological order */
    int nops, nevents;
    Buf *bufs;
    int nbufs;
    int *buf_of;               /* [nvalues * nstages]: buffer index, -1 if none */
    int *acc_of;               /* [nvalues]: gradient accumulator of a parameter, -1 */
    Offload *offl;             /* the offloaded activations (--offload) */
    int noffl;
    int *fetch_of;             /* [nvalues * nstages]: the fetched buffer a backward
                                  reads, -1 if the value is not offloaded */
    Streamed *wofl;            /* the offloaded weights and state (--offload=weights) */
    int nwofl;
    int *whost_of;             /* [nvalues]: the host buffer of an offloaded weight, -1 */
    size_t *host_bytes;        /* [ndev]: each device's host arena */
    uint32_t **nodes;          /* [nstages * ACT_KINDS]: the nodes of an action, in order */
    int *nnodes;
    const struct Fusion *fu;   /* the chains that run as one kernel (fuse.c) */
    const bool *blocked;       /* [nvalues]: kept in oneDNN's blocked layout (layout.c) */
    size_t *arena_bytes;       /* [ndev]: the memory plan's peak per device */
    size_t *shared_bytes;      /* [ndev]: of which buffers that take turns (share.c) */
    size_t *shared_apart;      /* [ndev]: what those buffers would take apart */
    size_t *stage_turns;       /* [nstages]: the most a stage's such buffers hold at once */
    size_t *work_offset;       /* [ndev]: the kernels' scratch, after the buffers */
    size_t *work_bytes;        /* [ndev]: the most any node of the device needs */
    size_t *slot_bytes;        /* [ndev]: of work_bytes, the last ones: a GPU's AdamW
                                  updates' slots (plan.c, runtime/cuda.c) */
    /* the simulator's prediction */
    double step_time, bubble;
    double *busy;              /* [ndev]: compute seconds per step */
    struct PlanBuild *build;   /* plan.c's work between its passes; NULL once ordered */
} Plan;

/* The node that writes parameter v's gradient of a micro-batch: its
 * producer, or where fused, the last node of its chain, which runs it. */
uint32_t plan_grad_writer(const Plan *p, uint32_t v);

/* Whether op runs a part of a split action (Plan.part_end). */
static inline bool plan_split_part(const Plan *p, const PlanOp *op)
{
    return op->kind == OPK_RUN && p->nparts && p->nparts[op->act.stage] > 1 &&
           op->act.kind == p->last_grad[op->act.stage] && op->act.mb == p->sc->M - 1;
}

/* The step's program, in passes the driver runs in order (driver.c):
 * plan_buffers (the nodes of each action, a buffer per value and stage),
 * fuse, plan_slots (lifetimes: micro-batch slots per buffer), plan_place
 * (share.c: offsets), plan_workspace (each device's scratch after its
 * buffers), plan_ops (actions and copies with their dependencies),
 * simulate, plan_order (the host's issue order; waits others imply are
 * dropped), plan_verify and
 * plan_verify_memory. With own_slots every buffer a copy reads or writes
 * has a slot per micro-batch, for schedules whose copies would otherwise
 * wait on each other (the simulation says so). */
Plan *plan_buffers(Graph *g, const Stages *st, const Schedule *sc, const Devices *ds,
                   const Options *o, bool own_slots);
void plan_slots(Plan *p);
void plan_workspace(Plan *p);
void plan_ops(Plan *p);
void plan_order(Plan *p);
int plan_buf(const Plan *p, uint32_t v, int stage);   /* -1 if the stage has none */
/* The buffer an action of kind `kind` of the stage reads v from: the
 * fetched copy of an offloaded value in the backward pass, else plan_buf. */
int plan_read(const Plan *p, uint32_t v, int stage, int kind);
/* The copy ops of buffer b are offload copies (to or from a host buffer). */
bool plan_offload_copy(const Plan *p, int b);
/* The buffer that holds value v between steps, where checkpoints read and
 * write it: its host buffer when offloaded, else its home stage's. */
int plan_home_buf(const Plan *p, uint32_t v);

/* share.c: what a device's compute stream reads and writes, in order: fn
 * gets each buffer, micro-batch and position, and the node. */
typedef void (*TouchFn)(void *ctx, int buf, int mb, int pos, bool write, uint32_t node);
void plan_walk(const Plan *p, int dev, TouchFn fn, void *ctx);
/* The same for the nodes of action i of the device's sequence alone. */
void plan_walk_action(const Plan *p, int dev, int i, TouchFn fn, void *ctx);
/* The offsets: buffers that are never alive together share memory. */
void plan_place(Plan *p, Arena *a);
/* [nvalues]: read by the host or by code after an action's nodes (graph
 * outputs, the loss node's values, parameters' gradients): never shared. */
bool *plan_read_outside(const Graph *g, Arena *a);
/* A buffer a copy sends: another stage holds a received copy of its value. */
bool plan_sent(const Plan *p, const Buf *bf);
bool moves_in_place(const Graph *g, const Node *n);   /* a reshape that may take its input's buffer */
/* A buffer and the bytes it takes; sized_largest_first orders them for qsort. */
typedef struct Sized {
    size_t bytes;
    int buf;
} Sized;
int sized_largest_first(const void *x, const void *y);

/* -------------------------------------------------- parallel/fuse.c */

/* Chains of float32 elementwise nodes of one stage action that run as one
 * kernel (mprt_ew_chain): every node of a chain but the last computes a
 * value only the next one reads, and writes nothing. */
struct Fusion {
    uint32_t *prev;            /* [nnodes]: the chain node whose value this node takes in
                                  and computes on the way, NONE if none */
    uint8_t *via;              /* [nnodes]: the input of this node that value is */
    uint32_t *tail;            /* [nnodes]: a node before the last of its chain: the
                                  last, which runs the chain; NONE otherwise */
    int nchains, nfused;       /* chains, and the nodes in them */
};

Fusion *fuse(Graph *g, const Plan *p, const Options *o);   /* none with --no-fuse */
bool fuse_constant(const Graph *g, uint32_t v, float *f);  /* a scalar float32 constant */
bool fuse_alone(const Graph *g, const Node *n);   /* bf16: the chain kernel runs n by itself */
void dump_fusion(const Graph *g, const Plan *p, const Fusion *f, FILE *out);  /* --dump=fuse */

/* ------------------------------------------------ parallel/layout.c */

/* [nvalues]: the activations of CPU devices that stay in oneDNN's blocked
 * layout (nChw16c or nChw8c) between the ops that can read and write it:
 * none under --infer or --cpu-layout=plain. */
bool *layout_blocked(const Plan *p, const Options *o, Arena *a);

/* ----------------------------------------------- parallel/offload.c */

/* The activations --offload=activations sends to host memory, with the
 * windows of their copies (buffers host and fetched still -1: plan.c
 * makes them); NULL and *n = 0 when none. */
Offload *offload_choose(const Plan *p, const Options *o, Arena *a, int *n);
/* The weights and optimizer state --offload=weights keeps in host memory,
 * with their windows (host and the ops still -1: plan.c makes them): each
 * whose windows leave its device some action without it. */
Streamed *offload_weights(const Plan *p, const Options *o, Arena *a, int *n);
/* Keeps the `keep` largest of both lists (their device buffers' bytes,
 * ties by value), in their order. */
void offload_trim(const Plan *p, Offload *acts, int *nacts, Streamed *weights, int *nweights,
                  int keep);

/* --------------------------------------------------- parallel/sim.c */

/* Runs the ops stream by stream in discrete time, filling start/end, the
 * step time, busy time and bubble fraction; false if some op can never
 * start (a wait cycle), with *stuck naming the first op of every stream
 * that cannot go on. */
bool simulate(Plan *p, const char **stuck);

/* ------------------------------------------------ parallel/verify.c */

/* Internal errors (never user errors): a wait cycle, a read of a buffer no
 * op wrote for that micro-batch, a copy whose source may be overwritten
 * before it ends. */
void plan_verify(const Plan *p);
/* verify_nodes.c: a pipeline across processes (--nodes) cannot deadlock
 * when its copies between processes wait for both sides. Each stream's
 * operations in the order it takes them, a copy between processes on the
 * sender's stream and the receiver's. */
typedef struct NodeStreams {
    int nstreams;
    int **seq, *len;
} NodeStreams;
NodeStreams node_streams(const Plan *p);
int node_streams_stuck(const Plan *p, const NodeStreams *ns);   /* an op left, or -1 */
void plan_verify_nodes(const Plan *p);
bool plan_across_nodes(const Plan *p);   /* some device is another process's */
/* verify_memory.c: a replay of the step against the memory plan */
void plan_verify_memory(const Plan *p);
const char *plan_describe_op(const Plan *p, int op);   /* "#12 forward of stage 1, ..." */

/* ---------------------------------------------- parallel/replicas.c */

/* --data-parallel and --nodes: checks the layout (one replica per process,
 * CPU devices) and turns the options into one replica's: -batch and
 * --microbatches divided by the replicas. Called once, before anything
 * reads them. */
void replicas_apply(Options *o);
/* The gradient sum over micro-batches as a fixed tree (runtime/program.c,
 * mprt_tree_add) when --data-parallel is given, so that every layout with
 * the same micro-batches adds in the same order; the buffers a parameter's
 * sum needs for `count` micro-batches of one replica. */
bool replicas_tree(const Options *o);
/* --data-parallel=auto: the replica counts a search may plan (each a
 * layout replicas_apply takes), at most max of them, into R. */
int replicas_candidates(const Options *o, int *R, int max);
int tree_levels(int count);
int tree_top(int count);   /* the level that holds the sum at the end */
/* Seconds to sum `bytes` of gradients over the replicas: a reduce-scatter
 * and an all-gather over the link between nodes. */
double replica_sum_seconds(const Options *o, const Devices *ds, double bytes);
double zero_gather_seconds(const Options *o, const Devices *ds, double bytes);
/* Plan.last_grad, and with replicas Plan.buckets: each stage's gradients
 * in buckets of at most --bucket-mb, the last parameters first. */
void plan_buckets(Plan *p, const Options *o);
double stage_grad_bytes(const Graph *g, const Stages *st, int stage);
double node_bandwidth(const Devices *ds);   /* the link between nodes, one direction */
double node_latency(const Devices *ds);

/* ---------------------------------------------- parallel/pipeline.c */

/* One candidate the search planned: its predicted step, 0 when it could
 * not run (for --dump=sweep). */
typedef struct Tried {
    SchedKind kind;
    int M;
    double step_time;
} Tried;

typedef struct Pipeline {
    Graph *g;                  /* the training graph of one micro-batch */
    Options opt;               /* as given, with batch per micro-batch and M chosen */
    Devices ds;
    const Stages *st;
    const Schedule *sc;
    const Plan *plan;
    Tried *tried;              /* every candidate of the search, in the order planned */
    int ntried;
} Pipeline;

/* The passes the search runs for each candidate, from the driver
 * (driver.c): the training graph of one micro-batch (o->batch rows), and
 * the step's program for a partition and schedule. */
typedef struct Passes {
    Graph *(*front)(Arena *a, const Options *o);
    Plan *(*plan)(Graph *g, const Stages *st, const Schedule *sc, const Devices *ds,
                  const Options *o);
} Passes;

/* Plans the step: the given schedule and M, or (--schedule=auto, no
 * --microbatches) each candidate simulated, keeping the fastest whose
 * memory plan fits. front builds the training graph for a micro-batch. */
Pipeline *pipeline_choose(Arena *a, const Options *o, const Passes *ps);
void check_microbatches(const Options *o);   /* -batch a multiple of --microbatches */

/* =================================================================== */
/* compiler/emit/ — the trainer, the dumps, export */
/* =================================================================== */

/* --------------------------------------------------- emit/codegen.c */

/* train.c + weights; fu: the chains that run as one kernel each */
void codegen(Graph *g, const Options *o, const Plan *plan, const Fusion *fu);
/* --check: the same program written nowhere; every node whose code cannot
 * be written has its error printed; returns how many. */
int codegen_check(Graph *g, const Options *o, const Plan *plan, const Fusion *fu);

/* -------------------------------------------------- emit/pipedump.c */

void dump_partition(const Pipeline *pl, FILE *out);      /* --dump=partition */
void dump_schedule(const Pipeline *pl, FILE *out);       /* --dump=schedule */
void dump_partition_dot(const Pipeline *pl, FILE *out);  /* --dump=partition-dot */
void dump_memory(const Pipeline *pl, FILE *out);         /* --dump=memory (memdump.c) */
void write_trace(const Pipeline *pl, const char *path);  /* --trace: Chrome trace JSON */

/* ------------------------------------------------- emit/timeline.c */

/* One operation of a step: an action (act: ACT_FWD .. ACT_UPDATE) of a
 * stage on a micro-batch, or a copy to a stage, on a device stream. */
typedef struct TlOp {
    int stream;                /* device * STREAMS_PER_DEV + stream kind */
    double start, end;         /* seconds from the step's start */
    bool copy;
    int act, stage, mb;        /* act TL_SUM: a sum over the replicas, mb its bucket */
    int dst_dev;               /* copies: the receiving device, -1 if unknown */
} TlOp;
enum { TL_SUM = ACT_KINDS };

/* A step as a timeline: the simulator's prediction, or a run a trainer
 * measured, read back from its --trace. What gantt.c draws. */
typedef struct Timeline {
    const char *source;        /* "predicted" or "measured" */
    const char *file;          /* the trace it was read from, or NULL */
    const char *schedule;      /* NULL if the trace does not say */
    int M, nstages, ndev;      /* M 0 if the trace does not say */
    const char **devices;      /* [ndev] */
    double *memory;            /* [ndev]: each arena's bytes */
    const double *capacity;    /* [ndev]: each device's memory, or NULL */
    TlOp *ops;
    int nops;
    double step, bubble;       /* seconds; the idle share of the compute streams */
    double mean_step;          /* a measured run's mean step over its steps, or 0 */
} Timeline;

Timeline *timeline_of_plan(const Pipeline *pl);
Timeline *timeline_read(Arena *a, const char *path);    /* a --trace file */
Timeline *timeline_parse(Arena *a, const char *path, const char *text, size_t n);
bool timeline_is_trace(const char *text, size_t n);     /* a top-level "traceEvents" */

/* ---------------------------------------------------- emit/gantt.c */

/* --dump=gantt=FILE.svg: the predicted step, and below it each run
 * --measured gave a trace of; --gantt-from: timelines alone. */
void write_gantt(const Pipeline *pl, const Measured *m, const char *path);
void write_gantt_timelines(Arena *a, const Timeline *const *tl, int n, const char *path);
/* --dump=sweep=FILE.svg, with the measured runs' steps as points */
void write_sweep(const Pipeline *pl, const Measured *m, const char *path);
/* --dump=costs: each node's predicted (and measured) time (costdump.c) */
void dump_costs(const Pipeline *pl, const Measured *m, FILE *out);

/* ------------------------------------------------------ emit/dump.c */

void dump_ir(Graph *g, FILE *out);
void dump_shapes(Graph *g, FILE *out);

/* ------------------------------------------------ emit/onnx_write.c */

/* Writes g (as imported, before shapes are bound: symbolic dimensions stay
 * symbolic) as an ONNX model with its parameters as initializers; the
 * outputs' types come from `typed` (the same model after shape inference)
 * when it is not NULL. */
void onnx_write(Graph *g, const Graph *typed, const char *path);

/* ---------------------------------------------------- emit/export.c */

/* `mpcc export model.onnx ckpt.safetensors -o trained.onnx`: argv[0] is
 * "export"; returns the exit status (errors exit through diag.c). */
int export_main(int argc, char **argv);

/* =================================================================== */
/* compiler/ — the driver */
/* =================================================================== */

/* ------------------------------------------------------------ cli.c */

void cli_parse(Arena *a, int argc, char **argv, Options *o);

/* --------------------------------------------------------- driver.c */

/* The passes in order (driver.c lists them): the front end's model, the
 * training graph of one micro-batch, the step's program of one partition
 * and schedule, and the two together as the search's Passes. */
extern Graph *(*driver_import)(Arena *a, const char *path);   /* import_model */
void driver_analyse(Arena *a, const Options *o, Graph *g);
Graph *driver_model(Arena *a, const Options *o);
Graph *driver_training(Arena *a, const Options *o);
Plan *driver_plan(Graph *g, const Stages *st, const Schedule *sc, const Devices *ds,
                  const Options *o);
extern const Passes driver_passes;
const Plan *driver_forward(Arena *a, const Options *o, Graph **g);   /* --infer's plan */
int driver_run(Arena *a, Options *o);        /* a run on parsed options: its exit status */

#endif
