/* measured.c — per-node times from a previous run (./train --profile
 * prof.json), which replace the cost model's estimates (--measured). */
#include "mpcc.h"

Measured *measured_load(Arena *a, const char *path, const Graph *g)
{
    (void)a, (void)g;
    if (path)
        error_file(path, "--measured is not supported yet");
    return NULL;
}

double measured_time(const Measured *m, const char *node, int phase)
{
    (void)m, (void)node, (void)phase;
    return -1;
}
