/* shoal — one binary, one subcommand per job (SPEC section 2). */
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
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

/* libfabric pulls in libinfinipath (through its psm provider), whose load-time constructor takes
 * SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT and SIGTERM for itself (unless IPATH_NO_BACKTRACE is
 * in the environment): its handler may write a .btr file into the current folder, then calls
 * exit(1), which runs exit handlers while the other threads still work. A `shoal cat` or
 * `shoal bench` stopped with SIGTERM or ^C then exited 1, sometimes crashing on its way out,
 * instead of dying of the signal; a real crash never reached ASan or a core dump. shoal uses no
 * PSM device. So the program notes these signals' actions before any library's constructor runs
 * (its preinit functions run first; setting the variable there would not last: libc installs the
 * original environment when it initialises) and main() puts back every one that a handler inside
 * the PSM libraries took since. Mounts and members install their own SIGTERM handlers later. */
static const int lib_taken_sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT, SIGTERM};
#define LIB_TAKEN_N (sizeof(lib_taken_sigs) / sizeof(lib_taken_sigs[0]))
static struct sigaction sigs_before_libs[LIB_TAKEN_N];
static bool sigs_noted[LIB_TAKEN_N];

static void note_signals(int argc, char **argv, char **envp)
{
        for (size_t i = 0; i < LIB_TAKEN_N; i++)
                sigs_noted[i] = sigaction(lib_taken_sigs[i], NULL, &sigs_before_libs[i]) == 0;
}
__attribute__((section(".preinit_array"),
               used)) static void (*const shoal_preinit)(int, char **, char **) = note_signals;

/* Whether the handler of action SA lives in a PSM library. */
static bool psm_handler(const struct sigaction *sa)
{
        uintptr_t h = (sa->sa_flags & SA_SIGINFO) ? (uintptr_t)sa->sa_sigaction
                                                  : (uintptr_t)sa->sa_handler;
        if (h == (uintptr_t)SIG_DFL || h == (uintptr_t)SIG_IGN)
                return false;
        Dl_info di;
        return dladdr((void *)h, &di) && di.dli_fname &&
               (strstr(di.dli_fname, "libinfinipath") || strstr(di.dli_fname, "libpsm"));
}

static void restore_signals(void)
{
        for (size_t i = 0; i < LIB_TAKEN_N; i++) {
                struct sigaction now;
                if (sigs_noted[i] && !sigaction(lib_taken_sigs[i], NULL, &now) && psm_handler(&now))
                        sigaction(lib_taken_sigs[i], &sigs_before_libs[i], NULL);
        }
}

static void usage(FILE *out)
{
        fprintf(out, "usage: shoal COMMAND [flags]   (shoal COMMAND --help for its flags)\n\n"
                     "shoal is a distributed block cache for object storage.\n\ncommands:\n");
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
                fprintf(out, "  %-8s %s\n", cmds[i].name, cmds[i].about);
}

int main(int argc, char **argv)
{
        restore_signals();
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
