/* test_util.c — unit tests for util.c: escaping, number parsing, overflow
 * checks and the arena's deferred cleanups. */
#include "mpcc.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static void test_escape(void)
{
    Arena *a = arena_new();
    CHECK(strcmp(str_escaped(a, "plain/name.0", 100), "plain/name.0") == 0);
    CHECK(strcmp(str_escaped(a, "a\"b\\c", 100), "a\\\"b\\\\c") == 0);
    CHECK(strcmp(str_escaped(a, "x\ny\rz\t", 100), "x\\ny\\rz\\t") == 0);
    CHECK(strcmp(str_escaped(a, "\x01\x7f", 100), "\\x01\\x7f") == 0);
    CHECK(strcmp(str_escaped(a, "*/ end", 100), "*/ end") == 0);
    CHECK(strcmp(str_escaped(a, "abcdef", 3), "abc...") == 0);
    /* UTF-8 passes through unchanged. */
    CHECK(strcmp(str_escaped(a, "caf\xc3\xa9", 100), "caf\xc3\xa9") == 0);
    arena_free(a);
}

static void test_numbers(void)
{
    int64_t v = 0;
    CHECK(parse_i64("123", &v) && v == 123);
    CHECK(parse_i64("-9223372036854775808", &v) && v == INT64_MIN);
    CHECK(!parse_i64("9223372036854775808", &v));
    CHECK(!parse_i64("12x", &v));
    CHECK(!parse_i64("", &v));
    CHECK(!mul_overflows(1 << 20, 1 << 20, &v) && v == (int64_t)1 << 40);
    CHECK(mul_overflows((int64_t)1 << 40, (int64_t)1 << 40, &v));
    CHECK(mul_overflows(-1, 2, &v));
    CHECK(!mul_overflows(0, INT64_MAX, &v) && v == 0);
}

static int order[3], norder;
static void note(void *p) { order[norder++] = (int)(intptr_t)p; }

static void test_arena(void)
{
    Arena *a = arena_new();
    char *big = arena_alloc(a, 10 << 20);   /* larger than a chunk */
    CHECK(big && big[0] == 0 && big[(10 << 20) - 1] == 0);
    char *small = arena_alloc(a, 3);
    CHECK(((uintptr_t)small & 15) == 0);
    int *grown = arena_grow(a, NULL, 0, 4, sizeof(int));
    grown[3] = 7;
    grown = arena_grow(a, grown, 4, 8, sizeof(int));
    CHECK(grown[3] == 7 && grown[7] == 0);
    CHECK(strcmp(arena_printf(a, "%s-%d", "x", 42), "x-42") == 0);
    arena_defer(a, note, (void *)1);
    arena_defer(a, note, (void *)2);
    arena_free(a);
    CHECK(norder == 2 && order[0] == 2 && order[1] == 1);   /* last in, first out */
}

int main(void)
{
    test_escape();
    test_numbers();
    test_arena();
    return check_summary("test_util");
}
