/* trace.c — a step's timeline read back from Chrome trace JSON: the
 * prediction mpcc --trace writes, or what a trainer measured (./train
 * --trace), for gantt.c to draw (--gantt-from, --measured).
 *
 * Both writers use the same events: a process per device ("M"
 * process_name), a thread per stream (tid 0 compute, 1 send, 2
 * send-back), a complete event ("X") per operation named "forward s0 mb1"
 * or "copy NAME mb1 to s1" (under --offload also "offload NAME mb1 s0",
 * "fetch ..", "weight in NAME w0 s0", "weight out .."; a trainer's without
 * NAME), a flow ("s" then "f") from each copy to the
 * device that receives it, a "memory" counter per device, and an
 * "otherData" object saying what was run (schedule, micro-batches, the
 * mean step). Keys and events the drawing does not need are skipped, so
 * a trace another tool saved again still reads.
 */
#include "mpcc.h"
#include "mprt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Reader {
    Arena *a;
    MprtJson j;
    Timeline *tl;
    int *copy_of_flow;      /* flow id -> the copy op it leaves, -1 none */
    int nflows;
    int last_copy;          /* the copy op read last, which the next "s" leaves */
} Reader;

static void ok(Reader *r, int rc)
{
    if (rc)
        error_file(r->j.path, "%s", r->j.err + strlen(r->j.path) + 2);
}

static _Noreturn void bad(Reader *r, const char *what)
{
    ok(r, mprt_json_bad(&r->j, what));
    unreachable();
}

static bool literal(Reader *r, const char *word)
{
    size_t n = strlen(word);
    mprt_json_ws(&r->j);
    if ((size_t)(r->j.end - r->j.p) >= n && memcmp(r->j.p, word, n) == 0) {
        r->j.p += n;
        return true;
    }
    return false;
}

/* Any value, read and dropped. */
static void skip(Reader *r, int depth)
{
    const char *s;
    double v;
    if (depth > 64)
        bad(r, "values nested too deep");
    mprt_json_ws(&r->j);
    if (r->j.p < r->j.end && *r->j.p == '"') {
        ok(r, mprt_json_string(&r->j, &s));
    } else if (mprt_json_eat(&r->j, '{')) {
        if (mprt_json_eat(&r->j, '}'))
            return;
        do {
            ok(r, mprt_json_string(&r->j, &s));
            ok(r, mprt_json_expect(&r->j, ':'));
            skip(r, depth + 1);
        } while (mprt_json_eat(&r->j, ','));
        ok(r, mprt_json_expect(&r->j, '}'));
    } else if (mprt_json_eat(&r->j, '[')) {
        if (mprt_json_eat(&r->j, ']'))
            return;
        do
            skip(r, depth + 1);
        while (mprt_json_eat(&r->j, ','));
        ok(r, mprt_json_expect(&r->j, ']'));
    } else if (!literal(r, "true") && !literal(r, "false") && !literal(r, "null")) {
        ok(r, mprt_json_number(&r->j, &v));
    }
}

/* One event's fields; what an event lacks stays at its default. */
typedef struct Event {
    const char *name, *ph, *arg_name;
    double pid, tid, ts, dur, id, bytes;
} Event;

static void event_args(Reader *r, Event *e)
{
    ok(r, mprt_json_expect(&r->j, '{'));
    if (mprt_json_eat(&r->j, '}'))
        return;
    do {
        const char *key;
        ok(r, mprt_json_string(&r->j, &key));
        ok(r, mprt_json_expect(&r->j, ':'));
        if (strcmp(key, "name") == 0)
            ok(r, mprt_json_string(&r->j, &e->arg_name));
        else if (strcmp(key, "bytes") == 0)
            ok(r, mprt_json_number(&r->j, &e->bytes));
        else
            skip(r, 1);
    } while (mprt_json_eat(&r->j, ','));
    ok(r, mprt_json_expect(&r->j, '}'));
}

