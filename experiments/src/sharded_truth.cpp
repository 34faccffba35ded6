#include "sharded_truth.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "cgp/common/geometry/signed_distance.hpp"

namespace cgp::experiments {

using coordinator::Shard;
using coordinator::UserId;

Shard shard_of(const Dataset& data, coordinator::ShardReducer* reducer) {
  if (!reducer || data.total == 0) return {0, data.size(), nullptr};
  return {static_cast<UserId>(data.first), data.total, reducer};
}

std::size_t global_count(const Dataset& data, const Shard& shard, const geometry::Region& range) {
  return coordinator::sum_over_shards(shard,
                                      simulation::exact_count(data.points, data.dimension, range));
}

double global_kde(const Dataset& data, const Shard& shard, std::span<const double> p,
                  double bandwidth) {
  coordinator::ShardSum sum(shard);
  const std::span<const double> points(data.points);
  for (std::size_t u = 0; u < data.size(); ++u) {
    const double d =
        geometry::euclidean_distance(points.subspan(u * data.dimension, data.dimension), p);
    sum.add(std::exp(-d * d / (2 * bandwidth * bandwidth)));
  }
  const double total = sum.total();
  return shard.fleet_users ? total / static_cast<double>(shard.fleet_users) : 0.0;
}

std::array<double, 4> global_bounds(const Dataset& data, const Shard& shard) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // Minima of {lo_x, lo_y, −hi_x, −hi_y}: one gather, exact.
  std::vector<double> mine{kInf, kInf, kInf, kInf};
  for (std::size_t i = 0; i < data.size(); ++i)
    for (int a = 0; a < 2; ++a) {
      mine[a] = std::min(mine[a], data.points[2 * i + a]);
      mine[2 + a] = std::min(mine[2 + a], -data.points[2 * i + a]);
    }
  const auto all = shard.reducer ? shard.reducer->gather(mine) : mine;
  std::array<double, 4> out{kInf, kInf, kInf, kInf};
  for (std::size_t i = 0; i < all.size(); ++i) out[i % 4] = std::min(out[i % 4], all[i]);
  return {out[0], out[1], -out[2], -out[3]};
}

std::vector<double> global_row(const Dataset& data, const Shard& shard, std::size_t global_row) {
  std::vector<double> mine;
  if (global_row >= shard.first && global_row - shard.first < data.size()) {
    const auto at = data.points.begin() +
                    static_cast<std::ptrdiff_t>((global_row - shard.first) * data.dimension);
    mine.assign(at, at + static_cast<std::ptrdiff_t>(data.dimension));
  }
  return shard.reducer ? shard.reducer->gather(mine) : mine;
}

namespace {

// Users' charges counted by value: a query's charges take a handful of values (a round's share
// times the rounds a user answered, or 0), so f(charge) is worked out and added to the sum once
// per value, times its count (an exact sum: the same total in any order). A direct-mapped table:
// a value that lands on another's slot sends that one's count to the sum first, so distinct
// charges (Alg. 3's) cost one add each, as before.
template <class F>
class ChargeTally {
 public:
  ChargeTally(coordinator::ShardSum& sum, F f) : sum_(sum), f_(std::move(f)) {}
  ChargeTally(const ChargeTally&) = delete;
  ChargeTally& operator=(const ChargeTally&) = delete;
  ~ChargeTally() = default;

  void count(coordinator::Charge charge) {
    const auto bits = std::bit_cast<std::uint64_t>(charge.value());
    Slot& slot = slots_[(bits * 0x9e3779b97f4a7c15ULL) >> (64 - kSlotBits)];
    if (slot.bits != bits) {
      add(slot);
      slot = {bits, 0};
    }
    ++slot.count;
  }
  // Adds what is still counted in the table.
  void finish() {
    for (Slot& slot : slots_) add(slot), slot = {};
  }

 private:
  static constexpr int kSlotBits = 6;
  struct Slot {
    std::uint64_t bits = 0, count = 0;
  };
  void add(const Slot& slot) {
    if (slot.count != 0) sum_.add(f_(std::bit_cast<double>(slot.bits)), slot.count);
  }
  coordinator::ShardSum& sum_;
  F f_;
  std::array<Slot, std::size_t{1} << kSlotBits> slots_{};
};

}  // namespace

double global_saving(const Shard& shard, std::span<const coordinator::Charge> charged, double rho,
                     std::span<const UserId> users) {
  coordinator::ShardSum kept(shard);
  ChargeTally tally(kept, [rho](double charge) { return std::max(0.0, rho - charge) / rho; });
  std::uint64_t n = 0;
  if (users.empty()) {
    for (const coordinator::Charge& c : charged) tally.count(c);
    n = charged.size();
  } else {
    for (UserId u : users) tally.count(charged[u]);
    n = users.size();
  }
  tally.finish();
  const double total = kept.total();
  n = coordinator::sum_over_shards(shard, n);
  return n ? total / static_cast<double>(n) : 0.0;
}

double global_total(const Shard& shard, std::span<const coordinator::Charge> charged) {
  // Not through a ChargeTally: its one caller, Alg. 3, charges users thousands of distinct
  // amounts, which a tally only slows (measured).
  coordinator::ShardSum sum(shard);
  for (const coordinator::Charge& c : charged) sum.add(c.value());
  return sum.total();
}

double global_sum_of_distances(const Dataset& data, const Shard& shard, std::span<const double> p,
                               std::span<const UserId> ids) {
  // (position in ids, distance) for the ids this slice holds; summed in the order of ids.
  std::vector<double> mine;
  const std::span<const double> points(data.points);
  for (std::size_t a = 0; a < ids.size(); ++a) {
    const std::size_t id = ids[a];
    if (id < shard.first || id - shard.first >= data.size()) continue;
    mine.push_back(static_cast<double>(a));
    mine.push_back(geometry::euclidean_distance(
        points.subspan((id - shard.first) * data.dimension, data.dimension), p));
  }
  const auto all = shard.reducer ? shard.reducer->gather(mine) : mine;
  std::vector<double> distance(ids.size(), 0.0);
  for (std::size_t i = 0; i + 1 < all.size(); i += 2)
    distance[static_cast<std::size_t>(all[i])] = all[i + 1];
  double sum = 0;
  for (double d : distance) sum += d;
  return sum;
}

double global_nearest_distance_sum(const Dataset& data, const Shard& shard,
                                   const simulation::KnnOracle& oracle, std::span<const double> p,
                                   std::size_t k, std::span<const UserId> candidates) {
  std::vector<coordinator::Ranked> mine;
  const std::span<const double> points(data.points);
  const std::size_t available = candidates.empty() ? data.size() : candidates.size();
  if (available > 0)
    for (UserId u : oracle.nearest(p, std::min(k, available), candidates))
      mine.push_back({geometry::euclidean_distance(
                          points.subspan(std::size_t{u} * data.dimension, data.dimension), p),
                      coordinator::global_id(shard, u)});
  double sum = 0;
  for (const auto& r : coordinator::smallest_over_shards(shard, std::move(mine), k)) sum += r.key;
  return sum;
}

}  // namespace cgp::experiments
