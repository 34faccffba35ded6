// The coordinator's end of one device's stream (gRPC callback API): Hello and its credential
// first, then replies delivered to the rounds that asked for them.
#include "cgp/common/wire/limits.hpp"
#include "gateway_impl.hpp"

namespace cgp::transport::detail {

class DeviceStream final
    : public grpc::ServerBidiReactor<v1::DeviceToCoordinator, v1::CoordinatorToDevice> {
 public:
  explicit DeviceStream(GatewayCore& gateway) : gateway_(gateway) { StartRead(&incoming_); }

  void OnReadDone(bool ok) override {
    if (!ok) return end(grpc::Status::OK);
    if (!session_) {
      if (!incoming_.has_hello()) {
        gateway_.count([](GatewayCounters& c) { ++c.refused_connections; });
        gateway_.log("event=refused reason=no-hello");
        return refuse({grpc::StatusCode::INVALID_ARGUMENT, "the first message must be Hello"});
      }
      if (auto admitted = gateway_.admit(incoming_.hello()); !admitted.ok())
        return refuse(std::move(admitted));
      session_ = std::make_shared<Session>(incoming_.hello().device_id(), this);
      v1::CoordinatorToDevice welcome;
      welcome.mutable_welcome()->set_protocol_version(wire::kProtocolVersion);
      session_->push(std::move(welcome));
      gateway_.attach(session_);
    } else if (incoming_.has_reply()) {
      gateway_.deliver(session_->id(), incoming_.reply());
    } else if (incoming_.has_goodbye()) {
      return end(grpc::Status::OK);
    }
    StartRead(&incoming_);
  }

  void OnWriteDone(bool ok) override { session_->on_write_done(ok); }

  void OnCancel() override { end(grpc::Status::CANCELLED); }

  void OnDone() override {
    if (session_) {
      session_->detach();
      gateway_.detach(session_);
    }
    delete this;
  }

 private:
  void refuse(grpc::Status status) {
    if (!refused_) {
      refused_ = true;
      Finish(std::move(status));
    }
  }
  void end(grpc::Status status) {
    if (session_)
      session_->finish(std::move(status));
    else
      refuse(std::move(status));
  }

  GatewayCore& gateway_;
  v1::DeviceToCoordinator incoming_;
  std::shared_ptr<Session> session_;  // set once the Hello is accepted
  bool refused_ = false;              // Finish called before a session existed
};

bool Session::push(v1::CoordinatorToDevice message) {
  const v1::CoordinatorToDevice* next = nullptr;
  DeviceStream* stream = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!stream_ || finish_requested_) return false;
    queue_.push_back(std::move(message));
    if (writing_) return true;
    writing_ = true;
    next = &queue_.front();  // deque: stays put while others are appended
    stream = stream_;
  }
  // Outside the lock: gRPC may run the reaction inline.
  stream->StartWrite(next);
  return true;
}

void Session::finish(grpc::Status status) {
  DeviceStream* stream = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!stream_ || finish_requested_) return;
    finish_requested_ = true;
    finish_status_ = std::move(status);
    if (writing_) return;  // on_write_done finishes
    stream = stream_;
  }
  stream->Finish(finish_status_);
}

void Session::on_write_done(bool ok) {
  const v1::CoordinatorToDevice* next = nullptr;
  bool finish_now = false;
  DeviceStream* stream = nullptr;
  {
    std::lock_guard lock(mutex_);
    queue_.pop_front();
    if (!ok) {
      queue_.clear();  // the stream is broken: the read side ends it
      if (!finish_requested_) {
        finish_requested_ = true;
        finish_status_ = grpc::Status::CANCELLED;
      }
    }
    stream = stream_;
    if (finish_requested_) {
      writing_ = false;
      finish_now = true;
    } else if (!queue_.empty()) {
      next = &queue_.front();
    } else {
      writing_ = false;
    }
  }
  if (finish_now)
    stream->Finish(finish_status_);
  else if (next)
    stream->StartWrite(next);
}

void Session::detach() {
  std::lock_guard lock(mutex_);
  stream_ = nullptr;
  queue_.clear();
}

grpc::ServerBidiReactor<v1::DeviceToCoordinator, v1::CoordinatorToDevice>*
GatewayCore::open_stream() {
  return new DeviceStream(*this);
}

grpc::Status GatewayCore::admit(const v1::Hello& hello) const {
  const std::string& id = hello.device_id();
  auto refuse = [&](grpc::Status status, const char* reason) {
    const_cast<GatewayCore*>(this)->count([](GatewayCounters& c) { ++c.refused_connections; });
    log(std::string("event=refused reason=") + reason + " device=" + id.substr(0, 128));
    return status;
  };
  if (id.empty() || id.size() > wire::kMaxIdBytes)
    return refuse({grpc::StatusCode::INVALID_ARGUMENT, "device_id must have 1 to 128 bytes"},
                  "device-id");
  if (hello.protocol_version() != wire::kProtocolVersion)
    return refuse({grpc::StatusCode::FAILED_PRECONDITION, "protocol_version must be 1"},
                  "protocol-version");
  if (credential_digests.empty()) return grpc::Status::OK;
  // Binding the stream to the id whose credential it presented: a device cannot answer for
  // another id, since replies are taken as that id's only.
  const std::string& credential = hello.credential();
  const grpc::Status refused{grpc::StatusCode::UNAUTHENTICATED, "credential refused"};
  if (credential.size() > wire::kMaxCredentialBytes) return refuse(refused, "credential");
  CredentialDigest digest;
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(credential.data()),
                     credential.size());
  auto expected = credential_digests.find(id);
  if (expected == credential_digests.end() ||
      sodium_memcmp(expected->second.data(), digest.data(), digest.size()) != 0)
    return refuse(refused, "credential");
  return grpc::Status::OK;
}

}  // namespace cgp::transport::detail
