/* params.c — each op's parameters as the passes use them: ONNX attributes
 * and constant inputs read with the opset's defaults, axes normalised and
 * checked, in one place. Shape inference (shapes.c) calls these first and
 * reports what is wrong with them; folding (fold.c), the gradients
 * (autodiff.c) and the emitters read the same functions, so a default or
 * an opset rule is written once.
 */
#include "mpcc.h"

#include <math.h>
#include <string.h>

/* ---- a node's inputs ---- */

bool node_has_in(const Node *n, uint32_t k)
{
    return k < n->nin && n->in[k] != NONE;
}

Value *node_in(Graph *g, const Node *n, uint32_t k)
{
    if (!node_has_in(n, k))
        error_at(&n->loc, "input %u is required", k);
    return &g->values[n->in[k]];
}

const char *value_type(const Graph *g, const Value *v)
{
    return arena_printf(g->arena, "%s%s", dtype_name(v->dtype), shape_str(g->arena, &v->shape));
}

/* A shape-like input must be a compile-time constant. */
const Tensor *param_const(Graph *g, const Node *n, uint32_t k, const char *what)
{
    const Value *v = node_in(g, n, k);
    if (v->kind != VK_CONST && v->kind != VK_PARAM)
        error_at(&n->loc, "the %s (input %u, '%s') is not a compile-time constant; "
                 "mpcc needs static shapes (fix the input sizes with -batch or "
                 "--shapes)", what, k, str_escaped(g->arena, v->name, 100));
    return v->data;
}

/* Reads an int list from an attribute (older opsets) or an input (newer). */
int64_t *param_ints(Graph *g, const Node *n, const char *attr, uint32_t k, uint32_t *count,
                    bool *given)
{
    *given = true;
    if (node_has_in(n, k)) {
        const Tensor *t = param_const(g, n, k, attr);
        if (t->shape.rank > 1)
            error_at(&n->loc, "'%s' must be a 1-D tensor, it has shape %s", attr,
                     shape_str(g->arena, &t->shape));
        *count = (uint32_t)shape_numel(&t->shape);
        int64_t *v = arena_array(g->arena, *count + 1, sizeof *v);
        for (uint32_t i = 0; i < *count; i++)
            v[i] = tensor_i64(t, i);
        return v;
    }
    const int64_t *a = attr_ints(n, attr, count);
    if (!a) {
        *given = false;
        *count = 0;
        return NULL;
    }
    return (int64_t *)a;
}

int param_axis(const Node *n, int64_t axis, int rank, const char *what)
{
    if (axis < -rank || axis >= rank)
        error_at(&n->loc, "%s %lld is out of range for rank %d", what,
                 (long long)axis, rank);
    return (int)(axis < 0 ? axis + rank : axis);
}

/* ---- the parameters of each op ---- */

/* Softmax and LogSoftmax: the axis, -1 since opset 13 and 1 before, as a
 * dimension of the input (a scalar's axis is 0). */
int softmax_axis(Graph *g, const Node *n)
{
    int rank = node_in(g, n, 0)->shape.rank;
    return param_axis(n, attr_int(n, "axis", g->opset >= 13 ? -1 : 1), rank ? rank : 1, "axis");
}

/* The normalisations' epsilon (BatchNormalization, InstanceNormalization,
 * LayerNormalization and their gradients) and BatchNormalization's
 * momentum. */
double norm_epsilon(const Node *n)
{
    return attr_float(n, "epsilon", 1e-5);
}

double bn_momentum(const Node *n)
{
    return attr_float(n, "momentum", 0.9);
}

/* Gemm (and the products autodiff makes of it): Y = alpha A' B' + beta C. */
GemmParams gemm_params(const Node *n)
{
    return (GemmParams){.trans_a = attr_int(n, "transA", 0) != 0,
                        .trans_b = attr_int(n, "transB", 0) != 0,
                        .alpha = attr_float(n, "alpha", 1.0),
                        .beta = attr_float(n, "beta", 1.0)};
}

