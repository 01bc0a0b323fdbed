#!/usr/bin/env bash
# Cache group over the TCP pool [G1-G6, T1-T2, D1, C2, C7]: three members and a --no-sharing
# client read byte-exact on SQLite and on Redis; blocks spread about evenly; a fourth member takes
# about a quarter; kill -9 of a member under 16 readers costs no error; 32 readers of one cold
# object cause one store read per block; a member with another block size is refused.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms

STORE=$T/store
for i in $(seq 0 199); do
  make_object "$STORE/obj/$((i % 10))/o$i" $((20000 + i * 997))
done
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
  for i in $(seq 0 199); do
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
for i in $(seq 0 199); do
  client "$META" g1 "obj/$((i % 10))/o$i" | cmp -s - "$STORE/obj/$((i % 10))/o$i" || fail "o$i differs after join"
done
moved=$(blocks_in sd)
after=$(( $(blocks_in sa) + $(blocks_in sb) + $(blocks_in sc) ))
echo "  the new member took $moved of $before blocks"
[ $((moved * 100)) -ge $((before * 15)) ] && [ $((moved * 3)) -le "$before" ] ||
  fail "join moved $moved of $before blocks (want about a quarter, at most a third)"
[ "$after" -eq "$before" ] || fail "old members fetched blocks after the join ($before -> $after)"

echo "== 32 concurrent readers of one cold object: one store read per block"
pids=()
for r in $(seq 1 32); do
  client "$META" g1 cold.bin --summary >"$T/cold.$r" 2>"$T/cold.$r.sum" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a cold reader failed"; done
for r in $(seq 1 32); do
  cmp -s "$T/cold.$r" "$STORE/cold.bin" || fail "cold reader $r differs"
  [ "$(summary_field "object store GETs" "$T/cold.$r.sum")" -eq 0 ] || fail "reader $r went to the store"
done
gets=$(cat "$T"/s?.log | grep -c "get cold.bin" || true)
echo "  members made $gets store reads for 192 blocks"
[ "$gets" -eq 192 ] || fail "expected 192 store reads of cold.bin, saw $gets"

echo "== kill -9 of a member under 16 readers"
reads() { cat "$T/reads" 2>/dev/null | wc -l; }
for r in $(seq 1 16); do
  (
    end=$((SECONDS + 90))
    n=0
    while [ ! -e "$T/stop" ] && [ $SECONDS -lt $end ] && [ $n -lt 400 ]; do
      k=multi/m$((n % 4))
      client "$META" g1 "$k" >"$T/r$r.out" || exit 1
      cmp -s "$T/r$r.out" "$STORE/$k" || exit 2
      echo "$r" >>"$T/reads"
      n=$((n + 1))
    done
  ) &
  track "reader$r" $! helper
done
# Kill once the readers are under way (16 reads done), stop them 32 reads later.
wait_until 60 bash -c "[ \$(cat '$T/reads' 2>/dev/null | wc -l) -ge 16 ]" || fail "the readers did not start"
kill9 sb
after=$(($(reads) + 32))
wait_until 120 bash -c "[ \$(cat '$T/reads' | wc -l) -ge $after ]" || fail "the readers stalled after kill -9"
touch "$T/stop"
bad=0
for r in $(seq 1 16); do
  wait_proc "reader$r" 60
  [ "$EXIT_RC" -eq 0 ] || bad=$((bad + 1))
done
[ "$bad" -eq 0 ] || fail "$bad readers saw an error or wrong bytes after kill -9"

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
