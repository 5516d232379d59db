/* infer.h — the forward-only program's model as the generated code
 * describes it for infer.c's mprt_infer_main, in a table ahead of the
 * runtime's code. */
#ifndef MPRT_INFER_H
#define MPRT_INFER_H

#include "program.h"

typedef struct MprtInferModel {
    const char *program, *mpcc_version, *model_file, *model_hash, *weights_file;
    int ndev;
    const size_t *arena_bytes;          /* [ndev] */
    const char *const *device_names;    /* [ndev] */
    const MprtBuffer *buffers;
    int nbuffers;
    void (*zero_state)(void);           /* the constants into their buffers */
    void (*forward)(void);              /* every node, once */
} MprtInferModel;

#endif