/* Conv and ConvTranspose: the number of groups. */
int64_t conv_group(const Node *n)
{
    return attr_int(n, "group", 1);
}

/* The losses (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and their
 * gradients): the label that counts for nothing, and how the per-sample
 * losses reduce ("none", "sum" or "mean"). */
int64_t loss_ignore_index(const Node *n)
{
    return attr_int(n, "ignore_index", -100);
}

const char *loss_reduction(const Node *n)
{
    return attr_str(n, "reduction", "mean");
}

/* SoftmaxCrossEntropyLoss and its gradient: the scores' class axis, 1 as
 * ONNX has it unless --class-axis put the loss on another (graph/loss.c).
 * Scores (N.., C, D..) and labels (N.., D..) in any case. */
int loss_class_axis(const Node *n)
{
    return (int)attr_int(n, "mpcc_class_axis", 1);
}

void slice_params(Graph *g, Node *n, SliceParams *p)
{
    const Value *x = node_in(g, n, 0);
    int r = x->shape.rank;
    bool given;
    uint32_t ns, ne, na = 0, nst = 0;
    int64_t *starts, *ends, *axes, *steps;
    if (g->opset >= 10) {
        starts = param_ints(g, n, "starts", 1, &ns, &given);
        ends = param_ints(g, n, "ends", 2, &ne, &given);
        axes = node_has_in(n, 3) ? param_ints(g, n, "axes", 3, &na, &given) : NULL;
        steps = node_has_in(n, 4) ? param_ints(g, n, "steps", 4, &nst, &given) : NULL;
    } else {
        starts = (int64_t *)attr_ints(n, "starts", &ns);
        ends = (int64_t *)attr_ints(n, "ends", &ne);
        axes = (int64_t *)attr_ints(n, "axes", &na);
        steps = NULL;
    }
    if (ns != ne || (axes && na != ns) || (steps && nst != ns) || !starts)
        error_at(&n->loc, "starts, ends, axes and steps must have the same length");
    for (int i = 0; i < r; i++)
        p->start[i] = 0, p->step[i] = 1, p->size[i] = x->shape.d[i];
    bool seen[MAX_RANK] = {false};
    for (uint32_t i = 0; i < ns; i++) {
        int ax = param_axis(n, axes ? axes[i] : (int64_t)i, r, "axis");
        if (seen[ax])
            error_at(&n->loc, "axis %d is sliced twice", ax);
        seen[ax] = true;
        int64_t dim = x->shape.d[ax], step = steps ? steps[i] : 1;
        if (step == 0)
            error_at(&n->loc, "slice step is zero");
        int64_t s = starts[i], e = ends[i];
        if (s < 0) s = s < -dim ? (step > 0 ? 0 : -1) : s + dim;
        if (e < 0) e = e < -dim ? -1 : e + dim;
        if (step > 0) {
            s = s > dim ? dim : s;
            e = e > dim ? dim : e < 0 ? 0 : e;
        } else {
            s = s >= dim ? dim - 1 : s;
            e = e >= dim ? dim - 1 : e;
        }
        int64_t len = step > 0 ? (e - s + step - 1) / step : (s - e + (-step) - 1) / (-step);
        p->start[ax] = s;
        p->step[ax] = step;
        p->size[ax] = len > 0 ? len : 0;
    }
}

