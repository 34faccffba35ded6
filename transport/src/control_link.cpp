// A gateway's side of cgp.v1.GatewayControl: one stream to the coordinator, a reader thread, and
// a thread for the query in progress, whose collectives go up and wait for their merge.
#include <grpcpp/grpcpp.h>

#include <array>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "cgp/common/validate.hpp"
#include "cgp/protocol/channel_settings.hpp"
#include "cgp/transport/gateway_control.hpp"
#include "cgp/v1/gateway_control.grpc.pb.h"

namespace cgp::transport {

struct ControlLink::Impl {
  ControlLinkOptions options;
  QueryHandler handler;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::GatewayControl::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::GatewayToCoordinator, v1::CoordinatorToGateway>>
      stream;

  std::mutex write_mutex;
  std::mutex mutex;
  std::condition_variable changed;
  bool attached = false, ended = false;
  std::int64_t epoch = 0;
  grpc::Status end_status;
  // The query in progress: its id, merged collectives not yet taken, and whether it was aborted.
  std::string query_id;
  std::map<std::uint64_t, v1::Collective> merged;
  std::atomic<bool> aborted{false};
  std::atomic<std::uint64_t> queries_run{0};
  std::jthread query_thread, reader;

  bool write(const v1::GatewayToCoordinator& message) {
    std::lock_guard lock(write_mutex);
    return stream->Write(message);
  }

  void read_loop() {
    v1::CoordinatorToGateway message;
    while (stream->Read(&message)) {
      std::unique_lock lock(mutex);
      if (message.has_attached()) {
        attached = true;
        epoch = message.attached().coordinator_epoch();
      } else if (message.has_merged()) {
        if (message.merged().query_id() == query_id)
          merged[message.merged().sequence()] = message.merged();
      } else if (message.has_abort()) {
        if (message.abort().query_id() == query_id) aborted = true;
      } else if (message.has_start()) {
        lock.unlock();
        start_query(message.start());
        continue;
      }
      changed.notify_all();
    }
    const grpc::Status status = stream->Finish();
    std::lock_guard lock(mutex);
    ended = true;
    end_status = status;
    aborted = true;  // whatever runs has lost its coordinator
    changed.notify_all();
  }

  // On the reader thread: one query at a time (the coordinator runs them so); the previous
  // query's thread has finished by the time its QueryDone was sent.
  void start_query(const v1::QueryStart& start) {
    if (query_thread.joinable()) query_thread.join();
    {
      std::lock_guard lock(mutex);
      if (start.coordinator_epoch() < epoch) return;  // a command of an older coordinator
      query_id = start.query_id();
      merged.clear();
      aborted = false;
    }
    query_thread = std::jthread([this, start] { run_query(start); });
  }

  class NetworkReducer final : public coordinator::ShardReducer {
   public:
    NetworkReducer(Impl& link, std::string query_id)
        : link_(link), query_id_(std::move(query_id)) {}
    void sum(std::span<std::uint64_t> values) override { sum(values, false); }
    void tally(std::span<std::uint64_t, 2> values) override { sum(values, true); }
    // Sent with each later contribution: what the coordinator counts for this gateway's tallies
    // if it is lost.
    void note_decided(std::span<const std::uint64_t, 2> decided) override {
      decided_ = {decided[0], decided[1]};
      noted_ = true;
    }
    std::vector<double> gather(std::span<const double> local) override {
      v1::Collective up = collective(v1::COLLECTIVE_GATHER);
      up.mutable_values()->Add(local.begin(), local.end());
      const auto down = exchange(up);
      if (!down) return {local.begin(), local.end()};
      return {down->values().begin(), down->values().end()};
    }

   private:
    void sum(std::span<std::uint64_t> values, bool tally) {
      v1::Collective up = collective(v1::COLLECTIVE_SUM);
      up.set_tally(tally);
      up.mutable_sums()->Add(values.begin(), values.end());
      const auto down = exchange(up);
      if (!down) return;
      if (down->sums_size() != static_cast<int>(values.size())) {
        // Not the merge of this sum: the query cannot go on.
        link_.aborted = true;
        link_.changed.notify_all();
        return;
      }
      std::copy(down->sums().begin(), down->sums().end(), values.begin());
    }
    v1::Collective collective(v1::CollectiveKind kind) {
      v1::Collective up;
      up.set_query_id(query_id_);
      up.set_sequence(sequence_);
      up.set_kind(kind);
      if (noted_) up.mutable_decided()->Add(decided_.begin(), decided_.end());
      return up;
    }
    // Sends this gateway's part and waits for the merge; nothing once the query is aborted or
    // the stream lost (the caller then keeps its own values: the engine runs on as if alone, and
    // its result is dropped).
    std::optional<v1::Collective> exchange(const v1::Collective& up) {
      const std::uint64_t sequence = sequence_++;
      if (link_.aborted) return std::nullopt;
      v1::GatewayToCoordinator message;
      *message.mutable_collective() = up;
      if (!link_.write(message)) return std::nullopt;
      std::unique_lock lock(link_.mutex);
      link_.changed.wait(lock, [&] { return link_.aborted || link_.merged.count(sequence) > 0; });
      if (link_.aborted) return std::nullopt;
      auto node = link_.merged.extract(sequence);
      return std::move(node.mapped());
    }
    Impl& link_;
    std::string query_id_;
    std::uint64_t sequence_ = 0;
    std::array<std::uint64_t, 2> decided_{};
    bool noted_ = false;
  };

