#!/usr/bin/env bash
# Transports side by side, in one run on this machine [C5, T2, R1]: shoal's TCP pool and IORPC in
# every mode (dio, pagecache, splice; one member, warm cache) against nginx sendfile, memcached
# (values in RAM, -I 8m), iperf3 (the loopback limit) and the cache disk's own O_DIRECT reads
# (fio, same block size and depth: the limit of dio), for 1 MiB and 4 MiB blocks at 1, 16 and 64
# requests in flight; then many clients (several `shoal bench` processes, 256 and 1024 requests in
# flight in all) over the TCP pool and over IORPC, with the connections each needed. Prints
# GiB/s, p50/p99 latency, CPU seconds per GiB for server and client, and a verdict per target of
# issue 13 (docs/benchmarks.md records the runs).
#   bench/transport.sh
# Environment: DUR seconds per point (5), RAMP seconds of untimed reading before each point (3:
# IORPC grows connections with the load [R5]), SIZES ("1048576 4194304"), DEPTHS ("1 16 64"),
# MODES ("dio pagecache splice"), PEERS (1; 0 skips nginx, memcached, iperf3 and fio),
# MANY (1; 0 skips the many-clients part), MANY_DEPTHS ("256 1024"), MANY_PROCS (4),
# MANY_SIZES ("1048576 4194304"), MANY_MODE (splice), SHOAL_BIN (skips the build), CC (a TCP
# congestion control for the run, e.g. cubic, Debian's default; empty: the machine's; restored
# after). Under bbr without the fq qdisc the kernel paces every connection with a timer per burst
# (tcp_pace_kick), which on loopback costs the sender more than the send itself: the header line
# prints what the run used, and docs/benchmarks.md shows both.
# The IORPC client is given SHOAL_IORPC_SCALE_PERIOD=250ms (growth judged four times a second)
# so that RAMP reaches the connection count the load needs; the rule itself is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-5}
RAMP=${RAMP:-3}
SIZES=${SIZES:-"1048576 4194304"}
DEPTHS=${DEPTHS:-"1 16 64"}
MODES=${MODES:-"dio pagecache splice"}
PEERS=${PEERS:-1}
MANY=${MANY:-1}
MANY_DEPTHS=${MANY_DEPTHS:-"256 1024"}
MANY_PROCS=${MANY_PROCS:-4}
MANY_SIZES=${MANY_SIZES:-"1048576 4194304"}
MANY_MODE=${MANY_MODE:-splice}
OBJS=8
OBJ_MIB=32
export SHOAL_IORPC_SCALE_PERIOD=${SHOAL_IORPC_SCALE_PERIOD:-250ms}
if [ -z "${SHOAL_BIN:-}" ]; then
  ./scripts/setup.sh
  cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-release -j"$(nproc)" --target shoal >/dev/null
  SHOAL_BIN=$PWD/build-release/shoal
fi
SHOAL=$SHOAL_BIN
PY=/usr/bin/python3
HZ=$(getconf CLK_TCK)
D=$(mktemp -d /tmp/shoal-bench.XXXXXX)
cc -O2 -pthread -o "$D/mcget" bench/mcget.c
PIDS=()
PIPE_MAX0=$(cat /proc/sys/fs/pipe-max-size)
CC_PATH=/proc/sys/net/ipv4/tcp_congestion_control
CC0=$(cat "$CC_PATH")
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ -f "$D/nginx.pid" ] && kill "$(cat "$D/nginx.pid")" 2>/dev/null || true
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  [ "$(cat /proc/sys/fs/pipe-max-size)" = "$PIPE_MAX0" ] || echo "$PIPE_MAX0" >/proc/sys/fs/pipe-max-size
  [ "$(cat "$CC_PATH")" = "$CC0" ] || echo "$CC0" >"$CC_PATH"
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# splice mode needs pipes of 8 MiB [R2]; restored on exit.
if [ "$PIPE_MAX0" -lt 8388608 ]; then echo 8388608 >/proc/sys/fs/pipe-max-size; fi
if [ -n "${CC:-}" ] && [ "$CC" != "$CC0" ]; then
  grep -qw "$CC" /proc/sys/net/ipv4/tcp_available_congestion_control || modprobe "tcp_$CC" 2>/dev/null || true
  echo "$CC" >"$CC_PATH" || { echo "bench: cannot use congestion control $CC" >&2; exit 2; }
