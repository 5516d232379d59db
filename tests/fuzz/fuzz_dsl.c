/* fuzz_dsl.c — the model DSL's fuzz target (libFuzzer entry point).
 *
 * Arbitrary bytes as a model written in the DSL through the front end
 * (lexer, parser with error recovery, lowering with the prelude) and then
 * the whole compiler behind it (harness.c): shape binding and inference,
 * --check and the dumps, the training graph, partition, schedule, memory
 * plan, fusion and the generated program, on small fixed options. User
 * errors unwind through diag_jmp; anything else (a crash, a sanitizer
 * report or leak, an internal-error abort) is a finding. Initial weights
 * are capped at 4 MB so that a large `param` is an error, not a slow run.
 *
 * Built two ways: with clang -fsanitize=fuzzer by tests/fuzz/build_dsl.sh,
 * and with replay.c as a plain program that CTest runs over corpus_dsl/
 * and regressions_dsl/.
 */
#include "harness.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The text outlives the diagnostics that quote it: it is the arena's. */
static Graph *import(Arena *a, const char *path, const uint8_t *data, size_t size)
{
    char *text = arena_alloc(a, size + 1);
    if (size)
        memcpy(text, data, size);
    return dsl_import_text(a, path, text, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsl_param_limit = (size_t)4 << 20;
    fuzz_model(import, "fuzz.mp", data, size);
    return 0;
}
