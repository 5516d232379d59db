/* test_safetensors.c — unit tests for runtime/safetensors.c against files
 * the official safetensors package wrote.
 *
 * Usage: test_safetensors OUTDIR, where OUTDIR holds the output of
 * `make_io_fixtures.py OUTDIR`. Writes OUTDIR/mprt_*.safetensors for
 * `make_io_fixtures.py --verify-st OUTDIR` to read back with the package. */
#include "../../runtime/mprt.c"
#include "../../runtime/safetensors.c"
#include "check.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

/* The tensors of st_all.safetensors: value(i) = scale * i + offset. */
static const struct {
    const char *name;
    MprtDType dtype;
    int rank;
    int64_t shape[2];
    double scale, offset;
} ST_ALL[] = {
    {"f32", MPRT_F32, 2, {2, 3}, 0.5, -3},
    {"f64", MPRT_F64, 1, {4}, 0.25, -1},
    {"f16", MPRT_F16, 1, {3}, 0.5, -1},
    {"i64", MPRT_I64, 2, {2, 2}, 1000000007, -3000000000.0},
    {"i32", MPRT_I32, 1, {5}, 7, -20},
    {"i16", MPRT_I16, 1, {3}, 1000, -2000},
    {"i8", MPRT_I8, 1, {4}, 50, -100},
    {"u8", MPRT_U8, 1, {3}, 85, 0},
    {"bool", MPRT_BOOL, 2, {2, 2}, 0, 0},           /* [[T, F], [F, T]] */
    {"scalar", MPRT_F32, 0, {0}, 0, 3.5},
    {"empty", MPRT_F32, 2, {0, 4}, 0, 0},
};

/* The names of st_odd.safetensors, as C strings; tensor k holds
 * {2k, 2k + 1} as float32. */
static const char *const ST_ODD[] = {
    "quote\"name", "back\\slash", "new\nline", "tab\tand\001ctl", "*/ comment",
    "layer1/conv.weight", "caf\xc3\xa9 \xf0\x9d\x84\x9e",
};

static double element(const MprtStTensor *t, int64_t i)
{
    const void *p = (const char *)t->data + i * (int64_t)mprt_dtype_size(t->dtype);
    union {
        float f; double d; int64_t i64; int32_t i32; int16_t i16; int8_t i8; uint8_t u8;
        uint16_t h;
    } u;
    memcpy(&u, p, mprt_dtype_size(t->dtype));
    switch (t->dtype) {
    case MPRT_F32: return u.f;
    case MPRT_F64: return u.d;
    case MPRT_I64: return (double)u.i64;
    case MPRT_I32: return u.i32;
    case MPRT_I16: return u.i16;
    case MPRT_I8: return u.i8;
    case MPRT_U8: case MPRT_BOOL: return u.u8;
    case MPRT_F16: {
        int e = u.h >> 10 & 0x1f;
        double m = e ? 1 + (u.h & 0x3ff) / 1024.0 : (u.h & 0x3ff) / 1024.0;
        double v = m * (e ? (double)(1u << e) / (1u << 15) : 1.0 / (1u << 14));
        return u.h & 0x8000 ? -v : v;
    }
    default: return -12345;
    }
}

/* Copies every tensor and the metadata of f into a new file at path. */
static int resave(const MprtStFile *f, const char *path, char *err, size_t errlen)
{
    MprtStEntry *e = calloc((size_t)f->ntensors + 1, sizeof *e);
    const char **kv = calloc(2 * (size_t)f->nmeta + 1, sizeof *kv);
    for (int i = 0; i < f->ntensors; i++) {
        const MprtStTensor *t = &f->tensors[i];
        e[i] = (MprtStEntry){t->name, t->dtype, t->rank, t->shape, t->data, t->nbytes};
    }
    for (int i = 0; i < f->nmeta; i++) {
        kv[2 * i] = f->meta[i].key;
        kv[2 * i + 1] = f->meta[i].value;
    }
    int rc = mprt_st_save(path, e, f->ntensors, kv, f->nmeta, err, errlen);
    free(e);
    free(kv);
    return rc;
}

