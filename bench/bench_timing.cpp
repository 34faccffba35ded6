// Timing side channel (issue "Timing depends on the noise and on the data"): how long the device
// takes, by how large the noise it released is and by where the user is. Plain main(), no
// Google Benchmark; prints tables, asserts nothing (useful before and after replies are paced).
//
//   cgp_bench_timing [samples [device_requests [seed]]]
//     samples          sampler draws for table 1, signed_distance calls per shape for table 4
//                      (default 2,000,000)
//     device_requests  Device::handle calls for tables 2 and 3 each, and per shape for table 5
//                      (default 100,000)
//     seed             SimulationRandom seed                       (default: random, printed)
//
// Table 1: DiscreteGaussian::sample(RandomBits&) at σ² of plan_noise(K = 1, ρ = 1e-4), each draw
//          timed on its own, bucketed by |Z|/σ.
// Table 2: Device::handle(bytes) (the wire path: parse, validate, filter, sample, ledger,
//          serialize) for a 2-D location request, bucketed by max over the two coordinates of
//          |reply − true location|/σ, σ of the device's plan for the request's ρ.
// Table 3: the same for the signed distance to a 100-vertex polygon, the user inside or outside
//          (at the same distance from the boundary), alternating.
// Table 4: geometry::signed_distance(polygon, point) alone (the per-edge loop), each call timed
//          on its own, the user's positions in a random order: a polygon with a hole (user in
//          the polygon, outside it, in the hole) and a comb (user in a tooth, between two teeth,
//          beside the comb), every position 20–300 m from the boundary. Median with its 95%
//          confidence interval, the mean of the times ≤ the pooled p95 ± 2 SE (finer than the
//          clock's ~10 ns tick), and both as differences from the shape's first position.
// Table 5: Device::handle(bytes) for the same shapes and positions (device_requests per shape),
//          unpaced. Tables 4 and 5 show whether the time depends on where the user is when the
//          device runs without pacing (signed_distance.md "Timing").
// Tables 2 and 3 run on open_for_simulation devices, which are unpaced; when Device::set_pacing
// exists they are repeated (as 2p and 3p, with device_requests/5 requests, since each paced
// reply takes its whole window) on devices paced with ReplyPacing::device_default().
// Times are steady_clock differences around one call; the clock's own cost is printed (it is
// included in every figure).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/client/privatizer.hpp"
#include "cgp/client/random.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/wire/codec.hpp"
#include "discrete_gaussian.hpp"

using namespace cgp;
using Clock = std::chrono::steady_clock;

namespace {

// Keeps the compiler from moving work across the clock reads or dropping a result.
template <class T>
inline void keep(const T& value) {
  asm volatile("" : : "r"(&value) : "memory");
}

std::uint64_t elapsed_ns(Clock::time_point a, Clock::time_point b) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// plan_noise(K, ρ) before the capacity parameter, plan_noise(K, ρ, capacity) after.
template <class D>
Expected<client::NoisePlan> plan_for(D lipschitz, D rho, D capacity) {
  if constexpr (requires { client::plan_noise(lipschitz, rho, capacity); })
    return client::plan_noise(lipschitz, rho, capacity);
  else
    return client::plan_noise(lipschitz, rho);
}

// Device::set_pacing(ReplyPacing::device_default()) where the device code has pacing (its types
// are reached through D, so this compiles against a device without it). False if it has none.
template <class R, class C, class P, class... Rest>
P pacing_type(R (C::*)(const P&, Rest...));

template <class D>
bool enable_pacing(D& device) {
  if constexpr (requires { &D::set_pacing; }) {
    using Pacing = decltype(pacing_type(&D::set_pacing));
    device.set_pacing(Pacing::device_default());
    return true;
  } else {
    return false;
  }
}

template <class D>
std::uint64_t pacing_overruns(const D& device) {
  if constexpr (requires { device.pacing_overruns(); })
    return device.pacing_overruns();
  else
    return 0;
}

// ---- Buckets and percentiles -------------------------------------------------------------

constexpr std::array<const char*, 5> kSigmaBuckets = {"|Z| < 0.5σ", "0.5σ ≤ |Z| < 1σ",
                                                      "1σ ≤ |Z| < 2σ", "2σ ≤ |Z| < 3σ", "|Z| ≥ 3σ"};

std::size_t sigma_bucket(double z_over_sigma) {
  const double a = std::fabs(z_over_sigma);
  if (a < 0.5) return 0;
  if (a < 1) return 1;
  if (a < 2) return 2;
  if (a < 3) return 3;
  return 4;
}

// Nearest-rank percentile of `v` (reordered), p ∈ (0, 1].
std::uint64_t percentile(std::vector<std::uint64_t>& v, double p) {
  if (v.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank), v.end());
  return v[rank];
}

