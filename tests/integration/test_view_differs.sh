#!/usr/bin/env bash
# A member that refuses a read made under another view says so, and the requester lists its
# registry at once [issue 33, G3]. Two members on a Redis registry (heartbeat 200 ms) and a
# --no-sharing mount whose own heartbeat is 60 s, so that only the member's answer can make it
# list the registry during the test:
#   - `--set-weight 0` drains member a; both members see it; the mount's view still has a;
#   - the mount reads a new object: a refuses the blocks its old view sends there ("view
#     differs"), the mount learns the weight within a few seconds (its heartbeat would take a
#     minute), every byte is exact and no store read happens in the mount (b fills them);
#   - after that, new objects read through the mount cost a no further refusal: the reads go to
#     b directly;
#   - b, whose view is the members', refuses nothing.
. "$(dirname "$0")/lib.sh"
need_fuse
export SHOAL_GROUP_HEARTBEAT=200ms SHOAL_GROUP_TIMEOUT=2s SHOAL_GROUP_GRACE=2s \
  SHOAL_REMOTE_TIMEOUT=5s SHOAL_AVOID_DURATION=500ms

STORE=$T/store
for i in $(seq 0 7); do echo "$((16 * 65536)) d/n$i"; done | make_objects "$STORE"
S="file://$STORE"
BS=(--block-size 64K)
start_redis
M=(--meta "$REDIS_URL" --cache-group g --group-ip 127.0.0.1 "${BS[@]}")
start_member a "$S" "${M[@]}"
start_member b "$S" "${M[@]}"
wait_members "$REDIS_URL" g 2
ida=$(member_id a)

SHOAL_GROUP_HEARTBEAT=60s SHOAL_GROUP_TIMEOUT=180s \
  start_mount c "$S" "$T/c.mnt" --meta "$REDIS_URL" --cache-group g --no-sharing --cache-size 0 \
  "${BS[@]}" --metrics 127.0.0.1:0
wait_log "$T/c.log" "joined group .*consumer" 20
differs() { metric "$(metrics_addr "$1")" group_view_differs_answers; }
early() { grep -c "a member read under another view" "$T/c.log" || true; }
[ "$(early)" -eq 0 ] || fail "the mount refreshed early before anything differed"

echo "== drain a; the members see it, the mount does not yet"
"$SHOAL" group --meta "$REDIS_URL" --cache-group g --set-weight "$ida" 0 >"$T/setw.out" ||
  fail "--set-weight failed: $(cat "$T/setw.out")"
wait_log "$T/a.log" "weight of this member set to 0" 20
wait_log "$T/b.log" "member $ida .* now has weight 0" 20
! grep -q "member $ida .* now has weight 0" "$T/c.log" || fail "the mount saw the weight by itself"

echo "== the first read through the mount: a refuses, the mount lists at once"
t0=$(date +%s)
cmp "$T/c.mnt/d/n0" "$STORE/d/n0" || fail "d/n0 read wrong through the mount"
wait_log "$T/c.log" "member $ida .* now has weight 0" 10 ||
  fail "the mount did not learn the weight from the refusal"
t1=$(date +%s)
na=$(differs a)
echo "  a refused $na reads as made under another view; the mount knew in $((t1 - t0)) s"
[ "$na" -ge 1 ] || fail "a refused no read as made under another view"
[ "$(early)" -ge 1 ] || fail "the mount logged no early listing"
[ "$(differs b)" -eq 0 ] || fail "b refused reads under its own view"

echo "== later objects go to b directly"
for i in $(seq 1 7); do
  cmp "$T/c.mnt/d/n$i" "$STORE/d/n$i" || fail "d/n$i read wrong through the mount"
done
[ "$(differs a)" -eq "$na" ] || fail "a refused $(($(differs a) - na)) more reads after the mount's refresh"
gets=$(grep -c 'store: get ' "$T/c.log" || true)
[ "$gets" -eq 0 ] || fail "the mount read the store $gets times"
# Each refusal sent the read on to the next member (b): one fallback each, none for anything else.
fb=$(metric "$(metrics_addr c)" remotecache_fallbacks)
[ "$fb" -eq "$na" ] || fail "the mount fell back $fb times for $na refusals"

stop_mount c "$T/c.mnt"
echo "PASS test_view_differs"
