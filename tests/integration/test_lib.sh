#!/usr/bin/env bash
# libshoal as installed [P1]: `cmake --install` into a temporary prefix gives the header, the
# library with its SONAME and a shoal.pc; programs built with `pkg-config shoal` (C, and the
# header as C++) read every object of a 3-member group byte-exact from 8 threads, with no store
# GET of their own and one store GET per block in the group; the library exports exactly the
# header's functions; fork() after reads works in parent, children and a grandchild, and a storm
# of forks never copies a held lock into a child; a C writer (shoal_write_open/write/close)
# creates an object byte-exact in the store with its blocks pushed to their owners, an existing
# key is EEXIST unless SHOAL_WRITE_OVERWRITE, an aborted writer leaves nothing; bad settings are
# refused with a message. Members are stopped with SIGTERM and must exit 0 without sanitizer
# reports.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms

BUILD=$(cd "$(dirname "$SHOAL")" && pwd)
[ -f "$BUILD/cmake_install.cmake" ] || fail "no build tree next to $SHOAL"
command -v pkg-config >/dev/null || fail "no pkg-config (scripts/setup.sh installs it)"

echo "== install into a temporary prefix"
cmake --install "$BUILD" --prefix "$T/prefix" >"$T/install.log" || fail "cmake --install failed"
PC=$(find "$T/prefix" -name shoal.pc)
[ -n "$PC" ] || fail "no shoal.pc installed"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$PC")
LIBDIR=$(pkg-config --variable=libdir shoal)
[ -f "$LIBDIR/libshoal.so.1" ] || fail "no libshoal.so.1 in $LIBDIR"
[ -f "$(pkg-config --variable=includedir shoal)/shoal/shoal.h" ] || fail "no header installed"
soname=$(readelf -d "$LIBDIR/libshoal.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libshoal.so.1" ] || fail "SONAME is '$soname', want libshoal.so.1"

echo "== exported symbols are the header's functions"
grep -oE '^SHOAL_API [^(]*\b(shoal_[a-z_]+)\(' "$SRC/include/shoal/shoal.h" |
  grep -oE 'shoal_[a-z_]+\($' | tr -d '(' | sort >"$T/header.syms"
nm -D --defined-only "$LIBDIR/libshoal.so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
  sort >"$T/lib.syms"
[ "$(wc -l <"$T/header.syms")" -ge 15 ] || fail "found only $(wc -l <"$T/header.syms") functions in the header"
diff "$T/header.syms" "$T/lib.syms" >"$T/syms.diff" || fail "exports differ from the header: $(cat "$T/syms.diff")"

echo "== build the test programs with pkg-config"
SAN=()
ldd "$SHOAL" >"$T/ldd.txt" # not piped into grep -q: with pipefail, SIGPIPE would fail it
if grep -q libasan "$T/ldd.txt"; then
  SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer)
fi
CC=${CC:-cc}
build() { # build NAME — tests/lib/NAME.c against the installed library
  # shellcheck disable=SC2046
  "$CC" -std=gnu17 -O1 -g -Wall -Wextra -Werror "${SAN[@]}" $(pkg-config --cflags shoal) \
    -o "$T/$1" "$SRC/tests/lib/$1.c" $(pkg-config --libs shoal) -Wl,-rpath,"$LIBDIR" -pthread ||
    fail "cannot build $1 against the installed library"
}
build read_all
build fork_reads
build write_obj
build plan_reads
if command -v c++ >/dev/null; then
  # shellcheck disable=SC2046
  echo '#include <shoal/shoal.h>
int main() { return shoal_version() ? 0 : 1; }' | c++ -x c++ -Wall -Werror -fsyntax-only \
    $(pkg-config --cflags shoal) - || fail "the header does not compile as C++"
else
  skip_section "no C++ compiler (c++, from build-essential): the header's C++ check did not run"
fi

echo "== a tree with awkward keys"
STORE=$T/store
for i in $(seq 0 39); do
  make_object "$STORE/obj/$((i % 5))/o$i" $(((i * 7919) % 300000 + 1))
