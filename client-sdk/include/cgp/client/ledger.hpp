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

 private:
  LedgerRetention retention_;
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
// path still names the file this handle opened (deleted or replaced: ledger_failure).
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

 private:
  struct Impl;
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::client
