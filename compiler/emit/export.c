/* export.c — `mpcc export model.onnx ckpt.safetensors -o trained.onnx`:
 * the weights of a checkpoint, written back into the model they were
 * trained from, for deployment with any ONNX tool.
 *
 * The model is imported first (so a bad model fails as it does for the
 * compiler), then its bytes are copied at the protobuf wire level: only the
 * initializers that take new values are re-encoded, their data fields
 * (raw_data, float_data, ..., external_data) replaced by one raw_data that
 * holds the checkpoint's bytes. Nodes, inputs, outputs, metadata and every
 * field mpcc does not know are copied byte for byte. Initializers held in
 * external data are written inline too, so the output is one file; a result
 * over ONNX's 2 GB limit for one file is refused.
 *
 * Checks, in order: every floating-point initializer is in the checkpoint,
 * with the same dtype and shape (the optimizer state beside the weights is
 * not looked at; a float64, float16 or bfloat16 weight, which trains in
 * float32, is converted back to its type); the checkpoint's model_sha256, when it has one, is the
 * model's. A weight the compiler untied from an Identity (export_mode.c) is
 * in the checkpoint under the Identity's output name: that Identity node is
 * left out and its output becomes an initializer of its own. The output is written to FILE.tmp and renamed, so a failure
 * leaves an existing FILE as it was.
 *
 * --dtype=bf16 (or fp32) stores each weight in that type instead: the
 * initializer is renamed (NAME_bf16) and a Cast node back to the model's
 * type, written before the graph's first node, gives NAME as before, so the
 * graph and its types are the model's and any ONNX runtime runs it.
 */
#include "mpcc.h"
#include "mprt.h"

#include <string.h>

#define ONNX_MAX_BYTES 2000000000u  /* onnx.checker's limit for one file */

/* Fields of the messages that export walks (onnx.proto). */
enum { MODEL_GRAPH = 7, GRAPH_NODE = 1, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11,
       GRAPH_OUTPUT = 12, TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_NAME = 8,
       TENSOR_RAW_DATA = 9, TENSOR_DATA_LOCATION = 14, DATA_LOCATION_EXTERNAL = 1,
       NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
       VALUE_INFO_NAME = 1, ATTR_NAME = 1, ATTR_I = 3, ATTR_TYPE = 20, ATTR_TYPE_INT = 2 };

/* Cast to and from bfloat16 is in the default domain from opset 13. */
#define BF16_CAST_OPSET 13

/* A weight stored in another type than the model's (--dtype): its
 * initializer's name, and the Cast node that gives the model its own. */
typedef struct Retyped {
    const char *stored;          /* the initializer's new name */
    DType type;                  /* the type it is stored in */
    Span cast;                   /* the NodeProto, encoded */
} Retyped;

/* One initializer of the graph, as the model file holds it. */
typedef struct Init {
    Span field;                  /* the graph's field, key and length included */
    Span tensor;                 /* the TensorProto: the field's payload */
    const char *name;
    const Value *val;            /* as imported */
    const MprtStTensor *ckpt;    /* its tensor in the checkpoint, or NULL */
    bool external;               /* its data is in an external file */
    bool rewrite;                /* re-encoded with data as raw_data */
    Retyped re;                  /* re.stored: stored in re.type (--dtype) */
    Span data;
    size_t size;                 /* the TensorProto's length as written */
} Init;

/* A weight shared through an Identity node, trained as one of its own. */
typedef struct Untied {
    int32_t node;                /* the Identity's index in the file */
    Span field;                  /* its field in the graph, left out */
    const char *name;            /* its output, now an initializer */
    const Value *weight;         /* the weight it copied, as imported */
    const MprtStTensor *ckpt;
    Retyped re;                  /* as Init's */
    Span data;
    size_t size;                 /* the new TensorProto's length */
} Untied;

