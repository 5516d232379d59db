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

static const char *over_memory(Arena *a, const Plan *p, const Devices *ds, int d)
{
    return arena_printf(a, "the memory plan needs %.1f MB on %s, which has %.1f MB; add "
                        "devices, lower -batch or raise --microbatches (--dump=memory shows what "
                        "it holds)", (double)p->arena_bytes[d] / 1e6, ds->d[d].name,
                        (double)ds->d[d].prof.memory / 1e6);
}

/* The stage of each device over its memory joins ex; false if a device
 * over its memory holds several stages (interleaved), whose memory is
 * their sum: no one of them can be ruled out. */
static bool exclude_over(Arena *a, Exclusions *ex, const Stages *st, const Plan *p,
                         const Devices *ds)
{
    bool any = false;
    for (int s = 0; s < st->n; s++) {
        int d = st->dev[s];
        if ((int64_t)p->arena_bytes[d] <= ds->d[d].prof.memory)
            continue;
        for (int k = 0; k < st->n; k++)
            if (k != s && st->dev[k] == d)
                return false;
        if (ex->n == ex->cap) {
            ex->t = arena_grow(a, ex->t, 3 * (size_t)ex->n, 3 * (size_t)(ex->cap * 2 + 8),
                               sizeof *ex->t);
            ex->cap = ex->cap * 2 + 8;
        }
        int *t = &ex->t[3 * ex->n++];
        t[0] = s, t[1] = st->first[s], t[2] = st->first[s + 1];
        any = true;
    }
    return any;
}

/* The plan of one partition, with --recompute=auto applied. */
static const Plan *plan_stages(Graph *g, const Options *o, Pipeline *pl, Stages *st)
{
    if (o->pipe.recompute == RECOMPUTE_ALL)
        for (int s = 0; s < st->n; s++)
            set_recompute(st, s);
    const Plan *plan = plan_build(g, st, pl->sc, &pl->ds, o);   /* keeps &pl->ds */
    int worst;
    if (!fits(plan, &pl->ds, &worst) && o->pipe.recompute == RECOMPUTE_AUTO) {
        for (int s = 0; s < st->n; s++)   /* the stages of every device over its memory */
            if ((int64_t)plan->arena_bytes[st->dev[s]] > pl->ds.d[st->dev[s]].prof.memory)
                set_recompute(st, s);
        plan = plan_build(g, st, pl->sc, &pl->ds, o);
    }
    return plan;
}

enum { MEMORY_ROUNDS = 256 };   /* partitions the memory plan may reject, per candidate */

/* Plans one candidate on graph g. NULL (and *why) when it cannot run.
 *
 * The partitioner bounds each stage's memory from below (stages.c); the
 * memory plan is the verdict. A stage the plan finds over its device is
 * excluded and the partitioner asked again, so the fastest partition that
 * the plan fits is found, if any fits (tests/pipeline/memory_brute.py). */
