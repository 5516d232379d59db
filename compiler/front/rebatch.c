/* rebatch.c — re-binds a batch dimension that the export fixed.
 *
 * torch.onnx.export without dynamic_axes writes the batch it traced with
 * (often 1) into every input's first dimension, and its constant folding
 * writes it into the targets of Reshape and Expand. -batch N (or --shapes
 * changing only dimension 0) re-binds such inputs; shape inference then
 * follows the batch through the graph, node by node, and rewrites the
 * constants that pin it.
 *
 * Following the batch needs the model as exported: driver.c infers its
 * shapes once at the exported batch B0 (the reference). A value of the
 * re-batched graph carries the batch when its shape differs from the
 * reference's in one dimension only, there N/B0 times as large; any other
 * difference is an error that names the node. Where the batch sits inside
 * its dimension matters for Reshape: a dimension may merge several axes
 * ([T*B, C] from [T, B, C]), so each value records the dimension and the
 * product of the factors before the batch within it (`outer`).
 *
 * Rewritten: a Reshape target's entry for the dimension that holds the
 * batch (where the elements before the batch match exactly), an Expand
 * target's entry over the batch (to 1: the data's own dimension). Nothing
 * else is rewritten; a node whose shapes then disagree with the reference
 * (a Split or Slice of the batch, a constant of batch size meeting the
 * batch) stops compilation with its name, and the advice to export with a
 * dynamic batch axis.
 */
#include "mpcc.h"

#include <string.h>

typedef struct Rebatch {
    int64_t from, to;
    int64_t rows;          /* of a whole batch (`to` is one micro-batch's) */
    Graph *ref;            /* the model as exported, its shapes inferred */
    uint32_t *inputs;      /* the inputs re-bound */
    uint32_t ninputs;
    uint8_t *axis;         /* per value of the graph: 1 + the batch's dimension, or 0 */
    int64_t *outer;        /* the factors before the batch within that dimension */
    uint32_t cap;
} Rebatch;

/* What every error of re-batched shape inference ends with. */
const char *rebatch_advice(Graph *g)
{
    const Rebatch *rb = g->rebatch;
    return arena_printf(g->arena, "mpcc re-batches the export (batch fixed at %lld) to %lld "
                        "rows and cannot follow the batch here: export with a dynamic batch "
                        "axis (torch.onnx.export(..., dynamic_axes={'%s': {0: 'batch'}}), see "
                        "docs/frontend.md)", (long long)rb->from, (long long)rb->rows,
                        str_escaped(g->arena, g->values[rb->inputs[0]].name, 60));
}

/* Called by bind.c for an input whose first dimension the model fixes to a
 * size other than the one asked for (`to` rows of a batch of `rows`). */
void rebatch_request(Graph *g, uint32_t input, int64_t to, int64_t rows)
{
    Value *v = &g->values[input];
    Rebatch *rb = g->rebatch;
    if (!rb) {
        rb = g->rebatch = arena_alloc(g->arena, sizeof *rb);
        rb->from = v->shape.d[0];
        rb->to = to;
        rb->rows = rows;
        rb->inputs = arena_array(g->arena, g->ninputs, sizeof *rb->inputs);
    }
    MPCC_ASSERT(v->shape.d[0] == rb->from);
    if (to != rb->to)
        error_at(&v->loc, "--shapes re-binds the batch to %lld here and to %lld in another "
                 "input; give every input the same batch", (long long)to, (long long)rb->to);
    rb->inputs[rb->ninputs++] = input;
    v->shape.d[0] = to;
}

/* The reference: the same model, bound alike but for the batch as exported
 * (call after bind_shapes(g)). */
