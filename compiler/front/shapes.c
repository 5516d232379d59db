/* shapes.c — static shape and type inference, node by node in topological
 * order, folding each node whose inputs are constants as soon as its output
 * types are known (fold.c). Folding as we go is what turns the Shape ->
 * Gather -> Concat chains of PyTorch exports into the constants that
 * Reshape, Expand and Resize need to have static output shapes.
 *
 * Every error names the node and prints the shapes involved.
 */
#include "mpcc.h"

#include <math.h>
#include <string.h>

typedef struct Inf {
    Graph *g;
    Node *n;
} Inf;

/* ---- access to inputs, outputs and constants ---- */

static bool has_in(const Inf *c, uint32_t k)
{
    return node_has_in(c->n, k);
}

static Value *in(const Inf *c, uint32_t k)
{
    return node_in(c->g, c->n, k);
}

static const char *ty(const Inf *c, const Value *v)
{
    return arena_printf(c->g->arena, "%s%s", dtype_name(v->dtype),
                        shape_str(c->g->arena, &v->shape));
}

static const char *shp(const Inf *c, const Shape *s)
{
    return shape_str(c->g->arena, s);
}

static void set_out(const Inf *c, uint32_t k, DType dt, const Shape *s)
{
    if (k >= c->n->nout || c->n->out[k] == NONE)
        return;
    if (s->rank > MAX_RANK || s->rank < 0)
        error_at(&c->n->loc, "the output would have rank %d; mpcc's limit is %d",
                 s->rank, MAX_RANK);
    int64_t bytes;
    if (!shape_bytes(s, dt, &bytes))
        error_at(&c->n->loc, "output %u would have the shape %s of %s, more bytes "
                 "than a 64-bit machine addresses", k, shp(c, s), dtype_name(dt));
    Value *v = &c->g->values[c->n->out[k]];
    v->dtype = dt;
    v->shape = *s;
    v->typed = true;
}

static const Tensor *const_in(const Inf *c, uint32_t k, const char *what)
{
    return param_const(c->g, c->n, k, what);
}

static int64_t *ints_from(const Inf *c, const char *attr, uint32_t k, uint32_t *count,
                          bool *given)
{
    return param_ints(c->g, c->n, attr, k, count, given);
}

static int norm_axis(const Inf *c, int64_t axis, int rank, const char *what)
{
    return param_axis(c->n, axis, rank, what);
}

static void same_dtype(const Inf *c, const Value *a, const Value *b)
{
    if (a->dtype != b->dtype)
        error_at(&c->n->loc, "input types differ: %s and %s", ty(c, a), ty(c, b));
}

/* Checked dimension arithmetic: a model can carry any int64 in its
 * attributes, and overflow must be an error, not undefined behaviour. */
static int64_t dim_add(const Inf *c, int64_t a, int64_t b)
{
    int64_t r;
    if (add_overflows(a, b, &r))
        error_at(&c->n->loc, "a dimension overflows (%lld + %lld)", (long long)a,
                 (long long)b);
    return r;
}

static int64_t dim_mul(const Inf *c, int64_t a, int64_t b)
{
    int64_t r;
    if (mul_overflows(a < 0 ? -a : a, b < 0 ? -b : b, &r))
        error_at(&c->n->loc, "a dimension overflows (%lld * %lld)", (long long)a,
                 (long long)b);
    return a * b;
}

/* ---- broadcasting ---- */

static Shape broadcast(const Inf *c, const Shape *a, const Shape *b)
{
    Shape r = {.rank = a->rank > b->rank ? a->rank : b->rank};
    for (int i = 0; i < r.rank; i++) {
        int ia = i - (r.rank - a->rank), ib = i - (r.rank - b->rank);
        int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
        if (da != db && da != 1 && db != 1)
            error_at(&c->n->loc, "shapes %s and %s cannot be broadcast together "
                     "(dimension %d: %lld vs %lld)", shp(c, a), shp(c, b), i,
                     (long long)da, (long long)db);
        r.d[i] = da == 1 ? db : da;
    }
    return r;
}

static void infer_elementwise(const Inf *c, bool to_bool, bool same_types)
{
    Shape s = in(c, 0)->shape;
    for (uint32_t k = 1; k < c->n->nin; k++) {
        if (same_types)
            same_dtype(c, in(c, 0), in(c, k));
        s = broadcast(c, &s, &in(c, k)->shape);
    }
    set_out(c, 0, to_bool ? DT_BOOL : in(c, 0)->dtype, &s);
}

static void infer_where(const Inf *c)
{
    if (in(c, 0)->dtype != DT_BOOL)
        error_at(&c->n->loc, "the condition must be bool, it is %s", ty(c, in(c, 0)));
    same_dtype(c, in(c, 1), in(c, 2));
    Shape s = broadcast(c, &in(c, 0)->shape, &in(c, 1)->shape);
    s = broadcast(c, &s, &in(c, 2)->shape);
    set_out(c, 0, in(c, 1)->dtype, &s);
}

static void infer_unary(const Inf *c)
{
    set_out(c, 0, in(c, 0)->dtype, &in(c, 0)->shape);
}

static void infer_gelu(const Inf *c)
{
    const char *a = attr_str(c->n, "approximate", "none");
    if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
        error_at(&c->n->loc, "approximate='%s' is not one of none, tanh",
                 str_escaped(c->g->arena, a, 40));
    infer_unary(c);
}

static void infer_cast(const Inf *c)
{
    DType to = (DType)attr_int(c->n, "to", 0);
    if ((unsigned)to >= DT_COUNT || dtype_size(to) == 0)
        error_at(&c->n->loc, "casting to element type %d (%s) is not supported", (int)to,
                 to == DT_STRING ? "string" : "unknown");
    set_out(c, 0, to, &in(c, 0)->shape);
}

static void infer_dropout(const Inf *c)
{
    infer_unary(c);
    set_out(c, 1, DT_BOOL, &in(c, 0)->shape);
}

/* ---- linear algebra ---- */

