#include <catch2/catch.hpp>
#include <cmath>

#include "cgp/common/geometry/threshold_shift.hpp"
#include "support/errors.hpp"

using namespace cgp;
using namespace cgp::geometry;

namespace {
// Appendix B's formula for η(γ), written exactly as in the paper.
double paper_eta(double gamma, double l, double w) {
  if (l > 2 * gamma && w > 2 * gamma)
    return -((4 * gamma * (l + w) - 4 * gamma * std::sqrt((l + w) * (l + w) - 16 * gamma * gamma)) /
             (16 * gamma));
  return -((8 * gamma * gamma + 2 * gamma * (l + w) -
            2 * gamma * std::sqrt((l + w) * (l + w) + 4 * l * w)) /
           (8 * gamma));
}
}  // namespace

TEST_CASE("eta(gamma) equals Appendix B's formula in both cases", "[geometry][shift]") {
  for (double gamma : {0.5, 5.0, 50.0, 200.0, 1000.0}) {
    for (double l : {100.0, 400.0, 1500.0}) {
      for (double w : {100.0, 800.0}) {
        INFO("gamma=" << gamma << " l=" << l << " w=" << w);
        double eta = *rectangle_threshold_shift(gamma, l, w);
        CHECK(eta == Approx(paper_eta(gamma, l, w)).epsilon(1e-9));
        CHECK(eta <= 0);
        CHECK(eta >= -gamma);  // a ∈ [0, 1]
      }
    }
  }
}

TEST_CASE("eta(gamma) equalises the shifted band areas", "[geometry][shift]") {
  for (double gamma : {1.0, 20.0, 100.0, 600.0}) {
    double l = 1000, w = 500;
    double a = -*rectangle_threshold_shift(gamma, l, w) / gamma;
    double outer = 2 * (1 - a) * gamma * (l + w) + 4 * (1 - a) * (1 - a) * gamma * gamma;
    double inner = (l > 2 * gamma && w > 2 * gamma)
                       ? 2 * (1 + a) * gamma * (l + w) - 4 * (1 + a) * (1 + a) * gamma * gamma
                       : l * w;
    INFO("gamma=" << gamma);
    CHECK(outer == Approx(inner).epsilon(1e-9));
  }
}

TEST_CASE("eta(gamma) is accurate for tiny gamma (no cancellation)", "[geometry][shift]") {
  // aγ ≈ 4γ²/(2(l+w)) for γ ≪ l + w; the unrationalised formula would round to 0.
  double eta = *rectangle_threshold_shift(1e-6, 1000, 1000);
  CHECK(eta < 0);
  CHECK(eta == Approx(-4e-12 / 4000).epsilon(1e-9));
}

TEST_CASE("eta for a Box, and bad parameters", "[geometry][shift]") {
  double lo[2] = {0, 0}, hi[2] = {300, 100};
  Box box = *Box::create(lo, hi);
  CHECK(*rectangle_threshold_shift(10, box) == *rectangle_threshold_shift(10, 300, 100));
  double lo3[3] = {0, 0, 0}, hi3[3] = {1, 1, 1};
  CGP_REQUIRE_ERROR(rectangle_threshold_shift(10, *Box::create(lo3, hi3)),
                    ErrorCode::dimension_mismatch, "box");
  CGP_REQUIRE_ERROR(rectangle_threshold_shift(0, 1, 1), ErrorCode::not_positive, "gamma");
  CGP_REQUIRE_ERROR(rectangle_threshold_shift(1, -1, 1), ErrorCode::not_positive, "length");
  CGP_REQUIRE_ERROR(rectangle_threshold_shift(1, 1, NAN), ErrorCode::not_finite, "width");
}
