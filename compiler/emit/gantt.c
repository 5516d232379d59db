/* gantt.c — --dump=gantt=FILE.svg and --gantt-from: a step as a picture.
 *
 * A self-contained SVG (no script, no font but the viewer's sans-serif)
 * of one or more timelines (timeline.c), each a panel: one row per device
 * stream that has work (compute, send, send-back, comm), one box per operation
 * at its start and end, coloured by stage and labelled F/B/W/U/S with its
 * micro-batch, copies as grey boxes on the sender's row with an arrow to
 * the device that receives them. A time axis in ms, the idle time of each
 * compute row shaded (the bubble), and at the end of each device's first
 * row a bar of its memory plan against the largest plan. The predicted
 * step comes first; a run --measured gave a trace of is drawn below it on
 * the same time scale, so the two can be compared box by box. Every box
 * carries data-stream and data-label attributes and a <title>, so a test
 * (or a person hovering) can read it. Past MAX_DEVICES devices the rest
 * are left out, and past MAX_LABELLED micro-batches a box stands for a
 * run of a stage's operations on its row that a pixel would not tell
 * apart, unlabelled; the caption says so.
 */
#include "mpcc.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    LEFT = 130, PLOT = 960, RIGHT = 170, TOP = 58, ROW = 24, GAP = 10, AXIS = 34,
    MAX_DEVICES = 16, MAX_LABELLED = 64
};

/* Stage colours: distinct, readable under black text. */
static const char *const palette[] = {
    "#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69",
    "#fccde5", "#ffffb3", "#bc80bd", "#ccebc5", "#ffed6f", "#d9d9d9",
};
enum { NPALETTE = sizeof palette / sizeof palette[0] };


typedef struct Svg {
    FILE *f;
    Arena *a;
    double scale;           /* pixels per second, the same in every panel */
    double most_memory;     /* the largest arena of every panel: a full bar */
} Svg;

/* One timeline's rows, at y0 in the picture. */
typedef struct Panel {
    const Timeline *tl;
    double y0;
    int ndev;               /* devices drawn */
    int nstreams;
    int *row_of;            /* [nstreams]: its row, -1 if not drawn */
    int nrows;
} Panel;

static double x_of(const Svg *s, double t)
{
    return LEFT + t * s->scale;
}

static double y_of(const Panel *pn, int row)
{
    return pn->y0 + TOP + row * (ROW + GAP);
}

static double panel_height(const Panel *pn)
{
    return TOP + pn->nrows * (ROW + GAP) + AXIS + 20;
}

/* Rows: each drawn device's compute stream, then its copy streams that
 * carry anything. */
static void layout(Arena *a, Panel *pn, const Timeline *tl, double y0)
{
    *pn = (Panel){.tl = tl, .y0 = y0, .ndev = tl->ndev < MAX_DEVICES ? tl->ndev : MAX_DEVICES,
                  .nstreams = tl->ndev * STREAMS_PER_DEV};
    bool *busy = arena_array(a, (size_t)pn->nstreams, sizeof(bool));
    for (int i = 0; i < tl->nops; i++)
        busy[tl->ops[i].stream] = true;
    pn->row_of = arena_array(a, (size_t)pn->nstreams, sizeof(int));
    for (int k = 0; k < pn->nstreams; k++) {
        int dev = k / STREAMS_PER_DEV;
        bool drawn = dev < pn->ndev && (k % STREAMS_PER_DEV == 0 || busy[k]);
        pn->row_of[k] = drawn ? pn->nrows++ : -1;
    }
}

static void text_escaped(FILE *f, const char *t)
{
    for (; *t; t++)
        switch (*t) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            fputc((unsigned char)*t >= 0x20 ? *t : '?', f);
        }
}

/* The label of a box: F3, B1.3 with several stages per device, U0, S1.0
 * (stage 1's bucket 0 summed over the replicas), or a copy's micro-batch. */
static const char *op_label(Arena *a, const Timeline *tl, const TlOp *op)
{
    if (op->copy)
        return arena_printf(a, "%d", op->mb);
    if (op->act == ACT_UPDATE)
        return arena_printf(a, "U%d", op->stage);
    if (op->act == TL_SUM)
        return arena_printf(a, "S%d.%d", op->stage, op->mb);
    const char *kinds = "FBWU";
    if (tl->nstages > tl->ndev)
        return arena_printf(a, "%c%d.%d", kinds[op->act], op->stage, op->mb);
    return arena_printf(a, "%c%d", kinds[op->act], op->mb);
}

