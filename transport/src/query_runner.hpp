// The engine's half of an Analyst query, written once for the single-process coordinator
// (QueryDesk) and a gateway of the live tier (docs/cluster.md): a request of one kind → the
// engine's query over a fleet and its mirror (one shard of the fleet on a gateway: the
// QueryOptions' shard), the estimate, certificate and report filled into a cgp.v1.QueryResult.
// Users in the report are global: a shard's local user u is `ids[u]` (empty ids: u itself).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/charges.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/v1/analyst.pb.h"

namespace cgp::transport::detail {

struct QueryWork {
  coordinator::Fleet& fleet;
  coordinator::BudgetMirror& mirror;
  const coordinator::QueryOptions& query;
  const coordinator::UserCharges& charges;
  // Users the adaptive allocation left out as spent: users of the query all the same, for the
  // certified interval of an accuracy-first query.
  std::size_t users_not_asked = 0;
  std::span<const coordinator::UserId> ids;  // local → global user (empty: the same)
  // kNN neighbours are named by device id as well.
  std::function<std::string(coordinator::UserId global)> device_id_of;
};

// The engine options an analyst's options ask for: method, rounds, split, beta, shift (the
// rest — query id, component, shard — is the caller's).
Expected<coordinator::QueryOptions> engine_options(const v1::QueryOptions& in);

// An accuracy-first query's options: the analyst's, with the target's schedule.
Expected<std::pair<coordinator::AccuracyTarget, coordinator::AccuracyFirstOptions>>
accuracy_options(const v1::QueryOptions& in, const v1::AccuracyTarget& wire,
                 const coordinator::QueryOptions& query, std::size_t users_not_asked,
                 bool needs_target = true);

Status run_range_count(const v1::RangeCountQuery& request, const QueryWork& work,
                       v1::QueryResult& result);
Status run_kde(const v1::KdeQuery& request, const QueryWork& work, v1::QueryResult& result);
Status run_knn(const v1::KnnQuery& request, const QueryWork& work, v1::QueryResult& result);

// The users charged (by local id), sparse, mapped through `ids` (empty: the same).
void set_charges(std::span<const coordinator::Charge> charged,
                 std::span<const coordinator::UserId> ids, v1::QueryResult& out);

// The coverage and the missing users' interval of a finished result (`subject`: the query's
// users, empty = every one of `enrolled`; `engine_users`: what a density was divided by; `k`:
// kNN's), by the analyst's min_coverage and max_missing_share.
void judge_result(const v1::QueryOptions& in, std::string_view kind,
                  std::span<const coordinator::UserId> subject, std::size_t enrolled,
                  std::size_t engine_users, std::uint32_t k, v1::QueryResult& out);
// incomplete_query (naming min_coverage or max_missing_share) for a result judge_result found
// without a valid estimate.
Status judged_status(const v1::QueryResult& out, const std::string& query_id);

// A report's per-user lists and round counts into `out`, users mapped through `ids`.
template <class Report>
void fill_report(const Report& report, std::span<const coordinator::UserId> ids,
                 v1::QueryResult& out);

}  // namespace cgp::transport::detail
