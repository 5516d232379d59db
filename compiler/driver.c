/* driver.c — the passes, in order, in one place.
 *
 *   front end (front/)     import (ONNX or the DSL) -> bind shapes (and
 *                          re-batch a fixed batch) -> toposort -> infer
 *                          shapes + fold -> prune          [driver_model]
 *   training graph (graph/) export mode -> transposed operands ->
 *                          simplify -> loss
 *                          -> autodiff -> optimizer -> precision
 *                                                        [driver_training]
 *   parallel (parallel/)   devices -> for each candidate schedule and
 *                          micro-batch count (pipeline.c): stages
 *                          (partition) -> schedule -> the step's program
 *                          [driver_plan]: buffers -> fuse -> slots ->
 *                          memory placement -> scratch -> operations ->
 *                          simulate -> issue order -> verify -> verify
 *                          memory; the fastest that fits, refined
 *   emit (emit/)           the trainer's C source, or a dump of any pass
 *
 * --infer runs the same list without the training graph: transposed
 * operands and simplify, forward outputs, then one CPU device, one stage, one micro-batch. --check and the graph
 * dumps stop after the front end; --emit-onnx writes the model back.
 * main.c parses the command line and calls driver_run.
 */
#include "mpcc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static FILE *open_output(const Options *o)
{
    if (!o->output || strcmp(o->output, "-") == 0)
        return stdout;
    FILE *f = fopen(o->output, "w");
    if (!f)
        error_file(o->output, "cannot open for writing: %s", strerror(errno));
    return f;
}

static void close_output(const Options *o, FILE *f)
{
    if (fflush(f) != 0 || ferror(f) || (f != stdout && fclose(f) != 0))
        error_file(o->output ? o->output : "<stdout>", "write failed: %s",
                   strerror(errno));
}

/* Shape inference needs every op to be known; --check reports unknown ops
 * without stopping at the first. */
static bool all_ops_known(const Graph *g)
{
    for (uint32_t i = 0; i < g->nnodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == OP_UNKNOWN)
            return false;
    return true;
}

/* Where every pass gets the model: the file (a harness that holds the
 * bytes in memory sets its own). */
Graph *(*driver_import)(Arena *a, const char *path) = import_model;

/* The model as the compiler sees it: float32 inside (float32.c). */
static Graph *import_for_compile(Arena *a, const char *path)
{
    Graph *g = driver_import(a, path);
    float32_boundary(g);
    return g;
}

#ifdef NDEBUG
#define VERIFY(g) ((void)0)
#else
#define VERIFY(g) ir_verify(g)   /* debug builds re-check the IR after each pass */
#endif

/* A batch the export fixed and bind_shapes re-bound is followed against
 * the model as exported, its shapes inferred at that batch. */
static void reference(Arena *a, const Options *o, Graph *g)
{
    Graph *ref = import_for_compile(a, o->input);
    rebatch_bind_reference(g, ref);
    ir_toposort(ref);
    infer_shapes(ref);
    diag_context = rebatch_advice(g);   /* ends every error of re-batched inference */
}

/* After import and binding: toposort, shapes and folding, pruning. */
void driver_analyse(Arena *a, const Options *o, Graph *g)
{
    ir_toposort(g);
    VERIFY(g);
    if (g->rebatch)
        reference(a, o, g);
    infer_shapes(g);
    diag_context = NULL;
    if (g->rebatch)
        rebatch_note(g);
    VERIFY(g);
    prune(g);
    VERIFY(g);
}

/* The training graph: loss, gradients, optimizer updates. */
static void training_graph(Graph *g, const Options *o)
{
    check_export_mode(g);
    fold_transposed_operands(g);
    simplify(g);
    add_loss(g, o);
    autodiff(g, o);
    VERIFY(g);
    add_optimizer(g, o);
    VERIFY(g);
    lower_precision(g, o);
    fold_product_views(g);
    VERIFY(g);
}

/* The model as the front end leaves it: bound, typed, folded, pruned. */
Graph *driver_model(Arena *arena, const Options *o)
{
    Graph *g = import_for_compile(arena, o->input);
    bind_shapes(g, o, true);
    driver_analyse(arena, o, g);
    return g;
}

