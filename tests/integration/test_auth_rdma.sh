#!/usr/bin/env bash
# The group secret over IORPC on RDMA (libfabric's tcp provider) [S1, S3]: a member without a
# secret refuses to listen for RDMA beyond loopback (a veth in a network namespace; exit 2, one
# line) and starts with one; a client with a secret refuses an RDMA member without one, and a
# client with another secret is refused; a handshake relayed byte for byte to the real member's
# RDMA listener through another address (a TCP relay registered as a fake member) is refused by
# the member — every read byte-exact, from the store where a member was refused. Root is needed
# for the namespace part only; skipped (77) without the tcp provider.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"
HERE=$(dirname "$0")

STORE=$T/store
N=12
for i in $(seq 0 $((N - 1))); do make_object "$STORE/d/o$i" $((200000 + i * 4099)); done
S="file://$STORE"
printf 'correct horse battery staple\n' >"$T/secret"
printf 'wrong horse battery staple!!\n' >"$T/wrong"

sum_field() { grep -o "$1 [0-9]*" "$2" | awk '{s += $NF} END {print s + 0}'; }
read_all() { # read_all META GROUP SUMFILE FLAGS... — every object byte-exact over --rdma-network lo
  local meta=$1 group=$2 sum=$3 i
  shift 3
  : >"$sum"
  for i in $(seq 0 $((N - 1))); do
    "$SHOAL" cat "$S" "d/o$i" --meta "$meta" --cache-group "$group" --no-sharing --cache-size 0 \
      --rdma-network lo --log-file "$sum.log" --log-level info --summary "$@" >"$T/out" 2>>"$sum" ||
      fail "cat d/o$i failed ($*)"
    cmp -s "$T/out" "$STORE/d/o$i" || fail "d/o$i: wrong bytes ($*)"
  done
}
stop_member() { # stop_member NAME — SIGTERM, exit 0, no sanitizer report
  local pid
  pid=$(eval "echo \$PID_$1")
  kill -TERM "$pid"
  wait_exit "$pid"
  [ "$EXIT_RC" -eq 0 ] || fail "member $1 exited with $EXIT_RC"
  ! grep -q -E 'Sanitizer|runtime error' "$T/$1.err" || fail "member $1: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/$1.err")"
}

echo "== no secret: RDMA beyond loopback is refused at start"
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  skip "needs root and ip(8) for a network namespace"
fi
NS=shoal-auth-$$
ip netns add "$NS" 2>/dev/null || skip "cannot create a network namespace"
# (through the harness, after every process is stopped: a trap of its own that ran `(exit 1)`
# under set -e ended at that line on a failure, and the members were never stopped)
AT_EXIT+=('ip netns del "$NS" 2>/dev/null')
ip link add "va-$$" netns "$NS" type veth peer name "vb-$$" netns "$NS" 2>/dev/null || skip "cannot create a veth pair"
ip -n "$NS" addr add 10.203.0.1/24 dev "va-$$"
ip -n "$NS" link set "va-$$" up
ip -n "$NS" link set "vb-$$" up
ip -n "$NS" link set lo up
# Commands run in a namespace through nsenter --net, not `ip netns exec`: that one makes a new
# mount namespace, a copy of every mount of the machine, FUSE mounts of tests running alongside
# included; a copy keeps its FUSE connection alive after the test that made it unmounts it, so
# that mount's process outlives `shoal umount` for as long as the command here runs.
IN_NS=(nsenter --net="/var/run/netns/$NS" --)
expect_exit 2 "${IN_NS[@]}" "$SHOAL" serve "$S" --cache-dir "$T/x.cache" \
  --meta "sqlite3://$T/x.db" --cache-group gx --group-ip 127.0.0.1 --rdma-network "va-$$"
grep -q "refusing to listen for RDMA on va-$$ (10.203.0.1) without a group secret" "$T/last.err" ||
  fail "RDMA beyond loopback without a secret: $(cat "$T/last.err")"
[ "$(grep -c '' "$T/last.err")" -eq 1 ] || fail "more than one line: $(cat "$T/last.err")"
"${IN_NS[@]}" "$SHOAL" serve "$S" --cache-dir "$T/v.cache" --meta "sqlite3://$T/x.db" \
  --cache-group gx --group-ip 127.0.0.1 --rdma-network "va-$$" --group-secret-file "$T/secret" \
  --log-file "$T/v.log" 2>"$T/v.err" &
track v $! member "$T/v.log" "$T/v.err"
wait_for grep -q "rdma listening on 10.203.0.1:" "$T/v.log" || fail "member with a secret did not listen: $(tail -n 3 "$T/v.log")"
stop_member v

echo "== a client with a secret refuses an RDMA member without one"
# (--local-secret-file off: without it the member would use the host-local secret, and the client
# would see another secret rather than none)
start_member a "$S" --meta "sqlite3://$T/a.db" --cache-group ga --group-ip 127.0.0.1 --rdma-network lo \
  --local-secret-file off 2>"$T/a.err"
