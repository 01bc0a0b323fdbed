#!/usr/bin/env bash
# Writes through the mount over file:// [W1, W2] (docs/writes.md): `cp` of 1 GiB is byte-exact in
# the store and readable through the mount when cp returns; the model's refusals carry their
# errno and one log line (overwrite and unlink without their flag EPERM, out-of-order writes
# EINVAL and then EIO at close, rename ENOTSUP, O_EXCL EEXIST); with --allow-overwrite and
# --allow-delete those work; fsync commits; mkdir makes a prefix; a writer killed by SIGKILL or
# SIGTERM leaves no object and no hidden file; one that exits without closing commits; the write
# and put figures of .stats and `shoal stats` move.
. "$(dirname "$0")/lib.sh"
need_fuse

STORE=$T/store
mkdir -p "$STORE/dir"
echo old >"$STORE/existing.txt"
make_object "$STORE/dir/data.bin" 100000
S="file://$STORE"
MNT=$T/mnt
PY=/usr/bin/python3

# errno_of STATEMENTS — runs Python STATEMENTS (os imported, M the mount) and prints OK or the
# name of the errno of the OSError that stopped them.
errno_of() {
  $PY - "$MNT" "$1" <<'PY'
import errno, os, sys
M = sys.argv[1]
try:
    exec(sys.argv[2])
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}
# expect_errno WANT WHAT STATEMENTS
expect_errno() {
  local got
  got=$(errno_of "$3")
  [ "$got" = "$1" ] || fail "$2: got $got, want $1"
  echo "  $2: $got"
}
# log_count MOUNT-NAME PATTERN — lines of the mount's log that match.
log_count() {
  grep -c -- "$2" "$T/$1.log" || true
}
# no_hidden — the store holds no upload leftovers.
no_hidden() {
  local left
  left=$(find "$STORE" -name '.shoal-upload-*' | head -n 3)
  [ -z "$left" ] || fail "hidden upload files left in the store: $left"
}

start_mount w "$S" "$MNT"

echo "== cp of 1 GiB: byte-exact in the store, readable through the mount when cp returns"
head -c $((1 << 30)) /dev/urandom >"$T/big.bin"
t0=$(date +%s%N)
cp "$T/big.bin" "$MNT/big.bin" || fail "cp into the mount failed"
t1=$(date +%s%N)
echo "  1 GiB in $(((t1 - t0) / 1000000)) ms"
cmp "$T/big.bin" "$STORE/big.bin" || fail "the store's copy differs"
[ "$(stat -c %s "$MNT/big.bin")" -eq $((1 << 30)) ] || fail "the mount shows the wrong size"
ls "$MNT" | grep -qx big.bin || fail "the listing lacks big.bin"
cmp <(tail -c 5000000 "$MNT/big.bin") <(tail -c 5000000 "$T/big.bin") ||
  fail "reading the new object through the mount differs"
no_hidden
grep -q "wrote big.bin: 1073741824 bytes" "$T/w.log" || fail "no log line for the write"
rm -f "$T/big.bin"

echo "== small files: shell redirection, python, touch, new folders, tar -x, cp -p"
echo hello >"$MNT/hello.txt" || fail "echo > new file failed"
[ "$(cat "$STORE/hello.txt")" = hello ] || fail "hello.txt is not in the store"
$PY -c "open('$MNT/py.bin', 'wb').write(b'x' * 300000)" || fail "python write failed"
[ "$(stat -c %s "$STORE/py.bin")" -eq 300000 ] || fail "py.bin is not in the store"
touch "$MNT/empty" || fail "touch failed"
wait_for test -f "$STORE/empty" || fail "touch made no empty object" # committed at release
mkdir "$MNT/newdir" || fail "mkdir failed"
[ ! -e "$STORE/newdir" ] || fail "mkdir reached the store before a file did"
ls "$MNT" | grep -qx newdir || fail "the new folder is not listed"
mkdir "$MNT/newdir/sub" && echo deep >"$MNT/newdir/sub/f.txt" || fail "a file in new folders"
[ "$(cat "$STORE/newdir/sub/f.txt")" = deep ] || fail "newdir/sub/f.txt is not in the store"
mkdir -p "$T/tsrc/sub" && echo a >"$T/tsrc/sub/f1" && tar -C "$T" -cf "$T/t.tar" tsrc
tar -C "$MNT" -xf "$T/t.tar" || fail "tar -x into the mount failed" # sets mode, owner, times
[ "$(cat "$STORE/tsrc/sub/f1")" = a ] || fail "tar -x: tsrc/sub/f1 is not in the store"
cp -p "$T/t.tar" "$MNT/t.tar" || fail "cp -p into the mount failed"
cmp -s "$T/t.tar" "$STORE/t.tar" || fail "cp -p: the store's copy differs"
mkdir "$MNT/gone" && rmdir "$MNT/gone" || fail "mkdir + rmdir of an empty folder failed"
ls "$MNT" | grep -qx gone && fail "a removed folder is still listed"
expect_errno ENOTEMPTY "rmdir of a folder with files" "os.rmdir(M + '/newdir')"
expect_errno EEXIST "mkdir of an existing prefix" "os.mkdir(M + '/dir')"

