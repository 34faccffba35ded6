#include <algorithm>
#include <chrono>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/coordinator/top_regions.hpp"
#include "cgp/experiments/experiment.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "experiment_support.hpp"

namespace cgp::experiments {
namespace {

// The k indices with the largest values, as a sorted set (ties by index).
std::vector<std::size_t> top_set(const std::vector<double>& values, std::size_t k) {
  std::vector<std::size_t> order(values.size());
  for (std::size_t g = 0; g < order.size(); ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return values[a] > values[b]; });
  order.resize(std::min(k, order.size()));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

Expected<std::vector<Row>> run_top_regions(const Dataset& data, const TopRegionsSettings& settings,
                                           const Common& common) {
  if (common.fleet)
    return make_error(ErrorCode::invalid_argument, "fleet",
                      "top-regions runs in process; over a coordinator use cgp-analyst "
                      "top-regions");
  if (common.ranks && data.total != 0)
    return make_error(ErrorCode::invalid_argument, "mpirun",
                      "top-regions runs in one process (not under mpirun yet)");
  CGP_RETURN_IF_ERROR(require_finite_positive("cap", settings.cap));
  CGP_RETURN_IF_ERROR(require_finite_positive("cell", settings.cell));
  const std::size_t cells = settings.columns * settings.rows;
  for (std::size_t k : settings.ks)
    if (k == 0 || k > cells)
      return make_error(
          ErrorCode::out_of_range, "k",
          "--k values must be in [1, " + std::to_string(cells) + "], got " + std::to_string(k));
  for (double g : settings.growths)
    if (!(std::isfinite(g) && g > 1))
      return make_error(ErrorCode::out_of_range, "growth",
                        "--growth values must be > 1, got " + format_number(g));

  auto fleet = fleet_for(data, settings.cap, common);
  const std::size_t n = fleet.size();
  const auto centres = centres_for(data, common.reps, common);
  std::vector<std::vector<geometry::Region>> grids;
  std::vector<std::vector<double>> truth;
  for (const auto& c : centres) {
    const double x0 = c[0] - settings.cell * static_cast<double>(settings.columns) / 2;
    const double y0 = c[1] - settings.cell * static_cast<double>(settings.rows) / 2;
    CGP_ASSIGN_OR_RETURN(auto grid, coordinator::grid_regions(x0, y0, settings.cell,
                                                              settings.columns, settings.rows));
    std::vector<double> counts;
    for (const auto& cell : grid)
      counts.push_back(static_cast<double>(simulation::exact_count(data.points, 2, cell)));
    grids.push_back(std::move(grid));
    truth.push_back(std::move(counts));
  }

  std::vector<Row> rows;
  Progress progress(settings.ks.size() * settings.growths.size() * 2 * common.reps);
  for (std::size_t k : settings.ks)
    for (double growth : settings.growths)
      for (bool race : {true, false}) {
        Row row;
        row.query = "top-regions";
        row.method = race ? "race" : "BM0";
        row.c = race ? settings.max_rounds : 1;
        row.split = race ? "geometric" : "none";
        row.rho = settings.cap;
        row.param = settings.cell;
        row.reps = common.reps;
        row.noise = std::string(simulation::noise_name(common.noise));
        Row::Accuracy stats;
        stats.k = k;
        stats.growth = growth;
        double certified = 0, correct = 0;
        std::vector<double> savings, misses;
        const auto began = std::chrono::steady_clock::now();
        const auto released_before = fleet.values_released();
        for (std::size_t rep = 0; rep < common.reps; ++rep) {
          fleet.reset(rep_seed(common, rep));
          coordinator::BudgetMirror mirror(n, fleet.initial_budget());
          const auto charges =
              coordinator::UserCharges::everyone(coordinator::Charge{settings.cap});
          std::vector<std::size_t> found;
          coordinator::QueryReport report;
          if (race) {
            coordinator::AccuracyFirstOptions o;
            o.method = coordinator::Method::PM0;
            o.max_rounds = settings.max_rounds;
            o.growth = growth;
            o.beta = common.beta;
            o.query_id = "top-regions";
            CGP_ASSIGN_OR_RETURN(
                auto result, coordinator::top_regions(fleet, mirror, grids[rep], k, charges, o));
            found = result.top;
            certified += result.certified ? 1 : 0;
            report = std::move(result.report);
          } else {
            // BM0: every user releases its point once with the whole cap; each cell counts the
            // released points inside it (one release serves every cell).
            coordinator::EliminationSetup setup;
            setup.query_id = "top-regions";
            setup.triple = coordinator::Triple::point;
            setup.rounds = 1;
            CGP_ASSIGN_OR_RETURN(auto once,
                                 coordinator::release_once(fleet, mirror, setup, charges));
            std::vector<double> counts(grids[rep].size(), 0.0), mean(2);
            for (coordinator::UserId u : once.remaining) {
              once.estimates.mean(u, mean.data());
              for (std::size_t g = 0; g < grids[rep].size(); ++g)
                counts[g] += geometry::signed_distance(grids[rep][g], mean) < 0 ? 1 : 0;
            }
            found = top_set(counts, k);
            report = std::move(once.report);
          }
          std::sort(found.begin(), found.end());
          const bool right = found == top_set(truth[rep], k);
          correct += right ? 1 : 0;
          misses.push_back(right ? 0.0 : 1.0);
          savings.push_back(simulation::privacy_saving(report.charged, settings.cap));
          double sum = 0;
          for (coordinator::Charge c : report.charged) sum += c.value();
          stats.rho_mean += sum / static_cast<double>(n) / static_cast<double>(common.reps);
          stats.rho_p95 += quantile(coordinator::charge_values(report.charged), 0.95) /
                           static_cast<double>(common.reps);
          stats.rounds +=
              static_cast<double>(report.rounds_used) / static_cast<double>(common.reps);
          progress.step();
        }
        const double reps = static_cast<double>(common.reps);
        if (race) stats.certified = certified / reps;
        stats.correct = correct / reps;
        row.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        row.released = fleet.values_released() - released_before;
        row.error = summarize(std::move(misses));  // the wrong-set rate
        row.privsav = summarize(std::move(savings));
        row.accuracy = stats;
        rows.push_back(std::move(row));
      }
  progress.finish();
  return rows;
}

}  // namespace cgp::experiments
