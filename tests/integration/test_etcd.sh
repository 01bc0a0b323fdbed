#!/usr/bin/env bash
# etcd as a registry [G1, G2]: a real etcd (Debian's etcd-server) on loopback; three members
# and a --no-sharing client read byte-exact through the group with every block from the members;
# a member killed with -9 leaves etcd by its lease (group timeout + grace period) running out —
# nobody deletes its record — and leaves the views; a member that says goodbye keeps a "leaving"
# record for its grace period, then the lease takes it; --set-weight 0 drains a live member
# through etcd (its blocks go to the others, no store read); records a stranger wrote under
# the group's prefix (garbage, another id than the key) are skipped; a bad etcd URL is one line
# and exit 2; an etcd that does not answer fails the start naming it.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=300ms SHOAL_GROUP_GRACE=2s

start_etcd etcd

records() { "${ETCDCTL[@]}" get --prefix "shoal/g1/members/" --keys-only | grep -c members || true; }
records_are() { [ "$(records)" -eq "$1" ]; }

STORE=$T/store
for i in $(seq 0 39); do echo "$((30000 + i * 4099)) obj/o$i"; done | make_objects "$STORE"
S="file://$STORE"
BS=(--block-size 64K)

echo "== three members and a client"
for m in a b c; do
  start_member "$m" "$S" --meta "$META" --cache-group g1 --group-ip 127.0.0.1 "${BS[@]}"
done
wait_members "$META" g1 3
[ "$(records)" -eq 3 ] || fail "etcd holds $(records) records, expected 3"
readers all "$S" --meta "$META" --cache-group g1 --verify-dir "$STORE" "${BS[@]}" --prefix obj/ \
  --all --threads 4 --seconds 120
[ "$(result_field all fallbacks)" -eq 0 ] && [ "$(result_field all store_gets)" -eq 0 ] ||
  fail "the client did not read everything from the members: $(grep '^result' "$T/all.out")"
"$SHOAL" cat "$S" obj/o7 --meta "$META" --cache-group g1 --no-sharing --cache-size 0 \
  --log-level error "${BS[@]}" >"$T/o7" || fail "shoal cat through the etcd group failed"
cmp -s "$T/o7" "$STORE/obj/o7" || fail "shoal cat returned other bytes"

echo "== a quiet group renews its leases a third of a lease at a time, on one gRPC stream each"
# Each member holds two leases: its presence (the 3 s timeout), renewed once a third of it has
# passed, and its record's (timeout + grace, 5 s), once a third of that has: about
# 3 x (6 + 3.6) = 29 renewals in 6 s for three members; renewing both with every 300 ms
# heartbeat would be 120. Every renewal is a message on the stream each member holds open
# (etcd_grpc.c): no keep-alive stream starts in the window (the v3 gateway starts one per
# call), and no member says it went through the gateway.
# etcd_counts — "renewals streams messages" of keep-alives, from one scrape of etcd's metrics
etcd_counts() {
  curl -sf "http://$EP/metrics" | awk '
    $1 == "etcd_debugging_lease_renewed_total" { r += $2 }
    index($1, "grpc_server_started_total{") == 1 && index($1, "grpc_method=\"LeaseKeepAlive\"") { s += $2 }
    index($1, "grpc_server_msg_received_total{") == 1 && index($1, "grpc_method=\"LeaseKeepAlive\"") { k += $2 }
    END { printf "%d %d %d\n", r, s, k }'
}
read -r r0 s0 k0 < <(etcd_counts)
sleep 6
read -r r1 s1 k1 < <(etcd_counts)
dr=$((r1 - r0))
echo "renewals in 6 s: $dr; keep-alive messages $((k1 - k0)), keep-alive streams started $((s1 - s0))"
[ "$dr" -gt 0 ] && [ "$dr" -le 48 ] || fail "three quiet members renewed $dr leases in 6 s (expected 1..48)"
[ "$s1" -eq "$s0" ] || fail "$((s1 - s0)) keep-alive streams started in 6 s: a member used the gateway"
# (the two counters of one scrape are not read at one instant: a renewal may fall between)
[ $((k1 - k0)) -ge $((dr - 2)) ] || fail "$dr renewals but $((k1 - k0)) keep-alive messages"
for m in a b c; do
  ! grep -q "through the v3 gateway" "$T/$m.log" || fail "$m: $(grep -m1 "through the v3 gateway" "$T/$m.log")"
