#!/usr/bin/env bash
# The harness itself (lib.sh) [RELIABILITY: a broken member]: small scripts built on lib.sh start
# processes that break in one way each — a leak at exit, an ASan or UBSan report in a foreground
# command whose stderr is thrown away, an abort, a kill -9 nobody declared, a process that ignores
# SIGTERM, a fail() in a subshell, a skip in CI, a renamed summary field — and each must fail; a
# clean script must pass, and a skip outside CI must exit 77 and be recorded.
. "$(dirname "$0")/lib.sh"
LIB=$(cd "$(dirname "$0")" && pwd)/lib.sh

# A sanitized helper that misbehaves on demand, built with the flags of the test build.
cat >"$T/bad.c" <<'EOF'
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

/* Once asked to stop, vfork a child that sleeps 3 s: this thread waits for it in the kernel
 * and cannot take the SIGSTOP of LeakSanitizer's tracer until then, so the leak check at exit
 * stays attached and waiting for 3 s. */
static volatile sig_atomic_t vforking;
static void *vforker(void *arg)
{
        while (!stop)
                usleep(1000);
        vforking = 1;
        pid_t c = vfork();
        if (c == 0) {
                struct timespec ts = {3, 0};
                nanosleep(&ts, NULL);
                _exit(0);
        }
        if (c > 0)
                waitpid(c, NULL, 0);
        return arg;
}

int main(int argc, char **argv)
{
        const char *what = argc > 1 ? argv[1] : "clean";
        if (!strcmp(what, "ubsan")) {
                int x = INT_MAX - 3 + argc;
                x += atoi(argc > 2 ? argv[2] : "7");
                printf("%d\n", x);
                return 0;
        }
        if (!strcmp(what, "asan")) {
                char *p = malloc(8);
                p[8 + argc] = 1;
                free(p);
                return 0;
        }
        if (!strcmp(what, "abort"))
                abort();
        pthread_t th;
        if (!strcmp(what, "leak-vfork") && pthread_create(&th, NULL, vforker, NULL))
                return 3;
        if (!strcmp(what, "ignore-term"))
                signal(SIGTERM, SIG_IGN);
        else
                signal(SIGTERM, on_term);
        printf("ready\n");
        fflush(stdout);
        while (!stop)
                pause();
        if (!strcmp(what, "leak-vfork")) {
                while (!vforking)
                        usleep(1000);
                usleep(200000); /* into the vfork */
        }
        if (!strncmp(what, "leak", 4)) {
                char *p = malloc(1);
                p[0] = 1;
                p = NULL;
        }
        return 0;
}
EOF
cc -std=gnu17 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer -pthread "$T/bad.c" -o "$T/bad" || fail "cannot build the helper"

# case NAME WANT_RC BODY — runs BODY as a test script built on lib.sh; its exit status must be
# WANT_RC (0, 1 or 77) and a failing run must say why on stderr.
n=0
case_() {
  local name=$1 want=$2 body=$3 got=0
  n=$((n + 1))
  printf '. %q\nBAD=%q\nbg() { start_bg p --kind "$1" -- "$BAD" "$2"; wait_log "$T/p.out" ready 10; }\n%s\necho PASS\n' \
    "$LIB" "$T/bad" "$body" >"$T/case$n.sh"
  env -u CI SHOAL_SKIP_LOG="$T/skips" bash "$T/case$n.sh" >"$T/case$n.out" 2>&1 || got=$?
  if [ "$got" -ne "$want" ]; then
    sed 's/^/    /' "$T/case$n.out" >&2
    fail "$name: exit $got, want $want"
  fi
  echo "  $name: exit $got ($(grep -o -E 'FAIL: .{0,90}|SKIP.{0,60}|PASS$' "$T/case$n.out" | sort | head -n 1))"
}

