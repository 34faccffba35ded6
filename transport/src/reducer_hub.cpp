#include "reducer_hub.hpp"

#include <algorithm>
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
  open.lost.assign(participants, 0);
  open.decided.assign(participants, {0, 0});
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
  if (from >= open.participants || open.lost[from])
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
  if (open.arrived > 0 && (kind != open.kind || contribution.tally() != open.tally))
    return collective_error("kind differs from the other gateways' at collective " +
                            std::to_string(open.sequence));
  if (contribution.decided_size() != 0 && contribution.decided_size() != 2)
    return collective_error("decided carries 2 counts (counted, eliminated) or none");
  if (kind == v1::COLLECTIVE_SUM) {
    if (contribution.values_size() != 0 || contribution.sums_size() > static_cast<int>(kMaxSums))
      return collective_error("a sum carries at most " + std::to_string(kMaxSums) +
                              " integers and no doubles");
    if (contribution.tally() && contribution.sums_size() != 2)
      return collective_error("a tally carries 2 counts (counted, eliminated)");
    for (const auto& part : open.parts)
      if (part && part->sums_size() != contribution.sums_size())
        return collective_error("sums of another length than the other gateways'");
  } else {
    if (contribution.tally()) return collective_error("a gather cannot be a tally");
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
  open.tally = contribution.tally();
  if (contribution.decided_size() == 2)
    open.decided[from] = {contribution.decided(0), contribution.decided(1)};
  open.parts[from] = contribution;
  ++open.arrived;
  return merge_if_complete(found->first, open);
}

Expected<std::optional<v1::Collective>> ReducerHub::lose(const std::string& query_id,
                                                         std::size_t lost) {
  std::lock_guard lock(mutex_);
  const auto found = queries_.find(query_id);
  if (found == queries_.end())
    return make_error(ErrorCode::invalid_argument, "query_id",
                      "query " + query_id + " is not in progress");
  Open& open = found->second;
  if (lost >= open.participants || open.lost[lost]) return std::optional<v1::Collective>{};
  open.lost[lost] = 1;
  if (std::find(open.lost.begin(), open.lost.end(), 0) == open.lost.end())
    return make_error(ErrorCode::unavailable, "gateway",
                      "gateway: every gateway of query " + query_id + " was lost");
  // Nobody has opened the collective in progress yet: the next contribution completes it.
  if (open.arrived == 0) return std::optional<v1::Collective>{};
  return merge_if_complete(found->first, open);
}

bool ReducerHub::Open::complete() const {
  for (std::size_t i = 0; i < participants; ++i)
    if (!lost[i] && !parts[i]) return false;
  return true;
}

Expected<std::optional<v1::Collective>> ReducerHub::merge_if_complete(const std::string& query_id,
                                                                      Open& open) {
  if (!open.complete()) return std::optional<v1::Collective>{};
  v1::Collective merged;
  merged.set_query_id(query_id);
  merged.set_sequence(open.sequence);
  merged.set_kind(open.kind);
  if (open.kind == v1::COLLECTIVE_SUM) {
    std::size_t length = 0;
    for (const auto& part : open.parts)
      if (part) length = static_cast<std::size_t>(part->sums_size());
    std::vector<std::uint64_t> totals(length, 0);
    for (std::size_t p = 0; p < open.participants; ++p) {
      // A lost participant's part: its decided counts in a tally, zeros in any other sum.
      const auto& part = open.parts[p];
      for (std::size_t i = 0; i < length; ++i) {
        const std::uint64_t value =
            part ? part->sums(static_cast<int>(i)) : (open.tally ? open.decided[p][i] : 0);
        // Counts of users: an overflow is a forged partial.
        if (__builtin_add_overflow(totals[i], value, &totals[i]))
          return collective_error("a sum overflowed 64 bits");
      }
    }
    for (std::uint64_t total : totals) merged.add_sums(total);
  } else {
    for (const auto& part : open.parts)
      if (part) merged.mutable_values()->Add(part->values().begin(), part->values().end());
  }
  open.parts.assign(open.participants, std::nullopt);
  open.arrived = 0;
  ++open.sequence;
  return std::optional<v1::Collective>(std::move(merged));
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
