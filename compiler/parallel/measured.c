/* measured.c — per-node times from previous runs (./train --profile
 * prof.json), which replace the cost model's estimates (--measured), as
 * PipeDream plans from a profiling run.
 *
 * A file is the trainer's JSON: {"format": "mpcc-profile", "model": ...,
 * "rows": the micro-batch's rows, "nodes": [{"name": ..., "phase":
 * "forward"|"backward"|"update", "seconds": mean per call, "calls": n},
 * ...]}, read with the runtime's strict JSON reader (mprt.c); a node no
 * profile names keeps its estimate.
 *
 * The planner tries micro-batches of other sizes than the one profiled, so
 * a node's time is a function of the rows, t = a + b * rows:
 *   - several profiles of different sizes (--measured=p8.json,p16.json):
 *     a and b fitted by least squares over them, neither below 0;
 *   - one size: a forward or backward node's time in proportion to its rows
 *     (a = 0), an update's the same at any size (it runs once a step);
 *     pipeline.c plans only the sizes the profiles span, though, so this
 *     is for --dump=costs and a size none of them can match;
 *   - a profile without "rows" (older trainers): the times as they are.
 *
 * A file may also be a trace (./train --trace run.json, read by
 * emit/timeline.c): no node times, but the step a run measured, which
 * --dump=gantt draws under the prediction and --dump=sweep marks.
 */
#include "mpcc.h"
#include "mprt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct Entry {
    const char *name;
    int phase;
    double seconds;
    double rows;       /* of the profiled micro-batch, 0 if the file does not say */
} Entry;

struct Measured {
    Entry *e;
    int n;
    const Timeline **runs;   /* the traces given, for the pictures */
    int nruns;
};

/* Every reader error exits through error_file with the reader's message. */
static void ok(const char *path, int rc, const MprtJson *j)
{
    if (rc)
        error_file(path, "%s", j->err + strlen(path) + 2);   /* the message names the file */
}

static int phase_of(MprtJson *j, const char *s)
{
    if (strcmp(s, "forward") == 0)
        return PH_FORWARD;
    if (strcmp(s, "backward") == 0)
        return PH_BACKWARD;
    if (strcmp(s, "update") == 0)
        return PH_UPDATE;
    ok(j->path, mprt_json_bad(j, "a phase that is not forward, backward or update"), j);
    return -1;
}

static void node(MprtJson *j, Entry *e)
{
    ok(j->path, mprt_json_expect(j, '{'), j);
    e->name = NULL, e->phase = -1, e->seconds = -1;
    do {
        const char *key, *text;
        double v;
        ok(j->path, mprt_json_string(j, &key), j);
        ok(j->path, mprt_json_expect(j, ':'), j);
        if (strcmp(key, "name") == 0 || strcmp(key, "phase") == 0) {
            ok(j->path, mprt_json_string(j, &text), j);
            if (key[0] == 'n')
                e->name = text;
            else
                e->phase = phase_of(j, text);
        } else if (strcmp(key, "seconds") == 0 || strcmp(key, "calls") == 0) {
            ok(j->path, mprt_json_number(j, &v), j);
            if (key[0] == 's')
                e->seconds = v;
        } else {
            ok(j->path, mprt_json_bad(j, "an unknown key in a node"), j);
        }
    } while (mprt_json_eat(j, ','));
    ok(j->path, mprt_json_expect(j, '}'), j);
    if (!e->name || e->phase < 0 || !(e->seconds >= 0))
        ok(j->path, mprt_json_bad(j, "a node without name, phase and seconds"), j);
}

/* The file's nodes, appended to m; returns the first one's index. */
static int nodes(Arena *a, MprtJson *j, Measured *m)
{
    int first = m->n;
    ok(j->path, mprt_json_expect(j, '['), j);
    if (mprt_json_eat(j, ']'))
        return first;
    do {
        m->e = arena_grow(a, m->e, (size_t)m->n, (size_t)m->n + 1, sizeof(Entry));
        node(j, &m->e[m->n++]);
    } while (mprt_json_eat(j, ','));
    ok(j->path, mprt_json_expect(j, ']'), j);
    return first;
}

static int by_name(const void *x, const void *y)
{
    const Entry *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : a->phase - b->phase;
}

static int by_name_rows(const void *x, const void *y)
{
    const Entry *a = x, *b = y;
    int c = by_name(x, y);
    return c ? c : (a->rows > b->rows) - (a->rows < b->rows);
}

