#!/usr/bin/env bash
# The registry at a thousand members and ten thousand clients (issue 33), on a real redis-server:
# 1,000 fake members and 10,000 fake clients written through the registry's own code, then
#   - what each real process costs the server (CPU, script time, bytes in and out per second)
#     with REAL_MEMBERS member agents and REAL_CLIENTS client agents beating and polling;
#   - CROWD client agents started at once: how long until each has joined;
#   - a member in its own process killed with -9 while every reader's registry calls (its
#     listings) go through a proxy that delays them by DELAY seconds: how long until it left
#     every view.
# Agents run in one process (bench_registry), each with its own connection and thread, as
# separate processes would. Use a Release build:
#   SHOAL_BUILD=$PWD/build-release bench/registry.sh
# With "etcd" as the first argument the same crowd lives in a real etcd (its data on tmpfs),
# and the cost is etcd's CPU time (from /proc/<pid>/stat) and the bytes through a counting
# proxy in front of it, per real process per second; then what a heartbeat cost before the
# watch (a put and a range of every record).
set -euo pipefail
BUILD=${SHOAL_BUILD:-$PWD/build-release}
BENCH=$BUILD/bench_registry
FAKE_MEMBERS=${FAKE_MEMBERS:-1000}
FAKE_CLIENTS=${FAKE_CLIENTS:-10000}
REAL_MEMBERS=${REAL_MEMBERS:-4}
REAL_CLIENTS=${REAL_CLIENTS:-16}
SECONDS_COST=${SECONDS_COST:-10}
CROWD=${CROWD:-300}
READERS=${READERS:-8}
DELAY=${DELAY:-1}
[ -x "$BENCH" ] || { echo "no $BENCH (cmake --build $BUILD --target bench_registry)" >&2; exit 2; }
T=$(mktemp -d /tmp/shoal-bench-registry-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if [ "${1:-}" = etcd ]; then
  CPORT=$(port)
  EPORT=$(port)
  XPORT=$(port)
  DATA=$(mktemp -d /dev/shm/shoal-bench-etcd-XXXXXX)
  etcd --name b --data-dir "$DATA" --listen-client-urls "http://127.0.0.1:$CPORT" \
    --advertise-client-urls "http://127.0.0.1:$CPORT" --listen-peer-urls "http://127.0.0.1:$EPORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$EPORT" \
    --initial-cluster "b=http://127.0.0.1:$EPORT" >"$T/etcd.log" 2>&1 &
  EPID=$!
  pids+=($EPID)
  for _ in $(seq 100); do
    etcdctl --endpoints "127.0.0.1:$CPORT" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
  cat >"$T/count.py" <<'PY'
import asyncio, os, sys
lport, rport, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
tot = [0, 0]
async def pipe(r, w, k):
    try:
        while True:
            data = await r.read(65536)
            if not data: break
            tot[k] += len(data)
            w.write(data); await w.drain()
    except Exception:
        pass
    w.close()
async def handle(cr, cw):
    sr, sw = await asyncio.open_connection("127.0.0.1", rport)
    await asyncio.gather(pipe(cr, sw, 0), pipe(sr, cw, 1), return_exceptions=True)
async def dump():
    while True:
        with open(out + ".tmp", "w") as f: f.write("%d %d\n" % (tot[0], tot[1]))
        os.replace(out + ".tmp", out)
        await asyncio.sleep(0.2)
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", lport)
    asyncio.create_task(dump())
    async with srv: await srv.serve_forever()
asyncio.run(main())
PY
  python3 "$T/count.py" "$XPORT" "$CPORT" "$T/counts" &
  pids+=($!)
  echo "== $FAKE_MEMBERS fake members, $FAKE_CLIENTS fake clients (etcd $(etcd --version | head -n 1))"
  "$BENCH" etcd-load "etcd://127.0.0.1:$CPORT" big "$FAKE_MEMBERS" "$FAKE_CLIENTS"
  echo "== cost of $REAL_MEMBERS real members and $REAL_CLIENTS real clients, ${SECONDS_COST}s"
  "$BENCH" etcd-cost "etcd://127.0.0.1:$XPORT" big "$EPID" "$T/counts" "$REAL_MEMBERS" \
    "$REAL_CLIENTS" "$SECONDS_COST"
  rm -rf "$DATA"
  exit 0
fi

RPORT=$(port)
nice -n -5 redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no >"$T/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
URL="redis://127.0.0.1:$RPORT"

# A proxy that holds every chunk from the client for DELAY seconds before passing it on (so
# every registry call takes DELAY more), answers as they come.
PPORT=$(port)
cat >"$T/proxy.py" <<'PY'
import asyncio, sys
lport, rport, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
async def pipe(r, w, d):
    q = asyncio.Queue()
    async def out():
        while True:
            t, data = await q.get()
            if data is None:
                w.close(); return
            await asyncio.sleep(max(0, t - asyncio.get_running_loop().time()))
            w.write(data); await w.drain()
    task = asyncio.create_task(out())
    try:
        while True:
            data = await r.read(65536)
            q.put_nowait((asyncio.get_running_loop().time() + d, data or None))
            if not data: break
    except Exception:
        q.put_nowait((0, None))
    await task
async def handle(cr, cw):
    sr, sw = await asyncio.open_connection("127.0.0.1", rport)
    await asyncio.gather(pipe(cr, sw, delay), pipe(sr, cw, 0), return_exceptions=True)
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", lport)
    async with srv: await srv.serve_forever()
asyncio.run(main())
PY
python3 "$T/proxy.py" "$PPORT" "$RPORT" "$DELAY" &
pids+=($!)

echo "== $FAKE_MEMBERS fake members, $FAKE_CLIENTS fake clients"
"$BENCH" load "$URL" big "127.0.0.1:$RPORT" "$FAKE_MEMBERS" "$FAKE_CLIENTS"
redis-cli -p "$RPORT" info memory | grep '^used_memory_human'
echo "== cost of $REAL_MEMBERS real members and $REAL_CLIENTS real clients, ${SECONDS_COST}s"
"$BENCH" cost "$URL" big "127.0.0.1:$RPORT" "$REAL_MEMBERS" "$REAL_CLIENTS" "$SECONDS_COST" \
  2>"$T/cost.err" || { cat "$T/cost.err"; exit 1; }
grep -E '^cmdstat_(evalsha|hgetall)' "$T/cost.err" || true
echo "== $CROWD clients at once"
"$BENCH" crowd "$URL" big "127.0.0.1:$RPORT" "$CROWD"
echo "== a member killed -9, $READERS readers behind a ${DELAY}s delaying proxy"
"$BENCH" kill "redis://127.0.0.1:$PPORT" "$URL" big "$READERS"
