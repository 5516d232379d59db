/* data.c — the trainer's data: rows of inputs and labels, from .npy files
 * or from a stream of tokens, in the order of the epochs.
 *
 * A source (MprtData) holds N rows. Row k is one sample: the model's input
 * for one row of its batch, and that row's labels. Files are checked
 * against the model and converted to its element types when loading
 * (float64 to float32, narrow integers to int64, each with a note);
 * non-finite inputs and labels that are not classes of the model are
 * refused. A token stream (--tokens) gives row k as the window
 * x = t[k*T .. k*T+T-1], y = t[k*T+1 .. k*T+T] of T tokens.
 *
 * A micro-batch of R rows fills the model's input buffer (R rows of the
 * input's shape) and its labels buffer, which holds R times the labels of
 * one row in any shape: (R, T) as well as (R*T,) for a language model
 * whose logits are flattened to (B*T, V), batch-major.
 */
#include "mprt.h"

/* A token stream: n tokens of `size` bytes (2: uint16, 4: int32, 8: int64). */
typedef struct MprtTokens {
    const unsigned char *t;
    size_t n;
    int size;
    void *map;              /* a mapped .bin file, or NULL */
    size_t mapsize;
    MprtArray arr;          /* a loaded .npy file */
} MprtTokens;

typedef struct MprtData {
    const char *name;       /* the file named in messages */
    int64_t rows;
    MprtArray x, y;         /* files: (N, ...) each */
    MprtTokens tok;         /* or a token stream (tok.t != NULL) */
    int64_t seq;            /* its window length T */
} MprtData;

/* What the data must fit: the model's input and labels buffers, R rows of
 * a micro-batch, and for cross-entropy the classes and the ignore index. */
typedef struct MprtDataSpec {
    const MprtBuffer *in, *lb;
    int64_t R;
    int64_t classes;        /* 0: the labels are not class ids */
    int64_t ignore_index;
} MprtDataSpec;

/* Elements of one row's labels: the labels buffer holds R rows' worth. */
static int64_t mprt_label_count(const MprtDataSpec *s)
{
    return (int64_t)(s->lb->nbytes / mprt_dtype_size(s->lb->dtype)) / s->R;
}

static int64_t mprt_count(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    return n;
}

/* ---- element types ---- */

static int mprt_is_int(MprtDType t)
{
    return t == MPRT_I64 || t == MPRT_I32 || t == MPRT_I16 || t == MPRT_I8 || t == MPRT_U8;
}

