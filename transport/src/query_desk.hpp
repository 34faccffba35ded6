// The coordinator's query desk: the Analyst API's work, free of gRPC. Every handler takes the
// request message and fills the response, returning a named error; the service's adapter
// (coordinator_service.cpp) admits the call, checks the credential at its headers and maps the
// error to a gRPC status, once. It runs queries one at a time over the NetworkFleet (they share
// the budget mirror), keeps results within the retention bound, the mirror, intents and
// counters on disk (coordinator_state.hpp), and the watches' holds.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/watch.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/gateway.hpp"
#include "cgp/v1/analyst.pb.h"
#include "query_runner.hpp"
#include "roster.hpp"

namespace cgp::transport {
class MetricsEndpoint;
namespace detail {
class CoordinatorState;
// "q-" and 16 hex digits from the OS random source: query ids unique across restarts.
std::string random_query_prefix();
}  // namespace detail

struct QueryDesk {
  // The gateway serves analyst calls as soon as it listens, before start() has made the fleet
  // and the metrics: until then every call is UNAVAILABLE.
  std::atomic<bool> ready{false};
  // options.device_ids: the users queries are planned over, grown under the query lock from
  // the roster (take_new_users); the roster may be ahead of it by devices enrolled since.
  CoordinatorOptions options;
  std::unique_ptr<DeviceGateway> gateway;
  std::unique_ptr<MetricsEndpoint> metrics;
  std::unique_ptr<NetworkFleet> fleet;
  // Every device id ever enrolled in this run, by user index, and who is revoked.
  detail::Roster roster;

  std::mutex query_mutex;  // queries run one at a time: they share the mirror
  std::unique_ptr<coordinator::BudgetMirror> mirror;
  double rho_capacity = 1.0;  // every device's budget (from --budget), in ρ
  coordinator::AdaptiveBudget allocation = *coordinator::AdaptiveBudget::open_ended(1.0, 1);
  std::size_t adaptive_queries = 0;
  std::uint64_t next_query = 1;
  // Devices keep (query id, round) → reply in their ledgers across coordinator restarts: a
  // counter from 1 would reuse ids and get old answers or request_conflict from every device.
  const std::string query_prefix = detail::random_query_prefix();
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

  void log(const std::string& line) const;

  // The server goes first: no handler may run while the members it uses are destroyed.
  ~QueryDesk();

  static std::int64_t unix_now();

  // Drops the oldest results beyond the retention count (memory; the file is pruned apart).
  void trim_results();

  // Keeps a finished result in memory and in the state file, within the retention bound.
  void keep_result(const std::string& id, v1::QueryResult& result);

  // Totals: this run's on top of what earlier runs counted.
  GatewayCounters counters() const;

  cgp::Status save_counters(const GatewayCounters& total);

  // Watch holds: what StartWatch took from the mirror for each (watch id, device id)
  // not yet armed. A device's refusal or rejection (reported from gateway threads) moves its
  // hold to `released`; the query lock gives those back to the mirror (release_watch_holds).
  std::mutex holds_mutex;
  std::map<std::pair<std::string, std::string>, std::pair<coordinator::UserId, coordinator::Charge>>
      watch_holds;
  std::vector<std::pair<coordinator::UserId, coordinator::Charge>> released;

  void watch_answered(const std::string& watch_id, const std::string& device_id,
                      const std::string& entry_bytes);

  // Under the query lock, for a watch that was not sent: every hold goes back.
  void give_back_holds(const std::string& watch_id,
                       const std::vector<std::pair<std::uint32_t, std::string>>& devices);

  // Under the query lock: the holds of devices that refused or rejected a watch go back.
  void release_watch_holds();

  std::size_t enrolled_not_revoked();

  // The mirror on disk after every query that asked devices (successful or not), so that a
  // restart never forgets a charge it saw; `settled_query`: a query whose replies are now
  // folded in, whose intents go in the same transaction.
  void persist_mirror(const std::string* settled_query = nullptr);

  cgp::Status save_mirror(const std::string* settled_query,
                          std::vector<std::pair<std::string, double>> changed = {});

