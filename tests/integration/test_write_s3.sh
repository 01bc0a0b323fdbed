#!/usr/bin/env bash
# Writes through the mount over s3:// [W1, W2] against a real S3 server (s3rver) behind the
# fault front (s3fault.py: checks every SigV4 signature and payload hash, answers what s3rver 3.7
# lacks — AbortMultipartUpload, ListMultipartUploads, If-None-Match — and injects faults).
# `cp` of 1 GiB goes up in 16 MiB parts and the store's object is byte-exact with the ETag the
# mount recorded; a small file is one PUT; 503s on parts, a connection cut mid-part and a lost
# CompleteMultipartUpload answer are retried and the object is exact; every PUT failing: close
# is EIO, no object, the upload aborted and none left pending; a writer killed by SIGKILL: no
# object, upload aborted; create-new loses to an object that appeared meanwhile (412);
# a mount stopped with a file open aborts its upload; --allow-overwrite replaces and
# --allow-delete deletes.
. "$(dirname "$0")/lib.sh"
need_fuse
BUCKET=wbucket
start_s3rver "$BUCKET"
start_s3fault "$S3_PORT"
URL=s3://$BUCKET
MNT=$T/mnt
PY=/usr/bin/python3

# s3get KEY OUT — the store's object KEY into OUT, read past shoal; prints its ETag. Exit 3: none.
s3get() {
  $PY "$SRC/tests/integration/s3fault.py" get --endpoint "$S3F_ENDPOINT" --bucket "$BUCKET" \
    --key "$1" --out "$2" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY"
}
# no_object KEY — the store has no object KEY.
no_object() {
  local rc=0
  s3get "$1" "$T/none" >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 3 ] || fail "$1: expected no object in the store (get exit $rc)"
}
# pending — multipart uploads begun and neither completed nor aborted, as the front saw them.
pending() {
  curl -sf "$S3F_ENDPOINT/$BUCKET?uploads" | grep -o '<UploadId>' | wc -l
}
# set_mode MODE — s3_mode, keeping the front's log so far for the final checks.
set_mode() {
  cat "$S3F_LOG" >>"$T/front.all"
  s3_mode "$1"
}
# errno_of STATEMENTS — as in test_write_file.sh.
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

start_mount m "$URL" "$MNT" --endpoint "$S3F_ENDPOINT"

echo "== cp of 1 GiB: 16 MiB parts, byte-exact in the store, the ETag the mount recorded"
head -c $((1 << 30)) /dev/urandom >"$T/big.bin"
set_mode pass
t0=$(date +%s%N)
cp "$T/big.bin" "$MNT/big.bin" || fail "cp into the mount failed"
t1=$(date +%s%N)
echo "  1 GiB in $(((t1 - t0) / 1000000)) ms"
parts=$(grep -c '^PUT /'"$BUCKET"'/big.bin?partNumber=' "$S3F_LOG")
[ "$parts" -eq 64 ] || fail "expected 64 parts of 16 MiB, the front saw $parts"
etag=$(s3get big.bin "$T/back.bin") || fail "the store has no big.bin"
cmp "$T/big.bin" "$T/back.bin" || fail "the store's big.bin differs"
grep -q "wrote big.bin: 1073741824 bytes, version $etag" "$T/m.log" ||
  fail "the mount's version is not the store's ETag $etag: $(grep 'wrote big.bin' "$T/m.log")"
[ "$(stat -c %s "$MNT/big.bin")" -eq $((1 << 30)) ] || fail "the mount shows the wrong size"
cmp <(tail -c 3000000 "$MNT/big.bin") <(tail -c 3000000 "$T/big.bin") ||
  fail "reading the new object through the mount differs"
[ "$(pending)" -eq 0 ] || fail "a multipart upload is left pending"
rm -f "$T/big.bin" "$T/back.bin"