static int64_t mprt_int_at(const void *p, MprtDType t, size_t i)
{
    switch (t) {
    case MPRT_I64: return ((const int64_t *)p)[i];
    case MPRT_I32: return ((const int32_t *)p)[i];
    case MPRT_I16: return ((const int16_t *)p)[i];
    case MPRT_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* Converts a loaded array to the element type `to` of the model when that
 * loses nothing a user would miss: float64 to float32 (values beyond
 * float32's range become infinite and are refused later), and integers
 * narrower than `to` to `to`. Returns the type it had. */
static MprtDType mprt_convert(const char *path, MprtArray *a, MprtDType to)
{
    MprtDType from = a->dtype;
    int ints = mprt_is_int(from) && (to == MPRT_I64 || to == MPRT_I32) &&
               mprt_dtype_size(from) < mprt_dtype_size(to);
    if (from == to || !(ints || (from == MPRT_F64 && to == MPRT_F32)))
        return from;
    size_t n = a->nbytes / mprt_dtype_size(from), size = mprt_dtype_size(to);
    void *w = malloc(n * size + 8);
    if (!w)
        mprt_die("%s: out of memory converting %zu elements", path, n);
    for (size_t i = 0; i < n; i++) {
        if (from == MPRT_F64)
            ((float *)w)[i] = (float)((const double *)a->data)[i];
        else if (to == MPRT_I64)
            ((int64_t *)w)[i] = mprt_int_at(a->data, from, i);
        else
            ((int32_t *)w)[i] = (int32_t)mprt_int_at(a->data, from, i);
    }
    free(a->data);
    a->data = w, a->dtype = to, a->nbytes = n * size;
    return from;
}

/* Once the file has passed every check: one note for a conversion. */
static void mprt_note_converted(const char *path, MprtDType from, const MprtBuffer *b)
{
    if (from != b->dtype)
        fprintf(stderr, "%s: note: %s: %s converted to %s, the element type of the model's "
                "%s\n", mprt_program, path, mprt_dtype_name(from), mprt_dtype_name(b->dtype),
                b->name);
}

static void mprt_check_dtype(const char *path, const MprtArray *a, const MprtBuffer *b)
{
    if (a->dtype != b->dtype)
        mprt_die("%s: element type %s, the model's %s needs %s; save it as %s", path,
                 mprt_dtype_name(a->dtype), b->name, mprt_dtype_name(b->dtype),
                 mprt_dtype_name(b->dtype));
}

static void mprt_check_finite(const char *path, const MprtArray *a, int converted)
{
    if (a->dtype != MPRT_F32 || !a->shape[0])
        return;
    size_t n = a->nbytes / 4, per_row = n / (size_t)a->shape[0];
    for (size_t i = 0; i < n; i++)
        if (!isfinite(((float *)a->data)[i]))
            mprt_die("%s: row %zu, element %zu is not a finite number (NaN or infinity%s); "
                     "clean the data first", path, i / per_row, i % per_row,
                     converted ? ", or beyond float32's range" : "");
}

static void mprt_load_file(const char *path, MprtArray *a)
{
    char err[512];
    if (mprt_npy_load(path, a, err, sizeof err) != 0)
        mprt_die("%s", err);
}

/* ---- inputs and labels from files ---- */

/* Inputs: rows shaped like the input buffer's rows (its dims after the
 * first), in its element type. */
static void mprt_check_inputs(const char *path, const MprtArray *a, const MprtBuffer *b)
{
    char want[128], got[128];
    mprt_shape_str(a->rank, a->shape, got, sizeof got);
    int ok = a->rank == b->rank && a->shape[0] > 0;
    for (int i = 1; ok && i < b->rank; i++)
        ok = a->shape[i] == b->shape[i];
    if (!ok) {
        int64_t w[MPRT_MAX_RANK];
        memcpy(w, b->shape, sizeof w);
        w[0] = 0;
        mprt_shape_str(b->rank, w, want, sizeof want);
        mprt_die("%s: shape %s does not match the model's %s: expected (N%s with N >= 1",
                 path, got, b->name, strchr(want, ',') ? strchr(want, ',') : ",)");
    }
    mprt_check_dtype(path, a, b);
}

/* Labels: N rows (N the inputs' rows), each with the labels of one row of
 * the model's batch in any shape; or all of them in one flat (N*K,) array,
 * which becomes (N, K): returns 1 then. */
static int mprt_check_label_shape(const MprtDataSpec *s, const char *path, MprtArray *y,
                                   const char *xpath, int64_t N)
{
    int64_t K = mprt_label_count(s), per_row = y->rank ? mprt_count(y->rank - 1, y->shape + 1) : 1;
    char got[128];
    mprt_shape_str(y->rank, y->shape, got, sizeof got);
    if (y->rank == 1 && K > 1 && y->shape[0] == N * K) {
        y->rank = 2, y->shape[0] = N, y->shape[1] = K;   /* the flat form */
        return 1;
    }
    if (y->rank && y->shape[0] != N && per_row == K)
        mprt_die("%s has %lld rows but %s has %lld; they must match", xpath, (long long)N,
                 path, (long long)y->shape[0]);
    if (y->rank == 0 || y->shape[0] != N || per_row != K) {
        char want[96];
        if (K == 1)
            snprintf(want, sizeof want, "(%lld,)", (long long)N);
        else
            snprintf(want, sizeof want, "(%lld, %lld) or flat (%lld,)", (long long)N,
                     (long long)K, (long long)(N * K));
        mprt_die("%s: shape %s does not fit the model's %s: it takes %lld label(s) for each "
                 "of the %lld rows of %s (%lld for a micro-batch of %lld rows); give %s",
                 path, got, s->lb->name, (long long)K, (long long)N, xpath,
                 (long long)(K * s->R), (long long)s->R, want);
    }
    return 0;
}

/* Cross-entropy labels must name a class of the model (0 .. C-1) or be the
 * ignore index: the loss reads the log-probability a label names. */
static void mprt_check_classes(const MprtDataSpec *s, const char *path, const MprtArray *y)
{
    if (!s->classes || y->dtype != MPRT_I64 || !y->shape[0])
        return;
    size_t n = y->nbytes / 8, per_row = n / (size_t)y->shape[0];
    for (size_t i = 0; i < n; i++) {
        int64_t t = ((const int64_t *)y->data)[i];
        if ((t < 0 || t >= s->classes) && t != s->ignore_index)
            mprt_die("%s: row %zu, element %zu: label %lld is not a class of the model "
                     "(0 .. %lld) nor the ignore index (%lld); fix the labels (mpcc's "
                     "--ignore-index sets the ignored label)", path, i / per_row,
                     i % per_row, (long long)t, (long long)s->classes - 1,
                     (long long)s->ignore_index);
    }
}

/* Inputs and labels from .npy files, checked against the model and each
 * other: the training data and the evaluation data alike. */
static void mprt_data_files(const MprtDataSpec *s, const char *xpath, const char *ypath,
                            MprtData *d)
{
    memset(d, 0, sizeof *d);
    d->name = xpath;
    mprt_load_file(xpath, &d->x);
    MprtDType x0 = mprt_convert(xpath, &d->x, s->in->dtype);
    mprt_check_inputs(xpath, &d->x, s->in);
    mprt_check_finite(xpath, &d->x, x0 != d->x.dtype);
    d->rows = d->x.shape[0];
    mprt_load_file(ypath, &d->y);
    MprtDType y0 = mprt_convert(ypath, &d->y, s->lb->dtype);
    int flat = mprt_check_label_shape(s, ypath, &d->y, xpath, d->rows);
    mprt_check_dtype(ypath, &d->y, s->lb);
    mprt_check_finite(ypath, &d->y, y0 != d->y.dtype);
    mprt_check_classes(s, ypath, &d->y);
    mprt_note_converted(xpath, x0, s->in);
    mprt_note_converted(ypath, y0, s->lb);
    if (flat)
        fprintf(stderr, "%s: note: %s: read as (%lld, %lld), %lld labels for each row of %s\n",
                mprt_program, ypath, (long long)d->rows, (long long)d->y.shape[1],
                (long long)d->y.shape[1], xpath);
}

/* ---- a stream of tokens ---- */

static int mprt_ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), k = strlen(end);
    return n >= k && strcmp(s + n - k, end) == 0;
}

/* A raw .bin file of little-endian uint16 tokens, mapped. */
static void mprt_tokens_bin(const char *path, MprtTokens *t)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        mprt_die("%s: cannot open: %s; check the path", path, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_size % 2)
        mprt_die("%s: %s; a .bin token file is raw little-endian uint16 tokens, an even "
                 "number of bytes", path, S_ISREG(st.st_mode) ? "an odd number of bytes"
                                                              : "not a regular file");
    t->size = 2;
    t->n = (size_t)st.st_size / 2;
    t->mapsize = (size_t)st.st_size;
    if (t->mapsize) {
        t->map = mmap(NULL, t->mapsize, PROT_READ, MAP_PRIVATE, fd, 0);
        if (t->map == MAP_FAILED)
            mprt_die("%s: cannot map: %s", path, strerror(errno));
        t->t = t->map;
    }
    close(fd);
}

