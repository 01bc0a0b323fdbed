#!/usr/bin/env bash
# Write-through into the group [W3] (docs/writes.md): `cp` of 1 GiB into a --no-sharing mount of
# a two-member group, over file:// and over s3:// (s3rver behind the SigV4-checking front), puts
# every block into its owner's cache by the time cp returns, keyed by the version the store
# assigned; a consumer-only client then reads the object through the group byte-exact while the
# store sees no GET of it (the file:// members' and the client's logs, the s3 front's request
# log); the writer's and the members' put figures move. An upload that fails and a writer killed
# with SIGKILL push nothing. A sharing mount puts the blocks it owns into its own cache.
# SHOAL_WT_MIB sets the size (default 1024).
. "$(dirname "$0")/lib.sh"
need_fuse
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
MIB=${SHOAL_WT_MIB:-1024}
NB=$(((MIB + 3) / 4)) # 4 MiB blocks
head -c 32 /dev/urandom | base64 >"$T/secret"
SEC=(--group-secret-file "$T/secret")
head -c $((MIB << 20)) /dev/urandom >"$T/big.bin"
PY=/usr/bin/python3

blocks_in() { find "$T/$1.cache" -type f -path '*/blocks/*' 2>/dev/null | wc -l; }

# run_case NAME URL STOREFLAGS... — members NAME-a and NAME-b, a writer mount NAME-w; cp, then
# the checks that need no store.
run_case() {
  local n=$1 url=$2
  shift 2
  local meta="sqlite3://$T/$n.db" mnt="$T/$n.mnt"
  for m in a b; do
    start_member "${n}$m" "$url" --meta "$meta" --cache-group "$n" --group-ip 127.0.0.1 "${SEC[@]}" \
      --metrics "127.0.0.1:$(free_port)" "$@"
  done
  wait_members "$meta" "$n" 2
  start_mount "${n}w" "$url" "$mnt" --meta "$meta" --cache-group "$n" --no-sharing "${SEC[@]}" "$@"
  MNT=$mnt
  META=$meta

  echo "== $n: cp of $MIB MiB; every block is in its owner's cache when cp returns"
  local t0 t1
  t0=$(date +%s%N)
  cp "$T/big.bin" "$mnt/big.bin" || fail "cp into the mount failed"
  t1=$(date +%s%N)
  echo "  $MIB MiB in $(((t1 - t0) / 1000000)) ms"
  local ba bb
  ba=$(blocks_in "${n}a")
  bb=$(blocks_in "${n}b")
  echo "  $n-a holds $ba, $n-b holds $bb of $NB blocks"
  [ $((ba + bb)) -eq "$NB" ] || fail "the members hold $((ba + bb)) blocks, want $NB"
  [ "$ba" -gt 0 ] && [ "$bb" -gt 0 ] || fail "one member got every block"
  grep -q "push: big.bin: $NB of $NB blocks cached in the group" "$T/${n}w.log" ||
    fail "the writer did not log $NB blocks pushed: $(grep 'push:' "$T/${n}w.log" | tail -n 3)"
  [ "$(stats_field "$mnt" remotecache_put_bytes)" -eq $((MIB << 20)) ] ||
    fail "remotecache_put_bytes is not $((MIB << 20))"
  [ "$(stats_field "$mnt" remotecache_put_errors)" -eq 0 ] || fail "remotecache_put_errors moved"
  local sa sb
  sa=$(metric "$(metrics_addr "${n}a")" remotecache_put_serve_blocks)
  sb=$(metric "$(metrics_addr "${n}b")" remotecache_put_serve_blocks)
  [ "$sa" -eq "$ba" ] && [ "$sb" -eq "$bb" ] ||
    fail "put_serve_blocks $sa/$sb do not match the blocks cached $ba/$bb"
}

# consumer N URL FLAGS... — a consumer-only client reads big.bin through group N into
# $T/N.out with its log (debug) in $T/N-c.log; fails unless byte-exact.
consumer() {
  local n=$1 url=$2
  shift 2
  "$SHOAL" cat "$url" big.bin --meta "$META" --cache-group "$n" --no-sharing --cache-size 0 \
    "${SEC[@]}" --log-level debug --log-file "$T/$n-c.log" "$@" >"$T/$n.out" ||
    fail "the consumer's read failed: $(tail -n 3 "$T/$n-c.log")"
  cmp -s "$T/$n.out" "$T/big.bin" || fail "the consumer read other bytes"
  rm -f "$T/$n.out"
  local gets
  gets=$(grep -c 'store: get ' "$T/$n-c.log" || true)
  [ "$gets" -eq 0 ] || fail "the consumer read $gets times from the store"
}

