/* pipeline.c — chooses how a step is spread over the devices: the stages,
 * the schedule and the micro-batch count.
 *
 * With --schedule=auto (the default) and no --microbatches, every schedule
 * that applies is planned for each micro-batch count M (powers of two that
 * divide the batch, up to 4 per stage) and simulated; the fastest whose
 * memory plan fits every device wins. A fixed schedule or M narrows the
 * search; an invalid combination given explicitly is an error with the fix.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

typedef struct Candidate {
    SchedKind kind;
    int M;
} Candidate;

static bool fits(const Plan *p, const Devices *ds, int *worst)
{
    for (int d = 0; d < ds->n; d++)
        if ((int64_t)p->arena_bytes[d] > ds->d[d].prof.memory) {
            *worst = d;
            return false;
        }
    return true;
}

/* The stage's backward reruns its forward: it costs a forward more. */
static void set_recompute(Stages *st, int s)
{
    if (st->recompute[s])
        return;
    st->recompute[s] = true;
    st->time[s * ACT_KINDS + ACT_BWD] += st->time[s * ACT_KINDS + ACT_FWD];
}

/* Plans one candidate on graph g. NULL (and *why) when it cannot run. */
static Pipeline *plan_one(Arena *a, Graph *g, const Options *o, const Devices *ds,
                          const Measured *measured, Candidate c, const char **why)
{
    Pipeline *pl = arena_alloc(a, sizeof *pl);
    pl->g = g;
    pl->opt = *o;
    pl->ds = *ds;
    if (c.kind == SCHED_ZB && o->pipe.recompute != RECOMPUTE_NONE) {
        *why = "--recompute does not combine with the zb schedule";
        return NULL;
    }
    if (c.kind == SCHED_INTERLEAVED && o->pipe.virt < 2) {
        *why = "the interleaved schedule needs --virtual-stages of 2 or more";
        return NULL;
    }
    Stages *st = stages_build(g, o, &pl->ds, measured, c.kind, o->pipe.virt, c.M);
    pl->st = st;
    pl->sc = schedule_build(a, c.kind, pl->st, ds->n, c.M, why);
    if (!pl->sc)
        return NULL;
    if (o->pipe.recompute == RECOMPUTE_ALL)
        for (int s = 0; s < st->n; s++)
            set_recompute(st, s);
    pl->plan = plan_build(g, pl->st, pl->sc, &pl->ds, o);   /* keeps &pl->ds */
    int worst;
    if (!fits(pl->plan, ds, &worst) && o->pipe.recompute == RECOMPUTE_AUTO) {
        for (int s = 0; s < st->n; s++)   /* the stages of every device over its memory */
            if ((int64_t)pl->plan->arena_bytes[st->dev[s]] > ds->d[st->dev[s]].prof.memory)
                set_recompute(st, s);
        pl->plan = plan_build(g, pl->st, pl->sc, &pl->ds, o);
    }
    if (!fits(pl->plan, ds, &worst)) {
        *why = arena_printf(a, "the memory plan needs %.1f MB on %s, which has %.1f MB; add "
                            "devices, lower -batch or raise --microbatches (--dump=memory shows what "
                            "it holds)",
                            (double)pl->plan->arena_bytes[worst] / 1e6, ds->d[worst].name,
                            (double)ds->d[worst].prof.memory / 1e6);
        return NULL;
    }
    return pl;
}

/* The options of one micro-batch of M. */
static Options per_microbatch(const Options *o, int M)
{
    Options m = *o;
    m.train.microbatches = M;
    if (M > 1)
        m.batch = o->batch / M;
    return m;
}

static int candidate_counts(const Options *o, int stages, int *out)
{
    if (o->pipe.micro_given) {
        out[0] = o->train.microbatches;
        return 1;
    }
    if (stages == 1 || !o->batch) {
        out[0] = 1;
        return 1;
    }
    int n = 0;
    for (int M = 1; M <= 4 * stages && M <= o->batch && n < 16; M *= 2)
        if (o->batch % M == 0)
            out[n++] = M;
    return n;
}

static int candidate_kinds(const Options *o, int ndev, SchedKind *out)
{
    if (o->pipe.schedule != SCHED_AUTO) {
        out[0] = o->pipe.schedule;
        return 1;
    }
    if (ndev == 1) {
        out[0] = SCHED_1F1B;
        return 1;
    }
    out[0] = SCHED_GPIPE, out[1] = SCHED_1F1B, out[2] = SCHED_INTERLEAVED, out[3] = SCHED_ZB;
    return 4;
}

static void check_options(const Options *o)
{
    if (o->train.microbatches > 1 && (!o->batch || o->batch % o->train.microbatches))
        error_file(o->input, "--microbatches=%d needs -batch N with N a multiple of it",
                   o->train.microbatches);
    if (o->pipe.recompute != RECOMPUTE_NONE && o->pipe.schedule == SCHED_ZB)
        error_file(o->input, "--recompute does not combine with --schedule=zb (its weight "
                   "gradients run after the backward that recomputes); choose another schedule");
}

static void report(const Pipeline *pl)
{
    const Plan *p = pl->plan;
    fprintf(stderr, "mpcc: %s schedule, %d stage(s), %d micro-batch(es): predicted step "
            "%.4g s, bubble %.1f%%\n", schedule_name(p->sc->kind), p->st->n, p->sc->M,
            p->step_time, 100 * p->bubble);
    for (int d = 0; d < pl->ds.n; d++)
        fprintf(stderr, "mpcc:   %-8s memory plan %.1f MB, busy %.4g s\n", pl->ds.d[d].name,
                (double)p->arena_bytes[d] / 1e6, p->busy[d]);
}

/* Evaluates each candidate with errors caught, so one that cannot run is
 * skipped; the first error is kept to report if none can. */
Pipeline *pipeline_choose(Arena *a, const Options *o, FrontFn front)
{
    Devices ds = devices_resolve(a, o);
    check_options(o);
    const Measured *measured = measured_load(a, o->pipe.measured);
    SchedKind kinds[4];
    int counts[16];
    int nk = candidate_kinds(o, ds.n, kinds), nm = candidate_counts(o, ds.n, counts);
    bool explicit_one = nk == 1 && nm == 1;
    Pipeline *best = NULL;
    const char *first_why = NULL;
    for (int j = 0; j < nm; j++) {
        Options m = per_microbatch(o, counts[j]);
        Graph *g = front(a, &m);
        for (int i = 0; i < nk; i++) {
            const char *why = NULL;
            jmp_buf jb, *saved = diag_jmp;
            bool quiet = diag_quiet;
            Pipeline *volatile pl = NULL;
            if (!explicit_one) {
                diag_jmp = &jb;
                diag_quiet = true;
            }
            if (explicit_one || setjmp(jb) == 0)
                pl = plan_one(a, g, &m, &ds, measured, (Candidate){kinds[i], counts[j]}, &why);
            else
                why = "it does not fit or cannot be partitioned";
            diag_jmp = saved;
            diag_quiet = quiet;
            if (!pl && !first_why)
                first_why = why;
            if (pl && (!best || pl->plan->step_time < best->plan->step_time * (1 - 1e-9)))
                best = pl;
        }
    }
    if (!best && !explicit_one) {   /* again, with the errors shown */
        Options m = per_microbatch(o, counts[nm - 1]);
        const char *why = NULL;
        best = plan_one(a, front(a, &m), &m, &ds, measured,
                        (Candidate){kinds[nk > 1], counts[nm - 1]},
                        &why);
        first_why = why ? why : first_why;
    }
    if (!best)
        error_file(o->input, "no schedule can run: %s", first_why);
    report(best);
    return best;
}
