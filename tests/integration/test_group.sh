#!/usr/bin/env bash
# Cache group over the TCP pool [G1-G6, T1-T2, D1, C2, C7]: three members and a --no-sharing
# client read byte-exact on SQLite and on Redis; blocks spread about evenly; a fourth member takes
# about a quarter; kill -9 of a member under 16 readers costs no error; 32 readers (in 8
# processes) of one cold object cause one store read per block; a member with another block size
# is refused. The clients are tests/tools/readers.c (many reads in one process, each checked byte
# for byte) and a few `shoal cat`s.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms

STORE=$T/store
for i in $(seq 0 199); do echo "$((20000 + i * 997)) obj/$((i % 10))/o$i"; done | make_objects "$STORE"
make_object "$STORE/cold.bin" $((12 * 1024 * 1024))
for i in 0 1 2 3; do make_object "$STORE/multi/m$i" $((9 * 1024 * 1024 + i)); done
S="file://$STORE"
# 64 KiB blocks give ~450 blocks from 200 objects, so the spread check is not at the mercy of
# chance on a few dozen blocks per member.
BS=(--block-size 64K)

client() { # client META GROUP KEY [flags]
  local meta=$1 group=$2 key=$3
  shift 3
  "$SHOAL" cat "$S" "$key" --meta "$meta" --cache-group "$group" --no-sharing --cache-size 0 \
    --log-level error "${BS[@]}" "$@"
}

# read_all LABEL META GROUP PREFIX — one client reads every block under PREFIX once, byte-exact,
# all of it from the members (no fallback, no store read of its own).
read_all() {
  local label=$1 meta=$2 group=$3 prefix=$4
  readers "$label" "$S" --meta "$meta" --cache-group "$group" --verify-dir "$STORE" "${BS[@]}" \
    --prefix "$prefix" --all --threads 4 --seconds 300
  [ "$(result_field "$label" fallbacks)" -eq 0 ] && [ "$(result_field "$label" store_gets)" -eq 0 ] ||
    fail "$label: the client did not read everything from the members: $(grep '^result' "$T/$label.out")"
}

blocks_in() { find "$T/$1.cache" -type f -path '*/blocks/*' 2>/dev/null | wc -l; }

check_spread() { # check_spread TOTAL MEMBERS...
  local total=$1
  shift
  local n=$#
  local lo=$((total * 70 / 100 / n)) hi=$((total * 130 / 100 / n)) m
  for m in "$@"; do
    local b
    b=$(blocks_in "$m")
    echo "  $m holds $b of $total blocks"
    [ "$b" -ge "$lo" ] && [ "$b" -le "$hi" ] || fail "$m holds $b blocks, expected $lo..$hi"
  done
}

run_group() { # run_group META GROUP PREFIX
  local meta=$1 group=$2 p=$3
  for m in a b c; do
    start_member "$p$m" "$S" --meta "$meta" --cache-group "$group" --group-ip 127.0.0.1 "${BS[@]}"
  done
  wait_members "$meta" "$group" 3
  read_all "${p}all" "$meta" "$group" obj/
  # and the command-line client, through the same group
  for i in 0 77 199; do
    client "$meta" "$group" "obj/$((i % 10))/o$i" >"$T/out" || fail "read o$i failed"
    cmp -s "$T/out" "$STORE/obj/$((i % 10))/o$i" || fail "o$i differs"
  done
  local total=$(( $(blocks_in "${p}a") + $(blocks_in "${p}b") + $(blocks_in "${p}c") ))
  check_spread "$total" "${p}a" "${p}b" "${p}c"
}

echo "== SQLite registry"
META="sqlite3://$T/meta.db"
run_group "$META" g1 s
"$SHOAL" group --meta "$META" --cache-group g1 >"$T/group.txt"
grep -q "3 members, 3 alive" "$T/group.txt" || fail "shoal group: $(cat "$T/group.txt")"
grep -q provider "$T/group.txt" || fail "shoal group lacks roles"

