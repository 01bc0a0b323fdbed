#!/usr/bin/env bash
# FUSE mount, the command [C1]: bad flags and unusable mount points are one line and exit 2;
# with --read-only, writes, creates, renames and deletes fail with EROFS and leave a log line
# (writable mounts: test_write_file.sh); -d returns once the
# mount is ready; `shoal umount`, `fusermount3 -u` and SIGTERM each end the mount cleanly.
. "$(dirname "$0")/lib.sh"
need_fuse

STORE=$T/store
make_object "$STORE/dir/file.bin" 100000
echo "hello" >"$STORE/top.txt"
S="file://$STORE"
MNT=$T/mnt
mkdir -p "$MNT"

one_line_exit2() { # one_line_exit2 CMD... — exit 2 and exactly one line on stderr
  expect_exit 2 "$@"
  [ "$(wc -l <"$T/last.err")" -eq 1 ] || fail "expected one line from $*, got: $(cat "$T/last.err")"
}

echo "== bad flags and mount points"
one_line_exit2 "$SHOAL" mount "$S" "$MNT" --bogus
one_line_exit2 "$SHOAL" mount "$S"
one_line_exit2 "$SHOAL" mount "$S" "$MNT" --attr-cache soon
one_line_exit2 "$SHOAL" mount "$S" "$MNT" --max-write 3M
one_line_exit2 "$SHOAL" mount "$S" "$MNT" --cache-group 'bad name'
one_line_exit2 "$SHOAL" mount "$S" "$T/nowhere"
grep -q "No such file or directory" "$T/last.err" || fail "unclear error: $(cat "$T/last.err")"
one_line_exit2 "$SHOAL" mount "$S" "$STORE/top.txt"
grep -q "not a directory" "$T/last.err" || fail "unclear error: $(cat "$T/last.err")"
one_line_exit2 "$SHOAL" umount "$MNT" "$T" 
expect_exit 1 "$SHOAL" umount "$MNT"
grep -q "not mounted" "$T/last.err" || fail "unclear umount error: $(cat "$T/last.err")"
"$SHOAL" mount --help | grep -q -- "--attr-cache" || fail "mount --help lacks --attr-cache"

echo "== -d returns once the mount is ready"
"$SHOAL" mount "$S" "$MNT" -d --read-only --cache-dir "$T/d.cache" --log-file "$T/d.log" \
  --log-level debug 2>"$T/d.err" || fail "mount -d failed: $(cat "$T/d.err")"
MOUNTS+=("$MNT")
mountpoint -q "$MNT" || fail "mount -d returned before the mount was ready"
dpid=$(grep -o 'shoal\[[0-9]*\]' "$T/d.log" | tail -n 1 | tr -dc 0-9)
[ -n "$dpid" ] && kill -0 "$dpid" || fail "no background mount process"
track d "$dpid" daemon "$T/d.log" "$T/d.err"
cmp -s "$MNT/dir/file.bin" "$STORE/dir/file.bin" || fail "read through the -d mount differs"
one_line_exit2 "$SHOAL" mount "$S" "$MNT"
grep -q "already a shoal mount" "$T/last.err" || fail "unclear error: $(cat "$T/last.err")"

echo "== --read-only: writes, creates, renames and deletes are EROFS with a log line"
erofs() { # erofs DESCRIPTION CMD... — CMD must fail with "Read-only file system"
  local what=$1
  shift
  set +e
  "$@" >"$T/ro.out" 2>&1
  local rc=$?
  set -e
  [ "$rc" -ne 0 ] || fail "$what succeeded on a read-only mount"
  grep -q "Read-only file system" "$T/ro.out" || fail "$what: $(cat "$T/ro.out")"
}
erofs "append" sh -c "echo x >>'$MNT/top.txt'"
erofs "overwrite" sh -c "echo x >'$MNT/top.txt'"
erofs "create" touch "$MNT/new.txt"
erofs "mkdir" mkdir "$MNT/newdir"
erofs "rename" mv "$MNT/top.txt" "$MNT/moved.txt"
erofs "unlink" rm -f "$MNT/top.txt"
erofs "rmdir" rmdir "$MNT/dir"
erofs "truncate" truncate -s 0 "$MNT/top.txt"
erofs "chmod" chmod 600 "$MNT/top.txt"
erofs "symlink" ln -s top.txt "$MNT/link"
erofs "python write" python3 -c "
import os, sys
try:
    os.open('$MNT/dir/file.bin', os.O_WRONLY)
except OSError as e:
    sys.exit(os.strerror(e.errno))"
cmp -s "$MNT/top.txt" "$STORE/top.txt" || fail "top.txt changed"
[ -f "$STORE/top.txt" ] && [ ! -e "$STORE/new.txt" ] && [ ! -e "$STORE/newdir" ] || fail "the store changed"
grep -q "refused .*read-only file system" "$T/d.log" || fail "no log line for refused writes"

echo "== shoal umount ends a -d mount"
"$SHOAL" umount "$MNT" || fail "shoal umount failed"
mountpoint -q "$MNT" && fail "still mounted after shoal umount"
for i in $(seq 1 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$dpid" 2>/dev/null && fail "the -d mount process outlived shoal umount"
grep -q "unmounting" "$T/d.log" || fail "no unmount line in the log"
# (once ready, a background mount's stderr is its log file)
cat "$T/d.err" "$T/d.log" | grep -q -E 'Sanitizer|runtime error' &&
  fail "sanitizer: $(grep -h -m 3 -E 'Sanitizer|runtime error' "$T/d.err" "$T/d.log")"

echo "== fusermount3 -u ends a mount"
start_mount f "$S" "$MNT"
cat "$MNT/top.txt" >/dev/null
fusermount3 -u "$MNT" || fail "fusermount3 -u failed"
wait_exit "$PID_f"
[ "$EXIT_RC" -eq 0 ] || fail "mount exited with $EXIT_RC after fusermount3 -u"
grep -q -E 'Sanitizer|runtime error' "$T/f.err" && fail "sanitizer: $(head -n 3 "$T/f.err")"

echo "== SIGTERM ends a mount and unmounts"
start_mount s "$S" "$MNT"
ls "$MNT" >/dev/null
kill -TERM "$PID_s"
wait_exit "$PID_s"
[ "$EXIT_RC" -eq 0 ] || fail "mount exited with $EXIT_RC after SIGTERM: $(tail -n 5 "$T/s.log")"
mountpoint -q "$MNT" && fail "still mounted after SIGTERM"
grep -q -E 'Sanitizer|runtime error' "$T/s.err" && fail "sanitizer: $(head -n 3 "$T/s.err")"
echo "PASS test_fuse_readonly"
