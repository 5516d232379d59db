/* share.c — buffers whose contents are never alive at the same time on a
 * device share its memory: the memory plan's offsets.
 *
 * A device's compute stream runs its actions in schedule order and each
 * action its nodes in order (a recomputing backward first runs its stage's
 * forward again); a fused chain runs where its last node runs and reads
 * every input of the chain there (fuse.c). Numbering these runs gives each
 * read and write of a buffer a position. A micro-batch's content of a
 * buffer lives from a write to the last read before the next write, so a
 * buffer's life is a set of intervals; two buffers whose intervals never
 * meet may overlap in memory. A node's reads and writes share a position,
 * so no node's output overlaps one of its inputs.
 *
 * Only buffers that nothing but the nodes on the compute stream touch
 * share: activations that no copy sends or receives, that the host does
 * not read (graph outputs, the loss, what evaluation reads: the loss
 * node's inputs and outputs) and that no code reads after an action's
 * nodes (parameters' gradients, summed and clipped there). An offloaded
 * value's device buffers share too: its copies run inside windows of the
 * compute stream, which the walk marks (a read where the copy out's window
 * ends, a write where the copy back's begins), and so do an offloaded
 * weight's (a write where its copy in runs, a read where its copy back
 * does). Each is placed,
 * largest first, at the lowest offset free over its whole life (first fit),
 * after the buffers that keep memory of their own. verify_memory.c replays
 * the step against the offsets.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

/* ---- the touches of a step, in the order a device's compute stream makes them ---- */

/* The buffer input k of node n reads on stage s in an action of `kind`:
 * an update reads the sum of the micro-batches' gradients when there is
 * one, a backward the fetched copy of an offloaded value (plan.c). */
static int read_buf(const Plan *p, const Node *n, uint32_t k, int s, int kind)
{
    if (n->phase == PH_UPDATE && k == 1 && p->acc_of[n->in[0]] >= 0)
        return p->acc_of[n->in[0]];
    return plan_read(p, n->in[k], s, kind);
}

/* Node id runs (alone, or as the last node of a chain): its reads, then
 * its writes. A chain reads the inputs of all its nodes but the values
 * its own nodes compute, which are never written. */
static void walk_node(const Plan *p, uint32_t id, Act a, int kind, int pos, TouchFn fn,
                      void *ctx)
{
    const Graph *g = p->g;
    const Fusion *fu = p->fu;
    for (uint32_t m = id; m != NONE; m = fu ? fu->prev[m] : NONE) {
        const Node *n = &g->nodes[m];
        for (uint32_t k = 0; k < n->nin; k++) {
            uint32_t v = n->in[k], pn = v != NONE ? g->values[v].producer : NONE;
            if (v != NONE && !(fu && pn != NONE && fu->tail[pn] == id))
                fn(ctx, read_buf(p, n, k, a.stage, kind), a.mb, pos, false, m);
        }
    }
    const Node *n = &g->nodes[id];
    for (uint32_t k = 0; k < n->nout; k++)
        if (n->out[k] != NONE)
            fn(ctx, plan_buf(p, n->out[k], a.stage), a.mb, pos, true, id);
}

/* After the nodes of an action finishing parameters' gradients, code
 * reads them (codegen.c: the sum over micro-batches, the squared norm). */
static void walk_gradients(const Plan *p, Act a, int kind, int pos, TouchFn fn, void *ctx)
{
    const Graph *g = p->g;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (!val->trainable || val->grad == NONE || p->st->home[v] != a.stage ||
            g->values[val->grad].producer == NONE ||
            p->st->act[g->values[val->grad].producer] != kind)
            continue;
        int b = plan_buf(p, val->grad, a.stage);
        if (b >= 0)
            fn(ctx, b, a.mb, pos, false, g->values[val->grad].producer);
    }
}

static void walk_action(const Plan *p, Act a, int kind, int *pos, TouchFn fn, void *ctx)
{
    size_t k = (size_t)a.stage * ACT_KINDS + kind;
    for (int i = 0; i < p->nnodes[k]; i++) {
        uint32_t id = p->nodes[k][i];
        if (p->fu && p->fu->tail[id] != NONE)
            continue;   /* runs inside its chain's last node */
        walk_node(p, id, a, kind, (*pos)++, fn, ctx);
    }
    if (kind == ACT_BWD || kind == ACT_WGRAD)
        walk_gradients(p, a, kind, (*pos)++, fn, ctx);
}

