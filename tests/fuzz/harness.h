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

/* What a target that is not a model takes from the harness (fuzz_trace.c):
 * the same private folder, quiet diagnostics and descriptor check. */

/* NAME in the private temporary folder (made on first use, removed with
 * all it holds at exit); malloc'd, kept by the caller. */
char *fuzz_path(const char *name);

/* step on a fresh arena, diagnostics quiet and stderr a null stream
 * (unless FUZZ_VERBOSE), its user errors caught; false if one stopped it. */
typedef void (*FuzzStep)(Arena *a, void *ctx);
bool fuzz_caught(FuzzStep step, void *ctx);

/* The lowest free descriptor before an input; after it, a descriptor the
 * input left open is a finding (abort). */
int fuzz_free_descriptor(void);
void fuzz_check_descriptors(int before);

/* A null stream, for dumps nobody reads. */
FILE *fuzz_null(void);

#endif
