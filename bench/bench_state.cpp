// What intents before rounds cost the coordinator: one round's worst-case charges for
// every asked device written to the state file (one transaction, fsync: synchronous=FULL)
// before its requests leave, and the settlement with the mirror when the query ends.
// Run: build/bench/cgp_bench_state [--benchmark_filter=...]; the file goes to $TMPDIR. A round's
// intent is the difference of the 16-round and 1-round times over 15 (the settlement is the
// same in both).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "coordinator_state.hpp"

namespace {

namespace fs = std::filesystem;
using cgp::transport::detail::CoordinatorState;

// One query of `rounds` rounds over state.range(0) devices: each round's intent, then the
// settlement (every device's mirror value and the query's intents, one transaction).
void BM_IntentsOfOneQuery(benchmark::State& state) {
  const auto devices = static_cast<std::size_t>(state.range(0));
  const auto rounds = static_cast<std::uint32_t>(state.range(1));
  const fs::path path =
      fs::temp_directory_path() / ("cgp-bench-state-" + std::to_string(getpid()) + ".db");
  fs::remove(path);
  auto store = *CoordinatorState::open(path.string());
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < devices; ++i) ids.push_back("device-" + std::to_string(i));
  std::vector<const std::string*> asked;
  for (const auto& id : ids) asked.push_back(&id);
  const std::vector<double> charges(devices, 1e-3);
  std::vector<std::pair<std::string, double>> mirror;
  for (const auto& id : ids) mirror.emplace_back(id, 0.5);
  std::uint64_t query = 0;
  for (auto _ : state) {
    const std::string query_id = "q-" + std::to_string(++query);
    for (std::uint32_t round = 1; round <= rounds; ++round)
      if (!store->record_intent(query_id, round, asked, charges)) state.SkipWithError("intent");
    for (auto& entry : mirror) entry.second -= 1e-6;  // every value changed
    if (!store->settle(mirror, query_id)) state.SkipWithError("settle");
  }
  store.reset();
  fs::remove(path);
  fs::remove(path.string() + "-wal");
  fs::remove(path.string() + "-shm");
}
BENCHMARK(BM_IntentsOfOneQuery)
    ->Args({1000, 16})
    ->Args({20000, 1})
    ->Args({20000, 16})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