echo "== refusals without flags: errno, one log line, the store unchanged"
expect_errno EPERM "overwrite" "open(M + '/existing.txt', 'w').write('new')"
[ "$(log_count w 'refused open for writing of existing.txt: the object exists; mount with --allow-overwrite')" -eq 1 ] ||
  fail "expected one log line for the refused overwrite"
expect_errno EEXIST "O_CREAT|O_EXCL of an existing object" \
  "os.open(M + '/existing.txt', os.O_WRONLY | os.O_CREAT | os.O_EXCL)"
expect_errno EPERM "unlink" "os.unlink(M + '/existing.txt')"
[ "$(log_count w 'refused unlink of existing.txt: deleting objects needs --allow-delete')" -eq 1 ] ||
  fail "expected one log line for the refused unlink"
expect_errno ENOTSUP "rename" "os.rename(M + '/existing.txt', M + '/moved.txt')"
[ "$(log_count w 'refused rename of existing.txt')" -eq 1 ] || fail "expected one log line for rename"
expect_errno EPERM "truncate" "os.truncate(M + '/existing.txt', 0)"
expect_errno EPERM "chmod" "os.chmod(M + '/existing.txt', 0o600)"
expect_errno ENOTSUP "symlink" "os.symlink('existing.txt', M + '/link')"
expect_errno EINVAL "out-of-order write" "
fd = os.open(M + '/ooo.bin', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'abc')
os.pwrite(fd, b'x', 10)"
[ "$(log_count w 'refused write to ooo.bin: out-of-order write at offset 10, expected 3')" -eq 1 ] ||
  fail "expected one log line for the out-of-order write"
expect_errno EIO "close after an out-of-order write" "
fd = os.open(M + '/ooo2.bin', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'abc')
try:
    os.pwrite(fd, b'x', 0)
except OSError:
    pass
os.close(fd)"
[ ! -e "$STORE/ooo.bin" ] && [ ! -e "$STORE/ooo2.bin" ] || fail "an abandoned file reached the store"
expect_errno EPERM "reading a file being written" "
fd = os.open(M + '/busy.bin', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'abc')
os.open(M + '/busy.bin', os.O_RDONLY)"
expect_errno EPERM "writing after fsync" "
fd = os.open(M + '/synced.bin', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'abc')
os.fsync(fd)
assert open('$STORE/synced.bin').read() == 'abc', 'fsync did not commit'
os.write(fd, b'more')"
[ "$(cat "$STORE/existing.txt")" = old ] || fail "existing.txt changed"
[ -f "$STORE/dir/data.bin" ] || fail "dir/data.bin went away"
no_hidden

echo "== a writer killed mid-file leaves no object; one that exits without close commits"
# writer KEY SIZE_MIB — writes, says "ready" on stdout, then waits to be killed (exec: when run
# in the background, $! is then the writer itself).
writer() {
  exec $PY -c "
import os, sys, time
fd = os.open('$MNT/' + sys.argv[1], os.O_WRONLY | os.O_CREAT)
for i in range(int(sys.argv[2])):
    os.write(fd, os.urandom(1 << 20))
print('ready', flush=True)
time.sleep(60)" "$1" "$2"
}
for sig in KILL TERM; do
  writer "killed-$sig.bin" 24 >"$T/writer-$sig.out" &
  track "writer$sig" $! helper
  wait_for grep -q ready "$T/writer-$sig.out" || fail "the writer did not start"
  if [ "$sig" = KILL ]; then
    kill9 "writer$sig" # a deliberate SIGKILL, declared to the harness
  else
    stop_proc "writer$sig"
  fi
  wait_for grep -q "killed-$sig.bin abandoned after 25165824 bytes: the writer was killed by signal" "$T/w.log" ||
    fail "no abandon line for the writer killed by SIG$sig"
  [ ! -e "$STORE/killed-$sig.bin" ] || fail "a writer killed by SIG$sig left an object"
  ls "$MNT" | grep -q "killed-$sig" && fail "the mount lists the file of a killed writer"
  echo "  SIG$sig: no object, no hidden file"
