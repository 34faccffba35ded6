#include "cgp/transport/gateway.hpp"

#include "cgp/protocol/service_descriptors.hpp"

#include <cmath>

#include <sodium.h>
#include "cgp/common/parallel.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include "cgp/protocol/log_format.hpp"
#include "connection_admission.hpp"

#include "cgp/protocol/virtual_shard.hpp"
#include "gateway_impl.hpp"
#include "reply_causes.hpp"
#include "server_setup.hpp"

namespace cgp::transport {

using protocol::log_value;
using protocol::require_id;

namespace {

// A round's pushes go out in parts of at least this many devices, one part per core: below it
// one thread is as quick as handing parts out.
constexpr std::size_t kPushesPerPart = 256;

constexpr const char* kNoHelloInTime = "no Hello within the time allowed";

std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

namespace detail {

GatewayCore::GatewayCore(const GatewayOptions& options)
    : frame(options.frame),
      hellos({options.hello_timeout, options.limits.max_pending_streams,
              options.limits.max_pending_streams_per_address},
             [this](const std::shared_ptr<DeviceStream>& session) {
               counters.update([](GatewayCounters& c) { ++c.refused_connections; });
               log_refused("no-hello-in-time", "event=refused reason=no-hello-in-time");
               session->finish({grpc::StatusCode::DEADLINE_EXCEEDED, kNoHelloInTime});
             }),
      log_sink_(options.log) {}

grpc::Status GatewayCore::admit(const v1::Hello& hello,
                                std::optional<CredentialSha256>& admitted_with,
                                std::uint32_t& retry_after_ms) {
  const std::string& id = hello.device_id();
  auto refuse = [&](grpc::Status status, const char* reason) {
    counters.update([](GatewayCounters& c) { ++c.refused_connections; });
    log_refused(reason, std::string("event=refused reason=") + reason + " device=" + log_value(id));
    return status;
  };
  if (auto valid = require_id("device_id", id); !valid)
    return refuse({grpc::StatusCode::INVALID_ARGUMENT, valid.error().message}, "device-id");
  if (!hello.sdk_version().empty())
    if (auto valid = require_id("sdk_version", hello.sdk_version()); !valid)
      return refuse({grpc::StatusCode::INVALID_ARGUMENT, valid.error().message}, "sdk-version");
  if (hello.protocol_version() != wire::kProtocolVersion)
    return refuse({grpc::StatusCode::FAILED_PRECONDITION, "protocol_version must be 1"},
                  "protocol-version");
  // Read once, compared outside the registry's lock (a hash per Hello).
  const SessionRegistry::Admission expected = sessions.admission_of(id);
  if (virtual_shards > 0) {
    // Public: the shard follows from the id alone.
    const std::uint32_t shard = protocol::virtual_shard(id, virtual_shards);
    if (served_shard[shard] == 0) {
      retry_after_ms = GatewayOptions::kShardRetryAfterMs;
      return refuse({grpc::StatusCode::UNAVAILABLE,
                     "shard: shard " + std::to_string(shard) +
                         " is not served by this gateway (moving or reloading); come back after " +
                         std::to_string(retry_after_ms) + " ms"},
                    "shard-not-served");
    }
  }
  if (expected.revoked)
    return refuse({grpc::StatusCode::UNAUTHENTICATED, "credential refused"}, "revoked");
  if (previous_stop && previous_stop->window_ms > 0) {
    // Back before the time the previous stop gave it: told again, and nothing else (a device
    // that comes back at its time is admitted whatever it did before).
    // Only inside the window, by this clock: a clock set back (now before the stop) or a plan
    // from long ago refuses nobody, and no device is told to wait longer than the window.
    const ReconnectPlan& plan_before = *previous_stop;
    const std::uint64_t now = unix_ms();
    const auto slack = static_cast<std::uint64_t>(GatewayOptions::kEarlySlack.count());
    const bool inside =
        now >= plan_before.stopped_at_ms && now - plan_before.stopped_at_ms < plan_before.window_ms;
    const std::uint64_t due =
        inside ? plan_before.stopped_at_ms + plan_before.delay_ms(id) : 0;  // delay < window
    if (inside && now + slack < due) {
      retry_after_ms = static_cast<std::uint32_t>(
          std::min<std::uint64_t>({due - now, plan_before.window_ms, UINT32_MAX}));
      counters.update([](GatewayCounters& c) {
        ++c.refused_connections;
        ++c.refused_early;
      });
      log_refused("before-its-window",
                  "event=refused reason=before-its-window device=" + log_value(id) +
                      " retry_after_ms=" + std::to_string(retry_after_ms));
      return {grpc::StatusCode::UNAVAILABLE,
              "come back after " + std::to_string(retry_after_ms) +
                  " ms: this coordinator restarted and spreads its devices' returns"};
    }
  }
  admitted_with = expected.digest;
  if (!expected.checked) return grpc::Status::OK;
  // Binding the stream to the id whose credential it presented: a device cannot answer for
  // another id, since replies are taken as that id's only.
  if (!expected.digest || !credential_matches(hello.credential(), *expected.digest))
    return refuse({grpc::StatusCode::UNAUTHENTICATED, "credential refused"}, "credential");
  return grpc::Status::OK;
}

MessageOutcome GatewayCore::on_message(const std::shared_ptr<DeviceStream>& stream,
                                       const v1::DeviceToCoordinator& message) {
  MessageOutcome outcome;
  if (stream->id().empty()) {
    if (!hellos.done(stream.get())) {
      // The Hello timeout took this stream as its first message came: that refusal (counted,
      // the stream ended) stands, so that a stream is refused or admitted, never both.
      outcome.end = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, kNoHelloInTime);
      return outcome;
    }
    if (!message.has_hello()) {
      counters.update([](GatewayCounters& c) { ++c.refused_connections; });
      log_refused("no-hello", "event=refused reason=no-hello");
      outcome.end =
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be Hello");
      return outcome;
    }
    std::optional<CredentialSha256> admitted_with;
    if (auto admitted = admit(message.hello(), admitted_with, outcome.retry_after_ms);
        !admitted.ok()) {
      outcome.end = std::move(admitted);
      return outcome;
    }
    stream->introduce(message.hello().device_id(), message.hello().sdk_version());
    v1::CoordinatorToDevice welcome;
    welcome.mutable_welcome()->set_protocol_version(wire::kProtocolVersion);
    if (frame) *welcome.mutable_welcome()->mutable_frame() = wire::frame_to_wire(frame);
    stream->push(std::move(welcome));
    outcome.attached = attach(stream, admitted_with);
  } else if (message.has_reply()) {
    deliver(stream->id(), message.reply());
  } else if (message.has_watch_started()) {
    watches.started(stream->id(), message.watch_started());
  } else if (message.has_watch_alert()) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // Logged only when the board takes it: a device cannot fill the log with made-up watches.
    if (watches.alerted(stream->id(), message.watch_alert(), now))
      log("event=watch-alert device=" + log_value(stream->id()) +
          " watch=" + log_value(message.watch_alert().watch_id()) +
          " tick=" + std::to_string(message.watch_alert().tick()));
  } else if (message.has_goodbye()) {
    outcome.end = grpc::Status::OK;
  } else {
    // A second Hello, or a body this coordinator does not know (a newer device): ignored, so
    // that devices can add message kinds, and logged at the refusal log's rate.
    log_refused("ignored-message", "event=ignored-message device=" + log_value(stream->id()) +
                                       " body=" + std::to_string(message.body_case()));
  }
  return outcome;
}

grpc::Status GatewayCore::refuse_malformed(const DeviceStream& stream, const std::string& what) {
  if (stream.id().empty()) hellos.done(&stream);
  log_refused("malformed-message",
              "event=refused reason=malformed-message device=" +
                  log_value(stream.id().empty() ? std::string("-") : stream.id()) + " note=\"" +
                  what + "\"");
  return {grpc::StatusCode::INVALID_ARGUMENT, what};
}

bool GatewayCore::attach(const std::shared_ptr<DeviceStream>& session,
                         const std::optional<CredentialSha256>& admitted_with) {
  auto attached = sessions.attach(session, admitted_with);
  if (attached.revoked || attached.credential_changed) {
    // Revoked, or given another credential, between its admission and now.
    const char* reason = attached.revoked ? "revoked" : "credential";
    counters.update([](GatewayCounters& c) { ++c.refused_connections; });
    log_refused(reason, std::string("event=refused reason=") + reason +
                            " device=" + log_value(session->id()));
    session->finish({grpc::StatusCode::UNAUTHENTICATED, "credential refused"});
    return false;
  }
  if (attached.replaced) attached.replaced->finish(grpc::Status::CANCELLED);
  counters.update([](GatewayCounters& c) { ++c.connects; });
  log("event=connect device=" + log_value(session->id()) +
      " sdk=" + log_value(session->sdk_version().empty() ? "unknown" : session->sdk_version()));
  // Watches made while the device was away, and armed ones it resumes (a replay is free).
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (v1::WatchSpec& spec : watches.for_device(session->id(), now)) {
    v1::CoordinatorToDevice start;
    *start.mutable_start_watch() = std::move(spec);
    session->push(std::move(start));
  }
  // Requests of rounds that were waiting for this device to check in (check-in fleets).
  std::size_t delivered = 0;
  for (auto& letter : mailbox.collect(session->id())) {
    auto round = letter.round.lock();
    if (!round || !round->deliver_queued(session->id(), session.get())) continue;
    v1::CoordinatorToDevice message = letter.message;  // kept: the push may fail
    if (session->push(std::move(message))) {
      ++delivered;
    } else if (round->requeue(session->id(), session.get())) {
      // The stream closed under the push: nothing was sent, so the request waits for the
      // device's next check-in instead of counting as unanswered (and charged in the mirror).
      mailbox.post(session->id(), round, std::move(letter.message));
    }
  }
  if (delivered > 0) {
    counters.update([&](GatewayCounters& c) { c.requests += delivered; });
    log("event=check-in device=" + log_value(session->id()) +
        " requests=" + std::to_string(delivered));
  }
  return true;
}

void GatewayCore::detach(const std::shared_ptr<DeviceStream>& session) {
  sessions.detach(session);
  // A round waiting for this device stops waiting: its request went down with the stream.
  rounds.device_gone(session->id(), session.get());
  counters.update([](GatewayCounters& c) { ++c.disconnects; });
  log("event=disconnect device=" + log_value(session->id()));
}

void GatewayCore::deliver(const std::string& device_id, const v1::DeviceReply& reply) {
  const Delivery delivery = rounds.deliver(device_id, reply);
  if (!delivery.taken) counters.update([](GatewayCounters& c) { ++c.late_replies; });
  // Rate-limited per cause: a device sending made-up replies cannot flood the log.
  if (auto cause = reply_cause(device_id, reply, delivery)) log_refused(cause->reason, cause->line);
}

bool GatewayCore::await_hello(const std::shared_ptr<DeviceStream>& session,
                              const std::string& address) {
  if (hellos.await(session, address)) return true;
  counters.update([](GatewayCounters& c) {
    ++c.refused_connections;
    ++c.refused_pending_streams;
  });
  log_refused("pending-streams", "event=refused reason=pending-streams peer=" + log_value(address));
  return false;
}

bool GatewayCore::revoke(const std::string& device_id) {
  bool newly = false;
  auto connected = sessions.revoke(device_id, newly);
  if (newly) log("event=revoked device=" + log_value(device_id));
  if (connected) connected->finish({grpc::StatusCode::UNAUTHENTICATED, "this device was revoked"});
  return newly;
}

DeviceGateway::Enrolled GatewayCore::enrol(const std::string& device_id,
                                           const CredentialSha256& digest) {
  auto enrolment = sessions.enrol(device_id, digest);
  if (enrolment.ended)
    enrolment.ended->finish(
        {grpc::StatusCode::UNAUTHENTICATED, "this device's credential was changed"});
  if (enrolment.admitted) return DeviceGateway::Enrolled::admitted;
  return enrolment.replaced ? DeviceGateway::Enrolled::credential_changed
                            : DeviceGateway::Enrolled::unchanged;
}

void GatewayCore::serve() {
  hellos.start();
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

ReconnectPlan GatewayCore::shutdown() {
  if (stopped) return plan;
  stopped = true;
  // Probes see NOT_SERVING while the streams are ended, so that a load balancer drains first.
  if (health) health->shutdown();
  if (reflection) reflection->shutdown();
  if (admission) admission->stop();  // no new connections while the streams are ended
  if (frames) frames->stop_accepting();
  hellos.stop();
  const auto connected = sessions.all();
  // Pace steering: each device is told when to come back, spread over the window in which
  // reconnect_rate devices a second can return, so that a restart is not a reconnect storm.
  // The spread is public (a keyed hash of the id), nothing about a user. The stop's time is
  // taken before any Goodbye leaves: a device that waits as told is never early.
  plan.stopped_at_ms = unix_ms();
  plan.window_ms = reconnect_rate == 0 ? 0 : connected.size() * 1000 / reconnect_rate;
  randombytes_buf(plan.key.data(), plan.key.size());
  for (const auto& session : connected) {
    v1::CoordinatorToDevice goodbye;
    goodbye.mutable_goodbye()->set_reason("the coordinator is stopping");
    if (plan.window_ms > 0)
      goodbye.mutable_goodbye()->set_retry_after_ms(
          static_cast<std::uint32_t>(plan.delay_ms(session->id())));
    // The delay in the stream's end too (trailer, StreamEnd): a Goodbye queued behind a
    // request in flight may not get out.
    const auto delay = goodbye.goodbye().retry_after_ms();
    session->push(std::move(goodbye));
    session->finish(grpc::Status::OK, delay);
  }
  if (frames) frames->stop(std::chrono::milliseconds(2000));
  // Calls still open after the grace period are cancelled; then the queues drain.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Every call is over now, but their last events (a write's, a Finish's) may still be on the
  // queues, and handling one may start a Finish: the queues are shut down once every session
  // has let go (bounded: a session that never does is gRPC's bug, not a reason to hang).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (live_grpc_sessions.load(std::memory_order_acquire) > 0 &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (auto& queue : queues) queue->Shutdown();
  for (auto& thread : queue_threads) thread.join();
  return plan;
}

}  // namespace detail

struct DeviceGateway::Impl : detail::GatewayCore {
  using GatewayCore::GatewayCore;
};

DeviceGateway::DeviceGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceGateway::~DeviceGateway() {
  impl_->shutdown();
}

ReconnectPlan DeviceGateway::stop() {
  return impl_->shutdown();
}

std::uint64_t ReconnectPlan::delay_ms(std::string_view device_id) const {
  if (window_ms == 0) return 0;
  static_assert(crypto_shorthash_KEYBYTES == 16 && crypto_shorthash_BYTES == 8);
  std::array<unsigned char, crypto_shorthash_BYTES> hash{};
  crypto_shorthash(hash.data(), reinterpret_cast<const unsigned char*>(device_id.data()),
                   device_id.size(), key.data());
  std::uint64_t value = 0;
  for (unsigned char byte : hash) value = (value << 8) | byte;
  return value % window_ms;
}

Expected<std::unique_ptr<DeviceGateway>> DeviceGateway::start(const std::string& address) {
  GatewayOptions options;
  options.address = address;
  return start(options);
}

Expected<std::unique_ptr<DeviceGateway>> DeviceGateway::start(const GatewayOptions& options) {
  if (sodium_init() < 0)
    return make_error(ErrorCode::invalid_argument, "credentials", "libsodium cannot initialise");
  if (options.hello_timeout <= std::chrono::milliseconds(0))
    return make_error(ErrorCode::not_positive, "hello_timeout", "hello_timeout must be > 0");
  auto impl = std::make_unique<Impl>(options);
  // A kept watch that cannot be restored is logged and left out: it must not keep the
  // coordinator from starting.
  for (const std::string& kept : options.watches)
    if (auto restored = impl->watches.restore(kept); !restored)
      impl->log("event=state-error error=" + log_value(restored.error().message));
  impl->watches.set_observer(options.watch_changed);
  std::map<std::string, CredentialSha256> digests;
  for (const auto& [id, credential] : options.device_credentials)
    digests[id] = sha256_of(credential);
  for (const auto& [id, digest] : options.device_credential_digests) digests[id] = digest;
  impl->sessions.set_credentials(std::move(digests));
  auto transport_credentials =
      detail::server_credentials(options.tls_certificate_chain, options.tls_private_key);
  if (!transport_credentials) return transport_credentials.error();
  const ConnectionLimits& limits = options.limits;  // checked by ConnectionAdmission::listen
  // The listening socket is ours, not gRPC's: caps per address and in all, and accept survives
  // running out of descriptors (connection_admission.hpp).
  auto* core = static_cast<detail::GatewayCore*>(impl.get());
  auto admission = detail::ConnectionAdmission::listen(
      options.address, limits, options.log, [core](detail::ConnectionRefusal why) {
        core->counters.update([why](GatewayCounters& c) {
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

  impl->reconnect_rate = options.reconnect_rate;
  impl->previous_stop = options.previous_stop;
  if (options.virtual_shards > 0) {
    if (options.virtual_shards > protocol::kMaxVirtualShards)
      return make_error(
          ErrorCode::out_of_range, "virtual_shards",
          "virtual_shards must be at most " + std::to_string(protocol::kMaxVirtualShards));
    impl->virtual_shards = options.virtual_shards;
    impl->served_shard.assign(options.virtual_shards, 0);
    for (const std::uint32_t shard : options.served_shards) {
      if (shard >= options.virtual_shards)
        return make_error(ErrorCode::out_of_range, "served_shards",
                          "served_shards: shard " + std::to_string(shard) + " is not below " +
                              std::to_string(options.virtual_shards));
      impl->served_shard[shard] = 1;
    }
  }
  if (!options.frames_address.empty()) {
    auto frames = detail::FrameListener::start(
        *impl, options.frames_address, options.frame_loops, options.tls_certificate_chain,
        options.tls_private_key, limits, impl->admission->ledger());
    if (!frames) return frames.error();
    impl->frames = std::move(*frames);
  }
  // Operators' hooks: grpc.health.v1 (no credential: load balancers and orchestrators probe it)
  // and server reflection (grpcurl lists and calls the services), both our own so that their
  // streams are bounded (health_service.hpp). gRPC's default health service is a process-wide
  // switch: off.
  grpc::EnableDefaultHealthCheckService(false);
  std::vector<std::string> service_names = {protocol::device_gateway_descriptor().full_name()};
  for (const auto& extra : options.extra_services) service_names.push_back(extra.name);
  const auto refused_stream = [core = impl.get()](const std::string& reason) {
    core->log_refused(reason, "event=refused reason=" + reason);
  };
  impl->health = std::make_unique<detail::HealthService>(limits.health_watches,
                                                         limits.health_checks, refused_stream);
  std::vector<std::string> reflected = service_names;
  reflected.push_back(detail::HealthService::kServiceName);
  impl->reflection = std::make_unique<detail::ReflectionService>(
      limits.reflection_streams, std::move(reflected), refused_stream);
  grpc::ServerBuilder builder;
  detail::apply_limits(builder, limits);
  auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      *transport_credentials);
  builder.RegisterService(&impl->device_service);
  if (options.completion_queues == 0 || options.completion_queues > 256)
    return make_error(ErrorCode::out_of_range, "completion_queues",
                      "completion_queues must be 1..256");
  for (std::size_t q = 0; q < options.completion_queues; ++q)
    impl->queues.push_back(builder.AddCompletionQueue());
  for (const auto& extra : options.extra_services) {
    impl->endpoints.push_back(extra.make());
    builder.RegisterService(impl->endpoints.back().get());
  }
  builder.RegisterService(impl->health.get());
  builder.RegisterService(&impl->reflection->v1());
  builder.RegisterService(&impl->reflection->v1alpha());
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
  // Further services say SERVING themselves when they are ready (set_serving).
  impl->health->set_serving("", true);
  impl->health->set_serving(v1::DeviceGateway::service_full_name(), true);
  impl->admission->start(std::move(acceptor));
  impl->serve();
  if (impl->frames) impl->frames->start_accepting();
  return std::unique_ptr<DeviceGateway>(new DeviceGateway(std::move(impl)));
}

int DeviceGateway::port() const noexcept {
  return impl_->port;
}

int DeviceGateway::frames_port() const noexcept {
  return impl_->frames ? impl_->frames->port() : 0;
}

std::vector<RoundSummary> DeviceGateway::recent_rounds() const {
  std::lock_guard lock(impl_->recent_rounds_mutex);
  return {impl_->recent_rounds.begin(), impl_->recent_rounds.end()};
}

std::optional<RoundSummary> DeviceGateway::round_in_progress() const {
  std::lock_guard lock(impl_->recent_rounds_mutex);
  if (!impl_->waiting_round) return std::nullopt;
  RoundSummary now = impl_->waiting_summary;
  now.answered = now.sent - std::min<std::uint64_t>(now.sent, impl_->waiting_round->awaited());
  now.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                               impl_->waiting_since)
                         .count();
  return now;
}

GatewayCounters DeviceGateway::counters() const {
  GatewayCounters out = impl_->counters.snapshot();
  // Both device ports share one ledger: its count is every open connection.
  out.open_connections = impl_->admission ? impl_->admission->open_connections() : 0;
  return out;
}

std::size_t DeviceGateway::max_connections() const noexcept {
  return impl_->admission->max_connections();
}

std::size_t DeviceGateway::connected() const {
  return impl_->sessions.size();
}

void DeviceGateway::set_serving(const std::string& service, bool serving) {
  impl_->health->set_serving(service, serving);
}

void DeviceGateway::drain_health() {
  impl_->health->drain();
}

bool DeviceGateway::revoke(const std::string& device_id) {
  return impl_->revoke(device_id);
}

DeviceGateway::Enrolled DeviceGateway::enrol(const std::string& device_id,
                                             const CredentialSha256& digest) {
  return impl_->enrol(device_id, digest);
}

Status DeviceGateway::start_watch(
    const v1::WatchSpec& spec, const std::vector<std::pair<std::uint32_t, std::string>>& devices) {
  CGP_RETURN_IF_ERROR(impl_->watches.add(spec, devices));
  v1::CoordinatorToDevice start;
  *start.mutable_start_watch() = spec;
  for (const auto& [user, id] : devices) {
    if (auto session = impl_->sessions.find(id)) session->push(start);
  }
  impl_->log("event=watch watch=" + log_value(spec.watch_id()) +
             " devices=" + std::to_string(devices.size()));
  return {};
}

Expected<v1::WatchReport> DeviceGateway::watch_report(const std::string& watch_id) const {
  return impl_->watches.report(watch_id);
}

bool DeviceGateway::wait_for_devices(std::size_t count, std::chrono::milliseconds timeout) const {
  return impl_->sessions.wait_for(count, timeout);
}

NetworkFleet::NetworkFleet(DeviceGateway& gateway, std::vector<std::string> device_ids,
                           std::size_t dimension, double initial_budget,
                           std::chrono::milliseconds round_deadline)
    : gateway_(gateway),
      device_ids_(std::move(device_ids)),
      dimension_(dimension),
      initial_budget_(initial_budget),
      round_deadline_(round_deadline) {}

void NetworkFleet::add_devices(std::vector<std::string> device_ids) {
  device_ids_.insert(device_ids_.end(), std::make_move_iterator(device_ids.begin()),
                     std::make_move_iterator(device_ids.end()));
}

void NetworkFleet::ask(const coordinator::RoundRequest& request,
                       coordinator::RoundReplies& replies) {
  const std::size_t out_dim = request.statistic == StatisticKind::location ? dimension_ : 1;
  ++rounds_begun_;
  replies.resize(request.users.size(), out_dim);
  if (before_round_ && !before_round_(request).ok()) {
    std::fill(replies.kind.begin(), replies.kind.end(), coordinator::ReplyKind::not_delivered);
    return;
  }
  gateway_.run_round(request, device_ids_, check_in_, round_deadline_, replies);
}

void DeviceGateway::run_round(const coordinator::RoundRequest& request,
                              std::span<const std::string> device_ids, bool check_in,
                              std::chrono::milliseconds deadline,
                              coordinator::RoundReplies& replies) {
  using coordinator::ReplyKind;
  auto& core = *impl_;
  const std::size_t asked = request.users.size();
  const auto began = std::chrono::steady_clock::now();
  const detail::RoundTable::Key key{request.query_id, request.round};
  auto round = std::make_shared<detail::PendingRound>(replies, asked);

  // Requests first, so that a fast reply finds its round open.
  std::vector<std::shared_ptr<detail::DeviceStream>> sessions;
  core.sessions.find_many(
      asked,
      [&](std::size_t k) -> const std::string* {
        const auto user = request.users[k];
        return user < device_ids.size() ? &device_ids[user] : nullptr;
      },
      sessions);
  std::vector<v1::CoordinatorToDevice> pushes(asked);
  std::vector<std::size_t> queued;  // check-in fleets: slots whose device is not connected
  for (std::size_t k = 0; k < asked; ++k) {
    if (request.users[k] >= device_ids.size()) {
      replies.kind[k] = ReplyKind::rejected;
      continue;
    }
    if (!sessions[k] && !check_in) continue;  // not connected: no_answer
    auto built = coordinator::device_request_for(request, k);
    if (!built) {
      replies.kind[k] = ReplyKind::rejected;
      sessions[k].reset();
      continue;
    }
    built->set_frame(core.frame);
    if (!sessions[k]) {
      const std::string& id = device_ids[request.users[k]];
      if (!round->expect_queued(id, k)) {
        replies.kind[k] = ReplyKind::rejected;  // listed twice: asked once
        continue;
      }
      *pushes[k].mutable_request() = wire::request_to_wire(*built);
      queued.push_back(k);
      continue;
    }
    if (!round->expect(device_ids[request.users[k]], k, sessions[k].get())) {
      // The same device twice in one round (a user listed twice, or two users with one id):
      // asked once; the other slot is rejected instead of waiting out the deadline.
      replies.kind[k] = ReplyKind::rejected;
      sessions[k].reset();
      continue;
    }
    *pushes[k].mutable_request() = wire::request_to_wire(*built);
  }
  std::uint64_t sent = 0;
  const bool opened = core.rounds.open(key, round);
  if (!opened) {
    // The same round is already in flight (a duplicated query id): nothing is sent, and the
    // other query's round is left alone.
    for (auto& s : sessions) s.reset();
    queued.clear();
    round->give_up_all();
  }
  // Left for devices to collect when they check in (the round is open: a device that connects
  // from now on finds its request; one that connected in the instant since the lookup above
  // gets it at its next check-in within the window, else it is not_delivered, charged nothing).
  for (std::size_t k : queued)
    core.mailbox.post(device_ids[request.users[k]], round, std::move(pushes[k]));
  // Pushed from several threads: gRPC writes a message on the thread that hands it over when
  // the connection is idle — TLS encryption, the send syscall and, on loopback, the kernel's
  // receive path, ~80 µs a device. One thread pushing a round serially made its send time grow
  // with the fleet whatever the cores (~1.3 s a round at 16,000 devices); sessions lock their
  // own writes, so parts of the round go out side by side.
  std::atomic<std::uint64_t> pushed{0};
  parallel_chunks(
      asked, default_threads(),
      [&](std::size_t begin, std::size_t end, unsigned) {
        std::uint64_t mine = 0;
        for (std::size_t k = begin; k < end; ++k) {
          if (!sessions[k]) continue;
          if (sessions[k]->push(std::move(pushes[k])))
            ++mine;
          else
            round->give_up(k);
        }
        pushed.fetch_add(mine, std::memory_order_relaxed);
      },
      kPushesPerPart);
  sent = pushed.load();
  // Collect until every asked device answered, went away, or the deadline passed: late or
  // missing devices are reported as no_answer.
  const auto sent_at = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(core.recent_rounds_mutex);
    core.waiting_round = round;
    core.waiting_summary = RoundSummary{request.query_id, request.round, asked, sent};
    core.waiting_since = began;
  }
  std::size_t waiting_for = 0;
  const bool all_replied = round->wait_until(sent_at + deadline, waiting_for);
  const auto ended_at = std::chrono::steady_clock::now();
  if (opened) core.rounds.close(key, *round);
  if (!queued.empty()) core.mailbox.sweep();
  // Each device asked that is counted unanswered is named (rate-limited per cause): from the
  // round's count alone a team whose device misses every deadline could not tell which one.
  for (std::size_t k = 0; k < asked; ++k) {
    if (!sessions[k] || replies.kind[k] != ReplyKind::no_answer) continue;
    core.log_refused_built("reply-missing", [&] {
      return "event=reply-missing device=" + log_value(device_ids[request.users[k]]) +
             " query=" + log_value(request.query_id) + " round=" + std::to_string(request.round) +
             " note=\"no usable reply before the round ended (deadline, stream closed, or an "
             "answer it could not use)\"";
    });
  }

  std::uint64_t answered = 0, unanswered = 0, not_reached = 0, refused = 0, rejected = 0;
  for (auto kind : replies.kind) {
    const bool silent = kind == ReplyKind::no_answer || kind == ReplyKind::not_delivered;
    answered += silent ? 0 : 1;
    unanswered += kind == ReplyKind::no_answer ? 1 : 0;
    not_reached += kind == ReplyKind::not_delivered ? 1 : 0;
    refused += kind == ReplyKind::refused ? 1 : 0;
    rejected += kind == ReplyKind::rejected ? 1 : 0;
  }
  using Milliseconds = std::chrono::duration<double, std::milli>;
  const double send_ms = Milliseconds(sent_at - began).count();
  const double wait_ms = Milliseconds(ended_at - sent_at).count();
  core.counters.update([&](GatewayCounters& c) {
    ++c.rounds;
    c.requests += sent;
    c.replies += answered;
    c.unanswered += unanswered;
    if (!all_replied) ++c.rounds_to_deadline;
    c.round_wait_microseconds += static_cast<std::uint64_t>(wait_ms * 1000);
  });
  RoundSummary summary{request.query_id,
                       request.round,
                       asked,
                       sent,
                       answered,
                       refused,
                       rejected,
                       unanswered,
                       not_reached,
                       !all_replied,
                       Milliseconds(std::chrono::steady_clock::now() - began).count(),
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()};
  {
    std::lock_guard lock(core.recent_rounds_mutex);
    core.waiting_round.reset();
    if (core.recent_rounds.size() == kRecentRounds) core.recent_rounds.pop_front();
    core.recent_rounds.push_back(std::move(summary));
  }
  // What the round waited for, and why it ended: the last reply, or the deadline
  // with `waiting_for` devices still silent.
  core.log("event=round query=" + log_value(request.query_id) +
           " round=" + std::to_string(request.round) + " asked=" + std::to_string(asked) +
           " sent=" + std::to_string(sent) + " replies=" + std::to_string(answered) +
           " unanswered=" + std::to_string(unanswered) +
           (check_in ? " not_reached=" + std::to_string(not_reached) : std::string()) + " ended=" +
           (all_replied ? "replies" : "deadline") + " waiting_for=" + std::to_string(waiting_for) +
           " send_ms=" + std::to_string(send_ms) + " wait_ms=" + std::to_string(wait_ms) +
           " ms=" + std::to_string(Milliseconds(std::chrono::steady_clock::now() - began).count()));
}

}  // namespace cgp::transport
