/* harness.c — one input through the whole compiler, for the fuzz targets.
 *
 * Two runs per input, through compiler/driver.c's passes (driver_import set
 * to read the input's bytes):
 *
 *   the front half   import -> bind shapes -> toposort -> infer shapes + fold
 *                    -> prune -> --check's table, --dump=ir and --dump=shapes
 *   `-o train.c`     pipeline_choose with the passes of driver.c (import, bind,
 *                    analyse, loss -> autodiff -> optimizer, with --dump=grad
 *                    once) -> devices -> stages -> schedule -> memory plan
 *                    (sharing, simulation, checks) -> fusion -> every plan dump,
 *                    the trace and the SVG -> code generation; or, for the
 *                    --infer set, driver.c's forward-only program
 *
 * The options are one of the fixed sets below, picked by a hash of the
 * input so that the corpus spreads over them (FUZZ_VARIANT=N picks set N;
 * FUZZ_VARIANT=all runs every set, as the corpus replay in CTest does):
 * 1 or 2 CPU devices, a CPU and a GPU, 2 GPUs; each schedule, and the
 * search over them; 1, 2 or 4 micro-batches; SGD and AdamW; a device
 * profile with little memory (partitions the memory plan rejects,
 * recomputation); --infer. Inputs with more than FUZZ_MAX_NODES nodes are
 * refused after import, so that one run takes milliseconds.
 *
 * Nothing is read from the machine per run: the CPU profile is pinned
 * (MPCC_CPU_PROFILE, before its first use), the small-memory profile is a
 * file written once into a private temporary folder ($TMPDIR, else
 * /dev/shm, else /tmp), where the generated program, its weights and the
 * trace go too (removed at exit). No state is left between runs: each
 * runs on its own arena, diag_context and the DSL sources are reset, and a
 * file descriptor left open is a finding. The once-only notes of diag.c
 * keep their memory of what was said, which only silences repeats.
 *
 * Diagnostics are quiet and stderr is a null stream while the compiler
 * runs, unless FUZZ_VERBOSE is set (to see why a finding failed: an
 * internal error's message goes to stderr too). With FUZZ_STATS set, the
 * counts of inputs that reached each pass are printed at exit.
 *
 * fuzz_trace.c reads no model: it takes the private folder, the caught
 * errors and the descriptor check from here (harness.h).
 */
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { FUZZ_MAX_NODES = 64, FUZZ_MAX_ARGS = 16 };

/* The option sets, after "mpcc MODEL -o DIR/train.c". "@" stands for the
 * small-memory profile file. */
static const char *const variants[][FUZZ_MAX_ARGS] = {
    {"-cpus", "2", "-batch", "4", "--microbatches=2", "--schedule=1f1b"},
    {"-cpus", "2", "-batch", "4", "--microbatches=2", "--schedule=gpipe", "--optimizer=adamw",
     "--clip-norm=1"},
    {"-cpus", "1", "-batch", "2"},
    {"-cpus", "2", "-batch", "4", "--microbatches=4", "--schedule=zb", "--momentum=0.9",
     "--nesterov"},
    {"-cpus", "2", "-batch", "4", "--microbatches=2", "--schedule=interleaved"},
    {"--devices=cpu,cuda:0", "-batch", "4", "--microbatches=2", "--schedule=1f1b"},
    {"-gpus", "2", "-batch", "2", "--microbatches=2", "--schedule=gpipe", "--recompute=all",
     "--tf32", "--weight-decay=0.1"},
    {"-cpus", "2", "-batch", "4"},
    {"-batch", "2", "--infer"},
    {"-cpus", "2", "-batch", "4", "--microbatches=2", "--schedule=1f1b", "--objective=memory",
     "--no-fuse", "--loss=mse"},
    {"-cpus", "2", "-batch", "2", "--microbatches=2", "--schedule=gpipe", "--profile=@",
     "--recompute=auto"},
};
enum { NVARIANTS = sizeof variants / sizeof variants[0] };

/* The small-memory profile: a stage of a few small layers fits, a large
 * model does not, so the memory plan rejects partitions. */
static const char small_profile[] =
    "flops = 2e10\nbandwidth = 1e10\noverhead = 2e-6\nmemory = 262144\n";

enum { REACH_IMPORT, REACH_TRAINING, REACH_PLAN, REACH_CODEGEN, REACH_DONE, REACH_COUNT };

static struct {
    bool ready, verbose;
    int variant;                /* FUZZ_VARIANT: -1 by hash, NVARIANTS all */
    FILE *null;                 /* where the dumps go */
    char dir[64];
    char *train_c, *trace, *gantt, *profile;
    FuzzImport import;          /* the input of this run */
    const char *path;
    const uint8_t *data;
    size_t size;
    bool imported, dumped;
    long runs, reached[REACH_COUNT];   /* FUZZ_STATS: inputs that reached each REACH_ */
} fz;

