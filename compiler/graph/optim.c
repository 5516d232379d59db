/* optim.c — the optimizer as update ops (PH_UPDATE), one per trainable
 * parameter, with their state as values of their own (VK_STATE, zero at
 * the start, saved in checkpoints under PyTorch's state names).
 *
 *   SGD(param, grad[, momentum_buffer])   as torch.optim.SGD, dampening 0
 *   AdamW(param, grad, exp_avg, exp_avg_sq) as torch.optim.AdamW
 *
 * The update reads the gradient summed over the micro-batches and divides
 * it by their count, so M micro-batches of B/M rows match one batch of B.
 */
#include "mpcc.h"

static uint32_t state(Graph *g, uint32_t param, const char *what)
{
    const Value *p = &g->values[param];
    uint32_t v = ir_new_value(g, arena_printf(g->arena, "%s.%s", p->name, what),
                              p->dtype, &p->shape);
    g->values[v].kind = VK_STATE;
    g->values[v].loc = p->loc;
    return v;
}

static void set_hyper(Graph *g, Node *n, const TrainOptions *t)
{
    ir_set_float(g, n, "lr", t->lr);
    ir_set_float(g, n, "weight_decay", t->weight_decay);
    if (t->optim == OPTIM_SGD) {
        ir_set_float(g, n, "momentum", t->momentum);
        ir_set_int(g, n, "nesterov", t->nesterov);
    } else {
        ir_set_float(g, n, "beta1", t->beta1);
        ir_set_float(g, n, "beta2", t->beta2);
        ir_set_float(g, n, "eps", t->eps);
    }
}

void add_optimizer(Graph *g, const Options *o)
{
    const TrainOptions *t = &o->train;
    uint32_t nvalues = g->nvalues;
    for (uint32_t v = 0; v < nvalues; v++) {
        if (!g->values[v].trainable)
            continue;
        uint32_t in[4] = {v, g->values[v].grad, NONE, NONE}, nin = 2;
        Op op = OP_SGD;
        if (t->optim == OPTIM_ADAMW) {
            op = OP_ADAMW;
            in[2] = state(g, v, "exp_avg");
            in[3] = state(g, v, "exp_avg_sq");
            nin = 4;
        } else if (t->momentum != 0) {
            in[2] = state(g, v, "momentum_buffer");
            nin = 3;
        }
        const char *name = arena_printf(g->arena, "update/%s", g->values[v].name);
        uint32_t id = ir_emit(g, op, name, in, nin, NULL, 0, PH_UPDATE);
        g->nodes[id].loc = g->values[v].loc;
        set_hyper(g, &g->nodes[id], t);
    }
}