done
no_hidden
$PY -c "
import os
fd = os.open('$MNT/noclose.bin', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'y' * 100000)
os._exit(0)" || fail "the exiting writer failed"
wait_for test -f "$STORE/noclose.bin" || fail "a writer that exited without close left no object"
[ "$(stat -c %s "$STORE/noclose.bin")" -eq 100000 ] || fail "noclose.bin has the wrong size"

echo "== .stats and shoal stats show the writes"
for m in fuse_write_files fuse_write_refused fuse_write_aborted object_put_objects \
  object_put_bytes fuse_write_bytes fuse_write_commit_dur_count; do
  v=$(stats_field "$MNT" "$m")
  [ -n "$v" ] && [ "$v" != 0 ] || fail ".stats: $m is '${v}'"
done
[ "$(stats_field "$MNT" object_put_bytes)" -ge $((1 << 30)) ] || fail "object_put_bytes < 1 GiB"
$PY -c "
import os, time
fd = os.open('$MNT/stats.bin', os.O_WRONLY | os.O_CREAT)
for i in range(12):
    os.write(fd, os.urandom(8 << 20))
    time.sleep(0.25)
os.close(fd)" &
spid=$!
"$SHOAL" stats "$MNT" --schema fo -c 4 >"$T/stats.out" || fail "shoal stats failed"
wait "$spid" || fail "the stats writer failed"
cat "$T/stats.out"
# Columns: ops lat read write | get put — a row where write and put both moved.
awk 'NR > 2 { gsub(/\|/, " "); if ($4 != "0" && $6 != "0") ok = 1 } END { exit !ok }' \
  "$T/stats.out" || fail "no row of shoal stats shows write and put traffic"
stop_mount w "$MNT"

echo "== --allow-overwrite and --allow-delete"
start_mount o "$S" "$MNT" --allow-overwrite --allow-delete
cat "$MNT/existing.txt" >/dev/null
echo new >"$MNT/existing.txt" || fail "overwrite with --allow-overwrite failed"
[ "$(cat "$STORE/existing.txt")" = new ] || fail "the store has not the new content"
[ "$(cat "$MNT/existing.txt")" = new ] || fail "a reader of the mount sees the old content"
expect_errno EPERM "open for writing without O_TRUNC" "os.open(M + '/existing.txt', os.O_WRONLY)"
rm "$MNT/existing.txt" || fail "rm with --allow-delete failed"
[ ! -e "$STORE/existing.txt" ] || fail "rm left the object"
ls "$MNT" | grep -qx existing.txt && fail "the deleted object is still listed"
rm "$MNT/dir/data.bin" || fail "rm dir/data.bin failed"
[ ! -e "$STORE/dir" ] || fail "the emptied prefix stays in the store"
expect_errno ENOTSUP "rename with both flags" "os.rename(M + '/hello.txt', M + '/moved.txt')"
[ "$(stats_field "$MNT" object_delete_requests)" -ge 2 ] || fail "object_delete_requests did not move"
stop_mount o "$MNT"

echo "== --read-only refuses writes with EROFS"
start_mount r "$S" "$MNT" --read-only
expect_errno EROFS "create on a read-only mount" "open(M + '/ro.txt', 'w')"
expect_errno EROFS "mkdir on a read-only mount" "os.mkdir(M + '/rodir')"
stop_mount r "$MNT"
expect_exit 2 "$SHOAL" mount "$S" "$MNT" --read-only --allow-delete
expect_exit 2 "$SHOAL" mount "$S" "$MNT" --upload-part-size 1M
grep -q "expected 5M to 5G" "$T/last.err" || fail "unclear --upload-part-size error: $(cat "$T/last.err")"
no_hidden
echo "PASS test_write_file"
