/* offload.c — which activations wait in host memory between the forward
 * that makes them and the backward that reads them (--offload), and when
 * their copies run.
 *
 * A stage's forward writes a value its own backward reads; meanwhile the
 * device may run other actions (other stages' on the same device, other
 * micro-batches'). Offloaded, the value's micro-batch is copied to host
 * memory while the device's next action runs, and back while the action
 * before its backward runs. So on the device it is alive only from its
 * forward to the end of the next action, and again from the start of the
 * action before its backward: memory the actions in between may use
 * (share.c places it). A value is offloaded when, for every micro-batch,
 * at least one action lies between those two windows, so that something
 * is saved. Not offloaded: values of recomputing stages (they keep
 * nothing), values the host reads (the loss and what evaluation reads),
 * and graph inputs (the host fills them before the step).
 *
 * plan.c makes the buffers and the copies; verify.c proves that each copy
 * runs inside its window; verify_memory.c replays the windows.
 */
#include "mpcc.h"

#include <string.h>

typedef struct Pick {
    const Plan *p;
    Arena *a;
    int M;
    int *pos;            /* [nstages * ACT_KINDS * M]: an action's index in its device's sequence */
    bool *outside;       /* [nvalues]: read by the host */
} Pick;

static int *pos_of(const Pick *k, int stage, int kind, int mb)
{
    return &k->pos[((size_t)stage * ACT_KINDS + kind) * k->M + mb];
}

static void positions(Pick *k)
{
    const Schedule *sc = k->p->sc;
    size_t n = (size_t)k->p->st->n * ACT_KINDS * k->M;
    k->pos = arena_array(k->a, n, sizeof(int));
    memset(k->pos, 0xff, n * sizeof(int));
    for (int d = 0; d < sc->ndev; d++)
        for (int i = 0; i < sc->nseq[d]; i++) {
            Act a = sc->seq[d][i];
            *pos_of(k, a.stage, a.kind, a.mb) = i;
        }
}

/* The kinds of stage s's actions whose nodes read v: a bit per ActKind. */
static unsigned readers(const Pick *k, uint32_t v, int s)
{
    const Plan *p = k->p;
    unsigned kinds = 0;
    for (int kind = 0; kind < ACT_KINDS; kind++) {
        size_t at = (size_t)s * ACT_KINDS + kind;
        for (int j = 0; j < p->nnodes[at]; j++) {
            const Node *n = &p->g->nodes[p->nodes[at][j]];
            for (uint32_t q = 0; q < n->nin; q++)
                if (n->in[q] == v)
                    kinds |= 1u << kind;
        }
    }
    return kinds;
}

/* A forward activation of stage s that its backward reads. */
static bool kept(const Pick *k, uint32_t v, int s, unsigned *kinds)
{
    const Graph *g = k->p->g;
    const Value *val = &g->values[v];
    if (val->kind != VK_ACTIVATION || val->producer == NONE || k->outside[v] ||
        k->p->st->stage[val->producer] != s || k->p->st->act[val->producer] != ACT_FWD ||
        plan_buf(k->p, v, s) < 0)
        return false;
    *kinds = readers(k, v, s) & (1u << ACT_BWD | 1u << ACT_WGRAD);
    return *kinds != 0;
}

/* The windows of (v, s) for every micro-batch; false where some
 * micro-batch's leave no action between them. */
static bool windows(const Pick *k, int s, unsigned kinds, int *out, int *in)
{
    for (int mb = 0; mb < k->M; mb++) {
        int f = *pos_of(k, s, ACT_FWD, mb), b = -1;
        for (int kind = ACT_BWD; kind <= ACT_WGRAD; kind++) {
            int at = *pos_of(k, s, kind, mb);
            if ((kinds >> kind & 1) && at >= 0 && (b < 0 || at < b))
                b = at;
        }
            if (f < 0 || b < 0 || b - f < 3)
            return false;
        out[mb] = f + 1;
        in[mb] = b - 1;
    }
    return true;
}

Offload *offload_choose(const Plan *p, const Options *o, Arena *a, int *n)
{
    *n = 0;
    if (o->pipe.offload != OFFLOAD_ACTIVATIONS || o->infer)
        return NULL;
    Pick k = {.p = p, .a = a, .M = p->sc->M, .outside = plan_read_outside(p->g, a)};
    positions(&k);
    Offload *list = NULL;
    int cap = 0;
    for (int s = 0; s < p->st->n; s++) {
        if (p->st->recompute[s])
            continue;
        for (uint32_t v = 0; v < p->g->nvalues; v++) {
            unsigned kinds;
            if (!kept(&k, v, s, &kinds))
                continue;
            int *out = arena_array(a, (size_t)k.M, sizeof(int));
            int *in = arena_array(a, (size_t)k.M, sizeof(int));
            if (!windows(&k, s, kinds, out, in))
                continue;
            if (*n == cap) {
                int grown = cap ? 2 * cap : 32;
                list = arena_grow(a, list, (size_t)cap, (size_t)grown, sizeof(Offload));
                cap = grown;
            }
            list[(*n)++] = (Offload){.value = v, .stage = s, .dev = plan_buf(p, v, s),
                                     .host = -1, .fetched = -1, .out_during = out,
                                     .in_during = in};
        }
    }
    return list;
}