static void infer_matmul(const Inf *c)
{
    const Value *a = in(c, 0), *b = in(c, 1);
    same_dtype(c, a, b);
    Shape sa = a->shape, sb = b->shape;
    if (sa.rank == 0 || sb.rank == 0)
        error_at(&c->n->loc, "MatMul needs tensors of rank 1 or more, got %s and %s",
                 ty(c, a), ty(c, b));
    bool va = sa.rank == 1, vb = sb.rank == 1;
    if (va)
        sa = (Shape){2, {1, sa.d[0]}};
    if (vb)
        sb = (Shape){2, {sb.d[0], 1}};
    int64_t m = sa.d[sa.rank - 2], k = sa.d[sa.rank - 1];
    int64_t k2 = sb.d[sb.rank - 2], n = sb.d[sb.rank - 1];
    if (k != k2)
        error_at(&c->n->loc, "MatMul inner dimensions differ: %s @ %s", ty(c, a), ty(c, b));
    Shape ba = {sa.rank - 2}, bb = {sb.rank - 2};
    memcpy(ba.d, sa.d, sizeof(int64_t) * (size_t)ba.rank);
    memcpy(bb.d, sb.d, sizeof(int64_t) * (size_t)bb.rank);
    Shape r = broadcast(c, &ba, &bb);
    if (!va)
        r.d[r.rank++] = m;
    if (!vb)
        r.d[r.rank++] = n;
    set_out(c, 0, a->dtype, &r);
}

static void infer_gemm(const Inf *c)
{
    const Value *a = in(c, 0), *b = in(c, 1);
    if (a->shape.rank != 2 || b->shape.rank != 2)
        error_at(&c->n->loc, "Gemm needs 2-D inputs, got %s and %s", ty(c, a), ty(c, b));
    GemmParams gp = gemm_params(c->n);
    bool ta = gp.trans_a, tb = gp.trans_b;
    int64_t m = a->shape.d[ta ? 1 : 0], k = a->shape.d[ta ? 0 : 1];
    int64_t k2 = b->shape.d[tb ? 1 : 0], n = b->shape.d[tb ? 0 : 1];
    if (k != k2)
        error_at(&c->n->loc, "Gemm inner dimensions differ: %s%s and %s%s", ty(c, a),
                 ta ? " (transposed)" : "", ty(c, b), tb ? " (transposed)" : "");
    Shape r = {2, {m, n}};
    if (has_in(c, 2)) {
        Shape bc = broadcast(c, &in(c, 2)->shape, &r);
        if (!shape_eq(&bc, &r))
            error_at(&c->n->loc, "the bias %s does not broadcast to %s",
                     ty(c, in(c, 2)), shp(c, &r));
    }
    set_out(c, 0, a->dtype, &r);
}

/* ---- convolution and pooling ---- */

static Window window(const Inf *c, int n, const int64_t *kernel_from_weight)
{
    return window_params(c->n, n, kernel_from_weight);
}

static int64_t window_out(const Inf *c, const Window *w, int i, int64_t size, bool ceil_mode)
{
    int64_t span = dim_add(c, dim_mul(c, w->dil[i], w->k[i] - 1), 1);
    if (strcmp(w->auto_pad, "SAME_UPPER") == 0 || strcmp(w->auto_pad, "SAME_LOWER") == 0)
        return (size + w->stride[i] - 1) / w->stride[i];
    int64_t padded = size;
    if (strcmp(w->auto_pad, "VALID") != 0)
        padded = dim_add(c, padded, dim_add(c, w->pad[i], w->pad[w->n + i]));
    if (padded < span)
        error_at(&c->n->loc, "the window (%lld) is larger than the padded input (%lld) "
                 "in spatial dimension %d", (long long)span, (long long)padded, i);
    int64_t num = padded - span;
    int64_t out = (ceil_mode ? (num + w->stride[i] - 1) / w->stride[i]
                             : num / w->stride[i]) + 1;
    /* As PyTorch: the last window must start inside the input or left pad. */
    if (ceil_mode && (out - 1) * w->stride[i] >= dim_add(c, size, w->pad[i]))
        out--;
    return out;
}

static void infer_conv(const Inf *c)
{
    const Value *x = in(c, 0), *wt = in(c, 1);
    int n = x->shape.rank - 2;
    if (n < 1 || wt->shape.rank != x->shape.rank)
        error_at(&c->n->loc, "Conv needs input (N,C,spatial..) and weight of the same "
                 "rank, got %s and %s", ty(c, x), ty(c, wt));
    int64_t group = conv_group(c->n);
    int64_t cin = x->shape.d[1], cout = wt->shape.d[0];
    if (group < 1 || cin % group || cout % group || wt->shape.d[1] * group != cin)
        error_at(&c->n->loc, "input %s, weight %s and group=%lld do not agree "
                 "(weight dimension 1 must be C/group)", ty(c, x), ty(c, wt),
                 (long long)group);
    if (has_in(c, 2) && (in(c, 2)->shape.rank != 1 || in(c, 2)->shape.d[0] != cout))
        error_at(&c->n->loc, "the bias must have shape [%lld], it is %s",
                 (long long)cout, ty(c, in(c, 2)));
    Window w = window(c, n, wt->shape.d + 2);
    Shape r = {x->shape.rank, {x->shape.d[0], cout}};
    for (int i = 0; i < n; i++)
        r.d[2 + i] = window_out(c, &w, i, x->shape.d[2 + i], false);
    set_out(c, 0, x->dtype, &r);
}

static void infer_conv_transpose(const Inf *c)
{
    const Value *x = in(c, 0), *wt = in(c, 1);
    int n = x->shape.rank - 2;
    if (n < 1 || wt->shape.rank != x->shape.rank)
        error_at(&c->n->loc, "ConvTranspose needs input (N,C,spatial..) and weight of "
                 "the same rank, got %s and %s", ty(c, x), ty(c, wt));
    int64_t group = conv_group(c->n);
    if (group < 1 || wt->shape.d[0] != x->shape.d[1])
        error_at(&c->n->loc, "weight %s does not match input %s (dimension 0 must be C)",
                 ty(c, wt), ty(c, x));
    Window w = window(c, n, wt->shape.d + 2);
    int64_t outpad[MAX_RANK];
    window_ints(c->n, "output_padding", outpad, n, 0);
    uint32_t cnt;
    const int64_t *os = attr_ints(c->n, "output_shape", &cnt);
    Shape r = {x->shape.rank, {x->shape.d[0], wt->shape.d[1] * group}};
    for (int i = 0; i < n; i++) {
        if (os && cnt >= (uint32_t)n) {
            r.d[2 + i] = os[cnt - (uint32_t)n + (uint32_t)i];
            continue;
        }
        if (strncmp(w.auto_pad, "SAME", 4) == 0) {
            r.d[2 + i] = dim_mul(c, x->shape.d[2 + i], w.stride[i]);
            continue;
        }
        int64_t grow = dim_add(c, dim_mul(c, w.stride[i], x->shape.d[2 + i] - 1),
                               dim_add(c, outpad[i], dim_mul(c, w.k[i] - 1, w.dil[i])));
        r.d[2 + i] = dim_add(c, dim_add(c, grow, 1),
                             -dim_add(c, w.pad[i], w.pad[n + i]));
        if (r.d[2 + i] < 1)
            error_at(&c->n->loc, "the output would be empty in spatial dimension %d", i);
    }
    set_out(c, 0, x->dtype, &r);
}

