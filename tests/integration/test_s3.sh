#!/usr/bin/env bash
# s3:// against a real S3 server (s3rver) [O2, D2, G3, C8]: 500 objects with awkward keys, all read
# byte-exact through a 3-member group (a libshoal reader) and 124 of them (every awkward key) by
# `shoal cat` alone and through the group; every request's SigV4 signature checked
# by the front (s3fault.py); ListObjectsV2 with pagination, delimiter, start-after and a bucket
# prefix; 64 readers of one cold object cost one GET per block; a rewritten object is read new;
# HTTPS with a CA file; bad configuration is one line with exit 2.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
BUCKET=shoal-test
BS=256K

OBJS=$T/objs
regular() { # "SIZE KEY" of each of the 470 plain objects
  local i
  for i in $(seq 0 469); do
    if [ $((i % 10)) -eq 0 ]; then
      echo "$((262144 * (1 + i % 7) + i * 13)) obj/$((i % 16))/o$i" # multi-block
    else
      echo "$(((i * 7919) % 150000 + 1)) obj/$((i % 16))/o$i"
    fi
  done
}
awkward=(
  "space dir/file with spaces.bin:3000"
  "space dir/big multi block.bin:1300000"
  "unicode/ünïcødé-日本語-😀.bin:5000"
  "unicode/Ελληνικά/κλειδί.bin:300000"
  "plus/a+b+c.bin:777"
  "plus/+leading+.bin:2"
  "pct/100%.bin:1000"
  "pct/%41%2F%zz.bin:600000"
  "pct/%%.bin:10"
  "deep/a/b/c/d/e/f/g/h/i/j/k/l/m/n/deep.bin:270000"
  "sym/x=y&z;@,\$!'()*.bin:1234"
  "sym/<tag>&amp;\"q\".bin:4321"
  "sym/#hash?query.bin:555"
  "sym/tilde~home~.bin:66"
  "sym/back\\slash.bin:99"
  "sym/colon:semi;.bin:100"
  "sym/ brackets [x] {y} ^|\`.bin:101"
  "dots/a..b/..c.bin:102"
  "dots/.hidden:103"
  "empty/zero.bin:0"
  "exact/one-block.bin:262144"
  "exact/two-blocks.bin:524288"
  "exact/one-more.bin:262145"
  "exact/one-less.bin:262143"
  "mixed/UPPER lower.bin:7000"
  "mixed/tab-free é.bin:8000"
  "mixed/semi;colon.bin:9000"
  "mixed/comma,list.bin:10000"
  "mixed/quote'single.bin:11000"
  "cold/cold.bin:1572864"
)
{
  regular
  for a in "${awkward[@]}"; do echo "${a##*:} ${a%:*}"; done
} | make_objects "$OBJS"
n_objs=$(find "$OBJS" -type f | wc -l)
[ "$n_objs" -eq 500 ] || fail "made $n_objs objects, want 500"

start_s3rver "$BUCKET"
s3_put_dir "$S3_ENDPOINT" "$BUCKET" "$OBJS"
start_s3fault "$S3_PORT"
URL=s3://$BUCKET
EP=$S3F_ENDPOINT

