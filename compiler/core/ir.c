/* ir.c — the graph both front ends lower to: values and nodes in growable
 * arrays addressed by 32-bit ids, a name table, attributes, element types,
 * the op table, and the topological order every later pass walks.
 */
#include "mpcc.h"

#include <math.h>
#include <string.h>

/* ---- element types ---- */

static const struct { const char *name; size_t size; } dtypes[DT_COUNT] = {
    [DT_UNDEFINED] = {"?", 0},   [DT_F32] = {"f32", 4},  [DT_U8] = {"u8", 1},
    [DT_I8] = {"i8", 1},         [DT_U16] = {"u16", 2},  [DT_I16] = {"i16", 2},
    [DT_I32] = {"i32", 4},       [DT_I64] = {"i64", 8},  [DT_STRING] = {"str", 0},
    [DT_BOOL] = {"bool", 1},     [DT_F16] = {"f16", 2},  [DT_F64] = {"f64", 8},
    [DT_U32] = {"u32", 4},       [DT_U64] = {"u64", 8},  [DT_C64] = {"c64", 8},
    [DT_C128] = {"c128", 16},    [DT_BF16] = {"bf16", 2},
};

const char *dtype_name(DType t)
{
    return (unsigned)t < DT_COUNT ? dtypes[t].name : "?";
}

size_t dtype_size(DType t)
{
    return (unsigned)t < DT_COUNT ? dtypes[t].size : 0;
}

bool dtype_is_float(DType t)
{
    return t == DT_F32 || t == DT_F64 || t == DT_F16 || t == DT_BF16;
}

bool dtype_is_int(DType t)
{
    switch (t) {
    case DT_U8: case DT_I8: case DT_U16: case DT_I16: case DT_I32:
    case DT_I64: case DT_U32: case DT_U64:
        return true;
    default:
        return false;
    }
}

/* ---- shapes and constant tensors ---- */

int64_t shape_numel(const Shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i];
    return n;
}

bool shape_bytes(const Shape *s, DType t, int64_t *bytes)
{
    int64_t n = (int64_t)(dtype_size(t) ? dtype_size(t) : 1);
    for (int i = 0; i < s->rank; i++)
        if (mul_overflows(n, s->d[i], &n))
            return false;
    *bytes = n;
    return true;
}

bool shape_eq(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i])
            return false;
    return true;
}

char *shape_str(Arena *a, const Shape *s)
{
    char buf[MAX_RANK * 21 + 3];
    int k = 0;
    buf[k++] = '[';
    for (int i = 0; i < s->rank; i++)
        k += snprintf(buf + k, sizeof buf - (size_t)k, "%s%lld", i ? "," : "",
                      (long long)s->d[i]);
    buf[k++] = ']';
    buf[k] = 0;
    return arena_strdup(a, buf);
}

static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define LOADER(fn, type)                                                  \
    static type fn(const Tensor *t, int64_t i)                            \
    {                                                                     \
        type v;                                                           \
        memcpy(&v, (const char *)t->data + (size_t)i * sizeof v, sizeof v); \
        return v;                                                         \
    }
LOADER(ld_u8, uint8_t)
LOADER(ld_i8, int8_t)
LOADER(ld_u16, uint16_t)
LOADER(ld_i16, int16_t)
LOADER(ld_u32, uint32_t)
LOADER(ld_i32, int32_t)
LOADER(ld_u64, uint64_t)
LOADER(ld_i64, int64_t)
LOADER(ld_f32, float)
LOADER(ld_f64, double)
#undef LOADER

int64_t tensor_i64(const Tensor *t, int64_t i)
{
    switch (t->dtype) {
    case DT_BOOL: case DT_U8: return ld_u8(t, i);
    case DT_I8:  return ld_i8(t, i);
    case DT_U16: return ld_u16(t, i);
    case DT_I16: return ld_i16(t, i);
    case DT_I32: return ld_i32(t, i);
    case DT_I64: return ld_i64(t, i);
    case DT_U32: return ld_u32(t, i);
    case DT_U64: return (int64_t)ld_u64(t, i);
    default: {
        double d = tensor_f64(t, i);
        if (!(d >= -9.2e18 && d <= 9.2e18))
            return d > 0 ? INT64_MAX : INT64_MIN;
        return (int64_t)d;
    }
    }
}

