/* test_share.c — buffers taking turns with memory (share.c), and the replay
 * that checks them (verify_memory.c).
 *
 * The samples are planned under each schedule, with micro-batches, with
 * recomputation and without fusion. Every plan must pass the replay (it
 * runs inside driver_plan, which aborts on a failure), and the buffers
 * taking turns must need less memory than they would apart. Then each
 * plan is broken in three ways, each in a child process that must abort
 * with the replay's internal error:
 *   - every buffer taking turns moved to one offset;
 *   - an activation held over several micro-batches given one slot;
 *   - a parameter moved onto a buffer taking turns.
 * With --offload=activations, the offloaded values' device buffers take
 * turns too (their copies run in windows of the compute stream), and the
 * static check (verify.c) must catch, again in a child:
 *   - the first backward no longer waiting for the copies that bring its
 *     values back (an early read);
 *   - the first forward's successor no longer waiting for the copies that
 *     take the values out (their memory reused while in flight);
 * and the replay, the fetched buffers given one slot each. Where a copy
 * back and a copy out of the action before reach the same memory, the
 * check must catch the copy back no longer waiting for it (both would run
 * between the two actions at once). With --offload=weights, the first
 * action of a weight's first window no longer waiting for its copy in must
 * be caught, and the replay must catch the offloaded weights' device
 * buffers placed at one offset.
 * The trainers' numbers (the train.* and pipeline.* tests, against
 * PyTorch) show the code follows the plan.
 */
#include "mpcc.h"
#include "check.h"
#include "plan_child.h"

#include <stdlib.h>
#include <string.h>

static const char *samples;

static Pipeline *plan(Arena *a, const char *model, const char **flags)
{
    char *argv[16] = {"mpcc", (char *)model};
    int argc = 2;
    for (; flags[argc - 2]; argc++)
        argv[argc] = (char *)flags[argc - 2];
    Options o;
    cli_parse(a, argc, argv, &o);
    return pipeline_choose(a, &o, &driver_passes);
}

/* In a child: the replay after fn, and the static check first when
 * `statics` (plan_child.h). */
static bool aborts_in(Plan *p, void (*fn)(Plan *), bool statics)
{
    return plan_aborts(p, fn, statics, true);
}

static bool aborts(Plan *p, void (*fn)(Plan *))
{
    return aborts_in(p, fn, false);
}

/* ---- offload ---- */

/* The first run op of kind `kind` in issue order. */
static PlanOp *first_run(Plan *p, int kind)
{
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_RUN && p->ops[i].act.kind == kind)
            return &p->ops[i];
    return NULL;
}

/* op no longer waits for the offload copies into host memory (out) or
 * back from it. */
static void drop_offload_waits(Plan *p, PlanOp *op, bool out)
{
    int n = 0;
    for (int k = 0; k < op->ndeps; k++) {
        const PlanOp *d = &p->ops[op->deps[k]];
        bool drop = d->kind == OPK_COPY && plan_offload_copy(p, d->dst) &&
                    p->bufs[d->dst].host == out;
        if (!drop)
            op->deps[n++] = op->deps[k];
    }
    op->ndeps = n;
}

static void early_read(Plan *p)
{
    drop_offload_waits(p, first_run(p, ACT_BWD), false);
}

/* The action after the one following the first forward: the copies out
 * run during the one between, and it waits for them. */
static void reuse_in_flight(Plan *p)
{
    const PlanOp *f = first_run(p, ACT_FWD);
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_RUN && p->ops[i].stream == f->stream &&
            p->ops[i].pos == f->pos + 2)
            drop_offload_waits(p, &p->ops[i], true);
}

static void fetched_one_slot(Plan *p)
{
    for (int i = 0; i < p->noffl; i++)
        p->bufs[p->offl[i].fetched].slots = 1;
}

static void check_offload(Plan *p)
{
    size_t host = 0;
    for (int d = 0; d < p->sc->ndev; d++)
        host += p->host_bytes[d];
    printf("  %d offloaded, %zu bytes of host arena\n", p->noffl, host);
    CHECK(p->noffl > 0 && host > 0);
    CHECK(aborts_in(p, early_read, true));
    if (p->sc->ndev == 1)   /* on two, the sends to the next stage follow them on the stream */
        CHECK(aborts_in(p, reuse_in_flight, true));
    CHECK(aborts(p, fetched_one_slot));
}

/* ---- copies at the boundary between two actions ---- */

/* An offload copy's device-side buffer and the action it runs beside. */
static int device_side(const Plan *p, const PlanOp *c)
{
    return p->bufs[c->dst].host ? c->src : c->dst;
}

static int window_of(const Plan *p, const PlanOp *c)
{
    const Buf *dst = &p->bufs[c->dst];
    for (int i = 0; i < p->noffl; i++)
        if (c->dst == p->offl[i].host || c->dst == p->offl[i].fetched)
            return (dst->host ? p->offl[i].out_during : p->offl[i].in_during)[c->mb];
    for (int i = 0; i < p->nwofl; i++)
        if (c->dst == p->wofl[i].host || c->dst == p->wofl[i].dev)
            return dst->host ? streamed_evict_during(&p->wofl[i], c->mb)
                             : streamed_fetch_during(&p->wofl[i], c->mb);
    return -1;
}

