#!/usr/bin/env bash
# Work does not outlive its connection [S2; issue 11 finding 7]:
# - a peer that pipelines reads with FILL and closes at once, in a loop, leaves the member's store
#   GETs and memory flat: requests of a closed connection that have not started never start
#   (fills already running finish into the cache only);
# - a peer that never reads its answers holds a bounded number of them, and a flood of CORRUPT
#   notices meanwhile never blocks the disk workers: an honest client is served by the member
#   throughout, and no sound cached file is removed.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=5s SHOAL_GROUP_HEARTBEAT=200ms
FRAMES="/usr/bin/python3 $(dirname "$0")/frames.py"
STORE=$T/store
MiB=$((1024 * 1024))
NOBJ=2048
/usr/bin/python3 - "$STORE" "$NOBJ" <<'PY'
import os, sys
for d in ("a", "b"):
    os.makedirs(os.path.join(sys.argv[1], d))
    for i in range(int(sys.argv[2])):
        with open(os.path.join(sys.argv[1], d, "o%d" % i), "wb") as f:
            f.write(os.urandom(4096))
PY
make_object "$STORE/big" $((8 * 4 * MiB))
make_object "$STORE/other" $((3 * 4 * MiB + 12345))
S="file://$STORE"
META="sqlite3://$T/meta.db"
MPORT=$(free_port)
# A small ASan quarantine, so that RSS shows what the member holds rather than freed memory.
ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=16" \
  start_member m "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 --metrics "127.0.0.1:$MPORT"
wait_members "$META" g 1
RPC=$(member_port m iorpc)

m_metric() { # m_metric NAME — a counter of the member, as an integer
  local v
  v=$(metric "127.0.0.1:$MPORT" "$1")
  echo "${v%.*}"
}
# Resident memory other than the block buffer pools: those are madvised for huge pages and fill
# up to their fixed size as buffers are first touched, which says nothing about growth.
rss_kb() { awk '/^Rss:/ {r = $2} /^AnonHugePages:/ {h = $2} END {print r - h}' "/proc/$PID_m/smaps_rollup"; }

echo "== pipeline-and-close: $NOBJ reads with FILL, 8 connections at a time, 128 each, five times"
# A first round on set a warms the member up (threads, allocator caches); the second, on set b
# (nothing cached), counts store GETs; three more must not grow memory.
$FRAMES pipeclose "127.0.0.1:$RPC" "$STORE" a/o $NOBJ 8 128 >/dev/null || fail "pipeclose a"
sleep 1
g0=$(m_metric object_get_requests)
$FRAMES pipeclose "127.0.0.1:$RPC" "$STORE" b/o $NOBJ 8 128 || fail "pipeclose b"
# Whatever was running finishes; nothing queued may start afterwards.
prev=-1
for i in $(seq 1 50); do
  g=$(m_metric object_get_requests)
  [ "$g" -eq "$prev" ] && break
  prev=$g
  sleep 0.2
done
sleep 1
g1=$(m_metric object_get_requests)
[ "$g1" -eq "$g" ] || fail "store GETs still growing after the peers left ($g -> $g1)"
rss0=$(rss_kb)
for set in a b a; do
  $FRAMES pipeclose "127.0.0.1:$RPC" "$STORE" $set/o $NOBJ 8 128 >/dev/null || fail "pipeclose $set again"
done
sleep 1
rss1=$(rss_kb)
gets=$((g1 - g0))
echo "  store GETs for $NOBJ reads of closed connections: $gets; resident ${rss0} -> ${rss1} KiB"
# A loose bound only: how many of a closed connection's requests had started before the close
# was seen depends on the machine (458 to 992 measured, docs/reliability.md). The section below
# holds the queued ones back for sure and counts them.
[ "$gets" -le $((NOBJ / 2)) ] || fail "requests of closed connections still ran: $gets store GETs"
[ $((rss1 - rss0)) -lt $((16 * 1024)) ] || fail "memory grew by $(((rss1 - rss0) / 1024)) MiB"
kill -0 "$PID_m" || fail "member died"

echo "== queued requests of a closed connection never start: the cap held full, then let go"
# A member whose server-wide in-process cap is small (it follows RLIMIT_NOFILE): a flood whose
# answers are held unread fills the cap, so the FILL reads of two connections that pipeline and
# close wait in the member's queue, read and not started. When the flood's answers are taken,
# slots free up and the queue drains: a member that drops a closed connection's queued work makes
# no store GET for them; one that starts it makes one per request it read (at least 32 each).
QS=$T/qstore
/usr/bin/python3 - "$QS" <<'PY'
import os, sys
os.makedirs(os.path.join(sys.argv[1], "c"))
for i in range(256):
    with open(os.path.join(sys.argv[1], "c", "o%d" % i), "wb") as f:
        f.write(os.urandom(4096))
PY
make_object "$QS/x.bin" $((8 * 4 * MiB))
QPORT=$(free_port)
prlimit --nofile=256:256 "$SHOAL" serve "file://$QS" --cache-dir "$T/q.cache" --log-file "$T/q.log" \
  --log-level debug --meta "sqlite3://$T/q.db" --cache-group q --group-ip 127.0.0.1 \
  --metrics "127.0.0.1:$QPORT" 2>>"$T/q.err" &
