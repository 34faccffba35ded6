#include "cgp/transport/device_client.hpp"

#include <grpcpp/grpcpp.h>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/v1/service.grpc.pb.h"

namespace cgp::transport {

Status serve_device(const std::string& coordinator_address, const std::string& device_id,
                    client::Device& device) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(wire::kMaxMessageBytes));
  auto channel = grpc::CreateCustomChannel(coordinator_address, grpc::InsecureChannelCredentials(),
                                           arguments);
  auto stub = v1::DeviceGateway::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->Connect(&context);
  v1::DeviceToCoordinator hello;
  hello.mutable_hello()->set_device_id(device_id);
  hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
  if (!stream->Write(hello))
    return make_error(ErrorCode::invalid_argument, "coordinator",
                      "coordinator: cannot reach " + coordinator_address);
  v1::CoordinatorToDevice message;
  while (stream->Read(&message)) {
    if (!message.has_request()) {
      if (message.has_goodbye()) break;
      continue;  // Welcome
    }
    // The device sees exactly the bytes a coordinator sent: the same path as the C ABI.
    const std::string request = wire::serialize(message.request());
    const std::string reply = device.handle(
        {reinterpret_cast<const std::uint8_t*>(request.data()), request.size()});
    v1::DeviceToCoordinator out;
    if (!out.mutable_reply()->ParseFromString(reply) || !stream->Write(out)) break;
  }
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED &&
      status.error_code() != grpc::StatusCode::UNAVAILABLE)
    return make_error(ErrorCode::invalid_argument, "coordinator",
                      "coordinator: " + status.error_message());
  return {};
}

}  // namespace cgp::transport
