/* nvrtc_compile.c — compiles runtime/kernels.cu with NVRTC as the CUDA
 * trainer does at start-up (no GPU needed; the options of runtime/cuda.c's
 * mprt_cu_cubin), for sm_80 and sm_90, and checks that every kernel
 * runtime/cuda_ops.c launches is in the module.
 *
 *   nvrtc_compile runtime/kernels.cu runtime/cuda_ops.c runtime/cuda.c runtime/opcodes.h
 *
 * opcodes.h is the program's one header, by the name kernels.cu includes
 * it by, as the trainer hands it to NVRTC.
 *
 * Launch sites name their kernels as literals, the leading arguments of
 * one of cuda_ops.c's launchers: mprt_cu_each("relu", ...) launches
 * mprt_k_relu, mprt_cu_reduce("sum_to", "sum_to_rows", ...) one of two. A
 * literal of cuda_ops.c that reads like a kernel name (lower case, digits
 * and '_', not mprt_...) but is no launcher's argument is an error too: a
 * new launcher must be listed here. Prints the counts and the kernels
 * nothing launches; exits 1 on a compile error or warning (with NVRTC's
 * log) or a missing kernel. */
#include <nvrtc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: cannot read\n", path);
        exit(1);
    }
    s[n] = 0;
    fclose(f);
    return s;
}

