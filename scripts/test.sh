#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with ASan+UBSan and -Werror, runs the
# unit tests, the fuzz corpora, the integration tests and the format check; then builds with
# ThreadSanitizer (build-tsan) and runs the unit tests and the multi-threaded integration tests
# of TSAN_TESTS (CMakeLists.txt), where any race report fails the run. Arguments go to the first
# ctest; with arguments the ThreadSanitizer step runs only when SHOAL_TEST_TSAN=1 (without them,
# SHOAL_TEST_TSAN=0 skips it).
# With CI=true (.ci/run sets it) a skipped test or a skipped section of a test fails; elsewhere
# skips are allowed and listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${SHOAL_TEST_BUILD:-build-test}
TSAN=${SHOAL_TEST_TSAN:-$([ $# -eq 0 ] && echo 1 || echo 0)}
cmake -S . -B "$BUILD" -DSHOAL_SANITIZE=ON -DSHOAL_WERROR=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
SHOAL_SKIP_LOG=$(cd "$BUILD" && pwd)/skipped.txt
export SHOAL_SKIP_LOG
: >"$SHOAL_SKIP_LOG"
rc=0
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@") || rc=$?
if [ "$TSAN" = 1 ]; then
  TSAN_BUILD=${SHOAL_TSAN_BUILD:-build-tsan}
  cmake -S . -B "$TSAN_BUILD" -DSHOAL_TSAN=ON -DSHOAL_WERROR=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build "$TSAN_BUILD" -j"$(nproc)"
  # exitcode: a process with a report fails (the tests check exit codes and scan stderr).
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:exitcode=66:second_deadlock_stack=1}
  trc=0
  (cd "$TSAN_BUILD" && ctest --output-on-failure -j"$(nproc)" --timeout 900) || trc=$?
  [ "$rc" -ne 0 ] || rc=$trc
fi
if [ -s "$SHOAL_SKIP_LOG" ]; then
  echo "Skipped on this machine (each is a failure with CI=true):"
  sort "$SHOAL_SKIP_LOG" | sed 's/^/  /'
fi
exit $rc
