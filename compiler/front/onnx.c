/* onnx.c — the ONNX front end: ModelProto bytes -> IR graph.
 *
 * The model file is memory-mapped. Before protobuf-c sees any message, a
 * small wire-format walker cuts the large payloads out of it: the graph out
 * of the model, the initializers out of the graph, and raw_data out of each
 * initializer. Weights therefore stay views onto the mapping (never copied,
 * never even paged in), and protobuf-c decodes only the small remainder.
 * External data is mapped the same way, from files inside the model's folder.
 *
 * This is the only file that sees protobuf-c types.
 */
#include "mpcc.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_NESTING = 32 };

typedef struct Mapping {
    struct Mapping *next;
    const char *path;
    const uint8_t *base;
    size_t size;
} Mapping;

typedef struct Imp {
    Arena *a;
    Graph *g;
    const char *path;
    const char *dir;            /* the model's folder, for external data */
    Span file;
    Mapping *maps;
    ProtobufCAllocator alloc;
} Imp;

static const char *esc(Imp *im, const char *s)
{
    return str_escaped(im->a, s ? s : "", 160);
}

static _Noreturn void malformed(Imp *im, const char *what)
{
    error_file(im->path, "not a valid ONNX model: %s (is this an .onnx file?)", what);
}

/* ---- memory mapping ---- */

static void unmap(void *p)
{
    Mapping *m = p;
    munmap((void *)m->base, m->size);
}

static Span map_file(Arena *a, const char *path, const char *shown_as)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        error_file(shown_as, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        error_file(shown_as, "not a regular file");
    }
    Span s = {NULL, (size_t)st.st_size};
    if (s.n > 0) {
        void *p = mmap(NULL, s.n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            error_file(shown_as, "cannot map into memory: %s", strerror(errno));
        }
        Mapping *m = arena_alloc(a, sizeof *m);
        m->base = p;
        m->size = s.n;
        arena_defer(a, unmap, m);
        s.p = p;
    }
    close(fd);
    return s;
}

/* Copies msg without its length-delimited field `skip`; each occurrence of
 * that field is handed to take(). The copy is small: it is what is left. */
typedef void TakeFn(Imp *im, Span payload, void *ctx);

static Span strip_field(Imp *im, Span msg, uint32_t skip, TakeFn *take, void *ctx)
{
    const uint8_t *end = msg.p + msg.n;
    size_t kept = 0;
    WireField f;
    for (const uint8_t *p = msg.p; p < end;) {
        if (!wire_next(&p, end, &f))
            malformed(im, "truncated or corrupt protobuf data");
        if (!(f.num == skip && f.wire == 2))
            kept += f.whole.n;
    }
    uint8_t *out = kept ? arena_alloc(im->a, kept) : NULL;
    size_t k = 0;
    for (const uint8_t *p = msg.p; p < end;) {
        wire_next(&p, end, &f);
        if (f.num == skip && f.wire == 2) {
            take(im, f.payload, ctx);
        } else {
            memcpy(out + k, f.whole.p, f.whole.n);
            k += f.whole.n;
        }
    }
    return (Span){out, kept};
}

/* Nesting depth of the recursive message paths (graphs in attributes, types
 * in types), checked before protobuf-c, which recurses without a limit. */
typedef enum { MSG_MODEL, MSG_GRAPH, MSG_NODE, MSG_ATTR, MSG_VALUE_INFO,
               MSG_TYPE, MSG_TYPE_WRAP, MSG_TRAINING, MSG_FUNCTION } MsgKind;

