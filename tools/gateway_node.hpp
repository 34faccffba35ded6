// One gateway of the live tier (docs/cluster.md), as cgp-gateway runs it: it takes its lease in
// the cluster's PostgreSQL, loads the shards it owns (their devices' credential digests and
// mirror snapshots, less every round of an unfinished query), serves those devices, runs the
// coordinator's queries over them (ShardQueries over its control link) and saves its shards'
// mirror after each query under their ownership epochs.
//
// Crash-only: its shards are fixed for its life. It ends — and its supervisor starts it again,
// which reloads what it owns — when its lease cannot be renewed in time (it stops asking devices
// first: a gateway that may have lost its shards must not charge their users), when its control
// stream ends (its coordinator died: the next start dials the new leader), or when the cluster
// gave it shards or moved one of its shards away.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::tools {

struct GatewayNodeOptions {
  std::string cluster;  // libpq connection string of the cluster's PostgreSQL
  std::string gateway_id;
  std::string credential;   // this gateway's, as the cluster keeps its digest
  std::string coordinator;  // host:port of the control port; "" = the leader's, from the cluster
  std::string control_tls_root;                        // PEM; empty: plaintext control stream
  std::string listen = "127.0.0.1:0";                  // the gRPC device port
  std::string frames_listen;                           // the TLS frames device port ("" for none)
  std::string tls_certificate_chain, tls_private_key;  // the device ports' (PEM)
  std::string advertise;  // "host:port" recorded with the lease (HAProxy's backend); "" = listen
  std::size_t dimension = 2;
  std::string component_id = "location";
  std::chrono::milliseconds lease_ttl{10000};
  std::chrono::milliseconds round_deadline{5000};
  // Devices enrolled on its shards since it loaded: the node ends (to be started again with
  // them) once it has served this long; until then queries list them unanswered.
  std::chrono::milliseconds enrolment_reload{30000};
  std::string metrics_listen;  // "HOST:PORT" of GET /metrics; "" for none
};

class GatewayNode {
 public:
  static Expected<std::unique_ptr<GatewayNode>> start(const GatewayNodeOptions& options,
                                                      std::function<void(const std::string&)> log);
  ~GatewayNode();  // gives the lease up after a stop; keeps it when the node ended to restart
  int device_port() const noexcept;
  int frames_port() const noexcept;
  int metrics_port() const noexcept;  // 0 without --metrics-listen
  std::size_t users() const noexcept;
  // Blocks until the node must end (lease lost, control stream ended, shards moved, devices
  // enrolled on its shards) or `stop`
  // turns true; the reason ("" for a stop).
  std::string run_until(const std::atomic<bool>& stop);

  struct Impl;

 private:
  explicit GatewayNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::tools