done
wait_members "$META" g1 3

echo "== a stranger's records under the group's prefix are skipped"
"${ETCDCTL[@]}" put "shoal/g1/members/junk" 'm1|not|a|record' >/dev/null
"${ETCDCTL[@]}" put "shoal/g1/members/$(member_id a)x" "$("${ETCDCTL[@]}" get --print-value-only \
  "shoal/g1/members/$(member_id a)")" >/dev/null
"$SHOAL" group --meta "$META" --cache-group g1 >"$T/group.txt" 2>"$T/group.err" ||
  fail "shoal group failed: $(cat "$T/group.err")"
grep -q "3 members, 3 alive" "$T/group.txt" || fail "shoal group: $(cat "$T/group.txt")"
"${ETCDCTL[@]}" del --prefix "shoal/g1/members/junk" >/dev/null
"${ETCDCTL[@]}" del "shoal/g1/members/$(member_id a)x" >/dev/null

echo "== --set-weight 0 drains a live member through etcd"
ida=$(member_id a)
"$SHOAL" group --meta "$META" --cache-group g1 --set-weight "$ida" 0 >"$T/sw.out" ||
  fail "--set-weight failed: $(cat "$T/sw.out")"
"${ETCDCTL[@]}" get --print-value-only "shoal/g1/weights/$ida" | grep -qx 0 ||
  fail "the weight is not in etcd"
wait_until 20 bash -c "\"$SHOAL\" group --meta '$META' --cache-group g1 | grep '^$ida' | grep -q ' 0 '" ||
  fail "shoal group does not show a's weight 0: $("$SHOAL" group --meta "$META" --cache-group g1)"
"$SHOAL" group --meta "$META" --cache-group g1 --set-weight "$ida" 100 >/dev/null ||
  fail "--set-weight back to 100 failed"

echo "== kill -9: the lease runs out, nobody deletes the record"
idc=$(member_id c)
kill9 c
# Lease = group timeout + grace (3 s + 2 s). The survivors would delete a silent record only
# after 10 timeouts (30 s, STALE_FACTOR in agent.c), so a record gone within 15 s went with its
# lease.
wait_until 15 records_are 2 || fail "the killed member's record outlived its lease"
"${ETCDCTL[@]}" get "shoal/g1/members/$idc" --keys-only | grep -q . &&
  fail "the killed member's record is still in etcd"
wait_members "$META" g1 2
readers after "$S" --meta "$META" --cache-group g1 --verify-dir "$STORE" "${BS[@]}" \
  --prefix obj/ --all --threads 4 --seconds 120

echo "== SIGTERM: a leaving record for the grace period, then the lease takes it"
stop_proc b
wait_until 15 records_are 1 || fail "a member that left still has a record ($(records) records)"

echo "== bad URLs and a dead etcd"
bad_url() { # bad_url URL — refused before any connection, in one line naming the URL's fault
  local rc=0
  "$SHOAL" group --meta "$1" --cache-group g1 >"$T/bad.out" 2>"$T/bad.err" || rc=$?
  [ "$rc" -eq 2 ] || fail "shoal group --meta $1: exit $rc, expected 2"
  [ "$(wc -l <"$T/bad.err")" -eq 1 ] && grep -q "etcd URL" "$T/bad.err" ||
    fail "--meta $1: expected one line about the etcd URL, got: $(cat "$T/bad.err")"
}
bad_url "etcd://"
bad_url "etcd://host:notaport"
bad_url "etcd://u:pw@$EP"
if grep -q "pw" "$T/bad.err"; then fail "the error shows what may be a password: $(cat "$T/bad.err")"; fi
bad_url "etcd://$EP/path"
dead=$(free_port)
out=$("$SHOAL" group --meta "etcd://127.0.0.1:$dead" --cache-group g1 2>&1) &&
  fail "shoal group on a dead etcd succeeded"
echo "$out" | grep -q "127.0.0.1:$dead" || fail "the error does not name the endpoint: $out"
# A dead first endpoint is passed over for the next one.
"$SHOAL" group --meta "etcd://127.0.0.1:$dead,$EP" --cache-group g1 >"$T/group2.txt" ||
  fail "a URL with a dead first endpoint failed"
grep -q "1 members, 1 alive" "$T/group2.txt" || fail "shoal group: $(cat "$T/group2.txt")"
echo "PASS"
