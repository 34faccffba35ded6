// Timing side channel (issue "Timing depends on the noise and on the data"): how long the device
// takes, by how large the noise it released is and by where the user is. Plain main(), no
// Google Benchmark; prints tables, asserts nothing (useful before and after replies are paced).
//
//   cgp_bench_timing [samples [device_requests [seed]]]
//     samples          sampler draws for table 1                  (default 2,000,000)
//     device_requests  Device::handle calls for tables 2 and 3 each (default 100,000)
//     seed             SimulationRandom seed                       (default: random, printed)
//
// Table 1: DiscreteGaussian::sample(RandomBits&) at σ² of plan_noise(K = 1, ρ = 1e-4), each draw
//          timed on its own, bucketed by |Z|/σ.
// Table 2: Device::handle(bytes) (the wire path: parse, validate, filter, sample, ledger,
//          serialize) for a 2-D location request, bucketed by max over the two coordinates of
//          |reply − true location|/σ, σ of the device's plan for the request's ρ.
// Table 3: the same for the signed distance to a 100-vertex polygon, the user inside or outside
//          (at the same distance from the boundary), alternating.
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
