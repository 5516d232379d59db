/* cpu_move.c — the CPU device's data-movement kernels, forward and
 * backward: strided copies (Transpose, Slice), Concat/Split, Gather as an
 * embedding and its scatter-add gradient, Where, comparisons, OneHot,
 * Trilu, Mod, GatherElements/ScatterElements and GatherND/ScatterND, Cast
 * and 2-D Resize. Strided copies, Concat, Gather and its gradient, Where,
 * comparisons, Pad's forward and Cast run on the device's threads
 * (pool.c), each output row or element written whole by one thread.
 *
 * Shapes come in as literals from the generated step. Broadcasting ops take
 * per-output-dimension strides (0 where an input is broadcast) and walk the
 * output once with mprt_bcast_next.
 */
#include "mprt.h"
#include "kernel.h"

#include <math.h>
#include <string.h>

/* Advances the multi-index idx over shape and k offsets by their strides
 * (strides[j][d]: stride of operand j along output dimension d). */
static inline void mprt_bcast_next(int rank, const long *shape, long *idx, int k, long *off,
                                   const long *const *strides)
{
    for (int d = rank - 1; d >= 0; d--) {
        for (int j = 0; j < k; j++)
            off[j] += strides[j][d];
        if (++idx[d] < shape[d])
            return;
        for (int j = 0; j < k; j++)
            off[j] -= strides[j][d] * shape[d];
        idx[d] = 0;
    }
}

/* idx and the k offsets at flat output element i (as i calls of
 * mprt_bcast_next from zero would leave them). */
static inline void mprt_bcast_at(int rank, const long *shape, long i, long *idx, int k,
                                 long *off, const long *const *strides)
{
    for (int j = 0; j < k; j++)
        off[j] = 0;
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = i % shape[d], i /= shape[d];
        for (int j = 0; j < k; j++)
            off[j] += idx[d] * strides[j][d];
    }
}

/* y (contiguous, `shape`) = x[base + sum idx[d] * stride[d]]: Transpose
 * (permuted strides) and Slice (strides times steps, base at the starts).
 * With back != 0 it runs the other way for the gradient: dx is zeroed and
 * dx[base + ...] = dy. Elements of `size` bytes: float32, or bf16 (2). */
typedef struct MprtStrided {
    int back, rank;
    const long *shape, *stride;
    long base;
    char *x, *y;
    size_t size;
} MprtStrided;

/* n elements of type T between y (contiguous) and x (s apart), in the
 * direction `back` says. */
#define MPRT_STRIDED_RUN(T, back, x, y, n, s)                  \
    do {                                                        \
        T *x_ = (T *)(void *)(x), *y_ = (T *)(void *)(y);       \
        if (back)                                               \
            for (long j_ = 0; j_ < (n); j_++)                   \
                x_[j_ * (s)] = y_[j_];                          \
        else                                                    \
            for (long j_ = 0; j_ < (n); j_++)                   \
                y_[j_] = x_[j_ * (s)];                          \
    } while (0)

static void mprt_strided_run(const MprtStrided *t, char *x, char *y, long n, long s)
{
    if (t->size == 2)
        MPRT_STRIDED_RUN(uint16_t, t->back, x, y, n, s);
    else
        MPRT_STRIDED_RUN(float, t->back, x, y, n, s);
}

/* Output rows [lo, hi) of mprt_strided (no two write one element of x). */
static void mprt_strided_piece(void *ctx, long lo, long hi)
{
    const MprtStrided *t = ctx;
    int rank = t->rank;
    long idx[8] = {0}, off = t->base, n = t->shape[rank - 1], s = t->stride[rank - 1];
    long rest = lo;
    const long *st[1] = {t->stride};
    size_t z = t->size;
    for (int d = rank - 2; d >= 0; d--) {   /* row lo's index and offset */
        idx[d] = rest % t->shape[d], rest /= t->shape[d];
        off += idx[d] * t->stride[d];
    }
    for (long r = lo; r < hi; r++) {
        mprt_strided_run(t, t->x + (size_t)off * z, t->y + (size_t)(r * n) * z, n, s);
        mprt_bcast_next(rank - 1, t->shape, idx, 1, &off, st);
    }
}

/* A transpose of the last two dimensions (the output's rows read x
 * `stride[rank-1]` apart, its columns read x contiguously): blocks of
 * MPRT_T_BLOCK output rows, column by column, so that each column of a
 * block reads one short contiguous run of x rather than a float a cache
 * line. The block is small because its rows are often a power of two
 * apart (4 KB for 1024 floats), which puts them in one set of the L1
 * cache: 4 rows fit its ways, 16 thrash them (a 256 x 1024 transpose took
 * 114 us with 4, 154 with 8, 736 with 16 and 650 row by row). Items
 * [lo, hi): (the batch index, the block). */
enum { MPRT_T_BLOCK = 4 };

/* Rows [i0, i1) of one transpose's output y (n columns) from x (its rows
 * s apart), column by column; elements of type T. */
#define MPRT_TRANSPOSE_BLOCK(T, back, xs, ys, i0, i1, n, s)             \
    do {                                                                 \
        T *x_ = (T *)(void *)(xs), *y_ = (T *)(void *)(ys);              \
        for (long j_ = 0; j_ < (n); j_++)                                \
            for (long i_ = (i0); i_ < (i1); i_++) {                      \
                if (back)                                                \
                    x_[i_ + j_ * (s)] = y_[i_ * (n) + j_];               \
                else                                                     \
                    y_[i_ * (n) + j_] = x_[i_ + j_ * (s)];               \
            }                                                            \
    } while (0)

