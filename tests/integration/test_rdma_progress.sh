#!/usr/bin/env bash
# The RDMA progress threads (libfabric's tcp provider on lo), issue 14:
# - finding 5: a member with 100 idle authenticated connections (tests/tools/rdma_peer idle: one
#   PING a second each) spends a bounded number of system calls per message on its progress
#   thread (strace -c on that thread), not a number that grows with the connections (one EQ and
#   one CQ per interface, read only when epoll says so; before, every queue of every connection
#   was read and re-armed on every wake-up);
# - finding 6: a member whose RDMA listener never answers (a socket that accepts no connection)
#   is in the group while another member serves: a mount retrying RDMA to it every second gets
#   every read answered and no read waits for a reconnect (only the first connection is waited
#   for) while the reconnects time out in the background and the other member keeps serving over
#   RDMA (channel set-up runs on a connector thread; on
#   verbs fi_endpoint resolves the address there, up to 2 s, which the tcp provider cannot show).
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms FI_PROVIDER=tcp
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"
command -v strace >/dev/null || skip "no strace"
need_fuse
PEER=$(dirname "$SHOAL")/rdma_peer
[ -x "$PEER" ] || fail "no $PEER (built with shoal)"
HERE=$(dirname "$0")

STORE=$T/store
for i in $(seq 0 7); do make_object "$STORE/d/o$i" $((1024 * 1024 + i * 4099)); done
S="file://$STORE"
printf 'correct horse battery staple\n' >"$T/secret"
BS=(--block-size 64K)

echo "== 100 idle connections: system calls per message on the member's progress thread [finding 5]"
MP=$(free_port)
start_member a "$S" --meta "sqlite3://$T/a.db" --cache-group ga --group-ip 127.0.0.1 --rdma-network lo \
  --group-secret-file "$T/secret" "${BS[@]}" --metrics "127.0.0.1:$MP" 2>"$T/a.err"
wait_members "sqlite3://$T/a.db" ga 1
RA=$(grep -o "rdma listening on 127.0.0.1:[0-9]*" "$T/a.log" | head -n 1 | awk '{print $NF}')
start_bg idle -- "$PEER" idle "$RA" "$T/secret" 100 600 "$T/idle.stats"
wait_for grep -q "^ready 100$" "$T/idle.stats" ||
  fail "100 idle connections did not authenticate: $(tr '\n' ' ' <"$T/idle.stats")"
TID=$(grep -l "^shoal-rdma-srv" /proc/"$PID_a"/task/*/comm | head -n 1 | cut -d/ -f5)
[ -n "$TID" ] || fail "no shoal-rdma-srv thread in the member"
stat_of() { awk -v n="$1" '$1 == n {print $2}' "$T/idle.stats"; }
p0=$(stat_of pongs)
timeout -s INT 4 strace -c -p "$TID" -o "$T/strace.out" 2>/dev/null || true
p1=$(stat_of pongs)
calls=$(awk '$NF == "total" {print $4}' "$T/strace.out")
msgs=$((p1 - p0))
echo "  $calls system calls for $msgs PINGs answered ($(awk -v c="$calls" -v m="$msgs" 'BEGIN {printf "%.1f", c / (m ? m : 1)}') per message)"
grep -E "^ *[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+" "$T/strace.out" | sort -k4 -n -r | head -n 6 | sed 's/^/    /'
[ "$msgs" -ge 100 ] || fail "too few PINGs answered in the window ($msgs)"
[ "$calls" -le $((20 * msgs)) ] || fail "$calls system calls for $msgs messages: more than 20 each"
stop_proc idle # exit 0 or 143, no report

echo "== a member that never answers its RDMA listener: the others keep serving [finding 6]"
start_bg hole -- python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(600)'
wait_for test -s "$T/hole.out" || fail "no silent listener"
APOOL=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/a.log" | head -n 1 | cut -d: -f2)
start_bg fake -- python3 "$HERE/fakemember.py" "$T/a.db" ga "127.0.0.1:$APOOL" "$S" 65536 \
  "127.0.0.1:$(cat "$T/hole.out")"
wait_members "sqlite3://$T/a.db" ga 2
need_fuse
# A mount (one long-lived requester) that retries RDMA to a failed member every second: the first
# connect to the silent member is waited for; after it failed, reconnects run in the background
# (3 s each, until the connect deadline) while that member's blocks go by TCP.
MNT=$T/mnt
IORPC_RDMA_RETRY_DURATION=1s start_mount m "$S" "$MNT" --meta "sqlite3://$T/a.db" --cache-group ga \
  --no-sharing --cache-size 0 --buffer-size 2 "${BS[@]}" --rdma-network lo --group-secret-file "$T/secret"
for i in $(seq 0 7); do cmp -s "$MNT/d/o$i" "$STORE/d/o$i" || fail "d/o$i differs"; done
scrape "127.0.0.1:$MP" /metrics "$T/m0.txt"
w0=$(awk '$1 ~ "^rdma_write_ops" {print $2; exit}' "$T/m0.txt")
end=$(($(date +%s) + 10))
max=0
n=0
while [ "$(date +%s)" -lt "$end" ]; do
  for i in $(seq 0 7); do
    t0=$(date +%s%N)
    dd if="$MNT/d/o$i" of="$T/out" bs=1M iflag=direct status=none || fail "dd d/o$i"
    ms=$((($(date +%s%N) - t0) / 1000000))
    [ "$ms" -le "$max" ] || max=$ms
    n=$((n + 1))
    cmp -s "$T/out" "$STORE/d/o$i" || fail "d/o$i differs while reconnecting"
  done
done
tries=$(grep -c "Cannot establish rpc connection to member .* over RDMA: no connection to 127.0.0.1:$(cat "$T/hole.out") within" "$T/m.log" || true)
scrape "127.0.0.1:$MP" /metrics "$T/m1.txt"
w1=$(awk '$1 ~ "^rdma_write_ops" {print $2; exit}' "$T/m1.txt")
echo "  $n reads of 1 MiB, the slowest $max ms; connects to the silent member timed out: $tries; live member's RDMA writes +$((${w1%.*} - ${w0%.*}))"
[ "$tries" -ge 2 ] || fail "no reconnect to the silent member during the reads"
[ "${w1%.*}" -gt "${w0%.*}" ] || fail "the live member served nothing over RDMA meanwhile"
# Only the first connection is waited for: when it failed, its waiting requests went over TCP;
# no request may have waited for one of the reconnects since.
waited=$(grep -c "requests waiting for a channel go over TCP" "$T/m.log" || true)
[ "$waited" -le 1 ] || fail "requests waited for $((waited - 1)) reconnects: $(grep 'waiting for a channel' "$T/m.log")"
stop_mount m "$MNT"

kill -TERM "$PID_a"
wait_exit "$PID_a" 30
[ "$EXIT_RC" -eq 0 ] || fail "member exited with $EXIT_RC"
! grep -q -E 'Sanitizer|runtime error' "$T/a.err" || fail "member: sanitizer report"
echo "PASS test_rdma_progress"