/* A flow's id: a number, or a string as Chrome writes them ("0x1f"). */
static void flow_id(Reader *r, Event *e)
{
    mprt_json_ws(&r->j);
    if (r->j.p >= r->j.end || *r->j.p != '"') {
        ok(r, mprt_json_number(&r->j, &e->id));
        return;
    }
    const char *text;
    char *end;
    ok(r, mprt_json_string(&r->j, &text));
    long long v = strtoll(text, &end, 0);
    e->id = *text && !*end && v >= 0 ? (double)v : -1;
}

static void event_read(Reader *r, Event *e)
{
    *e = (Event){.name = "", .ph = "", .pid = -1, .tid = 0, .id = -1, .dur = -1, .bytes = -1};
    ok(r, mprt_json_expect(&r->j, '{'));
    if (mprt_json_eat(&r->j, '}'))
        return;
    do {
        const char *key;
        ok(r, mprt_json_string(&r->j, &key));
        ok(r, mprt_json_expect(&r->j, ':'));
        double *num = strcmp(key, "pid") == 0 ? &e->pid : strcmp(key, "tid") == 0 ? &e->tid
                      : strcmp(key, "ts") == 0 ? &e->ts : strcmp(key, "dur") == 0 ? &e->dur
                      : strcmp(key, "id") == 0 ? &e->id : NULL;
        if (num == &e->id)
            flow_id(r, e);
        else if (num)
            ok(r, mprt_json_number(&r->j, num));
        else if (strcmp(key, "name") == 0)
            ok(r, mprt_json_string(&r->j, &e->name));
        else if (strcmp(key, "ph") == 0)
            ok(r, mprt_json_string(&r->j, &e->ph));
        else if (strcmp(key, "args") == 0)
            event_args(r, e);
        else
            skip(r, 1);
    } while (mprt_json_eat(&r->j, ','));
    ok(r, mprt_json_expect(&r->j, '}'));
}

enum { MAX_TRACE_DEVICES = 4096, MAX_TRACE_INDEX = 1 << 20 };

/* The longest time a trace may hold, in microseconds (11 days): past it,
 * or at infinity, the drawing's scale and time axis would not be finite. */
#define MAX_TRACE_US 1e12

/* A time in microseconds, as both writers write it ("%.3f"), in seconds
 * read to the nanosecond: a step is then 0 or 1 ns at least, never so short
 * that the drawing's pixels per second overflow. False if out of range. */
static bool trace_time(double us, double *seconds)
{
    if (!(fabs(us) <= MAX_TRACE_US))
        return false;
    *seconds = round(us * 1e3) * 1e-9;
    return true;
}

static int device_of(Reader *r, double pid)
{
    if (!(pid >= 0 && pid < MAX_TRACE_DEVICES && pid == floor(pid)))
        bad(r, "an event whose pid is not a device number");
    Timeline *tl = r->tl;
    int d = (int)pid;
    if (d >= tl->ndev) {
        tl->devices = arena_grow(r->a, tl->devices, (size_t)tl->ndev, (size_t)d + 1,
                                 sizeof *tl->devices);
        tl->memory = arena_grow(r->a, tl->memory, (size_t)tl->ndev, (size_t)d + 1,
                                sizeof *tl->memory);
        for (int k = tl->ndev; k <= d; k++)
            tl->devices[k] = arena_printf(r->a, "device %d", k);
        tl->ndev = d + 1;
    }
    return d;
}

/* Stage and micro-batch numbers that counting them (summarise) cannot
 * overflow. */
static bool op_numbers(const TlOp *op)
{
    return op->stage >= 0 && op->stage < MAX_TRACE_INDEX && op->mb >= 0 &&
           op->mb < MAX_TRACE_INDEX;
}

/* A copy to host memory or back: "offload NAME mb1 s0" and "fetch NAME mb1
 * s0" (an activation), "weight in NAME w0 s0" and "weight out NAME w0 s0"
 * (an offloaded weight's window, kept as its micro-batch); a trainer's
 * leave NAME out. */
