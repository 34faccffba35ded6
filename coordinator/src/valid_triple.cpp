#include "cgp/coordinator/valid_triple.hpp"

#include <cmath>

#include "cgp/common/privacy/confidence.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::coordinator {

Status ReleaseAverage::add(std::span<const double> values, double rho) {
  CGP_RETURN_IF_ERROR(require_finite_positive("rho", rho));
  CGP_RETURN_IF_ERROR(require_dimension("values", values, weighted_sum_.size()));
  CGP_RETURN_IF_ERROR(require_all_finite("values", values));
  for (std::size_t k = 0; k < values.size(); ++k) weighted_sum_[k] += rho * values[k];
  total_rho_ += rho;
  ++rounds_;
  return {};
}

std::vector<double> ReleaseAverage::mean() const {
  if (rounds_ == 0) return {};
  std::vector<double> out(weighted_sum_.size());
  for (std::size_t k = 0; k < out.size(); ++k) out[k] = weighted_sum_[k] / total_rho_;
  return out;
}

Expected<double> confidence_radius(std::size_t release_dimension, double beta, double total_rho) {
  CGP_RETURN_IF_ERROR(require_finite_positive("total_rho", total_rho));
  auto lambda = privacy::gaussian_norm_bound(release_dimension, beta);
  if (!lambda) return lambda.error();
  return radius_from_lambda(*lambda, total_rho);
}

}  // namespace cgp::coordinator
