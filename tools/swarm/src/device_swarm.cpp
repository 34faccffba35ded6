#include "cgp/swarm/device_swarm.hpp"
#include "cgp/common/version.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/link/watch_admission.hpp"
#include "cgp/link/watch_schedule.hpp"
#include "cgp/protocol/channel_settings.hpp"
#include "cgp/v1/device_gateway.grpc.pb.h"

namespace cgp::swarm {
namespace {

class SwarmStream;

struct Member {
  SwarmMember spec;
  client::Device device;
  std::mutex device_mutex;  // an old stream may still be answering while a new one starts
  std::unique_ptr<SwarmStream> stream;
  bool done = true;    // the stream (if any) has ended
  bool wanted = true;  // redial when the stream ends (false after drop())
  std::chrono::steady_clock::time_point next_dial{};
  std::chrono::milliseconds backoff{0};
  std::chrono::steady_clock::time_point dialled{};  // when the current stream started
  bool welcomed = false;                            // the current stream got its Welcome
};

// A stream without a Welcome this long after dialling is cancelled and dialled again (a
// stalled connection must not keep a device away for good).
constexpr std::chrono::seconds kWelcomeTimeout{10};

}  // namespace

// The swarm's state; DeviceSwarm::Impl is this under the header's name.
struct SwarmCore {
  SwarmOptions options;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  std::vector<std::unique_ptr<Member>> members;
  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  std::size_t welcomed = 0;
  std::atomic<std::uint64_t> requests{0}, replies{0}, refused{0}, lost{0};
  // Streams spread over several completion queues, a thread each (see gateway_impl.hpp for
  // why one queue does not scale with Debian's libgrpc).
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  std::vector<std::thread> queue_threads;
  bool stopping = false;
  std::jthread redialer;  // redials devices whose stream ended, with backoff

  void redial_loop(std::stop_token stop);

