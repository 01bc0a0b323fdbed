#!/usr/bin/env bash
# Where a transport's time goes: one member with a warm cache, `shoal bench` reading it, and
# perf (the member's and the client's top symbols) and `strace -c` (the member's and the client's
# syscalls per request) over separate runs of the same point. docs/benchmarks.md records what it
# showed.
#   bench/profile.sh
# Environment: MODE (dio; pagecache, splice, or pool for the TCP pool), BS (1048576), DEPTH (16),
# DUR seconds per run (4), SHOAL_BIN (skips the build; a RelWithDebInfo build names functions),
# TOP symbols shown (25), STRACE (1; 0 skips the strace runs).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${MODE:-dio}
BS=${BS:-1048576}
DEPTH=${DEPTH:-16}
DUR=${DUR:-4}
TOP=${TOP:-25}
STRACE=${STRACE:-1}
OBJS=8
OBJ_MIB=32
if [ -z "${SHOAL_BIN:-}" ]; then
  cmake -S . -B build-prof -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=OFF \
    -DSHOAL_WERROR=OFF >/dev/null
  cmake --build build-prof -j"$(nproc)" --target shoal >/dev/null
  SHOAL_BIN=$PWD/build-prof/shoal
fi
SHOAL=$SHOAL_BIN
D=$(mktemp -d /tmp/shoal-prof.XXXXXX)
MP=
PIPE_MAX0=$(cat /proc/sys/fs/pipe-max-size)
cleanup() {
  trap - EXIT INT TERM
  [ -n "$MP" ] && kill "$MP" 2>/dev/null && wait "$MP" 2>/dev/null || true
  [ "$(cat /proc/sys/fs/pipe-max-size)" = "$PIPE_MAX0" ] || echo "$PIPE_MAX0" >/proc/sys/fs/pipe-max-size
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ "$MODE" = splice ] && [ "$PIPE_MAX0" -lt 8388608 ]; then echo 8388608 >/proc/sys/fs/pipe-max-size; fi
bk=$((BS / 1024))
mkdir -p "$D/store/data"
for i in $(seq 0 $((OBJS - 1))); do head -c $((OBJ_MIB * 1048576)) /dev/urandom >"$D/store/data/o$i"; done
smode=$MODE
[ "$MODE" = pool ] && smode=dio
"$SHOAL" serve "file://$D/store" --cache-group g --meta "sqlite3://$D/meta.db" --cache-dir "$D/cache" \
  --block-size "${bk}K" --group-ip 127.0.0.1 --iorpc-mode "$smode" --metrics 127.0.0.1:0 \
  --log-file "$D/member.log" &
MP=$!
for _ in $(seq 1 100); do grep -q ready "$D/member.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$D/member.log" || { echo "profile: member did not start" >&2; exit 1; }
args=("file://$D/store" --cache-group g --meta "sqlite3://$D/meta.db" --block-size "${bk}K"
  --log-level error --threads "$DEPTH")
[ "$MODE" = pool ] || args+=(--use-iorpc)
"$SHOAL" bench "${args[@]}" --duration 1s --warm >/dev/null
echo "machine: $(nproc) cores, kernel $(uname -r); $(date -u '+%F %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "point: $MODE, block ${bk}K, depth $DEPTH, ${DUR}s"
echo "== plain run"
"$SHOAL" bench "${args[@]}" --ramp 1s --duration "${DUR}s" | grep '^result:'
echo "== perf run"
perf record -q -g -o "$D/perf.member" -p "$MP" -- sleep $((DUR + 2)) >/dev/null 2>&1 &
PP=$!
perf record -q -g -o "$D/perf.client" -- "$SHOAL" bench "${args[@]}" --ramp 1s --duration "${DUR}s" |
  grep '^result:'
wait "$PP" || true
for who in member client; do
  echo "== perf: $who, self time by symbol (top $TOP)"
  perf report -q -i "$D/perf.$who" --no-children --sort sym --stdio -g none 2>/dev/null |
    grep -v '^$' | head -n "$TOP" || true
  echo "== perf: $who, by thread"
  perf report -q -i "$D/perf.$who" --no-children --sort comm --stdio -g none 2>/dev/null |
    grep -v '^$' | head -n 8 || true
done
if [ "$STRACE" != 0 ]; then
  echo "== strace -c: member (syscalls over the run)"
  strace -c -f -p "$MP" -o "$D/strace.member" &
  SP=$!
  sleep 0.5
  out=$("$SHOAL" bench "${args[@]}" --ramp 1s --duration "${DUR}s" | grep '^result:')
  kill -INT "$SP"
  wait "$SP" 2>/dev/null || true
  echo "$out"
  head -n 25 "$D/strace.member"
  echo "== strace -c: client"
  strace -c -f -o "$D/strace.client" "$SHOAL" bench "${args[@]}" --ramp 1s --duration "${DUR}s" |
    grep '^result:'
  head -n 25 "$D/strace.client"
fi
