/* sim.c — a discrete-event simulation of one step: each stream runs its
 * operations in order, each operation starts when its stream is free and
 * every operation it waits for has ended, and lasts its predicted time
 * (copies run on their own streams, so they overlap compute). */
#include "mpcc.h"

#include <math.h>

/* Stream by stream, position by position: the operations in stream order. */
static int **by_stream(Plan *p, int *count)
{
    Arena *a = p->g->arena;
    int **list = arena_array(a, (size_t)p->nstreams, sizeof(int *));
    for (int i = 0; i < p->nops; i++)
        count[p->ops[i].stream]++;
    for (int s = 0; s < p->nstreams; s++)
        list[s] = arena_array(a, (size_t)count[s] + 1, sizeof(int));
    for (int i = 0; i < p->nops; i++) {
        MPCC_ASSERT(p->ops[i].pos < count[p->ops[i].stream]);
        list[p->ops[i].stream][p->ops[i].pos] = i;
    }
    return list;
}

bool simulate(Plan *p, const char **stuck)
{
    Arena *a = p->g->arena;
    int *count = arena_array(a, (size_t)p->nstreams, sizeof(int));
    int **list = by_stream(p, count);
    int *head = arena_array(a, (size_t)p->nstreams, sizeof(int));
    double *free_at = arena_array(a, (size_t)p->nstreams, sizeof(double));
    bool *done = arena_array(a, (size_t)p->nops + 1, sizeof(bool));
    int left = p->nops;
    for (bool progress = true; left && progress;) {
        progress = false;
        for (int s = 0; s < p->nstreams; s++)
            while (head[s] < count[s]) {
                PlanOp *op = &p->ops[list[s][head[s]]];
                double start = free_at[s];
                bool ready = true;
                for (int k = 0; k < op->ndeps && ready; k++) {
                    ready = done[op->deps[k]];
                    start = fmax(start, p->ops[op->deps[k]].end);
                }
                if (!ready)
                    break;
                op->start = start;
                op->end = free_at[s] = start + op->time;
                done[list[s][head[s]++]] = true;
                left--;
                progress = true;
            }
    }
    if (left) {
        *stuck = "";
        for (int s = 0; s < p->nstreams; s++)
            if (head[s] < count[s]) {
                const PlanOp *op = &p->ops[list[s][head[s]]];
                *stuck = arena_printf(a, "%s; %s waits for", *stuck,
                                      plan_describe_op(p, list[s][head[s]]));
                for (int k = 0; k < op->ndeps; k++)
                    if (!done[op->deps[k]])
                        *stuck = arena_printf(a, "%s %s", *stuck,
                                              plan_describe_op(p, op->deps[k]));
            }
        return false;
    }
    p->busy = arena_array(a, (size_t)p->sc->ndev, sizeof(double));
    p->step_time = 0;
    double busy = 0;
    for (int i = 0; i < p->nops; i++) {
        p->step_time = fmax(p->step_time, p->ops[i].end);
        if (p->ops[i].kind == OPK_RUN) {
            p->busy[p->ops[i].dev] += p->ops[i].time;
            busy += p->ops[i].time;
        }
    }
    p->bubble = p->step_time > 0 ? 1 - busy / (p->sc->ndev * p->step_time) : 0;
    return true;
}
