#!/usr/bin/env bash
# Flags and variables that had no test [C9, T2, S1, V1, V2]: --group-network (loopback, and a
# veth address beyond loopback that needs the secret), --group-port, --cache-try-dio (its
# `tcp pool: dio` line, and the member really reading its cache with O_DIRECT), --max-downloads
# (the number of GETs in flight at a hung S3 server), SHOAL_GROUP_SECRET (members demand it,
# clients present it), the role="Consumer" / role="Provider" metric labels, and that every
# malformed flag value is exit 2 and one line before any start-up log.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms

STORE=$T/store
for i in 0 1 2; do make_object "$STORE/d/o$i" $((8 * 1024 * 1024 + i * 4099)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
SECRET=0123456789abcdef-flags-test

# read_group GROUP OUT FLAGS... — every object through GROUP with a client that keeps nothing;
# byte-exact; the --summary lines in OUT.
read_group() {
  local g=$1 out=$2 i
  shift 2
  : >"$out"
  for i in 0 1 2; do
    "$SHOAL" cat "$S" "d/o$i" --meta "$META" --cache-group "$g" --no-sharing --cache-size 0 \
      --summary "$@" >"$T/out" 2>>"$out" || fail "read d/o$i through $g failed: $(tail -n 2 "$out")"
    cmp -s "$T/out" "$STORE/d/o$i" || fail "d/o$i differs through $g"
  done
}
total() { grep -o "$1 [0-9]*" "$2" | awk '{s += $NF} END {print s + 0}'; }
from_members() { # from_members SUMMARY — bytes read from members, any transport
  echo $(($(total "tcp bytes" "$1") + $(total "iorpc bytes" "$1") + $(total "rdma bytes" "$1")))
}
tcp_of() { "$SHOAL" group --meta "$META" --cache-group "$1" | awk '$3 == "provider" {print $5}'; }
read_bytes() { awk '$1 == "read_bytes:" {print $2}' "/proc/$1/io"; }

echo "== --group-network lo: the member listens on the interface's address"
start_member gn "$S" --meta "$META" --cache-group gn --group-network lo
wait_members "$META" gn 1
tcp_of gn | grep -q '^127\.0\.0\.1:[0-9]*$' || fail "tcp pool: $(tcp_of gn)"
read_group gn "$T/gn.sum"
[ "$(total "object store GETs" "$T/gn.sum")" -eq 0 ] || fail "the client read the store"
expect_exit 2 "$SHOAL" serve "$S" --meta "$META" --cache-group gn --cache-dir "$T/x" \
  --group-network nosuch0
grep -q "group-network nosuch0: no such interface" "$T/last.err" || fail "$(cat "$T/last.err")"
expect_exit 2 "$SHOAL" serve "$S" --meta "$META" --cache-group gn --cache-dir "$T/x" \
  --group-network lo --group-ip 127.0.0.1

echo "== --group-network beyond loopback: refused without a secret, SHOAL_GROUP_SECRET opens it"
NETNS_SETUP='ip link set lo up && ip link add v0 type veth peer name v1 &&
  ip addr add 10.213.7.1/24 dev v0 && ip link set v0 up && ip link set v1 up'
expect_exit 2 unshare -n bash -c "$NETNS_SETUP && exec \"\$0\" \"\$@\"" "$SHOAL" serve "$S" \
  --meta "$META" --cache-group gv --cache-dir "$T/gv0.cache" --group-network v0
grep -q "refusing to listen on 10.213.7.1 without a group secret" "$T/last.err" ||
  fail "$(cat "$T/last.err")"
SHOAL_GROUP_SECRET=$SECRET unshare -n bash -c "$NETNS_SETUP && exec \"\$0\" \"\$@\"" "$SHOAL" \
  serve "$S" --meta "$META" --cache-group gv --cache-dir "$T/gv.cache" --group-network v0 \
  --log-file "$T/gv.log" 2>"$T/gv.err" &
gvpid=$!
PIDS+=($gvpid)
wait_members "$META" gv 1
addr=$(tcp_of gv)
case $addr in 10.213.7.1:*) ;; *) fail "member gv listens on $addr" ;; esac
# from inside its namespace: the secret is demanded and, given, works
expect_exit 1 nsenter -t "$gvpid" -n "$SHOAL" ping "$addr"
grep -q "authentication failed" "$T/last.out" || fail "ping without the secret: $(cat "$T/last.out")"
SHOAL_GROUP_SECRET=$SECRET nsenter -t "$gvpid" -n "$SHOAL" ping "$addr" >"$T/ping.out" ||
  fail "ping with SHOAL_GROUP_SECRET: $(cat "$T/ping.out")"
grep -q "^iorpc .* ok" "$T/ping.out" || fail "$(cat "$T/ping.out")"
SHOAL_GROUP_SECRET=$SECRET nsenter -t "$gvpid" -n "$SHOAL" cat "$S" d/o0 --meta "$META" \
  --cache-group gv --no-sharing --cache-size 0 --summary >"$T/out" 2>"$T/gv.sum" ||
  fail "read through gv: $(cat "$T/gv.sum")"
