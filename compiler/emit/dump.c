/* dump.c — text listings of the graph (`--dump=ir`, `--dump=shapes`).
 *
 * One line per node or value, so the dumps diff well and tests can read
 * them back. Names from the model are printed as %name when they are plain
 * and as %"escaped" otherwise; nothing from the model can break a line.
 */
#include "mpcc.h"

#include <string.h>

static bool plain_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == ':' || c == '-'))
            return false;
    }
    return true;
}

static void put_name(FILE *out, const char *name)
{
    if (plain_name(name)) {
        fputs(name, out);
        return;
    }
    fputc('"', out);
    fput_escaped(out, name);
    fputc('"', out);
}

static void put_type(FILE *out, const Value *v)
{
    fprintf(out, "%s[", dtype_name(v->dtype));
    for (int i = 0; i < v->shape.rank; i++)
        fprintf(out, "%s%lld", i ? "," : "", (long long)v->shape.d[i]);
    fputc(']', out);
}

static void put_value(FILE *out, const Graph *g, uint32_t id)
{
    if (id == NONE) {
        fputs("_", out);
        return;
    }
    const Value *v = &g->values[id];
    fputc('%', out);
    put_name(out, v->name);
    fputc(' ', out);
    put_type(out, v);
}

/* Small integer constants are shown inline: they are the shapes and axes
 * that folding produced, and the first thing to look at when one is wrong. */
static void put_small_const(FILE *out, const Value *v)
{
    const Tensor *t = v->data;
    int64_t n = shape_numel(&t->shape);
    if (n > 8)
        return;
    fputs(" = [", out);
    for (int64_t i = 0; i < n; i++) {
        if (dtype_is_float(t->dtype))
            fprintf(out, "%s%g", i ? "," : "", tensor_f64(t, i));
        else
            fprintf(out, "%s%lld", i ? "," : "", (long long)tensor_i64(t, i));
    }
    fputc(']', out);
}

static void put_attr(FILE *out, const Attr *a)
{
    put_name(out, a->name);
    fputc('=', out);
    switch (a->kind) {
    case AT_INT: fprintf(out, "%lld", (long long)a->i); break;
    case AT_FLOAT: fprintf(out, "%g", a->f); break;
    case AT_STRING: fputc('"', out); fput_escaped(out, a->s); fputc('"', out); break;
    case AT_INTS:
        fputc('[', out);
        for (uint32_t i = 0; i < a->n; i++)
            fprintf(out, "%s%lld", i ? "," : "", (long long)a->ints[i]);
        fputc(']', out);
        break;
    case AT_FLOATS:
        fputc('[', out);
        for (uint32_t i = 0; i < a->n; i++)
            fprintf(out, "%s%g", i ? "," : "", a->floats[i]);
        fputc(']', out);
        break;
    case AT_STRINGS:
        fputc('[', out);
        for (uint32_t i = 0; i < a->n; i++) {
            fputs(i ? ",\"" : "\"", out);
            fput_escaped(out, a->strs[i]);
            fputc('"', out);
        }
        fputc(']', out);
        break;
    case AT_TENSOR:
        fprintf(out, "<tensor %s%s>", dtype_name(a->t->dtype), "");
        break;
    case AT_GRAPH: fputs("<graph>", out); break;
    case AT_OTHER: fputs("<?>", out); break;
    }
}

static void dump_node(FILE *out, const Graph *g, const Node *n)
{
    fprintf(out, "node   ");
    if (n->domain[0]) {
        fput_escaped(out, n->domain);
        fputc('.', out);
    }
    fput_escaped(out, n->op_type);
    fputs(" '", out);
    fput_escaped(out, n->name);
    fputs("' (", out);
    for (uint32_t k = 0; k < n->nin; k++) {
        fputs(k ? ", " : "", out);
        put_value(out, g, n->in[k]);
    }
    fputs(") -> (", out);
    for (uint32_t k = 0; k < n->nout; k++) {
        fputs(k ? ", " : "", out);
        put_value(out, g, n->out[k]);
    }
    fputc(')', out);
    for (uint32_t k = 0; k < n->nattrs; k++) {
        fputs(k ? " " : "  ", out);
        put_attr(out, &n->attrs[k]);
    }
    if (n->hint_device) {   /* placement hints from the DSL */
        fputs("  @", out);
        fput_escaped(out, n->hint_device);
    }
    if (n->hint_stage >= 0)
        fprintf(out, "  @stage(%d)", (int)n->hint_stage);
    fputc('\n', out);
}

static void dump_header(FILE *out, const Graph *g)
{
    uint32_t nparams = 0, nconsts = 0;
    int64_t elems = 0;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind == VK_PARAM)
            nparams++, elems += shape_numel(&val->shape);
        else if (val->kind == VK_CONST && val->nuses)
            nconsts++;
    }
    fprintf(out, "; mpcc %s --dump=ir: ", MPCC_VERSION);
    fput_escaped(out, g->file);
    fprintf(out, "\n; graph '");
    fput_escaped(out, g->name);
    fprintf(out, "', opset %lld, producer '", (long long)g->opset);
    fput_escaped(out, g->producer);
    fprintf(out, "'\n; %u nodes, %u inputs, %u outputs, %u parameters (%lld elements), "
            "%u constants\n", g->norder, g->ninputs, g->noutputs, nparams,
            (long long)elems, nconsts);
}

void dump_ir(Graph *g, FILE *out)
{
    dump_header(out, g);
    for (uint32_t i = 0; i < g->ninputs; i++) {
        fputs("input  ", out);
        put_value(out, g, g->inputs[i]);
        fputc('\n', out);
    }
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind == VK_PARAM || val->kind == VK_STATE ||
            (val->kind == VK_CONST && val->nuses)) {
            fputs(val->kind == VK_PARAM ? "param  " : val->kind == VK_STATE ? "state  "
                                                                         : "const  ", out);
            put_value(out, g, v);
            if (val->kind == VK_CONST)
                put_small_const(out, val);
            fputc('\n', out);
        }
    }
    static const char *phase_names[] = {"forward", "backward", "update"};
    int phase = PH_FORWARD;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->phase != phase)
            fprintf(out, "; %s\n", phase_names[phase = n->phase]);
        dump_node(out, g, n);
    }
    for (uint32_t i = 0; i < g->noutputs; i++) {
        fputs("output ", out);
        put_value(out, g, g->outputs[i]);
        fputc('\n', out);
    }
}

static void shape_line(FILE *out, const Graph *g, uint32_t id)
{
    const Value *v = &g->values[id];
    fprintf(out, "%s [", dtype_name(v->dtype));
    for (int i = 0; i < v->shape.rank; i++)
        fprintf(out, "%s%lld", i ? "," : "", (long long)v->shape.d[i]);
    fputs("] \"", out);
    fput_escaped(out, v->name);
    fputs("\"\n", out);
}

void dump_shapes(Graph *g, FILE *out)
{
    for (uint32_t i = 0; i < g->ninputs; i++)
        shape_line(out, g, g->inputs[i]);
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->kind == VK_PARAM || (val->kind == VK_CONST && (val->nuses || val->is_output)))
            shape_line(out, g, v);
    }
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nout; k++)
            if (n->out[k] != NONE)
                shape_line(out, g, n->out[k]);
    }
}
