// Coordinator benchmarks (not part of ctest): one scenario per process, so that the peak
// memory reported is that scenario's.
//
//   cgp_bench_coordinator SCENARIO METHOD [THREADS]
//     SCENARIO: kde (200,000 users, c = 64) | knn (Fashion-MNIST 60,000 × 784, c = 64)
//               | range (1,000,000 users, c = 64) | alg3 (m = 56 range queries, 10,000 users)
//     METHOD:   BM0 | BM1 | PM0 | PM1
//
// Users are the NYC collision points (../shared/data/nyc_collisions, sampled with replacement)
// when present, else the built-in synthetic city; kNN needs Debian's dataset-fashion-mnist.
// Prints one line: scenario, method, wall seconds, peak RSS, users·rounds, users·rounds/s,
// noise samples, and the time as a multiple of the noise floor (samples × the measured cost
// of one normal from the fastest generator on the machine, the simulation's vectorized fast
// noise, spread over the threads).
//
//   cgp_bench_coordinator floor   prints that cost: ns per normal, 1-D and paired.
#include <sys/resource.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cgp/client/privatizer.hpp"
#include "cgp/common/geometry/projection.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/simulation/simulated_fleet.hpp"
#include "cgp/simulation/synthetic_city.hpp"
#include "fast_normals.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// NYC collision locations projected to local metres, or nothing if the file is absent.
std::vector<double> nyc_points() {
  std::ifstream in("../shared/data/nyc_collisions/nyc_collisions_points.csv");
  if (!in) in.open("../../shared/data/nyc_collisions/nyc_collisions_points.csv");
  if (!in) return {};
  std::string line;
  std::getline(in, line);  // header: collision_id,crash_date,crash_time,lon,lat,source
  std::vector<double> lon, lat;
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string cell[5];
    for (auto& c : cell) std::getline(fields, c, ',');
    try {
      lon.push_back(std::stod(cell[3]));
      lat.push_back(std::stod(cell[4]));
    } catch (...) {
    }
  }
  auto centre = geometry::lonlat_centre(lon, lat);
  if (!centre) return {};
  auto projection = geometry::LonLatProjection::create(geometry::ProjectionKind::local_equidistant,
                                                       (*centre)[0], (*centre)[1]);
  std::vector<double> points;
  for (std::size_t i = 0; i < lon.size(); ++i)
    if (auto xy = projection->forward(lon[i], lat[i]))
      points.insert(points.end(), xy->begin(), xy->end());
  return points;
}

std::vector<double> locations(std::size_t n, std::uint64_t seed, const char*& source) {
  auto nyc = nyc_points();
  if (nyc.empty()) {
    source = "synthetic city";
    return synthetic_city(n, seed);
  }
  source = "NYC collisions (resampled)";
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, nyc.size() / 2 - 1);
  std::vector<double> points(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t j = pick(rng);
    points[2 * i] = nyc[2 * j];
    points[2 * i + 1] = nyc[2 * j + 1];
  }
  return points;
}

// An IDX image file (gzip or not): n × (rows·cols) pixel values.
std::vector<double> idx_images(const char* path, std::size_t& dimension) {
  gzFile file = gzopen(path, "rb");
  if (!file) return {};
  unsigned char header[16];
  if (gzread(file, header, 16) != 16 || header[2] != 0x08 || header[3] != 3) {
    gzclose(file);
    return {};
  }
  auto be32 = [&](int at) {
    return (std::size_t{header[at]} << 24) | (std::size_t{header[at + 1]} << 16) |
           (std::size_t{header[at + 2]} << 8) | header[at + 3];
  };
  const std::size_t n = be32(4);
  dimension = be32(8) * be32(12);
  std::vector<unsigned char> raw(n * dimension);
  if (gzread(file, raw.data(), static_cast<unsigned>(raw.size())) != static_cast<int>(raw.size())) {
    gzclose(file);
    return {};
  }
  gzclose(file);
  return {raw.begin(), raw.end()};
}

// Seconds per noisy value with the fastest generator we have (the simulation's fast noise:
// vectorized ARS-7 + Box–Muller, simulation/src/fast_normals): one normal an item (a lone
// cosine) or pairs — a point's coordinates, or the two halves partners' 1-D releases share. The
// noise floor of a run is its values times the pair cost (bench/sim_suite.sh).
double normal_cost(bool pairs) {
  const std::size_t n = 1 << 20;
  std::vector<std::uint64_t> keys(n);
  std::mt19937_64 rng(1);
  for (auto& k : keys) k = rng();
  std::vector<double> out(2 * n);
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    const double start = now();
    normal_pairs(rep, keys.data(), nullptr, n, out.data(), pairs);
    best = std::min(best, now() - start);
  }
  return best / static_cast<double>(pairs ? 2 * n : n);
}