  // Intents before rounds: what a round can charge each of its users is on disk
  // before any request leaves (NetworkFleet's gate), so that a restart after a crash mid-query
  // charges it (restore) and the mirror never rises above a device's ledger.
  std::optional<Error> intent_error;  // the current query's: its rounds were not sent
  std::vector<double> intent_charges;
  std::vector<const std::string*> intent_devices;
  cgp::Status record_intent(const coordinator::RoundRequest& round);
  static inline const std::string kNoDevice;

  // At start: results, counters and the mirror as the last run left them.
  cgp::Status restore();

  // Under the query lock, before a query or watch is planned: the devices enrolled since the
  // last one become users of the mirror and the fleet (a query in progress keeps its users).
  // A new user's mirror starts at the whole budget, lowered to what the state file kept for
  // its id (charged under that id before); a state file that cannot be read adds nobody this
  // time, since a mirror that forgot a charge would ask a device for budget it may not have.
  void take_new_users();

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
                             bool scheduled);

  // What a query kind adds to run(): the users it is about by its nature (threshold: its one
  // device), and kNN's k.
  struct QueryShape {
    std::vector<coordinator::UserId> subject;
    std::uint32_t k = 0;
    // Accuracy-first and top regions: a geometric schedule whose first round is raised to what
    // devices answer (accuracy_schedule), not the c-round split of QueryOptions.
    bool scheduled = false;
  };

  template <class Run>
  cgp::Status run(const v1::QueryOptions& in, const char* kind, v1::QueryResult* out, Run&& body,
                  QueryShape shape = {});

  // An accuracy-first query's options: the analyst's, with the target's schedule.
  Expected<std::pair<coordinator::AccuracyTarget, coordinator::AccuracyFirstOptions>>
  accuracy_options(const v1::QueryOptions& in, const v1::AccuracyTarget& wire,
                   const coordinator::QueryOptions& query, bool needs_target = true);

  // What the shared query runner (query_runner.hpp) needs of this desk for one query.
  detail::QueryWork work(const coordinator::QueryOptions& query,
                         const coordinator::UserCharges& charges);

  cgp::Status range_count(const v1::RangeCountQuery* request, v1::QueryResult* out);

  cgp::Status kde(const v1::KdeQuery* request, v1::QueryResult* out);

  cgp::Status knn(const v1::KnnQuery* request, v1::QueryResult* out);

  cgp::Status threshold(const v1::ThresholdQuery* request, v1::QueryResult* out);

  cgp::Status top_regions(const v1::TopRegionsQuery* request, v1::QueryResult* out);

  cgp::Status get_result(const v1::ResultRequest* request, v1::QueryResult* out);

  // The newest finished results' ids, newest first, at most `count`.
  std::vector<std::string> recent_result_ids(std::size_t count) const;

  // Calls `read` with the finished result `id` whole (every user's entries, not a page), under
  // the results lock: for summaries that must see every user (the console's spending
  // histogram). False: no such result.
  bool read_result(const std::string& id,
                   const std::function<void(const v1::QueryResult&)>& read) const;

  // Watches are not queries: no round. Each device charges itself at arming (a laplace watch
  // costs ρ = (ε(1 + 2^-10))²/2 once, public), so the mirror is charged that too — before the
  // spec leaves, under the query lock, so that no query plans with a mirror that predates it.
  cgp::Status start_watch(const v1::StartWatchRequest* request, v1::WatchReport* out);

  // Under the query lock: the (user, device id) pairs a watch over `users` goes to (empty:
  // every user not revoked); a revoked user named, or an index not enrolled, is an error.
  Expected<std::vector<std::pair<std::uint32_t, std::string>>> watch_devices(
      std::vector<std::uint32_t> users) const;

  // What every device would refuse, refused here first (nothing charged, nothing sent): a
  // watch over the network ticks itself, so it needs a schedule that has not ended and a tick
  // the devices accept; devices run laplace watches only; ε must charge at least the devices'
  // smallest answerable ρ and at most their whole budget.
  cgp::Status runnable_on_devices(const WatchSpec& spec, double now) const;

  cgp::Status get_watch(const v1::WatchReportRequest* request, v1::WatchReport* out);

  cgp::Status status(const v1::StatusRequest*, v1::CoordinatorStatus* out);
};

}  // namespace cgp::transport
