#!/usr/bin/env bash
# The command line as a new user meets it [issue 18, C5, C6, C7, M3]: `-d` detaches completely
# (a pipe on its output ends, the log is where the docs say, a failed start says why); `shoal
# umount` returns only once the mount process has exited; a successful `shoal cat` is silent on
# stderr; `shoal group` says when the registry or the group does not exist; bench and warmup
# without a live member stop at once with one line (and bench when the last member leaves);
# bench names the transport that carried the reads and reports server CPU, and compares
# transports in one run; ping finds a member's port in the group; a bad environment variable is
# exit 2 naming it; --rdma-network is checked without --cache-group too.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=2s SHOAL_GROUP_HEARTBEAT=200ms

STORE=$T/store
for i in 0 1 2 3; do make_object "$STORE/d/o$i" $((3 * 1024 * 1024 + i * 4099)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"

ms() { date +%s%3N; }
# gone PID — the process has ended (and is not a zombie of ours either).
gone() { ! kill -0 "$1" 2>/dev/null || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }
one_line() { # one_line FILE — FILE holds exactly one line
  [ "$(wc -l <"$1")" -eq 1 ] || fail "expected one line in $1, got: $(head -c 600 "$1")"
}

echo "== a bad environment variable: exit 2 and one line naming it, for every command"
for v in "IORPC_RDMA_RETRY_DURATION=5 minutes" "SHOAL_REMOTE_TIMEOUT=0" "SHOAL_AVOID_DURATION=-1s" \
  "SHOAL_IORPC_SCALE_PERIOD=fast" "SHOAL_STORE_DEADLINE=10x" "SHOAL_GROUP_TIMEOUT=soon" \
  "SHOAL_STORE_ATTEMPTS=0" "SHOAL_GROUP_SECRET=short" "SHOAL_S3_CA_FILE=$T/none.pem"; do
  name=${v%%=*}
  for cmd in "cat $S d/o0 --cache-dir $T/c0" "group --meta $META --cache-group g0" \
    "stats 127.0.0.1:1 -c 1" "ping 127.0.0.1:1"; do
    # shellcheck disable=SC2086
    expect_exit 2 env "$v" "$SHOAL" $cmd
    one_line "$T/last.err"
    grep -q "invalid $name" "$T/last.err" || fail "$v, $cmd: $(cat "$T/last.err")"
  done
done
grep -q short "$T/last.err" && fail "the secret was echoed: $(cat "$T/last.err")"
# empty means unset, and good values pass
SHOAL_REMOTE_TIMEOUT= IORPC_RDMA_RETRY_DURATION=200ms "$SHOAL" cat "$S" d/o0 --cache-dir "$T/c0" \
  >"$T/out" || fail "good environment refused"

echo "== a successful shoal cat writes nothing to stderr; --log-level info still logs"
"$SHOAL" cat "$S" d/o1 --cache-dir "$T/c1" >"$T/out" 2>"$T/cat.err" || fail "cat failed"
cmp -s "$T/out" "$STORE/d/o1" || fail "cat differs"
[ ! -s "$T/cat.err" ] || fail "cat wrote to stderr: $(head -n 3 "$T/cat.err")"
"$SHOAL" cat "$S" d/o1 --cache-dir "$T/c1" --log-level info >/dev/null 2>"$T/cat.err"
grep -q "<INFO>" "$T/cat.err" || fail "--log-level info logged nothing"

echo "== shoal group: a registry or a group that does not exist says so (exit 1)"
expect_exit 1 "$SHOAL" group --meta "sqlite3://$T/nodir/meta.db" --cache-group g1
one_line "$T/last.err"
grep -q "no registry sqlite3://$T/nodir/meta.db" "$T/last.err" || fail "$(cat "$T/last.err")"
[ ! -e "$T/nodir" ] || fail "shoal group created the registry it was asked to read"

echo "== bench and warmup without a live member: exit 1 within seconds, one line"
start_member a "$S" --meta "$META" --cache-group other --group-ip 127.0.0.1
wait_members "$META" other 1
expect_exit 1 "$SHOAL" group --meta "$META" --cache-group g1
grep -q "no group g1 in $META" "$T/last.err" || fail "$(cat "$T/last.err")"

echo "== a group that cannot share: a warning, or exit 1 and one line with --strict-group"
"$SHOAL" cat "$S" d/o0 --meta "$META" --cache-group typo --cache-dir "$T/c0" >"$T/out" 2>"$T/w.err" ||
  fail "cat of a group with no member failed: $(cat "$T/w.err")"
cmp -s "$T/out" "$STORE/d/o0" || fail "cat of a group with no member differs"
grep -q "<WARNING>: group: cache group typo: no live member that shares its cache in registry $META" \
  "$T/w.err" || fail "no warning for a group with no member: $(cat "$T/w.err")"
"$SHOAL" cat "$S" d/o0 --meta "sqlite3://$T/typo.db" --cache-group other --cache-dir "$T/c0" \
  >/dev/null 2>"$T/w.err" || fail "cat of a new registry failed"
grep -q "<WARNING>: group: cache group other: the registry sqlite3://$T/typo.db did not exist" \
  "$T/w.err" || fail "no warning for a registry that did not exist: $(cat "$T/w.err")"
expect_exit 1 "$SHOAL" cat "$S" d/o0 --meta "$META" --cache-group typo --cache-dir "$T/c0" --strict-group
grep -q "^shoal cat: cache group typo: no live member that shares its cache" "$T/last.err" ||
  fail "--strict-group: $(cat "$T/last.err")"
"$SHOAL" cat "$S" d/o0 --meta "$META" --cache-group other --cache-dir "$T/c0" --strict-group \
  >/dev/null 2>"$T/w.err" || fail "--strict-group with a live member failed: $(cat "$T/w.err")"
[ ! -s "$T/w.err" ] || fail "a group with a live member warned: $(cat "$T/w.err")"
expect_exit 1 "$SHOAL" serve "$S" --meta "$META" --cache-group lonely --cache-dir "$T/c5" \
  --strict-group --log-level error
grep -q "^shoal serve: cache group lonely: no other live member" "$T/last.err" ||
  fail "serve --strict-group alone: $(cat "$T/last.err")"
t0=$(ms)
expect_exit 1 timeout 20 "$SHOAL" bench "$S" --meta "$META" --cache-group g1 --duration 30s
one_line "$T/last.err"
grep -q "group g1 has no live member" "$T/last.err" || fail "$(cat "$T/last.err")"
[ ! -s "$T/last.out" ] || fail "bench printed results: $(cat "$T/last.out")"
expect_exit 1 timeout 20 "$SHOAL" warmup --storage "$S" --meta "$META" --cache-group g1
one_line "$T/last.err"
grep -q "group g1 has no live member" "$T/last.err" || fail "$(cat "$T/last.err")"
[ $(($(ms) - t0)) -lt 10000 ] || fail "bench and warmup took $(($(ms) - t0)) ms to give up"
# a path outside any mount warms nothing: a usage error, not "0/0 files" and success
expect_exit 2 "$SHOAL" warmup "$STORE/d"
grep -q "is not inside a shoal mount" "$T/last.err" || fail "$(cat "$T/last.err")"

echo "== bench: the transport that carried the reads, server CPU, two transports in one run"
start_member b "$S" --meta "$META" --cache-group g1 --group-ip 127.0.0.1
start_member c "$S" --meta "$META" --cache-group g1 --group-ip 127.0.0.1
wait_members "$META" g1 2
"$SHOAL" bench "$S" --meta "$META" --cache-group g1 --threads 4 --duration 2s --warm \
  --transports tcp,iorpc >"$T/bench.out" 2>"$T/bench.err" || fail "bench: $(tail -n 3 "$T/bench.err")"
[ ! -s "$T/bench.err" ] || fail "bench wrote to stderr: $(head -n 3 "$T/bench.err")"
grep -q "^bench: .* transport: tcp pool$" "$T/bench.out" || fail "$(cat "$T/bench.out")"
grep -q "^bench: .* transport: iorpc over tcp$" "$T/bench.out" || fail "$(cat "$T/bench.out")"
[ "$(grep -c "server cpu [0-9.]* s/GiB" "$T/bench.out")" -eq 2 ] || fail "no server cpu: $(cat "$T/bench.out")"
awk '$1 == "tcp" && $2 == "pool" && $3 > 0 && $8 == "tcp" {t=1}
     $1 == "iorpc" && $3 == "tcp" && $4 > 0 && $9 == "iorpc" {i=1} END {exit !(t && i)}' \
  "$T/bench.out" || fail "no comparison table: $(tail -n 4 "$T/bench.out")"
# asking for IORPC from members that have it off: the header tells what really carried them
expect_exit 2 "$SHOAL" bench "$S" --meta "$META" --cache-group g1 --transports rdma
grep -q "needs --rdma-network" "$T/last.err" || fail "$(cat "$T/last.err")"
expect_exit 2 "$SHOAL" bench "$S" --meta "$META" --cache-group g1 --transports tcp,tcp

echo "== a data tool stopped with SIGTERM dies of it, whatever libfabric's libraries install"
# (IPATH_NO_BACKTRACE unset, as for a user: libinfinipath's constructor takes SIGTERM and exits 1,
# leaving a .btr file in the current folder)
mkdir -p "$T/cwd"
(cd "$T/cwd" && exec env -u IPATH_NO_BACKTRACE "$SHOAL" bench "$S" --meta "$META" \
  --cache-group g1 --threads 2 --duration 60s >"$T/bench3.out" 2>"$T/bench3.err") &
track bench3 $! client
wait_for grep -q "^t=1s" "$T/bench3.out" || fail "bench did not start: $(cat "$T/bench3.err")"
grep -q IPATH_NO_BACKTRACE "/proc/$PID_bench3/environ" && fail "IPATH_NO_BACKTRACE is set"
kill -TERM "$PID_bench3"
wait_proc bench3 20
[ "$EXIT_RC" -eq 143 ] || fail "bench stopped with SIGTERM exited $EXIT_RC, not 143: $(cat "$T/bench3.err")"
[ -z "$(ls -A "$T/cwd")" ] || fail "bench left files in its folder: $(ls -A "$T/cwd")"

echo "== bench stops within seconds when the last member leaves"
"$SHOAL" bench "$S" --meta "$META" --cache-group g1 --threads 2 --duration 60s \
  >"$T/bench2.out" 2>"$T/bench2.err" &
bp=$!
PIDS+=($bp)
wait_for grep -q "^t=1s" "$T/bench2.out" || fail "bench did not start: $(cat "$T/bench2.err")"
t0=$(ms)
kill -TERM "$PID_b" "$PID_c"
wait_exit "$bp" 20
[ "$EXIT_RC" -eq 1 ] || fail "bench exited $EXIT_RC"
grep -q "group g1 has no live member left" "$T/bench2.err" || fail "$(cat "$T/bench2.err")"
echo "  bench stopped $(($(ms) - t0)) ms after the members left"
for p in "$PID_b" "$PID_c"; do
  wait_exit "$p"
  [ "$EXIT_RC" -eq 0 ] || fail "member $p exited $EXIT_RC"
done

echo "== ping HOST without a port: the group names it"
start_member d "$S" --meta "$META" --cache-group g2 --group-ip 127.0.0.1
wait_members "$META" g2 1
"$SHOAL" ping 127.0.0.1 --meta "$META" --cache-group g2 >"$T/ping.out" || fail "ping: $(cat "$T/ping.out")"
port=$("$SHOAL" group --meta "$META" --cache-group g2 | awk 'NR == 2 {print $5}')
grep -q "^tcp  *$port  *ok" "$T/ping.out" || fail "ping went elsewhere than $port: $(cat "$T/ping.out")"
grep -q "^iorpc .* ok" "$T/ping.out" || fail "$(cat "$T/ping.out")"
id=$("$SHOAL" group --meta "$META" --cache-group g2 | awk 'NR == 2 {print $1}')
"$SHOAL" ping "$id" --meta "$META" --cache-group g2 >/dev/null || fail "ping by member id"
expect_exit 1 "$SHOAL" ping 127.0.0.9 --meta "$META" --cache-group g2
grep -q "no live member 127.0.0.9 in group g2" "$T/last.err" || fail "$(cat "$T/last.err")"
expect_exit 2 "$SHOAL" ping 127.0.0.1
grep -q "no :PORT" "$T/last.err" || fail "$(cat "$T/last.err")"

echo "== --rdma-network is checked without --cache-group [M3]"
expect_exit 2 "$SHOAL" cat "$S" d/o0 --cache-dir "$T/c0" --rdma-network nosuch0
one_line "$T/last.err"
grep -q "rdma-network nosuch0: no such interface" "$T/last.err" || fail "$(cat "$T/last.err")"
expect_exit 2 "$SHOAL" cat "$S" d/o0 --cache-dir "$T/c0" --rdma-network lo --rdma-provider nosuch
one_line "$T/last.err"
grep -q "provider nosuch cannot start" "$T/last.err" || fail "$(cat "$T/last.err")"
expect_exit 2 env FI_PROVIDER=nosuch "$SHOAL" warmup --storage "$S" --cache-dir "$T/c0" \
  --rdma-network lo
grep -q "provider nosuch cannot start" "$T/last.err" || fail "FI_PROVIDER: $(cat "$T/last.err")"
# a fresh network namespace: lo is down and has no IPv4 address
expect_exit 2 unshare -n "$SHOAL" cat "$S" d/o0 --cache-dir "$T/c0" --rdma-network lo \
  --rdma-provider tcp
grep -q "rdma-network lo: it has no IPv4 address" "$T/last.err" || fail "$(cat "$T/last.err")"
expect_exit 2 "$SHOAL" ping 127.0.0.1:1 --rdma-network nosuch0
grep -q "no such interface" "$T/last.err" || fail "ping: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" serve "$S" --cache-dir "$T/c0" --meta "$META" --cache-group g9 \
  --rdma-network nosuch0
expect_exit 2 "$SHOAL" bench "$S" --meta "$META" --cache-group g2 --rdma-network nosuch0

echo "== serve -d: returns once the member is in the group, output piped, log where asked"
t0=$(ms)
"$SHOAL" serve "$S" --meta "$META" --cache-group g3 --group-ip 127.0.0.1 --cache-dir "$T/dc" \
  --log-file "$T/daemon.log" -d 2>&1 | cat >"$T/d.out"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "serve -d failed: $(cat "$T/d.out")"
echo "  serve -d returned in $(($(ms) - t0)) ms"
[ "$(group_alive "$META" g3)" = 1 ] || fail "serve -d returned before the member was in the group"
grep -qx "shoal serve: running in the background, logging to $T/daemon.log" "$T/d.out" ||
  fail "serve -d printed: $(cat "$T/d.out")"
dpid=$(grep -o 'shoal\[[0-9]*\] <INFO>: serve: member' "$T/daemon.log" | grep -o '[0-9]*' | head -n 1)
[ -n "$dpid" ] || fail "no ready line in the log: $(tail -n 3 "$T/daemon.log")"
PIDS+=("$dpid")
[ "$(readlink /proc/"$dpid"/fd/0)" = /dev/null ] || fail "stdin kept: $(readlink /proc/"$dpid"/fd/0)"
[ "$(readlink /proc/"$dpid"/fd/1)" = /dev/null ] || fail "stdout kept: $(readlink /proc/"$dpid"/fd/1)"
[ "$(readlink /proc/"$dpid"/fd/2)" = "$T/daemon.log" ] || fail "stderr: $(readlink /proc/"$dpid"/fd/2)"
[ "$(ps -o sid= -p "$dpid" | tr -d ' ')" = "$dpid" ] || fail "not a session leader"
kill -TERM "$dpid"
wait_for gone "$dpid" || fail "serve -d did not stop on SIGTERM"
grep -q "leaving the group" "$T/daemon.log" || fail "no clean stop in the log"

echo "== a background start that fails: non-zero with the child's error line"
t0=$(ms)
set +e
"$SHOAL" serve "file://$T/nonexistent" --meta "$META" --cache-group g3 --cache-dir "$T/dc" \
  --log-file "$T/bad.log" -d 2>&1 | cat >"$T/bad.out"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -ne 0 ] || fail "a failing background start exited 0"
