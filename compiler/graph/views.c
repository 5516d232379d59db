/* views.c — a batched matrix product reads and writes transposed
 * activations in place.
 *
 * Attention as PyTorch exports it moves its heads between the sequence's
 * layout and the batch's with Transposes around each batched product:
 * q, k and v of (T, B*H, d) into (B*H, T, d) (k into (B*H, d, T)), the
 * product of the scores and v back into (T, B*H, d), and each again in
 * the backward pass. Each is a pass over the activation. A GEMM reads a
 * matrix whose rows lie any fixed distance apart (its leading dimension),
 * and a strided batch any fixed distance apart, so such a product reads
 * the Transpose's input where it lies, and writes its output where the
 * Transpose after it would have put it: a view, an attribute of the
 * product (mpcc_view_a, mpcc_view_b, mpcc_view_y: the Transpose's perm),
 * and the Transpose goes.
 *
 * A view is taken where
 *   - the product keeps a batch: both operands and the output have the
 *     same batch dims, none broadcast (a product that folds its batch into
 *     one GEMM, as a linear layer's, keeps its dense operands), and
 *   - in the view, one of the matrix's two dims lies contiguous (its
 *     elements adjacent), so that the other is the leading dimension, of
 *     the matrix or of its transpose, and
 *   - the Transpose moves an activation (not a parameter's bf16 copy)
 *     and keeps its type, and every reader of its output is such a
 *     product (on the input side), or its input is the product's output
 *     and has no other reader (on the output side); no value it removes is
 *     a graph output.
 * The products are the same numbers: each output element sums the same
 * terms in the same order. The training graph's last pass, after
 * --precision's types. */
#include "mpcc.h"

/* Row-major strides of shape s. */
static void dense_strides(const Shape *s, int64_t *st)
{
    int64_t m = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        st[i] = m;
        m *= s->d[i];
    }
}

static const char *const view_attr[3] = {"mpcc_view_a", "mpcc_view_b", "mpcc_view_y"};

MatView matmul_view(const Graph *g, const Node *n, int k)
{
    uint32_t v = k < 2 ? n->in[k] : n->out[0];
    MatView m = {.shape = g->values[v].shape};
    int64_t st[MAX_RANK];
    dense_strides(&m.shape, st);
    uint32_t count = 0;
    const int64_t *perm = attr_ints(n, view_attr[k], &count);
    if (!perm || (int)count != m.shape.rank) {
        for (int i = 0; i < m.shape.rank; i++)
            m.stride[i] = st[i];
        return m;
    }
    Shape stored = m.shape;
    for (int i = 0; i < stored.rank; i++) {
        int p = (int)perm[i];
        if (k < 2) {   /* the operand is Transpose(stored, perm) */
            m.shape.d[i] = stored.d[p];
            m.stride[i] = st[p];
        } else {       /* stored = Transpose(output, perm) */
            m.shape.d[p] = stored.d[i];
            m.stride[p] = st[i];
        }
    }
    return m;
}

/* Whether product n keeps its batch: rank 3 or more, the operands' and
 * the output's batch dims the same. */
static bool keeps_batch(const Graph *g, const Node *n)
{
    if ((n->op != OP_MATMUL && n->op != OP_BATCH_MATMUL) || n->nin != 2)
        return false;
    MatView v[3];
    for (int k = 0; k < 3; k++)
        v[k] = matmul_view(g, n, k);
    int r = v[2].shape.rank;
    if (r < 3 || v[0].shape.rank != r || v[1].shape.rank != r)
        return false;
    for (int i = 0; i < r - 2; i++)
        if (v[0].shape.d[i] != v[2].shape.d[i] || v[1].shape.d[i] != v[2].shape.d[i])
            return false;
    return true;
}

/* Whether a view with perm lays one of the matrix's dims contiguous: the
 * stored last dim is one of the view's last two (either side). */
static bool contiguous_matrix(const int *perm, int rank, bool output)
{
    int last = rank - 1;
    if (!output)
        return perm[last] == last || perm[last - 1] == last;
    return perm[last] == last || perm[last] == last - 1;
}

/* The Transpose that computes v, if it moves an activation of v's type. */
static const Node *moving_transpose(const Graph *g, uint32_t v)
{
    uint32_t p = g->values[v].producer;
    if (p == NONE || g->nodes[p].dead || g->nodes[p].op != OP_TRANSPOSE)
        return NULL;
    const Node *t = &g->nodes[p];
    const Value *x = &g->values[t->in[0]];
    if (x->kind != VK_ACTIVATION || x->dtype != g->values[v].dtype || g->values[v].is_output)
        return NULL;
    return t;
}

/* Whether every live reader of v reads it as an operand of a product that
 * keeps its batch, with no view there yet. */
static bool only_products_read(const Graph *g, uint32_t v)
{
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin; k++) {
            if (n->in[k] != v)
                continue;
            if (k > 1 || !keeps_batch(g, n) || attr_ints(n, view_attr[k], &(uint32_t){0}))
                return false;
        }
    }
    return true;
}

static void set_view(Graph *g, Node *n, int k, const int *perm, int rank)
{
    int64_t p[MAX_RANK];
    for (int i = 0; i < rank; i++)
        p[i] = perm[i];
    ir_set_ints(g, n, view_attr[k], p, (uint32_t)rank);
}

/* Transpose t's output is read by products alone: each reads t's input
 * through a view. */
static bool fold_input(Graph *g, Node *t)
{
    int perm[MAX_RANK], rank = g->values[t->out[0]].shape.rank;
    uint32_t z = t->out[0], x = t->in[0];
    if (rank < 3 || !moving_transpose(g, z))
        return false;
    transpose_perm(g, t, perm);
    if (!contiguous_matrix(perm, rank, false) || !ir_reads(g, z) || !only_products_read(g, z))
        return false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] == z) {
                n->in[k] = x;
                set_view(g, n, (int)k, perm, rank);
            }
    }
    return true;
}

/* Product n's output is read by one Transpose alone: n writes the
 * Transpose's output through a view. */
static bool fold_output(Graph *g, Node *n)
{
    uint32_t y = n->out[0];
    if (!keeps_batch(g, n) || attr_ints(n, view_attr[2], &(uint32_t){0}) ||
        ir_reads(g, y) != 1 || g->values[y].is_output)
        return false;
    Node *t = NULL;
    for (uint32_t i = 0; i < g->norder && !t; i++) {
        Node *r = &g->nodes[g->order[i]];
        if (!r->dead && r->op == OP_TRANSPOSE && r->in[0] == y)
            t = r;
    }
    int perm[MAX_RANK], rank = g->values[y].shape.rank;
    if (!t || !moving_transpose(g, t->out[0]))
        return false;
    transpose_perm(g, t, perm);
    if (!contiguous_matrix(perm, rank, true))
        return false;
    uint32_t z = t->out[0];
    n->out[0] = z;
    g->values[z].producer = (uint32_t)(n - g->nodes);
    g->values[y].producer = NONE;
    set_view(g, n, 2, perm, rank);
    t->dead = true;
    return true;
}

void fold_product_views(Graph *g)
{
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        if (!n->dead && n->op == OP_TRANSPOSE && fold_input(g, n)) {
            n->dead = true;
            any = true;
        }
    }
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        if (!n->dead)
            any |= fold_output(g, n);
    }
    if (!any)
        return;
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->norder; i++)
        if (!g->nodes[g->order[i]].dead)
            g->order[k++] = g->order[i];
    g->norder = k;
}
