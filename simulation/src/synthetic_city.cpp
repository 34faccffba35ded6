#include "cgp/simulation/synthetic_city.hpp"

#include <algorithm>
#include <random>

namespace cgp::simulation {

const std::vector<Hotspot>& synthetic_city_hotspots() {
  static const std::vector<Hotspot> hotspots{
      {9500, 10500, 900, 0.30},   // downtown
      {5200, 14800, 1500, 0.20},  // north-west district
      {14500, 6200, 1300, 0.20},  // south-east district
      {11800, 12200, 300, 0.10},  // central station
      {17500, 17000, 600, 0.10},  // airport
      {4500, 4800, 700, 0.10},    // campus
  };
  return hotspots;
}

std::vector<double> synthetic_city(std::size_t users, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1), anywhere(0, kSyntheticCitySide);
  std::normal_distribution<double> normal(0, 1);
  const auto& hotspots = synthetic_city_hotspots();
  std::vector<double> points(2 * users);
  for (std::size_t i = 0; i < users; ++i) {
    double x, y;
    if (unit(rng) < 0.4) {
      x = anywhere(rng);
      y = anywhere(rng);
    } else {
      double pick = unit(rng);
      std::size_t h = 0;
      while (h + 1 < hotspots.size() && pick > hotspots[h].weight) pick -= hotspots[h++].weight;
      x = hotspots[h].x + hotspots[h].sigma * normal(rng);
      y = hotspots[h].y + hotspots[h].sigma * normal(rng);
    }
    points[2 * i] = std::clamp(x, 0.0, kSyntheticCitySide);
    points[2 * i + 1] = std::clamp(y, 0.0, kSyntheticCitySide);
  }
  return points;
}

}  // namespace cgp::simulation