  // Opens device i's stream. wait: first let the old stream end (reconnect after drop);
  // otherwise a device whose stream is open or opening is left alone.
  // Returns false if the wait for the old stream timed out.
  bool dial(std::size_t i, bool wait = false);
  void on_welcome(std::size_t i) {
    {
      std::lock_guard lock(mutex);
      ++welcomed;
      members[i]->welcomed = true;
    }
    changed.notify_all();
  }
  void on_done(std::size_t i, bool was_welcomed, const grpc::Status& status);
};

struct DeviceSwarm::Impl : SwarmCore {};

namespace {

// The swarm speaks cgp.v1 at the byte level: a request's bytes go to Device::handle as they
// came (the device parses them, exactly as over the C ABI), and the reply bytes it returns go
// out inside the envelope as they are. Parsing and re-serializing both cost the harness a
// fifth of its CPU per reply.
constexpr int kBodyWelcome = 1, kBodyRequest = 2, kBodyStartWatch = 4;  // CoordinatorToDevice
constexpr std::uint8_t kReplyTag = (2 << 3) | 2;  // DeviceToCoordinator.reply, length-delimited
constexpr std::uint8_t kWatchStartedTag = (4 << 3) | 2;  // DeviceToCoordinator.watch_started

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// DeviceToCoordinator{<field> = bytes}: tag, varint length, bytes.
std::string envelope_of(std::uint8_t tag, const std::string& bytes) {
  std::string envelope;
  envelope.reserve(bytes.size() + 6);
  envelope.push_back(static_cast<char>(tag));
  for (std::size_t n = bytes.size();; n >>= 7) {
    envelope.push_back(static_cast<char>(n < 0x80 ? n : (n & 0x7f) | 0x80));
    if (n < 0x80) break;
  }
  envelope += bytes;
  return envelope;
}

// The body of an envelope: its field number and bytes (which point into `bytes`).
bool envelope_body(const grpc::Slice& bytes, int& field, std::string_view& body) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(bytes.begin(), static_cast<int>(bytes.size()));
  field = 0;
  for (std::uint32_t tag; (tag = in.ReadTag()) != 0;) {
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    std::uint32_t length = 0;
    const void* data = nullptr;
    int available = 0;
    if (!in.ReadVarint32(&length) || !in.GetDirectBufferPointer(&data, &available) ||
        static_cast<std::uint32_t>(available) < length)
      return false;
    field = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    body = {static_cast<const char*>(data), length};
    in.Skip(static_cast<int>(length));
  }
  return field != 0;
}

grpc::ByteBuffer buffer_of(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// One device's stream on gRPC's completion-queue API. All its events arrive on one queue
// thread, and only that thread starts its operations (TryCancel excepted, which gRPC allows
// from anywhere). Owned by its Member; done once the status is in and no write is in flight.
class SwarmStream {
 public:
  enum class Op : std::uint8_t { started, read, write, finished, alarm };
  struct Tag {
    SwarmStream* stream;
    Op op;
  };

  SwarmStream(SwarmCore& swarm, std::size_t index) : swarm_(swarm), index_(index) {}

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
        {
          const Member& member = *swarm_.members[index_];
          v1::DeviceToCoordinator hello;
          hello.mutable_hello()->set_device_id(member.spec.id);
          hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
          hello.mutable_hello()->set_sdk_version(std::string(version_string()));
          hello.mutable_hello()->set_credential(member.spec.credential);
          send(buffer_of(hello.SerializeAsString()), false);
        }
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
    if (!incoming_.DumpToSingleSlice(&bytes).ok() || !envelope_body(bytes, field, body)) return;
    if (field == kBodyWelcome) {
      welcomed_ = true;
      swarm_.on_welcome(index_);
    } else if (field == kBodyRequest) {
      ++swarm_.requests;
      Member& member = *swarm_.members[index_];
      std::string reply;
      {
        std::lock_guard lock(member.device_mutex);
        reply =
            member.device.handle({reinterpret_cast<const std::uint8_t*>(body.data()), body.size()});
      }
      // DeviceToCoordinator{reply = <the device's bytes>}: tag, varint length, bytes.
      std::string envelope;
      envelope.reserve(reply.size() + 6);
      envelope.push_back(static_cast<char>(kReplyTag));
      for (std::size_t n = reply.size();; n >>= 7) {
        envelope.push_back(static_cast<char>(n < 0x80 ? n : (n & 0x7f) | 0x80));
        if (n < 0x80) break;
      }
      envelope += reply;
      send(buffer_of(envelope), true);
    } else if (field == kBodyStartWatch) {
      start_watch(body);
    }
  }

  // Watches run as on cgp-device (device_client.cpp): armed on the device, ticked on their
  // public schedule, one alert each. Ticks run on this stream's queue thread, woken by an alarm.
  void start_watch(std::string_view body) {
    Member& member = *swarm_.members[index_];
    link::WatchAnswer answer;
    {
      std::lock_guard lock(member.device_mutex);
      answer = link::answer_start_watch(
          member.device, {reinterpret_cast<const std::uint8_t*>(body.data()), body.size()},
          swarm_.options.watch_limits, watches_.size(), unix_now());
    }
    send(buffer_of(envelope_of(kWatchStartedTag, answer.started)), false);
    if (answer.recorded_alert() != 0) return send_alert(answer.watch_id, answer.recorded_alert());
    if (!answer.ticks()) return;
    watches_.add(answer.watch_id, answer.state->spec, answer.state->last_tick);
    if (finishing_) return;
    if (alarm_set_)
      alarm_.Cancel();  // its event comes at once and ticks the new watch with the others
    else
      tick_watches();
  }

  void send_alert(const std::string& watch_id, std::uint64_t tick) {
    v1::DeviceToCoordinator alert;
    alert.mutable_watch_alert()->set_watch_id(watch_id);
    alert.mutable_watch_alert()->set_tick(tick);
    send(buffer_of(alert.SerializeAsString()), false);
  }

  void tick_watches() {
    Member& member = *swarm_.members[index_];
    watches_.tick_due(unix_now(), [&](const std::string& id, std::uint64_t tick) {
      Expected<WatchTickStatus> status = WatchTickStatus::finished;
      {
        std::lock_guard lock(member.device_mutex);
        status = member.device.tick_watch(id, tick);
      }
      if (status && *status == WatchTickStatus::alert) send_alert(id, tick);
      return status && *status == WatchTickStatus::silent;
    });
    if (watches_.empty()) return;
    const auto wait =
        std::chrono::duration<double>(std::max(watches_.next_due(unix_now()) - unix_now(), 0.001));
    alarm_set_ = true;
    alarm_.Set(completion_queue_,
               std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::nanoseconds>(wait),
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
      swarm_.on_done(index_, welcomed_, status_);  // may destroy this stream: last statement
    }
  }

  SwarmCore& swarm_;
  const std::size_t index_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream_;
  Tag started_tag_{this, Op::started}, read_tag_{this, Op::read}, write_tag_{this, Op::write},
      finished_tag_{this, Op::finished}, alarm_tag_{this, Op::alarm};
  grpc::CompletionQueue* completion_queue_ = nullptr;
  grpc::Alarm alarm_;
  bool alarm_set_ = false;
  link::WatchSchedule watches_;
  grpc::ByteBuffer incoming_;
  std::deque<std::pair<grpc::ByteBuffer, bool>> queue_;  // message, is a reply
  grpc::Status status_;
  bool reading_ = false, writing_ = false, finishing_ = false, finished_ = false;
  bool welcomed_ = false, reported_ = false;
};

}  // namespace

