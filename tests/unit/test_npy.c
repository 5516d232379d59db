/* test_npy.c — unit tests for runtime/npy.c against files numpy wrote.
 *
 * Usage: test_npy OUTDIR, where OUTDIR holds the output of
 * `make_io_fixtures.py OUTDIR`. Writes OUTDIR/mprt_*.npy for
 * `make_io_fixtures.py --verify-npy OUTDIR` to read back with numpy. */
#include "../../runtime/mprt.c"
#include "../../runtime/npy.c"
#include "check.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

/* The arrays make_io_fixtures.py saves: value(i) = scale * i + offset. */
static const struct {
    const char *name;
    MprtDType dtype;
    int rank;
    int64_t shape[MPRT_MAX_RANK];
    double scale, offset;
} GOOD_NPY[] = {
    {"f32", MPRT_F32, 3, {2, 3, 4}, 0.5, -3},
    {"f64", MPRT_F64, 1, {5}, 0.25, -1},
    {"i64", MPRT_I64, 2, {2, 3}, 1000000007, -3000000000.0},
    {"i32", MPRT_I32, 2, {3, 2}, 7, -20},
    {"i16", MPRT_I16, 1, {4}, 1000, -2000},
    {"i8", MPRT_I8, 1, {4}, 50, -100},
    {"u8", MPRT_U8, 1, {4}, 85, 0},
    {"bool", MPRT_BOOL, 2, {2, 2}, 0, 0},           /* [[T, F], [F, T]] */
    {"f16", MPRT_F16, 1, {6}, 0.5, -1},
    {"scalar", MPRT_F32, 0, {0}, 0, 3.5},
    {"empty", MPRT_F32, 2, {0, 3}, 0, 0},
    {"rank8", MPRT_I32, 8, {1, 2, 1, 2, 1, 2, 1, 2}, 1, 0},
    {"v2", MPRT_F32, 1, {3}, 0.5, -3},
    {"v3", MPRT_F64, 2, {2, 2}, 0.25, -1},
};

/* Element i of a as a double; float16 through its bits (the values in
 * the fixture are exact halves, so no rounding is involved). */
static double element(const MprtArray *a, int64_t i)
{
    switch (a->dtype) {
    case MPRT_F32: return ((const float *)a->data)[i];
    case MPRT_F64: return ((const double *)a->data)[i];
    case MPRT_I64: return (double)((const int64_t *)a->data)[i];
    case MPRT_I32: return ((const int32_t *)a->data)[i];
    case MPRT_I16: return ((const int16_t *)a->data)[i];
    case MPRT_I8: return ((const int8_t *)a->data)[i];
    case MPRT_U8: return ((const uint8_t *)a->data)[i];
    case MPRT_BOOL: return ((const uint8_t *)a->data)[i];
    case MPRT_F16: {
        uint16_t h = ((const uint16_t *)a->data)[i];
        int e = h >> 10 & 0x1f;
        double m = e ? 1 + (h & 0x3ff) / 1024.0 : (h & 0x3ff) / 1024.0;
        double v = m * (e ? (double)(1u << e) / (1u << 15) : 1.0 / (1u << 14));
        return h & 0x8000 ? -v : v;
    }
    default: return -12345;
    }
}

static void test_good(void)
{
    char err[512];
    for (size_t f = 0; f < sizeof GOOD_NPY / sizeof GOOD_NPY[0]; f++) {
        char name[64];
        snprintf(name, sizeof name, "%s.npy", GOOD_NPY[f].name);
        MprtArray a;
        int rc = mprt_npy_load(at(name), &a, err, sizeof err);
        CHECK(rc == 0);
        if (rc) {
            fprintf(stderr, "  %s\n", err);
            continue;
        }
        CHECK(a.dtype == GOOD_NPY[f].dtype);
        CHECK(a.rank == GOOD_NPY[f].rank);
        int64_t n = 1;
        for (int d = 0; d < a.rank; d++) {
            CHECK(a.shape[d] == GOOD_NPY[f].shape[d]);
            n *= a.shape[d];
        }
        CHECK(a.nbytes == (size_t)n * mprt_dtype_size(a.dtype));
        int wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            double want = GOOD_NPY[f].scale * (double)i + GOOD_NPY[f].offset;
            if (a.dtype == MPRT_BOOL)
                want = i == 0 || i == 3;
            wrong += element(&a, i) != want;
        }
        CHECK(wrong == 0);
        if (wrong)
            fprintf(stderr, "  %s: %d wrong values\n", name, wrong);
        /* save it back; --verify-npy compares mprt_NAME.npy with NAME.npy */
        char saved[80];
        snprintf(saved, sizeof saved, "mprt_%s", name);
        CHECK(mprt_npy_save(at(saved), &a, err, sizeof err) == 0);
        MprtArray b;
        CHECK(mprt_npy_load(at(saved), &b, err, sizeof err) == 0);
        CHECK(b.dtype == a.dtype && b.rank == a.rank && b.nbytes == a.nbytes &&
              !memcmp(b.shape, a.shape, sizeof a.shape) && !memcmp(b.data, a.data, a.nbytes));
        mprt_array_free(&b);
        mprt_array_free(&a);
        CHECK(a.data == NULL);
    }
}

