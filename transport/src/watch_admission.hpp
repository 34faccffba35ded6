// Which watches a device that ticks on its own (cgp-device, the swarm) arms when a coordinator
// sends them (README "Watches"): a replay of a watch it armed before always goes through (it
// is free, and re-sends a recorded alert); a new one needs a public schedule that has not
// ended, ticks no shorter than the device's minimum, and room under its cap on watches.
// Otherwise the answer is a rejected_invalid WatchStarted naming the parameter, before the
// device is asked: nothing is charged.
#pragma once

#include <optional>
#include <string>

#include "cgp/client/device.hpp"
#include "cgp/transport/device_client.hpp"
#include "cgp/v1/cgp.pb.h"

namespace cgp::transport::detail {

// The serialized WatchStarted refusing `spec`, or nullopt if the device may be asked.
std::optional<std::string> refuse_watch(const client::Device& device, const v1::WatchSpec& spec,
                                        const WatchLimits& limits, std::size_t ticking, double now);

}  // namespace cgp::transport::detail
