/* mprt.c — what every runtime file shares: the dtype table, freeing arrays,
 * the error message helper, shape sizes with overflow checks, and files
 * written atomically (PATH.tmp, fsync, rename). */
#include "mprt.h"

static const struct {
    size_t size;
    const char *name;
} mprt_dtypes[] = {
    [MPRT_F32] = {4, "float32"},
    [MPRT_F64] = {8, "float64"},
    [MPRT_I64] = {8, "int64"},
    [MPRT_I32] = {4, "int32"},
    [MPRT_U8] = {1, "uint8"},
    [MPRT_BOOL] = {1, "bool"},
    [MPRT_F16] = {2, "float16"},
    [MPRT_BF16] = {2, "bfloat16"},
    [MPRT_I16] = {2, "int16"},
    [MPRT_I8] = {1, "int8"},
};
_Static_assert(sizeof mprt_dtypes / sizeof mprt_dtypes[0] == MPRT_DTYPE_COUNT,
               "mprt_dtypes needs one row per MprtDType");

size_t mprt_dtype_size(MprtDType t)
{
    return (unsigned)t < MPRT_DTYPE_COUNT ? mprt_dtypes[t].size : 0;
}

const char *mprt_dtype_name(MprtDType t)
{
    return (unsigned)t < MPRT_DTYPE_COUNT ? mprt_dtypes[t].name : "invalid";
}

void mprt_array_free(MprtArray *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* Formats the message into err (when there is room) and returns 1, so that
 * callers can write `return mprt_errf(err, errlen, ...)`. */
int mprt_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return 1;
}

/* *out = product(shape) * size of t. Returns 0, or 1 for a bad dtype or
 * rank, 2 for a negative dimension, 3 when the size overflows. */
int mprt_shape_nbytes(MprtDType t, int rank, const int64_t *shape, size_t *out)
{
    size_t size = mprt_dtype_size(t);
    if (!size || rank < 0 || rank > MPRT_MAX_RANK)
        return 1;
    uint64_t limit = SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX;
    uint64_t n = size;
    int zero = 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return 2;
        zero |= shape[i] == 0;
    }
    for (int i = 0; i < rank && !zero; i++) {
        if ((uint64_t)shape[i] > limit / n)
            return 3;
        n *= (uint64_t)shape[i];
    }
    *out = zero ? 0 : (size_t)n;
    return 0;
}

int mprt_out_open(MprtOut *o, const char *path, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {   /* in place */
        if (!(o->fp = fopen(path, "wb")))
            return mprt_errf(err, errlen, "%s: cannot open for writing: %s", path,
                             strerror(errno));
        return 0;
    }
    size_t len = strlen(path);
    o->tmp = malloc(len + 5);
    if (!o->tmp)
        return mprt_errf(err, errlen, "%s: out of memory", path);
    memcpy(o->tmp, path, len);
    memcpy(o->tmp + len, ".tmp", 5);
    /* A PATH.tmp left by a crash is replaced, never followed if a link;
     * whatever unlink cannot remove, O_EXCL reports. */
    (void)unlink(o->tmp);
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 || !(o->fp = fdopen(fd, "wb"))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        mprt_errf(err, errlen, "%s: cannot create '%s': %s; check that the directory exists "
                  "and is writable", path, o->tmp, strerror(e));
        free(o->tmp);
        o->tmp = NULL;
        return 1;
    }
    return 0;
}

int mprt_out_write(MprtOut *o, const void *p, size_t n, char *err, size_t errlen)
{
    if (n && fwrite(p, 1, n, o->fp) != n) {
        mprt_errf(err, errlen, "%s: cannot write '%s': %s; check the free disk space (the "
                  "old file, if any, is unchanged)", o->path, o->tmp, strerror(errno));
        mprt_out_abort(o);
        return 1;
    }
    return 0;
}

/* fsyncs the directory so that the rename itself survives a crash; best
 * effort, since some file systems refuse fsync on directories. */
static void mprt_sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

int mprt_out_commit(MprtOut *o, char *err, size_t errlen)
{
    const char *what = NULL;
    if (!o->tmp) {   /* written in place */
        int bad = fclose(o->fp) != 0;
        o->fp = NULL;
        return bad ? mprt_errf(err, errlen, "%s: cannot write: %s", o->path, strerror(errno)) : 0;
    }
    if (fflush(o->fp) != 0)
        what = "write";
    else if (fsync(fileno(o->fp)) != 0)
        what = "sync";
    int e = errno;
    int closed = fclose(o->fp);
    o->fp = NULL;
    if (!what && closed != 0) {
        what = "close";
        e = errno;
    }
    if (!what && rename(o->tmp, o->path) != 0) {
        e = errno;
        mprt_errf(err, errlen, "%s: cannot rename '%s' over it: %s; the old file, if any, "
                  "is unchanged", o->path, o->tmp, strerror(e));
        mprt_out_abort(o);
        return 1;
    }
    if (what) {
        mprt_errf(err, errlen, "%s: cannot %s '%s': %s; check the free disk space (the old "
                  "file, if any, is unchanged)", o->path, what, o->tmp, strerror(e));
        mprt_out_abort(o);
        return 1;
    }
    mprt_sync_dir(o->path);
    free(o->tmp);
    o->tmp = NULL;
    return 0;
}