static void infer_pool(const Inf *c)
{
    const Value *x = in(c, 0);
    int n = x->shape.rank - 2;
    if (n < 1)
        error_at(&c->n->loc, "pooling needs an input (N,C,spatial..), got %s", ty(c, x));
    Window w = window(c, n, NULL);
    bool ceil_mode = attr_int(c->n, "ceil_mode", 0) != 0;
    Shape r = {x->shape.rank, {x->shape.d[0], x->shape.d[1]}};
    for (int i = 0; i < n; i++)
        r.d[2 + i] = window_out(c, &w, i, x->shape.d[2 + i], ceil_mode);
    set_out(c, 0, x->dtype, &r);
    set_out(c, 1, DT_I64, &r);
}

static void infer_global_pool(const Inf *c)
{
    Shape r = in(c, 0)->shape;
    if (r.rank < 3)
        error_at(&c->n->loc, "global pooling needs (N,C,spatial..), got %s", ty(c, in(c, 0)));
    for (int i = 2; i < r.rank; i++)
        r.d[i] = 1;
    set_out(c, 0, in(c, 0)->dtype, &r);
}

/* ---- normalization and losses ---- */

static void infer_batch_norm(const Inf *c)
{
    const Value *x = in(c, 0);
    if (x->shape.rank < 2)
        error_at(&c->n->loc, "BatchNormalization needs (N,C,..), got %s", ty(c, x));
    Shape ch = {1, {x->shape.d[1]}};
    for (uint32_t k = 1; k < 5; k++)
        if (!shape_eq(&in(c, k)->shape, &ch))
            error_at(&c->n->loc, "input %u must have shape %s (the channels of %s), it "
                     "is %s", k, shp(c, &ch), ty(c, x), ty(c, in(c, k)));
    set_out(c, 0, x->dtype, &x->shape);
    /* Running mean and variance; opsets before 14 add the saved batch mean
     * and inverse standard deviation. */
    for (uint32_t k = 1; k < 5; k++)
        set_out(c, k, in(c, k < 3 ? k + 2 : 3)->dtype, &ch);
}

static void infer_instance_norm(const Inf *c)
{
    const Value *x = in(c, 0);
    if (x->shape.rank < 3)
        error_at(&c->n->loc, "InstanceNormalization needs (N,C,spatial..), got %s", ty(c, x));
    Shape ch = {1, {x->shape.d[1]}};
    for (uint32_t k = 1; k < 3; k++)
        if (!shape_eq(&in(c, k)->shape, &ch))
            error_at(&c->n->loc, "input %u must have shape %s (the channels of %s), it "
                     "is %s", k, shp(c, &ch), ty(c, x), ty(c, in(c, k)));
    infer_unary(c);
}

static void infer_layer_norm(const Inf *c)
{
    const Value *x = in(c, 0);
    int axis = norm_axis(c, attr_int(c->n, "axis", -1), x->shape.rank, "axis");
    Shape stat = x->shape;
    for (int i = axis; i < stat.rank; i++)
        stat.d[i] = 1;
    set_out(c, 0, x->dtype, &x->shape);
    DType st = (DType)attr_int(c->n, "stash_type", DT_F32);
    set_out(c, 1, st, &stat);
    set_out(c, 2, st, &stat);
}

static void infer_softmax(const Inf *c)
{
    softmax_axis(c->g, c->n);   /* an axis out of range is an error here */
    infer_unary(c);
}

static void infer_loss(const Inf *c)
{
    const Value *x = in(c, 0), *t = in(c, 1);
    if (x->shape.rank < 2 || t->shape.rank != x->shape.rank - 1 || !dtype_is_int(t->dtype))
        error_at(&c->n->loc, "expected scores (N,C,d..) and integer labels (N,d..), got "
                 "%s and %s", ty(c, x), ty(c, t));
    int axis = c->n->op == OP_SOFTMAX_CE ? loss_class_axis(c->n) : 1;
    if (axis < 1 || axis >= x->shape.rank)
        error_at(&c->n->loc, "the class axis %d is not a dimension after the batch of the "
                 "scores %s", axis, ty(c, x));
    for (int i = 0; i < t->shape.rank; i++)
        if (t->shape.d[i] != x->shape.d[i < axis ? i : i + 1])
            error_at(&c->n->loc, "labels %s do not match scores %s", ty(c, t), ty(c, x));
    const char *red = loss_reduction(c->n);
    Shape s = {0};
    if (strcmp(red, "none") == 0)
        s = t->shape;
    else if (strcmp(red, "mean") != 0 && strcmp(red, "sum") != 0)
        error_at(&c->n->loc, "reduction '%s' is not one of none, mean, sum",
                 str_escaped(c->g->arena, red, 40));
    set_out(c, 0, x->dtype, &s);
    set_out(c, 1, x->dtype, &x->shape);
}

/* ---- reductions ---- */

static void infer_reduce(const Inf *c)
{
    const Value *x = in(c, 0);
    bool keep = attr_int(c->n, "keepdims", 1) != 0;
    bool reduced[MAX_RANK];
    reduce_axes(c->g, c->n, reduced);
    Shape r = {0};
    for (int i = 0; i < x->shape.rank; i++) {
        if (!reduced[i])
            r.d[r.rank++] = x->shape.d[i];
        else if (keep)
            r.d[r.rank++] = 1;
    }
    set_out(c, 0, x->dtype, &r);
}

static void infer_arg(const Inf *c)
{
    const Value *x = in(c, 0);
    ArgParams p = arg_params(c->g, c->n);
    int axis = p.axis;
    if (x->shape.d[axis] == 0)   /* no element to name */
        error_at(&c->n->loc, "%s over an empty axis (%s, axis %d)", c->n->op_type, ty(c, x),
                 axis);
    Shape r = x->shape;
    if (p.keepdims) {
        r.d[axis] = 1;
    } else {
        memmove(r.d + axis, r.d + axis + 1, sizeof(int64_t) * (size_t)(r.rank - axis - 1));
        r.rank--;
    }
    set_out(c, 0, DT_I64, &r);
}

/* ---- data movement ---- */