/* Marks this input as having reached pass r (once per input). */
static void reached(int r)
{
    static long last[REACH_COUNT];
    if (last[r] != fz.runs)
        last[r] = fz.runs, fz.reached[r]++;
}

static void print_stats(void)
{
    if (!fz.runs)
        return;   /* a target that runs no models (fuzz_trace.c) */
    fprintf(stderr, "fuzz: %ld inputs: %ld imported, %ld with a training graph (or --infer's "
            "forward), %ld planned, %ld in codegen, %ld generated\n", fz.runs,
            fz.reached[REACH_IMPORT], fz.reached[REACH_TRAINING], fz.reached[REACH_PLAN],
            fz.reached[REACH_CODEGEN], fz.reached[REACH_DONE]);
}

static char *in_dir(const char *name)
{
    size_t n = strlen(fz.dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        abort();
    snprintf(p, n, "%s/%s", fz.dir, name);
    return p;
}

/* Everything in the private folder, whichever target wrote it, then the
 * folder. */
static void remove_outputs(void)
{
    DIR *d = opendir(fz.dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = in_dir(e->d_name);
        remove(p);
        free(p);
    }
    if (d)
        closedir(d);
    rmdir(fz.dir);
}

int fuzz_free_descriptor(void)
{
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0)
        close(fd);
    return fd;
}

/* A descriptor that a run left open takes the lowest free number: the
 * next one is higher. A leak is a finding, like a leak of memory (which
 * LeakSanitizer would not see in a FILE that glibc still lists). Another
 * thread (the fuzzing engine's, a sanitizer's) may hold one for a moment:
 * a leak is one still open after 20 ms. */
