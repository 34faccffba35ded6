// The live tier's round driver, as `cgp-coordinator cluster` runs it (docs/cluster.md). It
// waits as a standby until it holds the cluster's leader lock (ClusterStore::try_lead: a new,
// higher epoch), then aborts the queries an earlier leader left running, listens on its control
// port for gateways and on its Analyst API and announces both in the cluster, gives every virtual
// shard an owner among the live gateways (and routes HAProxy's map to match), and serves the
// Analyst API over the gateways (ClusterAnalyst), each query's intent committed before it leaves
// and its result or abort kept in PostgreSQL.
//
// Crash-only as the gateways: it ends when it can no longer prove it leads (its session with
// PostgreSQL ended, so the lock may be another's), for its supervisor to start it again — as a
// standby.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/transport/credentials.hpp"

namespace cgp::tools {

struct ClusterCoordinatorOptions {
  std::string cluster;                         // libpq connection string
  std::string control_listen = "127.0.0.1:0";  // where gateways attach
  std::string control_advertise;  // "host:port" gateways dial; "" = control_listen's host
  std::string analyst_listen = "127.0.0.1:0";
  std::string analyst_advertise;  // "host:port" analysts dial; "" = analyst_listen's host
  std::string tls_certificate_chain, tls_private_key;  // both ports' (PEM); none: plaintext
  std::optional<transport::CredentialSha256> analyst_credential_sha256;
  std::uint32_t horizon = 1;            // Alg. 3's H
  std::size_t min_gateways = 1;         // live gateways before the first shards are given out
  std::chrono::milliseconds poll{500};  // standby's retry, and the leader's checks
  // HAProxy (all three, or none): its admin socket, the map file its configuration names, and
  // the devices' address template (docs/protocol.md §2c).
  std::string haproxy_socket, haproxy_map, address_template;
  std::string metrics_listen;  // "HOST:PORT" of GET /metrics while leading; "" for none
};

class ClusterCoordinator {
 public:
  // Blocks as a standby until this process leads (or `stop`: an error naming "stop").
  static Expected<std::unique_ptr<ClusterCoordinator>> lead(
      const ClusterCoordinatorOptions& options, std::function<void(const std::string&)> log,
      const std::atomic<bool>& stop);
  ~ClusterCoordinator();

  std::int64_t epoch() const noexcept;
  int control_port() const noexcept;
  int analyst_port() const noexcept;
  // Serves until it must end (the lead lost) or `stop`; the reason ("" for a stop).
  std::string run_until(const std::atomic<bool>& stop);

  struct Impl;

 private:
  explicit ClusterCoordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::tools
