#include "cgp/link/watch_admission.hpp"

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"

namespace cgp::link {

std::optional<std::string> refuse_watch(const client::Device& device, const v1::WatchSpec& spec,
                                        const WatchLimits& limits, std::size_t ticking,
                                        double now) {
  if (device.watch_state(spec.watch_id())) return std::nullopt;  // a replay
  std::optional<Error> why;
  const double end =
      spec.start_unix_seconds() + static_cast<double>(spec.horizon()) * spec.tick_seconds();
  if (!(spec.tick_seconds() > 0) || !(spec.start_unix_seconds() > 0))
    why = make_error(ErrorCode::missing_field, "tick_seconds",
                     "tick_seconds: a watch sent to this device needs a public schedule");
  else if (spec.tick_seconds() < limits.min_tick_seconds)
    why = make_error(ErrorCode::out_of_range, "tick_seconds",
                     "tick_seconds: this device ticks at most every " +
                         format_number(limits.min_tick_seconds) + " s, got " +
                         format_number(spec.tick_seconds()));
  else if (!(end > now))
    why = make_error(ErrorCode::out_of_range, "start_unix_seconds",
                     "start_unix_seconds: the watch's schedule has already ended");
  else if (ticking >= limits.max_watches)
    why = make_error(ErrorCode::too_large, "watch_id",
                     "watch_id: this device runs at most " + std::to_string(limits.max_watches) +
                         " watches at once");
  if (!why) return std::nullopt;
  v1::WatchStarted refused;
  refused.set_watch_id(spec.watch_id());
  refused.set_status(v1::WATCH_REJECTED_INVALID);
  refused.set_error(wire::error_code_to_wire(why->code));
  refused.set_error_message(why->message);
  return refused.SerializeAsString();
}

WatchAnswer answer_start_watch(client::Device& device, std::span<const std::uint8_t> spec_bytes,
                               const WatchLimits& limits, std::size_t ticking, double now) {
  WatchAnswer answer;
  v1::WatchSpec spec;
  const auto refused = spec.ParseFromArray(spec_bytes.data(), static_cast<int>(spec_bytes.size()))
                           ? refuse_watch(device, spec, limits, ticking, now)
                           : std::nullopt;
  answer.started = refused ? *refused : device.start_watch(spec_bytes);
  v1::WatchStarted parsed;
  if (parsed.ParseFromString(answer.started) && parsed.status() == v1::WATCH_ARMED) {
    answer.watch_id = parsed.watch_id();
    if (auto state = device.watch_state(parsed.watch_id())) answer.state = std::move(*state);
  }
  return answer;
}

}  // namespace cgp::link
