/* cli.c — the command line: `mpcc [options] <model.onnx>`.
 *
 * Every option is accepted as `-name value`, `--name value` and
 * `--name=value`, as compilers and trtexec users expect.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

/* What --cpu-kernels=auto means in this build of mpcc. */
#ifdef MPCC_HAVE_DNNL
#define MPCC_KERNELS_AUTO \
"                           auto (the default): oneDNN GEMMs and max pooling,\n" \
"                           and convolutions where oneDNN measured faster\n"
#else
#define MPCC_KERNELS_AUTO \
"                           auto (the default): builtin, as this mpcc was built\n" \
"                           without oneDNN's headers\n"
#endif

static const char help_text[] =
"usage: mpcc [options] <model.onnx | model.mp>\n"
"       mpcc --gantt-from=run.json -o run.svg\n"
"       mpcc model.mp --emit-onnx -o model.onnx\n"
"       mpcc export <model.onnx> <ckpt.safetensors> -o <trained.onnx>\n"
"\n"
"mpcc compiles a model into a standalone training program, partitioned\n"
"across devices ahead of time. `mpcc export` writes the weights of a\n"
"trainer's checkpoint back into the model (see mpcc export --help).\n"
"\n"
"Input shapes:\n"
"  -batch N                 bind the batch dimension (axis 0) of every graph\n"
"                           input whose first dimension is symbolic\n"
"  --shapes=NAME:DxDx..[,NAME:DxDx..]\n"
"                           give the full shape of graph inputs by name, e.g.\n"
"                           --shapes=input:8x3x224x224 (overrides -batch)\n"
"\n"
"Devices and pipeline (docs/pipeline.md):\n"
"  -cpus N                  partition across N CPU devices (one worker thread each)\n"
"  -gpus N                  partition across N CUDA devices\n"
"  --devices=LIST           an explicit list: cpu,cpu:1 or cuda:0,cuda:1 (one kind of\n"
"                           device per trainer; plans and dumps also take mixed ones)\n"
"  --precision=fp32|tf32|bf16\n"
"                           fp32 (the default); tf32: CUDA GEMMs and convolutions\n"
"                           may use TF32 tensor cores (~1e-3 relative error; --tf32\n"
"                           is the same); bf16: activations and their gradients\n"
"                           stored in bfloat16, arithmetic, master weights, optimizer\n"
"                           state and gradient sums in fp32 (docs/precision.md)\n"
"  --cuda-graph=auto|off   CUDA devices: capture the step's launches, copies and\n"
"                           events once and replay them each step (auto, the\n"
"                           default: where the step is the same every step; not in a\n"
"                           step --trace or --profile times; docs/cuda.md)\n"
"  --cpu-kernels=auto|builtin|onednn\n"
"                           CPU devices' GEMMs, convolutions and max pooling's\n"
"                           forward: through oneDNN (the trainer then links\n"
"                           -ldnnl; docs/trainer.md), or\n"
"                           OpenBLAS GEMMs and im2col convolutions (builtin), or\n"
MPCC_KERNELS_AUTO
"  --cpu-layout=blocked|plain\n"
"                           activations between oneDNN's convolutions: in its\n"
"                           blocked layout where every op around them can take it\n"
"                           (default; no reorders, the same bits), or always in\n"
"                           the plain NCHW\n"
"  --profile=NAME|FILE      the cost model's device profile: cpu (this machine,\n"
"                           calibrated at start-up), h100-sxm, h100-pcie, a100, or a\n"
"                           profile file (docs/pipeline.md); default: cpu for CPU\n"
"                           devices, h100-sxm for CUDA devices\n"
"  --measured=PROF.json[,PROF.json]\n"
"                           per-node times a trainer measured (./train --profile)\n"
"                           replace the estimates, scaled to each micro-batch size\n"
"                           tried (profiles of two sizes: fitted a + b * rows); a\n"
"                           trace (./train --trace) adds its run to the pictures\n"
"  --schedule=KIND          gpipe, 1f1b, interleaved, zb (zero-bubble: backward\n"
"                           split into input and weight gradients) or auto\n"
"                           (default: simulate each and keep the fastest that fits)\n"
"  --virtual-stages=V       interleaved: stages per device (default 2)\n"
"  --split=NODE[,NODE]      cut the model after these nodes instead of choosing\n"
"  --recompute=none|auto|all  recompute stage forwards in the backward pass to\n"
"                           save activation memory (auto: only stages that would\n"
"                           not fit otherwise; default none, but when no plan fits\n"
"                           and --offload=auto, the faster of offload and auto)\n"
"  --offload=auto|activations|weights|all|none\n"
"                           activations: what a stage keeps for its backward pass\n"
"                           waits in host memory between its forward and its\n"
"                           backward, copied out and back on the copy streams\n"
"                           while other actions of the device run; weights: the\n"
"                           parameters and optimizer state live in host memory\n"
"                           and come to the device for the actions that use them\n"
"                           (the update runs on the device, then they go back);\n"
"                           all: both. It saves device memory when a device runs\n"
"                           other actions in between: several stages per device,\n"
"                           or several micro-batches in flight (docs/pipeline.md);\n"
"                           auto (default): activations, then all, only when no\n"
"                           plan fits without, and only the fewest of them (the\n"
"                           largest first) with which it fits\n"
"  --data-parallel=R|auto   R replicas of the pipeline, each training on its own\n"
"                           rows of every batch (-batch and --microbatches are the\n"
"                           step's, over every replica); their gradients are summed\n"
"                           before the update, in a fixed order, so every layout\n"
"                           gives the same numbers bit for bit. R/K replicas in\n"
"                           each of --nodes=K processes share its devices\n"
"                           (-cpus N or -gpus N, N/(R/K) each); auto: every such\n"
"                           layout planned, the fastest predicted step kept\n"
"  --nodes=K                K processes, one per machine, each with the devices\n"
"                           -cpus N or -gpus N gives (CPU devices over MPI, GPUs\n"
"                           over NCCL): the trainer is built with mpicc and run\n"
"                           as mpirun -np K ./train (docs/distributed.md).\n"
"                           Default 1: one process, no launcher. With\n"
"                           --data-parallel=1: one pipeline across the K\n"
"                           processes' devices; with R dividing K, R pipelines\n"
"                           across K/R processes each\n"
"  --zero=1                 ZeRO stage 1 with --data-parallel=R: each replica\n"
"                           keeps and updates 1/R of the optimizer state; the\n"
"                           gradients are reduce-scattered and the weights\n"
"                           all-gathered (the same numbers, bit for bit). GPUs:\n"
"                           one replica per process\n"
"  --bucket-mb=X            with --data-parallel: the most megabytes of gradients\n"
"                           one sum over the replicas takes (default 25); a stage's\n"
"                           buckets are summed one after another on its device's\n"
"                           communication stream, each as soon as the last\n"
"                           backward has finished it, beside the rest\n"
"  --objective=time|memory  what the plan minimises: the step time (default), or\n"
"                           the largest device's memory, spreading weights and\n"
"                           activations evenly (for models that do not fit)\n"
"\n"
"Training (the trainer's own flags override the learning rate):\n"
"  --loss=cross_entropy|mse the loss on the model's output (default: the model's own\n"
"                           SoftmaxCrossEntropyLoss, else cross_entropy)\n"
"  --ignore-index=N         cross-entropy labels to skip (default -100)\n"
"  --class-axis=K           the output's class dimension for cross-entropy (default 1,\n"
"                           as PyTorch and ONNX; -1 for a language model's (B,T,V))\n"
"  --optimizer=sgd|adamw    default sgd\n"
"  --lr=F                   learning rate (default 0.01 for sgd, 0.001 for adamw)\n"
"  --momentum=F             sgd momentum (default 0)\n"
"  --nesterov               sgd Nesterov momentum\n"
"  --weight-decay=F         L2 for sgd, decoupled for adamw (default 0, adamw 0.01)\n"
"  --betas=F,F --eps=F      adamw (default 0.9,0.999 and 1e-8)\n"
"  --microbatches=M         split each batch into M micro-batches and accumulate\n"
"                           their gradients (default 1)\n"
"  --clip-norm=F            clip gradients to this global L2 norm\n"
"  --frozen=REGEX           do not train parameters whose name matches\n"
"\n"
"Output:\n"
"  -o FILE                  where to write the output (default: stdout for dumps)\n"
"  --infer                  write a forward-only program instead of a trainer: no\n"
"                           loss, no gradients, one CPU device; it reads every graph\n"
"                           input from .npy and writes the outputs as .npy\n"
"                           (./infer --input NAME=x.npy --output NAME=y.npy;\n"
"                           docs/infer.md)\n"
"  --emit-onnx              write the model (a .mp file in the DSL, docs/dsl.md) with\n"
"                           its initial weights as ONNX to -o model.onnx, and stop\n"
"  --no-fuse                one kernel call per node: do not run chains of\n"
"                           elementwise nodes as one kernel (the numbers are the same\n"
"                           bit for bit either way; docs/trainer.md)\n"
"\n"
"Inspection:\n"
"  --dump=WHAT[,WHAT]       print a pass's result as text and stop:\n"
"                             ir      the graph after import, shape inference and\n"
"                                     constant folding: one line per node with op,\n"
"                                     inputs and outputs with dtypes and shapes\n"
"                             shapes  every value's dtype and static shape\n"
"                             grad    the training graph: forward (a weight's Transpose\n"
"                                     read in its MatMul, an exported GELU one\n"
"                                     Gelu: docs/design.md), loss, gradients and\n"
"                                     optimizer updates\n"
"                             partition  stages: devices, nodes, parameters, FLOPs,\n"
"                                     predicted time and memory\n"
"                             schedule   the step as an ASCII Gantt chart per device\n"
"                                     and stream, with the simulator's prediction\n"
"                             partition-dot  the graph in Graphviz, coloured by\n"
"                                     device, cut edges labelled with bytes\n"
"                             fuse    the chains of elementwise nodes that run as\n"
"                                     one kernel each, per stage action\n"
"                             memory  what each device's arena holds: weights,\n"
"                                     gradients, optimizer state, activations,\n"
"                                     buffers taking turns, scratch; the largest\n"
"                                     buffers\n"
"                             costs   the cost model node by node: kind of work,\n"
"                                     FLOPs, bytes, predicted (and with --measured,\n"
"                                     measured) time, totals per kind\n"
"                             gantt=FILE.svg  the predicted step as a picture: a row\n"
"                                     per device stream, a box per action coloured by\n"
"                                     stage, copies as arrows, idle time shaded, each\n"
"                                     device's memory plan as a bar\n"
"                             sweep=FILE.svg  the predicted step against the\n"
"                                     micro-batch count, a line per schedule that\n"
"                                     can run, the chosen plan circled\n"
"                           with --measured=run.json (./train --trace run.json), gantt\n"
"                           draws the measured step under the predicted one, and sweep\n"
"                           marks each run's mean step\n"
"  --gantt-from=TRACE.json[,TRACE.json]\n"
"                           draw traces (./train --trace, mpcc --trace) as gantt does,\n"
"                           one above the other, to -o FILE.svg (default: the first\n"
"                           trace's name with .svg); no model needed\n"
"  --trace=FILE             write the predicted timeline as Chrome trace JSON\n"
"                           (open in Perfetto or chrome://tracing)\n"
"  --check                  list every op of the model mpcc cannot compile yet,\n"
"                           with counts and node names; then, with the shapes\n"
"                           known, every node whose attributes, rank or dtype\n"
"                           stop the compile, and a plan that cannot run; exit 1\n"
"                           if there is any (with --infer: for the forward-only\n"
"                           program). It passes exactly when the compile does\n"
"  --list-ops               print the op support table (docs/ops.md) and exit\n"
"\n"
"Information:\n"
"  -h, --help               this text\n"
"  --version                print the version and exit\n"
"\n"
"Both spellings work for every option: -batch 8, --batch=8, --batch 8.\n"
"Errors name the file and the node: mpcc: model.onnx: node 'x' (Conv): error: ...\n"
"Exit status: 0 success, 1 a problem with the model or the command line.\n"
"Documentation: README.md and docs/ in the mpcc source tree.\n";

