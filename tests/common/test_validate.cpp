#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "cgp/common/validate.hpp"
#include "support/errors.hpp"

using namespace cgp;

TEST_CASE("require_finite_positive names the parameter and the value", "[validate]") {
  CHECK(require_finite_positive("rho", 0.5).ok());
  auto negative = require_finite_positive("rho", -1);
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.error().code == ErrorCode::not_positive);
  CHECK(negative.error().parameter == "rho");
  CHECK(negative.error().message == "rho must be finite and positive, got -1");
  CHECK(require_finite_positive("rho", 0).error().code == ErrorCode::not_positive);
  CHECK(require_finite_positive("rho", -0.0).error().code == ErrorCode::not_positive);
  CHECK(require_finite_positive("rho", std::nan("")).error().code == ErrorCode::not_finite);
  CHECK(require_finite_positive("rho", INFINITY).error().message ==
        "rho must be finite and positive, got inf");
  CHECK(require_finite_positive("rho", -INFINITY).error().code == ErrorCode::not_finite);
}

TEST_CASE("require_all_finite names the first bad index", "[validate]") {
  std::vector<double> values{1, 2, std::nan(""), INFINITY};
  auto status = require_all_finite("point", values);
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().parameter == "point[2]");
  CHECK(status.error().code == ErrorCode::not_finite);
}

TEST_CASE("require_open_interval rejects the ends and non-finite values", "[validate]") {
  CHECK(require_open_interval("beta", 0.5, 0, 1).ok());
  CHECK(require_open_interval("beta", 0, 0, 1).error().code == ErrorCode::out_of_range);
  CHECK(require_open_interval("beta", 1, 0, 1).error().code == ErrorCode::out_of_range);
  CHECK(require_open_interval("beta", std::nan(""), 0, 1).error().code == ErrorCode::not_finite);
  CHECK(require_open_interval("beta", 2, 0, 1).error().message == "beta must be in (0, 1), got 2");
}

TEST_CASE("require_count_in and require_dimension", "[validate]") {
  CHECK(require_count_in("c", 0, 1, 64).error().code == ErrorCode::out_of_range);
  CHECK(require_count_in("c", 65, 1, 64).error().message ==
        "c must be a whole number in [1, 64], got 65");
  CHECK(require_count_in("c", 64, 1, 64).ok());
  std::vector<double> three(3);
  CHECK(require_dimension("point", three, 3).ok());
  auto status = require_dimension("point", three, 2);
  CHECK(status.error().code == ErrorCode::dimension_mismatch);
  CHECK(status.error().message == "point must have dimension 2, got 3");
}

TEST_CASE("every error code has a distinct name", "[validate]") {
  std::vector<std::string> names;
  for (int code = 0; code <= static_cast<int>(kLastErrorCode); ++code) {
    auto name = std::string(error_code_name(static_cast<ErrorCode>(code)));
    CHECK(name != "unknown_error");
    for (const auto& other : names) CHECK(other != name);
    names.push_back(name);
  }
  CHECK(error_code_name(static_cast<ErrorCode>(999)) == "unknown_error");
}

TEST_CASE("Expected holds a value or an error, never both", "[validate]") {
  Expected<int> good = 3;
  CHECK(good.has_value());
  CHECK(*good == 3);
  CHECK_THROWS_AS(good.error(), std::logic_error);
  Expected<int> bad = make_error(ErrorCode::not_finite, "x", "x must be finite");
  CHECK_FALSE(bad.has_value());
  CHECK_THROWS_AS(bad.value(), BadExpectedAccess);
  CHECK(bad.error().to_string() == "not_finite: x must be finite");
}

namespace {

cgp::Expected<double> halve_positive(double x) {
  CGP_RETURN_IF_ERROR(cgp::require_finite_positive("x", x));
  return x / 2;
}

cgp::Expected<double> quarter_positive(double x) {
  CGP_ASSIGN_OR_RETURN(const double half, halve_positive(x));
  CGP_ASSIGN_OR_RETURN(const double quarter, halve_positive(half));
  return quarter;
}

cgp::Status check_quarter(double x) {
  CGP_RETURN_IF_ERROR(quarter_positive(x));
  return {};
}

}  // namespace

TEST_CASE("propagation macros return the first error and pass values on", "[validate]") {
  CHECK(*quarter_positive(8) == 2);
  CHECK(check_quarter(8).ok());
  auto failed = quarter_positive(-1);
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code == cgp::ErrorCode::not_positive);
  CHECK(failed.error().parameter == "x");
  CHECK(check_quarter(std::nan("")).error().code == cgp::ErrorCode::not_finite);
}
