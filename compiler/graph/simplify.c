/* simplify.c — rewrites of the forward graph before its gradient, each a
 * kernel (and its gradient's) fewer:
 *
 *   x * 1, 1 * x, x / 1            x, where every element of the constant
 *                                  is 1 and the result is shaped as x:
 *                                  exact in IEEE arithmetic. PyTorch's
 *                                  export of attention's baddbmm scales the
 *                                  scores by a beta of 1 in every layer.
 *   x * (1 + erf(x / sqrt 2)) * 0.5 Gelu(x), as PyTorch exports nn.GELU
 *                                  before opset 20 (x / sqrt 2 may be
 *                                  x * (1 / sqrt 2), and the 0.5 may
 *                                  multiply x first): one kernel forward
 *                                  and one backward instead of five and
 *                                  four, and none of the four intermediate
 *                                  activations kept for the backward. The
 *                                  same function within rounding.
 *   Slices of x that part it        one Split, as the q, k and v of
 *   along one axis                  attention's packed projection: its
 *                                  gradient is one Concat, where each
 *                                  Slice's was a tensor of x's size, zero
 *                                  but for its part, and their Sum read
 *                                  them all again. The same values.
 *   Softmax(x + c) over the last    SoftmaxBias(x, c): the sum made in the
 *   axis, c a constant of x's last  softmax's kernel, as the attention's
 *   dims (a mask)                   mask added to its scores in every layer
 *                                  of a PyTorch export, where the Add was
 *                                  a pass of its own over the scores. The
 *                                  same values (the sum rounded as the
 *                                  Add's output was stored). Where c is
 *                                  -inf (a causal mask's upper half:
 *                                  attribute mpcc_masked, the share, for
 *                                  the cost model), the kernels read no x
 *                                  and write 0 (runtime/cpu_math.c,
 *                                  kernels.cu), and the gradient's on a
 *                                  GPU read no dy where y is 0.
 *   Transpose(x) * c, / c           Transpose(x * c), c a constant of one
 *                                  element: attention's queries scaled
 *                                  before they move into the batch's
 *                                  layout, so that the Transpose reads
 *                                  into the product after it, where
 *                                  graph/views.c folds it (and its
 *                                  gradient). The same values.
 *   Relu(BatchNormalization(x))     BatchNormalization(x) with attribute
 *                                  mpcc_relu (the Relu's name): the batch
 *                                  norm's kernel writes max(y, 0), where
 *                                  the Relu read y and wrote it again, and
 *                                  its gradient masks dy by the output
 *                                  itself (BatchNormGrad's fourth input),
 *                                  where ReluGrad wrote a tensor of its
 *                                  own: every batch norm but the last of
 *                                  each ResNet block. The same values.
 *                                  --split still takes the Relu's name.
 *   Relu(BatchNormalization(x)      BatchNormalization(x, ..., s) with
 *        + s)                      mpcc_relu and mpcc_add (the Add's
 *                                  name): the batch norm adds s and
 *                                  writes max(y + s, 0) (y rounded to bf16
 *                                  first where it was stored so), where y
 *                                  was written and read again: each
 *                                  ResNet block's last batch norm. Its
 *                                  gradient is the Relu's, ReluGrad, and
 *                                  then the plain batch norm's. The same
 *                                  values. --split takes the Add's or the
 *                                  Relu's name.
 *
 * A value the rewrite removes must have no other reader and not be a
 * graph output; the constants are Constant values (never a trainable
 * initializer). Where transposed.c runs: training and --infer. */
#include "mpcc.h"

#include <math.h>
#include <stdlib.h>

/* Whether v is a constant whose every element is `want` in float32. */
static bool const_all(const Graph *g, uint32_t v, double want)
{
    const Value *val = &g->values[v];
    if (val->kind != VK_CONST || !val->data || val->dtype != DT_F32)
        return false;
    int64_t n = shape_numel(&val->shape);
    for (int64_t i = 0; i < n; i++)
        if ((float)tensor_f64(val->data, i) != (float)want)
            return false;
    return n > 0;
}

/* The node computing v with op `op`, if v is read once and is no output. */
static Node *sole(Graph *g, uint32_t v, Op op)
{
    const Value *val = &g->values[v];
    if (val->producer == NONE || val->nuses != 1 || val->is_output)
        return NULL;
    Node *p = &g->nodes[val->producer];
    return !p->dead && p->op == op ? p : NULL;
}

