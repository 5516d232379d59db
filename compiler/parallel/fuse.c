/* fuse.c — chains of float32 elementwise nodes that run as one kernel
 * (and bf16 ones under --precision=bf16).
 *
 * Inside one stage action, node A's value need never be written when the
 * only reader in the whole training graph (forward, backward, updates) is
 * node B of the same action, both are elementwise ops the chain kernel runs
 * (runtime/kernel.h's mprt_ew_chain: unary functions, Relu, Add, Sub, Mul,
 * Div and Pow with broadcasting, Sum of equal shapes, the gradients of the
 * unary functions and of Relu) and B's output has A's shape: B's kernel
 * computes A's value on the way. Chains grow so to any length, within the
 * kernel's limits on steps and operands (then a new chain starts). A value
 * the host or another stage reads is always written: graph outputs, the
 * loss and the model's output, parameters' gradients (summed, clipped and
 * read by the update), values another stage receives.
 *
 * A chain runs where its last node runs. Every value it reads is there by
 * then, and still holds: the memory plan (share.c) counts a chain's reads
 * where the chain runs, and the values its nodes compute on the way are
 * never written, so their buffers take no memory of their own. The
 * partition and the schedule are the unfused program's; this pass tells
 * the code generator which kernel calls to merge. Each step keeps
 * the float operations of the node's own kernel, so a trainer gives the
 * same numbers bit for bit with and without fusion (--no-fuse).
 */
#include "mpcc.h"
#include "kernel.h"

#include <string.h>

/* A scalar float32 constant: the chain reads it as a literal. */
bool fuse_constant(const Graph *g, uint32_t v, float *f)
{
    const Value *val = &g->values[v];
    if (val->kind != VK_CONST || val->dtype != DT_F32 || !val->data ||
        shape_numel(&val->shape) != 1 || val->data->nbytes < sizeof *f)
        return false;
    if (f)
        memcpy(f, val->data->data, sizeof *f);
    return true;
}

static bool is_unary(Op op)
{
    switch (op) {
    case OP_RELU: case OP_ERF: case OP_TANH: case OP_SQRT: case OP_EXP: case OP_LOG:
    case OP_NEG: case OP_SIGMOID: case OP_RECIPROCAL: case OP_ABS: case OP_HARD_SIGMOID:
    case OP_HARD_SWISH: case OP_LEAKY_RELU: case OP_ELU: case OP_SELU: case OP_SOFTPLUS:
    case OP_GELU: case OP_CLIP:
        return true;
    default:
        return false;
    }
}

/* Inputs the kernel reads elementwise: Clip's bounds are parameters. */
static uint32_t fuse_operands(const Node *n)
{
    return is_unary(n->op) ? 1 : n->nin;
}

/* float32, or bf16 under --precision=bf16: the chain kernel reads it
 * widened and writes it rounded (runtime/kernel.h). */
static bool chain_type(const Graph *g, uint32_t v)
{
    return v != NONE && (g->values[v].dtype == DT_F32 || (g->bf16 && g->values[v].dtype == DT_BF16));
}

static bool all_float(const Graph *g, const Node *n)
{
    for (uint32_t k = 0; k < fuse_operands(n); k++)
        if (!chain_type(g, n->in[k]))
            return false;
    return n->nout == 1 && chain_type(g, n->out[0]);
}

/* A node the chain kernel runs as one or more steps. Sum only of equal
 * shapes (mprt_sum; the broadcasting one scales its result). */
static bool chainable(const Graph *g, const Node *n)
{
    switch (n->op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_POW: case OP_UNARY_GRAD:
    case OP_RELU_GRAD:
        break;
    case OP_SUM:
        if (n->nin < 2)
            return false;
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] == NONE ||
                !shape_eq(&g->values[n->in[k]].shape, &g->values[n->out[0]].shape))
                return false;
        break;
    default:
        if (!is_unary(n->op))
            return false;
    }
    return all_float(g, n);
}

/* Whether the chain's value may come in through input k: the first input
 * of functions and gradients (dy), either side of a binary op, the first
 * two terms of a Sum (added left to right). */
static bool entry(const Node *n, uint32_t k)
{
    if (n->op == OP_ADD || n->op == OP_SUB || n->op == OP_MUL || n->op == OP_DIV ||
        n->op == OP_POW || n->op == OP_SUM)
        return k < 2;
    return k == 0;
}

/* Steps a node adds to a chain (a Sum of k terms: k - 1 additions). */
static int node_steps(const Node *n)
{
    return n->op == OP_SUM ? (int)n->nin - 1 : 1;
}

