// The coordinator's end of one device's stream (gRPC completion-queue API): Hello and its
// credential first, then replies delivered to the rounds that asked for them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "cgp/v1/device_gateway.grpc.pb.h"
#include "device_stream.hpp"

namespace cgp::transport::detail {

class GatewayCore;

// One device's stream on gRPC's completion-queue API. Its events arrive on the one queue thread
// that owns it; writes and finishes may be started from any thread (a round pushing requests,
// a reconnect replacing the stream, shutdown), so every call into gRPC is made under mutex_.
// gRPC never completes an operation inline here, so holding the mutex across the call is safe.
// The session keeps itself alive (self_) while gRPC holds any of its operations.
class Session final : public DeviceStream, public std::enable_shared_from_this<Session> {
 public:
  // Bytes both ways: the session parses what the device sends itself (an unparsable message is
  // INVALID_ARGUMENT, not a half-close) and serializes what it pushes.
  using Stream = grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;
  enum class Op : std::uint8_t { accepted, read, write, finish };
  struct Tag {
    Session* session;
    Op op;
  };

  Session(GatewayCore& core, grpc::ServerCompletionQueue& queue) : core_(core), queue_(queue) {}
  // Waits for the next device to connect on this queue.
  void listen();
  // From the queue thread: one completed operation.
  void on_event(Op op, bool ok);

  bool push(v1::CoordinatorToDevice message) override;
  void finish(grpc::Status status, std::uint32_t retry_after_ms = 0) override;

 private:
  void on_read(bool ok);
  void on_write(bool ok);
  void start_read();  // under mutex_
  // Releases self_ once nothing is in flight; the last event's caller may be the last owner.
  void release_if_idle();

  GatewayCore& core_;
  grpc::ServerCompletionQueue& queue_;
  grpc::ServerContext context_;
  Stream stream_{&context_};
  Tag accepted_tag_{this, Op::accepted}, read_tag_{this, Op::read}, write_tag_{this, Op::write},
      finish_tag_{this, Op::finish};
  grpc::ByteBuffer incoming_bytes_;
  v1::DeviceToCoordinator incoming_;

  std::mutex mutex_;
  std::deque<grpc::ByteBuffer> outgoing_;
  bool accepted_ = false, attached_ = false, reading_ = false, writing_ = false;
  bool finish_requested_ = false, finish_sent_ = false, finish_done_ = false;
  grpc::Status finish_status_;
  std::shared_ptr<Session> self_;
};

}  // namespace cgp::transport::detail