/* Opens a file that must open; reports the error otherwise. */
static int open_ok(const char *path, MprtStFile *f)
{
    char err[512];
    int rc = mprt_st_open(path, f, err, sizeof err);
    CHECK(rc == 0);
    if (rc)
        fprintf(stderr, "  %s\n", err);
    return rc == 0;
}

static void check_all(const char *path)
{
    MprtStFile f;
    if (!open_ok(path, &f))
        return;
    int n = (int)(sizeof ST_ALL / sizeof ST_ALL[0]);
    CHECK(f.ntensors == n);
    for (int k = 0; k < n; k++) {
        const MprtStTensor *t = mprt_st_find(&f, ST_ALL[k].name);
        CHECK(t != NULL);
        if (!t)
            continue;
        CHECK(t->dtype == ST_ALL[k].dtype && t->rank == ST_ALL[k].rank);
        int64_t count = 1;
        for (int d = 0; d < t->rank; d++) {
            CHECK(t->shape[d] == ST_ALL[k].shape[d]);
            count *= t->shape[d];
        }
        CHECK(t->nbytes == (size_t)count * mprt_dtype_size(t->dtype));
        CHECK(t->end - t->begin == t->nbytes);
        /* both writers put larger elements first, after an 8-aligned header */
        CHECK((uintptr_t)t->data % mprt_dtype_size(t->dtype) == 0);
        int wrong = 0;
        for (int64_t i = 0; i < count; i++) {
            double want = ST_ALL[k].scale * (double)i + ST_ALL[k].offset;
            if (t->dtype == MPRT_BOOL)
                want = i == 0 || i == 3;
            wrong += element(t, i) != want;
        }
        CHECK(wrong == 0);
    }
    CHECK(mprt_st_find(&f, "missing") == NULL && mprt_st_find(&f, "") == NULL);
    CHECK(f.nmeta == 2);
    CHECK(mprt_st_meta(&f, "format") && !strcmp(mprt_st_meta(&f, "format"), "np"));
    CHECK(mprt_st_meta(&f, "step") && !strcmp(mprt_st_meta(&f, "step"), "42"));
    CHECK(mprt_st_meta(&f, "missing") == NULL);
    for (int i = 1; i < f.ntensors; i++)        /* data_offsets order */
        CHECK(f.tensors[i].begin == f.tensors[i - 1].end);
    mprt_st_close(&f);
    CHECK(f.map == NULL && f.tensors == NULL);
}

static void check_odd(const char *path)
{
    MprtStFile f;
    if (!open_ok(path, &f))
        return;
    int n = (int)(sizeof ST_ODD / sizeof ST_ODD[0]);
    CHECK(f.ntensors == n);
    for (int k = 0; k < n; k++) {
        const MprtStTensor *t = mprt_st_find(&f, ST_ODD[k]);
        CHECK(t && t->dtype == MPRT_F32 && t->rank == 1 && t->shape[0] == 2 &&
              element(t, 0) == 2 * k && element(t, 1) == 2 * k + 1);
        if (!t)
            fprintf(stderr, "  %s: no tensor %d\n", path, k);
    }
    const char *note = mprt_st_meta(&f, "note"), *uni = mprt_st_meta(&f, "unicode");
    CHECK(note && !strcmp(note, "a \"quoted\" \\ value\nwith a newline"));
    CHECK(uni && !strcmp(uni, "caf\xc3\xa9 \xf0\x9d\x84\x9e"));
    CHECK(mprt_st_meta(&f, "empty") && !strcmp(mprt_st_meta(&f, "empty"), ""));
    mprt_st_close(&f);
}