/* "1f1b schedule, 2 stage(s), 4 micro-batch(es): predicted step 4.866 ms,
 * bubble 33.6%", and what a measured run's trace says of itself. */
static const char *title(Arena *a, const Timeline *tl)
{
    const char *what = tl->schedule ? arena_printf(a, "%s schedule", tl->schedule)
                                    : "a schedule the trace does not name";
    const char *m = tl->M ? arena_printf(a, ", %d micro-batch(es)", tl->M) : "";
    bool measured = strcmp(tl->source, "predicted") != 0;
    const char *mean = tl->mean_step > 0
                           ? arena_printf(a, " (mean step of the run %.3f ms)", tl->mean_step * 1e3)
                           : "";
    return arena_printf(a, "%s%s, %d stage(s)%s: %s step %.3f ms%s, bubble %.1f%%",
                        measured ? "measured: " : "", what, tl->nstages, m,
                        measured ? "traced" : "predicted", tl->step * 1e3, mean,
                        100 * tl->bubble);
}

static void header(const Svg *s, const Panel *pn)
{
    const Timeline *tl = pn->tl;
    fprintf(s->f, "<text x=\"%d\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">", LEFT,
            pn->y0 + 20);
    text_escaped(s->f, title(s->a, tl));
    fputs("</text>\n", s->f);
    const char *note = "";
    if (pn->ndev < tl->ndev)
        note = arena_printf(s->a, "showing %d of %d devices; ", pn->ndev, tl->ndev);
    if (tl->M > MAX_LABELLED)
        note = arena_printf(s->a, "%spast %d micro-batches a box is a run of a stage's actions "
                            "or copies less than a pixel apart, unlabelled; ", note,
                            MAX_LABELLED);
    if (tl->file)
        note = arena_printf(s->a, "%sfrom %s; ", note, tl->file);
    fprintf(s->f, "<text x=\"%d\" y=\"%.1f\" fill=\"#444\">", LEFT, pn->y0 + 38);
    text_escaped(s->f, arena_printf(s->a, "%sboxes coloured by stage, F forward, B backward, "
                                    "W weight gradients, U update, digit the micro-batch; "
                                    "grey: copies; shaded: idle", note));
    fputs("</text>\n", s->f);
}

/* The row names, and the idle time of each compute row shaded. */
static void rows(const Svg *s, const Panel *pn)
{
    for (int k = 0; k < pn->nstreams; k++) {
        int r = pn->row_of[k];
        if (r < 0)
            continue;
        fprintf(s->f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", LEFT - 8,
                y_of(pn, r) + ROW * 0.7);
        text_escaped(s->f, arena_printf(s->a, "%s %s", pn->tl->devices[k / STREAMS_PER_DEV],
                                        stream_kinds[k % STREAMS_PER_DEV]));
        const char *fill = k % STREAMS_PER_DEV == 0 ? "#f4cccc" : "#f3f3f3";
        fprintf(s->f, "</text>\n<rect class=\"%s\" x=\"%d\" y=\"%.1f\" width=\"%.2f\" "
                "height=\"%d\" fill=\"%s\"/>\n", k % STREAMS_PER_DEV == 0 ? "idle" : "lane",
                LEFT, y_of(pn, r), pn->tl->step * s->scale, ROW, fill);
    }
}

/* A box for the operations idx[0..n) of one row: one operation, or past
 * MAX_LABELLED micro-batches a run of them (data-count) that a pixel would
 * not tell apart. */
