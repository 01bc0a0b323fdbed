#!/usr/bin/env bash
# Battery: the server-wide in-flight cap [R4; RELIABILITY: overload]. 3000 reads of 1 MiB are
# pipelined over sixty IORPC connections (50 each, under one connection's bound of 64) and none of
# their answers is read until the test has looked at the member: with the answers stuck in socket
# buffers, the member must hold exactly its cap of requests in process (mount_iorpc_inflight, and
# its high-water mark, exactly the cap) and the rest waiting in its queue (mount_iorpc_queued > 0).
# The cap follows RLIMIT_NOFILE (src/server/server.c limits_derive: 2048 at most); the member logs
# the one it derived ("N requests in process"), and the test holds it to that. A cap of 1, or of
# 4096, fails here. Then every answer is read, all 3000 arrive without an error, the
# gauges return to 0, and a client reads every object byte-exact through the member.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
FRAMES="python3 $(dirname "$0")/frames.py"
STORE=$T/store
make_object "$STORE/x.bin" $((40 * 1024 * 1024))
S="file://$STORE"
META="sqlite3://$T/meta.db"
start_member m "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 --metrics 127.0.0.1:0
wait_members "$META" g 1
M=$(metrics_addr m)
CAP=$(grep -o -E '[0-9]+ requests in process' "$T/m.log" | tail -n 1 | cut -d' ' -f1)
[ -n "$CAP" ] || fail "the member logged no in-process cap: $(grep -m 1 'open files' "$T/m.log")"
[ "$CAP" -ge 8 ] && [ "$CAP" -le 2048 ] || fail "in-process cap $CAP outside 8..2048"
echo "  in-process cap $CAP ($(grep -o -E 'open files: [0-9]+' "$T/m.log" | tail -n 1))"
RPC=$(member_port m iorpc)
readers warm "$S" --all --verify-dir "$STORE" --meta "$META" --cache-group g --threads 2
[ "$(result_field warm fallbacks)" -eq 0 ] || fail "the member did not serve the warm-up"

echo "== 3000 pipelined reads, answers held unread"
# The version of a file:// object, as store_file.c writes it (frames.file_version).
ver=$(python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import frames; print(frames.file_version(sys.argv[2]))" "$(dirname "$0")" "$STORE/x.bin")
start_bg flood -- $FRAMES flood-hold "127.0.0.1:$RPC" 3000 x.bin "$ver" $((40 * 1024 * 1024)) \
  4194304 1048576 "$T/go"
wait_log "$T/flood.out" "sent 3000, holding" 60
full() { [ "$(metric "$M" mount_iorpc_inflight)" = "$CAP" ] && [ "$(metric "$M" mount_iorpc_queued)" -gt 0 ]; }
wait_until 60 full ||
  fail "the member does not hold $CAP in process with the rest queued: inflight $(metric "$M" mount_iorpc_inflight), queued $(metric "$M" mount_iorpc_queued)"
inflight=$(metric "$M" mount_iorpc_inflight)
queued=$(metric "$M" mount_iorpc_queued)
echo "  held: $inflight in process, $queued waiting for a slot"
touch "$T/go"
wait_proc flood 120
[ "$EXIT_RC" -eq 0 ] || fail "not every pipelined read was answered: $(cat "$T/flood.out")"
tail -n 1 "$T/flood.out" | sed 's/^/  /'

echo "== high-water marks and rest"
imax=$(metric "$M" mount_iorpc_inflight_max)
qmax=$(metric "$M" mount_iorpc_queued_max)
echo "  most in process at once: $imax; most waiting: $qmax"
[ "$imax" = "$CAP" ] || fail "in-process high-water mark $imax, the cap is $CAP"
[ "$qmax" -ge "$queued" ] && [ "$qmax" -le $((3000 - CAP)) ] || fail "queued high-water mark $qmax"
rest() { [ "$(metric "$M" mount_iorpc_inflight)" = 0 ] && [ "$(metric "$M" mount_iorpc_queued)" = 0 ]; }
wait_until 20 rest || fail "the gauges did not return to 0"

echo "== every object byte-exact through the member afterwards"
readers after "$S" --all --verify-dir "$STORE" --meta "$META" --cache-group g --threads 4
for f in fallbacks store_gets errors wrong; do
  [ "$(result_field after "$f")" -eq 0 ] || fail "after the flood: $f $(result_field after "$f")"
done
echo "PASS test_battery_cap"
