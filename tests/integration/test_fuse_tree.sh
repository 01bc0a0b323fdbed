#!/usr/bin/env bash
# FUSE mount, the namespace [C1, V3]: 1000 objects in nested prefixes appear with their names,
# sizes and mtimes; cat, cp -r and sha256sum match the originals; .stats is readable but not
# listed; `ls -R` twice within the attribute TTL lists the store once, and again after the TTL.
. "$(dirname "$0")/lib.sh"
need_fuse

STORE=$T/store
python3 - "$STORE" <<'PY'
import os, random, sys
root = sys.argv[1]
rnd = random.Random(6)
for i in range(1000):
    d = os.path.join(root, "d%d" % (i % 10), "e%d" % (i % 7))
    if i % 3 == 0:
        d = os.path.join(d, "deep")
    os.makedirs(d, exist_ok=True)
    size = 0 if i % 97 == 0 else rnd.randint(1, 300000)
    if i % 250 == 1:
        size = 9 * 1024 * 1024 + i  # several blocks
    p = os.path.join(d, "obj-%04d.bin" % i)
    with open(p, "wb") as f:
        f.write(os.urandom(size))
    t = 1600000000 * 10**9 + i * 1000003 * 997  # distinct times with nanoseconds
    os.utime(p, ns=(t, t))
with open(os.path.join(root, "top.txt"), "w") as f:
    f.write("hello from the store\n")
PY
S="file://$STORE"
MNT=$T/mnt
start_mount m "$S" "$MNT"

echo "== ls -R twice within the TTL lists the store once"
ls -R "$MNT" >"$T/ls1"
l1=$(stats_field "$MNT" object_list_requests)
ls -R "$MNT" >"$T/ls2"
l2=$(stats_field "$MNT" object_list_requests)
echo "  list requests: $l1 after the first ls -R, $l2 after the second"
ndirs=$(find "$STORE" -type d | wc -l)
[ "$l1" -ge "$ndirs" ] || fail "the first ls -R made $l1 list requests for $ndirs folders"
[ "$l1" -eq "$l2" ] || fail "the second ls -R listed the store again ($l1 -> $l2)"
cmp -s "$T/ls1" "$T/ls2" || fail "the two ls -R differ"

echo "== names, sizes and mtimes"
(cd "$STORE" && find . -type f -printf '%P %s %T@\n' | sort) >"$T/want.files"
(cd "$MNT" && find . -type f -printf '%P %s %T@\n' | sort) >"$T/got.files"
[ "$(wc -l <"$T/want.files")" -eq 1001 ] || fail "expected 1001 objects in the store"
diff "$T/want.files" "$T/got.files" >"$T/files.diff" || fail "files differ: $(head -n 5 "$T/files.diff")"
(cd "$STORE" && find . -mindepth 1 -type d -printf '%P\n' | sort) >"$T/want.dirs"
(cd "$MNT" && find . -mindepth 1 -type d -printf '%P\n' | sort) >"$T/got.dirs"
diff "$T/want.dirs" "$T/got.dirs" >"$T/dirs.diff" || fail "folders differ: $(head -n 5 "$T/dirs.diff")"
[ "$(stat -c '%s %.9Y' "$MNT/d1/e1/obj-0001.bin")" = "$(stat -c '%s %.9Y' "$STORE/d1/e1/obj-0001.bin")" ] ||
  fail "stat of a multi-block object differs"

echo "== cat, sha256sum, cp -r"
cat "$MNT/top.txt" | cmp -s - "$STORE/top.txt" || fail "cat top.txt differs"
cmp -s "$MNT/d1/e1/obj-0001.bin" "$STORE/d1/e1/obj-0001.bin" || fail "a 9 MiB object differs"
(cd "$STORE" && find . -type f | sort | xargs sha256sum) >"$T/want.sha"
(cd "$MNT" && find . -type f | sort | xargs sha256sum) >"$T/got.sha"
diff "$T/want.sha" "$T/got.sha" >"$T/sha.diff" || fail "sha256sum differs: $(head -n 4 "$T/sha.diff")"
cp -r "$MNT/d4" "$T/copy"
diff -r "$STORE/d4" "$T/copy" >/dev/null || fail "cp -r copy differs"

echo "== .stats"
ls -a "$MNT" | grep -qx '.stats' && fail ".stats is listed"
cat "$MNT/.stats" >"$T/stats"
for k in fuse_ops fuse_reads fuse_read_bytes fuse_read_size_1m object_list_requests threads \
  remotecache_connections; do
  grep -q "^$k [0-9]" "$T/stats" || fail ".stats lacks $k"
done
[ "$(stats_field "$MNT" fuse_read_bytes)" -gt 100000000 ] || fail "fuse_read_bytes too small"

echo "== after the TTL the store is listed again"
MNT2=$T/mnt2
start_mount m2 "$S" "$MNT2" --attr-cache 1
t0=$(date +%s%3N)
ls -R "$MNT2/d2" >/dev/null
a=$(stats_field "$MNT2" object_list_requests)
# ls -R again and again: the store is listed anew once the 1 s TTL is over, not before.
relisted() { ls -R "$MNT2/d2" >/dev/null && [ "$(stats_field "$MNT2" object_list_requests)" -gt "$a" ]; }
wait_until 10 relisted || true
dt=$(($(date +%s%3N) - t0))
b=$(stats_field "$MNT2" object_list_requests)
echo "  list requests: $a, then $b after $dt ms"
[ "$b" -gt "$a" ] || fail "no new listing after the TTL ($a -> $b)"
[ "$dt" -ge 900 ] || fail "listed again after $dt ms, within the 1 s TTL"
stop_mount m2 "$MNT2"
stop_mount m "$MNT"
echo "PASS test_fuse_tree"
