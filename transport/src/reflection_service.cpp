#include "reflection_service.hpp"

#include "header_time_service.hpp"  // refuse_unless_admitted

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <mutex>
#include <utility>

namespace cgp::transport::detail {

// The two versions of the protocol: the same messages under two packages.
struct ReflectionV1 {
  using Service = grpc::reflection::v1::ServerReflection;
  using Request = grpc::reflection::v1::ServerReflectionRequest;
  using Response = grpc::reflection::v1::ServerReflectionResponse;
};
struct ReflectionV1alpha {
  using Service = grpc::reflection::v1alpha::ServerReflection;
  using Request = grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = grpc::reflection::v1alpha::ServerReflectionResponse;
};

namespace {

// `file` (always: a client asked for it) and what it imports (each once per stream).
template <class Response>
void add_files(const google::protobuf::FileDescriptor* file, std::set<std::string>& sent,
               Response& out) {
  std::vector<const google::protobuf::FileDescriptor*> todo{file};
  sent.erase(file->name());
  while (!todo.empty()) {
    const auto* next = todo.back();
    todo.pop_back();
    if (!sent.insert(next->name()).second) continue;
    google::protobuf::FileDescriptorProto proto;
    next->CopyTo(&proto);
    out.mutable_file_descriptor_response()->add_file_descriptor_proto(proto.SerializeAsString());
    for (int i = 0; i < next->dependency_count(); ++i) todo.push_back(next->dependency(i));
  }
}

std::vector<std::string> with_reflection(std::vector<std::string> services) {
  services.push_back(ReflectionV1::Service::service_full_name());
  services.push_back(ReflectionV1alpha::Service::service_full_name());
  return services;
}

}  // namespace

template <class Version>
typename Version::Response ReflectionService::answer(const typename Version::Request& request,
                                                     std::set<std::string>& sent) const {
  using Request = typename Version::Request;
  typename Version::Response out;
  out.set_valid_host(request.host());
  *out.mutable_original_request() = request;
  auto error = [&out](grpc::StatusCode code, const std::string& message) {
    out.mutable_error_response()->set_error_code(static_cast<int>(code));
    out.mutable_error_response()->set_error_message(message);
  };
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  switch (request.message_request_case()) {
    case Request::kListServices:
      for (const auto& name : services_)
        out.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case Request::kFileContainingSymbol:
      if (const auto* file = pool->FindFileContainingSymbol(request.file_containing_symbol()))
        add_files(file, sent, out);
      else
        error(grpc::StatusCode::NOT_FOUND, "symbol not found");
      break;
    case Request::kFileByFilename:
      if (const auto* file = pool->FindFileByName(request.file_by_filename()))
        add_files(file, sent, out);
      else
        error(grpc::StatusCode::NOT_FOUND, "file not found");
      break;
    case Request::kFileContainingExtension:
    case Request::kAllExtensionNumbersOfType:
      error(grpc::StatusCode::UNIMPLEMENTED, "extensions are not served");
      break;
    case Request::MESSAGE_REQUEST_NOT_SET:
      error(grpc::StatusCode::INVALID_ARGUMENT, "the request asks nothing");
      break;
  }
  return out;
}

// One reflection stream: read a request, write its answer, read the next, until the client is
// done, the registry ends it (lifetime, shutdown) or an operation fails.
template <class Version>
class ReflectionService::Stream final
    : public grpc::ServerBidiReactor<typename Version::Request, typename Version::Response>,
      public BoundedStream {
 public:
  using Request = typename Version::Request;
  using Response = typename Version::Response;

  Stream(const ReflectionService& owner, StreamRegistry& registry,
         grpc::CallbackServerContext& context)
      : owner_(owner), registry_(registry), context_(context) {}

  void begin() {
    std::unique_lock lock(mutex_);
    if (!finishing_) read(lock);  // the registry may have ended it already
  }
  void end(const grpc::Status& status) override {
    std::unique_lock lock(mutex_);
    if (!finishing_) {
      finishing_ = true;
      final_ = status;
      return finish_unless_writing(lock);
    }
    // Asked again with a write still in flight: a client that never reads holds it; cancel.
    if (!writing_ || cancelled_) return;
    cancelled_ = true;
    lock.unlock();
    context_.TryCancel();
  }
  void OnReadDone(bool ok) override {
    std::unique_lock lock(mutex_);
    if (!ok && !finishing_) {  // the client is done (or gone)
      finishing_ = true;
      final_ = grpc::Status::OK;
    }
    if (finishing_) return finish_unless_writing(lock);
    if (request_.ByteSizeLong() > kMaxRequestBytes) {
      request_ = Request();  // not held until the stream goes
      finishing_ = true;
      final_ = grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          "a reflection request is at most " + std::to_string(kMaxRequestBytes) + " bytes");
      return finish_unless_writing(lock);
    }
    try {
      response_ = owner_.template answer<Version>(request_, sent_);
    } catch (const std::exception&) {  // out of memory: this stream ends, the process goes on
      finishing_ = true;
      final_ = grpc::Status(grpc::StatusCode::INTERNAL, "the answer could not be made");
      return finish_unless_writing(lock);
    }
    writing_ = true;
    lock.unlock();
    this->StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mutex_);
    writing_ = false;
    if (!ok && !finishing_) {
      finishing_ = true;
      final_ = grpc::Status::CANCELLED;
    }
    if (finishing_) return finish_unless_writing(lock);
    read(lock);
  }
  void OnCancel() override { end(grpc::Status::CANCELLED); }
  void OnDone() override {
    registry_.forget(*this);
    delete this;
  }

 private:
  void read(std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    this->StartRead(&request_);
  }
  // A read may be outstanding: Finish ends it (it completes with ok = false).
  void finish_unless_writing(std::unique_lock<std::mutex>& lock) {
    if (writing_ || finish_called_) return;
    finish_called_ = true;
    const grpc::Status status = final_;
    lock.unlock();
    this->Finish(status);
  }
  // Names and symbols are short (ours ~40 bytes); a 1 MB request would be held and echoed.
  static constexpr std::size_t kMaxRequestBytes = 1024;
  const ReflectionService& owner_;
  StreamRegistry& registry_;
  grpc::CallbackServerContext& context_;  // valid until OnDone
  std::mutex mutex_;
  Request request_;
  Response response_;           // the message in flight
  std::set<std::string> sent_;  // files sent on this stream
  bool writing_ = false, finishing_ = false, finish_called_ = false, cancelled_ = false;
  grpc::Status final_;
};

