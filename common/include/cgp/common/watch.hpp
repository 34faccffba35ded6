// A watch: "tell the coordinator when this device's score first crosses a threshold,
// over the next `horizon` ticks". The device evaluates it with Above Threshold (sparse vector)
// on its own data and releases one message, the tick of the first noisy crossing; a silent
// tick releases nothing. The coordinator creates watches; the device validates and runs them.
// Validated objects: build them with WatchSpec::create or wire::watch_from_wire.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/request.hpp"

namespace cgp {

enum class WatchNoise {
  // Pure ε-GP Above Threshold with discrete Laplace noise (Dwork–Roth Thm 3.23), charged
  // ρ = ε²/2 (with the grid's slack) to the device's CGP filter once, at arming. The default.
  laplace,
  // Gaussian Above Threshold (000, Lemma 18 in log form) with its pure ex-post loss charged to
  // the device's separate ex-post budget tick by tick. Only for short "check now" watches.
  gaussian_expost,
};

enum class WatchTrigger {
  at_or_below,  // fire when the score is ≤ the threshold: entering a geofence (the default)
  at_or_above,  // fire when the score is ≥ the threshold: leaving one
};

std::string_view watch_noise_name(WatchNoise noise) noexcept;
std::string_view watch_trigger_name(WatchTrigger trigger) noexcept;

// The largest horizons a device accepts: a Laplace watch's cost does not depend on it; a Gaussian
// one evaluates its ex-post bound per tick (quadrature).
inline constexpr std::uint64_t kMaxWatchHorizon = 100'000'000;
inline constexpr std::uint64_t kMaxGaussianWatchHorizon = 100'000;

struct WatchSpecParams {
  std::string watch_id;      // 1 to 128 bytes; one watch per id on a device
  std::string component_id;  // the component the score is evaluated on
  // The score: distance_to_point or signed_distance_to_region (location is not a score).
  StatisticKind statistic = StatisticKind::distance_to_point;
  std::vector<double> point;               // distance_to_point
  std::optional<geometry::Region> region;  // signed_distance_to_region
  double threshold = 0;                    // in the component's unit
  // The score is clamped to [clamp_lo, clamp_hi] (public); the threshold lies inside.
  double clamp_lo = 0, clamp_hi = 0;
  WatchTrigger trigger = WatchTrigger::at_or_below;
  std::uint64_t horizon = 0;  // ticks 1..horizon
  WatchNoise noise = WatchNoise::laplace;
  double epsilon = 0;  // laplace: ε per unit distance for the whole watch (> 0)
  double sigma = 0;    // gaussian_expost: threshold noise σ_X (> 0); queries use √3·σ_X
  // The public schedule for devices that tick on their own: tick k is due at
  // start_unix_seconds + (k − 1)·tick_seconds. Both 0: the app keeps a schedule of its own.
  // tick_seconds with start 0: the coordinator starts the watch on its clock when it sends it.
  double tick_seconds = 0;
  double start_unix_seconds = 0;
};

class WatchSpec {
 public:
  // Every public rule, each error naming its parameter: ids, the score's point or region,
  // finite threshold inside [clamp_lo, clamp_hi] with clamp_lo < clamp_hi within ±2^31, a
  // horizon in [1, kMaxWatchHorizon] (kMaxGaussianWatchHorizon for gaussian_expost), and ε
  // (laplace) or σ (gaussian_expost) > 0 with the other left 0; ε·max(|clamp_lo|, |clamp_hi|)
  // ≤ 2^32 (or max(|clamp_lo|, |clamp_hi|)/σ ≤ 2^32).
  static Expected<WatchSpec> create(WatchSpecParams params);

  const WatchSpecParams& params() const noexcept { return params_; }
  const std::string& watch_id() const noexcept { return params_.watch_id; }
  const std::string& component_id() const noexcept { return params_.component_id; }
  std::uint64_t horizon() const noexcept { return params_.horizon; }
  WatchNoise noise() const noexcept { return params_.noise; }
  // A schedule a device can follow on its own: a tick length and a start.
  bool has_schedule() const noexcept {
    return params_.tick_seconds > 0 && params_.start_unix_seconds > 0;
  }
  // The tick due at `unix_seconds` on the public schedule: 0 before the first, and never more
  // than horizon + 1 (past the end). Precondition: has_schedule().
  std::uint64_t tick_at(double unix_seconds) const noexcept;
  // The component dimension the score needs.
  std::size_t required_dimension() const noexcept;

 private:
  WatchSpecParams params_;
};

// What a tick says. Silence says only "not yet"; after an alert or the horizon nothing more is
// evaluated.
enum class WatchTickStatus {
  silent,            // evaluated: no crossing at this tick
  alert,             // evaluated: the first noisy crossing; the watch is over
  finished,          // not evaluated: the watch alerted at an earlier tick
  budget_exhausted,  // not evaluated: gaussian_expost, the next tick's worst loss does not fit
};

std::string_view watch_tick_status_name(WatchTickStatus status) noexcept;

// What a laplace watch charges the device's CGP filter at arming: (ε(1 + 2^-10))²/2 rounded
// up (client-sdk/src/watch.md). Public, so that a coordinator's budget mirror predicts it.
double laplace_watch_charge(double epsilon) noexcept;

}  // namespace cgp