static void box(const Svg *s, const Panel *pn, const int *idx, int n)
{
    const TlOp *op = &pn->tl->ops[idx[0]], *last = &pn->tl->ops[idx[n - 1]];
    int r = pn->row_of[op->stream];
    double x0 = x_of(s, op->start), w = fmax(1.0, (last->end - op->start) * s->scale);
    const char *label = op_label(s->a, pn->tl, op);
    const char *what = n > 1 ? arena_printf(s->a, "to %s, %d %s", op_label(s->a, pn->tl, last),
                                            n, op->copy ? "copies" : "actions")
                             : op->copy ? "copy" : "action";
    fprintf(s->f, "<g class=\"op\" data-stream=\"%d\" data-index=\"%d\" data-kind=\"%s\" "
            "data-stage=\"%d\" data-label=\"%s\"", op->stream, idx[0],
            op->copy ? "copy" : op->act == TL_SUM ? "sum" : "run",
            op->stage, label);
    if (n > 1)
        fprintf(s->f, " data-count=\"%d\"", n);
    fprintf(s->f, "><title>%s %s: %.3f to %.3f ms</title>", label, what, op->start * 1e3,
            last->end * 1e3);
    fprintf(s->f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
            "stroke=\"#333\" stroke-width=\"0.5\"/>", x0, y_of(pn, r), w, ROW,
            op->copy ? "#bbbbbb" : palette[op->stage % NPALETTE]);
    if (pn->tl->M <= MAX_LABELLED && w >= 7.0 * (double)strlen(label))
        fprintf(s->f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>",
                x0 + w / 2, y_of(pn, r) + ROW * 0.7, label);
    fputs("</g>\n", s->f);
}

/* A copy's arrow: from its box's end to the receiving device's compute row. */
static void arrow(const Svg *s, const Panel *pn, const TlOp *op)
{
    int to = op->dst_dev * STREAMS_PER_DEV;
    int r = pn->row_of[op->stream], rt = op->dst_dev >= 0 && to < pn->nstreams
                                             ? pn->row_of[to] : -1;
    if (r < 0 || rt < 0)
        return;
    double x = x_of(s, op->end), y0 = y_of(pn, r) + ROW / 2.0;
    double y1 = rt > r ? y_of(pn, rt) : y_of(pn, rt) + ROW;
    fprintf(s->f, "<line class=\"copy-arrow\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" "
            "stroke=\"#555\" stroke-width=\"0.8\" marker-end=\"url(#arrow)\"/>\n", x, y0, x, y1);
}

static double tick_step(double span)
{
    double raw = span / 8, p10 = pow(10, floor(log10(raw)));
    return raw <= p10 ? p10 : raw <= 2 * p10 ? 2 * p10 : raw <= 5 * p10 ? 5 * p10 : 10 * p10;
}

static void axis(const Svg *s, const Panel *pn)
{
    double y = y_of(pn, pn->nrows) + 4, ms = PLOT / s->scale * 1e3, step = tick_step(ms);
    fprintf(s->f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>\n",
            LEFT, y, LEFT + PLOT, y);
    for (double t = 0; t <= ms * (1 + 1e-9); t += step) {
        double x = x_of(s, t / 1e3);
        fprintf(s->f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>"
                "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, y, x,
                y + 5, x, y + 17, t);
    }
    fprintf(s->f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">ms</text>\n",
            LEFT + PLOT / 2, y + 30);
}

/* Each device's memory plan as a bar, the largest plan the full length,
 * with its share of the device's memory in the text. */
static void memory(const Svg *s, const Panel *pn)
{
    const Timeline *tl = pn->tl;
    for (int d = 0; d < pn->ndev; d++) {
        int r = pn->row_of[d * STREAMS_PER_DEV];
        double cap = tl->capacity ? tl->capacity[d] : 0, mem = tl->memory[d];
        const char *share = cap > 0 ? arena_printf(s->a, ", %.0f%%", 100 * mem / cap) : "";
        double x = LEFT + PLOT + 12, w = RIGHT - 90;
        fprintf(s->f, "<g class=\"memory\" data-device=\"%d\"><title>", d);
        text_escaped(s->f, arena_printf(s->a, "%s: memory plan %.1f MB%s", tl->devices[d],
                                        mem / 1e6, cap > 0 ? arena_printf(s->a, " of %.1f MB",
                                                                          cap / 1e6) : ""));
        fprintf(s->f, "</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" "
                "fill=\"none\" stroke=\"#333\"/><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                "height=\"%d\" fill=\"#6a9fd8\"/><text x=\"%.1f\" y=\"%.1f\">%.0f MB%s</text>"
                "</g>\n", x, y_of(pn, r) + 6, w, ROW - 12, x, y_of(pn, r) + 6,
                w * mem / s->most_memory, ROW - 12, x + w + 4, y_of(pn, r) + ROW * 0.7,
                mem / 1e6, share);
    }
}

