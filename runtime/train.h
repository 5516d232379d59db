/* train.h — the trainer's model as the generated code describes it for
 * train.c's mprt_train_main, in a table ahead of the runtime's code. */
#ifndef MPRT_TRAIN_H
#define MPRT_TRAIN_H

#include "program.h"

enum { MPRT_LOSS_CROSS_ENTROPY, MPRT_LOSS_MSE };

typedef struct MprtModel {
    const char *program, *mpcc_version, *model_file, *model_hash, *weights_file;
    int batch, microbatches;
    const char *schedule;               /* gpipe, 1f1b, interleaved, zb: for --trace */
    double lr;
    int ndev;
    const size_t *arena_bytes;          /* [ndev] */
    const size_t *work_offset;          /* [ndev]: the kernels' scratch in the arena */
    const size_t *work_bytes;           /* [ndev] */
    const size_t *slot_bytes;           /* [ndev]: the last of work_bytes, a GPU's slots for
                                           the step's numbers (cuda.c's mprt_cu_slot) */
    const size_t *host_bytes;           /* [ndev]: host arenas, offloaded activations */
    const char *const *device_names;    /* [ndev] */
    const double *cpu_shares;           /* [ndev]: each device's predicted busy seconds a
                                           step, by which the CPU devices share the cores
                                           (stream.c); NULL: evenly */
    int nstreams, nevents, nops;
    const MprtOpInfo *ops;              /* [nops]: for --trace */
    const MprtProfNode *prof_nodes;     /* for --profile */
    int nprof_nodes;
    int norm_terms;             /* --clip-norm: the entries of mprt_norm_sq */
    int replicas, nodes;        /* --data-parallel, --nodes: 0 for one process */
    int replicas_here;          /* of them, in each process (state.c): 0 or 1 for one */
    int node_devs;              /* a pipeline across processes: each one's devices, rank
                                   r's r * node_devs ..; 0: every device here (comm.c) */
    int nstages;                /* with replicas: a communicator each (comm.c) */
    const int *links;           /* a GPU pipeline across processes: nlinks pairs of streams
                                   (sender, receiver) whose copies cross (nccl.c) */
    int nlinks;
    const MprtBuffer *buffers;
    int nbuffers;
    int loss_kind;              /* MPRT_LOSS_*: how evaluation scores the output */
    int64_t ignore_index;       /* cross-entropy: labels that are not scored */
    int class_axis;             /* cross-entropy: the scores' classes (1, or
                                   mpcc --class-axis) */
    int log_prob_dev;           /* cross-entropy: where the loss kernel leaves */
    size_t log_prob_offset;     /* the log-softmax of micro-batch 0, or with lse */
    int lse;                    /* each row's log-sum-exp (x - lse: the log-softmax) */
    void (*kernels_start)(size_t *scratch);  /* before the arenas: oneDNN's primitives,
                                                each device's scratch raised to what they
                                                need (runtime/cpu_dnnl.c); NULL if none */
    void (*zero_state)(void);
    void (*run_step)(void);     /* every micro-batch forward and backward, the update */
    const char *graph_why;      /* GPUs: why the step is not one CUDA graph (mpcc
                                   --cuda-graph, docs/cuda.md); NULL: it is */
    void (*eval_forward)(void); /* micro-batch 0 forward through every stage */
} MprtModel;

#endif
