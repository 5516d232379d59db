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
 * Weights and optimizer state (--offload=weights) live in host memory
 * between steps. On the device a weight is needed only by the actions of
 * its stage that touch it: its windows are the runs of those actions in
 * the device's sequence, split where two actions that touch it have two
 * or more others between them. The weight comes in while the action
 * before a window runs and, when the window writes it (the update, a
 * batch norm's running statistics), goes back while the action after
 * runs. A weight is offloaded when its windows and their copies leave at
 * least one action of the device without it. So a device that runs one
 * stage keeps its weights (its forward and backward read them, one action
 * after another) but not their optimizer state (only the update reads it);
 * one that runs several stages keeps only the stage at work's.
 *
 * plan.c makes the buffers and the copies; verify.c proves that each copy
 * runs inside its window; verify_memory.c replays the windows.
 */
#include "mpcc.h"

#include <stdlib.h>
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

/* The kinds of stage s's actions whose nodes read buffer b (every value
 * it holds: a reshape in place shares its input's, plan.c): a bit per
 * ActKind. */
static unsigned readers(const Pick *k, int b, int s)
{
    const Plan *p = k->p;
    unsigned kinds = 0;
    for (int kind = 0; kind < ACT_KINDS; kind++) {
        size_t at = (size_t)s * ACT_KINDS + kind;
        for (int j = 0; j < p->nnodes[at]; j++) {
            const Node *n = &p->g->nodes[p->nodes[at][j]];
            for (uint32_t q = 0; q < n->nin; q++)
                if (n->in[q] != NONE && plan_buf(p, n->in[q], s) == b)
                    kinds |= 1u << kind;
        }
    }
    return kinds;
}

/* A forward activation of stage s that its backward reads (itself, or a
 * reshape of it in its buffer), the first value of its buffer. */
static bool kept(const Pick *k, uint32_t v, int s, unsigned *kinds)
{
    const Graph *g = k->p->g;
    const Value *val = &g->values[v];
    int b = plan_buf(k->p, v, s);
    if (val->kind != VK_ACTIVATION || val->producer == NONE || k->outside[v] ||
        k->p->st->stage[val->producer] != s || k->p->st->act[val->producer] != ACT_FWD ||
        b < 0 || k->p->bufs[b].value != v)
        return false;
    *kinds = readers(k, b, s) & (1u << ACT_BWD | 1u << ACT_WGRAD);
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
    if (!offloads_activations(o->pipe.offload) || o->infer)
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

/* ---- weights ---- */

/* Per value and ActKind, whether an action of its home stage reads
 * (bit 0) or writes (bit 1) its buffer; an update changes in place what it
 * reads but the gradient. */
static uint8_t *weight_touches(const Plan *p, Arena *a)
{
    const Graph *g = p->g;
    uint8_t *t = arena_array(a, (size_t)g->nvalues * ACT_KINDS, 1);
    for (int s = 0; s < p->st->n; s++)
        for (int kind = 0; kind < ACT_KINDS; kind++) {
            size_t at = (size_t)s * ACT_KINDS + kind;
            for (int j = 0; j < p->nnodes[at]; j++) {
                const Node *n = &g->nodes[p->nodes[at][j]];
                for (uint32_t q = 0; q < n->nin; q++)
                    if (n->in[q] != NONE)
                        t[(size_t)n->in[q] * ACT_KINDS + kind] |= kind == ACT_UPDATE ? 3 : 1;
                for (uint32_t q = 0; q < n->nout; q++) {   /* running statistics: aliases */
                    int b = n->out[q] != NONE ? plan_buf(p, n->out[q], s) : -1;
                    if (b >= 0)
                        t[(size_t)p->bufs[b].value * ACT_KINDS + kind] |= 2;
                }
            }
        }
    return t;
}

/* What action a of the device does with the weight v: bits as above (a
 * recomputing backward reruns the forward). */
static unsigned touch_of(const Plan *p, const uint8_t *t, uint32_t v, Act a)
{
    unsigned bits = t[(size_t)v * ACT_KINDS + a.kind];
    if (a.kind == ACT_BWD && p->st->recompute[a.stage])
        bits |= t[(size_t)v * ACT_KINDS + ACT_FWD];
    return bits;
}

static bool weight_kind(const Plan *p, uint32_t v, int s)
{
    const Value *val = &p->g->values[v];
    if ((val->kind != VK_PARAM && val->kind != VK_STATE) || p->st->home[v] != s)
        return false;
    int b = plan_buf(p, v, s);
    return b >= 0 && !plan_sent(p, &p->bufs[b]) && !p->bufs[b].acc;
}

/* The windows of weight v on its stage's device; false when they and
 * their copies leave no action without it. */
static bool weight_windows(const Plan *p, const uint8_t *t, uint32_t v, Streamed *w, Arena *a)
{
    int s = p->st->home[v], dev = p->st->dev[s], n = p->sc->nseq[dev];
    w->first = arena_array(a, (size_t)n + 1, sizeof(int));
    w->last = arena_array(a, (size_t)n + 1, sizeof(int));
    w->written = arena_array(a, (size_t)n + 1, sizeof(bool));
    w->nwin = 0;
    for (int i = 0; i < n; i++) {
        Act act = p->sc->seq[dev][i];
        unsigned bits = act.stage == s ? touch_of(p, t, v, act) : 0;
        if (!bits)
            continue;
        w->forward |= act.kind == ACT_FWD;
        int k = w->nwin;
        if (k == 0 || i - w->last[k - 1] >= 3)
            w->first[w->nwin++] = i, k++;
        w->last[k - 1] = i;
        w->written[k - 1] |= (bits & 2) != 0;
    }
    int held = 0;   /* actions during which the device holds it */
    for (int k = 0; k < w->nwin; k++) {
        int lo = streamed_fetch_during(w, k), hi = w->last[k];
        if (w->written[k] && streamed_evict_during(w, k) < n)
            hi++;
        held += hi - lo + 1;
    }
    return w->nwin > 0 && held < n;
}

/* [nvalues]: the first node in order that reads each value, NONE if none. */
static uint32_t *first_readers(const Graph *g, Arena *a)
{
    uint32_t *r = arena_array(a, g->nvalues, sizeof(uint32_t));
    memset(r, 0xff, g->nvalues * sizeof(uint32_t));
    for (uint32_t i = g->norder; i-- > 0;) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                r[n->in[k]] = g->order[i];
    }
    return r;
}

Streamed *offload_weights(const Plan *p, const Options *o, Arena *a, int *n)
{
    *n = 0;
    if (!offloads_weights(o->pipe.offload) || o->infer)
        return NULL;
    uint8_t *t = weight_touches(p, a);
    uint32_t *reader = first_readers(p->g, a);
    Streamed *list = arena_array(a, (size_t)p->g->nvalues + 1, sizeof(Streamed));
    for (uint32_t v = 0; v < p->g->nvalues; v++) {
        int s = p->st->home[v];
        if (s < 0 || !weight_kind(p, v, s))
            continue;
        Streamed w = {.value = v, .stage = s, .dev = plan_buf(p, v, s), .host = -1,
                      .reader = reader[v]};
        if (weight_windows(p, t, v, &w, a))
            list[(*n)++] = w;
    }
    return list;
}

/* ---- fewer: auto's trimming ---- */

typedef struct Ranked {
    size_t bytes;
    uint32_t value;
    int at;              /* index in its list; activations first, then weights */
} Ranked;

static int by_size(const void *x, const void *y)
{
    const Ranked *a = x, *b = y;
    if (a->bytes != b->bytes)
        return a->bytes < b->bytes ? 1 : -1;
    if (a->value != b->value)
        return a->value < b->value ? -1 : 1;
    return a->at - b->at;
}

void offload_trim(const Plan *p, Offload *acts, int *nacts, Streamed *weights, int *nweights,
                  int keep)
{
    int n = *nacts + *nweights;
    if (keep >= n)
        return;
    Arena *a = p->g->arena;
    Ranked *r = arena_array(a, (size_t)n + 1, sizeof(Ranked));
    for (int i = 0; i < *nacts; i++)
        r[i] = (Ranked){p->bufs[acts[i].dev].bytes * (size_t)p->bufs[acts[i].dev].slots,
                        acts[i].value, i};
    for (int i = 0; i < *nweights; i++)
        r[*nacts + i] = (Ranked){p->bufs[weights[i].dev].bytes, weights[i].value, *nacts + i};
    qsort(r, (size_t)n, sizeof *r, by_size);
    bool *kept = arena_array(a, (size_t)n + 1, sizeof(bool));
    for (int i = 0; i < keep; i++)
        kept[r[i].at] = true;
    int na = 0, nw = 0;
    for (int i = 0; i < *nacts; i++)
        if (kept[i])
            acts[na++] = acts[i];
    for (int i = 0; i < *nweights; i++)
        if (kept[*nacts + i])
            weights[nw++] = weights[i];
    *nacts = na, *nweights = nw;
}