int64_t *split_sizes(Graph *g, Node *n, int *axis_out)
{
    const Value *x = node_in(g, n, 0);
    int axis = param_axis(n, attr_int(n, "axis", 0), x->shape.rank, "axis");
    bool given;
    uint32_t cnt;
    int64_t *sizes = param_ints(g, n, "split", 1, &cnt, &given);
    int64_t dim = x->shape.d[axis];
    if (!given || cnt == 0) {
        int64_t parts = attr_int(n, "num_outputs", n->nout);
        if (parts < 1 || parts != (int64_t)n->nout)
            error_at(&n->loc, "num_outputs %lld does not match %u outputs",
                     (long long)parts, n->nout);
        sizes = arena_array(g->arena, n->nout, sizeof *sizes);
        int64_t chunk = (dim + parts - 1) / parts;
        for (uint32_t i = 0; i < n->nout; i++) {
            int64_t left = dim - chunk * (int64_t)i;
            sizes[i] = left < 0 ? 0 : left < chunk ? left : chunk;
        }
        cnt = n->nout;
    }
    if (cnt != n->nout)
        error_at(&n->loc, "split has %u sizes for %u outputs", cnt, n->nout);
    int64_t total = 0;
    for (uint32_t i = 0; i < cnt; i++) {
        if (sizes[i] < 0)
            error_at(&n->loc, "split size %lld is negative", (long long)sizes[i]);
        total += sizes[i];
    }
    if (total != dim)
        error_at(&n->loc, "split sizes add up to %lld but dimension %d of %s is %lld",
                 (long long)total, axis, value_type(g, x), (long long)dim);
    *axis_out = axis;
    return sizes;
}

void transpose_perm(Graph *g, Node *n, int *perm)
{
    int r = node_in(g, n, 0)->shape.rank;
    uint32_t cnt;
    const int64_t *p = attr_ints(n, "perm", &cnt);
    bool used[MAX_RANK] = {false};
    if (p && (int)cnt != r)
        error_at(&n->loc, "perm has %u entries for rank %d", cnt, r);
    for (int i = 0; i < r; i++) {
        int v = p ? param_axis(n, p[i], r, "perm entry") : r - 1 - i;
        if (used[v])
            error_at(&n->loc, "perm is not a permutation");
        used[v] = true;
        perm[i] = v;
    }
}

/* The scale factors of a 2-D (NCHW) Resize or Upsample as ONNX's
 * coordinate transforms use them: the given scales, or output / input
 * when sizes were given. */
void resize_scales(Graph *g, const Node *n, double scale[2])
{
    const Value *x = &g->values[n->in[0]], *y = &g->values[n->out[0]];
    uint32_t si = n->op == OP_UPSAMPLE || g->opset < 11 ? 1 : 2;
    const Tensor *t = n->nin > si && n->in[si] != NONE ? g->values[n->in[si]].data : NULL;
    const Attr *a = ir_attr(n, "scales");
    for (int i = 0; i < 2; i++) {
        int d = x->shape.rank - 2 + i;
        if (t && shape_numel(&t->shape) == x->shape.rank)
            scale[i] = tensor_f64(t, d);
        else if (a && a->kind == AT_FLOATS && (int)a->n == x->shape.rank)
            scale[i] = a->floats[d];
        else
            scale[i] = (double)y->shape.d[d] / (double)x->shape.d[d];
    }
}

/* A constant scalar input of a node, or dflt when it is omitted. */
static double scalar_in(Graph *g, const Node *n, uint32_t k, const char *what, double dflt)
{
    if (n->nin <= k || n->in[k] == NONE)
        return dflt;
    const Value *v = &g->values[n->in[k]];
    if (!v->data || shape_numel(&v->shape) != 1)
        error_at(&n->loc, "%s must be a constant scalar for mpcc to compile the node", what);
    return tensor_f64(v->data, 0);
}

double dropout_ratio(Graph *g, const Node *n)
{
    if (g->opset < 12)
        return attr_float(n, "ratio", 0.5);
    if (scalar_in(g, n, 2, "training_mode", 0) == 0)
        return 0;
    double r = scalar_in(g, n, 1, "ratio", 0.5);
    if (!(r >= 0 && r < 1))
        error_at(&n->loc, "dropout ratio %g is not in [0, 1)", r);
    return r;
}

/* Clip's bounds: attributes before opset 11, constant scalar inputs since. */
void clip_bounds(Graph *g, const Node *n, double *lo, double *hi)
{
    if (g->opset < 11) {
        *lo = attr_float(n, "min", -INFINITY);
        *hi = attr_float(n, "max", INFINITY);
        return;
    }
    *lo = scalar_in(g, n, 1, "Clip's min", -INFINITY);
    *hi = scalar_in(g, n, 2, "Clip's max", INFINITY);
}

