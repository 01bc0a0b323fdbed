#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with ASan+UBSan and -Werror, runs the
# unit tests, the fuzz corpora, the integration tests and the format check; then builds with
# ThreadSanitizer (build-tsan) and runs the unit tests and the multi-threaded integration tests
# of TSAN_TESTS (CMakeLists.txt), where any race report fails the run. Arguments go to the first
# ctest; with arguments the ThreadSanitizer step runs only when SHOAL_TEST_TSAN=1 (without them,
# SHOAL_TEST_TSAN=0 skips it). Between the two, the fuzz step: scripts/fuzz.sh builds every
# libFuzzer target with clang, replays each committed corpus, then fuzzes each target for a short
# fixed budget (SHOAL_FUZZ_SECONDS per target; by default 20 s, less when there are more than
# ten targets, so that the step stays near 3.5 minutes); any crash, leak or timeout fails the
# run. Like the ThreadSanitizer step it runs by default only without arguments
# (SHOAL_TEST_FUZZ=1 or 0 decides).
# With CI=true (.ci/run sets it) a skipped test or a skipped section of a test fails; elsewhere
# skips are allowed and listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${SHOAL_TEST_BUILD:-build-test}
TSAN=${SHOAL_TEST_TSAN:-$([ $# -eq 0 ] && echo 1 || echo 0)}
FUZZ=${SHOAL_TEST_FUZZ:-$([ $# -eq 0 ] && echo 1 || echo 0)}
cmake -S . -B "$BUILD" -DSHOAL_SANITIZE=ON -DSHOAL_WERROR=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
SHOAL_SKIP_LOG=$(cd "$BUILD" && pwd)/skipped.txt
export SHOAL_SKIP_LOG
: >"$SHOAL_SKIP_LOG"
rc=0
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@") || rc=$?
if [ "$FUZZ" = 1 ]; then
  ntargets=$(find tests/fuzz -maxdepth 1 -name 'fuzz_*.c' | wc -l)
  fsecs=${SHOAL_FUZZ_SECONDS:-$((ntargets > 10 ? 200 / ntargets : 20))}
  echo "== fuzz: $ntargets targets, corpora replayed, then ${fsecs} s each (scripts/fuzz.sh)"
  frc=0
  FUZZ_MERGE=0 ./scripts/fuzz.sh "$fsecs" || frc=$?
  if [ "$frc" -eq 77 ]; then
    # clang or libFuzzer missing: fuzz.sh said which.
    if [ "${CI:-}" = true ]; then
      echo "== fuzz: FAILED: cannot build the fuzz targets (CI=true: no step may be skipped)"
      rc=1
    else
      echo "scripts/fuzz.sh (clang with libFuzzer missing)" >>"$SHOAL_SKIP_LOG"
    fi
  elif [ "$frc" -ne 0 ]; then
    echo "== fuzz: FAILED (exit status $frc)"
    rc=1
  else
    echo "== fuzz: passed"
  fi
fi
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
