// A static partition of [0, n) over threads: part t gets [t·n/T, (t+1)·n/T). Work is assigned
// by index only, so results never depend on scheduling. Used by the simulated fleets and by
// the query engine over fleets that take concurrent rounds.
//
// Parts run on a process-wide pool of threads that live as long as the process, so per-thread
// state (the simulated fleet's plan cache and batch buffers) survives from one round to the
// next and a round does not pay for starting threads. A call made while the pool is busy
// (another thread's job, or a part calling parallel_chunks again) runs its parts on threads of
// its own instead, so calls never wait on one another.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

namespace cgp {
namespace detail {

class PartPool {
 public:
  static PartPool& shared() {
    static PartPool pool;
    return pool;
  }

  // Runs part(0 .. parts) with part 0 on the calling thread; false (nothing run) when the pool
  // is busy — including a call from inside one of its own parts — or this process is a fork
  // of the one that started its threads (they do not exist here).
  bool try_run(unsigned parts, const std::function<void(unsigned)>& part) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    if (!threads_.empty() && owner_ != ::getpid()) {
      busy_.store(false, std::memory_order_release);
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      owner_ = ::getpid();
      while (threads_.size() + 1 < parts)
        threads_.emplace_back([this, index = static_cast<unsigned>(threads_.size()) +
                                             1](std::stop_token stop) { serve(index, stop); });
      job_ = &part;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    wake_.notify_all();
    part(0);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return pending_ == 0; });
      job_ = nullptr;
    }
    busy_.store(false, std::memory_order_release);
    return true;
  }

 private:
  void serve(unsigned index, std::stop_token stop) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!wake_.wait(lock, stop, [&] { return generation_ != seen; })) return;  // stopping
      seen = generation_;
      if (index >= parts_) continue;
      const auto* job = job_;
      lock.unlock();
      (*job)(index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::atomic<bool> busy_{false};  // one job at a time
  std::mutex mutex_;               // the fields below
  std::condition_variable_any wake_;
  std::condition_variable_any done_;
  const std::function<void(unsigned)>* job_ = nullptr;
  unsigned parts_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
  pid_t owner_ = 0;
  // Last: destroyed first, so each thread is stopped and joined while the rest still exists.
  std::vector<std::jthread> threads_;
};

}  // namespace detail

// The cores this process may use (at least 1): the default number of parts of a job.
inline unsigned default_threads() noexcept {
  return std::max(1u, std::thread::hardware_concurrency());
}

// body(begin, end, part) for each of min(threads, n / min_items) parts (at least one), the
// first on the calling thread. min_items keeps small jobs on one thread.
template <class Body>  // Body(std::size_t begin, std::size_t end, unsigned part)
void parallel_chunks(std::size_t n, unsigned threads, Body&& body, std::size_t min_items = 2048) {
  const std::size_t most = min_items ? n / min_items : n;
  const auto parts =
      static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(threads, most)));
  if (parts <= 1) {
    body(std::size_t{0}, n, 0u);
    return;
  }
  const std::function<void(unsigned)> part = [&](unsigned t) {
    body(n * t / parts, n * (t + 1) / parts, t);
  };
  if (detail::PartPool::shared().try_run(parts, part)) return;
  std::vector<std::jthread> workers;  // the pool is busy: threads of this call's own
  workers.reserve(parts - 1);
  for (unsigned t = 1; t < parts; ++t) workers.emplace_back([&, t] { part(t); });
  part(0);
}

}  // namespace cgp
