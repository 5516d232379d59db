/* test_nodes.c — a pipeline across processes (--data-parallel=1 --nodes=2)
 * cannot deadlock (verify_nodes.c), and the check can tell: the plans of
 * samples/gpt.mp across 2 processes under GPipe, 1F1B and zero-bubble
 * play to the end, each with copies between the processes; then, with
 * two copies from one stream to another taken by the receiver in the
 * other order, or by the sender, the play must stop short. */
#include "mpcc.h"
#include "check.h"

#include <string.h>

static const char *samples;

static Pipeline *plan(Arena *a, const char *schedule)
{
    char model[1024];
    snprintf(model, sizeof model, "%s/gpt.mp", samples);
    char *argv[] = {"mpcc", model, "-cpus", "1", "-batch", "16", "--microbatches=8",
                    "--data-parallel=1", "--nodes=2", (char *)schedule};
    Options o;
    cli_parse(a, (int)(sizeof argv / sizeof argv[0]), argv, &o);
    replicas_apply(&o);
    return pipeline_choose(a, &o, &driver_passes);
}

/* The first two copies stream s takes from another process's stream that
 * sends them both, as positions in s's order; false if none. */
static bool two_received(const Plan *p, const NodeStreams *ns, int s, int *x, int *y)
{
    *x = -1;
    for (int k = 0; k < ns->len[s]; k++) {
        const PlanOp *op = &p->ops[ns->seq[s][k]];
        if (op->kind != OPK_COPY || op->stream == s)
            continue;
        if (*x < 0)
            *x = k;
        else if (op->stream == p->ops[ns->seq[s][*x]].stream) {
            *y = k;
            return true;
        }
    }
    return false;
}

static void swap(NodeStreams *ns, int s, int x, int y)
{
    int t = ns->seq[s][x];
    ns->seq[s][x] = ns->seq[s][y];
    ns->seq[s][y] = t;
}

static void check_schedule(const char *schedule)
{
    Arena *a = arena_new();
    Pipeline *pl = plan(a, schedule);
    const Plan *p = pl->plan;
    NodeStreams ns = node_streams(p);
    int crossing = 0;
    for (int s = 0; s < ns.nstreams; s++)
        for (int k = 0; k < ns.len[s]; k++)
            crossing += p->ops[ns.seq[s][k]].stream != s;
    CHECK(crossing > 0);
    CHECK(node_streams_stuck(p, &ns) == -1);
    int planted = 0;
    for (int s = 0; s < ns.nstreams && !planted; s++) {
        int x, y;
        if (!two_received(p, &ns, s, &x, &y))
            continue;
        int first = ns.seq[s][x], second = ns.seq[s][y];
        swap(&ns, s, x, y);   /* the receiver takes them the other way round */
        CHECK(node_streams_stuck(p, &ns) >= 0);   /* the play stops short */
        swap(&ns, s, x, y);
        CHECK(node_streams_stuck(p, &ns) == -1);
        int sender = p->ops[first].stream, fx = -1, fy = -1;   /* the same on the sender's */
        for (int k = 0; k < ns.len[sender]; k++)
            if (ns.seq[sender][k] == first)
                fx = k;
            else if (ns.seq[sender][k] == second)
                fy = k;
        swap(&ns, sender, fx, fy);
        CHECK(node_streams_stuck(p, &ns) >= 0);
        planted++;
        printf("test_nodes: %s: %d copies between the processes; receiving %s and %s the "
               "other way round is caught, on either side\n", schedule, crossing,
               plan_describe_op(p, first), plan_describe_op(p, second));
    }
    CHECK(planted == 1);
    arena_free(a);
}

int main(int argc, char **argv)
{
    samples = argc > 1 ? argv[1] : "samples";
    check_schedule("--schedule=gpipe");
    check_schedule("--schedule=1f1b");
    check_schedule("--schedule=zb");
    return check_summary("nodes");
}