static void infer_concat(const Inf *c)
{
    const Value *a = in(c, 0);
    int axis = norm_axis(c, attr_int(c->n, "axis", 0), a->shape.rank, "axis");
    Shape r = a->shape;
    for (uint32_t k = 1; k < c->n->nin; k++) {
        const Value *b = in(c, k);
        same_dtype(c, a, b);
        bool ok = b->shape.rank == r.rank;
        for (int i = 0; ok && i < r.rank; i++)
            ok = i == axis || b->shape.d[i] == r.d[i];
        if (!ok)
            error_at(&c->n->loc, "input %u %s does not match %s outside axis %d", k,
                     ty(c, b), ty(c, a), axis);
        r.d[axis] = dim_add(c, r.d[axis], b->shape.d[axis]);
    }
    set_out(c, 0, a->dtype, &r);
}

/* Reads a constant 1-D int64 shape (Reshape, Expand, ConstantOfShape, Tile). */
static Shape shape_in(const Inf *c, uint32_t k, const char *what)
{
    const Tensor *t = const_in(c, k, what);
    if (t->shape.rank != 1 || !dtype_is_int(t->dtype))
        error_at(&c->n->loc, "the %s must be a 1-D integer tensor, it is %s%s", what,
                 dtype_name(t->dtype), shp(c, &t->shape));
    if (t->shape.d[0] > MAX_RANK)
        error_at(&c->n->loc, "the %s has %lld entries; mpcc's rank limit is %d", what,
                 (long long)t->shape.d[0], MAX_RANK);
    Shape s = {(int)t->shape.d[0]};
    for (int i = 0; i < s.rank; i++)
        s.d[i] = tensor_i64(t, i);
    return s;
}

static void check_dims(const Inf *c, const Shape *s, const char *what)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        if (s->d[i] < 0 || mul_overflows(n, s->d[i], &n))
            error_at(&c->n->loc, "the %s %s is not a valid shape", what, shp(c, s));
}

static void infer_reshape(const Inf *c)
{
    const Value *x = in(c, 0);
    Shape s = shape_in(c, 1, "target shape");
    bool allowzero = attr_int(c->n, "allowzero", 0) != 0;
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < s.rank; i++) {
        if (s.d[i] == 0 && !allowzero) {
            if (i >= x->shape.rank)
                error_at(&c->n->loc, "target shape %s copies dimension %d, which %s "
                         "does not have", shp(c, &s), i, ty(c, x));
            s.d[i] = x->shape.d[i];
        }
        if (s.d[i] == -1) {
            if (infer >= 0)
                error_at(&c->n->loc, "target shape %s has two -1 entries", shp(c, &s));
            infer = i;
        } else if (s.d[i] < 0 || mul_overflows(known, s.d[i], &known)) {
            error_at(&c->n->loc, "target shape %s is invalid", shp(c, &s));
        }
    }
    int64_t total = shape_numel(&x->shape);
    if (infer >= 0) {
        if (known == 0 || total % known)
            error_at(&c->n->loc, "cannot reshape %s to %s", ty(c, x), shp(c, &s));
        s.d[infer] = total / known;
    } else if (known != total) {
        error_at(&c->n->loc, "cannot reshape %s (%lld elements) to %s", ty(c, x),
                 (long long)total, shp(c, &s));
    }
    set_out(c, 0, x->dtype, &s);
}

static void infer_flatten(const Inf *c)
{
    const Value *x = in(c, 0);
    int64_t axis = attr_int(c->n, "axis", 1);
    if (axis < -x->shape.rank || axis > x->shape.rank)
        error_at(&c->n->loc, "axis %lld is out of range for %s", (long long)axis, ty(c, x));
    if (axis < 0)
        axis += x->shape.rank;
    Shape r = {2, {1, 1}};
    for (int i = 0; i < x->shape.rank; i++)
        r.d[i < axis ? 0 : 1] *= x->shape.d[i];
    set_out(c, 0, x->dtype, &r);
}

static void infer_expand(const Inf *c)
{
    Shape s = shape_in(c, 1, "target shape");
    check_dims(c, &s, "target shape");
    Shape r = broadcast(c, &in(c, 0)->shape, &s);
    set_out(c, 0, in(c, 0)->dtype, &r);
}

static void infer_constant_of_shape(const Inf *c)
{
    Shape s = shape_in(c, 0, "shape");
    check_dims(c, &s, "shape");
    const Attr *a = ir_attr(c->n, "value");
    DType dt = DT_F32;
    if (a) {
        if (a->kind != AT_TENSOR || shape_numel(&a->t->shape) != 1)
            error_at(&c->n->loc, "'value' must be a one-element tensor");
        dt = a->t->dtype;
    }
    set_out(c, 0, dt, &s);
}

static void infer_gather(const Inf *c)
{
    const Value *x = in(c, 0), *idx = in(c, 1);
    if (x->shape.rank < 1 || !dtype_is_int(idx->dtype))
        error_at(&c->n->loc, "Gather needs data of rank >= 1 and integer indices, got "
                 "%s and %s", ty(c, x), ty(c, idx));
    int axis = norm_axis(c, attr_int(c->n, "axis", 0), x->shape.rank, "axis");
    Shape r = {x->shape.rank - 1 + idx->shape.rank};
    if (r.rank > MAX_RANK)
        error_at(&c->n->loc, "the output rank %d exceeds mpcc's limit", r.rank);
    int k = 0;
    for (int i = 0; i < axis; i++)
        r.d[k++] = x->shape.d[i];
    for (int i = 0; i < idx->shape.rank; i++)
        r.d[k++] = idx->shape.d[i];
    for (int i = axis + 1; i < x->shape.rank; i++)
        r.d[k++] = x->shape.d[i];
    if (idx->kind == VK_CONST) {
        for (int64_t i = 0; i < shape_numel(&idx->shape); i++) {
            int64_t v = tensor_i64(idx->data, i);
            if (v < -x->shape.d[axis] || v >= x->shape.d[axis])
                error_at(&c->n->loc, "index %lld is out of range for dimension %d of %s",
                         (long long)v, axis, ty(c, x));
        }
    }
    set_out(c, 0, x->dtype, &r);
}

/* GatherElements', ScatterElements' and Scatter's indices are int32 or
 * int64; GatherND's and ScatterND's int64, as ONNX has them. */
static void check_indices(const Inf *c, const Value *idx, bool int32_too)
{
    if (idx->dtype != DT_I64 && !(int32_too && idx->dtype == DT_I32))
        error_at(&c->n->loc, "%s's indices must be %s, they are %s", c->n->op_type,
                 int32_too ? "int32 or int64" : "int64", ty(c, idx));
}

