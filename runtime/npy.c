/* npy.c — NumPy .npy files: load versions 1.0, 2.0 and 3.0 (little-endian,
 * C order, the dtypes in npy_descrs), save version 1.0 atomically.
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 LE in 1.0, u32 LE
 * in 2.0/3.0), then a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw data. */
#include "mprt.h"

#define NPY_MAX_HEADER (1u << 20)   /* real headers are < 200 bytes */

/* The dtypes .npy files may hold, as numpy writes their descr. */
static const struct {
    const char *descr;
    MprtDType dtype;
} npy_descrs[] = {
    {"<f4", MPRT_F32}, {"<f8", MPRT_F64}, {"<i8", MPRT_I64}, {"<i4", MPRT_I32},
    {"|u1", MPRT_U8},  {"|b1", MPRT_BOOL}, {"<f2", MPRT_F16}, {"<i2", MPRT_I16},
    {"|i1", MPRT_I8},
};
#define NPY_NDESCRS (sizeof npy_descrs / sizeof npy_descrs[0])

/* The descr numpy writes for t, or NULL (bfloat16 has none). */
static const char *npy_descr_of(MprtDType t)
{
    for (size_t i = 0; i < NPY_NDESCRS; i++)
        if (npy_descrs[i].dtype == t)
            return npy_descrs[i].descr;
    return NULL;
}

/* "(2, 3)", "(3,)" or "()", as Python prints a shape. */
static void npy_shape_str(const int64_t *shape, int rank, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, rank == 1 ? ",)" : ")");
}

// --- the header: a small, strict reader of the Python dict literal ---

typedef struct {
    const char *path;
    const char *s, *p, *end;        /* whole header, cursor, end */
    char *err;
    size_t errlen;
    char descr[32];
    int fortran, rank;
    int64_t shape[MPRT_MAX_RANK];
} NpyHeader;

static int npy_bad(NpyHeader *h, const char *what)
{
    char shown[81];
    size_t n = 0;
    for (const char *q = h->s; q < h->end && n < sizeof shown - 1; q++)
        shown[n++] = (*q >= 0x20 && *q < 0x7f) ? *q : '?';
    shown[n] = 0;
    return mprt_errf(h->err, h->errlen, "%s: malformed .npy header (%s at byte %d of \"%s\"); "
                     "the file is corrupt or not written by numpy.save", h->path, what,
                     (int)(h->p - h->s), shown);
}

static void npy_ws(NpyHeader *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

static int npy_eat(NpyHeader *h, char c)
{
    npy_ws(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

/* A quoted string (no escapes) into buf. */
static int npy_string(NpyHeader *h, char *buf, size_t n)
{
    npy_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return npy_bad(h, "expected a quoted string");
    char q = *h->p++;
    size_t k = 0;
    while (h->p < h->end && *h->p != q) {
        if (*h->p == '\\')
            return npy_bad(h, "escapes in strings are not supported");
        if (k + 1 >= n)
            return npy_bad(h, "string too long");
        buf[k++] = *h->p++;
    }
    if (h->p >= h->end)
        return npy_bad(h, "unterminated string");
    h->p++;
    buf[k] = 0;
    return 0;
}

/* A non-negative decimal integer, with Python 2's optional 'L' suffix. */
static int npy_dim(NpyHeader *h, int64_t *v)
{
    npy_ws(h);
    if (h->p < h->end && *h->p == '-')
        return npy_bad(h, "negative dimension");
    if (h->p >= h->end || *h->p < '0' || *h->p > '9')
        return npy_bad(h, "expected a dimension");
    uint64_t x = 0;
    while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
        x = x * 10 + (uint64_t)(*h->p++ - '0');
        if (x > INT64_MAX)
            return npy_bad(h, "dimension too large");
    }
    if (h->p < h->end && *h->p == 'L')
        h->p++;
    *v = (int64_t)x;
    return 0;
}

/* A tuple of dimensions: (), (3,), (2, 3) or (2, 3,). */
static int npy_shape(NpyHeader *h)
{
    if (!npy_eat(h, '('))
        return npy_bad(h, "expected a shape tuple");
    h->rank = 0;
    if (npy_eat(h, ')'))
        return 0;
    for (;;) {
        if (h->rank == MPRT_MAX_RANK)
            return mprt_errf(h->err, h->errlen, "%s: arrays of more than %d dimensions are not "
                             "supported; reshape it before saving", h->path, MPRT_MAX_RANK);
        if (npy_dim(h, &h->shape[h->rank++]))
            return 1;
        int comma = npy_eat(h, ',');
        if (npy_eat(h, ')')) {
            if (h->rank == 1 && !comma)
                return npy_bad(h, "a 1-element shape needs a trailing comma");
            return 0;
        }
        if (!comma)
            return npy_bad(h, "expected ',' or ')' in the shape");
    }
}

static int npy_value(NpyHeader *h, const char *key)
{
    if (!strcmp(key, "descr")) {
        npy_ws(h);
        if (h->p < h->end && *h->p == '[')
            return mprt_errf(h->err, h->errlen, "%s: structured dtypes are not supported; save "
                             "each field as its own .npy file", h->path);
        return npy_string(h, h->descr, sizeof h->descr);
    }
    if (!strcmp(key, "fortran_order")) {
        npy_ws(h);
        size_t left = (size_t)(h->end - h->p);
        if (left >= 4 && !memcmp(h->p, "True", 4)) {
            h->fortran = 1;
            h->p += 4;
        } else if (left >= 5 && !memcmp(h->p, "False", 5)) {
            h->fortran = 0;
            h->p += 5;
        } else {
            return npy_bad(h, "fortran_order must be True or False");
        }
        return 0;
    }
    return npy_shape(h);
}

static int npy_header(NpyHeader *h)
{
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    int seen[3] = {0, 0, 0};
    if (!npy_eat(h, '{'))
        return npy_bad(h, "expected '{'");
    while (!npy_eat(h, '}')) {
        char key[32];
        if (npy_string(h, key, sizeof key))
            return 1;
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]))
            k++;
        if (k == 3)
            return npy_bad(h, "unknown key");
        if (seen[k]++)
            return npy_bad(h, "duplicate key");
        if (!npy_eat(h, ':'))
            return npy_bad(h, "expected ':'");
        if (npy_value(h, key))
            return 1;
        if (!npy_eat(h, ',')) {
            if (!npy_eat(h, '}'))
                return npy_bad(h, "expected ',' or '}'");
            break;
        }
    }
    npy_ws(h);
    if (h->p != h->end)
        return npy_bad(h, "text after the dict");
    for (int k = 0; k < 3; k++)
        if (!seen[k]) {
            char what[48];
            snprintf(what, sizeof what, "missing key '%s'", keys[k]);
            return npy_bad(h, what);
        }
    return 0;
}

