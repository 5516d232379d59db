/* forward.c — the graph of a forward-only program (--infer).
 *
 * The program writes every graph output from a buffer a node wrote. An
 * output that no live node computes (a graph input passed through, a
 * constant left by folding, an initializer) or that is listed twice gets a
 * copy: an Identity node whose output stands for it. The ONNX names stay
 * in g->output_names, since a copy's value needs a name of its own.
 *
 * An output the model declares float64 or float16, computed in float32
 * (float32.c), is written in its own type: a Cast back stands for it.
 */
#include "mpcc.h"

static bool computed(const Graph *g, uint32_t v)
{
    uint32_t p = g->values[v].producer;
    return p != NONE && !g->nodes[p].dead && g->values[v].kind == VK_ACTIVATION;
}

/* The type a float32 output is written in: the model's float64 or float16. */
static DType written_dtype(const Graph *g, uint32_t i)
{
    DType want = g->output_dtypes ? g->output_dtypes[i] : DT_UNDEFINED;
    bool widened = want == DT_F64 || want == DT_F16;
    return widened && g->values[g->outputs[i]].dtype == DT_F32 ? want : DT_UNDEFINED;
}

/* Output i, written from a node's output of its own: a copy, or a Cast. */
static void output_copy(Graph *g, uint32_t i, DType cast)
{
    uint32_t v = g->outputs[i];
    Value val = g->values[v];   /* a copy: new values may move the array */
    uint32_t copy = ir_new_value(g, arena_printf(g->arena, "%s.output", val.name),
                                 cast ? cast : val.dtype, &val.shape);
    g->values[copy].is_output = true;
    g->values[copy].loc = val.loc;
    g->values[v].nuses++;
    uint32_t id = ir_emit(g, cast ? OP_CAST : OP_IDENTITY, arena_printf(g->arena, "output %u", i),
                          &v, 1, &copy, 1, PH_FORWARD);
    if (cast)
        ir_set_int(g, &g->nodes[id], "to", cast);
    g->outputs[i] = copy;
}

void forward_outputs(Graph *g)
{
    g->output_names = arena_array(g->arena, g->noutputs + 1, sizeof(const char *));
    for (uint32_t i = 0; i < g->noutputs; i++) {
        uint32_t v = g->outputs[i];
        g->output_names[i] = g->values[v].name;
        bool repeated = false;
        for (uint32_t j = 0; j < i; j++)
            repeated |= g->outputs[j] == v;
        DType cast = written_dtype(g, i);
        if (computed(g, v) && !repeated && !cast)
            continue;
        output_copy(g, i, cast);
    }
}
