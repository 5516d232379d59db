/* composite.c — ops that ONNX defines as compositions of other ops, as
 * the ops that train already (as einsum.c and rnn.c):
 *
 *   ReduceL1         ReduceSum(Abs(x))
 *   ReduceL2         Sqrt(ReduceSum(x * x))
 *   ReduceSumSquare  ReduceSum(x * x)
 *   ReduceLogSum     Log(ReduceSum(x))
 *   ReduceLogSumExp  Log(ReduceSum(Exp(x - m))) + m, m = ReduceMax(x)
 *   DepthToSpace     Reshape, Transpose, Reshape (modes DCR and CRD)
 *   SpaceToDepth     Reshape, Transpose, Reshape
 *   CastLike         Cast(x, to = the element type of its second input)
 *   GlobalMaxPool    ReduceMax over every spatial dim, kept (1-D to N-D)
 *
 * Shape inference calls this when it meets one of them, its input typed;
 * the new nodes are inferred next and their gradients are those of the
 * ops they are. The reductions read their axes, keepdims and
 * noop_with_empty_axes through reduce_axes (params.c), as ReduceSum does,
 * and reduce nothing when those say so: the elementwise part alone.
 *
 * ReduceLogSumExp subtracts the maximum first so that Exp cannot
 * overflow. Its gradient needs nothing special: m's two paths (through
 * the Sub and the Add) carry dy (1 - sum softmax), zero but for rounding,
 * which leaves softmax(x) dy, the gradient of log-sum-exp.
 *
 * Integer data is an error at the node: the lowered ops (Abs, Sqrt, Log,
 * Exp) compute in floating point.
 */
#include "mpcc.h"

#include <string.h>

typedef struct Lower {
    Graph *g;
    uint32_t node;
    const char *name;      /* the node's name: the new nodes' prefix */
    uint32_t step;         /* new nodes and constants so far (their names) */
    /* a reduction's: */
    int64_t axes[MAX_RANK];   /* the dims it reduces, naxes of them */
    int naxes;
    bool keep;                /* keepdims */
    Shape out_shape;          /* its output's */
} Lower;

/* ---- emitting nodes and constants ---- */

static uint32_t ints(Lower *l, const int64_t *v, int n)
{
    return ir_lowered_const(l->g, l->name, &l->step, DT_I64, v, n, &(Shape){1, {n}});
}

/* One new node writing a new value, or `out` when it is not NONE. */
static Node *add(Lower *l, Op op, const uint32_t *in, uint32_t nin, uint32_t out,
                 uint32_t *result)
{
    return ir_emit_lowered(l->g, l->node, l->name, &l->step, op, in, nin, out, result);
}

static uint32_t op1(Lower *l, Op op, uint32_t x, uint32_t out)
{
    uint32_t y;
    add(l, op, &x, 1, out, &y);
    return y;
}

static uint32_t op2(Lower *l, Op op, uint32_t a, uint32_t b, uint32_t out)
{
    uint32_t y;
    add(l, op, (uint32_t[]){a, b}, 2, out, &y);
    return y;
}

static uint32_t reshape(Lower *l, uint32_t x, const int64_t *dims, int n, uint32_t out)
{
    uint32_t y;
    add(l, OP_RESHAPE, (uint32_t[]){x, ints(l, dims, n)}, 2, out, &y);
    return y;
}

static uint32_t transpose(Lower *l, uint32_t x, const int64_t *perm, int n)
{
    uint32_t y;
    ir_set_ints(l->g, add(l, OP_TRANSPOSE, &x, 1, NONE, &y), "perm", perm, (uint32_t)n);
    return y;
}

/* ReduceSum or ReduceMax of x over the node's axes; their axes are an
 * input since opset 13 (ReduceSum) and 18 (ReduceMax), an attribute
 * before, so that the graph stays valid at the model's opset. Nothing to
 * reduce is an Identity. */
static uint32_t reduce(Lower *l, Op op, uint32_t x, bool keep, uint32_t out)
{
    if (l->naxes == 0)
        return op1(l, OP_IDENTITY, x, out);
    uint32_t y;
    Node *n;
    if (l->g->opset >= (op == OP_REDUCE_SUM ? 13 : 18)) {
        n = add(l, op, (uint32_t[]){x, ints(l, l->axes, l->naxes)}, 2, out, &y);
    } else {
        n = add(l, op, &x, 1, out, &y);
        ir_set_ints(l->g, n, "axes", l->axes, (uint32_t)l->naxes);
    }
    ir_set_int(l->g, n, "keepdims", keep);
    return y;
}

/* ---- the reductions ---- */