static MsgKind child_kind(MsgKind k, uint32_t field)
{
    switch (k) {
    case MSG_MODEL:
        return field == 7 ? MSG_GRAPH : field == 20 ? MSG_TRAINING
             : field == 25 ? MSG_FUNCTION : MSG_MODEL;
    case MSG_TRAINING:
        return (field == 1 || field == 2) ? MSG_GRAPH : MSG_MODEL;
    case MSG_FUNCTION:
        return field == 7 ? MSG_NODE : MSG_MODEL;
    case MSG_GRAPH:
        return field == 1 ? MSG_NODE
             : (field == 11 || field == 12 || field == 13) ? MSG_VALUE_INFO : MSG_MODEL;
    case MSG_NODE:
        return field == 5 ? MSG_ATTR : MSG_MODEL;
    case MSG_ATTR:
        return (field == 6 || field == 11) ? MSG_GRAPH
             : (field == 14 || field == 15) ? MSG_TYPE : MSG_MODEL;
    case MSG_VALUE_INFO:
        return field == 2 ? MSG_TYPE : MSG_MODEL;
    case MSG_TYPE:
        return (field == 4 || field == 5 || field == 9) ? MSG_TYPE_WRAP : MSG_MODEL;
    case MSG_TYPE_WRAP:
        return (field == 1 || field == 2) ? MSG_TYPE : MSG_MODEL;
    }
    return MSG_MODEL;
}

static void check_nesting(Imp *im, Span msg, MsgKind kind, int depth)
{
    if (depth > MAX_NESTING)
        malformed(im, "messages nested too deeply");
    const uint8_t *end = msg.p + msg.n;
    WireField f;
    for (const uint8_t *p = msg.p; p < end;) {
        if (!wire_next(&p, end, &f))
            malformed(im, "truncated or corrupt protobuf data");
        if (f.wire != 2)
            continue;
        MsgKind c = child_kind(kind, f.num);
        if (c != MSG_MODEL)
            check_nesting(im, f.payload, c, depth + 1);
    }
}

static void *pb_alloc(void *ad, size_t n)
{
    return arena_alloc(ad, n);
}

static void pb_free(void *ad, void *p)
{
    (void)ad, (void)p;   /* the arena releases everything at once */
}

/* ---- tensors ---- */

typedef struct TensorSrc {
    const Onnx__TensorProto *tp;
    Span raw;
    bool has_raw;
} TensorSrc;

static bool is_plain_component(const char *s, size_t n)
{
    return !(n == 2 && s[0] == '.' && s[1] == '.');
}

/* An external-data location must name a file inside the model's folder. */
static const char *external_path(Imp *im, const Loc *loc, const char *location)
{
    if (!location || !location[0])
        error_at(loc, "external data has no 'location'");
    if (location[0] == '/')
        error_at(loc, "external data location '%s' is an absolute path; it must be "
                 "relative to the model's folder", esc(im, location));
    for (const char *s = location; *s;) {
        size_t n = strcspn(s, "/");
        if (!is_plain_component(s, n))
            error_at(loc, "external data location '%s' leaves the model's folder; "
                     "move the data file next to the model", esc(im, location));
        s += n;
        while (*s == '/')
            s++;
    }
    const char *path = arena_printf(im->a, "%s/%s", im->dir, location);
    char dir_real[PATH_MAX], file_real[PATH_MAX];
    if (!realpath(im->dir, dir_real) || !realpath(path, file_real))
        error_at(loc, "cannot open external data file '%s': %s", esc(im, location),
                 strerror(errno));
    size_t dn = strlen(dir_real);
    if (strncmp(file_real, dir_real, dn) != 0 || (file_real[dn] != '/' && dn > 1))
        error_at(loc, "external data location '%s' resolves outside the model's "
                 "folder (through a symbolic link)", esc(im, location));
    return path;
}

static Span external_file(Imp *im, const Loc *loc, const char *location)
{
    const char *path = external_path(im, loc, location);
    for (Mapping *m = im->maps; m; m = m->next)
        if (strcmp(m->path, path) == 0)
            return (Span){m->base, m->size};
    Span s = map_file(im->a, path, path);
    Mapping *m = arena_alloc(im->a, sizeof *m);
    m->path = path;
    m->base = s.p;
    m->size = s.n;
    m->next = im->maps;
    im->maps = m;
    return s;
}

static int64_t external_number(Imp *im, const Loc *loc, const char *key,
                               const char *text)
{
    int64_t v;
    if (!parse_i64(text, &v) || v < 0)
        error_at(loc, "external data '%s' is '%s', not a byte count", key, esc(im, text));
    return v;
}

