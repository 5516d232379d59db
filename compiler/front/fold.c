/* fold.c — compile-time evaluation of nodes whose inputs are all constants,
 * and pruning of what folding leaves unused.
 *
 * Shape inference (shapes.c) has already sized every output; folding fills
 * the bytes. Trainable weights (VK_PARAM) are never folded: a node reading
 * one stays in the graph so that training can update the weight.
 */
#include "mpcc.h"

#include <math.h>
#include <string.h>

enum { FOLD_MAX_BYTES = 64 << 20 };

/* ---- element stores ---- */

static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    if (isnan(f))
        return sign | 0x7e00;
    float a = fabsf(f);
    if (a >= 65520.0f)
        return sign | 0x7c00;
    if (a < 6.103515625e-05f)   /* subnormal: round to a multiple of 2^-24 */
        return sign | (uint16_t)lrintf(a * 16777216.0f);
    int e;
    float m = frexpf(a, &e);    /* a = m * 2^e, m in [0.5, 1) */
    uint32_t mant = (uint32_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
    int exp = e - 1 + 15;
    if (mant == 1024)
        mant = 0, exp++;
    return sign | (uint16_t)(exp << 10) | (uint16_t)mant;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if (isnan(f))
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static void put(Tensor *t, int64_t i, const void *v, size_t n)
{
    memcpy((char *)t->data + (size_t)i * n, v, n);
}

static void store_f64(Tensor *t, int64_t i, double v);

static void store_i64(Tensor *t, int64_t i, int64_t v)
{
    switch (t->dtype) {
    case DT_BOOL: { uint8_t b = v != 0; put(t, i, &b, 1); break; }
    case DT_U8: case DT_I8: { uint8_t b = (uint8_t)v; put(t, i, &b, 1); break; }
    case DT_U16: case DT_I16: { uint16_t h = (uint16_t)v; put(t, i, &h, 2); break; }
    case DT_U32: case DT_I32: { uint32_t w = (uint32_t)v; put(t, i, &w, 4); break; }
    case DT_U64: case DT_I64: put(t, i, &v, 8); break;
    default: store_f64(t, i, (double)v); break;
    }
}

/* Element i of t set to v, rounded to t's type. */
void tensor_set_f64(Tensor *t, int64_t i, double v)
{
    store_f64(t, i, v);
}

static void store_f64(Tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case DT_F32: { float f = (float)v; put(t, i, &f, 4); break; }
    case DT_F64: put(t, i, &v, 8); break;
    case DT_F16: { uint16_t h = float_to_half((float)v); put(t, i, &h, 2); break; }
    case DT_BF16: { uint16_t h = float_to_bf16((float)v); put(t, i, &h, 2); break; }
    case DT_BOOL: store_i64(t, i, v != 0); break;
    default:
        store_i64(t, i, isnan(v) ? 0 : v >= 9.2e18 ? INT64_MAX
                                 : v <= -9.2e18 ? INT64_MIN : (int64_t)v);
        break;
    }
}

/* ---- broadcasting index ---- */

static int64_t bcast_index(const Shape *out, const Shape *in, int64_t i)
{
    int64_t idx = 0, stride = 1;
    for (int k = out->rank - 1, j = in->rank - 1; k >= 0; k--, j--) {
        int64_t coord = i % out->d[k];
        i /= out->d[k];
        if (j < 0)
            continue;
        if (in->d[j] != 1)
            idx += coord * stride;
        stride *= in->d[j];
    }
    return idx;
}

typedef struct Ev {
    Graph *g;
    Node *n;
    const Tensor *in[8];
    Tensor *out[8];
} Ev;

static const Tensor *arg(const Ev *e, uint32_t k)
{
    return k < e->n->nin && e->n->in[k] != NONE ? e->g->values[e->n->in[k]].data : NULL;
}

/* ---- elementwise ---- */

static double unary_f(Op op, double x)
{
    switch (op) {
    case OP_NEG: return -x;
    case OP_ABS: return fabs(x);
    case OP_SIGN: return (x > 0) - (x < 0);
    case OP_FLOOR: return floor(x);
    case OP_CEIL: return ceil(x);
    case OP_SQRT: return sqrt(x);
    case OP_RECIPROCAL: return 1.0 / x;
    default: unreachable();
    }
}

