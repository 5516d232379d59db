/* einsum.c — Einsum as the ops that train already: ReduceSum over the
 * indices only one operand has, Transpose and Reshape of each operand into
 * (batch.., M, K) and (batch.., K, N), one MatMul, then Reshape and
 * Transpose into the output's order. A single operand is a ReduceSum and a
 * Transpose. Shape inference calls this when it meets an Einsum, so the
 * operands' shapes are known and the new nodes are inferred next; their
 * gradients are the ones those ops have.
 *
 * Equations with "..." or an index repeated within one operand (a
 * diagonal), or with more than two operands, are reported at the node.
 */
#include "mpcc.h"

#include <string.h>

enum { MAX_INDEX = MAX_RANK };

typedef struct Lower {
    Graph *g;
    uint32_t node;        /* the Einsum */
    const char *name;     /* its name, the prefix of the new nodes */
    uint32_t step;        /* new nodes so far (names) */
    int64_t size[3][128]; /* each operand's (and the product's) size of each letter */
} Lower;

static _Noreturn void unsupported_equation(Lower *l, const char *why)
{
    const Node *n = &l->g->nodes[l->node];
    error_at(&n->loc, "Einsum '%s': %s; mpcc lowers equations of one or two operands "
             "without '...' or repeated indices (rewrite the model with MatMul, "
             "Transpose and ReduceSum otherwise)",
             str_escaped(l->g->arena, attr_str(n, "equation", ""), 80), why);
}

/* ---- the equation ---- */

typedef struct Term {
    char idx[MAX_INDEX + 1];   /* one letter per dimension */
    int n;
} Term;

static void parse_term(Lower *l, const char *s, size_t len, Term *t)
{
    t->n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == ' ')
            continue;
        if (ch == '.')
            unsupported_equation(l, "'...' is not supported");
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
            unsupported_equation(l, "it has a character that is not an index letter");
        if (t->n == MAX_INDEX)
            unsupported_equation(l, "a term has more indices than mpcc's rank limit");
        if (memchr(t->idx, ch, (size_t)t->n))
            unsupported_equation(l, "an index repeats within one operand");
        t->idx[t->n++] = ch;
    }
    t->idx[t->n] = 0;
}

/* Without "->" the output is every index that appears once, in
 * alphabetical order. */
static void implicit_output(const Term *in, int nin, Term *out)
{
    out->n = 0;
    for (int c = 0; c < 128; c++) {
        int count = 0;
        for (int k = 0; k < nin; k++)
            count += memchr(in[k].idx, c, (size_t)in[k].n) != NULL;
        if (count == 1 && c && out->n < MAX_INDEX)
            out->idx[out->n++] = (char)c;
    }
    out->idx[out->n] = 0;
}

static int parse_equation(Lower *l, const char *eq, Term in[2], Term *out)
{
    const char *arrow = strstr(eq, "->");
    size_t lhs = arrow ? (size_t)(arrow - eq) : strlen(eq);
    const char *comma = memchr(eq, ',', lhs);
    int nin = comma ? 2 : 1;
    if (comma && memchr(comma + 1, ',', lhs - (size_t)(comma + 1 - eq)))
        unsupported_equation(l, "it has more than two operands");
    parse_term(l, eq, comma ? (size_t)(comma - eq) : lhs, &in[0]);
    if (comma)
        parse_term(l, comma + 1, lhs - (size_t)(comma + 1 - eq), &in[1]);
    if (arrow)
        parse_term(l, arrow + 2, strlen(arrow + 2), out);
    else
        implicit_output(in, nin, out);
    return nin;
}

static bool has(const Term *t, char c)
{
    return memchr(t->idx, c, (size_t)t->n) != NULL;
}

/* ---- emitting the replacement ---- */

static uint32_t ints_const(Lower *l, const int64_t *v, int n)
{
    return ir_lowered_const(l->g, l->name, &l->step, DT_I64, v, n, &(Shape){1, {n}});
}

