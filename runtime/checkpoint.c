/* checkpoint.c — the trainer's checkpoints, and stopping without losing
 * work.
 *
 * A checkpoint is a safetensors file: the parameters, the optimizer state
 * and, in __metadata__, the step, the mpcc version and the model's SHA-256.
 * It is written whole or not at all (PATH.tmp, fsync, rename: mprt_out_*),
 * so a crash, even kill -9 in the middle of a save, leaves the previous
 * checkpoint intact.
 *
 * --save-every N writes a series: STEM.stepS.safetensors after every step
 * S that is a multiple of N (STEM: the --save path without .safetensors,
 * or the program's name). --keep K then removes all but the K of the
 * series with the highest steps up to the one just written.
 *
 * SIGINT and SIGTERM ask the loop to stop: it finishes the step in flight,
 * saves it to the series and exits with status 0. A second signal ends the
 * program at once, as the signal does by default.
 */
#include "mprt.h"

#include <dirent.h>
#include <signal.h>

/* ---- writing one ---- */

/* A path that cannot be written fails before training, not after; `what`
 * names the file in the message ("a checkpoint", "the loss plot"). */
static void mprt_check_writable(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {   /* in place */
        if (access(path, W_OK) != 0)
            mprt_die("%s: cannot write %s there: %s", path, what, strerror(errno));
        return;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wx");
    if (!f && errno == EEXIST)
        return;   /* a stale temporary: the writer replaces it */
    if (!f)
        mprt_die("%s: cannot write %s there: %s; check that the directory exists and is "
                 "writable", path, what, strerror(errno));
    fclose(f);
    remove(tmp);
}

/* What a checkpoint holds: the buffers that are parameters or optimizer
 * state, and what identifies the model. */
typedef struct MprtCkpt {
    const MprtBuffer *buffers;
    int nbuffers;
    const char *mpcc_version, *model_hash;
} MprtCkpt;

static void mprt_save(const MprtCkpt *c, const char *path, long step)
{
    MprtStEntry *e = calloc((size_t)c->nbuffers + 1, sizeof *e);
    if (!e)
        mprt_die("%s: out of memory for the checkpoint's table", path);
    int n = 0;
    for (int i = 0; i < c->nbuffers; i++) {
        const MprtBuffer *b = &c->buffers[i];
        if (b->kind != MPRT_PARAM && b->kind != MPRT_STATE)
            continue;
        const void *data = b->shard > 1 ? mprt_shard_whole[i]   /* --zero=1: gathered */
                           : b->host ? mprt_slot(b, 0)   /* an offloaded weight */
                                     : mprt_ops->dev_hold(b->dev, mprt_slot(b, 0), b->nbytes);
        e[n++] = (MprtStEntry){b->name, b->dtype, b->rank, b->shape, data, b->nbytes};
    }
    char steps[32], err[512];
    snprintf(steps, sizeof steps, "%ld", step);
    const char *meta[] = {"step", steps, "format", "mpcc-checkpoint", "mpcc_version",
                          c->mpcc_version, "model_sha256", c->model_hash};
    int rc = mprt_st_save(path, e, n, meta, 4, err, sizeof err);
    for (int i = 0, k = 0; i < c->nbuffers; i++) {
        const MprtBuffer *b = &c->buffers[i];
        if ((b->kind == MPRT_PARAM || b->kind == MPRT_STATE) && !b->host && b->shard <= 1)
            mprt_ops->dev_unhold(e[k].data, mprt_slot(b, 0));
        k += b->kind == MPRT_PARAM || b->kind == MPRT_STATE;
    }
    free(e);
    if (rc != 0)
        mprt_die("%s; training stopped after step %ld", err, step);
}

/* ---- the series of --save-every ---- */

typedef struct MprtSeries {
    char stem[4096];        /* STEM of STEM.stepS.safetensors */
    long keep;              /* 0: keep every one */
} MprtSeries;

static void mprt_series_init(MprtSeries *s, const char *save, const char *program, long keep)
{
    const char *base = save ? save : program;
    size_t n = strlen(base), k = strlen(".safetensors");
    if (save && n > k && strcmp(base + n - k, ".safetensors") == 0)
        n -= k;
    if (n + 40 >= sizeof s->stem)
        mprt_die("%s: the checkpoint path is too long", base);
    memcpy(s->stem, base, n);
    s->stem[n] = 0;
    s->keep = keep;
}

static void mprt_series_name(const MprtSeries *s, long step, char *buf, size_t n)
{
    snprintf(buf, n, "%s.step%ld.safetensors", s->stem, step);
}

/* The step of `name` if it is a checkpoint of the series (the file name of
 * STEM.stepS.safetensors, S digits only), else -1. */
static long mprt_series_step(const char *file, const char *name)
{
    size_t n = strlen(file), k = strlen(name), tail = strlen(".safetensors");
    if (strncmp(name, file, n) != 0 || strncmp(name + n, ".step", 5) != 0 ||
        k <= n + 5 + tail || strcmp(name + k - tail, ".safetensors") != 0)
        return -1;
    long step = 0;
    for (const char *p = name + n + 5; p < name + k - tail; p++) {
        if (*p < '0' || *p > '9' || step > LONG_MAX / 10 - 10)
            return -1;
        step = step * 10 + (*p - '0');
    }
    return step;
}

static int mprt_cmp_long_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* The steps of the series' checkpoints up to `upto`, highest first, in a
 * malloc'd array of *n. */
static long *mprt_series_list(const MprtSeries *s, long upto, int *n)
{
    const char *slash = strrchr(s->stem, '/');
    const char *file = slash ? slash + 1 : s->stem;
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - s->stem) + 1 : 1,
             slash ? s->stem : ".");
    DIR *d = opendir(dir);
    long *steps = NULL;
    int cap = 0;
    *n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        long step = mprt_series_step(file, e->d_name);
        if (step < 0 || step > upto)
            continue;
        if (*n == cap) {
            long *grown = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!grown)
                break;
            steps = grown;
        }
        steps[(*n)++] = step;
    }
    if (d)
        closedir(d);
    qsort(steps, (size_t)*n, sizeof *steps, mprt_cmp_long_desc);
    return steps;
}