static int64_t unary_i(Op op, int64_t x)
{
    switch (op) {
    case OP_NEG: return -x;
    case OP_ABS: return x < 0 ? -x : x;
    case OP_SIGN: return (x > 0) - (x < 0);
    case OP_NOT: return !x;
    case OP_FLOOR: case OP_CEIL: return x;
    default: unreachable();
    }
}

static void eval_unary(Ev *e)
{
    const Tensor *x = arg(e, 0);
    Tensor *o = e->out[0];
    int64_t n = shape_numel(&o->shape);
    bool fl = dtype_is_float(x->dtype) || e->n->op == OP_SQRT || e->n->op == OP_RECIPROCAL;
    for (int64_t i = 0; i < n; i++) {
        if (fl)
            store_f64(o, i, unary_f(e->n->op, tensor_f64(x, i)));
        else
            store_i64(o, i, unary_i(e->n->op, tensor_i64(x, i)));
    }
}

static void eval_cast(Ev *e)
{
    const Tensor *x = arg(e, 0);
    Tensor *o = e->out[0];
    int64_t n = shape_numel(&o->shape);
    for (int64_t i = 0; i < n; i++) {
        if (dtype_is_float(x->dtype))
            store_f64(o, i, tensor_f64(x, i));
        else
            store_i64(o, i, tensor_i64(x, i));
    }
}

/* Float Mod as the runtime's kernel computes it (numpy's rule): C's fmod,
 * moved by the divisor when the signs differ; a zero takes the divisor's
 * sign. */
static double mod_f(bool c_fmod, double a, double b)
{
    double r = fmod(a, b);
    if (c_fmod || b == 0)
        return r;
    if (r == 0)
        return copysign(0.0, b);
    return (r < 0) != (b < 0) ? r + b : r;
}

static double binary_f(const Ev *e, double a, double b)
{
    switch (e->n->op) {
    case OP_ADD: case OP_SUM: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_MOD: return mod_f(mod_fmod(e->n), a, b);
    case OP_MIN: return a < b ? a : b;
    case OP_MAX: return a > b ? a : b;
    case OP_EQUAL: return a == b;
    case OP_LESS: return a < b;
    case OP_LESS_EQUAL: return a <= b;
    case OP_GREATER: return a > b;
    case OP_GREATER_EQUAL: return a >= b;
    default: unreachable();
    }
}

static int64_t binary_i(const Ev *e, int64_t a, int64_t b)
{
    switch (e->n->op) {
    case OP_ADD: case OP_SUM: return (int64_t)((uint64_t)a + (uint64_t)b);
    case OP_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case OP_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case OP_DIV: case OP_MOD:
        if (b == 0 || (a == INT64_MIN && b == -1))
            error_at(&e->n->loc, "integer division by zero in a constant expression");
        if (e->n->op == OP_DIV)
            return a / b;
        if (mod_fmod(e->n))
            return a % b;
        {
            int64_t r = a % b;   /* the sign follows the divisor, as in Python */
            return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
        }
    case OP_MIN: return a < b ? a : b;
    case OP_MAX: return a > b ? a : b;
    case OP_EQUAL: return a == b;
    case OP_LESS: return a < b;
    case OP_LESS_EQUAL: return a <= b;
    case OP_GREATER: return a > b;
    case OP_GREATER_EQUAL: return a >= b;
    case OP_AND: return a && b;
    case OP_OR: return a || b;
    case OP_XOR: return (!a) != (!b);
    default: unreachable();
    }
}

/* Folds left to right, so variadic Min/Max/Sum work pairwise. */
static void eval_binary(Ev *e)
{
    Tensor *o = e->out[0];
    int64_t n = shape_numel(&o->shape);
    const Tensor *a = arg(e, 0);
    bool fl = dtype_is_float(a->dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t ia = bcast_index(&o->shape, &a->shape, i);
        double fv = fl ? tensor_f64(a, ia) : 0;
        int64_t iv = fl ? 0 : tensor_i64(a, ia);
        for (uint32_t k = 1; k < e->n->nin; k++) {
            const Tensor *b = arg(e, k);
            int64_t ib = bcast_index(&o->shape, &b->shape, i);
            if (fl)
                fv = binary_f(e, fv, tensor_f64(b, ib));
            else
                iv = binary_i(e, iv, tensor_i64(b, ib));
        }
        if (fl)
            store_f64(o, i, fv);
        else
            store_i64(o, i, iv);
    }
}

