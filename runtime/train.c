/* train.c — the generated trainer's main loop and command line.
 *
 * The generated code (after this file) describes the model in one MprtModel:
 * its devices, each with one arena; its buffers (parameters, optimizer
 * state, the inputs and labels of every micro-batch, each at a device,
 * an offset and a slot per micro-batch); and the step, which enqueues every
 * device's actions and copies on the streams of runtime/stream.c. This file
 * loads the data and the weights, runs the steps, reports progress and
 * writes checkpoints. The buffer table, errors and weight loading are
 * program.c's.
 */
#include "mprt.h"

#include <math.h>
#include <time.h>

enum { MPRT_LOSS_CROSS_ENTROPY, MPRT_LOSS_MSE };

typedef struct MprtModel {
    const char *program, *mpcc_version, *model_file, *model_hash, *weights_file;
    int batch, microbatches;
    double lr;
    int ndev;
    const size_t *arena_bytes;          /* [ndev] */
    const size_t *work_offset;          /* [ndev]: the kernels' scratch in the arena */
    const size_t *work_bytes;           /* [ndev] */
    const char *const *device_names;    /* [ndev] */
    int nstreams, nevents, nops;
    const MprtOpInfo *ops;              /* [nops]: for --trace */
    const MprtProfNode *prof_nodes;     /* for --profile */
    int nprof_nodes;
    int norm_terms;             /* --clip-norm: the entries of mprt_norm_sq */
    const MprtBuffer *buffers;
    int nbuffers;
    int loss_kind;              /* MPRT_LOSS_*: how evaluation scores the output */
    int64_t ignore_index;       /* cross-entropy: labels that are not scored */
    int log_prob_dev;           /* cross-entropy: where the loss kernel leaves */
    size_t log_prob_offset;     /* the log-softmax of micro-batch 0 */
    void (*zero_state)(void);
    void (*run_step)(void);     /* every micro-batch forward and backward, the update */
    void (*eval_forward)(void); /* micro-batch 0 forward through every stage */
} MprtModel;

static long mprt_step_no;             /* the step being run, from 0 */
static float mprt_lr;                 /* its learning rate */

typedef struct MprtArgs {
    const char *data, *labels, *save, *resume, *weights, *loss_log;
    const char *eval_data, *eval_labels, *trace, *profile;
    long steps, epochs, log_every, eval_every;
    double lr;
    unsigned long seed;
    int synthetic, shuffle;
} MprtArgs;

