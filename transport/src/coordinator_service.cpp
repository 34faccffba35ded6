#include "cgp/transport/coordinator_service.hpp"

#include <grpcpp/grpcpp.h>

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

#include "analyst_listener.hpp"
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
#include "cgp/protocol/status_codec.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "cgp/v1/device_gateway.grpc.pb.h"
#include "coordinator_state.hpp"
#include "header_time_service.hpp"
#include "metrics_endpoint.hpp"
#include "refusal_log.hpp"
#include "result_pages.hpp"

namespace cgp::transport {

using protocol::log_value;
using protocol::require_id;

namespace {

constexpr const char* kCredentialHeader = "cgp-analyst-credential";

// Every error crosses the wire through status_codec.hpp: a kind (gRPC code), the cgp code in
// trailing metadata, "parameter: message".
grpc::Status to_status(grpc::ServerContextBase* context, const Error& error) {
  return protocol::to_grpc_status(context, error);
}

grpc::Status unauthenticated(grpc::ServerContextBase* context) {
  return protocol::to_grpc_status(
      context, Error{ErrorCode::unauthenticated, "credential",
                     "credential: the analyst credential is missing or refused"});
}

// "q-" and 16 hex digits from the OS random source, then the counter: unique across restarts
// (uniqueness is what matters here, not secrecy).
std::string random_query_prefix() {
  std::random_device entropy;
  const std::uint64_t bits = (std::uint64_t{entropy()} << 32) ^ entropy();
  char text[32];
  std::snprintf(text, sizeof text, "q-%016llx-", static_cast<unsigned long long>(bits));
  return text;
}

constexpr double kDefaultMinCoverage = 0.9;
constexpr double kDefaultMaxMissingShare = 0.1;

// What the users who did not answer allow (MissingUsers in service.proto): `engine_users`, the
// users the engine divided by (KDE), `k` the neighbours a kNN asked for.
v1::MissingUsers missing_of(const v1::QueryResult& result, std::string_view kind,
                            std::size_t engine_users, std::uint32_t k, double max_share) {
  v1::MissingUsers out;
  const std::uint32_t users = result.coverage().users();
  const std::uint32_t missing = users - result.coverage().answered();
  const auto m = static_cast<double>(missing);
  out.set_users(missing);
  double lower = 0, upper = m, share = users > 0 ? m / static_cast<double>(users) : 0;
  if (kind == "range") {
    lower = result.estimate();
    upper = lower + m;
  } else if (kind == "kde" && users > 0) {
    const double kernels = result.estimate() * static_cast<double>(engine_users);
    lower = kernels / static_cast<double>(users);
    upper = (kernels + m) / static_cast<double>(users);
  } else if (kind == "knn" && k > 0) {
    upper = std::min(m, static_cast<double>(k));
    share = upper / static_cast<double>(k);
  }
  if (kind == "range" || kind == "kde") share = upper > 0 ? (upper - lower) / upper : 0;
  // An estimate that is not a number says nothing: all of it is unknown.
  if (!(std::isfinite(lower) && std::isfinite(upper) && std::isfinite(share))) share = 1;
  out.set_lower(lower);
  out.set_upper(upper);
  out.set_share(share);
  out.set_max_share(max_share);
  out.set_valid(share <= max_share);
  return out;
}

// Every user of the query once: refused, else rejected, else unanswered, else answered.
// `users`: the query's users (empty = all `enrolled`).
v1::Coverage coverage_of(const v1::QueryResult& result, std::span<const coordinator::UserId> users,
                         std::size_t enrolled, double min_coverage) {
  // 1: a user of this query not yet counted; 0: counted, or not part of the query.
  std::vector<char> open(enrolled, users.empty() ? 1 : 0);
  for (auto u : users) open[u] = 1;
  const auto queried = static_cast<std::uint32_t>(std::count(open.begin(), open.end(), 1));
  v1::Coverage out;
  auto count = [&](const auto& list) {
    std::uint32_t n = 0;
    for (auto u : list) {
      if (u < enrolled && open[u]) {
        open[u] = 0;
        ++n;
      }
    }
    return n;
  };
  out.set_refused(count(result.refused()));
  out.set_rejected(count(result.rejected()));
  out.set_unanswered(count(result.unanswered()));
  out.set_users(queried);
  out.set_answered(queried - out.refused() - out.rejected() - out.unanswered());
  out.set_min_coverage(min_coverage);
  out.set_valid(static_cast<double>(out.answered()) >= min_coverage * static_cast<double>(queried));
  return out;
}

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

// The users a query charged, sparse (issue 36: a result grows with the users it touched).
void set_charges(const std::vector<double>& charged, v1::QueryResult& out) {
  out.clear_charged();
  out.clear_charges();
  out.set_users(static_cast<std::uint32_t>(charged.size()));
  for (std::size_t u = 0; u < charged.size(); ++u) {
    if (!(charged[u] > 0)) continue;
    auto* charge = out.add_charges();
    charge->set_user(static_cast<std::uint32_t>(u));
    charge->set_rho(charged[u]);
  }
}

template <class Report>
void fill_report(const Report& report, v1::QueryResult& out) {
  out.set_rounds_used(static_cast<std::uint32_t>(report.rounds_used));
  for (auto a : report.asked_per_round) out.add_asked_per_round(a);
  for (auto e : report.eliminated_per_round) out.add_eliminated_per_round(e);
  set_charges(report.charged, out);
  out.mutable_refused()->Assign(report.refused.begin(), report.refused.end());
  out.mutable_rejected()->Assign(report.rejected.begin(), report.rejected.end());
  out.mutable_unanswered()->Assign(report.unanswered.begin(), report.unanswered.end());
  out.mutable_not_reached()->Assign(report.not_reached.begin(), report.not_reached.end());
}

}  // namespace

// The service's state and handlers; CoordinatorService::Impl is this under the header's name.
struct ServiceCore {
  // The gateway serves analyst calls as soon as it listens, before start() has made the fleet
  // and the metrics: until then every call is UNAVAILABLE.
  std::atomic<bool> ready{false};
  CoordinatorOptions options;
  std::unique_ptr<DeviceGateway> gateway;
  std::unique_ptr<detail::AnalystListener> analyst_listener;  // with analyst_address
  std::unique_ptr<detail::MetricsEndpoint> metrics;
  std::unique_ptr<NetworkFleet> fleet;
  std::map<std::string, coordinator::UserId> user_of_device;