void rebatch_bind_reference(Graph *g, Graph *ref)
{
    Rebatch *rb = g->rebatch;
    MPCC_ASSERT(rb && ref->ninputs == g->ninputs);
    for (uint32_t i = 0; i < g->ninputs; i++) {
        Value *r = &ref->values[ref->inputs[i]];
        const Value *v = &g->values[g->inputs[i]];
        r->shape = v->shape;   /* the inputs not re-bound as bound */
        memset(r->sym, 0, sizeof r->sym);
        r->symbolic = false;
        r->typed = v->typed;
    }
    for (uint32_t k = 0; k < rb->ninputs; k++) {
        uint32_t i = 0;
        while (g->inputs[i] != rb->inputs[k])
            i++;
        ref->values[ref->inputs[i]].shape.d[0] = rb->from;
    }
    rb->ref = ref;
}

static void grow(Graph *g, Rebatch *rb)
{
    if (rb->cap >= g->nvalues)
        return;
    uint32_t cap = g->nvalues + 64;
    rb->axis = arena_grow(g->arena, rb->axis, rb->cap, cap, sizeof *rb->axis);
    rb->outer = arena_grow(g->arena, rb->outer, rb->cap, cap, sizeof *rb->outer);
    for (uint32_t v = rb->cap; v < cap; v++)
        rb->axis[v] = 0, rb->outer[v] = 1;
    rb->cap = cap;
}

/* The batch's dimension in value v, or -1. */
static int axis_of(Graph *g, uint32_t v)
{
    grow(g, g->rebatch);
    return (int)g->rebatch->axis[v] - 1;
}

static void set_batch(Graph *g, uint32_t v, int axis, int64_t outer)
{
    grow(g, g->rebatch);
    g->rebatch->axis[v] = (uint8_t)(axis + 1);
    g->rebatch->outer[v] = outer;
}

/* Value v's shape as exported. */
static const Shape *exported(Graph *g, uint32_t v, const Node *n)
{
    uint32_t r = ir_find(g->rebatch->ref, g->values[v].name);
    if (r == NONE || !g->rebatch->ref->values[r].typed)
        error_at(&n->loc, "the value '%s' is not in the model as exported",
                 str_escaped(g->arena, g->values[v].name, 100));
    return &g->rebatch->ref->values[r].shape;
}

static int64_t prod(const Shape *s, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++)
        p *= s->d[i];
    return p;
}

/* A copy of the constant target of node n (input k), to rewrite. */
static Tensor *target_copy(Graph *g, Node *n, uint32_t k)
{
    const Value *v = &g->values[n->in[k]];
    if ((v->kind != VK_CONST && v->kind != VK_PARAM) || !v->data ||
        v->data->shape.rank != 1 || !dtype_is_int(v->data->dtype) ||
        v->data->shape.d[0] > MAX_RANK)
        return NULL;   /* shape inference says what is wrong with it */
    Tensor *t = arena_alloc(g->arena, sizeof *t);
    int64_t count = v->data->shape.d[0];
    int64_t *d = arena_array(g->arena, (size_t)count + 1, sizeof *d);
    for (int64_t i = 0; i < count; i++)
        d[i] = tensor_i64(v->data, i);
    *t = (Tensor){.dtype = DT_I64, .shape = {1, {count}}, .data = d,
                  .nbytes = (size_t)count * sizeof *d};
    return t;
}

static void replace_target(Graph *g, Node *n, uint32_t k, Tensor *t)
{
    const char *name = arena_printf(g->arena, "%s/rebatched", g->values[n->in[k]].name);
    g->values[n->in[k]].nuses--;
    n->in[k] = ir_new_const(g, name, t);
    g->values[n->in[k]].nuses++;
}

/* Whether the batch of x (dimension a, `outer` factors before it within
 * it) can sit in dimension k of the exported shape o, with the elements
 * before it in the same order: the elements before dimension k, times the
 * factors before the batch within it (*outer_k), are the elements before
 * the batch in x. */
static bool lands_at(const Shape *x0, int a, int64_t outer, int64_t from, const Shape *o, int k,
                     int64_t *outer_k)
{
    int64_t before = prod(x0, 0, a) * outer, p = prod(o, 0, k);
    if (p == 0 || before % p || o->d[k] % (before / p * from))
        return false;
    *outer_k = before / p;
    return true;
}

