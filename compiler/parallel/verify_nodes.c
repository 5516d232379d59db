/* verify_nodes.c — a pipeline across processes cannot deadlock.
 *
 * With --data-parallel=1 --nodes=K a copy between devices of two processes
 * is a blocking send on the sender's stream and a blocking receive on the
 * receiver's stream of the same kind (codegen.c, runtime/comm.c): it
 * happens only when both streams have reached it and its waits are done,
 * and until then both streams stand. Every stream takes its operations in
 * the step's issue order. The check plays the step: a stream whose next
 * operation can run runs it (a copy between processes when the other
 * stream's next operation is that copy too), until nothing can; if an
 * operation is left, the step would deadlock, and that is mpcc's bug,
 * reported naming the operation. tests/unit/test_nodes.c swaps two
 * receives and must see it caught.
 */
#include "mpcc.h"

#include <string.h>

/* The copy crosses processes: its streams, the sender's and the
 * receiver's; -1 for the second when it does not. */
static int receiver_stream(const Plan *p, const PlanOp *op)
{
    if (op->kind != OPK_COPY)
        return -1;
    int from = p->bufs[op->src].dev, to = p->bufs[op->dst].dev;
    if (p->ds->d[from].node == p->ds->d[to].node)
        return -1;
    return to * STREAMS_PER_DEV + op->stream % STREAMS_PER_DEV;
}

NodeStreams node_streams(const Plan *p)
{
    NodeStreams ns = {p->nstreams, NULL, NULL};
    Arena *a = p->g->arena;
    ns.seq = arena_array(a, (size_t)p->nstreams, sizeof *ns.seq);
    ns.len = arena_array(a, (size_t)p->nstreams, sizeof *ns.len);
    for (int s = 0; s < p->nstreams; s++)
        ns.seq[s] = arena_array(a, (size_t)p->nops * 2 + 1, sizeof(int));
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        int r = receiver_stream(p, op);
        ns.seq[op->stream][ns.len[op->stream]++] = i;
        if (r >= 0)
            ns.seq[r][ns.len[r]++] = i;
    }
    return ns;
}

static bool waits_done(const PlanOp *op, const bool *done)
{
    for (int k = 0; k < op->ndeps; k++)
        if (!done[op->deps[k]])
            return false;
    return true;
}

int node_streams_stuck(const Plan *p, const NodeStreams *ns)
{
    bool *done = arena_array(p->g->arena, (size_t)p->nops + 1, sizeof(bool));
    int *head = arena_array(p->g->arena, (size_t)ns->nstreams, sizeof(int));
    for (bool moved = true; moved;) {
        moved = false;
        for (int s = 0; s < ns->nstreams; s++) {
            if (head[s] == ns->len[s])
                continue;
            int i = ns->seq[s][head[s]];
            const PlanOp *op = &p->ops[i];
            int r = receiver_stream(p, op), other = r < 0 ? -1 : s == r ? op->stream : r;
            bool both = other < 0 || (head[other] < ns->len[other] &&
                                      ns->seq[other][head[other]] == i);
            if (!both || !waits_done(op, done))
                continue;
            done[i] = true;
            head[s]++;
            if (other >= 0)
                head[other]++;
            moved = true;
        }
    }
    for (int s = 0; s < ns->nstreams; s++)
        if (head[s] < ns->len[s])
            return ns->seq[s][head[s]];
    return -1;
}

bool plan_across_nodes(const Plan *p)
{
    for (int d = 0; d < p->ds->n; d++)
        if (p->ds->d[d].node != 0)
            return true;
    return false;
}

void plan_verify_nodes(const Plan *p)
{
    if (!plan_across_nodes(p))
        return;
    NodeStreams ns = node_streams(p);
    int stuck = node_streams_stuck(p, &ns);
    if (stuck >= 0)
        mpcc_die(__FILE__, __LINE__, "plan: the step across processes would deadlock at %s",
                 plan_describe_op(p, stuck));
}
