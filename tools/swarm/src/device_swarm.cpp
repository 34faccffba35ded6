#include "cgp/swarm/device_swarm.hpp"

#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <thread>

#include "cgp/common/validate.hpp"
#include "cgp/protocol/channel_settings.hpp"
#include "swarm_core.hpp"

namespace cgp::swarm {
namespace {

class SwarmStream;

// The gRPC transport: each device on its own stream, streams_per_connection of them sharing a
// channel, spread over several completion queues, a thread each (see gateway_impl.hpp for why
// one queue does not scale with Debian's libgrpc).
class GrpcTransport final : public SwarmTransport {
 public:
  explicit GrpcTransport(SwarmCore& swarm);
  ~GrpcTransport() override;  // cancels every stream and waits for them to end
  void drop(std::size_t i) override;
  bool reconnect(std::size_t i) override;

  // Opens device i's stream. wait: first let the old stream end (reconnect after drop);
  // otherwise a device whose stream is open or opening is left alone.
  // Returns false if the wait for the old stream timed out.
  bool dial(std::size_t i, bool wait = false);
  void on_done(std::size_t i, bool was_welcomed, const grpc::Status& status);

  SwarmCore& swarm;

 private:
  void redial_loop(std::stop_token stop);

  std::vector<std::unique_ptr<SwarmStream>> streams_;  // a device's latest, under swarm.mutex
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<std::thread> queue_threads_;
  std::jthread redialer_;  // redials devices whose stream ended, with backoff
};

grpc::ByteBuffer buffer_of(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// One device's stream on gRPC's completion-queue API. All its events arrive on one queue
// thread, and only that thread starts its operations (TryCancel excepted, which gRPC allows
// from anywhere). Owned by its transport; done once the status is in and no write is in flight.
class SwarmStream {
 public:
  enum class Op : std::uint8_t { started, read, write, finished, alarm };
  struct Tag {
    SwarmStream* stream;
    Op op;
  };

  SwarmStream(GrpcTransport& transport, std::size_t index)
      : transport_(transport), swarm_(transport.swarm), index_(index), answerer_(swarm_, index) {}

  void start(grpc::GenericStub& stub, grpc::CompletionQueue& queue) {
    completion_queue_ = &queue;
    stream_ = stub.PrepareCall(&context_, "/cgp.v1.DeviceGateway/Connect", &queue);
    stream_->StartCall(&started_tag_);
  }
  void cancel() { context_.TryCancel(); }

  void on_event(Op op, bool ok) {
    switch (op) {
      case Op::started:
        if (!ok) return finish();
        send(buffer_of(hello_envelope(swarm_.members[index_]->spec)), false);
        reading_ = true;
        stream_->Read(&incoming_, &read_tag_);
        return;
      case Op::read:
        reading_ = false;
        if (!ok) return finish();  // the coordinator ended the stream
        on_message();
        reading_ = true;
        stream_->Read(&incoming_, &read_tag_);
        return;
      case Op::write:
        if (queue_.front().second && ok) ++swarm_.replies;
        queue_.pop_front();
        if (!ok) queue_.clear();
        if (queue_.empty())
          writing_ = false;
        else
          stream_->Write(queue_.front().first, &write_tag_);
        return maybe_done();
      case Op::finished:
        finished_ = true;
        if (alarm_set_) alarm_.Cancel();  // its event still comes, with ok = false
        return maybe_done();
      case Op::alarm:
        // Fired, or cancelled by start_watch to tick a new watch now (ok = false either way
        // when the stream is ending).
        alarm_set_ = false;
        if (!finishing_ && !finished_) tick_watches();
        return maybe_done();
    }
  }

 private:
  void on_message() {
    grpc::Slice bytes;
    int field = 0;
    std::string_view body;
    if (!incoming_.DumpToSingleSlice(&bytes).ok() ||
        !envelope_body({reinterpret_cast<const char*>(bytes.begin()), bytes.size()}, field, body))
      return;
    if (field == kBodyWelcome) {
      welcomed_ = true;
      swarm_.on_welcome(index_);
    } else if (field == kBodyRequest) {
      send(buffer_of(answerer_.answer_request(body)), true);
    } else if (field == kBodyStartWatch) {
      if (!answerer_.start_watch(body, send_) || finishing_) return;
      if (alarm_set_)
        alarm_.Cancel();  // its event comes at once and ticks the new watch with the others
      else
        tick_watches();
    }
  }

  // Ticks run on this stream's queue thread, woken by an alarm.
  void tick_watches() {
    const auto wait = answerer_.tick_watches(send_);
    if (!wait) return;
    alarm_set_ = true;
    alarm_.Set(
        completion_queue_,
        std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::duration<double>(*wait)),
        &alarm_tag_);
  }
  void send(grpc::ByteBuffer message, bool is_reply) {
    if (finishing_) return;
    queue_.emplace_back(std::move(message), is_reply);
    if (writing_) return;
    writing_ = true;
    stream_->Write(queue_.front().first, &write_tag_);
  }
  void finish() {
    if (finishing_) return;
    finishing_ = true;
    stream_->Finish(&status_, &finished_tag_);
  }
  void maybe_done() {
    if (finished_ && !writing_ && !reading_ && !alarm_set_ && !reported_) {
      reported_ = true;
      transport_.on_done(index_, welcomed_, status_);  // may destroy this stream: last statement
    }
  }

  GrpcTransport& transport_;
  SwarmCore& swarm_;
  const std::size_t index_;
  DeviceAnswerer answerer_;
  const DeviceAnswerer::Send send_ = [this](std::string envelope, bool is_reply) {
    send(buffer_of(envelope), is_reply);
  };
  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream_;
  Tag started_tag_{this, Op::started}, read_tag_{this, Op::read}, write_tag_{this, Op::write},
      finished_tag_{this, Op::finished}, alarm_tag_{this, Op::alarm};
  grpc::CompletionQueue* completion_queue_ = nullptr;
  grpc::Alarm alarm_;
  bool alarm_set_ = false;
  grpc::ByteBuffer incoming_;
  std::deque<std::pair<grpc::ByteBuffer, bool>> queue_;  // message, is a reply
  grpc::Status status_;
  bool reading_ = false, writing_ = false, finishing_ = false, finished_ = false;
  bool welcomed_ = false, reported_ = false;
};

GrpcTransport::GrpcTransport(SwarmCore& core) : swarm(core), streams_(core.members.size()) {
  const SwarmOptions& options = swarm.options;
  const auto credentials = protocol::device_channel_credentials(options.tls_root_certificate);
  const std::size_t connections =
      (swarm.members.size() + options.streams_per_connection - 1) / options.streams_per_connection;
  for (std::size_t c = 0; c < connections; ++c) {
    grpc::ChannelArguments arguments = protocol::device_channel_arguments();
    // gRPC's minimal filter stack: the swarm is a test harness talking to our own coordinator,
    // and the filters it drops (deadlines, message size, compression) cost ~20% of its CPU per
    // reply (bench/network_load.sh: 28 -> 23 µs). The coordinator keeps the full stack: it
    // refuses oversized messages before parsing.
    arguments.SetInt(GRPC_ARG_MINIMAL_STACK, 1);
    // Its own TCP connection per channel: otherwise equal channels share one.
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels_.push_back(
        grpc::CreateCustomChannel(options.coordinator_address, credentials, arguments));
    stubs_.push_back(std::make_unique<grpc::GenericStub>(channels_.back()));
  }
  const std::size_t queues = std::min(options.completion_queues, swarm.members.size());
  for (std::size_t q = 0; q < queues; ++q) {
    queues_.push_back(std::make_unique<grpc::CompletionQueue>());
    queue_threads_.emplace_back([queue = queues_.back().get()] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
        auto* t = static_cast<SwarmStream::Tag*>(tag);
        t->stream->on_event(t->op, ok);
      }
    });
  }
  for (std::size_t i = 0; i < swarm.members.size(); ++i) dial(i);
  redialer_ = std::jthread([this](std::stop_token stop) { redial_loop(stop); });
}

