#!/usr/bin/env bash
# Provider queues smaller than shoal's 64 message slots (issue 32 item 5), libfabric's tcp
# provider on lo with FI_TCP_RX_SIZE / FI_TCP_TX_SIZE below 64 on both sides: the client posts
# min(slots, the provider's receive queue) receives and sends at most what its send queue holds,
# so channels still open and every read is byte-exact over RDMA (before: 64 receives on a queue of
# 16, a failed post, the member failed over to TCP).
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"
STORE=$T/store
for i in 0 1 2; do make_object "$STORE/d/o$i" $((1024 * 1024 + i * 4099)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
BS=(--block-size 64K)

for q in 16 32; do
  echo "== provider queues of $q"
  export FI_TCP_RX_SIZE=$q FI_TCP_TX_SIZE=$q
  start_member "a$q" "$S" --meta "$META" --cache-group "g$q" --group-ip 127.0.0.1 --rdma-network lo "${BS[@]}"
  wait_members "$META" "g$q" 1
  grep -q "queues $q/$q" "$T/a$q.log" || fail "the provider did not take FI_TCP_RX_SIZE=$q: $(grep 'rdma: lo' "$T/a$q.log")"
  for i in 0 1 2; do
    "$SHOAL" cat "$S" "d/o$i" --meta "$META" --cache-group "g$q" --no-sharing --cache-size 0 "${BS[@]}" \
      --rdma-network lo --log-file "$T/c$q.log" --summary >"$T/out" 2>"$T/c$q.sum" || fail "cat d/o$i failed"
    cmp -s "$T/out" "$STORE/d/o$i" || fail "d/o$i: wrong bytes"
    [ "$(summary_field "rdma bytes" "$T/c$q.sum")" -eq "$(stat -c %s "$STORE/d/o$i")" ] ||
      fail "queues $q: d/o$i not all over RDMA: $(cat "$T/c$q.sum") $(grep -i rdma "$T/c$q.log" | tail -n 3)"
  done
  ! grep -q "Cannot establish rpc connection" "$T/c$q.log" || fail "queues $q: $(grep Cannot "$T/c$q.log" | head -n 1)"
  stop_proc "a$q"
done
echo "PASS: $TEST_NAME"
