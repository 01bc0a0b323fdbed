#!/usr/bin/env bash
# A group behind real links, in one run on this machine [G2, T1, R1]: N members (N = 1..4), each in
# its own network namespace behind a veth link whose member-to-client direction is capped with
# `tc tbf` at RATE, and one client in another namespace reading every member's blocks with
# `shoal bench`, over the TCP pool and over IORPC. Prints what one link delivers alone (iperf3,
# and shoal with one member), what the group delivers, and the ratio to N links.
#
# The blocks a member owns follow weighted rendezvous hashing, so members hold unequal shares, and
# a reader that waits on each block it asked for cannot go faster than the member with the largest
# share allows: N x link x (mean share / largest share). The script prints that bound too, from
# the bytes each member served; a data set of many blocks keeps the shares close (4096 blocks over
# 4 members: the largest share is typically 2-3 % above the mean).
#   sudo bench/scale.sh
# Environment: RATE (tc rate, 1gbit), BS (block size, 1M), DATA_MIB (4096), DUR seconds (8),
# RAMP (3), THREADS (16 per member), NS (member counts, "1 2 3 4"), SHOAL_BIN (skips the build).
# MODE=spread (issue 29) reads through the client's read path instead (tests/tools/readers.c,
# SHOAL_READERS, byte-checked, THREADS in flight in all), once with spread reads off
# (SHOAL_SPREAD_COPIES=1) and once on, side by side, over the pool and IORPC; then 8 `shoal cat`
# processes read one 1 GiB object from start to end at once (ONE_MIB, 1024), both ways
# (SPREAD_BUSY, 2, is the spread threshold used there: a cat has few reads in flight). Members
# reach each other through the client's namespace, so a peer fill crosses the owner's capped link.
# CAT_FLAGS adds flags to those 8 cats (e.g. "--prefetch 8"); ONE_ONLY=1 skips the random reads.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench: needs root (network namespaces)" >&2; exit 1; }
RATE=${RATE:-1gbit}
BS=${BS:-1M}
DATA_MIB=${DATA_MIB:-4096}
DUR=${DUR:-8}
RAMP=${RAMP:-3}
THREADS=${THREADS:-16}
NS=${NS:-"1 2 3 4"}
MAXN=$(echo "$NS" | tr ' ' '\n' | sort -n | tail -n 1)
MODE=${MODE:-bench}
ONE_MIB=${ONE_MIB:-1024}
SPREAD_BUSY=${SPREAD_BUSY:-2}
CAT_FLAGS=${CAT_FLAGS:-}
ONE_ONLY=${ONE_ONLY:-0}
export SHOAL_IORPC_SCALE_PERIOD=${SHOAL_IORPC_SCALE_PERIOD:-250ms}
export SHOAL_GROUP_SECRET=${SHOAL_GROUP_SECRET:-scale-bench-secret-0123456789abcdef}
if [ -z "${SHOAL_BIN:-}" ]; then
  ./scripts/setup.sh
  cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-release -j"$(nproc)" --target shoal shoal_readers >/dev/null
  SHOAL_BIN=$PWD/build-release/shoal
fi
READERS=${SHOAL_READERS:-$(dirname "$SHOAL_BIN")/shoal_readers}
SHOAL=$SHOAL_BIN
PY=/usr/bin/python3
D=$(mktemp -d /tmp/shoal-scale.XXXXXX)
P=sc$$ # namespace and link names: unique to this run
CNS=$P-c
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  local p k
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  for k in $(seq 1 "$MAXN"); do ip netns del "$P-m$k" 2>/dev/null || true; done
  ip netns del "$CNS" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "kept $D" >&2; else rm -rf "$D"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the network: the client's namespace, and one namespace and link per member ---
ip netns add "$CNS"
ip -n "$CNS" link set lo up
for k in $(seq 1 "$MAXN"); do
  ip netns add "$P-m$k"
  ip -n "$P-m$k" link set lo up
  ip link add "$P-c$k" netns "$CNS" type veth peer name "$P-v$k" netns "$P-m$k"
  ip -n "$CNS" addr add "10.77.$k.1/24" dev "$P-c$k"
  ip -n "$P-m$k" addr add "10.77.$k.2/24" dev "$P-v$k"
  ip -n "$CNS" link set "$P-c$k" up
  ip -n "$P-m$k" link set "$P-v$k" up
  ip -n "$P-m$k" route add 10.77.0.0/16 via "10.77.$k.1" # to the other members, by the client's
done
ip netns exec "$CNS" sysctl -q -w net.ipv4.ip_forward=1
cap() { # cap on|off — the tbf on every member's side of its link (member -> client traffic)
  local k
  for k in $(seq 1 "$MAXN"); do
    ip netns exec "$P-m$k" tc qdisc del dev "$P-v$k" root 2>/dev/null || true
    [ "$1" = on ] && ip netns exec "$P-m$k" tc qdisc add dev "$P-v$k" root tbf rate "$RATE" burst 1mb latency 50ms
  done
  return 0
}

