#!/usr/bin/env bash
# Cold against warm reads, in one run on this machine [G4, L1]:
#   group  a group of two `shoal serve` members over a file:// store (tmpfs), read by a consumer
#          (`shoal warmup --storage ... --cache-group`, which asks each block's owner for it):
#          first with the members' caches empty (store -> owner -> client: the owner downloads,
#          checks, writes its cache file and answers) and then again, warm;
#   local  one long-lived process with the library (shoal.Client in Python) and a local disk
#          cache reading DATA_MIB cold (store -> buffers -> cache files) and then warm; CPU
#          seconds of the reading itself, after the process started and faulted in its buffers.
# Prints MiB/s and CPU seconds per GiB (reader, members) and the cold/warm ratio.
#   bench/cold.sh
# Environment: DATA_MIB (1024), THREADS (16), FLAGS (e.g. --use-iorpc for the group run),
# SHOAL_BUILD (a build folder with shoal and libshoal.so; default: a Release build here).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_MIB=${DATA_MIB:-1024}
THREADS=${THREADS:-16}
FLAGS=${FLAGS:-}
B=${SHOAL_BUILD:-}
if [ -z "$B" ]; then
  cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-release -j"$(nproc)" --target shoal libshoal >/dev/null
  B=$PWD/build-release
fi
SHOAL=$B/shoal
export SHOAL_LIBRARY=$B/libshoal.so PYTHONPATH=$PWD/python
PY=/usr/bin/python3
HZ=$(getconf CLK_TCK)
D=$(mktemp -d /tmp/shoal-cold.XXXXXX)
DATA=$(mktemp -d /dev/shm/shoal-cold-data.XXXXXX)
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  rm -rf "$D" "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cpu() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t $HZ" | awk '{printf "%.3f", $1/$2}'; }

echo "machine: $(nproc) cores, kernel $(uname -r); $(date -u '+%F %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
NOBJ=$((DATA_MIB / 64))
mkdir -p "$DATA/d"
for i in $(seq 0 $((NOBJ - 1))); do head -c $((64 * 1048576)) /dev/urandom >"$DATA/d/o$i"; done
# read first, unmeasured, by the long-lived process: its buffers are faulted in once, as in a
# process that has been running for a while
mkdir -p "$DATA/p"
for i in 0 1 2 3 4 5; do head -c $((64 * 1048576)) /dev/urandom >"$DATA/p/o$i"; done
S=file://$DATA
echo "data: $NOBJ objects of 64 MiB in $DATA (tmpfs); caches in $D ($(df --output=source "$D" | tail -n 1))"

# --- group: store -> owner -> client (the members' caches never see the p/ objects) ---
META=sqlite3://$D/meta.db
MEMBERS=()
for m in a b; do
  "$SHOAL" serve "$S" --meta "$META" --cache-group cold --group-ip 127.0.0.1 --cache-dir "$D/$m.cache" \
    --cache-size 64G --log-file "$D/$m.log" &
  PIDS+=($!)
  MEMBERS+=($!)
done
for i in $(seq 1 100); do
  [ "$("$SHOAL" group --meta "$META" --cache-group cold 2>/dev/null | grep -c provider)" -ge 2 ] && break
  sleep 0.1
done
pass() { # pass LABEL — one warmup pass through the owners; prints a row
  local m0 m1 t0 t1 out
  m0=$(cpu "${MEMBERS[@]}")
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  out=$( { /usr/bin/time -f "%U %S" "$SHOAL" warmup --storage "$S" --prefix d/ --meta "$META" --cache-group cold \
    --threads "$THREADS" $FLAGS --log-level error >/dev/null; } 2>&1)
  t1=$(date +%s.%N)
  m1=$(cpu "${MEMBERS[@]}")
  awk -v l="$1" -v t0="$t0" -v t1="$t1" -v mib="$DATA_MIB" -v c="$(echo "$out" | tail -n 1)" -v m0="$m0" -v m1="$m1" 'BEGIN {
    split(c, u, " "); g = mib / 1024
    printf "  %-28s %7.0f MiB/s  client %.2f CPU-s/GiB  members %.2f CPU-s/GiB\n", l, mib / (t1 - t0), (u[1] + u[2]) / g, (m1 - m0) / g
    print mib / (t1 - t0) > "/dev/stderr" }' 2>>"$D/rates"
}
echo "== group of 2 members, read by a consumer (shoal warmup --cache-group, $THREADS threads${FLAGS:+, $FLAGS})"
pass "cold (store -> owner -> client)"
pass "warm (owner's cache -> client)"
awk 'NR == 1 { c = $1 } NR == 2 { printf "  cold / warm = %.2f\n", c / $1 }' "$D/rates"
for p in "${MEMBERS[@]}"; do kill -TERM "$p"; wait "$p" 2>/dev/null || true; done
PIDS=()

# --- local: one long-lived process with a disk cache ---
echo "== one long-lived process (shoal.Client, local disk cache): store -> buffers -> cache files"
$PY - "$S" "$D/local.cache" "$NOBJ" <<'PY'
import resource, sys, time
import shoal
store, cache, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = shoal.Client(store, cache_dir=cache, cache_size="64G", log_level="error")
buf = bytearray(4 << 20)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def one_pass(prefix="d", n=n):
    total = 0
    for i in range(n):
        off = 0
        while True:
            got = c.readinto("%s/o%d" % (prefix, i), off, buf)
            total += got
            off += got
            if got < len(buf):
                break
    return total
one_pass("p", 6)
rates = []
for label in ("cold", "warm"):
    c0, t0 = cpu(), time.monotonic()
    total = one_pass()
    c1, t1 = cpu(), time.monotonic()
    g = total / 2**30
    rates.append(total / 2**20 / (t1 - t0))
    print("  %-28s %7.0f MiB/s  %.2f CPU-s/GiB" % (label, rates[-1], (c1 - c0) / g))
print("  cold / warm = %.2f" % (rates[0] / rates[1]))
c.close()
PY
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
