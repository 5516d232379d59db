/* main.c — the mpcc driver: the passes, in order, in one screen.
 *
 *   model.onnx -> import -> bind shapes -> toposort -> infer shapes + fold
 *              -> prune -> (dump | check)
 *              -> loss -> autodiff -> optimizer                 (the training graph)
 *              -> devices -> stages (partition) -> schedule -> plan (buffers,
 *                 copies, events; simulated and verified)   (pipeline.c picks the
 *                 schedule and micro-batch count when asked)
 *              -> (dump partition/schedule/trace | code generation)
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

#ifdef NDEBUG
#define VERIFY(g) ((void)0)
#else
#define VERIFY(g) ir_verify(g)   /* debug builds re-check the IR after each pass */
#endif

static void analyse(Graph *g)
{
    ir_toposort(g);
    VERIFY(g);
    infer_shapes(g);
    VERIFY(g);
    prune(g);
    VERIFY(g);
}

/* The training graph: loss, gradients, optimizer updates. */
static void build_training(Graph *g, const Options *o)
{
    add_loss(g, o);
    autodiff(g, o);
    VERIFY(g);
    add_optimizer(g, o);
    VERIFY(g);
}

/* The training graph of one micro-batch (o->batch rows). */
static Graph *front(Arena *arena, const Options *o)
{
    Graph *g = import_model(arena, o->input);
    bind_shapes(g, o, true);
    analyse(g);
    build_training(g, o);
    return g;
}

static void dump_plan(const Options *o, const Pipeline *pl)
{
    FILE *out = open_output(o);
    if (o->dump_partition)
        dump_partition(pl, out);
    if (o->dump_schedule)
        dump_schedule(pl, out);
    if (o->dump_dot)
        dump_partition_dot(pl, out);
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
    Graph *typed = import_model(arena, o->input);
    bind_shapes(typed, &bound, true);
    analyse(typed);
    onnx_write(import_model(arena, o->input), typed, o->output);
    arena_free(arena);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "export") == 0)
        return export_main(argc - 1, argv + 1);   /* weights back into the model */
    Arena *arena = arena_new();
    Options opt;
    cli_parse(arena, argc, argv, &opt);
    if (opt.emit_onnx)
        return emit_onnx(arena, &opt);

    if (opt.dump_partition || opt.dump_schedule || opt.dump_dot || opt.output) {
        if (!opt.output && !opt.dump_partition && !opt.dump_schedule && !opt.dump_dot)
            error_file(opt.input, "give -o train.c");
        if (!(opt.dump_ir || opt.dump_shapes || opt.dump_grad || opt.check)) {
            Pipeline *pl = pipeline_choose(arena, &opt, front);
            if (opt.pipe.trace)
                write_trace(pl, opt.pipe.trace);
            if (opt.dump_partition || opt.dump_schedule || opt.dump_dot)
                dump_plan(&opt, pl);
            else
                codegen(pl->g, &pl->opt, pl->plan);
            arena_free(arena);
            return 0;
        }
    }
    if (opt.train.microbatches > 1) {
        if (!opt.batch || opt.batch % opt.train.microbatches)
            error_file(opt.input, "--microbatches=%d needs -batch N with N a multiple of it",
                       opt.train.microbatches);
        opt.batch /= opt.train.microbatches;   /* the graph holds one micro-batch */
    }
    Graph *g = import_model(arena, opt.input);
    bool all_static = bind_shapes(g, &opt, !opt.check);

    if (opt.check) {
        if (!all_static) {
            Loc loc = {.file = g->file, .index = -1};
            warn_at(&loc, "shapes are not checked: an input has a symbolic "
                    "dimension (give -batch N or --shapes)");
        } else if (all_ops_known(g)) {
            analyse(g);
        }
        FILE *out = open_output(&opt);
        int problems = check_ops(g, out);
        close_output(&opt, out);
        arena_free(arena);
        return problems ? 1 : 0;
    }

    analyse(g);

    if (opt.dump_grad) {
        build_training(g, &opt);
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
