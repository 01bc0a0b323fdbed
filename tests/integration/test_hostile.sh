#!/usr/bin/env bash
# Hostile and overloaded peers [S1, S2, RELIABILITY]: a table of malformed frames against the
# IORPC and TCP pool ports (each an error answer or a close within a second, stalled frames closed
# by the deadline); 1000 half-open handshakes are closed (the in-flight cap under 3000 pipelined
# requests is test_battery_cap.sh); a member with a secret serves nothing to peers
# without it; through all of it the member stays up and a healthy client reads byte-exact.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
FRAMES="python3 $(dirname "$0")/frames.py"

STORE=$T/store
make_object "$STORE/x.bin" $((40 * 1024 * 1024))
S="file://$STORE"
META="sqlite3://$T/meta.db"
MPORT=$(free_port)
start_member m "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 --metrics "127.0.0.1:$MPORT"
wait_members "$META" g 1
POOL=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/m.log" | head -n 1 | cut -d: -f2)
RPC=$(grep -o "iorpc 127.0.0.1:[0-9]*" "$T/m.log" | head -n 1 | cut -d: -f2)

healthy() {
  "$SHOAL" cat "$S" x.bin --meta "$META" --cache-group g --no-sharing --cache-size 0 --use-iorpc \
    --log-level error --summary >"$T/out" 2>"$T/sum" || fail "healthy client failed ($1)"
  cmp -s "$T/out" "$STORE/x.bin" || fail "healthy client read wrong bytes ($1)"
  [ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "healthy client was not served by the member ($1)"
  kill -0 "$PID_m" || fail "member died ($1)"
}
healthy start

echo "== malformed frames on the IORPC port"
$FRAMES hostile "127.0.0.1:$RPC" 2 >"$T/hostile.rpc" || { cat "$T/hostile.rpc"; fail "IORPC hostile table"; }
tail -n 1 "$T/hostile.rpc"
[ "$(grep -c '' "$T/hostile.rpc")" -ge 41 ] || fail "fewer than 40 cases ran"
healthy "after IORPC table"
echo "== malformed frames on the TCP pool port"
$FRAMES hostile "127.0.0.1:$POOL" 1 >"$T/hostile.pool" || { cat "$T/hostile.pool"; fail "pool hostile table"; }
tail -n 1 "$T/hostile.pool"
healthy "after pool table"
echo "== a stalled frame is closed by the deadline"
$FRAMES stall "127.0.0.1:$RPC" || fail "stalled frame not closed"

echo "== 1000 half-open connections are closed within the handshake deadline"
$FRAMES halfopen "127.0.0.1:$RPC" 1000 || fail "half-open connections not closed"
healthy "after half-open flood"

echo "== a member with a secret serves nothing to peers without it"
printf 'correct horse battery staple\n' >"$T/secret"
printf 'wrong horse battery staple!!\n' >"$T/wrong"
start_member sec "$S" --meta "sqlite3://$T/meta2.db" --cache-group gs --group-ip 127.0.0.1 --group-secret-file "$T/secret"
wait_members "sqlite3://$T/meta2.db" gs 1
for who in none wrong right; do
  case $who in
    none) flags=() ;;
    wrong) flags=(--group-secret-file "$T/wrong") ;;
    right) flags=(--group-secret-file "$T/secret") ;;
  esac
  "$SHOAL" cat "$S" x.bin --meta "sqlite3://$T/meta2.db" --cache-group gs --no-sharing --cache-size 0 \
    --log-level error --summary "${flags[@]}" >"$T/out" 2>"$T/sum.$who" || fail "client ($who) failed"
  cmp -s "$T/out" "$STORE/x.bin" || fail "client ($who) read wrong bytes"
done
for who in none wrong; do
  grep -q "remote [0-9]* (0 bytes)" "$T/sum.$who" || fail "member served a peer ($who secret): $(cat "$T/sum.$who")"
done
[ "$(summary_field "object store GETs" "$T/sum.right")" -eq 0 ] || fail "member did not serve the right secret: $(cat "$T/sum.right")"
PSEC=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/sec.log" | head -n 1 | cut -d: -f2)
expect_exit 1 "$SHOAL" ping "127.0.0.1:$PSEC"
grep -q "authentication" "$T/last.out" || fail "ping without the secret: $(cat "$T/last.out")"
expect_exit 0 "$SHOAL" ping "127.0.0.1:$PSEC" --group-secret-file "$T/secret"
echo "PASS test_hostile"
