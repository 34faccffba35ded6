#include "cgp/common/geometry/threshold_shift.hpp"

#include <cmath>

#include "cgp/common/validate.hpp"

namespace cgp::geometry {

Expected<double> rectangle_threshold_shift(double gamma, double length, double width) {
  CGP_RETURN_IF_ERROR(require_finite_positive("gamma", gamma));
  CGP_RETURN_IF_ERROR(require_finite_positive("length", length));
  CGP_RETURN_IF_ERROR(require_finite_positive("width", width));
  const double perimeter_half = length + width;
  if (length > 2 * gamma && width > 2 * gamma) {
    // Appendix B, first case: aγ = ((l+w) − √((l+w)² − 16γ²))/4, rationalised to avoid
    // cancellation for small γ: aγ = 4γ² / ((l+w) + √((l+w)² − 16γ²)).
    double root = std::sqrt(perimeter_half * perimeter_half - 16 * gamma * gamma);
    return -(4 * gamma * gamma / (perimeter_half + root));
  }
  // Second case (R₁ empty): aγ = γ + ((l+w) − √((l+w)² + 4lw))/4
  //                            = γ − lw / ((l+w) + √((l+w)² + 4lw)).
  double root = std::sqrt(perimeter_half * perimeter_half + 4 * length * width);
  return -(gamma - length * width / (perimeter_half + root));
}

Expected<double> rectangle_threshold_shift(double gamma, const Box& box) {
  if (box.dimension() != 2) {
    return make_error(ErrorCode::dimension_mismatch, "box",
                      "the threshold shift of Appendix B is for 2-D rectangles, got a box of "
                      "dimension " +
                          std::to_string(box.dimension()));
  }
  return rectangle_threshold_shift(gamma, box.hi()[0] - box.lo()[0], box.hi()[1] - box.lo()[1]);
}

}  // namespace cgp::geometry
