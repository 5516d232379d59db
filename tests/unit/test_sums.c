/* test_sums.c — the gradient sums over the replicas (--data-parallel) as
 * operations of the step: samples/gpt.mp, 2 replicas of 2 devices, with
 * --bucket-mb small enough that each stage has several buckets, under
 * GPipe, 1F1B and zero bubble, with and without --clip-norm.
 *   - The buckets cover each stage's updates once, from the last back,
 *     none over the cap but a tensor alone, each of the bytes of its
 *     parameters.
 *   - One sum per bucket, on the communication stream of its stage's
 *     device; the simulated step starts it after the stage's last
 *     gradient action and its update after it (every update after every
 *     sum with --clip-norm).
 *   - plan_verify catches a sum that no longer waits for the gradients,
 *     and two buckets taken out of order.
 * Across 2 processes, --zero=1's sum of a bucket is a reduce-scatter,
 * half the ring of a whole sum (and whole again with --clip-norm), and
 * the update carries the all-gather. */
#include "mpcc.h"
#include "check.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void check_sum_ops(const Plan *p, bool clip)
{
    int sums = 0;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->kind != OPK_SUM)
            continue;
        sums++;
        int s = op->act.stage;
        CHECK(op->stream == p->st->dev[s] * STREAMS_PER_DEV + STREAM_COMM);
        CHECK(p->buckets[op->bucket].stage == s && p->buckets[op->bucket].index == op->mb);
        CHECK(op->start >= run_op(p, p->last_grad[s], s, p->sc->M - 1)->end);
        for (int t = 0; t < p->st->n; t++)
            if (t == s || clip)
                CHECK(run_op(p, ACT_UPDATE, t, 0)->start >= op->end);
    }
    CHECK(sums == p->nbuckets);
}

/* Runs fn on the plan, then plan_verify, in a child: true if it aborted. */
static bool aborts(Plan *p, void (*fn)(Plan *))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        fn(p);
        plan_verify(p);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
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
    CHECK(aborts(p, reorder));
    printf("test_sums: %s%s: %d buckets summed on the comm streams after each stage's last "
           "gradients; a sum that does not wait, and buckets out of order, are caught\n",
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