/* The dims the node reduces, its keepdims and its output's shape. */
static void read_reduction(Lower *l, Node *n, const Value *x)
{
    bool reduced[MAX_RANK];
    reduce_axes(l->g, n, reduced);
    l->keep = attr_int(n, "keepdims", 1) != 0;
    l->naxes = 0;
    l->out_shape = (Shape){0};
    for (int i = 0; i < x->shape.rank; i++) {
        if (reduced[i])
            l->axes[l->naxes++] = i;
        if (!reduced[i] || l->keep)
            l->out_shape.d[l->out_shape.rank++] = reduced[i] ? 1 : x->shape.d[i];
    }
}

/* log(sum(exp(x - m))) + m, with m the maximum over the reduced dims
 * (kept, to broadcast against x); reshaped last when keepdims is 0. */
static void log_sum_exp(Lower *l, uint32_t x, uint32_t out)
{
    if (l->naxes == 0) {   /* over no dims, log(exp(x)) */
        op1(l, OP_IDENTITY, x, out);
        return;
    }
    uint32_t m = reduce(l, OP_REDUCE_MAX, x, true, NONE);
    uint32_t e = op1(l, OP_EXP, op2(l, OP_SUB, x, m, NONE), NONE);
    uint32_t s = reduce(l, OP_REDUCE_SUM, e, true, NONE);
    uint32_t y = op2(l, OP_ADD, op1(l, OP_LOG, s, NONE), m, l->keep ? out : NONE);
    if (!l->keep)
        reshape(l, y, l->out_shape.d, l->out_shape.rank, out);
}

static void lower_reduction(Lower *l, Node *n)
{
    Graph *g = l->g;
    const Value *x = node_in(g, n, 0);
    if (!dtype_is_float(x->dtype))
        error_at(&n->loc, "%s of %s data is not supported: mpcc computes it with ops that "
                 "work in floating point (Cast the data to float first)", n->op_type,
                 dtype_name(x->dtype));
    read_reduction(l, n, x);
    uint32_t v = n->in[0], y = n->out[0];
    switch (n->op) {
    case OP_REDUCE_L1:
        reduce(l, OP_REDUCE_SUM, op1(l, OP_ABS, v, NONE), l->keep, y);
        break;
    case OP_REDUCE_L2:
        op1(l, OP_SQRT, reduce(l, OP_REDUCE_SUM, op2(l, OP_MUL, v, v, NONE), l->keep, NONE), y);
        break;
    case OP_REDUCE_SUM_SQ:
        reduce(l, OP_REDUCE_SUM, op2(l, OP_MUL, v, v, NONE), l->keep, y);
        break;
    case OP_REDUCE_LOG_SUM:
        op1(l, OP_LOG, reduce(l, OP_REDUCE_SUM, v, l->keep, NONE), y);
        break;
    case OP_REDUCE_LOG_SUM_EXP:
        log_sum_exp(l, v, y);
        break;
    default:
        unreachable();
    }
}

/* ---- DepthToSpace and SpaceToDepth ---- */

/* The three steps: a reshape to dims, a transpose by perm, a reshape to
 * the output's dims `to`. */
typedef struct Blocks {
    int64_t dims[6], perm[6], to[4];
} Blocks;

static int64_t blocksize(const Node *n)
{
    if (!ir_attr(n, "blocksize"))
        error_at(&n->loc, "the blocksize attribute is missing");
    int64_t b = attr_int(n, "blocksize", 0);
    if (b < 1)
        error_at(&n->loc, "blocksize %lld is not positive", (long long)b);
    return b;
}

/* a * b for a dimension of the result; a huge blocksize could overflow. */
static int64_t times(const Node *n, int64_t a, int64_t b)
{
    int64_t r;
    if (mul_overflows(a, b, &r))
        error_at(&n->loc, "the blocksize makes an output dimension past 2^63");
    return r;
}

/* x [N, C, H, W] and blocksize b, as the ONNX specification writes it:
 * DCR reshapes to [N, b, b, C/b², H, W] and transposes (0, 3, 4, 1, 5, 2),
 * CRD reshapes to [N, C/b², b, b, H, W] and transposes (0, 1, 4, 2, 5, 3),
 * both into [N, C/b², H b, W b]. */
