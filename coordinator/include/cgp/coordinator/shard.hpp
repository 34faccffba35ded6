// A query over a fleet split into shards — MPI ranks, processes, machines. Each shard owns a
// contiguous range of global user ids and runs the per-user half of the engine on its users
// alone (their replies, estimates, radii and eliminations); the only numbers that cross shards
// are a round's counts and, for kNN, the k smallest upper ends: a few hundred bytes a round, no
// per-user data. One ShardReducer implementation per way shards talk (MPI in cgp-sim,
// tools/mpi_job.cpp; threads in the tests); a query without one is the whole fleet in this process.
//
// Results do not depend on how the fleet is split: counts are integers; floating sums are taken
// per block of global ids (sum_block) and the blocks added in order, in every backend; kNN ties
// are ordered by (estimate, global id). Identical for any split whose boundaries are block
// multiples (shard_slice makes such splits).
//
// Every shard must make the same query calls in the same order (they meet in the reducer):
// the queries make their collective calls on every shard, also where a shard has nobody to ask
// or its local checks fail (the failure is then reported on every shard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::coordinator {

class ShardReducer {
 public:
  virtual ~ShardReducer() = default;
  // Element-wise sums over every shard, in place; every shard passes the same length.
  virtual void sum(std::span<std::uint64_t> values) = 0;
  // Every shard's values, concatenated in shard order, on every shard (lengths may differ).
  virtual std::vector<double> gather(std::span<const double> local) = 0;
};

struct Shard {
  UserId first = 0;                 // global id of the fleet's user 0
  std::size_t fleet_users = 0;      // users over all shards (unsharded: the fleet's size)
  ShardReducer* reducer = nullptr;  // null: this fleet is the whole fleet
  bool sharded() const noexcept { return reducer != nullptr; }
};

// Users per block of a floating sum: a power of two ≥ 256 with at most ~1024 blocks in the
// fleet, so a sum gathers a few kB whatever the fleet size.
std::size_t sum_block(std::size_t fleet_users) noexcept;

// Shard `index` of `count` over `fleet_users`: whole blocks, as even as they come. Shards past
// the blocks are empty (count > blocks).
struct ShardSlice {
  std::size_t first = 0, size = 0;
};
ShardSlice shard_slice(std::size_t fleet_users, std::size_t index, std::size_t count) noexcept;

// Sums over every shard (unsharded: the values themselves), in place.
void sum_over_shards(const Shard& shard, std::span<std::uint64_t> values);
inline std::uint64_t sum_over_shards(const Shard& shard, std::uint64_t value) {
  sum_over_shards(shard, std::span<std::uint64_t>(&value, 1));
  return value;
}

// Agrees on a status: every shard returns an error when any shard's `local` is one (its own,
// or an error naming "shard" when another shard failed). One reduction.
Status agree_over_shards(const Shard& shard, Status local);

// Σ over every shard's users of a value, the same double for any block-aligned split: values
// are added per block of global ids in the order they come, then the blocks in order.
class ShardSum {
 public:
  explicit ShardSum(const Shard& shard);
  // Local user u's value (u = global id − shard.first); users of one block in a fixed order.
  void add(UserId local_user, double value);
  // Collective (every shard calls it once).
  double total();

 private:
  const Shard& shard_;
  std::size_t block_ = 1, first_block_ = 0;
  std::vector<double> partial_;  // this shard's blocks, from its first
};

// The k smallest (key, global id) pairs over every shard, smallest first: each shard passes
// its own candidates (any order, any number); ties broken by id.
struct Ranked {
  double key;
  std::uint64_t id;
  friend bool operator<(const Ranked& a, const Ranked& b) noexcept {
    return a.key < b.key || (a.key == b.key && a.id < b.id);
  }
};
std::vector<Ranked> smallest_over_shards(const Shard& shard, std::vector<Ranked> local,
                                         std::size_t k);

}  // namespace cgp::coordinator