static _Noreturn void usage_error(const char *fmt, const char *arg)
{
    fputs("mpcc: error: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("; see mpcc --help\n", stderr);
    exit(1);
}

static int64_t parse_count(const char *opt, const char *s, int64_t max)
{
    int64_t v;
    if (!parse_i64(s, &v) || v < 0 || v > max) {
        fprintf(stderr, "mpcc: error: %s expects a whole number from 0 to %lld, "
                "got '%s'; see mpcc --help\n", opt, (long long)max, s);
        exit(1);
    }
    return v;
}

static void parse_one_shape(Arena *a, const char *item, ShapeBinding *b)
{
    const char *colon = strrchr(item, ':');
    if (!colon || colon == item)
        usage_error("--shapes expects NAME:DxDx.., got '%s'", item);
    b->name = arena_strndup(a, item, (size_t)(colon - item));
    b->shape.rank = 0;
    const char *p = colon + 1;
    while (*p) {
        if (b->shape.rank == MAX_RANK)
            usage_error("--shapes: too many dimensions in '%s'", item);
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || (*end && *end != 'x'))
            usage_error("--shapes: dimensions must be numbers separated "
                        "by 'x', got '%s'", item);
        b->shape.d[b->shape.rank++] = d;
        p = *end ? end + 1 : end;
    }
}

