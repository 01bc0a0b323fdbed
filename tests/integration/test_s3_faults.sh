#!/usr/bin/env bash
# s3:// under a failing store [O3, RELIABILITY "store errors / throttling"]: a fault-injecting
# front (s3fault.py) between shoal and a real S3 server (s3rver). 10% of GETs throttled: no
# application error, alone or through a group; every GET throttled: a bounded number of attempts
# and a failure within the deadline; a hung server: the deadline holds; a body cut short: retried,
# never cached; 403 and a bad signature: not retried, one clear line; a refused connection:
# retried within the deadline.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
BUCKET=faults
OBJS=$T/objs
make_object "$OBJS/one.bin" 100000
for i in $(seq 0 9); do make_object "$OBJS/multi/m$i" $((1100000 + i)); done # 5 blocks each
for i in $(seq 0 39); do make_object "$OBJS/small/s$i" $((1000 + i * 3001)); done
start_s3rver "$BUCKET"
s3_put_dir "$S3_ENDPOINT" "$BUCKET" "$OBJS"
start_s3fault "$S3_PORT"
URL=s3://$BUCKET
C="--endpoint $S3F_ENDPOINT --block-size 256K --log-level warn"
ONE=$(s3_path "$BUCKET" one.bin)

ms() { date +%s%3N; }