/* Binary node n with one operand the constant `c`: the other, or NONE.
 * Only the second operand of a Div counts (x / c). */
static uint32_t other_than(const Graph *g, const Node *n, double c)
{
    if (const_all(g, n->in[1], c))
        return n->in[0];
    return n->op != OP_DIV && const_all(g, n->in[0], c) ? n->in[1] : NONE;
}

/* ---- x * 1 and x / 1 ---- */

/* The x that Mul or Div node n passes through unchanged, or NONE. */
static uint32_t identity_of(const Graph *g, const Node *n)
{
    if ((n->op != OP_MUL && n->op != OP_DIV) || g->values[n->out[0]].is_output)
        return NONE;
    uint32_t x = other_than(g, n, 1.0);
    if (x == NONE || g->values[x].dtype != g->values[n->out[0]].dtype ||
        !shape_eq(&g->values[x].shape, &g->values[n->out[0]].shape))
        return NONE;
    return x;
}

/* ---- GELU ---- */

typedef struct {
    Node *gone[4];   /* the nodes the Gelu replaces, but the last */
    int ngone;
} Gelu;

/* The x of v = 1 + erf(x / sqrt 2) (or erf(x * (1 / sqrt 2))), or NONE. */
static uint32_t erf_term(Graph *g, uint32_t v, Gelu *m)
{
    Node *add = sole(g, v, OP_ADD);
    uint32_t e = add ? other_than(g, add, 1.0) : NONE;
    Node *erf = e != NONE ? sole(g, e, OP_ERF) : NULL;
    if (!erf)
        return NONE;
    Node *d = sole(g, erf->in[0], OP_DIV);
    uint32_t x = d ? other_than(g, d, M_SQRT2) : NONE;
    if (!d) {
        d = sole(g, erf->in[0], OP_MUL);
        x = d ? other_than(g, d, M_SQRT1_2) : NONE;
    }
    if (x == NONE)
        return NONE;
    m->gone[m->ngone++] = add;
    m->gone[m->ngone++] = erf;
    m->gone[m->ngone++] = d;
    return x;
}

/* Whether Mul node n is (x * t) * 0.5 or (x * 0.5) * t in any operand
 * order, t = 1 + erf(x / sqrt 2), and shaped as x: its x, or NONE. */
static uint32_t gelu_of(Graph *g, const Node *n, Gelu *m)
{
    if (n->op != OP_MUL)
        return NONE;
    for (int k = 0; k < 2; k++) {
        Node *p = sole(g, n->in[k], OP_MUL);
        uint32_t other = n->in[1 - k];
        for (int j = 0; p && j < 2; j++) {
            uint32_t x = p->in[j];
            if (!shape_eq(&g->values[x].shape, &g->values[n->out[0]].shape))
                continue;
            m->gone[0] = p;
            m->ngone = 1;
            if (const_all(g, other, 0.5) && erf_term(g, p->in[1 - j], m) == x)
                return x;
            m->ngone = 1;
            if (const_all(g, p->in[1 - j], 0.5) && erf_term(g, other, m) == x)
                return x;
        }
    }
    return NONE;
}

/* ---- Slices that part their input ---- */

/* The axis along which Slice node n takes one contiguous range (step 1)
 * of its input, all of every other dim; -1 if none. Its range in *start,
 * *size. */
static int slice_axis(Graph *g, Node *n, int64_t *start, int64_t *size)
{
    SliceParams p;
    slice_params(g, n, &p);
    const Shape *x = &g->values[n->in[0]].shape;
    int axis = -1;
    for (int d = 0; d < x->rank; d++) {
        if (p.step[d] != 1)
            return -1;
        if (p.start[d] == 0 && p.size[d] == x->d[d])
            continue;
        if (axis >= 0)
            return -1;
        axis = d;
    }
    if (axis >= 0)
        *start = p.start[axis], *size = p.size[axis];
    return axis;
}

typedef struct {
    Node *node;
    int64_t start, size;
} Part;

static int by_start(const void *a, const void *b)
{
    int64_t x = ((const Part *)a)->start, y = ((const Part *)b)->start;
    return (x > y) - (x < y);
}

