#!/usr/bin/env bash
# Every C file is formatted by the project's .clang-format.
set -euo pipefail
cd "${SHOAL_SRC:-$(dirname "$0")/../..}"
command -v clang-format >/dev/null || { echo "SKIP: no clang-format"; exit 77; }
bad=0
while IFS= read -r f; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f"
    bad=1
  fi
done < <(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests bench -name '*.[ch]')
exit $bad
