#!/usr/bin/env bash
# Work does not outlive its RDMA connection (issue 11 finding 7, the RDMA side; libfabric's tcp
# provider on lo): a requester holding the secret (tests/tools/rdma_peer pipeclose) sends a
# connection's worth of READs with FILL for objects nobody cached, and closes the connection as
# soon as they are sent, connection after connection. The member's processing cap is small here
# (RLIMIT_NOFILE 512), so most of them wait for a slot: once the connection is shut down they
# never start, the store GETs stay well under the reads sent and stop growing when the peer is
# gone, and the member still serves an honest client exact bytes over RDMA and stops cleanly.
# Before, every request of a closed RDMA connection ran: a GET per read sent.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"
command -v prlimit >/dev/null || skip "no prlimit"
PEER=$(dirname "$SHOAL")/rdma_peer
[ -x "$PEER" ] || fail "no $PEER (built with shoal)"
HERE=$(dirname "$0")

STORE=$T/store
NOBJ=496 # 8 connections of 62 (a member connection's credits on the tcp provider)
BSZ=$((64 * 1024))
/usr/bin/python3 - "$STORE" "$NOBJ" "$HERE" "$T/bodies" "$BSZ" <<'PY'
import os, struct, sys
store, n, here, out, bs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
sys.path.insert(0, here)
import frames
for d in ("w", "x"):
    os.makedirs(os.path.join(store, d))
    for i in range(n):
        with open(os.path.join(store, d, "o%d" % i), "wb") as f:
            f.write(os.urandom(bs))
for d in ("w", "x"):
    with open(out + "." + d, "wb") as f:
        for i in range(n):
            body = frames.block_bodies(store, "%s/o%d" % (d, i), bs)[0]
            f.write(struct.pack("<I", len(body)) + body)
PY
make_object "$STORE/honest" $((3 * BSZ + 12345))
S="file://$STORE"
printf 'correct horse battery staple\n' >"$T/secret"
MP=$(free_port)
prlimit --nofile=512:512 -- "$SHOAL" serve "$S" --cache-dir "$T/a.cache" --log-file "$T/a.log" \
  --log-level debug --meta "sqlite3://$T/a.db" --cache-group ga --group-ip 127.0.0.1 \
  --rdma-network lo --group-secret-file "$T/secret" --block-size 64K \
  --metrics "127.0.0.1:$MP" 2>>"$T/a.err" &
track a $! member "$T/a.log" "$T/a.err"
wait_members "sqlite3://$T/a.db" ga 1
RA=$(grep -o "rdma listening on 127.0.0.1:[0-9]*" "$T/a.log" | head -n 1 | awk '{print $NF}')
cap=$(grep -o "[0-9]* requests in process" "$T/a.log" | head -n 1 | awk '{print $1}')
echo "  the member processes at most $cap requests at once"
[ -n "$cap" ] && [ "$cap" -lt 62 ] || fail "processing cap ${cap:-unknown}: not below a connection's credits"
gets() { metric "127.0.0.1:$MP" object_get_requests; }
# settle — waits until the member's store GETs stop growing; prints the count.
settle() {
  local prev=-1 g i
  for i in $(seq 1 100); do
    g=$(gets)
    [ "$g" -eq "$prev" ] && break
    prev=$g
    sleep 0.3
  done
  echo "$g"
}

echo "== pipeline-and-close over RDMA: $NOBJ reads with FILL, 62 per connection"
# A first round (set w) warms the member up; the second (set x, nothing cached) is counted.
"$PEER" pipeclose "$RA" "$T/secret" "$T/bodies.w" 62 "$T/w.stats" >"$T/w.out" 2>&1 ||
  fail "pipeclose w: $(cat "$T/w.out")"
g0=$(settle)
"$PEER" pipeclose "$RA" "$T/secret" "$T/bodies.x" 62 "$T/x.stats" >"$T/x.out" 2>&1 ||
  fail "pipeclose x: $(cat "$T/x.out")"
cat "$T/x.out"
sent=$(awk '$1 == "reads" {print $2}' "$T/x.stats")
[ "$sent" -eq "$NOBJ" ] || fail "the peer sent $sent reads, not $NOBJ"
g1=$(settle)
sleep 1
[ "$(gets)" -eq "$g1" ] || fail "store GETs still growing after the peer left"
n=$((g1 - g0))
echo "  store GETs for $sent reads of closed RDMA connections: $n"
[ "$n" -le $((sent / 2)) ] || fail "requests of closed RDMA connections still ran: $n store GETs"

echo "== an honest client is served over RDMA, the member stops cleanly"
"$SHOAL" cat "$S" honest --meta "sqlite3://$T/a.db" --cache-group ga --no-sharing --cache-size 0 \
  --block-size 64K --rdma-network lo --group-secret-file "$T/secret" --summary \
  --log-file "$T/cat.log" >"$T/out" 2>"$T/sum" || fail "honest read failed: $(tail -n 2 "$T/sum")"
cmp -s "$T/out" "$STORE/honest" || fail "honest read: wrong bytes"
[ "$(summary_field "rdma bytes" "$T/sum")" -gt 0 ] || fail "the honest read did not go over RDMA: $(cat "$T/sum")"
stop_proc a
echo "PASS test_rdma_lifetime"