static void parse_shapes(Arena *a, const char *arg, Options *o)
{
    char *copy = arena_strdup(a, arg);
    for (char *item = strtok(copy, ","); item; item = strtok(NULL, ",")) {
        o->shapes = arena_grow(a, o->shapes, o->nshapes, o->nshapes + 1,
                               sizeof(ShapeBinding));
        parse_one_shape(a, item, &o->shapes[o->nshapes++]);
    }
}

static void parse_dump(Arena *a, const char *arg, Options *o)
{
    char *copy = arena_strdup(a, arg);
    for (char *w = strtok(copy, ","); w; w = strtok(NULL, ",")) {
        if (strcmp(w, "ir") == 0)
            o->dump_ir = true;
        else if (strcmp(w, "shapes") == 0)
            o->dump_shapes = true;
        else if (strcmp(w, "grad") == 0)
            o->dump_grad = true;
        else if (strcmp(w, "partition") == 0)
            o->dump_partition = true;
        else if (strcmp(w, "schedule") == 0)
            o->dump_schedule = true;
        else if (strcmp(w, "partition-dot") == 0)
            o->dump_dot = true;
        else if (strcmp(w, "fuse") == 0)
            o->dump_fuse = true;
        else if (strcmp(w, "memory") == 0)
            o->dump_memory = true;
        else if (strcmp(w, "costs") == 0)
            o->dump_costs = true;
        else if (strncmp(w, "gantt=", 6) == 0 && w[6])
            o->dump_gantt = w + 6;
        else if (strncmp(w, "sweep=", 6) == 0 && w[6])
            o->dump_sweep = w + 6;
        else if (strncmp(w, "gantt", 5) == 0 || strncmp(w, "sweep", 5) == 0)
            usage_error("--dump=%s needs a file: --dump=gantt=step.svg or "
                        "--dump=sweep=sweep.svg", w);
        else
            usage_error("--dump: unknown pass '%s' (known: ir, shapes, grad, partition, "
                        "schedule, partition-dot, fuse, memory, costs, gantt=FILE.svg, "
                        "sweep=FILE.svg)", w);
    }
}