static const void *external_data(Imp *im, const Loc *loc, const Onnx__TensorProto *tp,
                                 size_t nbytes)
{
    const char *location = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        const char *k = e->key ? e->key : "";
        if (strcmp(k, "location") == 0)
            location = e->value;
        else if (strcmp(k, "offset") == 0)
            offset = external_number(im, loc, k, e->value ? e->value : "");
        else if (strcmp(k, "length") == 0)
            length = external_number(im, loc, k, e->value ? e->value : "");
    }
    Span file = external_file(im, loc, location);
    if ((uint64_t)offset > file.n)
        error_at(loc, "external data offset %lld is past the end of '%s' (%zu bytes)",
                 (long long)offset, esc(im, location), file.n);
    if (length < 0)
        length = (int64_t)(file.n - (size_t)offset);
    if ((uint64_t)length > file.n - (size_t)offset)
        error_at(loc, "external data range %lld+%lld is past the end of '%s' (%zu bytes)",
                 (long long)offset, (long long)length, esc(im, location), file.n);
    if ((uint64_t)length != nbytes)
        error_at(loc, "external data holds %lld bytes but the shape needs %zu",
                 (long long)length, nbytes);
    return file.p + offset;
}

/* Copies typed-field elements into a buffer of the tensor's element type. */
static const void *typed_data(Imp *im, const Loc *loc, const Onnx__TensorProto *tp,
                              const Shape *shape, DType dt, int64_t numel, size_t nbytes)
{
    size_t count, want = (size_t)numel * ((dt == DT_C64 || dt == DT_C128) ? 2 : 1);
    const char *field;
    switch (dt) {
    case DT_F32: case DT_C64: count = tp->n_float_data; field = "float_data"; break;
    case DT_F64: case DT_C128: count = tp->n_double_data; field = "double_data"; break;
    case DT_I64: count = tp->n_int64_data; field = "int64_data"; break;
    case DT_U32: case DT_U64: count = tp->n_uint64_data; field = "uint64_data"; break;
    default: count = tp->n_int32_data; field = "int32_data"; break;
    }
    if (count != want)
        error_at(loc, "%s holds %zu values but the shape %s needs %zu", field, count,
                 shape_str(im->a, shape), want);
    uint8_t *buf = arena_alloc(im->a, nbytes);
    for (size_t i = 0; i < count; i++) {
        switch (dt) {
        case DT_F32: case DT_C64: memcpy(buf + i * 4, &tp->float_data[i], 4); break;
        case DT_F64: case DT_C128: memcpy(buf + i * 8, &tp->double_data[i], 8); break;
        case DT_I64: memcpy(buf + i * 8, &tp->int64_data[i], 8); break;
        case DT_U64: memcpy(buf + i * 8, &tp->uint64_data[i], 8); break;
        case DT_U32: { uint32_t v = (uint32_t)tp->uint64_data[i]; memcpy(buf + i * 4, &v, 4); break; }
        case DT_I32: memcpy(buf + i * 4, &tp->int32_data[i], 4); break;
        case DT_I16: case DT_U16: case DT_F16: case DT_BF16: {
            uint16_t v = (uint16_t)tp->int32_data[i];
            memcpy(buf + i * 2, &v, 2);
            break;
        }
        default: buf[i] = (uint8_t)tp->int32_data[i]; break;   /* 1-byte types */
        }
    }
    return buf;
}