static void mprt_usage(const MprtModel *m)
{
    printf("usage: %s --data x.npy --labels y.npy [options]\n"
           "\n"
           "Trains %s (compiled by mpcc %s) on %d %s device(s).\n"
           "\n"
           "Data:\n"
           "  --data FILE        inputs, .npy, one row per sample (C order, little-endian)\n"
           "  --labels FILE      labels, .npy: int64 class ids (or float targets for mse)\n"
           "  --synthetic        random inputs and labels instead of files (benchmarks)\n"
           "  --shuffle          visit the rows in a new random order every epoch\n"
           "  Step i uses positions i*B .. i*B+B-1 (B = %d) of a stream of epochs: each\n"
           "  epoch is every row once, in file order, or with --shuffle in a permutation\n"
           "  drawn from --seed and the epoch number (the same seed, the same order;\n"
           "  --resume continues it). A batch that crosses the end of an epoch takes its\n"
           "  last rows from the next one. The exact rule is in mpcc's docs/trainer.md.\n"
           "\n"
           "Training:\n"
           "  --steps N          optimizer steps (default: one epoch)\n"
           "  --epochs E         passes over the data (instead of --steps)\n"
           "  --lr F             learning rate (default %g, as compiled)\n"
           "  --seed S           seed for --shuffle, Dropout masks and --synthetic data\n"
           "                     (default 0)\n"
           "\n"
           "Evaluation:\n"
           "  --eval-data FILE   held-out inputs, .npy, checked like --data\n"
           "  --eval-labels FILE their labels, .npy, checked like --labels\n"
           "  --eval-every N     also evaluate after steps N, 2N, 3N, ... (default: only\n"
           "                     after the last step)\n"
           "  Evaluation runs the model in inference mode (BatchNorm normalises with its\n"
           "  running statistics, Dropout is the identity) over every row, in batches of\n"
           "  %d (the last one padded, the padding not scored), and prints the mean loss\n"
           "  and, for cross-entropy, the accuracy (argmax over the classes; labels equal\n"
           "  to the ignore index are not counted) on stderr. It changes no weight,\n"
           "  optimizer state or running statistic.\n"
           "\n"
           "Weights and checkpoints:\n"
           "  --weights FILE     initial weights (default %s)\n"
           "  --save FILE        write a safetensors checkpoint at the end (weights,\n"
           "                     optimizer state, step); written whole or not at all\n"
           "  --resume FILE      continue from a checkpoint\n"
           "\n"
           "Output:\n"
           "  --log-every N      a progress line every N steps on stderr (default 10)\n"
           "  --loss-log FILE    write every step's loss, one per line\n"
           "  --trace FILE       write the last step's measured timeline (Chrome trace\n"
           "                     format, as mpcc --trace writes the predicted one)\n"
           "  --profile FILE     time every node (after the first step) and write the\n"
           "                     mean per call and the micro-batch's rows as JSON; mpcc\n"
           "                     --measured=FILE then plans with these times instead of\n"
           "                     its estimates\n"
           "  --help             this text\n",
           m->program, m->model_file, m->mpcc_version, m->ndev,
           strncmp(m->device_names[0], "cuda", 4) == 0 ? "CUDA" : "CPU", m->batch, m->lr, m->batch / m->microbatches,
           m->weights_file);
}

static long mprt_arg_long(const char *opt, const char *v, long lo)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo)
        mprt_die("%s expects a whole number of at least %ld, got '%s'", opt, lo, v);
    return x;
}

static void mprt_parse_args(const MprtModel *m, int argc, char **argv, MprtArgs *a)
{
    memset(a, 0, sizeof *a);
    a->lr = m->lr;
    a->log_every = 10;
    a->weights = mprt_default_weights(m->weights_file);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            mprt_usage(m);
            exit(0);
        }
        if (strcmp(o, "--synthetic") == 0) {
            a->synthetic = 1;
            continue;
        }
        if (strcmp(o, "--shuffle") == 0) {
            a->shuffle = 1;
            continue;
        }
        if (!v)
            mprt_die("%s: unknown option or missing value; see --help", o);
        i++;
        if (strcmp(o, "--data") == 0) a->data = v;
        else if (strcmp(o, "--labels") == 0) a->labels = v;
        else if (strcmp(o, "--save") == 0) a->save = v;
        else if (strcmp(o, "--resume") == 0) a->resume = v;
        else if (strcmp(o, "--weights") == 0) a->weights = v;
        else if (strcmp(o, "--loss-log") == 0) a->loss_log = v;
        else if (strcmp(o, "--eval-data") == 0) a->eval_data = v;
        else if (strcmp(o, "--eval-labels") == 0) a->eval_labels = v;
        else if (strcmp(o, "--trace") == 0) a->trace = v;
        else if (strcmp(o, "--profile") == 0) a->profile = v;
        else if (strcmp(o, "--eval-every") == 0) a->eval_every = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--steps") == 0) a->steps = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--epochs") == 0) a->epochs = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--log-every") == 0) a->log_every = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--seed") == 0) a->seed = (unsigned long)mprt_arg_long(o, v, 0);
        else if (strcmp(o, "--lr") == 0) {
            char *end;
            a->lr = strtod(v, &end);
            if (end == v || *end || !(a->lr >= 0))
                mprt_die("--lr expects a non-negative number, got '%s'", v);
        } else
            mprt_die("unknown option '%s'; see --help", o);
    }
    if (!a->synthetic && (!a->data || !a->labels))
        mprt_die("give --data and --labels (or --synthetic); see --help");
    if (!a->eval_data != !a->eval_labels)
        mprt_die("give both --eval-data and --eval-labels, or neither");
    if (a->eval_every && !a->eval_data)
        mprt_die("--eval-every needs --eval-data and --eval-labels");
}

