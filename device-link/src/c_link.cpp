// The C ABI of cgp/cgp_link.h: a cgp_connection runs link::serve_device (run_once, in the
// caller's thread) or link::serve_device_reconnecting (start, on a thread of its own) for the
// Device behind a cgp_device, holding that handle's lock around every call into the device.
// Every entry point catches everything: no exception crosses into C.
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>

#include "cgp/cgp_link.h"
#include "cgp/client/c_handle.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/link/device_client.hpp"

struct cgp_connection {
  cgp_device* device;
  // Guards everything below; taken before the device's lock, never after it.
  mutable std::mutex mutex{};
  std::condition_variable run_ended{};
  cgp::link::DeviceConnection settings{};  // copied into each run
  std::optional<std::array<double, 2>> lonlat{};
  bool running = false;
  std::stop_source stop{};  // the run in progress's
  std::thread background{};
  cgp::Status background_status{};  // what ended the last started run on its own
};

namespace {

constexpr std::size_t kMaxAddressBytes = 1024;
constexpr std::size_t kMaxRootCertificateBytes = 1 << 20;
constexpr std::uint32_t kMaxCheckInIdleMs = 3600u * 1000u;

thread_local const cgp_connection* error_connection = nullptr;
thread_local std::string connection_error;

int fail(const cgp_connection* connection, int status, std::string message) {
  error_connection = connection;
  connection_error = std::move(message);
  return status;
}

int fail(const cgp_connection* connection, const cgp::Error& error) {
  return fail(connection, static_cast<int>(error.code), error.to_string());
}

int status_code(const cgp_connection* connection, const cgp::Status& status) {
  return status ? CGP_OK : fail(connection, status.error());
}

template <class Body>
int guarded(const cgp_connection* connection, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(connection, CGP_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    try {
      return fail(connection, CGP_INTERNAL, e.what());
    } catch (...) {
      return CGP_INTERNAL;
    }
  } catch (...) {
    return CGP_INTERNAL;
  }
}

bool printable(std::string_view text) {
  for (unsigned char c : text)
    if (c <= ' ' || c == 0x7f) return false;
  return true;
}

// A text argument: present, 1..max bytes, and (for addresses) without spaces or controls.
int check_text(const char* text, const char* name, std::size_t max_bytes, bool visible) {
  if (!text) return fail(nullptr, CGP_INVALID_ARGUMENT, std::string(name) + " must not be NULL");
  const std::size_t length = ::strnlen(text, max_bytes + 1);
  if (length == 0) return fail(nullptr, CGP_INVALID_ARGUMENT, std::string(name) + " is empty");
  if (length > max_bytes)
    return fail(nullptr, CGP_INVALID_ARGUMENT,
                std::string(name) + " is longer than " + std::to_string(max_bytes) + " bytes");
  if (visible && !printable({text, length}))
    return fail(nullptr, CGP_INVALID_ARGUMENT,
                std::string(name) + " must not contain spaces or control characters");
  return CGP_OK;
}

// The settings of the next run; refused while one is in progress (it would not see them).
template <class Change>
int change_settings(cgp_connection* connection, Change&& change) {
  if (!connection) return fail(nullptr, CGP_INVALID_ARGUMENT, "connection must not be NULL");
  std::lock_guard lock(connection->mutex);
  if (connection->running)
    return fail(connection, CGP_INVALID_ARGUMENT,
                "connection: a run is in progress; stop it before changing its settings");
  return change(connection->settings);
}

// Claims the connection for a run and returns its settings, or fails (one run at a time).
std::optional<cgp::link::DeviceConnection> begin_run(cgp_connection* connection) {
  std::lock_guard lock(connection->mutex);
  if (connection->running) return std::nullopt;
  connection->running = true;
  connection->stop = std::stop_source();
  auto settings = connection->settings;
  settings.stop = connection->stop.get_token();
  settings.device_mutex = &cgp::client::mutex_of(*connection->device);
  settings.lonlat_now = [connection] {
    std::lock_guard position_lock(connection->mutex);
    return connection->lonlat;
  };
  return settings;
}

void end_run(cgp_connection* connection) {
  std::lock_guard lock(connection->mutex);
  connection->running = false;
  connection->run_ended.notify_all();
}

}  // namespace

