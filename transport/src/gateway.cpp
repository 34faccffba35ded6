#include "cgp/transport/gateway.hpp"

#include <cmath>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"

#include "cgp/transport/log_format.hpp"
#include "connection_admission.hpp"
#include "gateway_impl.hpp"

namespace cgp::transport {
namespace detail {

void GatewayCore::attach(const std::shared_ptr<Session>& session) {
  std::shared_ptr<Session> replaced;
  {
    std::lock_guard lock(mutex);
    auto& slot = sessions[session->id()];
    replaced = std::move(slot);  // a reconnecting device replaces its old stream
    slot = session;
  }
  if (replaced) replaced->finish(grpc::Status::CANCELLED);
  {
    // A Hello admitted just before a revoke() whose lookup found no session yet.
    std::lock_guard lock(revoked_mutex);
    if (revoked.count(session->id()) > 0)
      session->finish({grpc::StatusCode::UNAUTHENTICATED, "this device was revoked"});
  }
  changed.notify_all();
  count([](GatewayCounters& c) { ++c.connects; });
  log("event=connect device=" + log_value(session->id()) +
      " sdk=" + log_value(session->sdk_version().empty() ? "unknown" : session->sdk_version()));
}

void GatewayCore::detach(const std::shared_ptr<Session>& session) {
  {
    std::lock_guard lock(mutex);
    auto it = sessions.find(session->id());
    if (it != sessions.end() && it->second == session) sessions.erase(it);
  }
  changed.notify_all();
  // A round waiting for this device stops waiting: its request went down with the stream.
  std::vector<std::shared_ptr<PendingRound>> open;
  {
    std::lock_guard lock(rounds_mutex);
    for (const auto& [key, round] : rounds) open.push_back(round);
  }
  for (const auto& round : open) {
    std::lock_guard lock(round->mutex);
    auto slot = round->slot_of_device.find(session->id());
    if (!round->open || slot == round->slot_of_device.end() || round->settled_slot[slot->second])
      continue;
    round->settled_slot[slot->second] = true;
    if (--round->awaited == 0) round->settled.notify_all();
  }
  count([](GatewayCounters& c) { ++c.disconnects; });
  log("event=disconnect device=" + log_value(session->id()));
}

void GatewayCore::deliver(const std::string& device_id, const v1::DeviceReply& reply) {
  std::shared_ptr<PendingRound> round;
  {
    std::lock_guard lock(rounds_mutex);
    auto it = rounds.find(
        std::pair<std::string_view, std::uint32_t>{reply.id().query_id(), reply.id().round()});
    if (it != rounds.end()) round = it->second;
  }
  bool taken = false;
  if (round) {
    std::lock_guard lock(round->mutex);
    auto slot = round->slot_of_device.find(device_id);
    if (round->open && slot != round->slot_of_device.end() && !round->settled_slot[slot->second]) {
      coordinator::record_reply(wire::reply_from_wire(reply), slot->second, *round->replies);
      round->settled_slot[slot->second] = true;
      taken = true;
      if (--round->awaited == 0) round->settled.notify_all();
    }
  }
  if (!taken) {
    count([](GatewayCounters& c) { ++c.late_replies; });
    log("event=late-reply device=" + log_value(device_id) + " query=" +
        log_value(reply.id().query_id()) + " round=" + std::to_string(reply.id().round()));
  }
}

std::shared_ptr<Session> GatewayCore::session(const std::string& id) const {
  std::lock_guard lock(mutex);
  auto it = sessions.find(id);
  return it == sessions.end() ? nullptr : it->second;
}

bool GatewayCore::open_round(const ReplyKey& key, const std::shared_ptr<PendingRound>& round) {
  std::lock_guard lock(rounds_mutex);
  return rounds.emplace(key, round).second;
}

void GatewayCore::close_round(const ReplyKey& key, PendingRound& round) {
  {
    std::lock_guard lock(rounds_mutex);
    rounds.erase(key);
  }
  std::lock_guard lock(round.mutex);
  round.open = false;
}

}  // namespace detail

struct DeviceGateway::Impl : detail::GatewayCore {};

namespace detail {

void GatewayCore::serve() {
  hello_sweeper = std::thread([this] {
    std::unique_lock lock(hello_mutex);
    while (!hello_stop) {
      hello_changed.wait_for(lock, std::clamp(hello_timeout / 4, std::chrono::milliseconds(1),
                                              std::chrono::milliseconds(1000)));
      const auto now = std::chrono::steady_clock::now();
      std::vector<std::shared_ptr<Session>> expired;
      for (auto it = awaiting_hello.begin(); it != awaiting_hello.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        if (auto session = it->second.session.lock()) expired.push_back(std::move(session));
        forget_pending(it++);
      }
      lock.unlock();
      for (const auto& session : expired) {
        count([](GatewayCounters& c) { ++c.refused_connections; });
        log("event=refused reason=no-hello-in-time");
        session->finish({grpc::StatusCode::DEADLINE_EXCEEDED, "no Hello within the time allowed"});
      }
      expired.clear();  // the last owner may be here: release outside the lock
      lock.lock();
    }
  });
  for (auto& queue : queues) {
    // A few listeners per queue, so that a crowd of devices connecting is accepted quickly.
    for (int i = 0; i < 4; ++i) std::make_shared<Session>(*this, *queue)->listen();
    queue_threads.emplace_back([q = queue.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) {
        auto* t = static_cast<Session::Tag*>(tag);
        t->session->on_event(t->op, ok);
      }
    });
  }
}

bool GatewayCore::await_hello(const std::shared_ptr<Session>& session, std::string address) {
  {
    std::lock_guard lock(hello_mutex);
    auto& pending = pending_per_address[address];
    if (awaiting_hello.size() < limits.max_pending_streams &&
        pending < limits.max_pending_streams_per_address) {
      ++pending;
      awaiting_hello[session.get()] = {session, std::chrono::steady_clock::now() + hello_timeout,
                                       std::move(address)};
      return true;
    }
    if (pending == 0) pending_per_address.erase(address);
  }
  count([](GatewayCounters& c) {
    ++c.refused_connections;
    ++c.refused_pending_streams;
  });
  log("event=refused reason=pending-streams peer=" + log_value(address));
  return false;
}

void GatewayCore::forget_pending(std::unordered_map<const Session*, AwaitingHello>::iterator it) {
  auto pending = pending_per_address.find(it->second.address);
  if (pending != pending_per_address.end() && --pending->second == 0)
    pending_per_address.erase(pending);
  awaiting_hello.erase(it);
}

void GatewayCore::hello_done(const Session* session) {
  std::lock_guard lock(hello_mutex);
  if (auto it = awaiting_hello.find(session); it != awaiting_hello.end()) forget_pending(it);
}

void GatewayCore::shutdown() {
  // Probes see NOT_SERVING while the streams are ended, so that a load balancer drains first.
  if (auto* health = server ? server->GetHealthCheckService() : nullptr) health->Shutdown();
  if (admission) admission->stop();  // no new connections while the streams are ended
  {
    std::lock_guard lock(hello_mutex);
    hello_stop = true;
  }
  hello_changed.notify_all();
  if (hello_sweeper.joinable()) hello_sweeper.join();
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(mutex);
    for (const auto& [id, session] : sessions) open.push_back(session);
  }
  for (const auto& session : open) session->finish(grpc::Status::OK);
  open.clear();
  // Calls still open after the grace period are cancelled; then the queues drain.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  for (auto& queue : queues) queue->Shutdown();
  for (auto& thread : queue_threads) thread.join();
}

}  // namespace detail

