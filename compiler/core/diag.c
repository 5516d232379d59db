/* diag.c — diagnostics: user errors in compiler style, internal bugs apart.
 *
 *   mpcc: model.onnx: node 'layer1/0/conv1' (Conv): error: ...
 *   mpcc: model.mp:12:7: error: ...
 *   mpcc: internal error at compiler/front/shapes.c:120: ...   (a bug in mpcc)
 *
 * Names from a model are escaped, so a diagnostic is always one line. A
 * DSL position (line > 0) in a file whose text was registered with
 * diag_source is followed by that source line and a caret under the column:
 *
 *   mpcc: model.mp:12:7: error: unknown name 'hh'; did you mean 'h'?
 *      12 |     y = hh @ w
 *         |         ^
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

jmp_buf *diag_jmp;
bool diag_quiet;
const char *diag_context;

enum { NAME_MAX_SHOWN = 160, SOURCE_LINE_SHOWN = 200 };

typedef struct Source {
    const char *file;
    const char *text;
    size_t n;
} Source;

static Source sources[8];
static int nsources;

void diag_source(const char *file, const char *text, size_t n)
{
    for (int i = 0; i < nsources; i++)
        if (sources[i].file == file || strcmp(sources[i].file, file) == 0) {
            sources[i] = (Source){file, text, n};
            return;
        }
    if (nsources < (int)(sizeof sources / sizeof sources[0]))
        sources[nsources++] = (Source){file, text, n};
    else
        sources[nsources - 1] = (Source){file, text, n};
}

void diag_forget_sources(void)
{
    nsources = 0;
}

/* The source line of loc and a caret under its column; tabs are kept so the
 * caret lines up, other control bytes print as '?'. */
static void put_source_line(FILE *f, const Loc *loc)
{
    const Source *src = NULL;
    for (int i = 0; i < nsources && loc->file; i++)
        if (strcmp(sources[i].file, loc->file) == 0)
            src = &sources[i];
    if (!src || loc->line <= 0)
        return;
    size_t at = 0;
    for (int line = 1; line < loc->line && at < src->n; at++)
        if (src->text[at] == '\n')
            line++;
    if (at >= src->n && loc->line > 1)
        return;
    size_t end = at;
    while (end < src->n && src->text[end] != '\n')
        end++;
    if (end - at > SOURCE_LINE_SHOWN)
        end = at + SOURCE_LINE_SHOWN;
    char text[SOURCE_LINE_SHOWN + 1], caret[SOURCE_LINE_SHOWN + 2];
    size_t k = 0;
    for (size_t i = at; i < end; i++) {
        unsigned char c = (unsigned char)src->text[i];
        text[k++] = c == '\t' || (c >= 0x20 && c != 0x7f) ? (char)c : '?';
    }
    while (k > 0 && (text[k - 1] == '\r' || text[k - 1] == ' '))
        k--;
    text[k] = 0;
    size_t col = loc->col > 0 ? (size_t)loc->col - 1 : 0;
    if (col > k)
        col = k;
    for (size_t i = 0; i < col; i++)
        caret[i] = text[i] == '\t' ? '\t' : ' ';
    caret[col] = '^';
    caret[col + 1] = 0;
    fprintf(f, "%5d | %s\n      | %s\n", loc->line, text, caret);
}

static void put_limited(FILE *f, const char *s)
{
    char buf[NAME_MAX_SHOWN * 4 + 8];
    size_t k = 0;
    char tmp[8];
    for (size_t i = 0; s[i] && i < NAME_MAX_SHOWN; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == '\'' || c == '"')
            snprintf(tmp, sizeof tmp, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        else
            tmp[0] = (char)c, tmp[1] = 0;
        for (char *t = tmp; *t; t++)
            buf[k++] = *t;
    }
    buf[k] = 0;
    fputs(buf, f);
    if (strlen(s) > NAME_MAX_SHOWN)
        fputs("...", f);
}

static void put_loc(FILE *f, const Loc *loc)
{
    fputs("mpcc: ", f);
    if (!loc)
        return;
    if (loc->file) {
        put_limited(f, loc->file);
        if (loc->line > 0)
            fprintf(f, ":%d:%d", loc->line, loc->col);
        fputs(": ", f);
    }
    if (loc->what && loc->line <= 0) {
        fprintf(f, "%s ", loc->what);
        if (loc->name && loc->name[0]) {
            fputc('\'', f);
            put_limited(f, loc->name);
            fputc('\'', f);
        } else if (loc->index >= 0) {
            fprintf(f, "#%d", (int)loc->index);
        }
        if (loc->op) {
            fputs(" (", f);
            put_limited(f, loc->op);
            fputc(')', f);
        }
        fputs(": ", f);
    }
}

