/* loss.c — puts the loss on the model: the first pass of the training graph.
 *
 * If the model computes its own SoftmaxCrossEntropyLoss or
 * NegativeLogLikelihoodLoss, that is the loss
 * and its label input is the labels. Otherwise --loss chooses: cross-entropy
 * over (N,C) or (N,C,d1..dk) scores with integer labels (N) or (N,d1..dk),
 * or mean squared error against float targets of the output's shape. The
 * labels become a new graph input named "labels".
 *
 * A cross-entropy whose log-probabilities the model does not ask for keeps
 * each row's log-sum-exp for its gradient instead (attribute mpcc_lse): a
 * float per label, where the log-probabilities are the scores' size (a
 * language model's: its vocabulary times every position, in float32). The
 * gradient reads the scores again and computes each log-probability as the
 * loss did, x - lse: the same numbers.
 *
 * Such a cross-entropy of a head's Add(x, bias) adds the bias itself
 * (loss_bias: attribute mpcc_bias, the bias its third input): its kernels
 * read x, and the bias, where they read the Add's float32 output, and make
 * each score as the Add made it, the same numbers. The Add stays, for the
 * scores the host reads to evaluate (g->scores), and runs in evaluation
 * only (attribute mpcc_eval_only): a training step writes no float32
 * scores (a language model's vocabulary times every position) and reads
 * none.
 */
#include "mpcc.h"

#include <string.h>

static uint32_t model_loss(Graph *g)
{
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if ((n->op == OP_SOFTMAX_CE || n->op == OP_NLL_LOSS) && g->values[n->out[0]].is_output)
            return g->order[i];
    }
    return NONE;
}

static uint32_t add_labels(Graph *g, DType t, const Shape *s)
{
    uint32_t v = ir_new_value(g, "labels", t, s);
    Value *val = &g->values[v];
    val->kind = VK_INPUT;
    val->loc = (Loc){.file = g->file, .what = "input", .name = val->name, .index = -1};
    g->inputs = arena_grow(g->arena, g->inputs, g->ninputs, g->ninputs + 1, sizeof(uint32_t));
    g->inputs[g->ninputs++] = v;
    return v;
}

static void cross_entropy(Graph *g, const Options *o, uint32_t scores)
{
    const Value *x = &g->values[scores];
    Loc loc = value_loc(g, scores);
    if (x->shape.rank < 2)
        error_at(&loc, "cross-entropy needs scores (N,C) or (N,C,d..), the model's output "
                 "is %s%s; use --loss=mse for regression", dtype_name(x->dtype),
                 shape_str(g->arena, &x->shape));
    int axis = o->train.class_axis < 0 ? o->train.class_axis + x->shape.rank
                                       : o->train.class_axis;
    if (axis < 1 || axis >= x->shape.rank)
        error_at(&loc, "--class-axis=%d is not a dimension after the batch of the output %s%s",
                 o->train.class_axis, dtype_name(x->dtype), shape_str(g->arena, &x->shape));
    if (!dtype_is_float(x->dtype) || x->shape.d[axis] < 1)
        error_at(&loc, "cross-entropy needs floating-point scores of one class or more, the "
                 "model's output is %s%s", dtype_name(x->dtype), shape_str(g->arena, &x->shape));
    /* scores whose classes are on another axis (a language model's
     * (B,T,V)) are read where they are: (outer, C, inner) rows of classes
     * for the loss's kernels, the labels the output's other dims */
    Shape ls = {0};
    for (int i = 0; i < x->shape.rank; i++)
        if (i != axis)
            ls.d[ls.rank++] = x->shape.d[i];
    uint32_t labels = add_labels(g, DT_I64, &ls);
    uint32_t out[2] = {ir_new_value(g, "loss", x->dtype, &(Shape){0}),
                       ir_new_value(g, "log_sum_exp", x->dtype, &ls)};
    uint32_t id = ir_emit(g, OP_SOFTMAX_CE, "loss", (uint32_t[]){scores, labels}, 2, out, 2,
                          PH_FORWARD);
    ir_set_int(g, &g->nodes[id], "mpcc_lse", 1);
    ir_set_int(g, &g->nodes[id], "ignore_index", o->train.ignore_index);
    if (axis != 1)
        ir_set_int(g, &g->nodes[id], "mpcc_class_axis", axis);
    g->loss = out[0];
    g->labels = labels;
}

