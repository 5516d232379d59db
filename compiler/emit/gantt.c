/* gantt.c — --dump=gantt=FILE.svg: the predicted step as a picture.
 *
 * A self-contained SVG (no script, no font but the viewer's sans-serif):
 * one row per device stream that has work (compute, send, send-back), one
 * box per operation at its simulated start and end, coloured by stage and
 * labelled F/B/W/U with its micro-batch, copies as grey boxes on the
 * sender's row with an arrow to the device that receives them. A time
 * axis in ms, the idle time of each compute row shaded (the bubble), and
 * at the end of each device's first row a bar of its memory plan against
 * the largest plan. Every box carries data-stream and data-label
 * attributes and a <title>, so a test (or a person hovering) can read it.
 * Past MAX_DEVICES devices the rest are left out, and past MAX_LABELLED
 * micro-batches the boxes go unlabelled; the caption says so.
 */
#include "mpcc.h"

#include <errno.h>
#include <math.h>
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

static const char *const stream_kinds[] = {"compute", "send", "send-back"};

typedef struct Svg {
    FILE *f;
    const Pipeline *pl;
    const Plan *p;
    int ndev;               /* devices drawn */
    int *row_of;            /* [nstreams]: its row, -1 if not drawn */
    int nrows;
    double scale;           /* pixels per second */
} Svg;

static double x_of(const Svg *s, double t)
{
    return LEFT + t * s->scale;
}

static double y_of(int row)
{
    return TOP + row * (ROW + GAP);
}

static bool stream_busy(const Plan *p, int stream)
{
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].stream == stream)
            return true;
    return false;
}

/* Rows: each drawn device's compute stream, then its copy streams that
 * carry anything. */