void fuzz_check_descriptors(int before)
{
    for (int tries = 0; fuzz_free_descriptor() > before; tries++) {
        if (tries == 20) {
            fprintf(stderr, "fuzz: the run left a file descriptor open (the lowest free "
                    "one was %d, is %d)\n", before, fuzz_free_descriptor());
            abort();
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

static void setup(void)
{
    setenv("MPCC_CPU_PROFILE", "2e10,1e10", 1);   /* calibrate.c: no measuring, no cache */
    fz.verbose = getenv("FUZZ_VERBOSE") != NULL;
    const char *v = getenv("FUZZ_VARIANT");
    fz.variant = !v ? -1 : strcmp(v, "all") == 0 ? NVARIANTS : atoi(v) % NVARIANTS;
    fz.null = fopen("/dev/null", "w");
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/' || strlen(tmp) >= 40)
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";   /* memory, if it can */
    snprintf(fz.dir, sizeof fz.dir, "%s/mpcc-fuzz-XXXXXX", tmp);
    if (!fz.null || !mkdtemp(fz.dir)) {
        perror("fuzz: setup");
        abort();
    }
    fz.train_c = in_dir("train.c");
    fz.trace = in_dir("trace.json");
    fz.gantt = in_dir("gantt.svg");
    fz.profile = in_dir("small.profile");
    FILE *f = fopen(fz.profile, "w");
    if (!f || fputs(small_profile, f) < 0 || fclose(f) != 0) {
        perror(fz.profile);
        abort();
    }
    atexit(remove_outputs);
    if (getenv("FUZZ_STATS"))
        atexit(print_stats);
    fz.ready = true;
}

char *fuzz_path(const char *name)
{
    if (!fz.ready)
        setup();
    return in_dir(name);
}

FILE *fuzz_null(void)
{
    if (!fz.ready)
        setup();
    return fz.null;
}

/* FNV-1a: the option set of an input. */
static int pick_variant(const uint8_t *data, size_t size)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    return (int)(h % NVARIANTS);
}

static void options_for(Arena *a, int variant, Options *o)
{
    char *argv[FUZZ_MAX_ARGS + 5] = {"mpcc", (char *)fz.path, "-o", fz.train_c};
    int argc = 4;
    for (int i = 0; i < FUZZ_MAX_ARGS && variants[variant][i]; i++) {
        const char *arg = variants[variant][i];
        argv[argc++] = strcmp(arg, "--profile=@") == 0
                           ? arena_printf(a, "--profile=%s", fz.profile) : (char *)arg;
    }
    cli_parse(a, argc, argv, o);
}

/* ---- the passes, as driver.c runs them ---- */

/* driver_import for this input: its bytes, not a file; a model too large
 * for one run to take milliseconds is refused. */
static Graph *import_input(Arena *a, const char *path)
{
    Graph *g = fz.import(a, path, fz.data, fz.size);
    if (g->nnodes > FUZZ_MAX_NODES)
        error_file(fz.path, "fuzz: more than %d nodes", FUZZ_MAX_NODES);
    fz.imported = true;
    reached(REACH_IMPORT);
    return g;
}

static bool all_ops_known(const Graph *g)
{
    for (uint32_t i = 0; i < g->nnodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == OP_UNKNOWN)
            return false;
    return true;
}

/* driver_training, and --dump=grad once. */
static Graph *front(Arena *a, const Options *o)
{
    Graph *g = driver_training(a, o);
    reached(REACH_TRAINING);
    if (!fz.dumped) {
        dump_ir(g, fz.null);
        fz.dumped = true;
    }
    return g;
}

/* --check, --dump=ir and --dump=shapes: the graph of one micro-batch. */
static void front_half(Arena *a, const Options *given)
{
    Options o = *given;
    if (o.train.microbatches > 1)
        o.batch /= o.train.microbatches;
    Graph *g = driver_import(a, o.input);
    bool all_static = bind_shapes(g, &o, false);
    if (all_static && all_ops_known(g)) {
        driver_analyse(a, &o, g);
        dump_ir(g, fz.null);
        dump_shapes(g, fz.null);
    }
    check_ops(g, fz.null, o.infer);
}

/* driver.c's --infer: the forward pass alone, on one CPU device. */
static void infer(Arena *a, const Options *o)
{
    Graph *g;
    const Plan *plan = driver_forward(a, o, &g);
    reached(REACH_TRAINING);
    reached(REACH_PLAN);
    dump_fusion(g, plan, plan->fu, fz.null);
    reached(REACH_CODEGEN);
    codegen(g, o, plan, plan->fu);
    reached(REACH_DONE);
}

/* `mpcc MODEL -o train.c`, with every dump of the plan on the way. */
static void train(Arena *a, const Options *o)
{
    Pipeline *pl = pipeline_choose(a, o, &(Passes){front, driver_plan});
    reached(REACH_PLAN);
    write_trace(pl, fz.trace);
    write_gantt(pl, NULL, fz.gantt);
    dump_partition(pl, fz.null);
    dump_schedule(pl, fz.null);
    dump_partition_dot(pl, fz.null);
    dump_fusion(pl->g, pl->plan, pl->plan->fu, fz.null);
    dump_memory(pl, fz.null);
    dump_costs(pl, measured_load(a, o->pipe.measured), fz.null);
    reached(REACH_CODEGEN);
    codegen(pl->g, &pl->opt, pl->plan, pl->plan->fu);
    reached(REACH_DONE);
}

/* The second run: the program that `-o train.c` writes, as driver.c picks it. */
static void whole(Arena *a, const Options *o)
{
    if (o->infer)
        infer(a, o);
    else
        train(a, o);
}

bool fuzz_caught(FuzzStep step, void *ctx)
{
    if (!fz.ready)
        setup();
    Arena *a = arena_new();
    jmp_buf jb;
    diag_jmp = &jb;
    diag_quiet = !fz.verbose;
    diag_context = NULL;
    FILE *err = stderr;
    if (!fz.verbose)
        stderr = fz.null;   /* pipeline.c's report and the like */
    volatile bool done = false;   /* set between setjmp and longjmp */
    if (setjmp(jb) == 0) {
        step(a, ctx);
        done = true;
    }
    stderr = err;
    diag_jmp = NULL;
    diag_context = NULL;
    diag_forget_sources();
    arena_free(a);
    return done;
}

typedef void (*Stage)(Arena *a, const Options *o);

typedef struct StageRun {
    Stage stage;
    int variant;
} StageRun;

/* A mode with the options of its set, parsed on the run's arena. */
static void stage_run(Arena *a, void *ctx)
{
    const StageRun *r = ctx;
    Options o;
    options_for(a, r->variant, &o);
    r->stage(a, &o);
}

/* One mode on a fresh arena, its user errors caught. */
static void caught(Stage stage, int variant)
{
    fuzz_caught(stage_run, &(StageRun){stage, variant});
}

/* Both runs with one option set; false if the input is not a model. */
static bool run_variant(int variant)
{
    fz.imported = fz.dumped = false;
    caught(front_half, variant);
    if (!fz.imported)
        return false;   /* the rest would stop where import did */
    caught(whole, variant);
    return true;
}

void fuzz_model(FuzzImport import, const char *path, const uint8_t *data, size_t size)
{
    if (!fz.ready)
        setup();
    driver_import = import_input;
    fz.import = import, fz.path = path, fz.data = data, fz.size = size;
    fz.runs++;
    int free_fd = fuzz_free_descriptor();
    if (fz.variant < 0)
        run_variant(pick_variant(data, size));
    else if (fz.variant < NVARIANTS)
        run_variant(fz.variant);
    else
        for (int v = 0; v < NVARIANTS && run_variant(v); v++)
            continue;
    fuzz_check_descriptors(free_fd);
}