  std::mutex query_mutex;  // queries run one at a time: they share the mirror
  std::unique_ptr<coordinator::BudgetMirror> mirror;
  double rho_capacity = 1.0;  // every device's budget (from --budget), in ρ
  coordinator::AdaptiveBudget allocation = *coordinator::AdaptiveBudget::open_ended(1.0, 1);
  std::size_t adaptive_queries = 0;
  std::uint64_t next_query = 1;
  // Devices keep (query id, round) → reply in their ledgers across coordinator restarts: a
  // counter from 1 would reuse ids and get old answers or request_conflict from every device.
  const std::string query_prefix = random_query_prefix();
  // Finished results: their own lock, so that GetResult never waits for a running query.
  mutable std::mutex results_mutex;
  std::map<std::string, v1::QueryResult> results;
  std::deque<std::string> result_order;  // oldest first, for the retention bound
  // Every id a query ran under, kept past its result: devices keep (id, round) in their
  // ledgers, so an id is never reused even after its result was pruned.
  std::set<std::string, std::less<>> used_ids;
  std::atomic<std::uint64_t> queries_run{0};  // read by Status without the query lock
  std::size_t exhausted_now = 0;              // the running query's users left out as spent
  // What earlier runs counted (from the state file): counters are totals over the coordinator's
  // life, as dashboards and Prometheus expect, not since the last start.
  GatewayCounters counter_base;
  std::unique_ptr<detail::CoordinatorState> state;  // results and mirror beyond memory
  std::vector<double> saved_mirror;                 // what `state` holds, to save changes only

  void log(const std::string& line) const {
    if (options.gateway.log) options.gateway.log(line);
  }

  // The server goes first: no handler may run while the members it uses are destroyed.
  ~ServiceCore() {
    metrics.reset();
    analyst_listener.reset();
    gateway.reset();
  }

  static std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // Drops the oldest results beyond the retention count (memory; the file is pruned apart).
  void trim_results() {
    while (result_order.size() > options.retention.max_results) {
      results.erase(result_order.front());
      result_order.pop_front();
    }
  }

