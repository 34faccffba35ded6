// cgp-demo: the README's main job.
//
//   cgp-demo [--rho R] [--c C]                       range, KDE and kNN over a simulated city
//   cgp-demo --arithmetic [--rho R] [--delta D] [--lambda METRES] [--c C]
//                                                     what one user's budget means
//
// Defaults: ρ = 1e-4 per m² (noise scale 1/√(2ρ) ≈ 71 m per release), δ = 1e-6, Λ = 100 m,
// c = 8 rounds.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cgp/common/device_config.hpp"
#include "cgp/common/geometry/projection.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/geometry/threshold_shift.hpp"
#include "cgp/common/privacy/approx_gp_filter.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/confidence.hpp"
#include "cgp/common/privacy/conversions.hpp"
#include "cgp/common/privacy/gaussian_profile.hpp"
#include "cgp/common/version.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/valid_triple.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "cgp/simulation/simulated_fleet.hpp"
#include "cgp/simulation/synthetic_city.hpp"

namespace {

struct Options {
  double rho = 1e-4;
  double delta = 1e-6;
  double lambda = 100;
  unsigned long rounds = 8;
  bool arithmetic = false;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "cgp-demo: %s\nusage: cgp-demo [--rho R] [--delta D] [--lambda M] [--c C]\n",
               message.c_str());
  return 2;
}

bool parse_double(const char* text, double& out) {
  char* end = nullptr;
  out = std::strtod(text, &end);
  return end != text && *end == '\0';
}

template <class T>
T or_exit(cgp::Expected<T> result) {
  if (!result) {
    std::fprintf(stderr, "cgp-demo: %s\n", result.error().to_string().c_str());
    std::exit(2);
  }
  return std::move(result).value();
}

}  // namespace

int arithmetic_demo(const Options& options);
int simulation_demo(const Options& options);

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: cgp-demo [--arithmetic] [--rho R] [--delta D] [--lambda METRES] [--c C]\n"
          "  default: range, KDE and kNN queries over a simulated city, every method\n"
          "  --arithmetic: what one user's budget means (Lemma 3.2, eq. (10), splits)\n");
      return 0;
    }
    if (flag == "--version") {
      std::printf("%s\n", std::string(cgp::version_string()).c_str());
      return 0;
    }
    if (flag == "--arithmetic") {
      options.arithmetic = true;
      continue;
    }
    if (i + 1 >= argc) return usage_error(flag + " needs a value");
    const char* value = argv[++i];
    double number = 0;
    if (!parse_double(value, number)) return usage_error(flag + " must be a number, got " + value);
    if (flag == "--rho")
      options.rho = number;
    else if (flag == "--delta")
      options.delta = number;
    else if (flag == "--lambda")
      options.lambda = number;
    else if (flag == "--c") {
      if (!(number >= 1 && number <= 1e6) || std::floor(number) != number)
        return usage_error("--c must be a whole number >= 1, got " + std::string(value));
      options.rounds = static_cast<unsigned long>(number);
    } else {
      return usage_error("unknown option " + flag);
    }
  }
  return options.arithmetic ? arithmetic_demo(options) : simulation_demo(options);
}

