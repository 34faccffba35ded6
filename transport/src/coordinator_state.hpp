// What a coordinator keeps beyond memory: finished query results (GetResult
// after a restart, and query ids never reused), its watches and its budget mirror (a
// restarted coordinator does not ask devices for budget they no longer have), in one SQLite file
// beside the enrolment, with a retention bound on results.
//
// One coordinator per file: an exclusive flock for the store's life, as the device ledger does.
// The mirror is stored by device id, so that editing the enrolment (revoke, re-order) keeps each
// device's value; a stored value only ever lowers what the mirror thinks is left.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::transport::detail {

class CoordinatorState {
 public:
  struct StoredResult {
    std::string query_id;
    std::string bytes;  // a serialized cgp.v1.QueryResult
    std::int64_t finished_unix = 0;
  };

  // Opens the store, or creates it where no file is. Errors name "state": unreadable, not a
  // store (refused before anything is written to it), held by another coordinator, or empty (a
  // store that lost its contents) unless `start_empty`.
  static Expected<std::unique_ptr<CoordinatorState>> open(const std::string& path,
                                                          bool start_empty = false);
  ~CoordinatorState();
  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;

  // Results in the order they finished (oldest first).
  Expected<std::vector<StoredResult>> results() const;
  Status save_result(const StoredResult& result);
  // Every query id ever saved (results are pruned, ids are not: devices keep them).
  Expected<std::vector<std::string>> used_ids() const;
  // Keeps the newest max_results finished within max_age; returns how many were removed.
  Expected<std::size_t> prune(std::size_t max_results, std::chrono::seconds max_age,
                              std::int64_t now_unix);

  // Device id -> remaining budget, as last saved.
  Expected<std::map<std::string, double>> mirror() const;
  // Saves these devices' remaining budgets (one transaction).
  Status save_mirror(const std::vector<std::pair<std::string, double>>& changed);

  // Intents: before a round's requests leave, the most it can charge each device,
  // in one transaction that also reserves the query id. A query's intents are settled — deleted
  // in the transaction that saves the mirror with its replies folded in — when it ends; what a
  // crash leaves is charged on the next start (mirror = snapshot − every intent) and settled.
  struct Intent {
    std::string query_id;
    std::string device_id;
    double charge = 0;
  };
  Status record_intent(const std::string& query_id, std::uint32_t round,
                       const std::vector<const std::string*>& device_ids,
                       const std::vector<double>& charges);
  // Every unsettled intent, in the order recorded.
  Expected<std::vector<Intent>> intents() const;
  // save_mirror and, in the same transaction, deletes the intents of `query_id` (every intent
  // when it is empty).
  Status settle(const std::vector<std::pair<std::string, double>>& changed,
                const std::string& query_id);

  // Watches as serialized cgp.v1.WatchReport, in the order they were made, their devices in
  // the order they were saved. save_watch stores a new watch (spec and every device, one
  // transaction); save_watch_device replaces one device's entry (a serialized
  // cgp.v1.DeviceWatch) — a change costs one row, not the whole report.
  Expected<std::vector<std::string>> watches() const;
  Status save_watch(const std::string& watch_id, const std::string& report);
  Status save_watch_device(const std::string& watch_id, const std::string& device_id,
                           const std::string& entry);

  // Small counters (the adaptive allocation's query number).
  Expected<std::uint64_t> counter(const std::string& name) const;
  Status set_counter(const std::string& name, std::uint64_t value);
  // Several at once (one transaction).
  Status set_counters(const std::vector<std::pair<std::string, std::uint64_t>>& values);

  struct Db;

 private:
  explicit CoordinatorState(std::unique_ptr<Db> db);
  Status write_mirror(const std::vector<std::pair<std::string, double>>& changed,
                      const std::string* settled_query);
  std::unique_ptr<Db> db_;
};

}  // namespace cgp::transport::detail
