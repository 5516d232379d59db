/* forward.c — the graph of a forward-only program (--infer).
 *
 * The program writes every graph output from a buffer a node wrote. An
 * output that no live node computes (a graph input passed through, a
 * constant left by folding, an initializer) or that is listed twice gets a
 * copy: an Identity node whose output stands for it. The ONNX names stay
 * in g->output_names, since a copy's value needs a name of its own.
 */
#include "mpcc.h"

static bool computed(const Graph *g, uint32_t v)
{
    uint32_t p = g->values[v].producer;
    return p != NONE && !g->nodes[p].dead && g->values[v].kind == VK_ACTIVATION;
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
        if (computed(g, v) && !repeated)
            continue;
        const Value *val = &g->values[v];
        uint32_t copy = ir_new_value(g, arena_printf(g->arena, "%s.output", val->name),
                                     val->dtype, &val->shape);
        g->values[copy].is_output = true;
        g->values[copy].loc = val->loc;
        g->values[v].nuses++;
        ir_emit(g, OP_IDENTITY, arena_printf(g->arena, "output %u", i), &v, 1, &copy, 1,
                PH_FORWARD);
        g->outputs[i] = copy;
    }
}
