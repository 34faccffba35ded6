// Top-k busiest regions: of candidate regions (grid cells, districts, polygons), the k holding
// the most users, eliminating users and regions together. Each round users release their point
// (Cor. 6.1: one release bounds the distance to every region); a region leaves the race when its
// certified count interval falls below the k-th best lower end, and a user stops paying once its
// membership in every region still racing is certain. The ranking is post-processing.
#pragma once

#include <span>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/charges.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::coordinator {

struct RegionCount {
  std::size_t region = 0;       // index into the candidates
  double estimate = 0;          // users whose estimated point is inside
  double lower = 0, upper = 0;  // certified with probability ≥ 1 − β₀ (jointly for all regions)
};

struct TopRegionsResult {
  std::vector<std::size_t> top;     // the k regions, busiest first (by estimate, ties by index)
  std::vector<RegionCount> counts;  // every candidate, in candidate order
  // The race ended with k regions left: with probability ≥ 1 − β₀ they are the true top k (up
  // to ties). Otherwise the rounds or caps ran out and `top` ranks the regions still racing.
  bool certified = false;
  QueryReport report;
};

// options: method PM0 (the point releases the race needs), max_rounds, growth, first, β; the
// target is not used (the race stops when k regions are left). 1 ≤ k ≤ regions.size(); every
// region of the fleet's dimension.
Expected<TopRegionsResult> top_regions(Fleet& fleet, BudgetMirror& mirror,
                                       std::span<const geometry::Region> regions, std::size_t k,
                                       const UserCharges& charges,
                                       const AccuracyFirstOptions& options);

// Regions as a grid: cells × cells squares of side `cell` from (x0, y0).
Expected<std::vector<geometry::Region>> grid_regions(double x0, double y0, double cell,
                                                     std::size_t columns, std::size_t rows);

}  // namespace cgp::coordinator