static Blocks depth_to_space(Graph *g, const Node *n, const int64_t *x, int64_t b)
{
    static const int64_t dcr[6] = {0, 3, 4, 1, 5, 2}, crd[6] = {0, 1, 4, 2, 5, 3};
    const char *mode = attr_str(n, "mode", "DCR");
    bool is_crd = strcmp(mode, "CRD") == 0;
    if (!is_crd && strcmp(mode, "DCR") != 0)
        error_at(&n->loc, "mode '%s' is neither DCR nor CRD", str_escaped(g->arena, mode, 40));
    int64_t N = x[0], C = x[1], H = x[2], W = x[3], bb = times(n, b, b);
    if (C % bb)
        error_at(&n->loc, "%lld channels do not divide into blocks of %lld x %lld",
                 (long long)C, (long long)b, (long long)b);
    int64_t c = C / bb;
    Blocks k = {.to = {N, c, times(n, H, b), times(n, W, b)}};
    memcpy(k.dims, is_crd ? (int64_t[6]){N, c, b, b, H, W} : (int64_t[6]){N, b, b, c, H, W},
           sizeof k.dims);
    memcpy(k.perm, is_crd ? crd : dcr, sizeof k.perm);
    return k;
}

/* SpaceToDepth, the inverse of DCR: [N, C, H/b, b, W/b, b], transposed
 * (0, 3, 5, 1, 2, 4), into [N, C b², H/b, W/b]. */
static Blocks space_to_depth(Graph *g, const Node *n, const Value *v, int64_t b)
{
    const int64_t *x = v->shape.d;
    int64_t N = x[0], C = x[1], H = x[2], W = x[3];
    if (H % b || W % b)
        error_at(&n->loc, "the input is %s; its height and width must be multiples of the "
                 "blocksize %lld", value_type(g, v), (long long)b);
    return (Blocks){.dims = {N, C, H / b, b, W / b, b}, .perm = {0, 3, 5, 1, 2, 4},
                    .to = {N, times(n, C, times(n, b, b)), H / b, W / b}};
}

static void lower_depth_space(Lower *l, Node *n)
{
    Graph *g = l->g;
    const Value *x = node_in(g, n, 0);
    if (x->shape.rank != 4)
        error_at(&n->loc, "the input is %s; %s takes 4-D [N, C, H, W] data", value_type(g, x),
                 n->op_type);
    int64_t b = blocksize(n);
    Blocks k = n->op == OP_DEPTH_TO_SPACE ? depth_to_space(g, n, x->shape.d, b)
                                          : space_to_depth(g, n, x, b);
    uint32_t v = transpose(l, reshape(l, n->in[0], k.dims, 6, NONE), k.perm, 6);
    reshape(l, v, k.to, 4, n->out[0]);
}

static void lower_cast_like(Lower *l, Node *n)
{
    uint32_t y;
    Node *cast = add(l, OP_CAST, &n->in[0], 1, n->out[0], &y);
    ir_set_int(l->g, cast, "to", l->g->values[n->in[1]].dtype);
}

/* ---- GlobalMaxPool ---- */

static void lower_global_max_pool(Lower *l, Node *n)
{
    const Value *x = node_in(l->g, n, 0);
    if (x->shape.rank < 3)
        error_at(&n->loc, "global pooling needs (N,C,spatial..), got %s", value_type(l->g, x));
    l->naxes = 0;
    for (int i = 2; i < x->shape.rank; i++)
        l->axes[l->naxes++] = i;
    reduce(l, OP_REDUCE_MAX, n->in[0], true, n->out[0]);
}

bool is_composite(Op op)
{
    switch (op) {
    case OP_REDUCE_L1: case OP_REDUCE_L2: case OP_REDUCE_SUM_SQ: case OP_REDUCE_LOG_SUM:
    case OP_REDUCE_LOG_SUM_EXP: case OP_DEPTH_TO_SPACE: case OP_SPACE_TO_DEPTH:
    case OP_CAST_LIKE: case OP_GLOBAL_MAX_POOL:
        return true;
    default:
        return false;
    }
}

/* Replaces the op at order[pos] by its composition: the new nodes take
 * its place in the order, the last one writes its output. */
void lower_composite(Graph *g, uint32_t pos)
{
    uint32_t id = g->order[pos], before = g->norder;
    Node copy = g->nodes[id];   /* emitting may move the node array */
    Lower l = {.g = g, .node = id, .name = copy.name[0] ? copy.name : copy.op_type};
    if (copy.op == OP_DEPTH_TO_SPACE || copy.op == OP_SPACE_TO_DEPTH)
        lower_depth_space(&l, &copy);
    else if (copy.op == OP_CAST_LIKE)
        lower_cast_like(&l, &copy);
    else if (copy.op == OP_GLOBAL_MAX_POOL)
        lower_global_max_pool(&l, &copy);
    else
        lower_reduction(&l, &copy);
    g->nodes[id].dead = true;
    ir_splice_order(g, pos, before);
}
