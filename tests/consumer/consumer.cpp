#include <cgp/client/statistic.hpp>
#include <cgp/common/privacy/conversions.hpp>
#include <cgp/common/wire/codec.hpp>
#include <cgp/coordinator/valid_triple.hpp>
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
  std::printf("cgpkit consumer ok: eps=%.4f, request %zu bytes, radius %.1f\n", epsilon->epsilon,
              bytes.size(), *radius);
  return 0;
}
