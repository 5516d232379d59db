/* verify.c — static checks of a step's plan, before any code is written.
 *
 * Happens-before is computed with vector clocks over the streams: op a
 * happens before op b when b's clock has seen a's position on a's stream.
 * Then:
 *   - every stream's operations can run (no wait cycle);
 *   - an action reading a received buffer for micro-batch mb happens after
 *     the copy that filled it for mb;
 *   - a copy's source slot is not written again (by the producer of the
 *     slot's next micro-batch) before the copy has ended, and its
 *     destination slot is not refilled before its readers are done;
 *   - with --clip-norm, every update happens after every action that
 *     finishes a gradient (the norm reads them all), and after every sum;
 *   - with replicas, a stage's sums run on one stream in bucket order
 *     (every process then calls the stage's communicator in the same
 *     order), after its last gradient action and before its update;
 *   - an offloaded value's copy out of micro-batch mb ends before the
 *     action after its window starts, and its copy back starts after the
 *     action before its window ends (share.c lets the actions outside the
 *     windows use the memory);
 *   - an offloaded weight's copy in ends before its window's first action
 *     and starts after the action two before it, and its copy back starts
 *     after the window's last action and ends before the action two after.
 * A failure is a bug in mpcc, reported as an internal error naming the
 * operations.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

typedef struct VC {
    const Plan *p;
    int *clock;      /* [nops * nstreams]: last position seen per stream, -1 */
} VC;

static int *clock_of(const VC *vc, int op)
{
    return &vc->clock[(size_t)op * vc->p->nstreams];
}

/* In issue order, every dependency and stream predecessor comes first. */
static void build_clocks(VC *vc)
{
    const Plan *p = vc->p;
    size_t n = (size_t)p->nops * p->nstreams;
    vc->clock = arena_array(p->g->arena, n + 1, sizeof(int));
    memset(vc->clock, 0xff, n * sizeof(int));
    int *last = arena_array(p->g->arena, (size_t)p->nstreams, sizeof(int));
    for (int s = 0; s < p->nstreams; s++)
        last[s] = -1;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        int *c = clock_of(vc, i);
        if (last[op->stream] >= 0)
            memcpy(c, clock_of(vc, last[op->stream]), (size_t)p->nstreams * sizeof(int));
        for (int k = 0; k < op->ndeps; k++) {
            if (op->deps[k] >= i)
                mpcc_die(__FILE__, __LINE__, "plan: operation %d waits for %d, issued later",
                         i, op->deps[k]);
            const int *d = clock_of(vc, op->deps[k]);
            for (int s = 0; s < p->nstreams; s++)
                if (d[s] > c[s])
                    c[s] = d[s];
        }
        if (last[op->stream] >= 0 && p->ops[last[op->stream]].pos >= op->pos)
            mpcc_die(__FILE__, __LINE__, "plan: stream %d issues position %d after %d",
                     op->stream, op->pos, p->ops[last[op->stream]].pos);
        c[op->stream] = op->pos;
        last[op->stream] = i;
    }
}

static bool before(const VC *vc, int a, int b)
{
    const PlanOp *x = &vc->p->ops[a];
    return clock_of(vc, b)[x->stream] >= x->pos && a != b;
}

const char *plan_describe_op(const Plan *p, int i)
{
    const PlanOp *op = &p->ops[i];
    static const char *const kinds[] = {"forward", "backward", "weight-gradient", "update"};
    if (op->kind == OPK_RUN)
        return arena_printf(p->g->arena, "#%d %s of stage %d, micro-batch %d", i,
                            kinds[op->act.kind], op->act.stage, op->act.mb);
    if (op->kind == OPK_SUM)
        return arena_printf(p->g->arena, "#%d sum over the replicas of stage %d's gradients, "
                            "bucket %d", i, op->act.stage, op->mb);
    const Buf *dst = &p->bufs[op->dst];
    if (plan_offload_copy(p, op->dst))
        return arena_printf(p->g->arena, "#%d copy of '%s' %s host memory, micro-batch %d", i,
                            p->g->values[dst->value].name, dst->host ? "to" : "back from",
                            op->mb);
    return arena_printf(p->g->arena, "#%d copy of '%s' to stage %d, micro-batch %d", i,
                        p->g->values[dst->value].name, dst->stage, op->mb);
}

static _Noreturn void fail(const Plan *p, const char *what, int a, int b)
{
    mpcc_die(__FILE__, __LINE__, "plan: %s: %s and %s", what, plan_describe_op(p, a), plan_describe_op(p, b));
}

/* Whether an action's nodes write (or read) buffer buf: found by scanning
 * (plans are small). */