typedef enum { OPT_O, OPT_GPUS, OPT_CPUS, OPT_BATCH, OPT_SHAPES, OPT_DUMP,
               OPT_CHECK, OPT_LIST_OPS, OPT_HELP, OPT_VERSION, OPT_LOSS, OPT_IGNORE,
               OPT_OPTIMIZER, OPT_LR, OPT_MOMENTUM, OPT_NESTEROV, OPT_WD, OPT_BETAS,
               OPT_EPS, OPT_MICRO, OPT_CLIP, OPT_FROZEN, OPT_CLASS_AXIS, OPT_DEVICES,
               OPT_PROFILE, OPT_MEASURED, OPT_SCHEDULE, OPT_VIRT, OPT_SPLIT, OPT_RECOMPUTE,
               OPT_TRACE, OPT_OBJECTIVE, OPT_EMIT_ONNX, OPT_INFER, OPT_TF32, OPT_NO_FUSE,
               OPT_CPU_KERNELS, OPT_CPU_LAYOUT, OPT_GANTT_FROM, OPT_OFFLOAD, OPT_DATA_PARALLEL, OPT_NODES,
               OPT_ZERO, OPT_BUCKET, OPT_PRECISION, OPT_CUDA_GRAPH, OPT_COUNT } OptId;

static const struct { const char *name; OptId id; bool arg; } options[] = {
    {"o", OPT_O, true},          {"output", OPT_O, true},
    {"gpus", OPT_GPUS, true},    {"cpus", OPT_CPUS, true},
    {"batch", OPT_BATCH, true},  {"shapes", OPT_SHAPES, true},
    {"dump", OPT_DUMP, true},    {"check", OPT_CHECK, false},
    {"list-ops", OPT_LIST_OPS, false}, {"emit-onnx", OPT_EMIT_ONNX, false},
    {"infer", OPT_INFER, false},        {"tf32", OPT_TF32, false},
    {"no-fuse", OPT_NO_FUSE, false},    {"cpu-kernels", OPT_CPU_KERNELS, true},
    {"cpu-layout", OPT_CPU_LAYOUT, true}, {"precision", OPT_PRECISION, true},
    {"cuda-graph", OPT_CUDA_GRAPH, true},
    {"loss", OPT_LOSS, true},    {"ignore-index", OPT_IGNORE, true},
    {"optimizer", OPT_OPTIMIZER, true}, {"lr", OPT_LR, true},
    {"momentum", OPT_MOMENTUM, true},   {"nesterov", OPT_NESTEROV, false},
    {"weight-decay", OPT_WD, true},     {"betas", OPT_BETAS, true},
    {"eps", OPT_EPS, true},             {"microbatches", OPT_MICRO, true},
    {"clip-norm", OPT_CLIP, true},      {"frozen", OPT_FROZEN, true},
    {"class-axis", OPT_CLASS_AXIS, true},
    {"devices", OPT_DEVICES, true},     {"profile", OPT_PROFILE, true},
    {"measured", OPT_MEASURED, true},   {"schedule", OPT_SCHEDULE, true},
    {"virtual-stages", OPT_VIRT, true}, {"split", OPT_SPLIT, true},
    {"recompute", OPT_RECOMPUTE, true}, {"trace", OPT_TRACE, true},
    {"offload", OPT_OFFLOAD, true},
    {"data-parallel", OPT_DATA_PARALLEL, true}, {"nodes", OPT_NODES, true},
    {"zero", OPT_ZERO, true},           {"bucket-mb", OPT_BUCKET, true},
    {"objective", OPT_OBJECTIVE, true}, {"gantt-from", OPT_GANTT_FROM, true},
    {"h", OPT_HELP, false},      {"help", OPT_HELP, false},
    {"version", OPT_VERSION, false},
};

