/* mprt.h — the runtime's first header: the libc includes it needs, dtypes,
 * arrays, the error convention, and the file formats' exports.
 *
 * mpcc pastes the runtime into every generated program (runtime/README.md:
 * the headers before the model, the .c files after it, without their
 * `#include "..."` lines); unit tests include the .c files directly. So
 * nothing here includes a project header, every helper that is not
 * exported is static, and the file-format code (mprt.c, npy.c,
 * safetensors.c) keeps no global state.
 *
 * Errors: every function that can fail returns 0 on success and non-zero on
 * failure, and then writes one line (no newline) into err[errlen] naming the
 * file, what is wrong and what to do, e.g.
 *   x.npy: expected little-endian float32 ('<f4'), found '>f4'; ...
 * err may be NULL or errlen 0 when the caller does not want the message. */
#ifndef MPRT_H
#define MPRT_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__GNUC__) || defined(__clang__)
#define MPRT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MPRT_PRINTF(f, a)
#endif

#define MPRT_MAX_RANK 8

/* The streams of a device: compute, copies on, copies back, and the sums
 * over the replicas (comm); stream s is device s / MPRT_STREAMS's. */
enum { MPRT_STREAM_COMM = 3, MPRT_STREAMS = 4 };

/* Element types. Sizes and names live in one table in mprt.c. */
typedef enum {
    MPRT_F32,
    MPRT_F64,
    MPRT_I64,
    MPRT_I32,
    MPRT_U8,
    MPRT_BOOL,
    MPRT_F16,
    MPRT_BF16,
    MPRT_I16,
    MPRT_I8,
    MPRT_DTYPE_COUNT
} MprtDType;

/* A dense, C-ordered (row-major), little-endian array. data is malloc'd
 * and owned by the array when it comes from a loader: free it with
 * mprt_array_free. nbytes == product(shape) * mprt_dtype_size(dtype);
 * rank 0 is a scalar (one element). */
typedef struct {
    MprtDType dtype;
    int rank;
    int64_t shape[MPRT_MAX_RANK];
    void *data;
    size_t nbytes;
} MprtArray;

// mprt.c
size_t mprt_dtype_size(MprtDType t);        /* bytes per element; 0 if t is not a dtype */
const char *mprt_dtype_name(MprtDType t);   /* "float32", "bfloat16", ...; "invalid" if not */
void mprt_array_free(MprtArray *a);         /* frees data, zeroes *a; NULL is fine */
int mprt_errf(char *err, size_t errlen, const char *fmt, ...) MPRT_PRINTF(3, 4);
int mprt_shape_nbytes(MprtDType t, int rank, const int64_t *shape, size_t *out);

/* A file written to PATH.tmp and renamed over PATH only when every byte is
 * written and synced, so PATH is either the old file or the new one. After
 * a failed call the write is already abandoned (PATH.tmp removed). A
 * device or a pipe (/dev/null) is written in place: a rename would replace
 * it. */
typedef struct {
    FILE *fp;
    const char *path;
    char *tmp;                 /* NULL when written in place */
} MprtOut;
int mprt_out_open(MprtOut *o, const char *path, char *err, size_t errlen);
int mprt_out_write(MprtOut *o, const void *p, size_t n, char *err, size_t errlen);
int mprt_out_commit(MprtOut *o, char *err, size_t errlen);
void mprt_out_abort(MprtOut *o);

/* A strict JSON reader over bytes [s, end) for the small documents the
 * runtime and mpcc read (a safetensors header, a trainer's profile):
 * strings are decoded (escapes, surrogate pairs, UTF-8 checked) into pool,
 * which must hold end - s bytes. Errors name path, the document (`what`,
 * e.g. "safetensors header"), the byte offset and the text near it, and end
 * with `hint`; they return non-zero with the message in err. */
typedef struct {
    const char *path;
    const unsigned char *s, *p, *end;   /* document, cursor, end */
    char *pool;
    size_t pooled;
    char *err;
    size_t errlen;
    const char *what, *hint;
} MprtJson;

