#!/usr/bin/env bash
# Out-of-order answers on one IORPC connection [R1]: a block whose owner must fetch it from a
# hung S3 server (slow) and a block the owner has cached (fast) are asked for on one connection,
# slow first; the fast answer comes back first, byte-exact, while the slow one is still waiting
# for the store; the slow one is answered later on the same connection.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
BUCKET=order
OBJS=$T/objs
make_object "$OBJS/slow.bin" 200000
make_object "$OBJS/fast.bin" 200000
start_s3rver "$BUCKET"
s3_put_dir "$S3_ENDPOINT" "$BUCKET" "$OBJS"
start_s3fault "$S3_PORT"
URL=s3://$BUCKET
META="sqlite3://$T/meta.db"
C=(--endpoint "$S3F_ENDPOINT" --block-size 256K)

# The owner gives up on the store after 4 s, so the slow answer is an error frame then.
SHOAL_STORE_DEADLINE=4s start_member a "$URL" "${C[@]}" --meta "$META" --cache-group g \
  --group-ip 127.0.0.1
wait_members "$META" g 1
"$SHOAL" cat "$URL" fast.bin "${C[@]}" --meta "$META" --cache-group g --no-sharing \
  --cache-size 0 >"$T/out" || fail "warming fast.bin failed"
cmp -s "$T/out" "$OBJS/fast.bin" || fail "fast.bin differs"
IORPC=$("$SHOAL" group --meta "$META" --cache-group g | awk '$3 == "provider" {print $6}')

echo "== slow (store hung) then fast (cached) on one connection: fast answers first"
s3_mode hang
python3 - "$IORPC" "$OBJS" "$SRC/tests/integration" <<'PY' || fail "answers were not out of order"
import hashlib, os, sys, time
sys.path.insert(0, sys.argv[3])
import frames as F

addr, objs = sys.argv[1], sys.argv[2]
BS = 256 * 1024
LEN = 65536


def read(key, id_):
    data = open(os.path.join(objs, key), "rb").read()
    etag = hashlib.md5(data).hexdigest().encode()  # s3rver's ETag: the version shoal uses
    body = F.read_body(key.encode(), etag, len(data), BS, 0, 0, LEN)
    return F.frame(F.READ, body, id_=id_, flags=F.FILL), data[:LEN]


s = F.connect(addr)
s.settimeout(30)
F.handshake(s)
slow, _ = read("slow.bin", 101)
fast, fast_data = read("fast.bin", 102)
t0 = time.monotonic()
s.sendall(slow)
s.sendall(fast)
answers = []
for _ in range(2):
    typ, status, id_, body, payload = F.read_frame(s)
    answers.append((id_, typ, status, payload, time.monotonic() - t0))
for id_, typ, status, payload, t in answers:
    print("  answer to %d: type %d status %d, %d bytes after %.2f s" % (id_, typ, status,
                                                                       len(payload), t))
(first, ftyp, _, fpay, ft), (second, _, _, _, st) = answers
assert first == 102, "the fast block did not come back first"
assert ftyp == F.READ_RESP and fpay == fast_data, "the fast answer is not the block"
assert second == 101, "no answer to the slow block"
assert ft < 2.0 <= st, "fast after %.2f s, slow after %.2f s" % (ft, st)
PY
grep -q "GET /$BUCKET/slow.bin .*hang fault" "$S3F_LOG" || fail "the slow block never reached the store"
grep -q "GET /$BUCKET/fast.bin" "$S3F_LOG" && fail "the fast block was not served from the cache"
s3_mode pass
echo "PASS"
