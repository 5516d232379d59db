/* train.c — the generated trainer's main loop and command line.
 *
 * The generated code (before this file) describes the model in one MprtModel:
 * its devices, each with one arena; its buffers (parameters, optimizer
 * state, the inputs and labels of every micro-batch, each at a device,
 * an offset and a slot per micro-batch); and the step, which enqueues every
 * device's actions and copies on the streams of runtime/stream.c. This file
 * reads the command line, opens the data (data.c) and the weights, runs the
 * steps, evaluates, reports progress and saves checkpoints (checkpoint.c).
 * The buffer table, errors and weight loading are program.c's.
 */
#include "mprt.h"
#include "train.h"

#include <math.h>
#include <sys/resource.h>
#include <time.h>

MPRT_GLOBAL float mprt_lr;            /* its learning rate */

typedef struct MprtArgs {
    const char *data, *labels, *tokens, *save, *resume, *weights, *loss_log;
    const char *eval_data, *eval_labels, *eval_tokens, *trace, *profile, *plot;
    long steps, epochs, log_every, eval_every, save_every, keep, seq, check_replicas;
    double lr;
    unsigned long seed;
    int synthetic, shuffle;
} MprtArgs;

/* The rows of one micro-batch: the step's batch over every replica's
 * micro-batches. */
static long mprt_mb_rows(const MprtModel *m)
{
    return (long)m->batch / m->microbatches / (m->replicas > 1 ? m->replicas : 1);
}

static void mprt_usage(const MprtModel *m)
{
    printf("usage: %s --data x.npy --labels y.npy [options]\n"
           "       %s --tokens train.bin [--seq T] [options]\n"
           "\n"
           "Trains %s (compiled by mpcc %s) on %d %s device(s).\n"
           "\n"
           "Data:\n"
           "  --data FILE        inputs, .npy, one row per sample (C order, little-endian);\n"
           "                     float64 is converted to the model's float32\n"
           "  --labels FILE      labels, .npy, one row per row of --data: class ids (int64;\n"
           "                     int32, int16, int8 and uint8 are converted) or float targets\n"
           "                     for mse. A row holds the labels of one sample in any shape:\n"
           "                     (N, T) for a language model whose logits are (B*T, V) or\n"
           "                     (B, T, V); all of them flat, (N*T,), works too\n"
           "  --tokens FILE      a token stream instead of --data and --labels: a 1-D int32\n"
           "                     or int64 .npy, or a raw uint16 .bin as nanoGPT writes it.\n"
           "                     Row k is the window x = t[kT .. kT+T-1], y = t[kT+1 .. kT+T]\n"
           "  --seq T            the window's length: the model's sequence length (the\n"
           "                     default; another is an error)\n"
           "  --synthetic        random inputs and labels instead of files (benchmarks)\n"
           "  --shuffle          visit the rows in a new random order every epoch\n"
           "  Step i uses positions i*B .. i*B+B-1 (B = %d) of a stream of epochs: each\n"
           "  epoch is every row once, in file order, or with --shuffle in a permutation\n"
           "  drawn from --seed and the epoch number (the same seed, the same order;\n"
           "  --resume continues it). A batch that crosses the end of an epoch takes its\n"
           "  last rows from the next one. The exact rule is in mpcc's docs/trainer.md.\n"
           "\n"
           "Training:\n"
           "  --steps N          optimizer steps (default: one epoch); after --resume, N more\n"
           "  --epochs E         passes over the data (instead of --steps)\n"
           "  --lr F             learning rate (default %g, as compiled)\n"
           "  --seed S           seed for --shuffle, Dropout masks and --synthetic data\n"
           "                     (default 0)\n"
           "\n",
           m->program, m->program, m->model_file, m->mpcc_version, m->ndev,
           strncmp(m->device_names[0], "cuda", 4) == 0 ? "CUDA" : "CPU", m->batch, m->lr);
    if (m->nodes > 1)
        printf("Processes:\n"
               "  Compiled for %d processes, %d replica(s) each (mpcc --data-parallel=%d\n"
               "  --nodes=%d): start it as mpirun -np %d ./%s ... (or srun), every process\n"
               "  with the same flags. Each replica trains on its own rows of every batch;\n"
               "  the gradients are summed over the replicas before each update. Rank 0\n"
               "  prints, evaluates and writes the checkpoints and logs; SIGINT or SIGTERM\n"
               "  to any process stops every one after the same step.\n",
               m->nodes, m->replicas / m->nodes, m->replicas, m->nodes, m->nodes, m->program);
    else if (m->replicas > 1)
        printf("Replicas:\n"
               "  %d replicas of the pipeline in this process (mpcc --data-parallel=%d), each\n"
               "  on its own devices and its own rows of every batch; the gradients are\n"
               "  summed over them before each update.\n", m->replicas, m->replicas);
    if (m->replicas > 1)
        printf("  --check-replicas N  every N steps, compare a hash of every replica's\n"
               "                     weights and optimizer state; stop, naming the first\n"
               "                     that differs\n"
               "\n");
    printf("Evaluation:\n"
           "  --eval-data FILE   held-out inputs, .npy, checked like --data\n"
           "  --eval-labels FILE their labels, .npy, checked like --labels\n"
           "  --eval-tokens FILE held-out token stream, instead of the two above\n"
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
           "  --save-every N     also save FILE's stem .stepS.safetensors after every step S\n"
           "                     that is a multiple of N (ck.safetensors: ck.step200.safetensors)\n"
           "  --keep K           keep only the K newest of those (default: all)\n"
           "  --resume FILE      continue from a checkpoint, bit for bit\n"
           "  On SIGINT or SIGTERM the step in flight finishes, is saved the same way (to\n"
           "  %s.stepS.safetensors without --save) and the trainer exits with status 0;\n"
           "  a second signal stops it at once. A crash loses at most the steps since the\n"
           "  last checkpoint: each is written to FILE.tmp and renamed when complete.\n"
           "\n"
           "Output:\n"
           "  --log-every N      a progress line every N steps on stderr (default 10): loss,\n"
           "                     steps/s, samples/s, elapsed time and the time left\n"
           "  --loss-log FILE    write every step's loss, one per line\n"
           "  --plot FILE.svg    draw the loss against the step, and the evaluations, as\n"
           "                     an SVG, written at every checkpoint and at the end; after\n"
           "                     --resume, of the steps this run trained. Past 2000 steps\n"
           "                     each point is the mean of a bucket of steps, over a band\n"
           "                     from their minimum to their maximum\n"
           "  --trace FILE       write the last step's measured timeline (Chrome trace\n"
           "                     format, as mpcc --trace writes the predicted one); mpcc\n"
           "                     --gantt-from=FILE draws it, --measured=FILE beside\n"
           "                     --dump=gantt draws it under the prediction\n"
           "  --profile FILE     time every node (after the first step) and write the\n"
           "                     mean per call and the micro-batch's rows as JSON; mpcc\n"
           "                     --measured=FILE then plans with these times instead of\n"
           "                     its estimates\n"
           "  --help             this text\n"
           "\n"
           "Threads of the CPU devices:\n"
           "  OPENBLAS_NUM_THREADS=N  N threads for every CPU device\n"
           "  MPRT_CORES=N       else N cores shared out (default: the machine's), one\n"
           "                     thread per device and the rest in proportion to each\n"
           "                     device's predicted busy time in the plan\n"
           "\n"
           "CUDA devices:\n"
           "  MPRT_CU_WORKSPACE_MB=N  cuDNN's convolutions may take up to N MiB of\n"
           "                     workspace of their own per device, beyond the memory\n"
           "                     plan (default 1024; 0: the plan's scratch only)\n"
           "  MPRT_CU_DETERMINISTIC=0  cuDNN's convolutions take the first algorithm of\n"
           "                     cuDNN's ranking that fits, deterministic or not (as\n"
           "                     PyTorch with cudnn.deterministic off): sometimes faster,\n"
           "                     and two runs may then differ. 1 (the default): its\n"
           "                     deterministic algorithms first, the same bits every run\n"
           "  MPRT_CU_ALGOS=1    print each convolution's cuDNN algorithm, its\n"
           "                     workspace and cuDNN's ranking\n",
           (int)mprt_mb_rows(m), m->weights_file, m->program);
}

