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
                        "devices, lower -batch, raise --microbatches or try --recompute=auto or "
                        "--offload=all (--dump=memory shows what it holds)",
                        (double)p->arena_bytes[d] / 1e6, ds->d[d].name,
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
static const Plan *plan_stages(const Passes *ps, Graph *g, const Options *o, Pipeline *pl,
                               Stages *st)
{
    if (o->pipe.recompute == RECOMPUTE_ALL)
        for (int s = 0; s < st->n; s++)
            set_recompute(st, s);
    const Plan *plan = ps->plan(g, st, pl->sc, &pl->ds, o);   /* keeps &pl->ds */
    int worst;
    if (!fits(plan, &pl->ds, &worst) && o->pipe.recompute == RECOMPUTE_AUTO) {
        for (int s = 0; s < st->n; s++)   /* the stages of every device over its memory */
            if ((int64_t)plan->arena_bytes[st->dev[s]] > pl->ds.d[st->dev[s]].prof.memory)
                set_recompute(st, s);
        plan = ps->plan(g, st, pl->sc, &pl->ds, o);
    }
    return plan;
}

/* A reason this candidate cannot run, replacing any before (the last
 * partition over memory is the one to report). */
static Pipeline *refuse(Reject *rej, const Options *o, const char *why)
{
    *rej = (Reject){.loc = {.file = o->input, .index = -1}, .why = why};
    return NULL;
}

enum { MEMORY_ROUNDS = 256 };   /* partitions the memory plan may reject, per candidate */

/* Plans one candidate on graph g. NULL (and why, in rej) when it cannot run.
 *
 * The partitioner bounds each stage's memory from below (stages.c); the
 * memory plan is the verdict. A stage the plan finds over its device is
 * excluded and the partitioner asked again, so the fastest partition that
 * the plan fits is found, if any fits (tests/pipeline/memory_brute.py). */
