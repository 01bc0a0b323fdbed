#!/usr/bin/env bash
# etcd watches instead of polling [G1, G2]: a real etcd on loopback and four members. A quiet
# group changes no revision of etcd (a heartbeat is one keep-alive); an observer member's view
# follows a join, a --set-weight, a goodbye and a kill -9 (presence lease expiry) through its
# watch, without one full read meanwhile (registry_full_reads stays, registry_watch_events
# grows); records a stranger wrote under the prefix (another id than the key, garbage, a huge
# value, a presence key without a record) are skipped; an etcd restart and a compaction past
# the observer's revision end in a full read and a right view, and the watch runs again.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=300ms SHOAL_GROUP_GRACE=2s

start_etcd etcd
revision() { "${ETCDCTL[@]}" get x --write-out=json | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])'; }

STORE=$T/store
for i in $(seq 0 3); do echo "$((30000 + i * 4099)) obj/o$i"; done | make_objects "$STORE"
S="file://$STORE"
member() { start_member "$1" "$S" --meta "$META" --cache-group g1 --group-ip 127.0.0.1 --block-size 64K "${@:2}"; }

member a --metrics 127.0.0.1:0
A=$(metrics_addr a)
alive_is() { [ "$(metric "$A" group_members_alive)" -eq "$1" ]; }
away_is() { [ "$(metric "$A" group_members_away)" -eq "$1" ]; }
# b and c join after a has read the group (its view holds itself), so that a learns of them by
# its watch: started together, a busy machine may let them join before a's first full read.
wait_until 20 alive_is 1 || fail "a's view has $(metric "$A" group_members_alive) members, expected itself"
for m in b c; do member "$m"; done
wait_members "$META" g1 3
wait_until 20 alive_is 3 || fail "a's view has $(metric "$A" group_members_alive) members, expected 3"
idb=$(member_id b)

echo "== a quiet group changes no revision; a's listings are no full reads"
sleep 1
r1=$(revision)
f1=$(metric "$A" registry_full_reads)
sleep 3 # ten heartbeats of three members
r2=$(revision)
f2=$(metric "$A" registry_full_reads)
[ "$r1" = "$r2" ] || fail "etcd's revision moved from $r1 to $r2 in a quiet group"
[ "$f1" = "$f2" ] || fail "a made $((f2 - f1)) full reads in 3 s of a quiet group"
[ "$(metric "$A" registry_watch_events)" -gt 0 ] || fail "a received no event by its watch"

echo "== a join, a weight, a goodbye and a kill -9 reach a's view by the watch"
e1=$(metric "$A" registry_watch_events)
member d
wait_until 10 alive_is 4 || fail "a's view did not get the new member d"
"$SHOAL" group --meta "$META" --cache-group g1 --set-weight "$idb" 0 >/dev/null ||
  fail "--set-weight failed"
wait_log "$T/a.log" "member $idb .* now has weight 0 \(was 100\)" 10 ||
  fail "a's view did not get b's weight 0"
"$SHOAL" group --meta "$META" --cache-group g1 --set-weight "$idb" 100 >/dev/null
stop_proc d # a goodbye: away at once, for its grace period
wait_until 5 alive_is 3 || fail "a's view still serves d after its goodbye"
wait_until 15 away_is 0 || fail "d stayed away in a's view past its grace period"
kill9 c # its presence lease (3 s) runs out: away, then gone with its record's lease
wait_until 10 alive_is 2 || fail "a's view still serves c after its lease ran out"
wait_until 15 away_is 0 || fail "c stayed away in a's view past its grace period"
f3=$(metric "$A" registry_full_reads)
e2=$(metric "$A" registry_watch_events)
[ "$f3" = "$f2" ] || fail "a made $((f3 - f2)) full reads while its watch ran"
[ "$e2" -ge "$((e1 + 6))" ] || fail "a received only $((e2 - e1)) events for six changes"

echo "== a stranger's records under the prefix are skipped"
"${ETCDCTL[@]}" put "shoal/g1/members/junk" 'm1|not|a|record' >/dev/null
"${ETCDCTL[@]}" put "shoal/g1/members/liar" "$("${ETCDCTL[@]}" get --print-value-only \
  "shoal/g1/members/$idb")" >/dev/null
head -c 1000000 /dev/zero | tr '\0' 'x' >"$T/huge"
"${ETCDCTL[@]}" put "shoal/g1/members/huge" <"$T/huge" >/dev/null
"${ETCDCTL[@]}" put "shoal/g1/present/ghost" '' >/dev/null
"${ETCDCTL[@]}" put "shoal/g1/weights/$idb" 'lots' >/dev/null
wait_log "$T/a.log" "skipping a malformed record in group \"g1\" \(key (junk|liar|huge)\)" 10
sleep 1
alive_is 2 || fail "a's view has $(metric "$A" group_members_alive) members after the junk"
"${ETCDCTL[@]}" del --prefix "shoal/g1/members/junk" >/dev/null
"${ETCDCTL[@]}" del "shoal/g1/members/liar" >/dev/null
"${ETCDCTL[@]}" del "shoal/g1/members/huge" >/dev/null
"${ETCDCTL[@]}" del "shoal/g1/present/ghost" >/dev/null
"${ETCDCTL[@]}" del "shoal/g1/weights/$idb" >/dev/null

echo "== etcd restarted behind a compaction: a reads in full, its view is right, its watch runs again"
f4=$(metric "$A" registry_full_reads)
ia=$(_entry a)
kill -STOP "${P_PID[$ia]}"
stop_proc etcd
start_etcd etcd2
"$SHOAL" group --meta "$META" --cache-group g1 --set-weight "$idb" 7 >/dev/null ||
  fail "--set-weight after the restart failed"
# Two revisions more, so that the compaction passes the revision a watches from.
"${ETCDCTL[@]}" put "shoal/g1/other" x >/dev/null
"${ETCDCTL[@]}" del "shoal/g1/other" >/dev/null
"${ETCDCTL[@]}" compact "$(revision)" >/dev/null || fail "etcdctl compact failed"
kill -CONT "${P_PID[$ia]}"
wait_log "$T/a.log" "member $idb .* now has weight 7 \(was 100\)" 15 ||
  fail "a's view did not get b's weight 7 after the restart"
[ "$(metric "$A" registry_full_reads)" -gt "$f4" ] || fail "a made no full read after the compaction"
wait_until 10 alive_is 2 || fail "a's view has $(metric "$A" group_members_alive) members"
member e
wait_until 10 alive_is 3 || fail "a's view did not get e after the restart"
sleep 2
f5=$(metric "$A" registry_full_reads)
sleep 2
[ "$(metric "$A" registry_full_reads)" = "$f5" ] || fail "a still reads in full: its watch does not run again"
echo "PASS"
