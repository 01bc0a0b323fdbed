#!/usr/bin/env bash
# Battery: a cache disk that returns EIO [RELIABILITY: disk I/O errors]. Member a keeps its cache
# in two dirs: one on a FUSE filesystem of this test's own (tests/tools/eiofs.c) that passes
# through to a folder until told to fail, one on the plain disk. Once every block is cached, the
# FUSE dir starts failing every open, read, write and create with EIO, while 8 reader threads
# (tests/tools/readers.c) read through the group. Member a takes the failing dir out of use after
# a few errors (its log says so, and the failing filesystem sees few operations after that),
# serves the blocks it lost from the store and its healthy dir, and every read stays byte-exact
# with 0 application errors; at the end a new client reads every block from the members.
. "$(dirname "$0")/lib.sh"
need_fuse
[ -x "$EIOFS" ] || fail "no shoal_eiofs at $EIOFS (build the shoal_eiofs target)"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms SHOAL_AVOID_DURATION=200ms
STORE=$T/store
nblocks=0
for i in $(seq 0 31); do
  size=$((700000 + i * 3001))
  make_object "$STORE/o$i" "$size"
  nblocks=$((nblocks + (size + 262143) / 262144))
done
S="file://$STORE"
META="sqlite3://$T/meta.db"
G=(--meta "$META" --cache-group g --block-size 256K)
R=(--verify-dir "$STORE" "${G[@]}" --log-level warn)

echo "== member a caches on a FUSE dir that can fail and on a plain dir"
mkdir -p "$T/backing" "$T/eio" "$T/a.good"
: >"$T/eio.ctl"
start_bg eiofs -- "$EIOFS" "$T/backing" "$T/eio" "$T/eio.ctl"
MOUNTS+=("$T/eio")
wait_for mountpoint -q "$T/eio" || fail "eiofs did not mount: $(cat "$T/eiofs.err")"
start_member a "$S" "${G[@]}" --group-ip 127.0.0.1 --cache-dir "$T/eio:$T/a.good" --metrics 127.0.0.1:0
start_member b "$S" "${G[@]}" --group-ip 127.0.0.1
wait_members "$META" g 2
A=$(metrics_addr a)
readers warm "$S" "${R[@]}" --all --threads 4
on_fuse=$(find "$T/backing" -type f -path '*/blocks/*' | wc -l)
on_good=$(find "$T/a.good" -type f -path '*/blocks/*' | wc -l)
echo "  member a holds $on_fuse blocks on the FUSE dir and $on_good on the plain one"
[ "$on_fuse" -ge 5 ] || fail "too few blocks on the FUSE dir for this test"
readers clean "$S" "${R[@]}" --all --threads 4
[ "$(result_field clean fallbacks)" -eq 0 ] && [ "$(result_field clean store_gets)" -eq 0 ] ||
  fail "the warm group did not serve every block"

echo "== the FUSE dir fails everything with EIO under 8 readers"
mark=$(log_mark a)
gets0=$(metric "$A" object_get_requests)
start_bg load --kind client -- "$READERS" "$S" "${R[@]}" --threads 8 --until "$T/stop" \
  --seconds 300 --log-file "$T/load.log"
wait_log "$T/load.out" "progress reads=[1-9]" 60
echo '*' >"$T/eio.ctl"
wait_log "$T/a.log" "dir $T/eio.*: out of use for [0-9]+ ms after I/O errors" 60
# The readers go on after the dir is out of use: two more progress lines.
n=$(grep -c '^progress' "$T/load.out")
wait_log "$T/load.out" '^progress' 60 $((n + 2))
readers after "$S" "${R[@]}" --all --threads 4
touch "$T/stop"
wait_proc load 60
[ "$EXIT_RC" -eq 0 ] || fail "the readers saw errors or wrong bytes: $(tail -n 5 "$T/load.err")"
echo "  readers: $(grep '^result' "$T/load.out" | cut -d' ' -f2-)"
echo "  after: $(grep '^result' "$T/after.out" | cut -d' ' -f2-)"

echo "== member a served what it lost from the store and its healthy dir"
readers final "$S" "${R[@]}" --all --threads 4
for f in fallbacks store_gets errors wrong; do
  [ "$(result_field final "$f")" -eq 0 ] || fail "final pass: $f $(result_field final "$f")"
done
read_errors=$(metric "$A" blockcache_read_errors)
refetched=$(($(metric "$A" object_get_requests) - gets0))
now_good=$(find "$T/a.good" -type f -path '*/blocks/*' | wc -l)
stop_proc a
stop_proc eiofs
eio=$(grep -o 'eiofs: [0-9]* EIO' "$T/eiofs.err" | awk '{print $2}')
echo "  member a: $read_errors cache read errors, dir out of use ($(tail -n +$((mark + 1)) "$T/a.log" |
  grep -c 'out of use') time(s)); $refetched blocks fetched from the store; $now_good blocks" \
  "on the plain dir (was $on_good); the failing filesystem returned EIO $eio times in $(result_field load reads) reads"
[ "$read_errors" -ge 1 ] || fail "member a counted no cache read error"
# Every block a owns was read after the failure: each one it lost is cached on the healthy dir
# again (written back from its memory, or fetched from the store).
[ "$now_good" -eq $((on_good + on_fuse)) ] ||
  fail "member a holds $now_good blocks on the healthy dir, want $on_good + $on_fuse"
# Out of use means out of use: the operations that took it out and those in flight at that
# moment met EIO, not one per read.
reads=$(result_field load reads)
[ -n "$eio" ] && [ "$eio" -ge 3 ] && [ "$eio" -le 200 ] && [ $((eio * 20)) -le "$reads" ] ||
  fail "the failing filesystem saw $eio EIO in $reads reads: the dir was not taken out of use"
echo "PASS test_battery_eio"
