/* autodiff.c — reverse-mode differentiation of the loss, as ordinary IR.
 *
 * Walks the forward nodes backwards from the loss and, for every node on a
 * path from a trainable parameter to the loss, emits the nodes that compute
 * the gradients of its inputs (PH_BACKWARD). A value used several times gets
 * the Sum of its contributions. Every trainable parameter ends with
 * Value.grad naming its gradient. Gradient ops are ONNX ops where one fits
 * (Gemm, Reshape, Neg) and internal ops otherwise (ReluGrad, ConvGradData..).
 */
#include "mpcc.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

typedef struct Contribs {
    uint32_t *ids;
    uint32_t n;
} Contribs;

typedef struct AD {
    Graph *g;
    uint32_t nfwd;       /* values that existed before autodiff */
    bool *needs;         /* forward value needs a gradient */
    Contribs *contrib;   /* gradient contributions per forward value */
    const Node *n;       /* the node being differentiated */
} AD;

/* ---- which values need gradients ---- */

static bool is_bn_stat(const Graph *g, uint32_t v)
{
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->op == OP_BATCH_NORM && (n->in[3] == v || n->in[4] == v))
            return true;
    }
    return false;
}

static regex_t *frozen_regex(Graph *g, const Options *o)
{
    if (!o->train.frozen)
        return NULL;
    regex_t *re = arena_alloc(g->arena, sizeof *re);
    if (regcomp(re, o->train.frozen, REG_EXTENDED | REG_NOSUB) != 0)
        error_file(g->file, "--frozen='%s' is not a valid extended regular expression",
                   str_escaped(g->arena, o->train.frozen, 80));
    arena_defer(g->arena, (void (*)(void *))regfree, re);
    return re;
}

static void mark_trainable(Graph *g, const Options *o)
{
    regex_t *re = frozen_regex(g, o);
    for (uint32_t v = 0; v < g->nvalues; v++) {
        Value *val = &g->values[v];
        val->trainable = val->kind == VK_PARAM && dtype_is_float(val->dtype) &&
                         val->nuses > 0 && !is_bn_stat(g, v) &&
                         !(re && regexec(re, val->name, 0, NULL, 0) == 0);
    }
}

static void mark_needs(AD *ad)
{
    Graph *g = ad->g;
    bool *fwd = arena_array(g->arena, ad->nfwd, sizeof(bool));
    bool *reach = arena_array(g->arena, ad->nfwd, sizeof(bool));
    for (uint32_t v = 0; v < ad->nfwd; v++)
        fwd[v] = g->values[v].trainable;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        bool any = false;
        for (uint32_t k = 0; k < n->nin; k++)
            any |= n->in[k] != NONE && fwd[n->in[k]];
        for (uint32_t k = 0; k < n->nout && any; k++)
            if (n->out[k] != NONE && g->values[n->out[k]].dtype != DT_I64)
                fwd[n->out[k]] = true;
    }
    reach[g->loss] = true;
    for (uint32_t i = g->norder; i-- > 0;) {
        const Node *n = &g->nodes[g->order[i]];
        bool any = false;
        for (uint32_t k = 0; k < n->nout; k++)
            any |= n->out[k] != NONE && reach[n->out[k]];
        for (uint32_t k = 0; k < n->nin && any; k++)
            if (n->in[k] != NONE)
                reach[n->in[k]] = true;
    }
    for (uint32_t v = 0; v < ad->nfwd; v++)
        ad->needs[v] = fwd[v] && reach[v];
}

/* ---- emitting gradient nodes ---- */

static const char *grad_name(AD *ad, const char *what)
{
    const char *base = ad->n->name[0] ? ad->n->name : ad->n->op_type;
    return arena_printf(ad->g->arena, "%s/%s", base, what);
}

static uint32_t new_grad(AD *ad, const char *what, uint32_t like)
{
    const Value *v = &ad->g->values[like];
    return ir_new_value(ad->g, grad_name(ad, what), v->dtype, &v->shape);
}

/* Emits one gradient node with one output shaped like `like`. */
static Node *emit(AD *ad, Op op, const char *what, const uint32_t *in, uint32_t nin,
                  uint32_t like, uint32_t *out)
{
    *out = new_grad(ad, what, like);
    uint32_t id = ir_emit(ad->g, op, grad_name(ad, what), in, nin, out, 1, PH_BACKWARD);
    Node *n = &ad->g->nodes[id];
    n->loc = ad->n->loc;   /* errors about a gradient point at the forward node */
    return n;
}

static void contribute(AD *ad, uint32_t v, uint32_t grad)
{
    if (v == NONE || v >= ad->nfwd || !ad->needs[v])
        return;
    Contribs *c = &ad->contrib[v];
    c->ids = arena_grow(ad->g->arena, c->ids, c->n, c->n + 1, sizeof(uint32_t));
    c->ids[c->n++] = grad;
}

/* The gradient of v: its one contribution, or their Sum. */
static uint32_t total(AD *ad, uint32_t v)
{
    Contribs *c = &ad->contrib[v];
    if (c->n <= 1)
        return c->n ? c->ids[0] : NONE;
    const char *name = arena_printf(ad->g->arena, "%s_grad", ad->g->values[v].name);
    uint32_t out = ir_new_value(ad->g, name, ad->g->values[v].dtype, &ad->g->values[v].shape);
    ir_emit(ad->g, OP_SUM, name, c->ids, c->n, &out, 1, PH_BACKWARD);
    c->ids[0] = out;
    c->n = 1;
    return out;
}

/* dy reduced to the shape of v (undoing broadcasting), scaled by alpha. */
static uint32_t sum_to(AD *ad, uint32_t dy, uint32_t v, double alpha, const char *what)
{
    if (alpha == 1.0 && shape_eq(&ad->g->values[dy].shape, &ad->g->values[v].shape))
        return dy;
    uint32_t out;
    Node *n = emit(ad, OP_SUM_TO, what, &dy, 1, v, &out);
    ir_set_float(ad->g, n, "alpha", alpha);
    return out;
}

/* ---- the rules, one per op ---- */

