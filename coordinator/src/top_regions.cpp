#include "cgp/coordinator/top_regions.hpp"

#include <algorithm>
#include <cmath>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::coordinator {
namespace {

// Every region's certified interval and estimate from each user's last estimate and radius:
// inside when its signed distance is below −h, outside above h, undecided between; users
// without an estimate (never answered) may be anywhere.
void count_regions(const EliminationResult& r, std::span<const geometry::Region> regions,
                   const std::vector<char>& competing, std::vector<RegionCount>& counts,
                   std::vector<double>& mean) {
  const std::size_t n = r.estimates.rho_bar.size();
  for (std::size_t g = 0; g < regions.size(); ++g)
    if (competing[g]) counts[g] = {g, 0, 0, 0};
  mean.resize(r.estimates.dimension);
  for (std::size_t u = 0; u < n; ++u) {
    const bool known = r.estimates.rho_bar[u] > 0;
    if (known) r.estimates.mean(static_cast<UserId>(u), mean.data());
    for (std::size_t g = 0; g < regions.size(); ++g) {
      if (!competing[g]) continue;
      if (!known) {
        counts[g].upper += 1;
        continue;
      }
      const double d = geometry::signed_distance(regions[g], mean);
      const double h = r.radius[u];
      counts[g].lower += d < -h ? 1 : 0;
      counts[g].upper += d <= h ? 1 : 0;
      counts[g].estimate += d < 0 ? 1 : 0;
    }
  }
}

// The k-th largest lower end among the racing regions; drops every region whose upper end is
// below it. Returns the regions left.
std::size_t drop_behind(const std::vector<RegionCount>& counts, std::vector<char>& competing,
                        std::size_t k) {
  std::vector<double> lowers;
  for (std::size_t g = 0; g < counts.size(); ++g)
    if (competing[g]) lowers.push_back(counts[g].lower);
  if (lowers.size() <= k) return lowers.size();
  std::nth_element(lowers.begin(), lowers.begin() + static_cast<std::ptrdiff_t>(k - 1),
                   lowers.end(), std::greater<>());
  const double kth_lower = lowers[k - 1];
  std::size_t left = 0;
  for (std::size_t g = 0; g < counts.size(); ++g) {
    if (competing[g] && counts[g].upper < kth_lower) competing[g] = 0;
    left += competing[g] ? 1 : 0;
  }
  return left;
}

}  // namespace

Expected<std::vector<geometry::Region>> grid_regions(double x0, double y0, double cell,
                                                     std::size_t columns, std::size_t rows) {
  CGP_RETURN_IF_ERROR(require_finite_positive("cell", cell));
  if (!std::isfinite(x0) || !std::isfinite(y0))
    return make_error(ErrorCode::not_finite, "origin", "the grid's origin must be finite");
  CGP_RETURN_IF_ERROR(require_count_in("columns", columns, 1, 10000));
  CGP_RETURN_IF_ERROR(require_count_in("rows", rows, 1, 10000));
  std::vector<geometry::Region> cells;
  cells.reserve(columns * rows);
  for (std::size_t y = 0; y < rows; ++y)
    for (std::size_t x = 0; x < columns; ++x) {
      const double lo[2] = {x0 + cell * static_cast<double>(x), y0 + cell * static_cast<double>(y)};
      const double hi[2] = {lo[0] + cell, lo[1] + cell};
      CGP_ASSIGN_OR_RETURN(auto box, geometry::Box::create(lo, hi));
      cells.emplace_back(std::move(box));
    }
  return cells;
}

Expected<TopRegionsResult> top_regions(Fleet& fleet, BudgetMirror& mirror,
                                       std::span<const geometry::Region> regions, std::size_t k,
                                       const UserCharges& charges,
                                       const AccuracyFirstOptions& options) {
  if (regions.empty())
    return make_error(ErrorCode::invalid_argument, "regions", "regions is empty");
  if (k == 0 || k > regions.size())
    return make_error(
        ErrorCode::out_of_range, "k",
        "k must be in [1, " + std::to_string(regions.size()) + "], got " + std::to_string(k));
  for (std::size_t g = 0; g < regions.size(); ++g)
    if (geometry::dimension(regions[g]) != fleet.dimension())
      return make_error(ErrorCode::dimension_mismatch, indexed_name("regions", g),
                        indexed_name("regions", g) + " has dimension " +
                            std::to_string(geometry::dimension(regions[g])) + ", the fleet " +
                            std::to_string(fleet.dimension()));
  if (options.method != Method::PM0)
    return make_error(ErrorCode::invalid_argument, "method",
                      "method must be PM0 for top regions: one point release gives a user's "
                      "distance to every region");
  CGP_RETURN_IF_ERROR(require_open_interval("beta", options.beta, 0.0, 1.0));
  EliminationSetup setup;
  setup.query_id = options.query_id;
  setup.component_id = options.component_id;
  setup.triple = Triple::point;
  CGP_ASSIGN_OR_RETURN(setup.fractions,
                       accuracy_schedule(options, charges.smallest_cap(), fleet.initial_budget()));
  setup.rounds = setup.fractions.size();
  setup.beta0 = options.beta / 4;

  std::vector<char> competing(regions.size(), 1);
  std::vector<RegionCount> counts(regions.size());
  std::vector<double> mean;
  std::size_t left = regions.size();
  const StopRule stop = [&](const EliminationResult& r, std::span<const UserId>) {
    count_regions(r, regions, competing, counts, mean);
    left = drop_behind(counts, competing, k);
    return left <= k;
  };
  CGP_ASSIGN_OR_RETURN(auto result,
                       eliminate_regions(fleet, mirror, setup, charges, regions, competing, stop));
  // Every candidate's final interval and estimate, from each user's last estimate.
  std::vector<char> all(regions.size(), 1);
  count_regions(result, regions, all, counts, mean);
  TopRegionsResult out;
  out.certified = left <= k;
  std::vector<std::size_t> racing;
  for (std::size_t g = 0; g < regions.size(); ++g)
    if (competing[g]) racing.push_back(g);
  std::stable_sort(racing.begin(), racing.end(), [&](std::size_t a, std::size_t b) {
    return counts[a].estimate > counts[b].estimate;
  });
  racing.resize(std::min(k, racing.size()));
  out.top = std::move(racing);
  out.counts = std::move(counts);
  out.report = std::move(result.report);
  return out;
}

}  // namespace cgp::coordinator
