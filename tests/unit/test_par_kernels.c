/* test_par_kernels.c — the CPU kernels that split their work over a
 * device's threads (runtime/pool.c) give the same bytes on 1 and 3
 * threads: ReduceMax/Min and its gradient, ArgMax, CumSum, TopK and its
 * gradient, GroupNorm and its gradient, Dropout, Concat/Split, Gather and
 * its gradient, Where, comparisons, Pad, Cast, Sum/Mean/Min/Max of several
 * operands, and the gradients of PRelu, Pow and the MSE loss. Each case is larger than
 * two pieces of its kernel's grain, so 3 threads split it; the inputs hold
 * ties, repeated indices and NaN where a kernel has a rule for them.
 * ReduceMax, its gradient and Gather's gradient are also checked against
 * plain loops written here, walking x in its own order. */
#define _POSIX_C_SOURCE 200809L
#include "program.h"
#include "kernel.h"
#include "state.c"
#include "pool.c"
#include "cpu.c"
#include "cpu_move.c"
#include "cpu_math.c"

#include "check.h"

enum { RUNS = 2, MAXOUT = 40 };

/* One run's results: up to MAXOUT arrays, kept to compare. */
typedef struct Run {
    void *out[MAXOUT];
    size_t bytes[MAXOUT];
    int n;
} Run;

static Run runs[RUNS];

static void *keep(Run *r, size_t bytes)
{
    if (r->n == MAXOUT) {
        fprintf(stderr, "test_par_kernels: more than %d results; raise MAXOUT\n", MAXOUT);
        exit(1);
    }
    r->bytes[r->n] = bytes;
    r->out[r->n] = calloc(1, bytes ? bytes : 1);
    return r->out[r->n++];
}

static uint64_t rng = 88172645463325252ULL;

static float rnd(void)   /* small integers and halves: ties are common */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng % 17) * 0.5f - 4.0f;
}

static float *floats(long n)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (long i = 0; i < n; i++)
        x[i] = rnd();
    return x;
}

/* ---- the cases ---- */

enum { RA = 64, RB = 50, RC = 40 };   /* ReduceMax over the middle of [RA, RB, RC] */

static float *rx, *rdy, *ref_y, *ref_dx;

/* ReduceMax by x's order, as the one-thread kernel once walked it. */
static void reduce_reference(void)
{
    ref_y = malloc(RA * RC * sizeof *ref_y);
    ref_dx = malloc(RA * RB * RC * sizeof *ref_dx);
    float *count = calloc(RA * RC, sizeof *count);
    for (long i = 0; i < RA * RC; i++)
        ref_y[i] = -INFINITY;
    for (long a = 0; a < RA; a++)
        for (long b = 0; b < RB; b++)
            for (long c = 0; c < RC; c++) {
                float v = rx[(a * RB + b) * RC + c], *m = &ref_y[a * RC + c];
                if (v != v || v > *m)
                    *m = v;
            }
    for (long a = 0; a < RA; a++)
        for (long b = 0; b < RB; b++)
            for (long c = 0; c < RC; c++)
                count[a * RC + c] += rx[(a * RB + b) * RC + c] == ref_y[a * RC + c];
    for (long a = 0; a < RA; a++)
        for (long b = 0; b < RB; b++)
            for (long c = 0; c < RC; c++) {
                long o = a * RC + c, i = (a * RB + b) * RC + c;
                ref_dx[i] = rx[i] == ref_y[o] ? rdy[o] / count[o] : 0.0f;
            }
    free(count);
}

