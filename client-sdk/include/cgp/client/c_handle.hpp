// The C++ side of a cgp_device handle (cgp/cgp.h), for libraries that serve one from C: the
// device link (cgp/cgp_link.h) answers a coordinator with the Device behind the handle while
// holding the lock that every cgp_device_* call holds, so that an app may keep calling the
// device (a new GPS fix, the remaining budget) from its own threads meanwhile.
#pragma once

#include <mutex>

#include "cgp/cgp.h"
#include "cgp/client/device.hpp"

namespace cgp::client {

Device& device_of(cgp_device& handle) noexcept;
std::mutex& mutex_of(cgp_device& handle) noexcept;

}  // namespace cgp::client
