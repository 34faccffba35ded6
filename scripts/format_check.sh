#!/usr/bin/env bash
# Fails when a tracked C or C++ file is not as clang-format (.clang-format) would write it.
#   scripts/format_check.sh        lists the files and what differs
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v clang-format >/dev/null || { echo "format_check: clang-format is not installed" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "format_check: run clang-format -i on the files above" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
