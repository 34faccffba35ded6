// cgp-sim watch: geofence alerts over moving users, three ways of paying for
// them — a Laplace watch on the device (Above Threshold, charged once), a Gaussian ex-post watch
// (000, its own ex-post budget) and the coordinator thresholding per-tick Gaussian releases —
// each calibrated to the cheapest noise that reaches a stated quality.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::experiments {

// Positions of `users` users at ticks 1..ticks (metres), user-major.
struct Trajectories {
  std::size_t users = 0;
  std::uint64_t ticks = 0;
  std::vector<double> xy;  // xy[2·(user·ticks + tick − 1) + {0, 1}]
  std::string description;
  const double* at(std::size_t user, std::uint64_t tick) const {
    return &xy[2 * (user * ticks + (tick - 1))];
  }
};

// The geofence: alert when a user comes within `radius` of `site`; an alert while the user is
// farther than radius + band is a false alert; a user who came within the radius and did not
// alert (while within radius + band) by the horizon is a miss.
struct Geofence {
  std::array<double, 2> site{0, 0};
  double radius = 300;
  double band = 300;
  double clamp = 1000;  // scores (distances) are clamped to [0, clamp]
  double threshold() const noexcept { return radius + band / 2; }
};

// Built-in movers: half visitors who walk to a point within radius/2 of the site, arriving at a
// tick uniform in [T/4, 3T/4], then stay (10 m jitter); half passers-by on straight lines whose
// closest approach lies in [radius + band, radius + 3·band]. `step` metres per tick.
Trajectories synthetic_trajectories(std::size_t users, std::uint64_t ticks, const Geofence& fence,
                                    double step, std::uint64_t seed);
// A CSV of id,t,x,y (metres; t a tick index ≥ 1; a header line is skipped): users in order of
// first appearance; a tick missing for a user repeats its last position (before the first, its
// first). Errors name the file and line.
Expected<Trajectories> load_trajectories(const std::string& path, std::uint64_t ticks);

struct WatchSettings {
  std::vector<std::uint64_t> horizons{100, 1000};
  std::vector<std::string> methods{"laplace", "gaussian_expost", "gaussian_releases"};
  Geofence fence;
  double quality = 0.05;  // false-alert and miss rates at most this
  double step = 40;       // synthetic movers: metres per tick
  std::size_t users = 1000;
  std::uint64_t seed = 1;
  std::string trajectories;  // CSV, or empty for the built-in movers
};

struct WatchRow {
  std::string method;
  std::uint64_t horizon = 0;
  std::size_t users = 0, visitors = 0;
  bool reached = false;          // the quality was reached within the search range
  double noise = 0;              // laplace: ε per metre; gaussian_*: σ (metres)
  double epsilon_per_metre = 0;  // pure ε per metre (laplace: ε; gaussian_expost: worst ex-post)
  double rho = 0;  // charged to the CGP filter per user (0: gaussian_expost, own budget)
  double false_alert = 0, miss = 0, delay = 0;  // rates; mean ticks from entry to alert
  double seconds = 0;
};

Expected<std::vector<WatchRow>> run_watch(const WatchSettings& settings);
void print_watch_table(std::FILE* out, const std::vector<WatchRow>& rows);
Status write_watch_json(const std::string& path, const std::vector<WatchRow>& rows);

}  // namespace cgp::experiments