/* The copies of offloaded values whose window is action i of device dev:
 * back ones write their fetched buffer as it starts, ones out read the
 * device's buffer as it ends (node: the value's producer). */
static void walk_windows(const Plan *p, int dev, int i, bool back, int *pos, TouchFn fn,
                         void *ctx)
{
    for (int k = 0; k < p->noffl; k++) {
        const Offload *f = &p->offl[k];
        if (p->bufs[f->dev].dev != dev)
            continue;
        for (int mb = 0; mb < p->sc->M; mb++)
            if ((back ? f->in_during : f->out_during)[mb] == i)
                fn(ctx, back ? f->fetched : f->dev, mb, (*pos)++, back,
                   p->g->values[f->value].producer);
    }
}

/* The copies of offloaded weights that run beside action i of device dev
 * (i = nseq: after the last): copies in write the device's buffer as it
 * starts, copies back read it as it ends (node: the first that reads it). */
static void walk_weights(const Plan *p, int dev, int i, bool in, int *pos, TouchFn fn,
                         void *ctx)
{
    for (int k = 0; k < p->nwofl; k++) {
        const Streamed *w = &p->wofl[k];
        if (p->bufs[w->dev].dev != dev)
            continue;
        for (int j = 0; j < w->nwin; j++)
            if (in ? streamed_fetch_during(w, j) == i
                   : w->written[j] && streamed_evict_during(w, j) == i)
                fn(ctx, w->dev, 0, (*pos)++, in, w->reader);
    }
}

/* Action i's own nodes (a recomputing backward first reruns the forward). */
static void walk_nodes(const Plan *p, int dev, int i, int *pos, TouchFn fn, void *ctx)
{
    Act a = p->sc->seq[dev][i];
    if (a.kind == ACT_BWD && p->st->recompute[a.stage])
        walk_action(p, a, ACT_FWD, pos, fn, ctx);   /* the forward it reruns */
    walk_action(p, a, a.kind, pos, fn, ctx);
}

void plan_walk(const Plan *p, int dev, TouchFn fn, void *ctx)
{
    int pos = 0, n = p->sc->nseq[dev];
    for (int i = 0; i < n; i++) {
        walk_weights(p, dev, i, true, &pos, fn, ctx);
        walk_windows(p, dev, i, true, &pos, fn, ctx);
        walk_nodes(p, dev, i, &pos, fn, ctx);
        walk_windows(p, dev, i, false, &pos, fn, ctx);
        walk_weights(p, dev, i, false, &pos, fn, ctx);
    }
    walk_weights(p, dev, n, false, &pos, fn, ctx);
}

void plan_walk_action(const Plan *p, int dev, int i, TouchFn fn, void *ctx)
{
    int pos = 0;
    walk_nodes(p, dev, i, &pos, fn, ctx);
}

/* ---- which buffers may share ---- */

/* Whether v is the output of a node that runs in evaluation alone
 * (graph/loss.c): the host reads it right after the evaluation's forward
 * pass, which nothing follows, so that its buffer is a forward value's,
 * taken by others in a training step's backward pass. */
static bool evaluation_output(const Graph *g, uint32_t v)
{
    uint32_t p = g->values[v].producer;
    return p != NONE && eval_only(&g->nodes[p]);
}

bool *plan_read_outside(const Graph *g, Arena *a)
{
    bool *out = arena_array(a, g->nvalues, sizeof(bool));
    for (uint32_t v = 0; v < g->nvalues; v++)
        out[v] |= g->values[v].is_output && !evaluation_output(g, v);
    if (g->scores != NONE && !evaluation_output(g, g->scores))
        out[g->scores] = true;   /* evaluation scores them */
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].trainable && g->values[v].grad != NONE)
            out[g->values[v].grad] = true;
    if (g->loss != NONE && g->values[g->loss].producer != NONE) {
        const Node *n = &g->nodes[g->values[g->loss].producer];
        for (uint32_t k = 0; k < n->nin; k++)   /* but the scores of an Add it took in */
            if (n->in[k] != NONE && (k != 0 || !attr_int(n, "mpcc_bias", 0)))
                out[n->in[k]] = true;
        for (uint32_t k = 0; k < n->nout; k++)
            if (n->out[k] != NONE)
                out[n->out[k]] = true;
    }
    return out;
}