# nothing_pushed N — a failed upload and a killed writer leave the members' caches as they were.
nothing_pushed() {
  local n=$1 before after
  before=$(($(blocks_in "${n}a") + $(blocks_in "${n}b")))
  echo "== $n: an upload abandoned by an out-of-order write, and a writer killed, push nothing"
  $PY - "$MNT" <<'PY' || fail "the out-of-order write was not refused"
import errno, os, sys
fd = os.open(sys.argv[1] + "/ooo.bin", os.O_WRONLY | os.O_CREAT)
os.write(fd, os.urandom(9 << 20))
try:
    os.pwrite(fd, b"x", 1)
    sys.exit(1)
except OSError as e:
    assert e.errno == errno.EINVAL
try:
    os.close(fd)
except OSError:
    pass
PY
  $PY -c "
import os, sys, time
fd = os.open('$MNT/killed.bin', os.O_WRONLY | os.O_CREAT)
for i in range(12):
    os.write(fd, os.urandom(1 << 20))
print('ready', flush=True)
time.sleep(60)" >"$T/$n-killed.out" &
  track "${n}writer" $! helper
  wait_for grep -q ready "$T/$n-killed.out" || fail "the writer did not start"
  kill9 "${n}writer"
  wait_log "$T/${n}w.log" "killed.bin abandoned" 20
  after=$(($(blocks_in "${n}a") + $(blocks_in "${n}b")))
  [ "$after" -eq "$before" ] || fail "blocks went $before -> $after without a committed object"
}

# ---- file:// ------------------------------------------------------------------------------------
STORE=$T/store
mkdir -p "$STORE"
run_case f "file://$STORE"
cmp -s "$T/big.bin" "$STORE/big.bin" || fail "the store's copy differs"
ma=$(log_mark fa)
mb=$(log_mark fb)
consumer f "file://$STORE"
[ -z "$(store_gets_since fa "$ma")$(store_gets_since fb "$mb")" ] ||
  fail "a member read from the store: $(store_gets_since fa "$ma" | head -n 3)"
nothing_pushed f
stop_mount fw "$T/f.mnt"
stop_proc fa
stop_proc fb

echo "== o: a sharing mount, the group's only provider, keeps the blocks it owns in its own cache"
META="sqlite3://$T/o.db"
start_mount ow "file://$STORE" "$T/o.mnt" --meta "$META" --cache-group o --group-ip 127.0.0.1 "${SEC[@]}"
wait_members "$META" o 1
head -c $((64 << 20)) "$T/big.bin" >"$T/small.bin"
cp "$T/small.bin" "$T/o.mnt/small.bin" || fail "cp into the sharing mount failed"
[ "$(blocks_in ow)" -eq 16 ] || fail "the sharing mount cached $(blocks_in ow) of 16 blocks"
[ "$(stats_field "$T/o.mnt" remotecache_put_errors)" -eq 0 ] || fail "pushes into its own cache failed"
mo=$(log_mark ow)
"$SHOAL" cat "file://$STORE" small.bin --meta "$META" --cache-group o --no-sharing --cache-size 0 \
  "${SEC[@]}" --log-level error >"$T/o.out" || fail "reading small.bin through the group failed"
cmp -s "$T/o.out" "$T/small.bin" || fail "small.bin read through the group differs"
[ -z "$(store_gets_since ow "$mo")" ] || fail "the sharing mount read small.bin from the store"
stop_mount ow "$T/o.mnt"
rm -rf "$STORE" "$T"/f?.cache "$T/ow.cache" "$T/small.bin" "$T/o.out"

# ---- s3:// --------------------------------------------------------------------------------------
BUCKET=wtbucket
start_s3rver "$BUCKET"
start_s3fault "$S3_PORT"
run_case s "s3://$BUCKET" --endpoint "$S3F_ENDPOINT"
s3_mode pass # a new request log: what the reads below cost the store
consumer s "s3://$BUCKET" --endpoint "$S3F_ENDPOINT"
gets=$(s3_count GET "$(s3_path "$BUCKET" big.bin)")
[ "$gets" -eq 0 ] || fail "the store saw $gets GETs of big.bin after the write"
$PY "$SRC/tests/integration/s3fault.py" get --endpoint "$S3F_ENDPOINT" --bucket "$BUCKET" \
  --key big.bin --out "$T/s3.out" --access "$AWS_ACCESS_KEY_ID" \
  --secret "$AWS_SECRET_ACCESS_KEY" >/dev/null || fail "cannot read big.bin back from s3rver"
cmp -s "$T/s3.out" "$T/big.bin" || fail "the store's copy differs"
rm -f "$T/s3.out"
nothing_pushed s
stop_mount sw "$T/s.mnt"
stop_proc sa
stop_proc sb
echo "PASS test_write_through"
