// The experiments of paper §7 over the coordinator: one row per (query, method, c, split, ρ,
// parameter), each the mean and quartiles over repetitions of the error metric and PrivSav.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/shard.hpp"
#include "cgp/experiments/backend.hpp"
#include "cgp/experiments/dataset.hpp"
#include "cgp/simulation/simulated_fleet.hpp"

namespace cgp::experiments {

struct Summary {
  double mean = 0, p25 = 0, median = 0, p75 = 0;
};
// Mean and linear-interpolated 25th/50th/75th percentiles; empty input gives zeros.
Summary summarize(std::vector<double> values);

struct Row {
  std::string query;   // range | kde | knn | multi-range | threshold
  std::string method;  // BM0 ...
  std::size_t c = 1;   // rounds (1 for BM)
  std::string split;   // even | doubling | none (BM)
  double rho = 0;      // per query (multi-range: the budget B)
  double param = 0;    // w | b | k | m | q
  std::size_t reps = 0;
  Summary error, privsav;
  double seconds = 0;  // wall time of all repetitions
  std::string noise;   // fast | exact (in-process, SimulationNoise) | device (--fleet)
  // Noisy values released over the repetitions (one Gaussian each); in-process only.
  std::optional<std::uint64_t> released;
  // Each repetition's metric and PrivSav, in order (cgp-sim --per-rep).
  std::vector<double> per_rep_error, per_rep_privsav;
  // Accuracy-first rows (query "accuracy"): the target and growth, the share of queries
  // certified (none for the fixed-ρ baseline), the ρ each user paid — mean and 95th percentile
  // over users, averaged over repetitions — and the rounds run.
  struct Accuracy {
    double target = 0, growth = 0;
    std::optional<double> certified;
    double rho_mean = 0, rho_p95 = 0, rounds = 0;
    // Top-regions rows: k, and the share of queries that returned the true top k.
    std::size_t k = 0;
    std::optional<double> correct;
  };
  std::optional<Accuracy> accuracy;
};

struct Common {
  std::vector<coordinator::Method> methods{coordinator::Method::BM0, coordinator::Method::BM1,
                                           coordinator::Method::PM0, coordinator::Method::PM1};
  std::vector<std::size_t> rounds{4};
  std::vector<privacy::SplitSchedule> splits{privacy::SplitSchedule::even};
  std::size_t reps = 20;
  double beta = 0.1;
  std::uint64_t seed = 1;
  unsigned threads = 0;
  bool shift = true;
  simulation::SimulationNoise noise = simulation::SimulationNoise::fast;  // in-process fleets
  std::vector<std::array<double, 2>> centres;  // --queries, in the data's metres
  // --fleet: run the experiments over a live coordinator instead of in-process; not owned.
  QueryBackend* fleet = nullptr;
  // Under mpirun: how the ranks reduce (not owned). A data set with Dataset::total set is then
  // this rank's slice; every rank runs the same experiment and gets the same rows.
  coordinator::ShardReducer* ranks = nullptr;
  // Called with each row of the common sweep as soon as it is finished (cgp-sim writes its
  // JSON then, so that an interrupted run keeps what it did).
  std::function<void(const Row&)> on_row;
};

// A progress bar with rate and ETA on stderr, shown only on a terminal and only once a run has
// taken more than a second.
class Progress {
 public:
  explicit Progress(std::size_t total);
  void step();
  void finish();

 private:
  std::size_t total_, done_ = 0;
  std::chrono::steady_clock::time_point start_;
  bool terminal_;
  bool shown_ = false;
};

Expected<std::vector<Row>> run_range(const Dataset& data, std::span<const double> rhos,
                                     std::span<const double> widths, const Common& common);
Expected<std::vector<Row>> run_kde(const Dataset& data, std::span<const double> rhos,
                                   std::span<const double> bandwidths, const Common& common);
// queries: query points (another data set, e.g. the IDX test file), or nullptr to draw them
// from `data` and exclude them from the candidates.
Expected<std::vector<Row>> run_knn(const Dataset& data, const Dataset* queries,
                                   std::span<const double> rhos, std::span<const std::size_t> ks,
                                   const Common& common);
// Alg. 3: m ranges per repetition with each user's budget B spread over them (in-process:
// AdaptiveBudget::fixed(B, m); over --fleet: the coordinator's own plan and budgets).
Expected<std::vector<Row>> run_multi_range(const Dataset& data, double budget,
                                           std::span<const std::size_t> ms, double width,
                                           const Common& common);
// Accuracy-first range counts (coordinator/accuracy_first.hpp): for each relative target and
// growth, `reps` squares of side `width`, each user's cap `cap`, three variants — AF (noise
// reduction on the running mean), AF-latest (the same schedule using the latest release only:
// seed 001 §7.1's "doubling without averaging") and PM1 (today's query at ρ = cap, c =
// max_rounds, even split: no certificate). In process, one rank.
struct AccuracySettings {
  std::vector<double> targets{0.05, 0.1, 0.25};
  std::vector<double> growths{1.25, 2};
  double cap = 1e-3;
  double width = 2000;
  double absolute = 0;  // or within this many users (KDE: this much density)
  std::size_t max_rounds = 16;
  // > 0: Gaussian KDE with this bandwidth at the query centres (kde_to_accuracy; rows
  // "accuracy-kde", error |F̂ − F|/F) instead of range counts.
  double bandwidth = 0;
};
Expected<std::vector<Row>> run_accuracy(const Dataset& data, const AccuracySettings& settings,
                                        const Common& common);

// Alg. 3 with accuracy-first queries (seed 001's Fig. 2, locally): per repetition m squares of
// side `width`, each user's budget B spread by AdaptiveBudget::fixed(B, m); AF certifies each
// query to `target` with its allocation as the cap (leaving the rest for later queries), PM1 is
// today's adaptive sequence. Rows: the share of queries certified (AF) and the share whose
// realised error is within the target. In process, one rank.
Expected<std::vector<Row>> run_multi_range_to_accuracy(const Dataset& data, double budget,
                                                       std::span<const std::size_t> ms,
                                                       double width, double target,
                                                       const AccuracySettings& schedule,
                                                       const Common& common);

// Top-k busiest cells (coordinator/top_regions.hpp): per repetition a grid of columns × rows
// cells of side `cell` centred on a query centre; the race (point releases over a geometric
// schedule, users and cells eliminated) against BM0 (everyone releases once with the whole cap,
// the k cells with the most estimated points). In process, one rank.
struct TopRegionsSettings {
  std::vector<std::size_t> ks{3};
  std::vector<double> growths{2};
  double cap = 1e-3;
  double cell = 1000;
  std::size_t columns = 5, rows = 5;
  std::size_t max_rounds = 16;
};
Expected<std::vector<Row>> run_top_regions(const Dataset& data, const TopRegionsSettings& settings,
                                           const Common& common);

// values: one per row of the curator's table; a row counts when its value ≤ `below`. Over
// --fleet the curator is a device of the coordinator that holds that count.
Expected<std::vector<Row>> run_threshold(std::span<const double> values, double below,
                                         std::span<const double> qs, std::span<const double> rhos,
                                         const Common& common);

}  // namespace cgp::experiments