static void test_official(void)
{
    char err[512];
    MprtStFile f;
    check_all(at("st_all.safetensors"));
    check_odd(at("st_odd.safetensors"));
    /* write both back; --verify-st has the official package read them */
    CHECK(mprt_st_open(at("st_all.safetensors"), &f, err, sizeof err) == 0);
    CHECK(resave(&f, at("mprt_all.safetensors"), err, sizeof err) == 0);
    mprt_st_close(&f);
    check_all(at("mprt_all.safetensors"));
    CHECK(mprt_st_open(at("st_odd.safetensors"), &f, err, sizeof err) == 0);
    CHECK(resave(&f, at("mprt_odd.safetensors"), err, sizeof err) == 0);
    mprt_st_close(&f);
    check_odd(at("mprt_odd.safetensors"));
    CHECK(access(at("mprt_odd.safetensors.tmp"), F_OK) != 0);

    /* bfloat16 comes from torch, when make_io_fixtures.py had it */
    if (access(at("st_bf16.safetensors"), R_OK) == 0) {
        CHECK(mprt_st_open(at("st_bf16.safetensors"), &f, err, sizeof err) == 0);
        const MprtStTensor *t = mprt_st_find(&f, "bf16");
        static const uint16_t want[3] = {0x3f80, 0xc000, 0x3f00};   /* 1, -2, 0.5 */
        CHECK(t && t->dtype == MPRT_BF16 && t->rank == 1 && t->shape[0] == 3 &&
              !memcmp(t->data, want, sizeof want));
        CHECK(resave(&f, at("mprt_bf16.safetensors"), err, sizeof err) == 0);
        mprt_st_close(&f);
    } else {
        printf("test_safetensors: no st_bf16.safetensors (no torch), bfloat16 not checked\n");
    }
}

/* Opening path must fail with a message that names the file and holds
 * phrase. */
static void expect_error(const char *path, const char *phrase)
{
    char err[512] = "";
    MprtStFile f;
    int rc = mprt_st_open(path, &f, err, sizeof err);
    int ok = rc != 0 && f.map == NULL && f.tensors == NULL && strstr(err, path) &&
             strstr(err, phrase) && !strchr(err, '\n');
    CHECK(ok);
    if (getenv("TEST_VERBOSE"))
        printf("  %s\n", err);
    if (!ok)
        fprintf(stderr, "  %s: rc %d, message \"%s\", wanted \"%s\"\n", path, rc, err, phrase);
    if (!rc)
        mprt_st_close(&f);
}

/* Writes a file with the given header (length from strlen) and data. */
static const char *handmade_n(const char *header, size_t hlen, size_t data_bytes)
{
    const char *path = at("hand.safetensors");
    FILE *fp = fopen(path, "wb");
    for (int i = 0; i < 8; i++)
        fputc((int)((uint64_t)hlen >> (8 * i) & 0xff), fp);
    fwrite(header, 1, hlen, fp);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(i & 0xff, fp);
    fclose(fp);
    return path;
}

static const char *handmade(const char *header, size_t data_bytes)
{
    return handmade_n(header, strlen(header), data_bytes);
}

#define T(dtype, shape, offsets) \
    "{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets "}"

