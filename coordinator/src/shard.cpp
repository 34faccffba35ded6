#include "cgp/coordinator/shard.hpp"

#include <algorithm>
#include <bit>
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

void sum_over_shards(const Shard& shard, std::span<std::uint64_t> values) {
  if (shard.reducer) shard.reducer->sum(values);
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

ShardSum::ShardSum(const Shard& shard)
    : shard_(shard),
      block_(sum_block(shard.fleet_users)),
      first_block_(shard.first / sum_block(shard.fleet_users)) {}

void ShardSum::add(UserId local_user, double value) {
  const std::size_t b = (shard_.first + local_user) / block_ - first_block_;
  if (b >= partial_.size()) partial_.resize(b + 1, 0.0);
  partial_[b] += value;
}

double ShardSum::total() {
  // Blocks with nothing added add 0.0: the same total whether a block is listed or not.
  std::vector<double> all = shard_.reducer ? shard_.reducer->gather(partial_) : partial_;
  double sum = 0;
  for (double v : all) sum += v;
  return sum;
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
  for (std::size_t i = 0; i + 1 < all.size(); i += 2)
    merged.push_back({all[i], static_cast<std::uint64_t>(all[i + 1])});
  const std::size_t keep = std::min(k, merged.size());
  std::partial_sort(merged.begin(), merged.begin() + static_cast<std::ptrdiff_t>(keep),
                    merged.end());
  merged.resize(keep);
  return merged;
}

}  // namespace cgp::coordinator
