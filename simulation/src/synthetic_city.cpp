#include "cgp/simulation/synthetic_city.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mix64.hpp"

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

namespace {

// A user's own stream of uniforms (SplitMix64 from a key of (seed, id)): a point never depends on
// which other users are generated, or where.
class UserStream {
 public:
  UserStream(std::uint64_t seed, std::uint64_t id)
      : state_(mix64(seed ^ mix64(id + 0x632be59bd9b4e019ULL))) {}
  double uniform() {  // [0, 1), 53 bits
    state_ += 0x9e3779b97f4a7c15ULL;
    return static_cast<double>(mix64(state_) >> 11) * 0x1p-53;
  }

 private:
  std::uint64_t state_;
};

}  // namespace

std::vector<double> synthetic_city(std::size_t users, std::uint64_t seed) {
  return synthetic_city(0, users, seed);
}

std::vector<double> synthetic_city(std::size_t first, std::size_t count, std::uint64_t seed) {
  constexpr double kTwoPi = 6.283185307179586;
  const auto& hotspots = synthetic_city_hotspots();
  std::vector<double> points(2 * count);
  for (std::size_t i = 0; i < count; ++i) {
    UserStream random(seed, first + i);
    double x, y;
    if (random.uniform() < 0.4) {
      x = kSyntheticCitySide * random.uniform();
      y = kSyntheticCitySide * random.uniform();
    } else {
      double pick = random.uniform();
      std::size_t h = 0;
      while (h + 1 < hotspots.size() && pick > hotspots[h].weight) pick -= hotspots[h++].weight;
      // Box–Muller: two independent standard normals.
      const double r = std::sqrt(-2 * std::log1p(-random.uniform()));
      const double angle = kTwoPi * random.uniform();
      x = hotspots[h].x + hotspots[h].sigma * r * std::cos(angle);
      y = hotspots[h].y + hotspots[h].sigma * r * std::sin(angle);
    }
    points[2 * i] = std::clamp(x, 0.0, kSyntheticCitySide);
    points[2 * i + 1] = std::clamp(y, 0.0, kSyntheticCitySide);
  }
  return points;
}

}  // namespace cgp::simulation