static long mprt_arg_long(const char *opt, const char *v, long lo)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo)
        mprt_die("%s expects a whole number of at least %ld, got '%s'", opt, lo, v);
    return x;
}

/* The combinations of options that make sense. */
static void mprt_check_args(const MprtModel *m, const MprtArgs *a)
{
    if (a->check_replicas && m->replicas < 2)
        mprt_die("--check-replicas compares the replicas of a trainer; this one has one "
                 "(mpcc --data-parallel=R makes R)");
    if (a->tokens && (a->data || a->labels || a->synthetic))
        mprt_die("give --tokens, or --data and --labels, or --synthetic: one source of data");
    if (!a->tokens && !a->synthetic && (!a->data || !a->labels))
        mprt_die("give --data and --labels, or --tokens (or --synthetic); see --help");
    if (a->data && a->synthetic)
        mprt_die("give --data and --labels, or --synthetic, not both");
    if (a->seq && !a->tokens && !a->eval_tokens)
        mprt_die("--seq is the window of --tokens; give --tokens FILE");
    if (a->eval_tokens && (a->eval_data || a->eval_labels))
        mprt_die("give --eval-tokens, or --eval-data and --eval-labels, not both");
    if (!a->eval_data != !a->eval_labels)
        mprt_die("give both --eval-data and --eval-labels, or neither");
    if (a->eval_every && !a->eval_data && !a->eval_tokens)
        mprt_die("--eval-every needs --eval-data and --eval-labels (or --eval-tokens)");
    if (a->keep && !a->save_every)
        mprt_die("--keep is how many checkpoints of --save-every to keep; give --save-every N");
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
        else if (strcmp(o, "--tokens") == 0) a->tokens = v;
        else if (strcmp(o, "--eval-tokens") == 0) a->eval_tokens = v;
        else if (strcmp(o, "--seq") == 0) a->seq = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--save-every") == 0) a->save_every = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--keep") == 0) a->keep = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--save") == 0) a->save = v;
        else if (strcmp(o, "--resume") == 0) a->resume = v;
        else if (strcmp(o, "--weights") == 0) a->weights = v;
        else if (strcmp(o, "--loss-log") == 0) a->loss_log = v;
        else if (strcmp(o, "--plot") == 0) a->plot = v;
        else if (strcmp(o, "--eval-data") == 0) a->eval_data = v;
        else if (strcmp(o, "--eval-labels") == 0) a->eval_labels = v;
        else if (strcmp(o, "--trace") == 0) a->trace = v;
        else if (strcmp(o, "--profile") == 0) a->profile = v;
        else if (strcmp(o, "--eval-every") == 0) a->eval_every = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--steps") == 0) a->steps = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--epochs") == 0) a->epochs = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--log-every") == 0) a->log_every = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--check-replicas") == 0) a->check_replicas = mprt_arg_long(o, v, 1);
        else if (strcmp(o, "--seed") == 0) a->seed = (unsigned long)mprt_arg_long(o, v, 0);
        else if (strcmp(o, "--lr") == 0) {
            char *end;
            a->lr = strtod(v, &end);
            if (end == v || *end || !(a->lr >= 0))
                mprt_die("--lr expects a non-negative number, got '%s'", v);
        } else
            mprt_die("unknown option '%s'; see --help", o);
    }
    mprt_check_args(m, a);
}

