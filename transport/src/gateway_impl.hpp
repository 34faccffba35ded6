// Internals of DeviceGateway, shared by the gateway's stream reactor and NetworkFleet.
//
// Threading: device streams run on gRPC's completion-queue API, spread over a fixed set of
// queues with a thread each (no thread per device); the listening socket is accepted on one
// thread of ConnectionAdmission; analyst calls run on gRPC's sync pool.
// A device's replies are delivered straight into the round that asked for them (PendingRound),
// keyed by (query id, round) and by the id the stream authenticated as, never by anything the
// reply itself claims.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sodium.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "cgp/coordinator/fleet.hpp"
#include "cgp/transport/gateway.hpp"
#include "cgp/v1/service.grpc.pb.h"
#include "connection_admission.hpp"

namespace cgp::transport::detail {

using ReplyKey = std::pair<std::string, std::uint32_t>;  // (query id, round)

// Orders round keys and finds them by a reply's (query id, round) without copying the id: a
// lookup per reply.
struct ReplyKeyLess {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    return std::string_view(a.first) < std::string_view(b.first) ||
           (std::string_view(a.first) == std::string_view(b.first) && a.second < b.second);
  }
};

class GatewayCore;

// One device's stream on gRPC's completion-queue API. Its events arrive on the one queue thread
// that owns it; writes and finishes may be started from any thread (a round pushing requests,
// a reconnect replacing the stream, shutdown), so every call into gRPC is made under mutex_.
// gRPC never completes an operation inline here, so holding the mutex across the call is safe.
// The session keeps itself alive (self_) while gRPC holds any of its operations.
class Session : public std::enable_shared_from_this<Session> {
 public:
  using Stream = grpc::ServerAsyncReaderWriter<v1::CoordinatorToDevice, v1::DeviceToCoordinator>;
  enum class Op : std::uint8_t { accepted, read, write, finish };
  struct Tag {
    Session* session;
    Op op;
  };

  Session(GatewayCore& core, grpc::ServerCompletionQueue& queue) : core_(core), queue_(queue) {}
  // Waits for the next device to connect on this queue.
  void listen();
  // From the queue thread: one completed operation.
  void on_event(Op op, bool ok);

  // The device id, once its Hello was accepted (fixed from then on).
  const std::string& id() const noexcept { return id_; }
  // What the device said it runs (Hello.sdk_version; may be empty), fixed with the id.
  const std::string& sdk_version() const noexcept { return sdk_version_; }
  // Any thread. False when the stream is finishing or gone.
  bool push(v1::CoordinatorToDevice message);
  void finish(grpc::Status status);

 private:
  void on_read(bool ok);
  void on_write(bool ok);
  void start_read();  // under mutex_
  // Releases self_ once nothing is in flight; the last event's caller may be the last owner.
  void release_if_idle();

  GatewayCore& core_;
  grpc::ServerCompletionQueue& queue_;
  grpc::ServerContext context_;
  Stream stream_{&context_};
  Tag accepted_tag_{this, Op::accepted}, read_tag_{this, Op::read}, write_tag_{this, Op::write},
      finish_tag_{this, Op::finish};
  std::string id_, sdk_version_;
  v1::DeviceToCoordinator incoming_;

  std::mutex mutex_;
  std::deque<v1::CoordinatorToDevice> outgoing_;
  bool accepted_ = false, attached_ = false, reading_ = false, writing_ = false;
  bool finish_requested_ = false, finish_sent_ = false, finish_done_ = false;
  grpc::Status finish_status_;
  std::shared_ptr<Session> self_;
};

// One round in flight: where the replies go and how many are still awaited.
struct PendingRound {
  std::mutex mutex;
  std::condition_variable settled;
  bool open = true;
  std::size_t awaited = 0;
  std::size_t output_dimension = 0;
  std::unordered_map<std::string_view, std::size_t> slot_of_device;  // device id -> k
  std::vector<bool> settled_slot;
  coordinator::RoundReplies* replies = nullptr;
};

class GatewayCore {
 public:
  // Serving: a thread per completion queue, each with streams waiting for devices.
  void serve();
  // Ends every stream, stops the server and joins the queue threads.
  void shutdown();

  // Checks a Hello; the error is the status the stream finishes with.
  grpc::Status admit(const v1::Hello& hello) const;
  void attach(const std::shared_ptr<Session>& session);
  void detach(const std::shared_ptr<Session>& session);
  void deliver(const std::string& device_id, const v1::DeviceReply& reply);

  std::shared_ptr<Session> session(const std::string& id) const;
  bool open_round(const ReplyKey& key, const std::shared_ptr<PendingRound>& round);
  void close_round(const ReplyKey& key, PendingRound& round);

  void log(const std::string& line) const {
    if (log_sink) log_sink(line);
  }
  template <class Update>
  void count(Update&& update) {
    std::lock_guard lock(counters_mutex);
    update(counts);
  }

  // Streams are spread over several completion queues: Debian's libgrpc keeps gRPC's debug
  // check of outstanding operations, a linear scan of the queue's pending tags at every
  // completion, so one queue with n connected devices costs O(n) per reply.
  v1::DeviceGateway::AsyncService device_service;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  std::vector<std::thread> queue_threads;

  // Streams accepted but without a Hello yet: ended after hello_timeout, so that connections
  // that never introduce themselves do not hold resources. False (nothing recorded): the
  // pending-stream cap, in all or for `address`, is reached and the stream is to be ended.
  bool await_hello(const std::shared_ptr<Session>& session, std::string address);
  void hello_done(const Session* session);
  std::chrono::milliseconds hello_timeout{10000};
  ConnectionLimits limits;
  std::mutex hello_mutex;
  std::condition_variable hello_changed;
  struct AwaitingHello {
    std::weak_ptr<Session> session;
    std::chrono::steady_clock::time_point deadline;
    std::string address;
  };
  std::unordered_map<const Session*, AwaitingHello> awaiting_hello;
  std::unordered_map<std::string, std::size_t> pending_per_address;
  void forget_pending(std::unordered_map<const Session*, AwaitingHello>::iterator it);  // locked
  bool hello_stop = false;
  std::thread hello_sweeper;
  std::vector<std::unique_ptr<grpc::Service>> endpoints;  // further services (analyst)
  std::unique_ptr<ConnectionAdmission> admission;         // the listening socket
  std::unique_ptr<grpc::Server> server;
  std::map<std::string, CredentialSha256> credential_digests;  // device id -> SHA-256, fixed
  mutable std::mutex revoked_mutex;
  std::set<std::string, std::less<>> revoked;  // device ids refused from now on
  int port = 0;
  std::function<void(const std::string&)> log_sink;

  mutable std::mutex mutex;  // sessions
  mutable std::condition_variable changed;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions;
  bool shutting_down = false;

  std::mutex rounds_mutex;
  std::map<ReplyKey, std::shared_ptr<PendingRound>, ReplyKeyLess> rounds;

  mutable std::mutex counters_mutex;
  GatewayCounters counts;
};

}  // namespace cgp::transport::detail
