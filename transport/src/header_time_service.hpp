// gRPC services whose calls reach us at their headers, so that each is counted before it can
// hold anything, and unary calls served on them.
//
// gRPC hands a unary or server-streaming call to the application only once its request message
// is in; until then the call sits in gRPC core, outside every cap of ours, and a peer that never
// acknowledges the server's SETTINGS opens as many as it likes on one TCP connection (gRPC 1.51
// applies max-concurrent-streams only once a peer acknowledged it): 5,000 health checks without
// their request held ~60 MB on one connection. Registered as bidi streams instead (the wire is
// the same: one request, one answer), calls are handed over at their headers, where a
// StreamRegistry admits them (per connection, per address, in all) and ends those whose request
// does not come within the registry's lifetime.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>  // SerializationTraits of protobuf messages
#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/server_callback.h>

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "call_lane.hpp"
#include "stream_registry.hpp"

namespace cgp::transport::detail {

class HeaderTimeService : public grpc::Service {
 protected:
  // `path` ("/pkg.Service/Method") must outlive the service (a string literal).
  template <class Request, class Response>
  void add_method(
      const char* path,
      std::function<grpc::ServerBidiReactor<Request, Response>*(grpc::CallbackServerContext*)>
          make) {
    AddMethod(new grpc::internal::RpcServiceMethod(path, grpc::internal::RpcMethod::BIDI_STREAMING,
                                                   nullptr));
    MarkMethodCallback(methods_added_++,
                       new grpc::internal::CallbackBidiHandler<Request, Response>(std::move(make)));
  }

 private:
  int methods_added_ = 0;
};

// A call ended at its headers (refused, unauthenticated, ...), holding nothing.
template <class Request, class Response>
class RefusedCall final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RefusedCall(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// The reason a registry gave, as the caller hears it.
inline grpc::Status refusal_status(const std::string& reason, const std::string& what) {
  if (reason.ends_with("-stopping"))
    return {grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"};
  return {grpc::StatusCode::RESOURCE_EXHAUSTED, "too many " + what + " (" + reason + ")"};
}

// Admits `stream` (made for a call, not yet given to gRPC) in `registry`. Refused, it is deleted
// and set to null, `refused` hears the reason, and the reactor that ends the call at once is
// returned; admitted, null is returned and the caller starts and returns `stream`.
template <class Request, class Response, class Stream>
grpc::ServerBidiReactor<Request, Response>* refuse_unless_admitted(
    Stream*& stream, StreamRegistry& registry, const std::string& peer, const std::string& what,
    const std::function<void(const std::string&)>& refused) {
  const std::string reason = registry.admit(*stream, peer);
  if (reason.empty()) return nullptr;
  delete stream;
  stream = nullptr;
  if (refused) refused(reason);
  return new RefusedCall<Request, Response>(refusal_status(reason, what));
}

// A unary call over a stream: admitted at its headers, then its one request is read, then the
// handler answers, inline or on a lane (for handlers that block). Until the request is in, the
// registry's lifetime bounds how long the call is held; once it is in, the handler's own time.
template <class Request, class Response>
class UnaryCall final : public grpc::ServerBidiReactor<Request, Response>, public BoundedStream {
 public:
  using Handler =
      std::function<grpc::Status(grpc::CallbackServerContext&, const Request&, Response&)>;

  // Admits the call or refuses it (`refused` hears the registry's reason); `lane` null: inline.
  // `what` names the calls in a refusal ("analyst calls").
  static grpc::ServerBidiReactor<Request, Response>* start(
      grpc::CallbackServerContext* context, StreamRegistry& registry, const Handler& handler,
      CallLane* lane, const std::string& what,
      const std::function<void(const std::string&)>& refused) {
    auto* call = new UnaryCall(*context, registry, handler, lane);
    if (auto* refusal = refuse_unless_admitted<Request, Response>(call, registry, context->peer(),
                                                                  what, refused))
      return refusal;
    call->StartRead(&call->request_);
    return call;
  }

  // From the registry: the request did not come within the lifetime, or the server stops.
  // A call already running ends with its answer; a call already finished (an answer not taken
  // in time, or ended before and still held by its client) is cancelled.
  void end(const grpc::Status& status) override {
    std::unique_lock lock(mutex_);
    if (phase_ == Phase::finished && !cancelled_) {
      // Asked again a tick later: the client holds the stream (never half-closes); cancel.
      cancelled_ = true;
      lock.unlock();
      context_.TryCancel();
      return;
    }
    if (phase_ != Phase::waiting) return;
    phase_ = Phase::finished;
    lock.unlock();
    this->Finish(status.ok() ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                            "request: no request message in time")
                             : status);
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard lock(mutex_);
      if (phase_ != Phase::waiting) return;  // ended by the registry meanwhile
      phase_ = ok ? Phase::running : Phase::finished;
    }
    if (!ok) {
      this->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "request: the call ended before its request message"));
      return;
    }
    registry_.hold(*this);  // the lifetime was for the request; the handler takes its time
    if (lane_)
      lane_->post([this] { answer(); });
    else
      answer();
  }

  void OnDone() override {
    registry_.forget(*this);
    delete this;
  }

 private:
  enum class Phase { waiting, running, finished };
  UnaryCall(grpc::CallbackServerContext& context, StreamRegistry& registry, const Handler& handler,
            CallLane* lane)
      : context_(context), registry_(registry), handler_(handler), lane_(lane) {}

  void answer() {
    grpc::Status status;
    try {
      // A call that waited on its lane past the client's deadline (or a server that stops) is
      // not run: a query would charge devices for an answer nobody takes.
      status = context_.IsCancelled()
                   ? grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled")
                   : handler_(context_, request_, response_);
    } catch (const std::exception&) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
    } catch (...) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
    }
    {
      std::lock_guard lock(mutex_);
      phase_ = Phase::finished;
    }
    // An answer the client does not take within the lifetime is cancelled (the reaper's end()).
    registry_.renew(*this);
    if (status.ok())
      this->StartWriteAndFinish(&response_, grpc::WriteOptions(), status);
    else
      this->Finish(status);
  }

  grpc::CallbackServerContext& context_;  // valid until OnDone
  StreamRegistry& registry_;
  const Handler& handler_;  // the service's, which outlives its server
  CallLane* const lane_;
  std::mutex mutex_;
  Phase phase_ = Phase::waiting;
  bool cancelled_ = false;
  Request request_;
  Response response_;
};

}  // namespace cgp::transport::detail
