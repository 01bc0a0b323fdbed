#!/usr/bin/env bash
# Every C file is formatted by the project's .clang-format.
. "$(dirname "$0")/lib.sh"
cd "$SRC"
command -v clang-format >/dev/null || skip "no clang-format"
bad=0
while IFS= read -r f; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f"
    bad=1
  fi
done < <(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests bench -name '*.[ch]')
[ "$bad" -eq 0 ] || fail "files not formatted (clang-format -i FILE)"
echo "PASS test_format"
