// The Analyst API of the live tier's round driver (docs/cluster.md): range, KDE and kNN queries
// (plain or accuracy-first, a fixed ρ or Alg. 3's) checked as the single-process coordinator
// checks them, then run over the gateways attached to a ControlServer (run_cluster_query) when
// they own every shard of the fleet exactly once under the current epochs. What must outlive
// the process — each query's intent before it leaves, its result or its abort — goes through a
// QueryJournal (the cluster's PostgreSQL in `cgp-coordinator cluster`).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/shard.hpp"
#include "cgp/transport/credentials.hpp"
#include "cgp/transport/gateway.hpp"
#include "cgp/transport/gateway_control.hpp"
#include "cgp/transport/metrics_endpoint.hpp"

namespace cgp::v1 {
class QueryResult;
}

namespace cgp::transport {

// What the round driver keeps durable. Each call is one transaction fenced by the leader's
// epoch: a deposed leader's writes fail (and its query is refused) rather than land.
class QueryJournal {
 public:
  virtual ~QueryJournal() = default;

  struct Fleet {
    std::uint64_t users = 0;                   // one past the largest user index
    std::vector<coordinator::UserId> revoked;  // ascending
    double rho_capacity = 0;                   // every device's budget
    std::uint32_t shard_count = 0;             // virtual shards of the fleet
    // shard -> (owning gateway, ownership epoch); shards of no device may be absent
    std::map<std::uint32_t, std::pair<std::string, std::int64_t>> owners;
    std::uint64_t adaptive_queries = 0;  // Alg. 3's queries begun so far (any outcome)
  };
  virtual Expected<Fleet> fleet() = 0;
  // Committed before the query leaves: its spec and the most any of its rounds together may
  // charge a user (a gateway that takes a shard over lowers its mirror by this).
  virtual Status begin(const std::string& query_id, const std::string& spec, bool adaptive,
                       double worst_charge) = 0;
  virtual Status finish(const std::string& query_id, const v1::QueryResult& result) = 0;
  // Every user enrolled on `shards` with an index from `from_index` on, revoked or not: a lost
  // gateway's, or those a gateway has not loaded yet; listed unanswered.
  virtual Expected<std::vector<coordinator::UserId>> users_of(std::span<const std::uint32_t> shards,
                                                              std::uint64_t from_index) = 0;
  virtual Status abort(const std::string& query_id, const Error& why) = 0;
  // A finished query's result; an aborted one's error (its code, named "query_id");
  // `invalid_argument` naming "query_id" for an id never begun; a running one `unavailable`.
  virtual Expected<v1::QueryResult> result(const std::string& query_id) = 0;
};

struct ClusterAnalystOptions {
  std::string listen_address = "127.0.0.1:0";
  std::string tls_certificate_chain, tls_private_key;  // PEM; both empty: plaintext
  // Calls without this credential (header cgp-analyst-credential) are refused; empty: open.
  std::optional<CredentialSha256> analyst_credential_sha256;
  ConnectionLimits limits;                  // the analyst port's caps
  std::uint32_t adaptive_horizon = 1;       // Alg. 3's H (--horizon)
  std::string component_id = "location";    // what queries are about
  std::size_t result_page_entries = 65536;  // per-user entries in one reply (GetResult pages)
  std::function<void(const std::string&)> log;
  MetricsEndpoint* metrics = nullptr;  // each query observed there; outlives the analyst
};

class ClusterAnalyst {
 public:
  // Serves RangeCount, Kde, Knn, GetResult and Status; Threshold, TopRegions and watches are
  // `unimplemented` in the live tier (named). `control` and `journal` outlive the analyst.
  static Expected<std::unique_ptr<ClusterAnalyst>> start(ClusterAnalystOptions options,
                                                         ControlServer& control,
                                                         QueryJournal& journal);
  ~ClusterAnalyst();  // stops serving; a running query finishes first
  ClusterAnalyst(const ClusterAnalyst&) = delete;
  ClusterAnalyst& operator=(const ClusterAnalyst&) = delete;

  int port() const noexcept;
  std::uint64_t queries_run() const noexcept;

  struct Impl;

 private:
  explicit ClusterAnalyst(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether the gateways attached now own every shard of `fleet` exactly once under its epochs;
// `unavailable` naming "shards" otherwise (which shards, which gateway), so that no query runs
// over part of the fleet or over a gateway that lost a shard.
Status gateways_cover_fleet(const std::vector<AttachedGateway>& attached,
                            const QueryJournal::Fleet& fleet);

}  // namespace cgp::transport
