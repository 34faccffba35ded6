// The lean transport of a device's stream (docs/protocol.md §2b): TLS 1.3 with ALPN
// "cgp-frames/1" straight on a socket, frames both ways. The socket is non-blocking and every
// OpenSSL call is made under one mutex (an SSL object is not safe from two threads at once); a
// blocked read waits in poll() outside it, so a write (a reply, a watch alert) never waits for
// the coordinator to send something.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>

#include "cgp/protocol/device_frames.hpp"
#include "cgp/protocol/frames_tls.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "cgp/v1/device_frames.pb.h"
#include "coordinator_stream.hpp"

namespace cgp::link::detail {
namespace {

constexpr std::chrono::milliseconds kDialTimeout{10000};

Error unreachable(const std::string& address, const std::string& why) {
  return make_error(ErrorCode::unavailable, "coordinator",
                    "coordinator: cannot reach " + address + " (" + why + ")");
}

class FramesStream final : public CoordinatorStream {
 public:
  FramesStream(int fd, int wake, protocol::SslContext context, protocol::Ssl ssl)
      : fd_(fd), wake_(wake), context_(std::move(context)), ssl_(std::move(ssl)) {}
  ~FramesStream() override {
    ssl_.reset();
    ::close(fd_);
    ::close(wake_);
  }

  // Drives the handshake to its end (or the dial timeout, or cancel).
  Status handshake(const std::string& address) {
    const auto deadline = std::chrono::steady_clock::now() + kDialTimeout;
    for (;;) {
      int want = 0;
      {
        std::lock_guard lock(mutex_);
        const int r = SSL_do_handshake(ssl_.get());
        if (r == 1) break;
        const int error = SSL_get_error(ssl_.get(), r);
        if (error == SSL_ERROR_WANT_READ) {
          want = POLLIN;
        } else if (error == SSL_ERROR_WANT_WRITE) {
          want = POLLOUT;
        } else {
          const long verify = SSL_get_verify_result(ssl_.get());
          std::string why = protocol::take_ssl_errors();
          if (verify != X509_V_OK)
            return make_error(ErrorCode::unavailable, "tls",
                              std::string("tls: the coordinator's certificate is refused: ") +
                                  X509_verify_cert_error_string(verify));
          return unreachable(address, "TLS handshake failed" + why);
        }
      }
      if (!wait(want, deadline)) return unreachable(address, "TLS handshake timed out");
    }
    if (!protocol::frames_alpn_agreed(ssl_.get()))
      return unreachable(address, "the server does not speak cgp-frames/1");
    return {};
  }

  bool write(const v1::DeviceToCoordinator& message) override {
    std::string bytes;
    if (!protocol::append_frame(bytes, protocol::FrameKind::message, message)) return false;
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      int want = 0;
      {
        std::lock_guard lock(mutex_);
        if (broken_) return false;
        ERR_clear_error();  // what the app's own OpenSSL calls left is not this stream's error
        const int n =
            SSL_write(ssl_.get(), bytes.data() + sent, static_cast<int>(bytes.size() - sent));
        if (n > 0) {
          sent += static_cast<std::size_t>(n);
          continue;
        }
        const int error = SSL_get_error(ssl_.get(), n);
        if (error == SSL_ERROR_WANT_WRITE) {
          want = POLLOUT;
        } else if (error == SSL_ERROR_WANT_READ) {
          want = POLLIN;
        } else {
          ERR_clear_error();
          broken_ = true;
          lost();
          return false;
        }
      }
      if (!wait(want, std::nullopt)) return false;
    }
    return true;
  }

