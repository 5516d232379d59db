/* fuzz_onnx.c — the importer's fuzz target (libFuzzer entry point).
 *
 * Feeds arbitrary bytes through the front half of the pipeline: import,
 * shape binding (re-batching a fixed first dimension to 2, against the
 * model's own shapes inferred first, as main.c does), topological order,
 * shape inference with folding, pruning and both dumps. User errors unwind through diag_jmp; anything else (a
 * crash, a sanitizer report, an internal-error abort) is a finding.
 *
 * Built two ways: with clang -fsanitize=fuzzer by tests/fuzz/build.sh, and
 * with replay.c as a plain program that CTest runs over the corpus.
 */
#include "mpcc.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool all_known(const Graph *g)
{
    for (uint32_t i = 0; i < g->nnodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == OP_UNKNOWN)
            return false;
    return true;
}

static void pipeline(Arena *a, const uint8_t *data, size_t size)
{
    Graph *g = onnx_import_bytes(a, "fuzz/model.onnx", data, size);
    Options o = {.batch = 2};
    if (!bind_shapes(g, &o, false) || !all_known(g))
        return;
    ir_toposort(g);
    if (g->rebatch) {
        Graph *ref = onnx_import_bytes(a, "fuzz/model.onnx", data, size);
        rebatch_bind_reference(g, ref);
        ir_toposort(ref);
        infer_shapes(ref);
    }
    infer_shapes(g);
    prune(g);
    ir_verify(g);
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        dump_ir(g, null);
        dump_shapes(g, null);
        fclose(null);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Arena *a = arena_new();
    jmp_buf jb;
    diag_jmp = &jb;
    diag_quiet = true;
    if (setjmp(jb) == 0)
        pipeline(a, data, size);
    diag_jmp = NULL;
    arena_free(a);
    return 0;
}