/* ---- data ---- */

static const MprtBuffer *mprt_buffer_of(const MprtModel *m, int kind)
{
    for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].kind == kind)
            return &m->buffers[i];
    return NULL;
}

/* What the model's data must fit (data.c). */
static MprtDataSpec mprt_data_spec(const MprtModel *m)
{
    MprtDataSpec s = {mprt_buffer_of(m, MPRT_INPUT), mprt_buffer_of(m, MPRT_LABELS), 0, 0,
                      m->ignore_index};
    s.R = s.in->shape[0];
    if (m->loss_kind == MPRT_LOSS_CROSS_ENTROPY && s.lb->dtype == MPRT_I64)
        s.classes = mprt_buffer_of(m, MPRT_OUTPUT)->shape[m->class_axis];
    if ((s.lb->nbytes / mprt_dtype_size(s.lb->dtype)) % (size_t)s.R)
        mprt_die("the model's %s holds %zu labels for a micro-batch of %lld rows of %s: not "
                 "a whole number per row, so the trainer cannot tell which row they belong to",
                 s.lb->name, s.lb->nbytes / mprt_dtype_size(s.lb->dtype), (long long)s.R,
                 s.in->name);
    return s;
}

/* The training data (or evaluation data: eval 1) the arguments name. */
static void mprt_open_data(const MprtModel *m, const MprtArgs *a, int eval, MprtData *d)
{
    MprtDataSpec s = mprt_data_spec(m);
    const char *tokens = eval ? a->eval_tokens : a->tokens;
    if (tokens)
        mprt_data_tokens(&s, tokens, a->seq, d);
    else if (eval)
        mprt_data_files(&s, a->eval_data, a->eval_labels, d);
    else if (a->synthetic)
        mprt_data_synthetic(&s, m->batch, a->seed, d);
    else
        mprt_data_files(&s, a->data, a->labels, d);
}

/* ---- the replicas ---- */

/* FNV-1a over what every replica must hold the same: the weights and the
 * optimizer state (not BatchNorm's running statistics). */
static uint64_t mprt_replica_hash(const MprtModel *m)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        if ((b->kind != MPRT_PARAM && b->kind != MPRT_STATE) || b->own || b->dev < 0 ||
            b->dev < mprt_dev_lo || b->dev >= mprt_dev_hi ||   /* this process's devices */
            b->shard > 1)   /* --zero=1: each replica's share */
            continue;
        const unsigned char *p = b->host ? mprt_slot(b, 0)
                                         : mprt_ops->dev_read(mprt_dev_base + b->dev,
                                                              mprt_slot(b, 0), b->nbytes, 0);
        for (size_t k = 0; k < b->nbytes; k++)
            h = (h ^ p[k]) * 1099511628211ULL;
    }
    return h;
}

/* --check-replicas: after step `step`, every replica's weights are rank
 * 0's, or every process stops, rank 0 naming the first that differs. */
static void mprt_check_replicas(const MprtModel *m, long step, uint64_t *hashes)
{
    int RL = mprt_replicas_here;
    uint64_t here = mprt_replica_hash(m);
    for (int c = 1; c < RL; c++) {
        mprt_dev_base = c * m->ndev;
        if (mprt_replica_hash(m) != here)
            mprt_die("after step %ld the weights of replica %d differ from replica %d's "
                     "(--check-replicas), in one process: a fault of the machine or of mpcc",
                     step, mprt_rank * RL + c, mprt_rank * RL);
    }
    mprt_dev_base = 0;
    mprt_comm_hashes(here, hashes);
    int P = mprt_procs_per_replica(m);   /* rank r holds the stages of rank r % P */
    for (int r = P; r < mprt_ranks; r++)
        if (hashes[r] != hashes[r % P]) {
            if (mprt_rank == 0)
                fprintf(stderr, "%s: error: after step %ld the weights of replica %d (rank %d) "
                        "differ from replica 0's (--check-replicas): every process must get "
                        "the same flags and data; stopped, no checkpoint written\n",
                        m->program, step, r / P * RL, r);
            mprt_comm_end();
            exit(1);
        }
}

/* ---- evaluation ---- */

typedef struct MprtScore {
    double loss;                /* summed over what was scored */
    int64_t correct, count;     /* count: labels (cross-entropy) or elements (mse) */
} MprtScore;