/* Loading path must fail with a message that names the file and holds
 * each of the given phrases. */
static void expect_error(const char *path, const char *phrase1, const char *phrase2)
{
    char err[512] = "";
    MprtArray a;
    a.data = (void *)&a;
    int rc = mprt_npy_load(path, &a, err, sizeof err);
    int ok = rc != 0 && a.data == NULL && strstr(err, path) && strstr(err, phrase1) &&
             (!phrase2 || strstr(err, phrase2)) && !strchr(err, '\n');
    CHECK(ok);
    if (getenv("TEST_VERBOSE"))
        printf("  %s\n", err);
    if (!ok)
        fprintf(stderr, "  %s: rc %d, message \"%s\", wanted \"%s\"%s%s\n", path, rc, err,
                phrase1, phrase2 ? " and " : "", phrase2 ? phrase2 : "");
}

static void test_bad_from_numpy(void)
{
    expect_error(at("bad_fortran.npy"), "Fortran order", "ascontiguousarray");
    expect_error(at("bad_bigendian.npy"), "expected little-endian float32 ('<f4'), found '>f4'",
                 NULL);
    expect_error(at("bad_complex.npy"), "dtype '<c8' is not supported", NULL);
    expect_error(at("bad_u16.npy"), "dtype '<u2' is not supported", NULL);
    expect_error(at("bad_unicode.npy"), "dtype '<U2' is not supported", NULL);
    expect_error(at("bad_structured.npy"), "structured dtypes", NULL);
    expect_error(at("bad_truncated.npy"), "needs 400 data bytes, found 350", "truncated");
    expect_error(at("bad_trailing.npy"), "needs 400 data bytes, found 404", NULL);
    expect_error(at("bad_hdrpast.npy"), "header length 60000 runs past the end", NULL);
    expect_error(at("bad_inheader.npy"), "runs past the end of the file (30 bytes)", NULL);
    expect_error(at("bad_short.npy"), "only 7 bytes", NULL);
    expect_error(at("bad_version.npy"), "version 4.0 is not supported", NULL);
    expect_error(at("bad_magic.npy"), "not a .npy file", NULL);
    expect_error(at("no_such_file.npy"), "cannot open", "No such file");
    expect_error(outdir, "not a regular file", NULL);
}

/* Writes a v1.0 file with the given header text and data bytes. */
static const char *handmade(const char *header, size_t data_bytes)
{
    const char *path = at("hand.npy");
    FILE *fp = fopen(path, "wb");
    size_t n = strlen(header);
    fwrite("\x93NUMPY\x01\x00", 1, 8, fp);
    fputc((int)(n & 0xff), fp);
    fputc((int)(n >> 8), fp);
    fwrite(header, 1, n, fp);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(0, fp);
    fclose(fp);
    return path;
}

#define HEAD(shape) "{'descr': '<f4', 'fortran_order': False, 'shape': " shape ", }\n"