bool SwarmCore::dial(std::size_t i, bool wait) {
  Member& member = *members[i];
  {
    std::unique_lock lock(mutex);
    if (wait &&
        !changed.wait_for(lock, std::chrono::seconds(30), [&] { return member.done || stopping; }))
      return false;
    if (stopping || !member.done) return true;
    member.stream = std::make_unique<SwarmStream>(*this, i);
    member.done = false;
    member.welcomed = false;
    member.dialled = std::chrono::steady_clock::now();
  }
  member.stream->start(*stubs[i / options.streams_per_connection], *queues[i % queues.size()]);
  return true;
}

void SwarmCore::on_done(std::size_t i, bool was_welcomed, const grpc::Status& status) {
  const bool refused_credential = status.error_code() == grpc::StatusCode::UNAUTHENTICATED;
  if (refused_credential)
    ++refused;
  else if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED)
    ++lost;
  {
    std::lock_guard lock(mutex);
    if (was_welcomed) --welcomed;
    Member& member = *members[i];
    member.done = true;
    // A refused credential will not get better; anything else (a coordinator restart, a
    // network cut) is retried with exponential backoff from 100 ms to 5 s, reset by a Welcome.
    if (refused_credential) member.wanted = false;
    member.backoff = was_welcomed ? std::chrono::milliseconds(100)
                                  : std::min<std::chrono::milliseconds>(
                                        std::max<std::chrono::milliseconds>(
                                            2 * member.backoff, std::chrono::milliseconds(100)),
                                        std::chrono::seconds(5));
    member.next_dial = std::chrono::steady_clock::now() + member.backoff;
  }
  changed.notify_all();
}

void SwarmCore::redial_loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::vector<std::size_t> due;
    std::vector<SwarmStream*> stalled;
    {
      std::unique_lock lock(mutex);
      changed.wait_for(lock, std::chrono::milliseconds(50));
      if (stopping) return;
      const auto now = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < members.size(); ++i) {
        const Member& m = *members[i];
        if (m.done && m.wanted && m.stream && m.next_dial <= now) due.push_back(i);
        if (!m.done && !m.welcomed && now - m.dialled > kWelcomeTimeout)
          stalled.push_back(m.stream.get());
      }
    }
    // A cancelled stream ends through the queue like any other and is dialled again.
    for (auto* stream : stalled) stream->cancel();
    for (std::size_t i : due) dial(i);
  }
}

DeviceSwarm::DeviceSwarm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceSwarm::~DeviceSwarm() {
  std::vector<SwarmStream*> open;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
    for (auto& member : impl_->members)
      if (!member->done) open.push_back(member->stream.get());
  }
  impl_->changed.notify_all();
  if (impl_->redialer.joinable()) impl_->redialer.join();
  for (auto* stream : open) stream->cancel();
  std::unique_lock lock(impl_->mutex);
  impl_->changed.wait(lock, [&] {
    for (const auto& member : impl_->members)
      if (!member->done) return false;
    return true;
  });
  lock.unlock();
  for (auto& queue : impl_->queues) queue->Shutdown();
  for (auto& thread : impl_->queue_threads) thread.join();
}