fi

port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# cpu PID... — CPU seconds used so far by these processes (and their threads)
cpu() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t $HZ" | awk '{printf "%.3f", $1/$2}'; }
ROWFMT="%-22s %5s %5s %7s %8s %8s %9s %9s %6s\n"
row() { printf "$ROWFMT" "$@"; }
# record SYSTEM BS_K DEPTH GIB/S P50 P99 SRV CLI CONNS
record() { echo "$*" >>"$D/results"; row "$@"; }

echo "machine: $(nproc) cores ($(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r); $(date -u '+%F %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tcp: congestion control $(cat "$CC_PATH") (machine's: $CC0), default qdisc $(cat /proc/sys/net/core/default_qdisc), loopback qdisc $(tc qdisc show dev lo 2>/dev/null | awk 'NR == 1 {print $2}')"
echo "shoal: $SHOAL; ${DUR}s per point after ${RAMP}s of untimed reading; cache dir on $(df --output=source "$D" | tail -n 1)"
row system block depth "GiB/s" "p50 ms" "p99 ms" "srv s/GiB" "cli s/GiB" conns

# parse_bench OUTPUT — "GIB RATE P50 P99 SRV CLI CONNS" from a `shoal bench` output.
parse_bench() {
  local res conns
  res=$(echo "$1" | grep '^result:')
  conns=$(echo "$1" | grep 'connections per member' | tail -n 1 | sed 's/.*=\([0-9]*\)$/\1/')
  echo "$res" | sed 's/.*result: \([0-9.]*\) GiB in.* = \([0-9.]*\) GiB\/s.*p50 \([0-9.]*\) ms, p99 \([0-9.]*\) ms, client cpu \([0-9.]*\) s\/GiB, server cpu \([0-9.na/]*\).*/\1 \2 \3 \4 \6 \5/' |
    sed 's| s/GiB||; s|n/a|-|' | awk -v c="${conns:--}" '{print $0, c}'
}

# bench_args BS_K — the common arguments of `shoal bench` for the group of block size BS_K.
bench_args() { echo "file://$D/store$1 --cache-group b$1 --meta sqlite3://$D/meta$1.db --block-size $1K --log-level error"; }

start_member() { # start_member BS_K MODE — one member serving the warm cache of BS_K in MODE
  local bk=$1 mode=$2
  rm -f "$D/member$bk.$mode.log" # a "ready" line of an earlier run must not count
  "$SHOAL" serve "file://$D/store$bk" --cache-group "b$bk" --meta "sqlite3://$D/meta$bk.db" \
    --cache-dir "$D/cache$bk" --block-size "${bk}K" --group-ip 127.0.0.1 --iorpc-mode "$mode" \
    --metrics 127.0.0.1:0 --log-file "$D/member$bk.$mode.log" &
  MP=$!
  PIDS+=($MP)
  local i
  for i in $(seq 1 100); do grep -q "ready" "$D/member$bk.$mode.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "ready" "$D/member$bk.$mode.log" || { echo "bench: member did not start" >&2; exit 1; }
  grep -q "iorpc: $mode" "$D/member$bk.$mode.log" || { echo "bench: member runs another mode: $(grep 'max pipe size' "$D/member$bk.$mode.log")" >&2; exit 1; }
}
stop_member() { kill "$MP"; wait "$MP" 2>/dev/null || true; sleep 0.5; }

shoal_point() { # shoal_point NAME BS_K DEPTH [FLAGS] — one `shoal bench` run, recorded
  local name=$1 bk=$2 depth=$3 flags=${4:-} out
  # shellcheck disable=SC2046
  out=$("$SHOAL" bench $(bench_args "$bk") --threads "$depth" --ramp "${RAMP}s" --duration "${DUR}s" $flags)
  read -r gib rate p50 p99 srv cli conns < <(parse_bench "$out")
  record "$name" "${bk}K" "$depth" "$rate" "$p50" "$p99" "$srv" "$cli" "$conns"
}

