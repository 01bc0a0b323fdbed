#!/usr/bin/env bash
# The group secret and the handshake [S1, S3], attacked from outside: secrets shorter than 16
# bytes or longer than 4096 are refused with one line (exit 2); the member's TCP pool and IORPC
# ports refuse a replayed handshake, a wrong secret, a proof made for another address, requests
# instead of AUTH and silence (no byte beyond HELLO_ACK, closed within the handshake deadline);
# a fake member without the secret that relays a client's handshake to a real member, or that
# does not ask for the secret, is refused by every secret-holding client, which reads nothing
# from it and falls back to the store with byte-exact output (auth failures counted on both
# sides) — while a client without a secret does take its forged bytes, which is why groups
# beyond loopback need one; a client with a secret refuses a member without one; two secrets
# that both start with a NUL byte are two secrets.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
HERE=$(dirname "$0")
FRAMES="python3 $HERE/frames.py"

STORE=$T/store
N=24
# Small objects (one block each) keep the fake member's CRC forging quick.
for i in $(seq 0 $((N - 1))); do make_object "$STORE/s/o$i" $((100000 + i * 997)); done
S="file://$STORE"

sum_field() { grep -o "$1 [0-9]*" "$2" | awk '{s += $NF} END {print s + 0}'; }
remote_bytes() { grep -o 'remote [0-9]* ([0-9]* bytes)' "$1" | grep -o '([0-9]*' | tr -d '(' | awk '{s += $1} END {print s + 0}'; }
read_all() { # read_all META GROUP SUMFILE FLAGS... — every object byte-exact, summaries in SUMFILE
  local meta=$1 group=$2 sum=$3 i
  shift 3
  : >"$sum"
  for i in $(seq 0 $((N - 1))); do
    "$SHOAL" cat "$S" "s/o$i" --meta "$meta" --cache-group "$group" --no-sharing --cache-size 0 \
      --log-level error --summary "$@" >"$T/out" 2>>"$sum" || fail "cat s/o$i failed ($*)"
    cmp -s "$T/out" "$STORE/s/o$i" || fail "s/o$i: wrong bytes ($*)"
  done
}
fake_stat() { awk -v k="$1" '$1 == k {print $2}' "$T/fake.stats"; }
stop_member() { # stop_member NAME — SIGTERM, exit 0, no sanitizer report
  local pid
  pid=$(eval "echo \$PID_$1")
  kill -TERM "$pid"
  wait_exit "$pid"
  [ "$EXIT_RC" -eq 0 ] || fail "member $1 exited with $EXIT_RC"
  ! grep -q -E 'Sanitizer|runtime error' "$T/$1.err" || fail "member $1: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/$1.err")"
}
one_line() { [ "$(grep -c '' "$T/last.err")" -eq 1 ] || fail "more than one line: $(cat "$T/last.err")"; }

echo "== secrets on the command line: 16..4096 bytes, one line and exit 2 otherwise"
printf '123456789012345' >"$T/short"
expect_exit 2 "$SHOAL" cat "$S" s/o0 --group-secret-file "$T/short"
grep -q "at least 16 bytes (it has 15)" "$T/last.err" && one_line || fail "short file: $(cat "$T/last.err")"
printf '123456789012345\r\n' >"$T/short"
expect_exit 2 "$SHOAL" cat "$S" s/o0 --group-secret-file "$T/short"
grep -q "it has 15" "$T/last.err" || fail "short file with CRLF: $(cat "$T/last.err")"
expect_exit 2 env SHOAL_GROUP_SECRET=123456789012345 "$SHOAL" cat "$S" s/o0
grep -q "invalid SHOAL_GROUP_SECRET: the secret must be 16 to 4096 bytes" "$T/last.err" && one_line ||
  fail "short env: $(cat "$T/last.err")"
head -c 4097 /dev/urandom >"$T/big"
expect_exit 2 "$SHOAL" cat "$S" s/o0 --group-secret-file "$T/big"
grep -q "at most 4096 bytes" "$T/last.err" && one_line || fail "big file: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" ping 127.0.0.1:1 --group-secret-file "$T/short"
expect_exit 2 "$SHOAL" cat "$S" s/o0 --group-secret-file "$T/nonexistent"
grep -q "cannot read --group-secret-file" "$T/last.err" || fail "missing file: $(cat "$T/last.err")"

