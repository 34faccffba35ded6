// A query over a fleet split into shards — MPI ranks, processes, machines, gateways. Each shard
// owns a set of global user ids (a contiguous range, or any list) and runs the per-user half of
// the engine on its users alone (their replies, estimates, radii and eliminations); the only
// numbers that cross shards are a round's counts, for kNN the k smallest upper ends, and for a
// floating sum its exact partials: a few hundred bytes a round, no per-user data. One ShardReducer
// implementation per way shards talk (MPI in cgp-sim, tools/mpi_job.cpp; threads in the tests); a
// query without one is the whole fleet in this process.
//
// Results do not depend on how the fleet is split: counts are integers; floating sums are exact
// and rounded once (ExactSum), in every backend; kNN ties are ordered by (estimate, global id).
// Identical for any split of the users into shards, contiguous or not (shard.md).
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
#include "cgp/coordinator/exact_sum.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::coordinator {

class ShardReducer {
 public:
  virtual ~ShardReducer() = default;
  // Element-wise sums over every shard, in place; every shard passes the same length.
  virtual void sum(std::span<std::uint64_t> values) = 0;
  // Every shard's values, concatenated in shard order, on every shard (lengths may differ).
  virtual std::vector<double> gather(std::span<const double> local) = 0;

  // A reducer that can finish a query without a shard lost mid-query (the live tier's) counts
  // the lost shard's part of each later sum as zeros, of each gather as nothing, and of each
  // tally as the last decided counts it noted. Others sum a tally like any sum and ignore notes.
  virtual void tally(std::span<std::uint64_t, 2> values) { sum(values); }
  virtual void note_decided(std::span<const std::uint64_t, 2> /*decided*/) {}
};

// Which global ids a fleet's users are. The shards' users together are global ids
// [0, fleet_users), each on one shard: the caller's contract (validate_shard checks what one
// shard can see — its own ids in range — not that ids are distinct, nor that they cover).
struct Shard {
  UserId first = 0;                 // global id of the fleet's user 0 (when ids is empty)
  std::size_t fleet_users = 0;      // users over all shards (unsharded: the fleet's size)
  ShardReducer* reducer = nullptr;  // null: this fleet is the whole fleet
  // The global id of each of the fleet's users (local id u → ids[u]), any order; empty: the
  // contiguous range from first. Viewed: the caller keeps it alive for the query.
  std::span<const UserId> ids{};
  // The users a query is over, on every shard, when the caller knows them (the live tier's
  // round driver counts them in the enrolment, so that a shard lost mid-query or users no shard
  // holds yet still count in a density's divisor and an interval's room); 0: summed over the
  // shards. The same on every shard.
  std::uint64_t query_users = 0;
  bool sharded() const noexcept { return reducer != nullptr; }
};

// Local user u's global id. Precondition: u < the fleet's size (validate_shard).
inline UserId global_id(const Shard& shard, UserId local) noexcept {
  return shard.ids.empty() ? shard.first + local : shard.ids[local];
}

// A fleet of `users` users can be this shard: ids, when given, has one per user; sharded, each
// global id is below fleet_users. An error names "shard". Local (not collective).
Status validate_shard(const Shard& shard, std::size_t users);

// Users per block of shard_slice: a power of two ≥ 256 with at most ~1024 blocks in the fleet.
std::size_t sum_block(std::size_t fleet_users) noexcept;

// Shard `index` of `count` over `fleet_users`: a contiguous slice of whole blocks, as even as
// they come (any split gives the same results; whole blocks keep MPI's slices tidy). Shards
// past the blocks are empty (count > blocks).
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

// Users the answer counts in full (range: decided inside and those counted at the end; KDE:
// those whose kernels are summed) and users eliminated (decided out), over every shard.
struct Tally {
  std::uint64_t counted = 0, eliminated = 0;
};
// A shard's tally summed over every shard. A shard lost mid-query (the live tier) counts what
// it last noted: its users decided before the loss keep counting, its undecided ones do not.
Tally tally_over_shards(const Shard& shard, Tally local);
// Notes this shard's users decided so far (PIE-NI's |S₁| as counted, |S₀| as eliminated): its
// part of every later tally if it is lost. Not a collective.
void note_decided(const Shard& shard, Tally decided);

// Agrees on a status: every shard returns an error when any shard's `local` is one (its own,
// or an error naming "shard" when another shard failed). One reduction.
Status agree_over_shards(const Shard& shard, Status local);

// Σ over every shard's users of a value: the exact sum rounded once (ExactSum), so the same
// double for any split of the users into shards and any order of adds.
class ShardSum {
 public:
  explicit ShardSum(const Shard& shard) : reducer_(shard.reducer) {}
  void add(double value) { sum_.add(value); }
  void add(double value, std::uint64_t copies) { sum_.add(value, copies); }
  // Collective (every shard calls it once): gathers every shard's partials, a few doubles each.
  double total();

 private:
  ShardReducer* reducer_;
  ExactSum sum_;
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
