#!/usr/bin/env bash
# IORPC over RDMA between network namespaces (tcp provider) [M2, M3, M4, M5]: a member namespace
# and a client namespace joined by three veth pairs — two RDMA subnets and one for TCP. Reads are
# byte-exact and move bytes on both RDMA interfaces (per-interface counters); an interface without
# IPv4 stops the start-up with one clear line; taking the RDMA interfaces down mid-read loses no
# read (TCP carries them), and RDMA carries traffic again within ten seconds of bringing them up
# (IORPC_RDMA_RETRY_DURATION=3s). Root only; skipped (77) when namespaces or veths cannot be made.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp IORPC_RDMA_RETRY_DURATION=3s
[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null || skip "no ip(8)"

SUF=$(($$ % 100000))
NSM=shoal-m-$SUF
NSC=shoal-c-$SUF
# Deleting a namespace (after the harness stopped every process) deletes the veth ends inside
# it, and with them their peers.
ip netns add "$NSM" 2>/dev/null || skip "cannot create a network namespace"
AT_EXIT+=("ip netns del $NSM")
ip netns add "$NSC" || fail "cannot create a second namespace"
AT_EXIT+=("ip netns del $NSC")
for k in 1 2 3; do
  ip link add "c$k-$SUF" netns "$NSC" type veth peer name "m$k-$SUF" netns "$NSM" 2>/dev/null ||
    skip "cannot create veth pairs"
  ip -n "$NSC" addr add "10.201.$k.1/24" dev "c$k-$SUF"
  ip -n "$NSM" addr add "10.201.$k.2/24" dev "m$k-$SUF"
  ip -n "$NSC" link set "c$k-$SUF" up
  ip -n "$NSM" link set "m$k-$SUF" up
done
ip -n "$NSC" link set lo up
ip -n "$NSM" link set lo up
# Commands run in a namespace through nsenter --net, not `ip netns exec`: that one makes a new
# mount namespace, a copy of every mount of the machine, FUSE mounts of tests running alongside
# included; a copy keeps its FUSE connection alive after the test that made it unmounts it, so
# that mount's process outlives `shoal umount` for as long as the command here runs.
IN_C=(nsenter --net="/var/run/netns/$NSC" --)
IN_M=(nsenter --net="/var/run/netns/$NSM" --)
# An interface without IPv4, for the start-up check.
ip link add "nx-$SUF" netns "$NSC" type veth peer name "ny-$SUF" netns "$NSC" || fail "veth"
ip -n "$NSC" link set "nx-$SUF" up

STORE=$T/store
for i in $(seq 0 7); do make_object "$STORE/d/o$i" $((8 * 1024 * 1024 + i * 4099)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/secret"
chmod 600 "$T/secret"
COMMON=(--meta "$META" --cache-group g1 --group-secret-file "$T/secret")

echo "== start-up: an interface without IPv4 ends the start with one line [M3]"
expect_exit 2 "${IN_C[@]}" "$SHOAL" cat "$S" d/o0 "${COMMON[@]}" --rdma-network "nx-$SUF"
grep -q "rdma-network nx-$SUF: it has no IPv4 address" "$T/last.err" || fail "no-IPv4: $(cat "$T/last.err")"

echo "== a member on two RDMA interfaces, TCP on a third"
"${IN_M[@]}" "$SHOAL" serve "$S" --cache-dir "$T/m.cache" --log-file "$T/m.log" \
  --log-level debug "${COMMON[@]}" --group-ip 10.201.3.2 --rdma-network "m1-$SUF:m2-$SUF" \
  --metrics 127.0.0.1:19599 2>>"$T/m.err" &
track m $! member "$T/m.log" "$T/m.err"
wait_members "$META" g1 1
grep -q "rdma listening on 10.201.1.2:" "$T/m.log" && grep -q "rdma listening on 10.201.2.2:" "$T/m.log" ||
  fail "member does not listen on both interfaces"
mmetric() { # mmetric NAME — a counter of the member
  "${IN_M[@]}" python3 -c 'import sys,urllib.request
for l in urllib.request.urlopen("http://127.0.0.1:19599/metrics", timeout=5).read().decode().splitlines():
    f = l.split()
    if f and (f[0] == sys.argv[1] or f[0].startswith(sys.argv[1] + "{")):
        print(f[1]); break' "$1"
}

echo "== two interfaces: byte-exact, traffic on both, no request split [M2]"
for round in 1 2; do
  for i in $(seq 0 7); do
    "${IN_C[@]}" "$SHOAL" cat "$S" "d/o$i" "${COMMON[@]}" --no-sharing --cache-size 0 \
      --rdma-network "c1-$SUF:c2-$SUF" --log-file "$T/c.log" --log-level info --summary \
      >"$T/out" 2>>"$T/c.sum" ||
      fail "read d/o$i failed"
    cmp -s "$T/out" "$STORE/d/o$i" || fail "d/o$i differs"
  done
done
grep -q "server address 10.201.1.2:[0-9]*, transport:RDMA" "$T/c.log" &&
  grep -q "server address 10.201.2.2:[0-9]*, transport:RDMA" "$T/c.log" || fail "not connected on both"
tcp=$(grep -o "tcp bytes [0-9]*" "$T/c.sum" | awk '{s+=$NF} END {print s+0}')
io=$(grep -o "iorpc bytes [0-9]*" "$T/c.sum" | awk '{s+=$NF} END {print s+0}')
[ "$tcp" -eq 0 ] && [ "$io" -eq 0 ] || fail "TCP carried data (tcp $tcp, iorpc $io)"
if0=$(mmetric rdma_if0_bytes)
if1=$(mmetric rdma_if1_bytes)
ops=$(mmetric rdma_write_ops)
reqs=$(mmetric remotecache_serve_requests)
echo "  interface bytes: m1 $if0, m2 $if1; $ops writes for $reqs requests"
[ "${if0:-0}" -gt 0 ] && [ "${if1:-0}" -gt 0 ] || fail "traffic not on both interfaces"
[ "$ops" -eq "$reqs" ] || fail "a request was split or answered twice ($ops writes, $reqs requests)"

echo "== RDMA interfaces down mid-read: no read error, TCP carries; back up: RDMA again [M4]"
"${IN_C[@]}" "$SHOAL" bench "$S" "${COMMON[@]}" --rdma-network "c1-$SUF:c2-$SUF" --threads 4 \
  --duration 16s --warm --prefix d/ --log-level info --log-file "$T/b.log" >"$T/b.out" 2>&1 &
track bench $! client "$T/b.log"
# Take the interfaces down once RDMA carries the bench's reads.
w00=$(mmetric rdma_write_bytes)
carrying() { [ "$(mmetric rdma_write_bytes)" -gt $((w00 + 8 * 1024 * 1024)) ]; }
wait_until 60 carrying || fail "RDMA carried nothing for the bench"
w0=$(mmetric rdma_write_bytes)
ip -n "$NSC" link set "c1-$SUF" down
ip -n "$NSC" link set "c2-$SUF" down
wait_log "$T/b.log" "rdma to member .* lost" 30
w1=$(mmetric rdma_write_bytes)
# While 20 more requests are served (over TCP), RDMA moves nothing.
s1=$(mmetric remotecache_serve_requests)
served() { [ "$(mmetric remotecache_serve_requests)" -ge $((s1 + 20)) ]; }
wait_until 30 served || fail "nothing was served with the RDMA interfaces down"
[ "$(mmetric rdma_write_bytes)" -eq "$w1" ] || fail "RDMA moved bytes with its interfaces down"
ip -n "$NSC" link set "c1-$SUF" up
ip -n "$NSC" link set "c2-$SUF" up
ok=0
for i in $(seq 1 50); do
  sleep 0.2
  w2=$(mmetric rdma_write_bytes)
  if [ "$w2" -gt "$w1" ]; then ok=1; break; fi
done
[ "$ok" = 1 ] || fail "RDMA did not carry traffic again within 10 s"
echo "  rdma bytes: before down $w0, while down $w1, back after $((i * 200)) ms"
wait_proc bench 60
[ "$EXIT_RC" -eq 0 ] || fail "bench failed: $(tail -n 3 "$T/b.out")"
grep -q " 0 errors" "$T/b.out" || fail "reads failed: $(tail -n 2 "$T/b.out")"
fo=$(grep -c "rdma to member .* lost" "$T/b.log")
echo "  failovers logged: $fo"
echo "PASS"