static Tensor *import_tensor(Imp *im, const Loc *loc, const TensorSrc *src)
{
    const Onnx__TensorProto *tp = src->tp;
    DType dt = (DType)tp->data_type;
    if (tp->data_type <= 0 || tp->data_type >= DT_COUNT || dtype_size(dt) == 0)
        error_at(loc, "element type %d is not supported (mpcc handles numeric and "
                 "bool tensors)", (int)tp->data_type);
    if (tp->segment)
        error_at(loc, "segmented tensors are not supported");
    if (tp->n_dims > MAX_RANK)
        error_at(loc, "rank %zu exceeds mpcc's limit of %d", tp->n_dims, MAX_RANK);
    Tensor *t = arena_alloc(im->a, sizeof *t);
    t->dtype = dt;
    t->shape.rank = (int)tp->n_dims;
    int64_t numel = 1, nbytes;
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0)
            error_at(loc, "dimension %zu is %lld; dimensions must not be negative", i,
                     (long long)tp->dims[i]);
        t->shape.d[i] = tp->dims[i];
        if (mul_overflows(numel, tp->dims[i], &numel))
            error_at(loc, "the shape %s has more than 2^63 elements",
                     shape_str(im->a, &t->shape));
    }
    if (mul_overflows(numel, (int64_t)dtype_size(dt), &nbytes) || (uint64_t)nbytes > SIZE_MAX / 2)
        error_at(loc, "the shape %s is too large (%lld elements)",
                 shape_str(im->a, &t->shape), (long long)numel);
    t->nbytes = (size_t)nbytes;
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        t->data = external_data(im, loc, tp, t->nbytes);
        t->mapped = true;
    } else if (src->has_raw) {
        if (src->raw.n != t->nbytes)
            error_at(loc, "raw_data holds %zu bytes but the shape %s of %s needs %zu",
                     src->raw.n, shape_str(im->a, &t->shape), dtype_name(dt), t->nbytes);
        t->data = src->raw.p;
        t->mapped = true;
    } else {
        t->data = typed_data(im, loc, tp, &t->shape, dt, numel, t->nbytes);
    }
    return t;
}

/* ---- initializers ---- */

static void take_raw(Imp *im, Span payload, void *ctx)
{
    (void)im;
    TensorSrc *src = ctx;
    src->raw = payload;
    src->has_raw = true;
}

static void add_initializer(Imp *im, Span bytes)
{
    TensorSrc src = {0};
    Span rest = strip_field(im, bytes, 9, take_raw, &src);
    src.tp = onnx__tensor_proto__unpack(&im->alloc, rest.n, rest.p);
    if (!src.tp)
        malformed(im, "an initializer cannot be decoded");
    const char *name = src.tp->name ? src.tp->name : "";
    Loc loc = {.file = im->path, .what = "initializer", .name = name, .index = -1};
    if (!name[0])
        error_at(&loc, "an initializer has no name");
    if (ir_find(im->g, name) != NONE)
        error_at(&loc, "two initializers have this name; names must be unique");
    Tensor *t = import_tensor(im, &loc, &src);
    uint32_t v = ir_value(im->g, name);
    Value *val = &im->g->values[v];
    val->kind = dtype_is_float(t->dtype) ? VK_PARAM : VK_CONST;
    val->dtype = t->dtype;
    val->shape = t->shape;
    val->typed = true;
    val->data = t;
    val->loc = loc;
    val->loc.name = val->name;
}

typedef struct Spans {
    Span *s;
    uint32_t n, cap;
} Spans;

static void take_span(Imp *im, Span payload, void *ctx)
{
    Spans *l = ctx;
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 64;
        l->s = arena_grow(im->a, l->s, l->n, cap, sizeof(Span));
        l->cap = cap;
    }
    l->s[l->n++] = payload;
}

/* ---- graph inputs ---- */

