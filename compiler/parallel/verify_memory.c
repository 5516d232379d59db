/* verify_memory.c — the memory plan checked by replaying a step.
 *
 * Each device's compute stream is replayed in order (plan_walk), with a
 * shadow of its arena: what each buffer slot holds (the micro-batch a node
 * wrote there, or what came from outside the compute stream: the host's
 * inputs, copies, parameters). A write marks every other slot whose memory
 * it overlaps as overwritten. The replay fails when
 *   - a node reads a slot another buffer has overwritten since,
 *   - a node reads an activation's slot for a micro-batch other than the
 *     one written there last (too few slots);
 * and, without the replay, when buffers that overlap are not all computed
 * values the compute stream alone touches (no copy, no host, no code after
 * an action's nodes), or the scratch area overlaps a buffer. The copies of
 * offloaded values and weights are the exception: they run inside windows of the
 * compute stream (verify.c proves it), where the replay reads and writes
 * their buffers; host arenas are replayed apart from the devices'. A
 * failure is a bug in mpcc, reported as an internal error naming the
 * buffers.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

enum { FROM_OUTSIDE = -1 };   /* a slot's content; overwritten: -2 - the writer's buffer */

typedef struct Shadow {
    const Plan *p;
    int *slot0;       /* [nbufs]: the buffer's first entry in held */
    int *held;        /* per slot: the micro-batch written there, or the above */
    int **over;       /* [nbufs]: the other buffers whose memory meets this one's */
    int *nover;
} Shadow;

static size_t lo(const Plan *p, int b)
{
    return p->bufs[b].offset;
}

static size_t hi(const Plan *p, int b)
{
    return p->bufs[b].offset + p->bufs[b].bytes * (size_t)p->bufs[b].slots;
}

static const char *buf_name(const Plan *p, int b)
{
    return p->g->values[p->bufs[b].value].name;
}

typedef struct Placed {
    int arena, buf;   /* arena: the device's, or ndev + the device's host arena */
    size_t lo;
} Placed;

static int by_place(const void *x, const void *y)
{
    const Placed *a = x, *b = y;
    if (a->arena != b->arena)
        return a->arena - b->arena;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Pairs of buffers on one device whose memory meets: counted, then listed. */
static void find_overlaps(Shadow *sh, Arena *a)
{
    const Plan *p = sh->p;
    Placed *by = arena_array(a, (size_t)p->nbufs + 1, sizeof(Placed));
    for (int b = 0; b < p->nbufs; b++)
        by[b] = (Placed){p->bufs[b].dev + (p->bufs[b].host ? p->sc->ndev : 0), b, lo(p, b)};
    qsort(by, (size_t)p->nbufs, sizeof(Placed), by_place);
    for (int pass = 0; pass < 2; pass++) {
        for (int b = 0; pass && b < p->nbufs; b++) {
            sh->over[b] = arena_array(a, (size_t)sh->nover[b] + 1, sizeof(int));
            sh->nover[b] = 0;
        }
        for (int i = 0; i < p->nbufs; i++)
            for (int j = i + 1; j < p->nbufs && by[j].arena == by[i].arena &&
                                by[j].lo < hi(p, by[i].buf); j++) {
                int x = by[i].buf, y = by[j].buf;
                if (pass)
                    sh->over[x][sh->nover[x]] = y, sh->over[y][sh->nover[y]] = x;
                sh->nover[x]++, sh->nover[y]++;
            }
    }
}

/* The copies' buffers, at either end, but for offload copies. */
static bool *copied(const Plan *p, Arena *a)
{
    bool *c = arena_array(a, (size_t)p->nbufs, sizeof(bool));
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_COPY && !plan_offload_copy(p, p->ops[i].dst))
            c[p->ops[i].src] = c[p->ops[i].dst] = true;
    return c;
}

