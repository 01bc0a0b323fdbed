#!/usr/bin/env bash
# Fuzzes every parser of outside bytes: builds each tests/fuzz/fuzz_*.c as a libFuzzer binary
# (clang, ASan+UBSan, in a build folder of its own) and runs each for SECONDS on its corpus.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]       SECONDS per target (default 60); TARGETs like
#                                               fuzz_s3 (default: every tests/fuzz/fuzz_*.c)
#
# Prints one line per target (executions, corpus, new entries, crashes) and exits non-zero when
# any target crashed, leaked, hung or failed an invariant. Crash inputs are kept in
# tests/fuzz/corpus-new/crashes/TARGET/ (printed, with a base64 copy in the log for small ones);
# reproduce one with BUILD/TARGET FILE. New corpus entries are merged (-merge=1, so only those
# that add coverage) into tests/fuzz/corpus-new/TARGET/ for review; copy the ones worth keeping
# into tests/fuzz/corpus/TARGET/. Both folders are git-ignored.
#
# Environment: SHOAL_FUZZ_BUILD (build folder, default build-fuzz), CC (default clang),
# FUZZ_ARGS (more libFuzzer flags for every target), FUZZ_MERGE=0 (skip the merge, as in CI). tests/fuzz/TARGET.options holds a target's
# own flags and tests/fuzz/TARGET.dict its dictionary, when they exist.
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
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz: $CC not found; scripts/setup.sh installs clang and libclang-rt-14-dev" >&2
  exit 2
fi

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
echo "fuzz: building ${#TARGETS[@]} targets with $CC in $BUILD" >&2
cmake -S . -B "$BUILD" -DSHOAL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-O1" \
  >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log" >&2; exit 1; }
rm -f "$BUILD.configure.log"
cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]}" >/dev/null

# libfabric loads libinfinipath, whose SIGABRT/SIGSEGV handler writes a .btr file and turns an
# abort into exit(1); the sanitizers and libFuzzer should see the signal themselves.
export IPATH_NO_BACKTRACE=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

WORK="$ROOT/$BUILD/fuzz-work"
NEW="$ROOT/tests/fuzz/corpus-new"
failed=()
total_execs=0
for t in "${TARGETS[@]}"; do
  bin="$ROOT/$BUILD/$t"
  dir="$WORK/$t"
  rm -rf "$dir"
  mkdir -p "$dir/scratch" "$dir/seeds" "$dir/merged"
  corpus="$ROOT/tests/fuzz/corpus/$t"
  [ -d "$corpus" ] || corpus="$dir/seeds" # a target without a corpus yet starts from nothing
  crashes="$NEW/crashes/$t"
  mkdir -p "$crashes"
  touch "$dir/started"
  args=(-max_total_time="$SECS" -print_final_stats=1 -timeout=25 -rss_limit_mb=4096
        -artifact_prefix="$crashes/")
  [ -f "tests/fuzz/$t.options" ] && read -r -a extra <"tests/fuzz/$t.options" && args+=("${extra[@]}")
  [ -f "tests/fuzz/$t.dict" ] && args+=(-dict="$ROOT/tests/fuzz/$t.dict")
  # shellcheck disable=SC2206
  [ -n "${FUZZ_ARGS:-}" ] && args+=($FUZZ_ARGS)

  # New inputs go to the scratch folder (the first one); the committed corpus is only read.
  rc=0
  t0=$SECONDS
  (cd "$dir" && timeout $((SECS + 300)) "$bin" "${args[@]}" scratch "$corpus" >fuzz.log 2>&1) ||
    rc=$?
  took=$((SECONDS - t0))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz.log" | tail -1)
  execs=${execs:-0}
  total_execs=$((total_execs + execs))
  ncrash=$(find "$crashes" -type f -newer "$dir/started" | wc -l)
  [ "$rc" -ne 0 ] && [ "$ncrash" -eq 0 ] && ncrash=1 # died without an artifact: still a failure

  # Keep what adds coverage beyond the committed corpus, for review.
  nnew=0
  if [ "$rc" -eq 0 ] && [ "${FUZZ_MERGE:-1}" != 0 ] && [ -n "$(ls -A "$dir/scratch")" ]; then
    cp -r "$corpus"/. "$dir/merged/"
    if (cd "$dir" && "$bin" -merge=1 "${extra[@]+"${extra[@]}"}" merged scratch >merge.log 2>&1); then
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
  unset extra

  ncorpus=$(find "$corpus" -type f | wc -l)
  printf '%-16s %12s execs in %4ss  corpus %5s  new %4s  crashes %s\n' "$t" "$execs" "$took" \
    "$ncorpus" "$nnew" "$ncrash"
  if [ "$ncrash" -ne 0 ]; then
    failed+=("$t")
    echo "---- $t: exit status $rc; the end of $dir/fuzz.log:"
    grep -v '^#[0-9]' "$dir/fuzz.log" | tail -40
    find "$crashes" -type f -newer "$dir/started" | while read -r f; do
      echo "crash input: $f"
      if [ "$(stat -c %s "$f")" -le 4096 ]; then
        echo "  base64: $(base64 -w0 "$f")"
      fi
    done
    echo "---- reproduce: $bin FILE"
  fi
done

echo "fuzz: ${#TARGETS[@]} targets, $total_execs executions, ${#failed[@]} failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
