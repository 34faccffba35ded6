// Reply pacing: the part of a release that touches the user's data or the noise (clamp, φ, the
// exact sampler's loops) takes a time that depends on both. The device pads that part to a
// window computed from public data only (the statistic's kind and sizes), so that the time to
// answer says nothing about either, except when the work overruns its window (counted).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "cgp/client/statistic.hpp"

namespace cgp::client {

class PacingClock {
 public:
  using Time = std::chrono::steady_clock::time_point;
  virtual ~PacingClock() = default;
  virtual Time now() const = 0;
  virtual void sleep_until(Time deadline) const = 0;
  // std::chrono::steady_clock and std::this_thread::sleep_until.
  static std::shared_ptr<PacingClock> steady();
};

struct ReplyPacing {
  bool enabled = false;
  std::chrono::nanoseconds base{0};
  std::chrono::nanoseconds per_output_coordinate{0};  // one exact sample each
  std::chrono::nanoseconds per_input_coordinate{0};   // clamp and distance terms
  std::chrono::nanoseconds per_polygon_edge{0};

  // The window for one release: public data only.
  std::chrono::nanoseconds window(const StatisticSpec& spec,
                                  std::size_t output_dimension) const noexcept;

  // Sized from bench/bench_timing on this project's reference machine with a wide margin
  // (privatizer.md, "Timing"): 200 µs + 25 µs per released coordinate + 50 ns per input
  // coordinate or polygon edge. A 2-D location is answered in 250 µs.
  static ReplyPacing device_default() noexcept;
};

}  // namespace cgp::client
