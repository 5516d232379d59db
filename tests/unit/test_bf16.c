/* test_bf16.c — the CPU kernels of bf16 storage (--precision=bf16,
 * runtime/cpu.c) against PyTorch's conversion of the same float32 values
 * (tests/unit/bf16_cases.py): mprt_bf16_narrow gives PyTorch's bits,
 * round to nearest even, with NaN a NaN; mprt_bf16_widen gives those bits
 * back as the float32 they are; mprt_bf16_round is the two in one. On 1
 * and 3 threads (the cases are more than two pieces of the grain).
 * Usage: test_bf16 CASES.bin */
#define _POSIX_C_SOURCE 200809L
#include "program.h"
#include "kernel.h"
#include "state.c"
#include "pool.c"
#include "cpu.c"
#include "cpu_move.c"
#include "cpu_math.c"

#include "check.h"

static int check_run(long n, const uint32_t *xb, const uint16_t *want)
{
    float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w);
    float *r = malloc((size_t)n * sizeof *r);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    memcpy(x, xb, (size_t)n * sizeof *x);
    mprt_bf16_narrow(n, x, h);
    mprt_bf16_widen(n, h, w);
    mprt_bf16_round(n, x, r);
    int bad = 0;
    for (long i = 0; i < n && bad < 10; i++) {
        uint32_t wb, rb;
        memcpy(&wb, &w[i], 4);
        memcpy(&rb, &r[i], 4);
        int nan = isnan(x[i]);
        int ok = nan ? (h[i] & 0x7fffu) > 0x7f80u && isnan(w[i]) && isnan(r[i])
                      : h[i] == want[i] && wb == (uint32_t)want[i] << 16 && rb == wb;
        if (!ok) {
            fprintf(stderr, "  0x%08x: narrow 0x%04x, torch 0x%04x; widen 0x%08x, round 0x%08x\n",
                    xb[i], h[i], want[i], wb, rb);
            bad++;
        }
    }
    free(x), free(w), free(r), free(h);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_bf16 CASES.bin\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "test_bf16: %s: cannot open\n", argv[1]);
        return 2;
    }
    long cap = 1 << 16, n = 0;
    uint32_t *xb = malloc((size_t)cap * sizeof *xb);
    uint16_t *want = malloc((size_t)cap * sizeof *want);
    unsigned char rec[8];
    while (n < cap && fread(rec, 1, 8, f) == 8) {
        memcpy(&xb[n], rec, 4);
        memcpy(&want[n], rec + 4, 2);
        n++;
    }
    fclose(f);
    CHECK(n > 2 * 16384);
    if (n <= 2 * 16384)
        return check_summary("test_bf16");
    int bad = 0;
    for (int t = 1; t <= 3; t += 2) {
        mprt_threads = t;
        int b = check_run(n, xb, want);
        printf("%ld values on %d thread(s): %d differ from torch\n", n, t, b);
        bad += b;
    }
    free(xb), free(want);
    CHECK(bad == 0);
    return check_summary("test_bf16");
}
