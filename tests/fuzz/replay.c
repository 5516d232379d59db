/* replay.c — runs the fuzz target over files and folders of inputs, so the
 * corpus is replayed by CTest under AddressSanitizer and UBSan without
 * libFuzzer. A run that dies (a sanitizer report, an internal-error abort)
 * names the input it was on. Usage: fuzz_replay PATH...  (files, or folders
 * of files) */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define HAVE_SANITIZER_CALLBACK 1
#endif
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *current;   /* the input being run */

static void say_current(void)
{
    static const char head[] = "fuzz_replay: the run above was on ";
    if (!current)
        return;
    ssize_t ignored = write(2, head, sizeof head - 1);
    ignored = write(2, current, strlen(current));
    ignored = write(2, "\n", 1);
    (void)ignored;
}

static void on_abort(int sig)
{
    say_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!buf || (long)got != n) {
        free(buf);
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        return 1;
    }
    current = path;
    LLVMFuzzerTestOneInput(buf, got);
    current = NULL;
    free(buf);
    return 0;
}

static int run_path(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz_replay: no such file: %s\n", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d)
        return 1;
    int bad = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        bad |= run_path(sub, count);
    }
    closedir(d);
    return bad;
}

int main(int argc, char **argv)
{
    signal(SIGABRT, on_abort);
#ifdef HAVE_SANITIZER_CALLBACK
    __sanitizer_set_death_callback(say_current);
#endif
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++)
        bad |= run_path(argv[i], &count);
    printf("fuzz_replay: %d inputs replayed\n", count);
    if (count == 0) {
        fprintf(stderr, "fuzz_replay: no inputs found\n");
        return 1;
    }
    return bad;
}
