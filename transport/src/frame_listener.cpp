#include "frame_listener.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "frame_session.hpp"
#include "gateway_impl.hpp"

namespace cgp::transport::detail {
namespace {

// Non-blocking, and keepalive from the limits: a device that vanished is noticed after
// ~keepalive_time + keepalive_timeout.
void tune_socket(int fd, const ConnectionLimits& limits) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  protocol::KeepAlive keepalive;
  keepalive.idle = std::chrono::duration_cast<std::chrono::seconds>(limits.keepalive_time);
  keepalive.interval =
      std::chrono::duration_cast<std::chrono::seconds>(limits.keepalive_timeout) / keepalive.probes;
  protocol::tune_frames_socket(fd, keepalive);
}

}  // namespace

// One epoll thread and the connections it owns (by descriptor). Connections arrive from the
// accepting thread through `incoming_`; everything else about them happens here, except the
// writes other threads make through FrameSession::push/finish.
class FrameLoop {
 public:
  FrameLoop(GatewayCore& core, SSL_CTX* context, const ConnectionLimits& limits)
      : core_(core), context_(context), limits_(limits) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_ < 0 || wake_ < 0) return;  // ok() says so; no thread is started
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = wake_;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &event);
    thread_ = std::thread([this] { run(); });
  }
  ~FrameLoop() {
    stop(std::chrono::milliseconds(0));
    if (wake_ >= 0) ::close(wake_);
    if (epoll_ >= 0) ::close(epoll_);
  }
  bool ok() const { return epoll_ >= 0 && wake_ >= 0; }

  // The accepting thread: `fd` is this loop's from now on.
  void adopt(int fd, std::string address) {
    {
      std::lock_guard lock(incoming_mutex_);
      incoming_.emplace_back(fd, std::move(address));
    }
    wake();
  }

  // Asks the loop to end its connections and stop by `grace` from now; join() waits for it.
  void request_stop(std::chrono::milliseconds grace) {
    if (!thread_.joinable() || stopping_) return;
    stop_at_ = std::chrono::steady_clock::now() + grace;
    stopping_ = true;
    wake();
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  void stop(std::chrono::milliseconds grace) {
    request_stop(grace);
    join();
  }

  std::size_t open() const { return open_.load(std::memory_order_relaxed); }

 private:
  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wake_, &one, sizeof one);
  }

  void take_incoming() {
    std::vector<std::pair<int, std::string>> arrived;
    {
      std::lock_guard lock(incoming_mutex_);
      arrived.swap(incoming_);
    }
    for (auto& [fd, address] : arrived) {
      if (stopping_) {
        ::close(fd);
        continue;
      }
      tune_socket(fd, limits_);
      protocol::Ssl ssl(SSL_new(context_));
      if (!ssl || !protocol::attach_socket(ssl.get(), fd)) {
        ::close(fd);
        continue;
      }
      SSL_set_accept_state(ssl.get());
      auto session = std::make_shared<FrameSession>(core_, epoll_, fd, std::move(ssl));
      const auto slot = static_cast<std::size_t>(fd);
      if (by_fd_.size() <= slot) by_fd_.resize(slot + 1);
      by_fd_[slot] = session;
      open_.fetch_add(1, std::memory_order_relaxed);
      // The Hello watchdog bounds the handshake too: a connection that never finishes TLS is
      // ended at the hello timeout like one that never says Hello.
      if (!core_.await_hello(session, address)) {
        close(fd);
        continue;
      }
      // Level-triggered, input only: a reply costs one read(); output is watched only while
      // a write waits (FrameSession::watch_output_locked).
      epoll_event event{};
      event.events = EPOLLIN | EPOLLRDHUP;
      event.data.fd = fd;
      if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event) != 0) close(fd);
    }
  }

  void close(int fd) {
    const auto slot = static_cast<std::size_t>(fd);
    if (slot >= by_fd_.size() || !by_fd_[slot]) return;
    auto session = std::move(by_fd_[slot]);
    session->close_now();  // closes fd (and so removes it from epoll)
    open_.fetch_sub(1, std::memory_order_relaxed);
  }

  void ready(int fd) {
    const auto slot = static_cast<std::size_t>(fd);
    // Closed earlier in this batch: its descriptor is no longer ours.
    if (slot >= by_fd_.size() || !by_fd_[slot]) return;
    switch (by_fd_[slot]->on_ready()) {
      case FrameSession::Next::wait:
        break;
      case FrameSession::Next::again:
        again_.push_back(fd);
        break;
      case FrameSession::Next::close:
        close(fd);
        break;
    }
  }

  void sweep(std::chrono::steady_clock::time_point now) {
    for (std::size_t fd = 0; fd < by_fd_.size(); ++fd)
      if (by_fd_[fd] && by_fd_[fd]->linger_expired(now)) close(static_cast<int>(fd));
  }

  void run() {
    std::vector<epoll_event> events(512);
    auto last_sweep = std::chrono::steady_clock::now();
    bool ended_all = false;
    for (;;) {
      const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()),
                               again_.empty() ? 250 : 0);
      take_incoming();
      for (int k = 0; k < n; ++k) {
        const int fd = events[static_cast<std::size_t>(k)].data.fd;
        if (fd == wake_) {
          std::uint64_t count = 0;
          [[maybe_unused]] const auto got = ::read(wake_, &count, sizeof count);
          continue;
        }
        ready(fd);
      }
      // Connections that read their share last time and may have more inside OpenSSL.
      if (!again_.empty()) {
        std::vector<int> now_again;
        now_again.swap(again_);
        for (int fd : now_again) ready(fd);
      }
      const auto now = std::chrono::steady_clock::now();
      if (stopping_) {
        if (!ended_all) {
          ended_all = true;  // those the gateway did not end (before Hello) end here
          for (auto& session : by_fd_)
            if (session)
              session->finish(
                  grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"));
        }
        if (open() == 0 || now >= stop_at_) break;
      }
      if (now - last_sweep >= std::chrono::milliseconds(250)) {
        last_sweep = now;
        sweep(now);
      }
    }
    for (std::size_t fd = 0; fd < by_fd_.size(); ++fd) close(static_cast<int>(fd));
  }

  GatewayCore& core_;
  SSL_CTX* context_;
  const ConnectionLimits limits_;
  int epoll_ = -1, wake_ = -1;
  std::mutex incoming_mutex_;
  std::vector<std::pair<int, std::string>> incoming_;
  std::vector<std::shared_ptr<FrameSession>> by_fd_;  // this thread only
  std::vector<int> again_;                            // this thread only
  std::atomic<std::size_t> open_{0};
  std::atomic<bool> stopping_{false};
  std::chrono::steady_clock::time_point stop_at_{};
  std::thread thread_;
};