// printf pads by bytes; the names hold multi-byte UTF-8 (σ, ≤): pad by code points instead.
int padded_width(const char* text, int columns) {
  int extra = 0;
  for (const char* c = text; *c; ++c)
    if ((static_cast<unsigned char>(*c) & 0xC0) == 0x80) ++extra;
  return columns + extra;
}

void print_table(const char* title, std::span<const char* const> names,
                 std::vector<std::vector<std::uint64_t>>& times) {
  std::size_t total = 0;
  for (const auto& t : times) total += t.size();
  std::printf("\n%s\n", title);
  std::printf("  %-18s %10s %8s %10s %10s %10s\n", "bucket", "count", "share", "median ns",
              "p90 ns", "p99 ns");
  for (std::size_t b = 0; b < names.size(); ++b) {
    auto& t = times[b];
    const double share =
        total ? 100.0 * static_cast<double>(t.size()) / static_cast<double>(total) : 0;
    if (t.empty()) {
      std::printf("  %-*s %10zu %7.2f%% %10s %10s %10s\n", padded_width(names[b], 18), names[b],
                  t.size(), share, "-", "-", "-");
      continue;
    }
    const auto p50 = percentile(t, 0.50), p90 = percentile(t, 0.90), p99 = percentile(t, 0.99);
    std::printf("  %-*s %10zu %7.2f%% %10llu %10llu %10llu\n", padded_width(names[b], 18), names[b],
                t.size(), share, static_cast<unsigned long long>(p50),
                static_cast<unsigned long long>(p90), static_cast<unsigned long long>(p99));
  }
}

// ---- Table 1: the sampler ------------------------------------------------------------------

void sampler_table(std::uint64_t seed, std::size_t samples) {
  auto plan = plan_for(1.0, 1e-4, 1e-2);
  if (!plan) {
    std::printf("plan_noise(1, 1e-4) failed: %s\n", plan.error().message.c_str());
    return;
  }
  auto gaussian = client::DiscreteGaussian::create(plan->sigma2_grid);
  if (!gaussian) {
    std::printf("DiscreteGaussian::create failed: %s\n", gaussian.error().message.c_str());
    return;
  }
  const double sigma_grid = std::sqrt(static_cast<double>(plan->sigma2_grid));
  client::SimulationRandom random(seed, 0);
  client::RandomBits bits(random);

  for (int i = 0; i < 20000; ++i) keep(gaussian->sample(bits));  // warm up
  std::vector<std::vector<std::uint64_t>> times(kSigmaBuckets.size());
  for (auto& t : times) t.reserve(samples / 2);
  double sum_sq = 0;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < samples; ++i) {
    const auto t0 = Clock::now();
    const client::int128 z = gaussian->sample(bits);
    keep(z);
    const auto t1 = Clock::now();
    const double r = static_cast<double>(z) / sigma_grid;
    sum_sq += r * r;
    times[sigma_bucket(r)].push_back(elapsed_ns(t0, t1));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "\nTable 1: DiscreteGaussian::sample, σ² = %llu grid units (σ = %.4g m, ρ = 1e-4, K = 1)\n",
      static_cast<unsigned long long>(plan->sigma2_grid), plan->sigma());
  std::printf("  %zu samples in %.2f s; empirical E[Z²]/σ² = %.4f\n", samples, seconds,
              sum_sq / static_cast<double>(samples));
  print_table("  time per sample by |Z|/σ:", kSigmaBuckets, times);
}