static bool host_copy_name(const char *name, const char *last, TlOp *op)
{
    static const char *const kinds[] = {"offload ", "fetch ", "weight in ", "weight out "};
    const char *prev = last - 1;
    while (prev > name && *prev != ' ')
        prev--;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t n = strlen(kinds[k]);
        if (strncmp(name, kinds[k], n) == 0 && prev >= name + n - 1)
            return sscanf(prev, kinds[k][0] == 'w' ? " w%d" : " mb%d", &op->mb) == 1 &&
                   sscanf(last, " s%d", &op->stage) == 1 && op_numbers(op);
    }
    return false;
}

/* "forward s0 mb1", "backward ..", "wgrad ..", "update s0 mb0", "sum s1
 * b0" (a bucket summed over the replicas), "copy NAME mb1 to s1", or a copy to host memory and back (NAME may hold
 * anything: read from the end). */
static bool op_name(const char *name, TlOp *op)
{
    static const char *const kinds[] = {"forward", "backward", "wgrad", "update"};
    for (int k = 0; k < ACT_KINDS; k++) {
        size_t n = strlen(kinds[k]);
        if (strncmp(name, kinds[k], n) == 0 &&
            sscanf(name + n, " s%d mb%d", &op->stage, &op->mb) == 2) {
            op->act = k, op->copy = false;
            return op_numbers(op);
        }
    }
    if (sscanf(name, "sum s%d b%d", &op->stage, &op->mb) == 2) {
        op->act = TL_SUM, op->copy = false;
        return op_numbers(op);
    }
    const char *to = strrchr(name, ' '), *mb = NULL;
    op->copy = true;
    if (to && strncmp(name, "copy ", 5) != 0)
        return host_copy_name(name, to, op);
    for (const char *p = name; to && p < to - 3; p++)
        if (strncmp(p, " mb", 3) == 0)
            mb = p;
    return mb && strncmp(to - 3, " to", 3) == 0 && sscanf(mb, " mb%d", &op->mb) == 1 &&
           sscanf(to, " s%d", &op->stage) == 1 && op_numbers(op);
}

static void complete(Reader *r, const Event *e)
{
    TlOp op = {.dst_dev = -1};
    if (!op_name(e->name, &op))
        bad(r, arena_printf(r->a, "an operation named \"%s\", not like \"forward s0 mb1\" or "
                            "\"copy NAME mb1 to s1\" (the event before this point)",
                            str_escaped(r->a, e->name, 60)));
    if (!(e->tid >= 0 && e->tid < STREAMS_PER_DEV && e->tid == floor(e->tid)) ||
        !(e->dur >= 0 && e->dur <= MAX_TRACE_US) || !trace_time(e->ts, &op.start) ||
        !trace_time(e->ts + e->dur, &op.end))
        bad(r, "an operation without a stream (tid 0 to 3), a start and a duration (in us, "
            "up to 1e12)");
    op.stream = device_of(r, e->pid) * STREAMS_PER_DEV + (int)e->tid;
    Timeline *tl = r->tl;
    tl->ops = arena_grow(r->a, tl->ops, (size_t)tl->nops, (size_t)tl->nops + 1, sizeof op);
    tl->ops[tl->nops++] = op;
    r->last_copy = op.copy ? tl->nops - 1 : -1;
}

/* A flow's start leaves the copy just read; its end names the receiver. */
static void flow(Reader *r, const Event *e)
{
    /* mpcc's writers number a flow by its copy's operation: an id far past
     * the operations read so far is no trace of theirs, and would only
     * cost memory here */
    if (!(e->id >= 0 && e->id == floor(e->id)))
        bad(r, "a flow event without a whole-number id");
    if (e->id > 4.0 * r->tl->nops + 1024)
        bad(r, "a flow event whose id is far past the operations before it");
    int id = (int)e->id;
    if (id >= r->nflows) {
        r->copy_of_flow = arena_grow(r->a, r->copy_of_flow, (size_t)r->nflows, (size_t)id + 1,
                                     sizeof(int));
        for (int k = r->nflows; k <= id; k++)
            r->copy_of_flow[k] = -1;
        r->nflows = id + 1;
    }
    if (e->ph[0] == 's')
        r->copy_of_flow[id] = r->last_copy;
    else if (r->copy_of_flow[id] >= 0) {
        int d = device_of(r, e->pid);
        r->tl->ops[r->copy_of_flow[id]].dst_dev = d;
    }
}