read_one() { # read_one KEY — byte-exact through $READ_FLAGS (%P: this process's pid), else a line in $T/bad
  local o=$T/out.$$ e=$T/err.$$
  # shellcheck disable=SC2086
  if ! "$SHOAL" cat "$URL" "$1" ${READ_FLAGS//%P/$$} >"$o" 2>"$e"; then
    echo "exit $?: $1: $(head -c 300 "$e")" >>"$T/bad"
  elif ! cmp -s "$o" "$OBJS/$1"; then
    echo "differs: $1" >>"$T/bad"
  fi
  rm -f "$o" "$e"
}
export -f read_one
export SHOAL URL T OBJS

# The keys `shoal cat` reads one process each: every awkward key, and of the 470 plain objects
# every fifth (all 47 multi-block ones and 47 single-block ones, in all 16 folders); the
# libshoal reader of the group pass reads all 500.
cat_keys() { # cat_keys [KEY-TO-LEAVE-OUT] — NUL-separated
  local a
  for a in "${awkward[@]}"; do [ "${a%:*}" = "${1:-}" ] || printf '%s\0' "${a%:*}"; done
  regular | awk 'NR % 5 == 1 {print $2}' | tr '\n' '\0'
}
n_cat=$(cat_keys | tr -cd '\0' | wc -c)

read_all() { # read_all FLAGS... — the cat_keys, 4 at a time (cold, not in the read-path cache)
  : >"$T/bad"
  cat_keys "${SKIP_KEY:-}" | READ_FLAGS="$*" xargs -0 -P 4 -n 1 bash -c 'read_one "$0"'
  if [ -s "$T/bad" ]; then
    head -n 20 "$T/bad" >&2
    fail "$(wc -l <"$T/bad") objects read wrong"
  fi
}

echo "== shoal cat: $n_cat objects byte-exact, every request signed and verified"
# (A cache folder per process: a folder holds one process at a time.)
read_all --endpoint "$EP" --block-size $BS --cache-dir "$T/cat.cache.%P" --log-level error
grep -q SIGFAIL "$S3F_LOG" && fail "a request failed SigV4 verification: $(grep -m1 SIGFAIL "$S3F_LOG")"
gets=$(grep -c '^GET /' "$S3F_LOG")
echo "  $gets GETs, $(grep -c '^HEAD /' "$S3F_LOG") HEADs, 0 signature failures"
[ "$gets" -ge "$n_cat" ] || fail "only $gets GETs for $n_cat objects"

echo "== warm: read again from the local cache, no GET"
s3_mode pass
key="space dir/big multi block.bin"
"$SHOAL" cat "$URL" "$key" --endpoint "$EP" --block-size $BS --cache-dir "$T/one.cache" \
  --log-level error >"$T/out"
cmp "$T/out" "$OBJS/$key" || fail "cold read differs"
s3_mode pass
"$SHOAL" cat "$URL" "$key" --endpoint "$EP" --block-size $BS --cache-dir "$T/one.cache" \
  --summary --log-level error >"$T/out" 2>"$T/sum"
cmp "$T/out" "$OBJS/$key" || fail "warm read differs"
[ "$(summary_field "object store GETs" "$T/sum")" -eq 0 ] || fail "warm read went to the store"
[ "$(s3_count GET "$(s3_path "$BUCKET" "$key")")" -eq 0 ] || fail "warm read made a GET"

echo "== ranges and a bucket prefix"
"$SHOAL" cat "$URL" "$key" --endpoint "$EP" --block-size $BS --cache-size 0 --offset 262000 \
  --length 300000 >"$T/out"
cmp -i 262000:0 -n 300000 "$OBJS/$key" "$T/out" || fail "range differs"
[ "$(stat -c %s "$T/out")" -eq 300000 ] || fail "range length"
"$SHOAL" cat "$URL/deep/a/b/c" "d/e/f/g/h/i/j/k/l/m/n/deep.bin" --endpoint "$EP" --block-size $BS \
  --cache-size 0 >"$T/out"
cmp "$T/out" "$OBJS/deep/a/b/c/d/e/f/g/h/i/j/k/l/m/n/deep.bin" || fail "read under a bucket prefix differs"
"$SHOAL" cat "$URL/unicode/" "Ελληνικά/κλειδί.bin" --endpoint "$EP" --block-size $BS \
  --cache-size 0 >"$T/out"
cmp "$T/out" "$OBJS/unicode/Ελληνικά/κλειδί.bin" || fail "read under a unicode prefix differs"

echo "== temporary credentials: x-amz-security-token sent and signed"
s3_mode pass
AWS_SESSION_TOKEN="FwoGZXIvYXdzE+token/with=odd+chars" "$SHOAL" cat "$URL" "pct/100%.bin" \
  --endpoint "$EP" --cache-size 0 >"$T/out" || fail "read with a session token failed"
cmp "$T/out" "$OBJS/pct/100%.bin" || fail "read with a session token differs"
grep -q SIGFAIL "$S3F_LOG" && fail "session token not signed: $(grep -m1 SIGFAIL "$S3F_LOG")"

echo "== a missing object: one HEAD, no retry, exit 1"
s3_mode pass
expect_exit 1 "$SHOAL" cat "$URL" "nope/missing.bin" --endpoint "$EP" --cache-size 0
grep -q "no such object" "$T/last.err" || fail "missing object message: $(cat "$T/last.err")"
[ "$(s3_count HEAD "/$BUCKET/nope/missing.bin")" -eq 1 ] || fail "404 was retried: $(cat "$S3F_LOG")"

echo "== a rewritten object gets a new version: new bytes, never the cached old ones"
key="plus/a+b+c.bin"
"$SHOAL" cat "$URL" "$key" --endpoint "$EP" --cache-dir "$T/ver.cache" >"$T/out"
cmp "$T/out" "$OBJS/$key" || fail "first version differs"
make_object "$T/v2/$key" 5555
s3_put_dir "$S3_ENDPOINT" "$BUCKET" "$T/v2"
"$SHOAL" cat "$URL" "$key" --endpoint "$EP" --cache-dir "$T/ver.cache" >"$T/out"
cmp "$T/out" "$T/v2/$key" || fail "rewritten object: old bytes served"
cp "$T/v2/$key" "$OBJS/$key"

echo "== ListObjectsV2: pagination, delimiter, start-after, bucket prefix"
LIB=$(dirname "$SHOAL")/libshoalcore.a
if [ -f "$LIB" ] && command -v cc >/dev/null; then
  cat >"$T/lister.c" <<'EOF'
/* Lists a store through shoal_store_list: one tab-separated line per entry. */
#include <stdio.h>
#include <string.h>

#include "store/store.h"

static int print_entry(void *arg, const struct shoal_list_entry *e)
{
        if (e->is_prefix)
                printf("P\t%s\n", e->key);
        else
                printf("O\t%s\t%llu\t%s\t%lld\n", e->key, (unsigned long long)e->size, e->version,
                       (long long)e->mtime_ns);
        return 0;
}

int main(int argc, char **argv)
{
        if (argc < 4)
                return 2;
        struct shoal_store_config cfg = {.url = argv[1], .endpoint = argv[2]};
        char err[1024];
        struct shoal_store *st;
        if (shoal_store_open(&cfg, &st, err, sizeof(err))) {
                fprintf(stderr, "lister: %s\n", err);
                return 2;
        }
        int rc = shoal_store_list(st, argv[3], argc > 4 && *argv[4] ? argv[4] : NULL,
                                  argc > 5 ? argv[5] : NULL, print_entry, NULL);
        shoal_store_close(st);
        if (rc)
                fprintf(stderr, "lister: %s\n", strerror(-rc));
        return rc ? 1 : 0;
}
EOF
  san=""
  # (grep without -q: an early exit would fail the pipeline through nm's SIGPIPE)
  if nm "$LIB" 2>/dev/null | grep __asan_report >/dev/null; then san="-fsanitize=address,undefined"; fi
  # shellcheck disable=SC2046
  cc -std=gnu17 $san -I"$SRC/src" -I"$SRC/include" "$T/lister.c" "$LIB" \
    $(pkg-config --libs sqlite3 hiredis libcrypto libcurl fuse3 liburing libfabric) -lpthread -lm \
    -o "$T/lister" || fail "cannot build the lister"
  lister() { "$T/lister" "$@" 2>>"$T/lister.err"; }

  (cd "$OBJS" && find . -type f -printf '%P\t%s\n' | LC_ALL=C sort) >"$T/want.txt"
  s3_mode pass
  SHOAL_S3_LIST_MAX_KEYS=37 lister "$URL" "$EP" "" >"$T/list.txt" || fail "list: $(cat "$T/lister.err")"
  cut -f2,3 "$T/list.txt" | diff "$T/want.txt" - >"$T/list.diff" || {
    head -n 20 "$T/list.diff" >&2
    fail "the listing differs from the objects"
  }
  pages=$(grep -c '^GET /[^ ]*list-type=2' "$S3F_LOG")
  echo "  500 keys in $pages pages, in key order, signatures verified"
  [ "$pages" -ge 14 ] || fail "expected at least 14 pages of 37 keys, saw $pages"
  grep -q SIGFAIL "$S3F_LOG" && fail "a list request failed SigV4 verification"
  # versions are ETags (MD5 for a single-part upload), mtimes are set
  k="sym/<tag>&amp;\"q\".bin"
  line=$(awk -F'\t' -v k="$k" '$2 == k' "$T/list.txt")
  [ "$(echo "$line" | cut -f4)" = "$(md5sum <"$OBJS/$k" | cut -d' ' -f1)" ] || fail "list version of $k: $line"
  [ "$(echo "$line" | cut -f5)" -gt 1600000000000000000 ] || fail "list mtime of $k: $line"

  lister "$URL" "$EP" "" "/" >"$T/root.txt" || fail "delimiter list failed"
  # s3rver names a common prefix only for a folder that holds an object itself (real S3 names
  # every one), so obj/ and deep/ are not expected here.
  want=$(cd "$OBJS" && find . -mindepth 2 -maxdepth 2 -type f -printf 'P\t%h/\n' | cut -c1,2,5- |
    LC_ALL=C sort -u)
  [ "$(cat "$T/root.txt")" = "$want" ] || fail "delimiter listing: $(cat "$T/root.txt")"
  lister "$URL" "$EP" "sym/" "/" "sym/<" >"$T/sym.txt" || fail "start-after list failed"
  want=$(cd "$OBJS/sym" && find . -type f -printf '%P\n' | LC_ALL=C sort | LC_ALL=C awk '$0 > "<"' |
    sed 's|^|sym/|')
  [ "$(cut -f2 "$T/sym.txt")" = "$want" ] || fail "start-after listing: $(cut -f2 "$T/sym.txt")"
  lister "$URL/unicode" "$EP" "" "/" >"$T/uni.txt" || fail "prefix list failed"
  # byte order: ü is C3 BC, Ε is CE 95
  printf 'O\tünïcødé-日本語-😀.bin\nP\tΕλληνικά/\n' | diff - <(cut -f1,2 "$T/uni.txt") ||
    fail "listing under a bucket prefix"
  lister "$URL/pct" "$EP" "%" "" >"$T/pct.txt" || fail "list with a % prefix failed"
  [ "$(cut -f2 "$T/pct.txt" | tr '\n' ' ')" = "%%.bin %41%2F%zz.bin " ] || fail "% listing: $(cat "$T/pct.txt")"
else
  skip_section "ListObjectsV2 checks: no $LIB or no cc"
fi

echo "== a 3-member group over s3://: a --no-sharing client reads 499 objects byte-exact, and"
echo "   shoal cat --no-sharing the awkward keys"
META="sqlite3://$T/meta.db"
s3_mode pass
for m in a b c; do
  start_member "$m" "$URL" --endpoint "$EP" --meta "$META" --cache-group g --group-ip 127.0.0.1 \
    --block-size $BS
done
wait_members "$META" g 3
G="--endpoint $EP --meta $META --cache-group g --no-sharing --cache-size 0 --block-size $BS --log-level error"
# cold/cold.bin stays unread for the 64-reader case below.
readers group "$URL" --endpoint "$EP" --meta "$META" --cache-group g --verify-dir "$OBJS" \
  --block-size $BS --exclude cold/ --all --threads 4 --seconds 300
echo "  $(grep '^result' "$T/group.out")"
want=$(find "$OBJS" -type f ! -path "$OBJS/cold/*" -printf '%s\n' |
  awk '{b += int(($1 + 262143) / 262144)} END {print b}')
[ "$(result_field group reads)" -eq "$want" ] || fail "the client read $(result_field group reads) blocks, want $want"
[ "$(result_field group fallbacks)" -eq 0 ] && [ "$(result_field group store_gets)" -eq 0 ] ||
  fail "the client did not read everything from the members: $(grep '^result' "$T/group.out")"
SKIP_KEY=cold/cold.bin read_all $G
for m in a b c; do
  echo "  member $m holds $(find "$T/$m.cache" -type f -path '*/blocks/*' | wc -l) blocks"
done
grep -q SIGFAIL "$S3F_LOG" && fail "a member's request failed SigV4 verification"

echo "== 64 concurrent readers of one cold object through the group: one GET per block"
s3_mode pass
pids=()
# (A generous remote timeout: 64 processes starting at once on a busy machine may wait longer
# than 10 s for the owner's one download, and a reader that gave up would GET the block itself;
# the single flight is what this section checks, not the machine's speed.)
for r in $(seq 1 64); do
  SHOAL_REMOTE_TIMEOUT=60s "$SHOAL" cat "$URL" cold/cold.bin $G --summary >"$T/cold.$r" 2>"$T/cold.$r.sum" &
  pids+=($!)
done
r=0
for p in "${pids[@]}"; do
  r=$((r + 1))
  wait "$p" || fail "cold reader $r failed (exit $?): $(tail -n 5 "$T/cold.$r.sum" | tr '\n' ' ')"
done
for r in $(seq 1 64); do
  cmp -s "$T/cold.$r" "$OBJS/cold/cold.bin" || fail "cold reader $r differs"
done
gets=$(s3_count GET "/$BUCKET/cold/cold.bin")
echo "  64 readers, 6 blocks: $gets GETs at the front"
[ "$gets" -eq 6 ] || fail "expected 6 GETs of cold.bin, saw $gets"

echo "== HTTPS: certificate checked; SHOAL_S3_CA_FILE names the CA"
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/tls.key" -out "$T/tls.crt" -days 2 \
    -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" >/dev/null 2>&1 ||
    fail "openssl could not make a certificate"
  tls_port=$(free_port)
  node --openssl-legacy-provider "$SRC/.deps/node_modules/s3rver/bin/s3rver.js" \
    -d "$T/s3rver.data" -a 127.0.0.1 -p "$tls_port" --key "$T/tls.key" --cert "$T/tls.crt" \
    --silent >"$T/s3rver-tls.log" 2>&1 &
  track s3rver_tls $! infra "$T/s3rver-tls.log"
  wait_for curl -sf --cacert "$T/tls.crt" "https://127.0.0.1:$tls_port/$BUCKET?list-type=2&max-keys=1" ||
    fail "TLS s3rver did not start"
  key="unicode/ünïcødé-日本語-😀.bin"
  SHOAL_S3_CA_FILE=$T/tls.crt "$SHOAL" cat "$URL" "$key" --endpoint "https://127.0.0.1:$tls_port" \
    --cache-size 0 >"$T/out" || fail "read over HTTPS failed"
  cmp "$T/out" "$OBJS/$key" || fail "read over HTTPS differs"
  start=$(date +%s)
  expect_exit 1 "$SHOAL" cat "$URL" "$key" --endpoint "https://127.0.0.1:$tls_port" --cache-size 0
  grep -q "SHOAL_S3_CA_FILE" "$T/last.err" || fail "untrusted certificate message: $(cat "$T/last.err")"
  [ $(($(date +%s) - start)) -le 5 ] || fail "an untrusted certificate was retried"
else
  skip_section "HTTPS: no openssl"
fi

echo "== bad configuration: one line, exit 2"
expect_exit 2 "$SHOAL" cat "s3://" key --cache-size 0
expect_exit 2 "$SHOAL" cat "s3://ab" key --cache-size 0
grep -q "bucket" "$T/last.err" || fail "short bucket message: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" cat "$URL" key --endpoint ftp://127.0.0.1 --cache-size 0
SHOAL_STORE_DEADLINE=abc expect_exit 2 "$SHOAL" cat "$URL" key --endpoint "$EP" --cache-size 0
grep -q "SHOAL_STORE_DEADLINE" "$T/last.err" || fail "bad deadline message: $(cat "$T/last.err")"
SHOAL_S3_CA_FILE=$T/none.pem expect_exit 2 "$SHOAL" cat "$URL" key --endpoint "$EP" --cache-size 0
AWS_SECRET_ACCESS_KEY= expect_exit 2 "$SHOAL" cat "$URL" key --endpoint "$EP" --cache-size 0
echo "PASS test_s3"
