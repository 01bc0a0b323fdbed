#!/usr/bin/env bash
# Trust on one host with no set-up (issue 23, docs/operations.md "Who can read, who can write into
# caches"): a member started without a group secret makes the host-local secret (0600, its
# user's) and authenticates every connection with it; clients of the same user read through it
# with no flag. Another local user (uid 65534, who can reach every loopback port and even write
# the registry here) gets no session: `shoal ping` fails, a READ with FILL of a 0600 object is
# closed unanswered, `shoal cat` of that object through the group yields no byte, and PUT_BLOCKs
# of forged bytes for an uncached object change nothing an honest reader gets. The control: the
# same PUT_BLOCKs sent with the member's rights are taken, so the refusal is the secret's doing.
# All of it for a `shoal serve` member (default secret path) and a sharing mount (a path of its
# own, made on its first start). Last, a client with no secret at all sends nothing to a member
# record beyond loopback (a client with a secret does try it: the control).
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=5s SHOAL_GROUP_HEARTBEAT=200ms
HERE=$(dirname "$0")
command -v setpriv >/dev/null || skip "no setpriv (util-linux)"
PY=/usr/bin/python3 # the other user may not read a pyenv shim under /root
[ -x "$PY" ] || skip "no $PY"

# uid 65534 must reach the store, the registry and the frame tool, as any local user could.
chmod 755 "$T"
chmod 1777 "$T/san"
cp "$HERE/frames.py" "$T/frames.py"
chmod 644 "$T/frames.py"
STORE=$T/store
BS=(--block-size 1M)
for o in pub plant ctrl; do make_object "$STORE/$o" $((2 * 1048576 + 12345)); done
make_object "$STORE/private" $((2 * 1048576 + 777))
chmod 755 "$STORE"
chmod 600 "$STORE/private"
S="file://$STORE"
mkdir -m 1777 "$T/reg"
nobody() { env HOME="$T/nobody" setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
nobody test -r "$STORE/private" && fail "uid 65534 can read the 0600 object itself"
version() { "$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import frames; print(frames.file_version(sys.argv[2]))' "$T" "$1"; }

# attack LABEL META GROUP POOL RPC — uid 65534 against the member at POOL/RPC.
attack() {
  local label=$1 meta=$2 group=$3 pool=$4 rpc=$5 got
  echo "== $label: uid 65534 gets no session"
  expect_exit 1 nobody "$SHOAL" ping "127.0.0.1:$pool"
  grep -q "authentication failed" "$T/last.out" || fail "$label: ping as 65534: $(cat "$T/last.out" "$T/last.err")"
  got=$(nobody "$PY" "$T/frames.py" claim "127.0.0.1:$rpc" 2 fill private "$(version "$STORE/private")" \
    $((2 * 1048576 + 777)) 0 0 65536)
  echo "  READ with FILL of the 0600 object: $got"
  [ "$got" = closed ] || fail "$label: a READ with FILL from uid 65534 was answered: $got"
  # The registry is writable here, so the cat registers and asks the group like any client.
  chmod 666 "$T/reg/"* 2>/dev/null || true
  set +e
  nobody "$SHOAL" cat "$S" private --meta "$meta" --cache-group "$group" --no-sharing \
    --cache-size 0 "${BS[@]}" --summary >"$T/nobody.out" 2>"$T/nobody.err"
  rc=$?
  set -e
  echo "  shoal cat of the 0600 object as 65534: exit $rc, $(wc -c <"$T/nobody.out") bytes"
  [ "$rc" -ne 0 ] || fail "$label: cat of the 0600 object succeeded as 65534"
  [ ! -s "$T/nobody.out" ] || fail "$label: uid 65534 got bytes of the 0600 object"
  # (the cat stats the object first, and that fails; the READ above is the attack past it.) What
  # uid 65534 may read itself it reads from the store, with the member's handshake refused.
  nobody "$SHOAL" cat "$S" pub --meta "$meta" --cache-group "$group" --no-sharing --cache-size 0 \
    "${BS[@]}" --summary --log-level error >"$T/nobody.out" 2>"$T/nobody.sum" || fail "$label: cat pub as 65534"
  cmp -s "$T/nobody.out" "$STORE/pub" || fail "$label: pub as 65534: wrong bytes"
  [ "$(($(summary_field "tcp bytes" "$T/nobody.sum") + $(summary_field "iorpc bytes" "$T/nobody.sum")))" -eq 0 ] || fail "$label: uid 65534 read from the member: $(cat "$T/nobody.sum")"
  [ "$(summary_field "auth failures" "$T/nobody.sum")" -ge 1 ] || fail "$label: no auth failure counted"
  got=$(nobody "$PY" "$T/frames.py" plant "127.0.0.1:$rpc" "$S" 1048576 "$STORE" plant)
  echo "  forged PUT_BLOCKs as 65534: $got"
  [ "$got" = "accepted 0 refused 3" ] || fail "$label: uid 65534 planted blocks: $got"
}

# honest LABEL META GROUP OBJ FLAGS... — root reads OBJ through the group: byte-exact, 0 store GETs.
honest() {
  local label=$1 meta=$2 group=$3 obj=$4
  shift 4
  "$SHOAL" cat "$S" "$obj" --meta "$meta" --cache-group "$group" --no-sharing --cache-size 0 \
    "${BS[@]}" --summary --log-level error "$@" >"$T/out" 2>"$T/sum" || fail "$label: cat $obj"
  cmp -s "$T/out" "$STORE/$obj" || fail "$label: $obj: root read bytes the store does not hold"
  [ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "$label: $obj: not served by the member"
  [ "$(($(summary_field "tcp bytes" "$T/sum") + $(summary_field "iorpc bytes" "$T/sum")))" -eq "$(stat -c %s "$STORE/$obj")" ] ||
    fail "$label: $obj: not every byte came from the member: $(cat "$T/sum")"
}

# control LABEL RPC META GROUP FLAGS... — the same PUT_BLOCKs with the member's rights are taken.
control() {
  local label=$1 rpc=$2 meta=$3 group=$4 got
  shift 4
  got=$("$PY" "$T/frames.py" plant "127.0.0.1:$rpc" "$S" 1048576 "$STORE" ctrl)
  echo "  control: forged PUT_BLOCKs as root: $got"
  [ "$got" = "accepted 3 refused 0" ] || fail "$label: control: the member's own user could not put: $got"
  "$SHOAL" cat "$S" ctrl --meta "$meta" --cache-group "$group" --no-sharing --cache-size 0 \
    "${BS[@]}" --log-level error "$@" >"$T/out" || fail "$label: cat ctrl"
  [ "$(tr -d P <"$T/out" | wc -c)" -eq 0 ] || fail "$label: control: the planted bytes were not served (the attack frames are wrong)"
}

echo "== a member with no secret flag makes the host-local secret and uses it"
META="sqlite3://$T/reg/meta.db"
start_member m "$S" --meta "$META" --cache-group g "${BS[@]}" 2>"$T/m.err"
wait_members "$META" g 1
POOL=$(member_port m pool)
RPC=$(member_port m iorpc)
LS=$(grep -o "host-local secret [^ ]*" "$T/m.log" | head -n 1 | awk '{print $3}')
[ -n "$LS" ] || fail "the member did not say where its secret is"
[ "$LS" = /var/lib/shoal/local.secret ] || fail "root's default secret path is $LS"
[ "$(stat -c '%a %u %s' "$LS")" = "600 0 65" ] || fail "$LS: $(stat -c '%a %u %s' "$LS")"
expect_exit 0 "$SHOAL" ping "127.0.0.1:$POOL"
grep -q "tcp .* ok: .*(proved the group secret)" "$T/last.out" || fail "ping as root: $(cat "$T/last.out")"
grep -q "iorpc .* ok: .*(proved the group secret)" "$T/last.out" || fail "ping iorpc: $(cat "$T/last.out")"
honest serve "$META" g pub
honest serve "$META" g pub --use-iorpc
attack serve "$META" g "$POOL" "$RPC"
honest serve "$META" g plant
honest serve "$META" g plant --use-iorpc
control serve "$RPC" "$META" g

echo "== a sharing mount, with a secret path of its own made on its first start"
need_fuse
rm -f "$T/reg/"meta2.db*
META2="sqlite3://$T/reg/meta2.db"
LS2=$T/lsec/local.secret
start_mount mnt "$S" "$T/mnt" --meta "$META2" --cache-group g2 "${BS[@]}" --local-secret-file "$LS2"
wait_members "$META2" g2 1
[ "$(stat -c '%a %u %s' "$LS2")" = "600 0 65" ] || fail "$LS2: $(stat -c '%a %u %s' "$LS2" 2>&1)"
MPOOL=$(grep -o "tcp pool listening on 127.0.0.1:[0-9]*" "$T/mnt.log" | head -n 1 | cut -d: -f2 || true)
MRPC=$(grep -o "iorpc on 127.0.0.1:[0-9]*" "$T/mnt.log" | head -n 1 | cut -d: -f2 || true)
[ -n "$MPOOL" ] && [ -n "$MRPC" ] || fail "the mount's ports are not in its log"
# Without the mount's path a root client has another secret: refused, it reads the store.
"$SHOAL" cat "$S" pub --meta "$META2" --cache-group g2 --no-sharing --cache-size 0 "${BS[@]}" \
  --summary --log-level error >"$T/out" 2>"$T/sum" || fail "cat without the mount's secret"
[ "$(summary_field "tcp bytes" "$T/sum")" -eq 0 ] || fail "a client with another secret read from the mount"
[ "$(summary_field "auth failures" "$T/sum")" -ge 1 ] || fail "no auth failure against the mount"
rm -f "$STORE/plant"
make_object "$STORE/plant" $((2 * 1048576 + 12345))
make_object "$STORE/ctrl" $((2 * 1048576 + 12345))
honest mount "$META2" g2 pub --local-secret-file "$LS2"
attack mount "$META2" g2 "$MPOOL" "$MRPC"
honest mount "$META2" g2 plant --local-secret-file "$LS2"
# (frames.py authenticates with the default path: the control points it at the mount's)
"$PY" - "$T" "$MRPC" "$S" "$STORE" "$LS2" >"$T/ctrl2" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import frames
frames.local_secret_file = lambda: sys.argv[5]
sys.exit(frames.run_plant("127.0.0.1:" + sys.argv[2], sys.argv[3], 1048576, sys.argv[4], "ctrl"))
EOF
echo "  control: forged PUT_BLOCKs with the mount's secret: $(cat "$T/ctrl2")"
[ "$(cat "$T/ctrl2")" = "accepted 3 refused 0" ] || fail "mount: control: $(cat "$T/ctrl2")"
"$SHOAL" cat "$S" ctrl --meta "$META2" --cache-group g2 --no-sharing --cache-size 0 "${BS[@]}" \
  --log-level error --local-secret-file "$LS2" >"$T/out" || fail "mount: cat ctrl"
[ "$(tr -d P <"$T/out" | wc -c)" -eq 0 ] || fail "mount: control: the planted bytes were not served"
echo "== RDMA (libfabric tcp on lo): the same secret, and no session without it"
if command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1; then
  skip_section "libfabric has no tcp provider"
else
  export FI_PROVIDER=tcp
  rm -f "$T/reg/"meta3.db*
  META3="sqlite3://$T/reg/meta3.db"
  start_member rd "$S" --meta "$META3" --cache-group g3 "${BS[@]}" --rdma-network lo
  wait_members "$META3" g3 1
  grep -q "host-local secret /var/lib/shoal/local.secret" "$T/rd.log" || fail "the RDMA member has no local secret"
  rdcat() { # rdcat SUMFILE [nobody] FLAGS... — pub through g3 over RDMA
    local sum=$1
    shift
    local run=()
    [ "${1:-}" = nobody ] && { run=(nobody); shift; }
    "${run[@]}" "$SHOAL" cat "$S" pub --meta "$META3" --cache-group g3 --no-sharing --cache-size 0 \
      "${BS[@]}" --rdma-network lo --summary --log-level error "$@" >"$T/out" 2>"$sum" ||
      fail "cat pub over RDMA ($*): $(tail -n 2 "$sum")"
    cmp -s "$T/out" "$STORE/pub" || fail "pub over RDMA ($*): wrong bytes"
  }
  chmod 666 "$T/reg/"meta3.db* 2>/dev/null || true
  rdcat "$T/rd.root"
  [ "$(summary_field "rdma bytes" "$T/rd.root")" -gt 0 ] || fail "root read nothing over RDMA: $(cat "$T/rd.root")"
  chmod 666 "$T/reg/"meta3.db* 2>/dev/null || true
  rdcat "$T/rd.nobody" nobody
  echo "  uid 65534 over RDMA: $(grep -o 'rdma bytes [0-9]*' "$T/rd.nobody"), $(grep -o 'auth failures [0-9]*' "$T/rd.nobody")"
  [ "$(summary_field "rdma bytes" "$T/rd.nobody")" -eq 0 ] || fail "uid 65534 read over RDMA"
  [ "$(summary_field "tcp bytes" "$T/rd.nobody")" -eq 0 ] || fail "uid 65534 read over TCP"
  [ "$(summary_field "auth failures" "$T/rd.nobody")" -ge 1 ] || fail "uid 65534: no auth failure over RDMA"
  stop_proc rd
  unset FI_PROVIDER
fi

echo "== a client with no secret asks no member beyond loopback"
HOSTIP=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+[.]' | grep -v '^127[.]' | head -n 1 || true)
if [ -z "$HOSTIP" ]; then
  skip_section "no IPv4 address beyond loopback"
else
  echo 0 >"$T/lis.count"
  start_bg lis -- "$PY" -c '
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
n = 0
while True:
    c, _ = s.accept()
    n += 1
    open(sys.argv[2], "w").write("%d\n" % n)
    c.close()
' "$HOSTIP" "$T/lis.count"
  wait_for test -s "$T/lis.out" || fail "the listener did not start"
  start_bg fake -- "$PY" "$HERE/fakemember.py" "$T/reg/meta.db" g "$HOSTIP:$(cat "$T/lis.out")" "$S" 1048576
  wait_members "$META" g 2
  # (three objects, nine blocks: the fake owns some of them whatever its id)
  for o in pub plant ctrl; do
    "$SHOAL" cat "$S" "$o" --meta "$META" --cache-group g --no-sharing --cache-size 0 "${BS[@]}" \
      --local-secret-file off --log-level warn >"$T/out" 2>>"$T/nosecret.err" || fail "cat $o without a secret"
    cmp -s "$T/out" "$STORE/$o" || fail "cat $o without a secret: wrong bytes"
  done
  [ "$(cat "$T/lis.count")" -eq 0 ] || fail "a client without a secret connected to a member beyond loopback"
  grep -q "not asking member .* beyond loopback" "$T/nosecret.err" ||
    fail "the refusal was not logged: $(head -c 300 "$T/nosecret.err")"
  # The control: a client holding a secret does go there (and is refused by the handshake).
  for o in pub plant ctrl; do
    "$SHOAL" cat "$S" "$o" --meta "$META" --cache-group g --no-sharing --cache-size 0 "${BS[@]}" \
      --log-level error >"$T/out" || fail "cat $o with the local secret"
  done
  echo "  connections to the record beyond loopback: $(cat "$T/lis.count") (only from the client with a secret)"
  [ "$(cat "$T/lis.count")" -ge 1 ] || fail "control: the record beyond loopback was never tried (the check proves nothing)"
  stop_proc fake
  stop_proc lis
fi

stop_mount mnt "$T/mnt"
stop_proc m
echo "PASS test_local_trust"