static double parse_real(const char *opt, const char *s, double lo, double hi)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "mpcc: error: %s expects a number from %g to %g, got '%s'; see "
                "mpcc --help\n", opt, lo, hi, s);
        exit(1);
    }
    return v;
}

static void parse_betas(const char *opt, const char *s, TrainOptions *t)
{
    char *end;
    t->beta1 = strtod(s, &end);
    if (*end != ',' || !(t->beta1 >= 0 && t->beta1 < 1))
        usage_error("--betas expects two numbers in [0,1) like 0.9,0.999, got '%s'", s);
    t->beta2 = parse_real(opt, end + 1, 0, 0.999999999);
}

static void apply_training(OptId id, const char *opt, const char *val, Options *o)
{
    TrainOptions *t = &o->train;
    switch (id) {
    case OPT_LOSS:
        if (strcmp(val, "cross_entropy") == 0 || strcmp(val, "ce") == 0)
            t->loss = LOSS_CE;
        else if (strcmp(val, "mse") == 0)
            t->loss = LOSS_MSE;
        else
            usage_error("--loss must be cross_entropy or mse, got '%s'", val);
        break;
    case OPT_IGNORE: t->ignore_index = (int64_t)parse_real(opt, val, -1e18, 1e18); break;
    case OPT_CLASS_AXIS: t->class_axis = (int)parse_real(opt, val, -8, 7); break;
    case OPT_OPTIMIZER:
        if (strcmp(val, "sgd") == 0)
            t->optim = OPTIM_SGD;
        else if (strcmp(val, "adamw") == 0)
            t->optim = OPTIM_ADAMW;
        else
            usage_error("--optimizer must be sgd or adamw, got '%s'", val);
        break;
    case OPT_LR: t->lr = parse_real(opt, val, 0, 1e6); break;
    case OPT_MOMENTUM: t->momentum = parse_real(opt, val, 0, 1); break;
    case OPT_NESTEROV: t->nesterov = true; break;
    case OPT_WD: t->weight_decay = parse_real(opt, val, 0, 1e6); break;
    case OPT_BETAS: parse_betas(opt, val, t); break;
    case OPT_EPS: t->eps = parse_real(opt, val, 0, 1); break;
    case OPT_MICRO: t->microbatches = (int)parse_count(opt, val, 1 << 20); break;
    case OPT_CLIP: t->clip_norm = parse_real(opt, val, 0, 1e30); break;
    case OPT_FROZEN: t->frozen = val; break;
    default: unreachable();
    }
}

