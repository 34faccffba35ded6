#include "cgp/transport/gateway.hpp"

#include <grpcpp/grpcpp.h>
#include <sodium.h>

#include <array>

#include <condition_variable>
#include <map>
#include <mutex>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/v1/service.grpc.pb.h"

namespace cgp::transport {
namespace {

using Stream = grpc::ServerReaderWriter<v1::CoordinatorToDevice, v1::DeviceToCoordinator>;
using ReplyKey = std::pair<std::string, std::uint32_t>;

// One connected device: its stream, and the replies it sent that a round has not taken yet.
struct Session {
  Stream* stream = nullptr;
  std::mutex write_mutex;
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<ReplyKey, v1::DeviceReply> replies;
  bool closed = false;

  bool write(const v1::CoordinatorToDevice& message) {
    std::lock_guard lock(write_mutex);
    return stream->Write(message);
  }
};

}  // namespace

struct DeviceGateway::Impl final : public v1::DeviceGateway::Service {
  std::unique_ptr<grpc::Server> server;
  // device id -> SHA-256 of its credential (credentials themselves are not kept).
  std::map<std::string, std::array<unsigned char, crypto_hash_sha256_BYTES>> credential_digests;
  int port = 0;
  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  std::map<std::string, std::shared_ptr<Session>> sessions;
  std::function<void(const std::string&)> log_sink;
  mutable std::mutex counters_mutex;
  GatewayCounters counts;

  void log(const std::string& line) const {
    if (log_sink) log_sink(line);
  }
  template <class Update>
  void count(Update&& update) {
    std::lock_guard lock(counters_mutex);
    update(counts);
  }

  std::shared_ptr<Session> session(const std::string& id) const {
    std::lock_guard lock(mutex);
    auto it = sessions.find(id);
    return it == sessions.end() ? nullptr : it->second;
  }

  grpc::Status Connect(grpc::ServerContext*, Stream* stream) override {
    v1::DeviceToCoordinator message;
    if (!stream->Read(&message) || !message.has_hello()) {
      count([](GatewayCounters& c) { ++c.refused_connections; });
      log("event=refused reason=no-hello");
      return {grpc::StatusCode::INVALID_ARGUMENT, "the first message must be Hello"};
    }
    const std::string id = message.hello().device_id();
    if (id.empty() || id.size() > wire::kMaxIdBytes)
      return {grpc::StatusCode::INVALID_ARGUMENT, "device_id must have 1 to 128 bytes"};
    if (!credential_digests.empty()) {
      // Binding the stream to the id whose credential it presented: a device cannot answer for
      // another id, since replies are taken only from that id's stream.
      const std::string& credential = message.hello().credential();
      if (credential.size() > wire::kMaxCredentialBytes) {
        count([](GatewayCounters& c) { ++c.refused_connections; });
        log("event=refused reason=credential device=" + id);
        return {grpc::StatusCode::UNAUTHENTICATED, "credential refused"};
      }
      std::array<unsigned char, crypto_hash_sha256_BYTES> digest;
      crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(credential.data()),
                         credential.size());
      auto expected = credential_digests.find(id);
      if (expected == credential_digests.end() ||
          sodium_memcmp(expected->second.data(), digest.data(), digest.size()) != 0) {
        count([](GatewayCounters& c) { ++c.refused_connections; });
        log("event=refused reason=credential device=" + id);
        return {grpc::StatusCode::UNAUTHENTICATED, "credential refused"};
      }
    }
    auto current = std::make_shared<Session>();
    current->stream = stream;
    v1::CoordinatorToDevice welcome;
    welcome.mutable_welcome()->set_protocol_version(wire::kProtocolVersion);
    if (!stream->Write(welcome)) return {grpc::StatusCode::UNAVAILABLE, "device went away"};
    {
      std::lock_guard lock(mutex);
      sessions[id] = current;  // a reconnecting device replaces its old stream
    }
    changed.notify_all();
    count([](GatewayCounters& c) { ++c.connects; });
    log("event=connect device=" + id);
    while (stream->Read(&message)) {
      if (message.has_reply()) {
        const auto& reply = message.reply();
        std::lock_guard lock(current->mutex);
        current->replies[{reply.id().query_id(), reply.id().round()}] = reply;
        current->arrived.notify_all();
      } else if (message.has_goodbye()) {
        break;
      }
    }
    {
      std::lock_guard lock(current->mutex);
      current->closed = true;
      current->arrived.notify_all();
    }
    {
      std::lock_guard lock(mutex);
      auto it = sessions.find(id);
      if (it != sessions.end() && it->second == current) sessions.erase(it);
    }
    changed.notify_all();
    count([](GatewayCounters& c) { ++c.disconnects; });
    log("event=disconnect device=" + id);
    return grpc::Status::OK;
  }
};

