/* emulate_main.c — the CUDA twins that run on NVRTC kernels against their
 * CPU kernels, bit for bit, with the kernels of runtime/kernels.cu run on
 * the host (emulate_device.h, emulate_host.h): the twin's arguments, the
 * structs it passes by value, the kernel's indexing and its float
 * operation order. One thread per block, so it says nothing of races or
 * of the order of a parallel reduction (block_sum), nor of cuBLAS and
 * cuDNN. Left out: Gather's gradient (its kernel needs whole warps) and
 * channel_sum (the CPU sums with four accumulators). The direct
 * convolution kernels (asymmetric pads, where cuDNN cannot go) sum in
 * another order than the CPU's BLAS GEMMs: they are checked within 1e-5
 * of the sum of their terms' magnitudes instead. The fused elementwise
 * chain is checked twice: the CPU's mprt_ew_chain against the unfused
 * kernels run one step at a time, and its twin against it. Pasted after
 * runtime/cuda_ops.c by tests/cuda/emulate.py; prints one line per kernel
 * checked. */

static int failures, checks;
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static float frand(float lo, float hi)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)(rng_state >> 40) / 16777216.0f;
}

/* n floats in [lo, hi), or small integers (ties) when lo == hi == 0 */
static float *fvec(long n, float lo, float hi)
{
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (long i = 0; i < n; i++)
        v[i] = lo == hi ? (float)(int)frand(-3.0f, 3.0f) : frand(lo, hi);
    return v;
}

static float *fzero(long n)
{
    return calloc((size_t)(n ? n : 1), sizeof(float));
}

static void *copy_of(const void *p, size_t bytes)
{
    void *q = malloc(bytes ? bytes : 1);
    memcpy(q, p, bytes);
    return q;
}

/* Whether the 4-byte words at i of a and b are both float NaNs. */
static int both_nan(const unsigned char *a, const unsigned char *b, size_t i)
{
    float x, y;
    memcpy(&x, a + i, 4);
    memcpy(&y, b + i, 4);
    return x != x && y != y;
}

/* Whether a and b hold the same bits, where a NaN equals any NaN: which
 * operand's NaN x86 keeps (and so its sign) is the register allocator's
 * choice, and a GPU's NaN is canonical. */
static int same_bits(const unsigned char *a, const unsigned char *b, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 4) {
        size_t n = bytes - i < 4 ? bytes - i : 4;
        if (memcmp(a + i, b + i, n) != 0 && !(n == 4 && both_nan(a, b, i)))
            return 0;
    }
    return 1;
}

/* The CPU's result and the twin's, bit for bit (NaNs as NaNs). */
static void same(const char *what, const void *cpu, const void *cu, size_t bytes)
{
    checks++;
    if (same_bits(cpu, cu, bytes))
        return;
    failures++;
    const unsigned char *a = cpu, *b = cu;
    size_t i = 0;
    while (i + 4 <= bytes && (memcmp(a + i, b + i, 4) == 0 || both_nan(a, b, i)))
        i += 4;
    float x = 0, y = 0;
    memcpy(&x, a + i, bytes - i < 4 ? bytes - i : 4);
    memcpy(&y, b + i, bytes - i < 4 ? bytes - i : 4);
    fprintf(stderr, "emulate: %s: differs at byte %zu (as floats: CPU %.9g, CUDA %.9g)\n", what,
            i, (double)x, (double)y);
}

static void report(const char *kernel)
{
    printf("emulate: %-16s checked\n", kernel);
}

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

static void test_unary(void)
{
    const long n = 997;
    float *x = fvec(n, -6.0f, 6.0f);
    float special[] = {0.0f, -0.0f, 3.0f, -3.0f, 1.0f, -1.0f, 2.0f, 0.5f, NAN, INFINITY};
    memcpy(x, special, sizeof special);
    static const float pq[][2] = {[MPRT_HARD_SIGMOID] = {0.2f, 0.5f},
                                  [MPRT_LEAKY_RELU] = {0.01f, 0.0f},
                                  [MPRT_ELU] = {1.5f, 0.0f},
                                  [MPRT_SELU] = {1.67326319f, 1.05070102f},
                                  [MPRT_GELU] = {0.0f, 1.0f},
                                  [MPRT_CLIP] = {-1.0f, 2.0f},
                                  [MPRT_CLIP + 1] = {0.0f, 0.0f}};
    for (int op = MPRT_ERF; op <= MPRT_CLIP + 1; op++) {
        int code = op > MPRT_CLIP ? MPRT_GELU : op;   /* the last: Gelu with erf */
        float p = pq[op][0], q = pq[op][1], *y = fzero(n), *cy = fzero(n);
        float *dy = fvec(n, -1.0f, 1.0f), *dx = fzero(n), *cdx = fzero(n);
        char what[64];
        mprt_unary(code, n, p, q, x, y);
        mprt_cu_unary(code, n, p, q, x, cy);
        snprintf(what, sizeof what, "unary %d (q %g)", code, (double)q);
        same(what, y, cy, (size_t)n * 4);
        mprt_unary_grad(code, n, p, q, dy, x, y, dx);
        mprt_cu_unary_grad(code, n, p, q, dy, x, y, cdx);
        snprintf(what, sizeof what, "unary_grad %d (q %g)", code, (double)q);
        same(what, dx, cdx, (size_t)n * 4);
        free(y), free(cy), free(dy), free(dx), free(cdx);
    }
    free(x);
    report("unary");
    report("unary_grad");
}

static void test_binary(void)
{
    long shape[] = {2, 3, 4}, sa[] = {12, 4, 1}, sb[] = {0, 1, 0};
    float *a = fvec(24, -2.0f, 2.0f), *b = fvec(3, 0.5f, 2.0f), *apos = fvec(24, 0.1f, 3.0f);
    int ops[] = {MPRT_ADD, MPRT_SUB, MPRT_MUL, MPRT_DIV, MPRT_POW, MPRT_PRELU};
    for (int k = 0; k < N_OF(ops); k++) {
        const float *x = ops[k] == MPRT_POW ? apos : a;
        float y[24], cy[24];
        mprt_binary(ops[k], 3, shape, x, sa, b, sb, y);
        mprt_cu_binary(ops[k], 3, shape, x, sa, b, sb, cy);
        same("binary", y, cy, sizeof y);
    }
    float dy[24], out[24], cout[24];
    for (int i = 0; i < 24; i++)
        dy[i] = frand(-1, 1);
    for (int wrt = 0; wrt < 2; wrt++) {
        mprt_pow_grad(wrt, 3, shape, dy, apos, sa, b, sb, apos, out);
        mprt_cu_pow_grad(wrt, 3, shape, dy, apos, sa, b, sb, apos, cout);
        same("pow_grad", out, cout, sizeof out);
        mprt_prelu_grad(wrt, 3, shape, dy, a, b, sb, out);
        mprt_cu_prelu_grad(wrt, 3, shape, dy, a, b, sb, cout);
        same("prelu_grad", out, cout, sizeof out);
    }
    free(a), free(b), free(apos);
    report("binary");
    report("pow_grad");
    report("prelu_grad");
}

static void test_nary(void)
{
    long shape[] = {2, 3, 4}, s0[] = {12, 4, 1}, s1[] = {0, 1, 0}, s2[] = {0, 0, 0};
    float *x0 = fvec(24, 0, 0), *x1 = fvec(3, 0, 0), *x2 = fvec(1, 0, 0);
    x0[5] = NAN;
    const float *const x[] = {x0, x1, x2};
    const long *const sx[] = {s0, s1, s2};
    int ops[] = {MPRT_ADD, MPRT_MIN, MPRT_MAX};
    for (int k = 0; k < 3; k++) {
        float y[24], cy[24], dy[24], out[24], cout[24];
        mprt_nary(ops[k], 3, 3, shape, x, sx, 1.0f / 3, y);
        mprt_cu_nary(ops[k], 3, 3, shape, x, sx, 1.0f / 3, cy);
        same("nary", y, cy, sizeof y);
        if (ops[k] == MPRT_ADD)
            continue;
        mprt_nary(ops[k], 3, 3, shape, x, sx, 1.0f, y);
        for (int i = 0; i < 24; i++)
            dy[i] = frand(-1, 1);
        for (int wrt = 0; wrt < 3; wrt++) {
            mprt_minmax_grad(wrt, 3, 3, shape, x, sx, dy, y, out);
            mprt_cu_minmax_grad(wrt, 3, 3, shape, x, sx, dy, y, cout);
            same("minmax_grad", out, cout, sizeof out);
        }
    }
    float y[24], cy[24];   /* Expand: one operand */
    mprt_nary(MPRT_ADD, 1, 3, shape, x + 1, sx + 1, 1.0f, y);
    mprt_cu_nary(MPRT_ADD, 1, 3, shape, x + 1, sx + 1, 1.0f, cy);
    same("nary (expand)", y, cy, sizeof y);
    float s[24], cs[24];
    mprt_sum(24, 1, x, s);
    mprt_cu_sum(24, 1, x, cs);
    same("sum", s, cs, sizeof s);
    free(x0), free(x1), free(x2);
    report("nary");
    report("minmax_grad");
    report("sum");
}

static void test_compare(void)
{
    long shape[] = {3, 5}, sa[] = {5, 1}, sb[] = {0, 1};
    float fa[15], fb[5];
    int64_t ia[15], ib[5];
    uint8_t ba[15], bb[5];
    for (int i = 0; i < 15; i++)
        fa[i] = (float)(int)frand(-2, 2), ia[i] = (int64_t)frand(-3, 3) * 1000000007LL,
        ba[i] = frand(0, 1) < 0.5f;
    for (int i = 0; i < 5; i++)
        fb[i] = (float)(int)frand(-2, 2), ib[i] = (int64_t)frand(-3, 3) * 1000000007LL,
        bb[i] = frand(0, 1) < 0.5f;
    fa[3] = NAN;
    const void *as[] = {fa, ia, ba}, *bs[] = {fb, ib, bb};
    for (int type = MPRT_ELEM_F32; type <= MPRT_ELEM_BOOL; type++)
        for (int op = MPRT_EQUAL; op <= MPRT_XOR; op++) {
            uint8_t y[15], cy[15];
            mprt_compare(op, type, 2, shape, as[type], sa, bs[type], sb, y);
            mprt_cu_compare(op, type, 2, shape, as[type], sa, bs[type], sb, cy);
            same("compare", y, cy, sizeof y);
        }
    uint8_t y[15], cy[15];
    mprt_not(15, ba, y);
    mprt_cu_not(15, ba, cy);
    same("not", y, cy, sizeof y);
    report("compare");
    report("not");
}

/* Element size of an MPRT_ELEM_* type, and v stored as one. */
static size_t elem_size(int type)
{
    switch (type) {
    case MPRT_ELEM_F64: case MPRT_ELEM_I64: return 8;
    case MPRT_ELEM_F32: case MPRT_ELEM_I32: return 4;
    case MPRT_ELEM_I16: return 2;
    default: return 1;
    }
}