/* Constant index j in [-dim, dim) for the data's dimension d. */
static void check_const_index(const Inf *c, const Value *idx, const Value *x, int64_t j, int d)
{
    int64_t v = tensor_i64(idx->data, j), dim = x->shape.d[d];
    if (v < -dim || v >= dim)
        error_at(&c->n->loc, "index %lld is out of range for dimension %d of %s", (long long)v,
                 d, ty(c, x));
}

/* The indices of GatherElements and ScatterElements: the data's rank, and
 * no longer than the data off the axis. */
static void check_elements_indices(const Inf *c, const Value *x, const Value *idx, int axis)
{
    check_indices(c, idx, true);
    if (idx->shape.rank != x->shape.rank)
        error_at(&c->n->loc, "%s's indices must have the data's rank %d, they are %s",
                 c->n->op_type, x->shape.rank, ty(c, idx));
    for (int d = 0; d < x->shape.rank; d++)
        if (d != axis && idx->shape.d[d] > x->shape.d[d])
            error_at(&c->n->loc, "%s's indices %s are longer than the data %s in dimension %d "
                     "(off the axis %d, they may be shorter, not longer)", c->n->op_type,
                     ty(c, idx), ty(c, x), d, axis);
    if (idx->kind == VK_CONST)
        for (int64_t j = 0; j < shape_numel(&idx->shape); j++)
            check_const_index(c, idx, x, j, axis);
}

static void infer_gather_elements(const Inf *c)
{
    const Value *x = in(c, 0), *idx = in(c, 1);
    if (x->shape.rank < 1)
        error_at(&c->n->loc, "GatherElements needs data of rank >= 1, got %s", ty(c, x));
    check_elements_indices(c, x, idx, elements_axis(c->n, x->shape.rank));
    set_out(c, 0, x->dtype, &idx->shape);
}

/* The updates of a scatter: the data's type, and the shape `want`. */
static void check_updates(const Inf *c, const Value *x, const Value *u, const Shape *want,
                          const char *why)
{
    same_dtype(c, x, u);
    bool same = want->rank == u->shape.rank;
    for (int d = 0; same && d < want->rank; d++)
        same = want->d[d] == u->shape.d[d];
    if (!same)
        error_at(&c->n->loc, "%s's updates must have the shape %s (%s), they are %s",
                 c->n->op_type, shp(c, want), why, ty(c, u));
}

static void infer_scatter_elements(const Inf *c)
{
    const Value *x = in(c, 0), *idx = in(c, 1), *u = in(c, 2);
    if (x->shape.rank < 1)
        error_at(&c->n->loc, "%s needs data of rank >= 1, got %s", c->n->op_type, ty(c, x));
    scatter_reduction(c->g, c->n);
    check_elements_indices(c, x, idx, elements_axis(c->n, x->shape.rank));
    check_updates(c, x, u, &idx->shape, "the indices' shape");
    set_out(c, 0, x->dtype, &x->shape);
}

/* GatherND's and ScatterND's indices: rank >= 1, the last dimension k
 * (1 <= k <= the data's rank less batch_dims) naming a block of the data;
 * constants in range. */
static int64_t check_nd_indices(const Inf *c, const Value *x, const Value *idx, int b)
{
    check_indices(c, idx, false);
    if (x->shape.rank < 1 || idx->shape.rank < 1)
        error_at(&c->n->loc, "%s needs data and indices of rank >= 1, got %s and %s",
                 c->n->op_type, ty(c, x), ty(c, idx));
    int64_t k = idx->shape.d[idx->shape.rank - 1];
    if (k < 1 || k > x->shape.rank - b)
        error_at(&c->n->loc, "%s's indices %s end in %lld: each row must name 1 to %d "
                 "dimensions of the data %s", c->n->op_type, ty(c, idx), (long long)k,
                 x->shape.rank - b, ty(c, x));
    if (idx->kind == VK_CONST)
        for (int64_t j = 0; j < shape_numel(&idx->shape); j++)
            check_const_index(c, idx, x, j, b + (int)(j % k));
    return k;
}

static void infer_gather_nd(const Inf *c)
{
    const Value *x = in(c, 0), *idx = in(c, 1);
    int64_t bd = attr_int(c->n, "batch_dims", 0);
    int q = idx->shape.rank, r = x->shape.rank;
    if (bd < 0 || bd >= (q < r ? q : r))
        error_at(&c->n->loc, "GatherND's batch_dims %lld must be in [0, %d) for indices %s "
                 "and data %s", (long long)bd, q < r ? q : r, ty(c, idx), ty(c, x));
    int b = (int)bd;
    for (int d = 0; d < b; d++)
        if (idx->shape.d[d] != x->shape.d[d])
            error_at(&c->n->loc, "GatherND's indices %s and data %s differ in batch "
                     "dimension %d", ty(c, idx), ty(c, x), d);
    int64_t k = check_nd_indices(c, x, idx, b);
    Shape s = {q - 1 + r - b - (int)k};
    if (s.rank > MAX_RANK)
        error_at(&c->n->loc, "the output rank %d exceeds mpcc's limit", s.rank);
    int n = 0;
    for (int d = 0; d < q - 1; d++)
        s.d[n++] = idx->shape.d[d];
    for (int d = b + (int)k; d < r; d++)
        s.d[n++] = x->shape.d[d];
    set_out(c, 0, x->dtype, &s);
}

static void infer_scatter_nd(const Inf *c)
{
    const Value *x = in(c, 0), *idx = in(c, 1), *u = in(c, 2);
    scatter_reduction(c->g, c->n);
    int64_t k = check_nd_indices(c, x, idx, 0);
    int q = idx->shape.rank, r = x->shape.rank;
    Shape want = {q - 1 + r - (int)k};
    if (want.rank > MAX_RANK)
        error_at(&c->n->loc, "the updates' rank %d exceeds mpcc's limit", want.rank);
    int n = 0;
    for (int d = 0; d < q - 1; d++)
        want.d[n++] = idx->shape.d[d];
    for (int d = (int)k; d < r; d++)
        want.d[n++] = x->shape.d[d];
    check_updates(c, x, u, &want, "the indices' but the last, then the data's after the "
                  "dimensions the indices name");
    set_out(c, 0, x->dtype, &x->shape);
}