typedef struct Export {
    Arena *a;
    const char *model, *ckpt, *output;
    DType dtype;                 /* --dtype: the weights' type; DT_UNDEFINED: the model's */
    Graph *g;
    MprtStFile st;
    Span graph_field, graph;     /* the model's graph field; its GraphProto */
    Init *inits;
    uint32_t ninits, cap;
    Untied *untied;
    uint32_t nuntied;
    size_t graph_size, model_size, written;
    bool casts_written;          /* the Cast nodes, before the graph's first node */
    MprtOut out;
} Export;

static const char help_text[] =
"usage: mpcc export <model.onnx> <ckpt.safetensors> -o <trained.onnx> [--dtype=bf16|fp32]\n"
"\n"
"Writes the weights of a checkpoint (from the generated trainer's\n"
"--save, or its initial train.weights.safetensors) back into the ONNX model\n"
"they belong to, for onnxruntime, onnx and PyTorch tooling.\n"
"\n"
"  -o FILE, --output=FILE   the model to write (required); written to\n"
"                           FILE.tmp and renamed, so a failed export leaves\n"
"                           an existing FILE as it was\n"
"  --dtype=bf16|fp32        store the weights in bfloat16 (half the bytes of\n"
"                           float32) or float32, each with a Cast node back to\n"
"                           the model's type, so the graph is unchanged;\n"
"                           default: the model's own types. bf16 needs opset 13\n"
"  -h, --help               this text\n"
"\n"
"Every initializer of the model that the checkpoint holds by name gets the\n"
"checkpoint's values; dtype and shape must match. Every floating-point\n"
"initializer (weight) must be in the checkpoint, and a checkpoint that\n"
"names the model's SHA-256 must name this model's. Integer initializers\n"
"not in the checkpoint and the graph itself are copied unchanged, and the\n"
"optimizer state in the checkpoint (NAME.momentum_buffer, NAME.exp_avg,\n"
"NAME.exp_avg_sq) is left out. A weight the compiler untied from an Identity\n"
"node (an inference export shares equal initializers so) becomes an\n"
"initializer under the Identity's output name, the node left out.\n"
"Weights held in external data are written\n"
"inline: the result is one .onnx file, at most 2 GB.\n"
"\n"
"Exit status: 0 success, 1 a problem with the inputs or the command line.\n"
"Documentation: docs/trainer.md, section \"Weights out\".\n";

/* ---- the command line ---- */

static _Noreturn void usage_error(Export *e, const char *fmt, const char *arg)
{
    fputs("mpcc: error: ", stderr);
    fprintf(stderr, fmt, str_escaped(e->a, arg, 160));
    fputs("; see mpcc export --help\n", stderr);
    exit(1);
}

static DType parse_dtype(Export *e, const char *s)
{
    if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        return DT_BF16;
    if (strcmp(s, "fp32") == 0 || strcmp(s, "float32") == 0 || strcmp(s, "float") == 0)
        return DT_F32;
    usage_error(e, "unknown --dtype '%s' (known: bf16, fp32)", s);
}

/* `-o F`, `-o=F`, `--output F`, `--output=F`, as the compiler's options;
 * `--dtype=T` or `--dtype T`. */
static void parse_option(Export *e, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *name = arg + (arg[1] == '-' ? 2 : 1);
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    if ((len == 1 && name[0] == 'h') || (len == 4 && strncmp(name, "help", 4) == 0)) {
        fputs(help_text, stdout);
        exit(0);
    }
    if (len == 5 && strncmp(name, "dtype", 5) == 0 && arg[1] == '-') {
        if (!eq && *i + 1 >= argc)
            usage_error(e, "option '%s' needs a type: bf16 or fp32", arg);
        e->dtype = parse_dtype(e, eq ? eq + 1 : argv[++*i]);
        return;
    }
    if (!((len == 1 && name[0] == 'o') || (len == 6 && strncmp(name, "output", 6) == 0)))
        usage_error(e, "unknown option '%s' for export", arg);
    if (eq)
        e->output = eq + 1;
    else if (*i + 1 < argc)
        e->output = argv[++*i];
    else
        usage_error(e, "option '%s' needs a file name", arg);
    if (!e->output[0])
        usage_error(e, "option '%s' needs a file name", arg);
}

