# Shared helpers for integration tests (sourced). Every test makes its own temporary folder,
# starts its own processes through this file and stops them by PID on exit.
#
# The harness is there so that a broken process fails the test even when clients fell back to
# the store and every read was right:
#   - every process a test starts is registered (start_member, start_mount, start_bg, track...);
#     at the end each one still running gets SIGTERM (never kill -9) and must end in time with
#     the status its kind owes (shoal processes: 0); one that ended early with another status,
#     or died of a signal nobody sent deliberately (kill9 NAME), fails the test;
#   - sanitizer reports (ASan, UBSan, LSan leaks) of every sanitized process, foreground ones
#     included, go to $T/san (log_path), and every registered process's logs are scanned for
#     sanitizer, assertion and crash reports; any report fails the test;
#   - fail() in a subshell or a background job fails the test too ($T/.failures);
#   - skip / skip_section: with CI=true a skip is a failure; elsewhere it is recorded in
#     $SHOAL_SKIP_LOG, which scripts/test.sh lists at the end of the run.
set -euo pipefail

SHOAL=${SHOAL_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/shoal}
SRC=${SHOAL_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TEST_NAME=$(basename "$0" .sh)
T=$(mktemp -d /tmp/shoal-test.XXXXXX)
mkdir -p "$T/san"
: >"$T/.failures"
# Reports go to $T/san/report.PID, whatever the process did with its stderr. With GCC's split
# runtimes a UBSan report itself stays on stderr; abort_on_error turns it into an ASan ABRT report
# (with the __ubsan_handle_* frame) that lands here. Leak checking is on for every process.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:handle_abort=1:log_path=$T/san/report"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$T/san/report"
# libfabric pulls in libinfinipath, whose load-time constructor takes SIGSEGV, SIGABRT, SIGTERM
# and more for itself: it prints "terminated with signal N", writes a .btr file into the current
# folder and exits 1, so ASan never sees the crash (and a SIGTERM'd client exits 1 instead of
# dying of it). IPATH_NO_BACKTRACE leaves the signals to ASan and to their defaults. (The shoal
# program puts them back itself, src/cli/main.c; the test programs linking libshoal do not.)
export IPATH_NO_BACKTRACE=1
# What counts as a report in a log or a sanitizer file.
REPORT_RE='terminated with signal [0-9]+ at PC|ERROR: [A-Za-z]*Sanitizer|SUMMARY: [A-Za-z]*Sanitizer|[A-Za-z]*Sanitizer:DEADLYSIGNAL|runtime error:|Assertion .* failed|Segmentation fault|stack smashing detected|double free or corruption|malloc\(\): |free\(\): invalid'

# What also counts as a report in a helper's log (the Python helpers: fakemember.py,
# faultproxy.py, frames.py...): an uncaught exception, in the main thread or another one.
HELPER_RE='Traceback \(most recent call last\)|^Exception in thread '

# Compatibility: tests may still add PIDs here; the harness stops them like any other process.
PIDS=()
MOUNTS=()
STOP_SECS=${SHOAL_STOP_TIMEOUT:-30} # how long a process may take to end after SIGTERM
AT_EXIT=() # commands (eval'd) run after every process is stopped: namespaces, sysctls...

# The process table: one entry per process started, in start order.
P_NAME=()  # name given by the test
P_PID=()   # PID
P_KIND=()  # member | mount | daemon | client | helper | infra (see track)
P_LOGS=()  # space-separated log files to scan
P_STATE=() # run | done (stopped, reaped or killed by the harness or through it)

ci() { [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; }

fail() {
  echo "FAIL: $*" >&2
  echo "$*" >>"$T/.failures" 2>/dev/null || true
  exit 1
}

# note_skip REASON — records a skip in $SHOAL_SKIP_LOG (scripts/test.sh lists them).
note_skip() {
  if [ -n "${SHOAL_SKIP_LOG:-}" ]; then echo "$TEST_NAME: $*" >>"$SHOAL_SKIP_LOG" || true; fi
}

# skip REASON — the whole test cannot run here: exit 77 (ctest: skipped); a failure in CI.
skip() {
  note_skip "$*"
  ci && fail "skipped in CI (CI=$CI): $*"
  echo "SKIP: $*" >&2
  exit 77
}

# skip_section REASON — a part of a passing test cannot run here; a failure in CI.
skip_section() {
  note_skip "(section) $*"
  ci && fail "section skipped in CI (CI=$CI): $*"
  echo "SKIP (section): $*" >&2
}

alive() { # alive PID — running (a zombie is not)
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$st" != Z ]
}

# track NAME PID [KIND [LOG...]] — registers a process the test started itself (with its own
# redirections). KIND says what it owes at the end:
#   member, mount  shoal serve / shoal mount: SIGTERM must end it with 0
#   daemon         a background (-d) shoal process, not our child: SIGTERM must end it
#   client         a shoal command run in the background: 0 when it ends; if still running at the
#                  end, SIGTERM may end it (0 or 143)
#   helper, infra  test helpers and real third-party servers: 0, or 143 (SIGTERM, from the
#                  harness or the test); helpers stop first, infra (redis, s3rver) last
# Sets PID_NAME. LOGs are scanned for reports when the process ends and at the end of the test.
track() {
  local name=$1 pid=$2 kind=${3:-helper}
  shift 2
  [ $# -gt 0 ] && shift
  P_NAME+=("$name")
  P_PID+=("$pid")
  P_KIND+=("$kind")
  P_LOGS+=("$*")
  P_STATE+=(run)
  eval "PID_$name=$pid"
}

# start_bg NAME [--kind KIND] [--log FILE]... -- CMD... — runs CMD in the background, stdout in
# $T/NAME.out, stderr appended to $T/NAME.err, registered as KIND (default helper).
start_bg() {
  local name=$1 kind=helper logs=()
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --kind) kind=$2; shift 2 ;;
      --log) logs+=("$2"); shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  "$@" >"$T/$name.out" 2>>"$T/$name.err" &
  track "$name" $! "$kind" "$T/$name.err" "${logs[@]}"
}

_entry() { # _entry NAME — index of the newest entry named NAME, else fail
  local i
  for ((i = ${#P_NAME[@]} - 1; i >= 0; i--)); do
    [ "${P_NAME[$i]}" = "$1" ] && { echo "$i"; return 0; }
  done
  fail "no process named $1 was started"
}

_entry_of_pid() { # _entry_of_pid PID — index of the entry with PID, or nothing
  local i
  for ((i = ${#P_PID[@]} - 1; i >= 0; i--)); do
    [ "${P_PID[$i]}" = "$1" ] && { echo "$i"; return 0; }
  done
  return 0
}

# scan_reports FILE... — prints the report lines found in FILEs (nothing when clean).
scan_reports() {
  local f
  for f in "$@"; do
    [ -f "$f" ] || continue
    if grep -q -a -E "$REPORT_RE" "$f"; then
      echo "--- $f:"
      grep -a -E -A 12 "$REPORT_RE" "$f" | head -n 40
    fi
  done
}

# dump_stacks PID [WHY] — writes to the test's stderr where PID is stuck, before the harness
# kills it: each thread's state, wait channel and kernel stack, then every thread's user stack
# (gdb), and the same for its child processes (LeakSanitizer's tracer at exit is one: while it
# holds the threads, gdb cannot attach, and its own stack says where the leak check is).
# SHOAL_STACK_SECS bounds each gdb (default 120 s).
dump_stacks() {
  local pid=$1 why=${2:-} t c
  alive "$pid" || return 0
  (
    set +e +o pipefail
    echo "=== stacks of pid $pid${why:+ ($why)}: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | head -c 300)"
    grep -E '^(State|TracerPid|Threads):' "/proc/$pid/status" 2>/dev/null | tr '\n' ' '
    echo
    for t in /proc/"$pid"/task/*; do
      echo "--- thread ${t##*/} ($(cat "$t/comm" 2>/dev/null)): state $(awk '{print $3}' "$t/stat" 2>/dev/null), wchan $(cat "$t/wchan" 2>/dev/null)"
      head -n 8 "$t/stack" 2>/dev/null | sed 's/^/    /'
    done
    if command -v gdb >/dev/null; then
      timeout "${SHOAL_STACK_SECS:-120}" gdb -p "$pid" -batch -nx -ex 'set pagination off' \
        -ex 'thread apply all bt' </dev/null 2>&1 |
        grep -v -E '^\[(New LWP|Thread debugging|Inferior)|^Using host libthread_db|^warning: ' | head -n 3000
    else
      echo "(no gdb: user stacks not shown)"
    fi
    for c in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
      echo "=== child $c of $pid: $(tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | head -c 200)"
      for t in /proc/"$c"/task/*; do
        echo "--- thread ${t##*/}: state $(awk '{print $3}' "$t/stat" 2>/dev/null), wchan $(cat "$t/wchan" 2>/dev/null)"
        head -n 8 "$t/stack" 2>/dev/null | sed 's/^/    /'
      done
      if command -v gdb >/dev/null; then
        timeout "${SHOAL_STACK_SECS:-120}" gdb -p "$c" -batch -nx -ex 'set pagination off' \
          -ex 'thread apply all bt' </dev/null 2>&1 |
          grep -v -E '^\[(New LWP|Thread debugging|Inferior)|^Using host libthread_db|^warning: ' | head -n 500
      fi
    done
    # A mount whose FUSE connection lives on in another mount namespace (a copy made by
    # `ip netns exec`, unshare -m, a container started meanwhile) is not ended by an unmount here.
    local mp me ns seen=" "
    me=$(readlink /proc/self/ns/mnt)
    for t in /proc/[0-9]*; do
      ns=$(readlink "$t/ns/mnt" 2>/dev/null) || continue
      [ "$ns" = "$me" ] && continue
      case $seen in *" $ns "*) continue ;; esac
      seen+="$ns "
      for mp in "${MOUNTS[@]:-}"; do
        [ -n "$mp" ] && grep -q " $mp " "$t/mountinfo" 2>/dev/null &&
          echo "=== $mp is still mounted in the mount namespace $ns of pid ${t#/proc/} ($(tr '\0' ' ' <"$t/cmdline" 2>/dev/null | head -c 150)): its FUSE connection stays open there"
      done
    done
    echo "=== end of stacks of pid $pid"
  ) >&2
  return 0
}

# _wait_gone PID SECONDS — polls until PID has ended; 1 if it is still running.
_wait_gone() {
  local i
  for ((i = 0; i < $2 * 20; i++)); do
    alive "$1" || return 0
    sleep 0.05
  done
  return 1
}

# _children_work PID — the CPU ticks used so far by PID's child processes, plus one for each of
# their threads that is runnable (so that a child waiting for a CPU counts as working). One awk
# for all: this runs while a loaded machine is slow to start processes.
_children_work() {
  local c files=()
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do files+=(/proc/"$c"/task/*/stat); done
  [ ${#files[@]} -gt 0 ] || { echo 0; return 0; }
  # (after the command name, which may hold spaces: state, then utime and stime 11 fields on)
  awk '{ sub(/^.*\) /, ""); n += $12 + $13 + ($1 == "R") } END { print n + 0 }' "${files[@]}" 2>/dev/null ||
    echo 0
}

# _wait_end PID SECONDS [NAME] — like _wait_gone, but a process whose exit is still at work at
# the deadline gets more time: ASan's leak check at exit runs in a child process (LeakSanitizer's
# tracer, which holds the threads while it scans the heap), and a report is symbolized by another
# (llvm-symbolizer); on a loaded machine each can take longer than the deadline. While such a
# child keeps using CPU (or waits for one), the wait goes on in 2 s steps, up to 3 × SECONDS in
# all, and a note says so; a child that makes no progress for 2 s, or no child at all, is a hang
# and ends the wait at once, as before.
_wait_end() {
  local pid=$1 secs=$2 name=${3:-pid $1} waited before now
  _wait_gone "$pid" "$secs" && return 0
  waited=$secs
  before=$(_children_work "$pid")
  while [ "$waited" -lt $((3 * secs)) ] && [ "$before" -gt 0 ]; do
    if _wait_gone "$pid" 2; then
      echo "note: $name ended $waited-$((waited + 2)) s after it was asked to: its exit (LeakSanitizer's check, the symbolizer) was still at work at the $secs s deadline" >&2
      return 0
    fi
    waited=$((waited + 2))
    now=$(_children_work "$pid")
    [ "$now" -gt "$before" ] || break
    before=$now
  done
  return 1
}

# _job_stopped PID — PID is stopped by a stop signal (or has one pending) and none of its threads
# is traced.
_job_stopped() {
  local st key v stopped=1
  read -r st <"/proc/$1/stat" 2>/dev/null || return 1
  st=${st##*) }
  [ "${st%% *}" = T ] && stopped=0
  while read -r key v; do
    case $key in
      TracerPid:) [ "$v" = 0 ] || return 1 ;;
      # SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU pending, for the process or one of its threads
      *) (((0x$v & 0x3c0000) != 0)) && stopped=0 ;;
    esac
  done < <(grep -h -E '^(TracerPid|SigPnd|ShdPnd):' /proc/"$1"/task/*/status 2>/dev/null)
  return $stopped
}

# _terminate PID — SIGTERM, preceded by SIGCONT only when PID is stopped by a stop signal. Never
# SIGCONT otherwise: it discards every pending stop signal, among them the SIGSTOP with which
# LeakSanitizer's tracer (PTRACE_ATTACH) stops each thread for the leak check at exit; the tracer
# then waits for a stop that never comes and the process spins in sched_yield for good. (A SIGCONT
# sent right after the SIGTERM lands in that window when the machine is loaded.)
_terminate() {
  if _job_stopped "$1"; then
    kill -CONT "$1" 2>/dev/null || true
  fi
  kill -TERM "$1" 2>/dev/null || true
}

# _reap I — collects entry I's exit status into REAP_RC (127: reaped by the test itself, or not
# our child).
_reap() {
  REAP_RC=0
  wait "${P_PID[$1]}" 2>/dev/null || REAP_RC=$?
}

# _verdict I HOW — checks entry I (ended; REAP_RC holds its status) and its logs; prints one
# problem per line. HOW: term (we sent SIGTERM), self (ended on its own), killed (kill9).
_verdict() {
  local i=$1 how=$2 name=${P_NAME[$1]} kind=${P_KIND[$1]} pid=${P_PID[$1]} rc=$REAP_RC
  if [ "$how" != killed ] && [ "$rc" -ne 127 ]; then
    case "$kind:$how:$rc" in
      member:*:0 | mount:*:0 | daemon:*:* | client:*:0 | client:term:143) ;;
      # (a helper may be stopped with SIGTERM by the test itself, and bash may report that
      # status again after the test waited for it)
      helper:*:0 | helper:*:143 | infra:*:0 | infra:*:143) ;;
      # (a PID a test added to PIDS and saw end: its exit status was the test's to check, and
      # bash may report it again; only a death by a signal other than SIGTERM counts here)
      compat:*:? | compat:*:?? | compat:*:1[01]? | compat:*:12[0-7] | compat:*:143) ;;
      *:*:137) echo "$kind $name (pid $pid) was killed by SIGKILL that the test did not send with kill9" ;;
      *:self:*) echo "$kind $name (pid $pid) ended on its own with status $rc" ;;
      *) echo "$kind $name (pid $pid) exited with status $rc after SIGTERM" ;;
    esac
  fi
  # shellcheck disable=SC2086
  case $kind in
    helper) REPORT_RE="$REPORT_RE|$HELPER_RE" scan_reports ${P_LOGS[$i]} "$T/san/report.$pid" ;;
    *) scan_reports ${P_LOGS[$i]} "$T/san/report.$pid" ;;
  esac
}

