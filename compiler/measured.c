/* measured.c — per-node times from a previous run (./train --profile
 * prof.json), which replace the cost model's estimates (--measured), as
 * PipeDream plans from a profiling run.
 *
 * The file is the trainer's JSON: {"format": "mpcc-profile", "model": ...,
 * "nodes": [{"name": ..., "phase": "forward"|"backward"|"update",
 * "seconds": mean per call, "calls": n}, ...]}. A small strict JSON reader
 * walks it; a node the profile does not name keeps its estimate.
 */
#include "mpcc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct Entry {
    const char *name;
    int phase;
    double seconds;
} Entry;

struct Measured {
    Entry *e;
    int n;
};

typedef struct Reader {
    Arena *a;
    const char *path, *start, *p, *end;
} Reader;

static _Noreturn void bad(const Reader *r, const char *what)
{
    error_file(r->path, "not a profile from ./train --profile: %s at byte %ld", what,
               (long)(r->p - r->start));
}

static void skip_ws(Reader *r)
{
    while (r->p < r->end && strchr(" \t\r\n", *r->p))
        r->p++;
}

static bool take(Reader *r, char c)
{
    skip_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static void expect(Reader *r, char c)
{
    if (!take(r, c))
        bad(r, arena_printf(r->a, "expected '%c'", c));
}

static const char *string(Reader *r)
{
    expect(r, '"');
    char *out = arena_alloc(r->a, (size_t)(r->end - r->p) + 1), *w = out;
    while (r->p < r->end && *r->p != '"') {
        char c = *r->p++;
        if (c != '\\') {
            *w++ = c;
            continue;
        }
        if (r->p >= r->end)
            bad(r, "unterminated string");
        c = *r->p++;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (simple && c != 0) {
            *w++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
        } else if (c == 'u' && r->end - r->p >= 4) {
            char hex[5] = {r->p[0], r->p[1], r->p[2], r->p[3], 0};
            char *e;
            long v = strtol(hex, &e, 16);
            if (*e || v <= 0 || v > 0x7f)
                bad(r, "an escape mpcc does not write");
            *w++ = (char)v;
            r->p += 4;
        } else {
            bad(r, "a bad escape");
        }
    }
    if (!take(r, '"'))
        bad(r, "unterminated string");
    *w = 0;
    return out;
}

static double number(Reader *r)
{
    skip_ws(r);
    char *e;
    double v = strtod(r->p, &e);
    if (e == r->p || e > r->end)
        bad(r, "expected a number");
    r->p = e;
    return v;
}

static int phase_of(const Reader *r, const char *s)
{
    if (strcmp(s, "forward") == 0)
        return PH_FORWARD;
    if (strcmp(s, "backward") == 0)
        return PH_BACKWARD;
    if (strcmp(s, "update") == 0)
        return PH_UPDATE;
    bad(r, "a phase that is not forward, backward or update");
}

static void node(Reader *r, Entry *e)
{
    expect(r, '{');
    e->name = NULL, e->phase = -1, e->seconds = -1;
    do {
        const char *key = string(r);
        expect(r, ':');
        if (strcmp(key, "name") == 0)
            e->name = string(r);
        else if (strcmp(key, "phase") == 0)
            e->phase = phase_of(r, string(r));
        else if (strcmp(key, "seconds") == 0 || strcmp(key, "calls") == 0) {
            double v = number(r);
            if (key[0] == 's')
                e->seconds = v;
        } else
            bad(r, "an unknown key in a node");
    } while (take(r, ','));
    expect(r, '}');
    if (!e->name || e->phase < 0 || !(e->seconds >= 0))
        bad(r, "a node without name, phase and seconds");
}

static void nodes(Reader *r, Measured *m)
{
    expect(r, '[');
    if (take(r, ']'))
        return;
    do {
        m->e = arena_grow(r->a, m->e, (size_t)m->n, (size_t)m->n + 1, sizeof(Entry));
        node(r, &m->e[m->n++]);
    } while (take(r, ','));
    expect(r, ']');
}

static int by_name(const void *x, const void *y)
{
    const Entry *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : a->phase - b->phase;
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        error_file(path, "cannot open the profile: %s", strerror(errno));
    char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                error_file(path, "out of memory reading the profile");
            }
            buf = grown;
        }
        size_t got = fread(buf + *n, 1, cap - *n - 1, f);
        *n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[*n] = 0;
    return buf;
}

Measured *measured_load(Arena *a, const char *path, const Graph *g)
{
    (void)g;
    if (!path)
        return NULL;
    size_t n;
    char *text = read_all(path, &n);
    arena_defer(a, free, text);
    if (strlen(text) != n)
        error_file(path, "not a profile from ./train --profile: it holds a NUL byte");
    Reader r = {a, path, text, text, text + n};
    Measured *m = arena_alloc(a, sizeof *m);
    bool format = false, have_nodes = false;
    expect(&r, '{');
    do {
        const char *key = string(&r);
        expect(&r, ':');
        if (strcmp(key, "format") == 0)
            format = strcmp(string(&r), "mpcc-profile") == 0;
        else if (strcmp(key, "model") == 0)
            string(&r);
        else if (strcmp(key, "nodes") == 0)
            nodes(&r, m), have_nodes = true;
        else
            bad(&r, "an unknown key");
    } while (take(&r, ','));
    expect(&r, '}');
    skip_ws(&r);
    if (r.p != r.end || !format || !have_nodes)
        bad(&r, "not the trainer's profile format");
    qsort(m->e, (size_t)m->n, sizeof *m->e, by_name);
    return m;
}

double measured_time(const Measured *m, const char *node, int phase)
{
    if (!m || !node)
        return -1;
    Entry key = {node, phase, 0};
    const Entry *e = bsearch(&key, m->e, (size_t)m->n, sizeof *m->e, by_name);
    return e ? e->seconds : -1;
}