/* Dimension k of o is dimension a of x, unchanged, after the same ones. */
static bool unchanged(const Shape *x0, int a, const Shape *o, int k)
{
    if (k != a || o->d[k] != x0->d[a])
        return false;
    for (int i = 0; i < a; i++)
        if (o->d[i] != x0->d[i])
            return false;
    return true;
}

/* Where a reshape to o puts the batch of x: the one dimension it can sit
 * in or, of several (a batch of 1 fits many), the one that leaves x's
 * batch dimension as it was. -1 when none can, -2 when it is ambiguous
 * (then cand[] holds two of the candidates). */
static int landing(const Shape *x0, int a, int64_t outer, int64_t from, const Shape *o,
                   int64_t *outer_k, int cand[2])
{
    int found = -1, count = 0, same = -1;
    int64_t found_outer = 1, same_outer = 1, q;
    for (int k = 0; k < o->rank; k++) {
        if (!lands_at(x0, a, outer, from, o, k, &q))
            continue;
        if (count++ == 0)
            found = k, found_outer = q;
        cand[count > 1] = k;
        if (q == outer && unchanged(x0, a, o, k))
            same = k, same_outer = q;
    }
    if (count > 1 && same < 0)
        return -2;
    *outer_k = count > 1 ? same_outer : found_outer;
    return count > 1 ? same : found;
}

static void reshape_before(Graph *g, Node *n)
{
    int a = axis_of(g, n->in[0]);
    if (a < 0 || n->nin < 2 || n->in[1] == NONE)
        return;
    Rebatch *rb = g->rebatch;
    const Shape *x0 = exported(g, n->in[0], n), *o0 = exported(g, n->out[0], n);
    int64_t outer;
    int cand[2];
    int k = landing(x0, a, rb->outer[n->in[0]], rb->from, o0, &outer, cand);
    if (k == -1)
        error_at(&n->loc, "the reshape of %s to %s splits the batch", shape_str(g->arena, x0),
                 shape_str(g->arena, o0));
    if (k == -2)
        error_at(&n->loc, "in the reshape of %s to %s the batch of %lld could be in dimension "
                 "%d or %d (export with a batch of 2 or more to tell them apart)",
                 shape_str(g->arena, x0), shape_str(g->arena, o0), (long long)rb->from,
                 cand[0], cand[1]);
    Tensor *t = target_copy(g, n, 1);
    if (!t || t->shape.d[0] != o0->rank)
        return;
    int64_t *d = (int64_t *)t->data;
    bool copies = d[k] == 0 && attr_int(n, "allowzero", 0) == 0 && k == a;
    if (d[k] != -1 && !copies && d[k] != o0->d[k] / rb->from * rb->to) {
        d[k] = o0->d[k] / rb->from * rb->to;
        replace_target(g, n, 1, t);
    }
    set_batch(g, n->out[0], k, outer);
}

static void expand_before(Graph *g, Node *n)
{
    int a = axis_of(g, n->in[0]);
    if (a < 0 || n->nin < 2 || n->in[1] == NONE)
        return;
    const Shape *x0 = exported(g, n->in[0], n);
    Tensor *t = target_copy(g, n, 1);
    if (!t)
        return;
    int64_t *d = (int64_t *)t->data;
    int k = a + (int)t->shape.d[0] - x0->rank;
    if (k >= 0 && d[k] != 1 && d[k] == x0->d[a]) {
        d[k] = 1;   /* the data's own dimension, whatever the batch */
        replace_target(g, n, 1, t);
    }
}

/* Before shape inference sizes node n: the constants that pin the batch. */
void rebatch_before(Graph *g, Node *n)
{
    if (n->op == OP_RESHAPE)
        reshape_before(g, n);
    else if (n->op == OP_EXPAND)
        expand_before(g, n);
}

/* The factors before the batch in output dimension k: those of an input
 * whose batch dimension was as large as this one as exported. */