cmp -s "$T/out" "$STORE/d/o0" || fail "d/o0 differs through gv"
[ "$(from_members "$T/gv.sum")" -gt 0 ] && [ "$(total "object store GETs" "$T/gv.sum")" -eq 0 ] ||
  fail "not read from the member: $(cat "$T/gv.sum")"
kill -TERM "$gvpid"
wait_exit "$gvpid"
[ "$EXIT_RC" -eq 0 ] || fail "member gv exited $EXIT_RC: $(tail -n 3 "$T/gv.err")"

echo "== SHOAL_GROUP_SECRET on loopback: members demand it, clients without it use the store"
SHOAL_GROUP_SECRET=$SECRET start_member sec "$S" --meta "$META" --cache-group sec \
  --group-ip 127.0.0.1
wait_members "$META" sec 1
SHOAL_GROUP_SECRET=$SECRET read_group sec "$T/sec.sum" --use-iorpc
[ "$(total "object store GETs" "$T/sec.sum")" -eq 0 ] || fail "with the secret: $(cat "$T/sec.sum")"
[ "$(total "iorpc bytes" "$T/sec.sum")" -gt 0 ] || fail "no IORPC bytes: $(cat "$T/sec.sum")"
# (no host-local secret either: a client with it would be refused as holding another secret)
read_group sec "$T/nosec.sum" --local-secret-file off
[ "$(total "fallbacks" "$T/nosec.sum")" -gt 0 ] || fail "no fallback without the secret: $(cat "$T/nosec.sum")"
[ "$(from_members "$T/nosec.sum")" -eq 0 ] || fail "served without the secret: $(cat "$T/nosec.sum")"
grep -q "requires the group secret" "$T/nosec.sum" || fail "no line naming the secret: $(cat "$T/nosec.sum")"
echo "another-secret-0123456789" >"$T/wrong.secret"
expect_exit 1 "$SHOAL" ping "$(tcp_of sec)" --group-secret-file "$T/wrong.secret"
grep -q "authentication failed" "$T/last.out" || fail "wrong secret: $(cat "$T/last.out")"
# the file wins over the variable
expect_exit 1 env SHOAL_GROUP_SECRET=$SECRET "$SHOAL" ping "$(tcp_of sec)" \
  --group-secret-file "$T/wrong.secret"

echo "== --group-port: the pool listens where asked; a taken port is one line"
port=$(free_port)
start_member gp "$S" --meta "$META" --cache-group gp --group-ip 127.0.0.1 --group-port "$port"
wait_members "$META" gp 1
[ "$(tcp_of gp)" = "127.0.0.1:$port" ] || fail "tcp pool $(tcp_of gp), wanted port $port"
"$SHOAL" ping "127.0.0.1:$port" >/dev/null || fail "ping 127.0.0.1:$port"
expect_exit 1 timeout 20 "$SHOAL" serve "$S" --meta "$META" --cache-group gp2 --cache-dir "$T/gp2" \
  --group-ip 127.0.0.1 --group-port "$port"
grep -q "cannot listen on 127.0.0.1:$port: Address already in use" "$T/last.err" ||
  fail "$(cat "$T/last.err")"
expect_exit 2 "$SHOAL" serve "$S" --meta "$META" --cache-group gp2 --cache-dir "$T/gp2" \
  --group-port 65536

echo "== --cache-try-dio: 'tcp pool: dio', and cached blocks are read with O_DIRECT"
start_member dio "$S" --meta "$META" --cache-group dio --group-ip 127.0.0.1 --cache-try-dio
start_member sf "$S" --meta "$META" --cache-group sf --group-ip 127.0.0.1
wait_members "$META" dio 1
wait_members "$META" sf 1
grep -q "max pipe size: [0-9]*, iorpc: dio, tcp pool: dio$" "$T/dio.log" || fail "no 'tcp pool: dio' line"
grep -q "max pipe size: [0-9]*, iorpc: dio, tcp pool: sendfile$" "$T/sf.log" || fail "no 'tcp pool: sendfile' line"
size=$(cat "$STORE"/d/o* | wc -c)
for m in dio sf; do
  read_group "$m" "$T/$m.cold" # the member fills its cache
  rb0=$(read_bytes "$(eval echo "\$PID_$m")")
  read_group "$m" "$T/$m.warm" # served from the member's cache over the TCP pool
  rb1=$(read_bytes "$(eval echo "\$PID_$m")")
  [ "$(total "tcp bytes" "$T/$m.warm")" -eq "$size" ] || fail "$m: not all over the TCP pool"
  eval "rb_$m=$((rb1 - rb0))"
