// The coordinator's side of cgp.v1.GatewayControl: one stream per gateway on gRPC's sync API
// (a few gateways, not millions of devices), queries one at a time, collectives through the
// ReducerHub.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "cgp/common/validate.hpp"
#include "cgp/transport/gateway_control.hpp"
#include "cgp/v1/gateway_control.grpc.pb.h"
#include "reducer_hub.hpp"
#include "server_setup.hpp"

namespace cgp::transport {

namespace {

// The largest control message either side takes: a gateway's gather up, a merged gather down.
constexpr int kMaxControlMessageBytes = 64 << 20;

using Stream = grpc::ServerReaderWriter<v1::CoordinatorToGateway, v1::GatewayToCoordinator>;

Error gateway_error(ErrorCode code, const std::string& message) {
  return make_error(code, "gateway", "gateway: " + message);
}

}  // namespace

struct ControlServer::Impl final : v1::GatewayControl::Service {
  ControlServerOptions options;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  detail::ReducerHub hub;

  struct Gateway {
    AttachedGateway info;
    Stream* stream = nullptr;
    grpc::ServerContext* context = nullptr;
    std::mutex write_mutex;  // one Write at a time on a sync stream
    bool write(const v1::CoordinatorToGateway& message) {
      std::lock_guard lock(write_mutex);
      return stream->Write(message);
    }
  };
  // The query in progress: its participants by gateway id, and what each said at its end.
  struct Running {
    std::string query_id;
    std::vector<std::shared_ptr<Gateway>> participants;
    std::vector<std::optional<v1::QueryDone>> done;
    std::vector<char> lost;  // by participant: lost mid-query, the others finish without it
    std::optional<Error> failed;
    bool ended() const {
      for (std::size_t i = 0; i < done.size(); ++i)
        if (!done[i] && !lost[i]) return false;
      return true;
    }
  };

  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  std::map<std::string, std::shared_ptr<Gateway>> gateways;
  std::optional<Running> running;
  std::mutex query_mutex;  // run_query one at a time
  bool stopping = false;

