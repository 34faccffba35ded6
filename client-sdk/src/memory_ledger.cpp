#include "cgp/client/ledger.hpp"
#include "cgp/common/privacy/rounding.hpp"
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

namespace {
Error changed_underneath(const std::string& what) {
  return make_error(ErrorCode::ledger_failure, "ledger",
                    "ledger: " + what + " changed underneath this handle");
}
}  // namespace

Status MemoryLedger::record_watch(const std::string& watch_id, const WatchRecord& watch,
                                  double spent_before, double spent_after) {
  if (state_.spent != spent_before || state_.halted) return changed_underneath("the total");
  if (!watches_.try_emplace(watch_id, watch).second)
    return changed_underneath("watch '" + watch_id + "'");
  state_.spent = spent_after;
  return {};
}

Status MemoryLedger::record_watch_tick(const std::string& watch_id, const WatchTickRecord& tick,
                                       double expost_before, double expost_after) {
  auto it = watches_.find(watch_id);
  if (it == watches_.end() || it->second.last_tick >= tick.tick || it->second.alert_tick != 0 ||
      it->second.budget_exhausted || state_.expost_spent != expost_before)
    return changed_underneath("watch '" + watch_id + "'");
  WatchRecord& watch = it->second;
  watch.last_tick = tick.tick;
  if (tick.alert) watch.alert_tick = tick.tick;
  watch.budget_exhausted = tick.budget_exhausted;
  if (tick.expost_charge > 0)
    watch.expost_spent = privacy::next_up(watch.expost_spent + tick.expost_charge);
  state_.expost_spent = expost_after;
  return {};
}

Expected<std::optional<WatchRecord>> MemoryLedger::find_watch(const std::string& watch_id) {
  auto it = watches_.find(watch_id);
  if (it == watches_.end()) return std::optional<WatchRecord>{};
  return std::optional<WatchRecord>{it->second};
}

}  // namespace cgp::client
