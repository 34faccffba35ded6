// Streams accepted but without a Hello yet: capped in all and per peer address, and ended after
// the Hello timeout, so that connections that never introduce themselves hold nothing for long.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace cgp::transport::detail {

class DeviceStream;

class HelloWatchdog {
 public:
  struct Limits {
    std::chrono::milliseconds timeout{10000};
    std::size_t max_pending = 8192;
    std::size_t max_pending_per_address = 1024;
  };
  // `expired` is called, outside the lock and on the watchdog's thread, for each stream whose
  // Hello did not come in time.
  HelloWatchdog(Limits limits, std::function<void(const std::shared_ptr<DeviceStream>&)> expired);
  ~HelloWatchdog();
  HelloWatchdog(const HelloWatchdog&) = delete;
  HelloWatchdog& operator=(const HelloWatchdog&) = delete;

  void start();
  void stop();  // joins the thread; streams still waiting are left to the server's shutdown

  // A stream accepted from `address` starts waiting. False (nothing recorded): a cap is
  // reached, and the stream is to be ended.
  bool await(const std::shared_ptr<DeviceStream>& session, std::string address);
  // Its Hello came, or it ended: no longer watched. False if it was not watched: the timeout
  // took it (and `expired` ends it), or it never waited.
  bool done(const DeviceStream* session);

 private:
  struct Awaiting {
    std::weak_ptr<DeviceStream> session;
    std::chrono::steady_clock::time_point deadline;
    std::string address;
  };
  using Map = std::unordered_map<const DeviceStream*, Awaiting>;
  void forget(Map::iterator it);  // under mutex_
  void run();

  const Limits limits_;
  const std::function<void(const std::shared_ptr<DeviceStream>&)> expired_;
  std::mutex mutex_;
  std::condition_variable changed_;
  Map awaiting_;
  std::unordered_map<std::string, std::size_t> pending_per_address_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cgp::transport::detail
