#!/usr/bin/env bash
# A member under 16 concurrent IORPC readers [R1, R4]: cold (every block a fill, shared between
# readers) and warm, sixteen `shoal cat --use-iorpc` at once are byte-exact and served by the
# member, a 16-thread `shoal bench --use-iorpc` reads without errors (also with all 16 threads on
# one connection, taking turns reading it), and the member stops on SIGTERM with exit 0; a member
# with RDMA answers INFO with its RDMA addresses (set after its loops started). Short and multi-threaded on purpose: it is the integration test the
# ThreadSanitizer build runs (CMakeLists.txt TSAN_TESTS), where any race report fails it.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
STORE=$T/store
for i in 0 1 2 3; do make_object "$STORE/d/o$i" $((6 * 1024 * 1024 + i * 65536 + 777)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
start_member m "$S" --meta "$META" --cache-group g --group-ip 127.0.0.1
wait_members "$META" g 1

# readers ROUND — 16 readers at once, four per object
readers() {
  local k pids=()
  for k in $(seq 0 15); do
    "$SHOAL" cat "$S" "d/o$((k % 4))" --meta "$META" --cache-group g --no-sharing --cache-size 0 \
      --use-iorpc --log-level error --summary >"$T/out.$k" 2>"$T/sum.$k" &
    pids+=($!)
  done
  for k in $(seq 0 15); do
    wait "${pids[$k]}" || fail "reader $k ($1) failed: $(tail -n 3 "$T/sum.$k")"
    cmp -s "$T/out.$k" "$STORE/d/o$((k % 4))" || fail "reader $k ($1) read wrong bytes"
    [ "$(summary_field "object store GETs" "$T/sum.$k")" -eq 0 ] ||
      fail "reader $k ($1) was not served by the member: $(cat "$T/sum.$k")"
    if grep -q -E 'ThreadSanitizer|Sanitizer|runtime error' "$T/sum.$k"; then
      fail "reader $k ($1): $(grep -m 3 -E 'Sanitizer|runtime error' "$T/sum.$k")"
    fi
  done
}
echo "== 16 readers, cold"
readers cold
echo "== 16 readers, warm"
readers warm
echo "== shoal bench, 16 IORPC threads"
"$SHOAL" bench "$S" --meta "$META" --cache-group g --use-iorpc --threads 16 --duration 3s \
  --prefix d/ --log-level error >"$T/bench.out" 2>"$T/bench.err" ||
  fail "bench failed: $(tail -n 3 "$T/bench.out" "$T/bench.err")"
grep "^result:" "$T/bench.out"
grep -q "^result: .* 0 errors" "$T/bench.out" || fail "bench had errors"
if grep -q -E 'Sanitizer|runtime error' "$T/bench.err"; then
  fail "bench: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/bench.err")"
fi

echo "== shoal bench, 16 IORPC threads sharing one connection (callers take turns reading it)"
SHOAL_IORPC_SCALE_PERIOD=1h "$SHOAL" bench "$S" --meta "$META" --cache-group g --use-iorpc \
  --threads 16 --duration 3s --prefix d/ --log-level error >"$T/bench1.out" 2>"$T/bench1.err" ||
  fail "bench on one connection failed: $(tail -n 3 "$T/bench1.out" "$T/bench1.err")"
grep "^result:" "$T/bench1.out"
grep -q "^result: .* 0 errors" "$T/bench1.out" || fail "bench on one connection had errors"
grep -q "127.0.0.1:[0-9]*=1$" "$T/bench1.out" ||
  fail "bench did not stay on one connection: $(grep -m 1 'connections per member' "$T/bench1.out")"
if grep -q -E 'Sanitizer|runtime error' "$T/bench1.err"; then
  fail "bench on one connection: $(grep -m 3 -E 'Sanitizer|runtime error' "$T/bench1.err")"
fi

echo "== a member with RDMA: its addresses, set after its loops started, in INFO answers"
if fi_info -p tcp >/dev/null 2>&1; then
  FI_PROVIDER=tcp start_member r "$S" --meta "sqlite3://$T/meta2.db" --cache-group g2 \
    --group-ip 127.0.0.1 --rdma-network lo
  wait_members "sqlite3://$T/meta2.db" g2 1
  RPORT=$(member_port r)
  for k in 1 2 3; do
    FI_PROVIDER=tcp "$SHOAL" ping "127.0.0.1:$RPORT" --rdma-network lo >"$T/ping.out" 2>&1 ||
      fail "ping: $(cat "$T/ping.out")"
  done
  grep -q "^rdma .* ok" "$T/ping.out" || fail "INFO named no RDMA address: $(cat "$T/ping.out")"
  if grep -q -E "$REPORT_RE|WARNING: ThreadSanitizer" "$T/ping.out"; then
    fail "ping: $(grep -m 3 -E "$REPORT_RE|WARNING: ThreadSanitizer" "$T/ping.out")"
  fi
  stop_proc r 60 # exit 0 (66 with a ThreadSanitizer report) and no report in its logs
else
  skip_section "libfabric has no tcp provider here"
fi
stop_proc m 60
echo "PASS test_concurrent_readers"