static void test_bad_files(void)
{
    expect_error(at("bad_st_truncated.safetensors"), "outside the");
    expect_error(at("no_such.safetensors"), "No such file");
    expect_error(outdir, "not a regular file");
    expect_error(handmade_n("", 0, 0), "expected '{'");
    FILE *fp = fopen(at("hand.safetensors"), "wb");
    fwrite("\x10\0\0", 1, 3, fp);
    fclose(fp);
    expect_error(at("hand.safetensors"), "only 3 bytes");
    fp = fopen(at("hand.safetensors"), "wb");
    fwrite("\x64\0\0\0\0\0\0\0{}", 1, 10, fp);       /* 100 */
    fclose(fp);
    expect_error(at("hand.safetensors"), "header length 100 runs past the end");
    fp = fopen(at("hand.safetensors"), "wb");
    fwrite("\x01\xe1\xf5\x05\0\0\0\0{}", 1, 10, fp);   /* 100000001 */
    fclose(fp);
    expect_error(at("hand.safetensors"), "over the format's limit");

    expect_error(handmade("{\"a\":" T("F32", "[2]", "[0,8]") "}", 4), "outside the 4-byte");
    expect_error(handmade("{\"a\":" T("F32", "[2]", "[8,0]") "}", 8), "end before they begin");
    expect_error(handmade("{\"a\":" T("F32", "[2]", "[0,4]") "}", 4), "needs 8 bytes");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4]") ",\"b\":" T("F32", "[1]", "[2,6]")
                          "}", 6), "overlap the previous tensor");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4]") ",\"b\":" T("F32", "[1]", "[8,12]")
                          "}", 12), "leave a gap");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4]") "}", 8), "trailing bytes");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4]") ",\"a\":" T("F32", "[1]", "[4,8]")
                          "}", 8), "'a' appears twice");
    expect_error(handmade("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0),
                 "metadata key 'k' appears twice");
    expect_error(handmade("{\"__metadata__\":{},\"__metadata__\":{}}", 0), "given twice");
    expect_error(handmade("{\"__metadata__\":{\"k\":1}}", 0), "values must be strings");
    expect_error(handmade("{\"a\":" T("F8_E4M3", "[1]", "[0,1]") "}", 1),
                 "dtype 'F8_E4M3' is not supported");
    expect_error(handmade("{\"a\":" T("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4),
                 "more than 8 dimensions");
    expect_error(handmade("{\"a\":" T("F32", "[-1]", "[0,4]") "}", 4), "negative number");
    expect_error(handmade("{\"a\":" T("F32", "[2.0]", "[0,8]") "}", 8), "fraction or exponent");
    expect_error(handmade("{\"a\":" T("F32", "[1e1]", "[0,40]") "}", 40), "fraction or exponent");
    expect_error(handmade("{\"a\":" T("F32", "[02]", "[0,8]") "}", 8), "leading zero");
    expect_error(handmade("{\"a\":" T("F32", "[9223372036854775808]", "[0,8]") "}", 8),
                 "number too large");
    expect_error(handmade("{\"a\":" T("F32", "[4611686018427387904,4]", "[0,0]") "}", 0),
                 "overflows");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4,8]") "}", 4), "exactly 2 numbers");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0]") "}", 4), "exactly 2 numbers");
    expect_error(handmade("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4),
                 "needs dtype, shape and data_offsets");
    expect_error(handmade("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 4), "duplicate key");
    expect_error(handmade("{\"a\":{\"dtype\":\"F32\",\"extra\":1}}", 4), "unknown key");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4]") ",}", 4), "expected a string");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4]") "} x", 4), "text after");
    expect_error(handmade("{\"a\":" T("F32", "[1]", "[0,4]"), 4), "expected '}'");
    expect_error(handmade("{\"a", 0), "unterminated string");
    expect_error(handmade("{\"a\\q\":1}", 0), "bad escape");
    expect_error(handmade("{\"a\\u12\":1}", 0), "bad hex digit");
    expect_error(handmade("{\"a\\ud800\":1}", 0), "high surrogate not followed");
    expect_error(handmade("{\"a\\ud800\\u0041\":1}", 0), "high surrogate not followed");
    expect_error(handmade("{\"a\\udc00\":1}", 0), "lone low surrogate");
    expect_error(handmade("{\"a\\u0000\":1}", 0), "\\u0000");
    expect_error(handmade("{\"a\tb\":1}", 0), "unescaped control character");
    expect_error(handmade("{\"a\xff\":1}", 0), "invalid UTF-8");
    expect_error(handmade("{\"a\xc0\x80\":1}", 0), "invalid UTF-8");          /* overlong */
    expect_error(handmade("{\"a\xed\xa0\x80\":1}", 0), "invalid UTF-8");      /* surrogate */
    expect_error(handmade("[]", 0), "expected '{'");
    expect_error(handmade("{\"a\":[]}", 0), "expected '{'");
    expect_error(handmade("{\"a\" " T("F32", "[1]", "[0,4]") "}", 4), "expected ':'");
}