static void parse_args(Export *e, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] == '-' && arg[1]) {
            parse_option(e, argc, argv, &i);
        } else if (!e->model) {
            e->model = arg;
        } else if (!e->ckpt) {
            e->ckpt = arg;
        } else {
            usage_error(e, "export takes one model and one checkpoint; '%s' is one "
                        "argument too many", arg);
        }
    }
    if (!e->ckpt)
        usage_error(e, "export needs a model and a checkpoint: mpcc export model.onnx "
                    "ckpt.safetensors -o trained.onnx%s", "");
    if (!e->output)
        error_file(e->model, "give -o trained.onnx to say where to write the model "
                   "with the weights of %s", str_escaped(e->a, e->ckpt, 160));
}

/* A runtime message starts with the file's name, which the diagnostic
 * already shows. */
static _Noreturn void fail_runtime(const char *file, const char *err)
{
    size_t n = strlen(file);
    if (strncmp(err, file, n) == 0 && strncmp(err + n, ": ", 2) == 0)
        err += n + 2;
    error_file(file, "%s", err);
}

/* ---- the protobuf wire format (wire.c) ---- */

/* The field at *p; the import has already checked the bytes, so a failure
 * here is a bug. */
static void next_field(const uint8_t **p, const uint8_t *end, WireField *f)
{
    bool ok = wire_next(p, end, f);
    MPCC_ASSERT(ok);
}

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80)
        v >>= 7, n++;
    return n;
}

static size_t field_size(uint32_t num, size_t len)
{
    return varint_size((uint64_t)num << 3 | 2) + varint_size(len) + len;
}

/* ---- the model's initializers ---- */

static void add_init(Export *e, Span field, Span tensor)
{
    if (e->ninits == e->cap) {
        uint32_t cap = e->cap ? e->cap * 2 : 64;
        e->inits = arena_grow(e->a, e->inits, e->ninits, cap, sizeof(Init));
        e->cap = cap;
    }
    Init *in = &e->inits[e->ninits++];
    in->field = field;
    in->tensor = tensor;
    in->name = "";
    const uint8_t *end = tensor.p + tensor.n;
    WireField f;
    for (const uint8_t *p = tensor.p; p < end;) {
        next_field(&p, end, &f);
        if (f.num == TENSOR_NAME && f.wire == 2)
            in->name = arena_strndup(e->a, (const char *)f.payload.p, f.payload.n);
        else if (f.num == TENSOR_DATA_LOCATION && f.wire == 0)
            in->external = f.varint == DATA_LOCATION_EXTERNAL;
    }
    uint32_t v = ir_find(e->g, in->name);
    MPCC_ASSERT(v != NONE && e->g->values[v].data);
    in->val = &e->g->values[v];
}

/* ---- weights untied from Identity nodes ---- */

static Untied *untied_at(Export *e, int32_t node)
{
    for (uint32_t i = 0; i < e->nuntied; i++)
        if (e->untied[i].node == node)
            return &e->untied[i];
    return NULL;
}

/* The name and type fields of a TensorProto. */
static size_t name_type_size(const char *name, DType type)
{
    return field_size(TENSOR_NAME, strlen(name)) + varint_size(TENSOR_DATA_TYPE << 3) +
           varint_size((uint64_t)type);
}

static size_t untied_size(const Untied *u)
{
    size_t n = name_type_size(u->re.stored ? u->re.stored : u->name,
                              u->re.stored ? u->re.type : u->weight->dtype) +
               field_size(TENSOR_RAW_DATA, u->data.n);
    for (int i = 0; i < u->weight->shape.rank; i++)
        n += varint_size(TENSOR_DIMS << 3) + varint_size((uint64_t)u->weight->shape.d[i]);
    return n;
}