/* The dimensions a Reduce* node reduces: its axes (an attribute, or an
 * input since opset 18, ReduceSum 13), all of them when none are given,
 * none when noop_with_empty_axes says so. */
void reduce_axes(Graph *g, Node *n, bool reduced[MAX_RANK])
{
    const Value *x = node_in(g, n, 0);
    bool given;
    uint32_t k;
    int64_t *axes = param_ints(g, n, "axes", 1, &k, &given);
    bool noop = attr_int(n, "noop_with_empty_axes", 0) != 0;
    for (int i = 0; i < MAX_RANK; i++)
        reduced[i] = k == 0 && !noop && i < x->shape.rank;
    for (uint32_t i = 0; i < k; i++)
        reduced[param_axis(n, axes[i], x->shape.rank, "axis")] = true;
}

/* ArgMax and ArgMin: the axis (a dimension of the input), whether it is
 * kept (as 1), and whether a tie goes to the last index rather than the
 * first (select_last_index, opset 12; absent before, so the first). */
ArgParams arg_params(Graph *g, const Node *n)
{
    int rank = node_in(g, n, 0)->shape.rank;
    return (ArgParams){.axis = param_axis(n, attr_int(n, "axis", 0), rank, "axis"),
                       .keepdims = attr_int(n, "keepdims", 1) != 0,
                       .last = attr_int(n, "select_last_index", 0) != 0};
}

/* CumSum: the axis, a constant int32 or int64 scalar input (the sums run
 * along one dimension, known when the step is written), and the attributes
 * exclusive (each sum leaves its own element out) and reverse (the sums run
 * from the end). */
CumSumParams cumsum_params(Graph *g, const Node *n)
{
    const Value *x = node_in(g, n, 0), *a = node_in(g, n, 1);
    if (a->dtype != DT_I32 && a->dtype != DT_I64)
        error_at(&n->loc, "CumSum's axis must be int32 or int64, it is %s", value_type(g, a));
    const Tensor *t = param_const(g, n, 1, "axis");
    if (t->shape.rank > 1 || shape_numel(&t->shape) != 1)
        error_at(&n->loc, "CumSum's axis must be a scalar, it has shape %s",
                 shape_str(g->arena, &t->shape));
    return (CumSumParams){.axis = param_axis(n, tensor_i64(t, 0), x->shape.rank, "axis"),
                          .exclusive = attr_int(n, "exclusive", 0) != 0,
                          .reverse = attr_int(n, "reverse", 0) != 0};
}

/* Mod: fmod 1 is C's fmod (the result takes the dividend's sign), 0 the
 * remainder whose sign is the divisor's, as in Python. */
bool mod_fmod(const Node *n)
{
    int64_t f = attr_int(n, "fmod", 0);
    if (f != 0 && f != 1)
        error_at(&n->loc, "Mod's fmod must be 0 or 1, it is %lld", (long long)f);
    return f != 0;
}

/* GatherElements, ScatterElements and Scatter, and their gradients: the
 * axis, a dimension of data of the given rank. */
int elements_axis(const Node *n, int rank)
{
    return param_axis(n, attr_int(n, "axis", 0), rank, "axis");
}

/* ScatterElements' and ScatterND's reduction: none (the update replaces
 * the element; the only one before opset 16, and Scatter's), add, mul
 * (opset 16), max or min (opset 18). */
ScatterReduction scatter_reduction(Graph *g, const Node *n)
{
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    const char *r = attr_str(n, "reduction", "none");
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (strcmp(r, names[i]) == 0)
            return (ScatterReduction)i;
    error_at(&n->loc, "reduction '%s' is not one of none, add, mul, max, min",
             str_escaped(g->arena, r, 40));
}

/* An integer the kernel call is written with (TopK's K, OneHot's depth,
 * Trilu's k): input k, a constant holding one number (a float one
 * truncated, as ONNX casts it); `why` says what the number fixes. */
