/* fuzz_onnx.c — the ONNX fuzz target (libFuzzer entry point).
 *
 * Arbitrary bytes as an ONNX model through the whole compiler (harness.c):
 * the importer, shape binding (a fixed first dimension re-batched, against
 * the model's own shapes inferred first, as driver.c does), shape inference
 * with folding, pruning, --check and the dumps; then the training graph,
 * the devices, partition, schedule, memory plan, fusion and the generated
 * program, on small fixed options. User errors unwind through diag_jmp;
 * anything else (a crash, a sanitizer report, an internal-error abort) is a
 * finding.
 *
 * Built two ways: with clang -fsanitize=fuzzer by tests/fuzz/build.sh, and
 * with replay.c as a plain program that CTest runs over the corpus.
 */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static Graph *import(Arena *a, const char *path, const uint8_t *data, size_t size)
{
    return onnx_import_bytes(a, path, data, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_model(import, "fuzz/model.onnx", data, size);
    return 0;
}
