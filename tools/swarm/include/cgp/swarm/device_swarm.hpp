// Many simulated devices in one process, each on its own gRPC stream to a coordinator, for load
// and fault tests (cgp-device-swarm). Streams run on gRPC's completion-queue API over a fixed
// set of threads: no thread per device. Every device is a real client::Device (its own filter,
// charges, idempotency cache) with an in-memory ledger and the seeded simulation generator: a
// swarm is a test harness, not a place for real users' data.
#pragma once

#include "cgp/link/device_client.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/common/device_config.hpp"
#include "cgp/common/expected.hpp"

namespace cgp::swarm {

struct SwarmMember {
  std::string id;
  std::string credential;        // empty when the coordinator checks none
  std::vector<double> location;  // component "location"
};

struct SwarmOptions {
  std::string coordinator_address;   // host:port
  std::string tls_root_certificate;  // PEM; empty = plaintext
  DeviceConfig config = *DeviceConfig::cgp(1.0);
  std::uint64_t seed = 1;                    // device i draws noise from stream first_stream + i
  std::uint64_t first_stream = 0;            // of this seed
  std::size_t streams_per_connection = 500;  // devices sharing one TCP connection
  std::size_t completion_queues = 4;         // a thread each
  link::WatchLimits watch_limits{};          // what each device accepts of watches
};

struct SwarmCounters {
  std::uint64_t requests = 0, replies = 0, refused_connections = 0, lost_connections = 0;
};

class DeviceSwarm {
 public:
  static Expected<std::unique_ptr<DeviceSwarm>> start(const SwarmOptions& options,
                                                      std::vector<SwarmMember> members);
  ~DeviceSwarm();  // cancels every stream and waits for them to end
  DeviceSwarm(const DeviceSwarm&) = delete;
  DeviceSwarm& operator=(const DeviceSwarm&) = delete;

  std::size_t size() const noexcept;
  // Streams the coordinator has welcomed and that are still open.
  std::size_t connected() const;
  bool wait_connected(std::size_t count, std::chrono::milliseconds timeout) const;
  SwarmCounters counters() const;

  // Faults: cut device i's stream as a crash would (the device and its ledger stay), and dial
  // again with the same id.
  void drop(std::size_t i);
  // False if the old stream has not ended within 30 s (nothing is dialled then).
  bool reconnect(std::size_t i);
  // Device i's budget state (tests).
  double spent(std::size_t i) const;

 private:
  struct Impl;  // in the .cpp
  explicit DeviceSwarm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::swarm