static int64_t const_number(Graph *g, const Node *n, uint32_t k, const char *what,
                            const char *why)
{
    const Value *v = node_in(g, n, k);
    if (v->kind != VK_CONST && v->kind != VK_PARAM)
        error_at(&n->loc, "%s's %s (input %u, '%s') is not a compile-time constant: it is "
                 "%s; give it as an initializer or a Constant node (%s)", n->op_type, what, k,
                 str_escaped(g->arena, v->name, 100),
                 v->kind == VK_INPUT ? "a graph input" : "computed when the model runs", why);
    if (shape_numel(&v->shape) != 1 || v->shape.rank > 1)
        error_at(&n->loc, "%s's %s must be a single number, it is %s", n->op_type, what,
                 value_type(g, v));
    if (dtype_is_int(v->dtype))
        return tensor_i64(v->data, 0);
    double f = dtype_is_float(v->dtype) ? tensor_f64(v->data, 0) : NAN;
    if (!(f > -9.2e18 && f < 9.2e18))
        error_at(&n->loc, "%s's %s must be an integer, it is %s %g", n->op_type, what,
                 dtype_name(v->dtype), f);
    return (int64_t)f;
}

/* TopK: K (the attribute k before opset 10, a constant input since), the
 * axis (default the last) and whether the largest or the smallest come
 * first. The outputs are always sorted, which sorted=0 allows. */
TopKParams topk_params(Graph *g, const Node *n)
{
    const Value *x = node_in(g, n, 0);
    int axis = param_axis(n, attr_int(n, "axis", -1), x->shape.rank, "axis");
    if (g->opset < 10 && !ir_attr(n, "k"))
        error_at(&n->loc, "TopK needs the attribute k before opset 10");
    int64_t k = g->opset < 10 ? attr_int(n, "k", 0)
                              : const_number(g, n, 1, "K", "mpcc compiles static shapes");
    if (k < 0 || k > x->shape.d[axis])
        error_at(&n->loc, "TopK's K is %lld but axis %d of the input %s has %lld elements",
                 (long long)k, axis, value_type(g, x), (long long)x->shape.d[axis]);
    int64_t largest = attr_int(n, "largest", 1), sorted = attr_int(n, "sorted", 1);
    if ((largest != 0 && largest != 1) || (sorted != 0 && sorted != 1))
        error_at(&n->loc, "TopK's largest and sorted must be 0 or 1, they are %lld and %lld",
                 (long long)largest, (long long)sorted);
    return (TopKParams){.axis = axis, .k = k, .largest = largest != 0};
}

/* OneHot: depth (a constant, so that the output's shape is known), and the
 * axis of the output that depth spans (default the last; the output has
 * one more dimension than the indices). */
OneHotParams onehot_params(Graph *g, const Node *n)
{
    int rank = node_in(g, n, 0)->shape.rank;
    int64_t depth = const_number(g, n, 1, "depth", "mpcc compiles static shapes");
    if (depth < 1)
        error_at(&n->loc, "OneHot's depth must be at least 1, it is %lld", (long long)depth);
    int64_t axis = attr_int(n, "axis", -1);
    if (axis < -rank - 1 || axis > rank)
        error_at(&n->loc, "OneHot's axis %lld is out of range for its output of rank %d (the "
                 "indices' %d and depth)", (long long)axis, rank + 1, rank);
    return (OneHotParams){.axis = (int)(axis < 0 ? axis + rank + 1 : axis), .depth = depth};
}

/* Trilu: the diagonal k (0 when the input is omitted, a constant
 * otherwise: the output's shape does not depend on it, so shape inference
 * leaves a k computed at run time to the kernel call, which refuses it)
 * and whether the upper triangle is kept (default) or the lower. */
TriluParams trilu_params(Graph *g, const Node *n)
{
    int64_t k = node_has_in(n, 1)
                    ? const_number(g, n, 1, "k", "mpcc fixes the diagonal in the kernel call")
                    : 0;
    int64_t upper = attr_int(n, "upper", 1);
    if (upper != 0 && upper != 1)
        error_at(&n->loc, "Trilu's upper must be 0 or 1, it is %lld", (long long)upper);
    return (TriluParams){.k = k, .upper = upper != 0};
}

