// The built-in default data set: a synthetic city that needs no download. 20 km × 20 km in local
// metres (origin at the south-west corner); 60% of the users in six Gaussian hotspots (a
// downtown, two districts, a station, an airport, a campus; σ from 300 m to 1.5 km), 40% spread
// uniformly. Reproducible from the seed.
#pragma once

#include <cstdint>
#include <vector>

namespace cgp::simulation {

inline constexpr double kSyntheticCitySide = 20000.0;  // metres

struct Hotspot {
  double x, y, sigma, weight;
};
// The six hotspots, for queries that want to aim at them.
const std::vector<Hotspot>& synthetic_city_hotspots();

// n users as row-major (x, y) pairs in metres, clipped to the city square. User i's point
// depends on (seed, i) only, so any slice of a city is generated on its own:
// synthetic_city(first, count, seed) is rows [first, first + count) of a city of any size
// (each rank of an MPI run makes its own users; 10^9 users need no file).
std::vector<double> synthetic_city(std::size_t users, std::uint64_t seed);
std::vector<double> synthetic_city(std::size_t first, std::size_t count, std::uint64_t seed);

}  // namespace cgp::simulation