static const TlOp *sort_ops;   /* by_stream_start's operations */

static int by_stream_start(const void *x, const void *y)
{
    const TlOp *a = &sort_ops[*(const int *)x], *b = &sort_ops[*(const int *)y];
    if (a->stream != b->stream)
        return a->stream - b->stream;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return *(const int *)x - *(const int *)y;
}

/* Whether op joins the box that ends at `end`: past MAX_LABELLED
 * micro-batches, the same row, stage and kind, less than a pixel later. */
static bool joins(const Svg *s, const Panel *pn, const TlOp *first, const TlOp *op, double end)
{
    return pn->tl->M > MAX_LABELLED && op->stream == first->stream &&
           op->stage == first->stage && op->copy == first->copy &&
           (op->start - end) * s->scale < 1.0;
}

/* Every drawn row's boxes in order of start, then the copies' arrows (a
 * box of copies: its last one's). */
static void boxes(const Svg *s, const Panel *pn)
{
    const Timeline *tl = pn->tl;
    int *idx = arena_array(s->a, (size_t)tl->nops, sizeof(int)), n = 0;
    for (int i = 0; i < tl->nops; i++)
        if (pn->row_of[tl->ops[i].stream] >= 0)
            idx[n++] = i;
    sort_ops = tl->ops;
    qsort(idx, (size_t)n, sizeof *idx, by_stream_start);
    int *last = arena_array(s->a, (size_t)n + 1, sizeof(int)), nboxes = 0;
    for (int k = 0; k < n;) {
        const TlOp *first = &tl->ops[idx[k]];
        double end = first->end;
        int j = k + 1;
        for (; j < n && joins(s, pn, first, &tl->ops[idx[j]], end); j++)
            end = fmax(end, tl->ops[idx[j]].end);
        box(s, pn, idx + k, j - k);
        last[nboxes++] = idx[j - 1];
        k = j;
    }
    for (int b = 0; b < nboxes; b++)
        if (tl->ops[last[b]].copy)
            arrow(s, pn, &tl->ops[last[b]]);
}

static void panel(const Svg *s, const Panel *pn)
{
    const Timeline *tl = pn->tl;
    fprintf(s->f, "<g class=\"panel\" data-source=\"%s\">\n",
            strcmp(tl->source, "predicted") == 0 ? "predicted" : "measured");
    header(s, pn);
    rows(s, pn);
    boxes(s, pn);
    axis(s, pn);
    memory(s, pn);
    fputs("</g>\n", s->f);
}

static FILE *svg_open(Arena *a, const char *path, char **tmp)
{
    *tmp = out_tmp(a, path);
    FILE *f = fopen(*tmp, "w");
    if (!f)
        error_file(path, "cannot open for writing: %s", strerror(errno));
    return f;
}

static void svg_close(FILE *f, const char *tmp, const char *path)
{
    fputs("</svg>\n", f);
    if (fclose(f) != 0 || !out_commit(tmp, path)) {
        int err = errno;
        if (strcmp(tmp, path) != 0)
            remove(tmp);
        error_file(path, "write failed: %s", strerror(err));
    }
}

void write_gantt_timelines(Arena *a, const Timeline *const *tl, int n, const char *path)
{
    Svg s = {.a = a, .most_memory = 1};
    Panel *pn = arena_array(a, (size_t)n, sizeof *pn);
    double longest = 0, height = 0;
    for (int k = 0; k < n; k++) {
        layout(a, &pn[k], tl[k], height);
        height += panel_height(&pn[k]);
        longest = fmax(longest, tl[k]->step);
        for (int d = 0; d < tl[k]->ndev; d++)
            s.most_memory = fmax(s.most_memory, tl[k]->memory[d]);
    }
    s.scale = PLOT / (longest > 0 ? longest : 1);
    char *tmp;
    s.f = svg_open(a, path, &tmp);
    int width = LEFT + PLOT + RIGHT;
    fprintf(s.f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/"
            "2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-"
            "serif\" font-size=\"11\">\n<defs><marker id=\"arrow\" markerWidth=\"8\" "
            "markerHeight=\"8\" refX=\"7\" refY=\"4\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 "
            "z\" fill=\"#555\"/></marker></defs>\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n", width, (int)height, width, (int)height);
    for (int k = 0; k < n; k++)
        panel(&s, &pn[k]);
    svg_close(s.f, tmp, path);
}