grep -q "^shoal serve: storage file://$T/nonexistent: cannot open" "$T/bad.out" ||
  fail "no error line: $(cat "$T/bad.out")"
grep -q "ERROR.*cannot open" "$T/bad.log" || fail "the log does not say why"
grep -q "running in the background" "$T/bad.out" && fail "a failed start said it runs: $(cat "$T/bad.out")"
[ $(($(ms) - t0)) -lt 10000 ] || fail "the failing start took $(($(ms) - t0)) ms"

if [ "$(id -u)" -eq 0 ] && [ -c /dev/fuse ] && command -v fusermount3 >/dev/null; then
  echo "== mount -d: returns with the mount live, default log /var/log/shoal.log (root)"
  fuse_isolate
  MNT=$T/mnt
  mkdir -p "$MNT"
  MOUNTS+=("$MNT")
  t0=$(ms)
  timeout 30 "$SHOAL" mount "$S" "$MNT" --cache-dir "$T/mc" -d 2>&1 | cat >"$T/m.out"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "mount -d failed: $(cat "$T/m.out")"
  echo "  mount -d returned in $(($(ms) - t0)) ms"
  mountpoint -q "$MNT" || fail "mount -d returned before the mount was live"
  grep -qx "shoal mount: running in the background, logging to /var/log/shoal.log" "$T/m.out" ||
    fail "mount -d printed: $(cat "$T/m.out")"
  cmp -s "$MNT/d/o2" "$STORE/d/o2" || fail "read through the background mount differs"
  mpid=$(grep -a "mounted at $MNT " /var/log/shoal.log | tail -n 1 | grep -o 'shoal\[[0-9]*\]' | grep -o '[0-9]*')
  [ -n "$mpid" ] && kill -0 "$mpid" || fail "no mount line in /var/log/shoal.log"
  PIDS+=("$mpid")
  [ "$(readlink /proc/"$mpid"/fd/2)" = /var/log/shoal.log ] || fail "stderr: $(readlink /proc/"$mpid"/fd/2)"

  echo "== shoal umount returns once the mount process has exited"
  "$SHOAL" umount "$MNT" >"$T/um.out" || fail "umount failed"
  gone "$mpid" || fail "shoal umount returned while process $mpid still runs"
  grep -q "unmounted; its process $mpid has exited" "$T/um.out" || fail "umount said: $(cat "$T/um.out")"
  ! mountpoint -q "$MNT" || fail "still mounted"
  if grep -a "shoal\[$mpid\]" /var/log/shoal.log | grep -q -E "Sanitizer|runtime error"; then
    fail "mount -d: sanitizer report in /var/log/shoal.log"
  fi

  echo "== shoal umount --timeout: a mount process that does not exit is reported (exit 1)"
  start_mount m "$S" "$MNT"
  kill -STOP "$PID_m"
  set +e
  "$SHOAL" umount "$MNT" --timeout 1s >"$T/um.out" 2>"$T/um.err" &
  up=$!
  wait_for grep -q "still running" "$T/um.err"
  wait "$up"
  urc=$?
  set -e
  kill -CONT "$PID_m"
  [ "$urc" -eq 1 ] || fail "umount exited $urc: $(cat "$T/um.err")"
  grep -q "its process $PID_m is still running after 1s" "$T/um.err" || fail "$(cat "$T/um.err")"
  wait_exit "$PID_m"
  [ "$EXIT_RC" -eq 0 ] || fail "the mount exited $EXIT_RC once continued"
  expect_exit 2 "$SHOAL" umount "$MNT" --timeout soon
else
  skip_section "mount -d and umount: not root or no FUSE"
fi
echo "PASS"