echo "machine: $(nproc) cores, kernel $(uname -r); $(date -u '+%F %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "links: veth, member->client capped by tbf at $RATE; data $DATA_MIB MiB in $BS blocks; $THREADS readers per member; ${DUR}s per point after ${RAMP}s${CAT_FLAGS:+; 8 cats with $CAT_FLAGS}"

# --- one link alone: iperf3 from a member's namespace to the client's (4 streams: one stream
# backs off at the tbf's drops and leaves the link partly idle) ---
cap on
ip netns exec "$CNS" iperf3 -s -1 -B 10.77.1.1 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
LINK=$(ip netns exec "$P-m1" iperf3 -c 10.77.1.1 -P 4 -t "$DUR" -J |
  $PY -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (d["end"]["sum_received"]["bits_per_second"]/8/2**20))')
echo "one link alone (iperf3, 4 streams): $LINK MiB/s"

# --- data ---
mkdir -p "$D/store/data"
NOBJ=$((DATA_MIB / 64))
for i in $(seq 0 $((NOBJ - 1))); do head -c $((64 * 1048576)) /dev/urandom >"$D/store/data/o$i"; done
if [ "$MODE" = spread ]; then
  mkdir -p "$D/store/one"
  head -c $((ONE_MIB * 1048576)) /dev/urandom >"$D/store/one/big"
fi
S="file://$D/store"

run_group() { # run_group N — N members in namespaces m1..mN, warm; prints the results
  local n=$1 k
  local META="sqlite3://$D/meta$n.db" MPIDS=()
  for k in $(seq 1 "$n"); do
    ip netns exec "$P-m$k" "$SHOAL" serve "$S" --meta "$META" --cache-group "s$n" --group-ip "10.77.$k.2" \
      --cache-dir "$D/cache$n.$k" --block-size "$BS" --metrics "10.77.$k.2:0" --log-file "$D/m$n.$k.log" &
    MPIDS+=($!)
    PIDS+=($!)
  done
  for k in $(seq 1 "$n"); do
    local i
    for i in $(seq 1 100); do grep -q ready "$D/m$n.$k.log" 2>/dev/null && break; sleep 0.1; done
  done
  cap off
  ip netns exec "$CNS" "$SHOAL" warmup --storage "$S" --meta "$META" --cache-group "s$n" --block-size "$BS" \
    --threads 16 --log-level error >/dev/null 2>&1
  cap on
  local t
  for t in pool iorpc; do
    local flags=""
    [ $t = iorpc ] && flags=--use-iorpc
    local before after out
    before=$(served "$n")
    out=$(ip netns exec "$CNS" "$SHOAL" bench "$S" --meta "$META" --cache-group "s$n" --block-size "$BS" \
      --threads $((THREADS * n)) --ramp "${RAMP}s" --duration "${DUR}s" $flags --log-level error)
    after=$(served "$n")
    local rate
    rate=$(echo "$out" | sed -n 's/.* = \([0-9.]*\) GiB\/s.*/\1/p')
    $PY - "$t" "$n" "$rate" "$LINK" "$before" "$after" <<'PY'
import sys
t, n, rate, link = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) * 1024, float(sys.argv[4])
b = [int(x) for x in sys.argv[5].split()]
a = [int(x) for x in sys.argv[6].split()]
d = [y - x for x, y in zip(b, a)]
tot = sum(d)
if tot <= 0 or rate <= 0:
    print("%-6s N=%d  %7.1f MiB/s  the members' remotecache_serve_bytes did not move (%s -> %s): "
          "the reads did not come from them" % (t, n, rate, sys.argv[5], sys.argv[6]))
    sys.exit(0)
shares = [x / tot for x in d]
bound = n * link * (1 / n) / max(shares)
print("%-6s N=%d  %7.1f MiB/s  = x%.3f of N links (%.0f MiB/s)  shares %s  placement bound %.1f MiB/s (x%.3f of it)"
      % (t, n, rate, rate / (n * link), n * link, "/".join("%.2f" % s for s in shares), bound, rate / bound))
PY
  done
  for k in "${MPIDS[@]}"; do kill "$k"; wait "$k" 2>/dev/null || true; done
}

# served N — the bytes each of the N members has served so far (remotecache_serve_bytes)
served() {
  local k out=""
  for k in $(seq 1 "$1"); do
    local addr v
    addr=$(grep -o 'prometheus metrics listening on [^ ]*' "$D/m$1.$k.log" | tail -n 1 | awk '{print $NF}')
    v=$(ip netns exec "$P-m$k" curl -s --max-time 5 "http://$addr/metrics" |
      awk '$1 ~ /^remotecache_serve_bytes({|$)/ { s += $2 } END { printf "%.0f", s }')
    out="$out $v"
  done
  echo "$out"
}

# link_bytes N — bytes the N members' capped links have sent so far (tc's own count).
link_bytes() {
  local k n=0 b
  for k in $(seq 1 "$1"); do
    b=$(ip netns exec "$P-m$k" tc -s qdisc show dev "$P-v$k" | awk '/Sent/ {print $2; exit}')
    n=$((n + ${b:-0}))
  done
  echo "$n"
}