/* Scores the first n rows (of R) of the micro-batch that just ran forward. */
static void mprt_score(const MprtModel *m, const MprtBuffer *out, const MprtBuffer *lb,
                       int64_t n, int64_t R, MprtScore *sc)
{
    const float *x = mprt_ops->dev_read(out->dev, mprt_slot(out, 0), out->nbytes, 0);
    int64_t labels = (int64_t)(lb->nbytes / mprt_dtype_size(lb->dtype));
    if (m->loss_kind == MPRT_LOSS_MSE) {
        const float *t = mprt_ops->dev_read(lb->dev, mprt_slot(lb, 0), lb->nbytes, 1);
        for (int64_t i = 0; i < n * (labels / R); i++)
            sc->loss += (double)(x[i] - t[i]) * (x[i] - t[i]);
        sc->count += n * (labels / R);
        return;
    }
    /* scores (Q, C, D) with the classes on their axis: Q rows of classes
     * before it (the S rows of the micro-batch and their positions), D
     * positions after; labels (Q, D). The padding rows' labels are the
     * ignore index */
    const float *lp = mprt_ops->dev_read(m->log_prob_dev, mprt_arenas[m->log_prob_dev] +
                                    m->log_prob_offset,
                                    m->lse ? lb->nbytes / mprt_dtype_size(lb->dtype) * 4
                                           : out->nbytes, 2);
    const int64_t *t = mprt_ops->dev_read(lb->dev, mprt_slot(lb, 0), lb->nbytes, 1);
    int64_t C = out->shape[m->class_axis], D = 1;
    for (int i = m->class_axis + 1; i < out->rank; i++)
        D *= out->shape[i];
    int64_t Q = labels / D;
    for (int64_t r = 0; r < Q; r++)
        for (int64_t d = 0; d < D; d++) {
            int64_t label = t[r * D + d], best = 0;
            if (label == m->ignore_index)
                continue;
            const float *xs = x + r * C * D + d;
            for (int64_t c = 1; c < C; c++)
                if (xs[c * D] > xs[best * D])
                    best = c;
            sc->loss -= m->lse ? xs[label * D] - lp[r * D + d] : lp[(r * C + label) * D + d];
            sc->correct += best == label;
            sc->count++;
        }
}

/* Runs the model forward in inference mode over every row of d, in
 * micro-batches (the last one padded), prints the mean loss and the
 * accuracy, and returns the loss (NaN when nothing was scored). Only
 * activations, the loss and the input buffers change. A pipeline across
 * processes: each of its processes runs its stages, the last one's
 * scores, and rank 0 adds them up and prints (mprt_eval_sum). */
static double mprt_evaluate(const MprtModel *m, const MprtData *d, long step, int64_t *rows)
{
    const MprtBuffer *in = mprt_buffer_of(m, MPRT_INPUT), *lb = mprt_buffer_of(m, MPRT_LABELS),
                     *out = mprt_buffer_of(m, MPRT_OUTPUT);
    int ce = m->loss_kind == MPRT_LOSS_CROSS_ENTROPY;
    int64_t R = in->shape[0], N = d->rows;
    MprtScore sc = {0, 0, 0};
    mprt_training = 0;
    for (int64_t first = 0; first < N; first += R) {
        int64_t n = N - first < R ? N - first : R;
        for (int64_t r = 0; r < n; r++)
            rows[r] = first + r;
        mprt_fill(d, 0, in, R, rows, n, 0, 0);
        mprt_fill(d, 1, lb, R, rows, n, ce ? m->ignore_index : 0, 0);
        m->eval_forward();
        if (mprt_dev_here(out->dev))
            mprt_score(m, out, lb, n, R, &sc);
    }
    mprt_training = 1;
    if (m->node_devs) {
        double v[3] = {sc.loss, (double)sc.correct, (double)sc.count};
        mprt_eval_sum(v, 3);
        sc = (MprtScore){v[0], (int64_t)v[1], (int64_t)v[2]};
        if (mprt_rank != 0)
            return NAN;
    }
    if (!sc.count) {
        fprintf(stderr, "eval step %ld: nothing to score in %s (every label is the ignore "
                "index %lld)\n", step, d->name, (long long)m->ignore_index);
        return NAN;
    }
    fprintf(stderr, "eval step %ld: loss %.7g", step, sc.loss / (double)sc.count);
    if (ce)
        fprintf(stderr, "  accuracy %.4f (%lld/%lld)", (double)sc.correct / (double)sc.count,
                (long long)sc.correct, (long long)sc.count);
    fprintf(stderr, "  on %lld rows of %s\n", (long long)N, d->name);
    return sc.loss / (double)sc.count;
}

/* ---- the loop ---- */