// ---- Tables 2 and 3: the device ------------------------------------------------------------

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string query_id(const char* prefix, std::size_t i) {
  return std::string(prefix) + "-" + std::to_string(i);
}

v1::DeviceRequest location_request(const std::string& query, double rho) {
  v1::DeviceRequest request;
  request.mutable_id()->set_query_id(query);
  request.mutable_id()->set_round(1);
  request.set_component_id("location");
  request.mutable_location();
  request.set_rho(rho);
  return request;
}

// A device at `here` with the 2-D component "location".
client::Device located_device(const DeviceConfig& config, std::uint64_t seed, const double* here) {
  auto device = client::Device::open_for_simulation(config, seed, 0);
  if (!device.register_component("location", 2).ok() ||
      !device.set_component("location", std::span<const double>(here, 2)).ok()) {
    std::printf("could not set up a device\n");
    std::exit(1);
  }
  return device;
}

// The ρ the device tables ask for: 1e-4 (the sampler's) if the device answers it, else the first
// of 1e-4·2^k it answers (a device may refuse ρ below a floor set by its capacity). Probed on a
// throwaway device; a rejection charges nothing.
double device_rho(const DeviceConfig& config) {
  const double here[2] = {0, 0};
  auto probe = located_device(config, 1, here);
  double rho = 1e-4;
  std::string first_error;
  for (int k = 0; k < 80; ++k, rho *= 2) {
    auto reply = wire::parse_device_reply(bytes_of(
        probe.handle(bytes_of(wire::serialize(location_request(query_id("probe", k), rho))))));
    if (reply && reply->status() == v1::ANSWERED) {
      if (k > 0) {
        std::printf(
            "\nThe device rejects ρ = 1e-4 (\"%s\"): the device tables use ρ = 1e-4·2^%d = %g,\n"
            "the first such ρ it answers.\n",
            first_error.c_str(), k, rho);
      }
      return rho;
    }
    if (k == 0 && reply) first_error = reply->error_message();
  }
  std::printf("no ρ in 1e-4·2^[0, 80) was answered\n");
  std::exit(1);
}

struct Outcomes {
  std::size_t answered = 0, refused = 0, rejected = 0;
  std::string first_error;
  // True if the reply was answered; records why not otherwise.
  bool note(const Expected<v1::DeviceReply>& reply) {
    if (!reply) {
      ++rejected;
      if (first_error.empty()) first_error = "unparsable reply";
      return false;
    }
    switch (reply->status()) {
      case v1::ANSWERED:
        ++answered;
        return true;
      case v1::REFUSED_BUDGET:
        ++refused;
        return false;
      default:
        ++rejected;
        if (first_error.empty()) first_error = reply->error_message();
        return false;
    }
  }
  void print() const {
    std::printf("  answered %zu, refused (budget) %zu, rejected %zu%s%s\n", answered, refused,
                rejected, first_error.empty() ? "" : "; first error: ", first_error.c_str());
  }
};