/* The training graph of one micro-batch (o->batch rows). */
Graph *driver_training(Arena *arena, const Options *o)
{
    Graph *g = driver_model(arena, o);
    training_graph(g, o);
    return g;
}

/* The step's program for one partition and schedule. A schedule whose
 * copies would wait on each other for shared slots (the simulation finds
 * it stuck) gets a slot per micro-batch for every transfer buffer. */
Plan *driver_plan(Graph *g, const Stages *st, const Schedule *sc, const Devices *ds,
                  const Options *o)
{
    const char *stuck = "";
    for (int own_slots = 0; own_slots < 2; own_slots++) {
        Plan *p = plan_buffers(g, st, sc, ds, o, own_slots);
        p->fu = fuse(g, p, o);
        p->blocked = layout_blocked(p, o, g->arena);
        plan_slots(p);
        plan_place(p, g->arena);
        plan_workspace(p);
        plan_ops(p);
        if (!simulate(p, &stuck))
            continue;
        plan_order(p);
        plan_verify(p);
        plan_verify_nodes(p);
        plan_verify_memory(p);
        return p;
    }
    mpcc_die(__FILE__, __LINE__, "the %s schedule deadlocks%s", schedule_name(sc->kind), stuck);
}

const Passes driver_passes = {driver_training, driver_plan};


static void dump_plan(const Options *o, const Pipeline *pl)
{
    FILE *out = open_output(o);
    if (o->dump_partition)
        dump_partition(pl, out);
    if (o->dump_schedule)
        dump_schedule(pl, out);
    if (o->dump_dot)
        dump_partition_dot(pl, out);
    if (o->dump_fuse)
        dump_fusion(pl->g, pl->plan, pl->plan->fu, out);
    if (o->dump_memory)
        dump_memory(pl, out);
    if (o->dump_costs)
        dump_costs(pl, measured_load(pl->g->arena, o->pipe.measured), out);
    close_output(o, out);
}

/* --emit-onnx: the model checked with its shapes bound (-batch 2 unless
 * given), then written as imported, its batch dimension symbolic. */
static int emit_onnx(Arena *arena, const Options *o)
{
    if (!o->output)
        error_file(o->input, "give -o model.onnx to say where --emit-onnx writes the model");
    Options bound = *o;
    if (!bound.batch)
        bound.batch = 2;
    Graph *typed = driver_import(arena, o->input);
    bind_shapes(typed, &bound, true);
    driver_analyse(arena, &bound, typed);
    onnx_write(driver_import(arena, o->input), typed, o->output);
    arena_free(arena);
    return 0;
}

/* The forward-only program, or with --dump=fuse its fused chains. */
static void infer_emit(const Options *o, Graph *g, const Plan *plan)
{
    if (!o->dump_fuse) {
        codegen(g, o, plan, plan->fu);
        return;
    }
    FILE *out = open_output(o);
    dump_fusion(g, plan, plan->fu, out);
    close_output(o, out);
}

/* --infer's passes: the model's forward graph (*g), planned on one CPU
 * device as one stage and one micro-batch. */
const Plan *driver_forward(Arena *arena, const Options *o, Graph **g)
{
    *g = driver_model(arena, o);
    fold_transposed_operands(*g);
    simplify(*g);
    forward_outputs(*g);
    VERIFY(*g);
    Devices *ds = arena_alloc(arena, sizeof *ds);   /* the plan keeps it */
    *ds = devices_resolve(arena, o);
    const char *why = NULL;
    Reject rej = {0};
    Stages *st = stages_build(*g, o, ds, NULL, SCHED_GPIPE, 1, 1, NULL, &rej);
    if (!st)
        error_reject(&rej);
    Schedule *sc = schedule_build(arena, SCHED_GPIPE, st, 1, 1, &why);
    MPCC_ASSERT(sc);
    return driver_plan(*g, st, sc, ds, o);
}

/* --infer: the forward pass alone, on one CPU device. */
static int infer(Arena *arena, const Options *o)
{
    if (!o->output && !o->dump_fuse)
        error_file(o->input, "give -o infer.c to write the forward-only program");
    if (o->gpus > 0 || o->cpus > 1 || o->pipe.devices || o->train.microbatches > 1)
        error_file(o->input, "--infer runs on one CPU device; drop -cpus, -gpus, --devices "
                   "and --microbatches");
    Graph *g;
    const Plan *plan = driver_forward(arena, o, &g);
    infer_emit(o, g, plan);
    arena_free(arena);
    return 0;
}