# stop_proc NAME [SECONDS] — SIGTERM (after SIGCONT, when it is stopped), waits (default 30 s,
# SHOAL_STOP_TIMEOUT),
# checks its exit status and its logs; fails the test on any problem.
stop_proc() {
  local i
  i=$(_entry "$1")
  [ "${P_STATE[$i]}" = run ] || fail "stop_proc $1: already stopped"
  _stop_entries "${2:-$STOP_SECS}" "$i"
  [ ! -s "$T/stop.problems" ] || fail "$(cat "$T/stop.problems")"
}

# _stop_entries SECONDS I... — stops entries together; problems into $T/stop.problems.
_stop_entries() {
  local secs=$1 i how
  shift
  : >"$T/stop.problems"
  for i in "$@"; do
    alive "${P_PID[$i]}" && _terminate "${P_PID[$i]}"
  done
  for i in "$@"; do
    how=term
    if ! _wait_end "${P_PID[$i]}" "$secs" "${P_KIND[$i]} ${P_NAME[$i]}"; then
      echo "${P_KIND[$i]} ${P_NAME[$i]} (pid ${P_PID[$i]}) did not end within $secs s of SIGTERM" \
        "(its stacks are above)" >>"$T/stop.problems"
      dump_stacks "${P_PID[$i]}" "${P_NAME[$i]}: still running $secs s after SIGTERM"
      kill -9 "${P_PID[$i]}" 2>/dev/null || true
      how=killed
    fi
    _reap "$i"
    P_STATE[$i]=done
    _verdict "$i" "$how" >>"$T/stop.problems"
  done
}

