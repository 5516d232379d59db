/* test_partition.c — the pipeline partitioner against brute force.
 *
 * Every contiguous partition of random problems of up to 10 units (and a
 * few of up to 24) is costed by a plain reading of the objective in mpcc.h,
 * written again here rather than borrowed from part_eval: chains, DAGs with
 * skip connections, fan-out and graph inputs, unequal devices and links,
 * memory caps, values received without counting memory (transient),
 * excluded stages, no_cut and pins, M from 1 to 10000, 1 to n stages.
 * part_solve must reach the least step time, or when nothing fits, the
 * least largest mem / mem_cap, or when pins and no_cut leave no partition
 * at all, say so. Problems of 30 to 60 units are checked against another
 * exact method (the least sum under every cap on stage time). Hand-worked
 * cases pin the definition down, and problems of ResNet-50 / transformer
 * size (600 units, 16 stages, 8 devices) are timed.
 */
#include "mpcc.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAXS = 16 };

/* ------------------------------------------------------- random problems */

typedef struct Rng {
    uint64_t s;
} Rng;

static uint64_t next_u64(Rng *r)   /* splitmix64 */
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int irand(Rng *r, int lo, int hi)   /* lo..hi inclusive */
{
    return lo + (int)(next_u64(r) % (uint64_t)(hi - lo + 1));
}

static double urand(Rng *r)
{
    return (double)(next_u64(r) >> 11) * 0x1p-53;
}

static bool chance(Rng *r, double p)
{
    return urand(r) < p;
}

/* A problem with its arrays writable. */
typedef struct Inst {
    PartProblem p;
    int *stage_dev, *inflight, *pin;
    double *time, *bw, *lat;
    int64_t *fixed, *act, *work, *cap;
    PartValue *values;
    bool *no_cut;
    int maxvalues;
    int excluded[3 * 4];
} Inst;

static Inst *inst_new(Arena *a, int n, int S, int ndev, int M, int maxvalues)
{
    Inst *in = arena_alloc(a, sizeof *in);
    in->stage_dev = arena_array(a, (size_t)S, sizeof(int));
    in->inflight = arena_array(a, (size_t)S, sizeof(int));
    in->cap = arena_array(a, (size_t)S, sizeof(int64_t));
    in->time = arena_array(a, (size_t)(ndev * n), sizeof(double));
    in->bw = arena_array(a, (size_t)(ndev * ndev), sizeof(double));
    in->lat = arena_array(a, (size_t)(ndev * ndev), sizeof(double));
    in->fixed = arena_array(a, (size_t)n, sizeof(int64_t));
    in->act = arena_array(a, (size_t)n, sizeof(int64_t));
    in->work = arena_array(a, (size_t)n, sizeof(int64_t));
    in->values = arena_array(a, (size_t)maxvalues, sizeof(PartValue));
    in->maxvalues = maxvalues;
    for (int s = 0; s < S; s++) {
        in->inflight[s] = 1;
        in->cap[s] = (int64_t)1 << 60;
    }
    for (int k = 0; k < ndev * ndev; k++)
        in->bw[k] = 1;
    in->p = (PartProblem){
        .n = n, .nstages = S, .ndev = ndev, .M = M, .stage_dev = in->stage_dev,
        .time = in->time, .fixed_mem = in->fixed, .act_mem = in->act,
        .work_mem = in->work, .inflight = in->inflight, .mem_cap = in->cap, .link_bw = in->bw,
        .link_latency = in->lat, .values = in->values,
    };
    return in;
}

static void add_value(Arena *a, Inst *in, int producer, double bytes, const int *cons, int ncons)
{
    CHECK(in->p.nvalues < in->maxvalues);
    int *c = arena_array(a, (size_t)ncons + 1, sizeof *c);
    memcpy(c, cons, (size_t)ncons * sizeof *c);
    in->values[in->p.nvalues++] = (PartValue){producer, bytes, c, ncons, false};
}

static void add_no_cut(Arena *a, Inst *in)
{
    in->no_cut = arena_array(a, (size_t)in->p.n, sizeof(bool));
    in->p.no_cut = in->no_cut;
}

static void add_pins(Arena *a, Inst *in)
{
    in->pin = arena_array(a, (size_t)in->p.n, sizeof(int));
    for (int u = 0; u < in->p.n; u++)
        in->pin[u] = -1;
    in->p.pin = in->pin;
}

/* A uniformly drawn set of S - 1 cuts among the n - 1 places. */
static void random_partition(Rng *r, int n, int S, int *first)
{
    int need = S - 1, s = 1;
    first[0] = 0;
    for (int c = 1; c < n; c++)
        if (irand(r, 0, n - 1 - c) < need) {
            first[s++] = c;
            need--;
        }
    first[S] = n;
}

