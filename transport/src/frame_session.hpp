// The coordinator's end of one device's connection on the lean transport (docs/protocol.md §2b):
// TLS 1.3 on a non-blocking socket, frames both ways, driven by one FrameLoop thread. Writes
// (a round's pushes, a finish) may come from any thread: every OpenSSL call on the connection
// is made under mutex_, the frames are handled on the loop thread outside it.
//
// What an idle device costs here: this object, OpenSSL's SSL (its record buffers released while
// idle: SSL_MODE_RELEASE_BUFFERS) and the socket; the reader and the write queue hold no heap
// once drained.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "cgp/protocol/device_frames.hpp"
#include "cgp/protocol/frames_tls.hpp"
#include "device_stream.hpp"

namespace cgp::transport::detail {

class GatewayCore;

class FrameSession final : public DeviceStream, public std::enable_shared_from_this<FrameSession> {
 public:
  // How long an ended connection waits for the device to close before it is closed anyway.
  static constexpr std::chrono::milliseconds kLinger{2000};

  // `epoll`: the loop's, on which `fd` is watched for input (level-triggered) and, only while
  // bytes wait to be written, for output.
  FrameSession(GatewayCore& core, int epoll, int fd, protocol::Ssl ssl);
  ~FrameSession() override;

  bool push(v1::CoordinatorToDevice message) override;
  void finish(grpc::Status status, std::uint32_t retry_after_ms = 0) override;

  // Loop thread: the socket is ready. close: the connection is over and must be closed; again:
  // call again soon without waiting for the socket (this turn read its share, and OpenSSL may
  // hold more than the socket shows).
  enum class Next : std::uint8_t { wait, again, close };
  Next on_ready();
  // Loop thread: closes the socket and tells the gateway the device is gone.
  void close_now();
  // Loop thread: an ended connection whose device has not closed within kLinger.
  bool linger_expired(std::chrono::steady_clock::time_point now) const noexcept;

 private:
  enum class Phase : std::uint8_t { handshake, open, ending, closed };
  // Under mutex_: writes what can go out now; false when the connection is broken.
  bool flush_locked();
  // Under mutex_: watch the socket for output while bytes wait or OpenSSL asked to write.
  void update_output_watch_locked();
  // Under mutex_: after the end frame went out, close_notify and no more writes.
  void shut_write_locked();
  // Loop thread: handles every whole frame read so far (none once the stream is ending).
  void handle_frames();

  GatewayCore& core_;
  const int epoll_;
  std::mutex mutex_;
  int fd_;
  bool watching_output_ = false;
  bool ssl_wants_write_ = false;  // the last handshake or read step asked to write
  protocol::Ssl ssl_;
  Phase phase_ = Phase::handshake;
  bool write_shut_ = false;
  std::string out_;                            // framed bytes not yet taken by SSL_write
  protocol::FrameReader in_;                   // loop thread only
  bool attached_ = false;                      // loop thread only
  v1::DeviceToCoordinator incoming_;           // loop thread only, reused
  std::atomic<std::int64_t> linger_until_{0};  // steady-clock ns; 0: not ending
  // Set with the end (any thread): frames read but not yet handled are dropped, as the gRPC
  // session drops what a stream told to finish still sends.
  std::atomic<bool> ending_{false};
};

}  // namespace cgp::transport::detail