echo "== a clean process, stopped with SIGTERM: pass"
case_ clean 0 'bg member clean'
echo "== a leak at exit after SIGTERM: fail"
case_ leak 1 'bg member leak'
grep -q "LeakSanitizer" "$T/case$n.out" || fail "leak: the report is not shown"
echo "== a leak in a process stopped mid-test with stop_proc: fail at once"
case_ leak-stop 1 'bg member leak; stop_proc p; echo NOT-REACHED'
grep -q NOT-REACHED "$T/case$n.out" && fail "stop_proc did not fail at once"
grep -q "LeakSanitizer" "$T/case$n.out" || fail "leak-stop: the report is not shown"
echo "== a leak check at exit already under way when the harness stops the process: fail with"
echo "   the report (a SIGCONT from the harness would discard the tracer's SIGSTOP and hang it)"
case_ leak-tracing 1 'STOP_SECS=15; bg member leak-vfork; kill -TERM "$PID_p"
traced() { grep -q -E "^TracerPid:[[:space:]]*[1-9]" /proc/"$PID_p"/task/*/status; }
wait_until 20 traced || fail "no leak check seen"'
grep -q "LeakSanitizer" "$T/case$n.out" || fail "leak-tracing: the report is not shown"
grep -q "did not end" "$T/case$n.out" && fail "leak-tracing: the leak check hung"
echo "== ASan report in a foreground command with stderr thrown away: fail"
case_ asan-fg 1 '"$BAD" asan 2>/dev/null || true'
echo "== UBSan overflow in a foreground command with stderr thrown away: fail"
case_ ubsan-fg 1 '"$BAD" ubsan 2>/dev/null || true'
grep -q "__ubsan_handle" "$T/case$n.out" || fail "ubsan: the report does not name the check"
echo "== abort() in a background process: fail"
case_ abort 1 'start_bg p --kind helper -- "$BAD" abort; wait_proc p 10'
echo "== a member killed with kill -9 that the test did not declare: fail"
case_ raw-kill9 1 'bg member clean; kill -9 "$PID_p"'
echo "== the same kill through kill9: pass"
case_ kill9 0 'bg member clean; kill9 p'
echo "== a process that ignores SIGTERM: fail"
case_ ignore-term 1 'STOP_SECS=2; bg member ignore-term'
echo "   ... and its thread stacks are in the test's output before it is killed"
grep -q "=== stacks of pid" "$T/case$n.out" || fail "ignore-term: no stack dump"
grep -q -E "^#[0-9]+ .* in (__GI___)?pause|^#[0-9]+ .* in main \\(" "$T/case$n.out" ||
  fail "ignore-term: the dump has no user stack: $(grep -A 20 '=== stacks' "$T/case$n.out" | head -n 30)"
echo "== a process that does not end when waited for: fail, with its stacks"
case_ wait-hang 1 'bg helper ignore-term; wait_proc p 1'
grep -q "=== stacks of pid" "$T/case$n.out" || fail "wait-hang: no stack dump"
echo "== a member stopped by SIGSTOP at the end still gets SIGTERM: pass"
case_ stopped 0 'bg member clean; kill -STOP "$PID_p"'
echo "== fail() in a subshell that the test ignores: fail"
case_ subshell 1 '( fail "inside" ) || true'
echo "== a summary field that is not there: fail"
case_ summary 1 'echo "shoal cat: 5 bytes; remote 1 (5 bytes), fallbacks 0" >"$T/s"; v=$(summary_field "object store GETs" "$T/s") || true'
echo "== summary fields are summed over every line"
case_ summary-sum 0 'printf "shoal cat: 5 bytes; fallbacks 2; object store GETs 1 (5 bytes)\nshoal cat: 5 bytes; fallbacks 3; object store GETs 0 (0 bytes)\n" >"$T/s"; [ "$(summary_field fallbacks "$T/s")" = 5 ] || fail sum'
echo "== a process in PIDS that dies of a signal: fail"
case_ pids 1 'sleep 30 & PIDS+=($!); kill -KILL $!'
echo "== a process in PIDS that exited 1, which the test waited for and checked: pass"
case_ pids-waited 0 'bash -c "exit 1" & p=$!; PIDS+=($p); wait_exit $p; [ "$EXIT_RC" -eq 1 ] || fail rc'
case_ pids-waited2 0 'bash -c "exit 1" & p=$!; PIDS+=($p); wait $p || true'
echo "== a Python helper with a traceback in a thread, stopped by SIGTERM: fail"
case_ helper-traceback 1 'start_bg h -- python3 -c "import threading, time; t = threading.Thread(target=lambda: 1 / 0); t.start(); t.join(); time.sleep(60)"; wait_log "$T/h.err" ZeroDivisionError'
echo "== a Python helper that exits 3 on its own: fail; one stopped by SIGTERM: pass"
case_ helper-exit 1 'start_bg h -- python3 -c "import sys; sys.exit(3)"; wait_until 20 eval "! proc_running h"'
case_ helper-clean 0 'start_bg h -- python3 -c "import time; time.sleep(60)"'
echo "== skip outside CI: 77, recorded"
: >"$T/skips"
case_ skip 77 'skip "no frobnicator"'
grep -q "no frobnicator" "$T/skips" || fail "the skip was not recorded"
echo "== skip and skip_section with CI=true: fail"
n=$((n + 1))
printf '. %q\nskip "no frobnicator"\n' "$LIB" >"$T/case$n.sh"
rc=0
CI=true SHOAL_SKIP_LOG="$T/skips" bash "$T/case$n.sh" >"$T/case$n.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "skip in CI: exit $rc"
printf '. %q\nskip_section "no frobnicator"\necho PASS\n' "$LIB" >"$T/case$n.sh"
rc=0
CI=true SHOAL_SKIP_LOG="$T/skips" bash "$T/case$n.sh" >"$T/case$n.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "skip_section in CI: exit $rc"
echo "  skip, skip_section with CI=true: exit 1"
echo "PASS test_harness"
