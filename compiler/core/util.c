/* util.c — the compiler's arena, string helpers and checked arithmetic.
 *
 * Everything the compiler allocates lives in one arena per model and is
 * released at once; resources that are not memory (mappings, files) register
 * a cleanup with arena_defer so an error that unwinds loses nothing.
 */
#include "mpcc.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct Chunk {
    struct Chunk *next;
    size_t used, size;
    _Alignas(16) unsigned char mem[];
} Chunk;

typedef struct Deferred {
    struct Deferred *next;
    void (*fn)(void *);
    void *p;
} Deferred;

struct Arena {
    Chunk *chunks;
    Deferred *deferred;
};

enum { CHUNK_SIZE = 1 << 20 };

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "mpcc: error: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

Arena *arena_new(void)
{
    Arena *a = xmalloc(sizeof *a);
    a->chunks = NULL;
    a->deferred = NULL;
    return a;
}

void arena_free(Arena *a)
{
    if (!a)
        return;
    for (Deferred *d = a->deferred; d; d = d->next)
        d->fn(d->p);
    for (Chunk *c = a->chunks; c;) {
        Chunk *next = c->next;
        free(c);
        c = next;
    }
    /* The Deferred records live in chunks, already released above. */
    free(a);
}

static Chunk *new_chunk(size_t size)
{
    Chunk *c = xmalloc(sizeof *c + size);
    c->used = 0;
    c->size = size;
    return c;
}

void *arena_alloc(Arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    Chunk *c = a->chunks;
    if (!c || c->size - c->used < size) {
        if (size > CHUNK_SIZE / 4) {
            /* A big block gets a chunk of its own, behind the current one. */
            Chunk *big = new_chunk(size);
            big->used = size;
            if (c) {
                big->next = c->next;
                c->next = big;
            } else {
                big->next = NULL;
                a->chunks = big;
            }
            memset(big->mem, 0, size);
            return big->mem;
        }
        c = new_chunk(CHUNK_SIZE);
        c->next = a->chunks;
        a->chunks = c;
    }
    void *p = c->mem + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

void *arena_array(Arena *a, size_t n, size_t size)
{
    if (size && n > (SIZE_MAX - 16) / size) {
        fprintf(stderr, "mpcc: error: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return arena_alloc(a, n * size);
}

void *arena_grow(Arena *a, void *p, size_t old_n, size_t new_n, size_t size)
{
    void *q = arena_array(a, new_n, size);
    if (p && old_n)
        memcpy(q, p, old_n * size);
    return q;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(Arena *a, const char *s)
{
    return arena_strndup(a, s, strlen(s));
}

char *arena_vprintf(Arena *a, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    MPCC_ASSERT(n >= 0);
    char *p = arena_alloc(a, (size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, again);
    va_end(again);
    return p;
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = arena_vprintf(a, fmt, ap);
    va_end(ap);
    return p;
}

void arena_defer(Arena *a, void (*fn)(void *), void *p)
{
    Deferred *d = arena_alloc(a, sizeof *d);
    d->fn = fn;
    d->p = p;
    d->next = a->deferred;
    a->deferred = d;
}

/* Appends the escaped form of byte c to out (at most 4 bytes + NUL). */
static int escape_byte(unsigned char c, char out[5])
{
    switch (c) {
    case '\\': return snprintf(out, 5, "\\\\");
    case '"':  return snprintf(out, 5, "\\\"");
    case '\n': return snprintf(out, 5, "\\n");
    case '\r': return snprintf(out, 5, "\\r");
    case '\t': return snprintf(out, 5, "\\t");
    }
    if (c < 0x20 || c == 0x7f)
        return snprintf(out, 5, "\\x%02x", c);
    out[0] = (char)c;
    out[1] = 0;
    return 1;
}

void fput_escaped(FILE *f, const char *s)
{
    char tmp[5];
    for (; *s; s++) {
        escape_byte((unsigned char)*s, tmp);
        fputs(tmp, f);
    }
}

char *str_escaped(Arena *a, const char *s, size_t max_len)
{
    size_t n = strlen(s);
    bool cut = n > max_len;
    if (cut)
        n = max_len;
    char *out = arena_alloc(a, n * 4 + 4);
    size_t k = 0;
    char tmp[5];
    for (size_t i = 0; i < n; i++) {
        int m = escape_byte((unsigned char)s[i], tmp);
        memcpy(out + k, tmp, (size_t)m);
        k += (size_t)m;
    }
    if (cut)
        memcpy(out + k, "...", 3), k += 3;
    out[k] = 0;
    return out;
}

bool parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return false;
    *out = (int64_t)v;
    return true;
}

bool mul_overflows(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0)
        return true;
    if (a != 0 && b > INT64_MAX / a)
        return true;
    *out = a * b;
    return false;
}

bool add_overflows(int64_t a, int64_t b, int64_t *out)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return true;
    *out = a + b;
    return false;
}

/* A whole file, NUL-terminated, from malloc (the caller frees it); errors
 * name the file and `what` it was meant to be. */
char *file_read_all(const char *path, const char *what, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        error_file(path, "cannot open %s: %s", what, strerror(errno));
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
                error_file(path, "out of memory reading %s", what);
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

char *out_tmp(Arena *a, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
        return arena_strdup(a, path);
    return arena_printf(a, "%s.tmp", path);
}

bool out_commit(const char *tmp, const char *path)
{
    return strcmp(tmp, path) == 0 || rename(tmp, path) == 0;
}
