/* rnn.c — LSTM, GRU and RNN as the ops that train already, unrolled over
 * the sequence: per direction, the input projection X W^T (+ biases) as
 * one MatMul over every step, then per step the recurrent MatMul H R^T,
 * the gates (Slice, Sigmoid, Tanh, Mul, Add: fuse.c runs them as a chain)
 * and, with sequence_lens, a Where that holds the state of a sequence that
 * has ended and writes zeros to its Y. Y, Y_h and Y_c are Concats of the
 * steps and the directions, transposed for layout=1. Shape inference
 * calls this when it meets one of them (as einsum.c), with every input's
 * shape known; the new nodes are inferred next, and the gradient through
 * time is the one autodiff.c builds from those ops.
 *
 * As ONNX defines them (opset 7 to 22): directions forward, reverse and
 * bidirectional; initial_h, initial_c and the peepholes P; clip;
 * LSTM's input_forget; GRU's linear_before_reset; the activations
 * Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Elu and Softplus with
 * their alpha and beta. Others are reported at the node.
 */
#include "mpcc.h"

#include <string.h>
#include <strings.h>

enum { MAX_ACTS = 6 };   /* three per direction */

typedef struct Rnn {
    Graph *g;
    uint32_t node;
    const char *name;      /* the node's name: the new nodes' prefix */
    uint32_t step;         /* new nodes and constants so far (their names) */
    Op op;                 /* OP_LSTM, OP_GRU or OP_RNN */
    int64_t T, B, I, H;
    int nd, gates;         /* directions; gates per step (4, 3, 1) */
    bool layout1, lbr, input_forget;
    double clip;           /* 0: none */
    Op act[MAX_ACTS];
    double alpha[MAX_ACTS], beta[MAX_ACTS];
    bool alpha_given[MAX_ACTS], beta_given[MAX_ACTS];
    uint32_t x, w, r, b, seq, h0, c0, p;   /* inputs; NONE where absent */
} Rnn;

static _Noreturn void unsupported(const Rnn *R, const char *why)
{
    error_at(&R->g->nodes[R->node].loc, "%s", why);
}

/* ---- emitting nodes and constants ---- */

static uint32_t constant(Rnn *R, DType t, const void *v, int n, const Shape *shape)
{
    return ir_lowered_const(R->g, R->name, &R->step, t, v, n, shape);
}

static uint32_t ints(Rnn *R, const int64_t *v, int n)
{
    return constant(R, DT_I64, v, n, &(Shape){1, {n}});
}

/* One new node writing a new value, or `out` when it is not NONE. */
static Node *add(Rnn *R, Op op, const uint32_t *in, uint32_t nin, uint32_t out, uint32_t *result)
{
    return ir_emit_lowered(R->g, R->node, R->name, &R->step, op, in, nin, out, result);
}

static uint32_t op2(Rnn *R, Op op, uint32_t a, uint32_t b)
{
    uint32_t y;
    add(R, op, (uint32_t[]){a, b}, 2, NONE, &y);
    return y;
}

static uint32_t reshape(Rnn *R, uint32_t v, const int64_t *dims, int n, uint32_t out)
{
    uint32_t y;
    add(R, OP_RESHAPE, (uint32_t[]){v, ints(R, dims, n)}, 2, out, &y);
    return y;
}

static uint32_t transpose(Rnn *R, uint32_t v, const int64_t *perm, int n, uint32_t out)
{
    uint32_t y;
    ir_set_ints(R->g, add(R, OP_TRANSPOSE, &v, 1, out, &y), "perm", perm, (uint32_t)n);
    return y;
}

/* v[.., start:end, ..] along axis: inputs since opset 10, attributes before. */
static uint32_t slice(Rnn *R, uint32_t v, int64_t axis, int64_t start, int64_t end)
{
    uint32_t y;
    if (R->g->opset >= 10) {
        add(R, OP_SLICE, (uint32_t[]){v, ints(R, &start, 1), ints(R, &end, 1), ints(R, &axis, 1)},
            4, NONE, &y);
        return y;
    }
    Node *n = add(R, OP_SLICE, &v, 1, NONE, &y);
    ir_set_ints(R->g, n, "starts", &start, 1);
    ir_set_ints(R->g, n, "ends", &end, 1);
    ir_set_ints(R->g, n, "axes", &axis, 1);
    return y;
}

static uint32_t concat(Rnn *R, const uint32_t *v, int n, int64_t axis, uint32_t out)
{
    uint32_t y;
    if (n == 1 && out == NONE)
        return v[0];
    ir_set_int(R->g, add(R, OP_CONCAT, v, (uint32_t)n, out, &y), "axis", axis);
    return y;
}

