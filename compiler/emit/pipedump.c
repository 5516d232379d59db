/* pipedump.c — the plan made visible: the partition as a table and as a
 * Graphviz graph, the simulated step as an ASCII Gantt chart, and as a
 * Chrome trace (Perfetto) with one track per device stream, flow arrows
 * for copies and a memory counter per device. */
#include "mpcc.h"
#include "mprt.h"

#include <errno.h>
#include <string.h>

static const char *const act_letter = "FBWU";

static const char *node_name(const Graph *g, uint32_t id)
{
    return str_escaped(g->arena, g->nodes[id].name, 40);
}

/* ---- --dump=partition ---- */

/* Its buffers of their own, the most its buffers that take turns hold at
 * once, and the scratch its largest kernel needs. */
static int64_t stage_memory(const Plan *p, int s)
{
    int64_t m = (int64_t)p->stage_turns[s], work = 0;
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b].stage == s && !p->bufs[b].turns)
            m += (int64_t)(p->bufs[b].bytes * (size_t)p->bufs[b].slots);
    for (uint32_t i = 0; i < p->g->norder; i++) {
        uint32_t id = p->g->order[i];
        if (p->st->stage[id] != s)
            continue;
        bool cpu = p->ds->d[p->st->dev[s]].kind == DEV_CPU;
        int64_t w = node_workspace(p->g, &p->g->nodes[id], cpu);
        if (w > work)
            work = w;
    }
    return m + work;
}

/* --data-parallel: which process holds which replica on which devices,
 * and what each stage sums over the replicas after its last gradients (the
 * predicted step counts it; the table's upd ms does not). */
static void replica_grid(const Pipeline *pl, FILE *out)
{
    const PipeOptions *po = &pl->opt.pipe;
    int R = po->replicas, RL = po->replicas_here > 1 ? po->replicas_here : 1, D = pl->ds.n;
    if (po->node_devs && R <= 1) {   /* one pipeline across the processes */
        fprintf(out, "# processes: %d, one pipeline across them:", po->nodes);
        for (int d = 0; d < D; d++)
            fprintf(out, "%s %s (rank %d)", d ? "," : "", pl->ds.d[d].name, pl->ds.d[d].node);
        fputc('\n', out);
        return;
    }
    if (R <= 1)
        return;
    if (po->node_devs) {   /* each replica one pipeline across P processes */
        int P = po->nodes / R;
        fprintf(out, "# replicas: %d (--data-parallel), each one pipeline across %d processes:\n",
                R, P);
        for (int r = 0; r < R; r++) {
            fprintf(out, "#   replica %d, micro-batches %d .. %d of the step, on", r,
                    r * pl->sc->M, (r + 1) * pl->sc->M - 1);
            for (int d = 0; d < D; d++)
                fprintf(out, "%s %s (rank %d)", d ? "," : "", pl->ds.d[d].name,
                        r * P + pl->ds.d[d].node);
            fputc('\n', out);
        }
    } else {
        fprintf(out, "# replicas: %d (--data-parallel), %d per process, each on its own copy of "
                "the devices above:\n", R, RL);
        for (int r = 0; r < R; r++) {
            fprintf(out, "#   rank %d: replica %d, micro-batches %d .. %d of the step, on", r / RL,
                    r, r * pl->sc->M, (r + 1) * pl->sc->M - 1);
            for (int d = 0; d < D; d++)   /* a copy's devices are named after the first's */
                fprintf(out, " %s:%d", pl->ds.d[d].kind == DEV_CPU ? "cpu" : "cuda",
                        pl->ds.d[d].ordinal + r % RL * D);
            fputc('\n', out);
        }
    }
    fprintf(out, "# gradient sums over the replicas, after each stage's last gradients:");
    for (int s = 0; s < pl->st->n; s++) {
        double bytes = stage_grad_bytes(pl->g, pl->st, s);
        fprintf(out, " stage %d %.2f MB %.3f ms%s", s, bytes / 1e6,
                replica_sum_seconds(&pl->opt, &pl->ds, bytes) * 1e3, s + 1 < pl->st->n ? "," : "");
    }
    fputc('\n', out);
}

