#!/usr/bin/env bash
# SIGHUP reopens the log file of a mount and of a member (logrotate): after `mv log log.1;
# kill -HUP`, the mount stays mounted and readable, the member stays in its group, and each
# writes a new log under the old name. deploy/logrotate/shoal, with its paths pointed here and
# its postrotate signalling these processes, rotates both logs the same way.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v logrotate >/dev/null || skip "no logrotate (scripts/setup.sh installs it)"

STORE=$T/store
make_object "$STORE/a.bin" 300000
S="file://$STORE"
META="sqlite3://$T/meta.db"
MNT=$T/mnt
start_member m "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1
start_mount f "$S" "$MNT"
wait_members "$META" g 1

# rotated NAME LOG.1 — NAME's log went to LOG.1, and NAME now writes a new $T/NAME.log.
rotated() {
  wait_log "$T/$1.log" "SIGHUP: log file reopened"
  grep -q "SIGHUP: log file reopened" "$2" && fail "$1 wrote the reopen line into the old log"
  grep -q "<INFO>" "$2" || fail "$2 lost $1's earlier lines"
  alive "$(eval "echo \$PID_$1")" || fail "$1 ended on SIGHUP"
}

echo "== mv log log.1; kill -HUP: the mount stays readable, a new log"
mv "$T/f.log" "$T/f.log.1"
kill -HUP "$PID_f"
rotated f "$T/f.log.1"
mountpoint -q "$MNT" || fail "SIGHUP unmounted the mount"
cmp "$STORE/a.bin" "$MNT/a.bin" || fail "the mount does not read right after SIGHUP"

echo "== the same for a member: it stays in its group"
mv "$T/m.log" "$T/m.log.1"
kill -HUP "$PID_m"
rotated m "$T/m.log.1"
[ "$(group_alive "$META" g)" = 1 ] || fail "the member left its group on SIGHUP"

echo "== deploy/logrotate/shoal rotates both (paths and postrotate pointed here)"
sed -e "s|^/var/log/shoal.log /var/log/shoal-\*.log {|$T/f.log $T/m.log {|" \
  -e "s|^\( *\)systemctl kill .*|\1kill -HUP $PID_f $PID_m|" \
  "$SRC/deploy/logrotate/shoal" >"$T/logrotate.conf"
grep -q "kill -HUP $PID_f $PID_m" "$T/logrotate.conf" || fail "could not point the config here"
logrotate -f -s "$T/logrotate.state" "$T/logrotate.conf" >"$T/lr.out" 2>&1 ||
  fail "logrotate failed: $(cat "$T/lr.out")"
[ -s "$T/f.log.1" ] && [ -s "$T/m.log.1" ] || fail "logrotate did not rotate: $(ls "$T")"
wait_log "$T/f.log" "SIGHUP: log file reopened"
wait_log "$T/m.log" "SIGHUP: log file reopened"
cmp "$STORE/a.bin" "$MNT/a.bin" || fail "the mount does not read right after logrotate"
stop_mount f "$MNT"
echo "PASS test_sighup"
