#!/usr/bin/env bash
# Client and member CPU per GiB over IORPC on RDMA (libfabric's tcp provider on lo), two builds
# side by side in one run: each round starts one member with each binary in turn (8 objects of
# 32 MiB, 4 MiB blocks, warm cache) and reads them with `shoal bench` of the same binary, so that
# load from elsewhere on the machine hits both alike. Prints one line per run and the ranges.
#   bench/rdma_cpu.sh BEFORE_SHOAL AFTER_SHOAL [ROUNDS] [THREADS] [SECONDS]
# Use Release builds (docs/benchmarks.md has the numbers of issue 14).
set -euo pipefail
BEFORE=$1
AFTER=$2
ROUNDS=${3:-4}
THREADS=${4:-4}
DUR=${5:-5}
export FI_PROVIDER=tcp SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
HZ=$(getconf CLK_TCK)
D=$(mktemp -d /tmp/shoal-rdmacpu.XXXXXX)
MP=""
cleanup() {
  [ -n "$MP" ] && kill "$MP" 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT INT TERM
mkdir -p "$D/store/data"
for i in $(seq 0 7); do head -c $((32 * 1024 * 1024)) /dev/urandom >"$D/store/data/o$i"; done
cpu() { awk -v hz="$HZ" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$1/stat"; }

run() { # run NAME BINARY ROUND
  local name=$1 bin=$2 round=$3 meta="sqlite3://$D/$1-$3.db" out s0 s1 gib rate ccpu
  "$bin" serve "file://$D/store" --cache-group "c$round$name" --meta "$meta" \
    --cache-dir "$D/cache-$name" --group-ip 127.0.0.1 --rdma-network lo \
    --log-file "$D/member-$name.log" &
  MP=$!
  for _ in $(seq 1 100); do
    "$bin" group --meta "$meta" --cache-group "c$round$name" 2>/dev/null | grep -q provider && break
    sleep 0.1
  done
  "$bin" bench "file://$D/store" --cache-group "c$round$name" --meta "$meta" --rdma-network lo \
    --threads "$THREADS" --duration 1s --warm --log-level error >/dev/null
  s0=$(cpu "$MP")
  out=$("$bin" bench "file://$D/store" --cache-group "c$round$name" --meta "$meta" \
    --rdma-network lo --threads "$THREADS" --duration "${DUR}s" --log-level error | grep '^result')
  s1=$(cpu "$MP")
  kill "$MP"
  wait "$MP" 2>/dev/null || true
  MP=""
  gib=$(echo "$out" | sed 's/.*result: \([0-9.]*\) GiB in.*/\1/')
  rate=$(echo "$out" | sed 's/.* = \([0-9.]*\) GiB\/s.*/\1/')
  ccpu=$(echo "$out" | sed 's/.*client cpu \([0-9.]*\) s\/GiB.*/\1/')
  printf "%-7s round %d: %6s GiB/s, client %6s s/GiB, member %6s s/GiB\n" "$name" "$round" "$rate" \
    "$ccpu" "$(awk -v a="$s0" -v b="$s1" -v g="$gib" 'BEGIN {printf "%.3f", (b - a) / g}')" |
    tee -a "$D/results"
}

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +'%F %H:%M UTC')"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then
    run before "$BEFORE" "$r"
    run after "$AFTER" "$r"
  else
    run after "$AFTER" "$r"
    run before "$BEFORE" "$r"
  fi
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
for name in before after; do
  awk -v n="$name" '$1 == n {g[++k] = $4; c[k] = $7; m[k] = $10}
    function mn(a, i, x) {x = a[1]; for (i in a) if (a[i] < x) x = a[i]; return x}
    function mx(a, i, x) {x = a[1]; for (i in a) if (a[i] > x) x = a[i]; return x}
    END {printf "%-7s GiB/s %s-%s, client s/GiB %s-%s, member s/GiB %s-%s\n", n, mn(g), mx(g),
         mn(c), mx(c), mn(m), mx(m)}' "$D/results"
done