static void mprt_transpose_piece(void *ctx, long lo, long hi)
{
    const MprtStrided *t = ctx;
    int rank = t->rank;
    long R = t->shape[rank - 2], n = t->shape[rank - 1], s = t->stride[rank - 1];
    long blocks = (R + MPRT_T_BLOCK - 1) / MPRT_T_BLOCK;
    for (long item = lo; item < hi; item++) {
        long o = item / blocks, i0 = item % blocks * MPRT_T_BLOCK, rest = o, off = t->base;
        long i1 = i0 + MPRT_T_BLOCK < R ? i0 + MPRT_T_BLOCK : R;
        for (int d = rank - 3; d >= 0; d--)
            off += rest % t->shape[d] * t->stride[d], rest /= t->shape[d];
        char *xs = t->x + (size_t)off * t->size, *ys = t->y + (size_t)(o * R * n) * t->size;
        if (t->size == 2)
            MPRT_TRANSPOSE_BLOCK(uint16_t, t->back, xs, ys, i0, i1, n, s);
        else
            MPRT_TRANSPOSE_BLOCK(float, t->back, xs, ys, i0, i1, n, s);
    }
}

MPRT_KERNEL void mprt_strided(size_t size, int back, int rank, const long *shape,
                              const long *stride, long base, long n_x, void *x, void *y)
{
    if (back)
        memset(x, 0, (size_t)n_x * size);
    if (rank == 0) {
        if (back)
            memcpy((char *)x + (size_t)base * size, y, size);
        else
            memcpy(y, (char *)x + (size_t)base * size, size);
        return;
    }
    long rows = 1;
    for (int d = 0; d < rank - 1; d++)
        rows *= shape[d];
    MprtStrided t = {back, rank, shape, stride, base, x, y, size};
    if (rank >= 2 && stride[rank - 1] != 1 && stride[rank - 2] == 1 && shape[rank - 1] > 1) {
        long outer = rows / shape[rank - 2];
        long blocks = (shape[rank - 2] + MPRT_T_BLOCK - 1) / MPRT_T_BLOCK;
        mprt_par(outer * blocks, mprt_grain_rows(MPRT_T_BLOCK * shape[rank - 1]),
                 mprt_transpose_piece, &t);
        return;
    }
    mprt_par(rows, mprt_grain_rows(shape[rank - 1]), mprt_strided_piece, &t);
}

/* y (contiguous, `shape`) = x broadcast by its strides (0 along the
 * dimensions it is broadcast on), for elements of any type: `size` bytes
 * each. Expand on bool and integer tensors (a padding mask). */
MPRT_KERNEL void mprt_broadcast_bytes(size_t size, int rank, const long *shape,
                                      const long *stride, const void *x, void *y)
{
    long n = 1, idx[8] = {0}, off = 0;
    const long *st[1] = {stride};
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    for (long i = 0; i < n; i++) {
        memcpy((char *)y + (size_t)i * size, (const char *)x + (size_t)off * size, size);
        mprt_bcast_next(rank, shape, idx, 1, &off, st);
    }
}

/* Concat along an axis: the tensors are `outer` rows of len[j] * inner
 * elements each; y's rows are the inputs' rows one after another. Split
 * (back != 0) copies y's rows out; a NULL part is an unused output.
 * Elements of `size` bytes: float32, or bf16 (2). */
typedef struct MprtConcat {
    int back, k;
    long inner, row;
    const long *len;
    void *const *part;
    char *y;
    size_t size;
} MprtConcat;

static void mprt_concat_piece(void *ctx, long lo, long hi)
{
    const MprtConcat *t = ctx;
    size_t z = t->size;
    for (long o = lo; o < hi; o++) {
        char *yr = t->y + (size_t)o * t->row * z;
        for (int j = 0; j < t->k; j++) {
            size_t n = (size_t)(t->len[j] * t->inner) * z;
            char *pj = t->part[j];
            if (pj && t->back)
                memcpy(pj + (size_t)o * n, yr, n);
            else if (pj)
                memcpy(yr, pj + (size_t)o * n, n);
            yr += n;
        }
    }
}

MPRT_KERNEL void mprt_concat(size_t size, int back, long outer, long inner, int k,
                             const long *len, void *const *part, void *y)
{
    MprtConcat t = {back, k, inner, 0, len, part, y, size};
    for (int j = 0; j < k; j++)
        t.row += len[j] * inner;
    mprt_par(outer, mprt_grain_rows(t.row), mprt_concat_piece, &t);
}

/* The index of Gather node `node`, checked against the dimension. */
static long mprt_gather_index(int64_t v, long dim, const char *node)
{
    if (v < -dim || v >= dim) {
        fprintf(stderr, "train: error: node '%s': index %lld is out of range [-%ld, %ld); "
                "check the input data (token ids must be below the vocabulary size)\n",
                node, (long long)v, dim, dim);
        exit(1);
    }
    return (long)(v < 0 ? v + dim : v);
}

/* Gather on an axis: x is outer x dim x inner, y is outer x nidx x inner. */
typedef struct MprtGather {
    long outer, dim, inner, nidx;
    const int64_t *idx;
    const float *x;
    float *y;
    const char *node;
} MprtGather;

