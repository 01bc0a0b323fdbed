/* Subcommands whose subsystems land in later work: each parses its flags (so --help and bad flags
 * behave) and then says plainly that it is not available yet, with exit code 2. */
#include <stdio.h>

#include "cli/cli.h"

static int not_yet(enum shoal_cmd cmd, const char *name, int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, cmd, name, argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        return shoal_cli_fail(&cli, "not available yet in this build");
}

int shoal_cmd_warmup(int argc, char **argv)
{
        return not_yet(CMD_WARMUP, "warmup", argc, argv);
}
