// The C ABI of cgp/cgp.h: flat functions over the C++ Device. Every entry point catches
// everything: no exception crosses into C. Every call on a device holds the device's lock, the
// one the device link (cgp/cgp_link.h) holds while it answers a coordinator.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "cgp/cgp.h"
#include "cgp/client/c_handle.hpp"
#include "cgp/client/device.hpp"
#include "cgp/common/version.hpp"
#include "cgp/common/wire/codec.hpp"

struct cgp_device {
  cgp::client::Device device;
  std::uint64_t serial;  // names this device in the threads' error slots
  mutable std::mutex mutex{};
};

namespace cgp::client {

Device& device_of(cgp_device& handle) noexcept {
  return handle.device;
}
std::mutex& mutex_of(cgp_device& handle) noexcept {
  return handle.mutex;
}

}  // namespace cgp::client

namespace {

// Errors are kept per thread, so that one thread's message is never overwritten by another's
// call on the same device: this thread's last failed open, and its last failed device call with
// the device's serial (not its address: a device closed on another thread must not lend its
// message to a new one at the same address).
std::atomic<std::uint64_t> next_serial{1};
thread_local std::string open_error;
thread_local std::uint64_t error_serial = 0;
thread_local std::string device_error;

void remember(const cgp_device* device, std::string message) {
  if (device) {
    error_serial = device->serial;
    device_error = std::move(message);
  } else {
    open_error = std::move(message);
  }
}

int fail(const cgp_device* device, const cgp::Error& error) {
  remember(device, error.to_string());
  return static_cast<int>(error.code);
}

int fail(const cgp_device* device, int status, const char* message) {
  remember(device, message);
  return status;
}

template <class Body>
int guarded(const cgp_device* device, Body&& body) noexcept {
  try {
    std::unique_lock<std::mutex> lock;
    if (device) lock = std::unique_lock(device->mutex);
    return body();
  } catch (const std::bad_alloc&) {
    return fail(device, CGP_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    try {
      return fail(device, CGP_INTERNAL, e.what());
    } catch (...) {
      return CGP_INTERNAL;
    }
  } catch (...) {
    return CGP_INTERNAL;
  }
}

// The common end of both openers: a device, possibly one that fails closed (then *out is set
// and the ledger's error returned, as cgp.h says).
int open_device(const cgp::DeviceConfig& config, const char* ledger_path, cgp_device** out) {
  auto device = cgp::client::Device::open_secure(config, ledger_path);
  if (!device) return fail(nullptr, device.error());
  *out = new cgp_device{std::move(*device), next_serial++};
  const auto& status = (*out)->device.ledger_status();
  if (!status.ok()) return fail(*out, status.error());
  return CGP_OK;
}

}  // namespace

extern "C" {

int cgp_device_open(const char* ledger_path, const uint8_t* config, size_t config_len,
                    cgp_device** out) {
  return guarded(nullptr, [&]() -> int {
    if (!out) return fail(nullptr, CGP_INVALID_ARGUMENT, "out must not be NULL");
    *out = nullptr;
    if (!config && config_len > 0)
      return fail(nullptr, CGP_INVALID_ARGUMENT, "config must not be NULL");
    auto parsed = cgp::wire::parse_device_config({config, config_len});
    if (!parsed) return fail(nullptr, parsed.error());
    auto validated = cgp::wire::config_from_wire(*parsed);
    if (!validated) return fail(nullptr, validated.error());
    return open_device(*validated, ledger_path, out);
  });
}

int cgp_device_open_cgp(const char* ledger_path, double budget, int sticky_halt, cgp_device** out) {
  return guarded(nullptr, [&]() -> int {
    if (!out) return fail(nullptr, CGP_INVALID_ARGUMENT, "out must not be NULL");
    *out = nullptr;
    auto config = cgp::DeviceConfig::cgp(budget, sticky_halt != 0);
    if (!config) return fail(nullptr, config.error());
    return open_device(*config, ledger_path, out);
  });
}

int cgp_device_set_component(cgp_device* device, const char* component_id, const double* values,
                             size_t dim) {
  return guarded(device, [&]() -> int {
    if (!device) return CGP_INVALID_ARGUMENT;
    if (!component_id) return fail(device, CGP_INVALID_ARGUMENT, "component_id must not be NULL");
    if (!values && dim > 0) return fail(device, CGP_INVALID_ARGUMENT, "values must not be NULL");
    if (auto s = device->device.register_component(component_id, dim); !s)
      return fail(device, s.error());
    if (auto s = device->device.set_component(component_id, {values, dim}); !s)
      return fail(device, s.error());
    return CGP_OK;
  });
}

int cgp_device_set_location_frame(cgp_device* device, int projection, double origin_lon,
                                  double origin_lat) {
  return guarded(device, [&]() -> int {
    if (!device) return CGP_INVALID_ARGUMENT;
    cgp::geometry::ProjectionKind kind;
    if (projection == CGP_PROJECTION_LOCAL_EQUIDISTANT)
      kind = cgp::geometry::ProjectionKind::local_equidistant;
    else if (projection == CGP_PROJECTION_SPHERICAL_MERCATOR)
      kind = cgp::geometry::ProjectionKind::spherical_mercator;
    else
      return fail(device, CGP_INVALID_ARGUMENT, "projection must be a cgp_projection");
    auto frame = cgp::geometry::LocationFrame::create(kind, origin_lon, origin_lat);
    if (!frame) return fail(device, frame.error());
    if (auto s = device->device.set_location_frame(*frame); !s) return fail(device, s.error());
    return CGP_OK;
  });
}

int cgp_device_set_location_lonlat(cgp_device* device, const char* component_id, double lon,
                                   double lat) {
  return guarded(device, [&]() -> int {
    if (!device) return CGP_INVALID_ARGUMENT;
    if (!component_id) return fail(device, CGP_INVALID_ARGUMENT, "component_id must not be NULL");
    if (auto s = device->device.set_location_lonlat(component_id, lon, lat); !s)
      return fail(device, s.error());
    return CGP_OK;
  });
}

int cgp_device_handle(cgp_device* device, const uint8_t* request, size_t request_len,
                      uint8_t* reply, size_t reply_capacity, size_t* reply_len) {
  return guarded(device, [&]() -> int {
    if (!device) return CGP_INVALID_ARGUMENT;
    if (!reply_len) return fail(device, CGP_INVALID_ARGUMENT, "reply_len must not be NULL");
    if (!request && request_len > 0)
      return fail(device, CGP_INVALID_ARGUMENT, "request must not be NULL");
    std::span<const std::uint8_t> bytes(request, request_len);
    // The device decides on the buffer before anything is charged, and never hands back more
    // than the capacity: a replay's stored reply may be longer than today's components imply.
    auto result = device->device.handle(bytes, reply ? reply_capacity : 0);
    if (result.needed > 0) {
      *reply_len = result.needed;
      return fail(device, CGP_BUFFER_TOO_SMALL,
                  "reply buffer too small: nothing was evaluated or charged");
    }
    if (result.reply.size() > reply_capacity) return fail(device, CGP_INTERNAL, "reply too large");
    std::memcpy(reply, result.reply.data(), result.reply.size());
    *reply_len = result.reply.size();
    return CGP_OK;
  });
}

int cgp_device_start_watch(cgp_device* device, const uint8_t* spec, size_t spec_len, int* started) {
  return guarded(device, [&]() -> int {
    if (!device) return CGP_INVALID_ARGUMENT;
    if (!started) return fail(device, CGP_INVALID_ARGUMENT, "started must not be NULL");
    if (!spec && spec_len > 0) return fail(device, CGP_INVALID_ARGUMENT, "spec must not be NULL");
    auto parsed = cgp::wire::parse_watch_spec({spec, spec_len});
    if (!parsed) return fail(device, parsed.error());
    auto validated = cgp::wire::watch_from_wire(*parsed);
    if (!validated) return fail(device, validated.error());
    auto arming = device->device.start_watch(*validated);
    if (!arming) return fail(device, arming.error());
    *started = arming->status == cgp::client::WatchStartStatus::armed ? CGP_WATCH_ARMED
                                                                      : CGP_WATCH_REFUSED_BUDGET;
    return CGP_OK;
  });
}

int cgp_device_tick_watch(cgp_device* device, const char* watch_id, uint64_t tick, int* outcome) {
  return guarded(device, [&]() -> int {
    if (!device) return CGP_INVALID_ARGUMENT;
    if (!watch_id) return fail(device, CGP_INVALID_ARGUMENT, "watch_id must not be NULL");
    if (!outcome) return fail(device, CGP_INVALID_ARGUMENT, "outcome must not be NULL");
    auto status = device->device.tick_watch(watch_id, tick);
    if (!status) return fail(device, status.error());
    switch (*status) {
      case cgp::WatchTickStatus::silent:
        *outcome = CGP_TICK_SILENT;
        break;
      case cgp::WatchTickStatus::alert:
        *outcome = CGP_TICK_ALERT;
        break;
      case cgp::WatchTickStatus::finished:
        *outcome = CGP_TICK_FINISHED;
        break;
      case cgp::WatchTickStatus::budget_exhausted:
        *outcome = CGP_TICK_BUDGET_EXHAUSTED;
        break;
    }
    return CGP_OK;
  });
}

int cgp_device_remaining(const cgp_device* device, double* out) {
  return guarded(device, [&]() -> int {
    if (!device) return CGP_INVALID_ARGUMENT;
    if (!out) return fail(device, CGP_INVALID_ARGUMENT, "out must not be NULL");
    *out = device->device.remaining();
    return CGP_OK;
  });
}

const char* cgp_device_last_error(const cgp_device* device) {
  if (!device) return open_error.c_str();
  return error_serial == device->serial ? device_error.c_str() : "";
}

const char* cgp_status_name(int status) {
  switch (status) {
    case CGP_OUT_OF_MEMORY:
      return "out_of_memory";
    case CGP_INTERNAL:
      return "internal";
    default:
      break;
  }
  if (status < 0 || status > static_cast<int>(cgp::kLastErrorCode)) return "unknown_error";
  // error_code_name returns views of string literals: NUL-terminated.
  return cgp::error_code_name(static_cast<cgp::ErrorCode>(status)).data();
}

const char* cgp_version_string(void) {
  return cgp::version_string().data();  // a string literal: NUL-terminated
}

void cgp_device_close(cgp_device* device) {
  if (device && error_serial == device->serial) {
    error_serial = 0;
    device_error.clear();
  }
  delete device;
}

}  // extern "C"