# readers_rate LABEL N FLAGS... — THREADS readers through the read path for DUR s (after RAMP s,
# which also makes the copies); prints MiB/s and the ratio to N links.
readers_rate() {
  local label=$1 n=$2 out rate
  shift 2
  ip netns exec "$CNS" env "$@" "$READERS" "$S" --meta "$META" --cache-group "s$n" --block-size "$BS" \
    --verify-dir "$D/store" --prefix data/ --threads "$THREADS" --seconds "$RAMP" $RFLAGS --log-level error >/dev/null
  local lb0 lb1
  lb0=$(link_bytes "$n")
  out=$(ip netns exec "$CNS" env "$@" "$READERS" "$S" --meta "$META" --cache-group "s$n" --block-size "$BS" \
    --verify-dir "$D/store" --prefix data/ --threads "$THREADS" --seconds "$DUR" $RFLAGS --log-level error) ||
    { echo "$label N=$n: readers failed: $out"; return 0; }
  lb1=$(link_bytes "$n")
  echo "  the links sent $(( (lb1 - lb0) / DUR / 1048576 )) MiB/s in all (payload, peer fills and overhead)"
  rate=$(echo "$out" | grep '^result' | tr ' ' '\n' | awk -F= -v d="$DUR" '$1 == "bytes" {printf "%.1f", $2 / d / 1048576}')
  echo "$out" | grep '^result' | grep -q ' errors=0 wrong=0 ' || echo "$label: ERRORS: $(echo "$out" | grep '^result')"
  echo "  $(echo "$out" | grep '^result' | tr ' ' '\n' | grep -E '^(reads|remote|fallbacks|store_gets|buffer_hits)=' | tr '\n' ' ')"
  $PY -c 'import sys; l, n, r, k = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]); print("%-22s N=%d  %7.1f MiB/s  = x%.3f of N links" % (l, n, r, r / (n * k)))' \
    "$label" "$n" "$rate" "$LINK"
}

# one_object N FLAGS... — 8 `shoal cat` of one/big at once, each checked byte for byte.
one_object() {
  local label=$1 n=$2 k t0 t1 pids=()
  shift 2
  t0=$(date +%s.%N)
  for k in $(seq 1 8); do
    ip netns exec "$CNS" env "$@" "$SHOAL" cat "$S" one/big --meta "$META" --cache-group "s$n" --block-size "$BS" \
      --no-sharing --cache-size 0 $RFLAGS $CAT_FLAGS --log-level error | cmp -s - "$D/store/one/big" &
    pids+=($!)
  done
  local bad=0
  for k in "${pids[@]}"; do wait "$k" || bad=$((bad + 1)); done
  t1=$(date +%s.%N)
  $PY -c 'import sys; l, n, a, b, m, k, bad = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]); r = 8 * m / (b - a); print("%-22s N=%d  8 readers of one %d MiB object: %7.1f MiB/s  = x%.3f of N links%s" % (l, n, m, r, r / (n * k), "" if not bad else "  %d READERS FAILED OR READ WRONG BYTES" % bad))' \
    "$label" "$n" "$t0" "$t1" "$ONE_MIB" "$LINK" "$bad"
}

run_spread() { # run_spread N — as run_group, through the read path, spread off and on
  local n=$1 k
  META="sqlite3://$D/meta$n.db"
  local MPIDS=()
  for k in $(seq 1 "$n"); do
    ip netns exec "$P-m$k" "$SHOAL" serve "$S" --meta "$META" --cache-group "s$n" --group-ip "10.77.$k.2" \
      --cache-dir "$D/cache$n.$k" --block-size "$BS" --metrics "10.77.$k.2:0" --log-file "$D/m$n.$k.log" &
    MPIDS+=($!)
    PIDS+=($!)
  done
  for k in $(seq 1 "$n"); do
    local i
    for i in $(seq 1 100); do grep -q ready "$D/m$n.$k.log" 2>/dev/null && break; sleep 0.1; done
  done
  cap off
  ip netns exec "$CNS" "$SHOAL" warmup --storage "$S" --meta "$META" --cache-group "s$n" --block-size "$BS" \
    --threads 16 --log-level error >/dev/null 2>&1
  cap on
  local t
  for t in pool iorpc; do
    RFLAGS=""
    [ $t = iorpc ] && RFLAGS=--use-iorpc
    if [ "$ONE_ONLY" != 1 ]; then
      readers_rate "$t spread off" "$n" SHOAL_SPREAD_COPIES=1
      readers_rate "$t spread on" "$n" SHOAL_SPREAD_COPIES=2
    fi
    if [ "$n" -eq 3 ]; then
      one_object "$t spread off" "$n" SHOAL_SPREAD_COPIES=1
      one_object "$t spread on" "$n" SHOAL_SPREAD_COPIES=2 SHOAL_SPREAD_BUSY="$SPREAD_BUSY"
    fi
  done
  for k in "${MPIDS[@]}"; do kill "$k"; wait "$k" 2>/dev/null || true; done
}

if [ "$MODE" = spread ]; then
  for n in $NS; do run_spread "$n"; done
else
  for n in $NS; do run_group "$n"; done
fi
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