static void grad_gemm(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t a = n->in[0], b = n->in[1];
    GemmParams gp = gemm_params(n);
    int64_t ta = gp.trans_a, tb = gp.trans_b;
    double alpha = gp.alpha, beta = gp.beta;
    uint32_t out;
    if (ad->needs[a]) {
        /* dA = alpha dY op(B)^T, or its transpose when A is transposed */
        Node *g = ta ? emit(ad, OP_GEMM, "dA", (uint32_t[]){b, dy}, 2, a, &out)
                     : emit(ad, OP_GEMM, "dA", (uint32_t[]){dy, b}, 2, a, &out);
        ir_set_int(ad->g, g, "transA", ta ? tb : 0);
        ir_set_int(ad->g, g, "transB", ta ? 1 : !tb);
        ir_set_float(ad->g, g, "alpha", alpha);
        contribute(ad, a, out);
    }
    if (ad->needs[b]) {
        Node *g = tb ? emit(ad, OP_GEMM, "dB", (uint32_t[]){dy, a}, 2, b, &out)
                     : emit(ad, OP_GEMM, "dB", (uint32_t[]){a, dy}, 2, b, &out);
        ir_set_int(ad->g, g, "transA", tb ? 1 : !ta);
        ir_set_int(ad->g, g, "transB", tb ? ta : 0);
        ir_set_float(ad->g, g, "alpha", alpha);
        contribute(ad, b, out);
    }
    if (n->nin > 2 && n->in[2] != NONE && ad->needs[n->in[2]])
        contribute(ad, n->in[2], sum_to(ad, dy, n->in[2], beta, "dC"));
}

static void grad_add_sub(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    if (ad->needs[n->in[0]])
        contribute(ad, n->in[0], sum_to(ad, dy, n->in[0], 1.0, "dA"));
    if (!ad->needs[n->in[1]])
        return;
    if (n->op == OP_ADD) {
        contribute(ad, n->in[1], sum_to(ad, dy, n->in[1], 1.0, "dB"));
    } else {
        contribute(ad, n->in[1], sum_to(ad, dy, n->in[1], -1.0, "dB"));
    }
}

/* The dims of s as a constant 1-D int64 tensor (Reshape's and Expand's
 * shape input). */
static uint32_t shape_const(AD *ad, const Shape *s, const char *what)
{
    Graph *g = ad->g;
    Tensor *t = arena_alloc(g->arena, sizeof *t);
    int64_t *dims = arena_array(g->arena, (size_t)s->rank + 1, sizeof(int64_t));
    memcpy(dims, s->d, sizeof(int64_t) * (size_t)s->rank);
    *t = (Tensor){.dtype = DT_I64, .shape = {1, {s->rank}}, .data = dims,
                  .nbytes = sizeof(int64_t) * (size_t)s->rank};
    return ir_new_const(g, grad_name(ad, arena_printf(g->arena, "%s_shape", what)), t);
}

/* v reshaped to s by a new Reshape node. */
static uint32_t reshape_to(AD *ad, uint32_t v, const Shape *s, const char *what)
{
    Graph *g = ad->g;
    uint32_t shape = shape_const(ad, s, what);
    uint32_t out = ir_new_value(g, grad_name(ad, what), g->values[v].dtype, s);
    uint32_t id = ir_emit(g, OP_RESHAPE, grad_name(ad, what), (uint32_t[]){v, shape}, 2, &out,
                          1, PH_BACKWARD);
    g->nodes[id].loc = ad->n->loc;
    return out;
}

static void grad_reshape(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0];
    if (ad->needs[x])
        contribute(ad, x, reshape_to(ad, dy, &ad->g->values[x].shape, "dX"));
}

static void grad_unary(AD *ad, Op op, uint32_t dy, uint32_t saved)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    Node *g = emit(ad, op, "dX", (uint32_t[]){dy, saved}, 2, x, &out);
    ir_copy_attrs(ad->g, g, ad->n);
    contribute(ad, x, out);
}

/* Conv, and ConvTranspose as the data gradient of a convolution C with its
 * attributes and weight: dX is C's data gradient (for ConvTranspose, C
 * itself), dW is C's filter gradient (for ConvTranspose, with x in the
 * place of C's output gradient), dB sums dy per channel. */
static void grad_conv(AD *ad, uint32_t dy, bool transposed)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], w = n->in[1], out;
    if (ad->needs[x]) {
        Node *g = emit(ad, transposed ? OP_CONV : OP_CONV_GRAD_X, "dX", (uint32_t[]){dy, w}, 2,
                       x, &out);
        ir_copy_attrs(ad->g, g, n);
        contribute(ad, x, out);
    }
    if (ad->needs[w]) {
        uint32_t in[2] = {transposed ? x : dy, transposed ? dy : x};
        Node *g = emit(ad, OP_CONV_GRAD_W, "dW", in, 2, w, &out);
        ir_copy_attrs(ad->g, g, n);
        contribute(ad, w, out);
    }
    if (n->nin > 2 && n->in[2] != NONE && ad->needs[n->in[2]]) {
        emit(ad, OP_CONV_GRAD_B, "dB", &dy, 1, n->in[2], &out);
        contribute(ad, n->in[2], out);
    }
}

/* BatchNorm (training mode) and InstanceNorm: BatchNormGrad or
 * InstanceNormGrad (dy, x, scale) gives dX, dScale and dBias, recomputing
 * the statistics from x. A batch norm with its ReLU (graph/simplify.c)
 * reads its output z too, (dy, x, scale, z): dy counts where z > 0. One
 * that added a residual s before its ReLU has that masked dy made first,
 * by ReluGrad, as s's gradient too, and reads it as its dy. */
static void grad_norm(AD *ad, uint32_t dy, Op op)
{
    const Node *n = ad->n;
    if (op == OP_BN_GRAD && !bn_is_training(ad->g, n))
        error_at(&n->loc, "BatchNormalization in inference mode has no gradient in mpcc "
                 "yet; export the model with training=TrainingMode.TRAINING");
    if (op == OP_BN_GRAD && bn_add(n)) {   /* named as the Relu's gradient was */
        uint32_t dz = new_grad(ad, "dSum", n->out[0]);
        uint32_t id = ir_emit(ad->g, OP_RELU_GRAD,
                              arena_printf(ad->g->arena, "%s/dX", bn_relu(n)),
                              (uint32_t[]){dy, n->out[0]}, 2, &dz, 1, PH_BACKWARD);
        ad->g->nodes[id].loc = n->loc;
        contribute(ad, n->in[5], dy = dz);
    }
    uint32_t outs[3] = {new_grad(ad, "dX", n->in[0]), new_grad(ad, "dScale", n->in[1]),
                        new_grad(ad, "dBias", n->in[2])};
    const char *relu = op == OP_BN_GRAD && !bn_add(n) ? bn_relu(n) : NULL;
    uint32_t id = ir_emit(ad->g, op, grad_name(ad, "grad"),
                          (uint32_t[]){dy, n->in[0], n->in[1], n->out[0]}, relu ? 4 : 3, outs, 3,
                          PH_BACKWARD);
    Node *g = &ad->g->nodes[id];
    g->loc = n->loc;
    ir_set_float(ad->g, g, "epsilon", norm_epsilon(n));
    if (relu)
        ir_set_str(ad->g, g, "mpcc_relu", relu);
    for (int k = 0; k < 3; k++)
        contribute(ad, n->in[k], outs[k]);
}