void dump_partition(const Pipeline *pl, FILE *out)
{
    const Stages *st = pl->st;
    const Plan *p = pl->plan;
    fprintf(out, "# partition: %d stage(s) on %d device(s), %s schedule, %d micro-batch(es)",
            st->n, pl->ds.n, schedule_name(pl->sc->kind), pl->sc->M);
    if (pl->opt.batch)
        fprintf(out, " of %lld", (long long)pl->opt.batch);
    fputc('\n', out);
    fprintf(out, "%-5s %-8s %6s %12s %10s %10s %10s %10s %10s  %s\n", "stage", "device", "nodes",
            "params", "MFLOP/mb", "fwd ms", "bwd ms", "upd ms", "memory MB", "first .. last");
    for (int s = 0; s < st->n; s++) {
        const double *t = &st->time[s * ACT_KINDS];
        int nodes = 0;
        for (uint32_t i = 0; i < pl->g->norder; i++)
            nodes += st->stage[pl->g->order[i]] == s;
        fprintf(out, "%-5d %-8s %6d %12lld %10.1f %10.3f %10.3f %10.3f %10.2f  %s .. %s%s\n", s,
                pl->ds.d[st->dev[s]].name, nodes, (long long)st->params[s], st->flops[s] / 1e6,
                t[ACT_FWD] * 1e3, (t[ACT_BWD] + t[ACT_WGRAD]) * 1e3, t[ACT_UPDATE] * 1e3,
                (double)stage_memory(p, s) / 1e6, node_name(pl->g, st->units[st->first[s]]),
                node_name(pl->g, st->units[st->first[s + 1] - 1]),
                st->recompute[s] ? "  (recomputed)" : "");
    }
    fprintf(out, "# predicted: step %.3f ms, bubble %.1f%%;", p->step_time * 1e3,
            100 * p->bubble);
    for (int d = 0; d < pl->ds.n; d++)
        fprintf(out, " %s %.2f MB", pl->ds.d[d].name, (double)p->arena_bytes[d] / 1e6);
    fputc('\n', out);
    replica_grid(pl, out);
}

/* ---- --dump=schedule ---- */

enum { GANTT_WIDTH = 96 };

static char op_char(const PlanOp *op)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    if (op->kind == OPK_COPY)
        return '>';
    if (op->kind == OPK_SUM)
        return 'S';
    if (op->act.kind == ACT_UPDATE)
        return 'U';
    return digits[op->act.mb % 36];
}

static void gantt_row(const Plan *p, int stream, FILE *out)
{
    char row[GANTT_WIDTH + 1];
    memset(row, '.', GANTT_WIDTH);
    row[GANTT_WIDTH] = 0;
    bool any = false;
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        if (op->stream != stream)
            continue;
        any = true;
        int a = (int)(op->start / p->step_time * GANTT_WIDTH);
        int b = (int)(op->end / p->step_time * GANTT_WIDTH);
        if (b <= a)
            b = a + 1;
        for (int c = a; c < b && c < GANTT_WIDTH; c++)
            row[c] = op_char(op);
    }
    if (any)
        fprintf(out, "%-8s %-9s |%s|\n", p->ds->d[stream / STREAMS_PER_DEV].name,
                stream_kinds[stream % STREAMS_PER_DEV], row);
}

static void action_list(const Pipeline *pl, FILE *out)
{
    for (int d = 0; d < pl->sc->ndev; d++) {
        fprintf(out, "%-8s", pl->ds.d[d].name);
        for (int i = 0; i < pl->sc->nseq[d]; i++) {
            Act a = pl->sc->seq[d][i];
            if (a.kind == ACT_UPDATE)
                fprintf(out, " U%d", a.stage);
            else if (pl->st->n > pl->sc->ndev)
                fprintf(out, " %c%d.%d", act_letter[a.kind], a.stage, a.mb);
            else
                fprintf(out, " %c%d", act_letter[a.kind], a.mb);
        }
        fputc('\n', out);
    }
}

/* --data-parallel: each device's sums over the replicas, in their order
 * on its communication stream: S1.0 is stage 1's bucket 0. */
