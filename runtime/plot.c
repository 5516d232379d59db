/* plot.c — the trainer's --plot FILE.svg: the training loss against the
 * step, and the evaluations, as a picture to open in a browser.
 *
 * The loop hands over every step's loss and every evaluation's; they stay
 * in memory (16 bytes each) and the picture is rewritten whole (PATH.tmp,
 * rename: mprt_out_*) at every checkpoint and at the end, so a run that is
 * stopped or killed keeps its curve up to its last checkpoint. The SVG is
 * self-contained: no script, the viewer's sans-serif. Past MPRT_PLOT_MAX
 * steps the line is the mean of each bucket of steps over a band from the
 * bucket's minimum to its maximum, so 100,000 steps still make a small
 * file; the caption says so.
 *
 * The numbers are in attributes, for tests and tools: <rect
 * class="plot-area"> maps steps data-x0..data-x1 to its left..right edge
 * and losses data-y0..data-y1 to its bottom..top edge; the line is
 * <polyline class="loss"> (data-bucket: steps per point, 1 unless
 * aggregated, then with <polygon class="loss-band">: the maxima left to
 * right, then the minima right to left); each evaluation is a <circle
 * class="eval" data-step data-loss>, each tick a <g class="xtick|ytick"
 * data-value>.
 */
#include "mprt.h"

enum { MPRT_PLOT_MAX = 2000, MPRT_PLOT_BUCKETS = 1000 };
enum { MPRT_PL_LEFT = 70, MPRT_PL_TOP = 46, MPRT_PL_W = 600, MPRT_PL_H = 340,
       MPRT_PL_RIGHT = 190 };

typedef struct MprtPoint {
    long step;
    double loss;
} MprtPoint;

typedef struct MprtPlot {
    const char *path, *model;   /* path NULL: no --plot, nothing kept */
    long first;                 /* the step this run started from (--resume) */
    MprtPoint *train, *eval;
    long ntrain, neval, cap_train, cap_eval;
} MprtPlot;

/* Steps x0..x1 and losses y0..y1 across the plot area, and tick spacings. */
typedef struct MprtPlotAxes {
    double x0, x1, xt, y0, y1, yt;
} MprtPlotAxes;

static void mprt_plot_push(MprtPoint **v, long *n, long *cap, long step, double loss)
{
    if (*n == *cap) {
        long grown = *cap ? 2 * *cap : 1024;
        MprtPoint *p = realloc(*v, (size_t)grown * sizeof *p);
        if (!p)
            mprt_die("out of memory for the --plot's %ld points", *n);
        *v = p;
        *cap = grown;
    }
    (*v)[(*n)++] = (MprtPoint){step, loss};
}

static void mprt_plot_step(MprtPlot *p, long step, double loss)
{
    if (p->path)
        mprt_plot_push(&p->train, &p->ntrain, &p->cap_train, step, loss);
}

/* An evaluation with nothing to score (NaN) has no point. */
static void mprt_plot_eval(MprtPlot *p, long step, double loss)
{
    if (p->path && isfinite(loss))
        mprt_plot_push(&p->eval, &p->neval, &p->cap_eval, step, loss);
}

/* A round spacing (1, 2 or 5 times a power of ten) giving about 6 ticks. */
static double mprt_plot_tick(double span)
{
    double raw = span / 6, p10 = pow(10, floor(log10(raw)));
    return raw <= p10 ? p10 : raw <= 2 * p10 ? 2 * p10 : raw <= 5 * p10 ? 5 * p10 : 10 * p10;
}

static void mprt_plot_range(const MprtPoint *v, long n, MprtPlotAxes *a)
{
    for (long i = 0; i < n; i++) {
        a->x1 = fmax(a->x1, (double)v[i].step);
        a->y0 = fmin(a->y0, v[i].loss);
        a->y1 = fmax(a->y1, v[i].loss);
    }
}

/* Steps from the run's start; losses widened to whole ticks, and a flat
 * curve given some height so that it does not divide by zero. */
static MprtPlotAxes mprt_plot_axes(const MprtPlot *p)
{
    MprtPlotAxes a = {(double)p->first, (double)p->first + 1, 1, INFINITY, -INFINITY, 1};
    mprt_plot_range(p->train, p->ntrain, &a);
    mprt_plot_range(p->eval, p->neval, &a);
    if (a.y0 > a.y1)
        a.y0 = 0, a.y1 = 1;
    if (a.y1 - a.y0 <= 1e-9 * fmax(1, fabs(a.y1))) {
        double pad = a.y1 != 0 ? fabs(a.y1) * 0.1 : 1;
        a.y0 -= pad, a.y1 += pad;
    }
    a.xt = fmax(1, round(mprt_plot_tick(a.x1 - a.x0)));
    a.yt = mprt_plot_tick(a.y1 - a.y0);
    a.y0 = floor(a.y0 / a.yt) * a.yt;
    a.y1 = ceil(a.y1 / a.yt) * a.yt;
    return a;
}