/* The Identity nodes of a weight whose output the checkpoint holds. */
static void find_untied(Export *e)
{
    Graph *g = e->g;
    e->untied = arena_array(e->a, g->nnodes + 1, sizeof *e->untied);
    for (uint32_t i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->op != OP_IDENTITY || n->nin != 1 || n->nout != 1 || n->loc.index < 0)
            continue;
        const Value *w = &g->values[n->in[0]];
        const char *name = g->values[n->out[0]].name;
        const MprtStTensor *t = mprt_st_find(&e->st, name);
        if (w->kind != VK_PARAM || !dtype_is_float(w->dtype) || !t)
            continue;
        Untied *u = &e->untied[e->nuntied++];
        *u = (Untied){.node = n->loc.index, .name = name, .weight = w, .ckpt = t};
    }
}

/* The graph's bytes and its initializers, in file order. */
static void find_initializers(Export *e)
{
    const uint8_t *end = (const uint8_t *)e->g->source + e->g->source_size;
    WireField f;
    for (const uint8_t *p = e->g->source; p < end;) {
        next_field(&p, end, &f);
        if (f.num == MODEL_GRAPH && f.wire == 2)
            e->graph_field = f.whole, e->graph = f.payload;
    }
    end = e->graph.p + e->graph.n;
    int32_t node = 0;
    for (const uint8_t *p = e->graph.p; p < end;) {
        next_field(&p, end, &f);
        if (f.num == GRAPH_INITIALIZER && f.wire == 2)
            add_init(e, f.whole, f.payload);
        if (f.num == GRAPH_NODE && f.wire == 2) {
            Untied *u = untied_at(e, node++);
            if (u)
                u->field = f.whole;
        }
    }
}

/* ---- matching them with the checkpoint ---- */

static const DType dtype_of_mprt[MPRT_DTYPE_COUNT] = {
    [MPRT_F32] = DT_F32, [MPRT_F64] = DT_F64, [MPRT_I64] = DT_I64, [MPRT_I32] = DT_I32,
    [MPRT_U8] = DT_U8, [MPRT_BOOL] = DT_BOOL, [MPRT_F16] = DT_F16, [MPRT_BF16] = DT_BF16,
    [MPRT_I16] = DT_I16, [MPRT_I8] = DT_I8,
};

static const char *esc(Export *e, const char *s)
{
    return str_escaped(e->a, s, 160);
}

/* A float64, float16 or bfloat16 weight trains in float32 (float32.c):
 * its checkpoint tensor is float32, converted back when written. */
static bool widened(DType ckpt, DType model)
{
    return ckpt == DT_F32 && (model == DT_F64 || model == DT_F16 || model == DT_BF16);
}

static void check_same_type(Export *e, const char *name, const MprtStTensor *t,
                            const Value *val, bool convertible)
{
    Shape s = {.rank = t->rank};
    memcpy(s.d, t->shape, sizeof(int64_t) * (size_t)t->rank);
    DType dt = dtype_of_mprt[t->dtype];
    bool type_ok = dt == val->dtype || (convertible && widened(dt, val->dtype));
    if (type_ok && shape_eq(&s, &val->shape))
        return;
    error_file(e->ckpt, "tensor '%s' is %s %s here but %s %s in %s; export a checkpoint "
               "of this model", esc(e, name), dtype_name(dt), shape_str(e->a, &s),
               dtype_name(val->dtype), shape_str(e->a, &val->shape), esc(e, e->model));
}

/* Finds each initializer's checkpoint tensor; at least one weight must be
 * there, then every weight. */