static Pipeline *plan_one(Arena *a, Graph *g, const Options *o, const Devices *ds,
                          const Measured *measured, Candidate c, const char **why)
{
    if (c.kind == SCHED_ZB && o->pipe.recompute != RECOMPUTE_NONE) {
        *why = "--recompute does not combine with the zb schedule";
        return NULL;
    }
    if (c.kind == SCHED_INTERLEAVED && o->pipe.virt < 2) {
        *why = "the interleaved schedule needs --virtual-stages of 2 or more";
        return NULL;
    }
    Exclusions ex = {0};
    for (int round = 0; round < MEMORY_ROUNDS; round++) {
        Pipeline *pl = arena_alloc(a, sizeof *pl);
        pl->g = g;
        pl->opt = *o;
        pl->ds = *ds;
        Stages *st = stages_build(g, o, &pl->ds, measured, c.kind, o->pipe.virt, c.M, &ex);
        if (!st)
            return NULL;   /* *why: the last plan over memory (or cuts that cannot run) */
        pl->st = st;
        pl->sc = schedule_build(a, c.kind, st, ds->n, c.M, why);
        if (!pl->sc)
            return NULL;
        pl->plan = plan_stages(g, o, pl, st);
        int worst;
        if (fits(pl->plan, ds, &worst))
            return pl;
        *why = over_memory(a, pl->plan, ds, worst);
        if (o->pipe.split || o->pipe.cuts || !exclude_over(a, &ex, pl->st, pl->plan, ds))
            return NULL;
    }
    *why = arena_printf(a, "%s (after %d partitions)", *why, MEMORY_ROUNDS);
    return NULL;
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

/* With --measured, the micro-batch sizes the profiles span: a time
 * measured at one size says little about another (fixed costs, BLAS
 * efficiency), so the plan keeps to what was measured, interpolating
 * between sizes. */
static int measured_counts(const Options *o, const Measured *m, int *counts, int n)
{
    double lo, hi;
    if (!measured_rows(m, &lo, &hi))
        return n;
    int k = 0;
    for (int i = 0; i < n; i++) {
        double rows = (double)o->batch / counts[i];
        if (rows >= lo * (1 - 1e-9) && rows <= hi * (1 + 1e-9))
            counts[k++] = counts[i];
    }
    if (k == 0) {
        Loc loc = {.file = o->pipe.measured, .index = -1};
        note_once(&loc, "no micro-batch of -batch %lld has the %g to %g rows profiled; the "
                  "times are scaled to the sizes tried (profile at a size that divides the "
                  "batch)", (long long)o->batch, lo, hi);
        return n;
    }
    return k;
}

static int candidate_counts(const Options *o, int stages, const Measured *m, int *out)
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
    return measured_counts(o, m, out, n);
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

/* The largest share of its device's memory that a plan uses. */
static double memory_share(const Pipeline *pl)
{
    double most = 0;
    for (int d = 0; d < pl->ds.n; d++) {
        double m = (double)pl->ds.d[d].prof.memory;
        double r = (double)pl->plan->arena_bytes[d] / (m > 0 ? m : 1);
        most = r > most ? r : most;
    }
    return most;
}

/* Whether candidate a beats b under the objective (ties: the step time). */
static bool better(const Pipeline *a, const Pipeline *b, Objective obj)
{
    if (obj == OBJECTIVE_MEMORY) {
        double ma = memory_share(a), mb = memory_share(b);
        if (ma < mb * (1 - 1e-9))
            return true;
        if (ma > mb * (1 + 1e-9))
            return false;
    }
    return a->plan->step_time < b->plan->step_time * (1 - 1e-9);
}

enum { IDLE_PERCENT = 2 };   /* a device with less of the busiest one's work is "idle" */

/* Why the plan leaves devices (nearly) idle, and what to change: `who`
 * lists them with their shares of the work. */
static void explain_idle(const Pipeline *pl, const Options *o, const char *who, int count)
{
    const char *verb = count > 1 ? "get" : "gets";
    Loc loc = {.file = o->input, .index = -1};
    if (pl->plan->sc->M == 1)
        note_at(&loc, "%s %s almost none of the work: with one micro-batch%s the stages run "
                "one after another, and one device runs the step fastest (a copy between "
                "devices costs more than it saves); give -batch N with N a multiple of %d to "
                "pipeline micro-batches, or --objective=memory to spread the model's memory",
                who, verb, o->batch <= 1 ? " (a batch of 1)" : "", 2 * pl->ds.n);
    else
        note_at(&loc, "%s %s almost none of the work: the cost model finds that more work "
                "there would lengthen the step (copies cost more than the work they move); "
                "--objective=memory spreads the model anyway, --split=NODE,.. cuts it by hand",
                who, verb);
}

/* The devices with under IDLE_PERCENT of the busiest one's work. */
static void idle_devices(const Pipeline *pl, const Options *o, double most, double total)
{
    Arena *a = pl->g->arena;
    const char *who = "";
    int count = 0;
    for (int d = 0; d < pl->ds.n; d++)
        if (pl->plan->busy[d] < most * IDLE_PERCENT / 100)
            who = arena_printf(a, "%s%s%s (%.1f%%)", who, count++ ? ", " : "", pl->ds.d[d].name,
                               100 * pl->plan->busy[d] / total);
    if (count)
        explain_idle(pl, o, who, count);
}

static void report(const Pipeline *pl, const Options *o)
{
    const Plan *p = pl->plan;
    fprintf(stderr, "mpcc: %s schedule, %d stage(s), %d micro-batch(es): predicted step "
            "%.4g s, bubble %.1f%%\n", schedule_name(p->sc->kind), p->st->n, p->sc->M,
            p->step_time, 100 * p->bubble);
    double most = 0, total = 0;
    for (int d = 0; d < pl->ds.n; d++) {
        fprintf(stderr, "mpcc:   %-8s memory plan %.1f MB, busy %.4g s\n", pl->ds.d[d].name,
                (double)p->arena_bytes[d] / 1e6, p->busy[d]);
        most = p->busy[d] > most ? p->busy[d] : most;
        total += p->busy[d];
    }
    if (most > 0 && o->pipe.objective == OBJECTIVE_TIME && !o->pipe.split)
        idle_devices(pl, o, most, total);
}

enum { REFINE_PLANS = 24 };   /* simulated partitions the refinement may try */

/* Whether cut s of `first` can move by delta: every stage keeps a unit,
 * no cut falls inside a parameter's readers (stages_build checks that). */
static bool can_move(const int *first, int s, int delta)
{
    int c = first[s] + delta;
    return c > first[s - 1] && c < first[s + 1];
}

/* The partitioner minimises sum(t_s) + (M - 1) max(t_s), which the
 * simulated step departs from where the schedule's fill and drain and the
 * copies weigh (few micro-batches, a slow device): the cuts of the best
 * plan are moved one at a time, a few units either way, while the
 * simulation says the step gets shorter. */
/* plan_one with its user errors caught and kept quiet: a candidate that
 * cannot be partitioned is one that cannot run. */
static Pipeline *plan_caught(Arena *a, Graph *g, const Options *o, const Devices *ds,
                             const Measured *measured, Candidate c, const char **why)
{
    jmp_buf jb, *saved = diag_jmp;
    bool quiet = diag_quiet;
    diag_jmp = &jb, diag_quiet = true;
    Pipeline *volatile pl = NULL;
    if (setjmp(jb) == 0)
        pl = plan_one(a, g, o, ds, measured, c, why);
    else
        *why = "it does not fit or cannot be partitioned";
    diag_jmp = saved, diag_quiet = quiet;
    return pl;
}

/* The plan of best's candidate with the stages starting at first, or NULL
 * where it cannot run (a cut inside a parameter's readers, no fit). */
static Pipeline *try_cuts(Arena *a, const Pipeline *best, const int *first, const Devices *ds,
                          const Measured *measured)
{
    Options m = best->opt;
    m.pipe.cuts = first;
    const char *why = NULL;
    Pipeline *pl = plan_caught(a, best->g, &m, ds, measured,
                               (Candidate){best->sc->kind, best->sc->M}, &why);
    if (pl)
        pl->opt.pipe.cuts = NULL;
    return pl;
}

static Pipeline *refine(Arena *a, const Devices *ds, const Measured *measured, Pipeline *best)
{
    static const int deltas[] = {-1, 1, -2, 2, -4, 4};
    const Stages *st = best->st;
    int S = st->n, tries = 0;
    int *first = arena_array(a, (size_t)S + 1, sizeof *first);
    memcpy(first, st->first, ((size_t)S + 1) * sizeof *first);
    for (bool better = true; better && tries < REFINE_PLANS;) {
        better = false;
        for (int s = 1; s < S && tries < REFINE_PLANS; s++)
            for (size_t k = 0; k < sizeof deltas / sizeof *deltas && tries < REFINE_PLANS; k++) {
                if (!can_move(first, s, deltas[k]))
                    continue;
                int *next = arena_array(a, (size_t)S + 1, sizeof *next);
                memcpy(next, first, ((size_t)S + 1) * sizeof *next);
                next[s] += deltas[k];
                Pipeline *pl = try_cuts(a, best, next, ds, measured);
                tries++;
                if (pl && pl->plan->step_time < best->plan->step_time * (1 - 1e-6)) {
                    best = pl, first = next, better = true;
                    break;
                }
            }
    }
    return best;
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
    int nk = candidate_kinds(o, ds.n, kinds), nm = candidate_counts(o, ds.n, measured, counts);
    bool explicit_one = nk == 1 && nm == 1;
    Pipeline *best = NULL;
    const char *first_why = NULL;
    for (int j = 0; j < nm; j++) {
        Options m = per_microbatch(o, counts[j]);
        Graph *g = front(a, &m);
        for (int i = 0; i < nk; i++) {
            const char *why = NULL;
            Candidate c = {kinds[i], counts[j]};
            Pipeline *pl = explicit_one ? plan_one(a, g, &m, &ds, measured, c, &why)
                                        : plan_caught(a, g, &m, &ds, measured, c, &why);
            if (!pl && !first_why)
                first_why = why;
            if (pl && (!best || better(pl, best, o->pipe.objective)))
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
    if (!o->pipe.split && best->st->n > 1 && o->pipe.objective == OBJECTIVE_TIME)
        best = refine(a, &ds, measured, best);
    report(best, o);
    return best;
}
