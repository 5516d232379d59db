/* test_vmath.c — runtime/vmath.h's e^x, erf and tanh against libm's
 * double-precision functions (correctly rounded to within a fraction of a
 * float ulp): the error in float ulps over every 257th float bit pattern
 * (16.7 million, all signs and exponents), the edges (NaN, infinities,
 * overflow, denormal results, signed zeros), and the same bits from a
 * vectorised loop (MPRT_VECTOR's AVX-512 or AVX2 clone, where the CPU has
 * one) as from one call at a time (built without -ffp-contract=off, the
 * AVX-512 clone's fused multiply-adds make 13% of them differ). Built as
 * the trainers are: -O2 -fno-trapping-math -ffp-contract=off. */
#include "../../runtime/vmath.h"
#include "check.h"

#include <float.h>
#include <stdlib.h>

/* |got - ref| in ulps of ref rounded to float (the denormals' ulp below
 * FLT_MIN); 0 where both are the same NaN-ness or infinity, 1e9 where
 * only one is. */
static double ulps(float got, double ref)
{
    float rf = (float)ref;
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got) ? 0.0 : 1e9;
    if (isinf(rf) || isinf(got))
        return got == rf ? 0.0 : 1e9;
    float a = fabsf(rf);
    double u = a < FLT_MIN ? 0x1p-149 : (double)(nextafterf(a, INFINITY) - a);
    return fabs((double)got - ref) / u;
}

typedef struct Worst {
    double ulps;
    float at;
} Worst;

static void note(Worst *w, float got, double ref, float x)
{
    double e = ulps(got, ref);
    if (e > w->ulps)
        w->ulps = e, w->at = x;
}

static void sweep(void)
{
    Worst e = {0, 0}, f = {0, 0}, t = {0, 0};
    for (uint64_t i = 7; i < (1ull << 32); i += 257) {
        float x = mprt_float_of_bits((uint32_t)i);
        note(&e, mprt_expf(x), exp((double)x), x);
        note(&f, mprt_erff(x), erf((double)x), x);
        note(&t, mprt_tanhf(x), tanh((double)x), x);
    }
    printf("worst: exp %.3f ulp at %a, erf %.3f ulp at %a, tanh %.3f ulp at %a\n", e.ulps,
           (double)e.at, f.ulps, (double)f.at, t.ulps, (double)t.at);
    CHECK(e.ulps <= 1.0);
    CHECK(f.ulps <= 2.5);
    CHECK(t.ulps <= 1.5);
}

static void edges(void)
{
    CHECK(isnan(mprt_expf(NAN)) && isnan(mprt_erff(NAN)) && isnan(mprt_tanhf(NAN)));
    CHECK(mprt_expf(INFINITY) == INFINITY && mprt_expf(-INFINITY) == 0.0f);
    CHECK(mprt_expf(89.0f) == INFINITY && ulps(mprt_expf(88.72283f), exp((double)88.72283f)) <= 1.0);
    CHECK(mprt_expf(-103.0f) == (float)exp(-103.0));   /* a denormal, rounded once */
    CHECK(mprt_expf(-104.5f) == 0.0f && mprt_expf(0.0f) == 1.0f);
    CHECK(mprt_erff(INFINITY) == 1.0f && mprt_erff(-INFINITY) == -1.0f);
    CHECK(mprt_erff(5.0f) == 1.0f && mprt_erff(-5.0f) == -1.0f);
    CHECK(mprt_tanhf(INFINITY) == 1.0f && mprt_tanhf(-INFINITY) == -1.0f);
    CHECK(mprt_tanhf(20.0f) == 1.0f && mprt_tanhf(-20.0f) == -1.0f);
    CHECK(signbit(mprt_erff(-0.0f)) && mprt_erff(-0.0f) == 0.0f);
    CHECK(signbit(mprt_tanhf(-0.0f)) && mprt_tanhf(-0.0f) == 0.0f);
    CHECK(mprt_erff(0x1p-140f) == (float)erf(0x1p-140));   /* a denormal argument */
}

/* The three over n floats (a multiple of 1024) in loops that vectorise
 * (MPRT_VECTOR; a fixed length, as the kernels' tiles, since -O2
 * vectorises only those), and one call at a time (noinline, so nothing is
 * vectorised across calls). */
MPRT_VECTOR static void in_a_loop(const float *restrict x, float *restrict y, long n)
{
    for (long i = 0; i < n; i += 1024)
        for (long j = i; j < i + 1024; j++)
            y[j] = mprt_expf(x[j]) + mprt_erff(x[j]) * 3.0f + mprt_tanhf(x[j]) * 5.0f;
}

__attribute__((noinline)) static void one(const float *x, float *y, long i, int which)
{
    float v = which == 0 ? mprt_expf(x[i]) : which == 1 ? mprt_erff(x[i]) : mprt_tanhf(x[i]);
    y[i] = v;
}

static void vector_bits(void)
{
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *s = malloc(3 * N * sizeof *s);
    uint32_t r = 12345;
    for (long i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        /* most in [-12, 12], where every branch of every function is; 1 in 16 any bits */
        x[i] = (i & 15) ? ((float)(r >> 8) / 16777216.0f - 0.5f) * 24.0f : mprt_float_of_bits(r);
    }
    in_a_loop(x, y, N);
    long differ = 0;
    for (long i = 0; i < N; i++) {
        one(x, s, i, 0), one(x, s + N, i, 1), one(x, s + 2 * N, i, 2);
        float want = s[i] + s[N + i] * 3.0f + s[2 * N + i] * 5.0f;
        uint32_t a, b;
        memcpy(&a, &want, 4), memcpy(&b, &y[i], 4);
        differ += a != b && !(isnan(want) && isnan(y[i]));
    }
    printf("vector loop against one call at a time: %ld of %d differ\n", differ, N);
    CHECK(differ == 0);
    free(x), free(y), free(s);
}

int main(void)
{
    edges();
    vector_bits();
    sweep();
    return check_summary("vmath");
}