static int pick(const char *opt, const char *val, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(val, names[i]) == 0)
            return i;
    fprintf(stderr, "mpcc: error: %s: unknown value '%s' (known:", opt, val);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %s", names[i]);
    fputs("); see mpcc --help\n", stderr);
    exit(1);
}

static void apply_pipeline(OptId id, const char *opt, const char *val, Options *o)
{
    static const char *const sched[] = {"auto", "gpipe", "1f1b", "interleaved", "zb"};
    static const char *const recompute[] = {"none", "auto", "all"};
    static const char *const objective[] = {"time", "memory"};
    static const char *const offload[] = {[OFFLOAD_NONE] = "none",
                                          [OFFLOAD_ACTIVATIONS] = "activations",
                                          [OFFLOAD_WEIGHTS] = "weights",
                                          [OFFLOAD_ALL] = "all",
                                          [OFFLOAD_AUTO] = "auto"};
    static const char *const cpu_kernels[] = {[KERNELS_AUTO] = "auto", [KERNELS_BUILTIN] = "builtin",
                                               [KERNELS_ONEDNN] = "onednn"};
    static const char *const cpu_layout[] = {[LAYOUT_BLOCKED] = "blocked", [LAYOUT_PLAIN] = "plain"};
    static const char *const cuda_graph[] = {"auto", "off"};
    static const char *const precision[] = {[PREC_FP32] = "fp32", [PREC_TF32] = "tf32",
                                            [PREC_BF16] = "bf16"};
    PipeOptions *p = &o->pipe;
    switch (id) {
    case OPT_DEVICES: p->devices = val; break;
    case OPT_PROFILE: p->profile = val; break;
    case OPT_MEASURED: p->measured = val; break;
    case OPT_SCHEDULE: p->schedule = (SchedKind)pick(opt, val, sched, 5); break;
    case OPT_VIRT: p->virt = (int)parse_count(opt, val, 64); break;
    case OPT_SPLIT: p->split = val; break;
    case OPT_RECOMPUTE: p->recompute = (RecomputeKind)pick(opt, val, recompute, 3); break;
    case OPT_OFFLOAD: p->offload = (OffloadKind)pick(opt, val, offload, OFFLOAD_COUNT); break;
    case OPT_OBJECTIVE: p->objective = (Objective)pick(opt, val, objective, 2); break;
    case OPT_TRACE: p->trace = val; break;
    case OPT_DATA_PARALLEL:
        p->replicas = strcmp(val, "auto") == 0 ? REPLICAS_AUTO : (int)parse_count(opt, val, 4096);
        if (!p->replicas)
            usage_error("--data-parallel must be at least 1 (or auto), got '%s'", val);
        break;
    case OPT_NODES:
        p->nodes = (int)parse_count(opt, val, 4096);
        if (!p->nodes)
            usage_error("--nodes must be at least 1, got '%s'", val);
        break;
    case OPT_ZERO:
        if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0)
            usage_error("--zero takes 0 or 1 (ZeRO stage 1: the optimizer state sharded over "
                        "the replicas), got '%s'", val);
        p->zero = val[0] - '0';
        break;
    case OPT_BUCKET: p->bucket_mb = parse_real(opt, val, 1e-6, 1e6); break;
    case OPT_CPU_KERNELS: o->cpu_kernels = (CpuKernels)pick(opt, val, cpu_kernels, KERNELS_COUNT); break;
    case OPT_CPU_LAYOUT: o->cpu_layout = (CpuLayout)pick(opt, val, cpu_layout, LAYOUT_COUNT); break;
    case OPT_PRECISION: o->precision = (Precision)pick(opt, val, precision, PREC_COUNT); break;
    case OPT_CUDA_GRAPH: o->cuda_graph_off = pick(opt, val, cuda_graph, 2) == 1; break;
    default: apply_training(id, opt, val, o); break;
    }
}

