#include "cgp/transport/device_client.hpp"
#include "cgp/common/version.hpp"
#include "status_codec.hpp"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <thread>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/v1/service.grpc.pb.h"

namespace cgp::transport {

Status serve_device(const std::string& coordinator_address, const std::string& device_id,
                    client::Device& device) {
  return serve_device(DeviceConnection{coordinator_address, device_id, "", "", {}, {}}, device);
}

Status serve_device(const DeviceConnection& connection, client::Device& device) {
  const std::string& coordinator_address = connection.coordinator_address;
  const std::string& device_id = connection.device_id;
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(wire::kMaxMessageBytes));
  // The caller paces reconnects (cgp-device --reconnect: 100 ms to 5 s); gRPC's own backoff,
  // kept by the process-wide subchannel across calls, must not be slower (its default grows
  // to 2 minutes).
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  // Keepalive pings every minute on a quiet stream: NATs and load balancers drop idle TCP
  // flows silently, and a coordinator that vanished is noticed (ConnectionLimits).
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (connection.tls_root_certificate.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = connection.tls_root_certificate;
    credentials = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateCustomChannel(coordinator_address, credentials, arguments);
  auto stub = v1::DeviceGateway::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->Connect(&context);
  // A watchdog cancels the stream when the caller asks to stop (connection.stop), and when a
  // coordinator accepts the connection but never welcomes the device (a stalled connection, an
  // overloaded server), after 10 s, so that the caller can dial again.
  std::mutex watch_mutex;
  std::condition_variable_any watch_changed;
  bool welcomed = false, gave_up = false;
  std::stop_callback wake_on_stop(connection.stop, [&] {
    std::lock_guard lock(watch_mutex);
    watch_changed.notify_all();
  });
  std::jthread watchdog([&](std::stop_token done) {
    std::unique_lock lock(watch_mutex);
    const auto stopped = [&] { return connection.stop.stop_requested(); };
    if (!watch_changed.wait_for(lock, done, std::chrono::seconds(10),
                                [&] { return welcomed || stopped(); })) {
      if (done.stop_requested()) return;
      gave_up = true;
      context.TryCancel();
      return;
    }
    if (!stopped()) watch_changed.wait(lock, done, stopped);
    if (stopped()) context.TryCancel();
  });
  v1::DeviceToCoordinator hello;
  hello.mutable_hello()->set_device_id(device_id);
  hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
  hello.mutable_hello()->set_sdk_version(std::string(version_string()));
  hello.mutable_hello()->set_credential(connection.credential);
  if (!stream->Write(hello))
    return make_error(ErrorCode::unavailable, "coordinator",
                      "coordinator: cannot reach " + coordinator_address);
  v1::CoordinatorToDevice message;
  while (stream->Read(&message)) {
    if (!message.has_request()) {
      if (message.has_goodbye()) break;
      if (message.has_welcome()) {
        std::lock_guard lock(watch_mutex);
        welcomed = true;
        watch_changed.notify_all();
      }
      continue;
    }
    // The device sees exactly the bytes a coordinator sent: the same path as the C ABI.
    const std::string request = wire::serialize(message.request());
    const std::string reply =
        device.handle({reinterpret_cast<const std::uint8_t*>(request.data()), request.size()});
    if (connection.reply_delay.count() > 0) std::this_thread::sleep_for(connection.reply_delay);
    v1::DeviceToCoordinator out;
    if (!out.mutable_reply()->ParseFromString(reply) || !stream->Write(out)) break;
  }
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  watchdog.request_stop();
  watchdog.join();
  if (gave_up)
    return make_error(ErrorCode::deadline_exceeded, "coordinator",
                      "coordinator: no Welcome from " + coordinator_address + " within 10 s");
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED)
    return make_error(ErrorCode::unauthenticated, "credential",
                      "credential: the coordinator refused device " + device_id);
  if (connection.stop.stop_requested()) return {};
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED)
    return detail::from_grpc_status(status, context.GetServerTrailingMetadata(), "coordinator");
  return {};
}

}  // namespace cgp::transport