typedef struct Gen {
    bool dag;          /* skip connections, fan-out, graph inputs; else a chain */
    bool hetero;       /* unequal devices and links */
    bool constrained;  /* no_cut and pins */
    int memory;        /* 0: no caps, 1: caps near a random partition's needs, 2: hopeless */
} Gen;

static double random_bytes(Rng *r)
{
    if (chance(r, 0.15))
        return 0;
    return irand(r, 1, 40) + (chance(r, 0.2) ? urand(r) : 0);
}

static void random_devices(Rng *r, Inst *in, bool hetero)
{
    const PartProblem *p = &in->p;
    for (int s = 0; s < p->nstages; s++)
        in->stage_dev[s] = hetero ? irand(r, 0, p->ndev - 1) : s % p->ndev;
    double base_bw = 1 + urand(r) * 20, base_lat = chance(r, 0.5) ? 0 : urand(r);
    for (int k = 0; k < p->ndev * p->ndev; k++) {
        in->bw[k] = hetero ? 1 + urand(r) * 20 : base_bw;
        in->lat[k] = hetero ? urand(r) * 0.5 : base_lat;
    }
    for (int u = 0; u < p->n; u++) {
        double base = chance(r, 0.3) ? irand(r, 1, 4) : urand(r) * 10;
        for (int d = 0; d < p->ndev; d++) {
            double speed = hetero ? (chance(r, 0.5) ? 0.5 + d : 0.2 + 3 * urand(r)) : 1;
            in->time[d * p->n + u] = base * speed;
        }
    }
}

static void random_consumers(Rng *r, int producer, int n, int *c, int *nc)
{
    *nc = irand(r, 0, 3);
    for (int k = 0; k < *nc; k++)
        c[k] = irand(r, producer + 1, n - 1);   /* repeats on purpose */
}

static void random_values(Arena *a, Rng *r, Inst *in, bool dag)
{
    int n = in->p.n, c[4], nc;
    for (int u = 0; u + 1 < n; u++) {
        if (dag && chance(r, 0.2))
            continue;
        c[0] = u + 1;
        nc = 1;
        if (dag && chance(r, 0.3))
            c[nc++] = irand(r, u + 1, n - 1);
        add_value(a, in, u, random_bytes(r), c, nc);
        in->values[in->p.nvalues - 1].transient = chance(r, 0.2);
    }
    for (int k = dag ? irand(r, 0, n + 2) : 0; k > 0; k--) {
        int producer = irand(r, -1, n - 2);
        random_consumers(r, producer, n, c, &nc);
        add_value(a, in, producer, random_bytes(r), c, nc);
    }
}

static void random_memory(Rng *r, Inst *in, int mode);

static void random_constraints(Arena *a, Rng *r, Inst *in)
{
    int n = in->p.n, S = in->p.nstages, first[MAXS + 2];
    add_no_cut(a, in);
    for (int u = 0; u < n; u++)
        in->no_cut[u] = chance(r, 0.25);
    if (chance(r, 0.3))
        return;
    add_pins(a, in);
    bool consistent = chance(r, 0.7) && S <= n;
    if (consistent)
        random_partition(r, n, S, first);
    for (int u = 0, s = 0; u < n; u++) {
        while (consistent && u >= first[s + 1])
            s++;
        if (chance(r, consistent ? 0.25 : 0.1))
            in->pin[u] = consistent ? s : irand(r, 0, S);   /* S: no such stage */
    }
}

/* Up to 4 stages of random partitions that "the memory plan measured over
 * their device": the solver must avoid exactly them. */
static void random_exclusions(Rng *r, Inst *in)
{
    int first[MAXS + 2];
    if (in->p.nstages > in->p.n || !chance(r, 0.35))
        return;
    int k = irand(r, 1, 4);
    for (int e = 0; e < k; e++) {
        random_partition(r, in->p.n, in->p.nstages, first);
        int s = irand(r, 0, in->p.nstages - 1);
        in->excluded[3 * e] = s;
        in->excluded[3 * e + 1] = first[s];
        in->excluded[3 * e + 2] = first[s + 1];
    }
    in->p.excluded = in->excluded;
    in->p.nexcluded = k;
}

