#include "cgp/transport/cluster_analyst.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "analyst_call_guard.hpp"
#include "analyst_listener.hpp"
#include "analyst_validation.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "cgp/transport/cluster_queries.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "cgp/v1/gateway_control.pb.h"
#include "query_desk.hpp"
#include "query_runner.hpp"
#include "result_pages.hpp"

namespace cgp::transport {

using protocol::log_value;

Status gateways_cover_fleet(const std::vector<AttachedGateway>& attached,
                            const QueryJournal::Fleet& fleet) {
  std::set<std::uint32_t> covered;
  for (const auto& gateway : attached)
    for (const auto& [shard, epoch] : gateway.shards) {
      const auto owner = fleet.owners.find(shard);
      if (owner == fleet.owners.end() || owner->second.first != gateway.gateway_id ||
          owner->second.second != epoch)
        return make_error(ErrorCode::unavailable, "shards",
                          "shards: gateway " + gateway.gateway_id + " holds shard " +
                              std::to_string(shard) + " under epoch " + std::to_string(epoch) +
                              ", which the cluster no longer gives it; retry once it reloaded");
      if (!covered.insert(shard).second)
        return make_error(ErrorCode::unavailable, "shards",
                          "shards: shard " + std::to_string(shard) + " is held twice");
    }
  if (covered.size() < fleet.shard_count) {
    std::uint32_t first = 0;
    while (covered.count(first) > 0) ++first;
    const auto owner = fleet.owners.find(first);
    return make_error(ErrorCode::unavailable, "shards",
                      "shards: " + std::to_string(fleet.shard_count - covered.size()) + " of " +
                          std::to_string(fleet.shard_count) +
                          " shards have no attached gateway (shard " + std::to_string(first) +
                          (owner == fleet.owners.end() ? std::string(" has no owner yet")
                                                       : " belongs to " + owner->second.first) +
                          "); retry once every gateway is attached");
  }
  return {};
}

namespace {

const char* kind_of(const v1::ClusterQuery& query) {
  return query.has_range() ? "range" : query.has_kde() ? "kde" : "knn";
}

// The Analyst service of the live tier, owned by its listener.
struct ClusterEndpoint final : v1::Analyst::Service {
  ClusterAnalystOptions options;
  ControlServer* control = nullptr;
  QueryJournal* journal = nullptr;
  std::mutex query_mutex;  // one query at a time: the control server runs one at a time
  std::uint64_t next_query = 1;
  const std::string query_prefix = detail::random_query_prefix();
  std::atomic<std::uint64_t> queries_run{0};

  void log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  // Every handler's frame: the credential at the door, no exception out, errors named.
  template <class Body>
  grpc::Status serve(grpc::ServerContext* context, Body&& body,
                     grpc::StatusCode not_found_as = grpc::StatusCode::OK) noexcept {
    return detail::guarded(context, [&]() -> grpc::Status {
      if (!detail::analyst_authorised(*context, options.analyst_credential_sha256))
        return detail::analyst_unauthenticated(context);
      const cgp::Status done = body();
      if (done) return grpc::Status::OK;
      if (not_found_as != grpc::StatusCode::OK && done.error().code == ErrorCode::invalid_argument)
        return protocol::to_grpc_status(context, done.error(), not_found_as);
      return protocol::to_grpc_status(context, done.error());
    });
  }

  // A journal write, retried for 10 s while the store is away (`unavailable`).
  template <class Write>
  static cgp::Status keep(Write&& write) {
    cgp::Status kept = write();
    for (int attempt = 0; !kept && kept.error().code == ErrorCode::unavailable && attempt < 40;
         ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      kept = write();
    }
    return kept;
  }