static void elem_store(int type, void *p, long i, double v)
{
    switch (type) {
    case MPRT_ELEM_F32: ((float *)p)[i] = (float)v; break;
    case MPRT_ELEM_F64: ((double *)p)[i] = v; break;
    case MPRT_ELEM_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case MPRT_ELEM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case MPRT_ELEM_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case MPRT_ELEM_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}

static const int elem_types[] = {MPRT_ELEM_F32, MPRT_ELEM_F64, MPRT_ELEM_I64, MPRT_ELEM_I32,
                                 MPRT_ELEM_I16, MPRT_ELEM_I8, MPRT_ELEM_U8};

static int elem_float(int type)
{
    return type == MPRT_ELEM_F32 || type == MPRT_ELEM_F64;
}

/* Mod in every element type, both rules, the divisor broadcast along the
 * rows: signs mixed, zero and -1 divisors, and for floats NaN, infinities
 * and zeros of both signs. */
static void test_mod(void)
{
    long shape[] = {4, 8}, sa[] = {8, 1}, sb[] = {0, 1};
    const double bv[8] = {3, -3, 0, -1, 5, -7, 1, 2};
    const double fb[8] = {3, -3, 0, -1, 2.5, -0.75, INFINITY, NAN};
    const double special[8] = {-0.0, 0.0, INFINITY, -INFINITY, NAN, 7.5, -7.5, 6};
    for (int t = 0; t < N_OF(elem_types); t++) {
        int type = elem_types[t];
        size_t sz = elem_size(type);
        unsigned char a[32 * 8], b[8 * 8], y[32 * 8], cy[32 * 8];
        for (int i = 0; i < 32; i++) {
            double v = (double)(int)frand(-100, 100);
            if (elem_float(type))
                v = i < 8 ? special[i] : frand(-20, 20);
            else if (type == MPRT_ELEM_U8)
                v = v < 0 ? -v : v;
            elem_store(type, a, i, v);
        }
        for (int i = 0; i < 8; i++)
            elem_store(type, b, i, elem_float(type) ? fb[i]
                                   : type == MPRT_ELEM_U8 && bv[i] < 0 ? -bv[i] : bv[i]);
        for (int c_fmod = 0; c_fmod < 2; c_fmod++) {
            memset(y, 0, sizeof y), memset(cy, 1, sizeof cy);
            mprt_mod(c_fmod, type, 2, shape, a, sa, b, sb, y);
            mprt_cu_mod(c_fmod, type, 2, shape, a, sa, b, sb, cy);
            char what[32];
            snprintf(what, sizeof what, "mod (type %d, fmod %d)", type, c_fmod);
            same(what, y, cy, 32 * sz);
        }
    }
    report("mod");
}

/* ArgMax and ArgMin over the middle of (3, 7, 4), in every element type:
 * small integers (ties), and NaNs among the floats. */
static void test_argmax(void)
{
    const long outer = 3, n = 7, inner = 4, total = outer * n * inner;
    for (int t = 0; t < N_OF(elem_types); t++) {
        int type = elem_types[t];
        unsigned char x[84 * 8];
        for (long i = 0; i < total; i++)
            elem_store(type, x, i, (double)(int)frand(type == MPRT_ELEM_U8 ? 0 : -3, 3));
        if (elem_float(type)) {
            elem_store(type, x, 4, NAN);    /* line (0, 0): one NaN */
            elem_store(type, x, 9, NAN);    /* line (0, 1): two */
            elem_store(type, x, 21, NAN);
        }
        for (int code = 0; code < 4; code++) {
            int64_t y[12], cy[12];
            memset(cy, 0xff, sizeof cy);
            mprt_argmax(code & 1, code >> 1, type, outer, n, inner, x, y);
            mprt_cu_argmax(code & 1, code >> 1, type, outer, n, inner, x, cy);
            char what[48];
            snprintf(what, sizeof what, "argmax (type %d, min %d, last %d)", type, code & 1,
                     code >> 1);
            same(what, y, cy, sizeof y);
        }
    }
    report("argmax");
}

/* TopK over the middle of (3, 9, 4), in every element type, both ways,
 * for K 1, 4 and 9 (the whole axis): small integers (ties), and NaNs among
 * the floats; then its gradient from the CPU's indices. */
static void test_topk(void)
{
    enum { OUTER = 3, N = 9, INNER = 4, TOTAL = OUTER * N * INNER };
    static const long ks[] = {1, 4, 9};
    for (int t = 0; t < N_OF(elem_types); t++) {
        int type = elem_types[t];
        unsigned char x[TOTAL * 8], v[TOTAL * 8], cv[TOTAL * 8];
        for (long i = 0; i < TOTAL; i++)
            elem_store(type, x, i, (double)(int)frand(type == MPRT_ELEM_U8 ? 0 : -3, 3));
        if (elem_float(type)) {
            elem_store(type, x, 4, NAN);    /* line (0, 0): one NaN */
            elem_store(type, x, 9, NAN);    /* line (0, 1): three */
            elem_store(type, x, 21, NAN);
            elem_store(type, x, 33, NAN);
        }
        for (int largest = 0; largest < 2; largest++)
            for (int j = 0; j < N_OF(ks); j++) {
                long k = ks[j], ny = OUTER * k * INNER;
                int64_t idx[TOTAL], cidx[TOTAL];
                memset(v, 0, sizeof v), memset(cv, 0xff, sizeof cv);
                memset(cidx, 0xff, sizeof cidx);
                mprt_topk(largest, type, OUTER, N, k, INNER, x, v, idx);
                mprt_cu_topk(largest, type, OUTER, N, k, INNER, x, cv, cidx);
                char what[48];
                snprintf(what, sizeof what, "topk (type %d, largest %d, k %ld)", type, largest,
                         k);
                same(what, idx, cidx, (size_t)ny * sizeof *idx);
                same(what, v, cv, (size_t)ny * elem_size(type));
                if (type != MPRT_ELEM_F32)
                    continue;
                float *dy = fvec(ny, -1, 1), *dx = fvec(TOTAL, 5, 6), *cdx = fvec(TOTAL, 7, 8);
                mprt_topk_grad(OUTER, N, k, INNER, dy, idx, dx);
                mprt_cu_topk_grad(OUTER, N, k, INNER, dy, idx, cdx);
                same("topk_grad", dx, cdx, TOTAL * 4);
                free(dy), free(dx), free(cdx);
            }
    }
    report("topk");
    report("topk_grad");
}

/* OneHot with the depth at the middle of (2, 5, 3), indices of every
 * element type (negative ones, ones out of range and, among the floats,
 * fractions, NaN and infinities), values of 1, 2, 4 and 8 bytes; then the
 * gradient of values. */
static void test_onehot(void)
{
    enum { OUTER = 2, DEPTH = 5, INNER = 3, NI = OUTER * INNER, NY = OUTER * DEPTH * INNER };
    static const double fi[NI] = {1.7, -2.2, NAN, 4.99, -5.5, INFINITY};
    static const double ii[NI] = {0, -1, 4, 5, -5, -6};
    static const int sizes[] = {1, 2, 4, 8};
    const unsigned char values[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    for (int t = 0; t < N_OF(elem_types); t++) {
        int type = elem_types[t];
        unsigned char idx[NI * 8];
        for (int i = 0; i < NI; i++)
            elem_store(type, idx, i, elem_float(type) ? fi[i]
                                     : type == MPRT_ELEM_U8 ? i * 2 : ii[i]);
        for (int s = 0; s < N_OF(sizes); s++) {
            int es = sizes[s];
            unsigned char y[NY * 8], cy[NY * 8];
            memset(y, 0, sizeof y), memset(cy, 0xff, sizeof cy);
            mprt_onehot(type, OUTER, DEPTH, INNER, es, idx, values + 8 - es, y);
            mprt_cu_onehot(type, OUTER, DEPTH, INNER, es, idx, values + 8 - es, cy);
            char what[40];
            snprintf(what, sizeof what, "onehot (type %d, %d bytes)", type, es);
            same(what, y, cy, (size_t)NY * (size_t)es);
        }
        float *dy = fvec(NY, -1, 1), dv[2] = {5, 6}, cdv[2] = {7, 8};
        mprt_onehot_grad(type, OUTER, DEPTH, INNER, idx, dy, dv);
        mprt_cu_onehot_grad(type, OUTER, DEPTH, INNER, idx, dy, cdv);
        same("onehot_grad", dv, cdv, sizeof dv);
        free(dy);
    }
    report("onehot");
    report("onehot_grad");
}

/* Trilu over (2, 4, 5) matrices, upper and lower, k from past one corner
 * to past the other, elements of 1, 2, 4 and 8 bytes; then in place. */
static void test_trilu(void)
{
    enum { COUNT = 2, ROWS = 4, COLS = 5, TOTAL = COUNT * ROWS * COLS };
    static const int sizes[] = {1, 2, 4, 8};
    unsigned char x[TOTAL * 8];
    for (size_t i = 0; i < sizeof x; i++)
        x[i] = (unsigned char)(i * 7 + 1);
    for (int s = 0; s < N_OF(sizes); s++)
        for (int upper = 0; upper < 2; upper++)
            for (long k = -ROWS; k <= COLS; k++) {
                int es = sizes[s];
                unsigned char y[TOTAL * 8], cy[TOTAL * 8], in[TOTAL * 8];
                memset(y, 0xee, sizeof y), memset(cy, 0xff, sizeof cy);
                memcpy(in, x, sizeof x);
                mprt_trilu(upper, k, COUNT, ROWS, COLS, es, x, y);
                mprt_cu_trilu(upper, k, COUNT, ROWS, COLS, es, x, cy);
                char what[48];
                snprintf(what, sizeof what, "trilu (%d bytes, upper %d, k %ld)", es, upper, k);
                same(what, y, cy, (size_t)TOTAL * (size_t)es);
                mprt_cu_trilu(upper, k, COUNT, ROWS, COLS, es, in, in);
                same("trilu (in place)", y, in, (size_t)TOTAL * (size_t)es);
            }
    report("trilu");
}

/* CumSum along a middle axis and a long one, each way, then in place. */
static void cumsum_case(long outer, long n, long inner)
{
    long total = outer * n * inner;
    float *x = fvec(total, -1, 1);
    x[total / 2] = NAN;
    for (int code = 0; code < 4; code++) {
        float *y = fzero(total), *cy = fvec(total, 5, 6);
        float *in = copy_of(x, (size_t)total * 4), *cin = copy_of(x, (size_t)total * 4);
        mprt_cumsum(code & 1, code >> 1, outer, n, inner, x, y);
        mprt_cu_cumsum(code & 1, code >> 1, outer, n, inner, x, cy);
        same("cumsum", y, cy, (size_t)total * 4);
        mprt_cumsum(code & 1, code >> 1, outer, n, inner, in, in);
        mprt_cu_cumsum(code & 1, code >> 1, outer, n, inner, cin, cin);
        same("cumsum (in place)", in, cin, (size_t)total * 4);
        same("cumsum (in place, as apart)", y, in, (size_t)total * 4);
        free(y), free(cy), free(in), free(cin);
    }
    free(x);
}

static void test_cumsum(void)
{
    cumsum_case(2, 9, 3);
    cumsum_case(1, 1000, 1);
    report("cumsum");
}

/* n random elements of `type`: small integers (repeats, so that max and
 * min tie), and for floats some NaNs, infinities and zeros of both signs. */
static void *elems(int type, long n)
{
    const double special[] = {NAN, -0.0, 0.0, INFINITY, -INFINITY};
    unsigned char *p = malloc((size_t)(n ? n : 1) * 8);
    for (long i = 0; i < n; i++) {
        double v = (double)(int)frand(type == MPRT_ELEM_U8 ? 0 : -4, 4);
        if (elem_float(type))
            v = i % 7 == 3 ? special[(i / 7) % 5] : frand(-2, 2);
        elem_store(type, p, i, v);
    }
    return p;
}

/* n indices of itype (int32 or int64) in [-dim, dim): negative ones and
 * repeats. */
static void *indices(int itype, long n, long dim)
{
    unsigned char *p = malloc((size_t)(n ? n : 1) * 8);
    for (long i = 0; i < n; i++)
        elem_store(itype, p, i, (double)(int)frand(-(float)dim, (float)dim));
    return p;
}

/* GatherElements and ScatterElements (every reduction; and for float32
 * their gradients) of data xs along the axis, by indices of shape is, in
 * element type `type`. */
static void elements_case(int type, int itype, int rank, int axis, const long *xs,
                          const long *is)
{
    long nx = 1, ni = 1;
    for (int d = 0; d < rank; d++)
        nx *= xs[d], ni *= is[d];
    size_t sz = elem_size(type);
    void *x = elems(type, nx), *u = elems(type, ni), *idx = indices(itype, ni, xs[axis]);
    size_t most = (size_t)(nx > ni ? nx : ni) * sz;
    unsigned char *y = malloc(most), *cy = malloc(most);
    char what[80];
    memset(y, 0, (size_t)ni * sz), memset(cy, 0x5a, (size_t)ni * sz);
    mprt_gather_elements(type, itype, rank, axis, xs, is, idx, x, y, "g");
    mprt_cu_gather_elements(type, itype, rank, axis, xs, is, idx, x, cy, "g");
    snprintf(what, sizeof what, "gather_elements (type %d, axis %d)", type, axis);
    same(what, y, cy, (size_t)ni * sz);
    for (int red = MPRT_SCATTER_NONE; red <= MPRT_SCATTER_MIN; red++) {
        memset(y, 0, (size_t)nx * sz), memset(cy, 0x5a, (size_t)nx * sz);
        mprt_scatter_elements(red, type, itype, rank, axis, xs, is, idx, x, u, y, "s");
        mprt_cu_scatter_elements(red, type, itype, rank, axis, xs, is, idx, x, u, cy, "s");
        snprintf(what, sizeof what, "scatter_elements (type %d, axis %d, reduction %d)", type,
                 axis, red);
        same(what, y, cy, (size_t)nx * sz);
    }
    if (type == MPRT_ELEM_F32) {   /* the gradients: dy of the indices' shape, then the data's */
        const float *du = u, *dx = x;
        float *g = (float *)y, *cg = (float *)cy;
        memset(cg, 0x5a, (size_t)nx * sz);
        mprt_gather_elements_grad(itype, rank, axis, xs, is, idx, du, g, "g");
        mprt_cu_gather_elements_grad(itype, rank, axis, xs, is, idx, du, cg, "g");
        same("gather_elements_grad", g, cg, (size_t)nx * sz);
        memset(cg, 0x5a, (size_t)nx * sz);
        mprt_scatter_elements_grad(itype, rank, axis, xs, is, idx, dx, g, "s");
        mprt_cu_scatter_elements_grad(itype, rank, axis, xs, is, idx, dx, cg, "s");
        same("scatter_elements_grad", g, cg, (size_t)nx * sz);
    }
    free(x), free(u), free(idx), free(y), free(cy);
}

static void test_elements(void)
{
    const long xs[] = {3, 5, 4}, is[] = {2, 6, 3}, is0[] = {7, 2, 4}, is2[] = {3, 5, 9};
    for (int t = 0; t < N_OF(elem_types); t++) {
        elements_case(elem_types[t], MPRT_ELEM_I64, 3, 1, xs, is);
        elements_case(elem_types[t], MPRT_ELEM_I32, 3, 0, xs, is0);
        elements_case(elem_types[t], MPRT_ELEM_I64, 3, 2, xs, is2);
    }
    elements_case(MPRT_ELEM_F32, MPRT_ELEM_I64, 1, 0, (const long[]){6}, (const long[]){20});
    report("gather_elements");
    report("scatter_elements");
}

/* GatherND and ScatterND (every reduction, where there is no batch; and
 * for float32 their gradients) over nbatch x dims[0..k) x inner, nrows
 * rows of indices per batch. */
static void nd_case(int type, int itype, long nbatch, long nrows, int k, const long *dims,
                    long inner)
{
    long slots = 1;
    for (int q = 0; q < k; q++)
        slots *= dims[q];
    long nx = nbatch * slots * inner, nu = nbatch * nrows * inner;
    size_t sz = elem_size(type);
    unsigned char *idx = malloc((size_t)(nbatch * nrows * k) * 8);
    for (long r = 0; r < nbatch * nrows; r++)
        for (int q = 0; q < k; q++)
            elem_store(itype, idx, r * k + q, (double)(int)frand(-(float)dims[q], (float)dims[q]));
    void *x = elems(type, nx), *u = elems(type, nu);
    unsigned char *y = malloc((size_t)(nx > nu ? nx : nu) * sz);
    unsigned char *cy = malloc((size_t)(nx > nu ? nx : nu) * sz);
    char what[80];
    memset(y, 0, (size_t)nu * sz), memset(cy, 0x5a, (size_t)nu * sz);
    mprt_gather_nd(type, itype, nbatch, nrows, k, dims, inner, idx, x, y, "g");
    mprt_cu_gather_nd(type, itype, nbatch, nrows, k, dims, inner, idx, x, cy, "g");
    snprintf(what, sizeof what, "gather_nd (type %d, k %d)", type, k);
    same(what, y, cy, (size_t)nu * sz);
    for (int red = MPRT_SCATTER_NONE; red <= MPRT_SCATTER_MIN && nbatch == 1; red++) {
        memset(y, 0, (size_t)nx * sz), memset(cy, 0x5a, (size_t)nx * sz);
        mprt_scatter_nd(red, type, itype, nrows, k, dims, inner, idx, x, u, y, "s");
        mprt_cu_scatter_nd(red, type, itype, nrows, k, dims, inner, idx, x, u, cy, "s");
        snprintf(what, sizeof what, "scatter_nd (type %d, k %d, reduction %d)", type, k, red);
        same(what, y, cy, (size_t)nx * sz);
    }
    const float *du = u, *dx = x;
    float *g = (float *)y, *cg = (float *)cy;
    if (type == MPRT_ELEM_F32) {   /* the gradients: dy of the updates' shape, then the data's */
        memset(cg, 0x5a, (size_t)nx * sz);
        mprt_gather_nd_grad(itype, nbatch, nrows, k, dims, inner, idx, du, g, "g");
        mprt_cu_gather_nd_grad(itype, nbatch, nrows, k, dims, inner, idx, du, cg, "g");
        same("gather_nd_grad", g, cg, (size_t)nx * sz);
    }
    if (type == MPRT_ELEM_F32 && nbatch == 1) {
        memset(cg, 0x5a, (size_t)nx * sz);
        mprt_scatter_nd_grad(itype, nrows, k, dims, inner, idx, dx, g, "s");
        mprt_cu_scatter_nd_grad(itype, nrows, k, dims, inner, idx, dx, cg, "s");
        same("scatter_nd_grad", g, cg, (size_t)nx * sz);
    }
    free(idx), free(x), free(u), free(y), free(cy);
}

static void test_nd(void)
{
    for (int t = 0; t < N_OF(elem_types); t++) {
        nd_case(elem_types[t], MPRT_ELEM_I64, 1, 9, 2, (const long[]){4, 3}, 5);
        nd_case(elem_types[t], MPRT_ELEM_I32, 2, 7, 1, (const long[]){3}, 4);
        nd_case(elem_types[t], MPRT_ELEM_I32, 1, 7, 1, (const long[]){3}, 4);
        nd_case(elem_types[t], MPRT_ELEM_I64, 3, 12, 3, (const long[]){2, 3, 2}, 1);
    }
    report("gather_nd");
    report("scatter_nd");
}

static void pad_case(int mode, int rank, const long *xs, const long *ys, const long *begin)
{
    long nx = 1, ny = 1;
    for (int d = 0; d < rank; d++)
        nx *= xs[d], ny *= ys[d];
    float *x = fvec(nx, -1, 1), *y = fzero(ny), *cy = fzero(ny);
    mprt_pad(0, mode, rank, xs, ys, begin, 0.25f, x, y);
    mprt_cu_pad(0, mode, rank, xs, ys, begin, 0.25f, x, cy);
    same("pad", y, cy, (size_t)ny * 4);
    float *dy = fvec(ny, -1, 1), *dx = fvec(nx, 5, 6), *cdx = fvec(nx, 7, 8);
    mprt_pad(1, mode, rank, xs, ys, begin, 0.0f, dx, dy);
    mprt_cu_pad(1, mode, rank, xs, ys, begin, 0.0f, cdx, dy);
    same("pad (back)", dx, cdx, (size_t)nx * 4);
    free(x), free(y), free(cy), free(dy), free(dx), free(cdx);
}

static void test_pad(void)
{
    long xs[] = {2, 3, 4}, ys[] = {5, 4, 15}, begin[] = {1, 0, 5};   /* beyond a period */
    long cys[] = {2, 2, 6}, cbegin[] = {0, -1, 1};                   /* a crop */
    long one[] = {1}, one_y[] = {4}, one_b[] = {2};
    for (int mode = MPRT_PAD_CONSTANT; mode <= MPRT_PAD_EDGE; mode++) {
        pad_case(mode, 3, xs, ys, begin);
        pad_case(mode, 3, xs, cys, cbegin);
        pad_case(mode, 1, one, one_y, one_b);
        pad_case(mode, 0, NULL, NULL, NULL);
    }
    report("pad");
}

static uint16_t *bf16_copy(float *x, long n);
static void same_narrowed(const char *what, const float *y, const uint16_t *h, long n);

/* The pooling kernels' bf16 twins against the CPU's float32 kernels on
 * the same bf16 values (x and dy rounded in place), each result narrowed;
 * a max pooling's gradient with the CPU's indices. */
static void pool_case_bf16(const MprtPool *p, int avg, float *x, float *dy)
{
    long nx = (long)p->N * p->C * p->D * p->H * p->W;
    long ny = (long)p->N * p->C * p->OD * p->OH * p->OW;
    uint16_t *hx = bf16_copy(x, nx), *hdy = bf16_copy(dy, ny);
    uint16_t *hy = calloc((size_t)ny, 2), *hdx = calloc((size_t)nx, 2);
    float *y = fzero(ny), *dx = fzero(nx);
    if (avg) {
        mprt_avgpool(0, p, x, y);
        mprt_cu_avgpool_bf16(0, p, hx, hy);
        same_narrowed("avgpool_bf16", y, hy, ny);
        mprt_avgpool(1, p, dx, dy);
        mprt_cu_avgpool_bf16(1, p, hdx, hdy);
        same_narrowed("avgpool_bf16 (back)", dx, hdx, nx);
    } else {
        int64_t *idx = malloc((size_t)ny * 8), *hidx = malloc((size_t)ny * 8);
        mprt_maxpool(p, x, y, idx);
        mprt_cu_maxpool_bf16(p, hx, hy, hidx);
        same_narrowed("maxpool_bf16", y, hy, ny);
        same("maxpool_bf16 (indices)", idx, hidx, (size_t)ny * 8);
        mprt_maxpool_grad(ny, nx, dy, idx, dx);
        mprt_cu_maxpool_grad_bf16(p, hdy, idx, hdx);
        same_narrowed("maxpool_grad_bf16", dx, hdx, nx);
        free(idx), free(hidx);
    }
    free(hx), free(hdy), free(hy), free(hdx), free(y), free(dx);
}

static void pool_case(const MprtPool *p, int avg)
{
    long nx = (long)p->N * p->C * p->D * p->H * p->W;
    long ny = (long)p->N * p->C * p->OD * p->OH * p->OW;
    float *x = fvec(nx, -1, 1), *y = fzero(ny), *cy = fzero(ny);
    x[7] = NAN;
    if (avg) {
        mprt_avgpool(0, p, x, y);
        mprt_cu_avgpool(0, p, x, cy);
        same("avgpool", y, cy, (size_t)ny * 4);
        float *dy = fvec(ny, -1, 1), *dx = fvec(nx, 3, 4), *cdx = fvec(nx, 5, 6);
        mprt_avgpool(1, p, dx, dy);
        mprt_cu_avgpool(1, p, cdx, dy);
        same("avgpool (back)", dx, cdx, (size_t)nx * 4);
        free(dy), free(dx), free(cdx);
    } else {
        int64_t *idx = malloc((size_t)ny * 8), *cidx = malloc((size_t)ny * 8);
        mprt_maxpool(p, x, y, idx);
        mprt_cu_maxpool(p, x, cy, cidx);
        same("maxpool", y, cy, (size_t)ny * 4);
        same("maxpool (indices)", idx, cidx, (size_t)ny * 8);
        float *dy = fvec(ny, -1, 1), *dx = fzero(nx), *cdx = fvec(nx, 5, 6);
        mprt_maxpool_grad(ny, nx, dy, idx, dx);
        mprt_cu_maxpool_grad(ny, nx, dy, cidx, cdx);
        same("maxpool_grad", dx, cdx, (size_t)nx * 4);
        int64_t *other = copy_of(cidx, (size_t)ny * 8);   /* unknown windows: the scatter */
        mprt_cu_maxpool_grad(ny, nx, dy, other, cdx);
        same("maxpool_grad (scatter)", dx, cdx, (size_t)nx * 4);
        free(idx), free(cidx), free(other), free(dy), free(dx), free(cdx);
    }
    float *dy = fvec(ny, -1, 1);
    pool_case_bf16(p, avg, x, dy);
    free(x), free(y), free(cy), free(dy);
}

/* A k x k window over H x W (2-D), or k x k x k over D x H x W when D > 1,
 * with the same stride, dilation and pads in every dimension. */
static MprtPool pool(int D, int H, int W, int k, int s, int d, int pad, int end, int cip)
{
    int kd = D > 1 ? k : 1, sd = D > 1 ? s : 1, dd = D > 1 ? d : 1;
    int pd = D > 1 ? pad : 0, ed = D > 1 ? end : 0;
    MprtPool p = {2, 3, D, H, W, 0, 0, 0, kd, k, k, sd, s, s, dd, d, d, pd, pad, pad,
                  ed, end, end, cip};
    p.OD = (D + pd + ed - ((kd - 1) * dd + 1)) / sd + 1;
    p.OH = (H + pad + end - ((k - 1) * d + 1)) / s + 1;
    p.OW = (W + pad + end - ((k - 1) * d + 1)) / s + 1;
    return p;
}

static void test_pool(void)
{
    for (int D = 1; D <= 5; D += 4)
        for (int cip = 0; cip < 2; cip++) {
            MprtPool a = pool(D, 7, 6, 3, 1, 1, 1, 1, cip), b = pool(D, 7, 6, 3, 2, 1, 1, 0, cip),
                     c = pool(D, 7, 6, 2, 2, 1, 0, 1, cip), d = pool(D, 9, 8, 4, 3, 1, 2, 2, cip);
            pool_case(&a, 1), pool_case(&b, 1), pool_case(&c, 1), pool_case(&d, 1);
        }
    for (int D = 1; D <= 7; D += 6) {
        MprtPool m1 = pool(D, 7, 6, 3, 2, 1, 1, 1, 0), m2 = pool(D, 9, 8, 3, 1, 2, 2, 2, 0);
        pool_case(&m1, 0), pool_case(&m2, 0);
    }
    MprtPool m3 = pool(5, 9, 11, 3, 1, 1, 2, 2, 0);   /* a dilation of its own per dimension */
    m3.dd = 1, m3.dh = 2, m3.dw = 3;
    m3.OD = (m3.D + m3.pd + m3.ed - ((m3.KD - 1) * m3.dd + 1)) / m3.sd + 1;
    m3.OH = (m3.H + m3.ph + m3.eh - ((m3.KH - 1) * m3.dh + 1)) / m3.sh + 1;
    m3.OW = (m3.W + m3.pw + m3.ew - ((m3.KW - 1) * m3.dw + 1)) / m3.sw + 1;
    pool_case(&m3, 0);
    float x[30], y[6], cy[6], dy[6], dx[30], cdx[30];
    for (int i = 0; i < 30; i++)
        x[i] = frand(-1, 1);
    mprt_gap(6, 5, x, y);
    mprt_cu_gap(6, 5, x, cy);
    same("gap", y, cy, sizeof y);
    for (int i = 0; i < 6; i++)
        dy[i] = frand(-1, 1);
    mprt_gap_grad(6, 5, dy, dx);
    mprt_cu_gap_grad(6, 5, dy, cdx);
    same("gap_grad", dx, cdx, sizeof dx);
    uint16_t *hx = bf16_copy(x, 30), *hdy = bf16_copy(dy, 6), hy[6], hdx[30];
    mprt_gap(6, 5, x, y);
    mprt_cu_gap_bf16(6, 5, hx, hy);
    same_narrowed("gap_bf16", y, hy, 6);
    mprt_gap_grad(6, 5, dy, dx);
    mprt_cu_gap_grad_bf16(6, 5, hdy, hdx);
    same_narrowed("gap_grad_bf16", dx, hdx, 30);
    free(hx), free(hdy);
    report("avgpool");
    report("maxpool");
    report("maxpool_grad");
    report("gap");
    report("gap_grad");
    report("pooling's bf16 twins");
}

/* A batch norm with its ReLU in training, forward and backward: the
 * channel kernels (kernels.cu's bn_train_rows, bn_grad_rows) against the
 * CPU's mprt_bn_train and mprt_bn_grad with relu, bit for bit, the
 * running statistics too; the bf16 twins against the CPU on the widened
 * values, each result rounded once. */
static void test_bn_relu(int N, int C, long P)
{
    long n = N * C * P;
    float *x = fvec(n, -2, 3), *dy = fvec(n, -1, 1), *st = fvec(4 * (size_t)C, 0.5f, 1.5f);
    float *y = fzero(n), *cy = fzero(n), *dx = fzero(n), *cdx = fzero(n), *g = fzero(8 * C);
    float *scale = st, *bias = st + C, *rm = fvec(C, -0.5f, 0.5f), *rv = fvec(C, 0.5f, 2.0f);
    float *crm = malloc((size_t)C * 4), *crv = malloc((size_t)C * 4);
    memcpy(crm, rm, (size_t)C * 4), memcpy(crv, rv, (size_t)C * 4);
    mprt_bn_train(N, C, P, x, scale, bias, rm, rv, 0.9f, 1e-5f, 1, NULL, y);
    mprt_cu_bn_train(N, C, P, x, scale, bias, crm, crv, 0.9f, 1e-5f, 1, NULL, cy);
    same("bn_train_rows", y, cy, (size_t)n * 4);
    same("bn_train_rows (running mean)", rm, crm, (size_t)C * 4);
    same("bn_train_rows (running variance)", rv, crv, (size_t)C * 4);
    mprt_bn_grad(N, C, P, dy, y, x, scale, 1e-5f, dx, g, g + C);
    mprt_cu_bn_grad(N, C, P, dy, y, x, scale, 1e-5f, cdx, g + 2 * C, g + 3 * C);
    same("bn_grad_rows (dx)", dx, cdx, (size_t)n * 4);
    same("bn_grad_rows (dscale)", g, g + 2 * C, (size_t)C * 4);
    same("bn_grad_rows (dbias)", g + C, g + 3 * C, (size_t)C * 4);

    uint16_t *hx = bf16_copy(x, n), *hdy = bf16_copy(dy, n), *hy = calloc((size_t)n, 2);
    uint16_t *hdx = calloc((size_t)n, 2);
    float *wx = fzero(n), *wdy = fzero(n), *wz = fzero(n);
    mprt_bf16_widen(n, hx, wx), mprt_bf16_widen(n, hdy, wdy);
    mprt_bn_train(N, C, P, wx, scale, bias, rm, rv, 0.9f, 1e-5f, 1, NULL, y);
    mprt_cu_bn_train_bf16(N, C, P, hx, scale, bias, crm, crv, 0.9f, 1e-5f, 1, NULL, hy);
    same_narrowed("bn_train_rows_bf16", y, hy, n);
    same("bn_train_rows_bf16 (running mean)", rm, crm, (size_t)C * 4);
    same("bn_train_rows_bf16 (running variance)", rv, crv, (size_t)C * 4);
    mprt_bf16_widen(n, hy, wz);   /* the bf16 z both read */
    mprt_bn_grad(N, C, P, wdy, wz, wx, scale, 1e-5f, dx, g, g + C);
    mprt_cu_bn_grad_bf16(N, C, P, hdy, hy, hx, scale, 1e-5f, hdx, g + 2 * C, g + 3 * C);
    same_narrowed("bn_grad_rows_bf16 (dx)", dx, hdx, n);
    same("bn_grad_rows_bf16 (dscale, dbias)", g, g + 2 * C, 2 * (size_t)C * 4);

    /* with a residual (dy's values) added before the ReLU: in float32; in
     * bf16, the twin against the CPU on widened copies (fuse 3: y rounded
     * before the add), and the float32 kernel on them so too */
    mprt_bn_train(N, C, P, x, scale, bias, rm, rv, 0.9f, 1e-5f, 1, dy, y);
    mprt_cu_bn_train(N, C, P, x, scale, bias, crm, crv, 0.9f, 1e-5f, 1, dy, cy);
    same("bn_train_rows + residual", y, cy, (size_t)n * 4);
    mprt_bn_train(N, C, P, wx, scale, bias, rm, rv, 0.9f, 1e-5f, 3, wdy, y);
    mprt_cu_bn_train_bf16(N, C, P, hx, scale, bias, crm, crv, 0.9f, 1e-5f, 1, hdy, hy);
    same_narrowed("bn_train_rows_bf16 + residual", y, hy, n);
    same("bn_train_rows_bf16 + residual (running mean)", rm, crm, (size_t)C * 4);
    mprt_cu_bn_train(N, C, P, wx, scale, bias, NULL, NULL, 0.9f, 1e-5f, 3, wdy, cy);
    same("bn_train_rows + residual, rounded", y, cy, (size_t)n * 4);
    mprt_training = 0;
    mprt_bn_train(N, C, P, wx, scale, bias, rm, rv, 0.9f, 1e-5f, 3, wdy, y);
    mprt_cu_bn_train_bf16(N, C, P, hx, scale, bias, crm, crv, 0.9f, 1e-5f, 1, hdy, hy);
    same_narrowed("bn_infer_bf16 + residual", y, hy, n);
    mprt_cu_bn_train(N, C, P, wx, scale, bias, crm, crv, 0.9f, 1e-5f, 3, wdy, cy);
    same("bn_infer + residual, rounded", y, cy, (size_t)n * 4);
    mprt_training = 1;
    free(x), free(dy), free(st), free(y), free(cy), free(dx), free(cdx), free(g), free(rm);
    free(rv), free(crm), free(crv), free(hx), free(hdy), free(hy), free(hdx), free(wx);
    free(wdy), free(wz);
    report("bn_train_rows");
    report("bn_grad_rows");
}

static void test_norm(void)
{
    int N = 2, C = 4;
    long P = 6, n = N * C * P;
    float *x = fvec(n, -2, 3), *scale = fvec(C, 0.5f, 1.5f), *bias = fvec(C, -1, 1);
    float *mean = fvec(C, -0.5f, 0.5f), *var = fvec(C, 0.5f, 2.0f);
    float *y = fzero(n), *cy = fzero(n);
    for (int relu = 0; relu < 2; relu++) {
        mprt_bn_infer(N, C, P, x, scale, bias, mean, var, 1e-5f, relu, NULL, y);
        mprt_cu_bn_infer(N, C, P, x, scale, bias, mean, var, 1e-5f, relu, NULL, cy);
        same("bn_infer", y, cy, (size_t)n * 4);
        mprt_training = 0;
        mprt_cu_bn_train(N, C, P, x, scale, bias, mean, var, 0.9f, 1e-5f, relu, NULL, cy);
        same("bn_train (inference)", y, cy, (size_t)n * 4);
        uint16_t *hx = bf16_copy(x, n), *hy = calloc((size_t)n, 2);   /* x rounded to bf16 */
        mprt_bn_infer(N, C, P, x, scale, bias, mean, var, 1e-5f, relu, NULL, y);
        mprt_cu_bn_train_bf16(N, C, P, hx, scale, bias, mean, var, 0.9f, 1e-5f, relu, NULL, hy);
        same_narrowed("bn_train_bf16 (inference)", y, hy, n);
        free(hx), free(hy);
        mprt_training = 1;
    }
    test_bn_relu(3, 5, 7);   /* an odd plane: the sums' tails */
    test_bn_relu(2, 3, 16);  /* whole chunks of 8, aligned: the vector loads */
    test_bn_relu(2, 3, 20);  /* chunks of 8 and one of 4, element by element */
    for (int G = C; G >= 2; G /= 2) {
        float *dy = fvec(n, -1, 1), *dx = fzero(n), *cdx = fzero(n);
        float ds[4], db[4], cds[4], cdb[4];
        mprt_group_norm(N, C, G, P, x, scale, bias, 1e-5f, y);
        mprt_cu_group_norm(N, C, G, P, x, scale, bias, 1e-5f, cy);
        same("group_norm", y, cy, (size_t)n * 4);
        mprt_group_norm_grad(N, C, G, P, dy, x, scale, 1e-5f, dx, ds, db);
        mprt_cu_group_norm_grad(N, C, G, P, dy, x, scale, 1e-5f, cdx, cds, cdb);
        same("group_norm_grad (dx)", dx, cdx, (size_t)n * 4);
        same("group_norm_grad (dscale)", ds, cds, sizeof ds);
        same("group_norm_grad (dbias)", db, cdb, sizeof db);
        free(dy), free(dx), free(cdx);
    }
    long rows = 5, D = 7;
    float *lx = fvec(rows * D, -2, 2), *ls = fvec(D, 0.5f, 1.5f), *lb = fvec(D, -1, 1);
    float *ly = fzero(rows * D), *cly = fzero(rows * D), lm[5], lr[5], clm[5], clr[5];
    mprt_layernorm(rows, D, lx, ls, lb, 1e-5f, ly, lm, lr);
    mprt_cu_layernorm(rows, D, lx, ls, lb, 1e-5f, cly, clm, clr);
    same("layernorm", ly, cly, (size_t)rows * D * 4);
    same("layernorm (mean)", lm, clm, sizeof lm);
    same("layernorm (rstd)", lr, clr, sizeof lr);
    float *ldy = fvec(rows * D, -1, 1), *ldx = fzero(rows * D), *cldx = fzero(rows * D);
    float lds[7], ldb[7], clds[7], cldb[7];
    mprt_layernorm_grad(rows, D, ldy, lx, ls, lm, lr, ldx, lds, ldb);
    mprt_cu_layernorm_grad(rows, D, ldy, lx, ls, lm, lr, cldx, clds, cldb);
    same("layernorm_grad (dx)", ldx, cldx, (size_t)rows * D * 4);
    same("layernorm_grad (dscale)", lds, clds, sizeof lds);
    same("layernorm_grad (dbias)", ldb, cldb, sizeof ldb);
    free(x), free(scale), free(bias), free(mean), free(var), free(y), free(cy);
    free(lx), free(ls), free(lb), free(ly), free(cly), free(ldy), free(ldx), free(cldx);
    report("bn_infer");
    report("bn_train_bf16");
    report("group_norm");
    report("group_norm_grad");
    report("layernorm");
    report("layernorm_grad");
}

static void reduce_case(int rank, const long *shape, const int *keep)
{
    long n = 1, n_out = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d], n_out *= keep[d] ? shape[d] : 1;
    float *x = fvec(n, 0, 0), *y = fzero(n_out), *cy = fzero(n_out);
    x[3] = -0.0f, x[n / 2] = NAN, x[n - 1] = NAN;
    mprt_sum_to(rank, shape, keep, x, 0.5f, n_out, y);
    mprt_cu_sum_to(rank, shape, keep, x, 0.5f, n_out, cy);
    same("sum_to", y, cy, (size_t)n_out * 4);
    float *wide = fzero(n);   /* the bf16 twin against the sum of the widened values */
    uint16_t *half = malloc((size_t)n * sizeof *half);
    mprt_bf16_narrow(n, x, half);
    mprt_bf16_widen(n, half, wide);
    mprt_sum_to(rank, shape, keep, wide, 0.5f, n_out, y);
    mprt_cu_sum_to_bf16(rank, shape, keep, half, 0.5f, n_out, cy);
    same("sum_to_bf16", y, cy, (size_t)n_out * 4);
    free(wide), free(half);
    for (int is_min = 0; is_min < 2; is_min++) {
        mprt_reduce_max(is_min, rank, shape, keep, x, n_out, y);
        mprt_cu_reduce_max(is_min, rank, shape, keep, x, n_out, cy);
        same("reduce_max", y, cy, (size_t)n_out * 4);
        float *dy = fvec(n_out, -1, 1), *dx = fzero(n), *cdx = fvec(n, 1, 2);
        mprt_reduce_max_grad(rank, shape, keep, dy, x, y, n_out, dx);
        mprt_cu_reduce_max_grad(rank, shape, keep, dy, x, y, n_out, cdx);
        same("reduce_max_grad", dx, cdx, (size_t)n * 4);
        free(dy), free(dx), free(cdx);
    }
    for (long i = 0; i < n; i++)   /* zeros of both signs, no NaN */
        x[i] = i % 3 ? 0.0f : -0.0f;
    mprt_reduce_max(0, rank, shape, keep, x, n_out, y);
    mprt_cu_reduce_max(0, rank, shape, keep, x, n_out, cy);
    same("reduce_max (signed zeros)", y, cy, (size_t)n_out * 4);
    free(x), free(y), free(cy);
}

static void test_reduce(void)
{
    long s1[] = {4, 5, 6}, s2[] = {8, 3, 16};
    int k1[] = {1, 0, 1}, k2[] = {0, 1, 0}, k3[] = {0, 0, 0}, k4[] = {0, 0, 1}, k5[] = {0, 1, 1};
    reduce_case(3, s1, k1);   /* a thread per output */
    reduce_case(3, s2, k2);   /* a block per output */
    reduce_case(3, s2, k3);   /* columns (kernels.cu's col_sum), the rest from here on */
    reduce_case(3, s2, k4);
    reduce_case(3, s1, k5);
    report("sum_to");
    report("sum_to_bf16");
    report("reduce_max");
    report("reduce_max_grad");
}

static void test_losses(void)
{
    int N = 3, C = 4;
    long D = 5, n = N * C * D;
    float *x = fvec(n, -3, 1), *w = fvec(C, 0.5f, 2), *logp = fzero(n), *clogp = fzero(n);
    int64_t labels[15];
    for (int i = 0; i < 15; i++)
        labels[i] = i % 4 == 3 ? -100 : (int64_t)frand(0, (float)C);
    for (int r = 0; r < 3; r++)
        for (int wt = 0; wt < 2; wt++) {
            float loss[15], closs[15];
            memset(loss, 0, sizeof loss), memset(closs, 0, sizeof closs);
            mprt_nll_forward(N, C, D, x, labels, wt ? w : NULL, -100, r, loss, "n");
            mprt_cu_nll_forward(N, C, D, x, labels, wt ? w : NULL, -100, r, closs, "n");
            same("nll_forward", loss, closs, sizeof loss);
        }
    labels[2] = 9;   /* a bad label: recorded, the CPU would stop */
    float loss;
    mprt_cu_nll_forward(N, C, D, x, labels, NULL, -100, 2, &loss, "bad");
    checks++;
    if (mprt_k_fault[0] != 2 || mprt_k_fault[1] != 9 || mprt_k_fault[2] != (unsigned)C ||
        strcmp((const char *)(uintptr_t)mprt_k_fault[3], "bad") != 0 ||
        (int64_t)mprt_k_fault[4] != -100) {
        failures++;
        fprintf(stderr, "emulate: nll_forward's fault record is wrong\n");
    }
    memset(mprt_k_fault, 0, 5 * sizeof *mprt_k_fault);
    labels[2] = 1;
    float l1, l2, dl = 0.75f, *dx = fzero(n), *cdx = fvec(n, 1, 2);
    mprt_nll(N, C, D, x, labels, -100, &l1, "n");
    mprt_cu_nll(N, C, D, x, labels, -100, &l2, "n");
    same("nll", &l1, &l2, 4);
    mprt_nll_grad(N, C, D, &dl, labels, -100, dx);
    mprt_cu_nll_grad(N, C, D, &dl, labels, -100, cdx);
    same("nll_grad", dx, cdx, (size_t)n * 4);
    mprt_sce(N, C, D, x, labels, -100, &l1, logp);
    mprt_cu_sce(N, C, D, x, labels, -100, &l2, clogp);
    same("sce", &l1, &l2, 4);
    same("sce (log-probabilities)", logp, clogp, (size_t)n * 4);
    mprt_sce_grad(N, C, D, &dl, logp, labels, -100, dx);
    mprt_cu_sce_grad(N, C, D, &dl, logp, labels, -100, cdx);
    same("sce_grad", dx, cdx, (size_t)n * 4);
    {   /* the bf16 twins: bf16 scores in, a bf16 gradient out */
        float *wide = fzero(n);
        uint16_t *half = malloc((size_t)n * 2), *hdx = calloc((size_t)n, 2);
        mprt_bf16_narrow(n, x, half);
        mprt_bf16_widen(n, half, wide);
        mprt_sce(N, C, D, wide, labels, -100, &l1, logp);
        mprt_cu_sce_bf16(N, C, D, half, labels, -100, &l2, clogp);
        same("sce_bf16", &l1, &l2, 4);
        same("sce_bf16 (log-probabilities)", logp, clogp, (size_t)n * 4);
        mprt_sce_grad(N, C, D, &dl, logp, labels, -100, dx);
        mprt_cu_sce_grad_bf16(N, C, D, &dl, logp, labels, -100, hdx);
        same_narrowed("sce_grad_bf16", dx, hdx, n);
        free(wide), free(half), free(hdx);
    }
    float *t = fvec(n, -1, 1);
    mprt_mse(n, x, t, &l1);
    mprt_cu_mse(n, x, t, &l2);
    same("mse", &l1, &l2, 4);
    mprt_mse_grad(n, &dl, x, t, dx);
    mprt_cu_mse_grad(n, &dl, x, t, cdx);
    same("mse_grad", dx, cdx, (size_t)n * 4);
    float *y = fzero(n), *cy = fzero(n), *dy = fvec(n, -1, 1);
    for (int lg = 0; lg < 2; lg++) {
        (lg ? mprt_log_softmax : mprt_softmax)(3, 4, 5, x, y);
        (lg ? mprt_cu_log_softmax : mprt_cu_softmax)(3, 4, 5, x, cy);
        same(lg ? "log_softmax" : "softmax", y, cy, (size_t)n * 4);
        (lg ? mprt_log_softmax_grad : mprt_softmax_grad)(3, 4, 5, dy, y, dx);
        (lg ? mprt_cu_log_softmax_grad : mprt_cu_softmax_grad)(3, 4, 5, dy, y, cdx);
        same(lg ? "log_softmax_grad" : "softmax_grad", dx, cdx, (size_t)n * 4);
    }
    free(x), free(w), free(logp), free(clogp), free(dx), free(cdx), free(t), free(y), free(cy),
        free(dy);
    report("nll_forward");
    report("nll");
    report("nll_grad");
    report("sce");
    report("sce_grad");
    report("sce_bf16");
    report("sce_grad_bf16");
    report("mse");
    report("mse_grad");
    report("softmax");
    report("log_softmax");
}

/* One strided view of x (30 elements, bf16 values) in bf16, CPU and CUDA,
 * against the float32 run narrowed: the view out, then back into a zeroed
 * x (the gradient). */
static void strided_bf16_case(const char *what, int rank, const long *shape, const long *stride,
                              long base, const float *x, const uint16_t *hx, long n_view)
{
    float y[30], dx[30];
    uint16_t want[30], hy[30], cy[30], hdx[30], cdx[30];
    char name[80];
    mprt_strided(4, 0, rank, shape, stride, base, 30, (float *)x, y);
    mprt_bf16_narrow(n_view, y, want);
    mprt_strided(2, 0, rank, shape, stride, base, 30, (uint16_t *)hx, hy);
    mprt_cu_strided(2, 0, rank, shape, stride, base, 30, (uint16_t *)hx, cy);
    snprintf(name, sizeof name, "strided in bf16 (%s, against float32)", what);
    same(name, want, hy, (size_t)n_view * 2);
    snprintf(name, sizeof name, "strided in bf16 (%s, CUDA)", what);
    same(name, hy, cy, (size_t)n_view * 2);
    mprt_strided(4, 1, rank, shape, stride, base, 30, dx, y);
    mprt_bf16_narrow(30, dx, want);
    mprt_strided(2, 1, rank, shape, stride, base, 30, hdx, hy);
    mprt_cu_strided(2, 1, rank, shape, stride, base, 30, cdx, hy);
    snprintf(name, sizeof name, "strided in bf16 (%s back, against float32)", what);
    same(name, want, hdx, sizeof hdx);
    snprintf(name, sizeof name, "strided in bf16 (%s back, CUDA)", what);
    same(name, hdx, cdx, sizeof cdx);
}

/* The layout kernels on bf16 elements (2 bytes each) against their
 * float32 runs narrowed, CPU and CUDA: a transpose of the last two
 * dimensions (the CPU's blocked path) and a slice with a step, each with
 * its gradient; a concat and a split. */
static void move_bf16_cases(void)
{
    long shape[] = {2, 5, 3}, stride[] = {15, 1, 5}, sl[] = {2, 2}, sst[] = {15, 2};
    float *x = fvec(30, -1, 1);
    uint16_t hx[30];
    mprt_bf16_narrow(30, x, hx);
    mprt_bf16_widen(30, hx, x);
    strided_bf16_case("transpose", 3, shape, stride, 0, x, hx, 30);
    strided_bf16_case("slice", 2, sl, sst, 1, x, hx, 4);
    long len[] = {2, 3};
    uint16_t cat[30], ccat[30], q0[12], q1[18];
    void *const parts[] = {hx, hx + 12}, *const split[] = {q0, q1};
    mprt_concat(2, 0, 2, 3, 2, len, parts, cat);
    mprt_cu_concat(2, 0, 2, 3, 2, len, parts, ccat);
    same("concat in bf16 (CUDA)", cat, ccat, sizeof cat);
    same("concat in bf16 (a row's first part)", cat, hx, 12);
    mprt_cu_concat(2, 1, 2, 3, 2, len, split, cat);
    same("concat in bf16 (split, first part)", q0, hx, sizeof q0);
    same("concat in bf16 (split, second part)", q1, hx + 12, sizeof q1);
    free(x);
}

static void test_move(void)
{
    /* Transpose (2,3,4) -> (4,2,3) and back */
    long shape[] = {4, 2, 3}, stride[] = {1, 12, 4};
    float *x = fvec(24, -1, 1), y[24], cy[24], dx[24], cdx[24];
    mprt_strided(4, 0, 3, shape, stride, 0, 24, x, y);
    mprt_cu_strided(4, 0, 3, shape, stride, 0, 24, x, cy);
    same("strided", y, cy, sizeof y);
    mprt_strided(4, 1, 3, shape, stride, 0, 24, dx, y);
    mprt_cu_strided(4, 1, 3, shape, stride, 0, 24, cdx, y);
    same("strided (back)", dx, cdx, sizeof dx);
    long len[] = {2, 3};
    float *p0 = fvec(2 * 2 * 5, -1, 1), *p1 = fvec(2 * 3 * 5, -1, 1), cat[50], ccat[50];
    void *const parts[] = {p0, p1};
    mprt_concat(4, 0, 2, 5, 2, len, parts, cat);
    mprt_cu_concat(4, 0, 2, 5, 2, len, parts, ccat);
    same("concat", cat, ccat, sizeof cat);
    float *q0 = fzero(20), *q1 = fzero(30);
    void *const back[] = {q0, q1};
    mprt_cu_concat(4, 1, 2, 5, 2, len, back, cat);
    same("concat (split)", p0, q0, 80);
    same("concat (split)", p1, q1, 120);
    move_bf16_cases();
    int64_t idx[] = {2, 0, -1, 2};
    float gy[2 * 4 * 3], cgy[2 * 4 * 3];
    float *table = fvec(2 * 3 * 3, -1, 1);
    mprt_gather(2, 3, 3, 4, idx, table, gy, "g");
    mprt_cu_gather(2, 3, 3, 4, idx, table, cgy, "g");
    same("gather", gy, cgy, sizeof gy);
    float *gdy = fvec(2 * 4 * 3, -1, 1), gdx[2 * 3 * 3], cgdx[2 * 3 * 3];
    mprt_gather_grad(2, 3, 3, 4, idx, gdy, gdx, "g");   /* row 2 three times, row 1 never */
    mprt_cu_gather_grad(2, 3, 3, 4, idx, gdy, cgdx, "g");
    same("gather_grad", gdx, cgdx, sizeof gdx);
    float f[6] = {1.5f, -2.7f, 0.0f, 3.0f, -0.4f, 255.9f};
    int64_t i64[6], ci64[6];
    uint8_t u8[6], cu8[6];
    mprt_cast(6, MPRT_CAST_F32, MPRT_CAST_I64, f, i64);
    mprt_cu_cast(6, MPRT_CAST_F32, MPRT_CAST_I64, f, ci64);
    same("cast", i64, ci64, sizeof i64);
    mprt_cast(6, MPRT_CAST_F32, MPRT_CAST_BOOL, f, u8);
    mprt_cu_cast(6, MPRT_CAST_F32, MPRT_CAST_BOOL, f, cu8);
    same("cast", u8, cu8, sizeof u8);
    /* Expand of a bool mask (2,1,3) -> (2,4,3) and of int64 (1,3) -> (4,3) */
    long es[] = {2, 4, 3}, est[] = {3, 0, 1}, is[] = {4, 3}, ist[] = {0, 1};
    uint8_t eb[24], ceb[24];
    int64_t ei[12], cei[12];
    mprt_broadcast_bytes(1, 3, es, est, u8, eb);
    mprt_cu_broadcast_bytes(1, 3, es, est, u8, ceb);
    same("broadcast_bytes (bool)", eb, ceb, sizeof eb);
    mprt_broadcast_bytes(8, 2, is, ist, i64, ei);
    mprt_cu_broadcast_bytes(8, 2, is, ist, i64, cei);
    same("broadcast_bytes (int64)", ei, cei, sizeof ei);
    long ws[] = {2, 3}, sc[] = {3, 1}, sa[] = {0, 1}, sb[] = {1, 0};
    uint8_t cond[6] = {1, 0, 1, 1, 0, 0};
    float wy[6], cwy[6];
    mprt_where(2, ws, cond, sc, x, sa, x + 3, sb, wy);
    mprt_cu_where(2, ws, cond, sc, x, sa, x + 3, sb, cwy);
    same("where", wy, cwy, sizeof wy);
    uint64_t bytes[3] = {1, 2, 3}, cbytes[3] = {0, 0, 0};
    mprt_cu_copy_bytes(sizeof bytes, bytes, cbytes);
    same("copy_bytes", bytes, cbytes, sizeof bytes);
    mprt_cu_copy(24, x, cy);
    same("copy", x, cy, sizeof cy);
    for (int coord = MPRT_HALF_PIXEL; coord <= MPRT_ASYMMETRIC; coord++)
        for (int mode = MPRT_NEAREST_FLOOR; mode <= MPRT_LINEAR; mode++) {
            MprtResize r = {6, 3, 4, 7, 9, coord, mode, 7.0f / 3, 9.0f / 4};
            float *rx = fvec(6 * 12, -1, 1), *ry = fzero(6 * 63), *cry = fzero(6 * 63);
            mprt_resize(0, &r, rx, ry);
            mprt_cu_resize(0, &r, rx, cry);
            same("resize", ry, cry, 6 * 63 * 4);
            float *rdx = fzero(6 * 12), *crdx = fzero(6 * 12);
            mprt_resize(1, &r, rdx, ry);
            mprt_cu_resize(1, &r, crdx, ry);
            same("resize (back)", rdx, crdx, 6 * 12 * 4);
            free(rx), free(ry), free(cry), free(rdx), free(crdx);
        }
    free(x), free(p0), free(p1), free(q0), free(q1), free(table);
    report("strided");
    report("concat");
    report("gather");
    report("cast");
    report("where");
    report("copy_bytes");
    report("resize");
}

/* |a - b| within 1e-5 of the sum of magnitudes of b's terms (bound[i]). */
static void close_to(const char *what, const float *cpu, const float *cu, const float *bound,
                     long n)
{
    checks++;
    for (long i = 0; i < n; i++)
        if (!(fabsf(cpu[i] - cu[i]) <= 1e-5f * bound[i] + 1e-30f)) {
            failures++;
            printf("emulate: %s: element %ld is %.9g on the CPU, %.9g in the kernel\n", what, i,
                   cpu[i], cu[i]);
            return;
        }
}

/* The CPU convolution on |x| and |w| (|dy|): each output's bound. */
static void abs_copy(float *d, const float *s, long n)
{
    for (long i = 0; i < n; i++)
        d[i] = fabsf(s[i]);
}

/* The direct kernels' bf16 twins against the float32 kernels on the same
 * bf16 values (x, w and dy rounded in place), each result narrowed: the
 * same sums in the same order, rounded once. */
static void conv_direct_bf16(const MprtConv *p, float *x, float *w, float *dy, long nx, long ny,
                             long nw)
{
    uint16_t *hx = bf16_copy(x, nx), *hw = bf16_copy(w, nw), *hdy = bf16_copy(dy, ny);
    uint16_t *hy = calloc((size_t)ny, 2), *hdx = calloc((size_t)nx, 2), *hdw = calloc((size_t)nw, 2);
    float *y = fzero(ny), *dx = fzero(nx), *dw = fzero(nw);
    void *fa[] = {(void *)p, &x, &w, &y}, *ha[] = {(void *)p, &hx, &hw, &hy};
    mprt_cu_each("conv", ny, fa);
    mprt_cu_each("conv_bf16", ny, ha);
    same_narrowed("conv_bf16 (direct)", y, hy, ny);
    void *fx[] = {(void *)p, &dy, &w, &dx}, *hxa[] = {(void *)p, &hdy, &hw, &hdx};
    mprt_cu_each("conv_grad_x", nx, fx);
    mprt_cu_each("conv_grad_x_bf16", nx, hxa);
    same_narrowed("conv_grad_x_bf16 (direct)", dx, hdx, nx);
    void *fw[] = {(void *)p, &dy, &x, &dw}, *hwa[] = {(void *)p, &hdy, &hx, &hdw};
    mprt_cu_each("conv_grad_w", nw, fw);
    mprt_cu_each("conv_grad_w_bf16", nw, hwa);
    same_narrowed("conv_grad_w_bf16 (direct)", dw, hdw, nw);
    void *all[] = {hx, hw, hdy, hy, hdx, hdw, y, dx, dw};
    for (int k = 0; k < N_OF(all); k++)
        free(all[k]);
}

/* A convolution's bias after its rounded sum, under bf16: the CUDA twin of
 * mprt_bias_round_add, and the bf16 kernel against it on the same values
 * (y a bf16 value, the bias rounded as the CPU's staging rounds it). */
static void test_bias_after(void)
{
    long N = 2, M = 5, P = 7, n = N * M * P;
    float *y = fvec(n, -3, 3), *cy = fzero(n), *b = fvec(M, -1, 1), *rb = fzero(M);
    memcpy(cy, y, (size_t)n * sizeof *y);
    mprt_bias_round_add(n, (int)M, P, b, y);
    mprt_cu_bias_round_add(n, (int)M, P, b, cy);
    same("bias_round_add", y, cy, (size_t)n * 4);
    float *y2 = fvec(n, -3, 3);
    uint16_t *h = bf16_copy(y2, n);
    mprt_bf16_round(M, b, rb);
    mprt_bias_round_add(n, (int)M, P, rb, y2);
    mprt_cu_bias_add_bf16(n, (int)M, P, b, h);
    same_narrowed("bias_add_bf16", y2, h, n);
    free(y), free(cy), free(b), free(rb), free(y2), free(h);
    float *dy = fvec(n, -1, 1), *db = fzero(M), *hdb = fzero(M);
    uint16_t *hdy = bf16_copy(dy, n);
    mprt_cu_channel_sum((int)N, (int)M, P, dy, db);
    mprt_cu_channel_sum_bf16((int)N, (int)M, P, hdy, hdb);
    same("channel_sum_bf16", db, hdb, (size_t)M * 4);
    free(dy), free(db), free(hdb), free(hdy);
    report("bias_round_add");
    report("bias_add_bf16");
    report("channel_sum_bf16");
}

/* The direct convolution kernels of kernels.cu (forward, data and filter
 * gradients) against the CPU's, 2-D and 3-D, with strides, dilations,
 * groups and more padding after than before; then their bf16 twins. */
static void test_conv_direct(void)
{
    static const MprtConv shapes[] = {
        /* N C  D  H  W  M KD KH KW OD OH OW g  sd sh sw dd dh dw pd ph pw */
        {2, 4, 1, 7, 6, 6, 1, 3, 2, 1, 4, 6, 2, 1, 2, 1, 1, 1, 2, 0, 1, 0},
        {2, 3, 5, 6, 4, 4, 2, 3, 3, 3, 3, 4, 1, 2, 2, 1, 2, 1, 1, 1, 0, 1},
    };
    for (int s = 0; s < N_OF(shapes); s++) {
        const MprtConv *p = &shapes[s];
        long nx = (long)p->N * p->C * mprt_conv_in_plane(p);
        long ny = (long)p->N * p->M * mprt_conv_out_plane(p);
        long nw = (long)p->M * (p->C / p->group) * mprt_conv_taps(p);
        long ncol = (long)(p->C / p->group) * mprt_conv_taps(p) * p->N * mprt_conv_out_plane(p) +
                    ny;
        float *x = fvec(nx, -1, 1), *w = fvec(nw, -1, 1), *dy = fvec(ny, -1, 1);
        float *ax = fzero(nx), *aw = fzero(nw), *ady = fzero(ny), *col = fzero(ncol);
        float *y = fzero(ny), *cy = fzero(ny), *by = fzero(ny);
        float *dx = fzero(nx), *cdx = fzero(nx), *bdx = fzero(nx);
        float *dw = fzero(nw), *cdw = fzero(nw), *bdw = fzero(nw);
        abs_copy(ax, x, nx), abs_copy(aw, w, nw), abs_copy(ady, dy, ny);
        mprt_conv(p, x, w, NULL, y, col);
        mprt_conv(p, ax, aw, NULL, by, col);
        void *fa[] = {(void *)p, &x, &w, &cy};
        mprt_cu_each("conv", ny, fa);
        close_to("conv (direct)", y, cy, by, ny);
        mprt_conv_grad_x(p, dy, w, dx, col);
        mprt_conv_grad_x(p, ady, aw, bdx, col);
        void *xa[] = {(void *)p, &dy, &w, &cdx};
        mprt_cu_each("conv_grad_x", nx, xa);
        close_to("conv_grad_x (direct)", dx, cdx, bdx, nx);
        mprt_conv_grad_w(p, dy, x, dw, col);
        mprt_conv_grad_w(p, ady, ax, bdw, col);
        void *wa[] = {(void *)p, &dy, &x, &cdw};
        mprt_cu_each("conv_grad_w", nw, wa);
        close_to("conv_grad_w (direct)", dw, cdw, bdw, nw);
        conv_direct_bf16(p, x, w, dy, nx, ny, nw);
        float *all[] = {x, w, dy, ax, aw, ady, col, y, cy, by, dx, cdx, bdx, dw, cdw, bdw};
        for (int k = 0; k < N_OF(all); k++)
            free(all[k]);
    }
    report("conv (direct)");
    report("conv_grad_x (direct)");
    report("conv_grad_w (direct)");
    report("conv_bf16 (direct)");
    report("conv_grad_x_bf16 (direct)");
    report("conv_grad_w_bf16 (direct)");
}

/* Cast between float32 and float16 (every float16, and float32 values
 * across the range: ties, subnormals, past 65504, NaN) and float64. */
static void test_cast_float(void)
{
    enum { NH = 65536, NF = NH + 4096 };
    uint16_t *h = malloc(NH * 2), *fh = malloc(NF * 2), *cfh = malloc(NF * 2);
    float *hf = malloc(NF * 4), *chf = malloc(NF * 4), *f = malloc(NF * 4);
    for (int i = 0; i < NH; i++)
        h[i] = (uint16_t)i;
    mprt_cast(NH, MPRT_CAST_F16, MPRT_CAST_F32, h, hf);
    mprt_cu_cast(NH, MPRT_CAST_F16, MPRT_CAST_F32, h, chf);
    same("cast (float16 to float32)", hf, chf, NH * 4);
    for (int i = 0; i < NH; i++)   /* each float16 and the midpoint above it */
        f[i] = i & 1 ? hf[i / 2] : hf[i / 2] * (1 + 1.0f / 2048);
    uint32_t bits = 12345;
    for (int i = NH; i < NF; i++) {
        bits = bits * 1664525u + 1013904223u;
        memcpy(&f[i], &bits, 4);
    }
    mprt_cast(NF, MPRT_CAST_F32, MPRT_CAST_F16, f, fh);
    mprt_cu_cast(NF, MPRT_CAST_F32, MPRT_CAST_F16, f, cfh);
    same("cast (float32 to float16)", fh, cfh, NF * 2);
    double *d = malloc(NF * 8), *cd = malloc(NF * 8);
    mprt_cast(NF, MPRT_CAST_F32, MPRT_CAST_F64, f, d);
    mprt_cu_cast(NF, MPRT_CAST_F32, MPRT_CAST_F64, f, cd);
    same("cast (float32 to float64)", d, cd, NF * 8);
    mprt_cast(NF, MPRT_CAST_F64, MPRT_CAST_F32, d, hf);
    mprt_cu_cast(NF, MPRT_CAST_F64, MPRT_CAST_F32, d, chf);
    same("cast (float64 to float32)", hf, chf, NF * 4);
    free(h), free(fh), free(cfh), free(hf), free(chf), free(f), free(d), free(cd);
    report("cast (float16 to float32)");
    report("cast (float32 to float16)");
    report("cast (float32 to float64)");
    report("cast (float64 to float32)");
}

/* bf16 storage: every bf16 widened, and float32 values of every kind
 * (each bf16, the midpoints between neighbours, random bits, NaN) narrowed
 * and rounded. */
static void test_bf16(void)
{
    enum { NH = 65536, NF = 2 * NH + 4096 };
    uint16_t *h = malloc(NH * 2), *fh = malloc(NF * 2), *cfh = malloc(NF * 2);
    float *hf = malloc(NH * 4), *chf = malloc(NH * 4), *f = malloc(NF * 4);
    float *r = malloc(NF * 4), *cr = malloc(NF * 4);
    for (int i = 0; i < NH; i++)
        h[i] = (uint16_t)i;
    mprt_bf16_widen(NH, h, hf);
    mprt_cu_bf16_widen(NH, h, chf);   /* whole aligned chunks of 8 */
    same("bf16_widen", hf, chf, NH * 4);
    memset(chf, 0, NH * 4);
    mprt_cu_bf16_widen(NH - 1, h + 1, chf + 1);   /* one element a thread */
    same("bf16_widen (unaligned)", hf + 1, chf + 1, (NH - 1) * 4);
    for (int i = 0; i < 2 * NH; i++) {   /* each bf16 and the midpoint above it */
        uint32_t b = (uint32_t)(i / 2) << 16 | (i & 1 ? 0x8000u : 0);
        memcpy(&f[i], &b, 4);
    }
    uint32_t bits = 12345;
    for (int i = 2 * NH; i < NF; i++) {
        bits = bits * 1664525u + 1013904223u;
        memcpy(&f[i], &bits, 4);
    }
    mprt_bf16_narrow(NF, f, fh);
    mprt_cu_bf16_narrow(NF, f, cfh);
    same("bf16_narrow", fh, cfh, NF * 2);
    memset(cfh, 0, NF * 2);
    mprt_cu_bf16_narrow(NF - 3, f + 3, cfh + 3);
    same("bf16_narrow (unaligned)", fh + 3, cfh + 3, (NF - 3) * 2);
    mprt_bf16_round(NF, f, r);
    mprt_cu_bf16_round(NF, f, cr);
    same("bf16_round", r, cr, NF * 4);
    free(h), free(fh), free(cfh), free(hf), free(chf), free(f), free(r), free(cr);
    report("bf16_widen");
    report("bf16_narrow");
    report("bf16_round");
}

static void test_update(void)
{
    long n = 100;
    float *g = fvec(n, -1, 1), *sum = fzero(n), *csum = fvec(n, 3, 4);
    mprt_accumulate(n, sum, g, 1);
    mprt_cu_accumulate(n, csum, g, 1);
    mprt_accumulate(n, sum, g, 0);
    mprt_cu_accumulate(n, csum, g, 0);
    same("accumulate", sum, csum, (size_t)n * 4);
    float *w = fvec(n, -1, 1), *cw = copy_of(w, (size_t)n * 4), *buf = fzero(n), *cbuf = fzero(n);
    for (int step = 0; step < 3; step++) {
        mprt_sgd(n, w, g, buf, 0.5f, 0.1f, 0.9f, 1e-4f, step == 2, step == 0);
        mprt_cu_sgd(n, cw, g, cbuf, 0.5f, 0.1f, 0.9f, 1e-4f, step == 2, step == 0);
    }
    same("sgd", w, cw, (size_t)n * 4);
    float *m = fzero(n), *v = fzero(n), *cm = fzero(n), *cv = fzero(n);
    for (long step = 1; step <= 3; step++) {
        mprt_adamw(n, w, g, m, v, 0.5f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
        mprt_cu_adamw(n, cw, g, cm, cv, 0.5f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
    }
    same("adamw", w, cw, (size_t)n * 4);
    double sq[3] = {0.75, 2.5, 1.25e-3};   /* --clip-norm: the factor on the GPU */
    float factor = mprt_clip_scale(3, sq, 0.5f), cfactor = -1.0f;
    mprt_cu->clip = &cfactor;
    mprt_cu_clip_factor(3, sq, 0.5f);
    same("clip_factor", &factor, &cfactor, sizeof factor);
    mprt_sgd(n, w, g, buf, 0.5f * factor, 0.1f, 0.9f, 1e-4f, 0, 0);
    mprt_cu_sgd(n, cw, g, cbuf, 0.5f, 0.1f, 0.9f, 1e-4f, 0, 0);   /* times *clip */
    same("sgd (clipped)", w, cw, (size_t)n * 4);
    mprt_cu->clip_on = 0, mprt_cu->clip = NULL;
    float *y = fzero(n), *cy = fzero(n);
    uint8_t mask[100], cmask[100];
    mprt_dropout_mb = 3;
    mprt_dropout(n, 7, 0.3f, 1, g, y, mask);
    mprt_cu_dropout(n, 7, 0.3f, 1, g, cy, cmask);
    same("dropout", y, cy, (size_t)n * 4);
    same("dropout (mask)", mask, cmask, sizeof mask);
    mprt_dropout_grad(n, 7, 0.3f, g, y);
    mprt_cu_dropout_grad(n, 7, 0.3f, g, cy);
    same("dropout_grad", y, cy, (size_t)n * 4);
    {   /* the bf16 twins: the same mask, the kept values scaled and rounded once */
        uint16_t *hg = bf16_copy(g, n), *hy = calloc((size_t)n, 2);
        mprt_dropout(n, 7, 0.3f, 1, g, y, mask);
        mprt_cu_dropout_bf16(n, 7, 0.3f, 1, hg, hy, cmask);
        same_narrowed("dropout_bf16", y, hy, n);
        same("dropout_bf16 (mask)", mask, cmask, sizeof mask);
        mprt_dropout_grad(n, 7, 0.3f, g, y);
        mprt_cu_dropout_grad_bf16(n, 7, 0.3f, hg, hy);
        same_narrowed("dropout_grad_bf16", y, hy, n);
        free(hg), free(hy);
    }
    float rx[12], ry[12], cry[12], rdx[12], crdx[12];
    for (int i = 0; i < 12; i++)
        rx[i] = frand(-1, 1);
    mprt_relu(12, rx, ry);
    mprt_cu_relu(12, rx, cry);
    same("relu", ry, cry, sizeof ry);
    mprt_relu_grad(12, rx, ry, rdx);
    mprt_cu_relu_grad(12, rx, ry, crdx);
    same("relu_grad", rdx, crdx, sizeof rdx);
    free(g), free(sum), free(csum), free(w), free(cw), free(buf), free(cbuf), free(m), free(v),
        free(cm), free(cv), free(y), free(cy);
    report("accumulate");
    report("sgd");
    report("adamw");
    report("clip_factor");
    report("dropout");
    report("dropout_bf16");
    report("relu");
}

/* --clip-norm's squared norm: the CUDA kernels' lanes, groups and halving
 * give the CPU's double bit for bit, at sizes below, at and above the lane
 * count; and both are the plain sum of squares up to rounding. */
static void test_sq_norm(void)
{
    static const long sizes[] = {1, 300, 256L * 128, 100001};
    double part[128];
    mprt_emu_device.norm_part = part;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        long n = sizes[k];
        float *g = fvec(n, -2, 2);
        double cpu = -1, cu = -2, plain = 0;
        mprt_sq_norm(n, g, 0.25f, &cpu);
        mprt_cu_sq_norm(n, g, 0.25f, &cu);
        same("sq_norm", &cpu, &cu, sizeof cpu);
        for (long i = 0; i < n; i++)
            plain += (double)(g[i] * 0.25f) * (g[i] * 0.25f);
        checks++;
        if (fabs(cpu - plain) > 1e-12 * plain) {
            fprintf(stderr, "emulate: sq_norm of %ld: %.17g, the plain sum %.17g\n", n, cpu, plain);
            failures++;
        }
        free(g);
    }
    mprt_emu_device.norm_part = NULL;
    report("sq_norm");
}

/* ---- fused elementwise chains ---- */

/* Operand k of the chain (or the constant p) broadcast into a dense tensor
 * of the output's shape, as the unfused kernels would read it. */
static float *ew_dense(const MprtEwChain *c, const float *const *x, int k, float p, long n)
{
    float *d = fzero(n);
    if (k < 0) {
        for (long i = 0; i < n; i++)
            d[i] = p;
        return d;
    }
    long shape[8];
    for (int i = 0; i < c->rank; i++)
        shape[i] = c->shape[i];
    mprt_broadcast_bytes(4, c->rank, shape, c->stride[k], x[k], d);
    return d;
}

/* The chain run as its unfused kernels, one call and one tensor per step. */
static void ew_unfused(const MprtEwChain *c, const float *const *x, float *y)
{
    long n = 1, shape[8], dense[8];
    for (int i = 0; i < c->rank; i++)
        shape[i] = c->shape[i], n *= c->shape[i];
    for (int i = c->rank - 1, k = 1; i >= 0; k *= (int)c->shape[i], i--)
        dense[i] = k;
    float *v = fzero(n), *w = fzero(n);
    for (int s = 0; s < c->nsteps; s++) {
        const MprtEwStep *t = &c->step[s];
        float *u = t->kind == MPRT_EW_UNARY || t->kind == MPRT_EW_RELU ? NULL
                 : ew_dense(c, x, t->a, t->p, n);
        float *b = t->kind == MPRT_EW_UNARY_GRAD ? ew_dense(c, x, t->b, 0, n) : NULL;
        switch (t->kind) {
        case MPRT_EW_LOAD: memcpy(w, u, (size_t)n * 4); break;
        case MPRT_EW_UNARY: mprt_unary(t->op, n, t->p, t->q, v, w); break;
        case MPRT_EW_RELU: mprt_relu(n, v, w); break;
        case MPRT_EW_BINARY:
            mprt_binary(t->op, c->rank, shape, t->swap ? u : v, dense, t->swap ? v : u, dense, w);
            break;
        case MPRT_EW_UNARY_GRAD: mprt_unary_grad(t->op, n, t->p, t->q, v, u, b, w); break;
        default: mprt_relu_grad(n, v, u, w); break;
        }
        if (t->round)
            mprt_bf16_round(n, w, w);
        float *tmp = v;
        v = w, w = tmp;
        free(u), free(b);
    }
    memcpy(y, v, (size_t)n * 4);
    free(v), free(w);
}

static long ew_numel(const MprtEwChain *c)
{
    long n = 1;
    for (int i = 0; i < c->rank; i++)
        n *= c->shape[i];
    return n;
}

/* The elements operand k spans: its last one's offset, plus one. */
static long ew_extent(const MprtEwChain *c, int k)
{
    long e = 1;
    for (int i = 0; i < c->rank; i++)
        e += (c->shape[i] - 1) * c->stride[k][i];
    return e;
}

/* The chain under bf16: its even operands and its output stored in bf16,
 * its odd steps rounded, against the unfused kernels with the staging the
 * code generator writes around them: the operands widened, the rounded
 * steps' values rounded, the output narrowed. The CUDA twin against the
 * CPU's, bit for bit. */
static void ew_bf16_case(const char *what, const MprtEwChain *c32, const float *const *x)
{
    MprtEwChain c = *c32;
    long n = ew_numel(&c);
    uint16_t *half[MPRT_EW_OPERANDS] = {0};
    float *wide[MPRT_EW_OPERANDS] = {0};
    const void *stored[MPRT_EW_OPERANDS] = {0};
    const float *read[MPRT_EW_OPERANDS] = {0};
    c.bf16 = MPRT_EW_OUT_BF16;
    for (int k = 0; k < c.nops; k++) {
        stored[k] = read[k] = x[k];
        if (k % 2)
            continue;
        long e = ew_extent(&c, k);
        half[k] = malloc((size_t)e * sizeof *half[k]), wide[k] = fzero(e);
        mprt_bf16_narrow(e, x[k], half[k]);
        mprt_bf16_widen(e, half[k], wide[k]);
        stored[k] = half[k], read[k] = wide[k];
        c.bf16 |= 1 << k;
    }
    for (int s = 1; s < c.nsteps; s += 2)
        c.step[s].round = 1;
    MprtEwChain unfused = c;
    unfused.bf16 = 0;
    float *ref = fzero(n);
    uint16_t *want = calloc((size_t)n, 2), *y = calloc((size_t)n, 2), *cy = calloc((size_t)n, 2);
    ew_unfused(&unfused, read, ref);
    mprt_bf16_narrow(n, ref, want);
    mprt_ew_chain(&c, stored, y);
    mprt_cu_ew_chain(&c, stored, cy);
    char name[96];
    snprintf(name, sizeof name, "ew_chain %s in bf16 (against the unfused kernels)", what);
    same(name, want, y, (size_t)n * 2);
    snprintf(name, sizeof name, "ew_chain %s in bf16 (CUDA)", what);
    same(name, y, cy, (size_t)n * 2);
    for (int k = 0; k < c.nops; k++)
        free(half[k]), free(wide[k]);
    free(ref), free(want), free(y), free(cy);
}

/* The fused CPU kernel against the unfused sequence, and the CUDA twin
 * against the fused CPU kernel, bit for bit; then the same in bf16. */
static void ew_case(const char *what, const MprtEwChain *c, const float *const *x)
{
    long n = ew_numel(c);
    float *ref = fzero(n), *y = fvec(n, 5, 6), *cy = fvec(n, 7, 8);
    const void *const *stored = (const void *const *)x;
    ew_unfused(c, x, ref);
    mprt_ew_chain(c, stored, y);
    mprt_cu_ew_chain(c, stored, cy);
    char name[96];
    snprintf(name, sizeof name, "ew_chain %s (against the unfused kernels)", what);
    same(name, ref, y, (size_t)n * 4);
    snprintf(name, sizeof name, "ew_chain %s (CUDA)", what);
    same(name, y, cy, (size_t)n * 4);
    free(ref), free(y), free(cy);
    ew_bf16_case(what, c, x);
}

static MprtEwStep ew_step(int kind, int op, int a, int b, int swap, float p, float q)
{
    MprtEwStep t = {kind, op, a, b, swap, 0, p, q};
    return t;
}

/* (2,3,4,5): Add(bias (1,3,1,1), x) -> Relu, as a residual block's end;
 * then Mul by a constant, Sub from a row (1,1,1,5) and every unary op. */
static void ew_forward_cases(void)
{
    MprtEwChain c = {4, 3, 0, 0, {2, 3, 4, 5}, {{0, 1, 0, 0}, {60, 20, 5, 1}, {0, 0, 0, 1}},
                     {{0}}};
    float *bias = fvec(3, -1, 1), *x = fvec(120, -2, 2), *row = fvec(5, -1, 1);
    x[7] = NAN, x[8] = -0.0f, x[9] = INFINITY;
    const float *const ops[] = {bias, x, row};
    c.step[c.nsteps++] = ew_step(MPRT_EW_LOAD, 0, 0, -1, 0, 0, 0);
    c.step[c.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_ADD, 1, -1, 0, 0, 0);
    c.step[c.nsteps++] = ew_step(MPRT_EW_RELU, 0, -1, -1, 0, 0, 0);
    ew_case("add relu", &c, ops);
    c.step[c.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_MUL, -1, -1, 0, 0.5f, 0);
    c.step[c.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_SUB, 2, -1, 1, 0, 0);
    ew_case("add relu mul sub", &c, ops);
    static const float pq[][2] = {[MPRT_HARD_SIGMOID] = {0.2f, 0.5f},
                                  [MPRT_LEAKY_RELU] = {0.01f, 0.0f}, [MPRT_ELU] = {1.5f, 0.0f},
                                  [MPRT_SELU] = {1.67326319f, 1.05070102f},
                                  [MPRT_GELU] = {0.0f, 1.0f}, [MPRT_CLIP] = {-1.0f, 2.0f}};
    for (int op = MPRT_ERF; op <= MPRT_CLIP; op++) {
        MprtEwChain u = c;
        u.step[u.nsteps++] = ew_step(MPRT_EW_UNARY, op, -1, -1, 0, pq[op][0], pq[op][1]);
        u.step[u.nsteps++] = ew_step(MPRT_EW_BINARY, op % 2 ? MPRT_DIV : MPRT_ADD, 0, -1, op % 3,
                                     0, 0);
        char what[32];
        snprintf(what, sizeof what, "unary %d", op);
        ew_case(what, &u, ops);
    }
    c.nsteps = 0;   /* a constant first, a power, the most steps */
    c.step[c.nsteps++] = ew_step(MPRT_EW_LOAD, 0, -1, -1, 0, 1.5f, 0);
    c.step[c.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_SUB, 1, -1, 0, 0, 0);
    for (int k = c.nsteps; k < MPRT_EW_STEPS; k++)
        c.step[c.nsteps++] = ew_step(MPRT_EW_BINARY, k % 2 ? MPRT_POW : MPRT_MUL, k % 2 ? -1 : 2,
                                     -1, 0, 2.0f, 0);
    ew_case("constant sub pow mul", &c, ops);
    /* (2,3,4,8): whole chunks of 8 along the last dim (kernels.cu's
     * mprt_k_ew_chain_chunks), the bias broadcast along it, the row not */
    MprtEwChain k = {4, 3, 0, 0, {2, 3, 4, 8}, {{0, 1, 0, 0}, {96, 32, 8, 1}, {0, 0, 0, 1}},
                     {{0}}};
    float *kx = fvec(192, -2, 2), *krow = fvec(8, -1, 1);
    kx[7] = NAN, kx[8] = -0.0f, kx[9] = INFINITY;
    const float *const kops[] = {bias, kx, krow};
    k.step[k.nsteps++] = ew_step(MPRT_EW_LOAD, 0, 0, -1, 0, 0, 0);
    k.step[k.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_ADD, 1, -1, 0, 0, 0);
    k.step[k.nsteps++] = ew_step(MPRT_EW_RELU, 0, -1, -1, 0, 0, 0);
    k.step[k.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_MUL, -1, -1, 0, 0.5f, 0);
    k.step[k.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_SUB, 2, -1, 1, 0, 0);
    k.step[k.nsteps++] = ew_step(MPRT_EW_UNARY, MPRT_GELU, -1, -1, 0, 0, 0);
    ew_case("add relu mul sub gelu (chunks of 8)", &k, kops);
    free(bias), free(x), free(row), free(kx), free(krow);
}

/* The backward: dy = a * b -> Gelu's gradient -> a Sum with v on the right
 * -> Relu's gradient, over (3,1500) (rows of more than a tile), then with
 * operands read across their rows (a transposed x and y), and a chain of
 * one element (rank 0). */
static void ew_backward_cases(void)
{
    long n = 3 * 1500;
    MprtEwChain c = {2, 5, 0, 0, {3, 1500},
                     {{1500, 1}, {0, 1}, {1500, 1}, {1500, 1}, {1500, 1}}, {{0}}};
    float *a = fvec(n, -2, 2), *b = fvec(1500, -1, 1), *gx = fvec(n, -3, 3);
    float *other = fvec(n, -1, 1);
    float *gy = fzero(n), *ry = fvec(n, -1, 1);
    mprt_unary(MPRT_GELU, n, 0, 0, gx, gy);
    const float *const ops[] = {a, b, gx, gy, other};
    c.step[c.nsteps++] = ew_step(MPRT_EW_LOAD, 0, 0, -1, 0, 0, 0);
    c.step[c.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_MUL, 1, -1, 0, 0, 0);
    c.step[c.nsteps++] = ew_step(MPRT_EW_UNARY_GRAD, MPRT_GELU, 2, 3, 0, 0, 0);
    c.step[c.nsteps++] = ew_step(MPRT_EW_BINARY, MPRT_ADD, 4, -1, 1, 0, 0);
    ew_case("mul gelu_grad sum", &c, ops);
    const float *const ops2[] = {a, b, gx, gy, ry};
    c.step[c.nsteps - 1] = ew_step(MPRT_EW_RELU_GRAD, 0, 4, -1, 0, 0, 0);
    ew_case("mul gelu_grad relu_grad", &c, ops2);
    c.stride[2][0] = c.stride[3][0] = 1, c.stride[2][1] = c.stride[3][1] = 3;
    ew_case("mul gelu_grad relu_grad (transposed)", &c, ops2);
    MprtEwChain s = {0, 1, 3, 0, {0}, {{0}}, {{0}}};
    s.step[0] = ew_step(MPRT_EW_LOAD, 0, 0, -1, 0, 0, 0);
    s.step[1] = ew_step(MPRT_EW_UNARY, MPRT_TANH, -1, -1, 0, 0, 0);
    s.step[2] = ew_step(MPRT_EW_BINARY, MPRT_DIV, -1, -1, 1, 3.0f, 0);
    ew_case("scalar", &s, ops);
    /* (3,1504): rows of whole chunks of 8, the bias's too */
    c.stride[2][1] = c.stride[3][1] = 1;
    c.shape[1] = 1504;
    for (int k = 0; k < c.nops; k++)
        c.stride[k][0] = k == 1 ? 0 : 1504;
    float *ka = fvec(3 * 1504, -2, 2), *kb = fvec(1504, -1, 1), *kgx = fvec(3 * 1504, -3, 3);
    float *kgy = fzero(3 * 1504), *kry = fvec(3 * 1504, -1, 1);
    mprt_unary(MPRT_GELU, 3 * 1504, 0, 0, kgx, kgy);
    const float *const kops[] = {ka, kb, kgx, kgy, kry};
    ew_case("mul gelu_grad relu_grad (chunks of 8)", &c, kops);
    free(ka), free(kb), free(kgx), free(kgy), free(kry);
    free(a), free(b), free(gx), free(other), free(gy), free(ry);
}

static void test_ew_chain(void)
{
    ew_forward_cases();
    ew_backward_cases();
    report("ew_chain");
}

/* x rounded to bf16 in place; its bf16 copy. */
static uint16_t *bf16_copy(float *x, long n)
{
    uint16_t *h = malloc((size_t)n * sizeof *h);
    mprt_bf16_narrow(n, x, h);
    mprt_bf16_widen(n, h, x);
    return h;
}

/* y narrowed, against the bf16 twin's result h. */
static void same_narrowed(const char *what, const float *y, const uint16_t *h, long n)
{
    uint16_t *want = malloc((size_t)n * sizeof *want);
    mprt_bf16_narrow(n, y, want);
    same(what, want, h, (size_t)n * sizeof *want);
    free(want);
}

/* The row kernels' bf16 twins against the CPU's float32 kernels on the
 * widened values, each result narrowed (the CPU's conversions): Softmax
 * over a middle axis and its gradient, LayerNorm and its gradient. */
static void test_rows_bf16(void)
{
    long n = 3 * 4 * 5, rows = 5, D = 12;
    float *x = fvec(n, -3, 3), *dy = fvec(n, -1, 1), *y = fzero(n), *dx = fzero(n);
    uint16_t *hx = bf16_copy(x, n), *hdy = bf16_copy(dy, n), *hy = calloc((size_t)n, 2);
    uint16_t *hdx = calloc((size_t)n, 2);
    mprt_softmax(3, 4, 5, x, y);
    mprt_cu_softmax_bf16(3, 4, 5, hx, hy);
    same_narrowed("softmax_bf16", y, hy, n);
    mprt_bf16_widen(n, hy, y);
    mprt_softmax_grad(3, 4, 5, dy, y, dx);
    mprt_cu_softmax_grad_bf16(3, 4, 5, hdy, hy, hdx);
    same_narrowed("softmax_grad_bf16", dx, hdx, n);
    float *ls = fvec(D, 0.5f, 1.5f), *lb = fvec(D, -1, 1), m[5], r[5], cm[5], cr[5];
    float ds[12], db[12], cds[12], cdb[12];
    mprt_layernorm(rows, D, x, ls, lb, 1e-5f, y, m, r);
    mprt_cu_layernorm_bf16(rows, D, hx, ls, lb, 1e-5f, hy, cm, cr);
    same_narrowed("layernorm_bf16", y, hy, rows * D);
    same("layernorm_bf16 (mean)", m, cm, sizeof m);
    same("layernorm_bf16 (rstd)", r, cr, sizeof r);
    mprt_layernorm_grad(rows, D, dy, x, ls, m, r, dx, ds, db);
    mprt_cu_layernorm_grad_bf16(rows, D, hdy, hx, ls, m, r, hdx, cds, cdb);
    same_narrowed("layernorm_grad_bf16 (dx)", dx, hdx, rows * D);
    same("layernorm_grad_bf16 (dscale)", ds, cds, sizeof ds);
    same("layernorm_grad_bf16 (dbias)", db, cdb, sizeof db);
    free(x), free(dy), free(y), free(dx), free(hx), free(hdy), free(hy), free(hdx);
    free(ls), free(lb);
    report("softmax_bf16");
    report("softmax_grad_bf16");
    report("layernorm_bf16");
    report("layernorm_grad_bf16");
}

/* The softmax's gradient as its formula gives it, dx = y * (dy - sum dy
 * * y), the sum in double in order: what the kernels give, but for the
 * sign of a zero where y is 0 (they write +0 there without reading dy). */
static void softmax_grad_formula(long rows, long C, const float *dy, const float *y, float *dx)
{
    for (long r = 0; r < rows; r++) {
        double dot = 0;
        for (long c = 0; c < C; c++)
            dot += (double)dy[r * C + c] * y[r * C + c];
        for (long c = 0; c < C; c++)
            dx[r * C + c] = y[r * C + c] * (dy[r * C + c] - (float)dot);
    }
}

/* Whether a and b hold the same n numbers, a zero's sign aside. */
static void same_values(const char *what, const float *a, const float *b, long n)
{
    float *pa = malloc((size_t)n * 4), *pb = malloc((size_t)n * 4);
    for (long i = 0; i < n; i++)
        pa[i] = a[i] == 0.0f ? 0.0f : a[i], pb[i] = b[i] == 0.0f ? 0.0f : b[i];
    same(what, pa, pb, (size_t)n * 4);
    free(pa), free(pb);
}

/* The gradient of a causal softmax's output y (rows x C): the CPU's and
 * the CUDA kernel's against the formula, and against each other bit for
 * bit; and the bf16 twin (y rounded to bf16 in place). */
static void test_softmax_grad_masked(long rows, long C, float *y)
{
    long N = rows * C;
    float *dy = fvec(N, -1, 1), *want = fzero(N), *dx = fzero(N), *cdx = fzero(N);
    softmax_grad_formula(rows, C, dy, y, want);
    mprt_softmax_grad(rows, C, 1, dy, y, dx);
    same_values("softmax_grad of a masked softmax (the formula)", want, dx, N);
    mprt_cu_softmax_grad(rows, C, 1, dy, y, cdx);
    same("softmax_grad of a masked softmax", dx, cdx, (size_t)N * 4);
    uint16_t *hdy = bf16_copy(dy, N), *hy = bf16_copy(y, N), *hdx = calloc((size_t)N, 2);
    float *wdy = fzero(N), *wy = fzero(N);
    mprt_bf16_widen(N, hdy, wdy), mprt_bf16_widen(N, hy, wy);
    mprt_softmax_grad(rows, C, 1, wdy, wy, dx);
    mprt_cu_softmax_grad_bf16(rows, C, 1, hdy, hy, hdx);
    same_narrowed("softmax_grad_bf16 of a masked softmax", dx, hdx, N);
    free(dy), free(want), free(dx), free(cdx), free(hdy), free(hy), free(hdx), free(wdy);
    free(wy);
}

/* SoftmaxBias (simplify.c's rewrite of Softmax(x + c)): the CPU's kernel
 * against the Add and the Softmax it replaces, the sum rounded to bf16 or
 * not, and its twins against it; the bias a causal mask, -inf above the
 * diagonal, taken in turn by x's rows (the kernels read no x, and take no
 * exponential, past a row's diagonal); then the gradient of its output.
 * Rows of 5, and of 70 (past the CPU's blocks of 64). */
static void test_softmax_bias(int ROWS, int C, int BROWS)
{
    long N = (long)ROWS * C;
    float *x = fvec(N, -3, 3), *b = fzero((long)BROWS * C), *sum = fzero(N);
    float *want = fzero(N), *y = fzero(N), *cy = fzero(N);
    for (int i = 0; i < BROWS * C; i++)
        b[i] = i % C > i / C ? -INFINITY : frand(-1, 1);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++)
            sum[i] = x[i] + b[(i / C % BROWS) * C + i % C];
        if (round)
            free(bf16_copy(sum, N));
        mprt_softmax(ROWS, C, 1, sum, want);
        mprt_softmax_bias(ROWS, C, BROWS, round, x, b, y);
        same(round ? "softmax_bias, rounded (the Add and the Softmax)"
                   : "softmax_bias (the Add and the Softmax)", want, y, (size_t)N * 4);
        mprt_cu_softmax_bias(ROWS, C, BROWS, round, x, b, cy);
        same(round ? "softmax_bias, rounded" : "softmax_bias", y, cy, (size_t)N * 4);
    }
    test_softmax_grad_masked(ROWS, C, y);
    uint16_t *hx = bf16_copy(x, N), *hy = calloc((size_t)N, 2);
    mprt_softmax_bias(ROWS, C, BROWS, 1, x, b, y);
    mprt_cu_softmax_bias_bf16(ROWS, C, BROWS, hx, b, hy);
    same_narrowed("softmax_bias_bf16", y, hy, N);
    free(x), free(hx), free(hy), free(b), free(sum), free(want), free(y), free(cy);
    report("softmax_bias");
    report("softmax_bias_bf16");
}

