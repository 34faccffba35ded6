#include "query_desk.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>

#include "analyst_validation.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/top_regions.hpp"
#include "cgp/protocol/log_format.hpp"
#include "coordinator_state.hpp"
#include "metrics_endpoint.hpp"
#include "query_runner.hpp"
#include "refusal_log.hpp"
#include "result_pages.hpp"

namespace cgp::transport {

using protocol::log_value;
using protocol::require_id;

namespace {
// "q-" and 16 hex digits from the OS random source, then the counter: unique across restarts
// (uniqueness is what matters here, not secrecy).
}  // namespace

std::string detail::random_query_prefix() {
  std::random_device entropy;
  const std::uint64_t bits = (std::uint64_t{entropy()} << 32) ^ entropy();
  char text[32];
  std::snprintf(text, sizeof text, "q-%016llx-", static_cast<unsigned long long>(bits));
  return text;
}

namespace {

// The gateway's monotonic counters under the names the state file keeps them by
// (open_connections is a gauge: not kept).
constexpr std::pair<const char*, std::uint64_t GatewayCounters::*> kKeptCounters[] = {
    {"connects", &GatewayCounters::connects},
    {"disconnects", &GatewayCounters::disconnects},
    {"refused_connections", &GatewayCounters::refused_connections},
    {"refused_total_cap", &GatewayCounters::refused_total_cap},
    {"refused_address_cap", &GatewayCounters::refused_address_cap},
    {"refused_descriptors", &GatewayCounters::refused_descriptors},
    {"refused_pending_streams", &GatewayCounters::refused_pending_streams},
    {"rounds", &GatewayCounters::rounds},
    {"requests", &GatewayCounters::requests},
    {"replies", &GatewayCounters::replies},
    {"unanswered", &GatewayCounters::unanswered},
    {"late_replies", &GatewayCounters::late_replies},
    {"rounds_to_deadline", &GatewayCounters::rounds_to_deadline},
    {"round_wait_microseconds", &GatewayCounters::round_wait_microseconds},
};

}  // namespace

void QueryDesk::log(const std::string& line) const {
  if (options.gateway.log) options.gateway.log(line);
}

QueryDesk::~QueryDesk() {
  metrics.reset();
  gateway.reset();
}

std::int64_t QueryDesk::unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void QueryDesk::trim_results() {
  while (result_order.size() > options.retention.max_results) {
    results.erase(result_order.front());
    result_order.pop_front();
  }
}

void QueryDesk::keep_result(const std::string& id, v1::QueryResult& result) {
  detail::sort_user_lists(result);  // pages are windows of user indices
  used_ids.insert(id);
  {
    std::lock_guard lock(results_mutex);
    if (results.count(id) == 0) result_order.push_back(id);
    results[id] = result;
    trim_results();
  }
  ++queries_run;
  if (!state) return;
  const auto now = unix_now();
  cgp::Status saved = state->save_result({id, result.SerializeAsString(), now});
  if (saved) saved = save_counters(counters());
  if (saved && queries_run % 64 == 0) {
    auto pruned = state->prune(options.retention.max_results, options.retention.max_age, now);
    if (!pruned) saved = pruned.error();
  }
  if (!saved) log("event=state-error error=" + log_value(saved.error().message));
}

GatewayCounters QueryDesk::counters() const {
  GatewayCounters total = gateway->counters();
  for (const auto& [name, field] : kKeptCounters) total.*field += counter_base.*field;
  return total;
}

cgp::Status QueryDesk::save_counters(const GatewayCounters& total) {
  std::vector<std::pair<std::string, std::uint64_t>> values{{"queries", queries_run.load()},
                                                            {"adaptive_queries", adaptive_queries}};
  for (const auto& [name, field] : kKeptCounters) values.emplace_back(name, total.*field);
  return state->set_counters(values);
}

void QueryDesk::watch_answered(const std::string& watch_id, const std::string& device_id,
                               const std::string& entry_bytes) {
  v1::DeviceWatch entry;
  if (!entry.ParseFromString(entry_bytes)) return;
  if (entry.state() == v1::DEVICE_WATCH_PENDING) return;
  std::lock_guard lock(holds_mutex);
  auto hold = watch_holds.find({watch_id, device_id});
  if (hold == watch_holds.end()) return;
  if (entry.state() != v1::DEVICE_WATCH_ARMED) released.push_back(hold->second);
  watch_holds.erase(hold);
}

void QueryDesk::give_back_holds(const std::string& watch_id,
                                const std::vector<std::pair<std::uint32_t, std::string>>& devices) {
  {
    std::lock_guard holds(holds_mutex);
    for (const auto& device : devices) {
      auto hold = watch_holds.find({watch_id, device.second});
      if (hold == watch_holds.end()) continue;
      released.push_back(hold->second);
      watch_holds.erase(hold);
    }
  }
  release_watch_holds();
}

void QueryDesk::release_watch_holds() {
  std::vector<std::pair<coordinator::UserId, coordinator::Charge>> due;
  {
    std::lock_guard lock(holds_mutex);
    due.swap(released);
  }
  for (const auto& [user, taken] : due) mirror->release(user, taken);
  if (!due.empty()) persist_mirror();
}

std::size_t QueryDesk::enrolled_not_revoked() {
  return roster.not_revoked();
}

void QueryDesk::take_new_users() {
  std::vector<std::string> joined = roster.ids_from(options.device_ids.size());
  if (joined.empty()) return;
  std::map<std::string, double> kept;
  if (state) {
    auto stored = state->mirror();
    if (!stored) {
      log("event=state-error error=" + log_value(stored.error().message) +
          " note=enrolled-devices-wait-for-the-next-query");
      return;
    }
    kept = std::move(*stored);
  }
  const std::size_t first = options.device_ids.size();
  mirror->add_users(joined.size());
  for (std::size_t k = 0; k < joined.size(); ++k) {
    const auto user = static_cast<coordinator::UserId>(first + k);
    auto row = kept.find(joined[k]);
    if (row != kept.end()) mirror->restore(user, row->second);
    // As restore() marks them: saved when the row holds this value, else at the next save.
    if (state) saved_mirror.push_back(row != kept.end() ? mirror->remaining(user) : -1.0);
  }
  options.device_ids.insert(options.device_ids.end(), joined.begin(), joined.end());
  fleet->add_devices(std::move(joined));
}

void QueryDesk::persist_mirror(const std::string* settled_query) {
  if (!state) return;
  if (auto saved = save_mirror(settled_query); !saved)
    log("event=state-error error=" + log_value(saved.error().message));
}

cgp::Status QueryDesk::save_mirror(const std::string* settled_query,
                                   std::vector<std::pair<std::string, double>> changed) {
  std::vector<std::size_t> users;
  for (std::size_t u = 0; u < saved_mirror.size(); ++u) {
    const double now = mirror->remaining(static_cast<coordinator::UserId>(u));
    if (now != saved_mirror[u]) {
      changed.emplace_back(options.device_ids[u], now);
      users.push_back(u);
    }
  }
  auto saved = settled_query ? state->settle(changed, *settled_query) : state->save_mirror(changed);
  // Marked saved only once committed: a failed write is tried again with the next save.
  if (saved)
    for (auto u : users) saved_mirror[u] = mirror->remaining(static_cast<coordinator::UserId>(u));
  return saved;
}

cgp::Status QueryDesk::record_intent(const coordinator::RoundRequest& round) {
  coordinator::worst_case_charges(round, intent_charges);
  intent_devices.clear();
  for (auto u : round.users)
    intent_devices.push_back(u < options.device_ids.size() ? &options.device_ids[u] : &kNoDevice);
  auto recorded = state->record_intent(round.query_id, round.round, intent_devices, intent_charges);
  if (!recorded) {
    log("event=state-error error=" + log_value(recorded.error().message));
    if (!intent_error) intent_error = recorded.error();
  }
  return recorded;
}

cgp::Status QueryDesk::restore() {
  auto stored = state->results();
  if (!stored) return stored.error();
  const auto now = unix_now();
  for (auto& each : *stored) {
    used_ids.insert(each.query_id);
    if (each.finished_unix < now - static_cast<std::int64_t>(options.retention.max_age.count()))
      continue;  // past the age bound (pruned from the file at the next prune)
    v1::QueryResult result;
    if (!result.ParseFromString(each.bytes)) continue;  // not ours to fail on: skipped
    if (result.charged_size() > 0) {                    // an older dense result: made sparse
      std::vector<coordinator::Charge> dense;
      for (double rho : result.charged()) dense.emplace_back(rho);
      detail::set_charges(dense, {}, result);
    }
    detail::sort_user_lists(result);
    result_order.push_back(each.query_id);
    results[each.query_id] = std::move(result);
  }
  trim_results();
  auto used = state->used_ids();
  if (!used) return used.error();
  used_ids.insert(used->begin(), used->end());
  auto run = state->counter("queries");
  if (!run) return run.error();
  queries_run = *run;
  auto adaptive = state->counter("adaptive_queries");
  if (!adaptive) return adaptive.error();
  adaptive_queries = static_cast<std::size_t>(*adaptive);
  for (const auto& [name, field] : kKeptCounters) {
    auto kept = state->counter(name);
    if (!kept) return kept.error();
    counter_base.*field = *kept;
  }
  auto kept = state->mirror();
  if (!kept) return kept.error();
  for (const auto& [id, remaining] : *kept)
    if (auto user = roster.find(id)) mirror->restore(*user, remaining);
  saved_mirror.resize(options.device_ids.size());
  for (std::size_t u = 0; u < saved_mirror.size(); ++u) {
    const auto user = static_cast<coordinator::UserId>(u);
    saved_mirror[u] = kept->count(options.device_ids[u]) > 0 ? mirror->remaining(user) : -1.0;
  }
  // Rounds a crash left without their replies: charged in the worst case, their ids kept,
  // then settled (one transaction), so that the next start does not charge them again.
  auto unsettled = state->intents();
  if (!unsettled) return unsettled.error();
  std::set<std::string> interrupted;
  // A device no longer enrolled keeps its row, charged the same way (it may be enrolled
  // again): a mirror of its own for those.
  std::map<std::string, coordinator::UserId> others;
  for (const auto& intent : *unsettled)
    if (!roster.find(intent.device_id))
      others.try_emplace(intent.device_id, static_cast<coordinator::UserId>(others.size()));
  coordinator::BudgetMirror others_mirror(others.size(), rho_capacity);
  for (const auto& [id, index] : others)
    if (auto row = kept->find(id); row != kept->end()) others_mirror.restore(index, row->second);
  for (const auto& intent : *unsettled) {
    used_ids.insert(intent.query_id);
    interrupted.insert(intent.query_id);
    if (auto user = roster.find(intent.device_id))
      mirror->charge_unsettled(*user, coordinator::Charge{intent.charge});
    else
      others_mirror.charge_unsettled(others.at(intent.device_id),
                                     coordinator::Charge{intent.charge});
  }
  std::vector<std::pair<std::string, double>> not_enrolled;
  for (const auto& [id, index] : others)
    not_enrolled.emplace_back(id, others_mirror.remaining(index));
  if (!interrupted.empty()) {
    static const std::string kEvery;
    CGP_RETURN_IF_ERROR(save_mirror(&kEvery, std::move(not_enrolled)));
    for (const auto& id : interrupted)
      log("event=query-interrupted id=" + log_value(id) +
          " (charged in the worst case: it did not finish before the last stop)");
  }
  return {};
}

Expected<QueryDesk::Prepared> QueryDesk::prepare(const v1::QueryOptions& in,
                                                 std::vector<coordinator::UserId> subject,
                                                 bool scheduled) {
  Prepared out;
  coordinator::QueryOptions& o = out.query;
  CGP_RETURN_IF_ERROR(detail::validate_query_options(in, rho_capacity));
  CGP_ASSIGN_OR_RETURN(o, detail::engine_options(in));
  o.component_id = options.component_id;
  if (!in.query_id().empty()) CGP_RETURN_IF_ERROR(require_id("query_id", in.query_id()));
  o.query_id = in.query_id().empty() ? query_prefix + std::to_string(next_query) : in.query_id();
  if (used_ids.count(o.query_id) > 0)  // every kept result's id is in used_ids too
    return make_error(ErrorCode::already_exists, "query_id",
                      "query_id '" + o.query_id + "' was already used");
  const std::size_t n = options.device_ids.size();
  out.subject = subject.empty()
                    ? std::vector<coordinator::UserId>(in.users().begin(), in.users().end())
                    : std::move(subject);
  for (auto u : out.subject)
    if (u >= n) return make_error(ErrorCode::out_of_range, "users", "a user index is ≥ enrolled");
  // A user listed twice is one user (a duplicate made a round wait out its deadline).
  std::sort(out.subject.begin(), out.subject.end());
  out.subject.erase(std::unique(out.subject.begin(), out.subject.end()), out.subject.end());
  const std::vector<char> revoked_now = roster.revoked_flags(n);
  if (std::count(revoked_now.begin(), revoked_now.end(), 1) > 0) {
    // Revoked devices take no part: "all" means all the others.
    if (out.subject.empty())
      for (std::size_t u = 0; u < n; ++u)
        out.subject.push_back(static_cast<coordinator::UserId>(u));
    std::erase_if(out.subject, [&](coordinator::UserId u) { return revoked_now[u] != 0; });
    if (out.subject.empty())
      return make_error(ErrorCode::invalid_argument, "users",
                        "every user of this query is revoked");
  }
  if (!in.adaptive()) {
    if (!scheduled) CGP_RETURN_IF_ERROR(detail::rounds_answerable(in.rho(), o, rho_capacity));
    const coordinator::Charge cap{in.rho()};
    out.charges = out.subject.empty() ? coordinator::UserCharges::everyone(cap)
                                      : coordinator::UserCharges::uniform(cap, out.subject);
  } else {
    // Alg. 3, open-ended, through the same path as the library's adaptive queries.
    auto ask = allocation.ask(adaptive_queries + 1, *mirror, out.subject);
    out.charges = std::move(ask.charges);
    out.exhausted = std::move(ask.exhausted);
  }
  return out;
}

template <class Run>
cgp::Status QueryDesk::run(const v1::QueryOptions& in, const char* kind, v1::QueryResult* out,
                           Run&& body, QueryShape shape) {
  std::lock_guard lock(query_mutex);
  release_watch_holds();
  take_new_users();
  auto prepared = prepare(in, std::move(shape.subject), shape.scheduled);
  if (!prepared) return prepared.error();
  const auto& query = prepared->query;
  const auto start = std::chrono::steady_clock::now();
  out->set_query_id(query.query_id);
  out->set_kind(kind);
  // Everyone spent: nothing is asked, and the coverage below reports the query as refused.
  const auto& charges = prepared->charges;
  const bool anyone_asked = charges.is_everyone() || !charges.listed().empty();
  ++next_query;  // used up even if the query fails: devices may have seen it
  exhausted_now = prepared->exhausted.size();
  if (anyone_asked) {
    intent_error.reset();
    const std::uint64_t rounds_before = fleet->rounds_begun();
    cgp::Status ran;
    try {
      ran = body(query, charges, *out);
    } catch (...) {
      // Rounds may have been sent: the id is taken and the mirror kept as it is; the unsettled
      // intents charge the rest at the next start.
      persist_mirror();
      used_ids.insert(query.query_id);
      throw;
    }
    // Refused before its first round (a region, a point or a grid the engine cannot take):
    // no device saw the id, nothing was charged, and the analyst may send it again, fixed.
    if (!ran.ok() && fleet->rounds_begun() == rounds_before) return ran.error();
    // A query that failed after its first round still charged devices: the mirror's view
    // of the charges is kept, whatever happens next, and its intents are settled with it.
    persist_mirror(&query.query_id);
    used_ids.insert(query.query_id);  // devices may hold it, whatever the outcome
    if (intent_error) return *intent_error;
    if (!ran.ok()) return ran.error();
  }
  for (auto u : prepared->exhausted) out->add_refused(u);
  out->set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (in.adaptive()) ++adaptive_queries;
  // What the engine divided a density by: accuracy-first queries count the users left out
  // as spent too (users_not_asked).
  const std::size_t engine_users =
      (charges.is_everyone() ? options.device_ids.size() : charges.listed().size()) +
      (out->has_certified() ? exhausted_now : 0);
  detail::judge_result(in, kind, prepared->subject, options.device_ids.size(), engine_users,
                       shape.k, *out);
  if (metrics)
    metrics->observe_query(kind, out->coverage().valid() && out->missing().valid(), out->seconds());
  if (out->users() == 0) out->set_users(static_cast<std::uint32_t>(options.device_ids.size()));
  keep_result(query.query_id, *out);
  // The analyst gets the first page; GetResult gives the rest.
  if (static_cast<std::size_t>(out->charges_size() + out->refused_size() + out->rejected_size() +
                               out->unanswered_size() + out->not_reached_size()) >
      options.result_page_entries) {
    const v1::QueryResult full = *out;
    detail::result_page(full, 0, options.result_page_entries, *out);
  }
  log("event=query id=" + log_value(query.query_id) + " kind=" + kind + " rounds=" +
      std::to_string(out->rounds_used()) + " unanswered=" + std::to_string(out->unanswered_size()) +
      " answered=" + std::to_string(out->coverage().answered()) + "/" +
      std::to_string(out->coverage().users()));
  return detail::judged_status(*out, query.query_id);
}

Expected<std::pair<coordinator::AccuracyTarget, coordinator::AccuracyFirstOptions>>
QueryDesk::accuracy_options(const v1::QueryOptions& in, const v1::AccuracyTarget& wire,
                            const coordinator::QueryOptions& query, bool needs_target) {
  return detail::accuracy_options(in, wire, query, exhausted_now, needs_target);
}

detail::QueryWork QueryDesk::work(const coordinator::QueryOptions& query,
                                  const coordinator::UserCharges& charges) {
  return {*fleet, *mirror, query, charges, exhausted_now, {}, [this](coordinator::UserId u) {
            return options.device_ids[u];
          }};
}

cgp::Status QueryDesk::range_count(const v1::RangeCountQuery* request, v1::QueryResult* out) {
  return run(request->options(), "range", out,
             [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
                 v1::QueryResult& result) {
               return detail::run_range_count(*request, work(query, charges), result);
             },
             {.subject = {}, .k = 0, .scheduled = request->has_accuracy()});
}

cgp::Status QueryDesk::kde(const v1::KdeQuery* request, v1::QueryResult* out) {
  return run(request->options(), "kde", out,
             [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
                 v1::QueryResult& result) {
               return detail::run_kde(*request, work(query, charges), result);
             },
             {.subject = {}, .k = 0, .scheduled = request->has_accuracy()});
}

cgp::Status QueryDesk::knn(const v1::KnnQuery* request, v1::QueryResult* out) {
  return run(request->options(), "knn", out,
             [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
                 v1::QueryResult& result) {
               return detail::run_knn(*request, work(query, charges), result);
             },
             {.subject = {}, .k = request->k(), .scheduled = false});
}

cgp::Status QueryDesk::threshold(const v1::ThresholdQuery* request, v1::QueryResult* out) {
  const auto user = roster.find(request->device_id());
  if (!user)
    return make_error(ErrorCode::invalid_argument, "device_id", "device_id is not enrolled");
  return run(request->options(), "threshold", out,
             [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
                 v1::QueryResult& result) -> cgp::Status {
               auto answer = coordinator::threshold(*fleet, *mirror, *user, request->q(),
                                                    request->population(), charges.cap(0), query);
               if (!answer) return answer.error();
               result.set_below(answer->below);
               detail::fill_report(answer->report, {}, result);
               return {};
             },
             {.subject = {*user}, .k = 0, .scheduled = false});
}

cgp::Status QueryDesk::top_regions(const v1::TopRegionsQuery* request, v1::QueryResult* out) {
  return run(
      request->options(), "top-regions", out,
      [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
          v1::QueryResult& result) -> cgp::Status {
        if (request->regions_size() > 10000)
          return make_error(ErrorCode::too_large, "regions", "regions: at most 10000 candidates");
        std::vector<geometry::Region> regions;
        for (int g = 0; g < request->regions_size(); ++g) {
          auto region = wire::region_from_wire(request->regions(g));
          if (!region)
            return make_error(region.error().code,
                              indexed_name("regions", static_cast<std::size_t>(g)),
                              indexed_name("regions", static_cast<std::size_t>(g)) + ": " +
                                  region.error().message);
          regions.push_back(std::move(*region));
        }
        coordinator::QueryOptions as_point = query;
        if (request->options().method().empty()) as_point.method = coordinator::Method::PM0;
        CGP_ASSIGN_OR_RETURN(const auto schedule,
                             accuracy_options(request->options(), request->schedule(), as_point,
                                              /*needs_target=*/false));
        CGP_ASSIGN_OR_RETURN(const auto race,
                             coordinator::top_regions(*fleet, *mirror, regions, request->k(),
                                                      charges, schedule.second));
        for (std::size_t g : race.top) result.add_top_regions(static_cast<std::uint32_t>(g));
        for (const auto& c : race.counts) {
          auto* wire_count = result.add_region_counts();
          wire_count->set_region(static_cast<std::uint32_t>(c.region));
          wire_count->set_estimate(c.estimate);
          wire_count->set_lower(c.lower);
          wire_count->set_upper(c.upper);
        }
        result.set_certified(race.certified);
        detail::fill_report(race.report, {}, result);
        return {};
      },
      {.subject = {}, .k = 0, .scheduled = true});
}

cgp::Status QueryDesk::get_result(const v1::ResultRequest* request, v1::QueryResult* out) {
  std::lock_guard lock(results_mutex);  // not the query lock: a running query never delays it
  auto it = results.find(request->query_id());
  if (it == results.end())
    return Error{ErrorCode::invalid_argument, "query_id",
                 "query_id: no finished query has this id (or it is past the retention bound)"};
  detail::result_page(it->second, request->users_from(), options.result_page_entries, *out);
  return {};
}

std::vector<std::string> QueryDesk::recent_result_ids(std::size_t count) const {
  std::lock_guard lock(results_mutex);
  std::vector<std::string> ids;
  for (auto it = result_order.rbegin(); it != result_order.rend() && ids.size() < count; ++it)
    if (results.count(*it) != 0) ids.push_back(*it);
  return ids;
}

bool QueryDesk::read_result(const std::string& id,
                            const std::function<void(const v1::QueryResult&)>& read) const {
  std::lock_guard lock(results_mutex);
  const auto it = results.find(id);
  if (it == results.end()) return false;
  read(it->second);
  return true;
}

cgp::Status QueryDesk::start_watch(const v1::StartWatchRequest* request, v1::WatchReport* out) {
  v1::WatchSpec spec = request->spec();
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (spec.tick_seconds() > 0 && spec.start_unix_seconds() == 0) spec.set_start_unix_seconds(now);
  auto validated = wire::watch_from_wire(spec);
  if (!validated) return validated.error();
  if (auto runnable = runnable_on_devices(*validated, now); !runnable) return runnable.error();
  std::vector<std::pair<std::uint32_t, std::string>> devices;
  {
    std::lock_guard lock(query_mutex);
    take_new_users();
    auto chosen =
        watch_devices(std::vector<std::uint32_t>(request->users().begin(), request->users().end()));
    if (!chosen) return chosen.error();
    devices = std::move(*chosen);
    if (gateway->watch_report(spec.watch_id()))
      return make_error(ErrorCode::already_exists, "watch_id",
                        "watch_id '" + spec.watch_id() + "' was already used");
    // Held until each device answers: kept when it arms, given back when it refuses or
    // rejects (it charged nothing; release_watch_holds).
    release_watch_holds();
    const coordinator::Charge charge{laplace_watch_charge(validated->params().epsilon)};
    {
      std::lock_guard holds(holds_mutex);
      for (const auto& device : devices)
        watch_holds[{spec.watch_id(), device.second}] = {device.first,
                                                         mirror->hold(device.first, charge)};
    }
    // The holds are on disk before the spec leaves: a watch armed on a device is never
    // missing from the mirror a restart reads.
    if (state)
      if (auto saved = save_mirror(nullptr); !saved) {
        give_back_holds(spec.watch_id(), devices);
        return saved.error();
      }
    if (auto started = gateway->start_watch(spec, devices); !started.ok()) {
      give_back_holds(spec.watch_id(), devices);
      return started.error();
    }
  }
  log("event=watch-start watch=" + log_value(spec.watch_id()) +
      " users=" + std::to_string(devices.size()));
  auto report = gateway->watch_report(spec.watch_id());
  if (!report) return report.error();
  *out = std::move(*report);
  return {};
}

Expected<std::vector<std::pair<std::uint32_t, std::string>>> QueryDesk::watch_devices(
    std::vector<std::uint32_t> users) const {
  const std::size_t n = options.device_ids.size();
  const std::vector<char> revoked_now = roster.revoked_flags(n);
  const bool everyone = users.empty();
  if (everyone)
    for (std::size_t u = 0; u < n; ++u) users.push_back(static_cast<std::uint32_t>(u));
  std::sort(users.begin(), users.end());
  users.erase(std::unique(users.begin(), users.end()), users.end());
  std::vector<std::pair<std::uint32_t, std::string>> devices;
  for (std::uint32_t u : users) {
    if (u >= n)
      return make_error(ErrorCode::out_of_range, "users",
                        "users: index " + std::to_string(u) + " is not below the " +
                            std::to_string(n) + " enrolled");
    if (revoked_now[u] == 0)
      devices.emplace_back(u, options.device_ids[u]);
    else if (!everyone)
      return make_error(
          ErrorCode::invalid_argument, "users",
          "users: user " + std::to_string(u) + " (" + options.device_ids[u] + ") is revoked");
  }
  if (devices.empty())
    return make_error(ErrorCode::invalid_argument, "users",
                      "users: every user of this watch is revoked");
  return devices;
}

cgp::Status QueryDesk::runnable_on_devices(const WatchSpec& spec, double now) const {
  const auto& p = spec.params();
  if (!spec.has_schedule())
    return make_error(ErrorCode::missing_field, "tick_seconds",
                      "tick_seconds: a watch over the network needs a tick length (> 0)");
  if (!(p.tick_seconds >= options.watch_min_tick_seconds))
    return make_error(ErrorCode::out_of_range, "tick_seconds",
                      "tick_seconds " + format_number(p.tick_seconds) +
                          " is below the devices' shortest tick (" +
                          format_number(options.watch_min_tick_seconds) + " s)");
  if (p.start_unix_seconds + static_cast<double>(p.horizon) * p.tick_seconds <= now)
    return make_error(ErrorCode::out_of_range, "start_unix_seconds",
                      "start_unix_seconds: the watch's schedule has already ended");
  if (spec.noise() != WatchNoise::laplace)
    return make_error(ErrorCode::invalid_argument, "noise",
                      "noise: devices run laplace watches only (gaussian_expost is not "
                      "available on devices yet)");
  auto config = DeviceConfig::cgp(options.device_budget);
  if (!config) return config.error();
  const double charge = laplace_watch_charge(p.epsilon);
  if (!(charge >= privacy::min_rho(config->rho_capacity())))
    return make_error(ErrorCode::out_of_range, "epsilon",
                      "epsilon " + format_number(p.epsilon) + " would charge rho " +
                          format_number(charge) + ", below what devices answer (" +
                          format_number(privacy::min_rho(config->rho_capacity())) + ")");
  if (!(charge <= config->rho_capacity()))
    return make_error(ErrorCode::out_of_range, "epsilon",
                      "epsilon " + format_number(p.epsilon) + " would charge rho " +
                          format_number(charge) + ", more than a device's whole budget (" +
                          format_number(config->rho_capacity()) + ")");
  return {};
}

cgp::Status QueryDesk::get_watch(const v1::WatchReportRequest* request, v1::WatchReport* out) {
  auto report = gateway->watch_report(request->watch_id());
  if (!report) return report.error();
  *out = std::move(*report);
  return {};
}

cgp::Status QueryDesk::status(const v1::StatusRequest*, v1::CoordinatorStatus* out) {
  out->set_enrolled(enrolled_not_revoked());
  out->set_connected(gateway->connected());
  out->set_dimension(options.dimension);
  out->set_device_budget(options.device_budget);
  // Without the query lock: status answers while a query runs.
  out->set_queries(queries_run.load());
  const GatewayCounters c = counters();
  out->set_rounds(c.rounds);
  out->set_requests(c.requests);
  out->set_replies(c.replies);
  out->set_unanswered(c.unanswered);
  out->set_late_replies(c.late_replies);
  out->set_refused_connections(c.refused_connections);
  return {};
}

}  // namespace cgp::transport