echo "== a fourth member joins"
start_member sd "$S" --meta "$META" --cache-group g1 --group-ip 127.0.0.1 "${BS[@]}"
wait_members "$META" g1 4
before=$(( $(blocks_in sa) + $(blocks_in sb) + $(blocks_in sc) ))
read_all join "$META" g1 obj/
moved=$(blocks_in sd)
after=$(( $(blocks_in sa) + $(blocks_in sb) + $(blocks_in sc) ))
echo "  the new member took $moved of $before blocks"
[ $((moved * 100)) -ge $((before * 15)) ] && [ $((moved * 3)) -le "$before" ] ||
  fail "join moved $moved of $before blocks (want about a quarter, at most a third)"
[ "$after" -eq "$before" ] || fail "old members fetched blocks after the join ($before -> $after)"

echo "== 32 concurrent readers of one cold object: one store read per block"
# 8 client processes of 4 threads: each process reads every block once, so every block is asked
# for by 8 clients at about the same time.
for r in $(seq 1 8); do
  start_bg "cold$r" --kind client -- "$READERS" "$S" --meta "$META" --cache-group g1 \
    --verify-dir "$STORE" "${BS[@]}" --prefix cold.bin --all --threads 4 --seconds 300
done
for r in $(seq 1 8); do
  wait_proc "cold$r" 300
  [ "$EXIT_RC" -eq 0 ] || fail "cold reader $r failed: $(tail -n 3 "$T/cold$r.err")"
  [ "$(result_field "cold$r" errors)" -eq 0 ] && [ "$(result_field "cold$r" wrong)" -eq 0 ] &&
    [ "$(result_field "cold$r" store_gets)" -eq 0 ] && [ "$(result_field "cold$r" reads)" -eq 192 ] ||
    fail "cold reader $r: $(grep '^result' "$T/cold$r.out")"
done
gets=$(cat "$T"/s?.log | grep -c "get cold.bin" || true)
echo "  members made $gets store reads for 192 blocks"
[ "$gets" -eq 192 ] || fail "expected 192 store reads of cold.bin, saw $gets"

echo "== kill -9 of a member under 16 readers"
# 16 threads read random blocks of multi/ (mostly misses: 32 block buffers for 580 blocks);
# member b is killed once they are under way, and they must make 400 more reads without one
# error or wrong byte (reads of b's blocks fall back to the store until the view drops it).
start_bg kr --kind client -- "$READERS" "$S" --meta "$META" --cache-group g1 --verify-dir "$STORE" \
  "${BS[@]}" --prefix multi/ --threads 16 --until "$T/stop" --seconds 300
reads() { grep -o 'progress reads=[0-9]*' "$T/kr.out" 2>/dev/null | tail -n 1 | cut -d= -f2; }
at_least() { [ "$(reads)" -ge "$1" ] 2>/dev/null; }
wait_until 120 at_least 200 || fail "the readers did not start: $(tail -n 3 "$T/kr.err")"
kill9 sb
after=$(($(reads) + 400))
wait_until 120 at_least "$after" || fail "the readers stalled after kill -9: $(tail -n 2 "$T/kr.out")"
touch "$T/stop"
wait_proc kr 60
[ "$EXIT_RC" -eq 0 ] || fail "the readers saw errors or wrong bytes after kill -9: $(grep '^result' "$T/kr.out")"
echo "  readers: $(grep '^result' "$T/kr.out" | cut -d' ' -f2-)"
[ "$(result_field kr errors)" -eq 0 ] && [ "$(result_field kr wrong)" -eq 0 ] ||
  fail "errors or wrong bytes after kill -9"

echo "== a member with another block size is refused"
expect_exit 2 "$SHOAL" serve "$S" --meta "$META" --cache-group g1 --cache-dir "$T/bad.cache" --block-size 1M
grep -q "65536" "$T/last.err" && grep -q "1048576" "$T/last.err" || fail "refusal does not name both block sizes: $(cat "$T/last.err")"
echo "== beyond loopback without a secret is refused"
expect_exit 2 "$SHOAL" serve "$S" --meta "$META" --cache-group g9 --cache-dir "$T/x.cache" --group-ip 0.0.0.0
grep -q "secret" "$T/last.err" || fail "refusal does not mention the secret"

echo "== Redis registry"
start_redis
run_group "$REDIS_URL" g2 r
echo "PASS test_group"
