// The state behind a Device (device.hpp), shared by the request path (device.cpp) and the
// watch path (device_watch.cpp). Internal: not installed.
#pragma once

#include <sodium.h>

#include <array>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/client/privatizer.hpp"
#include "cgp/common/geometry/frame_projection.hpp"
#include "cgp/common/geometry/location_frame.hpp"

namespace cgp::client {

struct Component {
  std::size_t dimension = 0;
  std::string unit;
  std::vector<double> value;  // empty until set
  // Set when the value came from lon/lat (set_location_lonlat): the fix as given and the frame
  // it is projected in now (a new frame re-projects it: the latest fix is always the one used).
  std::optional<std::array<double, 2>> lonlat;
  std::optional<geometry::LocationFrame> frame;
};

inline RequestDigest digest_of(const std::string& canonical) {
  RequestDigest digest;
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(canonical.data()),
                     canonical.size());
  return digest;
}

struct Device::State {
  DeviceConfig config;
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<RandomSource> random;
  PrivacyFilter filter;
  Status ledger_status;
  std::unordered_map<std::string, Component> components;
  ReleaseScratch scratch;
  std::vector<double> noisy;  // reused across requests
  ReplyPacing pacing;
  std::shared_ptr<PacingClock> clock = PacingClock::steady();
  std::uint64_t pacing_overruns = 0;
  double expost_spent = 0;            // the ex-post budget's realised ε (gaussian_expost watches)
  std::vector<double> watch_scratch;  // a tick's clamped component
  // The coordinator's location frame (set_location_frame) and the device's projection into it.
  std::optional<geometry::LocationFrame> frame;
  std::optional<geometry::FrameProjection> projection;

  State(const DeviceConfig& c, std::unique_ptr<Ledger> l, std::unique_ptr<RandomSource> r)
      : config(c), ledger(std::move(l)), random(std::move(r)), filter(c) {}

  Reply rejected(const RequestId& id, Error error) const {
    Reply reply;
    reply.id = id;
    reply.status = ReplyStatus::rejected_invalid;
    reply.error = std::move(error);
    // A device whose ledger failed reports nothing left (as Device::remaining does): its filter
    // was never loaded.
    reply.remaining_budget = ledger_status.ok() ? filter.remaining() : 0.0;
    return reply;
  }

  // The whole request path. `bytes` receives the serialized reply, unless it would be longer
  // than `capacity`: then `bytes` is empty, `needed` says how long, and nothing was charged.
  Reply process(const DeviceRequest& request, const RequestDigest& digest, std::string& bytes,
                std::size_t capacity, std::size_t& needed);

  // Pacing (privatizer.md, "Timing"): work that touches the user's data or the noise runs
  // between pace_from_now(window) and pace_until(deadline), which waits out the rest of the
  // public window (and counts an overrun). Both do nothing on an unpaced device.
  PacingClock::Time pace_from_now(std::chrono::nanoseconds window) const {
    return pacing.enabled ? clock->now() + window : PacingClock::Time{};
  }
  void pace_until(PacingClock::Time deadline) {
    if (!pacing.enabled) return;
    if (clock->now() > deadline) ++pacing_overruns;
    clock->sleep_until(deadline);
  }

  // Any failure to write the ledger leaves this handle failing closed until it is reopened.
  Reply ledger_failed(const RequestId& id, Error error) {
    if (ledger_status.ok()) ledger_status = error;
    return rejected(id, std::move(error));
  }
};

// No caller's buffer to fit: the wire path, the in-process path.
inline constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();

}  // namespace cgp::client