void write_gantt(const Pipeline *pl, const Measured *m, const char *path)
{
    int nruns;
    const Timeline *const *runs = measured_runs(m, &nruns);
    const Timeline **all = arena_array(pl->g->arena, (size_t)nruns + 1, sizeof *all);
    all[0] = timeline_of_plan(pl);
    for (int k = 0; k < nruns; k++)
        all[k + 1] = runs[k];
    write_gantt_timelines(pl->g->arena, all, nruns + 1, path);
}

/* ---- --dump=sweep=FILE.svg: the predicted step against M ---- */

enum { SW_LEFT = 80, SW_W = 640, SW_TOP = 50, SW_H = 320, SW_RIGHT = 200 };

/* A line per schedule: darker than the boxes' colours, told apart in print. */
static const char *const line_colour[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a"};

static double sweep_x(int M, int most)
{
    return SW_LEFT + (most > 1 ? log2(M) / log2(most) : 0.5) * SW_W;
}

static double sweep_y(double t, double top)
{
    return SW_TOP + SW_H - t / top * SW_H;
}

static void sweep_axes(FILE *f, const Pipeline *pl, int most, double top)
{
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\" font-weight=\"bold\">predicted step "
            "against the micro-batch count, batch %lld</text>\n", SW_LEFT,
            (long long)pl->opt.batch * pl->sc->M);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n<line x1=\"%d\" "
            "y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", SW_LEFT, SW_TOP + SW_H,
            SW_LEFT + SW_W, SW_TOP + SW_H, SW_LEFT, SW_TOP, SW_LEFT, SW_TOP + SW_H);
    for (int M = 1; M <= most; M *= 2)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
                sweep_x(M, most), SW_TOP + SW_H + 16, M);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">micro-batches</text>\n",
            SW_LEFT + SW_W / 2, SW_TOP + SW_H + 34);
    double step = tick_step(top * 1e3);
    for (double t = 0; t <= top * 1e3 * (1 + 1e-9); t += step)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", SW_LEFT - 6,
                sweep_y(t / 1e3, top) + 4, t);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">ms</text>\n", SW_LEFT - 6,
            SW_TOP - 8);
}

/* One schedule's points joined by a line; a candidate that could not run
 * is left out. */
static void sweep_series(FILE *f, const Pipeline *pl, SchedKind k, int colour, int most,
                         double top)
{
    const char *c = line_colour[colour % 4];
    fprintf(f, "<g class=\"series\" data-schedule=\"%s\"><polyline fill=\"none\" stroke=\"%s\" "
            "stroke-width=\"2\" points=\"", schedule_name(k), c);
    for (int i = 0; i < pl->ntried; i++)
        if (pl->tried[i].kind == k && pl->tried[i].step_time > 0)
            fprintf(f, "%.1f,%.1f ", sweep_x(pl->tried[i].M, most),
                    sweep_y(pl->tried[i].step_time, top));
    fputs("\"/>\n", f);
    for (int i = 0; i < pl->ntried; i++) {
        const Tried *t = &pl->tried[i];
        if (t->kind == k && t->step_time > 0)
            fprintf(f, "<circle class=\"point\" data-m=\"%d\" data-ms=\"%.6f\" cx=\"%.1f\" "
                    "cy=\"%.1f\" r=\"4\" fill=\"%s\" stroke=\"#333\"><title>%s, M=%d: %.3f ms"
                    "</title></circle>\n", t->M, t->step_time * 1e3, sweep_x(t->M, most),
                    sweep_y(t->step_time, top), c, schedule_name(k), t->M, t->step_time * 1e3);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#222\"><tspan fill=\"%s\">&#9632;</tspan> "
            "%s</text></g>\n", SW_LEFT + SW_W + 20, SW_TOP + 20 + 18 * colour, c,
            schedule_name(k));
}