/* Pad's pads per dim (begins at 0, ends at MAX_RANK) and, if value is not
 * NULL, its constant: attributes before opset 11, inputs since (axes since
 * 18). */
void pad_params(Graph *g, Node *n, int64_t pads[2 * MAX_RANK], double *value)
{
    const Value *x = node_in(g, n, 0);
    bool given;
    uint32_t k;
    int64_t *v = g->opset >= 11 ? param_ints(g, n, "pads", 1, &k, &given)
                                : (int64_t *)attr_ints(n, "pads", &k);
    int r = x->shape.rank;
    int axes[MAX_RANK];
    int naxes = r;
    for (int i = 0; i < r; i++)
        axes[i] = i;
    if (node_has_in(n, 3)) {
        uint32_t na;
        int64_t *av = param_ints(g, n, "axes", 3, &na, &given);
        if (na > (uint32_t)r)
            error_at(&n->loc, "Pad has %u axes for rank %d", na, r);
        naxes = (int)na;
        for (int i = 0; i < naxes; i++)
            axes[i] = param_axis(n, av[i], r, "axis");
    }
    if ((int)k != 2 * naxes)
        error_at(&n->loc, "pads has %u values, expected %d", k, 2 * naxes);
    memset(pads, 0, sizeof(int64_t) * 2 * MAX_RANK);
    for (int i = 0; i < naxes; i++) {
        pads[axes[i]] = v[i];
        pads[MAX_RANK + axes[i]] = v[naxes + i];
    }
    if (value)
        *value = g->opset >= 11 ? scalar_in(g, n, 2, "Pad's constant_value", 0)
                                : attr_float(n, "value", 0);
}

/* ---- convolution and pooling windows ---- */

/* An attribute of n ints, each at least 1 (or 0 where dflt is 0). */
void window_ints(const Node *nd, const char *name, int64_t *dst, int n, int64_t dflt)
{
    uint32_t cnt;
    const int64_t *v = attr_ints(nd, name, &cnt);
    for (int i = 0; i < n; i++)
        dst[i] = dflt;
    if (!v)
        return;
    if ((int)cnt != n)
        error_at(&nd->loc, "'%s' has %u values, expected %d", name, cnt, n);
    for (int i = 0; i < n; i++) {
        if (v[i] < (dflt == 0 ? 0 : 1))
            error_at(&nd->loc, "'%s' has the invalid value %lld", name, (long long)v[i]);
        dst[i] = v[i];
    }
}

/* The window of a convolution or pooling over n spatial dimensions: the
 * kernel (kernel_shape, else the weight's), strides, dilations, pads and
 * auto_pad, with ONNX's defaults, checked. */
Window window_params(const Node *nd, int n, const int64_t *kernel_from_weight)
{
    Window w = {.n = n};
    uint32_t cnt;
    const int64_t *ks = attr_ints(nd, "kernel_shape", &cnt);
    if (ks && (int)cnt != n)
        error_at(&nd->loc, "kernel_shape has %u values, expected %d", cnt, n);
    for (int i = 0; i < n; i++) {
        w.k[i] = ks ? ks[i] : kernel_from_weight ? kernel_from_weight[i] : 0;
        if (w.k[i] < 1)
            error_at(&nd->loc, "kernel_shape is required and must be positive");
    }
    window_ints(nd, "strides", w.stride, n, 1);
    window_ints(nd, "dilations", w.dil, n, 1);
    window_ints(nd, "pads", w.pad, 2 * n, 0);
    w.auto_pad = attr_str(nd, "auto_pad", "NOTSET");
    if (strcmp(w.auto_pad, "NOTSET") != 0 && strcmp(w.auto_pad, "SAME_UPPER") != 0 &&
        strcmp(w.auto_pad, "SAME_LOWER") != 0 && strcmp(w.auto_pad, "VALID") != 0)
        error_at(&nd->loc, "auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                 w.auto_pad);
    return w;
}