  bool read(v1::CoordinatorToDevice& message) override {
    for (;;) {
      auto next = reader_.next();
      if (!next)
        return end_with(make_error(ErrorCode::invalid_argument, "coordinator",
                                   "coordinator: " + next.error().message));
      if (*next) {
        const protocol::Frame frame = **next;
        if (frame.kind == protocol::FrameKind::end) {
          v1::StreamEnd end;
          if (!end.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size())))
            return end_with(make_error(ErrorCode::invalid_argument, "coordinator",
                                       "coordinator: an end frame does not parse"));
          // At most a day: a coordinator cannot park a device for good.
          retry_after_ =
              std::chrono::milliseconds(std::min<std::uint32_t>(end.retry_after_ms(), 86400000));
          return end_with(status_of(end));
        }
        const bool parsed =
            message.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size()));
        reader_.compact();
        if (!parsed)
          return end_with(make_error(ErrorCode::invalid_argument, "coordinator",
                                     "coordinator: a message does not parse as "
                                     "cgp.v1.CoordinatorToDevice"));
        return true;
      }
      int want = POLLIN;
      {
        std::lock_guard lock(mutex_);
        if (broken_) return false;
        static thread_local std::array<char, 16384> buffer;
        ERR_clear_error();
        const int n = SSL_read(ssl_.get(), buffer.data(), static_cast<int>(buffer.size()));
        if (n > 0) {
          reader_.append(buffer.data(), static_cast<std::size_t>(n));
          continue;
        }
        const int error = SSL_get_error(ssl_.get(), n);
        if (error == SSL_ERROR_WANT_WRITE) {
          want = POLLOUT;
        } else if (error != SSL_ERROR_WANT_READ) {
          ERR_clear_error();
          broken_ = true;  // closed without an end frame: the network, or a coordinator gone
          lost();
          return false;
        }
      }
      if (!wait(want, std::nullopt)) return false;
    }
  }

  void cancel() override {
    cancelled_ = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wake_, &one, sizeof one);
  }

  Status finish(const std::string&) override {
    {
      std::lock_guard lock(mutex_);
      if (!broken_) {
        SSL_shutdown(ssl_.get());  // close_notify: this device is done
        ERR_clear_error();
      }
      broken_ = true;
    }
    ::shutdown(fd_, SHUT_RDWR);
    return ended_;
  }

  std::chrono::milliseconds retry_after() const override { return retry_after_; }

 private:
  static Status status_of(const v1::StreamEnd& end) {
    const grpc::Status status(static_cast<grpc::StatusCode>(end.code()), end.message());
    std::multimap<grpc::string_ref, grpc::string_ref> trailing;
    if (!end.error_code().empty()) trailing.emplace(protocol::kErrorCodeKey, end.error_code());
    return ended_status(status, trailing, "coordinator");
  }

  // The connection went without an end frame: as gRPC reports it (unless this side cancelled).
  void lost() {
    if (cancelled_ || ended_explicitly_) return;
    ended_ = make_error(ErrorCode::unavailable, "coordinator",
                        "coordinator: the connection was lost without an end");
  }

  bool end_with(Status status) {
    ended_explicitly_ = true;
    ended_ = std::move(status);
    std::lock_guard lock(mutex_);
    broken_ = true;
    return false;
  }

  // Waits for the socket (POLLIN/POLLOUT) or a cancel; false when cancelled or timed out.
  bool wait(int events, std::optional<std::chrono::steady_clock::time_point> deadline) {
    for (;;) {
      if (cancelled_) return false;
      int timeout = -1;
      if (deadline) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            *deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        timeout = static_cast<int>(left.count());
      }
      pollfd watched[2] = {{fd_, static_cast<short>(events), 0}, {wake_, POLLIN, 0}};
      const int ready = ::poll(watched, 2, timeout);
      if (ready < 0 && errno == EINTR) continue;
      if (cancelled_ || watched[1].revents != 0) return false;
      if (ready > 0) return true;  // readable, writable, or closed: the next SSL call says
    }
  }

  const int fd_, wake_;
  protocol::SslContext context_;
  std::mutex mutex_;  // every OpenSSL call on ssl_
  protocol::Ssl ssl_;
  bool broken_ = false;
  protocol::FrameReader reader_;  // the reading thread's only
  std::atomic<bool> cancelled_{false};
  Status ended_;
  bool ended_explicitly_ = false;  // by an end frame (or a frame this device cannot take)
  std::chrono::milliseconds retry_after_{0};
};

}  // namespace

Expected<std::unique_ptr<CoordinatorStream>> dial_frames(const DeviceConnection& connection) {
  const DialTarget target = dial_target(connection);
  const std::string& address = target.dial_address;
  CGP_ASSIGN_OR_RETURN(auto context,
                       protocol::frames_client_context(connection.tls_root_certificate));
  std::string host, port, name, name_port;
  if (!split_address(address, host, port) || !split_address(target.name_address, name, name_port))
    return make_error(ErrorCode::invalid_argument, "coordinator_address",
                      "coordinator_address must be host:port, got \"" + address + "\"");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); e != 0)
    return unreachable(address, gai_strerror(e));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  std::string last = "no address";
  // One wake descriptor per dial: a stop asked while connecting or in the handshake ends the
  // wait at once (then the stream's own cancel() uses it).
  for (const addrinfo* a = found; a; a = a->ai_next) {
    const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0) return unreachable(address, "no eventfd");
    std::stop_callback wake_on_stop(connection.stop, [wake] {
      const std::uint64_t one = 1;
      [[maybe_unused]] const auto written = ::write(wake, &one, sizeof one);
    });
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      ::close(wake);
      continue;
    }
    protocol::tune_frames_socket(fd);
    const auto give_up = [&](const std::string& why) {
      last = why;
      ::close(fd);
      ::close(wake);
    };
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      give_up(std::strerror(errno));
      continue;
    }
    pollfd watched[2] = {{fd, POLLOUT, 0}, {wake, POLLIN, 0}};
    int error = 0;
    socklen_t length = sizeof error;
    const int ready = ::poll(watched, 2, static_cast<int>(kDialTimeout.count()));
    if (watched[1].revents != 0) {
      give_up("stopped");
      return unreachable(address, "stopped while connecting");
    }
    if (ready != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      give_up(error != 0 ? std::strerror(error) : "connect timed out");
      continue;
    }
    auto ssl = protocol::frames_client_session(context.get(), fd, name);
    if (!ssl) {
      give_up("no session");
      return ssl.error();
    }
    auto stream = std::make_unique<FramesStream>(fd, wake, std::move(context), std::move(*ssl));
    CGP_RETURN_IF_ERROR(stream->handshake(address));
    return std::unique_ptr<CoordinatorStream>(std::move(stream));
  }
  return unreachable(address, last);
}

}  // namespace cgp::link::detail
