#!/usr/bin/env bash
# Pre-authentication limits [S2; issue 11 finding 5, issue 23]: a member limited to 256 open files
# derives its connection limits from that limit (with a reserve for cache files, the store and
# the registry), so 400 silent connections held open — from the client's own address 127.0.0.1,
# then from fifty loopback addresses (every one of 127.0.0.0/8 is one source, since any local
# process can use any of them) — never take the fds its own fills need nor lock out a client that
# holds the group secret: at its source's limit the source's oldest silent connection gives way
# to the newcomer instead of the newcomer being refused, and that client reads 20 objects
# byte-exact from the member with 0 fallbacks and 0 store GETs, over the TCP pool and IORPC. Then
# SIGTERM ends it with exit 0.
. "$(dirname "$0")/lib.sh"
command -v prlimit >/dev/null || skip "no prlimit"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
FRAMES="/usr/bin/python3 $(dirname "$0")/frames.py"
STORE=$T/store
NOBJ=20
for i in $(seq 0 $((NOBJ - 1))); do make_object "$STORE/o$i" $((1024 * 1024 + i * 70001)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
head -c 32 /dev/urandom >"$T/secret"
prlimit --nofile=256 "$SHOAL" serve "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 \
  --group-secret-file "$T/secret" --cache-dir "$T/m.cache" --log-file "$T/m.log" 2>>"$T/m.err" &
track m $! member "$T/m.log" "$T/m.err"
wait_members "$META" g 1
grep -q "open files: 256; up to" "$T/m.log" || fail "no limits derived from 256 open files: $(grep -m1 'open files' "$T/m.log")"
grep -m 1 "open files: 256" "$T/m.log" | sed 's/^.*server: /  /'
POOL=$(member_port m)
RPC=$(member_port m iorpc)

# flood NAME FIRST_SRC NSRC PER_SRC — silent connections held open (reopened when closed)
flood() {
  rm -f "$T/stop.$1"
  $FRAMES hold "$POOL,$RPC" "$2" "$3" "$4" "$T/stop.$1" >"$T/flood.$1" 2>&1 &
  track "flood_$1" $! helper "$T/flood.$1"
  # Two rounds of (re)opening: the limits are in force.
  wait_log "$T/flood.$1" "^holding" 30 2
}
stop_flood() {
  touch "$T/stop.$1"
  wait_proc "flood_$1" 30
  [ "$EXIT_RC" -eq 0 ] || fail "flood $1 failed: $(tail -n 3 "$T/flood.$1")"
  echo "  flood $1: $(tail -n 1 "$T/flood.$1")"
}

# read_all FLAGS... — every object, from the member only, byte-exact, no fallback
read_all() {
  local i
  for i in $(seq 0 $((NOBJ - 1))); do
    timeout 120 "$SHOAL" cat "$S" "o$i" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
      --group-secret-file "$T/secret" --log-level error --summary "$@" >"$T/out" 2>"$T/sum" ||
      fail "read of o$i $* failed: $(tail -n 2 "$T/sum")"
    cmp -s "$T/out" "$STORE/o$i" || fail "read of o$i $* got wrong bytes"
    [ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] ||
      fail "the member did not serve o$i $*: $(cat "$T/sum")"
    [ "$(summary_field fallbacks "$T/sum")" -eq 0 ] || fail "o$i $*: a fallback: $(cat "$T/sum")"
  done
}

echo "== 400 silent connections from the client's own address"
flood own 127.0.0.1 1 400
read_all
read_all --use-iorpc
stop_flood own
grep -q "closing unauthenticated 127.0.0.1:[0-9]* ([0-9]* from its source) to admit 127.0.0.1:" "$T/m.log" ||
  fail "the source's limit never made room: $(grep -c refusing "$T/m.log") refusals"
! grep -q "not authenticated yet" "$T/m.log" || fail "a newcomer was refused for its source's limit"

echo "== 400 silent connections from fifty loopback addresses"
flood fifty 127.0.1.1 50 8
read_all --use-iorpc
stop_flood fifty
grep -q "closing unauthenticated 127.0.1.[0-9]*:[0-9]* ([0-9]* from its source) to admit" "$T/m.log" ||
  fail "the fifty addresses were not one source"

# The member's own work never ran short of fds.
if grep -E "Too many open files|pausing accepts" "$T/m.log" | head -n 3 | grep .; then
  fail "the member ran out of fds"
fi
stop_proc m # SIGTERM: exit 0, no report
echo "PASS test_fdlimit"
