/* infer.c — the main of the forward-only program (mpcc --infer).
 *
 * The generated code (before this file) describes the model in one
 * MprtInferModel: its arena, its buffers (parameters, every graph input and
 * every graph output, at static offsets) and `forward`, which runs every
 * node once. This file reads the weights and each input (.npy, checked
 * against the compiled dtype and shape), runs the forward pass and writes
 * the outputs asked for as .npy files.
 */
#include "mprt.h"
#include "infer.h"

static void mprt_describe(const MprtBuffer *b, char *buf, size_t n)
{
    char shape[160];
    mprt_shape_str(b->rank, b->shape, shape, sizeof shape);
    snprintf(buf, n, "%s %s", mprt_dtype_name(b->dtype), shape);
}

static void mprt_list(const MprtInferModel *m, int kind, const char *title)
{
    printf("%s\n", title);
    for (int i = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        if (b->kind != kind)
            continue;
        char what[200];
        mprt_describe(b, what, sizeof what);
        printf("  '%s'  %s\n", b->name, what);
    }
}

static void mprt_infer_usage(const MprtInferModel *m)
{
    printf("usage: %s --input NAME=FILE.npy ... [--output NAME=FILE.npy ...] [--weights FILE]\n"
           "\n"
           "Runs the forward pass of %s (compiled by mpcc %s --infer) once on CPU.\n"
           "\n"
           "  --input NAME=FILE   the graph input NAME, from a .npy file with exactly the\n"
           "                      dtype and shape it was compiled for (one per input)\n"
           "  --output NAME=FILE  write the graph output NAME to a .npy file; without any\n"
           "                      --output, every output is summarised on standard output\n"
           "  --weights FILE      the weights, safetensors (default %s, here or next to\n"
           "                      the program); a trainer's checkpoint works too\n"
           "  --help              this text\n"
           "\n", m->program, m->model_file, m->mpcc_version, m->weights_file);
    mprt_list(m, MPRT_INPUT, "Inputs:");
    mprt_list(m, MPRT_OUTPUT, "Outputs:");
}

/* NAME=FILE: the first '=' after which NAME is a buffer of this kind (names
 * may hold '=' themselves). */
static int mprt_find_named(const MprtInferModel *m, int kind, const char *opt, const char *arg,
                           const char **file)
{
    for (const char *eq = strchr(arg, '='); eq; eq = strchr(eq + 1, '='))
        for (int i = 0; i < m->nbuffers; i++) {
            const MprtBuffer *b = &m->buffers[i];
            if (b->kind == kind && strlen(b->name) == (size_t)(eq - arg) &&
                strncmp(b->name, arg, (size_t)(eq - arg)) == 0) {
                *file = eq + 1;
                return i;
            }
        }
    if (!strchr(arg, '='))
        mprt_die("%s expects NAME=FILE.npy, got '%s'; see --help", opt, arg);
    char names[1024];
    size_t k = 0;
    names[0] = 0;
    for (int i = 0; i < m->nbuffers && k < sizeof names; i++)
        if (m->buffers[i].kind == kind)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", k ? ", " : "",
                                  m->buffers[i].name);
    mprt_die("%s '%s': the model has no %s of that name (%s: %s); see --help", opt, arg,
             kind == MPRT_INPUT ? "input" : "output", kind == MPRT_INPUT ? "inputs" : "outputs",
             names);
}

static void mprt_infer_args(const MprtInferModel *m, int argc, char **argv, const char **files,
                            const char **weights, int *any_output)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            mprt_infer_usage(m);
            exit(0);
        }
        size_t len = strchr(o, '=') && strncmp(o, "--", 2) == 0 ? (size_t)(strchr(o, '=') - o)
                                                                 : strlen(o);
        if (o[len])
            v = o + len + 1;
        else if (i + 1 < argc)
            v = argv[++i];
        int kind = -1;
        if (len == 7 && strncmp(o, "--input", 7) == 0)
            kind = MPRT_INPUT;
        else if (len == 8 && strncmp(o, "--output", 8) == 0)
            kind = MPRT_OUTPUT;
        else if (len == 9 && strncmp(o, "--weights", 9) == 0) {
            if (!v)
                mprt_die("--weights needs a file; see --help");
            *weights = v;
            continue;
        } else
            mprt_die("unknown option '%s'; see --help", o);
        if (!v)
            mprt_die("%.*s needs NAME=FILE.npy; see --help", (int)len, o);
        const char *file;
        int k = mprt_find_named(m, kind, kind == MPRT_INPUT ? "--input" : "--output", v, &file);
        if (files[k])
            mprt_die("%s '%s' is given twice", kind == MPRT_INPUT ? "input" : "output",
                     m->buffers[k].name);
        files[k] = file;
        *any_output |= kind == MPRT_OUTPUT;
    }
    for (int i = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        char what[200];
        mprt_describe(b, what, sizeof what);
        if (b->kind == MPRT_INPUT && !files[i])
            mprt_die("no --input for '%s' (%s); give --input '%s=FILE.npy'", b->name, what,
                     b->name);
    }
}