/* Maps h->descr to a dtype, or explains why it cannot. */
static int npy_dtype(NpyHeader *h, MprtDType *t)
{
    const char *d = h->descr;
    int order = d[0] && strchr("<>|=", d[0]) ? d[0] : 0;
    const char *kind = order ? d + 1 : d;
    for (size_t i = 0; i < NPY_NDESCRS; i++) {
        if (strcmp(kind, npy_descrs[i].descr + 1))
            continue;
        MprtDType dt = npy_descrs[i].dtype;
        /* byte order means nothing for one-byte types */
        if (order == '<' || (order && mprt_dtype_size(dt) == 1)) {
            *t = dt;
            return 0;
        }
        return mprt_errf(h->err, h->errlen, "%s: expected little-endian %s ('%s'), found '%s'; "
                         "re-save it with numpy.save(path, a.astype('%s'))", h->path,
                         mprt_dtype_name(dt), npy_descr_of(dt), d, npy_descr_of(dt));
    }
    return mprt_errf(h->err, h->errlen, "%s: dtype '%s' is not supported; use float32 '<f4', "
                     "float64 '<f8', float16 '<f2', int64 '<i8', int32 '<i4', int16 '<i2', "
                     "int8 '|i1', uint8 '|u1' or bool '|b1' (a.astype(...) before numpy.save)",
                     h->path, d);
}

// --- loading ---

