#include "cgp/client/pacing.hpp"

#include <thread>
#include <variant>

namespace cgp::client {
namespace {

class SteadyClock final : public PacingClock {
 public:
  Time now() const override { return std::chrono::steady_clock::now(); }
  void sleep_until(Time deadline) const override { std::this_thread::sleep_until(deadline); }
};

std::size_t polygon_edges(const StatisticSpec& spec) noexcept {
  if (!spec.region) return 0;
  if (const auto* polygon = std::get_if<geometry::Polygon>(spec.region))
    return polygon->edges().size();
  return 0;
}

}  // namespace

std::shared_ptr<PacingClock> PacingClock::steady() {
  static const auto clock = std::make_shared<SteadyClock>();
  return clock;
}

std::chrono::nanoseconds ReplyPacing::window(const StatisticSpec& spec,
                                             std::size_t output_dimension) const noexcept {
  const std::size_t required = spec.required_dimension();
  const std::size_t inputs = required == 0 ? output_dimension : required;
  return base + per_output_coordinate * static_cast<long long>(output_dimension) +
         per_input_coordinate * static_cast<long long>(inputs) +
         per_polygon_edge * static_cast<long long>(polygon_edges(spec));
}

ReplyPacing ReplyPacing::device_default() noexcept {
  using namespace std::chrono_literals;
  return ReplyPacing{true, 200us, 25us, 50ns, 50ns};
}

}  // namespace cgp::client
