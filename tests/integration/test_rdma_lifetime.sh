#!/usr/bin/env bash
# Work does not outlive its RDMA connection (issue 11 finding 7, the RDMA side; libfabric's tcp
# provider on lo). The order is made certain rather than raced:
# - the member's processing cap is small (RLIMIT_NOFILE 512) and an IORPC peer that never reads
#   its answers (frames.py hog) holds every processing slot with reads of a cached object;
# - a requester (tests/tools/rdma_peer pipeclose) sends READs with FILL for objects nobody cached
#   over RDMA and closes the connection as soon as they are sent: they all wait for a slot;
# - once the member logged that connection's shutdown, the hog goes and frees the slots.
# None of the RDMA requests may start: no store GET for them (before: one GET each), the member
# frees the connection, serves an honest client exact bytes over RDMA and stops cleanly.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"
command -v prlimit >/dev/null || skip "no prlimit"
PEER=$(dirname "$SHOAL")/rdma_peer
[ -x "$PEER" ] || fail "no $PEER (built with shoal)"
HERE=$(dirname "$0")
FRAMES="/usr/bin/python3 $HERE/frames.py"

STORE=$T/store
NOBJ=24 # fewer than a member connection's credits: one RDMA connection
/usr/bin/python3 - "$STORE" "$NOBJ" "$HERE" "$T/bodies" <<'PY'
import os, struct, sys
store, n, here, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
sys.path.insert(0, here)
import frames
os.makedirs(os.path.join(store, "x"))
with open(out, "wb") as f:
    for i in range(n):
        with open(os.path.join(store, "x", "o%d" % i), "wb") as o:
            o.write(os.urandom(4096))
        body = frames.block_bodies(store, "x/o%d" % i)[0]
        f.write(struct.pack("<I", len(body)) + body)
PY
make_object "$STORE/big" $((8 * 4 * 1024 * 1024))
make_object "$STORE/honest" $((5 * 1024 * 1024 + 12345))
S="file://$STORE"
META="sqlite3://$T/a.db"
MP=$(free_port)
# No secret flag: RDMA on loopback only, every connection authenticated with the host-local
# secret the member makes, which frames.py and rdma_peer (run as the member's user) read.
prlimit --nofile=512:512 -- "$SHOAL" serve "$S" --cache-dir "$T/a.cache" --log-file "$T/a.log" \
  --log-level debug --meta "$META" --cache-group ga --group-ip 127.0.0.1 --rdma-network lo \
  --metrics "127.0.0.1:$MP" 2>>"$T/a.err" &
track a $! member "$T/a.log" "$T/a.err"
wait_members "$META" ga 1
RA=$(grep -o "rdma listening on 127.0.0.1:[0-9]*" "$T/a.log" | head -n 1 | awk '{print $NF}')
RPC=$(member_port a iorpc)
# (from the log: the remotecache_inflight_limit gauge is set before RLIMIT_NOFILE lowers the cap)
cap=$(grep -o "[0-9]* requests in process" "$T/a.log" | head -n 1 | awk '{print $1}')
echo "  the member processes at most $cap requests at once"
[ -n "$cap" ] && [ "$cap" -lt 64 ] || fail "processing cap ${cap:-unknown}: one hog connection cannot hold it"
m() { metric "127.0.0.1:$MP" "$1"; }
honest() { # honest KEY — a client reads KEY exact over RDMA
  "$SHOAL" cat "$S" "$1" --meta "$META" --cache-group ga --no-sharing --cache-size 0 \
    --rdma-network lo --summary --log-file "$T/cat.log" >"$T/out" 2>"$T/sum" ||
    fail "read of $1 failed: $(tail -n 2 "$T/sum")"
  cmp -s "$T/out" "$STORE/$1" || fail "read of $1: wrong bytes"
  [ "$(summary_field "rdma bytes" "$T/sum")" -gt 0 ] || fail "$1 did not go over RDMA: $(cat "$T/sum")"
}
honest big # cached on the member now: the hog's reads are hits

echo "== every processing slot held by a peer that never reads"
$FRAMES hog "127.0.0.1:$RPC" "$STORE" big 200 "$T/stop.hog" >"$T/hog.out" 2>&1 &
track hog $! helper "$T/hog.out"
wait_log "$T/hog.out" hogging 30
held() { [ "$(m mount_iorpc_inflight)" -ge "$cap" ]; }
wait_until 60 held || fail "the hog holds $(m mount_iorpc_inflight) of $cap slots"
g0=$(m object_get_requests)

echo "== $NOBJ READs with FILL over RDMA, the connection closed once they are sent"
closes0=$(grep -c "rdma: server: closing 127.0.0.1" "$T/a.log" || true)
LSEC=$(grep -o "host-local secret [^ ]*" "$T/a.log" | head -n 1 | awk '{print $3}')
[ -n "$LSEC" ] || fail "the member did not name its host-local secret"
"$PEER" pipeclose "$RA" "$LSEC" "$T/bodies" "$NOBJ" "$T/x.stats" >"$T/x.out" 2>&1 ||
  fail "pipeclose: $(cat "$T/x.out")"
cat "$T/x.out"
[ "$(awk '$1 == "reads" {print $2}' "$T/x.stats")" -eq "$NOBJ" ] || fail "not every read sent"
wait_log "$T/a.log" "rdma: server: closing 127.0.0.1" 30 $((closes0 + 1))
queued=$(m mount_iorpc_queued)
echo "  requests waiting for a slot: $queued"
[ "$queued" -ge "$NOBJ" ] || fail "the RDMA reads are not all waiting ($queued queued)"

echo "== the hog goes: the slots free up, the closed connection's reads never start"
touch "$T/stop.hog"
wait_proc hog 30
drained() { [ "$(m mount_iorpc_queued)" -eq 0 ] && [ "$(m mount_iorpc_inflight)" -eq 0 ]; }
wait_until 60 drained || fail "requests still in process: $(m mount_iorpc_inflight) + $(m mount_iorpc_queued)"
freed() { [ "$(m rdma_registered_bytes)" -eq 0 ]; }
wait_until 30 freed || fail "the closed connection was not freed ($(m rdma_registered_bytes) bytes registered)"
n=$(($(m object_get_requests) - g0))
echo "  store GETs for $NOBJ reads of a closed RDMA connection: $n"
[ "$n" -eq 0 ] || fail "requests of a closed RDMA connection still ran: $n store GETs"
honest honest
stop_proc a
echo "PASS test_rdma_lifetime"