static void match_checkpoint(Export *e)
{
    uint32_t weights = 0, found = 0;
    const char *first = NULL;
    for (uint32_t i = 0; i < e->ninits; i++) {
        Init *in = &e->inits[i];
        in->ckpt = mprt_st_find(&e->st, in->name);
        if (!dtype_is_float(in->val->dtype))
            continue;
        weights++;
        found += in->ckpt != NULL;
        first = first ? first : in->name;
    }
    if (!weights)
        error_file(e->model, "has no floating-point initializers, so no weights to export");
    if (!found)
        error_file(e->ckpt, "holds none of the %u weights of %s (such as '%s'); is it a "
                   "checkpoint of another model?", weights, esc(e, e->model), esc(e, first));
    for (uint32_t i = 0; i < e->ninits; i++) {
        const Init *in = &e->inits[i];
        if (in->ckpt)
            check_same_type(e, in->name, in->ckpt, in->val, true);
        else if (dtype_is_float(in->val->dtype))
            error_file(e->ckpt, "has no tensor '%s', a weight of %s; is it a checkpoint "
                       "of another model?", esc(e, in->name), esc(e, e->model));
    }
    for (uint32_t i = 0; i < e->nuntied; i++)
        check_same_type(e, e->untied[i].name, e->untied[i].ckpt, e->untied[i].weight, false);
}

/* The trainer records the SHA-256 of the model file it was compiled from. */
static void check_model_hash(Export *e)
{
    const char *want = mprt_st_meta(&e->st, "model_sha256");
    if (!want)
        return;
    char hash[65];
    sha256_hex(e->g->source, e->g->source_size, hash);
    if (strcmp(want, hash) != 0)
        error_file(e->ckpt, "is a checkpoint of another model file: its model_sha256 is "
                   "%.16s..., %s has %.16s...; export into the model it was trained from",
                   esc(e, want), esc(e, e->model), hash);
}

/* ---- sizes ---- */

static bool is_data_field(uint32_t num)
{
    switch (num) {
    case 4: case 5: case 6: case 7: case 9: case 10: case 11:   /* *_data, raw_data */
    case 13: case TENSOR_DATA_LOCATION:                         /* external_data */
        return true;
    default:
        return false;
    }
}

/* Whether field f of an initializer's TensorProto is written again as it
 * is: not its data, nor its name and type where it is retyped. */
static bool kept_field(const Init *in, const WireField *f)
{
    if (in->re.stored && (f->num == TENSOR_NAME || f->num == TENSOR_DATA_TYPE))
        return false;
    return !is_data_field(f->num);
}

static size_t tensor_size(const Init *in)
{
    if (!in->rewrite)
        return in->tensor.n;
    size_t kept = 0;
    const uint8_t *end = in->tensor.p + in->tensor.n;
    WireField f;
    for (const uint8_t *p = in->tensor.p; p < end;) {
        next_field(&p, end, &f);
        if (kept_field(in, &f))
            kept += f.whole.n;
    }
    if (in->re.stored)
        kept += name_type_size(in->re.stored, in->re.type);
    return kept + field_size(TENSOR_RAW_DATA, in->data.n);
}

/* The checkpoint's bytes of a tensor, in type want. */
static Span checkpoint_data(Export *e, const MprtStTensor *t, DType want)
{
    if (dtype_of_mprt[t->dtype] == want)
        return (Span){t->data, t->nbytes};
    size_t n = t->nbytes / 4;
    Tensor out = {.dtype = want, .data = arena_alloc(e->a, n * dtype_size(want) + 8)};
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, (const char *)t->data + i * 4, 4);
        tensor_set_f64(&out, (int64_t)i, v);
    }
    return (Span){out.data, n * dtype_size(want)};
}

/* ---- weights in another type (--dtype) ---- */

/* Whether the string field `num` of a message holds s. */
static bool has_string(Span msg, uint32_t num, const char *s)
{
    size_t n = strlen(s);
    const uint8_t *end = msg.p + msg.n;
    WireField f;
    for (const uint8_t *p = msg.p; p < end;) {
        next_field(&p, end, &f);
        if (f.num == num && f.wire == 2 && f.payload.n == n && memcmp(f.payload.p, s, n) == 0)
            return true;
    }
    return false;
}

/* Whether the graph's inputs (and, with `all`, its outputs, value_info,
 * nodes' inputs and outputs, initializers) name s. */
