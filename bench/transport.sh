#!/usr/bin/env bash
# Transports side by side, in one run on this machine [C5, T2, R1]: shoal's TCP pool and IORPC
# (one member, warm cache) against nginx sendfile, memcached (values in RAM, -I 8m) and iperf3
# (the loopback limit), for 1 MiB and 4 MiB blocks at 1, 16 and 64 requests in flight.
# Prints GiB/s and CPU seconds per GiB for server and client, and shoal's ratios to the peers.
#   bench/transport.sh            (DUR=5 seconds per point; SIZES, DEPTHS, IORPC_MODE override;
#                                  PEERS=0 skips nginx, memcached and iperf3)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release -j"$(nproc)" >/dev/null
cc -O2 -pthread -o build-release/mcget bench/mcget.c
SHOAL=$PWD/build-release/shoal
DUR=${DUR:-5}
SIZES=${SIZES:-"1048576 4194304"}
DEPTHS=${DEPTHS:-"1 16 64"}
IORPC_MODE=${IORPC_MODE:-dio}
PEERS=${PEERS:-1}
HZ=$(getconf CLK_TCK)
D=$(mktemp -d /tmp/shoal-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ -f "$D/nginx.pid" ] && kill "$(cat "$D/nginx.pid")" 2>/dev/null || true
  sleep 0.5
  rm -rf "$D"
}
trap cleanup EXIT INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# cpu PID... — CPU seconds used so far by these processes (and their threads)
cpu() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t $HZ" | awk '{printf "%.3f", $1/$2}'; }
row() { printf "%-20s %6s %5s %8s %10s %10s\n" "$@"; }

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r); $(date -u +%F)"
row system block depth "GiB/s" "srv s/GiB" "cli s/GiB"

for BS in $SIZES; do
  bs_k=$((BS / 1024))
  # --- data: 256 MiB in 8 objects, cached by one member ---
  mkdir -p "$D/store$bs_k/data" "$D/www$bs_k"
  for i in $(seq 0 7); do head -c $((32 * 1024 * 1024)) /dev/urandom >"$D/store$bs_k/data/o$i"; done
  for i in $(seq 0 31); do head -c "$BS" /dev/urandom >"$D/www$bs_k/f$i"; done
  META="sqlite3://$D/meta$bs_k.db"
  "$SHOAL" serve "file://$D/store$bs_k" --cache-group b$bs_k --meta "$META" --cache-dir "$D/cache$bs_k" \
    --block-size "${bs_k}K" --group-ip 127.0.0.1 --iorpc-mode "$IORPC_MODE" \
    --log-file "$D/member$bs_k.log" &
  MP=$!
  PIDS+=($MP)
  sleep 1
  "$SHOAL" bench "file://$D/store$bs_k" --cache-group b$bs_k --meta "$META" --block-size "${bs_k}K" \
    --threads 4 --duration 1s --warm --log-level error >/dev/null
  for depth in $DEPTHS; do
    for t in pool iorpc; do
      flag=""
      [ $t = iorpc ] && flag=--use-iorpc
      s0=$(cpu $MP)
      out=$("$SHOAL" bench "file://$D/store$bs_k" --cache-group b$bs_k --meta "$META" --block-size "${bs_k}K" \
        --threads "$depth" --duration "${DUR}s" $flag --log-level error | grep '^result')
      s1=$(cpu $MP)
      gib=$(echo "$out" | sed 's/.*result: \([0-9.]*\) GiB in.*/\1/')
      rate=$(echo "$out" | sed 's/.* = \([0-9.]*\) GiB\/s.*/\1/')
      ccpu=$(echo "$out" | sed 's/.*client cpu \([0-9.]*\) s\/GiB.*/\1/')
      scpu=$(awk -v a="$s0" -v b="$s1" -v g="$gib" 'BEGIN { printf "%.3f", (b - a) / g }')
      name=shoal-$t
      [ $t = iorpc ] && name=shoal-iorpc-$IORPC_MODE
      row "$name" "${bs_k}K" "$depth" "$rate" "$scpu" "$ccpu"
      echo "$name $bs_k $depth $rate $scpu $ccpu" >>"$D/results"
    done
  done
  kill "$MP"
  wait "$MP" 2>/dev/null || true
done

if [ "$PEERS" = 0 ]; then
  exit 0
fi