/* One new node writing a new value (or `out` when it is not NONE). */
static Node *add(Lower *l, Op op, const uint32_t *in, uint32_t nin, uint32_t out,
                 uint32_t *result)
{
    return ir_emit_lowered(l->g, l->node, l->name, &l->step, op, in, nin, out, result);
}

/* v's indices t reordered as `want` (a permutation of t). */
static uint32_t transpose(Lower *l, uint32_t v, Term *t, const char *want, uint32_t out)
{
    int64_t perm[MAX_INDEX];
    bool identity = true;
    for (int i = 0; i < t->n; i++) {
        perm[i] = (const char *)memchr(t->idx, want[i], (size_t)t->n) - t->idx;
        identity &= perm[i] == i;
    }
    if (identity && out == NONE)
        return v;
    Node *n = add(l, OP_TRANSPOSE, &v, 1, out, &v);
    ir_set_ints(l->g, n, "perm", perm, (uint32_t)t->n);
    memcpy(t->idx, want, (size_t)t->n);
    return v;
}

/* Sums v over the indices of t that neither a nor b has. */
static uint32_t sum_out(Lower *l, uint32_t v, Term *t, const Term *a, const Term *b)
{
    int64_t axes[MAX_INDEX];
    int n = 0, k = 0;
    for (int i = 0; i < t->n; i++) {
        if (!has(a, t->idx[i]) && !has(b, t->idx[i]))
            axes[n++] = i;
        else
            t->idx[k++] = t->idx[i];
    }
    if (n == 0)
        return v;
    t->n = k;
    t->idx[k] = 0;
    uint32_t in[2] = {v, ints_const(l, axes, n)};
    Node *r = add(l, OP_REDUCE_SUM, in, 2, NONE, &v);
    ir_set_int(l->g, r, "keepdims", 0);
    return v;
}

/* v (operand k, its indices t in their current order) reshaped to dims. */
static uint32_t reshape(Lower *l, uint32_t v, int k, const Term *t, const int64_t *dims, int n,
                        uint32_t out)
{
    bool same = t->n == n;
    for (int i = 0; same && i < n; i++)
        same = l->size[k][(int)t->idx[i]] == dims[i];
    if (out == NONE && same)
        return v;
    uint32_t in[2] = {v, ints_const(l, dims, n)};
    add(l, OP_RESHAPE, in, 2, out, &v);
    return v;
}

static int64_t dim_of(Lower *l, int k, const Term *t, char c)
{
    return has(t, c) ? l->size[k][(int)c] : 1;
}

/* The letters of t in a class: in `a` (or not) and in `b` (or not). */
static int pick(const Term *t, const Term *a, bool in_a, const Term *b, bool in_b, char *dst)
{
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (has(a, t->idx[i]) == in_a && has(b, t->idx[i]) == in_b)
            dst[n++] = t->idx[i];
    return n;
}

/* A (batch.., M.., K..) times B (batch.., K.., N..) as one MatMul over
 * (batch.., prod M, prod K) and (batch.., prod K, prod N). */
