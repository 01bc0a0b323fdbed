#!/usr/bin/env bash
# IORPC over RDMA on loopback through libfabric's tcp provider [M1-M4, M6, M7, V1]: byte-exact
# reads with `transport:RDMA` in the client log, the rdma counters move and the TCP data counters
# do not; an RDMA client and a TCP client mix on the same members; shoal ping checks RDMA; every
# start-up failure (missing interface, provider that cannot start, bad list) exits non-zero with
# one clear line. Failover and two interfaces: test_rdma_netns.sh.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"

STORE=$T/store
for i in $(seq 0 5); do make_object "$STORE/d/o$i" $((8 * 1024 * 1024 + i * 4099)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"

read_all() { # read_all LOG FLAGS... — every object, byte-exact; the summaries in LOG.sum
  local log=$1 i out="$T/out.$BASHPID"
  shift
  : >"$log.sum"
  for i in $(seq 0 5); do
    "$SHOAL" cat "$S" "d/o$i" --meta "$META" --cache-group g1 --no-sharing --cache-size 0 \
      --log-file "$log" --log-level info --summary "$@" >"$out" 2>>"$log.sum" ||
      fail "read d/o$i failed ($*)"
    cmp -s "$out" "$STORE/d/o$i" || fail "d/o$i differs ($*)"
  done
  [ "$(summary_lines "$log.sum")" -eq 6 ] || fail "expected 6 summaries in $log.sum"
  [ "$(summary_field "object store GETs" "$log.sum")" -eq 0 ] || fail "client went to the store"
}
sum_field() { summary_field "$2" "$1.sum"; } # sum_field LOG NAME — over the 6 reads of read_all

echo "== start-up failures exit 2 with one clear line [M3]"
expect_exit 2 "$SHOAL" cat "$S" d/o0 --meta "$META" --cache-group g0 --rdma-network nosuch0
grep -q "rdma-network nosuch0: no such interface" "$T/last.err" || fail "missing interface: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" cat "$S" d/o0 --meta "$META" --cache-group g0 --rdma-network lo --rdma-provider nosuch
grep -q "RDMA provider nosuch cannot start" "$T/last.err" || fail "bad provider: $(cat "$T/last.err")"
expect_exit 2 env -u FI_PROVIDER "$SHOAL" serve "$S" --cache-dir "$T/x.cache" --meta "$META" \
  --cache-group g0 --group-ip 127.0.0.1 --rdma-network lo --rdma-provider verbs
grep -q "RDMA provider verbs cannot start" "$T/last.err" || fail "verbs without devices: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" cat "$S" d/o0 --meta "$META" --cache-group g0 --rdma-network "lo:lo:lo:lo:lo"
expect_exit 2 "$SHOAL" cat "$S" d/o0 --rdma-provider tcp
[ "$(wc -l <"$T/last.err")" -le 2 ] || fail "more than one error line"

echo "== two members and a client on RDMA over lo: byte-exact, no TCP data"
for m in a b; do
  start_member "$m" "$S" --meta "$META" --cache-group g1 --group-ip 127.0.0.1 --rdma-network lo \
    --iorpc-mode splice
done
wait_members "$META" g1 2
grep -q "splice iorpc is disabled since max pipe size is [0-9]* or RDMA is enabled, use dio instead" \
  "$T/a.log" || fail "no splice->dio line [M7]"
grep -q "rdma listening on 127.0.0.1:" "$T/a.log" || fail "member a does not listen for RDMA"
read_all "$T/rdma.log" --rdma-network lo
read_all "$T/rdma.log" --rdma-network lo # warm: from the members' caches
grep -q "iorpc client started, server address 127.0.0.1:[0-9]*, transport:RDMA" "$T/rdma.log" ||
  fail "no transport:RDMA line"
[ "$(sum_field "$T/rdma.log" "rdma bytes")" -gt 0 ] || fail "no rdma bytes"
[ "$(sum_field "$T/rdma.log" "tcp bytes")" -eq 0 ] && [ "$(sum_field "$T/rdma.log" "iorpc bytes")" -eq 0 ] ||
  fail "TCP carried data: $(tail -n 1 "$T/rdma.log.sum")"
w=0
for m in a b; do
  v=$(metric "$(metrics_addr "$m")" rdma_write_bytes)
  w=$((w + v))
done
[ "$w" -gt 0 ] || fail "members report no rdma_write_bytes"
echo "  members wrote $w bytes by RDMA"

echo "== mixed: an RDMA client and an IORPC/TCP client at once, both byte-exact"
(read_all "$T/mixed-rdma.log" --rdma-network lo) &
track mix_rdma $! helper
(read_all "$T/mixed-tcp.log" --use-iorpc) &
track mix_tcp $! helper
wait_proc mix_rdma 120
[ "$EXIT_RC" -eq 0 ] || fail "RDMA client failed in the mix"
wait_proc mix_tcp 120
[ "$EXIT_RC" -eq 0 ] || fail "TCP client failed in the mix"
grep -q "transport:RDMA" "$T/mixed-tcp.log" && fail "the TCP client used RDMA"
grep -q "iorpc client started, server address 127.0.0.1:[0-9]*$" "$T/mixed-tcp.log" ||
  fail "the TCP client did not use IORPC"
[ "$(sum_field "$T/mixed-tcp.log" "rdma bytes")" -eq 0 ] && [ "$(sum_field "$T/mixed-tcp.log" "iorpc bytes")" -gt 0 ] ||
  fail "TCP client counters: $(tail -n 1 "$T/mixed-tcp.log.sum")"
[ "$(sum_field "$T/mixed-rdma.log" "rdma bytes")" -gt 0 ] || fail "mixed RDMA client had no rdma bytes"

echo "== shoal ping --rdma-network"
pp=$("$SHOAL" group --meta "$META" --cache-group g1 | awk 'NR>1 && $3=="provider" {print $5; exit}')
"$SHOAL" ping "$pp" --rdma-network lo --log-level warn >"$T/ping" || fail "ping failed: $(cat "$T/ping")"
grep -q "^rdma .* ok: .*rma write 65536 bytes verified" "$T/ping" || fail "ping: $(cat "$T/ping")"

echo "PASS"