DeviceGateway::DeviceGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceGateway::~DeviceGateway() {
  impl_->shutdown();
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
  if (options.hello_timeout <= std::chrono::milliseconds(0))
    return make_error(ErrorCode::not_positive, "hello_timeout", "hello_timeout must be > 0");
  impl->hello_timeout = options.hello_timeout;
  for (const auto& [id, credential] : options.device_credentials)
    impl->credential_digests[id] = sha256_of(credential);
  for (const auto& [id, digest] : options.device_credential_digests)
    impl->credential_digests[id] = digest;
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
  const ConnectionLimits& limits = options.limits;  // checked by ConnectionAdmission::listen
  impl->limits = limits;
  // The listening socket is ours, not gRPC's: caps per address and in all, and accept survives
  // running out of descriptors (connection_admission.hpp).
  auto* core = static_cast<detail::GatewayCore*>(impl.get());
  auto admission = detail::ConnectionAdmission::listen(
      options.address, limits, options.log, [core](detail::ConnectionRefusal why) {
        core->count([why](GatewayCounters& c) {
          ++c.refused_connections;
          switch (why) {
            case detail::ConnectionRefusal::total_cap:
              ++c.refused_total_cap;
              break;
            case detail::ConnectionRefusal::address_cap:
              ++c.refused_address_cap;
              break;
            case detail::ConnectionRefusal::descriptors:
              ++c.refused_descriptors;
              break;
          }
        });
      });
  if (!admission) return admission.error();
  impl->admission = std::move(*admission);
  impl->port = impl->admission->port();

  // Operators' hooks: grpc.health.v1 (no credential: load balancers and orchestrators probe it)
  // and server reflection (grpcurl lists and calls the services). Both are process-wide
  // switches in gRPC, set before the builder is made.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  auto to_int = [](std::chrono::milliseconds ms) {
    return static_cast<int>(std::min<std::int64_t>(ms.count(), INT32_MAX));
  };
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             to_int(limits.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, to_int(limits.idle_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(limits.max_streams_per_connection));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, to_int(limits.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, to_int(limits.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Clients (cgp's device and analyst) ping every keepalive_time: allow that and a margin, so
  // that their pings are not taken as abuse (GOAWAY "too_many_pings").
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      to_int(std::min(limits.keepalive_time / 2, std::chrono::milliseconds(10000))));
  auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      transport_credentials);
  // Oversized messages are refused by gRPC before they are parsed.
  builder.SetMaxReceiveMessageSize(static_cast<int>(wire::kMaxMessageBytes));
  builder.RegisterService(&impl->device_service);
  if (options.completion_queues == 0 || options.completion_queues > 256)
    return make_error(ErrorCode::out_of_range, "completion_queues",
                      "completion_queues must be 1..256");
  for (std::size_t q = 0; q < options.completion_queues; ++q)
    impl->queues.push_back(builder.AddCompletionQueue());
  for (const auto& make : options.extra_services) {
    impl->endpoints.push_back(make());
    builder.RegisterService(impl->endpoints.back().get());
  }
  impl->server = builder.BuildAndStart();
  if (!impl->server) {
    for (auto& queue : impl->queues) {
      queue->Shutdown();
      void* tag;
      bool ok;
      while (queue->Next(&tag, &ok)) {
      }
    }
    return make_error(ErrorCode::internal_error, "listen", "the gRPC server did not start");
  }
  if (auto* health = impl->server->GetHealthCheckService()) {
    health->SetServingStatus(true);
    health->SetServingStatus("cgp.v1.DeviceGateway", true);
  }
  impl->admission->start(std::move(acceptor));
  impl->serve();
  return std::unique_ptr<DeviceGateway>(new DeviceGateway(std::move(impl)));
}

int DeviceGateway::port() const noexcept {
  return impl_->port;
}

GatewayCounters DeviceGateway::counters() const {
  const std::size_t open = impl_->admission ? impl_->admission->open_connections() : 0;
  std::lock_guard lock(impl_->counters_mutex);
  GatewayCounters out = impl_->counts;
  out.open_connections = open;
  return out;
}

std::size_t DeviceGateway::max_connections() const noexcept {
  return impl_->admission->max_connections();
}

std::size_t DeviceGateway::connected() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->sessions.size();
}

