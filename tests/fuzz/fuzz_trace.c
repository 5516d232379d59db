/* fuzz_trace.c — the trace reader's fuzz target (libFuzzer entry point).
 *
 * Arbitrary bytes as a Chrome trace (mpcc --trace, ./train --trace), the
 * two ways mpcc reads one:
 *
 *   --gantt-from=run.json   timeline_parse, then write_gantt_timelines
 *                           draws it as an SVG;
 *   MODEL --measured=run.json --dump=gantt=.. --dump=sweep=.. --dump=costs
 *                           the bytes written to a file, measured_load
 *                           tells a trace from a profile (./train
 *                           --profile) and reads either, then the run is
 *                           drawn under a fixed plan, marked on its sweep,
 *                           and a profile's node times priced in the costs.
 *
 * The plan is made once, for a small MLP on 2 CPU devices (the search over
 * schedules and micro-batch counts, so the sweep has points): planning
 * takes far longer than reading a trace. Drawing allocates in the plan's
 * graph's arena, so each input draws through copies of the Pipeline and
 * Graph whose arena is the run's own: nothing an input does stays.
 *
 * Each way runs on a fresh arena with its user errors caught (harness.c);
 * anything else (a crash, a sanitizer report or leak, an internal-error
 * abort, a hang, a descriptor left open) is a finding. FUZZ_STATS=1
 * prints at exit how many inputs each way read and drew.
 *
 * Built two ways: with clang -fsanitize=fuzzer by tests/fuzz/build_trace.sh,
 * and with replay.c as a plain program that CTest runs over corpus_trace/
 * and regressions_trace/.
 */
#include "harness.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The plan's model: samples/mlp.mp, so that a profile from its trainer
 * names the nodes dump_costs looks up. */
static const char model_text[] =
    "model mlp\n"
    "seed 1\n"
    "input x: f32[batch, 784]\n"
    "input labels: i64[batch]\n"
    "h = Relu(linear(x, 784, 256) as fc1)\n"
    "logits = linear(h, 256, 10) as fc2\n"
    "output logits\n"
    "loss cross_entropy(logits, labels)\n";

static struct {
    bool ready, verbose;
    char *model, *json, *svg, *gantt, *sweep;   /* in the harness's private folder */
    const Pipeline *pl;                         /* the fixed plan, kept for the process */
    long runs, parsed, drawn, loaded, drawn_measured;   /* FUZZ_STATS */
} ft;

static void print_stats(void)
{
    fprintf(stderr, "fuzz_trace: %ld inputs: %ld read as traces, %ld drawn (--gantt-from); "
            "%ld read by --measured, %ld drawn under the plan\n", ft.runs, ft.parsed, ft.drawn,
            ft.loaded, ft.drawn_measured);
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* `mpcc model.mp -cpus 2 -batch 8`: the search's plan. An error here is
 * the harness's, not the input's. */
static const Pipeline *make_plan(void)
{
    Arena *a = arena_new();
    char *argv[] = {"mpcc", ft.model, "-cpus", "2", "-batch", "8"};
    Options o;
    cli_parse(a, (int)(sizeof argv / sizeof argv[0]), argv, &o);
    jmp_buf jb;
    diag_jmp = &jb;
    FILE *err = stderr;
    if (!ft.verbose)
        stderr = fuzz_null();   /* pipeline.c's report */
    if (setjmp(jb) != 0) {
        stderr = err;
        fprintf(stderr, "fuzz_trace: the fixed model did not plan (FUZZ_VERBOSE=1 says why)\n");
        abort();
    }
    const Pipeline *pl = pipeline_choose(a, &o, &driver_passes);
    stderr = err;
    diag_jmp = NULL;
    return pl;   /* its arena lives as long as the process */
}

static void setup(void)
{
    ft.verbose = getenv("FUZZ_VERBOSE") != NULL;
    ft.model = fuzz_path("model.mp");
    ft.json = fuzz_path("run.json");
    ft.svg = fuzz_path("run.svg");
    ft.gantt = fuzz_path("gantt.svg");
    ft.sweep = fuzz_path("sweep.svg");
    write_file(ft.model, model_text, sizeof model_text - 1);
    ft.pl = make_plan();
    if (getenv("FUZZ_STATS"))
        atexit(print_stats);
    ft.ready = true;
}

typedef struct Input {
    const char *text;
    size_t size;
} Input;

/* --gantt-from=run.json */
static void gantt_from(Arena *a, void *ctx)
{
    const Input *in = ctx;
    const Timeline *tl = timeline_parse(a, "fuzz/run.json", in->text, in->size);
    ft.parsed++;
    write_gantt_timelines(a, &tl, 1, ft.svg);
    ft.drawn++;
}

/* model.mp --measured=run.json --dump=gantt=.. --dump=sweep=.. --dump=costs */
static void measured(Arena *a, void *ctx)
{
    (void)ctx;
    const Measured *m = measured_load(a, ft.json);
    ft.loaded++;
    Graph g = *ft.pl->g;
    g.arena = a;   /* what the drawing allocates goes with this run */
    Pipeline pl = *ft.pl;
    pl.g = &g;
    write_gantt(&pl, m, ft.gantt);
    write_sweep(&pl, m, ft.sweep);
    dump_costs(&pl, m, fuzz_null());
    ft.drawn_measured++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ft.ready)
        setup();
    ft.runs++;
    int free_fd = fuzz_free_descriptor();
    /* no offset on a null pointer, even of 0 (UBSan) */
    Input in = {size ? (const char *)data : "", size};
    fuzz_caught(gantt_from, &in);
    write_file(ft.json, in.text, size);
    fuzz_caught(measured, NULL);
    fuzz_check_descriptors(free_fd);
    return 0;
}