static void infer_pad(const Inf *c)
{
    const Value *x = in(c, 0);
    int64_t pads[2 * MAX_RANK];
    pad_params(c->g, c->n, pads, NULL);
    const char *mode = attr_str(c->n, "mode", "constant");
    if (strcmp(mode, "constant") != 0 && strcmp(mode, "reflect") != 0 &&
        strcmp(mode, "edge") != 0 && strcmp(mode, "wrap") != 0)
        error_at(&c->n->loc, "mode '%s' is not one of constant, reflect, edge, wrap",
                 str_escaped(c->g->arena, mode, 40));
    Shape s = x->shape;
    for (int i = 0; i < s.rank; i++) {
        s.d[i] = dim_add(c, s.d[i], dim_add(c, pads[i], pads[MAX_RANK + i]));
        if (s.d[i] < 0)
            error_at(&c->n->loc, "pads make dimension %d negative", i);
        if (strcmp(mode, "reflect") == 0 && x->shape.d[i] == 1 && s.d[i] > 1)
            error_at(&c->n->loc, "reflect padding of dimension %d, which has size 1", i);
    }
    set_out(c, 0, x->dtype, &s);
}

static void infer_range(const Inf *c)
{
    for (uint32_t k = 0; k < 3; k++)
        if (shape_numel(&const_in(c, k, "range bound")->shape) != 1)
            error_at(&c->n->loc, "Range takes scalar start, limit and delta");
    const Tensor *ts = in(c, 0)->data, *tl = in(c, 1)->data, *td = in(c, 2)->data;
    double start = tensor_f64(ts, 0), limit = tensor_f64(tl, 0), delta = tensor_f64(td, 0);
    if (delta == 0)
        error_at(&c->n->loc, "Range delta is zero");
    double n = ceil((limit - start) / delta);
    if (!(n < 1e12))
        error_at(&c->n->loc, "Range would have too many elements");
    Shape s = {1, {n > 0 ? (int64_t)n : 0}};
    set_out(c, 0, in(c, 0)->dtype, &s);
}

static void infer_resize(const Inf *c)
{
    const Value *x = in(c, 0);
    bool is_upsample = c->n->op == OP_UPSAMPLE;
    uint32_t scales_in = is_upsample ? 1 : (c->g->opset >= 11 ? 2 : 1);
    uint32_t sizes_in = 3;
    int r = x->shape.rank;
    Shape s = x->shape;
    if (!is_upsample && has_in(c, sizes_in) && shape_numel(&in(c, sizes_in)->shape) > 0) {
        const Tensor *t = const_in(c, sizes_in, "sizes");
        if (shape_numel(&t->shape) != r)
            error_at(&c->n->loc, "sizes has %lld values for an input of rank %d",
                     (long long)shape_numel(&t->shape), r);
        for (int i = 0; i < r; i++)
            s.d[i] = tensor_i64(t, i);
        check_dims(c, &s, "sizes");
    } else if (has_in(c, scales_in)) {
        const Tensor *t = const_in(c, scales_in, "scales");
        if (shape_numel(&t->shape) != r)
            error_at(&c->n->loc, "scales has %lld values for an input of rank %d",
                     (long long)shape_numel(&t->shape), r);
        for (int i = 0; i < r; i++) {
            double f = tensor_f64(t, i);
            if (!(f > 0 && f < 1e6))
                error_at(&c->n->loc, "scale %g is not positive", f);
            double d = floor((double)x->shape.d[i] * f);
            if (!(d < 9e18))
                error_at(&c->n->loc, "scale %g makes dimension %d too large", f, i);
            s.d[i] = (int64_t)d;
        }
    } else {
        uint32_t n = 0;
        const Attr *a = ir_attr(c->n, "scales");
        if (a && a->kind == AT_FLOATS)
            n = a->n;
        if ((int)n != r)
            error_at(&c->n->loc, "neither scales nor sizes give the output size");
        for (int i = 0; i < r; i++) {
            double d = floor((double)x->shape.d[i] * a->floats[i]);
            if (!(d >= 0 && d < 9e18))
                error_at(&c->n->loc, "scale %g gives an invalid dimension", a->floats[i]);
            s.d[i] = (int64_t)d;
        }
    }
    set_out(c, 0, x->dtype, &s);
}

static void infer_shape_op(const Inf *c)
{
    int r = in(c, 0)->shape.rank;
    int64_t start = attr_int(c->n, "start", 0), end = attr_int(c->n, "end", r);
    start = start < 0 ? start + r : start;
    end = end < 0 ? end + r : end;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    Shape s = {1, {end > start ? end - start : 0}};
    set_out(c, 0, DT_I64, &s);
}

static void infer_size(const Inf *c)
{
    Shape s = {0};
    set_out(c, 0, DT_I64, &s);
}

static void infer_slice(const Inf *c)
{
    SliceParams p;
    slice_params(c->g, c->n, &p);
    Shape s = in(c, 0)->shape;
    memcpy(s.d, p.size, sizeof(int64_t) * (size_t)s.rank);
    set_out(c, 0, in(c, 0)->dtype, &s);
}

static void infer_split(const Inf *c)
{
    int axis;
    int64_t *sizes = split_sizes(c->g, c->n, &axis);
    for (uint32_t k = 0; k < c->n->nout; k++) {
        Shape s = in(c, 0)->shape;
        s.d[axis] = sizes[k];
        set_out(c, k, in(c, 0)->dtype, &s);
    }
}

static void infer_squeeze(const Inf *c)
{
    const Value *x = in(c, 0);
    bool given, drop[MAX_RANK] = {false};
    uint32_t n;
    int64_t *axes = ints_from(c, "axes", 1, &n, &given);
    for (uint32_t i = 0; i < n; i++) {
        int ax = norm_axis(c, axes[i], x->shape.rank, "axis");
        if (x->shape.d[ax] != 1)
            error_at(&c->n->loc, "cannot squeeze dimension %d of %s: it is not 1", ax,
                     ty(c, x));
        drop[ax] = true;
    }
    Shape s = {0};
    for (int i = 0; i < x->shape.rank; i++)
        if (!(n ? drop[i] : x->shape.d[i] == 1))
            s.d[s.rank++] = x->shape.d[i];
    set_out(c, 0, x->dtype, &s);
}

static void infer_unsqueeze(const Inf *c)
{
    const Value *x = in(c, 0);
    bool given, add[MAX_RANK + 8] = {false};
    uint32_t n;
    int64_t *axes = ints_from(c, "axes", 1, &n, &given);
    int r = x->shape.rank + (int)n;
    if (!given || n == 0 || r > MAX_RANK)
        error_at(&c->n->loc, "Unsqueeze needs 1 to %d axes for %s", MAX_RANK - x->shape.rank,
                 ty(c, x));
    for (uint32_t i = 0; i < n; i++) {
        int ax = norm_axis(c, axes[i], r, "axis");
        if (add[ax])
            error_at(&c->n->loc, "axis %d is given twice", ax);
        add[ax] = true;
    }
    Shape s = {r};
    for (int i = 0, k = 0; i < r; i++)
        s.d[i] = add[i] ? 1 : x->shape.d[k++];
    set_out(c, 0, x->dtype, &s);
}