static uint32_t clip(Rnn *R, uint32_t v)
{
    if (R->clip <= 0)
        return v;
    uint32_t y;
    if (R->g->opset < 11) {
        Node *n = add(R, OP_CLIP, &v, 1, NONE, &y);
        ir_set_float(R->g, n, "min", -R->clip);
        ir_set_float(R->g, n, "max", R->clip);
        return y;
    }
    float lo = (float)-R->clip, hi = (float)R->clip;
    add(R, OP_CLIP, (uint32_t[]){v, constant(R, DT_F32, &lo, 1, &(Shape){0}),
                                 constant(R, DT_F32, &hi, 1, &(Shape){0})}, 3, NONE, &y);
    return y;
}

/* Activation k of the node (f, g, h per direction); a gate's input is
 * clipped first (clip bounds the gates, not LSTM's cell before h). */
static uint32_t activate(Rnn *R, int k, uint32_t v, bool gate_input)
{
    uint32_t y;
    Node *n = add(R, R->act[k], (uint32_t[]){gate_input ? clip(R, v) : v}, 1, NONE, &y);
    if (R->alpha_given[k])
        ir_set_float(R->g, n, "alpha", R->alpha[k]);
    if (R->beta_given[k])
        ir_set_float(R->g, n, "beta", R->beta[k]);
    return y;
}

/* ---- the node's inputs and attributes ---- */

static Op activation_op(Rnn *R, const char *s)
{
    static const struct { const char *name; Op op; } known[] = {
        {"Sigmoid", OP_SIGMOID}, {"Tanh", OP_TANH}, {"Relu", OP_RELU},
        {"HardSigmoid", OP_HARD_SIGMOID}, {"LeakyRelu", OP_LEAKY_RELU}, {"Elu", OP_ELU},
        {"Softplus", OP_SOFTPLUS},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcasecmp(s, known[i].name) == 0)
            return known[i].op;
    unsupported(R, arena_printf(R->g->arena, "activation '%s' is not supported (mpcc has "
                                "Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Elu and Softplus)",
                                str_escaped(R->g->arena, s, 40)));
}

static void activations(Rnn *R, const Node *n)
{
    static const Op defaults[][3] = {{OP_SIGMOID, OP_TANH, OP_TANH},   /* LSTM: f, g, h */
                                     {OP_SIGMOID, OP_TANH, OP_TANH},   /* GRU: f, g */
                                     {OP_TANH, OP_TANH, OP_TANH}};     /* RNN: f */
    int kind = R->op == OP_LSTM ? 0 : R->op == OP_GRU ? 1 : 2;
    int per = R->op == OP_LSTM ? 3 : R->op == OP_GRU ? 2 : 1;
    const Attr *a = ir_attr(n, "activations");
    if (a && a->n != (uint32_t)(per * R->nd))
        unsupported(R, arena_printf(R->g->arena, "%u activations given, %d expected (%d per "
                                    "direction)", a->n, per * R->nd, per));
    for (int k = 0; k < per * R->nd; k++)
        R->act[k] = a ? activation_op(R, a->strs[k]) : defaults[kind][k % per];
    uint32_t na = 0, nb = 0;
    const Attr *al = ir_attr(n, "activation_alpha"), *be = ir_attr(n, "activation_beta");
    na = al ? al->n : 0, nb = be ? be->n : 0;
    for (int k = 0; k < per * R->nd; k++) {
        if ((R->alpha_given[k] = (uint32_t)k < na))
            R->alpha[k] = al->floats[k];
        if ((R->beta_given[k] = (uint32_t)k < nb))
            R->beta[k] = be->floats[k];
    }
}

static uint32_t input(const Node *n, uint32_t k)
{
    return k < n->nin ? n->in[k] : NONE;
}

