#!/usr/bin/env bash
# Metric meanings as the seeds give them [V2, V4, R4]: with only the TCP pool in use, every
# mount_iorpc_* series and the IORPC columns of `shoal stats -l 1` (db_c pr_c wb_c and their
# latencies) stay 0 on the member and on the reading mount while the remotecache_pool_* series
# move; with --use-iorpc, and over RDMA (libfabric's tcp provider on lo), the IORPC series and
# columns move and the pool's stay still; the one cap
# of 2048 requests in process is shared: with IORPC holding all of it, a TCP-pool request waits
# (remotecache_pool_queued) and is answered when slots free up.
. "$(dirname "$0")/lib.sh"
need_fuse
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"
PROMPARSE="$(dirname "$0")/promparse.py"
# The cap test keeps 2048 cache files open in the member at once.
ulimit -n 8192 2>/dev/null || fail "cannot raise the open-file limit to 8192"

STORE=$T/store
for i in $(seq 0 7); do
  make_object "$STORE/p/f$i" $((6 * 1024 * 1024 + i * 4097))
  make_object "$STORE/i/f$i" $((6 * 1024 * 1024 + i * 4099))
done
S="file://$STORE"
META="sqlite3://$T/meta.db"
G=mm

start_member m "$S" --meta "$META" --cache-group $G --group-ip 127.0.0.1 --rdma-network lo \
  --metrics "127.0.0.1:$(free_port)"
wait_members "$META" $G 1
AM=$(metrics_addr m)
read -r POOL RPC < <("$SHOAL" group --meta "$META" --cache-group $G |
  awk 'NR > 1 && $3 == "provider" {print $5, $6; exit}')
[ -n "$RPC" ] && [ "$RPC" != "-" ] || fail "member has no IORPC address"

samples() { # samples ADDR OUT — the endpoint's samples as "name value", checked by promparse
  scrape "$1" /metrics "$T/scrape.txt"
  python3 "$PROMPARSE" "$T/scrape.txt" >"$2" || fail "Prometheus text of $1 rejected"
}
val() { awk -v n="$2" '$1 == n {print $2 + 0; exit}' "$1"; }
positive() { # positive FILE NAME... — each sample is > 0
  local f=$1 n
  shift
  for n in "$@"; do
    awk -v n="$n" '$1 == n && $2 + 0 > 0 {ok = 1} END {exit !ok}' "$f" ||
      fail "$n is $(val "$f" "$n") in $f, want > 0"
  done
}
all_iorpc_zero() { # all_iorpc_zero FILE — every mount_iorpc_* sample is 0
  local nz
  nz=$(awk '$1 ~ /^mount_iorpc_/ && $2 + 0 != 0' "$1")
  [ -z "$nz" ] || fail "IORPC series moved without IORPC in $1: $nz"
  grep -q '^mount_iorpc_inflight ' "$1" || fail "$1 lacks mount_iorpc_inflight"
}

# read_watched DIR TAG — reads every file of DIR through the mount while `shoal stats -l 1
# --schema r` watches the member and the mount; rows in $T/TAG.m.stats and $T/TAG.c.stats.
read_watched() {
  local dir=$1 tag=$2 f
  "$SHOAL" stats --schema r -l 1 -c 8 --interval 0.5 "$AM" >"$T/$tag.m.stats" &
  local s1=$!
  "$SHOAL" stats --schema r -l 1 -c 8 --interval 0.5 "$MNT" >"$T/$tag.c.stats" &
  local s2=$!
  PIDS+=("$s1" "$s2")
  wait_for test -s "$T/$tag.m.stats" || fail "shoal stats printed nothing"
  wait_for test -s "$T/$tag.c.stats" || fail "shoal stats on the mount printed nothing"
  sleep 0.6 # past the first reading, so the reads fall inside the rows
  for f in $(seq 0 7); do
    cmp -s "$MNT/$dir/f$f" "$STORE/$dir/f$f" || fail "$dir/f$f differs through the mount"
  done
  wait "$s1" || fail "shoal stats on the member failed"
  wait "$s2" || fail "shoal stats on the mount failed"
  echo "  member:"
  sed 's/^/    /' "$T/$tag.m.stats"
  echo "  mount:"
  sed 's/^/    /' "$T/$tag.c.stats"
}
# rows FILE — the data rows of a `shoal stats --schema r -l 1` output: read serve db_c lat pr_c
# lat wb_c lat.
rows() { tail -n +3 "$1"; }

echo "== TCP pool only: the IORPC series and columns stay 0, the pool series move"
MNT=$T/mnt1
start_mount c1 "$S" "$MNT" --meta "$META" --cache-group $G --no-sharing --cache-size 0 \
  --metrics "127.0.0.1:$(free_port)"
AC1=$(metrics_addr c1)
read_watched p pool
rows "$T/pool.m.stats" | awk '$2 != "0" {s = 1} END {exit !s}' || fail "member: serve never moved"
rows "$T/pool.c.stats" | awk '$1 != "0" {r = 1} END {exit !r}' || fail "mount: read never moved"
for w in m c; do
  rows "$T/pool.$w.stats" | awk '{for (i = 3; i <= 8; i++) if ($i != "0") exit 1}' ||
    fail "an IORPC column moved without IORPC ($w): $(cat "$T/pool.$w.stats")"