static void infer_tile(const Inf *c)
{
    const Value *x = in(c, 0);
    Shape rep = shape_in(c, 1, "repeats");
    if (rep.rank != x->shape.rank)
        error_at(&c->n->loc, "repeats has %d values for %s", rep.rank, ty(c, x));
    Shape s = x->shape;
    for (int i = 0; i < s.rank; i++) {
        if (rep.d[i] < 0 || mul_overflows(s.d[i], rep.d[i], &s.d[i]))
            error_at(&c->n->loc, "repeats %s is invalid", shp(c, &rep));
    }
    check_dims(c, &s, "output shape");
    set_out(c, 0, x->dtype, &s);
}

static void infer_transpose(const Inf *c)
{
    int perm[MAX_RANK];
    transpose_perm(c->g, c->n, perm);
    const Value *x = in(c, 0);
    Shape s = {x->shape.rank};
    for (int i = 0; i < s.rank; i++)
        s.d[i] = x->shape.d[perm[i]];
    set_out(c, 0, x->dtype, &s);
}

static void infer_trilu(const Inf *c)
{
    if (in(c, 0)->shape.rank < 2)
        error_at(&c->n->loc, "Trilu needs a tensor of rank 2 or more, got %s", ty(c, in(c, 0)));
    if (has_in(c, 1) && shape_numel(&in(c, 1)->shape) != 1)
        error_at(&c->n->loc, "the diagonal offset k must hold one value, it is %s",
                 ty(c, in(c, 1)));
    if (!has_in(c, 1) || in(c, 1)->data)
        trilu_params(c->g, c->n);   /* else the kernel call refuses it (codegen.c) */
    infer_unary(c);
}

/* TopK: Values shaped like X with K along the axis, Indices the same in
 * int64; an output the model omits gets a value all the same (the kernel
 * writes both, and the gradient reads the indices). */
static void infer_topk(const Inf *c)
{
    const Value *x = in(c, 0);
    if (x->shape.rank == 0)
        error_at(&c->n->loc, "TopK needs a tensor of rank 1 or more, got %s", ty(c, x));
    TopKParams p = topk_params(c->g, c->n);
    Shape s = x->shape;
    s.d[p.axis] = p.k;
    DType t = x->dtype;
    static const char *const names[2] = {"values", "indices"};
    for (uint32_t k = 0; k < 2; k++)
        if (c->n->out[k] == NONE) {
            const char *base = c->n->name[0] ? c->n->name : "TopK";
            c->n->out[k] = ir_new_value(c->g, arena_printf(c->g->arena, "%s/%s", base, names[k]),
                                        k ? DT_I64 : t, &s);
            c->g->values[c->n->out[k]].producer = (uint32_t)(c->n - c->g->nodes);
        }
    set_out(c, 0, t, &s);
    set_out(c, 1, DT_I64, &s);
}

/* OneHot: the indices' shape with depth inserted at the axis, in the
 * type of values (off, on). */
static void infer_onehot(const Inf *c)
{
    const Value *idx = in(c, 0), *v = in(c, 2);
    if (!dtype_is_int(idx->dtype) && !dtype_is_float(idx->dtype))
        error_at(&c->n->loc, "OneHot's indices must be numbers, they are %s", ty(c, idx));
    if (v->shape.rank != 1 || v->shape.d[0] != 2)
        error_at(&c->n->loc, "OneHot's values must be [off, on], a 1-D tensor of 2, it is %s",
                 ty(c, v));
    OneHotParams p = onehot_params(c->g, c->n);
    Shape s = {.rank = idx->shape.rank + 1};
    if (s.rank > MAX_RANK)
        error_at(&c->n->loc, "the output would have rank %d; mpcc's limit is %d", s.rank,
                 MAX_RANK);
    for (int d = 0, j = 0; d < s.rank; d++)
        s.d[d] = d == p.axis ? p.depth : idx->shape.d[j++];
    set_out(c, 0, v->dtype, &s);
}

static void infer_prelu(const Inf *c)
{
    const Shape *x = &in(c, 0)->shape, *sl = &in(c, 1)->shape;
    /* Before opset 7 a 1-D slope was per channel (dimension 1). */
    if (c->g->opset < 7 && sl->rank == 1 && x->rank >= 2 && sl->d[0] == x->d[1]) {
        infer_unary(c);
        return;
    }
    Shape s = broadcast(c, &in(c, 0)->shape, &in(c, 1)->shape);
    if (!shape_eq(&s, &in(c, 0)->shape))
        error_at(&c->n->loc, "the slope %s does not broadcast to the input %s",
                 ty(c, in(c, 1)), ty(c, in(c, 0)));
    infer_unary(c);
}

static void infer_bool_only(const Inf *c)
{
    for (uint32_t k = 0; k < c->n->nin; k++)
        if (in(c, k)->dtype != DT_BOOL)
            error_at(&c->n->loc, "input %u must be bool, it is %s", k, ty(c, in(c, k)));
    infer_elementwise(c, true, true);
}

/* ---- the dispatch ---- */