static bool graph_names(const Export *e, const char *s, bool all)
{
    const uint8_t *end = e->graph.p + e->graph.n;
    WireField f;
    for (const uint8_t *p = e->graph.p; p < end;) {
        next_field(&p, end, &f);
        if (f.wire != 2)
            continue;
        if (f.num == GRAPH_INPUT && has_string(f.payload, VALUE_INFO_NAME, s))
            return true;
        if (!all)
            continue;
        if ((f.num == GRAPH_OUTPUT || f.num == 13) && has_string(f.payload, VALUE_INFO_NAME, s))
            return true;
        if (f.num == GRAPH_NODE && (has_string(f.payload, NODE_INPUT, s) ||
                                    has_string(f.payload, NODE_OUTPUT, s)))
            return true;
        if (f.num == GRAPH_INITIALIZER && has_string(f.payload, TENSOR_NAME, s))
            return true;
    }
    return false;
}

/* NAME_bf16 (or NAME_bf16_2, ...): a name the model does not use. */
static const char *stored_name(Export *e, const char *name, DType t)
{
    const char *s = arena_printf(e->a, "%s_%s", name, dtype_name(t));
    for (int k = 2; graph_names(e, s, true); k++)
        s = arena_printf(e->a, "%s_%s_%d", name, dtype_name(t), k);
    return s;
}