double tensor_f64(const Tensor *t, int64_t i)
{
    switch (t->dtype) {
    case DT_F32: return ld_f32(t, i);
    case DT_F64: return ld_f64(t, i);
    case DT_F16: return half_to_float(ld_u16(t, i));
    case DT_BF16: return bf16_to_float(ld_u16(t, i));
    case DT_U64: return (double)ld_u64(t, i);
    default: return (double)tensor_i64(t, i);
    }
}

/* ---- the op table ---- */

const OpInfo op_info[OP_COUNT] = {
    [OP_UNKNOWN] = {"?", 0, -1, 0, -1, 0},
#define OP(id, nm, mi, ma, mo, mao, fl) [OP_##id] = {nm, mi, ma, mo, mao, fl},
#include "ops.def"
#undef OP
};

Op op_lookup(const char *name)
{
    for (int op = 1; op < OP_COUNT; op++)
        if (!(op_info[op].flags & OPF_INTERNAL) && strcmp(op_info[op].name, name) == 0)
            return (Op)op;
    return OP_UNKNOWN;
}

/* ---- the name table: open addressing, FNV-1a ---- */

struct NameMap {
    uint32_t *slots;  /* value ids, NONE if empty */
    uint32_t cap, count;
};

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void map_rehash(Graph *g, uint32_t cap)
{
    NameMap *m = g->names;
    uint32_t *slots = arena_array(g->arena, cap, sizeof *slots);
    memset(slots, 0xff, (size_t)cap * sizeof *slots);
    for (uint32_t v = 0; v < g->nvalues; v++) {
        uint32_t h = hash_str(g->values[v].name) & (cap - 1);
        while (slots[h] != NONE)
            h = (h + 1) & (cap - 1);
        slots[h] = v;
    }
    m->slots = slots;
    m->cap = cap;
}

uint32_t ir_find(Graph *g, const char *name)
{
    NameMap *m = g->names;
    uint32_t h = hash_str(name) & (m->cap - 1);
    for (; m->slots[h] != NONE; h = (h + 1) & (m->cap - 1))
        if (strcmp(g->values[m->slots[h]].name, name) == 0)
            return m->slots[h];
    return NONE;
}

uint32_t ir_value(Graph *g, const char *name)
{
    uint32_t v = ir_find(g, name);
    if (v != NONE)
        return v;
    if (g->nvalues == g->cap_values) {
        uint32_t cap = g->cap_values ? g->cap_values * 2 : 256;
        g->values = arena_grow(g->arena, g->values, g->nvalues, cap, sizeof(Value));
        g->cap_values = cap;
    }
    v = g->nvalues++;
    Value *val = &g->values[v];
    memset(val, 0, sizeof *val);
    val->name = arena_strdup(g->arena, name);
    val->producer = NONE;
    val->grad = NONE;
    val->loc = (Loc){.file = g->file, .what = "value", .name = val->name, .index = -1};
    if ((g->nvalues + 1) * 2 > g->names->cap)
        map_rehash(g, g->names->cap * 2);
    else {
        NameMap *m = g->names;
        uint32_t h = hash_str(name) & (m->cap - 1);
        while (m->slots[h] != NONE)
            h = (h + 1) & (m->cap - 1);
        m->slots[h] = v;
    }
    return v;
}

Graph *ir_new(Arena *a, const char *file)
{
    Graph *g = arena_alloc(a, sizeof *g);
    g->arena = a;
    g->file = file;
    g->name = "";
    g->producer = "";
    g->names = arena_alloc(a, sizeof *g->names);
    g->loss = g->labels = g->scores = g->cur_origin = NONE;
    g->nvalues = 0;
    map_rehash(g, 512);
    return g;
}