/* ---- data ---- */

static const MprtBuffer *mprt_buffer_of(const MprtModel *m, int kind)
{
    for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].kind == kind)
            return &m->buffers[i];
    return NULL;
}

/* The file must hold rows shaped like the buffer's rows (dims after the
 * first), with the buffer's element type. */
static void mprt_check_rows(const char *path, const MprtArray *a, const MprtBuffer *b)
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
    if (a->dtype != b->dtype)
        mprt_die("%s: element type %s, the model's %s needs %s", path,
                 mprt_dtype_name(a->dtype), b->name, mprt_dtype_name(b->dtype));
}

static void mprt_load_npy(const char *path, const MprtBuffer *b, MprtArray *a)
{
    char err[512];
    if (mprt_npy_load(path, a, err, sizeof err) != 0)
        mprt_die("%s", err);
    if (a->dtype == MPRT_I32 && b->dtype == MPRT_I64) {   /* widen int32 labels */
        size_t n = a->nbytes / 4;
        int64_t *w = malloc(n * 8 + 8);
        if (!w)
            mprt_die("%s: out of memory", path);
        for (size_t i = 0; i < n; i++)
            w[i] = ((int32_t *)a->data)[i];
        free(a->data);
        a->data = w, a->dtype = MPRT_I64, a->nbytes = n * 8;
    }
    mprt_check_rows(path, a, b);
    size_t per_row = a->nbytes / 4 / (size_t)a->shape[0];
    if (a->dtype == MPRT_F32)
        for (size_t i = 0; i < a->nbytes / 4; i++)
            if (!isfinite(((float *)a->data)[i]))
                mprt_die("%s: row %zu, element %zu is not a finite number (NaN or "
                         "infinity); clean the data first", path, i / per_row, i % per_row);
}

/* Cross-entropy labels must name a class of the model (0 .. C-1) or be the
 * ignore index: the loss reads the log-probability a label names. */
static void mprt_check_labels(const MprtModel *m, const char *path, const MprtArray *y)
{
    const MprtBuffer *out = mprt_buffer_of(m, MPRT_OUTPUT);
    if (m->loss_kind != MPRT_LOSS_CROSS_ENTROPY || y->dtype != MPRT_I64 || !out)
        return;
    int64_t classes = out->shape[1];
    size_t n = y->nbytes / 8, per_row = n / (size_t)y->shape[0];
    for (size_t i = 0; i < n; i++) {
        int64_t t = ((const int64_t *)y->data)[i];
        if ((t < 0 || t >= classes) && t != m->ignore_index)
            mprt_die("%s: row %zu, element %zu: label %lld is not a class of the model "
                     "(0 .. %lld) nor the ignore index (%lld); fix the labels (mpcc's "
                     "--ignore-index sets the ignored label)", path, i / per_row,
                     i % per_row, (long long)t, (long long)classes - 1,
                     (long long)m->ignore_index);
    }
}

/* Inputs and labels from files, checked against the model and each other:
 * the training data and the evaluation data alike. */
static void mprt_load_data(const MprtModel *m, const char *xpath, const char *ypath,
                           MprtArray *x, MprtArray *y)
{
    mprt_load_npy(xpath, mprt_buffer_of(m, MPRT_INPUT), x);
    mprt_load_npy(ypath, mprt_buffer_of(m, MPRT_LABELS), y);
    if (x->shape[0] != y->shape[0])
        mprt_die("%s has %lld rows but %s has %lld; they must match", xpath,
                 (long long)x->shape[0], ypath, (long long)y->shape[0]);
    mprt_check_labels(m, ypath, y);
}