void DeviceGateway::set_serving(const std::string& service, bool serving) {
  if (auto* health = impl_->server->GetHealthCheckService())
    health->SetServingStatus(service, serving);
}

bool DeviceGateway::revoke(const std::string& device_id) {
  {
    std::lock_guard lock(impl_->revoked_mutex);
    if (!impl_->revoked.insert(device_id).second) return false;
  }
  impl_->log("event=revoked device=" + log_value(device_id));
  if (auto session = impl_->session(device_id))
    session->finish({grpc::StatusCode::UNAUTHENTICATED, "this device was revoked"});
  return true;
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
  auto& core = *gateway_.impl_;
  const std::size_t asked = request.users.size();
  const std::size_t out_dim = request.statistic == StatisticKind::location ? dimension_ : 1;
  replies.resize(asked, out_dim);
  const auto began = std::chrono::steady_clock::now();
  const detail::ReplyKey key{request.query_id, request.round};
  auto round = std::make_shared<detail::PendingRound>();
  round->output_dimension = out_dim;
  round->replies = &replies;
  round->settled_slot.assign(asked, false);

  // Requests first, so that a fast reply finds its round open.
  std::vector<v1::CoordinatorToDevice> pushes(asked);
  std::vector<std::shared_ptr<detail::Session>> sessions(asked);
  {
    std::lock_guard lock(core.mutex);
    for (std::size_t k = 0; k < asked; ++k) {
      const auto user = request.users[k];
      if (user >= device_ids_.size()) {
        replies.kind[k] = ReplyKind::rejected;
        continue;
      }
      auto it = core.sessions.find(device_ids_[user]);
      if (it != core.sessions.end()) sessions[k] = it->second;  // else: not connected
    }
  }
  for (std::size_t k = 0; k < asked; ++k) {
    if (!sessions[k]) continue;
    auto built = coordinator::device_request_for(request, k);
    if (!built) {
      replies.kind[k] = ReplyKind::rejected;
      sessions[k].reset();
      continue;
    }
    *pushes[k].mutable_request() = wire::request_to_wire(*built);
    round->slot_of_device.emplace(device_ids_[request.users[k]], k);
    ++round->awaited;
  }
  std::uint64_t sent = 0;
  if (!core.open_round(key, round)) {
    // The same round is already in flight (a duplicated query id): nothing is sent.
    for (auto& s : sessions) s.reset();
    round->awaited = 0;
  }
  for (std::size_t k = 0; k < asked; ++k) {
    if (!sessions[k]) continue;
    if (sessions[k]->push(std::move(pushes[k]))) {
      ++sent;
      continue;
    }
    std::lock_guard lock(round->mutex);
    if (!round->settled_slot[k]) {
      round->settled_slot[k] = true;
      --round->awaited;
    }
  }
  // Collect until every asked device answered, went away, or the deadline passed: late or
  // missing devices are reported as no_answer.
  {
    std::unique_lock lock(round->mutex);
    round->settled.wait_until(lock, std::chrono::steady_clock::now() + round_deadline_,
                              [&] { return round->awaited == 0; });
  }
  core.close_round(key, *round);

  std::uint64_t answered = 0, unanswered = 0;
  for (auto kind : replies.kind) {
    answered += kind != ReplyKind::no_answer ? 1 : 0;
    unanswered += kind == ReplyKind::no_answer ? 1 : 0;
  }
  core.count([&](GatewayCounters& c) {
    ++c.rounds;
    c.requests += sent;
    c.replies += answered;
    c.unanswered += unanswered;
  });
  core.log("event=round query=" + log_value(request.query_id) +
           " round=" + std::to_string(request.round) + " asked=" + std::to_string(asked) +
           " replies=" + std::to_string(answered) + " unanswered=" + std::to_string(unanswered) +
           " ms=" +
           std::to_string(
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began)
                   .count()));
}

}  // namespace cgp::transport
