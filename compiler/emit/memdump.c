/* memdump.c — --dump=memory: what each device's arena holds.
 *
 * Every buffer of the memory plan falls in one row: the weights, their
 * gradients, the gradients' sums over micro-batches, optimizer state,
 * constants, graph inputs, buffers that copies fill or send, what the
 * host reads (outputs, the loss), and the buffers that take turns (their
 * shared stretch; what they would take apart is said beside it); then the
 * kernels' scratch. The rows add up to the arena, the figure the trainer
 * allocates. With --offload, the device's host arena follows: the
 * offloaded activations, a slot per micro-batch, and the offloaded
 * weights and optimizer state. The largest buffers of
 * each device follow.
 */
#include "mpcc.h"

#include <stdlib.h>

enum { M_PARAM, M_GRAD, M_GRAD_SUM, M_STATE, M_CONST, M_INPUT, M_COPY, M_FETCHED, M_HOST,
       M_TURNS, M_SCRATCH, M_ROWS };

static const char *const row_names[M_ROWS] = {
    "parameters", "gradients", "gradient sums", "optimizer state", "constants", "inputs",
    "copies in and out", "back from host", "read by the host", "taking turns", "kernel scratch",
};

static bool is_gradient(const Graph *g, uint32_t v)
{
    uint32_t pn = g->values[v].producer;
    if (pn == NONE || g->nodes[pn].phase != PH_BACKWARD)
        return false;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->phase == PH_UPDATE && n->nin > 1 && n->in[1] == v)
            return true;
    }
    return false;
}

static int row_of(const Plan *p, const Buf *bf)
{
    const Value *val = &p->g->values[bf->value];
    if (bf->turns)
        return M_TURNS;
    if (bf->acc)
        return M_GRAD_SUM;
    switch (val->kind) {
    case VK_PARAM: return M_PARAM;
    case VK_STATE: return M_STATE;
    case VK_CONST: return M_CONST;
    case VK_INPUT: return bf->received ? M_COPY : M_INPUT;
    default: break;
    }
    if (bf->received || plan_sent(p, bf))
        return M_COPY;
    if (bf->from >= 0)
        return M_FETCHED;
    return is_gradient(p->g, bf->value) ? M_GRAD : M_HOST;
}

static double mb(size_t bytes)
{
    return (double)bytes / 1e6;
}

static size_t block(const Buf *bf)
{
    return bf->bytes * (size_t)bf->slots;
}

static void device_rows(const Plan *p, int d, FILE *out)
{
    size_t rows[M_ROWS] = {0}, total = 0;
    int shard = 0;   /* --zero=1: the optimizer state is 1/shard of each tensor */
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b].dev == d && !p->bufs[b].turns && !p->bufs[b].host) {
            rows[row_of(p, &p->bufs[b])] += block(&p->bufs[b]);
            shard = p->bufs[b].shard > shard ? p->bufs[b].shard : shard;
        }
    rows[M_TURNS] = p->shared_bytes[d];
    rows[M_SCRATCH] = p->work_bytes[d];
    fprintf(out, "%s\n", p->ds->d[d].name);
    for (int r = 0; r < M_ROWS; r++) {
        total += rows[r];
        if (!rows[r])
            continue;
        fprintf(out, "  %-18s %12.2f MB", row_names[r], mb(rows[r]));
        if (r == M_TURNS)
            fprintf(out, "   (%.2f MB apart)", mb(p->shared_apart[d]));
        if (r == M_STATE && shard)
            fprintf(out, "   (this replica's 1/%d of it, --zero=1)", shard);
        fputc('\n', out);
    }
    MPCC_ASSERT(total == p->arena_bytes[d]);
    fprintf(out, "  %-18s %12.2f MB\n", "arena", mb(total));
    size_t acts = 0, weights = 0;
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b].host && p->bufs[b].dev == d)
            *(p->bufs[b].streamed ? &weights : &acts) += block(&p->bufs[b]);
    if (acts)
        fprintf(out, "  %-18s %12.2f MB   (offloaded activations, a slot per micro-batch)\n",
                "host arena", mb(acts));
    if (weights)
        fprintf(out, "  %-18s %12.2f MB   (offloaded weights and optimizer state)\n",
                acts ? "" : "host arena", mb(weights));
}

/* The device's n largest buffers, by what each takes apart. */
static void largest(const Plan *p, int d, int n, FILE *out)
{
    Sized *big = arena_array(p->g->arena, (size_t)p->nbufs + 1, sizeof(Sized));
    int k = 0;
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b].dev == d && !p->bufs[b].host)
            big[k++] = (Sized){block(&p->bufs[b]), b};
    qsort(big, (size_t)k, sizeof(Sized), sized_largest_first);
    fprintf(out, "  largest buffers:\n");
    for (int i = 0; i < k && i < n; i++) {
        const Buf *bf = &p->bufs[big[i].buf];
        bool tree = bf->acc && bf->levels > 1;
        fprintf(out, "    %10.2f MB  %-18s stage %d, %d %s  %s\n", mb(big[i].bytes),
                row_names[row_of(p, bf)], bf->stage, tree ? bf->levels : bf->slots,
                tree ? "tree levels" : "slot(s)",
                str_escaped(p->g->arena, p->g->values[bf->value].name, 60));
    }
}

void dump_memory(const Pipeline *pl, FILE *out)
{
    const Plan *p = pl->plan;
    fprintf(out, "# memory plan: %s schedule, %d stage(s), %d micro-batch(es)",
            schedule_name(p->sc->kind), p->st->n, p->sc->M);
    if (pl->opt.batch)
        fprintf(out, " of %lld", (long long)pl->opt.batch);
    fputc('\n', out);
    for (int d = 0; d < p->sc->ndev; d++) {
        device_rows(p, d, out);
        largest(p, d, 5, out);
    }
}