/* Rows [lo, hi) of y, row o * nidx + i taking x's row idx[i] of outer o. */
static void mprt_gather_piece(void *ctx, long lo, long hi)
{
    const MprtGather *t = ctx;
    for (long r = lo; r < hi; r++) {
        long o = r / t->nidx, k = mprt_gather_index(t->idx[r % t->nidx], t->dim, t->node);
        memcpy(t->y + (size_t)r * t->inner, t->x + ((size_t)o * t->dim + k) * t->inner,
               (size_t)t->inner * sizeof *t->y);
    }
}

MPRT_KERNEL void mprt_gather(long outer, long dim, long inner, long nidx, const int64_t *idx,
                             const float *x, float *y, const char *node)
{
    MprtGather t = {outer, dim, inner, nidx, idx, x, y, node};
    mprt_par(outer * nidx, mprt_grain_rows(inner), mprt_gather_piece, &t);
}

/* The gradient of Gather: dx = 0, then dx[o, idx[i], :] += dy[o, i, :]
 * (repeated indices, such as one token twice, add up). */
/* Columns [lo, hi) of the rows (the inner positions): each thread adds
 * its columns over every index in order, so a repeated index sums the same
 * way on any thread count. */
static void mprt_gather_grad_piece(void *ctx, long lo, long hi)
{
    const MprtGather *t = ctx;
    const float *dy = t->x;
    for (long o = 0; o < t->outer; o++) {
        for (long k = 0; k < t->dim; k++)
            memset(t->y + ((size_t)o * t->dim + k) * t->inner + lo, 0,
                   (size_t)(hi - lo) * sizeof *t->y);
        for (long i = 0; i < t->nidx; i++) {
            long k = mprt_gather_index(t->idx[i], t->dim, t->node);
            float *d = t->y + ((size_t)o * t->dim + k) * t->inner;
            const float *s = dy + ((size_t)o * t->nidx + i) * t->inner;
            for (long j = lo; j < hi; j++)
                d[j] += s[j];
        }
    }
}

MPRT_KERNEL void mprt_gather_grad(long outer, long dim, long inner, long nidx,
                                  const int64_t *idx, const float *dy, float *dx,
                                  const char *node)
{
    MprtGather t = {outer, dim, inner, nidx, idx, dy, dx, node};
    mprt_par(inner, mprt_grain_rows(outer * (nidx + dim)), mprt_gather_grad_piece, &t);
}

/* y = cond ? a : b with broadcasting (strides per output dimension). */
/* A broadcasting kernel's operands (up to three inputs, their strides per
 * output dimension) and its output. */
typedef struct MprtBcast {
    int op, type, rank;
    const long *shape, *s[3];
    const void *in[3];
    void *y;
} MprtBcast;