/* One profile file, its nodes appended to m. */
static void load_file(Arena *a, const char *path, Measured *m)
{
    size_t n;
    char *text = file_read_all(path, "the profile", &n);
    arena_defer(a, free, text);
    char *err = arena_alloc(a, 1024);
    MprtJson j = {path, (const unsigned char *)text, (const unsigned char *)text,
                  (const unsigned char *)text + n, arena_alloc(a, n + 1), 0, err, 1024,
                  "profile", "give the file ./train --profile wrote"};
    bool format = false, have_nodes = false;
    double rows = 0;
    int first = m->n;
    if (timeline_is_trace(text, n)) {   /* a trace: a run's step, not node times */
        m->runs = arena_grow(a, m->runs, (size_t)m->nruns, (size_t)m->nruns + 1,
                             sizeof *m->runs);
        m->runs[m->nruns++] = timeline_parse(a, path, text, n);
        return;
    }
    ok(path, mprt_json_expect(&j, '{'), &j);
    do {
        const char *key, *value;
        ok(path, mprt_json_string(&j, &key), &j);
        ok(path, mprt_json_expect(&j, ':'), &j);
        if (strcmp(key, "nodes") == 0) {
            first = nodes(a, &j, m);
            have_nodes = true;
            continue;
        }
        if (strcmp(key, "rows") == 0) {
            ok(path, mprt_json_number(&j, &rows), &j);
            if (!(rows >= 1))
                ok(path, mprt_json_bad(&j, "rows that are not a positive count"), &j);
            continue;
        }
        if (strcmp(key, "format") != 0 && strcmp(key, "model") != 0)
            ok(path, mprt_json_bad(&j, "an unknown key"), &j);
        ok(path, mprt_json_string(&j, &value), &j);
        format |= key[0] == 'f' && strcmp(value, "mpcc-profile") == 0;
    } while (mprt_json_eat(&j, ','));
    ok(path, mprt_json_expect(&j, '}'), &j);
    mprt_json_ws(&j);
    if (j.p != j.end || !format || !have_nodes)
        error_file(path, "not a profile from ./train --profile (no \"format\": "
                   "\"mpcc-profile\" and \"nodes\") nor a trace from ./train --trace; give "
                   "a file one of them wrote");
    for (int i = first; i < m->n; i++)
        m->e[i].rows = rows;
}

const Timeline *const *measured_runs(const Measured *m, int *n)
{
    *n = m ? m->nruns : 0;
    return m ? m->runs : NULL;
}

/* --measured=FILE[,FILE...] */
Measured *measured_load(Arena *a, const char *paths)
{
    if (!paths)
        return NULL;
    Measured *m = arena_alloc(a, sizeof *m);
    char *copy = arena_strdup(a, paths);
    for (char *p = strtok(copy, ","); p; p = strtok(NULL, ","))
        load_file(a, p, m);
    if (m->n)   /* traces alone leave no entries, and e NULL: not qsort's to take */
        qsort(m->e, (size_t)m->n, sizeof *m->e, by_name_rows);
    return m;
}

/* t = a + b * rows by least squares over the points [e, e + n), neither
 * coefficient below zero. */
static double fitted(const Entry *e, int n, double rows)
{
    double sr = 0, st = 0, srr = 0, srt = 0;
    for (int i = 0; i < n; i++)
        sr += e[i].rows, st += e[i].seconds, srr += e[i].rows * e[i].rows,
        srt += e[i].rows * e[i].seconds;
    double det = n * srr - sr * sr;
    double b = det > 0 ? (n * srt - sr * st) / det : 0;
    b = b > 0 ? b : 0;
    double a = (st - b * sr) / n;
    if (a < 0) {   /* through the origin instead */
        a = 0;
        b = srr > 0 ? srt / srr : 0;
    }
    return a + b * rows;
}

bool measured_rows(const Measured *m, double *lo, double *hi)
{
    *lo = 0, *hi = 0;
    for (int i = 0; m && i < m->n; i++)
        if (m->e[i].rows > 0) {
            *lo = *lo > 0 && *lo < m->e[i].rows ? *lo : m->e[i].rows;
            *hi = *hi > m->e[i].rows ? *hi : m->e[i].rows;
        }
    return *lo > 0;
}

double measured_time(const Measured *m, const char *node, int phase, double rows)
{
    if (!m || !node || !m->n)   /* bsearch takes no NULL array, even empty */
        return -1;
    Entry key = {node, phase, 0, 0};
    const Entry *hit = bsearch(&key, m->e, (size_t)m->n, sizeof *m->e, by_name);
    if (!hit)
        return -1;
    const Entry *lo = hit, *hi = hit;
    while (lo > m->e && by_name(lo - 1, &key) == 0)
        lo--;
    while (hi + 1 < m->e + m->n && by_name(hi + 1, &key) == 0)
        hi++;
    int n = (int)(hi - lo) + 1;
    bool sizes = lo->rows > 0 && hi->rows > lo->rows;   /* sorted by rows: two sizes at least */
    if (sizes && rows > 0)
        return fitted(lo, n, rows);
    double mean = 0;
    for (const Entry *e = lo; e <= hi; e++)
        mean += e->seconds / n;
    if (rows > 0 && lo->rows > 0 && phase != PH_UPDATE)
        return mean * rows / lo->rows;   /* one size: in proportion to the rows */
    return mean;
}
