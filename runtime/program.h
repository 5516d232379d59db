/* program.h — what a generated program's model needs of the runtime ahead
 * of its code, since a macro, an enum or a struct must come before what
 * uses it: the storage classes of the runtime's functions and globals
 * (declared ahead, defined after the model), and the tables the model
 * fills in: its buffers, the step's operations, the nodes it times. */
#ifndef MPRT_PROGRAM_H
#define MPRT_PROGRAM_H

#include "mprt.h"

/* A program uses only the kernels its model needs, and of the runtime's
 * globals (on a CUDA device, MPRT_CU_KERNEL: runtime/cuda_ops.c). */
#if defined(__GNUC__) || defined(__clang__)
#define MPRT_KERNEL static __attribute__((unused))
#define MPRT_GLOBAL static __attribute__((unused))
#define MPRT_CU_KERNEL static __attribute__((unused))
#else
#define MPRT_KERNEL static
#define MPRT_GLOBAL static
#define MPRT_CU_KERNEL static
#endif

/* A kind of device's operations: stream.c's CPU devices, cuda.c's GPUs;
 * stream s is device s / MPRT_STREAMS's. The program calls them through its table,
 * mprt_ops (mixed.c's picks the table of each device): one indirect call. */
typedef struct MprtDeviceOps {
    void (*launch)(int stream, void (*fn)(int), int mb, int label);
    void (*memcpy_async)(int stream, void *dst, const void *src, size_t n, int label);
    void (*wait_event)(int stream, int ev), (*record_event)(int stream, int ev);
    void (*keep_loss)(int mb, const float *loss), (*sync)(void), (*losses_alloc)(int n);
    void (*dev_scratch)(int dev, void *p, size_t n), (*dev_zero)(int dev, void *dst, size_t n);
    void (*dev_slots)(int dev, void *p, size_t n);   /* GPUs: cuda.c's mprt_cu_slot */
    unsigned char *(*arena_alloc)(int dev, const char *name, size_t n);
    void (*arena_free)(int dev, unsigned char *p), (*norm_alloc)(int n);
    /* a device's host arena (--offload): where its copies reach it fastest */
    unsigned char *(*host_alloc)(int dev, const char *name, size_t n);
    void (*host_free)(int dev, unsigned char *p);
    void (*dev_write)(int dev, void *dst, const void *src, size_t n);
    const void *(*dev_read)(int dev, const void *src, size_t n, int k);
    const void *(*dev_hold)(int dev, const void *src, size_t n);
    void (*dev_unhold)(const void *host, const void *src);
    void *(*dev_stage)(int dev, void *dst, size_t n);
    void (*dev_commit)(int dev, void *dst, const void *staged, size_t n);
    void (*devices_open)(int ndev, const char *const *names, const double *shares);
    int (*streams_start)(int nstreams, int nevents, int nops, char *err, size_t errlen);
    void (*dev_copy)(void *dst, const void *src, size_t n);
    int (*dev_threads)(int dev);   /* a CPU device's threads; NULL or 0: not one */
    size_t (*dev_extra)(int dev);  /* memory taken beyond the arena (cuDNN's workspace); NULL: none */
    /* replicas in one process: a bucket's sum over the copies, where one
     * host thread issues every copy's step in turn (cuda.c); NULL: each
     * copy's thread meets the others' (comm.c) */
    void (*copies_sum)(int stage, int n, float *const *g, const long *len,
                       void (*ranks_sum)(int stage, int n, float *const *g, const long *len));
    /* the step as one captured graph (cuda.c): returns 1 if it ran the step
     * (captured or replayed), 0 to issue it as always; NULL: never */
    int (*graph_step)(void (*run_step)(void));
} MprtDeviceOps;

/* MPRT_OUTPUT is the model's output: the trainer's loss's scores or
 * predictions, or one graph output of the forward-only program. MPRT_CONST
 * is a constant too large to write into the C file: the program reads it
 * from its own weights file (under "mpcc.const." and the value's name),
 * whatever --weights says. */
enum { MPRT_PARAM, MPRT_STATE, MPRT_INPUT, MPRT_LABELS, MPRT_OUTPUT, MPRT_CONST };

/* A buffer on device `dev` at `offset`; micro-batch mb in slot mb % slots,
 * `stride` bytes apart. dev is -1 for a graph input nothing reads (the
 * forward-only program checks its file and keeps nothing). `host`: in the
 * device's host arena, where an offloaded weight lives between steps. */
typedef struct MprtBuffer {
    const char *name;
    int kind;
    MprtDType dtype;
    int rank;
    int64_t shape[MPRT_MAX_RANK];
    int dev;
    size_t offset;
    int slots;
    size_t stride, nbytes;
    int host;
    int own;               /* each replica's own (BatchNorm's running statistics):
                              not compared by --check-replicas */
    int shard;             /* --zero=1: the arena holds this replica's share of the
                              nbytes (comm.c's mprt_shard), of `shard` replicas; 0: all */
} MprtBuffer;

/* One operation of the step, for --trace (timeline.c). */
typedef struct MprtOpInfo {
    int stream;            /* device * MPRT_STREAMS + (0 compute, 1 send, 2 send-back, 3 comm) */
    const char *name;      /* "forward s0 mb1", "copy x mb1 to s1" */
    int dst_dev;           /* copies: the receiving device; -1 otherwise */
} MprtOpInfo;

/* What the traced run was, for --trace's "otherData" (timeline.c). */
typedef struct MprtRunInfo {
    const char *schedule;  /* "1f1b", ... */
    int microbatches;
    double mean_step;      /* seconds, over the run's steps */
    long steps;
} MprtRunInfo;

/* A node the program times, for --profile (timeline.c). */
typedef struct MprtProfNode {
    const char *name;      /* the ONNX node (or mpcc's name for a gradient node) */
    const char *phase;     /* "forward", "backward" or "update" */
} MprtProfNode;

#endif