static void check_sharers(const Shadow *sh, Arena *a)
{
    const Plan *p = sh->p;
    bool *cp = copied(p, a), *outside = plan_read_outside(p->g, a);
    for (int b = 0; b < p->nbufs; b++) {
        const Buf *bf = &p->bufs[b];
        if (!bf->host && hi(p, b) > p->work_offset[bf->dev])
            mpcc_die(__FILE__, __LINE__, "plan: buffer '%s' on %s reaches into the scratch area",
                     buf_name(p, b), p->ds->d[bf->dev].name);
        if (!sh->nover[b])
            continue;
        if (bf->streamed && !bf->host)
            continue;   /* an offloaded weight: its copies run in windows the replay covers */
        if (p->g->values[bf->value].kind != VK_ACTIVATION || bf->received || bf->acc ||
            bf->host || cp[b] || outside[bf->value])
            mpcc_die(__FILE__, __LINE__, "plan: buffer '%s' on %s shares memory with '%s', but "
                     "more than the compute stream's nodes touch it", buf_name(p, b),
                     p->ds->d[bf->dev].name, buf_name(p, sh->over[b][0]));
    }
}

/* ---- the replay ---- */

static int *held(const Shadow *sh, int b, int mb)
{
    return &sh->held[sh->slot0[b] + mb % sh->p->bufs[b].slots];
}

static void overwrite(const Shadow *sh, int b, int mb)
{
    const Plan *p = sh->p;
    size_t wlo = lo(p, b) + (size_t)(mb % p->bufs[b].slots) * p->bufs[b].bytes;
    size_t whi = wlo + p->bufs[b].bytes;
    for (int i = 0; i < sh->nover[b]; i++) {
        int c = sh->over[b][i];
        for (int t = 0; t < p->bufs[c].slots; t++) {
            size_t clo = lo(p, c) + (size_t)t * p->bufs[c].bytes;
            if (clo < whi && wlo < clo + p->bufs[c].bytes)
                sh->held[sh->slot0[c] + t] = -2 - b;
        }
    }
}

static void replay_touch(void *ctx, int b, int mb, int pos, bool write, uint32_t node)
{
    const Shadow *sh = ctx;
    const Plan *p = sh->p;
    int *h = held(sh, b, mb);
    (void)pos;
    if (write) {
        overwrite(sh, b, mb);
        *h = mb;
        return;
    }
    if (*h <= -2)
        mpcc_die(__FILE__, __LINE__, "plan: node '%s' reads '%s' (micro-batch %d) on %s after "
                 "'%s' overwrote its memory", p->g->nodes[node].name, buf_name(p, b), mb,
                 p->ds->d[p->bufs[b].dev].name, buf_name(p, -2 - *h));
    if (*h >= 0 && *h != mb && p->g->values[p->bufs[b].value].kind == VK_ACTIVATION)
        mpcc_die(__FILE__, __LINE__, "plan: node '%s' reads '%s' for micro-batch %d on %s, but "
                 "its slot holds micro-batch %d", p->g->nodes[node].name, buf_name(p, b), mb,
                 p->ds->d[p->bufs[b].dev].name, *h);
}

void plan_verify_memory(const Plan *p)
{
    Arena *a = p->g->arena;
    Shadow sh = {.p = p};
    sh.slot0 = arena_array(a, (size_t)p->nbufs + 1, sizeof(int));
    sh.over = arena_array(a, (size_t)p->nbufs + 1, sizeof(int *));
    sh.nover = arena_array(a, (size_t)p->nbufs + 1, sizeof(int));
    int nslots = 0;
    for (int b = 0; b < p->nbufs; b++) {
        sh.slot0[b] = nslots;
        nslots += p->bufs[b].slots;
    }
    sh.held = arena_array(a, (size_t)nslots + 1, sizeof(int));
    for (int i = 0; i < nslots; i++)
        sh.held[i] = FROM_OUTSIDE;
    find_overlaps(&sh, a);
    check_sharers(&sh, a);
    for (int d = 0; d < p->sc->ndev; d++)
        plan_walk(p, d, replay_touch, &sh);
}
