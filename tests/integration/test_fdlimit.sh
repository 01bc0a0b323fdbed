#!/usr/bin/env bash
# fd exhaustion [S2; RELIABILITY: fd exhaustion]: a member limited to 256 open files meets 1000
# connections. It stops accepting for a moment instead of spinning on the listener, keeps its fds
# for cache files and the store, stays up, and serves a healthy client once the flood is gone.
. "$(dirname "$0")/lib.sh"
command -v prlimit >/dev/null || skip "no prlimit"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
STORE=$T/store
make_object "$STORE/x.bin" $((12 * 1024 * 1024))
S="file://$STORE"
META="sqlite3://$T/meta.db"
prlimit --nofile=256 "$SHOAL" serve "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 \
  --cache-dir "$T/m.cache" --log-file "$T/m.log" 2>>"$T/m.err" &
track m $! member "$T/m.log" "$T/m.err"
wait_members "$META" g 1
PORT=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/m.log" | head -n 1 | cut -d: -f2)
ticks() { awk '{print $14 + $15}' "/proc/$PID_m/stat"; }

python3 - "$PORT" "$T/go" >"$T/flood.out" <<'PY' &
import os, socket, sys, time
port = int(sys.argv[1])
socks = []
for _ in range(1000):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        socks.append(s)
    except OSError:
        pass
print("opened", len(socks), flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.05)
for s in socks:
    s.close()
PY
track flood $! helper
wait_log "$T/flood.out" "^opened" 60
t0=$(ticks)
sleep 2 # the measurement window
t1=$(ticks)
hz=$(getconf CLK_TCK)
echo "  member CPU while flooded: $(( (t1 - t0) * 100 / (2 * hz) ))% of a core"
[ $((t1 - t0)) -lt "$hz" ] || fail "the member spins while out of fds ($((t1 - t0)) ticks in 2 s)"
proc_running m || fail "the member died"
touch "$T/go"
wait_proc flood 30
[ "$EXIT_RC" -eq 0 ] || fail "the flood helper failed ($EXIT_RC)"
cat "$T/flood.out"
grep -q "pausing accepts" "$T/m.log" || fail "the member never ran out of fds (the test did not test it)"
# The handshake deadline closes whatever the member accepted: wait for its fds to come back.
fds() { ls "/proc/$PID_m/fd" | wc -l; }
wait_until 30 bash -c "[ \$(ls /proc/$PID_m/fd | wc -l) -lt 128 ]" ||
  fail "the member still holds $(fds) fds after the flood"
"$SHOAL" cat "$S" x.bin --meta "$META" --cache-group g --no-sharing --cache-size 0 \
  --log-level error --summary >"$T/out" 2>"$T/sum" || fail "healthy client failed"
cmp -s "$T/out" "$STORE/x.bin" || fail "healthy client read wrong bytes"
[ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "the member did not serve after the flood: $(cat "$T/sum")"
echo "PASS test_fdlimit"
