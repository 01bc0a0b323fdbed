#!/usr/bin/env bash
# fio through FUSE, in one run on the same data (DESIGN.md "Benchmarks"): sequential 1 MiB
# O_DIRECT reads (libaio, iodepth 1, JOBS jobs) against
#   raw     the data folder itself (tmpfs: the memory-copy ceiling),
#   ptmin   bench/passthrough_min.c, a minimal passthrough FUSE of that folder (built here with cc),
#   shoal   a shoal mount of that folder as a file:// store, warm (its disk cache filled by one
#           unmeasured pass; single node, no group),
#   group   a shoal mount that is a consumer (--no-sharing --cache-size 0) of a group of two
#           `shoal serve` members over the same store (sqlite registry, loopback), warm (the
#           members' caches filled by one unmeasured pass): every block comes from a member,
#           over the TCP pool, or over IORPC with GROUP_FLAGS=--use-iorpc,
# and prints throughput, the mount's and members' CPU seconds per GiB, and ratios. Root and /dev/fuse needed. Environment: SHOAL_BIN (default: a
# RelWithDebInfo build in build-bench), JOBS (4), SIZE per job (1G), RUNTIME seconds (10),
# DATA_DIR (a fresh folder under /dev/shm), GROUP (1; 0 skips the group run), GROUP_FLAGS,
# BASE_BIN (another shoal binary, measured warm right before SHOAL_BIN for a side-by-side ratio).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] && [ -c /dev/fuse ] || { echo "bench: needs root and /dev/fuse" >&2; exit 1; }
command -v fio >/dev/null || { echo "bench: needs fio (./scripts/setup.sh installs it)" >&2; exit 1; }
JOBS=${JOBS:-4}
GROUP=${GROUP:-1}
GROUP_FLAGS=${GROUP_FLAGS:-}
HZ=$(getconf CLK_TCK)
SIZE=${SIZE:-1G}
RUNTIME=${RUNTIME:-10}
SHOAL=${SHOAL_BIN:-}
if [ -z "$SHOAL" ]; then
  # Warnings are the test build's business; a benchmark build must not stop on them.
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=OFF \
    -DSHOAL_WERROR=OFF >/dev/null
  cmake --build build-bench -j"$(nproc)" --target shoal >/dev/null
  SHOAL=$PWD/build-bench/shoal
fi

D=$(mktemp -d /tmp/shoal-bench.XXXXXX)
DATA=${DATA_DIR:-$(mktemp -d /dev/shm/shoal-bench-data.XXXXXX)}
MOUNTS=()
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  local m p i
  for m in "${MOUNTS[@]}"; do
    mountpoint -q "$m" 2>/dev/null && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
  done
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for i in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$D"
  [ -n "${DATA_DIR:-}" ] || rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O2 bench/passthrough_min.c $(pkg-config --cflags --libs fuse3) -o "$D/passthrough_min"
echo "== data: $JOBS files of $SIZE in $DATA"
fio --name=b --directory="$DATA" --rw=write --bs=1M --size="$SIZE" --numjobs="$JOBS" \
  --ioengine=psync >/dev/null

wait_mounted() {
  local i
  for i in $(seq 1 200); do mountpoint -q "$1" && return 0; sleep 0.1; done
  echo "bench: $1 did not mount" >&2
  exit 1
}

# run DIR — fio over DIR's files; prints MiB/s.
run() {
  fio --name=b --directory="$1" --rw=read --bs=1M --size="$SIZE" --numjobs="$JOBS" --direct=1 \
    --ioengine=libaio --iodepth=1 --time_based --runtime="$RUNTIME" --group_reporting \
    --output-format=json >"$D/fio.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.0f" % (j["jobs"][0]["read"]["bw_bytes"] / 1048576))' "$D/fio.json"
}

echo "== raw folder"
raw=$(run "$DATA")

mkdir -p "$D/pt"
"$D/passthrough_min" "$DATA" "$D/pt" &
PIDS+=($!)
MOUNTS+=("$D/pt")
wait_mounted "$D/pt"
echo "== passthrough_min"
pt=$(run "$D/pt")
fusermount3 -u "$D/pt"

# cpu PID... — CPU seconds used so far by these processes (and their threads)
cpu() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t $HZ" | awk '{printf "%.3f", $1/$2}'; }

# warm BIN TAG — a one-node mount of BIN, warmed by one unmeasured pass, then measured; sets SH
# (MiB/s), SH_CPU (the mount's CPU-s/GiB), READS and BIG.
warm() {
  local bin=$1 tag=$2 mp c0 c1
  mp=$D/sh-$tag
  mkdir -p "$mp"
  "$bin" mount "file://$DATA" "$mp" --cache-dir "$D/cache-$tag" --cache-size 64G \
    --log-file "$D/shoal-$tag.log" --log-level warn &
  local pid=$!
  PIDS+=($pid)
  MOUNTS+=("$mp")
  wait_mounted "$mp"
  echo "== shoal $tag (one unmeasured pass to warm the cache, then the measured one)"
  fio --name=b --directory="$mp" --rw=read --bs=1M --size="$SIZE" --numjobs="$JOBS" --direct=1 \
    --ioengine=libaio --iodepth=1 >/dev/null
  c0=$(cpu "$pid")
  SH=$(run "$mp")
  c1=$(cpu "$pid")
  SH_CPU=$(awk -v a="$c0" -v b="$c1" -v m="$SH" -v r="$RUNTIME" 'BEGIN { printf "%.2f", (b - a) / (m * r / 1024) }')
  READS=$(awk '$1 == "fuse_reads" { print $2 }' "$mp/.stats")
  BIG=$(awk '$1 == "fuse_read_size_1m" { print $2 }' "$mp/.stats")
  "$bin" umount "$mp"
}