/* The message itself may quote model names; keep it on one line. */
static void put_message(FILE *f, const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fputs(buf, f);
    fputc('\n', f);
}

static _Noreturn void fail(void)
{
    if (diag_jmp)
        longjmp(*diag_jmp, 1);
    exit(1);
}

static void vreport(const Loc *loc, const char *kind, const char *fmt, va_list ap)
{
    if (diag_quiet)
        return;
    put_loc(stderr, loc);
    fputs(kind, stderr);
    put_message(stderr, fmt, ap);
    if (loc && loc->line > 0)
        put_source_line(stderr, loc);
}

/* An error's message, then what the pass in progress adds (diag_context). */
static void verror(const Loc *loc, const char *fmt, va_list ap)
{
    if (!diag_context) {
        vreport(loc, "error: ", fmt, ap);
        return;
    }
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    report_at(loc, "%s; %s", buf, diag_context);
}

void error_at(const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(loc, fmt, ap);
    va_end(ap);
    fail();
}

void error_file(const char *file, const char *fmt, ...)
{
    Loc loc = {.file = file, .index = -1};
    va_list ap;
    va_start(ap, fmt);
    verror(&loc, fmt, ap);
    va_end(ap);
    fail();
}

void report_at(const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(loc, "error: ", fmt, ap);
    va_end(ap);
}

void warn_at(const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(loc, "warning: ", fmt, ap);
    va_end(ap);
}

void note_at(const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(loc, "note: ", fmt, ap);
    va_end(ap);
}

/* The diagnostics said once per run: FNV-1a hashes of where and what. A
 * pass that runs once per candidate plan says a thing once, not per plan. */
static bool first_time(const Loc *loc, const char *fmt, va_list ap)
{
    static uint64_t said[256];
    static int nsaid;
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    uint64_t h = 1469598103934665603ull;
    const char *parts[] = {loc && loc->file ? loc->file : "", loc && loc->name ? loc->name : "",
                           buf};
    for (int k = 0; k < 3; k++)
        for (const char *p = parts[k]; ; p++) {
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
            if (!*p)
                break;
        }
    for (int i = 0; i < nsaid; i++)
        if (said[i] == h)
            return false;
    if (nsaid < (int)(sizeof said / sizeof said[0]))
        said[nsaid++] = h;
    return true;
}

static void say_once(const Loc *loc, const char *kind, const char *fmt, va_list ap)
{
    if (diag_quiet)   /* not said: the run that is not quiet says it */
        return;
    va_list copy;
    va_copy(copy, ap);
    if (first_time(loc, fmt, copy))
        vreport(loc, kind, fmt, ap);
    va_end(copy);
}

void warn_once(const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_once(loc, "warning: ", fmt, ap);
    va_end(ap);
}

void note_once(const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_once(loc, "note: ", fmt, ap);
    va_end(ap);
}

void mpcc_die(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mpcc: internal error at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputs("\nmpcc: this is a bug in mpcc, not in your model; please report it "
          "with the model and the command line\n", stderr);
    va_end(ap);
    abort();
}

static void vreject(Arena *a, Reject *r, const Loc *loc, const char *fmt, va_list ap)
{
    if (r->why)
        return;
    r->loc = *loc;
    r->why = arena_vprintf(a, fmt, ap);
    r->alone = true;
}

bool reject(Arena *a, Reject *r, const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreject(a, r, loc, fmt, ap);
    va_end(ap);
    return false;
}

bool reject_file(Arena *a, Reject *r, const char *file, const char *fmt, ...)
{
    Loc loc = {.file = file, .index = -1};
    va_list ap;
    va_start(ap, fmt);
    vreject(a, r, &loc, fmt, ap);
    va_end(ap);
    return false;
}

void error_reject(const Reject *r)
{
    MPCC_ASSERT(r->why);
    if (r->alone)
        error_at(&r->loc, "%s", r->why);
    error_at(&r->loc, "no schedule can run: %s", r->why);
}
