#!/usr/bin/env bash
# Sequential writes, in one run on this machine [W1, W2]: `cp` of one file into a shoal mount
# against writing the same bytes straight to the store —
#   file://  `dd conv=fsync` into the folder (the mount's close fsyncs too) and a plain `cp`
#            (page cache only, for reference);
#   s3://    a direct multipart upload to s3rver (bench/s3mpu.py: 16 MiB parts, 4 in flight,
#            signed like shoal's) against the mount over the same s3rver.
# The library (Python's Client.open(key, "wb"), 4 MiB writes) runs the same way, and with
# write-through [W3] both the mount (--no-sharing) and the library write into a group of two
# members on this machine, whose CPU is counted as the server's.
# Prints MiB/s, CPU seconds per GiB of the writer side (cp + the mount process, or the direct
# client) and of the servers (s3rver, the members), and the ratio to the direct path.
#   bench/write.sh         (SIZE=1G; RUNS=2 takes the best of each; SHOAL_BIN=... skips the build;
#                           FILE_ONLY=1 stops after the file:// mount; BASE_BIN=... measures
#                           another shoal's mount right after, for a side-by-side ratio)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-1G}
RUNS=${RUNS:-2}
if [ -z "${SHOAL_BIN:-}" ]; then
  cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-release -j"$(nproc)" >/dev/null
  SHOAL_BIN=$PWD/build-release/shoal
fi
SHOAL=$SHOAL_BIN
SRC=$PWD
PY=/usr/bin/python3
HZ=$(getconf CLK_TCK)
D=$(mktemp -d /tmp/shoal-wbench.XXXXXX)
PIDS=()
MNT=$D/mnt
cleanup() {
  umount -l "$MNT" 2>/dev/null || true
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  sleep 0.5
  rm -rf "$D"
}
trap cleanup EXIT INT TERM

port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# ticks PID... — CPU clock ticks used so far by these processes (their threads included)
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo $t; }
now() { date +%s%N; }
row() { printf "%-44s %9s %11s %11s %7s\n" "$@"; }
LIBSO=$(dirname "$SHOAL")/libshoal.so
# libwrite STORAGE KEY [SETTING=VALUE]... — the command by which the library writes the source
# file as KEY (paths here have no spaces: $D is mktemp's).
cat >"$D/libwrite.py" <<'PY'
import sys
import shoal
settings = dict(a.split("=", 1) for a in sys.argv[4:])
buf = bytearray(4 << 20)
with shoal.Client(sys.argv[1], **settings) as c, open(sys.argv[3], "rb", buffering=0) as src:
    with c.open(sys.argv[2], "wb", overwrite=True, buffering=0) as f:
        while True:
            n = src.readinto(buf)
            if not n:
                break
            f.write(memoryview(buf)[:n])
PY
libwrite() { echo env SHOAL_LIBRARY="$LIBSO" PYTHONPATH="$SRC/python" $PY "$D/libwrite.py" "$1" "$2" "$SRCF" "${@:3}"; }
# members URL GROUP FLAGS... — two `shoal serve` members of GROUP; sets MEMBER_PIDS, META.
members() {
  local url=$1 g=$2 i
  shift 2
  META="sqlite3://$D/$g.db"
  MEMBER_PIDS=""
  for i in 1 2; do
    "$SHOAL" serve "$url" --meta "$META" --cache-group "$g" --group-ip 127.0.0.1 \
      --cache-dir "$D/$g-m$i.cache" --log-file "$D/$g-m$i.log" --metrics 127.0.0.1:0 "$@" &
    PIDS+=("$!")
    MEMBER_PIDS="$MEMBER_PIDS $!"
  done
  for i in $(seq 1 100); do
    [ "$("$SHOAL" group --meta "$META" --cache-group "$g" 2>/dev/null | tail -n 1 | awk '{print $3}')" = 2 ] && return 0
    sleep 0.2
  done
  echo "the members of $g did not come up" >&2
  exit 1
}

bytes=$($PY -c "import re,sys; m=re.fullmatch(r'(\d+)([KMG]?)', sys.argv[1]); print(int(m.group(1)) << {'':0,'K':10,'M':20,'G':30}[m.group(2)])" "$SIZE")
mkdir -p /dev/shm/shoal-wbench.$$
SRCF=/dev/shm/shoal-wbench.$$/src.bin
trap 'rm -rf /dev/shm/shoal-wbench.$$; cleanup' EXIT INT TERM
head -c "$bytes" /dev/urandom >"$SRCF"

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %H:%M') UTC"
echo "size: $SIZE from tmpfs; best of $RUNS runs"
row path "MiB/s" "writer s/GiB" "s3rver s/GiB" ratio