/* ---- moving elements ---- */

static void copy_elem(Tensor *o, int64_t oi, const Tensor *x, int64_t xi)
{
    size_t es = dtype_size(x->dtype);
    memcpy((char *)o->data + (size_t)oi * es, (const char *)x->data + (size_t)xi * es, es);
}

static void eval_where(Ev *e)
{
    Tensor *o = e->out[0];
    const Tensor *c = arg(e, 0), *a = arg(e, 1), *b = arg(e, 2);
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++) {
        bool take_a = tensor_i64(c, bcast_index(&o->shape, &c->shape, i)) != 0;
        const Tensor *src = take_a ? a : b;
        copy_elem(o, i, src, bcast_index(&o->shape, &src->shape, i));
    }
}

static void eval_expand(Ev *e)
{
    Tensor *o = e->out[0];
    const Tensor *x = arg(e, 0);
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++)
        copy_elem(o, i, x, bcast_index(&o->shape, &x->shape, i));
}

static void eval_concat(Ev *e)
{
    Tensor *o = e->out[0];
    int r = o->shape.rank;
    int64_t axis = attr_int(e->n, "axis", 0);
    axis = axis < 0 ? axis + r : axis;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= o->shape.d[i];
    for (int i = (int)axis + 1; i < r; i++)
        inner *= o->shape.d[i];
    int64_t oi = 0;
    for (int64_t a = 0; a < outer; a++)
        for (uint32_t k = 0; k < e->n->nin; k++) {
            const Tensor *x = arg(e, k);
            int64_t len = x->shape.d[axis] * inner;
            for (int64_t j = 0; j < len; j++)
                copy_elem(o, oi++, x, a * len + j);
        }
}

static void eval_gather(Ev *e)
{
    Tensor *o = e->out[0];
    const Tensor *x = arg(e, 0), *idx = arg(e, 1);
    int64_t axis = attr_int(e->n, "axis", 0);
    axis = axis < 0 ? axis + x->shape.rank : axis;
    int64_t outer = 1, inner = 1, dim = x->shape.d[axis];
    for (int i = 0; i < axis; i++)
        outer *= x->shape.d[i];
    for (int i = (int)axis + 1; i < x->shape.rank; i++)
        inner *= x->shape.d[i];
    int64_t ni = shape_numel(&idx->shape), oi = 0;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t k = 0; k < ni; k++) {
            int64_t v = tensor_i64(idx, k);
            v = v < 0 ? v + dim : v;
            for (int64_t j = 0; j < inner; j++)
                copy_elem(o, oi++, x, (a * dim + v) * inner + j);
        }
}

/* Walks the output in order; output coordinate c reads start + c * step. */
static void eval_strided(const Tensor *x, const int64_t *start, const int64_t *step,
                         Tensor *o)
{
    int r = o->shape.rank;
    int64_t xstride[MAX_RANK], coord[MAX_RANK] = {0};
    int64_t s = 1;
    for (int i = x->shape.rank - 1; i >= 0; i--)
        xstride[i] = s, s *= x->shape.d[i];
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++) {
        int64_t xi = 0;
        for (int k = 0; k < r; k++)
            xi += (start[k] + coord[k] * step[k]) * xstride[k];
        copy_elem(o, i, x, xi);
        for (int k = r - 1; k >= 0 && ++coord[k] == o->shape.d[k]; k--)
            coord[k] = 0;
    }
}

static void eval_slice(Ev *e)
{
    SliceParams p;
    slice_params(e->g, e->n, &p);
    eval_strided(arg(e, 0), p.start, p.step, e->out[0]);
}

