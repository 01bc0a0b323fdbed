#!/usr/bin/env bash
# Fuzzes every parser of outside bytes: builds each tests/fuzz/fuzz_*.c as a libFuzzer binary
# (clang, ASan+UBSan, in a build folder of its own), replays every committed corpus once
# (regression), then runs each target for SECONDS on its corpus, one after another.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]       SECONDS per target (default 60); TARGETs like
#                                               fuzz_s3 (default: every tests/fuzz/fuzz_*.c)
#
# Prints one line per target for the regression and one for the fuzzing (executions, exec/s,
# coverage and features, corpus, new entries, crashes), and exits 1 when any target crashed,
# leaked, hung, ran out of memory or failed an invariant, in either phase. It exits 77 (and
# says what to install) when clang cannot build a libFuzzer program, so that scripts/test.sh
# can tell a missing tool from a failure: a skip on a developer's machine, a failure in CI.
# Crash inputs are kept in tests/fuzz/corpus-new/crashes/TARGET/ (printed, with a base64 copy
# in the log for small ones); reproduce one with BUILD/TARGET FILE. New corpus entries are
# merged (-merge=1, so only those that add coverage) into tests/fuzz/corpus-new/TARGET/ for
# review; copy the ones worth keeping into tests/fuzz/corpus/TARGET/. Both folders are
# git-ignored.
#
# Environment: SHOAL_FUZZ_BUILD (build folder, default build-fuzz), CC (default clang),
# FUZZ_ARGS (more libFuzzer flags for every target), FUZZ_MERGE=0 (skip the merge, as in CI).
# tests/fuzz/TARGET.options holds a target's own flags and tests/fuzz/TARGET.dict its
# dictionary, when they exist.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

SECS=${1:-60}
shift || true
if ! [[ "$SECS" =~ ^[0-9]+$ ]] || [ "$SECS" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
fi
BUILD=${SHOAL_FUZZ_BUILD:-build-fuzz}
export CC=${CC:-clang}
# A compiler that cannot link libFuzzer with the sanitizers is a missing tool (exit 77), told
# apart from a build of ours that fails (exit 1).
probe=$(mktemp -d /tmp/shoal-fuzz-probe.XXXXXX)
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' \
  >"$probe/p.c"
if ! command -v "$CC" >/dev/null 2>&1 ||
  ! "$CC" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >"$probe/log" 2>&1; then
  echo "fuzz: $CC cannot build a libFuzzer program ($(tail -1 "$probe/log" 2>/dev/null ||
    echo "not found")); scripts/setup.sh installs clang and libclang-rt-dev" >&2
  rm -rf "$probe"
  exit 77
fi
rm -rf "$probe"

if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  TARGETS=()
  for f in tests/fuzz/fuzz_*.c; do
    TARGETS+=("$(basename "$f" .c)")
  done
fi
for t in "${TARGETS[@]}"; do
  if [ ! -f "tests/fuzz/$t.c" ]; then
    echo "fuzz: no tests/fuzz/$t.c" >&2
    exit 2
  fi
done

# -O1 keeps libFuzzer fast while ASan reports stay readable.
mkdir -p "$BUILD"
echo "fuzz: building ${#TARGETS[@]} targets with $CC in $BUILD" >&2
cmake -S . -B "$BUILD" -DSHOAL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-O1" \
  >"$BUILD/fuzz-configure.log" 2>&1 || { cat "$BUILD/fuzz-configure.log" >&2; exit 1; }
rm -f "$BUILD/fuzz-configure.log"
if ! cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]}" >"$BUILD/fuzz-build.log" 2>&1; then
  grep -E -B2 -A8 'error|Error' "$BUILD/fuzz-build.log" | head -80 >&2
  echo "fuzz: the build failed; the whole log is $BUILD/fuzz-build.log" >&2
  exit 1
fi
rm -f "$BUILD/fuzz-build.log"

# libfabric loads libinfinipath, whose SIGABRT/SIGSEGV handler writes a .btr file and turns an
# abort into exit(1); the sanitizers and libFuzzer should see the signal themselves.
export IPATH_NO_BACKTRACE=1
# What fuzzing needs comes last, so it wins over options the caller exported for other tests
# (scripts/test.sh exports its own): leaks are findings, and an allocation too large to make is
# the parser's error path, not a crash.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"

WORK="$ROOT/$BUILD/fuzz-work"
NEW="$ROOT/tests/fuzz/corpus-new"
failed=()
total_execs=0

# The libFuzzer flags of target $1 (its .options and dictionary, FUZZ_ARGS) into ARGS.
target_args() {
  ARGS=(-timeout=25 -rss_limit_mb=4096 -artifact_prefix="$NEW/crashes/$1/")
  local extra=()
  [ -f "tests/fuzz/$1.options" ] && read -r -a extra <"tests/fuzz/$1.options"
  ARGS+=("${extra[@]+"${extra[@]}"}")
  OPTS=("${extra[@]+"${extra[@]}"}") # the target's own flags only (the merge takes these)
  # shellcheck disable=SC2206
  [ -n "${FUZZ_ARGS:-}" ] && ARGS+=($FUZZ_ARGS)
  return 0
}

