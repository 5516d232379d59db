/* partition.c — the exact pipeline partitioner (part_solve) and the cost of
 * one given partition (part_eval); the problem is stated in mpcc.h.
 *
 * A stage s over the units [i, j) costs t(s, i, j): its units' time on its
 * device plus, for each value produced before i and read in [i, j), the
 * link's latency and transfer time. A value produced at p and read at
 * c_1 < ... < c_k enters a stage that starts at i, p < i <= c_k, once the
 * stage grows past the first c_m >= i: that is an event of start i, and
 * with the events of each start sorted by end, a stage is grown unit by unit
 * in O(1) a step. Its time and memory only grow with its end, so the loops
 * over ends stop at the first stage that does not fit.
 *
 * The step time T = sum_s t_s + (M - 1) max_s t_s is not additive. With
 * M = 1 it is the sum, and the least-sum dynamic program is exact. Else the
 * search keeps, for every (stage s, start i), the Pareto front of the pairs
 * (max, sum) over the stages s.. that cover [i, n); T is the least
 * sum + (M - 1) max on the front of (0, 0). What keeps the fronts short:
 *   - an upper bound on T: the least T of the whole partitions met on the
 *     way, from the plain programs below and from the fronts as they grow;
 *   - a cap on stage time that every partition under the bound respects,
 *     (bound - least sum) / (M - 1). Plain dynamic programs give the least
 *     sum and the least max of the prefixes made of stages under the cap,
 *     and under a few lower caps (levels): a prefix whose largest stage
 *     lies between two levels has at least the upper level's least sum. A
 *     candidate suffix that no prefix can bring under the bound is dropped;
 *   - a floor under the max (the least max of any whole partition, or of
 *     any prefix to the state), below which all maxima are alike.
 * The bound carries a relative slack of 1e-9, so rounding never drops the
 * optimum. For n = 600 units in 16 stages a solve takes a few ms to some
 * 30 ms (tests/unit/test_partition.c prints the figures).
 *
 * When no partition fits in memory, another program finds the one that
 * honours pins and no_cut with the least largest mem / mem_cap, for the
 * diagnostic.
 */
#include "mpcc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A value enters the stages that start at some i once they reach `end`. */
typedef struct Event {
    int end;
    double bytes;
    int64_t mem;    /* bytes rounded up */
} Event;

typedef struct Solver {
    const PartProblem *p;
    int n, S;
    double *ptime;            /* [S][n+1]: prefix sums of time on stage s's device */
    int64_t *pfixed, *pact;   /* [n+1] */
    double *lat, *bw;         /* [S]: the link into stage s */
    int *last;                /* [S][n+1]: the last end of a stage s from i (pins, count) */
    int *ev_at;               /* [n+1]: events of start i are ev[ev_at[i] .. ev_at[i+1]) */
    Event *ev;                /* by start, then by end */
    bool *ex_from;            /* [S][n+1]: some excluded stage s starts at i */
} Solver;

/* A stage s over [i, j), grown one unit at a time, and what it receives. */
typedef struct Stage {
    const Solver *sv;
    int s, i, j;
    int ev;                   /* the next event of i */
    int count;
    double bytes;
    int64_t mem;
    int64_t work;             /* the largest work_mem of its units */
} Stage;

/* The least sum and least max of stage times over the feasible ways to
 * cover [0, j) with stages 0..s of at most `cap` seconds each, where their
 * last stage starts, and the other figure of each of those two prefixes. */
typedef struct Prefix {
    double cap;
    double *sum, *max;        /* [S][n+1]: INFINITY where no way fits */
    int *sum_from, *max_from;
    double *sum_max, *max_sum;
} Prefix;

/* A suffix of stages s.. from start i: its largest and summed stage time,
 * and the entry k of the front at (s + 1, next) that it extends. */
typedef struct Pair {
    double max, sum;
    int next, k;
} Pair;

typedef struct Front {
    Pair *e;                  /* max rising, sum falling */
    int n;
} Front;

/* The least prefix sums under a lower cap on stage time: a prefix whose
 * largest stage is above the cap of the level below and within this one's
 * has at least this sum. Levels come from the programs run to find the
 * cap: the first partitions, and PROBES caps between the least max and the
 * cap. */
enum { PROBES = 3, LEVELS = PROBES + 2 };

typedef struct Level {
    double cap;
    double *sum;              /* [S][n+1] */
} Level;

typedef struct Search {
    Arena *a;
    Solver *sv;
    const Prefix *f;          /* the prefixes under the cap */
    double bound;             /* the least T of a known partition, plus slack */
    double least_max;         /* no partition's max is below it */
    double least_sum;         /* nor the sum of one under the bound below this */
    Front *front;             /* [S+1][n+1] */
    Pair *buf;                /* the front being built */
    size_t nbuf, room;
    Level level[LEVELS];      /* caps rising; the last is f's */
    int nlevel;
    double max_floor;         /* of the state being built: see extend */
    double lv_sum[LEVELS], lv_floor[LEVELS];   /* and its levels */
} Search;

static inline size_t at(const Solver *sv, int s, int j)
{
    return (size_t)s * (size_t)(sv->n + 1) + (size_t)j;
}