static void lower_pair(Lower *l, uint32_t a, Term ta, uint32_t b, Term tb, const Term *to,
                       uint32_t out)
{
    char batch[MAX_INDEX], m[MAX_INDEX], k[MAX_INDEX], n[MAX_INDEX], want[MAX_INDEX];
    int nb = pick(&ta, &tb, true, to, true, batch);
    int nm = pick(&ta, &tb, false, to, true, m);
    int nk = pick(&ta, &tb, true, to, false, k);
    int nn = pick(&tb, &ta, false, to, true, n);
    if (nb + 2 > MAX_RANK || nb + nm + nn > MAX_RANK)
        unsupported_equation(l, "the lowered operands would exceed mpcc's rank limit");
    int64_t da[MAX_RANK], db[MAX_RANK], dy[MAX_RANK], pm = 1, pk = 1, pn = 1;
    for (int i = 0; i < nb; i++) {
        int64_t x = dim_of(l, 0, &ta, batch[i]), y = dim_of(l, 1, &tb, batch[i]);
        da[i] = x, db[i] = y, dy[i] = x > y ? x : y;
    }
    for (int i = 0; i < nm; i++)
        pm *= dy[nb + i] = dim_of(l, 0, &ta, m[i]);
    for (int i = 0; i < nn; i++)
        pn *= dy[nb + nm + i] = dim_of(l, 1, &tb, n[i]);
    for (int i = 0; i < nk; i++)
        pk *= dim_of(l, 0, &ta, k[i]);
    memcpy(want, batch, (size_t)nb);
    memcpy(want + nb, m, (size_t)nm);
    memcpy(want + nb + nm, k, (size_t)nk);
    a = transpose(l, a, &ta, want, NONE);
    memcpy(want + nb, k, (size_t)nk);
    memcpy(want + nb + nk, n, (size_t)nn);
    b = transpose(l, b, &tb, want, NONE);
    da[nb] = pm, da[nb + 1] = pk;
    db[nb] = pk, db[nb + 1] = pn;
    a = reshape(l, a, 0, &ta, da, nb + 2, NONE);
    b = reshape(l, b, 1, &tb, db, nb + 2, NONE);
    uint32_t y;
    add(l, OP_MATMUL, (uint32_t[]){a, b}, 2, NONE, &y);
    Term ty = {.n = nb + nm + nn};
    memcpy(ty.idx, batch, (size_t)nb);
    memcpy(ty.idx + nb, m, (size_t)nm);
    memcpy(ty.idx + nb + nm, n, (size_t)nn);
    /* The MatMul's output is (batch.., prod M, prod N): already the
     * output's dims when M and N are one index each. */
    for (int i = 0; i < 128; i++)
        l->size[2][i] = -1;
    for (int i = 0; i < ty.n && nm == 1 && nn == 1; i++)
        l->size[2][(int)ty.idx[i]] = dy[i];
    bool ordered = memcmp(ty.idx, to->idx, (size_t)to->n) == 0;
    y = reshape(l, y, 2, &ty, dy, ty.n, ordered ? out : NONE);
    if (!ordered)
        transpose(l, y, &ty, to->idx, out);
}

static void lower_node(Lower *l, const Node *n)
{
    Term in[2], out;
    const char *eq = attr_str(n, "equation", NULL);
    if (!eq)
        unsupported_equation(l, "the equation attribute is missing");
    int nin = parse_equation(l, eq, in, &out);
    if ((uint32_t)nin != n->nin)
        unsupported_equation(l, "its operands do not match the node's inputs");
    uint32_t v[2] = {n->in[0], nin > 1 ? n->in[1] : NONE}, y = n->out[0];
    for (int k = 0; k < nin; k++) {
        const Shape *sh = &l->g->values[v[k]].shape;
        if (in[k].n != sh->rank)
            unsupported_equation(l, "a term's length differs from its operand's rank");
        for (int i = 0; i < sh->rank; i++)
            l->size[k][(int)in[k].idx[i]] = sh->d[i];
    }
    for (int i = 0; i < out.n; i++)
        if (!has(&in[0], out.idx[i]) && !(nin > 1 && has(&in[1], out.idx[i])))
            unsupported_equation(l, "an output index is in no operand");
    Term none = {.n = 0};
    v[0] = sum_out(l, v[0], &in[0], &out, nin > 1 ? &in[1] : &none);
    if (nin == 1) {
        transpose(l, v[0], &in[0], out.idx, y);
        return;
    }
    v[1] = sum_out(l, v[1], &in[1], &out, &in[0]);
    lower_pair(l, v[0], in[0], v[1], in[1], &out, y);
}

/* Replaces the Einsum at order[pos] by its lowering: the new nodes take
 * its place in the order, the last one writes its output. */
void lower_einsum(Graph *g, uint32_t pos)
{
    uint32_t id = g->order[pos], before = g->norder;
    Lower l = {g, id, g->nodes[id].name[0] ? g->nodes[id].name : "Einsum", 0};
    Node copy = g->nodes[id];   /* emitting may move the node array */
    lower_node(&l, &copy);
    g->nodes[id].dead = true;
    ir_splice_order(g, pos, before);
}
