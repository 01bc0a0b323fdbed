#!/usr/bin/env bash
# Python reading through a cache group two ways, in one run on the same data:
#   lib    shoal.Client.readinto (libshoal in the Python process, a group consumer), 4 MiB reads
#          into preallocated bytearrays;
#   mount  the same Python loop over a shoal mount that is itself a consumer of the same group
#          (--no-sharing --cache-size 0): open(path, "rb", buffering=0).readinto, 4 MiB reads;
# with THREADS Python threads, each reading its own file from start to end, ROUNDS alternating
# rounds after one unmeasured pass that fills the members' caches. Prints throughput and the CPU
# seconds per GiB of the reading side (the Python process, plus the mount process for "mount")
# and of the two members. Both readers get --buffer-size BUFFER, well below the data, so that
# passes go to the group rather than to the reader's own buffers. Root and /dev/fuse needed.
# Environment: SHOAL_BUILD (default: a RelWithDebInfo build in build-bench), FILES (4), SIZE per
# file in MiB (256), THREADS (4), ROUNDS (3), BUFFER in MiB (64), DATA_DIR (a fresh folder under
# /dev/shm), PROFILE=1 (perf of each path first).
#
# `bench/python.sh fsspec` measures shoal:// instead (no root, no mount): on a warm 2-member
# group, fsspec's cat_file and open().read() against Client.read of the same object (SIZE MiB,
# ROUNDS rounds), and fs.cat of NSMALL objects of 1 MiB (256) against a loop of cat_file.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = fsspec ]; then
  exec bash bench/python_fsspec.sh