static double mprt_plot_x(const MprtPlotAxes *a, double step)
{
    return MPRT_PL_LEFT + (step - a->x0) / (a->x1 - a->x0) * MPRT_PL_W;
}

static double mprt_plot_y(const MprtPlotAxes *a, double loss)
{
    return MPRT_PL_TOP + MPRT_PL_H - (loss - a->y0) / (a->y1 - a->y0) * MPRT_PL_H;
}

/* Text as XML takes it: markup as character references; control bytes
 * and bytes that are not UTF-8 (a file name can hold either) as '?'. */
static void mprt_plot_text(FILE *f, const char *s)
{
    const unsigned char *c = (const unsigned char *)s;
    while (*c) {
        size_t n = mprt_utf8_len(c, strnlen((const char *)c, 4));
        if (!n || *c < 0x20)
            fputc('?', f);
        else if (strchr("<>&\"", *c))
            fprintf(f, "&#%d;", *c);
        else
            fwrite(c, 1, n, f);
        c += n ? n : 1;
    }
}

/* The frame, the ticks with their grid lines, the axes' names. */
static void mprt_plot_frame(FILE *f, const MprtPlotAxes *a)
{
    fprintf(f, "<rect class=\"plot-area\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "fill=\"none\" stroke=\"#333\" data-x0=\"%.9g\" data-x1=\"%.9g\" data-y0=\"%.9g\" "
            "data-y1=\"%.9g\"/>\n", MPRT_PL_LEFT, MPRT_PL_TOP, MPRT_PL_W, MPRT_PL_H, a->x0, a->x1,
            a->y0, a->y1);
    for (double k = ceil(a->x0 / a->xt); k * a->xt <= a->x1; k++) {
        double x = mprt_plot_x(a, k * a->xt);
        fprintf(f, "<g class=\"xtick\" data-value=\"%.9g\"><line x1=\"%.2f\" y1=\"%d\" "
                "x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/><text x=\"%.2f\" y=\"%d\" "
                "text-anchor=\"middle\">%.9g</text></g>\n", k * a->xt, x, MPRT_PL_TOP + MPRT_PL_H,
                x, MPRT_PL_TOP + MPRT_PL_H + 5, x, MPRT_PL_TOP + MPRT_PL_H + 18, k * a->xt);
    }
    double k0 = round(a->y0 / a->yt);
    for (long i = 0; i <= lround((a->y1 - a->y0) / a->yt); i++) {
        double v = (k0 + (double)i) * a->yt, y = mprt_plot_y(a, v);
        fprintf(f, "<g class=\"ytick\" data-value=\"%.9g\"><line x1=\"%d\" y1=\"%.2f\" "
                "x2=\"%d\" y2=\"%.2f\" stroke=\"#e4e4e4\"/><text x=\"%d\" y=\"%.2f\" "
                "text-anchor=\"end\">%.6g</text></g>\n", v, MPRT_PL_LEFT, y,
                MPRT_PL_LEFT + MPRT_PL_W, y, MPRT_PL_LEFT - 6, y + 4, v);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n<text x=\"%d\" "
            "y=\"%d\" text-anchor=\"middle\">loss</text>\n", MPRT_PL_LEFT + MPRT_PL_W / 2,
            MPRT_PL_TOP + MPRT_PL_H + 36, MPRT_PL_LEFT - 40, MPRT_PL_TOP - 12);
}

/* Bucket b of k steps: its mean step, its mean loss, its extremes. */
typedef struct MprtBucket {
    double step, mean, lo, hi;
} MprtBucket;

static MprtBucket mprt_plot_bucket(const MprtPlot *p, long b, long k)
{
    long end = b + k < p->ntrain ? b + k : p->ntrain;
    MprtBucket s = {0, 0, INFINITY, -INFINITY};
    for (long i = b; i < end; i++) {
        s.step += (double)p->train[i].step / (double)(end - b);
        s.mean += p->train[i].loss / (double)(end - b);
        s.lo = fmin(s.lo, p->train[i].loss);
        s.hi = fmax(s.hi, p->train[i].loss);
    }
    return s;
}

/* The band of the buckets' extremes: the maxima left to right, then the
 * minima back. */
static void mprt_plot_band(FILE *f, const MprtPlot *p, const MprtPlotAxes *a, long k)
{
    fprintf(f, "<polygon class=\"loss-band\" data-bucket=\"%ld\" fill=\"#c6dbef\" "
            "stroke=\"none\" points=\"", k);
    for (long b = 0; b < p->ntrain; b += k) {
        MprtBucket s = mprt_plot_bucket(p, b, k);
        fprintf(f, "%.2f,%.2f ", mprt_plot_x(a, s.step), mprt_plot_y(a, s.hi));
    }
    for (long b = (p->ntrain - 1) / k * k; b >= 0; b -= k) {
        MprtBucket s = mprt_plot_bucket(p, b, k);
        fprintf(f, "%.2f,%.2f ", mprt_plot_x(a, s.step), mprt_plot_y(a, s.lo));
    }
    fputs("\"/>\n", f);
}