static Inst *random_problem(Arena *a, Rng *r, int n, int S, int M, Gen g)
{
    int ndev = irand(r, 1, 4);
    Inst *in = inst_new(a, n, S, ndev, M, 3 * n + 3);
    random_devices(r, in, g.hetero);
    for (int s = 0; s < S; s++)
        in->inflight[s] = chance(r, 0.5) ? S - s : irand(r, 1, 3);
    for (int u = 0; u < n; u++) {
        in->fixed[u] = irand(r, 0, 100);
        in->act[u] = irand(r, 0, 50);
        in->work[u] = chance(r, 0.3) ? irand(r, 0, 200) : 0;
    }
    random_values(a, r, in, g.dag);
    if (g.constrained)
        random_constraints(a, r, in);
    random_memory(r, in, g.memory);
    random_exclusions(r, in);
    return in;
}

/* ------------------------------------------------- the objective, again */

typedef struct Ref {
    double T, t[MAXS];
    int64_t mem[MAXS];
    double ratio;      /* the largest mem / mem_cap */
    bool fits;         /* every stage within its cap */
    bool allowed;      /* no_cut and pins honoured */
} Ref;

static bool read_in(const PartValue *v, int lo, int hi)
{
    for (int k = 0; k < v->nconsumers; k++)
        if (v->consumers[k] >= lo && v->consumers[k] < hi)
            return true;
    return false;
}

/* Stage s over units [lo, hi): its time and memory, straight from mpcc.h. */
static void ref_stage(const PartProblem *p, int s, int lo, int hi, double *t, int64_t *mem)
{
    int d = p->stage_dev[s];
    int64_t fixed = 0, held = 0, work = 0;
    *t = 0;
    for (int u = lo; u < hi; u++) {
        *t += p->time[d * p->n + u];
        fixed += p->fixed_mem[u];
        held += p->act_mem[u];
        work = p->work_mem[u] > work ? p->work_mem[u] : work;
    }
    fixed += work;
    for (int v = 0; v < p->nvalues; v++) {
        const PartValue *pv = &p->values[v];
        if (pv->producer < 0 || pv->producer >= lo || !read_in(pv, lo, hi))
            continue;
        int link = p->stage_dev[s - 1] * p->ndev + d;
        *t += p->link_latency[link] + pv->bytes / p->link_bw[link];
        held += pv->transient ? 0 : (int64_t)ceil(pv->bytes);
    }
    *mem = fixed + p->inflight[s] * held;
}

static bool is_excluded(const PartProblem *p, int s, int lo, int hi)
{
    for (int k = 0; k < p->nexcluded; k++)
        if (p->excluded[3 * k] == s && p->excluded[3 * k + 1] == lo &&
            p->excluded[3 * k + 2] == hi)
            return true;
    return false;
}

static bool stage_allowed(const PartProblem *p, int s, int lo, int hi)
{
    if (s > 0 && p->no_cut && p->no_cut[lo - 1])
        return false;
    for (int u = lo; p->pin && u < hi; u++)
        if (p->pin[u] >= 0 && p->pin[u] != s)
            return false;
    return true;
}

static Ref reference(const PartProblem *p, const int *first)
{
    Ref r = {.fits = true, .allowed = true};
    double sum = 0, max = 0;
    for (int s = 0; s < p->nstages; s++) {
        ref_stage(p, s, first[s], first[s + 1], &r.t[s], &r.mem[s]);
        r.fits &= r.mem[s] <= p->mem_cap[s] && !is_excluded(p, s, first[s], first[s + 1]);
        r.allowed &= stage_allowed(p, s, first[s], first[s + 1]);
        r.ratio = fmax(r.ratio, (double)r.mem[s] / (double)p->mem_cap[s]);
        sum += r.t[s];
        max = fmax(max, r.t[s]);
    }
    r.T = sum + (p->M - 1) * max;
    return r;
}

static void random_memory(Rng *r, Inst *in, int mode)
{
    const PartProblem *p = &in->p;
    int first[MAXS + 2];
    if (mode == 0 || p->nstages > p->n)
        return;
    random_partition(r, p->n, p->nstages, first);
    Ref e = reference(p, first);
    for (int s = 0; s < p->nstages; s++)
        in->cap[s] = mode == 2 ? irand(r, 1, 20)
                               : (int64_t)((double)e.mem[s] * (0.6 + 0.7 * urand(r))) + 1;
}

/* -------------------------------------------------------- brute force */

typedef struct Best {
    int partitions, allowed, fitting;
    double T;              /* least T over the allowed partitions that fit */
    double ratio;          /* least largest mem / mem_cap over the allowed ones */
    double ratio_kept;     /* the same over those with no excluded stage */
    int kept;              /* allowed partitions with no excluded stage */
    double sum, sum_T;     /* least sum of t_s, and the least T among those */
    double max, max_T;     /* least max of t_s, and the least T among those */
} Best;