/* fmax and fmin without the NaN cases, which cannot occur here, so that
 * they compile to one instruction. */
static inline double max2(double a, double b)
{
    return a > b ? a : b;
}

static inline double min2(double a, double b)
{
    return a < b ? a : b;
}

static double step_time(const double *t, int S, int M)
{
    double sum = 0, max = 0;
    for (int s = 0; s < S; s++) {
        sum += t[s];
        max = max2(max, t[s]);
    }
    return sum + (M - 1) * max;
}

/* mem / cap; a cap of 0 or less holds nothing but an empty stage. */
static double mem_ratio(int64_t mem, int64_t cap)
{
    if (cap > 0)
        return (double)mem / (double)cap;
    return mem <= cap ? 0 : INFINITY;
}

/* ---------------------------------------------------------- input checks */

static bool finite_nonneg(double x)
{
    return isfinite(x) && x >= 0;
}

static void check_stages(const PartProblem *p)
{
    MPCC_ASSERT(p->n >= 1 && p->nstages >= 1 && p->ndev >= 1 && p->M >= 1);
    for (int s = 0; s < p->nstages; s++) {
        int d = p->stage_dev[s];
        MPCC_ASSERT(d >= 0 && d < p->ndev && p->inflight[s] >= 0);
        if (s == 0)
            continue;
        int link = p->stage_dev[s - 1] * p->ndev + d;
        MPCC_ASSERT(p->link_bw[link] > 0 && finite_nonneg(p->link_latency[link]));
    }
}

static void check_units(const PartProblem *p)
{
    for (int u = 0; u < p->n; u++) {
        MPCC_ASSERT(p->fixed_mem[u] >= 0 && p->act_mem[u] >= 0 &&
                    (!p->work_mem || p->work_mem[u] >= 0));
        MPCC_ASSERT(!p->pin || p->pin[u] >= -1);
        for (int d = 0; d < p->ndev; d++)
            MPCC_ASSERT(finite_nonneg(p->time[d * p->n + u]));
    }
}

static void check_values(const PartProblem *p)
{
    for (int v = 0; v < p->nvalues; v++) {
        const PartValue *pv = &p->values[v];
        MPCC_ASSERT(pv->producer >= -1 && pv->producer < p->n);
        MPCC_ASSERT(finite_nonneg(pv->bytes) && pv->bytes < 0x1p62);
        MPCC_ASSERT(pv->nconsumers >= 0);
        for (int k = 0; k < pv->nconsumers; k++)
            MPCC_ASSERT(pv->consumers[k] > pv->producer && pv->consumers[k] < p->n);
    }
}

/* No stage's memory, however cut, overflows int64. */
static void check_memory_range(const PartProblem *p)
{
    int64_t fixed = 0, held = 0, x;
    for (int u = 0; u < p->n; u++)
        MPCC_ASSERT(!add_overflows(fixed, p->fixed_mem[u], &fixed) &&
                    !add_overflows(fixed, p->work_mem ? p->work_mem[u] : 0, &fixed) &&
                    !add_overflows(held, p->act_mem[u], &held));
    for (int v = 0; v < p->nvalues; v++)
        MPCC_ASSERT(!add_overflows(held, (int64_t)ceil(p->values[v].bytes), &held));
    for (int s = 0; s < p->nstages; s++)
        MPCC_ASSERT(!mul_overflows(p->inflight[s], held, &x) && !add_overflows(x, fixed, &x));
}

static void check_problem(const PartProblem *p)
{
    check_stages(p);
    check_units(p);
    check_values(p);
    check_memory_range(p);
}

/* ------------------------------------------------------------- the solver */

static void prefix_sums(Arena *a, Solver *sv)
{
    const PartProblem *p = sv->p;
    int n = sv->n;
    sv->ptime = arena_array(a, (size_t)sv->S * (size_t)(n + 1), sizeof *sv->ptime);
    sv->pfixed = arena_array(a, (size_t)n + 1, sizeof *sv->pfixed);
    sv->pact = arena_array(a, (size_t)n + 1, sizeof *sv->pact);
    for (int u = 0; u < n; u++) {
        sv->pfixed[u + 1] = sv->pfixed[u] + p->fixed_mem[u];
        sv->pact[u + 1] = sv->pact[u] + p->act_mem[u];
    }
    for (int s = 0; s < sv->S; s++) {
        double *pt = &sv->ptime[at(sv, s, 0)];
        const double *t = &p->time[p->stage_dev[s] * n];
        for (int u = 0; u < n; u++)
            pt[u + 1] = pt[u] + t[u];
    }
}

static void links(Arena *a, Solver *sv)
{
    const PartProblem *p = sv->p;
    sv->lat = arena_array(a, (size_t)sv->S, sizeof *sv->lat);
    sv->bw = arena_array(a, (size_t)sv->S, sizeof *sv->bw);
    sv->bw[0] = INFINITY;   /* the first stage receives nothing */
    for (int s = 1; s < sv->S; s++) {
        int link = p->stage_dev[s - 1] * p->ndev + p->stage_dev[s];
        sv->lat[s] = p->link_latency[link];
        sv->bw[s] = p->link_bw[link];
    }
}

