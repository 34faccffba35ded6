#include <boost/math/special_functions/gamma.hpp>
#include <catch2/catch.hpp>
#include <cmath>

#include "cgp/common/privacy/confidence.hpp"
#include "support/errors.hpp"

using namespace cgp;
using namespace cgp::privacy;

TEST_CASE("Lemma 6.1: lambda(2, beta) = sqrt(2 log(1/beta)) and lambda(1, beta)",
          "[privacy][lemma6.1]") {
  for (double beta : {1e-12, 1e-6, 0.01, 0.05, 0.25, 0.9}) {
    INFO("beta = " << beta);
    double two = *gaussian_norm_bound(2, beta);
    CHECK(two >= std::sqrt(2 * std::log(1 / beta)));
    CHECK(two == Approx(std::sqrt(2 * std::log(1 / beta))).epsilon(1e-14));
    double one = *gaussian_norm_bound(1, beta);
    CHECK(one == Approx(std::sqrt(2 * std::log(2 / beta))).epsilon(1e-14));
    for (std::size_t d : {3, 10, 784}) {
      double dd = static_cast<double>(d), l = std::log(1 / beta);
      CHECK(*gaussian_norm_bound(d, beta) ==
            Approx(std::sqrt(dd + 2 * std::sqrt(dd * l) + 2 * l)).epsilon(1e-14));
    }
  }
}

TEST_CASE("Lemma 6.1 bounds hold: P(||Z|| > lambda(d, beta)) <= beta, exactly computed",
          "[privacy][lemma6.1]") {
  // ‖Z‖² ~ χ²_d, so P(‖Z‖ > λ) = Q(d/2, λ²/2), the regularized upper incomplete gamma.
  for (double beta : {1e-9, 1e-4, 0.01, 0.05, 0.3}) {
    for (std::size_t d : {1, 2, 3, 5, 32, 784, 4096}) {
      INFO("d = " << d << " beta = " << beta);
      double lambda = *gaussian_norm_bound(d, beta);
      double tail = boost::math::gamma_q(static_cast<double>(d) / 2, lambda * lambda / 2);
      CHECK(tail <= beta * (1 + 1e-12));
    }
  }
}

TEST_CASE("lambda(d, beta) rejects bad parameters", "[privacy][lemma6.1]") {
  CGP_REQUIRE_ERROR(gaussian_norm_bound(0, 0.1), ErrorCode::out_of_range, "dimension");
  CGP_REQUIRE_ERROR(gaussian_norm_bound(2, 0), ErrorCode::out_of_range, "beta");
  CGP_REQUIRE_ERROR(gaussian_norm_bound(2, 1), ErrorCode::out_of_range, "beta");
  CGP_REQUIRE_ERROR(gaussian_norm_bound(2, -0.5), ErrorCode::out_of_range, "beta");
  CGP_REQUIRE_ERROR(gaussian_norm_bound(2, std::nan("")), ErrorCode::not_finite, "beta");
}