/* --keep K: all but the K highest steps up to `upto` go. */
static void mprt_series_prune(const MprtSeries *s, long upto)
{
    if (!s->keep)
        return;
    int n;
    long *steps = mprt_series_list(s, upto, &n);
    for (int i = (int)s->keep; i < n; i++) {
        char path[4200];
        mprt_series_name(s, steps[i], path, sizeof path);
        if (remove(path) != 0)
            fprintf(stderr, "%s: warning: cannot remove the old checkpoint %s: %s\n",
                    mprt_program, path, strerror(errno));
    }
    free(steps);
}

/* Saves step `step` to the series and prunes it; the file's name in out. */
static void mprt_series_save(const MprtSeries *s, const MprtCkpt *c, long step, char *out,
                             size_t n)
{
    mprt_series_name(s, step, out, n);
    mprt_save(c, out, step);
    mprt_series_prune(s, step);
}

/* ---- stopping on a signal ---- */

static volatile sig_atomic_t mprt_stop_signal;   /* the first SIGINT/SIGTERM, or 0 */

static void mprt_on_signal(int sig)
{
    if (mprt_stop_signal) {   /* the second: at once, as by default */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    mprt_stop_signal = sig;
}

/* fn handles sig from now on; interrupted system calls restart. */
static void mprt_catch(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, NULL);
}

static void mprt_catch_stop_signals(void)
{
    mprt_catch(SIGINT, mprt_on_signal);
    mprt_catch(SIGTERM, mprt_on_signal);
}

static const char *mprt_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}
