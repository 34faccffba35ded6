// The coordinator's side of a query's collectives over gateways (docs/cluster.md): every gateway
// of the query contributes to collective k, and once all have, each gets the merge — sums added
// element-wise, gathers concatenated in participant order. No I/O and no per-device data: the
// control service sends what contribute() returns. Thread-safe.
//
// A contribution that cannot be a step of the same engine run on every gateway — a sequence
// out of turn, another kind than the others', sums of another length, an oversized gather, a
// sum that overflows — is refused by name ("collective"): the query is then aborted, never
// merged with it.
#pragma once

#include <cstddef>
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
    std::vector<std::optional<v1::Collective>> parts;
    std::size_t arrived = 0;
  };
  static v1::Collective merge(const std::string& query_id, Open& open);
  mutable std::mutex mutex_;
  std::map<std::string, Open, std::less<>> queries_;
};

}  // namespace cgp::transport::detail