static void grad_loss(AD *ad, Op op, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], out;
    /* a cross-entropy that kept each row's log-sum-exp reads its scores
     * again, and the bias it adds to them (graph/loss.c) */
    uint32_t bias = op == OP_SCE_GRAD && attr_int(n, "mpcc_bias", 0) ? n->in[2] : NONE;
    if (!ad->needs[x] && (bias == NONE || !ad->needs[bias]))
        return;
    uint32_t saved = op == OP_SCE_GRAD ? n->out[1] : x;
    uint32_t nin = bias != NONE ? 5 : op == OP_SCE_GRAD && attr_int(n, "mpcc_lse", 0) ? 4 : 3;
    Node *g = emit(ad, op, "dX", (uint32_t[]){dy, saved, n->in[1], x, bias}, nin, x, &out);
    ir_copy_attrs(ad->g, g, n);
    contribute(ad, x, out);
    if (bias != NONE && ad->needs[bias])   /* the Add's gradient: dX summed over the rows */
        contribute(ad, bias, sum_to(ad, out, bias, 1.0, "dBias"));
}

/* A constant made by the pass: a float scalar, or zeros shaped like v. */
static uint32_t const_f32(AD *ad, const char *what, const Shape *s, float value)
{
    Graph *g = ad->g;
    size_t n = (size_t)shape_numel(s);
    float *f = arena_array(g->arena, n ? n : 1, sizeof(float));
    for (size_t i = 0; i < n; i++)
        f[i] = value;
    Tensor *t = arena_alloc(g->arena, sizeof *t);
    *t = (Tensor){.dtype = DT_F32, .shape = *s, .data = f, .nbytes = n * sizeof(float)};
    return ir_new_const(g, grad_name(ad, what), t);
}

/* dA and dB of an elementwise binary op with broadcasting: op(dy, other)
 * in y's shape, summed down to the operand's shape. */
static void grad_mul(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t a = n->in[0], b = n->in[1], y = n->out[0], t;
    if (ad->needs[a]) {
        emit(ad, OP_MUL, "dA_full", (uint32_t[]){dy, b}, 2, y, &t);
        contribute(ad, a, sum_to(ad, t, a, 1.0, "dA"));
    }
    if (ad->needs[b]) {
        emit(ad, OP_MUL, "dB_full", (uint32_t[]){dy, a}, 2, y, &t);
        contribute(ad, b, sum_to(ad, t, b, 1.0, "dB"));
    }
}

/* y = a / b: dA = dy / b, dB = -dy * y / b */
static void grad_div(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t a = n->in[0], b = n->in[1], y = n->out[0], q, t;
    if (!ad->needs[a] && !ad->needs[b])
        return;
    emit(ad, OP_DIV, "dA_full", (uint32_t[]){dy, b}, 2, y, &q);
    if (ad->needs[a])
        contribute(ad, a, sum_to(ad, q, a, 1.0, "dA"));
    if (ad->needs[b]) {
        emit(ad, OP_MUL, "dB_full", (uint32_t[]){q, y}, 2, y, &t);
        contribute(ad, b, sum_to(ad, t, b, -1.0, "dB"));
    }
}

/* Sum and Mean: dy (over n for Mean) summed down to each operand. */
static void grad_sum(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    double alpha = n->op == OP_MEAN ? 1.0 / n->nin : 1.0;
    for (uint32_t k = 0; k < n->nin; k++)
        if (ad->needs[n->in[k]])
            contribute(ad, n->in[k],
                       sum_to(ad, dy, n->in[k], alpha, arena_printf(ad->g->arena, "d%u", k)));
}

/* Min and Max: MinMaxGrad(dy, y, inputs..) gives operand k its share of dy
 * where it is the result, in y's shape. */
static void grad_minmax(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    if (n->nin > 8)
        error_at(&n->loc, "%s of %u inputs has no gradient in mpcc (at most 8); nest "
                 "several nodes instead", n->op_type, n->nin);
    uint32_t in[10] = {dy, n->out[0]};
    memcpy(in + 2, n->in, n->nin * sizeof(uint32_t));
    for (uint32_t k = 0; k < n->nin; k++) {
        uint32_t v = n->in[k], t;
        if (!ad->needs[v])
            continue;
        Node *g = emit(ad, OP_MINMAX_GRAD, arena_printf(ad->g->arena, "d%u_full", k), in,
                       n->nin + 2, n->out[0], &t);
        ir_set_int(ad->g, g, "wrt", k);
        contribute(ad, v, sum_to(ad, t, v, 1.0, arena_printf(ad->g->arena, "d%u", k)));
    }
}

static void grad_prelu(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    for (int k = 0; k < 2; k++) {
        uint32_t v = n->in[k], t;
        if (!ad->needs[v])
            continue;
        Node *g = emit(ad, OP_PRELU_GRAD, k ? "dSlope_full" : "dX",
                       (uint32_t[]){dy, n->in[0], n->in[1]}, 3, n->out[0], &t);
        ir_set_int(ad->g, g, "wrt", k);
        contribute(ad, v, sum_to(ad, t, v, 1.0, k ? "dSlope" : "dX1"));
    }
}

/* A SumTo node from v to the shape s (of the same rank). */
static uint32_t sum_to_shape(AD *ad, uint32_t v, const Shape *s, const char *what)
{
    uint32_t out = ir_new_value(ad->g, grad_name(ad, what), ad->g->values[v].dtype, s);
    uint32_t id = ir_emit(ad->g, OP_SUM_TO, grad_name(ad, what), &v, 1, &out, 1, PH_BACKWARD);
    ad->g->nodes[id].loc = ad->n->loc;
    return out;
}

/* ReduceSum and ReduceMean: dy with its reduced dims back (as size 1),
 * expanded to x's shape, over the count for a mean. ReduceMax and
 * ReduceMin: ReduceMaxGrad(dy, x, y) with the reduced dims as an
 * attribute. */
