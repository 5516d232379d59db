/* main.c — the mpcc command: `mpcc export ...` puts a checkpoint's weights
 * back into the model (emit/export.c); anything else is parsed (cli.c) and
 * run through the passes in driver.c, which lists them in order. */
#include "mpcc.h"

#include <string.h>

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "export") == 0)
        return export_main(argc - 1, argv + 1);   /* weights back into the model */
    Arena *arena = arena_new();
    Options opt;
    cli_parse(arena, argc, argv, &opt);
    return driver_run(arena, &opt);
}