static void consider(const PartProblem *p, const int *first, Best *b)
{
    Ref e = reference(p, first);
    double sum = 0, max = 0;
    for (int s = 0; s < p->nstages; s++) {
        sum += e.t[s];
        max = fmax(max, e.t[s]);
    }
    b->partitions++;
    if (!e.allowed)
        return;
    b->allowed++;
    b->ratio = fmin(b->ratio, e.ratio);
    bool kept = true;
    for (int s = 0; s < p->nstages; s++)
        kept &= !is_excluded(p, s, first[s], first[s + 1]);
    if (kept) {
        b->kept++;
        b->ratio_kept = fmin(b->ratio_kept, e.ratio);
    }
    if (!e.fits)
        return;
    b->fitting++;
    b->T = fmin(b->T, e.T);
    if (sum < b->sum || (sum == b->sum && e.T < b->sum_T)) {
        b->sum = sum;
        b->sum_T = e.T;
    }
    if (max < b->max || (max == b->max && e.T < b->max_T)) {
        b->max = max;
        b->max_T = e.T;
    }
}

static void enumerate(const PartProblem *p, int *first, int s, Best *b)
{
    if (s == p->nstages) {
        consider(p, first, b);
        return;
    }
    for (int c = first[s - 1] + 1; c <= p->n - (p->nstages - s); c++) {
        first[s] = c;
        enumerate(p, first, s + 1, b);
    }
}

static Best brute_force(const PartProblem *p)
{
    Best b = {.T = INFINITY, .ratio = INFINITY, .ratio_kept = INFINITY, .sum = INFINITY,
              .sum_T = INFINITY,
              .max = INFINITY, .max_T = INFINITY};
    int first[MAXS + 2] = {0};
    first[p->nstages] = p->n;
    if (p->nstages <= p->n)
        enumerate(p, first, 1, &b);
    return b;
}

/* ------------------------------------------------------------ comparing */

static bool near(double x, double y)
{
    return x == y || fabs(x - y) <= 1e-9 * fmax(fabs(x), fabs(y));
}

static bool why(const char *msg)
{
    fprintf(stderr, "  %s\n", msg);
    return false;
}

/* The figures part_solve or part_eval reported for r->first are the
 * reference's. */
static bool same_figures(const PartProblem *p, const PartResult *r, const Ref *e)
{
    if (!near(r->step_time, e->T))
        return why("step_time differs from the reference");
    for (int s = 0; s < p->nstages; s++)
        if (!near(r->stage_time[s], e->t[s]) || r->stage_mem[s] != e->mem[s])
            return why("a stage's time or memory differs from the reference");
    int w = r->worst_stage;
    if (w < 0 || w >= p->nstages || r->worst_need != e->mem[w] ||
        !near((double)e->mem[w] / (double)p->mem_cap[w], e->ratio))
        return why("worst_stage is not a stage with the largest mem / mem_cap");
    return true;
}

static bool solved_feasible(const PartProblem *p, bool ok, const PartResult *r, const Best *b)
{
    if (!ok || !r->feasible || !r->first)
        return why("a feasible partition exists but part_solve found none");
    Ref e = reference(p, r->first);
    if (!e.allowed || !e.fits)
        return why("part_solve's partition breaks a constraint");
    if (!near(e.T, b->T))
        return why("part_solve's partition does not reach the least T");
    return same_figures(p, r, &e);
}

static bool solved_infeasible(const PartProblem *p, bool ok, const PartResult *r, const Best *b)
{
    if (ok || r->feasible)
        return why("part_solve claims a feasible partition where none is");
    if (b->allowed == 0)
        return r->first == NULL && r->worst_stage == -1 ? true
               : why("no partition honours pins and no_cut, yet first is set");
    if (!r->first)
        return why("a partition honours pins and no_cut, yet first is NULL");
    Ref e = reference(p, r->first);
    if (!e.allowed)
        return why("the reported partition breaks pins or no_cut");
    if (!near(e.ratio, b->ratio))
        return why("the reported partition's largest mem / mem_cap is not the least");
    return same_figures(p, r, &e);
}

static bool agrees_with_brute_force(Arena *a, const PartProblem *p, const Best *b)
{
    PartResult r;
    bool ok = part_solve(a, p, &r);
    if (b->fitting)
        return solved_feasible(p, ok, &r, b);
    return solved_infeasible(p, ok, &r, b);
}

/* --objective=memory: the least largest mem / mem_cap of the partitions
 * with no excluded stage, feasible exactly when that one fits. */