void location_table(const DeviceConfig& config, std::uint64_t seed, double rho,
                    std::size_t requests, bool paced) {
  const double here[2] = {1234.5, -678.25};
  auto device = located_device(config, seed, here);
  if (paced) enable_pacing(device);
  auto plan = plan_for(1.0, rho, config.rho_capacity());
  if (!plan) {
    std::printf("plan_noise failed: %s\n", plan.error().message.c_str());
    return;
  }
  const double sigma = plan->sigma();

  const std::size_t warm_up = paced ? 200 : 2000;
  const std::uint64_t overruns_before = pacing_overruns(device);
  for (std::size_t i = 0; i < warm_up; ++i)  // warm up (the replies are not tabulated)
    keep(device.handle(bytes_of(wire::serialize(location_request(query_id("warm", i), rho)))));

  std::vector<std::vector<std::uint64_t>> times(kSigmaBuckets.size());
  Outcomes outcomes;
  double sum_sq = 0;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < requests; ++i) {
    const std::string request = wire::serialize(location_request(query_id("loc", i), rho));
    const auto t0 = Clock::now();
    std::string reply_bytes = device.handle(bytes_of(request));
    keep(reply_bytes);
    const auto t1 = Clock::now();
    auto reply = wire::parse_device_reply(bytes_of(reply_bytes));
    if (!outcomes.note(reply)) {
      if (outcomes.refused) break;  // the budget is spent: every later request would be refused
      continue;
    }
    if (reply->values_size() != 2) continue;
    double worst = 0;
    for (int k = 0; k < 2; ++k) {
      const double r = (reply->values(k) - here[k]) / sigma;
      sum_sq += r * r;
      worst = std::max(worst, std::fabs(r));
    }
    times[sigma_bucket(worst)].push_back(elapsed_ns(t0, t1));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "\nTable %s: Device::handle(bytes), 2-D location request, %s, ρ = %g, σ = %.4g m "
      "(σ² = %llu grid units)\n",
      paced ? "2p" : "2", paced ? "PACED (device_default)" : "unpaced", rho, sigma,
      static_cast<unsigned long long>(plan->sigma2_grid));
  outcomes.print();
  if (paced)
    std::printf("  pacing overruns: %llu\n",
                static_cast<unsigned long long>(pacing_overruns(device) - overruns_before));
  std::printf("  %.2f s; empirical E[noise²]/σ² per coordinate = %.4f\n", seconds,
              outcomes.answered ? sum_sq / (2.0 * static_cast<double>(outcomes.answered)) : 0.0);
  print_table("  time per request by max(|noise_x|, |noise_y|)/σ:", kSigmaBuckets, times);
}

