#include "cgp/transport/cluster_queries.hpp"

#include <algorithm>
#include <cstring>

#include "cgp/common/validate.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/v1/gateway_control.pb.h"
#include "query_runner.hpp"
#include "result_pages.hpp"

namespace cgp::transport {

namespace {

const v1::QueryOptions& options_of(const v1::ClusterQuery& query) {
  switch (query.query_case()) {
    case v1::ClusterQuery::kRange:
      return query.range().options();
    case v1::ClusterQuery::kKde:
      return query.kde().options();
    case v1::ClusterQuery::kKnn:
      return query.knn().options();
    default:
      return v1::QueryOptions::default_instance();
  }
}

const char* kind_of(const v1::ClusterQuery& query) {
  switch (query.query_case()) {
    case v1::ClusterQuery::kRange:
      return "range";
    case v1::ClusterQuery::kKde:
      return "kde";
    case v1::ClusterQuery::kKnn:
      return "knn";
    default:
      return "";
  }
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Whether two gateways' results agree on what is the query's, not a shard's.
bool agree(const v1::QueryResult& a, const v1::QueryResult& b) {
  return same_bits(a.estimate(), b.estimate()) && same_bits(a.lower(), b.lower()) &&
         same_bits(a.upper(), b.upper()) && a.certified() == b.certified() &&
         a.rounds_used() == b.rounds_used() &&
         std::equal(a.asked_per_round().begin(), a.asked_per_round().end(),
                    b.asked_per_round().begin(), b.asked_per_round().end()) &&
         std::equal(a.eliminated_per_round().begin(), a.eliminated_per_round().end(),
                    b.eliminated_per_round().begin(), b.eliminated_per_round().end()) &&
         std::equal(a.neighbour_users().begin(), a.neighbour_users().end(),
                    b.neighbour_users().begin(), b.neighbour_users().end());
}

}  // namespace

ShardQueries::ShardQueries(coordinator::Fleet& fleet, coordinator::BudgetMirror& mirror,
                           std::vector<coordinator::UserId> global_ids, std::vector<char> revoked,
                           std::function<std::string(coordinator::UserId)> device_id_of)
    : fleet_(fleet),
      mirror_(mirror),
      ids_(std::move(global_ids)),
      revoked_(std::move(revoked)),
      device_id_of_(std::move(device_id_of)) {
  revoked_.resize(ids_.size(), 0);
}

void StoppableFleet::ask(const coordinator::RoundRequest& request,
                         coordinator::RoundReplies& replies) {
  if (!stop_) return inner_.ask(request, replies);
  replies.resize(request.users.size(), 0);
  std::fill(replies.kind.begin(), replies.kind.end(), coordinator::ReplyKind::not_delivered);
}

Expected<std::string> ShardQueries::run(const v1::QueryStart& start,
                                        coordinator::ShardReducer& reducer,
                                        const std::atomic<bool>& aborted) {
  StoppableFleet fleet(fleet_, aborted);
  v1::ClusterQuery query;
  if (start.kind() != "analyst" || !query.ParseFromString(start.spec()) ||
      query.query_case() == v1::ClusterQuery::QUERY_NOT_SET)
    return make_error(ErrorCode::malformed_message, "spec",
                      "spec: not an analyst query of the live tier");
  const v1::QueryOptions& in = options_of(query);
  // Every gateway makes the same collective calls from here on, whatever fails locally: the
  // engine agrees on failures (agree_over_shards), and so does this.
  Status local;
  auto engine = detail::engine_options(in);
  coordinator::QueryOptions options;
  if (engine) {
    options = *engine;
  } else {
    local = engine.error();
  }
  options.query_id = query.query_id();
  options.component_id = query.component_id().empty() ? "location" : query.component_id();
  options.shard = {0, start.fleet_users(), &reducer, ids_};

  std::vector<coordinator::UserId> subject;
  // Revoked when this gateway loaded but admitted again since: in the query, not askable here
  // (its new credential is not loaded), so listed unanswered rather than counted as answered.
  std::vector<std::uint32_t> readmitted;
  for (std::size_t u = 0; u < ids_.size(); ++u) {
    const bool revoked_now = std::binary_search(query.revoked().begin(), query.revoked().end(),
                                                static_cast<std::uint64_t>(ids_[u]));
    if (revoked_[u] && !revoked_now) readmitted.push_back(static_cast<std::uint32_t>(ids_[u]));
    if (!revoked_[u] && !revoked_now) subject.push_back(static_cast<coordinator::UserId>(u));
  }
  if (!query.adaptive() && !(query.cap() > 0) && local)
    local = make_error(ErrorCode::not_positive, "rho", "a query's cap must be positive");
  coordinator::UserCharges charges = coordinator::UserCharges::uniform(
      coordinator::Charge{query.cap() > 0 ? query.cap() : 1}, subject);
  std::vector<coordinator::UserId> exhausted;
  if (query.adaptive()) {
    auto allocation = coordinator::AdaptiveBudget::open_ended(
        query.rho_capacity(), std::max<std::uint32_t>(1, query.adaptive_horizon()));
    if (allocation) {
      auto ask = allocation->ask(query.adaptive_query(), mirror_, subject);
      charges = std::move(ask.charges);
      exhausted = std::move(ask.exhausted);
    } else if (local) {
      local = allocation.error();
    }
  }
  // The users left out as spent over every shard: an accuracy-first interval leaves room for
  // each of them, as the single process's does.
  const std::uint64_t not_asked = coordinator::sum_over_shards(options.shard, exhausted.size());
  CGP_RETURN_IF_ERROR(coordinator::agree_over_shards(options.shard, std::move(local)));
  // The engines divide by (and leave interval room for) every user of the query as the round
  // driver counts them, less those left out as spent: also users of a gateway lost mid-query and
  // users no gateway holds yet (enrolled since it loaded).
  if (query.query_users() > not_asked) options.shard.query_users = query.query_users() - not_asked;

  v1::QueryResult result;
  result.set_query_id(query.query_id());
  result.set_kind(kind_of(query));
  const detail::QueryWork work{
      fleet, mirror_, options, charges, static_cast<std::size_t>(not_asked), ids_, device_id_of_};
  Status ran;
  switch (query.query_case()) {
    case v1::ClusterQuery::kRange:
      ran = detail::run_range_count(query.range(), work, result);
      break;
    case v1::ClusterQuery::kKde:
      ran = detail::run_kde(query.kde(), work, result);
      break;
    default:
      ran = detail::run_knn(query.knn(), work, result);
      break;
  }
  if (query.adaptive()) ++adaptive_queries_;
  if (!ran) return ran.error();
  for (auto u : exhausted) result.add_refused(static_cast<std::uint32_t>(ids_[u]));
  for (auto user : readmitted) result.add_unanswered(user);
  result.set_users(static_cast<std::uint32_t>(ids_.size()));
  return result.SerializeAsString();
}

namespace {

// Users of the query that no gateway answered for, looked up in the enrolment (users_of):
// every user of a lost gateway's shards, and those enrolled on a gateway's shards after it
// loaded them. Those in the query (`subject`) are listed unanswered; all join `users`.
Status list_unheld(const UsersOfShards& users_of, std::span<const std::uint32_t> shards,
                   std::uint64_t from_index, std::span<const coordinator::UserId> subject,
                   std::uint64_t fleet_users, v1::QueryResult& merged) {
  if (shards.empty()) return {};
  CGP_ASSIGN_OR_RETURN(const auto unheld, users_of(shards, from_index));
  for (coordinator::UserId user : unheld) {
    const bool queried = subject.empty() ? user < fleet_users
                                         : std::binary_search(subject.begin(), subject.end(), user);
    if (queried) merged.add_unanswered(static_cast<std::uint32_t>(user));
  }
  merged.set_users(merged.users() + static_cast<std::uint32_t>(unheld.size()));
  return {};
}

std::vector<std::uint32_t> shards_of(const GatewayOutcome& outcome) {
  std::vector<std::uint32_t> shards;
  for (const auto& [shard, epoch] : outcome.gateway.shards) shards.push_back(shard);
  std::sort(shards.begin(), shards.end());
  return shards;
}

}  // namespace

Expected<v1::QueryResult> run_cluster_query(
    ControlServer& server, const v1::ClusterQuery& query, std::uint64_t fleet_users,
    std::span<const coordinator::UserId> subject, const UsersOfShards& users_of,
    const ControlServer::ParticipantCheck& participants_fit) {
  const auto start = std::chrono::steady_clock::now();
  CGP_ASSIGN_OR_RETURN(const auto outcomes,
                       server.run_query(query.query_id(), "analyst", query.SerializeAsString(),
                                        fleet_users, participants_fit));
  v1::QueryResult merged;
  std::uint64_t users = 0;
  std::vector<std::uint32_t> lost_shards;
  const std::string* first_gateway = nullptr;  // the one the others' results are checked against
  for (std::size_t g = 0; g < outcomes.size(); ++g) {
    if (outcomes[g].lost && users_of) {
      for (std::uint32_t shard : shards_of(outcomes[g])) lost_shards.push_back(shard);
      continue;
    }
    if (!outcomes[g].result) return outcomes[g].result.error();
    v1::QueryResult part;
    if (!part.ParseFromString(*outcomes[g].result))
      return make_error(
          ErrorCode::malformed_message, "gateway",
          "gateway: " + outcomes[g].gateway.gateway_id + " sent a result that does not parse");
    if (!first_gateway) {
      first_gateway = &outcomes[g].gateway.gateway_id;
      merged = part;
      merged.clear_charges();
      merged.clear_refused();
      merged.clear_rejected();
      merged.clear_unanswered();
      merged.clear_not_reached();
    } else if (!agree(merged, part)) {
      return make_error(ErrorCode::internal_error, "gateway",
                        "gateway: " + outcomes[g].gateway.gateway_id + "'s result of query " +
                            query.query_id() + " disagrees with " + *first_gateway + "'s");
    }
    // Each gateway names only its own devices among the neighbours: the names are merged.
    for (int i = 0; i < part.neighbours_size() && i < merged.neighbours_size(); ++i)
      if (merged.neighbours(i).empty()) merged.set_neighbours(i, part.neighbours(i));
    users += part.users();
    merged.mutable_charges()->MergeFrom(part.charges());
    merged.mutable_refused()->MergeFrom(part.refused());
    merged.mutable_rejected()->MergeFrom(part.rejected());
    merged.mutable_unanswered()->MergeFrom(part.unanswered());
    merged.mutable_not_reached()->MergeFrom(part.not_reached());
  }
  merged.set_users(static_cast<std::uint32_t>(users));
  if (users_of) {
    // Enrolled since a gateway loaded its shards: no gateway asked them. The engines counted
    // them in their divisor and interval room (ClusterQuery.query_users).
    for (const auto& outcome : outcomes)
      if (!outcome.lost && outcome.gateway.fleet_users_loaded < fleet_users)
        CGP_RETURN_IF_ERROR(list_unheld(users_of, shards_of(outcome),
                                        outcome.gateway.fleet_users_loaded, subject, fleet_users,
                                        merged));
  }
  if (!lost_shards.empty()) {
    // A degraded result: the lost gateways' shards named, their users unanswered, no certificate.
    std::sort(lost_shards.begin(), lost_shards.end());
    merged.set_degraded(true);
    for (std::uint32_t shard : lost_shards) merged.add_lost_shards(shard);
    CGP_RETURN_IF_ERROR(list_unheld(users_of, lost_shards, 0, subject, fleet_users, merged));
    if (merged.has_certified()) merged.set_certified(false);
  }
  detail::sort_user_lists(merged);
  merged.set_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  const v1::QueryOptions& in = options_of(query);
  // What the engine divided a density by: the users asked, and with a certificate also those
  // left out as spent (as the single process counts them).
  const std::size_t queried = subject.empty() ? fleet_users : subject.size();
  const std::size_t engine_users =
      queried - (merged.has_certified() ? 0 : static_cast<std::size_t>(merged.refused_size()));
  const std::uint32_t k = query.has_knn() ? query.knn().k() : 0;
  detail::judge_result(in, kind_of(query), subject, fleet_users, engine_users, k, merged);
  return merged;
}

}  // namespace cgp::transport
