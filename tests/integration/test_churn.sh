#!/usr/bin/env bash
# Membership churn and a hung member under load [G2, G5; RELIABILITY: membership churn, slow or
# hung member]: members join and leave every few reads while 8 readers run, then one
# member is stopped (SIGSTOP) for several seconds and continued. Every read is byte-exact and
# none fails; after SIGCONT the member is used again.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms SHOAL_REMOTE_TIMEOUT=2s SHOAL_AVOID_DURATION=1s
STORE=$T/store
for i in $(seq 0 15); do make_object "$STORE/o$i" $((5 * 1024 * 1024 + i * 333)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
for m in a b c; do start_member "$m" "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1; done
wait_members "$META" g 3

reader() { # reader N — byte-exact reads until $T/stop exists (at most 400 or 60 s); one line per
  # read in $T/reads; exit 1 on any error
  local n=0 end=$((SECONDS + 60)) k
  while [ ! -e "$T/stop" ] && [ $SECONDS -lt "$end" ] && [ $n -lt 400 ]; do
    k=o$(( (n * 7 + $1) % 16 ))
    "$SHOAL" cat "$S" "$k" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
      --log-level error >"$T/r$1.out" || { echo "reader $1: $k failed" >&2; return 1; }
    cmp -s "$T/r$1.out" "$STORE/$k" || { echo "reader $1: $k wrong bytes" >&2; return 2; }
    echo "$1" >>"$T/reads"
    n=$((n + 1))
  done
}
readers_start() { # readers_start — 8 readers in the background
  rm -f "$T/stop"
  for r in $(seq 1 8); do
    reader "$r" &
    track "reader$r" $! helper
  done
}
readers_stop() { # readers_stop — stops them; every one must have ended cleanly
  touch "$T/stop"
  local r bad=0
  for r in $(seq 1 8); do
    wait_proc "reader$r" 90
    [ "$EXIT_RC" -eq 0 ] || bad=$((bad + 1))
  done
  [ "$bad" -eq 0 ] || fail "$bad readers failed $1"
}
more_reads() { # more_reads N — waits until the readers made N more reads
  local want=$(($(wc -l <"$T/reads") + $1))
  wait_until 120 bash -c "[ \$(wc -l <'$T/reads') -ge $want ]" || fail "the readers stalled"
}

echo "== members join and leave under 8 readers"
: >"$T/reads"
readers_start
for step in 1 2 3 4 5; do
  more_reads 8 # the churn's period: a few reads
  start_member "j$step" "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1
  member_id "j$step" >/dev/null # ready
  case $step in
    2) stop_proc a ;;
    4) stop_proc j1 ;;
    *) prev=$((step - 1)); [ $prev -ge 2 ] && stop_proc "j$prev" ;;
  esac
done
more_reads 8
readers_stop "during churn"

echo "== a member hung by SIGSTOP, then continued"
readers_start
more_reads 8
kill -STOP "$PID_b"
sleep 5 # the fault: stopped longer than the 2 s request deadline and the 3 s group timeout
kill -CONT "$PID_b"
more_reads 8
readers_stop "while a member was stopped"
# Re-admitted: b beats again, so every new client's view has the four live members.
wait_members "$META" g 4
for i in $(seq 0 15); do
  "$SHOAL" cat "$S" "o$i" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
    --log-level error --summary >"$T/out" 2>>"$T/after" || fail "read after SIGCONT"
  cmp -s "$T/out" "$STORE/o$i" || fail "wrong bytes after SIGCONT"
done
[ "$(summary_lines "$T/after")" -eq 16 ] || fail "expected 16 summaries after SIGCONT"
fb=$(summary_field fallbacks "$T/after")
[ "$fb" -eq 0 ] || fail "member not re-admitted after SIGCONT: $fb reads fell back"
echo "PASS test_churn"