extern "C" {

int cgp_device_connect(cgp_device* device, const char* address, const char* device_id,
                       cgp_connection** out) {
  return guarded(nullptr, [&]() -> int {
    if (!out) return fail(nullptr, CGP_INVALID_ARGUMENT, "out must not be NULL");
    *out = nullptr;
    if (!device) return fail(nullptr, CGP_INVALID_ARGUMENT, "device must not be NULL");
    if (int s = check_text(address, "address", kMaxAddressBytes, true)) return s;
    if (int s = check_text(device_id, "device_id", cgp::wire::kMaxIdBytes, false)) return s;
    auto* connection = new cgp_connection{device};
    connection->settings.coordinator_address = address;
    connection->settings.device_id = device_id;
    *out = connection;
    return CGP_OK;
  });
}

int cgp_connection_set_credential(cgp_connection* connection, const uint8_t* credential,
                                  size_t len) {
  return guarded(connection, [&]() -> int {
    if (!credential || len == 0)
      return fail(connection, CGP_INVALID_ARGUMENT, "credential must not be NULL or empty");
    if (len > cgp::wire::kMaxCredentialBytes)
      return fail(
          connection, CGP_TOO_LARGE,
          "credential is longer than " + std::to_string(cgp::wire::kMaxCredentialBytes) + " bytes");
    return change_settings(connection, [&](cgp::link::DeviceConnection& settings) {
      settings.credential.assign(reinterpret_cast<const char*>(credential), len);
      return CGP_OK;
    });
  });
}

int cgp_connection_set_tls_root(cgp_connection* connection, const char* pem) {
  return guarded(connection, [&]() -> int {
    std::string root;
    if (pem && *pem) {
      const std::size_t length = ::strnlen(pem, kMaxRootCertificateBytes + 1);
      if (length > kMaxRootCertificateBytes)
        return fail(connection, CGP_TOO_LARGE, "tls_root is longer than 1 MiB");
      root.assign(pem, length);
      if (root.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
        return fail(connection, CGP_INVALID_ARGUMENT,
                    "tls_root must be a PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    return change_settings(connection, [&](cgp::link::DeviceConnection& settings) {
      settings.tls_root_certificate = std::move(root);
      return CGP_OK;
    });
  });
}

int cgp_connection_set_check_in(cgp_connection* connection, uint32_t idle_ms) {
  return guarded(connection, [&]() -> int {
    if (idle_ms > kMaxCheckInIdleMs)
      return fail(connection, CGP_OUT_OF_RANGE,
                  "idle_ms must be at most 3600000 (1 h), got " + std::to_string(idle_ms));
    return change_settings(connection, [&](cgp::link::DeviceConnection& settings) {
      settings.check_in_idle = std::chrono::milliseconds(idle_ms);
      return CGP_OK;
    });
  });
}

int cgp_connection_set_watch_limits(cgp_connection* connection, double min_tick_seconds,
                                    size_t max_watches) {
  return guarded(connection, [&]() -> int {
    if (!std::isfinite(min_tick_seconds))
      return fail(connection, CGP_NOT_FINITE, "min_tick_seconds must be finite");
    if (!(min_tick_seconds >= 0.001 && min_tick_seconds <= 1e7))
      return fail(connection, CGP_OUT_OF_RANGE, "min_tick_seconds must be in [0.001, 1e7]");
    if (max_watches < 1 || max_watches > 100000)
      return fail(connection, CGP_OUT_OF_RANGE, "max_watches must be in [1, 100000]");
    return change_settings(connection, [&](cgp::link::DeviceConnection& settings) {
      settings.watch_limits = {min_tick_seconds, max_watches};
      return CGP_OK;
    });
  });
}

int cgp_connection_set_lonlat(cgp_connection* connection, double lon, double lat) {
  return guarded(connection, [&]() -> int {
    if (!connection) return fail(nullptr, CGP_INVALID_ARGUMENT, "connection must not be NULL");
    if (!std::isfinite(lon)) return fail(connection, CGP_NOT_FINITE, "lon must be finite");
    if (!std::isfinite(lat)) return fail(connection, CGP_NOT_FINITE, "lat must be finite");
    if (!(lon >= -180 && lon <= 180))
      return fail(connection, CGP_OUT_OF_RANGE, "lon must be in [-180, 180] degrees");
    if (!(lat > -90 && lat < 90))
      return fail(connection, CGP_OUT_OF_RANGE, "lat must be in (-90, 90) degrees");
    std::lock_guard lock(connection->mutex);
    {
      // A frame already announced: the fix is projected now, so the session in progress
      // answers with it; a fix the device refuses changes nothing.
      std::lock_guard device_lock(cgp::client::mutex_of(*connection->device));
      auto& device = cgp::client::device_of(*connection->device);
      if (device.location_frame())
        if (auto s = device.set_location_lonlat("location", lon, lat); !s)
          return fail(connection, s.error());
    }
    connection->lonlat = std::array<double, 2>{lon, lat};
    return CGP_OK;
  });
}

int cgp_connection_run_once(cgp_connection* connection) {
  return guarded(connection, [&]() -> int {
    if (!connection) return fail(nullptr, CGP_INVALID_ARGUMENT, "connection must not be NULL");
    auto settings = begin_run(connection);
    if (!settings)
      return fail(connection, CGP_INVALID_ARGUMENT, "connection: a run is already in progress");
    cgp::Status served;
    try {
      served = cgp::link::serve_device(*settings, cgp::client::device_of(*connection->device));
    } catch (...) {
      end_run(connection);
      throw;
    }
    end_run(connection);
    return status_code(connection, served);
  });
}

int cgp_connection_start(cgp_connection* connection) {
  return guarded(connection, [&]() -> int {
    if (!connection) return fail(nullptr, CGP_INVALID_ARGUMENT, "connection must not be NULL");
    std::thread finished;  // the thread of an earlier start that ended on its own
    {
      std::lock_guard lock(connection->mutex);
      if (!connection->running) finished = std::move(connection->background);
    }
    if (finished.joinable()) finished.join();
    auto settings = begin_run(connection);
    if (!settings)
      return fail(connection, CGP_INVALID_ARGUMENT, "connection: a run is already in progress");
    try {
      std::lock_guard lock(connection->mutex);
      connection->background_status = {};
      connection->background = std::thread([connection, settings = std::move(*settings)] {
        cgp::Status served;
        try {
          served = cgp::link::serve_device_reconnecting(
              settings, cgp::client::device_of(*connection->device));
        } catch (const std::exception& e) {
          served = cgp::make_error(cgp::ErrorCode::internal_error, "connection", e.what());
        } catch (...) {
          served = cgp::make_error(cgp::ErrorCode::internal_error, "connection",
                                   "connection: unexpected failure");
        }
        std::lock_guard end_lock(connection->mutex);
        connection->background_status = std::move(served);
        connection->running = false;
        connection->run_ended.notify_all();
      });
    } catch (...) {
      end_run(connection);
      throw;
    }
    return CGP_OK;
  });
}

int cgp_connection_running(const cgp_connection* connection) {
  if (!connection) return 0;
  try {
    std::lock_guard lock(connection->mutex);
    return connection->running ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int cgp_connection_stop(cgp_connection* connection) {
  return guarded(connection, [&]() -> int {
    if (!connection) return fail(nullptr, CGP_INVALID_ARGUMENT, "connection must not be NULL");
    std::thread background;
    cgp::Status ended;
    {
      std::unique_lock lock(connection->mutex);
      if (connection->running) connection->stop.request_stop();
      connection->run_ended.wait(lock, [&] { return !connection->running; });
      background = std::move(connection->background);
      ended = std::exchange(connection->background_status, {});
    }
    if (background.joinable()) background.join();
    return status_code(connection, ended);
  });
}

const char* cgp_connection_last_error(const cgp_connection* connection) {
  return error_connection == connection ? connection_error.c_str() : "";
}

void cgp_connection_free(cgp_connection* connection) {
  if (!connection) return;
  if (cgp_connection_stop(connection) != CGP_OK) {
    // What ended a started link on its own is the app's to ask for before freeing; here the
    // connection goes either way.
  }
  if (error_connection == connection) {  // a later connection at this address starts clean
    error_connection = nullptr;
    connection_error.clear();
  }
  delete connection;
}

}  // extern "C"
