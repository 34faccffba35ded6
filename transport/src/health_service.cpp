#include "health_service.hpp"

#include <utility>

namespace cgp::transport::detail {

namespace {

grpc::Status name_too_long() {
  return {grpc::StatusCode::INVALID_ARGUMENT,
          "service: a name is at most " + std::to_string(HealthService::kMaxServiceNameBytes) +
              " bytes"};
}

}  // namespace

// One Watch stream: admitted at its headers; once its request is in, the current status, then
// every change, until the client goes, the registry ends it (lifetime, shutdown) or a write
// fails. The newest status wins when several come while a write is in flight.
class HealthService::WatchStream final
    : public grpc::ServerBidiReactor<HealthCheckRequest, HealthCheckResponse>,
      public BoundedStream {
 public:
  WatchStream(HealthService& owner, StreamRegistry& registry, grpc::CallbackServerContext& context)
      : owner_(owner), registry_(registry), context_(context) {}
  // What it watches: set under the owner's lock once the request is in.
  std::string service;
  bool subscribed = false;

  void start() { StartRead(&request_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      end(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "request: the call ended before its request message"));
      return;
    }
    // A long name would make each admitted stream hold up to a message's size (1 MB), not the
    // ~20 KB the caps are sized for.
    if (request_.service().size() > kMaxServiceNameBytes) {
      request_.Clear();
      end(name_too_long());
      return;
    }
    owner_.subscribe(*this, request_.service());
    request_.Clear();
  }

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
    // Ended before and still here (the reaper asks again a tick later): a client that never
    // reads (no HTTP/2 window) would hold a write in flight, or one that never sends its
    // request and blocks its TCP the stream, for good. Cancelling fails the write (OnWriteDone
    // finishes) or the read.
    if (cancelled_) return;
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
  HealthService& owner_;
  StreamRegistry& registry_;
  grpc::CallbackServerContext& context_;  // valid until OnDone
  std::mutex mutex_;
  HealthCheckRequest request_;
  HealthCheckResponse response_;  // the message in flight
  ServingStatus pending_ = HealthCheckResponse::UNKNOWN;
  bool has_pending_ = false, writing_ = false, finishing_ = false, finish_called_ = false,
       cancelled_ = false;
  grpc::Status final_;
};

HealthService::HealthService(StreamCaps watch_caps, StreamCaps check_caps,
                             std::function<void(const std::string&)> refused)
    : refused_(std::move(refused)),
      watches_(watch_caps, "health-watch"),
      checks_(check_caps, "health-check"),
      check_handler_([this](grpc::CallbackServerContext&, const HealthCheckRequest& request,
                            HealthCheckResponse& response) { return check(request, response); }) {
  add_method<HealthCheckRequest, HealthCheckResponse>(
      "/grpc.health.v1.Health/Check", [this](grpc::CallbackServerContext* context) {
        return UnaryCall<HealthCheckRequest, HealthCheckResponse>::start(
            context, checks_, check_handler_, nullptr, "health checks", refused_);
      });
  add_method<HealthCheckRequest, HealthCheckResponse>(
      "/grpc.health.v1.Health/Watch",
      [this](grpc::CallbackServerContext* context)
          -> grpc::ServerBidiReactor<HealthCheckRequest, HealthCheckResponse>* {
        auto* watch = new WatchStream(*this, watches_, *context);
        if (auto* refusal = refuse_unless_admitted<HealthCheckRequest, HealthCheckResponse>(
                watch, watches_, context->peer(), "health watches", refused_))
          return refusal;
        watch->start();
        return watch;
      });
}

HealthService::ServingStatus HealthService::status_of(const std::string& service) const {
  if (shut_down_) return HealthCheckResponse::NOT_SERVING;
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second && !draining_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::subscribe(WatchStream& watch, const std::string& service) {
  std::lock_guard lock(mutex_);
  watch.service = service;
  watch.subscribed = true;
  watch.post(status_of(service));
}

void HealthService::set_serving(const std::string& service, bool serving) {
  std::lock_guard lock(mutex_);
  if (shut_down_) return;  // stopping is final
  serving_[service] = serving;
  const ServingStatus now = status_of(service);
  watches_.for_each([&](BoundedStream& stream) {
    auto& watch = static_cast<WatchStream&>(stream);
    if (watch.subscribed && watch.service == service) watch.post(now);
  });
}

void HealthService::drain() {
  std::lock_guard lock(mutex_);
  if (draining_ || shut_down_) return;
  draining_ = true;
  watches_.for_each([this](BoundedStream& stream) {
    auto& watch = static_cast<WatchStream&>(stream);
    if (watch.subscribed) watch.post(status_of(watch.service));
  });
}

void HealthService::shutdown() {
  std::lock_guard lock(mutex_);
  shut_down_ = true;
  watches_.for_each([](BoundedStream& stream) {
    auto& watch = static_cast<WatchStream&>(stream);
    if (watch.subscribed) watch.post(HealthCheckResponse::NOT_SERVING);
  });
  // Checks go on answering NOT_SERVING until the server stops (it cancels what is left).
  watches_.end_all(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"));
}

grpc::Status HealthService::check(const HealthCheckRequest& request,
                                  HealthCheckResponse& response) {
  if (request.service().size() > kMaxServiceNameBytes) return name_too_long();
  ServingStatus status;
  {
    std::lock_guard lock(mutex_);
    status = status_of(request.service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN)
    return {grpc::StatusCode::NOT_FOUND, "unknown service"};
  response.set_status(status);
  return grpc::Status::OK;
}

}  // namespace cgp::transport::detail