static void read_node(Rnn *R, const Node *n)
{
    Graph *g = R->g;
    R->op = n->op;
    R->gates = n->op == OP_LSTM ? 4 : n->op == OP_GRU ? 3 : 1;
    R->x = input(n, 0), R->w = input(n, 1), R->r = input(n, 2), R->b = input(n, 3);
    R->seq = input(n, 4), R->h0 = input(n, 5);
    R->c0 = n->op == OP_LSTM ? input(n, 6) : NONE;
    R->p = n->op == OP_LSTM ? input(n, 7) : NONE;
    const char *dir = attr_str(n, "direction", "forward");
    if (strcmp(dir, "bidirectional") == 0)
        R->nd = 2;
    else if (strcmp(dir, "forward") == 0 || strcmp(dir, "reverse") == 0)
        R->nd = 1;
    else
        unsupported(R, "direction must be forward, reverse or bidirectional");
    R->layout1 = attr_int(n, "layout", 0) != 0;
    R->lbr = attr_int(n, "linear_before_reset", 0) != 0;
    R->input_forget = attr_int(n, "input_forget", 0) != 0;
    R->clip = ir_attr(n, "clip") ? attr_float(n, "clip", 0) : 0;
    if (ir_attr(n, "clip") && !(R->clip > 0))
        unsupported(R, "clip must be a positive number");
    const Value *x = &g->values[R->x], *w = &g->values[R->w];
    if (x->dtype != DT_F32)
        unsupported(R, "mpcc trains float32 recurrent layers; X is not float32");
    if (x->shape.rank != 3 || w->shape.rank != 3)
        unsupported(R, "X and W must be 3-D");
    R->T = x->shape.d[R->layout1 ? 1 : 0];
    R->B = x->shape.d[R->layout1 ? 0 : 1];
    R->I = x->shape.d[2];
    R->H = attr_int(n, "hidden_size", w->shape.d[1] / R->gates);
    if (R->H < 1 || w->shape.d[0] != R->nd || w->shape.d[1] != R->gates * R->H ||
        w->shape.d[2] != R->I)
        unsupported(R, arena_printf(g->arena, "W is %s; with hidden_size %lld it must be "
                                    "[%d, %lld, %lld]", shape_str(g->arena, &w->shape),
                                    (long long)R->H, R->nd, (long long)(R->gates * R->H),
                                    (long long)R->I));
    if (R->T < 1 || R->B < 1)
        unsupported(R, "the sequence and the batch must not be empty");
    activations(R, n);
}

/* ---- one direction ---- */

/* Direction d's part of a parameter [nd, rows, cols] (or [nd, rows]) as
 * a matrix [rows, cols] (or vector), transposed when asked. */
static uint32_t per_direction(Rnn *R, uint32_t v, int d, int64_t rows, int64_t cols, bool t)
{
    if (R->nd > 1)
        v = slice(R, v, 0, d, d + 1);
    int64_t dims[2] = {rows, cols};
    v = reshape(R, v, dims, cols ? 2 : 1, NONE);
    return t ? transpose(R, v, (int64_t[]){1, 0}, 2, NONE) : v;
}

/* initial_h or initial_c of direction d as [B, H]; zeros when absent. */
static uint32_t initial(Rnn *R, uint32_t v, int d)
{
    if (v == NONE) {
        int64_t n = R->B * R->H;
        float *zeros = arena_array(R->g->arena, (size_t)n, sizeof *zeros);
        return constant(R, DT_F32, zeros, (int)n, &(Shape){2, {R->B, R->H}});
    }
    if (R->nd > 1)
        v = slice(R, v, R->layout1 ? 1 : 0, d, d + 1);
    return reshape(R, v, (int64_t[]){R->B, R->H}, 2, NONE);
}

/* The state of one direction as the steps go. */
typedef struct Dir {
    int d;
    uint32_t xw;           /* [T, B, gates*H]: X W^T + the biases added once */
    uint32_t rt;           /* [H, gates*H]: R^T */
    uint32_t rb;           /* GRU: [gates*H] R's bias, added per step; NONE otherwise */
    uint32_t rt_h;         /* GRU without linear_before_reset: R_h^T [H, H] */
    uint32_t p[3];         /* LSTM peepholes i, o, f as [H], NONE without P */
    uint32_t h, c;         /* the state [B, H] */
    uint32_t lens;         /* sequence_lens as [B, 1] int64, NONE without */
    uint32_t zeros;        /* [B, H] for Y past a row's length, NONE without lens */
} Dir;

static void biases(Rnn *R, Dir *D)
{
    int64_t gh = R->gates * R->H;
    D->rb = NONE;
    if (R->b == NONE)
        return;
    uint32_t b = per_direction(R, R->b, D->d, 2 * gh, 0, false);
    uint32_t wb = slice(R, b, 0, 0, gh), rb = slice(R, b, 0, gh, 2 * gh);
    if (R->op == OP_GRU) {   /* R's bias of h sits inside r (.) (...) with linear_before_reset */
        D->xw = op2(R, OP_ADD, D->xw, wb);
        D->rb = rb;
    } else {
        D->xw = op2(R, OP_ADD, D->xw, op2(R, OP_ADD, wb, rb));
    }
}