static void layout(Svg *s)
{
    const Plan *p = s->p;
    s->row_of = arena_array(s->pl->g->arena, (size_t)p->nstreams, sizeof(int));
    for (int k = 0; k < p->nstreams; k++) {
        int dev = k / STREAMS_PER_DEV;
        bool drawn = dev < s->ndev && (k % STREAMS_PER_DEV == 0 || stream_busy(p, k));
        s->row_of[k] = drawn ? s->nrows++ : -1;
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

/* The label of a box: F3, B1.3 with several stages per device, U0, or a
 * copy's micro-batch. */
static const char *op_label(const Svg *s, const PlanOp *op)
{
    Arena *a = s->pl->g->arena;
    if (op->kind == OPK_COPY)
        return arena_printf(a, "%d", op->mb);
    if (op->act.kind == ACT_UPDATE)
        return arena_printf(a, "U%d", op->act.stage);
    const char *kinds = "FBWU";
    if (s->pl->st->n > s->pl->sc->ndev)
        return arena_printf(a, "%c%d.%d", kinds[op->act.kind], op->act.stage, op->act.mb);
    return arena_printf(a, "%c%d", kinds[op->act.kind], op->act.mb);
}

static void header(Svg *s, int width, int height)
{
    const Plan *p = s->p;
    fprintf(s->f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(s->f, "<defs><marker id=\"arrow\" markerWidth=\"8\" markerHeight=\"8\" refX=\"7\" "
            "refY=\"4\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#555\"/></marker>"
            "</defs>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(s->f, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">", LEFT);
    text_escaped(s->f, arena_printf(s->pl->g->arena, "%s schedule, %d stage(s), %d "
                                    "micro-batch(es): predicted step %.3f ms, bubble %.1f%%",
                                    schedule_name(s->pl->sc->kind), s->pl->st->n, s->pl->sc->M,
                                    p->step_time * 1e3, 100 * p->bubble));
    fputs("</text>\n", s->f);
    const char *note = "";
    if (s->ndev < s->pl->ds.n)
        note = arena_printf(s->pl->g->arena, "showing %d of %d devices; ", s->ndev,
                            s->pl->ds.n);
    if (s->pl->sc->M > MAX_LABELLED)
        note = arena_printf(s->pl->g->arena, "%sboxes unlabelled past %d micro-batches; ",
                            note, MAX_LABELLED);
    fprintf(s->f, "<text x=\"%d\" y=\"38\" fill=\"#444\">", LEFT);
    text_escaped(s->f, arena_printf(s->pl->g->arena, "%sboxes coloured by stage, F forward, "
                                    "B backward, W weight gradients, U update, digit the "
                                    "micro-batch; grey: copies; shaded: idle", note));
    fputs("</text>\n", s->f);
}

/* The row names, and the idle time of each compute row shaded. */
static void rows(Svg *s)
{
    const Plan *p = s->p;
    for (int k = 0; k < p->nstreams; k++) {
        int r = s->row_of[k];
        if (r < 0)
            continue;
        fprintf(s->f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s %s</text>\n", LEFT - 8,
                y_of(r) + ROW * 0.7, p->ds->d[k / STREAMS_PER_DEV].name,
                stream_kinds[k % STREAMS_PER_DEV]);
        const char *fill = k % STREAMS_PER_DEV == 0 ? "#f4cccc" : "#f3f3f3";
        fprintf(s->f, "<rect class=\"%s\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" "
                "fill=\"%s\"/>\n", k % STREAMS_PER_DEV == 0 ? "idle" : "lane", LEFT, y_of(r),
                PLOT, ROW, fill);
    }
}

static void box(Svg *s, const PlanOp *op, int i)
{
    int r = s->row_of[op->stream];
    double x0 = x_of(s, op->start), w = fmax(1.0, (op->end - op->start) * s->scale);
    bool copy = op->kind == OPK_COPY;
    int stage = copy ? s->p->bufs[op->dst].stage : op->act.stage;
    const char *label = op_label(s, op);
    fprintf(s->f, "<g class=\"op\" data-stream=\"%d\" data-index=\"%d\" data-kind=\"%s\" "
            "data-stage=\"%d\" data-label=\"%s\"><title>%s %s: %.3f to %.3f ms</title>",
            op->stream, i, copy ? "copy" : "run", stage, label, label,
            copy ? "copy" : "action", op->start * 1e3, op->end * 1e3);
    fprintf(s->f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
            "stroke=\"#333\" stroke-width=\"0.5\"/>", x0, y_of(r), w, ROW,
            copy ? "#bbbbbb" : palette[stage % NPALETTE]);
    if (s->pl->sc->M <= MAX_LABELLED && w >= 7.0 * (double)strlen(label))
        fprintf(s->f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>",
                x0 + w / 2, y_of(r) + ROW * 0.7, label);
    fputs("</g>\n", s->f);
}

/* A copy's arrow: from its box's end to the receiving device's compute row. */
static void arrow(Svg *s, const PlanOp *op)
{
    int to = s->p->bufs[op->dst].dev * STREAMS_PER_DEV;
    int r = s->row_of[op->stream], rt = to < s->p->nstreams ? s->row_of[to] : -1;
    if (r < 0 || rt < 0)
        return;
    double x = x_of(s, op->end), y0 = y_of(r) + ROW / 2.0;
    double y1 = rt > r ? y_of(rt) : y_of(rt) + ROW;
    fprintf(s->f, "<line class=\"copy-arrow\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" "
            "stroke=\"#555\" stroke-width=\"0.8\" marker-end=\"url(#arrow)\"/>\n", x, y0, x, y1);
}

static double tick_step(double span)
{
    double raw = span / 8, p10 = pow(10, floor(log10(raw)));
    return raw <= p10 ? p10 : raw <= 2 * p10 ? 2 * p10 : raw <= 5 * p10 ? 5 * p10 : 10 * p10;
}

static void axis(Svg *s)
{
    double y = y_of(s->nrows) + 4, ms = s->p->step_time * 1e3, step = tick_step(ms);
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
static void memory(Svg *s)
{
    const Plan *p = s->p;
    Arena *a = s->pl->g->arena;
    double most = 1;
    for (int d = 0; d < s->ndev; d++)
        most = fmax(most, (double)p->arena_bytes[d]);
    for (int d = 0; d < s->ndev; d++) {
        int r = s->row_of[d * STREAMS_PER_DEV];
        double cap = (double)p->ds->d[d].prof.memory, mem = (double)p->arena_bytes[d];
        const char *share = cap > 0 ? arena_printf(a, ", %.0f%%", 100 * mem / cap) : "";
        double x = LEFT + PLOT + 12, w = RIGHT - 90;
        fprintf(s->f, "<g class=\"memory\" data-device=\"%d\"><title>%s: memory plan %.1f MB"
                "%s</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"none\" "
                "stroke=\"#333\"/><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" "
                "fill=\"#6a9fd8\"/><text x=\"%.1f\" y=\"%.1f\">%.0f MB%s</text></g>\n", d,
                p->ds->d[d].name, mem / 1e6,
                cap > 0 ? arena_printf(a, " of %.1f MB", cap / 1e6) : "", x, y_of(r) + 6, w,
                ROW - 12, x, y_of(r) + 6, w * mem / most, ROW - 12, x + w + 4,
                y_of(r) + ROW * 0.7, mem / 1e6, share);
    }
}

void write_gantt(const Pipeline *pl, const char *path)
{
    const Plan *p = pl->plan;
    char *tmp = arena_printf(pl->g->arena, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        error_file(path, "cannot open for writing: %s", strerror(errno));
    Svg s = {.f = f, .pl = pl, .p = p, .ndev = pl->ds.n < MAX_DEVICES ? pl->ds.n : MAX_DEVICES,
             .scale = PLOT / (p->step_time > 0 ? p->step_time : 1)};
    layout(&s);
    int height = (int)y_of(s.nrows) + AXIS + 20;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    header(&s, LEFT + PLOT + RIGHT, height);
    rows(&s);
    for (int i = 0; i < p->nops; i++)
        if (s.row_of[p->ops[i].stream] >= 0)
            box(&s, &p->ops[i], i);
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == OPK_COPY)
            arrow(&s, &p->ops[i]);
    axis(&s);
    memory(&s);
    fputs("</svg>\n", f);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        error_file(path, "write failed: %s", strerror(errno));
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

void write_sweep(const Pipeline *pl, const char *path)
{
    char *tmp = arena_printf(pl->g->arena, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        error_file(path, "cannot open for writing: %s", strerror(errno));
    int most = 1;
    double top = pl->plan->step_time;
    for (int i = 0; i < pl->ntried; i++) {
        most = pl->tried[i].M > most ? pl->tried[i].M : most;
        top = fmax(top, pl->tried[i].step_time);
    }
    top *= 1.1;
    int width = SW_LEFT + SW_W + SW_RIGHT, height = SW_TOP + SW_H + 50;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000"
            "/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
            "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height, width, height);
    sweep_axes(f, pl, most, top);
    SchedKind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB};
    int shown = 0;
    for (int k = 0; k < 4; k++) {
        bool any = false;
        for (int i = 0; i < pl->ntried; i++)
            any |= pl->tried[i].kind == kinds[k] && pl->tried[i].step_time > 0;
        if (any)
            sweep_series(f, pl, kinds[k], shown++, most, top);
    }
    fprintf(f, "<circle class=\"chosen\" data-schedule=\"%s\" data-m=\"%d\" cx=\"%.1f\" "
            "cy=\"%.1f\" r=\"9\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"><title>chosen: "
            "%s, M=%d, %.3f ms</title></circle>\n", schedule_name(pl->sc->kind), pl->sc->M,
            sweep_x(pl->sc->M, most), sweep_y(pl->plan->step_time, top),
            schedule_name(pl->sc->kind), pl->sc->M, pl->plan->step_time * 1e3);
    fprintf(f, "<text x=\"%d\" y=\"%d\">circled: the plan chosen (its cuts</text><text "
            "x=\"%d\" y=\"%d\">refined after the search)</text>\n", SW_LEFT + SW_W + 20,
            SW_TOP + 20 + 18 * shown + 10, SW_LEFT + SW_W + 20,
            SW_TOP + 20 + 18 * shown + 24);
    fputs("</svg>\n", f);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        error_file(path, "write failed: %s", strerror(errno));
}