static bool memory_objective_agrees(Arena *a, const PartProblem *p, const Best *b)
{
    PartResult r;
    bool ok = part_solve_memory(a, p, &r);
    if (b->kept == 0)
        return !ok ? true : why("part_solve_memory found a partition where none is allowed");
    if (!r.first)
        return why("part_solve_memory found no partition");
    Ref e = reference(p, r.first);
    for (int s = 0; s < p->nstages; s++)
        if (is_excluded(p, s, r.first[s], r.first[s + 1]))
            return why("part_solve_memory chose an excluded stage");
    if (!e.allowed || !near(e.ratio, b->ratio_kept))
        return why("part_solve_memory's largest mem / mem_cap is not the least");
    if (ok != e.fits)
        return why("part_solve_memory's verdict differs from the reference");
    return true;
}

static bool eval_agrees(Arena *a, const PartProblem *p, Rng *rng)
{
    int first[MAXS + 2];
    if (p->nstages > p->n)
        return true;
    random_partition(rng, p->n, p->nstages, first);
    PartResult r;
    bool ok = part_eval(a, p, first, &r);
    Ref e = reference(p, first);
    if (ok != (e.allowed && e.fits) || r.feasible != ok)
        return why("part_eval's feasibility differs from the reference");
    return same_figures(p, &r, &e);
}

/* ------------------------------------------------------- random sweeps */

typedef struct Tally {
    int instances, feasible, over_memory, impossible, pareto;
} Tally;

static void tally(Tally *t, const Best *b)
{
    t->instances++;
    if (b->fitting) {
        t->feasible++;
        /* neither the least-sum nor the least-max partition is optimal */
        t->pareto += b->T < fmin(b->sum_T, b->max_T) * (1 - 1e-12);
    } else if (b->allowed) {
        t->over_memory++;
    } else {
        t->impossible++;
    }
}

static Gen random_gen(Rng *r)
{
    double m = urand(r);
    return (Gen){
        .dag = chance(r, 0.6), .hetero = chance(r, 0.6), .constrained = chance(r, 0.3),
        .memory = m < 0.5 ? 0 : m < 0.85 ? 1 : 2,
    };
}

static int random_M(Rng *r)
{
    static const int Ms[] = {1, 1, 2, 2, 3, 3, 4, 4, 6, 8, 16, 100, 10000};
    return Ms[irand(r, 0, (int)(sizeof Ms / sizeof *Ms) - 1)];
}

static void run_instance(Rng *r, int n, int S, bool fitting, Tally *t)
{
    Arena *a = arena_new();
    Gen g = random_gen(r);
    if (fitting && g.memory == 2)   /* hopeless caps: the fronts never fill */
        g.memory = 0;
    Inst *in = random_problem(a, r, n, S, random_M(r), g);
    Best b = brute_force(&in->p);
    tally(t, &b);
    bool ok = agrees_with_brute_force(a, &in->p, &b);
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  instance %d: n=%d S=%d M=%d dag=%d hetero=%d constrained=%d memory=%d\n",
                t->instances, n, S, in->p.M, g.dag, g.hetero, g.constrained, g.memory);
    CHECK(eval_agrees(a, &in->p, r));
    CHECK(memory_objective_agrees(a, &in->p, &b));
    arena_free(a);
}

/* A few thousand problems of up to 10 units, mostly 6 or more: S from 1 to
 * n (now and then n + 1); every tenth has S = 1, every tenth S = n. */
static void test_small_random(void)
{
    Rng r = {20240611};
    Tally t = {0};
    for (int k = 0; k < 8000; k++) {
        int n = k % 3 ? irand(&r, 6, 10) : irand(&r, 1, 10), S = irand(&r, 1, n);
        S = k % 10 == 0 ? 1 : k % 10 == 1 ? n : k % 50 == 2 ? n + 1 : S;
        run_instance(&r, n, S, false, &t);
    }
    printf("small: %d instances, %d feasible (%d where neither the least-sum nor the "
           "least-max partition is optimal), %d over memory, %d with no partition\n",
           t.instances, t.feasible, t.pareto, t.over_memory, t.impossible);
    CHECK(t.feasible > 2000 && t.pareto > 40 && t.over_memory > 500 && t.impossible > 100);
}

/* Fewer, larger problems: longer fronts, more pruning. */
static void test_medium_random(void)
{
    Rng r = {777};
    Tally t = {0};
    for (int k = 0; k < 40; k++)
        run_instance(&r, irand(&r, 14, 24), irand(&r, 3, 5), true, &t);
    printf("medium: %d instances, %d feasible (%d non-trivially), %d over memory\n",
           t.instances, t.feasible, t.pareto, t.over_memory);
}

/* ---------------------------------------------- beyond brute force */

/* Too many partitions to list: T* = min over B of f(B) + (M - 1) B, where
 * f(B) is the least sum over partitions with no stage longer than B (at
 * B = the optimum's max, f(B) is at most its sum; and no f(B) + (M - 1) B
 * is below the T of the partition that gives it). B runs over every stage
 * time, upwards, until f(no limit) + (M - 1) B cannot win. */
