#include <algorithm>
#include <chrono>

#include "cgp/common/validate.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/experiments/experiment.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "experiment_support.hpp"

namespace cgp::experiments {
namespace {

struct Trial {
  double estimate = 0;
  std::optional<bool> certified;
  coordinator::QueryReport report;
};

}  // namespace

Expected<std::vector<Row>> run_accuracy(const Dataset& data, const AccuracySettings& settings,
                                        const Common& common) {
  if (common.fleet)
    return make_error(ErrorCode::invalid_argument, "fleet",
                      "accuracy runs in process; over --fleet it needs the Analyst API's "
                      "accuracy-first query (not yet)");
  if (common.ranks && data.total != 0)
    return make_error(ErrorCode::invalid_argument, "mpirun",
                      "accuracy runs in one process (not under mpirun yet)");
  for (double t : settings.targets)
    if (!(t > 0 && t < 1))
      return make_error(ErrorCode::out_of_range, "target",
                        "--target values must be in (0, 1), got " + format_number(t));
  for (double g : settings.growths)
    if (!(std::isfinite(g) && g > 1))
      return make_error(ErrorCode::out_of_range, "growth",
                        "--growth values must be > 1, got " + format_number(g));
  CGP_RETURN_IF_ERROR(require_finite_positive("cap", settings.cap));
  CGP_RETURN_IF_ERROR(require_finite_positive("w", settings.width));
  const bool density = settings.bandwidth > 0;
  if (!(std::isfinite(settings.bandwidth) && settings.bandwidth >= 0))
    return make_error(ErrorCode::out_of_range, "b",
                      "--b must be finite and > 0, got " + format_number(settings.bandwidth));

  // The device budget is the cap: each variant's first, smallest round is answered.
  auto fleet = fleet_for(data, settings.cap, common);
  const std::size_t n = fleet.size();
  const auto centres = centres_for(data, common.reps, common, [&](const std::array<double, 2>& c) {
    return density || simulation::exact_count(data.points, 2, square_around(c, settings.width)) > 0;
  });
  std::vector<geometry::Region> ranges;
  std::vector<double> truth;
  for (const auto& c : centres) {
    ranges.push_back(square_around(c, settings.width));
    truth.push_back(
        density ? simulation::exact_kde(data.points, 2, c, settings.bandwidth)
                : static_cast<double>(simulation::exact_count(data.points, 2, ranges.back())));
  }

  enum class Variant { af, af_latest, pm1 };
  std::vector<Row> rows;
  Progress progress(settings.targets.size() * settings.growths.size() * 3 * common.reps);
  for (double target : settings.targets)
    for (double growth : settings.growths)
      for (Variant variant : {Variant::af, Variant::af_latest, Variant::pm1}) {
        Row row;
        row.query = density ? "accuracy-kde" : "accuracy";
        row.method = variant == Variant::af          ? "AF"
                     : variant == Variant::af_latest ? "AF-latest"
                                                     : "PM1";
        row.c = settings.max_rounds;
        row.split = variant == Variant::pm1 ? "even" : "geometric";
        row.rho = settings.cap;
        row.param = density ? settings.bandwidth : settings.width;
        row.reps = common.reps;
        row.noise = std::string(simulation::noise_name(common.noise));
        Row::Accuracy stats;
        stats.target = target;
        stats.growth = growth;
        std::vector<double> errors, savings;
        double certified = 0, within = 0;
        const auto began = std::chrono::steady_clock::now();
        const auto released_before = fleet.values_released();
        for (std::size_t rep = 0; rep < common.reps; ++rep) {
          fleet.reset(rep_seed(common, rep));
          coordinator::BudgetMirror mirror(n, fleet.initial_budget());
          const auto charges =
              coordinator::UserCharges::everyone(coordinator::Charge{settings.cap});
          Trial trial;
          if (variant == Variant::pm1) {
            coordinator::QueryOptions o;
            o.method = coordinator::Method::PM1;
            o.rounds = settings.max_rounds;
            o.beta = common.beta;
            o.shift = common.shift;
            o.query_id = "accuracy";
            if (density) {
              CGP_ASSIGN_OR_RETURN(auto result, coordinator::kde(fleet, mirror, centres[rep],
                                                                 settings.bandwidth, charges, o));
              trial.estimate = result.estimate;
              trial.report = std::move(result.report);
            } else {
              CGP_ASSIGN_OR_RETURN(
                  auto result, coordinator::range_count(fleet, mirror, ranges[rep], charges, o));
              trial.estimate = result.estimate;
              trial.report = std::move(result.report);
            }
          } else {
            coordinator::AccuracyFirstOptions o;
            o.max_rounds = settings.max_rounds;
            o.growth = growth;
            o.beta = common.beta;
            o.shift = common.shift;
            o.latest_release_only = variant == Variant::af_latest;
            o.query_id = "accuracy";
            const coordinator::AccuracyTarget goal{target, settings.absolute};
            auto result = density
                              ? coordinator::kde_to_accuracy(fleet, mirror, centres[rep],
                                                             settings.bandwidth, charges, goal, o)
                              : coordinator::range_count_to_accuracy(fleet, mirror, ranges[rep],
                                                                     charges, goal, o);
            if (!result) return result.error();
            trial.estimate = result->estimate;
            trial.certified = result->certified;
            trial.report = std::move(result->report);
          }
          errors.push_back(simulation::count_error(trial.estimate, truth[rep]));
          within += errors.back() <= std::max(target, settings.absolute / truth[rep]) ? 1 : 0;
          savings.push_back(simulation::privacy_saving(trial.report.charged, settings.cap));
          double sum = 0;
          for (coordinator::Charge c : trial.report.charged) sum += c.value();
          stats.rho_mean += sum / static_cast<double>(n) / static_cast<double>(common.reps);
          stats.rho_p95 += quantile(coordinator::charge_values(trial.report.charged), 0.95) /
                           static_cast<double>(common.reps);
          stats.rounds +=
              static_cast<double>(trial.report.rounds_used) / static_cast<double>(common.reps);
          if (trial.certified && *trial.certified) ++certified;
          progress.step();
        }
        if (variant != Variant::pm1) stats.certified = certified / static_cast<double>(common.reps);
        stats.correct = within / static_cast<double>(common.reps);
        row.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        row.released = fleet.values_released() - released_before;
        row.error = summarize(std::move(errors));
        row.privsav = summarize(std::move(savings));
        row.accuracy = stats;
        rows.push_back(std::move(row));
      }
  progress.finish();
  return rows;
}

Expected<std::vector<Row>> run_multi_range_to_accuracy(const Dataset& data, double budget,
                                                       std::span<const std::size_t> ms,
                                                       double width, double target,
                                                       const AccuracySettings& schedule,
                                                       const Common& common) {
  if (common.fleet || (common.ranks && data.total != 0))
    return make_error(ErrorCode::invalid_argument, "target",
                      "multi-range --target runs in one process (not over --fleet or mpirun yet)");
  if (!(target > 0 && target < 1))
    return make_error(ErrorCode::out_of_range, "target",
                      "--target must be in (0, 1), got " + format_number(target));
  const double growth = schedule.growths.empty() ? 2.0 : schedule.growths.back();
  auto fleet = fleet_for(data, budget, common);
  const std::size_t n = fleet.size();
  std::vector<Row> rows;
  for (std::size_t m : ms) {
    const auto centres =
        centres_for(data, m * common.reps, common, [&](const std::array<double, 2>& c) {
          return simulation::exact_count(data.points, 2, square_around(c, width)) > 0;
        });
    CGP_ASSIGN_OR_RETURN(const auto plan, coordinator::AdaptiveBudget::fixed(budget, m));
    for (bool accuracy_first : {true, false}) {
      Row row;
      row.query = "multi-range";
      row.method = accuracy_first ? "AF" : "PM1";
      row.c = schedule.max_rounds;
      row.split = accuracy_first ? "geometric" : "even";
      row.rho = budget;
      row.param = static_cast<double>(m);
      row.reps = common.reps;
      row.noise = std::string(simulation::noise_name(common.noise));
      Row::Accuracy stats;
      stats.target = target;
      stats.growth = growth;
      double certified = 0, within = 0, rounds = 0;
      std::vector<double> errors, savings;
      const auto began = std::chrono::steady_clock::now();
      const auto released_before = fleet.values_released();
      for (std::size_t rep = 0; rep < common.reps; ++rep) {
        fleet.reset(rep_seed(common, rep));
        coordinator::BudgetMirror mirror(n, fleet.initial_budget());
        std::vector<geometry::Region> ranges;
        std::vector<double> truth;
        for (std::size_t l = 0; l < m; ++l) {
          ranges.push_back(square_around(centres[rep * m + l], width));
          truth.push_back(
              static_cast<double>(simulation::exact_count(data.points, 2, ranges.back())));
        }
        std::vector<double> estimates;
        std::vector<coordinator::Charge> charged(n);
        if (accuracy_first) {
          coordinator::AccuracyFirstOptions o;
          o.max_rounds = schedule.max_rounds;
          o.growth = growth;
          o.beta = common.beta;
          o.shift = common.shift;
          o.query_id = "multi-range";
          CGP_ASSIGN_OR_RETURN(const auto results, coordinator::adaptive_range_counts_to_accuracy(
                                                       fleet, mirror, plan, ranges,
                                                       coordinator::AccuracyTarget{target, 0}, o));
          for (const auto& r : results) {
            estimates.push_back(r.estimate);
            certified += r.certified ? 1 : 0;
            rounds += static_cast<double>(r.report.rounds_used);
            for (std::size_t u = 0; u < n; ++u) charged[u] += r.report.charged[u];
          }
        } else {
          coordinator::QueryOptions o;
          o.method = coordinator::Method::PM1;
          o.rounds = schedule.max_rounds;
          o.beta = common.beta;
          o.shift = common.shift;
          o.query_id = "multi-range";
          CGP_ASSIGN_OR_RETURN(const auto results,
                               coordinator::adaptive_range_counts(fleet, mirror, plan, ranges, o));
          for (const auto& r : results) {
            estimates.push_back(r.estimate);
            rounds += static_cast<double>(r.report.rounds_used);
            for (std::size_t u = 0; u < n; ++u) charged[u] += r.report.charged[u];
          }
        }
        double error = 0;
        for (std::size_t l = 0; l < m; ++l) {
          const double e = simulation::count_error(estimates[l], truth[l]);
          error += e / static_cast<double>(m);
          within += e <= target ? 1 : 0;
        }
        errors.push_back(error);
        savings.push_back(simulation::privacy_saving(charged, budget));
        double sum = 0;
        for (coordinator::Charge c : charged) sum += c.value();
        stats.rho_mean += sum / static_cast<double>(n) / static_cast<double>(common.reps);
        stats.rho_p95 +=
            quantile(coordinator::charge_values(charged), 0.95) / static_cast<double>(common.reps);
      }
      const double queries = static_cast<double>(m * common.reps);
      if (accuracy_first) stats.certified = certified / queries;
      stats.correct = within / queries;
      stats.rounds = rounds / queries;
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      row.released = fleet.values_released() - released_before;
      row.error = summarize(std::move(errors));
      row.privsav = summarize(std::move(savings));
      row.accuracy = stats;
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace cgp::experiments
