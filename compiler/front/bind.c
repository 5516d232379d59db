/* bind.c — fixes every graph input's shape at compile time.
 *
 * --shapes=name:DxD.. gives an input's whole shape; -batch N binds a
 * symbolic first dimension. A first dimension the export fixed (as
 * torch.onnx.export writes it without dynamic_axes) is re-bound too: the
 * input is handed to rebatch.c, which follows the batch through the graph.
 * Whatever is still symbolic afterwards is an error that says which flag to
 * add: mpcc compiles static shapes only.
 */
#include "mpcc.h"

#include <string.h>

static Value *input_named(Graph *g, const char *name)
{
    for (uint32_t i = 0; i < g->ninputs; i++)
        if (strcmp(g->values[g->inputs[i]].name, name) == 0)
            return &g->values[g->inputs[i]];
    return NULL;
}

static const char *input_list(Graph *g)
{
    char *s = "";
    for (uint32_t i = 0; i < g->ninputs && i < 8; i++)
        s = arena_printf(g->arena, "%s%s'%s'", s, i ? ", " : "",
                         str_escaped(g->arena, g->values[g->inputs[i]].name, 60));
    return g->ninputs ? s : "none";
}

/* The rows of a whole batch, for diagnostics (o->batch is one micro-batch). */
static int64_t whole_batch(const Options *o)
{
    return o->batch * (o->train.microbatches > 1 ? o->train.microbatches : 1);
}

static void rebatch(Graph *g, uint32_t input, int64_t to, const Options *o)
{
    Value *v = &g->values[input];
    if (v->shape.d[0] == 0)   /* nothing to scale the batch from */
        error_at(&v->loc, "the first dimension is fixed to 0 (an empty tensor) in the model, "
                 "so it cannot be re-bound to %lld; export the model with a batch of at least 1",
                 (long long)to);
    int64_t from = rebatch_from(g);
    if (from && v->shape.d[0] != from) {   /* not a batch: another input fixed it first */
        warn_once(&v->loc, "the first dimension is fixed to %lld, not to the exported "
                  "batch %lld; it is left as it is (give its shape with --shapes to change "
                  "it)", (long long)v->shape.d[0], (long long)from);
        return;
    }
    rebatch_request(g, input, to, o->batch ? whole_batch(o) : to);
}

static void bind_given(Graph *g, const ShapeBinding *b, const Options *o)
{
    Value *v = input_named(g, b->name);
    if (!v)
        error_file(g->file, "--shapes names '%s', which is not a graph input "
                   "(inputs: %s)", str_escaped(g->arena, b->name, 100), input_list(g));
    if (v->shape.rank >= 0 && v->shape.rank != b->shape.rank)
        error_at(&v->loc, "--shapes gives %d dimensions but the input has rank %d",
                 b->shape.rank, v->shape.rank);
    for (int i = 1; i < v->shape.rank; i++)
        if (!v->sym[i] && v->shape.d[i] != b->shape.d[i])
            error_at(&v->loc, "--shapes gives %s but dimension %d is fixed to %lld "
                     "in the model (only the batch, dimension 0, can be re-bound)",
                     shape_str(g->arena, &b->shape), i, (long long)v->shape.d[i]);
    if (v->shape.rank > 0 && !v->sym[0] && v->shape.d[0] != b->shape.d[0])
        rebatch(g, (uint32_t)(v - g->values), b->shape.d[0], o);
    v->shape = b->shape;
    memset(v->sym, 0, sizeof v->sym);
    v->symbolic = false;
}

static void bind_batch(Graph *g, Value *v, int64_t batch, const Options *o, bool batch_fixed)
{
    if (v->shape.rank < 1)
        return;
    if (v->sym[0]) {
        const char *sym = v->sym[0];
        /* The same symbol elsewhere in this input is the same size. */
        for (int i = 0; i < v->shape.rank; i++)
            if (v->sym[i] && strcmp(v->sym[i], sym) == 0 && strcmp(sym, "?") != 0)
                v->shape.d[i] = batch, v->sym[i] = NULL;
        v->shape.d[0] = batch;
        v->sym[0] = NULL;
    } else if (v->shape.d[0] != batch && batch_fixed) {
        rebatch(g, (uint32_t)(v - g->values), batch, o);
    } else if (v->shape.d[0] != batch) {
        warn_once(&v->loc, "the first dimension is fixed to %lld in the model while another "
                  "input's batch is symbolic: it is not the batch, and -batch %lld leaves it as "
                  "it is (give its shape with --shapes to change it)",
                  (long long)v->shape.d[0], (long long)batch);
    }
}

/* The export fixed the batch: no input has a symbolic first dimension. */
static bool batch_fixed(const Graph *g)
{
    for (uint32_t i = 0; i < g->ninputs; i++) {
        const Value *v = &g->values[g->inputs[i]];
        if (v->shape.rank >= 1 && v->sym[0])
            return false;
    }
    return true;
}

static bool still_symbolic(const Value *v)
{
    if (v->shape.rank < 0)
        return true;
    for (int i = 0; i < v->shape.rank; i++)
        if (v->sym[i])
            return true;
    return false;
}

static void require_static(Graph *g, Value *v)
{
    if (v->shape.rank < 0)
        error_at(&v->loc, "the input has no shape in the model; give one with "
                 "--shapes=%s:DxDx..", str_escaped(g->arena, v->name, 100));
    for (int i = 0; i < v->shape.rank; i++)
        if (v->sym[i])
            error_at(&v->loc, "dimension %d ('%s') is symbolic; fix it with %s", i,
                     str_escaped(g->arena, v->sym[i], 60),
                     i == 0 ? "-batch N or --shapes" : "--shapes=NAME:DxDx..");
    int64_t bytes;
    if (!shape_bytes(&v->shape, v->dtype, &bytes))
        error_at(&v->loc, "the shape %s is too large to address",
                 shape_str(g->arena, &v->shape));
    v->symbolic = false;
    v->typed = true;
}

static bool given(const Options *o, const char *name)
{
    for (uint32_t i = 0; i < o->nshapes; i++)
        if (strcmp(o->shapes[i].name, name) == 0)
            return true;
    return false;
}

bool bind_shapes(Graph *g, const Options *o, bool require)
{
    g->rows = o->batch;
    g->cpu_kernels = (int)(o->infer ? KERNELS_BUILTIN : o->cpu_kernels);   /* --infer: builtin */
    bool all_static = true;
    bool fixed = batch_fixed(g);
    for (uint32_t i = 0; i < o->nshapes; i++)
        bind_given(g, &o->shapes[i], o);
    for (uint32_t i = 0; i < g->ninputs; i++) {
        Value *v = &g->values[g->inputs[i]];
        if (o->batch && !given(o, v->name))
            bind_batch(g, v, o->batch, o, fixed);
        if (!require && still_symbolic(v))
            all_static = false;
        else
            require_static(g, v);
    }
    return all_static;
}