#define NVRTC(call)                                                                    \
    do {                                                                               \
        nvrtcResult r_ = (call);                                                       \
        if (r_ != NVRTC_SUCCESS) {                                                     \
            fprintf(stderr, "nvrtc_compile: %s: %s\n", #call, nvrtcGetErrorString(r_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* kernels.cu's header: opcodes.h's text and the name it is included by. */
static const char *header, *header_name = "opcodes.h";

/* The trainer's NVRTC options besides the architecture: the string
 * literals of cuda.c's `mprt_cu_opts[] = {...}`. */
static char trainer_opts[8][64];
static int ntrainer_opts;

static void read_trainer_opts(const char *cuda, const char *path)
{
    const char *p = strstr(cuda, "opts[] = {"), *end = p ? strchr(p, '}') : NULL;
    if (!end) {
        fprintf(stderr, "nvrtc_compile: %s: no NVRTC options (opts[] = {...})\n", path);
        exit(1);
    }
    for (p = strchr(p, '"'); p && p < end; p = strchr(p + 1, '"')) {
        const char *e = strchr(p + 1, '"');
        if (ntrainer_opts == 8 || e - p - 1 >= 64) {
            fprintf(stderr, "nvrtc_compile: %s: NVRTC options too many or too long\n", path);
            exit(1);
        }
        snprintf(trainer_opts[ntrainer_opts++], 64, "%.*s", (int)(e - p - 1), p + 1);
        p = e;
    }
}

/* Compiles src for `arch` ("sm_80" gives CUBIN, "compute_80" PTX) with the
 * trainer's options; returns the image and its size, or exits with the
 * log. */
static char *compile(const char *src, const char *arch, int cubin, size_t *size)
{
    nvrtcProgram prog;
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[9] = {opt};
    for (int i = 0; i < ntrainer_opts; i++)
        opts[1 + i] = trainer_opts[i];
    NVRTC(nvrtcCreateProgram(&prog, src, "kernels.cu", 1, &header, &header_name));
    nvrtcResult r = nvrtcCompileProgram(prog, 1 + ntrainer_opts, opts);
    size_t loglen = 0;
    NVRTC(nvrtcGetProgramLogSize(prog, &loglen));
    char *log = malloc(loglen + 1);
    NVRTC(nvrtcGetProgramLog(prog, log));
    if (r != NVRTC_SUCCESS || (loglen > 1 && strstr(log, "warning"))) {
        fprintf(stderr, "nvrtc_compile: kernels.cu for %s: %s\n%s\n", arch,
                nvrtcGetErrorString(r), log);
        exit(1);
    }
    free(log);
    char *img;
    if (cubin) {
        NVRTC(nvrtcGetCUBINSize(prog, size));
        img = malloc(*size + 1);
        NVRTC(nvrtcGetCUBIN(prog, img));
    } else {
        NVRTC(nvrtcGetPTXSize(prog, size));
        img = malloc(*size + 1);
        NVRTC(nvrtcGetPTX(prog, img));
    }
    img[*size] = 0;
    NVRTC(nvrtcDestroyProgram(&prog));
    return img;
}

/* A compile error is reported at its line of runtime/kernels.cu: the
 * name the trainer gives the program (cuda.c's nvrtcCreateProgram) and the
 * line NVRTC's log names, for the source with one bad line appended. */
static int error_location(const char *src, const char *cuda, const char *cuda_path)
{
    const char *name = "runtime/kernels.cu";
    char call[128];
    snprintf(call, sizeof call, "nvrtcCreateProgram(&prog, source, \"%s\"", name);
    if (!strstr(cuda, call)) {
        fprintf(stderr, "nvrtc_compile: %s does not name its program %s\n", cuda_path, name);
        return 1;
    }
    int line = 1;
    for (const char *p = src; *p; p++)
        line += *p == '\n';
    size_t n = strlen(src);
    char *bad = malloc(n + 64);
    snprintf(bad, n + 64, "%s%sint mprt_broken = ;\n", src, n && src[n - 1] != '\n' ? "\n" : "");
    line += n && src[n - 1] != '\n';
    nvrtcProgram prog;
    NVRTC(nvrtcCreateProgram(&prog, bad, name, 1, &header, &header_name));
    const char *opts[] = {"--gpu-architecture=sm_80"};
    nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
    size_t loglen = 0;
    NVRTC(nvrtcGetProgramLogSize(prog, &loglen));
    char *log = malloc(loglen + 1), want[64];
    NVRTC(nvrtcGetProgramLog(prog, log));
    snprintf(want, sizeof want, "%s(%d): error", name, line);
    int ok = r != NVRTC_SUCCESS && strstr(log, want);
    printf("nvrtc: a bad line %d of %s: %s\n", line, name,
           ok ? "the log names it" : "NOT named by the log");
    if (!ok)
        fprintf(stderr, "nvrtc_compile: want '%s' in the log:\n%s\n", want, log);
    NVRTC(nvrtcDestroyProgram(&prog));
    free(log);
    free(bad);
    return !ok;
}

static int contains(const char *img, size_t n, const char *s)
{
    size_t k = strlen(s) + 1;   /* with its terminating NUL, as in a string table */
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(img + i, s, k) == 0)
            return 1;
    return 0;
}

static char names[512][64];
static int nnames;

static void add_name(const char *b, const char *e, const char *path)
{
    char name[64];
    if (e - b >= 56 || nnames == 512) {
        fprintf(stderr, "nvrtc_compile: %s: a launch name is malformed\n", path);
        exit(1);
    }
    snprintf(name, sizeof name, "mprt_k_%.*s", (int)(e - b), b);
    for (int i = 0; i < nnames; i++)
        if (strcmp(names[i], name) == 0)
            return;
    strcpy(names[nnames++], name);
}

static int ident_char(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t')
        p++;
    return p;
}

/* The kernels cuda_ops.c launches: the leading literal arguments of each
 * launcher's calls. */
static void launched(const char *ops, const char *path)
{
    static const char *const launchers[] = {"mprt_cu_launch(", "mprt_cu_each(", "mprt_cu_rows(",
                                            "mprt_cu_cols(", "mprt_cu_one(", "mprt_cu_counting(",
                                            "mprt_cu_reduce(", "mprt_cu_channels(",
                                            "mprt_cu_convert("};
    for (size_t l = 0; l < sizeof launchers / sizeof *launchers; l++) {
        const char *key = launchers[l];
        for (const char *p = strstr(ops, key); p; p = strstr(p + 1, key)) {
            if (p > ops && ident_char(p[-1]))
                continue;   /* part of a longer name */
            const char *a = skip_space(p + strlen(key));
            while (*a == '"') {
                const char *e = strchr(a + 1, '"');
                if (!e) {
                    fprintf(stderr, "nvrtc_compile: %s: an unterminated string\n", path);
                    exit(1);
                }
                add_name(a + 1, e, path);
                a = skip_space(e + 1);
                if (*a != ',')
                    break;
                a = skip_space(a + 1);
            }
        }
    }
}

/* Every literal of cuda_ops.c that reads like a kernel name is launched. */
static int unlaunched_literals(const char *ops, const char *path)
{
    int bad = 0;
    for (const char *p = strchr(ops, '"'); p; p = strchr(p + 1, '"')) {
        const char *e = strchr(p + 1, '"'), *c = p + 1;
        if (!e)
            break;
        while (c < e && (*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')))
            c++;
        if (c == e && e > p + 1 && p[1] >= 'a' && p[1] <= 'z' && strncmp(p + 1, "mprt_", 5)) {
            char name[64];
            snprintf(name, sizeof name, "mprt_k_%.*s", (int)(e - p - 1), p + 1);
            int seen = 0;
            for (int i = 0; i < nnames; i++)
                seen |= strcmp(names[i], name) == 0;
            if (!seen) {
                fprintf(stderr, "nvrtc_compile: %s: \"%.*s\" reads like a kernel name but no "
                        "known launcher takes it (add the launcher to this test)\n", path,
                        (int)(e - p - 1), p + 1);
                bad++;
            }
        }
        p = e;
    }
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: nvrtc_compile kernels.cu cuda_ops.c cuda.c opcodes.h\n");
        return 2;
    }
    char *src = slurp(argv[1]), *ops = slurp(argv[2]), *cuda = slurp(argv[3]);
    header = slurp(argv[4]);
    int major, minor;
    NVRTC(nvrtcVersion(&major, &minor));
    read_trainer_opts(cuda, argv[3]);
    launched(ops, argv[2]);
    if (nnames == 0) {
        fprintf(stderr, "nvrtc_compile: %s launches no kernel\n", argv[2]);
        return 1;
    }
    int missing = unlaunched_literals(ops, argv[2]);
    missing += error_location(src, cuda, argv[3]);

    /* PTX names every entry: count them, and check the launched ones */
    size_t n;
    char *ptx = compile(src, "compute_80", 0, &n);
    int entries = 0, idle = 0;
    for (const char *p = strstr(ptx, ".entry mprt_k_"); p; p = strstr(p + 1, ".entry mprt_k_")) {
        const char *b = p + strlen(".entry "), *e = b;
        while (ident_char(*e))
            e++;
        int seen = 0;
        for (int i = 0; i < nnames; i++)
            seen |= strlen(names[i]) == (size_t)(e - b) && strncmp(names[i], b, e - b) == 0;
        if (!seen)
            printf("%s%.*s", idle++ ? ", " : "nvrtc: not launched by cuda_ops.c: ", (int)(e - b),
                   b);
        entries++;
    }
    if (idle)
        printf("\n");
    for (int i = 0; i < nnames; i++) {
        char pat[80];
        snprintf(pat, sizeof pat, ".entry %.63s(", names[i]);
        if (!strstr(ptx, pat)) {
            fprintf(stderr, "nvrtc_compile: %s launches %s, which kernels.cu does not define\n",
                    argv[2], names[i]);
            missing++;
        }
    }
    /* and the machine code for the GPUs the trainer targets */
    const char *archs[] = {"sm_80", "sm_90"};
    for (int a = 0; a < 2; a++) {
        char *img = compile(src, archs[a], 1, &n);
        for (int i = 0; i < nnames; i++)
            if (!contains(img, n, names[i])) {
                fprintf(stderr, "nvrtc_compile: %s CUBIN lacks %s\n", archs[a], names[i]);
                missing++;
            }
        printf("nvrtc %d.%d:", major, minor);
        for (int i = 0; i < ntrainer_opts; i++)
            printf(" %s", trainer_opts[i]);
        printf(", %s CUBIN, %zu bytes\n", archs[a], n);
        free(img);
    }
    printf("nvrtc: %d kernels in kernels.cu, %d launched by cuda_ops.c%s\n", entries, nnames,
           missing ? ", some missing" : ", all present");
    free(ptx);
    free(src);
    free(ops);
    free(cuda);
    return missing ? 1 : 0;
}
