// A device that keeps its link open: one serve_device session after another, with backoff, until
// the caller stops it.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <random>
#include <stop_token>

#include "cgp/link/device_client.hpp"
#include "coordinator_stream.hpp"

namespace cgp::link {
namespace {

// Errors that dialling again cannot mend: the coordinator refused this device's credential or
// its Hello (device_id, protocol_version: invalid_argument), or announced a frame this device
// cannot take (the same coordinator will announce it again). A second Welcome in one session
// ends that session only: the next one may be well-formed.
bool final_error(const Error& error) {
  if (error.parameter == "welcome") return false;
  return error.code == ErrorCode::unauthenticated || error.code == ErrorCode::invalid_argument ||
         error.parameter == "credential" || error.parameter == "virtual_shards" ||
         error.parameter.starts_with("frame");
}

// Sleeps `wait`, or less if a stop is requested; true if stopped.
bool sleep_unless_stopped(std::stop_token stop, std::chrono::milliseconds wait) {
  std::mutex mutex;
  std::condition_variable_any woken;
  std::unique_lock lock(mutex);
  woken.wait_for(lock, stop, wait, [] { return false; });
  return stop.stop_requested();
}

// ±20% jitter, so that a fleet that lost its coordinator at one moment does not redial in lockstep
// when it comes back.
std::chrono::milliseconds jittered(std::chrono::milliseconds wait) {
  thread_local std::minstd_rand rng(std::random_device{}());
  std::uniform_real_distribution<double> factor(0.8, 1.2);
  return std::chrono::milliseconds(
      static_cast<std::chrono::milliseconds::rep>(static_cast<double>(wait.count()) * factor(rng)));
}

// Pace steering (docs/protocol.md §3): no sooner than the coordinator asked, plus up to 10% more,
// so that devices given the same delay still spread out.
std::chrono::milliseconds steered(std::chrono::milliseconds retry_after) {
  thread_local std::minstd_rand rng(std::random_device{}());
  std::uniform_real_distribution<double> factor(1.0, 1.1);
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(
      static_cast<double>(retry_after.count()) * factor(rng)));
}

}  // namespace

Status serve_device_reconnecting(const DeviceConnection& connection, client::Device& device,
                                 const ReconnectPolicy& policy,
                                 const std::function<void(const Status&)>& on_session_end) {
  std::chrono::milliseconds backoff = policy.initial;
  while (!connection.stop.stop_requested()) {
    const auto began = std::chrono::steady_clock::now();
    const detail::SessionEnd session = detail::serve_session(connection, device);
    const Status& served = session.status;
    if (on_session_end) on_session_end(served);
    if (!served && final_error(served.error())) return served;
    // A session that lasted starts the backoff over; quick failures double it, up to max.
    if (std::chrono::steady_clock::now() - began >= policy.reset_after) backoff = policy.initial;
    const auto wait = std::max(jittered(backoff), steered(session.retry_after));
    if (sleep_unless_stopped(connection.stop, wait)) break;
    backoff = std::min(2 * backoff, policy.max);
  }
  return {};
}

}  // namespace cgp::link
