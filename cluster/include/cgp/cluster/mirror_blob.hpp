// One shard's budget mirror as one blob (the store keeps a blob per shard, not a row per user):
// "CGPM", format 1 (u32), the entry count (u64), then per user its index (u64) and what the
// mirror says is left (IEEE-754 double), little-endian, by rising index.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::cluster {

struct MirrorEntry {
  std::uint64_t user_index = 0;
  double remaining = 0;
  friend bool operator==(const MirrorEntry&, const MirrorEntry&) = default;
};

std::string encode_mirror_blob(std::span<const MirrorEntry> entries);
// Errors name "mirror_blob": a wrong header or length, indices not rising. Values are given as
// stored: the mirror's restore() reads a negative or non-finite one as nothing left.
Expected<std::vector<MirrorEntry>> decode_mirror_blob(std::string_view blob);

}  // namespace cgp::cluster