Expected<std::unique_ptr<FrameListener>> FrameListener::start(
    GatewayCore& core, const std::string& address, std::size_t loops,
    const std::string& certificate_chain, const std::string& private_key,
    const ConnectionLimits& limits, std::shared_ptr<ConnectionLedger> ledger) {
  if (loops == 0 || loops > 64)
    return make_error(ErrorCode::out_of_range, "frame_loops", "frame_loops must be 1..64");
  std::unique_ptr<FrameListener> listener(new FrameListener());
  CGP_ASSIGN_OR_RETURN(listener->context_,
                       protocol::frames_server_context(certificate_chain, private_key));
  auto* counters = &core.counters;
  auto on_refused = [counters](ConnectionRefusal why) {
    counters->update([why](GatewayCounters& c) {
      ++c.refused_connections;
      if (why == ConnectionRefusal::total_cap) ++c.refused_total_cap;
      if (why == ConnectionRefusal::address_cap) ++c.refused_address_cap;
      if (why == ConnectionRefusal::descriptors) ++c.refused_descriptors;
    });
  };
  auto admission = ConnectionAdmission::listen(
      address, limits, [&core](const std::string& line) { core.log(line); }, on_refused,
      std::move(ledger));
  if (!admission) return admission.error();
  listener->admission_ = std::move(*admission);
  for (std::size_t k = 0; k < loops; ++k) {
    listener->loops_.push_back(std::make_unique<FrameLoop>(core, listener->context_.get(), limits));
    if (!listener->loops_.back()->ok())
      return make_error(
          ErrorCode::internal_error, "frame_loops",
          std::string("frame_loops: cannot make an epoll loop: ") + std::strerror(errno));
  }
  return listener;
}

void FrameListener::start_accepting() {
  admission_->start([this](int fd, const std::string& peer) {
    loops_[next_loop_++ % loops_.size()]->adopt(fd, peer);
  });
}

FrameListener::~FrameListener() {
  stop(std::chrono::milliseconds(0));
}

void FrameListener::stop_accepting() {
  if (admission_) admission_->stop();
}

void FrameListener::stop(std::chrono::milliseconds grace) {
  stop_accepting();
  // Every loop ends its connections at once; the grace runs for all of them together.
  for (auto& loop : loops_) loop->request_stop(grace);
  for (auto& loop : loops_) loop->join();
}

int FrameListener::port() const noexcept {
  return admission_->port();
}

}  // namespace cgp::transport::detail
