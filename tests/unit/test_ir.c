/* test_ir.c — unit tests for the IR and shape inference on hand-built
 * graphs: the name table, topological order, cycle detection, and output
 * shapes for cases worked out from the ONNX operator specification. */
#include "mpcc.h"
#include "check.h"

#include <string.h>

static Graph *graph(Arena *a)
{
    return ir_new(a, "test.onnx");
}

static uint32_t input(Graph *g, const char *name, DType dt, Shape s)
{
    uint32_t v = ir_value(g, name);
    Value *val = &g->values[v];
    val->kind = VK_INPUT;
    val->dtype = dt;
    val->shape = s;
    val->typed = true;
    g->inputs = arena_grow(g->arena, g->inputs, g->ninputs, g->ninputs + 1, sizeof(uint32_t));
    g->inputs[g->ninputs++] = v;
    return v;
}

static uint32_t node(Graph *g, Op op, const char *name, const char **ins, uint32_t nin,
                     const char *out)
{
    uint32_t id = ir_add_node(g, op, op_info[op].name, name);
    Node *n = &g->nodes[id];
    n->nin = nin;
    n->in = arena_array(g->arena, nin, sizeof(uint32_t));
    for (uint32_t i = 0; i < nin; i++)
        n->in[i] = ir_value(g, ins[i]);
    n->nout = 1;
    n->out = arena_array(g->arena, 1, sizeof(uint32_t));
    n->out[0] = ir_value(g, out);
    g->values[n->out[0]].producer = id;
    return id;
}

static void set_ints(Graph *g, uint32_t id, const char *name, const int64_t *v, uint32_t n)
{
    Node *nd = &g->nodes[id];
    nd->attrs = arena_grow(g->arena, nd->attrs, nd->nattrs, nd->nattrs + 1, sizeof(Attr));
    Attr *at = &nd->attrs[nd->nattrs++];
    at->name = name;
    at->kind = AT_INTS;
    at->n = n;
    at->ints = arena_array(g->arena, n, sizeof(int64_t));
    memcpy(at->ints, v, n * sizeof(int64_t));
}

static const Shape *shape_of(Graph *g, const char *name)
{
    return &g->values[ir_find(g, name)].shape;
}

static bool is(const Shape *s, int rank, const int64_t *d)
{
    Shape want = {.rank = rank};
    memcpy(want.d, d, sizeof(int64_t) * (size_t)rank);
    return shape_eq(s, &want);
}

static void test_names(void)
{
    Arena *a = arena_new();
    Graph *g = graph(a);
    char name[32];
    bool dense = true;   /* ids are handed out in order, through rehashing */
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "v%d", i);
        dense &= ir_value(g, name) == (uint32_t)i;
    }
    CHECK(dense);
    CHECK(ir_find(g, "v4999") == 4999);
    CHECK(ir_find(g, "v1234") == 1234);
    CHECK(ir_find(g, "nope") == NONE);
    CHECK(ir_value(g, "v17") == 17);
    arena_free(a);
}

static void test_order_and_shapes(void)
{
    Arena *a = arena_new();
    Graph *g = graph(a);
    input(g, "x", DT_F32, (Shape){3, {2, 1, 3}});
    input(g, "y", DT_F32, (Shape){2, {4, 1}});
    input(g, "p", DT_F32, (Shape){4, {2, 1, 3, 4}});
    input(g, "q", DT_F32, (Shape){3, {5, 4, 6}});
    input(g, "img", DT_F32, (Shape){4, {1, 1, 7, 5}});
    input(g, "w", DT_F32, (Shape){4, {1, 1, 3, 3}});
    /* Listed out of order on purpose: the relu reads the add's output. */
    node(g, OP_RELU, "relu", (const char *[]){"s"}, 1, "r");
    node(g, OP_ADD, "add", (const char *[]){"x", "y"}, 2, "s");
    node(g, OP_MATMUL, "mm", (const char *[]){"p", "q"}, 2, "m");
    uint32_t conv = node(g, OP_CONV, "conv", (const char *[]){"img", "w"}, 2, "c");
    set_ints(g, conv, "kernel_shape", (const int64_t[]){3, 3}, 2);
    set_ints(g, conv, "pads", (const int64_t[]){1, 1, 1, 1}, 4);
    set_ints(g, conv, "strides", (const int64_t[]){2, 2}, 2);
    ir_toposort(g);
    CHECK(g->norder == 4);
    uint32_t pos_add = 9, pos_relu = 9;
    for (uint32_t i = 0; i < g->norder; i++) {
        if (g->order[i] == 1) pos_add = i;
        if (g->order[i] == 0) pos_relu = i;
    }
    CHECK(pos_add < pos_relu);
    infer_shapes(g);
    /* numpy broadcasting: (2,1,3) + (4,1) -> (2,4,3) */
    CHECK(is(shape_of(g, "s"), 3, (const int64_t[]){2, 4, 3}));
    CHECK(is(shape_of(g, "r"), 3, (const int64_t[]){2, 4, 3}));
    /* batched matmul: (2,1,3,4) @ (5,4,6) -> (2,5,3,6) */
    CHECK(is(shape_of(g, "m"), 4, (const int64_t[]){2, 5, 3, 6}));
    /* the spec's Conv example: 7x5, kernel 3, pads 1, strides 2 -> 4x3 */
    CHECK(is(shape_of(g, "c"), 4, (const int64_t[]){1, 1, 4, 3}));
    arena_free(a);
}

static void test_cycle_is_a_user_error(void)
{
    Arena *a = arena_new();
    Graph *g = graph(a);
    input(g, "x", DT_F32, (Shape){1, {4}});
    node(g, OP_ADD, "add", (const char *[]){"x", "b"}, 2, "a");
    node(g, OP_RELU, "relu", (const char *[]){"a"}, 1, "b");
    jmp_buf jb;
    int unwound = 0;
    diag_jmp = &jb;
    diag_quiet = true;
    if (setjmp(jb) == 0)
        ir_toposort(g);
    else
        unwound = 1;
    diag_jmp = NULL;
    diag_quiet = false;
    CHECK(unwound);
    arena_free(a);
}

int main(void)
{
    test_names();
    test_order_and_shapes();
    test_cycle_is_a_user_error();
    return check_summary("test_ir");
}
