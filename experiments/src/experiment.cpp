#include "cgp/experiments/experiment.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>

#include "cgp/common/validate.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "cgp/simulation/simulated_fleet.hpp"
#include "experiment_support.hpp"
#include "sharded_truth.hpp"

namespace cgp::experiments {
namespace {

using coordinator::Method;

struct Variant {
  Method method;
  std::size_t c;
  privacy::SplitSchedule split;
};

std::vector<Variant> variants(const Common& common) {
  std::vector<Variant> out;
  for (Method m : common.methods) {
    if (!coordinator::eliminates(m)) {
      out.push_back({m, 1, privacy::SplitSchedule::even});
      continue;
    }
    for (std::size_t c : common.rounds)
      for (auto split : common.splits) out.push_back({m, c, split});
  }
  return out;
}

Row row_for(const std::string& query, const Variant& v, double rho, double param,
            std::size_t reps) {
  Row row;
  row.query = query;
  row.method = std::string(coordinator::method_name(v.method));
  row.c = v.c;
  row.split = coordinator::eliminates(v.method) ? std::string(privacy::split_schedule_name(v.split))
                                                : "none";
  row.rho = rho;
  row.param = param;
  row.reps = reps;
  return row;
}

coordinator::QueryOptions options_for(const Variant& v, const Common& common, std::string id) {
  coordinator::QueryOptions o;
  o.method = v.method;
  o.rounds = v.c;
  o.split = v.split;
  o.beta = common.beta;
  o.shift = common.shift;
  o.query_id = std::move(id);
  return o;
}

// The one sweep of every experiment: for each parameter value, each ρ (multi-range: the
// budget B) and each method variant, one row of `reps` repetitions. Each repetition starts
// from fresh budgets of ρ in-process (a live coordinator's devices keep what they spent);
// `trial_for(param)` prepares what the repetitions of one parameter share (centres, truths)
// and returns trial(rep, rho, options) → (error, PrivSav). A failed query stops the run.
template <class TrialFor>
Expected<std::vector<Row>> sweep(const char* query, std::span<const double> params,
                                 std::span<const double> rhos, const Common& common,
                                 QueryBackend& backend, TrialFor&& trial_for) {
  const auto vs = variants(common);
  // Each ρ becomes a device budget: one the device cannot have is the caller's error, named.
  for (double rho : rhos)
    if (auto config = DeviceConfig::cgp(rho); !config)
      return make_error(config.error().code, "rho",
                        "rho " + format_number(rho) + ": " + config.error().message);
  Progress progress(params.size() * rhos.size() * vs.size() * common.reps);
  std::vector<Row> rows;
  for (double param : params) {
    auto trial = trial_for(param);
    for (double rho : rhos) {
      for (const auto& v : vs) {
        Row row = row_for(query, v, rho, param, common.reps);
        row.noise = common.fleet ? "device" : std::string(simulation::noise_name(common.noise));
        const auto options = options_for(v, common, query);
        std::vector<double> errors, savings;
        const auto began = std::chrono::steady_clock::now();
        const auto released_before = backend.values_released();
        for (std::size_t rep = 0; rep < common.reps; ++rep) {
          backend.start_repetition(rep_seed(common, rep), rho);
          const auto outcome = trial(rep, rho, options);
          if (!outcome) {
            progress.finish();
            return outcome.error();
          }
          errors.push_back(outcome->first);
          savings.push_back(outcome->second);
          progress.step();
        }
        row.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        if (const auto released = backend.values_released(); released && released_before)
          row.released = *released - *released_before;
        row.per_rep_error = errors;
        row.per_rep_privsav = savings;
        row.error = summarize(std::move(errors));
        row.privsav = summarize(std::move(savings));
        rows.push_back(std::move(row));
        if (common.on_row) common.on_row(rows.back());
      }
    }
  }
  progress.finish();
  return rows;
}

using Outcome = Expected<std::pair<double, double>>;

class InProcessBackend final : public QueryBackend {
 public:
  InProcessBackend(const Dataset& data, double capacity, const Common& common)
      : fleet_(fleet_for(data, capacity, common)), shard_(shard_of(data, common.ranks)) {}
  std::size_t size() const override { return fleet_.size(); }
  std::optional<std::uint64_t> values_released() const override {
    return coordinator::sum_over_shards(shard_, fleet_.values_released());
  }
  void start_repetition(std::uint64_t seed, double budget) override {
    if (budget != fleet_.initial_budget()) {
      fleet_.reset(seed, *DeviceConfig::cgp(budget));
    } else {
      fleet_.reset(seed);
    }
    mirror_.emplace(fleet_.size(), fleet_.initial_budget());
  }
  Expected<coordinator::CountResult> range_count(const geometry::Region& range,
                                                 const coordinator::UserCharges& charges,
                                                 const coordinator::QueryOptions& o) override {
    return coordinator::range_count(fleet_, *mirror_, range, charges, sharded(o));
  }
  Expected<coordinator::KdeResult> kde(std::span<const double> p, double bandwidth,
                                       const coordinator::UserCharges& charges,
                                       const coordinator::QueryOptions& o) override {
    return coordinator::kde(fleet_, *mirror_, p, bandwidth, charges, sharded(o));
  }
  Expected<coordinator::KnnResult> knn(std::span<const double> p, std::size_t k,
                                       const coordinator::UserCharges& charges,
                                       const coordinator::QueryOptions& o) override {
    return coordinator::knn(fleet_, *mirror_, p, k, charges, sharded(o));
  }
  Expected<std::vector<coordinator::CountResult>> adaptive_range_counts(
      std::span<const geometry::Region> ranges, double budget,
      const coordinator::QueryOptions& o) override {
    CGP_ASSIGN_OR_RETURN(const auto plan,
                         coordinator::AdaptiveBudget::fixed(budget, ranges.size()));
    return coordinator::adaptive_range_counts(fleet_, *mirror_, plan, ranges, sharded(o));
  }
  Expected<coordinator::ThresholdResult> threshold(double q, double population,
                                                   coordinator::Charge cap,
                                                   const coordinator::QueryOptions& o) override {
    return coordinator::threshold(fleet_, *mirror_, 0, q, population, cap, o);
  }