static void reductions(Run *r)
{
    long shape[3] = {RA, RB, RC};
    int keep_mid[3] = {1, 0, 1};
    float *y = keep(r, RA * RC * sizeof *y), *dx = keep(r, RA * RB * RC * sizeof *dx);
    mprt_reduce_max(0, 3, shape, keep_mid, rx, RA * RC, y);
    mprt_reduce_max_grad(3, shape, keep_mid, rdy, rx, y, RA * RC, dx);
    int keep_first[3] = {1, 0, 0};
    float *ymin = keep(r, RA * sizeof *ymin);
    mprt_reduce_max(1, 3, shape, keep_first, rx, RA, ymin);
    int64_t *arg = keep(r, RA * RC * sizeof *arg), *argl = keep(r, RA * RC * sizeof *argl);
    mprt_argmax(0, 0, MPRT_ELEM_F32, RA, RB, RC, rx, arg);
    mprt_argmax(1, 1, MPRT_ELEM_F32, RA, RB, RC, rx, argl);
    float *cs = keep(r, RA * RB * RC * sizeof *cs), *cse = keep(r, RA * RB * RC * sizeof *cse);
    mprt_cumsum(0, 0, RA, RB, RC, rx, cs);
    mprt_cumsum(1, 1, RA, RB, RC, rx, cse);
    enum { K = 5 };
    float *tv = keep(r, RA * K * RC * sizeof *tv), *tdx = keep(r, RA * RB * RC * sizeof *tdx);
    int64_t *ti = keep(r, RA * K * RC * sizeof *ti);
    mprt_topk(1, MPRT_ELEM_F32, RA, RB, K, RC, rx, tv, ti);
    mprt_topk_grad(RA, RB, K, RC, rdy, ti, tdx);
}

enum { GN = 4, GC = 12, GG = 3, GP = 3000 };

static float *gx, *gdy, *gscale, *gbias;

static void groups(Run *r)
{
    long n = (long)GN * GC * GP;
    float *y = keep(r, (size_t)n * sizeof *y), *dx = keep(r, (size_t)n * sizeof *dx);
    float *ds = keep(r, GC * sizeof *ds), *db = keep(r, GC * sizeof *db);
    mprt_group_norm(GN, GC, GG, GP, gx, gscale, gbias, 1e-5f, y);
    mprt_group_norm_grad(GN, GC, GG, GP, gdy, gx, gscale, 1e-5f, dx, ds, db);
    uint8_t *mask = keep(r, (size_t)n);
    float *dy = keep(r, (size_t)n * sizeof *dy), *dd = keep(r, (size_t)n * sizeof *dd);
    mprt_dropout(n, 7, 0.3f, 1, gx, dy, mask);
    mprt_dropout_grad(n, 7, 0.3f, gdy, dd);
}

enum { VOCAB = 97, D = 256, TOK = 700 };

static int64_t tok[TOK];
static float *emb, *edy, *edy2, *ref_de;

static void gather_reference(void)
{
    ref_de = calloc(VOCAB * D, sizeof *ref_de);
    for (long i = 0; i < TOK; i++)
        for (long j = 0; j < D; j++)
            ref_de[(tok[i] < 0 ? tok[i] + VOCAB : tok[i]) * D + j] += edy[i * D + j];
}

static void moves(Run *r)
{
    float *g = keep(r, TOK * D * sizeof *g), *de = keep(r, VOCAB * D * sizeof *de);
    mprt_gather(1, VOCAB, D, TOK, tok, emb, g, "gather");
    mprt_gather_grad(1, VOCAB, D, TOK, tok, edy, de, "gather");
    long len[3] = {3, 5, 2};
    void *part[3] = {emb, emb + 3 * 600, emb + 8 * 600};
    float *cat = keep(r, 10 * 300 * 2 * sizeof *cat);
    mprt_concat(sizeof(float), 0, 2, 300, 3, len, part, cat);
    void *back[3] = {keep(r, 3 * 300 * 2 * sizeof(float)), NULL,
                     keep(r, 2 * 300 * 2 * sizeof(float))};
    mprt_concat(sizeof(float), 1, 2, 300, 3, len, back, cat);
    long shape[2] = {TOK, D}, sc[2] = {1, 0}, sa[2] = {D, 1}, sb[2] = {0, 1};
    uint8_t *cond = keep(r, TOK);
    for (long i = 0; i < TOK; i++)
        cond[i] = (uint8_t)(tok[i] % 3 == 0);
    float *w = keep(r, TOK * D * sizeof *w);
    mprt_where(2, shape, cond, sc, edy, sa, emb, sb, w);
    uint8_t *cmp = keep(r, TOK * D);
    mprt_compare(MPRT_LESS, MPRT_ELEM_F32, 2, shape, edy, sa, emb, sb, cmp);
    long xs[2] = {TOK, D}, ys[2] = {TOK + 3, D + 40}, begin[2] = {1, 20};
    float *pad = keep(r, (TOK + 3) * (D + 40) * sizeof *pad);
    float *refl = keep(r, (TOK + 3) * (D + 40) * sizeof *refl);
    mprt_pad(0, MPRT_PAD_CONSTANT, 2, xs, ys, begin, 1.5f, edy, pad);
    mprt_pad(0, MPRT_PAD_REFLECT, 2, xs, ys, begin, 0.0f, edy, refl);
    int64_t *ci = keep(r, TOK * D * sizeof *ci);
    mprt_cast(TOK * D, MPRT_CAST_F32, MPRT_CAST_I64, edy, ci);
}

