#include "cgp/common/privacy/confidence.hpp"

#include <cmath>
#include <limits>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::privacy {

Expected<double> gaussian_norm_bound(std::size_t dimension, double beta) {
  CGP_RETURN_IF_ERROR(require_count_in("dimension", dimension, 1, std::numeric_limits<int>::max()));
  CGP_RETURN_IF_ERROR(require_open_interval("beta", beta, 0.0, 1.0));
  double log_inv_beta = -std::log(beta);
  double lambda;
  if (dimension == 1) {
    lambda = std::sqrt(2 * (std::log(2.0) + log_inv_beta));
  } else if (dimension == 2) {
    lambda = std::sqrt(2 * log_inv_beta);
  } else {
    double d = static_cast<double>(dimension);
    lambda = std::sqrt(d + 2 * std::sqrt(d * log_inv_beta) + 2 * log_inv_beta);
  }
  return pad_up(lambda);
}

}  // namespace cgp::privacy
