#include "cgp/coordinator/shard.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "cgp/common/validate.hpp"

namespace cgp::coordinator {

std::size_t sum_block(std::size_t fleet_users) noexcept {
  return std::max<std::size_t>(256, std::bit_ceil((fleet_users + 1023) / 1024));
}

ShardSlice shard_slice(std::size_t fleet_users, std::size_t index, std::size_t count) noexcept {
  if (count == 0 || index >= count) return {};
  const std::size_t block = sum_block(fleet_users);
  const std::size_t blocks = (fleet_users + block - 1) / block;
  const std::size_t first_block = blocks * index / count, end_block = blocks * (index + 1) / count;
  const std::size_t first = std::min(fleet_users, first_block * block);
  const std::size_t end = std::min(fleet_users, end_block * block);
  return {first, end - first};
}

Status validate_shard(const Shard& shard, std::size_t users) {
  if (!shard.ids.empty()) {
    if (shard.ids.size() != users)
      return make_error(ErrorCode::dimension_mismatch, "shard",
                        "the shard lists " + std::to_string(shard.ids.size()) +
                            " global ids for a fleet of " + std::to_string(users));
    if (shard.sharded())
      for (UserId id : shard.ids)
        if (id >= shard.fleet_users)
          return make_error(ErrorCode::out_of_range, "shard",
                            "the shard lists global id " + std::to_string(id) +
                                ", past the fleet's " + std::to_string(shard.fleet_users));
    return {};
  }
  if (shard.sharded() && shard.first + users > shard.fleet_users)
    return make_error(
        ErrorCode::out_of_range, "shard",
        "the shard's users end past the fleet's " + std::to_string(shard.fleet_users));
  return {};
}

void sum_over_shards(const Shard& shard, std::span<std::uint64_t> values) {
  if (shard.reducer) shard.reducer->sum(values);
}

Tally tally_over_shards(const Shard& shard, Tally local) {
  if (!shard.reducer) return local;
  std::uint64_t values[2] = {local.counted, local.eliminated};
  shard.reducer->tally(values);
  return {values[0], values[1]};
}

void note_decided(const Shard& shard, Tally decided) {
  if (!shard.reducer) return;
  const std::uint64_t values[2] = {decided.counted, decided.eliminated};
  shard.reducer->note_decided(values);
}

Status agree_over_shards(const Shard& shard, Status local) {
  if (!shard.reducer) return local;
  const std::uint64_t failed = sum_over_shards(shard, local ? 0 : 1);
  if (!local) return local;
  if (failed > 0)
    return make_error(ErrorCode::invalid_argument, "shard",
                      "the query failed on " + std::to_string(failed) +
                          " other shard(s); their error is reported there");
  return {};
}

double ShardSum::total() {
  if (!reducer_) return sum_.value();
  ExactSum all;
  all.add_partials(reducer_->gather(sum_.partials()));
  return all.value();
}

std::vector<Ranked> smallest_over_shards(const Shard& shard, std::vector<Ranked> local,
                                         std::size_t k) {
  const std::size_t take = std::min(k, local.size());
  std::partial_sort(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(take), local.end());
  local.resize(take);
  if (!shard.reducer) return local;
  // Ids below 2^53 travel exactly as doubles.
  std::vector<double> flat;
  flat.reserve(2 * take);
  for (const Ranked& r : local) flat.push_back(r.key), flat.push_back(static_cast<double>(r.id));
  const std::vector<double> all = shard.reducer->gather(flat);
  std::vector<Ranked> merged;
  merged.reserve(all.size() / 2);
  for (std::size_t i = 0; i + 1 < all.size(); i += 2) {
    // Ids come from other shards (over a network, in the live tier): one that is not an id
    // below 2^53 is dropped rather than converted (a cast of it would be undefined).
    const double id = all[i + 1];
    if (!(id >= 0 && id < 0x1p53) || id != std::floor(id) || std::isnan(all[i])) continue;
    merged.push_back({all[i], static_cast<std::uint64_t>(id)});
  }
  const std::size_t keep = std::min(k, merged.size());
  std::partial_sort(merged.begin(), merged.begin() + static_cast<std::ptrdiff_t>(keep),
                    merged.end());
  merged.resize(keep);
  return merged;
}

}  // namespace cgp::coordinator
