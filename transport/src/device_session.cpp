#include "device_session.hpp"

#include "cgp/protocol/status_codec.hpp"
#include "gateway_impl.hpp"

namespace cgp::transport::detail {

void Session::listen() {
  self_ = shared_from_this();
  core_.live_grpc_sessions.fetch_add(1, std::memory_order_relaxed);
  core_.device_service.RequestConnect(&context_, &stream_, &queue_, &queue_, &accepted_tag_);
}

void Session::start_read() {
  reading_ = true;
  stream_.Read(&incoming_bytes_, &read_tag_);
}

void Session::on_event(Op op, bool ok) {
  switch (op) {
    case Op::accepted:
      if (ok) {
        // The next device on this queue gets a fresh listener.
        std::make_shared<Session>(core_, queue_)->listen();
        {
          // Accepted before the watchdog knows it: a Hello timeout that fires at once must
          // find a stream it can finish.
          std::lock_guard lock(mutex_);
          accepted_ = true;
        }
        const bool pending = core_.await_hello(shared_from_this(), peer_address(context_.peer()));
        if (pending) {
          std::lock_guard lock(mutex_);
          if (!finish_requested_) start_read();
        } else {
          finish({grpc::StatusCode::RESOURCE_EXHAUSTED, "too many streams waiting for Hello"});
        }
      }
      break;
    case Op::read:
      on_read(ok);
      break;
    case Op::write:
      on_write(ok);
      break;
    case Op::finish: {
      std::lock_guard lock(mutex_);
      finish_done_ = true;
      break;
    }
  }
  release_if_idle();
}

void Session::on_read(bool ok) {
  {
    std::lock_guard lock(mutex_);
    reading_ = false;
    // A stream told to finish (revoked, its credential changed, replaced by a newer one) counts
    // nothing it still sends: a read already posted may complete after the finish was asked.
    if (finish_requested_) return;
  }
  if (!ok) return finish(grpc::Status::OK);  // the device half-closed or went away
  incoming_.Clear();
  if (!grpc::SerializationTraits<v1::DeviceToCoordinator>::Deserialize(&incoming_bytes_, &incoming_)
           .ok())
    return finish(
        core_.refuse_malformed(*this, "a message does not parse as cgp.v1.DeviceToCoordinator"));
  const MessageOutcome outcome = core_.on_message(shared_from_this(), incoming_);
  if (outcome.attached) {
    // Events of this stream come on this thread only, so release_if_idle cannot run between
    // the attach and attached_.
    std::lock_guard lock(mutex_);
    attached_ = true;
  }
  if (outcome.end) return finish(*outcome.end, outcome.retry_after_ms);
  std::lock_guard lock(mutex_);
  if (!finish_requested_) start_read();
}

void Session::on_write(bool ok) {
  std::lock_guard lock(mutex_);
  outgoing_.pop_front();
  if (!ok) {
    outgoing_.clear();  // the stream is broken
    if (!finish_requested_) {
      finish_requested_ = true;
      finish_status_ = grpc::Status::CANCELLED;
    }
  }
  if (finish_requested_) {
    writing_ = false;
    if (!finish_sent_) {
      finish_sent_ = true;
      stream_.Finish(finish_status_, &finish_tag_);
    }
  } else if (!outgoing_.empty()) {
    stream_.Write(outgoing_.front(), &write_tag_);
  } else {
    writing_ = false;
  }
}

bool Session::push(v1::CoordinatorToDevice message) {
  // Serialized by the caller's thread (a round's pushes run in parallel), outside the lock.
  grpc::ByteBuffer bytes;
  bool own_buffer = false;
  if (!grpc::SerializationTraits<v1::CoordinatorToDevice>::Serialize(message, &bytes, &own_buffer)
           .ok())
    return false;
  std::lock_guard lock(mutex_);
  if (!accepted_ || finish_requested_) return false;
  outgoing_.push_back(std::move(bytes));
  if (writing_) return true;
  writing_ = true;
  stream_.Write(outgoing_.front(), &write_tag_);
  return true;
}

void Session::finish(grpc::Status status, std::uint32_t retry_after_ms) {
  std::lock_guard lock(mutex_);
  if (!accepted_ || finish_requested_) return;
  if (retry_after_ms > 0)
    context_.AddTrailingMetadata(protocol::kRetryAfterKey, std::to_string(retry_after_ms));
  finish_requested_ = true;
  finish_status_ = std::move(status);
  if (writing_) return;  // on_write finishes
  finish_sent_ = true;
  stream_.Finish(finish_status_, &finish_tag_);
}

void Session::release_if_idle() {
  bool detach = false;
  {
    std::lock_guard lock(mutex_);
    // A listener whose wait was cancelled (shutdown), or a finished stream with nothing in
    // flight.
    const bool done = !accepted_ || (finish_done_ && !reading_ && !writing_);
    if (!done || !self_) return;
    if (accepted_ && id().empty()) core_.hellos.done(this);
    detach = attached_;
    attached_ = false;
  }
  if (detach) core_.detach(shared_from_this());
  auto last = std::move(self_);  // may destroy this when the function returns
  core_.live_grpc_sessions.fetch_sub(1, std::memory_order_release);
}

}  // namespace cgp::transport::detail
