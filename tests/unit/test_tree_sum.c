/* test_tree_sum.c — the gradient sum of --data-parallel (runtime/comm.c):
 * mprt_tree_add, fed micro-batch after micro-batch, and mprt_tree_vectors,
 * given the replicas' sums, each give the tree docs/distributed.md defines,
 * written here again as a recursion over [lo, hi): halves of a power of
 * two, else the largest power of two below the count, then the rest. Bit
 * for bit, on values of mixed magnitude and sign, for every count up to
 * 40; and the sums of R replicas of count/R micro-batches each (a power
 * of two), added by mprt_tree_vectors, are the sum of one replica of them
 * all. A running sum in order differs on these values (the test can tell
 * the orders apart). */
#define _POSIX_C_SOURCE 200809L
#include "program.h"
#include "train.h"
#include "state.c"

#include <stdarg.h>

static _Noreturn void mprt_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    exit(1);
}

MPRT_GLOBAL const MprtDeviceOps *mprt_ops;   /* the devices' (stream.c, cuda.c): none here */

static unsigned char *mprt_slot(const MprtBuffer *b, int mb)   /* program.c's: not called */
{
    (void)b, (void)mb;
    return NULL;
}

#include "comm.c"

#include "check.h"

enum { N = 7, MAXC = 40 };

static float g[MAXC][N];

static void add(long n, float *sum, const float *x, int first)
{
    for (long i = 0; i < n; i++)
        sum[i] = first ? x[i] : sum[i] + x[i];
}

static float tree(int lo, int hi, int i)
{
    int n = hi - lo;
    if (n == 1)
        return g[lo][i];
    int p = 1;
    while (2 * p < n)
        p *= 2;
    return tree(lo, lo + p, i) + tree(lo + p, hi, i);
}

/* mprt_tree_add over micro-batches first .. first + count - 1 into out. */
static void stream(int first, int count, float *out)
{
    static float levels[8][N + 1];
    for (int k = 0; k < count; k++)
        mprt_tree_add(add, N, &levels[0][0], N + 1, g[first + k], k, count);
    int top = 0;
    while ((2 << top) <= count)
        top++;
    if (count > 1 && (count & (count - 1)) == 0)
        top--;
    memcpy(out, levels[top], sizeof(float) * N);
}

int main(void)
{
    unsigned s = 12345;
    for (int k = 0; k < MAXC; k++)
        for (int i = 0; i < N; i++) {
            s = s * 1103515245u + 12345u;
            float m = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
            g[k][i] = m * (float)(1 << ((s >> 4) % 24));   /* 2^0 .. 2^23 */
        }
    int orders_differ = 0;
    for (int count = 1; count <= MAXC; count++) {
        float out[N], run[N] = {0};
        stream(0, count, out);
        for (int i = 0; i < N; i++) {
            CHECK(memcmp(&out[i], &(float){tree(0, count, i)}, sizeof(float)) == 0);
            for (int k = 0; k < count; k++)
                run[i] += g[k][i];
            orders_differ += run[i] != out[i];
        }
        for (int R = 2; R <= count; R++) {
            int per = count / R;
            if (count % R || (per & (per - 1)))
                continue;
            float sums[MAXC][N], *v[MAXC];
            for (int r = 0; r < R; r++) {
                stream(r * per, per, sums[r]);
                v[r] = sums[r];
            }
            mprt_tree_vectors(v, R, N);
            CHECK(memcmp(sums[0], out, sizeof out) == 0);
        }
    }
    CHECK(orders_differ > 0);
    printf("test_tree_sum: counts 1 to %d: the tree bit for bit, streamed and over replicas; "
           "%d sums differ from a running sum\n", MAXC, orders_differ);
    return check_summary("tree_sum");
}