/* The live Slices of the input of Slice node first (in order from it) when
 * they part it along one axis, sorted by start, into parts; their count,
 * or 0. */
static uint32_t parting(Graph *g, uint32_t from, Part *parts, uint32_t max, int *axis)
{
    Node *first = &g->nodes[g->order[from]];
    uint32_t x = first->in[0], count = 0;
    int64_t s, z;
    *axis = slice_axis(g, first, &s, &z);
    if (*axis < 0 || g->values[x].nuses < 2)
        return 0;
    for (uint32_t i = from; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        if (n->dead || n->op != OP_SLICE || n->in[0] != x)
            continue;
        if (count == max || slice_axis(g, n, &s, &z) != *axis)
            return 0;
        parts[count++] = (Part){n, s, z};
    }
    qsort(parts, count, sizeof *parts, by_start);
    int64_t at = 0;
    for (uint32_t k = 0; k < count; k++) {
        if (parts[k].start != at || parts[k].size == 0)
            return 0;
        at += parts[k].size;
    }
    return count >= 2 && at == g->values[x].shape.d[*axis] ? count : 0;
}

/* Slice node `first` becomes the Split into every part's output; the
 * other Slices go. */
static void make_split(Graph *g, Node *first, const Part *parts, uint32_t count, int axis)
{
    uint32_t id = (uint32_t)(first - g->nodes);
    int64_t *sizes = arena_array(g->arena, count, sizeof *sizes);
    uint32_t *outs = arena_array(g->arena, count, sizeof *outs);
    for (uint32_t k = 0; k < count; k++) {
        sizes[k] = parts[k].size;
        outs[k] = parts[k].node->out[0];
        g->values[outs[k]].producer = id;
        if (parts[k].node != first)
            parts[k].node->dead = true;
    }
    first->op = OP_SPLIT;
    first->op_type = op_info[OP_SPLIT].name;
    first->nin = 1;
    first->out = outs;
    first->nout = count;
    first->nattrs = 0;
    ir_set_int(g, first, "axis", axis);
    ir_set_ints(g, first, "split", sizes, count);
}

static bool split_slices(Graph *g)
{
    enum { MAX_PARTS = 64 };
    Part parts[MAX_PARTS];
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        int axis;
        uint32_t count = n->dead || n->op != OP_SLICE ? 0 : parting(g, i, parts, MAX_PARTS, &axis);
        if (count) {
            make_split(g, n, parts, count, axis);
            any = true;
        }
    }
    return any;
}

/* ---- a constant added before a softmax ---- */

/* Whether constant c, its leading 1s aside, has the last dims of x: a
 * bias that x's rows (over its last dim) take in turn. */
static bool bias_rows_of(const Shape *c, const Shape *x)
{
    int lead = 0;
    while (lead < c->rank && c->d[lead] == 1)
        lead++;
    int m = c->rank - lead;
    if (m < 1 || m > x->rank)
        return false;
    for (int i = 0; i < m; i++)
        if (c->d[lead + i] != x->d[x->rank - m + i])
            return false;
    return true;
}

/* Softmax node n over the last axis of Add(x, c) (either order), c a
 * float32 constant of x's last dims: the Add, or NULL; its x and c. */
static Node *biased_softmax(Graph *g, const Node *n, uint32_t *x, uint32_t *c)
{
    if (n->op != OP_SOFTMAX)
        return NULL;
    Node *add = sole(g, n->in[0], OP_ADD);
    int rank = g->values[n->in[0]].shape.rank;
    if (!add || rank < 1 || softmax_axis(g, n) != rank - 1)
        return NULL;
    for (int k = 0; k < 2; k++) {
        const Value *cv = &g->values[add->in[k]], *xv = &g->values[add->in[1 - k]];
        if (cv->kind == VK_CONST && cv->data && cv->dtype == DT_F32 && xv->dtype == DT_F32 &&
            shape_eq(&xv->shape, &g->values[add->out[0]].shape) &&
            bias_rows_of(&cv->shape, &xv->shape)) {
            *x = add->in[1 - k], *c = add->in[k];
            return add;
        }
    }
    return NULL;
}

/* The share of constant c's elements that are -inf: of the scores a
 * SoftmaxBias masks (its rows take c's in turn), which its kernels do not
 * read, nor its gradient's (runtime/cpu_math.c; a causal mask's: half). */
