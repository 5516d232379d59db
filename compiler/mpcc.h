/* mpcc.h — the one internal header of the compiler.
 *
 * Sections follow the files: utilities and diagnostics first, then the IR,
 * then one section per pass in pipeline order (see main.c). Types from
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

#if defined(__GNUC__)
#define FMT(a, b) __attribute__((format(printf, a, b)))
#else
#define FMT(a, b)
#endif

/* ------------------------------------------------------------------ util.c */

typedef struct Arena Arena;

Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t size);                /* zeroed, 16-aligned */
void *arena_array(Arena *a, size_t n, size_t size);      /* overflow-checked */
void *arena_grow(Arena *a, void *p, size_t old_n, size_t new_n, size_t size);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) FMT(2, 3);
void arena_defer(Arena *a, void (*fn)(void *), void *p); /* run by arena_free */

/* Writes s with C escapes for '\\', '"' and control bytes, so a name from a
 * model file can never break a line of output or a C string/comment. */
void fput_escaped(FILE *f, const char *s);
char *str_escaped(Arena *a, const char *s, size_t max_len);
bool parse_i64(const char *s, int64_t *out);             /* whole string, decimal */
bool mul_overflows(int64_t a, int64_t b, int64_t *out);  /* a,b >= 0 */
bool add_overflows(int64_t a, int64_t b, int64_t *out);

/* ------------------------------------------------------------------ diag.c */

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
_Noreturn void mpcc_die(const char *file, int line, const char *fmt, ...) FMT(3, 4);
extern jmp_buf *diag_jmp;   /* set by the fuzzer and tests: errors unwind here */
extern bool diag_quiet;     /* suppress diagnostics (fuzzing) */

#define MPCC_ASSERT(c) \
    ((c) ? (void)0 : mpcc_die(__FILE__, __LINE__, "assertion failed: %s", #c))
#define unreachable() mpcc_die(__FILE__, __LINE__, "unreachable code reached")

/* -------------------------------------------------------------------- ir.c */

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

typedef enum Op {
    OP_UNKNOWN,
#define OP(id, name, mi, ma, mo, mao, fl) OP_##id,
#include "ops.def"
#undef OP
    OP_COUNT
} Op;

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
} Node;

enum { PH_FORWARD, PH_BACKWARD, PH_UPDATE };

typedef struct NameMap NameMap;

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
    uint32_t *order, norder, cap_order;  /* live nodes in topological order */
    NameMap *names;
    uint32_t loss, labels; /* training: the loss and the labels input, or NONE */
    const void *source;    /* the model file's bytes (mapped) */
    size_t source_size;
} Graph;

Graph *ir_new(Arena *a, const char *file);
uint32_t ir_find(Graph *g, const char *name);           /* NONE if absent */
uint32_t ir_value(Graph *g, const char *name);          /* find or create */
uint32_t ir_add_node(Graph *g, Op op, const char *op_type, const char *name);
uint32_t ir_new_value(Graph *g, const char *name, DType t, const Shape *s); /* unique name */
uint32_t ir_new_const(Graph *g, const char *name, const Tensor *t);
uint32_t ir_emit(Graph *g, Op op, const char *name, const uint32_t *in, uint32_t nin,
                 const uint32_t *out, uint32_t nout, uint8_t phase);  /* appends to order */
void ir_set_int(Graph *g, Node *n, const char *name, int64_t v);
void ir_set_float(Graph *g, Node *n, const char *name, double v);
void ir_set_ints(Graph *g, Node *n, const char *name, const int64_t *v, uint32_t count);
void ir_copy_attrs(Graph *g, Node *dst, const Node *src);
const Attr *ir_attr(const Node *n, const char *name);   /* NULL if absent */
int64_t attr_int(const Node *n, const char *name, int64_t dflt);
double attr_float(const Node *n, const char *name, double dflt);
const char *attr_str(const Node *n, const char *name, const char *dflt);
const int64_t *attr_ints(const Node *n, const char *name, uint32_t *count);
Loc value_loc(const Graph *g, uint32_t v);
void ir_toposort(Graph *g);   /* fills order; errors on cycles and dangling inputs */
void ir_verify(Graph *g);     /* internal consistency, debug builds after each pass */

/* ------------------------------------------------------------------ wire.c */

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

/* ------------------------------------------------------------------ onnx.c */

Graph *onnx_import(Arena *a, const char *path);
Graph *onnx_import_bytes(Arena *a, const char *path, const void *data, size_t n);

/* ----------------------------------------------------------------- bind.c */

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

typedef struct Options {
    const char *input;
    const char *output;        /* -o */
    int gpus, cpus;
    int64_t batch;             /* -batch, 0 if not given */
    ShapeBinding *shapes;      /* --shapes */
    uint32_t nshapes;
    bool dump_ir, dump_shapes, dump_grad;
    bool check;
    bool list_ops;
    TrainOptions train;
    const char *cmdline;       /* the command line, for the generated header */
} Options;

/* Fixes input shapes; with require, a symbolic dimension left is an error,
 * otherwise the result says whether every input is static. */
bool bind_shapes(Graph *g, const Options *o, bool require);

/* ------------------------------------------------------------------ loss.c */

void add_loss(Graph *g, const Options *o);      /* sets g->loss and g->labels */

/* -------------------------------------------------------------- autodiff.c */

void autodiff(Graph *g, const Options *o);      /* gradients of g->loss */

/* ----------------------------------------------------------------- optim.c */

void add_optimizer(Graph *g, const Options *o);

/* --------------------------------------------------------------- codegen.c */

void codegen_cpu(Graph *g, const Options *o);   /* writes -o train.c and the weights */

/* ---------------------------------------------------------------- sha256.c */

void sha256_hex(const void *data, size_t n, char out[65]);

/* ----------------------------------------------------------------- check.c */

int check_ops(Graph *g, FILE *out);   /* returns the number of problem op types */
void list_ops(FILE *out);             /* the op table as Markdown */

/* ---------------------------------------------------------------- shapes.c */

void infer_shapes(Graph *g);          /* also folds constants through fold.c */

/* Shared with fold.c, which evaluates what shape inference sized. */
typedef struct SliceParams {
    int64_t start[MAX_RANK], step[MAX_RANK], size[MAX_RANK];
} SliceParams;
void slice_params(Graph *g, Node *n, SliceParams *p);
int64_t *split_sizes(Graph *g, Node *n, int *axis);
void transpose_perm(Graph *g, Node *n, int *perm);
double dropout_ratio(Graph *g, const Node *n);         /* 0 when not training */
void resize_scales(Graph *g, const Node *n, double scale[2]);   /* H and W, 4-D only */

/* ------------------------------------------------------------------ fold.c */

bool fold_node(Graph *g, Node *n);    /* true if n was evaluated and removed */
void prune(Graph *g);                 /* drop dead nodes and unused constants */

/* ------------------------------------------------------------------ dump.c */

void dump_ir(Graph *g, FILE *out);
void dump_shapes(Graph *g, FILE *out);

/* ------------------------------------------------------------------- cli.c */

void cli_parse(Arena *a, int argc, char **argv, Options *o);

/* ---------------------------------------------------------------- export.c */

/* `mpcc export model.onnx ckpt.safetensors -o trained.onnx`: argv[0] is
 * "export"; returns the exit status (errors exit through diag.c). */
int export_main(int argc, char **argv);

#endif