# kill9 NAME — a deliberate kill -9 (the harness expects status 137 for it).
kill9() {
  local i
  i=$(_entry "$1")
  kill -9 "${P_PID[$i]}" 2>/dev/null || true
  _wait_gone "${P_PID[$i]}" 10 || fail "$1 survived kill -9"
  _reap "$i"
  P_STATE[$i]=done
  local p
  p=$(_verdict "$i" killed)
  [ -z "$p" ] || fail "$p"
}

# wait_proc NAME [SECONDS] — waits (default 60 s) for NAME to end on its own; sets EXIT_RC and
# checks its logs for reports (the status is the caller's to judge).
wait_proc() {
  local i
  i=$(_entry "$1")
  if ! _wait_end "${P_PID[$i]}" "${2:-60}" "$1"; then
    dump_stacks "${P_PID[$i]}" "$1: still running after ${2:-60} s"
    fail "$1 did not end within ${2:-60} s (its stacks are above)"
  fi
  _reap "$i"
  EXIT_RC=$REAP_RC
  P_STATE[$i]=done
  local p
  p=$(REAP_RC=127 _verdict "$i" self)
  [ -z "$p" ] || fail "$p"
}

# proc_running NAME — NAME's newest process is running.
proc_running() {
  local i
  i=$(_entry "$1")
  alive "${P_PID[$i]}"
}