void polygon_table(const DeviceConfig& config, std::uint64_t seed, double rho, std::size_t requests,
                   bool paced) {
  // A regular 100-gon of circumradius 1 km around the origin; the user on the ray through the
  // middle of edge 0, at half the apothem from the boundary on either side.
  constexpr int kVertices = 100;
  constexpr double kRadius = 1000;
  const double pi = std::acos(-1.0);
  const double apothem = kRadius * std::cos(pi / kVertices);
  const double theta = pi / kVertices;
  const double inside[2] = {0.5 * apothem * std::cos(theta), 0.5 * apothem * std::sin(theta)};
  const double outside[2] = {1.5 * apothem * std::cos(theta), 1.5 * apothem * std::sin(theta)};
  const double truth[2] = {-0.5 * apothem, 0.5 * apothem};  // signed distance: negative inside

  auto make_request = [&](const std::string& query) {
    v1::DeviceRequest request;
    request.mutable_id()->set_query_id(query);
    request.mutable_id()->set_round(1);
    request.set_component_id("location");
    auto* ring = request.mutable_signed_distance_to_region()
                     ->mutable_region()
                     ->mutable_polygon()
                     ->mutable_outer();
    for (int v = 0; v < kVertices; ++v) {
      const double a = 2 * pi * v / kVertices;
      ring->add_xy(kRadius * std::cos(a));
      ring->add_xy(kRadius * std::sin(a));
    }
    request.set_rho(rho);
    return wire::serialize(request);
  };

  auto device = located_device(config, seed, inside);
  if (paced) enable_pacing(device);
  auto plan = plan_for(1.0, rho, config.rho_capacity());
  if (!plan) {
    std::printf("plan_noise failed: %s\n", plan.error().message.c_str());
    return;
  }
  const double sigma = plan->sigma();
  const std::size_t warm_up = paced ? 200 : 1000;
  const std::uint64_t overruns_before = pacing_overruns(device);
  for (std::size_t i = 0; i < warm_up; ++i) {  // warm up, both positions
    (void)device.set_component("location", std::span<const double>(i % 2 ? outside : inside, 2));
    keep(device.handle(bytes_of(make_request(query_id("warm", i)))));
  }

  constexpr std::array<const char*, 2> kNames = {"inside", "outside"};
  std::vector<std::vector<std::uint64_t>> times(2);
  std::array<double, 2> sum_sq{};
  Outcomes outcomes;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < requests; ++i) {
    const std::size_t where = i % 2;
    if (!device.set_component("location", std::span<const double>(where ? outside : inside, 2))
             .ok()) {
      std::printf("set_component failed\n");
      return;
    }
    const std::string request = make_request(query_id("poly", i));
    const auto t0 = Clock::now();
    std::string reply_bytes = device.handle(bytes_of(request));
    keep(reply_bytes);
    const auto t1 = Clock::now();
    auto reply = wire::parse_device_reply(bytes_of(reply_bytes));
    if (!outcomes.note(reply)) {
      if (outcomes.refused) break;
      continue;
    }
    if (reply->values_size() != 1) continue;
    const double r = (reply->values(0) - truth[where]) / sigma;
    sum_sq[where] += r * r;
    times[where].push_back(elapsed_ns(t0, t1));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "\nTable %s: Device::handle(bytes), signed distance to a regular %d-gon (R = %g m), "
      "user %.1f m inside or outside, %s, ρ = %g, σ = %.4g m\n",
      paced ? "3p" : "3", kVertices, kRadius, 0.5 * apothem,
      paced ? "PACED (device_default)" : "unpaced", rho, sigma);
  outcomes.print();
  if (paced)
    std::printf("  pacing overruns: %llu\n",
                static_cast<unsigned long long>(pacing_overruns(device) - overruns_before));
  std::printf("  %.2f s; empirical E[noise²]/σ²: inside %.4f, outside %.4f\n", seconds,
              times[0].empty() ? 0.0 : sum_sq[0] / static_cast<double>(times[0].size()),
              times[1].empty() ? 0.0 : sum_sq[1] / static_cast<double>(times[1].size()));
  print_table("  time per request by position:", kNames, times);
}

// ---- Tables 4 and 5: where the user is, in polygons with a hole and with teeth ---------------

// A polygon and the positions of the user to compare, in the device's coordinates (metres).
struct Shape {
  const char* title;
  geometry::Ring outer;
  std::vector<geometry::Ring> holes;
  std::vector<const char*> names;
  std::vector<std::array<double, 2>> positions;
};

geometry::Ring regular_ring(int vertices, double radius, bool clockwise) {
  const double pi = std::acos(-1.0);
  geometry::Ring ring;
  for (int v = 0; v < vertices; ++v) {
    const double a = (clockwise ? -2 : 2) * pi * v / vertices;
    ring.push_back({radius * std::cos(a), radius * std::sin(a)});
  }
  return ring;
}

// A regular 100-gon (R = 1 km) with a regular 50-gon hole (r = 400 m), both around the origin:
// 150 edges. The user 300 m from the nearest ring, on the ray through the middle of edge 0.
Shape holed_shape() {
  const double pi = std::acos(-1.0);
  const double c = std::cos(pi / 100), s = std::sin(pi / 100);
  auto at = [&](double r) { return std::array<double, 2>{r * c, r * s}; };
  return {"a 100-gon (R = 1 km) with a 50-gon hole (r = 400 m), 150 edges",
          regular_ring(100, 1000, false),
          {regular_ring(50, 400, true)},
          {"in the polygon", "outside", "in the hole"},
          {at(700), at(1300), at(100)}};
}