/* --gantt-from=run.json[,more.json]: traces drawn alone, one panel each,
 * to -o (default: the first trace's name with .svg for .json). */
static int gantt_from(Arena *arena, const Options *o)
{
    int n = 0;
    const Timeline **tl = NULL;
    char *list = arena_strdup(arena, o->gantt_from);
    for (char *p = strtok(list, ","); p; p = strtok(NULL, ",")) {
        tl = arena_grow(arena, tl, (size_t)n, (size_t)n + 1, sizeof *tl);
        tl[n++] = timeline_read(arena, p);
    }
    if (!n)
        error_file(o->gantt_from, "--gantt-from names no trace; give ./train --trace's file");
    const char *out = o->output;
    if (!out) {
        const char *first = tl[0]->file;
        size_t len = strlen(first);
        bool json = len > 5 && strcmp(first + len - 5, ".json") == 0;
        out = arena_printf(arena, "%.*s.svg", (int)(json ? len - 5 : len), first);
    }
    write_gantt_timelines(arena, tl, n, out);
    fprintf(stderr, "mpcc: wrote %s\n", out);
    arena_free(arena);
    return 0;
}

/* --check past the op table: the plan and the program, written nowhere.
 * Every node whose code cannot be written is reported (codegen_check);
 * an error of the plan itself (memory, devices) is one more. */
static int check_compile(Arena *arena, const Options *given)
{
    Options copy = *given;
    copy.output = "check.c";   /* names the program; nothing is written */
    const Options *o = &copy;
    jmp_buf here, *outer = diag_jmp;
    volatile int problems = 0;
    diag_jmp = &here;
    if (setjmp(here) == 0) {
        if (o->infer) {
            Graph *g;
            const Plan *plan = driver_forward(arena, o, &g);
            problems = codegen_check(g, o, plan, plan->fu);
        } else {
            Pipeline *pl = pipeline_choose(arena, o, &driver_passes);
            problems = codegen_check(pl->g, &pl->opt, pl->plan, pl->plan->fu);
        }
    } else {
        problems = problems + 1;
    }
    diag_jmp = outer;
    return problems;
}

/* --check: the op table's verdict on every node, then, when it finds
 * nothing and the shapes are known, everything else that would stop the
 * compile (attributes, ranks, dtypes, the plan), so that --check passes
 * exactly when the compile does. */
static int check(Arena *arena, const Options *given, Options *opt, Graph *g, bool all_static)
{
    Loc loc = {.file = g->file, .index = -1};
    if (!all_static)
        warn_at(&loc, "shapes are not checked: an input has a symbolic dimension (give "
                "-batch N or --shapes)");
    else if (all_ops_known(g))
        driver_analyse(arena, opt, g);
    FILE *out = open_output(opt);
    int problems = check_ops(g, out, opt->infer);
    int later = !problems && all_static ? check_compile(arena, given) : 0;
    if (!problems && later)
        report_at(&loc, "%d problem%s above: every op is in the table, but the model does "
                  "not compile for %s yet", later, later == 1 ? "" : "s",
                  opt->infer ? "inference (--infer)" : "training");
    else if (!problems)
        fprintf(out, "every op is supported%s\n", all_static ? ", and the model compiles"
                                                             : "");
    close_output(opt, out);
    arena_free(arena);
    return problems || later ? 1 : 0;
}

/* --data-parallel=auto: every layout of the devices into replicas that
 * divides the batch (replicas_candidates), each planned in silence (an
 * error of a candidate, as not fitting, passes it over), and the fastest
 * predicted step kept, with a note naming the others. */
