#!/usr/bin/env bash
# Two honest writers of one file:// object (issue 23): two --allow-overwrite mounts of one group
# overwrite the same 30 objects at the same moment (one thread per object on each mount: a mount
# lets one handle write a path at a time), every write the same size. A version of size and mtime alone let two of those writes share one
# version: both pushed blocks under the same ids and readers got a mix of the two. The version now
# carries the inode and the ctime, so after each round every read through the group (a reader
# that holds no blocks itself) equals the store, while the member did cache pushed blocks.
# Then the conflict rule itself: a PUT_BLOCK of other bytes for a block the member holds (same
# id, so same version) drops both copies, counts remotecache_put_conflicts, and the next read
# equals the store.
. "$(dirname "$0")/lib.sh"
need_fuse
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
HERE=$(dirname "$0")
STORE=$T/store
N=30
SIZE=$((3 * 65536 - 100)) # three 64 KiB blocks
BS=(--block-size 64K)
for i in $(seq 0 $((N - 1))); do make_object "$STORE/o$i" "$SIZE"; done
S="file://$STORE"
META="sqlite3://$T/meta.db"
MP=$(free_port)
start_member m "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 "${BS[@]}" \
  --metrics "127.0.0.1:$MP"
wait_members "$META" g 1
for w in w1 w2; do
  start_mount "$w" "$S" "$T/$w" --meta "$META" --cache-group g --no-sharing --allow-overwrite \
    "${BS[@]}"
done

# round R — every object written by 2 threads (one per mount) released at once; each thread's
# bytes are its own, the size the same for all.
round() {
  /usr/bin/python3 - "$T/w1" "$T/w2" "$N" "$SIZE" "$1" <<'EOF' || fail "round $1: a write failed"
import os, sys, threading
m1, m2, n, size, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
go = threading.Barrier(2 * n)
errors = []
def write(mnt, i, t):
    data = (b"%s/%s/%d/%d|" % (r.encode(), os.path.basename(mnt).encode(), i, t)) * size
    go.wait()
    try:
        with open(os.path.join(mnt, "o%d" % i), "wb") as f:
            f.write(data[:size])
    except OSError as e:
        errors.append(e)
ts = [threading.Thread(target=write, args=(m, i, 0)) for i in range(n) for m in (m1, m2)]
for t in ts:
    t.start()
for t in ts:
    t.join()
for e in errors:
    print("write error:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
EOF
}

for r in 1 2 3; do
  echo "== round $r: 2 writers per object at once, then every block read through the group"
  round "$r"
  for i in $(seq 0 $((N - 1))); do
    [ "$(stat -c %s "$STORE/o$i")" -eq "$SIZE" ] || fail "round $r: o$i has the wrong size"
  done
  readers "r$r" "$S" --all --verify-dir "$STORE" --meta "$META" --cache-group g "${BS[@]}" --threads 4
  echo "  $(grep '^result' "$T/r$r.out")"
  [ "$(result_field "r$r" wrong)" -eq 0 ] || fail "round $r: reads through the group differ from the store"
  [ "$(result_field "r$r" errors)" -eq 0 ] || fail "round $r: read errors"
done
pushed=$(metric "127.0.0.1:$MP" remotecache_put_serve_blocks)
echo "  the member cached $pushed pushed blocks"
[ "$pushed" -gt 0 ] || fail "no pushed block was cached: the rounds tested nothing of write-through"

echo "== a push of other bytes for a cached block: both dropped, counted, the store is read"
readers warm "$S" --all --verify-dir "$STORE" --meta "$META" --cache-group g "${BS[@]}" --threads 2 \
  --prefix o0
c0=$(metric "127.0.0.1:$MP" remotecache_put_conflicts)
RPC=$(member_port m iorpc)
got=$(/usr/bin/python3 "$HERE/frames.py" plant "127.0.0.1:$RPC" "$S" 65536 "$STORE" o0)
echo "  forged PUT_BLOCKs for the cached o0: $got"
[ "$got" = "accepted 0 refused 3" ] || fail "a push of other bytes for cached blocks was taken: $got"
c1=$(metric "127.0.0.1:$MP" remotecache_put_conflicts)
[ $((c1 - c0)) -eq 3 ] || fail "remotecache_put_conflicts moved by $((c1 - c0)), want 3"
grep -q "pushed with other bytes than the cached copy: both dropped" "$T/m.log" || fail "no conflict logged"
"$SHOAL" cat "$S" o0 --meta "$META" --cache-group g --no-sharing --cache-size 0 "${BS[@]}" \
  --summary --log-level error >"$T/out" 2>"$T/sum" || fail "cat o0"
cmp -s "$T/out" "$STORE/o0" || fail "o0 after the conflict: bytes the store does not hold"
# (the member filled the dropped blocks again from the store for this read)
[ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "o0 was not served by the member"

stop_mount w1 "$T/w1"
stop_mount w2 "$T/w2"
stop_proc m
echo "PASS test_two_writers"
