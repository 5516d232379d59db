/* check.h — the unit tests' tiny harness: CHECK records a failure with
 * file:line and goes on; check_summary prints "N passed, M failed". */
#ifndef CHECK_H
#define CHECK_H
#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (cond) {                                                          \
            check_passed++;                                                  \
        } else {                                                             \
            check_failed++;                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                    \
    } while (0)

/* Tests that read fixtures name them relative to outdir (argv[1]); at()
 * keeps four paths alive at once. */
static const char *outdir;

static inline const char *at(const char *name)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", outdir, name);
    return buf[k];
}

static int check_summary(const char *suite)
{
    printf("%s: %d passed, %d failed\n", suite, check_passed, check_failed);
    return check_failed ? 1 : 0;
}
#endif
