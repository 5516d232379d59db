/* safetensors.c — checkpoints in the safetensors format: write one
 * atomically, and map one read-only with every header field checked.
 *
 * Layout: N as a u64 LE, then N bytes of JSON (padded with spaces),
 *   {"__metadata__": {"key": "value", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
 * then the data buffer; offsets are relative to the buffer's start, and
 * the tensors tile it exactly: sorted by offset, each begins where the
 * previous one ends and the last ends at the end of the file. */
#include "mprt.h"

#define ST_MAX_HEADER 100000000ull  /* the reference implementation's limit */
#define ST_METADATA "__metadata__"

static const char *const st_dtype_names[] = {
    [MPRT_F32] = "F32", [MPRT_F64] = "F64", [MPRT_I64] = "I64", [MPRT_I32] = "I32",
    [MPRT_U8] = "U8", [MPRT_BOOL] = "BOOL", [MPRT_F16] = "F16", [MPRT_BF16] = "BF16",
    [MPRT_I16] = "I16", [MPRT_I8] = "I8",
};
_Static_assert(sizeof st_dtype_names / sizeof st_dtype_names[0] == MPRT_DTYPE_COUNT,
               "st_dtype_names needs one row per MprtDType");

static int st_utf8_ok(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = mprt_utf8_len(u + i, n - i)))
            return 0;
    return 1;
}

/* A name made safe for a one-line message: control characters escaped,
 * cut at about 60 bytes. */
static const char *st_shown(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    for (; *s && k + 8 < n && k < 60; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
        else
            buf[k++] = (char)c;
    }
    if (*s && k + 4 < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = 0;
    return buf;
}

// --- writing ---

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} StBuf;

static void st_put(StBuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void st_puts(StBuf *b, const char *s) { st_put(b, s, strlen(s)); }

/* s as a JSON string: quotes, backslashes and control characters escaped;
 * s is valid UTF-8 (checked before), which JSON carries as is. */
static void st_put_json(StBuf *b, const char *s)
{
    st_put(b, "\"", 1);
    for (; *s; s++) {
        char esc[8];
        const char *e = mprt_json_escape((unsigned char)*s, esc);
        if (e)
            st_puts(b, e);
        else
            st_put(b, s, 1);
    }
    st_put(b, "\"", 1);
}

static int st_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first string of names[n] that appears twice, or NULL. */
static const char *st_duplicate(const char **names, int n)
{
    qsort(names, (size_t)n, sizeof *names, st_cmp_str);
    for (int i = 1; i < n; i++)
        if (!strcmp(names[i], names[i - 1]))
            return names[i];
    return NULL;
}

/* Checks what mprt_st_save is given; order[] gets the data layout: larger
 * elements first (stable), so that every tensor starts aligned to its
 * element size. */
static int st_check_entries(const char *path, const MprtStEntry *e, int n,
                            const char *const *meta_kv, int n_meta, int *order,
                            char *err, size_t errlen)
{
    char shown[80];
    if (n < 0 || n_meta < 0 || (n_meta && !meta_kv))
        return mprt_errf(err, errlen, "%s: bad tensor or metadata count (%d, %d)", path, n,
                         n_meta);
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i] || !st_utf8_ok(meta_kv[i]))
            return mprt_errf(err, errlen, "%s: metadata %s %d is %s", path,
                             i % 2 ? "value" : "key", i / 2, meta_kv[i] ? "not UTF-8" : "NULL");
    for (int i = 0; i < n; i++) {
        size_t need = 0;
        if (!e[i].name || !st_utf8_ok(e[i].name) || !strcmp(e[i].name, ST_METADATA))
            return mprt_errf(err, errlen, "%s: tensor %d has a name that is %s", path, i,
                             !e[i].name ? "NULL" : !st_utf8_ok(e[i].name) ? "not valid UTF-8"
                             : "reserved ('" ST_METADATA "')");
        const char *name = st_shown(e[i].name, shown, sizeof shown);
        if ((e[i].rank > 0 && !e[i].shape) ||
            mprt_shape_nbytes(e[i].dtype, e[i].rank, e[i].shape, &need))
            return mprt_errf(err, errlen, "%s: tensor '%s' has a bad dtype, rank or shape "
                             "(dtype %d, rank %d)", path, name, (int)e[i].dtype, e[i].rank);
        if (need != e[i].nbytes || (need && !e[i].data))
            return mprt_errf(err, errlen, "%s: tensor '%s' has %zu bytes of data%s, its shape "
                             "needs %zu", path, name, e[i].nbytes, e[i].data ? "" : " (NULL)",
                             need);
    }
    const char **names = malloc(sizeof *names * (size_t)(n + n_meta + 1));
    if (!names)
        return mprt_errf(err, errlen, "%s: out of memory", path);
    for (int i = 0; i < n_meta; i++)
        names[i] = meta_kv[2 * i];
    const char *twice = st_duplicate(names, n_meta), *what = "metadata key";
    if (!twice) {
        for (int i = 0; i < n; i++)
            names[i] = e[i].name;
        twice = st_duplicate(names, n);
        what = "tensor name";
    }
    if (twice)
        mprt_errf(err, errlen, "%s: %s '%s' given twice", path, what,
                  st_shown(twice, shown, sizeof shown));
    free(names);
    if (twice)
        return 1;
    for (int i = 0; i < n; i++)     /* insertion sort: stable, by size down */
        order[i] = i;
    for (int i = 1; i < n; i++) {
        int x = order[i], j = i;
        for (; j > 0 && mprt_dtype_size(e[order[j - 1]].dtype) < mprt_dtype_size(e[x].dtype); j--)
            order[j] = order[j - 1];
        order[j] = x;
    }
    return 0;
}