/* Broadcasting elementwise kernels over [TOK, D], the second operand a
 * row of D. */
static void broadcasts(Run *r)
{
    long shape[2] = {TOK, D}, full[2] = {D, 1}, row[2] = {0, 1};
    const float *x[3] = {edy, emb, emb + D};
    const long *sx[3] = {full, row, row};
    float *sum = keep(r, TOK * D * sizeof *sum), *mx = keep(r, TOK * D * sizeof *mx);
    mprt_nary(MPRT_ADD, 3, 2, shape, x, sx, 1.0f / 3, sum);
    mprt_nary(MPRT_MAX, 2, 2, shape, x, sx, 1.0f, mx);
    float *pg = keep(r, TOK * D * sizeof *pg), *pgs = keep(r, TOK * D * sizeof *pgs);
    mprt_prelu_grad(0, 2, shape, edy, edy, emb, row, pg);
    mprt_prelu_grad(1, 2, shape, edy, edy, emb, row, pgs);
    float *pw = keep(r, TOK * D * sizeof *pw), *pwa = keep(r, TOK * D * sizeof *pwa);
    float *pwb = keep(r, TOK * D * sizeof *pwb);
    mprt_binary(MPRT_POW, 2, shape, edy, full, emb, row, pw);
    mprt_pow_grad(0, 2, shape, edy, edy, full, emb, row, pw, pwa);
    mprt_pow_grad(1, 2, shape, edy, edy, full, emb, row, pw, pwb);
    float dloss = 0.75f, *mse = keep(r, TOK * D * sizeof *mse);
    mprt_mse_grad(TOK * D, &dloss, edy, edy2, mse);
}

static void run_all(Run *r)
{
    reductions(r);
    groups(r);
    moves(r);
    broadcasts(r);
}

static void inputs(void)
{
    rx = floats(RA * RB * RC);
    rx[123] = NAN, rx[RA * RB * RC - 7] = NAN;
    rdy = floats(RA * RC);
    gx = floats((long)GN * GC * GP), gdy = floats((long)GN * GC * GP);
    gscale = floats(GC), gbias = floats(GC);
    emb = floats(VOCAB * D), edy = floats(TOK * D), edy2 = floats(TOK * D);
    for (long i = 0; i < TOK; i++)   /* repeats, and negative ids from the end */
        tok[i] = (int64_t)(i * 31 % VOCAB) - (i % 11 == 0 ? VOCAB : 0);
}

int main(void)
{
    inputs();
    reduce_reference();
    gather_reference();
    mprt_threads = 1;
    run_all(&runs[0]);
    mprt_threads = 3;
    run_all(&runs[1]);
    CHECK(runs[0].n == runs[1].n);
    for (int i = 0; i < runs[0].n; i++) {
        int same = memcmp(runs[0].out[i], runs[1].out[i], runs[0].bytes[i]) == 0;
        CHECK(same);
        if (!same)
            fprintf(stderr, "  result %d differs between 1 and 3 threads\n", i);
    }
    for (int t = 0; t < RUNS; t++) {   /* results 0, 1: ReduceMax and its gradient */
        CHECK(memcmp(runs[t].out[0], ref_y, RA * RC * sizeof(float)) == 0);
        CHECK(memcmp(runs[t].out[1], ref_dx, RA * RB * RC * sizeof(float)) == 0);
    }
    int gather_grad = 0;
    for (int i = 0; i < runs[0].n; i++)   /* the first array of VOCAB x D floats */
        if (runs[0].bytes[i] == VOCAB * D * sizeof(float)) {
            gather_grad = i;
            break;
        }
    CHECK(gather_grad > 0);
    for (int t = 0; t < RUNS; t++)
        CHECK(memcmp(runs[t].out[gather_grad], ref_de, VOCAB * D * sizeof(float)) == 0);
    return check_summary("par_kernels");
}
