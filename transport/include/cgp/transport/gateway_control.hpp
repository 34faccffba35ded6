// The live tier's control stream (cgp.v1.GatewayControl, docs/cluster.md): gateways dial the
// coordinator and hold one stream each; the coordinator starts a query on every gateway and
// merges the collectives of their shard-local engines (coordinator/shard.hpp), so that the
// gateways run one query over the whole fleet without a per-device message reaching the
// coordinator. ControlServer is the coordinator's side, ControlLink a gateway's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/shard.hpp"

namespace cgp::v1 {
class QueryStart;
}

namespace cgp::transport {

struct ControlServerOptions {
  std::string listen_address = "127.0.0.1:0";
  // PEM; both empty: plaintext (loopback and tests only).
  std::string tls_certificate_chain, tls_private_key;
  // Whether `credential` is gateway_id's (the cluster keeps digests: ClusterStore::
  // gateway_credential). Required.
  std::function<bool(const std::string& gateway_id, const std::string& credential)> authenticate;
  std::int64_t coordinator_epoch = 1;  // announced in Attached; fences older coordinators
  // A query whose gateways have not all finished within this is aborted on all of them.
  std::chrono::milliseconds query_deadline{std::chrono::minutes(10)};
};

struct AttachedGateway {
  std::string gateway_id;
  std::vector<std::pair<std::uint32_t, std::int64_t>> shards;  // (shard, ownership epoch)
  std::uint64_t users = 0;
  // The fleet's size when it loaded its shards: later enrolments are not among its users.
  std::uint64_t fleet_users_loaded = 0;
};

// What one gateway said at a query's end: its serialized result, or its error. A gateway lost
// mid-query (`lost`) has an `unavailable` error naming "gateway": the others finished the query
// without it, counting the users it had decided before (ReducerHub, docs/cluster.md).
struct GatewayOutcome {
  AttachedGateway gateway;  // the gateway as it attached (id, shards, fleet size loaded)
  Expected<std::string> result;
  bool lost = false;
};

class ControlServer {
 public:
  static Expected<std::unique_ptr<ControlServer>> start(ControlServerOptions options);
  ~ControlServer();  // ends every stream (a running query is aborted on its gateways)
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  int port() const noexcept;
  // The gateways attached now, by gateway id.
  std::vector<AttachedGateway> gateways() const;
  bool wait_for_gateways(std::size_t count, std::chrono::milliseconds timeout) const;

  // Runs a query on every gateway attached now (one query at a time): QueryStart to each, their
  // collectives merged, each gateway's outcome in gateway-id order. A gateway lost mid-query is
  // left out from then on and the others finish (its outcome says `lost`); every gateway lost,
  // a refused collective or the deadline aborts it on the others: an error naming "gateway"
  // (lost: `unavailable`; deadline: `deadline_exceeded`) or "collective". No gateway attached:
  // `unavailable`.
  //
  // `participants_fit`, when given, is asked about the gateways the query is about to start on,
  // at the moment it starts (no gateway attaches or leaves in between): its error is returned
  // and nothing is sent.
  using ParticipantCheck = std::function<Status(const std::vector<AttachedGateway>& gateways)>;
  Expected<std::vector<GatewayOutcome>> run_query(const std::string& query_id,
                                                  const std::string& kind, const std::string& spec,
                                                  std::uint64_t fleet_users,
                                                  const ParticipantCheck& participants_fit = {});

  struct Impl;

 private:
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ControlLinkOptions {
  std::string coordinator_address;   // host:port of the coordinator's control port
  std::string tls_root_certificate;  // PEM; empty: plaintext
  std::string gateway_id, credential;
  std::vector<std::pair<std::uint32_t, std::int64_t>> shards;
  std::uint64_t users = 0;
  std::uint64_t fleet_users_loaded = 0;  // the fleet's size when it loaded its users
};

// A gateway's work for one query: run the shard-local engine with `reducer` (every collective
// goes to the coordinator and back merged) and return the serialized result. `aborted` turns
// true when the coordinator aborts the query or the stream is lost: from then on the reducer
// returns this gateway's own values (as if alone), the handler should stop asking devices, and
// its result is dropped.
using QueryHandler = std::function<Expected<std::string>(const v1::QueryStart& start,
                                                         coordinator::ShardReducer& reducer,
                                                         const std::atomic<bool>& aborted)>;

class ControlLink {
 public:
  // Dials, says GatewayHello and waits for Attached (10 s). Errors: unavailable (unreachable),
  // unauthenticated (credential refused), naming "coordinator" or "credential".
  static Expected<std::unique_ptr<ControlLink>> connect(ControlLinkOptions options,
                                                        QueryHandler handler);
  ~ControlLink();  // ends the stream; a running query is aborted and waited for
  ControlLink(const ControlLink&) = delete;
  ControlLink& operator=(const ControlLink&) = delete;

  std::int64_t coordinator_epoch() const noexcept;
  bool connected() const noexcept;
  std::uint64_t queries_run() const noexcept;

  struct Impl;

 private:
  explicit ControlLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::transport