static bool meet(const Plan *p, int x, int mx, int y, int my)
{
    const Buf *a = &p->bufs[x], *b = &p->bufs[y];
    size_t alo = a->offset + (size_t)(mx % a->slots) * a->bytes;
    size_t blo = b->offset + (size_t)(my % b->slots) * b->bytes;
    return a->dev == b->dev && alo < blo + b->bytes && blo < alo + a->bytes;
}

/* Pairs of a copy in and a copy out of the action before its own whose
 * memory meets: only the wait between them keeps them apart. */
static int boundary_pairs(const Plan *p)
{
    int n = 0;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *in = &p->ops[i];
        if (in->kind != OPK_COPY || !plan_offload_copy(p, in->dst) || p->bufs[in->dst].host)
            continue;
        for (int j = 0; j < p->nops; j++) {
            const PlanOp *out = &p->ops[j];
            if (out->kind == OPK_COPY && plan_offload_copy(p, out->dst) &&
                p->bufs[out->dst].host && out->dev == in->dev &&
                window_of(p, out) + 1 == window_of(p, in) &&
                meet(p, device_side(p, in), in->mb, device_side(p, out), out->mb))
                n++;
        }
    }
    return n;
}

/* Copies in no longer wait for copies out. */
static void drop_boundary_waits(Plan *p)
{
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_COPY && plan_offload_copy(p, p->ops[i].dst) &&
            !p->bufs[p->ops[i].dst].host)
            drop_offload_waits(p, &p->ops[i], true);
}

static int boundary_cases;   /* plans where dropping those waits must be caught */

static void check_boundary(Plan *p)
{
    int n = boundary_pairs(p);
    printf("  %d copies in meet a copy out of the action before\n", n);
    if (n) {
        boundary_cases++;
        CHECK(aborts_in(p, drop_boundary_waits, true));
    }
}

/* ---- weights ---- */

/* The run op of the first action of an offloaded weight's first window,
 * and its copy in. */
static void first_window(Plan *p, PlanOp **run, int *fetch)
{
    const Streamed *w = &p->wofl[0];
    Act a = p->sc->seq[p->bufs[w->dev].dev][w->first[0]];
    *run = NULL;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind == OPK_RUN && op->act.kind == a.kind && op->act.stage == a.stage &&
            op->act.mb == a.mb)
            *run = &p->ops[i];
        if (op->kind == OPK_COPY && op->dst == w->dev && op->mb == 0)
            *fetch = i;
    }
}

/* The window's first action no longer waits for the weight to come in
 * (the waits the pruning left may name it alone, or a later copy on its
 * stream: every wait for that stream goes). */
static void weight_early_read(Plan *p)
{
    PlanOp *run;
    int fetch = -1;
    first_window(p, &run, &fetch);
    MPCC_ASSERT(run && fetch >= 0);
    int n = 0;
    for (int k = 0; k < run->ndeps; k++)
        if (p->ops[run->deps[k]].stream != p->ops[fetch].stream)
            run->deps[n++] = run->deps[k];
    run->ndeps = n;
}

/* Every copy in of an offloaded weight is given the memory of one at a
 * time: the replay sees them overwrite each other. */
static void weights_one_offset(Plan *p)
{
    for (int i = 1; i < p->nwofl; i++)
        if (p->bufs[p->wofl[i].dev].dev == p->bufs[p->wofl[0].dev].dev)
            p->bufs[p->wofl[i].dev].offset = p->bufs[p->wofl[0].dev].offset;
}

static void check_weights(Plan *p)
{
    size_t host = 0;
    for (int d = 0; d < p->sc->ndev; d++)
        host += p->host_bytes[d];
    printf("  %d weights offloaded, %zu bytes of host arena\n", p->nwofl, host);
    CHECK(p->nwofl > 1 && host > 0);
    CHECK(aborts_in(p, weight_early_read, true));
    CHECK(aborts(p, weights_one_offset));
}

/* The buffers taking turns: those that overlap another. */
static bool *overlapping(const Plan *p)
{
    bool *o = calloc((size_t)p->nbufs + 1, 1);
    for (int a = 0; a < p->nbufs; a++)
        for (int b = a + 1; b < p->nbufs; b++) {
            const Buf *x = &p->bufs[a], *y = &p->bufs[b];
            if (x->dev == y->dev && !x->host && !y->host && x->offset < y->offset + y->bytes * (size_t)y->slots &&
                y->offset < x->offset + x->bytes * (size_t)x->slots)
                o[a] = o[b] = true;
        }
    return o;
}

/* Every buffer taking turns on a device at the offset of one of them. */
static void one_offset(Plan *p)
{
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b].turns)
            for (int c = 0; c < p->nbufs; c++)
                if (p->bufs[c].turns && p->bufs[c].dev == p->bufs[b].dev)
                    p->bufs[c].offset = p->bufs[b].offset;
}