wait_members "sqlite3://$T/a.db" ga 1
read_all "sqlite3://$T/a.db" ga "$T/sum.a" --group-secret-file "$T/secret"
[ "$(sum_field "rdma bytes" "$T/sum.a")" -eq 0 ] || fail "RDMA carried data from a member without a secret"
[ "$(sum_field "auth failures" "$T/sum.a")" -ge "$N" ] || fail "auth failures not counted: $(tail -n 1 "$T/sum.a")"
grep -q "handshake with member 127.0.0.1:[0-9]* failed: the member does not ask for the group secret" "$T/sum.a.log" ||
  fail "no RDMA refusal logged"

echo "== an RDMA member with a secret: another secret is refused, the right one is served"
MPORT=$(free_port)
start_member b "$S" --meta "sqlite3://$T/b.db" --cache-group gb --group-ip 127.0.0.1 --rdma-network lo \
  --group-secret-file "$T/secret" --metrics "127.0.0.1:$MPORT" 2>"$T/b.err"
wait_members "sqlite3://$T/b.db" gb 1
read_all "sqlite3://$T/b.db" gb "$T/sum.wrong" --group-secret-file "$T/wrong"
[ "$(sum_field "rdma bytes" "$T/sum.wrong")" -eq 0 ] || fail "RDMA served another secret"
[ "$(sum_field "auth failures" "$T/sum.wrong")" -ge "$N" ] || fail "wrong secret: auth failures not counted"
read_all "sqlite3://$T/b.db" gb "$T/sum.right" --group-secret-file "$T/secret"
[ "$(sum_field "rdma bytes" "$T/sum.right")" -gt 0 ] || fail "RDMA did not serve the right secret"
[ "$(sum_field "object store GETs" "$T/sum.right")" -eq 0 ] || fail "the right secret went to the store"

echo "== a relay to the member's RDMA listener through another address is refused"
BPOOL=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/b.log" | head -n 1 | cut -d: -f2)
BRDMA=$(grep -o "rdma listening on 127.0.0.1:[0-9]*" "$T/b.log" | head -n 1 | awk '{print $NF}')
PP=$(free_port)
start_bg proxy -- python3 "$HERE/faultproxy.py" "$PP" "$BRDMA" pass
wait_listen "$PP"
start_bg fake -- python3 "$HERE/fakemember.py" attack relay "$T/b.db" gb "$S" 4194304 \
  "127.0.0.1:$BPOOL" "$T/fake.stats" "127.0.0.1:$PP"
# Wait for the fake's own record (the real member's alone, or a stale one, must not do).
wait_for grep -q . "$T/fake.out" || fail "the fake member did not start: $(cat "$T/fake.err")"
FID=$(awk '{print $1; exit}' "$T/fake.out")
wait_member_alive "sqlite3://$T/b.db" gb "$FID"
wait_members "sqlite3://$T/b.db" gb 2
# The member's RDMA refusals are logged by its RDMA connections ("rdma: peer ..."), its TCP ones
# by the server ("server: peer ..."): count the RDMA ones before the relay step, so that the
# lines the wrong-secret step wrote do not count.
WRONG_RE='<WARNING>: rdma: peer [^ ]* failed the handshake: wrong proof'
n0=$(grep -c -E "$WRONG_RE" "$T/b.log" || true)
scrape "127.0.0.1:$MPORT" /metrics "$T/m0"
read_all "sqlite3://$T/b.db" gb "$T/sum.relay" --group-secret-file "$T/secret"
scrape "127.0.0.1:$MPORT" /metrics "$T/m1"
stop_proc proxy # exit 0 or 143, no traceback
stop_proc fake
n1=$(grep -c -E "$WRONG_RE" "$T/b.log" || true)
metric() { awk -v n="$1" '$1 ~ "^"n"({|$)" {print $2; exit}' "$2"; }
f0=$(metric remotecache_auth_failures "$T/m0")
f1=$(metric remotecache_auth_failures "$T/m1")
fake_stat() { awk -v k="$1" '$1 == k {print $2}' "$T/fake.stats"; }
tcp_refused=$(fake_stat member_refused)
echo "  proxy: $(cat "$T/proxy.out"); fake: $(tr '\n' ' ' <"$T/fake.stats"); member auth failures $f0 -> $f1; RDMA wrong-proof lines $n0 -> $n1"
grep -q "conns [1-9]" "$T/proxy.out" || fail "no client dialed the relayed RDMA address"
# The fake's TCP relay moves the same counter: what it saw refused is taken off, and the rest
# must be the member's RDMA listener refusing the relayed proofs.
[ $((${f1%.*} - ${f0%.*})) -gt "${tcp_refused:-0}" ] ||
  fail "the member refused no relayed RDMA handshake (auth failures $f0 -> $f1, $tcp_refused of them the fake's TCP relay)"
[ "$n1" -gt "$n0" ] || fail "the member's RDMA listener logged no wrong proof during the relay step"
grep -q "rdma: handshake with member 127.0.0.1:$PP failed" "$T/sum.relay.log" ||
  fail "the client logged no refusal of the relayed RDMA member"
[ "$(sum_field "rdma bytes" "$T/sum.relay")" -gt 0 ] || fail "the real member served nothing over RDMA"
[ "$(fake_stat reads)" -eq 0 ] || fail "the fake was sent reads"

for m in a b; do stop_member "$m"; done
echo "PASS test_auth_rdma"