static void event(Reader *r)
{
    Event e;
    event_read(r, &e);
    if (strcmp(e.ph, "X") == 0) {
        complete(r, &e);
    } else if (strcmp(e.ph, "s") == 0 || strcmp(e.ph, "f") == 0) {
        flow(r, &e);
    } else if (strcmp(e.ph, "M") == 0 && strcmp(e.name, "process_name") == 0 && e.arg_name) {
        int d = device_of(r, e.pid);   /* may grow the arrays: index after */
        r->tl->devices[d] = e.arg_name;
    } else if (strcmp(e.ph, "C") == 0 && strcmp(e.name, "memory") == 0 && e.bytes >= 0 &&
               isfinite(e.bytes)) {
        int d = device_of(r, e.pid);
        r->tl->memory[d] = e.bytes;
    } else if (strcmp(e.ph, "i") == 0 && strcmp(e.name, "step") == 0) {
        double t;
        if (trace_time(e.ts, &t))
            r->tl->step = fmax(r->tl->step, t);
    }
}

static void events(Reader *r)
{
    ok(r, mprt_json_expect(&r->j, '['));
    if (mprt_json_eat(&r->j, ']'))
        return;
    do
        event(r);
    while (mprt_json_eat(&r->j, ','));
    ok(r, mprt_json_expect(&r->j, ']'));
}

/* "otherData": {"source": .., "schedule": .., "microbatches": M,
 * "mean_step_ms": ..}, as mpcc and its trainers write it. */
static void other_data(Reader *r)
{
    Timeline *tl = r->tl;
    ok(r, mprt_json_expect(&r->j, '{'));
    if (mprt_json_eat(&r->j, '}'))
        return;
    do {
        const char *key;
        double v;
        ok(r, mprt_json_string(&r->j, &key));
        ok(r, mprt_json_expect(&r->j, ':'));
        if (strcmp(key, "source") == 0) {
            ok(r, mprt_json_string(&r->j, &tl->source));
        } else if (strcmp(key, "schedule") == 0) {
            ok(r, mprt_json_string(&r->j, &tl->schedule));
        } else if (strcmp(key, "microbatches") == 0) {
            ok(r, mprt_json_number(&r->j, &v));
            if (!(v >= 1 && v <= 1 << 20 && v == floor(v)))
                bad(r, "a micro-batch count that is not a whole number from 1");
            tl->M = (int)v;
        } else if (strcmp(key, "mean_step_ms") == 0) {
            ok(r, mprt_json_number(&r->j, &v));
            if (!(v >= 0 && v < 1e12))
                bad(r, "a mean step that is not a time in ms");
            tl->mean_step = v * 1e-3;
        } else {
            skip(r, 1);
        }
    } while (mprt_json_eat(&r->j, ','));
    ok(r, mprt_json_expect(&r->j, '}'));
}

/* The step's length, its stages and its bubble, from the operations. */
static void summarise(Timeline *tl)
{
    double busy = 0;
    for (int i = 0; i < tl->nops; i++) {
        const TlOp *op = &tl->ops[i];
        tl->step = fmax(tl->step, op->end);
        tl->nstages = op->stage + 1 > tl->nstages ? op->stage + 1 : tl->nstages;
        if (!op->copy)
            busy += op->end - op->start;
    }
    tl->bubble = tl->step > 0 && tl->ndev ? 1 - busy / (tl->ndev * tl->step) : 0;
}