 private:
  coordinator::QueryOptions sharded(coordinator::QueryOptions o) const {
    o.shard = shard_;
    return o;
  }
  simulation::SimulatedFleet fleet_;
  coordinator::Shard shard_;
  std::optional<coordinator::BudgetMirror> mirror_;
};

// The backend of an experiment: --fleet, or the simulated fleet over `data` with room for
// budgets up to `capacity`.
struct Backend {
  std::unique_ptr<QueryBackend> owned;
  QueryBackend* use;
  Backend(const Dataset& data, double capacity, const Common& common)
      : owned(common.fleet ? nullptr : in_process_backend(data, capacity, common)),
        use(common.fleet ? common.fleet : owned.get()) {}
  QueryBackend& operator*() const { return *use; }
  QueryBackend* operator->() const { return use; }
};

double largest(std::span<const double> values) {
  return *std::max_element(values.begin(), values.end());
}

}  // namespace

std::unique_ptr<QueryBackend> in_process_backend(const Dataset& data, double capacity,
                                                 const Common& common) {
  return std::make_unique<InProcessBackend>(data, capacity, common);
}

Summary summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const auto i = static_cast<std::size_t>(pos);
    const double frac = pos - static_cast<double>(i);
    return i + 1 < values.size() ? values[i] * (1 - frac) + values[i + 1] * frac : values[i];
  };
  s.p25 = quantile(0.25);
  s.median = quantile(0.5);
  s.p75 = quantile(0.75);
  return s;
}

Progress::Progress(std::size_t total)
    : total_(total), start_(std::chrono::steady_clock::now()), terminal_(isatty(2) != 0) {}

void Progress::step() {
  ++done_;
  if (!terminal_) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (elapsed < 1.0 && !shown_) return;
  shown_ = true;
  const double rate = static_cast<double>(done_) / elapsed;
  const double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0;
  const int width = 30;
  const int filled =
      static_cast<int>(width * static_cast<double>(done_) / static_cast<double>(total_));
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu  %.2f runs/s  ETA %.0f s ", filled,
               "##############################", width - filled, "", done_, total_, rate, eta);
  std::fflush(stderr);
}

void Progress::finish() {
  if (shown_) std::fprintf(stderr, "\n");
}