static bool run_touches(const Plan *p, const PlanOp *op, int buf, bool write)
{
    size_t k = (size_t)op->act.stage * ACT_KINDS + op->act.kind;
    for (int j = 0; j < p->nnodes[k]; j++) {
        const Node *n = &p->g->nodes[p->nodes[k][j]];
        const uint32_t *vals = write ? n->out : n->in;
        uint32_t nv = write ? n->nout : n->nin;
        for (uint32_t q = 0; q < nv; q++)
            if (vals[q] != NONE && (write ? plan_buf(p, vals[q], op->act.stage)
                                          : plan_read(p, vals[q], op->act.stage, op->act.kind)) == buf)
                return true;
    }
    return false;
}

/* A recomputing backward writes its stage's forward values again, and
 * reads what its forward read. */
static bool recompute_touches(const Plan *p, const PlanOp *op, int buf, bool write)
{
    if (op->act.kind != ACT_BWD || !p->st->recompute[op->act.stage])
        return false;
    PlanOp fwd = *op;
    fwd.act.kind = ACT_FWD;
    return run_touches(p, &fwd, buf, write);
}

static void check_copy(const VC *vc, int c)
{
    const Plan *p = vc->p;
    const PlanOp *cp = &p->ops[c];
    int src_slots = p->bufs[cp->src].slots, dst_slots = p->bufs[cp->dst].slots;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind != OPK_RUN)
            continue;
        bool same_stage_src = op->act.stage == p->bufs[cp->src].stage;
        bool same_stage_dst = op->act.stage == p->bufs[cp->dst].stage;
        /* the source: written for mb before the copy, not for mb + slots
         * until it ends */
        if (same_stage_src && run_touches(p, op, cp->src, true)) {
            if (op->act.mb == cp->mb && !before(vc, i, c))
                fail(p, "a copy may read its source before it is written", i, c);
            if (op->act.mb == cp->mb + src_slots && !before(vc, c, i))
                fail(p, "a slot may be overwritten while a copy reads it", c, i);
        }
        if (same_stage_src && op->act.mb == cp->mb && recompute_touches(p, op, cp->src, true) &&
            !before(vc, c, i))
            fail(p, "a recomputation may rewrite a slot while a copy reads it", c, i);
        /* the destination: read for mb after the copy; the copy of mb must
         * wait for the readers of mb - slots */
        if (same_stage_dst && (run_touches(p, op, cp->dst, false) || recompute_touches(p, op, cp->dst, false))) {
            if (op->act.mb == cp->mb && !before(vc, c, i))
                fail(p, "an action may read a copied buffer before the copy fills it",
                     c, i);
            if (op->act.mb == cp->mb - dst_slots && !before(vc, i, c))
                fail(p, "a copy may refill a slot still being read", i, c);
        }
    }
}

/* The global norm: an update after the last backward and weight-gradient
 * action of every stage. */
static void check_norm(const VC *vc, int u)
{
    const Plan *p = vc->p;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind == OPK_RUN && op->act.mb == p->sc->M - 1 &&
            (op->act.kind == ACT_BWD || op->act.kind == ACT_WGRAD) && !before(vc, i, u))
            fail(p, "an update may read gradients not yet finished", i, u);
        if (op->kind == OPK_SUM && !before(vc, i, u))
            fail(p, "an update may read gradients not yet summed over the replicas", i, u);
    }
}

/* Whether the part of the stage's last gradient action that op r runs
 * writes a gradient of bucket bk (a node of its range produces one). */
static bool part_writes_bucket(const Plan *p, const PlanOp *r, const Bucket *bk)
{
    const Graph *g = p->g;
    int s = bk->stage, lo = r->part ? p->part_end[s][r->part - 1] : 0;
    size_t a = (size_t)s * ACT_KINDS + p->last_grad[s];
    const uint32_t *upd = p->nodes[(size_t)s * ACT_KINDS + ACT_UPDATE];
    for (int j = lo; j < p->part_end[s][r->part]; j++)
        for (int i = bk->first; i < bk->first + bk->count; i++) {
            if (p->nodes[a][j] == plan_grad_writer(p, g->nodes[upd[i]].in[0]))
                return true;
        }
    return false;
}

/* Sum op i of bucket b: on the stream of the stage's other sums, after
 * them, after every part of the stage's last gradient action that writes
 * its gradients (and the parts before), and before its update. */