/* SplitMix64: the generator of --synthetic data and of --shuffle. */
static uint64_t mprt_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void mprt_synthetic(const MprtBuffer *b, int rows, int64_t classes, uint64_t seed,
                           MprtArray *a)
{
    memset(a, 0, sizeof *a);
    a->dtype = b->dtype;
    a->rank = b->rank;
    memcpy(a->shape, b->shape, sizeof a->shape);
    a->shape[0] = rows;
    size_t row = b->nbytes / (size_t)b->shape[0];
    a->nbytes = row * (size_t)rows;
    a->data = malloc(a->nbytes + 8);
    if (!a->data)
        mprt_die("out of memory for synthetic data");
    uint64_t s = seed;
    for (size_t i = 0; i < a->nbytes / mprt_dtype_size(a->dtype); i++) {
        if (a->dtype == MPRT_I64)
            ((int64_t *)a->data)[i] = (int64_t)(mprt_rand(&s) % (uint64_t)classes);
        else
            ((float *)a->data)[i] = (float)((double)(mprt_rand(&s) >> 11) / 9007199254740992.0 * 2 - 1);
    }
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

/* Copies rows[0 .. n-1] of the data into the buffer's first n rows; the
 * rest of the buffer is padding: pad in every element of an int64 buffer,
 * zero otherwise. */
static void mprt_fill(const MprtBuffer *b, const MprtArray *a, const int64_t *rows, int64_t n,
                      int64_t pad, int mb)
{
    size_t row = b->nbytes / (size_t)b->shape[0];
    unsigned char *dst = mprt_dev_stage(b->dev, mprt_slot(b, mb), b->nbytes);
    for (int64_t r = 0; r < n; r++)
        memcpy(dst + (size_t)r * row, (char *)a->data + (size_t)rows[r] * row, row);
    size_t used = (size_t)n * row;
    if (b->dtype == MPRT_I64)
        for (size_t i = used / 8; i < b->nbytes / 8; i++)
            ((int64_t *)dst)[i] = pad;
    else
        memset(dst + used, 0, b->nbytes - used);
    mprt_dev_commit(b->dev, mprt_slot(b, mb), dst, b->nbytes);
}

/* ---- evaluation ---- */

typedef struct MprtScore {
    double loss;                /* summed over what was scored */
    int64_t correct, count;     /* count: labels (cross-entropy) or elements (mse) */
} MprtScore;

/* Scores the first n rows of the micro-batch that just ran forward. */
static void mprt_score(const MprtModel *m, const MprtBuffer *out, const MprtBuffer *lb,
                       int64_t n, MprtScore *sc)
{
    const float *x = mprt_dev_read(out->dev, mprt_slot(out, 0), out->nbytes, 0);
    int64_t per_row = (int64_t)(lb->nbytes / mprt_dtype_size(lb->dtype) / (size_t)lb->shape[0]);
    if (m->loss_kind == MPRT_LOSS_MSE) {
        const float *t = mprt_dev_read(lb->dev, mprt_slot(lb, 0), lb->nbytes, 1);
        for (int64_t i = 0; i < n * per_row; i++)
            sc->loss += (double)(x[i] - t[i]) * (x[i] - t[i]);
        sc->count += n * per_row;
        return;
    }
    /* scores (n, C, D...) and labels (n, D...): D positions per row */
    const float *lp = mprt_dev_read(m->log_prob_dev, mprt_arenas[m->log_prob_dev] +
                                    m->log_prob_offset, out->nbytes, 2);
    const int64_t *t = mprt_dev_read(lb->dev, mprt_slot(lb, 0), lb->nbytes, 1);
    int64_t C = out->shape[1], D = per_row;
    for (int64_t r = 0; r < n; r++)
        for (int64_t d = 0; d < D; d++) {
            int64_t label = t[r * D + d], best = 0;
            if (label == m->ignore_index)
                continue;
            const float *xs = x + r * C * D + d;
            for (int64_t c = 1; c < C; c++)
                if (xs[c * D] > xs[best * D])
                    best = c;
            sc->loss -= lp[(r * C + label) * D + d];
            sc->correct += best == label;
            sc->count++;
        }
}

/* Runs the model forward in inference mode over every row of x, in
 * micro-batches (the last one padded), and prints the mean loss and the
 * accuracy. Only activations, the loss and the input buffers change. */
static void mprt_evaluate(const MprtModel *m, const MprtArray *x, const MprtArray *y,
                          const char *name, long step, int64_t *rows)
{
    const MprtBuffer *in = mprt_buffer_of(m, MPRT_INPUT), *lb = mprt_buffer_of(m, MPRT_LABELS),
                     *out = mprt_buffer_of(m, MPRT_OUTPUT);
    int ce = m->loss_kind == MPRT_LOSS_CROSS_ENTROPY;
    int64_t R = in->shape[0], N = x->shape[0];
    MprtScore sc = {0, 0, 0};
    mprt_training = 0;
    for (int64_t first = 0; first < N; first += R) {
        int64_t n = N - first < R ? N - first : R;
        for (int64_t r = 0; r < n; r++)
            rows[r] = first + r;
        mprt_fill(in, x, rows, n, 0, 0);
        mprt_fill(lb, y, rows, n, ce ? m->ignore_index : 0, 0);
        m->eval_forward();
        mprt_score(m, out, lb, n, &sc);
    }
    mprt_training = 1;
    if (!sc.count) {
        fprintf(stderr, "eval step %ld: nothing to score in %s (every label is the ignore "
                "index %lld)\n", step, name, (long long)m->ignore_index);
        return;
    }
    fprintf(stderr, "eval step %ld: loss %.7g", step, sc.loss / (double)sc.count);
    if (ce)
        fprintf(stderr, "  accuracy %.4f (%lld/%lld)", (double)sc.correct / (double)sc.count,
                (long long)sc.correct, (long long)sc.count);
    fprintf(stderr, "  on %lld rows of %s\n", (long long)N, name);
}

/* ---- weights and checkpoints ---- */

/* A --save path that cannot be written fails before training, not after. */
static void mprt_check_writable(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wx");
    if (!f && errno == EEXIST)
        return;   /* a stale temporary: the writer replaces it */
    if (!f)
        mprt_die("%s: cannot write a checkpoint there: %s; check that the directory "
                 "exists and is writable", path, strerror(errno));
    fclose(f);
    remove(tmp);
}

static void mprt_save(const MprtModel *m, const char *path, long step)
{
    MprtStEntry *e = calloc((size_t)m->nbuffers, sizeof *e);
    int n = 0;
    for (int i = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        if (b->kind != MPRT_PARAM && b->kind != MPRT_STATE)
            continue;
        e[n++] = (MprtStEntry){b->name, b->dtype, b->rank, b->shape,
                               mprt_dev_hold(b->dev, mprt_slot(b, 0), b->nbytes), b->nbytes};
    }
    char steps[32], err[512];
    snprintf(steps, sizeof steps, "%ld", step);
    const char *meta[] = {"step", steps, "format", "mpcc-checkpoint", "mpcc_version",
                          m->mpcc_version, "model_sha256", m->model_hash};
    int rc = mprt_st_save(path, e, n, meta, 4, err, sizeof err);
    for (int i = 0, k = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        if (b->kind == MPRT_PARAM || b->kind == MPRT_STATE)
            mprt_dev_unhold(e[k++].data, mprt_slot(b, 0));
    }
    free(e);
    if (rc != 0)
        mprt_die("%s", err);
}

/* ---- the loop ---- */

static double mprt_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Every device's arena, and its streams. */
static void mprt_start_devices(const MprtModel *m)
{
    char err[256];
    mprt_arenas = calloc((size_t)m->ndev, sizeof *mprt_arenas);
    if (!mprt_arenas)
        mprt_die("out of memory");
    mprt_prof_nodes = m->prof_nodes;   /* names the node in a device's error */
    mprt_devices_open(m->ndev, m->device_names);
    mprt_losses_alloc(m->microbatches);
    if (m->norm_terms)
        mprt_norm_alloc(m->norm_terms);
    for (int d = 0; d < m->ndev; d++) {
        mprt_arenas[d] = mprt_arena_alloc(d, m->device_names[d], m->arena_bytes[d]);
        mprt_dev_scratch(d, mprt_arenas[d] + m->work_offset[d], m->work_bytes[d]);
    }
    if (mprt_streams_start(m->nstreams, m->nevents, m->nops, err, sizeof err) != 0)
        mprt_die("%s", err);
}

/* Once the data and the weights are in: where the step will run. */
static void mprt_report_devices(const MprtModel *m)
{
    fprintf(stderr, "memory plan:");
    for (int d = 0; d < m->ndev; d++)
        fprintf(stderr, " %s %.1f MB", m->device_names[d], (double)m->arena_bytes[d] / 1e6);
    fputc('\n', stderr);
}

/* One optimizer step over the micro-batches of step s; returns its loss
 * (mean over the micro-batches). rows holds B/M entries. */
static double mprt_step(const MprtModel *m, const MprtArray *x, const MprtArray *y,
                        MprtOrder *order, long s, float lr, int64_t *rows)
{
    const MprtBuffer *in = mprt_buffer_of(m, MPRT_INPUT), *lb = mprt_buffer_of(m, MPRT_LABELS);
    int64_t R = in->shape[0];
    for (int mb = 0; mb < m->microbatches; mb++) {
        for (int64_t r = 0; r < R; r++)
            rows[r] = mprt_row(order, (int64_t)s * m->batch + mb * R + r);
        mprt_fill(in, x, rows, R, 0, mb);
        mprt_fill(lb, y, rows, R, 0, mb);
    }
    mprt_step_no = s;
    mprt_lr = lr;
    m->run_step();
    double loss = 0;
    for (int mb = 0; mb < m->microbatches; mb++)
        loss += mprt_losses[mb];
    loss /= m->microbatches;
    if (!isfinite(loss))
        mprt_die("the loss is %g at step %ld; training stopped (try a lower --lr); no "
                 "checkpoint was written", loss, s + 1);
    return loss;
}

static int mprt_train_main(const MprtModel *m, int argc, char **argv)
{
    MprtArgs a;
    mprt_program = m->program;
    mprt_parse_args(m, argc, argv, &a);
    mprt_dropout_seed = a.seed;
    const MprtBuffer *in = mprt_buffer_of(m, MPRT_INPUT), *lb = mprt_buffer_of(m, MPRT_LABELS);
    MprtArray x, y, xe = {0}, ye = {0};
    int64_t classes = 2;   /* synthetic integer data (labels, token ids) is 0 or 1 */
    if (a.synthetic) {
        mprt_synthetic(in, m->batch, classes, a.seed, &x);
        mprt_synthetic(lb, m->batch, classes, a.seed + 1, &y);
    } else
        mprt_load_data(m, a.data, a.labels, &x, &y);
    if (a.eval_data)
        mprt_load_data(m, a.eval_data, a.eval_labels, &xe, &ye);
    if (a.save)
        mprt_check_writable(a.save);
    if (a.trace)
        mprt_check_writable(a.trace);
    if (a.profile) {
        mprt_check_writable(a.profile);
        mprt_node_seconds = calloc((size_t)m->nprof_nodes + 1, sizeof(double));
        mprt_node_calls = calloc((size_t)m->nprof_nodes + 1, sizeof(long));
        if (!mprt_node_seconds || !mprt_node_calls)
            mprt_die("out of memory");
    }
    long per_epoch = (long)((x.shape[0] + m->batch - 1) / m->batch);
    long steps = a.steps ? a.steps : (a.epochs ? a.epochs : 1) * per_epoch;
    mprt_start_devices(m);
    long start = 0;
    mprt_load_tensors(m->buffers, m->nbuffers, m->model_file, a.weights, 0, NULL);
    m->zero_state();
    if (a.resume)
        mprt_load_tensors(m->buffers, m->nbuffers, m->model_file, a.resume, 1, &start);
    FILE *log = a.loss_log ? fopen(a.loss_log, "w") : NULL;
    if (a.loss_log && !log)
        mprt_die("%s: cannot open for writing: %s", a.loss_log, strerror(errno));
    MprtOrder order;
    mprt_order_init(&order, a.shuffle, a.seed, x.shape[0]);
    int64_t *rows = malloc((size_t)in->shape[0] * sizeof *rows);
    if (!rows)
        mprt_die("out of memory");
    mprt_report_devices(m);
    double t0 = mprt_now(), t_eval = 0, last_loss = 0;
    for (long s = start; s < start + steps; s++) {
        mprt_tracing = a.trace && s + 1 == start + steps;   /* time the last step */
        mprt_profiling = a.profile && (s > start || steps == 1);   /* after a warm-up */
        double loss = mprt_step(m, &x, &y, &order, s, (float)a.lr, rows);
        last_loss = loss;
        if (log)
            fprintf(log, "%.9g\n", loss);
        if ((s + 1 - start) % a.log_every == 0 || s + 1 == start + steps) {
            double dt = mprt_now() - t0 - t_eval;
            fprintf(stderr, "step %ld/%ld  loss %.6f  lr %g  %.1f samples/s\n", s + 1,
                    start + steps, loss, a.lr, (double)(s + 1 - start) * m->batch / dt);
        }
        if (a.eval_data && ((a.eval_every && (s + 1) % a.eval_every == 0) ||
                            s + 1 == start + steps)) {
            double te = mprt_now();
            mprt_evaluate(m, &xe, &ye, a.eval_data, s + 1, rows);
            t_eval += mprt_now() - te;
        }
    }
    if (log && fclose(log) != 0)
        mprt_die("%s: write failed", a.loss_log);
    double dt = mprt_now() - t0 - t_eval;
    fprintf(stderr, "trained %ld steps in %.2f s (%.1f samples/s), final loss %.6f\n", steps,
            dt, (double)steps * m->batch / dt, last_loss);
    if (a.profile) {
        char err[512];
        if (mprt_write_profile(a.profile, m->model_file, (long)(m->batch / m->microbatches),
                               m->prof_nodes, m->nprof_nodes, err, sizeof err) != 0)
            mprt_die("%s", err);
        fprintf(stderr, "wrote per-node times to %s (mpcc --measured=%s uses them)\n",
                a.profile, a.profile);
    }
    if (a.trace) {
        char err[512];
        if (mprt_write_trace(a.trace, m->ops, m->nops, m->device_names, m->arena_bytes, m->ndev,
                             err, sizeof err) != 0)
            mprt_die("%s", err);
        fprintf(stderr, "wrote the timeline of step %ld to %s\n", start + steps, a.trace);
    }
    if (a.save) {
        mprt_save(m, a.save, start + steps);
        fprintf(stderr, "saved %s\n", a.save);
    }
    mprt_array_free(&x);
    mprt_array_free(&y);
    mprt_array_free(&xe);
    mprt_array_free(&ye);
    free(order.perm);
    free(rows);
    for (int d = 0; d < m->ndev; d++)
        mprt_arena_free(d, mprt_arenas[d]);
    free(mprt_arenas);
    return 0;
}