echo "== a member with a secret: the handshake under attack on both ports"
printf 'correct horse battery staple\n' >"$T/secret"
printf 'wrong horse battery staple!!\n' >"$T/wrong"
META="sqlite3://$T/meta.db"
MPORT=$(free_port)
start_member m "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 \
  --group-secret-file "$T/secret" --metrics "127.0.0.1:$MPORT" 2>"$T/m.err"
wait_members "$META" g 1
POOL=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/m.log" | head -n 1 | cut -d: -f2)
RPC=$(grep -o "iorpc 127.0.0.1:[0-9]*" "$T/m.log" | head -n 1 | cut -d: -f2)
$FRAMES auth "127.0.0.1:$POOL" 1 "$T/secret" "$T/wrong" 5 >"$T/auth.pool" || { cat "$T/auth.pool"; fail "TCP pool handshake attacks"; }
$FRAMES auth "127.0.0.1:$RPC" 2 "$T/secret" "$T/wrong" 5 >"$T/auth.rpc" || { cat "$T/auth.rpc"; fail "IORPC handshake attacks"; }
cat "$T/auth.rpc"
grep -q "peer 127.0.0.1:[0-9]* failed the handshake: wrong proof" "$T/m.log" || fail "member logged no refused proof"

echo "== the secret file's last newline is not part of the secret"
expect_exit 0 env SHOAL_GROUP_SECRET='correct horse battery staple' "$SHOAL" ping "127.0.0.1:$POOL"
grep -q "tcp .* ok: member [0-9a-f]\{32\} (proved the group secret)" "$T/last.out" || fail "ping: $(cat "$T/last.out")"
grep -q "iorpc .* ok: member" "$T/last.out" || fail "ping iorpc: $(cat "$T/last.out")"
read_all "$META" g "$T/sum.right" --group-secret-file "$T/secret"
[ "$(sum_field "object store GETs" "$T/sum.right")" -eq 0 ] || fail "the member did not serve the right secret"

echo "== a fake member relays the handshake to the real one: refused, nothing read from it"
start_bg fake -- python3 "$HERE/fakemember.py" attack relay "$T/meta.db" g "$S" 4194304 \
  "127.0.0.1:$POOL" "$T/fake.stats"
wait_members "$META" g 2
FPORT=$(awk '{print $2}' "$T/fake.out")
read_all "$META" g "$T/sum.relay" --group-secret-file "$T/secret"
echo "  fake: $(tr '\n' ' ' <"$T/fake.stats"); client: auth failures $(sum_field "auth failures" "$T/sum.relay"), fallbacks $(sum_field fallbacks "$T/sum.relay")"
[ "$(fake_stat auths)" -ge 1 ] || fail "no client sent the fake a proof to relay"
[ "$(fake_stat member_accepted)" -eq 0 ] || fail "the member accepted a relayed proof"
[ "$(fake_stat member_refused)" -eq "$(fake_stat auths)" ] || fail "relayed proofs not all refused"
[ "$(fake_stat reads)" -eq 0 ] || fail "a client sent the fake $(fake_stat reads) reads"
[ "$(sum_field "auth failures" "$T/sum.relay")" -ge 1 ] || fail "the clients counted no auth failure"
# (The fake's blocks were then read from the next member in each block's order, the real one,
# or from the store: read_all checked every byte either way.)
expect_exit 1 "$SHOAL" ping "127.0.0.1:$FPORT" --group-secret-file "$T/secret"
grep -q "authentication failed" "$T/last.out" || fail "ping through the relay: $(cat "$T/last.out")"
scrape "127.0.0.1:$MPORT" /metrics "$T/metrics"
mfail=$(awk '$1 ~ /^remotecache_auth_failures/ {print $2; exit}' "$T/metrics")
echo "  member: remotecache_auth_failures $mfail"
[ -n "$mfail" ] && [ "${mfail%.*}" -ge 1 ] || fail "the member counted no auth failure"
stop_proc fake # exit 0 or 143, no traceback
python3 -c "import sqlite3; c=sqlite3.connect('$T/meta.db'); c.execute(\"DELETE FROM shoal_members WHERE record LIKE '%|proxy|%'\"); c.commit()"
wait_members "$META" g 1

echo "== a fake member that does not ask for the secret: refused; a client without one is fooled"
rm -f "$T/fake.stats"
start_bg fake -- python3 "$HERE/fakemember.py" attack noauth "$T/meta.db" g "$S" 4194304 \
  "127.0.0.1:$POOL" "$T/fake.stats"
