// Where cgp-sim's queries run: the in-process simulated fleet, or a live coordinator service
// (--fleet ADDR) whose devices hold the same data. The experiments are the same code over both.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/coordinator/queries.hpp"

namespace cgp::experiments {

struct Dataset;
struct Common;

class QueryBackend {
 public:
  virtual ~QueryBackend() = default;
  virtual std::size_t size() const = 0;
  // Before each repetition. In-process: fresh budgets of `budget` per user (the row's ρ: a
  // device answers ρ ≥ budget·2^-18 only), noise seeded from `seed`. A live coordinator's
  // devices keep what they spent and their own budgets: every repetition spends real budget.
  virtual void start_repetition(std::uint64_t seed, double budget) = 0;
  // Noisy values released so far (in-process: the simulated fleet's count); nullopt where the
  // backend cannot count them (a live coordinator).
  virtual std::optional<std::uint64_t> values_released() const { return std::nullopt; }
  // `charges`: whom the query asks and the most it charges each. A live coordinator takes one
  // cap for all (a per-user cap is an error there).
  virtual Expected<coordinator::CountResult> range_count(const geometry::Region& range,
                                                         const coordinator::UserCharges& charges,
                                                         const coordinator::QueryOptions& o) = 0;
  virtual Expected<coordinator::KdeResult> kde(std::span<const double> p, double bandwidth,
                                               const coordinator::UserCharges& charges,
                                               const coordinator::QueryOptions& o) = 0;
  virtual Expected<coordinator::KnnResult> knn(std::span<const double> p, std::size_t k,
                                               const coordinator::UserCharges& charges,
                                               const coordinator::QueryOptions& o) = 0;
  // Alg. 3 over `ranges` with each user's `budget` spread over them. In-process:
  // AdaptiveBudget::fixed(budget, m). A live coordinator uses its own open-ended plan over its
  // devices' budgets (`budget` is not sent).
  virtual Expected<std::vector<coordinator::CountResult>> adaptive_range_counts(
      std::span<const geometry::Region> ranges, double budget,
      const coordinator::QueryOptions& o) = 0;
  // Alg. 9 over the curator: in-process user 0, a live coordinator's --curator device.
  virtual Expected<coordinator::ThresholdResult> threshold(double q, double population,
                                                           coordinator::Charge cap,
                                                           const coordinator::QueryOptions& o) = 0;
};

// The simulated fleet over `data`, each device with a CGP filter of `capacity`. The fleet views
// the points of `data`, which must outlive the backend.
std::unique_ptr<QueryBackend> in_process_backend(const Dataset& data, double capacity,
                                                 const Common& common);

}  // namespace cgp::experiments