static void import_input(Imp *im, const Onnx__ValueInfoProto *vi)
{
    const char *name = vi->name ? vi->name : "";
    Loc loc = {.file = im->path, .what = "input", .name = name, .index = -1};
    if (!name[0])
        error_at(&loc, "a graph input has no name");
    uint32_t v = ir_find(im->g, name);
    if (v != NONE) {
        Value *old = &im->g->values[v];
        if (old->kind == VK_INPUT)
            error_at(&loc, "graph input '%s' is listed twice", esc(im, name));
        return;   /* an initializer listed as input: the initializer is its value */
    }
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        error_at(&loc, "graph input is not a tensor (sequences, maps and optionals "
                 "are not supported)");
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    DType dt = (DType)tt->elem_type;
    if (tt->elem_type <= 0 || tt->elem_type >= DT_COUNT || dtype_size(dt) == 0)
        error_at(&loc, "element type %d is not supported", (int)tt->elem_type);
    v = ir_value(im->g, name);
    Value *val = &im->g->values[v];
    val->kind = VK_INPUT;
    val->dtype = dt;
    val->loc = loc;
    val->loc.name = val->name;
    if (!tt->shape) {
        val->shape.rank = -1;
        val->symbolic = true;
        return;
    }
    if (tt->shape->n_dim > MAX_RANK)
        error_at(&loc, "rank %zu exceeds mpcc's limit of %d", tt->shape->n_dim, MAX_RANK);
    val->shape.rank = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                error_at(&loc, "dimension %zu is %lld; dimensions must not be "
                         "negative (use a named dimension and --shapes)", i,
                         (long long)d->dim_value);
            val->shape.d[i] = d->dim_value;
        } else {
            const char *p = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                          && d->dim_param ? d->dim_param : "?";
            val->sym[i] = arena_strdup(im->a, p[0] ? p : "?");
            val->symbolic = true;
        }
    }
}

/* ---- nodes and attributes ---- */

static Tensor *attr_tensor(Imp *im, const Loc *loc, const Onnx__TensorProto *tp)
{
    TensorSrc src = {.tp = tp, .has_raw = tp->has_raw_data,
                     .raw = {tp->raw_data.data, tp->raw_data.len}};
    return import_tensor(im, loc, &src);
}

static AttrKind attr_kind(const Onnx__AttributeProto *ap)
{
    int t = ap->has_type ? (int)ap->type : 0;
    if (t == 0) {   /* IR version 1 files leave the type out */
        t = ap->has_f ? 1 : ap->has_i ? 2 : ap->has_s ? 3 : ap->t ? 4 : ap->g ? 5
          : ap->n_floats ? 6 : ap->n_ints ? 7 : ap->n_strings ? 8 : 0;
    }
    switch (t) {
    case 1: return AT_FLOAT;
    case 2: return AT_INT;
    case 3: return AT_STRING;
    case 4: return AT_TENSOR;
    case 5: return AT_GRAPH;
    case 6: return AT_FLOATS;
    case 7: return AT_INTS;
    case 8: return AT_STRINGS;
    default: return AT_OTHER;
    }
}

static void import_attr(Imp *im, Node *n, Attr *at, const Onnx__AttributeProto *ap)
{
    at->name = ap->name ? ap->name : "";
    at->kind = attr_kind(ap);
    switch (at->kind) {
    case AT_FLOAT: at->f = ap->f; break;
    case AT_INT: at->i = ap->i; break;
    case AT_STRING:
        at->s = arena_strndup(im->a, (const char *)ap->s.data, ap->s.len);
        break;
    case AT_TENSOR:
        if (!ap->t)
            error_at(&n->loc, "attribute '%s' has no tensor", esc(im, at->name));
        at->t = attr_tensor(im, &n->loc, ap->t);
        break;
    case AT_FLOATS:
        at->n = (uint32_t)ap->n_floats;
        at->floats = arena_array(im->a, ap->n_floats, sizeof(double));
        for (size_t i = 0; i < ap->n_floats; i++)
            at->floats[i] = ap->floats[i];
        break;
    case AT_INTS:
        at->n = (uint32_t)ap->n_ints;
        at->ints = ap->ints;
        break;
    case AT_STRINGS:
        at->n = (uint32_t)ap->n_strings;
        at->strs = arena_array(im->a, ap->n_strings, sizeof(char *));
        for (size_t i = 0; i < ap->n_strings; i++)
            at->strs[i] = arena_strndup(im->a, (const char *)ap->strings[i].data,
                                        ap->strings[i].len);
        break;
    case AT_GRAPH: case AT_OTHER:
        break;
    }
}