uint32_t ir_add_node(Graph *g, Op op, const char *op_type, const char *name)
{
    if (g->nnodes == g->cap_nodes) {
        uint32_t cap = g->cap_nodes ? g->cap_nodes * 2 : 256;
        g->nodes = arena_grow(g->arena, g->nodes, g->nnodes, cap, sizeof(Node));
        g->cap_nodes = cap;
    }
    uint32_t id = g->nnodes++;
    Node *n = &g->nodes[id];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->op_type = op_type;
    n->domain = "";
    n->name = name;
    n->origin = NONE;
    n->hint_stage = -1;
    n->loc = (Loc){.file = g->file, .what = "node", .name = name, .op = op_type,
                   .index = (int32_t)id};
    return id;
}

/* ---- building graphs in passes ---- */

uint32_t ir_new_value(Graph *g, const char *name, DType t, const Shape *s)
{
    const char *unique = name;
    for (int k = 1; ir_find(g, unique) != NONE; k++)
        unique = arena_printf(g->arena, "%s.%d", name, k);
    uint32_t v = ir_value(g, unique);
    g->values[v].dtype = t;
    g->values[v].shape = *s;
    g->values[v].typed = true;
    return v;
}

uint32_t ir_new_const(Graph *g, const char *name, const Tensor *t)
{
    uint32_t v = ir_new_value(g, name, t->dtype, &t->shape);
    g->values[v].kind = VK_CONST;
    g->values[v].data = t;
    return v;
}

/* How many times the live nodes of the order read v (a value's nuses is
 * counted by prune alone, and passes after it add readers). */
uint32_t ir_reads(const Graph *g, uint32_t v)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin && !n->dead; k++)
            count += n->in[k] == v;
    }
    return count;
}

uint32_t ir_emit(Graph *g, Op op, const char *name, const uint32_t *in, uint32_t nin,
                 const uint32_t *out, uint32_t nout, uint8_t phase)
{
    uint32_t id = ir_add_node(g, op, op_info[op].name, name);
    Node *n = &g->nodes[id];
    n->phase = phase;
    n->origin = phase == PH_BACKWARD ? g->cur_origin : NONE;
    n->nin = nin;
    n->in = arena_array(g->arena, nin + 1, sizeof(uint32_t));
    memcpy(n->in, in, nin * sizeof(uint32_t));
    n->nout = nout;
    n->out = arena_array(g->arena, nout + 1, sizeof(uint32_t));
    for (uint32_t k = 0; k < nout; k++) {
        n->out[k] = out[k];
        if (out[k] != NONE)
            g->values[out[k]].producer = id;
    }
    if (g->norder == g->cap_order) {
        uint32_t cap = g->cap_order ? g->cap_order * 2 : 64;
        g->order = arena_grow(g->arena, g->order, g->norder, cap, sizeof(uint32_t));
        g->cap_order = cap;
    }
    g->order[g->norder++] = id;
    return id;
}

static Attr *new_attr(Graph *g, Node *n, const char *name)
{
    n->attrs = arena_grow(g->arena, n->attrs, n->nattrs, n->nattrs + 1, sizeof(Attr));
    Attr *a = &n->attrs[n->nattrs++];
    a->name = arena_strdup(g->arena, name);
    return a;
}

void ir_set_int(Graph *g, Node *n, const char *name, int64_t v)
{
    Attr *a = new_attr(g, n, name);
    a->kind = AT_INT;
    a->i = v;
}

void ir_set_float(Graph *g, Node *n, const char *name, double v)
{
    Attr *a = new_attr(g, n, name);
    a->kind = AT_FLOAT;
    a->f = v;
}

void ir_set_str(Graph *g, Node *n, const char *name, const char *s)
{
    Attr *a = new_attr(g, n, name);
    a->kind = AT_STRING;
    a->s = arena_strdup(g->arena, s);
}