static double mprt_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Each device's arena: the memory plan's, its scratch raised to what the
 * kernels made at start-up need (oneDNN's primitives: cpu_dnnl.c). */
static size_t *mprt_arena_bytes, *mprt_work_bytes;

/* The devices of this process: the model's, once per replica here
 * (state.c), copy r's device d at r * ndev + d. */
static int mprt_ndev_here(const MprtModel *m)
{
    return m->ndev * mprt_replicas_here;
}

static void mprt_size_arenas(const MprtModel *m)
{
    int N = mprt_ndev_here(m);
    mprt_arena_bytes = calloc((size_t)N, sizeof *mprt_arena_bytes);
    mprt_work_bytes = calloc((size_t)N, sizeof *mprt_work_bytes);
    if (!mprt_arena_bytes || !mprt_work_bytes)
        mprt_die("out of memory");
    memcpy(mprt_work_bytes, m->work_bytes, (size_t)m->ndev * sizeof *mprt_work_bytes);
    if (m->kernels_start)
        m->kernels_start(mprt_work_bytes);
    for (int d = 0; d < N; d++) {
        int md = d % m->ndev;
        mprt_work_bytes[d] = mprt_work_bytes[md];
        size_t end = m->work_offset[md] + mprt_work_bytes[d];
        mprt_arena_bytes[d] = end > m->arena_bytes[md] ? end : m->arena_bytes[md];
    }
}

/* The copies' device names (cpu:2, cpu:3 for the second copy of two
 * devices) and core shares, after the model's. The names live until the
 * end (the devices' messages use them): mprt_here_devices_free. */
static const char **mprt_names_here;

static void mprt_here_devices_free(const MprtModel *m)
{
    for (int d = m->ndev; d < mprt_ndev_here(m); d++)
        free((char *)mprt_names_here[d]);
    free(mprt_names_here);
}

static void mprt_here_devices(const MprtModel *m, const char ***names, double **shares)
{
    int N = mprt_ndev_here(m);
    *names = calloc((size_t)N, sizeof **names);
    *shares = calloc((size_t)N, sizeof **shares);
    if (!*names || !*shares)
        mprt_die("out of memory");
    for (int d = 0; d < N; d++) {
        char name[32];
        snprintf(name, sizeof name, "cpu:%d", d);
        if (strncmp(m->device_names[d % m->ndev], "cuda", 4) == 0)   /* a copy's GPU */
            snprintf(name, sizeof name, "cuda:%d", d);
        (*names)[d] = d < m->ndev ? m->device_names[d] : strdup(name);
        int here = d >= mprt_dev_lo && d < mprt_dev_hi;   /* a pipeline across processes */
        (*shares)[d] = !here ? 0 : m->cpu_shares ? m->cpu_shares[d % m->ndev] : 1;
        if (!(*names)[d])
            mprt_die("out of memory");
    }
    mprt_names_here = *names;
}

/* Every device's arena, and its streams. */
static void mprt_start_devices(const MprtModel *m)
{
    char err[256];
    int N = mprt_ndev_here(m), RL = mprt_replicas_here;
    const char **names;
    double *shares;
    mprt_here_devices(m, &names, &shares);
    mprt_arenas = calloc((size_t)N, sizeof *mprt_arenas);
    if (!mprt_arenas)
        mprt_die("out of memory");
    mprt_prof_nodes = m->prof_nodes;   /* names the node in a device's error */
    mprt_ops->devices_open(N, names, shares);
    mprt_ops->losses_alloc(m->microbatches * RL);
    if (m->norm_terms)
        mprt_ops->norm_alloc(m->norm_terms * RL);
    mprt_size_arenas(m);
    mprt_host_arenas = calloc((size_t)N, sizeof *mprt_host_arenas);
    if (!mprt_host_arenas)
        mprt_die("out of memory");
    for (int d = 0; d < N; d++) {
        int md = d % m->ndev;
        mprt_arenas[d] = mprt_ops->arena_alloc(d, names[d], mprt_arena_bytes[d]);
        size_t slots = m->slot_bytes[md];   /* the scratch's last bytes: a GPU's slots */
        mprt_ops->dev_scratch(d, mprt_arenas[d] + m->work_offset[md], mprt_work_bytes[d] - slots);
        if (slots)
            mprt_ops->dev_slots(d, mprt_arenas[d] + m->work_offset[md] + mprt_work_bytes[d] - slots,
                                slots);
        if (m->host_bytes[md])
            mprt_host_arenas[d] = mprt_ops->host_alloc(d, names[d], m->host_bytes[md]);
    }
    if (mprt_ops->streams_start(m->nstreams * RL, m->nevents * RL, m->nops, err, sizeof err) != 0)
        mprt_die("%s", err);
    free(shares);
}

/* The replicas of this process start as copy 0: weights, optimizer state,
 * constants. */
static void mprt_copy_replicas(const MprtModel *m)
{
    for (int d = m->ndev; d < mprt_ndev_here(m); d++) {
        int md = d % m->ndev;
        mprt_ops->dev_copy(mprt_arenas[d], mprt_arenas[md], m->arena_bytes[md]);
        if (m->host_bytes[md])
            memcpy(mprt_host_arenas[d], mprt_host_arenas[md], m->host_bytes[md]);
    }
}

/* --zero=1 with replicas in this process, on --resume: each copy's own
 * share of the optimizer state (mprt_copy_replicas gave them copy 0's). */
static void mprt_load_shards(const MprtModel *m, const char *path)
{
    int sharded = 0;
    for (int i = 0; i < m->nbuffers; i++)
        sharded |= m->buffers[i].shard > 1;
    for (int c = 1; sharded && c < mprt_replicas_here; c++) {
        mprt_dev_base = c * m->ndev;
        mprt_load_tensors(m->buffers, m->nbuffers, m->model_file, path, 1 << MPRT_STATE, NULL);
    }
    mprt_dev_base = 0;
}

/* Once the data and the weights are in: where the step will run. */
static void mprt_report_devices(const MprtModel *m)
{
    fprintf(stderr, "memory plan%s:", mprt_replicas_here > 1 ? " of each replica here" : "");
    for (int d = 0; d < m->ndev; d++) {
        if (d < mprt_dev_lo || d >= mprt_dev_hi)
            continue;   /* another process's */
        int t = mprt_ops->dev_threads ? mprt_ops->dev_threads(d) : 0;
        fprintf(stderr, " %s %.1f MB", m->device_names[d], (double)mprt_arena_bytes[d] / 1e6);
        if (m->host_bytes[d])
            fprintf(stderr, " + %.1f MB host (offloaded)", (double)m->host_bytes[d] / 1e6);
        if (t > 0)
            fprintf(stderr, " (%d thread%s)", t, t > 1 ? "s" : "");
    }
    if (mprt_replicas_here > 1)
        fprintf(stderr, " (%d replicas in this process)", mprt_replicas_here);
    fputc('\n', stderr);
    if (mprt_ops->graph_step && !m->graph_why)
        fprintf(stderr, "CUDA graph: the step is captured once, at step 2, and replayed (not "
                "in a step --trace or --profile times)\n");
    else if (m->graph_why)   /* a trainer with GPUs */
        fprintf(stderr, "CUDA graph: off: %s\n", m->graph_why);
}

/* With replicas in this process, one step of every copy: listed and then
 * issued in turn where one host thread issues them (GPUs, program.c), then
 * synced. A GPU trainer captures this as one graph, as it does run_step. */
static const MprtModel *mprt_copies_model;
static void mprt_run_copies(void)
{
    const MprtModel *m = mprt_copies_model;
    for (int c = 0; c < mprt_replicas_here; c++) {   /* run_step does not sync here */
        mprt_dev_base = c * m->ndev;
        m->run_step();
    }
    mprt_dev_base = 0;
    int turn = mprt_deferring;
    mprt_deferring = 0;
    if (turn)
        mprt_issue_in_turn();
    mprt_sync();
}

/* One optimizer step over the micro-batches of step s; returns its loss
 * (mean over the micro-batches of every replica, in their order). rows
 * holds B/M entries; a replica reads micro-batches replica * M .. of the
 * step's, M its own. */
static double mprt_step(const MprtModel *m, const MprtData *d, MprtOrder *order, long s,
                        float lr, int64_t *rows, float *losses)
{
    const MprtBuffer *in = mprt_buffer_of(m, MPRT_INPUT), *lb = mprt_buffer_of(m, MPRT_LABELS);
    int64_t R = in->shape[0];
    int M = m->microbatches, RL = mprt_replicas_here;
    int total = M * RL * mprt_ranks / mprt_procs_per_replica(m);   /* every replica's */
    for (int c = 0; c < RL; c++) {   /* each replica here fills its own slots */
        mprt_dev_base = c * m->ndev;
        int64_t replica = (int64_t)mprt_first_replica + c;
        for (int mb = 0; mb < M; mb++) {
            int64_t first = (int64_t)s * m->batch + (replica * M + mb) * R;
            for (int64_t r = 0; r < R; r++)
                rows[r] = mprt_row(order, first + r);
            mprt_fill(d, 0, in, R, rows, R, 0, mb);
            mprt_fill(d, 1, lb, R, rows, R, 0, mb);
        }
    }
    mprt_step_no = s;
    mprt_lr = lr;
    int turn = RL > 1 && mprt_ops->copies_sum;   /* one host thread issues every copy's step */
    if (m->node_devs) {   /* one pipeline across processes: the last stage's writes the losses, */
        memset(mprt_losses, 0, (size_t)M * sizeof *mprt_losses);   /* the others add 0 (comm.c) */
        if (m->norm_terms)   /* so too each stage's squared norms (mprt_norms_across) */
            memset(mprt_norm_sq, 0, (size_t)m->norm_terms * sizeof *mprt_norm_sq);
    }
    mprt_deferring = turn;   /* GPUs: each copy's run_step lists its operations (program.c) */
    mprt_copies_model = m;
    void (*run)(void) = RL > 1 ? mprt_run_copies : m->run_step;
    if (!(mprt_ops->graph_step && mprt_ops->graph_step(run)))
        run();
    mprt_deferring = 0;
    mprt_comm_losses(M * RL, mprt_losses, losses);
    double loss = 0;
    for (int mb = 0; mb < total; mb++)
        loss += losses[mb];
    loss /= total;
    if (!isfinite(loss))
        mprt_die("the loss is %g at step %ld; training stopped (try a lower --lr); no "
                 "checkpoint was written", loss, s + 1);
    return loss;
}

/* A duration as a person reads it: 42s, 3m05s, 2h07m. */
static void mprt_duration(double s, char *buf, size_t n)
{
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, n, "%lds", t);
    else if (t < 3600)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
}