/* A Constant node becomes a constant value; no node remains. */
static const Tensor *constant_value(Imp *im, Node *n)
{
    if (n->nattrs != 1)
        error_at(&n->loc, "a Constant needs exactly one value attribute");
    const Attr *a = &n->attrs[0];
    Tensor *t = arena_alloc(im->a, sizeof *t);
    if (strcmp(a->name, "value") == 0 && a->kind == AT_TENSOR)
        return a->t;
    if (strcmp(a->name, "value_float") == 0 && a->kind == AT_FLOAT) {
        float f = (float)a->f;
        *t = (Tensor){.dtype = DT_F32, .nbytes = 4};
        t->data = memcpy(arena_alloc(im->a, 4), &f, 4);
    } else if (strcmp(a->name, "value_int") == 0 && a->kind == AT_INT) {
        *t = (Tensor){.dtype = DT_I64, .nbytes = 8};
        t->data = memcpy(arena_alloc(im->a, 8), &a->i, 8);
    } else if (strcmp(a->name, "value_floats") == 0 && a->kind == AT_FLOATS) {
        *t = (Tensor){.dtype = DT_F32, .shape = {1, {a->n}}, .nbytes = (size_t)a->n * 4};
        float *f = arena_array(im->a, a->n, 4);
        for (uint32_t i = 0; i < a->n; i++)
            f[i] = (float)a->floats[i];
        t->data = f;
    } else if (strcmp(a->name, "value_ints") == 0 && a->kind == AT_INTS) {
        *t = (Tensor){.dtype = DT_I64, .shape = {1, {a->n}}, .nbytes = (size_t)a->n * 8};
        t->data = a->n ? memcpy(arena_array(im->a, a->n, 8), a->ints, (size_t)a->n * 8)
                       : arena_alloc(im->a, 8);
    } else {
        error_at(&n->loc, "Constant attribute '%s' is not supported (mpcc handles "
                 "value, value_float(s) and value_int(s))", esc(im, a->name));
    }
    return t;
}

static const char *known_domains[] = {
    "", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training",
    "com.microsoft", "com.microsoft.nchwc", "org.pytorch.aten", NULL
};

static bool domain_is_default(const char *d)
{
    return !d || !d[0] || strcmp(d, "ai.onnx") == 0;
}

static void check_arity(Imp *im, Node *n)
{
    const OpInfo *oi = &op_info[n->op];
    if ((int)n->nin < oi->min_in || (oi->max_in >= 0 && (int)n->nin > oi->max_in))
        error_at(&n->loc, "%s takes %d to %d inputs, this node has %u", oi->name,
                 oi->min_in, oi->max_in < 0 ? 2147483647 : oi->max_in, n->nin);
    if ((int)n->nout < oi->min_out || (oi->max_out >= 0 && (int)n->nout > oi->max_out))
        error_at(&n->loc, "%s has %d to %d outputs, this node has %u", oi->name,
                 oi->min_out, oi->max_out < 0 ? 2147483647 : oi->max_out, n->nout);
    (void)im;
}

static void define_output(Imp *im, Node *n, uint32_t id, uint32_t k, const char *name)
{
    Graph *g = im->g;
    if (!name || !name[0]) {
        n->out[k] = NONE;
        return;
    }
    uint32_t v = ir_value(g, name);
    Value *val = &g->values[v];
    if (val->kind != VK_ACTIVATION || val->producer != NONE)
        error_at(&n->loc, "output '%s' is already defined (by %s); every value "
                 "must have one producer", esc(im, name),
                 val->producer != NONE ? "another node" : "an input or initializer");
    val->producer = id;
    n->out[k] = v;
}