static void st_put_header(StBuf *b, const MprtStEntry *e, int n, const int *order,
                          const char *const *meta_kv, int n_meta)
{
    char num[64];
    st_puts(b, "{");
    if (n_meta) {
        st_puts(b, "\"" ST_METADATA "\":{");
        for (int i = 0; i < n_meta; i++) {
            st_puts(b, i ? "," : "");
            st_put_json(b, meta_kv[2 * i]);
            st_puts(b, ":");
            st_put_json(b, meta_kv[2 * i + 1]);
        }
        st_puts(b, "}");
    }
    uint64_t at = 0;
    for (int k = 0; k < n; k++) {
        const MprtStEntry *t = &e[order[k]];
        st_puts(b, k || n_meta ? "," : "");
        st_put_json(b, t->name);
        st_puts(b, ":{\"dtype\":\"");
        st_puts(b, st_dtype_names[t->dtype]);
        st_puts(b, "\",\"shape\":[");
        for (int d = 0; d < t->rank; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            st_puts(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + t->nbytes));
        st_puts(b, num);
        at += t->nbytes;
    }
    st_puts(b, "}");
    while (b->n % 8)
        st_puts(b, " ");
}

int mprt_st_save(const char *path, const MprtStEntry *entries, int n,
                 const char *const *meta_kv, int n_meta, char *err, size_t errlen)
{
    int *order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
    if (!order)
        return mprt_errf(err, errlen, "%s: out of memory", path);
    StBuf b = {0};
    MprtOut o;
    int rc = st_check_entries(path, entries, n, meta_kv, n_meta, order, err, errlen);
    if (!rc) {
        st_put_header(&b, entries, n, order, meta_kv, n_meta);
        if (b.oom)
            rc = mprt_errf(err, errlen, "%s: out of memory for the header", path);
        else if (b.n > ST_MAX_HEADER)
            rc = mprt_errf(err, errlen, "%s: header of %zu bytes is over the format's limit of "
                           "%llu; use shorter names or fewer tensors", path, b.n, ST_MAX_HEADER);
    }
    if (!rc) {
        unsigned char len[8];
        for (int i = 0; i < 8; i++)
            len[i] = (unsigned char)((uint64_t)b.n >> (8 * i));
        rc = mprt_out_open(&o, path, err, errlen) ||
             mprt_out_write(&o, len, 8, err, errlen) ||
             mprt_out_write(&o, b.p, b.n, err, errlen);
        for (int k = 0; k < n && !rc; k++)
            rc = mprt_out_write(&o, entries[order[k]].data, entries[order[k]].nbytes, err, errlen);
        rc = rc || mprt_out_commit(&o, err, errlen);
    }
    free(b.p);
    free(order);
    return rc;
}

// --- reading: a strict JSON reader for just the header's shape ---

/* A JSON integer that must be >= 0 and <= max. */
static int st_uint(MprtJson *ps, uint64_t max, uint64_t *v)
{
    mprt_json_ws(ps);
    if (ps->p < ps->end && *ps->p == '-')
        return mprt_json_bad(ps, "negative number");
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return mprt_json_bad(ps, "expected a non-negative integer");
    if (*ps->p == '0' && ps->end - ps->p > 1 && ps->p[1] >= '0' && ps->p[1] <= '9')
        return mprt_json_bad(ps, "leading zero in a number");
    uint64_t x = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        unsigned d = (unsigned)(*ps->p - '0');
        if (x > (max - d) / 10)
            return mprt_json_bad(ps, "number too large");
        x = x * 10 + d;
        ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
        return mprt_json_bad(ps, "expected an integer, found a fraction or exponent");
    *v = x;
    return 0;
}

