// Device-side costs: one 2-D request end to end (parse, validate, filter, sample, ledger,
// serialize) with each ledger, and the exact secure sampler against std::normal_distribution.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "cgp/client/device.hpp"
#include "cgp/client/privatizer.hpp"
#include "cgp/common/wire/codec.hpp"
#include "discrete_gaussian.hpp"

using namespace cgp;
using namespace cgp::client;

namespace {

// The smallest ρ a device answers is capacity·2^-18, so one device answers at most 2^18
// requests: the request benchmarks run a fixed 200,000 iterations at that ρ.
constexpr double kCapacity = 1e6;
constexpr double kRho = kCapacity / 262144;
constexpr int kRequests = 200000;

std::string request_bytes(std::uint32_t round) {
  v1::DeviceRequest request;
  request.mutable_id()->set_query_id("bench");
  request.mutable_id()->set_round(round);
  request.set_component_id("location");
  request.mutable_location();
  request.set_rho(kRho);
  return wire::serialize(request);
}

void run_requests(benchmark::State& state, Device& device) {
  double here[2] = {1234.5, -678.25};
  if (!device.register_component("location", 2).ok() ||
      !device.set_component("location", here).ok()) {
    state.SkipWithError("could not set up the device");
    return;
  }
  std::uint32_t round = 0;
  for (auto _ : state) {
    std::string bytes = request_bytes(++round);
    std::string reply =
        device.handle({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
    benchmark::DoNotOptimize(reply);
  }
  state.SetItemsProcessed(state.iterations());
}

// Unpaced: the work itself (open_secure paces by default; see the paced row).
void BM_Request2D_MemoryLedger_Secure(benchmark::State& state) {
  auto device = *Device::open_secure(*DeviceConfig::cgp(kCapacity), nullptr);
  device.set_pacing(ReplyPacing{});
  run_requests(state, device);
}
BENCHMARK(BM_Request2D_MemoryLedger_Secure)->Iterations(kRequests);

// As a real device answers: the release padded to its public window (privatizer.md, Timing).
void BM_Request2D_MemoryLedger_Secure_Paced(benchmark::State& state) {
  auto device = *Device::open_secure(*DeviceConfig::cgp(kCapacity), nullptr);
  run_requests(state, device);
  state.counters["overruns"] = static_cast<double>(device.pacing_overruns());
}
BENCHMARK(BM_Request2D_MemoryLedger_Secure_Paced)->Iterations(5000)->UseRealTime();

void BM_Request2D_MemoryLedger_Simulation(benchmark::State& state) {
  auto device = Device::open_for_simulation(*DeviceConfig::cgp(kCapacity), 1, 2);
  run_requests(state, device);
}
BENCHMARK(BM_Request2D_MemoryLedger_Simulation)->Iterations(kRequests);

void BM_Request2D_SqliteLedger_Secure(benchmark::State& state) {
  auto path =
      std::filesystem::temp_directory_path() / ("cgp-bench-" + std::to_string(::getpid()) + ".db");
  {
    auto device = *Device::open_secure(*DeviceConfig::cgp(kCapacity), path.c_str());
    device.set_pacing(ReplyPacing{});
    run_requests(state, device);
  }
  for (const char* suffix : {"", "-journal"}) std::filesystem::remove(path.string() + suffix);
}
BENCHMARK(BM_Request2D_SqliteLedger_Secure)->Iterations(5000)->UseRealTime();

// One coordinate of noise at a typical plan (σ/u ∈ [2^24, 2^25)), secure randomness.
void BM_DiscreteGaussian_Secure(benchmark::State& state) {
  auto random = *SecureRandom::create();
  RandomBits bits(*random);
  auto gaussian = *DiscreteGaussian::create(plan_noise(1.0, 1e-4, 1e-2)->sigma2_grid);
  for (auto _ : state) benchmark::DoNotOptimize(gaussian.sample(bits));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DiscreteGaussian_Secure);

void BM_DiscreteGaussian_Simulation(benchmark::State& state) {
  SimulationRandom random(1, 1);
  RandomBits bits(random);
  auto gaussian = *DiscreteGaussian::create(plan_noise(1.0, 1e-4, 1e-2)->sigma2_grid);
  for (auto _ : state) benchmark::DoNotOptimize(gaussian.sample(bits));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DiscreteGaussian_Simulation);

// The floating-point baseline we do not use on devices (not exact, not secure).
void BM_StdNormal_Mt19937(benchmark::State& state) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0, 70.7);
  for (auto _ : state) benchmark::DoNotOptimize(normal(rng));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StdNormal_Mt19937);

}  // namespace

BENCHMARK_MAIN();
