// The C ABI of cgp/cgp_link.h: a cgp_connection runs link::serve_device (run_once, in the
// caller's thread) or link::serve_device_reconnecting (start, on a thread of its own) for the
// Device behind a cgp_device, holding that handle's lock around every call into the device.
// Every entry point catches everything: no exception crosses into C.
#include <array>
#include <atomic>
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
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "coordinator_stream.hpp"

struct cgp_connection {
  cgp_device* device;
  std::uint64_t serial;  // names this connection in the threads' error slots
  // Guards everything below; taken before the device's lock, never after it.
  mutable std::mutex mutex{};
  std::condition_variable run_ended{};
  cgp::link::DeviceConnection settings{};  // copied into each run
  std::optional<std::array<double, 2>> lonlat{};
  bool running = false;
  std::uint64_t run = 0;     // counts runs: a stop waits for the end of the one it stopped
  std::stop_source stop{};   // the run in progress's
  std::thread background{};  // a started run's thread (joinable until someone joins it)
  // What ended the last session, and what ended a started run on its own (kept for stop).
  int session_code = CGP_OK;
  std::string session_message{};
  int ended_code = CGP_OK;
  std::string ended_message{};
};

namespace {

constexpr std::size_t kMaxAddressBytes = 1024;
constexpr std::size_t kMaxRootCertificateBytes = 1 << 20;
constexpr std::uint32_t kMaxCheckInIdleMs = 3600u * 1000u;

std::atomic<std::uint64_t> next_serial{1};

// Each thread's last error, and the connection it was on (0: cgp_device_connect or NULL): a
// serial rather than an address, so that a connection freed on another thread cannot lend its
// message to a new one at the same address.
thread_local std::uint64_t error_serial = 0;
thread_local std::string connection_error;

std::uint64_t serial_of(const cgp_connection* connection) {
  return connection ? connection->serial : 0;
}

int fail(const cgp_connection* connection, int status, std::string message) {
  error_serial = serial_of(connection);
  connection_error = std::move(message);
  return status;
}

int fail(const cgp_connection* connection, const cgp::Error& error) {
  return fail(connection, static_cast<int>(error.code), error.to_string());
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

// A text argument: present, 1..max bytes, and each byte allowed.
template <class Allowed>
int check_text(const char* text, const char* name, std::size_t max_bytes, Allowed allowed,
               const char* rule) {
  if (!text) return fail(nullptr, CGP_INVALID_ARGUMENT, std::string(name) + " must not be NULL");
  const std::size_t length = ::strnlen(text, max_bytes + 1);
  if (length == 0) return fail(nullptr, CGP_INVALID_ARGUMENT, std::string(name) + " is empty");
  if (length > max_bytes)
    return fail(nullptr, CGP_INVALID_ARGUMENT,
                std::string(name) + " is longer than " + std::to_string(max_bytes) + " bytes");
  for (std::size_t i = 0; i < length; ++i)
    if (!allowed(static_cast<unsigned char>(text[i])))
      return fail(nullptr, CGP_INVALID_ARGUMENT,
                  std::string(name) + " " + rule + " (byte " + std::to_string(i) + ")");
  return CGP_OK;
}

bool address_char(unsigned char c) {
  return c > ' ' && c != 0x7f;
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

// With connection->mutex held: claims the connection for a run and returns its settings, or
// fails (one run at a time; a credential never crosses the network in plaintext).
int begin_run(cgp_connection* connection, cgp::link::DeviceConnection& settings) {
  if (connection->running)
    return fail(connection, CGP_INVALID_ARGUMENT, "connection: a run is already in progress");
  if (!connection->settings.credential.empty() && connection->settings.tls_root_certificate.empty())
    return fail(connection, CGP_INVALID_ARGUMENT,
                "tls_root: a credential is only sent over TLS; set the coordinator's root "
                "certificate (cgp_connection_set_tls_root)");
  settings = connection->settings;
  connection->stop = std::stop_source();
  settings.stop = connection->stop.get_token();
  settings.device_mutex = &cgp::client::mutex_of(*connection->device);
  settings.lonlat_now = [connection] {
    std::lock_guard position_lock(connection->mutex);
    return connection->lonlat;
  };
  connection->running = true;
  ++connection->run;
  return CGP_OK;
}

// Records what ended a session (never throws: a message that cannot be copied is dropped).
void record_session(cgp_connection* connection, const cgp::Status& status) noexcept {
  std::lock_guard lock(connection->mutex);
  connection->session_code = status ? CGP_OK : static_cast<int>(status.error().code);
  try {
    connection->session_message = status ? std::string() : status.error().to_string();
  } catch (...) {
    connection->session_message.clear();
  }
}

void end_run(cgp_connection* connection) noexcept {
  std::lock_guard lock(connection->mutex);
  connection->running = false;
  connection->run_ended.notify_all();
}

void join_quietly(std::thread& thread) noexcept {
  if (!thread.joinable()) return;
  try {
    thread.join();
  } catch (...) {
    thread.detach();  // join can fail only on a broken thread; never terminate the app
  }
}

// The body of a started run's thread: everything is caught, and the run always ends.
void serve_in_background(cgp_connection* connection,
                         const cgp::link::DeviceConnection& settings) noexcept {
  int code = CGP_OK;
  std::string message;
  try {
    const cgp::Status served = cgp::link::serve_device_reconnecting(
        settings, cgp::client::device_of(*connection->device), {},
        [connection](const cgp::Status& session) { record_session(connection, session); });
    if (!served) {
      code = static_cast<int>(served.error().code);
      message = served.error().to_string();
    }
  } catch (const std::bad_alloc&) {
    code = CGP_OUT_OF_MEMORY;
  } catch (...) {
    code = CGP_INTERNAL;
  }
  std::lock_guard lock(connection->mutex);
  connection->ended_code = code;
  connection->ended_message.swap(message);
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
    if (int s = check_text(address, "address", kMaxAddressBytes, address_char,
                           "must not contain spaces or control characters"))
      return s;
    // The coordinator's rule for ids (a Hello with other bytes is refused): refused here, by
    // name, rather than by a link that would dial and fail.
    if (int s = check_text(device_id, "device_id", cgp::wire::kMaxIdBytes, cgp::wire::is_id_char,
                           "may hold only A-Z a-z 0-9 . _ - : @ / +"))
      return s;
    auto* connection = new cgp_connection{device, next_serial++};
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

int cgp_connection_set_virtual_shards(cgp_connection* connection, uint32_t shard_count) {
  return guarded(connection, [&]() -> int {
    if (shard_count > cgp::protocol::kMaxVirtualShards)
      return fail(connection, CGP_OUT_OF_RANGE,
                  "shard_count must be at most 1048576, got " + std::to_string(shard_count));
    return change_settings(connection, [&](cgp::link::DeviceConnection& settings) {
      settings.virtual_shards = shard_count;
      return CGP_OK;
    });
  });
}

int cgp_connection_set_connect_to(cgp_connection* connection, const char* host_port) {
  return guarded(connection, [&]() -> int {
    std::string target;
    if (host_port && *host_port) {
      if (int s = check_text(host_port, "connect_to", kMaxAddressBytes, address_char,
                             "must hold no spaces or control bytes");
          s != CGP_OK)
        return s;
      target = host_port;
      std::string host, port;
      if (!cgp::link::detail::split_address(target, host, port))
        return fail(connection, CGP_INVALID_ARGUMENT,
                    "connect_to must be host:port, got \"" + target + "\"");
    }
    return change_settings(connection, [&](cgp::link::DeviceConnection& settings) {
      settings.connect_to = target;
      return CGP_OK;
    });
  });
}

int cgp_connection_set_watch_limits(cgp_connection* connection, double min_tick_seconds,
                                    size_t max_watches) {
  return guarded(connection, [&]() -> int {
    using Limits = cgp::link::WatchLimits;
    if (!std::isfinite(min_tick_seconds))
      return fail(connection, CGP_NOT_FINITE, "min_tick_seconds must be finite");
    if (!(min_tick_seconds >= Limits::kTickSecondsFloor &&
          min_tick_seconds <= Limits::kTickSecondsCeiling))
      return fail(connection, CGP_OUT_OF_RANGE, "min_tick_seconds must be in [0.001, 1e7]");
    if (max_watches < 1 || max_watches > Limits::kMaxWatchesCeiling)
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
    if (auto valid = cgp::geometry::require_lonlat(lon, lat); !valid)
      return fail(connection, valid.error());
    std::lock_guard lock(connection->mutex);
    {
      // A frame already announced: the fix is projected now, so the session in progress
      // answers with it (a valid fix is always placed: FrameProjection).
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
    cgp::link::DeviceConnection settings;
    {
      std::lock_guard lock(connection->mutex);
      if (int s = begin_run(connection, settings)) return s;
    }
    cgp::Status served;
    try {
      served = cgp::link::serve_device(settings, cgp::client::device_of(*connection->device));
    } catch (...) {
      end_run(connection);
      throw;
    }
    record_session(connection, served);
    end_run(connection);
    return served ? CGP_OK : fail(connection, served.error());
  });
}

int cgp_connection_start(cgp_connection* connection) {
  return guarded(connection, [&]() -> int {
    if (!connection) return fail(nullptr, CGP_INVALID_ARGUMENT, "connection must not be NULL");
    std::thread finished;  // an earlier started run's thread, ended on its own
    {
      std::lock_guard lock(connection->mutex);
      cgp::link::DeviceConnection settings;
      if (int s = begin_run(connection, settings)) return s;
      // Not running, so that thread (if any) has ended or is ending: joined below, unlocked.
      finished = std::move(connection->background);
      connection->ended_code = CGP_OK;  // a new run: what ended the last one is forgotten
      connection->ended_message.clear();
      try {
        connection->background = std::thread([connection, settings = std::move(settings)] {
          serve_in_background(connection, settings);
        });
      } catch (...) {
        connection->running = false;
        connection->run_ended.notify_all();
        join_quietly(finished);
        throw;
      }
    }
    join_quietly(finished);
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
    int code = CGP_OK;
    std::string message;
    {
      std::unique_lock lock(connection->mutex);
      if (connection->running) {
        // Waits for the end of this run only: a run started meanwhile is not this stop's.
        const std::uint64_t stopped = connection->run;
        connection->stop.request_stop();
        connection->run_ended.wait(
            lock, [&] { return !connection->running || connection->run != stopped; });
      }
      if (!connection->running) {
        background = std::move(connection->background);
        code = std::exchange(connection->ended_code, CGP_OK);
        message.swap(connection->ended_message);
      }
    }
    join_quietly(background);
    return code == CGP_OK ? CGP_OK : fail(connection, code, std::move(message));
  });
}

int cgp_connection_last_session(const cgp_connection* connection) {
  return guarded(connection, [&]() -> int {
    if (!connection) return fail(nullptr, CGP_INVALID_ARGUMENT, "connection must not be NULL");
    std::unique_lock lock(connection->mutex);
    if (connection->session_code == CGP_OK) return CGP_OK;
    std::string message = connection->session_message;
    const int code = connection->session_code;
    lock.unlock();
    return fail(connection, code, std::move(message));
  });
}

const char* cgp_connection_last_error(const cgp_connection* connection) {
  return error_serial == serial_of(connection) ? connection_error.c_str() : "";
}

void cgp_connection_free(cgp_connection* connection) {
  if (!connection) return;
  if (cgp_connection_stop(connection) != CGP_OK) {
    // What ended a started link on its own is the app's to ask for before freeing; here the
    // connection goes either way.
  }
  if (error_serial == connection->serial) {
    error_serial = 0;
    connection_error.clear();
  }
  join_quietly(connection->background);  // a stop that failed (out of memory) left it
  delete connection;
}

}  // extern "C"
