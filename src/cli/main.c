/* shoal — one binary, one subcommand per job (SPEC section 2). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
        const char *name;
        int (*fn)(int, char **);
        const char *about;
} cmds[] = {
        {"mount", shoal_cmd_mount, "mount a volume with FUSE (and share its cache)"},
        {"umount", shoal_cmd_umount, "unmount a shoal mount"},
        {"serve", shoal_cmd_serve, "run a cache group member without a mount"},
        {"cat", shoal_cmd_cat, "read one object through the whole read path to stdout"},
        {"group", shoal_cmd_group, "list the members of a cache group"},
        {"stats", shoal_cmd_stats, "show live metrics of a mount or member"},
        {"warmup", shoal_cmd_warmup, "fill the group's caches"},
        {"bench", shoal_cmd_bench, "read benchmark through the group"},
        {"ping", shoal_cmd_ping, "check each transport to a member"},
};

static void usage(FILE *out)
{
        fprintf(out, "usage: shoal COMMAND [flags]   (shoal COMMAND --help for its flags)\n\n"
                     "shoal is a distributed block cache for object storage.\n\ncommands:\n");
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
                fprintf(out, "  %-8s %s\n", cmds[i].name, cmds[i].about);
}

int main(int argc, char **argv)
{
        signal(SIGPIPE, SIG_IGN);
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
                usage(stdout);
                return 0;
        }
        if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
                puts("shoal 0.1.0");
                return 0;
        }
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
                if (!strcmp(argv[1], cmds[i].name))
                        return cmds[i].fn(argc - 2, argv + 2);
        fprintf(stderr, "shoal: unknown command %s (see 'shoal --help')\n", argv[1]);
        return 2;
}