  // The analyst's checks (as the single process makes them), the intent, the query over every
  // gateway, its result or its abort kept; the first page of the result in `out`.
  cgp::Status run(const v1::QueryOptions& in, bool scheduled, v1::ClusterQuery query,
                  v1::QueryResult* out) {
    std::lock_guard lock(query_mutex);
    CGP_ASSIGN_OR_RETURN(const QueryJournal::Fleet fleet, journal->fleet());
    CGP_RETURN_IF_ERROR(detail::validate_query_options(in, fleet.rho_capacity));
    CGP_ASSIGN_OR_RETURN(const coordinator::QueryOptions engine, detail::engine_options(in));
    if (in.users_size() > 0)
      return make_error(ErrorCode::invalid_argument, "users",
                        "users: a query over chosen users is not served by the live tier yet; "
                        "leave users empty for the whole fleet");
    if (!in.adaptive() && !scheduled)
      CGP_RETURN_IF_ERROR(detail::rounds_answerable(in.rho(), engine, fleet.rho_capacity));
    if (!in.query_id().empty())
      CGP_RETURN_IF_ERROR(protocol::require_id("query_id", in.query_id()));
    const std::string id =
        in.query_id().empty() ? query_prefix + std::to_string(next_query++) : in.query_id();
    // Revoked devices take no part: the subject is everyone else.
    std::vector<coordinator::UserId> subject;
    if (!fleet.revoked.empty()) {
      for (std::uint64_t u = 0; u < fleet.users; ++u)
        if (!std::binary_search(fleet.revoked.begin(), fleet.revoked.end(), u))
          subject.push_back(static_cast<coordinator::UserId>(u));
      if (subject.empty())
        return make_error(ErrorCode::invalid_argument, "users",
                          "every user of this query is revoked");
    }
    if (fleet.users == 0)
      return make_error(ErrorCode::invalid_argument, "users", "users: no device is enrolled");
    // Checked now, before the intent is written, and again on the very gateways the query
    // starts on (one may have come or gone in between).
    CGP_RETURN_IF_ERROR(gateways_cover_fleet(control->gateways(), fleet));

    query.set_query_id(id);
    query.set_cap(in.adaptive() ? 0 : in.rho());
    query.set_adaptive(in.adaptive());
    query.set_adaptive_query(in.adaptive() ? fleet.adaptive_queries + 1 : 0);
    query.set_rho_capacity(fleet.rho_capacity);
    query.set_component_id(options.component_id);
    query.set_adaptive_horizon(options.adaptive_horizon);
    for (coordinator::UserId user : fleet.revoked) query.add_revoked(user);
    query.set_query_users(subject.empty() ? fleet.users : subject.size());
    // What every round of the query together may charge a user: its cap (Alg. 3's share is
    // decided per user on the gateways, never above the whole budget).
    const double worst = in.adaptive() ? fleet.rho_capacity : in.rho();
    CGP_RETURN_IF_ERROR(journal->begin(id, query.SerializeAsString(), in.adaptive(), worst));
    ++queries_run;
    auto merged = run_cluster_query(
        *control, query, fleet.users, subject,
        [this](std::span<const std::uint32_t> shards, std::uint64_t from_index) {
          return journal->users_of(shards, from_index);
        },
        [&fleet](const std::vector<AttachedGateway>& attached) {
          return gateways_cover_fleet(attached, fleet);
        });
    if (!merged) {
      // Kept as aborted (a store that is away is waited for): else GetResult would say
      // "running" until another leader aborts it.
      if (const cgp::Status kept = keep([&] { return journal->abort(id, merged.error()); }); !kept)
        log("event=query-abort-not-kept query=" + log_value(id) +
            " error=" + log_value(kept.error().to_string()));
      log("event=query-aborted query=" + log_value(id) +
          " error=" + log_value(merged.error().to_string()));
      return merged.error();
    }
    // The analyst gets a result only once it is kept: GetResult must always find what a query
    // returned. A store that is away (restarting) is waited for a while.
    const cgp::Status kept = keep([&] { return journal->finish(id, *merged); });
    if (!kept) {
      log("event=query-result-not-kept query=" + log_value(id) +
          " error=" + log_value(kept.error().to_string()));
      return make_error(ErrorCode::unavailable, "postgres",
                        "postgres: query " + id +
                            " ran (its charges stand) but its result could not be kept (" +
                            kept.error().message + "); ask again under a new id");
    }
    log("event=query id=" + log_value(id) + " kind=" + kind_of(query) +
        " rounds=" + std::to_string(merged->rounds_used()) +
        " unanswered=" + std::to_string(merged->unanswered_size()) +
        " answered=" + std::to_string(merged->coverage().answered()) + "/" +
        std::to_string(merged->coverage().users()) +
        (merged->degraded()
             ? " degraded=1 lost_shards=" + std::to_string(merged->lost_shards_size())
             : std::string()));
    if (options.metrics)
      options.metrics->observe_query(kind_of(query),
                                     merged->coverage().valid() && merged->missing().valid(),
                                     merged->seconds(), merged->degraded());
    detail::result_page(*merged, 0, options.result_page_entries, *out);
    return detail::judged_status(*merged, id);
  }