done
samples "$AM" "$T/pool.m"
samples "$AC1" "$T/pool.c"
all_iorpc_zero "$T/pool.m"
all_iorpc_zero "$T/pool.c"
positive "$T/pool.m" remotecache_pool_processRespDur_count remotecache_pool_writeBodyDur_count \
  remotecache_pool_decodeBodyDur_count remotecache_pool_inflight_max remotecache_tcp_serve_bytes
positive "$T/pool.c" remotecache_pool_decodeBodyDur_count remotecache_tcp_get_bytes
for g in remotecache_pool_inflight remotecache_pool_queued; do
  [ "$(val "$T/pool.m" $g)" = 0 ] || fail "member: $g is $(val "$T/pool.m" $g) at rest"
done
# The cap in force: 2048, or what the member's open-file limit leaves (it logs the figure).
cap=$(grep -o -E "[0-9]+ requests in process" "$T/m.log" | tail -n 1 | cut -d' ' -f1)
[ -n "$cap" ] && [ "$cap" -le 2048 ] || fail "member m logged no cap of requests in process"
[ "$(val "$T/pool.m" remotecache_inflight_limit)" = "$cap" ] ||
  fail "remotecache_inflight_limit is $(val "$T/pool.m" remotecache_inflight_limit), the cap $cap"
stop_mount c1 "$MNT"

echo "== IORPC: the IORPC series and columns move, the pool series stay still"
MNT=$T/mnt2
start_mount c2 "$S" "$MNT" --meta "$META" --cache-group $G --no-sharing --cache-size 0 \
  --use-iorpc --metrics "127.0.0.1:$(free_port)"
AC2=$(metrics_addr c2)
read_watched i iorpc
rows "$T/iorpc.m.stats" | awk '$3 != "0" {d = 1} $5 != "0" {p = 1} $7 != "0" {w = 1}
  END {exit !(d && p && w)}' || fail "member: db_c, pr_c or wb_c never moved over IORPC"
rows "$T/iorpc.c.stats" | awk '$3 != "0" {d = 1} END {exit !d}' ||
  fail "mount: db_c (answers decoded) never moved over IORPC"
samples "$AM" "$T/iorpc.m"
samples "$AC2" "$T/iorpc.c"
positive "$T/iorpc.m" mount_iorpc_processRespDur_count mount_iorpc_writeBodyDur_count \
  mount_iorpc_decodeBodyDur_count mount_iorpc_inflight_max remotecache_iorpc_serve_bytes
positive "$T/iorpc.c" mount_iorpc_decodeBodyDur_count remotecache_iorpc_get_bytes
for n in remotecache_pool_processRespDur_count remotecache_pool_writeBodyDur_count \
  remotecache_pool_decodeBodyDur_count remotecache_tcp_serve_bytes; do
  [ "$(val "$T/iorpc.m" $n)" = "$(val "$T/pool.m" $n)" ] ||
    fail "member: $n moved over IORPC ($(val "$T/pool.m" $n) -> $(val "$T/iorpc.m" $n))"
done
[ "$(val "$T/iorpc.c" remotecache_pool_decodeBodyDur_count)" = 0 ] ||
  fail "the IORPC mount decoded pool answers"
for g in mount_iorpc_inflight mount_iorpc_queued; do
  [ "$(val "$T/iorpc.m" $g)" = 0 ] || fail "member: $g is $(val "$T/iorpc.m" $g) at rest"
done
stop_mount c2 "$MNT"

echo "== IORPC over RDMA: the IORPC series move, the pool series stay still"
for f in $(seq 0 7); do
  "$SHOAL" cat "$S" "p/f$f" --meta "$META" --cache-group $G --no-sharing --cache-size 0 \
    --rdma-network lo --log-level error >"$T/out" || fail "RDMA read of p/f$f failed"
  cmp -s "$T/out" "$STORE/p/f$f" || fail "p/f$f differs over RDMA"
done
samples "$AM" "$T/rdma.m"
for n in mount_iorpc_processRespDur_count mount_iorpc_writeBodyDur_count \
  mount_iorpc_decodeBodyDur_count remotecache_rdma_serve_bytes; do
  [ "$(val "$T/rdma.m" $n)" -gt "$(val "$T/iorpc.m" $n)" ] ||
    fail "member: $n did not move over RDMA ($(val "$T/iorpc.m" $n) -> $(val "$T/rdma.m" $n))"
done
for n in remotecache_pool_processRespDur_count remotecache_pool_writeBodyDur_count \
  remotecache_pool_decodeBodyDur_count remotecache_tcp_serve_bytes; do
  [ "$(val "$T/rdma.m" $n)" = "$(val "$T/pool.m" $n)" ] ||
    fail "member: $n moved over RDMA ($(val "$T/pool.m" $n) -> $(val "$T/rdma.m" $n))"
done

echo "== one cap for both services: IORPC holds every slot, a pool read waits for one"
size=$(stat -c %s "$STORE/p/f0")
# The version of a file:// object, as store_file.c writes it (frames.file_version).
ver=$(python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import frames; print(frames.file_version(sys.argv[2]))" "$(dirname "$0")" "$STORE/p/f0")
python3 "$(dirname "$0")/capshare.py" "$RPC" "$POOL" "$AM" p/f0 "$ver" "$size" 4194304 ||
  fail "shared cap"

kill -TERM "$PID_m"
wait_exit "$PID_m"
[ "$EXIT_RC" -eq 0 ] || fail "member exited with $EXIT_RC"
echo "PASS"
