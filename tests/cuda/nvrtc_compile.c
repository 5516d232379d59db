/* nvrtc_compile.c — compiles templates/kernels.cu with NVRTC as the CUDA
 * trainer does at start-up (no GPU needed), for sm_80 and sm_90, and checks
 * that every kernel runtime/cuda_ops.c launches is in the module.
 *
 *   nvrtc_compile templates/kernels.cu runtime/cuda_ops.c
 *
 * Launch sites name their kernel as a literal, the first argument of one
 * of cuda_ops.c's launchers: mprt_cu_each("relu", ...) launches mprt_k_relu. Prints the counts; exits 1 on a compile error (with
 * NVRTC's log) or a missing kernel. */
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

/* Compiles src for `arch` ("sm_80" gives CUBIN, "compute_80" PTX); returns
 * the image and its size, or exits with the log. */
static char *compile(const char *src, const char *arch, int cubin, size_t *size)
{
    nvrtcProgram prog;
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt};   /* NVRTC's defaults otherwise, as the trainer's */
    NVRTC(nvrtcCreateProgram(&prog, src, "kernels.cu", 0, NULL, NULL));
    nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
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

static int contains(const char *img, size_t n, const char *s)
{
    size_t k = strlen(s) + 1;   /* with its terminating NUL, as in a string table */
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(img + i, s, k) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: nvrtc_compile kernels.cu cuda_ops.c\n");
        return 2;
    }
    char *src = slurp(argv[1]), *ops = slurp(argv[2]);
    int major, minor;
    NVRTC(nvrtcVersion(&major, &minor));

    /* the kernels cuda_ops.c launches */
    static char names[512][64];
    int nnames = 0;
    static const char *const launchers[] = {"mprt_cu_launch(\"", "mprt_cu_each(\"",
                                            "mprt_cu_rows(\"", "mprt_cu_one(\"",
                                            "mprt_cu_counting(\""};
    for (size_t l = 0; l < sizeof launchers / sizeof *launchers; l++) {
        const char *key = launchers[l];
        for (const char *p = strstr(ops, key); p; p = strstr(p + 1, key)) {
            if (p > ops && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z')))
                continue;   /* part of a longer name */
            const char *b = p + strlen(key), *e = strchr(b, '"');
            if (!e || e - b >= 56 || nnames == 512) {
                fprintf(stderr, "nvrtc_compile: %s: a launch name is malformed\n", argv[2]);
                return 1;
            }
            char name[64];
            snprintf(name, sizeof name, "mprt_k_%.*s", (int)(e - b), b);
            int seen = 0;
            for (int i = 0; i < nnames; i++)
                seen |= strcmp(names[i], name) == 0;
            if (!seen)
                strcpy(names[nnames++], name);
        }
    }
    if (nnames == 0) {
        fprintf(stderr, "nvrtc_compile: %s launches no kernel\n", argv[2]);
        return 1;
    }

    /* PTX names every entry: count them, and check the launched ones */
    size_t n;
    char *ptx = compile(src, "compute_80", 0, &n);
    int entries = 0, missing = 0;
    for (const char *p = strstr(ptx, ".entry mprt_k_"); p; p = strstr(p + 1, ".entry mprt_k_"))
        entries++;
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
        printf("nvrtc %d.%d: %s CUBIN, %zu bytes\n", major, minor, archs[a], n);
        free(img);
    }
    printf("nvrtc: %d kernels in kernels.cu, %d launched by cuda_ops.c%s\n", entries, nnames,
           missing ? ", some missing" : ", all present");
    free(ptx);
    free(src);
    free(ops);
    return missing ? 1 : 0;
}
