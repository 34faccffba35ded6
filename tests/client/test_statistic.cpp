#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "cgp/client/statistic.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "support/errors.hpp"

using namespace cgp;
using namespace cgp::client;

TEST_CASE("statistics evaluate phi on the device's own value", "[client][statistic]") {
  std::vector<double> here{3, 4};
  std::vector<double> out;
  auto location = *DeviceRequest::location({"q", 1}, "location", 0.1);
  REQUIRE(evaluate_statistic(location, here, out).ok());
  CHECK(out == here);
  CHECK(output_dimension(location, 2) == 2);

  auto distance = *DeviceRequest::distance_to_point({"q", 1}, "location", {0, 0}, 0.1);
  REQUIRE(evaluate_statistic(distance, here, out).ok());
  CHECK(out == std::vector<double>{5});
  CHECK(output_dimension(distance, 2) == 1);

  double lo[2] = {0, 0}, hi[2] = {10, 10};
  auto region = *DeviceRequest::signed_distance_to_region({"q", 1}, "location",
                                                          *geometry::Box::create(lo, hi), 0.1);
  REQUIRE(evaluate_statistic(region, here, out).ok());
  CHECK(out == std::vector<double>{-3});
}

TEST_CASE("every statistic is 1-Lipschitz: K = 1 is known on the device", "[client][statistic]") {
  for (auto kind : {StatisticKind::location, StatisticKind::distance_to_point,
                    StatisticKind::signed_distance_to_region})
    CHECK(lipschitz_constant(kind) == 1.0);
}

TEST_CASE("a component that does not fit the request is a named error", "[client][statistic]") {
  std::vector<double> three_d{1, 2, 3}, nan_value{NAN, 0}, empty;
  std::vector<double> out;
  auto distance = *DeviceRequest::distance_to_point({"q", 1}, "location", {0, 0}, 0.1);
  auto status = evaluate_statistic(distance, three_d, out);
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code == ErrorCode::dimension_mismatch);
  CHECK(status.error().parameter == "component");
  CHECK(evaluate_statistic(distance, nan_value, out).error().code == ErrorCode::not_finite);
  CHECK(evaluate_statistic(distance, empty, out).error().code == ErrorCode::dimension_mismatch);
  auto location = *DeviceRequest::location({"q", 1}, "location", 0.1);
  CHECK(evaluate_statistic(location, three_d, out).ok());  // location takes any dimension
}
