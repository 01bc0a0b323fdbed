#!/usr/bin/env bash
# The demo: installs what is missing and builds shoal if needed, makes a 1 GiB file:// data set in
# nested prefixes, starts a local cache group (two `shoal serve` members and a `shoal mount`, met
# through SQLite, all on 127.0.0.1), reads the data set through the mount with 8 parallel readers
# (copied to memory while timed, then compared byte for byte with the originals, untimed), cold
# then warm, and prints throughput and hit ratios. It
# cleans up after itself (unmount, processes stopped by PID, temporary folder removed), even when
# interrupted. Needs root for FUSE.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ ! -x build/shoal ] || [ -n "$(find src include CMakeLists.txt -newer build/shoal -print -quit)" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j"$(nproc)" >/dev/null
fi
SHOAL=$PWD/build/shoal
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/fuse ]; then
  echo "demo: the demo mounts with FUSE: run it as root on a machine with /dev/fuse" >&2
  exit 1
fi

D=$(mktemp -d /tmp/shoal-demo.XXXXXX)
MNT=$D/mnt
COPY=$(mktemp -d /dev/shm/shoal-demo-read.XXXXXX) # what the readers read, compared after timing
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  if mountpoint -q "$MNT" 2>/dev/null; then
    "$SHOAL" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT" 2>/dev/null || true
  fi
  local p i
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for i in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$D" "$COPY"
}
trap cleanup EXIT
trap 'echo "demo: interrupted" >&2; exit 130' INT TERM

NOBJ=32
OBJ_MIB=32
echo "== data set: $NOBJ objects of $OBJ_MIB MiB in nested prefixes under $D/store"
for i in $(seq 0 $((NOBJ - 1))); do
  mkdir -p "$D/store/train/part-$((i / 8))"
  head -c $((OBJ_MIB * 1024 * 1024)) /dev/urandom >"$D/store/train/part-$((i / 8))/shard-$i.bin"
done
(cd "$D/store" && find . -type f -printf '%P\n' | sort) >"$D/keys"

S="file://$D/store"
G=(--meta "sqlite3://$D/meta.db" --cache-group demo --group-ip 127.0.0.1 --log-level info)
echo "== cache group 'demo': two members and a mount"
for m in a b; do
  "$SHOAL" serve "$S" "${G[@]}" --cache-dir "$D/$m.cache" --log-file "$D/$m.log" &
  PIDS+=($!)
done
mkdir -p "$MNT"
"$SHOAL" mount "$S" "$MNT" "${G[@]}" --cache-dir "$D/mount.cache" --log-file "$D/mount.log" &
PIDS+=($!)
for i in $(seq 1 200); do
  mountpoint -q "$MNT" && [ "$("$SHOAL" group --meta "sqlite3://$D/meta.db" --cache-group demo 2>/dev/null |
    tail -n 1 | awk '{print $3}')" = 3 ] && break
  sleep 0.1
done
mountpoint -q "$MNT" || { echo "demo: the mount did not come up: $(tail -n 3 "$D/mount.log")" >&2; exit 1; }
"$SHOAL" group --meta "sqlite3://$D/meta.db" --cache-group demo | sed 's/^/   /'

# stat NAME — a counter of the mount (its .stats file) plus the members' (their metrics
# endpoints, when they have one).
stat_sum() {
  local v
  v=$(awk -v n="$1" '$1 == n { print $2 }' "$MNT/.stats")
  for m in a b; do
    local addr
    addr=$(grep -o 'prometheus metrics listening on [^ ]*' "$D/$m.log" 2>/dev/null | tail -n 1 | awk '{print $NF}')
    [ -n "$addr" ] || continue
    v=$((v + $(curl -s --max-time 5 "http://$addr/metrics" | awk -v n="$1" '$1 ~ "^"n"({|$)" { s += $2 } END { printf "%.0f", s }')))
  done
  echo "$v"
}

# read_all LABEL — 8 parallel readers, O_DIRECT 1 MiB, into copies in memory (/dev/shm); the
# timed part is the reading only, and every copy is then compared with its original.
read_all() {
  local label=$1
  local s0 m0 r0 c0 b0 t0 t1
  s0=$(stat_sum object_get_bytes)
  m0=$(awk '$1 == "object_get_bytes" { print $2 }' "$MNT/.stats")
  c0=$(awk '$1 == "blockcache_hit_bytes" { print $2 }' "$MNT/.stats")
  r0=$(awk '$1 == "remotecache_get_bytes" { print $2 }' "$MNT/.stats")
  b0=$(awk '$1 == "fuse_read_bytes" { print $2 }' "$MNT/.stats")
  t0=$(date +%s.%N)
  xargs -P 8 -I{} sh -c 'dd if="$1/{}" of="$2/$(echo "{}" | tr / _)" bs=1M iflag=direct status=none || echo "FAILED: {}"' \
    _ "$MNT" "$COPY" <"$D/keys" >"$D/diffs"
  t1=$(date +%s.%N)
  while read -r k; do
    cmp -s "$COPY/$(echo "$k" | tr / _)" "$D/store/$k" || echo "DIFFERS: $k"
  done <"$D/keys" >>"$D/diffs"
  rm -f "$COPY"/*
  [ ! -s "$D/diffs" ] || { cat "$D/diffs" >&2; echo "demo: bytes differ" >&2; exit 1; }
  local s1 m1 r1 c1 b1
  s1=$(stat_sum object_get_bytes)
  m1=$(awk '$1 == "object_get_bytes" { print $2 }' "$MNT/.stats")
  c1=$(awk '$1 == "blockcache_hit_bytes" { print $2 }' "$MNT/.stats")
  r1=$(awk '$1 == "remotecache_get_bytes" { print $2 }' "$MNT/.stats")
  b1=$(awk '$1 == "fuse_read_bytes" { print $2 }' "$MNT/.stats")
  awk -v l="$label" -v t0="$t0" -v t1="$t1" -v b=$((b1 - b0)) -v s=$((s1 - s0)) \
    -v m=$((m1 - m0)) -v c=$((c1 - c0)) -v r=$((r1 - r0)) 'BEGIN {
      mib = b / 1048576
      t = t1 - t0
      printf "== %s: %.0f MiB byte-exact in %.2f s: %.0f MiB/s\n", l, mib, t, mib / t
      printf "   blocks the mount fetched: %.0f MiB from its disk cache, %.0f MiB from the members, %.0f MiB from the store\n", c / 1048576, r / 1048576, m / 1048576
      # Store bytes can exceed the bytes read (a block is fetched whole): the ratio stays in 0..100.
      h = b ? 100 * (1 - s / b) : 0
      printf "   object store reads in the whole group: %.0f MiB; group hit ratio %.1f%%\n", s / 1048576, h < 0 ? 0 : h
    }'
}

read_all "first read (cold: the owners fill their caches from the object store)"
read_all "second read (warm: served by the group's caches)"
echo "== .stats (the mount's metrics; 'shoal stats $MNT' shows them live):"
grep -E '^(fuse_reads|fuse_read_size_1m|fuse_read_bytes|remotecache_get_requests|blockcache_hits|object_get_requests|threads|remotecache_connections) ' "$MNT/.stats" | sed 's/^/   /'
echo "== cache on disk: members $(du -sh "$D/a.cache" | cut -f1) and $(du -sh "$D/b.cache" | cut -f1), mount $(du -sh "$D/mount.cache" | cut -f1)"