static void check_sum(const VC *vc, int i, const int *prev)
{
    const Plan *p = vc->p;
    const PlanOp *op = &p->ops[i];
    int s = op->act.stage;
    if (prev[s] < 0 ? op->mb != 0
                    : op->mb != p->ops[prev[s]].mb + 1 || p->ops[prev[s]].stream != op->stream ||
                          !before(vc, prev[s], i))
        fail(p, "a stage's sums over the replicas may run out of bucket order",
             prev[s] < 0 ? i : prev[s], i);
    for (int k = 0; k < p->nops; k++) {
        const PlanOp *r = &p->ops[k];
        if (r->kind != OPK_RUN || r->act.stage != s)
            continue;
        bool grads = r->act.mb == p->sc->M - 1 &&
                     (r->act.kind == ACT_BWD || r->act.kind == ACT_WGRAD);
        if (grads && !before(vc, k, i) &&
            (r->act.kind != p->last_grad[s] || part_writes_bucket(p, r, &p->buckets[op->bucket])))
            fail(p, "a sum over the replicas may read gradients not yet finished", k, i);
        if (r->act.kind == ACT_UPDATE && !before(vc, i, k))
            fail(p, "an update may read gradients not yet summed over the replicas", i, k);
    }
}

/* The run op of action i of device dev's sequence. */
static int run_at(const Plan *p, int dev, int i)
{
    Act a = p->sc->seq[dev][i];
    for (int k = 0; k < p->nops; k++) {
        const PlanOp *op = &p->ops[k];
        if (op->kind == OPK_RUN && op->act.kind == a.kind && op->act.stage == a.stage &&
            op->act.mb == a.mb)
            return k;
    }
    mpcc_die(__FILE__, __LINE__, "plan: no operation runs action %d of device %d", i, dev);
}

/* The copy op filling buffer dst for micro-batch mb. */
static int copy_into(const Plan *p, int dst, int mb)
{
    for (int k = 0; k < p->nops; k++)
        if (p->ops[k].kind == OPK_COPY && p->ops[k].dst == dst && p->ops[k].mb == mb)
            return k;
    mpcc_die(__FILE__, __LINE__, "plan: no copy fills '%s' for micro-batch %d",
             p->g->values[p->bufs[dst].value].name, mb);
}

static void check_windows(const VC *vc, const Offload *f)
{
    const Plan *p = vc->p;
    int dev = p->bufs[f->dev].dev;
    for (int mb = 0; mb < p->sc->M; mb++) {
        int out = copy_into(p, f->host, mb), in = copy_into(p, f->fetched, mb);
        if (f->out_during[mb] + 1 < p->sc->nseq[dev]) {
            int after = run_at(p, dev, f->out_during[mb] + 1);
            if (!before(vc, out, after))
                fail(p, "an action may reuse an offloaded value's memory while it is copied out",
                     out, after);
        }
        if (f->in_during[mb] > 0) {
            int prior = run_at(p, dev, f->in_during[mb] - 1);
            if (!before(vc, prior, in))
                fail(p, "an offloaded value may come back into memory still in use", prior, in);
        }
        if (!before(vc, out, in))
            fail(p, "an offloaded value may come back before it went out", out, in);
    }
}

/* An offloaded weight comes in before its window's first action and
 * after the action two before (the one before runs beside it), and after
 * its previous change went out; a change goes out after the window's last
 * action and before the action after the one it runs beside. The ops are
 * found by their fields: plan_order renumbered them. */
static void check_streamed(const VC *vc, const Streamed *w)
{
    const Plan *p = vc->p;
    int dev = p->bufs[w->dev].dev, n = p->sc->nseq[dev];
    for (int k = 0; k < w->nwin; k++) {
        int in = copy_into(p, w->dev, k), first = run_at(p, dev, w->first[k]);
        if (!before(vc, in, first))
            fail(p, "an action may read an offloaded weight before it comes in", in, first);
        if (w->first[k] >= 2 && !before(vc, run_at(p, dev, w->first[k] - 2), in))
            fail(p, "an offloaded weight may come in over memory still in use",
                 run_at(p, dev, w->first[k] - 2), in);
        if (k > 0 && w->written[k - 1] && !before(vc, copy_into(p, w->host, k - 1), in))
            fail(p, "an offloaded weight may come in before its last change went out",
                 copy_into(p, w->host, k - 1), in);
        if (!w->written[k])
            continue;
        int out = copy_into(p, w->host, k), last = run_at(p, dev, w->last[k]);
        if (!before(vc, last, out))
            fail(p, "an offloaded weight may go out before its window changes it", last, out);
        if (w->last[k] + 2 < n && !before(vc, out, run_at(p, dev, w->last[k] + 2)))
            fail(p, "an action may reuse an offloaded weight's memory while it goes out", out,
                 run_at(p, dev, w->last[k] + 2));
    }
}

/* ---- copies beside actions: no shared memory between them ---- */

/* The memory of buffer b's slot for micro-batch mb. */
typedef struct MemSpan {
    size_t lo, hi;
    int buf;
} MemSpan;