size_t mprt_utf8_len(const unsigned char *s, size_t n);  /* valid sequence at s, or 0 */
int mprt_json_bad(MprtJson *j, const char *what);
void mprt_json_ws(MprtJson *j);
int mprt_json_eat(MprtJson *j, char c);      /* 1 if the next token is c (consumed) */
int mprt_json_expect(MprtJson *j, char c);
int mprt_json_string(MprtJson *j, const char **out);
int mprt_json_number(MprtJson *j, double *v);
/* Writing: c's escape inside a JSON string ("\\\"", "\\n", "\\u0001"), or
 * NULL when c stands as it is; and a whole string, quoted, to f. */
const char *mprt_json_escape(unsigned char c, char buf[8]);
void mprt_json_fputs(FILE *f, const char *s);

// npy.c
/* Loads a .npy file (format 1.0, 2.0 or 3.0; little-endian; C order; the
 * dtypes f4 f8 f2 i8 i4 i2 i1 u1 b1; rank <= 8) into out, whose data is
 * malloc'd (malloc's alignment, at least 1 byte even when empty). On
 * failure *out is all zero, so mprt_array_free(out) is always safe. */
int mprt_npy_load(const char *path, MprtArray *out, char *err, size_t errlen);
/* Saves a as a version 1.0 .npy file (data 64-byte aligned, as numpy
 * does) via PATH.tmp, fsync and rename. bfloat16 has no numpy dtype. */
int mprt_npy_save(const char *path, const MprtArray *a, char *err, size_t errlen);

// safetensors.c
/* One tensor to write. data points at nbytes bytes, which must equal
 * product(shape) * mprt_dtype_size(dtype) (data may be NULL when 0). */
typedef struct {
    const char *name;
    MprtDType dtype;
    int rank;
    const int64_t *shape;
    const void *data;
    size_t nbytes;
} MprtStEntry;

/* One tensor of an open file. name is the decoded UTF-8 name; data points
 * into the read-only mapping and lives until mprt_st_close. data is aligned
 * to the element size in files from mprt_st_save and from the official
 * package (8-byte padded header, larger elements first), but a file from
 * elsewhere may leave it unaligned: copy it out with memcpy. */
typedef struct {
    const char *name;
    MprtDType dtype;
    int rank;
    int64_t shape[MPRT_MAX_RANK];
    const void *data;
    size_t nbytes;
    uint64_t begin, end;    /* data_offsets, relative to the byte buffer */
} MprtStTensor;

typedef struct {
    const char *key, *value;
} MprtStMeta;

/* An open safetensors file; tensors are in data_offsets order, meta in
 * file order. Everything is owned by the file: call mprt_st_close. */
typedef struct {
    void *map;
    size_t mapsize;
    MprtStTensor *tensors;
    int ntensors;
    MprtStMeta *meta;
    int nmeta;
    char *strings;          /* decoded names, keys and values */
    const MprtStTensor **by_name;   /* sorted by name, for lookups */
    const MprtStMeta **meta_by_key;
} MprtStFile;

/* Writes entries to path via PATH.tmp, fsync and rename (an existing file
 * stays intact on any failure; a crash may leave a stale PATH.tmp, which
 * the next save replaces). Names, keys and values must be valid UTF-8 and
 * unique; they are JSON-escaped. Data is laid out larger elements first,
 * so each tensor starts aligned to its element size. entries may point
 * into a file open with mprt_st_open, even the one being replaced.
 * meta_kv holds n_meta key/value pairs: meta_kv[2*i] is a key and
 * meta_kv[2*i + 1] its value, written under "__metadata__". */
int mprt_st_save(const char *path, const MprtStEntry *entries, int n,
                 const char *const *meta_kv, int n_meta, char *err, size_t errlen);
/* Maps path read-only and checks it all: the header (at most 100,000,000
 * bytes) is strict JSON; every tensor has a known dtype, rank <= 8 and
 * data_offsets inside the buffer holding exactly product(shape) * size
 * bytes; the tensors tile the buffer with no gap, overlap or trailing byte
 * (as the reference implementation requires); names and metadata keys are
 * unique and hold no NUL. On failure *f is all zero. */
int mprt_st_open(const char *path, MprtStFile *f, char *err, size_t errlen);
const MprtStTensor *mprt_st_find(const MprtStFile *f, const char *name);  /* NULL if absent */
const char *mprt_st_meta(const MprtStFile *f, const char *key);   /* NULL if absent */
void mprt_st_close(MprtStFile *f);  /* unmaps and frees; safe on a zeroed f */

#endif