static void eval_transpose(Ev *e)
{
    int perm[MAX_RANK];
    transpose_perm(e->g, e->n, perm);
    /* Output coordinate k walks input dimension perm[k]. */
    const Tensor *x = arg(e, 0);
    Tensor *o = e->out[0];
    int r = o->shape.rank;
    int64_t xstride[MAX_RANK], coord[MAX_RANK] = {0}, s = 1;
    for (int i = r - 1; i >= 0; i--)
        xstride[i] = s, s *= x->shape.d[i];
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++) {
        int64_t xi = 0;
        for (int k = 0; k < r; k++)
            xi += coord[k] * xstride[perm[k]];
        copy_elem(o, i, x, xi);
        for (int k = r - 1; k >= 0 && ++coord[k] == o->shape.d[k]; k--)
            coord[k] = 0;
    }
}

static void eval_split(Ev *e)
{
    int axis;
    int64_t *sizes = split_sizes(e->g, e->n, &axis);
    int64_t start[MAX_RANK] = {0}, step[MAX_RANK];
    for (int i = 0; i < MAX_RANK; i++)
        step[i] = 1;
    for (uint32_t k = 0; k < e->n->nout; k++) {
        if (e->out[k])
            eval_strided(arg(e, 0), start, step, e->out[k]);
        start[axis] += sizes[k];
    }
}

static void eval_tile(Ev *e)
{
    Tensor *o = e->out[0];
    const Tensor *x = arg(e, 0);
    int r = o->shape.rank;
    int64_t coord[MAX_RANK] = {0};
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++) {
        int64_t xi = 0;
        for (int k = 0; k < r; k++)
            xi = xi * x->shape.d[k] + coord[k] % x->shape.d[k];
        copy_elem(o, i, x, xi);
        for (int k = r - 1; k >= 0 && ++coord[k] == o->shape.d[k]; k--)
            coord[k] = 0;
    }
}

static void eval_trilu(Ev *e)
{
    Tensor *o = e->out[0];
    const Tensor *x = arg(e, 0);
    TriluParams p = trilu_params(e->g, e->n);
    int r = o->shape.rank;
    int64_t rows = o->shape.d[r - 2], cols = o->shape.d[r - 1];
    size_t es = dtype_size(o->dtype);
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++) {
        int64_t col = i % cols, row = (i / cols) % rows;
        bool keep = p.upper ? col - row >= p.k : col - row <= p.k;
        if (keep)
            copy_elem(o, i, x, i);
        else
            memset((char *)o->data + (size_t)i * es, 0, es);
    }
}

/* ---- sources of new values ---- */

static void eval_shape(Ev *e)
{
    const Value *x = &e->g->values[e->n->in[0]];
    int r = x->shape.rank;
    int64_t start = attr_int(e->n, "start", 0);
    start = start < 0 ? start + r : start;
    start = start < 0 ? 0 : start > r ? r : start;
    for (int64_t i = 0; i < e->out[0]->shape.d[0]; i++)
        store_i64(e->out[0], i, x->shape.d[start + i]);
}

static void eval_size(Ev *e)
{
    store_i64(e->out[0], 0, shape_numel(&e->g->values[e->n->in[0]].shape));
}

static void eval_constant_of_shape(Ev *e)
{
    Tensor *o = e->out[0];
    const Attr *a = ir_attr(e->n, "value");
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++) {
        if (a)
            copy_elem(o, i, a->t, 0);
        else
            store_f64(o, i, 0.0);
    }
}

