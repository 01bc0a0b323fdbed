#!/usr/bin/env bash
# FUSE mount over s3:// [C1, O2]: a tree with awkward names in a real S3 server (s3rver, every
# request's signature checked by the s3fault.py front) appears under the mount with its names and
# sizes, listed through paginated ListObjectsV2; every file reads byte-exact; a second read
# comes from the cache.
. "$(dirname "$0")/lib.sh"
need_fuse
BUCKET=fuse-s3
OBJS=$T/objs
# s3rver names a common prefix only for a folder that holds an object itself (real S3 names every
# one), so every folder here holds a file.
for d in "" a "a/b b" "a/b b/ç" "plus+dir" "pct%dir" "deep" "deep/x" "deep/x/y"; do
  for i in 0 1 2; do
    make_object "$OBJS/${d:+$d/}f$i.bin" $(((i + 1) * 37001 + ${#d}))
  done
done
make_object "$OBJS/a/multi block.bin" $((5 * 262144 + 77))
make_object "$OBJS/deep/x/y/ünï 日本+%.bin" 300001
: >"$OBJS/a/empty"
for i in $(seq 0 39); do make_object "$OBJS/many/m$i" $((100 + i)); done
start_s3rver "$BUCKET"
s3_put_dir "$S3_ENDPOINT" "$BUCKET" "$OBJS"
start_s3fault "$S3_PORT"
MNT=$T/mnt
SHOAL_S3_LIST_MAX_KEYS=7 start_mount m "s3://$BUCKET" "$MNT" --endpoint "$S3F_ENDPOINT" \
  --block-size 256K --cache-size 1G

echo "== names and sizes through paginated listings"
(cd "$OBJS" && find . -type f -printf '%P %s\n' | LC_ALL=C sort) >"$T/want"
(cd "$MNT" && find . -type f -printf '%P %s\n' | LC_ALL=C sort) >"$T/got"
diff "$T/want" "$T/got" || fail "the mount's tree differs from the bucket"
pages=$(grep -c '^GET /[^ ]*list-type=2' "$S3F_LOG")
echo "  $(wc -l <"$T/got") files, $pages list pages"
[ "$pages" -ge 10 ] || fail "expected paginated listings, saw $pages pages"

echo "== every file byte-exact, then again from the cache"
diff -r "$OBJS" "$MNT" >/dev/null || fail "contents differ (diff -r)"
s3_mode pass
diff -r "$OBJS" "$MNT" >/dev/null || fail "contents differ on the second read"
gets=$(grep -c '^GET /[^ ]* bytes=' "$S3F_LOG" || true)
[ "$gets" -eq 0 ] || fail "the second read made $gets GETs"
grep -q SIGFAIL "$S3F_LOG" && fail "a request failed SigV4 verification"
echo "PASS test_s3_fuse"