echo "== 10% of GETs answered 503 SlowDown: 0 application errors"
s3_mode 503pct:10
for k in multi/m0 multi/m1 multi/m2 multi/m3 multi/m4 $(cd "$OBJS" && ls small/* | head -n 25); do
  "$SHOAL" cat "$URL" "$k" $C --cache-size 0 >"$T/out" 2>"$T/err" || fail "$k failed: $(cat "$T/err")"
  cmp -s "$T/out" "$OBJS/$k" || fail "$k differs under 10% 503"
done
faults=$(grep -c "503 fault" "$S3F_LOG")
gets=$(grep -c "^GET " "$S3F_LOG")
echo "  $gets GETs, $faults answered 503, every read byte-exact"
[ "$faults" -ge 3 ] || fail "only $faults faults injected"

echo "== 10% 503 behind a 3-member group: 0 application errors"
META="sqlite3://$T/meta.db"
for m in a b c; do
  start_member "$m" "$URL" --endpoint "$S3F_ENDPOINT" --meta "$META" --cache-group g \
    --group-ip 127.0.0.1 --block-size 256K
done
wait_members "$META" g 3
s3_mode 503pct:10
for k in multi/m5 multi/m6 multi/m7 $(cd "$OBJS" && ls small/* | tail -n 15); do
  "$SHOAL" cat "$URL" "$k" $C --meta "$META" --cache-group g --no-sharing --cache-size 0 \
    >"$T/out" 2>"$T/err" || fail "$k failed through the group: $(cat "$T/err")"
  cmp -s "$T/out" "$OBJS/$k" || fail "$k differs through the group under 10% 503"
done
echo "  $(grep -c "503 fault" "$S3F_LOG") of $(grep -c "^GET " "$S3F_LOG") GETs answered 503"
for m in a b c; do stop_proc "$m"; done

echo "== every GET answered 503: the default 5 attempts, then exit 1"
s3_mode 503all
t0=$(ms)
expect_exit 1 "$SHOAL" cat "$URL" one.bin $C --cache-size 0
dt=$(($(ms) - t0))
n=$(s3_count GET "$ONE")
echo "  $n attempts in $dt ms: $(grep "shoal cat" "$T/last.err")"
[ "$n" -eq 5 ] || fail "expected 5 attempts, the proxy saw $n"
grep -q "one.bin: read at 0 failed: Input/output error" "$T/last.err" ||
  fail "no EIO message: $(cat "$T/last.err")"
grep -q "failed after 5 attempts.*Resource temporarily unavailable" "$T/last.err" ||
  fail "the cause is not logged: $(cat "$T/last.err")"

echo "== every GET answered 503, SHOAL_STORE_ATTEMPTS=3: exactly 3 attempts"
s3_mode 503all
SHOAL_STORE_ATTEMPTS=3 expect_exit 1 "$SHOAL" cat "$URL" one.bin $C --cache-size 0
[ "$(s3_count GET "$ONE")" -eq 3 ] || fail "expected 3 attempts, saw $(s3_count GET "$ONE")"

echo "== every GET answered 503, 1000 attempts allowed, SHOAL_STORE_DEADLINE=2s: the deadline ends it"
s3_mode 503all
t0=$(ms)
SHOAL_STORE_ATTEMPTS=1000 SHOAL_STORE_DEADLINE=2s expect_exit 1 "$SHOAL" cat "$URL" one.bin $C \
  --cache-size 0
dt=$(($(ms) - t0))
n=$(s3_count GET "$ONE")
echo "  $n attempts in $dt ms"
[ "$n" -ge 3 ] && [ "$n" -le 12 ] || fail "expected a few attempts within 2 s, saw $n"
[ "$dt" -le 4500 ] || fail "took $dt ms with a 2 s deadline"

echo "== a server that never answers, SHOAL_STORE_DEADLINE=2s: the deadline holds"
s3_mode hang
t0=$(ms)
SHOAL_STORE_DEADLINE=2s expect_exit 1 "$SHOAL" cat "$URL" one.bin $C --cache-size 0
dt=$(($(ms) - t0))
echo "  gave up after $dt ms: $(grep "shoal cat" "$T/last.err")"
[ "$dt" -le 4500 ] || fail "a hung server held the reader $dt ms past a 2 s deadline"
grep -qi "timed out" "$T/last.err" || fail "no timeout message: $(cat "$T/last.err")"

for mode in shortonce shortclonce; do
  echo "== $mode: the first answer for each block cut short, retried, never cached"
  s3_mode "$mode"
  k=multi/m8
  [ "$mode" = shortclonce ] && k=multi/m9
  rm -rf "$T/short.cache"
  "$SHOAL" cat "$URL" "$k" $C --cache-dir "$T/short.cache" --summary >"$T/out" 2>"$T/sum" ||
    fail "$k failed under $mode: $(cat "$T/sum")"
  cmp -s "$T/out" "$OBJS/$k" || fail "$k differs under $mode"
  cut=$(grep -c "short[a-z]* fault$" "$S3F_LOG")
  gets=$(summary_field "object store GETs" "$T/sum")
  echo "  $cut of $gets GETs cut short; all retried"
  [ "$cut" -eq 5 ] || fail "expected 5 short answers, saw $cut"
  [ "$gets" -eq 10 ] || fail "expected 10 GETs (5 blocks, each twice), saw $gets"
  s3_mode pass
  "$SHOAL" cat "$URL" "$k" $C --cache-dir "$T/short.cache" --summary >"$T/out" 2>"$T/sum"
  cmp -s "$T/out" "$OBJS/$k" || fail "$k differs from the cache after $mode"
  [ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "blocks were not cached"
  [ "$(summary_field corrupt "$T/sum")" -eq 0 ] || fail "a short body was cached: $(cat "$T/sum")"
done

echo "== every answer cut short: exit 1, nothing cached; then a clean read"
s3_mode short
rm -rf "$T/short.cache"
SHOAL_STORE_ATTEMPTS=3 expect_exit 1 "$SHOAL" cat "$URL" multi/m4 $C --cache-dir "$T/short.cache"
blocks=$(find "$T/short.cache" -type f -path '*/blocks/*' | wc -l)
[ "$blocks" -eq 0 ] || fail "$blocks blocks cached from short answers"
s3_mode pass
"$SHOAL" cat "$URL" multi/m4 $C --cache-dir "$T/short.cache" >"$T/out"
cmp -s "$T/out" "$OBJS/multi/m4" || fail "clean read after short answers differs"

echo "== 403 AccessDenied: not retried, one clear line"
s3_mode 403
expect_exit 1 "$SHOAL" cat "$URL" one.bin $C --cache-size 0
n=$(s3_count GET "$ONE")
[ "$n" -eq 1 ] || fail "403 was retried: $n GETs"
grep -q "GET one.bin: 403 AccessDenied.*check credentials" "$T/last.err" ||
  fail "no clear 403 line: $(cat "$T/last.err")"
echo "  $(grep -o 's3: GET one.bin: 403.*' "$T/last.err" | cut -c1-100)..."

echo "== a wrong secret: the signature is refused once, not retried"
s3_mode pass
AWS_SECRET_ACCESS_KEY=wrong expect_exit 1 "$SHOAL" cat "$URL" one.bin $C --cache-size 0
[ "$(s3_count HEAD "$ONE")" -eq 1 ] || fail "a refused signature was retried"
# (a HEAD answer has no body to name SignatureDoesNotMatch)
grep -q "HEAD one.bin: 403.*check credentials" "$T/last.err" ||
  fail "no clear 403 line: $(cat "$T/last.err")"

echo "== a refused connection: retried until the deadline, then exit 1"
dead=$(free_port)
t0=$(ms)
SHOAL_STORE_DEADLINE=2s expect_exit 1 "$SHOAL" cat "$URL" one.bin --endpoint "http://127.0.0.1:$dead" \
  --cache-size 0 --log-level warn
dt=$(($(ms) - t0))
[ "$dt" -le 4500 ] || fail "a refused connection took $dt ms with a 2 s deadline"
grep -q "one.bin" "$T/last.err" || fail "no failure message: $(cat "$T/last.err")"
echo "PASS test_s3_faults"
