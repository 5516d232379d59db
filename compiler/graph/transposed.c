/* transposed.c — a MatMul reads a transposed operand in place.
 *
 * Exports of a linear layer on a sequence write MatMul(x, Transpose(W)):
 * the weight is copied into its transpose every step, and the gradient
 * of that copy transposed back. A GEMM reads either operand transposed
 * for free, so a MatMul whose operand is a Transpose swapping the last
 * two dims (and no other) becomes a BatchMatMul (autodiff's form, with
 * transA and transB) that reads the Transpose's input; the Transpose goes
 * when nothing else reads it. The products are the same numbers: each
 * element of the output sums the same terms. Both operands must be
 * matrices (rank 2 or more): a 1-D operand's MatMul keeps its own rules.
 *
 * On the training graph before the loss (the gradient then flows to the
 * weight directly: a GEMM into a float32 gradient, as Gemm's transB
 * weight) and on --infer's forward graph; --emit-onnx writes the model as
 * written. */
#include "mpcc.h"

/* Whether Transpose node t swaps the last two dims of its input, rank r. */
static bool swaps_last_two(const Node *t, int r)
{
    uint32_t count = 0;
    const int64_t *perm = attr_ints(t, "perm", &count);
    if (!perm)
        return r == 2;   /* the default reverses the dims */
    if ((int)count != r || r < 2)
        return false;
    for (int i = 0; i < r - 2; i++)
        if (perm[i] != i)
            return false;
    return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

/* The Transpose node that computes v and swaps its last two dims, or NULL. */
static const Node *swap_of(const Graph *g, uint32_t v)
{
    uint32_t p = g->values[v].producer;
    if (p == NONE || g->nodes[p].dead || g->nodes[p].op != OP_TRANSPOSE)
        return NULL;
    const Node *t = &g->nodes[p];
    return swaps_last_two(t, g->values[v].shape.rank) ? t : NULL;
}

/* MatMul n reads each swapped operand's source, transposed; true if any. */
static bool fold_matmul(Graph *g, Node *n)
{
    for (int k = 0; k < 2; k++)
        if (g->values[n->in[k]].shape.rank < 2 || g->values[n->in[k]].dtype != DT_F32)
            return false;
    bool folded = false;
    static const char *flag[2] = {"transA", "transB"};
    for (int k = 0; k < 2; k++) {
        const Node *t = swap_of(g, n->in[k]);
        if (!t)
            continue;
        g->values[n->in[k]].nuses--;
        n->in[k] = t->in[0];
        g->values[n->in[k]].nuses++;
        ir_set_int(g, n, flag[k], 1);
        folded = true;
    }
    if (folded) {
        n->op = OP_BATCH_MATMUL;
        n->op_type = op_info[OP_BATCH_MATMUL].name;
    }
    return folded;
}

void fold_transposed_operands(Graph *g)
{
    bool any = false;
    for (uint32_t i = 0; i < g->norder; i++) {
        Node *n = &g->nodes[g->order[i]];
        if (!n->dead && n->op == OP_MATMUL)
            any |= fold_matmul(g, n);
    }
    if (any)
        prune(g);   /* the Transposes nothing reads now */
}
