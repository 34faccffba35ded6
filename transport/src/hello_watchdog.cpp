#include "hello_watchdog.hpp"

#include <algorithm>
#include <vector>

namespace cgp::transport::detail {

HelloWatchdog::HelloWatchdog(Limits limits,
                             std::function<void(const std::shared_ptr<DeviceStream>&)> expired)
    : limits_(limits), expired_(std::move(expired)) {}

HelloWatchdog::~HelloWatchdog() {
  stop();
}

void HelloWatchdog::start() {
  thread_ = std::thread([this] { run(); });
}

void HelloWatchdog::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HelloWatchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    changed_.wait_for(lock, std::clamp(limits_.timeout / 4, std::chrono::milliseconds(1),
                                       std::chrono::milliseconds(1000)));
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<DeviceStream>> expired;
    for (auto it = awaiting_.begin(); it != awaiting_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      if (auto session = it->second.session.lock()) expired.push_back(std::move(session));
      forget(it++);
    }
    lock.unlock();
    for (const auto& session : expired) expired_(session);
    expired.clear();  // the last owner may be here: release outside the lock
    lock.lock();
  }
}

bool HelloWatchdog::await(const std::shared_ptr<DeviceStream>& session, std::string address) {
  std::lock_guard lock(mutex_);
  auto& pending = pending_per_address_[address];
  if (awaiting_.size() < limits_.max_pending && pending < limits_.max_pending_per_address) {
    ++pending;
    awaiting_[session.get()] = {session, std::chrono::steady_clock::now() + limits_.timeout,
                                std::move(address)};
    return true;
  }
  if (pending == 0) pending_per_address_.erase(address);
  return false;
}

void HelloWatchdog::forget(Map::iterator it) {
  auto pending = pending_per_address_.find(it->second.address);
  if (pending != pending_per_address_.end() && --pending->second == 0)
    pending_per_address_.erase(pending);
  awaiting_.erase(it);
}

bool HelloWatchdog::done(const DeviceStream* session) {
  std::lock_guard lock(mutex_);
  auto it = awaiting_.find(session);
  if (it == awaiting_.end()) return false;
  forget(it);
  return true;
}

}  // namespace cgp::transport::detail