/* "[" integers "]" into v (at most max of them); *n gets the count. */
static int st_uint_array(MprtJson *ps, uint64_t *v, int max, int *n, const char *what)
{
    if (mprt_json_expect(ps, '['))
        return 1;
    *n = 0;
    if (mprt_json_eat(ps, ']'))
        return 0;
    do {
        if (*n == max)
            return mprt_json_bad(ps, what);
        if (st_uint(ps, INT64_MAX, &v[(*n)++]))
            return 1;
    } while (mprt_json_eat(ps, ','));
    return mprt_json_expect(ps, ']');
}

static int st_dtype(MprtJson *ps, const char *name, MprtDType *t)
{
    for (int i = 0; i < MPRT_DTYPE_COUNT; i++)
        if (!strcmp(name, st_dtype_names[i])) {
            *t = (MprtDType)i;
            return 0;
        }
    char shown[80], what[128];
    snprintf(what, sizeof what, "dtype '%s' is not supported (F32 F64 F16 BF16 I64 I32 I16 "
             "I8 U8 BOOL are)", st_shown(name, shown, sizeof shown));
    return mprt_json_bad(ps, what);
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]} in any order. */
static int st_tensor(MprtJson *ps, MprtStTensor *t)
{
    int seen = 0;
    uint64_t v[MPRT_MAX_RANK];
    if (mprt_json_expect(ps, '{'))
        return 1;
    do {
        const char *key;
        int n, bit;
        if (mprt_json_string(ps, &key) || mprt_json_expect(ps, ':'))
            return 1;
        bit = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2
            : !strcmp(key, "data_offsets") ? 4 : 0;
        if (!bit)
            return mprt_json_bad(ps, "unknown key in a tensor (dtype, shape, data_offsets expected)");
        if (seen & bit)
            return mprt_json_bad(ps, "duplicate key in a tensor");
        seen |= bit;
        if (bit == 1) {
            const char *dt;
            if (mprt_json_string(ps, &dt) || st_dtype(ps, dt, &t->dtype))
                return 1;
        } else if (bit == 2) {
            if (st_uint_array(ps, v, MPRT_MAX_RANK, &n, "more than 8 dimensions"))
                return 1;
            t->rank = n;
            for (int i = 0; i < n; i++)
                t->shape[i] = (int64_t)v[i];
        } else {
            if (st_uint_array(ps, v, 2, &n, "data_offsets needs exactly 2 numbers"))
                return 1;
            if (n != 2)
                return mprt_json_bad(ps, "data_offsets needs exactly 2 numbers");
            t->begin = v[0];
            t->end = v[1];
        }
    } while (mprt_json_eat(ps, ','));
    if (mprt_json_expect(ps, '}'))
        return 1;
    if (seen != 7)
        return mprt_json_bad(ps, "a tensor needs dtype, shape and data_offsets");
    return 0;
}

static int st_grow(void **p, int *cap, int n, size_t size)
{
    if (n < *cap)
        return 0;
    int ncap = *cap ? *cap * 2 : 16;
    void *q = realloc(*p, (size_t)ncap * size);
    if (!q)
        return 1;
    *p = q;
    *cap = ncap;
    return 0;
}

static int st_metadata(MprtJson *ps, MprtStFile *f, int *cap)
{
    if (mprt_json_expect(ps, '{'))
        return 1;
    if (mprt_json_eat(ps, '}'))
        return 0;
    do {
        MprtStMeta m;
        if (mprt_json_string(ps, &m.key) || mprt_json_expect(ps, ':'))
            return 1;
        mprt_json_ws(ps);
        if (ps->p < ps->end && *ps->p != '"')
            return mprt_json_bad(ps, "__metadata__ values must be strings");
        if (mprt_json_string(ps, &m.value))
            return 1;
        if (st_grow((void **)&f->meta, cap, f->nmeta, sizeof m))
            return mprt_json_bad(ps, "out of memory");
        f->meta[f->nmeta++] = m;
    } while (mprt_json_eat(ps, ','));
    return mprt_json_expect(ps, '}');
}

