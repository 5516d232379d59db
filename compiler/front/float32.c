/* float32.c — models in float64, float16 or bfloat16, computed in float32.
 *
 * mpcc's kernels compute floating point in float32. A model that declares
 * another floating-point type keeps it at its boundary and is float32
 * inside:
 *   - a float64 or float16 graph input is read in its own type and cast to
 *     float32 where the step begins (a Cast node the program shows);
 *   - with --infer, a graph output the model declares float64 or float16
 *     is cast back as it is written (forward.c); a trainer's outputs feed
 *     its loss in float32;
 *   - initializers and constants are converted once, here, so weights train
 *     (and checkpoints hold them) in float32; `mpcc export` converts them
 *     back to the model's types;
 *   - Cast to such a type, and the ops that take an output dtype, produce
 *     float32.
 * bfloat16 has no .npy type, so a bfloat16 graph input is read as float32.
 * Runs after import, before shapes are bound; says once what it changed.
 */
#include "mpcc.h"

#include <string.h>

static bool narrowed(DType t)
{
    return t == DT_F64 || t == DT_F16 || t == DT_BF16;
}

/* A float32 copy of a floating-point tensor of another type. */
static const Tensor *to_f32(Arena *a, const Tensor *t)
{
    int64_t n = shape_numel(&t->shape);
    float *d = arena_array(a, (size_t)n + 1, sizeof(float));
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)tensor_f64(t, i);
    Tensor *c = arena_array(a, 1, sizeof *c);
    *c = (Tensor){.dtype = DT_F32, .shape = t->shape, .data = d, .nbytes = (size_t)n * 4};
    return c;
}

/* Initializers and constant values: converted in place. */
static uint32_t convert_data(Graph *g)
{
    uint32_t count = 0;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        Value *val = &g->values[v];
        if (!val->data || !narrowed(val->data->dtype))
            continue;
        val->data = to_f32(g->arena, val->data);
        val->dtype = DT_F32;
        count++;
    }
    return count;
}

/* Cast's `to`, the `dtype` of the ops that make tensors (RandomNormal,
 * EyeLike, ...) and the tensor attributes (Constant, ConstantOfShape). */
static uint32_t convert_attrs(Graph *g, Node *n)
{
    uint32_t count = 0;
    for (uint32_t k = 0; k < n->nattrs; k++) {
        Attr *at = &n->attrs[k];
        bool type_attr = !strcmp(at->name, "dtype") || (n->op == OP_CAST && !strcmp(at->name, "to"));
        if (at->kind == AT_INT && type_attr && narrowed((DType)at->i))
            at->i = DT_F32, count++;
        if (at->kind == AT_TENSOR && at->t && narrowed(at->t->dtype))
            at->t = to_f32(g->arena, at->t), count++;
    }
    return count;
}

/* Every use of `from` by a node now reads `to`. */
static void replace_uses(Graph *g, uint32_t from, uint32_t to)
{
    for (uint32_t i = 0; i < g->nnodes; i++) {
        Node *n = &g->nodes[i];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] == from) {
                n->in[k] = to;
                g->values[from].nuses--;
                g->values[to].nuses++;
            }
    }
}

/* Input v, read in its own type, cast to float32 for every node. */
static void cast_input(Graph *g, uint32_t v)
{
    Value val = g->values[v];   /* a copy: new values may move the array */
    uint32_t f32 = ir_new_value(g, arena_printf(g->arena, "%s.f32", val.name), DT_F32,
                                &val.shape);
    g->values[f32].typed = false;   /* shape inference types it, once v is bound */
    g->values[f32].loc = val.loc;
    replace_uses(g, v, f32);
    uint32_t id = ir_emit(g, OP_CAST, arena_printf(g->arena, "%s to float32", val.name),
                          &v, 1, &f32, 1, PH_FORWARD);
    Node *n = &g->nodes[id];
    n->loc = val.loc;
    ir_set_int(g, n, "to", DT_F32);
    g->values[v].nuses++;
}

static uint32_t convert_inputs(Graph *g)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < g->ninputs; i++) {
        uint32_t v = g->inputs[i];
        Value *val = &g->values[v];
        if (!narrowed(val->dtype))
            continue;
        if (val->dtype == DT_BF16) {
            note_once(&val->loc, "bfloat16 input: the program reads it as float32 "
                    "(.npy has no bfloat16)");
            val->dtype = DT_F32;
        } else {
            cast_input(g, v);
        }
        count++;
    }
    return count;
}

void float32_boundary(Graph *g)
{
    uint32_t count = convert_data(g) + convert_inputs(g);
    for (uint32_t i = 0; i < g->nnodes; i++)
        if (!g->nodes[i].dead)
            count += convert_attrs(g, &g->nodes[i]);
    if (count) {
        Loc loc = {.file = g->file, .index = -1};
        note_once(&loc, "float64, float16 and bfloat16 tensors are computed in float32; "
                  "the graph's inputs and outputs keep their types (docs/frontend.md)");
    }
}