GrpcTransport::~GrpcTransport() {
  std::vector<SwarmStream*> open;
  {
    std::lock_guard lock(swarm.mutex);
    swarm.stopping = true;
    for (std::size_t i = 0; i < swarm.members.size(); ++i)
      if (!swarm.members[i]->done) open.push_back(streams_[i].get());
  }
  swarm.changed.notify_all();
  if (redialer_.joinable()) redialer_.join();
  for (auto* stream : open) stream->cancel();
  std::unique_lock lock(swarm.mutex);
  swarm.changed.wait(lock, [&] {
    for (const auto& member : swarm.members)
      if (!member->done) return false;
    return true;
  });
  lock.unlock();
  for (auto& queue : queues_) queue->Shutdown();
  for (auto& thread : queue_threads_) thread.join();
}

bool GrpcTransport::dial(std::size_t i, bool wait) {
  Member& member = *swarm.members[i];
  SwarmStream* stream = nullptr;
  {
    std::unique_lock lock(swarm.mutex);
    if (wait && !swarm.changed.wait_for(lock, std::chrono::seconds(30),
                                        [&] { return member.done || swarm.stopping; }))
      return false;
    if (swarm.stopping || !member.done) return true;
    streams_[i] = std::make_unique<SwarmStream>(*this, i);
    stream = streams_[i].get();
    member.done = false;
    member.welcomed = false;
    member.dialled = std::chrono::steady_clock::now();
  }
  stream->start(*stubs_[i / swarm.options.streams_per_connection], *queues_[i % queues_.size()]);
  return true;
}

