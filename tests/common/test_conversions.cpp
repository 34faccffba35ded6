#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "cgp/common/privacy/conversions.hpp"
#include "support/eq3_oracle.hpp"
#include "support/errors.hpp"

using namespace cgp;
using namespace cgp::privacy;

using test::eq3_direct;

TEST_CASE("Lemma 3.1: eps-GP is eps^2/2-CGP, rounded up", "[privacy][lemma3.1]") {
  for (double eps : {1e-6, 0.01, 0.5, 1.0, 3.0, 1e3}) {
    double rho = *cgp_rho_from_pure_gp(eps);
    CHECK(rho >= eps * eps / 2);
    CHECK(rho <= eps * eps / 2 * (1 + 1e-14));
  }
  CGP_REQUIRE_ERROR(cgp_rho_from_pure_gp(0), ErrorCode::not_positive, "epsilon");
  CGP_REQUIRE_ERROR(cgp_rho_from_pure_gp(-1), ErrorCode::not_positive, "epsilon");
  CGP_REQUIRE_ERROR(cgp_rho_from_pure_gp(std::nan("")), ErrorCode::not_finite, "epsilon");
  CGP_REQUIRE_ERROR(cgp_rho_from_pure_gp(INFINITY), ErrorCode::not_finite, "epsilon");
}

TEST_CASE("Lemma 3.2: minimised eps <= closed form, and as good as a dense grid over s",
          "[privacy][lemma3.2]") {
  for (double rho : {1e-8, 1e-6, 1e-4, 1e-2, 1.0, 100.0}) {
    for (double delta : {1e-12, 1e-9, 1e-6, 1e-3, 0.1, 0.5}) {
      for (double lambda : {0.01, 1.0, 100.0, 1e4}) {
        INFO("rho=" << rho << " delta=" << delta << " lambda=" << lambda);
        double closed = *gp_epsilon_from_cgp_closed_form(rho, delta, lambda);
        auto minimised = *gp_epsilon_from_cgp(rho, delta, lambda);
        CHECK(minimised.epsilon <= closed);
        CHECK(minimised.s > 1);
        CHECK(minimised.s <= 2 / delta - 1);
        // The reported s gives the reported ε: it is a valid instance of eq. (3). (s near 1 is
        // rounded when reported, so s/(s−1) is only good to ~1e-11 here.)
        CHECK(minimised.epsilon >= eq3_direct(rho, delta, lambda, minimised.s) * (1 - 1e-9));
        // As good as a dense grid over s (whose values are ≥ the true minimum).
        CHECK(minimised.epsilon <= test::eq3_grid_min(rho, delta, lambda) * (1 + 1e-9));
      }
    }
  }
}

TEST_CASE("Lemma 3.2: closed form is rho*Lambda + 2 sqrt(rho log(1/delta))",
          "[privacy][lemma3.2]") {
  double closed = *gp_epsilon_from_cgp_closed_form(1e-4, 1e-6, 100);
  double expected = 1e-4 * 100 + 2 * std::sqrt(1e-4 * std::log(1e6));
  CHECK(closed >= expected);
  CHECK(closed == Approx(expected).epsilon(1e-14));
  // The minimisation gains most where neither term dominates.
  double minimised = gp_epsilon_from_cgp(1e-4, 1e-6, 100)->epsilon;
  CHECK(minimised < closed * 0.999);
}

TEST_CASE("Lemma 3.2 at a given s", "[privacy][lemma3.2]") {
  double at = *gp_epsilon_from_cgp_at(1e-3, 1e-5, 10, 2.0);
  CHECK(at >= eq3_direct(1e-3, 1e-5, 10, 2.0));
  CHECK(at == Approx(eq3_direct(1e-3, 1e-5, 10, 2.0)).epsilon(1e-13));
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp_at(1e-3, 1e-5, 10, 1.0), ErrorCode::out_of_range, "s");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp_at(1e-3, 0.5, 10, 3.5), ErrorCode::out_of_range, "s");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp_at(1e-3, 0.5, 10, std::nan("")), ErrorCode::not_finite,
                    "s");
}

TEST_CASE("Lemma 3.2 rejects bad parameters by name", "[privacy][lemma3.2]") {
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(0, 1e-6, 1), ErrorCode::not_positive, "rho");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(-1, 1e-6, 1), ErrorCode::not_positive, "rho");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(std::nan(""), 1e-6, 1), ErrorCode::not_finite, "rho");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(1, 0, 1), ErrorCode::out_of_range, "delta");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(1, 1, 1), ErrorCode::out_of_range, "delta");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(1, INFINITY, 1), ErrorCode::not_finite, "delta");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(1, 1e-6, INFINITY), ErrorCode::not_finite, "lambda");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp(1, 1e-6, 0), ErrorCode::not_positive, "lambda");
  CGP_REQUIRE_ERROR(gp_epsilon_from_cgp_closed_form(1, 1e-6, -2), ErrorCode::not_positive,
                    "lambda");
}
