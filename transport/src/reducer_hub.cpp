#include "reducer_hub.hpp"

#include <cmath>

#include "cgp/common/validate.hpp"

namespace cgp::transport::detail {

namespace {
Error collective_error(const std::string& message) {
  return make_error(ErrorCode::invalid_argument, "collective", "collective: " + message);
}
}  // namespace

Status ReducerHub::begin(const std::string& query_id, std::size_t participants) {
  if (participants == 0)
    return make_error(ErrorCode::invalid_argument, "participants",
                      "a query needs at least one gateway");
  std::lock_guard lock(mutex_);
  Open open;
  open.participants = participants;
  open.parts.resize(participants);
  if (!queries_.emplace(query_id, std::move(open)).second)
    return make_error(ErrorCode::already_exists, "query_id",
                      "query " + query_id + " is already in progress");
  return {};
}

Expected<std::optional<v1::Collective>> ReducerHub::contribute(std::size_t from,
                                                               const v1::Collective& contribution) {
  std::lock_guard lock(mutex_);
  const auto found = queries_.find(contribution.query_id());
  if (found == queries_.end())
    return make_error(ErrorCode::invalid_argument, "query_id",
                      "query " + contribution.query_id() + " is not in progress");
  Open& open = found->second;
  if (from >= open.participants)
    return collective_error("from a gateway that is not a participant of the query");
  if (contribution.sequence() != open.sequence)
    return collective_error("sequence " + std::to_string(contribution.sequence()) +
                            " out of turn: collective " + std::to_string(open.sequence) +
                            " is being gathered");
  if (open.parts[from])
    return collective_error("a second contribution to collective " + std::to_string(open.sequence) +
                            " from one gateway");
  const v1::CollectiveKind kind = contribution.kind();
  if (kind != v1::COLLECTIVE_SUM && kind != v1::COLLECTIVE_GATHER)
    return collective_error("unknown kind " + std::to_string(kind));
  if (open.arrived > 0 && kind != open.kind)
    return collective_error("kind differs from the other gateways' at collective " +
                            std::to_string(open.sequence));
  if (kind == v1::COLLECTIVE_SUM) {
    if (contribution.values_size() != 0 || contribution.sums_size() > static_cast<int>(kMaxSums))
      return collective_error("a sum carries at most " + std::to_string(kMaxSums) +
                              " integers and no doubles");
    for (const auto& part : open.parts)
      if (part && part->sums_size() != contribution.sums_size())
        return collective_error("sums of another length than the other gateways'");
  } else {
    if (contribution.sums_size() != 0 ||
        contribution.values_size() > static_cast<int>(kMaxGatherValues))
      return collective_error("a gather carries at most " + std::to_string(kMaxGatherValues) +
                              " doubles and no integers");
    // Every gathered value is finite (keys, ids, the partials of an exact sum).
    for (double v : contribution.values())
      if (!std::isfinite(v)) return collective_error("a gathered value is not finite");
    std::size_t merged = static_cast<std::size_t>(contribution.values_size());
    for (const auto& part : open.parts)
      if (part) merged += static_cast<std::size_t>(part->values_size());
    if (merged > kMaxMergedValues)
      return collective_error("the merged gather would exceed " + std::to_string(kMaxMergedValues) +
                              " doubles (kNN's k too large?)");
  }
  open.kind = kind;
  open.parts[from] = contribution;
  if (++open.arrived < open.participants) return std::optional<v1::Collective>{};
  v1::Collective merged = merge(found->first, open);
  if (kind == v1::COLLECTIVE_SUM && merged.sums_size() == 0 && contribution.sums_size() > 0)
    return collective_error("a sum overflowed 64 bits");
  open.parts.assign(open.participants, std::nullopt);
  open.arrived = 0;
  ++open.sequence;
  return std::optional<v1::Collective>(std::move(merged));
}

v1::Collective ReducerHub::merge(const std::string& query_id, Open& open) {
  v1::Collective merged;
  merged.set_query_id(query_id);
  merged.set_sequence(open.sequence);
  merged.set_kind(open.kind);
  if (open.kind == v1::COLLECTIVE_SUM) {
    const int length = open.parts.front()->sums_size();
    std::vector<std::uint64_t> totals(static_cast<std::size_t>(length), 0);
    for (const auto& part : open.parts)
      for (int i = 0; i < length; ++i) {
        std::uint64_t& total = totals[static_cast<std::size_t>(i)];
        // Counts of users: an overflow is a forged partial (merged then has no sums).
        if (__builtin_add_overflow(total, part->sums(i), &total)) return merged;
      }
    for (std::uint64_t total : totals) merged.add_sums(total);
  } else {
    for (const auto& part : open.parts)
      merged.mutable_values()->Add(part->values().begin(), part->values().end());
  }
  return merged;
}

bool ReducerHub::waiting_for(const std::string& query_id, std::size_t participant) const {
  std::lock_guard lock(mutex_);
  const auto found = queries_.find(query_id);
  if (found == queries_.end() || participant >= found->second.participants) return false;
  return found->second.arrived > 0 && !found->second.parts[participant];
}

void ReducerHub::end(const std::string& query_id) {
  std::lock_guard lock(mutex_);
  queries_.erase(query_id);
}

std::size_t ReducerHub::open_queries() const {
  std::lock_guard lock(mutex_);
  return queries_.size();
}

}  // namespace cgp::transport::detail