/* last[s][i]: a stage s starting at i must stop before the first unit
 * pinned elsewhere, and leave one unit to each later stage. */
static void last_ends(Arena *a, Solver *sv)
{
    const int *pin = sv->p->pin;
    int n = sv->n;
    sv->last = arena_array(a, (size_t)sv->S * (size_t)(n + 1), sizeof *sv->last);
    for (int s = 0; s < sv->S; s++) {
        int *last = &sv->last[at(sv, s, 0)];
        last[n] = n - (sv->S - 1 - s);
        for (int i = n - 1; i >= 0; i--)
            last[i] = pin && pin[i] >= 0 && pin[i] != s ? i : last[i + 1];
    }
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

static int cmp_event(const void *x, const void *y)
{
    return cmp_int(&((const Event *)x)->end, &((const Event *)y)->end);
}

/* The consumers of v in buf, sorted, without repeats; returns their count. */
static int sorted_consumers(const PartValue *v, int *buf)
{
    if (v->nconsumers == 0)
        return 0;
    memcpy(buf, v->consumers, (size_t)v->nconsumers * sizeof *buf);
    qsort(buf, (size_t)v->nconsumers, sizeof *buf, cmp_int);
    int m = 1;
    for (int k = 1; k < v->nconsumers; k++)
        if (buf[k] != buf[m - 1])
            buf[m++] = buf[k];
    return m;
}

/* The events of one value (a graph input has none). Without sv->ev it only
 * counts them, per start, into sv->ev_at[i + 1]; with it, it writes them at
 * fill[i]. */
static void value_events(Solver *sv, const PartValue *v, int *buf, int *fill)
{
    if (v->producer < 0)
        return;
    int nc = sorted_consumers(v, buf);
    for (int m = 0; m < nc; m++) {
        int lo = m ? buf[m - 1] + 1 : v->producer + 1;   /* starts whose next reader is buf[m] */
        for (int i = lo; i <= buf[m]; i++) {
            if (sv->ev)
                sv->ev[fill[i]++] = (Event){buf[m] + 1, v->bytes,
                                            v->transient ? 0 : (int64_t)ceil(v->bytes)};
            else
                sv->ev_at[i + 1]++;
        }
    }
}

static void build_events(Arena *a, Solver *sv)
{
    const PartProblem *p = sv->p;
    int n = sv->n, most = 0;
    for (int v = 0; v < p->nvalues; v++)
        most = p->values[v].nconsumers > most ? p->values[v].nconsumers : most;
    int *buf = arena_array(a, (size_t)most + 1, sizeof *buf);
    sv->ev_at = arena_array(a, (size_t)n + 1, sizeof *sv->ev_at);
    for (int v = 0; v < p->nvalues; v++)
        value_events(sv, &p->values[v], buf, NULL);
    for (int i = 0; i < n; i++)
        sv->ev_at[i + 1] += sv->ev_at[i];
    int *fill = arena_array(a, (size_t)n + 1, sizeof *fill);
    memcpy(fill, sv->ev_at, (size_t)(n + 1) * sizeof *fill);
    sv->ev = arena_array(a, (size_t)sv->ev_at[n] + 1, sizeof *sv->ev);
    for (int v = 0; v < p->nvalues; v++)
        value_events(sv, &p->values[v], buf, fill);
    for (int i = 0; i < n; i++)
        qsort(&sv->ev[sv->ev_at[i]], (size_t)(sv->ev_at[i + 1] - sv->ev_at[i]),
              sizeof *sv->ev, cmp_event);
}

static void exclusions(Arena *a, Solver *sv)
{
    const PartProblem *p = sv->p;
    sv->ex_from = arena_array(a, (size_t)sv->S * (size_t)(sv->n + 1), sizeof *sv->ex_from);
    for (int k = 0; k < p->nexcluded; k++) {
        const int *e = &p->excluded[3 * k];
        if (e[0] < sv->S && e[1] <= sv->n)
            sv->ex_from[at(sv, e[0], e[1])] = true;
    }
}

static Solver *solver_new(Arena *a, const PartProblem *p)
{
    Solver *sv = arena_alloc(a, sizeof *sv);
    sv->p = p;
    sv->n = p->n;
    sv->S = p->nstages;
    prefix_sums(a, sv);
    links(a, sv);
    last_ends(a, sv);
    build_events(a, sv);
    exclusions(a, sv);
    return sv;
}

/* ------------------------------------------------------------- one stage */

/* Stage s from i, still empty. */
static Stage stage_at(const Solver *sv, int s, int i)
{
    return (Stage){.sv = sv, .s = s, .i = i, .j = i, .ev = sv->ev_at[i]};
}

/* Takes in unit j, and the values that now enter. */
static inline void grow(Stage *st)
{
    const Solver *sv = st->sv;
    int stop = sv->ev_at[st->i + 1];
    st->j++;
    if (sv->p->work_mem && sv->p->work_mem[st->j - 1] > st->work)
        st->work = sv->p->work_mem[st->j - 1];
    for (; st->ev < stop && sv->ev[st->ev].end <= st->j; st->ev++) {
        st->count++;
        st->bytes += sv->ev[st->ev].bytes;
        st->mem += sv->ev[st->ev].mem;
    }
}

static inline double stage_time(const Stage *st)
{
    const Solver *sv = st->sv;
    const double *pt = &sv->ptime[at(sv, st->s, 0)];
    return pt[st->j] - pt[st->i] + st->count * sv->lat[st->s] + st->bytes / sv->bw[st->s];
}

static inline int64_t stage_mem(const Stage *st)
{
    const Solver *sv = st->sv;
    int64_t held = sv->pact[st->j] - sv->pact[st->i] + st->mem;
    return sv->pfixed[st->j] - sv->pfixed[st->i] + st->work + sv->p->inflight[st->s] * held;
}

static inline bool fits(const Stage *st)
{
    return stage_mem(st) <= st->sv->p->mem_cap[st->s];
}

static bool in_excluded(const PartProblem *p, int s, int i, int j)
{
    for (int k = 0; k < p->nexcluded; k++)
        if (p->excluded[3 * k] == s && p->excluded[3 * k + 1] == i &&
            p->excluded[3 * k + 2] == j)
            return true;
    return false;
}

/* Measured not to fit (PartProblem.excluded): skipped, unlike a stage over
 * its cap, without ending the loop over ends. */
static inline bool excluded(const Stage *st)
{
    const Solver *sv = st->sv;
    return sv->ex_from[at(sv, st->s, st->i)] && in_excluded(sv->p, st->s, st->i, st->j);
}

/* The last end of the stage, for pins and the stages after it. */
static inline int last_end(const Stage *st)
{
    return st->sv->last[at(st->sv, st->s, st->i)];
}

/* May the stage end where it is now? Only the last stage ends at n, and
 * no other where no_cut forbids a cut. */
static inline bool end_ok(const Stage *st)
{
    const Solver *sv = st->sv;
    if (st->s == sv->S - 1)
        return st->j == sv->n;
    return st->j < sv->n && !(sv->p->no_cut && sv->p->no_cut[st->j - 1]);
}

/* The partition read back from the starts of the last stages: from[s][j]
 * is where the stage s that ends at j starts. */
static int *path_from(Arena *a, const Solver *sv, const int *from)
{
    int *first = arena_array(a, (size_t)sv->S + 1, sizeof *first);
    first[sv->S] = sv->n;
    for (int s = sv->S - 1; s >= 0; s--)
        first[s] = from[at(sv, s, first[s + 1])];
    MPCC_ASSERT(first[0] == 0);
    return first;
}

/* ------------------------------------------------- least sum, least max */

/* Keeps the better of the prefix at k and a new one, without a branch:
 * which is better is a coin toss to the processor. */
static void keep_sum(Prefix *f, size_t k, double sum, double max, int i)
{
    bool b = sum < f->sum[k];
    f->sum[k] = b ? sum : f->sum[k];
    f->sum_max[k] = b ? max : f->sum_max[k];
    f->sum_from[k] = b ? i : f->sum_from[k];
}

static void keep_max(Prefix *f, size_t k, double sum, double max, int i)
{
    bool b = max < f->max[k];
    f->max[k] = b ? max : f->max[k];
    f->max_sum[k] = b ? sum : f->max_sum[k];
    f->max_from[k] = b ? i : f->max_from[k];
}

/* The prefixes that end with a stage s from i. */
static void relax_prefix(Solver *sv, Prefix *f, int s, int i)
{
    size_t from = s ? at(sv, s - 1, i) : 0;
    double sum = s ? f->sum[from] : 0, max = s ? f->max[from] : 0;
    double sum_max = s ? f->sum_max[from] : 0, max_sum = s ? f->max_sum[from] : 0;
    Stage st = stage_at(sv, s, i);
    for (int last = last_end(&st); st.j < last;) {
        grow(&st);
        double t = stage_time(&st);
        if (t > f->cap || !fits(&st))
            break;
        if (!end_ok(&st) || excluded(&st))
            continue;
        size_t k = at(sv, s, st.j);
        keep_sum(f, k, sum + t, max2(sum_max, t), i);
        keep_max(f, k, max_sum + t, max2(max, t), i);
    }
}

/* A state (s, j) is reached only from starts i < j, so one pass over the
 * starts settles them all. The tables of f are allocated on first use and
 * reused after. */
static void prefix_dp(Arena *a, Solver *sv, Prefix *f, double cap)
{
    size_t nstate = (size_t)sv->S * (size_t)(sv->n + 1);
    if (!f->sum) {
        f->sum = arena_array(a, nstate, sizeof *f->sum);
        f->max = arena_array(a, nstate, sizeof *f->max);
        f->sum_from = arena_array(a, nstate, sizeof *f->sum_from);
        f->max_from = arena_array(a, nstate, sizeof *f->max_from);
        f->sum_max = arena_array(a, nstate, sizeof *f->sum_max);
        f->max_sum = arena_array(a, nstate, sizeof *f->max_sum);
    }
    f->cap = cap;
    for (size_t k = 0; k < nstate; k++)
        f->sum[k] = f->max[k] = INFINITY;
    relax_prefix(sv, f, 0, 0);
    for (int i = 1; i < sv->n; i++)
        for (int s = 1; s < sv->S; s++)
            if (f->sum[at(sv, s - 1, i)] < INFINITY)
                relax_prefix(sv, f, s, i);
}

static bool reached(const Solver *sv, const Prefix *f)
{
    return f->sum[at(sv, sv->S - 1, sv->n)] < INFINITY;
}

/* T of the better of the least-sum and least-max partitions, plus slack. */
static double upper_bound(Arena *a, const Solver *sv, const Prefix *f)
{
    PartResult r;
    part_eval(a, sv->p, path_from(a, sv, f->sum_from), &r);
    double t = r.step_time;
    part_eval(a, sv->p, path_from(a, sv, f->max_from), &r);
    return min2(t, r.step_time) * (1 + 1e-9);
}

/* ----------------------------------------------------- the Pareto search */

/* Adds c to the front being built (max rising, sum falling) unless an
 * entry beats it in both max and sum, and drops the entries it beats. */
static void offer(Search *se, Pair c)
{
    Pair *e = se->buf;
    size_t lo = 0, hi = se->nbuf;
    while (lo < hi) {   /* the first entry with max >= c.max */
        size_t mid = (lo + hi) / 2;
        if (e[mid].max < c.max)
            lo = mid + 1;
        else
            hi = mid;
    }
    if ((lo > 0 && e[lo - 1].sum <= c.sum) || (lo < se->nbuf && e[lo].max == c.max && e[lo].sum <= c.sum))
        return;
    size_t beaten = lo;
    while (beaten < se->nbuf && e[beaten].sum >= c.sum)
        beaten++;
    if (beaten == lo) {   /* nothing beaten: make room */
        if (se->nbuf == se->room) {
            se->room = se->room ? 2 * se->room : 64;
            se->buf = e = arena_grow(se->a, e, se->nbuf, se->room, sizeof *e);
        }
        memmove(&e[lo + 1], &e[lo], (se->nbuf - lo) * sizeof *e);
        se->nbuf++;
    } else if (beaten > lo + 1) {
        memmove(&e[lo + 1], &e[beaten], (se->nbuf - beaten) * sizeof *e);
        se->nbuf -= beaten - lo - 1;
    }
    e[lo] = c;
}

/* The least T a partition could reach with this suffix after any prefix:
 * over the levels, the least prefix sum with the prefix's max at least the
 * level's floor. */
static double lower_bound(const Search *se, double max, double sum)
{
    double best = INFINITY, stretch = se->sv->p->M - 1;
    for (int k = 0; k < se->nlevel; k++)
        best = min2(best, se->lv_sum[k] + stretch * max2(se->lv_floor[k], max));
    return best + sum;
}

/* Candidates for the front of (s, i) from a first stage [i, j) of time t.
 * A max below the floor counts as the floor: every partition through the
 * state has a max at least that high, so T is unchanged, and the pairs
 * under it collapse into one (the last, with the least sum). */
static void extend(Search *se, int j, const Front *next, double t)
{
    double head = max2(t, next->e[0].max), tail = t + next->e[next->n - 1].sum;
    if (lower_bound(se, head, tail) > se->bound)
        return;
    double low = max2(se->max_floor, t);
    int k = 0;
    while (k + 1 < next->n && next->e[k + 1].max <= low)
        k++;
    for (; k < next->n; k++) {
        Pair c = {max2(low, next->e[k].max), t + next->e[k].sum, j, k};
        if (lower_bound(se, c.max, c.sum) <= se->bound)
            offer(se, c);
    }
}

/* Each entry of a front, after the least-sum or the least-max prefix, is a
 * whole partition: the best of them lowers the bound as the search goes. */
static void tighten(Search *se, int s, int i, const Front *fr)
{
    if (s == 0)
        return;
    const Prefix *f = se->f;
    size_t k = at(se->sv, s - 1, i);
    int M = se->sv->p->M;
    for (int e = 0; e < fr->n; e++) {
        double a = f->sum[k] + fr->e[e].sum + (M - 1) * max2(f->sum_max[k], fr->e[e].max);
        double b = f->max_sum[k] + fr->e[e].sum + (M - 1) * max2(f->max[k], fr->e[e].max);
        se->bound = min2(se->bound, min2(a, b) * (1 + 1e-9));
    }
}

static void build_front(Search *se, int s, int i)
{
    Solver *sv = se->sv;
    double stretch = sv->p->M - 1;
    se->max_floor = max2(s ? se->f->max[at(sv, s - 1, i)] : 0, se->least_max);
    for (int k = 0; k < se->nlevel; k++) {
        se->lv_sum[k] = s ? se->level[k].sum[at(sv, s - 1, i)] : 0;
        se->lv_floor[k] = k ? max2(se->max_floor, se->level[k - 1].cap) : se->max_floor;
    }
    se->nbuf = 0;
    Stage st = stage_at(sv, s, i);
    for (int last = last_end(&st); st.j < last;) {
        grow(&st);
        double t = stage_time(&st);
        if (se->least_sum + stretch * t > se->bound || !fits(&st))
            break;
        const Front *next = &se->front[at(sv, s + 1, st.j)];
        if (end_ok(&st) && next->n && !excluded(&st))
            extend(se, st.j, next, t);
    }
    Front *fr = &se->front[at(sv, s, i)];
    fr->n = (int)se->nbuf;
    fr->e = arena_array(se->a, (size_t)fr->n, sizeof *fr->e);
    if (fr->n)
        memcpy(fr->e, se->buf, (size_t)fr->n * sizeof *fr->e);
    tighten(se, s, i, fr);
}

/* Fronts from the last start down: (s, i) needs only (s + 1, j > i).
 * Only the states some prefix under the cap reaches are built. */
static void pareto_dp(Search *se)
{
    Solver *sv = se->sv;
    Front *end = &se->front[at(sv, sv->S, sv->n)];
    end->e = arena_alloc(se->a, sizeof *end->e);
    *end->e = (Pair){0, 0, -1, -1};
    end->n = 1;
    for (int i = sv->n - 1; i >= 0; i--)
        for (int s = 0; s < sv->S; s++)
            if (s ? se->f->sum[at(sv, s - 1, i)] < INFINITY : i == 0)
                build_front(se, s, i);
}

/* The entry of front (0, 0) with the least T, followed to the end. */
static int *best_path(Arena *a, const Search *se, double *T)
{
    const Solver *sv = se->sv;
    const Front *fr = &se->front[at(sv, 0, 0)];
    MPCC_ASSERT(fr->n > 0);
    int best = 0, M = sv->p->M;
    for (int k = 1; k < fr->n; k++)
        if (fr->e[k].sum + (M - 1) * fr->e[k].max < fr->e[best].sum + (M - 1) * fr->e[best].max)
            best = k;
    *T = fr->e[best].sum + (M - 1) * fr->e[best].max;
    int *first = arena_array(a, (size_t)sv->S + 1, sizeof *first);
    first[0] = 0;
    const Pair *c = &fr->e[best];
    for (int s = 0; s < sv->S; s++) {
        first[s + 1] = c->next;
        c = &se->front[at(sv, s + 1, c->next)].e[c->k];
    }
    return first;
}

/* ------------------------------------------------------ bounds for M > 1 */

/* No partition's sum is below the least time of each unit on any stage's
 * device. */
static double least_unit_time(const Solver *sv)
{
    const PartProblem *p = sv->p;
    double sum = 0;
    for (int u = 0; u < sv->n; u++) {
        double t = INFINITY;
        for (int s = 0; s < sv->S; s++)
            t = min2(t, p->time[p->stage_dev[s] * sv->n + u]);
        sum += t;
    }
    return sum;
}

/* The cap on stage time that every partition under the bound respects. */
static double valid_cap(const Search *se)
{
    return (se->bound - se->least_sum) / (se->sv->p->M - 1);
}

/* Keeps g's least prefix sums as a level, and its partitions' T as a bound. */
static void keep_level(Arena *a, Search *se, const Prefix *g)
{
    Solver *sv = se->sv;
    size_t nstate = (size_t)sv->S * (size_t)(sv->n + 1);
    if (reached(sv, g))
        se->bound = min2(se->bound, upper_bound(a, sv, g));
    MPCC_ASSERT(se->nlevel < LEVELS - 1);
    Level *l = &se->level[se->nlevel++];
    l->cap = g->cap;
    l->sum = arena_array(a, nstate, sizeof *l->sum);
    memcpy(l->sum, g->sum, nstate * sizeof *l->sum);
}

/* Some partitions to start from: under the smallest cap on stage time,
 * doubling from the average, that lets one through, or under none. Returns
 * false if no partition fits. */
static bool first_partitions(Arena *a, Search *se, Prefix *f)
{
    Solver *sv = se->sv;
    double cap = se->least_sum / sv->S;
    for (int round = 0;; round++, cap *= 2) {
        bool last = !(cap > 0) || round == 6;
        prefix_dp(a, sv, f, last ? INFINITY : cap);
        if (reached(sv, f))
            break;
        if (last)
            return false;
    }
    se->least_max = f->max[at(sv, sv->S - 1, sv->n)];
    keep_level(a, se, f);
    return true;
}

/* Where the cap stands well above the least max, caps between them: their
 * partitions may lower the bound, and their prefix sums make levels. */
static void probe(Arena *a, Search *se)
{
    Prefix *g = arena_alloc(a, sizeof *g);
    for (int k = 1; k <= PROBES; k++) {
        double low = se->least_max, high = valid_cap(se);
        if (high <= 1.25 * low)
            return;
        prefix_dp(a, se->sv, g, low + (high - low) * k / (PROBES + 1));
        keep_level(a, se, g);
    }
}

/* A partition under the bound has no stage longer than the valid cap. The
 * least sum of the partitions made of such stages raises the least sum,
 * which lowers the cap again, until it settles. On return f holds the
 * prefixes under a cap that every partition under the bound respects. */
static void narrow(Arena *a, Search *se, Prefix *f)
{
    Solver *sv = se->sv;
    for (int round = 0;; round++) {
        double cap = valid_cap(se);
        if (cap <= f->cap && (cap > 0.97 * f->cap || round >= 6))
            return;
        prefix_dp(a, sv, f, cap);
        MPCC_ASSERT(reached(sv, f));
        se->least_sum = max2(se->least_sum, f->sum[at(sv, sv->S - 1, sv->n)]);
        se->bound = min2(se->bound, upper_bound(a, sv, f));
    }
}

/* The levels under f's cap, by cap, and f's on top. */
static void settle_levels(Search *se, const Prefix *f)
{
    int m = 0;
    for (int k = 0; k < se->nlevel; k++)
        if (se->level[k].cap < f->cap)
            se->level[m++] = se->level[k];
    for (int k = 1; k < m; k++)   /* insertion sort */
        for (int j = k; j > 0 && se->level[j - 1].cap > se->level[j].cap; j--) {
            Level l = se->level[j];
            se->level[j] = se->level[j - 1];
            se->level[j - 1] = l;
        }
    se->level[m++] = (Level){f->cap, f->sum};
    se->nlevel = m;
}

/* M > 1: the least T, or NULL if no partition fits. */
static int *least_step_time(Arena *a, Solver *sv, double least_sum, double *T)
{
    Prefix *f = arena_alloc(a, sizeof *f);
    Search se = {.a = a, .sv = sv, .f = f, .least_sum = least_sum, .bound = INFINITY};
    if (!first_partitions(a, &se, f))
        return NULL;
    narrow(a, &se, f);
    probe(a, &se);
    narrow(a, &se, f);
    settle_levels(&se, f);
    se.front = arena_array(a, (size_t)(sv->S + 1) * (size_t)(sv->n + 1), sizeof *se.front);
    pareto_dp(&se);
    return best_path(a, &se, T);
}

/* --------------------------------------------- when nothing fits in memory */

/* The least largest ratio of the prefixes (s, j), and among those the
 * least sum of stage times (the tie-break of --objective=memory). */
typedef struct Ratio {
    double *g, *sum;
    int *from;
    bool skip_excluded;       /* --objective=memory; the diagnostic keeps them */
} Ratio;

static void relax_ratio(Solver *sv, Ratio *q, int s, int i)
{
    size_t k0 = s ? at(sv, s - 1, i) : 0;
    double prev = s ? q->g[k0] : 0, before = s ? q->sum[k0] : 0;
    Stage st = stage_at(sv, s, i);
    for (int last = last_end(&st); st.j < last;) {
        grow(&st);
        if (!end_ok(&st) || (q->skip_excluded && excluded(&st)))
            continue;
        double v = max2(prev, mem_ratio(stage_mem(&st), sv->p->mem_cap[s]));
        double sum = before + stage_time(&st);
        size_t k = at(sv, s, st.j);
        if (q->from[k] < 0 || v < q->g[k] || (v == q->g[k] && sum < q->sum[k])) {
            q->g[k] = v;
            q->sum[k] = sum;
            q->from[k] = i;
        }
    }
}

/* Of the partitions that honour pins and no_cut (and, with skip_excluded,
 * avoid the excluded stages), one with the least largest mem / mem_cap
 * (ratios may be infinite, so from[] = -1 marks the states no partition
 * reaches); NULL if there is none. */
static int *least_ratio(Arena *a, Solver *sv, bool skip_excluded)
{
    size_t nstate = (size_t)sv->S * (size_t)(sv->n + 1);
    Ratio q = {.g = arena_array(a, nstate, sizeof *q.g),
               .sum = arena_array(a, nstate, sizeof *q.sum),
               .from = arena_array(a, nstate, sizeof *q.from),
               .skip_excluded = skip_excluded};
    for (size_t k = 0; k < nstate; k++)
        q.from[k] = -1;
    relax_ratio(sv, &q, 0, 0);
    for (int i = 1; i < sv->n; i++)
        for (int s = 1; s < sv->S; s++)
            if (q.from[at(sv, s - 1, i)] >= 0)
                relax_ratio(sv, &q, s, i);
    return q.from[at(sv, sv->S - 1, sv->n)] < 0 ? NULL : path_from(a, sv, q.from);
}

/* Nothing fits in memory: report the partition nearest to fitting. */
static bool no_fit(Arena *a, Solver *sv, PartResult *r)
{
    int *first = least_ratio(a, sv, false);
    if (first)
        MPCC_ASSERT(!part_eval(a, sv->p, first, r));
    return false;
}

/* ------------------------------------------------------------ the exports */

bool part_solve(Arena *a, const PartProblem *p, PartResult *r)
{
    check_problem(p);
    *r = (PartResult){.worst_stage = -1};
    if (p->nstages > p->n)
        return false;
    Solver *sv = solver_new(a, p);
    double T;
    int *first;
    if (p->M == 1) {   /* T is the sum */
        Prefix *f = arena_alloc(a, sizeof *f);
        prefix_dp(a, sv, f, INFINITY);
        if (!reached(sv, f))
            return no_fit(a, sv, r);
        first = path_from(a, sv, f->sum_from);
        T = f->sum[at(sv, sv->S - 1, sv->n)];
    } else if (!(first = least_step_time(a, sv, least_unit_time(sv), &T))) {
        return no_fit(a, sv, r);
    }
    MPCC_ASSERT(part_eval(a, p, first, r));
    MPCC_ASSERT(fabs(r->step_time - T) <= 1e-9 * T);
    return true;
}

bool part_solve_memory(Arena *a, const PartProblem *p, PartResult *r)
{
    check_problem(p);
    *r = (PartResult){.worst_stage = -1};
    if (p->nstages > p->n)
        return false;
    Solver *sv = solver_new(a, p);
    int *first = least_ratio(a, sv, true);
    if (!first)
        return no_fit(a, sv, r);
    return part_eval(a, p, first, r);
}

static void check_partition(const PartProblem *p, const int *first)
{
    MPCC_ASSERT(first[0] == 0 && first[p->nstages] == p->n);
    for (int s = 0; s < p->nstages; s++)
        MPCC_ASSERT(first[s] < first[s + 1]);
}

/* Units' time, fixed memory and activations (into held) per stage. */
static void add_units(const PartProblem *p, const int *first, PartResult *r, int64_t *held)
{
    for (int s = 0; s < p->nstages; s++) {
        const double *t = &p->time[p->stage_dev[s] * p->n];
        int64_t work = 0;
        for (int u = first[s]; u < first[s + 1]; u++) {
            r->stage_time[s] += t[u];
            r->stage_mem[s] += p->fixed_mem[u];
            held[s] += p->act_mem[u];
            if (p->work_mem && p->work_mem[u] > work)
                work = p->work_mem[u];
        }
        r->stage_mem[s] += work;
    }
}

/* Each value once into each later stage that reads it. */
static void add_received(Arena *a, const PartProblem *p, const int *stage_of, PartResult *r,
                         int64_t *held)
{
    int *seen = arena_array(a, (size_t)p->nstages, sizeof *seen);
    for (int s = 0; s < p->nstages; s++)
        seen[s] = -1;
    for (int v = 0; v < p->nvalues; v++) {
        const PartValue *pv = &p->values[v];
        for (int k = 0; pv->producer >= 0 && k < pv->nconsumers; k++) {
            int s = stage_of[pv->consumers[k]];
            if (s == stage_of[pv->producer] || seen[s] == v)
                continue;
            int link = p->stage_dev[s - 1] * p->ndev + p->stage_dev[s];
            r->stage_time[s] += p->link_latency[link] + pv->bytes / p->link_bw[link];
            held[s] += pv->transient ? 0 : (int64_t)ceil(pv->bytes);
            seen[s] = v;
        }
    }
}

static bool honours_cuts_and_pins(const PartProblem *p, const int *first, const int *stage_of)
{
    for (int s = 1; s < p->nstages; s++)
        if (p->no_cut && p->no_cut[first[s] - 1])
            return false;
    for (int u = 0; p->pin && u < p->n; u++)
        if (p->pin[u] >= 0 && p->pin[u] != stage_of[u])
            return false;
    return true;
}

/* The stage with the largest mem / mem_cap; true if all fit. */
static bool worst_stage(const PartProblem *p, PartResult *r)
{
    int w = 0;
    bool ok = true;
    for (int s = 0; s < p->nstages; s++) {
        ok &= r->stage_mem[s] <= p->mem_cap[s];
        if (mem_ratio(r->stage_mem[s], p->mem_cap[s]) > mem_ratio(r->stage_mem[w], p->mem_cap[w]))
            w = s;
    }
    r->worst_stage = w;
    r->worst_need = r->stage_mem[w];
    return ok;
}

bool part_eval(Arena *a, const PartProblem *p, const int *first, PartResult *r)
{
    check_problem(p);
    check_partition(p, first);
    int S = p->nstages;
    *r = (PartResult){0};
    r->first = arena_array(a, (size_t)S + 1, sizeof *r->first);
    memcpy(r->first, first, ((size_t)S + 1) * sizeof *first);
    r->stage_time = arena_array(a, (size_t)S, sizeof *r->stage_time);
    r->stage_mem = arena_array(a, (size_t)S, sizeof *r->stage_mem);
    int *stage_of = arena_array(a, (size_t)p->n, sizeof *stage_of);
    for (int s = 0; s < S; s++)
        for (int u = first[s]; u < first[s + 1]; u++)
            stage_of[u] = s;
    int64_t *held = arena_array(a, (size_t)S, sizeof *held);
    add_units(p, first, r, held);
    add_received(a, p, stage_of, r, held);
    for (int s = 0; s < S; s++)
        r->stage_mem[s] += p->inflight[s] * held[s];
    r->step_time = step_time(r->stage_time, S, p->M);
    bool fit = worst_stage(p, r);
    for (int s = 0; s < S; s++)
        fit &= !in_excluded(p, s, first[s], first[s + 1]);
    r->feasible = fit && honours_cuts_and_pins(p, first, stage_of);
    return r->feasible;
}