# BASE_BIN: an older shoal measured the same way right before, for a ratio side by side.
if [ -n "${BASE_BIN:-}" ]; then
  warm "$BASE_BIN" base
  base=$SH
  base_cpu=$SH_CPU
fi
warm "$SHOAL" mount
sh=$SH
sh_cpu=$SH_CPU
reads=$READS
big=$BIG

gr="-"
if [ "$GROUP" != 0 ]; then
  G=(--meta "sqlite3://$D/meta.db" --cache-group fb --group-ip 127.0.0.1 --log-level warn)
  MEMBERS=()
  for m in a b; do
    "$SHOAL" serve "file://$DATA" "${G[@]}" --cache-dir "$D/$m.cache" --cache-size 64G \
      --log-file "$D/$m.log" &
    PIDS+=($!)
    MEMBERS+=($!)
  done
  mkdir -p "$D/gr"
  # shellcheck disable=SC2086
  "$SHOAL" mount "file://$DATA" "$D/gr" "${G[@]}" --no-sharing --cache-size 0 $GROUP_FLAGS \
    --log-file "$D/group-mount.log" &
  GM=$!
  PIDS+=($GM)
  MOUNTS+=("$D/gr")
  wait_mounted "$D/gr"
  for i in $(seq 1 100); do
    [ "$("$SHOAL" group --meta "sqlite3://$D/meta.db" --cache-group fb 2>/dev/null | grep -c provider)" -ge 2 ] && break
    sleep 0.1
  done
  echo "== group: a consumer mount of 2 members (one unmeasured pass warms their caches)"
  fio --name=b --directory="$D/gr" --rw=read --bs=1M --size="$SIZE" --numjobs="$JOBS" --direct=1 \
    --ioengine=libaio --iodepth=1 >/dev/null
  c0=$(cpu "$GM")
  m0=$(cpu "${MEMBERS[@]}")
  gr=$(run "$D/gr")
  c1=$(cpu "$GM")
  m1=$(cpu "${MEMBERS[@]}")
  gbytes=$(awk '$1 == "fuse_read_bytes" { print $2 }' "$D/gr/.stats")
  remote=$(awk '$1 == "remotecache_get_bytes" { print $2 }' "$D/gr/.stats")
  via=$(awk '$1 == "remotecache_iorpc_get_bytes" && $2 > 0 { print "IORPC" }' "$D/gr/.stats")
  "$SHOAL" umount "$D/gr"
  gib=$(awk -v m="$gr" -v r="$RUNTIME" 'BEGIN { print m * r / 1024 }')
  gcpu=$(awk -v a="$c0" -v b="$c1" -v g="$gib" 'BEGIN { printf "%.2f", (b - a) / g }')
  mcpu=$(awk -v a="$m0" -v b="$m1" -v g="$gib" 'BEGIN { printf "%.2f", (b - a) / g }')
fi

echo
echo "fio: sequential read, 1 MiB, O_DIRECT, libaio iodepth 1, $JOBS jobs x $SIZE, ${RUNTIME}s"
printf "  %-34s %8s MiB/s\n" "raw folder" "$raw" "passthrough_min" "$pt" "shoal mount (warm, one node)" "$sh" \
  "shoal mount, consumer of 2 members" "$gr"
awk -v r="$raw" -v p="$pt" -v s="$sh" 'BEGIN {
  printf "  shoal / passthrough_min = %.2f\n  shoal / raw = %.2f\n  passthrough_min / raw = %.2f\n", s / p, s / r, p / r
}'
echo "  shoal kernel requests of 1 MiB: $big of $reads; the mount's CPU: $sh_cpu s/GiB"
if [ -n "${BASE_BIN:-}" ]; then
  awk -v b="$base" -v s="$sh" -v p="$pt" -v bc="$base_cpu" -v sc="$sh_cpu" 'BEGIN {
    printf "  BASE_BIN (%s MiB/s, %s CPU-s/GiB): shoal / base = %.2f, base / passthrough_min = %.2f\n", b, bc, s / b, b / p
  }'
fi
if [ "$GROUP" != 0 ]; then
  awk -v g="$gr" -v p="$pt" -v s="$sh" 'BEGIN { printf "  group / passthrough_min = %.2f\n  group / one node = %.2f\n", g / p, g / s }'
  echo "  group: $gcpu CPU-s/GiB in the mount, $mcpu in the members; over ${via:-the TCP pool};" \
    "$((remote / 1048576)) MiB of $((gbytes / 1048576)) MiB read from members"
fi
