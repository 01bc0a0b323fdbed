#!/usr/bin/env bash
# Battery: rolling kill -9 of members under 16 readers [RELIABILITY: member crash mid-transfer,
# membership churn]. Four members; five rounds, each killing the oldest member with kill -9 while
# 16 reader threads (tests/tools/readers.c, the real read path of one client) read random blocks
# and check every byte. After each death, once every survivor's view has dropped the dead member,
# a verification pass reads every block of every object from the survivors (no fallback, no store
# read by the client); the survivors' own logs show that exactly the dead member's blocks were
# fetched again, each with one store GET, by a new owner that held no copy. A new member then
# joins and takes its share, again one GET per block. At the end every object reads byte-exact
# and the readers saw 0 errors and 0 wrong bytes.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=2s SHOAL_GROUP_HEARTBEAT=200ms SHOAL_REMOTE_TIMEOUT=2s \
  SHOAL_AVOID_DURATION=500ms
OWN="/usr/bin/python3 $(dirname "$0")/ownership.py"
STORE=$T/store
NOBJ=40
BS=262144
nblocks=0
for i in $(seq 0 $((NOBJ - 1))); do
  size=$((700000 + i * 13331))
  make_object "$STORE/o$i" "$size"
  nblocks=$((nblocks + (size + BS - 1) / BS))
done
S="file://$STORE"
META="sqlite3://$T/meta.db"
G=(--meta "$META" --cache-group g --block-size 256K)
R=(--verify-dir "$STORE" "${G[@]}" --log-level warn)

# join NAME — starts member NAME and waits until every live member's view has it.
LIVE=()
join() {
  start_member "$1" "$S" "${G[@]}" --group-ip 127.0.0.1
  local id m
  id=$(member_id "$1")
  for m in "${LIVE[@]}"; do wait_log "$T/$m.log" "member $id .* joined group" 20; done
  LIVE+=("$1")
}

# gets_since FILE — every live member's store reads since its mark, as "MEMBER KEY OFFSET", and
# the blocks it copied from their previous owner instead (a newcomer's, issue 26) the same way.
declare -A MARK
mark_all() { local m; for m in "${LIVE[@]}"; do MARK[$m]=$(log_mark "$m"); done; }
gets_since() {
  local m
  : >"$1"
  for m in "${LIVE[@]}"; do
    store_gets_since "$m" "${MARK[$m]:-0}" | sed "s/^/$m /" >>"$1"
    { tail -n +"$((${MARK[$m]:-0} + 1))" "$T/$m.log" | grep -o -E 'group: copy [^ ]+ \[[0-9]+' || true; } |
      sed -E "s/^group: copy ([^ ]+) \[([0-9]+)$/$m \1 \2/" >>"$1"
  done
}

# verify LABEL — every block of every object, byte-exact, all from members.
# The 2 s remote timeout is for the readers under the kills (a dead member is left quickly); a
# pass that must come wholly from members gets 20 s, so that a read slowed by a busy machine is
# not a fallback: ownership is what it checks, not speed.
verify() {
  SHOAL_REMOTE_TIMEOUT=20s readers "$1" "$S" "${R[@]}" --all --threads 4
  local f
  for f in fallbacks store_gets errors wrong; do
    [ "$(result_field "$1" "$f")" -eq 0 ] || fail "$1: $f $(result_field "$1" "$f") ($(grep '^result' "$T/$1.out"))"
  done
  [ "$(result_field "$1" reads)" -eq "$nblocks" ] || fail "$1: not every block was read"
}

echo "== four members, warmed: each of $nblocks blocks fetched once by its owner"
for m in m1 m2 m3 m4; do join "$m"; done
mark_all
verify warm0
gets_since "$T/gets.0"
out=$($OWN init "$T/own.json" "$nblocks" "$T/gets.0") || fail "warm-up ownership: $out"
echo "  $out"

echo "== 16 readers, then five rounds of kill -9"
start_bg load --kind client -- "$READERS" "$S" "${R[@]}" --threads 16 --until "$T/stop" \
  --seconds 400 --log-file "$T/load.log"
wait_log "$T/load.out" "progress reads=[1-9]" 60
for round in 1 2 3 4 5; do
  victim=${LIVE[0]}
  vid=$(member_id "$victim")
  LIVE=("${LIVE[@]:1}")
  mark_all
  before=$(grep -o 'reads=[0-9]*' "$T/load.out" | tail -n 1)
  kill9 "$victim"
  for m in "${LIVE[@]}"; do wait_log "$T/$m.log" "member $vid .* left group" 20; done
  verify "after$round"
  gets_since "$T/gets.k$round"
  out=$($OWN leave "$T/own.json" "$victim" "$T/gets.k$round") ||
    fail "round $round: ownership after the death of $victim: $out"
  echo "  round $round: $out"
  # The readers kept reading through the death.
  wait_until 30 bash -c "[ \"\$(grep -o 'reads=[0-9]*' '$T/load.out' | tail -n 1)\" != '$before' ]" ||
    fail "round $round: the readers stopped"
  mark_all
  join "n$round"
  MARK[n$round]=0
  verify "join$round"
  gets_since "$T/gets.j$round"
  out=$($OWN join "$T/own.json" "n$round" "$T/gets.j$round") ||
    fail "round $round: ownership after n$round joined: $out"
  echo "  round $round: $out"
done
touch "$T/stop"
wait_proc load 60
[ "$EXIT_RC" -eq 0 ] || fail "the readers saw errors: $(tail -n 5 "$T/load.err")"
echo "  readers: $(grep '^result' "$T/load.out")"
[ "$(result_field load reads)" -ge 1000 ] || fail "too few reads under the kills"
[ "$(result_field load errors)" -eq 0 ] && [ "$(result_field load wrong)" -eq 0 ] ||
  fail "application-visible errors or wrong bytes"

echo "== every object byte-exact at the end"
verify final
echo "PASS test_battery_kill"
