#!/usr/bin/env bash
# Battery: a member whose cache files are damaged while it serves [RELIABILITY: corrupt cache
# file]. Three members hold every block; 8 reader threads (tests/tools/readers.c) read through the
# group while one member's block files are damaged in hundreds of places: bits flipped in the data
# and in the headers, files truncated, ranges zeroed, files swapped. A flip in the data reaches the
# requester (the member answers by sendfile, unread): its chunk CRCs catch it, it reports the block
# (CORRUPT), the member checks the block, removes it, and the next request refills it from the
# store; the member catches the other kinds itself when it opens the file. Every read stays
# byte-exact with 0 application errors, and at the end every block is served clean from the
# members again (no fallback, no checksum error, no store read by the client).
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms SHOAL_AVOID_DURATION=200ms
STORE=$T/store
nblocks=0
for i in $(seq 0 47); do
  size=$((900000 + i * 7919))
  make_object "$STORE/o$i" "$size"
  nblocks=$((nblocks + (size + 262143) / 262144))
done
S="file://$STORE"
META="sqlite3://$T/meta.db"
G=(--meta "$META" --cache-group g --block-size 256K)
R=(--verify-dir "$STORE" "${G[@]}" --log-level warn)
for m in a b c; do start_member "$m" "$S" "${G[@]}" --group-ip 127.0.0.1 --metrics 127.0.0.1:0; done
wait_members "$META" g 3
A=$(metrics_addr a)

pass() { # pass LABEL — every block once; prints the result line
  readers "$1" "$S" "${R[@]}" --all --threads 4
  [ "$(result_field "$1" reads)" -eq "$nblocks" ] || fail "$1: not every block was read"
  echo "  $1: $(grep '^result' "$T/$1.out" | cut -d' ' -f2-)"
}
echo "== warm: every block cached by its owner"
pass warm
files=$(find "$T/a.cache" -type f -path '*/blocks/*' | wc -l)
echo "  member a holds $files of $nblocks blocks"
[ "$files" -ge 20 ] || fail "member a holds too few blocks ($files) for this test"
pass clean
[ "$(result_field clean store_gets)" -eq 0 ] && [ "$(result_field clean fallbacks)" -eq 0 ] ||
  fail "the warm group did not serve everything"

echo "== 8 readers while member a's block files are damaged in 320 places"
mark=$(log_mark a)
start_bg load --kind client -- "$READERS" "$S" "${R[@]}" --threads 8 --until "$T/stop" \
  --seconds 300 --buffer-blocks 8 --log-file "$T/load.log"
wait_log "$T/load.out" "progress reads=[1-9]" 60
for batch in $(seq 1 8); do
  before=$(grep -c '^progress' "$T/load.out")
  /usr/bin/python3 "$(dirname "$0")/damage.py" "$T/a.cache" 40 "$batch" >>"$T/damage.txt" ||
    fail "damage.py failed in batch $batch: $(cat "$T/damage.txt")"
  # Let the readers meet the damage before the next batch.
  wait_log "$T/load.out" '^progress' 30 $((before + 1))
done
touch "$T/stop"
wait_proc load 60
[ "$EXIT_RC" -eq 0 ] || fail "the readers saw errors or wrong bytes: $(tail -n 5 "$T/load.err")"
sed 's/^/  damage: /' "$T/damage.txt"
echo "  readers: $(grep '^result' "$T/load.out" | cut -d' ' -f2-)"
done_ops=$(awk '{for (i = 1; i < NF; i += 2) if ($i != "vanished" && $i != "files") s += $(i + 1)} END {print s + 0}' "$T/damage.txt")
[ "$done_ops" -ge 200 ] || fail "only $done_ops damaging operations took effect"

echo "== every block read again until a pass is clean: exact; what is still damaged is caught"
# A pass reads every block, but not every one through member a: after a bad answer a is avoided
# for a moment (SHOAL_AVOID_DURATION) and those reads go to the store, so a pass may meet only
# one or two of the files the last batches damaged. Each pass must meet blocks no earlier pass
# met (a reported block is removed, never served damaged again), until one pass is clean.
caught=$(result_field load corrupt)
: >"$T/met"
clean=0
for n in $(seq 1 40); do
  pass "after$n"
  caught=$((caught + $(result_field "after$n" corrupt)))
  clean=1
  for f in fallbacks store_gets corrupt errors wrong; do
    [ "$(result_field "after$n" "$f")" -eq 0 ] || clean=0
  done
  [ "$clean" -eq 0 ] || break
  grep -o -E "checksum mismatch in [^ ]+ from" "$T/after$n.err" | cut -d' ' -f4 | sort -u >"$T/met.$n"
  [ -s "$T/met.$n" ] || fail "after$n: not clean, and no damaged block met: $(grep '^result' "$T/after$n.out")"
  again=$(comm -12 "$T/met" "$T/met.$n" | head -n 3 | tr '\n' ' ')
  [ -z "$again" ] || fail "member a served blocks it had been told were damaged again: $again"
  sort -u -o "$T/met" "$T/met" "$T/met.$n"
done
[ "$clean" -eq 1 ] || fail "after $n passes member a still serves damaged blocks"

echo "== the CORRUPT path: reported by requesters, removed and refilled by the member"
reported=$(tail -n +$((mark + 1)) "$T/a.log" | grep -c "reported corrupt by .*: removed" || true)
refetched=$(store_gets_since a "$mark" | wc -l)
removed=$(metric "$A" blockcache_checksum_errors)
now=$(find "$T/a.cache" -type f -path '*/blocks/*' | wc -l)
echo "  clean after $n pass(es); requesters gave up on $caught reads after two bad answers;" \
  "member a removed $reported blocks on their reports" \
  "and $removed damaged files in all; it holds $now of its $files blocks again ($refetched" \
  "fetched from the store, the rest written back from memory)"
[ "$caught" -ge 1 ] || fail "no requester caught a checksum error"
[ "$reported" -ge 1 ] || fail "member a removed no block on a CORRUPT report"
[ "$removed" -ge "$reported" ] || fail "member a counts $removed removals, fewer than $reported reports"
# Every block a owns was read in the passes above: each removed one is back on its disk.
[ "$now" -eq "$files" ] || fail "member a holds $now blocks after the passes, $files before the damage"
echo "PASS test_battery_corrupt"