static void sum_list(const Pipeline *pl, FILE *out)
{
    const Plan *p = pl->plan;
    if (!p->nbuckets)
        return;
    fprintf(out, "# sums over the replicas per device, on its comm stream (S stage.bucket; "
            "--bucket-mb=X sizes the buckets)\n");
    for (int d = 0; d < pl->sc->ndev; d++) {
        fprintf(out, "%-8s", pl->ds.d[d].name);
        for (int pos = 0;; pos++) {
            int i = 0;
            while (i < p->nops && !(p->ops[i].kind == OPK_SUM && p->ops[i].dev == d &&
                                    p->ops[i].pos == pos))
                i++;
            if (i == p->nops)
                break;
            const Bucket *b = &p->buckets[p->ops[i].bucket];
            fprintf(out, " S%d.%d (%d tensors, %.2f MB)", b->stage, b->index, b->count,
                    b->bytes / 1e6);
        }
        fputc('\n', out);
    }
}

void dump_schedule(const Pipeline *pl, FILE *out)
{
    const Plan *p = pl->plan;
    fprintf(out, "# schedule: %s, %d stage(s), %d micro-batch(es); predicted step %.3f ms, "
            "bubble %.1f%%\n", schedule_name(pl->sc->kind), pl->st->n, pl->sc->M,
            p->step_time * 1e3, 100 * p->bubble);
    fprintf(out, "# each column is %.3f ms; digits: the micro-batch an action works on, "
            "'>' a copy, 'U' the update, %s'.' idle\n", p->step_time * 1e3 / GANTT_WIDTH,
            p->nbuckets ? "'S' a sum over the replicas, " : "");
    for (int s = 0; s < p->nstreams; s++)
        gantt_row(p, s, out);
    fprintf(out, "# actions per device, in order (F forward, B backward, W weight "
            "gradients, U update; stage.micro-batch with several stages per device)\n");
    action_list(pl, out);
    sum_list(pl, out);
    fprintf(out, "# busy:");
    for (int d = 0; d < pl->ds.n; d++)
        fprintf(out, " %s %.3f ms (%.0f%%)", pl->ds.d[d].name, p->busy[d] * 1e3,
                100 * p->busy[d] / p->step_time);
    fputc('\n', out);
}

/* ---- --dump=partition-dot ---- */

/* Text inside a Graphviz string: escaped for C (one line, no control
 * bytes), then quotes and backslashes escaped for dot. */
static void dot_text(Arena *a, FILE *out, const char *s)
{
    for (const char *c = str_escaped(a, s, 60); *c; c++) {
        if (*c == '"' || *c == '\\')
            fputc('\\', out);
        fputc(*c, out);
    }
}

void dump_partition_dot(const Pipeline *pl, FILE *out)
{
    static const char *const colours[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072",
                                          "#80b1d3", "#fdb462", "#b3de69", "#fccde5"};
    const Graph *g = pl->g;
    const Stages *st = pl->st;
    fprintf(out, "digraph partition {\n  rankdir=TB;\n  node [shape=box, style=filled];\n");
    for (int u = 0; u < st->nunits; u++) {
        uint32_t id = st->units[u];
        int s = st->stage[id];
        fprintf(out, "  n%u [label=\"", id);
        dot_text(g->arena, out, g->nodes[id].name);
        fputs("\\n", out);
        dot_text(g->arena, out, g->nodes[id].op_type);
        fprintf(out, " (stage %d, %s)\", fillcolor=\"%s\"];\n", s, pl->ds.d[st->dev[s]].name,
                colours[st->dev[s] % 8]);
    }
    for (int u = 0; u < st->nunits; u++) {
        const Node *n = &g->nodes[st->units[u]];
        for (uint32_t k = 0; k < n->nin; k++) {
            uint32_t v = n->in[k], pn = v == NONE ? NONE : g->values[v].producer;
            if (pn == NONE || st->act[pn] != ACT_FWD)
                continue;
            if (st->stage[pn] == st->stage[st->units[u]])
                fprintf(out, "  n%u -> n%u;\n", pn, st->units[u]);
            else
                fprintf(out, "  n%u -> n%u [color=red, penwidth=2, label=\"%lld bytes\"];\n", pn,
                        st->units[u], (long long)(shape_numel(&g->values[v].shape) *
                                                  (int64_t)dtype_size(g->values[v].dtype)));
        }
    }
    fprintf(out, "}\n");
}

