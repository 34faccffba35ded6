// The coordinator's side of a query's collectives over gateways (docs/cluster.md): every gateway
// of the query contributes to collective k, and once all have, each gets the merge — sums added
// element-wise, gathers concatenated in participant order. No I/O and no per-device data: the
// control service sends what contribute() returns. Thread-safe.
//
// A contribution that cannot be a step of the same engine run on every gateway — a sequence
// out of turn, another kind than the others', sums of another length, an oversized gather, a
// sum that overflows — is refused by name ("collective"): the query is then aborted, never
// merged with it.
//
// A gateway lost mid-query (lose()) is left out of every collective from the one in progress
// on, unless its part of it had arrived: a sum counts zeros for it, a gather nothing, a tally
// the decided counts it last sent (coordinator/shard.hpp's Tally) — the others finish the query.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/v1/gateway_control.pb.h"

namespace cgp::transport::detail {

class ReducerHub {
 public:
  // At most this many doubles from one gateway in one gather (kNN's k smallest pairs, the
  // exact sums' partials): 1 MiB.
  static constexpr std::size_t kMaxGatherValues = 1u << 17;
  // At most this many in a merged gather (32 MiB: the control channel takes 64 MiB).
  static constexpr std::size_t kMaxMergedValues = 1u << 22;
  static constexpr std::size_t kMaxSums = 1024;

  // A query over `participants` gateways (≥ 1); `already_exists` for a query id in progress.
  Status begin(const std::string& query_id, std::size_t participants);
  // Gateway `from` (0 ≤ from < participants) contributes; the merge once it was the last one
  // (the same message for every participant), nothing while others are missing. Errors name
  // "collective" (see above) or "query_id" (no such query in progress).
  Expected<std::optional<v1::Collective>> contribute(std::size_t from,
                                                     const v1::Collective& contribution);
  // Participant `lost` will not contribute again: the merge of the collective in progress when
  // every other participant's part is in (sent to the others), else nothing. `unavailable`
  // naming "gateway" when no participant is left; "query_id" when the query is not in progress.
  Expected<std::optional<v1::Collective>> lose(const std::string& query_id, std::size_t lost);
  // Whether a collective of the query has contributions and still waits for `participant`'s.
  bool waiting_for(const std::string& query_id, std::size_t participant) const;
  // Forgets the query (finished or aborted); a later contribution to it is refused.
  void end(const std::string& query_id);
  std::size_t open_queries() const;

 private:
  struct Open {
    std::size_t participants = 0;
    std::uint64_t sequence = 0;  // the collective being gathered
    v1::CollectiveKind kind = v1::COLLECTIVE_UNSPECIFIED;
    bool tally = false;
    std::vector<std::optional<v1::Collective>> parts;
    std::size_t arrived = 0;
    std::vector<char> lost;
    // Each participant's users decided so far {counted, eliminated}: a lost one's tally part.
    std::vector<std::array<std::uint64_t, 2>> decided;
    bool complete() const;
  };
  // The merge once every participant not lost has contributed (then the next collective opens);
  // nothing before. Errors name "collective".
  static Expected<std::optional<v1::Collective>> merge_if_complete(const std::string& query_id,
                                                                   Open& open);
  mutable std::mutex mutex_;
  std::map<std::string, Open, std::less<>> queries_;
};

}  // namespace cgp::transport::detail
