#!/usr/bin/env bash
# Compiles every ```cpp and ```c block of the README, with the project's
# warnings as errors, so that no snippet rots: a missing include, an unchecked [[nodiscard]]
# Status or a renamed function fails here. Each block becomes the body of a function whose
# parameters are the block's free variables (listed below, by block number); a new block needs
# its line here, or the check fails.
#   tests/readme_snippets.sh README CXX CC INCLUDE_DIR...
set -euo pipefail
readme="$1"
cxx="$2"
cc="$3"
shift 3
includes=()
for dir in "$@"; do includes+=(-I "$dir"); done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Block number -> the wrapping function's parameters (and the headers their types need).
signature() {
  case "$1" in
    0) echo "void" ;;
    1) echo "std::span<const std::uint8_t> request_bytes" ;;
    2) echo "const uint8_t* config, size_t config_len, const uint8_t* request, size_t request_len" ;;
    3) echo "const std::vector<double>& points_xy, const cgp::geometry::Region& range, std::span<const double> p" ;;
    4) echo "cgp::coordinator::Fleet& fleet, cgp::coordinator::BudgetMirror& mirror, const cgp::geometry::Region& range" ;;
    5) echo "cgp::client::Device& device, std::uint64_t tick" ;;
    6) echo "const std::vector<std::string>& device_ids, cgp::coordinator::BudgetMirror& mirror, const cgp::geometry::Region& range, const cgp::coordinator::UserCharges& rho, const cgp::coordinator::QueryOptions& options" ;;
    *) return 1 ;;
  esac
}
preamble_cpp='#include <cstdint>
#include <span>
#include <string>
#include <vector>
#include <chrono>
#include <cgp/common/geometry/region.hpp>
#include <cgp/coordinator/budget_mirror.hpp>
#include <cgp/coordinator/queries.hpp>'
preamble_c='#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cgp/cgp.h>'

# Split the README into blocks: block-N.cpp / block-N.c hold the lines between the fences.
awk -v dir="$work" 'BEGIN { n = 0 }
  /^```cpp$/ { inside = 1; ext = "cpp"; next }
  /^```c$/   { inside = 1; ext = "c"; next }
  /^```/ && inside { inside = 0; n++; next }
  inside { print > (dir "/block-" n "." ext) }
' "$readme"

count=0
for block in "$work"/block-*; do
  name="$(basename "$block")"
  number="${name#block-}"
  number="${number%%.*}"
  ext="${name##*.}"
  params="$(signature "$number")" || { echo "readme_snippets: block $number has no signature here" >&2; exit 1; }
  source="$work/snippet-$number.$ext"
  {
    if [ "$ext" = cpp ]; then echo "$preamble_cpp"; else echo "$preamble_c"; fi
    grep -E '^#include' "$block" || true
    echo "int snippet_$number($params);"
    echo "int snippet_$number($params) {"
    grep -vE '^#include' "$block"
    echo "  return 0;"
    echo "}"
  } > "$source"
  if [ "$ext" = cpp ]; then
    "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-variable \
      -Wno-unused-parameter "${includes[@]}" "$source" \
      || { echo "readme_snippets: README block $number (C++) does not compile:" >&2; cat -n "$source" >&2; exit 1; }
  else
    "$cc" -std=c11 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-variable \
      -Wno-unused-parameter "${includes[@]}" "$source" \
      || { echo "readme_snippets: README block $number (C) does not compile:" >&2; cat -n "$source" >&2; exit 1; }
  fi
  count=$((count + 1))
done
[ "$count" -ge 5 ] || { echo "readme_snippets: found only $count blocks" >&2; exit 1; }
echo "readme_snippets: $count README blocks compile"