/* Drops a write in progress: closes and removes PATH.tmp. */
void mprt_out_abort(MprtOut *o)
{
    if (o->fp)
        fclose(o->fp);
    o->fp = NULL;
    if (o->tmp)
        unlink(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
}

// --- JSON: the strict reader and the string writer (see mprt.h) ---

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
size_t mprt_utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (!len || len > n || s[0] > 0xf4)
        return 0;
    uint32_t cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

int mprt_json_bad(MprtJson *ps, const char *what)
{
    char near[48];
    size_t k = 0;
    const unsigned char *q = ps->p > ps->s + 16 ? ps->p - 16 : ps->s;
    for (; q < ps->end && k < 40; q++)
        near[k++] = (*q >= 0x20 && *q < 0x7f) ? (char)*q : '?';
    near[k] = 0;
    return mprt_errf(ps->err, ps->errlen, "%s: malformed %s: %s at byte %zu, near \"%s\"; %s",
                     ps->path, ps->what, what, (size_t)(ps->p - ps->s), near, ps->hint);
}

void mprt_json_ws(MprtJson *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' ||
                               *ps->p == '\r'))
        ps->p++;
}

int mprt_json_eat(MprtJson *ps, char c)
{
    mprt_json_ws(ps);
    if (ps->p < ps->end && *ps->p == (unsigned char)c) {
        ps->p++;
        return 1;
    }
    return 0;
}

int mprt_json_expect(MprtJson *ps, char c)
{
    if (mprt_json_eat(ps, c))
        return 0;
    char what[24];
    snprintf(what, sizeof what, "expected '%c'", c);
    return mprt_json_bad(ps, what);
}

static int mprt_json_hex4(MprtJson *ps, uint32_t *v)
{
    *v = 0;
    if (ps->end - ps->p < 4)
        return mprt_json_bad(ps, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        int c = *ps->p++, d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                               : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return mprt_json_bad(ps, "bad hex digit in a \\u escape");
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A \uXXXX escape (the "\u" already read), surrogate pairs joined, as
 * UTF-8 appended to out. */
static int mprt_json_unicode(MprtJson *ps, char *out, size_t *k)
{
    uint32_t cp, lo;
    if (mprt_json_hex4(ps, &cp))
        return 1;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return mprt_json_bad(ps, "lone low surrogate in a \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
            return mprt_json_bad(ps, "high surrogate not followed by a low one");
        ps->p += 2;
        if (mprt_json_hex4(ps, &lo))
            return 1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return mprt_json_bad(ps, "high surrogate not followed by a low one");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp == 0)
        return mprt_json_bad(ps, "\\u0000 in a string is not supported");
    unsigned char *u = (unsigned char *)out + *k;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        *k += 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xc0 | cp >> 6);
        u[1] = (unsigned char)(0x80 | (cp & 0x3f));
        *k += 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | cp >> 12);
        u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        *k += 3;
    } else {
        u[0] = (unsigned char)(0xf0 | cp >> 18);
        u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        *k += 4;
    }
    return 0;
}

/* A JSON string, decoded into the pool (decoding never grows the text,
 * and the closing quote leaves room for the NUL). */
int mprt_json_string(MprtJson *ps, const char **out)
{
    mprt_json_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return mprt_json_bad(ps, "expected a string");
    ps->p++;
    char *s = ps->pool + ps->pooled;
    size_t k = 0;
    for (;;) {
        if (ps->p >= ps->end)
            return mprt_json_bad(ps, "unterminated string");
        unsigned char c = *ps->p;
        if (c == '"')
            break;
        if (c < 0x20)
            return mprt_json_bad(ps, "unescaped control character in a string");
        if (c != '\\') {
            size_t len = mprt_utf8_len(ps->p, (size_t)(ps->end - ps->p));
            if (!len)
                return mprt_json_bad(ps, "invalid UTF-8 in a string");
            memcpy(s + k, ps->p, len);
            k += len;
            ps->p += len;
            continue;
        }
        if (ps->end - ps->p < 2)
            return mprt_json_bad(ps, "unterminated string");
        c = ps->p[1];
        ps->p += 2;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *hit = c ? strchr(from, c) : NULL;
        if (hit)
            s[k++] = to[hit - from];
        else if (c == 'u') {
            if (mprt_json_unicode(ps, s, &k))
                return 1;
        } else {
            ps->p -= 2;
            return mprt_json_bad(ps, "bad escape in a string");
        }
    }
    ps->p++;
    s[k] = 0;
    ps->pooled += k + 1;
    *out = s;
    return 0;
}

/* A JSON number (the grammar's characters, then strtod on a copy, so the
 * document need not end in a NUL). */
int mprt_json_number(MprtJson *j, double *v)
{
    mprt_json_ws(j);
    char buf[64];
    size_t k = 0;
    while (j->p + k < j->end && k + 1 < sizeof buf && strchr("+-0123456789.eE", j->p[k]) &&
           j->p[k])
        k++;
    memcpy(buf, j->p, k);
    buf[k] = 0;
    char *e;
    *v = strtod(buf, &e);
    if (k == 0 || *e)
        return mprt_json_bad(j, "expected a number");
    j->p += k;
    return 0;
}

const char *mprt_json_escape(unsigned char c, char buf[8])
{
    if (c == '"' || c == '\\') {
        buf[0] = '\\', buf[1] = (char)c, buf[2] = 0;
        return buf;
    }
    if (c >= 0x20)
        return NULL;
    const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                      : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
    if (named)
        return named;
    snprintf(buf, 8, "\\u%04x", c);
    return buf;
}

void mprt_json_fputs(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        char esc[8];
        const char *e = mprt_json_escape((unsigned char)*s, esc);
        if (e)
            fputs(e, f);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}