Timeline *timeline_parse(Arena *a, const char *path, const char *text, size_t n)
{
    Reader r = {.a = a, .last_copy = -1};
    r.j = (MprtJson){path, (const unsigned char *)text, (const unsigned char *)text,
                     (const unsigned char *)text + n, arena_alloc(a, n + 1), 0,
                     arena_alloc(a, 1024), 1024, "trace",
                     "give a file ./train --trace or mpcc --trace wrote"};
    r.tl = arena_alloc(a, sizeof *r.tl);
    r.tl->file = path;
    r.tl->source = "measured";
    bool have_events = false;
    ok(&r, mprt_json_expect(&r.j, '{'));
    do {
        const char *key;
        ok(&r, mprt_json_string(&r.j, &key));
        ok(&r, mprt_json_expect(&r.j, ':'));
        if (strcmp(key, "traceEvents") == 0)
            events(&r), have_events = true;
        else if (strcmp(key, "otherData") == 0)
            other_data(&r);
        else
            skip(&r, 1);
    } while (mprt_json_eat(&r.j, ','));
    ok(&r, mprt_json_expect(&r.j, '}'));
    mprt_json_ws(&r.j);
    if (r.j.p != r.j.end)
        bad(&r, "text after the trace");
    if (!have_events || r.tl->nops == 0)
        error_file(path, "a trace without operations (no \"traceEvents\" of phase \"X\"); %s",
                   r.j.hint);
    summarise(r.tl);
    return r.tl;
}

Timeline *timeline_read(Arena *a, const char *path)
{
    size_t n;
    char *text = file_read_all(path, "the trace", &n);
    arena_defer(a, free, text);
    return timeline_parse(a, path, text, n);
}

/* ---- the plan's step, as the simulator predicts it ---- */

static void plan_op(const Plan *p, const PlanOp *op, TlOp *t)
{
    *t = (TlOp){.stream = op->stream, .start = op->start, .end = op->end, .dst_dev = -1};
    if (op->kind == OPK_COPY) {
        t->copy = true;
        t->stage = p->bufs[op->dst].stage;
        t->mb = op->mb;
        t->dst_dev = p->bufs[op->dst].dev;
    } else {
        t->act = op->kind == OPK_SUM ? TL_SUM : op->act.kind;
        t->stage = op->act.stage;
        t->mb = op->kind == OPK_SUM ? op->mb : op->act.mb;
    }
}

Timeline *timeline_of_plan(const Pipeline *pl)
{
    Arena *a = pl->g->arena;
    const Plan *p = pl->plan;
    Timeline *tl = arena_alloc(a, sizeof *tl);
    *tl = (Timeline){.source = "predicted", .schedule = schedule_name(pl->sc->kind),
                     .M = pl->sc->M, .nstages = pl->st->n, .ndev = pl->ds.n,
                     .step = p->step_time, .bubble = p->bubble, .nops = p->nops};
    tl->devices = arena_array(a, (size_t)tl->ndev, sizeof *tl->devices);
    tl->memory = arena_array(a, (size_t)tl->ndev, sizeof *tl->memory);
    double *capacity = arena_array(a, (size_t)tl->ndev, sizeof *capacity);
    for (int d = 0; d < tl->ndev; d++) {
        tl->devices[d] = pl->ds.d[d].name;
        tl->memory[d] = (double)p->arena_bytes[d];
        capacity[d] = (double)pl->ds.d[d].prof.memory;
    }
    tl->capacity = capacity;
    tl->ops = arena_array(a, (size_t)p->nops, sizeof *tl->ops);
    for (int i = 0; i < p->nops; i++)
        plan_op(p, &p->ops[i], &tl->ops[i]);
    return tl;
}

/* Whether a JSON document's top-level object has the key "traceEvents":
 * a trace rather than a profile, whatever order its keys come in. Only
 * strings and nesting are followed; the document is checked when read. */
bool timeline_is_trace(const char *text, size_t n)
{
    static const char key[] = "\"traceEvents\"";
    int depth = 0;
    bool want_key = false;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (c == '"') {
            size_t start = i;
            for (i++; i < n && text[i] != '"'; i++)
                i += text[i] == '\\';
            if (depth == 1 && want_key && i - start + 1 == sizeof key - 1 &&
                memcmp(text + start, key, sizeof key - 1) == 0)
                return true;
            want_key = false;
        } else if (c == '{' || c == '[') {
            depth++;
            want_key = c == '{';
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',') {
            want_key = depth == 1;
        }
    }
    return false;
}
