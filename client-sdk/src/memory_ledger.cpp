#include "cgp/client/ledger.hpp"

namespace cgp::client {

Expected<LedgerState> MemoryLedger::load(const DeviceConfig&) {
  return state_;
}

Status MemoryLedger::record_answer(const RequestId& id, const AnsweredRequest& answer,
                                   double spent_after) {
  answers_[{id.query_id, id.round}] = answer;
  state_.spent = spent_after;
  return {};
}

Status MemoryLedger::record_halt() {
  state_.halted = true;
  return {};
}

Expected<std::optional<AnsweredRequest>> MemoryLedger::find(const RequestId& id) {
  auto it = answers_.find({id.query_id, id.round});
  if (it == answers_.end()) return std::optional<AnsweredRequest>{};
  return std::optional<AnsweredRequest>{it->second};
}

}  // namespace cgp::client