void ir_set_ints(Graph *g, Node *n, const char *name, const int64_t *v, uint32_t count)
{
    Attr *a = new_attr(g, n, name);
    a->kind = AT_INTS;
    a->ints = arena_array(g->arena, count ? count : 1, sizeof(int64_t));
    memcpy(a->ints, v, count * sizeof(int64_t));
    a->n = count;
}

void ir_copy_attrs(Graph *g, Node *dst, const Node *src)
{
    if (src->nattrs == 0)
        return;
    dst->attrs = arena_grow(g->arena, dst->attrs, dst->nattrs, dst->nattrs + src->nattrs,
                            sizeof(Attr));
    memcpy(dst->attrs + dst->nattrs, src->attrs, src->nattrs * sizeof(Attr));
    dst->nattrs += src->nattrs;
}

Loc value_loc(const Graph *g, uint32_t v)
{
    const Value *val = &g->values[v];
    if (val->producer != NONE)
        return g->nodes[val->producer].loc;
    return val->loc;
}

/* ---- attributes ---- */

const Attr *ir_attr(const Node *n, const char *name)
{
    for (uint32_t i = 0; i < n->nattrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

static const Attr *attr_of_kind(const Node *n, const char *name, AttrKind k,
                                const char *kind_name)
{
    const Attr *a = ir_attr(n, name);
    if (a && a->kind != k)
        error_at(&n->loc, "attribute '%s' must be %s", name, kind_name);
    return a;
}

int64_t attr_int(const Node *n, const char *name, int64_t dflt)
{
    const Attr *a = attr_of_kind(n, name, AT_INT, "an integer");
    return a ? a->i : dflt;
}

double attr_float(const Node *n, const char *name, double dflt)
{
    const Attr *a = attr_of_kind(n, name, AT_FLOAT, "a float");
    return a ? a->f : dflt;
}

const char *attr_str(const Node *n, const char *name, const char *dflt)
{
    const Attr *a = attr_of_kind(n, name, AT_STRING, "a string");
    return a ? a->s : dflt;
}

const int64_t *attr_ints(const Node *n, const char *name, uint32_t *count)
{
    const Attr *a = attr_of_kind(n, name, AT_INTS, "a list of integers");
    *count = a ? a->n : 0;
    return a ? a->ints : NULL;
}

/* ---- topological order ---- */

static void error_dangling(Graph *g, const Node *n, uint32_t v)
{
    error_at(&n->loc, "input '%s' is produced by no node and is neither a graph "
             "input nor an initializer",
             str_escaped(g->arena, g->values[v].name, 160));
}

static bool value_ready(const Value *val)
{
    return val->kind != VK_ACTIVATION;
}

/* Kahn's algorithm over live nodes; ties keep file order. */
void ir_toposort(Graph *g)
{
    Arena *a = g->arena;
    uint32_t *pending = arena_array(a, g->nnodes, sizeof *pending);
    uint32_t *users_start = arena_array(a, (size_t)g->nvalues + 1, sizeof(uint32_t));
    uint32_t nedges = 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        Node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (uint32_t k = 0; k < n->nin; k++) {
            uint32_t v = n->in[k];
            if (v == NONE || value_ready(&g->values[v]))
                continue;
            if (g->values[v].producer == NONE)
                error_dangling(g, n, v);
            pending[i]++;
            users_start[v]++;
            nedges++;
        }
    }
    /* Prefix sums give each value its slice of the user list. */
    uint32_t sum = 0;
    for (uint32_t v = 0; v <= g->nvalues; v++) {
        uint32_t c = users_start[v];
        users_start[v] = sum;
        sum += c;
    }
    uint32_t *fill = arena_array(a, g->nvalues + 1, sizeof *fill);
    memcpy(fill, users_start, (size_t)(g->nvalues + 1) * sizeof *fill);
    uint32_t *users = arena_array(a, nedges + 1, sizeof *users);
    for (uint32_t i = 0; i < g->nnodes; i++) {
        Node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (uint32_t k = 0; k < n->nin; k++) {
            uint32_t v = n->in[k];
            if (v != NONE && !value_ready(&g->values[v]))
                users[fill[v]++] = i;
        }
    }
    uint32_t *order = arena_array(a, g->nnodes + 1, sizeof *order);
    uint32_t head = 0, tail = 0, live = 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].dead)
            continue;
        live++;
        if (pending[i] == 0)
            order[tail++] = i;
    }
    while (head < tail) {
        Node *n = &g->nodes[order[head++]];
        for (uint32_t k = 0; k < n->nout; k++) {
            uint32_t v = n->out[k];
            if (v == NONE)
                continue;
            for (uint32_t u = users_start[v]; u < users_start[v + 1]; u++)
                if (--pending[users[u]] == 0)
                    order[tail++] = users[u];
        }
    }
    if (tail != live) {
        for (uint32_t i = 0; i < g->nnodes; i++)
            if (!g->nodes[i].dead && pending[i])
                error_at(&g->nodes[i].loc, "the graph has a cycle through this "
                         "node; ONNX graphs must be acyclic (loops belong in a "
                         "Loop op)");
    }
    g->order = order;
    g->norder = tail;
    g->cap_order = g->nnodes + 1;
}