static void grad_reduce(AD *ad, uint32_t dy)
{
    Graph *g = ad->g;
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    const Shape *xs = &g->values[x].shape;
    bool reduced[MAX_RANK];
    reduce_axes(g, (Node *)ad->n, reduced);
    int64_t red[MAX_RANK];
    Shape kept = *xs;
    for (int i = 0; i < xs->rank; i++) {
        red[i] = reduced[i];
        kept.d[i] = reduced[i] ? 1 : xs->d[i];
    }
    if (ad->n->op == OP_REDUCE_MAX || ad->n->op == OP_REDUCE_MIN) {
        Node *n = emit(ad, OP_REDUCE_MAX_GRAD, "dX", (uint32_t[]){dy, x, ad->n->out[0]}, 3, x,
                       &out);
        ir_set_ints(g, n, "reduced", red, (uint32_t)xs->rank);
        contribute(ad, x, out);
        return;
    }
    uint32_t d = shape_eq(&g->values[dy].shape, &kept) ? dy : reshape_to(ad, dy, &kept, "dY_kept");
    emit(ad, OP_EXPAND, "dX_sum", (uint32_t[]){d, shape_const(ad, xs, "dX_sum")}, 2, x, &out);
    if (ad->n->op == OP_REDUCE_MEAN) {
        uint32_t sum = out;
        float inv = (float)((double)shape_numel(&kept) / (double)shape_numel(xs));
        emit(ad, OP_MUL, "dX", (uint32_t[]){sum, const_f32(ad, "count", &(Shape){0}, inv)}, 2,
             x, &out);
    }
    contribute(ad, x, out);
}

/* Tile: dy viewed with every repeated dim split into (repeats, dim),
 * summed over the repeats. */
static void grad_tile(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0];
    if (!ad->needs[x])
        return;
    const Shape *xs = &ad->g->values[x].shape;
    const Tensor *rep = ad->g->values[ad->n->in[1]].data;
    Shape split = {0}, summed = {0};
    for (int i = 0; i < xs->rank; i++) {
        int64_t r = tensor_i64(rep, i);
        if (r != 1 && split.rank + xs->rank - i >= MAX_RANK)
            error_at(&ad->n->loc, "Tile repeats too many dims of %s for mpcc's gradient "
                     "(at most %d dims and repeated dims together)",
                     shape_str(ad->g->arena, xs), MAX_RANK);
        if (r != 1) {
            split.d[split.rank++] = r;
            summed.d[summed.rank++] = 1;
        }
        split.d[split.rank++] = xs->d[i];
        summed.d[summed.rank++] = xs->d[i];
    }
    uint32_t v = reshape_to(ad, dy, &split, "dY_split");
    v = sum_to_shape(ad, v, &summed, "dX_summed");
    contribute(ad, x, reshape_to(ad, v, xs, "dX"));
}

/* Pad: PadGrad(dy) gathers each input's gradient from the outputs that
 * read it, at the forward's leading pads. */
static void grad_pad(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    int64_t pads[2 * MAX_RANK];
    pad_params(ad->g, (Node *)ad->n, pads, NULL);
    Node *g = emit(ad, OP_PAD_GRAD, "dX", &dy, 1, x, &out);
    ir_copy_attrs(ad->g, g, ad->n);
    ir_set_ints(ad->g, g, "begins", pads, (uint32_t)ad->g->values[x].shape.rank);
    contribute(ad, x, out);
}

static void grad_pow(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    for (int k = 0; k < 2; k++) {
        uint32_t v = n->in[k], t;
        if (!ad->needs[v])
            continue;
        Node *g = emit(ad, OP_POW_GRAD, k ? "dB_full" : "dA_full",
                       (uint32_t[]){dy, n->in[0], n->in[1], n->out[0]}, 4, n->out[0], &t);
        ir_set_int(ad->g, g, "wrt", k);
        contribute(ad, v, sum_to(ad, t, v, 1.0, k ? "dB" : "dA"));
    }
}

/* Whether a function's derivative is computed from its output y alone
 * (tanh: 1 - y^2), from both x and y (ELU), or else from x alone
 * (runtime/kernels.cu's unary_grad1). */
static bool grad_reads_y_only(Op op)
{
    return op == OP_TANH || op == OP_SQRT || op == OP_EXP || op == OP_SIGMOID ||
           op == OP_RECIPROCAL;
}

/* Elementwise functions: ElementwiseGrad(dy, x, y) with the forward op
 * named in its "op" attribute and the forward's attributes (Clip's bounds
 * as attributes min and max, whichever way the model gave them). It reads
 * only what the derivative needs: ElementwiseGrad(dy, y) or (dy, x) where
 * that is y or x alone, the one value passed to the kernel as both (a
 * pass less over memory, and a value less kept for the backward pass). */
static void grad_elementwise(AD *ad, uint32_t dy)
{
    Op op = ad->n->op;
    uint32_t x = ad->n->in[0], y = ad->n->out[0], out;
    if (!ad->needs[x])
        return;
    double lo = 0, hi = 0;
    if (op == OP_CLIP)
        clip_bounds(ad->g, ad->n, &lo, &hi);
    uint32_t in[3] = {dy, grad_reads_y_only(op) ? y : x, y};
    Node *g = emit(ad, OP_UNARY_GRAD, "dX", in, op == OP_ELU ? 3 : 2, x, &out);
    ir_copy_attrs(ad->g, g, ad->n);
    ir_set_int(ad->g, g, "op", ad->n->op);
    if (ad->n->op == OP_CLIP) {
        ir_set_float(ad->g, g, "min", lo);
        ir_set_float(ad->g, g, "max", hi);
    }
    contribute(ad, x, out);
}

/* A 1-D MatMul operand as a matrix: a row (1,K) on the left, a column
 * (K,1) on the right; the output gains the matching unit dim. */
static uint32_t as_matrix(AD *ad, uint32_t v, bool left, const char *what)
{
    const Shape *s = &ad->g->values[v].shape;
    if (s->rank != 1)
        return v;
    Shape m = {2, {left ? 1 : s->d[0], left ? s->d[0] : 1}};
    return reshape_to(ad, v, &m, what);
}

static uint32_t matmul_grad(AD *ad, uint32_t x, uint32_t y, int tx, int ty, uint32_t like,
                            const char *what)
{
    uint32_t out;
    Node *g = emit(ad, OP_BATCH_MATMUL, what, (uint32_t[]){x, y}, 2, like, &out);
    if (tx)
        ir_set_int(ad->g, g, "transA", 1);
    if (ty)
        ir_set_int(ad->g, g, "transB", 1);
    return out;
}

