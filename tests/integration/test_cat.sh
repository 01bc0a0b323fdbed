#!/usr/bin/env bash
# shoal cat on one node [C8, D2, L1-L3, L5]: byte-exact reads, the second read from the cache, a
# restart keeps the cache, corruption is caught and refetched, the size limit holds, a full disk
# makes misses, and bad input is one line with exit 2; a key the store cannot resolve (a symlink
# out of it, a loop, a file used as a folder) is "no such object" with the kernel's reason logged.
. "$(dirname "$0")/lib.sh"

STORE=$T/store
make_object "$STORE/big.bin" $((10 * 1024 * 1024 + 12345))
make_object "$STORE/dir/sub/small.txt" 1000
make_object "$STORE/forty.bin" $((40 * 1024 * 1024))
: >"$STORE/empty"
C="--cache-dir $T/cache --cache-size 1G --log-level warn"

# 1. Cold read: byte-exact, from the store, blocks written to the cache.
"$SHOAL" cat "file://$STORE" big.bin $C --summary >"$T/out" 2>"$T/sum1"
cmp "$T/out" "$STORE/big.bin" || fail "cold read differs"
gets=$(summary_field "object store GETs" "$T/sum1")
[ "$gets" -ge 3 ] || fail "cold read made $gets GETs"
[ "$(summary_field writes "$T/sum1")" -eq 3 ] || fail "expected 3 cache writes: $(cat "$T/sum1")"

# 2. Second read (a new process: the cache survives a restart): no store read, cache hits.
"$SHOAL" cat "file://$STORE" big.bin $C --summary >"$T/out" 2>"$T/sum2"
cmp "$T/out" "$STORE/big.bin" || fail "warm read differs"
[ "$(summary_field "object store GETs" "$T/sum2")" -eq 0 ] || fail "warm read touched the store: $(cat "$T/sum2")"
[ "$(summary_field "blockcache hits" "$T/sum2")" -ge 3 ] || fail "no cache hits: $(cat "$T/sum2")"

# 3. Ranges, nested keys, an empty object.
"$SHOAL" cat "file://$STORE" big.bin $C --offset 4194000 --length 300000 >"$T/out"
[ "$(stat -c %s "$T/out")" -eq 300000 ] || fail "range has the wrong length"
cmp -i 4194000:0 -n 300000 "$STORE/big.bin" "$T/out" || fail "range differs"
"$SHOAL" cat "file://$STORE" big.bin $C --offset 10485000 >"$T/out"
[ "$(stat -c %s "$T/out")" -eq $((10 * 1024 * 1024 + 12345 - 10485000)) ] || fail "tail length"
cmp -i 10485000:0 "$STORE/big.bin" "$T/out" || fail "tail range differs"
"$SHOAL" cat "file://$STORE" dir/sub/small.txt $C >"$T/out"
cmp "$T/out" "$STORE/dir/sub/small.txt" || fail "nested key differs"
"$SHOAL" cat "file://$STORE" empty $C >"$T/out"
[ ! -s "$T/out" ] || fail "empty object not empty"

# 4. Corrupt every cached block of big.bin in a different way: still byte-exact, refetched.
n=0
for f in $(find "$T/cache" -type f -path '*/blocks/*' | sort); do
  case $((n % 3)) in
    0) printf '\xff' | dd of="$f" bs=1 seek=100000 conv=notrunc status=none ;;
    1) truncate -s 5000 "$f" ;;
    2) dd if=/dev/zero of="$f" bs=4096 seek=10 count=2 conv=notrunc status=none ;;
  esac
  n=$((n + 1))
done
"$SHOAL" cat "file://$STORE" big.bin $C --summary >"$T/out" 2>"$T/sum3"
cmp "$T/out" "$STORE/big.bin" || fail "read after corruption differs"
[ "$(summary_field corrupt "$T/sum3")" -ge 1 ] || fail "corruption not counted: $(cat "$T/sum3")"
"$SHOAL" cat "file://$STORE" big.bin $C --summary >"$T/out" 2>"$T/sum4"
cmp "$T/out" "$STORE/big.bin" || fail "read after refetch differs"
[ "$(summary_field "object store GETs" "$T/sum4")" -eq 0 ] || fail "refetched blocks not cached again"

