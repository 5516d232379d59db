/* test_dnnl_pool.c — max pooling through oneDNN (runtime/cpu_dnnl.c's
 * mprt_dnnl_maxpool) gives runtime/cpu.c's mprt_maxpool's output and ONNX
 * Indices bit for bit: 1-D, 2-D and 3-D windows, strides, pads, dilations,
 * ceil mode's short last window, a window of more than 255 taps, ties (the
 * first maximum in window order wins), NaN (which sticks, as in PyTorch;
 * oneDNN's max would pass over it) and no Indices at all. The inputs are
 * small integers, so ties are common. */
#define _POSIX_C_SOURCE 200809L
#define MPRT_GOMP 1   /* as a trainer that links oneDNN */
#include "program.h"
#include "kernel.h"
#include "state.c"
#include "pool.c"
#include "cpu.c"
#include "cpu_dnnl.c"

#include "check.h"

/* CHECK, saying which case failed. */
#define EXPECT(cond, ...)                                                    \
    do {                                                                     \
        CHECK(cond);                                                         \
        if (!(cond)) {                                                       \
            fprintf(stderr, "  ");                                           \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
        }                                                                    \
    } while (0)

/* N, C, D, H, W, KD, KH, KW, stride, dilation, pad (begin), extra (end,
 * as ceil mode adds) */
typedef struct Case {
    const char *name;
    int N, C, D, H, W, KD, KH, KW, s, dil, pad, extra;
} Case;

static const Case cases[] = {
    {"2x2 stride 2", 2, 3, 1, 8, 8, 1, 2, 2, 2, 1, 0, 0},
    {"3x3 stride 2 pad 1", 2, 4, 1, 9, 9, 1, 3, 3, 2, 1, 1, 0},
    {"3x3 stride 2 ceil mode", 1, 2, 1, 8, 8, 1, 3, 3, 2, 1, 0, 1},
    {"3x3 stride 1 dilation 2 pad 2", 1, 3, 1, 7, 7, 1, 3, 3, 1, 2, 2, 0},
    {"1-D 3 stride 2 pad 1", 2, 3, 1, 1, 11, 1, 1, 3, 2, 1, 1, 0},
    {"3-D 2x2x2 stride 2", 1, 2, 4, 4, 4, 2, 2, 2, 2, 1, 0, 0},
    {"17x17 global (289 taps)", 1, 2, 1, 17, 17, 1, 17, 17, 1, 1, 0, 0},
};

static int out_size(int in, int k, int s, int dil, int pad, int extra)
{
    return (in + 2 * pad + extra - ((k - 1) * dil + 1)) / s + 1;
}

static MprtPool pool_of(const Case *c)
{
    int od = c->KD > 1 ? out_size(c->D, c->KD, c->s, c->dil, c->pad, c->extra) : 1;
    int oh = c->KH > 1 || c->H > 1 ? out_size(c->H, c->KH, c->KH > 1 ? c->s : 1,
                                              c->KH > 1 ? c->dil : 1, c->KH > 1 ? c->pad : 0,
                                              c->KH > 1 ? c->extra : 0) : 1;
    int ow = out_size(c->W, c->KW, c->s, c->dil, c->pad, c->extra);
    int three = c->KD > 1, two = c->KH > 1;
    return (MprtPool){c->N, c->C, c->D, c->H, c->W, od, oh, ow, c->KD, c->KH, c->KW,
                      three ? c->s : 1, two ? c->s : 1, c->s, three ? c->dil : 1,
                      two ? c->dil : 1, c->dil, three ? c->pad : 0, two ? c->pad : 0, c->pad,
                      0, 0, 0, 0};
}

static int same_bits(const float *a, const float *b, long n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

int main(void)
{
    int nc = (int)(sizeof cases / sizeof cases[0]);
    MprtDnnlPool *table = calloc((size_t)nc, sizeof *table);
    for (int i = 0; i < nc; i++)
        table[i] = (MprtDnnlPool){0, cases[i].name, pool_of(&cases[i])};
    size_t scratch = 0;
    mprt_dnnl_start(NULL, 0, table, nc, 1, &scratch);
    CHECK(scratch > 0);
    float *work = malloc(scratch + 64);
    for (int i = 0; i < nc; i++) {
        const MprtPool *p = &table[i].p;
        long n = (long)p->N * p->C * p->D * p->H * p->W, m = (long)p->N * p->C * p->OD * p->OH * p->OW;
        float *x = malloc((size_t)n * sizeof *x), *y0 = malloc((size_t)m * sizeof *y0),
              *y1 = malloc((size_t)m * sizeof *y1);
        int64_t *i0 = malloc((size_t)m * sizeof *i0), *i1 = malloc((size_t)m * sizeof *i1);
        for (int nan = 0; nan < 2; nan++) {
            for (long k = 0; k < n; k++)
                x[k] = (float)((k * 7919 + i) % 5) - 2.0f;   /* -2..2: many ties */
            if (nan)
                x[n / 3] = NAN, x[n / 2] = NAN;
            mprt_maxpool(p, x, y0, i0);
            mprt_dnnl_maxpool(i, x, y1, i1, work);
            EXPECT(same_bits(y0, y1, m), "%s%s: Y differs", cases[i].name,
                      nan ? " (NaN)" : "");
            EXPECT(memcmp(i0, i1, (size_t)m * sizeof *i0) == 0, "%s%s: Indices differ",
                      cases[i].name, nan ? " (NaN)" : "");
            memset(y1, 0, (size_t)m * sizeof *y1);
            mprt_dnnl_maxpool(i, x, y1, NULL, work);
            EXPECT(same_bits(y0, y1, m), "%s%s: Y differs without Indices", cases[i].name,
                      nan ? " (NaN)" : "");
        }
        EXPECT(mprt_dnnl_pool_prims[i].prim != NULL, "%s: oneDNN not used", cases[i].name);
        free(x), free(y0), free(y1), free(i0), free(i1);
    }
    free(work);
    return check_summary("dnnl_pool");
}
