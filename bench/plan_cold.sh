#!/usr/bin/env bash
# Access plans, cold (issue 30): the first epoch of a training job, when no member has the data
# yet. Two `shoal serve` members share one network namespace whose only link to the reader's
# namespace is a veth pair capped by `tc tbf` at RATE (member -> reader); the store is a file://
# folder in tmpfs, so a member's fill from it is cheap and the link is the limit. One Python
# reader thread (as a DataLoader worker reads) reads every RECORD-MiB record of FILES files of
# SIZE MiB once, in a random order, three ways, each against freshly started members with EMPTY
# caches:
#   plan   Client.plan with the order told up front (INFLIGHT records fetched ahead);
#   rand   the same order without a plan (seek + readinto: one round trip at a time);
#   seq    sequential order without a plan (readahead on);
# and, first, the link alone (iperf3, 4 streams). Prints MiB/s per mode, each as a fraction of
# the link, and the members' store GETs (each block once per mode: the members, not the reader,
# fill from the store) and the reader's fallbacks to the store (must be 0).
#   sudo bench/plan_cold.sh
# Environment: RATE (1gbit), FILES (2), SIZE (256), RECORD (1), INFLIGHT (16), BUFFER (256, MiB of
# read buffers), SHOAL_BUILD (default: a RelWithDebInfo build in build-bench).
# The issue asks for the file:// store itself behind the link; a file:// store is a local folder
# and has no link, so the cap sits where the bytes of a cold read cross the network: between the
# members and the reader.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-1gbit}
FILES=${FILES:-2}
SIZE=${SIZE:-256}
RECORD=${RECORD:-1}
INFLIGHT=${INFLIGHT:-16}
BUFFER=${BUFFER:-256}
B=${SHOAL_BUILD:-}
if [ -z "$B" ]; then
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=OFF \
    -DSHOAL_WERROR=OFF >/dev/null
  cmake --build build-bench -j"$(nproc)" --target shoal libshoal >/dev/null
  B=$PWD/build-bench