  void run_query(const v1::QueryStart& start) {
    NetworkReducer reducer(*this, start.query_id());
    Expected<std::string> result =
        make_error(ErrorCode::internal_error, "gateway", "the query handler did not run");
    try {
      result = handler(start, reducer, aborted);
    } catch (const std::exception& e) {
      result = make_error(ErrorCode::internal_error, "gateway",
                          std::string("gateway: the query handler failed: ") + e.what());
    }
    if (aborted) return;  // the coordinator has given up on it: nothing to report
    v1::GatewayToCoordinator message;
    v1::QueryDone& done = *message.mutable_done();
    done.set_query_id(start.query_id());
    if (result) {
      done.set_result(*result);
    } else {
      done.set_error_code(static_cast<std::int32_t>(result.error().code));
      done.set_error_parameter(result.error().parameter);
      done.set_error_message(result.error().message);
    }
    ++queries_run;
    write(message);
  }
};

ControlLink::ControlLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlLink::~ControlLink() {
  impl_->aborted = true;
  impl_->changed.notify_all();
  impl_->context.TryCancel();
  if (impl_->reader.joinable()) impl_->reader.join();
  if (impl_->query_thread.joinable()) impl_->query_thread.join();
}

Expected<std::unique_ptr<ControlLink>> ControlLink::connect(ControlLinkOptions options,
                                                            QueryHandler handler) {
  if (!handler)
    return make_error(ErrorCode::missing_field, "handler", "a control link needs a query handler");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  // A device channel's settings (keepalive every minute), with room for a merged gather.
  grpc::ChannelArguments arguments = protocol::device_channel_arguments();
  arguments.SetMaxReceiveMessageSize(64 << 20);
  impl->channel = grpc::CreateCustomChannel(
      impl->options.coordinator_address,
      protocol::device_channel_credentials(impl->options.tls_root_certificate), arguments);
  impl->stub = v1::GatewayControl::NewStub(impl->channel);
  impl->stream = impl->stub->Attach(&impl->context);
  v1::GatewayToCoordinator hello;
  v1::GatewayHello& said = *hello.mutable_hello();
  said.set_protocol_version(1);
  said.set_gateway_id(impl->options.gateway_id);
  said.set_credential(impl->options.credential);
  said.set_users(impl->options.users);
  said.set_fleet_users_loaded(impl->options.fleet_users_loaded);
  for (const auto& [shard, epoch] : impl->options.shards) {
    auto* held = said.add_shards();
    held->set_shard(shard);
    held->set_epoch(epoch);
  }
  impl->write(hello);
  Impl* raw = impl.get();
  impl->reader = std::jthread([raw] { raw->read_loop(); });
  std::unique_lock lock(impl->mutex);
  const bool answered = impl->changed.wait_for(lock, std::chrono::seconds(10),
                                               [&] { return impl->attached || impl->ended; });
  if (!impl->attached) {
    const grpc::Status status = impl->end_status;
    lock.unlock();
    impl->context.TryCancel();
    impl->reader.join();
    if (answered && status.error_code() == grpc::StatusCode::UNAUTHENTICATED)
      return make_error(ErrorCode::unauthenticated, "credential",
                        "credential: the coordinator refused gateway " + impl->options.gateway_id);
    return make_error(ErrorCode::unavailable, "coordinator",
                      "coordinator: no Attached from " + impl->options.coordinator_address +
                          (answered ? ": " + status.error_message() : " within 10 s"));
  }
  lock.unlock();
  return std::unique_ptr<ControlLink>(new ControlLink(std::move(impl)));
}

std::int64_t ControlLink::coordinator_epoch() const noexcept {
  std::lock_guard lock(impl_->mutex);
  return impl_->epoch;
}

bool ControlLink::connected() const noexcept {
  std::lock_guard lock(impl_->mutex);
  return !impl_->ended;
}

std::uint64_t ControlLink::queries_run() const noexcept {
  return impl_->queries_run;
}

}  // namespace cgp::transport
