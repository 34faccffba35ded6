// The device ledger: every charge is durably recorded before the reply that it pays for leaves
// the device (DESIGN §2), together with the reply itself so that a retried request gets the
// identical bytes and no new charge.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cgp/common/device_config.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/common/request.hpp"

namespace cgp::client {

using RequestDigest = std::array<std::uint8_t, 32>;  // SHA-256 of the canonical request bytes

struct AnsweredRequest {
  RequestDigest digest{};
  double charge = 0;
  std::string reply;  // the serialized cgp.v1.DeviceReply that left the device; empty once pruned
  bool pruned() const noexcept { return reply.empty(); }
};

struct LedgerState {
  double spent = 0;
  bool halted = false;
  double expost_spent = 0;  // ε of the ex-post budget realised so far (gaussian_expost watches)
};

// A watch as the device armed it (client-sdk/src/watch.md). The threshold noise is the
// device's secret: drawn once, recorded before the watch is armed, never drawn again (a redraw
// after a restart would be a fresh, unaccounted mechanism).
struct WatchRecord {
  std::string spec;        // the canonical cgp.v1.WatchSpec bytes (ticks after a restart)
  RequestDigest digest{};  // SHA-256 of `spec`
  double charge = 0;       // ρ charged to the CGP filter at arming (0 for gaussian_expost)
  std::int64_t threshold_noise_high = 0;  // the threshold noise, a 128-bit integer: high word
  std::uint64_t threshold_noise_low = 0;  //   and low word
  std::uint64_t last_tick = 0;            // the last tick evaluated (0: none)
  std::uint64_t alert_tick = 0;           // the tick that alerted (0: none)
  bool budget_exhausted = false;          // gaussian_expost: stopped, the next tick would not fit
  double expost_spent = 0;                // ε of the ex-post budget this watch realised
};

// One evaluated tick: its decision, recorded before anything leaves the device.
struct WatchTickRecord {
  std::uint64_t tick = 0;
  bool alert = false;
  bool budget_exhausted = false;
  double expost_charge = 0;  // ε realised at this tick (gaussian_expost), 0 otherwise
};

// How long answered replies are kept for idempotent retries (privatizer.md, "Retention"). The
// id, digest and charge of every answer are kept for the ledger's life (their number is bounded
// by the minimum ρ: at most 2^18 answers per capacity); only reply bytes are pruned, oldest
// first. A replay of a pruned id is refused with reply_pruned and charges nothing.
struct LedgerRetention {
  std::size_t max_reply_bytes = std::size_t{8} << 20;  // replies kept, in bytes (8 MiB)
  std::int64_t max_age_seconds = 7 * 24 * 3600;        // SqliteLedger: replies older are pruned
};

class Ledger {
 public:
  virtual ~Ledger() = default;
  // Opens the ledger for a device with this configuration: the state at the last durable
  // record. A ledger written for another configuration, or unreadable, is ledger_failure; one
  // held by another live handle is ledger_in_use.
  virtual Expected<LedgerState> load(const DeviceConfig& config) = 0;
  // Durably records an answer and the new spent total; returns only once both are durable.
  // Fails closed (nothing recorded) unless the stored total is exactly `spent_before`.
  virtual Status record_answer(const RequestId& id, const AnsweredRequest& answer,
                               double spent_before, double spent_after) = 0;
  // Durably records Alg. 1's sticky HALT.
  virtual Status record_halt() = 0;
  // The answer recorded under this id, if any (with an empty reply if it was pruned).
  virtual Expected<std::optional<AnsweredRequest>> find(const RequestId& id) = 0;

  // Durably records an armed watch, its secret threshold noise and its charge, with the new
  // spent total; fails closed unless the stored total is exactly `spent_before` and the id is
  // new.
  virtual Status record_watch(const std::string& watch_id, const WatchRecord& watch,
                              double spent_before, double spent_after) = 0;
  // Durably records a tick's decision (and its ex-post charge, added to the device's ex-post
  // total, which must be exactly `expost_before`); fails closed unless the tick is after the
  // watch's last recorded tick.
  virtual Status record_watch_tick(const std::string& watch_id, const WatchTickRecord& tick,
                                   double expost_before, double expost_after) = 0;
  virtual Expected<std::optional<WatchRecord>> find_watch(const std::string& watch_id) = 0;
};

// For simulations and tests: nothing survives the process. Keeps replies up to
// retention.max_reply_bytes (max_age_seconds is not used).
class MemoryLedger final : public Ledger {
 public:
  explicit MemoryLedger(LedgerRetention retention = {}) : retention_(retention) {}
  Expected<LedgerState> load(const DeviceConfig& config) override;
  Status record_answer(const RequestId& id, const AnsweredRequest& answer, double spent_before,
                       double spent_after) override;
  Status record_halt() override;
  Expected<std::optional<AnsweredRequest>> find(const RequestId& id) override;
  Status record_watch(const std::string& watch_id, const WatchRecord& watch, double spent_before,
                      double spent_after) override;
  Status record_watch_tick(const std::string& watch_id, const WatchTickRecord& tick,
                           double expost_before, double expost_after) override;
  Expected<std::optional<WatchRecord>> find_watch(const std::string& watch_id) override;

 private:
  LedgerRetention retention_;
  std::map<std::string, WatchRecord, std::less<>> watches_;
  LedgerState state_;
  // query id -> round -> answer; std::less<> finds by the request's id without a copy.
  std::map<std::string, std::map<std::uint32_t, AnsweredRequest>, std::less<>> answers_;
  // Answers whose reply is still kept, oldest first (map nodes never move or go away).
  std::deque<AnsweredRequest*> kept_;
  std::size_t kept_bytes_ = 0;
};

// SQLite with a rollback journal and synchronous=FULL: a record_* call returns after the commit
// is in the main database file (losing a -journal, -wal or -shm file loses no charge). The
// handle holds flock(LOCK_EX) on its own descriptor of the file for its whole life: a second
// handle, in this process or another, gets ledger_in_use, and the lock survives the app
// opening and closing the file elsewhere (which drops POSIX locks). A forked child cannot use
// an inherited handle (ledger_failure). Each charge re-reads the stored total from the file. A
// new ledger appears atomically (built beside the path, then linked in), so an existing file
// that is empty or has no ledger tables is a ledger_failure, never a fresh budget. The file is
// bound to the device configuration it was created with. Every write first checks that the
// path still names the file this handle opened (deleted or replaced: ledger_failure). A ledger
// of format 1 (kept in WAL mode) is migrated only with its "-wal" side file beside it: without
// it, charges after its last checkpoint may be gone, so it fails closed (ledger_failure naming
// "ledger"; an operator who knows it was closed cleanly creates an empty side file).
class SqliteLedger final : public Ledger {
 public:
  explicit SqliteLedger(std::string path, LedgerRetention retention = {});
  ~SqliteLedger() override;
  SqliteLedger(const SqliteLedger&) = delete;
  SqliteLedger& operator=(const SqliteLedger&) = delete;

  Expected<LedgerState> load(const DeviceConfig& config) override;
  Status record_answer(const RequestId& id, const AnsweredRequest& answer, double spent_before,
                       double spent_after) override;
  Status record_halt() override;
  Expected<std::optional<AnsweredRequest>> find(const RequestId& id) override;
  Status record_watch(const std::string& watch_id, const WatchRecord& watch, double spent_before,
                      double spent_after) override;
  Status record_watch_tick(const std::string& watch_id, const WatchTickRecord& tick,
                           double expost_before, double expost_after) override;
  Expected<std::optional<WatchRecord>> find_watch(const std::string& watch_id) override;

 private:
  struct Impl;
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::client
