/* check.c — `mpcc --check`: every op of the model that mpcc cannot compile
 * for training yet, all in one run, with counts and node names.
 *
 * An op type is a problem if it is not in the op table (unknown, or from a
 * domain other than ONNX's default) or if the table says it lacks a CPU
 * kernel or a gradient. Only live nodes count: shape subgraphs that were
 * folded away at compile time need no kernel.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

enum { NAMES_SHOWN = 4 };

typedef struct OpCount {
    const char *domain, *op_type;
    Op op;
    uint32_t count;
    uint32_t first[NAMES_SHOWN];
} OpCount;

static int by_problem_then_name(const void *pa, const void *pb)
{
    const OpCount *a = pa, *b = pb;
    if ((a->op == OP_UNKNOWN) != (b->op == OP_UNKNOWN))
        return a->op == OP_UNKNOWN ? -1 : 1;
    int c = strcmp(a->domain, b->domain);
    return c ? c : strcmp(a->op_type, b->op_type);
}

static const char *missing(Arena *a, const OpCount *c)
{
    if (c->op == OP_UNKNOWN)
        return c->domain[0] ? "unknown op (custom domain)" : "unknown op";
    unsigned f = op_info[c->op].flags;
    if ((f & OPF_CPU) && (f & OPF_GRAD))
        return NULL;
    return arena_printf(a, "%s%s%s", (f & OPF_CPU) ? "" : "cpu kernel",
                        !(f & OPF_CPU) && !(f & OPF_GRAD) ? ", " : "",
                        (f & OPF_GRAD) ? "" : "gradient");
}

static uint32_t count_ops(Graph *g, OpCount *counts)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        const Node *node = &g->nodes[i];
        if (node->dead)
            continue;
        uint32_t k = 0;
        while (k < n && !(strcmp(counts[k].op_type, node->op_type) == 0 &&
                          strcmp(counts[k].domain, node->domain) == 0))
            k++;
        if (k == n)
            counts[n++] = (OpCount){node->domain, node->op_type, node->op, 0, {0}};
        if (counts[k].count < NAMES_SHOWN)
            counts[k].first[counts[k].count] = i;
        counts[k].count++;
    }
    qsort(counts, n, sizeof *counts, by_problem_then_name);
    return n;
}

static void put_node_names(Graph *g, const OpCount *c, FILE *out)
{
    for (uint32_t j = 0; j < c->count && j < NAMES_SHOWN; j++) {
        const Node *node = &g->nodes[c->first[j]];
        fputs(j ? ", " : "  ", out);
        if (node->name[0]) {
            fputc('\'', out);
            fput_escaped(out, node->name);
            fputc('\'', out);
        } else {
            fprintf(out, "#%d", (int)node->loc.index);
        }
    }
    if (c->count > NAMES_SHOWN)
        fprintf(out, " and %u more", c->count - NAMES_SHOWN);
}

int check_ops(Graph *g, FILE *out)
{
    OpCount *counts = arena_array(g->arena, g->nnodes + 1, sizeof *counts);
    uint32_t n = count_ops(g, counts), live = 0, problems = 0, bad_nodes = 0;
    for (uint32_t k = 0; k < n; k++)
        live += counts[k].count;
    fprintf(out, "mpcc --check: ");
    fput_escaped(out, g->file);
    fprintf(out, ": %u nodes of %u op types (opset %lld)\n", live, n, (long long)g->opset);
    for (uint32_t k = 0; k < n; k++) {
        const char *m = missing(g->arena, &counts[k]);
        if (!m)
            continue;
        problems++;
        bad_nodes += counts[k].count;
        char full[256];
        snprintf(full, sizeof full, "%s%s%s", counts[k].domain,
                 counts[k].domain[0] ? "." : "", counts[k].op_type);
        fputs("  ", out);
        fput_escaped(out, full);
        fprintf(out, "%*s %5u node%s  missing: %s\n",
                (int)(strlen(full) < 26 ? 26 - strlen(full) : 0), "",
                counts[k].count, counts[k].count == 1 ? " " : "s", m);
        fputs("   ", out);
        put_node_names(g, &counts[k], out);
        fputc('\n', out);
    }
    if (problems) {
        Loc loc = {.file = g->file, .index = -1};
        report_at(&loc, "%u of %u op types (%u nodes) cannot be compiled for training "
                "yet; docs/ops.md lists what mpcc supports", problems, n, bad_nodes);
    } else {
        fprintf(out, "every op is supported\n");
    }
    return (int)problems;
}
