// What the swarm's two transports share (private to tools/swarm): the members (each a real
// client::Device), their connection life cycle and counters under one lock, and how a device
// answers what its coordinator sends (requests through Device::handle, watches ticked on their
// public schedule) whatever carries the bytes. device_swarm.cpp runs it over gRPC,
// frame_swarm.cpp over the lean frames transport.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/link/watch_schedule.hpp"
#include "cgp/swarm/device_swarm.hpp"

namespace cgp::swarm {

struct Member {
  SwarmMember spec;
  client::Device device;
  std::mutex device_mutex;  // an old connection may still be answering while a new one starts
  // The rest is guarded by SwarmCore::mutex.
  bool done = true;    // the connection (if any) has ended
  bool wanted = true;  // redial when the connection ends (false after drop())
  std::chrono::steady_clock::time_point next_dial{};
  std::chrono::milliseconds backoff{0};
  std::chrono::steady_clock::time_point dialled{};  // when the current connection started
  bool welcomed = false;                            // the current connection got its Welcome
  // Pace steering (frames): the coordinator's Goodbye or StreamEnd said not to dial before this.
  std::chrono::steady_clock::time_point retry_not_before{};
};

// A connection without a Welcome this long after dialling is cut and dialled again (a stalled
// connection must not keep a device away for good).
inline constexpr std::chrono::seconds kWelcomeTimeout{10};

// Redial backoff: from 100 ms, doubled after each connection that was not welcomed, to 5 s.
inline constexpr std::chrono::milliseconds kFirstBackoff{100};
inline constexpr std::chrono::milliseconds kMaxBackoff{5000};
inline std::chrono::milliseconds next_backoff(std::chrono::milliseconds last, bool was_welcomed) {
  if (was_welcomed) return kFirstBackoff;
  return std::min<std::chrono::milliseconds>(std::max(2 * last, kFirstBackoff), kMaxBackoff);
}

// The swarm's state, whichever transport carries it.
struct SwarmCore {
  SwarmOptions options;
  std::vector<std::unique_ptr<Member>> members;
  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  std::size_t welcomed = 0;  // connections welcomed and still open
  bool stopping = false;
  std::atomic<std::uint64_t> requests{0}, replies{0}, refused{0}, lost{0}, welcomes{0};

  void on_welcome(std::size_t i) {
    ++welcomes;
    {
      std::lock_guard lock(mutex);
      ++welcomed;
      members[i]->welcomed = true;
    }
    changed.notify_all();
  }
};

// A transport's side of DeviceSwarm: its destructor cuts every connection and waits for them
// to end.
class SwarmTransport {
 public:
  virtual ~SwarmTransport() = default;
  virtual void drop(std::size_t i) = 0;
  virtual bool reconnect(std::size_t i) = 0;
};

// The swarm speaks cgp.v1 at the byte level: a request's bytes go to Device::handle as they
// came (the device parses them, exactly as over the C ABI), and the reply bytes it returns go
// out inside the envelope as they are. Parsing and re-serializing both cost the harness a
// fifth of its CPU per reply.
inline constexpr int kBodyWelcome = 1, kBodyRequest = 2, kBodyGoodbye = 3,
                     kBodyStartWatch = 4;  // CoordinatorToDevice

// The body of a CoordinatorToDevice envelope: its field number and bytes (pointing into
// `bytes`). False if it does not parse or has no length-delimited body.
bool envelope_body(std::string_view bytes, int& field, std::string_view& body);

// DeviceToCoordinator{hello} for `member`, serialized.
std::string hello_envelope(const SwarmMember& member);

// One connection's device side: answers requests and start_watches for member `index` and
// ticks the watches it armed (they belong to the connection: a coordinator sends them again on
// every reconnect). Envelopes to send go to `send`, replies flagged so that the transport
// counts them once written. Not thread-safe: the connection's thread calls it.
class DeviceAnswerer {
 public:
  using Send = std::function<void(std::string envelope, bool is_reply)>;

  DeviceAnswerer(SwarmCore& swarm, std::size_t index) : swarm_(swarm), index_(index) {}

  // A request's reply envelope (the request is counted).
  std::string answer_request(std::string_view body);
  // Answers a start_watch (WatchStarted, then a recorded alert if there is one). True if a
  // watch now ticks here: the caller calls tick_watches() now.
  bool start_watch(std::string_view body, const Send& send);
  // Ticks the watches that are due (alerts go to `send`); seconds until the next tick, nullopt
  // when no watch is left.
  std::optional<double> tick_watches(const Send& send);
  void clear_watches() { watches_ = {}; }

 private:
  void send_alert(const std::string& watch_id, std::uint64_t tick, const Send& send);

  SwarmCore& swarm_;
  std::size_t index_;
  link::WatchSchedule watches_;
};

// The frames transport (frame_swarm.cpp); an error naming the option it cannot use.
Expected<std::unique_ptr<SwarmTransport>> start_frame_transport(SwarmCore& swarm);

}  // namespace cgp::swarm
