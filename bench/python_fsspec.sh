#!/usr/bin/env bash
# `bench/python.sh fsspec` (see there): shoal:// on a warm group of 2 members over a file://
# store in /dev/shm. Environment: SHOAL_BUILD (default: a RelWithDebInfo build in build-bench),
# SIZE of the large object in MiB (256), ROUNDS (5), NSMALL 1 MiB objects (256). POPULATE_AB=1:
# then ROUNDS more rounds of the loop and fs.cat with the pre-fault of fresh bytes
# (MADV_POPULATE_WRITE) off and on, alternating, with the client's and the members' CPU per GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-256}
ROUNDS=${ROUNDS:-5}
NSMALL=${NSMALL:-256}
B=${SHOAL_BUILD:-}
if [ -z "$B" ]; then
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=OFF \
    -DSHOAL_WERROR=OFF >/dev/null
  cmake --build build-bench -j"$(nproc)" --target shoal libshoal >/dev/null
  B=$PWD/build-bench
fi
SHOAL=$B/shoal
export SHOAL_LIBRARY=$B/libshoal.so PYTHONPATH=$PWD/python
D=$(mktemp -d /tmp/shoal-bench.XXXXXX)
DATA=$(mktemp -d /dev/shm/shoal-bench-data.XXXXXX)
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$D" "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

head -c $((SIZE * 1048576)) /dev/urandom >"$DATA/big"
mkdir "$DATA/small"
for i in $(seq -w 1 "$NSMALL"); do head -c 1048576 /dev/urandom >"$DATA/small/s$i"; done
META=sqlite3://$D/meta.db
G=(--meta "$META" --cache-group bench)
for m in a b; do
  "$SHOAL" serve "file://$DATA" "${G[@]}" --group-ip 127.0.0.1 --cache-dir "$D/$m.cache" \
    --cache-size 64G --log-file "$D/$m.log" --log-level warn &
  PIDS+=($!)
done
for i in $(seq 1 100); do
  [ "$("$SHOAL" group "${G[@]}" 2>/dev/null | tail -n 1 | awk '{print $3}')" = 2 ] && break
  sleep 0.2
done

/usr/bin/python3 - "file://$DATA" "$META" "$ROUNDS" "${PIDS[*]}" "${POPULATE_AB:-}" <<'PY'
import os, resource, sys, time
import fsspec, shoal
storage, meta, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
members, populate_ab = [int(p) for p in sys.argv[4].split()], sys.argv[5]
fs = fsspec.filesystem("shoal", storage=storage, meta=meta, cache_group="bench")
c = fs.client
small = fs.find("small")
size = c.stat("big").size

def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0

c.read("big")  # warm: the members' caches, the reader's buffers
fs.cat(small)
best = {"read": 1e9, "cat_file": 1e9, "open": 1e9, "cat": 1e9, "loop": 1e9}

def open_read():
    with fs.open("big", "rb") as f:
        f.read()
for r in range(rounds):
    best["read"] = min(best["read"], timed(lambda: c.read("big")))
    best["cat_file"] = min(best["cat_file"], timed(lambda: fs.cat_file("big")))
    best["open"] = min(best["open"], timed(open_read))
    best["cat"] = min(best["cat"], timed(lambda: fs.cat(small)))
    best["loop"] = min(best["loop"], timed(lambda: [fs.cat_file(p) for p in small]))
mib = size / 2**20
print("warm group of 2, best of %d rounds" % rounds)
print("  Client.read of %d MiB      %7.0f MiB/s" % (mib, mib / best["read"]))
print("  fs.cat_file of the same    %7.0f MiB/s   ratio %.2fx" %
      (mib / best["cat_file"], best["read"] / best["cat_file"]))
print("  fs.open().read() of it     %7.0f MiB/s   ratio %.2fx" %
      (mib / best["open"], best["read"] / best["open"]))
print("  fs.cat of %d x 1 MiB      %7.0f MiB/s" % (len(small), len(small) / best["cat"]))
print("  sequential cat_file loop   %7.0f MiB/s   fs.cat / loop %.2fx" %
      (len(small) / best["loop"], best["loop"] / best["cat"]))

def cpu_of(pids):
    t = 0
    for p in pids:
        with open("/proc/%d/stat" % p) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        t += int(fields[11]) + int(fields[12])
    return t / os.sysconf("SC_CLK_TCK")

def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
if populate_ab:
    madvise, acc = shoal._madvise, {}
    for r in range(rounds):
        for pop in (0, 1):
            shoal._madvise = madvise if pop else None
            for mode in ("loop", "cat"):
                m0, s0, t0 = cpu_of(members), self_cpu(), time.monotonic()
                if mode == "cat":
                    fs.cat(small)
                else:
                    [fs.cat_file(p) for p in small]
                a = acc.setdefault((pop, mode), [0.0, 0.0, 0.0])
                a[0] += time.monotonic() - t0
                a[1] += self_cpu() - s0
                a[2] += cpu_of(members) - m0
    shoal._madvise = madvise
    gib = rounds * len(small) / 1024
    print("pre-fault of fresh bytes off/on, %d alternating rounds:" % rounds)
    for (pop, mode), (w, cc, mc) in sorted(acc.items()):
        print("  populate %-3s %-4s %7.0f MiB/s  client %.2f CPU-s/GiB  members %.2f CPU-s/GiB"
              % ("on" if pop else "off", mode, gib * 1024 / w, cc / gib, mc / gib))
    for pop in (0, 1):
        print("  populate %-3s fs.cat / loop %.2fx" % ("on" if pop else "off",
                                                     acc[(pop, "loop")][0] / acc[(pop, "cat")][0]))
c.close()
PY