# The end of a failed run's log, and its crash inputs (files in $2 newer than $3).
report_failure() {
  local t=$1 crashes=$2 since=$3 log=$4 rc=$5
  echo "---- $t: exit status $rc; the end of $log:"
  grep -v '^#[0-9]' "$log" | tail -40
  find "$crashes" -type f -newer "$since" | while read -r f; do
    echo "crash input: $f"
    if [ "$(stat -c %s "$f")" -le 4096 ]; then
      echo "  base64: $(base64 -w0 "$f")"
    fi
  done
  echo "---- reproduce: $ROOT/$BUILD/$t FILE"
}

# Regression: every committed corpus input once, before any fuzzing, so that an input known to
# have crashed (the regress-* files) is reported at once and by name.
echo "fuzz: regression: every corpus input once"
for t in "${TARGETS[@]}"; do
  dir="$WORK/$t"
  rm -rf "$dir"
  mkdir -p "$dir" "$NEW/crashes/$t"
  corpus="$ROOT/tests/fuzz/corpus/$t"
  if [ ! -d "$corpus" ]; then
    printf '%-16s no corpus\n' "$t"
    continue
  fi
  target_args "$t"
  touch "$dir/started"
  rc=0
  (cd "$dir" && timeout 600 "$ROOT/$BUILD/$t" "${ARGS[@]}" -runs=0 "$corpus" >regress.log 2>&1) ||
    rc=$?
  n=$(find "$corpus" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    printf '%-16s corpus %5s inputs  ok\n' "$t" "$n"
  else
    printf '%-16s corpus %5s inputs  FAILED\n' "$t" "$n"
    failed+=("$t(regression)")
    report_failure "$t" "$NEW/crashes/$t" "$dir/started" "$dir/regress.log" "$rc"
  fi
done

echo "fuzz: ${SECS} s per target"
for t in "${TARGETS[@]}"; do
  bin="$ROOT/$BUILD/$t"
  dir="$WORK/$t"
  mkdir -p "$dir/scratch" "$dir/seeds" "$dir/merged"
  corpus="$ROOT/tests/fuzz/corpus/$t"
  [ -d "$corpus" ] || corpus="$dir/seeds" # a target without a corpus yet starts from nothing
  crashes="$NEW/crashes/$t"
  target_args "$t"
  args=("${ARGS[@]}" -max_total_time="$SECS" -print_final_stats=1)
  [ -f "tests/fuzz/$t.dict" ] && args+=(-dict="$ROOT/tests/fuzz/$t.dict")
  touch "$dir/started"

  # New inputs go to the scratch folder (the first one); the committed corpus is only read.
  # The outer timeout catches a run that libFuzzer itself cannot stop (a hang outside an input).
  rc=0
  t0=$SECONDS
  (cd "$dir" && timeout $((SECS + 120)) "$bin" "${args[@]}" scratch "$corpus" >fuzz.log 2>&1) ||
    rc=$?
  took=$((SECONDS - t0))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz.log" | tail -1)
  execs=${execs:-0}
  total_execs=$((total_execs + execs))
  # The last status line: "#N  DONE  cov: C ft: F corp: ..." (or the last pulse).
  last=$(grep -E '^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+cov:' "$dir/fuzz.log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  ncrash=$(find "$crashes" -type f -newer "$dir/started" | wc -l)
  [ "$rc" -ne 0 ] && [ "$ncrash" -eq 0 ] && ncrash=1 # died without an artifact: still a failure

  # Keep what adds coverage beyond the committed corpus, for review.
  nnew=0
  if [ "$rc" -eq 0 ] && [ "${FUZZ_MERGE:-1}" != 0 ] && [ -n "$(ls -A "$dir/scratch")" ]; then
    cp -r "$corpus"/. "$dir/merged/"
    if (cd "$dir" && "$bin" -merge=1 "${OPTS[@]+"${OPTS[@]}"}" merged scratch >merge.log 2>&1); then
      mkdir -p "$NEW/$t"
      for f in "$dir/merged"/*; do
        [ -e "$f" ] || continue
        b=$(basename "$f")
        if [ ! -e "$corpus/$b" ]; then
          mv "$f" "$NEW/$t/$b"
          nnew=$((nnew + 1))
        fi
      done
    else
      echo "fuzz: $t: merge failed, see $dir/merge.log" >&2
    fi
  fi

  ncorpus=$(find "$corpus" -type f | wc -l)
  printf '%-16s %12s execs in %4ss  %7s exec/s  cov %5s  ft %6s  corpus %5s  new %4s  crashes %s\n' \
    "$t" "$execs" "$took" "$((execs / (took > 0 ? took : 1)))" "${cov:-?}" "${ft:-?}" \
    "$ncorpus" "$nnew" "$ncrash"
  if [ "$ncrash" -ne 0 ]; then
    failed+=("$t")
    report_failure "$t" "$crashes" "$dir/started" "$dir/fuzz.log" "$rc"
  fi
done

echo "fuzz: ${#TARGETS[@]} targets, $total_execs executions, ${#failed[@]} failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
