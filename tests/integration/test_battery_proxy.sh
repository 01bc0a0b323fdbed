#!/usr/bin/env bash
# Battery: 1 of every 30 connections cut, reset or corrupted, over 100 000 reads [RELIABILITY:
# connection reset, member crash mid-transfer, bit flips on the wire]. A member holds every block
# but owns none (weight 0); the owner of every block is a fault proxy registered as a member
# (tests/integration/fakemember.py, faultproxy.py mode mix) in front of it. The proxy ends each
# connection cleanly after 1..40 answers, so the pooled client keeps opening new ones, and
# damages one connection in 30 at a random byte of a random answer: closed there, reset there, or
# one bit flipped. 16 reader threads (tests/tools/readers.c, 64 KiB blocks) make 100 000 remote
# reads (at least 85% of them through the proxy): every one byte-exact, 0 application errors;
# damaged answers end in a retry or a fallback, never in a wrong byte.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms SHOAL_AVOID_DURATION=1ms SHOAL_REMOTE_TIMEOUT=10s
# The fault proxy relays each handshake to another address than the client dialed, which an
# authenticated handshake refuses by design: no host-local secret here (every local process is
# trusted, as before it existed; test_local_trust covers the secret).
export SHOAL_LOCAL_SECRET_FILE=off
HERE=$(dirname "$0")
# The readers stop at READS reads or after SECS seconds, whichever comes first (a busy machine
# under ASan may not make 100 000 in the time ctest allows); every bound below is relative to the
# reads actually made, of which there must be at least MIN_READS (each kind of fault then comes
# at least 3 times).
READS=${SHOAL_BATTERY_READS:-100000}
SECS=${SHOAL_BATTERY_SECONDS:-420}
MIN_READS=${SHOAL_BATTERY_MIN_READS:-20000}
STORE=$T/store
for i in $(seq 0 23); do make_object "$STORE/o$i" $((1000000 + i * 4099)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
G=(--meta "$META" --cache-group g --block-size 64K)

echo "== member r fills its cache with every block, then serves them with weight 0"
start_member r "$S" "${G[@]}" --group-ip 127.0.0.1
wait_members "$META" g 1
"$SHOAL" warmup --storage "$S" "${G[@]}" --log-level error 2>"$T/warm.err" ||
  fail "warmup: $(cat "$T/warm.err")"
nblocks=$(find "$T/r.cache" -type f -path '*/blocks/*' | wc -l)
stop_proc r
start_member r "$S" "${G[@]}" --group-ip 127.0.0.1 --group-weight 0
RPORT=$(member_port r)
PP=$(free_port)
start_bg proxy -- python3 "$HERE/faultproxy.py" "$PP" "127.0.0.1:$RPORT" mix
wait_listen "$PP"
start_bg fake -- python3 "$HERE/fakemember.py" "$T/meta.db" g "127.0.0.1:$PP" "$S" 65536
wait_members "$META" g 2
echo "  $nblocks blocks; every one owned by the proxy at 127.0.0.1:$PP"

echo "== 16 readers, $READS reads through the proxy"
readers mix "$S" --verify-dir "$STORE" "${G[@]}" --threads 16 --reads "$READS" \
  --buffer-blocks 16 --seconds "$SECS" --log-file "$T/mix.log" --log-level warn
echo "  readers: $(grep '^result' "$T/mix.out" | cut -d' ' -f2-)"
stop_proc fake
stop_proc proxy
echo "  proxy: $(cat "$T/proxy.out")"
pstat() { awk -v k="$1" '{for (i = 1; i < NF; i += 2) if ($i == k) print $(i + 1)}' "$T/proxy.out"; }
conns=$(pstat conns)
cuts=$(pstat cuts)
resets=$(pstat resets)
flips=$(pstat flips)
damaged=$((cuts + resets + flips))
remote=$(result_field mix remote)
made=$(result_field mix reads)
hits=$(result_field mix buffer_hits)
[ "$(result_field mix errors)" -eq 0 ] && [ "$(result_field mix wrong)" -eq 0 ] ||
  fail "application-visible errors or wrong bytes"
[ "$made" -ge "$MIN_READS" ] || fail "only $made reads in $SECS s (at least $MIN_READS)"
# The rest: reads that joined another thread's fill of the same block, and reads in the moment a
# failed member is avoided. (Buffer hits never ask anyone; a slow machine makes more of them.)
[ $((remote + hits)) -ge $((made * 85 / 100)) ] ||
  fail "only $remote of $made reads went to the proxy ($hits buffer hits)"
# 1 in 30 connections damaged, each kind by turns: enough of each to mean something. A chosen
# connection is spared when the client closed it before the answer to damage, or still held it
# when the readers stopped (16 threads: at most one each): no more than 17 of them.
spared=$(pstat spared)
chosen=$((conns / 30))
[ "$conns" -ge $((made / 60)) ] && [ "$damaged" -le "$chosen" ] && [ $((chosen - damaged)) -le 17 ] ||
  fail "the proxy damaged $damaged of $conns connections ($chosen chosen; $spared spared before the end)"
[ "$cuts" -ge $((made / 6000)) ] && [ "$resets" -ge $((made / 6000)) ] && [ "$flips" -ge $((made / 6000)) ] ||
  fail "too few of each fault: cut $cuts, reset $resets, corrupted $flips"
fb=$(result_field mix fallbacks)
echo "  $damaged damaged connections (cut $cuts, reset $resets, corrupted $flips) of $conns;" \
  "$fb reads fell back to the store, 0 errors, 0 wrong bytes"
# Fallbacks are fine, but the transport must still carry nearly everything.
[ $((fb * 50)) -le "$made" ] || fail "$fb fallbacks in $made reads: the transport hardly works"

echo "== a member that closes every connection after one answer: no fallback"
# Every connection the client pools is dead when next used: a read that meets one retries on a
# fresh connection, never on another pooled one (dead for the same reason), so no read falls
# back. (A generous deadline: a fallback here must mean a retry went wrong, not a slow machine.)
start_bg proxy1 -- python3 "$HERE/faultproxy.py" "$PP" "127.0.0.1:$RPORT" once
wait_listen "$PP"
start_bg fake2 -- python3 "$HERE/fakemember.py" "$T/meta.db" g "127.0.0.1:$PP" "$S" 65536
wait_members "$META" g 2
SHOAL_REMOTE_TIMEOUT=30s readers once "$S" --verify-dir "$STORE" "${G[@]}" --threads 8 \
  --reads 3000 --buffer-blocks 16 --seconds 300 --log-file "$T/once.log" --log-level warn
echo "  readers: $(grep '^result' "$T/once.out" | cut -d' ' -f2-)"
stop_proc fake2
stop_proc proxy1
echo "  proxy: $(cat "$T/proxy1.out")"
[ "$(result_field once remote)" -ge 2000 ] || fail "only $(result_field once remote) reads went to the proxy"
[ "$(result_field once fallbacks)" -eq 0 ] ||
  fail "$(result_field once fallbacks) reads fell back: a retry took another dead pooled connection"
echo "PASS test_battery_proxy"
