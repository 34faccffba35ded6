#include <cgp/cgp_link.h>
#include <cgp/client/statistic.hpp>
#include <cgp/common/privacy/conversions.hpp>
#include <cgp/common/wire/codec.hpp>
#include <cgp/coordinator/queries.hpp>
#include <cgp/coordinator/valid_triple.hpp>
#include <cgp/simulation/simulated_fleet.hpp>
#include <cmath>
#include <cstdio>

int main() {
  auto epsilon = cgp::privacy::gp_epsilon_from_cgp(0.01, 1e-6, 1.0);
  auto request = cgp::DeviceRequest::distance_to_point({"q", 1}, "location", {0, 0}, 0.01);
  if (!epsilon || !request) return 1;
  std::string bytes = cgp::wire::serialize(cgp::wire::request_to_wire(*request));
  std::vector<double> out;
  std::vector<double> here{3, 4};
  if (!cgp::client::evaluate_statistic(*request, here, out) || out[0] != 5) return 1;
  auto radius = cgp::coordinator::confidence_radius(1, 0.05, 0.01);
  if (!radius) return 1;
  // A range count over three simulated devices (cgpkit::simulation on cgpkit::coordinator):
  // σ = 1 m against margins of 9 m and more, so the count is 2 (error probability < 1e-18).
  const std::vector<double> points{0, 0, 1, 1, 50, 50};
  auto fleet =
      cgp::simulation::SimulatedFleet::create(*cgp::DeviceConfig::cgp(1.0), points, 2, 7, 1);
  if (!fleet) return 1;
  cgp::coordinator::BudgetMirror mirror(fleet->size(), fleet->initial_budget());
  const double lo[2] = {-10, -10}, hi[2] = {10, 10};
  auto box = cgp::geometry::Box::create(lo, hi);
  cgp::coordinator::QueryOptions options;
  options.method = cgp::coordinator::Method::BM1;
  auto count = cgp::coordinator::range_count(
      *fleet, mirror, *box, cgp::coordinator::UserCharges::everyone(cgp::coordinator::Charge{0.5}),
      options);
  if (!count || std::lround(count->estimate) != 2) return 1;
  // The device link dials: nothing listens on port 1, so the session is unavailable.
  cgp_device* device = nullptr;
  cgp_connection* link = nullptr;
  if (cgp_device_open_cgp(nullptr, 1.0, 0, &device) != CGP_OK ||
      cgp_device_connect(device, "127.0.0.1:1", "consumer", &link) != CGP_OK ||
      cgp_connection_run_once(link) != CGP_UNAVAILABLE)
    return 1;
  cgp_connection_free(link);
  cgp_device_close(device);
  std::printf("cgpkit consumer ok: eps=%.4f, request %zu bytes, radius %.1f, count %.0f\n",
              epsilon->epsilon, bytes.size(), *radius, count->estimate);
  return 0;
}