  // Keeps a finished result in memory and in the state file, within the retention bound.
  void keep_result(const std::string& id, v1::QueryResult& result) {
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

  // Totals: this run's on top of what earlier runs counted.
  GatewayCounters counters() const {
    GatewayCounters total = gateway->counters();
    for (const auto& [name, field] : kKeptCounters) total.*field += counter_base.*field;
    return total;
  }

  cgp::Status save_counters(const GatewayCounters& total) {
    std::vector<std::pair<std::string, std::uint64_t>> values{
        {"queries", queries_run.load()}, {"adaptive_queries", adaptive_queries}};
    for (const auto& [name, field] : kKeptCounters) values.emplace_back(name, total.*field);
    return state->set_counters(values);
  }

  // Watch holds: what StartWatch took from the mirror for each (watch id, device id)
  // not yet armed. A device's refusal or rejection (reported from gateway threads) moves its
  // hold to `released`; the query lock gives those back to the mirror (release_watch_holds).
  std::mutex holds_mutex;
  std::map<std::pair<std::string, std::string>, std::pair<coordinator::UserId, double>> watch_holds;
  std::vector<std::pair<coordinator::UserId, double>> released;

  void watch_answered(const std::string& watch_id, const std::string& device_id,
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

  // Under the query lock, for a watch that was not sent: every hold goes back.
  void give_back_holds(const std::string& watch_id,
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

  // Under the query lock: the holds of devices that refused or rejected a watch go back.
  void release_watch_holds() {
    std::vector<std::pair<coordinator::UserId, double>> due;
    {
      std::lock_guard lock(holds_mutex);
      due.swap(released);
    }
    for (const auto& [user, taken] : due) mirror->release(user, taken);
    if (!due.empty()) persist_mirror();
  }

  std::size_t enrolled_not_revoked() {
    std::lock_guard lock(revoked_mutex);
    return revoked.size() - static_cast<std::size_t>(std::count(revoked.begin(), revoked.end(), 1));
  }

  // The mirror on disk after every query that asked devices (successful or not), so that a
  // restart never forgets a charge it saw; `settled_query`: a query whose replies are now
  // folded in, whose intents go in the same transaction.
  void persist_mirror(const std::string* settled_query = nullptr) {
    if (!state) return;
    if (auto saved = save_mirror(settled_query); !saved)
      log("event=state-error error=" + log_value(saved.error().message));
  }

  cgp::Status save_mirror(const std::string* settled_query,
                          std::vector<std::pair<std::string, double>> changed = {}) {
    std::vector<std::size_t> users;
    for (std::size_t u = 0; u < saved_mirror.size(); ++u) {
      const double now = mirror->remaining(static_cast<coordinator::UserId>(u));
      if (now != saved_mirror[u]) {
        changed.emplace_back(options.device_ids[u], now);
        users.push_back(u);
      }
    }
    auto saved =
        settled_query ? state->settle(changed, *settled_query) : state->save_mirror(changed);
    // Marked saved only once committed: a failed write is tried again with the next save.
    if (saved)
      for (auto u : users) saved_mirror[u] = mirror->remaining(static_cast<coordinator::UserId>(u));
    return saved;
  }

  // Issue 33, intents before rounds: what a round can charge each of its users is on disk
  // before any request leaves (NetworkFleet's gate), so that a restart after a crash mid-query
  // charges it (restore) and the mirror never rises above a device's ledger.
  std::optional<Error> intent_error;  // the current query's: its rounds were not sent
  std::vector<double> intent_charges;
  std::vector<const std::string*> intent_devices;
  cgp::Status record_intent(const coordinator::RoundRequest& round) {
    coordinator::worst_case_charges(round, intent_charges);
    intent_devices.clear();
    for (auto u : round.users)
      intent_devices.push_back(u < options.device_ids.size() ? &options.device_ids[u] : &kNoDevice);
    auto recorded =
        state->record_intent(round.query_id, round.round, intent_devices, intent_charges);
    if (!recorded) {
      log("event=state-error error=" + log_value(recorded.error().message));
      if (!intent_error) intent_error = recorded.error();
    }
    return recorded;
  }
  static inline const std::string kNoDevice;

  // At start: results, counters and the mirror as the last run left them.
  cgp::Status restore() {
    auto stored = state->results();
    if (!stored) return stored.error();
    const auto now = unix_now();
    for (auto& each : *stored) {
      used_ids.insert(each.query_id);
      if (each.finished_unix < now - static_cast<std::int64_t>(options.retention.max_age.count()))
        continue;  // past the age bound (pruned from the file at the next prune)
      v1::QueryResult result;
      if (!result.ParseFromString(each.bytes)) continue;  // not ours to fail on: skipped
      if (result.charged_size() > 0) {                    // written before issue 36: made sparse
        const std::vector<double> dense(result.charged().begin(), result.charged().end());
        set_charges(dense, result);
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
      if (auto user = user_of_device.find(id); user != user_of_device.end())
        mirror->restore(user->second, remaining);
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
      if (user_of_device.count(intent.device_id) == 0)
        others.try_emplace(intent.device_id, static_cast<coordinator::UserId>(others.size()));
    coordinator::BudgetMirror others_mirror(others.size(), rho_capacity);
    for (const auto& [id, index] : others)
      if (auto row = kept->find(id); row != kept->end()) others_mirror.restore(index, row->second);
    for (const auto& intent : *unsettled) {
      used_ids.insert(intent.query_id);
      interrupted.insert(intent.query_id);
      if (auto user = user_of_device.find(intent.device_id); user != user_of_device.end())
        mirror->charge_unsettled(user->second, intent.charge);
      else
        others_mirror.charge_unsettled(others.at(intent.device_id), intent.charge);
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
  // Per user: revoked, left out of every later query. Its own lock: a revoke must not wait for
  // a running query.
  std::mutex revoked_mutex;
  std::vector<char> revoked;

  bool authorised(grpc::ServerContextBase* context) const {
    if (!options.analyst_credential_sha256) return true;
    const auto& metadata = context->client_metadata();
    auto it = metadata.find(kCredentialHeader);
    return it != metadata.end() && credential_matches({it->second.data(), it->second.size()},
                                                      *options.analyst_credential_sha256);
  }

  // What prepare() makes of an analyst's options: the engine's options, whom the query asks and
  // the most it charges each, and the users left out because the mirror shows them spent.
  struct Prepared {
    coordinator::QueryOptions query;
    std::vector<coordinator::UserId> subject;  // the users the analyst's query is over (empty: all)
    coordinator::UserCharges charges;          // lists nobody when every user is spent
    std::vector<coordinator::UserId> exhausted;
  };

  // Checks the common options and turns them into the query's options and per-user charges.
  // `subject`: the users a query is about by its nature (threshold: one device); else in.users.
  Expected<Prepared> prepare(const v1::QueryOptions& in, std::vector<coordinator::UserId> subject,
                             bool scheduled) {
    Prepared out;
    coordinator::QueryOptions& o = out.query;
    CGP_RETURN_IF_ERROR(detail::validate_query_options(in, rho_capacity));
    if (!in.method().empty()) {
      auto method = coordinator::parse_method(in.method());
      if (!method) return method.error();
      o.method = *method;
    }
    if (in.rounds() > 0) o.rounds = in.rounds();
    if (!in.split().empty()) {
      auto split = privacy::parse_split_schedule(in.split());
      if (!split) return split.error();
      o.split = *split;
    }
    if (in.beta() != 0) o.beta = in.beta();
    o.shift = !in.no_shift();
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
    std::vector<char> revoked_now;
    {
      std::lock_guard lock(revoked_mutex);
      revoked_now = revoked;
    }
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
      if (!scheduled) CGP_RETURN_IF_ERROR(rounds_answerable(in.rho(), o));
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

  // What a query kind adds to run(): the users it is about by its nature (threshold: its one
  // device), and kNN's k.
  struct QueryShape {
    std::vector<coordinator::UserId> subject;
    std::uint32_t k = 0;
    // Accuracy-first and top regions: a geometric schedule whose first round is raised to what
    // devices answer (accuracy_schedule), not the c-round split of QueryOptions.
    bool scheduled = false;
  };

  // A plain query splits its ρ over c rounds (PM methods): its smallest round must still be a ρ
  // devices answer, or the query would travel to every device for nothing but rejections.
  cgp::Status rounds_answerable(double cap, const coordinator::QueryOptions& o) const {
    const std::size_t rounds = coordinator::eliminates(o.method) ? o.rounds : 1;
    auto fractions = privacy::split_budget(1.0, rounds, o.split);
    if (!fractions) return fractions.error();
    const double smallest_fraction = *std::min_element(fractions->begin(), fractions->end());
    // The engine's own shave (1 − 2^-40) is well inside the 2^-30 kept here.
    const double smallest = privacy::rho_within_charge(cap) * smallest_fraction * (1 - 0x1p-30);
    if (smallest < privacy::min_rho(rho_capacity))
      return make_error(ErrorCode::out_of_range, "rho",
                        "rho " + format_number(cap) + " over " + std::to_string(rounds) +
                            " rounds asks as little as " + format_number(smallest) +
                            " in a round, below what devices answer (" +
                            format_number(privacy::min_rho(rho_capacity)) +
                            "): raise rho or lower the rounds");
    return {};
  }

  template <class Run>
  grpc::Status run(grpc::ServerContextBase* context, const v1::QueryOptions& in, const char* kind,
                   v1::QueryResult* out, Run&& body, QueryShape shape = {}) {
    if (!authorised(context)) return unauthenticated(context);
    std::lock_guard lock(query_mutex);
    release_watch_holds();
    auto prepared = prepare(in, std::move(shape.subject), shape.scheduled);
    if (!prepared) return to_status(context, prepared.error());
    const auto& query = prepared->query;
    const double min_coverage = in.has_min_coverage() ? in.min_coverage() : kDefaultMinCoverage;
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
      // A query that failed after its first round still charged devices: the mirror's view
      // of the charges is kept, whatever happens next, and its intents are settled with it.
      persist_mirror(&query.query_id);
      used_ids.insert(query.query_id);  // devices may hold it, whatever the outcome
      if (intent_error) return to_status(context, *intent_error);
      if (!ran.ok()) return to_status(context, ran.error());
    }
    for (auto u : prepared->exhausted) out->add_refused(u);
    out->set_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (in.adaptive()) ++adaptive_queries;
    // Users whose replies could not count are a coverage and an interval, never an estimate
    // that looks fine.
    *out->mutable_coverage() =
        coverage_of(*out, prepared->subject, options.device_ids.size(), min_coverage);
    // What the engine divided a density by: accuracy-first queries count the users left out
    // as spent too (users_not_asked).
    const std::size_t engine_users =
        (charges.is_everyone() ? options.device_ids.size() : charges.listed().size()) +
        (out->has_certified() ? exhausted_now : 0);
    *out->mutable_missing() =
        missing_of(*out, kind, engine_users, shape.k,
                   in.has_max_missing_share() ? in.max_missing_share() : kDefaultMaxMissingShare);
    if (metrics)
      metrics->observe_query(kind, out->coverage().valid() && out->missing().valid(),
                             out->seconds());
    if (out->users() == 0) out->set_users(static_cast<std::uint32_t>(options.device_ids.size()));
    keep_result(query.query_id, *out);
    // The analyst gets the first page; GetResult gives the rest.
    if (static_cast<std::size_t>(out->charges_size() + out->refused_size() + out->rejected_size() +
                                 out->unanswered_size() + out->not_reached_size()) >
        options.result_page_entries) {
      const v1::QueryResult full = *out;
      detail::result_page(full, 0, options.result_page_entries, *out);
    }
    log("event=query id=" + log_value(query.query_id) + " kind=" + kind +
        " rounds=" + std::to_string(out->rounds_used()) +
        " unanswered=" + std::to_string(out->unanswered_size()) + " answered=" +
        std::to_string(out->coverage().answered()) + "/" + std::to_string(out->coverage().users()));
    if (!out->coverage().valid()) {
      const auto& c = out->coverage();
      return to_status(
          context,
          make_error(ErrorCode::incomplete_query, "min_coverage",
                     "only " + std::to_string(c.answered()) + " of " + std::to_string(c.users()) +
                         " users answered (refused " + std::to_string(c.refused()) + ", rejected " +
                         std::to_string(c.rejected()) + ", unanswered " +
                         std::to_string(c.unanswered()) + "), below min_coverage " +
                         format_number(min_coverage) + ": query " + query.query_id +
                         " has no valid estimate (GetResult shows what was reached)"));
    }
    if (!out->missing().valid()) {
      const auto& m = out->missing();
      return to_status(
          context,
          make_error(ErrorCode::incomplete_query, "max_missing_share",
                     std::to_string(m.users()) + " users did not answer: the answer lies in [" +
                         format_number(m.lower()) + ", " + format_number(m.upper()) +
                         "] as far as they go, a share " + format_number(m.share()) +
                         " above max_missing_share " + format_number(m.max_share()) + ": query " +
                         query.query_id +
                         " has no valid estimate (GetResult shows what was reached)"));
    }
    return grpc::Status::OK;
  }

  // An accuracy-first query's options: the analyst's, with the target's schedule.
  Expected<std::pair<coordinator::AccuracyTarget, coordinator::AccuracyFirstOptions>>
  accuracy_options(const v1::QueryOptions& in, const v1::AccuracyTarget& wire,
                   const coordinator::QueryOptions& query, bool needs_target = true) {
    if (in.rounds() != 0 || !in.split().empty())
      return make_error(ErrorCode::invalid_argument, "rounds",
                        "rounds and split do not apply to accuracy-first queries: set "
                        "accuracy.max_rounds and accuracy.growth");
    CGP_RETURN_IF_ERROR(detail::validate_accuracy(wire, needs_target));
    coordinator::AccuracyFirstOptions o;
    o.method = query.method;
    if (wire.max_rounds() > 0) o.max_rounds = wire.max_rounds();
    if (wire.growth() != 0) o.growth = wire.growth();
    o.first = wire.first();
    o.beta = query.beta;
    o.shift = query.shift;
    o.query_id = query.query_id;
    o.component_id = query.component_id;
    // Users the adaptive allocation left out as spent are users of the query all the same: the
    // certified interval leaves room for each of them.
    o.users_not_asked = exhausted_now;
    return std::pair{coordinator::AccuracyTarget{wire.relative(), wire.absolute()}, o};
  }

  static void fill_certificate(const coordinator::CertifiedEstimate& c, v1::QueryResult& result) {
    result.set_estimate(c.estimate);
    result.set_lower(c.lower);
    result.set_upper(c.upper);
    result.set_certified(c.certified);
    fill_report(c.report, result);
  }

  grpc::Status RangeCount(grpc::ServerContextBase* context, const v1::RangeCountQuery* request,
                          v1::QueryResult* out) {
    return run(context, request->options(), "range", out,
               [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
                   v1::QueryResult& result) -> cgp::Status {
                 auto range = wire::region_from_wire(request->range());
                 if (!range) return range.error();
                 if (request->has_accuracy()) {
                   CGP_ASSIGN_OR_RETURN(
                       const auto accuracy,
                       accuracy_options(request->options(), request->accuracy(), query));
                   CGP_ASSIGN_OR_RETURN(const auto certified, coordinator::range_count_to_accuracy(
                                                                  *fleet, *mirror, *range, charges,
                                                                  accuracy.first, accuracy.second));
                   fill_certificate(certified, result);
                   return {};
                 }
                 auto counted = coordinator::range_count(*fleet, *mirror, *range, charges, query);
                 if (!counted) return counted.error();
                 result.set_estimate(counted->estimate);
                 fill_report(counted->report, result);
                 return {};
               },
               {.subject = {}, .k = 0, .scheduled = request->has_accuracy()});
  }

  grpc::Status Kde(grpc::ServerContextBase* context, const v1::KdeQuery* request,
                   v1::QueryResult* out) {
    return run(
        context, request->options(), "kde", out,
        [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
            v1::QueryResult& result) -> cgp::Status {
          const std::vector<double> p(request->point().begin(), request->point().end());
          if (request->has_accuracy()) {
            CGP_ASSIGN_OR_RETURN(const auto accuracy,
                                 accuracy_options(request->options(), request->accuracy(), query));
            CGP_ASSIGN_OR_RETURN(
                const auto certified,
                coordinator::kde_to_accuracy(*fleet, *mirror, p, request->bandwidth(), charges,
                                             accuracy.first, accuracy.second));
            fill_certificate(certified, result);
            return {};
          }
          auto density = coordinator::kde(*fleet, *mirror, p, request->bandwidth(), charges, query);
          if (!density) return density.error();
          result.set_estimate(density->estimate);
          fill_report(density->report, result);
          return {};
        },
        {.subject = {}, .k = 0, .scheduled = request->has_accuracy()});
  }

  grpc::Status Knn(grpc::ServerContextBase* context, const v1::KnnQuery* request,
                   v1::QueryResult* out) {
    return run(context, request->options(), "knn", out,
               [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
                   v1::QueryResult& result) -> cgp::Status {
                 const std::vector<double> p(request->point().begin(), request->point().end());
                 auto found = coordinator::knn(*fleet, *mirror, p, request->k(), charges, query);
                 if (!found) return found.error();
                 for (auto u : found->neighbours) {
                   result.add_neighbour_users(u);
                   result.add_neighbours(options.device_ids[u]);
                 }
                 fill_report(found->report, result);
                 return {};
               },
               {.subject = {}, .k = request->k(), .scheduled = false});
  }

  grpc::Status Threshold(grpc::ServerContextBase* context, const v1::ThresholdQuery* request,
                         v1::QueryResult* out) {
    if (!authorised(context)) return unauthenticated(context);
    auto user = user_of_device.find(request->device_id());
    if (user == user_of_device.end())
      return to_status(context, make_error(ErrorCode::invalid_argument, "device_id",
                                           "device_id is not enrolled"));
    return run(context, request->options(), "threshold", out,
               [&](const coordinator::QueryOptions& query, const coordinator::UserCharges& charges,
                   v1::QueryResult& result) -> cgp::Status {
                 auto answer = coordinator::threshold(*fleet, *mirror, user->second, request->q(),
                                                      request->population(), charges.cap(0), query);
                 if (!answer) return answer.error();
                 result.set_below(answer->below);
                 fill_report(answer->report, result);
                 return {};
               },
               {.subject = {user->second}, .k = 0, .scheduled = false});
  }

  grpc::Status TopRegions(grpc::ServerContextBase* context, const v1::TopRegionsQuery* request,
                          v1::QueryResult* out) {
    return run(
        context, request->options(), "top-regions", out,
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
          fill_report(race.report, result);
          return {};
        },
        {.subject = {}, .k = 0, .scheduled = true});
  }

  grpc::Status GetResult(grpc::ServerContextBase* context, const v1::ResultRequest* request,
                         v1::QueryResult* out) {
    if (!authorised(context)) return unauthenticated(context);
    std::lock_guard lock(results_mutex);  // not the query lock: a running query never delays it
    auto it = results.find(request->query_id());
    if (it == results.end())
      return protocol::to_grpc_status(
          context,
          Error{ErrorCode::invalid_argument, "query_id",
                "query_id: no finished query has this id (or it is past the retention bound)"},
          grpc::StatusCode::NOT_FOUND);
    detail::result_page(it->second, request->users_from(), options.result_page_entries, *out);
    return grpc::Status::OK;
  }

  // Watches are not queries: no round. Each device charges itself at arming (a laplace watch
  // costs ρ = (ε(1 + 2^-10))²/2 once, public), so the mirror is charged that too — before the
  // spec leaves, under the query lock, so that no query plans with a mirror that predates it.
  grpc::Status StartWatch(grpc::ServerContextBase* context, const v1::StartWatchRequest* request,
                          v1::WatchReport* out) {
    if (!authorised(context)) return unauthenticated(context);
    v1::WatchSpec spec = request->spec();
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (spec.tick_seconds() > 0 && spec.start_unix_seconds() == 0) spec.set_start_unix_seconds(now);
    auto validated = wire::watch_from_wire(spec);
    if (!validated) return to_status(context, validated.error());
    if (auto runnable = runnable_on_devices(*validated, now); !runnable)
      return to_status(context, runnable.error());
    const std::size_t n = options.device_ids.size();
    std::vector<char> revoked_now;
    {
      std::lock_guard lock(revoked_mutex);
      revoked_now = revoked;
    }
    std::vector<std::uint32_t> users(request->users().begin(), request->users().end());
    const bool everyone = users.empty();
    if (everyone)
      for (std::size_t u = 0; u < n; ++u) users.push_back(static_cast<std::uint32_t>(u));
    std::sort(users.begin(), users.end());
    users.erase(std::unique(users.begin(), users.end()), users.end());
    std::vector<std::pair<std::uint32_t, std::string>> devices;
    for (std::uint32_t u : users) {
      if (u >= n)
        return to_status(context,
                         make_error(ErrorCode::out_of_range, "users",
                                    "users: index " + std::to_string(u) + " is not below the " +
                                        std::to_string(n) + " enrolled"));
      if (revoked_now[u] == 0)
        devices.emplace_back(u, options.device_ids[u]);
      else if (!everyone)
        return to_status(context, make_error(ErrorCode::invalid_argument, "users",
                                             "users: user " + std::to_string(u) + " (" +
                                                 options.device_ids[u] + ") is revoked"));
    }
    if (devices.empty())
      return to_status(context, make_error(ErrorCode::invalid_argument, "users",
                                           "users: every user of this watch is revoked"));
    {
      std::lock_guard lock(query_mutex);
      if (gateway->watch_report(spec.watch_id()))
        return to_status(context,
                         make_error(ErrorCode::already_exists, "watch_id",
                                    "watch_id '" + spec.watch_id() + "' was already used"));
      // Held until each device answers: kept when it arms, given back when it refuses or
      // rejects (it charged nothing; release_watch_holds).
      release_watch_holds();
      const double charge = laplace_watch_charge(validated->params().epsilon);
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
          return to_status(context, saved.error());
        }
      if (auto started = gateway->start_watch(spec, devices); !started.ok()) {
        give_back_holds(spec.watch_id(), devices);
        return to_status(context, started.error());
      }
    }
    log("event=watch-start watch=" + log_value(spec.watch_id()) +
        " users=" + std::to_string(devices.size()));
    auto report = gateway->watch_report(spec.watch_id());
    if (!report) return to_status(context, report.error());
    *out = std::move(*report);
    return grpc::Status::OK;
  }

  // What every device would refuse, refused here first (nothing charged, nothing sent): a
  // watch over the network ticks itself, so it needs a schedule that has not ended and a tick
  // the devices accept; devices run laplace watches only; ε must charge at least the devices'
  // smallest answerable ρ and at most their whole budget.
  cgp::Status runnable_on_devices(const WatchSpec& spec, double now) const {
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

  grpc::Status GetWatch(grpc::ServerContextBase* context, const v1::WatchReportRequest* request,
                        v1::WatchReport* out) {
    if (!authorised(context)) return unauthenticated(context);
    auto report = gateway->watch_report(request->watch_id());
    if (!report)
      return protocol::to_grpc_status(context, report.error(), grpc::StatusCode::NOT_FOUND);
    *out = std::move(*report);
    return grpc::Status::OK;
  }

  grpc::Status Status(grpc::ServerContextBase* context, const v1::StatusRequest*,
                      v1::CoordinatorStatus* out) {
    if (!authorised(context)) return unauthenticated(context);
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
    return grpc::Status::OK;
  }
};

struct CoordinatorService::Impl : ServiceCore {};

namespace {

// No exception leaves a handler: gRPC would answer UNKNOWN with no name. An unexpected
// failure is INTERNAL with the internal_error code, like every other named error.
template <class Body>
grpc::Status guarded(grpc::ServerContextBase* context, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      return to_status(context, make_error(ErrorCode::internal_error, "query",
                                           std::string("the coordinator failed: ") + e.what()));
    } catch (...) {
    }
  } catch (...) {
  }
  return {grpc::StatusCode::INTERNAL, "query: the coordinator failed"};
}

grpc::Status starting(grpc::ServerContextBase* context) {
  return to_status(context, Error{ErrorCode::unavailable, "coordinator",
                                  "coordinator: starting; retry in a moment"});
}

// The Analyst gRPC service, forwarding to the coordinator (which outlives the server). Calls are
// taken at their headers (header_time_service.hpp): one without the analyst credential ends
// there, holding nothing; an admitted one is counted (ConnectionLimits::analyst_calls) until it
// is answered. Queries run on one lane (they take the query lock one at a time anyway), reads
// (status, results, watches) on another, so that a read never waits behind a query.
class AnalystEndpoint final : public detail::HeaderTimeService {
 public:
  // `port` names the port in refusal lines ("analyst": its own; empty: the device port).
  AnalystEndpoint(ServiceCore& impl, StreamCaps caps, std::function<void(const std::string&)> log,
                  const std::string& port)
      : impl_(impl),
        calls_(caps, "analyst-call"),
        refusals_(std::move(log)),
        refusal_line_(port.empty() ? "event=refused reason="
                                   : "event=refused port=" + port + " reason=") {
    add("/cgp.v1.Analyst/RangeCount", queries_, &ServiceCore::RangeCount);
    add("/cgp.v1.Analyst/Kde", queries_, &ServiceCore::Kde);
    add("/cgp.v1.Analyst/Knn", queries_, &ServiceCore::Knn);
    add("/cgp.v1.Analyst/GetResult", reads_, &ServiceCore::GetResult);
    add("/cgp.v1.Analyst/Status", reads_, &ServiceCore::Status);
    add("/cgp.v1.Analyst/StartWatch", queries_, &ServiceCore::StartWatch);
    add("/cgp.v1.Analyst/GetWatch", reads_, &ServiceCore::GetWatch);
    add("/cgp.v1.Analyst/Threshold", queries_, &ServiceCore::Threshold);
    add("/cgp.v1.Analyst/TopRegions", queries_, &ServiceCore::TopRegions);
  }

 private:
  template <class Request, class Response>
  void add(const char* path, detail::CallLane& lane,
           grpc::Status (ServiceCore::*method)(grpc::ServerContextBase*, const Request*,
                                               Response*)) {
    using Call = detail::UnaryCall<Request, Response>;
    auto handler = std::make_shared<typename Call::Handler>(
        [&core = impl_, method](grpc::CallbackServerContext& c, const Request& q, Response& r) {
          // No implicit `this` in the inner lambda: GCC 12's -fsanitize=vptr checks the inner
          // closure's own address as the endpoint there (a false "invalid vptr").
          return guarded(&c, [&core, method, &c, &q, &r] {
            return !core.ready ? starting(&c) : (core.*method)(&c, &q, &r);
          });
        });
    handlers_.push_back(handler);
    add_method<Request, Response>(
        path,
        [this, &lane, h = handler.get()](
            grpc::CallbackServerContext* context) -> grpc::ServerBidiReactor<Request, Response>* {
          if (!impl_.authorised(context))
            return new detail::RefusedCall<Request, Response>(unauthenticated(context));
          return Call::start(context, calls_, *h, &lane, "analyst calls",
                             [this](const std::string& reason) {
                               refusals_.refused(reason, refusal_line_ + reason);
                             });
        });
  }

  ServiceCore& impl_;
  detail::StreamRegistry calls_;
  detail::RefusalLog refusals_;
  const std::string refusal_line_;
  std::vector<std::shared_ptr<void>> handlers_;  // each method's, for as long as the server
  detail::CallLane queries_{2}, reads_{4};       // joined first: their calls are answered
};

}  // namespace

CoordinatorService::CoordinatorService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorService::~CoordinatorService() {
  impl_->metrics.reset();           // no scrape reads the gateway while it goes
  impl_->analyst_listener.reset();  // no analyst call starts or runs from here on
  // The totals as this run leaves them (what the gateway counts while it shuts down is lost).
  const GatewayCounters last = impl_->counters();
  impl_->gateway.reset();  // no analyst call runs after this: the mirror is final
  std::lock_guard lock(impl_->query_mutex);
  impl_->release_watch_holds();
  impl_->persist_mirror();
  if (impl_->state)
    if (auto saved = impl_->save_counters(last); !saved)
      impl_->log("event=state-error error=" + log_value(saved.error().message));
}

Expected<std::unique_ptr<CoordinatorService>> CoordinatorService::start(
    const CoordinatorOptions& options) {
  if (options.device_ids.empty())
    return make_error(ErrorCode::invalid_argument, "devices", "no device is enrolled");
  if (options.device_ids.size() > std::numeric_limits<coordinator::UserId>::max())
    return make_error(ErrorCode::too_large, "devices", "too many devices");
  CGP_RETURN_IF_ERROR(require_finite_positive("device_budget", options.device_budget));
  if (options.dimension == 0 || options.dimension > wire::kMaxDimension)
    return make_error(ErrorCode::out_of_range, "dimension", "dimension must be 1..4096");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->revoked.assign(options.device_ids.size(), 0);
  for (std::size_t u = 0; u < options.device_ids.size(); ++u)
    if (!impl->user_of_device.emplace(options.device_ids[u], static_cast<coordinator::UserId>(u))
             .second)
      return make_error(ErrorCode::already_exists, "devices",
                        "device id '" + options.device_ids[u] + "' is enrolled twice");
  for (const auto& id : options.revoked_device_ids) {
    auto user = impl->user_of_device.find(id);
    if (user == impl->user_of_device.end())
      return make_error(ErrorCode::invalid_argument, "revoked_device_ids",
                        "revoked device id '" + id + "' is not among device_ids");
    impl->revoked[user->second] = 1;
  }
  auto config = DeviceConfig::cgp(options.device_budget);
  if (!config) return config.error();
  impl->rho_capacity = config->rho_capacity();
  impl->mirror = std::make_unique<coordinator::BudgetMirror>(options.device_ids.size(),
                                                             config->rho_capacity());
  if (options.retention.max_results == 0 || options.retention.max_age.count() <= 0)
    return make_error(ErrorCode::not_positive, "retention",
                      "retention: max_results and max_age must be > 0");
  if (!options.state_path.empty()) {
    auto state = detail::CoordinatorState::open(options.state_path, options.init_state);
    if (!state) return state.error();
    impl->state = std::move(*state);
  }
  auto allocation =
      coordinator::AdaptiveBudget::open_ended(config->rho_capacity(), options.horizon);
  if (!allocation) return allocation.error();
  impl->allocation = *allocation;
  if (impl->state) CGP_RETURN_IF_ERROR(impl->restore());
  GatewayOptions gateway_options = options.gateway;
  if (impl->state) {
    auto kept = impl->state->watches();
    if (!kept) return kept.error();
    gateway_options.watches = std::move(*kept);
  }
  gateway_options.watch_changed = [core = impl.get()](const std::string& watch,
                                                      const std::string& device,
                                                      const std::string& bytes) {
    if (core->state) {
      auto saved = device.empty() ? core->state->save_watch(watch, bytes)
                                  : core->state->save_watch_device(watch, device, bytes);
      if (!saved) {
        // A refusal not on disk could be sent again after a restart and armed then: its hold
        // stays taken.
        core->log("event=state-error error=" + log_value(saved.error().message));
        return;
      }
    }
    if (!device.empty()) core->watch_answered(watch, device, bytes);
  };
  const bool own_analyst_port = !options.analyst_address.empty();
  if (!own_analyst_port)
    gateway_options.extra_services.push_back(
        {v1::Analyst::service_full_name(), [core = impl.get()]() -> std::unique_ptr<grpc::Service> {
           return std::make_unique<AnalystEndpoint>(
               *core, core->options.gateway.limits.analyst_calls, core->options.gateway.log, "");
         }});
  auto gateway = DeviceGateway::start(gateway_options);
  if (!gateway) return gateway.error();
  impl->gateway = std::move(*gateway);
  if (own_analyst_port) {
    auto listener = detail::AnalystListener::start(
        options.analyst_address, options.analyst_limits, options.gateway.tls_certificate_chain,
        options.gateway.tls_private_key,
        std::make_unique<AnalystEndpoint>(*impl, options.analyst_limits.analyst_calls,
                                          options.gateway.log, "analyst"),
        options.gateway.log);
    if (!listener) return listener.error();
    impl->analyst_listener = std::move(*listener);
  } else {
    impl->gateway->set_serving("cgp.v1.Analyst", true);
  }
  if (!options.metrics_address.empty()) {
    auto* core = impl.get();
    auto metrics = detail::MetricsEndpoint::start(
        options.metrics_address, {[core] { return core->gateway->counters(); },
                                  [core] { return core->gateway->connected(); },
                                  [core] { return core->enrolled_not_revoked(); }});
    if (!metrics) return metrics.error();
    impl->metrics = std::move(*metrics);
  }
  impl->fleet =
      std::make_unique<NetworkFleet>(*impl->gateway, options.device_ids, options.dimension,
                                     config->rho_capacity(), options.round_deadline);
  impl->fleet->set_check_in(options.check_in);
  if (impl->state)
    impl->fleet->set_before_round([core = impl.get()](const coordinator::RoundRequest& round) {
      return core->record_intent(round);
    });
  impl->ready = true;
  return std::unique_ptr<CoordinatorService>(new CoordinatorService(std::move(impl)));
}

int CoordinatorService::metrics_port() const noexcept {
  return impl_->metrics ? impl_->metrics->port() : 0;
}

int CoordinatorService::analyst_port() const noexcept {
  return impl_->analyst_listener ? impl_->analyst_listener->port() : impl_->gateway->port();
}

int CoordinatorService::port() const noexcept {
  return impl_->gateway->port();
}

DeviceGateway& CoordinatorService::gateway() noexcept {
  return *impl_->gateway;
}

Expected<bool> CoordinatorService::revoke(const std::string& device_id) {
  auto user = impl_->user_of_device.find(device_id);
  if (user == impl_->user_of_device.end())
    return make_error(ErrorCode::invalid_argument, "device_id",
                      "device id '" + device_id + "' is not enrolled");
  // The stream ends first, at once, even while a query runs.
  const bool first = impl_->gateway->revoke(device_id);
  std::lock_guard lock(impl_->revoked_mutex);
  impl_->revoked[user->second] = 1;
  return first;
}

}  // namespace cgp::transport