void GrpcTransport::on_done(std::size_t i, bool was_welcomed, const grpc::Status& status) {
  const bool refused_credential = status.error_code() == grpc::StatusCode::UNAUTHENTICATED;
  if (refused_credential)
    ++swarm.refused;
  else if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED)
    ++swarm.lost;
  {
    std::lock_guard lock(swarm.mutex);
    if (was_welcomed) --swarm.welcomed;
    Member& member = *swarm.members[i];
    member.done = true;
    // A refused credential will not get better; anything else (a coordinator restart, a
    // network cut) is retried with exponential backoff from 100 ms to 5 s, reset by a Welcome.
    if (refused_credential) member.wanted = false;
    member.backoff = next_backoff(member.backoff, was_welcomed);
    member.next_dial = std::chrono::steady_clock::now() + member.backoff;
  }
  swarm.changed.notify_all();
}

void GrpcTransport::redial_loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::vector<std::size_t> due;
    std::vector<SwarmStream*> stalled;
    {
      std::unique_lock lock(swarm.mutex);
      swarm.changed.wait_for(lock, std::chrono::milliseconds(50));
      if (swarm.stopping) return;
      const auto now = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < swarm.members.size(); ++i) {
        const Member& m = *swarm.members[i];
        if (m.done && m.wanted && streams_[i] && m.next_dial <= now) due.push_back(i);
        if (!m.done && !m.welcomed && now - m.dialled > kWelcomeTimeout)
          stalled.push_back(streams_[i].get());
      }
    }
    // A cancelled stream ends through the queue like any other and is dialled again.
    for (auto* stream : stalled) stream->cancel();
    for (std::size_t i : due) dial(i);
  }
}

void GrpcTransport::drop(std::size_t i) {
  SwarmStream* stream = nullptr;
  {
    std::lock_guard lock(swarm.mutex);
    swarm.members[i]->wanted = false;  // down until reconnect(i)
    if (!swarm.members[i]->done) stream = streams_[i].get();
  }
  if (stream) stream->cancel();
}

bool GrpcTransport::reconnect(std::size_t i) {
  {
    std::lock_guard lock(swarm.mutex);
    swarm.members[i]->wanted = true;
  }
  return dial(i, true);
}

}  // namespace

struct DeviceSwarm::Impl {
  SwarmCore core;
  std::unique_ptr<SwarmTransport> transport;  // ended first: it uses the core
};

DeviceSwarm::DeviceSwarm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceSwarm::~DeviceSwarm() = default;

Expected<std::unique_ptr<DeviceSwarm>> DeviceSwarm::start(const SwarmOptions& options,
                                                          std::vector<SwarmMember> members) {
  if (members.empty())
    return make_error(ErrorCode::invalid_argument, "count", "a swarm needs at least one device");
  if (options.completion_queues == 0 || options.completion_queues > 256)
    return make_error(ErrorCode::out_of_range, "completion_queues", "must be 1..256");
  if (options.streams_per_connection == 0)
    return make_error(ErrorCode::invalid_argument, "streams_per_connection", "must be ≥ 1");
  auto impl = std::make_unique<Impl>();
  SwarmCore& core = impl->core;
  core.options = options;
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto device =
        client::Device::open_for_simulation(options.config, options.seed, options.first_stream + i);
    const auto& location = members[i].location;
    CGP_RETURN_IF_ERROR(device.register_component("location", location.size()));
    CGP_RETURN_IF_ERROR(device.set_component("location", location));
    core.members.push_back(
        std::unique_ptr<Member>(new Member{std::move(members[i]), std::move(device), {}}));
  }
  if (options.transport == link::DeviceTransport::frames) {
    auto transport = start_frame_transport(core);
    if (!transport) return transport.error();
    impl->transport = std::move(*transport);
  } else {
    impl->transport = std::make_unique<GrpcTransport>(core);
  }
  return std::unique_ptr<DeviceSwarm>(new DeviceSwarm(std::move(impl)));
}

std::size_t DeviceSwarm::size() const noexcept {
  return impl_->core.members.size();
}

std::size_t DeviceSwarm::connected() const {
  std::lock_guard lock(impl_->core.mutex);
  return impl_->core.welcomed;
}

bool DeviceSwarm::wait_connected(std::size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->core.mutex);
  return impl_->core.changed.wait_for(lock, timeout, [&] { return impl_->core.welcomed >= count; });
}

SwarmCounters DeviceSwarm::counters() const {
  const SwarmCore& core = impl_->core;
  return {core.requests.load(), core.replies.load(), core.refused.load(), core.lost.load(),
          core.welcomes.load()};
}

void DeviceSwarm::drop(std::size_t i) {
  if (i < impl_->core.members.size()) impl_->transport->drop(i);
}

bool DeviceSwarm::reconnect(std::size_t i) {
  if (i >= impl_->core.members.size()) return false;
  return impl_->transport->reconnect(i);
}

double DeviceSwarm::spent(std::size_t i) const {
  Member& member = *impl_->core.members.at(i);
  std::lock_guard lock(member.device_mutex);
  return member.device.spent();
}

}  // namespace cgp::swarm