/* Y = op(A) op(B), op a transpose where a forward BatchMatMul says so
 * (transposed.c): dA = dY op(B)^T, or op(B) dY^T for a transposed A;
 * dB = op(A)^T dY, or dY^T op(A) for a transposed B, each summed over
 * its operand's broadcast batch dims. A MatMul's 1-D operands go through
 * their matrix forms. */
static void grad_matmul(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    GemmParams gp = gemm_params(n);
    int ta = gp.trans_a, tb = gp.trans_b;
    uint32_t a = n->in[0], b = n->in[1];
    const Shape *sa = &ad->g->values[a].shape, *sb = &ad->g->values[b].shape;
    uint32_t a2 = a, b2 = b, dy2 = dy;
    if (sa->rank == 1 || sb->rank == 1) {
        Shape y = ad->g->values[n->out[0]].shape;   /* as a matrix product: */
        if (sa->rank == 1 && sb->rank == 1) {
            y = (Shape){2, {1, 1}};                  /* () -> (1,1) */
        } else if (sa->rank == 1) {
            y.d[y.rank] = y.d[y.rank - 1];           /* (..,N) -> (..,1,N) */
            y.d[y.rank++ - 1] = 1;
        } else {
            y.d[y.rank++] = 1;                       /* (..,M) -> (..,M,1) */
        }
        a2 = as_matrix(ad, a, true, "A2");
        b2 = as_matrix(ad, b, false, "B2");
        dy2 = reshape_to(ad, dy, &y, "dY2");
    }
    if (ad->needs[a]) {
        uint32_t d = ta ? matmul_grad(ad, b2, dy2, tb, 1, a2, "dA")
                        : matmul_grad(ad, dy2, b2, 0, !tb, a2, "dA");
        contribute(ad, a, a2 == a ? d : reshape_to(ad, d, sa, "dA1"));
    }
    if (ad->needs[b]) {
        uint32_t d = tb ? matmul_grad(ad, dy2, a2, 1, ta, b2, "dB")
                        : matmul_grad(ad, a2, dy2, !ta, 0, b2, "dB");
        contribute(ad, b, b2 == b ? d : reshape_to(ad, d, sb, "dB1"));
    }
}

/* Softmax and LogSoftmax: the gradient from dy and the output, on the
 * forward's axis (the opset's default made explicit). SoftmaxBias's is
 * Softmax's: x + b has x's gradient, and b is a constant. */
static void grad_softmax(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    Op op = ad->n->op == OP_LOG_SOFTMAX ? OP_LOG_SOFTMAX_GRAD : OP_SOFTMAX_GRAD;
    Node *g = emit(ad, op, "dX", (uint32_t[]){dy, ad->n->out[0]}, 2, x, &out);
    ir_set_int(ad->g, g, "axis", softmax_axis(ad->g, ad->n));
    double masked = attr_float(ad->n, "mpcc_masked", 0);   /* of a SoftmaxBias */
    if (masked > 0)
        ir_set_float(ad->g, g, "mpcc_masked", masked);
    contribute(ad, x, out);
}

/* LayerNormalization's backward needs the mean and inverse standard
 * deviation of its forward: the forward node gets those outputs if the
 * model did not ask for them. */
static void layer_norm_saved(AD *ad, uint32_t saved[2])
{
    Graph *g = ad->g;
    Node *n = (Node *)ad->n;
    const Value *x = &g->values[n->in[0]];
    int axis = (int)attr_int(n, "axis", -1);
    axis = axis < 0 ? axis + x->shape.rank : axis;
    Shape st = x->shape;
    for (int i = axis; i < st.rank; i++)
        st.d[i] = 1;
    if (n->nout < 3) {
        n->out = arena_grow(g->arena, n->out, n->nout, 3, sizeof(uint32_t));
        for (uint32_t k = n->nout; k < 3; k++)
            n->out[k] = NONE;
        n->nout = 3;
    }
    static const char *names[2] = {"mean", "inv_std_dev"};
    for (int k = 0; k < 2; k++) {
        if (n->out[k + 1] == NONE) {
            n->out[k + 1] = ir_new_value(g, grad_name(ad, names[k]), DT_F32, &st);
            g->values[n->out[k + 1]].producer = (uint32_t)(n - g->nodes);
        }
        saved[k] = n->out[k + 1];
    }
}

static void grad_layer_norm(AD *ad, uint32_t dy)
{
    uint32_t saved[2];
    layer_norm_saved(ad, saved);
    const Node *n = ad->n;
    bool bias = n->nin > 2 && n->in[2] != NONE;
    uint32_t outs[3] = {new_grad(ad, "dX", n->in[0]), new_grad(ad, "dScale", n->in[1]),
                        bias ? new_grad(ad, "dBias", n->in[2]) : NONE};
    uint32_t id = ir_emit(ad->g, OP_LN_GRAD, grad_name(ad, "grad"),
                          (uint32_t[]){dy, n->in[0], n->in[1], saved[0], saved[1]}, 5, outs,
                          bias ? 3 : 2, PH_BACKWARD);
    Node *g = &ad->g->nodes[id];
    g->loc = n->loc;
    ir_set_int(ad->g, g, "axis", attr_int(n, "axis", -1));
    for (uint32_t k = 0; k < (bias ? 3u : 2u); k++)
        contribute(ad, n->in[k], outs[k]);
}

static void grad_transpose(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    int perm[MAX_RANK], r = ad->g->values[x].shape.rank;
    int64_t inv[MAX_RANK];
    transpose_perm(ad->g, (Node *)ad->n, perm);
    for (int i = 0; i < r; i++)
        inv[perm[i]] = i;
    Node *g = emit(ad, OP_TRANSPOSE, "dX", &dy, 1, x, &out);
    ir_set_ints(ad->g, g, "perm", inv, (uint32_t)r);
    contribute(ad, x, out);
}

/* SliceGrad(dy) scatters dy into zeros shaped like x, at the resolved
 * starts and steps of the forward Slice. */
static void grad_slice(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    SliceParams p;
    slice_params(ad->g, (Node *)ad->n, &p);
    uint32_t r = (uint32_t)ad->g->values[x].shape.rank;
    Node *g = emit(ad, OP_SLICE_GRAD, "dX", &dy, 1, x, &out);
    ir_set_ints(ad->g, g, "starts", p.start, r);
    ir_set_ints(ad->g, g, "steps", p.step, r);
    contribute(ad, x, out);
}

/* The gradient of Split is the Concat of its outputs' gradients (zeros
 * for an output that has none). */