static void mean_squared_error(Graph *g, uint32_t pred)
{
    const Value *x = &g->values[pred];
    if (!dtype_is_float(x->dtype)) {
        Loc loc = value_loc(g, pred);
        error_at(&loc, "mean squared error needs a floating-point output, it is %s",
                 dtype_name(x->dtype));
    }
    uint32_t target = add_labels(g, x->dtype, &x->shape);
    uint32_t loss = ir_new_value(g, "loss", x->dtype, &(Shape){0});
    ir_emit(g, OP_MSE_LOSS, "loss", (uint32_t[]){pred, target}, 2, &loss, 1, PH_FORWARD);
    g->loss = loss;
    g->labels = target;
}

bool eval_only(const Node *n)
{
    return attr_int(n, "mpcc_eval_only", 0) != 0;
}

/* Whether b is a float32 parameter or constant of scores s's classes
 * alone: broadcast against s, every dim 1 but the class axis, C there. */
static bool class_bias(const Graph *g, uint32_t b, const Value *s, int axis)
{
    const Value *v = &g->values[b];
    if ((v->kind != VK_PARAM && v->kind != VK_CONST) || v->dtype != DT_F32 ||
        v->shape.rank > s->shape.rank || s->shape.rank - v->shape.rank > axis)
        return false;
    for (int i = 0; i < v->shape.rank; i++) {
        int j = s->shape.rank - v->shape.rank + i;
        if (v->shape.d[i] != (j == axis ? s->shape.d[axis] : 1))
            return false;
    }
    return true;
}

/* The cross-entropy that keeps its log-sum-exp, of scores Add(x, b) with
 * b a class_bias and nothing else reading them, adds b itself (see the
 * top of the file). */
static void loss_bias(Graph *g)
{
    Node *n = &g->nodes[g->values[g->loss].producer];
    uint32_t scores = g->scores = n->in[0];
    if (n->op != OP_SOFTMAX_CE || !attr_int(n, "mpcc_lse", 0) || n->nin != 2)
        return;
    const Value *s = &g->values[scores];
    if (s->producer == NONE || g->nodes[s->producer].op != OP_ADD || s->dtype != DT_F32 ||
        ir_reads(g, scores) != 1)
        return;
    Node *add = &g->nodes[s->producer];
    for (int k = 0; k < 2; k++) {
        uint32_t b = add->in[k], x = add->in[1 - k];
        if (!class_bias(g, b, s, loss_class_axis(n)) || g->values[x].dtype != DT_F32 ||
            !shape_eq(&g->values[x].shape, &s->shape))
            continue;
        n->in = arena_grow(g->arena, n->in, n->nin, 3, sizeof *n->in);
        n->in[0] = x, n->in[2] = b;
        n->nin = 3;
        ir_set_int(g, n, "mpcc_bias", 1);
        ir_set_int(g, add, "mpcc_eval_only", 1);
        return;
    }
}

void add_loss(Graph *g, const Options *o)
{
    uint32_t own = model_loss(g);
    if (own != NONE) {
        Node *n = &g->nodes[own];
        g->loss = n->out[0];
        g->labels = n->in[1];
        if (n->op == OP_SOFTMAX_CE && (n->nout < 2 || n->out[1] == NONE)) {
            /* the backward needs each row's log-sum-exp */
            uint32_t lse = ir_new_value(g, "log_sum_exp", g->values[n->in[0]].dtype,
                                        &g->values[n->in[1]].shape);
            n->out = arena_grow(g->arena, n->out, n->nout, 2, sizeof(uint32_t));
            n->nout = 2;
            n->out[1] = lse;
            g->values[lse].producer = own;
            ir_set_int(g, n, "mpcc_lse", 1);
        }
        loss_bias(g);
        return;
    }
    if (g->noutputs != 1) {
        Loc loc = {.file = g->file, .index = -1};
        error_at(&loc, "the model has %u outputs; mpcc puts the loss on a single output "
                 "(export the model with one output, or with its own loss)", g->noutputs);
    }
    if (o->train.loss == LOSS_MSE) {
        mean_squared_error(g, g->outputs[0]);
        g->scores = g->outputs[0];
        return;
    }
    cross_entropy(g, o, g->outputs[0]);
    loss_bias(g);
}
