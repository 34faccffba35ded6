// n simulated devices in one process, for research and capacity planning. Each runs the
// client-sdk's own privacy code — the filter (PrivacyFilter), the charge (device_charge), the
// statistic and the exact grid privatizer (release_statistic) — on state kept as flat arrays
// (25 bytes per 2-D user: its point, what it spent, whether it halted), in parallel over threads.
//
// Noise, a choice recorded with every result (SimulationNoise):
//   fast (the default): the device's clamp, grid and σ, with standard normals from a
//     counter-based generator (ARS-7, AES rounds) for (run seed, user) and (query, round,
//     coordinate), rounded to the grid — the device's released law to within the grid;
//   exact: the device's own exact discrete Gaussian sampler (CKS), fed by SimulationRandom
//     seeded by (run seed, user) with a stream from (query, round) — for fidelity runs.
// Either way results depend on the seed only, never on the thread count or the order of work,
// and admission, charge, refusal and halting are the device's own code (PrivacyFilter).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "cgp/client/filter.hpp"
#include "cgp/common/device_config.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::simulation {

using coordinator::UserId;

enum class SimulationNoise { fast, exact };
std::string_view noise_name(SimulationNoise noise) noexcept;   // "fast" | "exact"
Expected<SimulationNoise> parse_noise(std::string_view name);  // error names "noise"

class RoundRunner;

struct SimulatedFleetOptions {
  unsigned threads = 0;  // 0 = hardware concurrency
  SimulationNoise noise = SimulationNoise::fast;
  // The global id of user 0 when this fleet is one shard of a bigger one
  // (coordinator/shard.hpp): noise is keyed by global ids, so a user releases the same values
  // on whichever shard it lives.
  UserId first_user = 0;
  // Or the global id of each user (user u is user_ids[u]; empty: first_user + u), for a shard
  // that holds any set of users (Shard::ids). Copied; first_user must then be 0.
  std::span<const UserId> user_ids{};
  // View the caller's points instead of copying them (16 bytes a 2-D user less, for fleets of
  // 10^8 and more). The caller keeps them alive and unchanged for the fleet's life, as
  // nanoflann's adaptors do.
  bool borrow_points = false;
};

class SimulatedFleet final : public coordinator::Fleet {
 public:
  // points: n × dimension values, row-major (user i at [i·dimension, (i+1)·dimension)).
  static Expected<SimulatedFleet> create(const DeviceConfig& config, std::span<const double> points,
                                         std::size_t dimension, std::uint64_t seed,
                                         const SimulatedFleetOptions& options);
  // threads: 0 = hardware concurrency.
  static Expected<SimulatedFleet> create(const DeviceConfig& config, std::span<const double> points,
                                         std::size_t dimension, std::uint64_t seed,
                                         unsigned threads = 0,
                                         SimulationNoise noise = SimulationNoise::fast);
  SimulatedFleet(SimulatedFleet&&) noexcept;
  SimulatedFleet& operator=(SimulatedFleet&&) noexcept;
  ~SimulatedFleet() override;

  std::size_t size() const noexcept override;
  std::size_t dimension() const noexcept override;
  double initial_budget() const noexcept override;
  // Thread-safe for calls with different users (each user's state is its own).
  void ask(const coordinator::RoundRequest& request, coordinator::RoundReplies& replies) override;
  unsigned concurrency() const noexcept override;  // threads()
  // Fast noise: the chunk in one pass of the device's rules and the engine's (round_fold.hpp),
  // the same releases and results as ask() then the engine's reading of the replies. Exact
  // noise: false (the engine asks through ask()). Thread-safe as ask() is.
  bool ask_folded(const coordinator::RoundRequest& request, coordinator::RoundFold& fold) override;

  // What device i has spent so far (its ledger, for tests and evaluation).
  double spent(UserId user) const noexcept;
  std::span<const double> location(UserId user) const noexcept;
  unsigned threads() const noexcept;
  SimulationNoise noise() const noexcept;
  // Noisy values released since the fleet was created (one Gaussian each): the work a
  // noise-floor comparison counts.
  std::uint64_t values_released() const noexcept;
  // Every device back to a full, fresh filter, and a new run seed: a new repetition of an
  // experiment without copying the points again.
  void reset(std::uint64_t seed);
  // The same with every device's filter under `config` from now on (a new budget per row of an
  // experiment: a device answers ρ ≥ capacity·2^-18 only).
  void reset(std::uint64_t seed, const DeviceConfig& config);

 private:
  friend class RoundRunner;
  struct State;
  explicit SimulatedFleet(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cgp::simulation