static void grad_split(AD *ad, const uint32_t *dy)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], out;
    if (!ad->needs[x])
        return;
    int axis;
    split_sizes(ad->g, (Node *)n, &axis);
    uint32_t *parts = arena_array(ad->g->arena, n->nout, sizeof(uint32_t));
    for (uint32_t k = 0; k < n->nout; k++) {
        uint32_t d = k < 8 ? dy[k] : total(ad, n->out[k]);
        parts[k] = d != NONE ? d : const_f32(ad, "zeros", &ad->g->values[n->out[k]].shape, 0);
    }
    Node *g = emit(ad, OP_CONCAT, "dX", parts, n->nout, x, &out);
    ir_set_int(ad->g, g, "axis", axis);
    contribute(ad, x, out);
}

/* The gradient of Concat: dy split back into the inputs' pieces. */
static void grad_concat(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    Graph *g = ad->g;
    int r = g->values[n->out[0]].shape.rank;
    int64_t axis = attr_int(n, "axis", 0);
    axis = axis < 0 ? axis + r : axis;
    uint32_t *outs = arena_array(g->arena, n->nin, sizeof(uint32_t));
    int64_t *sizes = arena_array(g->arena, n->nin, sizeof(int64_t));
    for (uint32_t k = 0; k < n->nin; k++) {
        outs[k] = new_grad(ad, arena_printf(g->arena, "d%u", k), n->in[k]);
        sizes[k] = g->values[n->in[k]].shape.d[axis];
    }
    uint32_t id = ir_emit(g, OP_SPLIT, grad_name(ad, "split"), &dy, 1, outs, n->nin,
                          PH_BACKWARD);
    Node *s = &g->nodes[id];
    s->loc = n->loc;
    ir_set_int(g, s, "axis", axis);
    ir_set_ints(g, s, "split", sizes, n->nin);
    for (uint32_t k = 0; k < n->nin; k++)
        contribute(ad, n->in[k], outs[k]);
}

/* y = cond ? a : b: dA = cond ? dy : 0, dB = cond ? 0 : dy. */
static void grad_where(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    for (int k = 1; k <= 2; k++) {
        uint32_t v = n->in[k], t;
        if (!ad->needs[v])
            continue;
        uint32_t zero = const_f32(ad, "zero", &(Shape){0}, 0);
        uint32_t in[3] = {n->in[0], k == 1 ? dy : zero, k == 1 ? zero : dy};
        emit(ad, OP_WHERE, k == 1 ? "dA_full" : "dB_full", in, 3, n->out[0], &t);
        contribute(ad, v, sum_to(ad, t, v, 1.0, k == 1 ? "dA" : "dB"));
    }
}

static void grad_cast(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0];
    if (ad->g->values[x].dtype != ad->g->values[dy].dtype)
        error_at(&ad->n->loc, "mpcc has no gradient for a Cast between floating-point "
                 "types yet");
    contribute(ad, x, dy);
}

static void grad_dropout(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    int64_t id = ad->n - ad->g->nodes;   /* the mask's key; before emit moves nodes */
    double ratio = dropout_ratio(ad->g, ad->n);
    Node *g = emit(ad, OP_DROPOUT_GRAD, "dX", &dy, 1, x, &out);
    ir_set_int(ad->g, g, "node", id);
    ir_set_float(ad->g, g, "ratio", ratio);
    contribute(ad, x, out);
}

static void grad_resize(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    double scale[2];
    resize_scales(ad->g, ad->n, scale);
    Node *g = emit(ad, OP_RESIZE_GRAD, "dX", &dy, 1, x, &out);
    ir_copy_attrs(ad->g, g, ad->n);
    if (ad->n->op == OP_UPSAMPLE)
        ir_set_int(ad->g, g, "upsample", 1);   /* Upsample's coordinates and rounding */
    ir_set_float(ad->g, g, "scale_h", scale[0]);
    ir_set_float(ad->g, g, "scale_w", scale[1]);
    contribute(ad, x, out);
}

static void grad_nll(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0], out;
    if (!ad->needs[x])
        return;
    Node *g = emit(ad, OP_NLL_GRAD, "dX", (uint32_t[]){dy, ad->n->in[1]}, 2, x, &out);
    ir_copy_attrs(ad->g, g, ad->n);
    contribute(ad, x, out);
}

/* MaxPool's backward reads the forward's Indices output, which the node
 * gets if the model did not ask for it. */
static void grad_max_pool(AD *ad, uint32_t dy)
{
    Graph *g = ad->g;
    Node *n = (Node *)ad->n;
    uint32_t x = n->in[0], out;
    if (!ad->needs[x])
        return;
    if (n->nout < 2) {
        n->out = arena_grow(g->arena, n->out, n->nout, 2, sizeof(uint32_t));
        n->out[1] = NONE;
        n->nout = 2;
    }
    if (n->out[1] == NONE) {
        n->out[1] = ir_new_value(g, grad_name(ad, "indices"), DT_I64,
                                 &g->values[n->out[0]].shape);
        g->values[n->out[1]].producer = (uint32_t)(n - g->nodes);
    }
    uint32_t idx = n->out[1];
    emit(ad, OP_MAX_POOL_GRAD, "dX", (uint32_t[]){dy, idx}, 2, x, &out);
    contribute(ad, x, out);
}

/* y = CumSum(x): each x_j is in the sums from j on (after j when
 * exclusive), so dx_j sums dy over those: the same CumSum run the other
 * way, on the same constant axis. */
static void grad_cumsum(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], out;
    if (!ad->needs[x])
        return;
    CumSumParams p = cumsum_params(ad->g, n);
    Node *g = emit(ad, OP_CUMSUM, "dX", (uint32_t[]){dy, n->in[1]}, 2, x, &out);
    ir_set_int(ad->g, g, "exclusive", p.exclusive);
    ir_set_int(ad->g, g, "reverse", !p.reverse);
    contribute(ad, x, out);
}

/* ScatterElements, Scatter and ScatterND, reduction none or add: the
 * data's gradient is dy, zeroed where an update replaced the element
 * (none); the updates' is dy gathered at the indices (GatherElements,
 * GatherND). Mul, max and min have no rule. */