// A comb: a base [0, 1960] × [0, 200] m with 25 teeth 40 m wide and 1,800 m long, 40 m apart
// (100 edges). The user half-way up, 20 m from the nearest edge: in the middle of tooth 12,
// in the gap between teeth 12 and 13, and 20 m right of the last tooth.
Shape comb_shape() {
  constexpr int kTeeth = 25;
  constexpr double kWidth = 40, kPitch = 80, kBase = 200, kTop = 2000;
  geometry::Ring ring = {{0, 0}, {kPitch * (kTeeth - 1) + kWidth, 0}};
  for (int k = kTeeth - 1; k >= 0; --k) {  // counter-clockwise: up the right side of each tooth
    const double x0 = kPitch * k, x1 = x0 + kWidth;
    ring.push_back({x1, kTop});
    ring.push_back({x0, kTop});
    if (k > 0) {
      ring.push_back({x0, kBase});
      ring.push_back({x0 - (kPitch - kWidth), kBase});
    }
  }
  const double y = (kBase + kTop) / 2;
  return {"a comb of 25 teeth (40 m wide, 40 m apart), 100 edges",
          std::move(ring),
          {},
          {"in a tooth", "between two teeth", "beside the comb"},
          {{{kPitch * 12 + kWidth / 2, y},
            {kPitch * 12 + kWidth + (kPitch - kWidth) / 2, y},
            {kPitch * (kTeeth - 1) + kWidth + 20, y}}}};
}

geometry::Polygon polygon_of(const Shape& shape) {
  auto polygon = geometry::Polygon::create(shape.outer, shape.holes);
  if (!polygon) {
    std::printf("Polygon::create failed for %s: %s\n", shape.title,
                polygon.error().message.c_str());
    std::exit(1);
  }
  return *std::move(polygon);
}

// Median, its 95% confidence interval (order statistics n/2 ± 0.98·√n, distribution-free),
// p90 and p99 per position, and each median's difference from the first position's. The clock
// ticks in steps of ~10 ns here, too coarse for a loop of a few hundred ns, so also the mean of
// the times at or below the pooled p95 (one cutoff for all positions: interrupts and page
// faults cut off alike) ± twice its standard error, and its difference from the first's.
void print_positions(std::span<const char* const> names,
                     std::vector<std::vector<std::uint64_t>>& times) {
  std::vector<std::uint64_t> pooled;
  for (const auto& t : times) pooled.insert(pooled.end(), t.begin(), t.end());
  const std::uint64_t cutoff = percentile(pooled, 0.95);
  std::printf("  %-18s %8s %9s %16s %7s %7s %9s %20s %9s\n", "position", "count", "median ns",
              "95% CI of median", "p90 ns", "p99 ns", "Δ median", "mean ≤ p95 ± 2 SE", "Δ mean");
  double first_median = 0, first_mean = 0;
  for (std::size_t p = 0; p < names.size(); ++p) {
    auto& t = times[p];
    if (t.empty()) {
      std::printf("  %-*s %8zu %10s\n", padded_width(names[p], 18), names[p], t.size(), "-");
      continue;
    }
    std::sort(t.begin(), t.end());
    const double n = static_cast<double>(t.size());
    const double half_width = 0.98 * std::sqrt(n);
    const auto lo = static_cast<std::size_t>(std::max(0.0, std::floor(n / 2 - half_width)));
    const auto hi = std::min(t.size() - 1, static_cast<std::size_t>(std::ceil(n / 2 + half_width)));
    const std::uint64_t median = percentile(t, 0.50);
    if (p == 0) first_median = static_cast<double>(median);
    double sum = 0, sum2 = 0, kept = 0;
    for (const std::uint64_t x : t) {
      if (x > cutoff) continue;
      const auto v = static_cast<double>(x);
      sum += v;
      sum2 += v * v;
      kept += 1;
    }
    const double mean = kept > 0 ? sum / kept : 0;
    const double se = kept > 1 ? std::sqrt((sum2 / kept - mean * mean) / (kept - 1)) : 0;
    if (p == 0) first_mean = mean;
    char ci[40], mean_text[40];
    std::snprintf(ci, sizeof ci, "[%llu, %llu]", static_cast<unsigned long long>(t[lo]),
                  static_cast<unsigned long long>(t[hi]));
    std::snprintf(mean_text, sizeof mean_text, "%.2f ± %.2f", mean, 2 * se);
    std::printf("  %-*s %8zu %9llu %16s %7llu %7llu %+8.2f%% %20s %+8.2f%%\n",
                padded_width(names[p], 18), names[p], t.size(),
                static_cast<unsigned long long>(median), ci,
                static_cast<unsigned long long>(percentile(t, 0.90)),
                static_cast<unsigned long long>(percentile(t, 0.99)),
                100.0 * (static_cast<double>(median) / first_median - 1), mean_text,
                100.0 * (mean / first_mean - 1));
  }
}