/* An activation held over micro-batches that no copy reads or writes:
 * its slots are as many as are alive at once (a copy's take one more). */
static int slotted(const Plan *p)
{
    for (int b = 0; b < p->nbufs; b++) {
        bool copied = false;
        for (int i = 0; i < p->nops; i++)
            copied |= p->ops[i].kind == OPK_COPY && (p->ops[i].src == b || p->ops[i].dst == b);
        if (p->bufs[b].slots > 1 && !copied &&
            p->g->values[p->bufs[b].value].kind == VK_ACTIVATION)
            return b;
    }
    return -1;
}

/* First fit puts a buffer taking turns above the lowest offset of its
 * device's only where one below is alive with it: then moving them all to
 * one offset must break the plan. */
static bool stacked(const Plan *p)
{
    bool any = false;
    for (int b = 0; b < p->nbufs && !any; b++)
        for (int c = 0; p->bufs[b].turns && c < p->nbufs && !any; c++)
            any = p->bufs[c].turns && p->bufs[c].dev == p->bufs[b].dev &&
                  p->bufs[c].offset < p->bufs[b].offset;
    return any;
}

static void one_slot(Plan *p)
{
    p->bufs[slotted(p)].slots = 1;
}

static void param_on_shared(Plan *p)
{
    bool *o = overlapping(p);
    for (int b = 0; b < p->nbufs; b++)
        if (o[b])
            for (int c = 0; c < p->nbufs; c++)
                if (p->g->values[p->bufs[c].value].kind == VK_PARAM && !p->bufs[c].streamed &&
                    p->bufs[c].dev == p->bufs[b].dev) {
                    p->bufs[c].offset = p->bufs[b].offset;
                    free(o);
                    return;
                }
    free(o);
}

static void check_case(const char *sample, const char **flags)
{
    Arena *a = arena_new();
    char model[1024];
    snprintf(model, sizeof model, "%s/%s", samples, sample);
    Pipeline *pl = plan(a, model, flags);
    Plan *p = (Plan *)pl->plan;   /* broken only in the children */
    size_t turns = 0, apart = 0;
    for (int d = 0; d < p->sc->ndev; d++)
        turns += p->shared_bytes[d], apart += p->shared_apart[d];
    printf("%s", sample);
    for (const char **f = flags; *f; f++)
        printf(" %s", *f);
    printf(": %s, M=%d, %zu bytes taking turns in %zu\n", schedule_name(p->sc->kind), p->sc->M,
           apart, turns);
    CHECK(turns < apart);
    if (stacked(p))
        CHECK(aborts(p, one_offset));
    CHECK(aborts(p, param_on_shared));
    if (slotted(p) >= 0)
        CHECK(aborts(p, one_slot));
    const char *off = strncmp(flags[0], "--offload=", 10) == 0 ? flags[0] + 10 : "";
    if (!strcmp(off, "activations"))   /* under all, the sends may order what they drop */
        check_offload(p);
    if (!strcmp(off, "weights") || !strcmp(off, "all"))
        check_weights(p);
    if (p->noffl || p->nwofl)
        check_boundary(p);
    arena_free(a);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_share SAMPLES_DIR\n");
        return 2;
    }
    samples = argv[1];
    setenv("MPCC_CPU_PROFILE", "1e11,1e10", 1);
    static const char *cases[][8] = {
        {"-batch", "8", NULL},
        {"-batch", "8", "--no-fuse", NULL},
        {"-batch", "8", "--microbatches=4", NULL},
        {"-batch", "8", "-cpus", "2", "--schedule=1f1b", "--microbatches=4", NULL},
        {"-batch", "8", "-cpus", "2", "--schedule=gpipe", "--microbatches=4", NULL},
        {"-batch", "8", "-cpus", "2", "--schedule=zb", "--microbatches=4", NULL},
        /* at 4 micro-batches, cnn_bn's four stages (its batch norms
         * writing their ReLUs' outputs) hold nothing that takes turns */
        {"-batch", "8", "-cpus", "2", "--schedule=interleaved", "--microbatches=2", NULL},
        {"-batch", "8", "-cpus", "2", "--schedule=1f1b", "--microbatches=4", "--recompute=all",
         NULL},
        {"--offload=activations", "-batch", "8", "--schedule=gpipe", "--microbatches=8", NULL},
        {"--offload=activations", "-batch", "8", "-cpus", "2", "--schedule=gpipe",
         "--microbatches=8", NULL},
        {"--offload=weights", "-batch", "8", "--schedule=interleaved", "--virtual-stages=4",
         "--microbatches=2", NULL},
        {"--offload=all", "-batch", "8", "--schedule=interleaved", "--virtual-stages=4",
         "--microbatches=4", NULL},
    };
    const char *models[] = {"gpt.mp", "resnet.mp", "cnn_bn.mp"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            check_case(models[m], cases[c]);
    CHECK(boundary_cases > 0);   /* the race the boundary waits prevent was planted */
    return check_summary("share");
}