fi
SHOAL=$B/shoal
export SHOAL_LIBRARY=$B/libshoal.so PYTHONPATH=$PWD/python
export SHOAL_GROUP_SECRET=${SHOAL_GROUP_SECRET:-plan-cold-bench-secret-0123456789ab}
PY=/usr/bin/python3
D=$(mktemp -d /tmp/shoal-plancold.XXXXXX)
DATA=$(mktemp -d /dev/shm/shoal-plancold-data.XXXXXX)
P=pc$$
CNS=$P-c
MNS=$P-m
PIDS=()
MPIDS=()
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]:-}" "${MPIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}" "${MPIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  ip netns del "$CNS" 2>/dev/null || true
  ip netns del "$MNS" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "kept $D" >&2; else rm -rf "$D"; fi
  rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the network: the reader's namespace and the members' one, one capped link between ---
ip netns add "$CNS"
ip netns add "$MNS"
ip -n "$CNS" link set lo up
ip -n "$MNS" link set lo up
ip link add "$P-c" netns "$CNS" type veth peer name "$P-v" netns "$MNS"
ip -n "$CNS" addr add 10.78.1.1/24 dev "$P-c"
ip -n "$MNS" addr add 10.78.1.2/24 dev "$P-v"
ip -n "$CNS" link set "$P-c" up
ip -n "$MNS" link set "$P-v" up
ip netns exec "$MNS" tc qdisc add dev "$P-v" root tbf rate "$RATE" burst 1mb latency 50ms

echo "machine: $(nproc) cores, kernel $(uname -r); $(date -u '+%F %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
ip netns exec "$CNS" iperf3 -s -1 -B 10.78.1.1 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
LINK=$(ip netns exec "$MNS" iperf3 -c 10.78.1.1 -P 4 -t 5 -J |
  $PY -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (d["end"]["sum_received"]["bits_per_second"]/8/2**20))')
echo "the link (tbf $RATE, iperf3, 4 streams): $LINK MiB/s"

echo "== data: $FILES files of $SIZE MiB, $RECORD MiB records"
for i in $(seq 1 "$FILES"); do head -c $((SIZE * 1048576)) /dev/urandom >"$DATA/f$i"; done
S=file://$DATA

start_members() { # start_members TAG — two members with empty caches, in group TAG
  local tag=$1 m i
  MPIDS=()
  for m in a b; do
    ip netns exec "$MNS" "$SHOAL" serve "$S" --meta "sqlite3://$D/$tag.db" --cache-group "$tag" \
      --group-ip 10.78.1.2 --cache-dir "$D/$tag.$m.cache" --cache-size 8G \
      --metrics 10.78.1.2:0 --log-file "$D/$tag.$m.log" --log-level info &
    MPIDS+=($!)
  done
  for m in a b; do
    for i in $(seq 1 100); do grep -q ready "$D/$tag.$m.log" 2>/dev/null && break; sleep 0.1; done
    grep -q ready "$D/$tag.$m.log" || { echo "member $tag.$m did not start" >&2; exit 1; }
  done
}

stop_members() {
  local p rc=0
  for p in "${MPIDS[@]}"; do kill -TERM "$p"; done
  for p in "${MPIDS[@]}"; do wait "$p" || rc=$?; done
  MPIDS=()
  [ "$rc" = 0 ] || { echo "a member exited with $rc" >&2; exit 1; }
}

cat >"$D/driver.py" <<'PY'
import random, sys, time
import shoal
storage, meta, group, mode = sys.argv[1:5]
files, size_mib, record_mib, inflight, buffer_mib = map(int, sys.argv[5:10])
REC = record_mib << 20
keys = ["f%d" % (i + 1) for i in range(files)]
recs = [(k, off) for k in keys for off in range(0, size_mib << 20, REC)]
order = recs[:]
random.Random(1).shuffle(order)
c = shoal.Client(storage, meta=meta, cache_group=group, buffer_size="%dM" % buffer_mib,
                 metrics="10.78.1.1:19470")
buf = bytearray(REC)
n = 0
t0 = time.monotonic()
if mode == "plan":
    with c.plan(((k, off, REC) for k, off in order), inflight=inflight) as p:
        for k, off in order:
            n += p.readinto(k, off, buf)
        st = p.stats()
    extra = "plan hits %d misses %d" % (st["hits"], st["misses"])
elif mode == "rand":
    fs = {k: c.open(k, buffering=0, advice="random") for k in keys}
    for k, off in order:
        fs[k].seek(off)
        n += fs[k].readinto(buf)
    for f in fs.values():
        f.close()
    extra = ""
else:
    for k in keys:
        with c.open(k, buffering=0) as f:
            while True:
                got = f.readinto(buf)
                if not got:
                    break
                n += got
    extra = ""
s = time.monotonic() - t0
want = files * (size_mib << 20)
if n != want:
    sys.exit("read %d bytes, want %d" % (n, want))
import urllib.request
text = urllib.request.urlopen("http://10.78.1.1:19470/metrics", timeout=5).read().decode()
def metric(name):
    return sum(float(l.split()[-1]) for l in text.splitlines()
               if l.split(" ")[0].split("{")[0].endswith(name))
print("%.1f %sreader: store GETs %d, fallbacks %d" % (n / 2**20 / s, extra + "; " if extra else "",
      metric("object_get_requests"), metric("remotecache_fallbacks")))
c.close()
PY

declare -A RATE_OF
for mode in plan rand seq; do
  tag="g$mode"
  start_members "$tag"
  out=$(ip netns exec "$CNS" "$PY" "$D/driver.py" "$S" "sqlite3://$D/$tag.db" "$tag" "$mode" \
    "$FILES" "$SIZE" "$RECORD" "$INFLIGHT" "$BUFFER")
  stop_members
  RATE_OF[$mode]=${out%% *}
  printf '  cold %-4s %7s MiB/s = %.2f of the link; %s\n' "$mode" "${out%% *}" \
    "$(echo "${out%% *} / $LINK" | bc -l)" "${out#* }"
done
printf 'plan / rand %.2fx, plan / seq %.2fx (target: plan >= 0.8 of the link)\n' \
  "$(echo "${RATE_OF[plan]} / ${RATE_OF[rand]}" | bc -l)" "$(echo "${RATE_OF[plan]} / ${RATE_OF[seq]}" | bc -l)"