# 5. A swapped block: another block's file moved under this block's name.
files=($(find "$T/cache" -type f -path '*/blocks/*' | sort))
cp "${files[0]}" "${files[1]}"
"$SHOAL" cat "file://$STORE" big.bin $C >"$T/out"
cmp "$T/out" "$STORE/big.bin" || fail "read after swap differs"

# 6. --cache-size holds under a stream larger than it.
"$SHOAL" cat "file://$STORE" forty.bin --cache-dir "$T/small" --cache-size 8 --log-level warn >"$T/out"
cmp "$T/out" "$STORE/forty.bin" || fail "40 MiB read differs"
used=$(du -sk "$T/small" | awk '{print $1}')
[ "$used" -le $((8 * 1024 + 64)) ] || fail "cache uses ${used} KiB, limit 8 MiB"

# 7. Full disk: a 3 MiB tmpfs as the cache; misses, never errors.
if [ "$(id -u)" -eq 0 ] && mkdir -p "$T/tiny" && mount -t tmpfs -o size=3m tmpfs "$T/tiny" 2>/dev/null; then
  MOUNTS+=("$T/tiny")
  "$SHOAL" cat "file://$STORE" forty.bin --cache-dir "$T/tiny" --cache-size -1 --log-level error >"$T/out"
  cmp "$T/out" "$STORE/forty.bin" || fail "read with a full cache disk differs"
  [ -z "$(find "$T/tiny" -path "$T/tiny/shoal-*/tmp/*" -type f)" ] || fail "temp files left on a full disk"
  umount "$T/tiny"
  MOUNTS=()
else
  skip_section "full disk: not root or no tmpfs"
fi

# 8. --cache-size 0: no disk cache at all, still byte-exact.
"$SHOAL" cat "file://$STORE" big.bin --cache-dir "$T/none" --cache-size 0 >"$T/out"
cmp "$T/out" "$STORE/big.bin" || fail "read without cache differs"

# 9. Bad input: one line, exit 2. Missing object: exit 1.
expect_exit 2 "$SHOAL" cat "file://$STORE" big.bin --cache-size abc
[ "$(wc -l <"$T/last.err")" -eq 1 ] || fail "bad --cache-size: not one line"
grep -q "invalid --cache-size abc" "$T/last.err" || fail "bad --cache-size message: $(cat "$T/last.err")"
expect_exit 2 "$SHOAL" cat "file://$STORE" big.bin --no-such-flag
[ "$(wc -l <"$T/last.err")" -eq 1 ] || fail "unknown flag: not one line"
expect_exit 2 "$SHOAL" cat "file://$STORE" big.bin --block-size 3000
expect_exit 2 "$SHOAL" cat "file://$STORE"
expect_exit 2 "$SHOAL" cat "nope://x" big.bin $C
expect_exit 2 "$SHOAL" cat "file://$STORE" ../etc/passwd $C
expect_exit 1 "$SHOAL" cat "file://$STORE" missing.bin $C
grep -q "no such object" "$T/last.err" || fail "missing object message"
[ "$(wc -l <"$T/last.err")" -eq 1 ] || fail "a plain missing object is one line: $(cat "$T/last.err")"

# 10. Keys the store's root refuses to resolve are "no such object" too, and the kernel's own
# reason is logged with it: a symlink leading out of the store (EXDEV), a symlink loop (ELOOP),
# a file used as a folder (ENOTDIR).
echo secret >"$T/outside.txt"
ln -s ../../outside.txt "$STORE/dir/escape"
ln -s loop "$STORE/loop"
for k in "dir/escape:Invalid cross-device link (errno 18)" \
  "loop:Too many levels of symbolic links (errno 40)" \
  "dir/sub/small.txt/x:Not a directory (errno 20)"; do
  key=${k%%:*}
  expect_exit 1 "$SHOAL" cat "file://$STORE" "$key" $C
  grep -q "^shoal cat: $key: no such object" "$T/last.err" || fail "$key: $(cat "$T/last.err")"
  grep -q "store: $key: open beneath the store failed with ${k#*:}; reported as no such object" \
    "$T/last.err" || fail "$key: the kernel's reason is not logged: $(cat "$T/last.err")"
done
rm "$STORE/dir/escape" "$STORE/loop"
expect_exit 2 "$SHOAL" nosuchcommand
expect_exit 0 "$SHOAL" cat --help
grep -q -- "--cache-dir" "$T/last.out" || fail "help lacks --cache-dir"
echo "PASS test_cat"