typedef struct Table {
    int n, S;
    double *t;       /* [S][n+1][n+1]: time of stage s over [i, j) */
    bool *ok;        /* fits, honours pins and the cut before it */
} Table;

static size_t cell(const Table *tb, int s, int i, int j)
{
    return ((size_t)s * (size_t)(tb->n + 1) + (size_t)i) * (size_t)(tb->n + 1) + (size_t)j;
}

static Table stage_table(Arena *a, const PartProblem *p)
{
    Table tb = {.n = p->n, .S = p->nstages};
    size_t size = (size_t)tb.S * (size_t)(tb.n + 1) * (size_t)(tb.n + 1);
    tb.t = arena_array(a, size, sizeof *tb.t);
    tb.ok = arena_array(a, size, sizeof *tb.ok);
    for (int s = 0; s < tb.S; s++)
        for (int i = 0; i < tb.n; i++)
            for (int j = i + 1; j <= tb.n; j++) {
                int64_t mem;
                size_t c = cell(&tb, s, i, j);
                ref_stage(p, s, i, j, &tb.t[c], &mem);
                tb.ok[c] = mem <= p->mem_cap[s] && stage_allowed(p, s, i, j) &&
                           !is_excluded(p, s, i, j);
            }
    return tb;
}

static double least_sum_under(const Table *tb, double B, double *g)
{
    int n = tb->n;
    for (int k = 0; k < tb->S * (n + 1); k++)
        g[k] = INFINITY;
    for (int s = 0; s < tb->S; s++)
        for (int i = s ? 1 : 0; i < (s ? n : 1); i++) {
            double before = s ? g[(s - 1) * (n + 1) + i] : 0;
            for (int j = i + 1; before < INFINITY && j <= n; j++) {
                size_t c = cell(tb, s, i, j);
                if (tb->ok[c] && tb->t[c] <= B)
                    g[s * (n + 1) + j] = fmin(g[s * (n + 1) + j], before + tb->t[c]);
            }
        }
    return g[(tb->S - 1) * (n + 1) + n];
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double parametric(Arena *a, const PartProblem *p)
{
    Table tb = stage_table(a, p);
    size_t size = (size_t)tb.S * (size_t)(tb.n + 1) * (size_t)(tb.n + 1), nb = 0;
    double *B = arena_array(a, size, sizeof *B);
    double *g = arena_array(a, (size_t)tb.S * (size_t)(tb.n + 1), sizeof *g);
    for (size_t c = 0; c < size; c++)
        if (tb.ok[c])
            B[nb++] = tb.t[c];
    qsort(B, nb, sizeof *B, cmp_double);
    double least = least_sum_under(&tb, INFINITY, g), best = INFINITY;
    if (p->M == 1 || least == INFINITY)
        return least;
    for (size_t k = 0; k < nb && least + (p->M - 1) * B[k] < best; k++)
        best = fmin(best, least_sum_under(&tb, B[k], g) + (p->M - 1) * B[k]);
    return best;
}

/* 30 to 60 units in 3 to 8 stages, against the parametric search. */
static void test_larger_random(void)
{
    Rng r = {4242};
    int feasible = 0;
    for (int k = 0; k < 30; k++) {
        Arena *a = arena_new();
        Gen g = random_gen(&r);
        g.memory = g.memory == 2 ? 0 : g.memory;
        int n = irand(&r, 30, 60), S = irand(&r, 3, 8), M = random_M(&r);
        Inst *in = random_problem(a, &r, n, S, M, g);
        double T = parametric(a, &in->p);
        PartResult res;
        bool ok = part_solve(a, &in->p, &res);
        CHECK(ok == (T < INFINITY));
        if (ok && T < INFINITY) {
            Ref e = reference(&in->p, res.first);
            CHECK(e.allowed && e.fits && near(e.T, T) && near(res.step_time, T));
            feasible++;
        }
        arena_free(a);
    }
    printf("larger: 30 instances, %d feasible, against the parametric search\n", feasible);
    CHECK(feasible >= 15);
}

/* ------------------------------------------------------------ by hand */

static Inst *uniform(Arena *a, int n, int S, int M, double unit_time)
{
    Inst *in = inst_new(a, n, S, 1, M, 2 * n + 4);
    for (int u = 0; u < n; u++)
        in->time[u] = unit_time;
    return in;
}

/* 4 equal units on 2 equal devices: 2 + 2. */
static void test_even_split(void)
{
    Arena *a = arena_new();
    Inst *in = inst_new(a, 4, 2, 2, 4, 8);
    for (int k = 0; k < 8; k++)
        in->time[k] = 1;
    in->stage_dev[1] = 1;
    for (int k = 0; k < 4; k++)
        in->bw[k] = 1e9;
    for (int u = 0; u < 3; u++)
        add_value(a, in, u, 8, (int[]){u + 1}, 1);
    PartResult r;
    CHECK(part_solve(a, &in->p, &r));
    CHECK(r.first[0] == 0 && r.first[1] == 2 && r.first[2] == 4);
    CHECK(near(r.step_time, 4 + 8e-9 + 3 * (2 + 8e-9)));
    CHECK(near(r.stage_time[1], 2 + 8e-9) && r.stage_mem[1] == 8);
    arena_free(a);
}

/* Stages [0] [1] [2 3] on one device, links 10 bytes/s and 0.5 s each:
 * a skip value 0 -> {2, 3} goes straight to stage 2 (once, though read
 * twice), a graph input is never received, a value inside a stage costs
 * nothing. */
static void test_skip(void)
{
    Arena *a = arena_new();
    Inst *in = uniform(a, 4, 3, 2, 1);
    in->bw[0] = 10;
    in->lat[0] = 0.5;
    in->inflight[2] = 2;
    add_value(a, in, 0, 10, (int[]){1}, 1);              /* X: into stage 1 */
    add_value(a, in, 1, 20, (int[]){2}, 1);              /* Y: into stage 2 */
    add_value(a, in, 0, 30, (int[]){3, 2, 3}, 3);        /* C: skip into stage 2 */
    add_value(a, in, -1, 1000, (int[]){0, 1, 2, 3}, 4);  /* G: a graph input */
    add_value(a, in, 2, 50, (int[]){3}, 1);              /* Z: within stage 2 */
    PartResult r;
    CHECK(part_eval(a, &in->p, (int[]){0, 1, 2, 4}, &r));
    CHECK(near(r.stage_time[0], 1));
    CHECK(near(r.stage_time[1], 1 + 0.5 + 1));          /* X only, not C */
    CHECK(near(r.stage_time[2], 2 + 0.5 + 2 + 0.5 + 3)); /* Y and C */
    CHECK(near(r.step_time, 1 + 2.5 + 8 + 8));
    CHECK(r.stage_mem[0] == 0 && r.stage_mem[1] == 10 && r.stage_mem[2] == 2 * 50);
    CHECK(r.worst_stage == 2 && r.worst_need == 100);
    arena_free(a);
}

/* Memory decides: stage 1 holds one unit only, so 3 + 1. */
static void test_cap_forces_split(void)
{
    Arena *a = arena_new();
    Inst *in = uniform(a, 4, 2, 4, 1);
    for (int u = 0; u < 4; u++)
        in->fixed[u] = 10;
    in->cap[0] = 30;
    in->cap[1] = 10;
    PartResult r;
    CHECK(part_solve(a, &in->p, &r));
    CHECK(r.first[1] == 3 && near(r.step_time, 4 + 3 * 3));
    arena_free(a);
}

/* Nothing fits: the report names the stage furthest over its cap. */
static void test_over_memory(void)
{
    Arena *a = arena_new();
    Inst *in = uniform(a, 2, 2, 1, 1);
    in->fixed[0] = in->fixed[1] = 100;
    in->cap[0] = 150;
    in->cap[1] = 50;
    PartResult r;
    CHECK(!part_solve(a, &in->p, &r) && !r.feasible);
    CHECK(r.first && r.first[1] == 1 && r.worst_stage == 1 && r.worst_need == 100);
    arena_free(a);
}

static bool no_partition(Arena *a, const PartProblem *p)
{
    PartResult r;
    return !part_solve(a, p, &r) && !r.feasible && !r.first && r.worst_stage == -1;
}

/* Pins against the order, no cut anywhere, a pin to no stage, more stages
 * than units: no partition at all. */
static void test_impossible(void)
{
    Arena *a = arena_new();
    Inst *in = uniform(a, 3, 2, 1, 1);
    add_pins(a, in);
    in->pin[0] = 1;
    in->pin[1] = 0;
    CHECK(no_partition(a, &in->p));
    in->pin[0] = in->pin[1] = -1;
    in->pin[2] = 2;
    CHECK(no_partition(a, &in->p));
    in->pin[1] = 0;
    in->pin[2] = 1;
    PartResult r;
    CHECK(part_solve(a, &in->p, &r) && r.first[1] == 2);
    in->pin[1] = 1;
    CHECK(part_solve(a, &in->p, &r) && r.first[1] == 1);
    in->pin[1] = -1;
    add_no_cut(a, in);
    in->no_cut[0] = in->no_cut[1] = true;
    CHECK(no_partition(a, &in->p));
    CHECK(no_partition(a, &uniform(a, 2, 3, 1, 1)->p));
    arena_free(a);
}

/* -------------------------------------------------------------- timing */

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What a large problem looks like: how much slower device d is than
 * device 0 (d * spread), repeated blocks with equal units (a transformer)
 * or random units (a CNN), and memory caps at cap_factor * an even share of
 * the total (0: none). */
typedef struct Large {
    int M;
    double spread;
    bool blocks;
    double cap_factor;
} Large;

static void large_units(Rng *r, Inst *in, Large l)
{
    int n = in->p.n;
    for (int u = 0; u < n; u++) {
        double base = l.blocks ? 1e-4 * (1 + u % 50 % 7) : 1e-4 + 2e-3 * urand(r);
        for (int d = 0; d < in->p.ndev; d++)
            in->time[d * n + u] = base * (1 + l.spread * d);
        in->fixed[u] = l.blocks ? 1000000 * (1 + u % 50 % 3) : irand(r, 1000000, 50000000);
        in->act[u] = l.blocks ? 100000 * (1 + u % 50 % 5) : irand(r, 100000, 10000000);
    }
}

/* A chain, residual skips over up to 12 units, a few long ones. */
static void large_values(Arena *a, Rng *r, Inst *in, Large l)
{
    int n = in->p.n;
    for (int u = 0; u + 1 < n; u++)
        add_value(a, in, u, l.blocks ? 1e6 : 1e5 + 1e7 * urand(r), (int[]){u + 1}, 1);
    for (int k = 0; k < 400; k++) {
        int p = irand(r, 0, n - 14), far = k % 40 == 0 ? irand(r, 20, 100) : irand(r, 2, 12);
        int c = p + far < n ? p + far : n - 1;
        add_value(a, in, p, 1e5 + 1e7 * urand(r), (int[]){c, p + 1}, 2);
    }
}

/* 600 units in 16 stages over 8 devices, two stages each, interleaved. */
static Inst *large_problem(Arena *a, Rng *r, Large l)
{
    enum { N = 600, S = 16, D = 8 };
    Inst *in = inst_new(a, N, S, D, l.M, 1100);
    for (int s = 0; s < S; s++) {
        in->stage_dev[s] = s % D;
        in->inflight[s] = S - s;
    }
    for (int k = 0; k < D * D; k++) {
        in->bw[k] = 1e10 + 4e10 * urand(r);
        in->lat[k] = 1e-5;
    }
    large_units(r, in, l);
    large_values(a, r, in, l);
    int64_t total = 0;
    for (int u = 0; u < N; u++)
        total += in->fixed[u] + S * in->act[u];
    for (int s = 0; l.cap_factor > 0 && s < S; s++)
        in->cap[s] = (int64_t)(l.cap_factor * (double)total / S);
    return in;
}

static void time_large(Large l)
{
    Arena *a = arena_new();
    Rng r = {99};   /* the same units and values for every case */
    Inst *in = large_problem(a, &r, l);
    PartResult res;
    bool ok = false;
    double dt = INFINITY;
    for (int k = 0; k < 5; k++) {   /* the best of five: the machine may be busy */
        double t0 = seconds();
        ok = part_solve(a, &in->p, &res);
        dt = fmin(dt, seconds() - t0);
    }
    printf("large: n=600 nstages=16 values=%d M=%-3d %-6s devices x1..x%-4g caps %-5s: "
           "T %.5f s, solved in %.1f ms\n", in->p.nvalues, l.M, l.blocks ? "blocks" : "random",
           1 + 7 * l.spread, l.cap_factor > 0 ? "tight" : "none", res.step_time, 1e3 * dt);
    CHECK(ok);
    if (ok) {
        Ref e = reference(&in->p, res.first);
        CHECK(e.allowed && e.fits && near(e.T, res.step_time));
    }
    arena_free(a);
}

/* Timing only (printed, not checked). */
static void test_large_timing(void)
{
    static const Large cases[] = {
        {1, 0.1, false, 0},   {8, 0.1, false, 0},   {8, 0.1, false, 1.1},
        {64, 0.1, false, 1.1}, {8, 0, true, 0},      {32, 0, true, 1.1},
        {2, 1, false, 0},     {4, 1, false, 0},     {8, 1, false, 0},
        {4, 5, false, 0},     {4, 0, false, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        time_large(cases[k]);
}

int main(void)
{
    test_even_split();
    test_skip();
    test_cap_forces_split();
    test_over_memory();
    test_impossible();
    test_small_random();
    test_medium_random();
    test_larger_random();
    test_large_timing();
    return check_summary("partition");
}