namespace {

// `count` centres of squares of side `width` that hold a point (centres_for), and each square's
// true count: the count that accepted a centre is kept rather than computed again.
struct CountedCentres {
  std::vector<std::array<double, 2>> centres;
  std::vector<double> counts;
};
CountedCentres counted_centres(const Dataset& data, const coordinator::Shard& shard,
                               std::size_t count, const Common& common, double width) {
  std::vector<std::pair<std::array<double, 2>, std::size_t>> accepted;
  CountedCentres out;
  out.centres = centres_for(data, count, common, [&](const std::array<double, 2>& c) {
    const std::size_t inside = global_count(data, shard, square_around(c, width));
    if (inside > 0) accepted.emplace_back(c, inside);
    return inside > 0;
  });
  // Accepted centres come in order; a centre given by the caller (Common::centres), or one
  // drawn 1,000 times without a point, is counted here.
  std::size_t next = 0;
  for (const auto& c : out.centres) {
    if (next < accepted.size() && accepted[next].first == c)
      out.counts.push_back(static_cast<double>(accepted[next++].second));
    else
      out.counts.push_back(static_cast<double>(global_count(data, shard, square_around(c, width))));
  }
  return out;
}

}  // namespace

Expected<std::vector<Row>> run_range(const Dataset& data, std::span<const double> rhos,
                                     std::span<const double> widths, const Common& common) {
  Backend backend(data, largest(rhos), common);
  const auto shard = shard_of(data, common.ranks);
  return sweep("range", widths, rhos, common, *backend, [&](double w) {
    // CountErr divides by the true count: drawn ranges that hold no point are redrawn.
    auto [centres, truth] = counted_centres(data, shard, common.reps, common, w);
    std::vector<geometry::Region> ranges;
    for (const auto& c : centres) ranges.push_back(square_around(c, w));
    return [&backend, &shard, ranges = std::move(ranges), truth = std::move(truth)](
               std::size_t rep, double rho, const coordinator::QueryOptions& o) -> Outcome {
      CGP_ASSIGN_OR_RETURN(
          const auto result,
          backend->range_count(ranges[rep],
                               coordinator::UserCharges::everyone(coordinator::Charge{rho}), o));
      return std::pair{simulation::count_error(result.estimate, truth[rep]),
                       global_saving(shard, result.report.charged, rho)};
    };
  });
}

Expected<std::vector<Row>> run_kde(const Dataset& data, std::span<const double> rhos,
                                   std::span<const double> bandwidths, const Common& common) {
  Backend backend(data, largest(rhos), common);
  const auto shard = shard_of(data, common.ranks);
  const auto centres = centres_for(data, common.reps, common);
  return sweep("kde", bandwidths, rhos, common, *backend, [&](double b) {
    std::vector<double> truth;
    for (const auto& c : centres) truth.push_back(global_kde(data, shard, c, b));
    return [&backend, &centres, &shard, b, truth = std::move(truth)](
               std::size_t rep, double rho, const coordinator::QueryOptions& o) -> Outcome {
      CGP_ASSIGN_OR_RETURN(
          const auto result,
          backend->kde(centres[rep], b,
                       coordinator::UserCharges::everyone(coordinator::Charge{rho}), o));
      return std::pair{simulation::l1_error(result.estimate, truth[rep]),
                       global_saving(shard, result.report.charged, rho)};
    };
  });
}