echo "== a small file is one PUT"
set_mode pass
echo small >"$MNT/small.txt"
[ "$(grep -c "^PUT /$BUCKET/small.txt - -> 200" "$S3F_LOG")" -eq 1 ] || fail "small.txt was not one PUT"
grep -q "uploads=" "$S3F_LOG" && fail "a small file started a multipart upload"
s3get small.txt "$T/small" >/dev/null && [ "$(cat "$T/small")" = small ] || fail "small.txt differs"
stop_mount m "$MNT"

# The fault cases use 5 MiB parts: 23 MB is 5 parts.
start_mount f "$URL" "$MNT" --endpoint "$S3F_ENDPOINT" --upload-part-size 5M
head -c 23000000 /dev/urandom >"$T/obj.bin"
for mode in part503once partcutonce completelostonce part503pct:30; do
  echo "== $mode: retried, and the object is exact"
  set_mode "$mode"
  key="f-${mode%%:*}.bin"
  cp "$T/obj.bin" "$MNT/$key" || fail "$mode: cp failed"
  s3get "$key" "$T/back.bin" >/dev/null || fail "$mode: no object"
  cmp "$T/obj.bin" "$T/back.bin" || fail "$mode: the object differs"
  echo "  $(grep -c 'fault' "$S3F_LOG") faults injected"
done
grep -q "503 fault" "$S3F_LOG" || fail "part503pct:30 injected nothing"
grep -q "taken as ours" "$T/f.log" || fail "the lost complete was not recognised"
[ "$(stats_field "$MNT" object_put_retries)" -ge 10 ] || fail "object_put_retries did not move"
[ "$(pending)" -eq 0 ] || fail "a multipart upload is left pending"

