// The gRPC transport of a device's stream (DeviceGateway.Connect).
#include <grpcpp/grpcpp.h>

#include "cgp/common/validate.hpp"
#include "cgp/protocol/channel_settings.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "cgp/v1/device_gateway.grpc.pb.h"
#include "coordinator_stream.hpp"

namespace cgp::link::detail {
namespace {

// The channel's settings, with the name TLS checks (and SNI sends) when the device dials
// another address than its name's (DeviceConnection::connect_to).
grpc::ChannelArguments channel_arguments(const DialTarget& target) {
  grpc::ChannelArguments arguments = protocol::device_channel_arguments();
  std::string host, port;
  if (target.dial_address != target.name_address && split_address(target.name_address, host, port))
    arguments.SetSslTargetNameOverride(host);
  return arguments;
}

class GrpcStream final : public CoordinatorStream {
 public:
  explicit GrpcStream(const DeviceConnection& connection, const DialTarget& target)
      : channel_(grpc::CreateCustomChannel(
            target.dial_address,
            protocol::device_channel_credentials(connection.tls_root_certificate),
            channel_arguments(target))),
        stub_(v1::DeviceGateway::NewStub(channel_)),
        stream_(stub_->Connect(&context_)) {}

  bool write(const v1::DeviceToCoordinator& message) override { return stream_->Write(message); }
  bool read(v1::CoordinatorToDevice& message) override { return stream_->Read(&message); }
  void cancel() override { context_.TryCancel(); }
  Status finish(const std::string& peer) override {
    stream_->WritesDone();
    const grpc::Status status = stream_->Finish();
    const auto& trailing = context_.GetServerTrailingMetadata();
    if (auto it = trailing.find(protocol::kRetryAfterKey); it != trailing.end()) {
      // Decimal milliseconds, at most a day (a coordinator cannot park a device for good);
      // anything else is ignored: the device's own pace.
      const std::string text(it->second.data(), it->second.size());
      bool digits = !text.empty() && text.size() <= 10;
      for (char c : text) digits = digits && c >= '0' && c <= '9';
      if (digits)
        retry_after_ =
            std::chrono::milliseconds(std::min<std::uint64_t>(std::stoull(text), 86400000));
    }
    return ended_status(status, trailing, peer);
  }
  std::chrono::milliseconds retry_after() const override { return retry_after_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DeviceGateway::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::DeviceToCoordinator, v1::CoordinatorToDevice>>
      stream_;
  std::chrono::milliseconds retry_after_{0};
};

}  // namespace

Status ended_status(const grpc::Status& status,
                    const std::multimap<grpc::string_ref, grpc::string_ref>& trailing,
                    const std::string& peer) {
  if (status.ok() || status.error_code() == grpc::StatusCode::CANCELLED) return {};
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED)
    return make_error(ErrorCode::unauthenticated, "credential", "credential refused");
  return protocol::from_grpc_status(status, trailing, peer);
}

Expected<std::unique_ptr<CoordinatorStream>> dial_grpc(const DeviceConnection& connection) {
  // gRPC dials lazily: an unreachable coordinator shows as the first write failing.
  return std::unique_ptr<CoordinatorStream>(new GrpcStream(connection, dial_target(connection)));
}

}  // namespace cgp::link::detail
