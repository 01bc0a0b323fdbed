#!/usr/bin/env bash
# Observability [V2, V3, V4, C3]: every member of a 3-member group serves Prometheus text that a
# strict parser accepts, labelled with cache_group and role; the clients here use the TCP pool, so
# the pool's stage histograms move under traffic while the IORPC ones (and the IORPC columns of
# `shoal stats`) stay 0 (test_metric_meanings.sh has IORPC and the shared cap); the bytes the members say they served match the bytes the clients read
# within 1%; `shoal stats` against a member prints its sections with non-zero rates during a
# read, and against a mount when `shoal mount` works here; the endpoint holds its bounds (large,
# silent and wrong requests); `shoal cat` opens an endpoint only when asked; bad flags exit 2, a
# missing source exits 1.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
PROMPARSE="$(dirname "$0")/promparse.py"

python3 "$PROMPARSE" --self-test >/dev/null || fail "promparse self-test"

STORE=$T/store
# 1 MiB blocks: about 40 of them, so that every member owns some.
NOBJ=10
for i in $(seq 0 $((NOBJ - 1))); do make_object "$STORE/data/f$i" $((3 * 1024 * 1024 + i * 333331)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
G=gm

echo "== three members: two on the default metrics address, one on an explicit one"
BS=(--block-size 1M)
start_member m1 "$S" --meta "$META" --cache-group $G --group-ip 127.0.0.1 "${BS[@]}"
start_member m2 "$S" --meta "$META" --cache-group $G --group-ip 127.0.0.1 "${BS[@]}"
m3_port=$(free_port)
start_member m3 "$S" --meta "$META" --cache-group $G --group-ip 127.0.0.1 "${BS[@]}" \
  --metrics "127.0.0.1:$m3_port"
wait_members "$META" $G 3
A1=$(metrics_addr m1)
A2=$(metrics_addr m2)
A3=$(metrics_addr m3)
echo "  endpoints: $A1 $A2 $A3"
[ "$A3" = "127.0.0.1:$m3_port" ] || fail "m3 listens on $A3, asked for 127.0.0.1:$m3_port"
for a in "$A1" "$A2"; do
  port=${a##*:}
  [ "${a%:*}" = 127.0.0.1 ] && [ "$port" -ge 9567 ] && [ "$port" -lt 9667 ] ||
    fail "default endpoint $a is not 127.0.0.1:9567..9666"
done
[ "$A1" != "$A2" ] || fail "two members share the endpoint $A1"

echo "== flags"
expect_exit 2 "$SHOAL" serve "$S" --meta "$META" --cache-group $G --metrics nonsense
grep -q "invalid --metrics nonsense" "$T/last.err" || fail "bad --metrics: $(cat "$T/last.err")"
# Another group, so that its brief membership cannot disturb the placement of gm.
expect_exit 1 "$SHOAL" serve "$S" --meta "$META" --cache-group gm-busy --group-ip 127.0.0.1 \
  --cache-dir "$T/busy.cache" --metrics "$A3"
grep -q "cannot listen for metrics on $A3" "$T/last.err" ||
  fail "busy --metrics: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" stats --schema "" "$A1"
grep -q "empty --schema" "$T/last.err" || fail "empty schema: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" stats -l 2 "$A1"
expect_exit 2 "$SHOAL" stats --interval 0 "$A1"
expect_exit 2 "$SHOAL" stats --schema z "$A1"
expect_exit 2 "$SHOAL" stats
expect_exit 1 "$SHOAL" stats -c 1 "127.0.0.1:$(free_port)"
grep -q "cannot connect" "$T/last.err" || fail "closed port: $(cat "$T/last.err")"
expect_exit 1 "$SHOAL" stats -c 1 "$T/no-such-dir"
expect_exit 1 "$SHOAL" stats -c 1 "$T"
grep -q "not a shoal mount" "$T/last.err" || fail "plain dir: $(cat "$T/last.err")"
[ "$(wc -l <"$T/last.err")" -eq 1 ] || fail "more than one line for a missing source"
expect_exit 0 "$SHOAL" stats --schema rxq -c 1 --interval 0.2 "$A1"
grep -q "unknown --schema letter 'x'" "$T/last.err" || fail "no warning for x"
[ "$(wc -l <"$T/last.out")" -eq 3 ] || fail "-c 1 printed $(cat "$T/last.out")"

echo "== shoal cat opens an endpoint only with --metrics"
client() {
  "$SHOAL" cat "$S" "$@" --meta "$META" --cache-group $G --no-sharing --cache-size 0 "${BS[@]}"
}
client data/f0 --log-level info --log-file "$T/cat1.log" >/dev/null || fail "cat failed"
! grep -q "metrics listening" "$T/cat1.log" || fail "cat opened an endpoint unasked"
client data/f0 --log-level info --log-file "$T/cat2.log" --metrics "127.0.0.1:$(free_port)" \
  >/dev/null || fail "cat --metrics failed"
grep -q "prometheus metrics listening on 127.0.0.1:" "$T/cat2.log" || fail "cat --metrics: no endpoint"

echo "== a bounded read loop; shoal stats watches a member meanwhile"
snapshot_served() { # total remotecache_serve_bytes over the members
  local total=0 a v
  for a in "$A1" "$A2" "$A3"; do
    scrape "$a" /stats "$T/served.txt"
    v=$(awk '$1 == "remotecache_serve_bytes" {print $2}' "$T/served.txt")
    total=$((total + v))
  done
  echo "$total"
}
served0=$(snapshot_served)
: >"$T/read.bytes"
reader_loop() { # reads every object until $T/stop exists (at most 60 s); logs bytes per read
  local end=$((SECONDS + 60)) f
  while [ ! -e "$T/stop" ] && [ $SECONDS -lt $end ]; do
    for f in $(seq 0 $((NOBJ - 1))); do
      client "data/f$f" --log-level error >"$T/read.out" || { echo FAIL >>"$T/read.bytes"; return; }
      cmp -s "$T/read.out" "$STORE/data/f$f" || { echo DIFF >>"$T/read.bytes"; return; }
      stat -c %s "$STORE/data/f$f" >>"$T/read.bytes"
    done
  done
}
reader_loop &
track reader $! helper
wait_for test -s "$T/read.bytes" || fail "the read loop did not start"

"$SHOAL" stats --schema ufmcreo -l 1 -c 3 "$A1" >"$T/stats.full" 2>"$T/stats.err" ||
  fail "shoal stats failed: $(cat "$T/stats.err")"
cat "$T/stats.full"
[ "$(wc -l <"$T/stats.full")" -eq 5 ] || fail "expected 2 header lines and 3 rows"
for s in usage fuse meta blockcache remotecache rdma object; do
  head -n 1 "$T/stats.full" | grep -q -- "-$s-\|-$s\b\|\b$s-" || fail "no section $s in the header"
done
cols=$(sed -n 2p "$T/stats.full" | tr -s ' |' '  ')
want="cpu mem buf ops lat read write ops lat read write hits miss evict read serve db_c lat pr_c lat wb_c lat write read w_ops lat recv get get_c lat put put_c"
[ "$(echo $cols)" = "$want" ] || fail "column names: '$(echo $cols)', want '$want'"
# Every row has one 5-character cell per column.
ncols=$(echo $want | wc -w)
width=$((ncols * 6 - 1))
tail -n 3 "$T/stats.full" | while IFS= read -r row; do
  [ ${#row} -eq $width ] || fail "row is ${#row} characters, want $width: '$row'"
done

# The serve rate of the group: one member may own few blocks of these objects, so watch each
# until one shows traffic (the loop keeps reading).
served_rows=0
for a in "$A1" "$A2" "$A3"; do
  "$SHOAL" stats --schema r -l 1 -c 3 "$a" >"$T/stats.r" || fail "shoal stats --schema r failed"
  n=$(tail -n 3 "$T/stats.r" | awk '$2 != "0"' | wc -l)
  echo "  $a: $n of 3 rows with serve > 0"
  served_rows=$((served_rows + n))
  # The IORPC columns db_c, pr_c and wb_c (and their latencies) stay 0: only the pool serves.
  tail -n 3 "$T/stats.r" | awk '{for (i = 3; i <= 8; i++) if ($i != "0") exit 1}' ||
    fail "an IORPC column moved without IORPC: $(cat "$T/stats.r")"
done
[ "$served_rows" -ge 1 ] || fail "no member showed a serve rate during the reads"

touch "$T/stop"
wait_proc reader 70
grep -q "FAIL\|DIFF" "$T/read.bytes" && fail "the read loop failed ($(grep -c . "$T/read.bytes") reads)"
read_bytes=$(awk '{s += $1} END {print s}' "$T/read.bytes")
reads=$(wc -l <"$T/read.bytes")

echo "== Prometheus text of every member"
for i in 1 2 3; do
  eval "a=\$A$i"
  scrape "$a" /metrics "$T/prom$i.txt"
  python3 "$PROMPARSE" "$T/prom$i.txt" --expect-label cache_group=$G \
    --expect-label role=Provider --expect-label volume="$S" >"$T/prom$i.samples" ||
    fail "member $i: Prometheus text rejected"
  for m in mount_iorpc_processRespDur_tp99 mount_iorpc_writeBodyDur_tp50 \
    mount_iorpc_decodeBodyDur_max mount_iorpc_inflight mount_iorpc_processRespDur_tp50 \
    mount_iorpc_processRespDur_tp90 mount_iorpc_processRespDur_max fuse_ops blockcache_hits \
    remotecache_serve_bytes remotecache_get_bytes object_get_bytes rdma_write_bytes \
    remotecache_pool_inflight remotecache_pool_processRespDur_tp99 remotecache_inflight_limit \
    blockcache_dirs_down \
    buffer_used_bytes process_cpu_seconds_total process_open_fds; do
    grep -q "^$m " "$T/prom$i.samples" || fail "member $i lacks $m"
  done
done
# Where traffic flowed the pool's stage histograms are non-zero (their window is the last 15 s,
# and the reads ended a moment ago); every IORPC series is 0, as the seeds define them [V2].
for i in 1 2 3; do
  nz=$(awk '$1 ~ /^mount_iorpc_/ && $2 + 0 != 0' "$T/prom$i.samples")
  [ -z "$nz" ] || fail "member $i: IORPC series moved without IORPC: $nz"
done
for m in remotecache_pool_processRespDur_tp99 remotecache_pool_writeBodyDur_tp50 \
  remotecache_pool_decodeBodyDur_max remotecache_pool_processRespDur_count \
  remotecache_pool_writeBodyDur_count remotecache_pool_decodeBodyDur_count; do
  moved=0
  for i in 1 2 3; do
    v=$(awk -v m="$m" '$1 == m {print $2}' "$T/prom$i.samples")
    served=$(awk '$1 == "remotecache_serve_requests" {print $2}' "$T/prom$i.samples")
    if python3 -c "import sys; sys.exit(0 if float('$v') > 0 else 1)"; then
      moved=$((moved + 1))
    elif python3 -c "import sys; sys.exit(0 if float('$served') > 0 else 1)"; then
      fail "member $i served $served requests but $m is $v"
    fi
  done
  [ "$moved" -ge 1 ] || fail "$m is zero on every member"
done
# Gauges are back to rest; a member that served holds blocks in its buffers.
for i in 1 2 3; do
  for g in mount_iorpc_inflight remotecache_pool_inflight; do
    v=$(awk -v g=$g '$1 == g {print $2}' "$T/prom$i.samples")
    [ "$v" = "0.0" ] || fail "member $i: $g is $v at rest"
  done
  v=$(awk '$1 == "buffer_used_bytes" {print $2}' "$T/prom$i.samples")
  served=$(awk '$1 == "remotecache_serve_requests" {print $2}' "$T/prom$i.samples")
  python3 -c "import sys; sys.exit(0 if float('$v') > 0 or float('$served') == 0 else 1)" ||
    fail "member $i: buffer_used_bytes is $v after serving $served requests"
  python3 -c "import sys; sys.exit(0 if float('$v') % (1 << 20) == 0 else 1)" ||
    fail "member $i: buffer_used_bytes $v is not whole 1 MiB buffers"
done

echo "== served bytes agree with read bytes"
served1=$(snapshot_served)
served=$((served1 - served0))
echo "  $reads reads, $read_bytes bytes read, $served bytes served"
python3 -c "import sys; r, s = $read_bytes, $served; sys.exit(0 if abs(s - r) <= r / 100 else 1)" ||
  fail "served $served bytes, clients read $read_bytes (more than 1% apart)"

echo "== .stats text over HTTP"
scrape "$A1" /stats "$T/stats.txt"
for k in remotecache_serve_bytes mount_iorpc_decodeBodyDur_count remotecache_pool_decodeBodyDur_sum \
  cpu_seconds rss_bytes threads open_fds remotecache_connections; do
  grep -q "^$k [0-9]" "$T/stats.txt" || fail "/stats lacks $k"
done
scrape "$A1" "/metrics?format=stats" "$T/stats2.txt"
grep -q "^remotecache_serve_bytes [0-9]" "$T/stats2.txt" || fail "/metrics?format=stats"

echo "== the endpoint's bounds"
python3 - "$A1" <<'PY' || fail "endpoint bounds"
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
addr = (host, int(port))

def ask(data, wait_close=True):
    s = socket.create_connection(addr, timeout=10)
    if data:
        s.sendall(data)
    got = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        got += b
    s.close()
    return got

def status(resp):
    return resp.split(b"\r\n", 1)[0].decode()

assert status(ask(b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")).endswith("404 Not Found")
assert status(ask(b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")).endswith("405 Method Not Allowed")
assert status(ask(b"garbage\r\n\r\n")).endswith("400 Bad Request")
r = ask(b"HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
assert status(r).endswith("200 OK") and r.endswith(b"\r\n\r\n"), r[:200]
r = ask(b"GET /metrics HTTP/1.0\r\n\r\n")
assert b"Connection: close" in r and b"mount_iorpc_inflight" in r
r = ask(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
assert status(r).endswith("431 Request Header Fields Too Large"), status(r)
# A silent client is dropped within the timeout and the endpoint serves the next one.
t0 = time.monotonic()
assert ask(None) == b""
dt = time.monotonic() - t0
assert 1.0 < dt < 6.0, dt
assert b"mount_iorpc_inflight" in ask(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
print("  404, 405, 400, HEAD, HTTP/1.0, 431 and a silent client (dropped after %.1f s) ok" % dt)
PY

echo "== shoal stats against a mount"
mount_ok=0
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null &&
  "$SHOAL" mount --help >/dev/null 2>&1; then
  mkdir -p "$T/mnt"
  if timeout 20 "$SHOAL" mount "$S" "$T/mnt" -d --meta "$META" --cache-group $G --no-sharing \
    --cache-size 0 "${BS[@]}" --log-file "$T/mount.log" >"$T/mount.out" 2>&1; then
    MOUNTS+=("$T/mnt")
    track mnt "$(grep -o 'shoal\[[0-9]*\]' "$T/mount.log" | tail -n 1 | tr -dc 0-9)" daemon "$T/mount.log" "$T/mount.out"
    if wait_for test -r "$T/mnt/.stats"; then
      mount_ok=1
    fi
  fi
fi
if [ $mount_ok = 1 ]; then
  "$SHOAL" stats --schema ufmcreo -l 1 -c 3 "$T/mnt" >"$T/stats.mnt" ||
    fail "shoal stats on the mount failed"
  cat "$T/stats.mnt"
  [ "$(wc -l <"$T/stats.mnt")" -eq 5 ] || fail "mount: expected 5 lines"
  [ "$(sed -n 2p "$T/stats.mnt" | tr -s ' |' '  ' | xargs)" = "$want" ] ||
    fail "mount: column names differ from the member's"
  # Files not read through the mount yet, so the kernel's page cache cannot hide the reads.
  "$SHOAL" stats --schema fr -c 4 "$T/mnt" >"$T/stats.fr" 2>"$T/stats.fr.err" &
  track stats_fr $! client "$T/stats.fr.err"
  wait_log "$T/stats.fr" "." 30 3 # its first row is out: the reads below fall in rows 2-4
  for f in $(seq 0 $((NOBJ - 1))); do
    cmp -s "$T/mnt/data/f$f" "$STORE/data/f$f" || fail "data/f$f differs through the mount"
  done
  wait_proc stats_fr
  [ "$EXIT_RC" -eq 0 ] || fail "shoal stats --schema fr on the mount failed"
  cat "$T/stats.fr"
  python3 - "$T/stats.fr" <<'PY' || fail "the mount's fuse read and remotecache read did not move"
import sys
rows = open(sys.argv[1]).read().splitlines()[2:]
fuse_read = remote_read = False
for r in rows:
    fuse, remote = (p.split() for p in r.split("|"))
    fuse_read |= fuse[2] != "0"
    remote_read |= remote[0] != "0"
sys.exit(0 if fuse_read and remote_read else 1)
PY
  "$SHOAL" umount "$T/mnt" 2>/dev/null || fusermount3 -u "$T/mnt" 2>/dev/null || true
else
  skip_section "shoal stats against a mount: shoal mount is not available here ($(head -c 200 "$T/mount.out" 2>/dev/null))"
fi

echo "PASS"
