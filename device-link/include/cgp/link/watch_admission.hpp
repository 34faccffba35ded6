// Which watches a device that ticks on its own (cgp-device, the swarm) arms when a coordinator
// sends them (README "Watches"): a replay of a watch it armed before always goes through (it
// is free, and re-sends a recorded alert); a new one needs a public schedule that has not
// ended, ticks no shorter than the device's minimum, and room under its cap on watches.
// Otherwise the answer is a rejected_invalid WatchStarted naming the parameter, before the
// device is asked: nothing is charged.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "cgp/client/device.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/v1/cgp.pb.h"

namespace cgp::link {

// The serialized WatchStarted refusing `spec`, or nullopt if the device may be asked.
std::optional<std::string> refuse_watch(const client::Device& device, const v1::WatchSpec& spec,
                                        const WatchLimits& limits, std::size_t ticking, double now);

// What a self-ticking device does with a start_watch (the caller holds the device): refuse it
// by the rules above, or arm (or replay) it; then send `started`, re-send a recorded alert, and
// schedule the watch if it still ticks.
struct WatchAnswer {
  std::string started;  // a serialized WatchStarted
  std::string watch_id;
  std::optional<client::Device::WatchState> state;  // armed: what the ledger recorded
  std::uint64_t recorded_alert() const noexcept { return state ? state->alert_tick : 0; }
  bool ticks() const noexcept {
    return state && state->alert_tick == 0 && !state->budget_exhausted &&
           state->spec.has_schedule();
  }
};
WatchAnswer answer_start_watch(client::Device& device, std::span<const std::uint8_t> spec_bytes,
                               const WatchLimits& limits, std::size_t ticking, double now);

}  // namespace cgp::link