static uint8_t *enc_varint(uint8_t *p, uint64_t v)
{
    for (; v >= 0x80; v >>= 7)
        *p++ = (uint8_t)(v | 0x80);
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *enc_string(uint8_t *p, uint32_t num, const char *s)
{
    size_t n = strlen(s);
    p = enc_varint(enc_varint(p, (uint64_t)num << 3 | 2), n);
    memcpy(p, s, n);
    return p + n;
}

/* The NodeProto of `to = Cast(from, to=type)`. */
static Span cast_node(Export *e, const char *from, const char *to, DType type)
{
    size_t attr = field_size(ATTR_NAME, 2) + varint_size(ATTR_I << 3) +
                  varint_size((uint64_t)type) + varint_size(ATTR_TYPE << 3) +
                  varint_size(ATTR_TYPE_INT);
    size_t n = field_size(NODE_INPUT, strlen(from)) + field_size(NODE_OUTPUT, strlen(to)) +
               field_size(NODE_OP_TYPE, 4) + field_size(NODE_ATTRIBUTE, attr);
    uint8_t *b = arena_alloc(e->a, n), *p = b;
    p = enc_string(enc_string(enc_string(p, NODE_INPUT, from), NODE_OUTPUT, to), NODE_OP_TYPE,
                   "Cast");
    p = enc_varint(enc_varint(p, NODE_ATTRIBUTE << 3 | 2), attr);
    p = enc_string(p, ATTR_NAME, "to");
    p = enc_varint(enc_varint(p, ATTR_I << 3), (uint64_t)type);
    p = enc_varint(enc_varint(p, ATTR_TYPE << 3), ATTR_TYPE_INT);
    MPCC_ASSERT((size_t)(p - b) == n);
    return (Span){b, n};
}

/* The type weight `name` (of the model's type `model`) is stored in. */
static DType stored_type(const Export *e, DType model)
{
    return e->dtype != DT_UNDEFINED && dtype_is_float(model) ? e->dtype : model;
}

static void retype(Export *e, Retyped *re, const char *name, DType t, DType model)
{
    if (t == DT_BF16 && e->g->opset < BF16_CAST_OPSET)
        error_file(e->model, "imports opset %lld of the ONNX domain; --dtype=bf16 needs its "
                   "Cast to and from bfloat16, opset %d or later: convert the model with "
                   "onnx.version_converter, or export without --dtype",
                   (long long)e->g->opset, BF16_CAST_OPSET);
    if (graph_names(e, name, false))
        error_file(e->model, "weight '%s' is also a graph input, so --dtype cannot store it "
                   "under another name; export without --dtype", esc(e, name));
    re->stored = stored_name(e, name, t);
    re->type = t;
    re->cast = cast_node(e, re->stored, name, model);
}

/* What each initializer becomes, and the size of the graph and the model
 * (from the fields' sizes as found, however their lengths were encoded). */
static void plan(Export *e)
{
    for (uint32_t i = 0; i < e->ninits; i++) {
        Init *in = &e->inits[i];
        if (in->ckpt) {
            DType t = stored_type(e, in->val->dtype);
            in->data = checkpoint_data(e, in->ckpt, t);
            in->rewrite = true;
            if (t != in->val->dtype)
                retype(e, &in->re, in->name, t, in->val->dtype);
        } else if (in->external) {
            in->data = (Span){in->val->data->data, in->val->data->nbytes};
            in->rewrite = true;
        }
        in->size = tensor_size(in);
    }
    size_t kept = e->graph.n, added = 0;
    for (uint32_t i = 0; i < e->ninits; i++) {
        if (!e->inits[i].rewrite)
            continue;
        kept -= e->inits[i].field.n;
        added += field_size(GRAPH_INITIALIZER, e->inits[i].size);
    }
    for (uint32_t i = 0; i < e->nuntied; i++) {
        Untied *u = &e->untied[i];
        DType t = stored_type(e, u->weight->dtype);
        u->data = checkpoint_data(e, u->ckpt, t);
        if (t != u->weight->dtype)
            retype(e, &u->re, u->name, t, u->weight->dtype);
        u->size = untied_size(u);
        MPCC_ASSERT(u->field.p);
        kept -= u->field.n;
        added += field_size(GRAPH_INITIALIZER, u->size);
        if (u->re.stored)
            added += field_size(GRAPH_NODE, u->re.cast.n);
    }
    for (uint32_t i = 0; i < e->ninits; i++)
        if (e->inits[i].re.stored)
            added += field_size(GRAPH_NODE, e->inits[i].re.cast.n);
    e->graph_size = kept + added;
    e->model_size = e->g->source_size - e->graph_field.n +
                    field_size(MODEL_GRAPH, e->graph_size);
    if (e->model_size > ONNX_MAX_BYTES)
        error_file(e->output, "the model with its weights inline would be %zu bytes, over "
                   "ONNX's limit of 2 GB for one file; mpcc export writes no external "
                   "data yet", e->model_size);
}

/* ---- writing ---- */

static void put(Export *e, const void *p, size_t n)
{
    char err[512];
    if (mprt_out_write(&e->out, p, n, err, sizeof err) != 0)
        fail_runtime(e->output, err);
    e->written += n;
}

static void put_varint(Export *e, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        b[n++] = (uint8_t)(v | 0x80);
    b[n++] = (uint8_t)v;
    put(e, b, n);
}

static void put_header(Export *e, uint32_t num, size_t len)
{
    put_varint(e, (uint64_t)num << 3 | 2);
    put_varint(e, len);
}

static void put_varint_field(Export *e, uint32_t num, uint64_t v)
{
    put_varint(e, (uint64_t)num << 3);
    put_varint(e, v);
}

static void write_tensor(Export *e, const Init *in)
{
    const uint8_t *end = in->tensor.p + in->tensor.n;
    WireField f;
    for (const uint8_t *p = in->tensor.p; p < end;) {
        next_field(&p, end, &f);
        if (kept_field(in, &f))
            put(e, f.whole.p, f.whole.n);
    }
    if (in->re.stored) {
        put_header(e, TENSOR_NAME, strlen(in->re.stored));
        put(e, in->re.stored, strlen(in->re.stored));
        put_varint_field(e, TENSOR_DATA_TYPE, (uint64_t)in->re.type);
    }
    put_header(e, TENSOR_RAW_DATA, in->data.n);
    put(e, in->data.p, in->data.n);
}

static void write_untied(Export *e, const Untied *u)
{
    const char *name = u->re.stored ? u->re.stored : u->name;
    put_header(e, GRAPH_INITIALIZER, u->size);
    for (int i = 0; i < u->weight->shape.rank; i++)
        put_varint_field(e, TENSOR_DIMS, (uint64_t)u->weight->shape.d[i]);
    put_varint_field(e, TENSOR_DATA_TYPE,
                     (uint64_t)(u->re.stored ? u->re.type : u->weight->dtype));
    put_header(e, TENSOR_NAME, strlen(name));
    put(e, name, strlen(name));
    put_header(e, TENSOR_RAW_DATA, u->data.n);
    put(e, u->data.p, u->data.n);
}

static void write_cast(Export *e, const Retyped *re)
{
    if (!re->stored)
        return;
    put_header(e, GRAPH_NODE, re->cast.n);
    put(e, re->cast.p, re->cast.n);
}

/* The Cast nodes of the retyped weights, once, before any other node. */
static void write_casts(Export *e)
{
    if (e->casts_written)
        return;
    e->casts_written = true;
    for (uint32_t i = 0; i < e->ninits; i++)
        write_cast(e, &e->inits[i].re);
    for (uint32_t i = 0; i < e->nuntied; i++)
        write_cast(e, &e->untied[i].re);
}

static void write_graph(Export *e)
{
    const uint8_t *end = e->graph.p + e->graph.n;
    uint32_t k = 0;
    int32_t node = 0;
    WireField f;
    for (const uint8_t *p = e->graph.p; p < end;) {
        next_field(&p, end, &f);
        if (f.num == GRAPH_NODE && f.wire == 2)
            write_casts(e);
        if (f.num == GRAPH_NODE && f.wire == 2 && untied_at(e, node++))
            continue;   /* an Identity whose output is now an initializer */
        if (!(f.num == GRAPH_INITIALIZER && f.wire == 2)) {
            put(e, f.whole.p, f.whole.n);
            continue;
        }
        const Init *in = &e->inits[k++];
        if (!in->rewrite) {
            put(e, f.whole.p, f.whole.n);
            continue;
        }
        put_header(e, GRAPH_INITIALIZER, in->size);
        write_tensor(e, in);
    }
    MPCC_ASSERT(k == e->ninits);
    write_casts(e);   /* a graph without nodes */
    for (uint32_t i = 0; i < e->nuntied; i++)
        write_untied(e, &e->untied[i]);
}

static void write_model(Export *e)
{
    char err[512];
    if (mprt_out_open(&e->out, e->output, err, sizeof err) != 0)
        fail_runtime(e->output, err);
    const uint8_t *end = (const uint8_t *)e->g->source + e->g->source_size;
    WireField f;
    for (const uint8_t *p = e->g->source; p < end;) {
        next_field(&p, end, &f);
        if (f.num == MODEL_GRAPH && f.wire == 2) {
            put_header(e, MODEL_GRAPH, e->graph_size);
            write_graph(e);
        } else {
            put(e, f.whole.p, f.whole.n);
        }
    }
    if (e->written != e->model_size) {
        mprt_out_abort(&e->out);
        mpcc_die(__FILE__, __LINE__, "export wrote %zu bytes, planned %zu", e->written,
                 e->model_size);
    }
    if (mprt_out_commit(&e->out, err, sizeof err) != 0)
        fail_runtime(e->output, err);
}

static void close_checkpoint(void *p)
{
    mprt_st_close(p);
}

int export_main(int argc, char **argv)
{
    Export e = {.a = arena_new()};
    parse_args(&e, argc, argv);
    e.g = onnx_import(e.a, e.model);
    char err[512];
    if (mprt_st_open(e.ckpt, &e.st, err, sizeof err) != 0)
        fail_runtime(e.ckpt, err);
    arena_defer(e.a, close_checkpoint, &e.st);
    find_untied(&e);
    find_initializers(&e);
    match_checkpoint(&e);
    check_model_hash(&e);
    plan(&e);
    write_model(&e);
    arena_free(e.a);
    return 0;
}