/* Hand-written headers the parser must accept. */
static void test_good_handmade(void)
{
    char err[512];
    MprtStFile f;
    /* escapes of every kind, a surrogate pair, whitespace, keys in any order */
    const char *p = handmade(" {\n\t\"\\u00e9\\ud834\\udd1e\\\"\\\\\\/\\b\\f\\n\\r\\t\" : "
                             "{ \"data_offsets\" : [ 0 , 4 ] , \"shape\" : [ ] , "
                             "\"dtype\" : \"I32\" } } \r\n  ", 4);
    CHECK(mprt_st_open(p, &f, err, sizeof err) == 0);
    const MprtStTensor *t = mprt_st_find(&f, "\xc3\xa9\xf0\x9d\x84\x9e\"\\/\b\f\n\r\t");
    CHECK(t && t->rank == 0 && t->dtype == MPRT_I32 && t->nbytes == 4);
    mprt_st_close(&f);
    /* nothing at all, and an empty tensor sharing an offset */
    CHECK(mprt_st_open(handmade("{}", 0), &f, err, sizeof err) == 0 && f.ntensors == 0);
    mprt_st_close(&f);
    p = handmade("{\"b\":" T("U8", "[2]", "[0,2]") ",\"a\":" T("F32", "[0,5]", "[0,0]") "}", 2);
    CHECK(mprt_st_open(p, &f, err, sizeof err) == 0 && f.ntensors == 2);
    const MprtStTensor *a = mprt_st_find(&f, "a"), *b = mprt_st_find(&f, "b");
    CHECK(a && a->nbytes == 0 && b && b->nbytes == 2 && ((const uint8_t *)b->data)[1] == 1);
    mprt_st_close(&f);
}

/* Saving must fail with a message holding phrase and leave no file. */
static void expect_save_error(const char *path, const MprtStEntry *e, int n,
                              const char *const *kv, int nkv, const char *phrase)
{
    char err[512] = "";
    int rc = mprt_st_save(path, e, n, kv, nkv, err, sizeof err);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int ok = rc != 0 && strstr(err, path) && strstr(err, phrase) && access(tmp, F_OK) != 0;
    CHECK(ok);
    if (getenv("TEST_VERBOSE"))
        printf("  %s\n", err);
    if (!ok)
        fprintf(stderr, "  save %s: rc %d, message \"%s\", wanted \"%s\"\n", path, rc, err,
                phrase);
}

static void test_save_errors(void)
{
    static const int64_t two[1] = {2}, neg[1] = {-2};
    float x[2] = {1, 2};
    const char *never = at("mprt_never.safetensors");
    MprtStEntry e[2] = {{"a", MPRT_F32, 1, two, x, 8}, {"a", MPRT_F32, 1, two, x, 8}};
    expect_save_error(never, e, 2, NULL, 0, "tensor name 'a' given twice");
    const char *kv[4] = {"k", "1", "k", "2"};
    expect_save_error(never, e, 1, kv, 2, "metadata key 'k' given twice");
    kv[2] = "bad\xff";
    expect_save_error(never, e, 1, kv, 2, "not UTF-8");
    e[0].name = "bad\xc3";
    expect_save_error(never, e, 1, NULL, 0, "not valid UTF-8");
    e[0].name = "__metadata__";
    expect_save_error(never, e, 1, NULL, 0, "reserved");
    e[0] = (MprtStEntry){"a", MPRT_F32, 1, two, x, 4};
    expect_save_error(never, e, 1, NULL, 0, "has 4 bytes of data, its shape needs 8");
    e[0] = (MprtStEntry){"a", MPRT_F32, 1, neg, x, 8};
    expect_save_error(never, e, 1, NULL, 0, "bad dtype, rank or shape");
    e[0] = (MprtStEntry){"a", MPRT_F32, 1, two, NULL, 8};
    expect_save_error(never, e, 1, NULL, 0, "(NULL)");
    e[0] = (MprtStEntry){"a", MPRT_F32, 1, two, x, 8};
    expect_save_error("/nonexistent-dir/x.safetensors", e, 1, NULL, 0, "cannot create");
    CHECK(access(never, F_OK) != 0);
}