fio_point() { # fio_point BS_K DEPTH — the cache disk's own random O_DIRECT reads
  local bk=$1 depth=$2 j
  j=$(fio --name=d --filename="$D/fio$bk.dat" --size=$((OBJS * OBJ_MIB))M --rw=randread --bs="${bk}K" \
    --direct=1 --ioengine=libaio --iodepth="$depth" --norandommap --time_based --runtime="$DUR" \
    --output-format=json 2>/dev/null)
  read -r rate p50 p99 < <(echo "$j" | $PY -c 'import json,sys; r=json.load(sys.stdin)["jobs"][0]["read"]; p=r["clat_ns"]["percentile"]; print("%.2f %.2f %.2f" % (r["bw_bytes"]/2**30, p["50.000000"]/1e6, p["99.000000"]/1e6))')
  record disk-odirect-fio "${bk}K" "$depth" "$rate" "$p50" "$p99" - - -
}

for BS in $SIZES; do
  bk=$((BS / 1024))
  mkdir -p "$D/store$bk/data"
  for i in $(seq 0 $((OBJS - 1))); do head -c $((OBJ_MIB * 1048576)) /dev/urandom >"$D/store$bk/data/o$i"; done
  first=1
  for mode in $MODES; do
    start_member "$bk" "$mode"
    if [ $first = 1 ]; then
      # shellcheck disable=SC2046
      "$SHOAL" bench $(bench_args "$bk") --threads 4 --duration 1s --warm >/dev/null
      [ "$PEERS" = 0 ] || fio --name=d --filename="$D/fio$bk.dat" --size=$((OBJS * OBJ_MIB))M --rw=write \
        --bs=1M --direct=1 >/dev/null 2>&1
    fi
    for depth in $DEPTHS; do
      # pool and IORPC alternate at each depth, so that the machine's load hits both alike
      [ $first = 1 ] && shoal_point shoal-pool "$bk" "$depth"
      shoal_point "shoal-iorpc-$mode" "$bk" "$depth" --use-iorpc
      [ $first = 1 ] && [ "$PEERS" != 0 ] && fio_point "$bk" "$depth"
    done
    first=0
    stop_member
  done
done