static int st_header(MprtJson *ps, MprtStFile *f)
{
    int tcap = 0, mcap = 0, had_meta = 0;
    if (mprt_json_expect(ps, '{'))
        return 1;
    if (!mprt_json_eat(ps, '}')) {
        do {
            const char *key;
            if (mprt_json_string(ps, &key) || mprt_json_expect(ps, ':'))
                return 1;
            if (!strcmp(key, ST_METADATA)) {
                if (had_meta++)
                    return mprt_json_bad(ps, "__metadata__ given twice");
                if (st_metadata(ps, f, &mcap))
                    return 1;
                continue;
            }
            if (st_grow((void **)&f->tensors, &tcap, f->ntensors, sizeof *f->tensors))
                return mprt_json_bad(ps, "out of memory");
            MprtStTensor *t = &f->tensors[f->ntensors++];
            memset(t, 0, sizeof *t);
            t->name = key;
            if (st_tensor(ps, t))
                return 1;
        } while (mprt_json_eat(ps, ','));
        if (mprt_json_expect(ps, '}'))
            return 1;
    }
    mprt_json_ws(ps);
    if (ps->p != ps->end)
        return mprt_json_bad(ps, "text after the header's object");
    return 0;
}

// --- reading: what the header says against the data buffer ---

static int st_cmp_offsets(const void *a, const void *b)
{
    const MprtStTensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int st_cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const MprtStTensor *const *)a)->name, (*(const MprtStTensor *const *)b)->name);
}

static int st_cmp_meta_key(const void *a, const void *b)
{
    return strcmp((*(const MprtStMeta *const *)a)->key, (*(const MprtStMeta *const *)b)->key);
}

static int st_check_tensors(const char *path, MprtStFile *f, const unsigned char *buf,
                            uint64_t buflen, char *err, size_t errlen)
{
    char shown[80];
    for (int i = 0; i < f->ntensors; i++) {
        MprtStTensor *t = &f->tensors[i];
        const char *name = st_shown(t->name, shown, sizeof shown);
        size_t need = 0;
        if (t->end < t->begin || t->end > buflen)
            return mprt_errf(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] %s the "
                             "%llu-byte data buffer; the file is truncated or corrupt", path,
                             name, (unsigned long long)t->begin, (unsigned long long)t->end,
                             t->end < t->begin ? "end before they begin in" : "lie outside",
                             (unsigned long long)buflen);
        if (mprt_shape_nbytes(t->dtype, t->rank, t->shape, &need))
            return mprt_errf(err, errlen, "%s: tensor '%s': its shape's size overflows; the "
                             "file is corrupt", path, name);
        if (need != t->end - t->begin) {
            char shape[256];
            size_t k = (size_t)snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < t->rank; d++)
                k += (size_t)snprintf(shape + k, sizeof shape - k, d ? ", %lld" : "%lld",
                                      (long long)t->shape[d]);
            snprintf(shape + k, sizeof shape - k, "]");
            return mprt_errf(err, errlen, "%s: tensor '%s': shape %s of %s needs %zu bytes, "
                             "data_offsets [%llu, %llu] hold %llu; the file is corrupt", path,
                             name, shape, st_dtype_names[t->dtype], need,
                             (unsigned long long)t->begin, (unsigned long long)t->end,
                             (unsigned long long)(t->end - t->begin));
        }
        t->data = buf + t->begin;
        t->nbytes = need;
    }
    if (f->ntensors > 1)
        qsort(f->tensors, (size_t)f->ntensors, sizeof *f->tensors, st_cmp_offsets);
    uint64_t at = 0;
    for (int i = 0; i < f->ntensors; i++) {
        const MprtStTensor *t = &f->tensors[i];
        if (t->begin != at)
            return mprt_errf(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] %s at "
                             "%llu; tensors must tile the data buffer, the file is corrupt",
                             path, st_shown(t->name, shown, sizeof shown),
                             (unsigned long long)t->begin, (unsigned long long)t->end,
                             t->begin < at ? "overlap the previous tensor, which ends"
                             : "leave a gap after the previous tensor, which ends",
                             (unsigned long long)at);
        at = t->end;
    }
    if (at != buflen)
        return mprt_errf(err, errlen, "%s: the data buffer has %llu bytes but the tensors cover "
                         "%llu; the file has trailing bytes or is corrupt", path,
                         (unsigned long long)buflen, (unsigned long long)at);
    return 0;
}