echo "== every PUT fails: close is EIO, no object, the upload aborted"
# 12 MB: two parts go up while writing, so nothing blocks the writes and close meets the failure.
set_mode putfail
got=$(errno_of "
data = open('$T/obj.bin', 'rb').read(12000000)
fd = os.open(M + '/failed.bin', os.O_WRONLY | os.O_CREAT)
os.write(fd, data)
os.close(fd)")
[ "$got" = EIO ] || fail "close under putfail: got $got, want EIO"
grep -q "failed.bin?uploadId=.* -> 204 abort recorded" "$S3F_LOG" || fail "no abort at the front"
no_object failed.bin
ls "$MNT" | grep -qx failed.bin && fail "the failed file is listed"
grep -q "multipart upload of failed.bin aborted" "$T/f.log" || fail "no abort in the mount's log"
[ "$(pending)" -eq 0 ] || fail "the failed upload is left pending"
grep -q "close of failed.bin failed" "$T/f.log" || fail "no log line for the failed close"
set_mode putfail
got=$(errno_of "
fd = os.open(M + '/failed-small.txt', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'tiny')
os.close(fd)")
[ "$(grep -c "^PUT /$BUCKET/failed-small.txt - -> 503 fault" "$S3F_LOG")" -eq 5 ] ||
  fail "expected 5 attempts of the small PUT"
set_mode pass
[ "$got" = EIO ] || fail "close of a small file under putfail: got $got, want EIO"
no_object failed-small.txt
[ "$(stats_field "$MNT" object_multipart_aborts)" -ge 1 ] || fail "object_multipart_aborts"
[ "$(stats_field "$MNT" fuse_write_errors)" -ge 2 ] || fail "fuse_write_errors"

echo "== a writer killed by SIGKILL mid-file: no object, the upload aborted"
set_mode pass
$PY -c "
import os, sys, time
fd = os.open('$MNT/killed.bin', os.O_WRONLY | os.O_CREAT)
for i in range(12):
    os.write(fd, os.urandom(1 << 20))
print('ready', flush=True)
time.sleep(60)" >"$T/writer.out" &
track writer $! helper
wait_for grep -q ready "$T/writer.out" || fail "the writer did not start"
wait_for grep -q "killed.bin?partNumber=2" "$S3F_LOG" || fail "no part went up before the kill"
kill9 writer # a deliberate SIGKILL, declared to the harness
wait_for grep -q "killed.bin?uploadId=.* -> 204 abort recorded" "$S3F_LOG" ||
  fail "the killed writer's upload was not aborted"
no_object killed.bin
[ "$(pending)" -eq 0 ] || fail "the killed writer's upload is left pending"

echo "== create-new loses to an object that appeared while writing (If-None-Match: 412)"
got=$(errno_of "
import subprocess
fd = os.open(M + '/race.bin', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'mine')
os.makedirs('$T/race', exist_ok=True)
open('$T/race/race.bin', 'w').write('theirs')
subprocess.run(['$PY', '$SRC/tests/integration/s3fault.py', 'put', '--endpoint', '$S3F_ENDPOINT',
                '--bucket', '$BUCKET', '--dir', '$T/race', '--key', '$AWS_ACCESS_KEY_ID',
                '--secret', '$AWS_SECRET_ACCESS_KEY'], check=True, stdout=subprocess.DEVNULL)
os.close(fd)")
[ "$got" = EIO ] || fail "close of a create that lost the race: got $got, want EIO"
grep -q "PUT /$BUCKET/race.bin - -> 412 exists" "$S3F_LOG" || fail "no If-None-Match refusal"
s3get race.bin "$T/race.out" >/dev/null && [ "$(cat "$T/race.out")" = theirs ] ||
  fail "the other writer's object was replaced"

echo "== the mount stops while a file is open for writing: the upload is aborted"
set_mode pass
$PY -c "
import os, sys, time
fd = os.open('$MNT/open-at-stop.bin', os.O_WRONLY | os.O_CREAT)
for i in range(12):
    os.write(fd, os.urandom(1 << 20))
print('ready', flush=True)
time.sleep(60)" >"$T/writer2.out" 2>/dev/null &
track writer2 $! helper
wait_for grep -q ready "$T/writer2.out" || fail "the writer did not start"
kill -TERM "$PID_f"
wait_exit "$PID_f"
[ "$EXIT_RC" -eq 0 ] || fail "the mount exited with $EXIT_RC: $(tail -n 5 "$T/f.err")"
grep -q -E 'Sanitizer|runtime error' "$T/f.err" && fail "mount f: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/f.err")"
grep -q "open-at-stop.bin abandoned after .*: the mount stopped while it was open" "$T/f.log" ||
  fail "no abandon line for the file open at stop"
grep -q "open-at-stop.bin?uploadId=.* -> 204 abort recorded" "$S3F_LOG" || fail "its upload was not aborted"
no_object open-at-stop.bin
[ "$(pending)" -eq 0 ] || fail "an upload is left pending after the mount stopped"
kill9 writer2
umount -l "$MNT" 2>/dev/null || true

echo "== --allow-overwrite replaces (new ETag), --allow-delete deletes"
start_mount o "$URL" "$MNT" --endpoint "$S3F_ENDPOINT" --allow-overwrite --allow-delete
old=$(s3get small.txt "$T/x")
echo replaced >"$MNT/small.txt" || fail "overwrite failed"
new=$(s3get small.txt "$T/x")
[ "$(cat "$T/x")" = replaced ] && [ "$new" != "$old" ] || fail "the object was not replaced"
[ "$(cat "$MNT/small.txt")" = replaced ] || fail "a reader of the mount sees the old content"
rm "$MNT/small.txt" || fail "rm failed"
no_object small.txt
[ "$(stats_field "$MNT" object_delete_requests)" -ge 1 ] || fail "object_delete_requests"
stop_mount o "$MNT"
cat "$S3F_LOG" >>"$T/front.all"
grep -q SIGFAIL "$T/front.all" && fail "a request failed its signature check: $(grep -m1 SIGFAIL "$T/front.all")"
grep -q "payload hash mismatch" "$T/front.all" && fail "a body did not match its signed hash"
echo "PASS test_write_s3"