/* x + bias over the class axis of (N, C, D) scores, as the Add that
 * graph/loss.c folds into the loss computes it. */
static float *biased(int N, int C, long D, const float *x, const float *bias)
{
    float *y = malloc((size_t)N * C * D * sizeof *y);
    for (long i = 0; i < (long)N * C * D; i++)
        y[i] = x[i] + bias[i / D % C];
    return y;
}

/* The cross-entropy of scores plus a bias (graph/loss.c folds a head's
 * bias Add into it): on the CPU the loss, log-sum-exp and gradient of the
 * Add's output bit for bit, then the CUDA kernels against the CPU's. */
static void test_sce_lse_bias(int N, int C, long D, const float *x, const int64_t *labels,
                              float dl)
{
    long NL = (long)N * D, NX = NL * C;
    float *bias = fvec(C, -2, 2), *xb = biased(N, C, D, x, bias), l1, l2;
    float *lse = malloc(NL * sizeof *lse), *clse = malloc(NL * sizeof *clse);
    float *want = malloc(NX * sizeof *want), *dx = malloc(NX * sizeof *dx);
    mprt_sce_lse(N, C, D, xb, NULL, labels, -100, &l1, lse);
    mprt_sce_lse(N, C, D, x, bias, labels, -100, &l2, clse);
    same("sce_lse_bias (the Add's loss)", &l1, &l2, 4);
    same("sce_lse_bias (the Add's log-sum-exp)", lse, clse, NL * sizeof *lse);
    mprt_sce_lse_grad(N, C, D, &dl, xb, NULL, lse, labels, -100, want);
    mprt_sce_lse_grad(N, C, D, &dl, x, bias, lse, labels, -100, dx);
    same("sce_lse_grad_bias (the Add's gradient)", want, dx, NX * sizeof *dx);
    mprt_cu_sce_lse(N, C, D, x, bias, labels, -100, &l1, clse);
    same("sce_lse_bias", &l2, &l1, 4);
    same("sce_lse_bias (log-sum-exp)", lse, clse, NL * sizeof *lse);
    mprt_cu_sce_lse_grad(N, C, D, &dl, x, bias, lse, labels, -100, want);
    same("sce_lse_grad_bias", dx, want, NX * sizeof *dx);
    free(bias), free(xb), free(lse), free(clse), free(want), free(dx);
    report("sce_lse_bias");
    report("sce_lse_grad_bias");
}

