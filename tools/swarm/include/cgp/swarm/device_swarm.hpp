// Many simulated devices in one process, each on its own connection to a coordinator, for load
// and fault tests (cgp-device-swarm). Over gRPC, each device is a stream on gRPC's
// completion-queue API; over the lean frames transport (docs/protocol.md §2b), each is a TLS
// connection of its own, all driven by epoll. Either way a fixed set of threads runs them: no
// thread per device. Every device is a real client::Device (its own filter,
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
  std::string tls_root_certificate;  // PEM; empty = plaintext (gRPC only: frames need it)
  link::DeviceTransport transport = link::DeviceTransport::grpc;
  DeviceConfig config = *DeviceConfig::cgp(1.0);
  std::uint64_t seed = 1;                    // device i draws noise from stream first_stream + i
  std::uint64_t first_stream = 0;            // of this seed
  std::size_t streams_per_connection = 500;  // devices sharing one TCP connection (gRPC)
  std::size_t completion_queues = 4;  // a thread each (gRPC queues; with frames, epoll loops)
  link::WatchLimits watch_limits{};   // what each device accepts of watches
  // Frames: when a coordinator's Goodbye or StreamEnd says retry_after_ms, dial again no
  // sooner than that (times 1 + U[0, 0.1]). False: redial on the device's own backoff only, as
  // a device that ignores the window would (tests of the coordinator's side).
  bool obey_retry_after = true;
  // The live tier (docs/protocol.md §2c, frames only): each device's TLS name (and SNI) is its
  // virtual shard's host in this template, e.g. "s{shard}.devices.example.org:443", while every
  // connection goes to coordinator_address (HAProxy's frames port). Empty: the host of
  // coordinator_address for every device.
  std::string address_template;
  std::uint32_t virtual_shards = 0;  // with address_template: the fleet's shard count
};

struct SwarmCounters {
  std::uint64_t requests = 0, replies = 0, refused_connections = 0, lost_connections = 0;
  std::uint64_t welcomes = 0;  // Welcomes received, over all connections so far
};

class DeviceSwarm {
 public:
  static Expected<std::unique_ptr<DeviceSwarm>> start(const SwarmOptions& options,
                                                      std::vector<SwarmMember> members);
  ~DeviceSwarm();  // cuts every connection and waits for them to end
  DeviceSwarm(const DeviceSwarm&) = delete;
  DeviceSwarm& operator=(const DeviceSwarm&) = delete;

  std::size_t size() const noexcept;
  // Connections the coordinator has welcomed and that are still open.
  std::size_t connected() const;
  bool wait_connected(std::size_t count, std::chrono::milliseconds timeout) const;
  SwarmCounters counters() const;

  // Faults: cut device i's connection as a crash would (the device and its ledger stay), and
  // dial again with the same id (frames: no sooner than a retry_after_ms window the coordinator
  // gave, when obeyed).
  void drop(std::size_t i);
  // False if the old connection has not ended within 30 s (nothing is dialled then).
  bool reconnect(std::size_t i);
  // Device i's budget state (tests).
  double spent(std::size_t i) const;

 private:
  struct Impl;  // in the .cpp
  explicit DeviceSwarm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::swarm
