// The README's usage example, compiled with the build so that it stays correct.
#include <cgp/common/geometry/signed_distance.hpp>
#include <cgp/common/privacy/approx_gp_filter.hpp>
#include <cgp/common/privacy/budget_split.hpp>
#include <cgp/common/privacy/conversions.hpp>
#include <cgp/common/privacy/gaussian_profile.hpp>
#include <cstdio>
using namespace cgp;
int main() {
  auto lemma = privacy::gp_epsilon_from_cgp(1e-4, 1e-6, 100);
  auto exact = privacy::gp_epsilon_from_gaussian_budget(1e-4, 1e-6, 100);
  if (!exact) std::puts(exact.error().to_string().c_str());
  double capacity = *privacy::approx_gp_capacity(0.1, 1e-6, 100);
  auto parts = *privacy::split_budget(1e-4, 64, privacy::SplitSchedule::doubling);
  auto square = *geometry::Polygon::create({{0, 0}, {100, 0}, {100, 100}, {0, 100}},
                                           {{{40, 40}, {60, 40}, {60, 60}}});
  double here[2] = {10, 50};
  double proj = geometry::signed_distance(square, here);
  std::printf("%g %g %g %zu %g\n", lemma->epsilon, *exact, capacity, parts.size(), proj);
}