/* The training loss, a point per step (k == 1) or per bucket of k steps
 * over their band; the evaluations. */
static void mprt_plot_line(FILE *f, const MprtPlot *p, const MprtPlotAxes *a, long k)
{
    if (k > 1)
        mprt_plot_band(f, p, a, k);
    fprintf(f, "<polyline class=\"loss\" data-bucket=\"%ld\" fill=\"none\" stroke=\"#1f77b4\" "
            "stroke-width=\"1.5\" points=\"", k);
    for (long b = 0; b < p->ntrain; b += k) {
        MprtBucket s = mprt_plot_bucket(p, b, k);
        fprintf(f, "%.2f,%.2f ", mprt_plot_x(a, s.step), mprt_plot_y(a, s.mean));
    }
    fputs("\"/>\n", f);
    for (long i = 0; i < p->neval; i++)
        fprintf(f, "<circle class=\"eval\" data-step=\"%ld\" data-loss=\"%.9g\" cx=\"%.2f\" "
                "cy=\"%.2f\" r=\"4\" fill=\"#ff7f0e\" stroke=\"#333\"><title>eval step %ld: "
                "loss %.7g</title></circle>\n", p->eval[i].step, p->eval[i].loss,
                mprt_plot_x(a, (double)p->eval[i].step), mprt_plot_y(a, p->eval[i].loss),
                p->eval[i].step, p->eval[i].loss);
}

/* The legend at the right, the caption under the axis. */
static void mprt_plot_notes(FILE *f, const MprtPlot *p, long k)
{
    int x = MPRT_PL_LEFT + MPRT_PL_W + 16, y = MPRT_PL_TOP + 12;
    fprintf(f, "<g class=\"legend\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
            "stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">training loss%s"
            "</text>\n", x, y, x + 20, y, x + 26, y + 4, k > 1 ? " (mean)" : "");
    if (k > 1)
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"20\" height=\"10\" fill=\"#c6dbef\"/>"
                "<text x=\"%d\" y=\"%d\">min to max</text>\n", x, y + 13, x + 26, y + 22);
    if (p->neval)
        fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#ff7f0e\" stroke=\"#333\"/>"
                "<text x=\"%d\" y=\"%d\">evaluation loss</text>\n", x + 10, y + 36, x + 26,
                y + 40);
    fprintf(f, "</g>\n<text class=\"caption\" data-aggregated=\"%d\" x=\"%d\" y=\"%d\">steps "
            "%ld to %ld of this run", k > 1, MPRT_PL_LEFT, MPRT_PL_TOP + MPRT_PL_H + 58,
            p->ntrain ? p->train[0].step : p->first, p->ntrain ? p->train[p->ntrain - 1].step
            : p->first);
    if (p->first)
        fprintf(f, " (resumed at step %ld)", p->first);
    if (k > 1)
        fprintf(f, "; aggregated: each point is the mean of %ld steps, the band their "
                "minimum and maximum", k);
    fputs("</text>\n", f);
}

static int mprt_plot_write(const MprtPlot *p, char *err, size_t errlen)
{
    MprtOut out;
    if (mprt_out_open(&out, p->path, err, errlen) != 0)
        return 1;
    MprtPlotAxes a = mprt_plot_axes(p);
    long k = p->ntrain > MPRT_PLOT_MAX ? (p->ntrain + MPRT_PLOT_BUCKETS - 1) / MPRT_PLOT_BUCKETS
                                       : 1;
    int width = MPRT_PL_LEFT + MPRT_PL_W + MPRT_PL_RIGHT, height = MPRT_PL_TOP + MPRT_PL_H + 72;
    fprintf(out.fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3."
            "org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family="
            "\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n<text class=\"title\" x=\"%d\" y=\"22\" font-size=\"14\" "
            "font-weight=\"bold\">training loss: ", width, height, width, height, MPRT_PL_LEFT);
    mprt_plot_text(out.fp, p->model);
    fputs("</text>\n", out.fp);
    mprt_plot_frame(out.fp, &a);
    mprt_plot_line(out.fp, p, &a, k);
    mprt_plot_notes(out.fp, p, k);
    fputs("</svg>\n", out.fp);
    return mprt_out_commit(&out, err, errlen);
}

/* At a checkpoint a picture that cannot be written is a warning: the
 * checkpoint is what the run must not lose. */
static void mprt_plot_checkpoint(const MprtPlot *p)
{
    char err[512];
    if (p->path && mprt_plot_write(p, err, sizeof err) != 0)
        fprintf(stderr, "%s: warning: %s; training goes on\n", mprt_program, err);
}
