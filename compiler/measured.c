/* measured.c — per-node times from a previous run (./train --profile
 * prof.json), which replace the cost model's estimates (--measured), as
 * PipeDream plans from a profiling run.
 *
 * The file is the trainer's JSON: {"format": "mpcc-profile", "model": ...,
 * "nodes": [{"name": ..., "phase": "forward"|"backward"|"update",
 * "seconds": mean per call, "calls": n}, ...]}, read with the runtime's
 * strict JSON reader (mprt.c); a node the profile does not name keeps its
 * estimate.
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
} Entry;

struct Measured {
    Entry *e;
    int n;
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

static void nodes(Arena *a, MprtJson *j, Measured *m)
{
    ok(j->path, mprt_json_expect(j, '['), j);
    if (mprt_json_eat(j, ']'))
        return;
    do {
        m->e = arena_grow(a, m->e, (size_t)m->n, (size_t)m->n + 1, sizeof(Entry));
        node(j, &m->e[m->n++]);
    } while (mprt_json_eat(j, ','));
    ok(j->path, mprt_json_expect(j, ']'), j);
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

Measured *measured_load(Arena *a, const char *path)
{
    if (!path)
        return NULL;
    size_t n;
    char *text = read_all(path, &n);
    arena_defer(a, free, text);
    char *err = arena_alloc(a, 1024);
    MprtJson j = {path, (const unsigned char *)text, (const unsigned char *)text,
                  (const unsigned char *)text + n, arena_alloc(a, n + 1), 0, err, 1024,
                  "profile", "give the file ./train --profile wrote"};
    Measured *m = arena_alloc(a, sizeof *m);
    bool format = false, have_nodes = false;
    ok(path, mprt_json_expect(&j, '{'), &j);
    do {
        const char *key, *value;
        ok(path, mprt_json_string(&j, &key), &j);
        ok(path, mprt_json_expect(&j, ':'), &j);
        if (strcmp(key, "nodes") == 0) {
            nodes(a, &j, m);
            have_nodes = true;
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
                   "\"mpcc-profile\" and \"nodes\"); give the file ./train --profile wrote");
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