bool plan_sent(const Plan *p, const Buf *bf)
{
    for (int s = 0; s < p->st->n; s++)
        if (s != bf->stage && plan_buf(p, bf->value, s) >= 0)
            return true;
    return false;
}

/* An offloaded value's buffers on the device share too: their copies run
 * inside windows of the compute stream (plan_walk), and the host's never. */
static bool may_share(const Plan *p, int b, const bool *outside)
{
    const Buf *bf = &p->bufs[b];
    bool fetched = bf->from >= 0 && p->bufs[bf->from].host;
    if (bf->streamed)
        return !bf->host;
    return p->g->values[bf->value].kind == VK_ACTIVATION && !bf->received && !bf->acc &&
           !bf->host && !outside[bf->value] &&
           (plan_buf(p, bf->value, bf->stage) == b || fetched) && !plan_sent(p, bf);
}

/* ---- lives ---- */

typedef struct Interval {
    int start, end;
} Interval;

typedef struct Life {
    Interval *span;
    int n, cap;
} Life;

typedef struct Lives {
    const Plan *p;
    Arena *a;
    Life *life;      /* [nbufs] */
    int *open;       /* [nbufs * M]: the span of a micro-batch's current content, -1 */
    bool *outside;   /* [nbufs]: read before any write: its content comes from outside */
} Lives;

static void live_touch(void *ctx, int b, int mb, int pos, bool write, uint32_t node)
{
    Lives *L = ctx;
    Life *l = &L->life[b];
    if (L->p->bufs[b].streamed)
        mb = 0;   /* a weight: one content for every micro-batch */
    int *open = &L->open[(size_t)b * L->p->sc->M + mb];
    (void)node;
    if (!write && *open < 0) {
        L->outside[b] = true;
        return;
    }
    if (!write) {
        l->span[*open].end = pos;
        return;
    }
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        l->span = arena_grow(L->a, l->span, (size_t)l->n, (size_t)cap, sizeof(Interval));
        l->cap = cap;
    }
    l->span[l->n] = (Interval){pos, pos};
    *open = l->n++;
}

/* Spans come in order of start; merged into disjoint ones. */
static void merge_spans(Life *l)
{
    int n = 0;
    for (int i = 0; i < l->n; i++) {
        if (n && l->span[i].start <= l->span[n - 1].end) {
            if (l->span[i].end > l->span[n - 1].end)
                l->span[n - 1].end = l->span[i].end;
        } else {
            l->span[n++] = l->span[i];
        }
    }
    l->n = n;
}

static bool lives_meet(const Life *x, const Life *y)
{
    int i = 0, j = 0;
    while (i < x->n && j < y->n) {
        if (x->span[i].end < y->span[j].start)
            i++;
        else if (y->span[j].end < x->span[i].start)
            j++;
        else
            return true;
    }
    return false;
}

/* ---- placement ---- */

typedef struct Range {
    size_t lo, hi;
} Range;

