#!/usr/bin/env bash
# A lost CompleteMultipartUpload answer while another writer puts a same-size object under the
# same key (issue 23), against s3rver behind the fault front (s3fault.py mode completelostraced):
# the retry finds no such upload and the object there has the size of ours, but not the ETag
# our parts make (MD5 of the part MD5s, "-N"; or the MD5 of our bytes, which is how s3rver names
# a multipart object), so the write fails (close is EIO) and no block is
# pushed into the group under the other writer's ETag; a read through the group then gets the
# store's bytes. The control (completelostonce, no other writer): the same lost answer is taken
# as ours by its ETag, and the blocks are pushed.
. "$(dirname "$0")/lib.sh"
need_fuse
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
BUCKET=rbucket
start_s3rver "$BUCKET"
start_s3fault "$S3_PORT"
URL=s3://$BUCKET
MNT=$T/mnt
PY=/usr/bin/python3
META="sqlite3://$T/meta.db"
MP=$(free_port)
start_member r "$URL" --endpoint "$S3F_ENDPOINT" --meta "$META" --cache-group g --group-ip 127.0.0.1 \
  --metrics "127.0.0.1:$MP"
wait_members "$META" g 1
start_mount w "$URL" "$MNT" --endpoint "$S3F_ENDPOINT" --upload-part-size 5M --meta "$META" \
  --cache-group g --no-sharing
head -c 12000000 /dev/urandom >"$T/obj.bin" # three 5 MiB parts

s3get() {
  $PY "$SRC/tests/integration/s3fault.py" get --endpoint "$S3F_ENDPOINT" --bucket "$BUCKET" \
    --key "$1" --out "$2" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY"
}
write() { # write KEY — prints OK or the errno name of the failed write/close
  $PY - "$MNT/$1" "$T/obj.bin" <<'PY'
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
    os.write(fd, open(sys.argv[2], "rb").read())
    os.close(fd)
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}
served() { metric "127.0.0.1:$MP" remotecache_put_serve_blocks; }

echo "== control: a lost complete answer, no other writer: taken as ours by its ETag, pushed"
s3_mode completelostonce
got=$(write ctrl.bin)
[ "$got" = OK ] || fail "the control write failed: $got; $(grep -E "WARN|ERR" "$T/w.log" | tail -n 4)"
grep -q "completelost fault" "$S3F_LOG" || fail "the front lost no complete answer"
grep -q "the object there has the ETag our parts make (.*-3, or our bytes' MD5 .*), taken as ours" "$T/w.log" ||
  fail "the lost complete was not recognised by its ETag: $(grep 'complete ' "$T/w.log" | tail -n 2)"
wait_until 20 test "$(served)" -ge 3 || fail "the control's blocks were not pushed ($(served))"
before=$(served)
echo "  pushed blocks: $before"

echo "== a lost complete answer while another writer puts a same-size object: the write fails"
s3_mode completelostraced
got=$(write raced.bin)
echo "  write: $got; front: $(grep -c ' raced (' "$S3F_LOG") raced PUT"
grep -q "PUT /$BUCKET/raced.bin - -> 200 raced" "$S3F_LOG" || fail "the front did not race: $(tail -n 3 "$S3F_LOG")"
[ "$got" = EIO ] || fail "the raced write returned $got, want EIO"
grep -q "complete raced.bin: .* not .*-3 that our parts make (nor .*): another writer's, failing the write" "$T/w.log" ||
  fail "no refusal logged: $(grep 'raced.bin' "$T/w.log" | tail -n 3)"
sleep 1 # (a push would have been on its way by now)
[ "$(served)" -eq "$before" ] || fail "blocks were pushed under the other writer's ETag ($before -> $(served))"
s3get raced.bin "$T/store.bin" >/dev/null || fail "the store has no raced.bin"
cmp -s "$T/store.bin" "$T/obj.bin" && fail "the store holds our bytes: the race did not happen"
s3_mode pass
"$SHOAL" cat "$URL" raced.bin --endpoint "$S3F_ENDPOINT" --meta "$META" --cache-group g \
  --no-sharing --cache-size 0 --log-level error >"$T/out" || fail "cat raced.bin"
cmp -s "$T/out" "$T/store.bin" || fail "a read through the group differs from the store"

stop_mount w "$MNT"
stop_proc r
echo "PASS test_write_s3_race"
