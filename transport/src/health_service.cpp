#include "health_service.hpp"

#include <utility>

namespace cgp::transport::detail {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

// A Watch refused at its start: ends at once, holding nothing.
class RefusedWatch final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

// One Watch stream: the current status at once, then every change, until the client goes, the
// registry ends it (lifetime, shutdown) or a write fails. The newest status wins when several
// come while a write is in flight.
class HealthService::WatchStream final : public grpc::ServerWriteReactor<HealthCheckResponse>,
                                         public BoundedStream {
 public:
  WatchStream(StreamRegistry& registry, grpc::CallbackServerContext& context, std::string watched)
      : service(std::move(watched)), registry_(registry), context_(context) {}
  const std::string service;

  void post(ServingStatus status) {
    std::unique_lock lock(mutex_);
    if (finishing_) return;
    pending_ = status;
    has_pending_ = true;
    if (!writing_) start_write(lock);
  }
  void end(const grpc::Status& status) override {
    std::unique_lock lock(mutex_);
    if (!finishing_) {
      finishing_ = true;
      final_ = status;
      if (!writing_) finish(lock);  // else OnWriteDone finishes, once the write is out
      return;
    }
    // Ended before and a write still in flight (the reaper asks again a tick later): a client
    // that never reads (no HTTP/2 window) would hold it, and so the stream, for good.
    // Cancelling fails the write, and OnWriteDone finishes.
    if (!writing_ || cancelled_) return;
    cancelled_ = true;
    lock.unlock();
    context_.TryCancel();
  }
  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mutex_);
    writing_ = false;
    if (!ok && !finishing_) {
      finishing_ = true;
      final_ = grpc::Status::CANCELLED;
    }
    // A status posted while the last write was out goes first, also when the stream is ending
    // (NOT_SERVING at shutdown), unless the write failed or was cancelled.
    if (has_pending_ && ok && !cancelled_)
      start_write(lock);
    else if (finishing_)
      finish(lock);
  }
  void OnCancel() override { end(grpc::Status::CANCELLED); }
  void OnDone() override {
    registry_.forget(*this);
    delete this;
  }

 private:
  void start_write(std::unique_lock<std::mutex>& lock) {
    response_.set_status(pending_);  // not in flight: writing_ is false
    has_pending_ = false;
    writing_ = true;
    lock.unlock();
    StartWrite(&response_);
  }
  void finish(std::unique_lock<std::mutex>& lock) {
    if (finish_called_) return;
    finish_called_ = true;
    const grpc::Status status = final_;
    lock.unlock();
    Finish(status);
  }
  StreamRegistry& registry_;
  grpc::CallbackServerContext& context_;  // valid until OnDone
  std::mutex mutex_;
  HealthCheckResponse response_;  // the message in flight
  ServingStatus pending_ = HealthCheckResponse::UNKNOWN;
  bool has_pending_ = false, writing_ = false, finishing_ = false, finish_called_ = false,
       cancelled_ = false;
  grpc::Status final_;
};

HealthService::HealthService(StreamCaps caps, std::function<void(const std::string&)> refused)
    : refused_(std::move(refused)), watches_(caps, "health-watch") {}

HealthService::ServingStatus HealthService::status_of(const std::string& service) const {
  if (shut_down_) return HealthCheckResponse::NOT_SERVING;
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::set_serving(const std::string& service, bool serving) {
  std::lock_guard lock(mutex_);
  if (shut_down_) return;  // stopping is final
  serving_[service] = serving;
  const ServingStatus now = status_of(service);
  watches_.for_each([&](BoundedStream& stream) {
    auto& watch = static_cast<WatchStream&>(stream);
    if (watch.service == service) watch.post(now);
  });
}

void HealthService::shutdown() {
  std::lock_guard lock(mutex_);
  shut_down_ = true;
  watches_.for_each([](BoundedStream& stream) {
    static_cast<WatchStream&>(stream).post(HealthCheckResponse::NOT_SERVING);
  });
  watches_.end_all(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"));
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (request->service().size() > kMaxServiceNameBytes) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "service: a name is at most " + std::to_string(kMaxServiceNameBytes) + " bytes"));
    return reactor;
  }
  ServingStatus status;
  {
    std::lock_guard lock(mutex_);
    status = status_of(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  // gRPC keeps the request until the stream ends: a long name would make each admitted stream
  // hold up to a message's size (1 MB), not the ~20 KB the caps are sized for.
  if (request->service().size() > kMaxServiceNameBytes)
    return new RefusedWatch(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "service: a name is at most " + std::to_string(kMaxServiceNameBytes) + " bytes"));
  auto* watch = new WatchStream(watches_, *context, request->service());
  std::unique_lock lock(mutex_);
  const std::string refusal = watches_.admit(*watch, context->peer());
  if (!refusal.empty()) {
    lock.unlock();
    delete watch;  // never given to gRPC
    if (refused_) refused_(refusal);
    const bool stopping = refusal.ends_with("-stopping");
    return new RefusedWatch(grpc::Status(
        stopping ? grpc::StatusCode::UNAVAILABLE : grpc::StatusCode::RESOURCE_EXHAUSTED,
        stopping ? "the coordinator is stopping" : "too many health watches (" + refusal + ")"));
  }
  watch->post(status_of(watch->service));
  return watch;
}

}  // namespace cgp::transport::detail