# measure NAME SERVER_PIDS CMD... — runs CMD RUNS times, keeps the fastest; writer CPU is CMD's
# own (from time(1)) plus that of the PIDs in EXTRA_PIDS (the mount), server CPU that of
# SERVER_PIDS. Sets MBS, WCPU, SCPU.
measure() {
  local name=$1 spids=$2
  shift 2
  local best=0 r
  for r in $(seq 1 "$RUNS"); do
    sync
    local e0 s0 t0 t1 e1 s1 c
    e0=$(ticks ${EXTRA_PIDS:-} 2>/dev/null || echo 0)
    s0=$(ticks $spids 2>/dev/null || echo 0)
    t0=$(now)
    if ! { /usr/bin/time -o "$D/time" -f "%U %S" "$@" >/dev/null 2>"$D/err"; }; then
      echo "$name failed: $(tail -n 3 "$D/err")" >&2
      exit 1
    fi
    c=$(tail -n 1 "$D/time")
    t1=$(now)
    e1=$(ticks ${EXTRA_PIDS:-} 2>/dev/null || echo 0)
    s1=$(ticks $spids 2>/dev/null || echo 0)
    local ns=$((t1 - t0))
    local mbs
    mbs=$(echo "$bytes $ns" | awk '{printf "%.0f", $1 / 1048576 / ($2 / 1e9)}')
    if [ "$mbs" -gt "$best" ]; then
      best=$mbs
      WCPU=$(echo "$c $((e1 - e0)) $HZ $bytes" | awk '{printf "%.2f", ($1 + $2 + $3 / $4) / ($5 / 1073741824)}')
      SCPU=$(echo "$((s1 - s0)) $HZ $bytes" | awk '{printf "%.2f", ($1 / $2) / ($3 / 1073741824)}')
    fi
  done
  MBS=$best
}

# --- file:// ---------------------------------------------------------------------------------
STORE=$D/store
mkdir -p "$STORE" "$MNT"
EXTRA_PIDS="" measure "file://: dd conv=fsync into the folder" "" \
  dd if="$SRCF" of="$STORE/direct.bin" bs=1M conv=fsync status=none
direct=$MBS
row "file://: dd conv=fsync (direct)" "$MBS" "$WCPU" "-" 1.00
EXTRA_PIDS="" measure "file://: cp (page cache only)" "" cp "$SRCF" "$STORE/plain.bin"
row "file://: cp, no fsync (reference)" "$MBS" "$WCPU" "-" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
"$SHOAL" mount "file://$STORE" "$MNT" --cache-dir "$D/cache" --log-file "$D/mount-file.log" \
  --metrics 127.0.0.1:0 --allow-overwrite -d
mpid=$(grep -o 'shoal\[[0-9]*\]' "$D/mount-file.log" | tail -n 1 | tr -dc 0-9)
PIDS+=("$mpid")
EXTRA_PIDS=$mpid measure "file://: cp into the mount" "" cp "$SRCF" "$MNT/viamount.bin"
cmp -s "$SRCF" "$STORE/viamount.bin" || { echo "the mount's copy differs" >&2; exit 1; }
row "file://: cp into the mount" "$MBS" "$WCPU" "-" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
"$SHOAL" umount "$MNT"
if [ -n "${BASE_BIN:-}" ]; then
  mine=$MBS
  "$BASE_BIN" mount "file://$STORE" "$MNT" --cache-dir "$D/cache-base" --log-file "$D/mount-base.log" \
    --allow-overwrite -d
  mpid=$(grep -o 'shoal\[[0-9]*\]' "$D/mount-base.log" | tail -n 1 | tr -dc 0-9)
  PIDS+=("$mpid")
  EXTRA_PIDS=$mpid measure "file://: cp into a BASE_BIN mount" "" cp "$SRCF" "$MNT/viabase.bin"
  cmp -s "$SRCF" "$STORE/viabase.bin" || { echo "the base mount's copy differs" >&2; exit 1; }
  row "file://: cp into a BASE_BIN mount" "$MBS" "$WCPU" "-" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
  "$BASE_BIN" umount "$MNT"
  echo "mount / BASE_BIN mount = $(echo "$mine $MBS" | awk '{printf "%.2f", $1/$2}')"
fi
[ "${FILE_ONLY:-0}" = 0 ] || exit 0
# shellcheck disable=SC2046
EXTRA_PIDS="" measure "file://: library" "" $(libwrite "file://$STORE" vialib.bin)
cmp -s "$SRCF" "$STORE/vialib.bin" || { echo "the library's copy differs" >&2; exit 1; }
row "file://: library (Python, 4 MiB writes)" "$MBS" "$WCPU" "-" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
members "file://$STORE" wbf
"$SHOAL" mount "file://$STORE" "$MNT" --cache-dir "$D/cache-wt" --log-file "$D/mount-wt.log" \
  --meta "$META" --cache-group wbf --no-sharing --metrics 127.0.0.1:0 --allow-overwrite -d