done
echo "  disk reads while serving $size cached bytes: with --cache-try-dio $rb_dio, with sendfile $rb_sf"
# O_DIRECT goes to the disk every time; sendfile serves the blocks just written from the page cache
[ "$rb_dio" -ge "$size" ] || fail "--cache-try-dio read only $rb_dio bytes from disk for $size"
[ "$rb_sf" -lt $((size / 2)) ] || fail "sendfile read $rb_sf bytes from disk: the page cache was cold?"

echo "== role labels: role=\"Provider\" on a member, role=\"Consumer\" on a --no-sharing client"
scrape "$(metrics_addr sf)" /metrics "$T/provider.prom"
grep -q '^process_cpu_seconds_total{cache_group="sf",role="Provider"' "$T/provider.prom" ||
  fail "provider labels: $(grep -m 1 process_cpu "$T/provider.prom")"
"$SHOAL" bench "$S" --meta "$META" --cache-group sf --threads 1 --duration 1s --linger 60s \
  --metrics 127.0.0.1:0 --log-level info --log-file "$T/consumer.log" >"$T/consumer.out" &
cpid=$!
PIDS+=($cpid)
wait_for grep -q "^idle:" "$T/consumer.out" || fail "bench did not get to linger: $(cat "$T/consumer.out")"
scrape "$(metrics_addr consumer)" /metrics "$T/consumer.prom"
grep -q '^process_cpu_seconds_total{cache_group="sf",role="Consumer"' "$T/consumer.prom" ||
  fail "consumer labels: $(grep -m 1 process_cpu "$T/consumer.prom")"
"$SHOAL" group --meta "$META" --cache-group sf | grep -q " consumer " || fail "bench is no consumer"
kill -TERM "$cpid"
wait_exit "$cpid"

if command -v node >/dev/null && { [ -f "$SRC/.deps/node_modules/s3rver/bin/s3rver.js" ] || command -v npm >/dev/null; }; then
  echo "== --max-downloads: at most N GETs in flight at a hung S3 server"
  OBJS=$T/objs
  for i in $(seq 0 5); do make_object "$OBJS/m/o$i" $((1024 * 1024)); done
  start_s3rver maxdl
  s3_put_dir "$S3_ENDPOINT" maxdl "$OBJS"
  start_s3fault "$S3_PORT"
  hung() { grep -c "hang fault" "$S3F_LOG" || true; }
  hung_at_least() { [ "$(hung)" -ge "$1" ]; }
  for n in 3 5; do
    s3_mode hang
    SHOAL_STORE_DEADLINE=60s "$SHOAL" warmup --storage s3://maxdl --prefix m/ \
      --endpoint "$S3F_ENDPOINT" --block-size 256K --cache-dir "$T/maxdl$n" --threads 16 \
      --max-downloads "$n" 2>"$T/maxdl$n.err" &
    wpid=$!
    PIDS+=($wpid)
    wait_for hung_at_least "$n" || fail "fewer than $n GETs reached the store: $(cat "$S3F_LOG")"
    sleep 1 # a window in which a missing bound would show more GETs (16 threads want them)
    got=$(hung)
    [ "$got" -eq "$n" ] || fail "--max-downloads $n: $got GETs in flight"
    echo "  --max-downloads $n: $got GETs in flight"
    kill -TERM "$wpid"
    wait_exit "$wpid"
  done
  s3_mode pass
else
  fail "no node/npm for s3rver (scripts/setup.sh installs them): --max-downloads untested"
fi

echo "== malformed values: exit 2 and one line, before any start-up log"
for bad in "--meta mysql://h/db" "--meta redis://h:notaport/1" "--meta redis://h:6379/x" \
  "--meta sqlite3://" "--endpoint notaurl" "--rdma-network nosuch0" "--group-ip 1.2.3" \
  "--metrics nohostport" "--max-downloads -1" "--cache-size lots"; do
  for cmd in "serve $S --cache-group gm --cache-dir $T/bad.cache" \
    "cat $S d/o0 --cache-group gm --cache-dir $T/bad.cache" "group --cache-group gm"; do
    case "$cmd:$bad" in group*--endpoint* | group*--rdma* | group*--group-ip* | group*--metrics* | \
      group*--max-downloads* | group*--cache-size*) continue ;; esac
    # shellcheck disable=SC2086
    expect_exit 2 "$SHOAL" $cmd $bad
    [ "$(wc -l <"$T/last.err")" -eq 1 ] || fail "$cmd $bad: not one line: $(cat "$T/last.err")"
    grep -q "^shoal [a-z]*: .*${bad%% *}" "$T/last.err" || fail "$cmd $bad: $(cat "$T/last.err")"
  done
done
expect_exit 2 "$SHOAL" serve "$S" --cache-group gm --meta 'redis://:hunter2secret@h:x/1'
grep -q hunter2secret "$T/last.err" && fail "a redis password was echoed: $(cat "$T/last.err")"
echo "  every malformed value: exit 2, one line"
echo "PASS"