int arithmetic_demo(const Options& options) {
  using namespace cgp;
  const double rho = options.rho, delta = options.delta, lambda = options.lambda;

  std::printf("cgpkit privacy arithmetic — one user's budget\n\n");
  std::printf(
      "CGP budget rho = %g per m^2; one full release has noise scale 1/sqrt(2 rho) = "
      "%.1f m\n\n",
      rho, 1 / std::sqrt(2 * rho));

  auto closed = or_exit(privacy::gp_epsilon_from_cgp_closed_form(rho, delta, lambda));
  auto minimised = or_exit(privacy::gp_epsilon_from_cgp(rho, delta, lambda));
  auto profile = or_exit(privacy::gp_epsilon_from_gaussian_budget(rho, delta, lambda));
  std::printf("As (eps, delta = %g, Lambda = %g m)-GP, eps per metre:\n", delta, lambda);
  std::printf("  Lemma 3.2, closed form          %.6g\n", closed);
  std::printf("  Lemma 3.2, minimised over s     %.6g  (s = %.4g)\n", minimised.epsilon,
              minimised.s);
  std::printf("  exact Gaussian profile (GDP)    %.6g\n", profile);
  std::printf("  => two places %g m apart: output odds change by at most e^%.3g, plus delta\n\n",
              lambda, profile * lambda);

  double eps_budget = profile;
  auto capacity = or_exit(privacy::approx_gp_capacity(eps_budget, delta, lambda));
  std::printf(
      "Approximate-GP filter, eq. (10), with budget eps = %.6g: lets through total rho "
      "<= %.6g (%.1f%% of the CGP budget it came from)\n\n",
      eps_budget, capacity, 100 * capacity / rho);

  auto even = or_exit(privacy::split_budget(rho, options.rounds, privacy::SplitSchedule::even));
  auto doubling =
      or_exit(privacy::split_budget(rho, options.rounds, privacy::SplitSchedule::doubling));
  std::printf(
      "Split over c = %lu rounds (round: even | doubling, noise scale of the running "
      "average | 95%% radius of a distance estimate)\n",
      options.rounds);
  double even_total = 0, doubling_total = 0;
  for (std::size_t j = 0; j < even.size(); ++j) {
    even_total += even[j];
    doubling_total += doubling[j];
    if (even.size() > 10 && j >= 4 && j + 4 < even.size()) {
      if (j == 4) std::printf("  ...\n");
      continue;
    }
    double radius = or_exit(coordinator::confidence_radius(1, 0.05, doubling_total));
    std::printf("  %3zu: %.4g | %.4g   sigma %.1f m | +-%.1f m\n", j + 1, even[j], doubling[j],
                1 / std::sqrt(2 * doubling_total), radius);
  }
  std::printf("  sums: %.17g | %.17g (never above rho = %.17g)\n\n", even_total, doubling_total,
              rho);

  std::printf("lambda(d, beta = 0.05): d=1 %.4f  d=2 %.4f  d=784 %.4f\n\n",
              or_exit(privacy::gaussian_norm_bound(1, 0.05)),
              or_exit(privacy::gaussian_norm_bound(2, 0.05)),
              or_exit(privacy::gaussian_norm_bound(784, 0.05)));

  // Geometry: a 1 km square around Times Square, in local metres.
  auto projection = or_exit(geometry::LonLatProjection::create(
      geometry::ProjectionKind::local_equidistant, -73.9855, 40.7580));
  auto mercator = or_exit(
      geometry::LonLatProjection::create(geometry::ProjectionKind::spherical_mercator, 0, 0));
  auto a = or_exit(projection.forward(-73.9855, 40.7580));
  auto b = or_exit(projection.forward(-73.9680, 40.7851));
  auto am = or_exit(mercator.forward(-73.9855, 40.7580));
  auto bm = or_exit(mercator.forward(-73.9680, 40.7851));
  std::printf(
      "Times Square -> Central Park (Met): %.0f m locally, %.0f 'Mercator metres' "
      "(x%.3f)\n",
      std::hypot(b[0] - a[0], b[1] - a[1]), std::hypot(bm[0] - am[0], bm[1] - am[1]),
      or_exit(geometry::mercator_scale_factor(40.77)));
  double lo[2] = {-500, -500}, hi[2] = {500, 500};
  auto square = geometry::Region(or_exit(geometry::Box::create(lo, hi)));
  double here[2] = {b[0] - a[0], b[1] - a[1]};
  double centre[2] = {0, 0};
  std::printf(
      "Proj of the Met to a 1 km square around Times Square: %.1f m; of its centre: "
      "%.1f m\n",
      geometry::signed_distance(square, here), geometry::signed_distance(square, centre));
  double gamma = 1 / std::sqrt(2 * rho);
  std::printf("Appendix B threshold shift for that square at gamma = %.1f m: eta = %.2f m\n", gamma,
              or_exit(geometry::rectangle_threshold_shift(gamma, 1000, 1000)));
  return 0;
}

// ---- the simulation ---------------------------------------------------------------------

