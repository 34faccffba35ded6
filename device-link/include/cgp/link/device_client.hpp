// A device's side of the network: dial the coordinator, say Hello, answer every pushed request
// with client::Device::handle (the device's own filter, charge and noise), until the stream ends.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "cgp/client/device.hpp"
#include "cgp/common/expected.hpp"

namespace cgp::link {

// What a device serving a coordinator accepts of the watches it is sent (README "Watches"):
// each tick is a durable ledger write, so a coordinator may not make a device tick faster than
// this or run more watches at once. A refused watch is answered rejected_invalid, naming
// tick_seconds or watch_id, and nothing is charged.
struct WatchLimits {
  double min_tick_seconds = 1;
  std::size_t max_watches = 64;  // armed and still ticking, at once
  // The settings a device may choose (cgp-device flags, the C ABI).
  static constexpr double kTickSecondsFloor = 0.001, kTickSecondsCeiling = 1e7;
  static constexpr std::size_t kMaxWatchesCeiling = 100000;
};

// How a device reaches its coordinator: gRPC on the coordinator's device port, or the lean
// transport (TLS 1.3 frames, docs/protocol.md §2b) on its device frames port
// (cgp-coordinator serve --device-frames-listen): the same messages, about a third of the
// coordinator's memory and a fifth of its CPU per device (README "Network load"). Frames need
// TLS (tls_root_certificate).
enum class DeviceTransport { grpc, frames };

struct DeviceConnection {
  std::string coordinator_address;  // host:port
  std::string device_id;
  std::string credential;            // sent in Hello; checked by the coordinator
  std::string tls_root_certificate;  // PEM; empty = plaintext
  // Fault tests: wait this long before sending each reply (a slow device).
  std::chrono::milliseconds reply_delay{0};
  // Serving ends (without error) when a stop is requested, e.g. by the std::jthread it runs on.
  std::stop_token stop{};
  WatchLimits watch_limits{};
  // The device's GPS position (lon, lat) in degrees, if it has one: on every Welcome that
  // announces a frame, projected on the device into component "location" (metres in the
  // coordinator's frame). A Welcome with an invalid frame ends serving with an error naming it.
  std::optional<std::array<double, 2>> lonlat{};
  // A position that moves (a phone's latest fix): if set, asked at every Welcome instead of
  // `lonlat`; nullopt means no lon/lat. Called on the serving thread.
  std::function<std::optional<std::array<double, 2>>()> lonlat_now{};
  // Check-in mode (phones that connect now and then): > 0 ends serving, without error, once
  // no request has come for this long after the Welcome — the device takes what was queued
  // for it, answers, and leaves. 0: serve until the stream ends.
  std::chrono::milliseconds check_in_idle{0};
  // The lock every call into the device takes while serving (requests, watch ticks, the
  // frame), shared with the app's own calls on the same device (the C ABI's device lock);
  // nullptr: the device is the connection's alone, and it locks a mutex of its own.
  std::mutex* device_mutex = nullptr;
  // Tests and simulations only: serve a device whose randomness is not secure
  // (Device::open_for_simulation). Otherwise such a device is refused before dialling
  // (invalid_argument naming "randomness"): its noise would be predictable.
  bool allow_simulation_randomness = false;
  // gRPC, or the lean frames (on the coordinator's device frames port; needs
  // tls_root_certificate). Last, so that positional initializers of the fields above still work.
  DeviceTransport transport = DeviceTransport::grpc;
  // A live fleet spread over gateways (docs/cluster.md): > 0 is the fleet's number of virtual
  // shards, and coordinator_address is then a template ("s{shard}.devices.example.org:443")
  // filled with this device's shard (protocol::virtual_shard of device_id, which is public).
  // A load balancer routes each shard's name to the gateway that owns it. 0: one address.
  std::uint32_t virtual_shards = 0;
  // "host:port" to dial instead of the address's own host, keeping the address's host as the
  // name TLS checks the certificate against and sends as SNI (curl's --connect-to): a fleet
  // whose names do not resolve where the device is (tests, a private network). Empty: none.
  std::string connect_to{};
};

// How serve_device_reconnecting dials again: after a session that lasted at least
// `reset_after`, in `initial`; after a quick failure, twice the last wait, at most `max`; each
// wait with ±20% jitter.
struct ReconnectPolicy {
  std::chrono::milliseconds initial{100};
  std::chrono::milliseconds max{5000};
  std::chrono::seconds reset_after{5};
};

// Blocks until the coordinator closes the stream, the connection fails, or connection.stop is
// requested; a refused connection (wrong credential) is an error naming it, and so is a
// coordinator that sends no Welcome within 10 s, or a second Welcome in one session
// ("welcome"). A device without secure randomness is refused ("randomness") unless
// connection.allow_simulation_randomness.
Status serve_device(const DeviceConnection& connection, client::Device& device);
// serve_device again and again until connection.stop is requested (then it returns ok), with
// backoff between sessions: for a device that keeps a link open (cgp-device --reconnect, the
// C ABI's cgp_connection_start). Returns early only on an error redialling cannot mend: a
// refused credential (unauthenticated), a refused Hello (invalid_argument: device_id,
// protocol_version), a Welcome whose frame this device cannot take ("frame"), a device
// without secure randomness ("randomness").
// `on_session_end` (may be empty) sees every session's status, e.g. for a log.
Status serve_device_reconnecting(const DeviceConnection& connection, client::Device& device,
                                 const ReconnectPolicy& policy = {},
                                 const std::function<void(const Status&)>& on_session_end = {});
// Plaintext, no credential (a device with secure randomness only).
Status serve_device(const std::string& coordinator_address, const std::string& device_id,
                    client::Device& device);

}  // namespace cgp::link