static void apply(Arena *a, OptId id, const char *opt, const char *val, Options *o)
{
    switch (id) {
    case OPT_O: o->output = val; break;
    case OPT_GPUS: o->gpus = (int)parse_count(opt, val, 1024); break;
    case OPT_TF32: o->precision = PREC_TF32; break;
    case OPT_CPUS: o->cpus = (int)parse_count(opt, val, 1024); break;
    case OPT_BATCH:
        o->batch = parse_count(opt, val, (int64_t)1 << 40);
        if (o->batch == 0)
            usage_error("-batch must be at least 1, got '%s'", val);
        break;
    case OPT_SHAPES: parse_shapes(a, val, o); break;
    case OPT_DUMP: parse_dump(a, val, o); break;
    case OPT_CHECK: o->check = true; break;
    case OPT_EMIT_ONNX: o->emit_onnx = true; break;
    case OPT_INFER: o->infer = true; break;
    case OPT_NO_FUSE: o->no_fuse = true; break;
    case OPT_GANTT_FROM: o->gantt_from = val; break;
    case OPT_LIST_OPS: list_ops(stdout); exit(0);
    default: apply_pipeline(id, opt, val, o); break;
    case OPT_HELP: fputs(help_text, stdout); exit(0);
    case OPT_VERSION: printf("mpcc %s\n", MPCC_VERSION); exit(0);
    }
}

/* Defaults as in PyTorch where it has them. */
static void training_defaults(TrainOptions *t, const bool *given)
{
    if (!given[OPT_LR])
        t->lr = t->optim == OPTIM_ADAMW ? 1e-3 : 1e-2;
    if (!given[OPT_WD] && t->optim == OPTIM_ADAMW)
        t->weight_decay = 1e-2;
    if (!given[OPT_BETAS])
        t->beta1 = 0.9, t->beta2 = 0.999;
    if (!given[OPT_EPS])
        t->eps = 1e-8;
    if (!given[OPT_IGNORE])
        t->ignore_index = -100;
    if (!given[OPT_MICRO])
        t->microbatches = 1;
    if (!given[OPT_CLASS_AXIS])
        t->class_axis = 1;
    if (t->microbatches < 1)
        usage_error("--microbatches must be at least 1%s", "");
    if (t->optim == OPTIM_ADAMW && (given[OPT_MOMENTUM] || given[OPT_NESTEROV]))
        usage_error("--momentum and --nesterov are for --optimizer=sgd%s", "");
    if (t->nesterov && t->momentum == 0)
        usage_error("--nesterov needs --momentum greater than 0%s", "");
}

static char *command_line(Arena *a, int argc, char **argv)
{
    char *s = "mpcc";
    for (int i = 1; i < argc; i++)
        s = arena_printf(a, "%s %s", s, argv[i]);
    return s;
}

void cli_parse(Arena *a, int argc, char **argv, Options *o)
{
    memset(o, 0, sizeof *o);
    bool given[OPT_COUNT] = {false};
    o->cmdline = command_line(a, argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || arg[1] == 0) {
            if (o->input)
                usage_error("more than one model given ('%s')", arg);
            o->input = arg;
            continue;
        }
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        size_t k = 0, n = sizeof options / sizeof options[0];
        while (k < n && !(strlen(options[k].name) == len &&
                          strncmp(options[k].name, name, len) == 0))
            k++;
        if (k == n)
            usage_error("unknown option '%s'", arg);
        const char *val = NULL;
        if (options[k].arg) {
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                usage_error("option '%s' needs a value", arg);
        } else if (eq) {
            usage_error("option '%s' takes no value", arg);
        }
        given[options[k].id] = true;
        apply(a, options[k].id, arg, val, o);
    }
    training_defaults(&o->train, given);
    o->pipe.micro_given = given[OPT_MICRO];
    o->pipe.recompute_given = given[OPT_RECOMPUTE];
    if (!given[OPT_VIRT])
        o->pipe.virt = 2;
    if (!given[OPT_OFFLOAD])
        o->pipe.offload = OFFLOAD_AUTO;
    if (o->pipe.virt < 1)
        usage_error("--virtual-stages must be at least 1%s", "");
    if (o->precision == PREC_TF32 && !o->gpus && !(o->pipe.devices && strstr(o->pipe.devices, "cuda")))
        usage_error("--tf32 is for CUDA devices (-gpus N), as is --precision=tf32; drop it for "
                    "CPU devices%s", "");
    if (o->precision == PREC_BF16 && (o->infer || o->emit_onnx))
        usage_error("--precision=bf16 is for training; the forward-only program and "
                    "--emit-onnx keep the model's float32%s", "");
    if (o->gantt_from && o->input)
        usage_error("--gantt-from draws traces alone; drop the model '%s', or draw a trace "
                    "under the prediction with --measured=run.json --dump=gantt=step.svg",
                    o->input);
    if (!o->input && !o->gantt_from)
        usage_error("no model given%s", "");
}
