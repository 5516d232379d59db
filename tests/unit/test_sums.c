/* test_sums.c — the gradient sums over the replicas (--data-parallel) as
 * operations of the step: samples/gpt.mp, 2 replicas of 2 devices, with
 * --bucket-mb small enough that each stage has several buckets, under
 * GPipe, 1F1B and zero bubble, with and without --clip-norm.
 *   - The buckets cover each stage's updates once, from the last back,
 *     none over the cap but a tensor alone, each of the bytes of its
 *     parameters.
 *   - One sum per bucket, on the communication stream of its stage's
 *     device. The last micro-batch's last gradient action runs in parts,
 *     one ending after each node that finishes a bucket's gradients; the
 *     simulated step starts a sum after the part that finishes its
 *     bucket (found here from the graph: the last node of the action
 *     that writes one of its gradients), and its update after it (every
 *     update after every sum with --clip-norm); some sum starts before
 *     its stage's action has ended.
 *   - plan_verify catches a sum that no longer waits for the gradients,
 *     one that waits only for the part before the one finishing them,
 *     and two buckets taken out of order.
 * Across 2 processes, --zero=1's sum of a bucket is a reduce-scatter,
 * half the ring of a whole sum (and whole again with --clip-norm), and
 * the update carries the all-gather. */
#include "mpcc.h"
#include "check.h"
#include "plan_child.h"

#include <math.h>
#include <string.h>

static const char *samples;
static const double cap_mb = 0.01;

static Pipeline *plan(Arena *a, const char *schedule, bool clip)
{
    char model[1024];
    snprintf(model, sizeof model, "%s/gpt.mp", samples);
    char *argv[] = {"mpcc", model, "-cpus", "4", "-batch", "16", "--microbatches=8",
                    "--data-parallel=2", "--bucket-mb=0.01", "--optimizer=adamw",
                    (char *)schedule, clip ? "--clip-norm=1" : "--lr=0.001"};
    Options o;
    cli_parse(a, (int)(sizeof argv / sizeof argv[0]), argv, &o);
    replicas_apply(&o);
    return pipeline_choose(a, &o, &driver_passes);
}

static double param_bytes(const Plan *p, uint32_t node)
{
    const Value *w = &p->g->values[p->g->nodes[node].in[0]];
    return (double)shape_numel(&w->shape) * sizeof(float);
}

static void check_buckets(const Plan *p)
{
    for (int s = 0; s < p->st->n; s++) {
        const uint32_t *nodes = p->nodes[(size_t)s * ACT_KINDS + ACT_UPDATE];
        int end = p->nnodes[(size_t)s * ACT_KINDS + ACT_UPDATE], index = 0;
        for (int k = 0; k < p->nbuckets; k++) {
            const Bucket *b = &p->buckets[k];
            if (b->stage != s)
                continue;
            CHECK(b->index == index++);
            CHECK(b->first + b->count == end);   /* from the last update back, no gap */
            double bytes = 0;
            for (int i = b->first; i < end; i++)
                bytes += param_bytes(p, nodes[i]);
            CHECK(bytes == b->bytes);
            CHECK(b->count == 1 || bytes <= cap_mb * 1e6);
            end = b->first;
        }
        CHECK(end == 0);
        CHECK(index > 1);   /* the cap splits every stage of this model */
    }
}

static const PlanOp *run_op(const Plan *p, int kind, int stage, int mb)
{
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_RUN && p->ops[i].act.kind == kind &&
            p->ops[i].act.stage == stage && p->ops[i].act.mb == mb)
            return &p->ops[i];
    CHECK(!"no such action");
    return &p->ops[0];
}

/* The end of the last micro-batch's last gradient action of stage s, and
 * of its part that runs node j of it. */
static double action_end(const Plan *p, int s, int j, double *part_end)
{
    double end = 0;
    int nodes = 0;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind != OPK_RUN || op->act.stage != s || op->act.kind != p->last_grad[s] ||
            op->act.mb != p->sc->M - 1)
            continue;
        CHECK(op->part == nodes++);
        end = op->end > end ? op->end : end;
        int lo = op->part ? p->part_end[s][op->part - 1] : 0;
        if (j >= lo && j < p->part_end[s][op->part])
            *part_end = op->end;
    }
    CHECK(nodes == p->nparts[s]);
    return end;
}

/* The last node of the stage's last gradient action that writes one of
 * the bucket's gradients, by the graph: -1 if none does. */
static int bucket_done(const Plan *p, const Bucket *b)
{
    size_t a = (size_t)b->stage * ACT_KINDS + p->last_grad[b->stage];
    const uint32_t *upd = p->nodes[(size_t)b->stage * ACT_KINDS + ACT_UPDATE];
    int last = -1;
    for (int i = b->first; i < b->first + b->count; i++) {
        uint32_t id = p->g->values[p->g->values[p->g->nodes[upd[i]].in[0]].grad].producer;
        if (p->fu && p->fu->tail[id] != NONE)
            id = p->fu->tail[id];
        for (int j = 0; j < p->nnodes[a]; j++)
            if (p->nodes[a][j] == id && j > last)
                last = j;
    }
    return last;
}

