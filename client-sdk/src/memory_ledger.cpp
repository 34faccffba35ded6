#include "cgp/client/ledger.hpp"

namespace cgp::client {

Expected<LedgerState> MemoryLedger::load(const DeviceConfig&) {
  return state_;
}

Status MemoryLedger::record_answer(const RequestId& id, const AnsweredRequest& answer,
                                   double spent_after) {
  answers_[id.query_id][id.round] = answer;
  state_.spent = spent_after;
  return {};
}

Status MemoryLedger::record_halt() {
  state_.halted = true;
  return {};
}

Expected<std::optional<AnsweredRequest>> MemoryLedger::find(const RequestId& id) {
  auto query = answers_.find(std::string_view(id.query_id));
  if (query == answers_.end()) return std::optional<AnsweredRequest>{};
  auto round = query->second.find(id.round);
  if (round == query->second.end()) return std::optional<AnsweredRequest>{};
  return std::optional<AnsweredRequest>{round->second};
}

}  // namespace cgp::client
