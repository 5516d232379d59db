/* vmath.h — e^x, erf and tanh in float, written so that a loop calling
 * them vectorises: no branches (both sides are computed and one is
 * selected; the build line's -fno-trapping-math lets the compiler do so on
 * every lane), no calls, no tables. Each is a fixed sequence of IEEE float
 * operations that C may neither contract nor reorder (the trainers are
 * built with -ffp-contract=off and without -ffast-math), so a
 * vector loop gives the bits of one call at a time: the CPU kernels'
 * results do not depend on which clone runs, and the host emulation of
 * the CUDA kernels (tests/cuda/emulate_device.h) computes the same bits.
 * The polynomials are least-squares fits refined toward minimax
 * (Chebyshev nodes, Lawson's weights) to the functions in float64.
 * Accuracy over every float, against libm's doubles: e^x within 0.96 ulp,
 * erf within 2.51 and tanh within 1.34 of the exact values (every 257th
 * bit pattern in tests/unit/test_vmath.c), and libm's results at the
 * edges: NaN stays NaN, overflow gives infinity,
 * erf and tanh reach +-1 exactly. Pasted into every program after
 * kernel.h, with MPRT_VECTOR, which gives the loops that call them a
 * vector clone. */
#ifndef MPRT_VMATH_H
#define MPRT_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A function whose loops gain from wider vectors gets clones for AVX-512
 * and AVX2, one picked once at load time by what the CPU has (GCC's and
 * Clang's target_clones, an ifunc); elsewhere the plain function runs.
 * The build line's -ffp-contract=off keeps AVX-512's fused multiply-adds
 * out, so every clone rounds every operation alike. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__CUDACC__) && \
    !defined(__cplusplus)
#define MPRT_VECTOR __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MPRT_VECTOR
#endif

/* The functions below, and the per-element functions of the loops that
 * call them, are inlined into every clone whatever its size (with three
 * clones of a loop, GCC's inlining limits would otherwise leave the calls
 * in, and nothing vectorises). */
#if defined(__GNUC__)
#define MPRT_INLINE static inline __attribute__((always_inline))
#else
#define MPRT_INLINE static inline
#endif

MPRT_INLINE float mprt_float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^x = 2^k e^r, k the integer nearest x / ln 2 and r = x - k ln 2 (ln 2 in
 * two parts, the first exact in few bits, so k ln 2 loses nothing);
 * e^r = 1 + r + r^2 P(r) for |r| <= ln 2 / 2. 2^k is applied as two powers
 * of two, each a normal float, so that results down to the denormals are
 * rounded once. x is clamped to [-104, 89], where e^x is 0 and infinity in
 * float anyway; a NaN passes through the comparisons and stays NaN. */
MPRT_INLINE float mprt_expf(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float lo = x < -104.0f ? -104.0f : x, xc = lo > 89.0f ? 89.0f : lo;
    float t = xc * 1.44269504088896341f + magic;
    float k = t - magic;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    int32_t ki = (int32_t)(tb & 0x7fffff) - 0x400000; /* k as an integer, -150 .. 128 */
    int32_t k1 = ki / 2, k2 = ki - k1;
    float r = (xc - k * 0.693359375f) - k * -2.12194440e-4f;
    float p = 1.9907570e-4f;
    p = p * r + 1.3933643e-3f;
    p = p * r + 8.3332863e-3f;
    p = p * r + 4.1666467e-2f;
    p = p * r + 1.6666667e-1f;
    p = p * r + 0.5f;
    float er = p * (r * r) + r + 1.0f;
    float s1 = mprt_float_of_bits((uint32_t)(k1 + 127) << 23);
    float s2 = mprt_float_of_bits((uint32_t)(k2 + 127) << 23);
    return er * s1 * s2;
}

/* erf(x), with x's sign: |x| P(x^2) for |x| <= 1, else 1 - e^(-x^2) Q(1/|x|),
 * Q fitting erfc(x) e^(x^2) over [1, 4] (past 4, erf is 1 in float). */
MPRT_INLINE float mprt_erff(float x)
{
    float a = fabsf(x), t = a * a;
    float p = 7.8892859e-5f;
    p = p * t + -8.0208952e-4f;
    p = p * t + 5.1895422e-3f;
    p = p * t + -2.6854448e-2f;
    p = p * t + 1.1283600e-1f;
    p = p * t + -3.7612626e-1f;
    /* 2 / sqrt(pi) in two parts: its rounding alone would be 0.4 ulp */
    float small = a * 1.12837923f + a * (p * t + -5.86353834e-8f);
    float a1 = a < 1.0f ? 1.0f : a, ac = a1 > 4.0f ? 4.0f : a1, u = 1.0f / ac;
    float q = 2.7020423e-2f;
    q = q * u + -1.5908252e-1f;
    q = q * u + 3.8819799e-1f;
    q = q * u + -4.6786982e-1f;
    q = q * u + 1.7862566e-1f;
    q = q * u + 2.6385567e-1f;
    q = q * u + -3.8800362e-1f;
    q = q * u + 2.3282841e-2f;
    q = q * u + 5.6141651e-1f;
    q = q * u + 1.4044087e-4f;
    float big = 1.0f - mprt_expf(-(ac * ac)) * q;
    return copysignf(a <= 1.0f ? small : big, x);
}

/* tanh(x): x P(x^2) for |x| < 0.625; else 1 - 2 / (e^(2|x|) + 1) with its
 * sign (past 9.1, tanh is 1 in float). */
MPRT_INLINE float mprt_tanhf(float x)
{
    float a = fabsf(x), t = a * a;
    float p = 2.1332384e-3f;
    p = p * t + -8.1646685e-3f;
    p = p * t + 2.1694269e-2f;
    p = p * t + -5.3945195e-2f;
    p = p * t + 1.3333188e-1f;
    p = p * t + -3.3333328e-1f;
    p = p * t + 1.0f;
    float small = x * p;
    float ac = a > 9.1f ? 9.1f : a;
    float big = copysignf(1.0f - 2.0f / (mprt_expf(ac + ac) + 1.0f), x);
    return a < 0.625f ? small : big;
}

#endif