# --- nginx (sendfile from the page cache) ---
NP=$(port)
mkdir -p "$D/nginx"
cat >"$D/nginx.conf" <<CONF
worker_processes 2;
user root;
pid $D/nginx.pid;
error_log $D/nginx/error.log;
daemon on;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path $D/nginx; proxy_temp_path $D/nginx; fastcgi_temp_path $D/nginx;
  uwsgi_temp_path $D/nginx; scgi_temp_path $D/nginx;
  server { listen 127.0.0.1:$NP; root $D; }
}
CONF
nginx -c "$D/nginx.conf"
sleep 0.5
NGINX_PIDS=$(pgrep -P "$(cat "$D/nginx.pid")" | tr '\n' ' ')
for BS in $SIZES; do
  bs_k=$((BS / 1024))
  for depth in $DEPTHS; do
    s0=$(cpu $(cat "$D/nginx.pid") $NGINX_PIDS)
    start=$(date +%s.%N)
    out=$( { /usr/bin/time -f "%U %S" wrk -t "$(( depth < 2 ? 1 : 2 ))" -c "$depth" -d "${DUR}s" "http://127.0.0.1:$NP/www$bs_k/f1"; } 2>&1)
    s1=$(cpu $(cat "$D/nginx.pid") $NGINX_PIDS)
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    secs=$(echo "$out" | awk '/requests in/ {print $4}' | tr -d 's,')
    ccpu=$(echo "$out" | tail -n 1 | awk '{print $1 + $2}')
    gib=$(awk -v r="$reqs" -v b="$BS" 'BEGIN { printf "%.3f", r * b / 1073741824 }')
    rate=$(awk -v g="$gib" -v s="$secs" 'BEGIN { printf "%.2f", g / s }')
    row nginx "${bs_k}K" "$depth" "$rate" "$(awk -v a="$s0" -v b="$s1" -v g="$gib" 'BEGIN { printf "%.3f", (b - a) / g }')" \
      "$(awk -v c="$ccpu" -v g="$gib" 'BEGIN { printf "%.3f", c / g }')"
    echo "nginx $bs_k $depth $rate" >>"$D/results"
  done
done

# --- memcached (values in RAM) ---
MCP=$(port)
memcached -u root -l 127.0.0.1 -p "$MCP" -I 8m -m 1024 -t 2 -U 0 &
MCPID=$!
PIDS+=($MCPID)
sleep 0.5
for BS in $SIZES; do
  bs_k=$((BS / 1024))
  python3 bench/mcset.py 127.0.0.1 "$MCP" "k$bs_k" "$BS"
  for depth in $DEPTHS; do
    s0=$(cpu $MCPID)
    read -r bytes secs rate ccpu < <(build-release/mcget 127.0.0.1 "$MCP" "k$bs_k" "$BS" "$depth" "$DUR")
    s1=$(cpu $MCPID)
    gib=$(awk -v b="$bytes" 'BEGIN { printf "%.3f", b / 1073741824 }')
    row memcached "${bs_k}K" "$depth" "$(printf %.2f "$rate")" \
      "$(awk -v a="$s0" -v b="$s1" -v g="$gib" 'BEGIN { printf "%.3f", (b - a) / g }')" \
      "$(awk -v c="$ccpu" -v g="$gib" 'BEGIN { printf "%.3f", c / g }')"
    echo "memcached $bs_k $depth $rate" >>"$D/results"
  done
done

# --- iperf3: one stream, the loopback limit ---
IP=$(port)
iperf3 -s -1 -p "$IP" -B 127.0.0.1 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
j=$(iperf3 -c 127.0.0.1 -p "$IP" -t "$DUR" -J)
rate=$(echo "$j" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"]/8/2**30))')
row iperf3 - 1 "$rate" - -
echo "iperf3 - 1 $rate" >>"$D/results"

echo
echo "ratios (shoal / peer, same block size and depth):"
python3 - "$D/results" <<'PY'
import sys
r = {}
for line in open(sys.argv[1]):
    f = line.split()
    r[(f[0], f[1], f[2])] = float(f[3])
ip = r.get(("iperf3", "-", "1"))
for (sysname, bs, depth), rate in sorted(r.items()):
    if not sysname.startswith("shoal"):
        continue
    parts = []
    for peer in ("nginx", "memcached"):
        p = r.get((peer, bs, depth))
        if p:
            parts.append("%s x%.2f" % (peer, rate / p))
    if ip:
        parts.append("iperf3 x%.2f" % (rate / ip))
    print("  %-12s %5sK depth %-3s %s" % (sysname, bs, depth, ", ".join(parts)))
PY