static void mprt_tokens_npy(const char *path, MprtTokens *t)
{
    mprt_load_file(path, &t->arr);
    MprtDType k = t->arr.dtype;
    if (t->arr.rank != 1 || !(k == MPRT_I64 || k == MPRT_I32)) {
        char got[128];
        mprt_shape_str(t->arr.rank, t->arr.shape, got, sizeof got);
        mprt_die("%s: %s %s; a token file is 1-D int32 or int64 (.npy) or raw uint16 (.bin)",
                 path, mprt_dtype_name(k), got);
    }
    t->size = (int)mprt_dtype_size(k);
    t->n = (size_t)t->arr.shape[0];
    t->t = t->arr.data;
}

static int64_t mprt_token(const MprtTokens *t, size_t i)
{
    const unsigned char *p = t->t + i * (size_t)t->size;
    if (t->size == 2)
        return (int64_t)p[0] | (int64_t)p[1] << 8;
    if (t->size == 4) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Windows of T tokens: the input holds T int64 or int32 tokens per row and
 * the labels T per row; every token must be a class of the model (it is an
 * input to its embedding and a label). */
static void mprt_data_tokens(const MprtDataSpec *s, const char *path, int64_t seq, MprtData *d)
{
    memset(d, 0, sizeof *d);
    d->name = path;
    int64_t T = (int64_t)(s->in->nbytes / mprt_dtype_size(s->in->dtype)) / s->R;
    if (!(s->in->dtype == MPRT_I64 || s->in->dtype == MPRT_I32) || mprt_label_count(s) != T ||
        !s->classes)
        mprt_die("%s: a token stream trains a language model: integer tokens in, one class "
                 "label per token out; the model's %s is %s with %lld per row and its %s "
                 "holds %lld per row; give --data and --labels instead", path, s->in->name,
                 mprt_dtype_name(s->in->dtype), (long long)T, s->lb->name,
                 (long long)mprt_label_count(s));
    if (seq && seq != T)
        mprt_die("--seq %lld: the model was compiled for sequences of %lld tokens (its %s "
                 "holds %lld per row); give --seq %lld, or recompile it (mpcc --shapes)",
                 (long long)seq, (long long)T, s->in->name, (long long)T, (long long)T);
    if (mprt_ends_with(path, ".bin"))
        mprt_tokens_bin(path, &d->tok);
    else if (mprt_ends_with(path, ".npy"))
        mprt_tokens_npy(path, &d->tok);
    else
        mprt_die("%s: give a .npy file (1-D int32 or int64 tokens) or a .bin file (raw "
                 "uint16 tokens, as nanoGPT's prepare.py writes)", path);
    d->seq = T;
    d->rows = d->tok.n ? (int64_t)((d->tok.n - 1) / (size_t)T) : 0;
    if (d->rows < 1)
        mprt_die("%s: %zu tokens make no window of %lld and the token after it; give at "
                 "least %lld tokens", path, d->tok.n, (long long)T, (long long)T + 1);
    for (size_t i = 0; i < (size_t)(d->rows * T + 1); i++) {
        int64_t v = mprt_token(&d->tok, i);
        if (v < 0 || v >= s->classes)
            mprt_die("%s: token %zu is %lld, not a class of the model (0 .. %lld); is it "
                     "the tokenizer the model was built for?", path, i, (long long)v,
                     (long long)s->classes - 1);
    }
}

static void mprt_data_free(MprtData *d)
{
    mprt_array_free(&d->x);
    mprt_array_free(&d->y);
    mprt_array_free(&d->tok.arr);
    if (d->tok.map)
        munmap(d->tok.map, d->tok.mapsize);
    memset(d, 0, sizeof *d);
}

/* ---- random data, for --synthetic ---- */

/* SplitMix64: the generator of --synthetic data and of --shuffle. */
static uint64_t mprt_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* rows rows of `per_row` elements of b's type: integers 0 .. classes-1,
 * floats uniform in [-1, 1). */
static void mprt_synthetic_array(const MprtBuffer *b, int64_t rows, int64_t per_row,
                                 int64_t classes, uint64_t seed, MprtArray *a)
{
    memset(a, 0, sizeof *a);
    a->dtype = b->dtype;
    a->rank = 2;
    a->shape[0] = rows, a->shape[1] = per_row;
    a->nbytes = (size_t)(rows * per_row) * mprt_dtype_size(b->dtype);
    a->data = malloc(a->nbytes + 8);
    if (!a->data)
        mprt_die("out of memory for synthetic data");
    uint64_t s = seed;
    for (size_t i = 0; i < (size_t)(rows * per_row); i++) {
        if (a->dtype == MPRT_I64)
            ((int64_t *)a->data)[i] = (int64_t)(mprt_rand(&s) % (uint64_t)classes);
        else if (a->dtype == MPRT_I32)
            ((int32_t *)a->data)[i] = (int32_t)(mprt_rand(&s) % (uint64_t)classes);
        else   /* 53 random bits scaled to [-1, 1) */
            ((float *)a->data)[i] = (float)((double)(mprt_rand(&s) >> 11) * 0x1p-52 - 1);
    }
}

/* One batch of random rows; integer data (labels, token ids) is 0 or 1. */
static void mprt_data_synthetic(const MprtDataSpec *s, int64_t rows, uint64_t seed, MprtData *d)
{
    memset(d, 0, sizeof *d);
    d->name = "synthetic data";
    d->rows = rows;
    int64_t in_row = (int64_t)(s->in->nbytes / mprt_dtype_size(s->in->dtype)) / s->R;
    mprt_synthetic_array(s->in, rows, in_row, 2, seed, &d->x);
    mprt_synthetic_array(s->lb, rows, mprt_label_count(s), 2, seed + 1, &d->y);
}

/* ---- the order of the rows ----
 *
 * Training reads one stream of rows, epoch after epoch: position p (step i,
 * micro-batch j of M, row r: p = i*B + j*B/M + r) is row k = p mod N of
 * epoch e = p / N, for N rows of data. Without --shuffle every epoch is the
 * file order: row k. With --shuffle, epoch e is the permutation perm_e,
 * row perm_e[k], drawn by Fisher-Yates: perm = 0 .. N-1; for k = N-1 down
 * to 1, swap perm[k] and perm[next() mod (k+1)], where next() is
 * SplitMix64 (mprt_rand) started from state mix(seed + (e+1)*gamma) (the
 * e-th output of SplitMix64 seeded with --seed; gamma = 0x9e3779b97f4a7c15,
 * mix the output function). The order depends on the position only, so
 * --resume continues it, and a batch that crosses the end of an epoch
 * takes its last rows from the next one. */
typedef struct MprtOrder {
    int shuffle;
    uint64_t seed;
    int64_t rows;
    int64_t epoch;      /* the epoch perm holds, -1 before the first */
    int64_t *perm;      /* --shuffle: rows entries */
} MprtOrder;

static void mprt_order_init(MprtOrder *o, int shuffle, uint64_t seed, int64_t rows)
{
    *o = (MprtOrder){shuffle, seed, rows, -1, NULL};
    if (shuffle && !(o->perm = malloc((size_t)rows * sizeof *o->perm)))
        mprt_die("out of memory for the order of %lld rows", (long long)rows);
}

static int64_t mprt_row(MprtOrder *o, int64_t p)
{
    int64_t e = p / o->rows, k = p % o->rows;
    if (!o->shuffle)
        return k;
    if (e != o->epoch) {
        uint64_t start = o->seed + (uint64_t)e * 0x9e3779b97f4a7c15ull;
        uint64_t s = mprt_rand(&start);
        for (int64_t i = 0; i < o->rows; i++)
            o->perm[i] = i;
        for (int64_t i = o->rows - 1; i > 0; i--) {
            int64_t j = (int64_t)(mprt_rand(&s) % (uint64_t)(i + 1)), t = o->perm[i];
            o->perm[i] = o->perm[j];
            o->perm[j] = t;
        }
        o->epoch = e;
    }
    return o->perm[k];
}

/* ---- a micro-batch ---- */

/* Row k's inputs (labels: 0) or labels (1) into dst, in b's element type. */
static void mprt_copy_row(const MprtData *d, int labels, int64_t k, const MprtBuffer *b,
                          size_t row_bytes, unsigned char *dst)
{
    if (!d->tok.t) {
        const MprtArray *a = labels ? &d->y : &d->x;
        memcpy(dst, (const char *)a->data + (size_t)k * row_bytes, row_bytes);
        return;
    }
    size_t first = (size_t)(k * d->seq) + (size_t)labels;
    for (int64_t j = 0; j < d->seq; j++) {
        int64_t v = mprt_token(&d->tok, first + (size_t)j);
        if (b->dtype == MPRT_I64)
            ((int64_t *)dst)[j] = v;
        else
            ((int32_t *)dst)[j] = (int32_t)v;
    }
}

/* Rows rows[0 .. n-1] into the first n of the buffer's R rows; the rest is
 * padding: pad in every element of an int64 buffer, zero otherwise. */
static void mprt_fill(const MprtData *d, int labels, const MprtBuffer *b, int64_t R,
                      const int64_t *rows, int64_t n, int64_t pad, int mb)
{
    size_t row = b->nbytes / (size_t)R;
    unsigned char *dst = mprt_ops->dev_stage(b->dev, mprt_slot(b, mb), b->nbytes);
    for (int64_t r = 0; r < n; r++)
        mprt_copy_row(d, labels, rows[r], b, row, dst + (size_t)r * row);
    size_t used = (size_t)n * row;
    if (b->dtype == MPRT_I64)
        for (size_t i = used / 8; i < b->nbytes / 8; i++)
            ((int64_t *)dst)[i] = pad;
    else
        memset(dst + used, 0, b->nbytes - used);
    mprt_ops->dev_commit(b->dev, mprt_slot(b, mb), dst, b->nbytes);
}
