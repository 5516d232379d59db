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
