#!/usr/bin/env bash
# libfabric's MR cache in a process that initialised libfabric before libshoal (issue 32 item 1;
# PyTorch with NCCL's OFI plugin): shoal turns the cache off by environment, which libfabric reads
# only at its first initialisation, so here it comes too late. A client with --rdma-network is
# then refused, by the documented strict start-up rule [M3] (shoal_client_open fails with EINVAL
# and one line naming the cause and the fix), and opens when the environment turned the cache off
# before libfabric started, or when libshoal came first.
. "$(dirname "$0")/lib.sh"
command -v fi_info >/dev/null && ! fi_info -p tcp >/dev/null 2>&1 && skip "libfabric has no tcp provider"
TOOL=$(dirname "$SHOAL")/mrcache_first
[ -x "$TOOL" ] || fail "no $TOOL (built with the project)"
mkdir -p "$T/store"
S="file://$T/store"

run() { # run MODE [ENV...] — the tool's one line
  local mode=$1
  shift
  expect_exit 0 env -u FI_MR_CACHE_MAX_COUNT "$@" "$TOOL" "$mode" "$S" lo tcp
  cat "$T/last.out"
}

# libfabric first, the cache left at its default: refused, the cause and the fix named.
out=$(run first)
case "$out" in
"refused: Invalid argument: --rdma-network lo: libfabric's MR cache is on: libfabric was initialised before shoal"*FI_MR_CACHE_MAX_COUNT=0*) ;;
*) fail "libfabric first with the MR cache on: expected the refusal, got: $out" ;;
esac
# ... with a count that leaves it on, the same.
out=$(run first FI_MR_CACHE_MAX_COUNT=1024)
case "$out" in refused:*"MR cache is on"*) ;; *) fail "FI_MR_CACHE_MAX_COUNT=1024 first: $out" ;; esac
# libfabric first, but the environment turned the cache off before it started: opens.
[ "$(run first FI_MR_CACHE_MAX_COUNT=0)" = opened ] || fail "FI_MR_CACHE_MAX_COUNT=0 first: refused"
# libshoal first: its own setting wins (a count in the environment is overridden, with a warning).
[ "$(run shoal)" = opened ] || fail "libshoal first: refused"
[ "$(run shoal FI_MR_CACHE_MAX_COUNT=1024)" = opened ] || fail "libshoal first, count 1024: refused"
echo "PASS: $TEST_NAME"