Expected<std::unique_ptr<DeviceSwarm>> DeviceSwarm::start(const SwarmOptions& options,
                                                          std::vector<SwarmMember> members) {
  if (members.empty())
    return make_error(ErrorCode::invalid_argument, "count", "a swarm needs at least one device");
  if (options.completion_queues == 0 || options.completion_queues > 256)
    return make_error(ErrorCode::out_of_range, "completion_queues", "must be 1..256");
  if (options.streams_per_connection == 0)
    return make_error(ErrorCode::invalid_argument, "streams_per_connection", "must be ≥ 1");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto device =
        client::Device::open_for_simulation(options.config, options.seed, options.first_stream + i);
    const auto& location = members[i].location;
    CGP_RETURN_IF_ERROR(device.register_component("location", location.size()));
    CGP_RETURN_IF_ERROR(device.set_component("location", location));
    impl->members.push_back(std::unique_ptr<Member>(
        new Member{std::move(members[i]), std::move(device), {}, nullptr, true}));
  }
  const auto credentials = protocol::device_channel_credentials(options.tls_root_certificate);
  const std::size_t connections =
      (impl->members.size() + options.streams_per_connection - 1) / options.streams_per_connection;
  for (std::size_t c = 0; c < connections; ++c) {
    grpc::ChannelArguments arguments = protocol::device_channel_arguments();
    // gRPC's minimal filter stack: the swarm is a test harness talking to our own coordinator,
    // and the filters it drops (deadlines, message size, compression) cost ~20% of its CPU per
    // reply (bench/network_load.sh: 28 -> 23 µs). The coordinator keeps the full stack: it
    // refuses oversized messages before parsing.
    arguments.SetInt(GRPC_ARG_MINIMAL_STACK, 1);
    // Its own TCP connection per channel: otherwise equal channels share one.
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    impl->channels.push_back(
        grpc::CreateCustomChannel(options.coordinator_address, credentials, arguments));
    impl->stubs.push_back(std::make_unique<grpc::GenericStub>(impl->channels.back()));
  }
  const std::size_t queues = std::min(options.completion_queues, impl->members.size());
  for (std::size_t q = 0; q < queues; ++q) {
    impl->queues.push_back(std::make_unique<grpc::CompletionQueue>());
    impl->queue_threads.emplace_back([queue = impl->queues.back().get()] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
        auto* t = static_cast<SwarmStream::Tag*>(tag);
        t->stream->on_event(t->op, ok);
      }
    });
  }
  for (std::size_t i = 0; i < impl->members.size(); ++i) impl->dial(i);
  impl->redialer =
      std::jthread([swarm = impl.get()](std::stop_token stop) { swarm->redial_loop(stop); });
  return std::unique_ptr<DeviceSwarm>(new DeviceSwarm(std::move(impl)));
}

std::size_t DeviceSwarm::size() const noexcept {
  return impl_->members.size();
}

std::size_t DeviceSwarm::connected() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->welcomed;
}

bool DeviceSwarm::wait_connected(std::size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->welcomed >= count; });
}

SwarmCounters DeviceSwarm::counters() const {
  return {impl_->requests.load(), impl_->replies.load(), impl_->refused.load(), impl_->lost.load()};
}

void DeviceSwarm::drop(std::size_t i) {
  SwarmStream* stream = nullptr;
  {
    std::lock_guard lock(impl_->mutex);
    if (i >= impl_->members.size()) return;
    impl_->members[i]->wanted = false;  // down until reconnect(i)
    if (!impl_->members[i]->done) stream = impl_->members[i]->stream.get();
  }
  if (stream) stream->cancel();
}

bool DeviceSwarm::reconnect(std::size_t i) {
  if (i >= impl_->members.size()) return false;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->members[i]->wanted = true;
  }
  return impl_->dial(i, true);
}

double DeviceSwarm::spent(std::size_t i) const {
  Member& member = *impl_->members.at(i);
  std::lock_guard lock(member.device_mutex);
  return member.device.spent();
}

}  // namespace cgp::swarm