static void mprt_where_piece(void *ctx, long lo, long hi)
{
    const MprtBcast *t = ctx;
    long idx[8], off[3];
    const uint8_t *cond = t->in[0];
    const float *a = t->in[1], *b = t->in[2];
    float *y = t->y;
    mprt_bcast_at(t->rank, t->shape, lo, idx, 3, off, t->s);
    for (long i = lo; i < hi; i++) {
        y[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
        mprt_bcast_next(t->rank, t->shape, idx, 3, off, t->s);
    }
}

static long mprt_numel(int rank, const long *shape)
{
    long n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    return n;
}

MPRT_KERNEL void mprt_where(int rank, const long *shape, const uint8_t *cond, const long *sc,
                            const float *a, const long *sa, const float *b, const long *sb,
                            float *y)
{
    MprtBcast t = {.rank = rank, .shape = shape, .s = {sc, sa, sb}, .in = {cond, a, b}, .y = y};
    mprt_par(mprt_numel(rank, shape), MPRT_GRAIN, mprt_where_piece, &t);
}

/* ---- Pad ---- */

/* The input index that output index o of one dim reads (begin: the pad
 * before the dim, negative to crop), or -1 for the constant. */
static long mprt_pad_src(int mode, long o, long begin, long n)
{
    long i = o - begin;
    if (i >= 0 && i < n)
        return i;
    if (mode == MPRT_PAD_CONSTANT)
        return -1;
    if (mode == MPRT_PAD_EDGE || n == 1)
        return i < 0 ? 0 : n - 1;
    long period = 2 * (n - 1);   /* reflect: ... 2 1 [0 1 2 .. n-1] n-2 .. */
    i = i % period;
    i = i < 0 ? i + period : i;
    return i < n ? i : period - i;
}

/* y = x padded (ONNX Pad: constant, reflect, edge). With back != 0 the
 * gradient: dx = 0, then every output that read an input adds its dy to
 * it. */
typedef struct MprtPad {
    int mode, rank;
    const long *xs, *ys, *begin;
    long st[8];
    float value;
    const float *x;
    float *y;
} MprtPad;

/* Outputs [lo, hi) of the forward: each reads one input or the value. */
static void mprt_pad_piece(void *ctx, long lo, long hi)
{
    const MprtPad *t = ctx;
    long idx[8], rest = lo;
    for (int d = t->rank - 1; d >= 0; d--)
        idx[d] = rest % t->ys[d], rest /= t->ys[d];
    for (long o = lo; o < hi; o++) {
        long off = 0;
        for (int d = 0; d < t->rank && off >= 0; d++) {
            long i = mprt_pad_src(t->mode, idx[d], t->begin[d], t->xs[d]);
            off = i < 0 ? -1 : off + i * t->st[d];
        }
        t->y[o] = off >= 0 ? t->x[off] : t->value;
        for (int d = t->rank - 1; d >= 0 && ++idx[d] == t->ys[d]; d--)
            idx[d] = 0;
    }
}

MPRT_KERNEL void mprt_pad(int back, int mode, int rank, const long *xs, const long *ys,
                          const long *begin, float value, float *x, float *y)
{
    long n = 1, nx = 1, idx[8] = {0}, st[8];
    for (int d = rank - 1; d >= 0; d--) {
        st[d] = nx;
        nx *= xs[d];
        n *= ys[d];
    }
    if (!back) {
        MprtPad t = {mode, rank, xs, ys, begin, {0}, value, x, y};
        memcpy(t.st, st, sizeof st);
        mprt_par(n, MPRT_GRAIN / 2, mprt_pad_piece, &t);
        return;
    }
    memset(x, 0, (size_t)nx * sizeof *x);   /* reflected outputs may add to one input */
    for (long o = 0; o < n; o++) {
        long off = 0;
        for (int d = 0; d < rank && off >= 0; d++) {
            long i = mprt_pad_src(mode, idx[d], begin[d], xs[d]);
            off = i < 0 ? -1 : off + i * st[d];
        }
        if (off >= 0)
            x[off] += y[o];
        for (int d = rank - 1; d >= 0 && ++idx[d] == ys[d]; d--)
            idx[d] = 0;
    }
}

/* ---- comparisons and logic: bool (uint8) results ---- */

static double mprt_elem(int type, const void *p, long i)
{
    switch (type) {
    case MPRT_ELEM_F32: return ((const float *)p)[i];
    case MPRT_ELEM_I64: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* y = a op b with broadcasting; int64 operands compare exactly. */
static void mprt_compare_piece(void *ctx, long lo, long hi)
{
    const MprtBcast *t = ctx;
    int op = t->op, type = t->type, rank = t->rank;
    const long *shape = t->shape, *const *s = t->s;
    const void *a = t->in[0], *b = t->in[1];
    uint8_t *y = t->y;
    long idx[8], off[2];
    mprt_bcast_at(rank, shape, lo, idx, 2, off, s);
    for (long i = lo; i < hi; i++) {
        int r;
        if (type == MPRT_ELEM_I64) {
            int64_t u = ((const int64_t *)a)[off[0]], v = ((const int64_t *)b)[off[1]];
            r = op == MPRT_EQUAL ? u == v : op == MPRT_LESS ? u < v
              : op == MPRT_LESS_EQUAL ? u <= v : op == MPRT_GREATER ? u > v : u >= v;
        } else {
            double u = mprt_elem(type, a, off[0]), v = mprt_elem(type, b, off[1]);
            switch (op) {
            case MPRT_EQUAL: r = u == v; break;
            case MPRT_LESS: r = u < v; break;
            case MPRT_LESS_EQUAL: r = u <= v; break;
            case MPRT_GREATER: r = u > v; break;
            case MPRT_GREATER_EQUAL: r = u >= v; break;
            case MPRT_AND: r = u != 0 && v != 0; break;
            case MPRT_OR: r = u != 0 || v != 0; break;
            default: r = (u != 0) != (v != 0); break;
            }
        }
        y[i] = (uint8_t)r;
        mprt_bcast_next(rank, shape, idx, 2, off, s);
    }
}

MPRT_KERNEL void mprt_compare(int op, int type, int rank, const long *shape, const void *a,
                              const long *sa, const void *b, const long *sb, uint8_t *y)
{
    MprtBcast t = {.op = op, .type = type, .rank = rank, .shape = shape, .s = {sa, sb},
                   .in = {a, b}, .y = y};
    mprt_par(mprt_numel(rank, shape), MPRT_GRAIN / 2, mprt_compare_piece, &t);
}

MPRT_KERNEL void mprt_not(long n, const uint8_t *x, uint8_t *y)
{
    for (long i = 0; i < n; i++)
        y[i] = !x[i];
}

/* ---- elements of any type (MPRT_ELEM_*): integers as int64, floats as
 * double, both exact ---- */

static int64_t mprt_elem_int(int type, const void *p, long i)
{
    switch (type) {
    case MPRT_ELEM_I64: return ((const int64_t *)p)[i];
    case MPRT_ELEM_I32: return ((const int32_t *)p)[i];
    case MPRT_ELEM_I16: return ((const int16_t *)p)[i];
    case MPRT_ELEM_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

static void mprt_elem_put(int type, void *p, long i, int64_t v)
{
    switch (type) {
    case MPRT_ELEM_I64: ((int64_t *)p)[i] = v; break;
    case MPRT_ELEM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case MPRT_ELEM_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case MPRT_ELEM_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}

static inline int mprt_elem_is_float(int type)
{
    return type == MPRT_ELEM_F32 || type == MPRT_ELEM_F64;
}

static double mprt_elem_float(int type, const void *p, long i)
{
    return type == MPRT_ELEM_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}

static size_t mprt_elem_size(int type)
{
    switch (type) {
    case MPRT_ELEM_F64: case MPRT_ELEM_I64: return 8;
    case MPRT_ELEM_F32: case MPRT_ELEM_I32: return 4;
    case MPRT_ELEM_I16: return 2;
    default: return 1;
    }
}

/* ---- OneHot and Trilu: elements of es bytes, copied ---- */

/* Where index i of idx (element type `type`, a float truncated toward
 * zero as ONNX casts it) puts its on value among depth: a negative index
 * counts from the end; -1 for one outside [-depth, depth), whose line is
 * all off. */
static long mprt_onehot_pos(int type, const void *idx, long i, long depth)
{
    int64_t v;
    if (mprt_elem_is_float(type)) {
        double f = mprt_elem_float(type, idx, i);
        if (!(f > -(double)depth - 1 && f < (double)depth))
            return -1;
        v = (int64_t)f;
    } else {
        v = mprt_elem_int(type, idx, i);
    }
    if (v < -depth || v >= depth)
        return -1;
    return (long)(v < 0 ? v + depth : v);
}

/* y[o, d, i] = values[1] where idx[o, i] names d, values[0] elsewhere. */
MPRT_KERNEL void mprt_onehot(int type, long outer, long depth, long inner, int es,
                             const void *idx, const void *values, void *y)
{
    const char *off = values, *on = off + es;
    for (long o = 0; o < outer; o++)
        for (long i = 0; i < inner; i++) {
            long pos = mprt_onehot_pos(type, idx, o * inner + i, depth);
            for (long d = 0; d < depth; d++)
                memcpy((char *)y + (size_t)((o * depth + d) * inner + i) * (size_t)es,
                       d == pos ? on : off, (size_t)es);
        }
}

/* OneHot's gradient: dvalues = the sums of dy (in y's layout) where the
 * output is off and where it is on, in double, in dy's order. */
MPRT_KERNEL void mprt_onehot_grad(int type, long outer, long depth, long inner,
                                  const void *idx, const float *dy, float *dvalues)
{
    double sum[2] = {0.0, 0.0};
    for (long o = 0; o < outer; o++)
        for (long d = 0; d < depth; d++)
            for (long i = 0; i < inner; i++)
                sum[mprt_onehot_pos(type, idx, o * inner + i, depth) == d] +=
                    dy[(o * depth + d) * inner + i];
    dvalues[0] = (float)sum[0];
    dvalues[1] = (float)sum[1];
}

/* Trilu over count matrices of rows x cols: row r keeps the columns c with
 * c >= r + k (upper) or c <= r + k, the others are zero; k within
 * [-rows, cols]. y may be x. */
MPRT_KERNEL void mprt_trilu(int upper, long k, long count, long rows, long cols, int es,
                            const void *x, void *y)
{
    size_t s = (size_t)es;
    for (long m = 0; m < count; m++)
        for (long r = 0; r < rows; r++) {
            long lo = upper ? r + k : 0, hi = upper ? cols : r + k + 1;
            lo = lo < 0 ? 0 : lo > cols ? cols : lo;
            hi = hi < lo ? lo : hi > cols ? cols : hi;
            size_t row = (size_t)(m * rows + r) * (size_t)cols;
            char *yr = (char *)y + row * s;
            const char *xr = (const char *)x + row * s;
            memset(yr, 0, (size_t)lo * s);
            memmove(yr + (size_t)lo * s, xr + (size_t)lo * s, (size_t)(hi - lo) * s);
            memset(yr + (size_t)hi * s, 0, (size_t)(cols - hi) * s);
        }
}

/* ---- Mod, with broadcasting, in the operands' own type ---- */

/* Integers: C's remainder (c_fmod), or the one whose sign is the
 * divisor's, as in Python. A zero divisor gives 0, as numpy does, where C
 * leaves it undefined; so does -1, whose remainder is always 0, where C's
 * INT64_MIN % -1 traps. */
static int64_t mprt_mod_int(int c_fmod, int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    return c_fmod || r == 0 || (r < 0) == (b < 0) ? r : r + b;
}

/* Floats, numpy's rule (ONNX's reference): C's fmod, moved by the divisor
 * when the signs differ; a zero remainder takes the divisor's sign. In
 * float for float32 operands, as numpy computes them. */
static float mprt_mod_f32(int c_fmod, float a, float b)
{
    float r = fmodf(a, b);
    if (c_fmod || b == 0)
        return r;
    if (r == 0)
        return copysignf(0.0f, b);
    return (r < 0) != (b < 0) ? r + b : r;
}

static double mprt_mod_f64(int c_fmod, double a, double b)
{
    double r = fmod(a, b);
    if (c_fmod || b == 0)
        return r;
    if (r == 0)
        return copysign(0.0, b);
    return (r < 0) != (b < 0) ? r + b : r;
}

/* y = a mod b with broadcasting; type is both operands' and y's. */
MPRT_KERNEL void mprt_mod(int c_fmod, int type, int rank, const long *shape, const void *a,
                          const long *sa, const void *b, const long *sb, void *y)
{
    long n = 1, idx[8] = {0}, off[2] = {0, 0};
    const long *s[2] = {sa, sb};
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    for (long i = 0; i < n; i++) {
        if (type == MPRT_ELEM_F32)
            ((float *)y)[i] = mprt_mod_f32(c_fmod, ((const float *)a)[off[0]],
                                           ((const float *)b)[off[1]]);
        else if (type == MPRT_ELEM_F64)
            ((double *)y)[i] = mprt_mod_f64(c_fmod, ((const double *)a)[off[0]],
                                            ((const double *)b)[off[1]]);
        else
            mprt_elem_put(type, y, i, mprt_mod_int(c_fmod, mprt_elem_int(type, a, off[0]),
                                                   mprt_elem_int(type, b, off[1])));
        mprt_bcast_next(rank, shape, idx, 2, off, s);
    }
}

/* ---- GatherElements, ScatterElements, GatherND and ScatterND: elements
 * of any type (MPRT_ELEM_*) named by int32 or int64 indices (itype), each
 * checked as Gather's are; their float32 gradients ---- */

/* y[i] = x[j] */
static void mprt_elem_copy(int type, void *y, long i, const void *x, long j)
{
    size_t sz = mprt_elem_size(type);
    memcpy((char *)y + (size_t)i * sz, (const char *)x + (size_t)j * sz, sz);
}

/* a combined with b by a scatter's reduction (ADD, MUL, MAX, MIN): max and
 * min keep a NaN from either side, as numpy's maximum does. Integers wrap. */
static float mprt_combine_f32(int red, float a, float b)
{
    switch (red) {
    case MPRT_SCATTER_ADD: return a + b;
    case MPRT_SCATTER_MUL: return a * b;
    case MPRT_SCATTER_MAX: return b > a || b != b ? b : a;
    default: return b < a || b != b ? b : a;
    }
}

static double mprt_combine_f64(int red, double a, double b)
{
    switch (red) {
    case MPRT_SCATTER_ADD: return a + b;
    case MPRT_SCATTER_MUL: return a * b;
    case MPRT_SCATTER_MAX: return b > a || b != b ? b : a;
    default: return b < a || b != b ? b : a;
    }
}

static int64_t mprt_combine_int(int red, int64_t a, int64_t b)
{
    switch (red) {
    case MPRT_SCATTER_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case MPRT_SCATTER_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case MPRT_SCATTER_MAX: return b > a ? b : a;
    default: return b < a ? b : a;
    }
}

/* y[i] = u[j] (SCATTER_NONE), 0 (SCATTER_ZERO), or y[i] combined with
 * u[j] by the reduction red. */
static void mprt_scatter_put(int red, int type, void *y, long i, const void *u, long j)
{
    if (red == MPRT_SCATTER_NONE) {
        mprt_elem_copy(type, y, i, u, j);
    } else if (red == MPRT_SCATTER_ZERO) {
        size_t sz = mprt_elem_size(type);
        memset((char *)y + (size_t)i * sz, 0, sz);
    } else if (type == MPRT_ELEM_F32) {
        float *p = (float *)y + i;
        *p = mprt_combine_f32(red, *p, ((const float *)u)[j]);
    } else if (type == MPRT_ELEM_F64) {
        double *p = (double *)y + i;
        *p = mprt_combine_f64(red, *p, ((const double *)u)[j]);
    } else {
        int64_t v = mprt_combine_int(red, mprt_elem_int(type, y, i), mprt_elem_int(type, u, j));
        mprt_elem_put(type, y, i, v);
    }
}

/* Where index element i (at coordinates c of the indices' shape) points
 * in data of shape xs: c with c[axis] replaced by the index. */
static long mprt_elements_at(int itype, int rank, int axis, const long *xs, const long *c,
                             const void *idx, long i, const char *node)
{
    long off = 0;
    for (int d = 0; d < rank; d++) {
        long k = d == axis ? mprt_gather_index(mprt_elem_int(itype, idx, i), xs[d], node) : c[d];
        off = off * xs[d] + k;
    }
    return off;
}

/* The next coordinates of a row-major walk over shape s. */
static void mprt_coords_next(int rank, const long *s, long *c)
{
    for (int d = rank - 1; d >= 0 && ++c[d] == s[d]; d--)
        c[d] = 0;
}

/* GatherElements: y (shaped like the indices, is) takes, for each index,
 * the element of x (shape xs) at the index's own coordinates but for the
 * axis, where it takes the index. */
MPRT_KERNEL void mprt_gather_elements(int type, int itype, int rank, int axis, const long *xs,
                                      const long *is, const void *idx, const void *x, void *y,
                                      const char *node)
{
    long n = mprt_numel(rank, is), c[8] = {0};
    for (long i = 0; i < n; i++) {
        mprt_elem_copy(type, y, i, x, mprt_elements_at(itype, rank, axis, xs, c, idx, i, node));
        mprt_coords_next(rank, is, c);
    }
}

/* In the indices' order, the element of y GatherElements would read for
 * each index takes u's element there under red (a repeated index keeps
 * the last for NONE, and combines them all, in order, otherwise). */
static void mprt_scatter_walk(int red, int type, int itype, int rank, int axis, const long *xs,
                              const long *is, const void *idx, const void *u, void *y,
                              const char *node)
{
    long n = mprt_numel(rank, is), c[8] = {0};
    for (long i = 0; i < n; i++) {
        mprt_scatter_put(red, type, y, mprt_elements_at(itype, rank, axis, xs, c, idx, i, node),
                         u, i);
        mprt_coords_next(rank, is, c);
    }
}

/* ScatterElements: y = x, then the updates u (shaped like the indices)
 * under the reduction red (MPRT_SCATTER_*). y may be x. */
MPRT_KERNEL void mprt_scatter_elements(int red, int type, int itype, int rank, int axis,
                                       const long *xs, const long *is, const void *idx,
                                       const void *x, const void *u, void *y, const char *node)
{
    if (x != y)
        memcpy(y, x, (size_t)mprt_numel(rank, xs) * mprt_elem_size(type));
    mprt_scatter_walk(red, type, itype, rank, axis, xs, is, idx, u, y, node);
}

/* GatherElements' gradient: dx = 0, then dy scatter-added at the indices
 * (repeated indices add up, in order). */
MPRT_KERNEL void mprt_gather_elements_grad(int itype, int rank, int axis, const long *xs,
                                           const long *is, const void *idx, const float *dy,
                                           float *dx, const char *node)
{
    memset(dx, 0, (size_t)mprt_numel(rank, xs) * sizeof *dx);
    mprt_scatter_walk(MPRT_SCATTER_ADD, MPRT_ELEM_F32, itype, rank, axis, xs, is, idx, dy, dx,
                      node);
}

/* ScatterElements' gradient with respect to the data (reduction none):
 * dy, zero where an update replaced the element. */
MPRT_KERNEL void mprt_scatter_elements_grad(int itype, int rank, int axis, const long *xs,
                                            const long *is, const void *idx, const float *dy,
                                            float *dx, const char *node)
{
    if (dx != dy)
        memcpy(dx, dy, (size_t)mprt_numel(rank, xs) * sizeof *dx);
    mprt_scatter_walk(MPRT_SCATTER_ZERO, MPRT_ELEM_F32, itype, rank, axis, xs, is, idx, dy, dx,
                      node);
}

/* The slot of x's first k dims (dims) that index row `at` names. */
static long mprt_nd_slot(int itype, const void *idx, long at, int k, const long *dims,
                         const char *node)
{
    long s = 0;
    for (int q = 0; q < k; q++)
        s = s * dims[q] + mprt_gather_index(mprt_elem_int(itype, idx, at + q), dims[q], node);
    return s;
}

/* GatherND: x is nbatch x dims[0..k) x inner, the indices nbatch x nrows
 * x k, y nbatch x nrows x inner: row r of batch b copies the inner block
 * its k indices name in batch b of x. */
MPRT_KERNEL void mprt_gather_nd(int type, int itype, long nbatch, long nrows, int k,
                                const long *dims, long inner, const void *idx, const void *x,
                                void *y, const char *node)
{
    long slots = mprt_numel(k, dims);
    for (long b = 0; b < nbatch; b++)
        for (long r = 0; r < nrows; r++) {
            long row = b * nrows + r;
            long from = (b * slots + mprt_nd_slot(itype, idx, row * k, k, dims, node)) * inner;
            for (long j = 0; j < inner; j++)
                mprt_elem_copy(type, y, row * inner + j, x, from + j);
        }
}

/* Row by row, the block of y a row of indices names takes u's row under
 * red, as mprt_scatter_walk does. */
static void mprt_scatter_nd_walk(int red, int type, int itype, long nbatch, long nrows, int k,
                                 const long *dims, long inner, const void *idx, const void *u,
                                 void *y, const char *node)
{
    long slots = mprt_numel(k, dims);
    for (long b = 0; b < nbatch; b++)
        for (long r = 0; r < nrows; r++) {
            long row = b * nrows + r;
            long to = (b * slots + mprt_nd_slot(itype, idx, row * k, k, dims, node)) * inner;
            for (long j = 0; j < inner; j++)
                mprt_scatter_put(red, type, y, to + j, u, row * inner + j);
        }
}

/* ScatterND: y = x, then the updates (nrows x inner) under red. y may be x. */
MPRT_KERNEL void mprt_scatter_nd(int red, int type, int itype, long nrows, int k,
                                 const long *dims, long inner, const void *idx, const void *x,
                                 const void *u, void *y, const char *node)
{
    if (x != y)
        memcpy(y, x, (size_t)(mprt_numel(k, dims) * inner) * mprt_elem_size(type));
    mprt_scatter_nd_walk(red, type, itype, 1, nrows, k, dims, inner, idx, u, y, node);
}

/* GatherND's gradient: dx = 0, then dy's rows scatter-added into the
 * blocks they came from. */
MPRT_KERNEL void mprt_gather_nd_grad(int itype, long nbatch, long nrows, int k,
                                     const long *dims, long inner, const void *idx,
                                     const float *dy, float *dx, const char *node)
{
    memset(dx, 0, (size_t)(nbatch * mprt_numel(k, dims) * inner) * sizeof *dx);
    mprt_scatter_nd_walk(MPRT_SCATTER_ADD, MPRT_ELEM_F32, itype, nbatch, nrows, k, dims, inner,
                         idx, dy, dx, node);
}

/* ScatterND's gradient with respect to the data (reduction none): dy,
 * zero in the blocks the updates replaced. */
MPRT_KERNEL void mprt_scatter_nd_grad(int itype, long nrows, int k, const long *dims,
                                      long inner, const void *idx, const float *dy, float *dx,
                                      const char *node)
{
    if (dx != dy)
        memcpy(dx, dy, (size_t)(mprt_numel(k, dims) * inner) * sizeof *dx);
    mprt_scatter_nd_walk(MPRT_SCATTER_ZERO, MPRT_ELEM_F32, itype, 1, nrows, k, dims, inner, idx,
                         dy, dx, node);
}

/* float16 from and to float32 by its bits, rounding to nearest even;
 * kernels.cu does the same, so both devices agree bit for bit. A NaN
 * stays a NaN, past float16's range is infinity. */
static float mprt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0x1f)
        x = sign | 0x7f800000u | (m << 13);
    else if (e)
        x = sign | ((e + 112) << 23) | (m << 13);
    else if (!m)
        x = sign;
    else {   /* subnormal: normalised */
        for (e = 113; !(m & 0x400); e--)
            m <<= 1;
        x = sign | (e << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t mprt_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e == 0xff)
        return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    int he = (int)e - 112;   /* float16's biased exponent */
    if (he >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (he < -10)
        return (uint16_t)sign;
    int shift = he <= 0 ? 14 - he : 13;
    if (he <= 0)
        m |= 0x800000;
    uint32_t r = (he <= 0 ? 0 : (uint32_t)he << 10) | (m >> shift);
    uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    r += rem > half || (rem == half && (r & 1));   /* a carry moves into the exponent */
    return (uint16_t)(sign | r);
}

static double mprt_cast_read(int t, const void *x, long i)
{
    switch (t) {
    case MPRT_CAST_F32: return ((const float *)x)[i];
    case MPRT_CAST_I64: return (double)((const int64_t *)x)[i];
    case MPRT_CAST_I32: return ((const int32_t *)x)[i];
    case MPRT_CAST_F64: return ((const double *)x)[i];
    case MPRT_CAST_F16: return mprt_f16_to_f32(((const uint16_t *)x)[i]);
    default: return ((const uint8_t *)x)[i];
    }
}

/* Cast as ONNX defines it: float to integer truncates toward zero; to bool
 * is "not zero". float16 rounds through float32. */
static void mprt_cast_piece(void *ctx, long lo, long hi)
{
    const MprtBcast *t = ctx;
    int from = t->op, to = t->type;
    const void *x = t->in[0];
    void *y = t->y;
    for (long i = lo; i < hi; i++) {
        double v = mprt_cast_read(from, x, i);
        switch (to) {
        case MPRT_CAST_F32: ((float *)y)[i] = (float)v; break;
        case MPRT_CAST_I64: ((int64_t *)y)[i] = (int64_t)v; break;
        case MPRT_CAST_I32: ((int32_t *)y)[i] = (int32_t)v; break;
        case MPRT_CAST_U8: ((uint8_t *)y)[i] = (uint8_t)v; break;
        case MPRT_CAST_F64: ((double *)y)[i] = v; break;
        case MPRT_CAST_F16: ((uint16_t *)y)[i] = mprt_f32_to_f16((float)v); break;
        default: ((uint8_t *)y)[i] = v != 0; break;
        }
    }
}

MPRT_KERNEL void mprt_cast(long n, int from, int to, const void *x, void *y)
{
    MprtBcast t = {.op = from, .type = to, .in = {x}, .y = y};
    mprt_par(n, MPRT_GRAIN / 2, mprt_cast_piece, &t);
}

/* ---- Resize (2-D, over the last two dimensions) ---- */

static float mprt_resize_src(const MprtResize *p, int o, int in, int out, float scale)
{
    switch (p->coord) {
    case MPRT_ALIGN_CORNERS: return out > 1 ? (float)o * (in - 1) / (out - 1) : 0.0f;
    case MPRT_ASYMMETRIC: return (float)o / scale;
    case MPRT_PYTORCH_HALF_PIXEL: return out > 1 ? (o + 0.5f) / scale - 0.5f : 0.0f;
    default: return (o + 0.5f) / scale - 0.5f;
    }
}

/* The one or two input positions an output position reads and their
 * weights (w1 = 0 for nearest). */
static void mprt_resize_taps(const MprtResize *p, int o, int in, int out, float scale,
                             int *i0, int *i1, float *w1)
{
    float s = mprt_resize_src(p, o, in, out, scale);
    if (p->mode != MPRT_LINEAR) {
        float f = p->mode == MPRT_NEAREST_FLOOR ? floorf(s)
                : p->mode == MPRT_NEAREST_CEIL ? ceilf(s)
                : p->mode == MPRT_NEAREST_ROUND_DOWN ? ceilf(s - 0.5f) : floorf(s + 0.5f);
        int k = (int)f;
        *i0 = *i1 = k < 0 ? 0 : k >= in ? in - 1 : k;
        *w1 = 0.0f;
        return;
    }
    s = s < 0 ? 0 : s;
    int k = (int)s;
    k = k >= in - 1 ? in - 1 : k;
    *i0 = k;
    *i1 = k + 1 < in ? k + 1 : k;
    *w1 = s - (float)k;
    if (*i1 == k)
        *w1 = 0.0f;
}

/* Forward (back == 0): y from x. Gradient (back != 0): dx = 0, then every
 * output's gradient is spread over the inputs it read, by their weights. */
MPRT_KERNEL void mprt_resize(int back, const MprtResize *p, float *x, float *y)
{
    size_t in_plane = (size_t)p->H * p->W, out_plane = (size_t)p->OH * p->OW;
    if (back)
        memset(x, 0, (size_t)p->NC * in_plane * sizeof *x);
    for (int oh = 0; oh < p->OH; oh++) {
        int h0, h1, w0, w1;
        float ah, aw;
        mprt_resize_taps(p, oh, p->H, p->OH, p->scale_h, &h0, &h1, &ah);
        for (int ow = 0; ow < p->OW; ow++) {
            mprt_resize_taps(p, ow, p->W, p->OW, p->scale_w, &w0, &w1, &aw);
            float c00 = (1 - ah) * (1 - aw), c01 = (1 - ah) * aw, c10 = ah * (1 - aw),
                  c11 = ah * aw;
            size_t k00 = (size_t)h0 * p->W + w0, k01 = (size_t)h0 * p->W + w1,
                   k10 = (size_t)h1 * p->W + w0, k11 = (size_t)h1 * p->W + w1;
            size_t o = (size_t)oh * p->OW + ow;
            for (long nc = 0; nc < p->NC; nc++) {
                float *xs = x + nc * in_plane;
                if (back) {
                    float g = y[nc * out_plane + o];
                    xs[k00] += c00 * g, xs[k01] += c01 * g;
                    xs[k10] += c10 * g, xs[k11] += c11 * g;
                } else {
                    y[nc * out_plane + o] = c00 * xs[k00] + c01 * xs[k01] + c10 * xs[k10] +
                                            c11 * xs[k11];
                }
            }
        }
    }
}