static void choose_replicas(Arena *arena, Options *o)
{
    int R[32], n = replicas_candidates(o, R, 32);
    Options best = *o;
    double best_t = 0;
    char others[512] = "";
    jmp_buf here, *outer = diag_jmp;
    bool was_quiet = diag_quiet;
    for (int i = 0; i < n; i++) {
        Options c = *o;
        c.pipe.replicas = R[i];
        volatile double t = -1;
        diag_jmp = &here;
        diag_quiet = true;
        if (setjmp(here) == 0) {
            replicas_apply(&c);
            t = pipeline_choose(arena, &c, &driver_passes)->plan->step_time;
        }
        diag_jmp = outer;
        diag_quiet = was_quiet;
        size_t k = strlen(others);
        snprintf(others + k, sizeof others - k, "%s%d: %s", k ? ", " : "", R[i],
                 t < 0 ? "no plan" : arena_printf(arena, "%.4g s", t));
        if (t >= 0 && (best_t == 0 || t < best_t))
            best = c, best_t = t;
    }
    Loc loc = {.file = o->input, .index = -1};
    if (best_t == 0)
        error_at(&loc, "--data-parallel=auto: no number of replicas gives a plan that fits "
                 "(%s)", others);
    note_at(&loc, "--data-parallel=auto chose %d replica(s): the fastest predicted step of "
            "these (%s)", best.pipe.replicas, others);
    *o = best;
}

/* One run of mpcc on parsed options: the mode they ask for. Returns the
 * exit status; errors exit through diag.c. */
int driver_run(Arena *arena, Options *o)
{
    if (!o->gantt_from && !o->emit_onnx && o->pipe.replicas == REPLICAS_AUTO && !o->infer &&
        !o->check)
        choose_replicas(arena, o);   /* applied, as below */
    else if (!o->gantt_from && !o->emit_onnx)
        replicas_apply(o);   /* from here on, one replica's options */
    Options opt = *o;
    if (opt.gantt_from)
        return gantt_from(arena, &opt);
    if (opt.emit_onnx)
        return emit_onnx(arena, &opt);
    if (opt.infer && !opt.check && !opt.dump_ir && !opt.dump_shapes)
        return infer(arena, &opt);

    bool text_dumps = opt.dump_partition || opt.dump_schedule || opt.dump_dot ||
                      opt.dump_fuse || opt.dump_memory || opt.dump_costs;
    bool dump_plan_only = text_dumps || opt.dump_gantt || opt.dump_sweep;
    if (dump_plan_only || opt.output) {
        if (!(opt.dump_ir || opt.dump_shapes || opt.dump_grad || opt.check)) {
            Pipeline *pl = pipeline_choose(arena, &opt, &driver_passes);
            if (opt.pipe.trace)
                write_trace(pl, opt.pipe.trace);
            const Measured *runs = measured_load(arena, opt.pipe.measured);
            if (opt.dump_gantt)
                write_gantt(pl, runs, opt.dump_gantt);
            if (opt.dump_sweep)
                write_sweep(pl, runs, opt.dump_sweep);
            if (text_dumps)
                dump_plan(&opt, pl);
            else if (!dump_plan_only)
                codegen(pl->g, &pl->opt, pl->plan, pl->plan->fu);
            arena_free(arena);
            return 0;
        }
    }
    check_microbatches(&opt);
    if (opt.train.microbatches > 1)
        opt.batch /= opt.train.microbatches;   /* the graph holds one micro-batch */
    /* --dump=ir and --dump=shapes show the model's own element types */
    bool as_is = opt.dump_ir || opt.dump_shapes;
    Graph *g = as_is ? driver_import(arena, opt.input) : import_for_compile(arena, opt.input);
    bool all_static = bind_shapes(g, &opt, !opt.check);

    if (opt.check)
        return check(arena, o, &opt, g, all_static);

    driver_analyse(arena, &opt, g);

    if (opt.dump_grad) {
        training_graph(g, &opt);
        FILE *out = open_output(&opt);
        dump_ir(g, out);
        close_output(&opt, out);
        arena_free(arena);
        return 0;
    }

    if (opt.dump_ir || opt.dump_shapes) {
        FILE *out = open_output(&opt);
        if (opt.dump_ir)
            dump_ir(g, out);
        if (opt.dump_shapes)
            dump_shapes(g, out);
        close_output(&opt, out);
        arena_free(arena);
        return 0;
    }

    error_file(opt.input, "give -o train.c to write the trainer (or --dump/--check "
               "to inspect the model)");
}