static Pipeline *plan_one(const Passes *ps, Graph *g, const Options *o, const Devices *ds,
                          const Measured *measured, Candidate c, Reject *rej)
{
    Arena *a = g->arena;
    *rej = (Reject){0};
    if (c.kind == SCHED_ZB && o->pipe.recompute != RECOMPUTE_NONE)
        return refuse(rej, o, "--recompute does not combine with the zb schedule");
    if (c.kind == SCHED_INTERLEAVED && o->pipe.virt < 2)
        return refuse(rej, o, "the interleaved schedule needs --virtual-stages of 2 or more");
    Exclusions ex = {0};
    for (int round = 0; round < MEMORY_ROUNDS; round++) {
        Pipeline *pl = arena_alloc(a, sizeof *pl);
        pl->g = g;
        pl->opt = *o;
        pl->ds = *ds;
        Stages *st = stages_build(g, o, &pl->ds, measured, c.kind, o->pipe.virt, c.M, &ex, rej);
        if (!st)
            return NULL;   /* rej: the last plan over memory, or why no stages can be cut */
        pl->st = st;
        const char *why = NULL;
        pl->sc = schedule_build(a, c.kind, st, ds->n, c.M, &why);
        if (!pl->sc)
            return refuse(rej, o, why);
        pl->plan = plan_stages(ps, g, o, pl, st);
        int worst;
        if (fits(pl->plan, ds, &worst))
            return pl;
        refuse(rej, o, over_memory(a, pl->plan, ds, worst));
        rej->memory = true;
        if (o->pipe.split || o->pipe.cuts || !exclude_over(a, &ex, pl->st, pl->plan, ds))
            return NULL;
    }
    refuse(rej, o, arena_printf(a, "%s (after %d partitions)", rej->why, MEMORY_ROUNDS));
    rej->memory = true;   /* every round was over memory */
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

/* --microbatches=M splits -batch N: N must be a multiple of M. */
void check_microbatches(const Options *o)
{
    if (o->train.microbatches > 1 && (!o->batch || o->batch % o->train.microbatches))
        error_file(o->input, "--microbatches=%d needs -batch N with N a multiple of it",
                   o->train.microbatches);
}

static void check_options(const Options *o)
{
    check_microbatches(o);
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

/* --offload: per device, what goes to host memory and what its copies
 * cost a step on the host link. */
static void report_offload(const Plan *p)
{
    for (int d = 0; d < p->sc->ndev; d++) {
        int n = 0, nw = 0, copies = 0;
        double bytes = 0, wbytes = 0, secs = 0;
        for (int i = 0; i < p->noffl; i++)
            if (p->bufs[p->offl[i].dev].dev == d) {
                n++;
                bytes += (double)p->bufs[p->offl[i].dev].bytes;
            }
        for (int i = 0; i < p->nwofl; i++)
            if (p->bufs[p->wofl[i].dev].dev == d) {
                nw++;
                wbytes += (double)p->bufs[p->wofl[i].dev].bytes;
            }
        for (int i = 0; i < p->nops; i++)
            if (p->ops[i].kind == OPK_COPY && p->ops[i].dev == d &&
                plan_offload_copy(p, p->ops[i].dst))
                secs += p->ops[i].time, copies++;
        if (n)
            fprintf(stderr, "mpcc:   %-8s offload: %d activation(s), %.1f MB a micro-batch, "
                    "wait in host memory\n", p->ds->d[d].name, n, bytes / 1e6);
        if (nw)
            fprintf(stderr, "mpcc:   %-8s offload: %d weight(s) and optimizer state(s), %.1f MB, "
                    "live in host memory and come in for the actions that use them\n",
                    p->ds->d[d].name, nw, wbytes / 1e6);
        if (n || nw)
            fprintf(stderr, "mpcc:   %-8s host arena %.1f MB; %d copies out and back take "
                    "%.4g s a step\n", p->ds->d[d].name, (double)p->host_bytes[d] / 1e6, copies,
                    secs);
    }
}

/* --offload named a kind the plan chosen has nothing of: why, and what to try. */
static void note_nothing_offloaded(const Plan *p, const Options *o)
{
    if (diag_quiet)
        return;
    OffloadKind k = o->pipe.offload_auto ? OFFLOAD_NONE : o->pipe.offload;
    if (offloads_activations(k) && !p->noffl && o->pipe.recompute == RECOMPUTE_ALL)
        fprintf(stderr, "mpcc: note: --offload=%s offloads no activation under "
                "--recompute=all: a recomputing stage keeps only its inputs\n",
                k == OFFLOAD_ALL ? "all" : "activations");
    else if (offloads_activations(k) && !p->noffl)
        fprintf(stderr, "mpcc: note: --offload=%s: the plan chosen offloads no activation: "
                "no device runs an action between a stage's forward and the action before "
                "its backward (try --schedule=gpipe with several micro-batches, or "
                "--schedule=interleaved with --virtual-stages=3 or more)\n",
                k == OFFLOAD_ALL ? "all" : "activations");
    if (offloads_weights(k) && !p->nwofl)
        fprintf(stderr, "mpcc: note: --offload=%s: the plan chosen offloads no weight: every "
                "device uses each of its weights in every action but one or two (try several "
                "stages per device: --schedule=interleaved --virtual-stages=3 or more)\n",
                k == OFFLOAD_ALL ? "all" : "weights");
}

static void report(const Pipeline *pl, const Options *o)
{
    if (diag_quiet)   /* a candidate of --data-parallel=auto (driver.c) */
        return;
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
    report_offload(p);
    note_nothing_offloaded(p, o);
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
/* The plan of best's candidate with the stages starting at first, or NULL
 * where it cannot run (a cut inside a parameter's readers, no fit). */
static Pipeline *try_cuts(const Passes *ps, const Pipeline *best, const int *first,
                          const Devices *ds, const Measured *measured)
{
    Options m = best->opt;
    m.pipe.cuts = first;
    Reject rej;
    Pipeline *pl = plan_one(ps, best->g, &m, ds, measured,
                            (Candidate){best->sc->kind, best->sc->M}, &rej);
    if (pl)
        pl->opt.pipe.cuts = NULL;
    return pl;
}

static Pipeline *refine(Arena *a, const Passes *ps, const Devices *ds, const Measured *measured,
                        Pipeline *best)
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
                Pipeline *pl = try_cuts(ps, best, next, ds, measured);
                tries++;
                if (pl && pl->plan->step_time < best->plan->step_time * (1 - 1e-6)) {
                    best = pl, first = next, better = true;
                    break;
                }
            }
    }
    return best;
}

/* Plans every candidate; one that cannot run says why, and when none can,
 * the reason of the last one planned (the most micro-batches; 1F1B under
 * --schedule=auto) is the error. */
/* Every candidate schedule and micro-batch count: the best that fits, or
 * NULL with the last one's reason in *last. */