static void grad_scatter(AD *ad, uint32_t dy, bool nd)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], idx = n->in[1], u = n->in[2], out;
    if (!ad->needs[x] && !ad->needs[u])
        return;
    ScatterReduction r = scatter_reduction(ad->g, n);
    if (r != SCATTER_NONE && r != SCATTER_ADD)
        error_at(&n->loc, "mpcc has no gradient for %s with reduction '%s' (only none and add), "
                 "and the loss depends on its data or updates through a weight", n->op_type,
                 str_escaped(ad->g->arena, attr_str(n, "reduction", "none"), 40));
    if (ad->needs[x] && r == SCATTER_ADD) {
        contribute(ad, x, dy);
    } else if (ad->needs[x]) {
        Node *g = emit(ad, nd ? OP_SCATTER_ND_GRAD : OP_SCATTER_ELEMENTS_GRAD, "dData",
                       (uint32_t[]){dy, idx}, 2, x, &out);
        ir_copy_attrs(ad->g, g, n);
        contribute(ad, x, out);
    }
    if (ad->needs[u]) {
        Node *g = emit(ad, nd ? OP_GATHER_ND : OP_GATHER_ELEMENTS, "dUpdates",
                       (uint32_t[]){dy, idx}, 2, u, &out);
        if (!nd)
            ir_set_int(ad->g, g, "axis", attr_int(n, "axis", 0));
        contribute(ad, u, out);
    }
}

/* y = TopK(x): dx is dy scattered back to the positions the Indices
 * output names, zero elsewhere (a line's positions are distinct). */
static void grad_topk(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], out;
    if (!ad->needs[x])
        return;
    TopKParams p = topk_params(ad->g, n);
    Node *g = emit(ad, OP_TOPK_GRAD, "dX", (uint32_t[]){dy, n->out[1]}, 2, x, &out);
    ir_set_int(ad->g, g, "axis", p.axis);
    contribute(ad, x, out);
}

/* y = OneHot(indices, depth, values): each element of y is values[1]
 * (where the index names it) or values[0], so dvalues sums dy over each
 * kind; the indices get none. */
static void grad_onehot(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t v = n->in[2], out;
    if (!ad->needs[v])
        return;
    OneHotParams p = onehot_params(ad->g, n);
    Node *g = emit(ad, OP_ONE_HOT_GRAD, "dValues", (uint32_t[]){dy, n->in[0]}, 2, v, &out);
    ir_set_int(ad->g, g, "axis", p.axis);
    contribute(ad, v, out);
}

/* y = Trilu(x): the same triangle of dy. */
static void grad_trilu(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], out;
    if (!ad->needs[x])
        return;
    Node *g = emit(ad, OP_TRILU, "dX", (uint32_t[]){dy, node_has_in(n, 1) ? n->in[1] : NONE},
                   node_has_in(n, 1) ? 2 : 1, x, &out);
    ir_copy_attrs(ad->g, g, n);
    contribute(ad, x, out);
}

static void no_rule(AD *ad)
{
    error_at(&ad->n->loc, "mpcc has no gradient for %s yet; mpcc --check lists every op "
             "the model still needs", ad->n->op_type);
}

