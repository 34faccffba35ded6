#!/usr/bin/env bash
# The reproduction's data is pinned: the SHA-256 that scripts/reproduce.sh
# checks is the one docs/data.md publishes, and, where ../shared is beside the repository, it is
# the digest of the file there. Without ../shared (a user's clone) only the first part runs.
set -euo pipefail
root="$1"
script_digest="$(sed -n 's/^expected_nyc=\([0-9a-f]\{64\}\)$/\1/p' "$root/scripts/reproduce.sh")"
[ -n "$script_digest" ] || { echo "reproduce_data: no expected_nyc in reproduce.sh" >&2; exit 1; }
grep -q "\`$script_digest\`" "$root/docs/data.md" ||
  { echo "reproduce_data: docs/data.md does not publish $script_digest" >&2; exit 1; }
nyc="$root/../shared/data/nyc_collisions/nyc_collisions_points.csv"
if [ -f "$nyc" ]; then
  actual="$(sha256sum "$nyc" | cut -d' ' -f1)"
  [ "$actual" = "$script_digest" ] ||
    { echo "reproduce_data: $nyc has $actual, reproduce.sh expects $script_digest" >&2; exit 1; }
  echo "reproduce_data: the NYC file matches its published SHA-256"
else
  echo "reproduce_data: ../shared is absent; the published digests agree"
fi
