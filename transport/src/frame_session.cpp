#include "frame_session.hpp"

#include <openssl/err.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

#include "cgp/protocol/log_format.hpp"
#include "cgp/v1/device_frames.pb.h"
#include "gateway_impl.hpp"

namespace cgp::transport::detail {
namespace {

// Read per turn before the frames are handled, and turns per event: a device that sends
// without pause shares its loop thread with the others.
constexpr std::size_t kReadPerTurn = 64 * 1024;
constexpr int kTurnsPerEvent = 4;
// The longest frame before the Hello is accepted (a Hello is at most ~4.5 KB: an id, a version
// and a credential of at most 4096 bytes).
constexpr std::size_t kHelloFrameLength = 8 * 1024;
// Bytes waiting for a device that does not read, at most: then it is cut (as broken).
constexpr std::size_t kMaxQueuedBytes = 4 * 1024 * 1024;

std::int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

FrameSession::FrameSession(GatewayCore& core, int epoll, int fd, protocol::Ssl ssl)
    : core_(core), epoll_(epoll), fd_(fd), ssl_(std::move(ssl)) {
  in_.set_max_length(kHelloFrameLength);
}

void FrameSession::update_output_watch_locked() {
  const bool on = !out_.empty() || ssl_wants_write_;
  if (watching_output_ == on || fd_ < 0) return;
  watching_output_ = on;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u);
  event.data.fd = fd_;
  epoll_ctl(epoll_, EPOLL_CTL_MOD, fd_, &event);
}

FrameSession::~FrameSession() {
  if (fd_ >= 0) ::close(fd_);
}

bool FrameSession::flush_locked() {
  // What another thread's OpenSSL call left (gRPC, an analyst call) must not be read as this
  // connection's error.
  ERR_clear_error();
  while (!out_.empty()) {
    const int n = SSL_write(ssl_.get(), out_.data(), static_cast<int>(out_.size()));
    if (n > 0) {
      out_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    const int error = SSL_get_error(ssl_.get(), n);
    if (error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ) {
      update_output_watch_locked();  // the loop writes the rest when the socket takes it
      return out_.size() <= kMaxQueuedBytes;
    }
    ERR_clear_error();
    out_.clear();
    return false;
  }
  std::string().swap(out_);  // an idle connection holds no buffer
  update_output_watch_locked();
  return true;
}

void FrameSession::shut_write_locked() {
  if (write_shut_ || !out_.empty()) return;
  write_shut_ = true;
  SSL_shutdown(ssl_.get());  // close_notify, not waiting for the device's
  ERR_clear_error();
  ::shutdown(fd_, SHUT_WR);
}

bool FrameSession::push(v1::CoordinatorToDevice message) {
  // Framed by the caller's thread (a round's pushes run in parallel), outside the lock.
  std::string bytes;
  if (!protocol::append_frame(bytes, protocol::FrameKind::message, message)) return false;
  std::lock_guard lock(mutex_);
  if (phase_ != Phase::open) return false;
  if (out_.empty())
    out_ = std::move(bytes);
  else
    out_ += bytes;
  if (flush_locked()) return true;
  // Broken under the write, or not reading: the loop sees the socket shut and closes it.
  phase_ = Phase::ending;
  ending_ = true;
  ::shutdown(fd_, SHUT_RDWR);
  return false;
}

void FrameSession::finish(grpc::Status status, std::uint32_t retry_after_ms) {
  std::lock_guard lock(mutex_);
  if (phase_ == Phase::ending || phase_ == Phase::closed) return;
  ending_ = true;
  linger_until_ = steady_ns(std::chrono::steady_clock::now() + kLinger);
  if (phase_ == Phase::handshake) {
    // No TLS yet to say why in: the connection is cut.
    phase_ = Phase::ending;
    ::shutdown(fd_, SHUT_RDWR);
    return;
  }
  phase_ = Phase::ending;
  v1::StreamEnd end;
  end.set_code(static_cast<std::uint32_t>(status.error_code()));
  end.set_message(status.error_message());
  end.set_retry_after_ms(retry_after_ms);
  protocol::append_frame(out_, protocol::FrameKind::end, end);
  if (!flush_locked()) {
    ::shutdown(fd_, SHUT_RDWR);
    return;
  }
  shut_write_locked();
}

bool FrameSession::linger_expired(std::chrono::steady_clock::time_point now) const noexcept {
  const std::int64_t until = linger_until_.load(std::memory_order_relaxed);
  return until != 0 && steady_ns(now) > until;
}

FrameSession::Next FrameSession::on_ready() {
  for (int turn = 0; turn < kTurnsPerEvent; ++turn) {
    bool more = false, gone = false;
    {
      std::lock_guard lock(mutex_);
      if (phase_ == Phase::closed) return Next::close;
      ERR_clear_error();
      ssl_wants_write_ = false;
      if (phase_ == Phase::handshake) {
        const int r = SSL_do_handshake(ssl_.get());
        if (r != 1) {
          const int error = SSL_get_error(ssl_.get(), r);
          if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
            ssl_wants_write_ = error == SSL_ERROR_WANT_WRITE;
            update_output_watch_locked();
            return Next::wait;
          }
          ERR_clear_error();
          core_.counters.update([](GatewayCounters& c) { ++c.refused_connections; });
          // A client that offers another ALPN protocol (h2: a gRPC device on the wrong port)
          // fails here too: the server's ALPN callback ends the handshake.
          core_.log_refused("tls-handshake", "event=refused reason=tls-handshake");
          return Next::close;
        }
        if (!protocol::frames_alpn_agreed(ssl_.get())) {
          // A client that offered no ALPN at all.
          core_.counters.update([](GatewayCounters& c) { ++c.refused_connections; });
          core_.log_refused("alpn",
                            "event=refused reason=alpn note=\"the client offered no ALPN "
                            "cgp-frames/1\"");
          return Next::close;
        }
        phase_ = Phase::open;
        update_output_watch_locked();
      }
      static thread_local std::array<char, 16384> buffer;
      std::size_t read = 0;
      while (read < kReadPerTurn) {
        const int n = SSL_read(ssl_.get(), buffer.data(), static_cast<int>(buffer.size()));
        if (n > 0) {
          // An ended connection only waits for the device to close: what it sends is dropped.
          if (phase_ == Phase::open) in_.append(buffer.data(), static_cast<std::size_t>(n));
          read += static_cast<std::size_t>(n);
          // Watched level-triggered: what is still in the socket brings the next event, so
          // only what OpenSSL holds already is read now (no read() that ends in EAGAIN).
          if (SSL_has_pending(ssl_.get()) == 0) break;
          continue;
        }
        const int error = SSL_get_error(ssl_.get(), n);
        if (error == SSL_ERROR_WANT_WRITE) {
          ssl_wants_write_ = true;
        } else if (error != SSL_ERROR_WANT_READ) {
          ERR_clear_error();
          gone = true;  // closed by the device (close_notify or not), or broken
        }
        break;
      }
      more = read >= kReadPerTurn && SSL_has_pending(ssl_.get()) != 0;
      if (!flush_locked()) gone = true;
      if (phase_ == Phase::ending) shut_write_locked();
    }
    // Ended by a frame (Goodbye, a refusal): the end frame is on its way; the loop closes the
    // connection when the device does, or after the linger.
    handle_frames();
    if (gone) return Next::close;
    if (!more) return Next::wait;
  }
  return Next::again;
}

void FrameSession::handle_frames() {
  for (;;) {
    auto next = in_.next();
    if (!next) {
      finish(core_.refuse_malformed(*this, next.error().message));
      break;
    }
    if (!*next) break;
    const protocol::Frame frame = **next;
    if (frame.kind != protocol::FrameKind::message) {
      finish(core_.refuse_malformed(*this, "frame: a device sends only message frames (kind 1)"));
      break;
    }
    incoming_.Clear();
    if (!incoming_.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size()))) {
      finish(
          core_.refuse_malformed(*this, "a message does not parse as cgp.v1.DeviceToCoordinator"));
      break;
    }
    if (ending_.load()) break;  // told to finish meanwhile: what it still sent is not counted
    const MessageOutcome outcome = core_.on_message(shared_from_this(), incoming_);
    attached_ = attached_ || outcome.attached;
    if (!id().empty()) in_.set_max_length(protocol::kMaxFrameLength);  // its Hello was taken
    if (outcome.end) {
      finish(*outcome.end, outcome.retry_after_ms);
      break;
    }
  }
  // Frames after an end are not read: the connection only waits to close.
  {
    std::lock_guard lock(mutex_);
    if (phase_ != Phase::open) {
      in_ = protocol::FrameReader();
      return;
    }
  }
  in_.compact();
}

void FrameSession::close_now() {
  {
    std::lock_guard lock(mutex_);
    if (phase_ == Phase::closed) return;
    phase_ = Phase::closed;
    ssl_.reset();
    ::close(fd_);
    fd_ = -1;
    std::string().swap(out_);
  }
  in_ = protocol::FrameReader();
  if (attached_) {
    attached_ = false;
    core_.detach(shared_from_this());
  } else if (id().empty()) {
    core_.hellos.done(this);
  }
}

}  // namespace cgp::transport::detail
