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
    int64_t ta = attr_int(n, "transA", 0), tb = attr_int(n, "transB", 0);
    double alpha = attr_float(n, "alpha", 1.0), beta = attr_float(n, "beta", 1.0);
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

static void grad_reshape(AD *ad, uint32_t dy)
{
    uint32_t x = ad->n->in[0];
    if (!ad->needs[x])
        return;
    const Shape *s = &ad->g->values[x].shape;
    Tensor *t = arena_alloc(ad->g->arena, sizeof *t);
    int64_t *dims = arena_array(ad->g->arena, (size_t)s->rank + 1, sizeof(int64_t));
    memcpy(dims, s->d, sizeof(int64_t) * (size_t)s->rank);
    *t = (Tensor){.dtype = DT_I64, .shape = {1, {s->rank}}, .data = dims,
                  .nbytes = sizeof(int64_t) * (size_t)s->rank};
    uint32_t shape = ir_new_const(ad->g, grad_name(ad, "shape"), t);
    uint32_t out;
    emit(ad, OP_RESHAPE, "dX", (uint32_t[]){dy, shape}, 2, x, &out);
    contribute(ad, x, out);
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

static void grad_conv(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], w = n->in[1], out;
    if (ad->needs[x]) {
        Node *g = emit(ad, OP_CONV_GRAD_X, "dX", (uint32_t[]){dy, w}, 2, x, &out);
        ir_copy_attrs(ad->g, g, n);
        contribute(ad, x, out);
    }
    if (ad->needs[w]) {
        Node *g = emit(ad, OP_CONV_GRAD_W, "dW", (uint32_t[]){dy, x}, 2, w, &out);
        ir_copy_attrs(ad->g, g, n);
        contribute(ad, w, out);
    }
    if (n->nin > 2 && n->in[2] != NONE && ad->needs[n->in[2]]) {
        emit(ad, OP_CONV_GRAD_B, "dB", &dy, 1, n->in[2], &out);
        contribute(ad, n->in[2], out);
    }
}

static bool bn_training(const Graph *g, const Node *n)
{
    const Attr *a = ir_attr(n, "training_mode");
    if (a)
        return a->kind == AT_INT && a->i != 0;
    return g->opset < 14 && n->nout > 1;   /* older opsets: extra outputs mean training */
}

static void grad_batch_norm(AD *ad, uint32_t dy)
{
    const Node *n = ad->n;
    if (!bn_training(ad->g, n))
        error_at(&n->loc, "BatchNormalization in inference mode has no gradient in mpcc "
                 "yet; export the model with training=TrainingMode.TRAINING");
    uint32_t outs[3] = {new_grad(ad, "dX", n->in[0]), new_grad(ad, "dScale", n->in[1]),
                        new_grad(ad, "dBias", n->in[2])};
    uint32_t id = ir_emit(ad->g, OP_BN_GRAD, grad_name(ad, "grad"),
                          (uint32_t[]){dy, n->in[0], n->in[1]}, 3, outs, 3, PH_BACKWARD);
    Node *g = &ad->g->nodes[id];
    g->loc = n->loc;
    ir_set_float(ad->g, g, "epsilon", attr_float(n, "epsilon", 1e-5));
    for (int k = 0; k < 3; k++)
        contribute(ad, n->in[k], outs[k]);
}

static void grad_loss(AD *ad, Op op, uint32_t dy)
{
    const Node *n = ad->n;
    uint32_t x = n->in[0], out;
    if (!ad->needs[x])
        return;
    uint32_t saved = op == OP_SCE_GRAD ? n->out[1] : x;
    Node *g = emit(ad, op, "dX", (uint32_t[]){dy, saved, n->in[1]}, 3, x, &out);
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
    case OP_MAX_POOL: grad_unary(ad, OP_MAX_POOL_GRAD, dy[0], n->in[0]); break;
    case OP_GLOBAL_AVG_POOL: grad_unary(ad, OP_GAP_GRAD, dy[0], n->in[0]); break;
    case OP_CONV: grad_conv(ad, dy[0]); break;
    case OP_BATCH_NORM: grad_batch_norm(ad, dy[0]); break;
    case OP_SOFTMAX_CE: grad_loss(ad, OP_SCE_GRAD, dy[0]); break;
    case OP_MSE_LOSS: grad_loss(ad, OP_MSE_GRAD, dy[0]); break;
    default: no_rule(ad);
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
        uint32_t dy[8] = {NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE};
        bool any = false;
        for (uint32_t k = 0; k < ad.n->nout && k < 8; k++)
            if (ad.n->out[k] != NONE && ad.n->out[k] < ad.nfwd) {
                dy[k] = total(&ad, ad.n->out[k]);
                any |= dy[k] != NONE;
            }
        if (any && dy[0] != NONE)
            differentiate(&ad, dy);
        ad.n = &g->nodes[g->order[i]];   /* emitting may have moved the node array */
    }
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
