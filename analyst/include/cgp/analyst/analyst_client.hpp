// The analyst's client of a coordinator service (cgp.v1.Analyst): submit range / KDE / kNN /
// threshold queries, read results and the coordinator's status. Used by cgp-sim --fleet.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/watch.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/top_regions.hpp"

namespace cgp::analyst {

struct AnalystConnection {
  std::string coordinator_address;     // host:port
  std::string credential;              // the analyst credential; empty when none is checked
  std::string tls_root_certificate;    // PEM; empty = plaintext
  std::chrono::seconds timeout{3600};  // per call
  // The share of a query's users that must answer; unset = the coordinator's default (0.9).
  // Below it a query fails with incomplete_query.
  std::optional<double> min_coverage;
  // How much of an answer the users who did not answer may be (RemoteMissing::share); unset =
  // the coordinator's default (0.1). Above it a query fails with incomplete_query.
  std::optional<double> max_missing_share;
};

// Who answered a query (each user counted once).
struct RemoteCoverage {
  std::size_t users = 0, answered = 0, refused = 0, rejected = 0, unanswered = 0;
  double min_coverage = 0;
  bool valid = false;  // answered ≥ min_coverage·users
};

// What the users who did not answer allow (cgp.v1.MissingUsers): the answer over every user of
// the query lies in [lower, upper] as far as they go; share is how much of it they could be.
struct RemoteMissing {
  std::size_t users = 0;
  double lower = 0, upper = 0, share = 0, max_share = 0;
  bool valid = false;  // share ≤ max_share
};

struct RemoteResult {
  std::string query_id;
  double estimate = 0;                          // range, kde
  std::vector<coordinator::UserId> neighbours;  // knn, nearest first
  std::vector<std::string> neighbour_ids;
  bool below = false;               // threshold
  coordinator::QueryReport report;  // charged: per user in enrolment order
  double seconds = 0;               // on the coordinator
  RemoteCoverage coverage;
  RemoteMissing missing;
  // Accuracy-first queries: the certified interval and whether it meets the target.
  double lower = 0, upper = 0;
  std::optional<bool> certified;
  // Top regions: the k busiest (busiest first) and every candidate's count.
  std::vector<std::size_t> top_regions;
  std::vector<coordinator::RegionCount> region_counts;
};

// An accuracy-first query (coordinator/accuracy_first.hpp) sent to the coordinator: the target
// and the schedule (options.rounds and options.split are not sent).
struct RemoteAccuracy {
  coordinator::AccuracyTarget target;
  std::size_t max_rounds = 16;  // 1..64
  double growth = 2;
  double first = 0;
};

struct RemoteStatus {
  std::size_t enrolled = 0, connected = 0, dimension = 0;
  double device_budget = 0;
  std::uint64_t queries = 0, rounds = 0, requests = 0, replies = 0, unanswered = 0,
                late_replies = 0, refused_connections = 0;
};

// A watch as the coordinator sees it (README "Watches"): what each device answered to the spec
// and the one alert each may have sent.
struct RemoteDeviceWatch {
  enum class State { pending, armed, refused, rejected };
  std::string device_id;
  coordinator::UserId user = 0;
  State state = State::pending;
  Error error;                   // with rejected
  std::uint64_t alert_tick = 0;  // 0: no alert (yet)
  double alert_received_unix_seconds = 0;
};

struct RemoteWatch {
  std::string watch_id;
  std::optional<WatchSpec> spec;  // as the coordinator sent it (its schedule stamped)
  std::vector<RemoteDeviceWatch> devices;
  std::size_t pending = 0, armed = 0, refused = 0, rejected = 0, alerts = 0;
};

// Whom a remote query asks and the most it charges each (a charge, as in coordinator::Charge):
// a fixed cap, or the coordinator's adaptive allocation (Alg. 3, open-ended, from its mirror).
struct RemoteCharges {
  std::optional<coordinator::Charge> cap;  // empty: the coordinator's adaptive allocation
  std::vector<coordinator::UserId> users;  // enrolment indices; empty: every enrolled user

  static RemoteCharges fixed(coordinator::Charge cap, std::vector<coordinator::UserId> users = {}) {
    return {cap, std::move(users)};
  }
  static RemoteCharges adaptive(std::vector<coordinator::UserId> users = {}) {
    return {std::nullopt, std::move(users)};
  }
};

// options.component_id is the coordinator's and is not sent. A threshold query is over its one
// device: its `charges.users` must be empty.
class AnalystClient {
 public:
  static Expected<AnalystClient> connect(const AnalystConnection& connection);
  ~AnalystClient();
  AnalystClient(AnalystClient&&) noexcept;
  AnalystClient& operator=(AnalystClient&&) noexcept;

  Expected<RemoteResult> range_count(const geometry::Region& range, const RemoteCharges& charges,
                                     const coordinator::QueryOptions& options);
  Expected<RemoteResult> kde(std::span<const double> point, double bandwidth,
                             const RemoteCharges& charges,
                             const coordinator::QueryOptions& options);
  // Accuracy-first count and density: certified within accuracy.target, each user charged at
  // most its cap (charges) for it.
  Expected<RemoteResult> range_count(const geometry::Region& range, const RemoteCharges& charges,
                                     const RemoteAccuracy& accuracy,
                                     const coordinator::QueryOptions& options);
  Expected<RemoteResult> kde(std::span<const double> point, double bandwidth,
                             const RemoteCharges& charges, const RemoteAccuracy& accuracy,
                             const coordinator::QueryOptions& options);
  // The k busiest of `regions` (coordinator/top_regions.hpp); schedule.target is not used.
  Expected<RemoteResult> top_regions(std::span<const geometry::Region> regions, std::size_t k,
                                     const RemoteCharges& charges, const RemoteAccuracy& schedule,
                                     const coordinator::QueryOptions& options);
  Expected<RemoteResult> knn(std::span<const double> point, std::size_t k,
                             const RemoteCharges& charges,
                             const coordinator::QueryOptions& options);
  Expected<RemoteResult> threshold(const std::string& device_id, double q, double population,
                                   const RemoteCharges& charges,
                                   const coordinator::QueryOptions& options);
  Expected<RemoteResult> result(const std::string& query_id);
  // Creates a watch on these users' devices (empty: every enrolled user). A spec with
  // tick_seconds > 0 and no start starts now, on the coordinator's clock.
  Expected<RemoteWatch> start_watch(const WatchSpec& spec,
                                    const std::vector<coordinator::UserId>& users = {});
  // The watch's state now: who armed it and who alerted at which tick.
  Expected<RemoteWatch> watch(const std::string& watch_id);
  Expected<RemoteStatus> status();

 private:
  struct Impl;  // in the .cpp
  explicit AnalystClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::analyst
