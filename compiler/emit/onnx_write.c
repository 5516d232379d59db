/* onnx_write.c — `--emit-onnx`: an IR graph, as imported, written as an
 * ONNX model (opset of the graph, IR version 8) with its parameters as
 * initializers in raw_data and its constants as Constant nodes. A model written in the DSL can so
 * be checked (onnx.checker), run (onnxruntime) and loaded by PyTorch tools,
 * and read back by mpcc with the same numbers.
 *
 * Graph inputs keep their symbolic dimensions; graph outputs get the
 * element type and shape that shape inference found on a copy of the graph
 * with the dimensions bound (`typed`), the first dimension left symbolic
 * when the input's was.
 *
 * This file and onnx.c are the only ones that see protobuf-c types.
 */
#include "mpcc.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ONNX_MAX_BYTES 2000000000u   /* one protobuf file, as onnx.checker */

typedef struct W {
    Arena *a;
    const Graph *g, *typed;
    const char *sym0;        /* the symbolic name of the inputs' first dimension */
} W;

static Onnx__TensorProto *tensor_proto(W *w, const char *name, const Tensor *t)
{
    Onnx__TensorProto *tp = arena_alloc(w->a, sizeof *tp);
    onnx__tensor_proto__init(tp);
    tp->name = (char *)name;
    tp->has_data_type = true;
    tp->data_type = (int32_t)t->dtype;
    tp->n_dims = (size_t)t->shape.rank;
    tp->dims = arena_array(w->a, (size_t)t->shape.rank + 1, sizeof(int64_t));
    for (int i = 0; i < t->shape.rank; i++)
        tp->dims[i] = t->shape.d[i];
    tp->has_raw_data = true;
    tp->raw_data.len = t->nbytes;
    tp->raw_data.data = (uint8_t *)t->data;
    return tp;
}

static Onnx__AttributeProto *attr_proto(W *w, const Attr *at)
{
    Onnx__AttributeProto *ap = arena_alloc(w->a, sizeof *ap);
    onnx__attribute_proto__init(ap);
    ap->name = (char *)at->name;
    ap->has_type = true;
    switch (at->kind) {
    case AT_FLOAT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        ap->has_f = true;
        ap->f = (float)at->f;
        break;
    case AT_INT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        ap->has_i = true;
        ap->i = at->i;
        break;
    case AT_STRING:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        ap->has_s = true;
        ap->s.data = (uint8_t *)at->s;
        ap->s.len = strlen(at->s);
        break;
    case AT_TENSOR:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        ap->t = tensor_proto(w, "", at->t);
        break;
    case AT_FLOATS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        ap->n_floats = at->n;
        ap->floats = arena_array(w->a, at->n + 1, sizeof(float));
        for (uint32_t i = 0; i < at->n; i++)
            ap->floats[i] = (float)at->floats[i];
        break;
    case AT_INTS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        ap->n_ints = at->n;
        ap->ints = at->ints;
        break;
    case AT_STRINGS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
        ap->n_strings = at->n;
        ap->strings = arena_array(w->a, at->n + 1, sizeof(ProtobufCBinaryData));
        for (uint32_t i = 0; i < at->n; i++)
            ap->strings[i] = (ProtobufCBinaryData){strlen(at->strs[i]), (uint8_t *)at->strs[i]};
        break;
    case AT_GRAPH: case AT_OTHER:
        error_file(w->g->file, "attribute '%s' cannot be written to ONNX", at->name);
    }
    return ap;
}

static Onnx__NodeProto *constant_node(W *w, const Value *v)
{
    Onnx__NodeProto *np = arena_alloc(w->a, sizeof *np);
    onnx__node_proto__init(np);
    np->name = (char *)v->name;
    np->op_type = "Constant";
    np->domain = "";
    np->n_output = 1;
    np->output = arena_array(w->a, 1, sizeof(char *));
    np->output[0] = (char *)v->name;
    Onnx__AttributeProto *ap = arena_alloc(w->a, sizeof *ap);
    onnx__attribute_proto__init(ap);
    ap->name = "value";
    ap->has_type = true;
    ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    ap->t = tensor_proto(w, "", v->data);
    np->n_attribute = 1;
    np->attribute = arena_array(w->a, 1, sizeof(void *));
    np->attribute[0] = ap;
    return np;
}

static Onnx__NodeProto *node_proto(W *w, const Node *n)
{
    const Graph *g = w->g;
    Onnx__NodeProto *np = arena_alloc(w->a, sizeof *np);
    onnx__node_proto__init(np);
    np->name = (char *)n->name;
    np->op_type = (char *)n->op_type;
    np->domain = (char *)n->domain;
    np->n_input = n->nin;
    np->input = arena_array(w->a, n->nin + 1, sizeof(char *));
    for (uint32_t k = 0; k < n->nin; k++)
        np->input[k] = n->in[k] == NONE ? "" : (char *)g->values[n->in[k]].name;
    np->n_output = n->nout;
    np->output = arena_array(w->a, n->nout + 1, sizeof(char *));
    for (uint32_t k = 0; k < n->nout; k++)
        np->output[k] = n->out[k] == NONE ? "" : (char *)g->values[n->out[k]].name;
    np->n_attribute = n->nattrs;
    np->attribute = arena_array(w->a, n->nattrs + 1, sizeof(Onnx__AttributeProto *));
    for (uint32_t k = 0; k < n->nattrs; k++)
        np->attribute[k] = attr_proto(w, &n->attrs[k]);
    return np;
}

/* A tensor type; dims from shape, with sym[i] (or, for outputs, the inputs'
 * batch symbol at dimension 0) written as dim_param. */