static MemSpan slot_span(const Plan *p, int b, int mb)
{
    const Buf *bf = &p->bufs[b];
    size_t lo = bf->offset + (size_t)(mb % bf->slots) * bf->bytes;
    return (MemSpan){lo, lo + bf->bytes, b};
}

typedef struct Touched {
    const Plan *p;
    Arena *a;
    MemSpan *s;
    int n, cap;
} Touched;

static void note_touch(void *ctx, int b, int mb, int pos, bool write, uint32_t node)
{
    Touched *t = ctx;
    (void)pos, (void)write, (void)node;
    if (!t->p->bufs[b].turns)
        return;   /* memory of its own: check_copy covers it */
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        t->s = arena_grow(t->a, t->s, (size_t)t->n, (size_t)cap, sizeof(MemSpan));
        t->cap = cap;
    }
    t->s[t->n++] = slot_span(t->p, b, mb);
}

/* An offload copy's device-side slot must not meet the memory of any
 * buffer an action that may run beside it touches (one neither before nor
 * after it): the copy and the action would race. */
static void check_beside(const VC *vc, int c)
{
    const Plan *p = vc->p;
    const PlanOp *cp = &p->ops[c];
    int t = p->bufs[cp->dst].host ? cp->src : cp->dst;
    if (!p->bufs[t].turns)
        return;
    MemSpan mine = slot_span(p, t, cp->mb);
    for (int i = 0; i < p->sc->nseq[cp->dev]; i++) {
        int r = run_at(p, cp->dev, i);
        if (before(vc, r, c) || before(vc, c, r))
            continue;
        Touched tc = {.p = p, .a = p->g->arena};
        plan_walk_action(p, cp->dev, i, note_touch, &tc);
        for (int k = 0; k < tc.n; k++)
            if (tc.s[k].buf != t && tc.s[k].lo < mine.hi && mine.lo < tc.s[k].hi)
                mpcc_die(__FILE__, __LINE__, "plan: %s may run beside %s, which uses its "
                         "memory for '%s'", plan_describe_op(p, c), plan_describe_op(p, r),
                         p->g->values[p->bufs[tc.s[k].buf].value].name);
    }
}

static int by_span(const void *x, const void *y)
{
    const MemSpan *a = x, *b = y;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Two offload copies whose device-side slots meet must be ordered: one
 * ends before the other starts (buf: the copy's op here). */
static void check_copy_pairs(const VC *vc)
{
    const Plan *p = vc->p;
    MemSpan *s = arena_array(p->g->arena, (size_t)p->nops + 1, sizeof(MemSpan));
    int n = 0;
    for (int c = 0; c < p->nops; c++) {
        const PlanOp *cp = &p->ops[c];
        if (cp->kind != OPK_COPY || !plan_offload_copy(p, cp->dst))
            continue;
        int t = p->bufs[cp->dst].host ? cp->src : cp->dst;
        MemSpan m = slot_span(p, t, cp->mb);
        m.lo += (size_t)p->bufs[t].dev << 48;   /* one device's arena apart from another's */
        m.hi += (size_t)p->bufs[t].dev << 48;
        m.buf = c;
        s[n++] = m;
    }
    qsort(s, (size_t)n, sizeof *s, by_span);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n && s[j].lo < s[i].hi; j++)
            if (!before(vc, s[i].buf, s[j].buf) && !before(vc, s[j].buf, s[i].buf))
                fail(p, "two offload copies may run at once on the same memory", s[i].buf,
                     s[j].buf);
}

void plan_verify(const Plan *p)
{
    VC vc = {.p = p};
    build_clocks(&vc);
    for (int i = 0; i < p->noffl; i++)
        check_windows(&vc, &p->offl[i]);
    for (int i = 0; i < p->nwofl; i++)
        check_streamed(&vc, &p->wofl[i]);
    check_copy_pairs(&vc);
    int *prev = arena_array(p->g->arena, (size_t)p->st->n + 1, sizeof(int));   /* check_sum */
    memset(prev, 0xff, ((size_t)p->st->n + 1) * sizeof(int));
    for (int i = 0; i < p->nops; i++) {
        if (p->ops[i].kind == OPK_SUM) {
            check_sum(&vc, i, prev);
            prev[p->ops[i].act.stage] = i;
            continue;
        }
        if (p->ops[i].kind == OPK_COPY && plan_offload_copy(p, p->ops[i].dst))
            check_beside(&vc, i);
        if (p->ops[i].kind == OPK_COPY && p->bufs[p->ops[i].dst].streamed)
            continue;   /* check_streamed */
        if (p->ops[i].kind == OPK_COPY)
            check_copy(&vc, i);
        else if (p->global_norm && p->ops[i].act.kind == ACT_UPDATE)
            check_norm(&vc, i);
    }
}