static Pipeline *search(Arena *a, const Options *o, const Passes *ps, const Devices *dsp,
                        const Measured *measured, Reject *last)
{
    Devices ds = *dsp;
    SchedKind kinds[4];
    int counts[16];
    int nk = candidate_kinds(o, ds.n, kinds), nm = candidate_counts(o, ds.n, measured, counts);
    Pipeline *best = NULL;
    Tried *tried = arena_array(a, (size_t)(nm * nk), sizeof *tried);
    int ntried = 0;
    for (int j = 0; j < nm; j++) {
        Options m = per_microbatch(o, counts[j]);
        Graph *g = ps->front(a, &m);
        for (int i = 0; i < nk; i++) {
            Reject rej;
            Pipeline *pl = plan_one(ps, g, &m, &ds, measured, (Candidate){kinds[i], counts[j]},
                                    &rej);
            tried[ntried++] = (Tried){kinds[i], counts[j], pl ? pl->plan->step_time : 0};
            if (!pl && j == nm - 1 && i == (nk > 1))
                *last = rej;
            if (pl && (!best || better(pl, best, o->pipe.objective)))
                best = pl;
        }
    }
    if (!best)
        return NULL;
    if (!o->pipe.split && best->st->n > 1 && o->pipe.objective == OBJECTIVE_TIME)
        best = refine(a, ps, &ds, measured, best);
    best->tried = tried, best->ntried = ntried;
    return best;
}

/* --offload=auto, once a plan fits with offload: of what it offloads, the
 * fewest (the largest first) with which it still fits, by bisection (more
 * offloaded, less memory, as a rule: the last plan that fits is kept).
 * Returns how many it keeps offloaded; *n: how many it could. */
static int trim_offload(const Passes *ps, Pipeline *pl, Options *o, int *n)
{
    int lo = 1, hi = *n = pl->plan->noffl + pl->plan->nwofl, worst;
    const Plan *best = pl->plan;
    while (lo < hi) {
        Options t = *o;
        t.pipe.offload_keep = (lo + hi) / 2;
        const Plan *p = ps->plan(pl->g, pl->st, pl->sc, &pl->ds, &t);
        if (fits(p, &pl->ds, &worst))
            hi = t.pipe.offload_keep, best = p;
        else
            lo = t.pipe.offload_keep + 1;
    }
    if (best != pl->plan) {
        o->pipe.offload_keep = pl->opt.pipe.offload_keep = hi;
        pl->plan = best;
    }
    return hi;
}

/* What --offload=auto chose, in a note. */
static void note_auto(const Options *off, int kept, int n)
{
    if (diag_quiet)
        return;
    const char *what = off->pipe.offload == OFFLOAD_ALL
                           ? "activations, weights and optimizer states" : "activations";
    if (kept < n)
        fprintf(stderr, "mpcc: note: no plan fits without offload; --offload=auto keeps %d of "
                "the %d %s it could offload in host memory, the largest: the fewest with which "
                "the plan fits (--offload=none to refuse)\n", kept, n, what);
    else
        fprintf(stderr, "mpcc: note: no plan fits without offload; --offload=auto keeps all %d "
                "%s it could offload in host memory (--offload=none to refuse)\n", n, what);
}

/* --offload=auto when nothing fits without: activations in host memory,
 * then the weights too; offloading, the fastest partition may still keep
 * too much on a device that holds several stages, which the search cannot
 * rule out alone, so the partition that spreads memory evenly is tried
 * before giving up (*spread). off: the options of the plan returned. */
static Pipeline *offload_search(Arena *a, const Passes *ps, const Devices *ds,
                                const Measured *measured, Options *off, Reject *last,
                                bool *spread)
{
    static const OffloadKind ladder[] = {OFFLOAD_ACTIVATIONS, OFFLOAD_ALL};
    Pipeline *best = NULL;
    for (int i = 0; i < 2 && !best && last->memory; i++) {
        off->pipe.offload = ladder[i];
        off->pipe.offload_auto = true;
        best = search(a, off, ps, ds, measured, last);
    }
    *spread = !best && last->memory && !off->pipe.split && off->pipe.objective == OBJECTIVE_TIME;
    if (*spread) {
        off->pipe.objective = OBJECTIVE_MEMORY;
        best = search(a, off, ps, ds, measured, last);
    }
    return best;
}

/* Recomputing the stages over memory, the other answer when nothing fits
 * (when --recompute was not given), with the partition that spreads memory
 * evenly as the fallback, as offload_search has: the faster of the two
 * plans is kept (rc: the options of the plan returned). */
