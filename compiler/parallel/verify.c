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
 *     finishes a gradient (the norm reads them all);
 *   - an offloaded value's copy out of micro-batch mb ends before the
 *     action after its window starts, and its copy back starts after the
 *     action before its window ends (share.c lets the actions outside the
 *     windows use the memory).
 * A failure is a bug in mpcc, reported as an internal error naming the
 * operations.
 */
#include "mpcc.h"

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

void plan_verify(const Plan *p)
{
    VC vc = {.p = p};
    build_clocks(&vc);
    for (int i = 0; i < p->noffl; i++)
        check_windows(&vc, &p->offl[i]);
    for (int i = 0; i < p->nops; i++) {
        if (p->ops[i].kind == OPK_COPY)
            check_copy(&vc, i);
        else if (p->global_norm && p->ops[i].act.kind == ACT_UPDATE)
            check_norm(&vc, i);
    }
}