static bool inherit_outer(Graph *g, const Node *n, int64_t dim0, int64_t *outer)
{
    for (uint32_t j = 0; j < n->nin; j++) {
        if (n->in[j] == NONE || axis_of(g, n->in[j]) < 0)
            continue;
        const Shape *x0 = exported(g, n->in[j], n);
        if (x0->d[axis_of(g, n->in[j])] == dim0) {
            *outer = g->rebatch->outer[n->in[j]];
            return true;
        }
    }
    return false;
}

/* Ops that keep the elements in order and only regroup the dimensions:
 * the batch lands where the elements before it match (landing). */
static bool moved(Graph *g, const Node *n, const Shape *o0, int k, int64_t *outer)
{
    if (n->op != OP_FLATTEN && n->op != OP_SQUEEZE && n->op != OP_UNSQUEEZE &&
        n->op != OP_RESHAPE)
        return false;
    int a = axis_of(g, n->in[0]);
    if (a < 0)
        return false;
    const Shape *x0 = exported(g, n->in[0], n);
    return lands_at(x0, a, g->rebatch->outer[n->in[0]], g->rebatch->from, o0, k, outer);
}

/* Which dimension of output v carries the batch, from its shapes now and
 * as exported; an error when they differ otherwise. */
static void follow(Graph *g, const Node *n, uint32_t v)
{
    const Rebatch *rb = g->rebatch;
    const Shape *s = &g->values[v].shape, *s0 = exported(g, v, n);
    int k = -1;
    bool ok = s->rank == s0->rank;
    for (int i = 0; ok && i < s->rank; i++) {
        if (s->d[i] == s0->d[i])
            continue;
        ok = k < 0 && s0->d[i] % rb->from == 0 && s->d[i] == s0->d[i] / rb->from * rb->to;
        k = i;
    }
    if (!ok)
        error_at(&n->loc, "its output '%s' is %s as exported but would be %s",
                 str_escaped(g->arena, g->values[v].name, 100), shape_str(g->arena, s0),
                 shape_str(g->arena, s));
    if (k < 0 || axis_of(g, v) == k)
        return;   /* no batch, or placed by reshape_before */
    int64_t outer = 1;
    if (!inherit_outer(g, n, s0->d[k], &outer) && !moved(g, n, s0, k, &outer)) {
        for (uint32_t j = 0; j < n->nin; j++)
            if (n->in[j] != NONE && axis_of(g, n->in[j]) >= 0)
                error_at(&n->loc, "cannot tell where the batch goes in its output '%s' (%s "
                         "as exported)", str_escaped(g->arena, g->values[v].name, 100),
                         shape_str(g->arena, s0));
    }
    set_batch(g, v, k, outer);
}

/* After shape inference sized node n: where its outputs carry the batch. */
void rebatch_after(Graph *g, Node *n)
{
    for (uint32_t k = 0; k < n->nout; k++)
        if (n->out[k] != NONE && g->values[n->out[k]].typed)
            follow(g, n, n->out[k]);
}

/* The re-bound inputs carry the batch in their first dimension. */
void rebatch_start(Graph *g)
{
    MPCC_ASSERT(g->rebatch->ref);   /* rebatch_bind_reference, and its shapes, first */
    for (uint32_t k = 0; k < g->rebatch->ninputs; k++)
        set_batch(g, g->rebatch->inputs[k], 0, 1);
}

/* Once the batch was followed through the whole graph. */
void rebatch_note(Graph *g)
{
    const Value *v = &g->values[g->rebatch->inputs[0]];
    note_once(&v->loc, "the export fixes the batch at %lld; mpcc re-batches the model to "
              "%lld rows (export with dynamic_axes={'%s': {0: 'batch'}} to skip this)",
              (long long)g->rebatch->from, (long long)g->rebatch->rows,
              str_escaped(g->arena, v->name, 60));
}

int64_t rebatch_from(const Graph *g)
{
    return g->rebatch ? g->rebatch->from : 0;
}
