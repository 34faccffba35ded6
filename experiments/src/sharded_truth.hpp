// Ground truth and metrics of the experiments over a data set that may be one rank's slice
// (Dataset::first/total): counts by reduction, exact sums rounded once (ShardSum), exact kNN by
// a top-k merge of each rank's k-d tree. Unsharded (no reducer) they are the plain values,
// computed by the same code. A slice is contiguous (shard_of): global_row and
// global_sum_of_distances find a global id's row as id − first.
#pragma once

#include <span>
#include <vector>

#include "cgp/common/geometry/region.hpp"
#include "cgp/coordinator/shard.hpp"
#include "cgp/experiments/dataset.hpp"
#include "cgp/simulation/ground_truth.hpp"

namespace cgp::experiments {

// The shard a data set is: its slice and the run's reducer (none when not sharded).
coordinator::Shard shard_of(const Dataset& data, coordinator::ShardReducer* reducer);

// Users of every slice inside `range`.
std::size_t global_count(const Dataset& data, const coordinator::Shard& shard,
                         const geometry::Region& range);
// (1/n) Σ exp(−‖x_i − p‖²/(2b²)) over every slice's users.
double global_kde(const Dataset& data, const coordinator::Shard& shard, std::span<const double> p,
                  double bandwidth);
// The bounding box of every slice's 2-D points: {lo_x, lo_y, hi_x, hi_y}.
std::array<double, 4> global_bounds(const Dataset& data, const coordinator::Shard& shard);
// Row `global_row` of the data, on every rank (its owner shares it).
std::vector<double> global_row(const Dataset& data, const coordinator::Shard& shard,
                               std::size_t global_row);
// PrivSav (ground_truth.hpp) over every slice's users: `charged` by local id, `users` local ids
// (empty: all).
double global_saving(const coordinator::Shard& shard, std::span<const coordinator::Charge> charged,
                     double rho, std::span<const coordinator::UserId> users = {});
// Σ of the users' charges over every slice (multi-range's total charge).
double global_total(const coordinator::Shard& shard, std::span<const coordinator::Charge> charged);
// Σ_{i ∈ ids} ‖x_i − p‖ in the order of `ids` (global ids, each summed where it lives).
double global_sum_of_distances(const Dataset& data, const coordinator::Shard& shard,
                               std::span<const double> p, std::span<const coordinator::UserId> ids);
// The exact k nearest among `candidates` (local ids; empty = all) over every slice: the sum of
// their distances to p, nearest first (ties by global id).
double global_nearest_distance_sum(const Dataset& data, const coordinator::Shard& shard,
                                   const simulation::KnnOracle& oracle, std::span<const double> p,
                                   std::size_t k, std::span<const coordinator::UserId> candidates);

}  // namespace cgp::experiments