static void test_bad_headers(void)
{
    expect_error(handmade(HEAD("(-1, 3)"), 0), "negative dimension", NULL);
    expect_error(handmade(HEAD("(9223372036854775807, 9223372036854775807)"), 0), "overflows",
                 NULL);
    expect_error(handmade(HEAD("(99999999999999999999,)"), 0), "dimension too large", NULL);
    expect_error(handmade(HEAD("(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 4), "more than 8 dimensions",
                 NULL);
    expect_error(handmade(HEAD("(3)"), 12), "trailing comma", NULL);
    expect_error(handmade(HEAD("(2, 3"), 24), "expected a dimension", NULL);
    expect_error(handmade(HEAD("(2 3)"), 24), "expected ',' or ')'", NULL);
    expect_error(handmade(HEAD("[2, 3]"), 24), "expected a shape tuple", NULL);
    expect_error(handmade(HEAD("(2, 3)"), 20), "needs 24 data bytes, found 20", NULL);
    expect_error(handmade("{'descr': '<f4', 'fortran_order': False}\n", 4), "missing key 'shape'",
                 NULL);
    expect_error(handmade("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                          "'shape': (), }", 4), "duplicate key", NULL);
    expect_error(handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", 4),
                 "unknown key", NULL);
    expect_error(handmade("{'descr': '<f4', 'fortran_order': 0, 'shape': (), }", 4),
                 "True or False", NULL);
    expect_error(handmade("{'descr': '<f4, 'fortran_order': False, 'shape': (), }", 4),
                 "expected ',' or '}'", NULL);
    expect_error(handmade("{'descr' '<f4', 'fortran_order': False, 'shape': (), }", 4),
                 "expected ':'", NULL);
    expect_error(handmade("{'descr': '<f4', 'fortran_order': False, 'shape': ()} x", 4),
                 "text after the dict", NULL);
    expect_error(handmade("{'descr': '<f\\x34', 'fortran_order': False, 'shape': ()}", 4),
                 "escapes", NULL);
    expect_error(handmade("hello", 0), "expected '{'", NULL);
    expect_error(handmade("", 0), "expected '{'", NULL);
    expect_error(handmade("{'descr': '|f4', 'fortran_order': False, 'shape': ()}", 4),
                 "found '|f4'", NULL);
    expect_error(handmade("{'descr': 'f4', 'fortran_order': False, 'shape': ()}", 4),
                 "found 'f4'", NULL);

    /* accepted: Python 2's longs, double quotes, '<u1', no trailing comma */
    char err[512];
    MprtArray a;
    const char *p = handmade("{\"descr\": \"<u1\", \"fortran_order\": False, \"shape\": (2L, 3L)}",
                             6);
    CHECK(mprt_npy_load(p, &a, err, sizeof err) == 0 && a.dtype == MPRT_U8 && a.rank == 2 &&
          a.shape[0] == 2 && a.shape[1] == 3);
    mprt_array_free(&a);
    /* a huge dimension times zero is an empty array, not an overflow */
    p = handmade(HEAD("(0, 9223372036854775807)"), 0);
    CHECK(mprt_npy_load(p, &a, err, sizeof err) == 0 && a.nbytes == 0 && a.data != NULL);
    mprt_array_free(&a);
}

static void test_save_errors(void)
{
    char err[512] = "";
    float x[2] = {1, 2};
    MprtArray a = {MPRT_BF16, 1, {1}, x, 2};
    CHECK(mprt_npy_save(at("mprt_never.npy"), &a, err, sizeof err) != 0 &&
          strstr(err, "no bfloat16"));
    a = (MprtArray){MPRT_F32, 1, {3}, x, 8};
    CHECK(mprt_npy_save(at("mprt_never.npy"), &a, err, sizeof err) != 0 &&
          strstr(err, "inconsistent"));
    CHECK(access(at("mprt_never.npy"), F_OK) != 0);
    a = (MprtArray){MPRT_F32, 1, {2}, x, 8};
    CHECK(mprt_npy_save("/nonexistent-dir/x.npy", &a, err, sizeof err) != 0 &&
          strstr(err, "/nonexistent-dir/x.npy") && strstr(err, "cannot create"));

    /* a write that fails half way (file size limit) leaves the old file */
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", at("keep.npy"));
    CHECK(mprt_npy_save(keep, &a, err, sizeof err) == 0);
    static float big[1 << 14];
    MprtArray b = {MPRT_F32, 1, {1 << 14}, big, sizeof big};
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit r = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &r);
        int rc = mprt_npy_save(keep, &b, err, sizeof err);
        _exit(rc != 0 && strstr(err, "File too large") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    MprtArray c;
    CHECK(mprt_npy_load(keep, &c, err, sizeof err) == 0 && c.shape[0] == 2 &&
          ((float *)c.data)[1] == 2);
    mprt_array_free(&c);
    CHECK(access(at("keep.npy.tmp"), F_OK) != 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_npy OUTDIR (made by make_io_fixtures.py OUTDIR)\n");
        return 2;
    }
    outdir = argv[1];
    if (access(at("f32.npy"), R_OK) != 0) {
        fprintf(stderr, "test_npy: %s has no fixtures; run make_io_fixtures.py %s first\n",
                outdir, outdir);
        return 2;
    }
    test_good();
    test_bad_from_numpy();
    test_bad_headers();
    test_save_errors();
    return check_summary("test_npy");
}
