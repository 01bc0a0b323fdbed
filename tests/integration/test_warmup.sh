#!/usr/bin/env bash
# shoal warmup [C4]: --storage --prefix fills the owners' caches so that a later read costs no
# store GET; without a group it fills the local cache; through a mount path it reads the files so
# the group caches them; bad input is one line and exit 2; a prefix that matches nothing is exit 1.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
STORE=$T/store
for i in $(seq 0 9); do make_object "$STORE/ds/part-$i" $((3 * 1024 * 1024 + i)); done
make_object "$STORE/other/x" 100000
S="file://$STORE"
META="sqlite3://$T/meta.db"

echo "== warmup --storage through a group of two members"
for m in a b; do start_member "$m" "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1; done
wait_members "$META" g 2
"$SHOAL" warmup --storage "$S" --prefix ds/ --meta "$META" --cache-group g --log-level warn 2>"$T/warm.err" ||
  fail "warmup failed: $(cat "$T/warm.err")"
grep -q "warmup: 10/10 blocks" "$T/warm.err" || fail "no progress line: $(cat "$T/warm.err")"
blocks=$(find "$T/a.cache" "$T/b.cache" -type f -path '*/blocks/*' | wc -l)
[ "$blocks" -eq 10 ] || fail "members hold $blocks blocks after warmup, expected 10"
before=$(cat "$T/a.log" "$T/b.log" | grep -c "store: get" || true)
[ "$before" -ge 10 ] || fail "members logged $before store reads for the 10 blocks they warmed up"
for i in $(seq 0 9); do
  "$SHOAL" cat "$S" "ds/part-$i" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
    --log-level error --summary >"$T/out" 2>"$T/sum" || fail "read part-$i"
  cmp -s "$T/out" "$STORE/ds/part-$i" || fail "part-$i differs"
  [ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "client went to the store"
  [ "$(summary_field fallbacks "$T/sum")" -eq 0 ] || fail "client fell back to the store"
done
after=$(cat "$T/a.log" "$T/b.log" | grep -c "store: get" || true)
[ "$before" -eq "$after" ] || fail "members went to the store after warmup ($before -> $after)"

echo "== warmup --storage without a group fills the local cache"
"$SHOAL" warmup --storage "$S" --prefix ds/ --cache-dir "$T/local" --log-level warn 2>/dev/null || fail "local warmup"
"$SHOAL" cat "$S" ds/part-3 --cache-dir "$T/local" --log-level error --summary >"$T/out" 2>"$T/sum"
cmp -s "$T/out" "$STORE/ds/part-3" || fail "local part-3 differs"
[ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "local warmup did not cache"

echo "== bad input"
expect_exit 2 "$SHOAL" warmup
expect_exit 2 "$SHOAL" warmup "$T/nonexistent"
expect_exit 2 "$SHOAL" warmup --storage "$S" "$T"
expect_exit 2 "$SHOAL" warmup --storage "$S" --threads 0
expect_exit 1 "$SHOAL" warmup --storage "$S" --prefix nonexist/ --cache-dir "$T/local"
grep -qx "shoal warmup: nothing matched: no object (with data) under 'nonexist/' in $S" "$T/last.err" ||
  fail "a prefix that matches nothing: $(cat "$T/last.err")"

echo "== warmup of a mount path"
if [ "$(id -u)" -eq 0 ] && [ -e /dev/fuse ] && command -v fusermount3 >/dev/null; then
  fuse_isolate
  mkdir -p "$T/mnt"
  "$SHOAL" mount "$S" "$T/mnt" --meta "$META" --cache-group g2 --no-sharing --cache-size 0 \
    --log-file "$T/mount.log" -d || fail "mount failed"
  MOUNTS+=("$T/mnt")
  track mnt "$(grep -o 'shoal\[[0-9]*\]' "$T/mount.log" | tail -n 1 | tr -dc 0-9)" daemon "$T/mount.log"
  for m in c d; do start_member "$m" "$S" --meta "$META" --cache-group g2 --group-ip 127.0.0.1; done
  wait_members "$META" g2 3
  "$SHOAL" warmup "$T/mnt/ds" --log-level warn 2>"$T/warm2.err" || fail "mount warmup: $(cat "$T/warm2.err")"
  grep -q "warmup: 10/10 files" "$T/warm2.err" || fail "mount warmup progress: $(cat "$T/warm2.err")"
  blocks=$(find "$T/c.cache" "$T/d.cache" -type f -path '*/blocks/*' | wc -l)
  [ "$blocks" -eq 10 ] || fail "members hold $blocks blocks after a mount warmup, expected 10"
  "$SHOAL" umount "$T/mnt" || fail "umount"
  MOUNTS=()
else
  skip_section "warmup of a mount path: no root, /dev/fuse or fusermount3"
fi
echo "PASS test_warmup"