cleanup() {
  local rc=$? i p stage problems=""
  trap - EXIT
  set +e
  # Compatibility: PIDs added to PIDS by hand are stopped like helpers, or by what they are.
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] || continue
    [ -n "$(_entry_of_pid "$p")" ] && continue # registered (or reaped by wait_exit)
    local kind=helper
    alive "$p" || kind=compat
    local exe
    exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
    if [ -n "$exe" ] && [ "$exe" = "$(readlink -f "$SHOAL" 2>/dev/null || true)" ]; then
      case " $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) " in
        *" serve "*) kind=member ;;
        *" mount "*) kind=mount ;;
        *) kind=client ;;
      esac
    fi
    track "pid$p" "$p" "$kind"
  done
  # Stop in order: clients and helpers, then mounts, members, and the servers under them.
  for stage in "client helper compat" "mount daemon" "member" "infra"; do
    local ids=()
    for ((i = 0; i < ${#P_PID[@]}; i++)); do
      [ "${P_STATE[$i]}" = run ] || continue
      case " $stage " in *" ${P_KIND[$i]} "*) ;; *) continue ;; esac
      if alive "${P_PID[$i]}"; then
        ids+=("$i")
      else
        _reap "$i"
        P_STATE[$i]=done
        problems+=$(_verdict "$i" self)$'\n'
      fi
    done
    if [ ${#ids[@]} -gt 0 ]; then
      _stop_entries "$STOP_SECS" "${ids[@]}"
      problems+=$(cat "$T/stop.problems")$'\n'
    fi
    if [ "$stage" = "mount daemon" ]; then
      # (/proc/mounts, not mountpoint(1): a FUSE mount whose server died cannot be stat'ed)
      for p in "${MOUNTS[@]:-}"; do
        [ -n "$p" ] && grep -q " $p " /proc/mounts && umount -l "$p" 2>/dev/null || true
      done
    fi
  done
  # Every sanitizer report, whichever process wrote it (foreground commands included).
  local f
  for f in "$T"/san/*; do
    [ -e "$f" ] || continue
    case $problems in *"--- $f:"*) continue ;; esac
    problems+=$(scan_reports "$f")$'\n'
  done
  if [ -n "${problems//[$'\n ']/}" ]; then
    echo "FAIL: the harness found problems in the processes this test started:" >&2
    echo "$problems" | sed '/^$/d' >&2
    rc=1
  fi
  for ((i = ${#AT_EXIT[@]} - 1; i >= 0; i--)); do eval "${AT_EXIT[$i]}" || true; done
  if [ -s "$T/.failures" ] && [ "$rc" -eq 0 ]; then
    echo "FAIL: a subshell or background job failed: $(head -n 3 "$T/.failures")" >&2
    rc=1
  fi
  [ "$rc" -eq 0 ] || _show_logs
  if [ -n "${SHOAL_KEEP_TMP:-}" ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
  exit $rc
}

# _show_logs — on a failure, the end of every log the test's processes wrote, before $T goes: a
# failure on a busy CI machine must be diagnosable from its output alone.
_show_logs() {
  local f
  for f in "$T"/*.log; do
    [ -s "$f" ] || continue
    echo "--- last lines of $(basename "$f"):" >&2
    tail -n "${SHOAL_LOG_TAIL:-25}" "$f" | cut -c1-300 >&2
  done
}
trap cleanup EXIT

# make_object PATH BYTES — random content.
make_object() {
  mkdir -p "$(dirname "$1")"
  head -c "$2" /dev/urandom >"$1"
}

# make_objects DIR — one "SIZE PATH" line on stdin per object (PATH relative to DIR, spaces
# allowed): random content, all made by one process (make_object costs two processes an object,
# which a loaded machine turns into minutes for a few hundred objects).
make_objects() {
  python3 -c '
import os, sys
root = os.fsencode(sys.argv[1])
for line in sys.stdin.buffer:
    size, _, path = line.rstrip(b"\n").partition(b" ")
    p = os.path.join(root, path)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(os.urandom(int(size)))
' "$1" || fail "make_objects $1 failed"
}

# expect_exit CODE CMD... — runs CMD, checks its exit code, keeps stderr in $T/last.err.
expect_exit() {
  local want=$1
  shift
  set +e
  "$@" >"$T/last.out" 2>"$T/last.err"
  local got=$?
  set -e
  [ "$got" -eq "$want" ] || fail "expected exit $want, got $got: $* ($(head -c 300 "$T/last.err"))"
}

# summary_field NAME FILE... — the sum of NAME over every `shoal cat --summary` line in FILEs.
# A file without a summary line, or a summary line without NAME, fails the test: a renamed
# field must not read as 0.
summary_field() {
  local name=$1 f
  shift
  for f in "$@"; do
    local lines with
    lines=$(grep -c '^shoal cat: [0-9]* bytes;' "$f" 2>/dev/null || true)
    with=$(grep '^shoal cat: [0-9]* bytes;' "$f" 2>/dev/null | grep -c -E "(^|[;,] )$name [0-9]+" || true)
    [ "${lines:-0}" -gt 0 ] || fail "summary_field: no summary line in $f"
    [ "$with" -eq "$lines" ] || fail "summary_field: '$name' missing from a summary line in $f"
  done
  grep -h '^shoal cat: [0-9]* bytes;' "$@" | grep -o -E "(^|[;,] )$name [0-9]+" |
    awk '{s += $NF} END {print s + 0}'
}

# summary_lines FILE — number of summary lines (one per `shoal cat --summary`).
summary_lines() {
  grep -c '^shoal cat: [0-9]* bytes;' "$1" || true
}

# wait_for CMD... — polls CMD for up to 20 s.
wait_for() {
  wait_until 20 "$@"
}

# wait_until SECONDS CMD... — polls CMD every 50 ms for up to SECONDS.
wait_until() {
  local i secs=$1
  shift
  for ((i = 0; i < secs * 20; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.05
  done
  return 1
}

# wait_log FILE REGEX [SECONDS] [COUNT] — waits (default 20 s) until FILE has COUNT (default 1)
# lines matching REGEX (grep -E); fails the test otherwise.
wait_log() {
  local f=$1 re=$2 secs=${3:-20} want=${4:-1}
  _log_has() { [ "$(grep -c -E "$2" "$1" 2>/dev/null || true)" -ge "$3" ]; }
  wait_until "$secs" _log_has "$f" "$re" "$want" ||
    fail "no '$re' in $f within $secs s (want $want, have $(grep -c -E "$re" "$f" 2>/dev/null || true))"
}

# free_port — a TCP port that was free a moment ago.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_listen PORT [SECONDS] — waits (default 30 s) until something listens on 127.0.0.1:PORT
# (a helper we started: a proxy a test must not reach before it is up), without connecting to it;
# fails the test otherwise.
wait_listen() {
  local port=$1 secs=${2:-30}
  _listening() { ss -Hltn "sport = :$1" | grep -q .; }
  wait_until "$secs" _listening "$port" || fail "nothing listens on 127.0.0.1:$port within $secs s"
}

# start_member NAME STORAGE FLAGS... — a `shoal serve` in the background, its log in $T/NAME.log,
# its stderr in $T/NAME.err; PID in PID_NAME. SIGTERM must end it with 0.
start_member() {
  local name=$1 storage=$2
  shift 2
  "$SHOAL" serve "$storage" --cache-dir "$T/$name.cache" --log-file "$T/$name.log" \
    --log-level debug "$@" 2>>"$T/$name.err" &
  track "$name" $! member "$T/$name.log" "$T/$name.err"
}

# starts NAME — how many processes named NAME were started (a restarted member appends to the
# same log, so its newest lines are the ones to wait for).
starts() {
  local i n=0
  for ((i = 0; i < ${#P_NAME[@]}; i++)); do [ "${P_NAME[$i]}" = "$1" ] && n=$((n + 1)); done
  echo "$n"
}

# member_port NAME [pool|iorpc] — the port NAME's newest process listens on, from its "ready" log
# line (waits).
member_port() {
  local re="tcp pool 127.0.0.1:[0-9]+"
  [ "${2:-pool}" = iorpc ] && re="iorpc 127.0.0.1:[0-9]+"
  wait_log "$T/$1.log" "serve: member .* ready: .*$re" 20 "$(starts "$1")"
  grep "serve: member .* ready: " "$T/$1.log" | grep -o -E "$re" | tail -n 1 | cut -d: -f2
}

# group_alive META GROUP — number of live members.
group_alive() {
  "$SHOAL" group --meta "$1" --cache-group "$2" 2>/dev/null | tail -n 1 | awk '{print $3}'
}

# wait_members META GROUP N — waits until N members are alive.
wait_members() {
  local i
  for i in $(seq 1 100); do
    [ "$(group_alive "$1" "$2")" = "$3" ] && return 0
    sleep 0.2
  done
  "$SHOAL" group --meta "$1" --cache-group "$2" >&2 || true
  fail "group $2 did not reach $3 live members"
}

# wait_member_alive META GROUP ID — waits until the member ID itself is listed alive (another
# member's record, or a stale one of a process just killed, must not do).
wait_member_alive() {
  _member_alive() { "$SHOAL" group --meta "$1" --cache-group "$2" 2>/dev/null | awk -v id="$3" '$1 == id && $8 == "yes" {f = 1} END {exit !f}'; }
  wait_until 20 _member_alive "$@" || {
    "$SHOAL" group --meta "$1" --cache-group "$2" >&2 || true
    fail "member $3 is not alive in group $2"
  }
}

# start_redis — a redis-server on a free loopback port; sets REDIS_URL.
start_redis() {
  command -v redis-server >/dev/null || skip "no redis-server"
  local port
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --dir "$T" >"$T/redis.log" 2>&1 &
  track redis $! infra "$T/redis.log"
  REDIS_URL="redis://127.0.0.1:$port/0"
  wait_for redis-cli -p "$port" ping || fail "redis did not start"
}

# start_etcd [NAME] — (first call) picks EP (127.0.0.1:PORT) and sets ETCDCTL and META; then an
# etcd (Debian's etcd-server) listening there and nowhere else, its data in $T (kept across
# restarts: call it again after stopping NAME), tracked as NAME (etcd); waits until it answers.
start_etcd() {
  command -v etcd >/dev/null || skip "no etcd (Debian's etcd-server)"
  command -v etcdctl >/dev/null || skip "no etcdctl (Debian's etcd-client)"
  if [ -z "${EP:-}" ]; then
    EP=127.0.0.1:$(free_port)
    ETCD_PEER_PORT=$(free_port)
    ETCDCTL=(etcdctl --endpoints "$EP" --dial-timeout 2s --command-timeout 5s)
    META="etcd://$EP"
  fi
  etcd --name t --data-dir "$T/etcd.data" --listen-client-urls "http://$EP" \
    --advertise-client-urls "http://$EP" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "t=http://127.0.0.1:$ETCD_PEER_PORT" --log-outputs stderr >>"$T/etcd.log" 2>&1 &
  track "${1:-etcd}" $! infra "$T/etcd.log"
  wait_for "${ETCDCTL[@]}" endpoint health || fail "etcd did not start"
}

# metrics_addr NAME — the HOST:PORT of NAME's metrics endpoint, from the line it logs at start
# ("prometheus metrics listening on IP:PORT" in $T/NAME.log); waits up to 20 s.
metrics_addr() {
  local i line
  for i in $(seq 1 200); do
    line=$(grep -o 'prometheus metrics listening on [^ ]*' "$T/$1.log" 2>/dev/null | tail -n 1)
    if [ -n "$line" ]; then
      echo "${line##* }"
      return 0
    fi
    sleep 0.1
  done
  fail "$1 logged no metrics address"
}

# scrape ADDR PATH OUT — GET http://ADDR/PATH into OUT; fails the test on any error.
scrape() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "GET http://$1$2 failed"
import sys, urllib.request
with urllib.request.urlopen("http://%s%s" % (sys.argv[1], sys.argv[2]), timeout=10) as r:
    if r.status != 200:
        sys.exit(1)
    open(sys.argv[3], "wb").write(r.read())
PY
}

# metric ADDR NAME — one sample (the first series) of NAME from ADDR's /metrics; fails the test
# when NAME is missing.
metric() {
  local out="$T/metric.$BASHPID" v
  scrape "$1" /metrics "$out"
  v=$(awk -v n="$2" '$1 == n || index($1, n "{") == 1 {print $NF; exit}' "$out")
  rm -f "$out"
  [ -n "$v" ] || fail "metric $2 missing at $1"
  echo "${v%.0}"
}

# fuse_isolate — (root) makes $T a shared mount of its own, once, so that the FUSE mounts made
# under it propagate their unmount into copies of them: a mount namespace made while one of
# them is mounted (`ip netns exec` in another test, a service started meanwhile) holds a copy
# that keeps the FUSE connection, and with it the mount's process, alive after the test
# unmounts it; a copy made as a slave (as `ip netns exec` makes them) now leaves with the
# original. (A host whose / is shared, as systemd makes it, behaves so anyway; a container whose
# mounts are private does not.) Undone at the end, before $T is removed.
FUSE_ISOLATED=
fuse_isolate() {
  [ -z "$FUSE_ISOLATED" ] && [ "$(id -u)" -eq 0 ] || return 0
  FUSE_ISOLATED=1
  mount --bind "$T" "$T" || fail "cannot bind-mount $T onto itself"
  AT_EXIT+=("umount -l '$T'")
  mount --make-shared "$T" || fail "cannot make $T a shared mount"
}

# need_fuse — skips the test (77) unless it runs as root with /dev/fuse and fusermount3.
need_fuse() {
  [ "$(id -u)" -eq 0 ] || skip "FUSE tests need root"
  [ -c /dev/fuse ] || skip "no /dev/fuse"
  command -v fusermount3 >/dev/null || skip "no fusermount3"
  fuse_isolate
}

# start_mount NAME STORAGE MOUNTPOINT FLAGS... — a `shoal mount` in the background (PID in
# PID_NAME, log in $T/NAME.log, stderr in $T/NAME.err, the mount in MOUNTS); waits up to 20 s.
start_mount() {
  local name=$1 storage=$2 mp=$3
  shift 3
  fuse_isolate
  mkdir -p "$mp"
  "$SHOAL" mount "$storage" "$mp" --cache-dir "$T/$name.cache" --log-file "$T/$name.log" \
    --log-level debug "$@" 2>>"$T/$name.err" &
  track "$name" $! mount "$T/$name.log" "$T/$name.err"
  MOUNTS+=("$mp")
  wait_for mountpoint -q "$mp" || fail "mount $name did not come up: $(tail -n 3 "$T/$name.log")"
}

# stats_field MOUNTPOINT NAME — the value of NAME in MOUNTPOINT/.stats; fails when it is missing.
stats_field() {
  local v
  v=$(awk -v n="$2" '$1 == n { print $2 }' "$1/.stats")
  [ -n "$v" ] || fail "$1/.stats has no $2"
  echo "$v"
}

# start_s3rver BUCKET — a real S3 server (s3rver, from npm into $SRC/.deps) on a free loopback
# port, storing under $T/s3rver.data, with BUCKET created. Sets S3_PORT and S3_ENDPOINT and
# exports the AWS_* variables it accepts.
start_s3rver() {
  local js=$SRC/.deps/node_modules/s3rver/bin/s3rver.js
  command -v node >/dev/null || skip "no node (scripts/setup.sh installs it)"
  if [ ! -f "$js" ]; then
    command -v npm >/dev/null || skip "no npm (scripts/setup.sh installs it)"
    npm install --prefix "$SRC/.deps" --no-audit --no-fund s3rver@3.7.1 >"$T/npm.log" 2>&1 ||
      fail "npm install s3rver: $(tail -n 3 "$T/npm.log")"
  fi
  S3_PORT=$(free_port)
  mkdir -p "$T/s3rver.data"
  # s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
  node --openssl-legacy-provider "$js" -d "$T/s3rver.data" -a 127.0.0.1 -p "$S3_PORT" \
    --configure-bucket "$1" --silent >"$T/s3rver.log" 2>&1 &
  track s3rver $! infra "$T/s3rver.log"
  S3_ENDPOINT=http://127.0.0.1:$S3_PORT
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
  wait_for curl -sf "$S3_ENDPOINT/$1?list-type=2&max-keys=1" ||
    fail "s3rver did not start: $(tail -n 5 "$T/s3rver.log")"
}

# s3_put_dir ENDPOINT BUCKET DIR — uploads every file under DIR, keyed by its relative path.
s3_put_dir() {
  python3 "$SRC/tests/integration/s3fault.py" put --endpoint "$1" --bucket "$2" --dir "$3" \
    --key "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" >/dev/null
}

# start_s3fault UPSTREAM_PORT — tests/integration/s3fault.py in front of an S3 server: checks
# every SigV4 signature and injects the fault named in $S3F_MODE (see s3_mode). Sets
# S3F_ENDPOINT and S3F_LOG (one line per request).
start_s3fault() {
  S3F_LOG=$T/s3fault.log
  S3F_MODE=$T/s3fault.mode
  echo pass >"$S3F_MODE"
  : >"$S3F_LOG"
  rm -f "$T/s3fault.port"
  python3 "$SRC/tests/integration/s3fault.py" proxy --port-file "$T/s3fault.port" \
    --upstream "$1" --log "$S3F_LOG" --mode-file "$S3F_MODE" \
    --secret "$AWS_SECRET_ACCESS_KEY" 2>"$T/s3fault.err" &
  track s3fault $! infra
  wait_for test -s "$T/s3fault.port" || fail "s3fault did not start: $(cat "$T/s3fault.err")"
  S3F_ENDPOINT=http://127.0.0.1:$(cat "$T/s3fault.port")
}

# s3_mode MODE — switches the fault front (pass, 503pct:N, 503all, short, shortonce, shortcl,
# shortclonce, 403, hang) and starts a new request log.
s3_mode() {
  echo "$1" >"$S3F_MODE"
  : >"$S3F_LOG"
}

# s3_path BUCKET KEY — the request path of KEY as the fault front logs it.
s3_path() {
  python3 -c 'import sys, urllib.parse as u; print("/" + sys.argv[1] + "/" + u.quote(sys.argv[2], safe="/~"))' "$1" "$2"
}

# s3_count METHOD PATH — requests for PATH the fault front has seen since the last s3_mode.
s3_count() {
  awk -v m="$1" -v p="$2" '$1 == m && $2 == p' "$S3F_LOG" | wc -l
}

# wait_exit PID [SECONDS] — waits (default 20 s) for a child of this shell to end; sets EXIT_RC.
# A registered process is checked like wait_proc (logs scanned; the status is the caller's).
wait_exit() {
  local i
  i=$(_entry_of_pid "$1")
  if [ -n "$i" ]; then
    wait_proc "${P_NAME[$i]}" "${2:-20}"
    return 0
  fi
  if ! _wait_end "$1" "${2:-20}"; then
    dump_stacks "$1" "still running after ${2:-20} s"
    fail "process $1 did not end within ${2:-20} s (its stacks are above)"
  fi
  EXIT_RC=0
  wait "$1" || EXIT_RC=$?
  # Reaped here, its status now the caller's: the end of the test only scans for reports.
  track "pid$1" "$1" compat
  P_STATE[${#P_STATE[@]} - 1]=done
}

# stop_mount NAME MOUNTPOINT — `shoal umount`, then the mount process must end with 0 and
# without reports (leaks included) in its logs.
stop_mount() {
  local pid
  pid=$(eval "echo \$PID_$1")
  if ! "$SHOAL" umount "$2"; then
    dump_stacks "$pid" "mount $1 after shoal umount failed"
    fail "shoal umount $2 failed"
  fi
  wait_exit "$pid"
  [ "$EXIT_RC" -eq 0 ] || fail "mount $1 exited with $EXIT_RC: $(tail -n 5 "$T/$1.err")"
}

# ---- the battery's helpers ----------------------------------------------------------------------

READERS=${SHOAL_READERS:-$(dirname "$SHOAL")/shoal_readers}
EIOFS=${SHOAL_EIOFS:-$(dirname "$SHOAL")/shoal_eiofs}

# readers LABEL STORAGE ARGS... — tests/tools/readers.c in the foreground (output in
# $T/LABEL.out, stderr in $T/LABEL.err); any application-visible error or wrong byte fails.
readers() {
  local label=$1
  shift
  [ -x "$READERS" ] || fail "no shoal_readers at $READERS (build the shoal_readers target)"
  "$READERS" "$@" >"$T/$label.out" 2>"$T/$label.err" ||
    fail "readers $label failed: $(tail -n 5 "$T/$label.err"; grep '^result' "$T/$label.out")"
}

# result_field LABEL NAME — NAME from the result line of readers LABEL; fails when missing.
result_field() {
  local v
  v=$(grep '^result ' "$T/$1.out" 2>/dev/null | tail -n 1 | tr ' ' '\n' | awk -F= -v n="$2" '$1 == n {print $2}')
  [ -n "$v" ] || fail "no $2 in the result of readers $1: $(tail -n 2 "$T/$1.out" 2>/dev/null)"
  echo "$v"
}

# member_id NAME — the member id of NAME's newest process, from its "ready" log line (waits).
member_id() {
  wait_log "$T/$1.log" "member [0-9a-f]+ of group .* ready" 20 "$(starts "$1")"
  grep -o -E "member [0-9a-f]+ of group .* ready" "$T/$1.log" | tail -n 1 | awk '{print $2}'
}

# log_mark NAME — the number of lines in NAME's log now (for store_gets_since).
log_mark() {
  wc -l <"$T/$1.log"
}

# store_gets_since NAME MARK — "KEY OFFSET" of every store read NAME logged after line MARK.
store_gets_since() {
  { tail -n +"$(($2 + 1))" "$T/$1.log" | grep -o -E 'store: get [^ ]+ \[[0-9]+' || true; } |
    sed -E 's/^store: get ([^ ]+) \[([0-9]+)$/\1 \2/'
}