/* Where training stands: done of total steps after `busy` seconds of
 * training (evaluation and checkpoints left out) since `elapsed` began. */
static void mprt_progress(const MprtModel *m, long step, long last, long done, long total,
                          double loss, double lr, double busy, double elapsed)
{
    char el[32], eta[32];
    double rate = done / busy;
    mprt_duration(elapsed, el, sizeof el);
    mprt_duration((double)(total - done) / rate * (elapsed / busy), eta, sizeof eta);
    fprintf(stderr, "step %ld/%ld  loss %.6f  lr %g  %.2f steps/s  %.1f samples/s  elapsed %s"
            "  ETA %s\n", step, last, loss, lr, rate, rate * m->batch, el, eta);
}

/* The end of a run: the mean step and what each device held at its peak. */
static void mprt_summary(const MprtModel *m, long steps, double busy, double loss)
{
    fprintf(stderr, "trained %ld steps in %.2f s: %.1f ms per step, %.1f samples/s; final "
            "loss %.6f\n", steps, busy, steps ? busy / steps * 1e3 : 0.0,
            busy > 0 ? (double)steps * m->batch / busy : 0.0, loss);
    fprintf(stderr, "peak memory:");
    for (int d = 0; d < m->ndev; d++) {
        size_t extra = mprt_ops->dev_extra ? mprt_ops->dev_extra(d) : 0;
        fprintf(stderr, " %s %.1f MB", m->device_names[d], (double)mprt_arena_bytes[d] / 1e6);
        if (extra)
            fprintf(stderr, " + %.1f MB cuDNN workspace", (double)extra / 1e6);
        fprintf(stderr, "%s", d + 1 < m->ndev ? "," : "");
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        fprintf(stderr, " (each device's arena, allocated once); host process %.1f MB resident",
                (double)ru.ru_maxrss * 1024 / 1e6);
    fputc('\n', stderr);
}

/* The end of an interrupted run: one line, the step and the file. */
static void mprt_stopped(long step, long last, const char *file)
{
    fprintf(stderr, "%s: stopped by %s after step %ld of %ld; saved %s (continue with "
            "--resume %s --steps %ld)\n", mprt_program, mprt_signal_name(mprt_stop_signal),
            step, last, file, file, last - step);
}

static void mprt_write_outputs(const MprtModel *m, const MprtArgs *a, const MprtPlot *plot,
                               long last, long steps, double busy)
{
    char err[512];
    if (a->plot) {
        if (mprt_plot_write(plot, err, sizeof err) != 0)
            mprt_die("%s", err);
        fprintf(stderr, "wrote the loss curve of steps %ld to %ld to %s\n", plot->first + 1,
                last, a->plot);
    }
    if (a->profile) {
        if (mprt_write_profile(a->profile, m->model_file, mprt_mb_rows(m),
                               m->prof_nodes, m->nprof_nodes, err, sizeof err) != 0)
            mprt_die("%s", err);
        fprintf(stderr, "wrote per-node times to %s (mpcc --measured=%s uses them)\n",
                a->profile, a->profile);
    }
    if (a->trace) {
        MprtRunInfo run = {m->schedule, m->microbatches, steps ? busy / steps : 0, steps};
        if (mprt_write_trace(a->trace, m->ops, m->nops, m->device_names, mprt_arena_bytes, m->ndev,
                             &run, err, sizeof err) != 0)
            mprt_die("%s", err);
        fprintf(stderr, "wrote the timeline of step %ld to %s\n", last, a->trace);
    }
}

/* Every path the run will write is checked before it starts. */
static void mprt_check_outputs(const MprtArgs *a, const MprtSeries *series, long start)
{
    char first[4200];
    if (a->save)
        mprt_check_writable(a->save, "a checkpoint");
    if (a->save || a->save_every) {
        mprt_series_name(series, start + (a->save_every ? a->save_every : 1), first,
                         sizeof first);
        mprt_check_writable(first, "a checkpoint");
    }
    if (a->trace)
        mprt_check_writable(a->trace, "the trace");
    if (a->plot)
        mprt_check_writable(a->plot, "the loss plot");
    if (a->profile)
        mprt_check_writable(a->profile, "the profile");
}

/* --profile: every process times its nodes (rank 0 writes its own). */
static void mprt_profile_start(const MprtModel *m, const MprtArgs *a)
{
    if (!a->profile)
        return;
    mprt_node_seconds = calloc((size_t)m->nprof_nodes + 1, sizeof(double));
    mprt_node_calls = calloc((size_t)m->nprof_nodes + 1, sizeof(long));
    if (!mprt_node_seconds || !mprt_node_calls)
        mprt_die("out of memory");
}

static int mprt_train_main(const MprtModel *m, int argc, char **argv)
{
    MprtArgs a;
    mprt_program = m->program;
    for (int i = 1; i < argc; i++)   /* --help answers without a launcher */
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            mprt_usage(m);
            exit(0);
        }
    mprt_comm_start(m, &argc, &argv);
    mprt_replicas_here = m->replicas_here > 1 ? m->replicas_here : 1;   /* state.c */
    mprt_replica_devs = m->ndev;
    mprt_replica_events = m->nevents;
    mprt_replica_mbs = m->microbatches;
    mprt_replica_norms = m->norm_terms;
    mprt_first_replica = mprt_rank / mprt_procs_per_replica(m) * mprt_replicas_here;
    mprt_replicas_start(m);
    if (m->node_devs)
        mprt_pipeline_start(m);   /* this process's devices; copies over MPI */
    int lead = mprt_rank == 0;   /* prints, evaluates and writes; the others train */
    mprt_parse_args(m, argc, argv, &a);
    mprt_dropout_seed = a.seed;
    mprt_dropout_stride = (long)m->microbatches * (m->replicas > 1 ? m->replicas : 1);
    MprtData data, eval = {0};
    mprt_open_data(m, &a, 0, &data);
    if (a.eval_data || a.eval_tokens)
        mprt_open_data(m, &a, 1, &eval);
    long per_epoch = (long)((data.rows + m->batch - 1) / m->batch);
    long steps = a.steps ? a.steps : (a.epochs ? a.epochs : 1) * per_epoch;
    mprt_start_devices(m);
    mprt_step_graphs = !m->graph_why;   /* GPUs: the step as one graph (cuda.c) */
    mprt_comm_devices(m);   /* NCCL's communicators, where GPUs sum over processes */
    long start = 0;
    mprt_load_tensors(m->buffers, m->nbuffers, m->model_file, a.weights, 1 << MPRT_PARAM, NULL);
    mprt_load_consts(m->buffers, m->nbuffers, m->model_file, m->weights_file);
    m->zero_state();
    if (a.resume)
        mprt_load_tensors(m->buffers, m->nbuffers, m->model_file, a.resume,
                          1 << MPRT_PARAM | 1 << MPRT_STATE, &start);
    mprt_copy_replicas(m);
    if (a.resume)
        mprt_load_shards(m, a.resume);
    MprtSeries series;
    mprt_series_init(&series, a.save, m->program, a.keep);
    if (lead)
        mprt_check_outputs(&a, &series, start);
    mprt_profile_start(m, &a);
    MprtCkpt ckpt = {m->buffers, m->nbuffers, m->mpcc_version, m->model_hash};
    MprtPlot plot = {a.plot, m->model_file, start, NULL, NULL, 0, 0, 0, 0};
    FILE *log = a.loss_log && lead ? fopen(a.loss_log, "w") : NULL;
    if (a.loss_log && lead && !log)
        mprt_die("%s: cannot open for writing: %s", a.loss_log, strerror(errno));
    MprtOrder order;
    mprt_order_init(&order, a.shuffle, a.seed, data.rows);
    int64_t *rows = malloc((size_t)mprt_buffer_of(m, MPRT_INPUT)->shape[0] * sizeof *rows);
    float *losses = malloc((size_t)(m->microbatches * mprt_replicas_here * mprt_ranks) *
                           sizeof *losses);
    uint64_t *hashes = malloc((size_t)mprt_ranks * sizeof *hashes);
    if (!rows || !losses || !hashes)
        mprt_die("out of memory");
    if (lead)
        mprt_report_devices(m);
    if (a.resume && lead)
        fprintf(stderr, "resumed %s at step %ld\n", a.resume, start);
    mprt_catch_stop_signals();
    mprt_comm_watch(m->program, start);   /* under mpirun: the step a failure stopped */
    long last = start + steps;
    double t0 = mprt_now(), t_aside = 0, last_loss = 0;
    char saved[4200] = "";
    long saved_step = -1;
    for (long s = start; s < last; s++) {
        mprt_tracing = a.trace && s + 1 == last;   /* time the last step */
        mprt_profiling = a.profile && (s > start || steps == 1);   /* after a warm-up */
        double loss = mprt_step(m, &data, &order, s, (float)a.lr, rows, losses);
        mprt_comm_step_done(s + 1);
        if (a.check_replicas && (s + 1) % a.check_replicas == 0)
            mprt_check_replicas(m, s + 1, hashes);
        int stop = mprt_comm_any(mprt_stop_signal != 0);   /* every process after this step */
        last_loss = loss;
        if (lead)
            mprt_plot_step(&plot, s + 1, loss);
        if (log)
            fprintf(log, "%.9g\n", loss);
        double now = mprt_now();
        if (lead && ((s + 1 - start) % a.log_every == 0 || s + 1 == last || stop))
            mprt_progress(m, s + 1, last, s + 1 - start, steps, loss, a.lr, now - t0 - t_aside,
                          now - t0);
        if ((a.save_every && (s + 1) % a.save_every == 0) || (stop && saved_step != s + 1)) {
            mprt_comm_gather(m);   /* every process: rank 0 takes the others' weights */
            if (lead)
                mprt_series_save(&series, &ckpt, s + 1, saved, sizeof saved);
            saved_step = s + 1;
        }
        if (stop) {
            if (lead) {
                mprt_plot_checkpoint(&plot);
                if (log && fclose(log) != 0)
                    mprt_die("%s: write failed", a.loss_log);
                mprt_stopped(s + 1, last, saved);
            }
            mprt_comm_end();
            exit(0);
        }
        if ((a.eval_data || a.eval_tokens) &&
            ((a.eval_every && (s + 1) % a.eval_every == 0) || s + 1 == last)) {
            double e = NAN;   /* a pipeline across processes: replica 0's evaluate it */
            if (lead || (m->node_devs && mprt_rank < mprt_procs_per_replica(m)))
                e = mprt_evaluate(m, &eval, s + 1, rows);
            if (lead)
                mprt_plot_eval(&plot, s + 1, e);
        }
        if (lead && saved_step == s + 1)
            mprt_plot_checkpoint(&plot);   /* with this step's evaluation */
        t_aside += mprt_now() - now;
    }
    if (log && fclose(log) != 0)
        mprt_die("%s: write failed", a.loss_log);
    double busy = mprt_now() - t0 - t_aside;
    if (lead) {
        mprt_summary(m, steps, busy, last_loss);
        if (a.check_replicas)
            fprintf(stderr, "replicas compared every %ld steps (--check-replicas): the %d hold "
                    "the same weights\n", a.check_replicas, m->replicas);
        mprt_write_outputs(m, &a, &plot, last, steps, busy);
    }
    if (a.save)
        mprt_comm_gather(m);
    if (a.save && lead) {
        mprt_save(&ckpt, a.save, last);
        fprintf(stderr, "saved %s\n", a.save);
    }
    mprt_data_free(&data);
    mprt_data_free(&eval);
    free(order.perm);
    free(plot.train);
    free(plot.eval);
    free(rows);
    free(losses);
    free(hashes);
    for (int d = 0; d < mprt_ndev_here(m); d++) {
        mprt_ops->arena_free(d, mprt_arenas[d]);
        if (mprt_host_arenas[d])
            mprt_ops->host_free(d, mprt_host_arenas[d]);
    }
    free(mprt_arenas);
    free(mprt_host_arenas);
    free(mprt_arena_bytes);
    free(mprt_work_bytes);
    mprt_here_devices_free(m);
    mprt_replicas_end(m);
    mprt_comm_end();
    return 0;
}