static double masked_share(const Value *c)
{
    int64_t n = shape_numel(&c->data->shape), masked = 0;
    for (int64_t i = 0; i < n; i++)
        masked += tensor_f64(c->data, i) == -INFINITY;
    return n ? (double)masked / (double)n : 0;
}

static bool softmax_biases(Graph *g)
{
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        uint32_t x, c;
        Node *add = n->dead ? NULL : biased_softmax(g, n, &x, &c);
        if (!add)
            continue;
        int axis = g->values[x].shape.rank - 1;
        add->dead = any = true;
        n->op = OP_SOFTMAX_BIAS;
        n->op_type = op_info[OP_SOFTMAX_BIAS].name;
        n->in = arena_array(g->arena, 2, sizeof *n->in);
        n->in[0] = x, n->in[1] = c;
        n->nin = 2;
        n->nattrs = 0;
        ir_set_int(g, n, "axis", axis);
        double masked = masked_share(&g->values[c]);
        if (masked > 0)
            ir_set_float(g, n, "mpcc_masked", masked);
    }
    return any;
}

/* ---- a batch norm's ReLU ---- */

const char *bn_relu(const Node *n)
{
    return attr_str(n, "mpcc_relu", NULL);
}

/* Relu node r after a BatchNormalization whose first output it alone
 * reads: the batch norm writes r's output, and r goes. */
static bool bn_relus(Graph *g)
{
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *r = &g->nodes[g->order[i]];
        Node *bn = r->dead || r->op != OP_RELU ? NULL : sole(g, r->in[0], OP_BATCH_NORM);
        if (!bn || bn_relu(bn) || bn->out[0] != r->in[0])
            continue;
        g->values[bn->out[0]].producer = NONE;   /* y: no node writes it now */
        bn->out[0] = r->out[0];
        g->values[r->out[0]].producer = (uint32_t)(bn - g->nodes);
        ir_set_str(g, bn, "mpcc_relu", r->name);
        r->dead = any = true;
    }
    return any;
}

/* The name of the residual Add a batch norm took in (bn_adds), or NULL. */
const char *bn_add(const Node *n)
{
    return attr_str(n, "mpcc_add", NULL);
}

/* Input k of Add a, if it is the output of a BatchNormalization that it
 * alone reads, that has no ReLU of its own yet, and that has the shape of
 * the Add's other input and output (no broadcast): the batch norm. */
static Node *residual_bn(Graph *g, Node *a, int k)
{
    Node *bn = sole(g, a->in[k], OP_BATCH_NORM);
    if (!bn || bn_relu(bn) || bn->nin != 5 || bn->out[0] != a->in[k] ||
        a->in[1 - k] == a->in[k] || g->values[a->in[1 - k]].dtype != DT_F32 ||
        !shape_eq(&g->values[a->in[1 - k]].shape, &g->values[a->out[0]].shape) ||
        !shape_eq(&g->values[a->in[k]].shape, &g->values[a->out[0]].shape))
        return NULL;
    return bn;
}

/* The place of node id in g->order, searching back from position i. */
static uint32_t order_at(const Graph *g, uint32_t id, uint32_t i)
{
    while (g->order[i] != id)
        i--;
    return i;
}

/* Relu node r after an Add of a batch norm's output and another value s
 * (a ResNet block's end: the residual, and its ReLU): the batch norm
 * reads s as a sixth input, adds it and writes r's output; the Add and r
 * go. The batch norm takes the Add's place in the order, after s. */
static bool bn_adds(Graph *g)
{
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *r = &g->nodes[g->order[i]];
        Node *a = r->dead || r->op != OP_RELU ? NULL : sole(g, r->in[0], OP_ADD);
        Node *bn = NULL;
        int k = 0;
        for (; a && k < 2 && !bn; k += !bn)
            bn = residual_bn(g, a, k);
        if (!bn)
            continue;
        uint32_t at = order_at(g, (uint32_t)(a - g->nodes), i);
        uint32_t from = order_at(g, (uint32_t)(bn - g->nodes), at);
        g->order[from] = g->order[at], g->order[at] = (uint32_t)(bn - g->nodes);
        g->values[bn->out[0]].producer = NONE;   /* y and the sum: no node writes them */
        g->values[a->out[0]].producer = NONE;
        bn->in = arena_grow(g->arena, bn->in, bn->nin, 6, sizeof *bn->in);
        bn->in[5] = a->in[1 - k];
        bn->nin = 6;
        bn->out[0] = r->out[0];
        g->values[r->out[0]].producer = (uint32_t)(bn - g->nodes);
        ir_set_str(g, bn, "mpcc_relu", r->name);
        ir_set_str(g, bn, "mpcc_add", a->name);
        a->dead = r->dead = any = true;
    }
    return any;
}

