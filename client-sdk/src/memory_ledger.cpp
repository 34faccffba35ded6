#include "cgp/client/ledger.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::client {

Expected<LedgerState> MemoryLedger::load(const DeviceConfig&) {
  return state_;
}

Status MemoryLedger::record_answer(const RequestId& id, const AnsweredRequest& answer,
                                   double spent_before, double spent_after) {
  if (state_.spent != spent_before || state_.halted) {
    return make_error(ErrorCode::ledger_failure, "ledger",
                      "ledger: the recorded total changed underneath this handle");
  }
  AnsweredRequest& stored = answers_[id.query_id][id.round];
  stored = answer;
  state_.spent = spent_after;
  kept_.push_back(&stored);
  kept_bytes_ += stored.reply.size();
  // Prune the oldest replies beyond the retention bound (their charges stay in the total).
  while (kept_bytes_ > retention_.max_reply_bytes && !kept_.empty()) {
    kept_bytes_ -= kept_.front()->reply.size();
    std::string().swap(kept_.front()->reply);
    kept_.pop_front();
  }
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