static void infer_node(const Inf *c)
{
    switch (c->n->op) {
    case OP_UNKNOWN:
        error_at(&c->n->loc, "op '%s%s%s' is not supported; run mpcc --check to list "
                 "every unsupported op of the model", c->n->domain,
                 c->n->domain[0] ? "." : "", str_escaped(c->g->arena, c->n->op_type, 60));
    case OP_ABS: case OP_CEIL: case OP_COS: case OP_ELU: case OP_ERF: case OP_EXP:
    case OP_FLOOR: case OP_HARD_SIGMOID: case OP_HARD_SWISH:
    case OP_IDENTITY: case OP_LEAKY_RELU: case OP_LOG: case OP_NEG: case OP_RECIPROCAL:
    case OP_RELU: case OP_ROUND: case OP_SELU: case OP_SIGMOID: case OP_SIGN: case OP_SIN:
    case OP_SOFTPLUS: case OP_SQRT: case OP_TANH: case OP_CLIP:
        infer_unary(c);
        break;
    case OP_CUMSUM:
        cumsum_params(c->g, c->n);   /* a constant axis, in range */
        infer_unary(c);
        break;
    case OP_GELU:
        infer_gelu(c);
        break;
    case OP_NOT:
        infer_bool_only(c);
        break;
    case OP_CAST:
        infer_cast(c);
        break;
    case OP_DROPOUT:
        infer_dropout(c);
        break;
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV:
    case OP_MIN: case OP_MAX: case OP_SUM: case OP_MEAN:
        infer_elementwise(c, false, true);
        break;
    case OP_MOD:
        mod_fmod(c->n);   /* 0 or 1 */
        infer_elementwise(c, false, true);
        break;
    case OP_POW:
        infer_elementwise(c, false, false);
        break;
    case OP_AND: case OP_OR: case OP_XOR:
        infer_bool_only(c);
        break;
    case OP_EQUAL: case OP_LESS: case OP_LESS_EQUAL: case OP_GREATER:
    case OP_GREATER_EQUAL:
        infer_elementwise(c, true, true);
        break;
    case OP_WHERE: infer_where(c); break;
    case OP_PRELU: infer_prelu(c); break;
    case OP_MATMUL: infer_matmul(c); break;
    case OP_GEMM: infer_gemm(c); break;
    case OP_CONV: infer_conv(c); break;
    case OP_CONV_TRANSPOSE: infer_conv_transpose(c); break;
    case OP_MAX_POOL: case OP_AVERAGE_POOL: infer_pool(c); break;
    case OP_GLOBAL_AVG_POOL: infer_global_pool(c); break;
    case OP_BATCH_NORM: infer_batch_norm(c); break;
    case OP_LAYER_NORM: infer_layer_norm(c); break;
    case OP_INSTANCE_NORM: infer_instance_norm(c); break;
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: infer_softmax(c); break;
    case OP_SOFTMAX_CE: case OP_NLL_LOSS: infer_loss(c); break;
    case OP_REDUCE_MEAN: case OP_REDUCE_SUM: case OP_REDUCE_MAX: case OP_REDUCE_MIN:
    case OP_REDUCE_PROD:
        infer_reduce(c);
        break;
    case OP_ARGMAX: case OP_ARGMIN: infer_arg(c); break;
    case OP_CONCAT: infer_concat(c); break;
    case OP_CONSTANT_OF_SHAPE: infer_constant_of_shape(c); break;
    case OP_EXPAND: infer_expand(c); break;
    case OP_FLATTEN: infer_flatten(c); break;
    case OP_GATHER: infer_gather(c); break;
    case OP_GATHER_ELEMENTS: infer_gather_elements(c); break;
    case OP_GATHER_ND: infer_gather_nd(c); break;
    case OP_SCATTER: case OP_SCATTER_ELEMENTS: infer_scatter_elements(c); break;
    case OP_SCATTER_ND: infer_scatter_nd(c); break;
    case OP_PAD: infer_pad(c); break;
    case OP_RANGE: infer_range(c); break;
    case OP_RESHAPE: infer_reshape(c); break;
    case OP_RESIZE: case OP_UPSAMPLE: infer_resize(c); break;
    case OP_SHAPE: infer_shape_op(c); break;
    case OP_SIZE: infer_size(c); break;
    case OP_SLICE: infer_slice(c); break;
    case OP_SPLIT: infer_split(c); break;
    case OP_SQUEEZE: infer_squeeze(c); break;
    case OP_TILE: infer_tile(c); break;
    case OP_TRANSPOSE: infer_transpose(c); break;
    case OP_TRILU: infer_trilu(c); break;
    case OP_TOPK: infer_topk(c); break;
    case OP_ONE_HOT: infer_onehot(c); break;
    case OP_UNSQUEEZE: infer_unsqueeze(c); break;
    case OP_SCE_GRAD: case OP_MSE_LOSS: case OP_MSE_GRAD: case OP_RELU_GRAD:
    case OP_SUM_TO: case OP_CONV_GRAD_X: case OP_CONV_GRAD_W: case OP_CONV_GRAD_B:
    case OP_BN_GRAD: case OP_MAX_POOL_GRAD: case OP_GAP_GRAD: case OP_SGD: case OP_ADAMW:
    case OP_UNARY_GRAD: case OP_POW_GRAD: case OP_BATCH_MATMUL: case OP_SOFTMAX_GRAD:
    case OP_SOFTMAX_BIAS: case OP_LN_GRAD: case OP_SLICE_GRAD: case OP_GATHER_GRAD: case OP_DROPOUT_GRAD:
    case OP_RESIZE_GRAD: case OP_LOG_SOFTMAX_GRAD: case OP_NLL_GRAD: case OP_MINMAX_GRAD:
    case OP_PRELU_GRAD: case OP_REDUCE_MAX_GRAD: case OP_PAD_GRAD: case OP_AVG_POOL_GRAD:
    case OP_INSTANCE_NORM_GRAD: case OP_GATHER_ELEMENTS_GRAD: case OP_GATHER_ND_GRAD:
    case OP_SCATTER_ELEMENTS_GRAD: case OP_SCATTER_ND_GRAD:
    case OP_TOPK_GRAD: case OP_ONE_HOT_GRAD:
        break;   /* internal ops are typed by the pass that makes them */
    case OP_EINSUM: case OP_LSTM: case OP_GRU: case OP_RNN: case OP_REDUCE_SUM_SQ:
    case OP_REDUCE_L1: case OP_REDUCE_L2: case OP_REDUCE_LOG_SUM: case OP_REDUCE_LOG_SUM_EXP:
    case OP_DEPTH_TO_SPACE: case OP_SPACE_TO_DEPTH: case OP_CAST_LIKE: case OP_GLOBAL_MAX_POOL:
        unreachable();   /* lowered before shapes are inferred */
    }
}

static void check_inputs_typed(const Inf *c)
{
    for (uint32_t k = 0; k < c->n->nin; k++)
        if (c->n->in[k] != NONE)
            MPCC_ASSERT(c->g->values[c->n->in[k]].typed);
}

void infer_shapes(Graph *g)
{
    if (g->rebatch)
        rebatch_start(g);
    for (uint32_t i = 0; i < g->norder; i++) {
        Op op = g->nodes[g->order[i]].op;
        if (op == OP_EINSUM)
            lower_einsum(g, i);   /* the first of its replacement is next */
        else if (op == OP_LSTM || op == OP_GRU || op == OP_RNN)
            lower_rnn(g, i);
        else if (is_composite(op))
            lower_composite(g, i);
        Node *n = &g->nodes[g->order[i]];
        Inf c = {g, n};
        check_inputs_typed(&c);
        if (g->rebatch)
            rebatch_before(g, n);   /* a batch the export fixed, re-bound */
        infer_node(&c);
        if (g->rebatch)
            rebatch_after(g, n);
        fold_node(g, n);
    }
}