/* ---- a scaling before the Transpose ---- */

/* Whether v is a constant of one element that broadcasts into rank dims. */
static bool scalar_const(const Graph *g, uint32_t v, int rank)
{
    const Value *c = &g->values[v];
    return c->kind == VK_CONST && c->data && shape_numel(&c->shape) == 1 &&
           c->shape.rank <= rank;
}

/* Mul or Div node n scales the output of a Transpose that nothing else
 * reads by a constant (x / c, or x * c either side): the Transpose, and
 * in *k which input of n it is; or NULL. */
static Node *scaled_transpose(Graph *g, const Node *n, int *k)
{
    if (n->op != OP_MUL && n->op != OP_DIV)
        return NULL;
    for (*k = 0; *k < (n->op == OP_DIV ? 1 : 2); (*k)++) {
        Node *t = sole(g, n->in[*k], OP_TRANSPOSE);
        const Value *z = t ? &g->values[n->in[*k]] : NULL;
        if (t && scalar_const(g, n->in[1 - *k], z->shape.rank) &&
            z->dtype == g->values[n->out[0]].dtype &&
            shape_eq(&z->shape, &g->values[n->out[0]].shape))
            return t;
    }
    return NULL;
}

/* Order position of node id, from `from` on. */
static uint32_t position(const Graph *g, uint32_t id, uint32_t from)
{
    while (g->order[from] != id)
        from++;
    return from;
}

/* s = Transpose(x) * c becomes Transpose(x * c): the scaling on x in
 * place of the Transpose's output value (now shaped as x), the Transpose
 * after it into s; their places in the order swapped. The same values.
 * Attention's queries are scaled after they move into the batch's layout:
 * so moved, the Transpose reads into the product's operand and goes
 * (graph/views.c), its gradient with it. */
static bool scale_before_transposes(Graph *g)
{
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        int k;
        Node *t = n->dead ? NULL : scaled_transpose(g, n, &k);
        if (!t)
            continue;
        uint32_t x = t->in[0], z = n->in[k], s = n->out[0];
        uint32_t ti = position(g, (uint32_t)(t - g->nodes), 0);
        g->values[z].shape = g->values[x].shape;
        n->in[k] = x, n->out[0] = z;
        t->in[0] = z, t->out[0] = s;
        g->values[z].producer = g->order[i];
        g->values[s].producer = g->order[ti];
        g->order[ti] = g->order[i];
        g->order[i] = (uint32_t)(t - g->nodes);
        any = true;
    }
    return any;
}

/* Node n becomes Gelu(x); the nodes of the pattern go. */
static void make_gelu(Node *n, uint32_t x, const Gelu *m)
{
    for (int i = 0; i < m->ngone; i++)
        m->gone[i]->dead = true;
    n->op = OP_GELU;
    n->op_type = op_info[OP_GELU].name;
    n->in[0] = x;
    n->nin = 1;
    n->nattrs = 0;
}

void simplify(Graph *g)
{
    uint32_t *to = arena_array(g->arena, g->nvalues, sizeof(uint32_t));
    for (uint32_t v = 0; v < g->nvalues; v++)
        to[v] = v;
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        if (n->dead)
            continue;
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                n->in[k] = to[n->in[k]];
        uint32_t x = identity_of(g, n);
        if (x != NONE) {
            to[n->out[0]] = x;
            n->dead = any = true;
        }
    }
    if (any)
        prune(g);   /* the uses counted anew: the pattern below reads them */
    any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        Gelu m = {0};
        uint32_t x = n->dead ? NONE : gelu_of(g, n, &m);
        if (x != NONE) {
            make_gelu(n, x, &m);
            any = true;
        }
    }
    any |= split_slices(g);
    any |= softmax_biases(g);
    any |= scale_before_transposes(g);
    any |= bn_relus(g);
    any |= bn_adds(g);
    if (any)
        prune(g);
}
