#!/usr/bin/env bash
# `shoal group` shows live cache use and RDMA addresses [C7, G1]: a member publishes its disk
# cache use with every heartbeat, so the CACHE column grows as reads fill it (on SQLite and on
# Redis) and agrees with the member's own blockcache_bytes; CAPACITY shows --cache-size; a member
# with --rdma-network shows the address it listens on for RDMA, one without shows "-".
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"

STORE=$T/store
for i in 0 1 2; do make_object "$STORE/f$i" $((8 * 1024 * 1024 + i * 1000)); done
S="file://$STORE"

# to_bytes SIZE — "8.6MiB", "512B", "1.0GiB" as a whole number of bytes.
to_bytes() {
  python3 - "$1" <<'PY'
import re, sys
m = re.fullmatch(r"([0-9.]+)(B|KiB|MiB|GiB|TiB)", sys.argv[1])
if not m:
    sys.exit("not a size: %r" % sys.argv[1])
print(int(float(m.group(1)) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(m.group(2))))
PY
}

# column META GROUP ID N — field N of member ID's row in `shoal group`.
column() {
  "$SHOAL" group --meta "$1" --cache-group "$2" | awk -v id="$3" -v n="$4" '$1 == id {print $n}'
}

# member_id NAME — the id NAME joined as, from its log.
member_id() {
  grep -o 'joined group "[^"]*" as [0-9a-f]*' "$T/$1.log" | head -n 1 | awk '{print $NF}'
}

# use_reaches META GROUP ID BYTES — `shoal group` shows at least BYTES in use for ID.
use_reaches() {
  local u
  u=$(column "$1" "$2" "$3" 9)
  [ -n "$u" ] && [ "$(to_bytes "$u")" -ge "$4" ]
}

# fill_and_watch META GROUP NAME — reads the objects one by one through member NAME (a
# --no-sharing client, so NAME caches every block) and checks that `shoal group` shows NAME's
# cache use grow after each.
fill_and_watch() {
  local meta=$1 group=$2 name=$3 id addr i used prev=0 bc
  id=$(member_id "$name")
  [ -n "$id" ] || fail "$name logged no member id"
  addr=$(metrics_addr "$name")
  [ "$(column "$meta" "$group" "$id" 9)" = 0B ] || fail "$name starts with cache use $(column "$meta" "$group" "$id" 9)"
  [ "$(column "$meta" "$group" "$id" 10)" = 1.0GiB ] || fail "$name capacity: $(column "$meta" "$group" "$id" 10)"
  for i in 0 1 2; do
    "$SHOAL" cat "$S" "f$i" --meta "$meta" --cache-group "$group" --no-sharing --cache-size 0 \
      --log-level error >"$T/out" || fail "read f$i failed"
    cmp -s "$T/out" "$STORE/f$i" || fail "f$i differs"
    scrape "$addr" /metrics "$T/m.txt"
    bc=$(awk '/^blockcache_bytes[{ ]/ {print $NF; exit}' "$T/m.txt")
    bc=${bc%.*}
    [ "$bc" -gt "$prev" ] || fail "$name: blockcache_bytes $bc did not grow past $prev"
    # One heartbeat later `shoal group` shows it (units of 0.1 MiB: allow the rounding).
    wait_for use_reaches "$meta" "$group" "$id" $((bc - 104858)) ||
      fail "$name: shoal group shows $(column "$meta" "$group" "$id" 9), blockcache_bytes is $bc"
    used=$(to_bytes "$(column "$meta" "$group" "$id" 9)")
    [ "$used" -le $((bc + 104858)) ] || fail "$name: shoal group shows $used, more than $bc"
    echo "  after f$i: shoal group shows $(column "$meta" "$group" "$id" 9) in use (blockcache_bytes $bc)"
    prev=$bc
  done
}

echo "== SQLite registry: cache use grows as the member fills"
META="sqlite3://$T/meta.db"
start_member s1 "$S" --meta "$META" --cache-group gs --group-ip 127.0.0.1 --cache-size 1G \
  --metrics "127.0.0.1:$(free_port)"
wait_members "$META" gs 1
fill_and_watch "$META" gs s1
"$SHOAL" group --meta "$META" --cache-group gs | tee "$T/g.txt"
[ "$(column "$META" gs "$(member_id s1)" 7)" = - ] || fail "a member without RDMA shows an RDMA address"

echo "== Redis registry: the same"
start_redis
start_member r1 "$S" --meta "$REDIS_URL" --cache-group gr --group-ip 127.0.0.1 --cache-size 1G \
  --metrics "127.0.0.1:$(free_port)"
wait_members "$REDIS_URL" gr 1
fill_and_watch "$REDIS_URL" gr r1

echo "== RDMA addresses"
start_member rd "$S" --meta "$META" --cache-group gd --group-ip 127.0.0.1 --rdma-network lo
wait_members "$META" gd 1
listen=$(grep -o 'rdma listening on 127.0.0.1:[0-9]*' "$T/rd.log" | head -n 1 | awk '{print $NF}')
[ -n "$listen" ] || fail "member rd does not listen for RDMA"
"$SHOAL" group --meta "$META" --cache-group gd | tee "$T/gd.txt"
shown=$(column "$META" gd "$(member_id rd)" 7)
[ "$shown" = "$listen" ] || fail "shoal group shows RDMA $shown, member listens on $listen"

for p in s1 r1 rd; do
  pid=$(eval "echo \$PID_$p")
  kill -TERM "$pid"
  wait_exit "$pid"
  [ "$EXIT_RC" -eq 0 ] || fail "member $p exited with $EXIT_RC"
done
echo "PASS"