/* A run's step as the sweep marks it: its mean over the run, or the one
 * step it traced when the trace does not say. */
static double run_step(const Timeline *t)
{
    return t->mean_step > 0 ? t->mean_step : t->step;
}

/* The measured runs as crosses, in their schedule's line colour. */
static void sweep_measured(FILE *f, Arena *a, const Timeline *const *runs, int nruns,
                           const char *const *shown, int nshown, int most, double top)
{
    for (int k = 0; k < nruns; k++) {
        const Timeline *t = runs[k];
        if (t->M < 1)
            continue;
        const char *c = "#000";
        for (int i = 0; i < nshown; i++)
            if (t->schedule && strcmp(t->schedule, shown[i]) == 0)
                c = line_colour[i % 4];
        double x = sweep_x(t->M, most), y = sweep_y(run_step(t), top);
        fputs("<g class=\"measured\" data-schedule=\"", f);
        text_escaped(f, t->schedule ? t->schedule : "");
        fprintf(f, "\" data-m=\"%d\" data-ms=\"%.6f\"><title>", t->M, run_step(t) * 1e3);
        text_escaped(f, arena_printf(a, "measured (%s): %s, M=%d: %.3f ms", t->file,
                                     t->schedule ? t->schedule : "?", t->M, run_step(t) * 1e3));
        fprintf(f, "</title><path d=\"M%.1f,%.1f l10,10 m0,-10 l-10,10\" stroke=\"%s\" "
                "stroke-width=\"3\"/></g>\n", x - 5, y - 5, c);
    }
    if (nruns)
        fprintf(f, "<text x=\"%d\" y=\"%d\">&#215; measured: each run's mean step</text>\n",
                SW_LEFT + SW_W + 20, SW_TOP + 20 + 18 * nshown + 48);
}

void write_sweep(const Pipeline *pl, const Measured *m, const char *path)
{
    char *tmp;
    FILE *f = svg_open(pl->g->arena, path, &tmp);
    int most = 1, nruns;
    const Timeline *const *runs = measured_runs(m, &nruns);
    double top = pl->plan->step_time;
    for (int i = 0; i < pl->ntried; i++) {
        most = pl->tried[i].M > most ? pl->tried[i].M : most;
        top = fmax(top, pl->tried[i].step_time);
    }
    for (int k = 0; k < nruns; k++) {
        most = runs[k]->M > most ? runs[k]->M : most;
        top = fmax(top, runs[k]->M > 0 ? run_step(runs[k]) : 0);
    }
    top *= 1.1;
    int width = SW_LEFT + SW_W + SW_RIGHT, height = SW_TOP + SW_H + 50;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000"
            "/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
            "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height, width, height);
    sweep_axes(f, pl, most, top);
    SchedKind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB};
    const char *shown[4];
    int nshown = 0;
    for (int k = 0; k < 4; k++) {
        bool any = false;
        for (int i = 0; i < pl->ntried; i++)
            any |= pl->tried[i].kind == kinds[k] && pl->tried[i].step_time > 0;
        if (any) {
            shown[nshown] = schedule_name(kinds[k]);
            sweep_series(f, pl, kinds[k], nshown++, most, top);
        }
    }
    fprintf(f, "<circle class=\"chosen\" data-schedule=\"%s\" data-m=\"%d\" cx=\"%.1f\" "
            "cy=\"%.1f\" r=\"9\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"><title>chosen: "
            "%s, M=%d, %.3f ms</title></circle>\n", schedule_name(pl->sc->kind), pl->sc->M,
            sweep_x(pl->sc->M, most), sweep_y(pl->plan->step_time, top),
            schedule_name(pl->sc->kind), pl->sc->M, pl->plan->step_time * 1e3);
    fprintf(f, "<text x=\"%d\" y=\"%d\">circled: the plan chosen (its cuts</text><text "
            "x=\"%d\" y=\"%d\">refined after the search)</text>\n", SW_LEFT + SW_W + 20,
            SW_TOP + 20 + 18 * nshown + 10, SW_LEFT + SW_W + 20,
            SW_TOP + 20 + 18 * nshown + 24);
    sweep_measured(f, pl->g->arena, runs, nruns, shown, nshown, most, top);
    svg_close(f, tmp, path);
}