static void eval_range(Ev *e)
{
    Tensor *o = e->out[0];
    const Tensor *s = arg(e, 0), *d = arg(e, 2);
    for (int64_t i = 0, n = shape_numel(&o->shape); i < n; i++) {
        if (dtype_is_float(o->dtype))
            store_f64(o, i, tensor_f64(s, 0) + (double)i * tensor_f64(d, 0));
        else
            store_i64(o, i, tensor_i64(s, 0) + i * tensor_i64(d, 0));
    }
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: same bytes, new shape. */
static bool is_view_op(Op op)
{
    return op == OP_RESHAPE || op == OP_FLATTEN || op == OP_SQUEEZE ||
           op == OP_UNSQUEEZE || op == OP_IDENTITY;
}

static void evaluate(Ev *e)
{
    switch (e->n->op) {
    case OP_NEG: case OP_ABS: case OP_SIGN: case OP_FLOOR: case OP_CEIL:
    case OP_SQRT: case OP_RECIPROCAL: case OP_NOT:
        eval_unary(e);
        break;
    case OP_CAST: eval_cast(e); break;
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MOD: case OP_MIN:
    case OP_MAX: case OP_SUM: case OP_AND: case OP_OR: case OP_XOR: case OP_EQUAL:
    case OP_LESS: case OP_LESS_EQUAL: case OP_GREATER: case OP_GREATER_EQUAL:
        eval_binary(e);
        break;
    case OP_WHERE: eval_where(e); break;
    case OP_EXPAND: eval_expand(e); break;
    case OP_CONCAT: eval_concat(e); break;
    case OP_GATHER: eval_gather(e); break;
    case OP_SLICE: eval_slice(e); break;
    case OP_TRANSPOSE: eval_transpose(e); break;
    case OP_SPLIT: eval_split(e); break;
    case OP_TILE: eval_tile(e); break;
    case OP_TRILU: eval_trilu(e); break;
    case OP_SHAPE: eval_shape(e); break;
    case OP_SIZE: eval_size(e); break;
    case OP_CONSTANT_OF_SHAPE: eval_constant_of_shape(e); break;
    case OP_RANGE: eval_range(e); break;
    /* not OPF_FOLD: never evaluated (fold_node checks the flag first) */
    case OP_UNKNOWN: case OP_COS: case OP_ELU: case OP_ERF: case OP_EXP: case OP_GELU:
    case OP_HARD_SIGMOID: case OP_HARD_SWISH: case OP_IDENTITY: case OP_LEAKY_RELU:
    case OP_LOG: case OP_RELU: case OP_ROUND: case OP_SELU: case OP_SIGMOID: case OP_SIN:
    case OP_SOFTPLUS: case OP_TANH: case OP_CLIP: case OP_DROPOUT: case OP_POW: case OP_PRELU:
    case OP_MEAN: case OP_MATMUL: case OP_GEMM: case OP_EINSUM: case OP_LSTM: case OP_GRU: case OP_RNN: case OP_CONV:
    case OP_REDUCE_L1: case OP_REDUCE_L2: case OP_REDUCE_LOG_SUM: case OP_REDUCE_LOG_SUM_EXP:
    case OP_DEPTH_TO_SPACE: case OP_SPACE_TO_DEPTH: case OP_CAST_LIKE:
    case OP_CONV_TRANSPOSE: case OP_MAX_POOL: case OP_AVERAGE_POOL: case OP_GLOBAL_AVG_POOL:
    case OP_GLOBAL_MAX_POOL: case OP_BATCH_NORM: case OP_INSTANCE_NORM: case OP_LAYER_NORM:
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SOFTMAX_CE: case OP_NLL_LOSS:
    case OP_REDUCE_MEAN: case OP_REDUCE_SUM: case OP_REDUCE_MAX: case OP_REDUCE_MIN:
    case OP_REDUCE_PROD: case OP_REDUCE_SUM_SQ: case OP_ARGMAX: case OP_ARGMIN:
    case OP_CUMSUM: case OP_FLATTEN: case OP_PAD: case OP_RESHAPE: case OP_RESIZE:
    case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_UPSAMPLE: case OP_SCE_GRAD: case OP_MSE_LOSS:
    case OP_MSE_GRAD: case OP_RELU_GRAD: case OP_SUM_TO: case OP_CONV_GRAD_X:
    case OP_CONV_GRAD_W: case OP_CONV_GRAD_B: case OP_BN_GRAD: case OP_MAX_POOL_GRAD:
    case OP_GAP_GRAD: case OP_UNARY_GRAD: case OP_POW_GRAD: case OP_BATCH_MATMUL:
    case OP_SOFTMAX_GRAD: case OP_SOFTMAX_BIAS: case OP_LN_GRAD: case OP_SLICE_GRAD:
    case OP_GATHER_GRAD: case OP_DROPOUT_GRAD: case OP_LOG_SOFTMAX_GRAD: case OP_NLL_GRAD: case OP_MINMAX_GRAD:
    case OP_PRELU_GRAD: case OP_REDUCE_MAX_GRAD: case OP_PAD_GRAD: case OP_AVG_POOL_GRAD:
    case OP_INSTANCE_NORM_GRAD: case OP_RESIZE_GRAD: case OP_SGD: case OP_ADAMW:
    case OP_GATHER_ELEMENTS: case OP_GATHER_ND: case OP_SCATTER: case OP_SCATTER_ELEMENTS:
    case OP_SCATTER_ND: case OP_GATHER_ELEMENTS_GRAD: case OP_GATHER_ND_GRAD:
    case OP_SCATTER_ELEMENTS_GRAD: case OP_SCATTER_ND_GRAD:
    case OP_TOPK: case OP_ONE_HOT: case OP_TOPK_GRAD: case OP_ONE_HOT_GRAD: unreachable();
    }
}

static bool inputs_constant(const Graph *g, const Node *n)
{
    if (n->op == OP_SHAPE || n->op == OP_SIZE)
        return true;   /* only the static shape is read */
    for (uint32_t k = 0; k < n->nin; k++)
        if (n->in[k] != NONE && g->values[n->in[k]].kind != VK_CONST)
            return false;
    return true;
}

static bool small_outputs(const Graph *g, const Node *n)
{
    int64_t total = 0;
    for (uint32_t k = 0; k < n->nout; k++) {
        if (n->out[k] == NONE)
            continue;
        const Value *v = &g->values[n->out[k]];
        int64_t bytes;
        if (dtype_size(v->dtype) == 0 || !shape_bytes(&v->shape, v->dtype, &bytes) ||
            bytes > FOLD_MAX_BYTES - total)
            return false;
        total += bytes;
    }
    return true;
}

bool fold_node(Graph *g, Node *n)
{
    if (!(op_info[n->op].flags & OPF_FOLD) || n->nin > 8 || n->nout > 8 ||
        !inputs_constant(g, n) || !small_outputs(g, n))
        return false;
    Ev e = {.g = g, .n = n};
    for (uint32_t k = 0; k < n->nout; k++) {
        if (n->out[k] == NONE)
            continue;
        Value *v = &g->values[n->out[k]];
        Tensor *t = arena_alloc(g->arena, sizeof *t);
        t->dtype = v->dtype;
        t->shape = v->shape;
        t->nbytes = (size_t)shape_numel(&v->shape) * dtype_size(v->dtype);
        e.out[k] = t;
    }
    if (is_view_op(n->op))
        e.out[0]->data = arg(&e, 0)->data;
    else {
        for (uint32_t k = 0; k < n->nout; k++)
            if (e.out[k])
                e.out[k]->data = arena_alloc(g->arena, e.out[k]->nbytes);
        evaluate(&e);
    }
    for (uint32_t k = 0; k < n->nout; k++) {
        if (n->out[k] == NONE)
            continue;
        Value *v = &g->values[n->out[k]];
        v->kind = VK_CONST;
        v->data = e.out[k];
    }
    n->dead = true;
    return true;
}

/* ---- pruning ---- */

static void count_uses(Graph *g)
{
    for (uint32_t v = 0; v < g->nvalues; v++)
        g->values[v].nuses = 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                g->values[n->in[k]].nuses++;
    }
}

static bool node_needed(const Graph *g, const Node *n)
{
    for (uint32_t k = 0; k < n->nout; k++) {
        if (n->out[k] == NONE)
            continue;
        const Value *v = &g->values[n->out[k]];
        if (v->nuses || v->is_output)
            return true;
    }
    return false;
}

/* Removes dead nodes from the order, then nodes nothing needs, back to front
 * (a node's users come after it, so one backward sweep is enough). */
void prune(Graph *g)
{
    count_uses(g);
    for (uint32_t i = g->norder; i-- > 0;) {
        Node *n = &g->nodes[g->order[i]];
        if (n->dead || node_needed(g, n))
            continue;
        n->dead = true;
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                g->values[n->in[k]].nuses--;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->norder; i++)
        if (!g->nodes[g->order[i]].dead)
            g->order[k++] = g->order[i];
    g->norder = k;
}