done
make_object "$STORE/big/three-blocks.bin" $((3 * 262144))
make_object "$STORE/big/odd.bin" $((5 * 262144 + 4097))
make_object "$STORE/space dir/ünï cødé +%.bin" 70000
make_object "$STORE/sym/x=y&z;@,\$!'()*.bin" 1234
: >"$STORE/empty.bin"
n_objs=$(find "$STORE" -type f | wc -l)
S="file://$STORE"
META="sqlite3://$T/meta.db"
BS=256K
for m in a b c; do
  start_member "$m" "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1 --block-size "$BS" \
    2>"$T/$m.err"
done
wait_members "$META" g 3
OPTS=(-o "meta=$META" -o cache-group=g -o block-size=$BS -o log-level=warn)

echo "== 8 threads read every object through the group"
"$T/read_all" "$S" "$STORE" -t 8 -n "$n_objs" "${OPTS[@]}" >"$T/read.out" 2>"$T/read.err" ||
  fail "read_all: $(tail -n 5 "$T/read.err")"
cat "$T/read.out"
field() { awk -v n="$1" '$1 == n { print $2 }' "$2"; }
blocks=$(field blocks "$T/read.out")
[ "$(field objects "$T/read.out")" -eq "$n_objs" ] || fail "read_all saw $(field objects "$T/read.out") objects"
[ "$(field object_get_requests "$T/read.out")" -eq 0 ] ||
  fail "the client read the store itself: $(cat "$T/read.out")"
[ "$(field remotecache_fallbacks "$T/read.out")" -eq 0 ] || fail "fallbacks to the store"
[ "$(field remotecache_get_requests "$T/read.out")" -ge "$blocks" ] || fail "fewer group reads than blocks"
if grep -q -E 'Sanitizer|runtime error' "$T/read.err"; then
  fail "read_all: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/read.err")"
fi
gets=0
for m in a b c; do
  scrape "$(metrics_addr "$m")" /metrics "$T/$m.prom"
  g=$(python3 "$SRC/tests/integration/promparse.py" "$T/$m.prom" |
    awk '$1 == "object_get_requests" { print $2 }')
  gets=$((gets + ${g%.*}))
done
echo "store GETs in the group: $gets for $blocks blocks"
[ "$gets" -eq "$blocks" ] || fail "the group made $gets store GETs for $blocks blocks"

echo "== fork after reads: parent, children and a grandchild read byte-exact"
# Then 40 quick forks while the client's group agent beats every millisecond: without the fork
# gate about one child in four hangs in SQLite's allocator mutex, copied held from the agent.
SHOAL_GROUP_HEARTBEAT=1ms "$T/fork_reads" "$S" "$STORE" -c 4 -r 2 -f 40 "${OPTS[@]}" \
  >"$T/fork.out" 2>"$T/fork.err" || {
  cat "$T/fork.err" >&2 # (a hung child's stacks included)
  fail "fork_reads: $(grep -v -E '^    #|^#[0-9]' "$T/fork.err" | tail -n 8)"
}
cat "$T/fork.out"
if grep -q -E 'Sanitizer|runtime error' "$T/fork.err"; then
  fail "fork_reads: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/fork.err")"
fi

echo "== access plans: two plans of one client, 4 threads each, byte-exact; a missing key at its item"
"$T/plan_reads" "$S" "$STORE" -t 4 -n 3000 "${OPTS[@]}" -o buffer-size=32M >"$T/plan.out" \
  2>"$T/plan.err" || fail "plan_reads: $(tail -n 5 "$T/plan.err")"
cat "$T/plan.out"
[ $(($(field plan_hits "$T/plan.out") + $(field plan_misses "$T/plan.out") +
  $(field plan_offplan "$T/plan.out"))) -eq "$(field reads "$T/plan.out")" ] ||
  fail "plan reads not all counted: $(cat "$T/plan.out")"
if grep -q -E 'Sanitizer|runtime error' "$T/plan.err"; then
  fail "plan_reads: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/plan.err")"
fi

