#!/usr/bin/env bash
# Spread by load [issue 29]. Three members on loopback, 64 blocks of 64 KiB; SHOAL_SPREAD_BUSY=1
# makes every read of the readers (tests/tools/readers.c, byte-checked against the files) count
# its block's owner as busy, so each goes to the next member in the block's order, which fills it
# from the owner (a peer fill) and keeps it in memory as a second copy:
#   - with SHOAL_SPREAD_COPIES=1 nothing spreads; with spread reads every byte is exact, each
#     block is peer-filled once, the members read the store for none of them, and the reader
#     process reads the store for none either;
#   - at most K = 2 copies: a second spread pass fills nothing again (the copies serve it), the
#     members hold exactly one second copy per block, and no copy reaches a disk cache (the cache
#     folders hold one file per block, the owner's);
#   - an object rewritten (a new version): spread reads of it are exact, and the copies of the
#     old version are dropped (one copy per block of the new version, none of the old);
#   - kill -9 of a member under spread load: no read error, no wrong byte.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_HEARTBEAT=200ms SHOAL_GROUP_TIMEOUT=1s SHOAL_GROUP_GRACE=2s \
  SHOAL_REMOTE_TIMEOUT=2s SHOAL_AVOID_DURATION=500ms SHOAL_SPREAD_COPIES=2

STORE=$T/store
{
  echo "$((32 * 65536 - 1000)) d/o0"
  for i in 1 2 3 4; do echo "$((8 * 65536)) d/o$i"; done
} | make_objects "$STORE"
NB=64
S="file://$STORE"
META="sqlite3://$T/meta.db"
BS=(--block-size 64K)
M=(--meta "$META" --cache-group g --group-ip 127.0.0.1 "${BS[@]}")
R=(--meta "$META" --cache-group g --verify-dir "$STORE" "${BS[@]}" --log-level warn)

for m in a b c; do start_member "$m" "$S" "${M[@]}"; done
wait_members "$META" g 3

# sum NAME [MEMBERS...] — NAME summed over the members' metrics endpoints.
sum() {
  local name=$1 m n=0
  shift
  for m in "$@"; do n=$((n + $(metric "$(metrics_addr "$m")" "$name"))); done
  echo "$n"
}
declare -A MARK
mark_all() { local m; for m in "$@"; do MARK[$m]=$(log_mark "$m"); done; }
gets_since() {
  local m n=0
  for m in "$@"; do n=$((n + $(store_gets_since "$m" "${MARK[$m]}" | wc -l))); done
  echo "$n"
}
# block_files — data files in the three cache folders (one per cached block).
block_files() {
  find "$T/a.cache" "$T/b.cache" "$T/c.cache" -type f -size +60k | wc -l
}

echo "== warm the owners; SHOAL_SPREAD_COPIES=1: no spread reads"
SHOAL_SPREAD_COPIES=1 SHOAL_SPREAD_BUSY=1 readers cold "$S" "${R[@]}" --all --threads 4
SHOAL_SPREAD_COPIES=1 SHOAL_SPREAD_BUSY=1 readers nospread "$S" "${R[@]}" --all --threads 4
[ "$(sum group_peer_fills a b c)" -eq 0 ] || fail "peer fills with SHOAL_SPREAD_COPIES=1"
[ "$(result_field nospread store_gets)" -eq 0 ] || fail "the warm pass read the store"
files=$(block_files)
[ "$files" -eq "$NB" ] || fail "$files block files in the cache folders after warming, not $NB"

echo "== spread reads are byte-exact and come from the owners, never the store"
mark_all a b c
SHOAL_SPREAD_BUSY=1 readers spread "$S" "${R[@]}" --all --threads 4
fills=$(sum group_peer_fills a b c)
copies=$(sum group_spread_copies a b c)
echo "  spread pass: $(grep '^result' "$T/spread.out" | cut -d' ' -f2-5); peer fills $fills, copies $copies"
[ "$fills" -eq "$NB" ] || fail "$fills peer fills for $NB spread blocks"
[ "$copies" -eq "$NB" ] || fail "$copies second copies held for $NB spread blocks"
[ "$(result_field spread store_gets)" -eq 0 ] || fail "the spread pass read the store"
[ "$(gets_since a b c)" -eq 0 ] || fail "members read the store for peer fills: $(gets_since a b c)"

echo "== at most K = 2 copies, none on disk"
SHOAL_SPREAD_BUSY=1 readers spread2 "$S" "${R[@]}" --all --threads 4
[ "$(sum group_peer_fills a b c)" -eq "$NB" ] || fail "the second pass filled copies again"
[ "$(sum group_spread_copies a b c)" -eq "$NB" ] || fail "more than one second copy per block"
files=$(block_files)
[ "$files" -eq "$NB" ] || fail "$files block files in the cache folders, not $NB: a copy reached a disk"

echo "== the object changes: its old copies are dropped, reads are exact"
sleep 1.1 # a new mtime as well as new bytes
echo "$((32 * 65536 - 3000)) d/o0" | make_objects "$STORE"
SHOAL_SPREAD_BUSY=1 readers changed "$S" "${R[@]}" --all --threads 4 --prefix d/o0
fills=$(sum group_peer_fills a b c)
copies=$(sum group_spread_copies a b c)
echo "  after the change: peer fills $fills, copies $copies"
[ "$fills" -eq $((NB + 32)) ] || fail "$fills peer fills, not $((NB + 32)) (32 blocks of the new version)"
[ "$copies" -eq "$NB" ] || fail "$copies copies held: the old version's were not dropped"

echo "== kill -9 of a member under spread load: no read error"
start_bg load --kind client -- env SHOAL_SPREAD_BUSY=1 "$READERS" "$S" "${R[@]}" --threads 4 \
  --until "$T/stop.load" --seconds 120
wait_log "$T/load.out" "progress reads=[1-9]" 60
kill9 b
for o in a c; do wait_log "$T/$o.log" "member .* left group" 20; done
sleep 1
touch "$T/stop.load"
wait_proc load 60
[ "$EXIT_RC" -eq 0 ] || fail "readers around kill -9: $(grep '^result' "$T/load.out")"
echo "  around kill -9: $(grep '^result' "$T/load.out" | cut -d' ' -f2-5)"
SHOAL_SPREAD_BUSY=1 readers after "$S" "${R[@]}" --all --threads 4

stop_proc a 60
stop_proc c 60
echo "PASS test_spread"