track q $! member "$T/q.log" "$T/q.err"
wait_members "sqlite3://$T/q.db" q 1
QRPC=$(member_port q iorpc)
QM=127.0.0.1:$QPORT
QCAP=$(grep -o -E '[0-9]+ requests in process' "$T/q.log" | tail -n 1 | cut -d' ' -f1)
[ -n "$QCAP" ] && [ "$QCAP" -le 64 ] || fail "at nofile 256 the in-process cap is ${QCAP:-not logged}"
# x.bin cached first, so that the flood itself makes no store GET
timeout 120 "$SHOAL" cat "file://$QS" x.bin --meta "sqlite3://$T/q.db" --cache-group q --no-sharing \
  --cache-size 0 --use-iorpc --log-level error >/dev/null || fail "warming x.bin failed"
# The version of a file:// object, as store_file.c writes it (frames.file_version).
qv=$(/usr/bin/python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import frames; print(frames.file_version(sys.argv[2]))" "$(dirname "$0")" "$QS/x.bin")
start_bg qflood -- $FRAMES flood-hold "127.0.0.1:$QRPC" 100 x.bin "$qv" $((8 * 4 * MiB)) $((4 * MiB)) \
  $((1 * MiB)) "$T/qgo"
wait_log "$T/qflood.out" "sent 100, holding" 60
qfull() { [ "$(metric "$QM" mount_iorpc_inflight)" = "$QCAP" ] && [ "$(metric "$QM" mount_iorpc_queued)" -gt 0 ]; }
wait_until 60 qfull || fail "the flood did not fill the cap of $QCAP: inflight $(metric "$QM" mount_iorpc_inflight), queued $(metric "$QM" mount_iorpc_queued)"
q0=$(metric "$QM" mount_iorpc_queued)
c0=$(metric "$QM" remotecache_connections)
g0=$(metric "$QM" object_get_requests)
$FRAMES pipeclose "127.0.0.1:$QRPC" "$QS" c/o 256 2 128 >/dev/null || fail "pipeclose c"
# Both connections closed and seen closed, their requests read and waiting in the queue.
qclosed() { [ "$(metric "$QM" remotecache_connections)" -le "$c0" ]; }
wait_until 30 qclosed || fail "the member did not see the pipelining connections close"
q1=$(metric "$QM" mount_iorpc_queued)
[ "$q1" -ge $((q0 + 32)) ] || fail "the closed connections' requests are not queued ($q0 -> $q1)"
touch "$T/qgo"
wait_proc qflood 120
[ "$EXIT_RC" -eq 0 ] || fail "the held flood was not answered: $(cat "$T/qflood.out")"
qrest() { [ "$(metric "$QM" mount_iorpc_inflight)" = 0 ] && [ "$(metric "$QM" mount_iorpc_queued)" = 0 ]; }
wait_until 30 qrest || fail "the queue did not drain"
sleep 1
g1=$(metric "$QM" object_get_requests)
echo "  cap $QCAP; queued $q0 -> $q1 with the closed connections' reads; store GETs after the drain: $((g1 - g0))"
[ "$g1" -eq "$g0" ] || fail "$((g1 - g0)) queued requests of closed connections started (store GETs)"
stop_proc q

echo "== a peer that never reads, and a CORRUPT flood, while an honest client reads"
healthy() {
  timeout 120 "$SHOAL" cat "$S" "$1" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
    --use-iorpc --log-level error --summary >"$T/out" 2>"$T/sum" || fail "read of $1 failed: $(tail -n 2 "$T/sum")"
  cmp -s "$T/out" "$STORE/$1" || fail "read of $1 got wrong bytes"
  [ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "the member did not serve $1: $(cat "$T/sum")"
}
healthy big
healthy other
find "$T/m.cache" -path '*/blocks/*' -type f -printf '%i %P\n' | sort >"$T/files.before"
$FRAMES hog "127.0.0.1:$RPC" "$STORE" big 1024 "$T/stop.hog" >"$T/hog.out" 2>&1 &
track hog $! helper "$T/hog.out"
wait_log "$T/hog.out" hogging 30
$FRAMES corrupt "127.0.0.1:$RPC" "$STORE" big 8 15 >"$T/corrupt.out" 2>&1 &
track flood $! helper "$T/corrupt.out"
wait_log "$T/m.log" "corrupt notices being checked: dropping" 30 # the flood is on
t0=$(date +%s)
for k in 1 2 3; do
  healthy other
  healthy big
done
t1=$(date +%s)
echo "  six honest reads during the flood: $((t1 - t0)) s"
wait_proc flood 60
[ "$EXIT_RC" -eq 0 ] || fail "corrupt flood: $(cat "$T/corrupt.out")"
echo "  $(cat "$T/corrupt.out")"
touch "$T/stop.hog"
wait_proc hog 30
find "$T/m.cache" -path '*/blocks/*' -type f -printf '%i %P\n' | sort >"$T/files.after"
cmp -s "$T/files.before" "$T/files.after" || fail "sound cached files changed: $(diff "$T/files.before" "$T/files.after" | head -n 4)"
[ "$(m_metric blockcache_checksum_errors)" -eq 0 ] || fail "sound blocks were counted corrupt"
healthy big

stop_proc m # SIGTERM: exit 0, no report
echo "PASS test_conn_lifetime"