static void import_node(Imp *im, const Onnx__NodeProto *np, int32_t index, bool *imported)
{
    Graph *g = im->g;
    const char *op_type = np->op_type ? np->op_type : "";
    const char *name = np->name ? np->name : "";
    Loc loc = {.file = im->path, .what = "node", .name = name, .op = op_type, .index = index};
    if (!op_type[0])
        error_at(&loc, "node has no op_type");
    const char *domain = np->domain ? np->domain : "";
    if (!imported[0] && domain_is_default(domain))
        error_at(&loc, "the model does not import the default ONNX domain");
    Op op = domain_is_default(domain) ? op_lookup(op_type) : OP_UNKNOWN;
    uint32_t id = ir_add_node(g, op, op_type, name);
    Node *n = &g->nodes[id];
    n->loc.index = index;
    n->domain = domain_is_default(domain) ? "" : domain;
    n->nattrs = (uint32_t)np->n_attribute;
    n->attrs = arena_array(im->a, n->nattrs, sizeof(Attr));
    for (size_t i = 0; i < np->n_attribute; i++)
        import_attr(im, n, &n->attrs[i], np->attribute[i]);
    n->nin = (uint32_t)np->n_input;
    n->in = arena_array(im->a, n->nin, sizeof(uint32_t));
    for (size_t i = 0; i < np->n_input; i++)
        n->in[i] = np->input[i][0] ? ir_value(g, np->input[i]) : NONE;
    n->nout = (uint32_t)np->n_output;
    n->out = arena_array(im->a, n->nout, sizeof(uint32_t));
    if (domain_is_default(domain) && strcmp(op_type, "Constant") == 0) {
        if (n->nout != 1 || n->nin != 0 || !np->output[0][0])
            error_at(&n->loc, "a Constant has no inputs and one output");
        uint32_t v = ir_value(g, np->output[0]);
        Value *val = &g->values[v];
        if (val->kind != VK_ACTIVATION || val->producer != NONE)
            error_at(&n->loc, "output '%s' is already defined", esc(im, np->output[0]));
        const Tensor *t = constant_value(im, n);
        val->kind = VK_CONST;
        val->data = t;
        val->dtype = t->dtype;
        val->shape = t->shape;
        val->typed = true;
        val->loc = n->loc;
        n->dead = true;
        return;
    }
    for (size_t i = 0; i < np->n_output; i++)
        define_output(im, n, id, (uint32_t)i, np->output[i]);
    if (op != OP_UNKNOWN)
        check_arity(im, n);
}

/* imported[0]: the default domain is imported; returns its version. */
static int64_t import_opsets(Imp *im, const Onnx__ModelProto *m, bool *imported)
{
    int64_t version = 0;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *os = m->opset_import[i];
        const char *d = os->domain ? os->domain : "";
        bool known = false;
        for (const char **k = known_domains; *k; k++)
            known |= strcmp(*k, d) == 0;
        if (!known)
            error_file(im->path, "the model imports the unknown opset domain '%s'; "
                       "mpcc knows the ONNX domains ai.onnx, ai.onnx.ml, "
                       "ai.onnx.training and com.microsoft", esc(im, d));
        if (domain_is_default(d)) {
            imported[0] = true;
            version = os->version;
        }
    }
    if (imported[0] && (version < 1 || version > 21))
        error_file(im->path, "opset %lld of the default ONNX domain is not supported "
                   "(mpcc reads opsets 1 to 21; onnx.version_converter can convert "
                   "the model)", (long long)version);
    return version;
}

static void check_node_domains(Imp *im, const Onnx__ModelProto *m, const Onnx__GraphProto *gp)
{
    for (size_t i = 0; i < gp->n_node; i++) {
        const char *d = gp->node[i]->domain ? gp->node[i]->domain : "";
        if (domain_is_default(d))
            continue;
        bool found = false;
        for (size_t k = 0; k < m->n_opset_import; k++)
            found |= m->opset_import[k]->domain && strcmp(m->opset_import[k]->domain, d) == 0;
        if (!found) {
            const char *name = gp->node[i]->name ? gp->node[i]->name : "";
            Loc loc = {.file = im->path, .what = "node", .name = name,
                       .op = gp->node[i]->op_type, .index = (int32_t)i};
            error_at(&loc, "node uses the domain '%s', which the model does not "
                     "import in opset_import", esc(im, d));
        }
    }
}

/* A graph output's element type, where its ValueInfo gives a known one. */
static DType declared_dtype(const Onnx__ValueInfoProto *vi)
{
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return DT_UNDEFINED;
    int32_t t = tp->tensor_type->elem_type;
    return t > 0 && t < DT_COUNT ? (DType)t : DT_UNDEFINED;
}

