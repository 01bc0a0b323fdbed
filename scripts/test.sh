#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with ASan+UBSan and -Werror, runs the
# unit tests, the fuzz corpora, the integration tests and the format check.
# With CI=true (.ci/run sets it) a skipped test or a skipped section of a test fails; elsewhere
# skips are allowed and listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${SHOAL_TEST_BUILD:-build-test}
cmake -S . -B "$BUILD" -DSHOAL_SANITIZE=ON -DSHOAL_WERROR=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
SHOAL_SKIP_LOG=$(cd "$BUILD" && pwd)/skipped.txt
export SHOAL_SKIP_LOG
: >"$SHOAL_SKIP_LOG"
cd "$BUILD"
rc=0
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@" || rc=$?
if [ -s "$SHOAL_SKIP_LOG" ]; then
  echo "Skipped on this machine (each is a failure with CI=true):"
  sort "$SHOAL_SKIP_LOG" | sed 's/^/  /'
fi
exit $rc