struct Work {
  double users_rounds = 0, samples = 0, not_answered = 0;
  void add(const QueryReport& report, std::size_t output_dimension) {
    // A scenario whose devices refuse or reject would time nothing: counted and reported.
    not_answered += static_cast<double>(report.refused.size() + report.rejected.size() +
                                        report.unanswered.size());
    for (std::size_t asked : report.asked_per_round) {
      users_rounds += static_cast<double>(asked);
      samples += static_cast<double>(asked * output_dimension);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "floor") {
    std::printf("single_ns=%.3f paired_ns=%.3f target=%s\n", normal_cost(false) * 1e9,
                normal_cost(true) * 1e9, normal_pairs_target());
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: cgp_bench_coordinator kde|knn|range|alg3 BM0|BM1|PM0|PM1 [threads]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  auto method = parse_method(argv[2]);
  if (!method) {
    std::fprintf(stderr, "%s\n", method.error().to_string().c_str());
    return 2;
  }
  const unsigned threads = argc > 3 ? static_cast<unsigned>(std::stoul(argv[3])) : 0;
  // 1-D releases for distance triples, d-dimensional (paired normals) for point triples.
  const double per_sample = normal_cost(triple_of(*method) == Triple::point);
  QueryOptions options;
  options.method = *method;
  options.rounds = 64;
  options.query_id = scenario;
  const std::uint64_t seed = 7;
  const char* source = "";
  Work work;
  double start = 0, elapsed = 0;
  std::size_t users = 0;

  if (scenario == "kde" || scenario == "range") {
    users = scenario == "kde" ? 200000 : 1000000;
    auto points = locations(users, seed, source);
    // Each device's whole budget is the query's charge: a device answers ρ ≥ capacity·2^-18
    // only, and a round asks charge/64.
    auto fleet = *SimulatedFleet::create(*DeviceConfig::cgp(1e-4), points, 2, seed, threads);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    const auto rho = UserCharges::everyone(Charge{1e-4});
    // Centre of the data's bounding box.
    double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
    for (std::size_t i = 0; i < users; ++i)
      for (int a = 0; a < 2; ++a)
        lo[a] = std::min(lo[a], points[2 * i + a]), hi[a] = std::max(hi[a], points[2 * i + a]);
    const double centre[2] = {(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2};
    start = now();
    if (scenario == "kde") {
      auto r = *kde(fleet, mirror, centre, 500, rho, options);
      elapsed = now() - start;
      work.add(r.report, triple_of(*method) == Triple::point ? 2 : 1);
    } else {
      double box_lo[2] = {centre[0] - 1000, centre[1] - 1000},
             box_hi[2] = {centre[0] + 1000, centre[1] + 1000};
      auto r = *range_count(fleet, mirror, *geometry::Box::create(box_lo, box_hi), rho, options);
      elapsed = now() - start;
      work.add(r.report, triple_of(*method) == Triple::point ? 2 : 1);
    }
  } else if (scenario == "knn") {
    std::size_t dimension = 0;
    auto train =
        idx_images("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", dimension);
    std::size_t test_dimension = 0;
    auto test =
        idx_images("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", test_dimension);
    if (train.empty() || test.empty()) {
      std::fprintf(stderr, "knn needs Debian's dataset-fashion-mnist\n");
      return 3;
    }
    source = "Fashion-MNIST train";
    users = train.size() / dimension;
    auto fleet = *SimulatedFleet::create(*DeviceConfig::cgp(1e-3), train, dimension, seed, threads);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    const auto rho = UserCharges::everyone(Charge{1e-3});
    start = now();
    auto r = *knn(fleet, mirror, std::span<const double>(test).first(dimension), 10, rho, options);
    elapsed = now() - start;
    work.add(r.report, triple_of(*method) == Triple::point ? dimension : 1);
  } else if (scenario == "alg3") {
    users = 10000;
    auto points = locations(users, seed, source);
    const double budget = 1e-4;
    const std::size_t m = 56;
    auto fleet = *SimulatedFleet::create(*DeviceConfig::cgp(budget), points, 2, seed, threads);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    std::vector<geometry::Region> ranges;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::size_t> pick(0, users - 1);
    for (std::size_t l = 0; l < m; ++l) {
      const std::size_t u = pick(rng);
      double box_lo[2] = {points[2 * u] - 1000, points[2 * u + 1] - 1000};
      double box_hi[2] = {points[2 * u] + 1000, points[2 * u + 1] + 1000};
      ranges.emplace_back(*geometry::Box::create(box_lo, box_hi));
    }
    start = now();
    auto results =
        *adaptive_range_counts(fleet, mirror, *AdaptiveBudget::fixed(budget, m), ranges, options);
    elapsed = now() - start;
    for (const auto& r : results) work.add(r.report, triple_of(*method) == Triple::point ? 2 : 1);
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  // The floor: every noise sample at the single-core sampling cost, spread over the threads.
  const unsigned used = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  const double floor = work.samples * per_sample / used;
  if (work.not_answered > 0) {
    std::fprintf(stderr, "%s %s: %.0f requests not answered: the scenario measures nothing\n",
                 scenario.c_str(), argv[2], work.not_answered);
    return 4;
  }
  std::printf(
      "%-6s %-4s users=%zu source=\"%s\" threads=%u seconds=%.3f peak_rss_mib=%.0f "
      "users_rounds=%.0f users_rounds_per_s=%.3g noise_samples=%.0f sample_ns=%.2f "
      "floor_seconds=%.3f multiple_of_floor=%.2f\n",
      scenario.c_str(), argv[2], users, source, used, elapsed, peak_rss_mib(), work.users_rounds,
      work.users_rounds / elapsed, work.samples, per_sample * 1e9, floor, elapsed / floor);
  return 0;
}