static void differentiate(AD *ad, const uint32_t *dy)
{
    const Node *n = ad->n;
    switch (n->op) {
    case OP_GEMM: grad_gemm(ad, dy[0]); break;
    case OP_ADD: case OP_SUB: grad_add_sub(ad, dy[0]); break;
    case OP_RESHAPE: case OP_FLATTEN: case OP_SQUEEZE: case OP_UNSQUEEZE:
        grad_reshape(ad, dy[0]);
        break;
    case OP_IDENTITY: contribute(ad, n->in[0], dy[0]); break;
    case OP_RELU: grad_unary(ad, OP_RELU_GRAD, dy[0], n->out[0]); break;
    case OP_MAX_POOL: grad_max_pool(ad, dy[0]); break;
    case OP_GLOBAL_AVG_POOL: grad_unary(ad, OP_GAP_GRAD, dy[0], n->in[0]); break;
    case OP_AVERAGE_POOL: {
        uint32_t out;
        if (!ad->needs[n->in[0]])
            break;
        Node *g = emit(ad, OP_AVG_POOL_GRAD, "dX", dy, 1, n->in[0], &out);
        ir_copy_attrs(ad->g, g, n);
        contribute(ad, n->in[0], out);
        break;
    }
    case OP_CONV: grad_conv(ad, dy[0], false); break;
    case OP_CONV_TRANSPOSE: grad_conv(ad, dy[0], true); break;
    case OP_BATCH_NORM: grad_norm(ad, dy[0], OP_BN_GRAD); break;
    case OP_INSTANCE_NORM: grad_norm(ad, dy[0], OP_INSTANCE_NORM_GRAD); break;
    case OP_SOFTMAX_CE: grad_loss(ad, OP_SCE_GRAD, dy[0]); break;
    case OP_MUL: grad_mul(ad, dy[0]); break;
    case OP_DIV: grad_div(ad, dy[0]); break;
    case OP_POW: grad_pow(ad, dy[0]); break;
    case OP_SUM: case OP_MEAN: grad_sum(ad, dy[0]); break;
    case OP_MIN: case OP_MAX: grad_minmax(ad, dy[0]); break;
    case OP_PRELU: grad_prelu(ad, dy[0]); break;
    case OP_REDUCE_SUM: case OP_REDUCE_MEAN: case OP_REDUCE_MAX: case OP_REDUCE_MIN:
        grad_reduce(ad, dy[0]);
        break;
    case OP_EXPAND: contribute(ad, n->in[0], sum_to(ad, dy[0], n->in[0], 1.0, "dX")); break;
    case OP_TILE: grad_tile(ad, dy[0]); break;
    case OP_PAD: grad_pad(ad, dy[0]); break;
    case OP_ERF: case OP_TANH: case OP_SQRT: case OP_EXP: case OP_LOG: case OP_NEG:
    case OP_SIGMOID: case OP_RECIPROCAL: case OP_ABS: case OP_HARD_SIGMOID:
    case OP_HARD_SWISH: case OP_LEAKY_RELU: case OP_ELU: case OP_SELU: case OP_SOFTPLUS:
    case OP_GELU: case OP_CLIP:
        grad_elementwise(ad, dy[0]);
        break;
    case OP_MATMUL: case OP_BATCH_MATMUL: grad_matmul(ad, dy[0]); break;
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SOFTMAX_BIAS: grad_softmax(ad, dy[0]); break;
    case OP_NLL_LOSS: grad_nll(ad, dy[0]); break;
    case OP_LAYER_NORM: grad_layer_norm(ad, dy[0]); break;
    case OP_TRANSPOSE: grad_transpose(ad, dy[0]); break;
    case OP_SLICE: grad_slice(ad, dy[0]); break;
    case OP_SPLIT: grad_split(ad, dy); break;
    case OP_CONCAT: grad_concat(ad, dy[0]); break;
    case OP_GATHER: grad_unary(ad, OP_GATHER_GRAD, dy[0], n->in[1]); break;
    case OP_GATHER_ELEMENTS: grad_unary(ad, OP_GATHER_ELEMENTS_GRAD, dy[0], n->in[1]); break;
    case OP_GATHER_ND: grad_unary(ad, OP_GATHER_ND_GRAD, dy[0], n->in[1]); break;
    case OP_SCATTER: case OP_SCATTER_ELEMENTS: grad_scatter(ad, dy[0], false); break;
    case OP_SCATTER_ND: grad_scatter(ad, dy[0], true); break;
    case OP_WHERE: grad_where(ad, dy[0]); break;
    case OP_CAST: grad_cast(ad, dy[0]); break;
    case OP_DROPOUT: grad_dropout(ad, dy[0]); break;
    case OP_RESIZE: case OP_UPSAMPLE: grad_resize(ad, dy[0]); break;
    case OP_MSE_LOSS: grad_loss(ad, OP_MSE_GRAD, dy[0]); break;
    case OP_CUMSUM: grad_cumsum(ad, dy[0]); break;
    case OP_TOPK: grad_topk(ad, dy[0]); break;
    case OP_ONE_HOT: grad_onehot(ad, dy[0]); break;
    case OP_TRILU: grad_trilu(ad, dy[0]); break;
    /* no rule (yet, or none: comparisons and ArgMax carry no gradient, nor does Mod:
     * ops.def), and the internal ops */
    case OP_UNKNOWN: case OP_CEIL: case OP_COS: case OP_FLOOR: case OP_NOT: case OP_ROUND:
    case OP_SIGN: case OP_SIN: case OP_CAST_LIKE: case OP_MOD: case OP_AND: case OP_OR:
    case OP_XOR: case OP_EQUAL: case OP_LESS: case OP_LESS_EQUAL: case OP_GREATER:
    case OP_GREATER_EQUAL: case OP_EINSUM: case OP_LSTM: case OP_GRU: case OP_RNN: case OP_GLOBAL_MAX_POOL: case OP_REDUCE_PROD:
    case OP_REDUCE_L1: case OP_REDUCE_L2: case OP_REDUCE_LOG_SUM: case OP_REDUCE_LOG_SUM_EXP:
    case OP_DEPTH_TO_SPACE: case OP_SPACE_TO_DEPTH:
    case OP_REDUCE_SUM_SQ: case OP_ARGMAX: case OP_ARGMIN:
    case OP_CONSTANT_OF_SHAPE: case OP_RANGE: case OP_SHAPE: case OP_SIZE:
    case OP_TOPK_GRAD: case OP_ONE_HOT_GRAD: case OP_SCE_GRAD: case OP_MSE_GRAD: case OP_RELU_GRAD: case OP_SUM_TO:
    case OP_CONV_GRAD_X: case OP_CONV_GRAD_W: case OP_CONV_GRAD_B: case OP_BN_GRAD:
    case OP_MAX_POOL_GRAD: case OP_GAP_GRAD: case OP_UNARY_GRAD: case OP_POW_GRAD:
    case OP_SOFTMAX_GRAD: case OP_LN_GRAD: case OP_SLICE_GRAD:
    case OP_GATHER_GRAD: case OP_DROPOUT_GRAD: case OP_LOG_SOFTMAX_GRAD: case OP_NLL_GRAD:
    case OP_MINMAX_GRAD: case OP_PRELU_GRAD: case OP_REDUCE_MAX_GRAD: case OP_PAD_GRAD:
    case OP_AVG_POOL_GRAD: case OP_INSTANCE_NORM_GRAD: case OP_RESIZE_GRAD: case OP_SGD:
    case OP_ADAMW: case OP_GATHER_ELEMENTS_GRAD: case OP_GATHER_ND_GRAD:
    case OP_SCATTER_ELEMENTS_GRAD: case OP_SCATTER_ND_GRAD: no_rule(ad);
    }
}

/* ---- the pass ---- */

static uint32_t one(Graph *g)
{
    float *f = arena_alloc(g->arena, sizeof(float));
    *f = 1.0f;
    Tensor *t = arena_alloc(g->arena, sizeof *t);
    *t = (Tensor){.dtype = DT_F32, .data = f, .nbytes = sizeof(float)};
    return ir_new_const(g, "loss_grad", t);
}

static void count_uses(Graph *g)
{
    for (uint32_t v = 0; v < g->nvalues; v++)
        g->values[v].nuses = 0;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                g->values[n->in[k]].nuses++;
    }
}

void autodiff(Graph *g, const Options *o)
{
    MPCC_ASSERT(g->loss != NONE);
    count_uses(g);
    mark_trainable(g, o);
    AD ad = {.g = g, .nfwd = g->nvalues};
    ad.needs = arena_array(g->arena, ad.nfwd, sizeof(bool));
    ad.contrib = arena_array(g->arena, ad.nfwd, sizeof(Contribs));
    mark_needs(&ad);
    ad.needs[g->loss] = true;
    contribute(&ad, g->loss, one(g));
    uint32_t nforward = g->norder;
    for (uint32_t i = nforward; i-- > 0;) {
        ad.n = &g->nodes[g->order[i]];
        g->cur_origin = g->order[i];   /* what this emits is that node's gradient */
        uint32_t dy[8] = {NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE};
        bool any = false;
        for (uint32_t k = 0; k < ad.n->nout && k < 8; k++)
            if (ad.n->out[k] != NONE && ad.n->out[k] < ad.nfwd) {
                dy[k] = total(&ad, ad.n->out[k]);
                any |= dy[k] != NONE;
            }
        if (any && (dy[0] != NONE || ad.n->op == OP_SPLIT))
            differentiate(&ad, dy);
        ad.n = &g->nodes[g->order[i]];   /* emitting may have moved the node array */
    }
    g->cur_origin = NONE;   /* parameter gradient sums belong to the parameter */
    for (uint32_t v = 0; v < ad.nfwd; v++) {
        Value *val = &g->values[v];
        if (!val->trainable)
            continue;
        val->grad = ad.needs[v] ? total(&ad, v) : NONE;
        if (val->grad == NONE) {
            warn_at(&val->loc, "the parameter does not affect the loss; it is not trained");
            val->trainable = false;
        }
    }
    count_uses(g);
}
