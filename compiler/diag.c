/* diag.c — diagnostics: user errors in compiler style, internal bugs apart.
 *
 *   mpcc: model.onnx: node 'layer1/0/conv1' (Conv): error: ...
 *   mpcc: model.mp:12:7: error: ...
 *   mpcc: internal error at compiler/shapes.c:120: ...   (a bug in mpcc)
 *
 * Names from a model are escaped, so a diagnostic is always one line.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

jmp_buf *diag_jmp;
bool diag_quiet;

enum { NAME_MAX_SHOWN = 160 };

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
    if (loc->what) {
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
}

void error_at(const Loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(loc, "error: ", fmt, ap);
    va_end(ap);
    fail();
}

void error_file(const char *file, const char *fmt, ...)
{
    Loc loc = {.file = file, .index = -1};
    va_list ap;
    va_start(ap, fmt);
    vreport(&loc, "error: ", fmt, ap);
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