static uint32_t npy_le(const unsigned char *b, int n)
{
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* Reads the preamble and header of the open file fp (size bytes long). */
static int npy_read_header(FILE *fp, const char *path, long long size, NpyHeader *h,
                           long long *data_at, char *err, size_t errlen)
{
    unsigned char pre[12];
    if (size < 10 || fread(pre, 1, 10, fp) != 10)
        return mprt_errf(err, errlen, "%s: only %lld bytes, too short for a .npy file; it is "
                         "truncated or empty", path, size);
    if (memcmp(pre, "\x93NUMPY", 6))
        return mprt_errf(err, errlen, "%s: not a .npy file (it does not start with "
                         "\"\\x93NUMPY\"); save the array with numpy.save", path);
    int major = pre[6], minor = pre[7];
    if (minor != 0 || major < 1 || major > 3)
        return mprt_errf(err, errlen, "%s: .npy format version %d.%d is not supported (1.0, "
                         "2.0, 3.0 are); re-save it with numpy.save", path, major, minor);
    int pre_len = major == 1 ? 10 : 12;
    if (pre_len == 12 && (size < 12 || fread(pre + 10, 1, 2, fp) != 2))
        return mprt_errf(err, errlen, "%s: truncated in the .npy preamble", path);
    uint32_t hlen = npy_le(pre + 8, major == 1 ? 2 : 4);
    if ((long long)hlen > size - pre_len)
        return mprt_errf(err, errlen, "%s: header length %lu runs past the end of the file "
                         "(%lld bytes); the file is truncated", path, (unsigned long)hlen, size);
    if (hlen > NPY_MAX_HEADER)
        return mprt_errf(err, errlen, "%s: header length %lu is over the %u-byte limit; the "
                         "file is corrupt", path, (unsigned long)hlen, NPY_MAX_HEADER);
    char *text = malloc(hlen + 1);
    if (!text)
        return mprt_errf(err, errlen, "%s: out of memory for the header", path);
    int rc = 1;
    if (fread(text, 1, hlen, fp) != hlen) {
        mprt_errf(err, errlen, "%s: cannot read the header: %s", path,
                  ferror(fp) ? strerror(errno) : "unexpected end of file");
    } else {
        h->path = path;
        h->s = h->p = text;
        h->end = text + hlen;
        h->err = err;
        h->errlen = errlen;
        rc = npy_header(h);
    }
    h->s = h->p = h->end = NULL;
    free(text);
    *data_at = pre_len + (long long)hlen;
    return rc;
}

/* Checks the array's size against the bytes after the header, then reads
 * them into out->data. */
static int npy_read_data(FILE *fp, const char *path, const NpyHeader *h, MprtDType dtype,
                         long long found, long long data_at, MprtArray *out,
                         char *err, size_t errlen)
{
    char shape[256];
    size_t need = 0;
    npy_shape_str(h->shape, h->rank, shape, sizeof shape);
    if (mprt_shape_nbytes(dtype, h->rank, h->shape, &need))
        return mprt_errf(err, errlen, "%s: shape %s of %s is too large (its size overflows); "
                         "the file is corrupt", path, shape, mprt_dtype_name(dtype));
    if ((long long)need != found)
        return mprt_errf(err, errlen, "%s: shape %s of %s needs %zu data bytes, found %lld "
                         "after the %lld-byte header; the file is truncated or corrupt, "
                         "re-save it", path, shape, mprt_dtype_name(dtype), need, found, data_at);
    if (!(out->data = malloc(need ? need : 1)))
        return mprt_errf(err, errlen, "%s: out of memory for %zu bytes of data", path, need);
    if (need && fread(out->data, 1, need, fp) != need)
        return mprt_errf(err, errlen, "%s: cannot read %zu bytes of data: %s", path, need,
                         ferror(fp) ? strerror(errno) : "unexpected end of file");
    out->dtype = dtype;
    out->rank = h->rank;
    memcpy(out->shape, h->shape, sizeof h->shape);
    out->nbytes = need;
    return 0;
}

int mprt_npy_load(const char *path, MprtArray *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mprt_errf(err, errlen, "%s: cannot open: %s; check the path", path,
                         strerror(errno));
    struct stat st;
    NpyHeader h;
    memset(&h, 0, sizeof h);
    long long data_at = 0;
    MprtDType dtype = MPRT_F32;
    int rc = 1;
    if (fstat(fileno(fp), &st) != 0) {
        mprt_errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        mprt_errf(err, errlen, "%s: not a regular file; give the path of a .npy file", path);
    } else if (!npy_read_header(fp, path, (long long)st.st_size, &h, &data_at, err, errlen) &&
               !npy_dtype(&h, &dtype)) {
        if (h.fortran)
            mprt_errf(err, errlen, "%s: array is stored in Fortran order; mpcc reads C order "
                      "only: re-save it with numpy.save(path, numpy.ascontiguousarray(a))", path);
        else
            rc = npy_read_data(fp, path, &h, dtype, (long long)st.st_size - data_at, data_at,
                               out, err, errlen);
    }
    fclose(fp);
    if (rc)
        mprt_array_free(out);
    return rc;
}

// --- saving ---

int mprt_npy_save(const char *path, const MprtArray *a, char *err, size_t errlen)
{
    const char *descr = npy_descr_of(a->dtype);
    size_t need = 0;
    if (!descr)
        return mprt_errf(err, errlen, "%s: numpy has no %s dtype; convert the array to float32 "
                         "before saving it as .npy", path, mprt_dtype_name(a->dtype));
    int bad = mprt_shape_nbytes(a->dtype, a->rank, a->shape, &need);
    if (bad || need != a->nbytes || (need && !a->data))
        return mprt_errf(err, errlen, "%s: cannot save an inconsistent array (rank %d, %zu "
                         "bytes for a shape of %zu bytes, data %s)", path, a->rank, a->nbytes,
                         need, a->data ? "set" : "NULL");
    char shape[256], head[512];
    npy_shape_str(a->shape, a->rank, shape, sizeof shape);
    int n = snprintf(head + 10, sizeof head - 10,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    /* pad with spaces, then '\n', so that the data starts 64-byte aligned */
    int total = (10 + n + 1 + 63) / 64 * 64;
    memset(head + 10 + n, ' ', (size_t)(total - 10 - n - 1));
    head[total - 1] = '\n';
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (char)((total - 10) & 0xff);
    head[9] = (char)((total - 10) >> 8);
    MprtOut o;
    if (mprt_out_open(&o, path, err, errlen) ||
        mprt_out_write(&o, head, (size_t)total, err, errlen) ||
        mprt_out_write(&o, a->data, a->nbytes, err, errlen) ||
        mprt_out_commit(&o, err, errlen))
        return 1;
    return 0;
}