static void check_sum_ops(const Plan *p, bool clip)
{
    int sums = 0, early = 0;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind != OPK_SUM)
            continue;
        sums++;
        int s = op->act.stage;
        const Bucket *b = &p->buckets[op->bucket];
        CHECK(op->stream == p->st->dev[s] * STREAMS_PER_DEV + STREAM_COMM);
        CHECK(b->stage == s && b->index == op->mb);
        CHECK(b->cut == bucket_done(p, b));
        double part = 0, all = action_end(p, s, b->cut < 0 ? 0 : b->cut, &part);
        CHECK(part > 0 && op->start >= part);
        early += op->start < all;
        for (int t = 0; t < p->st->n; t++)
            if (t == s || clip)
                CHECK(run_op(p, ACT_UPDATE, t, 0)->start >= op->end);
    }
    CHECK(sums == p->nbuckets);
    CHECK(early > 0);   /* overlapped with the rest of the backward */
}

/* fn, then plan_verify, in a child: true if it aborted (plan_child.h). */
static bool aborts(Plan *p, void (*fn)(Plan *))
{
    return plan_aborts(p, fn, true, false);
}

static int first_sum(const Plan *p)
{
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_SUM)
            return i;
    return -1;
}

static void as_is(Plan *p)
{
    (void)p;
}

static void unwait(Plan *p)   /* the first sum waits for nothing */
{
    p->ops[first_sum(p)].ndeps = 0;
}

static void too_early(Plan *p)   /* a sum waits for the part before its own */
{
    for (int i = 0; i < p->nops; i++) {
        PlanOp *op = &p->ops[i];
        if (op->kind != OPK_SUM || op->ndeps != 1 || p->ops[op->deps[0]].part == 0)
            continue;
        const PlanOp *part = &p->ops[op->deps[0]];
        for (int k = 0; k < op->deps[0]; k++)
            if (p->ops[k].kind == OPK_RUN && p->ops[k].stream == part->stream &&
                p->ops[k].pos == part->pos - 1) {
                op->deps[0] = k;
                return;
            }
    }
    CHECK(!"no sum waits for a later part");
}

static void reorder(Plan *p)   /* its stage's first two buckets the other way round */
{
    int i = first_sum(p);
    for (int k = i + 1; k < p->nops; k++)
        if (p->ops[k].kind == OPK_SUM && p->ops[k].act.stage == p->ops[i].act.stage) {
            int t = p->ops[i].mb;
            p->ops[i].mb = p->ops[k].mb;
            p->ops[k].mb = t;
            return;
        }
}

static void check_schedule(const char *schedule, bool clip)
{
    Arena *a = arena_new();
    Pipeline *pl = plan(a, schedule, clip);
    Plan *p = (Plan *)pl->plan;   /* the children below change it */
    check_buckets(p);
    check_sum_ops(p, clip);
    CHECK(!aborts(p, as_is));   /* the plan itself passes */
    CHECK(aborts(p, unwait));
    CHECK(aborts(p, too_early));
    CHECK(aborts(p, reorder));
    printf("test_sums: %s%s: %d buckets summed on the comm streams, each after the part of its "
           "stage's last gradient action that finishes it; a sum that does not wait, one that "
           "waits for too early a part, and buckets out of order are caught\n",
           schedule, clip ? " --clip-norm" : "", p->nbuckets);
    arena_free(a);
}

static Pipeline *plan_nodes(Arena *a, const char *zero, const char *clip)
{
    char model[1024];
    snprintf(model, sizeof model, "%s/gpt.mp", samples);
    char *argv[] = {"mpcc", model, "-cpus", "1", "-batch", "16", "--microbatches=8",
                    "--data-parallel=2", "--nodes=2", "--bucket-mb=0.01", "--optimizer=adamw",
                    "--schedule=1f1b", (char *)zero, (char *)clip};
    Options o;
    cli_parse(a, (int)(sizeof argv / sizeof argv[0]), argv, &o);
    replicas_apply(&o);
    return pipeline_choose(a, &o, &driver_passes);
}

static double sum_time(const Plan *p, int k)
{
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_SUM && p->ops[i].bucket == k)
            return p->ops[i].time;
    CHECK(!"no sum of the bucket");
    return 0;
}

static void check_zero_prices(void)
{
    Arena *a = arena_new();
    const Plan *whole = plan_nodes(a, "--zero=0", "--lr=0.001")->plan;
    const Plan *shares = plan_nodes(a, "--zero=1", "--lr=0.001")->plan;
    const Plan *clipped = plan_nodes(a, "--zero=1", "--clip-norm=1")->plan;
    CHECK(whole->nbuckets == shares->nbuckets && whole->nbuckets == clipped->nbuckets);
    for (int k = 0; k < whole->nbuckets; k++) {
        double w = sum_time(whole, k) - 1e-9, z = sum_time(shares, k) - 1e-9;
        CHECK(w > 0 && fabs(z / w - 0.5) < 1e-6);
        CHECK(sum_time(clipped, k) == sum_time(whole, k));
    }
    for (int s = 0; s < whole->st->n; s++)
        CHECK(run_op(shares, ACT_UPDATE, s, 0)->time > run_op(whole, ACT_UPDATE, s, 0)->time);
    printf("test_sums: --zero=1 across 2 processes: each of %d buckets' sums half the time of a "
           "whole one, whole again with --clip-norm; the updates carry the all-gather\n",
           whole->nbuckets);
    arena_free(a);
}

int main(int argc, char **argv)
{
    samples = argc > 1 ? argv[1] : "samples";
    check_schedule("--schedule=gpipe", false);
    check_schedule("--schedule=1f1b", true);
    check_schedule("--schedule=zb", false);
    check_schedule("--schedule=zb", true);
    check_zero_prices();
    return check_summary("sums");
}