static Pipeline *recompute_search(Arena *a, const Passes *ps, const Devices *ds,
                                  const Measured *measured, const Options *o, Options *rc)
{
    if (o->pipe.recompute_given)
        return NULL;
    *rc = *o;
    rc->pipe.recompute = RECOMPUTE_AUTO;
    rc->pipe.offload = OFFLOAD_NONE;
    Reject r = {0};
    Pipeline *best = search(a, rc, ps, ds, measured, &r);
    if (!best && r.memory && !rc->pipe.split && rc->pipe.objective == OBJECTIVE_TIME) {
        rc->pipe.objective = OBJECTIVE_MEMORY;
        best = search(a, rc, ps, ds, measured, &r);
    }
    return best;
}

static void note_spread(const char *with)
{
    if (diag_quiet)   /* a candidate of --data-parallel=auto (driver.c) */
        return;
    fprintf(stderr, "mpcc: note: no plan fits with %s when the partition minimises the step "
            "time; planned with --objective=memory, which spreads what the devices hold "
            "evenly\n", with);
}

/* What to do when no plan fits: one of these, chosen by pipeline_choose. */
typedef struct Fallback {
    Arena *a;
    const Passes *ps;
    const Devices *ds;
    const Measured *measured;
    const Options *o;          /* as given */
    Reject *first;             /* why nothing fits as given */
} Fallback;

/* --offload=auto: the faster of offload (the fewest buffers) and, unless
 * --recompute was given, recomputation; *used gets the plan's options. */
static Pipeline *fallback_auto(const Fallback *f, Options *off, Options *rc, const Options **used)
{
    bool spread;
    Reject last = *f->first;
    Pipeline *best = offload_search(f->a, f->ps, f->ds, f->measured, off, &last, &spread);
    int n = 0, kept = best ? trim_offload(f->ps, best, off, &n) : 0;
    Pipeline *alt = recompute_search(f->a, f->ps, f->ds, f->measured, f->o, rc);
    if (alt && (!best || better(alt, best, f->o->pipe.objective))) {
        if (!diag_quiet)
            fprintf(stderr, "mpcc: note: no plan fits without offload or recomputation; "
                "recomputing the stages over memory (--recompute=auto) %s%.4g s a step, "
                "so it is chosen\n", best ? "is faster than offload: " : "fits: ",
                alt->plan->step_time);
        if (best)
            if (!diag_quiet)
                fprintf(stderr, "mpcc: note: offloading instead would take %.4g s a step "
                    "(--offload=auto --recompute=none)\n", best->plan->step_time);
        if (rc->pipe.objective != f->o->pipe.objective)
            note_spread("recomputation");
        *used = rc;
        return alt;
    }
    if (!best) {
        f->first->why = arena_printf(f->a, "%s; with activations, weights and optimizer state "
                                     "offloaded to host memory (--offload=auto)%s no plan fits "
                                     "either", f->first->why,
                                     f->o->pipe.recompute_given ? "" : ", or recomputed");
        return NULL;
    }
    if (spread)
        note_spread("offload");
    note_auto(off, kept, n);
    if (alt)
        if (!diag_quiet)
            fprintf(stderr, "mpcc: note: recomputing the stages over memory instead "
                "(--recompute=auto) would take %.4g s a step\n", alt->plan->step_time);
    *used = off;
    return best;
}

/* An explicit --offload=KIND: the partition that spreads memory evenly. */
static Pipeline *fallback_spread(const Fallback *f, Options *off, const Options **used)
{
    if (f->o->infer || f->o->pipe.split || f->o->pipe.objective != OBJECTIVE_TIME)
        return NULL;
    Reject last = *f->first;
    off->pipe.objective = OBJECTIVE_MEMORY;
    Pipeline *best = search(f->a, off, f->ps, f->ds, f->measured, &last);
    if (best) {
        note_spread("offload");
        *used = off;
    }
    return best;
}

Pipeline *pipeline_choose(Arena *a, const Options *o, const Passes *ps)
{
    Devices ds = devices_resolve(a, o);
    check_options(o);
    const Measured *measured = measured_load(a, o->pipe.measured);
    Reject first = {0};
    Pipeline *best = search(a, o, ps, &ds, measured, &first);
    Options off = *o, rc;
    const Options *used = o;   /* what the plan chosen was planned with */
    Fallback f = {a, ps, &ds, measured, o, &first};
    OffloadKind k = o->pipe.offload;
    if (!best && first.memory && k == OFFLOAD_AUTO && !o->infer)
        best = fallback_auto(&f, &off, &rc, &used);
    else if (!best && first.memory && (offloads_activations(k) || offloads_weights(k)))
        best = fallback_spread(&f, &off, &used);
    if (!best)
        error_reject(&first);
    report(best, used);
    return best;
}
