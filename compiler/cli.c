/* cli.c — the command line: `mpcc [options] <model.onnx>`.
 *
 * Every option is accepted as `-name value`, `--name value` and
 * `--name=value`, as compilers and trtexec users expect.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

static const char help_text[] =
"usage: mpcc [options] <model.onnx>\n"
"\n"
"mpcc compiles a model into a standalone training program, partitioned\n"
"across devices ahead of time.\n"
"\n"
"Input shapes:\n"
"  -batch N                 bind the batch dimension (axis 0) of every graph\n"
"                           input whose first dimension is symbolic\n"
"  --shapes=NAME:DxDx..[,NAME:DxDx..]\n"
"                           give the full shape of graph inputs by name, e.g.\n"
"                           --shapes=input:8x3x224x224 (overrides -batch)\n"
"\n"
"Devices:\n"
"  -gpus N                  number of CUDA devices to partition across\n"
"  -cpus N                  number of CPU devices to partition across\n"
"\n"
"Output:\n"
"  -o FILE                  where to write the output (default: stdout for dumps)\n"
"\n"
"Inspection:\n"
"  --dump=WHAT[,WHAT]       print a pass's result as text and stop:\n"
"                             ir      the graph after import, shape inference and\n"
"                                     constant folding: one line per node with op,\n"
"                                     inputs and outputs with dtypes and shapes\n"
"                             shapes  every value's dtype and static shape\n"
"  --check                  list every op of the model mpcc cannot compile yet,\n"
"                           with counts and node names; exit 1 if there is any\n"
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
        else
            usage_error("--dump: unknown pass '%s' (known: ir, shapes)", w);
    }
}

typedef enum { OPT_O, OPT_GPUS, OPT_CPUS, OPT_BATCH, OPT_SHAPES, OPT_DUMP,
               OPT_CHECK, OPT_LIST_OPS, OPT_HELP, OPT_VERSION } OptId;

static const struct { const char *name; OptId id; bool arg; } options[] = {
    {"o", OPT_O, true},          {"output", OPT_O, true},
    {"gpus", OPT_GPUS, true},    {"cpus", OPT_CPUS, true},
    {"batch", OPT_BATCH, true},  {"shapes", OPT_SHAPES, true},
    {"dump", OPT_DUMP, true},    {"check", OPT_CHECK, false},
    {"list-ops", OPT_LIST_OPS, false},
    {"h", OPT_HELP, false},      {"help", OPT_HELP, false},
    {"version", OPT_VERSION, false},
};

static void apply(Arena *a, OptId id, const char *opt, const char *val, Options *o)
{
    switch (id) {
    case OPT_O: o->output = val; break;
    case OPT_GPUS: o->gpus = (int)parse_count(opt, val, 1024); break;
    case OPT_CPUS: o->cpus = (int)parse_count(opt, val, 1024); break;
    case OPT_BATCH:
        o->batch = parse_count(opt, val, (int64_t)1 << 40);
        if (o->batch == 0)
            usage_error("-batch must be at least 1, got '%s'", val);
        break;
    case OPT_SHAPES: parse_shapes(a, val, o); break;
    case OPT_DUMP: parse_dump(a, val, o); break;
    case OPT_CHECK: o->check = true; break;
    case OPT_LIST_OPS: list_ops(stdout); exit(0);
    case OPT_HELP: fputs(help_text, stdout); exit(0);
    case OPT_VERSION: printf("mpcc %s\n", MPCC_VERSION); exit(0);
    }
}

void cli_parse(Arena *a, int argc, char **argv, Options *o)
{
    memset(o, 0, sizeof *o);
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
        apply(a, options[k].id, arg, val, o);
    }
    if (!o->input)
        usage_error("no model given%s", "");
}
