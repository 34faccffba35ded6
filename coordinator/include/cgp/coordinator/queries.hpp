// The queries of paper §6 and Appendix C, each with the baselines BM0/BM1 (one release with the
// whole ρ) and the post-processed iterative-elimination methods PM0/PM1:
//   range counting (Alg. 6), Gaussian KDE (Alg. 7), kNN (Alg. 8), threshold (Alg. 9).
// Method 0 uses point privatization (Cor. 6.1), method 1 distance privatization (Cor. 6.2).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/charges.hpp"
#include "cgp/coordinator/elimination.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/coordinator/shard.hpp"

namespace cgp::coordinator {

enum class Method { BM0, BM1, PM0, PM1 };

std::string_view method_name(Method method) noexcept;
Expected<Method> parse_method(std::string_view name);  // "BM0", "bm0", ...
inline Triple triple_of(Method m) noexcept {
  return (m == Method::BM0 || m == Method::PM0) ? Triple::point : Triple::distance;
}
inline bool eliminates(Method m) noexcept {
  return m == Method::PM0 || m == Method::PM1;
}

struct QueryOptions {
  Method method = Method::PM1;
  std::size_t rounds = 4;  // c, for PM methods
  privacy::SplitSchedule split = privacy::SplitSchedule::even;
  double beta = 0.1;  // β₀ = β/4 drives elimination (Remark 6)
  bool shift = true;  // BM1/PM1 on ranges: count ỹ < η(γ) of Appendix B instead of ỹ < 0
  std::string query_id = "query";
  std::string component_id = "location";
  // The fleet is one shard of a bigger one (shard.hpp): every shard runs the same query calls,
  // results are over every shard (kNN neighbours as global ids), reports per shard.
  Shard shard;
};

struct CountResult {
  double estimate = 0;
  QueryReport report;
};
struct KdeResult {
  double estimate = 0;
  QueryReport report;
};
struct KnnResult {
  std::vector<UserId> neighbours;  // nearest first (by the private estimate, ties by id); global
  QueryReport report;
};
struct ThresholdResult {
  bool below = false;  // the private answer to "count < qN"
  QueryReport report;
};

// `charges`: the users the query is over and the most it charges each (over all its rounds),
// e.g. UserCharges::everyone(Charge{1e-4}). What each was charged is in the result's report.
Expected<CountResult> range_count(Fleet& fleet, BudgetMirror& mirror, const geometry::Region& range,
                                  const UserCharges& charges, const QueryOptions& options);
Expected<KdeResult> kde(Fleet& fleet, BudgetMirror& mirror, std::span<const double> p,
                        double bandwidth, const UserCharges& charges, const QueryOptions& options);
Expected<KnnResult> knn(Fleet& fleet, BudgetMirror& mirror, std::span<const double> p,
                        std::size_t k, const UserCharges& charges, const QueryOptions& options);
// Alg. 9 (central model, n = 1): `user` holds a 1-D component with a count (sensitivity 1);
// is it below q·N? BM1 releases it once; PM0/PM1 use PIE-NI with ν_low = ν_high = qN. The
// user is charged at most `cap`. One user: not sharded (options.shard is an error).
Expected<ThresholdResult> threshold(Fleet& fleet, BudgetMirror& mirror, UserId user, double q,
                                    double population, Charge cap, const QueryOptions& options);

// η for BM1/PM1 on a range at noise scale γ: Appendix B for a 2-D box; for a disc or polygon
// the same formula on its bounding box (a heuristic: the paper gives η for rectangles only);
// 0 in other dimensions.
double range_threshold_shift(const geometry::Region& range, double gamma);

}  // namespace cgp::coordinator
