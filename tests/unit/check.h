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

static int check_summary(const char *suite)
{
    printf("%s: %d passed, %d failed\n", suite, check_passed, check_failed);
    return check_failed ? 1 : 0;
}
#endif
