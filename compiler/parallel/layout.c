/* layout.c — which activations of CPU devices stay in oneDNN's blocked
 * layout between the operations that can read and write it.
 *
 * oneDNN runs a CPU device's convolutions fastest with the channels in
 * blocks of 16 (nChw16c; 8 on machines without AVX-512): each spatial
 * position holds a block's channels side by side. In the plain layout
 * (NCHW) every convolution reorders its input into that layout and its
 * output back, forward and backward: a fifth of ResNet-50's step on one
 * thread (tests/bench/README.md). A value is kept blocked when every node
 * that reads or writes it can take it so:
 *   - the convolutions that run through oneDNN (their data operands: the
 *     input, the output and the gradients of both; not the filter),
 *   - training-mode batch normalisation and its gradient, a convolution's
 *     bias gradient, the global average pooling and its gradient
 *     (runtime/cpu_dnnl.c has blocked twins of cpu.c's kernels that give
 *     the same bits),
 *   - Relu, its gradient, Add and Sum of operands of one shape: elementwise,
 *     so any layout will do as long as all operands share it.
 * The elementwise ops and the normalisations tie their operands into one
 * class that takes one layout; a class is blocked when each of its values
 * is a float activation of four dimensions with channels a multiple of 16
 * (so the blocked tensor has exactly the plain one's size: the memory plan
 * holds either), lives on one CPU device and nowhere else (no copy sends
 * it), is never read by the host (outputs, the loss's operands), and some
 * convolution through oneDNN reads or writes it. Every other value keeps
 * its plain layout, and a convolution reorders it as before.
 */
#include "mpcc.h"

/* Union-find over the values. */
static uint32_t find(uint32_t *up, uint32_t v)
{
    while (up[v] != v)
        v = up[v] = up[up[v]];
    return v;
}

static void tie(uint32_t *up, uint32_t a, uint32_t b)
{
    a = find(up, a), b = find(up, b);
    if (a != b)
        up[a] = b;
}

/* Elementwise ops whose operands may be in any layout they all share. */
static bool elementwise(Op op)
{
    return op == OP_RELU || op == OP_RELU_GRAD || op == OP_ADD || op == OP_SUM;
}

/* Operand k (an input if k < nin, else output k - nin) of a node that runs
 * on a CPU device: whether it may be blocked, with the operands it must
 * share a layout with tied. */
static bool may_block(const Graph *g, const Node *n, uint32_t k, uint32_t *up)
{
    uint32_t nin = n->nin, v = k < nin ? n->in[k] : n->out[k - nin];
    bool out = k >= nin;
    switch (n->op) {
    case OP_CONV: case OP_CONV_GRAD_X: case OP_CONV_GRAD_W:
        if (!conv_onednn(g, n) || conv_group(n) != 1)
            return false;
        if (n->op == OP_CONV)
            return k == 0 || out;                  /* x, y; not w or b */
        if (n->op == OP_CONV_GRAD_X)
            return k == 0 || out;                  /* dy, dx; not w */
        return k == 0 || k == 1;                   /* dy, x; not dw */
    case OP_BATCH_NORM:
        if (!bn_is_training(g, n) || (k != 0 && k != 5 && k != nin))
            return false;                          /* x, a residual and y; not 1-D ones */
        tie(up, n->in[0], n->out[0]);
        if (nin > 5)
            tie(up, n->in[0], n->in[5]);
        return true;
    case OP_BN_GRAD:
        if (k != 0 && k != 1 && k != 3 && k != nin)
            return false;                          /* dy, x, z and dx; not scale, dscale */
        tie(up, n->in[0], n->in[1]);
        tie(up, n->in[0], n->out[0]);
        if (nin > 3)
            tie(up, n->in[0], n->in[3]);
        return true;
    case OP_CONV_GRAD_B:
        return k == 0;                             /* dy; the bias gradient is 1-D */
    case OP_GLOBAL_AVG_POOL:
        return k == 0;                             /* x; y is N x C x 1 x 1 */
    case OP_GAP_GRAD:
        return out || k == 1;                      /* dx; x gives its shape alone */
    default:
        if (!elementwise(n->op) || n->nout != 1)
            return false;
        for (uint32_t i = 0; i < nin; i++)
            if (n->in[i] == NONE ||
                !shape_eq(&g->values[n->in[i]].shape, &g->values[n->out[0]].shape))
                return false;
        tie(up, v, n->out[0]);
        return true;
    }
}

/* Whether value v can be blocked at all: see the head comment. */
static bool blockable(const Plan *p, uint32_t v, const bool *outside)
{
    const Graph *g = p->g;
    const Value *val = &g->values[v];
    int home = p->st->home[v];
    if (val->kind != VK_ACTIVATION || val->dtype != DT_F32 || val->shape.rank != 4 ||
        val->shape.d[1] % 16 != 0 || outside[v] || home < 0 ||
        p->ds->d[p->st->dev[home]].kind != DEV_CPU)
        return false;
    for (int s = 0; s < p->st->n; s++)
        if (s != home && plan_buf(p, v, s) >= 0)
            return false;
    return plan_buf(p, v, home) >= 0;
}

bool *layout_blocked(const Plan *p, const Options *o, Arena *a)
{
    const Graph *g = p->g;
    bool *blocked = arena_array(a, g->nvalues, sizeof(bool));
    if (o->infer || o->cpu_layout == LAYOUT_PLAIN)
        return blocked;
    uint32_t *up = arena_array(a, g->nvalues, sizeof *up);
    bool *bad = arena_array(a, g->nvalues, sizeof(bool));
    bool *conv = arena_array(a, g->nvalues, sizeof(bool));
    bool *touched = arena_array(a, g->nvalues, sizeof(bool));
    bool *outside = plan_read_outside(g, a);
    for (uint32_t v = 0; v < g->nvalues; v++)
        up[v] = v;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->dead || p->st->stage[i] < 0)
            continue;
        bool cpu = p->ds->d[p->st->dev[p->st->stage[i]]].kind == DEV_CPU;
        bool is_conv = n->op == OP_CONV || n->op == OP_CONV_GRAD_X || n->op == OP_CONV_GRAD_W;
        for (uint32_t k = 0; k < n->nin + n->nout; k++) {
            uint32_t v = k < n->nin ? n->in[k] : n->out[k - n->nin];
            if (v == NONE)
                continue;
            touched[v] = true;
            if (!cpu || !may_block(g, n, k, up))
                bad[v] = true;
            else if (is_conv)
                conv[v] = true;
        }
    }
    /* per class (at its root): a value that cannot be blocked, and whether
     * a convolution reads or writes one of them */
    bool *class_bad = arena_array(a, g->nvalues, sizeof(bool));
    bool *class_conv = arena_array(a, g->nvalues, sizeof(bool));
    for (uint32_t v = 0; v < g->nvalues; v++) {
        if (!touched[v])
            continue;
        uint32_t r = find(up, v);
        class_bad[r] |= bad[v] || !blockable(p, v, outside);
        class_conv[r] |= conv[v];
    }
    for (uint32_t v = 0; v < g->nvalues; v++) {
        uint32_t r = find(up, v);
        blocked[v] = touched[v] && !class_bad[r] && class_conv[r];
    }
    return blocked;
}