wait_members "$META" g 2
FPORT=$(awk '{print $2}' "$T/fake.out")
read_all "$META" g "$T/sum.noauth" --group-secret-file "$T/secret"
[ "$(fake_stat conns)" -ge 1 ] || fail "no client tried the fake"
[ "$(fake_stat reads)" -eq 0 ] || fail "a client sent the fake $(fake_stat reads) reads"
[ "$(sum_field "auth failures" "$T/sum.noauth")" -ge 1 ] || fail "the clients counted no auth failure"
expect_exit 1 "$SHOAL" ping "127.0.0.1:$FPORT" --group-secret-file "$T/secret"
grep -q "authentication failed" "$T/last.out" || fail "ping a member without AUTH: $(cat "$T/last.out")"
grep -q "does not ask for the group secret" "$T/last.err" || fail "no reason logged: $(cat "$T/last.err")"
# The control: the same fake fools a client that holds no secret (the chunk CRCs are keyless), so
# the refusals above are what protects a group beyond loopback (and what the host-local secret,
# which a client without a group secret uses by default, protects on one host).
fooled=0
for i in $(seq 0 $((N - 1))); do
  "$SHOAL" cat "$S" "s/o$i" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
    --log-level error --local-secret-file off >"$T/out" 2>"$T/control.err" ||
    fail "control read s/o$i failed: $(cat "$T/control.err")"
  if ! cmp -s "$T/out" "$STORE/s/o$i"; then
    [ "$(tr -d 'A' <"$T/out" | wc -c)" -eq 0 ] || fail "control: s/o$i neither exact nor forged"
    fooled=$((fooled + 1))
  fi
done
echo "  control: $fooled of $N objects came forged from the fake to a client without a secret"
[ "$fooled" -ge 1 ] && [ "$(fake_stat reads)" -ge 1 ] || fail "the fake could not forge anything: the refusals above prove nothing"
stop_proc fake # exit 0 or 143, no traceback

echo "== a client with a secret refuses a member without one"
start_member n "$S" --meta "sqlite3://$T/meta2.db" --cache-group g2 --group-ip 127.0.0.1 \
  --local-secret-file off 2>"$T/n.err"
wait_members "sqlite3://$T/meta2.db" g2 1
read_all "sqlite3://$T/meta2.db" g2 "$T/sum.nosecret" --group-secret-file "$T/secret"
[ "$(remote_bytes "$T/sum.nosecret")" -eq 0 ] || fail "read from a member without a secret"
[ "$(sum_field "auth failures" "$T/sum.nosecret")" -ge "$N" ] || fail "not every read counted an auth failure"
NPOOL=$(grep -o "tcp pool 127.0.0.1:[0-9]*" "$T/n.log" | head -n 1 | cut -d: -f2)
expect_exit 1 "$SHOAL" ping "127.0.0.1:$NPOOL" --group-secret-file "$T/secret"
expect_exit 0 "$SHOAL" ping "127.0.0.1:$NPOOL" --local-secret-file off

echo "== two 32-byte secrets that both start with NUL are different secrets"
mk_nul() { { printf '\000'; head -c 31 /dev/urandom; } >"$1"; }
mk_nul "$T/nul1"
mk_nul "$T/nul2"
start_member p "$S" --meta "sqlite3://$T/meta3.db" --cache-group g3 --group-ip 127.0.0.1 \
  --group-secret-file "$T/nul1" 2>"$T/p.err"
wait_members "sqlite3://$T/meta3.db" g3 1
read_all "sqlite3://$T/meta3.db" g3 "$T/sum.nul2" --group-secret-file "$T/nul2"
[ "$(remote_bytes "$T/sum.nul2")" -eq 0 ] || fail "a NUL-led secret authenticated to another one"
[ "$(sum_field "auth failures" "$T/sum.nul2")" -ge "$N" ] || fail "NUL secrets: auth failures not counted"
read_all "sqlite3://$T/meta3.db" g3 "$T/sum.nul1" --group-secret-file "$T/nul1"
[ "$(sum_field "object store GETs" "$T/sum.nul1")" -eq 0 ] || fail "the same NUL-led secret was refused"

for m in m n p; do stop_member "$m"; done
echo "PASS test_auth"