# --- many clients: MANY_PROCS processes, DEPTH requests in flight in all ---
many_point() { # many_point NAME BS_K DEPTH FLAGS
  local name=$1 bk=$2 depth=$3 flags=$4 k pids=() s0 s1
  local per=$((depth / MANY_PROCS))
  for k in $(seq 1 "$MANY_PROCS"); do
    # shellcheck disable=SC2046
    "$SHOAL" bench $(bench_args "$bk") --threads "$per" --ramp "${RAMP}s" --duration "${DUR}s" $flags \
      >"$D/many.$k" 2>&1 &
    pids+=($!)
  done
  for k in $(seq 1 "$MANY_PROCS"); do
    wait "${pids[$((k - 1))]}" || { echo "bench: client process $k of $name failed: $(tail -n 3 "$D/many.$k")" >&2; exit 1; }
  done
  for k in $(seq 1 "$MANY_PROCS"); do parse_bench "$(cat "$D/many.$k")"; done >"$D/many.all"
  # Throughput: the sum. Latency: the median of the processes' p50 and the largest p99 (the
  # union's p99 lies between their smallest and largest). Server CPU: each process scraped the
  # member over nearly the same window, so its s/GiB times its GiB is the member's CPU in that
  # window: their mean over all GiB. Connections: the sum of what each process held.
  read -r rate p50 p99 srv cli conns < <($PY - "$D/many.all" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
g = sum(float(x[0]) for x in rows)
p50 = sorted(float(x[2]) for x in rows)[(len(rows) - 1) // 2]
srv = [float(x[4]) * float(x[0]) for x in rows if x[4] != "-"]
print("%.2f %.2f %.2f %s %.3f %d" % (sum(float(x[1]) for x in rows), p50, max(float(x[3]) for x in rows),
      "%.3f" % (sum(srv) / len(srv) / g) if srv else "-", sum(float(x[5]) * float(x[0]) for x in rows) / g,
      sum(int(x[6]) for x in rows if x[6].isdigit())))
PY
)
  record "$name" "${bk}K" "$depth" "$rate" "$p50" "$p99" "$srv" "$cli" "$conns"
}
if [ "$MANY" != 0 ]; then
  for BS in $MANY_SIZES; do
    bk=$((BS / 1024))
    start_member "$bk" "$MANY_MODE"
    for depth in $MANY_DEPTHS; do
      many_point shoal-pool-many "$bk" "$depth" ""
      many_point "shoal-iorpc-$MANY_MODE-many" "$bk" "$depth" --use-iorpc
    done
    stop_member
  done
fi

if [ "$PEERS" != 0 ]; then
  # --- nginx (sendfile from the page cache) ---
  NP=$(port)
  mkdir -p "$D/nginx"
  for BS in $SIZES; do
    mkdir -p "$D/www$((BS / 1024))"
    head -c "$BS" /dev/urandom >"$D/www$((BS / 1024))/f1"
  done
  cat >"$D/nginx.conf" <<CONF
worker_processes 2;
user root;
pid $D/nginx.pid;
error_log $D/nginx/error.log;
daemon on;
events { worker_connections 4096; }
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
  # ms VALUE — wrk's latency (e.g. 1.23ms, 950.00us, 1.02s) in ms
  ms() { echo "$1" | awk '/us$/ {sub("us",""); print $1/1000; next} /ms$/ {sub("ms",""); print $1; next} /s$/ {sub("s",""); print $1*1000}'; }
  for BS in $SIZES; do
    bk=$((BS / 1024))
    for depth in $DEPTHS; do
      # shellcheck disable=SC2086
      s0=$(cpu "$(cat "$D/nginx.pid")" $NGINX_PIDS)
      out=$( { /usr/bin/time -f "%U %S" wrk --latency -t "$((depth < 2 ? 1 : 2))" -c "$depth" -d "${DUR}s" "http://127.0.0.1:$NP/www$bk/f1"; } 2>&1)
      # shellcheck disable=SC2086
      s1=$(cpu "$(cat "$D/nginx.pid")" $NGINX_PIDS)
      reqs=$(echo "$out" | awk '/requests in/ {print $1}')
      secs=$(echo "$out" | awk '/requests in/ {print $4}' | tr -d 's,')
      ccpu=$(echo "$out" | tail -n 1 | awk '{print $1 + $2}')
      gib=$(awk -v r="$reqs" -v b="$BS" 'BEGIN { printf "%.3f", r * b / 1073741824 }')
      p50=$(ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
      p99=$(ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
      record nginx "${bk}K" "$depth" "$(awk -v g="$gib" -v s="$secs" 'BEGIN { printf "%.2f", g / s }')" \
        "$p50" "$p99" "$(awk -v a="$s0" -v b="$s1" -v g="$gib" 'BEGIN { printf "%.3f", (b - a) / g }')" \
        "$(awk -v c="$ccpu" -v g="$gib" 'BEGIN { printf "%.3f", c / g }')" "$depth"
    done
  done

  # --- memcached (values in RAM) ---
  MCP=$(port)
  memcached -u root -l 127.0.0.1 -p "$MCP" -I 8m -m 1024 -t 2 -U 0 &
  MCPID=$!
  PIDS+=($MCPID)
  sleep 0.5
  for BS in $SIZES; do
    bk=$((BS / 1024))
    $PY bench/mcset.py 127.0.0.1 "$MCP" "k$bk" "$BS"
    for depth in $DEPTHS; do
      s0=$(cpu $MCPID)
      read -r bytes secs rate ccpu p50 p99 < <("$D/mcget" 127.0.0.1 "$MCP" "k$bk" "$BS" "$depth" "$DUR")
      s1=$(cpu $MCPID)
      gib=$(awk -v b="$bytes" 'BEGIN { printf "%.3f", b / 1073741824 }')
      record memcached "${bk}K" "$depth" "$(printf %.2f "$rate")" "$p50" "$p99" \
        "$(awk -v a="$s0" -v b="$s1" -v g="$gib" 'BEGIN { printf "%.3f", (b - a) / g }')" \
        "$(awk -v c="$ccpu" -v g="$gib" 'BEGIN { printf "%.3f", c / g }')" "$depth"
    done
  done

  # --- iperf3: one stream, the loopback limit ---
  IP=$(port)
  iperf3 -s -1 -p "$IP" -B 127.0.0.1 >/dev/null 2>&1 &
  PIDS+=($!)
  sleep 0.5
  j=$(iperf3 -c 127.0.0.1 -p "$IP" -t "$DUR" -J)
  rate=$(echo "$j" | $PY -c 'import json,sys; d=json.load(sys.stdin); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"]/8/2**30))')
  record iperf3 - 1 "$rate" - - - - 1
fi

echo
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "targets (issue 13; ratio = shoal / reference, same block size and depth):"
$PY - "$D/results" <<'PY'
import sys
r = {}
for line in open(sys.argv[1]):
    f = line.split()
    def num(x):
        try:
            return float(x)
        except ValueError:
            return None
    r[(f[0], f[1], f[2])] = dict(rate=num(f[3]), p50=num(f[4]), p99=num(f[5]), srv=num(f[6]),
                                 cli=num(f[7]), conns=f[8])
met = missed = 0
def verdict(ok, text):
    global met, missed
    if ok is None:
        print("  n/a    " + text)
        return
    met += ok
    missed += not ok
    print("  %-6s %s" % ("met" if ok else "MISSED", text))
def ratio(a, b):
    return a / b if a is not None and b else None
keys = sorted({(k[1], k[2]) for k in r}, key=lambda x: (x[0], int(x[1]) if x[1].isdigit() else 0))
for mode in ("pagecache", "splice"):
    for bs, d in keys:
        s, m, p = r.get(("shoal-iorpc-" + mode, bs, d)), r.get(("memcached", bs, d)), r.get(("shoal-pool", bs, d))
        if not s:
            continue
        for name, ref in (("memcached", m), ("TCP pool", p)):
            if not ref:
                continue
            tr, cr = ratio(s["rate"], ref["rate"]), ratio(s["srv"], ref["srv"])
            ok = None if tr is None or cr is None else (tr >= 1.0 and cr <= 1.0)
            verdict(ok, "IORPC %s %s depth %s vs %s: throughput x%.2f (>= 1.0), server CPU x%.2f (<= 1.0)"
                    % (mode, bs, d, name, tr or 0, cr or 0))
for bs, d in keys:
    s, f = r.get(("shoal-iorpc-dio", bs, d)), r.get(("disk-odirect-fio", bs, d))
    if s and f:
        tr = ratio(s["rate"], f["rate"])
        verdict(tr >= 0.9, "IORPC dio %s depth %s vs the disk's O_DIRECT (fio): x%.2f (>= 0.9)" % (bs, d, tr))
for (sysname, bs, d), v in sorted(r.items()):
    if not sysname.endswith("-many") or "iorpc" not in sysname:
        continue
    p = r.get(("shoal-pool-many", bs, d))
    if p:
        tr, cr = ratio(v["rate"], p["rate"]), ratio(v["srv"], p["srv"])
        ok = None if tr is None or cr is None else (tr >= 1.2 and cr <= 0.8)
        verdict(ok, "many clients %s depth %s: IORPC (%s conns) vs pool (%s conns): throughput x%.2f (>= 1.2), server CPU x%.2f (<= 0.8)"
                % (bs, d, v["conns"], p["conns"], tr or 0, cr or 0))
for bs, d in keys:
    p, n = r.get(("shoal-pool", bs, d)), r.get(("nginx", bs, d))
    if p and n:
        tr = ratio(p["rate"], n["rate"])
        verdict(tr >= 1.2, "TCP pool %s depth %s vs nginx sendfile: x%.2f (>= 1.2)" % (bs, d, tr))
worst = {}
for (sysname, bs, d), v in r.items():
    if sysname.startswith("shoal") and v["cli"] is not None:
        t = "pool" if "pool" in sysname else "iorpc"
        if v["cli"] > worst.get(t, (0, ""))[0]:
            worst[t] = (v["cli"], "%s %s depth %s" % (sysname, bs, d))
for t, (c, where) in sorted(worst.items()):
    verdict(c <= 0.4, "client CPU, %s: worst %.3f s/GiB (%s) (<= 0.4)" % (t, c, where))
for (sysname, bs, d), v in sorted(r.items()):
    if sysname.startswith("shoal") and d in ("16", "256") and v["p50"]:
        verdict(v["p99"] <= 3 * v["p50"], "p99/p50 %s %s depth %s: %.1f ms / %.1f ms = x%.1f (<= 3)"
                % (sysname, bs, d, v["p99"], v["p50"], v["p99"] / v["p50"]))
print("  %d met, %d missed" % (met, missed))
PY