static void direction_start(Rnn *R, Dir *D, uint32_t x)
{
    int64_t gh = R->gates * R->H;
    D->xw = op2(R, OP_MATMUL, x, per_direction(R, R->w, D->d, gh, R->I, true));
    biases(R, D);
    uint32_t rmat = per_direction(R, R->r, D->d, gh, R->H, false);
    D->rt = transpose(R, R->op == OP_GRU && !R->lbr ? slice(R, rmat, 0, 0, 2 * R->H) : rmat,
                      (int64_t[]){1, 0}, 2, NONE);
    D->rt_h = R->op == OP_GRU && !R->lbr
                  ? transpose(R, slice(R, rmat, 0, 2 * R->H, 3 * R->H), (int64_t[]){1, 0}, 2, NONE)
                  : NONE;
    if (D->rb != NONE && !R->lbr) {   /* z and r take R's bias with the step's H R^T */
        D->xw = op2(R, OP_ADD, D->xw, D->rb);
        D->rb = NONE;
    }
    for (int k = 0; k < 3; k++)
        D->p[k] = NONE;
    if (R->p != NONE) {
        uint32_t p = per_direction(R, R->p, D->d, 3 * R->H, 0, false);
        for (int k = 0; k < 3; k++)
            D->p[k] = slice(R, p, 0, k * R->H, (k + 1) * R->H);
    }
    D->h = initial(R, R->h0, D->d);
    D->c = R->op == OP_LSTM ? initial(R, R->c0, D->d) : NONE;
}

static uint32_t gate(Rnn *R, uint32_t v, int k)
{
    return slice(R, v, 1, k * R->H, (k + 1) * R->H);
}

/* LSTM, gates i o f c: C = f (.) C + i (.) g(c); H = o (.) h(C). */
static void lstm_step(Rnn *R, Dir *D, uint32_t pre, uint32_t *h, uint32_t *c)
{
    int a = 3 * D->d;
    uint32_t gi = gate(R, pre, 0), go = gate(R, pre, 1), gf = gate(R, pre, 2);
    uint32_t gc = gate(R, pre, 3);
    if (D->p[0] != NONE) {
        gi = op2(R, OP_ADD, gi, op2(R, OP_MUL, D->c, D->p[0]));
        gf = op2(R, OP_ADD, gf, op2(R, OP_MUL, D->c, D->p[2]));
    }
    uint32_t i = activate(R, a, gi, true);
    uint32_t f = R->input_forget
                     ? op2(R, OP_SUB, constant(R, DT_F32, &(float){1}, 1, &(Shape){0}), i)
                     : activate(R, a, gf, true);
    *c = op2(R, OP_ADD, op2(R, OP_MUL, f, D->c), op2(R, OP_MUL, i, activate(R, a + 1, gc, true)));
    if (D->p[1] != NONE)
        go = op2(R, OP_ADD, go, op2(R, OP_MUL, *c, D->p[1]));
    *h = op2(R, OP_MUL, activate(R, a, go, true), activate(R, a + 2, *c, false));
}

/* GRU, gates z r h: H = h~ + z (.) (H - h~). */
static void gru_step(Rnn *R, Dir *D, uint32_t xw, uint32_t hr, uint32_t *h)
{
    int a = 2 * D->d;
    uint32_t z = activate(R, a, op2(R, OP_ADD, gate(R, xw, 0), gate(R, hr, 0)), true);
    uint32_t r = activate(R, a, op2(R, OP_ADD, gate(R, xw, 1), gate(R, hr, 1)), true);
    uint32_t rh = R->lbr ? op2(R, OP_MUL, r, gate(R, hr, 2))
                         : op2(R, OP_MATMUL, op2(R, OP_MUL, r, D->h), D->rt_h);
    uint32_t hh = activate(R, a + 1, op2(R, OP_ADD, gate(R, xw, 2), rh), true);
    *h = op2(R, OP_ADD, hh, op2(R, OP_MUL, z, op2(R, OP_SUB, D->h, hh)));
}

/* With sequence_lens: where the step is past a row's length, the state
 * stays and Y is zero. */
static uint32_t step_mask(Rnn *R, Dir *D, int64_t t)
{
    if (D->lens == NONE)
        return NONE;
    return op2(R, OP_LESS, ints(R, &t, 1), D->lens);
}

