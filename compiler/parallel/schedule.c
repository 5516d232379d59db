/* schedule.c — the order in which each device runs its stages' actions
 * for the M micro-batches of a step:
 *
 *   gpipe        all forwards, then all backwards (fill-drain)
 *   1f1b         PipeDream-flush: stage s runs S-s-1 forwards ahead, then
 *                alternates one forward and one backward
 *   interleaved  1F1B over V stages per device (Megatron's order); needs M
 *                a multiple of the device count
 *   zb           1F1B with the backward split into input gradients (B) and
 *                weight gradients (W); stage s holds its W back by S-s-1
 *                micro-batches so they fill the drain bubble (ZB-H1)
 *
 * Every schedule runs each stage's forwards, backwards and weight
 * gradients in micro-batch order, so gradients accumulate in the same
 * order whatever the layout; updates come last. Only the order on each
 * device is fixed here: plan.c adds the copies and the events.
 */
#include "mpcc.h"

typedef struct Seq {
    Act *a;
    int n;
} Seq;

static void push(Seq *q, ActKind k, int stage, int mb)
{
    q->a[q->n++] = (Act){(uint8_t)k, (int16_t)stage, mb};
}

static void backward(Seq *q, int s, int mb, bool split)
{
    push(q, ACT_BWD, s, mb);
    if (split)
        push(q, ACT_WGRAD, s, mb);
}

static void gpipe(Seq *q, int s, int M)
{
    for (int mb = 0; mb < M; mb++)
        push(q, ACT_FWD, s, mb);
    for (int mb = 0; mb < M; mb++)
        backward(q, s, mb, false);
}

static void one_f_one_b(Seq *q, int s, int S, int M)
{
    int warm = S - s - 1 < M ? S - s - 1 : M;
    for (int mb = 0; mb < warm; mb++)
        push(q, ACT_FWD, s, mb);
    for (int i = 0; i < M - warm; i++) {
        push(q, ACT_FWD, s, warm + i);
        backward(q, s, i, false);
    }
    for (int i = M - warm; i < M; i++)
        backward(q, s, i, false);
}

/* ZB-H1: as 1F1B, with W(mb) after B(mb + lag). */
static void zero_bubble(Seq *q, int s, int S, int M)
{
    int warm = S - s - 1 < M ? S - s - 1 : M, lag = S - s - 1, w = 0;
    for (int mb = 0; mb < warm; mb++)
        push(q, ACT_FWD, s, mb);
    for (int b = 0; b < M; b++) {
        if (warm + b < M)
            push(q, ACT_FWD, s, warm + b);
        push(q, ACT_BWD, s, b);
        if (b - lag >= w)
            push(q, ACT_WGRAD, s, w++);
    }
    while (w < M)
        push(q, ACT_WGRAD, s, w++);
}

/* Megatron's interleaved order: the k-th forward on a device is chunk
 * (k / p) % v of micro-batch (k / (p v)) p + k % p; backwards walk the
 * chunks from the last. */
static void interleaved(Seq *q, int d, int p, int v, int M)
{
    int total = M * v, warm = (p - d - 1) * 2 + (v - 1) * p;
    if (warm > total)
        warm = total;
#define MB(k) (((k) / (p * v)) * p + (k) % p)
#define FWD_STAGE(k) ((((k) / p) % v) * p + d)
#define BWD_STAGE(k) ((v - 1 - ((k) / p) % v) * p + d)
    for (int k = 0; k < warm; k++)
        push(q, ACT_FWD, FWD_STAGE(k), MB(k));
    for (int i = 0; i < total - warm; i++) {
        push(q, ACT_FWD, FWD_STAGE(warm + i), MB(warm + i));
        push(q, ACT_BWD, BWD_STAGE(i), MB(i));
    }
    for (int i = total - warm; i < total; i++)
        push(q, ACT_BWD, BWD_STAGE(i), MB(i));
#undef MB
#undef FWD_STAGE
#undef BWD_STAGE
}

const char *schedule_name(SchedKind k)
{
    static const char *const names[] = {"auto", "gpipe", "1f1b", "interleaved", "zb"};
    return names[k];
}

/* NULL when the combination is invalid; *why then says what to change. */
Schedule *schedule_build(Arena *a, SchedKind kind, const Stages *st, int ndev, int M,
                         const char **why)
{
    int S = st->n, v = S / ndev;
    if (kind == SCHED_INTERLEAVED && M % ndev != 0) {
        *why = arena_printf(a, "the interleaved schedule needs the micro-batch count to be a "
                            "multiple of the %d devices; use --microbatches=%d or another "
                            "--schedule", ndev, (M / ndev + 1) * ndev);
        return NULL;
    }
    Schedule *sc = arena_alloc(a, sizeof *sc);
    *sc = (Schedule){.kind = kind, .M = M, .ndev = ndev, .nstages = S};
    sc->seq = arena_array(a, (size_t)ndev, sizeof(Act *));
    sc->nseq = arena_array(a, (size_t)ndev, sizeof(int));
    for (int d = 0; d < ndev; d++) {
        Seq q = {arena_array(a, (size_t)(3 * M + 1) * (size_t)v, sizeof(Act)), 0};
        if (kind == SCHED_INTERLEAVED)
            interleaved(&q, d, ndev, v, M);
        else if (kind == SCHED_GPIPE)
            gpipe(&q, d, M);
        else if (kind == SCHED_ZB)
            zero_bubble(&q, d, S, M);
        else
            one_f_one_b(&q, d, S, M);
        for (int s = d; s < S; s += ndev)
            push(&q, ACT_UPDATE, s, 0);
        sc->seq[d] = q.a;
        sc->nseq[d] = q.n;
    }
    return sc;
}