// Every position once per round, in a fresh random order each round.
template <class F>
void in_random_order(std::size_t positions, std::size_t rounds, std::uint64_t seed, F&& visit) {
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> order(positions);
  for (std::size_t r = 0; r < rounds; ++r) {
    for (std::size_t p = 0; p < positions; ++p) order[p] = p;
    std::shuffle(order.begin(), order.end(), rng);
    for (const std::size_t p : order) visit(p);
  }
}

void distance_table(std::uint64_t seed, std::size_t calls) {
  std::printf(
      "\nTable 4: geometry::signed_distance(polygon, point) alone, each call timed, positions in "
      "random order\n");
  for (const Shape& shape : {holed_shape(), comb_shape()}) {
    const geometry::Polygon polygon = polygon_of(shape);
    const std::size_t n = shape.positions.size();
    std::vector<std::vector<std::uint64_t>> times(n);
    std::vector<double> distance(n);
    for (auto& t : times) t.reserve(calls / n + 1);
    in_random_order(n, 20000 / n, seed, [&](std::size_t p) {  // warm up
      keep(geometry::signed_distance(polygon, shape.positions[p]));
    });
    in_random_order(n, calls / n, seed + 1, [&](std::size_t p) {
      const auto t0 = Clock::now();
      const double d = geometry::signed_distance(polygon, shape.positions[p]);
      keep(d);
      const auto t1 = Clock::now();
      distance[p] = d;
      times[p].push_back(elapsed_ns(t0, t1));
    });
    std::printf("\n  %s; signed distance:", shape.title);
    for (std::size_t p = 0; p < n; ++p)
      std::printf("%s %s %.1f m", p ? "," : "", shape.names[p], distance[p]);
    std::printf("\n");
    print_positions(shape.names, times);
  }
}