  grpc::Status Attach(grpc::ServerContext* context, Stream* stream) override {
    v1::GatewayToCoordinator first;
    if (!stream->Read(&first) || !first.has_hello())
      return {grpc::StatusCode::INVALID_ARGUMENT, "the first message must be GatewayHello"};
    const v1::GatewayHello& hello = first.hello();
    if (hello.protocol_version() != 1)
      return {grpc::StatusCode::INVALID_ARGUMENT, "protocol_version must be 1"};
    if (!options.authenticate(hello.gateway_id(), hello.credential()))
      return {grpc::StatusCode::UNAUTHENTICATED, "gateway credential refused"};
    Outbox send;
    auto gateway = std::make_shared<Gateway>();
    gateway->info.gateway_id = hello.gateway_id();
    gateway->info.users = hello.users();
    gateway->info.fleet_users_loaded = hello.fleet_users_loaded();
    for (const auto& held : hello.shards())
      gateway->info.shards.emplace_back(held.shard(), held.epoch());
    gateway->stream = stream;
    gateway->context = context;
    {
      std::lock_guard lock(mutex);
      if (stopping) return {grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"};
      // The same gateway again (it restarted, or its old connection is dead but not yet
      // noticed): its credential was checked, so the new stream replaces the old one.
      if (const auto old = gateways.find(hello.gateway_id()); old != gateways.end()) {
        old->second->context->TryCancel();
        // Its run of the query in progress ended with its old stream.
        lose(*old->second, send);
      }
      gateways[hello.gateway_id()] = gateway;
    }
    send.flush();
    v1::CoordinatorToGateway attached;
    attached.mutable_attached()->set_coordinator_epoch(options.coordinator_epoch);
    gateway->write(attached);
    changed.notify_all();

    v1::GatewayToCoordinator message;
    while (!context->IsCancelled() && stream->Read(&message)) {
      if (message.has_collective()) {
        collective(*gateway, message.collective());
      } else if (message.has_done()) {
        finished(*gateway, message.done());
      }
    }
    {
      std::lock_guard lock(mutex);
      if (const auto found = gateways.find(gateway->info.gateway_id);
          found != gateways.end() && found->second == gateway)
        gateways.erase(found);
      lose(*gateway, send);
    }
    send.flush();
    {
      // The stream is gone with this handler: nothing may write to it after. Not under `mutex`:
      // a write blocked on this gateway must not hold up the others.
      std::lock_guard write_lock(gateway->write_mutex);
      gateway->stream = nullptr;
    }
    changed.notify_all();
    return grpc::Status::OK;
  }

  // With `mutex` held: the gateway's index among the running query's participants.
  std::optional<std::size_t> participant_index(const Gateway& gateway) const {
    for (std::size_t i = 0; i < running->participants.size(); ++i)
      if (running->participants[i].get() == &gateway) return i;
    return std::nullopt;
  }

  // Merged collectives to send once `mutex` is released: a write blocked on one gateway must
  // not hold up the others.
  struct Outbox {
    std::vector<std::pair<std::vector<std::shared_ptr<Gateway>>, v1::CoordinatorToGateway>> queue;
    void flush() {
      for (auto& [to, message] : queue)
        for (const auto& participant : to) write_if_attached(*participant, message);
      queue.clear();
    }
  };

  // With `mutex` held: `gateway`'s part of the running query is lost (its stream ended, or it
  // attached again). Unless it had finished, the others go on without it (ReducerHub::lose); the
  // collective its loss completes goes to them through `send`.
  void lose(const Gateway& gateway, Outbox& send) {
    if (!running || running->failed) return;
    const auto index = participant_index(gateway);
    if (!index || running->done[*index] || running->lost[*index]) return;
    running->lost[*index] = 1;
    auto merged = hub.lose(running->query_id, *index);
    if (!merged) {
      fail_running(merged.error());
      return;
    }
    if (*merged) {
      v1::CoordinatorToGateway message;
      *message.mutable_merged() = std::move(**merged);
      send.queue.emplace_back(running->participants, std::move(message));
    }
    changed.notify_all();
  }

  // With `mutex` held.
  void fail_running(Error error) {
    if (!running->failed) running->failed = std::move(error);
    changed.notify_all();
  }

  void collective(Gateway& gateway, const v1::Collective& contribution) {
    std::vector<std::shared_ptr<Gateway>> to;
    std::optional<v1::Collective> merged;
    {
      std::lock_guard lock(mutex);
      if (!running || running->query_id != contribution.query_id() || running->failed) return;
      const auto index = participant_index(gateway);
      // A lost participant's stream may still deliver what it had buffered: dropped.
      if (!index || running->lost[*index]) return;
      auto result = hub.contribute(*index, contribution);
      if (!result) {
        fail_running(result.error());
        return;
      }
      merged = std::move(*result);
      if (merged) to = running->participants;
    }
    if (!merged) return;
    v1::CoordinatorToGateway message;
    *message.mutable_merged() = std::move(*merged);
    for (const auto& participant : to) write_if_attached(*participant, message);
  }

  void finished(Gateway& gateway, const v1::QueryDone& done) {
    std::lock_guard lock(mutex);
    if (!running || running->query_id != done.query_id()) return;
    const auto index = participant_index(gateway);
    if (!index || running->lost[*index]) return;  // lost: its word no longer counts
    running->done[*index] = done;
    // A gateway that failed on its own, or ended while the others wait in a collective it never
    // joined, will not contribute again: the others must not wait for the deadline.
    if (done.error_code() != 0)
      fail_running(make_error(static_cast<ErrorCode>(done.error_code()), done.error_parameter(),
                              gateway.info.gateway_id + ": " + done.error_message()));
    else if (hub.waiting_for(done.query_id(), *index))
      fail_running(gateway_error(
          ErrorCode::internal_error,
          gateway.info.gateway_id + " ended the query while the others wait in a collective"));
    changed.notify_all();
  }

  static void write_if_attached(Gateway& gateway, const v1::CoordinatorToGateway& message) {
    std::lock_guard lock(gateway.write_mutex);
    if (gateway.stream) gateway.stream->Write(message);
  }
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
    if (impl_->running)
      impl_->fail_running(gateway_error(ErrorCode::unavailable, "the coordinator is stopping"));
  }
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
}

Expected<std::unique_ptr<ControlServer>> ControlServer::start(ControlServerOptions options) {
  if (!options.authenticate)
    return make_error(ErrorCode::missing_field, "authenticate",
                      "the control server needs a way to check gateway credentials");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  CGP_ASSIGN_OR_RETURN(auto credentials,
                       detail::server_credentials(impl->options.tls_certificate_chain,
                                                  impl->options.tls_private_key));
  grpc::ServerBuilder builder;
  // Gateways ping every minute on an idle stream (their channel settings): allow it (a ping
  // taken as abuse ends the stream with GOAWAY "too_many_pings"), and ping them too, so that a
  // gateway that vanished without a FIN is noticed.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  // A gateway's largest message is one gather (ReducerHub::kMaxGatherValues doubles).
  builder.SetMaxReceiveMessageSize(kMaxControlMessageBytes);
  builder.AddListeningPort(impl->options.listen_address, credentials, &impl->port);
  builder.RegisterService(impl.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0)
    return make_error(ErrorCode::unavailable, "listen",
                      "cannot listen on " + impl->options.listen_address);
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

int ControlServer::port() const noexcept {
  return impl_->port;
}

std::vector<AttachedGateway> ControlServer::gateways() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<AttachedGateway> out;
  for (const auto& [id, gateway] : impl_->gateways) out.push_back(gateway->info);
  return out;
}

bool ControlServer::wait_for_gateways(std::size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->gateways.size() >= count; });
}

