// The device ledger: every charge is durably recorded before the reply that it pays for leaves
// the device (DESIGN §2), together with the reply itself so that a retried request gets the
// identical bytes and no new charge.
#pragma once

#include <array>
#include <cstdint>
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
  std::string reply;  // the serialized cgp.v1.DeviceReply that left the device
};

struct LedgerState {
  double spent = 0;
  bool halted = false;
};

class Ledger {
 public:
  virtual ~Ledger() = default;
  // Opens the ledger for a device with this configuration: the state at the last durable
  // record. A ledger written for another configuration, or unreadable, is ledger_failure.
  virtual Expected<LedgerState> load(const DeviceConfig& config) = 0;
  // Durably records an answer and the new spent total; returns only once both are durable.
  virtual Status record_answer(const RequestId& id, const AnsweredRequest& answer,
                               double spent_after) = 0;
  // Durably records Alg. 1's sticky HALT.
  virtual Status record_halt() = 0;
  // The answer recorded under this id, if any.
  virtual Expected<std::optional<AnsweredRequest>> find(const RequestId& id) = 0;
};

// For simulations and tests: nothing survives the process.
class MemoryLedger final : public Ledger {
 public:
  Expected<LedgerState> load(const DeviceConfig& config) override;
  Status record_answer(const RequestId& id, const AnsweredRequest& answer,
                       double spent_after) override;
  Status record_halt() override;
  Expected<std::optional<AnsweredRequest>> find(const RequestId& id) override;

 private:
  LedgerState state_;
  // query id -> round -> answer; std::less<> finds by the request's id without a copy.
  std::map<std::string, std::map<std::uint32_t, AnsweredRequest>, std::less<>> answers_;
};

// SQLite in WAL mode with synchronous=FULL: a record_* call returns after the commit is on
// disk. The file is bound to the device configuration it was created with.
class SqliteLedger final : public Ledger {
 public:
  explicit SqliteLedger(std::string path);
  ~SqliteLedger() override;
  SqliteLedger(const SqliteLedger&) = delete;
  SqliteLedger& operator=(const SqliteLedger&) = delete;

  Expected<LedgerState> load(const DeviceConfig& config) override;
  Status record_answer(const RequestId& id, const AnsweredRequest& answer,
                       double spent_after) override;
  Status record_halt() override;
  Expected<std::optional<AnsweredRequest>> find(const RequestId& id) override;

 private:
  struct Impl;
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::client
