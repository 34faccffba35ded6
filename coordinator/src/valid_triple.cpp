#include "cgp/coordinator/valid_triple.hpp"

#include <cmath>

#include "cgp/common/privacy/confidence.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::coordinator {

Expected<double> confidence_radius(std::size_t release_dimension, double beta, double total_rho) {
  CGP_RETURN_IF_ERROR(require_finite_positive("total_rho", total_rho));
  CGP_ASSIGN_OR_RETURN(auto lambda, privacy::gaussian_norm_bound(release_dimension, beta));
  return radius_from_lambda(lambda, total_rho);
}

}  // namespace cgp::coordinator
