// n real client::Device objects in one process (in-memory ledgers, seeded simulation
// generator), each asked through Device::handle(DeviceRequest): the full device path —
// validation, filter, ledger, idempotent replies — without serialization. Slower and larger
// than SimulatedFleet (about 1 KB per device plus its answered requests); for fidelity tests
// and small fleets. Results depend on the seed only, not on the thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "cgp/client/device.hpp"
#include "cgp/common/device_config.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::simulation {

using coordinator::UserId;

class DeviceFleet final : public coordinator::Fleet {
 public:
  // points: n × dimension values, row-major; each device gets component "location".
  static Expected<DeviceFleet> create(const DeviceConfig& config, std::span<const double> points,
                                      std::size_t dimension, std::uint64_t seed,
                                      unsigned threads = 0);
  DeviceFleet(DeviceFleet&&) noexcept;
  DeviceFleet& operator=(DeviceFleet&&) noexcept;
  ~DeviceFleet() override;

  std::size_t size() const noexcept override;
  std::size_t dimension() const noexcept override;
  double initial_budget() const noexcept override;
  void ask(const coordinator::RoundRequest& request, coordinator::RoundReplies& replies) override;

  client::Device& device(UserId user) noexcept;

 private:
  struct State;
  explicit DeviceFleet(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cgp::simulation