/* Step t of direction D: the new state, and Y's [1, 1, B, H] slice. */
static uint32_t step(Rnn *R, Dir *D, int64_t t)
{
    int64_t gh = R->gates * R->H;
    uint32_t xw = reshape(R, slice(R, D->xw, 0, t, t + 1), (int64_t[]){R->B, gh}, 2, NONE);
    uint32_t hr = op2(R, OP_MATMUL, D->h, D->rt);
    if (D->rb != NONE)
        hr = op2(R, OP_ADD, hr, D->rb);
    uint32_t h, c = NONE;
    if (R->op == OP_LSTM)
        lstm_step(R, D, op2(R, OP_ADD, xw, hr), &h, &c);
    else if (R->op == OP_GRU)
        gru_step(R, D, xw, hr, &h);
    else
        h = activate(R, D->d, op2(R, OP_ADD, xw, hr), true);
    uint32_t y = h, m = step_mask(R, D, t);
    if (m != NONE) {
        uint32_t held;
        if (D->zeros == NONE)
            D->zeros = initial(R, NONE, 0);
        add(R, OP_WHERE, (uint32_t[]){m, h, D->h}, 3, NONE, &held);
        add(R, OP_WHERE, (uint32_t[]){m, h, D->zeros}, 3, NONE, &y);
        h = held;
        if (c != NONE)
            add(R, OP_WHERE, (uint32_t[]){m, c, D->c}, 3, NONE, &c);
    }
    D->h = h, D->c = c;
    return reshape(R, y, (int64_t[]){1, 1, R->B, R->H}, 4, NONE);
}

/* sequence_lens [B] as [B, 1] int64, to compare with a step. */
static uint32_t lengths(Rnn *R)
{
    if (R->seq == NONE)
        return NONE;
    uint32_t v = R->seq;
    if (R->g->values[v].dtype != DT_I64)
        ir_set_int(R->g, add(R, OP_CAST, &v, 1, NONE, &v), "to", DT_I64);
    return reshape(R, v, (int64_t[]){R->B, 1}, 2, NONE);
}

/* ---- the outputs ---- */

static uint32_t output(const Node *n, uint32_t k)
{
    return k < n->nout ? n->out[k] : NONE;
}

/* Per direction values [1, ..] joined on axis 0 into [nd, B, H] (Y_h,
 * Y_c), transposed to [B, nd, H] for layout=1, written to out. */
static void state_output(Rnn *R, const uint32_t *v, uint32_t out)
{
    if (out == NONE)
        return;
    uint32_t s[2];
    for (int d = 0; d < R->nd; d++)
        s[d] = reshape(R, v[d], (int64_t[]){1, R->B, R->H}, 3, NONE);
    if (R->layout1)
        transpose(R, concat(R, s, R->nd, 0, NONE), (int64_t[]){1, 0, 2}, 3, out);
    else
        concat(R, s, R->nd, 0, out);
}

static void lower_node(Rnn *R, const Node *n)
{
    read_node(R, n);
    uint32_t x = R->layout1 ? transpose(R, R->x, (int64_t[]){1, 0, 2}, 3, NONE) : R->x;
    bool reverse = strcmp(attr_str(n, "direction", "forward"), "reverse") == 0;
    uint32_t ys[2], hs[2], cs[2], lens = lengths(R);
    uint32_t *y = arena_array(R->g->arena, (size_t)R->T, sizeof *y);
    for (int d = 0; d < R->nd; d++) {
        Dir D = {.d = d, .lens = lens, .zeros = NONE};
        direction_start(R, &D, x);
        bool back = reverse || d == 1;
        for (int64_t k = 0; k < R->T; k++) {
            int64_t t = back ? R->T - 1 - k : k;
            y[t] = step(R, &D, t);
        }
        ys[d] = output(n, 0) != NONE ? concat(R, y, (int)R->T, 0, NONE) : NONE;
        hs[d] = D.h, cs[d] = D.c;
    }
    if (output(n, 0) != NONE) {
        if (R->layout1)   /* [T, nd, B, H] -> [B, T, nd, H] */
            transpose(R, concat(R, ys, R->nd, 1, NONE), (int64_t[]){2, 0, 1, 3}, 4,
                      output(n, 0));
        else
            concat(R, ys, R->nd, 1, output(n, 0));
    }
    state_output(R, hs, output(n, 1));
    if (R->op == OP_LSTM)
        state_output(R, cs, output(n, 2));
}

/* Replaces the LSTM, GRU or RNN at order[pos] by its unrolled steps: the
 * new nodes take its place in the order, the last ones write its outputs. */
void lower_rnn(Graph *g, uint32_t pos)
{
    uint32_t id = g->order[pos], before = g->norder;
    Node copy = g->nodes[id];   /* emitting may move the node array */
    Rnn R = {.g = g, .node = id, .name = copy.name[0] ? copy.name : copy.op_type};
    lower_node(&R, &copy);
    g->nodes[id].dead = true;
    ir_splice_order(g, pos, before);
}