/* The same on bf16 scores (x holds their values widened, hx the bf16). */
static void test_sce_lse_bias_bf16(int N, int C, long D, const float *x, const uint16_t *hx,
                                   const int64_t *labels, float dl)
{
    long NL = (long)N * D, NX = NL * C;
    float *bias = fvec(C, -2, 2), l1, l2;
    float *lse = malloc(NL * sizeof *lse), *clse = malloc(NL * sizeof *clse);
    float *dx = malloc(NX * sizeof *dx);
    uint16_t *hdx = malloc(NX * sizeof *hdx);
    mprt_sce_lse(N, C, D, x, bias, labels, -100, &l1, lse);
    mprt_cu_sce_lse_bf16(N, C, D, hx, bias, labels, -100, &l2, clse);
    same("sce_lse_bias_bf16", &l1, &l2, 4);
    same("sce_lse_bias_bf16 (log-sum-exp)", lse, clse, NL * sizeof *lse);
    mprt_sce_lse_grad(N, C, D, &dl, x, bias, lse, labels, -100, dx);
    mprt_cu_sce_lse_grad_bf16(N, C, D, &dl, hx, 1, bias, lse, labels, -100, hdx);
    same_narrowed("sce_lse_grad_bias_bf16", dx, hdx, NX);
    free(bias), free(lse), free(clse), free(dx), free(hdx);
    report("sce_lse_bias_bf16");
    report("sce_lse_grad_bias_bf16");
}

