/* check.c — `mpcc --check`: every op of the model that mpcc cannot compile
 * for training yet, all in one run, with counts and node names.
 *
 * A node is a problem if its op is not in the op table (unknown, or from a
 * domain other than ONNX's default), if the table says it lacks a CPU
 * kernel, or if it lacks a gradient and needs one: some floating-point
 * input depends on a weight, so the loss's gradient flows through it. Only
 * live nodes count: shape subgraphs that were folded away at compile time
 * need no kernel, and integer or constant side paths need no gradient.
 * With --infer, nothing needs a gradient: a CPU forward kernel is enough.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

enum { NAMES_SHOWN = 4 };

typedef struct OpCount {
    const char *domain, *op_type;
    Op op;
    bool needs_grad;       /* counted nodes need a gradient (CPU-only ops) */
    uint32_t live;         /* live nodes of this op type */
    uint32_t count;        /* of them, the ones that are a problem */
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
    if (!c->needs_grad || (f & OPF_NOGRAD))
        f |= OPF_GRAD;   /* no node of the type needs a gradient */
    if ((f & OPF_CPU) && (f & OPF_GRAD))
        return NULL;
    return arena_printf(a, "%s%s%s", (f & OPF_CPU) ? "" : "cpu kernel",
                        !(f & OPF_CPU) && !(f & OPF_GRAD) ? ", " : "",
                        (f & OPF_GRAD) ? "" : "gradient");
}

/* Per node: some floating-point input depends on a weight. Nodes are
 * visited in topological order when shapes were analysed; otherwise in
 * file order, which ONNX requires to be topological. */
static bool *gradient_path(Graph *g)
{
    bool *dep = arena_array(g->arena, g->nvalues + 1, sizeof(bool));
    bool *need = arena_array(g->arena, g->nnodes + 1, sizeof(bool));
    for (uint32_t v = 0; v < g->nvalues; v++)
        dep[v] = g->values[v].kind == VK_PARAM && dtype_is_float(g->values[v].dtype);
    uint32_t n = g->norder ? g->norder : g->nnodes;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = g->norder ? g->order[k] : k;
        const Node *node = &g->nodes[i];
        for (uint32_t j = 0; j < node->nin; j++) {
            uint32_t v = node->in[j];
            need[i] |= v != NONE && dep[v] && dtype_is_float(g->values[v].dtype);
        }
        for (uint32_t j = 0; j < node->nout && need[i]; j++)
            if (node->out[j] != NONE)
                dep[node->out[j]] = true;
    }
    return need;
}

static uint32_t count_ops(Graph *g, OpCount *counts, bool forward_only)
{
    uint32_t n = 0;
    bool *need = gradient_path(g);
    if (forward_only)
        memset(need, 0, (g->nnodes + 1) * sizeof *need);
    for (uint32_t i = 0; i < g->nnodes; i++) {
        const Node *node = &g->nodes[i];
        if (node->dead)
            continue;
        uint32_t k = 0;
        while (k < n && !(strcmp(counts[k].op_type, node->op_type) == 0 &&
                          strcmp(counts[k].domain, node->domain) == 0))
            k++;
        if (k == n)
            counts[n++] = (OpCount){node->domain, node->op_type, node->op, false, 0, 0, {0}};
        counts[k].live++;
        if (!need[i] && node->op != OP_UNKNOWN && (op_info[node->op].flags & OPF_CPU))
            continue;   /* it has a kernel and needs no gradient: no problem */
        counts[k].needs_grad |= need[i];
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

int check_ops(Graph *g, FILE *out, bool forward_only)
{
    OpCount *counts = arena_array(g->arena, g->nnodes + 1, sizeof *counts);
    uint32_t n = count_ops(g, counts, forward_only), live = 0, problems = 0, bad_nodes = 0;
    for (uint32_t k = 0; k < n; k++)
        live += counts[k].live;
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
        report_at(&loc, "%u of %u op types (%u nodes) cannot be compiled for %s yet; "
                  "docs/ops.md lists what mpcc supports", problems, n, bad_nodes,
                  forward_only ? "inference (--infer)" : "training");
    }
    return (int)problems;
}

/* `mpcc --list-ops`: the op table as a Markdown table (docs/ops.md). */
static int by_onnx_name(const void *pa, const void *pb)
{
    return strcmp(op_info[*(const int *)pa].name, op_info[*(const int *)pb].name);
}

void list_ops(FILE *out)
{
    int ids[OP_COUNT], n = 0;
    for (int op = 1; op < OP_COUNT; op++)
        if (!(op_info[op].flags & OPF_INTERNAL))
            ids[n++] = op;
    qsort(ids, (size_t)n, sizeof ids[0], by_onnx_name);
    fprintf(out, "# Operators\n\n"
            "Generated by `mpcc --list-ops` from `compiler/ops.def` (mpcc %s); "
            "do not edit.\n\n"
            "Every op listed is imported from ONNX (default domain) and has static "
            "shape inference. *Folded*: evaluated at compile time when its inputs "
            "are constants. `Constant` nodes become constants at import. *None "
            "needed*: the outputs are bool masks or int64 indices, through which no "
            "gradient flows. "
            "*CUDA*: forward and gradient kernels for CUDA devices (`docs/cuda.md`; "
            "compiled and type-checked against the CPU kernels in CI, not yet compared "
            "with them on a GPU).\n\n"
            "| op | inputs | outputs | folded | CPU forward | CPU gradient | CUDA |\n"
            "|---|---|---|---|---|---|---|\n", MPCC_VERSION);
    for (int i = 0; i < n; i++) {
        const OpInfo *o = &op_info[ids[i]];
        char ins[32], outs[32];
        if (o->max_in < 0)
            snprintf(ins, sizeof ins, "%d+", o->min_in);
        else
            snprintf(ins, sizeof ins, o->min_in == o->max_in ? "%d" : "%d-%d",
                     o->min_in, o->max_in);
        if (o->max_out < 0)
            snprintf(outs, sizeof outs, "%d+", o->min_out);
        else
            snprintf(outs, sizeof outs, o->min_out == o->max_out ? "%d" : "%d-%d",
                     o->min_out, o->max_out);
        fprintf(out, "| %s | %s | %s | %s | %s | %s | %s |\n", o->name, ins, outs,
                (o->flags & OPF_FOLD) ? "yes" : "", (o->flags & OPF_CPU) ? "yes" : "",
                (o->flags & OPF_GRAD) ? "yes" : (o->flags & OPF_NOGRAD) ? "none needed" : "",
                (o->flags & OPF_CUDA) ? "yes" : "");
    }
    fprintf(out, "\n%d ops.\n", n);
}
