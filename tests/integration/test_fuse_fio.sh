#!/usr/bin/env bash
# FUSE mount over a cache group [C1, G5]: fio (1 MiB, O_DIRECT, libaio, 8 jobs) through a mount
# that is the third member of a group reads byte-exact (fio's crc32c verify headers, written into
# the store files by fio itself), cold, warm and after a restart with a warm disk cache; the
# kernel's requests are 1 MiB; a member killed with -9 during a run costs fio no I/O error.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v fio >/dev/null || skip "no fio"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms

STORE=$T/store
JOB=(--bs=1M --size=32M --numjobs=8 --verify=crc32c --verify_state_save=0)
prep() { # prep FOLDER — fio writes its verify pattern into the raw store folder
  mkdir -p "$STORE/$1"
  fio --name=v --directory="$STORE/$1" --rw=write "${JOB[@]}" --do_verify=0 --ioengine=psync \
    >"$T/prep-$1.out" 2>&1 || fail "fio could not write the data set: $(tail -n 3 "$T/prep-$1.out")"
}
read_mount() { # read_mount FOLDER OUT [fio flags] — fio reads and verifies through the mount
  local dir=$1 out=$2
  shift 2
  timeout 300 fio --name=v --directory="$MNT/$dir" --rw=read "${JOB[@]}" --direct=1 \
    --ioengine=libaio --iodepth=1 --group_reporting "$@" >"$out" 2>&1
}
prep a
prep b
S="file://$STORE"
META="sqlite3://$T/meta.db"
G=(--meta "$META" --cache-group fg --group-ip 127.0.0.1)
start_member ma "$S" "${G[@]}"
start_member mb "$S" "${G[@]}"
MNT=$T/mnt
start_mount m "$S" "$MNT" "${G[@]}"
wait_members "$META" fg 3

echo "== fio through the mount, cold, byte-exact"
read_mount a "$T/fio1.out" || fail "fio failed: $(grep -m 3 -E 'err|verify' "$T/fio1.out")"
grep -q "err= 0" "$T/fio1.out" || fail "fio reported an error"
grep -E "READ:" "$T/fio1.out" | sed 's/^ */  /'
reads=$(stats_field "$MNT" fuse_reads)
big=$(stats_field "$MNT" fuse_read_size_1m)
remote=$(stats_field "$MNT" remotecache_get_requests)
echo "  FUSE reads $reads, of 1 MiB or more $big; block reads from members $remote"
[ "$reads" -ge 256 ] || fail "only $reads FUSE reads for 256 MiB"
[ $((big * 100)) -ge $((reads * 90)) ] || fail "only $big of $reads kernel requests were 1 MiB"
[ "$remote" -gt 0 ] || fail "the mount read nothing from the group"

echo "== warm"
read_mount a "$T/fio2.out" || fail "warm fio failed: $(grep -m 3 -E 'err|verify' "$T/fio2.out")"
grep -E "READ:" "$T/fio2.out" | sed 's/^ */  /'

echo "== a restarted mount: disk cache warm, memory empty"
stop_mount m "$MNT"
start_mount m "$S" "$MNT" "${G[@]}"
wait_members "$META" fg 3
read_mount a "$T/fio2b.out" || fail "fio after restart failed: $(grep -m 3 -E 'err|verify' "$T/fio2b.out")"
[ "$(stats_field "$MNT" blockcache_hits)" -gt 0 ] || fail "the restarted mount did not use its disk cache"
grep -E "READ:" "$T/fio2b.out" | sed 's/^ */  /'

echo "== kill -9 of a member during fio"
r0=$(stats_field "$MNT" fuse_reads)
read_mount b "$T/fio3.out" --rate=12m &
fio_pid=$!
track fio "$fio_pid" helper
# Kill once fio is well into its run: 16 of its 256 reads done.
into_run() { [ "$(stats_field "$MNT" fuse_reads)" -ge $((r0 + 16)) ]; }
wait_until 60 into_run || fail "fio did not start reading"
proc_running fio || fail "fio ended before the kill"
kill9 mb
wait_exit "$fio_pid" 120
[ "$EXIT_RC" -eq 0 ] || fail "fio failed after kill -9: $(grep -m 3 -E 'err|verify' "$T/fio3.out")"
grep -q "err= 0" "$T/fio3.out" || fail "fio reported an error after kill -9"
grep -E "READ:" "$T/fio3.out" | sed 's/^ */  /'
fb=$(stats_field "$MNT" remotecache_fallbacks)
ge=$(stats_field "$MNT" remotecache_get_errors)
echo "  failed member reads: $ge, fallbacks to the store: $fb"
# The dead member's blocks were asked of it until the view dropped it: some of those reads
# failed, and went to the next member in the block's order or to the store (none failed, above).
# No failed member read would mean the kill missed the run.
[ "$ge" -ge 1 ] || fail "no failed member read after kill -9 of a member during fio"
stop_mount m "$MNT"
echo "PASS test_fuse_fio"
