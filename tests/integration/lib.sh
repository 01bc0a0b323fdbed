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

# metrics_addr NAME — the HOST:PORT of NAME's metrics endpoint, from the line it logs at start
# ("prometheus metrics listening on IP:PORT" in $T/NAME.log); waits up to 20 s.
metrics_addr() {
  local i line
  for i in $(seq 1 200); do
    line=$(grep -o 'prometheus metrics listening on [^ ]*' "$T/$1.log" 2>/dev/null | tail -n 1)
    if [ -n "$line" ]; then
      echo "${line##* }"
      return 0
    fi
    sleep 0.1
  done
  fail "$1 logged no metrics address"
}

# scrape ADDR PATH OUT — GET http://ADDR/PATH into OUT; fails the test on any error.
scrape() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "GET http://$1$2 failed"
import sys, urllib.request
with urllib.request.urlopen("http://%s%s" % (sys.argv[1], sys.argv[2]), timeout=10) as r:
    if r.status != 200:
        sys.exit(1)
    open(sys.argv[3], "wb").write(r.read())
PY
}

# need_fuse — skips the test (77) unless it runs as root with /dev/fuse and fusermount3.
need_fuse() {
  [ "$(id -u)" -eq 0 ] || skip "FUSE tests need root"
  [ -c /dev/fuse ] || skip "no /dev/fuse"
  command -v fusermount3 >/dev/null || skip "no fusermount3"
}

# start_mount NAME STORAGE MOUNTPOINT FLAGS... — a `shoal mount` in the background (PID in
# PID_NAME, log in $T/NAME.log, stderr in $T/NAME.err, the mount in MOUNTS); waits up to 20 s.
start_mount() {
  local name=$1 storage=$2 mp=$3
  shift 3
  mkdir -p "$mp"
  "$SHOAL" mount "$storage" "$mp" --cache-dir "$T/$name.cache" --log-file "$T/$name.log" \
    --log-level debug "$@" 2>"$T/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  MOUNTS+=("$mp")
  eval "PID_$name=$pid"
  wait_for mountpoint -q "$mp" || fail "mount $name did not come up: $(tail -n 3 "$T/$name.log")"
}

# stats_field MOUNTPOINT NAME — the value of NAME in MOUNTPOINT/.stats.
stats_field() {
  awk -v n="$2" '$1 == n { print $2 }' "$1/.stats"
}

# start_s3rver BUCKET — a real S3 server (s3rver, from npm into $SRC/.deps) on a free loopback
# port, storing under $T/s3rver.data, with BUCKET created. Sets S3_PORT and S3_ENDPOINT and
# exports the AWS_* variables it accepts.
start_s3rver() {
  local js=$SRC/.deps/node_modules/s3rver/bin/s3rver.js
  command -v node >/dev/null || skip "no node (scripts/setup.sh installs it)"
  if [ ! -f "$js" ]; then
    command -v npm >/dev/null || skip "no npm (scripts/setup.sh installs it)"
    npm install --prefix "$SRC/.deps" --no-audit --no-fund s3rver@3.7.1 >"$T/npm.log" 2>&1 ||
      fail "npm install s3rver: $(tail -n 3 "$T/npm.log")"
  fi
  S3_PORT=$(free_port)
  mkdir -p "$T/s3rver.data"
  # s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
  node --openssl-legacy-provider "$js" -d "$T/s3rver.data" -a 127.0.0.1 -p "$S3_PORT" \
    --configure-bucket "$1" --silent >"$T/s3rver.log" 2>&1 &
  PIDS+=($!)
  S3_ENDPOINT=http://127.0.0.1:$S3_PORT
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
  wait_for curl -sf "$S3_ENDPOINT/$1?list-type=2&max-keys=1" ||
    fail "s3rver did not start: $(tail -n 5 "$T/s3rver.log")"
}

# s3_put_dir ENDPOINT BUCKET DIR — uploads every file under DIR, keyed by its relative path.
s3_put_dir() {
  python3 "$SRC/tests/integration/s3fault.py" put --endpoint "$1" --bucket "$2" --dir "$3" \
    --key "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" >/dev/null
}

# start_s3fault UPSTREAM_PORT — tests/integration/s3fault.py in front of an S3 server: checks
# every SigV4 signature and injects the fault named in $S3F_MODE (see s3_mode). Sets
# S3F_ENDPOINT and S3F_LOG (one line per request).
start_s3fault() {
  S3F_LOG=$T/s3fault.log
  S3F_MODE=$T/s3fault.mode
  echo pass >"$S3F_MODE"
  : >"$S3F_LOG"
  rm -f "$T/s3fault.port"
  python3 "$SRC/tests/integration/s3fault.py" proxy --port-file "$T/s3fault.port" \
    --upstream "$1" --log "$S3F_LOG" --mode-file "$S3F_MODE" \
    --secret "$AWS_SECRET_ACCESS_KEY" 2>"$T/s3fault.err" &
  PIDS+=($!)
  wait_for test -s "$T/s3fault.port" || fail "s3fault did not start: $(cat "$T/s3fault.err")"
  S3F_ENDPOINT=http://127.0.0.1:$(cat "$T/s3fault.port")
}

# s3_mode MODE — switches the fault front (pass, 503pct:N, 503all, short, shortonce, shortcl,
# shortclonce, 403, hang) and starts a new request log.
s3_mode() {
  echo "$1" >"$S3F_MODE"
  : >"$S3F_LOG"
}

# s3_path BUCKET KEY — the request path of KEY as the fault front logs it.
s3_path() {
  python3 -c 'import sys, urllib.parse as u; print("/" + sys.argv[1] + "/" + u.quote(sys.argv[2], safe="/~"))' "$1" "$2"
}

# s3_count METHOD PATH — requests for PATH the fault front has seen since the last s3_mode.
s3_count() {
  awk -v m="$1" -v p="$2" '$1 == m && $2 == p' "$S3F_LOG" | wc -l
}

# wait_exit PID [SECONDS] — waits (default 20 s) for a child of this shell to end; sets EXIT_RC.
wait_exit() {
  local i
  for i in $(seq 1 $((${2:-20} * 10))); do
    if ! kill -0 "$1" 2>/dev/null; then
      EXIT_RC=0
      wait "$1" || EXIT_RC=$?
      return 0
    fi
    sleep 0.1
  done
  fail "process $1 did not end within ${2:-20} s"
}

# stop_mount NAME MOUNTPOINT — `shoal umount`, then the mount process must end with 0 and
# without sanitizer reports (leaks included) in $T/NAME.err.
stop_mount() {
  "$SHOAL" umount "$2" || fail "shoal umount $2 failed"
  local pid
  pid=$(eval "echo \$PID_$1")
  wait_exit "$pid"
  [ "$EXIT_RC" -eq 0 ] || fail "mount $1 exited with $EXIT_RC: $(tail -n 5 "$T/$1.err")"
  if grep -q -E 'Sanitizer|runtime error' "$T/$1.err"; then
    fail "mount $1: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/$1.err")"
  fi
}