typedef struct FB {
    Graph *g;
    const Plan *p;
    Fusion *f;
    uint32_t *uses;            /* [nvalues]: reads by live nodes */
    bool *host_read;           /* [nvalues]: read outside the stage functions' kernels */
    int *steps;                /* [nnodes]: the chain ending at the node: its steps */
    int *length;               /* [nnodes]: and its nodes */
    uint32_t (*ops)[MPRT_EW_OPERANDS];   /* [nnodes]: and its operands */
    int *nops;
} FB;

static void count_uses(FB *b)
{
    Graph *g = b->g;
    b->uses = arena_array(g->arena, g->nvalues, sizeof(uint32_t));
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                b->uses[n->in[k]]++;
    }
}

/* The values the trainer reads besides the kernels: the loss and the
 * model's output (the loss's first input, for evaluation), the graph's
 * outputs, and the parameters' gradients (summed over micro-batches,
 * clipped, read by the update). */
static void mark_host_reads(FB *b)
{
    Graph *g = b->g;
    b->host_read = arena_array(g->arena, g->nvalues, sizeof(bool));
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        b->host_read[v] |= val->is_output;
        if (val->trainable && val->grad != NONE)
            b->host_read[val->grad] = true;
    }
    if (g->loss != NONE) {
        b->host_read[g->loss] = true;
        if (g->scores != NONE)
            b->host_read[g->scores] = true;
    }
}

/* Whether a's value (its one output) is read by b alone, in b's action,
 * on b's stage alone. */
static bool private_to(FB *b, uint32_t a, uint32_t bn)
{
    const Stages *st = b->p->st;
    uint32_t v = b->g->nodes[a].out[0];
    if (b->uses[v] != 1 || b->host_read[v] || b->g->values[v].kind != VK_ACTIVATION)
        return false;
    if (st->stage[a] != st->stage[bn] || st->act[a] != st->act[bn])
        return false;
    for (int s = 0; s < st->n; s++)
        if (s != st->stage[a] && plan_buf(b->p, v, s) >= 0)
            return false;
    return shape_eq(&b->g->values[v].shape, &b->g->values[b->g->nodes[bn].out[0]].shape);
}

/* Whether the chain may read input k of node n as a literal: the value it
 * starts from (k = 0 of the first node) and a binary op's other side. */
static bool literal_input(const Node *n, uint32_t k, bool head)
{
    return (head && k == 0) || n->op == OP_ADD || n->op == OP_SUB || n->op == OP_MUL ||
           n->op == OP_DIV || n->op == OP_POW || n->op == OP_SUM;
}

/* Adds v to an operand list (a scalar constant the step may read as a
 * literal is none); false if the list is full. */
static bool add_operand(const Graph *g, uint32_t *ops, int *n, uint32_t v, bool literal)
{
    if (literal && fuse_constant(g, v, NULL))
        return true;
    for (int k = 0; k < *n; k++)
        if (ops[k] == v)
            return true;
    if (*n == MPRT_EW_OPERANDS)
        return false;
    ops[(*n)++] = v;
    return true;
}

/* The chain ending at node id as it would be with node a's chain (NONE:
 * none) taken in through input k: false if it breaks the kernel's limits. */
static bool try_chain(FB *b, uint32_t id, uint32_t a, uint32_t k)
{
    const Node *n = &b->g->nodes[id];
    uint32_t ops[MPRT_EW_OPERANDS];
    int nops = 0, steps = 1 + node_steps(n);
    if (a != NONE) {
        memcpy(ops, b->ops[a], sizeof ops);
        nops = b->nops[a];
        steps = b->steps[a] + node_steps(n);
    }
    for (uint32_t j = 0; j < fuse_operands(n); j++)
        if (!(a != NONE && j == k) &&
            !add_operand(b->g, ops, &nops, n->in[j], literal_input(n, j, a == NONE)))
            return false;
    if (steps > MPRT_EW_STEPS)
        return false;
    memcpy(b->ops[id], ops, sizeof ops);
    b->nops[id] = nops;
    b->steps[id] = steps;
    b->length[id] = a != NONE ? b->length[a] + 1 : 1;
    return true;
}

/* Under --precision=bf16, whether the chain kernel runs node n by itself
 * (a chain of one, codegen.c): it reads n's bf16 operands and writes its
 * bf16 value itself, with no float32 copies around it (precision.c). */
bool fuse_alone(const Graph *g, const Node *n)
{
    uint32_t ops[MPRT_EW_OPERANDS];
    int nops = 0;
    if (!g->bf16 || !chainable(g, n) || 1 + node_steps(n) > MPRT_EW_STEPS)
        return false;
    for (uint32_t j = 0; j < fuse_operands(n); j++)
        if (!add_operand(g, ops, &nops, n->in[j], literal_input(n, j, true)))
            return false;
    return true;
}

