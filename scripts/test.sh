#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with ASan+UBSan and -Werror, runs the
# unit tests, the fuzz corpora, the integration tests and the format check.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${SHOAL_TEST_BUILD:-build-test}
cmake -S . -B "$BUILD" -DSHOAL_SANITIZE=ON -DSHOAL_WERROR=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
