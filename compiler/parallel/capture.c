/* capture.c — whether a CUDA trainer's step runs as one captured graph
 * (mpcc --cuda-graph, runtime/cuda.c, docs/cuda.md).
 *
 * A graph replays the launches, copies and events of the step it
 * captured, with the arguments they had then. So only a step whose work
 * and arguments are the same every step is captured; each reason a step
 * is not is named here, for the trainer to print. */
#include "mpcc.h"

/* Why the step is not one graph, in words; NULL: it is. `mixed`: some
 * devices are CPU devices. What a kernel reads that changes every step
 * (AdamW's bias corrections, Dropout's keys) goes through the slots the
 * host fills before each replay (runtime/cuda.c, mprt_cu_slot). */
const char *cuda_graph_why(const Options *o, bool mixed)
{
    if (o->cuda_graph_off)
        return "mpcc --cuda-graph=off";
    if (mixed)
        return "a CPU device's actions run on host threads, outside any graph";
    if (o->train.clip_norm > 0 && o->pipe.node_devs)
        return "--clip-norm in a pipeline across processes: the host adds every process's "
               "squared norms (MPI) inside the step";
    return NULL;
}

/* The cost model's launch overhead of a GPU's kernel: its profile's
 * overhead, or inside a captured step graph_overhead (the cost of one
 * kernel node of a graph; the graph's own launch, once a step, is
 * left out). */
void cuda_graph_price(Devices *ds, const Options *o)
{
    bool mixed = false, cuda = false;
    for (int d = 0; d < ds->n; d++)
        mixed = mixed || ds->d[d].kind == DEV_CPU, cuda = cuda || ds->d[d].kind == DEV_CUDA;
    if (!cuda || cuda_graph_why(o, mixed))
        return;
    for (int d = 0; d < ds->n; d++)
        ds->d[d].prof.overhead = ds->d[d].prof.graph_overhead;
}