/* ---- internal consistency ---- */

void ir_verify(Graph *g)
{
    for (uint32_t i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (uint32_t k = 0; k < n->nin; k++)
            MPCC_ASSERT(n->in[k] == NONE || n->in[k] < g->nvalues);
        for (uint32_t k = 0; k < n->nout; k++) {
            uint32_t v = n->out[k];
            MPCC_ASSERT(v == NONE || (v < g->nvalues && g->values[v].producer == i));
        }
    }
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind == VK_PARAM || val->kind == VK_CONST)
            MPCC_ASSERT(val->data != NULL);
        MPCC_ASSERT(ir_find(g, val->name) == v);
    }
}

/* A lowering (einsum.c, rnn.c) emitted its nodes at the end of the order,
 * from `before` on: they move to pos, in place of the node there. */
void ir_splice_order(Graph *g, uint32_t pos, uint32_t before)
{
    uint32_t added = g->norder - before;
    uint32_t *moved = arena_array(g->arena, added, sizeof *moved);
    memcpy(moved, g->order + before, added * sizeof *moved);
    memmove(g->order + pos + added, g->order + pos + 1,
            (before - pos - 1) * sizeof *g->order);
    memcpy(g->order + pos, moved, added * sizeof *moved);
    g->norder = before - 1 + added;
}

/* A node a lowering emits in place of `node`: named "PREFIX/OpK" (k from
 * *step), at the node's location, writing a new value (or `out` when it is
 * not NONE), which *result receives. */
Node *ir_emit_lowered(Graph *g, uint32_t node, const char *prefix, uint32_t *step, Op op,
                      const uint32_t *in, uint32_t nin, uint32_t out, uint32_t *result)
{
    const char *name = arena_printf(g->arena, "%s/%s%u", prefix, op_info[op].name, (*step)++);
    if (out == NONE)
        out = ir_new_value(g, name, g->values[in[0]].dtype, &(Shape){0});
    uint32_t id = ir_emit(g, op, name, in, nin, &out, 1, PH_FORWARD);
    Node *n = &g->nodes[id];
    n->loc = g->nodes[node].loc;
    *result = out;
    return n;
}

/* A constant a lowering needs: n elements of type t from v, named
 * "PREFIX/cK". */
uint32_t ir_lowered_const(Graph *g, const char *prefix, uint32_t *step, DType t, const void *v,
                          int n, const Shape *shape)
{
    size_t size = dtype_size(t) * (size_t)n;
    void *data = arena_alloc(g->arena, size + 8);
    memcpy(data, v, size);
    Tensor *c = arena_alloc(g->arena, sizeof *c);
    *c = (Tensor){.dtype = t, .shape = *shape, .data = data, .nbytes = size};
    return ir_new_const(g, arena_printf(g->arena, "%s/c%u", prefix, (*step)++), c);
}