static int by_lo(const void *x, const void *y)
{
    const Range *a = x, *b = y;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

int sized_largest_first(const void *x, const void *y)
{
    const Sized *a = x, *b = y;
    if (a->bytes != b->bytes)
        return a->bytes < b->bytes ? 1 : -1;
    return (a->buf > b->buf) - (a->buf < b->buf);
}

static size_t block(const Plan *p, int b)
{
    return p->bufs[b].bytes * (size_t)p->bufs[b].slots;
}

/* The lowest offset where order[i] fits beside the placed buffers whose
 * lives meet its own; busy is scratch for i ranges. */
static size_t first_fit(const Plan *p, const Life *life, const Sized *order, int i,
                        Range *busy)
{
    int b = order[i].buf, nbusy = 0;
    for (int j = 0; j < i; j++) {
        int c = order[j].buf;
        if (lives_meet(&life[b], &life[c]))
            busy[nbusy++] = (Range){p->bufs[c].offset, p->bufs[c].offset + order[j].bytes};
    }
    qsort(busy, (size_t)nbusy, sizeof(Range), by_lo);
    size_t off = 0;
    for (int k = 0; k < nbusy && busy[k].lo < off + order[i].bytes; k++)
        if (busy[k].hi > off)
            off = busy[k].hi;
    return off;
}

/* Device d's sharing buffers, placed from its arena's end. */
static void place_shared(Plan *p, const Life *life, const bool *share, int d, Arena *a)
{
    Sized *order = arena_array(a, (size_t)p->nbufs, sizeof(Sized));
    int n = 0;
    for (int b = 0; b < p->nbufs; b++)
        if (share[b] && p->bufs[b].dev == d)
            order[n++] = (Sized){block(p, b), b};
    qsort(order, (size_t)n, sizeof(Sized), sized_largest_first);
    Range *busy = arena_array(a, (size_t)n + 1, sizeof(Range));
    size_t base = p->arena_bytes[d], end = 0, apart = 0;
    for (int i = 0; i < n; i++) {
        Buf *bf = &p->bufs[order[i].buf];
        bf->turns = true;
        bf->offset = first_fit(p, life, order, i, busy);
        if (bf->offset + order[i].bytes > end)
            end = bf->offset + order[i].bytes;
        apart += order[i].bytes;
    }
    for (int i = 0; i < n; i++)
        p->bufs[order[i].buf].offset += base;
    p->arena_bytes[d] = base + end;
    p->shared_bytes[d] = end;
    p->shared_apart[d] = apart;
}

/* Lives of every buffer; share[b]: b may share memory. */
static Life *lives(const Plan *p, Arena *a, bool *share)
{
    Lives L = {.p = p, .a = a};
    L.life = arena_array(a, (size_t)p->nbufs, sizeof(Life));
    L.open = arena_array(a, (size_t)p->nbufs * p->sc->M, sizeof(int));
    L.outside = arena_array(a, (size_t)p->nbufs, sizeof(bool));
    memset(L.open, 0xff, (size_t)p->nbufs * p->sc->M * sizeof(int));
    for (int d = 0; d < p->sc->ndev; d++)
        plan_walk(p, d, live_touch, &L);
    bool *outside = plan_read_outside(p->g, a);
    for (int b = 0; b < p->nbufs; b++) {
        merge_spans(&L.life[b]);
        share[b] = may_share(p, b, outside) && !L.outside[b];
    }
    return L.life;
}

typedef struct Step {
    int pos;
    long long bytes;   /* + where an interval starts, - after it ends */
} Step;

static int by_pos(const void *x, const void *y)
{
    const Step *a = x, *b = y;
    if (a->pos != b->pos)
        return (a->pos > b->pos) - (a->pos < b->pos);
    return (a->bytes > b->bytes) - (a->bytes < b->bytes);   /* ends first */
}

/* Per stage, the most its buffers taking turns hold at once. */
static void stage_peaks(Plan *p, const Life *life, Arena *a)
{
    p->stage_turns = arena_array(a, (size_t)p->st->n, sizeof(size_t));
    size_t n = 0;
    for (int b = 0; b < p->nbufs; b++)
        n += p->bufs[b].turns ? 2 * (size_t)life[b].n : 0;
    Step *ev = arena_array(a, n + 1, sizeof(Step));
    for (int s = 0; s < p->st->n; s++) {
        size_t k = 0;
        for (int b = 0; b < p->nbufs; b++)
            for (int i = 0; p->bufs[b].turns && p->bufs[b].stage == s && i < life[b].n; i++) {
                long long bytes = (long long)block(p, b);
                ev[k++] = (Step){life[b].span[i].start, bytes};
                ev[k++] = (Step){life[b].span[i].end + 1, -bytes};
            }
        qsort(ev, k, sizeof(Step), by_pos);
        long long held = 0, most = 0;
        for (size_t i = 0; i < k; i++)
            if ((held += ev[i].bytes) > most)
                most = held;
        p->stage_turns[s] = (size_t)most;
    }
}

void plan_place(Plan *p, Arena *a)
{
    int ndev = p->sc->ndev;
    bool *share = arena_array(a, (size_t)p->nbufs, sizeof(bool));
    Life *life = lives(p, a, share);
    p->arena_bytes = arena_array(a, (size_t)ndev, sizeof(size_t));
    p->host_bytes = arena_array(a, (size_t)ndev, sizeof(size_t));
    p->shared_bytes = arena_array(a, (size_t)ndev, sizeof(size_t));
    p->shared_apart = arena_array(a, (size_t)ndev, sizeof(size_t));
    for (int b = 0; b < p->nbufs; b++)
        if (!share[b]) {
            Buf *bf = &p->bufs[b];
            size_t *end = bf->host ? &p->host_bytes[bf->dev] : &p->arena_bytes[bf->dev];
            bf->offset = *end;
            *end += block(p, b);
        }
    for (int d = 0; d < ndev; d++)
        place_shared(p, life, share, d, a);
    stage_peaks(p, life, a);
}