static Onnx__TypeProto *type_proto(W *w, DType dt, const Shape *s, const char *const *sym)
{
    Onnx__TypeProto *tp = arena_alloc(w->a, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = arena_alloc(w->a, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = true;
    tt->elem_type = (int32_t)dt;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    if (!s || s->rank < 0)
        return tp;
    Onnx__TensorShapeProto *sp = arena_alloc(w->a, sizeof *sp);
    onnx__tensor_shape_proto__init(sp);
    sp->n_dim = (size_t)s->rank;
    sp->dim = arena_array(w->a, (size_t)s->rank + 1, sizeof(void *));
    for (int i = 0; i < s->rank; i++) {
        Onnx__TensorShapeProto__Dimension *d = arena_alloc(w->a, sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        if (sym && sym[i]) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = (char *)sym[i];
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = s->d[i];
        }
        sp->dim[i] = d;
    }
    tt->shape = sp;
    return tp;
}

static Onnx__ValueInfoProto *value_info(W *w, const char *name, Onnx__TypeProto *type)
{
    Onnx__ValueInfoProto *vi = arena_alloc(w->a, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = (char *)name;
    vi->type = type;
    return vi;
}

static Onnx__ValueInfoProto *output_info(W *w, const Value *v)
{
    uint32_t t = w->typed ? ir_find((Graph *)w->typed, v->name) : NONE;
    if (t == NONE || !w->typed->values[t].typed)
        return value_info(w, v->name, type_proto(w, v->dtype ? v->dtype : DT_F32, NULL, NULL));
    const Value *tv = &w->typed->values[t];
    const char *sym[MAX_RANK] = {NULL};
    if (w->sym0 && tv->shape.rank > 0)
        sym[0] = w->sym0;
    return value_info(w, v->name, type_proto(w, tv->dtype, &tv->shape, sym));
}

static void write_file(Arena *a, const char *path, const uint8_t *buf, size_t n)
{
    char *tmp = out_tmp(a, path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        error_file(path, "cannot open for writing: %s", strerror(errno));
    bool ok = fwrite(buf, 1, n, f) == n;
    ok &= fclose(f) == 0;
    ok = ok && out_commit(tmp, path);
    if (!ok) {
        int e = errno;
        if (strcmp(tmp, path) != 0)
            remove(tmp);
        error_file(path, "write failed: %s", strerror(e));
    }
}

void onnx_write(Graph *g, const Graph *typed, const char *path)
{
    Arena *a = g->arena;
    W w = {.a = a, .g = g, .typed = typed};
    Onnx__GraphProto *gp = arena_alloc(a, sizeof *gp);
    onnx__graph_proto__init(gp);
    gp->name = (char *)(g->name && g->name[0] ? g->name : "main");
    bool *read = arena_array(a, g->nvalues + 1, sizeof(bool));
    gp->node = arena_array(a, g->nnodes + 1, sizeof(void *));
    for (uint32_t i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->dead)
            continue;
        gp->node[gp->n_node++] = node_proto(&w, n);
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                read[n->in[k]] = true;
    }
    /* Parameters are initializers; constants are Constant nodes, which every
     * importer (mpcc's included) keeps constant, where a floating-point
     * initializer would be a trainable weight. */
    size_t bytes = 0, nconst = 0;
    gp->initializer = arena_array(a, g->nvalues + 1, sizeof(void *));
    gp->input = arena_array(a, g->ninputs + 1, sizeof(void *));
    Onnx__NodeProto **consts = arena_array(a, g->nvalues + 1, sizeof(void *));
    for (uint32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (!val->data || !(read[v] || val->is_output))
            continue;
        if (val->kind == VK_PARAM)
            gp->initializer[gp->n_initializer++] = tensor_proto(&w, val->name, val->data);
        else if (val->kind == VK_CONST)
            consts[nconst++] = constant_node(&w, val);
        else
            continue;
        bytes += val->data->nbytes;
    }
    if (nconst) {
        Onnx__NodeProto **all = arena_array(a, gp->n_node + nconst + 1, sizeof(void *));
        memcpy(all, consts, nconst * sizeof(void *));
        memcpy(all + nconst, gp->node, gp->n_node * sizeof(void *));
        gp->node = all;
        gp->n_node += nconst;
    }
    for (uint32_t i = 0; i < g->ninputs; i++) {
        const Value *val = &g->values[g->inputs[i]];
        if (val->sym[0] && !w.sym0)
            w.sym0 = val->sym[0];
        gp->input[gp->n_input++] = value_info(&w, val->name,
                                              type_proto(&w, val->dtype, &val->shape, val->sym));
    }
    gp->n_output = g->noutputs;
    gp->output = arena_array(a, g->noutputs + 1, sizeof(void *));
    for (uint32_t i = 0; i < g->noutputs; i++)
        gp->output[i] = output_info(&w, &g->values[g->outputs[i]]);
    if (bytes > ONNX_MAX_BYTES)
        error_file(path, "the model's weights take %zu bytes, over ONNX's limit of 2 GB for "
                   "one file", bytes);

    Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    os.domain = "";
    os.has_version = true;
    os.version = g->opset ? g->opset : 17;
    Onnx__OperatorSetIdProto *osp = &os;
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = true;
    m.ir_version = 8;
    m.producer_name = "mpcc";
    m.producer_version = MPCC_VERSION;
    m.n_opset_import = 1;
    m.opset_import = &osp;
    m.graph = gp;
    size_t n = onnx__model_proto__get_packed_size(&m);
    if (n > ONNX_MAX_BYTES)
        error_file(path, "the model would take %zu bytes, over ONNX's limit of 2 GB", n);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        error_file(path, "out of memory (%zu bytes)", n);
    onnx__model_proto__pack(&m, buf);
    arena_defer(a, free, buf);
    write_file(a, path, buf, n);
}