/* ---- --trace: Chrome trace event format ---- */

static void trace_name(FILE *f, const Pipeline *pl, const PlanOp *op)
{
    static const char *const kinds[] = {"forward", "backward", "wgrad", "update"};
    const char *name;
    if (op->kind == OPK_RUN) {
        name = arena_printf(pl->g->arena, "%s s%d mb%d", kinds[op->act.kind], op->act.stage,
                            op->act.mb);
        if (plan_split_part(pl->plan, op))   /* --data-parallel: the last, in parts */
            name = arena_printf(pl->g->arena, "%s part %d", name, op->part);
    } else if (op->kind == OPK_SUM) {
        name = arena_printf(pl->g->arena, "sum s%d b%d", op->act.stage, op->mb);
    } else {
        const Buf *b = &pl->plan->bufs[op->dst];
        const char *v = pl->g->values[b->value].name;
        if (b->streamed)   /* an offloaded weight, in or out in window mb */
            name = arena_printf(pl->g->arena, "weight %s %s w%d s%d", b->host ? "out" : "in", v,
                                op->mb, b->stage);
        else if (plan_offload_copy(pl->plan, op->dst))
            name = arena_printf(pl->g->arena, "%s %s mb%d s%d", b->host ? "offload" : "fetch", v,
                                op->mb, b->stage);
        else
            name = arena_printf(pl->g->arena, "copy %s mb%d to s%d", v, op->mb, b->stage);
    }
    mprt_json_fputs(f, name);
}

static void trace_meta(FILE *f, const Pipeline *pl)
{
    for (int d = 0; d < pl->ds.n; d++) {
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}},"
                "\n", d, pl->ds.d[d].name);
        for (int k = 0; k < STREAMS_PER_DEV; k++)
            fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s\"}},\n", d, k, stream_kinds[k]);
        fprintf(f, "{\"name\":\"memory\",\"ph\":\"C\",\"pid\":%d,\"ts\":0,\"args\":{\"bytes\":"
                "%zu}},\n", d, pl->plan->arena_bytes[d]);
    }
}

void write_trace(const Pipeline *pl, const char *path)
{
    const Plan *p = pl->plan;
    char *tmp = out_tmp(pl->g->arena, path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        error_file(path, "cannot open for writing: %s", strerror(errno));
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
    trace_meta(f, pl);
    for (int i = 0; i < p->nops; i++) {
        const PlanOp *op = &p->ops[i];
        int dev = op->stream / STREAMS_PER_DEV, tid = op->stream % STREAMS_PER_DEV;
        fputs("{\"name\":", f);
        trace_name(f, pl, op);
        fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f},\n",
                op->kind == OPK_RUN ? "compute" : op->kind == OPK_SUM ? "comm" : "copy", dev, tid,
                op->start * 1e6,
                (op->end - op->start) * 1e6);
        if (op->kind == OPK_COPY) {
            const Buf *dst = &p->bufs[op->dst];
            fprintf(f, "{\"name\":\"copy\",\"cat\":\"copy\",\"ph\":\"s\",\"id\":%d,\"pid\":%d,"
                    "\"tid\":%d,\"ts\":%.3f},\n", i, dev, tid, op->start * 1e6);
            fprintf(f, "{\"name\":\"copy\",\"cat\":\"copy\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%d,"
                    "\"pid\":%d,\"tid\":0,\"ts\":%.3f},\n", i, dst->dev, op->end * 1e6);
        }
    }
    fprintf(f, "{\"name\":\"step\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":%.3f}\n],\n"
            "\"otherData\":{\"source\":\"predicted\",\"schedule\":\"%s\",\"microbatches\":%d}}\n",
            p->step_time * 1e6, schedule_name(pl->sc->kind), pl->sc->M);
    if (fclose(f) != 0 || !out_commit(tmp, path))
        error_file(path, "write failed: %s", strerror(errno));
}