fi
[ "$(id -u)" -eq 0 ] && [ -c /dev/fuse ] || { echo "bench: needs root and /dev/fuse" >&2; exit 1; }
FILES=${FILES:-4}
SIZE=${SIZE:-256}
THREADS=${THREADS:-4}
ROUNDS=${ROUNDS:-3}
BUFFER=${BUFFER:-64}
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
MP=$D/mnt
MOUNT_PID=
cleanup() {
  trap - EXIT INT TERM
  mountpoint -q "$MP" 2>/dev/null && { "$SHOAL" umount "$MP" 2>/dev/null || umount -l "$MP" || true; }
  local p
  # The mount process ends by itself once unmounted; the members get SIGTERM.
  for p in "${PIDS[@]}"; do [ "$p" = "$MOUNT_PID" ] || kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$D"
  [ -n "${DATA_DIR:-}" ] || rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== data: $FILES files of $SIZE MiB in $DATA"
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
MEMBERS="${PIDS[*]}"
for i in $(seq 1 100); do
  [ "$("$SHOAL" group "${G[@]}" 2>/dev/null | tail -n 1 | awk '{print $3}')" = 2 ] && break
  sleep 0.2
done
mkdir -p "$MP"
"$SHOAL" mount "$S" "$MP" "${G[@]}" --no-sharing --cache-size 0 --buffer-size "$BUFFER" \
  --log-file "$D/mount.log" --log-level warn &
MOUNT_PID=$!
PIDS+=("$MOUNT_PID")
for i in $(seq 1 200); do mountpoint -q "$MP" && break; sleep 0.1; done
mountpoint -q "$MP" || { echo "bench: the mount did not come up" >&2; exit 1; }

# The driver: one Python process for the whole run, as a training job is, so that the library's
# read buffers are faulted in once (by the warm pass) and not in every measured pass.
cat >"$D/driver.py" <<'PY'
import os, resource, sys, threading, time
storage, meta, mp = sys.argv[1:4]
threads, files, rounds = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
members = [int(p) for p in sys.argv[7].split()]
mount_pid, only, buffer_mib = int(sys.argv[8]), sys.argv[9], sys.argv[10]
CHUNK = 4 << 20
HZ = os.sysconf("SC_CLK_TCK")
keys = ["f%d" % (i + 1) for i in range(files)]
import shoal
c = shoal.Client(storage, meta=meta, cache_group="bench", buffer_size=buffer_mib)

def cpu_of(pids):
    t = 0
    for p in pids:
        with open("/proc/%d/stat" % p) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        t += int(fields[11]) + int(fields[12])
    return t / HZ

def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def read_pass(mode):
    total = [0] * threads
    def reader(t):
        buf = bytearray(CHUNK)
        for k in keys[t::threads]:
            # The same loop both ways: open once, readinto 4 MiB at a time.
            if mode == "lib":
                f = c.open(k, buffering=0)
            else:
                f = open(os.path.join(mp, k), "rb", buffering=0)
                # The kernel keeps a mount's file pages: drop them, so that every pass measures
                # the read path and not the page cache.
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    total[t] += n
    m0, f0, c0, t0 = cpu_of(members), cpu_of([mount_pid]), self_cpu(), time.monotonic()
    th = [threading.Thread(target=reader, args=(t,)) for t in range(threads)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    secs = time.monotonic() - t0
    client = self_cpu() - c0 + (cpu_of([mount_pid]) - f0 if mode == "mount" else 0)
    return sum(total), secs, client, cpu_of(members) - m0

read_pass("lib")  # warm: fills the members' caches and faults in the read buffers
modes = ["lib", "mount"] if only == "both" else [only]
acc = {m: [0, 0.0, 0.0, 0.0] for m in modes}
for r in range(rounds):
    for mode in modes:
        b, s, cc, mc = read_pass(mode)
        print("  round %d %-5s %6.0f MiB/s  client cpu %.2f s  members cpu %.2f s"
              % (r + 1, mode, b / 2**20 / s, cc, mc), flush=True)
        for i, v in enumerate((b, s, cc, mc)):
            acc[mode][i] += v
print()
print("Python, %d threads, 4 MiB readinto, %d files x %d MiB, %d rounds (warm group of 2), "
      "buffer-size %s MiB" % (threads, files, os.path.getsize(os.path.join(mp, keys[0])) >> 20,
                              rounds, buffer_mib))
print("  %-30s %9s %14s %15s" % ("path", "MiB/s", "client s/GiB", "members s/GiB"))
names = {"lib": "shoal.Client (RawFile.readinto)", "mount": "shoal mount + open().readinto"}
for m in modes:
    b, s, cc, mc = acc[m]
    print("  %-30s %9.0f %14.2f %15.2f" % (names[m], b / 2**20 / s, cc / (b / 2**30),
                                          mc / (b / 2**30)))
if len(modes) == 2:
    (bl, sl, cl, _), (bm, sm, cm, _) = acc["lib"], acc["mount"]
    print("  library / mount: throughput %.2fx, client CPU per GiB %.2fx"
          % ((bl / sl) / (bm / sm), (cl / bl) / (cm / bm)))
c.close()
PY

driver() { # driver MODE ROUNDS
  "$PY" "$D/driver.py" "$S" "$META" "$MP" "$THREADS" "$FILES" "$2" "$MEMBERS" "$MOUNT_PID" "$1" \
    "$BUFFER"
}
if [ -n "${PROFILE:-}" ]; then
  # PROFILE=1: where the reading side's CPU goes (perf: the Python process with libshoal for
  # "lib", the mount process for "mount").
  perf record -q -o "$D/perf.lib" -- "$PY" "$D/driver.py" "$S" "$META" "$MP" "$THREADS" \
    "$FILES" 1 "$MEMBERS" "$MOUNT_PID" lib "$BUFFER" >/dev/null 2>&1
  echo "== perf: the Python process, library path (top symbols)"
  perf report -q -i "$D/perf.lib" --sort dso,sym --stdio 2>/dev/null | grep -v '^$' | head -n 15 || true
  perf record -q -o "$D/perf.mount" -p "$MOUNT_PID" -- "$PY" "$D/driver.py" "$S" "$META" "$MP" \
    "$THREADS" "$FILES" 1 "$MEMBERS" "$MOUNT_PID" mount "$BUFFER" >/dev/null 2>&1
  echo "== perf: the mount process, mount path (top symbols)"
  perf report -q -i "$D/perf.mount" --sort dso,sym --stdio 2>/dev/null | grep -v '^$' | head -n 15 || true
fi
echo "== $ROUNDS rounds, alternating"
driver both "$ROUNDS"
