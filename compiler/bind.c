/* bind.c — fixes every graph input's shape at compile time.
 *
 * --shapes=name:DxD.. gives an input's whole shape; -batch N binds a
 * symbolic first dimension. Whatever is still symbolic afterwards is an
 * error that says which flag to add: mpcc compiles static shapes only.
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

static void bind_given(Graph *g, const ShapeBinding *b)
{
    Value *v = input_named(g, b->name);
    if (!v)
        error_file(g->file, "--shapes names '%s', which is not a graph input "
                   "(inputs: %s)", str_escaped(g->arena, b->name, 100), input_list(g));
    if (v->shape.rank >= 0 && v->shape.rank != b->shape.rank)
        error_at(&v->loc, "--shapes gives %d dimensions but the input has rank %d",
                 b->shape.rank, v->shape.rank);
    for (int i = 0; i < v->shape.rank; i++)
        if (!v->sym[i] && v->shape.d[i] != b->shape.d[i])
            error_at(&v->loc, "--shapes gives %s but dimension %d is fixed to %lld "
                     "in the model", shape_str(g->arena, &b->shape), i,
                     (long long)v->shape.d[i]);
    v->shape = b->shape;
    memset(v->sym, 0, sizeof v->sym);
    v->symbolic = false;
}

static void bind_batch(Graph *g, Value *v, int64_t batch)
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
    } else if (v->shape.d[0] != batch) {
        warn_at(&v->loc, "the batch dimension is fixed to %lld in the model; -batch "
                "%lld does not change it (export with a dynamic batch axis, or use "
                "--shapes)", (long long)v->shape.d[0], (long long)batch);
    }
    (void)g;
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
    bool all_static = true;
    for (uint32_t i = 0; i < o->nshapes; i++)
        bind_given(g, &o->shapes[i]);
    for (uint32_t i = 0; i < g->ninputs; i++) {
        Value *v = &g->values[g->inputs[i]];
        if (o->batch && !given(o, v->name))
            bind_batch(g, v, o->batch);
        if (!require && still_symbolic(v))
            all_static = false;
        else
            require_static(g, v);
    }
    return all_static;
}