namespace {

struct Row {
  std::string query;
  cgp::coordinator::Method method;
  std::string estimate, truth;
  double error, saving, seconds;
  std::size_t rounds;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int simulation_demo(const Options& options) {
  using namespace cgp;
  using namespace cgp::coordinator;
  using namespace cgp::simulation;
  const std::size_t n = 100000;
  const std::uint64_t seed = 2026;
  const auto points = synthetic_city(n, seed);
  const auto& downtown = synthetic_city_hotspots()[0];
  const double centre[2] = {downtown.x, downtown.y};
  double lo[2] = {downtown.x - 1000, downtown.y - 1000},
         hi[2] = {downtown.x + 1000, downtown.y + 1000};
  const geometry::Region range = or_exit(geometry::Box::create(lo, hi));
  const double bandwidth = 500;
  const std::size_t k = 10;
  const double rho = options.rho;
  const std::size_t rounds = options.rounds;

  std::printf("cgpkit — private queries over a simulated city\n");
  std::printf(
      "%zu users in a 20 km x 20 km synthetic city (seed %llu); each device privatizes on "
      "its own side with exact discrete Gaussian noise and its own filter.\n",
      n, static_cast<unsigned long long>(seed));
  std::printf(
      "Every query: rho = %g per m^2 per user (noise 1/sqrt(2 rho) = %.0f m per full "
      "release), beta = 0.1, PM methods with c = %zu even rounds.\n\n",
      rho, 1 / std::sqrt(2 * rho), rounds);

  const double exact_range = static_cast<double>(exact_count(points, 2, range));
  const double exact_density = exact_kde(points, 2, centre, bandwidth);
  KnnOracle oracle(points, 2);
  const auto exact_neighbours = oracle.nearest(centre, k);
  const double exact_distance = sum_of_distances(points, 2, centre, exact_neighbours);

  std::vector<Row> rows;
  const Method methods[] = {Method::BM0, Method::BM1, Method::PM0, Method::PM1};
  for (int query = 0; query < 3; ++query) {
    for (Method method : methods) {
      // A fresh fleet per row: every row starts from full budgets.
      // The device's own exact sampler: this demo shows what devices release.
      auto fleet = or_exit(SimulatedFleet::create(*DeviceConfig::cgp(1.0), points, 2, seed,
                                                  /*threads=*/0, SimulationNoise::exact));
      BudgetMirror mirror(fleet.size(), fleet.initial_budget());
      const auto asked = UserCharges::everyone(Charge{rho});
      QueryOptions o;
      o.method = method;
      o.rounds = rounds;
      o.query_id = "demo";
      const auto start = std::chrono::steady_clock::now();
      Row row{};
      row.method = method;
      char buffer[64];
      if (query == 0) {
        auto r = or_exit(range_count(fleet, mirror, range, asked, o));
        row.query = "range count, 2 km square downtown";
        std::snprintf(buffer, sizeof buffer, "%.0f", r.estimate);
        row.estimate = buffer;
        std::snprintf(buffer, sizeof buffer, "%.0f", exact_range);
        row.truth = buffer;
        row.error = count_error(r.estimate, exact_range);
        row.saving = privacy_saving(r.report.charged, rho);
        row.rounds = r.report.rounds_used;
      } else if (query == 1) {
        auto r = or_exit(kde(fleet, mirror, centre, bandwidth, asked, o));
        row.query = "Gaussian KDE downtown, b = 500 m";
        std::snprintf(buffer, sizeof buffer, "%.5f", r.estimate);
        row.estimate = buffer;
        std::snprintf(buffer, sizeof buffer, "%.5f", exact_density);
        row.truth = buffer;
        row.error = l1_error(r.estimate, exact_density);
        row.saving = privacy_saving(r.report.charged, rho);
        row.rounds = r.report.rounds_used;
      } else {
        auto r = or_exit(knn(fleet, mirror, centre, k, asked, o));
        row.query = "10 nearest to downtown";
        const double found = sum_of_distances(points, 2, centre, r.neighbours);
        std::snprintf(buffer, sizeof buffer, "sum %.0f m", found);
        row.estimate = buffer;
        std::snprintf(buffer, sizeof buffer, "sum %.0f m", exact_distance);
        row.truth = buffer;
        row.error = distance_error(found, exact_distance);
        row.saving = privacy_saving(r.report.charged, rho);
        row.rounds = r.report.rounds_used;
      }
      row.seconds = seconds_since(start);
      rows.push_back(row);
    }
  }
  std::printf("%-34s %-6s %14s %14s %9s %8s %6s %8s\n", "query", "method", "estimate", "exact",
              "error", "PrivSav", "rounds", "seconds");
  for (const Row& r : rows) {
    std::printf("%-34s %-6s %14s %14s %9.4f %7.1f%% %6zu %8.3f\n", r.query.c_str(),
                std::string(method_name(r.method)).c_str(), r.estimate.c_str(), r.truth.c_str(),
                r.error, 100 * r.saving, r.rounds, r.seconds);
  }
  std::printf(
      "\nerror: CountErr (relative), l1-Err, DistErr (relative) as in the paper's §7. "
      "PrivSav: share of rho the users kept.\n"
      "BM = one release with the whole rho; PM = iterative elimination (users decided "
      "early keep the rest). 0 = point, 1 = distance privatization.\n");
  return 0;
}