/* One input: exactly the compiled dtype and shape. */
static void mprt_read_input(const MprtBuffer *b, const char *path)
{
    char err[512], what[200], got[200];
    MprtArray a;
    if (mprt_npy_load(path, &a, err, sizeof err) != 0)
        mprt_die("%s", err);
    int ok = a.dtype == b->dtype && a.rank == b->rank;
    for (int i = 0; ok && i < b->rank; i++)
        ok = a.shape[i] == b->shape[i];
    if (!ok) {
        mprt_describe(b, what, sizeof what);
        mprt_shape_str(a.rank, a.shape, got, sizeof got);
        mprt_die("%s: holds %s %s, but the model's input '%s' is %s (shapes are fixed when "
                 "mpcc compiles: -batch, --shapes)", path, mprt_dtype_name(a.dtype), got,
                 b->name, what);
    }
    if (b->dev >= 0)
        memcpy(mprt_slot(b, 0), a.data, b->nbytes);
    mprt_array_free(&a);
}

/* Without --output: each output's dtype, shape and first values. */
static void mprt_summarise(const MprtBuffer *b)
{
    char what[200];
    mprt_describe(b, what, sizeof what);
    printf("'%s'  %s:", b->name, what);
    const unsigned char *p = mprt_slot(b, 0);
    size_t n = b->nbytes / mprt_dtype_size(b->dtype);
    for (size_t i = 0; i < n && i < 8; i++)
        switch (b->dtype) {
        case MPRT_F32: printf(" %.6g", ((const float *)p)[i]); break;
        case MPRT_I64: printf(" %lld", (long long)((const int64_t *)p)[i]); break;
        case MPRT_I32: printf(" %d", ((const int32_t *)p)[i]); break;
        default: printf(" %u", p[i]); break;
        }
    printf("%s\n", n > 8 ? " ..." : "");
}

static int mprt_infer_main(const MprtInferModel *m, int argc, char **argv)
{
    mprt_program = m->program;
    const char **files = calloc((size_t)m->nbuffers + 1, sizeof *files);
    const char *weights = NULL;
    int any_output = 0;
    if (!files)
        mprt_die("out of memory");
    mprt_infer_args(m, argc, argv, files, &weights, &any_output);
    mprt_arenas = calloc((size_t)m->ndev, sizeof *mprt_arenas);
    if (!mprt_arenas)
        mprt_die("out of memory");
    for (int d = 0; d < m->ndev; d++)
        if (!(mprt_arenas[d] = calloc(1, m->arena_bytes[d] ? m->arena_bytes[d] : 1)))
            mprt_die("out of memory: %s needs %zu bytes (the memory plan's peak)",
                     m->device_names[d], m->arena_bytes[d]);
    int params = 0;
    for (int i = 0; i < m->nbuffers; i++)
        params |= m->buffers[i].kind == MPRT_PARAM;
    if (params)
        mprt_load_tensors(m->buffers, m->nbuffers, m->model_file,
                          weights ? weights : mprt_default_weights(m->weights_file),
                          1 << MPRT_PARAM, NULL);
    mprt_load_consts(m->buffers, m->nbuffers, m->model_file, m->weights_file);
    m->zero_state();
    for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].kind == MPRT_INPUT)
            mprt_read_input(&m->buffers[i], files[i]);
    m->forward();
    for (int i = 0; i < m->nbuffers; i++) {
        const MprtBuffer *b = &m->buffers[i];
        if (b->kind != MPRT_OUTPUT)
            continue;
        if (!any_output) {
            mprt_summarise(b);
            continue;
        }
        if (!files[i])
            continue;
        MprtArray a = {b->dtype, b->rank, {0}, mprt_slot(b, 0), b->nbytes};
        memcpy(a.shape, b->shape, sizeof a.shape);
        char err[512];
        if (mprt_npy_save(files[i], &a, err, sizeof err) != 0)
            mprt_die("%s", err);
    }
    for (int d = 0; d < m->ndev; d++)
        free(mprt_arenas[d]);
    free(mprt_arenas);
    free(files);
    return 0;
}