echo "== without a group, readahead off, IORPC: still byte-exact"
"$T/read_all" "$S" "$STORE" -t 8 -n "$n_objs" -o prefetch=0 -o block-size=64K >"$T/solo.out" \
  2>"$T/solo.err" || fail "read_all without a group: $(tail -n 5 "$T/solo.err")"
"$T/read_all" "$S" "$STORE" -t 8 -n "$n_objs" "${OPTS[@]}" -o use-iorpc=yes >"$T/iorpc.out" \
  2>"$T/iorpc.err" || fail "read_all over IORPC: $(tail -n 5 "$T/iorpc.err")"
[ "$(field object_get_requests "$T/iorpc.out")" -eq 0 ] || fail "IORPC client read the store"

echo "== a C writer: the object is byte-exact in the store, its blocks in their owners' caches"
head -c $((5 * 262144 + 4097)) /dev/urandom >"$T/w.src"
before=$(find "$T"/[abc].cache -type f -path '*/blocks/*' | wc -l)
"$T/write_obj" "$S" "new/w.bin" "$T/w.src" "${OPTS[@]}" >"$T/w.out" 2>"$T/w.err" ||
  fail "write_obj: $(tail -n 3 "$T/w.err")"
cmp -s "$T/w.src" "$STORE/new/w.bin" || fail "the store's new/w.bin differs"
[ "$(field remotecache_put_requests "$T/w.out")" -eq 6 ] || fail "not 6 blocks pushed: $(cat "$T/w.out")"
[ "$(field remotecache_put_errors "$T/w.out")" -eq 0 ] || fail "block pushes failed"
after=$(find "$T"/[abc].cache -type f -path '*/blocks/*' | wc -l)
[ "$after" -eq $((before + 6)) ] || fail "the members' caches went $before -> $after blocks, want +6"
expect_exit 17 "$T/write_obj" "$S" "new/w.bin" "$T/w.src" "${OPTS[@]}"
grep -q "shoal_write_open: EEXIST: .*exists" "$T/last.err" || fail "message: $(cat "$T/last.err")"
"$T/write_obj" "$S" "new/w.bin" "$T/w.src" -w -c 4096 -o block-size=$BS >/dev/null ||
  fail "write_obj -w could not replace new/w.bin"
cmp -s "$T/w.src" "$STORE/new/w.bin" || fail "the replaced new/w.bin differs"
"$T/write_obj" "$S" "new/aborted.bin" "$T/w.src" -a "${OPTS[@]}" >/dev/null || fail "write_obj -a"
[ ! -e "$STORE/new/aborted.bin" ] || fail "an aborted writer left an object"
after2=$(find "$T"/[abc].cache -type f -path '*/blocks/*' | wc -l)
[ "$after2" -eq "$after" ] || fail "an aborted writer pushed blocks ($after -> $after2)"
rm -rf "$STORE/new" "$T/w.src" # read_all below compares the store with the tree it made

echo "== bad settings are refused with a message"
expect_exit 2 "$T/read_all" "$S" "$STORE" -o cache-size=lots
grep -q "invalid cache-size lots" "$T/last.err" || fail "message: $(cat "$T/last.err")"
expect_exit 2 "$T/read_all" "$S" "$STORE" -o no-such-setting=1
grep -q "unknown setting no-such-setting" "$T/last.err" || fail "message: $(cat "$T/last.err")"
expect_exit 1 "$T/read_all" "bogus://x" "$STORE"
[ -s "$T/last.err" ] || fail "no message for a bad storage URL"

echo "== members stop cleanly"
for m in a b c; do
  pid=$(eval "echo \$PID_$m")
  kill -TERM "$pid"
  wait_exit "$pid"
  [ "$EXIT_RC" -eq 0 ] || fail "member $m exited $EXIT_RC: $(tail -n 3 "$T/$m.err")"
  if grep -q -E 'Sanitizer|runtime error' "$T/$m.err" "$T/$m.log"; then
    fail "member $m: $(grep -h -m 3 -E 'Sanitizer|runtime error' "$T/$m.err" "$T/$m.log")"
  fi
done
echo "PASS"
