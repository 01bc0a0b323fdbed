#!/usr/bin/env bash
# FUSE warm reads and a damaged disk cache [RELIABILITY: corrupt cache file, issue 31]: a warm
# mount answers reads from its cache files' pages, mapped, locked in memory and checked once
# per load (fuse_vblock.c). Bytes flipped in the data of a cache file — while the mount holds the
# block checked (the write moves the file's ctime), and before a restart (checked on load) — and
# cache files truncated never reach the application: every read through the mount stays
# byte-exact, and each damaged file is counted (blockcache_checksum_errors) and removed.
. "$(dirname "$0")/lib.sh"
need_fuse
STORE=$T/store
for i in 0 1 2 3; do make_object "$STORE/f$i" $((3 * 1048576 + i * 77777)); done
S="file://$STORE"
MNT=$T/mnt
FL=(--block-size 1M --cache-size 1G)
# read_all TAG — every file read through the mount (O_DIRECT, 1 MiB), compared with the store.
read_all() {
  for i in 0 1 2 3; do
    dd if="$MNT/f$i" of="$T/out" bs=1M iflag=direct status=none || fail "$1: reading f$i failed"
    cmp -s "$T/out" "$STORE/f$i" || fail "$1: f$i differs through the mount"
  done
}
# flip FILE — one byte in the middle of a cache file's data, written in place.
flip() {
  python3 - "$1" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
size = os.fstat(fd).st_size
pos = size - 1000
b = os.pread(fd, 1, pos)
os.pwrite(fd, bytes([b[0] ^ 0x5A]), pos)
os.close(fd)
PY
}
blocks() { find "$T/m.cache" -type f -path '*/blocks/*' | sort; }

start_mount m "$S" "$MNT" "${FL[@]}"
echo "== cold, then warm (the warm pass from the cache files)"
read_all cold
h0=$(stats_field "$MNT" blockcache_hits)
read_all warm
h1=$(stats_field "$MNT" blockcache_hits)
[ "$h1" -gt "$h0" ] || fail "the warm pass did not read the disk cache"
n=$(blocks | wc -l)
[ "$n" -ge 12 ] || fail "only $n blocks cached"

echo "== bytes flipped in 3 cache files while the mount holds them checked"
for f in $(blocks | head -n 3); do flip "$f"; done
read_all flipped
bad=$(stats_field "$MNT" blockcache_checksum_errors)
[ "$bad" -ge 3 ] || fail "only $bad of 3 damaged files were caught"
read_all again
[ "$(stats_field "$MNT" blockcache_checksum_errors)" -eq "$bad" ] ||
  fail "blocks already removed were counted damaged again"
stop_mount m "$MNT"

echo "== damaged before a restart: flipped and truncated files, caught when loaded"
for f in $(blocks | sed -n '4,6p'); do flip "$f"; done
for f in $(blocks | sed -n '7,8p'); do truncate -s -5000 "$f"; done
start_mount m "$S" "$MNT" "${FL[@]}"
read_all restarted
bad=$(stats_field "$MNT" blockcache_checksum_errors)
[ "$bad" -ge 5 ] || fail "only $bad of 5 damaged files were caught after the restart"
read_all clean
[ "$(stats_field "$MNT" blockcache_checksum_errors)" -eq "$bad" ] ||
  fail "the refilled blocks were counted damaged again"
echo "  $bad damaged files caught after the restart; every read exact"
stop_mount m "$MNT"
echo "PASS test_fuse_corrupt"
