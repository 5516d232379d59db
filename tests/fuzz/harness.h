/* harness.h — the part of the fuzz targets they share (harness.c): a
 * model's bytes through the whole compiler, as compiler/driver.c runs it.
 *
 * A target gives its importer (bytes -> graph); fuzz_model runs the front
 * half (import, shape binding, shape inference with folding, pruning, the
 * --check table and the dumps) and then the whole pipeline of `mpcc -o
 * train.c` on fixed, small options: the training graph (loss, autodiff,
 * optimizer), the devices, partition, schedule, memory plan and sharing,
 * fusion, the plan dumps and code generation. User errors unwind through
 * diag_jmp; anything else (a crash, a sanitizer report or leak, an
 * internal-error abort) is a finding.
 */
#ifndef FUZZ_HARNESS_H
#define FUZZ_HARNESS_H

#include "mpcc.h"

/* Bytes -> graph; errors through diag.c. `path` names the model in
 * diagnostics and in the generated program. */
typedef Graph *(*FuzzImport)(Arena *a, const char *path, const uint8_t *data, size_t size);

/* Runs one input through the compiler; the options are one of a few fixed
 * sets (devices, schedule, micro-batches, optimizer), picked by a hash of
 * the input. */
void fuzz_model(FuzzImport import, const char *path, const uint8_t *data, size_t size);

#endif
