/* fuzz_dsl.c — the model DSL's fuzz target (libFuzzer entry point).
 *
 * Feeds arbitrary bytes through the DSL front end (lexer, parser with error
 * recovery, lowering with the prelude) and the front half of the pipeline
 * behind it: shape binding, topological order, shape inference with
 * folding, pruning, the IR checks and both dumps. User errors unwind
 * through diag_jmp; anything else (a crash, a sanitizer report or leak, an
 * internal-error abort) is a finding. Initial weights are capped at 16 MB
 * so that a large `param` is an error, not an out-of-memory.
 *
 * Built two ways: with clang -fsanitize=fuzzer by tests/fuzz/build_dsl.sh,
 * and with replay.c as a plain program that CTest runs over corpus_dsl/.
 */
#include "mpcc.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void pipeline(Arena *a, const uint8_t *data, size_t size)
{
    char *text = arena_alloc(a, size + 1);
    if (size)
        memcpy(text, data, size);
    Graph *g = dsl_import_text(a, "fuzz.mp", text, size);
    Options o = {.batch = 2};
    if (!bind_shapes(g, &o, false))
        return;
    ir_toposort(g);
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
    dsl_param_limit = (size_t)16 << 20;
    if (setjmp(jb) == 0)
        pipeline(a, data, size);
    diag_jmp = NULL;
    diag_forget_sources();
    arena_free(a);
    return 0;
}