// One version's generated service: each call becomes a Stream admitted by the shared registry.
template <class Version>
class ReflectionService::Endpoint final : public Version::Service::CallbackService {
 public:
  using Request = typename Version::Request;
  using Response = typename Version::Response;

  explicit Endpoint(ReflectionService& owner) : owner_(owner) {}

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override {
    auto* stream = new Stream<Version>(owner_, owner_.streams_, *context);
    if (auto* refusal = refuse_unless_admitted<Request, Response>(
            stream, owner_.streams_, context->peer(), "reflection streams", owner_.refused_))
      return refusal;
    stream->begin();
    return stream;
  }

 private:
  ReflectionService& owner_;
};

ReflectionService::ReflectionService(StreamCaps caps, std::vector<std::string> services,
                                     std::function<void(const std::string&)> refused)
    : services_(with_reflection(std::move(services))),
      refused_(std::move(refused)),
      streams_(caps, "reflection"),
      v1_(std::make_unique<Endpoint<ReflectionV1>>(*this)),
      v1alpha_(std::make_unique<Endpoint<ReflectionV1alpha>>(*this)) {}

ReflectionService::~ReflectionService() = default;

grpc::Service& ReflectionService::v1() noexcept {
  return *v1_;
}

grpc::Service& ReflectionService::v1alpha() noexcept {
  return *v1alpha_;
}

void ReflectionService::shutdown() {
  streams_.end_all(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"));
}

}  // namespace cgp::transport::detail