Expected<std::vector<GatewayOutcome>> ControlServer::run_query(
    const std::string& query_id, const std::string& kind, const std::string& spec,
    std::uint64_t fleet_users, const ParticipantCheck& participants_fit) {
  std::lock_guard query_lock(impl_->query_mutex);
  Impl& impl = *impl_;
  std::vector<std::shared_ptr<Impl::Gateway>> participants;
  {
    std::lock_guard lock(impl.mutex);
    if (impl.stopping) return gateway_error(ErrorCode::unavailable, "the coordinator is stopping");
    for (const auto& [id, gateway] : impl.gateways) participants.push_back(gateway);
    if (participants.empty()) return gateway_error(ErrorCode::unavailable, "none is attached");
    if (participants_fit) {
      std::vector<AttachedGateway> attached;
      for (const auto& gateway : participants) attached.push_back(gateway->info);
      CGP_RETURN_IF_ERROR(participants_fit(attached));
    }
    CGP_RETURN_IF_ERROR(impl.hub.begin(query_id, participants.size()));
    impl.running = Impl::Running{query_id, participants, {}, {}, std::nullopt};
    impl.running->done.resize(participants.size());
    impl.running->lost.assign(participants.size(), 0);
  }
  v1::CoordinatorToGateway start;
  v1::QueryStart& query = *start.mutable_start();
  query.set_query_id(query_id);
  query.set_coordinator_epoch(impl.options.coordinator_epoch);
  query.set_kind(kind);
  query.set_spec(spec);
  query.set_participants(static_cast<std::uint32_t>(participants.size()));
  query.set_fleet_users(fleet_users);
  for (const auto& gateway : participants) Impl::write_if_attached(*gateway, start);

  std::unique_lock lock(impl.mutex);
  const bool ended = impl.changed.wait_for(lock, impl.options.query_deadline, [&] {
    return impl.running->failed || impl.running->ended();
  });
  if (!ended)
    impl.fail_running(
        gateway_error(ErrorCode::deadline_exceeded,
                      "query " + query_id + " did not finish on every gateway in time"));
  Impl::Running running = std::move(*impl.running);
  impl.running.reset();
  impl.hub.end(query_id);
  lock.unlock();

  if (running.failed) {
    v1::CoordinatorToGateway abort;
    abort.mutable_abort()->set_query_id(query_id);
    abort.mutable_abort()->set_error_code(static_cast<std::int32_t>(running.failed->code));
    abort.mutable_abort()->set_error_parameter(running.failed->parameter);
    abort.mutable_abort()->set_error_message(running.failed->message);
    for (const auto& gateway : running.participants) Impl::write_if_attached(*gateway, abort);
    return *running.failed;
  }
  std::vector<GatewayOutcome> outcomes;
  for (std::size_t i = 0; i < running.participants.size(); ++i) {
    const AttachedGateway& info = running.participants[i]->info;
    if (running.lost[i]) {
      outcomes.push_back(
          {info, gateway_error(ErrorCode::unavailable, info.gateway_id + " was lost mid-query"),
           true});
      continue;
    }
    const v1::QueryDone& done = *running.done[i];
    GatewayOutcome outcome{info, done.result(), false};
    if (done.error_code() != 0)
      outcome.result = make_error(static_cast<ErrorCode>(done.error_code()), done.error_parameter(),
                                  done.error_message());
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

}  // namespace cgp::transport
