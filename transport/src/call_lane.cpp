#include "call_lane.hpp"

#include <algorithm>
#include <utility>

namespace cgp::transport::detail {

CallLane::CallLane(std::size_t threads) {
  threads = std::max<std::size_t>(threads, 1);
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

CallLane::~CallLane() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void CallLane::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void CallLane::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and nothing left to run
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace cgp::transport::detail
