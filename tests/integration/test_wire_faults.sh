#!/usr/bin/env bash
# Damaged traffic between a client and a member [RELIABILITY: bit flips on the wire, partial
# frames, cuts]: a fault proxy registered as a group member forwards to a real member that holds
# every block. Flipped bits are caught by the chunk CRCs and the reads are retried or served by the
# store; sliced frames are reassembled; connections cut inside a header, at the payload start,
# mid-payload or one byte short end in a read from the next member in the block's order (the real
# member) or a fallback. Every read is byte-exact and none fails. All of
# it twice: through the TCP pool, and over IORPC (the proxy in front of the member's IORPC port,
# where the receiver checks chunk CRCs piece by piece as the payload lands).
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms SHOAL_AVOID_DURATION=200ms
# The fault proxy relays each handshake to another address than the client dialed, which an
# authenticated handshake refuses by design: no host-local secret here (every local process is
# trusted, as before it existed; test_local_trust covers the secret).
export SHOAL_LOCAL_SECRET_FILE=off
HERE=$(dirname "$0")
STORE=$T/store
for i in $(seq 0 7); do make_object "$STORE/o$i" $((9 * 1024 * 1024 + i * 1001)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"

start_member r "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1
wait_members "$META" g 1
"$SHOAL" warmup --storage "$S" --meta "$META" --cache-group g --log-level error 2>/dev/null ||
  fail "warmup failed"
RPORT=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/r.log" | head -n 1 | cut -d: -f2)
IPORT=$(grep -o "iorpc 127.0.0.1:[0-9]*" "$T/r.log" | head -n 1 | cut -d: -f2)
[ -n "$RPORT" ] && [ -n "$IPORT" ] || fail "the member's ports are not in its log"

read_all() { # read_all LABEL [FLAGS] — every object, byte-exact, summaries appended to $T/sum.LABEL
  local i
  for i in $(seq 0 7); do
    "$SHOAL" cat "$S" "o$i" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
      --log-level error --summary ${2:-} >"$T/out" 2>>"$T/sum.$1" || fail "$1: read o$i failed"
    cmp -s "$T/out" "$STORE/o$i" || fail "$1: o$i has wrong bytes"
  done
}
total() { summary_field "$2" "$T/sum.$1"; } # total LABEL FIELD — over every read of LABEL
remote_bytes() { # remote_bytes LABEL — bytes read from members over every read of LABEL
  [ "$(grep -c 'remote [0-9]* ([0-9]* bytes)' "$T/sum.$1")" -eq "$(summary_lines "$T/sum.$1")" ] ||
    fail "remote bytes missing from a summary of $1"
  grep -o 'remote [0-9]* ([0-9]* bytes)' "$T/sum.$1" | grep -o '([0-9]*' | tr -d '(' | awk '{s += $1} END {print s + 0}'
}

for tr in pool iorpc; do
  for mode in slice flip cut; do
    L=$tr-$mode
    echo "== $L"
    PP=$(free_port)
    if [ $tr = pool ]; then
      python3 "$HERE/faultproxy.py" "$PP" "127.0.0.1:$RPORT" "$mode" >"$T/proxy.$L" 2>"$T/proxy.$L.err" &
      track proxy $! helper "$T/proxy.$L.err"
      python3 "$HERE/fakemember.py" "$T/meta.db" g "127.0.0.1:$PP" "$S" 4194304 >"$T/fake.$L" 2>"$T/fake.$L.err" &
    else
      python3 "$HERE/faultproxy.py" "$PP" "127.0.0.1:$IPORT" "$mode" >"$T/proxy.$L" 2>"$T/proxy.$L.err" &
      track proxy $! helper "$T/proxy.$L.err"
      python3 "$HERE/fakemember.py" "$T/meta.db" g "127.0.0.1:$RPORT" "$S" 4194304 "" "127.0.0.1:$PP" \
        >"$T/fake.$L" 2>"$T/fake.$L.err" &
    fi
    track fake $! helper "$T/fake.$L.err"
    wait_listen "$PP"
    wait_members "$META" g 2
    flags=""
    [ $tr = iorpc ] && flags=--use-iorpc
    for round in 1 2 3; do read_all "$L" "$flags"; done
    stop_proc fake
    stop_proc proxy
    echo "  proxy: $(cat "$T/proxy.$L"); client: remote $(remote_bytes "$L") bytes," \
      "iorpc $(total "$L" "iorpc bytes") bytes, fallbacks $(total "$L" fallbacks)," \
      "checksum errors $(total "$L" corrupt), store GETs $(total "$L" "object store GETs")"
    # The fake member's record must leave the view before the next mode.
    sqlite3 "$T/meta.db" "DELETE FROM shoal_members WHERE record LIKE '%|proxy|%'" 2>/dev/null ||
      python3 -c "import sqlite3; c=sqlite3.connect('$T/meta.db'); c.execute(\"DELETE FROM shoal_members WHERE record LIKE '%|proxy|%'\"); c.commit()"
    wait_members "$META" g 1
  done
  [ "$(remote_bytes $tr-slice)" -gt 0 ] || fail "$tr slice: nothing came through the proxy"
  [ "$(total $tr-slice fallbacks)" -eq 0 ] || fail "$tr slice: sliced frames caused fallbacks"
  grep -q "flips [1-9]" "$T/proxy.$tr-flip" || fail "$tr flip: the proxy flipped nothing"
  [ "$(total $tr-flip corrupt)" -ge 1 ] || fail "$tr flip: no checksum error was counted"
  grep -q "cuts [1-9]" "$T/proxy.$tr-cut" || fail "$tr cut: the proxy cut nothing"
  # A cut read is read again from the next member in the block's order (here the real member
  # behind the proxy) or from the store: every byte was checked above, and none failed.
done
# The IORPC passes really went over IORPC (through the proxy), not the pool.
for mode in slice flip; do
  [ "$(total iorpc-$mode "iorpc bytes")" -gt 0 ] || fail "iorpc $mode: no byte came over IORPC"
  [ "$(total iorpc-$mode "tcp bytes")" -eq 0 ] || fail "iorpc $mode: the pool carried reads"
done
kill -0 "$PID_r" || fail "the member died"
echo "PASS test_wire_faults"