DeviceGateway::DeviceGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceGateway::~DeviceGateway() {
  // Ends every device stream: their Read calls return and their handlers finish.
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

Expected<std::unique_ptr<DeviceGateway>> DeviceGateway::start(const std::string& address) {
  GatewayOptions options;
  options.address = address;
  return start(options);
}

Expected<std::unique_ptr<DeviceGateway>> DeviceGateway::start(const GatewayOptions& options) {
  if (sodium_init() < 0)
    return make_error(ErrorCode::invalid_argument, "credentials", "libsodium cannot initialise");
  auto impl = std::make_unique<Impl>();
  impl->log_sink = options.log;
  for (const auto& [id, credential] : options.device_credentials) {
    auto& digest = impl->credential_digests[id];
    crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(credential.data()),
                       credential.size());
  }
  std::shared_ptr<grpc::ServerCredentials> transport_credentials;
  if (options.tls_certificate_chain.empty() != options.tls_private_key.empty())
    return make_error(ErrorCode::missing_field, "tls",
                      "TLS needs both a certificate chain and a private key");
  if (options.tls_certificate_chain.empty()) {
    transport_credentials = grpc::InsecureServerCredentials();
  } else {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({options.tls_private_key, options.tls_certificate_chain});
    transport_credentials = grpc::SslServerCredentials(ssl);
  }
  const std::string& address = options.address;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, transport_credentials, &impl->port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(wire::kMaxMessageBytes));
  builder.RegisterService(impl.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0)
    return make_error(ErrorCode::invalid_argument, "listen", "cannot listen on " + address);
  return std::unique_ptr<DeviceGateway>(new DeviceGateway(std::move(impl)));
}

int DeviceGateway::port() const noexcept {
  return impl_->port;
}

GatewayCounters DeviceGateway::counters() const {
  std::lock_guard lock(impl_->counters_mutex);
  return impl_->counts;
}

std::size_t DeviceGateway::connected() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->sessions.size();
}

bool DeviceGateway::wait_for_devices(std::size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->sessions.size() >= count; });
}

NetworkFleet::NetworkFleet(DeviceGateway& gateway, std::vector<std::string> device_ids,
                           std::size_t dimension, double initial_budget,
                           std::chrono::milliseconds round_deadline)
    : gateway_(gateway),
      device_ids_(std::move(device_ids)),
      dimension_(dimension),
      initial_budget_(initial_budget),
      round_deadline_(round_deadline) {}

void NetworkFleet::ask(const coordinator::RoundRequest& request,
                       coordinator::RoundReplies& replies) {
  using coordinator::ReplyKind;
  const std::size_t asked = request.users.size();
  const std::size_t out_dim = request.statistic == StatisticKind::location ? dimension_ : 1;
  replies.resize(asked, out_dim);
  std::vector<std::shared_ptr<Session>> waiting(asked);
  for (std::size_t k = 0; k < asked; ++k) {
    const auto user = request.users[k];
    if (user >= device_ids_.size()) {
      replies.kind[k] = ReplyKind::rejected;
      continue;
    }
    auto built = coordinator::device_request_for(request, k);
    if (!built) {
      replies.kind[k] = ReplyKind::rejected;
      continue;
    }
    auto session = gateway_.impl_->session(device_ids_[user]);
    if (!session) continue;  // not connected: no_answer
    v1::CoordinatorToDevice push;
    *push.mutable_request() = wire::request_to_wire(*built);
    if (session->write(push)) waiting[k] = std::move(session);
  }
  std::uint64_t sent = 0;
  for (const auto& w : waiting) sent += w ? 1 : 0;
  // Collect until the round's deadline: late or missing devices are reported as no_answer.
  const auto deadline = std::chrono::steady_clock::now() + round_deadline_;
  const ReplyKey key{request.query_id, request.round};
  for (std::size_t k = 0; k < asked; ++k) {
    auto& session = waiting[k];
    if (!session) continue;
    std::unique_lock lock(session->mutex);
    if (!session->arrived.wait_until(
            lock, deadline, [&] { return session->closed || session->replies.count(key) > 0; }))
      continue;
    auto it = session->replies.find(key);
    if (it == session->replies.end()) continue;
    const v1::DeviceReply reply = std::move(it->second);
    session->replies.erase(it);
    replies.remaining[k] = reply.remaining_budget();
    switch (reply.status()) {
      case v1::ANSWERED:
        if (static_cast<std::size_t>(reply.values_size()) != out_dim) {
          replies.kind[k] = ReplyKind::rejected;  // a malformed answer is not used
          break;
        }
        replies.kind[k] = ReplyKind::answered;
        replies.charged[k] = reply.charged_rho();
        std::copy(reply.values().begin(), reply.values().end(),
                  replies.values.begin() + static_cast<std::ptrdiff_t>(k * out_dim));
        break;
      case v1::REFUSED_BUDGET:
        replies.kind[k] = ReplyKind::refused;
        break;
      default:
        replies.kind[k] = ReplyKind::rejected;
        break;
    }
  }
  std::uint64_t answered = 0, unanswered = 0;
  for (auto kind : replies.kind) {
    answered += kind != ReplyKind::no_answer ? 1 : 0;
    unanswered += kind == ReplyKind::no_answer ? 1 : 0;
  }
  gateway_.impl_->count([&](GatewayCounters& c) {
    ++c.rounds;
    c.requests += sent;
    c.replies += answered;
    c.unanswered += unanswered;
  });
  gateway_.impl_->log("event=round query=" + request.query_id +
                      " round=" + std::to_string(request.round) +
                      " asked=" + std::to_string(asked) + " replies=" + std::to_string(answered) +
                      " unanswered=" + std::to_string(unanswered));
}

}  // namespace cgp::transport
