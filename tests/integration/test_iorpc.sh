#!/usr/bin/env bash
# IORPC over TCP [R1-R6, V1]: multiplexed reads byte-exact with far fewer connections than the
# TCP pool; each read mode (dio, pagecache, splice) byte-exact; splice falls back to dio when
# fs.pipe-max-size is too small; an invalid mode is logged and served by dio; `disable` sends
# clients to the TCP pool with the "rpc disabled" line; connections grow under load and shrink
# back to one; shoal ping checks both transports.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms

STORE=$T/store
for i in $(seq 0 11); do make_object "$STORE/d/o$i" $((8 * 1024 * 1024 + i * 4099)); done
for i in $(seq 0 39); do make_object "$STORE/small/s$i" $((256 * 1024)); done
S="file://$STORE"

read_all() { # read_all META GROUP LOG — every object via IORPC, byte-exact
  local i
  for i in $(seq 0 11); do
    "$SHOAL" cat "$S" "d/o$i" --meta "$1" --cache-group "$2" --no-sharing --cache-size 0 \
      --use-iorpc --log-file "$3" --log-level info --summary >"$T/out" 2>>"$T/summary" ||
      fail "read d/o$i failed"
    cmp -s "$T/out" "$STORE/d/o$i" || fail "d/o$i differs ($2)"
  done
  [ "$(summary_lines "$T/summary")" -eq 12 ] || fail "expected 12 summaries: $(cat "$T/summary")"
  [ "$(summary_field "object store GETs" "$T/summary")" -eq 0 ] || fail "client went to the store"
  [ "$(summary_field fallbacks "$T/summary")" -eq 0 ] || fail "client fell back to the store"
  : >"$T/summary"
}

stop_members() { # stop_members NAME... — SIGTERM, exit 0, clean logs
  local m
  for m in "$@"; do stop_proc "$m"; done
}

# count_conns PORT... — established TCP connections to these local ports
count_conns() {
  local filter="" p
  for p in "$@"; do filter="$filter${filter:+ or }dport = :$p"; done
  ss -Htn state established "( $filter )" | wc -l
}

ports_of() { # ports_of META GROUP COLUMN(5=tcp pool, 6=iorpc)
  "$SHOAL" group --meta "$1" --cache-group "$2" | awk -v c="$3" 'NR>1 && $3=="provider" {split($c,a,":"); print a[2]}'
}

echo "== three members, dio (default): byte-exact, cold and warm"
META="sqlite3://$T/meta.db"
for m in a b c; do start_member "$m" "$S" --meta "$META" --cache-group g1 --group-ip 127.0.0.1; done
wait_members "$META" g1 3
read_all "$META" g1 "$T/client.log"
read_all "$META" g1 "$T/client.log"
grep -q "iorpc client started, server address 127.0.0.1:" "$T/client.log" || fail "no iorpc client line"
grep -q "max pipe size: [0-9]*, iorpc: dio, tcp pool: sendfile" "$T/a.log" || fail "no server start line"

echo "== 64 concurrent readers: IORPC needs far fewer connections than the TCP pool"
iports=$(ports_of "$META" g1 6)
pports=$(ports_of "$META" g1 5)
"$SHOAL" bench "$S" --meta "$META" --cache-group g1 --use-iorpc --threads 64 --duration 4s \
  --warm --prefix d/ --log-level warn >"$T/bench.iorpc" 2>"$T/bench.iorpc.err" &
track bench_iorpc $! client "$T/bench.iorpc.err"
wait_log "$T/bench.iorpc" "^t=2s" 60 # mid-run, under full load
ic=$(count_conns $iports)
wait_proc bench_iorpc
[ "$EXIT_RC" -eq 0 ] || fail "iorpc bench failed: $(tail -n 3 "$T/bench.iorpc")"
"$SHOAL" bench "$S" --meta "$META" --cache-group g1 --threads 64 --duration 4s --prefix d/ \
  --log-level warn >"$T/bench.pool" 2>"$T/bench.pool.err" &
track bench_pool $! client "$T/bench.pool.err"
wait_log "$T/bench.pool" "^t=2s" 60
pc=$(count_conns $pports)
wait_proc bench_pool
[ "$EXIT_RC" -eq 0 ] || fail "pool bench failed: $(tail -n 3 "$T/bench.pool")"
grep "^result" "$T/bench.iorpc" "$T/bench.pool"
echo "  connections: iorpc $ic, tcp pool $pc"
grep -q " 0 errors" "$T/bench.iorpc" || fail "iorpc bench had errors"
[ "$ic" -ge 1 ] && [ "$pc" -ge 8 ] && [ $((ic * 4)) -le "$pc" ] || fail "iorpc used $ic connections, pool $pc"

echo "== shoal ping"
pp=$(echo "$pports" | head -n 1)
"$SHOAL" ping "127.0.0.1:$pp" >"$T/ping" || fail "ping failed: $(cat "$T/ping")"
grep -q "^tcp .* ok" "$T/ping" && grep -q "^iorpc .* ok" "$T/ping" || fail "ping output: $(cat "$T/ping")"
expect_exit 1 "$SHOAL" ping "127.0.0.1:1"
expect_exit 2 "$SHOAL" ping nohostport
stop_members a b c