  // Range and KDE: an accuracy target, when given, is checked as the single process checks it.
  template <class Request>
  grpc::Status measured(grpc::ServerContext* context, const Request& request,
                        Request* (v1::ClusterQuery::*slot)(), v1::QueryResult* out) {
    return serve(context, [&]() -> cgp::Status {
      if (request.has_accuracy())
        CGP_RETURN_IF_ERROR(detail::validate_accuracy(request.accuracy(), true));
      v1::ClusterQuery query;
      *(query.*slot)() = request;
      return run(request.options(), request.has_accuracy(), std::move(query), out);
    });
  }
  grpc::Status RangeCount(grpc::ServerContext* context, const v1::RangeCountQuery* request,
                          v1::QueryResult* out) override {
    return measured(context, *request, &v1::ClusterQuery::mutable_range, out);
  }
  grpc::Status Kde(grpc::ServerContext* context, const v1::KdeQuery* request,
                   v1::QueryResult* out) override {
    return measured(context, *request, &v1::ClusterQuery::mutable_kde, out);
  }
  grpc::Status Knn(grpc::ServerContext* context, const v1::KnnQuery* request,
                   v1::QueryResult* out) override {
    return serve(context, [&]() -> cgp::Status {
      v1::ClusterQuery query;
      *query.mutable_knn() = *request;
      return run(request->options(), false, std::move(query), out);
    });
  }
  grpc::Status GetResult(grpc::ServerContext* context, const v1::ResultRequest* request,
                         v1::QueryResult* out) override {
    return serve(
        context,
        [&]() -> cgp::Status {
          CGP_RETURN_IF_ERROR(protocol::require_id("query_id", request->query_id()));
          CGP_ASSIGN_OR_RETURN(const v1::QueryResult full, journal->result(request->query_id()));
          detail::result_page(full, request->users_from(), options.result_page_entries, *out);
          return {};
        },
        grpc::StatusCode::NOT_FOUND);
  }
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest*,
                      v1::CoordinatorStatus* out) override {
    return serve(context, [&]() -> cgp::Status {
      CGP_ASSIGN_OR_RETURN(const QueryJournal::Fleet fleet, journal->fleet());
      out->set_enrolled(fleet.users - fleet.revoked.size());
      std::uint64_t reachable = 0;  // users of the shards of attached gateways
      for (const auto& gateway : control->gateways()) reachable += gateway.users;
      out->set_connected(reachable);
      out->set_device_budget(fleet.rho_capacity);
      out->set_queries(queries_run);
      return {};
    });
  }

  static cgp::Status not_in_live_tier(const char* what) {
    return make_error(ErrorCode::invalid_argument, what,
                      std::string(what) + ": not served by the live tier yet (docs/cluster.md)");
  }
  grpc::Status Threshold(grpc::ServerContext* context, const v1::ThresholdQuery*,
                         v1::QueryResult*) override {
    return serve(context, [] { return not_in_live_tier("threshold"); });
  }
  grpc::Status TopRegions(grpc::ServerContext* context, const v1::TopRegionsQuery*,
                          v1::QueryResult*) override {
    return serve(context, [] { return not_in_live_tier("top_regions"); });
  }
  grpc::Status StartWatch(grpc::ServerContext* context, const v1::StartWatchRequest*,
                          v1::WatchReport*) override {
    return serve(context, [] { return not_in_live_tier("watch"); });
  }
  grpc::Status GetWatch(grpc::ServerContext* context, const v1::WatchReportRequest*,
                        v1::WatchReport*) override {
    return serve(context, [] { return not_in_live_tier("watch"); });
  }
};

}  // namespace

struct ClusterAnalyst::Impl {
  ClusterEndpoint* endpoint = nullptr;  // owned by the listener
  std::unique_ptr<detail::AnalystListener> listener;
};

ClusterAnalyst::ClusterAnalyst(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClusterAnalyst::~ClusterAnalyst() = default;  // the listener stops its server first

int ClusterAnalyst::port() const noexcept {
  return impl_->listener->port();
}

std::uint64_t ClusterAnalyst::queries_run() const noexcept {
  return impl_->endpoint->queries_run;
}

Expected<std::unique_ptr<ClusterAnalyst>> ClusterAnalyst::start(ClusterAnalystOptions options,
                                                                ControlServer& control,
                                                                QueryJournal& journal) {
  if (options.result_page_entries == 0)
    return make_error(ErrorCode::out_of_range, "result_page_entries",
                      "result_page_entries must be at least 1");
  if (options.adaptive_horizon == 0)
    return make_error(ErrorCode::out_of_range, "horizon", "horizon must be at least 1");
  if (!options.log) options.log = [](const std::string&) {};
  auto endpoint = std::make_unique<ClusterEndpoint>();
  endpoint->options = std::move(options);
  endpoint->control = &control;
  endpoint->journal = &journal;
  auto impl = std::make_unique<Impl>();
  impl->endpoint = endpoint.get();
  const ClusterAnalystOptions& o = endpoint->options;
  CGP_ASSIGN_OR_RETURN(impl->listener, detail::AnalystListener::start(
                                           o.listen_address, o.limits, o.tls_certificate_chain,
                                           o.tls_private_key, std::move(endpoint), o.log));
  return std::unique_ptr<ClusterAnalyst>(new ClusterAnalyst(std::move(impl)));
}

}  // namespace cgp::transport
