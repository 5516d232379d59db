/* export_mode.c — tells an export for inference from one for training,
 * before the training graph is built on it.
 *
 * torch.onnx.export exports in inference mode unless told otherwise
 * (training=TrainingMode.EVAL). Its BatchNormalization nodes then normalise
 * with the running statistics and have no training_mode; with its default
 * constant folding it goes further and folds each BatchNormalization into
 * the Conv before it, whose weights become constants named 'onnx::Conv_N'.
 * The first cannot be trained as it is: an error that says how to export.
 * The second trains, but as a network without BatchNorm: a warning.
 *
 * An export for inference also shares initializers of equal value between
 * layers (equal biases of freshly made layers, say), giving each other
 * reader an Identity of the one kept. Trained through that, the layers
 * would share one weight. Each Identity of a weight becomes a weight of its
 * own under the Identity's output name, with the same initial value, as
 * the layers of the model were (`mpcc export` writes them back so).
 */
#include "mpcc.h"

#include <string.h>

bool bn_is_training(const Graph *g, const Node *n)
{
    const Attr *a = ir_attr(n, "training_mode");
    if (a)
        return a->kind == AT_INT && a->i != 0;
    return g->opset < 14 && n->nout > 1;   /* older opsets: extra outputs mean training */
}

static const char *const how =
    "torch.onnx.export(model, x, path, training=torch.onnx.TrainingMode.TRAINING, "
    "do_constant_folding=False) (docs/frontend.md)";

/* The first BatchNormalization in inference form, and how many there are. */
static const Node *inference_bn(const Graph *g, int *count)
{
    const Node *first = NULL;
    *count = 0;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->op == OP_BATCH_NORM && !bn_is_training(g, n)) {
            first = first ? first : n;
            ++*count;
        }
    }
    return first;
}

/* Conv weights that PyTorch computed at export time ('onnx::Conv_12'). */
static int folded_convs(const Graph *g, bool *any_bn)
{
    int count = 0;
    *any_bn = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        *any_bn |= n->op == OP_BATCH_NORM;
        if (n->op == OP_CONV && n->nin > 1 &&
            strncmp(g->values[n->in[1]].name, "onnx::Conv_", 11) == 0)
            count++;
    }
    return count;
}

/* Identity(weight) -> a weight of its own while the weight has another
 * reader (the last one keeps it); returns how many. */
static int untie(Graph *g)
{
    int count = 0;
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        Value *w = n->op == OP_IDENTITY && n->nin == 1 ? &g->values[n->in[0]] : NULL;
        if (!w || w->kind != VK_PARAM || !dtype_is_float(w->dtype) || w->nuses < 2) {
            g->order[k++] = g->order[i];
            continue;
        }
        Value *v = &g->values[n->out[0]];
        v->kind = VK_PARAM;
        v->data = w->data;
        v->producer = NONE;
        v->loc = (Loc){.file = g->file, .what = "initializer", .name = v->name, .index = -1};
        w->nuses--;
        n->dead = true;
        count++;
    }
    g->norder = k;
    return count;
}

void check_export_mode(Graph *g)
{
    int untied = untie(g);
    if (untied) {
        Loc loc = {.file = g->file, .index = -1};
        note_once(&loc, "%d Identity node(s) share a weight with another layer, as PyTorch "
                  "writes equal initializers when it exports for inference; each trains as a "
                  "weight of its own", untied);
    }
    int count;
    const Node *bn = inference_bn(g, &count);
    if (bn)
        error_at(&bn->loc, "the model was exported for inference: this and %d other "
                 "BatchNormalization node(s) normalise with running statistics and cannot be "
                 "trained; export it for training: %s", count - 1, how);
    bool any_bn;
    int folded = folded_convs(g, &any_bn);
    if (folded && !any_bn) {
        Loc loc = {.file = g->file, .index = -1};
        warn_once(&loc, "the weights of %d Conv node(s) are named 'onnx::Conv_...': PyTorch "
                  "folded BatchNormalization into them, as it does when it exports for "
                  "inference, so the model trains without BatchNorm; to train it as defined, "
                  "export with %s", folded, how);
    }
}