mpid=$(grep -o 'shoal\[[0-9]*\]' "$D/mount-wt.log" | tail -n 1 | tr -dc 0-9)
PIDS+=("$mpid")
EXTRA_PIDS=$mpid measure "file://: cp into the mount, write-through" "$MEMBER_PIDS" \
  cp "$SRCF" "$MNT/wt.bin"
row "file://: cp into the mount + write-through" "$MBS" "$WCPU" "$SCPU" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
grep -o "push: wt.bin: .*" "$D/mount-wt.log" | tail -n 1
"$SHOAL" umount "$MNT"
# shellcheck disable=SC2046
EXTRA_PIDS="" measure "file://: library, write-through" "$MEMBER_PIDS" \
  $(libwrite "file://$STORE" wtlib.bin meta="$META" cache_group=wbf)
row "file://: library + write-through" "$MBS" "$WCPU" "$SCPU" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
# shellcheck disable=SC2086
kill $MEMBER_PIDS

# --- s3:// (s3rver) ---------------------------------------------------------------------------
JS=$SRC/.deps/node_modules/s3rver/bin/s3rver.js
if [ ! -f "$JS" ]; then
  echo "s3://: skipped (no s3rver in .deps; scripts/setup.sh installs it)"
  exit 0
fi
S3P=$(port)
mkdir -p "$D/s3data"
node --openssl-legacy-provider "$JS" -d "$D/s3data" -a 127.0.0.1 -p "$S3P" --configure-bucket wbench \
  --silent >"$D/s3rver.log" 2>&1 &
SP=$!
PIDS+=("$SP")
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
for i in $(seq 1 100); do curl -sf "http://127.0.0.1:$S3P/wbench?list-type=2&max-keys=1" >/dev/null && break; sleep 0.1; done
EXTRA_PIDS="" measure "s3://: direct multipart upload" "$SP" \
  $PY bench/s3mpu.py --endpoint "http://127.0.0.1:$S3P" --bucket wbench --key direct.bin --file "$SRCF"
direct=$MBS
row "s3://: direct multipart (s3mpu.py)" "$MBS" "$WCPU" "$SCPU" 1.00
"$SHOAL" mount s3://wbench "$MNT" --endpoint "http://127.0.0.1:$S3P" --cache-dir "$D/cache2" \
  --log-file "$D/mount-s3.log" --metrics 127.0.0.1:0 --allow-overwrite -d
mpid=$(grep -o 'shoal\[[0-9]*\]' "$D/mount-s3.log" | tail -n 1 | tr -dc 0-9)
PIDS+=("$mpid")
EXTRA_PIDS=$mpid measure "s3://: cp into the mount" "$SP" cp "$SRCF" "$MNT/viamount.bin"
row "s3://: cp into the mount" "$MBS" "$WCPU" "$SCPU" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
grep -o "uploaded viamount.bin.*" "$D/mount-s3.log" | tail -n 1
"$SHOAL" umount "$MNT"
S3=(--endpoint "http://127.0.0.1:$S3P")
# shellcheck disable=SC2046
EXTRA_PIDS="" measure "s3://: library" "$SP" \
  $(libwrite s3://wbench vialib.bin endpoint="http://127.0.0.1:$S3P")
row "s3://: library (Python, 4 MiB writes)" "$MBS" "$WCPU" "$SCPU" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
members s3://wbench wbs "${S3[@]}"
"$SHOAL" mount s3://wbench "$MNT" "${S3[@]}" --cache-dir "$D/cache-wt2" --log-file "$D/mount-wt2.log" \
  --meta "$META" --cache-group wbs --no-sharing --metrics 127.0.0.1:0 --allow-overwrite -d
mpid=$(grep -o 'shoal\[[0-9]*\]' "$D/mount-wt2.log" | tail -n 1 | tr -dc 0-9)
PIDS+=("$mpid")
EXTRA_PIDS=$mpid measure "s3://: cp into the mount, write-through" "$SP $MEMBER_PIDS" \
  cp "$SRCF" "$MNT/wt.bin"
row "s3://: cp into the mount + write-through" "$MBS" "$WCPU" "$SCPU" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
grep -o "push: wt.bin: .*" "$D/mount-wt2.log" | tail -n 1
"$SHOAL" umount "$MNT"
# shellcheck disable=SC2046
EXTRA_PIDS="" measure "s3://: library, write-through" "$SP $MEMBER_PIDS" \
  $(libwrite s3://wbench wtlib.bin endpoint="http://127.0.0.1:$S3P" meta="$META" cache_group=wbs)
row "s3://: library + write-through" "$MBS" "$WCPU" "$SCPU" "$(echo "$MBS $direct" | awk '{printf "%.2f", $1/$2}')"
