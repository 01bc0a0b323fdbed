#!/usr/bin/env bash
# Two seed behaviours of RDMA, through libfabric's tcp provider on loopback:
# [M7] with fs.pipe-max-size raised to 8 MiB for the test (restored after), so that only RDMA
#      can turn splice off, a member with --rdma-network logs the splice->dio line and runs dio
#      (and serves RDMA reads byte-exact), while the same member without RDMA runs splice.
# [V1] a client retrying an RDMA peer it cannot reach logs the seeds' FAQ line
#      `Cannot establish rpc connection`, rate-limited, with the retry time in ms below a second,
#      and its reads still arrive byte-exact over IORPC on TCP.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && fail "libfabric has no tcp provider"
[ -w /proc/sys/fs/pipe-max-size ] || fail "fs.pipe-max-size is not writable (run as root)"

STORE=$T/store
for i in $(seq 0 7); do make_object "$STORE/d/o$i" $((2 * 1024 * 1024 + i * 4099)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"

read_all() { # read_all GROUP LOG FLAGS... — every object, byte-exact; summaries in LOG.sum
  local g=$1 log=$2 i
  shift 2
  : >"$log.sum"
  for i in $(seq 0 7); do
    "$SHOAL" cat "$S" "d/o$i" --meta "$META" --cache-group "$g" --no-sharing --cache-size 0 \
      --log-file "$log" --summary "$@" >"$T/out" 2>>"$log.sum" || fail "read d/o$i failed ($*)"
    cmp -s "$T/out" "$STORE/d/o$i" || fail "d/o$i differs ($*)"
  done
}
sum_field() { grep -o "$2 [0-9]*" "$1.sum" | awk '{s+=$NF} END {print s+0}'; }

echo "== [M7] fs.pipe-max-size at 8 MiB: only RDMA turns splice into dio"
# fs.pipe-max-size is global: one test at a time changes it, and it is restored whatever happens.
exec 9>/tmp/shoal-pipe-max-size.lock
flock 9
PIPE_ORIG=$(cat /proc/sys/fs/pipe-max-size)
restore_pipe() {
  [ -n "${PIPE_ORIG:-}" ] && echo "$PIPE_ORIG" >/proc/sys/fs/pipe-max-size
  PIPE_ORIG=""
  flock -u 9 2>/dev/null || true
}
# (errexit stays on in a trap: restore without it, and hand lib.sh's cleanup the status)
trap 'rc=$?; set +e; restore_pipe; (exit $rc); cleanup' EXIT
echo 8388608 >/proc/sys/fs/pipe-max-size
start_member r "$S" --meta "$META" --cache-group gr --group-ip 127.0.0.1 --rdma-network lo \
  --iorpc-mode splice
start_member p "$S" --meta "$META" --cache-group gp --group-ip 127.0.0.1 --iorpc-mode splice
wait_members "$META" gr 1
wait_members "$META" gp 1
restore_pipe
grep -q "splice iorpc is disabled since max pipe size is 8388608 or RDMA is enabled, use dio instead" \
  "$T/r.log" || fail "no splice->dio line with RDMA: $(grep -m 2 -E 'splice|max pipe' "$T/r.log")"
grep -q "max pipe size: 8388608, iorpc: dio," "$T/r.log" || fail "the RDMA member does not run dio"
grep -q "max pipe size: 8388608, iorpc: splice," "$T/p.log" || fail "the control member does not run splice"
grep -q "splice iorpc is disabled" "$T/p.log" && fail "the control member turned splice off"
read_all gr "$T/rdma.log" --rdma-network lo
[ "$(sum_field "$T/rdma.log" "rdma bytes")" -gt 0 ] || fail "no rdma bytes: $(tail -n 1 "$T/rdma.log.sum")"
read_all gp "$T/splice.log" --use-iorpc
[ "$(sum_field "$T/splice.log" "iorpc bytes")" -gt 0 ] || fail "no iorpc bytes from the splice member"

echo "== [V1] an RDMA peer that cannot be reached: 'Cannot establish rpc connection', rate-limited"
start_member c "$S" --meta "$META" --cache-group gv --group-ip 127.0.0.1
wait_members "$META" gv 1
closed=$(free_port) # nothing listens there: every RDMA connect is refused
# A second record of the group: member c's TCP addresses, and an RDMA address nobody serves.
python3 - "$T/meta.db" gv "127.0.0.1:$closed" >"$T/fake.id" 2>"$T/fake.err" <<'PY' &
import os, sqlite3, sys, time
db, group, rdma = sys.argv[1], sys.argv[2], sys.argv[3]
con = sqlite3.connect(db, timeout=5)
(rec,) = con.execute("SELECT record FROM shoal_members WHERE grp = ?", (group,)).fetchone()
f = rec.split("|")
mid = os.urandom(16).hex()
f[1], f[2], f[5], f[6] = mid, "unreachable", "1", rdma
print(mid, flush=True)
beat = 0
while True:
    beat += 1
    f[16], f[17] = str(beat), str(int(time.time() * 1000))
    try:
        con.execute("INSERT OR REPLACE INTO shoal_members (grp, id, record) VALUES (?, ?, ?)",
                    (group, mid, "|".join(f)))
        con.commit()
    except sqlite3.OperationalError:
        pass
    time.sleep(0.2)
PY
track fake $! helper "$T/fake.err" # exit 0 or 143; a traceback in its stderr fails the test
wait_members "$META" gv 2
fake=$(cat "$T/fake.id")
# One client process retrying every 100 ms for 3 s: about 30 attempts, a line at most each second.
# (bench reads only from owners, and member c refuses to fill the unreachable member's blocks:
# those reads count as errors, so bench exits 1; it must still have run its 3 s.)
set +e
IORPC_RDMA_RETRY_DURATION=100ms "$SHOAL" bench "$S" --meta "$META" --cache-group gv \
  --rdma-network lo --threads 2 --duration 3s >"$T/v1.out" 2>"$T/v1.err"
set -e
grep -q "^result: " "$T/v1.out" || fail "bench did not run: $(tail -n 3 "$T/v1.err")"
lines=$(grep -c "Cannot establish rpc connection to member $fake over RDMA" "$T/v1.err" || true)
echo "  $lines lines in 3 s of retries every 100ms"
[ "$lines" -ge 2 ] || fail "the FAQ line was not logged while retrying: $(head -n 5 "$T/v1.err")"
[ "$lines" -le 5 ] || fail "the FAQ line is not rate-limited: $lines lines"
grep -q "Cannot establish rpc connection .*RDMA retried in 100ms$" "$T/v1.err" ||
  fail "the retry time is not in ms: $(grep -m 1 'Cannot establish' "$T/v1.err")"
grep -q "retried in 0s" "$T/v1.err" && fail "a duration printed as 0s"
# and the reads it could not send by RDMA went over IORPC on TCP, byte-exact
IORPC_RDMA_RETRY_DURATION=100ms read_all gv "$T/v1.log" --rdma-network lo
grep -q "Cannot establish rpc connection to member $fake" "$T/v1.log" || fail "no FAQ line from cat"
[ "$(sum_field "$T/v1.log" "iorpc bytes")" -gt 0 ] || fail "no IORPC fallback bytes"
echo "PASS"