Expected<std::vector<Row>> run_knn(const Dataset& data, const Dataset* queries,
                                   std::span<const double> rhos, std::span<const std::size_t> ks,
                                   const Common& common) {
  if (queries && queries->dimension != data.dimension)
    return make_error(ErrorCode::dimension_mismatch, "queries",
                      "query points have dimension " + std::to_string(queries->dimension) +
                          ", the data " + std::to_string(data.dimension));
  Backend backend(data, largest(rhos), common);
  const auto shard = shard_of(data, common.ranks);
  simulation::KnnOracle oracle(data.points, data.dimension);
  // Query points: from the query set (whole on every rank), or users of the data excluded from
  // the candidates (each rank lists its own users but the query's, by local id).
  std::mt19937_64 rng(common.seed ^ 0x2545f4914f6cdd1dULL);
  std::vector<std::vector<double>> points;
  std::vector<std::vector<coordinator::UserId>> candidates(common.reps);
  for (std::size_t rep = 0; rep < common.reps; ++rep) {
    if (queries) {
      const std::size_t i = std::uniform_int_distribution<std::size_t>(0, queries->size() - 1)(rng);
      points.emplace_back(
          queries->points.begin() + static_cast<std::ptrdiff_t>(i * queries->dimension),
          queries->points.begin() + static_cast<std::ptrdiff_t>((i + 1) * queries->dimension));
      continue;
    }
    const std::size_t i = std::uniform_int_distribution<std::size_t>(0, data.users() - 1)(rng);
    points.push_back(global_row(data, shard, i));
    // Every local user but the query's: each written, and kept unless it is the query's (no
    // branch per user).
    std::vector<coordinator::UserId>& listed = candidates[rep];
    listed.resize(data.size());
    std::size_t kept = 0;
    for (std::size_t u = 0; u < data.size(); ++u) {
      listed[kept] = static_cast<coordinator::UserId>(u);
      kept += coordinator::global_id(shard, static_cast<coordinator::UserId>(u)) != i;
    }
    listed.resize(kept);
  }
  const std::vector<double> params(ks.begin(), ks.end());
  return sweep("knn", params, rhos, common, *backend, [&](double param) {
    const auto k = static_cast<std::size_t>(param);
    std::vector<double> truth;
    for (std::size_t rep = 0; rep < common.reps; ++rep)
      truth.push_back(
          global_nearest_distance_sum(data, shard, oracle, points[rep], k, candidates[rep]));
    return [&, k, truth = std::move(truth)](std::size_t rep, double rho,
                                            const coordinator::QueryOptions& o) -> Outcome {
      const coordinator::Charge cap{rho};
      const auto charges = queries ? coordinator::UserCharges::everyone(cap)
                                   : coordinator::UserCharges::uniform(cap, candidates[rep]);
      CGP_ASSIGN_OR_RETURN(const auto result, backend->knn(points[rep], k, charges, o));
      const double found = global_sum_of_distances(data, shard, points[rep], result.neighbours);
      return std::pair{simulation::distance_error(found, truth[rep]),
                       global_saving(shard, result.report.charged, rho, candidates[rep])};
    };
  });
}

Expected<std::vector<Row>> run_multi_range(const Dataset& data, double budget,
                                           std::span<const std::size_t> ms, double width,
                                           const Common& common) {
  Backend backend(data, budget, common);
  const auto shard = shard_of(data, common.ranks);
  const std::vector<double> params(ms.begin(), ms.end());
  const double budgets[] = {budget};
  return sweep("multi-range", params, budgets, common, *backend, [&](double param) {
    const auto m = static_cast<std::size_t>(param);
    // m ranges per repetition.
    auto [centres, truth] = counted_centres(data, shard, m * common.reps, common, width);
    return [&, m, centres = std::move(centres), truth = std::move(truth)](
               std::size_t rep, double b, const coordinator::QueryOptions& o) -> Outcome {
      std::vector<geometry::Region> ranges;
      for (std::size_t l = 0; l < m; ++l)
        ranges.push_back(square_around(centres[rep * m + l], width));
      CGP_ASSIGN_OR_RETURN(const auto results, backend->adaptive_range_counts(ranges, b, o));
      double error = 0, charged = 0;
      for (std::size_t l = 0; l < m; ++l) {
        error += simulation::count_error(results[l].estimate, truth[rep * m + l]) /
                 static_cast<double>(m);
        charged += global_total(shard, results[l].report.charged);
      }
      // PrivSav over the m queries: the share of the users' budgets left.
      const double users = static_cast<double>(data.users());
      return std::pair{error, 1 - charged / (b * users)};
    };
  });
}

Expected<std::vector<Row>> run_threshold(std::span<const double> values, double below,
                                         std::span<const double> qs, std::span<const double> rhos,
                                         const Common& common) {
  double count = 0;
  for (double v : values) count += v <= below ? 1 : 0;
  const double population = static_cast<double>(values.size());
  // The curator is one device whose 1-D component is the count (sensitivity 1).
  Dataset curator;
  curator.dimension = 1;
  curator.points = {count};
  Common only_distance = common;
  only_distance.methods.clear();
  for (Method m : common.methods)
    if (m == Method::BM1 || m == Method::PM1) only_distance.methods.push_back(m);
  Backend backend(curator, largest(rhos), common);
  return sweep("threshold", qs, rhos, only_distance, *backend, [&](double q) {
    const bool truth = count < q * population;
    return [&, q, truth](std::size_t, double rho, const coordinator::QueryOptions& o) -> Outcome {
      CGP_ASSIGN_OR_RETURN(const auto result,
                           backend->threshold(q, population, coordinator::Charge{rho}, o));
      return std::pair{result.below == truth ? 0.0 : 1.0,
                       simulation::privacy_saving(result.report.charged, rho)};
    };
  });
}

}  // namespace cgp::experiments
