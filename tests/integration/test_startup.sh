#!/usr/bin/env bash
# Start-up asks the store once [O1]: `mount` and `serve` of a store that does not answer (an
# endpoint that refuses, one that never answers, a bucket that does not exist) exit 1 within
# 30 s with one line naming the storage, its endpoint and the cause, before -d detaches (and -d
# says "running in the background" only after a start that worked); nothing stays mounted.
# Malformed values (s3:// without a bucket, --endpoint without a scheme) exit 2.
. "$(dirname "$0")/lib.sh"

ms() { date +%s%3N; }
# start_fails WHAT WANT-REGEX CMD... — CMD exits 1 within 30 s, its stderr holds one
# "shoal CMD:" line matching WANT-REGEX and no "running in the background".
start_fails() {
  local what=$1 want=$2 t0 rc
  shift 2
  t0=$(ms)
  set +e
  timeout 40 "$@" >"$T/sf.out" 2>"$T/sf.err"
  rc=$?
  set -e
  local took=$(($(ms) - t0))
  [ "$rc" -eq 1 ] || fail "$what: exit $rc, want 1: $(tail -n 3 "$T/sf.err")"
  [ "$took" -lt 30000 ] || fail "$what: took $took ms"
  grep -E "^shoal (mount|serve): " "$T/sf.err" | grep -qE "$want" ||
    fail "$what: no line naming the cause ($want): $(tail -n 3 "$T/sf.err")"
  [ "$(grep -cE "^shoal (mount|serve): " "$T/sf.err")" -eq 1 ] || fail "$what: not one line: $(cat "$T/sf.err")"
  grep -q "running in the background" "$T/sf.err" && fail "$what: said it runs in the background"
  echo "  $what: exit 1 in $took ms: $(grep -E "^shoal (mount|serve): " "$T/sf.err" | cut -c 1-150)"
}

PORT=$(free_port)
EP=http://127.0.0.1:$PORT
META="sqlite3://$T/meta.db"
G=(--meta "$META" --cache-group g --group-ip 127.0.0.1)

echo "== an endpoint that refuses"
start_fails "serve" "s3://nobucket at $EP/nobucket: connection refused" \
  "$SHOAL" serve s3://nobucket --endpoint "$EP" "${G[@]}" --cache-dir "$T/c1" --log-level warn
start_fails "serve -d" "127.0.0.1:$PORT.*refused" \
  "$SHOAL" serve s3://nobucket --endpoint "$EP" "${G[@]}" --cache-dir "$T/c1" \
  --log-file "$T/d.log" -d
grep -q "ERROR.*cannot use storage s3://nobucket" "$T/d.log" || fail "the -d log does not say why"
[ -z "$(group_alive "$META" g)" ] || fail "a member that failed its start is in the group"

echo "== an endpoint that never answers (a listener that accepts nothing)"
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
open(sys.argv[1], "w").write(str(s.getsockname()[1])); time.sleep(300)' "$T/mute.port" &
track mute $! helper
wait_for test -s "$T/mute.port" || fail "the mute listener did not start"
start_fails "serve (mute)" "127.0.0.1:$(cat "$T/mute.port").*timed out" \
  "$SHOAL" serve s3://nobucket --endpoint "http://127.0.0.1:$(cat "$T/mute.port")" "${G[@]}" \
  --cache-dir "$T/c2" --log-level error

if [ "$(id -u)" -eq 0 ] && [ -c /dev/fuse ] && command -v fusermount3 >/dev/null; then
  echo "== mount and mount -d of an endpoint that refuses: nothing stays mounted"
  fuse_isolate
  MNT=$T/mnt
  mkdir -p "$MNT"
  start_fails "mount" "s3://nobucket at $EP/nobucket: connection refused" \
    "$SHOAL" mount s3://nobucket "$MNT" --endpoint "$EP" --cache-dir "$T/c3" --log-level error
  start_fails "mount -d" "s3://nobucket at $EP/nobucket: connection refused" \
    "$SHOAL" mount s3://nobucket "$MNT" --endpoint "$EP" --cache-dir "$T/c3" \
    --log-file "$T/m.log" -d
  mountpoint -q "$MNT" && fail "a failed mount left $MNT mounted"
  ! grep -q " $MNT fuse.shoal " /proc/self/mounts || fail "a shoal mount is left at $MNT"
else
  skip_section "mount needs root, /dev/fuse and fusermount3"
fi

echo "== a bucket that does not exist (a real S3 server): the HTTP status and S3's code"
start_s3rver there
start_fails "serve (no such bucket)" "s3://nosuch at $S3_ENDPOINT/nosuch: HTTP 404 NoSuchBucket" \
  "$SHOAL" serve s3://nosuch --endpoint "$S3_ENDPOINT" "${G[@]}" --cache-dir "$T/c4" \
  --log-level error
start_member ok s3://there --endpoint "$S3_ENDPOINT" "${G[@]}"
wait_members "$META" g 1

echo "== malformed storage and endpoint: exit 2, one line"
expect_exit 2 "$SHOAL" serve 's3://' "${G[@]}"
grep -qx "shoal serve: storage s3://: no bucket (expected s3://BUCKET\[/PREFIX\])" "$T/last.err" ||
  fail "s3:// without a bucket: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" serve s3://bucket --endpoint notaurl "${G[@]}"
grep -qx "shoal serve: invalid --endpoint notaurl: expected http://HOST\[:PORT\] or https://HOST\[:PORT\]" \
  "$T/last.err" || fail "--endpoint notaurl: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" cat s3://bucket k --endpoint 'ftp://h'
echo "PASS test_startup"
