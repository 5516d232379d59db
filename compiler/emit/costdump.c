/* costdump.c — --dump=costs: the cost model's figures, node by node.
 *
 * One line per node of the plan, in the order the step runs them on each
 * stage: the stage and its device, the phase, the kind of work the model
 * prices it as, its FLOPs and bytes, the predicted milliseconds and, with
 * --measured, the measured ones from ./train --profile. A node inside a
 * fused chain runs in its chain's last node's kernel (marked "in chain").
 * The totals per kind of work end the dump, so a model whose prediction is
 * off shows where. */
#include "mpcc.h"

#include <string.h>

static const char *const kind_name[WORK_KINDS] = {"gemm", "conv", "norm", "window",
                                                  "elementwise"};

typedef struct Totals {
    double predicted[WORK_KINDS], measured[WORK_KINDS];
    int count[WORK_KINDS];
} Totals;

static void cost_line(const Pipeline *pl, const Measured *m, uint32_t id, Totals *t, FILE *out)
{
    const Graph *g = pl->g;
    const Node *n = &g->nodes[id];
    int s = pl->st->stage[id];
    const Device *d = &pl->ds.d[pl->st->dev[s]];
    WorkKind k = work_kind(n);
    NodeCost c = node_cost(g, n, &d->prof);
    double p = node_time(g, n, &d->prof, NULL);
    double meas = measured_time(m, n->name, n->phase, (double)g->rows);
    bool chained = pl->plan->fu && pl->plan->fu->tail[id] != NONE;
    fprintf(out, "%-3d %-7s %-8s %-11s %10.3f %10.3f %10.4f ", s, d->name,
            n->phase == PH_FORWARD ? "forward" : n->phase == PH_BACKWARD ? "backward" : "update",
            kind_name[k], c.flops / 1e6, c.bytes / 1e6, p * 1e3);
    if (meas >= 0)
        fprintf(out, "%10.4f ", meas * 1e3);
    else
        fprintf(out, "%10s ", "-");
    fprintf(out, " %s '", op_info[n->op].name);
    fput_escaped(out, n->name);
    fprintf(out, "'%s\n", chained ? " (in chain)" : "");
    t->predicted[k] += p;
    t->count[k]++;
    if (meas >= 0)
        t->measured[k] += meas;
}

/* The rates the model prices each device's work with. */
static void rates(const Device *d, FILE *out)
{
    const Profile *p = &d->prof;
    fprintf(out, "# %s (%s): matrix %.3g GFLOP/s, elementwise %.3g GFLOP/s, bandwidth %.3g "
            "GB/s", d->name, p->name, p->matrix_flops / 1e9, p->flops / 1e9, p->bandwidth / 1e9);
    if (p->per_call)
        fprintf(out, ", copy %.3g GB/s, normalisation %.3g GB/s; BLAS operands %.3g GB/s, %.3g "
                "us a call; im2col %.3g GB/s, %.3g us a row", p->copy_bw / 1e9, p->norm_bw / 1e9,
                p->gemm_bw / 1e9, p->call_overhead * 1e6, p->patch_bw / 1e9, p->patch_row * 1e6);
    fprintf(out, ", %.3g us a node; hand-off %.3g us\n", p->overhead * 1e6,
            p->peer_latency * 1e6);
}

void dump_costs(const Pipeline *pl, const Measured *m, FILE *out)
{
    const Graph *g = pl->g;
    Totals t;
    memset(&t, 0, sizeof t);
    for (int d = 0; d < pl->ds.n; d++)
        rates(&pl->ds.d[d], out);
    fprintf(out, "# costs: the cost model per node, one micro-batch (%s%s)\n",
            m ? "measured from --measured" : "no measurements: give --measured=prof.json",
            "");
    fprintf(out, "%-3s %-7s %-8s %-11s %10s %10s %10s %10s  %s\n", "st", "device", "phase",
            "kind", "MFLOP", "MB", "pred ms", "meas ms", "op 'node'");
    for (uint32_t i = 0; i < g->norder; i++)
        if (pl->st->stage[g->order[i]] >= 0)
            cost_line(pl, m, g->order[i], &t, out);
    for (int k = 0; k < WORK_KINDS; k++)
        if (t.count[k]) {
            fprintf(out, "# %-11s %5d nodes: predicted %10.3f ms", kind_name[k], t.count[k],
                    t.predicted[k] * 1e3);
            if (m)
                fprintf(out, ", measured %10.3f ms", t.measured[k] * 1e3);
            fputc('\n', out);
        }
}
