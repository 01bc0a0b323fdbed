#!/usr/bin/env bash
# Access plans (docs/python.md, "Access plans"): one Python reader thread, as a DataLoader worker
# reads, over RECORD-MiB records of a warm 2-member group on loopback, three ways in one process:
#   seq    the records in sequential order (RawFile.readinto, readahead on);
#   rand   the same records in a random order, no plan (RawFile per object, seek + readinto);
#   plan   the same random order through Client.plan (the order told up front);
# ROUNDS alternating rounds after one unmeasured sequential pass that fills the members' caches.
# Prints MiB/s per mode and the ratios plan/seq and plan/rand (the issue's targets: >= 0.9 and
# >= 1.5), with the plan's hits and misses. The reader gets --buffer-size BUFFER, below the
# data, so that passes go to the group and not to the reader's own buffers. No root needed.
# Environment: SHOAL_BUILD (default: a RelWithDebInfo build in build-bench), FILES (4), SIZE per
# file in MiB (256), RECORD in MiB (1), ROUNDS (2), BUFFER in MiB (256), INFLIGHT (8), DATA_DIR (a
# fresh folder under /dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-4}
SIZE=${SIZE:-256}
RECORD=${RECORD:-1}
ROUNDS=${ROUNDS:-2}
BUFFER=${BUFFER:-256}
INFLIGHT=${INFLIGHT:-8}
B=${SHOAL_BUILD:-}
if [ -z "$B" ]; then
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=OFF \
    -DSHOAL_WERROR=OFF >/dev/null
  cmake --build build-bench -j"$(nproc)" --target shoal libshoal >/dev/null
  B=$PWD/build-bench
fi
SHOAL=$B/shoal
export SHOAL_LIBRARY=$B/libshoal.so PYTHONPATH=$PWD/python
PY=/usr/bin/python3

D=$(mktemp -d /tmp/shoal-bench.XXXXXX)
DATA=${DATA_DIR:-$(mktemp -d /dev/shm/shoal-bench-data.XXXXXX)}
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$D"
  [ -n "${DATA_DIR:-}" ] || rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== data: $FILES files of $SIZE MiB in $DATA, $RECORD MiB records"
for i in $(seq 1 "$FILES"); do
  [ -f "$DATA/f$i" ] || head -c $((SIZE * 1048576)) /dev/urandom >"$DATA/f$i"
done
S=file://$DATA
META=sqlite3://$D/meta.db
G=(--meta "$META" --cache-group bench)
for m in a b; do
  "$SHOAL" serve "$S" "${G[@]}" --group-ip 127.0.0.1 --cache-dir "$D/$m.cache" --cache-size 64G \
    --log-file "$D/$m.log" --log-level warn &
  PIDS+=($!)
done
for i in $(seq 1 100); do
  [ "$("$SHOAL" group "${G[@]}" 2>/dev/null | tail -n 1 | awk '{print $3}')" = 2 ] && break
  sleep 0.2
done

cat >"$D/driver.py" <<'PY'
import random, sys, time
import shoal
storage, meta = sys.argv[1:3]
files, size_mib, record_mib, rounds, buffer_mib, inflight = map(int, sys.argv[3:9])
REC = record_mib << 20
keys = ["f%d" % (i + 1) for i in range(files)]
recs = [(k, off) for k in keys for off in range(0, size_mib << 20, REC)]
c = shoal.Client(storage, meta=meta, cache_group="bench", buffer_size="%dM" % buffer_mib)
buf = bytearray(REC)

def seq():
    n = 0
    for k in keys:
        with c.open(k, buffering=0) as f:
            while True:
                got = f.readinto(buf)
                if not got:
                    break
                n += got
    return n

def rand(order):
    files = {k: c.open(k, buffering=0, advice="random") for k in keys}
    n = 0
    for k, off in order:
        f = files[k]
        f.seek(off)
        n += f.readinto(buf)
    for f in files.values():
        f.close()
    return n

def planned(order, stats):
    n = 0
    with c.plan(((k, off, REC) for k, off in order), inflight=inflight) as p:
        for k, off in order:
            n += p.readinto(k, off, buf)
        stats.update(p.stats())
    return n

def timed(fn, *a):
    t0 = time.monotonic()
    n = fn(*a)
    return n, time.monotonic() - t0

seq()  # warm: the members' caches fill, the read buffers are faulted in
acc = {"seq": [0, 0.0], "rand": [0, 0.0], "plan": [0, 0.0]}
hits = misses = 0
for r in range(rounds):
    order = recs[:]
    random.Random(r).shuffle(order)
    st = {}
    for mode, fn, args in (("seq", seq, ()), ("rand", rand, (order,)),
                           ("plan", planned, (order, st))):
        n, s = timed(fn, *args)
        acc[mode][0] += n
        acc[mode][1] += s
        print("  round %d %-4s %7.0f MiB/s" % (r + 1, mode, n / 2**20 / s), flush=True)
    hits += st["hits"]
    misses += st["misses"]
print()
print("one reader thread, %d MiB records, %d files x %d MiB (warm group of 2 on loopback), "
      "buffer-size %d MiB, %d rounds" % (record_mib, files, size_mib, buffer_mib, rounds))
rate = {m: v[0] / 2**20 / v[1] for m, v in acc.items()}
for m in ("seq", "rand", "plan"):
    print("  %-4s %7.0f MiB/s" % (m, rate[m]))
print("  plan / seq %.2fx, plan / rand %.2fx; plan hits %d, misses %d"
      % (rate["plan"] / rate["seq"], rate["plan"] / rate["rand"], hits, misses))
c.close()
PY
"$PY" "$D/driver.py" "$S" "$META" "$FILES" "$SIZE" "$RECORD" "$ROUNDS" "$BUFFER" "$INFLIGHT"
