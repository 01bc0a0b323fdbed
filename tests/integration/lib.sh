# Shared helpers for integration tests (sourced). Every test makes its own temporary folder,
# starts its own processes, records their PIDs and stops them by PID on exit.
set -euo pipefail

SHOAL=${SHOAL_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/shoal}
SRC=${SHOAL_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
T=$(mktemp -d /tmp/shoal-test.XXXXXX)
PIDS=()
MOUNTS=()

cleanup() {
  local rc=$?
  for m in "${MOUNTS[@]:-}"; do
    [ -n "$m" ] && umount -l "$m" 2>/dev/null || true
  done
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] && wait "$p" 2>/dev/null || true
  done
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

# make_object PATH BYTES — deterministic pseudo-random content.
make_object() {
  mkdir -p "$(dirname "$1")"
  head -c "$2" /dev/urandom >"$1"
}

# expect_exit CODE CMD... — runs CMD, checks its exit code, keeps stderr in $T/last.err.
expect_exit() {
  local want=$1
  shift
  set +e
  "$@" >"$T/last.out" 2>"$T/last.err"
  local got=$?
  set -e
  [ "$got" -eq "$want" ] || fail "expected exit $want, got $got: $* ($(head -c 300 "$T/last.err"))"
}

# summary_field NAME FILE — a number from `shoal cat --summary` output.
summary_field() {
  grep -o "$1 [0-9]*" "$2" | head -n 1 | awk '{print $NF}'
}

# wait_for CMD... — polls CMD for up to 20 s.
wait_for() {
  local i
  for i in $(seq 1 200); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

# free_port — a TCP port that was free a moment ago.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_member NAME STORAGE FLAGS... — a `shoal serve` in the background, its log in $T/NAME.log.
start_member() {
  local name=$1 storage=$2
  shift 2
  "$SHOAL" serve "$storage" --cache-dir "$T/$name.cache" --log-file "$T/$name.log" \
    --log-level debug "$@" &
  local pid=$!
  PIDS+=("$pid")
  eval "PID_$name=$pid"
}

# group_alive META GROUP — number of live members.
group_alive() {
  "$SHOAL" group --meta "$1" --cache-group "$2" 2>/dev/null | tail -n 1 | awk '{print $3}'
}

# wait_members META GROUP N — waits until N members are alive.
wait_members() {
  local i
  for i in $(seq 1 100); do
    [ "$(group_alive "$1" "$2")" = "$3" ] && return 0
    sleep 0.2
  done
  "$SHOAL" group --meta "$1" --cache-group "$2" >&2 || true
  fail "group $2 did not reach $3 live members"
}

# start_redis — a redis-server on a free loopback port; sets REDIS_URL.
start_redis() {
  command -v redis-server >/dev/null || skip "no redis-server"
  local port
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --dir "$T" >"$T/redis.log" 2>&1 &
  PIDS+=($!)
  REDIS_URL="redis://127.0.0.1:$port/0"
  wait_for redis-cli -p "$port" ping || fail "redis did not start"
}
