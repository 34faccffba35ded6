// Analyst queries over the live tier (docs/cluster.md): a gateway runs each one over its shard
// with the same query runner as the single-process coordinator (ShardQueries), and the
// coordinator sends it to every gateway and merges their results (run_cluster_query). Range,
// KDE and kNN, plain or accuracy-first, with a fixed ρ or Alg. 3's: their answers equal the
// single process's for the same devices.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/coordinator/shard.hpp"
#include "cgp/transport/gateway_control.hpp"

namespace cgp::v1 {
class ClusterQuery;
class QueryResult;
}  // namespace cgp::v1

namespace cgp::transport {

// A gateway's queries: its fleet (local users 0..n-1), its mirror, and each local user's global
// id (rising); revoked users are never asked.
class ShardQueries {
 public:
  ShardQueries(coordinator::Fleet& fleet, coordinator::BudgetMirror& mirror,
               std::vector<coordinator::UserId> global_ids, std::vector<char> revoked,
               std::function<std::string(coordinator::UserId global)> device_id_of);
  // A QueryStart of kind "analyst" (spec: a cgp.v1.ClusterQuery): the serialized
  // cgp.v1.QueryResult of this shard — the query's estimate and rounds, this shard's users.
  // Once `aborted` turns true no round asks devices any more (nothing leaves, nothing is
  // charged): the coordinator has given the query up.
  Expected<std::string> run(const v1::QueryStart& start, coordinator::ShardReducer& reducer,
                            const std::atomic<bool>& aborted);
  std::size_t adaptive_queries() const noexcept { return adaptive_queries_; }

 private:
  coordinator::Fleet& fleet_;
  coordinator::BudgetMirror& mirror_;
  std::vector<coordinator::UserId> ids_;
  std::vector<char> revoked_;
  std::function<std::string(coordinator::UserId)> device_id_of_;
  std::size_t adaptive_queries_ = 0;
};

// A fleet that asks nobody once `stop` is true: every user of a round is then "not delivered"
// (nothing left, so nothing was charged). A gateway's fleet while fenced or aborted.
class StoppableFleet final : public coordinator::Fleet {
 public:
  StoppableFleet(coordinator::Fleet& inner, const std::atomic<bool>& stop)
      : inner_(inner), stop_(stop) {}
  std::size_t size() const noexcept override { return inner_.size(); }
  std::size_t dimension() const noexcept override { return inner_.dimension(); }
  double initial_budget() const noexcept override { return inner_.initial_budget(); }
  void ask(const coordinator::RoundRequest& request, coordinator::RoundReplies& replies) override;

 private:
  coordinator::Fleet& inner_;
  const std::atomic<bool>& stop_;
};

// Every user enrolled on the given virtual shards with an index from from_index on (revoked or
// not).
using UsersOfShards = std::function<Expected<std::vector<coordinator::UserId>>(
    std::span<const std::uint32_t> shards, std::uint64_t from_index)>;

// The coordinator's side: `query` to every gateway attached to `server`, their results merged —
// the estimate and rounds they agree on (a gateway that disagrees is an error naming "gateway"),
// every gateway's users — with its coverage and missing-user interval judged against the
// analyst's min_coverage and max_missing_share over `subject` (the users not revoked; empty:
// every user below fleet_users). judged_status-style errors are the caller's to raise.
//
// A gateway lost mid-query while others finish it makes the result `degraded`: its shards are
// named in lost_shards and their users (users_of) in unanswered, so the coverage and the
// missing-user interval account for them; an accuracy-first result is then not certified.
// Users enrolled after a gateway loaded its shards (AttachedGateway::fleet_users_loaded) are
// listed unanswered too: no gateway asked them. Without users_of, a lost gateway fails the
// query (its error) and late enrolments are not looked up.
// `participants_fit` is ControlServer::run_query's: the check of the gateways it starts on.
Expected<v1::QueryResult> run_cluster_query(
    ControlServer& server, const v1::ClusterQuery& query, std::uint64_t fleet_users,
    std::span<const coordinator::UserId> subject = {}, const UsersOfShards& users_of = {},
    const ControlServer::ParticipantCheck& participants_fit = {});

}  // namespace cgp::transport
