// A fixed set of threads that run blocking calls in order of arrival, so that gRPC's callback
// threads never block and the threads a server uses for its calls are counted in advance.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cgp::transport::detail {

class CallLane {
 public:
  // `threads` >= 1. The queue is not bounded here: callers admit calls first (StreamRegistry),
  // which bounds what can wait.
  explicit CallLane(std::size_t threads);
  // Runs what was posted, then joins.
  ~CallLane();
  CallLane(const CallLane&) = delete;
  CallLane& operator=(const CallLane&) = delete;

  void post(std::function<void()> task);

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace cgp::transport::detail