static void import_outputs(Imp *im, const Onnx__GraphProto *gp)
{
    Graph *g = im->g;
    g->noutputs = (uint32_t)gp->n_output;
    g->outputs = arena_array(im->a, g->noutputs, sizeof(uint32_t));
    g->output_dtypes = arena_array(im->a, g->noutputs + 1, sizeof(DType));
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = gp->output[i]->name ? gp->output[i]->name : "";
        Loc loc = {.file = im->path, .what = "output", .name = name, .index = -1};
        uint32_t v = name[0] ? ir_find(g, name) : NONE;
        if (v == NONE)
            error_at(&loc, "graph output '%s' is produced by no node", esc(im, name));
        g->values[v].is_output = true;
        g->outputs[i] = v;
        g->output_dtypes[i] = declared_dtype(gp->output[i]);
    }
}

static void collect_inputs(Graph *g)
{
    g->inputs = arena_array(g->arena, g->nvalues, sizeof(uint32_t));
    g->ninputs = 0;
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == VK_INPUT)
            g->inputs[g->ninputs++] = v;
}

static void import_graph(Imp *im, const Onnx__ModelProto *m, Span graph_bytes)
{
    bool imported[1] = {false};
    Graph *g = im->g;
    g->opset = import_opsets(im, m, imported);
    const char *pv = m->producer_version ? m->producer_version : "";
    g->producer = arena_printf(im->a, "%s%s%s", m->producer_name ? m->producer_name : "",
                               pv[0] ? " " : "", pv);
    Spans inits = {0};
    Span rest = strip_field(im, graph_bytes, 5, take_span, &inits);
    Onnx__GraphProto *gp = onnx__graph_proto__unpack(&im->alloc, rest.n, rest.p);
    if (!gp)
        malformed(im, "the graph cannot be decoded");
    g->name = gp->name ? gp->name : "";
    if (gp->n_sparse_initializer)
        error_file(im->path, "sparse initializers are not supported; densify them "
                   "first (onnx.numpy_helper)");
    check_node_domains(im, m, gp);
    for (uint32_t i = 0; i < inits.n; i++)
        add_initializer(im, inits.s[i]);
    for (size_t i = 0; i < gp->n_input; i++)
        import_input(im, gp->input[i]);
    for (size_t i = 0; i < gp->n_node; i++)
        import_node(im, gp->node[i], (int32_t)i, imported);
    import_outputs(im, gp);
    collect_inputs(g);
}

static void take_graph(Imp *im, Span payload, void *ctx)
{
    Span *graph = ctx;
    if (graph->p)
        malformed(im, "the model has two graphs");
    *graph = payload;
}

static char *dir_of(Arena *a, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return ".";
    if (slash == path)
        return "/";
    return arena_strndup(a, path, (size_t)(slash - path));
}

Graph *onnx_import_bytes(Arena *a, const char *path, const void *data, size_t n)
{
    Imp im = {.a = a, .path = path, .dir = dir_of(a, path), .file = {data, n}};
    im.alloc = (ProtobufCAllocator){pb_alloc, pb_free, a};
    if (n == 0)
        error_file(path, "the file is empty; expected an ONNX model");
    check_nesting(&im, im.file, MSG_MODEL, 0);
    Span graph = {0};
    Span rest = strip_field(&im, im.file, 7, take_graph, &graph);
    Onnx__ModelProto *m = onnx__model_proto__unpack(&im.alloc, rest.n, rest.p);
    if (!m)
        malformed(&im, "the model cannot be decoded");
    if (!graph.p)
        error_file(path, "the model has no graph");
    im.g = ir_new(a, path);
    im.g->source = data;
    im.g->source_size = n;
    import_graph(&im, m, graph);
    return im.g;
}

Graph *onnx_import(Arena *a, const char *path)
{
    Span s = map_file(a, path, path);
    return onnx_import_bytes(a, path, s.p, s.n);
}
