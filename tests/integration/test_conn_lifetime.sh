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
# The bound comes from the member's limits (src/rpc/server.c): a connection has at most
# CONN_ACTIVE_MAX (64) requests read and not answered, taken in batches of READ_BUDGET (32) frames
# a loop round; the peer has closed before the member reads them, so the close is seen right after
# the second batch is read and that batch's requests, queued, must never start. A member that
# starts a closed connection's queued requests makes every one it read a store GET: CONNS x 64
# (992 of 1024 measured with that check removed, docs/reliability.md); one that drops them makes
# about one batch a connection (458 measured). Three quarters of CONNS x 64 is the line between.
CONNS=$((NOBJ / 128))
[ "$gets" -le $((CONNS * 64 * 3 / 4)) ] ||
  fail "requests of closed connections still ran: $gets store GETs (at most $((CONNS * 64 * 3 / 4)) of the $((CONNS * 64)) read may)"
[ $((rss1 - rss0)) -lt $((16 * 1024)) ] || fail "memory grew by $(((rss1 - rss0) / 1024)) MiB"
kill -0 "$PID_m" || fail "member died"

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