/* Builds the sorted lookups and rejects duplicate names and keys. */
static int st_index(const char *path, MprtStFile *f, char *err, size_t errlen)
{
    char shown[80];
    f->by_name = malloc(sizeof *f->by_name * (size_t)(f->ntensors + 1));
    f->meta_by_key = malloc(sizeof *f->meta_by_key * (size_t)(f->nmeta + 1));
    if (!f->by_name || !f->meta_by_key)
        return mprt_errf(err, errlen, "%s: out of memory", path);
    for (int i = 0; i < f->ntensors; i++)
        f->by_name[i] = &f->tensors[i];
    for (int i = 0; i < f->nmeta; i++)
        f->meta_by_key[i] = &f->meta[i];
    qsort(f->by_name, (size_t)f->ntensors, sizeof *f->by_name, st_cmp_tensor_name);
    qsort(f->meta_by_key, (size_t)f->nmeta, sizeof *f->meta_by_key, st_cmp_meta_key);
    for (int i = 1; i < f->ntensors; i++)
        if (!strcmp(f->by_name[i]->name, f->by_name[i - 1]->name))
            return mprt_errf(err, errlen, "%s: tensor '%s' appears twice in the header; the "
                             "file is corrupt", path, st_shown(f->by_name[i]->name, shown,
                                                               sizeof shown));
    for (int i = 1; i < f->nmeta; i++)
        if (!strcmp(f->meta_by_key[i]->key, f->meta_by_key[i - 1]->key))
            return mprt_errf(err, errlen, "%s: metadata key '%s' appears twice in the header; "
                             "the file is corrupt", path, st_shown(f->meta_by_key[i]->key,
                                                                   shown, sizeof shown));
    return 0;
}

int mprt_st_open(const char *path, MprtStFile *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mprt_errf(err, errlen, "%s: cannot open: %s; check the path", path,
                         strerror(errno));
    struct stat st;
    int rc = 1;
    if (fstat(fd, &st) != 0)
        mprt_errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        mprt_errf(err, errlen, "%s: not a regular file; give the path of a .safetensors file",
                  path);
    else if (st.st_size < 8)
        mprt_errf(err, errlen, "%s: only %lld bytes, too short for a safetensors file; it is "
                  "truncated or empty", path, (long long)st.st_size);
    else if ((uint64_t)st.st_size > SIZE_MAX)
        mprt_errf(err, errlen, "%s: too large to map on this machine", path);
    else if ((f->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) ==
             MAP_FAILED) {
        f->map = NULL;
        mprt_errf(err, errlen, "%s: cannot map: %s", path, strerror(errno));
    } else {
        f->mapsize = (size_t)st.st_size;
        rc = 0;
    }
    close(fd);
    if (rc)
        return rc;

    const unsigned char *m = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | m[i];
    if (n > ST_MAX_HEADER)
        rc = mprt_errf(err, errlen, "%s: header length %llu is over the format's limit of "
                       "%llu bytes; the file is corrupt or not a safetensors file", path,
                       (unsigned long long)n, ST_MAX_HEADER);
    else if (n > f->mapsize - 8)
        rc = mprt_errf(err, errlen, "%s: header length %llu runs past the end of the file "
                       "(%zu bytes); the file is truncated", path, (unsigned long long)n,
                       f->mapsize);
    else if (!(f->strings = malloc((size_t)n + 1)))
        rc = mprt_errf(err, errlen, "%s: out of memory for the header", path);
    if (!rc) {
        MprtJson ps = {path, m + 8, m + 8, m + 8 + n, f->strings, 0, err, errlen,
                       "safetensors header", "the file is corrupt or not a safetensors file"};
        rc = st_header(&ps, f) ||
             st_check_tensors(path, f, m + 8 + n, f->mapsize - 8 - n, err, errlen) ||
             st_index(path, f, err, errlen);
    }
    if (rc)
        mprt_st_close(f);
    return rc;
}

const MprtStTensor *mprt_st_find(const MprtStFile *f, const char *name)
{
    int lo = 0, hi = f->ntensors;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->by_name[mid]->name, name);
        if (!c)
            return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *mprt_st_meta(const MprtStFile *f, const char *key)
{
    int lo = 0, hi = f->nmeta;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->meta_by_key[mid]->key, key);
        if (!c)
            return f->meta_by_key[mid]->value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void mprt_st_close(MprtStFile *f)
{
    if (f->map)
        munmap(f->map, f->mapsize);
    free(f->tensors);
    free(f->meta);
    free(f->strings);
    free(f->by_name);
    free(f->meta_by_key);
    memset(f, 0, sizeof *f);
}