/* The cross-entropy that keeps each row's log-sum-exp (graph/loss.c's
 * mpcc_lse): on the CPU the loss and the gradient of the one that keeps
 * the log-probabilities, bit for bit; its twins against it, on float32
 * and bf16 scores (the gradient into bf16 from either). */
static void test_sce_lse(void)
{
    enum { N = 3, C = 4, D = 5, NL = N * D, NX = N * C * D };
    float *x = fvec(NX, -3, 1), logp[NX], lse[NL], clse[NL], dx[NX], want[NX], cdx[NX];
    float l1, l2, dl = 0.75f;
    int64_t labels[NL];
    for (int i = 0; i < NL; i++)
        labels[i] = i % 4 == 3 ? -100 : (int64_t)frand(0, (float)C);
    mprt_sce(N, C, D, x, labels, -100, &l1, logp);
    mprt_sce_lse(N, C, D, x, NULL, labels, -100, &l2, lse);
    same("sce_lse (mprt_sce's loss)", &l1, &l2, 4);
    mprt_sce_grad(N, C, D, &dl, logp, labels, -100, want);
    mprt_sce_lse_grad(N, C, D, &dl, x, NULL, lse, labels, -100, dx);
    same("sce_lse_grad (mprt_sce_grad's)", want, dx, sizeof dx);
    mprt_cu_sce_lse(N, C, D, x, NULL, labels, -100, &l1, clse);
    same("sce_lse", &l2, &l1, 4);
    same("sce_lse (log-sum-exp)", lse, clse, sizeof lse);
    mprt_cu_sce_lse_grad(N, C, D, &dl, x, NULL, lse, labels, -100, cdx);
    same("sce_lse_grad", dx, cdx, sizeof dx);
    uint16_t hdx[NX];
    mprt_cu_sce_lse_grad_bf16(N, C, D, &dl, x, 0, NULL, lse, labels, -100, hdx);
    same_narrowed("sce_lse_grad_bf16 (float32 scores)", dx, hdx, NX);
    test_sce_lse_bias(N, C, D, x, labels, dl);
    uint16_t *hx = bf16_copy(x, NX);   /* x now holds the bf16 values widened */
    mprt_sce_lse(N, C, D, x, NULL, labels, -100, &l1, lse);
    mprt_cu_sce_lse_bf16(N, C, D, hx, NULL, labels, -100, &l2, clse);
    same("sce_lse_bf16", &l1, &l2, 4);
    same("sce_lse_bf16 (log-sum-exp)", lse, clse, sizeof lse);
    mprt_sce_lse_grad(N, C, D, &dl, x, NULL, lse, labels, -100, dx);
    mprt_cu_sce_lse_grad_bf16(N, C, D, &dl, hx, 1, NULL, lse, labels, -100, hdx);
    same_narrowed("sce_lse_grad_bf16", dx, hdx, NX);
    test_sce_lse_bias_bf16(N, C, D, x, hx, labels, dl);
    free(x), free(hx);
    report("sce_lse");
    report("sce_lse_grad");
    report("sce_lse_bf16");
    report("sce_lse_grad_bf16");
}

int main(void)
{
    test_unary();
    test_binary();
    test_nary();
    test_compare();
    test_mod();
    test_argmax();
    test_topk();
    test_onehot();
    test_trilu();
    test_cumsum();
    test_elements();
    test_nd();
    test_pad();
    test_pool();
    test_norm();
    test_reduce();
    test_losses();
    test_move();
    test_cast_float();
    test_bf16();
    test_conv_direct();
    test_bias_after();
    test_update();
    test_sq_norm();
    test_ew_chain();
    test_rows_bf16();
    test_sce_lse();
    test_softmax_bias(12, 5, 3);
    test_softmax_bias(140, 70, 70);
    test_softmax_bias(96, 48, 48);   /* whole aligned chunks of 8: the vector loads */
    printf("emulate: %d comparisons in %d launches, %d failed\n", checks, mprt_emu_launches,
           failures);
    return failures != 0;
}