void shape_device_table(const DeviceConfig& config, std::uint64_t seed, double rho,
                        std::size_t requests) {
  std::printf(
      "\nTable 5: Device::handle(bytes), signed distance to a polygon, unpaced, ρ = %g, "
      "positions in random order\n",
      rho);
  std::uint64_t shape_seed = seed;
  for (const Shape& shape : {holed_shape(), comb_shape()}) {
    ++shape_seed;
    auto make_request = [&](const std::string& query) {
      v1::DeviceRequest request;
      request.mutable_id()->set_query_id(query);
      request.mutable_id()->set_round(1);
      request.set_component_id("location");
      auto* polygon =
          request.mutable_signed_distance_to_region()->mutable_region()->mutable_polygon();
      for (const auto& v : shape.outer) {
        polygon->mutable_outer()->add_xy(v[0]);
        polygon->mutable_outer()->add_xy(v[1]);
      }
      for (const auto& hole : shape.holes) {
        auto* ring = polygon->add_holes();
        for (const auto& v : hole) {
          ring->add_xy(v[0]);
          ring->add_xy(v[1]);
        }
      }
      request.set_rho(rho);
      return wire::serialize(request);
    };
    const std::size_t n = shape.positions.size();
    auto device = located_device(config, shape_seed, shape.positions[0].data());
    auto move_to = [&](std::size_t p) {
      if (!device.set_component("location", std::span<const double>(shape.positions[p])).ok()) {
        std::printf("set_component failed\n");
        std::exit(1);
      }
    };
    std::size_t warm = 0;
    in_random_order(n, 1000 / n, shape_seed, [&](std::size_t p) {
      move_to(p);
      keep(device.handle(bytes_of(make_request(query_id("warm", warm++)))));
    });
    std::vector<std::vector<std::uint64_t>> times(n);
    Outcomes outcomes;
    std::size_t i = 0;
    const auto start = Clock::now();
    in_random_order(n, requests / n, shape_seed + 1, [&](std::size_t p) {
      if (outcomes.refused) return;  // the budget is spent
      move_to(p);
      const std::string request = make_request(query_id("shape", i++));
      const auto t0 = Clock::now();
      std::string reply_bytes = device.handle(bytes_of(request));
      keep(reply_bytes);
      const auto t1 = Clock::now();
      if (outcomes.note(wire::parse_device_reply(bytes_of(reply_bytes))))
        times[p].push_back(elapsed_ns(t0, t1));
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("\n  %s, %.2f s\n", shape.title, seconds);
    outcomes.print();
    print_positions(shape.names, times);
  }
}

std::uint64_t clock_overhead_ns() {
  std::vector<std::uint64_t> v(100000);
  for (auto& x : v) {
    const auto t0 = Clock::now();
    const auto t1 = Clock::now();
    x = elapsed_ns(t0, t1);
  }
  return percentile(v, 0.5);
}

std::size_t parse_count(const char* text, const char* what) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (!end || *end != '\0' || n == 0) {
    std::fprintf(stderr, "%s must be a positive integer, got '%s'\n", what, text);
    std::exit(2);
  }
  return static_cast<std::size_t>(n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 4) {
    std::fprintf(stderr, "usage: %s [samples [device_requests [seed]]]\n", argv[0]);
    return 2;
  }
  const std::size_t samples = argc > 1 ? parse_count(argv[1], "samples") : 2'000'000;
  const std::size_t requests = argc > 2 ? parse_count(argv[2], "device_requests") : 100'000;
  std::uint64_t seed;
  if (argc > 3) {
    seed = std::strtoull(argv[3], nullptr, 10);
  } else {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32) | rd();
  }
  std::printf("cgp_bench_timing: seed %llu, %zu sampler draws, %zu device requests per table\n",
              static_cast<unsigned long long>(seed), samples, requests);
  std::printf("steady_clock: median cost of one reading pair %llu ns (included in every time)\n",
              static_cast<unsigned long long>(clock_overhead_ns()));

  sampler_table(seed, samples);

  // The capacity at which ρ = 1e-4 is the smallest ρ answered: 2^18 releases of σ = 70.7 m.
  const auto config = DeviceConfig::cgp(1e-4 * 262144);
  if (!config) {
    std::printf("DeviceConfig::cgp failed\n");
    return 1;
  }
  const double rho = device_rho(*config);
  location_table(*config, seed, rho, requests, false);
  polygon_table(*config, seed + 1, rho, requests, false);
  distance_table(seed + 4, samples);
  shape_device_table(*config, seed + 5, rho, requests);

  auto probe = client::Device::open_for_simulation(*config, seed, 0);
  if (!enable_pacing(probe)) {
    std::printf("\nDevice has no set_pacing: no paced tables.\n");
    return 0;
  }
  const std::size_t paced = std::max<std::size_t>(1, requests / 5);
  location_table(*config, seed + 2, rho, paced, true);
  polygon_table(*config, seed + 3, rho, paced, true);
  return 0;
}