/* Node id joins the longest chain among its inputs' producers that fits,
 * or starts one. */
static void grow(FB *b, uint32_t id)
{
    Graph *g = b->g;
    const Node *n = &g->nodes[id];
    uint32_t best = NONE, via = 0;
    for (uint32_t k = 0; k < n->nin; k++) {
        uint32_t a = n->in[k] != NONE ? g->values[n->in[k]].producer : NONE;
        if (a == NONE || !entry(n, k) || b->length[a] == 0 || !private_to(b, a, id))
            continue;
        if ((best == NONE || b->length[a] > b->length[best]) && try_chain(b, id, a, k))
            best = a, via = k;
    }
    if (best != NONE)
        try_chain(b, id, best, via);   /* the chosen one last: its figures stay */
    else
        try_chain(b, id, NONE, 0);
    b->f->prev[id] = best;
    b->f->via[id] = (uint8_t)via;
}

/* Marks the nodes before each chain's last one, and counts. */
static void close_chains(FB *b)
{
    Graph *g = b->g;
    Fusion *f = b->f;
    bool *inner = arena_array(g->arena, g->nnodes, sizeof(bool));
    for (uint32_t id = 0; id < g->nnodes; id++)
        if (f->prev[id] != NONE)
            inner[f->prev[id]] = true;
    for (uint32_t id = 0; id < g->nnodes; id++) {
        if (f->prev[id] == NONE || inner[id])
            continue;
        f->nchains++;
        f->nfused++;
        for (uint32_t a = f->prev[id]; a != NONE; a = f->prev[a]) {
            f->tail[a] = id;
            f->nfused++;
        }
    }
}

static Fusion *empty_fusion(Graph *g)
{
    Fusion *f = arena_alloc(g->arena, sizeof *f);
    f->prev = arena_array(g->arena, g->nnodes, sizeof(uint32_t));
    f->tail = arena_array(g->arena, g->nnodes, sizeof(uint32_t));
    f->via = arena_array(g->arena, g->nnodes, sizeof(uint8_t));
    memset(f->prev, 0xff, g->nnodes * sizeof(uint32_t));
    memset(f->tail, 0xff, g->nnodes * sizeof(uint32_t));
    return f;
}

Fusion *fuse(Graph *g, const Plan *p, const Options *o)
{
    Fusion *f = empty_fusion(g);
    if (o->no_fuse)
        return f;
    FB b = {.g = g, .p = p, .f = f};
    count_uses(&b);
    mark_host_reads(&b);
    b.steps = arena_array(g->arena, g->nnodes, sizeof(int));
    b.length = arena_array(g->arena, g->nnodes, sizeof(int));
    b.nops = arena_array(g->arena, g->nnodes, sizeof(int));
    b.ops = arena_array(g->arena, g->nnodes, sizeof *b.ops);
    for (int k = 0; k < p->st->n * ACT_KINDS; k++)
        for (int i = 0; i < p->nnodes[k]; i++)
            if (chainable(g, &g->nodes[p->nodes[k][i]]) &&
                !eval_only(&g->nodes[p->nodes[k][i]]))
                grow(&b, p->nodes[k][i]);   /* not one that runs in evaluation alone */
    close_chains(&b);
    return f;
}

/* ---- --dump=fuse ---- */

static void dump_chain(const Graph *g, const Plan *p, const Fusion *f, uint32_t tail, FILE *out)
{
    static const char *const acts[] = {"forward", "backward", "wgrad", "update"};
    uint32_t chain[MPRT_EW_STEPS];
    int n = 0;
    for (uint32_t id = tail; id != NONE; id = f->prev[id])
        chain[n++] = id;
    fprintf(out, "stage %d %-8s %s:", p->st->stage[tail], acts[p->st->act[tail]],
            shape_str(g->arena, &g->values[g->nodes[tail].out[0]].shape));
    for (int i = n - 1; i >= 0; i--) {
        const Node *nd = &g->nodes[chain[i]];
        fputs(i == n - 1 ? " '" : " -> '", out);
        fput_escaped(out, nd->name);
        fprintf(out, "' (%s)", nd->op_type);
    }
    fputc('\n', out);
}

void dump_fusion(const Graph *g, const Plan *p, const Fusion *f, FILE *out)
{
    fprintf(out, "; fused elementwise chains: %d, of %d nodes (%d kernel calls fewer per "
            "micro-batch)\n", f->nchains, f->nfused, f->nfused - f->nchains);
    for (int k = 0; k < p->st->n * ACT_KINDS; k++)
        for (int i = 0; i < p->nnodes[k]; i++) {
            uint32_t id = p->nodes[k][i];
            if (f->prev[id] != NONE && f->tail[id] == NONE)
                dump_chain(g, p, f, id, out);
        }
}