/* Reads keep.safetensors and says whether its tensor "w" starts with v. */
static int keep_holds(float v)
{
    char err[512];
    MprtStFile f;
    if (mprt_st_open(at("keep.safetensors"), &f, err, sizeof err))
        return 0;
    const MprtStTensor *t = mprt_st_find(&f, "w");
    float got = 0;
    if (t && t->nbytes >= 4)
        memcpy(&got, t->data, 4);
    mprt_st_close(&f);
    return t && got == v;
}

/* Saves a 64 KiB tensor "w" full of v over keep.safetensors in a child
 * limited to 4 KiB files; returns its wait status. */
static int save_limited(float v, int ignore_sigxfsz)
{
    static float big[1 << 14];
    static const int64_t shape[1] = {1 << 14};
    pid_t pid = fork();
    if (pid == 0) {
        char err[512] = "";
        struct rlimit r = {4096, 4096};
        if (ignore_sigxfsz)
            signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &r);
        for (int i = 0; i < 1 << 14; i++)
            big[i] = v;
        MprtStEntry e = {"w", MPRT_F32, 1, shape, big, sizeof big};
        int rc = mprt_st_save(at("keep.safetensors"), &e, 1, NULL, 0, err, sizeof err);
        _exit(rc != 0 && strstr(err, "File too large") && strstr(err, "unchanged") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void test_torn_writes(void)
{
    char err[512];
    static const int64_t one[1] = {1};
    float a = 1, b = 2;
    MprtStEntry e = {"w", MPRT_F32, 1, one, &a, 4};
    char keep[1024], tmp[1024];
    snprintf(keep, sizeof keep, "%s", at("keep.safetensors"));
    snprintf(tmp, sizeof tmp, "%s", at("keep.safetensors.tmp"));
    CHECK(mprt_st_save(keep, &e, 1, NULL, 0, err, sizeof err) == 0 && keep_holds(1));
    e.data = &b;
    CHECK(mprt_st_save(keep, &e, 1, NULL, 0, err, sizeof err) == 0 && keep_holds(2));
    CHECK(access(tmp, F_OK) != 0);

    /* PATH.tmp cannot be created: the old file stays */
    CHECK(mkdir(tmp, 0755) == 0);
    e.data = &a;
    CHECK(mprt_st_save(keep, &e, 1, NULL, 0, err, sizeof err) != 0 && strstr(err, "cannot create"));
    CHECK(keep_holds(2));
    rmdir(tmp);

    /* a write error half way (EFBIG): reported, PATH.tmp removed, old file stays */
    int status = save_limited(3, 1);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(keep_holds(2) && access(tmp, F_OK) != 0);

    /* a crash half way (killed by SIGXFSZ): the old file stays, a stale
     * PATH.tmp may be left, and the next save replaces it */
    status = save_limited(4, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ);
    CHECK(keep_holds(2));
    CHECK(access(tmp, F_OK) == 0);
    e.data = &a;
    CHECK(mprt_st_save(keep, &e, 1, NULL, 0, err, sizeof err) == 0 && keep_holds(1));
    CHECK(access(tmp, F_OK) != 0);

    /* saving a file's own mapped tensors over it */
    MprtStFile f;
    CHECK(mprt_st_open(keep, &f, err, sizeof err) == 0);
    CHECK(resave(&f, keep, err, sizeof err) == 0);
    mprt_st_close(&f);
    CHECK(keep_holds(1));

    /* a symlink at PATH.tmp is replaced, never written through */
    CHECK(symlink("/dev/full", tmp) == 0);
    e.data = &b;
    CHECK(mprt_st_save(keep, &e, 1, NULL, 0, err, sizeof err) == 0 && keep_holds(2));
    CHECK(access(tmp, F_OK) != 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_safetensors OUTDIR (made by make_io_fixtures.py OUTDIR)\n");
        return 2;
    }
    outdir = argv[1];
    if (access(at("st_all.safetensors"), R_OK) != 0) {
        fprintf(stderr, "test_safetensors: %s has no fixtures; run make_io_fixtures.py %s "
                "first\n", outdir, outdir);
        return 2;
    }
    test_official();
    test_bad_files();
    test_good_handmade();
    test_save_errors();
    test_torn_writes();
    return check_summary("test_safetensors");
}