for mode in pagecache splice; do
  echo "== --iorpc-mode $mode"
  restore=""
  if [ "$mode" = splice ] && [ -w /proc/sys/fs/pipe-max-size ]; then
    exec 9>/tmp/shoal-pipe-max-size.lock # fs.pipe-max-size is global: one test at a time
    flock 9
    restore=$(cat /proc/sys/fs/pipe-max-size)
    [ "$restore" -ge 8388608 ] || echo 8388608 >/proc/sys/fs/pipe-max-size
  fi
  for m in a b c; do
    start_member "$mode$m" "$S" --meta "$META" --cache-group "g$mode" --group-ip 127.0.0.1 --iorpc-mode $mode
  done
  wait_members "$META" "g$mode" 3
  read_all "$META" "g$mode" "$T/client.log"
  read_all "$META" "g$mode" "$T/client.log"
  if [ -n "$restore" ]; then
    echo "$restore" >/proc/sys/fs/pipe-max-size
    flock -u 9
  fi
  if [ "$mode" = splice ] && [ -z "$restore" ]; then
    skip_section "splice: fs.pipe-max-size is not writable, so the members may run dio"
  else
    grep -q "iorpc: $mode," "$T/${mode}a.log" || fail "member does not run $mode: $(grep 'max pipe' "$T/${mode}a.log")"
  fi
  stop_members "${mode}a" "${mode}b" "${mode}c"
done

if [ -w /proc/sys/fs/pipe-max-size ]; then
  echo "== splice with fs.pipe-max-size below 8 MiB falls back to dio"
  exec 9>/tmp/shoal-pipe-max-size.lock
  flock 9
  orig=$(cat /proc/sys/fs/pipe-max-size)
  echo 1048576 >/proc/sys/fs/pipe-max-size
  start_member sp "$S" --meta "$META" --cache-group gsp --group-ip 127.0.0.1 --iorpc-mode splice
  wait_members "$META" gsp 1
  echo "$orig" >/proc/sys/fs/pipe-max-size
  flock -u 9
  grep -q "splice iorpc is disabled since max pipe size is 1048576 or RDMA is enabled, use dio instead" "$T/sp.log" || fail "no splice fallback line"
  grep -q "iorpc: dio," "$T/sp.log" || fail "splice fallback is not dio"
  read_all "$META" gsp "$T/client.log"
  stop_members sp
else
  skip_section "splice fallback: fs.pipe-max-size is not writable"
fi

echo "== an invalid mode is logged and served by dio"
start_member bad "$S" --meta "$META" --cache-group gbad --group-ip 127.0.0.1 --iorpc-mode bogus
wait_members "$META" gbad 1
grep -q "iorpc-mode should be one of dio, pagecache, splice, disable, but got bogus, set to dio" "$T/bad.log" || fail "no invalid-mode line"
read_all "$META" gbad "$T/client.log"
stop_members bad

echo "== disable: clients log 'rpc disabled' and use the TCP pool"
for m in a b; do start_member "dis$m" "$S" --meta "$META" --cache-group gdis --group-ip 127.0.0.1 --iorpc-mode disable; done
wait_members "$META" gdis 2
: >"$T/dis-client.log"
read_all "$META" gdis "$T/dis-client.log"
grep -q "get iorpc address from 127.0.0.1 failed: rpc disabled" "$T/dis-client.log" || fail "no 'rpc disabled' line"
grep -q "iorpc: disable" "$T/disa.log" || fail "member does not say iorpc is disabled"
stop_members disa disb

echo "== connections grow under load and shrink back to one"
start_member as "$S" --meta "$META" --cache-group gas --group-ip 127.0.0.1
wait_members "$META" gas 1
# (a threshold of 200 requests/s, not the seeds' 1000: growth is the mechanism tested, not the speed
# of a busy machine under ASan)
SHOAL_IORPC_SCALE_PERIOD=100ms SHOAL_IORPC_GROW_QPS=200 "$SHOAL" bench "$S" --meta "$META" --cache-group gas --use-iorpc \
  --threads 32 --duration 4s --linger 16s --warm --prefix small/ --log-level warn >"$T/bench.scale" ||
  fail "scale bench failed: $(tail -n 3 "$T/bench.scale")"
maxc=$(grep -o '=[0-9]*' "$T/bench.scale" | tr -d = | sort -n | tail -n 1)
lastc=$(grep "^idle" "$T/bench.scale" | tail -n 1 | grep -o '=[0-9]*' | tr -d =)
grep "^result" "$T/bench.scale"
echo "  connections: at most $maxc under load, $lastc at the end"
[ "$maxc" -ge 2 ] || fail "connections did not grow under load"
[ "$lastc" -eq 1 ] || fail "connections did not shrink back to one"
echo "PASS test_iorpc"
